"""Benchmark of the READ requester under random loss over several seeds (not a test).

The READ batch of ``rocegen bench`` measures each loss point with one seed of the links' loss;
this runs the same points (the endpoint READs the host NIC model's memory, W = 512, the peer
behaving as a ConnectX, 2 us round trip, the QP's timeout from
:func:`rocegen.sim.apps.bench_suite.read_timeout`) with more seeds, and prints each seed's
goodput as a share of the limit of READ responses, with the mean and the spread. Run:
``.venv/bin/python -m bench.bench_read_loss [--seeds 13 14 15 16] [--loss 0.01]``; the figures go
to ``build/bench/read_loss.json``.
"""

import argparse
import json
import statistics

from rocegen.sim.apps.bench_suite import (
    READ_LOSS,
    READ_RUN_BYTES,
    READ_SIZE,
    limit_gbps,
    read_run,
    read_timeout,
    run_batch,
)
from rocegen.sim.testing.cocotb_runner import BUILD

#: (READ size, READs outstanding): the batch's loss points
POINTS = ((4096, 16), (READ_SIZE, 16), (READ_SIZE, 4))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[13, 14, 15, 16])
    ap.add_argument("--loss", type=float, default=READ_LOSS, help="loss each way (0.01: 1 %%)")
    args = ap.parse_args(argv)
    runs = [read_run("loss", size, 4096, READ_RUN_BYTES, outstanding=o, rtt_us=2, loss=args.loss,
                     timeout=read_timeout(o, size, 2), seed=seed)
            for size, o in POINTS for seed in args.seeds]
    _, results = run_batch("read", runs, tag="read-loss")
    rows = []
    for size, o in POINTS:
        shares = []
        for r in results:
            if r["size"] == size and r["outstanding"] == o:
                if r.get("failed") or r["checked_bytes"] != r["bytes"] * r["qps"]:
                    raise SystemExit(f"seed {r['seed']}: the run failed or its data was not all "
                                     f"checked: {r.get('failed')}")
                share = 100 * r["goodput_gbps"] / limit_gbps(size, 4096, r["line_gbps"], "READ")
                shares.append(round(share, 2))
        rows.append({"size": size, "outstanding": o, "loss": args.loss, "seeds": args.seeds,
                     "percent": shares, "mean": round(statistics.mean(shares), 2),
                     "min": min(shares), "max": max(shares)})
        print(f"{o:2} x {size // 1024:2} KiB READs, {100 * args.loss:g} % loss each way: "
              f"{', '.join(f'{x:.1f}' for x in shares)} % of the limit "
              f"(mean {rows[-1]['mean']:.1f} %, {min(shares):.1f}..{max(shares):.1f})")
    out = BUILD / "bench" / "read_loss.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
