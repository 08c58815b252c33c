import random

import pytest
from amaranth.lib import data

from rocegen.gateware.lib.gate import PacketGate
from rocegen.gateware.lib.pad import Pad
from rocegen.gateware.lib.stats import StatsBlock
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim


@pytest.mark.parametrize("width", [64, 512])
def test_pad_to_minimum(width):
    meta = data.StructLayout({"tag": 8})
    dut = Pad(width, 60, meta)
    rng = random.Random(width)
    pkts = [Packet(rng.randbytes(n), {"tag": n % 256}, error=rng.random() < 0.3)
            for n in list(range(0, 130)) + [200, 61, 60, 59]]
    drv = StreamDriver(dut.i, width, idle=0.3, seed=2)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=3)

    async def tb(ctx):
        await drv.send(ctx, pkts)
        while len(col.packets) < len(pkts):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run])
    for sent, got in zip(pkts, col.packets, strict=True):
        assert got.data == sent.data + bytes(max(0, 60 - len(sent.data)))
        assert got.meta == sent.meta
        assert got.error == sent.error


@pytest.mark.parametrize("width", [64, 512])
def test_gate_passes_and_drops_by_verdict(width):
    dut = PacketGate(width)
    rng = random.Random(9)
    pkts = [Packet(rng.randbytes(rng.randrange(0, 200))) for _ in range(60)]
    verdicts = [rng.random() < 0.6 for _ in pkts]
    drv = StreamDriver(dut.i, width, idle=0.2, seed=4)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=5)
    dropped = []

    async def give_verdicts(ctx):
        for v in verdicts:
            for _ in range(rng.randrange(0, 6)):       # verdicts arrive late and irregularly
                await ctx.tick()
            ctx.set(dut.verdict.payload, int(v))
            ctx.set(dut.verdict.valid, 1)
            await ctx.tick().until(dut.verdict.ready)
            ctx.set(dut.verdict.valid, 0)

    async def count(ctx):
        async for _, _, d in ctx.tick().sample(dut.dropped):
            if d:
                dropped.append(1)

    async def tb(ctx):
        await drv.send(ctx, pkts)
        for _ in range(200):
            await ctx.tick()

    run_sim(dut, testbenches=[tb, give_verdicts], processes=[col.run, count])
    assert [p.data for p in col.packets] == [p.data for p, v in zip(pkts, verdicts) if v]
    assert len(dropped) == verdicts.count(False)


def test_stats_counts_saturates_and_reads():
    dut = StatsBlock(["a", "b", "c"], counter_width=8)
    with pytest.raises(ValueError, match="repeated"):
        StatsBlock(["a", "a"])

    async def tb(ctx):
        for cycle in range(300):
            ctx.set(dut.inc, 0b001 | (0b010 if cycle % 3 == 0 else 0))
            await ctx.tick()
        ctx.set(dut.inc, 0)
        got = []
        for k in range(3):
            ctx.set(dut.addr, k)
            await ctx.tick()
            await ctx.tick()
            got.append(ctx.get(dut.data))
        assert got == [255, 100, 0]
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        ctx.set(dut.addr, 0)
        await ctx.tick()
        await ctx.tick()
        assert ctx.get(dut.data) == 0

    run_sim(dut, testbenches=[tb])


def test_stats_event_latency():
    """An event in cycle t is seen by a read addressed in cycle t + 2, not before."""
    dut = StatsBlock(["a", "b"], counter_width=16)

    async def tb(ctx):
        ctx.set(dut.addr, 1)
        ctx.set(dut.inc, 0b10)              # event in cycle t
        await ctx.tick()
        ctx.set(dut.inc, 0)                 # read addressed in t + 1: not yet
        await ctx.tick()
        assert ctx.get(dut.data) == 0       # read addressed in t + 2: counted
        await ctx.tick()
        assert ctx.get(dut.data) == 1

    run_sim(dut, testbenches=[tb])
