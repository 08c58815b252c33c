"""The standard RDMA connection manager: the IB CM's passive side over QP1, its QPs from the
pool the UDP connection manager takes its own from."""

from amaranth.hdl import Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.ibcm.ibcm_closer import IbCmCloser
from rocegen.gateware.roce.ibcm.ibcm_idle import IbCmIdle
from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
from rocegen.gateware.roce.ibcm.ibcm_passive import DEFAULT_TIME_WAIT_NS
from rocegen.gateware.roce.ibcm.ibcm_qps import IbCmQps
from rocegen.gateware.roce.ibcm.ibcm_service import IbCmService
from rocegen.gateware.roce.layouts import QPN_BASE, qp_index

__all__ = ["IbCmFeature", "ibcm_params"]


def ibcm_params(cfg):
    """The passive side's parameters in an endpoint of ``cfg`` (an
    :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig` with ``rdma_cm_ports``): a
    connection per QP, the endpoint's QP numbers and clock, READ depths of the responder and
    of the READ requester (none without READs), the path MTU at most ``pmtu``, one PSN per QP
    (the REQ's), the time-wait ``rdma_cm_time_wait_us``, QP1's queue of ``rdma_cm_queue``
    MADs, the ACK timeout of the QPs we connect ``cm_timeout`` (librdmacm's CM response timeout,
    CM retries and QP retry count: 20, 15 and 7), the wait for a host's answer to our REQ, REP
    or DREQ at most ``rdma_cm_max_response_timeout``."""
    wait = DEFAULT_TIME_WAIT_NS if cfg.rdma_cm_time_wait_us is None else \
        round(cfg.rdma_cm_time_wait_us * 1000)
    return {"ports": cfg.rdma_cm_ports, "clk_hz": cfg.clk_hz, "connections": cfg.num_qps,
            "qpns": range(QPN_BASE, QPN_BASE + cfg.num_qps),
            "responder_resources": min(cfg.rd_depth, 255) if cfg.reads else 0,
            "initiator_depth": cfg.max_rd_atomic if cfg.reads else 0,
            "psn_from_req": True, "max_mtu": cfg.pmtu, "time_wait_ns": wait,
            "region_port": cfg.responder, "rnr_retry_count": cfg.cm_rnr_retry,
            "local_ack_timeout": cfg.cm_timeout,
            "queue": cfg.rdma_cm_queue,
            "max_peer_response_timeout": cfg.rdma_cm_max_response_timeout}


