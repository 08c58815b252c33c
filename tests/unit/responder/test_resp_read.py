"""The responder's READ path (:class:`RespRead`: :class:`RespReadQueue` and :class:`RespReadGen`)
against the reference model of the responses (:func:`rocegen.sim.models.responder.responder.read_responses`,
:func:`~rocegen.sim.models.responder.responder.memory_read`): READs of 0, 1, PMTU - 1, PMTU, PMTU + 1 and
64 KiB bytes at PMTUs of 256, 1024 and 4096, at any byte address, over many QPs pushed at
random cycles, the packets taken with random backpressure, at 64 and 512 bits; a QP's queue
full; a QP set up again with READs queued and being generated; the rate. And the model itself
against values worked out by hand, with the rule of the answers' order."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.responder.resp_read import RespRead
from rocegen.gateware.roce.responder.resp_read_gen import RespReadGen
from rocegen.gateware.roce.responder.resp_read_queue import RespReadQueue
from rocegen.sim.models.responder.responder import (
    Decision,
    RespState,
    Verdict,
    answer_order,
    check_answer_order,
    memory_read,
    read_responses,
)
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.roce import PSN_MASK
from tests.tiers import full

QPS = 8
PMTU_LOG2S = (8, 10, 12)


def route(qp):
    return {"dest_qpn": 0x100 + 3 * qp, "dst_ip": 0x0A000010 + qp, "src_port": 0xC000 + qp,
            "dscp": 26 + qp % 4, "ecn": 2}


def job(rng, length, pmtu_log2):
    va = rng.choice([rng.getrandbits(32), rng.getrandbits(20), 0xFFFFFFFF - rng.randrange(100)])
    return {"psn": rng.choice([rng.getrandbits(24), PSN_MASK - rng.randrange(3)]),
            "va": va, "length": length, "msn": rng.getrandbits(24), "pmtu_log2": pmtu_log2}


def lengths(pmtu_log2):
    pmtu = 1 << pmtu_log2
    return [0, 1, pmtu - 1, pmtu, pmtu + 1, 1 << 16]


def expected(qp, j, width):
    """The packets of READ ``j`` of QP ``qp`` on ``o``, as dicts of ``desc`` and ``mem``."""
    out = []
    resp = read_responses(j)
    r = route(qp)
    for k, p in enumerate(resp):
        syn, msn = p["aeth"] or (0, 0)
        addr, off, words = memory_read(p["addr"], p["length"], width)
        desc = {"wr_id": 0, "qp": qp, "dest_qpn": r["dest_qpn"], "opcode": p["opcode"],
                "psn": p["psn"], "ack_req": 0, "se": 0, "padcnt": p["padcnt"],
                "local_addr": p["addr"], "length": p["length"], "has_reth": 0, "va": 0,
                "rkey": 0, "dma_len": 0, "has_imm": int(p["aeth"] is not None),
                "imm": syn << 24 | msn, "last": int(k == len(resp) - 1), "src": 3,
                "peer_ip": r["dst_ip"], "udp_sport": r["src_port"], "dscp": r["dscp"],
                "ecn": r["ecn"]}
        out.append({"desc": desc, "mem": {"addr": addr, "offset": off, "words": words},
                    "atomic": work(j)})
    return out


ATOMIC_OPS = {None: 0, "FETCH_ADD": 1, "COMPARE_SWAP": 2, "REPLAY": 3}


def work(j):
    """The ``atomic`` field of job ``j``'s packets (the model's job: a READ's has no ``op``)."""
    return {"op": ATOMIC_OPS[j.get("op")], "swap_add": j.get("swap_add", 0),
            "compare": j.get("compare", 0)}


def atomic_job(rng, pmtu_log2):
    """A random atomic as the model queues it (an aligned target, any operation)."""
    op = rng.choice(["FETCH_ADD", "COMPARE_SWAP", "REPLAY"])
    return {"psn": rng.getrandbits(24), "va": rng.getrandbits(32) & ~7, "length": 8,
            "msn": rng.getrandbits(24), "pmtu_log2": pmtu_log2, "op": op,
            "swap_add": rng.getrandbits(64), "compare": 0 if op == "REPLAY" else rng.getrandbits(64)}


def normalise(pkt):
    """A packet taken from ``o``, with the fields the descriptor leaves don't-care (the
    ImmDt without AETH) zeroed."""
    if not pkt["desc"]["has_imm"]:
        pkt["desc"]["imm"] = 0
    return pkt


