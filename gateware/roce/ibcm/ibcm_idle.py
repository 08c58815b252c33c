"""Which IB CM connections of the gateware services went quiet: no request from the peer for a
whole window."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_defs import int_param
from rocegen.gateware.roce.layouts import QPN_BASE, check_num_qps

__all__ = ["IbCmIdle"]

#: The longest window, in cycles (an hour at 300 MHz).
MAX_WINDOW = 1 << 40


class IbCmIdle(wiring.Component):
    """The QPs whose peers stopped sending: a connection on which no request arrived for a whole
    window is reported, so that a host that closed its side without its DREQ reaching us (rping
    and rdma_client destroy their ids right after ``rdma_disconnect``, which stops Linux from
    sending the DREQ again) does not keep its QP for ever.
    :class:`rocegen.sim.models.ibcm.idle.IdleWatch` is the reference model.

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256), numbered from 256.
    window : int
        The window, in cycles (1..2^40).

    Ports
    -----
    seen : In(stream.Signature(24, always_ready=True))
        The QP number of each request that passed the receive checks (the receive path's
        ``data_seen``); a number of no QP of ours is ignored.
    watched : In(num_qps)
        Bit k: QP k is a connection to watch (open, and a gateware service's that the peer asked
        for).
    expired : Out(num_qps)
        Bit k high for one cycle (a register): QP k was watched through a whole window and no
        request of it was seen in the window.

    Behaviour
    ---------
    A counter divides time into windows of ``window`` cycles. A flip-flop per QP, set for every
    watched QP at a window's start, is cleared by a request seen on the QP and while the QP is
    not watched; the QPs whose flip-flop is still set at the window's end are reported on
    ``expired`` in the cycle after. So a QP is reported after between ``window`` and
    ``2 * window`` cycles without a request (watched all along), never sooner; a request in the
    window's last cycle counts for that window. Latency: ``expired`` one cycle after the end of
    a window. No backpressure: the report is a pulse.
    """

    def __init__(self, num_qps, *, window):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        self.window = int_param("window", window, 1, MAX_WINDOW)
        super().__init__({
            "seen": In(stream.Signature(24, always_ready=True)),
            "watched": In(num_qps),
            "expired": Out(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        count = Signal(range(self.window), init=self.window - 1)
        end = Signal()
        m.d.comb += end.eq(count == 0)
        m.d.sync += count.eq(count - 1)
        with m.If(end):
            m.d.sync += count.eq(self.window - 1)
        qpn = self.seen.payload
        hit = Signal(n)
        with m.If(self.seen.valid & (qpn >= QPN_BASE) & (qpn < QPN_BASE + n)):
            m.d.comb += hit.eq(1 << (qpn - QPN_BASE)[:max(1, (n - 1).bit_length())])
        quiet = Signal(n)
        still = Signal(n)
        m.d.comb += still.eq(quiet & self.watched & ~hit)
        m.d.sync += [quiet.eq(still), self.expired.eq(0)]
        with m.If(end):
            m.d.sync += [quiet.eq(self.watched), self.expired.eq(still)]
        return m
