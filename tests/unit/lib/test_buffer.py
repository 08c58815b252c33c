import gc
import random

import pytest
from amaranth.hdl import unsigned
from amaranth.lib import data
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import RegisterSlice, StreamRegisterSlice
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.sim.models.packets import Packet, to_beats
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim

META = data.StructLayout({"tag": 16, "kind": 3})
WIDTHS = [64, 512]


def make_packets(width, seed):
    B = width // 8
    rng = random.Random(seed)
    lengths = list(range(0, 2 * B + 2)) + [rng.randrange(0, 8 * B) for _ in range(10)]
    rng.shuffle(lengths)
    return [Packet(rng.randbytes(n), {"tag": rng.getrandbits(16), "kind": rng.getrandbits(3)},
                   rng.random() < 0.2) for n in lengths]


def run_slice(dut, packets, *, idle, backpressure, seed):
    drv = StreamDriver(dut.i, dut.width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, dut.width, backpressure=backpressure, seed=seed + 1)
    mon = HandshakeMonitor(dut.i)

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()
        await ctx.tick().repeat(5)

    async def watchdog(ctx):
        for _ in range(20_000):
            await ctx.tick()
        raise AssertionError("register slice hung")

    run_sim(dut, testbenches=[tb], processes=[col.run, mon.run, watchdog])
    return col, mon.cycles


@pytest.mark.parametrize("bypass", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("idle, backpressure", [(0.3, 0.3), (0.0, 0.7), (0.7, 0.0)])
def test_register_slice_passes_packets(width, idle, backpressure, bypass):
    """Every packet (every length modulo the beat width, empty, errored) leaves unchanged with
    its meta, in order, nothing extra, under random idle cycles and backpressure."""
    packets = make_packets(width, width)
    dut = RegisterSlice(width, META, bypass=bypass)
    col, _ = run_slice(dut, packets, idle=idle, backpressure=backpressure, seed=3)
    assert col.packets == packets


@pytest.mark.parametrize("bypass, latency", [(False, 1), (True, 0)])
@pytest.mark.parametrize("width", WIDTHS)
def test_register_slice_full_rate_latency(width, bypass, latency):
    """One beat per cycle in and out, each leaving ``latency`` cycles after it came (the
    bypass: in the cycle it comes)."""
    packets = make_packets(width, width + 1 + bypass)
    dut = RegisterSlice(width, META, bypass=bypass)
    col, in_cycles = run_slice(dut, packets, idle=0.0, backpressure=0.0, seed=0)
    assert col.packets == packets
    total = sum(len(to_beats(p.data, width)) for p in packets)
    assert in_cycles == list(range(in_cycles[0], in_cycles[0] + total))
    assert col.beat_cycles == [c + latency for c in in_cycles]


def check_paths(dut, values, *, bypass, cycles=400, seed=0):
    """Each cycle: set random inputs, read every output, change every input, read again.
    Without the bypass no output may have moved (no combinational path from ``o.ready`` or
    from ``i``); with it ``i.ready`` may not have moved (a register, low only while two beats
    are held), and while the slice holds nothing ``o`` is the input itself. Also checks that
    payloads come out in order, none lost or duplicated."""
    rng = random.Random(seed)
    sent, got = [], []

    async def tb(ctx):
        pending = values(rng)
        for _ in range(cycles):
            valid = rng.random() < 0.7
            ready = rng.random() < 0.6
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, pending)
            ctx.set(dut.o.ready, ready)
            before = (ctx.get(dut.i.ready), ctx.get(dut.o.valid), ctx.get(dut.o.payload))
            i_ready, o_valid, o_payload = before
            held = len(sent) - len(got)
            if bypass:
                assert i_ready == (held < 2), f"ready {i_ready} with {held} held"
                if held == 0:
                    assert o_valid == valid
                    assert not valid or o_payload == ctx.get(dut.i.payload)
            ctx.set(dut.i.valid, not valid)
            ctx.set(dut.i.payload, values(rng))
            ctx.set(dut.o.ready, not ready)
            after = (ctx.get(dut.i.ready), ctx.get(dut.o.valid), ctx.get(dut.o.payload))
            if bypass:
                assert after[0] == i_ready, "combinational path to i.ready"
            else:
                assert before == after, "combinational path to an output"
            ctx.set(dut.i.valid, valid)
            ctx.set(dut.i.payload, pending)
            ctx.set(dut.o.ready, ready)
            if valid and i_ready:
                sent.append(ctx.get(dut.i.payload))
                pending = values(rng)
            if o_valid and ready:
                got.append(o_payload)
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    return sent, got


