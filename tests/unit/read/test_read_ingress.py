"""The receive path of READ responses: datagrams built by scapy (READ responses FIRST, MIDDLE,
LAST, ONLY of every kind: good, malformed, short, bad ICRC, wrong P_Key, QP, state or peer; and
ACKs, CNPs, requests and other opcodes among them; UDP checksums good and bad; frames cut short
and with bytes after the datagram; and foreign datagrams the stack would not deliver on UDP port
4791) as the stack's ``ip_in`` port hands them on (IPv4 header first, Ethernet padding to 46
bytes included), through :class:`RoceRx` (``reads``) into :class:`ReadIngress`, with a QP table
providing the lookup and the contexts; random idle cycles and backpressure, at 64 and 512 bits.
The expected verdicts, records and bytes come from the packets themselves, read with ``struct``
as the wire spec lays them out (the IPv4 and UDP checks and checksums summed here): every
datagram of port 4791 pulses exactly its RoceRx verdict and a foreign one none, every READ
response that RoceRx hands on exactly one ReadIngress outcome, and the good ones leave whole and
in order with their records (and the acknowledgements' records, in their order with the
responses)."""

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
from rocegen.wire.addr import parse_ip, parse_mac
from tests.tiers import full
from tests.unit.roce.udp_verdicts import UdpVerdicts

OTHER_IP = "10.0.0.77"
MTU = 1500
#: The shortest IPv4 datagram an Ethernet frame carries (60 bytes less the 14 of its header).
ETH_MIN = 46
NUM_QPS = 5
# QP index -> (state, peer)
QPS = {0: (QpState.RTS, HOST_IP), 1: (QpState.RTR, HOST_IP), 2: (QpState.INIT, HOST_IP),
       3: (QpState.RTS, OTHER_IP), 4: (QpState.ERROR, HOST_IP)}
FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10
READ_OPS = (FIRST, MIDDLE, LAST, ONLY)


class Top(Elaboratable):
    """RoceRx (``reads``) into ReadIngress, a QP table beside them."""

    def __init__(self, width, **ingress):
        self.rx = RoceRx(width, NUM_QPS, reads=True, mtu=MTU)
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


def build(rng, opcode, dqpn, body, *, src=HOST_IP, pad=0, pkey=0xFFFF, udp_checksum=False,
          ip=None, udp=None):
    """An IPv4 RoCEv2 datagram built by scapy (ICRC computed by scapy), as bytes: UDP checksum 0,
    or (``udp_checksum``) the right one; ``ip`` and ``udp``: scapy fields set otherwise."""
    bth = BTH(opcode=opcode, solicited=rng.getrandbits(1), migreq=rng.getrandbits(1),
              padcount=pad, pkey=pkey, fecn=rng.getrandbits(1), becn=rng.getrandbits(1),
              dqpn=dqpn, ackreq=rng.getrandbits(1), psn=rng.getrandbits(24))
    pkt = IP(**{"src": src, "dst": FPGA_IP, "tos": rng.getrandbits(8),
                "ttl": rng.randrange(1, 256), "id": rng.getrandbits(16), "flags": "DF",
                **(ip or {})}) / \
        UDP(**{"sport": rng.randrange(0xC000, 0x10000), "dport": 4791,
               "chksum": None if udp_checksum else 0, **(udp or {})}) / bth / Raw(body)
    return bytes(pkt)


def read_response(rng, opcode, qp=0, *, n=None, src=HOST_IP, pkey=0xFFFF, pad=None, extra=b"",
                  **fields):
    """A READ response to QP index ``qp`` (or any QP number from ``QPN_BASE + qp``) with an
    ``n``-byte payload, its pad (PadCnt ``pad``, by default what ``n`` needs) and ``extra``
    bytes after them (``fields``: :func:`build`'s)."""
    if n is None:
        n = rng.choice([0, 1, 3, 4, 17, 256, rng.randrange(300)])
    pad = -n % 4 if pad is None else pad
    aeth = bytes(AETH(syndrome=rng.choice([0x1F, 0x00, 0x60, 0x61, rng.getrandbits(8)]),
                      msn=rng.getrandbits(24))) if opcode != MIDDLE else b""
    body = aeth + rng.randbytes(n) + bytes(-n % 4) + extra
    return build(rng, opcode, QPN_BASE + qp, body, src=src, pkey=pkey, pad=pad, **fields)


