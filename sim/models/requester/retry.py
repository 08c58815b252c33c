"""Reference model of the retry engine (:class:`~rocegen.gateware.roce.requester.retry.RetryEngine`), pure
Python and independent of the gateware.

Time is counted in ticks of 1.024 us (the engine's time base ``now``); every event method takes
the tick it happens in. A QP's state: the last acknowledged PSN ``acked`` (the oldest
unacknowledged packet is ``acked + 1``), ``sent_max`` (the PSN after the newest packet sent),
one timer (either the retransmit timer or an RNR wait), the retry counts since the last progress,
its context parameters (timeout code, ``retry_cnt``, ``rnr_retry``) and its error state. All PSN
comparisons are modulo 2^24. Packets outstanding: ``sent_max - acked - 1``.

Rules:

* ``psn_set(qp, psn)``: the connection is set up (again): ``acked = psn - 1``, ``sent_max =
  psn``, timer off, retry counts zero, the error state and any RNR wait left. Outputs: the new
  acknowledged PSN and RESET.
* ``ctx_set``: the timeout code and the retry counts are taken (the running timer is kept). A
  context in RESET or ERROR fails the QP with FLUSHED, unless it is already failed.
* A timer (re)started in tick ``t`` for ``d`` ticks has its deadline at tick ``t + 1 + d``: it
  never expires before ``d`` whole ticks have passed. The retransmit timer lasts
  ``2^(timeout + 2)`` ticks (4.096 us x 2^timeout); with timeout code 0 "restarting" it stops it.
  An RNR wait lasts the RNR delay of the NAK's code, rounded up to whole ticks. The QP is held
  exactly while an RNR wait runs: anything that replaces the RNR wait by the retransmit timer
  (or stops it) releases the QP.
* ``sent(qp, psn, packets)``: ``packets`` consecutive PSNs ending at ``psn`` were sent; those
  before ``sent_max`` are counted as resent. ``sent_max`` moves to ``psn + 1`` unless it is
  already ahead. If no timer runs, the retransmit timer starts.
* Progress (the acknowledged PSN moves to ``p``): ``acked = p``, retry counts zero, no sequence
  NAK rewind in flight any more, the retransmit timer restarts (it stops, and any RNR wait
  ends, when nothing is outstanding). Outputs: the new acknowledged PSN and ADVANCE.
* ACK (syndrome bits 7..5 zero) of ``p``: progress if ``p`` is in ``[acked + 1, sent_max - 1]``;
  ``p == acked`` is a stale ACK (counted with the ACKs); any other ``p`` acknowledges nothing
  sent and is ignored.
* Any other syndrome is handled as a NAK of ``p``: unless ``p - 1`` is in ``[acked, sent_max -
  1]`` it is ignored; otherwise ``p - 1`` is acknowledged first (progress if it moves), then:

  - 0x60, PSN sequence error: a repeat of the NAK that caused the last rewind (same PSN, no
    progress and no other rewind since) is ignored; else if the retries reached ``retry_cnt``
    the QP fails with RETRY_EXCEEDED; else one more retry, REWIND, the retransmit timer restarts.
  - 0x20..0x3F, RNR NAK: ignored while an RNR wait runs; else if ``rnr_retry`` is not 7 and the
    RNR retries reached it, the QP fails with RNR_RETRY_EXCEEDED; else one more RNR retry and an
    RNR wait starts (the QP is held).
  - 0x61 / 0x62 / 0x63: the QP fails with REMOTE_INVALID / REMOTE_ACCESS / REMOTE_OP.
  - anything else: ignored (after the acknowledgement of ``p - 1``).
* Timer expiry (``fire``): an RNR wait ends with the QP released, REWIND and the retransmit timer
  restarted. A retransmit timer with nothing outstanding just stops (no output). Otherwise it is
  a timeout: if the retries reached ``retry_cnt`` the QP fails with RETRY_EXCEEDED, else one more
  retry, REWIND, the timer restarts. The engine serves expired timers one QP per cycle, so an
  expiry may be served a few ticks after its deadline; the model assumes that a retransmit timer
  with nothing outstanding has stopped when a ``sent`` comes after its deadline (a caller must
  not send on such a QP in the few ticks after that deadline).
* Failing: the QP enters the error state with the cause as its status, its timer stops and it is
  released. A failed QP ignores ``sent``, ``ack`` and its timer (nothing is counted) until
  ``psn_set``; ``ctx_set`` still takes its parameters.
* The outputs of one event: ``cpl_ack`` (the new acknowledged PSN, or None), ``sched`` (one of
  ADVANCE / REWIND / RESET, or None: a rewind together with progress reports REWIND), ``fail``
  (the status, or None) and the set of :data:`COUNTERS` that pulse. Per QP, :data:`QP_COUNTERS`
  count (modulo 2^32) the packets and resent packets of ``sent`` and the same events as the
  pulses of the same names.
* Events naming a QP outside the table change nothing and output nothing.

Counted events: ``acks`` (ACKs that make progress or are stale), ``stale_acks``, ``seq_naks`` /
``rnr_naks`` / ``error_naks`` (NAKs inside the window, whatever they then do), ``timeouts``
(expiries of a retransmit timer with packets outstanding), ``ignored`` (ACKs and NAKs outside the
window, repeated sequence NAKs, RNR NAKs during an RNR wait, other syndromes), ``rewinds`` and
``qp_errors`` (failures found by the engine: retries or RNR retries exhausted, an error NAK; not
the flush of a context written in RESET or ERROR, which is how a QP is closed).

The state of a QP before its first ``psn_set`` is not specified: set every QP's PSN first.
"""

