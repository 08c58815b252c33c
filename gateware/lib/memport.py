"""Word-wide memory ports between a memory and the blocks that use it.

* :class:`MemReadSignature`: ``addr``/``en`` out, ``data`` in one cycle after ``en`` (a
  registered read, as block RAM gives). The reader holds nothing: every cycle with ``en`` high is
  one read.
* :func:`MemWriteSignature`: a stream of ``addr``/``data``/``be`` (byte enables, bit ``i`` for
  byte ``i`` = lane ``i``), so a memory shared by several writers can hold one back.

Addresses are word addresses (a word is ``width`` bits = ``width // 8`` bytes, byte 0 in the
low lane, as on the packet streams).
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width

__all__ = ["MemReadSignature", "MemWriteSignature", "mem_write_layout", "check_addr_width"]


def check_addr_width(addr_width):
    """``addr_width`` if it is a word-address width the memory ports take (an integer 1..32);
    else ``TypeError`` (not an integer) or ``ValueError``, naming the parameter."""
    if not isinstance(addr_width, int) or isinstance(addr_width, bool):
        raise TypeError(f"addr_width must be an integer number of bits, not {addr_width!r}")
    if not 1 <= addr_width <= 32:
        raise ValueError(f"addr_width must be 1..32 bits, not {addr_width}")
    return addr_width


def _check(width, addr_width):
    check_width(width)
    if not isinstance(addr_width, int) or not 1 <= addr_width <= 32:
        raise ValueError(f"memory word-address width must be 1..32 bits, not {addr_width!r}")


def mem_write_layout(width, addr_width):
    _check(width, addr_width)
    return data.StructLayout({"addr": addr_width, "data": width, "be": width // 8})


class MemReadSignature(wiring.Signature):
    """A read port seen from the reader."""

    def __init__(self, width, addr_width):
        _check(width, addr_width)
        self.width, self.addr_width = width, addr_width
        super().__init__({"addr": Out(addr_width), "en": Out(1), "data": In(width)})


def MemWriteSignature(width, addr_width):
    """A write port seen from the writer (a stream of word writes)."""
    return stream.Signature(mem_write_layout(width, addr_width))
