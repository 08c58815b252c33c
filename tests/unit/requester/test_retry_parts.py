"""The retry engine's parts on their own: the time base against a model of its count, and the
parameter checks of the decision and apply stages (whose rules the engine's test compares with
:mod:`rocegen.sim.models.requester.retry` event by event, in tests/unit/requester/test_retry.py)."""

import pytest

from rocegen.gateware.roce.requester.retry_apply import RetryApply
from rocegen.gateware.roce.requester.retry_decide import RetryDecide
from rocegen.gateware.roce.requester.retry_time import RetryTimeBase
from rocegen.sim.testing.harness import raises, run_sim


@pytest.mark.parametrize("tick_cycles", [1, 2, 3, 7])
def test_time_base_counts_ticks(tick_cycles):
    """Cycle c after reset: now = c // tick_cycles, now1 = now + 1, now_next = (c + 1) //
    tick_cycles."""
    dut = RetryTimeBase(tick_cycles)

    async def tb(ctx):
        for c in range(12 * tick_cycles + 5):
            now = c // tick_cycles
            got = (ctx.get(dut.now), ctx.get(dut.now1), ctx.get(dut.now_next))
            assert got == (now, now + 1, (c + 1) // tick_cycles), f"cycle {c}: {got}"
            await ctx.tick()

    run_sim(dut, testbenches=[tb])


def test_parameters_are_validated():
    raises(ValueError, "tick_cycles must be a positive integer", lambda: RetryTimeBase(0))
    raises(ValueError, "tick_cycles must be a positive integer", lambda: RetryTimeBase(1.5))
    for cls in (RetryDecide, RetryApply):
        raises(ValueError, "num_qps must be 1..256", lambda cls=cls: cls(0))
        raises(TypeError, "num_qps must be an integer", lambda cls=cls: cls("8"))
