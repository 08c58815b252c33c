"""The package's layers import downwards only, and the host agent runs without Amaranth.

Layers, lowest first: ``wire`` (what the wire defines), ``gateware`` (the core), ``boards`` and
``sim`` (models, test infrastructure, testbenches, simulation tools), ``tools``, and the command
line ``cli`` on top. ``host`` (``rocegen-host``) stands on ``wire`` alone; its simulated NIC
reaches into ``sim`` only when it is used.
"""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: package of the project -> folder
PACKAGES = {"wire": "wire", "gateware": "gateware", "boards": "boards", "sim": "sim",
            "tools": "tools", "cli": "cli", "host": "sw"}
#: what each package may import at module level (besides itself, the standard library and
#: third-party packages)
ALLOWED = {
    "wire": set(),
    "gateware": {"wire"},
    "boards": {"wire", "gateware"},
    "sim": {"wire", "gateware", "boards"},
    "tools": {"wire", "gateware", "boards"},
    "cli": {"wire", "gateware", "boards", "sim", "tools"},
    "host": {"wire"},
}
#: third-party packages a layer must not need at module level
FORBIDDEN_THIRD_PARTY = {"wire": {"amaranth", "cocotb", "scapy"}, "host": {"amaranth", "cocotb"}}


def _imports(path, *, module_level):
    """(imported module, line) of every absolute import in ``path`` (module level only, or all)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.level:
                yield "." * node.level + node.module, node.lineno
            else:
                yield node.module, node.lineno
        elif isinstance(node, ast.Try | ast.If) and module_level:
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                    yield sub.module, sub.lineno


def _files(package):
    return sorted((ROOT / PACKAGES[package]).rglob("*.py"))


def _layer(module):
    parts = module.split(".")
    if parts[0] == "rocegen" and len(parts) > 1:
        return parts[1]
    return None


@pytest.mark.parametrize("package", list(PACKAGES))
def test_layers_import_downwards_only(package):
    wrong = []
    for path in _files(package):
        for module, line in _imports(path, module_level=True):
            layer = _layer(module)
            if layer and layer != package and layer not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
            if module.split(".")[0] in FORBIDDEN_THIRD_PARTY.get(package, ()):
                wrong.append(f"{path.relative_to(ROOT)}:{line} needs {module}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", ["gateware", "wire"])
def test_core_never_reaches_up_even_inside_functions(package):
    wrong = [f"{p.relative_to(ROOT)}:{line} imports {m}"
             for p in _files(package) for m, line in _imports(p, module_level=False)
             if _layer(m) and _layer(m) != package and _layer(m) not in ALLOWED[package]]
    assert not wrong, "\n".join(wrong)


def test_relative_imports_are_not_used():
    """Absolute imports everywhere: a module's imports read the same wherever it is."""
    wrong = [f"{p.relative_to(ROOT)}:{line}" for package in PACKAGES for p in _files(package)
             for m, line in _imports(p, module_level=False) if m.startswith(".")]
    assert not wrong, "\n".join(wrong)


def test_only_entry_points_import_the_command_line():
    wrong = []
    for package in PACKAGES:
        if package == "cli":
            continue
        for path in _files(package):
            for module, line in _imports(path, module_level=False):
                if _layer(module) == "cli":
                    wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_the_layer_rules_catch_an_upward_import(tmp_path):
    """The scan sees a module-level upward import (so the tests above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom rocegen.sim.models import rnic\n")
    assert [m for m, _ in _imports(bad, module_level=True)] == ["os", "rocegen.sim.models"]
    assert _layer("rocegen.sim.models") not in ALLOWED["gateware"]


_NO_AMARANTH = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("amaranth", "cocotb"):
                raise ImportError(f"{name} is not installed here")
            return None

    sys.meta_path.insert(0, Block())
""")


def test_host_agent_runs_without_amaranth():
    """``rocegen-host`` (and the wire package it uses) in a Python where Amaranth and cocotb cannot
    be imported: it imports, packs a connection-manager request, and its command line answers."""
    code = _NO_AMARANTH + textwrap.dedent("""
        import rocegen.host, rocegen.host.cli, rocegen.host.agent, rocegen.host.cm_client
        from rocegen.wire import cm
        raw = cm.request(cm.REQ_OPEN_QP, loc_qpn=0x123, pmtu_code=cm.pmtu_code(1024))
        assert len(raw) == 64 and cm.unpack(raw)["loc_qpn"] == 0x123
        assert "amaranth" not in sys.modules
        sys.argv = ["rocegen-host", "--help"]
        try:
            rocegen.host.cli.main()
        except SystemExit as e:
            assert e.code == 0, e.code
        print("host ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "host ok" in r.stdout and "usage: rocegen-host" in r.stdout


def test_amaranth_blocker_works():
    """The blocker above really hides Amaranth (so the test above can fail)."""
    code = _NO_AMARANTH + "import rocegen.gateware.lib.stream\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and "amaranth is not installed here" in r.stderr


def test_no_import_cycle_between_modules():
    """The module import graph (module-level imports of rocegen modules) has no cycle."""
    graph = {}
    for package, folder in PACKAGES.items():
        for path in _files(package):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join(["rocegen", package, *parts])
            deps = set()
            for module, _ in _imports(path, module_level=True):
                if module.startswith("rocegen."):
                    deps.add(module)
            graph[name] = deps

    def resolve(module):
        while module and module not in graph:
            module = module.rpartition(".")[0]
        return module

    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            dep = resolve(dep)
            if not dep or dep == node:
                continue
            if state.get(dep) == 1:
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in state:
            visit(node)
    # a package's __init__ that imports its own submodule is not a cycle of concern
    cycles = [c for c in cycles if not all(n.startswith(c.split(" -> ")[0]) for n in c.split(" -> "))]
    assert not cycles, "\n".join(cycles)
