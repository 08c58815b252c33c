"""ChecksumVerdicts: every packet's verdict on ``done``, and the selected ones' on the
``verdict`` stream, in packet order under random idle, backpressure and a random consumer,
against the checksum model (``rocegen.sim.models.net.checksum``); with ``flags_at_last``,
``skip`` and ``select`` true only as each packet's last beat moves (garbage in every other
cycle), against one's complement sums made here."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, Mux, Signal, UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.lib.checksum_verdicts import ChecksumVerdicts
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.sim.models.net import checksum as model
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim

META = data.StructLayout({"seed": 16, "skip": 1, "select": 1})


def packets_for(width, rng, n=80):
    """Packets of 0..3 beats and one-beat runs, half of them with a seed that makes the sum
    right, some with ``skip``, some selected."""
    B = width // 8
    out = []
    for k in range(n):
        size = rng.randrange(1, B + 1) if k % 3 else rng.randrange(0, 3 * B + 1)
        raw = rng.randbytes(size)
        seed = rng.getrandbits(16)
        if rng.random() < 0.5:
            seed = ~model.data_sum(raw, 0) & 0xFFFF        # the sum comes to 0xFFFF
        out.append(Packet(raw, {"seed": seed, "skip": int(rng.random() < 0.2),
                                "select": int(rng.random() < 0.7)}))
    return out


def good(p):
    return p.meta["skip"] == 1 or model.data_sum(p.data, p.meta["seed"]) == 0xFFFF


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("pace", [(0.0, 0.0, 1.0), (0.3, 0.3, 0.4)],
                         ids=["back-to-back", "random"])
def test_verdicts_in_order(width, pace):
    idle, backpressure, take = pace
    rng = random.Random(width + int(10 * take))
    packets = packets_for(width, rng)
    m = Module()
    s = PacketSignature(width, META).create(path=("s",))
    m.submodules.cv = cv = ChecksumVerdicts(width, META, depth=len(packets))
    m.d.comb += [*cv.observe(s), cv.seed.eq(s.payload.meta.seed),
                 cv.skip.eq(s.payload.meta.skip), cv.select.eq(s.payload.meta.select)]
    drv = StreamDriver(s, width, idle=idle, seed=width)
    col = StreamCollector(s, width, backpressure=backpressure, seed=width + 1)
    done, taken, valids = [], [], []

    async def consumer(ctx):
        r = random.Random(3)
        while True:
            ready = r.random() < take
            ctx.set(cv.verdict.ready, ready)
            _, _, v, payload, nxt, d, g, sel = await ctx.tick().sample(
                cv.verdict.valid, cv.verdict.payload, cv.valid_next, cv.done, cv.good,
                cv.selected)
            valids.append((v, nxt))
            if v and ready:
                taken.append(payload)
            if d:
                done.append((g, sel))

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()
        await ctx.tick().repeat(cv.latency + 4 * len(packets))

    run_sim(m, testbenches=[tb], processes=[col.run, consumer], deadline_cycles=40_000)
    assert done == [(int(good(p)), p.meta["select"]) for p in packets]
    wanted = [int(good(p)) for p in packets if p.meta["select"] and not p.meta["skip"]]
    assert 0 in wanted and 1 in wanted
    assert taken == wanted
    # ``valid_next`` is the next cycle's ``valid``
    assert all(nxt == v for (_, nxt), (v, _) in zip(valids, valids[1:]))


def ones_complement(data, seed):
    """``seed`` plus the big-endian 16-bit words of ``data`` (an odd last byte padded with a
    zero byte), the carries folded back in."""
    data = data + bytes(len(data) % 2)
    total = seed + sum(int.from_bytes(data[k:k + 2], "big") for k in range(0, len(data), 2))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def late_flag_packets(width, rng, n):
    """Packets of 0 to 5 beats (most of more than one), half with a seed that brings the sum to
    0xFFFF, some with ``skip``, most selected; flags and seed in ``meta``."""
    B = width // 8
    out = []
    for _ in range(n):
        raw = rng.randbytes(rng.choice([rng.randrange(0, B + 1), rng.randrange(B + 1, 5 * B + 1),
                                        rng.randrange(B + 1, 5 * B + 1)]))
        seed = rng.getrandbits(16)
        if rng.random() < 0.5:
            seed = 0xFFFF - ones_complement(raw, 0)             # the sum comes to 0xFFFF
        out.append(Packet(raw, {"seed": seed, "skip": int(rng.random() < 0.25),
                                "select": int(rng.random() < 0.7)}))
    return out


def run_late_flags(width, packets, *, flags_at_last, seed):
    """The packets through a stream that ChecksumVerdicts observes, with random idle cycles,
    backpressure and a random verdict consumer; ``skip`` and ``select`` are the packet's own
    only in the cycle its last beat moves, random in every other, and ``seed`` its own only as
    its first beat moves. Returns (done, verdicts taken, cycles a moving beat other than the
    last carried flags not the packet's)."""
    m = Module()
    s = PacketSignature(width, META).create(path=("s",))
    m.submodules.cv = cv = ChecksumVerdicts(width, META, depth=len(packets),
                                            flags_at_last=flags_at_last)
    noise = {"skip": Signal(), "select": Signal(), "seed": Signal(16)}
    inside = Signal()                        # a packet's first beat has moved, not its last
    moves = s.valid & s.ready
    ends = moves & s.payload.last
    with m.If(moves):
        m.d.sync += inside.eq(~s.payload.last)
    meta = s.payload.meta
    m.d.comb += [*cv.observe(s),
                 cv.seed.eq(Mux(moves & ~inside, meta.seed, noise["seed"])),
                 cv.skip.eq(Mux(ends, meta.skip, noise["skip"])),
                 cv.select.eq(Mux(ends, meta.select, noise["select"]))]
    drv = StreamDriver(s, width, idle=0.3, seed=seed)
    col = StreamCollector(s, width, backpressure=0.3, seed=seed + 1)
    done, taken, differs = [], [], [0]

    async def consumer(ctx):
        r = random.Random(seed + 2)
        while True:
            ready = r.random() < 0.5
            ctx.set(cv.verdict.ready, ready)
            for sig in noise.values():
                ctx.set(sig, r.getrandbits(len(sig)))
            _, _, v, payload, d, g, sel, mv, last, sk, se, m_sk, m_se = \
                await ctx.tick().sample(cv.verdict.valid, cv.verdict.payload, cv.done, cv.good,
                                        cv.selected, moves, s.payload.last, cv.skip, cv.select,
                                        meta.skip, meta.select)
            if v and ready:
                taken.append(payload)
            if d:
                done.append((g, sel))
            if mv and not last and (sk, se) != (m_sk, m_se):
                differs[0] += 1

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()
        await ctx.tick().repeat(cv.latency + 4 * len(packets))

    run_sim(m, testbenches=[tb], processes=[col.run, consumer], deadline_cycles=60_000)
    assert [p.data for p in col.packets] == [p.data for p in packets]
    return done, taken, differs[0]


@pytest.mark.parametrize("width", [64, 512])
def test_flags_at_last_are_sampled_with_the_last_beat(width):
    """``flags_at_last``: ``skip`` and ``select`` garbage on every beat but the last (and in
    idle cycles): every packet's ``done`` carries its own verdict and ``select``, and the
    verdict stream is exactly the verdicts, from one's complement sums made here, of the
    selected packets not skipped, in order."""
    rng = random.Random(width + 5)
    packets = late_flag_packets(width, rng, 90)
    done, taken, differs = run_late_flags(width, packets, flags_at_last=True, seed=width)

    def good_here(p):
        return int(p.meta["skip"] == 1 or ones_complement(p.data, p.meta["seed"]) == 0xFFFF)

    wanted = [good_here(p) for p in packets if p.meta["select"] and not p.meta["skip"]]
    assert 0 in wanted and 1 in wanted and len(wanted) > 30
    assert differs > 20                         # the garbage did differ on beats before a last
    assert done == [(good_here(p), p.meta["select"]) for p in packets]
    assert taken == wanted


def test_first_beat_flags_would_take_the_garbage():
    """The contrast: the same traffic to ``flags_at_last=False``, which samples the flags with
    the first beat (garbage there when the packet has more than one beat), does not give the
    packets' verdicts."""
    rng = random.Random(69)
    packets = late_flag_packets(64, rng, 60)
    done, taken, _ = run_late_flags(64, packets, flags_at_last=False, seed=64)
    wanted = [int(p.meta["skip"] == 1 or ones_complement(p.data, p.meta["seed"]) == 0xFFFF)
              for p in packets if p.meta["select"] and not p.meta["skip"]]
    assert len(done) == len(packets)
    assert taken != wanted


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="queue depth must be a positive integer"):
            ChecksumVerdicts(64, depth=0)
        with pytest.raises(ValueError, match="width must be one of"):
            ChecksumVerdicts(48, depth=4)
        for bad in (1, 0, "yes", None):
            with pytest.raises(TypeError, match="flags_at_last must be a bool"):
                ChecksumVerdicts(64, depth=4, flags_at_last=bad)
        gc.collect()
