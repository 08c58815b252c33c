"""Reference model of DCQCN's reaction point (the sender's rate law) and of the per-QP rate
limiter, pure Python and independent of the gateware
(:class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine`, :class:`~rocegen.gateware.roce.cc.rate_limiter.
RateLimiter`).

Units, all integers so that the gateware can match them bit for bit:

* rate: bytes per clock cycle in unsigned Q7.20 (``RATE_ONE`` = 1 byte per cycle), so
  ``rate_units(100e9, 322_265_625)`` = 40,672,039; the line rate, the minimum rate, R_AI and
  R_HAI are rates too;
* alpha: unsigned Q16 (``ALPHA_ONE`` = 65,536 = 1.0);
* time: clock cycles (``t``, an integer that only grows; the timers' deadlines are kept modulo
  2^32 as the gateware keeps them); periods in cycles;
* the gain ``g`` = 2^-``g_log2``.

The law of one QP (:class:`DcqcnRp`), after the DCQCN paper (Zhu et al., "Congestion Control
for Large-Scale RDMA Deployments", SIGCOMM 2015) and ``shared/spec/roce-wire.md``:

* ``cnp(t)``: ``RT = RC``; ``RC = clamp(RC - floor(RC * alpha / 2^17))`` (RC (1 - alpha/2));
  ``alpha = alpha - ceil(alpha / 2^g_log2) + 2^16 / 2^g_log2`` ((1-g) alpha + g, the decrease
  rounded up so that alpha decays to 0); both step counts and the byte counter are zeroed and
  both timers restart at ``t``.
* ``tick(t)`` (a *visit*: the gateware visits each QP in turn): if the alpha timer's deadline
  has come, ``alpha = alpha - ceil(alpha / 2^g_log2)`` and the deadline moves one period on
  (from the deadline, not from ``t``: no drift). Then at most one rate increase: the rate
  timer's (its count ``t_stage`` + 1, deadline one period on) if its deadline has come, else
  the byte counter's (``b_stage`` + 1, ``B`` bytes taken off the count) if ``B`` bytes or more
  were counted. An increase: with ``lo``/``hi`` the smaller/larger of the two counts, fast
  recovery (RT unchanged) while ``hi <= F``; else hyper increase ``RT += (lo - F) * R_HAI`` if
  ``lo > F``; else additive increase ``RT += R_AI``; RT is clamped to the line rate, then
  ``RC = clamp(floor((RT + RC) / 2))``. The counts saturate at 255.
* ``sent(n)``: ``n`` more bytes counted (modulo 2^32).
* ``clamp(x) = min(max(x, min_rate), line_rate)``; RC is clamped only when a CNP or an increase
  changes it, RT only by an increase.
* Bypass: any CNP or visit sets the QP to its initial state (RC = RT = line rate, alpha =
  ``alpha_init``, counts 0, timers restarted at ``t``, byte counter zeroed).

A deadline ``d`` has come at ``t`` when ``(t - d) mod 2^32 < 2^31``.

:class:`DcqcnTable` is the gateware's table of QPs and its schedule, cycle by cycle (see
:meth:`DcqcnTable.step`); :class:`RateLimiterModel` the limiter's token buckets, cycle by cycle.
"""

from dataclasses import asdict, dataclass, fields

__all__ = ["RATE_FRAC", "RATE_ONE", "ALPHA_ONE", "DcqcnParams", "DcqcnRp", "DcqcnTable",
           "RateLimiterModel", "rate_units", "rate_gbps", "us_cycles"]

RATE_FRAC = 20
RATE_ONE = 1 << RATE_FRAC
RATE_MAX = (1 << 27) - 1
ALPHA_ONE = 1 << 16
STAGE_MAX = 255
MOD = 1 << 32


def rate_units(bps, clk_hz):
    """``bps`` bits per second in bytes per cycle Q7.20, rounded to the nearest unit."""
    return round(bps * RATE_ONE / (8 * clk_hz))


def rate_gbps(units, clk_hz):
    """A rate in Gb/s."""
    return units * 8 * clk_hz / RATE_ONE / 1e9


def us_cycles(us, clk_hz):
    """Microseconds in cycles, rounded to the nearest cycle."""
    return round(us * clk_hz / 1e6)


def _due(t, deadline):
    return (t - deadline) % MOD < MOD // 2


