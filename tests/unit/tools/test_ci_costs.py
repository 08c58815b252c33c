"""The figures of what a CI run cost: the build log of :mod:`rocegen.gateware.costlog` (written by
parallel processes), the per-file sums of pytest's JUnit report (``bench/bench_test_time.py``) and
the table ``.ci/run`` prints (``bench/ci_time.py``), from hand-made inputs."""

import json
import subprocess
import sys
import textwrap

from bench import ci_time
from bench.bench_test_time import parse_junit
from rocegen.gateware import costlog

WRITER = """
import sys
from rocegen.gateware import costlog
for i in range(int(sys.argv[1])):
    costlog.record("verilator", f"w{sys.argv[2]}-{i}", "reused", 0.001, note="x" * 300)
"""


def test_lines_of_parallel_processes_do_not_mix(tmp_path):
    log = tmp_path / "sub" / "builds.jsonl"
    env = {"ROCEGEN_COST_LOG": str(log), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, "200", str(n)], env=env,
                              cwd=tmp_path) for n in range(4)]
    assert [p.wait() for p in procs] == [0] * 4
    lines = log.read_text().splitlines()
    entries = [json.loads(line) for line in lines]          # every line whole
    assert sorted(e["name"] for e in entries) == sorted(f"w{n}-{i}" for n in range(4)
                                                         for i in range(200))
    assert {e["kind"] for e in entries} == {"verilator"} and len({e["pid"] for e in entries}) == 4


