"""The simulation-only capture ring (sim/testing/capture.py) against its reference model
(sim/models/lib/capture.py), cycle by cycle: ready, the stored entries and the counters, with random
valid, a line-rate budget, random backpressure and a slow reader, at two payload widths."""

import random

import pytest
from amaranth.sim import Simulator

from rocegen.sim.models.lib.capture import StreamCaptureModel, xorshift32
from rocegen.sim.testing.capture import CREDIT_FRAC_BITS, StreamCapture


def test_xorshift_known_values():
    # 1 -> 270369 -> 67634689 (the xorshift32 sequence from seed 1 with shifts 13, 17, 5)
    assert xorshift32(1) == 270369
    assert xorshift32(270369) == 67634689


def _run(width, depth, *, budget, step, threshold, reader_lag, seed, cycles=1500):
    rng = random.Random(seed)
    bytes_width = 4 if budget else 0
    dut = StreamCapture(width, depth, bytes_width=bytes_width, frame_overhead=24 if budget else 0,
                        max_credit=16 if budget else 0)
    model = StreamCaptureModel(depth, frac_bits=CREDIT_FRAC_BITS, frame_overhead=24 if budget else 0,
                               max_credit=16 if budget else 0, budget=budget)
    seen = {"taken": 0}

    async def bench(ctx):
        rd = 0
        pending = []
        for cyc in range(cycles):
            valid = int(rng.random() < 0.8)
            payload = rng.getrandbits(width)
            last = int(rng.random() < 0.2)
            nbytes = rng.randrange(1, 9) if budget else 0
            sd = 0x1234 if cyc < cycles // 2 else 0xBEEF     # a reseed half way
            ctx.set(dut.i_valid, valid)
            ctx.set(dut.i_payload, payload)
            ctx.set(dut.i_last, last)
            ctx.set(dut.i_bytes, nbytes)
            ctx.set(dut.rd, rd)
            ctx.set(dut.credit_step, step)
            ctx.set(dut.bp_threshold, threshold)
            ctx.set(dut.seed, sd)
            assert ctx.get(dut.i_ready) == model.ready(rd), f"ready differs at cycle {cyc}"
            assert ctx.get(dut.count) == model.count
            assert ctx.get(dut.frames) == model.frames
            assert ctx.get(dut.cycle) == model.cycle
            assert ctx.get(dut.starved) == model.starved
            took = model.step(valid=valid, payload=payload, last=last, nbytes=nbytes, rd=rd,
                              credit_step=step, bp_threshold=threshold, seed=sd)
            seen["taken"] += took
            await ctx.tick()
            if took:
                pending.append(model.count - 1)
            # the reader consumes entries `reader_lag` cycles late, checking each one
            while pending and rng.random() > reader_lag:
                k = pending.pop(0)
                got = ctx.get(dut.mem.data[k % depth])
                want_payload, want_cycle = model.entries[k]
                assert got == want_payload | (want_cycle << width), f"entry {k} differs"
                rd = k + 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen["taken"], model


@pytest.mark.parametrize("width", [8, 70])
@pytest.mark.parametrize("budget,step,threshold", [
    (False, 0, 0),                          # always ready while the ring has room
    (False, 0, 20000),                      # random backpressure
    (True, (5 << CREDIT_FRAC_BITS) // 2, 0),    # 2.5 bytes per cycle
    (True, 3 << CREDIT_FRAC_BITS, 9000),    # budget and backpressure
])
def test_capture_matches_its_model(width, budget, step, threshold):
    taken, model = _run(width, 16, budget=budget, step=step, threshold=threshold, reader_lag=0.5,
                        seed=width * 7 + threshold)
    assert taken > 100            # the ring took beats: the comparison covered something
    assert model.starved > 10     # (random valid): the underrun count was compared too


def test_a_slow_reader_fills_the_ring_and_it_waits():
    taken, model = _run(16, 4, budget=False, step=0, threshold=0, reader_lag=0.97, seed=3)
    assert taken > 20
    assert model.full_stalls > 100        # its ready fell for want of room, again and again


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="power of two"):
        StreamCapture(8, 12)
    with pytest.raises(ValueError, match="width"):
        StreamCapture(0, 16)
