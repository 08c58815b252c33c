"""XGMII MAC (XgmiiTx, XgmiiRx) in the Amaranth simulator, against the reference model
rocegen.sim.models.mac.xgmii (FCS by zlib)."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Cat, Module, Signal, UnusedElaboratable
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.sim import Simulator
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.gateware.mac.xgmii import Crc32
from rocegen.gateware.mac.xgmii_rx import XgmiiRx
from rocegen.gateware.mac.xgmii_tx import XgmiiTx
from rocegen.sim.models.mac import xgmii as X
from rocegen.sim.models.packets import Packet, from_beats, to_beats
from rocegen.sim.testing.amaranth_streams import StreamDriver
from rocegen.sim.testing.harness import run_sim

STROBES = ("rx_fcs_error", "rx_runt", "rx_too_long", "rx_bad_code")
STATUS_OF = {"rx_fcs_error": X.FCS_ERROR, "rx_runt": X.RUNT, "rx_too_long": X.TOO_LONG,
             "rx_bad_code": X.BAD_CODE}
IDLE_LANE = (X.IDLE, 1)


# ---------------------------------------------------------------------------------------------
# frames

def real_frame(length, rng):
    """A frame of ``length`` octets (no FCS): Ether/IP/UDP/payload when it fits, else a bare
    Ethernet header with payload, else raw octets (degenerate, for padding tests)."""
    if length >= 42:
        pkt = (Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
               / IP(src="10.0.0.1", dst="10.0.0.2", id=rng.getrandbits(16))
               / UDP(sport=rng.randrange(1024, 65536), dport=4791)
               / Raw(rng.randbytes(length - 42)))
    elif length >= 14:
        pkt = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=0x88B5) / Raw(
            rng.randbytes(length - 14))
    else:
        return rng.randbytes(length)
    data = bytes(pkt)
    assert len(data) == length
    return data


def good_lengths():
    return list(range(14, 141)) + [255, 511, 1000, 1499, 1500, 1514, 1518]


# ---------------------------------------------------------------------------------------------
# line helpers

def flat(words):
    return X.unpack_words(words)


def segments(words):
    """Frames on a transmitted word stream: list of (start word index, end char flat position,
    words from the start word to the word holding the end character)."""
    lanes = flat(words)
    out = []
    p = 0
    while p < len(lanes):
        if lanes[p] == (X.START, 1):
            assert p % 8 == 0, f"/S/ in lane {p % 8}"
            q = p + 1
            while q < len(lanes) and not lanes[q][1]:
                q += 1
            assert q < len(lanes), "frame not ended"
            out.append((p // 8, q, words[p // 8: q // 8 + 1]))
            p = q + 1
        else:
            assert lanes[p] == IDLE_LANE or (out and p // 8 == out[-1][1] // 8), \
                f"unexpected lane {lanes[p]} at {p} between frames"
            p += 1
    return out


def build_line(frame_lanes_list, rng, *, min_gap=5, max_gap=20, align=4):
    """Concatenate frames on a line: at least ``min_gap`` octets from each end character (the
    last lane of a frame) to the next /S/, which is put on a multiple of ``align``."""
    lanes = [IDLE_LANE] * 8
    for fl in frame_lanes_list:
        lanes += [IDLE_LANE] * (rng.randint(min_gap, max_gap) - 1)
        lanes += [IDLE_LANE] * (-len(lanes) % align)
        lanes += list(fl)
    lanes += [IDLE_LANE] * 24
    return X.pack_words(lanes)


# ---------------------------------------------------------------------------------------------
# TX harness

class TxRun:
    def __init__(self):
        self.words = []
        self.frame_cycles = []
        self.underrun_cycles = []
        self.accept_cycles = []        # cycles in which a beat moved on i
        self.accepted = []             # (beat index, packet index) of those beats


async def drive_frames(ctx, stream, packets, rng, idle, accepted):
    """Sends ``packets`` with random idle cycles *between* frames only (a MAC input must not
    stall inside a frame); lanes beyond ``keep`` hold junk."""
    for n, pkt in enumerate(packets):
        while idle and rng.random() < idle:
            ctx.set(stream.valid, 0)
            await ctx.tick()
        beats = to_beats(pkt.data, 64)
        for k, (d, keep, last) in enumerate(beats):
            count = bin(keep).count("1")
            junk = rng.getrandbits(64) & ~((1 << (8 * count)) - 1) & ((1 << 64) - 1)
            ctx.set(stream.payload, {"data": d | junk, "keep": keep, "last": last,
                                     "error": int(pkt.error and bool(last))})
            ctx.set(stream.valid, 1)
            await ctx.tick().until(stream.ready)
            accepted.append((k, n))
    ctx.set(stream.valid, 0)


def run_tx(packets, *, idle=0.0, seed=0, ifg=12, mid_frame_idle=None, tail=40):
    dut = XgmiiTx(ifg=ifg)
    rng = random.Random(seed)
    run = TxRun()

    async def tb(ctx):
        if mid_frame_idle is None:
            await drive_frames(ctx, dut.i, packets, rng, idle, run.accepted)
        else:
            await StreamDriver(dut.i, 64, idle=mid_frame_idle, seed=seed).send(ctx, packets)
        for _ in range(tail):
            await ctx.tick()

    async def monitor(ctx):
        async for _, _, d, c, fr, ur, v, r in ctx.tick().sample(
                dut.txd, dut.txc, dut.tx_frame, dut.tx_underrun, dut.i.valid, dut.i.ready):
            n = len(run.words)
            run.words.append((d, c))
            if fr:
                run.frame_cycles.append(n)
            if ur:
                run.underrun_cycles.append(n)
            if v and r:
                run.accept_cycles.append(n)

    run_sim(dut, testbenches=[tb], processes=[monitor])
    return run


def check_tx_frames(run, packets, ifg=12, back_to_back=False):
    segs = segments(run.words)
    assert len(segs) == len(packets)
    for (_, _, seg), pkt in zip(segs, packets):
        assert seg == X.encode(pkt.data, error=pkt.error), f"frame of {len(pkt.data)} octets"
    # tx_frame pulses exactly in the cycles the end characters are on txd
    assert run.frame_cycles == [q // 8 for _, q, _ in segs]
    assert run.underrun_cycles == []
    for (_, q, _), (s, _, _) in zip(segs, segs[1:]):
        gap = 8 * s - q
        assert gap >= ifg
        if back_to_back:
            assert gap == ifg + (-(q + ifg) % 8), "gap longer than needed for a lane-0 start"
    decoded = X.decode(run.words)
    assert decoded == [(X.pad(p.data), X.BAD_CODE if p.error else X.OK) for p in packets]


# ---------------------------------------------------------------------------------------------
# RX harness

class RxRun:
    def __init__(self):
        self.frames = []               # (bytes, error, status)
        self.bad_preambles = 0
        self.last_cycles = []


def run_rx(words, *, max_frame=1522, tail=12):
    dut = XgmiiRx(max_frame=max_frame)
    run = RxRun()

    async def tb(ctx):
        for d, c in words + X.idle_words(tail):
            ctx.set(dut.rxd, d)
            ctx.set(dut.rxc, c)
            await ctx.tick()

    async def monitor(ctx):
        beats = []
        prev_valid = False
        n = 0
        sigs = [dut.o.valid, dut.o.payload, dut.rx_frame, dut.rx_bad_preamble] + \
            [getattr(dut, s) for s in STROBES]
        async for _, _, valid, p, frame, bad_pre, *errs in ctx.tick().sample(*sigs):
            if bad_pre:
                run.bad_preambles += 1
            fired = [s for s, e in zip(STROBES, errs) if e]
            if not (valid and p.last):
                assert not frame and not fired, "strobe outside a last beat"
            if valid:
                if beats:
                    assert prev_valid, "gap inside a delivered frame"
                beats.append((p.data, p.keep, p.last))
                if p.last:
                    assert frame, "rx_frame missing on a last beat"
                    assert len(fired) <= 1
                    status = STATUS_OF[fired[0]] if fired else X.OK
                    assert bool(p.error) == (status != X.OK)
                    run.frames.append((from_beats(beats, 64), bool(p.error), status))
                    run.last_cycles.append(n)
                    beats = []
            prev_valid = bool(valid)
            n += 1

    run_sim(dut, testbenches=[tb], processes=[monitor])
    return run


def check_rx_against_model(run, words, max_frame=1522):
    expected = X.decode(words + X.idle_words(12), max_frame=max_frame)
    got = [(data, status) for data, _, status in run.frames]
    assert got == [(d, s) for d, s in expected if s != X.BAD_PREAMBLE]
    assert run.bad_preambles == sum(s == X.BAD_PREAMBLE for _, s in expected)
    return expected


# ---------------------------------------------------------------------------------------------
# CRC

def test_crc_step_matches_zlib():
    """The gateware CRC step for every octet count gives the zlib CRC; FCS + residue agree."""
    import zlib
    rng = random.Random(3)
    state_in = Signal(32)
    data_in = Signal(64)
    outs = [Signal(32, name=f"s{k}") for k in range(9)]
    m = Module()
    m.d.comb += [o.eq(Crc32.step(state_in, data_in, k)) for k, o in enumerate(outs)]
    cases = [(rng.randbytes(rng.randrange(0, 30)), rng.randbytes(8)) for _ in range(40)]

    async def tb(ctx):
        for prefix, word in cases:
            state = zlib.crc32(prefix) ^ 0xFFFFFFFF
            ctx.set(state_in, state)
            ctx.set(data_in, int.from_bytes(word, "little"))
            for k in range(9):
                got = ctx.get(outs[k])
                assert got ^ 0xFFFFFFFF == zlib.crc32(prefix + word[:k])
                assert got == Crc32.step_int(state, int.from_bytes(word, "little"), k)

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
    body = b"rocegen"
    s = Crc32.INIT
    for b in body + X.fcs(body):
        s = Crc32.step_int(s, b, 1)
    assert s == Crc32.RESIDUE


# ---------------------------------------------------------------------------------------------
# TX

def test_tx_every_length_with_idle_and_errors():
    rng = random.Random(11)
    lengths = list(range(0, 141)) + [200, 509, 777, 1023, 1499, 1500, 1514, 1518]
    packets = [Packet(real_frame(n, rng), error=rng.random() < 0.15) for n in lengths]
    rng.shuffle(packets)
    run = run_tx(packets, idle=0.4, seed=1)
    check_tx_frames(run, packets)


@pytest.mark.parametrize("ifg", [12, 13, 20])
def test_tx_back_to_back_minimum_gap(ifg):
    """With the input always ready the MAC starts each frame as soon as the gap allows: a frame
    of n beats takes n + 3 cycles (4 when its FCS spills over), and i.ready is never low inside
    a frame."""
    rng = random.Random(ifg)
    packets = [Packet(real_frame(n, rng)) for n in range(56, 90)]
    packets += [Packet(real_frame(rng.randrange(60, 1519), rng)) for _ in range(6)]
    run = run_tx(packets, ifg=ifg)
    check_tx_frames(run, packets, ifg=ifg, back_to_back=True)
    # beats of a frame are accepted on consecutive cycles
    by_packet = {}
    for cyc, (_, n) in zip(run.accept_cycles, run.accepted):
        by_packet.setdefault(n, []).append(cyc)
    for cycles in by_packet.values():
        assert cycles == list(range(cycles[0], cycles[0] + len(cycles)))


def test_tx_latency():
    """The start word is on txd the cycle after the first beat is accepted; every beat is on txd
    two cycles after it is accepted."""
    rng = random.Random(5)
    packets = [Packet(real_frame(n, rng)) for n in (64, 100, 300)]
    run = run_tx(packets, idle=0.5, seed=3)
    segs = segments(run.words)
    assert len(run.accept_cycles) == len(run.accepted)
    beat_cycles = {key: cyc for cyc, key in zip(run.accept_cycles, run.accepted)}
    for n, (s, _, seg) in enumerate(segs):
        assert s == beat_cycles[(0, n)] + 1
        for k in range(len(to_beats(packets[n].data, 64))):
            assert run.words[beat_cycles[(k, n)] + 2] == seg[1 + k]


def test_tx_underrun_sends_error_and_recovers():
    """A source that stalls inside frames: each stalled frame is cut with /E/ on the line,
    counted once, its remaining beats are swallowed, and the following frames are intact."""
    rng = random.Random(8)
    packets = [Packet(real_frame(rng.randrange(14, 400), rng)) for _ in range(40)]
    run = run_tx(packets, seed=4, mid_frame_idle=0.15)
    segs = segments(run.words)
    assert len(segs) == len(packets)
    underruns = []
    for (_, q, seg), pkt in zip(segs, packets):
        if seg == X.encode(pkt.data):
            continue
        # start word, k full data words of the frame, then /E/ in lane 0 and idles
        assert seg[0] == X.encode(pkt.data)[0]
        assert seg[-1] == ((X.IDLE_WORD[0] & ~0xFF) | X.ERROR, 0xFF)
        k = len(seg) - 2
        assert 1 <= k < len(to_beats(pkt.data, 64))
        assert bytes(b for b, _ in flat(seg[1:-1])) == pkt.data[:8 * k]
        underruns.append(q // 8)
    assert run.underrun_cycles == underruns
    assert 3 <= len(underruns) < len(packets)
    assert run.frame_cycles == [q // 8 for _, q, _ in segs]
    statuses = [s for _, s in X.decode(run.words)]
    assert statuses.count(X.BAD_CODE) == len(underruns)
    assert statuses.count(X.OK) == len(packets) - len(underruns)


def assert_rejected(exc, match, factory):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(exc, match=match):
            factory()
        gc.collect()


def test_tx_parameters_are_validated():
    assert_rejected(ValueError, "ifg must be from 12 to 1024 octets, not 11", lambda: XgmiiTx(ifg=11))
    assert_rejected(ValueError, "not 1025", lambda: XgmiiTx(ifg=1025))
    assert_rejected(TypeError, "ifg must be an integer", lambda: XgmiiTx(ifg=12.0))


# ---------------------------------------------------------------------------------------------
# RX

def test_rx_every_length_both_lanes():
    rng = random.Random(21)
    frames = [real_frame(n, rng) for n in good_lengths()]
    rng.shuffle(frames)
    words = build_line([X.frame_lanes(f) for f in frames], rng)
    starts = [p % 8 for p, lane in enumerate(flat(words)) if lane == (X.START, 1)]
    assert 0 in starts and 4 in starts
    run = run_rx(words)
    assert [(d, s) for d, _, s in run.frames] == [(X.pad(f), X.OK) for f in frames]
    check_rx_against_model(run, words)


def test_rx_minimum_gap_and_encoded_starts():
    """Frames 5 octets apart (the 802.3 receive minimum) in every lane-0/lane-4 combination, and
    the transmitter's own encoding with starts in lane 0 and lane 4."""
    rng = random.Random(4)
    frames = [real_frame(n, rng) for n in list(range(60, 76)) * 3]
    words = build_line([X.frame_lanes(f) for f in frames], rng, min_gap=5, max_gap=5)
    lanes = flat(words)
    ends = [p for p, lane in enumerate(lanes) if lane == (X.TERMINATE, 1)]
    starts = [p for p, lane in enumerate(lanes) if lane == (X.START, 1)]
    assert sum(s - e == 5 for e, s in zip(ends, starts[1:])) >= 10
    run = run_rx(words)
    assert [(d, s) for d, _, s in run.frames] == [(f, X.OK) for f in frames]
    words = []
    for f in frames:
        start_lane = rng.choice((0, 4))
        if words:
            end_lane = [j for j in range(8) if (words[-1][1] >> j) & 1][0]
            if 8 - end_lane + start_lane < 5:
                words += X.idle_words(1)
        words += X.encode(f, start_lane=start_lane) + X.idle_words(rng.randrange(0, 2))
    run = run_rx(words)
    assert [(d, s) for d, _, s in run.frames] == [(f, X.OK) for f in frames]