def bad_udp_checksum(rng, dgram):
    """``dgram`` (with its right UDP checksum) with another checksum, not 0 (the ICRC does not
    cover the field)."""
    right = int.from_bytes(dgram[26:28], "big")
    wrong = rng.choice([v for v in (right ^ (1 << rng.randrange(16)), right ^ 0xFFFF,
                                    rng.getrandbits(16)) if v not in (0, right)])
    return dgram[:26] + wrong.to_bytes(2, "big") + dgram[28:]


def with_ip_header(dgram, at, value):
    """``dgram`` with the IPv4 header's bytes from ``at`` replaced by ``value`` and its header
    checksum made right again."""
    hdr = bytearray(dgram[:20])
    hdr[at:at + len(value)] = value
    hdr[10:12] = bytes(2)
    hdr[10:12] = (~ones_sum(hdr) & 0xFFFF).to_bytes(2, "big")
    return bytes(hdr) + dgram[20:]


def on_ethernet(rng, received):
    """The bytes the Ethernet layer hands on for a datagram (and whatever followed it in the
    frame): padded to :data:`ETH_MIN` bytes, the padding random."""
    return received + rng.randbytes(max(0, ETH_MIN - len(received)))


def ones_sum(data, start=0):
    """The 16-bit one's complement sum of ``data`` (a zero byte after an odd one)."""
    data = bytes(data) + bytes(len(data) % 2)
    total = start + sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def delivered(received):
    """What the stack's IPv4 and UDP receive layers make of the bytes of an IPv4 datagram the
    Ethernet layer hands on: ``(datagram cut to its total length, cut short, UDP checksum)``
    when they deliver it on UDP port 4791 (cut short: the frame ended before the total length;
    UDP checksum: None when 0, else whether it is right), None for a foreign one."""
    if len(received) < 20:
        return None
    vihl, _, total, _, frag, _, proto, _, _, dst = struct.unpack_from(">BBHHHBBH4s4s", received)
    if vihl != 0x45 or ones_sum(received[:20]) != 0xFFFF or not 20 <= total <= MTU or \
            frag & 0x3FFF or dst != ipaddress.IPv4Address(FPGA_IP).packed or proto != 17:
        return None
    dgram = received[:total]
    if len(dgram) < 28:
        return None
    _, dport, length, checksum = struct.unpack_from(">HHHH", dgram, 20)
    if dport != 4791 or length != total - 20:
        return None
    pseudo = ones_sum(dgram[12:20] + struct.pack(">HH", 17, length))
    right = None if checksum == 0 else ones_sum(dgram[20:], pseudo) == 0xFFFF
    return dgram, len(dgram) < total, right


def udp_verdict(received):
    """The stack's verdict on the UDP checksum of a datagram (None: it gives none)."""
    got = delivered(received)
    return None if got is None else got[2]


