"""The QP context a connection-manager request writes."""

from amaranth.hdl import Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_defs import (
    PMTU_LOG2,
    REQ_CLOSE_QP,
    REQ_MODIFY_QP_RTS,
    REQ_OPEN_QP,
    REQ_SEND_QP_INFO,
    UDP_SPORT_BASE,
    int_param,
)
from rocegen.gateware.roce.layouts import QP_CONTEXT, TRAFFIC_CONFIG, QpState
from rocegen.wire.headers import CM

__all__ = ["CmContext"]


class CmContext(wiring.Component):
    """Works out the context a request writes to its QP, should its checks pass (they are made
    elsewhere).

    Parameters
    ----------
    default_pmtu : int
        Path MTU of a QP opened without an MTU code: 256, 512, 1024, 2048 or 4096.
    default_timeout, default_retry, default_rnr_retry : int
        Context defaults: timeout code 0..31 (0 = never), retry counts 0..7.
    ack_every_log2 : int
        AckReq on every 2^n-th packet inside long messages (0..7).

    Ports
    -----
    req : In(CM.layout)
        The request datagram by field.
    current : In(QP_CONTEXT)
        The context of the QP the request names (``rem_qpn``).
    free_idx : In(8)
        The QP an OPEN_QP takes.
    tclass : In(TRAFFIC_CONFIG)
        The traffic class of the QPs opened (``dscp``, ``ecn``; ``pcp`` unused).
    context : Out(QP_CONTEXT)
        The new context, by ``req_type``. OPEN_QP: state RTS; peer (``peer_ip``, ``peer_qpn``,
        ``rkey``, ``base_va``) from ``loc_ip``, ``loc_qpn``, ``loc_rkey``, ``loc_vaddr``; UDP
        source port ``0xC000 | free_idx``; DSCP and ECN from ``tclass``; ``ack_every_log2``; path
        MTU (code c: log2 = c + 7), timeout and retry counts from the extension bytes where given (non-zero
        code, ``retry_set``), else the defaults. SEND_QP_INFO: ``current`` with the peer and the
        extension values where given. MODIFY_QP_RTS: ``current`` in state RTS. CLOSE_QP: all
        zero (RESET). Any other code: ``current``.

    Behaviour: combinational, no state.
    """

    def __init__(self, *, default_pmtu=4096, default_timeout=14, default_retry=7,
                 default_rnr_retry=7, ack_every_log2=4):
        if isinstance(default_pmtu, bool) or not isinstance(default_pmtu, int):
            raise TypeError(f"default_pmtu must be an integer, not {default_pmtu!r}")
        if default_pmtu not in PMTU_LOG2:
            raise ValueError(f"default_pmtu must be one of {', '.join(map(str, PMTU_LOG2))}, "
                             f"not {default_pmtu}")
        self.default_pmtu = default_pmtu
        self.default_timeout = int_param("default_timeout", default_timeout, 0, 31)
        self.default_retry = int_param("default_retry", default_retry, 0, 7)
        self.default_rnr_retry = int_param("default_rnr_retry", default_rnr_retry, 0, 7)
        self.ack_every_log2 = int_param("ack_every_log2", ack_every_log2, 0, 7)
        super().__init__({
            "req": In(CM.layout),
            "current": In(QP_CONTEXT),
            "free_idx": In(8),
            "tclass": In(TRAFFIC_CONFIG),
            "context": Out(QP_CONTEXT),
        })

    def elaborate(self, platform):
        m = Module()
        req, cur, new = self.req, self.current, self.context

        def with_ext(pmtu_log2, timeout, retry_cnt, rnr_retry):
            """The extension bytes where given, else these values."""
            return [
                new.pmtu_log2.eq(Mux(req.pmtu_code == 0, pmtu_log2, req.pmtu_code[:4] + 7)),
                new.timeout.eq(Mux(req.timeout_code == 0, timeout, req.timeout_code[:5])),
                new.retry_cnt.eq(Mux(req.retry_set, req.retry_cnt, retry_cnt)),
                new.rnr_retry.eq(Mux(req.retry_set, req.rnr_retry, rnr_retry)),
            ]

        set_peer = [new.peer_ip.eq(req.loc_ip), new.peer_qpn.eq(req.loc_qpn),
                    new.rkey.eq(req.loc_rkey), new.base_va.eq(req.loc_vaddr)]

        m.d.comb += new.eq(cur)
        with m.Switch(req.req_type):
            with m.Case(REQ_OPEN_QP):
                m.d.comb += [new.state.eq(QpState.RTS),
                             new.udp_sport.eq(UDP_SPORT_BASE | self.free_idx),
                             new.dscp.eq(self.tclass.dscp), new.ecn.eq(self.tclass.ecn),
                             new.ack_every_log2.eq(self.ack_every_log2)]
                m.d.comb += set_peer
                m.d.comb += with_ext(PMTU_LOG2[self.default_pmtu], self.default_timeout,
                                     self.default_retry, self.default_rnr_retry)
            with m.Case(REQ_SEND_QP_INFO):
                m.d.comb += set_peer
                m.d.comb += with_ext(cur.pmtu_log2, cur.timeout, cur.retry_cnt, cur.rnr_retry)
            with m.Case(REQ_MODIFY_QP_RTS):
                m.d.comb += new.state.eq(QpState.RTS)
            with m.Case(REQ_CLOSE_QP):
                m.d.comb += new.eq(0)
        return m
