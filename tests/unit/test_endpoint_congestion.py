"""The endpoint with DCQCN's reaction point (``RoceEndpoint(dcqcn=True)``), whole, in the
Amaranth simulator: a QP sends WRITEs to the host NIC model as fast as the rate limiter lets it;
its data packets are ECN-capable with the configured DSCP; a CNP from the host cuts the QP's
rate on the wire to what the reference model of the DCQCN law says; with the bypass CNPs change
nothing; the traffic-class port changes the VLAN priority of the frames sent.

Rates on the wire are counted independently of the gateware: every frame of ``mac_tx`` as its
length plus FCS (4), preamble and SFD (8) and the inter-frame gap (12)."""

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from rocegen.gateware.roce.dcqcn_layouts import DCQCN_CONFIG, dcqcn_config
from rocegen.gateware.roce.endpoint import RoceEndpoint, default_clk_hz, default_line_gbps
from rocegen.gateware.roce.layouts import QPN_BASE, TRAFFIC_CONFIG, QpState, WrOpcode
from rocegen.sim.models import icrc
from rocegen.sim.models.dcqcn import DcqcnParams, DcqcnRp
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire.addr import parse_ip, parse_mac

MEM = 1 << 16
HOST_QPN = 0x21
RKEY = 0x1234
#: Timers and byte counter far beyond the run: after a CNP the rate stays where it was cut.
SLOW = {"timer_us": 2000.0, "alpha_us": 2000.0, "byte_count": 1 << 31}
#: What a frame of n bytes (no FCS) takes on the wire.
WIRE_EXTRA = 4 + 8 + 12


def cnp_frame(dest_qp, vlan=None):
    """A CNP from the host to the endpoint's QP ``dest_qp`` (scapy for Ethernet, IPv4 and
    UDP; the header table for the BTH; a valid ICRC)."""
    bth = H.BTH.pack(opcode=H.OP_CNP, becn=1, pkey=0xFFFF, dest_qp=dest_qp, psn=0)
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    frame = eth / IP(src=HOST_IP, dst=FPGA_IP, tos=48 << 2, flags="DF") / \
        UDP(sport=0xC000, dport=H.UDP_PORT_ROCEV2, chksum=0) / (bth + bytes(16) + bytes(4))
    return icrc.append(bytes(frame)[:-4])


def run(width, *, steps, cnp_at=None, cc_cfg=None, tc_cfg_at=None, vlan=None, pmtu=256,
        params=SLOW):
    """Run the endpoint sending WRITEs of QP 0 to the host for ``steps`` cycles; a CNP arrives
    at ``cnp_at``; ``cc_cfg`` is written at the start, ``tc_cfg_at = (cycle, config)`` later.
    Returns the frames sent ``[(cycle of the last beat, frame bytes)]``, the rates read on
    ``cc_rate`` (``[(cycle, rate)]``) and the cycles of the CNP and the ``tc_cfg`` write."""
    ep = RoceEndpoint(width, 2, mem_bytes=MEM, ring_bytes=MEM // 2, dcqcn=True,
                      dcqcn_params=params, dscp=26, vlan=vlan, pcp=1)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, vlan=vlan)
    host.create_qp(HOST_QPN, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu)
    host.register_mr(0, 1 << 20, RKEY)
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    sent, rates, marks, now = [], [], {}, [0]

    async def monitor(ctx):
        nbytes = 0
        async for _, _, v, r, keep, last in ctx.tick().sample(
                ep.mac_tx.valid, ep.mac_tx.ready, ep.mac_tx.payload.keep,
                ep.mac_tx.payload.last):
            now[0] += 1
            if v and r:
                nbytes += bin(keep).count("1")
                if last:
                    sent.append(now[0])
                    nbytes = 0

    async def work_requests(ctx):
        def post(k):
            ctx.set(ep.wr.payload, {"wr_id": k, "qp": 0, "opcode": WrOpcode.WRITE,
                                    "local_addr": 0, "length": 4096,
                                    "remote_offset": (k % 64) * 4096})
        k = 0
        post(k)
        ctx.set(ep.wr.valid, 1)
        async for _, _, ready in ctx.tick().sample(ep.wr.ready):
            if ready:
                k += 1
                post(k)

    async def tb(ctx):
        nonlocal cnp_at, tc_cfg_at
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.cpl.ready, 1)
        if cc_cfg is not None:
            ctx.set(ep.cc_cfg.payload, DCQCN_CONFIG.const(cc_cfg))
            ctx.set(ep.cc_cfg.valid, 1)
            await ctx.tick()
            ctx.set(ep.cc_cfg.valid, 0)
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
                frames.append(cnp_frame(QPN_BASE, vlan))
                cnp_at, marks["cnp"] = None, now[0]
            if tc_cfg_at is not None and now[0] >= tc_cfg_at[0]:
                ctx.set(ep.tc_cfg.payload, TRAFFIC_CONFIG.const(tc_cfg_at[1]))
                ctx.set(ep.tc_cfg.valid, 1)
                await ctx.tick()
                ctx.set(ep.tc_cfg.valid, 0)
                tc_cfg_at, marks["tc"] = None, now[0]
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


