"""MAC control frames that pause a link: IEEE 802.1Qbb priority-based flow control (PFC) and the
IEEE 802.3x PAUSE of a whole link (802.3 Annex 31B and 31D).

Both are Ethernet frames (here, as everywhere in rocegen, without the FCS) of this form::

    dst 01:80:C2:00:00:01 | src | EtherType 0x8808 | opcode (2) | parameters | zeros to 60 bytes

* PFC, opcode 0x0101: the priority-enable vector (2 bytes: the first reserved and sent as zero,
  bit ``n`` of the second for priority ``n``), then eight 16-bit pause times, priority 0 first.
* PAUSE, opcode 0x0001: one 16-bit pause time for all traffic of the link.

A pause time counts quanta of 512 bit times at the rate of the link the frame arrives on
(5.12 ns at 100 Gb/s). Time 0 ends a pause at once (what switches call XON); a PFC priority whose
enable bit is clear is left as it is, whatever its time field holds. MAC control frames are not
VLAN-tagged and never forwarded by a bridge. Multi-byte fields are big-endian.

:func:`pfc_frame` and :func:`pause_frame` build frames, :func:`parse` reads either kind back
(:class:`PfcFrame`, :class:`PauseFrame`), :func:`quanta_ns` and :func:`ns_quanta` convert
pause times at a line rate. Nothing here needs more than Python.
"""

import math
from typing import NamedTuple

from rocegen.wire import headers as H
from rocegen.wire.addr import parse_mac
from rocegen.wire.roce import ETH_MIN_FRAME

__all__ = [
    "ETHERTYPE_MAC_CONTROL", "OPCODE_PAUSE", "OPCODE_PFC", "PAUSE_DST", "QUANTUM_BITS",
    "MAX_QUANTA", "NUM_PRIORITIES", "MAC_CONTROL", "PFC", "PAUSE",
    "MacControlError", "PfcFrame", "PauseFrame", "mac_address",
    "pfc_frame", "pause_frame", "is_mac_control", "parse", "quanta_ns", "ns_quanta",
    "LINE_OVERHEAD", "RESPONSE_QUANTA", "line_bytes", "headroom_bytes", "quantum_cycles",
]

#: EtherType of MAC control frames.
ETHERTYPE_MAC_CONTROL = 0x8808
#: 802.3x PAUSE of the whole link.
OPCODE_PAUSE = 0x0001
#: 802.1Qbb priority-based flow control (class-based flow control in 802.3 Annex 31D).
OPCODE_PFC = 0x0101
#: The reserved multicast address MAC control frames are sent to (a bridge never forwards it).
PAUSE_DST = 0x0180C2000001
#: A pause quantum is the time of this many bits at the link's rate.
QUANTUM_BITS = 512
#: Largest pause time a frame can carry.
MAX_QUANTA = 0xFFFF
#: Priorities (traffic classes) of 802.1Q, and of the PFC enable vector.
NUM_PRIORITIES = 8

#: The opcode every MAC control frame starts with (after the Ethernet header).
MAC_CONTROL = H.Header("mac_control", [("opcode", 16)])
#: The PFC parameters: ``enable`` bit ``n`` for priority ``n``, ``time{n}`` its pause time.
PFC = H.Header("pfc", [("opcode", 16), ("reserved", 8), ("enable", 8)]
               + [(f"time{n}", 16) for n in range(NUM_PRIORITIES)])
#: The PAUSE parameters.
PAUSE = H.Header("pause", [("opcode", 16), ("time", 16)])


class MacControlError(ValueError):
    """A frame that is not a well-formed PFC or PAUSE frame."""


class PfcFrame(NamedTuple):
    """A PFC frame as read by :func:`parse`. ``dst`` and ``src`` are 48-bit integers (first
    byte on the wire most significant), ``enable`` the 8-bit priority-enable vector and
    ``times`` the eight pause times, priority 0 first (also those of priorities not enabled)."""
    dst: int
    src: int
    enable: int
    times: tuple

    @property
    def classes(self):
        """``{priority: quanta}`` of the enabled priorities (quanta 0: XON)."""
        return {n: self.times[n] for n in range(NUM_PRIORITIES) if self.enable >> n & 1}


class PauseFrame(NamedTuple):
    """An 802.3x PAUSE frame as read by :func:`parse`: addresses as in :class:`PfcFrame`,
    ``time`` the pause time of the whole link (0: resume)."""
    dst: int
    src: int
    time: int


