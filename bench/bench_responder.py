"""Throughput, message rate, ACK latency and size of the RC responder.

The :class:`~rocegen.gateware.roce.responder.responder.Responder` block (with a QP table) in the Amaranth
simulator, fed the request datagrams of the NIC model's requester (one QP, no loss, every
payload checked in memory), memory and transmitter always ready:

* goodput: RDMA WRITEs of 64 B .. 1 MiB at PMTU 1024 and 4096, datagrams offered as a 100G
  line brings them (each frame's wire bytes at 12.5 GB/s); the payload rate from the first beat
  in to the last write, against the 100G goodput limit of RDMA WRITE at that PMTU and size
  (``shared/spec/roce-wire.md``), with the requests the ingress had to drop (none wanted);
* message rate: 64 B WRITEs offered back to back, messages per second at the CMAC clock
  (322.27 MHz), against the line's (162 bytes a message on the wire);
* latency: cycles from the last beat of a 64 B WRITE with AckReq into the block to the first beat
  of its ACK out of it; and, for the whole endpoint (``RoceEndpoint(responder=True)``), from the
  last beat on ``mac_rx`` to the first beat of the ACK on ``mac_tx``; and from the last beat
  of a WRITE marked ECN CE into the block to the first beat of its CNP out of it;
* size (``--synth``): Yosys figures of the block at 512 bits, 8 QPs (mapped for area, and for
  8 LUT levels as ``bench_synth`` maps the cores), and of its notification point alone at 8
  and 256 QPs;
* AXI4: the goodput of RDMA WRITEs of 4 KiB and 1 MiB at PMTU 4096, as above, with the block
  writing through the payload memory's AXI4 master (``PayloadMemory(memory="axi4",
  responder=True)``) into a memory model whose write responses come 30..100 cycles after the
  data (in order, random): the payload rate from the first beat in to the write response of the
  last word.

Run: python -m bench.bench_responder [--json FILE] [--synth] [--quick]
"""

import argparse
import time

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from bench.bench_synth import LEVEL_GOAL, write_rows
from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint, default_clk_hz
from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.gateware.roce.responder.resp_cnp import RespCnp
from rocegen.gateware.roce.responder.responder import Responder, default_config
from rocegen.sim.models.memory.axi_write_mem import AxiWriteMemory
from rocegen.sim.models.packets import Packet, to_beats
from rocegen.sim.models.rnic import IDEAL, Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.framecheck import OP_CNP
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.roce_tops import ResponderTop
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.tools.synth import synthesize
from rocegen.wire.addr import parse_ip, parse_mac

WIDTH = 512
MEM = 1 << 23
LINE_GBPS = 100.0
#: per packet on the wire: preamble+SFD 8, IFG 12, Ethernet 14, FCS 4, IPv4 20, UDP 8, BTH 12,
#: ICRC 4; RETH 16 more on a message's first packet
WIRE_OVERHEAD = 82
RETH = 16
#: Cycles from a burst's data to its write response in the AXI4 rows (random, in order).
AXI_LATENCY = (30, 100)


class ResponderAxiTop(Elaboratable):
    """The :class:`Responder` (``resp``, with ``acked_writes``) writing through the AXI4 master
    of a :class:`PayloadMemory` (``mem``, its front-end and read ports idle), beside the QP
    table it reads its contexts from (``qps``)."""

    def __init__(self, width, num_qps, mem_bytes, **params):
        self.mem = PayloadMemory(width, "axi4", mem_bytes, responder=True)
        self.resp = Responder(width, num_qps, self.mem.word_addr_bits, acked_writes=True,
                              **params)
        self.qps = QpTable(num_qps)

    def elaborate(self, platform):
        m = Module()
        m.submodules.resp, m.submodules.qps, m.submodules.mem = self.resp, self.qps, self.mem
        m.d.comb += [self.qps.rx_qp.eq(self.resp.ctx_qp), self.resp.ctx.eq(self.qps.rx_context),
                     self.resp.mem_durable.eq(self.mem.resp_durable)]
        wiring.connect(m, self.resp.mem, self.mem.resp_w)
        return m



