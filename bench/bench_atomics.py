"""Size of the responder's RDMA atomics, and where a burst of them waits.

The atomics' rates and latencies through the whole endpoint against the host NIC model are the
benchmark suite's (batches ``atomic`` and ``atomic-w64`` of ``rocegen bench``,
:mod:`rocegen.sim.apps.bench_suite`; ``rocegen bench --only atomic atomic-w64`` runs them again
and rewrites their figures in ``bench/results.json`` and ``docs/performance.md``). This script
adds:

* size: Yosys figures (:func:`rocegen.tools.synth.synthesize`, ``synth_xilinx -family xcup``,
  mapped for area, as ``bench_synth`` maps the cores and its blocks; LUTs, flip-flops, block RAM
  and LUT levels) of each block with and without the atomics, taken out of
  ``RoceEndpoint(512, 8, responder=True)`` and of the same endpoint with ``atomics="little"``:
  the responder (``Responder``: the AtomicETH in the ingress, the decision, the queues' operand
  memory, the store of results), the payload memory and its reader alone (``PayloadMemory``,
  ``PayloadReader``: the read-modify-write, the write back's port, the lock), the arithmetic
  alone (``AtomicAlu(512)``, and at 64 bits) and, unless ``--quick``, the whole cores; the
  arithmetic and the reader also mapped for :data:`~bench.bench_synth.LEVEL_GOAL` LUT levels
  (``depth_target``, as ``bench_synth`` maps the cores a second time). Results come from the
  synthesis result cache when an earlier run (any checkout) synthesized the same netlist.
* burst (``--burst``): the endpoint with atomics in the Amaranth simulator, at W = 512 one QP
  and then 8 QPs, at W = 64 8 QPs, each sending 16 FETCH_ADDs (the most its READ queue takes)
  back to back into ``mac_rx``, a beat a cycle, ``mac_tx`` always ready: when the atomics were queued
  (``RespRead.push``) and when the answers left (their first beats on ``mac_tx``, and the
  cycles between them), and how many cycles the READ generator's output
  (``RespReadOrder.rd_i``) waited for ``written`` (every request before the newest READ or
  atomic queued placed), in all and while requests were still being queued.

Run: python -m bench.bench_atomics [--json FILE] [--quick] [--burst] [--no-synth]
(``bench/atomics.json`` holds the published figures.)
"""

import argparse
import time
import warnings
from pathlib import Path

from bench.bench_synth import LEVEL_GOAL, git_revision, write_rows
from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
from rocegen.gateware.roce.memory.atomic_alu import AtomicAlu
from rocegen.tools.synth import synthesize

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 512
NUM_QPS = 8
FIGURES = ("lut_total", "lut", "lut_as_memory", "ff", "carry", "bram36", "bram18", "lut_levels",
           "logic_levels")


def _endpoint(atomics, width=WIDTH):
    return RoceEndpoint(width, NUM_QPS, responder=True,
                        **({"atomics": atomics} if atomics else {}))


def _block(path, atomics):
    """A block of the endpoint (``path``: attribute names from the endpoint), alone."""
    def make():
        obj = _endpoint(atomics)
        for name in path:
            obj = getattr(obj, name)
        return obj
    return make


#: (name, description, factory, whole core, synthesize() options); the pairs without and with
#: atomics side by side
DESIGNS = []
for _atomics in (None, "little"):
    _with = "with atomics" if _atomics else "without atomics"
    _tag = "_atomics" if _atomics else ""
    DESIGNS += [
        (f"responder{_tag}", f"Responder, W = 512, 8 QPs, READs, {_with}",
         _block(("features", "responder", "resp"), _atomics), False, {}),
        (f"payload_memory{_tag}", f"PayloadMemory, W = 512, 256 KiB on chip, responder and "
         f"READ ports, {_with}", _block(("features", "memory", "mem"), _atomics), False, {}),
        (f"payload_reader{_tag}", f"PayloadReader, W = 512, {_with}",
         _block(("features", "memory", "mem", "_reader"), _atomics), False, {}),
        (f"payload_reader{_tag}_depth", f"PayloadReader, W = 512, {_with}, mapped for "
         f"{LEVEL_GOAL} LUT levels", _block(("features", "memory", "mem", "_reader"), _atomics),
         False, {"depth_target": LEVEL_GOAL}),
    ]
