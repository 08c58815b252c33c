from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat

__all__ = ["LengthCut"]


class LengthCut(wiring.Component):
    """Cut every packet at the length its own first beat states, without waiting for its end.

    Made to take the Ethernet padding off an IPv4 datagram (its total length, bytes 2 and 3)
    in front of a check that needs the datagram's exact end (the ICRC's), in no cycle and in
    few LUT levels: unlike :class:`~rocegen.gateware.lib.trim.Trim`, it never holds the beat
    that reaches the length back for the ``error`` of the packet's last beat.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata of the streams, passed through.
    field_at : int
        Byte offset, within the first beat, of the packet's length: a 16-bit big-endian field
        (the byte at ``field_at`` most significant) counting the packet's bytes from its first.
        ``field_at + 2`` must not exceed the beat's W/8 bytes.

    Ports
    -----
    i : ``In(PacketSignature(width, meta))``
        Packets, ``keep`` a thermometer code on every beat (lanes from 0).
    o : ``Out(PacketSignature(width, meta))``
        The same packets cut to their length.
    short : ``Out(1)``
        High for one cycle, in the cycle the last beat of a packet shorter than its length
        moves on ``o``.

    Behaviour
    ---------
    * A packet of at least its length leaves with exactly its first ``length`` bytes: the beat
      in which the count reaches the length becomes the last, ``keep`` cut to the bytes within
      the length (a length of 0 gives one beat with ``keep`` 0); the input's beats after it are
      taken and dropped, whatever ``o.ready``. ``error`` of that last beat is the input
      beat's when it is the input's last too (the bytes beyond the length, if any, share it);
      when beats follow it, 0: their ``error`` (a frame's FCS verdict) is not waited for. So a
      frame damaged only in beats beyond the length goes on unmarked; a check of what the
      length covers (the ICRC) still sees any damage there.
    * A packet shorter than its length passes whole, with ``error`` set on its last beat
      (``short`` pulses).
    * Latency: none (``o`` is combinational from ``i``; ``i.ready`` is ``o.ready``, or 1 for
      a beat dropped). The length is read from the first beat's lanes as it is offered (a
      multiplexer in front of the compare), and the bytes left are kept in a register for the
      beats after: the cut is a zero test of the count's high bits beside a thermometer of its
      low bits, two or three LUT levels.
    """

    def __init__(self, width, meta=None, *, field_at):
        check_width(width)
        if meta is not None and not isinstance(meta, data.Layout):
            raise TypeError(f"meta must be a data.Layout or None, not {meta!r}")
        if not isinstance(field_at, int) or isinstance(field_at, bool):
            raise TypeError(f"field_at must be an integer byte offset, not {field_at!r}")
        if not 0 <= field_at <= width // 8 - 2:
            raise ValueError(f"the length field (bytes {field_at}..{field_at + 1}) must lie in "
                             f"the first beat of {width // 8} bytes")
        self.width = width
        self.meta = meta
        self.field_at = field_at
        super().__init__({
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)),
            "short": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        lane_bits = (B - 1).bit_length()
        i, o = self.i, self.o
        beat = i.payload
        first = first_beat(m, i)
        at = self.field_at
        field = Cat(beat.data[8 * (at + 1):8 * (at + 2)], beat.data[8 * at:8 * (at + 1)])
        left = Signal(16)                        # bytes of the packet left for the next beat
        dropping = Signal()                      # past the length: the input's rest is dropped
        now = Signal(16)
        m.d.comb += now.eq(Mux(first, field, left))
        hi, lo = now[lane_bits:], now[:lane_bits]
        # the length ends in this beat: fewer than B bytes left, or exactly B
        ends = Signal()
        m.d.comb += ends.eq((hi == 0) | ((hi == 1) & (lo == 0)))
        cut = Cat(*((hi != 0) | (lo > k) for k in range(B)))
        # the beat holds the bytes left (``keep`` a thermometer: its lane ``now - 1`` is set)
        held = Cat(1, beat.keep[:B - 1]).bit_select(lo, 1)
        covered = ends & Mux(hi == 0, held, beat.keep[B - 1])
        short = beat.last & ~covered
        m.d.comb += [
            o.valid.eq(i.valid & ~dropping),
            i.ready.eq(o.ready | dropping),
            o.payload.data.eq(beat.data),
            o.payload.keep.eq(beat.keep & cut),
            o.payload.last.eq(beat.last | ends),
            o.payload.error.eq((beat.error & beat.last) | short),
            o.payload.meta.eq(beat.meta),
            self.short.eq(o.valid & o.ready & short),
        ]
        with m.If(i.valid & i.ready):
            m.d.sync += left.eq(now - B)
            with m.If(beat.last):
                m.d.sync += dropping.eq(0)
            with m.Elif(~dropping & ends):
                m.d.sync += dropping.eq(1)
        return m
