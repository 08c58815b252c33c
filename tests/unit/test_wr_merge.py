"""The work-request merge (:class:`WrMerge`): requests of the three sources, with idle cycles,
backpressure and a toggling ``bad_full``, all reach ``o`` tagged by source, each source's in its
own order, and a request that names no QP never leaves while ``bad_full`` is high."""

import random

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.layouts import WORK_REQUEST, WR_TAGGED, WrSource
from rocegen.gateware.roce.wr_merge import WrMerge
from rocegen.sim.testing.harness import raises, run_sim

WR_BITS = Shape.cast(WORK_REQUEST).width
QP = WORK_REQUEST["qp"]


def with_qp(wr_bits, qp):
    """The request ``wr_bits`` with its QP field set to ``qp``."""
    mask = (1 << Shape.cast(QP.shape).width) - 1 << QP.offset
    return wr_bits & ~mask | qp << QP.offset


def source(port, requests, rng, idle, tag):
    async def run(ctx):
        for wr_bits, qp in requests:
            while rng.random() < idle:
                ctx.set(port.valid, 0)
                await ctx.tick()
            wr = port.payload if tag is None else port.payload.wr
            ctx.set(wr.as_value(), wr_bits)
            ctx.set(wr.qp, qp)
            if tag is not None:
                ctx.set(port.payload.src, tag)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
    return run


@pytest.mark.parametrize("num_qps, backpressure, seed", [(1, 0.0, 1), (8, 0.4, 2),
                                                         (256, 0.2, 3)])
def test_merge_against_model(num_qps, backpressure, seed):
    rng = random.Random(seed)
    dut = WrMerge(num_qps)
    n = 120
    qp_bits = len(dut.user.payload.qp)

    def requests():
        # mostly good QPs, some naming none (when the QP field can say so)
        return [(rng.getrandbits(WR_BITS),
                 rng.randrange(num_qps) if rng.random() < 0.7 or num_qps == 1 << qp_bits
                 else rng.randrange(num_qps, 1 << qp_bits)) for _ in range(n)]

    sent = {WrSource.USER: requests(), WrSource.STREAM: requests(), WrSource.GENERATOR: requests()}
    got = {src: [] for src in sent}
    held = {"cycles": 0, "bad_out": 0}

    async def sink(ctx):
        while True:
            ready = rng.random() >= backpressure
            bad_full = rng.random() < 0.5
            ctx.set(dut.o.ready, ready)
            ctx.set(dut.bad_full, bad_full)
            _, _, valid, wr, qp, src = await ctx.tick().sample(
                dut.o.valid, dut.o.payload.wr.as_value(), dut.o.payload.wr.qp, dut.o.payload.src)
            if valid and qp >= num_qps:
                assert not bad_full, "a request naming no QP left while bad_full was high"
                held["bad_out"] += ready
            if valid and ready:
                got[WrSource(src)].append((wr, qp))

    async def tb(ctx):
        while sum(map(len, got.values())) < 3 * n:
            await ctx.tick()
        await ctx.tick().repeat(10)

    srcs = [source(dut.user, sent[WrSource.USER], random.Random(seed + 10), 0.3, None),
            source(dut.front, sent[WrSource.STREAM], random.Random(seed + 20), 0.3,
                   WrSource.STREAM),
            source(dut.gen, sent[WrSource.GENERATOR], random.Random(seed + 30), 0.3,
                   WrSource.GENERATOR)]
    run_sim(dut, testbenches=[tb], processes=srcs + [sink], deadline_cycles=50_000)
    for src in sent:
        assert [(with_qp(wr, qp), qp) for wr, qp in sent[src]] == got[src], src
    if num_qps < 1 << qp_bits:
        assert held["bad_out"] > 10


def test_parameters():
    dut = WrMerge(4)
    assert dut.o.payload.shape() == WR_TAGGED and dut.user.payload.shape() == WORK_REQUEST
    Fragment.get(dut, None)
    raises(ValueError, "num_qps must be 1..256, not 0", lambda: WrMerge(0))
    raises(ValueError, "num_qps must be 1..256, not 257", lambda: WrMerge(257))
