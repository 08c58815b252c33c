"""When the READ requester's table forgets a QP's outstanding READs."""

from amaranth.hdl import Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import SCHED_EVENT, SchedKind, check_num_qps

__all__ = ["ReadFlush"]


class ReadFlush(wiring.Component):
    """The QPs whose outstanding READs are void, one at a time, for the
    :class:`~rocegen.gateware.roce.read.read_track.ReadTrack` ``flush`` port: a QP that enters the
    error state (its requests are flushed, so are its READs) and a QP set up again (the retry
    engine's RESET: the old connection's READs will never be answered to the new one).

    Parameters
    ----------
    num_qps : int
        QPs (1..256).

    Ports
    -----
    errored : In(num_qps)
        The retry engine's error states: a rising bit asks for a flush of that QP.
    sched : In(stream.Signature(SCHED_EVENT, always_ready=True))
        The retry engine's events to the scheduler: a RESET asks for a flush of its QP.
    o : Out(stream.Signature(8))
        QP indices to flush, lowest first.

    Behaviour
    ---------
    One pending bit per QP, set by a request in cycle t and offered from cycle t+1; a request
    for a QP whose flush is already pending merges into it (the table forgets at most once
    what it forgets anyway). A bit is cleared in the cycle ``o`` takes its QP, unless a new
    request for it comes in that same cycle. Backpressure: ``o.ready`` low holds the offer
    (the ReadTrack takes a flush in every cycle but the one after a lookup); the requests are
    never held.
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "errored": In(num_qps),
            "sched": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "o": Out(stream.Signature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        prev = Signal(n)
        pend = Signal(n)
        m.d.sync += prev.eq(self.errored)
        ev = self.sched
        reset = Signal(n)
        for q in range(n):
            m.d.comb += reset[q].eq(ev.valid & (ev.payload.kind == SchedKind.RESET) &
                                    (ev.payload.qp == q))
        asked = (self.errored & ~prev) | reset
        pick = Signal(8)
        for q in reversed(range(n)):
            with m.If(pend[q]):
                m.d.comb += pick.eq(q)
        taken = Signal(n)
        with m.If(self.o.valid & self.o.ready):
            m.d.comb += taken.eq(Const(1, n) << pick)
        m.d.comb += [self.o.valid.eq(pend.any()), self.o.payload.eq(pick)]
        m.d.sync += pend.eq((pend & ~taken) | asked)
        return m
