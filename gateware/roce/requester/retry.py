from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    ACK_EVENT,
    CONTEXT_WRITE,
    PSN_WRITE,
    RETRY_EVENT,
    RETRY_STATE,
    SCHED_EVENT,
    SENT,
    TIME_BITS,
    CplStatus,
    RetryEvKind,
    SchedKind,
    check_num_qps,
)
from rocegen.gateware.roce.qp_counters import QpCounters
from rocegen.gateware.roce.requester.retry_apply import COUNTERS, QP_COUNTERS, RetryApply
from rocegen.gateware.roce.requester.retry_decide import (
    TICK_NS,
    RetryDecide,
    rnr_ticks,
    timeout_ticks,
)
from rocegen.gateware.roce.requester.retry_time import RetryTimeBase

# (SENT, SCHED_EVENT, SchedKind, RETRY_STATE and TIME_BITS are defined in layouts, the counters'
# names in retry_apply, the time constants in retry_decide; exported here too)
__all__ = ["RetryEngine", "SENT", "SCHED_EVENT", "SchedKind", "QP_COUNTERS", "COUNTERS",
           "RETRY_STATE", "TICK_NS", "TIME_BITS", "timeout_ticks", "rnr_ticks"]


class RetryEngine(wiring.Component):
    """Reliability of the RC requester: acknowledgement processing, go-back-N rewinds,
    retransmit timers, RNR waits and the error state, per QP.

    :mod:`rocegen.sim.models.requester.retry` is the reference model; this docstring states the rules.

    Parameters
    ----------
    num_qps : int
        QPs in the QP table (1..256).
    clk_hz : int or float
        The clock frequency: the time base ticks every ``round(clk_hz * 1.024 us)`` cycles
        (at least 1).

    Ports
    -----
    psn_set : In(stream.Signature(PSN_WRITE))
        The control side's PSN writes (a QP's connection is set up, or set up again): acked =
        PSN - 1, nothing outstanding, timers off, counts zero, error state left.
    ctx_set : In(stream.Signature(CONTEXT_WRITE))
        The control side's context writes: the timeout code and retry counts are taken; a
        context in RESET or ERROR puts the QP in the error state (status FLUSHED) unless it is
        already there.
    ack : In(stream.Signature(ACK_EVENT))
        Acknowledgements that passed the receive checks.
    sent : In(stream.Signature(SENT))
        Packets issued by the scheduler.
    cpl_ack : Out(stream.Signature(ACK_EVENT, always_ready=True))
        The new acknowledged PSN of a QP (syndrome 0), to the completion tracker, whenever it
        changes (and on ``psn_set``). A one-cycle pulse in the cycle the state is written (a
        multiplexer on the decided event's registers). At most one every other cycle for one
        QP.
    sched : Out(stream.Signature(SCHED_EVENT, always_ready=True))
        ADVANCE, REWIND or RESET of a QP, to the scheduler. A one-cycle pulse from registers,
        in the cycle after the state it reports is written.
    acked_qp / acked_psn
        Combinational read of a QP's acknowledged PSN (for the scheduler's window and rewinds).
    err_qp / err_status
        Combinational read of a QP's error status (for the completion tracker).
    errored : Out(num_qps)
        QPs in the error state (registers).
    held : Out(num_qps)
        QPs waiting out an RNR delay: nothing may be sent on them (registers).
    qp_stats_qp / qp_stats_sel / qp_stats_data
        Per-QP counters (:data:`QP_COUNTERS`, 32 bits, wrapping), ``data`` one cycle after the
        address.
    acks ... qp_errors
        One-cycle pulses (:data:`COUNTERS`), from registers. ``qp_errors`` counts the failures
        the engine finds (retries or RNR retries exhausted, an error NAK), not the flush of a
        context written in RESET or ERROR (a QP closed).

    Behaviour
    ---------
    One event per cycle is taken and applied, as a read-modify-write of the QP's state
    (distributed RAM) in a pipeline: the event is registered, the state read and the arithmetic
    on it registered in the next cycle, the decision taken and the state written in the cycle
    after; the per-QP counters are updated one cycle later still. Priority: ``psn_set``,
    ``ctx_set``, an expired timer, then ``ack`` and ``sent`` in turn when both wait. An event
    of the QP taken in the cycle before waits one cycle (its state is being read), and an event
    of another QP lower in priority is taken instead. All PSN comparisons are modulo 2^24
    (serial arithmetic).

    * ``sent``: ``sent_max`` moves to the newest packet's PSN + 1 (if ahead); the timer is
      armed (if the QP has a timeout code and no timer runs) for 4.096 us x 2^timeout. The
      per-QP counters count the packets, and as resent those before the old ``sent_max``.
    * ACK of PSN p, p in [acked + 1, sent_max - 1]: progress -- acked = p, retry counts zero,
      the timer restarts (or stops when nothing is outstanding), ``cpl_ack`` and ADVANCE.
      p == acked: stale (counted). Otherwise ignored (counted): it acknowledges nothing sent.
    * Every NAK of PSN p first acknowledges p - 1 (progress as above if it moves), provided
      p - 1 is in [acked, sent_max - 1]; otherwise the NAK is ignored.
    * NAK PSN sequence error: a repeat of the NAK that caused the last rewind, with no progress
      since, is ignored (only one rewind in flight). Otherwise, if ``retries >= retry_cnt`` the
      QP fails with RETRY_EXCEEDED, else ``retries`` += 1, REWIND, timer restarted.
    * RNR NAK (code c): ignored while an RNR wait runs. If ``rnr_retry`` is not 7 and
      ``rnr_retries >= rnr_retry``, the QP fails with RNR_RETRY_EXCEEDED; else the QP is held
      and the timer set to the RNR delay of code c; when it expires the QP is released, REWIND,
      and the retransmit timer restarts.
    * NAK invalid request / remote access / remote operational error: the QP fails with
      REMOTE_INVALID / REMOTE_ACCESS / REMOTE_OP. Other syndromes (the reserved NAK codes
      and class 0b010): after the implied acknowledgement of p - 1, ignored (counted).
    * Timer expiry (one QP examined per cycle in turn, against the time of the next cycle; one
      with an expired timer is served before any ``ack``/``sent``, after the events of its QP
      already taken are written, and checked again against its state then): with nothing
      outstanding the timer stops; else, if ``retries >= retry_cnt`` the QP fails with
      RETRY_EXCEEDED, else ``retries`` += 1, REWIND, timer restarted. A timer fires between
      2^(timeout+2) and 2^(timeout+2) + 1 ticks after it was (re)started (RNR: between its
      ticks and one more), plus the scan: up to ``num_qps`` cycles and two more for the events
      of its QP in flight, longer only while ``psn_set``/``ctx_set`` writes keep the engine
      busy. The time of an event is the tick of the cycle it is taken in.
    * Failing: ``errored`` rises, the timer stops, the QP is released, ``err_status`` is the
      cause. Events of an errored QP other than ``psn_set``/``ctx_set`` are ignored (not
      counted), until ``psn_set`` clears the error state (RESET to the scheduler).

    Latency: an event accepted in cycle t has its state read in t + 1 and written at the end of
    t + 2, where ``cpl_ack`` reports it; its other outputs (``sched``, the pulses) are in cycle
    t + 3, ``errored`` and ``held`` change at the start of t + 3, ``acked_psn``/``err_status``
    of the QP read the new state from t + 3 on, and its per-QP counters are written at the end
    of t + 3. Throughput: one event per cycle, over QPs; one every other cycle for a single QP.
    ``ack`` and ``sent`` are held while a higher-priority event is served, while an event of
    their QP was taken in the cycle before, and while an expired timer waits for the events of
    its QP in flight (two cycles at most). ``psn_set`` is held only while an event of its QP
    was taken in the cycle before; ``ctx_set`` also while ``psn_set`` goes first.

    Implementation: the intake (the timer scan and the choice of the event, registered) is
    here; the time base is a :class:`~rocegen.gateware.roce.requester.retry_time.RetryTimeBase`, stage A
    a :class:`~rocegen.gateware.roce.requester.retry_decide.RetryDecide`, stage B a
    :class:`~rocegen.gateware.roce.requester.retry_apply.RetryApply` and the per-QP counters a
    :class:`~rocegen.gateware.roce.qp_counters.QpCounters`, joined by always-ready streams.
    """

    def __init__(self, num_qps, clk_hz=322_265_625):
        check_num_qps(num_qps)
        if not isinstance(clk_hz, (int, float)) or isinstance(clk_hz, bool) or clk_hz <= 0:
            raise ValueError(f"clk_hz must be a positive frequency in Hz, not {clk_hz!r}")
        self.num_qps = num_qps
        self.clk_hz = clk_hz
        #: Clock cycles per tick of the time base.
        self.tick_cycles = max(1, round(clk_hz * TICK_NS * 1e-9))
        super().__init__({
            "psn_set": In(stream.Signature(PSN_WRITE)),
            "ctx_set": In(stream.Signature(CONTEXT_WRITE)),
            "ack": In(stream.Signature(ACK_EVENT)),
            "sent": In(stream.Signature(SENT)),
            "cpl_ack": Out(stream.Signature(ACK_EVENT, always_ready=True)),
            "sched": Out(stream.Signature(SCHED_EVENT, always_ready=True)),
            "acked_qp": In(range(num_qps)),
            "acked_psn": Out(24),
            "err_qp": In(range(num_qps)),
            "err_status": Out(CplStatus),
            "errored": Out(num_qps),
            "held": Out(num_qps),
            "qp_stats_qp": In(range(num_qps)),
            "qp_stats_sel": In(range(len(QP_COUNTERS))),
            "qp_stats_data": Out(32),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        tb = m.submodules.time = RetryTimeBase(self.tick_cycles)
        now, now1, now_next = tb.now, tb.now1, tb.now_next

        mem = m.submodules.state = Memory(shape=RETRY_STATE, depth=n, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        scan_rp = mem.read_port(domain="comb")
        acked_rp = mem.read_port(domain="comb")
        err_rp = mem.read_port(domain="comb")
        m.d.comb += [
            acked_rp.addr.eq(self.acked_qp), self.acked_psn.eq(acked_rp.data.acked),
            err_rp.addr.eq(self.err_qp), self.err_status.eq(err_rp.data.err_status),
        ]

        # ---- the stages after the intake: decide (A), apply (B), the per-QP counters (C)
        decide = m.submodules.decide = RetryDecide(n)
        apply = m.submodules.apply = RetryApply(n)
        # (block RAM: a read-modify-write of the QP's row a cycle after stage B)
        counters = m.submodules.counters = QpCounters(n, QP_COUNTERS, step_bits=6)
        wiring.connect(m, decide.decided, apply.decided)
        wiring.connect(m, apply.cpl_ack, wiring.flipped(self.cpl_ack))
        wiring.connect(m, apply.sched, wiring.flipped(self.sched))
        errored = apply.errored
        m.d.comb += [
            apply.decided_qvec.eq(decide.decided_qvec),
            rp.addr.eq(decide.state_qp), decide.state.eq(rp.data),
            wp.addr.eq(apply.wr_qp), wp.data.eq(apply.wr_state), wp.en.eq(apply.wr_en),
            self.errored.eq(errored), self.held.eq(apply.held),
            counters.qp.eq(apply.cnt_qp), counters.inc.eq(apply.cnt_inc),
            counters.rd_qp.eq(self.qp_stats_qp), counters.rd_sel.eq(self.qp_stats_sel),
            self.qp_stats_data.eq(counters.rd_data),
            *[getattr(self, name).eq(getattr(apply, name)) for name in COUNTERS],
        ]

        # ---- the intake: the event chosen, registered for stage A (E)
        e_valid = Signal()
        return self._elaborate_events(m, decide, e_valid, errored, n, now, now1, now_next, scan_rp)

    def _elaborate_events(self, m, decide, e_valid, errored, n, now, now1, now_next, scan_rp):
        """The timer scan, and the event picked among acknowledgements, sent packets and expired
        timers, registered for stage A."""
        e = Signal(RETRY_EVENT)
        e_qvec = Signal(n)                  # one-hot of the QP (none: no event, or outside)
        a_qvec = decide.decided_qvec        # the same, of the event in stage B
        m.d.comb += [decide.event.valid.eq(e_valid), decide.event.payload.eq(e),
                     decide.qvec.eq(e_qvec)]

        # ---- timer scan: one QP per cycle; ``cand``: the timer of ``scan_q`` has expired (seen
        # in the state one cycle earlier, against the time of this cycle). The scan stays on a
        # QP whose timer expired until it is served.
        scan_q = Signal(range(n))
        m.d.comb += scan_rp.addr.eq(scan_q)
        ss = scan_rp.data
        late = Signal(TIME_BITS)
        m.d.comb += late.eq(now_next - ss.deadline)
        raw = Signal()                      # expired in the state as it is now, next cycle
        m.d.comb += raw.eq(ss.armed & ~late[-1] & ~errored.bit_select(scan_q, 1))
        cand = Signal()
        a_hit = Signal()                    # stage B held the scanned QP when cand was seen
        # an event of the QP still in flight when cand was seen may have changed its timer:
        # wait until it is written
        stale = Signal()
        e_hit = Signal()                    # stage A held the scanned QP when cand was seen
        m.d.comb += stale.eq(a_hit | e_hit | e_qvec.bit_select(scan_q, 1))

        # ---- pick the event: an event of the QP in stage A waits one cycle (read after write)
        qw = max(1, (n - 1).bit_length())

        def hazard(qp):
            hit = e_qvec.bit_select(qp[:qw], 1) if n > 1 else e_qvec[0]
            return hit & (qp[qw:] == 0) if qw < 8 else hit

        ack_turn = Signal(init=1)          # ack and sent alternate when both wait
        psn_ok = self.psn_set.valid & ~hazard(self.psn_set.payload.qp)
        ctx_ok = self.ctx_set.valid & ~hazard(self.ctx_set.payload.qp)
        ack_ok = self.ack.valid & ~hazard(self.ack.payload.qp)
        sent_ok = self.sent.valid & ~hazard(self.sent.payload.qp)
        ev_psn = Signal()
        ev_ctx = Signal()
        ev_fire = Signal()
        ev_ack = Signal()
        ev_sent = Signal()
        m.d.comb += [
            ev_psn.eq(psn_ok),
            ev_ctx.eq(~psn_ok & ctx_ok),
            ev_fire.eq(~psn_ok & ~ctx_ok & cand & ~stale),
            # an expired timer is served before any ack/sent
            ev_ack.eq(~psn_ok & ~ctx_ok & ~cand & ack_ok & (ack_turn | ~sent_ok)),
            ev_sent.eq(~psn_ok & ~ctx_ok & ~cand & sent_ok & ~(ack_ok & ack_turn)),
            self.psn_set.ready.eq(ev_psn),
            self.ctx_set.ready.eq(ev_ctx),
            self.ack.ready.eq(ev_ack),
            self.sent.ready.eq(ev_sent),
        ]
        with m.If(ev_ack):
            m.d.sync += ack_turn.eq(0)
        with m.Elif(ev_sent):
            m.d.sync += ack_turn.eq(1)
        m.d.sync += [cand.eq(raw & ~ev_fire), a_hit.eq(a_qvec.bit_select(scan_q, 1)),
                     e_hit.eq(e_qvec.bit_select(scan_q, 1))]
        with m.If(ev_fire | ~raw):
            m.d.sync += scan_q.eq(Mux(scan_q == n - 1, 0, scan_q + 1))

        m.d.sync += [e_valid.eq(ev_psn | ev_ctx | ev_fire | ev_ack | ev_sent),
                     e.now.eq(now), e.now1.eq(now1)]

        def onehot(qp):
            return Cat(qp == k for k in range(n))

        m.d.sync += e_qvec.eq(Mux(ev_psn, onehot(self.psn_set.payload.qp), 0) |
                              Mux(ev_ctx, onehot(self.ctx_set.payload.qp), 0) |
                              Mux(ev_fire, onehot(scan_q), 0) |
                              Mux(ev_ack, onehot(self.ack.payload.qp), 0) |
                              Mux(ev_sent, onehot(self.sent.payload.qp), 0))
        with m.If(ev_psn):
            m.d.sync += [e.kind.eq(RetryEvKind.PSN), e.qp.eq(self.psn_set.payload.qp),
                         e.psn.eq(self.psn_set.payload.psn)]
        with m.Elif(ev_ctx):
            c = self.ctx_set.payload.context
            m.d.sync += [e.kind.eq(RetryEvKind.CTX), e.qp.eq(self.ctx_set.payload.qp),
                         e.ctx.state.eq(c.state), e.ctx.timeout.eq(c.timeout),
                         e.ctx.retry_cnt.eq(c.retry_cnt), e.ctx.rnr_retry.eq(c.rnr_retry)]
        with m.Elif(ev_fire):
            m.d.sync += [e.kind.eq(RetryEvKind.FIRE), e.qp.eq(scan_q)]
        with m.Elif(ev_ack):
            m.d.sync += [e.kind.eq(RetryEvKind.ACK), e.qp.eq(self.ack.payload.qp),
                         e.psn.eq(self.ack.payload.psn), e.syn.eq(self.ack.payload.syndrome)]
        with m.Elif(ev_sent):
            m.d.sync += [e.kind.eq(RetryEvKind.SENT), e.qp.eq(self.sent.payload.qp),
                         e.psn.eq(self.sent.payload.psn),
                         e.packets.eq(self.sent.payload.packets),
                         e.first.eq(self.sent.payload.psn - self.sent.payload.packets + 1)]
        # events naming a QP outside the table change nothing
        with m.If(ev_psn):
            m.d.sync += e.in_table.eq(self.psn_set.payload.qp < n)
        with m.Elif(ev_ctx):
            m.d.sync += e.in_table.eq(self.ctx_set.payload.qp < n)
        with m.Elif(ev_ack):
            m.d.sync += e.in_table.eq(self.ack.payload.qp < n)
        with m.Elif(ev_sent):
            m.d.sync += e.in_table.eq(self.sent.payload.qp < n)
        with m.Else():
            m.d.sync += e.in_table.eq(1)

        # the QP's errored bit for stage A
        # (through the event's one-hot QP, not a multiplexer on its number: an AND-OR of the
        # registered one-hot is the shallower path into stage A's flags)
        m.d.comb += decide.errored.eq((errored & e_qvec).any())
        return m
