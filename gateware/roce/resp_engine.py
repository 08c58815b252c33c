"""The responder's per-packet loop: state read, decision, state written, actions handed on."""

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import PSN_WRITE, QP_CONTEXT, QPN_BASE, check_num_qps
from rocegen.gateware.roce.resp_decide import ACK_FIELDS, RespDecide
from rocegen.gateware.roce.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
    RESP_HEADER,
    RESP_PLACE,
    RESP_QP_CONFIG,
    RESP_RESPONSE,
    RESP_STATE,
    RespVerdict,
)

__all__ = ["RespEngine", "SEQ_BITS", "TAGGED_COMPLETION"]

#: Bits of the packet sequence numbers that order completions after their data.
SEQ_BITS = 16
#: A receive completion with the sequence number of the packet whose data it must follow.
TAGGED_COMPLETION = data.StructLayout({"cpl": RECV_COMPLETION, "seq": SEQ_BITS})


class _Step(enum.Enum, shape=2):
    IDLE = 0
    READ = 1
    COMMIT = 2
    WAIT = 3


class RespEngine(wiring.Component):
    """One request at a time: its QP's responder state, configuration, context and first
    receive buffer read, :class:`~rocegen.gateware.roce.resp_decide.RespDecide` applied, the new
    state written, and the placement, response, completion and receive-queue actions offered.

    Parameters
    ----------
    num_qps : int
        QPs (1..256, numbered from 256).
    config_init : list of dict or None
        Each QP's configuration after reset (:data:`RESP_QP_CONFIG` values; default: no region).

    Ports
    -----
    head_valid, head : In(1), In(RESP_HEADER)
        The request at the head of the ingress FIFO and its headers.
    head_done : In(1)
        The head request's last beat was taken (by the placement stage).
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
    rq_qp, rq_valid, rq_head : Out(range(num_qps)), In(1), In(RECV_POST)
        The receive queues' read port (one cycle after the QP).
    rq_pop : Out(stream.Signature(8, always_ready=True))
    rq_flush : Out(stream.Signature(8))
        ``ready`` low while the receive queues flush: no request is started meanwhile.
    act : Out(stream.Signature(RESP_PLACE))
        One placement record per request, in order.
    resp : Out(stream.Signature(RESP_RESPONSE))
    cpl : Out(stream.Signature(TAGGED_COMPLETION))
        Receive completions, each with the sequence number (count of requests, modulo
        2^:data:`SEQ_BITS`, this one included) of the request whose placement it must follow.
    decided, verdict : Out(1), Out(RespVerdict)
        A pulse per request with what became of it.
    seq : Out(SEQ_BITS)
        The sequence number of the newest request taken.

    Behaviour
    ---------
    A request is taken from the head in the cycle after the previous one's last beat left it:
    one cycle to read (IDLE, addresses from the head's DestQP), one to decide (READ), then
    COMMIT until the placement record and every other action are taken (one cycle when
    nothing waits), then WAIT for its last beat to be taken. A ``psn_set`` wins the state
    memory's write port; one naming the QP of the request in flight makes that request's
    decision void (nothing placed, answered or completed: the requester resends it).
    """

    def __init__(self, num_qps, *, config_init=None):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        self._config = Memory(shape=RESP_QP_CONFIG, depth=num_qps, init=config_init or [])
        self._state = Memory(shape=RESP_STATE, depth=num_qps, init=[])
        super().__init__({
            "head_valid": In(1), "head": In(RESP_HEADER), "head_done": In(1),
            "ctx_qp": Out(range(num_qps)), "ctx": In(QP_CONTEXT),
            "psn_set": In(stream.Signature(PSN_WRITE, always_ready=True)),
            "cfg_w": In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True)),
            "cfg_qp": In(range(num_qps)), "cfg": Out(RESP_QP_CONFIG),
            "rq_qp": Out(range(num_qps)), "rq_valid": In(1), "rq_head": In(RECV_POST),
            "rq_pop": Out(stream.Signature(unsigned(8), always_ready=True)),
            "rq_flush": Out(stream.Signature(unsigned(8))),
            "act": Out(stream.Signature(RESP_PLACE)),
            "resp": Out(stream.Signature(RESP_RESPONSE)),
            "cpl": Out(stream.Signature(TAGGED_COMPLETION)),
            "decided": Out(1), "verdict": Out(RespVerdict), "seq": Out(SEQ_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        dec = m.submodules.decide = RespDecide()
        m.submodules.state = self._state
        m.submodules.config = self._config
        st_r, st_w = self._state.read_port(), self._state.write_port()
        cf_r, cf_w, cf_cm = (self._config.read_port(), self._config.write_port(),
                             self._config.read_port())
        m.d.comb += [cf_cm.addr.eq(self.cfg_qp), self.cfg.eq(cf_cm.data),
                     cf_w.addr.eq(self.cfg_w.payload.qp), cf_w.data.eq(self.cfg_w.payload.config),
                     cf_w.en.eq(self.cfg_w.valid & (self.cfg_w.payload.qp < n))]

        step = Signal(_Step)
        h = Signal(RESP_HEADER)
        qp = Signal(8)
        in_table = Signal()
        stale = Signal()
        done = Signal()                      # the request's last beat was taken
        seq = Signal(SEQ_BITS)

        # ---- IDLE: the reads, addressed by the head's DestQP
        index = Signal(24)
        m.d.comb += index.eq(self.head.bth.dest_qp - QPN_BASE)
        rd = index[:8]
        for port in (st_r.addr, cf_r.addr, self.ctx_qp, self.rq_qp):
            m.d.comb += port.eq(rd)
        take = (step == _Step.IDLE) & self.head_valid & self.rq_flush.ready
        with m.If(take):
            m.d.sync += [h.eq(self.head), qp.eq(rd), in_table.eq(index < n), stale.eq(0),
                         done.eq(0), seq.eq(seq + 1), step.eq(_Step.READ)]

        # ---- READ: the decision, registered
        cfg = cf_r.data
        m.d.comb += [dec.h.eq(h), dec.in_table.eq(in_table), dec.ctx.eq(self.ctx),
                     dec.st.eq(st_r.data), dec.mr.eq(cfg.mr), dec.rnr_timer.eq(cfg.rnr_timer),
                     dec.rq_valid.eq(self.rq_valid), dec.rq_head.eq(self.rq_head)]
        new_st = Signal(RESP_STATE)
        place = Signal(RESP_PLACE)
        resp = Signal(RESP_RESPONSE)
        cpl = Signal(RECV_COMPLETION)
        # what COMMIT still has to hand on
        p_st, p_act, p_resp, p_cpl, p_flush = (Signal(name=f"p_{k}") for k in
                                               ("st", "act", "resp", "cpl", "flush"))
        ack = Signal(ACK_FIELDS)
        m.d.comb += ack.eq(dec.resp)
        with m.If(step == _Step.READ):
            m.d.sync += [
                new_st.eq(dec.new_st), place.eq(dec.place),
                resp.qp.eq(qp), resp.syndrome.eq(ack.syndrome), resp.psn.eq(ack.psn),
                resp.msn.eq(ack.msn), resp.dest_qpn.eq(self.ctx.peer_qpn),
                resp.dst_ip.eq(self.ctx.peer_ip), resp.src_port.eq(self.ctx.udp_sport),
                resp.dscp.eq(self.ctx.dscp), cpl.eq(dec.cpl), cpl.qp.eq(qp),
                p_st.eq(1), p_act.eq(1), p_resp.eq(dec.resp_valid), p_cpl.eq(dec.cpl_valid),
                p_flush.eq(dec.flush), step.eq(_Step.COMMIT),
            ]
        m.d.comb += [self.decided.eq(step == _Step.READ), self.verdict.eq(dec.verdict),
                     self.rq_pop.payload.eq(qp),
                     self.rq_pop.valid.eq((step == _Step.READ) & dec.rq_pop & ~stale &
                                          ~(self.psn_set.valid &
                                            (self.psn_set.payload.qp == qp))),
                     self.seq.eq(seq)]

        # ---- a set-up of the request's QP makes its decision void
        ps = self.psn_set
        # (COMMIT then offers nothing but the placement record, with nothing to write)
        with m.If(ps.valid & (ps.payload.qp == qp) & (step != _Step.IDLE)):
            m.d.sync += stale.eq(1)

        # ---- COMMIT: the state written (a set-up first), the actions offered
        commit = step == _Step.COMMIT
        void = stale | (ps.valid & (ps.payload.qp == qp))
        with m.If(ps.valid):
            m.d.comb += [st_w.addr.eq(ps.payload.qp), st_w.data.epsn.eq(ps.payload.psn),
                         st_w.en.eq(ps.payload.qp < n)]
        with m.Elif(commit & p_st):
            m.d.comb += [st_w.addr.eq(qp), st_w.data.eq(new_st), st_w.en.eq(~stale)]
            m.d.sync += p_st.eq(0)
        m.d.comb += [
            self.act.valid.eq(commit & p_act), self.act.payload.eq(place),
            self.resp.valid.eq(commit & p_resp & ~void), self.resp.payload.eq(resp),
            self.cpl.valid.eq(commit & p_cpl & ~void), self.cpl.payload.cpl.eq(cpl),
            self.cpl.payload.seq.eq(seq),
            self.rq_flush.valid.eq(commit & p_flush & ~void), self.rq_flush.payload.eq(qp),
        ]
        with m.If(void):
            m.d.comb += self.act.payload.write.eq(0)
            m.d.sync += [p_resp.eq(0), p_cpl.eq(0), p_flush.eq(0)]
        for pending, port in ((p_act, self.act), (p_resp, self.resp), (p_cpl, self.cpl),
                              (p_flush, self.rq_flush)):
            with m.If(port.valid & port.ready):
                m.d.sync += pending.eq(0)
        all_taken = ~((p_st & ps.valid) | (p_act & ~self.act.ready) |
                      (p_resp & ~void & ~self.resp.ready) | (p_cpl & ~void & ~self.cpl.ready) |
                      (p_flush & ~void & ~self.rq_flush.ready))
        with m.If(commit & all_taken):
            m.d.sync += step.eq(_Step.WAIT)

        # ---- WAIT: the request's last beat leaves the head
        with m.If((step != _Step.IDLE) & self.head_done):
            m.d.sync += done.eq(1)
        with m.If((step == _Step.WAIT) & (done | self.head_done)):
            m.d.sync += step.eq(_Step.IDLE)
        return m
