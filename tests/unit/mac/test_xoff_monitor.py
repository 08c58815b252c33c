"""XoffMonitor: XOFF with hysteresis from a fill level, cycle by cycle against
:class:`rocegen.sim.models.mac.pause.XoffModel` with thresholds changed at run time; the default
thresholds from the headroom, worked out by hand, and the same headroom arithmetic as the
switch model."""

import random

import pytest

from rocegen.gateware.mac.xoff_monitor import XoffMonitor, headroom_beats, xoff_thresholds
from rocegen.sim.models.fabric.switch import pfc_headroom
from rocegen.sim.models.mac.pause import XoffModel
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import pfc


@pytest.mark.parametrize("depth", [64, 1000])
def test_against_model(depth):
    rng = random.Random(depth)
    dut = XoffMonitor(depth, xoff_at=depth * 3 // 4, xon_at=depth // 4)
    got, inputs = [], []

    async def tb(ctx):
        level, xoff_at, xon_at = 0, depth * 3 // 4, depth // 4
        for cycle in range(6000):
            if rng.random() < 0.01:                 # new thresholds, now and then crossed
                xoff_at, xon_at = rng.randrange(depth + 1), rng.randrange(depth + 1)
                ctx.set(dut.xoff_at, xoff_at)
                ctx.set(dut.xon_at, xon_at)
            level = min(depth, max(0, level + rng.choice([-1, 0, 1, 1] if cycle % 2000 < 1000
                                                          else [-1, -1, 0, 1])))
            if rng.random() < 0.005:
                level = rng.randrange(depth + 1)
            ctx.set(dut.level, level)
            got.append(ctx.get(dut.xoff))
            inputs.append((level, xoff_at, xon_at))
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    model = XoffModel()
    want = [model.step(*i) for i in inputs]
    assert got == want
    assert sum(1 for a, b in zip(got, got[1:]) if a != b) > 20


def test_reset_thresholds_are_the_parameters():
    dut = XoffMonitor(100, xoff_at=70, xon_at=30)
    seen = []

    async def tb(ctx):
        for level in (70, 71, 71, 31, 30, 30):
            ctx.set(dut.level, level)
            await ctx.tick()
            seen.append(ctx.get(dut.xoff))

    run_sim(dut, testbenches=[tb])
    assert seen == [0, 1, 1, 1, 0, 0]


def test_headroom_agrees_with_the_switch_model():
    rng = random.Random(3)
    for _ in range(500):
        args = (rng.choice([10, 25, 40, 100, 400, 12.5]), rng.randrange(60, 9600))
        kw = {"cable_ns": rng.choice([0, 5, 100, rng.uniform(0, 5000)]),
              "response_ns": rng.choice([0, 307.2, rng.uniform(0, 10000)])}
        assert pfc.headroom_bytes(*args, **kw) == pfc_headroom(*args, **kw)


def test_default_thresholds_by_hand():
    # 100 Gb/s, 1500-byte frames, 100 ns of cable, the peer's 394 quanta (2017.28 ns), no
    # pipeline: 12.5 B/ns * (2 * 100 + 2017.28) ns = 27716 bytes, a 60-byte frame (84 bytes
    # of line) and three 1500-byte frames (1524 each): 32372 bytes. At 64 bytes a beat the
    # worst use of the buffer is a 65-byte frame: 2 beats for 89 bytes of line, so
    # ceil(32372 * 2 / 89) = 728 beats, and one more: 729 kept free of 2048.
    assert headroom_beats(32372, 512, 1500) == 729
    assert xoff_thresholds(2048 * 64, 512, line_gbps=100, max_frame=1500, clk_hz=322.265625e6,
                           pipeline_cycles=0) == (2048 - 729, (2048 - 729) // 2)
    # at 64 bits a 65-byte frame takes 9 beats for 89 bytes; longer frames approach 1/8
    assert headroom_beats(89, 64, 65) == 9 + 1
    # our pipeline adds its time: 322 cycles at 322.265625 MHz are 999.17 ns, so the headroom
    # is ceil(12.5 * 3216.45) + 84 + 4572 = 44862 bytes instead of 32372; at 8 bytes a beat
    # the worst frame is 1497 bytes (188 beats for 1521 bytes of line): 5546 + 1 beats
    # instead of 4002 + 1
    a = xoff_thresholds(1 << 20, 64, line_gbps=100, max_frame=1500, clk_hz=322.265625e6,
                        pipeline_cycles=0)[0]
    b = xoff_thresholds(1 << 20, 64, line_gbps=100, max_frame=1500, clk_hz=322.265625e6,
                        pipeline_cycles=322)[0]
    assert (a, b) == ((1 << 17) - 4003, (1 << 17) - 5547)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_monitor_for_link_and_checks():
    m = XoffMonitor.for_link(2048, 512, line_gbps=100, max_frame=1500, clk_hz=322.265625e6,
                             pipeline_cycles=0)
    assert m.signature.members["xoff_at"].init == 1319
    assert m.signature.members["xon_at"].init == 659
    seen = []

    async def tb(ctx):
        for level in (1319, 1320, 660, 659, 0):
            ctx.set(m.level, level)
            await ctx.tick()
            seen.append(ctx.get(m.xoff))

    run_sim(m, testbenches=[tb])
    assert seen == [0, 1, 1, 0, 0]
    raises(ValueError, "depth_bytes: a buffer of 512 beats",
           lambda: xoff_thresholds(512 * 64, 512, line_gbps=100, max_frame=1500, clk_hz=3e8))
    raises(ValueError, "response_quanta: no default for 50 Gb/s",
           lambda: xoff_thresholds(1 << 20, 512, line_gbps=50, max_frame=1500, clk_hz=3e8))
    assert xoff_thresholds(1 << 20, 512, line_gbps=50, max_frame=1500, clk_hz=3e8,
                           response_quanta=100)[0] > 0
    raises(ValueError, "max_frame must be", lambda: headroom_beats(100, 64, 20))
    raises(ValueError, "depth must be a positive", lambda: XoffMonitor(0, xoff_at=0, xon_at=0))
    raises(ValueError, "xoff_at must be an integer in 0..10",
           lambda: XoffMonitor(10, xoff_at=11, xon_at=0))
    raises(ValueError, r"xon_at \(5\) must be below xoff_at \(5\)",
           lambda: XoffMonitor(10, xoff_at=5, xon_at=5))
