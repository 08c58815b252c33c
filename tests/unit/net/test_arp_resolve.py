"""ARP resolver: requests, their repetition every retry_cycles + 2 cycles, giving up with a
one-cycle ``failed``, an answer ending the resolution, requests stalled by the transmitter."""

import random

import pytest

from rocegen.gateware.net.arp_resolve import ArpResolver
from rocegen.sim.testing.harness import raises, run_sim

RETRY = 20


def run(retries, *, answer_after=None, stall=0.0, seed=0):
    """Ask for one address; the cache learns it ``answer_after`` cycles after the first
    request is taken (None: never). Returns the cycles requests were offered first and taken,
    the cycles ``failed`` was high, and the cycle the resolver was free again."""
    rng = random.Random(seed)
    dut = ArpResolver(retry_cycles=RETRY, retries=retries)
    ip = 0x0A000063
    out = {"offered": [], "taken": [], "failed": [], "targets": set()}

    async def tb(ctx):
        ctx.set(dut.wait_ip, ip)
        ctx.set(dut.resolve, 1)
        learned_at = None
        fresh = True                            # the next offer is a new request
        for cycle in range(1, (retries + 2) * (RETRY + 40)):
            if ctx.get(dut.failed):
                out["failed"].append(cycle)
                ctx.set(dut.resolve, 0)         # the transmitter drops its packet
            valid = ctx.get(dut.request.valid)
            ready = rng.random() >= stall
            ctx.set(dut.request.ready, ready)
            if valid:
                out["targets"].add(ctx.get(dut.request.payload))
                if fresh:
                    out["offered"].append(cycle)
                    fresh = False
                if ready:
                    out["taken"].append(cycle)
                    fresh = True
                    if answer_after is not None and learned_at is None:
                        learned_at = cycle + answer_after
            hit = learned_at is not None and cycle >= learned_at
            ctx.set(dut.target_hit, hit and ctx.get(dut.target) == ip)
            if hit:
                ctx.set(dut.resolve, 0)         # the transmitter's lookup now hits
            await ctx.tick()
        ctx.set(dut.request.ready, 0)

    run_sim(dut, testbenches=[tb])
    return out


@pytest.mark.parametrize("retries", [0, 1, 3])
@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_gives_up_after_the_retries(retries, stall):
    out = run(retries, stall=stall, seed=retries)
    assert out["targets"] == {0x0A000063}
    assert out["offered"][0] == 3           # asked in cycle 1, started in 2, offered in 3
    assert len(out["taken"]) == retries + 1
    for taken, offered in zip(out["taken"], out["offered"][1:]):
        assert offered == taken + RETRY + 2
    assert out["failed"] == [out["taken"][-1] + RETRY + 2]


def test_an_answer_ends_the_resolution():
    out = run(3, answer_after=5, seed=1)
    assert len(out["taken"]) == 1 and out["failed"] == []


def test_parameters_are_checked():
    raises(ValueError, "retry_cycles", lambda: ArpResolver(retry_cycles=15))
    raises(ValueError, "retries", lambda: ArpResolver(retries=256))
