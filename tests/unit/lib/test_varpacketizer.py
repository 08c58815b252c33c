"""Variable-length header insertion (and zero tail) against a byte-level model, with random idle
input and random output backpressure, plus the full-rate throughput check."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.lib.varpacketizer import VarPacketizer
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim


def model(hdr, hdr_len, payload, tail):
    """The bytes the packetizer emits: the first ``hdr_len`` header bytes, payload, zeros."""
    return bytes(hdr[:hdr_len]) + bytes(payload) + bytes(tail)


def make_meta(max_header, tail_bits):
    fields = {"hdr": 8 * max_header, "hdr_len": range(max_header + 1), "tag": 16}
    if tail_bits:
        fields["tail_len"] = tail_bits
    return data.StructLayout(fields)


def payload_lengths(width, rng):
    B = width // 8
    out = [0, 1, 2, 3]
    for k in (1, 2, 3):
        out += [k * B - 1, k * B, k * B + 1]
    out += [rng.randrange(0, 4 * B) for _ in range(40)]
    rng.shuffle(out)
    return out


def make_packets(width, max_header, lengths, tail_bits, rng, count=None):
    header_lengths = list(lengths) if lengths is not None else list(range(max_header + 1))
    packets = []
    expected = []
    plens = payload_lengths(width, rng)
    if count is not None:
        plens = [rng.choice(plens) for _ in range(count)]
    for n in plens:
        # every header length shows up: the extreme ones and random ones in between
        h = rng.choice([header_lengths[0], header_lengths[-1]] + header_lengths)
        tail = rng.randrange(1 << tail_bits) if tail_bits else 0
        hdr = rng.randbytes(max_header)
        payload = rng.randbytes(n)
        meta = {"hdr": int.from_bytes(hdr, "little"), "hdr_len": h,
                "tag": rng.getrandbits(16)}
        if tail_bits:
            meta["tail_len"] = tail
        err = rng.random() < 0.2
        packets.append(Packet(payload, meta, error=err))
        expected.append((model(hdr, h, payload, tail), {"tag": meta["tag"]}, err))
    return packets, expected


def run(width, max_header, lengths, tail_bits, packets, *, idle, backpressure, seed):
    dut = VarPacketizer(width, max_header, make_meta(max_header, tail_bits), lengths=lengths)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run])
    return col


def check(col, expected):
    assert len(col.packets) == len(expected)
    for n, (got, (want, meta, err)) in enumerate(zip(col.packets, expected)):
        assert got.data == want, f"packet {n}: {got.data.hex()} != {want.hex()}"
        assert got.meta == meta, f"packet {n}"
        assert got.error == err, f"packet {n}"


CONFIGS = [
    # (max_header, lengths, tail_bits)
    (20, None, 2),
    (70, None, 2),
    (256, (0, 1, 12, 16, 28, 32, 255, 256), 2),
    (40, (0, 8, 40), 0),
    (1, None, 0),
    (9, (3, 9), 4),
]


def config_id(config):
    max_header, lengths, tail_bits = config
    return f"h{max_header}-{'all' if lengths is None else 'set'}-t{tail_bits}"


@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("config", CONFIGS, ids=config_id)
def test_matches_model(width, config):
    max_header, lengths, tail_bits = config
    rng = random.Random(width * 1000 + max_header * 10 + tail_bits)
    packets, expected = make_packets(width, max_header, lengths, tail_bits, rng)
    col = run(width, max_header, lengths, tail_bits, packets, idle=0.3, backpressure=0.3,
              seed=max_header)
    check(col, expected)


@pytest.mark.parametrize("width", [64, 256])
def test_every_header_length(width):
    """Each header length 0..max with an empty, a one-byte and a beat-crossing payload."""
    rng = random.Random(width)
    B = width // 8
    max_header = 2 * B + 3
    packets, expected = [], []
    for h in range(max_header + 1):
        for n in (0, 1, B - 1):
            tail = rng.randrange(4)
            hdr = rng.randbytes(max_header)
            payload = rng.randbytes(n)
            meta = {"hdr": int.from_bytes(hdr, "little"), "hdr_len": h, "tag": h,
                    "tail_len": tail}
            packets.append(Packet(payload, meta))
            expected.append((model(hdr, h, payload, tail), {"tag": h}, False))
    col = run(width, max_header, None, 2, packets, idle=0.2, backpressure=0.2, seed=7)
    check(col, expected)


@pytest.mark.parametrize("width", [64, 128, 512])
def test_back_to_back_full_rate(width):
    """No idle input and no backpressure: every cycle from the first output beat to the last
    carries a beat, and the beat count is the minimum, ceil(bytes / (W/8))."""
    rng = random.Random(width + 1)
    B = width // 8
    lengths = (12, 16, 28, 32, 0, 2 * B)
    packets, expected = make_packets(width, max(lengths), lengths, 2, rng, count=60)
    col = run(width, max(lengths), lengths, 2, packets, idle=0.0, backpressure=0.0, seed=3)
    check(col, expected)
    beats = sum(max(1, -(-len(want) // B)) for want, _, _ in expected)
    assert len(col.beat_cycles) == beats
    assert col.beat_cycles == list(range(col.beat_cycles[0], col.beat_cycles[0] + beats))


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        meta = make_meta(16, 2)
        with pytest.raises(TypeError, match="max_header"):
            VarPacketizer(64, 16.0, meta)
        with pytest.raises(ValueError, match="1..256"):
            VarPacketizer(64, 0, meta)
        with pytest.raises(ValueError, match="1..256"):
            VarPacketizer(64, 257, make_meta(257, 2))
        with pytest.raises(ValueError, match="width"):
            VarPacketizer(96, 16, meta)
        with pytest.raises(ValueError, match="'hdr' must be unsigned"):
            VarPacketizer(64, 17, meta)
        with pytest.raises(ValueError, match="'hdr_len'"):
            VarPacketizer(64, 16, data.StructLayout({"hdr": 128, "hdr_len": 4}))
        with pytest.raises(ValueError, match="field 'hdr_len'"):
            VarPacketizer(64, 16, data.StructLayout({"hdr": 128}))
        with pytest.raises(ValueError, match="'tail_len'"):
            VarPacketizer(64, 16, data.StructLayout({"hdr": 128, "hdr_len": 5, "tail_len": 5}))
        with pytest.raises(ValueError, match="outside 0..16"):
            VarPacketizer(64, 16, meta, lengths=(12, 17))
        with pytest.raises(ValueError, match="at least one"):
            VarPacketizer(64, 16, meta, lengths=())
        with pytest.raises(TypeError, match="meta must be a StructLayout"):
            VarPacketizer(64, 16, {"hdr": 128})
        vp = VarPacketizer(512, 32, make_meta(32, 2), lengths=(12, 16, 28, 32))
        assert vp.shifts() == (12, 16, 28, 32)
        assert VarPacketizer(64, 32, make_meta(32, 2), lengths=(12, 16, 28, 32)).shifts() == (0, 4)
        assert list(vp.meta_out.members) == ["tag"]
        del vp
        gc.collect()
