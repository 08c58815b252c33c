import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.gate import PacketGate
from rocegen.gateware.lib.pad import Pad
from rocegen.gateware.lib.stats import StatsBlock, merge_events
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


class _Merged(wiring.Component):
    """``merge_events`` of three strobes, for the test."""

    def __init__(self, backlog):
        self.backlog = backlog
        super().__init__({"events": In(3), "out": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.out.eq(merge_events(m, list(self.events), backlog=self.backlog))
        return m


def test_merge_events_counts_every_coincident_event():
    """Three strobes that often pulse together (0.75 a cycle on average) give one strobe that
    pulses once for every one of their pulses: a lone pulse in its own cycle, those that come
    together in the cycles after, none lost while the owed ones stay within the backlog."""
    rng = random.Random(4)
    dut = _Merged(backlog=8)
    pattern = [[int(rng.random() < 0.25) for _ in range(3)] for _ in range(2_000)]
    sent, seen, lone_immediate = 0, 0, []

    async def tb(ctx):
        nonlocal sent, seen
        owed = 0
        for bits in pattern + [[0, 0, 0]] * 20:
            ctx.set(dut.events, bits[0] | bits[1] << 1 | bits[2] << 2)
            out = ctx.get(dut.out)
            if sum(bits) == 1 and owed == 0:
                lone_immediate.append(out)
            owed += sum(bits) - out
            sent += sum(bits)
            seen += out
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert sent > 1_000 and seen == sent
    assert lone_immediate and all(lone_immediate)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_merge_events_needs_a_backlog():
    with pytest.raises(ValueError, match="backlog"):
        merge_events(Module(), [Signal()], backlog=0)
