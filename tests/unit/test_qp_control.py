"""The QP control merge (:class:`QpControl`): the user's and the connection manager's writes,
with idle cycles on both and backpressure on all four outputs, reach the QP table and the retry
engine complete, in the same merged order (each source's own order kept), the table first."""

import random

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.qp_control import QpControl
from rocegen.gateware.roce.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.testing.harness import run_sim


def source(port, values, rng, idle):
    async def run(ctx):
        for v in values:
            while rng.random() < idle:
                ctx.set(port.valid, 0)
                await ctx.tick()
            ctx.set(port.payload.as_value(), v)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
    return run


def sink(port, got, rng, backpressure):
    async def run(ctx):
        cycle = 0
        while True:
            ready = rng.random() >= backpressure
            ctx.set(port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload.as_value())
            cycle += 1
            if valid and ready:
                got.append((cycle, payload))
    return run


@pytest.mark.parametrize("seed, backpressure", [(1, 0.0), (2, 0.3), (3, 0.7)])
def test_both_outputs_get_every_write_in_one_order(seed, backpressure):
    rng = random.Random(seed)
    dut = QpControl()
    n = 150
    writes = {f"{who}_{kind}": [(who == "cm") << (Shape.cast(layout).width - 1) |
                                rng.getrandbits(Shape.cast(layout).width - 1) for _ in range(n)]
              for who in ("user", "cm") for kind, layout in (("ctl", CONTEXT_WRITE),
                                                              ("psn", PSN_WRITE))}
    got = {f"{to}_{kind}": [] for to in ("table", "engine") for kind in ("ctl", "psn")}
    srcs = [source(getattr(dut, name), values, random.Random(rng.random()), 0.4)
            for name, values in writes.items()]
    sinks = [sink(getattr(dut, name), values, random.Random(rng.random()), backpressure)
             for name, values in got.items()]

    async def tb(ctx):
        while min(len(v) for v in got.values()) < 2 * n:
            await ctx.tick()
        await ctx.tick().repeat(10)

    run_sim(dut, testbenches=[tb], processes=srcs + sinks, deadline_cycles=50_000)
    for kind, layout in (("ctl", CONTEXT_WRITE), ("psn", PSN_WRITE)):
        top = Shape.cast(layout).width - 1
        table, engine = got[f"table_{kind}"], got[f"engine_{kind}"]
        assert len(table) == len(engine) == 2 * n
        assert [v for _, v in table] == [v for _, v in engine]
        for who, flag in (("user", 0), ("cm", 1)):
            assert [v for _, v in table if v >> top == flag] == writes[f"{who}_{kind}"]
        # the engine gets each write at least a cycle after the table did
        assert all(e > t for (t, _), (e, _) in zip(table, engine))
        # the two sources were interleaved, not one after the other
        switches = sum((a >> top) != (b >> top) for (_, a), (_, b) in zip(table, table[1:]))
        assert switches > 20


def test_signature():
    dut = QpControl()
    for kind, layout in (("ctl", CONTEXT_WRITE), ("psn", PSN_WRITE)):
        for name in (f"user_{kind}", f"cm_{kind}", f"table_{kind}", f"engine_{kind}"):
            assert getattr(dut, name).payload.shape() == layout
    Fragment.get(dut, None)