def test_rx_latency():
    """Cycles from rxd to o: the first beat 3 cycles after the rxd word holding frame octet 7; the
    last beat 2 cycles after the rxd word holding /T/ when /T/ is in lanes 0..4 (lane-0 start)
    or lane 0 (lane-4 start), 3 cycles otherwise."""
    rng = random.Random(2)
    cases = [(real_frame(length, rng), start_lane)
             for length in range(64, 80) for start_lane in (0, 4)]
    words = []
    marks = []
    for f, start_lane in cases:
        words += X.idle_words(3)
        base = 8 * len(words)
        lanes = flat(X.encode(f, start_lane=start_lane))
        marks.append((base + lanes.index((X.START, 1)), base + lanes.index((X.TERMINATE, 1))))
        words += X.encode(f, start_lane=start_lane)
    run = run_rx(words)
    assert [(d, st) for d, _, st in run.frames] == [(f, X.OK) for f, _ in cases]
    for (f, start_lane), (s, t), last in zip(cases, marks, run.last_cycles):
        first = last - (len(to_beats(f, 64)) - 1)
        assert first == (s + 8 + 7) // 8 + 3
        fast = t % 8 <= 4 if start_lane == 0 else t % 8 == 0
        assert last == t // 8 + (2 if fast else 3), (len(f), start_lane)


