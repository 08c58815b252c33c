"""Packets as Python values, and their beats on a packet stream of a given width.

Shared by the Amaranth-simulator unit tests, the cocotb benches and the reference models.
"""

from dataclasses import dataclass, field

__all__ = ["Packet", "to_beats", "from_beats", "BeatError"]


class BeatError(ValueError):
    """A sequence of beats that breaks the packet stream rules."""


@dataclass
class Packet:
    data: bytes
    meta: dict = field(default_factory=dict)
    error: bool = False

    def __post_init__(self):
        self.data = bytes(self.data)


def to_beats(data, width):
    """``bytes`` -> list of ``(data, keep, last)`` integers for a ``width``-bit stream."""
    B = width // 8
    data = bytes(data)
    if not data:
        return [(0, 0, 1)]
    beats = []
    for off in range(0, len(data), B):
        chunk = data[off:off + B]
        beats.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1,
                      int(off + B >= len(data))))
    return beats


def from_beats(beats, width):
    """List of ``(data, keep, last)`` -> ``bytes``, checking the stream rules."""
    B = width // 8
    out = bytearray()
    for n, (d, keep, last) in enumerate(beats):
        count = bin(keep).count("1")
        if keep != (1 << count) - 1:
            raise BeatError(f"beat {n}: keep {keep:#x} is not a thermometer code")
        if not last and count != B:
            raise BeatError(f"beat {n}: only the last beat may be partial (keep {keep:#x})")
        if last and n != len(beats) - 1:
            raise BeatError(f"beat {n}: last before the end")
        if count == 0 and (n != 0 or not last):
            raise BeatError(f"beat {n}: an empty beat is only allowed as a whole empty packet")
        out += (d & ((1 << (8 * count)) - 1)).to_bytes(B, "little")[:count]
    if beats and not beats[-1][2]:
        raise BeatError("packet does not end with last")
    return bytes(out)
