"""The RoCEv2 packet builder against the requester model (segment() + build_frame()), with
random idle input and random backpressure; its packets checked with scapy; and the builder in
front of the network stack, whose frames the host NIC model (strict) accepts and executes."""

import random
import struct

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from rocegen.gateware.net.stack import NetStack
from rocegen.gateware.roce.layouts import WrSource
from rocegen.gateware.roce.requester.builder import RocePacketBuilder
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.requester.requester import (
    SEND_OPCODES,
    QpSegment,
    WorkRequest,
    WrOpcode,
    build_frame,
    generator_operands,
    segment,
)
from rocegen.sim.models.rnic import Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip, parse_mac

PMTU = 256
ICRC = icrc_model.ICRC_LEN
ETH_IP_UDP = H.ETH.length + H.IPV4.length + H.UDP.length


class Route:
    """Where a QP's packets go and how they are marked (the QP context fields the builder
    copies into the UDP metadata)."""

    def __init__(self, peer_ip, udp_sport, dscp=0, ecn=0):
        self.peer_ip, self.udp_sport, self.dscp, self.ecn = peer_ip, udp_sport, dscp, ecn


def desc_meta(pkt, qp, route, rng, *, wr_id=0, qp_index=0):
    """The PACKET_DESC of model packet ``pkt``. Fields of absent headers get random values: the
    builder must ignore them."""
    va, rkey, dma_len = pkt.reth if pkt.reth is not None else (
        rng.getrandbits(64), rng.getrandbits(32), rng.getrandbits(32))
    if pkt.atomic is not None:
        va, rkey = pkt.atomic
    return {
        "wr_id": wr_id, "qp": qp_index, "dest_qpn": qp.dest_qpn, "opcode": pkt.opcode,
        "psn": pkt.psn, "ack_req": int(pkt.ack_req), "se": int(pkt.se), "padcnt": pkt.padcnt,
        "local_addr": rng.getrandbits(32) & ~63, "length": pkt.length,
        "has_reth": int(pkt.reth is not None), "va": va, "rkey": rkey, "dma_len": dma_len,
        "has_imm": int(pkt.imm is not None),
        "imm": pkt.imm if pkt.imm is not None else rng.getrandbits(32),
        "last": int(pkt.last), "src": rng.choice(list(WrSource)).value,
        "peer_ip": route.peer_ip, "udp_sport": route.udp_sport, "dscp": route.dscp,
        "ecn": route.ecn,
    }


def expected_datagram(pkt, payload, qp, route, atomics="little"):
    """The UDP payload without ICRC, from the model's whole frame."""
    frame = build_frame(pkt, payload, qp, src_mac=parse_mac(FPGA_MAC), dst_mac=parse_mac(HOST_MAC),
                        src_ip=parse_ip(FPGA_IP), dst_ip=route.peer_ip, udp_sport=route.udp_sport,
                        dscp=route.dscp, ecn=route.ecn, atomics=atomics)
    return frame[ETH_IP_UDP:-ICRC]


def expected_meta(datagram, route):
    return {"udp": {"dst_ip": route.peer_ip, "src_port": route.udp_sport,
                    "dst_port": H.UDP_PORT_ROCEV2, "length": len(datagram) + ICRC,
                    "dscp": route.dscp, "ecn": route.ecn, "icrc": 1, "checksum": 0}}


def work_requests(rng, *, atomics=False):
    """Every opcode as ONLY packets of lengths 0..PMTU (all PadCnt values, beat boundaries) and
    as FIRST/MIDDLE/LAST messages; READs as their request (RETH, no payload); with ``atomics``
    the atomics too (AtomicETH, the operands from the payload)."""
    wrs = []
    n = 0
    for op in WrOpcode:
        if op.is_atomic and not atomics:
            continue
        lengths = [0, 1, 2, 3, 4, 7, 8, 9, 63, 64, 65, PMTU - 1, PMTU,
                   2 * PMTU + 1, 3 * PMTU, rng.randrange(PMTU + 1), rng.randrange(PMTU + 1)]
        for length in lengths:
            n += 1
            wrs.append(WorkRequest(n, op, length, remote_offset=rng.getrandbits(40),
                                   imm=rng.getrandbits(32)))
    rng.shuffle(wrs)
    return wrs