def frame_error(received, error, width):
    """Whether the ``error`` of a frame reaches its datagram at ``width`` bits: only when the
    frame's last beat holds the datagram's end (the FCS verdict of beats after it is not
    waited for)."""
    total = int.from_bytes(received[2:4], "big")
    B = width // 8
    return error and (len(received) <= total or
                      (max(total, 1) - 1) // B == (len(received) - 1) // B)


def reference(received, error=False, *, width):
    """The RoceRx counter a datagram pulses (None: foreign), the ReadIngress outcome of a READ
    response (a counter name or ``"out"``) and, when it passes, its record. Read with struct as
    the wire spec lays the headers out."""
    got = delivered(received)
    if got is None:
        return None, None, None
    dgram, short, right = got
    error = frame_error(received, error, width) or short or right is False
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


def foreign(rng):
    """Datagrams the stack does not deliver on UDP port 4791, good READ responses otherwise
    (their ICRC right)."""
    good = read_response(rng, ONLY, 0, n=8)
    options = good[:20] + bytes([1, 1, 1, 0]) + good[20:]          # 4 bytes of IPv4 options
    options = with_ip_header(options, 0, bytes([0x46, options[1]]) +
                             (len(good) + 4).to_bytes(2, "big"))
    return [
        read_response(rng, ONLY, 0, udp={"dport": 4792}),
        read_response(rng, ONLY, 0, udp={"dport": 17185}),
        read_response(rng, FIRST, 0, ip={"dst": OTHER_IP}),
        read_response(rng, LAST, 0, ip={"dst": "255.255.255.255"}),
        read_response(rng, ONLY, 0, ip={"flags": "MF"}),
        read_response(rng, LAST, 0, ip={"flags": 0, "frag": rng.randrange(1, 1 << 13)}),
        read_response(rng, ONLY, 0, ip={"proto": 6}),
        read_response(rng, ONLY, 0, ip={"version": 6}),
        read_response(rng, ONLY, 0, ip={"ihl": 6}),
        options,
        read_response(rng, ONLY, 0, n=MTU),                                 # over the MTU
        read_response(rng, MIDDLE, 0, n=4, udp={"len": 8 + 12 + 4 + 4 + 4}),  # UDP length
        good[:10] + bytes([good[10] ^ 0x80, good[11]]) + good[12:],    # header checksum
        bytes(IP(src=HOST_IP, dst=FPGA_IP, proto=17) / Raw(b"\x12\xb7\x12\xb7")),  # < 28 B
    ]


def each_kind(rng):
    """One datagram of each kind: (the bytes the Ethernet layer hands on, error flag)."""
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
    checked = read_response(rng, ONLY, 0, n=29, udp_checksum=True)
    cases += [bytes(bad_icrc), (good, True), checked, bad_udp_checksum(rng, checked),
              read_response(rng, FIRST, 1, n=6, udp_checksum=True),
              good + rng.randbytes(rng.randrange(1, 40)),     # bytes after the datagram
              (good + bytes(64), True),           # damaged only beyond it: its ICRC judges
              good[:rng.randrange(28, len(good))],           # the frame cut short
              good[:27],                    # cut in the UDP header (the padding after it)
              bytes(IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=4791, dport=4791)),  # nothing
              (foreign(rng)[0], True),
              build(rng, FIRST, QPN_BASE, b""),              # no AETH: short
              build(rng, LAST, QPN_BASE, b"\x1f\x00\x00"),   # 3 bytes of AETH: short
              build(rng, MIDDLE, QPN_BASE, b""),             # a MIDDLE needs only the BTH
              build(rng, 0x11, QPN_BASE, bytes(AETH(syndrome=0x1F, msn=5))),
              build(rng, 0x81, QPN_BASE + 1, bytes(16)),
              build(rng, 0x0A, QPN_BASE, rng.randbytes(16 + 20)),
              build(rng, 0x12, QPN_BASE, rng.randbytes(12))]
    cases += foreign(rng)
    return [(on_ethernet(rng, c[0]), c[1]) if isinstance(c, tuple)
            else (on_ethernet(rng, c), False) for c in cases]


def random_case(rng):
    r = rng.random()
    op = rng.choice(READ_OPS)
    if r < 0.45:
        dgram = read_response(rng, op, rng.choice([0, 1]), udp_checksum=rng.random() < 0.3)
        return on_ethernet(rng, dgram), False
    if r < 0.65:
        return rng.choice(each_kind(rng))
    if r < 0.75:                                   # truncated, the ICRC of what is left right
        full = read_response(rng, op, 0, n=rng.randrange(40))
        k = rng.randrange(1, len(full) - 28)
        return on_ethernet(rng, build(rng, op, QPN_BASE, full[40:40 + k])), False
    if r < 0.8:                                    # the frame cut short
        dgram = read_response(rng, op, 0, n=rng.randrange(100))
        return on_ethernet(rng, dgram[:rng.randrange(20, len(dgram))]), rng.random() < 0.5
    if r < 0.87:
        return on_ethernet(rng, rng.choice(foreign(rng))), rng.random() < 0.2
    dgram = read_response(rng, op, rng.randrange(NUM_QPS), n=rng.randrange(600),
                          src=rng.choice([HOST_IP, OTHER_IP]), udp_checksum=rng.random() < 0.3)
    if rng.random() < 0.2:
        dgram = bad_udp_checksum(rng, dgram) if dgram[26:28] != bytes(2) else \
            dgram + rng.randbytes(rng.randrange(1, 9))
    return on_ethernet(rng, dgram), rng.random() < 0.1


