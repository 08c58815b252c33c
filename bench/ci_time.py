"""Where the time of a CI run went: the table ``.ci/run`` prints at its end.

Reads what the run left in ``build/bench/``:

* ``ci_phases.jsonl``: one line per phase of ``.ci/run`` (``{"phase", "start", "end",
  "status"}``, times in seconds since the epoch): set-up, tshark, the synthesis check, the tests;
* ``builds.jsonl``: the build log of :mod:`rocegen.gateware.costlog`, one line per Yosys run
  (synthesized, or taken from the result cache) and per Verilator model build (compiled, or
  reused);
* ``pytest.xml``: the JUnit report of the pytest session (``make test`` writes it), for the
  session's wall time and the seconds of every test, summed per test file.

Prints the phases with their seconds and status, each Yosys run of the synthesis check, each
Verilator build, the pytest session and the slowest test files, and writes the same figures to
``build/bench/ci_time.json``. A missing input leaves its part of the table empty (a run that
stopped early); this script itself only fails on bad arguments. Standard library only, so that it
runs before (or without) the virtual environment.

    python3 -m bench.ci_time [--since EPOCH] [--top 15]
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from bench.bench_test_time import parse_junit, report

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "build" / "bench"

#: How the phases of ``.ci/run`` are named in the table.
PHASE_TITLES = {
    "setup": "set-up (make setup)",
    "tshark": "tshark (make tshark)",
    "synth-check": "synthesis check (make synth-check)",
    "test": "tests (make test)",
}


def read_jsonl(path):
    """The JSON objects of a JSON-lines file (lines that do not parse are skipped: a line cut
    short by a killed process must not hide the others); [] when the file is missing."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _during(entry, phase):
    return phase is not None and phase["start"] <= entry.get("t", 0) <= phase["end"] + 1


def verilator_builds(entries):
    """One row per Verilator build (by name): ``compiled`` when any process compiled it (with the
    seconds compiling took), else ``verilog-unchanged`` (elaborated, Verilog unchanged) or
    ``reused``; ``seconds`` is what the build cost in this run, ``wait_seconds`` the time
    processes waited for another's build of it; ``design`` and ``params``, the generator
    configuration built, and ``tests``, the tests that asked for it (the first of each process
    that did: a process logs a build once)."""
    rank = {"compiled": 3, "built": 3, "verilog-unchanged": 2, "reused": 1}
    rows = {}
    for e in entries:
        r = rows.setdefault(e["name"], {"name": e["name"], "source": e["source"], "seconds": 0.0,
                                        "wait_seconds": 0.0, "records": 0, "tests": []})
        if rank.get(e["source"], 0) > rank.get(r["source"], 0):
            r["source"] = e["source"]
        r["seconds"] += e.get("seconds", 0.0)
        r["wait_seconds"] += e.get("wait_seconds", 0.0)
        r["records"] += 1
        for k in ("design", "params"):
            if k in e:
                r[k] = e[k]
        if e.get("test") and e["test"] not in r["tests"]:
            r["tests"].append(e["test"])
    for r in rows.values():
        r["seconds"], r["wait_seconds"] = round(r["seconds"], 1), round(r["wait_seconds"], 1)
    return sorted(rows.values(), key=lambda r: (-r["seconds"], r["name"]))


def board_builds(entries):
    """The board build folders and their lint logs (tests/test_board_lint.py): how many were
    made and how many kept from an earlier run, with their seconds."""
    out = {}
    for e in entries:
        r = out.setdefault(e.get("what", "build folder"), {"made": 0, "kept": 0, "seconds": 0.0})
        r["kept" if e["source"] == "reused" else "made"] += 1
        r["seconds"] = round(r["seconds"] + e.get("seconds", 0.0), 1)
    return out


def yosys_runs(entries):
    """The Yosys runs, in the order they were made."""
    keep = ("name", "source", "seconds", "synth_seconds", "lut_total", "lut_levels", "yosys")
    return [{k: e[k] for k in keep if k in e} for e in sorted(entries, key=lambda e: e.get("t", 0))]


def collect(phases_path, builds_path, junit_path, since=None, top=15):
    """The figures of the table (a dict, as written to ``ci_time.json``)."""
    phases = [p for p in read_jsonl(phases_path) if {"phase", "start", "end"} <= set(p)]
    if since is not None:
        phases = [p for p in phases if p["start"] >= since]
    by_name = {p["phase"]: p for p in phases}
    builds = read_jsonl(builds_path)
    if since is not None:
        builds = [b for b in builds if b.get("t", 0) >= since]
    yosys = [b for b in builds if b.get("kind") == "yosys"]
    check = [b for b in yosys if _during(b, by_name.get("synth-check"))]
    other_yosys = [b for b in yosys if b not in check]
    out = {
        "phases": [{"phase": p["phase"], "seconds": round(p["end"] - p["start"], 1),
                    "status": p.get("status", 0)} for p in phases],
        "total_seconds": round(max(p["end"] for p in phases) - min(p["start"] for p in phases), 1)
        if phases else None,
        "synth_check": yosys_runs(check),
        "other_yosys_runs": {"runs": len(other_yosys),
                             "seconds": round(sum(b.get("seconds", 0) for b in other_yosys), 1)},
        "verilator_builds": verilator_builds([b for b in builds if b.get("kind") == "verilator"]),
        "board_builds": board_builds([b for b in builds if b.get("kind") == "board"]),
        "pytest": None,
        "slowest_files": [],
    }
    junit = Path(junit_path) if junit_path is not None else None
    if junit is not None and junit.is_file() and (since is None or junit.stat().st_mtime >= since):
        try:
            tests, counts = parse_junit(junit)
        except (OSError, ValueError, SyntaxError) as e:     # cut short: say so, go on
            out["pytest"] = {"error": f"{junit}: {e}"}
        else:
            rep = report(tests, counts["passed"], counts["seconds"], top)
            per_file = defaultdict(int)
            for name in tests:
                per_file[name.split("::")[0]] += 1
            out["pytest"] = {**counts, "test_seconds": rep["test_seconds"]}
            out["slowest_files"] = [{"file": f, "seconds": s, "tests": per_file[f]}
                                    for f, s in list(rep["files"].items())[:top]]
    return out


