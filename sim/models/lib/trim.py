"""Reference model of :class:`~rocegen.gateware.lib.trim.Trim`."""

from dataclasses import dataclass

__all__ = ["TrimResult", "trim"]


@dataclass(frozen=True)
class TrimResult:
    data: bytes          # bytes that leave
    error: bool          # error flag on the last beat that leaves
    short: bool          # the packet had fewer than ``length`` bytes
    long: bool           # bytes beyond ``length`` were cut


def trim(data, length, error=False):
    """What leaves :class:`Trim` for a packet of ``data`` with error flag ``error`` and the
    wanted ``length``: exactly ``length`` bytes when there are enough (the input's error flag
    kept), otherwise the whole packet marked with an error."""
    data = bytes(data)
    if not 0 <= length <= 0xFFFF:
        raise ValueError(f"length {length} out of 0..65535")
    if len(data) < length:
        return TrimResult(data, True, True, False)
    return TrimResult(data[:length], bool(error), False, len(data) > length)
