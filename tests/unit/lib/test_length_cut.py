import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.lib.length_cut import LengthCut
from rocegen.sim.models.packets import Packet, to_beats
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, delivery_watchdog
from rocegen.sim.testing.harness import run_sim

META = data.StructLayout({"seq": 16})
AT = 2                                  # IPv4's total length


def reference(pkt, width, at=AT):
    """What LengthCut makes of ``pkt``: ``(output packet, short)``. The length is read from the
    first beat's lanes as the driver offers them (zero beyond the packet's bytes)."""
    B = width // 8
    n = len(pkt.data)
    head = (pkt.data[:B] + bytes(B))[:B]
    length = int.from_bytes(head[at:at + 2], "big")
    if length > n:
        return Packet(pkt.data, pkt.meta, True), True
    # the beat that reaches the length ends the output packet; the error is the input's only
    # when that beat is the input's last too
    cut_beat = max(0, -(-length // B) - 1)
    last_beat = max(0, -(-n // B) - 1)
    return Packet(pkt.data[:length], pkt.meta, pkt.error and cut_beat == last_beat), False


def with_length(body, length, at=AT):
    """``body`` with ``length`` written big-endian at ``at``, as far as ``body`` reaches."""
    buf = bytearray(body) + bytes(at + 2)
    buf[at:at + 2] = length.to_bytes(2, "big")
    return bytes(buf[:len(body)])


def make_packets(width, rng, count):
    """Random packets of 0..300 bytes whose length field is their own length, smaller (in the
    first beat, below the field's position, 0, on a beat boundary, inside a beat) or larger
    (by one byte, inside the last beat, by beats, 0xFFFF); a quarter errored."""
    B = width // 8
    packets = []
    for seq in range(count):
        n = rng.choice([rng.randrange(0, 301), rng.randrange(0, 2 * B + 2),
                        rng.randrange(1, 301 // B + 1) * B])
        kind = rng.choice(["equal", "smaller", "first_beat", "below_field", "zero",
                           "boundary", "larger", "larger_by_one", "larger_by_beats", "max"])
        if kind == "equal" or (n == 0 and kind in ("smaller", "first_beat", "boundary")):
            length = n
        elif kind == "smaller":
            length = rng.randrange(0, n)
        elif kind == "first_beat":
            length = rng.randrange(0, min(n, B + 1))
        elif kind == "below_field":
            length = rng.randrange(0, AT + 2)
        elif kind == "zero":
            length = 0
        elif kind == "boundary":
            length = B * rng.randrange(0, -(-n // B) + 1)
        elif kind == "larger":
            length = n + rng.randint(1, max(1, B - 1 - n % B))
        elif kind == "larger_by_one":
            length = n + 1
        elif kind == "larger_by_beats":
            length = n + rng.randint(1, 3) * B + rng.randrange(0, B)
        else:
            length = 0xFFFF
        body = with_length(rng.randbytes(n), length)
        packets.append(Packet(body, {"seq": seq}, error=rng.random() < 0.25))
    return packets


class JunkErrorDriver(StreamDriver):
    """A :class:`StreamDriver` that sets ``error`` at random on beats before the last, where it
    means nothing: what LengthCut makes the output's last beat must not depend on it."""

    async def send(self, ctx, packets):
        for pkt in packets:
            for d, keep, last in to_beats(pkt.data, self.width):
                while self.idle and self.rng.random() < self.idle:
                    ctx.set(self.stream.valid, 0)
                    await ctx.tick()
                error = pkt.error if last else self.rng.random() < 0.5
                ctx.set(self.stream.payload, {"data": d, "keep": keep, "last": last,
                                              "error": int(error), "meta": pkt.meta})
                ctx.set(self.stream.valid, 1)
                await ctx.tick().until(self.stream.ready)
        ctx.set(self.stream.valid, 0)


def run_cut(width, packets, *, idle, backpressure, seed, at=AT, junk_error=True):
    dut = LengthCut(width, META, field_at=at)
    driver = JunkErrorDriver if junk_error else StreamDriver
    drv = driver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    B = width // 8
    deadline = 20 * sum(max(1, -(-len(p.data) // B)) for p in packets) + 200
    shorts = []                         # the output packet each ``short`` pulse came with
    lonely = []                         # output beats without an input beat: latency > 0
    held = []                           # input beats held off while nothing was offered
    sent = [0]

    async def monitor(ctx):
        out_index = 0
        async for _, _, iv, ir, il, ov, orr, ol, short in ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload.last, dut.o.valid, dut.o.ready,
                dut.o.payload.last, dut.short):
            if short:
                if not (ov and orr and ol):
                    raise AssertionError(f"short pulsed without a last beat moving "
                                         f"(packet {out_index})")
                shorts.append(out_index)
            if ov and orr and ol:
                out_index += 1
            if ov and orr and not (iv and ir):
                lonely.append(out_index)
            if iv and not ir and not ov:
                held.append(sent[0])
            if iv and ir and il:
                sent[0] += 1

    async def send(ctx):
        await drv.send(ctx, packets)

    watchdog = delivery_watchdog(col, len(packets), lambda: sent[0], deadline)
    run_sim(dut, testbenches=[send, watchdog], processes=[col.run, monitor])
    assert lonely == []
    assert held == []                   # beats past the cut are dropped whatever o.ready
    return col, shorts


def check(width, packets, col, shorts):
    results = [reference(p, width) for p in packets]
    assert len(col.packets) == len(packets)
    for n, (p, (want, _), got) in enumerate(zip(packets, results, col.packets, strict=True)):
        field = int.from_bytes((p.data[:width // 8] + bytes(width // 8))[AT:AT + 2], "big")
        assert got == want, (f"packet {n}: {len(p.data)} bytes, length field {field}, "
                             f"error {p.error}: got {len(got.data)} bytes, error {got.error}; "
                             f"want {len(want.data)} bytes, error {want.error}")
    assert shorts == [n for n, (_, short) in enumerate(results) if short]


@pytest.mark.parametrize("width", [64, 128, 512])
def test_matches_reference(width):
    """Random idle input and output backpressure, junk ``error`` on beats before the last:
    every packet leaves cut to its length field, or whole and errored when shorter; ``short``
    pulses for exactly those; no latency."""
    rng = random.Random(width)
    packets = make_packets(width, rng, 300)
    results = [reference(p, width) for p in packets]
    # the cases the brief names all occur
    assert any(short for _, short in results)
    assert any(len(r.data) < len(p.data) and len(r.data) % (width // 8) for p, (r, _)
               in zip(packets, results))
    assert any(0 < len(r.data) < len(p.data) and len(r.data) % (width // 8) == 0
               for p, (r, _) in zip(packets, results))
    assert any(len(r.data) == 0 < len(p.data) for p, (r, _) in zip(packets, results))
    assert any(p.error and not r.error for p, (r, _) in zip(packets, results))
    assert any(p.error and r.error and len(r.data) < len(p.data)
               for p, (r, _) in zip(packets, results))
    col, shorts = run_cut(width, packets, idle=0.3, backpressure=0.3, seed=width + 1)
    check(width, packets, col, shorts)


@pytest.mark.parametrize("width", [64, 512])
def test_full_throughput(width):
    """No idle, output always ready: back-to-back packets, cut ones included."""
    rng = random.Random(width + 7)
    packets = make_packets(width, rng, 150)
    col, shorts = run_cut(width, packets, idle=0.0, backpressure=0.0, seed=3, junk_error=False)
    check(width, packets, col, shorts)


@pytest.mark.parametrize("width", [64, 512])
def test_short_within_last_beat(width):
    """A packet one byte shorter than its length, its last beat partial: whole, errored,
    ``short`` pulses."""
    rng = random.Random(width + 11)
    B = width // 8
    packets = []
    for seq, n in enumerate([5, B - 1, B + 5, 2 * B + 3, 200]):
        packets.append(Packet(with_length(rng.randbytes(n), n + 1), {"seq": seq}))
    col, shorts = run_cut(width, packets, idle=0.0, backpressure=0.0, seed=5)
    check(width, packets, col, shorts)


def test_field_at_last_lanes():
    """The length field in the first beat's last two lanes."""
    width = 64
    rng = random.Random(13)
    packets = []
    for seq in range(60):
        n = rng.randrange(8, 40)
        length = rng.choice([n, rng.randrange(0, n), n + rng.randint(1, 9)])
        packets.append(Packet(with_length(rng.randbytes(n), length, at=6), {"seq": seq},
                              error=rng.random() < 0.3))
    col, shorts = run_cut(width, packets, idle=0.2, backpressure=0.2, seed=6, at=6)
    results = [reference(p, width, at=6) for p in packets]
    assert col.packets == [r for r, _ in results]
    assert shorts == [n for n, (_, short) in enumerate(results) if short]


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        for width in (64, 512):
            B = width // 8
            LengthCut(width, META, field_at=0)
            LengthCut(width, META, field_at=B - 2)
            for bad in (-1, B - 1, B):
                with pytest.raises(ValueError, match="must lie in the first beat"):
                    LengthCut(width, META, field_at=bad)
        for bad in (2.0, "2", None, True):
            with pytest.raises(TypeError, match="field_at must be an integer"):
                LengthCut(64, META, field_at=bad)
        with pytest.raises(ValueError, match="width must be one of"):
            LengthCut(48, META, field_at=2)
        with pytest.raises(TypeError, match="integer number of bits"):
            LengthCut("64", META, field_at=2)
        with pytest.raises(TypeError, match="meta must be a data.Layout"):
            LengthCut(64, {"seq": 16}, field_at=2)
        gc.collect()