def run(width, cases, *, idle=0.0, backpressure=0.0, seed=0, **ingress):
    """Send the datagrams; returns (RoceRx counts, ReadIngress counts, datagrams out,
    records)."""
    dut = Top(width, **ingress)
    rx, ing = dut.rx, dut.ing
    drv = StreamDriver(rx.i, width, idle=idle, seed=seed)
    stack = UdpVerdicts(rx, [udp_verdict(received) for received, _ in cases], seed=seed + 3)
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
        ctx.set(rx.local_ip, parse_ip(FPGA_IP))
        for k, (state, peer) in QPS.items():
            ctx.set(dut.table.ctl.payload, {"qp": k, "context": context(state, peer)})
            ctx.set(dut.table.ctl.valid, 1)
            await ctx.tick()
        ctx.set(dut.table.ctl.valid, 0)
        eth = {"dst": parse_mac(FPGA_MAC), "src": parse_mac(HOST_MAC), "ethertype": 0x0800}
        await drv.send(ctx, [Packet(received, {"eth": eth}, err) for received, err in cases])
        await ctx.tick().repeat(3000 if backpressure else 200)

    run_sim(dut, testbenches=[tb], processes=[monitor, sinks, col.run, stack.run])
    assert stack.sent == stack.want
    return rx_counts, ing_counts, col.packets, records


def expected(cases, width):
    """RoceRx counts, ReadIngress counts, (datagram out, record) in order, foreign datagrams, at
    ``width`` bits."""
    rx_counts = dict.fromkeys(COUNTERS, 0)
    ing_counts = dict.fromkeys(READ_INGRESS_COUNTERS, 0)
    out = []
    foreign_count = 0
    for received, err in cases:
        rx, outcome, rec = reference(received, err, width=width)
        if rx is None:
            foreign_count += 1
            continue
        rx_counts[rx] += 1
        if outcome == "out":
            out.append((delivered(received)[0][:-4], rec))
        elif outcome == "ack":
            out.append((None, rec))
        elif outcome:
            ing_counts[outcome] += 1
    return rx_counts, ing_counts, out, foreign_count


def check(width, cases, **kw):
    want_rx, want_ing, want_out, foreign_count = expected(cases, width)
    rx_counts, ing_counts, packets, records = run(width, cases, **kw)
    assert rx_counts == want_rx
    assert ing_counts == want_ing
    assert records == [rec for _, rec in want_out]
    want_packets = [dgram for dgram, _ in want_out if dgram is not None]
    assert len(packets) == len(want_packets)
    for got, dgram in zip(packets, want_packets):
        assert got.data == dgram and not got.error
    return want_rx, want_ing, want_out, foreign_count


@pytest.mark.parametrize("width", [64, 512])
def test_each_kind(width):
    rng = random.Random(width)
    cases = each_kind(rng)
    want_rx, want_ing, want_out, foreign_count = check(width, cases, idle=0.2, backpressure=0.3,
                                                       seed=width)
    # every kind was made: each counter reached, READ responses of the four opcodes out
    assert all(want_ing[c] for c in READ_INGRESS_COUNTERS if c != "overflow"), want_ing
    assert all(want_rx[c] for c in ("drop_short", "icrc_bad", "drop_opcode", "acks", "cnp",
                                    "requests", "read_responses")), want_rx
    assert {rec["opcode"] for _, rec in want_out} == {*READ_OPS, 0x11}
    assert {rec["skip"] for _, rec in want_out} == {0, 40, 44}
    assert foreign_count == len(foreign(rng)) + 1


@pytest.mark.parametrize("width, idle, backpressure, seed", [
    full(64, 0.0, 0.0, 1), (64, 0.3, 0.5, 2), full(512, 0.0, 0.0, 3), (512, 0.4, 0.6, 4)])
def test_random(width, idle, backpressure, seed):
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(150)]
    want_rx, want_ing, want_out, foreign_count = check(width, cases, idle=idle,
                                                       backpressure=backpressure, seed=seed)
    assert len(want_out) > 50 and sum(want_ing.values()) > 20
    assert foreign_count > 5 and want_rx["icrc_bad"] > 5


@pytest.mark.parametrize("width, seed", [(64, 11), (512, 12)])
def test_overflow(width, seed):
    """A small FIFO and a record queue of 2 read with heavy backpressure, responses back to
    back: many are dropped and counted as overflow, those that fail a check by their check, and
    every datagram out has its own record, in order."""
    rng = random.Random(seed)
    cases = [(on_ethernet(rng, read_response(rng, rng.choice(READ_OPS), rng.choice([0, 0, 0, 2]),
                                             n=rng.randrange(200))), False) for _ in range(100)]
    want_rx, want_ing, want_out, _ = expected(cases, width)
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
    for bad in (575, 9001, 1500.0, True):
        raises(ValueError, "IPv4 MTU must be 576..9000", lambda b=bad: RoceRx(64, 4, mtu=b))
    Fragment.get(ReadIngress(256, 256), None)
