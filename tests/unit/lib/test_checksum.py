import gc
import random
import warnings

import pytest
import scapy.utils
from amaranth.hdl import Cat, Module, Mux, Signal, UnusedElaboratable
from amaranth.lib import data
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from rocegen.gateware.lib.checksum import PacketChecksum, be_words, ones_complement_sum
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.sim.models.net import checksum as model
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.headers import IPV4
from rocegen.wire.headers import UDP as UDP_HDR

META = data.StructLayout({"seed": 16})


def reference_sum(words, width=16):
    """The one's complement sum by its definition: congruent to the plain sum modulo
    2**width - 1, zero only for zero."""
    total = sum(words)
    return 0 if total == 0 else (total - 1) % ((1 << width) - 1) + 1


# ---- pure-Python model ----

def test_model_sum_definition():
    rng = random.Random(1)
    cases = [[], [0], [0, 0], [0xFFFF], [0xFFFF, 0xFFFF], [0xFFFF, 1], [0x8000, 0x8000],
             [0xFFFF] * 70000]
    cases += [[rng.getrandbits(16) for _ in range(rng.randrange(1, 300))] for _ in range(200)]
    for words in cases:
        assert model.ones_complement_sum(words) == reference_sum(words)
    assert model.ones_complement_sum([0xFF, 0x01], width=8) == 0x01
    with pytest.raises(ValueError, match="does not fit in 16 bits"):
        model.ones_complement_sum([0x10000])


def test_model_matches_scapy_checksum():
    rng = random.Random(2)
    for n in list(range(0, 80)) + [rng.randrange(80, 2000) for _ in range(50)]:
        raw = rng.randbytes(n)
        assert model.internet_checksum(raw) == scapy.utils.checksum(raw), n
    # data whose sum is a non-zero multiple of 0xFFFF, and all-zero data
    for raw in (b"\xff\xff", b"\x80\x00\x7f\xff", b"\x00" * 7, b"\xff"):
        assert model.internet_checksum(raw) == scapy.utils.checksum(raw), raw
    assert model.be_words(b"\x12\x34\x56") == [0x1234, 0x5600]


def scapy_udp(rng, length):
    pkt = IP(src=".".join(str(rng.randrange(256)) for _ in range(4)),
             dst=".".join(str(rng.randrange(256)) for _ in range(4)),
             id=rng.getrandbits(16), ttl=rng.randrange(1, 256)) / \
        UDP(sport=rng.getrandbits(16), dport=4791) / Raw(rng.randbytes(length))
    return IP(bytes(pkt))             # parsed back: checksums filled in


def test_model_udp_checksum_matches_scapy():
    rng = random.Random(3)
    for length in list(range(0, 40)) + [1000, 1001]:
        pkt = scapy_udp(rng, length)
        ip = IPV4.unpack(bytes(pkt))
        udp = bytearray(bytes(pkt[UDP]))
        udp[6:8] = b"\0\0"
        assert model.udp_checksum(ip["src"], ip["dst"], udp) == pkt[UDP].chksum
        # the receive-side check: everything including the checksum field sums to 0xFFFF
        seed = model.pseudo_header_sum(ip["src"], ip["dst"], 17, len(udp))
        assert model.data_sum(bytes(pkt[UDP]), seed) == 0xFFFF


# ---- combinational adder tree ----

def run_comb(values_list, nvalues, width=16):
    m = Module()
    ins = [Signal(width, name=f"v{k}") for k in range(nvalues)]
    out = Signal(width)
    m.d.comb += out.eq(ones_complement_sum(ins, width))
    got = []

    async def tb(ctx):
        for values in values_list:
            for s, v in zip(ins, values, strict=True):
                ctx.set(s, v)
            got.append(ctx.get(out))

    run_sim(m, testbenches=[tb])
    return got