from dataclasses import dataclass, field

from rocegen.wire.verbs import CplStatus, QpState

__all__ = ["RetryModel", "Outputs", "PSN_MOD", "TIME_TICK_NS", "RNR_DELAY_US", "QP_COUNTERS",
           "COUNTERS", "SCHED_KINDS", "FAIL_STATUSES", "QP_STATES", "timeout_ticks", "rnr_ticks",
           "covers", "ahead"]

PSN_MOD = 1 << 24
_HALF = 1 << 23
_COUNTER_MOD = 1 << 32

#: Length of a tick in nanoseconds.
TIME_TICK_NS = 1024

#: RNR timer codes 0..31 in microseconds (InfiniBand's table; code 0 is the longest).
RNR_DELAY_US = (
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920,
    2_560, 3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920,
    122_880, 163_840, 245_760, 327_680, 491_520)

#: Per-QP counters, in the engine's address order.
QP_COUNTERS = ("packets", "resent", "acks", "stale_acks", "seq_naks", "rnr_naks", "error_naks",
               "timeouts", "ignored")

#: One-cycle event pulses.
COUNTERS = ("acks", "stale_acks", "seq_naks", "rnr_naks", "error_naks", "timeouts", "ignored",
            "rewinds", "qp_errors")

SCHED_KINDS = ("ADVANCE", "REWIND", "RESET")
#: The completion statuses of a QP failed by the retry engine (FLUSHED .. REMOTE_OP).
FAIL_STATUSES = tuple(s.name for s in CplStatus if CplStatus.FLUSHED <= s <= CplStatus.REMOTE_OP)
QP_STATES = tuple(s.name for s in QpState)

_SYN_SEQ = 0x60
_FATAL = {0x61: "REMOTE_INVALID", 0x62: "REMOTE_ACCESS", 0x63: "REMOTE_OP"}
_RNR_FOREVER = 7


def timeout_ticks(code):
    """Ticks of a retransmit timeout code 1..31: 4.096 us x 2^code."""
    if not 1 <= code <= 31:
        raise ValueError(f"timeout code must be 1..31, not {code}")
    return 4096 * (1 << code) // TIME_TICK_NS


def rnr_ticks(code):
    """Ticks of an RNR timer code 0..31, rounded up."""
    ns = RNR_DELAY_US[code] * 1000
    return (ns + TIME_TICK_NS - 1) // TIME_TICK_NS


def covers(acked, psn):
    """An acknowledgement of ``acked`` covers ``psn``."""
    return (acked - psn) % PSN_MOD < _HALF


def ahead(new, old):
    """``new`` is strictly after ``old`` in 24-bit serial arithmetic."""
    return 0 < (new - old) % PSN_MOD < _HALF


@dataclass(frozen=True)
class Outputs:
    """What the engine reports for one event."""
    cpl_ack: int | None = None            # the new acknowledged PSN
    sched: str | None = None              # a name of SCHED_KINDS
    fail: str | None = None               # a name of FAIL_STATUSES
    pulses: frozenset = frozenset()       # names of COUNTERS


@dataclass
class _Qp:
    acked: int = 0
    sent_max: int = 1
    deadline: int | None = None           # the running timer's deadline, None: no timer
    rnr_wait: bool = False                # the running timer is an RNR wait (the QP is held)
    retries: int = 0
    rnr_retries: int = 0
    nak_rewind: int | None = None         # PSN of the sequence NAK that caused the last rewind
    timeout: int = 0
    retry_cnt: int = 0
    rnr_retry: int = 0
    errored: bool = False
    err_status: str = "OK"
    counters: dict = field(default_factory=lambda: dict.fromkeys(QP_COUNTERS, 0))

    @property
    def outstanding(self):
        return (self.sent_max - self.acked - 1) % PSN_MOD


