"""The rping client's writes into local memory: its advertisements and each ping's buffer."""

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature, check_addr_width
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.services.rping_layouts import ADV_BYTES, RPING_TEXT
from rocegen.gateware.roce.services.rping_pattern import RpingPattern, first_letter, next_letter

__all__ = ["RpingFill", "fill_job_layout"]


def fill_job_layout(addr_width):
    """A fill: the slice's first word, the R_Key its advertisements state, whether to write
    them (else only the buffer), the ping's text."""
    return data.StructLayout({"slice": addr_width, "rkey": 32, "adverts": 1, "text": RPING_TEXT})


class RpingFill(wiring.Component):
    """Writes what the rping client SENDs and what the server READs into a QP's slice of local
    memory (the slice's layout: :class:`~rocegen.gateware.roce.services.rping_client.RpingClient`).

    Parameters
    ----------
    width : int
        W bits (64..512).
    addr_width : int
        Word-address bits of local memory (1..32).
    size : int
        The ping's bytes (26..65535).

    Ports
    -----
    job : In(stream.Signature(fill_job_layout(addr_width)))
        A fill, held (payload unchanged) until ``ready``: high in the cycle its last write is
        taken.
    w : Out(MemWriteSignature(width, addr_width))
        The word writes: with ``adverts``, the RDMA_READ_ADV advertisement at byte ``A`` of the
        slice (``start_buf``'s address, ``rkey``, ``size``) and the RDMA_WRITE_ADV one at
        ``2 * A`` (``rdma_buf``'s), 16 bytes each, big-endian (one word, or two at W = 64);
        then ``start_buf`` (at ``3 * A``): ``ceil(size / (W/8))`` words of the ping's bytes
        (:class:`~rocegen.gateware.roce.services.rping_pattern.RpingPattern`), byte ``i`` of
        a word in lane ``i``, the bytes past ``size`` not enabled. ``A`` = max(16, W/8);
        ``rdma_buf`` is at ``3 * A`` + ``size`` rounded up to ``A``. The addresses a slice's
        advertisements state are byte addresses (``slice`` times W/8 and the offsets).

    Behaviour
    ---------
    A job is started the cycle after its ``valid`` is first seen (its addresses computed
    into registers then); its writes leave from a register, one a cycle while ``w.ready`` is
    high (backpressure holds them), the first offered two cycles after ``valid`` rose. The
    buffers' byte addresses are below 2^32 (the advertisements' top four bytes are 0).
    """

    def __init__(self, width, addr_width, size):
        self.width = check_width(width)
        self.addr_width = check_addr_width(addr_width)
        self.pattern = RpingPattern(width, size)
        self.size = size
        nbytes = width // 8
        self.align = a = max(ADV_BYTES, nbytes)
        self.buf_bytes = -(-size // a) * a
        #: words of one advertisement
        self.adv_words = ADV_BYTES // nbytes if nbytes < ADV_BYTES else 1
        super().__init__({
            "job": In(stream.Signature(fill_job_layout(addr_width))),
            "w": Out(MemWriteSignature(width, addr_width)),
        })

    def elaborate(self, platform):
        m = Module()
        pat = m.submodules.pattern = self.pattern
        nbytes, j = self.width // 8, self.job.payload
        advs, a_words = 2 * self.adv_words, self.align // nbytes
        total = advs + pat.words
        shift = (nbytes - 1).bit_length()
        k = Signal(range(total + 1))         # the next write's index
        addr = Signal(self.addr_width)       # ... and its word address
        word_k = Signal(range(pat.words))    # the next buffer word
        running, letter, in_buf = Signal(), Signal(6), Signal()
        start, rdma = Signal(32), Signal(32)  # the buffers' byte addresses
        m.d.comb += [in_buf.eq(k >= advs), pat.text.eq(j.text), pat.letter.eq(letter),
                     pat.word.eq(word_k)]
        word, be = self._adverts(m, k, start, rdma)
        with m.If(in_buf):
            m.d.comb += [word.eq(pat.data), be.eq(pat.be)]
        more = running & (k < total)
        with m.If(~self.w.valid | self.w.ready):
            m.d.sync += [self.w.valid.eq(more), self.w.payload.addr.eq(addr),
                         self.w.payload.data.eq(word), self.w.payload.be.eq(be)]
            with m.If(more):
                m.d.sync += [k.eq(k + 1), addr.eq(addr + 1)]
                with m.If(in_buf):
                    m.d.sync += [word_k.eq(word_k + 1),
                                 letter.eq(next_letter(letter, self.width))]
        with m.If(self.job.valid & ~running):
            # (each address one adder from the job's slice)
            m.d.sync += [running.eq(1), word_k.eq(0), letter.eq(first_letter(m, j.text)),
                         k.eq(Mux(j.adverts, 0, advs)),
                         addr.eq(Mux(j.adverts, j.slice + a_words, j.slice + 3 * a_words)),
                         start.eq((j.slice << shift) + 3 * self.align),
                         rdma.eq((j.slice << shift) + 3 * self.align + self.buf_bytes)]
        with m.If(running & (k == total) & self.w.valid & self.w.ready):
            m.d.comb += self.job.ready.eq(1)
            m.d.sync += running.eq(0)
        return m

    def _adverts(self, m, k, start, rdma):
        """The word and byte enables of write ``k`` while it is an advertisement's (the
        buffers' byte addresses ``start`` and ``rdma``, below 2^32)."""
        nbytes, j = self.width // 8, self.job.payload
        word, be = Signal(self.width), Signal(nbytes)
        advs = []
        for buf in (start, rdma):
            # (buf u64, rkey u32, size u32), big-endian: byte 0 in lane 0
            advs.append(Cat(C(0, 32), _big_endian(buf, 4), _big_endian(j.rkey, 4),
                            _big_endian(C(self.size, 32), 4)))
        if self.adv_words == 1:
            m.d.comb += [word.eq(Mux(k[0], advs[1], advs[0])), be.eq((1 << ADV_BYTES) - 1)]
        else:                                   # W = 64: two words each
            adv = Mux(k[1], advs[1], advs[0])
            m.d.comb += [word.eq(Mux(k[0], adv[64:], adv[:64])), be.eq((1 << nbytes) - 1)]
        return word, be


def _big_endian(value, nbytes):
    """The low ``nbytes`` bytes of ``value``, the most significant in lane 0."""
    return Cat(value.word_select(nbytes - 1 - i, 8) for i in range(nbytes))
