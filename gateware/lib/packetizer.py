from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.wire.headers import Header

__all__ = ["Packetizer"]


def _meta_without(meta, name):
    if meta is None or name not in meta.members:
        raise ValueError(f"input metadata must have a field {name!r} holding the header")
    members = dict(meta.members)
    layout = members.pop(name)
    return data.StructLayout(members), layout


class Packetizer(wiring.Component):
    """Header insertion: put a fixed ``header`` in front of each packet.

    The header to insert is taken from ``i.meta.<header.name>`` (a view of ``header.layout``);
    the other metadata fields pass to ``o.meta``.

    Parameters
    ----------
    header : :class:`~rocegen.wire.headers.Header`
        Any length; it need not be a multiple of the beat width.
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout
        Metadata of the input stream; must contain the header field.

    Behaviour
    ---------
    * Throughput: one output beat per cycle, sustained across back-to-back packets; the output
      has ``ceil((H + len) / (W/8))`` beats per packet and no idle beat between packets as long as
      the input keeps up.
    * Latency: zero cycles (combinational from ``i`` to ``o``). Header beats are emitted while the
      first payload beat waits at the input (its metadata supplies the header); payload bytes are
      shifted by ``H mod (W/8)`` lanes, the carried-over lanes held in a register. When the last
      input beat's bytes do not fit, one extra output beat follows, during which the input is
      held.
    * Backpressure: ``i.ready`` follows ``o.ready`` combinationally (never high while header or
      extra beats are emitted).
    * An empty packet (one beat, ``keep == 0``) becomes the header alone.
    * ``error`` of the last input beat is carried to the last output beat.
    """

    def __init__(self, header, width, meta):
        if not isinstance(header, Header):
            raise TypeError(f"header must be a Header, not {header!r}")
        check_width(width)
        self.header = header
        self.width = width
        self.meta_in = meta
        self.meta_out, hdr_layout = _meta_without(meta, header.name)
        if hdr_layout != header.layout:
            raise ValueError(f"metadata field {header.name!r} does not have the layout of {header!r}")
        super().__init__({
            "i": In(PacketSignature(width, self.meta_in)),
            "o": Out(PacketSignature(width, self.meta_out)),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        H = self.header.length
        q, r = divmod(H, B)
        i, o = self.i, self.o

        hdr = Signal(8 * H)
        m.d.comb += hdr.eq(self.header.to_lanes(getattr(i.payload.meta, self.header.name)))
        rest = Signal(self.meta_out)
        for name in self.meta_out.members:
            m.d.comb += getattr(rest, name).eq(getattr(i.payload.meta, name))

        idx = Signal(range(q + 1))         # header beats emitted for the current packet
        full = Const((1 << B) - 1, B)

        def header_beat():
            beats = [hdr[8 * B * k: 8 * B * (k + 1)] for k in range(q)]
            if q == 1:
                return beats[0]
            sel = Signal(8 * B)
            with m.Switch(idx):
                for k, beat in enumerate(beats):
                    with m.Case(k):
                        m.d.comb += sel.eq(beat)
            return sel

        if r:
            carry = Signal(8 * r)           # input lanes B-r..B-1 of the previous beat
            carry_keep = Signal(r)
            first = Signal(init=1)          # next body beat is the packet's first
            flush = Signal()                # carry holds a packet's final bytes
            flush_error = Signal()
            flush_meta = Signal(self.meta_out)
            cut = B - r                     # input lanes that fit after the carried ones

            with m.If(flush):
                m.d.comb += [
                    o.valid.eq(1),
                    o.payload.data.eq(carry),
                    o.payload.keep.eq(carry_keep),
                    o.payload.last.eq(1),
                    o.payload.error.eq(flush_error),
                    o.payload.meta.eq(flush_meta),
                ]
                with m.If(o.ready):
                    m.d.sync += flush.eq(0)
            with m.Elif(idx < q):
                m.d.comb += [
                    o.valid.eq(i.valid),
                    o.payload.data.eq(header_beat()),
                    o.payload.keep.eq(full),
                    o.payload.meta.eq(rest),
                ]
                with m.If(i.valid & o.ready):
                    m.d.sync += idx.eq(idx + 1)
            with m.Else():
                low = Mux(first, hdr[8 * B * q:], carry)
                low_keep = Mux(first, Const((1 << r) - 1, r), carry_keep)
                ends = i.payload.last & ~i.payload.keep[cut]
                m.d.comb += [
                    o.valid.eq(i.valid),
                    o.payload.data.eq(Cat(low, i.payload.data[:8 * cut])),
                    o.payload.keep.eq(Cat(low_keep, i.payload.keep[:cut])),
                    o.payload.last.eq(ends),
                    o.payload.error.eq(ends & i.payload.error),
                    o.payload.meta.eq(rest),
                    i.ready.eq(o.ready),
                ]
                with m.If(i.valid & o.ready):
                    m.d.sync += [
                        carry.eq(i.payload.data[8 * cut:]),
                        carry_keep.eq(i.payload.keep[cut:]),
                        first.eq(i.payload.last),
                    ]
                    with m.If(i.payload.last):
                        m.d.sync += idx.eq(0)
                        with m.If(i.payload.keep[cut]):
                            m.d.sync += [flush.eq(1), flush_error.eq(i.payload.error),
                                         flush_meta.eq(rest)]
        else:
            with m.If(idx < q):
                is_final = idx == q - 1
                empty = i.payload.last & ~i.payload.keep[0]
                m.d.comb += [
                    o.valid.eq(i.valid),
                    o.payload.data.eq(header_beat()),
                    o.payload.keep.eq(full),
                    o.payload.last.eq(is_final & empty),
                    o.payload.error.eq(is_final & empty & i.payload.error),
                    o.payload.meta.eq(rest),
                    i.ready.eq(o.ready & is_final & empty),
                ]
                with m.If(i.valid & o.ready):
                    m.d.sync += idx.eq(Mux(is_final & empty, 0, idx + 1))
            with m.Else():
                m.d.comb += [
                    o.valid.eq(i.valid),
                    o.payload.data.eq(i.payload.data),
                    o.payload.keep.eq(i.payload.keep),
                    o.payload.last.eq(i.payload.last),
                    o.payload.error.eq(i.payload.error),
                    o.payload.meta.eq(rest),
                    i.ready.eq(o.ready),
                ]
                with m.If(i.valid & o.ready & i.payload.last):
                    m.d.sync += idx.eq(0)
        return m
