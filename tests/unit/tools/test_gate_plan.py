"""The gate's budget (bench/gate_plan.py, tests/conftest.py): which tests the gate leaves to the
full tier, by the rule, from made-up seconds; the list in the repository names only tests that
exist and leaves every test file something in the gate."""

import json

from bench import gate_plan
from bench.gate_plan import LIST as FULL_TIER
from bench.gate_plan import full_tier


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


def test_a_new_plan_keeps_what_the_report_could_not_measure(tmp_path, monkeypatch):
    """The tests the list moved are not in a later gate's report: they stay listed; a listed
    test the report measured again is planned again."""
    listed = tmp_path / "full_tier.txt"
    listed.write_text("# list\ntests/a.py::old\ntests/a.py::t[2]\n")
    monkeypatch.setattr(gate_plan, "LIST", listed)
    report = tmp_path / "pytest.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest" tests="3" time="9">'
        '<testcase classname="tests.a" name="t[1]" time="1.5"/>'
        '<testcase classname="tests.a" name="t[2]" time="1.2"/>'
        '<testcase classname="tests.a" name="slow" time="30"/>'
        '</testsuite></testsuites>')
    monkeypatch.setattr(gate_plan, "parse_junit",
                        lambda path: gate_plan_parse(path, tmp_path))
    assert gate_plan.main(["--junitxml", str(report), "--write"]) == 0
    assert full_tier(listed) == {"tests/a.py::old", "tests/a.py::t[1]", "tests/a.py::slow"}


def gate_plan_parse(path, root):
    from bench.bench_test_time import parse_junit
    (root / "tests").mkdir(exist_ok=True)
    (root / "tests" / "a.py").write_text("")
    return parse_junit(path, root)
