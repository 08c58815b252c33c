"""The package's layers import downwards only, at module level and inside functions alike, and the
host agent on a real RDMA NIC never imports Amaranth, cocotb or scapy.

Layers, lowest first: ``wire`` (what the wire defines), ``gateware`` (the core), ``boards`` and
``sim`` (models, test infrastructure, the cocotb sides of the simulation tools, the simulation
tools), ``tools``, and the command line ``cli`` on top. Inside ``sim``, the models
(``sim.models``) are plain Python on ``wire`` alone, and the test infrastructure
(``sim.testing``) stands on the models and the layers below ``sim``. ``host``
(``rocegen-host``) stands on ``wire``; its simulated NIC (``--sim``) reaches the models when it
is used, and only then.
"""

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.pyast import parse

ROOT = Path(__file__).resolve().parents[2]
#: package of the project -> folder
PACKAGES = {"wire": "wire", "gateware": "gateware", "boards": "boards", "sim": "sim",
            "tools": "tools", "cli": "cli", "host": "sw"}
#: what each package or subpackage may import (besides itself, the standard library and
#: third-party packages), wherever the import is; a subpackage listed here has its own rule,
#: else its package's applies
ALLOWED = {
    "wire": set(),
    "gateware": {"wire"},
    "boards": {"wire", "gateware"},
    "sim": {"wire", "gateware", "boards"},
    "sim.models": {"wire"},
    "sim.testing": {"wire", "gateware", "boards", "sim.models"},
    "tools": {"wire", "gateware", "boards"},
    "cli": {"wire", "gateware", "boards", "sim", "tools"},
    "host": {"wire"},
}
#: what a package may import only inside a function, when that function runs: the host's
#: simulated NIC (``--sim``) drives the host NIC model
LAZY = {"host": {"sim.models"}}
#: third-party packages a package or subpackage must not import anywhere
FORBIDDEN = {
    "wire": {"cocotb", "cocotb_tools", "cocotbext", "scapy"},
    "sim.models": {"amaranth", "cocotb", "cocotb_tools", "cocotbext", "scapy"},
    "host": {"amaranth", "cocotb", "cocotb_tools", "cocotbext", "scapy"},
}
#: third-party packages a package must not need at module level (``wire`` builds Amaranth
#: layouts from its header table when asked, for the gateware)
FORBIDDEN_AT_TOP = {"wire": {"amaranth"}}
#: files allowed a third-party package their layer forbids, and why. The network stack's
#: reference model answers with frames scapy builds, on purpose independent of the project's
#: header table; the host never reaches it (the host NIC model it drives is checked at run time
#: with scapy blocked, below)
EXCEPTIONS = {"sim/models/net/netstack.py": {"scapy"}}


class _Import:
    """One import statement: the module it names (``from m import a, b``: ``m``), the names it
    takes from it, its line, and whether it runs only when a function runs (``lazy``)."""

    def __init__(self, module, names, line, lazy):
        self.module, self.names, self.line, self.lazy = module, names, line, lazy

    def modules(self):
        """What the statement may import: ``m`` for ``import m``; ``m.a`` and ``m.b`` for
        ``from m import a, b`` (each a module or a name in ``m``)."""
        if not self.names:
            return [self.module]
        return [f"{self.module}.{n}" if self.module[-1:] != "." else self.module + n
                for n in self.names if n != "*"] or [self.module]

    def __str__(self):
        if not self.names:
            return f"import {self.module}"
        return f"from {self.module} import {', '.join(self.names)}"


def _imports(path):
    """Every import statement of the file ``path``, at any depth (module level, ``try``/``if``
    blocks, class bodies, functions). The parse runs in a process of its own: CPython 3.11
    keeps the AST builder's recursion count per interpreter, not per thread, so a parse while
    another thread of a long test process compiles fails with "AST constructor recursion depth
    mismatch"."""
    return [_Import(*i) for i in _parsed(str(path))]


#: The imports of each file parsed so far (path -> statements as tuples).
_PARSED = {}


