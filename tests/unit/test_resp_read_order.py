"""RespReadOrder: a QP's answers wait for its READs in flight; a READ's first response waits for
the answer queue to empty and for the writes before it; set-ups clear a QP's count."""

import pytest

from rocegen.gateware.roce.resp_read_gen import RD_FIRST, RD_LAST, RD_MIDDLE, RD_ONLY
from rocegen.gateware.roce.resp_read_order import RespReadOrder
from rocegen.sim.testing.harness import run_sim


def test_parameters():
    with pytest.raises(ValueError, match="rd_depth"):
        RespReadOrder(4, 8)
    with pytest.raises(TypeError, match="rd_depth"):
        RespReadOrder(4, 16.0)


def test_holds():
    dut = RespReadOrder(4, 16)

    async def pulse(ctx, port, qp):
        ctx.set(port.valid, 1)
        ctx.set(port.payload, qp)
        await ctx.tick()
        ctx.set(port.valid, 0)

    def answer(ctx, qp):
        ctx.set(dut.ans_i.valid, 1)
        ctx.set(dut.ans_i.payload.qp, qp)
        return ctx.get(dut.ans_o.valid), ctx.get(dut.ans_i.ready)

    def read(ctx, opcode, qp=1):
        ctx.set(dut.rd_i.valid, 1)
        ctx.set(dut.rd_i.payload.desc.opcode, opcode)
        ctx.set(dut.rd_i.payload.desc.qp, qp)
        return ctx.get(dut.rd_o.valid), ctx.get(dut.rd_i.ready)

    async def tb(ctx):
        ctx.set(dut.ans_o.ready, 1)
        ctx.set(dut.rd_o.ready, 1)
        ctx.set(dut.idle, 1)
        ctx.set(dut.written, 1)
        assert answer(ctx, 1) == (1, 1)
        # two READs of QP 1 in flight: its answers wait, QP 2's go
        await pulse(ctx, dut.push, 1)
        await pulse(ctx, dut.push, 1)
        assert answer(ctx, 1) == (0, 0)
        assert answer(ctx, 2) == (1, 1)
        await pulse(ctx, dut.sent, 1)
        assert answer(ctx, 1) == (0, 0)
        # a push and a sent of the QP in one cycle: the count stays
        ctx.set(dut.sent.valid, 1)
        ctx.set(dut.sent.payload, 1)
        await pulse(ctx, dut.push, 1)
        ctx.set(dut.sent.valid, 0)
        assert answer(ctx, 1) == (0, 0)
        await pulse(ctx, dut.sent, 1)
        assert answer(ctx, 1) == (1, 1)
        # a sent with nothing in flight changes nothing
        await pulse(ctx, dut.sent, 1)
        await pulse(ctx, dut.push, 1)
        assert answer(ctx, 1) == (0, 0)
        # a set-up clears the count
        await pulse(ctx, dut.flush, 1)
        assert answer(ctx, 1) == (1, 1)
        ctx.set(dut.ans_i.valid, 0)
        # first responses wait for the answer queue to empty, and hold the answers meanwhile;
        # the others go
        ctx.set(dut.idle, 0)
        for op in (RD_MIDDLE, RD_LAST):
            assert read(ctx, op) == (1, 1)
        for op in (RD_FIRST, RD_ONLY):
            assert read(ctx, op) == (0, 0)
            assert answer(ctx, 2) == (0, 0)
        ctx.set(dut.idle, 1)
        assert read(ctx, RD_ONLY) == (1, 1)
        assert answer(ctx, 2) == (1, 1)
        # ... and for the writes before the READ; answers go meanwhile
        ctx.set(dut.written, 0)
        assert read(ctx, RD_FIRST) == (0, 0)
        assert answer(ctx, 2) == (1, 1)
        assert read(ctx, RD_MIDDLE) == (1, 1)
        ctx.set(dut.written, 1)
        assert read(ctx, RD_FIRST) == (1, 1)
        # backpressure passes through
        ctx.set(dut.rd_o.ready, 0)
        ctx.set(dut.ans_o.ready, 0)
        assert read(ctx, RD_FIRST) == (1, 0)
        assert answer(ctx, 2) == (1, 0)

    run_sim(dut, testbenches=[tb])
