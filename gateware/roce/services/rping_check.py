"""The rping client's ``-V``: the server's WRITE into ``rdma_buf`` compared with the ping, as the
responder writes it."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import check_addr_width, mem_write_layout
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.services.rping_layouts import RPING_TEXT
from rocegen.gateware.roce.services.rping_pattern import RpingPattern, first_letter, next_letter

__all__ = ["RpingCheck", "check_arm_layout", "LATENCY"]

#: Cycles from a write seen to the verdict that holds it.
LATENCY = 4


def check_arm_layout(addr_width):
    """A check started: the first word of ``rdma_buf``, the ping's text."""
    return data.StructLayout({"rdma": addr_width, "text": RPING_TEXT})


class RpingCheck(wiring.Component):
    """Checks the words the responder writes into a ping's ``rdma_buf`` against the ping's
    bytes (:class:`~rocegen.gateware.roce.services.rping_pattern.RpingPattern`), as rping's
    client compares ``start_buf`` and ``rdma_buf`` (``-V``).

    Parameters
    ----------
    width : int
        W bits (64..512).
    addr_width : int
        Word-address bits of local memory (1..32).
    size : int
        The ping's bytes (26..65535): ``rdma_buf`` is ``ceil(size / (W/8))`` words.

    Ports
    -----
    arm : In(stream.Signature(check_arm_layout(addr_width), always_ready=True))
        A new check: of the buffer from word ``rdma``, for the ping of ``text`` (``rdma``
        should come from a register: the block adds the buffer's words to it).
    snoop : In(stream.Signature(mem_write_layout(width, addr_width), always_ready=True))
        Every word the responder writes into local memory (its write port's handshakes).
    ok : Out(1)
        The verdict: since the last ``arm``, the words of the buffer were written in order,
        each once, all of them, and each byte below ``size`` written (byte enabled) with the
        ping's byte. Made of registers only.

    Behaviour
    ---------
    A write outside the buffer is ignored; one inside it that is not the next word, or whose
    bytes differ, makes the verdict false until the next ``arm``. The verdict holds a write
    :data:`LATENCY` cycles after it is seen (a pipeline: the write registered, the expected
    word made, the bytes compared, the mismatches gathered); an ``arm`` takes effect the cycle
    after it (a write in the same cycle belongs to the new check). Byte order: lane ``i`` is
    byte ``i`` of the word.
    """

    def __init__(self, width, addr_width, size):
        self.width = check_width(width)
        self.addr_width = check_addr_width(addr_width)
        self.pattern = RpingPattern(width, size)
        super().__init__({
            "arm": In(stream.Signature(check_arm_layout(addr_width), always_ready=True)),
            "snoop": In(stream.Signature(mem_write_layout(width, addr_width),
                                         always_ready=True)),
            "ok": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        pat = m.submodules.pattern = self.pattern
        nbytes, words = self.width // 8, pat.words
        rdma, text = Signal(self.addr_width), Signal(RPING_TEXT)
        end, expect = Signal(self.addr_width + 1), Signal(self.addr_width + 1)
        nxt, letter, bad = Signal(range(words + 1)), Signal(6), Signal()
        # 1: the write, registered
        s1 = Signal(mem_write_layout(self.width, self.addr_width))
        v1 = Signal()
        m.d.sync += [v1.eq(self.snoop.valid), s1.eq(self.snoop.payload)]
        # 2: inside the buffer? the next word? its expected bytes
        m.d.comb += [pat.text.eq(text), pat.word.eq(nxt), pat.letter.eq(letter)]
        hit = v1 & (s1.addr >= rdma) & (s1.addr < end)
        in_order = s1.addr == expect
        v2, out_of_order = Signal(), Signal()
        exp, exp_be, got, got_be = (Signal(self.width), Signal(nbytes), Signal(self.width),
                                    Signal(nbytes))
        m.d.sync += [v2.eq(hit), out_of_order.eq(hit & ~in_order), exp.eq(pat.data),
                     exp_be.eq(pat.be), got.eq(s1.data), got_be.eq(s1.be)]
        with m.If(hit & in_order):
            m.d.sync += [nxt.eq(nxt + 1), expect.eq(expect + 1),
                         letter.eq(next_letter(letter, self.width))]
        # 3: the bytes compared
        diff = Signal(nbytes)
        m.d.sync += diff.eq(0)
        with m.If(v2):
            m.d.sync += diff.eq(_diff(got, got_be, exp, exp_be, nbytes))
            with m.If(out_of_order):
                m.d.sync += diff.eq(1)
        # 4: gathered
        with m.If(diff.any()):
            m.d.sync += bad.eq(1)
        m.d.comb += self.ok.eq((nxt == words) & ~bad)
        with m.If(self.arm.valid):
            a = self.arm.payload
            m.d.sync += [rdma.eq(a.rdma), end.eq(a.rdma + words), expect.eq(a.rdma),
                         text.eq(a.text), nxt.eq(0), bad.eq(0),
                         letter.eq(first_letter(m, a.text)), v1.eq(0), v2.eq(0), diff.eq(0)]
        return m


def _diff(got, got_be, exp, exp_be, nbytes):
    """Bit ``i``: byte ``i`` is the buffer's and was not written, or differs."""
    return Cat(((got.word_select(i, 8) != exp.word_select(i, 8)) | ~got_be[i]) & exp_be[i]
               for i in range(nbytes))
