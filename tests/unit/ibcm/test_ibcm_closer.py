"""Which IB CM connections to close (``IbCmCloser``): random user requests (some naming no
QP), random QPs failing or going quiet and the IB CM taking and giving back QPs, backpressure
on ``o``; each request offered once, in order, each failure or quiet spell of a QP the IB CM
still holds once, nothing else, the quiet ones counted; its latency."""

import random
from collections import Counter

import pytest

from rocegen.gateware.roce.ibcm.ibcm_closer import IbCmCloser
from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.sim.testing.harness import raises, run_sim


def run(num_qps, seed, cycles=1500):
    """Random user requests; the IB CM holding a random half of the QPs; QPs failing and
    recovering, QPs going quiet. Returns the requests, the QP indices offered, per QP how often
    its ``errored`` bit rose or its ``idle`` bit pulsed while the IB CM held it, and the
    ``idle_closes`` pulses."""
    rng = random.Random(seed)
    dut = IbCmCloser(num_qps)
    requests = [rng.randrange(num_qps) if num_qps == 256 or rng.random() < 0.8 else
                rng.randrange(num_qps, 256) for _ in range(40)]
    held = rng.getrandbits(num_qps) | 1
    got, rises = [], Counter()
    counted = {"idle_closes": 0}

    async def user(ctx):
        for r in requests:
            while rng.random() < 0.5:
                await ctx.tick()
            ctx.set(dut.user.payload, r)
            ctx.set(dut.user.valid, 1)
            await ctx.tick().until(dut.user.ready)
            ctx.set(dut.user.valid, 0)
        await ctx.tick().repeat(cycles - 200)
        counted["calm"] = True          # no failure nor quiet spell begins in the last cycles
        await ctx.tick().repeat(200)

    async def qps(ctx):
        errored = 0
        ctx.set(dut.held, held)
        async for _, _, closes in ctx.tick().sample(dut.idle_closes):
            counted["idle_closes"] += closes
            idle = 0
            if counted.get("calm"):
                ctx.set(dut.idle, 0)
                continue
            if rng.random() < 0.1:
                k = rng.randrange(num_qps) if rng.random() < 0.5 else 0
                if not errored >> k & 1 and held >> k & 1:
                    rises[k] += 1
                errored ^= 1 << k
                ctx.set(dut.errored, errored)
            if rng.random() < 0.05:
                k = rng.randrange(num_qps) if rng.random() < 0.5 else 1 % num_qps
                idle = 1 << k
                if held >> k & 1:
                    rises[k] += 1
                    counted.setdefault("idle", Counter())[k] += 1
            ctx.set(dut.idle, idle)

    async def sink(ctx):
        ctx.set(dut.o.ready, 1)
        async for _, _, v, r, p in ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload):
            if v and r:
                got.append(p - QPN_BASE)
            ctx.set(dut.o.ready, rng.random() < 0.7)

    run_sim(dut, testbenches=[user], processes=[qps, sink])
    return requests, got, rises, counted


@pytest.mark.parametrize("num_qps", [4, 256])
def test_requests_and_failures_offered_once(num_qps):
    """The user's requests of QPs that exist, in order; each QP held that failed, at least
    once and at most as often as its bit rose (a rise while its note waits adds none); no
    QP that is not held and never failed."""
    requests, got, rises, counted = run(num_qps, seed=num_qps)
    user = [r for r in requests if r < num_qps]
    assert (len(user) < len(requests) or num_qps == 256) and sum(rises.values()) > 10
    rest = Counter(got)
    it = iter(got)
    assert all(any(g == r for g in it) for r in user), (user, got)
    rest.subtract(user)
    assert all(n >= 0 for n in rest.values())
    for k, n in rest.items():
        assert (n == 0 and rises[k] == 0) or 1 <= n <= rises[k], (k, n, rises[k])
    assert all(rest[k] >= 1 for k in rises)
    # the quiet closes: at least one, none beyond the offers of the QPs that went quiet
    quiet = counted["idle"]
    assert 1 <= counted["idle_closes"] <= sum(rest[k] for k in quiet), counted


def test_latency():
    dut = IbCmCloser(8)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.held, 0xFF)
        ctx.set(dut.user.payload, 3)
        ctx.set(dut.user.valid, 1)
        await ctx.tick()
        ctx.set(dut.user.valid, 0)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == QPN_BASE + 3
        ctx.set(dut.errored, 1 << 5)
        await ctx.tick()
        assert not ctx.get(dut.o.valid)
        await ctx.tick()
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == QPN_BASE + 5
        await ctx.tick().repeat(4)
        assert not ctx.get(dut.o.valid)          # once
        ctx.set(dut.errored, 1 << 6)             # QP 6 fails, is given back at once: dropped
        await ctx.tick()
        ctx.set(dut.held, 0xFF & ~(1 << 6))
        await ctx.tick().repeat(4)
        assert not ctx.get(dut.o.valid)
        ctx.set(dut.idle, 1 << 2)                # QP 2 went quiet: offered, counted
        await ctx.tick()
        ctx.set(dut.idle, 0)
        await ctx.tick()
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == QPN_BASE + 2
        assert not ctx.get(dut.idle_closes)
        await ctx.tick()
        assert ctx.get(dut.idle_closes) and not ctx.get(dut.o.valid)
        await ctx.tick()
        assert not ctx.get(dut.idle_closes)
        ctx.set(dut.errored, (1 << 5) | (1 << 1))     # QP 1 fails as it goes quiet: not counted
        ctx.set(dut.idle, 1 << 1)
        await ctx.tick()
        ctx.set(dut.idle, 0)
        closes = 0
        for _ in range(5):
            await ctx.tick()
            closes += ctx.get(dut.idle_closes)
        assert closes == 0
        seen["done"] = True

    run_sim(dut, testbenches=[tb])
    assert seen


def test_parameters_are_checked():
    for bad in (0, 257):
        raises(ValueError, "num_qps", lambda bad=bad: IbCmCloser(bad))
