"""Benchmark (not a test): line-rate traffic on a QP while QP1 is busy. Runs the cocotb bench
sim/cocotb/rdma_cm_busy.py on the IB CM's build of ``tests/test_cocotb_rdma_cm.py`` (4 QPs, the
rping server and the SEND echo; W = 64 and 512): the traffic generator WRITEs to the host
alone, then while the host floods QP1 with REQs for a port nobody listens on (each answered
with a REJ: ``req``) or with RTUs naming no connection (dropped and counted: ``rtu``). The
table: the generator's goodput both times and their ratio, the MADs sent, answered and dropped
(the CM's ingress queue holds two), and the line's share the REJs took.
Run: ``.venv/bin/python -m bench.bench_rdma_cm_busy [--widths 64 512] [--gap CYCLES]``; the
figures go to ``build/bench/rdma_cm_busy.json``."""

import argparse
import json

from rocegen.sim.testing.cocotb_runner import BUILD, run_cocotb
from tests.test_cocotb_rdma_cm import ENV, build

#: (W, messages, bytes each): about 0.5 MB at W = 512, 0.13 MB at W = 64
RUNS = {64: (8, 16384), 512: (32, 16384)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", nargs="+", type=int, default=[64, 512], choices=[64, 512])
    ap.add_argument("--gap", type=int, nargs="+", default=[50, 200],
                    help="cycles between two REQs of the flood (default 50 and 200)")
    args = ap.parse_args(argv)
    out_dir = BUILD / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for w in args.widths:
        count, size = RUNS[w]
        for kind in ("req", "rtu"):
            for gap in args.gap:
                out = out_dir / f"rdma_cm_busy-{w}-{kind}-{gap}.json"
                run_cocotb(build(w), "rocegen.sim.cocotb.rdma_cm_busy", "qp1_busy",
                           label=f"bench-rdma-cm-busy-{w}-{kind}-{gap}",
                           env={**ENV, "ROCE_RESULTS": out, "BUSY_COUNT": count,
                                "BUSY_SIZE": size, "BUSY_GAP": gap, "BUSY_KIND": kind})
                rows.append(json.loads(out.read_text()))
    print(f"{'W':>4} {'MADs':>5} {'gap':>5} {'alone B/cyc':>12} {'busy B/cyc':>11} {'ratio':>7} "
          f"{'MADs in':>8} {'REJs':>6} {'dropped':>8} {'REJ B/cyc':>10}")
    for r in rows:
        print(f"{r['width']:>4} {r['kind']:>5} {r['gap']:>5} {r['alone_bytes_per_cycle']:12.2f} "
              f"{r['busy_bytes_per_cycle']:11.2f} {r['ratio']:7.2%} {r['mads_in']:>8} "
              f"{r['rejs_out']:>6} {r['mads_dropped']:>8} {r['rej_bytes_per_cycle']:10.2f}")
    (out_dir / "rdma_cm_busy.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
