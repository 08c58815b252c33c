"""The responder's ingress (:class:`RespIngress`): datagrams built by scapy, every opcode and
payload length, bad ICRCs, malformed lengths and non-requests among them, random idle cycles
and backpressure on both outputs, at 64, 128 and 512 bits: the requests come out whole, their
records with the headers scapy parses, in the same order, the rest is dropped and the
malformed ones counted; the records run ahead of the beats; when the FIFO or the record queue
is full, requests are dropped whole and counted, records and datagrams still in step."""

import random

import pytest
from amaranth.hdl import Fragment
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP

from rocegen.gateware.roce.responder.resp_ingress import RespIngress
from rocegen.gateware.roce.responder.resp_layouts import REQ_HDR_ATOMIC, REQ_HDR_MAX
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import (
    HandshakeMonitor,
    StreamCollector,
    StreamDriver,
    meta_dict,
)
from rocegen.sim.testing.framecheck import RETH, ImmDt
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import ATOMIC_BYTES
from tests.tiers import full

REQUESTS = list(range(0x00, 0x0D)) + [0x13, 0x14, 0x17]
ATOMIC_OPS = (opc.OP_RC_COMPARE_SWAP, opc.OP_RC_FETCH_ADD)
OTHERS = [0x0D, 0x10, 0x11, 0x12, 0x81, 0x24, 0x64]
RETH_OPS = {0x06, 0x0A, 0x0B, 0x0C}
IMM_OPS = {0x03, 0x05, 0x09, 0x0B}


def datagram(rng, opcode, *, malformed=False, n=None):
    """An IPv4 datagram without ICRC (``n`` bytes of payload, else a random length), and the
    header fields a parser must find (or None when it must be dropped)."""
    if n is None:
        n = rng.choice([0, 1, 3, 4, 17, 64, rng.randrange(300)])
    pad = -n % 4
    bth = BTH(opcode=opcode, solicited=rng.getrandbits(1), padcount=pad, pkey=0xFFFF,
              dqpn=rng.getrandbits(24), ackreq=rng.getrandbits(1), psn=rng.getrandbits(24),
              icrc=0)
    reth = imm = None
    ext = b""
    if opcode in RETH_OPS:
        reth = dict(va=rng.getrandbits(64), rkey=rng.getrandbits(32), dma_len=rng.getrandbits(32))
        ext += bytes(RETH(va=reth["va"], rkey=reth["rkey"], dlen=reth["dma_len"]))
    if opcode in IMM_OPS:
        imm = rng.getrandbits(32)
        ext += bytes(ImmDt(imm=imm))
    payload = bytes(rng.getrandbits(8) for _ in range(n)) + bytes(pad)
    hdr = bytes(bth)[:H.BTH.length]          # (scapy's BTH ends with its ICRC field)
    l4 = hdr + ext + payload
    if malformed:
        how = rng.choice(["grow", "cut", "pad"] if ext else ["grow", "pad"])
        if how == "grow":                   # payload and pad not whole 4-byte words
            l4 += bytes(rng.choice([1, 2, 3]))
        elif how == "cut":                  # shorter than BTH and extension headers
            l4 = l4[:rng.randrange(H.BTH.length, H.BTH.length + len(ext))]
        else:                               # PadCnt more than the payload and pad hold
            l4 = bytes([hdr[0], hdr[1] | 0x30]) + hdr[2:] + ext
    tos = rng.getrandbits(8)
    sport = rng.randrange(0xC000, 0x10000)
    pkt = IP(src=f"10.0.{rng.randrange(256)}.{rng.randrange(256)}", dst="10.0.0.1", tos=tos) / \
        UDP(sport=sport, dport=4791, chksum=0) / (l4 + bytes(4))
    dgram = bytes(pkt)[:-4]          # the ICRC removed, the UDP length still counting it
    parsed = IP(bytes(pkt))
    want = {
        "src_ip": int.from_bytes(bytes(parsed)[12:16], "big"), "src_port": sport,
        "ecn": tos & 3, "opcode": opcode, "psn": bth.psn, "dest_qp": bth.dqpn,
        "ack_req": bth.ackreq, "se": bth.solicited, "padcnt": pad,
        "reth": reth or dict(va=0, rkey=0, dma_len=0), "imm": imm or 0,
        "hdr_len": 40 + 16 * bool(reth) + 4 * (imm is not None), "length": n,
        "payload": payload[:n],
    }
    return dgram, want


