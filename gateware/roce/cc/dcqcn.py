"""DCQCN's reaction point: the per-QP rate law of the sender (``docs/dcqcn-design.md``)."""

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cc.dcqcn_events import DcqcnEvents
from rocegen.gateware.roce.cc.dcqcn_layouts import (
    CNP_QP,
    COUNT_BITS,
    DCQCN_CONFIG,
    DCQCN_STATE,
    DCQCN_UPDATE,
    RATE_BITS,
    RATE_WRITE,
    SENT_BYTES,
    TIME_BITS,
    check_dcqcn_config,
    dcqcn_config,
)
from rocegen.gateware.roce.cc.dcqcn_rates import DcqcnRates
from rocegen.gateware.roce.cc.dcqcn_select import WINDOW, DcqcnSelect
from rocegen.gateware.roce.layouts import check_num_qps

__all__ = ["DcqcnEngine", "PIPE", "CFG_GAP"]

#: Cycles from the choice of an operation to its update on ``update`` / ``rate_w``.
PIPE = WINDOW + 1
#: Cycles from a configuration taken to the first operation that uses it.
CFG_GAP = WINDOW + 1


class DcqcnEngine(wiring.Component):
    """DCQCN reaction point for ``num_qps`` QPs: each QP's current rate RC, target rate RT and
    alpha, its alpha timer, rate-increase timer and byte counter, in a memory.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    clk_hz : int or float
        The clock, for the defaults (default 322.265625 MHz).
    line_gbps : int or float
        The line rate of the defaults in Gb/s (default 100).
    config : dict
        The configuration after reset (every field of
        :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG`, integers); default
        :func:`~rocegen.gateware.roce.cc.dcqcn_layouts.dcqcn_config` of ``clk_hz`` and
        ``line_gbps`` (the DCQCN paper's parameters).
    fifo_depth : int
        CNPs that may wait for their QP (2..64, default 8).

    Ports
    -----
    cnp : In(stream.Signature(CNP_QP, always_ready=True))
        A CNP for a QP (from the receive path). Ignored for a QP outside the table and while
        bypass is in force; dropped (``cnp_dropped``) when ``fifo_depth`` CNPs wait (or
        ``fifo_depth`` - 1 besides the one at the queue's head).
    sent : In(stream.Signature(SENT_BYTES, always_ready=True))
        Bytes a QP sent, for its byte counter (ignored for a QP outside the table).
    cfg : In(stream.Signature(DCQCN_CONFIG, always_ready=True))
        A new configuration (every parameter), in force :data:`CFG_GAP` cycles later; no
        operation is chosen in the meantime (CNPs wait in their queue).
    update : Out(stream.Signature(DCQCN_UPDATE, always_ready=True))
        A QP's state after each operation that did something (events ``cnp``, ``alpha``,
        ``timer``, ``byte`` or ``init``).
    rate_w : Out(stream.Signature(RATE_WRITE, always_ready=True))
        The QP and its RC, with every ``update`` that may change RC (events ``cnp``, ``timer``,
        ``byte``, ``init``): for the rate limiter.
    rd_qp : In(range(num_qps)); rd_rate : Out(RATE_BITS)
        Read port: RC of QP ``rd_qp`` in the next cycle (an update written in the cycle of
        ``rd_qp`` included).
    bypass : Out(1)
        The bypass of the configuration in force.
    cnp_dropped : Out(1)
        A CNP was dropped (a pulse, one cycle after it).

    Behaviour
    ---------
    * The law and the schedule are those of :mod:`rocegen.sim.models.cc.dcqcn`
      (:class:`~rocegen.sim.models.cc.dcqcn.DcqcnTable`): one operation is chosen per cycle at
      most, a queued CNP before a visit of the round robin's QP; an operation on a QP is
      chosen at least :data:`~rocegen.gateware.roce.cc.dcqcn_select.WINDOW` + 1 cycles after the
      previous one on it (a CNP waits). Each QP is visited at least once every ``num_qps``
      cycles that choose no CNP, so a timer fires at most that many cycles (plus the CNPs
      chosen between) after its deadline; deadlines advance by whole periods, so timers do
      not drift.
    * Time: a :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.TIME_BITS`-bit cycle count, 0 in the
      first cycle after reset; an operation chosen in cycle t works at time t + 1 and counts
      the ``sent`` reports of cycles up to t.
    * Latency: a CNP taken in cycle t with its QP idle and the queue empty is chosen in t + 2
      and has its ``update`` (and ``rate_w``) in t + 2 + :data:`PIPE` (t + 8).
    * Implementation: :class:`~rocegen.gateware.roce.cc.dcqcn_select.DcqcnSelect` (S0: which
      operation, registered), the memories read in S1 (the QP's state and byte count),
      :class:`~rocegen.gateware.roce.cc.dcqcn_events.DcqcnEvents` (S2: timers, byte counter,
      counts), :class:`~rocegen.gateware.roce.cc.dcqcn_rates.DcqcnRates` (S3..S5: alpha, RT,
      RC), the write back in S6. Memories: the QPs' state (read in S1, written in S6,
      transparent), a copy of RC for ``rd_rate``, and each QP's byte count (read and written
      by ``sent`` one cycle apart, read in S1).
    """

    def __init__(self, num_qps, clk_hz=322_265_625, line_gbps=100, *, config=None,
                 fifo_depth=8):
        check_num_qps(num_qps)
        if config is None:
            config = dcqcn_config(clk_hz, line_gbps)
        self.config = check_dcqcn_config(dict(config))
        self.num_qps, self.fifo_depth = num_qps, fifo_depth
        self._select = DcqcnSelect(num_qps, fifo_depth)
        super().__init__({
            "cnp": In(stream.Signature(CNP_QP, always_ready=True)),
            "sent": In(stream.Signature(SENT_BYTES, always_ready=True)),
            "cfg": In(stream.Signature(DCQCN_CONFIG, always_ready=True)),
            "update": Out(stream.Signature(DCQCN_UPDATE, always_ready=True)),
            "rate_w": Out(stream.Signature(RATE_WRITE, always_ready=True)),
            "rd_qp": In(range(num_qps)),
            "rd_rate": Out(RATE_BITS),
            "bypass": Out(1),
            "cnp_dropped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, c0 = self.num_qps, self.config
        init = {"rc": c0["line_rate"], "rt": c0["line_rate"], "alpha": c0["alpha_init"],
                "alpha_dl": c0["alpha_period"], "rate_dl": c0["rate_period"]}
        st_mem = m.submodules.state = Memory(shape=DCQCN_STATE, depth=n, init=[init] * n)
        rc_mem = m.submodules.rates = Memory(shape=RATE_BITS, depth=n, init=[c0["line_rate"]] * n)
        acc_mem = m.submodules.acc = Memory(shape=COUNT_BITS, depth=n, init=[])
        st_w, rc_w, acc_w = st_mem.write_port(), rc_mem.write_port(), acc_mem.write_port()
        st_r = st_mem.read_port(transparent_for=(st_w,))
        rc_r = rc_mem.read_port(transparent_for=(rc_w,))
        acc_r = acc_mem.read_port(transparent_for=(acc_w,))
        acc_s = acc_mem.read_port(transparent_for=(acc_w,))

        # time, and the configuration (put in force once the pipeline has drained)
        now = Signal(TIME_BITS)
        cfg, cfg_new = Signal(DCQCN_CONFIG, init=c0), Signal(DCQCN_CONFIG)
        pend, hold = Signal(), Signal(range(WINDOW))
        m.d.sync += now.eq(now + 1)
        with m.If(self.cfg.valid):
            m.d.sync += [cfg_new.eq(self.cfg.payload), pend.eq(1), hold.eq(WINDOW - 1)]
        with m.Elif(hold != 0):
            m.d.sync += hold.eq(hold - 1)
        with m.Elif(pend):
            m.d.sync += [cfg.eq(cfg_new), pend.eq(0)]
        m.d.comb += self.bypass.eq(cfg.bypass)

        # bytes sent: each QP's count, read with the report and written a cycle later
        sent_v, sent_n, sent_q = Signal(), Signal.like(self.sent.payload.bytes), Signal(8)
        m.d.comb += acc_s.addr.eq(self.sent.payload.qp)
        m.d.sync += [sent_v.eq(self.sent.valid & (self.sent.payload.qp < n)),
                     sent_n.eq(self.sent.payload.bytes), sent_q.eq(self.sent.payload.qp)]
        m.d.comb += [acc_w.en.eq(sent_v), acc_w.addr.eq(sent_q),
                     acc_w.data.eq(acc_s.data + sent_n)]

        # S0 select; S1 read; S2 events; S3..S5 rates; S6 write back
        se = m.submodules.select = self._select
        ev = m.submodules.events = DcqcnEvents()
        ra = m.submodules.rates_stage = DcqcnRates()
        wiring.connect(m, wiring.flipped(self.cnp), se.cnp)
        m.d.comb += [
            se.bypass.eq(cfg.bypass), se.hold.eq(self.cfg.valid | pend),
            self.cnp_dropped.eq(se.dropped),
            st_r.addr.eq(se.op.qp), acc_r.addr.eq(se.op.qp),
            ev.op.eq(se.op), ev.now.eq(now), ev.state.eq(st_r.data), ev.acc.eq(acc_r.data),
            ev.cfg.eq(cfg), ra.decided.eq(ev.decided), ra.cfg.eq(cfg),
        ]
        w = ra.write
        did = w.valid & w.events.as_value().any()
        rc_may_change = w.valid & (w.events.cnp | w.events.timer | w.events.byte | w.events.init)
        m.d.comb += [
            st_w.en.eq(w.valid), st_w.addr.eq(w.qp), st_w.data.eq(w.state),
            rc_w.en.eq(w.valid), rc_w.addr.eq(w.qp), rc_w.data.eq(w.state.rc),
            rc_r.addr.eq(self.rd_qp), self.rd_rate.eq(rc_r.data),
            self.update.valid.eq(did), self.update.payload.qp.eq(w.qp),
            self.update.payload.rc.eq(w.state.rc), self.update.payload.rt.eq(w.state.rt),
            self.update.payload.alpha.eq(w.state.alpha),
            self.update.payload.t_stage.eq(w.state.t_stage),
            self.update.payload.b_stage.eq(w.state.b_stage),
            self.update.payload.events.eq(w.events),
            self.rate_w.valid.eq(rc_may_change), self.rate_w.payload.qp.eq(w.qp),
            self.rate_w.payload.rate.eq(w.state.rc),
        ]
        return m
