"""The IB CM's passive side, its decisions: what a MAD record does to the connection table,
the reply it gets, the QP it takes or closes (a part of
:class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive`)."""

from amaranth.hdl import Cat, Const, Mux, Signal
from amaranth.lib import enum

from rocegen.gateware.roce.ibcm.ibcm_layouts import (
    CONNECTION,
    VERDICT_COUNTERS,
    ConnState,
    ReplyKind,
    Verdict,
)
from rocegen.wire import ibcm as I

__all__ = ["PassiveDecisions", "PSN_TAPS", "Src", "pow2", "min_of"]

#: The starting PSNs come from a 24-bit Galois LFSR (x^24 + x^23 + x^22 + x^17 + 1): shifted
#: right, these taps XORed in when the bit shifted out is 1.
PSN_TAPS = 0xE10000


class Src(enum.Enum, shape=2):
    """What the CM took up to act on."""
    RECORD = 0          # a MAD's record
    DISCONNECT = 1      # a QP to disconnect
    CONNECT = 2         # a connection to ask for


def min_of(a, b):
    return Mux(a < b, a, b)


def pow2(t):
    """2^t for a 5-bit CM time value t (ticks)."""
    return Const(1, 1) << t


def _sender(rec):
    """Where a reply to record ``rec`` goes: its sender's address and QP, its P_Key."""
    return rec.src_ip, rec.src_qp, rec.pkey


