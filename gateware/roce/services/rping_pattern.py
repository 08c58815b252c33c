"""One word of an rping ping's buffer, made from the ping's text: rping's ``start_buf``."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.services.rping_layouts import LETTERS, PING_DIGITS, RPING_TEXT

__all__ = ["RpingPattern", "first_letter", "next_letter", "next_text", "TEXT_MAX"]

#: ``rping``'s text before the ping's number (``RPING_MSG_FMT``, ``"rdma-ping-%d: "``).
_PREFIX = b"rdma-ping-"
#: The longest text: the prefix, five digits, ``": "``.
TEXT_MAX = len(_PREFIX) + PING_DIGITS + 2
_FIRST = ord("A")
#: The largest ping (rping's ``-S``): 16-bit byte offsets.
_MAX_SIZE = 65535


def first_letter(m, text):
    """The letter index (0 = ``A``) of byte 0 of a ping's buffer as if it held a letter:
    (``start`` - text length) mod 58, the text being 12 + ``nd`` bytes."""
    v = Signal(7)
    m.d.comb += v.eq(text.start + LETTERS - len(_PREFIX) - 2 - text.nd)
    return Mux(v >= LETTERS, v - LETTERS, v)[:6]


def next_letter(letter, width):
    """The letter index of the next word's byte 0, W/8 bytes on."""
    step = (width // 8) % LETTERS
    v = letter + step
    return Mux(v >= LETTERS, v - LETTERS, v)[:6]


def next_text(m, text, new):
    """Assignments (comb) of ``new`` (RPING_TEXT): the text of the next ping (the number one
    more, in BCD, one digit more after 9, 99, ...; ``start`` one letter on)."""
    carry, nd = Const(1, 1), text.nd
    stmts = [new.start.eq(Mux(text.start == LETTERS - 1, 0, text.start + 1))]
    for k in range(PING_DIGITS):
        d = text.digits[k]
        stmts.append(new.digits[k].eq(Mux(carry, Mux(d == 9, 0, d + 1), d)))
        if k + 1 < PING_DIGITS:
            # a carry out of the number's top digit makes one digit more
            nd = Mux(carry & (d == 9) & (text.nd == k + 1), k + 2, nd)
        carry = carry & (d == 9)
    stmts.append(new.nd.eq(nd))
    m.d.comb += stmts


class RpingPattern(wiring.Component):
    """Word ``word`` of the buffer rping's client fills for a ping (``ping_data`` of
    ``rocegen.sim.models.services.rping``): ``"rdma-ping-%d: "``, then letters from ``start``
    on (``A`` .. ``z``, wrapping), the last byte 0.

    Parameters
    ----------
    width : int
        W bits (64..512): W/8 bytes a word.
    size : int
        The ping's bytes (rping's ``-S``, 26..65535).

    Ports
    -----
    text : In(RPING_TEXT)
        The ping's number (BCD), its digits, its first letter.
    word : In(range(ceil(size / (W/8))))
        The word: bytes ``word * W/8`` .. of the buffer.
    letter : In(6)
        The letter index of the word's byte 0 (:func:`first_letter` for word 0,
        :func:`next_letter` of the word before for the others).
    data : Out(W)
        The word's bytes, byte ``word * W/8 + j`` in lane ``j``; 0 beyond the buffer.
    be : Out(W/8)
        Bit ``j``: byte ``j`` is inside the buffer (below ``size``).

    Behaviour
    ---------
    Combinational. A lane's letter is (``letter`` + ``j``) mod 58, so ``letter`` must be below
    58 (a table of ``letter`` per lane).
    """

    def __init__(self, width, size):
        self.width = check_width(width)
        if not isinstance(size, int) or isinstance(size, bool) or not 26 <= size <= _MAX_SIZE:
            raise ValueError(f"size must be an integer 26..{_MAX_SIZE} (rping's -S), "
                             f"not {size!r}")
        self.size = size
        self.words = -(-size // (width // 8))
        super().__init__({
            "text": In(RPING_TEXT), "word": In(range(self.words)), "letter": In(6),
            "data": Out(width), "be": Out(width // 8),
        })

    def elaborate(self, platform):
        m = Module()
        nbytes = self.width // 8
        text_words = -(-TEXT_MAX // nbytes)      # the words that may hold text
        digits = Array(self.text.digits[k] for k in range(PING_DIGITS))
        prefix = Array(Const(b, 8) for b in _PREFIX)
        for j in range(nbytes):
            pos = Signal(range(self.words * nbytes), name=f"pos{j}")
            m.d.comb += pos.eq(Cat(Const(j, (nbytes - 1).bit_length()), self.word)
                               if nbytes > 1 else self.word)
            lane = self.data.word_select(j, 8)
            # (the lane's letter: a table of the word's first letter, one LUT level a bit)
            letters = Array(Const(_FIRST + (v + j) % LETTERS, 8) for v in range(LETTERS))
            m.d.comb += [lane.eq(letters[self.letter]), self.be[j].eq(pos < self.size)]
            if j < TEXT_MAX:
                self._text(m, lane, pos, j, text_words, prefix, digits)
            with m.If(pos >= self.size - 1):
                m.d.comb += lane.eq(0)
        return m

    def _text(self, m, lane, pos, j, text_words, prefix, digits):
        """Lane ``j``'s byte where it falls in the text."""
        nd = self.text.nd
        small = Signal(5, name=f"small{j}")         # the byte's position, when below 32
        m.d.comb += small.eq(pos)
        with m.If(self.word < text_words):
            with m.If(small < len(_PREFIX)):
                m.d.comb += lane.eq(prefix[small])
            with m.Elif(small < len(_PREFIX) + nd):
                # (the most significant digit first)
                m.d.comb += lane.eq(ord("0") + digits[nd + len(_PREFIX) - 1 - small])
            with m.Elif(small == len(_PREFIX) + nd):
                m.d.comb += lane.eq(ord(":"))
            with m.Elif(small == len(_PREFIX) + nd + 1):
                m.d.comb += lane.eq(ord(" "))
