"""Records and units of the DCQCN reaction point (:mod:`~rocegen.gateware.roce.cc.dcqcn`) and the
per-QP rate limiter (:mod:`~rocegen.gateware.roce.cc.rate_limiter`).

Units (``docs/dcqcn-design.md``):

* A *rate* is a number of bytes per clock cycle in unsigned fixed point Q7.20
  (:data:`RATE_FRAC` fraction bits, :data:`RATE_BITS` bits): ``rate_units(bps, clk_hz)``
  converts from bits per second. 100 Gb/s at 322.265625 MHz is 40,672,039 (38.79 bytes per
  cycle); one unit is 2.46 kb/s there, 1.19 kb/s at 156.25 MHz.
* ``alpha`` is unsigned Q16 (:data:`ALPHA_ONE` = 1.0), :data:`ALPHA_BITS` bits so that 1.0
  itself is held.
* Times are clock cycles: a free-running :data:`TIME_BITS`-bit count, periods of at most
  :data:`PERIOD_BITS` bits.
* The gain ``g`` is a power of two, ``2^-g_log2``.
"""

from amaranth.lib import data

__all__ = ["RATE_FRAC", "RATE_BITS", "ALPHA_FRAC", "ALPHA_ONE", "ALPHA_BITS", "STAGE_BITS",
           "TIME_BITS", "PERIOD_BITS", "COUNT_BITS", "SENT_BITS", "G_LOG2_MAX", "DCQCN_CONFIG",
           "DCQCN_STATE", "DCQCN_EVENTS", "DCQCN_UPDATE", "DCQCN_OP", "RATE_WRITE", "SENT_BYTES",
           "CNP_QP", "DCQCN_DEFAULTS", "rate_units", "rate_bps", "us_cycles", "dcqcn_config",
           "check_dcqcn_config"]

#: Fraction bits of a rate (bytes per cycle).
RATE_FRAC = 20
#: Bits of a rate: Q7.20, below 128 bytes per cycle (a 512-bit path moves 64).
RATE_BITS = 27
#: Fraction bits of alpha, and 1.0.
ALPHA_FRAC = 16
ALPHA_ONE = 1 << ALPHA_FRAC
ALPHA_BITS = ALPHA_FRAC + 1
#: Bits of the counts of rate-increase steps since the last CNP (saturating).
STAGE_BITS = 8
#: Bits of the cycle count and of the timers' deadlines (wrapping).
TIME_BITS = 32
#: Bits of a timer period in cycles (16.7 M cycles: 52 ms at 322 MHz).
PERIOD_BITS = 24
#: Bits of the byte counter's threshold and of the bytes counted per QP (wrapping).
COUNT_BITS = 32
#: Bits of the byte count of one ``sent`` report.
SENT_BITS = 16
#: Largest ``g_log2`` (g = 2^-16).
G_LOG2_MAX = 16

#: Every parameter of the rate law, as the block takes it at run time.
DCQCN_CONFIG = data.StructLayout({
    "bypass": 1,                  # every QP at line rate, CNPs ignored
    "g_log2": 5,                  # g = 2^-g_log2, 0..16
    "alpha_init": ALPHA_BITS,     # alpha of a QP after reset (and after a bypass)
    "alpha_period": PERIOD_BITS,  # K: the alpha timer, cycles
    "rate_period": PERIOD_BITS,   # T: the rate-increase timer, cycles
    "byte_count": COUNT_BITS,     # B: the rate-increase byte counter, bytes
    "fast_steps": STAGE_BITS,     # F: fast-recovery steps
    "r_ai": RATE_BITS,            # additive increase
    "r_hai": RATE_BITS,           # hyper increase (times the hyper step number)
    "min_rate": RATE_BITS,
    "line_rate": RATE_BITS,
})

#: One QP's state in the block's memory.
DCQCN_STATE = data.StructLayout({
    "rc": RATE_BITS,              # current rate
    "rt": RATE_BITS,              # target rate
    "alpha": ALPHA_BITS,
    "t_stage": STAGE_BITS,        # rate-timer expiries since the last CNP
    "b_stage": STAGE_BITS,        # byte-counter expiries since the last CNP
    "alpha_dl": TIME_BITS,        # deadline of the alpha timer
    "rate_dl": TIME_BITS,         # deadline of the rate-increase timer
    "base": COUNT_BITS,           # the QP's byte count (modulo 2^32) the byte counter counts from
})

#: What an operation on a QP did.
DCQCN_EVENTS = data.StructLayout({
    "cnp": 1,                     # a CNP was applied
    "alpha": 1,                   # the alpha timer expired: alpha decayed
    "timer": 1,                   # the rate timer expired: a rate increase
    "byte": 1,                    # the byte counter expired: a rate increase
    "init": 1,                    # bypass: the QP was set to its initial state
})

#: The state a QP was left in by an operation that did something.
DCQCN_UPDATE = data.StructLayout({
    "qp": 8,
    "rc": RATE_BITS,
    "rt": RATE_BITS,
    "alpha": ALPHA_BITS,
    "t_stage": STAGE_BITS,
    "b_stage": STAGE_BITS,
    "events": DCQCN_EVENTS,
})

#: An operation of the block's pipeline: a CNP or a visit (timers, byte counter) of a QP.
DCQCN_OP = data.StructLayout({"valid": 1, "cnp": 1, "qp": 8})

#: A QP's new rate, for the rate limiter.
RATE_WRITE = data.StructLayout({"qp": 8, "rate": RATE_BITS})

#: Bytes a QP sent (counted as the caller counts them: wire bytes make the rates wire rates).
SENT_BYTES = data.StructLayout({"qp": 8, "bytes": SENT_BITS})