def crafted_bad_frames(rng, max_frame):
    """(lanes, expected status) of frames that must be flagged (or, bad preamble, dropped)."""
    out = []
    good = real_frame(80, rng)
    # bad FCS: one flipped bit anywhere in frame or FCS
    for _ in range(6):
        lanes = X.frame_lanes(good)
        p = rng.randrange(8, len(lanes) - 1)
        lanes[p] = (lanes[p][0] ^ (1 << rng.randrange(8)), 0)
        out.append((lanes, X.FCS_ERROR))
    # runts with a correct FCS, every length from 0 to 63 octets with FCS
    for n in range(0, 64):
        body = rng.randbytes(max(n - 4, 0))
        data = (body + X.fcs(body))[:n]
        lanes = X.frame_lanes(b"")[:8] + [(b, 0) for b in data] + [(X.TERMINATE, 1)]
        out.append((lanes, X.RUNT))
    # too long, around the limit and far beyond it
    for n in (max_frame - 1, max_frame, max_frame + 1, max_frame + 5, max_frame + 8,
              max_frame + 9, 3 * max_frame + 7):
        lanes = X.frame_lanes(rng.randbytes(n - 4), padding=False)
        out.append((lanes, X.OK if n <= max_frame else X.TOO_LONG))
    # /E/ inside, or the frame cut short by /I/ or /S/ instead of /T/
    for char in (X.ERROR, X.IDLE, X.START, 0x9C):
        lanes = X.frame_lanes(good)
        p = rng.randrange(9, len(lanes) - 1)
        out.append((lanes[:p] + [(char, 1)], X.BAD_CODE))
    lanes = X.frame_lanes(good)
    out.append((lanes[:-1] + [(X.ERROR, 1)], X.BAD_CODE))
    out.append((X.frame_lanes(good, error=True), X.BAD_CODE))
    # bad start words
    for p in range(1, 8):
        lanes = X.frame_lanes(good)
        lanes[p] = (lanes[p][0] ^ 0x10, 0)
        out.append((lanes, X.BAD_PREAMBLE))
    lanes = X.frame_lanes(good)
    lanes[3] = (X.IDLE, 1)
    out.append((lanes, X.BAD_PREAMBLE))
    return out


