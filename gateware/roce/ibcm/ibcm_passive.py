"""The IB CM's passive side: what one MAD record makes the CM do, with its connection table."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.ibcm.ibcm_layouts import (
    CONNECTION,
    MAD_RECORD,
    QP_GRANT,
    REPLY_RECORD,
    VERDICT_COUNTERS,
    ConnState,
    ReplyKind,
    Verdict,
    int_param,
)
from rocegen.wire import ibcm as I

__all__ = ["IbCmPassive", "PSN_TAPS", "COUNTERS"]

#: The starting PSNs come from a 24-bit Galois LFSR (x^24 + x^23 + x^22 + x^17 + 1): shifted
#: right, these taps XORed in when the bit shifted out is 1.
PSN_TAPS = 0xE10000

#: The passive side's counter strobes: the reference model's counters of the same names (those
#: of the passive side), and ``unanswered_get_set`` (Gets and Sets the model answers with an
#: echo, counting ``answered_bad_version`` or ``answered_unsupported``).
COUNTERS = ("rx_mads", "tx_mads", *VERDICT_COUNTERS.values(), "unanswered_get_set",
            "class_port_info", "req_rejected", "req_duplicate", "req_stale", "rep_unknown",
            "rtu_unknown", "rtu_duplicate", "mra_unknown", "rej_unknown", "dreq_unknown",
            "dreq_duplicate", "drep_unknown", "established", "rejected")


def _min(a, b):
    return Mux(a < b, a, b)


class IbCmPassive(wiring.Component):
    """The passive side of the IB CM (``rdma_listen``/``rdma_accept`` as librdmacm's peer sees
    them): decides, for one MAD record at a time, the reply and what changes in the connection
    table, as the reference model ``rocegen.sim.models.ibcm.IbCm`` does.

    Parameters
    ----------
    ports : iterable of int
        The TCP ports listened on (0..65535; service IDs ``0x0000000001060000 | port``).
    connections : int
        Entries of the connection table (1..256): connections in REP_SENT, ESTABLISHED or
        time-wait at once. Make it at least the QPs the pool may give this CM.
    responder_resources, initiator_depth : int
        The RDMA READs we serve at once and may have outstanding at once (0..255).
    first_comm_id : int
        Our first communication ID (1..2^32-1); the next ones count up (0xFFFFFFFF wraps to 1).
    psn_seed : int
        The first starting PSN (1..2^24-1); each next one is the last shifted right by one,
        XORed with :data:`PSN_TAPS` when the bit shifted out is 1 (a maximal-length LFSR: the
        PSNs repeat after 2^24 - 1 connections).

    Ports
    -----
    i : In(stream.Signature(MAD_RECORD))
        The MAD to act on (:class:`~rocegen.gateware.roce.ibcm.ibcm_receive.IbCmReceiver`'s
        ``o``); read while it is held, taken (``i.ready``) when its reply has gone.
    local_ip : In(32)
        Our IPv4 address (the REQ's ``cma_hdr`` must name it).
    region : In(I.REGION.layout)
        The memory region our REPs advertise.
    qp_req : Out(stream.Signature(0))
        A QP is wanted from the pool, answered on ``qp_grant``.
    qp_grant : In(stream.Signature(QP_GRANT))
        The pool's answer: ``ok`` and the QP number, or none free.
    qp_free : Out(stream.Signature(24))
        A QP given back to the pool (a REJ of a connection that had its REP).
    o : Out(stream.Signature(REPLY_RECORD))
        The reply, to the MAD's sender (``src_ip``, ``src_qp``, ``pkey``), for
        :class:`~rocegen.gateware.roce.ibcm.ibcm_reply.IbCmReply`.
    <name> : Out(1), for each name of :data:`COUNTERS`
        High for one cycle when the model would count that counter: ``rx_mads`` when a record
        is taken, ``tx_mads`` when a reply leaves, the others at the decision.

    Behaviour
    ---------
    A Get of ClassPortInfo (class version 2) gets its GetResp (the request's header echoed).
    A REQ is matched against the table by its sender and communication ID: a duplicate of one
    in REP_SENT gets the same REP again (its REQ's transaction ID; ``region`` as it is then),
    of one in time-wait a REJ
    ``STALE_CONN``, of an established one nothing. Else it is checked, in the model's order:
    service ID a listened port (``INVALID_SERVICE_ID``), transport RC
    (``INVALID_TRANSPORT_TYPE``), path MTU an IB MTU code (``INVALID_MTU``), no RDMA READs asked
    of us when ``responder_resources`` is 0 (``INSUFFICIENT_RESP_RESOURCES``), no live
    connection with the sender's QP (``STALE_CONN``), ``cma_hdr`` version 0, IPv4, the sender's
    address and ``local_ip`` (``CONSUMER_DEFINED``); then a free table entry and a QP from the
    pool (``NO_QP`` without either). A REQ taken gets a REP: our communication ID, the QP, our
    starting PSN, responder resources ``min(ours, its initiator depth)``, initiator depth
    ``min(ours, its responder resources)``, ``region``. An RTU moves its connection from
    REP_SENT to ESTABLISHED. A DREQ of a connection (by our ID, its sender, its ID and our QPN)
    moves it to time-wait and gets a DREP, again when it is in time-wait; a DREQ of no
    connection gets a DREP with its IDs swapped (as Linux answers). A REJ of a connection not in
    time-wait (by our ID, or by its sender's ID when it names none of ours) frees a REP_SENT
    one and its QP, moves an established one to time-wait. A REP gets a REJ
    ``INVALID_COMM_ID`` (this side makes no REQ). MRAs, DREPs, RTUs and REJs of no connection,
    MADs with another verdict: nothing.

    Not here yet, where the model differs: Gets and Sets other than the Get of ClassPortInfo
    are not answered (the model echoes them with an error status: the echo needs the whole
    MAD); the timers (the REP sent again, REJ ``TIMEOUT``, the end of time-wait: entries stay
    in time-wait), the active side (REQ, MRA) and the ``accept`` hook (every REQ that passes
    the checks is taken) come later. Communication IDs are not checked against those in use
    (they would repeat after 2^32 connections).

    Latency: a MAD record is matched against the whole table, one entry per cycle: if it is
    offered in cycle t, the decision is made in cycle t + ``connections`` + 2; then each
    handshake it needs (``qp_req``, ``qp_grant``, ``qp_free``, ``o``, in that order) is offered
    in the cycle after the previous one and waits for its peer, and ``i.ready`` is high in the
    cycle after the last (t + ``connections`` + 3 when there is none; t + ``connections`` + 4
    for a reply taken at once). The table is one memory of ``connections`` entries
    (:data:`CONNECTION`, 250 bits) with one read and one write port.
    """

    def __init__(self, *, ports, connections=16, responder_resources=1, initiator_depth=1,
                 first_comm_id=1, psn_seed=1):
        ports = list(ports)
        for p in ports:
            int_param("each port", p, 0, 0xFFFF)
        self.ports = sorted(set(ports))
        self.connections = int_param("connections", connections, 1, 256)
        self.responder_resources = int_param("responder_resources", responder_resources, 0, 255)
        self.initiator_depth = int_param("initiator_depth", initiator_depth, 0, 255)
        self.first_comm_id = int_param("first_comm_id", first_comm_id, 1, (1 << 32) - 1)
        self.psn_seed = int_param("psn_seed", psn_seed, 1, (1 << 24) - 1)
        super().__init__({
            "i": In(stream.Signature(MAD_RECORD)),
            "local_ip": In(32),
            "region": In(I.REGION.layout),
            "qp_req": Out(stream.Signature(0)),
            "qp_grant": In(stream.Signature(QP_GRANT)),
            "qp_free": Out(stream.Signature(24)),
            "o": Out(stream.Signature(REPLY_RECORD)),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        N = self.connections
        m.submodules.table = table = Memory(shape=CONNECTION, depth=N, init=[])
        rd, wr = table.read_port(domain="sync"), table.write_port()
        s = _State(N, self.first_comm_id, self.psn_seed)
        rec = self.i.payload
        m.d.comb += self.o.payload.eq(s.out)

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.i.valid):
                    m.d.sync += [s.idx.eq(0), s.ev.eq(0), s.hit.eq(0), s.stale.eq(0),
                                 s.free_ok.eq(0)]
                    m.next = "SCAN"
            with m.State("SCAN"):
                self._scan(m, s, rd, rec)
                with m.If(s.idx == N):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                self._decide(m, s, wr, rec)
            with m.State("QP_REQ"):
                m.d.comb += self.qp_req.valid.eq(1)
                with m.If(self.qp_req.ready):
                    m.next = "QP_WAIT"
            with m.State("QP_WAIT"):
                m.d.comb += self.qp_grant.ready.eq(1)
                with m.If(self.qp_grant.valid):
                    self._take(m, s, wr, rec, self.qp_grant.payload)
                    m.next = "SEND"
            with m.State("FREE"):
                m.d.comb += [self.qp_free.valid.eq(1), self.qp_free.payload.eq(s.hit_e.qpn)]
                with m.If(self.qp_free.ready):
                    m.next = "DONE"
            with m.State("SEND"):
                m.d.comb += self.o.valid.eq(1)
                with m.If(self.o.ready):
                    self._count(m, "tx_mads")
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += self.i.ready.eq(1)
                self._count(m, "rx_mads")
                m.next = "IDLE"
        return m

    # ---- matching

    def _scan(self, m, s, rd, rec):
        """One table entry read per cycle (``idx``), compared the cycle after (``ev``): the
        first entry the message names, whether the sender's QP has a live connection, the first
        free entry."""
        N = self.connections
        m.d.comb += rd.addr.eq(s.idx)
        m.d.sync += [s.idx.eq(s.idx + 1), s.ev.eq(s.idx < N), s.ev_idx.eq(s.idx)]
        e = rd.data
        live = e.state != ConnState.FREE
        attr = rec.hdr.attribute_id
        by_id = e.local_comm_id == rec.remote_comm_id
        by_peer = (e.peer_ip == rec.src_ip) & (e.remote_comm_id == rec.local_comm_id)
        use_peer = (attr == I.ATTR_REQ) | ((attr == I.ATTR_REJ) & (rec.remote_comm_id == 0))
        with m.If(s.ev):
            with m.If(live & Mux(use_peer, by_peer, by_id) & ~s.hit):
                m.d.sync += [s.hit.eq(1), s.hit_idx.eq(s.ev_idx), s.hit_e.eq(e)]
            with m.If(live & (e.state != ConnState.TIMEWAIT) & (e.peer_ip == rec.src_ip)
                      & (e.peer_qpn == rec.local_qpn)):
                m.d.sync += s.stale.eq(1)
            with m.If(~live & ~s.free_ok):
                m.d.sync += [s.free_ok.eq(1), s.free_idx.eq(s.ev_idx)]

    # ---- deciding

    def _reply(self, s, rec, kind, local, remote, *, tid=None, reason=0, message=0):
        """Assignments of the reply register: ``kind`` to the MAD's sender."""
        out = s.out
        return [out.kind.eq(kind), out.dst_ip.eq(rec.src_ip), out.dst_qp.eq(rec.src_qp),
                out.pkey.eq(rec.pkey),
                out.transaction_id.eq(rec.hdr.transaction_id if tid is None else tid),
                out.class_specific.eq(0), out.hdr_reserved.eq(0), out.attribute_modifier.eq(0),
                out.local_comm_id.eq(local), out.remote_comm_id.eq(remote),
                out.message.eq(message), out.reason.eq(reason)]

    def _rep(self, s, rec, e):
        """The REP of connection ``e`` (a view of :data:`CONNECTION`)."""
        out = s.out
        return self._reply(s, rec, ReplyKind.REP, e.local_comm_id, e.remote_comm_id,
                           tid=e.tid) + [
            out.local_qpn.eq(e.qpn), out.starting_psn.eq(e.psn),
            out.responder_resources.eq(e.responder_resources),
            out.initiator_depth.eq(e.initiator_depth), out.region.eq(self.region)]

    def _count(self, m, name):
        m.d.comb += getattr(self, name).eq(1)

    def _reject_req(self, m, s, rec, reason, local=0, counter="req_rejected"):
        m.d.sync += self._reply(s, rec, ReplyKind.REJ, local, rec.local_comm_id,
                                reason=reason, message=I.MsgResponse.REQ)
        self._count(m, counter)
        m.next = "SEND"

    def _decide(self, m, s, wr, rec):
        """The decision, the cycle after the scan: the reply, the table write, what follows."""
        attr, e = rec.hdr.attribute_id, s.hit_e
        # the connection the message names, as the model's _mine finds it (states apart)
        mine = s.hit & (e.peer_ip == rec.src_ip) & ((e.remote_comm_id == 0) |
                                                    (e.remote_comm_id == rec.local_comm_id))
        m.d.comb += [wr.addr.eq(s.hit_idx), wr.data.eq(e)]
        m.next = "DONE"
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
            live = mine & (e.state != ConnState.TIMEWAIT)
            with m.If(live):
                self._count(m, "rejected")
            with m.Else():
                self._count(m, "rej_unknown")
            with m.If(live & (e.state == ConnState.REP_SENT)):
                m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.FREE)]
                m.next = "FREE"
            with m.Elif(live):
                m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.TIMEWAIT)]
        with m.Elif(attr == I.ATTR_REP):
            m.d.sync += self._reply(s, rec, ReplyKind.REJ, 0, rec.local_comm_id,
                                    reason=I.RejReason.INVALID_COMM_ID,
                                    message=I.MsgResponse.REP)
            self._count(m, "rep_unknown")
            m.next = "SEND"
        with m.Elif(attr == I.ATTR_DREP):
            self._count(m, "drep_unknown")

    def _decide_get_set(self, m, s, rec):
        hdr = rec.hdr
        with m.If((hdr.class_version == I.CM_CLASS_VERSION) & (hdr.method == I.METHOD_GET)
                  & (hdr.attribute_id == I.ATTR_CLASS_PORT_INFO)):
            m.d.sync += self._reply(s, rec, ReplyKind.CLASS_PORT_INFO, 0, 0)
            m.d.sync += [s.out.class_specific.eq(hdr.class_specific),
                         s.out.hdr_reserved.eq(hdr.reserved),
                         s.out.attribute_modifier.eq(hdr.attribute_modifier)]
            self._count(m, "class_port_info")
            m.next = "SEND"
        with m.Else():
            self._count(m, "unanswered_get_set")

    def _decide_rtu_mra(self, m, s, wr, rec, mine):
        e = s.hit_e
        with m.If(rec.hdr.attribute_id == I.ATTR_MRA):
            # an MRA of our REP: the REP's timer waits longer (the timers come later)
            with m.If(~(mine & (e.state == ConnState.REP_SENT)
                        & (rec.message == I.MsgResponse.REP))):
                self._count(m, "mra_unknown")
        with m.Elif(mine & (e.state == ConnState.REP_SENT)):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.ESTABLISHED)]
            self._count(m, "established")
        with m.Elif(mine & (e.state == ConnState.ESTABLISHED)):
            self._count(m, "rtu_duplicate")
        with m.Else():
            self._count(m, "rtu_unknown")

    def _decide_dreq(self, m, s, wr, rec, mine):
        e = s.hit_e
        with m.If(mine & (rec.remote_qpn == e.qpn)):
            with m.If(e.state == ConnState.TIMEWAIT):
                self._count(m, "dreq_duplicate")
            with m.Else():
                m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.TIMEWAIT)]
            m.d.sync += self._reply(s, rec, ReplyKind.DREP, e.local_comm_id, e.remote_comm_id)
        with m.Else():
            self._count(m, "dreq_unknown")
            m.d.sync += self._reply(s, rec, ReplyKind.DREP, rec.remote_comm_id,
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
                m.d.sync += self._rep(s, rec, e)
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
        """The pool's answer to a REQ that passed: the new connection and its REP, or REJ
        ``NO_QP``."""
        new = Signal(CONNECTION)
        m.d.comb += [new.state.eq(ConnState.REP_SENT), new.local_comm_id.eq(s.next_cid),
                     new.remote_comm_id.eq(rec.local_comm_id), new.peer_ip.eq(rec.src_ip),
                     new.peer_qpn.eq(rec.local_qpn), new.qpn.eq(grant.qpn), new.psn.eq(s.psn),
                     new.responder_resources.eq(_min(self.responder_resources,
                                                     rec.initiator_depth)),
                     new.initiator_depth.eq(_min(self.initiator_depth, rec.responder_resources)),
                     new.tid.eq(rec.hdr.transaction_id)]
        with m.If(grant.ok):
            m.d.comb += [wr.addr.eq(s.free_idx), wr.data.eq(new), wr.en.eq(1)]
            m.d.sync += self._rep(s, rec, new)
            m.d.sync += [s.next_cid.eq(Mux(s.next_cid == 0xFFFFFFFF, 1, s.next_cid + 1)),
                         s.psn.eq(Mux(s.psn[0], (s.psn >> 1) ^ PSN_TAPS, s.psn >> 1))]
        with m.Else():
            self._reject_req(m, s, rec, I.RejReason.NO_QP)


class _State:
    """The passive side's registers."""

    def __init__(self, n, first_comm_id, psn_seed):
        self.idx = Signal(range(n + 1))          # the entry read now
        self.ev = Signal()                       # an entry read last cycle is compared now
        self.ev_idx = Signal(range(n))
        self.hit = Signal()                      # the entry the message names ...
        self.hit_idx = Signal(range(n))
        self.hit_e = Signal(CONNECTION)          # ... and its contents
        self.stale = Signal()                    # the sender's QP has a live connection
        self.free_ok = Signal()                  # a free entry ...
        self.free_idx = Signal(range(n))         # ... the first
        self.out = Signal(REPLY_RECORD)          # the reply
        self.next_cid = Signal(32, init=first_comm_id)     # our next communication ID
        self.psn = Signal(24, init=psn_seed)               # our next starting PSN