class IbCmFeature(Feature):
    """The IB CM (:class:`~rocegen.gateware.roce.ibcm.ibcm_service.IbCmService`: QP1's
    ingress, the passive side and its replies, QP1's egress) and its QPs
    (:class:`~rocegen.gateware.roce.ibcm.ibcm_qps.IbCmQps`).

    Parameters
    ----------
    cfg : EndpointConfig
        ``rdma_cm_ports`` (not empty), ``rdma_cm_time_wait_us``, ``num_qps``, ``clk_hz``,
        ``pmtu``, ``cm_timeout`` (the longest ACK timeout a QP gets), ``cm_rnr_retry`` (the RNR
        retry count our REPs state), ``responder`` (the
        REPs' regions), ``reads``, ``rd_depth``, ``max_rd_atomic``, ``service_idle_us`` (with
        the rping server or the SEND echo).

    Ports
    -----
    rdma_cm_disconnect : In(stream.Signature(8))
        A QP index (QPN - 256) whose IB CM connection the user's logic closes (a DREQ, see
        :class:`~rocegen.gateware.roce.ibcm.ibcm_closer.IbCmCloser`).
    rdma_cm_connect : In(stream.Signature(CONNECT))
        A connection the user's logic asks for (``rdma_connect`` to ``dst_ip``'s ``port``).
    rdma_cm_event : Out(stream.Signature(CM_EVENT))
        How each went: its QP once established, or why not (held until ``ready``: the CM
        waits meanwhile).

    Otherwise it joins the receive path (every datagram of UDP port 4791 after the
    ICRC check; the QPs requests arrive on), the transmit path (its MADs share UDP port 4791
    with the requests and the responder's packets), the QP control (a third writer), the UDP
    connection manager (the QPs each holds) and, with the responder, its configuration table
    (the region of each QP, which a REP states). ``qp_open`` shows the QPs of both managers.

    Behaviour
    ---------
    As :class:`IbCmService` and :class:`IbCmQps` describe: a REQ for a listened port takes the
    lowest QP neither manager holds, opens it (RTS, one PSN for both directions: the REQ's,
    which our REP states too) and answers with a REP carrying the QP's region (address,
    R_Key, length: :data:`rocegen.wire.ibcm.REGION`); a DREQ puts the QP in error; the end of
    the time-wait (or a REJ) gives it back to the pool, reset. The FPGA disconnects (DREQ,
    sent again until a DREP or the REQ's retries run out, then time-wait) a connection the
    user's logic names on ``rdma_cm_disconnect`` and one whose QP fails (the retry engine's
    ``errored``: a peer that vanished), so no QP stays taken by a host that is gone. With the
    rping server or the SEND echo and ``service_idle_us``, it also disconnects their
    connections that went quiet (:class:`~rocegen.gateware.roce.ibcm.ibcm_idle.IbCmIdle`: no
    request from the peer for ``service_idle_us`` to twice that): the peer closed its side and
    its one DREQ was lost (rping and rdma_client destroy their ids at once, and Linux does not
    send that DREQ again).
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.service = IbCmService(cfg.width, **ibcm_params(cfg))
        self.qps = IbCmQps(cfg.num_qps, reads=cfg.reads, max_rd_atomic=cfg.max_rd_atomic,
                           max_timeout=cfg.cm_timeout,
                           service_ports=cfg.service_ports,
                           service_active=tuple(a for _, a in cfg.service_sides))
        self.closer = IbCmCloser(cfg.num_qps)
        #: the services' connections the peers asked for, watched for quiet ones
        self.watched = [j for j, (_, active) in enumerate(cfg.service_sides) if not active]
        self.idle = None
        if self.watched and cfg.service_idle_us:
            window = max(1, round(cfg.service_idle_us * cfg.clk_hz / 1e6))
            self.idle = IbCmIdle(cfg.num_qps, window=window)
        #: with the rping client: its disconnects beside the user's (its input 1)
        self.disconnects = None if cfg.rping_client_port is None else StreamArbiter(8, 2)

    def members(self):
        return {"rdma_cm_disconnect": In(stream.Signature(8)),
                "rdma_cm_connect": In(stream.Signature(CONNECT)),
                "rdma_cm_event": Out(stream.Signature(CM_EVENT))}

    def connect(self, m, ep):
        """The service on the receive path's datagrams and QPs, into UDP port 4791's
        arbitration (made by the requester feature), its QPs between the pool and the QP
        control."""
        f = ep.features
        svc = m.submodules.ibcm = self.service
        qps = m.submodules.ibcm_qps = self.qps
        rx, cm = f.requester.rx, f.connection.cm
        m.d.comb += [svc.i.valid.eq(rx.req.valid), svc.i.payload.eq(rx.req.payload),
                     svc.local_ip.eq(ep.local_ip)]
        wiring.connect(m, rx.data_seen, svc.data_seen)
        for name in ("qp_req", "qp_free", "qp_set"):
            wiring.connect(m, getattr(svc, name), getattr(qps, name))
        wiring.connect(m, qps.qp_grant, svc.qp_grant)
        closer = m.submodules.ibcm_closer = self.closer
        if self.disconnects is None:
            wiring.connect(m, wiring.flipped(ep.rdma_cm_disconnect), closer.user)
        else:
            arb = m.submodules.ibcm_disconnects = self.disconnects
            wiring.connect(m, wiring.flipped(ep.rdma_cm_disconnect), arb.i[0])
            wiring.connect(m, arb.o, closer.user)
        wiring.connect(m, closer.o, svc.disconnect)
        wiring.connect(m, wiring.flipped(ep.rdma_cm_connect), svc.connect)
        wiring.connect(m, svc.connected, wiring.flipped(ep.rdma_cm_event))
        m.d.comb += [closer.errored.eq(f.requester.retry.errored), closer.held.eq(qps.live)]
        if self.idle is not None:
            idle = m.submodules.ibcm_idle = self.idle
            served = 0
            for j in self.watched:
                served |= qps.served[j]
            wiring.connect(m, rx.data_seen, idle.seen)
            m.d.comb += [idle.watched.eq(qps.live & served), closer.idle.eq(idle.expired)]
        m.d.comb += [qps.others.eq(cm.qp_open), qps.pool_idle.eq(cm.pool_idle),
                     cm.reserved.eq(qps.held), qps.tclass.eq(cm.tclass)]
        ctl = f.connection.ctl
        wiring.connect(m, qps.qp_ctl, ctl.ibcm_ctl)
        wiring.connect(m, qps.qp_psn, ctl.ibcm_psn)
        if f.responder is not None:
            resp = f.responder.resp
            mr = resp.cfg2.mr
            m.d.comb += [resp.cfg2_qp.eq(qp_index(svc.region_qp, self.cfg.num_qps)),
                         svc.region.addr.eq(mr.base), svc.region.rkey.eq(mr.rkey),
                         svc.region.length.eq(Mux(mr.length[32], 0xFFFF_FFFF, mr.length))]
