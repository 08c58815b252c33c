"""Connection management: the QP table, the connection manager and the control of the QP
table's writes."""

from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm import ConnectionManager
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.layouts import QP_CONTEXT
from rocegen.gateware.roce.requester.qp_control import QpControl
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE, QpTable

__all__ = ["ConnectionFeature"]


class ConnectionFeature(Feature):
    """The QPs: :class:`~rocegen.gateware.roce.requester.qp_table.QpTable`,
    :class:`~rocegen.gateware.roce.cm.cm.ConnectionManager` and
    :class:`~rocegen.gateware.roce.requester.qp_control.QpControl`.

    Parameters
    ----------
    cfg : EndpointConfig
        ``num_qps``, ``cm_port``, ``cm_allow_net``, ``pmtu``, ``cm_timeout``, ``cm_retry``,
        ``cm_rnr_retry``, ``qp_info`` and, for the ports and the connection manager's extension
        bytes, ``responder``, ``pattern_sink``, ``reads``, ``max_rd_atomic``, ``rd_depth``.

    Ports
    -----
    ``qp_ctl`` / ``qp_psn``: QP table writes (contexts, initial PSNs), beside the connection
    managers'; ``qp_open``: QPs the connection managers have open (with ``rdma_cm_ports``,
    the IB CM's too). With ``qp_info``:
    ``qp_info_qp`` -> ``qp_info_context`` / ``qp_info_psn``, one cycle after the address.

    Behaviour
    ---------
    The connection manager serves UDP ``cm_port``; its writes and the user's reach the QP table
    and the retry engine through the QP control (which refuses a write while a QP is busy).
    The table is read by the scheduler and the receive path (and, with the responder and READs,
    by their blocks).
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        reads = {"reads": True, "max_rd_atomic": cfg.max_rd_atomic,
                 "rd_depth": cfg.rd_depth} if cfg.reads else {}
        self.cm = ConnectionManager(cfg.width, cfg.num_qps, allow_net=cfg.cm_allow_net,
                                    default_pmtu=cfg.pmtu, default_timeout=cfg.cm_timeout,
                                    default_retry=cfg.cm_retry,
                                    default_rnr_retry=cfg.cm_rnr_retry, port=cfg.cm_port,
                                    regions=cfg.responder, query=cfg.pattern_sink,
                                    atomics=cfg.atomics if cfg.responder else None, **reads)
        self.qps = QpTable(cfg.num_qps, info_port=cfg.qp_info, resp_port=cfg.responder,
                           rkey_port=cfg.rping_port is not None,
                           **({"read_port": True, "resend_port": True} if cfg.reads else {}))
        self.ctl = None

    def members(self):
        n = self.cfg.num_qps
        members = {"qp_ctl": In(stream.Signature(CONTEXT_WRITE)),
                   "qp_psn": In(stream.Signature(PSN_WRITE)), "qp_open": Out(n)}
        if self.cfg.qp_info:
            members.update({"qp_info_qp": In(range(n)), "qp_info_context": Out(QP_CONTEXT),
                            "qp_info_psn": Out(24)})
        return members

    def connect(self, m, ep):
        """The QP control between the writers and the table, the connection manager on the
        stack's UDP port 1, the table's read ports to the scheduler and the receive path."""
        f = ep.features
        qps, st = self.qps, f.network.stack
        sched, rx, retry = f.requester.sched, f.requester.rx, f.requester.retry
        cm = m.submodules.cm = self.cm
        # (to the table and the retry engine, the table's write enable from registers only)
        ctl = self.ctl = m.submodules.qp_control = QpControl(
            self.cfg.num_qps, ibcm=bool(self.cfg.rdma_cm_ports))
        m.d.comb += [ctl.errored.eq(retry.errored), ctl.busy.eq(sched.busy)]
        wiring.connect(m, wiring.flipped(ep.qp_ctl), ctl.user_ctl)
        wiring.connect(m, wiring.flipped(ep.qp_psn), ctl.user_psn)
        wiring.connect(m, cm.qp_ctl, ctl.cm_ctl)
        wiring.connect(m, cm.qp_psn, ctl.cm_psn)
        wiring.connect(m, ctl.table_ctl, qps.ctl)
        wiring.connect(m, ctl.table_psn, qps.ctl_psn)
        wiring.connect(m, ctl.engine_ctl, retry.ctx_set)
        wiring.connect(m, ctl.engine_psn, retry.psn_set)
        # (the QPs of the IB CM too, which takes its own from the same pool)
        held = f.ibcm.qps.held if f.ibcm is not None else 0
        m.d.comb += [cm.local_ip.eq(ep.local_ip), ep.qp_open.eq(cm.qp_open | held)]
        wiring.connect(m, st.udp_rx[1], cm.i)
        wiring.connect(m, cm.o, st.udp_tx[1])
        m.d.comb += [
            qps.rd_qp.eq(sched.rd_qp),
            sched.rd_context.eq(qps.rd_context),
            sched.rd_psn.eq(qps.rd_psn),
            qps.lookup_qpn.eq(rx.lookup_qpn),
            rx.lookup_index.eq(qps.lookup_index),
            rx.lookup_valid.eq(qps.lookup_valid),
            qps.rx_qp.eq(rx.rx_qp),
            rx.rx_context.eq(qps.rx_context),
        ]
        wiring.connect(m, sched.psn_w, qps.psn_w)
        if qps.info_port:
            m.d.comb += [qps.info_qp.eq(ep.qp_info_qp), ep.qp_info_context.eq(qps.info_context),
                         ep.qp_info_psn.eq(qps.info_psn)]
