"""The connection manager's control: what a request does, carried out."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_checks import CmChecks
from rocegen.gateware.roce.cm.cm_context import CmContext
from rocegen.gateware.roce.cm.cm_defs import (
    ACK_ACK,
    ACK_NAK,
    ACK_NO_QP,
    CM_PORT,
    COUNTERS,
    REQ_CLOSE_QP,
    REQ_ERROR,
    REQ_MODIFY_QP_RTS,
    REQ_NULL,
    REQ_OPEN_QP,
    REQ_QUERY,
    REQ_SEND_QP_INFO,
    int_param,
    read_params,
)
from rocegen.gateware.roce.cm.cm_records import LOOKUP
from rocegen.gateware.roce.frontend.pattern_sink import PATTERN_COUNTS
from rocegen.gateware.roce.layouts import (
    CM_DATAGRAM,
    CM_RECORD_WRITE,
    CM_REPLY,
    CM_RUN,
    MAX_QPS,
    QPN_BASE,
    TRAFFIC_CONFIG,
    QpState,
)
from rocegen.gateware.roce.read.read_layouts import MAX_RD_ATOMIC, READ_LIMIT
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.gateware.roce.responder.resp_layouts import RESP_QP_CONFIG
from rocegen.wire.cm import ATOMIC_CAPS, QUERY_REPLY, READ_DEPTH_MAX, READ_DEPTHS
from rocegen.wire.headers import CM

__all__ = ["CmControl", "CONTROL_COUNTERS"]

#: The counter pulses of :class:`CmControl`: all of the connection manager's but ``replies``.
CONTROL_COUNTERS = tuple(name for name in COUNTERS if name != "replies")


class CmControl(wiring.Component):
    """Checks a held request datagram against the records of its QP, decides what it does (the
    rules are those of :class:`~rocegen.gateware.roce.cm.cm.ConnectionManager`) and carries it out:
    QP table and record writes, a traffic generator run, a reply, counter pulses. The checks
    that need no record are made by :class:`~rocegen.gateware.roce.cm.cm_checks.CmChecks`, the new
    context worked out by :class:`~rocegen.gateware.roce.cm.cm_context.CmContext` (submodules).

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    allow_net, port
        As for :class:`~rocegen.gateware.roce.cm.cm_checks.CmChecks`.
    regions : bool
        ACKs of OPEN_QP, SEND_QP_INFO and MODIFY_QP_RTS name the QP's memory region (ports
        ``cfg_qp`` / ``cfg``).
    query : bool
        QUERY is answered with the pattern sink's counters (port ``counts``); without it,
        QUERY is an unknown request.
    reads, max_rd_atomic, rd_depth : bool, int, int
        With ``reads``: ACKs of OPEN_QP and SEND_QP_INFO state the READ depths and port
        ``rd_limit`` sets each QP's READ limit, as for
        :class:`~rocegen.gateware.roce.cm.cm.ConnectionManager`.
    atomics : None, ``"little"`` or ``"big"``
        With ``regions``: stated in ``tx_atomic`` of the ACKs that name a region, as for
        :class:`~rocegen.gateware.roce.cm.cm.ConnectionManager`.
    default_pmtu, default_timeout, default_retry, default_rnr_retry, ack_every_log2 : int
        Context defaults, as for :class:`~rocegen.gateware.roce.cm.cm_context.CmContext`.

    Ports
    -----
    i : In(stream.Signature(CM_DATAGRAM))
        The request, held until ``i.ready`` (one cycle) says it is done with: every write it
        made taken and its reply sent.
    lookup : Out(LOOKUP)
        The records of the QP named by ``rem_qpn`` and the lowest free QP
        (:class:`~rocegen.gateware.roce.cm.cm_records.CmRecords`).
    record : Out(stream.Signature(CM_RECORD_WRITE, always_ready=True))
        The record update of a request that writes a context (owner: the sender), one cycle
        after its decision, from registers.
    reply : Out(stream.Signature(CM_REPLY, always_ready=True))
        The reply of a request that has one, in the cycle of its decision.
    reply_busy : In(1)
        The reply sender is busy: the request is not released before it is low.
    local_ip : In(32)
        Our address (sampled in the cycle of the decision for the reply).
    tclass : In(TRAFFIC_CONFIG)
        The traffic class (DSCP, ECN) of the QPs an OPEN_QP opens.
    qp_ctl, qp_psn : Out(stream.Signature(CONTEXT_WRITE)), Out(stream.Signature(PSN_WRITE))
        QP table context and first-PSN writes: offered from registers one cycle after the
        decision and held until taken.
    run : Out(stream.Signature(CM_RUN, always_ready=True))
        An accepted test-traffic request (``qp`` the QP it names), in the cycle of its
        decision, for :class:`~rocegen.gateware.roce.cm.cm_traffic.CmTraffic`.
    gen_busy : In(1)
        The previous run is still offered to the generator: a new one is refused (``drop_gen``;
        requests are never held up by the generator).
    pool_idle : Out(1)
        No request is offered, none is decided, no QP is being taken. Another manager sharing
        the pool may change ``reserved`` from the next cycle when this is high and no request is
        offered in the next cycle either (the connection manager sees to that): the look-up of a
        request, made the cycle before its decision (its free QP, the region read by
        ``cfg_qp``, ``open_ok``), then sees the pool its decision sees.
    cfg_qp, cfg : Out(range(num_qps)), In(RESP_QP_CONFIG), with ``regions`` only
        A read port of the responder's configuration table (``cfg`` one cycle after
        ``cfg_qp``): the QP an OPEN_QP would take, else the QP ``rem_qpn`` names. An ACK of
        OPEN_QP, SEND_QP_INFO or MODIFY_QP_RTS carries its R_Key in ``loc_rkey``, its base in
        ``loc_vaddr`` and its length in ``dma_length`` (2^32 - 1 for a region of 2^32 bytes).
    counts : In(PATTERN_COUNTS), with ``query`` only
        The pattern sink's counters: an ACK of QUERY carries them in bytes 52-63
        (:data:`~rocegen.wire.cm.QUERY_REPLY`), as they are in the cycle of the decision.
    rd_limit : Out(stream.Signature(READ_LIMIT, always_ready=True)), with ``reads`` only
        The READ limit of QP ``qp``, one cycle after the decision of an ACKed OPEN_QP or
        SEND_QP_INFO (the limit the ACK states in byte 56) or CLOSE_QP (``max_rd_atomic``),
        from registers.
    rx_requests, drop_length, ... : Out(1)
        The counter pulses of :data:`CONTROL_COUNTERS`, in the cycle of the decision.

    Behaviour
    ---------
    If ``i.valid`` rises in cycle t, the records are read in t and the decision is taken in
    t + 1; the writes are offered in t + 2 and the reply in t + 1; ``i.ready`` is high in the
    first cycle from t + 2 on in which no write is offered and ``reply_busy`` is low.
    """

    def __init__(self, num_qps, *, allow_net=None, port=CM_PORT, regions=False, query=False,
                 reads=False, max_rd_atomic=MAX_RD_ATOMIC, rd_depth=0, atomics=None,
                 **context_defaults):
        self.atomics = atomics
        self.num_qps = int_param("num_qps", num_qps, 1, MAX_QPS)
        for name, value in (("regions", regions), ("query", query)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        self.regions, self.query = regions, query
        self.reads, self.max_rd_atomic, self.rd_depth = read_params(reads, max_rd_atomic,
                                                                    rd_depth)
        self._checks = CmChecks(allow_net=allow_net, port=port)
        self._context = CmContext(**context_defaults)
        members = {
            "i": In(stream.Signature(CM_DATAGRAM)),
            "lookup": Out(LOOKUP),
            "record": Out(stream.Signature(CM_RECORD_WRITE, always_ready=True)),
            "reply": Out(stream.Signature(CM_REPLY, always_ready=True)),
            "reply_busy": In(1),
            "local_ip": In(32),
            "tclass": In(TRAFFIC_CONFIG),
            "qp_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "qp_psn": Out(stream.Signature(PSN_WRITE)),
            "run": Out(stream.Signature(CM_RUN, always_ready=True)),
            "gen_busy": In(1),
            "pool_idle": Out(1),
        }
        if regions:
            members.update({"cfg_qp": Out(range(num_qps)), "cfg": In(RESP_QP_CONFIG)})
        if query:
            members["counts"] = In(PATTERN_COUNTS)
        if reads:
            members["rd_limit"] = Out(stream.Signature(READ_LIMIT, always_ready=True))
        members.update({name: Out(1) for name in CONTROL_COUNTERS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        dg, lk = self.i.payload, self.lookup
        req = dg.req
        kind = req.req_type
        idx = Signal(range(n))              # the QP named by rem_qpn
        m.d.comb += [lk.qpn.eq(req.rem_qpn), lk.src_ip.eq(dg.src_ip),
                     idx.eq((req.rem_qpn - QPN_BASE)[:(n - 1).bit_length()])]
        ctx = m.submodules.context = self._context
        m.d.comb += [ctx.req.eq(req), ctx.current.eq(lk.context), ctx.free_idx.eq(lk.free_idx),
                     ctx.tclass.eq(self.tclass)]

        # checks on the datagram alone: made while the records are read, registered
        chk = m.submodules.checks = self._checks
        m.d.comb += [chk.datagram.eq(dg), chk.local_ip.eq(self.local_ip),
                     chk.any_free.eq(lk.any_free)]
        c = chk.checks

        # ---- outputs held in registers ----
        for s in (self.qp_ctl, self.qp_psn):
            with m.If(s.ready):
                m.d.sync += s.valid.eq(0)
        rec_we, take, release = Signal(), Signal(), Signal()    # a record update, one cycle late
        m.d.sync += [rec_we.eq(0), take.eq(0), release.eq(0)]
        r = self.record
        m.d.comb += [r.valid.eq(rec_we), r.payload.qp.eq(self.qp_ctl.payload.qp),
                     r.payload.context.eq(self.qp_ctl.payload.context),
                     r.payload.owner.eq(dg.src_ip), r.payload.take.eq(take),
                     r.payload.release.eq(release)]

        ack = Signal(3)                     # the reply's ack_type, decided in EXEC
        # the payloads of the reply and of a generator run (their valid in EXEC): the reply
        # with our side in loc_*, the request's loc_* echoed in rem_*
        rp = self.reply.payload
        f = rp.fields
        m.d.comb += [
            f.info_valid.eq(1), f.req_type.eq(kind), f.ack_valid.eq(1), f.ack_type.eq(ack),
            f.loc_qpn.eq(Mux(c.opening, Mux(c.open_ok, QPN_BASE + lk.free_idx, 0),
                             req.rem_qpn)),
            f.loc_psn.eq(Mux(c.opening, req.loc_psn, req.rem_psn)),
            f.loc_rkey.eq(Mux(c.opening, 0, req.rem_rkey)),
            f.loc_vaddr.eq(Mux(c.opening, 0, req.rem_vaddr)),
            f.loc_ip.eq(self.local_ip),
            f.rem_qpn.eq(req.loc_qpn), f.rem_psn.eq(req.loc_psn),
            f.rem_rkey.eq(req.loc_rkey), f.rem_vaddr.eq(req.loc_vaddr),
            f.rem_ip.eq(req.loc_ip), f.listening_port.eq(req.listening_port),
            rp.src_ip.eq(self.local_ip), rp.dst_ip.eq(dg.src_ip),
            rp.dst_port.eq(Mux(req.listening_port != 0, req.listening_port, dg.src_port)),
        ]
        m.d.comb += [self.run.payload.qp.eq(idx), self.run.payload.req.eq(req)]
        if self.regions or self.query:
            self._reply_extras(m, kind, ack, idx)
        if self.reads:
            self._read_depths(m, kind, ack, idx)

        return self._elaborate_fsm(m, ack, c, ctx, dg, idx, kind, lk, rec_we, release, req, take)

    def _elaborate_fsm(self, m, ack, c, ctx, dg, idx, kind, lk, rec_we, release, req, take):
        """The control state machine: a request's records read and checked, the QP table written,
        the answer sent."""
        pulse = {name: getattr(self, name) for name in CONTROL_COUNTERS}
        with m.FSM():
            with m.State("WAIT"):
                m.d.comb += self.pool_idle.eq(~self.i.valid & ~take)
                # the records of rem_qpn are read and checked in this cycle
                with m.If(self.i.valid):
                    m.next = "EXEC"

            with m.State("EXEC"):
                m.d.comb += pulse["rx_requests"].eq(1)
                reply = Signal()
                do_ctx = Signal()
                # the writes' values depend on the request kind alone, their valid on the checks
                m.d.sync += [self.qp_ctl.payload.qp.eq(Mux(c.opening, lk.free_idx, idx)),
                             self.qp_ctl.payload.context.eq(ctx.context),
                             self.qp_psn.payload.qp.eq(lk.free_idx),
                             self.qp_psn.payload.psn.eq(req.loc_psn)]
                peer_checked = (kind == REQ_OPEN_QP) | (kind == REQ_SEND_QP_INFO)
                with m.If(~dg.length_ok):
                    m.d.comb += pulse["drop_length"].eq(1)
                with m.Elif(c.addr_bad):
                    m.d.comb += pulse["drop_ip"].eq(1)
                with m.Elif(req.ack_valid):
                    m.d.comb += pulse["drop_unknown"].eq(1)
                with m.Elif(req.info_valid):
                    with m.Switch(kind):
                        with m.Case(REQ_NULL, REQ_ERROR):
                            pass
                        with m.Case(REQ_OPEN_QP, REQ_SEND_QP_INFO, REQ_MODIFY_QP_RTS,
                                    REQ_CLOSE_QP):
                            m.d.comb += [reply.eq(1), ack.eq(ACK_NAK)]
                            with m.If(~c.src_allowed | (peer_checked & ~c.peer_allowed)):
                                m.d.comb += pulse["nak_not_allowed"].eq(1)
                            with m.Elif(kind == REQ_OPEN_QP):
                                with m.If(~c.ext_ok):
                                    m.d.comb += pulse["nak_illegal"].eq(1)
                                with m.Elif(~lk.any_free):
                                    m.d.comb += [pulse["no_qp"].eq(1), ack.eq(ACK_NO_QP)]
                                with m.Else():
                                    m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                                    m.d.sync += [take.eq(1), self.qp_psn.valid.eq(1)]
                            with m.Elif(~lk.is_open):
                                m.d.comb += pulse["nak_illegal"].eq(1)
                            with m.Elif(~lk.owner_ok):
                                m.d.comb += pulse["nak_owner"].eq(1)
                            with m.Elif(kind == REQ_SEND_QP_INFO):
                                with m.If(~c.ext_ok):
                                    m.d.comb += pulse["nak_illegal"].eq(1)
                                with m.Else():
                                    m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                            with m.Elif(kind == REQ_MODIFY_QP_RTS):
                                with m.If(lk.state == QpState.RTS):
                                    m.d.comb += ack.eq(ACK_ACK)
                                with m.Elif(lk.state == QpState.RTR):
                                    m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                                with m.Else():
                                    m.d.comb += pulse["nak_illegal"].eq(1)
                            with m.Else():                       # close
                                m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                                m.d.sync += release.eq(1)
                        if self.query:
                            with m.Case(REQ_QUERY):
                                m.d.comb += [reply.eq(1), ack.eq(ACK_ACK)]
                                with m.If(~c.src_allowed):
                                    m.d.comb += [pulse["nak_not_allowed"].eq(1), ack.eq(ACK_NAK)]
                        with m.Default():
                            m.d.comb += pulse["drop_unknown"].eq(1)
                with m.Elif(req.txmeta_valid):
                    with m.If(~req.start):
                        pass
                    with m.Elif(~c.src_allowed):
                        m.d.comb += pulse["nak_not_allowed"].eq(1)
                    with m.Elif(~lk.is_open):
                        m.d.comb += pulse["nak_illegal"].eq(1)
                    with m.Elif(~lk.owner_ok):
                        m.d.comb += pulse["nak_owner"].eq(1)
                    with m.Elif((lk.state != QpState.RTS) | c.gen_bad):
                        m.d.comb += pulse["nak_illegal"].eq(1)
                    with m.Elif(self.gen_busy):
                        m.d.comb += pulse["drop_gen"].eq(1)
                with m.Else():
                    m.d.comb += pulse["drop_unknown"].eq(1)
                with m.If(do_ctx):
                    m.d.sync += [self.qp_ctl.valid.eq(1), rec_we.eq(1)]

                # a run for the generator: its valid by the checks (the same as in the chain
                # above, as one gate)
                m.d.comb += self.run.valid.eq(
                    dg.length_ok & ~c.addr_bad & ~req.ack_valid & ~req.info_valid &
                    req.txmeta_valid & req.start & c.src_allowed & lk.is_open & lk.owner_ok &
                    (lk.state == QpState.RTS) & ~c.gen_bad & ~self.gen_busy)
                m.d.comb += self.reply.valid.eq(reply)
                m.next = "DRAIN"

            with m.State("DRAIN"):
                with m.If(~self.reply_busy & ~self.qp_ctl.valid & ~self.qp_psn.valid):
                    m.d.comb += self.i.ready.eq(1)
                    m.next = "WAIT"
        return m

    def _reply_extras(self, m, kind, ack, idx):
        """The reply fields of the responder: the QP's region in the ACKs that name it, the
        pattern sink's counters in the ACK of QUERY (replacing the zero bytes 52-63)."""
        f = self.reply.payload.fields
        acked = ack == ACK_ACK
        if self.regions:
            lk = self.lookup
            m.d.comb += self.cfg_qp.eq(Mux(kind == REQ_OPEN_QP, lk.free_idx, idx))
            mr = self.cfg.mr
            with m.If(acked & ((kind == REQ_OPEN_QP) | (kind == REQ_SEND_QP_INFO) |
                               (kind == REQ_MODIFY_QP_RTS))):
                m.d.comb += [f.loc_rkey.eq(mr.rkey), f.loc_vaddr.eq(mr.base),
                             f.dma_length.eq(Mux(mr.length[32], 0xFFFF_FFFF, mr.length[:32])),
                             f.tx_atomic.eq(ATOMIC_CAPS[self.atomics])]
        if self.query:
            q = Signal(QUERY_REPLY.layout)
            m.d.comb += [q.checked.eq(self.counts.checked), q.wrong.eq(self.counts.wrong)]
            tail = CM.from_lanes(QUERY_REPLY.to_lanes(q))
            with m.If(acked & (kind == REQ_QUERY)):
                m.d.comb += [f.dma_length.eq(tail.dma_length),
                             f.n_transfers.eq(tail.n_transfers), f.frequency.eq(tail.frequency)]

    def _read_depths(self, m, kind, ack, idx):
        """The READ depths in bytes 56-57 of the ACKs of OPEN_QP and SEND_QP_INFO (zero in
        every other reply), and the READ limit they set (or CLOSE_QP resets) on ``rd_limit``."""
        mx = self.max_rd_atomic
        f = self.reply.payload.fields
        host = READ_DEPTHS.from_lanes(CM.to_lanes(self.i.payload.req))
        limit = Signal(range(mx + 1))       # min(max_rd_atomic, the host's rd_depth), 0: 1
        m.d.comb += limit.eq(Mux(host.rd_depth == 0, 1, Mux(host.rd_depth < mx,
                                                             host.rd_depth, mx)))
        ours = Signal(READ_DEPTHS.layout)
        m.d.comb += [ours.rd_atomic.eq(limit),
                     ours.rd_depth.eq(min(self.rd_depth, READ_DEPTH_MAX))]
        tail = CM.from_lanes(READ_DEPTHS.to_lanes(ours))
        acked = self.reply.valid & (ack == ACK_ACK)
        sets = (kind == REQ_OPEN_QP) | (kind == REQ_SEND_QP_INFO)
        with m.If(acked & sets):
            m.d.comb += f.n_transfers.eq(tail.n_transfers)
        out = self.rd_limit
        m.d.sync += [out.valid.eq(acked & (sets | (kind == REQ_CLOSE_QP))),
                     out.payload.qp.eq(Mux(kind == REQ_OPEN_QP, self.lookup.free_idx, idx)),
                     out.payload.limit.eq(Mux(kind == REQ_CLOSE_QP, mx, limit))]
