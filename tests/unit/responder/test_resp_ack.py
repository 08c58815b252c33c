"""The responder's acknowledgement sender (:class:`RespAck`): random ACKs, NAKs, RNR NAKs and CNPs
with idle cycles and backpressure, each packet against the bytes scapy builds for its record;
the coalescing rule replayed from the ``coalesced`` pulses and checked against invariants that
need no timing model; exact sequences under held backpressure; latency and throughput."""

import random

import pytest
from amaranth.hdl import Cat, Elaboratable, Module
from amaranth.lib import wiring
from scapy.contrib.roce import AETH, BTH, CNPPadding

from rocegen.gateware.roce.responder.resp_ack import RespAck
from rocegen.gateware.roce.responder.resp_ack_frame import RespAckFrame
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.testing.amaranth_streams import StreamCollector, meta_dict, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.addr import parse_ip, parse_mac
from tests.unit.responder.test_resp_ack_frame import LOCAL_IP, LOCAL_MAC, expected_frame, frame_of

ROCE_PORT = 4791


def record(qp, kind, rng, peers):
    """A RESP_RESPONSE dict: ``kind`` is "ack", "nak", "rnr" or "cnp"; the fields a CNP does
    not use are random too (they must not show)."""
    syndrome = {"ack": rng.getrandbits(5), "nak": 0x60 | rng.randrange(5),
                "rnr": 0x20 | rng.getrandbits(5), "cnp": rng.getrandbits(8)}[kind]
    return {"qp": qp, "cnp": int(kind == "cnp"), "syndrome": syndrome,
            "psn": rng.getrandbits(24), "msn": rng.getrandbits(24), **peers[qp]}


def make_peers(rng, qps):
    return {qp: {"dest_qpn": rng.getrandbits(24), "dst_ip": rng.getrandbits(32),
                 "src_port": rng.getrandbits(16), "dscp": rng.getrandbits(6)} for qp in qps}


def is_ack(r):
    return not r["cnp"] and (r["syndrome"] >> 5) & 3 == 0


def expected_bytes(r):
    """The UDP payload without its ICRC, as scapy builds it (scapy appends a 4-byte ICRC field,
    given as 0 and cut off)."""
    if r["cnp"]:
        p = BTH(opcode=0x81, becn=1, pkey=0xFFFF, dqpn=r["dest_qpn"], psn=0, icrc=0) / CNPPadding()
    else:
        p = BTH(opcode=0x11, pkey=0xFFFF, dqpn=r["dest_qpn"], psn=r["psn"], icrc=0) / \
            AETH(syndrome=r["syndrome"], msn=r["msn"])
    raw = bytes(p)
    assert raw[-4:] == b"\0\0\0\0"
    return raw[:-4]


def check_packet(pkt, r, n):
    assert pkt.data == expected_bytes(r) and not pkt.error, (n, pkt.data.hex(), r)
    parsed = BTH(pkt.data + b"\0\0\0\0")
    assert parsed.dqpn == r["dest_qpn"] and parsed.pkey == 0xFFFF, n
    if r["cnp"]:
        assert parsed.opcode == 0x81 and parsed.becn == 1 and CNPPadding in parsed, n
    else:
        assert parsed.opcode == 0x11 and parsed.psn == r["psn"], n
        assert parsed[AETH].syndrome == r["syndrome"] and parsed[AETH].msn == r["msn"], n
    assert pkt.meta["udp"] == {"dst_ip": r["dst_ip"], "src_port": r["src_port"],
                               "dst_port": ROCE_PORT, "length": 32 if r["cnp"] else 20,
                               "dscp": r["dscp"], "ecn": 0, "icrc": 1, "checksum": 0}, n


