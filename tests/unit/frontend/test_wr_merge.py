"""The work-request merge (:class:`WrMerge`): requests of the three sources, with idle cycles,
queues that fill and drain, backpressure on requests that name no QP and a toggling
``bad_full``, all reach ``o`` tagged by source, each source's in its own order; the slice never
offers a request whose QP's queue is full, a request that names no QP never leaves while
``bad_full`` is high, and a QP whose queue stays full holds no other source."""

import random

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.frontend.wr_merge import WrMerge
from rocegen.gateware.roce.layouts import WORK_REQUEST, WR_TAGGED, WrSource
from rocegen.sim.testing.harness import raises, run_sim

WR_BITS = Shape.cast(WORK_REQUEST).width
QP = WORK_REQUEST["qp"]


def with_qp(wr_bits, qp):
    """The request ``wr_bits`` with its QP field set to ``qp``."""
    mask = (1 << Shape.cast(QP.shape).width) - 1 << QP.offset
    return wr_bits & ~mask | qp << QP.offset


def source(port, requests, rng, idle, tag):
    async def run(ctx):
        for wr_bits, qp in requests:
            while rng.random() < idle:
                ctx.set(port.valid, 0)
                await ctx.tick()
            wr = port.payload if tag is None else port.payload.wr
            ctx.set(wr.as_value(), wr_bits)
            ctx.set(wr.qp, qp)
            if tag is not None:
                ctx.set(port.payload.src, tag)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
    return run


class QueueRoom:
    """The scheduler's per-QP queues as :class:`WrMerge` sees them: ``depth`` slots per QP, a
    request queued when ``o`` fires, slots freed at random (never those of the QPs in
    ``stuck``). ``room`` / ``room_next`` as the scheduler states them: room for a request now,
    and for one more after a request of the QP is queued now."""

    def __init__(self, num_qps, depth, rng, free_rate, stuck=()):
        self.used = [0] * num_qps
        self.depth, self.rng, self.free_rate, self.stuck = depth, rng, free_rate, set(stuck)

    def vectors(self):
        room = sum(1 << q for q, u in enumerate(self.used) if u < self.depth)
        room_next = sum(1 << q for q, u in enumerate(self.used) if u < self.depth - 1)
        return room, room_next

    def step(self, pushed_qp):
        if pushed_qp is not None:
            assert self.used[pushed_qp] < self.depth, "a request was queued into a full queue"
            self.used[pushed_qp] += 1
        if self.rng.random() < self.free_rate:
            busy = [q for q, u in enumerate(self.used) if u and q not in self.stuck]
            if busy:
                self.used[self.rng.choice(busy)] -= 1


def scheduler(dut, num_qps, room, rng, bad_backpressure, got, stats, done):
    """The scheduler's side of ``o``: a request of a QP is taken when its queue has room (the
    slice must never offer one that has none), one naming no QP when the completion tracker's
    queue takes it (random) and ``bad_full`` is low (random). Runs until ``done`` is set."""
    async def run(ctx):
        while not done:
            rv, rn = room.vectors()
            ctx.set(dut.room, rv)
            ctx.set(dut.room_next, rn)
            bad_full = rng.random() < 0.5
            ctx.set(dut.bad_full, bad_full)
            valid = ctx.get(dut.o.valid)
            qp = ctx.get(dut.o.payload.wr.qp)
            if valid and qp < num_qps:
                assert rv >> qp & 1, f"the slice offers a request of QP {qp}, whose queue is full"
                ready = True
            else:
                ready = rng.random() >= bad_backpressure
            if valid and qp >= num_qps:
                assert not bad_full, "a request naming no QP left while bad_full was high"
                stats["bad_out"] += ready
            ctx.set(dut.o.ready, ready)
            if valid and ready:
                got[WrSource(ctx.get(dut.o.payload.src))].append(
                    (ctx.get(dut.o.payload.wr.as_value()), qp))
            await ctx.tick()
            room.step(qp if valid and ready and qp < num_qps else None)
    return run


@pytest.mark.parametrize("num_qps, depth, bad_backpressure, seed",
                         [(1, 1, 0.0, 1), (8, 2, 0.4, 2), (256, 4, 0.2, 3)])
