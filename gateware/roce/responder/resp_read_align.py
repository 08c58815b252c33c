"""READ responses at any byte address: the payload reader's whole words realigned."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.roce.layouts import PACKET_DESC, WrSource
from rocegen.gateware.roce.memory.payload_reader import last_count, payload_words

__all__ = ["RespReadAlign", "reader_descriptor"]


def reader_descriptor(m, desc, width):
    """The descriptor the payload reader is given for READ response descriptor ``desc`` (a
    Value of :data:`~rocegen.gateware.roce.layouts.PACKET_DESC`): ``local_addr`` rounded down
    to a word, ``length`` grown by the bytes before the payload in its first word (none for a
    0-byte payload), ``va`` the payload's own address (the builder sends no RETH for a READ
    response; :class:`RespReadAlign` takes it back from there)."""
    lb = (width // 8).bit_length() - 1
    out = Signal(PACKET_DESC)
    off = Mux(desc.length == 0, 0, desc.local_addr[:lb])
    m.d.comb += [out.eq(desc), out.va.eq(desc.local_addr),
                 out.local_addr.eq(Cat(Const(0, lb), desc.local_addr[lb:])),
                 out.length.eq(desc.length + off)]
    return out


def _shift_bytes(m, value, off, width):
    """``width`` bits of ``value`` from byte ``off`` on: stages of 4-input multiplexers, the
    largest steps first, each stage only as wide as what the later ones can still reach (a
    LUT per output bit and stage)."""
    x = value
    k = len(off)
    while k > 0:
        n = 2 if k >= 2 else 1
        k -= n
        step = 8 << k                            # bits per unit of this stage
        reach = 8 * ((1 << k) - 1)               # bits the later stages can still shift
        out = Signal(width + reach, name=f"shift{k}")
        with m.Switch(off[k:k + n]):
            for c in range(1 << n):
                with m.Case(c):
                    m.d.comb += out.eq(x[c * step:c * step + width + reach])
        x = out
    return x


class RespReadAlign(wiring.Component):
    """Drops the leading bytes of READ response packets whose payload does not start at a word
    boundary; every other packet passes unchanged.

    Parameters
    ----------
    width : int
        Data width W (64..512).

    Ports
    -----
    i : In(PacketSignature(width, PACKET_DESC))
        The payload reader's packets. A packet of ``src`` RESPONDER was read for a descriptor
        made by :func:`reader_descriptor`: its payload starts ``va`` mod W/8 bytes into its
        first beat and runs ``length`` minus that many bytes.
    o : Out(PacketSignature(width, PACKET_DESC))
        The packets as the builder takes them: such a packet with its payload from lane 0 of
        its first beat, ``local_addr`` = ``va`` and ``length`` its payload's (the descriptor
        of the READ response again, but for ``va``), ``keep`` for its bytes.

    Behaviour
    ---------
    * Byte order: output byte k of a shifted packet is input byte k + offset.
    * Aligned packets, and every other source's: combinational, ``o`` is ``i``.
    * A shifted packet: its first input beat is held (taken with no output), then each input
      beat makes an output beat of the held one's upper bytes and its lower ones; when the
      payload ends in the held beat, one more output beat follows its last input beat. A
      shifted packet takes one or two cycles more than its beats.
    * Backpressure: ``i.ready`` follows ``o.ready``, except for the first beat of a shifted
      packet (always taken) and while the trailing beat is offered (0).
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({"i": In(PacketSignature(width, PACKET_DESC)),
                          "o": Out(PacketSignature(width, PACKET_DESC))})

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        i, o = self.i, self.o
        d = i.payload.meta
        off_i = Mux(d.length == 0, 0, d.va[:lb])
        shifted = (d.src == WrSource.RESPONDER) & (off_i != 0)

        held = Signal(W)                     # the input beat before
        desc = Signal(PACKET_DESC)           # the shifted packet's descriptor, as output
        off = Signal(lb)
        mid = Signal()                       # inside a shifted packet, a beat held
        tail = Signal()                      # the held beat is the last, offered alone
        # each output beat: the held beat's bytes from ``off``, then the input beat's
        joined = Signal(W)
        both = Cat(held, i.payload.data)
        m.d.comb += joined.eq(_shift_bytes(m, both, off, W))
        # the payload's own bytes and beats
        plen = d.length - off_i
        extra = Signal()                     # the payload ends in the held beat
        lastkeep = keep_mask(last_count(desc.length, W), B)

        with m.If(tail):
            m.d.comb += [o.valid.eq(1), o.payload.data.eq(joined), o.payload.meta.eq(desc),
                         o.payload.last.eq(1), o.payload.keep.eq(lastkeep)]
            with m.If(o.ready):
                m.d.sync += [tail.eq(0), mid.eq(0)]
        with m.Elif(mid):
            m.d.comb += [o.valid.eq(i.valid), o.payload.data.eq(joined),
                         o.payload.meta.eq(desc), i.ready.eq(o.ready),
                         o.payload.last.eq(i.payload.last & ~extra),
                         o.payload.keep.eq(Mux(o.payload.last, lastkeep, (1 << B) - 1))]
            with m.If(i.valid & o.ready):
                m.d.sync += held.eq(i.payload.data)
                with m.If(i.payload.last):
                    m.d.sync += [tail.eq(extra), mid.eq(extra)]
        with m.Elif(shifted):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                m.d.sync += [held.eq(i.payload.data), off.eq(off_i), mid.eq(1),
                             tail.eq(i.payload.last), desc.eq(d), desc.local_addr.eq(d.va),
                             desc.length.eq(plen),
                             extra.eq(payload_words(plen, W) == payload_words(d.length, W))]
        with m.Else():
            m.d.comb += [o.valid.eq(i.valid), o.payload.eq(i.payload), i.ready.eq(o.ready)]
        return m