def taker(port, rng, backpressure, log):
    async def run(ctx):
        cycle = 0
        while True:
            ready = not (backpressure and rng.random() < backpressure)
            ctx.set(port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
            if valid and ready:
                log.append((cycle, normalise(meta_dict(payload))))
            cycle += 1
    return run


async def push(ctx, dut, qp, j):
    read = {k: j[k] for k in ("psn", "va", "length", "msn", "pmtu_log2")}
    ctx.set(dut.push.payload, {"qp": qp, "read": read, "route": route(qp), "atomic": work(j)})
    ctx.set(dut.push.valid, 1)
    await ctx.tick()
    ctx.set(dut.push.valid, 0)


@pytest.mark.parametrize("width, idle, backpressure, burst, atomics", [
    (64, 0.0, 0.0, 4, False), (512, 0.0, 0.0, 1, False), (512, 0.5, 0.4, 4, True),
    (64, 0.2, 0.7, 3, True)])
def test_responses_against_model(width, idle, backpressure, burst, atomics):
    """READs of every length of :func:`lengths` at each PMTU, twice, to random QPs at random
    cycles (never more than a QP's queue holds), the responses taken with backpressure: each
    QP's packets are its READs' responses in push order, field for field. With ``atomics``,
    atomics among them: one ATOMIC_ACKNOWLEDGE each, with its operation, in its QP's order."""
    rng = random.Random(width + burst)
    dut = RespRead(width, QPS, burst=burst, atomics=atomics)
    jobs = [(rng.randrange(QPS), job(rng, n, j)) for j in PMTU_LOG2S for n in lengths(j)] * 2
    if atomics:
        jobs += [(rng.randrange(QPS), atomic_job(rng, rng.choice(PMTU_LOG2S)))
                 for _ in range(len(jobs) // 2)]
    rng.shuffle(jobs)
    got = []
    want = {qp: [] for qp in range(QPS)}
    for qp, j in jobs:
        want[qp] += expected(qp, j, width)
    total = sum(len(v) for v in want.values())

    async def tb(ctx):
        for qp, j in jobs:
            while idle and rng.random() < idle:
                await ctx.tick()
            await push(ctx, dut, qp, j)
        while len(got) < total:
            await ctx.tick()
        await ctx.tick().repeat(50)

    run_sim(dut, testbenches=[tb], processes=[taker(dut.o, rng, backpressure, got)],
            deadline_cycles=None)
    assert len(got) == total
    for qp in range(QPS):
        mine = [p for _, p in got if p["desc"]["qp"] == qp]
        assert len(mine) == len(want[qp]), qp
        for k, (g, w) in enumerate(zip(mine, want[qp])):
            assert g == w, f"QP {qp} packet {k}"
    if atomics:
        assert sum(p["desc"]["opcode"] == 0x12 for _, p in got) == len(jobs) // 3
    # the QPs take turns: the packets of several QPs interleave
    switches = sum(a["desc"]["qp"] != b["desc"]["qp"] for (_, a), (_, b) in zip(got, got[1:]))
    assert switches > 2 * len(jobs), switches


def test_queue_full():
    """A QP with ``rd_depth`` READs queued reads full (the others not); a push beyond is
    ignored; the queue has room again once its oldest READ's responses are made."""
    rng = random.Random(5)
    dut = RespRead(64, 4)
    got = []
    reads = [job(rng, 8 << 8, 8) for _ in range(17)]      # (more than the output queue holds)
    seen = {}

    async def full(ctx, qp):
        ctx.set(dut.full_qp, qp)
        await ctx.tick()
        return ctx.get(dut.full)

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        for j in reads[:15]:
            await push(ctx, dut, 2, j)
        seen["15"] = await full(ctx, 2)
        await push(ctx, dut, 2, reads[15])
        seen["16"] = await full(ctx, 2)
        seen["others"] = [await full(ctx, qp) for qp in (0, 1, 3)]
        await push(ctx, dut, 2, reads[16])             # ignored
        await ctx.tick().repeat(20)
        seen["held"] = await full(ctx, 2)
        # let the packets go: the first READ's 8 packets free its place
        cycles = 0
        ctx.set(dut.o.ready, 1)
        while await full(ctx, 2):
            cycles += 1
        seen["freed after"] = cycles
        while len(got) < 128:
            await ctx.tick()
        await ctx.tick().repeat(30)

    async def watch(ctx):
        async for _, _, v, r, p in ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload):
            if v and r:
                got.append(normalise(meta_dict(p)))

    run_sim(dut, testbenches=[tb], processes=[watch])
    assert (seen["15"], seen["16"], seen["others"], seen["held"]) == (0, 1, [0, 0, 0], 1)
    assert seen["freed after"] <= 16, seen
    want = [p for j in reads[:16] for p in expected(2, j, 64)]
    assert got == want


def test_flush():
    """QP 1 set up again while READs of it are queued and one is being generated (the output
    held): of its old READs, only packets already made leave, a prefix of their responses; QP 0's
    are untouched; a READ of QP 1 pushed afterwards is answered whole."""
    rng = random.Random(9)
    dut = RespRead(512, 2, burst=2, out_depth=4)
    old = {qp: [job(rng, 8 << 8, 8) for _ in range(3)] for qp in (0, 1)}
    new = job(rng, 3 << 8, 8)
    got = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        for k in range(3):
            for qp in (1, 0):
                await push(ctx, dut, qp, old[qp][k])
        await ctx.tick().repeat(10)
        ctx.set(dut.flush.payload, 1)
        ctx.set(dut.flush.valid, 1)
        await ctx.tick()
        ctx.set(dut.flush.valid, 0)
        await ctx.tick()
        await push(ctx, dut, 1, new)
        ctx.set(dut.o.ready, 1)
        while len(got) < 24 + 3:
            await ctx.tick()
        await ctx.tick().repeat(100)

    async def watch(ctx):
        async for _, _, v, r, p in ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload):
            if v and r:
                got.append(normalise(meta_dict(p)))

    run_sim(dut, testbenches=[tb], processes=[watch])
    q0 = [p for p in got if p["desc"]["qp"] == 0]
    q1 = [p for p in got if p["desc"]["qp"] == 1]
    assert q0 == [p for j in old[0] for p in expected(0, j, 512)]
    old1 = [p for j in old[1] for p in expected(1, j, 512)]
    tail = expected(1, new, 512)
    assert q1[-3:] == tail
    made = q1[:-3]
    assert 0 < len(made) <= 4 + 2 and made == old1[:len(made)], len(made)


@pytest.mark.parametrize("pmtu_log2, length, qps, burst, cycles", [
    (12, 4096, 1, 4, 2),            # single-packet READs of one QP: a turn each
    (12, 4096, 4, 4, 2),
    (12, 1 << 16, 1, 4, 1.25),      # 16-packet READs: turns of 4 packets in 5 cycles
    full(8, 1 << 16, 3, 4, 1.25),
    (8, 1 << 16, 2, 1, 2)])
def test_rate(pmtu_log2, length, qps, burst, cycles):
    """Packets come at a turn of ``burst`` packets every ``burst + 1`` cycles (2 cycles a
    single-packet READ) with the output always taken; paced by a consumer that takes a packet
    and then spends its packet time (its beats at 512 bits: 65 at PMTU 4096), the generator
    never keeps it waiting."""
    rng = random.Random(pmtu_log2)
    reads = [(k % qps, job(rng, length, pmtu_log2)) for k in range(8 * qps)]
    total = sum(len(read_responses(j)) for _, j in reads)
    taken, starved = paced_run(reads, total, burst, paced=False)
    span = taken[-1] - taken[0]
    assert span == pytest.approx(cycles * (total - 1), abs=3), (span, total)
    taken, starved = paced_run(reads, total, burst, paced=True)
    assert len(taken) == total and starved == [], starved[:10]


@pytest.mark.parametrize("length, done_at", [(64, 2), (3 * 4096, 4)])
def test_latency(length, done_at):
    """A READ pushed into empty queues in cycle 0 has its first packet offered in cycle 3 (the
    queue's tail in 1, its turn in 2, taken and made into a packet in that cycle); it is done
    (``done``) in the cycle its last packet goes into the output queue: 2 for one packet, 4 for
    three (a packet a cycle within the turn)."""
    dut = RespRead(512, 4)
    j = job(random.Random(length), length, 12)
    seen = {"o": None, "done": None}

    async def tb(ctx):
        await push(ctx, dut, 1, j)
        await ctx.tick().repeat(8)

    async def watch(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = 0
        async for _, _, pv, v, dv in ctx.tick().sample(dut.push.valid, dut.o.valid,
                                                      dut.done.valid):
            if pv:
                cycle = 0
            if v and seen["o"] is None:
                seen["o"] = cycle
            if dv and seen["done"] is None:
                seen["done"] = cycle
            cycle += 1

    run_sim(dut, testbenches=[tb], processes=[watch])
    assert seen == {"o": 3, "done": done_at}


def paced_run(reads, total, burst, *, paced):
    """``reads`` pushed back to back into a :class:`RespRead` (W = 512); the packets taken
    always (``paced`` False) or one per packet time: the cycles each packet was taken, and
    those in which the consumer was ready with none offered, between the first and the last."""
    dut = RespRead(512, 4, burst=burst, out_depth=4)
    taken, starved = [], []

    async def tb(ctx):
        for qp, j in reads:
            ctx.set(dut.push.payload, {"qp": qp, "read": j, "route": route(qp),
                                       "atomic": work(j)})
            ctx.set(dut.push.valid, 1)
            await ctx.tick()
        ctx.set(dut.push.valid, 0)
        while len(taken) < total:
            await ctx.tick()

    async def consume(ctx):
        cycle, busy = 0, 0
        while True:
            ctx.set(dut.o.ready, busy == 0)
            _, _, v, p = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if busy == 0 and v:
                taken.append(cycle)
                n = 16 + p.desc.length + p.desc.padcnt      # BTH, AETH, payload, pad
                busy = -(-n // 64) - 1 if paced else 0
            elif busy == 0 and taken and len(taken) < total:
                starved.append(cycle)
            else:
                busy = max(0, busy - 1)
            cycle += 1

    run_sim(dut, testbenches=[tb], processes=[consume])
    return taken, starved


def test_model_by_hand():
    j = {"psn": PSN_MASK - 1, "va": 0x1003, "length": 2 * 256 + 5, "msn": 7, "pmtu_log2": 8}
    r = read_responses(j)
    assert [(p["opcode"], p["psn"], p["aeth"], p["addr"], p["length"], p["padcnt"])
            for p in r] == [(0x0D, PSN_MASK - 1, (0x1F, 7), 0x1003, 256, 0),
                            (0x0E, PSN_MASK, None, 0x1103, 256, 0),
                            (0x0F, 0, (0x1F, 7), 0x1203, 5, 3)]
    for n, ops in [(0, [0x10]), (1, [0x10]), (255, [0x10]), (256, [0x10]),
                   (257, [0x0D, 0x0F]), (1 << 16, [0x0D] + [0x0E] * 254 + [0x0F])]:
        assert [p["opcode"] for p in read_responses(dict(j, length=n))] == ops
    assert memory_read(0x1003, 256, 64) == (0x200, 3, 33)
    assert memory_read(0x1000, 256, 512) == (0x40, 0, 4)
    assert memory_read(0x103F, 2, 512) == (0x40, 63, 2)
    assert memory_read(0x1000, 0, 512) == (0x40, 0, 0)


def test_answer_order():
    """The order rule: a READ's responses and the answers of the requests around it leave in
    PSN order; a plain ACK may be left out when a later ACK or NAK of the QP follows (queued
    ACKs merged, a parked ACK replaced), never a NAK or the last answer."""
    def ack(psn, syndrome=0x1F):
        return Decision(Verdict.EXECUTED, RespState(), {}, dict(syndrome=syndrome, psn=psn,
                                                                msn=psn), None)
    rd = Decision(Verdict.EXECUTED, RespState(), {}, None, None,
                  read=dict(psn=3, va=0, length=300, msn=2, pmtu_log2=8))
    want = answer_order([(0, ack(1)), (0, ack(2)), (0, rd), (1, ack(9)), (0, ack(5)),
                         (0, ack(6, 0x60)), (0, ack(6))])
    assert [a[0] for a in want[0]] == ["ACK", "ACK", "READ", "READ", "ACK", "ACK", "ACK"]
    w = want[0]
    for good in (w, w[1:], w[2:], w[:4] + w[5:], w[2:4] + w[5:]):
        check_answer_order(w, good)
    for bad in ([w[1], w[4], w[2], w[3], w[5], w[6]], w[:3] + w[4:], w[:-1], w[:5] + w[6:],
                [w[0], w[2], w[1], w[3]] + w[4:], w[2:3] + w[4:]):
        with pytest.raises(AssertionError):
            check_answer_order(w, bad)
    assert want[1] == [("ACK", 0x1F, 9, 9)]


def test_parameters_are_checked():
    raises(ValueError, "rd_depth must be a power of two from 16", lambda: RespRead(64, 2,
                                                                                   rd_depth=8))
    raises(ValueError, "rd_depth must be a power of two from 16",
           lambda: RespReadQueue(2, rd_depth=24))
    raises(TypeError, "rd_depth must be an integer", lambda: RespReadQueue(2, rd_depth=16.0))
    raises(ValueError, "burst must be 1..64", lambda: RespReadGen(64, burst=0))
    raises(ValueError, "out_depth must be 2..64", lambda: RespReadGen(64, out_depth=1))
    raises(TypeError, "burst must be an integer", lambda: RespReadGen(64, burst=True))
    raises(ValueError, "num_qps must be", lambda: RespRead(64, 0))


def test_elaborates():
    for args in ((64, 1), (512, 256), (128, 3)):
        Fragment.get(RespRead(*args, rd_depth=32), None)