@dataclass
class DcqcnParams:
    """Every parameter of the law, in the units of the module documentation."""
    bypass: int
    g_log2: int
    alpha_init: int
    alpha_period: int         # K, cycles
    rate_period: int          # T, cycles
    byte_count: int           # B, bytes
    fast_steps: int           # F
    r_ai: int
    r_hai: int
    min_rate: int
    line_rate: int

    _RANGES = {"bypass": (0, 1), "g_log2": (0, 16), "alpha_init": (0, ALPHA_ONE),
               "alpha_period": (1, (1 << 24) - 1), "rate_period": (1, (1 << 24) - 1),
               "byte_count": (1, MOD - 1), "fast_steps": (0, STAGE_MAX), "r_ai": (0, RATE_MAX),
               "r_hai": (0, RATE_MAX), "min_rate": (0, RATE_MAX), "line_rate": (1, RATE_MAX)}

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            lo, hi = self._RANGES[f.name]
            if not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{f.name} must be an integer {lo}..{hi}, not {v!r}")
        if self.min_rate > self.line_rate:
            raise ValueError(f"min_rate ({self.min_rate}) must not exceed line_rate "
                             f"({self.line_rate})")

    @classmethod
    def from_physical(cls, clk_hz, line_gbps=100.0, *, g_log2=8, alpha_init=1.0, alpha_us=55.0,
                      timer_us=55.0, byte_count=10 << 20, fast_steps=5, ai_mbps=40.0,
                      hai_mbps=400.0, min_mbps=100.0, bypass=False):
        """The parameters of a ``clk_hz`` clock and a ``line_gbps`` line from physical units.
        The defaults are the DCQCN paper's: g = 1/256, K = 55 us, T = 55 us, B = 10 MB, F = 5,
        R_AI = 40 Mb/s; R_HAI = 400 Mb/s (ten times R_AI, QCN's ratio) and a minimum rate of
        100 Mb/s are this project's choice."""
        return cls(bypass=int(bool(bypass)), g_log2=g_log2,
                   alpha_init=round(alpha_init * ALPHA_ONE),
                   alpha_period=us_cycles(alpha_us, clk_hz),
                   rate_period=us_cycles(timer_us, clk_hz), byte_count=byte_count,
                   fast_steps=fast_steps, r_ai=rate_units(ai_mbps * 1e6, clk_hz),
                   r_hai=rate_units(hai_mbps * 1e6, clk_hz),
                   min_rate=rate_units(min_mbps * 1e6, clk_hz),
                   line_rate=rate_units(line_gbps * 1e9, clk_hz))

    def as_dict(self):
        return asdict(self)


