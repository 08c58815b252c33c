"""Benchmark of error isolation between QPs (not a test): the bench of
``tests/test_cocotb_isolation.py`` (sim/cocotb/roce_isolation.py) on the responder builds, on chip
and with AXI4 memory at W = 64 and 512, and a table per build of what it measured: for each way
QP A enters the error state, QP B's goodput with the error on A and without it (bytes per
cycle and the ratio), A's completions, and the cycles from A's NAK (responder kinds: its first
beat on the MAC) or first failed completion (requester kinds) to its last flushed completion.
Run: ``.venv/bin/python -m bench.bench_isolation [--configs onchip-64 onchip-512 axi4-64
axi4-512]``; the figures go to ``build/bench/isolation.json``.
"""

import argparse
import json

from rocegen.sim.apps.bench_suite import RESP_AXI4_BYTES
from rocegen.sim.testing.cocotb_runner import BUILD, responder_sim_config, run_cocotb

#: the builds (:func:`responder_sim_config` parameters): the responder's of the other benches
#: and of the benchmark suite's batches, so that none is built for this alone
CONFIGS = {
    "onchip-64": dict(width=64),
    "onchip-512": dict(width=512),
    "axi4-64": dict(width=64, memory="axi4", mem_bytes=RESP_AXI4_BYTES),
    "axi4-512": dict(width=512, memory="axi4", mem_bytes=RESP_AXI4_BYTES),
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args(argv)
    out_dir = BUILD / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    every = {}
    for name in args.configs:
        params = dict(CONFIGS[name])
        cfg = responder_sim_config(params.pop("width"), **params)
        out = out_dir / f"isolation-{name}.json"
        run_cocotb(cfg, "rocegen.sim.cocotb.roce_isolation", "isolation",
                   label=f"bench-isolation-{name}", env={"ROCE_RESULTS": out})
        every[name] = json.loads(out.read_text())
        print(f"\n{name}: QP B's goodput (bytes/cycle) with an error on QP A, and without")
        print(f"{'kind':>9} {'B with':>8} {'B w/o':>8} {'ratio':>7} {'A cpls':>7} "
              f"{'A flush cycles':>15}")
        for f in every[name]:
            print(f"{f['kind']:>9} {f['b_bytes_per_cycle']:8.3f} "
                  f"{f['b_baseline_bytes_per_cycle']:8.3f} {f['b_ratio']:7.2%} "
                  f"{f['a_completions']:7d} {str(f['a_flush_cycles']):>15}")
    (out_dir / "isolation.json").write_text(json.dumps(every, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
