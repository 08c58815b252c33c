"""PauseGate: no frame starts while paused, a started frame always finishes; handshakes cycle
by cycle against :class:`rocegen.sim.models.mac.pause.PauseGateModel`, frames intact, with random
idle cycles, backpressure and pause levels at 64 and 512 bits."""

import random

import pytest
from amaranth.lib import data

from rocegen.gateware.mac.pause_gate import PauseGate
from rocegen.sim.models.mac.pause import PauseGateModel
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import raises, run_sim


def bench(width, pkts, pause_plan, *, idle, backpressure, meta=None, seed=0):
    dut = PauseGate(width, meta)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    trace = []

    async def pauses(ctx):
        for level, cycles in pause_plan:
            ctx.set(dut.pause, level)
            for _ in range(cycles):
                await ctx.tick()

    async def watch(ctx):
        async for sample in ctx.tick().sample(dut.pause, dut.i.valid, dut.i.payload.last,
                                               dut.o.ready, dut.o.valid, dut.i.ready):
            trace.append(sample[2:])

    async def tb(ctx):
        await drv.send(ctx, pkts)
        while len(col.packets) < len(pkts):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, pauses, watch])
    return col, trace


def random_plan(rng, total):
    plan = []
    while total > 0:
        n = rng.choice([1, 1, 2, 3, rng.randrange(4, 40)])
        plan.append((rng.random() < 0.4, n))
        total -= n
    return plan + [(0, 1)]


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("idle, backpressure", [(0.0, 0.0), (0.3, 0.3), (0.1, 0.6)])
def test_against_model(width, idle, backpressure):
    rng = random.Random(width + int(10 * idle))
    meta = data.StructLayout({"tag": 8})
    pkts = [Packet(rng.randbytes(rng.choice([0, 1, 60, rng.randrange(1, 300)])),
                   {"tag": n % 256}, error=rng.random() < 0.1) for n in range(150)]
    col, trace = bench(width, pkts, random_plan(rng, 20000), idle=idle,
                       backpressure=backpressure, meta=meta, seed=3)
    assert [(p.data, p.meta, p.error) for p in col.packets] == \
        [(p.data, p.meta, p.error) for p in pkts]
    model = PauseGateModel()
    starts = held = 0
    in_frame = False
    prev_pause = 0
    for cycle, (pause, i_valid, i_last, o_ready, o_valid, i_ready) in enumerate(trace):
        want = model.step(pause, i_valid, i_last, o_ready)
        assert (bool(o_valid), bool(i_ready)) == want, f"cycle {cycle}"
        if o_valid and not in_frame:
            assert not prev_pause, f"cycle {cycle}: a frame offered after a paused cycle"
            starts += 1
        if i_valid and not o_valid:
            held += 1
        if o_valid:
            in_frame = not (o_ready and i_last)
        prev_pause = pause
    assert held > 50 and starts >= len(pkts)


def test_started_frame_finishes_and_reaction_is_one_cycle():
    """Pause rises while a long frame is on its way: the frame ends, the next waits for the
    cycle after ``pause`` falls."""
    width = 64
    pkts = [Packet(bytes(range(200))), Packet(bytes(64))]
    plan = [(0, 3), (1, 60), (0, 100)]
    col, trace = bench(width, pkts, plan, idle=0, backpressure=0)
    assert [p.data for p in col.packets] == [p.data for p in pkts]
    offered = [n for n, t in enumerate(trace) if t[4]]
    first = offered[0]
    assert offered[:25] == list(range(first, first + 25))       # 25 beats, never cut
    second = offered[25]
    assert second == 3 + 60 + 1       # pause low from cycle 63: the gate opens in cycle 64


def test_parameters_are_checked():
    raises(ValueError, "width must be one of", lambda: PauseGate(100))
