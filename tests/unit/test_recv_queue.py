"""The responder's receive queues (:class:`RecvQueue`) against a model of one deque per QP:
random posts (some to full queues, some to QPs outside the table), reads, pops and flushes,
with backpressure on the flushed completions."""

import collections
import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.recv_queue import RecvQueue
from rocegen.gateware.roce.resp_layouts import RecvStatus
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim


@pytest.mark.parametrize("num_qps, depth, seed", [(4, 4, 1), (3, 2, 2), (8, 16, 3), (1, 1, 4)])
def test_against_model(num_qps, depth, seed):
    rng = random.Random(seed)
    dut = RecvQueue(num_qps, depth)
    model = [collections.deque() for _ in range(num_qps)]
    counts = collections.Counter()

    async def tb(ctx):
        flushing = None          # (qp, buffers it must complete)
        flushed = []
        for cycle in range(3000):
            # a post (to any QP, some outside the table)
            post = None
            if rng.random() < 0.5:
                post = dict(qp=rng.randrange(num_qps + 1), wr_id=rng.getrandbits(32),
                            addr=rng.getrandbits(32), length=rng.getrandbits(32))
                if flushing is not None and post["qp"] == flushing[0]:
                    post = None          # (a post during its QP's flush may be flushed too)
            if post is not None:
                ctx.set(dut.post.payload, post)
            ctx.set(dut.post.valid, post is not None)
            # read one QP (not one being flushed, whose buffers leave one by one); pop one
            qp = rng.randrange(num_qps)
            if flushing is not None and qp == flushing[0]:
                qp = (qp + 1) % num_qps
            check_read = flushing is None or qp != flushing[0]
            ctx.set(dut.rd_qp, qp)
            pop = rng.randrange(num_qps)
            do_pop = bool(model[pop]) and rng.random() < 0.4 and \
                (flushing is None or flushing[0] != pop)
            ctx.set(dut.pop.valid, do_pop)
            ctx.set(dut.pop.payload, pop)
            fq = rng.randrange(num_qps)
            want_flush = flushing is None and rng.random() < 0.03 and \
                not (do_pop and pop == fq) and not (post and post["qp"] == fq)
            ctx.set(dut.flush.valid, want_flush)
            ctx.set(dut.flush.payload, fq)
            ctx.set(dut.flushed.ready, rng.random() < 0.6)
            if post is not None:
                in_table = post["qp"] < num_qps
                assert ctx.get(dut.post.ready) == (not in_table or
                                                   len(model[post["qp"]]) < depth)
                assert ctx.get(dut.rejected) == (not in_table)
            fl_valid, fl_ready = ctx.get(dut.flushed.valid), ctx.get(dut.flushed.ready)
            fl = meta_dict(ctx.get(dut.flushed.payload))
            flush_ready = ctx.get(dut.flush.ready)
            post_ready = ctx.get(dut.post.ready)
            await ctx.tick()
            # the read's answer one cycle later
            assert not check_read or ctx.get(dut.head_valid) == bool(model[qp]), (cycle, qp)
            if check_read and model[qp]:
                got = meta_dict(ctx.get(dut.head))
                assert got == {"qp": qp, **model[qp][0]}, cycle
            if fl_valid and fl_ready:
                assert flushing is not None
                flushed.append(fl)
            if do_pop:
                model[pop].popleft()
                counts["pop"] += 1
            if post is not None and post["qp"] < num_qps and post_ready:
                model[post["qp"]].append({k: post[k] for k in ("wr_id", "addr", "length")})
                counts["post"] += 1
            if want_flush and flush_ready:
                flushing = (fq, list(model[fq]))
                model[fq].clear()
                counts["flush"] += 1
            if flushing is not None and flush_ready and not want_flush and \
                    len(flushed) == len(flushing[1]):
                for f, buf in zip(flushed, flushing[1]):
                    assert f == {"qp": flushing[0], "wr_id": buf["wr_id"], "opcode": 0,
                                 "status": RecvStatus.FLUSHED.value, "length": 0,
                                 "has_imm": 0, "imm": 0}
                counts["flushed"] += len(flushed)
                flushing, flushed = None, []
        ctx.set(dut.post.valid, 0)

    run_sim(dut, testbenches=[tb])
    assert counts["post"] > 300 and counts["pop"] > 100 and counts["flush"] >= 3, counts


def test_parameters():
    raises(ValueError, "depth must be a power of two", lambda: RecvQueue(4, 3))
    raises(ValueError, "num_qps must be", lambda: RecvQueue(0, 4))
    Fragment.get(RecvQueue(256, 32), None)
