"""PFC (802.1Qbb) and PAUSE (802.3x) frames (:mod:`rocegen.wire.pfc`): built and parsed against
scapy's MAC control layers and against bytes laid out by hand from the standard, pause times
converted at line rates, and clear errors for bad frames and parameters."""

import random
import struct

import pytest
from scapy.compat import raw
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.l2 import Ether

from rocegen.wire import pfc

SRC = 0x02_11_22_33_44_55
SRC_TEXT = "02:11:22:33:44:55"


def scapy_pfc(times, src=SRC_TEXT, dst="01:80:c2:00:00:01", enable=None):
    """A PFC frame built by scapy: ``times`` {priority: quanta}; ``enable`` overrides the
    enable bits (so disabled classes may carry a time)."""
    fields = {f"c{n}_pause_time": q for n, q in times.items()}
    bits = set(times) if enable is None else enable
    fields.update({f"c{n}_enabled": 1 for n in bits})
    return raw(Ether(dst=dst, src=src) / MACControlClassBasedFlowControl(**fields))


def test_pfc_frame_matches_scapy():
    rng = random.Random(1)
    for _ in range(300):
        prios = rng.sample(range(8), rng.randrange(0, 9))
        times = {p: rng.choice([0, 1, 0xFFFF, rng.randrange(0x10000)]) for p in prios}
        frame = pfc.pfc_frame(SRC, times)
        assert len(frame) == 60
        assert frame == scapy_pfc(times)
        f = pfc.parse(frame)
        assert isinstance(f, pfc.PfcFrame)
        assert (f.dst, f.src) == (0x0180C2000001, SRC)
        assert f.enable == sum(1 << p for p in prios)
        assert f.classes == times
        assert f.times == tuple(times.get(n, 0) for n in range(8))


def test_parse_scapy_frames_with_times_on_disabled_classes():
    """A time field of a priority whose enable bit is clear is reported but not a class."""
    frame = scapy_pfc({0: 7, 3: 0xFFFF, 6: 0}, enable={3, 6})
    f = pfc.parse(frame)
    assert f.enable == 0b0100_1000
    assert f.times == (7, 0, 0, 0xFFFF, 0, 0, 0, 0)
    assert f.classes == {3: 0xFFFF, 6: 0}


def test_bytes_from_the_standard_layout():
    """dst, src, EtherType 0x8808, opcode 0x0101, enable vector (reserved octet, then bit n for
    priority n), eight big-endian times priority 0 first, zeros to 60 bytes."""
    times = {1: 0x1234, 3: 0xFFFF, 7: 0}
    body = struct.pack(">6s6sHHBB8H", bytes.fromhex("0180c2000001"), SRC.to_bytes(6, "big"),
                       0x8808, 0x0101, 0, 0b1000_1010, 0, 0x1234, 0, 0xFFFF, 0, 0, 0, 0)
    assert pfc.pfc_frame(SRC_TEXT, times) == body + bytes(60 - len(body))
    # the XOFF of priority 3 as a capture shows it
    assert pfc.pfc_frame(bytes.fromhex("020000000001"), {3: 0xFFFF}).hex() == (
        "0180c2000001" "020000000001" "8808" "0101" "0008" "0000" "0000" "0000" "ffff"
        "0000" "0000" "0000" "0000") + "00" * 26
    assert pfc.pfc_frame(SRC, {3: 5}, dst=SRC)[:6] == SRC.to_bytes(6, "big")


def test_pause_frame_build_and_parse():
    for quanta in (0, 1, 0x1234, 0xFFFF):
        frame = pfc.pause_frame(SRC, quanta)
        expected = raw(Ether(dst="01:80:c2:00:00:01", src=SRC_TEXT)
                       / MACControlPause(pause_time=quanta))
        assert frame == expected
        assert frame[12:18] == bytes.fromhex("88080001") + quanta.to_bytes(2, "big")
        assert pfc.parse(frame) == pfc.PauseFrame(0x0180C2000001, SRC, quanta)
        assert pfc.parse(expected) == pfc.PauseFrame(0x0180C2000001, SRC, quanta)


def test_parse_ignores_reserved_octet_and_padding_and_needs_no_padding():
    frame = bytearray(pfc.pfc_frame(SRC, {2: 9}))
    frame[16] = 0xA5                                      # reserved octet of the enable vector
    frame[40:] = b"\x5a" * 20                             # padding
    assert pfc.parse(bytes(frame)).classes == {2: 9}
    assert pfc.parse(bytes(frame[:34])).classes == {2: 9}
    assert pfc.parse(pfc.pause_frame(SRC, 3)[:18]).time == 3