def atomic_datagram(rng, opcode):
    """An atomic request's IPv4 datagram without ICRC (its AtomicETH packed from the header
    table: scapy has none), and the operands its record must hold."""
    bth = BTH(opcode=opcode, padcount=0, pkey=0xFFFF, dqpn=rng.getrandbits(24), ackreq=1,
              psn=rng.getrandbits(24), icrc=0)
    ops = dict(va=rng.getrandbits(61) << 3, rkey=rng.getrandbits(32),
               swap_add=rng.getrandbits(64), compare=rng.getrandbits(64))
    l4 = bytes(bth)[:H.BTH.length] + H.ATOMIC_ETH.pack(**ops)
    pkt = IP(src="10.0.0.9", dst="10.0.0.1") / UDP(sport=0xC001, dport=4791, chksum=0) / \
        (l4 + bytes(4))
    return bytes(pkt)[:-4], dict(ops, opcode=opcode, psn=bth.psn)


def make_case(seed, count):
    rng = random.Random(seed)
    sent, expect = [], []
    malformed = 0
    for _ in range(count):
        kind = rng.random()
        op = rng.choice(REQUESTS)
        if kind < 0.12:
            dgram, _ = datagram(rng, rng.choice(OTHERS))
            sent.append(Packet(dgram))
        elif kind < 0.2:
            dgram, _ = datagram(rng, op)
            sent.append(Packet(dgram, error=True))          # bad ICRC
        elif kind < 0.3:
            dgram, _ = datagram(rng, op, malformed=True)
            sent.append(Packet(dgram))
            malformed += 1
        else:
            dgram, want = datagram(rng, op)
            sent.append(Packet(dgram))
            expect.append((dgram, want))
    return sent, expect, malformed


class Records:
    """Takes the records of ``hdr`` with ``ready`` low in a cycle with chance ``backpressure``;
    ``records`` (dicts: headers ``h``, facts ``f``) and the cycle each was taken in
    (``cycles``)."""

    def __init__(self, port, backpressure=0.0, seed=0):
        self.port, self.backpressure = port, backpressure
        self.rng = random.Random(seed)
        self.records, self.cycles = [], []

    async def run(self, ctx):
        cycle = 0
        while True:
            ready = not (self.backpressure and self.rng.random() < self.backpressure)
            ctx.set(self.port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(self.port.valid, self.port.payload)
            cycle += 1
            if valid and ready:
                self.records.append(meta_dict(payload))
                self.cycles.append(cycle)


def check_record(rec, dgram, want):
    """A record of ``hdr``: the headers the scapy-built ``want`` has, and facts of them (those
    are checked in full in ``test_resp_check``)."""
    meta, facts = rec["h"], rec["f"]
    r = want["reth"]
    assert (facts["va_end"], facts["dma_zero"], facts["pkey_ok"]) == \
        (r["va"] + r["dma_len"], int(r["dma_len"] == 0), 1)
    bth = meta["bth"]
    assert {k: meta[k] for k in ("src_ip", "src_port", "ecn", "imm", "hdr_len", "length")} \
        == {k: want[k] for k in ("src_ip", "src_port", "ecn", "imm", "hdr_len", "length")}
    assert (bth["opcode"], bth["psn"], bth["dest_qp"], bth["ack_req"], bth["se"],
            bth["padcnt"], bth["pkey"]) == (want["opcode"], want["psn"], want["dest_qp"],
                                            want["ack_req"], want["se"], want["padcnt"], 0xFFFF)
    assert meta["reth"] == want["reth"]
    assert dgram[meta["hdr_len"]:meta["hdr_len"] + meta["length"]] == want["payload"]


@pytest.mark.parametrize("width, idle, backpressure, seed", [
    full(64, 0.0, 0.0, 1), (64, 0.3, 0.5, 2), full(512, 0.0, 0.0, 3), (512, 0.4, 0.7, 4),
    full(128, 0.2, 0.3, 5)])
def test_requests_parsed_others_dropped(width, idle, backpressure, seed):
    sent, expect, malformed = make_case(seed, 150)
    dut = RespIngress(width)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 100)
    recs = Records(dut.hdr, backpressure, seed + 200)
    pulses = {"malformed": 0, "overflow": 0}

    async def count(ctx):
        async for _, _, mal, ovf in ctx.tick().sample(dut.malformed, dut.overflow):
            pulses["malformed"] += mal
            pulses["overflow"] += ovf

    async def tb(ctx):
        await drv.send(ctx, sent)
        while len(col.packets) < len(expect) or len(recs.records) < len(expect):
            await ctx.tick()
        await ctx.tick().repeat(20)

    run_sim(dut, testbenches=[tb], processes=[col.run, recs.run, count], deadline_cycles=200_000)
    assert pulses == {"malformed": malformed, "overflow": 0}
    assert len(col.packets) == len(expect) == len(recs.records)
    for got, meta, (dgram, want) in zip(col.packets, recs.records, expect):
        assert got.data == dgram and not got.error
        check_record(meta, dgram, want)


