from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.qp_counters import QpCounters
from rocegen.gateware.roce.requester.retry import QP_COUNTERS as RETRY_QP_COUNTERS

__all__ = ["EndpointQpStats", "RX_QP_COUNTERS", "QP_COUNTERS"]

#: Per-QP counters of the receive path: acknowledgements dropped because the QP was neither RTR
#: nor RTS, or came from another IPv4 source than the QP's peer; CNPs. (Drops for a reason found
#: before the QP is known -- length, ICRC, opcode, P_Key, unknown DestQP -- are counted only
#: globally, in :data:`~rocegen.gateware.roce.endpoint.endpoint_stats.ROCE_STATS`.)
RX_QP_COUNTERS = ("rx_drop_state", "rx_drop_peer", "cnps")
#: Every per-QP counter, in ``qp_stats_sel`` order: the retry engine's, then the receive path's.
QP_COUNTERS = RETRY_QP_COUNTERS + RX_QP_COUNTERS


class EndpointQpStats(wiring.Component):
    """The endpoint's per-QP counters: the receive path's (:data:`RX_QP_COUNTERS`, counted
    here) read in one address space with the retry engine's (:data:`QP_COUNTERS`).

    Parameters
    ----------
    num_qps : int
        QPs (1..256).

    Ports
    -----
    qp : In(range(num_qps))
        The QP the receive path's events of this cycle belong to (from a register).
    drop_state, drop_peer, cnp : In(1)
        The receive path's events: each high bit counts one for ``qp``.
    rd_qp / rd_sel / rd_data : In(range(num_qps)) / In(range(len(QP_COUNTERS))) / Out(32)
        Read of counter ``QP_COUNTERS[rd_sel]`` of QP ``rd_qp``, one cycle after the address.
    retry_qp / retry_sel / retry_data : Out / Out / In(32)
        The retry engine's per-QP counter read port (``retry_qp`` and ``retry_sel`` follow
        ``rd_qp`` and ``rd_sel`` combinationally; ``retry_data`` one cycle after the address).

    Behaviour: the receive path's counters are a :class:`~rocegen.gateware.roce.qp_counters.
    QpCounters` bank (32 bits, wrapping; an event in cycle t is read from cycle t + 2 on); the
    answer is picked by the select registered beside the two read ports' addresses. No
    backpressure: every event counts.
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "qp": In(range(num_qps)),
            "drop_state": In(1),
            "drop_peer": In(1),
            "cnp": In(1),
            "rd_qp": In(range(num_qps)),
            "rd_sel": In(range(len(QP_COUNTERS))),
            "rd_data": Out(32),
            "retry_qp": Out(range(num_qps)),
            "retry_sel": Out(range(len(RETRY_QP_COUNTERS))),
            "retry_data": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        rxc = m.submodules.rx_qp_counters = QpCounters(self.num_qps, RX_QP_COUNTERS)
        n_retry = len(RETRY_QP_COUNTERS)
        m.d.comb += [
            rxc.qp.eq(self.qp),
            rxc.inc.eq(Cat(self.drop_state, self.drop_peer, self.cnp)),
            self.retry_qp.eq(self.rd_qp), rxc.rd_qp.eq(self.rd_qp),
            self.retry_sel.eq(self.rd_sel),
            rxc.rd_sel.eq(self.rd_sel - n_retry),
        ]
        # both read ports answer one cycle after the address: pick by the registered select
        from_rx = Signal()
        m.d.sync += from_rx.eq(self.rd_sel >= n_retry)
        m.d.comb += self.rd_data.eq(Mux(from_rx, rxc.rd_data, self.retry_data))
        return m