def test_is_mac_control():
    assert pfc.is_mac_control(pfc.pfc_frame(SRC, {}))
    assert not pfc.is_mac_control(bytes(12) + b"\x08\x00" + bytes(46))
    assert not pfc.is_mac_control(b"\x01\x02")


def test_parse_errors():
    good = pfc.pfc_frame(SRC, {3: 1})
    with pytest.raises(pfc.MacControlError, match="at least 16 bytes"):
        pfc.parse(good[:15])
    with pytest.raises(pfc.MacControlError, match="EtherType 0x0800"):
        pfc.parse(good[:12] + b"\x08\x00" + good[14:])
    with pytest.raises(pfc.MacControlError, match="opcode 0x0002"):
        pfc.parse(good[:14] + b"\x00\x02" + good[16:])
    with pytest.raises(pfc.MacControlError, match="PFC frame has at least 34"):
        pfc.parse(good[:33])
    with pytest.raises(pfc.MacControlError, match="PAUSE frame has at least 18"):
        pfc.parse(pfc.pause_frame(SRC, 1)[:17])
    assert issubclass(pfc.MacControlError, ValueError)


def test_build_errors():
    with pytest.raises(ValueError, match="priority must be 0..7"):
        pfc.pfc_frame(SRC, {8: 1})
    with pytest.raises(ValueError, match="priority must be 0..7"):
        pfc.pfc_frame(SRC, {True: 1})
    with pytest.raises(ValueError, match=r"times\[3\] must be 0..65535"):
        pfc.pfc_frame(SRC, {3: 0x10000})
    with pytest.raises(ValueError, match=r"times\[3\] must be 0..65535"):
        pfc.pfc_frame(SRC, {3: -1})
    with pytest.raises(TypeError, match=r"times\[3\] must be an integer"):
        pfc.pfc_frame(SRC, {3: 1.5})
    with pytest.raises(TypeError, match="times must be a mapping"):
        pfc.pfc_frame(SRC, [0xFFFF])
    with pytest.raises(ValueError, match="src must be a 48-bit"):
        pfc.pfc_frame(1 << 48, {})
    with pytest.raises(ValueError, match="src must be 6 bytes"):
        pfc.pfc_frame(b"\x01", {})
    with pytest.raises(ValueError, match="not a MAC address"):
        pfc.pause_frame("02:00", 1)
    with pytest.raises(TypeError, match="dst must be a MAC address"):
        pfc.pause_frame(SRC, 1, dst=None)
    with pytest.raises(ValueError, match="quanta must be 0..65535"):
        pfc.pause_frame(SRC, 70000)


def test_quanta_at_line_rates():
    """A quantum is 512 bit times: 5.12 ns at 100 Gb/s, 20.48 ns at 25, 51.2 ns at 10."""
    assert pfc.quanta_ns(1, 100) == pytest.approx(5.12)
    assert pfc.quanta_ns(1, 25) == pytest.approx(20.48)
    assert pfc.quanta_ns(10, 10) == pytest.approx(512)
    assert pfc.quanta_ns(0xFFFF, 100) == pytest.approx(65535 * 5.12)
    assert pfc.quanta_ns(0, 400) == 0
    for rate in (10, 25, 40, 50, 100, 200, 400):
        for q in (0, 1, 2, 3, 100, 4096, 0xFFFF):
            assert pfc.ns_quanta(pfc.quanta_ns(q, rate), rate) == q
    assert pfc.ns_quanta(5.13, 100) == 2                 # rounded up: at least the time asked
    assert pfc.ns_quanta(5.11, 100) == 1
    assert pfc.ns_quanta(0, 100) == 0
    with pytest.raises(ValueError, match="more than a pause frame carries"):
        pfc.ns_quanta(65536 * 5.12, 100)
    with pytest.raises(ValueError, match="rate_gbps must be a positive"):
        pfc.quanta_ns(1, 0)
    with pytest.raises(TypeError, match="rate_gbps must be a number"):
        pfc.quanta_ns(1, "100")
    with pytest.raises(ValueError, match="ns must be a non-negative"):
        pfc.ns_quanta(-1, 100)