def records_behind_held_beats(dut, datagrams):
    """``datagrams`` sent into ``dut`` back to back, its beats held (``o.ready`` low): the
    records offered, and the cycles from each datagram's last beat in to its record."""
    drv = StreamDriver(dut.i, dut.width)
    recs = Records(dut.hdr)
    last_in = HandshakeMonitor(dut.i, last_only=True)

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        await drv.send(ctx, [Packet(d) for d in datagrams])
        await ctx.tick().repeat(10)
        assert ctx.get(dut.o.valid)

    run_sim(dut, testbenches=[tb], processes=[recs.run, last_in.run])
    return recs, [c - t for c, t in zip(recs.cycles, last_in.cycles)]


@pytest.mark.parametrize("width", [64, 512])
def test_records_run_ahead(width):
    """With the beats held, the records of the requests stored behind the first are offered
    all the same, each two cycles after its last beat went in; one cycle for a request longer
    than the beats its headers' lanes take (its record known at the beat before its last)."""
    rng = random.Random(8)
    reqs = [datagram(rng, 0x0A) for _ in range(6)]
    recs, delays = records_behind_held_beats(RespIngress(width), [d for d, _ in reqs])
    assert len(recs.records) == len(reqs)
    for meta, (dgram, want) in zip(recs.records, reqs):
        check_record(meta, dgram, want)
    B = width // 8
    lanes = -(-REQ_HDR_MAX // B) * B
    want = [1 if len(d) > lanes else 2 for d, _ in reqs]
    assert set(want) == {1, 2}
    assert delays == want


@pytest.mark.parametrize("width", [64, 512])
def test_records_run_ahead_with_atomics(width):
    """Built with atomics, whose AtomicETH makes the headers' lanes longer
    (``REQ_HDR_ATOMIC``): a request other than an atomic still has its record offered a cycle
    after its last beat when it is longer than ``REQ_HDR_MAX``'s lanes (at W = 512 a 64 B
    WRITE, two beats), two cycles otherwise; an atomic (68 bytes) always two, its operands in
    its record."""
    rng = random.Random(9)
    reqs = []
    for k in range(12):
        if k % 3 == 2:
            reqs.append((*atomic_datagram(rng, rng.choice(ATOMIC_OPS)), True))
        else:
            # (payloads of 0..128 bytes: at W = 512 those of 5..64 are two beats)
            reqs.append((*datagram(rng, rng.choice([0x0A, 0x04, 0x0B]), n=8 * k), False))
    recs, delays = records_behind_held_beats(RespIngress(width, atomics=True),
                                             [d for d, _, _ in reqs])
    assert len(recs.records) == len(reqs)
    for rec, (dgram, want, atomic) in zip(recs.records, reqs):
        if not atomic:
            check_record(rec, dgram, want)
            continue
        h = rec["h"]
        assert (h["bth"]["opcode"], h["bth"]["psn"], h["hdr_len"], h["length"]) == \
            (want["opcode"], want["psn"], REQ_HDR_ATOMIC, 0)
        assert (h["reth"]["va"], h["reth"]["rkey"], h["reth"]["dma_len"]) == \
            (want["va"], want["rkey"], ATOMIC_BYTES)
        assert (h["atomic"]["swap_add"], h["atomic"]["compare"]) == \
            (want["swap_add"], want["compare"])
    B = width // 8

    def lanes(n):
        return -(-n // B) * B
    want = [1 if len(d) > lanes(REQ_HDR_ATOMIC if atomic else REQ_HDR_MAX) else 2
            for d, _, atomic in reqs]
    # (some requests are longer than REQ_HDR_MAX's lanes and not than the atomics' lanes:
    # the ones the atomics' longer lanes used to hold back)
    assert 1 in want and 2 in want
    assert any(lanes(REQ_HDR_MAX) < len(d) <= lanes(REQ_HDR_ATOMIC)
               for d, _, atomic in reqs if not atomic)
    assert delays == want


@pytest.mark.parametrize("width, seed", [(64, 11), (512, 12)])
def test_full_queues_drop_whole_requests(width, seed):
    """A small FIFO and a record queue of 2, both read with heavy random backpressure, the
    requests coming back to back: many are dropped and counted, and every datagram that comes
    out has its own record, in order."""
    rng = random.Random(seed)
    sent = []
    for _ in range(120):
        op = rng.choice([0x04, 0x0A, 0x06, 0x00])
        sent.append(datagram(rng, op))
    dut = RespIngress(width, depth=32, headers=2)
    drv = StreamDriver(dut.i, width)
    col = StreamCollector(dut.o, width, backpressure=0.8, seed=seed)
    recs = Records(dut.hdr, 0.8, seed + 1)
    pulses = {"overflow": 0}

    async def count(ctx):
        async for _, _, ovf in ctx.tick().sample(dut.overflow):
            pulses["overflow"] += ovf

    async def tb(ctx):
        await drv.send(ctx, [Packet(d) for d, _ in sent])
        await ctx.tick().repeat(3000)

    run_sim(dut, testbenches=[tb], processes=[col.run, recs.run, count])
    assert len(col.packets) == len(recs.records)
    assert pulses["overflow"] == len(sent) - len(col.packets) > 10
    wants = {d: w for d, w in sent}
    k = 0
    for got, meta in zip(col.packets, recs.records):
        while sent[k][0] != got.data:        # (those dropped in between)
            k += 1
        check_record(meta, got.data, wants[got.data])
        k += 1


def test_full_fifo_drops_and_counts():
    """A FIFO of 16 beats that is never read: the first requests fill it, the rest are dropped
    and counted, and the input is never held."""
    rng = random.Random(9)
    dgrams = [datagram(rng, 0x0A)[0] for _ in range(30)]
    dut = RespIngress(64, depth=16)
    drv = StreamDriver(dut.i, 64)
    seen = {"overflow": 0, "ready_low": 0}

    async def watch(ctx):
        async for _, _, ovf, rdy in ctx.tick().sample(dut.overflow, dut.i.ready):
            seen["overflow"] += ovf
            seen["ready_low"] += not rdy

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.hdr.ready, 1)
        await drv.send(ctx, [Packet(d) for d in dgrams])
        await ctx.tick().repeat(10)

    run_sim(dut, testbenches=[tb], processes=[watch])
    stored = 0
    free = 16
    for d in dgrams:
        beats = -(-len(d) // 8)
        if beats <= free:
            free -= beats
            stored += 1
    assert seen == {"overflow": len(dgrams) - stored, "ready_low": 0}
    assert stored >= 1


def test_ack_is_not_a_request():
    ack = bytes(IP(src="10.0.0.2", dst="10.0.0.1") / UDP(sport=0xC000, dport=4791) /
                BTH(opcode=opc.OP_RC_ACKNOWLEDGE, pkey=0xFFFF) / AETH())[:-4]
    dut = RespIngress(512)
    drv = StreamDriver(dut.i, 512)
    col = StreamCollector(dut.o, 512)

    async def tb(ctx):
        await drv.send(ctx, [Packet(ack)])
        await ctx.tick().repeat(10)

    recs = Records(dut.hdr)
    run_sim(dut, testbenches=[tb], processes=[col.run, recs.run])
    assert col.packets == [] and recs.records == []


def test_parameters():
    raises(ValueError, "width must be one of", lambda: RespIngress(96))
    for bad in (1, 3, 512, True):
        raises(ValueError, "headers must be a power of two from 2 to 256",
               lambda b=bad: RespIngress(64, headers=b))
    Fragment.get(RespIngress(256), None)