def test_the_log_can_be_turned_off_or_moved(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCEGEN_COST_LOG", "")
    assert costlog.cost_log_path() is None
    costlog.record("yosys", "x", "cache", 1.0)              # nothing written, no error
    monkeypatch.setenv("ROCEGEN_COST_LOG", str(tmp_path / "no-dir-yet" / "log.jsonl"))
    costlog.record("yosys", "x", "synthesized", 1.23456, lut_total=7)
    (entry,) = [json.loads(line) for line in (tmp_path / "no-dir-yet" / "log.jsonl").open()]
    assert entry["seconds"] == 1.235 and entry["lut_total"] == 7 and entry["source"] == "synthesized"
    monkeypatch.setenv("ROCEGEN_COST_LOG", str(tmp_path))   # a directory: skipped silently
    costlog.record("yosys", "x", "cache", 1.0)


JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="5" time="80.5">
<testcase classname="tests.unit.test_a" name="test_one" time="10.0"/>
<testcase classname="tests.unit.test_a.TestGroup" name="test_two[x]@grp" time="5.5"/>
<testcase classname="tests.test_b" name="test_three@rxe" time="30.0"><failure message="no"/></testcase>
<testcase classname="tests.test_b" name="test_four" time="0.5"><skipped message="later"/></testcase>
<testcase classname="tests.test_c" name="test_five[a@b]" time="1.0"/>
</testsuite></testsuites>
"""


def _checkout(tmp_path):
    for f in ("tests/unit/test_a.py", "tests/test_b.py", "tests/test_c.py"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    (tmp_path / "pytest.xml").write_text(JUNIT)


def test_junit_report_per_test_and_per_file(tmp_path):
    _checkout(tmp_path)
    tests, counts = parse_junit(tmp_path / "pytest.xml", root=tmp_path)
    assert tests == {"tests/unit/test_a.py::test_one": 10.0,
                     "tests/unit/test_a.py::TestGroup::test_two[x]": 5.5,
                     "tests/test_b.py::test_three": 30.0, "tests/test_b.py::test_four": 0.5,
                     "tests/test_c.py::test_five[a@b]": 1.0}
    assert counts == {"tests": 5, "passed": 3, "failed": 1, "errors": 0, "skipped": 1,
                      "seconds": 80.5}


def test_the_table_of_a_run(tmp_path, monkeypatch):
    _checkout(tmp_path)
    monkeypatch.setattr(ci_time, "parse_junit",
                        lambda path: parse_junit(path, root=tmp_path))
    t0 = 1_000_000.0
    phases = [("setup", t0, t0 + 20, 0), ("tshark", t0 + 20, t0 + 21, 0),
              ("synth-check", t0 + 21, t0 + 121, 1), ("test", t0 + 121, t0 + 221, 1)]
    (tmp_path / "phases.jsonl").write_text("".join(
        json.dumps({"phase": n, "start": a, "end": b, "status": s}) + "\n" for n, a, b, s in phases))
    builds = [
        {"t": t0 - 500, "kind": "yosys", "name": "of-an-earlier-run", "source": "synthesized",
         "seconds": 9.0},
        {"t": t0 + 60, "kind": "yosys", "name": "endpoint_w512", "source": "synthesized",
         "seconds": 61.0, "synth_seconds": 60.0, "lut_total": 37001, "lut_levels": 11},
        {"t": t0 + 62, "kind": "yosys", "name": "endpoint_w64", "source": "cache",
         "seconds": 1.5, "synth_seconds": 30.0, "lut_total": 18214, "lut_levels": 12},
        {"t": t0 + 130, "kind": "verilator", "name": "endpoint-aa", "source": "compiled",
         "seconds": 90.0, "wait_seconds": 0.0, "design": "EndpointTop",
         "params": {"width": 64, "num_qps": 8}, "test": "tests/test_b.py::test_x"},
        {"t": t0 + 131, "kind": "verilator", "name": "endpoint-aa", "source": "reused",
         "seconds": 0.0, "wait_seconds": 88.0, "design": "EndpointTop",
         "params": {"width": 64, "num_qps": 8}, "test": "tests/test_b.py::test_y"},
        {"t": t0 + 132, "kind": "verilator", "name": "icrc-bb", "source": "reused", "seconds": 0.1},
        {"t": t0 + 140, "kind": "yosys", "name": "test_chain0", "source": "synthesized",
         "seconds": 4.0},
        {"t": t0 + 141, "kind": "board", "name": "au250", "source": "built", "seconds": 12.0,
         "what": "build folder"},
        {"t": t0 + 142, "kind": "board", "name": "vcu118", "source": "reused", "seconds": 0.0,
         "what": "build folder"},
        {"t": t0 + 143, "kind": "board", "name": "au250", "source": "reused", "seconds": 0.5,
         "what": "lint"},
    ]
    (tmp_path / "builds.jsonl").write_text(
        "".join(json.dumps(b) + "\n" for b in builds) + '{"t": 1, "kind": "yos')   # cut short
    fig = ci_time.collect(tmp_path / "phases.jsonl", tmp_path / "builds.jsonl",
                          tmp_path / "pytest.xml", since=t0, top=2)
    assert [(p["phase"], p["seconds"], p["status"]) for p in fig["phases"]] == [
        ("setup", 20.0, 0), ("tshark", 1.0, 0), ("synth-check", 100.0, 1), ("test", 100.0, 1)]
    assert fig["total_seconds"] == 221.0
    assert [(y["name"], y["source"]) for y in fig["synth_check"]] == [
        ("endpoint_w512", "synthesized"), ("endpoint_w64", "cache")]
    assert fig["other_yosys_runs"] == {"runs": 1, "seconds": 4.0}
    assert fig["verilator_builds"] == [
        {"name": "endpoint-aa", "source": "compiled", "seconds": 90.0, "wait_seconds": 88.0,
         "records": 2, "design": "EndpointTop", "params": {"width": 64, "num_qps": 8},
         "tests": ["tests/test_b.py::test_x", "tests/test_b.py::test_y"]},
        {"name": "icrc-bb", "source": "reused", "seconds": 0.1, "wait_seconds": 0.0, "records": 1,
         "tests": []}]
    assert fig["board_builds"] == {"build folder": {"made": 1, "kept": 1, "seconds": 12.0},
                                   "lint": {"made": 0, "kept": 1, "seconds": 0.5}}
    assert fig["pytest"]["seconds"] == 80.5 and fig["pytest"]["test_seconds"] == 47.0
    assert fig["slowest_files"] == [{"file": "tests/test_b.py", "seconds": 30.5, "tests": 2},
                                    {"file": "tests/unit/test_a.py", "seconds": 15.5, "tests": 2}]
    text = "\n".join(ci_time.table(fig, top=2))
    assert "synthesis check (make synth-check)" in text and "FAILED (status 1)" in text
    assert "Yosys endpoint_w64" in text and "from the cache" in text
    assert "1 compiled (90 s), 1 from earlier builds" in text
    assert "EndpointTop(num_qps=8, width=64)" in text and "used by tests/test_b.py::test_y" in text
    assert "build folders" in text and "1 made, 1 kept" in text
    assert "pytest session" in text and "1 failed" in text
    assert "make test besides pytest" in text and "19.5 s" in text
    assert text.index("tests/test_b.py") < text.index("tests/unit/test_a.py")
    assert "test_c.py" not in text                          # beyond the top 2


def test_the_last_line_is_the_verdict(tmp_path, monkeypatch, capsys):
    """The tests' counts close the output, in the plain form a log reader looks for."""
    _checkout(tmp_path)
    monkeypatch.setattr(ci_time, "parse_junit",
                        lambda path: parse_junit(path, root=tmp_path))
    assert ci_time.main(["--phases", str(tmp_path / "none.jsonl"), "--builds",
                         str(tmp_path / "none.jsonl"), "--junit", str(tmp_path / "pytest.xml"),
                         "-o", str(tmp_path / "ci_time.json")]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == \
        "tests: 3 passed, 1 failed, 1 skipped"


def test_the_table_of_a_run_that_stopped_early(tmp_path):
    (tmp_path / "phases.jsonl").write_text(
        json.dumps({"phase": "setup", "start": 5.0, "end": 7.5, "status": 2}) + "\n")
    out = tmp_path / "ci_time.json"
    assert ci_time.main(["--phases", str(tmp_path / "phases.jsonl"), "--builds",
                         str(tmp_path / "none.jsonl"), "--junit", str(tmp_path / "none.xml"),
                         "-o", str(out)]) == 0
    fig = json.loads(out.read_text())
    assert fig["phases"] == [{"phase": "setup", "seconds": 2.5, "status": 2}]
    assert fig["pytest"] is None and fig["verilator_builds"] == [] and fig["slowest_files"] == []


def test_the_ci_script_prints_the_table_and_keeps_its_status(tmp_path):
    """``.ci/run``'s frame (the phase log and the table on exit) around commands that fail."""
    script = (ci_time.ROOT / ".ci" / "run").read_text()
    frame = script[script.index("mkdir -p build/bench"):script.index("phase setup make setup")]
    body = textwrap.dedent("""
        set -euo pipefail
        cd "$1"
        """) + frame + textwrap.dedent("""
        phase setup true
        synth=0
        phase synth-check false || synth=$?
        phase test sh -c 'exit 3'
        exit "$synth"
        """)
    (tmp_path / "bench").mkdir()
    for f in ("__init__.py", "ci_time.py", "bench_test_time.py"):
        (tmp_path / "bench" / f).write_text((ci_time.ROOT / "bench" / f).read_text())
    (tmp_path / "run").write_text(body)
    r = subprocess.run(["bash", str(tmp_path / "run"), str(tmp_path)], capture_output=True,
                       text=True)
    assert r.returncode == 3, r.stderr                      # the tests' status
    assert "Where the time of this CI run went" in r.stdout
    assert "synthesis check (make synth-check)" in r.stdout and "FAILED (status 1)" in r.stdout
    assert "FAILED (status 3)" in r.stdout
    fig = json.loads((tmp_path / "build" / "bench" / "ci_time.json").read_text())
    assert [(p["phase"], p["status"]) for p in fig["phases"]] == [("setup", 0), ("synth-check", 1),
                                                                   ("test", 3)]