def _parsed(path):
    if path not in _PARSED:
        # the first call parses every file of the packages at once, later ones their own file
        every = set() if _PARSED else {str(p) for package in PACKAGES for p in _files(package)}
        files = sorted(every | {path})
        code = ("import json, sys\nfrom pathlib import Path\n"
                "from tests.unit.test_layers import _imports_here\n"
                "print(json.dumps({p: [(i.module, i.names, i.line, i.lazy) "
                "for i in _imports_here(Path(p))] for p in json.load(sys.stdin)}))")
        out = subprocess.run([sys.executable, "-c", code], input=json.dumps(files), cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        _PARSED.update({p: [tuple(i) for i in found] for p, found in json.loads(out).items()})
    return _PARSED[path]


def _imports_here(path):
    """:func:`_imports` in this process."""
    found = []

    def visit(node, lazy):
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend(_Import(a.name, [], child.lineno, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.append(_Import("." * child.level + (child.module or ""),
                                     [a.name for a in child.names], child.lineno, lazy))
            visit(child, inner)

    visit(parse(path.read_text()), False)
    return found


def _files(package):
    return sorted((ROOT / PACKAGES[package]).rglob("*.py"))


def _module_of(package, path):
    """The dotted name (below ``rocegen``) of the module in ``path`` of ``package``."""
    rel = path.relative_to(ROOT / PACKAGES[package]).with_suffix("")
    return ".".join([package, *[p for p in rel.parts if p != "__init__"]])


def _within(name, unit):
    return name == unit or name.startswith(unit + ".")


def _unit(name):
    """The package or subpackage whose rule governs the module ``name`` (below ``rocegen``)."""
    return max((u for u in ALLOWED if _within(name, u)), key=len)


def _target(module):
    """The module below ``rocegen`` an import names, or None (not of this project)."""
    parts = module.split(".")
    return ".".join(parts[1:]) if parts[0] == "rocegen" and len(parts) > 1 else None


def violations(package, path, imports):
    """Each import of ``imports`` (of the file ``path`` of ``package``) that breaks the rules
    above, as ``file:line imports module`` (or ``needs`` for a third-party package), with the
    rule it breaks."""
    me = _unit(_module_of(package, path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    wrong = []
    for imp in imports:
        lazily = " (inside a function)" if imp.lazy else ""
        allowed = {me} | ALLOWED[me] | (LAZY.get(me, set()) if imp.lazy else set())
        upward = sorted({t for m in imp.modules() if (t := _target(m))
                         and not any(_within(t, a) for a in allowed)})
        if upward:
            wrong.append(f"{where}:{imp.line} {imp}{lazily}: {me} may import only "
                         f"{', '.join(sorted(allowed))}")
        top = imp.module.split(".")[0]
        excused = top in EXCEPTIONS.get(str(where), ())
        if not excused and (top in FORBIDDEN.get(me, ())
                            or (not imp.lazy and top in FORBIDDEN_AT_TOP.get(me, ()))):
            wrong.append(f"{where}:{imp.line} {imp}{lazily}: {me} must not need {top}")
    return wrong


@pytest.mark.parametrize("package", list(PACKAGES))
def test_layers_import_downwards_only(package):
    """Every import of every module, at module level and inside functions."""
    wrong = [w for path in _files(package) for w in violations(package, path, _imports(path))]
    assert not wrong, f"{len(wrong)} imports against the layers:\n" + "\n".join(wrong)


def test_relative_imports_are_not_used():
    """Absolute imports everywhere: a module's imports read the same wherever it is."""
    wrong = [f"{p.relative_to(ROOT)}:{i.line} {i}" for package in PACKAGES
             for p in _files(package) for i in _imports(p) if i.module.startswith(".")]
    assert not wrong, "\n".join(wrong)


def test_only_entry_points_import_the_command_line():
    wrong = [f"{path.relative_to(ROOT)}:{i.line} {i}"
             for package in PACKAGES if package != "cli" for path in _files(package)
             for i in _imports(path) if any(_within(_target(m) or "", "cli") for m in i.modules())]
    assert not wrong, "\n".join(wrong)


#: folders of the repository beside the package: the package never imports them
OUTSIDE = ("tests", "bench", "examples")


def _strings(path):
    return [(n.value, n.lineno) for n in ast.walk(parse(path.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_the_package_never_reaches_the_tests_or_the_benchmarks():
    """No module of the package imports the tests, the benchmark scripts or the examples, nor
    runs a testbench of the tests (a module name given to the cocotb runner); every testbench
    module it names exists."""
    wrong = []
    for package in PACKAGES:
        for path in _files(package):
            where = path.relative_to(ROOT)
            wrong += [f"{where}:{i.line} {i}" for i in _imports(path)
                      if i.module.split(".")[0] in OUTSIDE]
            for text, line in _strings(path):
                if text.split(".")[0] in OUTSIDE and text.count(".") and " " not in text \
                        and not text.endswith((".py", ".json")):
                    wrong.append(f"{where}:{line} names {text}")
                if text.startswith("rocegen.sim.cocotb.") and " " not in text and not (
                        ROOT / "sim" / "cocotb" / f"{text.split('.')[3]}.py").is_file():
                    wrong.append(f"{where}:{line} names {text}, which does not exist")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package, source", [
    ("gateware", "from rocegen.sim.models import rnic\n"),
    ("gateware", "def f():\n    import rocegen.sim.testing.fuzz\n"),
    ("sim", "class A:\n    def f(self):\n        from rocegen.tools import synth\n"),
    ("host", "def f():\n    from rocegen.sim.apps import bridge\n"),
    ("host", "def f():\n    import scapy.layers.l2\n"),
    ("host", "try:\n    import amaranth\nexcept ImportError:\n    pass\n"),
    ("wire", "def f():\n    from scapy.packet import Raw\n"),
])
def test_the_layer_rules_catch_a_wrong_import(tmp_path, package, source):
    """The scan sees an upward or forbidden import wherever it is (so the test above can
    fail), and names it."""
    path = ROOT / PACKAGES[package] / "example.py"
    found = violations(package, path, _imports(_written(tmp_path, source)))
    statement = next(line.strip() for line in source.splitlines() if "import " in line)
    line = 1 + source[:source.index(statement)].count("\n")
    assert len(found) == 1 and f"example.py:{line} {statement}" in found[0], found


@pytest.mark.parametrize("name, source", [
    ("sim/models/example.py", "from rocegen.gateware.roce import layouts\n"),
    ("sim/models/example.py", "def f():\n    from rocegen.sim.testing import scenarios\n"),
    ("sim/models/example.py", "def f():\n    from rocegen.sim.apps.bridge import encode_frame\n"),
    ("sim/models/example.py", "from scapy.layers.inet import IP\n"),
    ("sim/models/example.py", "from amaranth.lib import data\n"),
    ("sim/testing/example.py", "def f():\n    from rocegen.sim.apps import bridge\n"),
])
def test_the_model_rules_catch_a_wrong_import(tmp_path, name, source):
    found = violations("sim", ROOT / name, _imports(_written(tmp_path, source)))
    assert len(found) == 1, found


@pytest.mark.parametrize("package, source", [
    ("host", "def f():\n    from rocegen.sim.models.rnic import Rnic\n"),
    ("host", "from rocegen.wire import roce\n"),
    ("sim", "def f():\n    from rocegen.boards import core\n"),
    ("cli", "from rocegen.tools import synth\n"),
    ("wire", "def f():\n    from amaranth.lib import data\n"),
])
def test_the_layer_rules_let_a_right_import_be(tmp_path, package, source):
    path = ROOT / PACKAGES[package] / "example.py"
    assert violations(package, path, _imports(_written(tmp_path, source))) == []


def _written(tmp_path, source):
    path = tmp_path / "example.py"
    path.write_text(source)
    return path


#: installed first in a Python process: the packages named in ``BLOCKED`` cannot be imported,
#: and every attempt is recorded in ``ATTEMPTS`` (a caller that catches the ImportError is
#: still seen)
_BLOCKER = textwrap.dedent("""
    import importlib.abc, sys

    ATTEMPTS = []

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                ATTEMPTS.append(name)
                raise ImportError(f"{name} is not installed here")
            return None

    sys.meta_path.insert(0, Block())
""")


def _blocked(*names):
    return f"BLOCKED = {names!r}\n" + _BLOCKER


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_host_agent_runs_without_amaranth():
    """``rocegen-host`` (and the wire package it uses) in a Python where Amaranth and cocotb cannot
    be imported: it imports, packs a connection-manager request, and its command line answers."""
    code = _blocked("amaranth", "cocotb") + textwrap.dedent("""
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
        assert not ATTEMPTS, ATTEMPTS
        print("host ok")
    """)
    r = _run(code)
    assert r.returncode == 0, r.stderr
    assert "host ok" in r.stdout and "usage: rocegen-host" in r.stdout


def test_amaranth_blocker_works():
    """The blocker above really hides Amaranth (so the test above can fail)."""
    r = _run(_blocked("amaranth", "cocotb") + "import rocegen.gateware.lib.stream\n")
    assert r.returncode != 0 and "amaranth is not installed here" in r.stderr


def test_blocker_sees_a_caught_import():
    """An import that fails and is caught is still recorded (so the test below can fail)."""
    r = _run(_blocked("scapy") + textwrap.dedent("""
        try:
            import scapy.layers.l2
        except ImportError:
            pass
        print(ATTEMPTS)
    """))
    assert r.returncode == 0 and "['scapy']" in r.stdout, r.stderr


def test_host_agent_on_verbs_never_imports_scapy_amaranth_or_cocotb(tmp_path):
    """The host agent on a real NIC (pyverbs; here the fake one of :mod:`tests.fake_pyverbs`) in a
    Python where scapy, Amaranth and cocotb cannot be imported: every verb of its NIC, then the
    agent's own start against a connection manager (the host NIC model's FPGA, in this
    process), which opens and connects one QP and stops at the second, which the FPGA does not
    have. Nothing tried to import the blocked packages, even inside a function."""
    from tests.unit.host.test_cm_client import ModelFpga

    fpga = ModelFpga(num_qps=1)
    config = {"device": "fake0", "fpga_ip": "10.0.0.2", "cm_host": "127.0.0.1",
              "cm_port": fpga.port, "listen_port": 0, "local_ip": None, "port": 1,
              "gid_index": None, "qps": 2, "window": 4096, "recv_depth": 4, "recv_size": 4096,
              "reply_timeout": 0.3, "retries": 2, "socket": str(tmp_path / "agent.sock"),
              "keep": False, "pmtu": 1024, "timeout": None, "retry_cnt": None, "rnr_retry": None}
    code = _blocked("amaranth", "cocotb", "cocotb_tools", "cocotbext", "scapy") + textwrap.dedent(f"""
        import io, json
        from tests.fake_pyverbs import modules
        sys.modules.update(modules())
        from rocegen.host import agent, cli
        from rocegen.host.nic import VerbsNic, open_nic

        nic = open_nic("fake0")
        assert isinstance(nic, VerbsNic)
        qpn = nic.create_qp(4)
        addr, rkey = nic.register(8192)
        nic.connect_qp(qpn, 256, "10.0.0.2", 0x123, 1024)
        nic.post_recv(qpn, 0, addr, 1024)
        nic.write(addr, bytes(range(64)))
        nic.fill(addr + 64, 64, 7)
        assert nic.read(addr, 65) == bytes(range(64)) + b"\\x07"
        for op, imm in (("WRITE", None), ("WRITE_IMM", 5), ("SEND", None), ("SEND_IMM", 5),
                        ("READ", None)):
            nic.post_send(qpn, 1, op, addr, 64, remote_addr=0x1000, rkey=7, imm=imm)
        nic.poll(64), nic.poll_send(64), nic.counters(), nic.read_limits()
        nic.qp_error(qpn)
        nic.destroy_qp(qpn)
        nic.close()

        out = io.StringIO()
        sys.stdout, real = out, sys.stdout
        rc = agent.main(["--config", {json.dumps(json.dumps(config))}])
        sys.stdout = real
        replies = [json.loads(line) for line in out.getvalue().splitlines()]
        assert rc == 1 and replies[-1]["kind"] == "no_qp", (rc, replies)
        assert not ATTEMPTS, ATTEMPTS
        assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        print("verbs ok")
    """)
    try:
        r = _run(code)
    finally:
        fpga.close()
    assert r.returncode == 0, r.stderr
    assert "verbs ok" in r.stdout


def _graph(*, lazy):
    """Module -> the project's modules it imports (at module level; ``lazy``: also inside
    functions)."""
    graph = {}
    for package in PACKAGES:
        for path in _files(package):
            graph[_module_of(package, path)] = {
                t for i in _imports(path) if lazy or not i.lazy
                for m in i.modules() if (t := _target(m))}
    return graph


def _cycles(graph):
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

    for node in sorted(graph):
        if node not in state:
            visit(node)
    # a package's __init__ that imports its own submodule is not a cycle of concern
    return sorted({c for c in cycles
                   if not all(_within(n, c.split(" -> ")[0]) for n in c.split(" -> "))})


@pytest.mark.parametrize("lazy", [False, True], ids=["module-level", "with-functions"])
def test_no_import_cycle_between_modules(lazy):
    """The module import graph of the project's modules has no cycle, neither at module level
    nor counting the imports inside functions."""
    cycles = _cycles(_graph(lazy=lazy))
    assert not cycles, "\n".join(cycles)


def test_cycle_finder_finds_a_cycle():
    graph = {"sim.a": {"sim.b.x"}, "sim.b": {"sim.c"}, "sim.c": {"sim.a"}, "wire": set()}
    assert _cycles(graph) == ["sim.a -> sim.b -> sim.c -> sim.a"]
