from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import COMPLETION, WrSource

__all__ = ["CplDispatch"]


class CplDispatch(wiring.Component):
    """Completions back to whoever posted the work request, by its ``src``.

    Ports
    -----
    i : In(stream.Signature(COMPLETION))
        Every completion (the completion tracker's).
    user, front, gen : Out(stream.Signature(COMPLETION))
        Those of :attr:`WrSource.USER`, :attr:`WrSource.STREAM` and :attr:`WrSource.GENERATOR`.

    Behaviour: combinational, no latency. Each output carries ``i.payload`` and is valid while
    ``i`` offers a completion of its source; ``i.ready`` is that output's ``ready``
    (backpressure from one destination holds every later completion). A completion of no known
    source (never produced) is drained: ``i.ready`` high, no output valid.
    """

    def __init__(self):
        super().__init__({
            "i": In(stream.Signature(COMPLETION)),
            "user": Out(stream.Signature(COMPLETION)),
            "front": Out(stream.Signature(COMPLETION)),
            "gen": Out(stream.Signature(COMPLETION)),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.i
        src = c.payload.src
        dests = ((self.user, WrSource.USER), (self.front, WrSource.STREAM),
                 (self.gen, WrSource.GENERATOR))
        for port, source in dests:
            m.d.comb += [port.payload.eq(c.payload), port.valid.eq(c.valid & (src == source))]
        with m.Switch(src):
            for port, source in dests:
                with m.Case(source):
                    m.d.comb += c.ready.eq(port.ready)
            with m.Default():                       # no such source: never produced; drain
                m.d.comb += c.ready.eq(1)
        return m
