"""The endpoint's PFC port (PfcPort): a pause frame for our priority holds the transmit stream at
its next frame boundary (never inside a frame) until its time is over or an XON comes; one for
another priority changes nothing; a buffer above its XOFF threshold makes it send XOFF for our
priority (``"core"``: a PFC frame in the stream; ``"mac"``: the ``pause_out`` bit) and XON
once it drains below the XON threshold. Random idle cycles and backpressure, W = 64 and 512.
Pause frames are built and parsed with ``rocegen.wire.pfc``; the expected times are worked out
here from the quantum (512 bit times)."""

import random

import pytest

from rocegen.gateware.mac.pfc import PfcPort, lossless_depth
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.wire import pfc as P

LOCAL = 0x02_00_00_00_00_01
PEER = 0x02_00_00_00_00_99
CLK = {64: 156_250_000, 512: 322_265_625}
LINE = {64: 10, 512: 100}
MAX_FRAME = 4178


def frame(k, n):
    return bytes([k & 0xFF]) * n


def rx_feed(ctx, dut, data, width):
    """Put ``data`` on the watched receive stream, a beat per cycle (generator of beats)."""
    B = width // 8
    beats = [data[i:i + B] for i in range(0, len(data), B)]
    for k, b in enumerate(beats):
        ctx.set(dut.rx_valid, 1)
        ctx.set(dut.rx_ready, 1)
        ctx.set(dut.rx_data, int.from_bytes(b.ljust(B, b"\0"), "little"))
        ctx.set(dut.rx_keep, (1 << len(b)) - 1)
        ctx.set(dut.rx_last, k == len(beats) - 1)
        yield
    ctx.set(dut.rx_valid, 0)


@pytest.mark.parametrize("width", [64, 512])
def test_core_obeys_pause_frames_and_sends_xoff_and_xon(width):
    rng = random.Random(width)
    depth = lossless_depth(width, line_gbps=LINE[width], max_frame=MAX_FRAME, clk_hz=CLK[width])
    dut = PfcPort(width, CLK[width], LINE[width], mode="core", buffers={"rx": depth},
                  max_frame=MAX_FRAME, prio=3)
    xoff_at, xon_at = dut.thresholds()["rx"]
    assert 0 < xon_at < xoff_at < depth
    frames = [frame(k, rng.randrange(60, 1500)) for k in range(60)]
    drv = StreamDriver(dut.i, width, idle=0.2, seed=1)
    col = StreamCollector(dut.o, width, backpressure=0.2, seed=2)
    starts = []
    quantum_cycles = 512 / (LINE[width] * 1e9) * CLK[width]
    marks = {}

    async def watch(ctx):
        cycle, inside = 0, False
        async for _, _, v, r, last, paused in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload.last, dut.paused):
            cycle += 1
            if paused and "paused" not in marks:
                marks["paused"] = cycle
            if v and r:
                if not inside:
                    starts.append(cycle)
                inside = not last

    async def tb(ctx):
        ctx.set(dut.local_mac, LOCAL)
        await ctx.tick().repeat(200)
        # a PFC frame for another priority, then for ours (200 quanta)
        for data in (P.pfc_frame(PEER, {5: 0xFFFF}), P.pfc_frame(PEER, {3: 200})):
            for _ in rx_feed(ctx, dut, data, width):
                await ctx.tick()
            await ctx.tick().repeat(20)
        await ctx.tick().repeat(int(200 * quantum_cycles) + 400)
        # our buffer fills past XOFF, then drains below XON
        ctx.set(dut.level_rx, xoff_at + 1)
        await ctx.tick().repeat(300)
        ctx.set(dut.level_rx, xon_at + 1)
        await ctx.tick().repeat(300)
        ctx.set(dut.level_rx, xon_at)
        await ctx.tick().repeat(600)

    async def send(ctx):
        await drv.send(ctx, [Packet(f) for f in frames])

    run_sim(dut, testbenches=[tb, send], processes=[col.run, watch], deadline_cycles=400_000)
    out = [bytes(p.data) for p in col.packets]
    data = [f for f in out if not P.is_mac_control(f)]
    control = [P.parse(f) for f in out if P.is_mac_control(f)]
    assert data == frames                       # every frame, whole, in order
    # one XOFF for priority 3 (the largest time), then one XON (time 0)
    assert [(f.src, dict(f.classes)) for f in control] == \
        [(LOCAL, {3: P.MAX_QUANTA}), (LOCAL, {3: 0})]
    # held while paused: no frame started in the pause (after the reaction)
    t0 = marks["paused"]
    pause_cycles = -(-200 * 512 * CLK[width] // (LINE[width] * 10**9))
    assert not [s for s in starts if t0 + 1 <= s < t0 + pause_cycles - 1]
    assert [s for s in starts if s >= t0 + pause_cycles]     # and sending again after


@pytest.mark.parametrize("width", [64, 512])
def test_mac_mode_follows_the_mac_levels(width):
    depth = lossless_depth(width, line_gbps=LINE[width], max_frame=MAX_FRAME, clk_hz=CLK[width])
    dut = PfcPort(width, CLK[width], LINE[width], mode="mac", buffers={"a": depth, "b": depth},
                  max_frame=MAX_FRAME, prio=6)
    xoff_at, xon_at = dut.thresholds()["a"]
    frames = [frame(k, 1000) for k in range(200)]
    drv = StreamDriver(dut.i, width, idle=0.1, seed=3)
    col = StreamCollector(dut.o, width, backpressure=0.1, seed=4)
    starts, outs, now, marks = [], [], [0], {}

    async def watch(ctx):
        inside = False
        async for _, _, v, r, last, po in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload.last, dut.pause_out):
            now[0] += 1
            outs.append(po)
            if v and r:
                if not inside:
                    starts.append(now[0])
                inside = not last

    async def tb(ctx):
        steps = [(100, "pause_in", 1 << 2, "other"), (300, "pause_in", 1 << 6, "ours"),
                 (700, "pause_in", 0, "resume"), (800, "level_b", xoff_at + 1, "full"),
                 (900, "enable", 0, "off"), (1000, "enable", 1, "on"),
                 (1100, "level_b", xon_at, "drained"), (1300, None, None, "end")]
        for at, port, value, name in steps:
            await ctx.tick().repeat(at - now[0])
            if port:
                ctx.set(getattr(dut, port), value)
            marks[name] = now[0]

    async def send(ctx):
        await drv.send(ctx, [Packet(f) for f in frames])

    run_sim(dut, testbenches=[tb], processes=[col.run, watch, send], deadline_cycles=200_000)
    assert [bytes(p.data) for p in col.packets] == frames[:len(col.packets)]
    held = [s for s in starts if marks["ours"] + 1 < s <= marks["resume"]]
    assert not held                                         # no new frame while ours paused
    assert [s for s in starts if marks["other"] < s <= marks["ours"]]  # another: not held
    assert [s for s in starts if s > marks["resume"] + 1]              # sending again
    assert sorted(set(outs)) == [0, 1 << 6]
    on = [k + 1 for k, v in enumerate(outs) if v]
    assert on[0] == marks["full"] + 2     # registered: in the cycle after the level's (sampled)
    assert not any(outs[k - 1] for k in range(marks["off"] + 2, marks["on"] + 1))
    assert all(outs[k - 1] for k in range(marks["on"] + 2, marks["drained"] + 1))
    assert not any(outs[k - 1] for k in range(marks["drained"] + 2, marks["end"] + 1))