async def _open_qp0(ctx, top, pmtu):
    """QP 0 of a :class:`ResponderTop` ready to send (its peer the host) and its responder's
    ePSN 0x100."""
    dut = top.resp
    ctx.set(top.qps.ctl.payload, {"qp": 0, "context": {
        "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": 0x11,
        "pmtu_log2": pmtu.bit_length() - 1, "udp_sport": 0xC000}})
    ctx.set(top.qps.ctl.valid, 1)
    await ctx.tick()
    ctx.set(top.qps.ctl.valid, 0)
    ctx.set(dut.psn_set.payload, {"qp": 0, "psn": 0x100})
    ctx.set(dut.psn_set.valid, 1)
    await ctx.tick()
    ctx.set(dut.psn_set.valid, 0)

def limit_gbps(size, pmtu):
    """RDMA WRITE goodput limit of messages of ``size`` bytes at ``pmtu`` on a 100G line."""
    packets = max(1, -(-size // pmtu))
    wire = size + packets * WIRE_OVERHEAD + RETH
    return LINE_GBPS * size / wire


def request_datagrams(sizes, pmtu, rkey):
    """The IPv4 datagrams (ICRC removed) of WRITEs of ``sizes`` bytes from the NIC model's
    requester, answered by a model responder so that its window moves; and the data."""
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    peer = Rnic(FPGA_MAC, FPGA_IP, behaviour=IDEAL)
    host.create_qp(0x11, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu, sq_psn=0x100)
    peer.create_qp(QPN_BASE, peer_qpn=0x11, peer_ip=HOST_IP, peer_mac=HOST_MAC, epsn=0x100,
                   pmtu=pmtu)
    peer.register_mr(0, MEM, rkey)
    addr, expect = 0, []
    for k, n in enumerate(sizes):
        data = bytes((k * 7 + i) & 0xFF for i in range(n))
        host.post_send(0x11, "WRITE", data=data, remote_addr=addr, rkey=rkey)
        expect.append((addr, data))
        addr = (addr + n + 63) // 64 * 64 % (MEM - max(sizes))
    dgrams = []
    while host.send_outstanding():
        frames = host.next_frames()
        for f in frames:
            dgrams.append(f[14:14 + int.from_bytes(f[16:18], "big") - 4])
            for a in peer.receive(f):
                host.receive(a)
    return dgrams, expect


def run_block(dgrams, pmtu, *, gap_after_each=0, line=True, axi=False):
    """Feed the datagrams at the line's pace (``line``) or back to back, ``gap_after_each``
    idle cycles more after each; (marks: first input beat, last write and every datagram's last
    input beat, in cycles; the memory image; the ACK collector). With ``axi``, the block writes
    through AXI4 (:class:`ResponderAxiTop`) and the last write is the last write response."""
    top = (ResponderAxiTop if axi else ResponderTop)(WIDTH, 1, MEM,
                                                     config_init=default_config(1, 0, MEM))
    dut = top.resp
    B = WIDTH // 8
    image = bytearray(MEM)
    tx = StreamCollector(dut.tx, WIDTH)
    marks = {"first": None, "last_write": 0, "last_in": [], "overflow": 0, "executed": [],
             "cycle": 0}

    async def memory(ctx):
        ctx.set(dut.mem.ready, 1)
        cycle = 0
        async for _, _, valid, w in ctx.tick().sample(dut.mem.valid, dut.mem.payload):
            cycle += 1
            if valid:
                marks["last_write"] = cycle
                for lane in range(B):
                    if w.be >> lane & 1:
                        image[w.addr * B + lane] = w.data >> 8 * lane & 0xFF

    async def inputs(ctx):
        cycle = 0
        async for _, _, valid, last, ovf, ex in ctx.tick().sample(
                dut.i.valid, dut.i.payload.last, dut.overflow, dut.executed):
            cycle += 1
            marks["cycle"] = cycle
            marks["overflow"] += ovf
            if ex:
                marks["executed"].append(cycle)
            if valid:
                if marks["first"] is None:
                    marks["first"] = cycle
                if last:
                    marks["last_in"].append(cycle)

    async def tb(ctx):
        await _open_qp0(ctx, top, pmtu)
        await ctx.tick().repeat(4)
        drv = StreamDriver(dut.i, WIDTH)
        per_cycle = LINE_GBPS * 1e9 / 8 / default_clk_hz(WIDTH)
        line_t = None           # when the line has brought the frames so far, in cycles
        for d in dgrams:
            if line_t is None:
                line_t = marks["cycle"]
            await drv.send(ctx, [Packet(d)])
            # the frame's time on the line: preamble and gap 20, Ethernet 14, the datagram,
            # ICRC 4, FCS 4 (the input is always ready: the beats never fall behind the line)
            line_t += (len(d) + 42) / per_cycle
            while line and marks["cycle"] < line_t:
                await ctx.tick()
            if gap_after_each:
                await ctx.tick().repeat(gap_after_each)
        await ctx.tick().repeat(300)

    if axi:
        def acked(cycle, burst):
            marks["last_write"] = cycle + 1
        ram = AxiWriteMemory(WIDTH, MEM, aw=top.mem.axi.aw, w=top.mem.axi.w, b=top.mem.axi.b,
                             b_latency=AXI_LATENCY, seed=1, on_ack=acked)
        image = ram.mem
        memory = ram.run
    run_sim(top, testbenches=[tb], processes=[memory, inputs, tx.run], deadline_cycles=None)
    return marks, image, tx


def goodput(sizes_pmtus, *, axi=False):
    rows = []
    clk = default_clk_hz(WIDTH)
    for size, pmtu in sizes_pmtus:
        count = max(2, min(64, (1 << 20) // max(size, 1)))
        dgrams, expect = request_datagrams([size] * count, pmtu, default_config(1, 0, MEM)[0]
                                           ["mr"]["rkey"])
        marks, image, _ = run_block(dgrams, pmtu, axi=axi)
        if not marks["overflow"]:
            for addr, data in expect:
                assert image[addr:addr + len(data)] == data, f"{size} B at PMTU {pmtu}: data"
        cycles = marks["last_write"] - marks["first"] + 1
        beats = sum(len(to_beats(d, WIDTH)) for d in dgrams)
        gbps = size * count * 8 / (cycles / clk) / 1e9
        limit = limit_gbps(size, pmtu)
        rows.append({"kind": "responder",
                     "name": f"write-{size}B-pmtu{pmtu}" + ("-axi4" if axi else ""), "size": size,
                     "pmtu": pmtu, "messages": count, "cycles": cycles, "beats_in": beats,
                     "dropped": marks["overflow"], "limit_gbps": round(limit, 2),
                     "goodput_gbps": round(gbps, 2),
                     "percent_of_limit": round(100 * gbps / limit, 2),
                     **({"memory": "axi4", "b_latency": list(AXI_LATENCY)} if axi else {})})
        print(f"  WRITE {size:>8} B  PMTU {pmtu}{' AXI4' if axi else ''}: {count} messages, "
              f"{cycles} cycles, "
              f"{gbps:6.2f} Gb/s = {rows[-1]['percent_of_limit']:.1f} % of the {limit:.2f} Gb/s "
              f"limit, {marks['overflow']} dropped")
    return rows


def message_rate():
    clk = default_clk_hz(WIDTH)
    n = 400
    dgrams, expect = request_datagrams([64] * n, 1024, default_config(1, 0, MEM)[0]["mr"]["rkey"])
    marks, image, _ = run_block(dgrams, 1024, line=False)
    # (offered faster than it takes them, the ingress drops some: the rate is that of the
    # requests executed, first to last)
    ex = marks["executed"]
    cycles = (ex[-1] - ex[0]) / (len(ex) - 1) * n
    rate = n / (cycles / clk)
    line = LINE_GBPS * 1e9 / 8 / (64 + WIRE_OVERHEAD + RETH)
    print(f"  64 B WRITEs: {cycles / n:.2f} cycles a message, {rate / 1e6:.2f} M/s "
          f"(line: {line / 1e6:.2f} M/s)")
    return {"kind": "responder", "name": "message-rate-64B", "cycles_per_message":
            round(cycles / n, 3), "messages_per_s": round(rate), "line_messages_per_s":
            round(line), "percent_of_line": round(100 * min(rate, line) / line, 2)}


def block_latency():
    dgrams, _ = request_datagrams([64] * 8, 1024, default_config(1, 0, MEM)[0]["mr"]["rkey"])
    marks, _, tx = run_block(dgrams, 1024, gap_after_each=60)
    lat = [first - last for (first, _), last in zip(tx.spans, marks["last_in"])]
    print(f"  block: last beat in to first ACK beat out: {lat} cycles")
    return {"kind": "responder", "name": "ack-latency-block", "cycles": max(lat)}


def endpoint_latency():
    """mac_rx last beat to mac_tx first beat of the ACK, the whole endpoint (its MAC address
    resolved by ARP before the measured WRITE)."""
    ep = RoceEndpoint(WIDTH, 1, responder=True)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    host.create_qp(0x11, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=1024, sq_psn=5)
    rkey = default_config(1, *ep.config["resp_region"])[0]["mr"]["rkey"]
    drv = StreamDriver(ep.mac_rx, WIDTH, gaps="between")
    col = StreamCollector(ep.mac_tx, WIDTH)
    cycles = {"in": []}

    async def watch(ctx):
        cycle = 0
        async for _, _, v, r, last in ctx.tick().sample(ep.mac_rx.valid, ep.mac_rx.ready,
                                                        ep.mac_rx.payload.last):
            cycle += 1
            if v and r and last:
                cycles["in"].append(cycle)

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.qp_ctl.payload, {"qp": 0, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": 0x11,
            "pmtu_log2": 10, "udp_sport": 0xC000}})
        ctx.set(ep.qp_ctl.valid, 1)
        await ctx.tick().until(ep.qp_ctl.ready)
        ctx.set(ep.qp_ctl.valid, 0)
        ctx.set(ep.qp_psn.payload, {"qp": 0, "psn": 5})
        ctx.set(ep.qp_psn.valid, 1)
        await ctx.tick().until(ep.qp_psn.ready)
        ctx.set(ep.qp_psn.valid, 0)
        seen = 0
        for k in range(3):
            host.post_send(0x11, "WRITE", data=bytes(64), remote_addr=64 * k, rkey=rkey)
            for _ in range(60):
                frames = host.next_frames()
                while seen < len(col.packets):
                    frames += host.receive(col.packets[seen].data)
                    seen += 1
                if frames:
                    await drv.send(ctx, [Packet(f) for f in frames])
                await ctx.tick().repeat(20)
                if not host.send_outstanding():
                    break
            await ctx.tick().repeat(200)

    run_sim(ep, testbenches=[tb], processes=[watch, col.run], deadline_cycles=None)
    # the last WRITE (ARP long resolved) and the last frame out: its ACK
    lat = col.spans[-1][0] - cycles["in"][-1]
    print(f"  endpoint: mac_rx last beat to mac_tx first ACK beat: {lat} cycles")
    return {"kind": "responder", "name": "ack-latency-endpoint", "cycles": lat}


def cnp_latency():
    """Cycles from the last beat of a 64 B WRITE marked ECN CE into the block to the first beat
    of its CNP out of it (interval 0: every marked request answered; the CNP follows the
    request's ACK)."""
    dgrams, _ = request_datagrams([64] * 8, 1024, default_config(1, 0, MEM)[0]["mr"]["rkey"])
    marked = []
    for d in dgrams:                    # ECN CE, and the IPv4 header checksum again
        h = bytearray(d[:20])
        h[1] |= 0b11
        h[10:12] = b"\0\0"
        c = sum(int.from_bytes(h[k:k + 2], "big") for k in range(0, 20, 2))
        c = (c & 0xFFFF) + (c >> 16)
        h[10:12] = (~c & 0xFFFF).to_bytes(2, "big")
        marked.append(bytes(h) + d[20:])
    top = ResponderTop(WIDTH, 1, MEM, config_init=default_config(1, 0, MEM), cnp_interval=0)
    dut = top.resp
    tx = StreamCollector(dut.tx, WIDTH)
    last_in = []

    async def watch(ctx):
        cycle = 0
        async for _, _, valid, last in ctx.tick().sample(dut.i.valid, dut.i.payload.last):
            cycle += 1
            if valid and last:
                last_in.append(cycle)

    async def tb(ctx):
        ctx.set(dut.mem.ready, 1)
        await _open_qp0(ctx, top, 1024)
        drv = StreamDriver(dut.i, WIDTH)
        for d in marked:
            await drv.send(ctx, [Packet(d)])
            await ctx.tick().repeat(60)
        await ctx.tick().repeat(100)

    run_sim(top, testbenches=[tb], processes=[watch, tx.run], deadline_cycles=None)
    cnps = [first for (first, _), p in zip(tx.spans, tx.packets) if p.data[0] == OP_CNP]
    assert len(cnps) == len(marked), "a CNP is missing"
    lat = [first - last for first, last in zip(cnps, last_in)]
    print(f"  block: last beat of a CE-marked request in to first CNP beat out: {lat} cycles")
    return {"kind": "responder", "name": "cnp-latency-block", "cycles": max(lat)}


def cnp_synth_figures():
    """The notification point alone (its per-QP time stamps at 8 and 256 QPs)."""
    rows = []
    for n in (8, 256):
        r = synthesize(RespCnp(n), top="top", workdir=f"build/synth/resp_cnp_{n}")
        print(f"  RespCnp({n}): {r['lut_total']:,} LUTs, {r['ff']:,} FF, "
              f"{r['bram36']} RAMB36 + {r['bram18']} RAMB18, {r['lut_levels']} LUT levels")
        rows.append({"kind": "responder", "name": f"size-cnp-{n}qp", **{k: r[k] for k in (
            "lut_total", "ff", "bram36", "bram18", "lut_levels")}})
    return rows


def synth_figures():
    """The block at 512 bits, 8 QPs: mapped for area (Yosys's default), and for
    :data:`LEVEL_GOAL` LUT levels as ``bench_synth`` maps the cores."""
    rows = []
    for depth in (None, LEVEL_GOAL):
        r = synthesize(Responder(WIDTH, 8, 26, config_init=default_config(8, 0, 1 << 20)),
                       top="top", workdir=f"build/synth/responder{depth or ''}",
                       depth_target=depth)
        how = f"mapped for {depth} LUT levels" if depth else "mapped for area"
        print(f"  Responder(512, 8), {how}: {r['lut_total']:,} LUTs, {r['ff']:,} FF, "
              f"{r['bram36']} RAMB36 + {r['bram18']} RAMB18, {r['lut_levels']} LUT levels "
              f"({r['synth_seconds']:.0f} s)")
        rows.append({"kind": "responder",
                     "name": "size-512-8qp" + (f"-depth{depth}" if depth else ""),
                     **({"depth_target": depth} if depth else {}),
                     **{k: r[k] for k in ("lut_total", "ff", "bram36", "bram18", "lut_levels")}})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the figures to this file")
    ap.add_argument("--synth", action="store_true", help="also synthesize the block (Yosys)")
    ap.add_argument("--quick", action="store_true", help="fewer sizes")
    args = ap.parse_args(argv)
    t0 = time.time()
    sizes = [64, 4096, 65536] if args.quick else [64, 256, 1024, 4096, 16384, 65536, 1 << 20]
    rows = goodput([(s, p) for p in (1024, 4096) for s in sizes])
    rows += goodput([(4096, 4096), (1 << 20, 4096)], axi=True)
    rows.append(message_rate())
    rows.append(block_latency())
    rows.append(endpoint_latency())
    rows.append(cnp_latency())
    if args.synth:
        rows += synth_figures()
        rows += cnp_synth_figures()
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        write_rows(args.json, rows)


if __name__ == "__main__":
    main()
