"""The arithmetic of an RDMA atomic (COMPARE_SWAP, FETCH_ADD) on one memory word."""

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.wire.atomics import ATOMIC_BYTES, BYTE_ORDERS

__all__ = ["AtomicAlu", "atomic_alu_in_layout", "atomic_alu_out_layout", "lanes_reversed"]

_BITS = 8 * ATOMIC_BYTES


def lanes_reversed(word):
    """``word`` (a Value) with the bytes of each of its 8-byte lanes in reverse order: a 64-bit
    value of each lane between little-endian and the wire's big-endian (pure wiring)."""
    n = ATOMIC_BYTES
    return Cat(*(word[8 * (n * k + j):8 * (n * k + j) + 8]
                 for k in range(len(word) // (8 * n)) for j in reversed(range(n))))


def _lanes(width):
    return width // _BITS


def atomic_alu_in_layout(width):
    """One atomic on the memory word that holds its target: ``word`` (``width`` bits, byte 0 in
    the low lane), ``lane`` (which 8 bytes of it, 0 for the lowest), ``fetch_add`` (1: FETCH_ADD,
    0: COMPARE_SWAP) and the operands as numbers (``swap_add``, ``compare``)."""
    check_width(width)
    return data.StructLayout({"word": width, "lane": range(max(2, _lanes(width))),
                              "fetch_add": 1, "swap_add": _BITS, "compare": _BITS})


def atomic_alu_out_layout(width):
    """The write back and the answer: ``data`` (the new value in every lane, in the memory's
    byte order), ``be`` (the byte enables of the target's 8 bytes when the value changes, else
    none), ``write`` (any enable set) and ``orig`` (the value before, as a number)."""
    check_width(width)
    return data.StructLayout({"data": width, "be": width // 8, "write": 1, "orig": _BITS})


class AtomicAlu(wiring.Component):
    """The read-modify-write of an atomic, between reading the word that holds its 8 bytes and
    writing it back.

    Parameters
    ----------
    width : int
        Memory word width W (64..512); a word holds W / 64 eight-byte targets.
    byteorder : str
        Byte order of the 64-bit value in memory: ``"little"`` (default; what a host CPU reads as
        a 64-bit counter) or ``"big"`` (the wire's order).

    Ports
    -----
    i : In(stream.Signature(atomic_alu_in_layout(width)))
        The atomic with the word read from memory.
    o : Out(stream.Signature(atomic_alu_out_layout(width)))
        Its write back and the original value.

    Behaviour
    ---------
    * COMPARE_SWAP: when the value equals ``compare``, ``swap_add`` replaces it; otherwise
      nothing is written (``be`` 0, ``write`` 0). FETCH_ADD: the value plus ``swap_add``, modulo
      2**64, replaces it. ``orig`` is the value before, whatever the operation.
    * The value is the 8 bytes of lane ``lane`` (bytes ``8 * lane`` to ``8 * lane + 7`` of the
      word), read in ``byteorder``; the new value is written in the same order. Other lanes are
      never enabled. ``lane`` beyond the word's lanes is taken modulo their number.
    * Latency one cycle: ``o`` is a register stage (no combinational path from ``i`` to ``o``);
      ``i.ready`` is ``o.ready | ~o.valid``. One atomic per cycle while ``o.ready`` stays high.
      Atomics leave in the order they came, none lost or duplicated.
    """

    def __init__(self, width, *, byteorder="little"):
        check_width(width)
        if byteorder not in BYTE_ORDERS:
            raise ValueError(f"byteorder must be one of {', '.join(BYTE_ORDERS)}, not {byteorder!r}")
        self.width, self.byteorder = width, byteorder
        super().__init__({"i": In(stream.Signature(atomic_alu_in_layout(width))),
                          "o": Out(stream.Signature(atomic_alu_out_layout(width)))})

    def _order(self, bits):
        """``bits`` (64) between the memory's byte order and a number (the same both ways)."""
        if self.byteorder == "little":
            return bits
        return Cat(*(bits[8 * k:8 * k + 8] for k in reversed(range(ATOMIC_BYTES))))

    def elaborate(self, platform):
        m = Module()
        i, o, lanes = self.i.payload, self.o.payload, _lanes(self.width)
        lane = i.lane % lanes if lanes > 1 else 0
        raw = i.word.word_select(lane, _BITS) if lanes > 1 else i.word
        old = self._order(raw)
        equal = old == i.compare
        new = Mux(i.fetch_add, (old + i.swap_add)[:_BITS], i.swap_add)
        write = i.fetch_add | equal
        lane_be = Cat(*((lane == k).replicate(ATOMIC_BYTES) for k in range(lanes))) \
            if lanes > 1 else (2 ** ATOMIC_BYTES - 1)
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        with m.If(self.i.ready):
            m.d.sync += [
                self.o.valid.eq(self.i.valid),
                o.orig.eq(old),
                o.data.eq(self._order(new).replicate(lanes)),
                o.be.eq(Mux(write, lane_be, 0)),
                o.write.eq(write),
            ]
        return m
