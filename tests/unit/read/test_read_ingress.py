"""The receive path of READ responses: datagrams built by scapy (READ responses FIRST, MIDDLE,
LAST, ONLY of every kind: good, malformed, short, bad ICRC, wrong P_Key, QP, state or peer; and
ACKs, CNPs, requests and other opcodes among them) as the stack's ``udp_rx`` port delivers them,
through :class:`RoceRx` (``reads``) into :class:`ReadIngress`, with a QP table providing the
lookup and the contexts; random idle cycles and backpressure, at 64 and 512 bits. The expected
verdicts, records and bytes come from the packets themselves, read with ``struct`` as the wire
spec lays them out: every datagram pulses exactly its RoceRx verdict, every READ response that
RoceRx hands on exactly one ReadIngress outcome, and the good ones leave whole and in order with
their records (and the acknowledgements' records, in their order with the responses)."""

import ipaddress
import random
import struct

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module
from amaranth.lib import wiring
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.read.read_ingress import READ_INGRESS_COUNTERS, ReadIngress
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.gateware.roce.rx import COUNTERS, RoceRx
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire.addr import parse_ip, parse_mac
from tests.tiers import full

OTHER_IP = "10.0.0.77"
NUM_QPS = 5
# QP index -> (state, peer)
QPS = {0: (QpState.RTS, HOST_IP), 1: (QpState.RTR, HOST_IP), 2: (QpState.INIT, HOST_IP),
       3: (QpState.RTS, OTHER_IP), 4: (QpState.ERROR, HOST_IP)}
FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10
READ_OPS = (FIRST, MIDDLE, LAST, ONLY)


class Top(Elaboratable):
    """RoceRx (``reads``) into ReadIngress, a QP table beside them."""

    def __init__(self, width, **ingress):
        self.rx = RoceRx(width, NUM_QPS, reads=True)
        self.ing = ReadIngress(width, NUM_QPS, **ingress)
        self.table = QpTable(NUM_QPS, read_port=True)

    def elaborate(self, platform):
        m = Module()
        rx, ing, t = self.rx, self.ing, self.table
        m.submodules.rx, m.submodules.ing, m.submodules.table = rx, ing, t
        wiring.connect(m, rx.req, ing.i)
        m.d.comb += [
            t.lookup_qpn.eq(rx.lookup_qpn), rx.lookup_index.eq(t.lookup_index),
            rx.lookup_valid.eq(t.lookup_valid), t.rx_qp.eq(rx.rx_qp),
            rx.rx_context.eq(t.rx_context), t.rdr_qp.eq(ing.ctx_qp), ing.ctx.eq(t.rdr_context),
        ]
        return m


