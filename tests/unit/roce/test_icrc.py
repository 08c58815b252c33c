"""ICRC insertion and checking in the Amaranth simulator, against the reference model
(:mod:`rocegen.sim.models.icrc`) and the shared vectors."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, UnusedElaboratable
from amaranth.lib import data, wiring

from rocegen.gateware.roce.icrc import ICRC_SEED, IcrcCheck, IcrcInsert, icrc_mask
from rocegen.sim.models import icrc as model
from rocegen.sim.models.net.checksum import internet_checksum
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import OfferMonitor, StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.vectors import read_vectors
from rocegen.wire.headers import BTH, ETH, ETH_VLAN, IPV4, IPV6, UDP, UDP_PORT_ROCEV2
from tests.tiers import full

META = data.StructLayout({"tag": 12})
HEADERS = {4: IPV4.length + UDP.length + BTH.length, 6: IPV6.length + UDP.length + BTH.length}


def link_header(rng, offset, ip_version):
    ethertype = 0x0800 if ip_version == 4 else 0x86DD
    if offset == 14:
        return ETH.pack(dst=rng.getrandbits(48), src=rng.getrandbits(48), ethertype=ethertype)
    if offset == 18:
        return ETH_VLAN.pack(dst=rng.getrandbits(48), src=rng.getrandbits(48), tpid=0x8100,
                             pcp=rng.getrandbits(3), vid=rng.getrandbits(12), ethertype=ethertype)
    return rng.randbytes(offset)


def roce_frame(rng, body_len, *, offset=14, ip_version=4):
    """A frame without ICRC: link header, IP, UDP and BTH with random (masked fields too) but
    consistent values, then ``body_len`` random bytes (any length, to reach every alignment)."""
    udp_len = UDP.length + BTH.length + body_len + model.ICRC_LEN
    bth = BTH.pack(opcode=rng.choice([0x04, 0x06, 0x0A, 0x11, 0x81]), se=rng.getrandbits(1),
                   m=rng.getrandbits(1), padcnt=rng.getrandbits(2), pkey=0xFFFF,
                   fecn=rng.getrandbits(1), becn=rng.getrandbits(1), resv6=rng.getrandbits(6),
                   dest_qp=rng.getrandbits(24), ack_req=rng.getrandbits(1),
                   psn=rng.getrandbits(24))
    udp = UDP.pack(src_port=rng.randrange(0xC000, 0x10000), dst_port=UDP_PORT_ROCEV2,
                   length=udp_len, checksum=rng.getrandbits(16))
    if ip_version == 4:
        fields = dict(version=4, ihl=5, dscp=rng.getrandbits(6), ecn=rng.getrandbits(2),
                      total_length=IPV4.length + udp_len, identification=rng.getrandbits(16),
                      df=1, ttl=rng.randrange(1, 256), protocol=17, src=rng.getrandbits(32),
                      dst=rng.getrandbits(32))
        ip = IPV4.pack(**fields, checksum=internet_checksum(IPV4.pack(**fields)))
    else:
        ip = IPV6.pack(version=6, traffic_class=rng.getrandbits(8),
                       flow_label=rng.getrandbits(20), payload_length=udp_len, next_header=17,
                       hop_limit=rng.randrange(1, 256), src=rng.getrandbits(128),
                       dst=rng.getrandbits(128))
    return link_header(rng, offset, ip_version) + ip + udp + bth + rng.randbytes(body_len)


def every_alignment(width):
    """Body lengths that give every frame length modulo the beat width, twice over."""
    B = width // 8
    return list(range(0, 2 * B + 1)) + [300, 1024]


def rand_meta(rng):
    return {"tag": rng.getrandbits(12)}


def run_block(dut, width, packets, *, idle=0.3, backpressure=0.3, seed=0, count_bad=False,
              gaps="anywhere"):
    """Sends ``packets`` through ``dut`` under random idle cycles (``gaps``: anywhere, or
    only between packets) and backpressure; every beat offered and not taken must stay
    offered. Returns the collector and the number of ``icrc_bad`` strobes."""
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed, gaps=gaps)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    offers = OfferMonitor(dut.o)
    bad = []

    async def watch_bad(ctx):
        async for _, _, strobe in ctx.tick().sample(dut.icrc_bad):
            if strobe:
                bad.append(1)

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()
        for _ in range(20):                 # late strobes or extra packets would show now
            await ctx.tick()

    run_sim(dut, testbenches=[tb],
            processes=[col.run, offers.run] + ([watch_bad] if count_bad else []))
    assert len(col.packets) == len(packets)
    if backpressure:
        assert offers.held > 0
    return col, len(bad)


def expected_check(frame, offset, ip_version):
    """What IcrcCheck must say about ``frame``: ``True`` if its ICRC is right."""
    min_len = offset + HEADERS[ip_version] + model.ICRC_LEN
    return len(frame) >= min_len and model.icrc(frame[offset:-4]) == frame[-4:]


# ---- insertion ----

@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("offset,ip_version", [(14, 4), (0, 4), (18, 6)])
def test_insert_matches_model(width, offset, ip_version):
    rng = random.Random(width + offset)
    frames = [roce_frame(rng, n, offset=offset, ip_version=ip_version)
              for n in every_alignment(width)]
    packets = [Packet(f, rand_meta(rng), rng.random() < 0.15) for f in frames]
    dut = IcrcInsert(width, META, offset=offset, ip_version=ip_version)
    col, _ = run_block(dut, width, packets, seed=width)
    for sent, got in zip(packets, col.packets):
        assert got.data == sent.data + model.icrc(sent.data[offset:]), len(sent.data)
        assert got.error == sent.error
        assert got.meta == sent.meta


@pytest.mark.parametrize("width", [64, 512])
def test_insert_leaves_steadily(width):
    """A source that pauses only between packets, the output stalling at random: every packet
    leaves a beat in every cycle the output takes one (the transmit path's promise to the MAC),
    although its beats pass beside the queue while it is empty and through it after a stall."""
    rng = random.Random(width + 5)
    B = width // 8
    frames = [roce_frame(rng, rng.randrange(0, 6 * B)) for _ in range(60)]
    dut = shared(IcrcInsert, width)
    col, _ = run_block(dut, width, [Packet(f) for f in frames], idle=0.5, backpressure=0.4,
                       seed=width, gaps="between")
    assert [p.data for p in col.packets] == [f + model.icrc(f[14:]) for f in frames]
    assert col.starved == 0


@pytest.mark.parametrize("width", [64, 512])
def test_insert_short_packets_are_flagged(width):
    """Packets shorter than the link header + IP + UDP + BTH get 4 bytes and ``error``."""
    rng = random.Random(3)
    dut = shared(IcrcInsert, width)
    lengths = list(range(0, dut.min_length + 1)) + [dut.min_length + 7]
    packets = [Packet(rng.randbytes(n)) for n in lengths]
    col, _ = run_block(dut, width, packets, seed=4)
    for sent, got in zip(packets, col.packets):
        assert got.data[:-4] == sent.data
        assert len(got.data) == len(sent.data) + 4
        assert got.error == (len(sent.data) < dut.min_length), len(sent.data)
    assert dut.min_length == 14 + 40


@pytest.mark.parametrize("width", [64, 512])
def test_masked_fields_do_not_change_the_icrc(width):
    """Changing TOS, TTL, IP checksum, UDP checksum or BTH byte 4 leaves the inserted ICRC
    alone; changing any other header byte changes it."""
    rng = random.Random(5)
    base = roce_frame(rng, 37)
    mask = icrc_mask(4)
    variants, same = [], []
    for pos in range(14, 14 + len(mask)):
        f = bytearray(base)
        f[pos] ^= mask[pos - 14] if mask[pos - 14] else 0x01
        variants.append(bytes(f))
        same.append(mask[pos - 14] == 0xFF)
    dut = shared(IcrcInsert, width)
    col, _ = run_block(dut, width, [Packet(base)] + [Packet(v) for v in variants], seed=6)
    ref = col.packets[0].data[-4:]
    assert ref == model.icrc(base[14:])
    for pos, (is_masked, got) in enumerate(zip(same, col.packets[1:])):
        assert (got.data[-4:] == ref) == is_masked, f"byte {pos} of the datagram"
    assert sum(same) == 7               # TOS, TTL, 2 x checksum, 2 x UDP checksum, BTH byte 4


# ---- checking ----

def corrupt(rng, frame, offset):
    """One flipped bit in the ICRC-covered bytes or in the ICRC, avoiding masked bits."""
    mask = icrc_mask(4 if frame[offset] >> 4 == 4 else 6)
    while True:
        pos = rng.randrange(offset, len(frame))
        bit = 1 << rng.randrange(8)
        rel = pos - offset
        if rel < len(mask) and mask[rel] & bit:
            continue
        f = bytearray(frame)
        f[pos] ^= bit
        return bytes(f)


def remask(rng, frame, offset):
    """The frame with every masked bit given a new random value (the ICRC stays right)."""
    mask = icrc_mask(4 if frame[offset] >> 4 == 4 else 6)
    f = bytearray(frame)
    for rel, bits in enumerate(mask):
        f[offset + rel] ^= rng.getrandbits(8) & bits
    return bytes(f)


@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("offset,ip_version", [(14, 4), (0, 4), (18, 6)])
def test_check_matches_model(width, offset, ip_version):
    rng = random.Random(width * 3 + offset)
    packets = []
    for n in every_alignment(width):
        good = model_append(roce_frame(rng, n, offset=offset, ip_version=ip_version), offset)
        kind = rng.choice(["good", "corrupt", "remask"])
        frame = {"good": good, "corrupt": corrupt(rng, good, offset),
                 "remask": remask(rng, good, offset)}[kind]
        packets.append(Packet(frame, rand_meta(rng), rng.random() < 0.1))
    # too short to be RoCEv2: down to nothing at all
    dut = IcrcCheck(width, META, offset=offset, ip_version=ip_version)
    for n in [0, 1, 3, 4, 5, dut.min_length - 1]:
        packets.append(Packet(rng.randbytes(n), rand_meta(rng)))
    rng.shuffle(packets)
    col, bad = run_block(dut, width, packets, seed=width + 1, count_bad=True)
    verdicts = [expected_check(p.data, offset, ip_version) for p in packets]
    assert 0 < sum(verdicts) < len(packets)
    for sent, ok, got in zip(packets, verdicts, col.packets):
        assert got.data == sent.data[:-4]           # (empty for 4 bytes or fewer)
        assert got.error == (sent.error or not ok), len(sent.data)
        assert got.meta == sent.meta
    assert bad == verdicts.count(False)


def model_append(frame, offset):
    return frame + model.icrc(frame[offset:])


@pytest.mark.parametrize("width", [64, full(128), 512])
def test_shared_vectors(width):
    """Every vector passes IcrcCheck, and IcrcInsert rebuilds it from the frame without ICRC,
    in the configuration (VLAN tag, IP version) that the vector needs."""
    groups = {}
    for name, frame in read_vectors():
        offset = model.ip_offset(frame)
        version = frame[offset] >> 4
        groups.setdefault((offset, version), []).append((name, frame))
    assert set(groups) == {(14, 4), (14, 6), (18, 4)}
    for (offset, version), vectors in groups.items():
        chk = IcrcCheck(width, offset=offset, ip_version=version)
        col, bad = run_block(chk, width, [Packet(f) for _, f in vectors], seed=7, count_bad=True)
        for (name, frame), got in zip(vectors, col.packets):
            assert got.data == frame[:-4] and not got.error, name
        assert bad == 0
        ins = IcrcInsert(width, offset=offset, ip_version=version)
        col, _ = run_block(ins, width, [Packet(f[:-4]) for _, f in vectors], seed=8)
        for (name, frame), got in zip(vectors, col.packets):
            assert got.data == frame and not got.error, name


# ---- insertion then checking, timing ----

class Loop(wiring.Component):
    def __init__(self, width):
        self.ins = IcrcInsert(width, META)
        self.chk = IcrcCheck(width, META)
        super().__init__({"i": wiring.In(self.ins.i.signature.flip()),
                          "o": wiring.Out(self.chk.o.signature),
                          "icrc_bad": wiring.Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ins, m.submodules.chk = self.ins, self.chk
        wiring.connect(m, wiring.flipped(self.i), self.ins.i)
        wiring.connect(m, self.ins.o, self.chk.i)
        wiring.connect(m, self.chk.o, wiring.flipped(self.o))
        m.d.comb += self.icrc_bad.eq(self.chk.icrc_bad)
        return m


@pytest.mark.parametrize("width", [64, 512])
def test_insert_then_check_round_trip(width):
    rng = random.Random(9)
    packets = [Packet(roce_frame(rng, rng.randrange(0, 700)), rand_meta(rng)) for _ in range(60)]
    dut = Loop(width)
    col, bad = run_block(dut, width, packets, idle=0.2, backpressure=0.4, seed=10, count_bad=True)
    assert [p.data for p in col.packets] == [p.data for p in packets]
    assert not any(p.error for p in col.packets)
    assert bad == 0


def run_full_rate(dut, width, packets, extra=()):
    """No idle input, no backpressure: per cycle (i.valid, i.ready, i.last, o.valid, o.last,
    then the ``extra`` signals)."""
    drv = StreamDriver(dut.i, width)
    col = StreamCollector(dut.o, width)
    trace = []

    async def watch(ctx):
        async for _, _, *sig in ctx.tick().sample(dut.i.valid, dut.i.ready, dut.i.payload.last,
                                                   dut.o.valid, dut.o.payload.last, *extra):
            trace.append(tuple(int(s) for s in sig))

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, watch])
    return col, trace


@pytest.mark.parametrize("width", [64, 128, 512])
def test_insert_full_rate_and_latency(width):
    """Back to back, the input idles only for the cycle after a packet whose ICRC needs an
    extra beat, the output never idles inside the burst, and every packet's last beat leaves
    exactly ``latency`` cycles (one more with an extra beat) after it came in."""
    B = width // 8
    rng = random.Random(11)
    frames = [roce_frame(rng, rng.randrange(0, 3 * B)) for _ in range(120)]
    dut = shared(IcrcInsert, width)
    col, trace = run_full_rate(dut, width, [Packet(f) for f in frames])
    assert [p.data for p in col.packets] == [f + model.icrc(f[14:]) for f in frames]
    ins = [t for t, (v, r, last, _, _) in enumerate(trace) if v and r and last]
    outs = [t for t, (_, _, _, v, last) in enumerate(trace) if v and last]
    straddles = [(len(f) % B or B) > B - 4 for f in frames]       # ICRC needs an extra beat
    assert [o - i for i, o in zip(ins, outs)] == [dut.latency + s for s in straddles]
    first_in = next(t for t, s in enumerate(trace) if s[0] and s[1])
    last_in = ins[-1]
    stalls = [t for t in range(first_in, last_in) if not trace[t][1]]
    assert stalls == [t + 1 for t, s in zip(ins, straddles) if s and t + 1 <= last_in]
    first_out = next(t for t, s in enumerate(trace) if s[3])
    assert all(trace[t][3] for t in range(first_out, outs[-1] + 1))


@pytest.mark.parametrize("width", [64, 512])
def test_check_full_rate_and_latency(width):
    """Back to back, the input never idles, the last beat of every frame leaves ``latency - 1``
    cycles after it came in (with the output always taken, no beat waits: each goes straight
    on, the next one being known, or, before a last beat of ICRC bytes only, is held and
    leaves merged with it), and ``icrc_bad`` pulses ``bad_latency`` cycles after the last beat
    of each corrupted frame."""
    B = width // 8
    rng = random.Random(12)
    frames = [model_append(roce_frame(rng, rng.randrange(0, 3 * B)), 14) for _ in range(120)]
    frames = [corrupt(rng, f, 14) if k % 3 == 1 else f for k, f in enumerate(frames)]
    dut = shared(IcrcCheck, width)
    col, trace = run_full_rate(dut, width, [Packet(f) for f in frames], [dut.icrc_bad])
    assert [p.data for p in col.packets] == [f[:-4] for f in frames]
    assert [p.error for p in col.packets] == [k % 3 == 1 for k in range(len(frames))]
    ins = [t for t, (v, r, last, *_) in enumerate(trace) if v and r and last]
    outs = [t for t, (_, _, _, v, last, _) in enumerate(trace) if v and last]
    assert [o - i for i, o in zip(ins, outs)] == [dut.latency - 1] * len(frames)
    # (frames of several beats, ending in a beat of ICRC bytes only, and at 512 bits of one
    # beat, all among them)
    assert any(len(f) > B for f in frames) and any((len(f) % B or B) <= 4 for f in frames)
    assert any(len(f) <= B for f in frames) == (width == 512)
    strobes = [t for t, s in enumerate(trace) if s[5]]
    assert strobes == [t + dut.bad_latency for k, t in enumerate(ins) if k % 3 == 1]
    first_in = next(t for t, s in enumerate(trace) if s[0])
    assert all(trace[t][1] for t in range(first_in, ins[-1] + 1))


# ---- parameters and the CRC helper ----

def unused(make):
    """Build blocks that are never elaborated without Amaranth's unused-block warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        result = make()
        gc.collect()
    return result


def test_parameters_are_validated():
    unused(check_parameters)


def check_parameters():
    for cls in (IcrcInsert, IcrcCheck):
        with pytest.raises(ValueError, match="width"):
            cls(96)
        with pytest.raises(TypeError, match="offset"):
            cls(64, offset=1.5)
        with pytest.raises(ValueError, match="offset"):
            cls(64, offset=-1)
        with pytest.raises(ValueError, match="ip_version"):
            cls(64, ip_version=5)
        with pytest.raises(TypeError, match="meta"):
            cls(64, meta={"a": 1})
    assert ICRC_SEED == 0xDEBB20E3


def test_logic_levels_reported():
    """The depth figures the docstring promises for 512 bits: no stage deeper than 5 LUTs (the
    cores are mapped for 8), the state loop 2; and the three stages and the latency it promises
    at every width: 3 cycles for the insertion (its queue passes beats beside it while empty), 4 for the
    check (its output slice takes beats straight from the pipeline)."""
    for cls in (IcrcInsert, IcrcCheck):
        levels = unused(lambda cls=cls: cls(512).logic_levels)
        assert max(levels.values()) <= 5
        assert levels["state loop (A^B s + partials)"] == 2
        for width in (64, 128, 256, 512):
            block = unused(lambda cls=cls, width=width: cls(width))
            assert (block.stages, block.latency) == (3, 3 if cls is IcrcInsert else 4)
