"""How long the test suite takes, and where the time goes: runs ``pytest`` as ``make test`` does
(``-n JOBS --dist loadgroup``) with every test's duration reported, or reads the output of such a
run (``--log``), and writes the wall time, the time summed over tests, the sum per file and the
slowest tests to ``build/bench/test_time.json``.

    .venv/bin/python bench/bench_test_time.py                 # the whole suite (warm caches: ~25 min)
    .venv/bin/python bench/bench_test_time.py tests/unit      # a part of it
    .venv/bin/python bench/bench_test_time.py --log run.log   # a run's output, with --durations=0

A first run on a fresh machine includes the Verilator builds (``build/cocotb``) in its figures;
run it twice for the warm figure."""

import argparse
import json
import os
import re
import subprocess
import sys
import time
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
    ap.add_argument("--jobs", default=os.environ.get("JOBS", "auto"), help="pytest-xdist workers")
    ap.add_argument("--top", type=int, default=30, help="slowest tests listed (default 30)")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "build" / "bench" / "test_time.json")
    args = ap.parse_args(argv)
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
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{passed} passed in {seconds / 60:.1f} min; {out['test_seconds'] / 60:.1f} min of tests")
    for f, s in list(out["files"].items())[:10]:
        print(f"  {s:8.1f} s  {f}")
    print(f"written: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