class DcqcnRp:
    """The reaction point of one QP. ``params`` may be replaced at any time (``rp.params =``):
    each event uses the parameters it finds. Each event returns the update record (a dict: ``rc``,
    ``rt``, ``alpha``, ``t_stage``, ``b_stage`` and ``events``, the flags ``cnp``, ``alpha``,
    ``timer``, ``byte``, ``init``) when it did something, else ``None``."""

    def __init__(self, params, t=0):
        self.params = params
        self.sent_total = 0          # bytes counted, modulo 2^32
        self._init(t)

    def _init(self, t):
        p = self.params
        self.rc = self.rt = p.line_rate
        self.alpha = p.alpha_init
        self.t_stage = self.b_stage = 0
        self.alpha_dl = (t + p.alpha_period) % MOD
        self.rate_dl = (t + p.rate_period) % MOD
        self.base = self.sent_total

    def _record(self, **events):
        flags = {k: int(events.get(k, False)) for k in ("cnp", "alpha", "timer", "byte", "init")}
        return {"rc": self.rc, "rt": self.rt, "alpha": self.alpha, "t_stage": self.t_stage,
                "b_stage": self.b_stage, "events": flags}

    def _clamp(self, x):
        return min(max(x, self.params.min_rate), self.params.line_rate)

    def _alpha_down(self):
        g = self.params.g_log2
        return self.alpha - ((self.alpha + (1 << g) - 1) >> g)

    def sent(self, nbytes, t=None):
        """``nbytes`` more bytes sent by the QP (``t`` is not needed: the byte counter is looked
        at by the visits)."""
        self.sent_total = (self.sent_total + nbytes) % MOD

    def cnp(self, t):
        p = self.params
        if p.bypass:
            self._init(t)
            return self._record(init=True)
        cut = (self.rc * self.alpha) >> 17
        self.rt = self.rc
        self.rc = self._clamp(self.rc - cut)
        self.alpha = self._alpha_down() + (ALPHA_ONE >> p.g_log2)
        self.t_stage = self.b_stage = 0
        self.alpha_dl = (t + p.alpha_period) % MOD
        self.rate_dl = (t + p.rate_period) % MOD
        self.base = self.sent_total
        return self._record(cnp=True)

    def tick(self, t):
        p = self.params
        if p.bypass:
            self._init(t)
            return self._record(init=True)
        ev = {}
        if _due(t, self.alpha_dl):
            self.alpha = self._alpha_down()
            self.alpha_dl = (self.alpha_dl + p.alpha_period) % MOD
            ev["alpha"] = True
        if _due(t, self.rate_dl):
            self.t_stage = min(self.t_stage + 1, STAGE_MAX)
            self.rate_dl = (self.rate_dl + p.rate_period) % MOD
            ev["timer"] = True
        elif (self.sent_total - self.base) % MOD >= p.byte_count:
            self.b_stage = min(self.b_stage + 1, STAGE_MAX)
            self.base = (self.base + p.byte_count) % MOD
            ev["byte"] = True
        if ev.get("timer") or ev.get("byte"):
            self._increase()
        return self._record(**ev) if ev else None

    def _increase(self):
        p = self.params
        lo, hi = min(self.t_stage, self.b_stage), max(self.t_stage, self.b_stage)
        if hi <= p.fast_steps:
            step = 0                                # fast recovery
        elif lo > p.fast_steps:
            step = (lo - p.fast_steps) * p.r_hai    # hyper increase
        else:
            step = p.r_ai                           # additive increase
        self.rt = min(self.rt + step, p.line_rate)
        self.rc = self._clamp((self.rt + self.rc) >> 1)


class DcqcnTable:
    """The gateware's table of ``num_qps`` reaction points and its schedule, cycle by cycle.

    Call :meth:`step` once per clock cycle, ``t`` = 0, 1, 2, ... (the first cycle after reset is
    0), with the inputs taken in that cycle. The rules:

    * a CNP for a QP inside the table, while bypass is off, joins a queue: a memory of
      ``fifo_depth - 1`` entries, unless it is full at the start of the cycle (then the CNP is
      dropped; ``dropped`` lists the cycles), and a head register, which takes the memory's
      oldest entry at the end of a cycle in which it is empty or taken (so a CNP taken in
      cycle ``t`` into an empty queue is at the head in ``t + 2``);
    * in each cycle one operation at most is chosen: none while a configuration waits; else
      the CNP at the queue's head if its QP has no operation chosen in the :data:`WINDOW`
      cycles before; else a visit of the QP the round robin points at (then it moves on,
      wrapping after the last QP) if that QP has none; else nothing;
    * an operation chosen in ``t`` works at time ``t + 1``, sees the bytes of the ``sent``
      reports of cycles up to ``t`` and the configuration in force in ``t``; its update (if
      it did something) is output in cycle ``t + PIPE``;
    * a configuration taken in cycle ``c`` is in force from ``c + CFG_GAP`` (no operation is
      chosen in cycles ``c .. c + CFG_GAP - 1``; a second one within that time restarts it).
    """

    WINDOW = 5
    PIPE = 6
    CFG_GAP = 6

    def __init__(self, num_qps, params, fifo_depth=8):
        self.num_qps = num_qps
        self.params = params
        self.fifo_depth = fifo_depth
        self.qps = [DcqcnRp(params) for _ in range(num_qps)]
        self.memory = []             # the queue's memory, oldest first
        self.head = None             # the queue's head register
        self.scan = 0
        self.recent = []             # (cycle, qp) of the operations started in the last cycles
        self.pending = None          # (cycle in force, params)
        self.updates = []            # (output cycle, qp, record)
        self.dropped = []
        self.ops = {"cnp": 0, "visit": 0}

    def _set_params(self, params):
        self.params = params
        for rp in self.qps:
            rp.params = params

    def step(self, t, *, cnp=None, sent=None, cfg=None):
        """Cycle ``t``: ``cnp`` a QP index or None, ``sent`` a (qp, bytes) pair or None, ``cfg``
        a :class:`DcqcnParams` or None. Returns the operation chosen: ("cnp" | "visit", qp)
        or None."""
        if self.pending is not None and self.pending[0] == t:
            self._set_params(self.pending[1])
            self.pending = None
        write = None
        if cnp is not None and cnp < self.num_qps and not self.params.bypass:
            if len(self.memory) < self.fifo_depth - 1:
                write = cnp
            else:
                self.dropped.append(t)
        op = None
        if cfg is None and self.pending is None:
            busy = {q for c, q in self.recent if c >= t - self.WINDOW}
            if self.head is not None and self.head not in busy:
                op = ("cnp", self.head)
            elif self.scan not in busy:
                op = ("visit", self.scan)
                self.scan = (self.scan + 1) % self.num_qps
        taken = op is not None and op[0] == "cnp"
        if self.memory and (self.head is None or taken):
            self.head = self.memory.pop(0)
        elif taken:
            self.head = None
        if write is not None:
            self.memory.append(write)
        if cfg is not None:
            self.pending = (t + self.CFG_GAP, cfg)
        if sent is not None and sent[0] < self.num_qps:
            self.qps[sent[0]].sent(sent[1])
        if op is not None:
            kind, q = op
            self.ops[kind] += 1
            rec = self.qps[q].cnp(t + 1) if kind == "cnp" else self.qps[q].tick(t + 1)
            if rec is not None:
                self.updates.append((t + self.PIPE, q, rec))
            self.recent = [(c, x) for c, x in self.recent if c > t - self.WINDOW] + [(t, q)]
        return op


