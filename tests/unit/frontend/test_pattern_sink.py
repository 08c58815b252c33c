"""The pattern sink (:class:`PatternSink`): word writes of random addresses and byte enables, as
a memory with random backpressure takes them (random idle cycles in between), carrying the test
pattern of their addresses (:func:`rocegen.wire.pattern.pattern`) or bytes changed on purpose;
the counters against a count made from the pattern function, at 64, 128 and 512 bits, cycle
by cycle with the sink's three-cycle latency; the counters stop short of overflowing."""

import random

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module, Signal

from rocegen.gateware.lib.memport import mem_write_layout
from rocegen.gateware.roce.frontend.pattern_sink import PATTERN_COUNTS, PatternSink
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.pattern import pattern


class SinkTop(Elaboratable):
    """A write port (``valid`` / ``ready`` / ``payload``) whose transfers the sink watches, as
    the endpoint joins it to the responder's writes into memory."""

    def __init__(self, width, addr_width, **params):
        self.sink = PatternSink(width, addr_width, **params)
        self.valid, self.ready = Signal(), Signal()
        self.payload = Signal(mem_write_layout(width, addr_width))

    def elaborate(self, platform):
        m = Module()
        m.submodules.sink = self.sink
        m.d.comb += [self.sink.i.valid.eq(self.valid & self.ready),
                     self.sink.i.payload.eq(self.payload)]
        return m


def make_writes(rng, width, addr_width, count, wrong_rate):
    """``(addr, data, be, n_enabled, n_wrong)`` word writes: the pattern of the word's bytes,
    some lanes changed (enabled or not), byte enables full, contiguous or random."""
    B = width // 8
    out = []
    for _ in range(count):
        addr = rng.choice([rng.randrange(1 << addr_width), (1 << addr_width) - 1, 0])
        good = bytearray(pattern(addr * B, B))
        r = rng.random()
        if r < 0.5:
            be = (1 << B) - 1
        elif r < 0.8:                                   # a message's first or last word
            lo, hi = sorted(rng.sample(range(B + 1), 2))
            be = ((1 << hi) - 1) ^ ((1 << lo) - 1)
        else:
            be = rng.getrandbits(B)
        data = bytearray(good)
        for lane in range(B):
            if rng.random() < wrong_rate:
                data[lane] ^= rng.randrange(1, 256)     # never the pattern's byte
        enabled = [lane for lane in range(B) if be >> lane & 1]
        wrong = sum(data[lane] != good[lane] for lane in enabled)
        out.append((addr, int.from_bytes(data, "little"), be, len(enabled), wrong))
    return out


def simulate(width, addr_width, writes, *, idle=0.3, backpressure=0.3, seed=0, **params):
    """Offer ``writes`` on the port; returns the counters seen at every cycle and the cycle
    each write was taken."""
    dut = SinkTop(width, addr_width, **params)
    rng = random.Random(seed)
    seen, taken = [], []

    async def watch(ctx):
        cycle = 0
        async for _, _, checked, wrong in ctx.tick().sample(dut.sink.counts.checked,
                                                             dut.sink.counts.wrong):
            seen.append((cycle, checked, wrong))
            cycle += 1

    async def tb(ctx):
        cycle = 0
        for addr, word, be, _, _ in writes:
            while rng.random() < idle:
                ctx.set(dut.valid, 0)
                ctx.set(dut.ready, rng.random() >= backpressure)
                await ctx.tick()
                cycle += 1
            ctx.set(dut.valid, 1)
            ctx.set(dut.payload, {"addr": addr, "data": word, "be": be})
            while True:
                ready = rng.random() >= backpressure
                ctx.set(dut.ready, ready)
                await ctx.tick()
                cycle += 1
                if ready:
                    taken.append(cycle - 1)
                    break
        ctx.set(dut.valid, 0)
        await ctx.tick().repeat(6)

    run_sim(dut, testbenches=[tb], processes=[watch])
    return seen, taken


@pytest.mark.parametrize("width,addr_width", [(64, 12), (128, 28), (512, 26)])
def test_counts_match_the_pattern(width, addr_width):
    rng = random.Random(width)
    writes = make_writes(rng, width, addr_width, 300, wrong_rate=0.02)
    seen, taken = simulate(width, addr_width, writes, seed=width)
    assert sum(w[4] for w in writes) > 20            # wrong bytes were offered and enabled
    assert any(w[4] == 0 and w[3] == width // 8 for w in writes)
    # the counters of cycle c count the writes taken up to cycle c - 3
    for cycle, checked, wrong in seen:
        done = [w for w, t in zip(writes, taken) if t <= cycle - 3]
        assert (checked, wrong) == (sum(w[3] for w in done), sum(w[4] for w in done)), cycle


@pytest.mark.parametrize("width", [64, 512])
def test_all_pattern_writes_count_nothing_wrong(width):
    """A run of back-to-back full words of the pattern at consecutive addresses (a WRITE's
    payload), without idle cycles or backpressure."""
    B = width // 8
    base = 0x1234
    writes = [(base + k, int.from_bytes(pattern((base + k) * B, B), "little"), (1 << B) - 1,
               B, 0) for k in range(64)]
    seen, taken = simulate(width, 16, writes, idle=0, backpressure=0)
    assert taken == list(range(len(writes)))
    assert seen[-1][1:] == (64 * B, 0)


def test_counters_stop_short_of_overflowing():
    rng = random.Random(5)
    writes = make_writes(rng, 64, 10, 200, wrong_rate=0.5)
    seen, _ = simulate(64, 10, writes, count_bits=8, seed=5)
    total = sum(w[3] for w in writes)
    wrong = sum(w[4] for w in writes)
    assert total > 255 and wrong > 255
    # they end within a word's bytes of the maximum, and never wrapped on the way
    assert 255 - 8 < seen[-1][1] <= 255 and 255 - 8 < seen[-1][2] <= 255
    assert all(a[1] <= b[1] and a[2] <= b[2] for a, b in zip(seen, seen[1:]))


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="width"):
        PatternSink(32, 10)
    with pytest.raises(ValueError, match="addr_width"):
        PatternSink(64, 33)
    with pytest.raises(TypeError, match="addr_width"):
        PatternSink(64, "10")
    with pytest.raises(ValueError, match="count_bits"):
        PatternSink(64, 10, count_bits=4)
    with pytest.raises(TypeError, match="count_bits"):
        PatternSink(64, 10, count_bits=True)
    sink = PatternSink(256, 20)
    assert sink.counts.shape().size == PATTERN_COUNTS.size
    Fragment.get(sink, None)
