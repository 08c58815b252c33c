"""Round-robin record arbiter: nothing lost, duplicated or reordered per input, turns rotate
among busy inputs, random idle inputs and backpressure."""

import random

import pytest

from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.sim.testing.harness import run_sim


@pytest.mark.parametrize("n", [1, 3])
def test_arbiter_delivers_everything_in_order(n):
    rng = random.Random(n)
    dut = StreamArbiter(16, n)
    items = {k: [(k << 12) | j for j in range(40)] for k in range(n)}
    got = []

    def feeder(k):
        async def feed(ctx):
            for v in items[k]:
                while rng.random() < 0.4:
                    ctx.set(dut.i[k].valid, 0)
                    await ctx.tick()
                ctx.set(dut.i[k].payload, v)
                ctx.set(dut.i[k].valid, 1)
                await ctx.tick().until(dut.i[k].ready)
            ctx.set(dut.i[k].valid, 0)
        return feed

    async def collect(ctx):
        while len(got) < n * 40:
            ready = rng.random() > 0.3
            ctx.set(dut.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid and ready:
                got.append(payload)

    run_sim(dut, testbenches=[collect] + [feeder(k) for k in range(n)])
    for k in range(n):
        assert [v for v in got if v >> 12 == k] == items[k]


def test_arbiter_rotates_among_busy_inputs():
    dut = StreamArbiter(8, 3)
    got = []

    async def tb(ctx):
        for k in range(3):
            ctx.set(dut.i[k].payload, k)
            ctx.set(dut.i[k].valid, 1)
        ctx.set(dut.o.ready, 1)
        for _ in range(9):
            _, _, payload = await ctx.tick().sample(dut.o.payload)
            got.append(payload)
        ctx.set(dut.i[1].valid, 0)
        # the grant was with input 1: it moves on in one cycle without a transfer
        idle = 0
        while len(got) < 13:
            _, _, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            if valid:
                got.append(payload)
            else:
                idle += 1
        assert idle <= 1

    run_sim(dut, testbenches=[tb])
    assert got[:9] == [1, 2, 0] * 3
    assert got[9:] == [2, 0, 2, 0] or got[9:] == [0, 2, 0, 2]


def test_arbiter_parameters():
    with pytest.raises(ValueError, match="number of inputs"):
        StreamArbiter(8, 0)