def mac_address(value, name="mac"):
    """A MAC address given as a 48-bit integer, 6 bytes or ``aa:bb:cc:dd:ee:ff`` text -> the
    48-bit integer (first byte on the wire most significant); ``name`` is for the error."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a MAC address, not {value!r}")
    if isinstance(value, int):
        if not 0 <= value < 1 << 48:
            raise ValueError(f"{name} must be a 48-bit MAC address, not {value:#x}")
        return value
    if isinstance(value, (bytes, bytearray)):
        if len(value) != 6:
            raise ValueError(f"{name} must be 6 bytes, not {len(value)}")
        return int.from_bytes(value, "big")
    if isinstance(value, str):
        return parse_mac(value)
    raise TypeError(f"{name} must be a MAC address (an integer, 6 bytes or aa:bb:cc:dd:ee:ff), "
                    f"not {value!r}")


def _quanta(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer number of pause quanta, not {value!r}")
    if not 0 <= value <= MAX_QUANTA:
        raise ValueError(f"{name} must be 0..{MAX_QUANTA} quanta, not {value}")
    return value


def _frame(dst, src, body):
    raw = H.ETH.pack(dst=mac_address(dst, "dst"), src=mac_address(src, "src"),
                     ethertype=ETHERTYPE_MAC_CONTROL) + body
    return raw + bytes(ETH_MIN_FRAME - len(raw))


def pfc_frame(src, times, *, dst=PAUSE_DST):
    """The 60-byte PFC frame from ``src`` pausing each priority ``n`` of ``times`` (a mapping
    ``{priority: quanta}``) for its quanta; 0 quanta resumes the priority (XON). Priorities not
    in ``times`` are not enabled (their time field is zero)."""
    if not hasattr(times, "items"):
        raise TypeError(f"times must be a mapping {{priority: quanta}}, not {times!r}")
    enable = 0
    fields = {}
    for prio, quanta in times.items():
        if isinstance(prio, bool) or not isinstance(prio, int) or not 0 <= prio < NUM_PRIORITIES:
            raise ValueError(f"times: priority must be 0..{NUM_PRIORITIES - 1}, not {prio!r}")
        fields[f"time{prio}"] = _quanta(f"times[{prio}]", quanta)
        enable |= 1 << prio
    return _frame(dst, src, PFC.pack(opcode=OPCODE_PFC, enable=enable, **fields))


def pause_frame(src, quanta, *, dst=PAUSE_DST):
    """The 60-byte 802.3x PAUSE frame from ``src`` pausing the link for ``quanta`` (0 resumes)."""
    return _frame(dst, src, PAUSE.pack(opcode=OPCODE_PAUSE, time=_quanta("quanta", quanta)))


def is_mac_control(frame):
    """Whether ``frame`` (bytes) has the MAC control EtherType (untagged, as they always are)."""
    return len(frame) >= H.ETH.length and \
        H.ETH.unpack(frame)["ethertype"] == ETHERTYPE_MAC_CONTROL


def parse(frame):
    """Read a PFC or PAUSE frame: :class:`PfcFrame` or :class:`PauseFrame`.

    Raises :class:`MacControlError` for a frame too short for its fields, another EtherType or
    another MAC control opcode. The reserved byte of the enable vector is ignored (the standard
    says receivers ignore it); padding after the fields may be anything."""
    frame = bytes(frame)
    if len(frame) < H.ETH.length + MAC_CONTROL.length:
        raise MacControlError(f"a MAC control frame has at least "
                              f"{H.ETH.length + MAC_CONTROL.length} bytes, not {len(frame)}")
    eth = H.ETH.unpack(frame)
    if eth["ethertype"] != ETHERTYPE_MAC_CONTROL:
        raise MacControlError(f"EtherType {eth['ethertype']:#06x} is not MAC control "
                              f"({ETHERTYPE_MAC_CONTROL:#06x})")
    body = frame[H.ETH.length:]
    opcode = MAC_CONTROL.unpack(body)["opcode"]
    if opcode == OPCODE_PFC:
        if len(body) < PFC.length:
            raise MacControlError(f"a PFC frame has at least {H.ETH.length + PFC.length} bytes, "
                                  f"not {len(frame)}")
        f = PFC.unpack(body)
        return PfcFrame(eth["dst"], eth["src"], f["enable"],
                        tuple(f[f"time{n}"] for n in range(NUM_PRIORITIES)))
    if opcode == OPCODE_PAUSE:
        if len(body) < PAUSE.length:
            raise MacControlError(f"a PAUSE frame has at least {H.ETH.length + PAUSE.length} "
                                  f"bytes, not {len(frame)}")
        return PauseFrame(eth["dst"], eth["src"], PAUSE.unpack(body)["time"])
    raise MacControlError(f"MAC control opcode {opcode:#06x} is neither PAUSE "
                          f"({OPCODE_PAUSE:#06x}) nor PFC ({OPCODE_PFC:#06x})")


def _rate(rate_gbps):
    if isinstance(rate_gbps, bool) or not isinstance(rate_gbps, (int, float)):
        raise TypeError(f"rate_gbps must be a number of Gb/s, not {rate_gbps!r}")
    if not rate_gbps > 0 or math.isinf(rate_gbps):
        raise ValueError(f"rate_gbps must be a positive line rate, not {rate_gbps}")
    return rate_gbps


def quanta_ns(quanta, rate_gbps):
    """Nanoseconds of ``quanta`` pause quanta on a line of ``rate_gbps`` (1 Gb/s is 1 bit/ns)."""
    return _quanta("quanta", quanta) * QUANTUM_BITS / _rate(rate_gbps)


def ns_quanta(ns, rate_gbps):
    """The fewest pause quanta lasting at least ``ns`` nanoseconds at ``rate_gbps``. Raises
    ValueError when that is more than :data:`MAX_QUANTA`."""
    if isinstance(ns, bool) or not isinstance(ns, (int, float)) or not ns >= 0:
        raise ValueError(f"ns must be a non-negative number of nanoseconds, not {ns!r}")
    exact = ns * _rate(rate_gbps) / QUANTUM_BITS
    quanta = round(exact)
    if abs(exact - quanta) > 1e-9 * max(1.0, exact):    # not a whole number up to rounding
        quanta = math.ceil(exact)
    if quanta > MAX_QUANTA:
        raise ValueError(f"{ns} ns at {rate_gbps} Gb/s is {quanta} quanta, more than a pause "
                         f"frame carries ({MAX_QUANTA})")
    return quanta


#: Line bytes of a frame beyond its bytes without FCS: FCS 4, preamble and SFD 8, gap 12.
LINE_OVERHEAD = 4 + 8 + 12

#: The longest a station may take, once a pause frame has arrived, to stop starting frames
#: (IEEE 802.3 Annex 31B), in pause quanta, by line rate in Gb/s.
RESPONSE_QUANTA = {10: 60, 25: 80, 40: 118, 100: 394, 400: 905}


def line_bytes(length):
    """Bytes of line time of a frame of ``length`` bytes without FCS (padded to 60)."""
    return max(length, ETH_MIN_FRAME) + LINE_OVERHEAD


def headroom_bytes(rate_gbps, max_frame, *, cable_ns=0, response_ns=0):
    """Bytes of line time that can still arrive after a receiver decides to send XOFF, frames
    of at most ``max_frame`` bytes (without FCS) on a line of ``rate_gbps``: the XOFF waits for
    the frame on the receiver's transmit line (one ``max_frame``) and goes out (a 60-byte
    frame), crosses the cable (``cable_ns``), the sender reacts (``response_ns``: its own
    delay and the receiver's pipeline) and finishes the frame it started (one ``max_frame``),
    whose last bits cross the cable back; plus one frame partly received when the XOFF was
    decided. Rounded up to whole bytes."""
    rate = _rate(rate_gbps)
    for name, value in (("cable_ns", cable_ns), ("response_ns", response_ns)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 <= value < math.inf:
            raise ValueError(f"{name} must be a non-negative number of nanoseconds, "
                             f"not {value!r}")
    if isinstance(max_frame, bool) or not isinstance(max_frame, int) or \
            max_frame < H.ETH.length:
        raise ValueError(f"max_frame must be an integer of at least {H.ETH.length} bytes, "
                         f"not {max_frame!r}")
    return math.ceil(rate / 8 * (2 * cable_ns + response_ns)) + line_bytes(ETH_MIN_FRAME) \
        + 3 * line_bytes(max_frame)


def quantum_cycles(clk_hz, rate_gbps):
    """Clock cycles of ``clk_hz`` in one pause quantum at ``rate_gbps``, exactly, as a
    :class:`fractions.Fraction` (numbers given as floats are read as the decimals they print
    as: ``322.265625e6`` is 322265625 Hz)."""
    from fractions import Fraction

    def exact(name, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive finite number, not {value!r}")
        return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)

    return exact("clk_hz", clk_hz) * QUANTUM_BITS / (exact("rate_gbps", rate_gbps) * 10 ** 9)