class _Event:
    """Collects the outputs of one event."""

    def __init__(self, qp_state):
        self.s = qp_state
        self.cpl_ack = None
        self.progress = False
        self.rewind = False
        self.reset = False
        self.fail = None
        self.pulses = set()

    def count(self, name):
        if name in COUNTERS:
            self.pulses.add(name)
        if name in QP_COUNTERS:
            self.add(name, 1)

    def add(self, name, n):
        c = self.s.counters
        c[name] = (c[name] + n) % _COUNTER_MOD

    def outputs(self):
        sched = None
        if self.reset:
            sched = "RESET"
        elif self.rewind:
            sched = "REWIND"
        elif self.progress:
            sched = "ADVANCE"
        return Outputs(self.cpl_ack, sched, self.fail, frozenset(self.pulses))


class RetryModel:
    """The retry engine's rules for ``num_qps`` QPs (see the module docstring)."""

    def __init__(self, num_qps):
        if not isinstance(num_qps, int) or not 1 <= num_qps <= 256:
            raise ValueError(f"num_qps must be 1..256, not {num_qps!r}")
        self.num_qps = num_qps
        self.qps = [_Qp() for _ in range(num_qps)]

    # ---- queries

    def _q(self, qp):
        if not 0 <= qp < self.num_qps:
            raise IndexError(f"QP {qp} outside 0..{self.num_qps - 1}")
        return self.qps[qp]

    def errored(self, qp):
        return self._q(qp).errored

    def held(self, qp):
        return self._q(qp).rnr_wait

    def err_status(self, qp):
        return self._q(qp).err_status

    def counters(self, qp):
        return dict(self._q(qp).counters)

    def acked(self, qp):
        return self._q(qp).acked

    def sent_max(self, qp):
        return self._q(qp).sent_max

    def outstanding(self, qp):
        return self._q(qp).outstanding

    def retries(self, qp):
        return self._q(qp).retries

    def rnr_retries(self, qp):
        return self._q(qp).rnr_retries

    def params(self, qp):
        """The QP's context parameters: ``(timeout, retry_cnt, rnr_retry)``."""
        s = self._q(qp)
        return s.timeout, s.retry_cnt, s.rnr_retry

    def deadline(self, qp):
        """Deadline of the running timer of ``qp`` (its RNR wait or its retransmit timer), or
        None when no timer runs."""
        return self._q(qp).deadline

    def due(self, qp, now):
        """The timer of ``qp`` has expired at tick ``now`` (its deadline is reached)."""
        s = self._q(qp)
        return not s.errored and s.deadline is not None and s.deadline <= now

    def vector(self, what):
        """``errored`` or ``held`` of every QP as a bit vector (QP k in bit k)."""
        get = {"errored": self.errored, "held": self.held}[what]
        return sum(1 << q for q in range(self.num_qps) if get(q))

    # ---- helpers

    def _restart(self, s, now):
        """(Re)start the retransmit timer; ends any RNR wait."""
        s.rnr_wait = False
        s.deadline = now + 1 + timeout_ticks(s.timeout) if s.timeout else None

    def _stop(self, s):
        s.rnr_wait = False
        s.deadline = None

    def _progress(self, ev, to, now):
        s = ev.s
        s.acked = to % PSN_MOD
        s.retries = 0
        s.rnr_retries = 0
        s.nak_rewind = None
        if s.outstanding == 0:
            self._stop(s)
        else:
            self._restart(s, now)
        ev.progress = True
        ev.cpl_ack = s.acked

    def _rewind(self, ev, now):
        ev.rewind = True
        ev.count("rewinds")
        self._restart(ev.s, now)

    def _fail(self, ev, status):
        s = ev.s
        s.errored = True
        s.err_status = status
        self._stop(s)
        ev.fail = status
        if status != "FLUSHED":         # a flush is the control side's doing, not an error
            ev.count("qp_errors")

    # ---- events

    def psn_set(self, qp, psn):
        if not 0 <= qp < self.num_qps:
            return Outputs()
        s = self.qps[qp]
        psn %= PSN_MOD
        s.acked = (psn - 1) % PSN_MOD
        s.sent_max = psn
        self._stop(s)
        s.retries = s.rnr_retries = 0
        s.nak_rewind = None
        s.errored = False
        s.err_status = "OK"
        return Outputs(cpl_ack=s.acked, sched="RESET")

    def ctx_set(self, qp, state, timeout, retry_cnt, rnr_retry):
        if not 0 <= qp < self.num_qps:
            return Outputs()
        if hasattr(state, "name"):
            state = state.name
        elif isinstance(state, int):
            state = QP_STATES[state]
        if state not in QP_STATES:
            raise ValueError(f"unknown QP state {state!r}")
        if not (0 <= timeout <= 31 and 0 <= retry_cnt <= 7 and 0 <= rnr_retry <= 7):
            raise ValueError(f"bad context parameters {timeout}, {retry_cnt}, {rnr_retry}")
        s = self.qps[qp]
        s.timeout, s.retry_cnt, s.rnr_retry = timeout, retry_cnt, rnr_retry
        ev = _Event(s)
        if state in ("RESET", "ERROR") and not s.errored:
            self._fail(ev, "FLUSHED")
        return ev.outputs()

    def sent(self, qp, psn, packets, resent=None, now=None):
        """``packets`` packets with consecutive PSNs ending at ``psn`` were sent in tick ``now``.
        ``resent``, when given, is checked against the model's count of resent packets."""
        if now is None:
            raise TypeError("sent() needs the tick now")
        if not 0 <= qp < self.num_qps:
            return Outputs()
        s = self.qps[qp]
        if s.errored:
            return Outputs()
        psn %= PSN_MOD
        first = psn - packets + 1
        n_resent = sum(1 for k in range(packets) if ahead(s.sent_max, first + k))
        if resent is not None and resent != n_resent:
            raise AssertionError(f"QP {qp}: {resent} packets resent, the model counts {n_resent}")
        ev = _Event(s)
        ev.add("packets", packets)
        ev.add("resent", n_resent)
        # a retransmit timer that expired with nothing outstanding has stopped
        if (s.deadline is not None and not s.rnr_wait and s.outstanding == 0
                and s.deadline <= now):
            self._stop(s)
        if not ahead(s.sent_max, psn + 1):
            s.sent_max = (psn + 1) % PSN_MOD
        if s.deadline is None:
            self._restart(s, now)
        return ev.outputs()

    def ack(self, qp, syndrome, psn, now):
        if not 0 <= qp < self.num_qps:
            return Outputs()
        s = self.qps[qp]
        if s.errored:
            return Outputs()
        psn %= PSN_MOD
        ev = _Event(s)
        if syndrome >> 5 == 0:
            step = (psn - s.acked) % PSN_MOD
            if 1 <= step <= s.outstanding:
                ev.count("acks")
                self._progress(ev, psn, now)
            elif step == 0:
                ev.count("acks")
                ev.count("stale_acks")
            else:
                ev.count("ignored")
            return ev.outputs()
        implied = (psn - 1 - s.acked) % PSN_MOD
        if implied > s.outstanding:
            ev.count("ignored")
            return ev.outputs()
        if implied:
            self._progress(ev, psn - 1, now)
        if syndrome == _SYN_SEQ:
            ev.count("seq_naks")
            if s.nak_rewind == psn:
                ev.count("ignored")
            elif s.retries >= s.retry_cnt:
                self._fail(ev, "RETRY_EXCEEDED")
            else:
                s.retries += 1
                s.nak_rewind = psn
                self._rewind(ev, now)
        elif syndrome >> 5 == 1:
            ev.count("rnr_naks")
            if s.rnr_wait:
                ev.count("ignored")
            elif s.rnr_retry != _RNR_FOREVER and s.rnr_retries >= s.rnr_retry:
                self._fail(ev, "RNR_RETRY_EXCEEDED")
            else:
                s.rnr_retries += 1
                s.rnr_wait = True
                s.deadline = now + 1 + rnr_ticks(syndrome & 0x1F)
        elif syndrome in _FATAL:
            ev.count("error_naks")
            self._fail(ev, _FATAL[syndrome])
        else:
            ev.count("ignored")
        return ev.outputs()

    def fire(self, qp, now):
        """The timer of ``qp`` expires in tick ``now`` (it must be due)."""
        s = self._q(qp)
        if not self.due(qp, now):
            raise AssertionError(f"QP {qp}: no timer due at tick {now} (deadline {s.deadline}, "
                                 f"errored {s.errored})")
        ev = _Event(s)
        if s.rnr_wait:
            s.nak_rewind = None
            self._rewind(ev, now)
        elif s.outstanding == 0:
            self._stop(s)
        else:
            ev.count("timeouts")
            if s.retries >= s.retry_cnt:
                self._fail(ev, "RETRY_EXCEEDED")
            else:
                s.retries += 1
                s.nak_rewind = None
                self._rewind(ev, now)
        return ev.outputs()
