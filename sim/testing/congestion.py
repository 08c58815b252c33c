"""An endpoint with DCQCN's reaction point sending to the host NIC model, in the Amaranth
simulator, with a CNP from the host: the DCQCN benchmark's whole-endpoint reaction
(``bench/bench_dcqcn.py``). Frames are timed at their first and last beat on ``mac_tx``; the
CNP at its last beat on ``mac_rx``."""

from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
from rocegen.gateware.roce.layouts import QPN_BASE, QpState, WrOpcode
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC, cnp_frame
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["SLOW", "run_endpoint"]

MEM = 1 << 16
HOST_QPN = 0x21
RKEY = 0x1234
#: Timers and byte counter far beyond the run: after a CNP the rate stays where it was cut.
SLOW = {"timer_us": 2000.0, "alpha_us": 2000.0, "byte_count": 1 << 31}


def run_endpoint(width, *, steps, cnp_at=None, pmtu=256, params=SLOW, length=4096):
    """Run the endpoint sending WRITEs of QP 0 to the host for ``steps`` cycles; a CNP arrives
    at ``cnp_at``. WRITEs of ``length`` bytes; the reaction point's parameters ``params``.
    Returns the frames sent ``[(cycle of the last beat, frame bytes)]``, the rates read on
    ``cc_rate`` (``[(cycle, rate)]``) and ``marks``: the cycle the CNP was handed to the driver
    (``cnp``), of its last beat on ``mac_rx`` (``cnp_in``), and the first-beat cycles of the
    frames (``starts``)."""
    ep = shared(RoceEndpoint, width, 2, mem_bytes=MEM, ring_bytes=MEM // 2, dcqcn=True,
                dcqcn_params=params, dscp=26, pcp=1)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    host.create_qp(HOST_QPN, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu)
    host.register_mr(0, 64 * length, RKEY)
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    sent, rates, now = [], [], [0]
    marks = {"starts": []}

    async def monitor(ctx):
        first = True
        async for _, _, v, r, last, iv, ir, ilast in ctx.tick().sample(
                ep.mac_tx.valid, ep.mac_tx.ready, ep.mac_tx.payload.last, ep.mac_rx.valid,
                ep.mac_rx.ready, ep.mac_rx.payload.last):
            now[0] += 1
            if v and r:
                if first:
                    marks["starts"].append(now[0])
                first = bool(last)
                if last:
                    sent.append(now[0])
            if iv and ir and ilast and "cnp" in marks and "cnp_in" not in marks:
                marks["cnp_in"] = now[0]

    async def work_requests(ctx):
        def post(k):
            ctx.set(ep.wr.payload, {"wr_id": k, "qp": 0, "opcode": WrOpcode.WRITE,
                                    "local_addr": 0, "length": length,
                                    "remote_offset": (k % 64) * length})
        k = 0
        post(k)
        ctx.set(ep.wr.valid, 1)
        async for _, _, ready in ctx.tick().sample(ep.wr.ready):
            if ready:
                k += 1
                post(k)

    async def tb(ctx):
        nonlocal cnp_at
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.cpl.ready, 1)
        ctx.set(ep.qp_ctl.payload, {"qp": 0, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": HOST_QPN,
            "rkey": RKEY, "base_va": 0, "pmtu_log2": pmtu.bit_length() - 1,
            "udp_sport": 0xC123, "dscp": 26, "ecn": 0b10, "ack_every_log2": 3}})
        ctx.set(ep.qp_ctl.valid, 1)
        await ctx.tick().until(ep.qp_ctl.ready)
        ctx.set(ep.qp_ctl.valid, 0)
        seen = 0
        while now[0] < steps:
            frames = host.next_frames(budget=4)
            while seen < len(col.packets):
                frames += host.receive(col.packets[seen].data)
                seen += 1
            if cnp_at is not None and now[0] >= cnp_at:
                frames = [cnp_frame(QPN_BASE)] + frames     # (first: its time is known)
                cnp_at, marks["cnp"] = None, now[0]
            ctx.set(ep.cc_qp, 0)
            await ctx.tick()
            rates.append((now[0], ctx.get(ep.cc_rate)))
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
            else:
                await ctx.tick().repeat(20)

    run_sim(ep, testbenches=[tb], processes=[monitor, work_requests, col.run],
            deadline_cycles=steps + 50_000)
    frames = [(c, bytes(p.data)) for c, p in zip(sent, col.packets)]
    return frames, rates, marks