def make_stream(wrs, rng, atomics="little"):
    """(packets for the builder, expected (datagram, meta), model packets with payloads)."""
    qp = QpSegment(dest_qpn=rng.getrandbits(24), rkey=rng.getrandbits(32),
                 base_va=rng.getrandbits(64), psn=rng.getrandbits(24), pmtu=PMTU,
                 ack_every=rng.choice([1, 2, 64]))
    routes = [Route(rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(6),
                    rng.getrandbits(2)) for _ in range(3)]
    sent, want, model = [], [], []
    for wr in wrs:
        route = rng.choice(routes)
        for pkt in segment(wr, qp):
            payload = rng.randbytes(pkt.length)
            meta = desc_meta(pkt, qp, route, rng, wr_id=wr.wr_id, qp_index=rng.getrandbits(8))
            err = rng.random() < 0.1
            sent.append(Packet(payload, meta, error=err))
            if pkt.atomic is not None and meta["src"] == WrSource.GENERATOR.value:
                # the generator's payload is the test pattern: the builder makes its operands
                payload = generator_operands(pkt.opcode, meta["imm"], wr.wr_id, atomics)
            dgram = expected_datagram(pkt, payload, qp, route, atomics)
            want.append((dgram, expected_meta(dgram, route), err))
            model.append((pkt, payload, route))
    return sent, want, model, qp


def run_builder(width, sent, *, idle, backpressure, seed, atomics=None):
    dut = RocePacketBuilder(width, atomics=atomics)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)

    async def tb(ctx):
        await drv.send(ctx, sent)
        while len(col.packets) < len(sent):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run])
    return col


def check(col, want):
    assert len(col.packets) == len(want)
    for n, (got, (dgram, meta, err)) in enumerate(zip(col.packets, want)):
        assert got.data == dgram, f"packet {n}: {got.data.hex()} != {dgram.hex()}"
        assert got.meta == meta, f"packet {n}"
        assert got.error == err, f"packet {n}"


def test_every_opcode_is_covered():
    """The work requests of the tests produce every RC WRITE and SEND opcode and the READ
    request."""
    rng = random.Random(0)
    _, _, model, _ = make_stream(work_requests(rng), rng)
    assert {pkt.opcode for pkt, _, _ in model} == {
        opc.OP_RC_SEND_FIRST, opc.OP_RC_SEND_MIDDLE, opc.OP_RC_SEND_LAST,
        opc.OP_RC_SEND_LAST_WITH_IMMEDIATE, opc.OP_RC_SEND_ONLY, opc.OP_RC_SEND_ONLY_WITH_IMMEDIATE,
        opc.OP_RC_RDMA_WRITE_FIRST, opc.OP_RC_RDMA_WRITE_MIDDLE, opc.OP_RC_RDMA_WRITE_LAST,
        opc.OP_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, opc.OP_RC_RDMA_WRITE_ONLY,
        opc.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, opc.OP_RC_RDMA_READ_REQUEST}
    assert {pkt.padcnt for pkt, _, _ in model} == {0, 1, 2, 3}


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_matches_model(width):
    rng = random.Random(width)
    sent, want, _, _ = make_stream(work_requests(rng), rng)
    col = run_builder(width, sent, idle=0.3, backpressure=0.3, seed=width)
    check(col, want)


@pytest.mark.parametrize("width, order", [(64, "little"), (512, "big"), (128, "little")])
def test_atomic_requests_match_model(width, order):
    """With atomics, every opcode with the atomic requests among them: BTH and AtomicETH, the
    target from the descriptor and the operands from the payload in the memory's byte order;
    the AtomicETH read back from the datagram holds them."""
    rng = random.Random(width + 77)
    wrs = work_requests(rng, atomics=True)
    sent, want, model, _ = make_stream(wrs, rng, order)
    assert {opc.OP_RC_COMPARE_SWAP, opc.OP_RC_FETCH_ADD} <= {p.opcode for p, _, _ in model}
    generated = {(p.opcode, m.meta["src"]) for (p, _, _), m in zip(model, sent) if p.atomic}
    assert {(o, WrSource.GENERATOR.value) for o in (opc.OP_RC_COMPARE_SWAP, opc.OP_RC_FETCH_ADD)} \
        <= generated
    col = run_builder(width, sent, idle=0.3, backpressure=0.3, seed=width, atomics=order)
    check(col, want)
    n = opc.row(opc.OP_RC_FETCH_ADD)
    for (pkt, payload, _), (dgram, _, _) in zip(model, want):
        if pkt.atomic is None:
            continue
        bth = BTH(dgram)
        assert bth.opcode == pkt.opcode and len(dgram) == H.BTH.length + H.ATOMIC_ETH.length
        f = H.ATOMIC_ETH.unpack(dgram[H.BTH.length:])
        assert (f["va"], f["rkey"]) == pkt.atomic
        assert f["swap_add"] == int.from_bytes(payload[:8], order)
        assert f["compare"] == int.from_bytes(payload[8:16], order)
    # the generator's: a FETCH_ADD adds imm, COMPARE_SWAP s swaps imm + s + 1 for imm + s
    for (pkt, _, _), m, (dgram, _, _) in zip(model, sent, want):
        if pkt.atomic is not None and m.meta["src"] == WrSource.GENERATOR.value:
            f = H.ATOMIC_ETH.unpack(dgram[H.BTH.length:])
            imm, s = m.meta["imm"], m.meta["wr_id"]
            assert (f["swap_add"], f["compare"]) == (
                ((imm + s + 1) % 2**64, imm + s) if pkt.opcode == opc.OP_RC_COMPARE_SWAP
                else (imm, 0))
    assert n.has_atomic_eth