class RateLimiterModel:
    """The per-QP token buckets of the rate limiter, cycle by cycle.

    Tokens are bytes in Q.20 (a rate adds ``rate`` tokens per cycle), kept per QP as a credit
    (refills) and a debit (bytes sent); a QP may start a packet while credit >= debit. The QPs
    are visited one per cycle in turn, QP ``k`` in the cycles ``t = k (mod P)`` where ``P`` is
    ``num_qps`` rounded up to a power of two; a visit adds ``rate * P`` to the credit, clamped to
    ``debit + burst * 2^20``. A rate written marks the QP *fresh*: it may not send, and its next
    visit clamps the credit to ``debit + rate * P`` instead (no tokens saved at the old rate)
    and ends the mark. Call :meth:`step` once per cycle with that cycle's inputs; it returns
    the ``allowed`` bits seen in that cycle (a list), which reflect the visits and ``sent``
    reports of the cycles before the previous one: a visit or report of cycle ``t`` shows in
    ``t + 2``; a rate written in cycle ``t`` counts from a visit in ``t`` on and marks the QP
    from ``t + 1`` until the visit's update (``t + 2`` at the earliest)."""

    def __init__(self, num_qps, burst, init_rate):
        self.num_qps = num_qps
        self.period = 1 << (num_qps - 1).bit_length()
        self.cap = burst << RATE_FRAC
        self.rate = [init_rate] * num_qps
        self.credit = [0] * num_qps
        self.debit = [0] * num_qps
        self.allowed = [True] * num_qps
        self.fresh = [False] * num_qps
        self._last = (None, None)     # (the visit, the report) of the previous cycle

    def step(self, t, *, sent=None, rate=None):
        seen = [a and not f for a, f in zip(self.allowed, self.fresh)]
        visit_prev, sent_prev = self._last
        touched = []
        if sent_prev is not None:
            q, n = sent_prev
            self.debit[q] += n << RATE_FRAC
            touched.append(q)
        if visit_prev is not None:
            q, r = visit_prev
            cap = r * self.period if self.fresh[q] else self.cap
            self.credit[q] = min(self.credit[q] + r * self.period, self.debit[q] + cap)
            self.fresh[q] = False
            touched.append(q)
        for q in touched:
            self.allowed[q] = self.credit[q] >= self.debit[q]
        if rate is not None and rate[0] < self.num_qps:
            self.rate[rate[0]] = rate[1]
            self.fresh[rate[0]] = True
        v = t % self.period
        visit = (v, self.rate[v]) if v < self.num_qps else None
        report = sent if sent is not None and sent[0] < self.num_qps else None
        self._last = (visit, report)
        return seen