class PassiveDecisions:
    """The decisions of :class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive` (see its
    Behaviour), made in its DECIDE state and in the states that take a QP from the pool."""

    def _reply(self, s, to, kind, local, remote, *, tid, reason=0, message=0, ari_guid=0):
        """Assignments of the reply register: ``kind`` to ``to`` (address, QP, P_Key)."""
        out = s.out
        dst_ip, dst_qp, pkey = to
        return [out.kind.eq(kind), out.dst_ip.eq(dst_ip), out.dst_qp.eq(dst_qp),
                out.pkey.eq(pkey), out.transaction_id.eq(tid),
                out.class_specific.eq(0), out.hdr_reserved.eq(0), out.attribute_modifier.eq(0),
                out.local_comm_id.eq(local), out.remote_comm_id.eq(remote),
                out.message.eq(message), out.reason.eq(reason), out.ari_guid.eq(ari_guid),
                out.status.eq(0), out.remote_qpn.eq(0)]

    def _rep(self, s, to, e):
        """The REP of connection ``e`` (a view of :data:`CONNECTION`), to ``to``."""
        out = s.out
        return self._reply(s, to, ReplyKind.REP, e.local_comm_id, e.remote_comm_id,
                           tid=e.tid) + [
            out.local_qpn.eq(e.qpn), out.starting_psn.eq(e.psn),
            out.responder_resources.eq(e.responder_resources),
            out.initiator_depth.eq(e.initiator_depth), out.region.eq(self.region)]

    def _answer(self, s, rec, kind, local, remote, **kw):
        """The reply register: ``kind`` to the sender of record ``rec``, its transaction ID."""
        return self._reply(s, _sender(rec), kind, local, remote, tid=rec.hdr.transaction_id,
                           **kw)

    def _count(self, m, name):
        m.d.comb += getattr(self, name).eq(1)

    def _reject_req(self, m, s, rec, reason, local=0, counter="req_rejected"):
        m.d.sync += self._answer(s, rec, ReplyKind.REJ, local, rec.local_comm_id,
                                 reason=reason, message=I.MsgResponse.REQ)
        self._count(m, counter)
        m.next = "SEND"

    def _decide(self, m, s, wr, rec):
        """The decision, the cycle after the scan: the reply, the table write, what follows.
        An entry a packet established is written so (and counted) whatever else happens."""
        e = s.hit_e
        # the connection the message names, as the model's _mine finds it (states apart)
        mine = s.hit & (e.peer_ip == rec.src_ip) & ((e.remote_comm_id == 0) |
                                                    (e.remote_comm_id == rec.local_comm_id))
        m.d.comb += [wr.addr.eq(s.hit_idx), wr.data.eq(e)]
        with m.If(s.hit & s.hit_promote):
            m.d.comb += wr.en.eq(1)
            self._count(m, "established")
        m.next = "DONE"
        with m.If(s.src == Src.DISCONNECT):
            self._decide_disconnect(m, s, wr)
        with m.Elif(s.src == Src.CONNECT):
            self._decide_connect(m, s)
        with m.Else():
            self._decide_record(m, s, wr, rec, mine)

    def _decide_record(self, m, s, wr, rec, mine):
        attr = rec.hdr.attribute_id
        with m.Switch(rec.verdict):
            for verdict, counter in VERDICT_COUNTERS.items():
                with m.Case(verdict):
                    self._count(m, counter)
            with m.Case(Verdict.GET_SET):
                self._decide_get_set(m, s, rec)
        with m.If(rec.verdict != Verdict.OK):
            pass
        with m.Elif(attr == I.ATTR_REQ):
            self._decide_req(m, s, rec)
        with m.Elif((attr == I.ATTR_RTU) | (attr == I.ATTR_MRA)):
            self._decide_rtu_mra(m, s, wr, rec, mine)
        with m.Elif(attr == I.ATTR_DREQ):
            self._decide_dreq(m, s, wr, rec, mine)
        with m.Elif(attr == I.ATTR_REJ):
            self._decide_rej(m, s, wr, rec, mine)
        with m.Elif(attr == I.ATTR_REP):
            self._decide_rep(m, s, wr, rec, mine)
        with m.Elif(attr == I.ATTR_DREP):
            with m.If(mine & (s.hit_e.state == ConnState.DREQ_SENT)):
                self._timewait(m, s, wr)
            with m.Else():
                self._count(m, "drep_unknown")

    def _timewait(self, m, s, wr):
        """The named entry written in time-wait, its end armed, its QP to the error state
        (already there after our DREQ)."""
        m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.TIMEWAIT),
                     wr.data.deadline.eq(self._at(s, self.time_wait_ticks))]
        self._close_qp(m, s, s.hit_e.state != ConnState.DREQ_SENT)

    def _close_qp(self, m, s, when):
        """The ``qp_set`` register (when ``when``): the named entry's QP to the error state."""
        m.d.sync += [s.set_valid.eq(when), s.set.eq(0), s.set.qpn.eq(s.hit_e.qpn)]

    def _dreq(self, s, e, tid):
        """The reply register: the DREQ of connection ``e``, to its peer's QP1."""
        return self._reply(s, (e.peer_ip, I.QP1, e.pkey), ReplyKind.DREQ, e.local_comm_id,
                           e.remote_comm_id, tid=tid) + [s.out.remote_qpn.eq(e.peer_qpn)]

    def _decide_disconnect(self, m, s, wr):
        """A disconnect of the QP of an established connection: DREQ_SENT, its DREQ sent and
        armed (``max_retries`` times again), the QP to the error state; else nothing."""
        e = s.hit_e
        with m.If(s.hit & (e.state == ConnState.ESTABLISHED)):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.DREQ_SENT),
                         wr.data.tid.eq(s.tid), wr.data.retries.eq(e.max_retries),
                         wr.data.deadline.eq(self._at(s, pow2(e.timeout)))]
            m.d.sync += self._dreq(s, e, s.tid)
            m.d.sync += s.tid.eq(s.tid + 1)
            self._close_qp(m, s, 1)
            self._count(m, "disconnects")
            m.next = "SEND"
        with m.Else():
            self._count(m, "disconnect_unknown")

    def _decide_rej(self, m, s, wr, rec, mine):
        e = s.hit_e
        live = mine & (e.state != ConnState.TIMEWAIT)
        with m.If(live):
            self._count(m, "rejected")
        with m.Else():
            self._count(m, "rej_unknown")
        with m.If(live & ((e.state == ConnState.REP_SENT) | (e.state == ConnState.REQ_SENT))):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.FREE)]
            with m.If(e.state == ConnState.REQ_SENT):
                self._event(m, e, rec.reason)
            m.next = "FREE"
        with m.Elif(live):
            self._timewait(m, s, wr)

    def _decide_get_set(self, m, s, rec):
        hdr = rec.hdr
        with m.If((hdr.class_version == I.CM_CLASS_VERSION) & (hdr.method == I.METHOD_GET)
                  & (hdr.attribute_id == I.ATTR_CLASS_PORT_INFO)):
            m.d.sync += self._answer(s, rec, ReplyKind.CLASS_PORT_INFO, 0, 0)
            m.d.sync += [s.out.class_specific.eq(hdr.class_specific),
                         s.out.hdr_reserved.eq(hdr.reserved),
                         s.out.attribute_modifier.eq(hdr.attribute_modifier)]
            self._count(m, "class_port_info")
        with m.Elif(hdr.class_version != I.CM_CLASS_VERSION):
            m.d.sync += self._answer(s, rec, ReplyKind.ECHO, 0, 0)
            m.d.sync += s.out.status.eq(I.STATUS_BAD_VERSION)
            self._count(m, "answered_bad_version")
        with m.Else():
            m.d.sync += self._answer(s, rec, ReplyKind.ECHO, 0, 0)
            m.d.sync += s.out.status.eq(I.STATUS_UNSUPPORTED_METHOD_ATTR)
            self._count(m, "answered_unsupported")
        m.next = "SEND"

    def _decide_rtu_mra(self, m, s, wr, rec, mine):
        e = s.hit_e
        rep_sent = mine & (e.state == ConnState.REP_SENT)
        with m.If(rec.hdr.attribute_id == I.ATTR_MRA):
            # an MRA of our REP: the REP waits its service timeout from now
            req_sent = mine & (e.state == ConnState.REQ_SENT)
            with m.If((rep_sent & (rec.message == I.MsgResponse.REP)) |
                      (req_sent & (rec.message == I.MsgResponse.REQ))):
                m.d.comb += [wr.en.eq(1),
                             wr.data.deadline.eq(self._at(s, pow2(rec.service_timeout)))]
            with m.Else():
                self._count(m, "mra_unknown")
        with m.Elif(rep_sent):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.ESTABLISHED)]
            self._count(m, "established")
        with m.Elif(mine & (e.state == ConnState.ESTABLISHED) & ~e.active):
            self._count(m, "rtu_duplicate")
        with m.Else():
            self._count(m, "rtu_unknown")

    def _decide_dreq(self, m, s, wr, rec, mine):
        e = s.hit_e
        with m.If(mine & (rec.remote_qpn == e.qpn) & (e.state != ConnState.REQ_SENT)):
            with m.If(e.state == ConnState.TIMEWAIT):
                self._count(m, "dreq_duplicate")
            with m.Else():
                self._timewait(m, s, wr)
            m.d.sync += self._answer(s, rec, ReplyKind.DREP, e.local_comm_id, e.remote_comm_id)
        with m.Else():
            self._count(m, "dreq_unknown")
            m.d.sync += self._answer(s, rec, ReplyKind.DREP, rec.remote_comm_id,
                                     rec.local_comm_id)
        m.next = "SEND"

    def _listened(self, rec):
        if not self.ports:
            return Const(0, 1)
        return Cat(*(rec.service_id == I.service_id(p) for p in self.ports)).any()

    def _decide_req(self, m, s, rec):
        R, e = I.RejReason, s.hit_e
        cma_ok = ((rec.cma_version == I.CMA_VERSION) & (rec.cma_ip_version == I.CMA_IP_VERSION_4)
                  & rec.cma_high_zero & (rec.cma_src_ip == rec.src_ip)
                  & (rec.cma_dst_ip == self.local_ip))
        mtu_ok = (rec.path_mtu >= min(I.MTU_CODES)) & (rec.path_mtu <= max(I.MTU_CODES))
        with m.If(s.hit):
            with m.If(e.state == ConnState.REP_SENT):
                m.d.sync += self._rep(s, _sender(rec), e)
                self._count(m, "req_duplicate")
                m.next = "SEND"
            with m.Elif(e.state == ConnState.TIMEWAIT):
                self._reject_req(m, s, rec, R.STALE_CONN, local=e.local_comm_id,
                                 counter="req_stale")
            with m.Else():
                self._count(m, "req_duplicate")
        with m.Elif(~self._listened(rec)):
            self._reject_req(m, s, rec, R.INVALID_SERVICE_ID)
        with m.Elif(rec.transport_service_type != I.TRANSPORT_RC):
            self._reject_req(m, s, rec, R.INVALID_TRANSPORT_TYPE)
        with m.Elif(~mtu_ok):
            self._reject_req(m, s, rec, R.INVALID_MTU)
        with m.Elif((rec.initiator_depth > 0) & (self.responder_resources == 0)):
            self._reject_req(m, s, rec, R.INSUFFICIENT_RESP_RESOURCES)
        with m.Elif(s.stale):
            self._reject_req(m, s, rec, R.STALE_CONN)
        with m.Elif(~cma_ok):
            self._reject_req(m, s, rec, R.CONSUMER_DEFINED)
        with m.Elif(~s.free_ok):
            self._reject_req(m, s, rec, R.NO_QP)
        with m.Else():
            m.next = "QP_REQ"

    def _take(self, m, s, wr, rec, grant):
        """The pool's answer to a REQ that passed: the new connection, its REP and its timer
        (the QP's packet flip-flop cleared), or REJ ``NO_QP``."""
        new = Signal(CONNECTION)
        timeout = rec.local_cm_response_timeout
        cap = self.max_peer_response_timeout
        if cap < 31:
            timeout = Mux(timeout > cap, cap, timeout)
        m.d.comb += [new.state.eq(ConnState.REP_SENT), new.local_comm_id.eq(s.next_cid),
                     new.remote_comm_id.eq(rec.local_comm_id), new.peer_ip.eq(rec.src_ip),
                     new.peer_qpn.eq(rec.local_qpn), new.qpn.eq(grant.qpn),
                     new.psn.eq(rec.starting_psn if self.psn_from_req else s.psn),
                     new.responder_resources.eq(min_of(self.responder_resources,
                                                     rec.initiator_depth)),
                     new.initiator_depth.eq(min_of(self.initiator_depth, rec.responder_resources)),
                     new.tid.eq(rec.hdr.transaction_id), new.pkey.eq(rec.pkey),
                     new.deadline.eq(self._at(s, pow2(timeout))), new.timeout.eq(timeout),
                     new.retries.eq(rec.max_cm_retries),
                     new.max_retries.eq(rec.max_cm_retries), new.port.eq(rec.service_id[:16])]
        with m.If(grant.ok):
            m.d.comb += [wr.addr.eq(s.free_idx), wr.data.eq(new), wr.en.eq(1)]
            m.d.sync += self._rep(s, _sender(rec), new)
            m.d.sync += self._open(s, rec, new)
            m.d.sync += s.next_cid.eq(Mux(s.next_cid == 0xFFFFFFFF, 1, s.next_cid + 1))
            if not self.psn_from_req:
                m.d.sync += s.psn.eq(Mux(s.psn[0], (s.psn >> 1) ^ PSN_TAPS, s.psn >> 1))
            idx, ok = self._qp_bit(grant.qpn)
            with m.If(ok):
                m.d.sync += s.seen.bit_select(idx, 1).eq(0)
        with m.Else():
            self._reject_req(m, s, rec, I.RejReason.NO_QP)


    def _open(self, s, rec, new):
        """The ``qp_set`` register: connection ``new`` (of REQ ``rec``) opens its QP."""
        ours = I.mtu_code(self.max_mtu)
        return [s.set_valid.eq(1), s.set.open.eq(1), s.set.qpn.eq(new.qpn),
                s.set.peer_ip.eq(new.peer_ip), s.set.peer_qpn.eq(new.peer_qpn),
                s.set.psn.eq(new.psn), s.set.path_mtu.eq(min_of(rec.path_mtu, ours)),
                s.set.ack_timeout.eq(rec.local_ack_timeout),
                s.set.retry_count.eq(rec.retry_count),
                s.set.rnr_retry_count.eq(rec.rnr_retry_count),
                s.set.responder_resources.eq(new.responder_resources),
                s.set.initiator_depth.eq(new.initiator_depth),
                s.set.port.eq(rec.service_id[:16]), s.set.epsn.eq(new.psn), s.set.rkey.eq(0),
                s.set.base.eq(0), s.set.active.eq(0)]


