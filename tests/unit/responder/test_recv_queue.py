"""The responder's receive queues (:class:`RecvQueue`) against a model of one deque per QP:
random posts (some to full queues, some to QPs outside the table), reads, pops and flushes of
several QPs at once, with backpressure on the flushed completions; and a flush that ends where
it was asked for while buffers keep coming."""

import collections
import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.responder.recv_queue import RecvQueue
from rocegen.gateware.roce.responder.resp_layouts import RecvStatus
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim

FIELDS = ("wr_id", "addr", "length")


def _flushed(qp, buf):
    return {"qp": qp, "wr_id": buf["wr_id"], "opcode": 0, "status": RecvStatus.FLUSHED.value,
            "length": 0, "has_imm": 0, "imm": 0}


@pytest.mark.parametrize("num_qps, depth, seed", [(4, 4, 1), (3, 2, 2), (8, 16, 3), (1, 1, 4)])
def test_against_model(num_qps, depth, seed):
    rng = random.Random(seed)
    dut = RecvQueue(num_qps, depth)
    model = [collections.deque() for _ in range(num_qps)]
    owed = [0] * num_qps             # the first buffers of each QP that its flush completes
    counts = collections.Counter()

    async def tb(ctx):
        for cycle in range(3000 + 400):
            settle = cycle >= 3000   # the last cycles: no new flush, completions always taken
            post = None
            if rng.random() < 0.5:
                post = dict(qp=rng.randrange(num_qps + 1), wr_id=rng.getrandbits(32),
                            addr=rng.getrandbits(32), length=rng.getrandbits(32))
                ctx.set(dut.post.payload, post)
            ctx.set(dut.post.valid, post is not None)
            flushing = ctx.get(dut.flushing)
            qp = rng.randrange(num_qps)
            ctx.set(dut.rd_qp, qp)
            # a pop of a QP whose buffers may be taken (the engine pops a buffer it read)
            pop = rng.randrange(num_qps)
            do_pop = bool(model[pop]) and not owed[pop] and not flushing >> pop & 1 and \
                rng.random() < 0.4
            ctx.set(dut.pop.valid, do_pop)
            ctx.set(dut.pop.payload, pop)
            fq = rng.randrange(num_qps)
            want_flush = not settle and rng.random() < 0.04 and not (do_pop and pop == fq)
            ctx.set(dut.flush.valid, want_flush)
            ctx.set(dut.flush.payload, fq)
            ctx.set(dut.flushed.ready, settle or rng.random() < 0.6)
            blocked = bool(flushing >> qp & 1) or (want_flush and fq == qp)
            fl_valid, fl_ready = ctx.get(dut.flushed.valid), ctx.get(dut.flushed.ready)
            fl = meta_dict(ctx.get(dut.flushed.payload))
            if post is not None:
                # (the slot of a completion on offer is free already)
                in_table = post["qp"] < num_qps
                held = in_table and len(model[post["qp"]]) - \
                    (fl_valid and fl["qp"] == post["qp"])
                assert ctx.get(dut.post.ready) == (not in_table or held < depth)
                assert ctx.get(dut.rejected) == (not in_table)
            for q in range(num_qps):          # a QP owed completions is flushing
                assert not owed[q] or flushing >> q & 1, (cycle, q)
            post_ready = ctx.get(dut.post.ready)
            want = bool(model[qp]) and not blocked
            head = {"qp": qp, **model[qp][0]} if model[qp] else None
            await ctx.tick()
            # the read's answer one cycle later
            assert ctx.get(dut.head_valid) == want, (cycle, qp)
            if want:
                assert meta_dict(ctx.get(dut.head)) == head, cycle
            if fl_valid and fl_ready:
                q = fl["qp"]
                assert owed[q] > 0, (cycle, fl)
                assert fl == _flushed(q, model[q].popleft()), cycle
                owed[q] -= 1
                counts["flushed"] += 1
            if do_pop:
                model[pop].popleft()
                counts["pop"] += 1
            if want_flush:
                owed[fq] = len(model[fq])     # the buffers it has now (a merge included)
                counts["flush"] += 1
                counts["busy"] += any(owed[q] for q in range(num_qps) if q != fq)
            if post is not None and post["qp"] < num_qps and post_ready:
                model[post["qp"]].append({k: post[k] for k in FIELDS})
                counts["post"] += 1
        ctx.set(dut.post.valid, 0)
        ctx.set(dut.flush.valid, 0)
        await ctx.tick().repeat(4)
        assert owed == [0] * num_qps and ctx.get(dut.flushing) == 0

    run_sim(dut, testbenches=[tb])
    assert counts["post"] > 300 and counts["pop"] > 100 and counts["flush"] >= 20, counts
    assert counts["flushed"] > 10, counts
    if num_qps > 1:
        assert counts["busy"] >= 2, counts        # flushes of two QPs waited at once


