import random

import pytest
from amaranth.hdl import Module

from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.sim.models.lib.framing import depacketize, packetize
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import (
    HandshakeMonitor,
    OfferMonitor,
    StreamCollector,
    StreamDriver,
    meta_dict,
)
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.headers import Header


def synthetic_header(length):
    # sub-byte fields at the front so that bit order inside bytes is exercised
    return Header("h", [("ver", 4), ("flags", 4), ("kind", 8), ("body", 8 * length - 16)])


def random_values(header, rng):
    return {name: rng.getrandbits(bits) for name, bits in header.fields}


def lengths_for(width, header_len):
    B = width // 8
    base = list(range(0, 2 * B + 2)) + [3 * B + 1, 5 * B - 1]
    return sorted(set(base))


def run_packetizer(width, header, packets, idle, backpressure, seed):
    dut = Packetizer(header, width, meta=Packetizer_meta(header))
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    done = []

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()
        done.append(True)

    run_sim(dut, testbenches=[tb], processes=[col.run])
    assert done
    return col


def Packetizer_meta(header):
    from amaranth.lib import data
    return data.StructLayout({header.name: header.layout})


@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("header_len", [8, 14, 20, 28, 42, 54, 64])
def test_packetizer_matches_model(width, header_len):
    rng = random.Random(width * 100 + header_len)
    header = synthetic_header(header_len)
    packets = []
    for n in lengths_for(width, header_len):
        values = random_values(header, rng)
        packets.append(Packet(rng.randbytes(n), {"h": values}, error=rng.random() < 0.2))
    col = run_packetizer(width, header, packets, idle=0.3, backpressure=0.3, seed=header_len)
    assert len(col.packets) == len(packets)
    for sent, got in zip(packets, col.packets):
        assert got.data == packetize(header, sent.meta["h"], sent.data)
        assert got.error == sent.error
        assert got.meta == {}


def run_depacketizer(width, header, frames, idle, backpressure, seed):
    dut = Depacketizer(header, width)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    runts = []
    expected = sum(depacketize(header, f.data) is not None for f in frames)

    async def count_runts(ctx):
        async for _, _, runt in ctx.tick().sample(dut.runt):
            if runt:
                runts.append(1)

    async def tb(ctx):
        await drv.send(ctx, frames)
        while len(col.packets) < expected:
            await ctx.tick()
        for _ in range(4):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, count_runts])
    return col, len(runts)


