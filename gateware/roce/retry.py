from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import (
    ACK_EVENT,
    CONTEXT_WRITE,
    MAX_QPS,
    PSN_WRITE,
    SCHED_EVENT,
    SENT,
    CplStatus,
    QpState,
    SchedKind,
)

# (SENT, SCHED_EVENT and SchedKind are defined in layouts; exported here too for existing imports)
__all__ = ["RetryEngine", "SENT", "SCHED_EVENT", "SchedKind", "QP_COUNTERS", "COUNTERS",
           "RETRY_STATE", "TICK_NS", "RNR_DELAY_US", "TIME_BITS", "timeout_ticks", "rnr_ticks"]

#: The engine's time unit: 1.024 us (a timeout code's 4.096 us is 4 ticks).
TICK_NS = 1024
#: Bits of the time base: the longest timeout (4.096 us x 2^31 = 2^33 ticks) is less than half
#: its range, so deadlines compare in serial arithmetic.
TIME_BITS = 36
#: RNR NAK timer codes (the AETH's 5-bit value) in microseconds.
RNR_DELAY_US = (655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
                2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920,
                122880, 163840, 245760, 327680, 491520)


def timeout_ticks(code):
    """Ticks of a retransmit timeout code 1..31 (4.096 us x 2^code)."""
    return 1 << (code + 2)


