"""Clock cycles per second of the whole endpoint in the two simulators the tests use.

* Amaranth's Python simulator: the host NIC model READs the endpoint (``RoceEndpoint`` with the
  responder, on chip at W = 64 with PMTU 256, AXI4 at W = 512 with PMTU 1024) through its MAC
  port: READs of 1..2 PMTUs of its region, 16 outstanding, until every one has completed
  (:func:`amaranth_speed`). The seconds are those of the simulation itself
  (:func:`rocegen.sim.testing.harness.run_sim` with ``ROCEGEN_SIM_SPEED`` set), the design's
  elaboration and the simulator's construction excluded.
* Verilator through cocotb: ``rocegen sim demo`` at the same widths (WRITE streams on 8 QPs
  against the host NIC model, every frame checked); the demo reports its cycles and the
  wall-clock seconds they took. The model is built first (a cached build costs nothing).

Usage: ``python -m bench.bench_sim_speed [--widths 64 512] [--reads N]``. Writes
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
#: the Amaranth simulator's workload by width: (memory, path MTU)
AMARANTH_RUNS = {64: ("onchip", 256), 512: ("axi4", 1024)}
#: READs of each Amaranth run (a run of a few thousand cycles)
AMARANTH_READS = 24


def amaranth_speed(width, reads=AMARANTH_READS):
    """(cycles, seconds) of the whole endpoint in Amaranth's simulator answering ``reads`` READs
    of the host (see the module documentation)."""
    from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
    from rocegen.gateware.roce.layouts import QPN_BASE, QpState
    from rocegen.gateware.roce.responder.responder import default_config
    from rocegen.sim.models.memory.axi_ram import AxiRam
    from rocegen.sim.models.memory.axi_write_mem import AxiWriteMemory
    from rocegen.sim.models.packets import Packet
    from rocegen.sim.models.rnic import IDEAL, Access, Rnic
    from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
    from rocegen.sim.testing.harness import run_sim
    from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
    from rocegen.wire.addr import parse_ip, parse_mac

    memory, pmtu = AMARANTH_RUNS[width]
    mem = 1 << 16
    ep = RoceEndpoint(width, 2, memory=memory, mem_bytes=mem, ring_bytes=mem // 2,
                      responder=True, pmtu=pmtu)
    rkey = default_config(2, 0, mem // 2)[0]["mr"]["rkey"]
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    host.create_qp(0x21, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu, access=Access.REMOTE_WRITE | Access.REMOTE_READ, max_rd_atomic=16)
    for k in range(reads):
        host.post_send(0x21, "READ", length=pmtu + 37 * k % pmtu, remote_addr=64 * k, rkey=rkey)
    drv, col = StreamDriver(ep.mac_rx, width), StreamCollector(ep.mac_tx, width)
    processes = [col.run]
    if memory == "axi4":
        axi = AxiWriteMemory(width, mem, aw=ep.axi.aw, w=ep.axi.w, b=ep.axi.b)
        processes += [axi.run, AxiRam(width, mem, ar=ep.axi.ar, r=ep.axi.r, mem=axi.acked).run]

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.qp_ctl.payload, {"qp": 0, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": 0x21,
            "pmtu_log2": pmtu.bit_length() - 1}})
        ctx.set(ep.qp_ctl.valid, 1)
        await ctx.tick().until(ep.qp_ctl.ready)
        ctx.set(ep.qp_ctl.valid, 0)
        seen = 0
        while host.send_outstanding():
            frames = host.next_frames()
            while seen < len(col.packets):
                frames += host.receive(col.packets[seen].data)
                seen += 1
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
            else:
                await ctx.tick().repeat(20)

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "speed.jsonl"
        os.environ["ROCEGEN_SIM_SPEED"] = str(log)
        try:
            run_sim(ep, testbenches=[tb], processes=processes, deadline_cycles=100_000)
        finally:
            del os.environ["ROCEGEN_SIM_SPEED"]
        run, = (json.loads(line) for line in log.read_text().splitlines())
    return run["cycles"], run["seconds"]


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
    ap.add_argument("--widths", type=int, nargs="+", default=sorted(AMARANTH_RUNS),
                    choices=sorted(AMARANTH_RUNS))
    ap.add_argument("--reads", type=int, default=AMARANTH_READS,
                    help="the host's READs in each Amaranth run")
    args = ap.parse_args(argv)
    rows = []
    for w in args.widths:
        a_cycles, a_secs = amaranth_speed(w, args.reads)
        v_cycles, v_secs = verilator_speed(w)
        memory, pmtu = AMARANTH_RUNS[w]
        rows.append({"width": w, "amaranth_run": f"host READs, {memory}, PMTU {pmtu}",
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
