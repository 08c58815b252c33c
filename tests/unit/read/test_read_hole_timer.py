"""The READ requester's hole timer (:class:`ReadHoleTimer`): random touches and pokes, QPs
getting busy and idle, and backpressure on ``expire``; each expiry offered is of a busy QP that
was poked (and says so) or had no touch for at least the wait (since it got busy, when it got
no touch then), none comes later than its bound (a poked one within a scan), and an offer is
held unchanged until taken."""

import random

import pytest

from rocegen.gateware.roce.read.read_hole_timer import STEPS, ReadHoleTimer, check_wait
from rocegen.sim.testing.harness import raises, run_sim

COOL = 4        # the scan's pause after an expiry is taken, as documented


def run(num_qps, wait, *, seed, cycles=20_000, backpressure=0.0, p_touch=0.02, p_flip=0.002,
        p_poke=0.1, touch_busy=False, cfg_step=None):
    """``touch_busy``: a QP that gets busy is touched then (else the scan's renewal of an idle
    QP's stamp is what the bounds count from); ``cfg_step``: the step set through ``cfg`` in
    the first cycle (the wait: 4 steps)."""
    rng = random.Random(seed)
    dut = ReadHoleTimer(num_qps, wait)
    step = -(-wait // STEPS)
    if cfg_step is not None:
        step, wait = cfg_step, STEPS * cfg_step
    bound = (STEPS + 1) * step + num_qps * (COOL + 2) + 2   # (with no backpressure)
    poke_bound = num_qps * (COOL + 2) + 4
    # (an idle QP's stamp is renewed as the scan passes it: within a pass or two, a touch of
    # another QP taking the write port; the scan pauses for each expiry)
    renew = 3 * num_qps * (COOL + 2) + 4
    stats = {"expired": 0, "held": 0, "poked": 0, "again": 0}

    async def bench(ctx):
        holes = [False] * num_qps       # busy
        last = [0] * num_qps            # cycle each QP's wait started at the earliest
        since = [0] * num_qps           # cycle it got busy (or its last touch after that)
        opening = None
        echo = None                     # the user's touch of an expiry, a cycle after it
        held = None
        # per QP: None, ("set", cycle of the poke) or "unknown" (its hole closed since: a scan
        # may or may not have cleared it)
        pokes = [None] * num_qps
        # per QP: whether an expiry was taken with no response's touch since (None: its busy
        # dropped since, a scan may or may not have cleared it)
        again = [False] * num_qps
        echoed = False
        if cfg_step is not None:
            ctx.set(dut.cfg.payload, {"step": cfg_step})
            ctx.set(dut.cfg.valid, 1)
            await ctx.tick()
            ctx.set(dut.cfg.valid, 0)
        for cyc in range(cycles):
            touch, poke, echoed = None, False, False
            if echo is not None:
                touch, echo, echoed = echo, None, True
            elif opening is not None:
                holes[opening] = True
                opening = None
            elif rng.random() < p_touch:
                touch = rng.randrange(num_qps)
                # (pokes come from the decisions on a QP with a hole open: busy)
                poke = holes[touch] and rng.random() < p_poke
                if poke:
                    stats["poked"] += 1
                    if pokes[touch] is None:
                        pokes[touch] = ("set", cyc)
            elif rng.random() < p_flip * num_qps:
                q = rng.randrange(num_qps)
                if holes[q]:
                    holes[q] = False
                    if pokes[q] is not None:
                        pokes[q] = "unknown"
                    again[q] = None
                else:
                    opening = q
                    if touch_busy:
                        touch = q
                    else:
                        last[q] = max(last[q], cyc - renew)
            ready = rng.random() >= backpressure
            ctx.set(dut.busy, sum(1 << q for q in range(num_qps) if holes[q]))
            ctx.set(dut.touch.valid, touch is not None)
            ctx.set(dut.touch.payload, {"qp": touch or 0, "poke": poke, "expiry": echoed})
            ctx.set(dut.expire.ready, ready)
            _, _, valid, qp = await ctx.tick().sample(dut.expire.valid, dut.expire.payload)
            was_held, held = held, None
            if was_held is not None:
                assert valid and qp.qp == was_held, "an expiry offered is held until taken"
            assert not (valid and cfg_step == 0), "a timer set to never expired"
            if valid and was_held is None and again[qp.qp] is not None:
                assert qp.again == again[qp.qp], (cyc, qp.qp, again[qp.qp])
            again_before = valid and qp.again
            if valid:
                pk = pokes[qp.qp]
                if was_held is None and pk != "unknown" and not (pk and pk[1] >= cyc - 1):
                    # (a poke after the QP was found, by its age, is not marked)
                    assert qp.poke == (pk is not None), (cyc, pk)
                qp = qp.qp
                if was_held is None and pokes[qp] is None:
                    # found in the cycle before it was offered: no touch since the wait began
                    assert cyc - 1 - last[qp] >= wait, (cyc, qp, last[qp])
                if ready:
                    pokes[qp] = None
                    # (taken when no longer busy: a scan may clear it before it is busy again)
                    again[qp] = True if holes[qp] else None
                    stats["again"] += again_before
                    stats["expired"] += 1
                    echo = qp
                else:
                    held = qp
                    stats["held"] += 1
            if touch is not None:
                last[touch] = since[touch] = cyc
                if not echoed:
                    again[touch] = False
            for q in range(num_qps):
                if not holes[q] or opening == q:
                    since[q] = cyc
                elif valid and ready and qp == q:
                    since[q] = cyc
                elif not backpressure and step:
                    assert cyc - since[q] <= bound, f"QP {q} busy and silent, no expiry"
                    if isinstance(pokes[q], tuple):
                        assert cyc - pokes[q][1] <= poke_bound, f"QP {q} poked, no expiry"

    run_sim(dut, testbenches=[bench])
    return stats


@pytest.mark.parametrize("num_qps, wait, seed", [(1, 36, 1), (3, 44, 2), (8, 200, 3)])
def test_expiries_within_bounds(num_qps, wait, seed):
    stats = run(num_qps, wait, seed=seed)
    assert stats["expired"] > 10 and stats["poked"] > 10 and stats["again"] > 3, stats


def test_step_at_run_time():
    """The step set through ``cfg`` (longer, and shorter, than after reset), and 0: never."""
    for cfg_step, seed in ((60, 6), (12, 7)):
        stats = run(3, 200, seed=seed, cfg_step=cfg_step)
        assert stats["expired"] > 10, stats
    stats = run(3, 44, seed=8, cfg_step=0, cycles=5_000)
    assert stats["expired"] == 0 and stats["poked"] > 0, stats


@pytest.mark.parametrize("num_qps, wait, seed", [(3, 44, 4), (5, 100, 5)])
def test_backpressure(num_qps, wait, seed):
    stats = run(num_qps, wait, seed=seed, backpressure=0.6, touch_busy=True)
    assert stats["expired"] > 10 and stats["held"] > 5, stats


def test_parameters():
    assert check_wait(4 * 9, 1) == 36
    assert check_wait(0, 1) == 0
    raises(ValueError, r"wait must be 0 or at least 36 cycles for 1 QPs",
           lambda: ReadHoleTimer(1, 35))
    raises(ValueError, r"at least 1056 cycles for 256 QPs", lambda: ReadHoleTimer(256, 1000))
    raises(ValueError, r"wait must be below 67108864 cycles", lambda: ReadHoleTimer(1, 1 << 26 + 1))
    raises(TypeError, r"wait must be an integer number of cycles, not 40.0",
           lambda: ReadHoleTimer(1, 40.0))
    raises(ValueError, r"num_qps", lambda: ReadHoleTimer(0, 100))
