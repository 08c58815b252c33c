"""The figures of the rxe co-simulation (``rocegen sim rxe``, docs/rxe.md): the guest's build
time and size, the wall time of a whole run against the simulated time, and per step the bytes
checked, the frames each way and the NAKs; then the same story with RoCEv2 frames lost each way,
with rxe's counters; then librdmacm's own tools against the FPGA's standard connection manager
and its services (``librdmacm``: cmtime, ``rping -c -C 10 -S 4096 -V -v``, rdma_client), with
what they printed.

``python -m bench.bench_rxe [--out build/bench/rxe.json] [--loss P] [--only RUN...]``: needs
what ``rocegen sim rxe`` needs (root, QEMU; ``make setup`` as root). Measures, asserts nothing.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

RUNS = {"clean": [], "lossy": ["--loss-to-fpga", "{loss}", "--loss-from-fpga", "{loss}",
                               "--loss-seed", "3"],
        "librdmacm": ["--rdma-cm-port", "7470", "--steps", "cm:cmtime,cm:rping,cm:rdma_client"]}
RXE_KEPT = ("sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_seq_err",
            "rcvd_rnr_err", "send_rnr_err", "completer_retry_err", "retry_exceeded_err",
            "ack_deferred")


def run(name, extra, out):
    cmd = [sys.executable, "-m", "rocegen.cli", "sim", "rxe", "--output", str(out / name),
           "--json", *extra]
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise SystemExit(f"{name}: rocegen sim rxe printed nothing:\n{r.stderr[-3000:]}")
    rep = json.loads(lines[-1])
    rep["command_s"] = wall
    return rep


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="build/bench/rxe.json")
    p.add_argument("--loss", type=float, default=0.05)
    p.add_argument("--runs", default="build/bench/rxe")
    p.add_argument("--only", nargs="+", choices=list(RUNS), default=list(RUNS),
                   help="the runs to make (default all)")
    args = p.parse_args(argv)
    out = Path(args.runs)
    results = {}
    for name in args.only:
        extra = RUNS[name]
        rep = run(name, [a.format(loss=args.loss) for a in extra], out)
        results[name] = rep
        g = rep["guest"]
        print(f"== {name}: {'PASS' if rep['ok'] else 'FAIL'} in {rep['command_s']:.0f} s wall "
              f"(guest {rep['guest_s']:.0f} s, boot included); {rep['sim_us']:.0f} us simulated "
              f"({rep['cycles']} cycles)")
        for s in rep["steps"]:
            x, f = s["rxe"], s["fpga"]
            print(f"  {s['step']:<15} {'ok' if s['ok'] else 'FAILED':<6} {s['wall_s']:5.1f} s  "
                  f"{s['checked']:>7} B checked by {s['checked_by'] or '-':<4} wrong {s['wrong']}  "
                  f"rxe tx/rx {x.get('sent_pkts', 0)}/{x.get('rcvd_pkts', 0)}  FPGA tx/rx "
                  f"{f.get('roce_tx_packets', 0)}/{f.get('roce_rx_packets', 0)}")
        for s in rep["steps"]:
            if s.get("rping"):
                print(f"  rping: {s['rping']['pings']} pings printed, FPGA counted "
                      f"{s['rping']['fpga_pings']}; {s['rping']['output'][:70]}...")
            if s.get("rdma_client"):
                print(f"  rdma_client: {s['rdma_client']['output'].strip()!r}, FPGA echoes "
                      f"{s['rdma_client']['fpga_echoes']}")
            if s.get("cmtime"):
                print("  cmtime (ms total per step): " +
                      ", ".join(f"{k} {v[0]}" for k, v in s["cmtime"].items()))
        for way, c in rep["frames"].items():
            print(f"  frames {way}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        for way, c in rep["loss"].items():
            if c["sent"]:
                print(f"  lost {way}: {c['dropped']} of {c['sent']}")
        print("  rxe counters at the end: " +
              ", ".join(f"{k} {rep['rxe_counters'].get(k, 0)}" for k in RXE_KEPT))
    results["guest"] = {"build_s": g["build_s"], "initrd_bytes": g["initrd_bytes"],
                        "kernel_bytes": g["kernel_bytes"], "tree_bytes": g["tree_bytes"],
                        "kernel": g["kernel"], "packages": g["packages"]}
    print(f"guest: built in {g['build_s']:.0f} s; initramfs {g['initrd_bytes'] / 2**20:.0f} MiB, "
          f"kernel {g['kernel_bytes'] / 2**20:.1f} MiB ({g['kernel']}, rdma-core "
          f"{g['packages'].get('rdma-core')})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["ok"] for k, r in results.items() if k != "guest") else 1


if __name__ == "__main__":
    sys.exit(main())