DESIGNS += [
    ("atomic_alu", "AtomicAlu, W = 512, little-endian", lambda: AtomicAlu(512, byteorder="little"),
     False, {}),
    ("atomic_alu_depth", f"AtomicAlu, W = 512, little-endian, mapped for {LEVEL_GOAL} LUT levels",
     lambda: AtomicAlu(512, byteorder="little"), False, {"depth_target": LEVEL_GOAL}),
    ("atomic_alu_w64", "AtomicAlu, W = 64, little-endian", lambda: AtomicAlu(64, byteorder="little"),
     False, {}),
    ("endpoint_responder", "RoceEndpoint(512, 8, responder=True), on-chip memory",
     lambda: _endpoint(None), True, {}),
    ("endpoint_responder_atomics", "RoceEndpoint(512, 8, responder=True, atomics=\"little\"), "
     "on-chip memory", lambda: _endpoint("little"), True, {}),
]


def synth_figures(quick=False):
    """The Yosys figures of :data:`DESIGNS` (``quick``: not the whole cores)."""
    rows = []
    revision = git_revision()
    for name, description, factory, core, options in DESIGNS:
        if core and quick:
            continue
        print(f"{name}: {description} ...", flush=True)
        r = synthesize(factory(), top="top", workdir=ROOT / "build" / "synth" / f"atomics_{name}",
                       cache=True, label=f"atomics-{name}", **options)
        print(f"  {r['lut_total']:,} LUTs, {r['ff']:,} FF, {r['bram36']} RAMB36 + "
              f"{r['bram18']} RAMB18, {r['lut_levels']} LUT levels "
              f"({r['synth_seconds']:.0f} s{', cached' if r['cached'] else ''})", flush=True)
        rows.append({"kind": "size", "name": name, "description": description, **options,
                     "revision": revision, "yosys": r["yosys"], "cached": r["cached"],
                     "synth_seconds": round(r["synth_seconds"], 1),
                     **{k: r[k] for k in FIGURES}})
    by = {r["name"]: r for r in rows}
    for name in ("responder", "payload_memory", "payload_reader", "endpoint_responder"):
        a, b = by.get(name), by.get(f"{name}_atomics")
        if a and b:
            print(f"  atomics in {name}: {b['lut_total'] - a['lut_total']:+,} LUTs, "
                  f"{b['ff'] - a['ff']:+,} FF, {b['bram36'] - a['bram36']:+} RAMB36, "
                  f"{b['bram18'] - a['bram18']:+} RAMB18, LUT levels {a['lut_levels']} -> "
                  f"{b['lut_levels']}")
    return rows


