from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width

__all__ = ["MapMeta"]


class MapMeta(wiring.Component):
    """Rewrite the metadata of a packet stream; data, keep, last and error pass unchanged.

    ``fn(m, src, dst)`` adds combinational statements to module ``m`` that drive every field of
    the view ``dst`` (layout ``meta_out``) from the view ``src`` (layout ``meta_in``). Since
    metadata is constant over a packet, so is the result.

    Latency 0, no state; ``i.ready`` is ``o.ready``.
    """

    def __init__(self, width, meta_in, meta_out, fn):
        check_width(width)
        self.fn = fn
        super().__init__({
            "i": In(PacketSignature(width, meta_in)),
            "o": Out(PacketSignature(width, meta_out)),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        m.d.comb += [
            o.payload.data.eq(i.payload.data), o.payload.keep.eq(i.payload.keep),
            o.payload.last.eq(i.payload.last), o.payload.error.eq(i.payload.error),
            o.valid.eq(i.valid), i.ready.eq(o.ready),
        ]
        self.fn(m, i.payload.meta, o.payload.meta)
        return m