@pytest.mark.parametrize("nvalues", [1, 2, 3, 10, 33])
def test_adder_tree_matches_model(nvalues):
    rng = random.Random(nvalues)
    cases = [[0] * nvalues, [0xFFFF] * nvalues, [1] + [0xFFFF] * (nvalues - 1)]
    cases += [[rng.getrandbits(16) for _ in range(nvalues)] for _ in range(300)]
    assert run_comb(cases, nvalues) == [reference_sum(c) for c in cases]


def test_adder_tree_other_width_and_checks():
    rng = random.Random(4)
    cases = [[rng.getrandbits(8) for _ in range(5)] for _ in range(200)] + [[0xFF] * 5, [0] * 5]
    assert run_comb(cases, 5, width=8) == [reference_sum(c, 8) for c in cases]
    assert ones_complement_sum([]).value == 0
    with pytest.raises(ValueError, match="17 bits wide, more than the word width 16"):
        ones_complement_sum([Signal(16), Signal(17)])
    with pytest.raises(ValueError, match="word width must be a positive integer"):
        ones_complement_sum([Signal(16)], width=0)


def test_ipv4_header_checksum_matches_scapy():
    """be_words of the header lanes + the adder tree give scapy's IPv4 header checksum."""
    rng = random.Random(5)
    m = Module()
    hdr = Signal(IPV4.layout)
    total = Signal(16)
    m.d.comb += total.eq(ones_complement_sum(be_words(IPV4.to_lanes(hdr))))
    pkts = [scapy_udp(rng, rng.randrange(0, 100)) for _ in range(50)]
    got = []

    async def tb(ctx):
        for pkt in pkts:
            fields = IPV4.unpack(bytes(pkt))
            fields["checksum"] = 0
            ctx.set(hdr, fields)
            got.append(~ctx.get(total) & 0xFFFF)

    run_sim(m, testbenches=[tb])
    assert got == [p.chksum for p in pkts]


def test_be_words_odd_length():
    assert len(be_words(Signal(24))) == 2
    with pytest.raises(ValueError, match="whole number of bytes"):
        be_words(Signal(12))


# ---- PacketChecksum ----