def test_merge_against_model(num_qps, depth, bad_backpressure, seed):
    rng = random.Random(seed)
    dut = WrMerge(num_qps)
    n = 120
    qp_bits = len(dut.user.payload.qp)

    def requests():
        # mostly good QPs (few of them, so queues fill), some naming none (when the QP field
        # can say so)
        return [(rng.getrandbits(WR_BITS),
                 rng.randrange(min(num_qps, 4)) if rng.random() < 0.7 or num_qps == 1 << qp_bits
                 else rng.randrange(num_qps, 1 << qp_bits)) for _ in range(n)]

    sent = {WrSource.USER: requests(), WrSource.STREAM: requests(), WrSource.GENERATOR: requests()}
    got = {src: [] for src in sent}
    stats = {"bad_out": 0}
    room = QueueRoom(num_qps, depth, random.Random(seed + 40), 0.5)
    done = set()

    async def tb(ctx):
        while sum(map(len, got.values())) < 3 * n:
            await ctx.tick()
        await ctx.tick().repeat(10)
        done.add(True)

    srcs = [source(dut.user, sent[WrSource.USER], random.Random(seed + 10), 0.3, None),
            source(dut.front, sent[WrSource.STREAM], random.Random(seed + 20), 0.3,
                   WrSource.STREAM),
            source(dut.gen, sent[WrSource.GENERATOR], random.Random(seed + 30), 0.3,
                   WrSource.GENERATOR)]
    sink = scheduler(dut, num_qps, room, random.Random(seed + 50), bad_backpressure, got, stats, done)
    run_sim(dut, testbenches=[tb, sink], processes=srcs, deadline_cycles=50_000)
    for src in sent:
        assert [(with_qp(wr, qp), qp) for wr, qp in sent[src]] == got[src], src
    if num_qps < 1 << qp_bits:
        assert stats["bad_out"] > 10


@pytest.mark.parametrize("num_qps", [2, 256])
def test_a_full_queue_holds_only_its_own_source(num_qps):
    """QP 0's queue is full and never drains (its peer is gone, an RNR wait, retries): the
    generator's requests for it wait, and the front end's and the user's requests for QP 1 still
    pass, together one per cycle; once QP 0 drains, the generator's requests follow."""
    dut = WrMerge(num_qps)
    n = 100
    rng = random.Random(num_qps)
    sent = {WrSource.USER: [(rng.getrandbits(WR_BITS), 1) for _ in range(n)],
            WrSource.STREAM: [(rng.getrandbits(WR_BITS), 1) for _ in range(n)],
            WrSource.GENERATOR: [(rng.getrandbits(WR_BITS), 0) for _ in range(4)]}
    got = {src: [] for src in sent}
    # QP 0's queue full for good; QP 1's drains one slot a cycle
    room = QueueRoom(num_qps, 4, random.Random(5), 1.0, stuck={0})
    room.used[0] = 4
    cycles = {"n": 0}
    done = set()

    async def tb(ctx):
        while len(got[WrSource.USER]) + len(got[WrSource.STREAM]) < 2 * n:
            await ctx.tick()
            cycles["n"] += 1
        await ctx.tick().repeat(20)
        assert got[WrSource.GENERATOR] == [], "a request went into a full queue"
        room.stuck.clear()          # QP 0 drains: the generator's requests follow
        while len(got[WrSource.GENERATOR]) < 4:
            await ctx.tick()
        await ctx.tick().repeat(5)
        done.add(True)

    srcs = [source(dut.user, sent[WrSource.USER], random.Random(1), 0.0, None),
            source(dut.front, sent[WrSource.STREAM], random.Random(2), 0.0, WrSource.STREAM),
            source(dut.gen, sent[WrSource.GENERATOR], random.Random(3), 0.0,
                   WrSource.GENERATOR)]
    sink = scheduler(dut, num_qps, room, random.Random(4), 0.0, got, {"bad_out": 0}, done)
    run_sim(dut, testbenches=[tb, sink], processes=srcs, deadline_cycles=5_000)
    for src in sent:
        assert [(with_qp(wr, qp), qp) for wr, qp in sent[src]] == got[src], src
    assert cycles["n"] <= 2 * n + 4, f"{2 * n} requests of QP 1 took {cycles['n']} cycles"


def test_parameters():
    dut = WrMerge(4)
    assert dut.o.payload.shape() == WR_TAGGED and dut.user.payload.shape() == WORK_REQUEST
    Fragment.get(dut, None)
    raises(ValueError, "num_qps must be 1..256, not 0", lambda: WrMerge(0))
    raises(ValueError, "num_qps must be 1..256, not 257", lambda: WrMerge(257))
