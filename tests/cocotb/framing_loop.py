"""cocotb testbench: depacketizer -> packetizer loop driven by cocotbext-axi with idle cycles and
backpressure; every frame of at least the header length must come back byte for byte."""

import itertools
import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from rocegen.sim.testing.cocotb_helpers import pauses

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])


@cocotb.test()
async def loop_every_alignment(dut):
    width, hlen = PARAMS["width"], PARAMS["header_len"]
    B = width // 8
    rng = random.Random(int(os.environ.get("SEED", "1")))
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    src.log.setLevel("WARNING")
    sink.log.setLevel("WARNING")
    src.set_pause_generator(pauses(rng, 0.3))
    sink.set_pause_generator(pauses(rng, 0.3))
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)

    lengths = list(range(0, hlen + 3 * B + 1)) + [rng.randrange(hlen, 3000) for _ in range(20)]
    frames = [rng.randbytes(n) for n in lengths]
    for f in frames:
        await src.send(AxiStreamFrame(f, tuser=0) if f else AxiStreamFrame(b"\0", tkeep=[0]))
    expected = [f for f in frames if len(f) >= hlen]
    for exp in expected:
        got = await sink.recv()
        keep = itertools.chain(got.tkeep or [], itertools.repeat(1))
        data = bytes(b for b, k in zip(got.tdata, keep) if k) if got.tkeep else bytes(got.tdata)
        assert data == exp, f"frame of {len(exp)} bytes came back as {len(data)} bytes"
    await ClockCycles(dut.clk, 10)
    assert sink.empty()
    assert int(dut.runts.value) == len(frames) - len(expected)