@pytest.mark.parametrize("depth", [4, 16])
def test_flush_is_bounded(depth):
    """A QP's queue full when its flush is asked for, and a buffer posted to it again for every
    flushed completion (the way a user design that re-posts on every completion behaves): the
    flush completes exactly the buffers it found, in order, the QP's buffers may then be taken
    again, and the first is the first posted after the request. Meanwhile another QP's buffers
    are posted, read and popped every cycle."""
    dut = RecvQueue(4, depth)
    first = [{"qp": 2, "wr_id": 0x100 + k, "addr": 0x1000 * k, "length": 64} for k in range(depth)]

    async def tb(ctx):
        async def post(buf):
            ctx.set(dut.post.payload, buf)
            ctx.set(dut.post.valid, 1)
            await ctx.tick()
            ctx.set(dut.post.valid, 0)

        for buf in first:
            await post(buf)
        ctx.set(dut.flush.payload, 2)
        ctx.set(dut.flush.valid, 1)
        ctx.set(dut.flushed.ready, 1)
        await ctx.tick()
        ctx.set(dut.flush.valid, 0)
        got, later, popped = [], [], 0
        cycles = 0
        # QP 1's queue turns over beside the flush: a pop every other cycle, posts between
        while ctx.get(dut.flushing) >> 2 & 1:
            assert cycles < 10 * depth + 20, "the flush does not end"
            if ctx.get(dut.flushed.valid):
                got.append(meta_dict(ctx.get(dut.flushed.payload)))
                # a buffer for QP 2 again, behind the flush
                later.append({"qp": 2, "wr_id": 0x900 + len(later), "addr": 0, "length": 32})
                ctx.set(dut.post.payload, later[-1])
            else:
                ctx.set(dut.post.payload, {"qp": 1, "wr_id": cycles, "addr": 0, "length": 8})
            ctx.set(dut.post.valid, 1)
            assert ctx.get(dut.post.ready) or not ctx.get(dut.flushed.valid)
            ctx.set(dut.rd_qp, 1)
            can_pop = cycles % 2 == 1 and ctx.get(dut.head_valid)
            ctx.set(dut.pop.valid, can_pop)
            ctx.set(dut.pop.payload, 1)
            popped += bool(can_pop)
            await ctx.tick()
            cycles += 1
        ctx.set(dut.post.valid, 0)
        ctx.set(dut.pop.valid, 0)
        assert got == [_flushed(2, b) for b in first]
        assert popped >= cycles // 2 - 2         # QP 1 was served all along
        ctx.set(dut.rd_qp, 2)
        await ctx.tick()
        assert ctx.get(dut.head_valid)
        assert meta_dict(ctx.get(dut.head)) == later[0]

    run_sim(dut, testbenches=[tb])


def test_parameters():
    raises(ValueError, "depth must be a power of two", lambda: RecvQueue(4, 3))
    raises(ValueError, "num_qps must be", lambda: RecvQueue(0, 4))
    Fragment.get(RecvQueue(256, 32), None)
