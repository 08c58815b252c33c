"""On-chip payload buffer: the local memory work requests read their payload from."""

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from rocegen.gateware.lib.memport import MemReadSignature, MemWriteSignature
from rocegen.gateware.lib.stream import check_width

__all__ = ["PayloadRam"]


class PayloadRam(wiring.Component):
    """A block-RAM buffer of ``size_bytes`` bytes, ``width`` bits per word.

    Parameters
    ----------
    width : int
        Word width W in bits (64..512, power of two), the width of the packet streams.
    size_bytes : int
        Capacity in bytes, a power of two of at least 16 words (16 * W/8 bytes). The memory holds
        ``size_bytes // (W/8)`` words; word ``a`` holds bytes ``a*W/8 .. a*W/8 + W/8 - 1``, byte 0
        of a word in its low lane (bits 0..7), as on the packet streams.

    Attributes
    ----------
    addr_width : int
        Word-address bits, log2(words).

    Ports
    -----
    rd : In(MemReadSignature(width, addr_width))
        Registered read: ``data`` holds the word at ``addr`` in the cycle after ``en``. In cycles
        without ``en`` the read register keeps its value, but readers must not rely on that.
    wr : In(MemWriteSignature(width, addr_width))
        Word writes: always ready, one per cycle, bytes written where ``be`` is set
        (bit ``i`` for lane ``i``).

    Behaviour
    ---------
    * Read latency one cycle; one read and one write per cycle, independent (a simple dual-port
      block RAM).
    * A read in the same cycle as a write to the same word returns the word as it was before the
      write (read-first); the written bytes are seen by reads from the next cycle on.
    * Contents after reset are undefined (all zero in simulation).
    """

    def __init__(self, width, size_bytes):
        check_width(width)
        if not isinstance(size_bytes, int) or isinstance(size_bytes, bool):
            raise TypeError(f"size_bytes must be an integer number of bytes, not {size_bytes!r}")
        word = width // 8
        if size_bytes < 16 * word or size_bytes & (size_bytes - 1):
            raise ValueError(f"size_bytes must be a power of two of at least 16 words "
                             f"({16 * word} bytes at {width} bits), not {size_bytes}")
        words = size_bytes // word
        if words > 1 << 32:
            raise ValueError(f"size_bytes {size_bytes} gives {words} words; at most 2^32 words "
                             f"can be addressed")
        self.width = width
        self.size_bytes = size_bytes
        self.words = words
        self.addr_width = words.bit_length() - 1
        super().__init__({
            "rd": In(MemReadSignature(width, self.addr_width)),
            "wr": In(MemWriteSignature(width, self.addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.words, init=[])
        wp = mem.write_port(granularity=8)
        rp = mem.read_port(domain="sync")
        m.d.comb += [
            self.wr.ready.eq(1),
            wp.addr.eq(self.wr.payload.addr),
            wp.data.eq(self.wr.payload.data),
            wp.en.eq(Mux(self.wr.valid, self.wr.payload.be, 0)),
            rp.addr.eq(self.rd.addr),
            rp.en.eq(self.rd.en),
            self.rd.data.eq(rp.data),
        ]
        return m