def context(state, peer):
    return {"state": state, "peer_ip": parse_ip(peer), "peer_qpn": 0x11, "rkey": 0, "base_va": 0,
            "pmtu_log2": 10, "udp_sport": 0xC000, "dscp": 0, "ecn": 0, "ack_every_log2": 6,
            "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


def build(rng, opcode, dqpn, body, *, src=HOST_IP, pad=0, pkey=0xFFFF):
    """An IPv4 RoCEv2 datagram built by scapy (ICRC computed by scapy), as bytes."""
    bth = BTH(opcode=opcode, solicited=rng.getrandbits(1), migreq=rng.getrandbits(1),
              padcount=pad, pkey=pkey, fecn=rng.getrandbits(1), becn=rng.getrandbits(1),
              dqpn=dqpn, ackreq=rng.getrandbits(1), psn=rng.getrandbits(24))
    pkt = IP(src=src, dst=FPGA_IP, tos=rng.getrandbits(8), ttl=rng.randrange(1, 256),
             id=rng.getrandbits(16), flags="DF") / \
        UDP(sport=rng.randrange(0xC000, 0x10000), dport=4791, chksum=0) / bth / Raw(body)
    return bytes(pkt)


def read_response(rng, opcode, qp=0, *, n=None, src=HOST_IP, pkey=0xFFFF, pad=None, extra=b""):
    """A READ response to QP index ``qp`` (or any QP number from ``QPN_BASE + qp``) with an
    ``n``-byte payload, its pad (PadCnt ``pad``, by default what ``n`` needs) and ``extra``
    bytes after them."""
    if n is None:
        n = rng.choice([0, 1, 3, 4, 17, 256, rng.randrange(300)])
    pad = -n % 4 if pad is None else pad
    aeth = bytes(AETH(syndrome=rng.choice([0x1F, 0x00, 0x60, 0x61, rng.getrandbits(8)]),
                      msn=rng.getrandbits(24))) if opcode != MIDDLE else b""
    body = aeth + rng.randbytes(n) + bytes(-n % 4) + extra
    return build(rng, opcode, QPN_BASE + qp, body, src=src, pkey=pkey, pad=pad)


def udp_rx(dgram):
    """An IPv4 datagram -> the UDP payload and the metadata the stack's ``udp_rx`` port gives."""
    eth = {"dst": parse_mac(FPGA_MAC), "src": parse_mac(HOST_MAC), "ethertype": 0x0800}
    return dgram[28:], {"eth": eth, "ipv4": H.IPV4.unpack(dgram[:20]),
                        "udp": H.UDP.unpack(dgram[20:28])}


def reference(dgram, error=False):
    """The RoceRx counter a datagram pulses, the ReadIngress outcome of a READ response
    (a counter name or ``"out"``) and, when it passes, its record. Read with struct as the
    wire spec lays the headers out."""
    l4 = dgram[28:]
    if len(l4) < 16:
        return "drop_short", None, None
    opcode, flags, pkey, dqpn, psn = struct.unpack_from(">BBHII", l4)
    dqpn, psn, padcnt = dqpn & 0xFFFFFF, psn & 0xFFFFFF, flags >> 4 & 3
    aeth = opcode in (FIRST, LAST, ONLY)
    if ((opcode == 0x11 or aeth) and len(l4) < 20) or (opcode == 0x81 and len(l4) < 32):
        return "drop_short", None, None
    if error or icrc_model.icrc(dgram[:-4]) != dgram[-4:]:
        return "icrc_bad", None, None
    if opcode in (0x0A, 0x04):
        return "requests", None, None
    if opcode not in (0x11, 0x81) + READ_OPS:
        return "drop_opcode", None, None
    rx = "read_responses" if opcode in READ_OPS else None
    skip = 44 if aeth else 40
    body = len(dgram) - 4 - skip
    if rx and (body % 4 or body < padcnt):
        return rx, "malformed", None
    qp = dqpn - QPN_BASE
    src = str(ipaddress.IPv4Address(dgram[12:16]))
    for fail, name in ((pkey & 0x7FFF != 0x7FFF, "pkey"), (not 0 <= qp < NUM_QPS, "qp"),
                       (QPS.get(qp, (QpState.RTS,))[0] not in (QpState.RTR, QpState.RTS),
                        "state"),
                       (src != QPS.get(qp, (0, src))[1], "peer")):
        if fail:
            return (rx, f"drop_{name}", None) if rx else (f"drop_{name}", None, None)
    if opcode == 0x11:              # a record of its own, in order, without beats
        return "acks", "ack", {"qp": qp, "opcode": opcode, "psn": psn, "syndrome": l4[12],
                               "msn": int.from_bytes(l4[13:16], "big"), "length": 0,
                               "skip": 0}
    if not rx:
        return "cnp", None, None
    syndrome, msn = (l4[12], int.from_bytes(l4[13:16], "big")) if aeth else (0, 0)
    return rx, "out", {"qp": qp, "opcode": opcode, "psn": psn, "syndrome": syndrome,
                       "msn": msn, "length": body - padcnt, "skip": skip}


def each_kind(rng):
    """One datagram of each kind: (IP datagram with ICRC, error flag)."""
    cases = []
    for op in READ_OPS:
        cases += [read_response(rng, op, 0), read_response(rng, op, 1, n=0),
                  read_response(rng, op, 3, src=OTHER_IP, n=4),
                  read_response(rng, op, 0, pkey=0x7FFF, n=9)]
        cases += [read_response(rng, op, 0, extra=bytes(rng.choice([1, 2, 3]))),  # not words
                  read_response(rng, op, 1, n=0, pad=rng.choice([1, 2, 3])),       # PadCnt > 0
                  read_response(rng, op, 0, pkey=0x8001), read_response(rng, op, 0, pkey=0x7FFE),
                  read_response(rng, op, NUM_QPS), read_response(rng, op, -0xF0),
                  read_response(rng, op, 2), read_response(rng, op, 4),
                  read_response(rng, op, 3), read_response(rng, op, 0, src=OTHER_IP)]
    good = read_response(rng, ONLY, 0, n=33)
    bad_icrc = bytearray(good)
    bad_icrc[rng.randrange(28, len(good))] ^= 1 << rng.randrange(8)
    cases += [bytes(bad_icrc), (good, True),
              build(rng, FIRST, QPN_BASE, b""),              # no AETH: short
              build(rng, LAST, QPN_BASE, b"\x1f\x00\x00"),   # 3 bytes of AETH: short
              build(rng, MIDDLE, QPN_BASE, b""),             # a MIDDLE needs only the BTH
              build(rng, 0x11, QPN_BASE, bytes(AETH(syndrome=0x1F, msn=5))),
              build(rng, 0x81, QPN_BASE + 1, bytes(16)),
              build(rng, 0x0A, QPN_BASE, rng.randbytes(16 + 20)),
              build(rng, 0x12, QPN_BASE, rng.randbytes(12))]
    return [c if isinstance(c, tuple) else (c, False) for c in cases]


def random_case(rng):
    r = rng.random()
    op = rng.choice(READ_OPS)
    if r < 0.5:
        return read_response(rng, op, rng.choice([0, 1])), False
    if r < 0.75:
        return rng.choice(each_kind(rng))
    if r < 0.85:                                   # truncated, the ICRC of what is left right
        full = read_response(rng, op, 0, n=rng.randrange(40))
        k = rng.randrange(1, len(full) - 28)
        return build(rng, op, QPN_BASE, full[40:40 + k]), False
    return read_response(rng, op, rng.randrange(NUM_QPS), n=rng.randrange(600),
                         src=rng.choice([HOST_IP, OTHER_IP])), rng.random() < 0.1


def run(width, cases, *, idle=0.0, backpressure=0.0, seed=0, **ingress):
    """Send the datagrams; returns (RoceRx counts, ReadIngress counts, datagrams out,
    records)."""
    dut = Top(width, **ingress)
    rx, ing = dut.rx, dut.ing
    drv = StreamDriver(rx.i, width, idle=idle, seed=seed)
    col = StreamCollector(ing.o, width, backpressure=backpressure, seed=seed + 1)
    rng = random.Random(seed + 2)
    rx_counts = dict.fromkeys(COUNTERS, 0)
    ing_counts = dict.fromkeys(READ_INGRESS_COUNTERS, 0)
    records = []

    async def monitor(ctx):
        sigs = [getattr(rx, c) for c in COUNTERS] + [getattr(ing, c) for c in
                                                        READ_INGRESS_COUNTERS]
        async for _, _, *vals in ctx.tick().sample(*sigs):
            for c, v in zip(COUNTERS, vals):
                rx_counts[c] += v
            for c, v in zip(READ_INGRESS_COUNTERS, vals[len(COUNTERS):]):
                ing_counts[c] += v

    async def sinks(ctx):
        while True:
            hdr_ready = not (backpressure and rng.random() < backpressure)
            ctx.set(ing.hdr.ready, hdr_ready)
            ctx.set(rx.ack.ready, rng.random() >= backpressure)
            _, _, valid, payload = await ctx.tick().sample(ing.hdr.valid, ing.hdr.payload)
            if valid and hdr_ready:
                records.append(meta_dict(payload))

    async def tb(ctx):
        for k, (state, peer) in QPS.items():
            ctx.set(dut.table.ctl.payload, {"qp": k, "context": context(state, peer)})
            ctx.set(dut.table.ctl.valid, 1)
            await ctx.tick()
        ctx.set(dut.table.ctl.valid, 0)
        packets = []
        for dgram, err in cases:
            payload, meta = udp_rx(dgram)
            packets.append(Packet(payload, meta, err))
        await drv.send(ctx, packets)
        await ctx.tick().repeat(3000 if backpressure else 200)

    run_sim(dut, testbenches=[tb], processes=[monitor, sinks, col.run])
    return rx_counts, ing_counts, col.packets, records


def expected(cases):
    rx_counts = dict.fromkeys(COUNTERS, 0)
    ing_counts = dict.fromkeys(READ_INGRESS_COUNTERS, 0)
    out = []
    for dgram, err in cases:
        rx, outcome, rec = reference(dgram, err)
        rx_counts[rx] += 1
        if outcome == "out":
            out.append((dgram[:-4], rec))
        elif outcome == "ack":
            out.append((None, rec))
        elif outcome:
            ing_counts[outcome] += 1
    return rx_counts, ing_counts, out


def check(width, cases, **kw):
    want_rx, want_ing, want_out = expected(cases)
    rx_counts, ing_counts, packets, records = run(width, cases, **kw)
    assert rx_counts == want_rx
    assert ing_counts == want_ing
    assert records == [rec for _, rec in want_out]
    want_packets = [dgram for dgram, _ in want_out if dgram is not None]
    assert len(packets) == len(want_packets)
    for got, dgram in zip(packets, want_packets):
        assert got.data == dgram and not got.error
    return want_rx, want_ing, want_out


@pytest.mark.parametrize("width", [64, 512])
def test_each_kind(width):
    rng = random.Random(width)
    cases = each_kind(rng)
    want_rx, want_ing, want_out = check(width, cases, idle=0.2, backpressure=0.3, seed=width)
    # every kind was made: each counter reached, READ responses of the four opcodes out
    assert all(want_ing[c] for c in READ_INGRESS_COUNTERS if c != "overflow"), want_ing
    assert all(want_rx[c] for c in ("drop_short", "icrc_bad", "drop_opcode", "acks", "cnp",
                                    "requests", "read_responses")), want_rx
    assert {rec["opcode"] for _, rec in want_out} == {*READ_OPS, 0x11}
    assert {rec["skip"] for _, rec in want_out} == {0, 40, 44}


@pytest.mark.parametrize("width, idle, backpressure, seed", [
    full(64, 0.0, 0.0, 1), (64, 0.3, 0.5, 2), full(512, 0.0, 0.0, 3), (512, 0.4, 0.6, 4)])
def test_random(width, idle, backpressure, seed):
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(150)]
    _, want_ing, want_out = check(width, cases, idle=idle, backpressure=backpressure,
                                  seed=seed)
    assert len(want_out) > 50 and sum(want_ing.values()) > 20


