from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask

__all__ = ["VarPacketizer", "MAX_TAIL_BITS"]

#: Widest ``tail_len`` field accepted (up to 15 zero bytes after the payload).
MAX_TAIL_BITS = 4


def _lanes_to_bits(keep):
    """Per-byte enables -> a bit mask with each enable repeated over its byte."""
    return Cat(*(k.replicate(8) for k in keep))


class VarPacketizer(wiring.Component):
    """Header insertion with a header length chosen per packet, and optional zero padding.

    The output packet is ``hdr[0 : hdr_len]`` followed by the input payload, followed by
    ``tail_len`` zero bytes. The header comes from the input metadata:

    ``hdr`` (``unsigned(8 * max_header)``)
        The header bytes in lane order: byte 0 in bits 7:0 (as built by
        :meth:`~rocegen.wire.headers.Header.to_lanes`). Bytes at and beyond ``hdr_len`` are
        ignored.
    ``hdr_len`` (unsigned, wide enough for ``max_header``)
        Header bytes to insert, 0 .. ``max_header`` (one of ``lengths`` when that is given).
    ``tail_len`` (optional, unsigned, 1 .. :data:`MAX_TAIL_BITS` bits)
        Zero bytes appended after the payload (for instance the pad bytes that bring a payload to
        a multiple of 4 bytes). Without this field nothing is appended.

    All other metadata fields pass to ``o.meta`` unchanged.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    max_header : int
        Largest header in bytes, 1..256.
    meta : StructLayout
        Metadata of the input stream, with the fields above.
    lengths : iterable of int, optional
        The header lengths that will be used (each 0..``max_header``). The payload shifter then
        only implements the distinct shifts ``h mod (W/8)`` of these lengths; a ``hdr_len``
        outside ``lengths`` gives undefined output. Without it every length 0..``max_header`` is
        supported.

    Behaviour
    ---------
    * Byte order: byte 0 of the output packet is byte 0 of the header, in lane 0 of the first
      beat; payload byte ``k`` is output byte ``hdr_len + k``.
    * Latency: zero cycles (combinational from ``i`` to ``o``). The full header beats
      (``hdr_len // (W/8)``) are emitted while the packet's first input beat waits at the input
      (its metadata supplies the header); the input is then shifted up by ``hdr_len mod (W/8)``
      lanes, the lanes pushed out of a beat being kept in a register for the next one. When the
      last input beat's bytes plus the tail do not fit, one more output beat (more only if the
      tail alone spills beyond it) follows, during which the input is held.
    * Throughput: one output beat per cycle, ``ceil((hdr_len + len + tail_len) / (W/8))`` beats per
      packet (one beat for an empty result) and no idle beat between back-to-back packets as long
      as the input keeps up.
    * Logic depth of the data path: a header-beat mux over ``max_header // (W/8) + 1`` beats, a
      2:1 choice between header remainder and carried lanes, then one N:1 mux per output lane
      where N is the number of distinct shifts (``hdr_len mod (W/8)``: at most W/8, or the
      distinct values of ``lengths``), then the 3:1 choice header/body/extra beat. ``keep`` adds
      a (2^``tail_len`` bits):1 mux for the tail.
    * Backpressure: ``i.ready`` follows ``o.ready`` combinationally; it is low while header and
      extra beats are emitted. ``o.valid`` never depends on ``o.ready``.
    * ``keep`` is a thermometer code; an empty input packet (one beat, ``keep == 0``) yields the
      header (and tail) alone; with ``hdr_len == 0`` and no tail it stays one empty beat.
    * ``error`` of the last input beat is carried to the last output beat.
    """

    def __init__(self, width, max_header, meta, *, lengths=None):
        check_width(width)
        if not isinstance(max_header, int) or isinstance(max_header, bool):
            raise TypeError(f"max_header must be an integer number of bytes, not {max_header!r}")
        if not 1 <= max_header <= 256:
            raise ValueError(f"max_header must be 1..256 bytes, not {max_header}")
        if not isinstance(meta, data.StructLayout):
            raise TypeError(f"meta must be a StructLayout, not {meta!r}")
        members = dict(meta.members)
        for name in ("hdr", "hdr_len"):
            if name not in members:
                raise ValueError(f"input metadata must have a field {name!r}")
        if Shape.cast(members["hdr"]) != Shape(8 * max_header):
            raise ValueError(f"metadata field 'hdr' must be unsigned({8 * max_header}) for a "
                             f"{max_header}-byte header, not {members['hdr']!r}")
        hdr_len_shape = Shape.cast(members["hdr_len"])
        if hdr_len_shape.signed or hdr_len_shape.width < max_header.bit_length():
            raise ValueError(f"metadata field 'hdr_len' must be unsigned and hold {max_header}, "
                             f"not {members['hdr_len']!r}")
        self.tail_bits = 0
        if "tail_len" in members:
            tail_shape = Shape.cast(members["tail_len"])
            if tail_shape.signed or not 1 <= tail_shape.width <= MAX_TAIL_BITS:
                raise ValueError(f"metadata field 'tail_len' must be unsigned of 1..{MAX_TAIL_BITS} "
                                 f"bits, not {members['tail_len']!r}")
            self.tail_bits = tail_shape.width
        if lengths is not None:
            lengths = tuple(lengths)
            if not lengths:
                raise ValueError("lengths must name at least one header length")
            for h in lengths:
                if not isinstance(h, int) or isinstance(h, bool):
                    raise TypeError(f"header lengths must be integers, not {h!r}")
                if not 0 <= h <= max_header:
                    raise ValueError(f"header length {h} is outside 0..{max_header}")
            lengths = tuple(sorted(set(lengths)))
        self.width = width
        self.max_header = max_header
        self.lengths = lengths
        self.meta_in = meta
        for name in ("hdr", "hdr_len", "tail_len"):
            members.pop(name, None)
        self.meta_out = data.StructLayout(members)
        super().__init__({
            "i": In(PacketSignature(width, self.meta_in)),
            "o": Out(PacketSignature(width, self.meta_out)),
        })

    def shifts(self):
        """The distinct lane shifts (``hdr_len mod (W/8)``) the payload shifter implements."""
        B = self.width // 8
        if self.lengths is None:
            return tuple(range(min(B, self.max_header + 1)))
        return tuple(sorted({h % B for h in self.lengths}))

    def elaborate(self, platform):
        m = Module()
        W = self.width
        B = W // 8
        lb = B.bit_length() - 1
        maxq = self.max_header // B
        tails = range(1 << self.tail_bits)
        i, o = self.i, self.o
        meta = i.payload.meta
        full = Const((1 << B) - 1, B)

        rest = Signal(self.meta_out)
        for name in self.meta_out.members:
            m.d.comb += getattr(rest, name).eq(getattr(meta, name))

        q = Signal(range(maxq + 1))             # full header beats of this packet
        r = Signal(lb)                          # lanes the payload is shifted by
        t = Signal(max(1, self.tail_bits))      # zero bytes after the payload
        m.d.comb += [q.eq(meta.hdr_len >> lb), r.eq(meta.hdr_len)]
        if self.tail_bits:
            m.d.comb += t.eq(meta.tail_len)

        # header beat `idx` (beats past the header are zero, so beat q holds the remainder)
        idx = Signal(range(maxq + 1))           # header beats emitted for the current packet
        hdr = Cat(meta.hdr, Const(0, 8 * ((maxq + 1) * B - self.max_header)))
        hbeat = Signal(W)
        with m.Switch(idx):
            for k in range(maxq + 1):
                with m.Case(k):
                    m.d.comb += hbeat.eq(hdr[W * k: W * (k + 1)])

        first = Signal(init=1)                  # the next body beat is the packet's first
        carry = Signal(W)                       # lanes 0..r-1: bytes pushed out of the last beat
        rmask = Signal(B)
        m.d.comb += rmask.eq(keep_mask(r, B))
        low = Signal(W)
        m.d.comb += low.eq(Mux(first, hbeat & _lanes_to_bits(rmask), carry))

        # body beat: `low` (r lanes) then the input beat, over two beats' worth of lanes
        in_data = Signal(W)
        m.d.comb += in_data.eq(i.payload.data & _lanes_to_bits(i.payload.keep))
        shifted = Signal(2 * W)
        shifted_keep = Signal(2 * B)
        with m.Switch(r):
            for s in self.shifts():
                with m.Case(s):
                    m.d.comb += [
                        shifted.eq(Cat(low[:8 * s], in_data)),
                        shifted_keep.eq(Cat(Const((1 << s) - 1, s), i.payload.keep)),
                    ]
        # the tail: a thermometer code of count + t lanes (the data lanes are zero already)
        ext = 2 * B + tails[-1]
        ext_keep = Signal(ext)
        with m.Switch(t):
            for n in tails:
                with m.Case(n):
                    m.d.comb += ext_keep.eq(Cat(Const((1 << n) - 1, n), shifted_keep))
        spill = i.payload.last & ext_keep[B]    # bytes left for extra beats

        # extra beats after the last input beat
        flush_keep = Signal(ext - B)            # lanes still to send; extra beat due if [0]
        flush_error = Signal()
        flush_meta = Signal(self.meta_out)
        flush_last = ~flush_keep[B] if ext - B > B else Const(1, 1)

        with m.If(flush_keep[0]):
            m.d.comb += [
                o.valid.eq(1),
                o.payload.data.eq(carry),
                o.payload.keep.eq(flush_keep[:B]),
                o.payload.last.eq(flush_last),
                o.payload.error.eq(flush_last & flush_error),
                o.payload.meta.eq(flush_meta),
            ]
            with m.If(o.ready):
                m.d.sync += [flush_keep.eq(flush_keep >> B), carry.eq(0)]
        with m.Elif(idx < q):
            ends = (idx == q - 1) & (r == 0) & (t == 0) & i.payload.last & ~i.payload.keep[0]
            m.d.comb += [
                o.valid.eq(i.valid),
                o.payload.data.eq(hbeat),
                o.payload.keep.eq(full),
                o.payload.last.eq(ends),
                o.payload.error.eq(ends & i.payload.error),
                o.payload.meta.eq(rest),
                i.ready.eq(o.ready & ends),
            ]
            with m.If(i.valid & o.ready):
                m.d.sync += idx.eq(Mux(ends, 0, idx + 1))
        with m.Else():
            ends = i.payload.last & ~spill
            m.d.comb += [
                o.valid.eq(i.valid),
                o.payload.data.eq(shifted[:W]),
                o.payload.keep.eq(ext_keep[:B]),
                o.payload.last.eq(ends),
                o.payload.error.eq(ends & i.payload.error),
                o.payload.meta.eq(rest),
                i.ready.eq(o.ready),
            ]
            with m.If(i.valid & o.ready):
                m.d.sync += [carry.eq(shifted[W:]), first.eq(i.payload.last)]
                with m.If(i.payload.last):
                    m.d.sync += idx.eq(0)
                    with m.If(spill):
                        m.d.sync += [flush_keep.eq(ext_keep[B:]), flush_error.eq(i.payload.error),
                                     flush_meta.eq(rest)]
        return m
