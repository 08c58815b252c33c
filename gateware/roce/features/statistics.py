"""The endpoint's counters: the stack's and the RoCE layers' in one address space, the per-QP
ones in another."""

from amaranth.hdl import Const
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm import COUNTERS as CM_COUNTERS
from rocegen.gateware.roce.endpoint.endpoint_qp_stats import QP_COUNTERS, EndpointQpStats
from rocegen.gateware.roce.endpoint.endpoint_stats import PULSE_COUNTERS, STATS, EndpointStats
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.ibcm.ibcm_service import COUNTERS as IBCM_COUNTERS
from rocegen.gateware.roce.layouts import CplStatus, WrSource
from rocegen.gateware.roce.read.read_ingress import READ_INGRESS_COUNTERS
from rocegen.gateware.roce.read.read_layouts import READ_COUNTERS
from rocegen.gateware.roce.responder.responder import ATOMIC_COUNTERS, RESP_COUNTERS
from rocegen.gateware.roce.services.rping_client import CLIENT_COUNTERS
from rocegen.gateware.roce.services.rping_server import COUNTERS as RPING_COUNTERS
from rocegen.gateware.roce.services.send_echo import COUNTERS as ECHO_COUNTERS

__all__ = ["StatisticsFeature"]

_ZERO = Const(0, 1)


def _requester_events(f, reads):
    """The requester's, the receive path's, the retry engine's and the connection manager's
    events."""
    req = f.requester
    rx, retry, cm = req.rx, req.retry, f.connection.cm
    port = f.network.stack.udp_rx[0]        # (UDP port 4791's datagrams, as the stack counts)
    c, tx, wr = req.completer.cpl, req.builder.o, req.sched.wr
    tx_packet = tx.valid & tx.ready & tx.payload.last
    if reads:
        # (the requester's packets: the responder's READ responses not counted)
        bi = req.builder.i
        tx_packet = bi.valid & bi.ready & bi.payload.last & \
            (bi.payload.meta.src != WrSource.RESPONDER)
    events = {
        "roce_rx_packets": port.valid & port.ready & port.payload.last,
        "roce_rx_naks": retry.seq_naks | retry.rnr_naks | retry.error_naks,
        "roce_tx_packets": tx_packet,
        "roce_wr_posted": wr.valid & wr.ready,
        "roce_cpl_ok": c.valid & c.ready & (c.payload.status == CplStatus.OK),
        "roce_cpl_error": c.valid & c.ready & (c.payload.status != CplStatus.OK),
        "roce_qp_ctl_rejected": f.connection.qps.rejected, "roce_ignored_acks": retry.ignored,
    }
    for prefix, block, names in (
            ("roce_rx_", rx, ("icrc_bad", "drop_short", "drop_opcode", "drop_qp", "drop_state",
                              "drop_peer", "drop_pkey", "acks", "cnp")),
            ("roce_", retry, ("stale_acks", "seq_naks", "rnr_naks", "error_naks", "timeouts",
                              "rewinds", "qp_errors")),
            ("cm_", cm, CM_COUNTERS)):
        events.update({prefix + name: getattr(block, name) for name in names})
    events["roce_rx_requests"] = rx.requests
    return events


def _feature_events(f):
    """The responder's, the READ requester's, the reaction point's and PFC's events (zero
    without the feature)."""
    resp = f.responder.resp if f.responder else None
    rd = f.read
    events = {}
    for name in RESP_COUNTERS:
        events[f"resp_{name}"] = getattr(resp, name) if resp else _ZERO
    for name in ATOMIC_COUNTERS:
        events[f"resp_{name}"] = getattr(resp, name) if resp and resp.atomics else _ZERO
    for name in READ_COUNTERS:
        events[f"rd_{name}"] = getattr(rd.place, name) if rd else _ZERO
    for name in READ_INGRESS_COUNTERS:
        events[f"rd_{name}"] = getattr(rd.ingress, name) if rd else _ZERO
    events.update({
        "roce_rx_read_responses": f.requester.rx.read_responses if rd else _ZERO,
        "rd_table_overflow": rd.track.overflow if rd else _ZERO,
        "rd_done": rd.place.done.valid if rd else _ZERO,
        "rd_reissues": rd.place.reissue.valid if rd else _ZERO,
        "rd_resend_dropped": rd.resend.dropped if rd else _ZERO,
        "rd_resend_stale": rd.resend.stale if rd else _ZERO,
    })
    rp = f.congestion.rp
    pfc = f.pfc.port if f.pfc else None
    events.update({
        "cc_cnp_dropped": rp.cnp_dropped if rp else _ZERO,
        "pfc_rx_pause": pfc.rx_pause if pfc else _ZERO,
        "pfc_rx_bad": pfc.rx_bad if pfc else _ZERO,
        "pfc_tx_frames": pfc.tx_pfc if pfc else _ZERO,
        "roce_rx_mads": f.requester.rx.mads if f.ibcm else _ZERO,
    })
    events.update({f"ibcm_{name}": getattr(f.ibcm.service, name) if f.ibcm else _ZERO
                   for name in IBCM_COUNTERS})
    rping = f.services.rping if f.services else None
    echo = f.services.echo if f.services else None
    events.update({f"rping_{name}": getattr(rping, name) if rping else _ZERO
                   for name in RPING_COUNTERS})
    events.update({f"echo_{name}": getattr(echo, name) if echo else _ZERO
                   for name in ECHO_COUNTERS})
    idle = f.ibcm is not None and f.ibcm.idle is not None
    events["ibcm_idle_closes"] = f.ibcm.closer.idle_closes if idle else _ZERO
    client = f.services.client if f.services else None
    events.update({f"rping_client_{name}": getattr(client, name) if client else _ZERO
                   for name in CLIENT_COUNTERS})
    return events


