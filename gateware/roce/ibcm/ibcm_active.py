"""The IB CM's active side, its decisions: a connection the FPGA asks for (its REQ, the QP it
takes), the REP that answers it and the RTU (a part of
:class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive`)."""

from amaranth.hdl import Mux, Signal

from rocegen.gateware.roce.ibcm.ibcm_decide import PSN_TAPS, min_of
from rocegen.gateware.roce.ibcm.ibcm_layouts import CONNECTION, ConnState, ReplyKind
from rocegen.wire import ibcm as I

__all__ = ["ActiveDecisions"]


class ActiveDecisions:
    """The active side's decisions of
    :class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive` (see its Behaviour)."""

    def _event(self, m, e, reason, ok=0):
        """``connected``: how connection ``e`` (a view of :data:`CONNECTION`, ours) went."""
        self._say(m, ok, e.qpn, e.peer_ip, e.port, reason)

    def _say(self, m, ok, qpn, dst_ip, port, reason):
        """The ``connected`` register, offered from the next cycle."""
        ev = self.connected.payload
        m.d.sync += [self.connected.valid.eq(1), ev.ok.eq(ok), ev.qpn.eq(qpn),
                     ev.dst_ip.eq(dst_ip), ev.port.eq(port), ev.reason.eq(reason)]

    def _req_out(self, s, e):
        """The reply register: the REQ of connection ``e`` (REQ_SENT), to the peer's QP1."""
        out = s.out
        return self._reply(s, (e.peer_ip, I.QP1, I.DEFAULT_PKEY), ReplyKind.REQ,
                           e.local_comm_id, 0, tid=e.tid) + [
            out.local_qpn.eq(e.qpn), out.starting_psn.eq(e.psn),
            out.responder_resources.eq(e.responder_resources),
            out.initiator_depth.eq(e.initiator_depth), out.port.eq(e.port),
            out.path_mtu.eq(I.mtu_code(self.max_mtu)), out.src_port.eq(e.src_port)]

    def _decide_connect(self, m, s):
        """A connection asked for: a QP from the pool when a table entry is free, else the
        answer ``NO_QP`` on ``connected``."""
        c = self.connect.payload
        with m.If(s.free_ok):
            m.next = "QP_REQ"
        with m.Else():
            self._no_qp(m, c)

    def _no_qp(self, m, c):
        self._say(m, 0, 0, c.dst_ip, c.port, I.RejReason.NO_QP)
        self._count(m, "connect_no_qp")
        m.next = "DONE"

    def _take_connect(self, m, s, wr, grant):
        """The pool's answer to a connection asked for: the new entry (REQ_SENT, our next
        communication ID, starting PSN and transaction ID, our READ depths), its REQ and its
        timer (2^``cm_response_timeout`` ticks, at most 2^``max_peer_response_timeout``,
        ``max_cm_retries`` times again)."""
        c = self.connect.payload
        new = Signal(CONNECTION)
        t = min(self.cm_response_timeout, self.max_peer_response_timeout)
        m.d.comb += [new.state.eq(ConnState.REQ_SENT), new.active.eq(1),
                     new.local_comm_id.eq(s.next_cid), new.peer_ip.eq(c.dst_ip),
                     new.qpn.eq(grant.qpn), new.psn.eq(s.psn), new.tid.eq(s.tid),
                     new.pkey.eq(I.DEFAULT_PKEY),
                     new.responder_resources.eq(self.responder_resources),
                     new.initiator_depth.eq(self.initiator_depth),
                     new.deadline.eq(self._at(s, 1 << t)), new.timeout.eq(t),
                     new.retries.eq(self.max_cm_retries),
                     new.max_retries.eq(self.max_cm_retries), new.port.eq(c.port),
                     new.src_port.eq(c.src_port)]
        with m.If(grant.ok):
            m.d.comb += [wr.addr.eq(s.free_idx), wr.data.eq(new), wr.en.eq(1)]
            m.d.sync += self._req_out(s, new)
            m.d.sync += [s.next_cid.eq(Mux(s.next_cid == 0xFFFFFFFF, 1, s.next_cid + 1)),
                         s.tid.eq(s.tid + 1),
                         s.psn.eq(Mux(s.psn[0], (s.psn >> 1) ^ PSN_TAPS, s.psn >> 1))]
            self._count(m, "connects")
        with m.Else():
            self._no_qp(m, c)

    def _decide_rep(self, m, s, wr, rec, mine):
        """A REP: of a connection we asked for (REQ_SENT), its QP opened with what the REP
        states and the RTU sent (``connected``: ok); of one established, the RTU again; else
        REJ ``INVALID_COMM_ID``."""
        e = s.hit_e
        ours = mine & e.active
        m.next = "SEND"
        with m.If(ours & (e.state == ConnState.REQ_SENT)):
            rr = min_of(e.responder_resources, rec.rep_initiator_depth)
            idp = min_of(e.initiator_depth, rec.rep_responder_resources)
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.ESTABLISHED),
                         wr.data.remote_comm_id.eq(rec.local_comm_id),
                         wr.data.peer_qpn.eq(rec.rep_local_qpn),
                         wr.data.responder_resources.eq(rr), wr.data.initiator_depth.eq(idp)]
            m.d.sync += self._reply(s, (e.peer_ip, I.QP1, e.pkey), ReplyKind.RTU,
                                    e.local_comm_id, rec.local_comm_id, tid=e.tid)
            st = s.set
            m.d.sync += [s.set_valid.eq(1), st.open.eq(1), st.qpn.eq(e.qpn),
                         st.peer_ip.eq(e.peer_ip), st.peer_qpn.eq(rec.rep_local_qpn),
                         # (each message states the PSN its sender expects: the QP sends
                         # from the REP's, expects our REQ's, as Linux's CM sets them)
                         st.psn.eq(rec.rep_starting_psn), st.epsn.eq(e.psn),
                         st.path_mtu.eq(I.mtu_code(self.max_mtu)),
                         st.ack_timeout.eq(self.local_ack_timeout),
                         st.retry_count.eq(self.retry_count),
                         st.rnr_retry_count.eq(rec.rep_rnr_retry_count),
                         st.responder_resources.eq(rr), st.initiator_depth.eq(idp),
                         st.port.eq(e.port), st.rkey.eq(rec.rep_rkey), st.base.eq(rec.rep_addr),
                         st.active.eq(1)]
            self._count(m, "established")
            self._event(m, e, 0, ok=1)
        with m.Elif(ours & (e.state == ConnState.ESTABLISHED)):
            m.d.sync += self._reply(s, (e.peer_ip, I.QP1, e.pkey), ReplyKind.RTU,
                                    e.local_comm_id, e.remote_comm_id, tid=e.tid)
            self._count(m, "rep_duplicate")
        with m.Else():
            m.d.sync += self._answer(s, rec, ReplyKind.REJ, 0, rec.local_comm_id,
                                     reason=I.RejReason.INVALID_COMM_ID,
                                     message=I.MsgResponse.REP)
            self._count(m, "rep_unknown")
