from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import ACK_EVENT, MAX_QPS, CplStatus, QpState
from .qp_table import CONTEXT_WRITE, PSN_WRITE

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


#: What the scheduler reports of the packets it issues: the QP, the PSN of the newest packet and
#: how many packets this record stands for, with consecutive PSNs ending at ``psn`` (the
#: scheduler merges the records of one QP while the engine is busy).
SENT = data.StructLayout({"qp": 8, "psn": 24, "packets": 6})


class SchedKind(enum.Enum, shape=2):
    """What the engine tells the scheduler about a QP."""
    ADVANCE = 0     # the acknowledged PSN moved: the QP's window may have opened
    REWIND = 1      # resend from the oldest unacknowledged packet
    RESET = 2       # the connection was set up again: forget the old one's requests


SCHED_EVENT = data.StructLayout({"qp": 8, "kind": SchedKind})

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
_ERROR_NAKS = {0x61: CplStatus.REMOTE_INVALID, 0x62: CplStatus.REMOTE_ACCESS,
               0x63: CplStatus.REMOTE_OP}


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
    cpl_ack : Out(stream.Signature(ACK_EVENT))
        The new acknowledged PSN of a QP (syndrome 0), to the completion tracker, whenever it
        changes (and on ``psn_set``). A one-cycle pulse: the consumer must always be ready.
    sched : Out(stream.Signature(SCHED_EVENT))
        ADVANCE, REWIND or RESET of a QP, to the scheduler. A one-cycle pulse: the consumer must
        always be ready.
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
        One-cycle pulses (:data:`COUNTERS`).

    Behaviour
    ---------
    One event per cycle is applied, as a read-modify-write of the QP's state (distributed
    RAM); priority: ``psn_set``, ``ctx_set``, an expired timer, then ``ack`` and ``sent`` in
    turn when both wait. All PSN comparisons are modulo 2^24 (serial arithmetic).

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
    * Timer expiry (one QP examined per cycle in turn; one with an expired timer is served
      before any ``ack``/``sent``): with nothing outstanding the timer stops; else, if
      ``retries >= retry_cnt`` the QP fails with RETRY_EXCEEDED, else ``retries`` += 1,
      REWIND, timer restarted. A timer fires between 2^(timeout+2) and 2^(timeout+2) + 1 ticks
      after it was (re)started (RNR: between its ticks and one more), plus the scan: up to
      ``num_qps`` cycles, longer only while ``psn_set``/``ctx_set`` writes keep the engine busy.
    * Failing: ``errored`` rises, the timer stops, the QP is released, ``err_status`` is the
      cause. Events of an errored QP other than ``psn_set``/``ctx_set`` are ignored (not
      counted), until ``psn_set`` clears the error state (RESET to the scheduler).

    Latency: an event accepted in cycle t has its outputs in cycle t (combinational) and its
    state written at the end of t. Throughput: one event per cycle. ``ack`` and ``sent`` are
    held only while a higher-priority event is served.
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
            "cpl_ack": Out(stream.Signature(ACK_EVENT)),
            "sched": Out(stream.Signature(SCHED_EVENT)),
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

        # ---- time base
        now = Signal(TIME_BITS)
        if self.tick_cycles > 1:
            div = Signal(range(self.tick_cycles))
            with m.If(div == self.tick_cycles - 1):
                m.d.sync += [div.eq(0), now.eq(now + 1)]
            with m.Else():
                m.d.sync += div.eq(div + 1)
        else:
            m.d.sync += now.eq(now + 1)

        mem = m.submodules.state = Memory(shape=RETRY_STATE, depth=n, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        scan_rp = mem.read_port(domain="comb")
        acked_rp = mem.read_port(domain="comb")
        err_rp = mem.read_port(domain="comb")
        nc = len(QP_COUNTERS)
        cmem = m.submodules.counters = Memory(shape=data.ArrayLayout(32, nc), depth=n, init=[])
        cwp = cmem.write_port()
        crp = cmem.read_port(domain="comb")
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

        # ---- timer scan: one QP per cycle, stays on a QP whose timer expired until served
        scan_q = Signal(range(n))
        m.d.comb += scan_rp.addr.eq(scan_q)
        ss = scan_rp.data
        late = Signal(TIME_BITS)
        m.d.comb += late.eq(now - ss.deadline)
        expired = Signal()
        m.d.comb += expired.eq(ss.armed & ~late[-1] & ~errored.bit_select(scan_q, 1))

        # ---- pick the event
        ack_turn = Signal(init=1)          # ack and sent alternate when both wait
        ev_psn = Signal()
        ev_ctx = Signal()
        ev_fire = Signal()
        ev_ack = Signal()
        ev_sent = Signal()
        with m.If(self.psn_set.valid):
            m.d.comb += ev_psn.eq(1)
        with m.Elif(self.ctx_set.valid):
            m.d.comb += ev_ctx.eq(1)
        with m.Elif(expired):
            m.d.comb += ev_fire.eq(1)
        with m.Elif(self.ack.valid & (ack_turn | ~self.sent.valid)):
            m.d.comb += ev_ack.eq(1)
        with m.Elif(self.sent.valid):
            m.d.comb += ev_sent.eq(1)
        m.d.comb += [
            self.psn_set.ready.eq(ev_psn),
            self.ctx_set.ready.eq(ev_ctx),
            self.ack.ready.eq(ev_ack),
            self.sent.ready.eq(ev_sent),
        ]
        with m.If(ev_ack):
            m.d.sync += ack_turn.eq(0)
        with m.Elif(ev_sent):
            m.d.sync += ack_turn.eq(1)
        with m.If(~ev_fire & ~expired):
            m.d.sync += scan_q.eq(Mux(scan_q == n - 1, 0, scan_q + 1))

        q = Signal(range(n))
        with m.If(ev_psn):
            m.d.comb += q.eq(self.psn_set.payload.qp)
        with m.Elif(ev_ctx):
            m.d.comb += q.eq(self.ctx_set.payload.qp)
        with m.Elif(ev_fire):
            m.d.comb += q.eq(scan_q)
        with m.Elif(ev_ack):
            m.d.comb += q.eq(self.ack.payload.qp)
        with m.Else():
            m.d.comb += q.eq(self.sent.payload.qp)
        # events naming a QP outside the table change nothing
        in_table = Signal()
        with m.If(ev_psn):
            m.d.comb += in_table.eq(self.psn_set.payload.qp < n)
        with m.Elif(ev_ctx):
            m.d.comb += in_table.eq(self.ctx_set.payload.qp < n)
        with m.Elif(ev_ack):
            m.d.comb += in_table.eq(self.ack.payload.qp < n)
        with m.Elif(ev_sent):
            m.d.comb += in_table.eq(self.sent.payload.qp < n)
        with m.Else():
            m.d.comb += in_table.eq(ev_fire)

        m.d.comb += [rp.addr.eq(q), crp.addr.eq(q)]
        st = rp.data
        new = Signal(RETRY_STATE)
        m.d.comb += new.eq(st)
        cnt_inc = Signal(data.ArrayLayout(6, nc))        # added to each per-QP counter
        is_err = errored.bit_select(q, 1)

        # outputs of this event
        cpl = self.cpl_ack
        sch = self.sched
        fail = Signal()
        fail_status = Signal(CplStatus)
        pulse = {name: Signal(name=f"pulse_{name}") for name in COUNTERS}

        def count(name):
            if name in QP_COUNTERS:
                m.d.comb += cnt_inc[QP_COUNTERS.index(name)].eq(1)
            if name in pulse:
                m.d.comb += pulse[name].eq(1)

        def duration(code):
            return Const(1, TIME_BITS) << (code + 2)

        def restart_timer():
            m.d.sync += held.bit_select(q, 1).eq(0)
            with m.If(st.timeout != 0):
                m.d.comb += [new.armed.eq(1), new.rnr_wait.eq(0),
                             new.deadline.eq(now + 1 + duration(st.timeout))]
            with m.Else():
                m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0)]

        def rewind():
            m.d.comb += [sch.valid.eq(1), sch.payload.kind.eq(SchedKind.REWIND)]
            count("rewinds")

        a = self.ack.payload
        p = a.psn
        span = Signal(24)                       # sent_max - acked: 1 + packets outstanding
        m.d.comb += span.eq(st.sent_max - st.acked)
        step = Signal(24)                       # ACK: p - acked
        m.d.comb += step.eq(p - st.acked)
        implied = Signal(24)                    # NAK: p - 1 - acked
        m.d.comb += implied.eq(p - 1 - st.acked)
        cls = a.syndrome[5:8]
        is_ack = cls == 0b000
        is_rnr = cls == 0b001
        is_seq = a.syndrome == _SYN_SEQ
        is_fatal = Signal()
        m.d.comb += is_fatal.eq((a.syndrome == 0x61) | (a.syndrome == 0x62) | (a.syndrome == 0x63))
        nak_ok = Signal()                       # the NAK's p - 1 is in [acked, sent_max - 1]
        m.d.comb += nak_ok.eq(implied < span)
        moved_to = Signal(24)
        progress = Signal()

        def apply_progress(to):
            m.d.comb += [
                progress.eq(1), moved_to.eq(to),
                new.acked.eq(to), new.retries.eq(0), new.rnr_retries.eq(0),
                new.rewind_active.eq(0),
                cpl.valid.eq(1), cpl.payload.psn.eq(to),
                sch.valid.eq(1), sch.payload.kind.eq(SchedKind.ADVANCE),
            ]
            with m.If((to + 1)[:24] == st.sent_max):
                m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0)]
                m.d.sync += held.bit_select(q, 1).eq(0)
            with m.Else():
                restart_timer()

        m.d.comb += [cpl.payload.qp.eq(q), sch.payload.qp.eq(q)]

        with m.If(ev_psn & in_table):
            ps = self.psn_set.payload.psn
            m.d.comb += [
                new.acked.eq(ps - 1), new.sent_max.eq(ps), new.armed.eq(0), new.rnr_wait.eq(0),
                new.retries.eq(0), new.rnr_retries.eq(0), new.rewind_active.eq(0),
                new.err_status.eq(CplStatus.OK),
                cpl.valid.eq(1), cpl.payload.psn.eq(ps - 1),
                sch.valid.eq(1), sch.payload.kind.eq(SchedKind.RESET),
            ]
            m.d.sync += [errored.bit_select(q, 1).eq(0), held.bit_select(q, 1).eq(0)]
        with m.Elif(ev_ctx & in_table):
            c = self.ctx_set.payload.context
            m.d.comb += [new.timeout.eq(c.timeout), new.retry_cnt.eq(c.retry_cnt),
                         new.rnr_retry.eq(c.rnr_retry)]
            with m.If(((c.state == QpState.RESET) | (c.state == QpState.ERROR)) & ~is_err):
                m.d.comb += [fail.eq(1), fail_status.eq(CplStatus.FLUSHED)]
        with m.Elif(is_err | ~in_table):
            pass
        with m.Elif(ev_sent):
            sp = self.sent.payload
            # packets before sent_max were sent before: resent
            before = Signal(24)
            m.d.comb += before.eq(st.sent_max - (sp.psn - sp.packets + 1))
            resent = Mux(before[23], 0, Mux(before >= sp.packets, sp.packets, before))
            m.d.comb += [cnt_inc[QP_COUNTERS.index("packets")].eq(sp.packets),
                         cnt_inc[QP_COUNTERS.index("resent")].eq(resent)]
            with m.If((sp.psn - st.sent_max)[23] == 0):     # psn >= sent_max: newer
                m.d.comb += new.sent_max.eq(sp.psn + 1)
            with m.If(~st.armed):
                restart_timer()
        with m.Elif(ev_fire):
            with m.If(st.rnr_wait):
                m.d.sync += held.bit_select(q, 1).eq(0)
                m.d.comb += new.rewind_active.eq(0)
                rewind()
                restart_timer()
            with m.Elif(span == 1):                           # nothing outstanding
                m.d.comb += new.armed.eq(0)
            with m.Else():
                count("timeouts")
                with m.If(st.retries >= st.retry_cnt):
                    m.d.comb += [fail.eq(1), fail_status.eq(CplStatus.RETRY_EXCEEDED)]
                with m.Else():
                    m.d.comb += [new.retries.eq(st.retries + 1), new.rewind_active.eq(0)]
                    rewind()
                    restart_timer()
        with m.Elif(ev_ack):
            with m.If(is_ack):
                with m.If((step != 0) & (step < span)):
                    count("acks")
                    apply_progress(p)
                with m.Elif(step == 0):
                    count("acks")
                    count("stale_acks")
                with m.Else():
                    count("ignored")
            with m.Elif(~nak_ok):
                count("ignored")
            with m.Else():
                with m.If(implied != 0):
                    apply_progress(p - 1)
                with m.If(is_seq):
                    count("seq_naks")
                    with m.If(st.rewind_active & (st.rewind_psn == p) & (implied == 0)):
                        count("ignored")
                    with m.Elif(Mux(implied != 0, 0, st.retries) >= st.retry_cnt):
                        m.d.comb += [fail.eq(1), fail_status.eq(CplStatus.RETRY_EXCEEDED)]
                    with m.Else():
                        m.d.comb += [new.retries.eq(Mux(implied != 0, 1, st.retries + 1)),
                                     new.rewind_active.eq(1), new.rewind_psn.eq(p)]
                        rewind()
                        restart_timer()
                with m.Elif(is_rnr):
                    count("rnr_naks")
                    with m.If(st.rnr_wait & (implied == 0)):
                        count("ignored")
                    with m.Elif((st.rnr_retry != 7) &
                                (Mux(implied != 0, 0, st.rnr_retries) >= st.rnr_retry)):
                        m.d.comb += [fail.eq(1), fail_status.eq(CplStatus.RNR_RETRY_EXCEEDED)]
                    with m.Else():
                        table = Array(Const(rnr_ticks(k), TIME_BITS) for k in range(32))
                        m.d.comb += [
                            new.rnr_retries.eq(Mux(implied != 0, 1,
                                                   Mux(st.rnr_retries == 7, 7,
                                                       st.rnr_retries + 1))),
                            new.armed.eq(1), new.rnr_wait.eq(1),
                            new.deadline.eq(now + 1 + table[a.syndrome[:5]]),
                        ]
                        m.d.sync += held.bit_select(q, 1).eq(1)
                with m.Elif(is_fatal):
                    count("error_naks")
                    with m.Switch(a.syndrome):
                        for syn, status in _ERROR_NAKS.items():
                            with m.Case(syn):
                                m.d.comb += [fail.eq(1), fail_status.eq(status)]
                with m.Else():
                    count("ignored")

        with m.If(fail):
            m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0), new.err_status.eq(fail_status)]
            m.d.sync += [errored.bit_select(q, 1).eq(1), held.bit_select(q, 1).eq(0)]
            count("qp_errors")

        wrote = (ev_psn | ev_ctx | ev_fire | ev_ack | ev_sent) & in_table
        m.d.comb += [wp.addr.eq(q), wp.data.eq(new), wp.en.eq(wrote)]
        m.d.comb += [cwp.addr.eq(q), cwp.en.eq(wrote & (cnt_inc.as_value() != 0))]
        for k in range(nc):
            m.d.comb += cwp.data[k].eq(crp.data[k] + cnt_inc[k])
        for name in COUNTERS:
            m.d.comb += getattr(self, name).eq(pulse[name])
        return m
