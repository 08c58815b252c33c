"""Clock cycles per second of the whole endpoint in the two simulators the tests use.

* Amaranth's Python simulator: the whole-endpoint tests of ``tests/unit`` (``--amaranth-tests``,
  by default one test of the host READing the endpoint at W = 64 and one at W = 512, each
  against the host NIC model), run by pytest with ``ROCEGEN_SIM_SPEED`` set, so that every
  simulation logs its cycles and seconds (:func:`rocegen.sim.testing.harness.run_sim`). The
  seconds are those of the simulation itself, the design's elaboration and the simulator's
  construction excluded.
* Verilator through cocotb: ``rocegen sim demo`` at the same widths (WRITE streams on 8 QPs
  against the host NIC model, every frame checked); the demo reports its cycles and the
  wall-clock seconds they took. The model is built first (a cached build costs nothing).

Usage: ``python -m bench.bench_sim_speed [--widths 64 512]``. Writes
``build/bench/sim_speed.json`` and prints a table.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "bench" / "sim_speed.json"
#: whole-endpoint tests in the Amaranth simulator, by width
AMARANTH_TESTS = {
    64: "tests/unit/test_endpoint_read.py::test_host_reads_the_endpoint[64-256-onchip]",
    512: "tests/unit/test_endpoint_read.py::test_host_reads_the_endpoint[512-1024-axi4]",
}


def amaranth_speed(test):
    """(cycles, seconds) of the RoceEndpoint simulations of pytest node ``test``."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "speed.jsonl"
        env = {**os.environ, "ROCEGEN_SIM_SPEED": str(log)}
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
                       cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        runs = [json.loads(line) for line in log.read_text().splitlines()]
    runs = [r for r in runs if r["design"] == "RoceEndpoint"]
    if not runs:
        raise SystemExit(f"{test}: no whole-endpoint simulation logged")
    return sum(r["cycles"] for r in runs), sum(r["seconds"] for r in runs)


def verilator_speed(width):
    """(cycles, seconds) of ``rocegen sim demo --width width`` (Verilator), built beforehand."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "rocegen.cli", "sim", "demo", "--width", str(width),
               "-o", tmp]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        runs = json.loads(next(Path(tmp).glob("roce_w*.json")).read_text())
    runs = runs if isinstance(runs, list) else [runs]
    return (sum(r["sim_cycles"] for r in runs),
            sum(r["wall_seconds"] - r.get("framecheck_wait_seconds", 0) for r in runs))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", type=int, nargs="+", default=sorted(AMARANTH_TESTS),
                    choices=sorted(AMARANTH_TESTS))
    args = ap.parse_args(argv)
    rows = []
    for w in args.widths:
        a_cycles, a_secs = amaranth_speed(AMARANTH_TESTS[w])
        v_cycles, v_secs = verilator_speed(w)
        rows.append({"width": w, "amaranth_test": AMARANTH_TESTS[w],
                     "amaranth_cycles": a_cycles, "amaranth_seconds": round(a_secs, 1),
                     "amaranth_cycles_per_second": round(a_cycles / a_secs),
                     "verilator_cycles": v_cycles, "verilator_seconds": round(v_secs, 1),
                     "verilator_cycles_per_second": round(v_cycles / v_secs)})
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{'W':>4} {'Amaranth cycles/s':>18} {'Verilator cycles/s':>19} {'ratio':>6}")
    for r in rows:
        ratio = r["verilator_cycles_per_second"] / r["amaranth_cycles_per_second"]
        print(f"{r['width']:>4} {r['amaranth_cycles_per_second']:>18,} "
              f"{r['verilator_cycles_per_second']:>19,} {ratio:>5.0f}x")
    print(f"(written to {OUT.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
