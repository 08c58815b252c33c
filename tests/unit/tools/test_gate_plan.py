"""The gate's budget (bench/gate_plan.py, tests/conftest.py): which tests the gate leaves to the
full tier, by the rule, from made-up seconds; the list in the repository names only tests that
exist and leaves every test file something in the gate."""

import json

from bench import gate_plan
from tests.conftest import FULL_TIER, full_tier


def test_the_rule(monkeypatch):
    monkeypatch.setattr(gate_plan, "PROOFS", ("tests/p.py::", "tests/q.py::t[b]"))
    seconds = {
        # the cheapest case and the cases under a second stay
        "tests/a.py::t[64]": 3.0, "tests/a.py::t[512]": 2.0, "tests/a.py::t[x]": 0.9,
        "tests/a.py::t[y]": 0.5,
        "tests/a.py::u": 30.0,                                  # too slow: all of it goes
        "tests/a.py::v[1]": 9.0, "tests/a.py::v[2]": 12.0,      # cheapest over the limit
        "tests/a.py::test_parameters": 20.0,                    # a parameter check stays
        "tests/p.py::t": 300.0, "tests/p.py::w[1]": 100.0, "tests/p.py::w[2]": 90.0,
        "tests/q.py::t[a]": 1.5, "tests/q.py::t[b]": 40.0,      # the proof case, not the other
    }
    moved, kept = gate_plan.plan(seconds)
    assert set(kept) == {"tests/a.py::t[x]", "tests/a.py::t[y]", "tests/a.py::test_parameters",
                         "tests/p.py::t", "tests/p.py::w[1]", "tests/p.py::w[2]",
                         "tests/q.py::t[b]"}
    assert moved == sorted(set(seconds) - set(kept))
    assert kept["tests/p.py::t"] == 300.0


def test_builds_are_not_the_tests_time(tmp_path):
    log = tmp_path / "builds.jsonl"
    log.write_text("\n".join(json.dumps(e) for e in [
        {"kind": "verilator", "seconds": 40.0, "wait_seconds": 2.0, "test": "tests/a.py::t"},
        {"kind": "board", "seconds": 9.0},
        {"kind": "verilator", "seconds": 1.0, "test": "tests/a.py::t"}]) + "\n")
    assert gate_plan.build_seconds(log) == {"tests/a.py::t": 43.0}
    assert gate_plan.build_seconds(tmp_path / "none.jsonl") == {}


def test_the_list_names_existing_tests_of_real_files():
    names = full_tier()
    assert names and all("::" in n and n.startswith("tests/") for n in names)
    root = FULL_TIER.parent.parent
    assert all((root / n.split("::", 1)[0]).is_file() for n in names)
    # the proofs are never in it
    assert not [n for n in names if gate_plan.is_proof(n)]


def test_comments_and_blank_lines_are_not_tests(tmp_path):
    f = tmp_path / "list.txt"
    f.write_text("# a comment\n\n  tests/a.py::t[1]  \n  # another\n")
    assert full_tier(f) == {"tests/a.py::t[1]"}