@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("header_len", [8, 14, 20, 28, 42, 54, 64])
def test_depacketizer_matches_model(width, header_len):
    rng = random.Random(width * 7 + header_len)
    header = synthetic_header(header_len)
    frames = [Packet(rng.randbytes(n), error=rng.random() < 0.2)
              for n in range(0, header_len + 2 * (width // 8) + 2)]
    frames += [Packet(rng.randbytes(rng.randrange(header_len, 600))) for _ in range(10)]
    rng.shuffle(frames)
    col, runts = run_depacketizer(width, header, frames, idle=0.3, backpressure=0.3, seed=header_len)
    expected = []
    for f in frames:
        res = depacketize(header, f.data)
        if res is not None:
            expected.append((res, f.error))
    assert runts == len(frames) - len(expected)
    assert len(col.packets) == len(expected)
    for ((values, payload), error), got in zip(expected, col.packets):
        assert got.data == payload
        assert got.meta == {"h": values}
        assert got.error == error


@pytest.mark.parametrize("width", [64, 512])
def test_roundtrip_back_to_back_full_rate(width):
    """With no idle cycles and no backpressure, packetizer then depacketizer carry every packet
    intact and the packetizer output is busy on every cycle of a burst."""
    header = synthetic_header(42)
    rng = random.Random(5)
    m = Module()
    pk = Packetizer(header, width, meta=Packetizer_meta(header))
    dp = Depacketizer(header, width)
    m.submodules.pk, m.submodules.dp = pk, dp
    m.d.comb += [dp.i.payload.data.eq(pk.o.payload.data), dp.i.payload.keep.eq(pk.o.payload.keep),
                 dp.i.payload.last.eq(pk.o.payload.last), dp.i.payload.error.eq(pk.o.payload.error),
                 dp.i.valid.eq(pk.o.valid), pk.o.ready.eq(dp.i.ready)]
    packets = [Packet(rng.randbytes(rng.randrange(0, 700)), {"h": random_values(header, rng)})
               for _ in range(40)]
    drv = StreamDriver(pk.i, width)
    col = StreamCollector(dp.o, width)
    busy = []

    async def watch(ctx):
        async for _, _, v, r in ctx.tick().sample(pk.o.valid, pk.o.ready):
            busy.append(bool(v and r))

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()

    run_sim(m, testbenches=[tb], processes=[col.run, watch])
    assert [p.data for p in col.packets] == [p.data for p in packets]
    assert [p.meta["h"] for p in col.packets] == [p.meta["h"] for p in packets]
    first = busy.index(True)
    B = width // 8
    total = sum(-(-(len(p.data) + 42) // B) for p in packets)
    assert busy[first:first + total] == [True] * total


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("header_len", [16, 48, 64])
def test_depacketizer_never_holds_the_input_while_the_output_is_ready(width, header_len):
    """The documented throughput, with packets that are exactly the header among them (each
    owes an empty output beat): with ``o.ready`` always high, ``i.ready`` never falls, so an
    always-ready source loses nothing."""
    rng = random.Random(width + header_len)
    header = synthetic_header(header_len)
    frames = [Packet(rng.randbytes(rng.choice([header_len, header_len, header_len + 1,
                                               header_len + rng.randrange(200)])))
              for _ in range(60)]
    dut = Depacketizer(header, width)
    drv = StreamDriver(dut.i, width, idle=0.2, seed=width)
    col = StreamCollector(dut.o, width)
    held = []

    async def watch(ctx):
        async for _, _, r in ctx.tick().sample(dut.i.ready):
            held.append(not r)

    async def tb(ctx):
        await drv.send(ctx, frames)
        while len(col.packets) < len(frames):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, watch])
    assert not any(held)
    assert [p.data for p in col.packets] == [depacketize(header, f.data)[1] for f in frames]
    assert [p.meta["h"] for p in col.packets] == [depacketize(header, f.data)[0] for f in frames]


@pytest.mark.parametrize("pass_short", [True, False])
@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("header_len", [14, 20, 42])
def test_depacketizer_passes_a_one_beat_packet_in_its_cycle(width, header_len, pass_short):
    """With ``pass_short``, a packet whose header ends in its last beat leaves in the cycle
    that beat is taken when the output is free (without, a cycle later); under backpressure the
    beat offered and not taken stays offered, its parsed header included, until it is taken."""
    rng = random.Random(width + header_len)
    header = synthetic_header(header_len)
    B = width // 8
    ends_header = (header_len // B + 1) * B        # the packets whose header ends in their last beat
    frames = [Packet(rng.randbytes(rng.randrange(header_len, ends_header + 1)),
                     error=rng.random() < 0.2) for _ in range(40)]
    frames += [Packet(rng.randbytes(rng.randrange(ends_header + 1, ends_header + 3 * B)))
               for _ in range(10)]
    rng.shuffle(frames)
    for backpressure in (0.0, 0.5):
        dut = Depacketizer(header, width, pass_short=pass_short)
        drv = StreamDriver(dut.i, width, idle=0.5, seed=width)
        col = StreamCollector(dut.o, width, backpressure=backpressure, seed=header_len)
        taken = HandshakeMonitor(dut.i)
        offers = OfferMonitor(dut.o)
        metas = []

        async def watch_meta(ctx, dut=dut, metas=metas):
            pending = None
            async for _, _, v, r, meta in ctx.tick().sample(dut.o.valid, dut.o.ready,
                                                           dut.o.payload.meta):
                if pending is not None:
                    assert v and meta_dict(meta) == pending, "held beat's header changed"
                    metas.append(pending)
                pending = meta_dict(meta) if v and not r else None

        async def tb(ctx, drv=drv, col=col):
            await drv.send(ctx, frames)
            while len(col.packets) < len(frames):
                await ctx.tick()

        run_sim(dut, testbenches=[tb], processes=[col.run, taken.run, offers.run, watch_meta])
        expected = [depacketize(header, f.data) for f in frames]
        assert [p.data for p in col.packets] == [payload for _, payload in expected]
        assert [p.meta["h"] for p in col.packets] == [values for values, _ in expected]
        assert [p.error for p in col.packets] == [f.error for f in frames]
        # the input beat that ends each packet, and the output beat that ends it
        ends, k = [], 0
        for f in frames:
            k += -(-len(f.data) // B)
            ends.append(taken.cycles[k - 1])
        one_beat = [len(f.data) <= ends_header for f in frames]
        if backpressure:
            assert offers.held and metas      # (the rule was exercised)
        else:
            lags = [last - end for (_, last), end in zip(col.spans, ends)]
            assert all(lag >= 0 for lag in lags)
            # (a one-beat packet that comes while the packet before still leaves waits for it)
            free = [True] + [before[1] < end for before, end in zip(col.spans, ends[1:])]
            at_once = [lag for lag, one, f in zip(lags, one_beat, free) if one and f]
            assert len(at_once) > 10 and at_once == [0 if pass_short else 1] * len(at_once)


def test_depacketizer_pass_short_must_be_a_bool():
    with pytest.raises(TypeError, match="pass_short must be a bool, not 1"):
        Depacketizer(synthetic_header(14), 512, pass_short=1)