def burst(qps=NUM_QPS, width=WIDTH):
    """``qps`` QPs x 16 FETCH_ADDs back to back into the endpoint at ``width`` (Amaranth
    simulator); see the module documentation."""
    from rocegen.gateware.roce.layouts import QPN_BASE, QpState
    from rocegen.gateware.roce.responder.responder import default_config
    from rocegen.sim.models.packets import Packet
    from rocegen.sim.models.rnic import IDEAL, Access, Rnic
    from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
    from rocegen.sim.testing.harness import run_sim
    from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
    from rocegen.wire.addr import parse_ip, parse_mac

    ep = _endpoint("little", width)
    order = ep.features.responder.resp._order
    push = ep.features.responder.resp._read.push
    base = ep.config["resp_region"][0]
    rkeys = [c["mr"]["rkey"] for c in default_config(NUM_QPS, *ep.config["resp_region"],
                                                     rkey_seed=ep.config["rkey_seed"])]
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    host_qpn = 0x40
    for k in range(qps):
        host.create_qp(host_qpn + k, peer_qpn=QPN_BASE + k, peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                       epsn=0, pmtu=1024, sq_psn=5, access=Access.REMOTE_WRITE, max_rd_atomic=16)
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    counter = base + 0x200
    trace, rec, out = [], {"on": False}, {}

    async def watch(ctx):
        async for _, _, *vals in ctx.tick().sample(ep.mac_rx.valid, ep.mac_rx.ready,
                                                   ep.mac_rx.payload.last, push.valid,
                                                   order.rd_i.valid, order.written):
            if rec["on"]:
                trace.append(tuple(int(v) for v in vals))

    async def exchange(ctx, frames, seen):
        """Send ``frames`` and the host's answers to what came back until nothing is
        outstanding; returns the packets of ``col`` seen."""
        for _ in range(200):
            while seen < len(col.packets):
                frames += host.receive(col.packets[seen].data)
                seen += 1
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
                frames = []
            await ctx.tick().repeat(20)
            if not host.send_outstanding():
                return seen
            frames = host.next_frames()
        raise AssertionError("the host's atomics did not complete")

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        for k in range(qps):
            ctx.set(ep.qp_ctl.payload, {"qp": k, "context": {
                "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": host_qpn + k,
                "pmtu_log2": 10, "udp_sport": 0xC000 + k}})
            ctx.set(ep.qp_ctl.valid, 1)
            await ctx.tick().until(ep.qp_ctl.ready)
            ctx.set(ep.qp_ctl.valid, 0)
            ctx.set(ep.qp_psn.payload, {"qp": k, "psn": 5})
            ctx.set(ep.qp_psn.valid, 1)
            await ctx.tick().until(ep.qp_psn.ready)
            ctx.set(ep.qp_psn.valid, 0)
        # one atomic first: the endpoint resolves the host's address by ARP
        host.post_send(host_qpn, "FETCH_ADD", remote_addr=counter, rkey=rkeys[0], swap_add=1)
        seen = await exchange(ctx, host.next_frames(), 0)
        await ctx.tick().repeat(100)
        first_cq = len(host.send_cq)
        for _ in range(16):
            for k in range(qps):
                host.post_send(host_qpn + k, "FETCH_ADD", remote_addr=counter, rkey=rkeys[k],
                               swap_add=1)
        frames = host.next_frames()
        assert len(frames) == 16 * qps, len(frames)
        col0 = len(col.spans)
        rec["on"] = True
        await exchange(ctx, frames, seen)
        rec["on"] = False
        done = host.send_cq[first_cq:]
        values = sorted(int.from_bytes(c.data, "little") for c in done)
        assert values == list(range(1, 1 + 16 * qps)), values[:8]
        out["spans"] = col.spans[col0:col0 + 16 * qps]

    run_sim(ep, testbenches=[tb], processes=[watch, col.run], deadline_cycles=None)
    # (cycles from the first beat of the burst; the collector counts from the simulation's start)
    start = next(i for i, t in enumerate(trace) if t[0] and t[1])
    offset = col.cycle - len(trace) + start
    answers = [first - offset for first, _ in out["spans"]]
    last_in = max(i for i, t in enumerate(trace) if t[0] and t[1] and t[2]) - start
    pushes = [i - start for i, t in enumerate(trace) if t[3]]
    waited = sum(1 for i, t in enumerate(trace) if i >= start and t[4] and not t[5])
    waited_in = sum(1 for i, t in enumerate(trace)
                    if start <= i <= pushes[-1] + start and t[4] and not t[5])
    gaps = [b - a for a, b in zip(answers, answers[1:])]
    row = {"kind": "burst", "name": f"burst-{width}-{qps}qp", "width": width, "qps": qps,
           "atomics": len(answers), "last_request_in": last_in, "first_push": pushes[0],
           "last_push": pushes[-1],
           "first_answer_out": answers[0], "last_answer_out": answers[-1],
           "answer_gap_min": min(gaps), "answer_gap_max": max(gaps),
           "answer_gap_mean": round((answers[-1] - answers[0]) / (len(answers) - 1), 3),
           "cycles_waiting_for_written": waited,
           "cycles_waiting_for_written_while_queueing": waited_in}
    print(f"  burst at W = {width}, {row['atomics']} FETCH_ADDs on {qps} "
          f"QP{'s' if qps > 1 else ''}: requests in over cycles 0..{last_in} (queued "
          f"{pushes[0]}..{pushes[-1]}); answers out {answers[0]}..{answers[-1]}, "
          f"{min(gaps)}..{max(gaps)} cycles apart (mean "
          f"{row['answer_gap_mean']}); the generator's output waited {waited} cycles for "
          f"`written`, {waited_in} of them while atomics were being queued", flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--quick", action="store_true", help="not the whole cores")
    ap.add_argument("--burst", action="store_true", help="also the bursts in the Amaranth "
                    "simulator (a few minutes)")
    ap.add_argument("--no-synth", action="store_true", help="no Yosys run")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message=r".* created but never used")
    t0 = time.time()
    rows = [] if args.no_synth else synth_figures(args.quick)
    if args.burst:
        rows += [burst(1), burst(NUM_QPS), burst(NUM_QPS, 64)]
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        write_rows(args.json, rows)


if __name__ == "__main__":
    main()
