"""Forward registers: packets unchanged under idle cycles and backpressure, one beat per cycle
with latency one, no combinational path from ``i`` to ``o``, parameters checked."""

import gc
import random

import pytest
from amaranth.hdl import unsigned
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.pipe import ForwardRegister, StreamForwardRegister
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.sim.models.packets import to_beats
from rocegen.sim.testing.harness import run_sim
from tests.unit.lib.test_buffer import META, WIDTHS, make_packets, run_slice


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("idle, backpressure", [(0.3, 0.3), (0.0, 0.7), (0.7, 0.0)])
def test_forward_register_passes_packets(width, idle, backpressure):
    packets = make_packets(width, width + 7)
    dut = ForwardRegister(width, META)
    col, _ = run_slice(dut, packets, idle=idle, backpressure=backpressure, seed=5)
    assert col.packets == packets


@pytest.mark.parametrize("width", WIDTHS)
def test_forward_register_full_rate_latency_one(width):
    packets = make_packets(width, width + 2)
    dut = ForwardRegister(width, META)
    col, in_cycles = run_slice(dut, packets, idle=0.0, backpressure=0.0, seed=0)
    assert col.packets == packets
    total = sum(len(to_beats(p.data, width)) for p in packets)
    assert in_cycles == list(range(in_cycles[0], in_cycles[0] + total))
    assert col.beat_cycles == [c + 1 for c in in_cycles]


def test_forward_register_outputs_are_registers():
    """``o`` does not move when ``i`` changes within a cycle; ``i.ready`` is ``o.ready`` or an
    empty register; values leave in order, none lost or duplicated."""
    dut = StreamForwardRegister(unsigned(16))
    rng = random.Random(4)
    sent, got = [], []

    async def tb(ctx):
        pending = rng.getrandbits(16)
        for _ in range(300):
            valid, ready = rng.random() < 0.7, rng.random() < 0.6
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, pending)
            ctx.set(dut.o.ready, ready)
            before = (ctx.get(dut.o.valid), ctx.get(dut.o.payload))
            i_ready = ctx.get(dut.i.ready)
            assert i_ready == (ready or not before[0])
            ctx.set(dut.i.valid, not valid)
            ctx.set(dut.i.payload, rng.getrandbits(16))
            assert (ctx.get(dut.o.valid), ctx.get(dut.o.payload)) == before
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, pending)
            if valid and i_ready:
                sent.append(pending)
                pending = rng.getrandbits(16)
            if before[0] and ready:
                got.append(before[1])
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert len(sent) > 100
    assert got == sent[:len(got)] and len(sent) - len(got) <= 1


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_forward_register_signature_and_errors():
    dut = ForwardRegister(128, META)
    members = dut.signature.members
    assert members["i"].flow == In and members["o"].flow == Out
    assert members["o"].signature == PacketSignature(128, META)
    with pytest.raises(ValueError, match="width must be one of"):
        ForwardRegister(63)
    with pytest.raises(TypeError, match="shape-castable"):
        StreamForwardRegister("wide")
    del dut, members
    gc.collect()