#: A CNP for a QP (its index in the QP table).
CNP_QP = data.StructLayout({"qp": 8})

#: The published defaults the block starts with (the DCQCN paper, Zhu et al., SIGCOMM 2015:
#: g, K, F, the timer and the byte counter, R_AI; R_HAI is ten times R_AI, QCN's ratio, and the
#: minimum rate 1/1000 of a 100G line): physical units, see :func:`dcqcn_config`.
DCQCN_DEFAULTS = {
    "g_log2": 8,                  # g = 1/256
    "alpha_init": 1.0,
    "alpha_us": 55.0,             # K
    "timer_us": 55.0,             # T
    "byte_count": 10 << 20,       # B: 10 MB
    "fast_steps": 5,              # F
    "ai_mbps": 40.0,              # R_AI
    "hai_mbps": 400.0,            # R_HAI
    "min_mbps": 100.0,
}


def rate_units(bps, clk_hz):
    """``bps`` bits per second as a rate (bytes per cycle of a ``clk_hz`` clock, Q7.20),
    rounded to the nearest unit."""
    return round(bps * (1 << RATE_FRAC) / (8 * clk_hz))


def rate_bps(units, clk_hz):
    """A rate in bits per second."""
    return units * 8 * clk_hz / (1 << RATE_FRAC)


def us_cycles(us, clk_hz):
    """``us`` microseconds in cycles of a ``clk_hz`` clock, rounded to the nearest cycle."""
    return round(us * clk_hz / 1e6)


_LIMITS = {
    "bypass": (0, 1), "g_log2": (0, G_LOG2_MAX), "alpha_init": (0, ALPHA_ONE),
    "alpha_period": (1, (1 << PERIOD_BITS) - 1), "rate_period": (1, (1 << PERIOD_BITS) - 1),
    "byte_count": (1, (1 << COUNT_BITS) - 1), "fast_steps": (0, (1 << STAGE_BITS) - 1),
    "r_ai": (0, (1 << RATE_BITS) - 1), "r_hai": (0, (1 << RATE_BITS) - 1),
    "min_rate": (0, (1 << RATE_BITS) - 1), "line_rate": (1, (1 << RATE_BITS) - 1),
}


def check_dcqcn_config(config, *, what="config"):
    """``config`` (a dict of every field of :data:`DCQCN_CONFIG`, integers) if its values are in
    range and ``min_rate <= line_rate``; else ``TypeError``/``ValueError`` naming the field."""
    if not isinstance(config, dict):
        raise TypeError(f"{what} must be a dict of the DCQCN_CONFIG fields, not {config!r}")
    missing = sorted(set(_LIMITS) - set(config))
    extra = sorted(set(config) - set(_LIMITS))
    if missing or extra:
        raise ValueError(f"{what} must have exactly the fields {', '.join(_LIMITS)}"
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; unknown {', '.join(extra)}" if extra else ""))
    for name, (lo, hi) in _LIMITS.items():
        v = config[name]
        if not isinstance(v, int) or (isinstance(v, bool) and name != "bypass"):
            raise TypeError(f"{what}[{name!r}] must be an integer, not {v!r}")
        if not lo <= v <= hi:
            raise ValueError(f"{what}[{name!r}] must be {lo}..{hi}, not {v}")
    if config["min_rate"] > config["line_rate"]:
        raise ValueError(f"{what}['min_rate'] ({config['min_rate']}) must not exceed "
                         f"{what}['line_rate'] ({config['line_rate']})")
    return config


def dcqcn_config(clk_hz, line_gbps, *, bypass=False, **physical):
    """The :data:`DCQCN_CONFIG` of a ``clk_hz`` clock and a ``line_gbps`` line, from physical
    parameters (any of :data:`DCQCN_DEFAULTS`' keys; the others keep the defaults): rates in
    Mb/s rounded to the nearest unit, times in microseconds rounded to the nearest cycle,
    ``alpha_init`` a fraction rounded to Q16, ``byte_count`` in bytes, ``g_log2`` and
    ``fast_steps`` as they are. Raises ``TypeError``/``ValueError`` naming the parameter."""
    for name, v in (("clk_hz", clk_hz), ("line_gbps", line_gbps)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
            raise ValueError(f"{name} must be a positive number, not {v!r}")
    unknown = sorted(set(physical) - set(DCQCN_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown DCQCN parameter(s) {', '.join(unknown)}; the parameters are "
                        f"{', '.join(DCQCN_DEFAULTS)}")
    p = {**DCQCN_DEFAULTS, **physical}
    for name in ("alpha_init", "alpha_us", "timer_us", "ai_mbps", "hai_mbps", "min_mbps"):
        if not isinstance(p[name], (int, float)) or isinstance(p[name], bool) or p[name] < 0:
            raise ValueError(f"{name} must be a non-negative number, not {p[name]!r}")
    config = {
        "bypass": int(bool(bypass)),
        "g_log2": p["g_log2"],
        "alpha_init": round(p["alpha_init"] * ALPHA_ONE),
        "alpha_period": us_cycles(p["alpha_us"], clk_hz),
        "rate_period": us_cycles(p["timer_us"], clk_hz),
        "byte_count": p["byte_count"],
        "fast_steps": p["fast_steps"],
        "r_ai": rate_units(p["ai_mbps"] * 1e6, clk_hz),
        "r_hai": rate_units(p["hai_mbps"] * 1e6, clk_hz),
        "min_rate": rate_units(p["min_mbps"] * 1e6, clk_hz),
        "line_rate": rate_units(line_gbps * 1e9, clk_hz),
    }
    return check_dcqcn_config(config, what="the converted parameters")
