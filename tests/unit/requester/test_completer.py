"""The completion tracker against its reference model (:mod:`rocegen.sim.models.requester.completer`):
random posts and acknowledgements over several QPs (PSN wrap, coalesced, duplicate and stale
ACKs, NAKs, error statuses, full queues, QPs set up again), with random backpressure on ``cpl``,
plus exact latency, throughput and ``full`` timing."""

import random

import pytest

from rocegen.gateware.roce.layouts import CplStatus, WrSource
from rocegen.gateware.roce.requester.completer import BAD_DEPTH, OUT_DEPTH, Completer
from rocegen.sim.models.requester import completer as model_mod
from rocegen.sim.models.requester.completer import COUNTERS, CompleterModel
from rocegen.sim.testing.harness import raises, run_sim

PSN_MOD = 1 << 24
ERROR_STATUSES = [CplStatus.QP_NOT_READY, CplStatus.LOCAL_ALIGN, CplStatus.LOCAL_LENGTH]


def as_int(v):
    return v.value if hasattr(v, "value") else int(v)


def cpl_tuple(payload):
    return (payload.wr_id, payload.qp, as_int(payload.status), as_int(payload.src))


def test_model_constants_match_layouts():
    assert model_mod.STATUS_OK == CplStatus.OK.value
    assert model_mod.STATUS_BAD_QP == CplStatus.BAD_QP.value


def test_model_rules():
    m = CompleterModel(2, 4)
    m.post(1, 0, 0, 0, 0xFFFFFE)
    m.post(2, 0, 0, 2, 0xFFFFFE)                 # error status, waits behind 1
    m.post(3, 0, 0, 0, 3)                        # across the wrap
    assert m.completions == []
    m.ack(0, 0x1F, 0xFFFFFD)
    assert m.completions == []
    m.ack(0, 0x1F, 1)                            # coalesced, across the wrap
    assert [c[0] for c in m.completions] == [1, 2]
    assert m.ack(0, 0x1F, 0) == "acks" and m.counters["stale_acks"] == 1
    m.ack(0, 0x60, 4)                            # sequence NAK: 3 is acknowledged
    assert [c[0] for c in m.completions] == [1, 2, 3]
    m.post(4, 7, 2, 0, 9)                        # outside the table
    assert m.completions[-1] == (4, 7, model_mod.STATUS_BAD_QP, 2)
    m.post(5, 1, 0, 0, 100)
    m.ack(1, 0x21, 100)
    m.ack(1, 0x62, 100)
    assert m.counters == {"acks": 3, "stale_acks": 1, "seq_naks": 1, "rnr_naks": 1, "naks": 1}
    assert m.pending(1) == 1
    m.ack(1, 0x00, 100)
    assert m.pending(1) == 0
    m.post(6, 1, 0, 0, 50)                       # set up again, behind the acknowledged PSN
    assert m.pending(1) == 1 and m.acked[1] is None
    m.ack(1, 0x1F, 20)
    assert m.pending(1) == 1
    m.ack(1, 0x1F, 50)
    assert m.pending(1) == 0


class Gen:
    """Random traffic of a poster and a responder, consistent with what a requester sees."""

    def __init__(self, rng, num_qps):
        self.rng = rng
        self.num_qps = num_qps
        starts = [0, PSN_MOD - 20, rng.getrandbits(24), PSN_MOD - 3]
        self.next_psn = [starts[k % len(starts)] for k in range(num_qps)]
        self.hist = [[] for _ in range(num_qps)]

    def post(self, qp):
        rng = self.rng
        if rng.random() < 0.82:
            n = rng.randint(1, 6)
            last = (self.next_psn[qp] + n - 1) % PSN_MOD
            self.next_psn[qp] = (self.next_psn[qp] + n) % PSN_MOD
            self.hist[qp] = (self.hist[qp] + [last])[-12:]
            return CplStatus.OK, last
        return rng.choice(ERROR_STATUSES), (self.next_psn[qp] - 1) % PSN_MOD

    def ack(self, qp):
        rng = self.rng
        top = (self.next_psn[qp] - 1) % PSN_MOD
        hist = self.hist[qp]
        r = rng.random()
        if hist and r < 0.45:
            psn = rng.choice(hist)                                  # exact, maybe duplicate
        elif hist and r < 0.65:
            psn = (hist[0] + rng.randint(0, (top - hist[0]) % PSN_MOD)) % PSN_MOD   # coalesced
        elif r < 0.8:
            psn = top
        else:
            psn = (top - rng.randint(20, 1 << 22)) % PSN_MOD        # stale
        r = rng.random()
        if r < 0.7:
            syndrome = rng.choice([0x1F, rng.randint(0, 0x1F)])
        elif r < 0.8:
            syndrome = 0x60
            psn = (psn + 1) % PSN_MOD
        elif r < 0.88:
            syndrome = 0x20 | rng.getrandbits(5)
        elif r < 0.96:
            syndrome = rng.randint(0x61, 0x64)
        else:
            syndrome = rng.choice([rng.randint(0x40, 0x5F), rng.randint(0x80, 0xFF),
                                   rng.randint(0x65, 0x7F)])
        return syndrome, psn

    def reconnect(self, qp):
        self.next_psn[qp] = (self.next_psn[qp] - self.rng.randint(1, 1 << 22)) % PSN_MOD
        self.hist[qp] = []