def rnr_ticks(code):
    """Ticks of an RNR timer code, rounded up (the wait is never shorter than the code says)."""
    return -(-RNR_DELAY_US[code] * 1000 // TICK_NS)


#: The per-QP state the engine keeps.
RETRY_STATE = data.StructLayout({
    "acked": 24,            # last acknowledged PSN (the oldest unacknowledged is acked + 1)
    "sent_max": 24,         # the PSN after the newest packet sent
    "deadline": TIME_BITS,  # when the armed timer fires
    "armed": 1,
    "rnr_wait": 1,          # the timer is an RNR wait (the QP is held)
    "retries": 3,           # timeouts and sequence-error rewinds since the last progress
    "rnr_retries": 3,       # RNR waits since the last progress
    "timeout": 5,           # the QP's timeout code, retry_cnt and rnr_retry (from its context)
    "retry_cnt": 3,
    "rnr_retry": 3,
    "rewind_psn": 24,       # the PSN of the last sequence-error rewind
    "rewind_active": 1,     # ... and no progress since it
    "err_status": CplStatus,
})

#: Per-QP counters (read through ``qp_stats_*``), in address order within a QP.
QP_COUNTERS = ("packets", "resent", "acks", "stale_acks", "seq_naks", "rnr_naks", "error_naks",
               "timeouts", "ignored")

#: One-cycle pulses of the engine (for the global statistics block).
COUNTERS = ("acks", "stale_acks", "seq_naks", "rnr_naks", "error_naks", "timeouts", "ignored",
            "rewinds", "qp_errors")

_SYN_SEQ = 0x60


class _Ev(enum.Enum, shape=3):
    """The kind of event in the engine's pipeline."""
    PSN = 0
    CTX = 1
    FIRE = 2
    ACK = 3
    SENT = 4


class RetryEngine(wiring.Component):
    """Reliability of the RC requester: acknowledgement processing, go-back-N rewinds,
    retransmit timers, RNR waits and the error state, per QP.

    :mod:`rocegen.sim.models.retry` is the reference model; this docstring states the rules.

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
        changes (and on ``psn_set``). A one-cycle pulse from registers. At most one every other
        cycle for one QP.
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
    t + 2; its outputs (``cpl_ack``, ``sched``, the pulses) are in cycle t + 3, ``errored`` and
    ``held`` change at the start of t + 3, ``acked_psn``/``err_status`` of the QP read the new
    state from t + 3 on, and its per-QP counters are written at the end of t + 3. Throughput:
    one event per cycle, over QPs; one every other cycle for a single QP. ``ack`` and ``sent``
    are held while a higher-priority event is served, while an event of their QP was taken in
    the cycle before, and while an expired timer waits for the events of its QP in flight (two
    cycles at most). ``psn_set`` is held only while an event of its QP was taken in the
    cycle before; ``ctx_set`` also while ``psn_set`` goes first.
    """

    def __init__(self, num_qps, clk_hz=322_265_625):
        if not isinstance(num_qps, int) or isinstance(num_qps, bool):
            raise TypeError(f"num_qps must be an integer, not {num_qps!r}")
        if not 1 <= num_qps <= MAX_QPS:
            raise ValueError(f"num_qps must be 1..{MAX_QPS}, not {num_qps}")
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

        # ---- time base (``now1`` is ``now + 1``, ``now_next`` the ``now`` of the next cycle,
        # both kept in registers)
        now = Signal(TIME_BITS)
        now1 = Signal(TIME_BITS, init=1)
        tc = self.tick_cycles
        now_next = Signal(TIME_BITS, init=1 if tc == 1 else 0)
        if tc > 1:
            div = Signal(range(tc))
            with m.If(div == tc - 1):
                m.d.sync += [div.eq(0), now.eq(now1), now1.eq(now1 + 1)]
            with m.Else():
                m.d.sync += div.eq(div + 1)
            with m.If(div == tc - 2):
                m.d.sync += now_next.eq(now_next + 1)
        else:
            m.d.sync += [now.eq(now1), now1.eq(now1 + 1), now_next.eq(now_next + 1)]

        mem = m.submodules.state = Memory(shape=RETRY_STATE, depth=n, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        scan_rp = mem.read_port(domain="comb")
        acked_rp = mem.read_port(domain="comb")
        err_rp = mem.read_port(domain="comb")
        nc = len(QP_COUNTERS)
        # (block RAM: both reads are synchronous, the read-modify-write's a cycle ahead and
        # transparent for the write, so a row written in that cycle is read as written)
        cmem = m.submodules.counters = Memory(shape=data.ArrayLayout(32, nc), depth=n, init=[],
                                              attrs={"ram_style": "block"})
        cwp = cmem.write_port()
        crp = cmem.read_port(domain="sync", transparent_for=(cwp,))
        srp = cmem.read_port()
        m.d.comb += [
            acked_rp.addr.eq(self.acked_qp), self.acked_psn.eq(acked_rp.data.acked),
            err_rp.addr.eq(self.err_qp), self.err_status.eq(err_rp.data.err_status),
            srp.addr.eq(self.qp_stats_qp),
        ]
        sel_d = Signal(range(nc))
        m.d.sync += sel_d.eq(self.qp_stats_sel)
        m.d.comb += self.qp_stats_data.eq(Array(srp.data[k] for k in range(nc))[sel_d])

        errored = Signal(n)
        held = Signal(n)
        m.d.comb += [self.errored.eq(errored), self.held.eq(held)]

        # ---- the pipeline registers: E (the event chosen, read in stage A), A (the state read
        # and the arithmetic on it, decided and written in stage B), C (the counter update)
        e_valid = Signal()
        e_kind = Signal(_Ev)
        e_qp = Signal(8)
        e_in = Signal()                     # the QP is inside the table
        e_psn = Signal(24)                  # psn_set, ack or sent: the PSN
        e_syn = Signal(8)
        e_packets = Signal(6)
        e_first = Signal(24)                # sent: the PSN of the first packet
        e_psn1 = Signal(24)                 # e_psn + 1
        e_pm1 = Signal(24)                  # e_psn - 1
        e_qvec = Signal(n)                  # one-hot of the QP (none: no event, or outside)
        e_ctx = Signal(data.StructLayout({"state": QpState, "timeout": 5, "retry_cnt": 3,
                                          "rnr_retry": 3}))
        e_now = Signal(TIME_BITS)
        e_now1 = Signal(TIME_BITS)

        a_valid = Signal()
        a_qp = Signal(8)
        a_in = Signal()
        a_qvec = Signal(n)                  # one-hot of the QP (none: no event, or outside)

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
                     e_now.eq(now), e_now1.eq(now1)]

        def onehot(qp):
            return Cat(qp == k for k in range(n))

        m.d.sync += e_qvec.eq(Mux(ev_psn, onehot(self.psn_set.payload.qp), 0) |
                              Mux(ev_ctx, onehot(self.ctx_set.payload.qp), 0) |
                              Mux(ev_fire, onehot(scan_q), 0) |
                              Mux(ev_ack, onehot(self.ack.payload.qp), 0) |
                              Mux(ev_sent, onehot(self.sent.payload.qp), 0))
        # (e_psn + 1 and e_psn - 1 from the registered PSN: the adders come after the event's
        # selection, not between it and a register)
        m.d.comb += [e_psn1.eq(e_psn + 1), e_pm1.eq(e_psn - 1)]
        with m.If(ev_psn):
            m.d.sync += [e_kind.eq(_Ev.PSN), e_qp.eq(self.psn_set.payload.qp),
                         e_psn.eq(self.psn_set.payload.psn)]
        with m.Elif(ev_ctx):
            c = self.ctx_set.payload.context
            m.d.sync += [e_kind.eq(_Ev.CTX), e_qp.eq(self.ctx_set.payload.qp),
                         e_ctx.state.eq(c.state), e_ctx.timeout.eq(c.timeout),
                         e_ctx.retry_cnt.eq(c.retry_cnt), e_ctx.rnr_retry.eq(c.rnr_retry)]
        with m.Elif(ev_fire):
            m.d.sync += [e_kind.eq(_Ev.FIRE), e_qp.eq(scan_q)]
        with m.Elif(ev_ack):
            m.d.sync += [e_kind.eq(_Ev.ACK), e_qp.eq(self.ack.payload.qp),
                         e_psn.eq(self.ack.payload.psn), e_syn.eq(self.ack.payload.syndrome)]
        with m.Elif(ev_sent):
            m.d.sync += [e_kind.eq(_Ev.SENT), e_qp.eq(self.sent.payload.qp),
                         e_psn.eq(self.sent.payload.psn),
                         e_packets.eq(self.sent.payload.packets),
                         e_first.eq(self.sent.payload.psn - self.sent.payload.packets + 1)]
        # events naming a QP outside the table change nothing
        with m.If(ev_psn):
            m.d.sync += e_in.eq(self.psn_set.payload.qp < n)
        with m.Elif(ev_ctx):
            m.d.sync += e_in.eq(self.ctx_set.payload.qp < n)
        with m.Elif(ev_ack):
            m.d.sync += e_in.eq(self.ack.payload.qp < n)
        with m.Elif(ev_sent):
            m.d.sync += e_in.eq(self.sent.payload.qp < n)
        with m.Else():
            m.d.sync += e_in.eq(1)

        # ---- stage A: read the QP's state and decide: what the event does, as flags
        m.d.comb += rp.addr.eq(e_qp)
        st = rp.data
        p = e_psn
        e_err = errored.bit_select(e_qp[:len(scan_q)], 1) if n > 1 else errored[0]
        live = e_valid & e_in & ~e_err      # events other than psn_set/ctx_set: not failed

        span = Signal(24)                   # sent_max - acked: 1 + packets outstanding
        span_m1 = Signal(24)                # sent_max - acked - 1: packets outstanding
        implied = Signal(24)                # NAK: p - 1 - acked (ACK: p - acked - 1)
        before = Signal(24)                 # sent: packets before sent_max were sent before
        imp0 = Signal()                     # NAK: p - 1 == acked
        m.d.comb += [
            span.eq(st.sent_max - st.acked),
            span_m1.eq(st.sent_max + ~st.acked),
            implied.eq(p + ~st.acked),
            before.eq(st.sent_max - e_first),
            imp0.eq(e_pm1 == st.acked),
        ]
        syn = e_syn
        cls = syn[5:8]
        is_ack = cls == 0b000
        is_rnr = cls == 0b001
        is_seq = syn == _SYN_SEQ
        is_fatal = (syn == 0x61) | (syn == 0x62) | (syn == 0x63)

        k_psn = e_valid & e_in & (e_kind == _Ev.PSN)
        k_ctx = e_valid & e_in & (e_kind == _Ev.CTX)
        k_fire = live & (e_kind == _Ev.FIRE)
        k_ack = live & (e_kind == _Ev.ACK)
        k_sent = live & (e_kind == _Ev.SENT)
        step_in = implied < span_m1         # ACK: p - acked in [1, span - 1]
        step0 = p == st.acked               # ACK: stale
        nak_ok = implied < span             # NAK: p - 1 in [acked, sent_max - 1]
        nak = k_ack & ~is_ack & nak_ok
        repeat = st.rewind_active & (st.rewind_psn == p) & imp0
        seq = nak & is_seq
        seq_out = Mux(imp0, st.retries >= st.retry_cnt, st.retry_cnt == 0)
        rnr = nak & is_rnr
        rnr_ign = st.rnr_wait & imp0
        rnr_out = (st.rnr_retry != 7) & Mux(imp0, st.rnr_retries >= st.rnr_retry,
                                              st.rnr_retry == 0)
        due = st.armed & ~(e_now - st.deadline)[-1]     # checked again: it may have restarted
        fire = k_fire & due
        fire_to = fire & ~st.rnr_wait & (span != 1)
        prog_end = Mux(is_ack, e_psn1 == st.sent_max, p == st.sent_max)

        F = {}                              # the flags, registered for stage B
        for name, value in {
            "psn": k_psn,
            "ctx": k_ctx,
            "sent": k_sent,
            # the acknowledged PSN moves (to p, or p - 1 for a NAK)
            "prog": k_ack & Mux(is_ack, step_in, nak_ok & ~imp0),
            "prog_end": prog_end,           # ... and nothing is outstanding then
            "acks": k_ack & is_ack & (step_in | step0),
            "stale": k_ack & is_ack & step0,
            "seq": seq,
            "seq_rew": seq & ~repeat & ~seq_out,
            "rnr": rnr,
            "rnr_start": rnr & ~rnr_ign & ~rnr_out,
            "fatal": nak & is_fatal,
            # ignored (in two parts, joined in stage B): an ACK or a NAK out of range, ...
            "ignored_range": (k_ack & is_ack & ~step_in & ~step0) | (k_ack & ~is_ack & ~nak_ok),
            # ... a repeated sequence NAK or RNR NAK, another NAK code
            "ignored_nak": (seq & repeat) | (rnr & rnr_ign) | (nak & ~is_seq & ~is_rnr & ~is_fatal),
            "fire_rnr": fire & st.rnr_wait,
            "fire_stop": fire & ~st.rnr_wait & (span == 1),
            "timeouts": fire_to,
            "fire_rew": fire_to & (st.retries < st.retry_cnt),
            "sent_restart": k_sent & ~st.armed,
            "sent_newer": k_sent & ~(p - st.sent_max)[23],
            "fail_flush": k_ctx & ((e_ctx.state == QpState.RESET) |
                                   (e_ctx.state == QpState.ERROR)) & ~e_err,
            "fail_retry": (fire_to & (st.retries >= st.retry_cnt)) | (seq & ~repeat & seq_out),
            "fail_rnr": rnr & ~rnr_ign & rnr_out,
            "timeout_nz": st.timeout != 0,
        }.items():
            F[name] = Signal(name=f"a_{name}")
            m.d.sync += F[name].eq(value)

        a_st = Signal(RETRY_STATE)
        a_psn = Signal(24)
        a_psn1 = Signal(24)                 # p + 1
        a_pm1 = Signal(24)                  # p - 1
        a_ctx = Signal.like(e_ctx)
        a_fatal_status = Signal(CplStatus)
        a_packets = Signal(6)
        a_resent = Signal(6)
        a_seq_retries = Signal(3)           # retries after a sequence NAK's rewind
        a_rnr_retries = Signal(3)           # rnr_retries after an RNR NAK's wait
        a_dl_timeout = Signal(TIME_BITS)    # now + 1 + the QP's timeout
        a_dl_rnr = Signal(TIME_BITS)        # now + 1 + the RNR delay of the NAK's code
        rnr_table = Array(Const(rnr_ticks(k), TIME_BITS) for k in range(32))
        m.d.sync += [
            a_valid.eq(e_valid), a_qp.eq(e_qp), a_in.eq(e_in),
            a_qvec.eq(e_qvec),
            a_st.eq(st), a_psn.eq(p), a_psn1.eq(e_psn1), a_pm1.eq(e_pm1), a_ctx.eq(e_ctx),
            a_fatal_status.eq(Mux(syn[1], Mux(syn[0], CplStatus.REMOTE_OP,
                                              CplStatus.REMOTE_ACCESS),
                                  CplStatus.REMOTE_INVALID)),
            a_packets.eq(e_packets),
            a_resent.eq(Mux(before[23], 0, Mux(before >= e_packets, e_packets, before))),
            a_seq_retries.eq(Mux(imp0, st.retries + 1, 1)),
            a_rnr_retries.eq(Mux(imp0, Mux(st.rnr_retries == 7, 7, st.rnr_retries + 1), 1)),
            a_dl_timeout.eq(e_now1 + (Const(1, TIME_BITS) << (st.timeout + 2))),
            a_dl_rnr.eq(e_now1 + rnr_table[e_syn[:5]]),
        ]

        # ---- stage B: the new state from the flags, written; the outputs registered
        s = a_st
        fail = F["fail_flush"] | F["fail_retry"] | F["fail_rnr"] | F["fatal"]
        fail_status = Signal(CplStatus)
        with m.If(F["fail_flush"]):
            m.d.comb += fail_status.eq(CplStatus.FLUSHED)
        with m.Elif(F["fail_retry"]):
            m.d.comb += fail_status.eq(CplStatus.RETRY_EXCEEDED)
        with m.Elif(F["fail_rnr"]):
            m.d.comb += fail_status.eq(CplStatus.RNR_RETRY_EXCEEDED)
        with m.Else():
            m.d.comb += fail_status.eq(a_fatal_status)
        prog = F["prog"]
        rewind = F["fire_rnr"] | F["fire_rew"] | F["seq_rew"]
        # the retransmit timer restarts (an RNR wait, a failure or psn_set take precedence)
        restart = (F["sent_restart"] | rewind | (prog & ~F["prog_end"]))
        stop = (prog & F["prog_end"]) | F["fire_stop"]
        prog_to = Mux(F["acks"], a_psn, a_pm1)

        new = Signal(RETRY_STATE)
        m.d.comb += new.eq(s)
        with m.If(F["psn"]):
            m.d.comb += [new.acked.eq(a_pm1), new.sent_max.eq(a_psn)]
        with m.Elif(prog):
            m.d.comb += new.acked.eq(prog_to)
        with m.Elif(F["sent_newer"]):
            m.d.comb += new.sent_max.eq(a_psn1)
        with m.If(fail | F["psn"]):
            m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0)]
        with m.Elif(F["rnr_start"]):
            m.d.comb += [new.armed.eq(1), new.rnr_wait.eq(1), new.deadline.eq(a_dl_rnr)]
        with m.Elif(restart):
            m.d.comb += [new.armed.eq(F["timeout_nz"]), new.rnr_wait.eq(0),
                         new.deadline.eq(a_dl_timeout)]
        with m.Elif(stop):
            m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0)]
        with m.If(F["seq_rew"]):
            m.d.comb += new.retries.eq(a_seq_retries)
        with m.Elif(F["fire_rew"]):
            m.d.comb += new.retries.eq(s.retries + 1)
        with m.Elif(prog | F["psn"]):
            m.d.comb += new.retries.eq(0)
        with m.If(F["rnr_start"]):
            m.d.comb += new.rnr_retries.eq(a_rnr_retries)
        with m.Elif(prog | F["psn"]):
            m.d.comb += new.rnr_retries.eq(0)
        with m.If(F["seq_rew"]):
            m.d.comb += [new.rewind_active.eq(1), new.rewind_psn.eq(a_psn)]
        with m.Elif(prog | F["psn"] | F["fire_rnr"] | F["fire_rew"]):
            m.d.comb += new.rewind_active.eq(0)
        with m.If(fail):
            m.d.comb += new.err_status.eq(fail_status)
        with m.Elif(F["psn"]):
            m.d.comb += new.err_status.eq(CplStatus.OK)
        with m.If(F["ctx"]):
            m.d.comb += [new.timeout.eq(a_ctx.timeout), new.retry_cnt.eq(a_ctx.retry_cnt),
                         new.rnr_retry.eq(a_ctx.rnr_retry)]
        m.d.comb += [wp.addr.eq(a_qp), wp.data.eq(new), wp.en.eq(a_valid & a_in)]

        # the QP's bits: a failure, psn_set, progress and a restart clear held, an RNR wait
        # sets it; a failure sets errored, psn_set clears it
        held_clr = fail | F["psn"] | prog | restart
        m.d.sync += [
            held.eq((held & ~Mux(held_clr, a_qvec, 0)) | Mux(F["rnr_start"], a_qvec, 0)),
            errored.eq((errored & ~Mux(F["psn"], a_qvec, 0)) | Mux(fail, a_qvec, 0)),
        ]

        # the outputs, registered: in the cycle after the state is written
        with m.If(F["psn"]):
            m.d.sync += [self.cpl_ack.payload.psn.eq(a_pm1),
                         self.sched.payload.kind.eq(SchedKind.RESET)]
        with m.Else():
            m.d.sync += [self.cpl_ack.payload.psn.eq(prog_to),
                         self.sched.payload.kind.eq(Mux(rewind, SchedKind.REWIND,
                                                        SchedKind.ADVANCE))]
        m.d.sync += [
            self.cpl_ack.valid.eq(F["psn"] | prog), self.cpl_ack.payload.qp.eq(a_qp),
            self.sched.valid.eq(F["psn"] | prog | rewind), self.sched.payload.qp.eq(a_qp),
        ]
        pulse = {"acks": F["acks"], "stale_acks": F["stale"], "seq_naks": F["seq"],
                 "rnr_naks": F["rnr"], "error_naks": F["fatal"], "timeouts": F["timeouts"],
                 "ignored": F["ignored_range"] | F["ignored_nak"], "rewinds": rewind,
                 "qp_errors": F["fail_retry"] | F["fail_rnr"] | F["fatal"]}
        m.d.sync += [getattr(self, name).eq(pulse[name]) for name in COUNTERS]

        # ---- stage C: the per-QP counters (read-modify-write of the QP's row)
        cnt_inc = Signal(data.ArrayLayout(6, nc))        # added to each per-QP counter
        for k, name in enumerate(QP_COUNTERS):
            if name == "packets":
                m.d.comb += cnt_inc[k].eq(Mux(F["sent"], a_packets, 0))
            elif name == "resent":
                m.d.comb += cnt_inc[k].eq(Mux(F["sent"], a_resent, 0))
            else:
                m.d.comb += cnt_inc[k].eq(pulse[name])
        c_valid = Signal()
        c_qp = Signal(8)
        c_inc = Signal(data.ArrayLayout(6, nc))
        m.d.sync += [c_valid.eq(a_valid & a_in), c_qp.eq(a_qp), c_inc.eq(cnt_inc)]
        m.d.comb += [crp.addr.eq(a_qp), cwp.addr.eq(c_qp), cwp.en.eq(c_valid)]
        for k in range(nc):
            m.d.comb += cwp.data[k].eq(crp.data[k] + c_inc[k])
        return m