def wire_rate(frames, start, end):
    """Wire bytes per cycle of the frames whose last beat is in [start, end)."""
    return sum(len(f) + WIRE_EXTRA for c, f in frames if start <= c < end) / (end - start)


def model_params(width, **physical):
    return DcqcnParams.from_physical(default_clk_hz(width), default_line_gbps(width), **physical)


@pytest.mark.parametrize("width", [64, 512])
def test_a_cnp_cuts_the_rate_on_the_wire_by_the_model(width):
    warm, window = (4000, 12_000) if width == 64 else (3000, 6000)
    cnp_at = warm + window
    frames, rates, marks = run(width, steps=cnp_at + 1500 + window, cnp_at=cnp_at,
                               pmtu=256 if width == 64 else 1024)
    p = model_params(width, **SLOW)
    rp = DcqcnRp(p)
    rc0 = rp.rc
    rp.cnp(0)
    rc1 = rp.rc
    assert rc1 == rc0 - (rc0 >> 1)                   # alpha 1: halved
    # the data packets: ECN-capable, DSCP 26
    data = [IP(f[14:]) for _, f in frames if IP(f[14:]).haslayer(UDP)]
    assert data and all(ip.tos == 26 << 2 | 0b10 for ip in data)
    # the rate read back, before and after
    t_cnp = marks["cnp"]
    assert {r for c, r in rates if c < t_cnp} == {rc0}
    assert {r for c, r in rates if c > t_cnp + 200} == {rc1}
    line = rc0 / (1 << 20)
    before = wire_rate(frames, warm, warm + window)
    after = wire_rate(frames, t_cnp + 1500, t_cnp + 1500 + window)
    assert before == pytest.approx(line, rel=0.03)
    assert after == pytest.approx(rc1 / (1 << 20), rel=0.03)


def test_the_bypass_ignores_cnps_and_the_priority_changes_at_run_time():
    width = 64
    cfg = dcqcn_config(default_clk_hz(width), default_line_gbps(width), bypass=True, **SLOW)
    steps = 14_000
    frames, rates, marks = run(width, steps=steps, cnp_at=4000, cc_cfg=cfg, vlan=5,
                               tc_cfg_at=(9000, {"dscp": 26, "ecn": 2, "pcp": 6}))
    line = cfg["line_rate"] / (1 << 20)
    # no limiter: as fast as the path goes (beyond the line: this test has no MAC), the same
    # after the CNP as before
    before, after = wire_rate(frames, 1500, 4000), wire_rate(frames, 5500, 9000)
    assert before > line * 1.03
    assert after == pytest.approx(before, rel=0.03)
    assert {r for c, r in rates if c > 100} == {cfg["line_rate"]}
    tagged = [(c, Ether(f)) for c, f in frames]
    assert all(e.haslayer(Dot1Q) and e[Dot1Q].vlan == 5 for _, e in tagged)
    t = marks["tc"]
    assert {e[Dot1Q].prio for c, e in tagged if c < t} == {1}
    late = {e[Dot1Q].prio for c, e in tagged if c > t + 200}
    assert late == {6}