class Monitor:
    """Watches ``i``, ``o`` and the pulses every cycle (counted like :class:`StreamCollector`
    counts its cycles). Replays the ``coalesced`` pulses on the records taken: ``seq`` is what
    must come out, the merge rule is checked as each pulse comes."""

    def __init__(self, dut):
        self.dut = dut
        self.taken = []             # (cycle, record) of each record taken on i
        self.seq = []               # records taken, each merge replacing the newest
        self.merges = 0
        self.pulses = {"ack": 0, "nak": 0, "cnp": 0}

    async def run(self, ctx):
        d = self.dut
        cycle = 0
        started = 0                 # packets whose first beat has been accepted
        in_pkt = False
        async for _, _, iv, ir, ip, co, ov, orr, olast, sa, sn, sc in ctx.tick().sample(
                d.i.valid, d.i.ready, d.i.payload, d.coalesced, d.o.valid, d.o.ready,
                d.o.payload.last, d.sent_ack, d.sent_nak, d.sent_cnp):
            cycle += 1
            assert not co or (iv and ir), "coalesced without a record taken"
            if iv and ir:
                r = meta_dict(ip)
                self.taken.append((cycle, r))
                if co:
                    # the newest record: an ACK of the same QP, not yet in the output register
                    # (whose packet is offered now or was already accepted)
                    tail = self.seq[-1]
                    assert is_ack(r) and is_ack(tail) and tail["qp"] == r["qp"], (tail, r)
                    assert len(self.seq) - 1 >= started + (ov and not in_pkt), cycle
                    self.seq[-1] = r
                    self.merges += 1
                else:
                    self.seq.append(r)
            done = ov and orr and olast
            if not done:
                assert not (sa or sn or sc), cycle
            if done:
                r = self.seq[started - 1 if in_pkt else started]
                kind = "cnp" if r["cnp"] else "ack" if is_ack(r) else "nak"
                assert (sa, sn, sc) == (kind == "ack", kind == "nak", kind == "cnp"), cycle
                self.pulses[kind] += 1
            if ov and orr:
                if not in_pkt:
                    started += 1
                in_pkt = not olast


def run(width, records, *, backpressure, idle, seed, depth=8):
    dut = RespAck(width, depth)
    rng = random.Random(seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed)
    mon = Monitor(dut)

    async def tb(ctx):
        await send_records(ctx, dut.i, records, rng, idle)
        while len(col.packets) < len(mon.seq):
            await ctx.tick()
        await ctx.tick().repeat(20)         # nothing more comes out

    run_sim(dut, testbenches=[tb], processes=[col.run, mon.run], deadline_cycles=100_000)
    assert [r for _, r in mon.taken] == records
    return col, mon


def check_invariants(records, outputs, merges):
    """What must hold whatever the timing: (1) the non-ACK records all leave, once, in order;
    (2) the ACKs of a QP that leave are ACKs taken, in the order taken, each replaced only by
    later ones; (3) the last ACK of each QP leaves; and every record either leaves or was
    merged (one ``coalesced`` pulse each)."""
    assert len(outputs) + merges == len(records)
    assert [r for r in outputs if not is_ack(r)] == [r for r in records if not is_ack(r)]
    for qp in {r["qp"] for r in records}:
        taken = [r for r in records if is_ack(r) and r["qp"] == qp]
        sent = [r for r in outputs if is_ack(r) and r["qp"] == qp]
        pos = [taken.index(r) for r in sent]
        assert pos == sorted(set(pos)), qp
        if taken:
            assert sent[-1] == taken[-1], qp
    # an ACK that did not leave was replaced by the next record taken of its QP, an ACK
    # (no record of another QP, nor a NAK or CNP of this one, in between)
    out_ids = {id(r) for r in outputs}
    for n, r in enumerate(records):
        if is_ack(r) and id(r) not in out_ids:
            nxt = records[n + 1] if n + 1 < len(records) else None
            assert nxt is not None and is_ack(nxt) and nxt["qp"] == r["qp"], n


def random_records(rng, n, qps=(0, 1, 2, 7)):
    peers = make_peers(rng, qps)
    kinds = ["ack"] * 8 + ["nak", "rnr", "cnp"]
    # runs of ACKs of one QP, so that coalescing has something to do
    out = []
    while len(out) < n:
        qp = rng.choice(qps)
        for _ in range(rng.choice([1, 1, 2, 4])):
            out.append(record(qp, rng.choice(kinds), rng, peers))
    return out[:n]


