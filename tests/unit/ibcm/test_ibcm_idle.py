"""Quiet connections (``IbCmIdle``) against their model (``IdleWatch``): random requests (some
on no QP of ours), QPs watched and not; each report at least a window and at most two after
the QP's last request, the QP watched all along; its latency; its parameters."""

import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_idle import MAX_WINDOW, IbCmIdle
from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.sim.models.ibcm.idle import IdleWatch
from rocegen.sim.testing.harness import raises, run_sim


def trace(num_qps, window, seed, cycles):
    """Random inputs for ``cycles`` cycles: per cycle (watched, seen QPN or None, expired)."""
    rng = random.Random(seed)
    dut = IbCmIdle(num_qps, window=window)
    rows = []

    async def tb(ctx):
        watched = 0
        rate = 1 / (3 * window)
        for _ in range(cycles):
            if rng.random() < rate:
                watched ^= 1 << rng.randrange(num_qps)
            seen = None
            if rng.random() < rate * 2:
                seen = QPN_BASE + rng.randrange(num_qps) if rng.random() < 0.9 else \
                    rng.choice([0, 1, QPN_BASE - 1, QPN_BASE + num_qps, (1 << 24) - 1])
            ctx.set(dut.watched, watched)
            ctx.set(dut.seen.valid, seen is not None)
            ctx.set(dut.seen.payload, 0 if seen is None else seen)
            rows.append((watched, seen, ctx.get(dut.expired)))
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    return rows


@pytest.mark.parametrize("num_qps,window", [(4, 1), (4, 9), (256, 16)])
def test_against_model(num_qps, window):
    rows = trace(num_qps, window, seed=num_qps + window, cycles=3000)
    model = IdleWatch(num_qps, window)
    got = [e for _, _, e in rows]
    want = [model.step(w, [] if s is None else [s]) for w, s, _ in rows]
    assert got == want
    assert sum(bin(e).count("1") for e in got) >= 5


@pytest.mark.parametrize("num_qps,window", [(4, 9), (256, 16)])
def test_reported_after_one_to_two_quiet_windows(num_qps, window):
    """Each report of QP k in cycle t: k watched and without a request in the cycles
    t - window .. t - 1 at least, and reported no later than two windows after its last
    request or its watching began (a report in every such case)."""
    rows = trace(num_qps, window, seed=7, cycles=4000)
    for k in range(num_qps):
        since = None            # first cycle of the current quiet, watched stretch
        for t, (w, s, e) in enumerate(rows):
            if e >> k & 1:
                assert since is not None and t - since >= window, (k, t, since)
                since = t       # (the IB CM closes it: a new stretch begins)
            if not w >> k & 1:
                since = None
            elif s == QPN_BASE + k:
                since = t + 1
            elif since is None:
                since = t
            elif t - since >= 2 * window:
                raise AssertionError(f"QP {k} quiet since {since}, not reported by {t}")


def test_latency_and_a_request_in_the_last_cycle():
    dut = IbCmIdle(2, window=4)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.watched, 0b11)          # cycle 0; the first window ends in cycle 3
        await ctx.tick().repeat(4)
        # cycles 4..7 the first whole window; QP 1's request in its last cycle (7)
        await ctx.tick().repeat(3)
        ctx.set(dut.seen.valid, 1)
        ctx.set(dut.seen.payload, QPN_BASE + 1)
        assert ctx.get(dut.expired) == 0
        await ctx.tick()
        ctx.set(dut.seen.valid, 0)
        assert ctx.get(dut.expired) == 0b01       # cycle 8: QP 0 only
        await ctx.tick()
        assert ctx.get(dut.expired) == 0          # one cycle
        await ctx.tick().repeat(3)
        assert ctx.get(dut.expired) == 0b11       # cycle 12: both, the window 8..11 quiet
        seen["done"] = True

    run_sim(dut, testbenches=[tb])
    assert seen


def test_parameters_are_checked():
    for bad in (0, 257):
        raises(ValueError, "num_qps", lambda bad=bad: IbCmIdle(bad, window=8))
    for bad in (0, MAX_WINDOW + 1):
        raises(ValueError, "window", lambda bad=bad: IbCmIdle(4, window=bad))
    raises(TypeError, "window", lambda: IbCmIdle(4, window=8.0))
