"""ReadFlush: the QPs whose READs are void (an error state entered, a RESET), each offered once
per request, lowest first, under random backpressure; compared with a plain set of pending QPs."""

import random

import pytest

from rocegen.gateware.roce.layouts import SchedKind
from rocegen.gateware.roce.read.read_flush import ReadFlush
from rocegen.sim.testing.harness import raises, run_sim


@pytest.mark.parametrize("num_qps,seed", [(1, 1), (4, 2), (8, 3), (256, 4)])
def test_flush_requests(num_qps, seed):
    rng = random.Random(seed)
    dut = ReadFlush(num_qps)
    cycles = 600
    flushed = []

    async def bench(ctx):
        pend = set()                    # the QPs the reference holds pending
        errored = 0
        for _ in range(cycles):
            # this cycle's requests: a rising error bit or a RESET event (another kind of event
            # or a falling bit asks for nothing)
            new_err = errored
            if rng.random() < 0.2:
                new_err ^= 1 << rng.randrange(num_qps)
            kind = rng.choice([None, None, SchedKind.RESET, SchedKind.REWIND, SchedKind.ADVANCE])
            ev_qp = rng.randrange(num_qps)
            ctx.set(dut.errored, new_err)
            ctx.set(dut.sched.valid, kind is not None)
            ctx.set(dut.sched.payload, {"qp": ev_qp, "kind": kind or SchedKind.ADVANCE})
            ready = rng.random() < 0.6
            ctx.set(dut.o.ready, ready)
            # what is offered now comes from the requests of earlier cycles
            valid, qp = ctx.get(dut.o.valid), ctx.get(dut.o.payload)
            assert valid == bool(pend)
            if pend:
                assert qp == min(pend)
                if ready:
                    flushed.append(qp)
                    pend.discard(qp)
            asked = {q for q in range(num_qps) if (new_err >> q) & 1 and not (errored >> q) & 1}
            if kind == SchedKind.RESET:
                asked.add(ev_qp)
            pend |= asked
            errored = new_err
            await ctx.tick()

    run_sim(dut, testbenches=[bench])
    assert flushed, "no flush was ever offered"


def test_parameters():
    raises(ValueError, "num_qps", lambda: ReadFlush(0))
    raises(TypeError, "num_qps", lambda: ReadFlush(2.0))