def _status(code):
    return "ok" if code == 0 else f"FAILED (status {code})"


def table(fig, top=15):
    """The figures of :func:`collect` as lines of text."""
    lines = ["", "=== Where the time of this CI run went ===", ""]
    w = 46

    def row(label, seconds, note=""):
        s = "-" if seconds is None else f"{seconds:9.1f} s"
        lines.append(f"{label:<{w}} {s:>11}  {note}".rstrip())

    if not fig["phases"]:
        lines.append("(no phases recorded)")
    for p in fig["phases"]:
        row(PHASE_TITLES.get(p["phase"], p["phase"]), p["seconds"], _status(p["status"]))
        if p["phase"] == "synth-check":
            for y in fig["synth_check"]:
                if y["source"] == "cache":
                    note = (f"from the cache (Yosys took {y.get('synth_seconds', 0):.0f} s when "
                            f"computed)")
                else:
                    note = f"synthesized (Yosys {y.get('synth_seconds', 0):.0f} s)"
                figs = (f"; {y['lut_total']:,} LUTs, {y['lut_levels']} levels"
                        if "lut_total" in y else "")
                row(f"  Yosys {y['name']}", y["seconds"], note + figs)
            if not fig["synth_check"]:
                row("  (no Yosys run recorded)", None)
        if p["phase"] == "test":
            py = fig["pytest"]
            if py and "error" not in py:
                row("  pytest session", py["seconds"],
                    f"{py['tests']} tests: {py['passed']} passed, {py['failed']} failed, "
                    f"{py['errors']} errors, {py['skipped']} skipped; "
                    f"{py['test_seconds']:.0f} s of tests over all workers")
                row("  make test besides pytest (lint, set-up check)",
                    max(0.0, p["seconds"] - py["seconds"]))
            else:
                row("  pytest session", None, py["error"] if py else "no JUnit report")
    vb = fig["verilator_builds"]
    if vb:
        compiled = [b for b in vb if b["source"] in ("compiled", "built")]
        lines += ["", f"Verilator model builds: {len(compiled)} compiled "
                  f"({sum(b['seconds'] for b in compiled):.0f} s), {len(vb) - len(compiled)} "
                  "from earlier builds"]
        for b in vb:
            wait = f", {b['wait_seconds']:.0f} s waited for it" if b["wait_seconds"] >= 1 else ""
            row(f"  {b['name']}", b["seconds"], f"{b['source']}{wait}")
            if "params" in b:
                what = ", ".join(f"{k}={v}" for k, v in sorted(b["params"].items()))
                lines.append(f"      {b.get('design', '')}({what})")
            for t in b.get("tests", []):
                lines.append(f"      used by {t}")
    boards = fig.get("board_builds") or {}
    if boards:
        lines += ["", "Board build folders and their Verilator lint (kept while their sources are "
                  "unchanged):"]
        for what, r in boards.items():
            row(f"  {what}s", r["seconds"], f"{r['made']} made, {r['kept']} kept")
    other = fig["other_yosys_runs"]
    if other["runs"]:
        lines += ["", f"Yosys runs outside the synthesis check (the tests' small designs): "
                  f"{other['runs']}, {other['seconds']:.0f} s"]
    if fig["slowest_files"]:
        lines += ["", f"The {min(top, len(fig['slowest_files']))} slowest test files (seconds "
                  "summed over their tests, setup and teardown included; workers run in "
                  "parallel):"]
        for f in fig["slowest_files"]:
            row(f"  {f['file']}", f["seconds"], f"{f['tests']} test{'s' * (f['tests'] != 1)}")
    if fig["total_seconds"] is not None:
        lines.append("")
        row("whole run", fig["total_seconds"])
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases", type=Path, default=BENCH / "ci_phases.jsonl")
    ap.add_argument("--builds", type=Path, default=BENCH / "builds.jsonl")
    ap.add_argument("--junit", type=Path, default=BENCH / "pytest.xml")
    ap.add_argument("--since", type=float,
                    help="only phases and builds from this time on (seconds since the epoch)")
    ap.add_argument("--top", type=int, default=15, help="slowest test files listed (default 15)")
    ap.add_argument("-o", "--output", type=Path, default=BENCH / "ci_time.json")
    args = ap.parse_args(argv)
    fig = collect(args.phases, args.builds, args.junit, since=args.since, top=args.top)
    print("\n".join(table(fig, args.top)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(fig, indent=1) + "\n")
    print(f"\nwritten: {args.output}")
    py = fig["pytest"]
    if py and "error" not in py:
        # the tests' verdict once more as the last line, where a reader of the log looks
        print(f"tests: {py['passed']} passed, {py['failed'] + py['errors']} failed, "
              f"{py['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
