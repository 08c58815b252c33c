"""Which IB CM connections to close: the user's disconnects, the QPs that failed and those that
went quiet."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import QPN_BASE, check_num_qps
from rocegen.gateware.roce.requester.sched_tree import lowest_one

__all__ = ["IbCmCloser"]


class IbCmCloser(wiring.Component):
    """The QPs whose IB CM connections are to be closed (with a DREQ, by
    :class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive`'s ``disconnect``): those the
    user's logic names, those of the IB CM that failed (retries or RNR retries exhausted,
    an error NAK: the peer is gone or broken) and those that went quiet
    (:class:`~rocegen.gateware.roce.ibcm.ibcm_idle.IbCmIdle`: the peer closed its side and its
    DREQ was lost), so that a host that vanished does not keep its QP for ever.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256), numbered from 256.

    Ports
    -----
    user : In(stream.Signature(8))
        A QP index (QPN - 256) whose connection the user's logic closes. Taken when ``o`` is
        free and no failed QP waits (or one was offered last); an index of no QP is taken and
        dropped.
    errored : In(num_qps)
        Bit k: QP k is in the error state (the retry engine's ``errored``).
    idle : In(num_qps)
        Bit k high for a cycle: QP k went quiet (``IbCmIdle``'s ``expired``).
    held : In(num_qps)
        Bit k: QP k is an open connection of the IB CM
        (:class:`~rocegen.gateware.roce.ibcm.ibcm_qps.IbCmQps`'s ``live``: not one it closed,
        whose error state is its own doing).
    o : Out(stream.Signature(24))
        The QP numbers to close, one at a time (a register, held until ``o.ready``).
    idle_closes : Out(1)
        High for one cycle (a register), one cycle after a QP is offered on ``o`` because it
        went quiet (and not also because it failed).

    Behaviour
    ---------
    A QP of ``held`` whose ``errored`` bit rises or whose ``idle`` bit is high is noted (a
    flip-flop per QP, and one more per QP for why) and offered on ``o`` once, the lowest index
    first; a note of a QP no longer in ``held`` is dropped.
    The user's requests and the noted QPs take turns when both wait. Latency (``o`` free): a
    request is offered on ``o`` in the cycle after it is taken, a QP whose ``errored`` bit
    rises or whose ``idle`` bit pulses two cycles after the bit. Backpressure: ``o.ready`` low
    holds the offer, then ``user`` (its ``ready`` low) and the notes (kept).
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "user": In(stream.Signature(8)),
            "errored": In(num_qps),
            "idle": In(num_qps),
            "held": In(num_qps),
            "o": Out(stream.Signature(24)),
            "idle_closes": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        prev = Signal(n)
        noted = Signal(n)
        failed = Signal(n)          # noted because the QP failed (not only because it was quiet)
        last_user = Signal()
        m.d.sync += prev.eq(self.errored)
        found, idx = lowest_one(m, noted, "close")
        free = ~self.o.valid | self.o.ready
        take_user = free & self.user.valid & (~found | ~last_user)
        take_note = free & found & ~take_user
        m.d.comb += self.user.ready.eq(take_user)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(take_user):
            m.d.sync += [self.o.valid.eq(self.user.payload < n), last_user.eq(1),
                         self.o.payload.eq(QPN_BASE + self.user.payload)]
        with m.Elif(take_note):
            m.d.sync += [self.o.valid.eq(1), last_user.eq(0),
                         self.o.payload.eq(QPN_BASE + idx)]
        taken = Signal(n)
        m.d.comb += taken.eq(Mux(take_note, 1 << idx, 0))
        rose = Signal(n)
        m.d.comb += rose.eq(self.errored & ~prev)
        m.d.sync += [noted.eq(((noted & ~taken) | rose | self.idle) & self.held),
                     failed.eq(((failed & ~taken) | rose) & self.held)]
        # why a note was taken, looked up a cycle later from registers (off the offer's path)
        was_failed, took, took_idx = Signal(n), Signal(), Signal.like(idx)
        m.d.sync += [was_failed.eq(failed), took.eq(take_note), took_idx.eq(idx),
                     self.idle_closes.eq(took & ~was_failed.bit_select(took_idx, 1))]
        return m
