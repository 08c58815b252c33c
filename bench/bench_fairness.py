"""Benchmark of the share of the link between many busy QPs (not a test).

The endpoint with 256 QPs (W = 64, on-chip memory, Verilator) sends the same number of bytes on
every QP at once (RDMA WRITEs from local memory, work requests posted round robin) into the host
NIC model's memory, through :mod:`rocegen.sim.cocotb.roce_demo` (every byte compared, every packet
executed exactly once). The figure is the fairness of :func:`rocegen.sim.cocotb.roce_demo.fairness`:
payload bytes per QP from the first packet of the QP that started last until some QP has its
last packet to send, max / min over the QPs, with the window's length and the goodput.

The QPs take strict turns, so their shares differ by one packet at most (max/min 1.0020 with
the defaults: see docs/performance.md). Run:
``.venv/bin/python -m bench.bench_fairness [--qps N] [--bytes B] [--size S] [--pmtu P ...]``;
the figures go to ``build/bench/fairness.json``.
"""

import argparse
import json
import time
from pathlib import Path

from rocegen.sim.testing.cocotb_runner import BUILD, endpoint_sim_config, run_cocotb

WIDTH = 64
NUM_QPS = 256


def fairness_runs(qps, per_qp, pmtus, size=None):
    """The runs: one per path MTU, ``per_qp`` bytes on each of ``qps`` QPs in messages of
    ``size`` (default: one message per QP), the MAC at the 10 Gb/s line rate. Work requests are
    posted round robin over the QPs, message by message."""
    return [{"qps": qps, "pmtu": pmtu, "bytes": per_qp, "size": size or per_qp,
             "opcode": "WRITE", "source": "memory", "line_gbps": 10} for pmtu in pmtus]


def measure(runs, out):
    """Run ``runs`` in one simulator process; returns their results."""
    out.mkdir(parents=True, exist_ok=True)
    results = (out / "fairness_runs.json").resolve()
    cfg = endpoint_sim_config(WIDTH, NUM_QPS)
    run_cocotb(cfg, "rocegen.sim.cocotb.roce_demo", label="bench-fairness",
               env={"ROCE_RUNS": json.dumps(runs), "ROCE_RESULTS": results})
    return json.loads(results.read_text())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qps", type=int, default=NUM_QPS, help=f"QPs busy at once (2..{NUM_QPS})")
    p.add_argument("--bytes", type=int, default=128 * 1024,
                   help="bytes per QP (default 128 KiB: 512 packets at PMTU 256)")
    p.add_argument("--size", type=int, default=32 * 1024,
                   help="message size, at most 64 KiB (default 32 KiB)")
    p.add_argument("--pmtu", type=int, action="append", default=None,
                   help="path MTU of a run (repeatable; default 256 and 1024)")
    p.add_argument("-o", "--output", default=str(BUILD / "bench"), help="folder of the figures")
    args = p.parse_args(argv)
    if not 2 <= args.qps <= NUM_QPS:
        p.error(f"--qps must be 2..{NUM_QPS}, not {args.qps}")
    if not 0 < args.size <= 64 * 1024 or args.bytes < args.size:
        p.error("--size must be 1..65536 (a message from the local buffer) and --bytes at "
                "least --size")
    t0 = time.perf_counter()
    runs = fairness_runs(args.qps, args.bytes, args.pmtu or [256], args.size)
    results = measure(runs, Path(args.output))
    rows = []
    for r in results:
        f = r["fairness"]
        row = {"qps": r["qps"], "pmtu": r["pmtu"], "bytes_per_qp": r["bytes"],
               "checked_bytes": r["checked_bytes"], "packets": r["packets"],
               "window_cycles": f["window_cycles"], "min_bytes": f["min_bytes"],
               "max_bytes": f["max_bytes"], "max_over_min": f["ratio"],
               "goodput_gbps": r["goodput_gbps"], "sim_cycles": r["sim_cycles"],
               "wall_seconds": r["wall_seconds"]}
        rows.append(row)
        print(f"{row['qps']} QPs, PMTU {row['pmtu']}, {row['bytes_per_qp']} bytes each "
              f"({row['packets']} packets, {row['checked_bytes']} bytes compared): "
              f"{row['min_bytes']}..{row['max_bytes']} payload bytes per QP over "
              f"{row['window_cycles']} cycles with all busy, max/min {row['max_over_min']:.4f}; "
              f"goodput {row['goodput_gbps']:.2f} Gb/s")
    path = Path(args.output) / "fairness.json"
    path.write_text(json.dumps({"width": WIDTH, "num_qps": NUM_QPS, "runs": rows,
                                "wall_seconds": time.perf_counter() - t0}, indent=1))
    print(f"figures in {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