@pytest.mark.parametrize("width, seed", [(64, 11), (512, 12)])
def test_overflow(width, seed):
    """A small FIFO and a record queue of 2 read with heavy backpressure, responses back to
    back: many are dropped and counted as overflow, those that fail a check by their check, and
    every datagram out has its own record, in order."""
    rng = random.Random(seed)
    cases = [(read_response(rng, rng.choice(READ_OPS), rng.choice([0, 0, 0, 2]),
                            n=rng.randrange(200)), False) for _ in range(100)]
    want_rx, want_ing, want_out = expected(cases)
    rx_counts, ing_counts, packets, records = run(width, cases, backpressure=0.8, seed=seed,
                                                  depth=32, headers=2)
    assert rx_counts == want_rx
    assert ing_counts["drop_state"] == want_ing["drop_state"] > 5
    assert ing_counts["overflow"] == len(want_out) - len(packets) > 10
    assert len(packets) == len(records)
    k = 0
    for got, rec in zip(packets, records):
        while want_out[k][0] != got.data:           # (those dropped in between)
            k += 1
        assert rec == want_out[k][1]
        k += 1


def test_latency():
    """ReadIngress alone with its context from a QP table: a record 3 cycles after the last beat
    is taken, the first beat 4; bad-ICRC and non-READ datagrams leave nothing."""
    rng = random.Random(7)
    width = 64
    good = [read_response(rng, ONLY, 0, n=8 * k) for k in range(6)]
    others = [build(rng, 0x11, QPN_BASE, bytes(AETH()))[:-4], good[0][:-4]]

    class Alone(Elaboratable):
        def __init__(self):
            self.ing = ReadIngress(width, NUM_QPS)
            self.table = QpTable(NUM_QPS, read_port=True)

        def elaborate(self, platform):
            m = Module()
            m.submodules.ing, m.submodules.table = self.ing, self.table
            m.d.comb += [self.table.rdr_qp.eq(self.ing.ctx_qp),
                         self.ing.ctx.eq(self.table.rdr_context)]
            return m

    dut = Alone()
    ing = dut.ing
    col = StreamCollector(ing.o, width)
    seen = {"last_in": [], "hdr": []}

    async def watch(ctx):
        cycle = 0
        async for _, _, v, last, hv in ctx.tick().sample(ing.i.valid, ing.i.payload.last,
                                                          ing.hdr.valid):
            cycle += 1
            if v and last:
                seen["last_in"].append(cycle)
            if hv:
                seen["hdr"].append(cycle)

    async def tb(ctx):
        ctx.set(dut.table.ctl.payload, {"qp": 0, "context": context(QpState.RTS, HOST_IP)})
        ctx.set(dut.table.ctl.valid, 1)
        await ctx.tick()
        ctx.set(dut.table.ctl.valid, 0)
        ctx.set(ing.hdr.ready, 1)
        drv = StreamDriver(ing.i, width)
        for d in good:
            await drv.send(ctx, [Packet(d[:-4])])
            await ctx.tick().repeat(12)
        await drv.send(ctx, [Packet(others[0]), Packet(others[1], error=True)])
        await ctx.tick().repeat(12)


    run_sim(dut, testbenches=[tb], processes=[watch, col.run])
    assert [p.data for p in col.packets] == [d[:-4] for d in good]
    last_in = seen["last_in"][:len(good)]
    assert [h - t for h, t in zip(seen["hdr"], last_in)] == [3] * len(good)
    assert [s - t for (s, _), t in zip(col.spans, last_in)] == [4] * len(good)


def test_parameters():
    raises(ValueError, "width must be one of", lambda: ReadIngress(96, 4))
    raises(ValueError, r"num_qps must be 1\.\.256, not 0", lambda: ReadIngress(64, 0))
    raises(ValueError, "depth must be a power of two", lambda: ReadIngress(64, 4, 100))
    for bad in (1, 3, 512, True):
        raises(ValueError, "headers must be a power of two from 2 to 256",
               lambda b=bad: ReadIngress(64, 4, headers=b))
    raises(TypeError, "reads must be a bool", lambda: RoceRx(64, 4, reads=1))
    Fragment.get(ReadIngress(256, 256), None)
