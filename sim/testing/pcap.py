"""A pcap writer for frames crossing a simulated Ethernet port, with simulation timestamps.

Files use the classic libpcap format with nanosecond timestamps (magic ``0xa1b23c4d``) and link
type 1 (Ethernet), so Wireshark and tshark open them directly. Frames are written without FCS.
"""

import struct
from pathlib import Path

__all__ = ["PcapWriter", "read_pcap"]

MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1


class PcapWriter:
    """``with PcapWriter(path) as pcap: pcap.write(frame, time_ns)``."""

    def __init__(self, path, snaplen=65535):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "wb")
        self._f.write(struct.pack("<IHHiIII", MAGIC_NS, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self.snaplen = snaplen
        self.count = 0

    def write(self, frame, time_ns):
        frame = bytes(frame)
        time_ns = int(time_ns)
        if time_ns < 0:
            raise ValueError("timestamp must not be negative")
        cap = frame[:self.snaplen]
        sec, nsec = divmod(time_ns, 1_000_000_000)
        self._f.write(struct.pack("<IIII", sec, nsec, len(cap), len(frame)) + cap)
        self.count += 1

    def close(self):
        if not self._f.closed:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_pcap(path):
    """``[(time_ns, frame_bytes), ...]`` from a file written by :class:`PcapWriter`."""
    raw = Path(path).read_bytes()
    magic, = struct.unpack_from("<I", raw, 0)
    if magic != MAGIC_NS:
        raise ValueError(f"{path}: not a nanosecond pcap file (magic {magic:#x})")
    out, off = [], 24
    while off < len(raw):
        sec, nsec, caplen, _ = struct.unpack_from("<IIII", raw, off)
        off += 16
        out.append((sec * 1_000_000_000 + nsec, raw[off:off + caplen]))
        off += caplen
    return out
