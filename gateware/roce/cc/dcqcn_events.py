from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cc.dcqcn_layouts import (
    ALPHA_BITS,
    COUNT_BITS,
    DCQCN_CONFIG,
    DCQCN_EVENTS,
    DCQCN_OP,
    DCQCN_STATE,
    STAGE_BITS,
    TIME_BITS,
)

__all__ = ["DcqcnEvents", "DCQCN_DECIDED"]

#: What the events stage decided for an operation: the flags, the new counts, deadlines and
#: byte base, and the kind of rate increase; the rates and alpha as they were read.
DCQCN_DECIDED = data.StructLayout({
    "valid": 1,
    "qp": 8,
    "events": DCQCN_EVENTS,
    "a_shift": ALPHA_BITS,        # alpha / 2^g_log2, rounded down
    "a_frac": 1,                  # ... and whether that dropped a remainder
    "fast": 1,                    # (for the rates stage)
    "hyper": 1,
    "state": DCQCN_STATE,         # rc, rt, alpha as read; the rest new
})


class DcqcnEvents(wiring.Component):
    """Events stage of :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine`: registers the
    operation started (and the time) and, in the next cycle, with the QP's state and byte count
    read from the memories, decides what happens; the decision is registered.

    Ports
    -----
    op : In(DCQCN_OP)
        The operation that reads its QP's state in this cycle (from
        :class:`~rocegen.gateware.roce.cc.dcqcn_select.DcqcnSelect`).
    now : In(TIME_BITS)
        The cycle count; an operation's time is ``now`` of the cycle it reads in.
    state : In(DCQCN_STATE)
        The QP's state, read in the cycle after ``op`` (a synchronous memory read).
    acc : In(COUNT_BITS)
        The QP's count of bytes sent (modulo 2^32), read likewise.
    cfg : In(DCQCN_CONFIG)
        The configuration in force.
    decided : Out(DCQCN_DECIDED)
        Registered, two cycles after ``op``.

    Behaviour (the rules of :mod:`rocegen.sim.models.cc.dcqcn`; the configuration changes only
    while no operation is in the pipeline, two cycles at least before the next one reaches
    this stage: ``2^g_log2 - 1`` is registered): bypass sets ``init`` and the
    initial counts, deadlines (``time`` + period) and byte base (``acc``). A CNP zeroes the
    counts, restarts both timers at ``time`` and sets the byte base to ``acc``. A visit: the
    alpha timer is due when ``(time - alpha_dl) mod 2^32 < 2^31`` (deadline + K); then the rate
    timer likewise (``t_stage`` + 1, saturating, deadline + T), else the byte counter when
    ``(acc - base) mod 2^32 >= B`` (``b_stage`` + 1, base + B). Also ``alpha >> g_log2`` and
    whether bits were shifted out, for the rates stage.
    """

    def __init__(self):
        super().__init__({
            "op": In(DCQCN_OP),
            "now": In(TIME_BITS),
            "state": In(DCQCN_STATE),
            "acc": In(COUNT_BITS),
            "cfg": In(DCQCN_CONFIG),
            "decided": Out(DCQCN_DECIDED),
        })

    def elaborate(self, platform):
        m = Module()
        op, time = Signal(DCQCN_OP), Signal(TIME_BITS)
        m.d.sync += [op.eq(self.op), time.eq(self.now)]
        s, acc, cfg = self.state, self.acc, self.cfg
        top = TIME_BITS - 1

        init = cfg.bypass
        cnp = op.cnp & ~init
        visit = ~op.cnp & ~init
        a_due = visit & ~(time - s.alpha_dl)[top]
        r_due = visit & ~(time - s.rate_dl)[top]
        b_due = visit & ~r_due & ((acc - s.base)[:COUNT_BITS] >= cfg.byte_count)
        sat = (1 << STAGE_BITS) - 1
        ts, bs = Signal(STAGE_BITS), Signal(STAGE_BITS)
        m.d.comb += [
            ts.eq(Mux(cnp | init, 0, Mux(r_due & (s.t_stage != sat), s.t_stage + 1, s.t_stage))),
            bs.eq(Mux(cnp | init, 0, Mux(b_due & (s.b_stage != sat), s.b_stage + 1, s.b_stage))),
        ]
        restart = cnp | init
        mask = Signal(ALPHA_BITS)       # 2^g - 1, registered: the configuration changes only
        m.d.sync += mask.eq((1 << cfg.g_log2) - 1)       # with the pipeline empty

        d = self.decided
        m.d.sync += [
            d.valid.eq(op.valid), d.qp.eq(op.qp),
            d.events.cnp.eq(cnp), d.events.init.eq(init), d.events.alpha.eq(a_due),
            d.events.timer.eq(r_due), d.events.byte.eq(b_due),
            d.a_shift.eq(s.alpha >> cfg.g_log2), d.a_frac.eq((s.alpha & mask).any()),
            d.state.rc.eq(s.rc), d.state.rt.eq(s.rt), d.state.alpha.eq(s.alpha),
            d.state.t_stage.eq(ts), d.state.b_stage.eq(bs),
            d.state.alpha_dl.eq(Mux(restart, time, s.alpha_dl)
                                + Mux(restart | a_due, cfg.alpha_period, 0)),
            d.state.rate_dl.eq(Mux(restart, time, s.rate_dl)
                               + Mux(restart | r_due, cfg.rate_period, 0)),
            d.state.base.eq(Mux(restart, acc, s.base + Mux(b_due, cfg.byte_count, 0))),
        ]
        return m
