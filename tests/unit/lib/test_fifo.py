import gc
import random
import re

import pytest
from amaranth.lib import data

from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.sim.models.lib.fifo import beat_count, check_fifo_invariants, packet_fifo
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import (
    HandshakeMonitor,
    OfferMonitor,
    StreamCollector,
    StreamDriver,
    meta_dict,
)
from rocegen.sim.testing.harness import run_sim

META = data.StructLayout({"tag": 16, "kind": 3})
WIDTHS = [64, 512]


def rand_meta(rng):
    return {"tag": rng.getrandbits(16), "kind": rng.getrandbits(3)}


def every_length(width):
    """Lengths covering every value modulo the beat width, 1 and 2 beats long, and empty."""
    return list(range(0, 2 * (width // 8) + 2))


def make_packets(rng, lengths, *, error_rate=0.0, meta=True):
    return [Packet(rng.randbytes(n), rand_meta(rng) if meta else {}, rng.random() < error_rate)
            for n in lengths]


def watchdog(limit):
    """A background process that fails the simulation if it is still running after ``limit``
    cycles (a stuck ``i.ready`` would otherwise hang a driver forever)."""
    async def process(ctx):
        for _ in range(limit):
            await ctx.tick()
        raise AssertionError(f"still running after {limit} cycles: the FIFO hung")
    return process


class Run:
    """Sends ``packets`` into a PacketFifo and collects what leaves, counting strobes.

    ``stall_input``: ``o.ready`` is held low until the last input beat is accepted (the
    deterministic overflow scenario); ``level_after_input`` is ``level`` just after that.
    The run ends once every packet has either left or been counted as a drop, plus a few idle
    cycles to catch anything extra; a watchdog fails it instead of hanging."""

    def __init__(self, dut, packets, *, idle=0.0, backpressure=0.0, seed=0, stall_input=False):
        w = dut.width
        self.offers = OfferMonitor(dut.o)
        # generous bound: every beat delayed by idle cycles and backpressure, plus draining
        max_cycles = 2000 + 20 * sum(beat_count(p, w) for p in packets)
        self.drv = StreamDriver(dut.i, w, idle=idle, seed=seed)
        self.col = StreamCollector(dut.o, w, backpressure=1.0 if stall_input else backpressure,
                                   seed=seed + 1)
        self.drop_error = 0
        self.drop_overflow = 0
        self.level_after_input = None
        self.max_level = 0
        self.ready_low = 0            # cycles with i.ready low

        async def monitor(ctx):
            async for _, _, de, do, lv, ir in ctx.tick().sample(
                    dut.drop_error, dut.drop_overflow, dut.level, dut.i.ready):
                self.drop_error += de
                self.drop_overflow += do
                self.max_level = max(self.max_level, lv)
                self.ready_low += not ir

        async def tb(ctx):
            await self.drv.send(ctx, packets)
            self.level_after_input = ctx.get(dut.level)
            self.col.backpressure = backpressure
            while (len(self.col.packets) + self.drop_error + self.drop_overflow < len(packets)):
                await ctx.tick()
            await ctx.tick().repeat(3 * dut.depth + 10)

        self.out = self.col.packets
        run_sim(dut, testbenches=[tb], processes=[self.col.run, monitor, self.offers.run,
                                                  watchdog(max_cycles)])
        self.out = self.col.packets


def check_model(run, model):
    assert run.out == model.out
    assert (run.drop_error, run.drop_overflow) == (model.drop_error, model.drop_overflow)


# --- wait mode: timing-independent outcome, so compared with the model under random timing ----

@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("drop_errors, meta_depth", [(True, None), (False, 3)])
def test_wait_mode_matches_model(width, drop_errors, meta_depth):
    depth = 8
    B = width // 8
    rng = random.Random(width + (meta_depth or 0))
    lengths = every_length(width)
    # around the capacity: depth beats fits, one byte more never does
    lengths += [depth * B - 1, depth * B, depth * B + 1, 3 * depth * B]
    rng.shuffle(lengths)
    packets = make_packets(rng, lengths, error_rate=0.2)
    # errored packets whose beats before the last just fit / do not fit
    packets.insert(5, Packet(rng.randbytes(depth * B + 1), rand_meta(rng), True))
    packets.insert(9, Packet(rng.randbytes((depth + 1) * B + 1), rand_meta(rng), True))
    dut = PacketFifo(width, depth, META, overflow="wait", drop_errors=drop_errors,
                     meta_depth=meta_depth)
    run = Run(dut, packets, idle=0.3, backpressure=0.4, seed=width)
    model = packet_fifo(packets, width, depth, overflow="wait", drop_errors=drop_errors,
                        meta_depth=dut.meta_depth)
    assert model.drop_overflow >= 3 and len(model.out) > len(packets) // 2
    if drop_errors:
        assert model.drop_error >= 1
    else:
        assert any(p.error for p in model.out)
    check_model(run, model)
    assert run.max_level <= depth


# --- drop mode, output stalled while packets arrive: exact outcome ----------------------------

@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("depth, meta_depth, drop_errors", [(16, None, True), (16, 3, True),
                                                          (8, None, False), (2, 1, True)])
def test_drop_mode_stalled_matches_model(width, depth, meta_depth, drop_errors):
    B = width // 8
    rng = random.Random(depth * width + (meta_depth or 0))
    lengths = [rng.choice([0, 1, B - 1, B, B + 1, 2 * B, rng.randrange(0, 5 * B)])
               for _ in range(40)]
    packets = make_packets(rng, lengths, error_rate=0.2)
    dut = PacketFifo(width, depth, META, drop_errors=drop_errors, meta_depth=meta_depth)
    run = Run(dut, packets, idle=0.3, backpressure=0.3, seed=depth, stall_input=True)
    model = packet_fifo(packets, width, depth, drop_errors=drop_errors, meta_depth=dut.meta_depth)
    assert model.drop_overflow >= 3 and len(model.out) >= min(2, dut.meta_depth)
    check_model(run, model)
    assert run.level_after_input == model.level
    assert run.max_level <= depth
    assert run.ready_low == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_drop_mode_fills_exactly(width):
    """Packets that fill the memory to the last beat are kept; the next one (even one beat) is
    dropped, and an errored packet whose beats before the last fit counts as an error drop."""
    B = width // 8
    depth = 8
    rng = random.Random(3)
    packets = [Packet(rng.randbytes(3 * B)), Packet(rng.randbytes(4 * B + 1)),
               Packet(rng.randbytes(B), error=True),     # 0 beats before its last: error drop
               Packet(b""),                              # 1 beat, memory full: overflow
               Packet(rng.randbytes(2 * B + 3))]         # overflow
    dut = PacketFifo(width, depth)
    run = Run(dut, packets, stall_input=True)
    model = packet_fifo(packets, width, depth)
    assert [len(p.data) for p in model.out] == [3 * B, 4 * B + 1]
    assert (model.drop_error, model.drop_overflow, model.level) == (1, 2, depth)
    check_model(run, model)
    assert run.level_after_input == depth


@pytest.mark.parametrize("overflow", ["drop", "wait"])
def test_drop_strobes_are_registered_pulses(overflow):
    """Each dropped packet pulses its strobe once, in the cycle after the beat that decided the
    drop was accepted (the last beat for an error, the first beat without room for an
    overflow). In drop mode the output is stalled; in wait mode it runs freely."""
    width, depth = 64, 4
    B = width // 8
    rng = random.Random(2)
    packets = [Packet(rng.randbytes(B)),                      # beat 0: kept
               Packet(rng.randbytes(2 * B), error=True),      # beats 1-2: error drop
               Packet(rng.randbytes(7 * B)),                  # beats 3-9: overflow
               Packet(rng.randbytes(4 * B)),                  # beats 10-13
               Packet(rng.randbytes(B), error=True)]          # beat 14: error drop
    dut = PacketFifo(width, depth, overflow=overflow)
    drv = StreamDriver(dut.i, width)
    trace = []

    async def monitor(ctx):
        async for _, _, v, r, last, de, do in ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload.last, dut.drop_error, dut.drop_overflow):
            trace.append((bool(v and r), bool(v and r and last), de, do))

    async def tb(ctx):
        ctx.set(dut.o.ready, overflow == "wait")
        await drv.send(ctx, packets)
        await ctx.tick().repeat(3)

    run_sim(dut, testbenches=[tb], processes=[monitor, watchdog(1000)])
    beats = [n for n, t in enumerate(trace) if t[0]]
    lasts = [n for n, t in enumerate(trace) if t[1]]
    err_at = [n for n, t in enumerate(trace) if t[2]]
    ovf_at = [n for n, t in enumerate(trace) if t[3]]
    assert len(beats) == 15
    assert err_at == [lasts[1] + 1, lasts[4] + 1]
    if overflow == "drop":
        # 3 free slots behind beat 0: the 7-beat packet overflows at its 4th beat; after the
        # rewind the 4-beat packet overflows at its last beat
        assert ovf_at == [beats[6] + 1, beats[13] + 1]
    else:
        # beat 0 has left; 4 beats of the 7-beat packet fill the memory, its 5th is taken and
        # dropped; the 4-beat packet fits
        assert ovf_at == [beats[7] + 1]


# --- drop mode under random timing: invariants only -------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_drop_mode_random_timing_invariants(width):
    B = width // 8
    depth = 16
    rng = random.Random(width * 3)
    lengths = every_length(width) + [rng.randrange(0, 12 * B) for _ in range(40)]
    rng.shuffle(lengths)
    packets = make_packets(rng, lengths, error_rate=0.15)
    dut = PacketFifo(width, depth, META)
    run = Run(dut, packets, idle=0.1, backpressure=0.6, seed=7)
    check_fifo_invariants(packets, run.out, run.drop_error, run.drop_overflow)
    assert run.drop_overflow > 0 and len(run.out) > len(packets) // 4
    assert run.drop_error > 0
    assert run.ready_low == 0
    assert run.max_level <= depth


def test_invariant_checker_rejects_violations():
    """The timing-independent check used above is not vacuous."""
    a, b, c = Packet(b"a", {"tag": 1}), Packet(b"bb"), Packet(b"c", error=True)
    check_fifo_invariants([a, b, c], [a, b], 1, 0)
    check_fifo_invariants([a, b, c], [b], 1, 1)
    bad = [
        ([b, a], 1, 0),                                  # reordered
        ([Packet(b"x")], 1, 1),                          # not an input packet
        ([Packet(b"a", {"tag": 2}), b], 1, 0),           # meta changed
        ([a, b, Packet(b"c")], 0, 0),                    # errored packet let through
        ([a, b], 0, 0),                                  # a packet neither out nor counted
        ([a], 2, 0),                                     # more error drops than errored packets
    ]
    for got, de, do in bad:
        with pytest.raises(AssertionError):
            check_fifo_invariants([a, b, c], got, de, do)


# --- cut-through ---------------------------------------------------------------------------

@pytest.mark.parametrize("width", WIDTHS)
def test_cut_through_passes_everything(width):
    """A cut-through FIFO smaller than the packets passes every packet unchanged, errored ones
    with their error flag, and never pulses a drop strobe."""
    B = width // 8
    rng = random.Random(width + 11)
    lengths = every_length(width) + [9 * B + 5, 20 * B]
    rng.shuffle(lengths)
    packets = make_packets(rng, lengths, error_rate=0.2)
    dut = PacketFifo(width, 4, META, store_and_forward=False, overflow="wait", drop_errors=False,
                     meta_depth=2)
    run = Run(dut, packets, idle=0.3, backpressure=0.4, seed=5)
    model = packet_fifo(packets, width, 4, store_and_forward=False, drop_errors=False,
                        overflow="wait")
    assert model.out == packets
    check_model(run, model)
    assert run.max_level <= 4


# --- cut-through with "drop": truncation; cut-through chosen per packet ----------------------

class CutByKind(PacketFifo):
    """A FIFO with ``cut_input`` whose ``cut`` is bit 0 of the packets' ``kind`` (so that the
    drivers' metadata chooses it with the first beat)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, cut_input=True, **kwargs)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.d.comb += self.cut.eq(self.i.payload.meta.kind[0])
        return m


def cut_of(packets):
    return [bool(p.meta["kind"] & 1) for p in packets]


def check_truncating_invariants(sent, got, drop_overflow, width):
    """What holds whatever the timing for a FIFO whose packets pass cut-through with "drop":
    every packet out is, in order, an input packet whole or a truncated head of one (whole
    beats, ``error`` set), and every overflow pulse is a packet dropped whole or truncated.
    Returns the number truncated."""
    B = width // 8
    it = iter(sent)
    truncated = 0
    for n, g in enumerate(got):
        for s_ in it:
            if g == s_:
                break
            if (g.error and g.meta == s_.meta and len(g.data) % B == 0
                    and len(s_.data) > len(g.data) and s_.data.startswith(g.data)):
                truncated += 1
                break
        else:
            raise AssertionError(f"output packet {n} is neither an input packet nor the head of "
                                 f"one, in order")
    assert len(got) + drop_overflow == len(sent) + truncated, (
        f"{len(sent)} in, {len(got)} out ({truncated} truncated), {drop_overflow} overflows")
    return truncated


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("depth, meta_depth", [(16, None), (8, 3), (2, 1)])
def test_cut_through_drop_mode_stalled_matches_model(width, depth, meta_depth):
    """Output stalled while packets arrive: packets are kept while they fit, the first that
    does not is truncated to the room left (if it could start), and errored packets pass with
    their error."""
    B = width // 8
    rng = random.Random(depth * width + 5)
    lengths = [rng.choice([0, 1, B - 1, B, B + 1, 3 * B + 1, 4 * B, rng.randrange(0, 5 * B)])
               for _ in range(30)]
    packets = make_packets(rng, lengths, error_rate=0.2)
    if depth > 2:
        # the memory filled to 3 free beats, then a 5-beat packet: cut to 3 beats
        packets[:0] = make_packets(rng, [(depth - 3) * B, 5 * B])
    dut = PacketFifo(width, depth, META, store_and_forward=False, overflow="drop",
                     drop_errors=False, meta_depth=meta_depth)
    run = Run(dut, packets, idle=0.3, backpressure=0.3, seed=depth, stall_input=True)
    model = packet_fifo(packets, width, depth, store_and_forward=False, drop_errors=False,
                        meta_depth=dut.meta_depth)
    assert model.drop_overflow >= 3
    if depth > 2:
        assert any(p.error and p not in packets for p in model.out), "no packet truncated"
    check_model(run, model)
    assert run.level_after_input == model.level
    assert run.ready_low == 0


@pytest.mark.parametrize("width", WIDTHS)
def test_cut_through_drop_mode_truncates_exactly(width):
    """Into 8 free beats: a 5-beat packet fits, a 4-beat one is cut to its first 3 beats (it
    starts with 3 free and keeps one slot for its end), a 2-beat one finds no room to start,
    a one-beat one finds none either (the memory is full)."""
    B = width // 8
    rng = random.Random(8)
    packets = [Packet(rng.randbytes(5 * B - 1)), Packet(rng.randbytes(4 * B)),
               Packet(rng.randbytes(2 * B)), Packet(rng.randbytes(1))]
    dut = PacketFifo(width, 8, store_and_forward=False, overflow="drop", drop_errors=False)
    run = Run(dut, packets, stall_input=True)
    assert run.out == [packets[0], Packet(packets[1].data[:3 * B], {}, True)]
    assert (run.drop_error, run.drop_overflow, run.level_after_input) == (0, 3, 8)


@pytest.mark.parametrize("width", WIDTHS)
def test_cut_through_drop_mode_random_timing(width):
    """Under random idle cycles and backpressure: whole packets or truncated heads, in order,
    every overflow counted, ``i.ready`` always 1, errored packets through with their error."""
    B = width // 8
    rng = random.Random(width * 7)
    lengths = every_length(width) + [rng.randrange(0, 12 * B) for _ in range(40)]
    rng.shuffle(lengths)
    packets = make_packets(rng, lengths, error_rate=0.15)
    dut = PacketFifo(width, 16, META, store_and_forward=False, overflow="drop",
                     drop_errors=False)
    run = Run(dut, packets, idle=0.1, backpressure=0.6, seed=9)
    truncated = check_truncating_invariants(packets, run.out, run.drop_overflow, width)
    assert truncated > 0 and run.drop_overflow > truncated
    assert any(p.error for p in run.out if p in packets)
    assert run.drop_error == 0 and run.ready_low == 0 and run.max_level <= 16


# --- bypass: an empty cut-through FIFO passes a beat in the cycle it comes ------------------

@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("depth, meta", [(16, None), (2, None), (16, META)])
def test_bypass_stalled_matches_model(width, depth, meta):
    """Output stalled while packets arrive: nothing can pass, so the outcome is exactly the
    cut-through FIFO's without the bypass (the model's), metadata included (stored with every
    beat)."""
    B = width // 8
    rng = random.Random(depth * width + 6)
    lengths = [rng.choice([0, 1, B - 1, B, B + 1, 3 * B + 1, 4 * B, rng.randrange(0, 5 * B)])
               for _ in range(30)]
    packets = make_packets(rng, lengths, error_rate=0.2, meta=meta is not None)
    if depth > 2:
        packets[:0] = make_packets(rng, [(depth - 3) * B, 5 * B], meta=meta is not None)
    dut = PacketFifo(width, depth, meta, store_and_forward=False, overflow="drop",
                     drop_errors=False, bypass=True)
    run = Run(dut, packets, idle=0.3, backpressure=0.3, seed=depth, stall_input=True)
    model = packet_fifo(packets, width, depth, store_and_forward=False, drop_errors=False)
    assert model.drop_overflow >= 3
    check_model(run, model)
    assert run.level_after_input == model.level


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("overflow", ["drop", "wait"])
@pytest.mark.parametrize("meta", [None, META], ids=["no-meta", "meta"])
def test_bypass_random_timing(width, overflow, meta):
    """Under random idle cycles and backpressure, beats pass beside the memory whenever it is
    empty and through it otherwise: packets whole or (``"drop"``) truncated heads, in order,
    each with its metadata, every overflow counted; a beat offered and not taken stays
    offered, unchanged (the switch from the input to the read port keeps it)."""
    B = width // 8
    rng = random.Random(width * 7 + len(overflow))
    lengths = every_length(width) + [rng.randrange(0, 12 * B) for _ in range(40)]
    rng.shuffle(lengths)
    packets = make_packets(rng, lengths, error_rate=0.15, meta=meta is not None)
    dut = PacketFifo(width, 16, meta, store_and_forward=False, overflow=overflow,
                     drop_errors=False, bypass=True)
    run = Run(dut, packets, idle=0.3, backpressure=0.5, seed=13)
    assert run.offers.held > 20
    if overflow == "wait":
        assert run.out == packets and run.drop_overflow == 0
    else:
        truncated = check_truncating_invariants(packets, run.out, run.drop_overflow, width)
        assert truncated > 0 and run.drop_overflow > truncated
        assert run.ready_low == 0
    assert any(p.error for p in run.out if p in packets)
    assert run.drop_error == 0 and run.max_level <= 16


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("meta", [None, META], ids=["no-meta", "meta"])
def test_bypass_latency(width, meta):
    """Into an empty FIFO whose output takes every beat, each beat leaves in the cycle it
    comes; with the output stalled for one cycle at a packet's second beat, that beat stays
    offered and the rest follow from the memory one cycle behind their input (each read in
    the cycle it is written), until the FIFO is empty again; the next packet passes beside it
    again."""
    B = width // 8
    rng = random.Random(width + 2)
    packets = make_packets(rng, [4 * B, 3 * B], meta=meta is not None)
    dut = PacketFifo(width, 16, meta, store_and_forward=False, overflow="drop",
                     drop_errors=False, bypass=True)
    in_cycles, out_cycles, col = run_full_rate(dut, packets, prefill=0)
    assert col.packets == packets
    assert out_cycles == in_cycles

    mon_i, mon_o = HandshakeMonitor(dut.i), HandshakeMonitor(dut.o)
    offers = OfferMonitor(dut.o)
    got = []

    async def tb(ctx):
        drv = StreamDriver(dut.i, width)
        await drv.send(ctx, packets[:1])
        await ctx.tick().repeat(8)
        await drv.send(ctx, packets[1:])

    async def sink(ctx):
        # ready low in the cycle of the first packet's second beat only
        cycle = 0
        while True:
            cycle += 1
            ctx.set(dut.o.ready, cycle != 2)
            _, _, v, r, last = await ctx.tick().sample(dut.o.valid, dut.o.ready,
                                                        dut.o.payload.last)
            if v and r:
                got.append(last)

    run_sim(dut, testbenches=[tb], processes=[sink, mon_i.run, mon_o.run, offers.run,
                                             watchdog(2000)])
    i1, o1 = mon_i.cycles[:4], mon_o.cycles[:4]
    assert o1[0] == i1[0] and offers.held == 1
    # the held beat leaves one cycle late, from the read port; the two behind it come from
    # the memory, one cycle after they came in
    assert o1[1:] == [i1[1] + 1, i1[2] + 1, i1[3] + 1]
    assert mon_o.cycles[4:] == mon_i.cycles[4:]
    assert got.count(1) == 2


def test_truncating_checker_rejects_violations():
    """The check above is not vacuous."""
    a, b = Packet(bytes(range(20)), {"tag": 1}), Packet(b"bb")
    head = Packet(bytes(range(8)), {"tag": 1}, True)
    assert check_truncating_invariants([a, b], [head, b], 1, 64) == 1
    bad = [([b, a], 0), ([Packet(bytes(range(8)), {"tag": 1}), b], 1),   # reordered; no error
           ([Packet(bytes(range(5)), {"tag": 1}, True), b], 1),           # not whole beats
           ([head, b], 0), ([a], 0)]                                       # uncounted drops
    for got, ovf in bad:
        with pytest.raises(AssertionError):
            check_truncating_invariants([a, b], got, ovf, 64)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("overflow", ["wait", "drop"])
def test_cut_input_matches_model(width, overflow):
    """Packets chosen cut-through by ``cut`` keep their error (and are truncated on overflow in
    drop mode, output stalled); the others are stored and forwarded, errored ones dropped; all
    leave in order."""
    B = width // 8
    depth = 16
    rng = random.Random(width + len(overflow))
    lengths = every_length(width) + [rng.randrange(0, 6 * B) for _ in range(20)]
    rng.shuffle(lengths)
    packets = make_packets(rng, lengths, error_rate=0.25)
    # an errored packet of each kind first (they fit whatever the mode)
    packets[:0] = [Packet(rng.randbytes(B + 1), {"tag": 1, "kind": k}, True) for k in (0, 1)]
    dut = CutByKind(width, depth, META, overflow=overflow)
    stalled = overflow == "drop"
    run = Run(dut, packets, idle=0.3, backpressure=0.4, seed=width, stall_input=stalled)
    model = packet_fifo(packets, width, depth, overflow=overflow, cut=cut_of(packets))
    through = [p for p, c in zip(packets, cut_of(packets)) if c]
    assert any(p.error for p in model.out), "no errored cut-through packet passed"
    assert model.drop_error > 0 and any(p in model.out for p in through)
    check_model(run, model)


@pytest.mark.parametrize("width", WIDTHS)
def test_cut_input_latency(width):
    """A cut-through packet's first beat leaves two cycles after it enters; a stored packet's
    two cycles after its last beat; one behind the other waits for it."""
    B = width // 8
    rng = random.Random(1)
    through = Packet(rng.randbytes(4 * B), {"tag": 1, "kind": 1})
    stored = Packet(rng.randbytes(4 * B), {"tag": 2, "kind": 0})
    for packets in ([through], [stored], [stored, through]):
        dut = CutByKind(width, 16, META)
        in_cycles, out_cycles, col = run_full_rate(dut, packets, prefill=0)
        assert col.packets == packets
        if packets == [through]:
            assert out_cycles == [c + 2 for c in in_cycles]
        else:
            assert out_cycles[0] == in_cycles[3] + 2
            assert consecutive(out_cycles)


# --- throughput and latency (cycle counts in the simulator) -----------------------------------

def run_full_rate(dut, packets, *, prefill):
    """No idle, no backpressure, except that ``o.ready`` is held low while the first ``prefill``
    packets go in. Returns (input beat cycles, output beat cycles, collector)."""
    w = dut.width
    drv = StreamDriver(dut.i, w)
    col = StreamCollector(dut.o, w, backpressure=1.0 if prefill else 0.0)
    mon = HandshakeMonitor(dut.i)

    async def tb(ctx):
        await drv.send(ctx, packets[:prefill])
        col.backpressure = 0.0
        await drv.send(ctx, packets[prefill:])
        while len(col.packets) < len(packets):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, mon.run, watchdog(20_000)])
    return mon.cycles, col.beat_cycles, col


def consecutive(cycles):
    return cycles == list(range(cycles[0], cycles[0] + len(cycles)))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("overflow", ["drop", "wait"])
def test_store_and_forward_full_rate(width, overflow):
    """With a backlog of stored packets, beats go in and out at one per cycle at the same time,
    across packet boundaries, with no idle beat."""
    B = width // 8
    rng = random.Random(width)
    packets = make_packets(rng, [rng.randrange(0, 6 * B) for _ in range(60)])
    backlog = 4
    assert sum(beat_count(p, width) for p in packets[:backlog]) >= 6
    dut = PacketFifo(width, 32, META, overflow=overflow)
    in_cycles, out_cycles, col = run_full_rate(dut, packets, prefill=backlog)
    assert col.packets == packets
    total = sum(beat_count(p, width) for p in packets)
    assert len(in_cycles) == len(out_cycles) == total
    assert consecutive(in_cycles)
    assert consecutive(out_cycles)
    # input and output overlap: the output runs while most of the input is still arriving
    assert out_cycles[0] < in_cycles[-1] - total // 2


@pytest.mark.parametrize("width", WIDTHS)
def test_cut_through_full_rate(width):
    B = width // 8
    rng = random.Random(width + 1)
    packets = make_packets(rng, [rng.randrange(0, 6 * B) for _ in range(40)])
    dut = PacketFifo(width, 4, META, store_and_forward=False, overflow="wait", drop_errors=False)
    in_cycles, out_cycles, col = run_full_rate(dut, packets, prefill=0)
    assert col.packets == packets
    assert consecutive(in_cycles) and consecutive(out_cycles)
    assert out_cycles[0] == in_cycles[0] + 2          # latency: two cycles
    assert out_cycles == [c + 2 for c in in_cycles]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("nbeats", [1, 3])
@pytest.mark.parametrize("meta", [None, META])
def test_store_and_forward_latency(width, nbeats, meta):
    """A packet is invisible until its last beat is in; its first beat is offered two cycles
    after that."""
    rng = random.Random(nbeats)
    pkt = Packet(rng.randbytes(nbeats * (width // 8) - 1), rand_meta(rng) if meta else {})
    dut = PacketFifo(width, 8, meta)
    in_cycles, out_cycles, col = run_full_rate(dut, [pkt], prefill=0)
    assert col.packets == [pkt]
    assert len(in_cycles) == nbeats
    assert out_cycles[0] == in_cycles[-1] + 2
    assert consecutive(out_cycles)


@pytest.mark.parametrize("width", [64])
def test_wait_mode_ready_and_level(width):
    """In wait mode ``i.ready`` drops exactly when ``depth`` beats are stored, ``level`` counts
    them, and one beat leaving lets one more in."""
    B = width // 8
    depth = 8
    dut = PacketFifo(width, depth, overflow="wait")
    trace = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.keep, (1 << B) - 1)
        ctx.set(dut.i.payload.last, 1)          # one-beat packets
        for _ in range(12):
            trace.append((ctx.get(dut.i.ready), ctx.get(dut.level)))
            await ctx.tick()
        ctx.set(dut.o.ready, 1)
        await ctx.tick()
        ctx.set(dut.o.ready, 0)
        for _ in range(3):
            trace.append((ctx.get(dut.i.ready), ctx.get(dut.level)))
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert trace[:12] == [(1, n) for n in range(depth)] + [(0, depth)] * 4
    # one beat left during the released cycle while the input was held: level depth-1, one
    # beat is accepted, then the FIFO is full again
    assert trace[12:] == [(1, depth - 1), (0, depth), (0, depth)]


# --- malformed input ------------------------------------------------------------------------

def drive_raw(ctx, dut, rng, n, lanes):
    """Random beats that break every packet stream rule, then a closing ``last`` beat."""
    async def go():
        for _ in range(n):
            ctx.set(dut.i.valid, rng.random() < 0.8)
            beat = {"data": rng.getrandbits(dut.width), "keep": rng.getrandbits(lanes),
                    "last": rng.random() < 0.1, "error": rng.random() < 0.2}
            meta = {"tag": rng.getrandbits(16), "kind": rng.getrandbits(3)}
            ctx.set(dut.i.payload, {**beat, "meta": meta} if dut.meta.size else beat)
            await ctx.tick().until(dut.i.ready)
        end = {"data": 0, "keep": 0, "last": 1, "error": 0}
        ctx.set(dut.i.payload, {**end, "meta": {"tag": 0, "kind": 0}} if dut.meta.size else end)
        ctx.set(dut.i.valid, 1)
        await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
    return go()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("mode", ["drop", "wait", "cut", "cut-drop", "bypass", "bypass-meta"])
def test_malformed_input_then_recovers(width, mode):
    """Garbage (non-thermometer keep, partial middle beats, error on any beat, meta changing
    inside packets, packets longer than the memory) never hangs the FIFO, every beat that leaves
    has constant meta within its packet and (except a bypassed beat, whose ``keep`` passes as
    it came, as documented) a thermometer keep, and well-formed packets sent afterwards come
    out exactly."""
    B = width // 8
    depth = 8
    if mode.startswith("bypass"):
        dut = PacketFifo(width, depth, META if mode == "bypass-meta" else None,
                         store_and_forward=False, overflow="drop", drop_errors=False,
                         bypass=True)
    elif mode == "cut":
        dut = PacketFifo(width, depth, META, store_and_forward=False, overflow="wait",
                         drop_errors=False)
    elif mode == "cut-drop":
        dut = PacketFifo(width, depth, META, store_and_forward=False, overflow="drop",
                         drop_errors=False)
    else:
        dut = PacketFifo(width, depth, META, overflow=mode)
    rng = random.Random(width + len(mode))
    good = make_packets(rng, [0, 1, B, B + 1, 3 * B - 1], meta=mode != "bypass")
    beats = []
    overflows = []

    async def collect(ctx):
        brng = random.Random(9)
        while True:
            ready = brng.random() < 0.7
            ctx.set(dut.o.ready, ready)
            _, _, valid, p, ovf = await ctx.tick().sample(dut.o.valid, dut.o.payload,
                                                          dut.drop_overflow)
            overflows.append(ovf)
            if valid and ready:
                beats.append((p.data, p.keep, p.last, p.error, meta_dict(p.meta)))

    async def tb(ctx):
        # a packet far longer than the memory, with no last for a long time
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.keep, (1 << B) - 1)
        # (the bypass drains a beat more often than the read port alone: it needs a longer
        # packet to fill up at the output's 70 %)
        for _ in range((6 if mode.startswith("bypass") else 3) * depth):
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.payload.last, 1)
        await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        await ctx.tick().repeat(2)
        long_dropped.append(sum(overflows))
        await drive_raw(ctx, dut, rng, 300, B)
        # the garbage drained (else a good packet could meet a full FIFO, by timing alone)
        while ctx.get(dut.level):
            await ctx.tick()
        await StreamDriver(dut.i, width, idle=0.2, seed=4).send(ctx, good)
        # the good packets come out last, in order
        while split_packets(beats, width)[-len(good):] != good:
            await ctx.tick()
        await ctx.tick().repeat(3 * depth)

    long_dropped = []
    run_sim(dut, testbenches=[tb], processes=[collect, watchdog(20_000)])
    assert split_packets(beats, width)[-len(good):] == good
    assert long_dropped == [0 if mode == "cut" else 1]
    for _, keep, *_ in beats:
        assert mode.startswith("bypass") or keep & (keep + 1) == 0, \
            f"keep {keep:#x} not a thermometer"
    if mode in ("drop", "wait"):
        # the long packet and the garbage packets longer than the memory never come out whole
        assert all(len(p.data) <= depth * B for p in split_packets(beats, width))
    if mode in ("cut-drop", "bypass", "bypass-meta"):
        # the long packet is cut short (its head leaves, marked damaged) and counted
        assert long_dropped == [1]
        assert split_packets(beats, width)[0].error


def split_packets(beats, width):
    """Output beats -> Packets (bytes by keep count), asserting constant meta in each packet."""
    B = width // 8
    pkts, cur, meta = [], bytearray(), None
    for d, keep, last, err, m in beats:
        if meta is not None and m != meta:
            raise AssertionError(f"meta changed inside an output packet: {meta} -> {m}")
        meta = m
        cur += d.to_bytes(B, "little")[:bin(keep).count("1")]
        if last:
            pkts.append(Packet(bytes(cur), m, bool(err)))
            cur, meta = bytearray(), None
    return pkts


# --- parameters -------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, exc, msg", [
    ({"width": 64, "depth": 12}, ValueError, "power of two"),
    ({"width": 64, "depth": 1}, ValueError, "at least 2"),
    ({"width": 64, "depth": "8"}, TypeError, "integer"),
    ({"width": 48, "depth": 8}, ValueError, "width must be one of"),
    ({"width": 64, "depth": 8, "overflow": "block"}, ValueError, "overflow must be one of"),
    ({"width": 64, "depth": 8, "store_and_forward": False, "drop_errors": False,
      "cut_input": True}, ValueError, "cut_input chooses"),
    ({"width": 64, "depth": 8, "cut_input": 1}, TypeError, "cut_input must be a bool"),
    ({"width": 64, "depth": 8, "store_and_forward": False, "overflow": "wait"},
     ValueError, "drop_errors=False"),
    ({"width": 64, "depth": 8, "meta_depth": 9}, ValueError, "meta_depth"),
    ({"width": 64, "depth": 8, "meta_depth": 0}, ValueError, "meta_depth"),
    ({"width": 64, "depth": 8, "meta": 5}, TypeError, "meta"),
    ({"width": 64, "depth": 8, "ram_style": "ultra"}, ValueError, "ram_style must be None"),
    ({"width": 64, "depth": 8, "bypass": 1}, TypeError, "bypass must be a bool"),
    ({"width": 64, "depth": 8, "bypass": True}, ValueError, "needs a cut-through FIFO"),
])
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameter_errors(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        PacketFifo(**kwargs)
    gc.collect()   # the half-built component warns when collected: inside this test


@pytest.mark.parametrize("ram_style", [None, "block"])
def test_ram_style_reaches_the_memory(ram_style):
    from amaranth.back import rtlil
    text = rtlil.convert(PacketFifo(64, 8, ram_style=ram_style))
    styles = re.findall(r'attribute \\ram_style "(\w+)"', text)
    assert styles == ([] if ram_style is None else [ram_style])


def test_fifo_depth_sizes_for_whole_packets():
    from rocegen.gateware.lib.fifo import fifo_depth
    assert fifo_depth(1518, 512) == 32            # 24 beats -> 32
    assert fifo_depth(1518, 512, packets=2) == 64
    assert fifo_depth(64, 512) == 2               # never fewer than 2 beats
    assert fifo_depth(1480, 64) == 256            # 185 beats
    assert fifo_depth(2048, 64) == 256            # exactly 256 beats fit
    with pytest.raises(ValueError):
        fifo_depth(100, 64, packets=0)