@pytest.mark.parametrize("bypass", [False, True])
@pytest.mark.parametrize("width", WIDTHS)
def test_register_slice_paths(width, bypass):
    dut = RegisterSlice(width, META, bypass=bypass)

    def beat(rng):
        return {"data": rng.getrandbits(width), "keep": rng.getrandbits(width // 8),
                "last": rng.getrandbits(1), "error": rng.getrandbits(1),
                "meta": {"tag": rng.getrandbits(16), "kind": rng.getrandbits(3)}}

    sent, got = check_paths(dut, beat, bypass=bypass, seed=width)
    assert len(sent) > 150
    assert got == sent[:len(got)] and len(sent) - len(got) <= 2


@pytest.mark.parametrize("bypass", [False, True])
@pytest.mark.parametrize("shape", [unsigned(16), data.StructLayout({"a": 5, "b": 1})])
def test_stream_register_slice_any_shape(shape, bypass):
    dut = StreamRegisterSlice(shape, bypass=bypass)
    bits = data.Layout.cast(shape).size if isinstance(shape, data.Layout) else shape.width

    def value(rng):
        v = rng.getrandbits(bits)
        return shape.from_bits(v) if isinstance(shape, data.Layout) else v

    sent, got = check_paths(dut, value, bypass=bypass, seed=bits)
    assert len(sent) > 150
    assert got == sent[:len(got)] and len(sent) - len(got) <= 2


@pytest.mark.parametrize("bypass", [False, True])
def test_register_slice_backpressure_timing(bypass):
    """With the output stalled the slice takes exactly two beats (output register and skid
    entry; with the bypass the first is offered as it comes) and then holds ``i.ready`` low;
    released, the two stored beats leave on consecutive cycles and the input's next beat,
    taken as the second leaves, right behind them."""
    dut = RegisterSlice(64, bypass=bypass)
    trace = []

    def look(ctx, phase):
        valid = ctx.get(dut.o.valid)
        trace.append((phase, ctx.get(dut.i.ready), valid,
                      ctx.get(dut.o.payload.data) if valid else None))

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        for n in range(4):
            ctx.set(dut.i.payload.data, n)
            look(ctx, "in")
            await ctx.tick()
        ctx.set(dut.i.payload.data, 7)
        ctx.set(dut.o.ready, 1)
        for _ in range(4):
            look(ctx, "out")
            taken = ctx.get(dut.i.valid) and ctx.get(dut.i.ready)
            await ctx.tick()
            if taken:
                ctx.set(dut.i.valid, 0)

    run_sim(dut, testbenches=[tb])
    first = ("in", 1, 1, 0) if bypass else ("in", 1, 0, None)
    assert trace == [first, ("in", 1, 1, 0), ("in", 0, 1, 0), ("in", 0, 1, 0),
                     ("out", 0, 1, 0), ("out", 1, 1, 1), ("out", 1, 1, 7), ("out", 1, 0, None)]


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_register_slice_signature():
    dut = RegisterSlice(128, META)
    members = dut.signature.members
    assert members["i"].flow == In and members["o"].flow == Out
    assert members["i"].signature.flip() == PacketSignature(128, META)
    assert members["o"].signature == PacketSignature(128, META)
    del dut, members
    gc.collect()


@pytest.mark.parametrize("args, exc, msg", [
    ((63,), ValueError, "width must be one of"),
    (("64",), TypeError, "integer"),
])
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_register_slice_parameter_errors(args, exc, msg):
    with pytest.raises(exc, match=msg):
        RegisterSlice(*args)
    gc.collect()   # the half-built component warns when collected: inside this test


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_stream_register_slice_bad_shape():
    with pytest.raises(TypeError, match="shape-castable"):
        StreamRegisterSlice("wide")
    with pytest.raises(TypeError, match="bypass must be a bool"):
        StreamRegisterSlice(8, bypass=1)
    gc.collect()
