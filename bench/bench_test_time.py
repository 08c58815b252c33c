"""How long the test suite takes, and where the time goes: runs ``pytest`` as ``make test`` does
(``-n JOBS --dist loadgroup``) with every test's duration reported, or reads the output of such a
run (``--log``) or its JUnit XML report (``--junitxml``, which ``make test`` writes to
``build/bench/pytest.xml``), and writes the wall time, the time summed over tests, the sum per
file and the slowest tests to ``build/bench/test_time.json``.

    .venv/bin/python bench/bench_test_time.py                 # the whole suite (warm caches: ~25 min)
    .venv/bin/python bench/bench_test_time.py tests/unit      # a part of it
    .venv/bin/python bench/bench_test_time.py --log run.log   # a run's output, with --durations=0
    .venv/bin/python bench/bench_test_time.py --junitxml build/bench/pytest.xml

A first run on a fresh machine includes the Verilator builds (``~/.cache/rocegen/sim``) in its figures;
run it twice for the warm figure."""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+)$")
SUMMARY = re.compile(r"(\d+) passed.* in (\d+\.\d+)s")


def parse(lines):
    """Per-test seconds (setup + call + teardown) and the summary line's count and seconds."""
    tests, passed, seconds = defaultdict(float), None, None
    for line in lines:
        m = DURATION.match(line.strip())
        if m:
            tests[m.group(3)] += float(m.group(1))
            continue
        m = SUMMARY.search(line)
        if m:
            passed, seconds = int(m.group(1)), float(m.group(2))
    return dict(tests), passed, seconds


def _test_file(classname, root):
    """The test file (relative to ``root``) and the class path within it of a JUnit
    ``classname`` as pytest writes it (``tests.unit.test_x`` or ``tests.unit.test_x.TestY``)."""
    parts = classname.split(".")
    for i in range(len(parts), 0, -1):
        path = Path(*parts[:i]).with_suffix(".py")
        if (root / path).is_file():
            return path.as_posix(), parts[i:]
    return classname, []


def parse_junit(path, root=ROOT):
    """Per-test seconds (setup + call + teardown, as pytest's JUnit report gives them), keyed
    ``file::[Class::]name`` (the ``@group`` that ``--dist loadgroup`` appends to the names of
    the tests of an ``xdist_group`` left out, so that the keys are the tests' IDs), and the
    session's figures: ``{"tests", "passed", "failed", "errors", "skipped", "seconds"}``
    (``seconds``: the session's wall time)."""
    tree = ET.parse(path)
    tests = defaultdict(float)
    counts = {"tests": 0, "passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    for case in tree.iter("testcase"):
        file, classes = _test_file(case.get("classname", ""), root)
        file = case.get("file") or file           # given by the xunit1 flavour of the report
        name = case.get("name", "?")
        if name.rfind("@") > name.rfind("]"):       # (an @ inside parameters is theirs)
            name = name[:name.rfind("@")]
        tests["::".join([file, *classes, name])] += float(case.get("time") or 0)
        counts["tests"] += 1
        tags = {child.tag for child in case}
        if "error" in tags:
            counts["errors"] += 1
        elif "failure" in tags:
            counts["failed"] += 1
        elif "skipped" in tags:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    suites = list(tree.iter("testsuite"))
    counts["seconds"] = round(max((float(s.get("time") or 0) for s in suites), default=0.0), 2)
    return dict(tests), counts


def report(tests, passed, seconds, top):
    files = defaultdict(float)
    for name, s in tests.items():
        files[name.split("::")[0]] += s
    total = sum(tests.values())
    return {
        "passed": passed, "wall_seconds": seconds, "test_seconds": round(total, 1),
        "files": {f: round(s, 1) for f, s in sorted(files.items(), key=lambda x: -x[1])},
        "slowest": {t: round(s, 1) for t, s in sorted(tests.items(), key=lambda x: -x[1])[:top]},
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="what to run (default: the whole suite)")
    ap.add_argument("--log", type=Path, help="read this pytest output instead of running pytest")
    ap.add_argument("--junitxml", type=Path,
                    help="read this JUnit XML report of pytest instead of running pytest")
    ap.add_argument("--jobs", default=os.environ.get("JOBS", "auto"), help="pytest-xdist workers")
    ap.add_argument("--top", type=int, default=30, help="slowest tests listed (default 30)")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "build" / "bench" / "test_time.json")
    args = ap.parse_args(argv)
    if args.junitxml:
        tests, counts = parse_junit(args.junitxml)
        return _write(report(tests, counts["passed"], counts["seconds"], args.top), args.output)
    if args.log:
        lines = args.log.read_text(errors="replace").splitlines()
    else:
        cmd = [sys.executable, "-m", "pytest", "-n", str(args.jobs), "--dist", "loadgroup", "-q",
               "--durations=0", "--durations-min=0", "-p", "no:cacheprovider", *args.paths]
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t0
        lines = r.stdout.splitlines()
        if r.returncode != 0:
            sys.stdout.write(r.stdout[-5000:])
            print(f"pytest failed (exit {r.returncode}): the figures would not be the suite's",
                  file=sys.stderr)
            return 1
    tests, passed, seconds = parse(lines)
    if not tests or passed is None:
        print("no test durations found: run pytest with --durations=0 --durations-min=0",
              file=sys.stderr)
        return 1
    out = report(tests, passed, seconds, args.top)
    if not args.log:
        out["wall_seconds_with_startup"] = round(wall, 1)
    return _write(out, args.output)


def _write(out, output):
    """Write the figures of :func:`report` to ``output`` and print their summary."""
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{out['passed']} passed in {out['wall_seconds'] / 60:.1f} min; "
          f"{out['test_seconds'] / 60:.1f} min of tests")
    for f, s in list(out["files"].items())[:10]:
        print(f"  {s:8.1f} s  {f}")
    print(f"written: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