@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("backpressure, idle", [(0.0, 0.3), (0.3, 0.2), (0.8, 0.0)])
def test_random_sequences(width, backpressure, idle):
    seed = width + int(100 * backpressure)
    rng = random.Random(seed)
    records = random_records(rng, 300)
    col, mon = run(width, records, backpressure=backpressure, idle=idle, seed=seed)
    assert len(col.packets) == len(mon.seq)
    for n, (pkt, r) in enumerate(zip(col.packets, mon.seq)):
        check_packet(pkt, r, n)
    # map the packets back to the records taken (by identity: the replay holds the same dicts
    # as mon.taken, which equal `records` one for one)
    ids = {id(r): k for k, (_, r) in enumerate(mon.taken)}
    outputs = [records[ids[id(r)]] for r in mon.seq]
    check_invariants(records, outputs, mon.merges)
    assert mon.pulses == {"ack": sum(map(is_ack, outputs)),
                          "cnp": sum(r["cnp"] for r in outputs),
                          "nak": sum(not r["cnp"] and not is_ack(r) for r in outputs)}
    if backpressure >= 0.3:
        assert mon.merges > 20          # coalescing did happen


def run_held(width, records, *, depth=8):
    """Feed ``records`` with ``o.ready`` held low (each must be taken), then release it."""
    dut = RespAck(width, depth)
    col = StreamCollector(dut.o, width, backpressure=1.0)
    mon = Monitor(dut)

    async def tb(ctx):
        await send_records(ctx, dut.i, records)
        await ctx.tick().repeat(5)
        assert not col.packets
        col.backpressure = 0.0
        while len(col.packets) < len(mon.seq):
            await ctx.tick()
        await ctx.tick().repeat(10)

    run_sim(dut, testbenches=[tb], processes=[col.run, mon.run], deadline_cycles=10_000)
    for n, (pkt, r) in enumerate(zip(col.packets, mon.seq)):
        check_packet(pkt, r, n)
    return [pkt.data for pkt in col.packets], mon.merges


@pytest.mark.parametrize("width", [64, 512])
def test_held_backpressure_rule(width):
    """With ``o.ready`` low from the start: the first record goes straight into the output
    register (the queue is empty and ``o`` idle), so it is sent as it is; the second is queued
    and the three ACKs after it merge into it; the NAK is queued behind; of the two ACKs after
    the NAK the second merges into the first. Out: A1, A5, NAK, B2; four merges."""
    rng = random.Random(3)
    peers = make_peers(rng, [3])
    acks = [record(3, "ack", rng, peers) for _ in range(5)]
    nak = record(3, "nak", rng, peers)
    more = [record(3, "ack", rng, peers) for _ in range(2)]
    out, merges = run_held(width, acks + [nak] + more)
    assert out == [expected_bytes(r) for r in (acks[0], acks[4], nak, more[1])]
    assert merges == 4


@pytest.mark.parametrize("width", [64, 512])
def test_held_no_merge_across(width):
    """An ACK queues behind an ACK of another QP, a CNP or an RNR NAK of its own; only ACKs of
    one QP directly after one another merge."""
    rng = random.Random(4)
    peers = make_peers(rng, [1, 2])
    a = [record(1, "ack", rng, peers) for _ in range(6)]
    b = [record(2, "ack", rng, peers) for _ in range(3)]
    cnp, rnr = record(1, "cnp", rng, peers), record(1, "rnr", rng, peers)
    records = [a[0], a[1], b[0], a[2], cnp, a[3], a[4], rnr, b[1], b[2], a[5]]
    out, merges = run_held(width, records)
    assert out == [expected_bytes(r) for r in (a[0], a[1], b[0], a[2], cnp, a[4], rnr, b[2], a[5])]
    assert merges == 2


