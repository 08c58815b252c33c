from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width

__all__ = ["PacketGate"]


class PacketGate(wiring.Component):
    """Pass or drop whole packets by a verdict that arrives separately, one per packet.

    Checks whose result is only known after a packet's last byte (a checksum, the ICRC) run
    beside a store-and-forward FIFO; their verdicts queue on ``verdict`` (a stream of one bit per
    packet, ``1`` = good) in packet order, and this gate, placed at the FIFO output, holds each
    packet's first beat until its verdict is there, then passes the packet or consumes and
    discards it (pulsing ``dropped``).

    Latency 0 (combinational from ``i`` and ``verdict`` to ``o``). Backpressure: ``i.ready``
    follows ``o.ready`` for a passed packet and is high for a dropped one. ``verdict`` is
    consumed with the packet's last beat.
    """

    def __init__(self, width, meta=None):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(PacketSignature(width, meta)),
            "verdict": In(stream.Signature(1)),
            "o": Out(PacketSignature(width, meta)),
            "dropped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        i, o, v = self.i, self.o, self.verdict
        m.d.comb += o.payload.eq(i.payload)
        go = Signal()
        m.d.comb += go.eq(i.valid & v.valid)
        with m.If(v.payload):
            m.d.comb += [o.valid.eq(go), i.ready.eq(o.ready & v.valid)]
        with m.Else():
            m.d.comb += i.ready.eq(v.valid)
        m.d.comb += v.ready.eq(i.valid & i.ready & i.payload.last)
        m.d.comb += self.dropped.eq(v.valid & ~v.payload & i.valid & i.payload.last)
        return m
