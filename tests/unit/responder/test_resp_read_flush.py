"""RespReadFlush: set-ups flush at once; fatal NAKs and closes, at random cycles and QPs (several
in one cycle, far more often than a responder makes them), each flush their QP within a few
cycles unless a set-up of the QP came first, and nothing else is flushed."""

import random

import pytest

from rocegen.gateware.roce.responder.resp_read_flush import RespReadFlush
from rocegen.sim.testing.harness import run_sim


@pytest.mark.parametrize("num_qps, seed", [(8, 1), (3, 2), (1, 3)])
def test_flushes(num_qps, seed):
    rng = random.Random(seed)
    dut = RespReadFlush(num_qps)
    owed = {}                       # QP -> cycle from which an error or close is owed

    async def tb(ctx):
        for cycle in range(600):
            s = rng.random() < 0.15
            e = rng.random() < 0.15
            c = rng.random() < 0.15
            sq, eq, cq = (rng.randrange(num_qps) for _ in range(3))
            for port, on, qp in ((dut.setup, s, sq), (dut.error, e, eq), (dut.close, c, cq)):
                ctx.set(port.valid, on)
                ctx.set(port.payload, qp)
            valid, qp = ctx.get(dut.o.valid), ctx.get(dut.o.payload)
            if s:
                assert (valid, qp) == (1, sq)           # a set-up at once
                owed.pop(sq, None)
            elif valid:
                assert qp in owed, (cycle, qp)
                del owed[qp]
            for on, q in ((e, eq), (c, cq)):
                if on:
                    owed.setdefault(q, cycle)
            for q, since in owed.items():
                assert cycle - since < 30, (q, since, cycle)
            await ctx.tick()
        for port in (dut.setup, dut.error, dut.close):
            ctx.set(port.valid, 0)
        for _ in range(num_qps + 2):
            if ctx.get(dut.o.valid):
                owed.pop(ctx.get(dut.o.payload))
            await ctx.tick()
        assert not owed

    run_sim(dut, testbenches=[tb])
