"""The completion dispatch (:class:`CplDispatch`): random completions of every source (and of
the one unused source value), idle cycles and backpressure on each output; every completion
reaches its source's output in order, and an unknown source's is drained."""

import random

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.frontend.cpl_dispatch import CplDispatch
from rocegen.gateware.roce.layouts import COMPLETION, WrSource
from rocegen.sim.testing.harness import run_sim

BITS = Shape.cast(COMPLETION).width
UNUSED_SRC = 3          # the two-bit source field's value no block produces


@pytest.mark.parametrize("backpressure, seed", [(0.0, 1), (0.3, 2), (0.8, 3)])
def test_dispatch_against_model(backpressure, seed):
    rng = random.Random(seed)
    dut = CplDispatch()
    srcs = [WrSource.USER, WrSource.STREAM, WrSource.GENERATOR, UNUSED_SRC]
    sent = [(rng.getrandbits(BITS), rng.choice(srcs)) for _ in range(400)]
    ports = {WrSource.USER: dut.user, WrSource.STREAM: dut.front, WrSource.GENERATOR: dut.gen}
    got = {src: [] for src in ports}
    taken = []

    async def outputs(ctx):
        while True:
            ready = {src: rng.random() >= backpressure for src in ports}
            for src, port in ports.items():
                ctx.set(port.ready, ready[src])
            _, _, iv, ir, *outs = await ctx.tick().sample(
                dut.i.valid, dut.i.ready,
                *(x for port in ports.values() for x in (port.valid, port.payload.as_value())))
            valids = [bool(v) for v in outs[0::2]]
            assert sum(valids) <= 1
            for src, valid, payload in zip(ports, valids, outs[1::2]):
                if valid:
                    assert ir == ready[src], "i.ready is not the destination's ready"
                    if ready[src]:
                        got[src].append(payload)
            if iv and ir:
                taken.append(valids)

    async def tb(ctx):
        for bits, src in sent:
            while rng.random() < 0.3:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.payload.as_value(), bits)
            ctx.set(dut.i.payload.src.as_value(), int(getattr(src, "value", src)))
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(3)

    run_sim(dut, testbenches=[tb], processes=[outputs], deadline_cycles=50_000)
    src_field = COMPLETION["src"]

    def with_src(bits, src):
        mask = (1 << Shape.cast(src_field.shape).width) - 1 << src_field.offset
        return bits & ~mask | int(getattr(src, "value", src)) << src_field.offset

    for src in ports:
        assert got[src] == [with_src(b, s) for b, s in sent if s == src], src
    # the unused source's completions were taken with no output valid
    assert len(taken) == len(sent)
    assert sum(not any(v) for v in taken) == sum(s == UNUSED_SRC for _, s in sent) > 50


def test_signature():
    dut = CplDispatch()
    for port in (dut.i, dut.user, dut.front, dut.gen):
        assert port.payload.shape() == COMPLETION
    Fragment.get(dut, None)