def test_full_queue():
    """``i.ready`` drops once the output register and ``depth`` queue entries are taken, except
    for an ACK that merges into the newest entry; everything leaves once ``o`` is released."""
    depth = 4
    dut = RespAck(64, depth)
    rng = random.Random(5)
    peers = make_peers(rng, [5, 6])
    naks = [record(5, "nak", rng, peers) for _ in range(depth)]
    ack, ack2, other = (record(5, "ack", rng, peers), record(5, "ack", rng, peers),
                        record(6, "ack", rng, peers))
    col = StreamCollector(dut.o, 64, backpressure=1.0)

    async def tb(ctx):
        await send_records(ctx, dut.i, naks + [ack])        # 1 in the register, 4 queued
        for r in (naks[0], other):                          # no room, no merge
            ctx.set(dut.i.payload, r)
            ctx.set(dut.i.valid, 1)
            for _ in range(4):
                *_, ready, co = await ctx.tick().sample(dut.i.ready, dut.coalesced)
                assert not ready and not co
        ctx.set(dut.i.payload, ack2)                        # merges into the newest: taken
        *_, ready, co = await ctx.tick().sample(dut.i.ready, dut.coalesced)
        assert ready and co
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(3)
        assert not col.packets
        col.backpressure = 0.0
        while len(col.packets) < depth + 1:
            await ctx.tick()
        await ctx.tick().repeat(10)

    run_sim(dut, testbenches=[tb], processes=[col.run], deadline_cycles=10_000)
    assert [p.data for p in col.packets] == [expected_bytes(r) for r in naks + [ack2]]


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_latency_and_throughput(width):
    """One cycle from a record taken (queue empty, ``o`` idle) to its first beat; a burst
    leaves back to back, one beat per cycle, ACKs in 2 beats at 64 bits and 1 above, CNPs in
    4, 2, 1, 1."""
    rng = random.Random(6)
    peers = make_peers(rng, range(8))
    dut = RespAck(width)
    col = StreamCollector(dut.o, width)
    mon = Monitor(dut)
    single = [record(0, "ack", rng, peers), record(1, "cnp", rng, peers)]
    burst = [record(qp, rng.choice(["ack", "cnp", "nak"]), rng, peers) for qp in range(8)] * 3

    async def tb(ctx):
        for r in single:
            await send_records(ctx, dut.i, [r])
            await ctx.tick().repeat(10)
        await send_records(ctx, dut.i, burst)
        while len(col.packets) < len(single) + len(burst):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, mon.run], deadline_cycles=10_000)
    assert mon.merges == 0
    for (t, _), (first, _) in zip(mon.taken, col.spans[:2]):
        assert first == t + 1
    ack_beats, cnp_beats = -(-16 * 8 // width), -(-28 * 8 // width)
    for (first, last), r in zip(col.spans, single + burst):
        assert last - first + 1 == (cnp_beats if r["cnp"] else ack_beats)
    beats = [c for c in col.beat_cycles if c >= col.spans[2][0]]
    assert beats == list(range(beats[0], beats[0] + len(beats)))
    assert beats[0] == mon.taken[2][0] + 1
    for n, (pkt, r) in enumerate(zip(col.packets, single + burst)):
        check_packet(pkt, r, n)


def test_parameters_are_checked():
    raises(ValueError, "width", lambda: RespAck(32))
    raises(TypeError, "depth must be an integer", lambda: RespAck(64, 8.0))
    raises(TypeError, "depth must be an integer", lambda: RespAck(64, True))
    for depth in (0, 1, 3, 12, 128):
        raises(ValueError, f"depth must be a power of two from 2 to 64 records, not {depth}",
               lambda depth=depth: RespAck(64, depth))


# ---- the fast path: ACKNOWLEDGEs built whole (RespAck(fast=True) and RespAckFrame) ----

class FastTop(Elaboratable):
    """RespAck with its fast path into a RespAckFrame, and an ARP cache stand-in that knows
    every peer whose address is even (its MAC: the address twice, cut to 48 bits)."""

    def __init__(self, width):
        self.ack = RespAck(width, fast=True)
        self.frame = RespAckFrame(width)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ack, m.submodules.frame = self.ack, self.frame
        wiring.connect(m, self.ack.fast, self.frame.i)
        ip = self.ack.peek.ip
        m.d.comb += [self.ack.peek.hit.eq(~ip[0]), self.ack.peek.mac.eq(Cat(ip, ip)[:48])]
        return m


def known(r):
    return r["dst_ip"] % 2 == 0


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("backpressure", [0.0, 0.4])
def test_fast_path_order_and_frames(width, backpressure):
    """Random answers with ``fast_ok`` (the stack's ``tx_idle``) toggling at random and both
    outputs under backpressure: every record leaves once, in the order taken (coalescing as
    without the fast path), on ``o`` or whole on the frame builder's output; only an
    ACKNOWLEDGE whose peer ARP knows takes the fast path, in a cycle ``fast_ok`` is high and
    the output register is empty; no packet starts on ``o`` while a frame is in flight; each
    frame is the one scapy builds; the ``sent_*`` pulses count both ways."""
    seed = width + int(10 * backpressure)
    rng = random.Random(seed)
    records = random_records(rng, 200)
    for r in records:               # (ARP knows the peers of the even QPs)
        r["dst_ip"] = (r["dst_ip"] & ~1) | (r["qp"] & 1)
    top = FastTop(width)
    d = top.ack
    col = StreamCollector(d.o, width, backpressure=backpressure, seed=seed)
    frames = StreamCollector(top.frame.o, width, backpressure=backpressure, seed=seed + 1)
    log = []            # ("o" | "fast", record or None) in the order they leave
    seq, merges = [], [0]
    pulses = {"ack": 0, "nak": 0, "cnp": 0}

    async def watch(ctx):
        in_pkt = in_frame = False
        async for _, _, iv, ir, ip, co, ov, orr, olast, fv, fr, fp, ok, busy, fov, fordy, flast, \
                sa, sn, sc in ctx.tick().sample(
                d.i.valid, d.i.ready, d.i.payload, d.coalesced, d.o.valid, d.o.ready,
                d.o.payload.last, d.fast.valid, d.fast.ready, d.fast.payload, d.fast_ok,
                top.frame.i.ready, top.frame.o.valid, top.frame.o.ready,
                top.frame.o.payload.last, d.sent_ack, d.sent_nak, d.sent_cnp):
            went_fast = fv and fr
            if went_fast:
                r = meta_dict(fp)["ack"]
                assert ok and not r["cnp"] and known(r) and not in_pkt and not ov, r
                assert meta_dict(fp)["mac"] == ((r["dst_ip"] << 32) | r["dst_ip"]) & (2**48 - 1)
                log.append(("fast", r))
                in_frame = True
            if ov and orr:
                assert not in_frame and busy, "a packet on o while a frame is in flight"
                if not in_pkt:
                    log.append(("o", None))
                in_pkt = not olast
            if fov and fordy and flast:
                in_frame = False
            for kind, pulse in (("ack", sa), ("nak", sn), ("cnp", sc)):
                pulses[kind] += pulse
            if iv and ir:
                r = meta_dict(ip)
                if co:
                    merges[0] += 1
                    seq[-1] = r
                else:
                    seq.append(r)

    async def tb(ctx):
        ctx.set(top.frame.local_mac, parse_mac(LOCAL_MAC))
        ctx.set(top.frame.local_ip, parse_ip(LOCAL_IP))
        for n, r in enumerate(records):
            # (bursts, and gaps in which the queue empties)
            while rng.random() < (0.1 if n % 40 < 20 else 0.9):
                ctx.set(d.i.valid, 0)
                ctx.set(d.fast_ok, rng.random() < 0.7)
                await ctx.tick()
            ctx.set(d.i.payload, r)
            ctx.set(d.i.valid, 1)
            ctx.set(d.fast_ok, rng.random() < 0.7)
            await ctx.tick().until(d.i.ready)
        ctx.set(d.i.valid, 0)
        ctx.set(d.fast_ok, 1)
        while len(col.packets) + len(frames.packets) + merges[0] < len(records):
            await ctx.tick()
        await ctx.tick().repeat(20)

    run_sim(top, testbenches=[tb], processes=[col.run, frames.run, watch],
            deadline_cycles=200_000)
    assert len(log) == len(seq) == len(col.packets) + len(frames.packets)
    pkts, frms = iter(col.packets), iter(frames.packets)
    outputs = []
    ids = 0
    for n, ((way, r_fast), r) in enumerate(zip(log, seq)):
        if way == "fast":
            assert r_fast == r, n
            ids += 1
            frame = frame_of(next(frms))
            assert icrc_model.check(frame), n
            mac = ((r["dst_ip"] << 32) | r["dst_ip"]) & (2**48 - 1)
            assert frame == expected_frame({"ack": r, "mac": mac}, ids), n
        else:
            check_packet(next(pkts), r, n)
        outputs.append(r)
    # (the outputs as the records taken: they leave in the order taken)
    mapped, k = [], 0
    for r in outputs:
        while records[k] != r:
            k += 1
        mapped.append(records[k])
        k += 1
    check_invariants(records, mapped, merges[0])
    assert pulses == {"ack": sum(map(is_ack, outputs)), "cnp": sum(r["cnp"] for r in outputs),
                      "nak": sum(not r["cnp"] and not is_ack(r) for r in outputs)}
    assert ids > 10 and len(col.packets) > 10       # both ways were taken
