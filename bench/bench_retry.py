"""Reliability figures of the RoCE endpoint, cycle-accurate in Verilator against the host NIC
model, W = 512 at 322.266 MHz, MAC throttled to 100 Gb/s:

* Goodput of one QP (4 KiB WRITE messages, PMTU 4096, from the traffic generator) at 0%, 0.1%
  and 1% random loss in each direction (data and acknowledgements alike), with a 2 us and a
  20 us round trip. Goodput is the bytes delivered over the time from the start of the run
  to its last completion (the last acknowledgement's round trip included); the QP's timeout
  code is the smallest from 4 that is at least four round trips
  (:func:`rocegen.sim.roce_bench.timeout_code`).
* Recovery after one lost packet: in the middle of a burst (the host NIC's sequence-error NAK
  starts a rewind) and at its tail (nothing follows, so only the retransmit timer recovers):
  cycles from the lost packet's first beat to its retransmission's first beat.
* Cycles from the last beat of an acknowledgement into the endpoint to the completion it
  causes, and from a work request to its first beat on the MAC (64-byte WRITEs one at a time).

Run: python -m bench.bench_retry [--quick] [--json FILE]
"""

import argparse
import json
import sys
import time
from pathlib import Path

from rocegen.gateware.cli import endpoint_sim_config
from rocegen.gateware.roce.retry import TICK_NS
from rocegen.sim.cocotb_runner import BUILD, run_cocotb

from .bench_roce import limit_gbps

SIZE = 4096
CLOCK_MHZ = 322.265625


def runs_for(quick):
    total = (4 if quick else 16) << 20
    out = []
    for rtt in (2, 20):
        for loss in (0.0, 0.001, 0.01):
            out.append({"name": "loss", "qps": 1, "pmtu": 4096, "bytes": total, "size": SIZE,
                        "opcode": "WRITE", "source": "generator", "line_gbps": 100,
                        "loss": loss, "rtt_us": rtt, "seed": 7,
                        **({"timeout": 4} if loss == 0 else {})})
    burst = 64
    for where, off in (("middle", burst // 2), ("tail", burst - 1)):
        for code in (4, 6):
            out.append({"name": f"drop-{where}", "qps": 1, "pmtu": 4096,
                        "bytes": burst * SIZE, "size": SIZE, "opcode": "WRITE",
                        "source": "generator", "line_gbps": 100, "rtt_us": 2,
                        "drop_psns": [off], "timeout": code})
    out.append({"name": "latency", "qps": 1, "pmtu": 4096, "bytes": 64 * 8, "size": 64,
                "opcode": "WRITE", "source": "memory", "line_gbps": 0, "latency": True})
    return out


def timeout_us(code):
    return 4.096 * (1 << code)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="4 MiB per loss point instead of 16")
    p.add_argument("--json", default=None, help="write the figures here too")
    args = p.parse_args(argv)
    runs = runs_for(args.quick)
    cfg = endpoint_sim_config(512)
    out = BUILD / "bench" / "retry_w512.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run_cocotb(cfg, "rocegen.sim.roce_demo", label="bench-retry-512",
               env={"ROCE_RUNS": json.dumps(runs), "ROCE_RESULTS": out.resolve()})
    wall = time.perf_counter() - t0
    results = json.loads(out.read_text())
    ns = 1e3 / CLOCK_MHZ
    print(f"RoCE endpoint reliability, W=512 at {CLOCK_MHZ} MHz, 100G line "
          f"(simulated in {wall:.0f} s)")
    print(f"{'RTT':>5} {'loss':>6} {'timeout':>9} {'goodput':>9} {'of limit':>9} {'frames':>7} "
          f"{'resent':>7} {'lost to NIC':>11} {'lost to FPGA':>12} {'worst stall':>12}")
    limit = limit_gbps(SIZE, 4096)
    for r in results:
        if r.get("name") != "loss":
            continue
        total = r["bytes"]
        r["goodput_gbps_to_completion"] = total * 8 / (r["elapsed_us"] * 1e-6) / 1e9
        r["percent_of_limit"] = 100 * r["goodput_gbps_to_completion"] / limit
        lost = [(link or {}).get("dropped", 0) for link in (r["link_to_nic"], r["link_from_nic"])]
        worst = max(r["resend_gaps"], default=0)
        print(f"{r['rtt_us']:>3} us {100 * r['loss']:>5.1f}% {timeout_us(r['timeout']):>6.1f} us "
              f"{r['goodput_gbps_to_completion']:>7.2f} G {r['percent_of_limit']:>8.2f}% "
              f"{r['roce_frames']:>7} {r['retransmitted']:>7} {lost[0]:>11} {lost[1]:>12} "
              f"{worst * ns / 1e3:>9.1f} us")
    print("one packet lost (64 x 4 KiB burst, RTT 2 us): cycles from its first copy to its "
          "retransmission")
    for r in results:
        if not r.get("name", "").startswith("drop-"):
            continue
        gap = max(r["resend_gaps"], default=None)
        r["recovery_cycles"] = gap
        bound = timeout_us(r["timeout"])
        print(f"  {r['name'][5:]:>6}, timeout code {r['timeout']} ({bound:.1f} us): "
              f"{gap} cycles = {gap * ns / 1e3:.2f} us, {r['retransmitted']} packets resent")
    for r in results:
        if r.get("latency"):
            a, w = r["ack_to_cpl_cycles"], r["latency_cycles"]
            print(f"acknowledgement's last beat in -> completion out: {min(a)}..{max(a)} cycles "
                  f"({min(a) * ns:.1f} ns)")
            print(f"work request -> first beat on the MAC: {min(w)}..{max(w)} cycles "
                  f"({min(w) * ns:.1f} ns)")
    print(f"timer resolution {TICK_NS / 1e3:.3f} us; default timeout code 14: "
          f"{timeout_us(14) / 1e3:.1f} ms, so a tail loss with the defaults stalls the QP "
          f"{timeout_us(14) / 1e3:.1f} ms (+ up to one tick and one RTT)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