def run_packet_checksum(width, packets, *, idle, backpressure, seed, via_observe=False):
    """Drive ``packets`` on a stream that PacketChecksum taps; the seed comes from the
    metadata on first beats and from junk on the others."""
    m = Module()
    s = PacketSignature(width, META).create(path=("s",))
    if via_observe:
        m.submodules.ck = ck = PacketChecksum(width)
        m.d.comb += ck.observe(s)
    else:
        m.submodules.ck = ck = PacketChecksum(width, META)
        m.d.comb += [ck.valid.eq(s.valid), ck.ready.eq(s.ready), ck.payload.eq(s.payload)]
    first = Signal(init=1)
    junk = Signal(16, init=0xBEEF)
    if not via_observe:
        # garbage in the lanes outside keep, which must not count
        m.d.comb += ck.payload.data.eq(Cat(*(
            Mux(s.payload.keep[j], s.payload.data[8 * j:8 * j + 8], junk[:8] ^ j)
            for j in range(width // 8))))
    m.d.sync += junk.eq(junk * 75 + 74)
    with m.If(s.valid & s.ready):
        m.d.sync += first.eq(s.payload.last)
    m.d.comb += ck.seed.eq(Mux(first, s.payload.meta.seed, junk))

    drv = StreamDriver(s, width, idle=idle, seed=seed)
    col = StreamCollector(s, width, backpressure=backpressure, seed=seed + 1)
    lasts, results = [], []
    B = width // 8
    deadline = 20 * sum(max(1, -(-len(p.data) // B)) for p in packets) + 200

    async def monitor(ctx):
        cycle = 0
        async for _, _, v, r, last, ov, res in ctx.tick().sample(
                s.valid, s.ready, s.payload.last, ck.done, ck.sum):
            cycle += 1
            if v and r and last:
                lasts.append(cycle)
            if ov:
                results.append((cycle, res))

    async def send(ctx):
        await drv.send(ctx, packets)

    async def watchdog(ctx):
        for _ in range(deadline):
            if len(col.packets) >= len(packets):
                break
            await ctx.tick()
        else:
            raise AssertionError("stream stuck")
        for _ in range(ck.latency + 5):
            await ctx.tick()

    run_sim(m, testbenches=[send, watchdog], processes=[col.run, monitor])
    assert [p.data for p in col.packets] == [p.data for p in packets]   # the tap is passive
    return ck.latency, lasts, results


def random_packets(width, rng, extra=20):
    B = width // 8
    lengths = list(range(0, 2 * B + 2)) + [rng.randrange(0, 8 * B) for _ in range(extra)]
    rng.shuffle(lengths)
    packets = []
    for n in lengths:
        kind = rng.random()
        raw = b"\xff" * n if kind < 0.05 else bytes(n) if kind < 0.1 else rng.randbytes(n)
        seed = rng.choice([0, 0xFFFF, rng.getrandbits(16)])
        packets.append(Packet(raw, {"seed": seed}, error=rng.random() < 0.2))
    return packets


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_packet_sums_and_latency(width):
    """Random idle and backpressure on the observed stream: one result per packet, equal to
    the model's sum of seed and bytes, exactly ``latency`` cycles after the last beat."""
    rng = random.Random(width)
    packets = random_packets(width, rng)
    latency, lasts, results = run_packet_checksum(width, packets, idle=0.3, backpressure=0.3,
                                                  seed=1)
    assert latency == {64: 4, 128: 4, 256: 5, 512: 5}[width]
    assert [r for _, r in results] == [model.data_sum(p.data, p.meta["seed"]) for p in packets]
    assert [c for c, _ in results] == [c + latency for c in lasts]


@pytest.mark.parametrize("width", [64, 512])
def test_back_to_back_single_beats(width):
    """Packets of one beat on consecutive cycles give results on consecutive cycles."""
    rng = random.Random(width + 1)
    B = width // 8
    packets = [Packet(rng.randbytes(rng.randrange(0, B + 1)), {"seed": rng.getrandbits(16)})
               for _ in range(60)]
    packets += random_packets(width, rng, extra=5)
    latency, lasts, results = run_packet_checksum(width, packets, idle=0.0, backpressure=0.0,
                                                  seed=2, via_observe=True)
    assert [r for _, r in results] == [model.data_sum(p.data, p.meta["seed"]) for p in packets]
    cycles = [c for c, _ in results]
    assert cycles == [c + latency for c in lasts]
    assert cycles[:60] == list(range(cycles[0], cycles[0] + 60))


@pytest.mark.parametrize("width", [64, 512])
def test_udp_checksum_of_scapy_packets(width):
    """PacketChecksum over the UDP segment (checksum field zeroed) seeded with the
    pseudo-header sum gives scapy's UDP checksum; over the segment as sent it gives 0xFFFF."""
    rng = random.Random(6)
    pkts = [scapy_udp(rng, n) for n in list(range(0, 2 * (width // 8) + 2, 3)) + [900, 1473]]
    packets = []
    for pkt in pkts:
        ip = IPV4.unpack(bytes(pkt))
        segment = bytes(pkt[UDP])
        seed = model.pseudo_header_sum(ip["src"], ip["dst"], ip["protocol"], len(segment))
        zeroed = UDP_HDR.pack(**{**UDP_HDR.unpack(segment), "checksum": 0}) + segment[8:]
        packets.append(Packet(zeroed, {"seed": seed}))
        packets.append(Packet(segment, {"seed": seed}))
    _, _, results = run_packet_checksum(width, packets, idle=0.2, backpressure=0.2, seed=3)
    sums = [r for _, r in results]
    assert [(~x & 0xFFFF) or 0xFFFF for x in sums[0::2]] == [p[UDP].chksum for p in pkts]
    assert sums[1::2] == [0xFFFF] * len(pkts)


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="width must be one of"):
            PacketChecksum(16)
        gc.collect()