@pytest.mark.parametrize("width", [64, 128, 512])
def test_back_to_back_full_rate(width):
    """No idle input and no backpressure: one output beat on every cycle of the burst, and the
    minimum number of beats."""
    rng = random.Random(width + 5)
    wrs = [WorkRequest(n, rng.choice(SEND_OPCODES), rng.randrange(2 * PMTU + 2),
                       imm=rng.getrandbits(32)) for n in range(40)]
    sent, want, _, _ = make_stream(wrs, rng)
    col = run_builder(width, sent, idle=0.0, backpressure=0.0, seed=1)
    check(col, want)
    B = width // 8
    beats = sum(-(-len(d) // B) for d, _, _ in want)
    assert len(col.beat_cycles) == beats
    assert col.beat_cycles == list(range(col.beat_cycles[0], col.beat_cycles[0] + beats))


def test_packets_parse_with_scapy():
    """The builder's bytes, behind Ethernet/IPv4/UDP and with an ICRC appended, dissect with
    scapy as the intended BTH (and RETH / ImmDt / payload / pad), and scapy's own ICRC agrees."""
    width = 64
    rng = random.Random(11)
    wrs = [WorkRequest(1, WrOpcode.WRITE, 2 * PMTU + 5, remote_offset=0x123),
           WorkRequest(2, WrOpcode.WRITE_IMM, 6, imm=0xDEADBEEF),
           WorkRequest(3, WrOpcode.SEND, 0),
           WorkRequest(4, WrOpcode.SEND_IMM, PMTU + 1, imm=7),
           WorkRequest(5, WrOpcode.READ, 3 * PMTU + 1, remote_offset=0x77)]
    sent, want, model, qp = make_stream(wrs, rng)
    assert model[-1][0].opcode == opc.OP_RC_RDMA_READ_REQUEST
    col = run_builder(width, sent, idle=0.2, backpressure=0.2, seed=2)
    check(col, want)
    for got, (pkt, payload, _) in zip(col.packets, model):
        udp = got.meta["udp"]
        # the lengths announced in the metadata (they count the ICRC) go into the headers
        frame = bytes(Ether(src=FPGA_MAC, dst=HOST_MAC)
                      / IP(src=FPGA_IP, dst=_ip(udp["dst_ip"]), flags="DF", ttl=64,
                           tos=(udp["dscp"] << 2) | udp["ecn"],
                           len=H.IPV4.length + H.UDP.length + udp["length"])
                      / UDP(sport=udp["src_port"], dport=udp["dst_port"], chksum=0,
                            len=H.UDP.length + udp["length"])
                      / Raw(got.data))
        frame = icrc_model.append(frame)
        p = Ether(frame)
        assert p[UDP].dport == H.UDP_PORT_ROCEV2
        b = p[BTH]
        assert (b.opcode, b.solicited, b.migreq, b.padcount, b.version, b.pkey) == \
            (pkt.opcode, int(pkt.se), 1, pkt.padcnt, 0, 0xFFFF)
        assert (b.fecn, b.becn, b.resv6, b.dqpn, b.ackreq, b.resv7, b.psn) == \
            (0, 0, 0, qp.dest_qpn, int(pkt.ack_req), 0, pkt.psn)
        rest = bytes(b.payload)
        if pkt.reth is not None:
            assert struct.unpack(">QII", rest[:16]) == pkt.reth
            rest = rest[16:]
        if pkt.imm is not None:
            assert struct.unpack(">I", rest[:4]) == (pkt.imm,)
            rest = rest[4:]
        assert rest == payload + bytes(pkt.padcnt)
        q = p.copy()
        q[BTH].icrc = None
        assert bytes(q) == frame, "scapy computes a different ICRC"


def _ip(value):
    return ".".join(str(b) for b in value.to_bytes(4, "big"))


@pytest.mark.parametrize("width", [64, 512])
def test_through_stack_to_host_nic(width):
    """Builder -> the stack's UDP port 4791 -> frames the strict host NIC model accepts: every
    WRITE lands in its memory region, every SEND in its receive buffer, immediates in the CQ."""
    rng = random.Random(width + 9)
    host_qpn, epsn, pmtu, sport = 0x12, 77, 512, 0xC0DE
    nic = Rnic(HOST_MAC, HOST_IP, strict=True)
    nic.create_qp(host_qpn, peer_qpn=256, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=epsn, pmtu=pmtu)
    region, region_len = 0x10000, 0x4000
    nic.register_mr(region, region_len, rkey=0x5A5A)
    qp = QpSegment(dest_qpn=host_qpn, rkey=0x5A5A, base_va=region, psn=epsn, pmtu=pmtu)
    wrs = [WorkRequest(1, WrOpcode.WRITE, 1500, remote_offset=0x0),
           WorkRequest(2, WrOpcode.SEND, 700),
           WorkRequest(3, WrOpcode.WRITE_IMM, 13, remote_offset=0x1000, imm=0x1234),
           WorkRequest(4, WrOpcode.SEND_IMM, 0, imm=0xABCD),
           WorkRequest(5, WrOpcode.WRITE, 0, remote_offset=0x2000),
           WorkRequest(6, WrOpcode.WRITE, 1023, remote_offset=0x2001),
           WorkRequest(7, WrOpcode.SEND, 1)]
    for wr in wrs:
        if wr.opcode in (WrOpcode.SEND, WrOpcode.SEND_IMM, WrOpcode.WRITE_IMM):
            nic.post_recv(host_qpn, 2048, wr_id=100 + wr.wr_id)
    route = Route(parse_ip(HOST_IP), sport)
    sent, data = [], {}
    for wr in wrs:
        message = rng.randbytes(wr.length)
        data[wr.wr_id] = message
        for pkt in segment(wr, qp):
            payload = message[pkt.offset:pkt.offset + pkt.length]
            sent.append(Packet(payload, desc_meta(pkt, qp, route, rng, wr_id=wr.wr_id)))

    m = Module()
    builder = m.submodules.builder = RocePacketBuilder(width)
    stack = m.submodules.stack = NetStack(width, (7, H.UDP_PORT_ROCEV2), mtu=1500)
    wiring.connect(m, builder.o, stack.udp_tx[1])
    arp = bytes(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP))
    rx = StreamDriver(stack.mac_rx, width)
    tx = StreamDriver(builder.i, width, idle=0.3, seed=3)
    col = StreamCollector(stack.mac_tx, width, backpressure=0.3, seed=4)

    async def tb(ctx):
        ctx.set(stack.local_mac, parse_mac(FPGA_MAC))
        ctx.set(stack.local_ip, parse_ip(FPGA_IP))
        await rx.send(ctx, [Packet(arp)])             # the stack learns the host's MAC
        while len(col.packets) < 1:
            await ctx.tick()
        await tx.send(ctx, sent)
        while len(col.packets) < 1 + len(sent):
            await ctx.tick()

    run_sim(m, testbenches=[tb], processes=[col.run])
    frames = [p.data for p in col.packets[1:]]
    assert len(frames) == len(sent)
    assert not any(p.error for p in col.packets)
    acks = []
    for frame in frames:
        assert icrc_model.check(frame), "bad ICRC"
        acks += nic.receive(frame)
    assert nic.expected_psn(host_qpn) == qp.psn
    assert nic.read_mem(region, 1500) == data[1]
    assert nic.read_mem(region + 0x1000, 13) == data[3]
    assert nic.read_mem(region + 0x2001, 1023) == data[6]
    cq = nic.poll_cq()
    assert [(c.wr_id, c.byte_len, c.imm) for c in cq] == [
        (102, 700, None), (103, 13, 0x1234), (104, 0, 0xABCD), (107, 1, None)]
    assert cq[0].data[:700] == data[2]
    assert cq[3].data[:1] == data[7]
    assert all(c.status == "SUCCESS" for c in cq)
    assert acks, "the host NIC acknowledged nothing"
