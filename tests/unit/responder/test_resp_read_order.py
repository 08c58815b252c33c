"""RespReadOrder: a QP's answers wait for its READs in flight, parked one per QP so that the
other QPs' answers go on (a parked plain ACK replaced by a newer answer, a parked NAK holding
the next); a QP's READs after its parked answer get no turn; a flush clamps the READs an
answer waits for to those already made; a set-up withdraws the parked answer; a READ's first
response waits for the answer queue to empty and for the writes before it."""

import pytest

from rocegen.gateware.roce.responder.resp_read_gen import RD_FIRST, RD_LAST, RD_MIDDLE, RD_ONLY
from rocegen.gateware.roce.responder.resp_read_order import RespReadOrder
from rocegen.sim.testing.harness import run_sim

ACK, NAK_SEQ = 0x1F, 0x60


def test_parameters():
    with pytest.raises(ValueError, match="rd_depth"):
        RespReadOrder(4, 8)
    with pytest.raises(TypeError, match="rd_depth"):
        RespReadOrder(4, 16.0)


def bench(dut):
    """Helpers driving ``dut``'s ports from a testbench."""
    async def pulse(ctx, port, qp):
        ctx.set(port.valid, 1)
        ctx.set(port.payload, qp)
        await ctx.tick()
        ctx.set(port.valid, 0)

    def answer(ctx, qp, level=0, syndrome=ACK, psn=0):
        """Offer an answer of ``qp`` (its READ queue holding ``level``): (ans_o.valid,
        ans_i.ready)."""
        ctx.set(dut.ans_i.valid, 1)
        ctx.set(dut.ans_i.payload, {"qp": qp, "syndrome": syndrome, "psn": psn})
        ctx.set(dut.level, level)
        return ctx.get(dut.ans_o.valid), ctx.get(dut.ans_i.ready)

    def read(ctx, opcode, qp=1):
        ctx.set(dut.rd_i.valid, 1)
        ctx.set(dut.rd_i.payload.desc.opcode, opcode)
        ctx.set(dut.rd_i.payload.desc.qp, qp)
        return ctx.get(dut.rd_o.valid), ctx.get(dut.rd_i.ready)

    return pulse, answer, read


