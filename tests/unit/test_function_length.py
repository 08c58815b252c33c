"""No function of the gateware is longer than a screen: elaborates are split along their
stages, the endpoint composes feature blocks."""

import ast
from pathlib import Path

from tests.pyast import parse

GATEWARE = Path(__file__).resolve().parents[2] / "gateware"
MAX_LINES = 120


def long_functions(root=GATEWARE, limit=MAX_LINES):
    """``[(lines, "file:line name")]`` of the functions of ``root`` longer than ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append((lines, f"{path.relative_to(root.parent)}:{node.lineno} "
                                         f"{node.name}"))
    return found


def test_no_function_is_longer_than_120_lines():
    offenders = long_functions()
    assert not offenders, "functions longer than 120 lines:\n" + "\n".join(
        f"  {n} lines: {where}" for n, where in sorted(offenders, reverse=True))


def test_the_scan_finds_a_long_function(tmp_path):
    (tmp_path / "m.py").write_text("def f():\n" + "    x = 1\n" * 130)
    assert long_functions(tmp_path) == [(131, f"{tmp_path.name}/m.py:1 f")]
