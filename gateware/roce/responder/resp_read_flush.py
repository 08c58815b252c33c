"""The flushes of the responder's READ queues: set-ups, errors and closes, one a cycle."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.requester.sched_tree import lowest_one

__all__ = ["RespReadFlush"]


class RespReadFlush(wiring.Component):
    """Merges the three reasons to flush a QP's READ queue into the one flush a cycle that
    :class:`~rocegen.gateware.roce.responder.resp_read.RespRead` and
    :class:`~rocegen.gateware.roce.responder.resp_read_order.RespReadOrder` take.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).

    Ports
    -----
    setup : In(stream.Signature(8, always_ready=True))
        A QP set up again (``psn_set``): flushed in the same cycle.
    error : In(stream.Signature(8, always_ready=True))
        A QP put in the error state by the responder (the engine's ``rq_flush``, with its
        fatal NAK).
    close : In(stream.Signature(8, always_ready=True))
        A QP's context written with a state in which the responder takes no request (neither
        RTR nor RTS: closed, reset, in error).
    o : Out(stream.Signature(8, always_ready=True))
        The QPs to flush.

    Behaviour
    ---------
    ``setup`` goes straight to ``o`` (a READ pushed for the new connection in the next cycle
    must be kept). ``error`` and ``close`` set a pending bit of their QP (``num_qps``
    registers), and the lowest pending QP is flushed in a cycle without ``setup``, from the
    cycle after; a ``setup`` of a pending QP clears its bit (its own flush covers it). No
    READ of a QP in error or closed is pushed meanwhile (the engine drops their requests), so
    the delay changes nothing. Latency: ``error`` or ``close`` in cycle t, ``o`` in cycle t + 1
    at the earliest (later by a cycle for each ``setup`` and each lower pending QP).
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        pulse = stream.Signature(unsigned(8), always_ready=True)
        super().__init__({"setup": In(pulse), "error": In(pulse), "close": In(pulse),
                          "o": Out(pulse)})

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        pend = Signal(n)
        found, pick = lowest_one(m, pend, "flush_pick")
        issue = found & ~self.setup.valid
        m.d.comb += [self.o.valid.eq(self.setup.valid | found),
                     self.o.payload.eq(self.setup.payload)]
        with m.If(~self.setup.valid):
            m.d.comb += self.o.payload.eq(pick)
        nxt = Signal(n)
        m.d.comb += nxt.eq(pend)
        for k in range(n):
            with m.If(issue & (pick == k)):
                m.d.comb += nxt[k].eq(0)
            for port in (self.error, self.close):
                with m.If(port.valid & (port.payload == k)):
                    m.d.comb += nxt[k].eq(1)
            with m.If(self.setup.valid & (self.setup.payload == k)):
                m.d.comb += nxt[k].eq(0)
        m.d.sync += pend.eq(nxt)
        return m