def test_parks():
    dut = RespReadOrder(4, 16)
    pulse, answer, read = bench(dut)

    def out(ctx):
        return ctx.get(dut.ans_o.valid), ctx.get(dut.ans_o.payload.qp), \
            ctx.get(dut.ans_o.payload.psn)

    async def tb(ctx):
        ctx.set(dut.ans_o.ready, 1)
        ctx.set(dut.rd_o.ready, 1)
        ctx.set(dut.idle, 1)
        ctx.set(dut.written, 1)
        assert answer(ctx, 1) == (1, 1)
        # QP 1 with two READs queued: its answer is parked at once, QP 2's go straight
        assert answer(ctx, 1, level=2, psn=10) == (0, 1)
        await ctx.tick()
        assert ctx.get(dut.hold) == 0
        assert answer(ctx, 2) == (1, 1)
        await ctx.tick()
        # a newer ACK of QP 1 replaces the parked one, a NAK replaces that; the next waits
        assert answer(ctx, 1, level=2, psn=11) == (0, 1)
        await ctx.tick()
        assert answer(ctx, 1, level=2, syndrome=NAK_SEQ, psn=12) == (0, 1)
        await ctx.tick()
        assert answer(ctx, 1, level=2, psn=13) == (0, 0)
        # ... while QP 2's answers go
        assert answer(ctx, 2) == (1, 1)
        ctx.set(dut.ans_i.valid, 0)
        # both READs made: QP 1 gets no turn (a READ queued now would be after the NAK)
        await pulse(ctx, dut.done, 1)
        assert ctx.get(dut.hold) == 0
        await pulse(ctx, dut.done, 1)
        assert ctx.get(dut.hold) == 0b10
        await pulse(ctx, dut.sent, 1)
        assert out(ctx)[0] == 0
        await pulse(ctx, dut.sent, 1)
        # the last sent: the NAK leaves (before the answers offered, which are parked), then
        # QP 1 is free
        assert answer(ctx, 2, psn=5) == (1, 1)
        assert out(ctx) == (1, 1, 12)
        await ctx.tick()
        ctx.set(dut.ans_i.valid, 0)
        assert ctx.get(dut.hold) == 0b100           # (QP 2's answer parked)
        assert out(ctx) == (1, 2, 5)
        await ctx.tick()
        assert answer(ctx, 1) == (1, 1)
        # a parked answer that leaves frees its slot for the next of its QP in the same cycle
        assert answer(ctx, 3, level=1, psn=20) == (0, 1)
        await ctx.tick()
        assert answer(ctx, 3, level=1, syndrome=NAK_SEQ, psn=21) == (0, 1)
        await ctx.tick()
        assert answer(ctx, 3, level=1, psn=22) == (0, 0)
        ctx.set(dut.ans_i.valid, 0)
        # a flush: the READs queued are dropped, the NAK waits for those already made
        await pulse(ctx, dut.done, 3)
        await pulse(ctx, dut.flush, 3)
        await ctx.tick()
        assert out(ctx)[0] == 0
        await ctx.tick()
        assert out(ctx)[0] == 0
        ctx.set(dut.sent.valid, 1)
        ctx.set(dut.sent.payload, 3)
        assert answer(ctx, 3, psn=22) == (0, 0)
        await ctx.tick()
        ctx.set(dut.sent.valid, 0)
        assert out(ctx) == (1, 3, 21)
        assert ctx.get(dut.ans_i.ready) == 1        # (parked as the NAK leaves)
        await ctx.tick()
        ctx.set(dut.ans_i.valid, 0)
        assert out(ctx) == (1, 3, 22)
        await ctx.tick()
        assert out(ctx)[0] == 0
        # the answer queue full: answers are parked (nothing ahead), and leave once it takes
        ctx.set(dut.ans_o.ready, 0)
        assert answer(ctx, 2, psn=30) == (1, 1)
        await ctx.tick()
        assert answer(ctx, 0, psn=31) == (1, 1)
        await ctx.tick()
        ctx.set(dut.ans_i.valid, 0)
        assert out(ctx) == (1, 0, 31)
        ctx.set(dut.ans_o.ready, 1)
        await ctx.tick()
        assert out(ctx) == (1, 2, 30)
        await ctx.tick()
        assert out(ctx)[0] == 0
        # a set-up withdraws the parked answer
        assert answer(ctx, 2, level=1) == (0, 1)
        await ctx.tick()
        ctx.set(dut.ans_i.valid, 0)
        await pulse(ctx, dut.drop, 2)
        assert answer(ctx, 2) == (1, 1)

    run_sim(dut, testbenches=[tb])


def test_first_responses_wait():
    dut = RespReadOrder(4, 16)
    pulse, answer, read = bench(dut)

    async def tb(ctx):
        ctx.set(dut.ans_o.ready, 1)
        ctx.set(dut.rd_o.ready, 1)
        ctx.set(dut.idle, 0)
        ctx.set(dut.written, 1)
        # first responses wait for the answer queue to empty, and hold the answers meanwhile
        # (parked ones too); the others go
        for op in (RD_MIDDLE, RD_LAST):
            assert read(ctx, op) == (1, 1)
        for op in (RD_FIRST, RD_ONLY):
            assert read(ctx, op) == (0, 0)
            assert answer(ctx, 2) == (0, 1)         # (parked: nothing ahead)
        await ctx.tick()
        ctx.set(dut.ans_i.valid, 0)
        assert ctx.get(dut.ans_o.valid) == 0
        ctx.set(dut.idle, 1)
        assert read(ctx, RD_ONLY) == (1, 1)
        assert ctx.get(dut.ans_o.valid) == 1
        await ctx.tick()
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
        assert read(ctx, RD_FIRST) == (1, 0)

    run_sim(dut, testbenches=[tb])