@pytest.mark.parametrize("max_frame", [1522, 100])
def test_rx_flags_bad_frames(max_frame):
    rng = random.Random(max_frame)
    crafted = crafted_bad_frames(rng, max_frame)
    rng.shuffle(crafted)
    marker = real_frame(70, rng)
    items = []
    for lanes, _ in crafted:
        items += [lanes, X.frame_lanes(marker)]
    words = build_line(items, rng, min_gap=8, max_gap=30)
    run = run_rx(words, max_frame=max_frame)
    check_rx_against_model(run, words, max_frame)
    # independent of the model: the intended status and octets of each crafted frame, each
    # followed by the intact marker frame
    assert run.bad_preambles == sum(s == X.BAD_PREAMBLE for _, s in crafted)
    assert len(run.frames) == 2 * len(crafted) - run.bad_preambles
    out = iter(run.frames)
    cut = 8 * (max_frame // 8)
    for lanes, status in crafted:
        if status != X.BAD_PREAMBLE:
            data, error, got = next(out)
            assert (got, error) == (status, status != X.OK)
            body = bytes(b for b, c in lanes[8:] if not c)
            if status == X.TOO_LONG and len(body) >= cut + 8:
                assert data == body[:cut]
            else:
                assert data == body[:max(len(body) - 4, 0)]
        assert next(out) == (marker, False, X.OK)


def random_lane(rng):
    r = rng.random()
    if r < 0.55:
        return (rng.getrandbits(8), 0)
    return (rng.choice((X.START, X.TERMINATE, X.ERROR, X.IDLE, X.IDLE, rng.getrandbits(8))), 1)


@pytest.mark.parametrize("seed,max_frame", [(1, 1522), (2, 1522), (3, 72)])
def test_rx_garbage_never_hangs(seed, max_frame):
    """Random octets and control characters, truncated and corrupted frames, long data runs:
    output matches the model lane for lane, nothing bad is ever delivered as good, and a good
    frame after the garbage is received."""
    rng = random.Random(seed)
    goods = [real_frame(rng.randrange(60, min(200, max_frame - 4) + 1), rng) for _ in range(30)]
    start_word = X.frame_lanes(b"")[:8]
    items = []
    for g in goods:
        kind = rng.randrange(6)
        if kind == 0:                       # random octets and control characters
            items.append([random_lane(rng) for _ in range(rng.randrange(1, 120))])
        elif kind == 1:                     # frame cut anywhere
            lanes = X.frame_lanes(g)
            items.append(lanes[:rng.randrange(1, len(lanes))])
        elif kind == 2:                     # frame with a few lanes replaced
            lanes = X.frame_lanes(g)
            for _ in range(rng.randrange(1, 4)):
                p = rng.randrange(0 if rng.random() < 0.3 else 8, len(lanes))
                lanes[p] = random_lane(rng)
            items.append(lanes)
        elif kind == 3:                     # long run of data octets outside any frame
            items.append([(rng.getrandbits(8), 0) for _ in range(rng.randrange(100, 400))])
        elif kind == 4:                     # valid start word, then random lanes
            items.append(start_word + [random_lane(rng) for _ in range(rng.randrange(1, 80))])
        else:                               # valid start word, long data, any control char
            items.append(start_word + [(rng.getrandbits(8), 0)
                                       for _ in range(rng.randrange(20, 2 * max_frame))]
                         + [random_lane(rng) if rng.random() < 0.5 else (X.TERMINATE, 1)])
        items.append(X.frame_lanes(g))
    lanes = [IDLE_LANE] * 8
    for it in items:
        lanes += [IDLE_LANE] * rng.randrange(0, 12)
        lanes += [IDLE_LANE] * (-len(lanes) % 4)
        lanes += it
    lanes += [IDLE_LANE] * (-len(lanes) % 8) + [IDLE_LANE] * 16
    tail = [random_lane(rng) for _ in range(400)] + [IDLE_LANE] * 16
    lanes += tail
    lanes += [IDLE_LANE] * (-len(lanes) % 8)
    final = real_frame(min(99, max_frame - 4), rng)
    lanes += X.frame_lanes(final) + [IDLE_LANE] * 24
    words = X.pack_words(lanes)
    run = run_rx(words, max_frame=max_frame)
    check_rx_against_model(run, words, max_frame)
    good_set = {X.pad(g) for g in goods + [final]}
    for data, error, _ in run.frames:
        if not error:
            assert data in good_set
    assert run.frames[-1] == (final, False, X.OK)
    assert sum(not e for _, e, _ in run.frames) >= 3


def test_rx_jumbo():
    rng = random.Random(9)
    frames = [real_frame(n, rng) for n in (9000, 1518, 9018)]
    words = build_line([X.frame_lanes(f) for f in frames], rng)
    run = run_rx(words, max_frame=9022)
    assert [(d, s) for d, _, s in run.frames] == [(f, X.OK) for f in frames]
    run = run_rx(words, max_frame=1522)
    assert [s for _, _, s in run.frames] == [X.TOO_LONG, X.OK, X.TOO_LONG]
    check_rx_against_model(run, words)


def test_rx_parameters_are_validated():
    assert_rejected(ValueError, "max_frame must be from 64 to 65535 octets .* not 63",
                    lambda: XgmiiRx(max_frame=63))
    assert_rejected(ValueError, "not 65536", lambda: XgmiiRx(max_frame=65536))
    assert_rejected(TypeError, "max_frame must be an integer", lambda: XgmiiRx(max_frame=True))


# ---------------------------------------------------------------------------------------------
# RX -> FIFO -> TX

def test_rx_to_tx_loop():
    """Frames received, queued in a FIFO and transmitted again come out identical (good ones)
    or sent as errored (bad ones); the transmitter never underruns behind the receiver."""
    rng = random.Random(31)
    items = []
    for _ in range(30):
        f = real_frame(rng.randrange(60, 700), rng)
        r = rng.random()
        if r < 0.15:
            lanes = X.frame_lanes(f)
            lanes[20] = (lanes[20][0] ^ 1, 0)
        elif r < 0.25:
            lanes = X.frame_lanes(f, error=True)
        else:
            lanes = X.frame_lanes(f)
        items.append(lanes)
    words = build_line(items, rng, min_gap=5, max_gap=12)
    rx_expected = [(d, s) for d, s in X.decode(words) if s != X.BAD_PREAMBLE]

    m = Module()
    rx = m.submodules.rx = XgmiiRx()
    tx = m.submodules.tx = XgmiiTx()
    fifo = m.submodules.fifo = SyncFIFOBuffered(width=64 + 8 + 2, depth=1024)
    m.d.comb += [
        fifo.w_data.eq(Cat(rx.o.payload.data, rx.o.payload.keep, rx.o.payload.last,
                           rx.o.payload.error)),
        fifo.w_en.eq(rx.o.valid),
        tx.i.payload.data.eq(fifo.r_data[:64]),
        tx.i.payload.keep.eq(fifo.r_data[64:72]),
        tx.i.payload.last.eq(fifo.r_data[72]),
        tx.i.payload.error.eq(fifo.r_data[73]),
        tx.i.valid.eq(fifo.r_rdy),
        fifo.r_en.eq(tx.i.ready),
    ]
    out = []
    underruns = []

    async def tb(ctx):
        for d, c in words + X.idle_words(400):
            ctx.set(rx.rxd, d)
            ctx.set(rx.rxc, c)
            assert ctx.get(fifo.w_rdy)
            await ctx.tick()

    async def monitor(ctx):
        async for _, _, d, c, ur in ctx.tick().sample(tx.txd, tx.txc, tx.tx_underrun):
            out.append((d, c))
            if ur:
                underruns.append(1)

    run_sim(m, testbenches=[tb], processes=[monitor])
    assert not underruns
    assert X.decode(out) == [(X.pad(d), X.OK if s == X.OK else X.BAD_CODE)
                             for d, s in rx_expected]
    assert sum(s == X.OK for _, s in rx_expected) >= 20