class StatisticsFeature(Feature):
    """The counters (:class:`~rocegen.gateware.roce.endpoint.endpoint_stats.EndpointStats` and
    :class:`~rocegen.gateware.roce.endpoint.endpoint_qp_stats.EndpointQpStats`).

    Parameters
    ----------
    cfg : EndpointConfig
        ``num_qps``, and the features present (their counters read 0 without them).

    Ports
    -----
    ``stats_addr`` / ``stats_data``: every counter of
    :data:`~rocegen.gateware.roce.endpoint.endpoint_stats.STATS`, one cycle after the address.
    ``qp_stats_qp`` / ``qp_stats_sel`` / ``qp_stats_data``: the per-QP counters of
    :data:`~rocegen.gateware.roce.endpoint.endpoint_qp_stats.QP_COUNTERS`, one cycle after the address.

    Behaviour
    ---------
    Every block's one-bit event pulses are counted; the stack's counters are read through the
    same address space; the retry engine's and the receive path's per-QP counters through the
    per-QP one.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.stats = EndpointStats()

    def members(self):
        return {"qp_stats_qp": In(range(self.cfg.num_qps)),
                "qp_stats_sel": In(range(len(QP_COUNTERS))), "qp_stats_data": Out(32),
                "stats_addr": In(range(len(STATS))), "stats_data": Out(32)}

    def connect(self, m, ep):
        """The counters: the stack's and the RoCE layers' in one address space
        (``stats_addr``), the per-QP ones in another (``qp_stats_qp`` / ``qp_stats_sel``)."""
        f = ep.features
        st, rx, retry = f.network.stack, f.requester.rx, f.requester.retry
        stats = m.submodules.roce_stats = self.stats
        ev = stats.events
        events = {**_requester_events(f, self.cfg.reads), **_feature_events(f)}
        assert set(events) == set(PULSE_COUNTERS), "a statistics event is missing or unknown"
        for name, value in events.items():
            assert len(value) == 1, f"statistics event {name} is not a one-bit pulse"
            m.d.comb += ev[name].eq(value)
        front = f.requester.front
        sink = f.responder.sink if f.responder else None
        m.d.comb += [
            stats.moved.stream_drop_too_long.eq(front.drop_too_long),
            stats.moved.stream_drop_error.eq(front.drop_error),
            stats.wide.sink_bytes_checked.eq(sink.counts.checked if sink else 0),
            stats.wide.sink_bytes_wrong.eq(sink.counts.wrong if sink else 0),
            stats.addr.eq(ep.stats_addr), ep.stats_data.eq(stats.data),
            st.stats_addr.eq(stats.net_addr), stats.net_data.eq(st.stats_data),
        ]

        # per-QP counters: the retry engine's, then the receive path's
        qst = m.submodules.qp_stats = EndpointQpStats(self.cfg.num_qps)
        m.d.comb += [
            qst.qp.eq(rx.cnp_qp), qst.drop_state.eq(rx.drop_state),
            qst.drop_peer.eq(rx.drop_peer), qst.cnp.eq(rx.cnp),
            qst.rd_qp.eq(ep.qp_stats_qp), qst.rd_sel.eq(ep.qp_stats_sel),
            ep.qp_stats_data.eq(qst.rd_data), retry.qp_stats_qp.eq(qst.retry_qp),
            retry.qp_stats_sel.eq(qst.retry_sel), qst.retry_data.eq(retry.qp_stats_data),
        ]
