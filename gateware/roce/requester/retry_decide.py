from amaranth.hdl import Array, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    RETRY_DECIDED,
    RETRY_EVENT,
    RETRY_STATE,
    TIME_BITS,
    CplStatus,
    QpState,
    RetryEvKind,
    check_num_qps,
)
from rocegen.wire.roce import RNR_DELAY_US

__all__ = ["RetryDecide", "TICK_NS", "timeout_ticks", "rnr_ticks"]

#: The retry engine's time unit: 1.024 us (a timeout code's 4.096 us is 4 ticks).
TICK_NS = 1024
_SYN_SEQ = 0x60


def timeout_ticks(code):
    """Ticks of a retransmit timeout code 1..31 (4.096 us x 2^code)."""
    return 1 << (code + 2)


def rnr_ticks(code):
    """Ticks of an RNR timer code, rounded up (the wait is never shorter than the code says)."""
    return -(-RNR_DELAY_US[code] * 1000 // TICK_NS)


class RetryDecide(wiring.Component):
    """The decision stage of the :class:`~rocegen.gateware.roce.requester.retry.RetryEngine`: what an
    event does to its QP, worked out from the QP's state as flags and registered with the
    values the new state is made of.

    Parameters
    ----------
    num_qps : int
        QPs in the table (1..256).

    Ports
    -----
    event : In(stream.Signature(RETRY_EVENT, always_ready=True))
        The event taken in the cycle before (registered by the engine's intake).
    qvec : In(num_qps)
        One-hot of the event's QP (zero: no event, or a QP outside the table).
    state_qp / state
        The read of the QP's :data:`~rocegen.gateware.roce.layouts.RETRY_STATE`
        (combinational: ``state_qp`` is ``event.payload.qp``).
    errored : In(1)
        The QP is in the error state.
    decided : Out(stream.Signature(RETRY_DECIDED, always_ready=True))
        The event decided, one cycle after ``event`` (registers).
    decided_qvec : Out(num_qps)
        ``qvec`` registered beside it.

    Behaviour: the rules of the engine's docstring, as flags of
    :data:`~rocegen.gateware.roce.layouts.RETRY_FLAGS` (all PSN comparisons modulo 2^24, for a
    QP with at most 2^23 - 1 PSNs outstanding, as the scheduler's ``window`` keeps it): the
    progress of an ACK in [acked + 1, sent_max - 1] or of a NAK's implied p - 1 in [acked,
    sent_max - 1], stale and ignored acknowledgements, a repeated sequence NAK, the RNR wait
    and the retry limits, a timer found due again against the event's tick, a context in
    RESET or ERROR. An event of a failed QP other than ``psn_set``/``ctx_set`` sets no flag.
    Latency: one cycle; one event per cycle.
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "event": In(stream.Signature(RETRY_EVENT, always_ready=True)),
            "qvec": In(num_qps),
            "state_qp": Out(8),
            "state": In(RETRY_STATE),
            "errored": In(1),
            "decided": Out(stream.Signature(RETRY_DECIDED, always_ready=True)),
            "decided_qvec": Out(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        e = self.event.payload
        e_valid = self.event.valid
        m.d.comb += self.state_qp.eq(e.qp)
        st = self.state
        p = e.psn
        e_psn1 = Signal(24)                 # e.psn + 1
        e_pm1 = Signal(24)                  # e.psn - 1
        m.d.comb += [e_psn1.eq(e.psn + 1), e_pm1.eq(e.psn - 1)]
        e_err = self.errored
        live = e_valid & e.in_table & ~e_err    # events other than psn_set/ctx_set: not failed

        return self._elaborate_rnr(m, e, e_err, e_pm1, e_psn1, e_valid, live, p, st)

    def _elaborate_rnr(self, m, e, e_err, e_pm1, e_psn1, e_valid, live, p, st):
        """The PSN windows, and the decision for each kind of event: acknowledgement, sequence and
        RNR NAK, fatal NAK, timeout."""
        span = Signal(24)                   # sent_max - acked: 1 + packets outstanding
        implied = Signal(24)                # NAK: p - 1 - acked (ACK: p - acked - 1)
        past = Signal(24)                   # p - sent_max
        past1 = Signal(24)                  # p - 1 - sent_max
        before = Signal(24)                 # sent: packets before sent_max were sent before
        imp0 = Signal()                     # NAK: p - 1 == acked
        m.d.comb += [
            span.eq(st.sent_max - st.acked),
            implied.eq(p + ~st.acked),
            past.eq(p - st.sent_max),
            past1.eq(e_pm1 - st.sent_max),
            before.eq(st.sent_max - e.first),
            imp0.eq(e_pm1 == st.acked),
        ]
        syn = e.syn
        cls = syn[5:8]
        is_ack = cls == 0b000
        is_rnr = cls == 0b001
        is_seq = syn == _SYN_SEQ
        is_fatal = (syn == 0x61) | (syn == 0x62) | (syn == 0x63)

        k_psn = e_valid & e.in_table & (e.kind == RetryEvKind.PSN)
        k_ctx = e_valid & e.in_table & (e.kind == RetryEvKind.CTX)
        k_fire = live & (e.kind == RetryEvKind.FIRE)
        k_ack = live & (e.kind == RetryEvKind.ACK)
        k_sent = live & (e.kind == RetryEvKind.SENT)
        # The windows as signs of differences: a QP never has 2^23 or more PSNs outstanding
        # (span <= 2^23), so x lies in [acked, sent_max - 1] exactly when x - acked and
        # sent_max - 1 - x are both below 2^23, i.e. x - acked has bit 23 clear and x - sent_max
        # has it set. One subtraction from the state each, instead of two chained (x - acked
        # against sent_max - acked): the shallower path out of the state memory.
        step_in = ~implied[23] & past[23]   # ACK: p - acked in [1, span - 1]
        step0 = p == st.acked               # ACK: stale
        nak_ok = ~implied[23] & past1[23]   # NAK: p - 1 in [acked, sent_max - 1]
        nak = k_ack & ~is_ack & nak_ok
        # a repeat of the NAK behind the last rewind. While ``rewind_active`` holds, ``acked`` is
        # ``rewind_psn - 1`` (the rewind left it there and any progress clears the flag), so the
        # same PSN also means no progress: ``imp0`` is implied and kept off this path
        repeat = st.rewind_active & (st.rewind_psn == p)
        seq = nak & is_seq
        rnr = nak & is_rnr
        rnr_ign = st.rnr_wait & imp0
        # Whether a sequence NAK may rewind (else the retries are exhausted) and an RNR NAK
        # may start a wait (else it is ignored, or the RNR retries are exhausted), each
        # written as a choice on ``imp0`` made last, the deepest input: with no progress
        # (``imp0``) the counts so far decide; after progress they restart from zero.
        seq_go = Mux(imp0, st.retries < st.retry_cnt, st.retry_cnt != 0)
        rnr_forever = st.rnr_retry == 7
        rnr_go = Mux(imp0, ~st.rnr_wait & (rnr_forever | (st.rnr_retries < st.rnr_retry)),
                     st.rnr_retry != 0)
        rnr_out = Mux(imp0, ~st.rnr_wait & ~rnr_forever & (st.rnr_retries >= st.rnr_retry),
                      st.rnr_retry == 0)
        due = st.armed & ~(e.now - st.deadline)[-1]     # checked again: it may have restarted
        fire = k_fire & due
        fire_to = fire & ~st.rnr_wait & (span != 1)
        prog_end = Mux(is_ack, e_psn1 == st.sent_max, p == st.sent_max)

        flags = {
            "psn": k_psn,
            "ctx": k_ctx,
            "sent": k_sent,
            # the acknowledged PSN moves (to p, or p - 1 for a NAK)
            "prog": k_ack & Mux(is_ack, step_in, nak_ok & ~imp0),
            "prog_end": prog_end,           # ... and nothing is outstanding then
            "acks": k_ack & is_ack & (step_in | step0),
            "stale": k_ack & is_ack & step0,
            "seq": seq,
            "seq_rew": seq & ~repeat & seq_go,
            "rnr": rnr,
            "rnr_start": rnr & rnr_go,
            "fatal": nak & is_fatal,
            # ignored (in four parts, joined in stage B): an ACK or a NAK out of range, ...
            "ignored_range": (k_ack & is_ack & ~step_in & ~step0) | (k_ack & ~is_ack & ~nak_ok),
            # ... a repeated sequence NAK, an RNR NAK during its wait, another NAK code (apart,
            # each as shallow as the flags beside it: stage B joins them)
            "ignored_seq": seq & repeat,
            "ignored_rnr": rnr & rnr_ign,
            "ignored_code": nak & ~is_seq & ~is_rnr & ~is_fatal,
            "fire_rnr": fire & st.rnr_wait,
            "fire_stop": fire & ~st.rnr_wait & (span == 1),
            "timeouts": fire_to,
            "fire_rew": fire_to & (st.retries < st.retry_cnt),
            "sent_restart": k_sent & ~st.armed,
            "sent_newer": k_sent & ~past[23],
            "fail_flush": k_ctx & ((e.ctx.state == QpState.RESET) |
                                   (e.ctx.state == QpState.ERROR)) & ~e_err,
            "fail_retry": (fire_to & (st.retries >= st.retry_cnt)) | (seq & ~repeat & ~seq_go),
            "fail_rnr": rnr & rnr_out,
            "timeout_nz": st.timeout != 0,
        }
        d = self.decided.payload
        m.d.sync += [getattr(d.flags, name).eq(value) for name, value in flags.items()]
        rnr_table = Array(Const(rnr_ticks(k), TIME_BITS) for k in range(32))
        m.d.sync += [
            self.decided.valid.eq(e_valid), d.qp.eq(e.qp), d.in_table.eq(e.in_table),
            self.decided_qvec.eq(self.qvec),
            d.st.eq(st), d.psn.eq(p), d.psn1.eq(e_psn1), d.pm1.eq(e_pm1), d.ctx.eq(e.ctx),
            d.fatal_status.eq(Mux(syn[1], Mux(syn[0], CplStatus.REMOTE_OP,
                                              CplStatus.REMOTE_ACCESS),
                                  CplStatus.REMOTE_INVALID)),
            d.packets.eq(e.packets),
            d.resent.eq(Mux(before[23], 0, Mux(before >= e.packets, e.packets, before))),
            d.seq_retries.eq(Mux(imp0, st.retries + 1, 1)),
            d.rnr_retries.eq(Mux(imp0, Mux(st.rnr_retries == 7, 7, st.rnr_retries + 1), 1)),
            d.dl_timeout.eq(e.now1 + (Const(1, TIME_BITS) << (st.timeout + 2))),
            d.dl_rnr.eq(e.now1 + rnr_table[syn[:5]]),
        ]
        return m