@pytest.mark.parametrize("num_qps,depth,cycles,seed", [
    (5, 4, 2500, 1),
    (1, 2, 1200, 2),
    (3, 16, 2000, 3),
    (17, 8, 2000, 4),
    (256, 1, 1500, 5),
])
def test_against_model(num_qps, depth, cycles, seed):
    rng = random.Random(seed)
    dut = Completer(num_qps, depth)
    model = CompleterModel(num_qps, depth)
    gen = Gen(rng, num_qps)
    received = []
    posted = [0] * num_qps
    counts = dict.fromkeys(COUNTERS, 0)
    state = {"done": False, "reconnects": 0, "full_seen": 0, "stall_overflow": 0}

    received_count = [0] * 256

    def received_of(q):
        return received_count[q]

    async def collector(ctx):
        cycle = 0
        while True:
            # a long stall first, then random backpressure, heavy and light in turn
            if cycle < 300:
                ready = 0
            else:
                ready = int(rng.random() >= (0.6 if (cycle // 500) % 2 else 0.1))
            ctx.set(dut.cpl.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.cpl.valid, dut.cpl.payload)
            cycle += 1
            if valid and ready:
                received.append(cpl_tuple(payload))
                received_count[payload.qp] += 1

    async def driver(ctx):
        wr_id = 0
        for cycle in range(cycles):
            full = ctx.get(dut.full)
            for q in range(num_qps):
                pending = posted[q] - received_of(q)
                if (full >> q) & 1:
                    state["full_seen"] += 1
                    assert pending >= depth, f"QP {q} full with {pending} pending"
                else:
                    assert pending <= depth - 1 + OUT_DEPTH + 1, f"QP {q}: {pending} pending"
            post = None
            quiet = cycle % 400 >= 320          # no posts for a while: queues drain
            if not quiet and rng.random() < 0.55:
                if num_qps < 256 and rng.random() < 0.05:
                    if not ctx.get(dut.bad_full):
                        post = (wr_id, rng.randint(num_qps, 255), rng.getrandbits(2) % 3,
                                CplStatus.BAD_QP, rng.getrandbits(24))
                else:
                    q = rng.randrange(num_qps)
                    if not (full >> q) & 1:
                        status, last = gen.post(q)
                        post = (wr_id, q, rng.choice(list(WrSource)).value, status, last)
            ack = None
            if rng.random() < 0.35:
                q = rng.randrange(num_qps)
                ack = (q, *gen.ack(q))
            elif num_qps < 256 and rng.random() < 0.02:
                ack = (rng.randint(num_qps, 255), 0x1F, rng.getrandbits(24))   # ignored
            # a QP with nothing outstanding may be set up again with new PSNs
            if rng.random() < (0.2 if quiet else 0.01):
                q = rng.randrange(num_qps)
                if posted[q] == received_of(q) and not (post and post[1] == q):
                    gen.reconnect(q)
                    state["reconnects"] += 1
            if post:
                ctx.set(dut.post.payload, {"wr_id": post[0], "qp": post[1], "src": WrSource(post[2]),
                                           "status": post[3], "last_psn": post[4]})
                wr_id += 1
            ctx.set(dut.post.valid, post is not None)
            if ack:
                ctx.set(dut.ack.payload, {"qp": ack[0], "syndrome": ack[1], "psn": ack[2],
                                          "msn": rng.getrandbits(24)})
            ctx.set(dut.ack.valid, ack is not None)
            sampled = await ctx.tick().sample(dut.post.ready, dut.ack.ready, dut.overflow,
                                              *(getattr(dut, c) for c in COUNTERS))
            post_ready, ack_ready, overflow, *pulses = sampled[2:]
            assert post_ready and ack_ready and not overflow
            for c, v in zip(COUNTERS, pulses):
                counts[c] += v
            if post:
                model.post(post[0], post[1], post[2], post[3].value, post[4])
                if post[1] < num_qps:
                    posted[post[1]] += 1
            # an acknowledgement is applied in the cycle it arrives, after that cycle's post
            if ack and ack[0] < num_qps:
                model.ack(*ack)
        ctx.set(dut.post.valid, 0)
        ctx.set(dut.ack.valid, 0)
        sampled = await ctx.tick().sample(*(getattr(dut, c) for c in COUNTERS))
        for c, v in zip(COUNTERS, sampled[2:]):
            counts[c] += v
        # drain: everything the model completed must come out, and nothing else
        for _ in range(20 * len(model.completions) + 400):
            if len(received) >= len(model.completions) and not ctx.get(dut.busy):
                break
            await ctx.tick()
        for _ in range(50):
            await ctx.tick()
        state["done"] = True

    run_sim(dut, testbenches=[driver], processes=[collector])
    assert state["done"]
    assert counts == model.counters
    for q in range(num_qps):
        assert [c for c in received if c[1] == q] == model.per_qp(q), f"QP {q}"
    assert [c for c in received if c[1] >= num_qps] == \
        [c for c in model.completions if c[1] >= num_qps]
    assert len(received) == len(model.completions)
    # the traffic reached the interesting corners
    assert state["full_seen"] > 0
    assert model.counters["stale_acks"] > 0 and model.counters["seq_naks"] > 0
    assert any(c[2] != 0 for c in received) and any(c[2] == 0 for c in received)
    assert state["reconnects"] > 0 and model.forgets > 0


def _bench(dut, body):
    """Run ``body(ctx, step)``; ``step(post=None, ack=None)`` drives one cycle with
    ``cpl.ready`` high and returns the completions taken in it (with the cycle number)."""
    log = []
    cycle = [0]

    async def step(ctx, post=None, ack=None):
        ctx.set(dut.cpl.ready, 1)
        if post:
            ctx.set(dut.post.payload, {"src": WrSource.USER, **post})
        ctx.set(dut.post.valid, post is not None)
        if ack:
            ctx.set(dut.ack.payload, ack)
        ctx.set(dut.ack.valid, ack is not None)
        _, _, valid, payload, full = await ctx.tick().sample(dut.cpl.valid, dut.cpl.payload,
                                                              dut.full)
        cycle[0] += 1
        if valid:
            log.append((cycle[0], cpl_tuple(payload)))
        return full

    async def tb(ctx):
        await body(ctx, step, cycle)

    run_sim(dut, testbenches=[tb])
    return log


@pytest.mark.parametrize("gap", [None, 0, 1, 2, 3])
def test_a_forgotten_psn_never_completes_a_request(gap):
    """A QP set up again: its first post is covered by the acknowledged PSN of its old
    connection, which it forgets; the new connection's first acknowledgement (with the post,
    ``None``, or ``gap`` cycles behind it: so also in the cycle the scan picks the QP's entry)
    must not let the old PSN complete it. It completes once an acknowledgement covers it."""
    dut = Completer(2, 4)
    marks = {}
    ack = {"qp": 0, "syndrome": 0x1F, "msn": 0}

    async def body(ctx, step, cycle):
        await step(ctx, ack={**ack, "psn": 100})
        for _ in range(3):
            await step(ctx)
        post = {"wr_id": 1, "qp": 0, "status": CplStatus.OK, "last_psn": 90}
        if gap is None:
            await step(ctx, post=post, ack={**ack, "psn": 5})
        else:
            await step(ctx, post=post)
            for _ in range(gap):
                await step(ctx)
            await step(ctx, ack={**ack, "psn": 5})
        for _ in range(8):
            await step(ctx)
        marks["covering"] = cycle[0]
        await step(ctx, ack={**ack, "psn": 90})
        for _ in range(8):
            await step(ctx)

    log = _bench(dut, body)
    assert [c for _, c in log] == [(1, 0, CplStatus.OK.value, 0)]
    assert log[0][0] > marks["covering"]


def test_latency_full_and_single_qp_rate():
    dut = Completer(2, 4)
    marks = {}

    async def body(ctx, step, cycle):
        fulls = []
        for k in range(4):
            fulls.append(await step(ctx, post={"wr_id": k, "qp": 0, "status": CplStatus.OK,
                                                "last_psn": 10 + k}))
        fulls.append(await step(ctx))
        # full rises in the cycle after the fourth post
        assert [f & 1 for f in fulls] == [0, 0, 0, 0, 1]
        for _ in range(4):
            await step(ctx)
        await step(ctx, post={"wr_id": 99, "qp": 200, "status": CplStatus.BAD_QP, "last_psn": 0})
        marks["bad"] = cycle[0]
        for _ in range(4):
            await step(ctx)
        await step(ctx, ack={"qp": 0, "syndrome": 0x1F, "psn": 13, "msn": 1})
        marks["ack"] = cycle[0]
        full_after = []
        for _ in range(12):
            full_after.append(await step(ctx) & 1)
        assert full_after[-1] == 0
        # a non-OK post to an empty queue completes as fast as an acknowledgement
        await step(ctx, post={"wr_id": 7, "qp": 1, "status": CplStatus.LOCAL_ALIGN,
                              "last_psn": 0})
        marks["err"] = cycle[0]
        for _ in range(6):
            await step(ctx)

    log = _bench(dut, body)
    at = {c[0]: cyc for cyc, c in log}
    assert at[99] - marks["bad"] == 2
    assert at[0] - marks["ack"] == 3
    assert [at[k] - at[0] for k in range(4)] == [0, 2, 4, 6]      # one every two cycles
    assert at[7] - marks["err"] == 3
    assert [c for _, c in log] == [
        (99, 200, CplStatus.BAD_QP.value, 0), *((k, 0, 0, 0) for k in range(4)),
        (7, 1, CplStatus.LOCAL_ALIGN.value, 0)]


def test_deep_queue_and_bad_qp_queue():
    """A QP's queue of 128 entries (more than 64) fills at its 128th post, and one ACK completes
    them all, in order; the queue of bad-QP completions keeps :data:`BAD_DEPTH` entries whatever
    ``depth`` is (with ``cpl`` held, ``bad_full`` rises once it and the output FIFO hold theirs)."""
    depth = 128
    dut = Completer(1, depth)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.cpl.ready, 0)
        ctx.set(dut.post.valid, 1)
        fulls = []
        for k in range(depth):
            ctx.set(dut.post.payload, {"wr_id": k, "qp": 0, "src": WrSource.USER,
                                       "status": CplStatus.OK, "last_psn": k})
            await ctx.tick()
            fulls.append(ctx.get(dut.full))
        ctx.set(dut.post.valid, 0)
        seen["fulls"] = fulls
        taken = 0                   # bad-QP posts before bad_full
        while not ctx.get(dut.bad_full):
            ctx.set(dut.post.payload, {"wr_id": 1000 + taken, "qp": 3, "src": WrSource.USER,
                                       "status": CplStatus.BAD_QP, "last_psn": 0})
            ctx.set(dut.post.valid, 1)
            assert not ctx.get(dut.overflow)    # (taken at the coming edge)
            await ctx.tick()
            taken += 1
            assert taken <= 2 * BAD_DEPTH
        ctx.set(dut.post.valid, 0)
        seen["bad"] = taken
        ctx.set(dut.ack.payload, {"qp": 0, "syndrome": 0x1F, "psn": depth - 1, "msn": 1})
        ctx.set(dut.ack.valid, 1)
        await ctx.tick()
        ctx.set(dut.ack.valid, 0)
        ctx.set(dut.cpl.ready, 1)
        got = []
        for _ in range(4 * depth + 4 * BAD_DEPTH):
            if ctx.get(dut.cpl.valid):      # (taken at the coming edge)
                got.append(ctx.get(dut.cpl.payload.wr_id))
            await ctx.tick()
        seen["got"] = got
        seen["full_end"] = ctx.get(dut.full)

    run_sim(dut, testbenches=[tb])
    assert seen["fulls"] == [0] * (depth - 1) + [1]
    assert BAD_DEPTH <= seen["bad"] <= BAD_DEPTH + OUT_DEPTH
    assert sorted(seen["got"]) == sorted(list(range(depth)) + [1000 + k for k in range(seen["bad"])])
    assert [w for w in seen["got"] if w < depth] == list(range(depth))
    assert seen["full_end"] == 0


def test_one_completion_per_cycle_over_qps():
    n = 8
    dut = Completer(n, 4)

    async def body(ctx, step, cycle):
        for k in range(4 * n):
            await step(ctx, post={"wr_id": k, "qp": k % n, "status": CplStatus.OK,
                                  "last_psn": 100 + k // n})
        for q in range(n):
            await step(ctx, ack={"qp": q, "syndrome": 0x1F, "psn": 103, "msn": 0})
        for _ in range(50):
            await step(ctx)

    log = _bench(dut, body)
    cycles = [cyc for cyc, _ in log]
    assert len(cycles) == 4 * n
    # after the first few, completions leave back to back
    assert cycles[-1] - cycles[0] <= 4 * n + 3
    gaps = [b - a for a, b in zip(cycles, cycles[1:])]
    assert sum(g == 1 for g in gaps) >= 3 * n


def test_parameters_are_validated():
    raises(ValueError, "power of two from 1 to 1024, not 12", lambda: Completer(4, 12))
    raises(ValueError, "power of two from 1 to 1024, not 0", lambda: Completer(4, 0))
    raises(ValueError, "power of two from 1 to 1024, not 2048", lambda: Completer(4, 2048))
    raises(ValueError, r"num_qps must be 1\.\.256, not 0", lambda: Completer(0))
    raises(ValueError, r"num_qps must be 1\.\.256, not 257", lambda: Completer(257))
    raises(TypeError, "num_qps must be an integer", lambda: Completer(4.0))
    raises(TypeError, "depth must be an integer", lambda: Completer(4, depth=True))
