"""Goodput and latency of the RoCE endpoint, cycle-accurate in Verilator against the host NIC
model, at the board clock (322.266 MHz at W = 512).

* One QP, WRITE messages of 64 B .. 1 MiB from the traffic generator, at PMTU 4096 and 1024:
  with the MAC throttled to the line rate (100 Gb/s as the CMAC takes frames at W >= 128, 10 Gb/s
  on XGMII at W = 64; line time of frame + 24 bytes),
  as a percentage of the theoretical limit (below); and unthrottled (the MAC takes a beat every
  cycle), as idle beats between the frames against the ideal minimum.
* Cycles from a work request's acceptance to its first beat on the MAC (a 64-byte WRITE on an
  idle endpoint, memory source).

The theoretical limit is the line rate times payload / line bytes, counting per packet the
payload, its pad to 4 bytes, 82 bytes of framing and headers (preamble + SFD 8, IFG 12,
Ethernet 14, FCS 4, IPv4 20, UDP 8, BTH 12, ICRC 4) and the 16-byte RETH on a message's first
packet, with the Ethernet minimum of 64 bytes per frame
(:func:`rocegen.sim.apps.bench_suite.limit_gbps`, shared with the benchmark suite of ``rocegen bench``,
which measures these figures and more).

Run: python -m bench.bench_roce [--width 512] [--quick] [--json FILE]
"""

import argparse
import json
import sys
import time
from pathlib import Path

from rocegen.sim.apps.bench_suite import limit_gbps
from rocegen.sim.testing.cocotb_runner import BUILD, endpoint_sim_config, run_cocotb

__all__ = ["limit_gbps", "runs_for", "main"]

SIZES = [64, 1024, 4096, 65536, 1 << 20]


def line_gbps_for(width):
    """The board's line rate: 100G on the CMAC at 512 bits, 10G on XGMII at 64 bits."""
    return 100 if width >= 128 else 10


def runs_for(quick, width=512):
    line_rate = line_gbps_for(width)
    sizes = [64, 4096, 65536] if quick else SIZES
    out = []
    for pmtu in (4096, 1024):
        for line in (line_rate, 0):
            for size in sizes:
                total = max(size * (4 if size >= 65536 else 64 if size <= 1024 else 16), 1 << 18)
                if quick:
                    total = max(size * 4, 1 << 16)
                out.append({"qps": 1, "pmtu": pmtu, "bytes": total, "size": size,
                            "opcode": "WRITE", "source": "generator", "line_gbps": line})
    out.append({"qps": 1, "pmtu": 4096, "bytes": 64 * 8, "size": 64, "opcode": "WRITE",
                "source": "memory", "line_gbps": 0, "latency": True})
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--quick", action="store_true", help="fewer, shorter runs")
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args(argv)
    runs = runs_for(args.quick, args.width)
    cfg = endpoint_sim_config(args.width)
    out = BUILD / "bench" / f"roce_w{args.width}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run_cocotb(cfg, "rocegen.sim.cocotb.roce_demo", label=f"bench-roce-{args.width}",
               env={"ROCE_RUNS": json.dumps(runs), "ROCE_RESULTS": out.resolve()})
    wall = time.perf_counter() - t0
    results = json.loads(out.read_text())
    print(f"RoCE endpoint, W={args.width}, one QP, WRITE (simulated in {wall:.0f} s)")
    print(f"{'PMTU':>5} {'size':>8} {'MAC':>8} {'goodput':>10} {'limit':>10} {'of limit':>9} "
          f"{'idle beats':>10}")
    print("(MAC 100G/10G: throttled to the board's line rate; free: a beat every cycle, and 'idle beats'"
          " counts cycles without a beat between the run's first and last frame)")
    for r in results:
        if r.get("latency"):
            continue
        line = r["line_gbps"]
        lim = limit_gbps(r["size"], r["pmtu"], line) if line else None
        r["limit_gbps"] = lim
        mac = f"{line}G" if line else "free"
        lim_text = f"{lim:8.2f} G" if lim else ""
        pct = 100 * r["goodput_gbps"] / lim if lim else None
        r["percent_of_limit"] = pct
        pct_text = f"{pct:8.3f}%" if lim else ""
        print(f"{r['pmtu']:>5} {r['size']:>8} {mac:>8} {r['goodput_gbps']:>8.2f} G "
              f"{lim_text:>10} {pct_text:>9} {'-' if line else r['idle_beats']:>10}")
    for r in results:
        if r.get("latency"):
            lat = r["latency_cycles"]
            ns = 1e3 / r["clock_mhz"]
            print(f"work request -> first beat on the MAC: {min(lat)}..{max(lat)} cycles "
                  f"({min(lat) * ns:.1f} ns at {r['clock_mhz']:.3f} MHz), 64-byte WRITE")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
