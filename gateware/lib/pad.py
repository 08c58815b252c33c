from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width

__all__ = ["Pad"]


class Pad(wiring.Component):
    """Zero-pad every packet to at least ``min_len`` bytes (Ethernet's 60-byte minimum before
    the FCS).

    Lanes beyond a short packet's last byte are driven to zero and marked in ``keep``; when the
    padding needs more beats than the packet had, zero beats follow (the input is held while they
    leave). Longer packets pass unchanged.

    Latency 0 (combinational). Backpressure: ``i.ready`` follows ``o.ready``, low while extra
    padding beats leave. Byte order: lane order, unchanged.
    """

    def __init__(self, width, min_len, meta=None):
        check_width(width)
        if not isinstance(min_len, int) or min_len < 1:
            raise ValueError(f"min_len must be a positive number of bytes, not {min_len!r}")
        self.width = width
        self.min_len = min_len
        super().__init__({
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        i, o = self.i, self.o
        nbeats = -(-self.min_len // B)          # beats a minimum-length packet spans
        seen = Signal(range(nbeats + 1))        # full beats passed in this packet (saturating)
        extra = Signal(range(nbeats + 1))       # padding beats still to send; 0 = none
        held_meta = Signal.like(i.payload.meta)
        held_error = Signal()

        def need_after(beats):                  # bytes still needed after `beats` full beats
            return max(0, self.min_len - beats * B)

        need = Signal(range(self.min_len + 1))
        with m.Switch(seen):
            for k in range(nbeats + 1):
                with m.Case(k):
                    m.d.comb += need.eq(need_after(k))

        lane_need = Cat(*(need > lane for lane in range(B)))      # lanes required in this beat
        byte_mask = Cat(*(Mux(i.payload.keep[lane], Const(0xFF, 8), 0) for lane in range(B)))

        with m.If(extra != 0):
            # padding beats after the input packet
            rem = Signal(range(self.min_len + 1))
            with m.Switch(extra):
                for k in range(1, nbeats + 1):
                    with m.Case(k):
                        m.d.comb += rem.eq(need_after(nbeats - k))
            last = rem <= B
            m.d.comb += [
                o.valid.eq(1),
                o.payload.keep.eq(Cat(*(rem > lane for lane in range(B)))),
                o.payload.last.eq(last),
                o.payload.error.eq(last & held_error),
                o.payload.meta.eq(held_meta),
            ]
            with m.If(o.ready):
                m.d.sync += extra.eq(Mux(last, 0, extra - 1))
        with m.Else():
            short = i.payload.last & (need > B)
            m.d.comb += [
                o.valid.eq(i.valid),
                o.payload.data.eq(i.payload.data & byte_mask),
                o.payload.keep.eq(Mux(i.payload.last, i.payload.keep | lane_need, i.payload.keep)),
                o.payload.last.eq(i.payload.last & ~short),
                o.payload.error.eq(i.payload.error & ~short),
                o.payload.meta.eq(i.payload.meta),
                i.ready.eq(o.ready),
            ]
            with m.If(i.valid & o.ready):
                with m.If(i.payload.last):
                    m.d.sync += seen.eq(0)
                    with m.If(short):
                        # the error flag moves to the last padding beat
                        m.d.sync += [extra.eq(nbeats - seen - 1), held_meta.eq(i.payload.meta),
                                     held_error.eq(i.payload.error)]
                with m.Elif(seen != nbeats):
                    m.d.sync += seen.eq(seen + 1)
        return m
