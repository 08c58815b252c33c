"""The wire of ``rocegen sim serve``: how Ethernet frames travel on its TCP connections, and the
addresses it gives the simulated FPGA and its host by default.

On a connection each frame is a 4-byte big-endian length and the frame's bytes (Ethernet, no
FCS): :func:`encode_frame` / :class:`FrameReader`.

**FPGA time on the wire.** The simulation keeps the FPGA's own time, which the wall clock does not
tell (a simulated second takes minutes). So towards the connections, each frame that left the FPGA
comes after a *time record*: the 4-byte word :data:`TIME_RECORD` (``0x80000014``: the top bit,
which no frame length has, and the record's 20 bytes), then three big-endian numbers: the
core-clock cycle of the frame's first beat on the FPGA's MAC port (8 bytes), the cycle of its last
beat (8 bytes) and the core clock in Hz (4 bytes), cycles counted from the start of the simulation
(:func:`encode_time`). :meth:`FrameReader.feed_stamped` returns each frame with its
:class:`FpgaTime`; :meth:`FrameReader.feed` skips the records. Towards the FPGA a connection sends
frames only.

The simulation (``rocegen sim serve``'s host side) and the host agent's simulated NIC both take
these from here.
"""

import struct
from typing import NamedTuple

from rocegen.wire.headers import ETH, ETHERTYPE_IPV4, IP_PROTO_UDP, IPV4, UDP

__all__ = ["FPGA_MAC", "FPGA_IP", "HOST_MAC", "HOST_IP", "WIRE_PORT", "MAX_FRAME", "TIME_RECORD",
           "FpgaTime", "FrameReader", "encode_frame", "encode_time", "udp_dst_port"]

#: The simulated FPGA's addresses by default.
FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
#: The addresses of the host behind the simulated FPGA's Ethernet port by default.
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"
#: TCP port of the wire by default.
WIRE_PORT = 17186
#: Largest frame a wire connection may carry (a 9000-byte jumbo frame with its headers).
MAX_FRAME = 9018 + 4
#: The first word of a time record on a wire connection (see the module documentation).
TIME_RECORD = 0x8000_0000 | 20
_TIME = struct.Struct(">QQI")


def encode_frame(frame):
    """A frame as it travels on a wire connection: 4-byte big-endian length, then the bytes."""
    if not 14 <= len(frame) <= MAX_FRAME:
        raise ValueError(f"a frame is 14..{MAX_FRAME} bytes, not {len(frame)}")
    return struct.pack(">I", len(frame)) + bytes(frame)


class FpgaTime(NamedTuple):
    """When a frame crossed the FPGA's MAC port, in the FPGA's time: the core-clock cycles of its
    first and last beat (counted from the start of the simulation) and the clock in Hz."""
    first_cycle: int
    last_cycle: int
    clock_hz: int


def encode_time(first_cycle, last_cycle, clock_hz):
    """The time record that goes before a frame from the FPGA on a wire connection."""
    if not 0 <= first_cycle <= last_cycle < 1 << 64 or not 0 < clock_hz < 1 << 32:
        raise ValueError(f"cycles {first_cycle}..{last_cycle} at {clock_hz} Hz do not fit a "
                         f"time record")
    return struct.pack(">I", TIME_RECORD) + _TIME.pack(first_cycle, last_cycle, clock_hz)


class FrameReader:
    """Splits the byte stream of a wire connection into frames. :meth:`feed` returns the whole
    frames received so far; a length outside 14..:data:`MAX_FRAME` raises ``ValueError`` (the
    connection is then unusable and is closed by its owner). Time records are taken when
    ``times`` (the direction from the FPGA), else they are such a bad length."""

    def __init__(self, times=True):
        self._buf = bytearray()
        self._times = times
        self._time = None

    def feed(self, data):
        return [frame for frame, _ in self.feed_stamped(data)]

    def feed_stamped(self, data):
        """Like :meth:`feed`, each frame with the :class:`FpgaTime` of the time record just
        before it (None without one)."""
        self._buf += data
        out = []
        while len(self._buf) >= 4:
            n = struct.unpack(">I", self._buf[:4])[0]
            if n == TIME_RECORD and self._times:
                if len(self._buf) < 4 + _TIME.size:
                    break
                self._time = FpgaTime(*_TIME.unpack(self._buf[4:4 + _TIME.size]))
                del self._buf[:4 + _TIME.size]
                continue
            if not 14 <= n <= MAX_FRAME:
                raise ValueError(f"frame length {n} on the wire connection (14..{MAX_FRAME})")
            if len(self._buf) < 4 + n:
                break
            out.append((bytes(self._buf[4:4 + n]), self._time))
            self._time = None
            del self._buf[:4 + n]
        return out


def udp_dst_port(frame):
    """The UDP destination port of an untagged IPv4 frame without options, else None."""
    if len(frame) < ETH.length + IPV4.length + UDP.length or \
            ETH.unpack(frame[:ETH.length])["ethertype"] != ETHERTYPE_IPV4:
        return None
    ip = IPV4.unpack(frame[ETH.length:ETH.length + IPV4.length])
    if ip["ihl"] != 5 or ip["protocol"] != IP_PROTO_UDP:
        return None
    at = ETH.length + IPV4.length
    return UDP.unpack(frame[at:at + UDP.length])["dst_port"]
