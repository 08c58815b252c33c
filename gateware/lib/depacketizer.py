from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, empty_meta
from rocegen.wire.headers import Header

__all__ = ["Depacketizer"]


def _meta_with(meta, name, layout):
    meta = empty_meta() if meta is None else meta
    members = dict(meta.members)
    if name in members:
        raise ValueError(f"metadata already has a field {name!r}")
    members[name] = layout
    return data.StructLayout(members)


class Depacketizer(wiring.Component):
    """Header removal: strip a fixed ``header`` from the front of each packet.

    The parsed header leaves as ``o.meta.<header.name>`` (a view of ``header.layout``) beside the
    incoming metadata, and the rest of the packet leaves as a packet stream realigned to lane 0.

    Parameters
    ----------
    header : :class:`~rocegen.wire.headers.Header`
        Any length; it need not be a multiple of the beat width.
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata of the input stream, passed through.
    pass_short : bool
        A packet whose header ends in its last beat leaves in that beat's cycle (below). For
        inputs that carry such packets (at W = 512 an Ethernet frame of up to 64 bytes); it
        costs a multiplexer on every output bit the header's tail feeds.

    Behaviour
    ---------
    * Throughput: one input beat per cycle, sustained across back-to-back packets (the input is
      never held off while ``o.ready`` is high).
    * Latency: when the header length H is not a multiple of W/8, each output beat is made of
      the tail of one input beat (held in a register) and the head of the next, so it leaves in
      the cycle the next beat is accepted (combinational path from ``i`` to ``o``); a packet's
      final output beat leaves one cycle after its last input beat when its bytes do not fit in
      the beat before. With ``pass_short``, a packet whose header ends in its last beat leaves
      in the cycle that beat is taken when the output is free, its header parsed from the input
      (a combinational path from ``i`` to ``o.meta``); it is latched as well, so that when
      ``o.ready`` is low the same beat is offered from the next cycle on. When H is a multiple
      of W/8, body beats pass straight through (``pass_short`` changes nothing).
    * Backpressure: ``i.ready`` follows ``o.ready`` combinationally (plus header beats, which are
      always taken). Put a :class:`~rocegen.gateware.lib.buffer.RegisterSlice` behind it to break the
      path.
    * A packet shorter than the header is dropped whole and pulses ``runt`` for one cycle; no
      beat of it leaves.
    * A packet that is exactly the header leaves as one beat with ``keep == 0``, ``last == 1``.
    * ``error`` of the last input beat is carried to the last output beat.
    * Byte order: lane order as on the wire (byte 0 in the low lane); the header table defines
      field order and endianness.
    """

    def __init__(self, header, width, meta=None, *, pass_short=False):
        if not isinstance(header, Header):
            raise TypeError(f"header must be a Header, not {header!r}")
        check_width(width)
        if not isinstance(pass_short, bool):
            raise TypeError(f"pass_short must be a bool, not {pass_short!r}")
        self.pass_short = pass_short
        self.header = header
        self.width = width
        self.meta_in = empty_meta() if meta is None else meta
        self.meta_out = _meta_with(meta, header.name, header.layout)
        super().__init__({
            "i": In(PacketSignature(width, self.meta_in)),
            "o": Out(PacketSignature(width, self.meta_out)),
            "runt": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        H = self.header.length
        q, r = divmod(H, B)
        i, o = self.i, self.o

        idx = Signal(range(q + 1))          # header beats taken in the current packet
        hdr_buf = Signal(max(1, 8 * B * q))  # full header beats, beat 0 lowest
        meta = Signal(self.meta_out)

        def meta_of(target, lanes):
            parsed = self.header.from_lanes(lanes)
            stmts = [getattr(target, self.header.name).eq(parsed)]
            for name in self.meta_in.members:
                stmts.append(getattr(target, name).eq(getattr(i.payload.meta, name)))
            return stmts

        # (a packet that leaves in the cycle its last beat comes in overrides it, below)
        m.d.comb += o.payload.meta.eq(meta)

        return self._elaborate_lanes(m, B, hdr_buf, i, idx, meta, meta_of, o, q, r)

    def _elaborate_lanes(self, m, B, hdr_buf, i, idx, meta, meta_of, o, q, r):
        """The lanes: the held beat and the current one shifted into the output beat, the header
        latched."""
        if r:
            self._lanes_unaligned(m, B, hdr_buf, i, idx, meta, meta_of, o, q, r)
        else:
            self._lanes_aligned(m, B, hdr_buf, i, idx, meta, meta_of, o, q)
        return m

    def _lanes_unaligned(self, m, B, hdr_buf, i, idx, meta, meta_of, o, q, r):
        """H is not a multiple of W/8: a held beat R gives its lanes r..B-1 to each output beat."""
        # R holds the previous beat of this packet; it contributes its lanes r..B-1.
        r_data = Signal(self.width)
        r_keep = Signal(B)
        r_last = Signal()
        r_error = Signal()
        r_valid = Signal()

        can_start = ~r_valid | (r_last & o.ready)
        # a packet whose header ends in its last beat, coming in while the output is free,
        # leaves in that cycle (it is latched into R as well, in case ``o.ready`` is low:
        # then R offers the same beat from the next cycle)
        lanes_now = Cat(hdr_buf, i.payload.data[:8 * r]) if q else i.payload.data[:8 * r]
        at_once = Signal()
        if self.pass_short:
            m.d.comb += at_once.eq(~r_valid & i.valid & (idx == q) & i.payload.last &
                                   i.payload.keep[r - 1])
        with m.If(at_once):
            m.d.comb += [
                o.valid.eq(1),
                o.payload.data.eq(i.payload.data[8 * r:]),
                o.payload.keep.eq(i.payload.keep[r:]),
                o.payload.last.eq(1),
                o.payload.error.eq(i.payload.error),
            ]
            m.d.comb += meta_of(o.payload.meta, lanes_now)
        with m.Elif(r_valid & r_last):
            # final output beat of the packet: R's remaining lanes
            m.d.comb += [
                o.valid.eq(1),
                o.payload.data.eq(r_data[8 * r:]),
                o.payload.keep.eq(r_keep[r:]),
                o.payload.last.eq(1),
                o.payload.error.eq(r_error),
            ]
            with m.If(o.ready):
                m.d.sync += r_valid.eq(0)
        with m.Elif(r_valid):
            ends = i.payload.last & ~i.payload.keep[r]
            m.d.comb += [
                o.valid.eq(i.valid),
                o.payload.data.eq(Cat(r_data[8 * r:], i.payload.data[:8 * r])),
                o.payload.keep.eq(Cat(r_keep[r:], i.payload.keep[:r])),
                o.payload.last.eq(ends),
                o.payload.error.eq(ends & i.payload.error),
                i.ready.eq(o.ready),
            ]
            with m.If(i.valid & o.ready):
                with m.If(ends):
                    m.d.sync += r_valid.eq(0)
                with m.Else():
                    m.d.sync += [r_data.eq(i.payload.data), r_keep.eq(i.payload.keep),
                                 r_last.eq(i.payload.last), r_error.eq(i.payload.error)]

        with m.If(can_start):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                with m.If(idx < q):
                    if q:
                        m.d.sync += hdr_buf.eq(Cat(hdr_buf[8 * B:], i.payload.data))
                    with m.If(i.payload.last):
                        m.d.sync += idx.eq(0)
                        m.d.comb += self.runt.eq(1)
                    with m.Else():
                        m.d.sync += idx.eq(idx + 1)
                with m.Else():
                    m.d.sync += idx.eq(0)
                    with m.If(i.payload.last & ~i.payload.keep[r - 1]):
                        m.d.comb += self.runt.eq(1)
                    with m.Else():
                        m.d.sync += meta_of(meta, lanes_now)
                        m.d.sync += [r_valid.eq(~(at_once & o.ready)),
                                     r_data.eq(i.payload.data), r_keep.eq(i.payload.keep),
                                     r_last.eq(i.payload.last), r_error.eq(i.payload.error)]

    def _lanes_aligned(self, m, B, hdr_buf, i, idx, meta, meta_of, o, q):
        """H is a multiple of W/8: body beats pass straight through."""
        # Header ends on a beat boundary: body beats pass straight through.
        empty = Signal()                # a header-only packet owes one empty beat
        empty_error = Signal()
        with m.If(empty):
            m.d.comb += [o.valid.eq(1), o.payload.last.eq(1),
                         o.payload.error.eq(empty_error)]
            with m.If(o.ready):
                m.d.sync += empty.eq(0)
        # (never while ``empty``: it follows a packet's last beat) the body
        with m.If(idx == q):
            m.d.comb += [
                o.valid.eq(i.valid),
                o.payload.data.eq(i.payload.data),
                o.payload.keep.eq(i.payload.keep),
                o.payload.last.eq(i.payload.last),
                o.payload.error.eq(i.payload.error),
                i.ready.eq(o.ready),
            ]
            with m.If(i.valid & o.ready & i.payload.last):
                m.d.sync += idx.eq(0)
        # the header: taken while an owed empty beat leaves too, so that the input is never
        # held while ``o.ready`` is high (the latch below takes effect after that beat)
        with m.Elif(~empty | o.ready):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid):
                m.d.sync += hdr_buf.eq(Cat(hdr_buf[8 * B:], i.payload.data))
                with m.If(idx == q - 1):
                    lanes = Cat(hdr_buf[8 * B:], i.payload.data) if q > 1 else i.payload.data
                    m.d.sync += meta_of(meta, lanes)
                    with m.If(i.payload.last):
                        m.d.sync += idx.eq(0)
                        with m.If(i.payload.keep[B - 1]):
                            m.d.sync += [empty.eq(1), empty_error.eq(i.payload.error)]
                        with m.Else():
                            m.d.comb += self.runt.eq(1)
                    with m.Else():
                        m.d.sync += idx.eq(q)
                with m.Else():
                    with m.If(i.payload.last):
                        m.d.sync += idx.eq(0)
                        m.d.comb += self.runt.eq(1)
                    with m.Else():
                        m.d.sync += idx.eq(idx + 1)
