"""The Internet checksum (RFC 1071): the 16-bit one's complement sum of big-endian words.

Byte 0 of the data is the high byte of word 0 (network order); an odd final byte is padded with
a zero low byte. The checksum field of a header is the complement of the sum.

Every function and block here returns the *sum* (not its complement) in the usual end-around
carry form: 0 only when every word is zero, otherwise a value from 1 to 0xFFFF (a sum that is a
multiple of 0xFFFF comes out as 0xFFFF). :mod:`rocegen.sim.models.net.checksum` computes the same.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width, packet_layout

__all__ = ["be_words", "ones_complement_sum", "sum_by_four", "fold", "tap", "PacketChecksum"]


def be_words(lanes):
    """Bytes in stream lane order (byte 0 in bits 7:0) -> list of 16-bit big-endian words.

    Word ``k`` has byte ``2k`` as its high byte and byte ``2k+1`` as its low byte; a final odd
    byte gets a zero low byte. ``be_words(IPV4.to_lanes(view))`` gives the words of a header."""
    lanes = Value.cast(lanes)
    if len(lanes) % 8:
        raise ValueError(f"lanes must be a whole number of bytes, not {len(lanes)} bits")
    nbytes = len(lanes) // 8
    byte = lambda k: lanes[8 * k:8 * k + 8] if k < nbytes else Const(0, 8)  # noqa: E731
    return [Cat(byte(2 * k + 1), byte(2 * k)) for k in range((nbytes + 1) // 2)]


def _check_word_width(width):
    if not isinstance(width, int) or isinstance(width, bool) or width < 1:
        raise ValueError(f"word width must be a positive integer number of bits, not {width!r}")


def fold(value, bound, width=16):
    """End-around fold of ``value`` (an unsigned Value known to be at most ``bound``) to
    ``width`` bits, keeping it congruent modulo ``2**width - 1`` and zero only when zero."""
    top = (1 << width) - 1
    while bound >= 1 << (2 * width):
        value = value[:width] + value[width:]
        bound = top + (bound >> width)
        value = value[:bound.bit_length()]
    if bound > top:
        # value < 2**(2*width): lo + hi < 2**(width+1), and if that carries, its low part plus
        # the carry cannot carry again
        s = value[:width] + value[width:]
        value = (s[:width] + s[width])[:width]
    return value[:width]


def ones_complement_sum(values, width=16):
    """Combinational one's complement sum (end-around carry) of ``values``.

    Parameters
    ----------
    values : iterable of Value-castable
        Words of at most ``width`` bits each (narrower ones are zero-extended).
    width : int
        Word width, 16 for the Internet checksum.

    Returns a ``width``-bit Value. The words are added by a balanced tree of adders whose
    carries are kept (each level one bit wider), and the total is folded back to ``width``
    bits at the end (two more adders for up to ``2**width`` words); this gives the same result
    as an end-around carry at every adder with fewer of them. The depth is
    ``ceil(log2(len(values))) + 2`` adders: for a 20-byte IPv4 header, 4 + 2. Register the
    inputs or the result as the clock requires.
    """
    _check_word_width(width)
    vals = [Value.cast(v) for v in values]
    for n, v in enumerate(vals):
        if len(v) > width:
            raise ValueError(f"value {n} is {len(v)} bits wide, more than the word width {width}")
    if not vals:
        return Const(0, width)
    top = (1 << width) - 1
    value, bound = _sum_bounded([(v, top) for v in vals])
    return fold(value, bound, width)


def sum_by_four(m, ops, name="sum"):
    """One registered reduction stage of an adder tree: the ``(value, bound)`` pairs ``ops``
    (``bound`` the largest the value can be) summed in groups of up to four, two adders deep,
    each group's sum in a register just wide enough for its bound. Returns the registers as
    ``(value, bound)`` pairs (a quarter as many, rounded up), a cycle later than ``ops``."""
    out = []
    for g in range(0, len(ops), 4):
        value, bound = _sum_bounded(ops[g:g + 4])
        reg = Signal(range(bound + 1), name=f"{name}_{g // 4}")
        m.d.sync += reg.eq(value)
        out.append((reg, bound))
    return out


def _sum_bounded(ops):
    """Adder tree of ``(value, bound)`` pairs -> ``(value, bound)``."""
    while len(ops) > 1:
        nxt = []
        for k in range(0, len(ops) - 1, 2):
            (a, ba), (b, bb) = ops[k], ops[k + 1]
            bound = ba + bb
            nxt.append(((a + b)[:bound.bit_length()], bound))
        if len(ops) % 2:
            nxt.append(ops[-1])
        ops = nxt
    return ops[0]


def tap(block, stream):
    """Statements that make ``block`` (with the ports ``valid``, ``ready`` and ``payload`` of a
    packet layout, all inputs) observe the packet stream ``stream``, of any metadata."""
    return [
        block.valid.eq(stream.valid),
        block.ready.eq(stream.ready),
        block.payload.data.eq(stream.payload.data),
        block.payload.keep.eq(stream.payload.keep),
        block.payload.last.eq(stream.payload.last),
    ]


class PacketChecksum(wiring.Component):
    """Internet checksum: the one's complement sum of every packet of a stream, observed
    without touching it.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata layout of the observed stream, so that ``payload`` can be assigned from it
        whole; the metadata itself is ignored.

    Ports
    -----
    valid, ready : ``In(1)``; payload : ``In(packet_layout(width, meta))``
        A tap: copies of the observed stream's signals (see :meth:`observe`). A beat counts when
        ``valid`` and ``ready`` are both high; the block never exerts backpressure.
    seed : ``In(16)``
        Initial value of the sum, sampled with the first beat of each packet (in the cycle it
        moves), for example the sum of the UDP pseudo-header; 0 for a plain sum.
    done : ``Out(1)``; sum : ``Out(16)``
        One result per packet: ``done`` is high for one cycle with ``sum`` the one's complement
        sum of ``seed`` and all bytes of the packet (big-endian words, an odd final byte padded
        with zero, bytes outside ``keep`` ignored). Results cannot be held off (a stream with
        ``always_ready`` would say the same but cannot be a port of a top-level design).

    Behaviour
    ---------
    * Latency: :attr:`latency` cycles, fixed: if the last beat of a packet moves in cycle ``t``,
      ``done`` is high in cycle ``t + latency``. ``latency`` is 4 at 64 and 128 bits and 5 at
      256 and 512 bits.
    * Throughput: every beat of every packet, one per cycle; results of back-to-back packets
      (even single-beat packets on consecutive cycles) leave on consecutive cycles.
    * Pipeline: a register stage captures the tap; then stages of 4-to-1 additions reduce the
      W/16 words of the beat to at most two partial sums (at 512 bits 32 -> 8 -> 2); then the
      per-packet accumulator adds them to its folded value (or to ``seed`` on a first beat);
      then an end-around fold to 16 bits feeds the output register. Every stage is at most two
      adders deep (the widest adder is 22 bits, at 512 bits), for 322 MHz on UltraScale+. The
      accumulator cannot overflow whatever the packet length.
    """

    def __init__(self, width, meta=None):
        check_width(width)
        self.width = width
        self.meta = meta
        words = width // 16
        stages = 0
        while words > 2:
            words = -(-words // 4)
            stages += 1
        self._stages = stages
        #: cycles from a packet's last beat to its result
        self.latency = 3 + stages
        super().__init__({
            "valid": In(1),
            "ready": In(1),
            "payload": In(packet_layout(width, meta)),
            "seed": In(16),
            "done": Out(1),
            "sum": Out(16),
        })

    def observe(self, stream):
        """Statements that make this block observe the packet stream ``stream`` (of any
        metadata): ``m.d.comb += ck.observe(s)``."""
        return tap(self, stream)

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        top = 0xFFFF

        # stage 0: capture the tap
        beat = self.valid & self.ready
        first = Signal(init=1)             # the next beat is a packet's first
        with m.If(beat):
            m.d.sync += first.eq(self.payload.last)
        v = Signal()
        last = Signal()
        fst = Signal()
        seed = Signal(16)
        d0 = Signal(self.width)
        k0 = Signal(B)
        m.d.sync += [v.eq(beat), last.eq(self.payload.last), fst.eq(first), seed.eq(self.seed),
                     d0.eq(self.payload.data), k0.eq(self.payload.keep)]

        masked = Cat(*(Mux(k0[j], d0[8 * j:8 * j + 8], 0) for j in range(B)))
        ops = [(w, top) for w in be_words(masked)]

        # 4-to-1 reduction stages, each two adders deep
        for n in range(self._stages):
            ops = sum_by_four(m, ops, f"part{n}")
            regs = [Signal.like(x) for x in (v, last, fst, seed)]
            m.d.sync += [r.eq(x) for r, x in zip(regs, (v, last, fst, seed), strict=True)]
            v, last, fst, seed = regs

        # accumulator: its low half plus its high half plus the beat's partial sums, or the
        # seed plus those on a first beat. It stays below 2**acc_bits whatever the length.
        beat_bound = sum(b for _, b in ops)
        acc_bits = 17
        while top + ((1 << (acc_bits - 16)) - 1) + beat_bound >= 1 << acc_bits:
            acc_bits += 1
        acc = Signal(acc_bits)
        acc_hi_bound = (1 << (acc_bits - 16)) - 1
        operands = [(Mux(fst, seed, acc[:16]), top),
                    (Mux(fst, 0, acc[16:]), acc_hi_bound)] + ops
        total, bound = _sum_bounded(operands)
        assert bound < 1 << acc_bits
        with m.If(v):
            m.d.sync += acc.eq(total)
        done = Signal()
        m.d.sync += done.eq(v & last)

        # fold and output register
        result = Signal(16)
        out_valid = Signal()
        m.d.sync += [result.eq(fold(acc, (1 << acc_bits) - 1, 16)), out_valid.eq(done)]
        m.d.comb += [self.done.eq(out_valid), self.sum.eq(result)]
        return m
