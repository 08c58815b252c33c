"""Hold frames back while the link partner pauses us, never cutting one."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width

__all__ = ["PauseGate"]


class PauseGate(wiring.Component):
    """A packet stream ``i`` -> ``o`` that starts no new frame while ``pause`` is high.

    Parameters
    ----------
    width : int
        Data width W (64..512, power of two).
    meta : StructLayout or None
        Metadata of the frames, passed through.

    Ports
    -----
    ``i`` : In(PacketSignature(width, meta)); ``o`` : Out(PacketSignature(width, meta))
        The frames, unchanged (byte order and every field as they come).
    ``pause`` : In(1)
        A level, e.g. one bit of :class:`~rocegen.gateware.mac.pfc_rx.PauseRx`'s ``paused``.

    Behaviour
    ---------
    * The decision is registered: a frame's first beat may be offered on ``o`` in a cycle only
      if ``pause`` was low in the cycle before (gate reaction: 1 cycle). A frame whose first
      beat has been offered goes on to its last beat whatever ``pause`` does, so ``o.valid``
      never falls before its beat moves.
    * Data path: combinational (``o.payload`` is ``i.payload``), latency 0.
    * Backpressure: ``i.ready`` follows ``o.ready`` while frames may pass; low while a frame
      is held back.
    """

    def __init__(self, width, meta=None):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)),
            "pause": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        held = Signal()         # pause as it was in the cycle before
        busy = Signal()         # a frame has been offered on o and has not ended
        go = Signal()
        m.d.sync += held.eq(self.pause)
        m.d.comb += [
            go.eq(busy | ~held),
            o.payload.eq(i.payload),
            o.valid.eq(i.valid & go),
            i.ready.eq(o.ready & go),
        ]
        with m.If(o.valid & o.ready & o.payload.last):
            m.d.sync += busy.eq(0)
        with m.Elif(o.valid):
            m.d.sync += busy.eq(1)
        return m
