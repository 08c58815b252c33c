"""ReadResend: the READ requester's own READ requests, one descriptor per selective reissue,
built from the record and its QP's context; records of QPs not in RTS discarded, records that
find the queue full dropped; under random idle cycles and backpressure, with the context read
combinationally or one cycle late. The expected descriptors are worked out here from the
records and this file's context table."""

import enum
import inspect
import random

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib.memory import Memory

from rocegen.gateware.roce.layouts import PACKET_DESC, QP_CONTEXT, AtomicOp, QpState, WrSource
from rocegen.gateware.roce.read.read_resend import ReadResend
from rocegen.sim.testing.harness import raises, run_sim

OP_READ_REQUEST = 0x0C        # BTH opcode of an RC RDMA READ request (IBTA table 38)


def context(rng, state):
    return {"state": state, "peer_ip": rng.getrandbits(32), "peer_qpn": rng.getrandbits(24),
            "rkey": rng.getrandbits(32), "base_va": rng.getrandbits(64),
            "pmtu_log2": rng.randrange(8, 13), "udp_sport": 0xC000 | rng.getrandbits(14),
            "dscp": rng.getrandbits(6), "ecn": rng.getrandbits(2), "ack_every_log2": 3,
            "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


def record(rng, num_qps, send, *, outside=0.0):
    """A random reissue; with chance ``outside`` its QP is outside the table."""
    qp = rng.randrange(num_qps) if rng.random() >= outside or num_qps == 256 else \
        rng.randrange(num_qps, 256)
    return {"qp": qp, "wr_id": rng.getrandbits(32), "psn": rng.getrandbits(24),
            "offset": rng.getrandbits(31), "length": rng.getrandbits(31),
            "va": rng.getrandbits(64), "send": send}


def expected(rec, ctx):
    """The READ request descriptor for ``rec``, as the scheduler describes a READ request."""
    return {"wr_id": rec["wr_id"], "qp": rec["qp"], "dest_qpn": ctx["peer_qpn"],
            "opcode": OP_READ_REQUEST, "psn": rec["psn"], "ack_req": 1, "se": 0, "padcnt": 0,
            "local_addr": 0, "length": 0, "has_reth": 1, "va": rec["va"], "rkey": ctx["rkey"],
            "dma_len": rec["length"], "has_imm": 0, "imm": 0, "last": 1,
            "src": WrSource.USER.value, "peer_ip": ctx["peer_ip"],
            "udp_sport": ctx["udp_sport"], "dscp": ctx["dscp"], "ecn": ctx["ecn"]}


def fields(view):
    return {f: (v.value if isinstance(v := getattr(view, f), enum.Enum) else int(v))
            for f in PACKET_DESC.members}


class WithTable(Elaboratable):
    """The block with a context table on its ``ctx_qp`` / ``ctx`` port: read combinationally
    (``comb``) or one cycle after the address."""

    def __init__(self, dut, contexts, comb):
        self.dut, self.contexts, self.comb = dut, contexts, comb

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut
        mem = m.submodules.contexts = Memory(shape=QP_CONTEXT, depth=len(self.contexts),
                                             init=self.contexts)
        rd = mem.read_port(domain="comb" if self.comb else "sync")
        m.d.comb += [rd.addr.eq(dut.ctx_qp), dut.ctx.eq(rd.data)]
        return m


def simulate(dut, contexts, comb, feed, ready, *, drain=True, setup=None):
    """Run with ``feed`` (per cycle: a record or None) on ``i`` and ``ready(cycle)`` on
    ``o.ready``; returns the descriptors taken, the records the block signalled dropped and
    the count of stale pulses. Checks on the way that ``o`` holds its offer until taken."""
    got, dropped, stale = [], [], [0]

    async def bench(ctx):
        if setup is not None:
            await setup(ctx)
        held = None
        cycle = 0
        sent = [r for r in feed if r is not None and r["send"]]
        while cycle < len(feed) or (drain and len(got) + len(dropped) + stale[0] < len(sent)):
            rec = feed[cycle] if cycle < len(feed) else None
            ctx.set(dut.i.valid, rec is not None)
            if rec is not None:
                ctx.set(dut.i.payload, rec)
            r = ready(cycle)
            ctx.set(dut.o.ready, r)
            if ctx.get(dut.dropped):
                assert rec is not None and rec["send"], "dropped without a record to drop"
                dropped.append(rec)
            stale[0] += ctx.get(dut.stale)
            valid = ctx.get(dut.o.valid)
            if held is not None:
                assert valid and fields(ctx.get(dut.o.payload)) == held, "offer not held"
            held = None
            if valid:
                d = fields(ctx.get(dut.o.payload))
                if r:
                    got.append(d)
                else:
                    held = d
            cycle += 1
            await ctx.tick()

    run_sim(WithTable(dut, contexts, comb), testbenches=[bench])
    return got, dropped, stale[0]


@pytest.mark.parametrize("num_qps,depth,comb,seed", [
    (4, 16, False, 1), (4, 2, True, 2), (256, 4, False, 3), (1, 8, True, 4), (7, 2, False, 5)])
def test_random_reissues(num_qps, depth, comb, seed):
    rng = random.Random(seed)
    states = [QpState.RTS] * 4 + [QpState.ERROR, QpState.RESET, QpState.RTR, QpState.INIT]
    contexts = [context(rng, rng.choice(states)) for _ in range(num_qps)]
    contexts[0]["state"] = QpState.RTS
    feed = [record(rng, num_qps, int(rng.random() < 0.75), outside=0.05)
            if rng.random() < 0.6 else None
            for _ in range(700)]
    bp = [rng.random() < 0.5 for _ in range(5000)]
    dut = ReadResend(num_qps, depth)
    got, dropped, stale = simulate(dut, contexts, comb, feed, lambda c: not bp[c % len(bp)])

    # every record with send, in order, but those dropped and those whose QP is not in RTS
    taken = [r for r in feed if r is not None and r["send"] and
             not any(r is d for d in dropped)]
    live = [r for r in taken if r["qp"] < num_qps and contexts[r["qp"]]["state"] == QpState.RTS]
    assert stale == len(taken) - len(live)
    assert len(got) == len(live)
    for r, d in zip(live, got):
        assert d == expected(r, contexts[r["qp"]])
    assert live, "no request was ever sent"
    assert stale, "no stale record was ever discarded"
    if depth == 2:
        assert dropped, "a queue of 2 under backpressure never overflowed"


def test_atomic_reissues():
    """An atomic asked for again is its request whole: FETCH_ADD or COMPARE_SWAP, no RETH, the
    16 bytes of operands at ``local_addr`` as its payload; a user's with ``src`` USER (the
    operands read from memory again), the traffic generator's (``gen``) with ``src`` GENERATOR
    and the generator's ``imm`` (the packet builder makes the operands again from it and the
    ``wr_id``, as the first time)."""
    rng = random.Random(9)
    contexts = [context(rng, QpState.RTS) for _ in range(2)]
    feed = []
    for n in range(40):
        atomic = rng.choice([AtomicOp.FETCH_ADD, AtomicOp.COMPARE_SWAP])
        feed += [dict(record(rng, 2, 1), atomic=atomic.value, local_addr=rng.getrandbits(32),
                      gen=n % 2), None]
    dut = ReadResend(2, 16)

    async def imm(ctx):
        ctx.set(dut.gen_imm, 0x1234_5678)
    got, dropped, stale = simulate(dut, contexts, False, feed, lambda c: True, setup=imm)
    assert not dropped and not stale and len(got) == 40
    for r, d in zip([r for r in feed if r], got):
        want = expected(r, contexts[r["qp"]])
        want.update(opcode=0x14 if r["atomic"] == AtomicOp.FETCH_ADD.value else 0x13,
                    has_reth=0, dma_len=0, local_addr=r["local_addr"], length=16)
        if r["gen"]:
            want.update(src=WrSource.GENERATOR.value, imm=0x1234_5678)
        assert d == want


@pytest.mark.parametrize("depth", [2, 16])
def test_queue_full(depth):
    """With ``o`` held: a first record waits in the output register, the next ``depth`` fill
    the queue and every one after is dropped; all those kept leave in order once ``o`` takes
    them."""
    rng = random.Random(depth)
    contexts = [context(rng, QpState.RTS) for _ in range(3)]
    extra = 5
    first = record(rng, 3, 1)
    burst = [record(rng, 3, 1) for _ in range(depth + extra)]
    # (send-0 records in the burst: ignored, never dropped)
    ignored = [dict(record(rng, 3, 0), qp=1) for _ in range(3)]
    feed = [first] + [None] * 10 + burst[:2] + ignored + burst[2:] + [None] * 10
    release = len(feed)
    dut = ReadResend(3, depth)
    got, dropped, stale = simulate(dut, contexts, False, feed, lambda c: c >= release)
    assert stale == 0
    assert [d["wr_id"] for d in dropped] == [r["wr_id"] for r in burst[depth:]]
    kept = [first] + burst[:depth]
    assert got == [expected(r, contexts[r["qp"]]) for r in kept]


def test_latency():
    """A lone record's descriptor is offered 3 cycles after it is taken (sync context read)."""
    rng = random.Random(9)
    contexts = [context(rng, QpState.RTS)]
    dut = ReadResend(1)
    seen = []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.payload, record(rng, 1, 1))
        ctx.set(dut.i.valid, 1)
        await ctx.tick()
        ctx.set(dut.i.valid, 0)
        for cycle in range(1, 10):
            if ctx.get(dut.o.valid):
                seen.append(cycle)
            await ctx.tick()

    run_sim(WithTable(dut, contexts, False), testbenches=[bench])
    assert seen == [3]


def test_parameters():
    raises(ValueError, "num_qps", lambda: ReadResend(0))
    raises(ValueError, "num_qps", lambda: ReadResend(257))
    raises(TypeError, "num_qps", lambda: ReadResend(2.0))
    for bad in (0, 1, 3, 12, 512):
        raises(ValueError, "depth", lambda bad=bad: ReadResend(4, bad))
    for bad in (4.0, True, "16"):
        raises(TypeError, "depth", lambda bad=bad: ReadResend(4, bad))
    assert inspect.signature(ReadResend).parameters["depth"].default == 16
