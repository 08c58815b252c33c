"""The ICRC reference model against the shared vectors and scapy, and the CRC-32 equations
(:class:`rocegen.gateware.lib.crc.Crc32`) the gateware is built from."""

import random
import zlib

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator
from scapy.compat import raw
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from rocegen.gateware.lib.crc import Crc32
from rocegen.sim.models import icrc as model
from rocegen.sim.testing.vectors import read_vectors


def test_every_shared_vector():
    vectors = read_vectors()
    assert len(vectors) >= 18
    for name, frame in vectors:
        off = model.ip_offset(frame)
        assert model.check(frame), name
        assert model.append(frame[:-4]) == frame, name
        assert model.icrc(frame[off:-4]) == frame[-4:], name
        assert model.datagram(frame) == frame[off:], name
        # a flipped bit is caught unless it is one of the masked bits
        rng = random.Random(name)
        for _ in range(30):
            pos = rng.randrange(off, len(frame))
            bad = bytearray(frame)
            bad[pos] ^= 1 << rng.randrange(8)
            masked_bit = pos < len(frame) - 4 and bad[off] >> 4 == frame[off] >> 4 and \
                model.mask(bytes(bad[off:-4])) == model.mask(frame[off:-4])
            assert model.check(bytes(bad)) == masked_bit, (name, pos)


def scapy_roce(rng, version, vlan):
    payload = rng.randbytes(rng.randrange(0, 300))
    bth = BTH(opcode=rng.choice([0x00, 0x04, 0x06, 0x0A, 0x11]), solicited=rng.getrandbits(1),
              migreq=rng.getrandbits(1), padcount=(-len(payload)) & 3, pkey=0xFFFF,
              fecn=rng.getrandbits(1), becn=rng.getrandbits(1), resv6=rng.getrandbits(6),
              dqpn=rng.getrandbits(24), ackreq=rng.getrandbits(1), psn=rng.getrandbits(24))
    if bth.opcode == 0x11:
        bth = bth / AETH(syndrome=rng.getrandbits(8), msn=rng.getrandbits(24))
    if version == 4:
        ip = IP(src="10.0.0.1", dst="10.0.0.2", tos=rng.getrandbits(8), ttl=rng.randrange(1, 256),
                id=rng.getrandbits(16), flags="DF")
    else:
        ip = IPv6(src="fd00::1", dst="fd00::2", tc=rng.getrandbits(8), fl=rng.getrandbits(20),
                  hlim=rng.randrange(1, 256))
    udp = UDP(sport=rng.randrange(0xC000, 0x10000), dport=4791,
              chksum=rng.choice([0, rng.getrandbits(16)]))
    eth = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
    link = eth / Dot1Q(vlan=rng.getrandbits(12)) if vlan else eth
    return raw(link / ip / udp / bth / Raw(payload + bytes((-len(payload)) & 3)))


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("vlan", [False, True])
def test_random_packets_match_scapy(version, vlan):
    """scapy computes the ICRC of every packet it builds; the model must agree, and short frames
    padded by a MAC still check (the IP length, not the frame length, counts)."""
    rng = random.Random(version * 2 + vlan)
    for _ in range(150):
        frame = scapy_roce(rng, version, vlan)
        off = model.ip_offset(frame)
        assert off == (18 if vlan else 14)
        assert model.icrc(frame[off:-4]) == frame[-4:]
        assert model.check(frame)
        assert model.append(frame[:-4]) == frame
        assert model.check(frame + bytes(max(0, 60 - len(frame))) + b"\0\0")


def test_check_rejects_and_append_refuses():
    frame = read_vectors()[0][1]
    assert not model.check(frame[:-1])                      # IP length runs past the frame
    assert not model.check(frame[:-4] + bytes(4))
    assert not model.check(b"")
    assert not model.check(frame[:20])
    with pytest.raises(ValueError, match="does not match"):
        model.append(frame)                                  # already has its ICRC
    with pytest.raises(ValueError, match="EtherType"):
        model.ip_offset(bytes(12) + b"\x08\x06" + bytes(28))


def test_masked_bytes():
    """The model's masks, from the spec's byte offsets: IPv4 TOS, TTL, checksum, UDP checksum,
    BTH byte 4; IPv6 class and flow label (not the version), hop limit."""
    v4 = model.mask(bytes([0x45]) + bytes(39))
    assert [k for k, b in enumerate(v4) if b] == [0, 1, 8, 10, 11, 26, 27, 32]
    assert v4[0] == 0x45
    v6 = model.mask(bytes([0x60]) + bytes(59))
    assert [k for k, b in enumerate(v6) if b] == [0, 1, 2, 3, 7, 46, 47, 52]
    assert v6[0] == 0x6F


# ---- the CRC-32 equations ----

def test_crc32_steps_over_wide_words():
    rng = random.Random(1)
    for nbytes in (0, 1, 5, 8, 16, 33, 64):
        prefix, word = rng.randbytes(rng.randrange(0, 20)), rng.randbytes(nbytes)
        state = zlib.crc32(prefix) ^ Crc32.MASK
        got = Crc32.step_int(state, int.from_bytes(word, "little"), nbytes)
        assert got ^ Crc32.MASK == zlib.crc32(prefix + word)
        # the equations give the same
        s_eq, d = 0, int.from_bytes(word, "little")
        for bit, (s_taps, d_taps) in enumerate(Crc32.equations(nbytes)):
            v = sum((state >> j) & 1 for j in s_taps) + sum((d >> j) & 1 for j in d_taps)
            s_eq |= (v & 1) << bit
        assert s_eq == got


def test_crc32_zeros_forward_and_back():
    rng = random.Random(2)
    for _ in range(50):
        state, k = rng.getrandbits(32), rng.randrange(0, 70)
        ahead = Crc32.zeros_int(state, k)
        assert ahead == Crc32.step_int(state, 0, k)
        assert Crc32.zeros_int(ahead, -k) == state
    assert Crc32.POLY == 0xEDB88320
    # the rewind equations are the inverse matrices
    for k in (1, 7, 63):
        for j in range(32):
            fwd = Crc32.zeros_int(1 << j, k)
            back = 0
            for bit, taps in enumerate(Crc32.zeros_equations(-k)):
                back |= (sum((fwd >> t) & 1 for t in taps) & 1) << bit
            assert back == 1 << j
    with pytest.raises(ValueError):
        Crc32.step_int(0, 0, -1)
    with pytest.raises(TypeError):
        Crc32.equations(1.0)


def test_crc32_gateware_zeros_and_wide_step():
    state, data_in = Signal(32), Signal(16 * 8)
    fwd, back, step = Signal(32), Signal(32), Signal(32)
    m = Module()
    m.d.comb += [fwd.eq(Crc32.zeros(state, 9)), back.eq(Crc32.zeros(state, -9)),
                 step.eq(Crc32.step(state, data_in, 16))]
    rng = random.Random(3)

    async def tb(ctx):
        for _ in range(30):
            s, d = rng.getrandbits(32), rng.getrandbits(128)
            ctx.set(state, s)
            ctx.set(data_in, d)
            assert ctx.get(fwd) == Crc32.zeros_int(s, 9)
            assert ctx.get(back) == Crc32.zeros_int(s, -9)
            assert ctx.get(step) == Crc32.step_int(s, d, 16)

    sim = Simulator(m)
    sim.add_testbench(tb)
    sim.run()
