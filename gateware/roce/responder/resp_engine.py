"""The responder's per-request pipeline: state read, checks, actions and state written, actions
handed on."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import PSN_WRITE, QP_CONTEXT, QPN_BASE, check_num_qps
from rocegen.gateware.roce.responder.resp_check import RespCheck, psn_place
from rocegen.gateware.roce.responder.resp_decide import RespDecide
from rocegen.gateware.roce.responder.resp_layouts import (
    CNP_MARK,
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
    RESP_HEADER,
    RESP_PLACE,
    RESP_QP_CONFIG,
    RESP_READ_JOB,
    RESP_RESPONSE,
    RESP_STATE,
    RespVerdict,
)
from rocegen.gateware.roce.responder.resp_precheck import RESP_FACTS, RESP_REQUEST

__all__ = ["RespEngine", "SEQ_BITS", "TAGGED_COMPLETION"]

#: Bits of the packet sequence numbers that order completions after their data.
SEQ_BITS = 16
#: A receive completion with the sequence number of the packet whose data it must follow.
TAGGED_COMPLETION = data.StructLayout({"cpl": RECV_COMPLETION, "seq": SEQ_BITS})

assert QPN_BASE % 256 == 0          # a QP's index is the low byte of its number


class RespEngine(wiring.Component):
    """The requests' headers in, one decision each: its QP's responder state, configuration,
    context and first receive buffer read, :class:`~rocegen.gateware.roce.responder.resp_check.RespCheck`
    and :class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide` applied a cycle apart, the new
    state written, and the placement, response, completion and receive-queue actions offered.

    Parameters
    ----------
    num_qps : int
        QPs (1..256, numbered from 256).
    config_init : list of dict or None
        Each QP's configuration after reset (:data:`RESP_QP_CONFIG` values; default: no region).
    ack_every : int
        ACKs by count besides AckReq (:class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide`;
        default 0: on AckReq only).

    Ports
    -----
    hdr : In(stream.Signature(RESP_REQUEST))
        The requests' headers and their facts
        (:class:`~rocegen.gateware.roce.responder.resp_precheck.RespPrecheck`), in the order of their
        packets (the placement stage's).
    ctx_qp, ctx : Out(range(num_qps)), In(QP_CONTEXT)
        A QP table read port (context one cycle after the QP).
    psn_set : In(stream.Signature(PSN_WRITE, always_ready=True))
        A QP set up (again) with this first PSN: its responder state starts afresh (ePSN the
        PSN, MSN 0, no message open, no error).
    cfg_w : In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True))
        Configuration writes (QPs outside the table are ignored).
    cfg_qp, cfg : In(range(num_qps)), Out(RESP_QP_CONFIG)
        A second read port of the configuration (one cycle after the QP), for the connection
        manager.
    cfg2_qp, cfg2 : In(range(num_qps)), Out(RESP_QP_CONFIG)
        A third, for the IB CM.
    rq_qp, rq_valid, rq_head : Out(range(num_qps)), In(1), In(RECV_POST)
        The receive queues' read port (one cycle after the QP).
    rd_qp, rd_full : Out(range(num_qps)), In(1)
        The READ queues' read port (one cycle after the QP): the QP's queue is full.
    res_psn, res_hit, res_orig : Out(24), In(1), In(64)
        The atomic results' lookup (:class:`~rocegen.gateware.roce.responder.resp_results.RespResults`,
        with the QP on ``rd_qp``; one cycle after): the results keep one for the PSN, its value.
    rd_push : Out(stream.Signature(RESP_READ_JOB, always_ready=True))
        A READ to queue (executed, or a duplicate executed again), in the cycle it acts: the
        QP's queue had room when it was read (the next request of the QP is taken a cycle
        later, so that it reads the queue after the push).
    rq_pop : Out(stream.Signature(8, always_ready=True))
    rq_flush : Out(stream.Signature(8, always_ready=True))
        Flush a QP's receive queue (in the cycle after the request that put the QP in error
        acts, with its other actions): the queue ends the flush at the QP's tail of that cycle,
        beside the other QPs' requests, which go on.
    act : Out(stream.Signature(RESP_PLACE))
        One placement record per request, in order.
    resp : Out(stream.Signature(RESP_RESPONSE))
    cpl : Out(stream.Signature(TAGGED_COMPLETION))
        Receive completions, each with the sequence number (count of requests, modulo
        2^:data:`SEQ_BITS`, this one included) of the request whose placement it must follow.
    decided, verdict : Out(1), Out(RespVerdict)
        A pulse per request with what became of it (``verdict`` from a register).
    atomic : Out(1)
        With ``decided``: the request is an atomic.
    ce : Out(stream.Signature(CNP_MARK, always_ready=True))
        A pulse, in the cycle after ``decided``, for a request that arrived marked ECN CE
        (``RESP_HEADER.ecn`` 0b11) from its QP's peer (``RespCheck.from_peer``: whatever its
        verdict, duplicates and NAKed requests included), with where the QP's CNP goes.
    seq : Out(SEQ_BITS)
        The sequence number of the newest request whose actions are offered (the receive
        queues' flushed completions follow it).

    Behaviour
    ---------
    A pipeline of three stages and an output register, a request in each:

    * TAKE: the header at the head of ``hdr`` addresses the state and configuration memories,
      the QP table and the receive queues, and is registered.
    * CHECK: ``RespCheck`` on what the reads return; the verdict registered.
    * ACT: ``RespDecide`` on the verdict and the same reads (their addresses held): the new
      state written, the actions registered into the output register. It waits while the
      output register still holds actions of the request before, or while a ``psn_set`` of
      another QP takes the state memory's write port.
    * The output register offers the actions (each to its port, independently) until all are
      taken.

    A request is taken in the cycle its predecessor acts (or later), so a request is decided
    every two cycles. A request taken while its predecessor of the same QP acts reads that QP's
    state before it is written: CHECK then takes the state the predecessor leaves from a
    register (and the place of its PSN against the new ePSN, worked out in the TAKE cycle from
    the predecessor's PSN and verdict), ACT reads it from the memory. A request that would
    read the receive queue its predecessor pops in that cycle waits one cycle more (the
    queue's head moves with the pop): SEND FIRST/ONLY and WRITEs with immediate of one QP take
    three cycles each; so does a READ, whose push fills the READ queue the next one reads
    (and whose ePSN moves by its responses' PSNs, not by one as the forwarded place
    assumes), and an atomic. Latency: a header offered in cycle t (the pipeline empty) has its actions
    offered in cycle t + 3.

    A ``psn_set`` takes effect in the cycle after it comes (the state memory's write port is
    its, an ACT of another QP waits). One naming the QP of a request from the cycle it is taken
    to the cycle it acts makes its decision void (nothing placed, answered, completed, popped
    or queued, the state not written: the requester resends it); one while the request's actions
    wait in the output register withdraws those not yet taken (the placement record then
    writes nothing).
    """

    def __init__(self, num_qps, *, config_init=None, ack_every=0):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        self._check = RespCheck()
        self._decide = RespDecide(ack_every=ack_every)
        self._config = Memory(shape=RESP_QP_CONFIG, depth=num_qps, init=config_init or [])
        self._state = Memory(shape=RESP_STATE, depth=num_qps, init=[])
        super().__init__({
            "hdr": In(stream.Signature(RESP_REQUEST)),
            "ctx_qp": Out(range(num_qps)), "ctx": In(QP_CONTEXT),
            "psn_set": In(stream.Signature(PSN_WRITE, always_ready=True)),
            "cfg_w": In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True)),
            "cfg_qp": In(range(num_qps)), "cfg": Out(RESP_QP_CONFIG),
            "cfg2_qp": In(range(num_qps)), "cfg2": Out(RESP_QP_CONFIG),
            "rq_qp": Out(range(num_qps)), "rq_valid": In(1), "rq_head": In(RECV_POST),
            "rd_qp": Out(range(num_qps)), "rd_full": In(1),
            "res_psn": Out(24), "res_hit": In(1), "res_orig": In(64),
            "rd_push": Out(stream.Signature(RESP_READ_JOB, always_ready=True)),
            "rq_pop": Out(stream.Signature(unsigned(8), always_ready=True)),
            "rq_flush": Out(stream.Signature(unsigned(8), always_ready=True)),
            "act": Out(stream.Signature(RESP_PLACE)),
            "resp": Out(stream.Signature(RESP_RESPONSE)),
            "cpl": Out(stream.Signature(TAGGED_COMPLETION)),
            "decided": Out(1), "verdict": Out(RespVerdict), "atomic": Out(1),
            "seq": Out(SEQ_BITS),
            "ce": Out(stream.Signature(CNP_MARK, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        chk = m.submodules.check = self._check
        dec = m.submodules.decide = self._decide
        m.submodules.state = self._state
        m.submodules.config = self._config
        st_r, st_w = self._state.read_port(), self._state.write_port()
        cf_r, cf_w, cf_cm, cf_ib = (self._config.read_port(), self._config.write_port(),
                                    self._config.read_port(), self._config.read_port())
        m.d.comb += [cf_cm.addr.eq(self.cfg_qp), self.cfg.eq(cf_cm.data),
                     cf_ib.addr.eq(self.cfg2_qp), self.cfg2.eq(cf_ib.data),
                     cf_w.addr.eq(self.cfg_w.payload.qp), cf_w.data.eq(self.cfg_w.payload.config),
                     cf_w.en.eq(self.cfg_w.valid & (self.cfg_w.payload.qp < n))]

        h = Signal(RESP_HEADER)             # the request in CHECK or ACT (one at a time)
        f = Signal(RESP_FACTS)              # and its headers' facts
        qp = Signal(8)
        in_table = Signal()
        stale = Signal()                    # a set-up of its QP took effect since it was taken
        checking, acting = Signal(), Signal()
        v_r, fault_r, peer_r, rd_ok_r = Signal(RespVerdict), Signal(), Signal(), Signal()
        seq = Signal(SEQ_BITS)              # requests taken
        # the state the request in CHECK follows when its predecessor was of the same QP (its
        # read came before that state was written)
        fwd, fwd_st = Signal(), Signal(RESP_STATE)
        fwd_ahead, fwd_behind = Signal(), Signal()
        # a set-up takes effect (its state written) in the cycle after it comes; `hit`: it names
        # the request in the pipeline, `withdraw`: the one whose actions wait
        ps = self.psn_set
        ps_v, ps_r = Signal(), Signal(PSN_WRITE)
        hit, withdraw = Signal(), Signal()
        m.d.sync += [ps_v.eq(ps.valid), ps_r.eq(ps.payload)]

        # the output register: what is left to hand on of the request that acted last
        place, resp, cpl = Signal(RESP_PLACE), Signal(RESP_RESPONSE), Signal(RECV_COMPLETION)
        c_seq = Signal(SEQ_BITS)
        p_act, p_resp, p_cpl, p_flush = (Signal(name=f"p_{k}") for k in
                                         ("act", "resp", "cpl", "flush"))
        busy = p_act | p_resp | p_cpl | p_flush

        # ---- ACT: done in this cycle unless the output register or the write port is taken
        void = stale | hit
        acts = Signal()
        m.d.comb += acts.eq(acting & ~busy & ~(ps_v & ~hit))

        # ---- TAKE: the head's reads (the reads held for the request in CHECK and ACT)
        head, hf = self.hdr.payload.h, self.hdr.payload.f
        head_qp = head.bth.dest_qp[:8]
        hold = checking | (acting & ~acts)
        same = acting & (head_qp == qp)     # the request acting is of the head's QP
        # (a request that may take a receive buffer or push a READ: the next of its QP waits a
        # cycle)
        may_pop = Signal()
        take = Signal()
        m.d.comb += [take.eq(self.hdr.valid & ~hold & ~(same & may_pop)),
                     self.hdr.ready.eq(take)]
        rd = Signal(8)
        m.d.comb += rd.eq(Mux(hold, qp, head_qp))
        for port in (st_r.addr, cf_r.addr, self.ctx_qp, self.rq_qp, self.rd_qp):
            m.d.comb += port.eq(rd)
        m.d.comb += self.res_psn.eq(Mux(hold, h.bth.psn, head.bth.psn))
        # the state the acting request leaves, its ePSN that of the request if it executes
        # (else unchanged: the read of the acting request is still on the port)
        after = Signal(24)
        m.d.comb += after.eq(Mux(v_r == RespVerdict.EXECUTED, h.bth.psn + 1, st_r.data.epsn))
        ahead_f, behind_f = psn_place(m, head.bth.psn, after)
        with m.If(take):
            m.d.sync += [h.eq(head), f.eq(hf), qp.eq(head_qp),
                         in_table.eq((head.bth.dest_qp[8:] == QPN_BASE >> 8) & (head_qp < n)),
                         may_pop.eq(hf.needs_rq | (hf.send & (hf.first | hf.only)) | hf.read |
                                    hf.atomic),
                         stale.eq(ps_v & (ps_r.qp == head_qp)), seq.eq(seq + 1),
                         fwd.eq(same & ~void), fwd_st.eq(dec.new_st),
                         fwd_ahead.eq(ahead_f), fwd_behind.eq(behind_f)]
        with m.Elif(hit):
            m.d.sync += stale.eq(1)
        m.d.sync += [hit.eq(ps.valid & Mux(take, ps.payload.qp == head_qp, ps.payload.qp == qp)),
                     withdraw.eq(ps.valid & Mux(acts, ps.payload.qp == qp,
                                                ps.payload.qp == resp.qp))]
        m.d.sync += [checking.eq(take), acting.eq(checking | (acting & ~acts))]

        # ---- CHECK: the verdict, registered
        cfg = cf_r.data
        ahead_m, behind_m = psn_place(m, h.bth.psn, st_r.data.epsn)
        m.d.comb += [chk.h.eq(h), chk.f.eq(f), chk.in_table.eq(in_table), chk.ctx.eq(self.ctx),
                     chk.st.eq(Mux(fwd, fwd_st, st_r.data)),
                     chk.ahead.eq(Mux(fwd, fwd_ahead, ahead_m)),
                     chk.behind.eq(Mux(fwd, fwd_behind, behind_m)),
                     chk.mr.eq(cfg.mr), chk.rq_valid.eq(self.rq_valid),
                     chk.rq_head.eq(self.rq_head), chk.rd_full.eq(self.rd_full),
                     chk.res_hit.eq(self.res_hit)]
        orig_r = Signal(64)                 # (a duplicate atomic's result, as CHECK found it)
        with m.If(checking):
            m.d.sync += [v_r.eq(chk.verdict), fault_r.eq(chk.length_fault),
                         peer_r.eq(chk.from_peer), rd_ok_r.eq(chk.rd_ok), orig_r.eq(self.res_orig)]

        # ---- ACT: the actions of the verdict; the state written (a set-up first)
        m.d.comb += [dec.verdict.eq(v_r), dec.length_fault.eq(fault_r), dec.rd_ok.eq(rd_ok_r),
                     dec.h.eq(h), dec.f.eq(f), dec.st.eq(st_r.data),
                     dec.rnr_timer.eq(cfg.rnr_timer), dec.pmtu_log2.eq(self.ctx.pmtu_log2),
                     dec.rq_head.eq(self.rq_head), dec.res_orig.eq(orig_r)]
        with m.If(ps_v):
            m.d.comb += [st_w.addr.eq(ps_r.qp), st_w.data.epsn.eq(ps_r.psn),
                         st_w.en.eq(ps_r.qp < n)]
        with m.Else():
            m.d.comb += [st_w.addr.eq(qp), st_w.data.eq(dec.new_st), st_w.en.eq(acts & ~stale)]
        return self._elaborate_stages(m, acts, c_seq, cpl, dec, h, p_act, p_cpl, p_flush, p_resp, peer_r,
                                      place, qp, resp, seq, v_r, void, withdraw)

    def _elaborate_stages(self, m, acts, c_seq, cpl, dec, h, p_act, p_cpl, p_flush, p_resp, peer_r, place,
                          qp, resp, seq, v_r, void, withdraw):
        """The decision's actions (receive-queue pops, placements, completions, responses) and the
        output register, where a set-up withdraws what is left."""
        m.d.comb += [self.rq_pop.valid.eq(acts & dec.rq_pop & ~void),
                     self.rq_pop.payload.eq(qp),
                     self.rd_push.valid.eq(acts & dec.rd_valid & ~void),
                     self.rd_push.payload.qp.eq(qp), self.rd_push.payload.read.eq(dec.rd),
                     self.rd_push.payload.atomic.eq(dec.rd_work),
                     self.rd_push.payload.route.dest_qpn.eq(self.ctx.peer_qpn),
                     self.rd_push.payload.route.dst_ip.eq(self.ctx.peer_ip),
                     self.rd_push.payload.route.src_port.eq(self.ctx.udp_sport),
                     self.rd_push.payload.route.dscp.eq(self.ctx.dscp),
                     self.rd_push.payload.route.ecn.eq(self.ctx.ecn),
                     self.decided.eq(acts), self.verdict.eq(v_r), self.atomic.eq(dec.f.atomic)]
        with m.If(acts):
            m.d.sync += [
                place.eq(dec.place), place.write.eq(dec.place.write & ~void),
                resp.qp.eq(qp), resp.syndrome.eq(dec.resp.syndrome), resp.psn.eq(dec.resp.psn),
                resp.msn.eq(dec.resp.msn), resp.dest_qpn.eq(self.ctx.peer_qpn),
                resp.dst_ip.eq(self.ctx.peer_ip), resp.src_port.eq(self.ctx.udp_sport),
                resp.dscp.eq(self.ctx.dscp), cpl.eq(dec.cpl), cpl.qp.eq(qp), c_seq.eq(seq),
                p_act.eq(1), p_resp.eq(dec.resp_valid & ~void),
                p_cpl.eq(dec.cpl_valid & ~void), p_flush.eq(dec.flush & ~void),
            ]
        # (a CE mark: one cycle, with the response's addressing registered beside it)
        m.d.sync += self.ce.valid.eq(acts & peer_r & (h.ecn == 0b11))
        m.d.comb += [self.ce.payload.qp.eq(resp.qp), self.ce.payload.dest_qpn.eq(resp.dest_qpn),
                     self.ce.payload.dst_ip.eq(resp.dst_ip),
                     self.ce.payload.src_port.eq(resp.src_port)]

        # ---- the output register: each action to its port; a set-up withdraws what is left
        m.d.comb += [
            self.act.valid.eq(p_act), self.act.payload.eq(place),
            self.resp.valid.eq(p_resp & ~withdraw), self.resp.payload.eq(resp),
            self.cpl.valid.eq(p_cpl & ~withdraw), self.cpl.payload.cpl.eq(cpl),
            self.cpl.payload.seq.eq(c_seq),
            self.rq_flush.valid.eq(p_flush & ~withdraw), self.rq_flush.payload.eq(resp.qp),
            self.seq.eq(c_seq),
        ]
        with m.If(withdraw):
            m.d.comb += self.act.payload.write.eq(0)
        for pending, port in ((p_act, self.act), (p_resp, self.resp), (p_cpl, self.cpl)):
            with m.If(port.valid & port.ready):
                m.d.sync += pending.eq(0)
        with m.If(p_flush):                 # (offered for one cycle: always taken)
            m.d.sync += p_flush.eq(0)
        with m.If(withdraw & ~acts):
            m.d.sync += [p_resp.eq(0), p_cpl.eq(0), p_flush.eq(0)]
        with m.If(withdraw & p_act & ~self.act.ready & ~acts):
            m.d.sync += place.write.eq(0)
        return m
