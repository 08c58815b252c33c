from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cc.dcqcn_events import DCQCN_DECIDED
from rocegen.gateware.roce.cc.dcqcn_layouts import (
    ALPHA_BITS,
    ALPHA_FRAC,
    ALPHA_ONE,
    DCQCN_CONFIG,
    DCQCN_EVENTS,
    DCQCN_STATE,
    RATE_BITS,
    STAGE_BITS,
)

__all__ = ["DcqcnRates", "DCQCN_WRITE"]

#: A QP's new state, written back to the memory.
DCQCN_WRITE = data.StructLayout({"valid": 1, "qp": 8, "events": DCQCN_EVENTS,
                                 "state": DCQCN_STATE})

_HYPER_BITS = STAGE_BITS + RATE_BITS


class DcqcnRates(wiring.Component):
    """Rates stage of :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine`: from the decision of
    :class:`~rocegen.gateware.roce.cc.dcqcn_events.DcqcnEvents`, the new alpha, RT and RC, in three
    registered steps.

    Ports
    -----
    decided : In(DCQCN_DECIDED)
        A decision (registered by the events stage).
    cfg : In(DCQCN_CONFIG)
        The configuration in force; it may change only while no decision is in the stage and
        none came in the cycle before (two values derived from ``g_log2`` are registered).
    write : Out(DCQCN_WRITE)
        The QP's new state, registered three cycles after ``decided``.

    Behaviour (the rules of :mod:`rocegen.sim.models.cc.dcqcn`):

    1. alpha: ``a - ceil(a / 2^g)`` (+ ``2^16 / 2^g`` on a CNP) with ``g = g_log2``, or
       ``alpha_init``; the kind of increase from the counts (fast when the larger is at most
       F, hyper when the smaller exceeds F); the products ``RC * alpha`` and
       ``(smaller - F) * R_HAI``; ``RT + R_AI``;
    2. RT: ``RC`` on a CNP; on an increase ``min(RT + step, line)`` (step 0, R_AI or the hyper
       product); the line rate in bypass; RC cut to ``RC - floor(RC * alpha / 2^17)``;
    3. RC: the cut (CNP) or ``floor((RT + RC) / 2)`` (increase), clamped to ``[min_rate,
       line_rate]`` (``line_rate`` winning); the line rate in bypass; else unchanged.
    """

    def __init__(self):
        super().__init__({
            "decided": In(DCQCN_DECIDED),
            "cfg": In(DCQCN_CONFIG),
            "write": Out(DCQCN_WRITE),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, d = self.cfg, self.decided
        ev = d.events

        # step 1: alpha, the kind of increase, the products, RT + R_AI
        # (2^16 / 2^g registered from the configuration: it is put in force only while no
        # operation is in the pipeline, and stays so for longer than a cycle)
        a, ginc = d.state.alpha, Signal(ALPHA_BITS)
        m.d.sync += ginc.eq(ALPHA_ONE >> cfg.g_log2)
        a_down = Signal(ALPHA_BITS)
        m.d.comb += a_down.eq(a - d.a_shift - d.a_frac)             # a - ceil(a / 2^g)
        ts, bs, f = d.state.t_stage, d.state.b_stage, cfg.fast_steps
        lo, hi = Mux(ts < bs, ts, bs), Mux(ts < bs, bs, ts)
        s2 = Signal(DCQCN_DECIDED)
        cut = Signal(RATE_BITS + ALPHA_BITS)
        hyper = Signal(_HYPER_BITS)
        rt_ai = Signal(RATE_BITS + 1)
        m.d.sync += [
            s2.eq(d),
            s2.fast.eq(hi <= f), s2.hyper.eq(lo > f),
            s2.state.alpha.eq(Mux(ev.init, cfg.alpha_init,
                                  Mux(ev.cnp, a_down + ginc,
                                      Mux(ev.alpha, a_down, a)))),
            cut.eq(d.state.rc * a),
            hyper.eq((lo - f)[:STAGE_BITS] * cfg.r_hai),
            rt_ai.eq(d.state.rt + cfg.r_ai),
        ]

        # step 2: RT, and RC cut
        inc = s2.events.timer | s2.events.byte
        rt_sum = Mux(s2.fast, s2.state.rt, Mux(s2.hyper, s2.state.rt + hyper, rt_ai))
        rt_inc = Mux(rt_sum > cfg.line_rate, cfg.line_rate, rt_sum)
        s3 = Signal(DCQCN_DECIDED)
        rc_cut = Signal(RATE_BITS)
        m.d.sync += [
            s3.eq(s2),
            s3.state.rt.eq(Mux(s2.events.init, cfg.line_rate,
                               Mux(s2.events.cnp, s2.state.rc,
                                   Mux(inc, rt_inc, s2.state.rt)))),
            rc_cut.eq(s2.state.rc - (cut >> (ALPHA_FRAC + 1))),
        ]

        # step 3: RC
        x = Mux(s3.events.cnp, rc_cut, (s3.state.rt + s3.state.rc) >> 1)
        x_min = Mux(x < cfg.min_rate, cfg.min_rate, x)
        clamped = Mux(x_min > cfg.line_rate, cfg.line_rate, x_min)
        changes = s3.events.cnp | s3.events.timer | s3.events.byte
        w = self.write
        m.d.sync += [
            w.valid.eq(s3.valid), w.qp.eq(s3.qp), w.events.eq(s3.events), w.state.eq(s3.state),
            w.state.rc.eq(Mux(s3.events.init, cfg.line_rate,
                              Mux(changes, clamped, s3.state.rc))),
        ]
        return m
