from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    ACK_EVENT,
    RETRY_DECIDED,
    RETRY_STATE,
    SCHED_EVENT,
    CplStatus,
    SchedKind,
    check_num_qps,
)

__all__ = ["RetryApply", "QP_COUNTERS", "COUNTERS"]

#: Per-QP counters of the retry engine (read through ``qp_stats_*``), in address order within a
#: QP.
QP_COUNTERS = ("packets", "resent", "acks", "stale_acks", "seq_naks", "rnr_naks", "error_naks",
               "timeouts", "ignored")

#: One-cycle pulses of the retry engine (for the global statistics block).
COUNTERS = ("acks", "stale_acks", "seq_naks", "rnr_naks", "error_naks", "timeouts", "ignored",
            "rewinds", "qp_errors")


class RetryApply(wiring.Component):
    """The last stage of the :class:`~rocegen.gateware.roce.requester.retry.RetryEngine`: the new state
    of the QP from the flags of a decided event, written; the outputs registered.

    Parameters
    ----------
    num_qps : int
        QPs in the table (1..256).

    Ports
    -----
    decided : In(stream.Signature(RETRY_DECIDED, always_ready=True))
        The event decided by :class:`~rocegen.gateware.roce.requester.retry_decide.RetryDecide`.
    decided_qvec : In(num_qps)
        One-hot of its QP (zero: none, or a QP outside the table).
    wr_qp / wr_state / wr_en
        The write of the QP's new :data:`~rocegen.gateware.roce.layouts.RETRY_STATE`
        (combinational, in the cycle of ``decided``).
    errored, held : Out(num_qps)
        QPs in the error state, QPs held by an RNR wait (registers).
    cpl_ack : Out(stream.Signature(ACK_EVENT, always_ready=True))
        As the engine's port: in the cycle of ``decided`` (a multiplexer on its registers), so
        that the completion tracker hears of an acknowledgement in the cycle the state is
        written.
    sched : Out(stream.Signature(SCHED_EVENT, always_ready=True))
        As the engine's port: one cycle after ``decided`` (registers).
    acks ... qp_errors : Out(1)
        The pulses of :data:`COUNTERS`, one cycle after ``decided`` (registers).
    cnt_qp / cnt_inc
        The QP of ``decided`` and what each of its :data:`QP_COUNTERS` gains (combinational,
        6 bits each), for the per-QP counters.

    Behaviour: a failure (a context in RESET or ERROR: FLUSHED; retries or RNR retries
    exhausted; an error NAK) stops the timer, releases the QP and records the cause;
    ``psn_set`` starts the QP afresh; progress moves the acknowledged PSN and zeroes the retry
    counts; a rewind or progress with packets outstanding (re)starts the retransmit timer (if
    the QP has a timeout code), an RNR NAK starts the RNR wait. ``cpl_ack`` reports the new
    acknowledged PSN (progress, ``psn_set``), ``sched`` RESET, REWIND or ADVANCE. ``qp_errors``
    pulses for the failures the engine finds, not for a context written in RESET or ERROR.
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "decided": In(stream.Signature(RETRY_DECIDED, always_ready=True)),
            "decided_qvec": In(num_qps),
            "wr_qp": Out(8),
            "wr_state": Out(RETRY_STATE),
            "wr_en": Out(1),
            "errored": Out(num_qps),
            "held": Out(num_qps),
            "cpl_ack": Out(stream.Signature(ACK_EVENT, always_ready=True)),
            "sched": Out(stream.Signature(SCHED_EVENT, always_ready=True)),
            **{name: Out(1) for name in COUNTERS},
            "cnt_qp": Out(8),
            "cnt_inc": Out(data.ArrayLayout(6, len(QP_COUNTERS))),
        })

    def elaborate(self, platform):
        m = Module()
        a = self.decided.payload
        F = a.flags
        s = a.st
        a_qvec = self.decided_qvec
        fail = F.fail_flush | F.fail_retry | F.fail_rnr | F.fatal
        fail_status = Signal(CplStatus)
        with m.If(F.fail_flush):
            m.d.comb += fail_status.eq(CplStatus.FLUSHED)
        with m.Elif(F.fail_retry):
            m.d.comb += fail_status.eq(CplStatus.RETRY_EXCEEDED)
        with m.Elif(F.fail_rnr):
            m.d.comb += fail_status.eq(CplStatus.RNR_RETRY_EXCEEDED)
        with m.Else():
            m.d.comb += fail_status.eq(a.fatal_status)
        prog = F.prog
        rewind = F.fire_rnr | F.fire_rew | F.seq_rew
        # the retransmit timer restarts (an RNR wait, a failure or psn_set take precedence)
        restart = (F.sent_restart | rewind | (prog & ~F.prog_end))
        stop = (prog & F.prog_end) | F.fire_stop
        prog_to = Mux(F.acks, a.psn, a.pm1)

        new = Signal(RETRY_STATE)
        m.d.comb += new.eq(s)
        with m.If(F.psn):
            m.d.comb += [new.acked.eq(a.pm1), new.sent_max.eq(a.psn)]
        with m.Elif(prog):
            m.d.comb += new.acked.eq(prog_to)
        with m.Elif(F.sent_newer):
            m.d.comb += new.sent_max.eq(a.psn1)
        with m.If(fail | F.psn):
            m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0)]
        with m.Elif(F.rnr_start):
            m.d.comb += [new.armed.eq(1), new.rnr_wait.eq(1), new.deadline.eq(a.dl_rnr)]
        with m.Elif(restart):
            m.d.comb += [new.armed.eq(F.timeout_nz), new.rnr_wait.eq(0),
                         new.deadline.eq(a.dl_timeout)]
        with m.Elif(stop):
            m.d.comb += [new.armed.eq(0), new.rnr_wait.eq(0)]
        with m.If(F.seq_rew):
            m.d.comb += new.retries.eq(a.seq_retries)
        with m.Elif(F.fire_rew):
            m.d.comb += new.retries.eq(s.retries + 1)
        with m.Elif(prog | F.psn):
            m.d.comb += new.retries.eq(0)
        with m.If(F.rnr_start):
            m.d.comb += new.rnr_retries.eq(a.rnr_retries)
        with m.Elif(prog | F.psn):
            m.d.comb += new.rnr_retries.eq(0)
        with m.If(F.seq_rew):
            m.d.comb += [new.rewind_active.eq(1), new.rewind_psn.eq(a.psn)]
        with m.Elif(prog | F.psn | F.fire_rnr | F.fire_rew):
            m.d.comb += new.rewind_active.eq(0)
        with m.If(fail):
            m.d.comb += new.err_status.eq(fail_status)
        with m.Elif(F.psn):
            m.d.comb += new.err_status.eq(CplStatus.OK)
        with m.If(F.ctx):
            m.d.comb += [new.timeout.eq(a.ctx.timeout), new.retry_cnt.eq(a.ctx.retry_cnt),
                         new.rnr_retry.eq(a.ctx.rnr_retry)]
        m.d.comb += [self.wr_qp.eq(a.qp), self.wr_state.eq(new),
                     self.wr_en.eq(self.decided.valid & a.in_table)]

        # the QP's bits: a failure, psn_set, progress and a restart clear held, an RNR wait
        # sets it; a failure sets errored, psn_set clears it
        held, errored = self.held, self.errored
        held_clr = fail | F.psn | prog | restart
        m.d.sync += [
            held.eq((held & ~Mux(held_clr, a_qvec, 0)) | Mux(F.rnr_start, a_qvec, 0)),
            errored.eq((errored & ~Mux(F.psn, a_qvec, 0)) | Mux(fail, a_qvec, 0)),
        ]

        # the new acknowledged PSN to the completion tracker in the cycle the state is written
        # (the tracker registers it); the other outputs registered, in the cycle after
        m.d.comb += [
            self.cpl_ack.valid.eq(self.decided.valid & (F.psn | prog)),
            self.cpl_ack.payload.qp.eq(a.qp),
            self.cpl_ack.payload.psn.eq(Mux(F.psn, a.pm1, prog_to)),
        ]
        with m.If(F.psn):
            m.d.sync += self.sched.payload.kind.eq(SchedKind.RESET)
        with m.Else():
            m.d.sync += self.sched.payload.kind.eq(Mux(rewind, SchedKind.REWIND,
                                                       SchedKind.ADVANCE))
        m.d.sync += [
            self.sched.valid.eq(F.psn | prog | rewind), self.sched.payload.qp.eq(a.qp),
        ]
        pulse = {"acks": F.acks, "stale_acks": F.stale, "seq_naks": F.seq,
                 "rnr_naks": F.rnr, "error_naks": F.fatal, "timeouts": F.timeouts,
                 "ignored": F.ignored_range | F.ignored_seq | F.ignored_rnr | F.ignored_code,
                 "rewinds": rewind,
                 "qp_errors": F.fail_retry | F.fail_rnr | F.fatal}
        m.d.sync += [getattr(self, name).eq(pulse[name]) for name in COUNTERS]

        # what the per-QP counters gain
        m.d.comb += self.cnt_qp.eq(a.qp)
        for k, name in enumerate(QP_COUNTERS):
            if name == "packets":
                m.d.comb += self.cnt_inc[k].eq(Mux(F.sent, a.packets, 0))
            elif name == "resent":
                m.d.comb += self.cnt_inc[k].eq(Mux(F.sent, a.resent, 0))
            else:
                m.d.comb += self.cnt_inc[k].eq(pulse[name])
        return m
