"""The retry engine against its reference model (:mod:`rocegen.sim.models.requester.retry`).

Events back to back (PSN writes, context writes, acknowledgements, packets sent), with random
idle cycles, over several QPs, with the time base ticking every cycle and every third cycle. The
outputs of every accepted event (``sched``, the pulses, ``errored``/``held``, ``err_status`` and
``acked_psn`` of the QP, :data:`LATENCY` cycles after it; ``cpl_ack``, :data:`CPL_LATENCY`
cycles after it) are compared with the model; a cycle with outputs but no accepted event that long
before is a timer expiry, checked against the model's deadline. An event held back needs a
reason (an event of its QP taken just before, a timer due). The per-QP counters are compared at
the end. Plus exact timer timing, the input priorities, the wait of an event behind one of its
QP, the RNR-wait corner cases and the parameter checks."""

import gc
import random
import warnings
from collections import Counter, deque

import pytest
from amaranth.hdl import UnusedElaboratable

from rocegen.gateware.roce.layouts import CplStatus, QpState
from rocegen.gateware.roce.requester import retry as engine_mod
from rocegen.gateware.roce.requester.retry import COUNTERS, QP_COUNTERS, RetryEngine, SchedKind
from rocegen.sim.models.requester import retry as model_mod
from rocegen.sim.models.requester.retry import PSN_MOD, Outputs, RetryModel, ahead
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import roce as wire_roce
from tests.tiers import full

#: Clock frequencies for a time base that ticks every cycle / every third cycle.
CLK_HZ = {1: 1e9 / 1024, 3: 3e9 / 1024}
#: Cycles from an event taken to its outputs (``sched``, pulses, ``errored``).
LATENCY = 3
#: ... and to ``cpl_ack``, a cycle sooner (it reports the state in the cycle it is written).
CPL_LATENCY = 2


def name_of(value, enum_cls):
    return value.name if hasattr(value, "name") else enum_cls(int(value)).name


class Bench:
    """Drives a :class:`RetryEngine` and checks every cycle against a :class:`RetryModel`. ``now`` is
    counted from reset: the time base starts at 0 and advances every ``tick_cycles`` cycles. The
    engine answers an event accepted in cycle t in cycle t + :data:`LATENCY` (``sched``, the
    pulses, ``errored``/``held``; the QP's ``err_status``/``acked_psn`` from then on) and in t +
    :data:`CPL_LATENCY` on ``cpl_ack`` (held here for the cycles between): the bench keeps a
    record of every cycle (the event taken or the one held back) and checks it against the
    outputs seen ``LATENCY`` cycles later, applying the event to the model with the tick it was
    accepted in. ``event`` waits until the event is checked unless ``drain=False`` (back-to-back
    events)."""

    def __init__(self, num_qps, tick_cycles):
        self.dut = RetryEngine(num_qps, clk_hz=CLK_HZ[tick_cycles])
        assert self.dut.tick_cycles == tick_cycles
        self.n = num_qps
        self.tc = tick_cycles
        self.model = RetryModel(num_qps)
        self.cycle = 0
        # an expired timer is served within two rounds of the scan (one QP per cycle, and a few
        # more cycles for each timer served on the way or waiting for an event of its QP)
        self.slack = -(-(2 * num_qps + 8) // tick_cycles) + 1
        self.coverage = Counter()
        self.fires = []                 # (qp, tick, deadline) of every timer expiry seen
        self.fire_cycles = []           # ... and the cycle it was taken in
        self.stalls = 0                 # ack/sent held by an expired timer
        self.bubbles = 0                # events held behind one of their QP (read after write)
        self.listener = None            # called with (qp, Outputs) after every event
        self.history = []               # the last events, for error messages
        # cycles not checked yet (the reset's first: no outputs)
        self.records = deque({"cycle": -LATENCY + k, "now": 0, "taken": None, "held": None}
                             for k in range(LATENCY))
        self.last = {"taken": None, "fire": None}       # the previous cycle checked
        self.due_recent = deque(maxlen=LATENCY + 4)     # QPs whose timer was due, per cycle
        pulses = [getattr(self.dut, name) for name in COUNTERS]
        d = self.dut
        self._outs = [d.cpl_ack.valid, d.cpl_ack.payload, d.sched.valid, d.sched.payload,
                      d.errored, d.held, *pulses]
        self._errored = 0
        # cpl_ack as seen in the last LATENCY - CPL_LATENCY cycles, checked with the outputs
        self._cpl_seen = deque([None] * (LATENCY - CPL_LATENCY))

    @property
    def now(self):
        return self.cycle // self.tc

    def fail(self, msg, rec=None):
        hist = "\n  ".join(self.history[-12:])
        at = rec["cycle"] if rec is not None else self.cycle - 1
        tick = rec["now"] if rec is not None else (self.cycle - 1) // self.tc
        raise AssertionError(f"cycle {at}, tick {tick}: {msg}\n last events:\n  {hist}")

    async def _cycle(self, ctx, port=None, offer=None):
        """One clock cycle offering ``offer`` (kind, qp, args) on ``port``; checks the cycle
        ``LATENCY`` cycles back. Returns the record of this cycle."""
        signals = ([port.ready] if port is not None else []) + self._outs
        sampled = (await ctx.tick().sample(*signals))[2:]
        ready = bool(sampled[0]) if port is not None else False
        if port is not None:
            sampled = sampled[1:]
        cpl_v, cpl_p, sch_v, sch_p, errored, held, *pulses = sampled
        rec = {"cycle": self.cycle, "now": self.now, "taken": offer if ready else None,
               "held": offer if not ready else None}
        self.cycle += 1
        self.records.append(rec)
        obs = {
            "cpl": self._cpl_seen.popleft(),
            "sched": (sch_p.qp, name_of(sch_p.kind, SchedKind)) if sch_v else None,
            "pulses": frozenset(n for n, v in zip(COUNTERS, pulses) if v),
            "rose": errored & ~self._errored,
            "errored": errored,
            "held": held,
        }
        self._errored = errored
        self._cpl_seen.append((cpl_p.qp, cpl_p.psn) if cpl_v else None)
        self._check(ctx, self.records.popleft(), obs)
        return rec

    async def drain(self, ctx):
        """Idle until every event taken is checked."""
        while any(r["taken"] is not None for r in self.records):
            await self._cycle(ctx)

    def _outputs(self, ctx, qp, obs, rec):
        """The engine's outputs for an event of ``qp`` as an :class:`Outputs`."""
        cpl = sched = fail = None
        if obs["cpl"] is not None:
            if obs["cpl"][0] != qp:
                self.fail(f"cpl_ack names QP {obs['cpl'][0]}, the event QP {qp}", rec)
            cpl = obs["cpl"][1]
        if obs["sched"] is not None:
            if obs["sched"][0] != qp:
                self.fail(f"sched names QP {obs['sched'][0]}, the event QP {qp}", rec)
            sched = obs["sched"][1]
        if qp < self.n and (obs["rose"] >> qp) & 1:
            ctx.set(self.dut.err_qp, qp)
            fail = name_of(ctx.get(self.dut.err_status), CplStatus)
        return Outputs(cpl, sched, fail, obs["pulses"])

    def _compare(self, ctx, what, qp, expected, obs, rec):
        got = self._outputs(ctx, qp, obs, rec)
        if got != expected:
            self.fail(f"{what}: engine {got}, model {expected}", rec)
        self.coverage.update([o for o in (got.sched, got.fail) if o] + list(got.pulses))
        if self.listener and qp < self.n:
            self.listener(qp, expected)
        self._check_state(ctx, qp, obs, rec)

    def _check_state(self, ctx, qp, obs, rec):
        m = self.model
        now = rec["now"]
        if obs["errored"] != m.vector("errored"):
            self.fail(f"errored {obs['errored']:#x}, model {m.vector('errored'):#x}", rec)
        if obs["held"] != m.vector("held"):
            self.fail(f"held {obs['held']:#x}, model {m.vector('held'):#x}", rec)
        if qp is not None and qp < self.n:
            # the next event of this QP is written two cycles later at the earliest
            ctx.set(self.dut.err_qp, qp)
            ctx.set(self.dut.acked_qp, qp)
            status = name_of(ctx.get(self.dut.err_status), CplStatus)
            acked = ctx.get(self.dut.acked_psn)
            if (status, acked) != (m.err_status(qp), m.acked(qp)):
                self.fail(f"QP {qp}: err_status {status}, acked_psn {acked:#x}; model "
                          f"{m.err_status(qp)}, {m.acked(qp):#x}", rec)
        for q in range(self.n):
            d = m.deadline(q)
            if (d is not None and not m.errored(q) and (m.held(q) or m.outstanding(q))
                    and now > d + self.slack):
                self.fail(f"the timer of QP {q} (deadline tick {d}) did not fire", rec)

    def silent_candidates(self, now):
        """QPs whose retransmit timer may expire now with nothing outstanding (no output)."""
        m = self.model
        return [q for q in range(self.n)
                if m.deadline(q) is not None and not m.errored(q) and not m.held(q)
                and m.outstanding(q) == 0 and m.deadline(q) <= now <= m.deadline(q) + self.slack]

    def quiet_expiry(self, qp, now, margin):
        """A ``sent`` on ``qp`` near ``now`` could meet a timer that expired with nothing
        outstanding before the engine has served it (the model cannot tell)."""
        m = self.model
        d = m.deadline(qp)
        return (d is not None and not m.held(qp) and m.outstanding(qp) == 0
                and d - margin <= now <= d + self.slack + margin)

    def _apply(self, kind, qp, args, now):
        m = self.model
        if kind == "psn_set":
            return m.psn_set(qp, args["psn"])
        if kind == "ctx_set":
            return m.ctx_set(qp, args["state"], args["timeout"], args["retry_cnt"],
                             args["rnr_retry"])
        if kind == "ack":
            return m.ack(qp, args["syndrome"], args["psn"], now)
        if qp < self.n and self.quiet_expiry(qp, now, 0):
            self.fail(f"bench: sent on QP {qp} too close to a quiet timer expiry")
        return m.sent(qp, args["psn"], args["packets"], now=now)

    def _check(self, ctx, rec, obs):
        """Checks the cycle ``rec`` against the outputs ``obs`` it caused."""
        now = rec["now"]
        fire = None
        m = self.model
        # timers due about now, as the engine's scan may see them (before the events in flight)
        self.due_recent.append({q for q in range(self.n) if m.deadline(q) is not None
                                and not m.errored(q) and m.deadline(q) <= now + 4})
        if rec["taken"] is not None:
            kind, qp, args = rec["taken"]
            desc = f"{kind} QP {qp} " + " ".join(
                f"{k}={v:#x}" if isinstance(v, int) and k in ("psn", "syndrome") else f"{k}={v}"
                for k, v in args.items())
            self.history.append(f"tick {now}: {desc}")
            rec["expected"] = self._apply(kind, qp, args, now)
            self._compare(ctx, desc, qp, rec["expected"], obs, rec)
        elif obs["cpl"] or obs["sched"] or obs["pulses"] or obs["rose"]:
            if obs["sched"] is not None:
                fire = obs["sched"][0]
            elif obs["rose"] and obs["rose"] & (obs["rose"] - 1) == 0:
                fire = obs["rose"].bit_length() - 1
            else:
                self.fail(f"outputs without an event: {obs}", rec)
            d = self.model.deadline(fire)
            if not (self.model.due(fire, now) and now <= d + self.slack):
                self.fail(f"timer of QP {fire} fired at tick {now}, model deadline {d}", rec)
            self.fires.append((fire, now, d))
            self.fire_cycles.append(rec["cycle"])
            self.history.append(f"tick {now}: timer of QP {fire}")
            self._compare(ctx, f"timer of QP {fire}", fire, self.model.fire(fire, now), obs, rec)
        else:
            self._check_state(ctx, None, obs, rec)
        if rec["held"] is not None:
            kind, qp, _ = rec["held"]
            prev = self.last["taken"]
            recent = set().union(*self.due_recent)
            if (prev is not None and prev[1] == qp) or self.last["fire"] == qp:
                self.bubbles += 1               # an event of the QP is in the engine
            elif fire is not None or recent and kind in ("ack", "sent"):
                self.stalls += 1                # an expired timer is served first
            elif kind in ("psn_set", "ctx_set") and qp in recent:
                self.bubbles += 1               # an unseen expiry of the QP was served
            else:
                self.fail(f"{kind} of QP {qp} held without a reason", rec)
        self.last = {"taken": rec["taken"], "fire": fire}

    async def idle(self, ctx, cycles=1):
        for _ in range(cycles):
            await self._cycle(ctx)

    async def event(self, ctx, kind, qp, drain=True, **args):
        """Offer one event until the engine takes it; with ``drain``, wait until it is checked
        and return the model's outputs."""
        port = getattr(self.dut, kind)
        if kind == "psn_set":
            payload = {"qp": qp, "psn": args["psn"]}
        elif kind == "ctx_set":
            payload = {"qp": qp, "context": {
                "state": QpState[args["state"]], "timeout": args["timeout"],
                "retry_cnt": args["retry_cnt"], "rnr_retry": args["rnr_retry"],
                "peer_ip": 0x0A000002, "pmtu_log2": 12}}
        elif kind == "ack":
            payload = {"qp": qp, "syndrome": args["syndrome"], "psn": args["psn"],
                       "msn": (qp * 977 + args["psn"]) % PSN_MOD}
        else:
            payload = {"qp": qp, "psn": args["psn"], "packets": args["packets"]}
        ctx.set(port.payload, payload)
        ctx.set(port.valid, 1)
        while True:
            rec = await self._cycle(ctx, port, (kind, qp, args))
            if rec["taken"] is not None:
                break
        ctx.set(port.valid, 0)
        if not drain:
            return None
        while "expected" not in rec:
            await self._cycle(ctx)
        return rec["expected"]

    async def read_counters(self, ctx):
        """Every QP's counters through ``qp_stats_*`` (timers should be stopped first)."""
        await self.drain(ctx)
        await self.idle(ctx, 2)
        result = []
        for q in range(self.n):
            values = {}
            for k, name in enumerate(QP_COUNTERS):
                ctx.set(self.dut.qp_stats_qp, q)
                ctx.set(self.dut.qp_stats_sel, k)
                await self.idle(ctx)
                values[name] = ctx.get(self.dut.qp_stats_data)
            result.append(values)
        return result

    def run(self, body):
        done = []

        async def tb(ctx):
            await body(ctx)
            await self.drain(ctx)
            done.append(True)

        run_sim(self.dut, testbenches=[tb])
        assert done


# ---------------------------------------------------------------------------------------------
# the model on its own

def test_model_constants_match_the_engine():
    assert model_mod.QP_COUNTERS == QP_COUNTERS
    assert model_mod.COUNTERS == COUNTERS
    assert model_mod.TIME_TICK_NS == engine_mod.TICK_NS
    assert model_mod.RNR_DELAY_US == wire_roce.RNR_DELAY_US
    assert [model_mod.rnr_ticks(c) for c in range(32)] == [engine_mod.rnr_ticks(c)
                                                           for c in range(32)]
    assert [model_mod.timeout_ticks(c) for c in range(1, 32)] == [
        engine_mod.timeout_ticks(c) for c in range(1, 32)]
    assert model_mod.SCHED_KINDS == tuple(k.name for k in SchedKind)
    assert set(model_mod.FAIL_STATUSES) <= {s.name for s in CplStatus}
    assert model_mod.QP_STATES == tuple(s.name for s in QpState)
    assert model_mod.timeout_ticks(1) == 8 and model_mod.rnr_ticks(3) == 30


def test_model_rules():
    m = RetryModel(2)
    assert m.ctx_set(0, "RTS", 1, 1, 1) == Outputs()
    assert m.psn_set(0, PSN_MOD - 2) == Outputs(cpl_ack=PSN_MOD - 3, sched="RESET")
    assert m.sent(0, 1, 4, now=10) == Outputs()                  # PSNs 2^24-2 .. 1
    assert m.outstanding(0) == 4 and m.deadline(0) == 10 + 1 + 8
    assert m.sent(0, 0, 2, resent=2, now=11) == Outputs()        # resent, timer kept
    assert m.counters(0)["packets"] == 6 and m.counters(0)["resent"] == 2
    assert m.deadline(0) == 19
    # coalesced ACK across the wrap
    assert m.ack(0, 0x1F, 0, now=12) == Outputs(0, "ADVANCE", None, frozenset({"acks"}))
    assert m.deadline(0) == 12 + 9
    assert m.ack(0, 0x00, 0, now=13) == Outputs(pulses=frozenset({"acks", "stale_acks"}))
    assert m.ack(0, 0x1F, PSN_MOD - 1, now=13).pulses == {"ignored"}      # late
    assert m.ack(0, 0x1F, 2, now=13).pulses == {"ignored"}                # beyond sent_max
    # sequence NAK: acknowledges p - 1, rewinds; the same NAK again is ignored
    assert m.ack(0, 0x60, 1, now=14) == Outputs(None, "REWIND", None,
                                                frozenset({"seq_naks", "rewinds"}))
    assert m.retries(0) == 1
    assert m.ack(0, 0x60, 1, now=15).pulses == {"seq_naks", "ignored"}
    assert not m.due(0, 14 + 9 - 1) and m.due(0, 14 + 9)
    # timeout with retries used up: RETRY_EXCEEDED
    assert m.fire(0, 23) == Outputs(fail="RETRY_EXCEEDED", pulses=frozenset({"timeouts",
                                                                             "qp_errors"}))
    assert m.errored(0) and m.deadline(0) is None and m.err_status(0) == "RETRY_EXCEEDED"
    assert m.ack(0, 0x1F, 1, now=24) == Outputs()                # ignored, not counted
    assert m.counters(0)["timeouts"] == 1 and m.counters(0)["ignored"] == 3
    assert m.ctx_set(0, "RESET", 1, 1, 1) == Outputs()           # already failed
    assert m.psn_set(0, 100).sched == "RESET" and not m.errored(0)
    # RNR NAK: held for the RNR delay, released with a rewind; then its limit
    m.sent(0, 104, 5, now=30)
    out = m.ack(0, 0x22, 102, now=31)                            # 100, 101 acknowledged
    assert out == Outputs(101, "ADVANCE", None, frozenset({"rnr_naks"}))
    assert m.held(0) and m.deadline(0) == 31 + 1 + 20
    assert m.ack(0, 0x21, 102, now=32).pulses == {"rnr_naks", "ignored"}
    assert m.fire(0, 52) == Outputs(sched="REWIND", pulses=frozenset({"rewinds"}))
    assert not m.held(0) and m.deadline(0) == 52 + 9
    assert m.ack(0, 0x21, 102, now=53).fail == "RNR_RETRY_EXCEEDED"
    # rnr_retry 7: forever
    m.ctx_set(0, "RTS", 0, 0, 7)
    m.psn_set(0, 0)
    m.sent(0, 0, 1, now=60)
    assert m.deadline(0) is None                                 # timeout code 0: no timer
    for k in range(12):
        assert m.ack(0, 0x21, 0, now=61 + 20 * k).fail is None
        assert m.fire(0, 61 + 20 * k + 11).sched == "REWIND"
    # fatal NAKs, flush
    for syn, status in ((0x61, "REMOTE_INVALID"), (0x62, "REMOTE_ACCESS"), (0x63, "REMOTE_OP")):
        m.psn_set(1, 7)
        m.sent(1, 9, 3, now=400)
        assert m.ack(1, syn, 8, now=401) == Outputs(7, "ADVANCE", status,
                                                    frozenset({"error_naks", "qp_errors"}))
    m.psn_set(1, 7)
    # a context written in ERROR (or RESET: a QP closed) flushes the QP, not counted as an error
    assert m.ctx_set(1, QpState.ERROR, 0, 0, 0) == Outputs(fail="FLUSHED")
    # reserved syndromes acknowledge p - 1 and are otherwise ignored
    m.psn_set(1, 7)
    m.sent(1, 9, 3, now=500)
    assert m.ack(1, 0x45, 9, now=501) == Outputs(8, "ADVANCE", None, frozenset({"ignored"}))
    # outside the table: nothing
    assert m.ack(5, 0x1F, 0, now=1) == Outputs() and m.psn_set(9, 0) == Outputs()


def test_model_rnr_wait_ends_with_progress():
    m = RetryModel(1)
    m.ctx_set(0, "RTS", 2, 3, 3)
    m.psn_set(0, 0)
    m.sent(0, 9, 10, now=0)
    m.ack(0, 0x23, 3, now=1)
    assert m.held(0)
    out = m.ack(0, 0x60, 5, now=2)        # progress to 4 and a rewind: the RNR wait is over
    assert out.sched == "REWIND" and out.cpl_ack == 4 and not m.held(0)
    assert m.deadline(0) == 2 + 1 + 16
    m.ack(0, 0x23, 5, now=3)
    assert m.held(0)
    assert m.ack(0, 0x1F, 7, now=4).sched == "ADVANCE" and not m.held(0)
    # the rewind of an RNR wait's end is not the NAK's: the same NAK rewinds again
    m.ack(0, 0x60, 8, now=5)
    m.ack(0, 0x23, 8, now=6)
    assert m.fire(0, 6 + 31).sched == "REWIND"
    assert m.ack(0, 0x60, 8, now=40).sched == "REWIND" and m.retries(0) == 2


# ---------------------------------------------------------------------------------------------
# random traffic against the model

#: Traffic mixes: event weights, acknowledgement kinds, context parameters.
MIXES = {
    "acks": dict(
        events={"sent": 4, "ack": 6, "ctx": 0.1, "reconnect": 0.1},
        acks={"inorder": 4, "coalesced": 4, "dup": 2, "late": 1.5, "beyond": 1.5},
        timeouts=(0, 3, 3), retries=(1, 2, 7), rnr=(7,), idle=0.35),
    "seq": dict(
        events={"sent": 4, "ack": 5, "ctx": 0.1, "reconnect": 0.5},
        acks={"inorder": 3, "coalesced": 1, "seq": 3, "seq_again": 2, "seq_out": 1, "dup": 0.5},
        timeouts=(0, 3), retries=(0, 1, 2), rnr=(7,), idle=0.3),
    "rnr": dict(
        events={"sent": 4, "ack": 5, "ctx": 0.1, "reconnect": 0.6},
        acks={"inorder": 3, "coalesced": 1, "rnr": 3, "rnr_again": 1, "seq": 0.5},
        timeouts=(0, 2, 3), retries=(2, 7), rnr=(0, 1, 2, 3, 5, 7), idle=0.3),
    "fatal": dict(
        events={"sent": 4, "ack": 5, "ctx": 1.0, "reconnect": 1.2},
        acks={"inorder": 3, "dup": 1, "fatal": 1, "reserved": 1, "fatal_out": 0.5},
        timeouts=(0, 3), retries=(3,), rnr=(7,), flush=0.4, idle=0.3),
    "timeouts": dict(
        events={"sent": 4, "ack": 1.2, "ctx": 0.3, "reconnect": 0.6},
        acks={"inorder": 3, "coalesced": 2, "seq": 0.5},
        timeouts=(1, 2, 3), retries=(0, 1, 2), rnr=(7,), idle=0.4),
    "mix": dict(
        events={"sent": 4, "ack": 5, "ctx": 0.4, "reconnect": 0.5},
        acks={"inorder": 3, "coalesced": 2, "dup": 1, "late": 1, "beyond": 1, "seq": 1.5,
              "seq_again": 1, "seq_out": 0.5, "rnr": 1.2, "rnr_again": 0.4, "fatal": 0.15,
              "fatal_out": 0.1, "reserved": 0.3},
        timeouts=(0, 1, 2, 3), retries=(0, 1, 2, 7), rnr=(0, 1, 2, 7), flush=0.2, idle=0.3),
}

#: Most packets a QP keeps outstanding.
WINDOW = 48


class Traffic:
    """A scheduler and a responder, consistent with what the engine sees (mostly)."""

    def __init__(self, bench, rng, mix):
        self.b = bench
        self.m = bench.model
        self.rng = rng
        self.mix = MIXES[mix]
        n = bench.n
        self.next_send = [0] * n
        self.last_nak = [None] * n
        self.margin = -(-(n + 4) // bench.tc) + 2
        self.count = 0
        self.ack_scale = 1.0
        bench.listener = self.on_outputs

    def on_outputs(self, qp, out):
        m = self.m
        top = (m.acked(qp) + 1) % PSN_MOD
        if out.sched == "RESET":
            self.next_send[qp] = m.sent_max(qp)
            self.last_nak[qp] = None
        elif out.sched == "REWIND":
            self.next_send[qp] = top
        elif ahead(top, self.next_send[qp]):
            self.next_send[qp] = top

    def pick(self, table):
        names = list(table)
        return self.rng.choices(names, weights=[table[k] for k in names])[0]

    def reconnect(self, qp):
        rng = self.rng
        starts = [0, PSN_MOD - 3, PSN_MOD - 40, rng.getrandbits(24)]
        return [("ctx_set", qp, dict(state="RTS", timeout=rng.choice(self.mix["timeouts"]),
                                     retry_cnt=rng.choice(self.mix["retries"]),
                                     rnr_retry=rng.choice(self.mix["rnr"]))),
                ("psn_set", qp, dict(psn=rng.choice(starts)))]

    def ack(self, qp):
        rng, m = self.rng, self.m
        acked, out = m.acked(qp), m.outstanding(qp)
        kind = self.pick(self.mix["acks"])
        nak_psn = (acked + 1 + (rng.randint(0, out) if rng.random() < 0.5 else 0)) % PSN_MOD
        if kind == "inorder":
            return 0x1F, (acked + min(out, 1)) % PSN_MOD
        if kind == "coalesced":
            return rng.randint(0, 0x1F), (acked + rng.randint(min(out, 1), out)) % PSN_MOD
        if kind == "dup":
            return 0x1F, acked
        if kind == "late":
            return 0x1F, (acked - rng.randint(1, 60)) % PSN_MOD
        if kind == "beyond":
            return 0x1F, (m.sent_max(qp) + rng.randint(0, 60)) % PSN_MOD
        if kind == "seq":
            self.last_nak[qp] = nak_psn
            return 0x60, nak_psn
        if kind == "seq_again":
            return 0x60, self.last_nak[qp] if self.last_nak[qp] is not None else nak_psn
        if kind == "seq_out":
            return 0x60, rng.choice([(acked - rng.randint(0, 30)) % PSN_MOD,
                                     (m.sent_max(qp) + 1 + rng.randint(0, 30)) % PSN_MOD])
        if kind == "rnr":
            code = rng.choice([1, 1, 2, 3, 3, 4])
            return 0x20 | code, nak_psn
        if kind == "rnr_again":
            return 0x20 | rng.randint(1, 3), (acked + 1) % PSN_MOD
        if kind == "fatal":
            return rng.choice([0x61, 0x62, 0x63]), nak_psn
        if kind == "fatal_out":
            return rng.choice([0x61, 0x62, 0x63]), (m.sent_max(qp) + 1 + rng.randint(0, 9)) \
                % PSN_MOD
        syn = rng.choice([rng.randint(0x40, 0x5F), rng.randint(0x64, 0x7F),
                          rng.randint(0x80, 0xFF)])
        return syn, nak_psn

    def sent(self, qp, now):
        rng, m = self.rng, self.m
        if self.b.quiet_expiry(qp, now, self.margin):
            return None
        start = self.next_send[qp]
        in_flight = (start - m.acked(qp) - 1) % PSN_MOD
        if in_flight >= WINDOW:
            return None
        k = rng.choice([1, 1, 1, 2, 3, 4]) if rng.random() < 0.9 else rng.randint(5, 63)
        k = max(1, min(k, WINDOW - in_flight))
        self.next_send[qp] = (start + k) % PSN_MOD
        return ("sent", qp, dict(psn=(start + k - 1) % PSN_MOD, packets=k))

    def next_events(self, now):
        rng, m, n = self.rng, self.m, self.b.n
        if n < 256 and rng.random() < 0.015:                 # outside the table
            qp = rng.randint(n, 255)
            return [rng.choice([
                ("ack", qp, dict(syndrome=0x1F, psn=rng.getrandbits(24))),
                ("sent", qp, dict(psn=rng.getrandbits(24), packets=rng.randint(1, 4))),
                ("psn_set", qp, dict(psn=rng.getrandbits(24))),
                ("ctx_set", qp, dict(state="RESET", timeout=1, retry_cnt=0, rnr_retry=0)),
            ])]
        qp = rng.randrange(n)
        if m.errored(qp):
            if rng.random() < 0.25:
                return self.reconnect(qp)
            if rng.random() < 0.5:
                return [("ack", qp, dict(zip(("syndrome", "psn"), self.ack(qp))))]
            ev = self.sent(qp, now)
            return [ev] if ev else []
        self.count += 1
        if self.count % 150 == 0:            # the responder goes quiet now and then
            self.ack_scale = rng.choice([1.0, 1.0, 0.3, 0.05, 0.0])
        events = dict(self.mix["events"], ack=self.mix["events"]["ack"] * self.ack_scale)
        kind = self.pick(events)
        if kind == "reconnect":
            return self.reconnect(qp)
        if kind == "ctx":
            timeout, retry_cnt, rnr_retry = m.params(qp)
            flush = rng.random() < self.mix.get("flush", 0.05)
            state = rng.choice(["RESET", "ERROR"]) if flush else rng.choice(["RTS", "RTS", "RTR"])
            if rng.random() < 0.5:
                timeout = rng.choice(self.mix["timeouts"])
            return [("ctx_set", qp, dict(state=state, timeout=timeout, retry_cnt=retry_cnt,
                                         rnr_retry=rnr_retry))]
        if kind == "ack" or m.held(qp) and rng.random() < 0.9:
            return [("ack", qp, dict(zip(("syndrome", "psn"), self.ack(qp))))]
        ev = self.sent(qp, now)
        return [ev] if ev else []


def run_random(num_qps, tick_cycles, mix, events, seed):
    rng = random.Random(seed)
    b = Bench(num_qps, tick_cycles)
    t = Traffic(b, rng, mix)
    idle = MIXES[mix]["idle"]
    result = {}

    async def body(ctx):
        for q in range(num_qps):
            for kind, qp, args in t.reconnect(q):
                await b.event(ctx, kind, qp, **args)
        done = 0
        while done < events:
            if rng.random() < idle:
                await b.idle(ctx, rng.choice([1, 1, 1, 2, 5]))
                continue
            evs = t.next_events(b.now)
            if not evs:
                await b.idle(ctx)
            for kind, qp, args in evs:
                await b.event(ctx, kind, qp, drain=False, **args)
                done += 1
        await b.idle(ctx, 2 * b.slack * tick_cycles)
        for q in range(num_qps):                  # stop every timer, keep the counters
            await b.event(ctx, "psn_set", q, psn=0)
        result["counters"] = await b.read_counters(ctx)

    b.run(body)
    for q in range(num_qps):
        assert result["counters"][q] == b.model.counters(q), f"counters of QP {q}"
    return b


@pytest.mark.parametrize("mix,num_qps,tick_cycles,events,seed", [
    ("acks", 3, 1, 3000, 1),
    ("seq", 4, 1, 3000, 2),
    ("rnr", 4, 1, 3000, 3),
    ("fatal", 3, 1, 2000, 4),
    full("timeouts", 5, 1, 2500, 5),
    ("timeouts", 3, 3, 1500, 6),
    ("mix", 6, 1, 6000, 7),
    full("mix", 1, 3, 2000, 8),
    full("mix", 13, 3, 4000, 9),
    full("mix", 40, 1, 3000, 10),
])
def test_against_model(mix, num_qps, tick_cycles, events, seed):
    b = run_random(num_qps, tick_cycles, mix, events, seed)
    cov = b.coverage
    # the traffic reached what the mix is about
    wanted = {
        "acks": ["acks", "stale_acks", "ignored", "ADVANCE", "RESET"],
        "seq": ["seq_naks", "REWIND", "RETRY_EXCEEDED", "ignored"],
        "rnr": ["rnr_naks", "RNR_RETRY_EXCEEDED", "REWIND", "ignored"],
        "fatal": ["error_naks", "REMOTE_INVALID", "REMOTE_ACCESS", "REMOTE_OP", "FLUSHED",
                  "ignored"],
        "timeouts": ["timeouts", "RETRY_EXCEEDED", "REWIND"],
        "mix": ["acks", "stale_acks", "seq_naks", "rnr_naks", "timeouts", "ignored", "REWIND",
                "RETRY_EXCEEDED", "RNR_RETRY_EXCEEDED", "FLUSHED"],
    }[mix]
    missing = [w for w in wanted if cov[w] == 0]
    assert not missing, f"never seen: {missing} ({dict(cov)})"
    assert b.fires, "no timer fired"


# ---------------------------------------------------------------------------------------------
# directed sequences

def run_script(num_qps, tick_cycles, script):
    """``script(ctx, bench)``: a coroutine driving the bench."""
    b = Bench(num_qps, tick_cycles)

    async def body(ctx):
        await script(ctx, b)

    b.run(body)
    return b


@pytest.mark.parametrize("tick_cycles", [1, 3])
def test_timer_timing(tick_cycles):
    """With one QP the scan never leaves it: a timer fires exactly at its deadline, between
    2^(timeout+2) and 2^(timeout+2) + 1 ticks after it was started."""
    marks = {}

    async def script(ctx, b):
        await b.event(ctx, "ctx_set", 0, state="RTS", timeout=1, retry_cnt=2, rnr_retry=1)
        await b.event(ctx, "psn_set", 0, psn=PSN_MOD - 1)
        await b.idle(ctx, 2)
        marks["sent"] = b.now
        marks["sent_cycle"] = b.cycle
        await b.event(ctx, "sent", 0, psn=1, packets=3)
        while len(b.fires) < 3:
            await b.idle(ctx)
        marks["status"] = b.model.err_status(0)
        # an RNR wait of code 1 (10 us: 10 ticks)
        await b.event(ctx, "psn_set", 0, psn=5)
        await b.event(ctx, "sent", 0, psn=5, packets=1)
        marks["rnr"] = b.now
        marks["rnr_cycle"] = b.cycle
        await b.event(ctx, "ack", 0, syndrome=0x21, psn=5)
        while len(b.fires) < 4:
            await b.idle(ctx)
        marks["rnr_release_cycle"] = b.fire_cycles[3]
        await b.idle(ctx, 3)

    b = run_script(1, tick_cycles, script)
    t = marks["sent"]
    assert [(q, now) for q, now, _ in b.fires[:3]] == [(0, t + 9), (0, t + 18), (0, t + 27)]
    assert marks["status"] == "RETRY_EXCEEDED"
    assert b.fires[3][1] == marks["rnr"] + 11
    cycles = marks["rnr_release_cycle"] - marks["rnr_cycle"]
    assert 10 * tick_cycles <= cycles <= 11 * tick_cycles


@pytest.mark.parametrize("first_progress", [False, True])
def test_retry_limits(first_progress):
    """retry_cnt and rnr_retry 0..7 (RNR 7: forever): timeouts, sequence NAKs and timeouts in
    turn, RNR NAKs; the first NAK acknowledges a packet (the counts restart from it) or not."""
    async def script(ctx, b):
        for limit in range(8):
            for how in ("timeout", "seq", "rnr"):
                await b.event(ctx, "ctx_set", 1, state="RTS", timeout=1, retry_cnt=limit,
                              rnr_retry=limit)
                await b.event(ctx, "psn_set", 1, psn=1000)
                await b.event(ctx, "sent", 1, psn=1003, packets=4)
                tries = 0
                while not b.model.errored(1) and tries < 12:
                    psn = 1001 if first_progress else 1000
                    if how == "timeout" or how == "seq" and tries % 2:
                        # (a repeated sequence NAK is ignored until another rewind)
                        if first_progress and tries == 0:
                            await b.event(ctx, "ack", 1, syndrome=0x1F, psn=psn)
                        while b.model.deadline(1) is not None and not b.model.errored(1) \
                                and b.model.retries(1) == tries:
                            await b.idle(ctx)
                    elif how == "seq":
                        await b.event(ctx, "ack", 1, syndrome=0x60, psn=psn)
                    else:
                        await b.event(ctx, "ack", 1, syndrome=0x21, psn=psn)
                        while b.model.held(1):
                            await b.idle(ctx)
                    tries += 1
                # ``limit`` retries, then the next one fails the QP; RNR 7: never
                if how == "rnr" and limit == 7:
                    assert tries == 12 and not b.model.errored(1)
                else:
                    assert tries == limit + 1 and b.model.errored(1), (how, limit, tries)
        await b.idle(ctx, 5)

    b = run_script(2, 1, script)
    assert b.coverage["RNR_RETRY_EXCEEDED"] == 7 and b.coverage["RETRY_EXCEEDED"] == 16


def test_fatal_naks_and_flush():
    async def script(ctx, b):
        await b.event(ctx, "ctx_set", 0, state="RTS", timeout=2, retry_cnt=3, rnr_retry=3)
        for syn in (0x61, 0x62, 0x63):
            await b.event(ctx, "psn_set", 0, psn=50)
            await b.event(ctx, "sent", 0, psn=53, packets=4)
            await b.event(ctx, "ack", 0, syndrome=syn, psn=52)
            assert b.model.errored(0)
            # ignored while failed, not counted
            await b.event(ctx, "ack", 0, syndrome=0x1F, psn=53)
            await b.event(ctx, "sent", 0, psn=54, packets=1)
            await b.event(ctx, "ctx_set", 0, state="RESET", timeout=2, retry_cnt=3, rnr_retry=3)
            await b.idle(ctx, 40)                 # no timer runs
        await b.event(ctx, "psn_set", 0, psn=9)
        await b.event(ctx, "ctx_set", 0, state="ERROR", timeout=2, retry_cnt=3, rnr_retry=3)
        await b.event(ctx, "ctx_set", 0, state="RESET", timeout=2, retry_cnt=3, rnr_retry=3)
        c = await b.read_counters(ctx)
        assert c[0] == b.model.counters(0)

    b = run_script(1, 1, script)
    assert [b.coverage[s] for s in ("REMOTE_INVALID", "REMOTE_ACCESS", "REMOTE_OP",
                                    "FLUSHED")] == [1, 1, 1, 1]
    # the engine's own pulses: the three error NAKs are QP errors, the flush is not
    assert b.coverage["qp_errors"] == 3 and b.coverage["error_naks"] == 3
    assert b.model.err_status(0) == "FLUSHED"


def test_sequence_nak_ends_an_rnr_wait():
    """A sequence NAK that makes progress during an RNR wait rewinds with the retransmit timer:
    the QP is no longer waiting out an RNR delay and must not stay held."""
    async def script(ctx, b):
        await b.event(ctx, "ctx_set", 0, state="RTS", timeout=3, retry_cnt=3, rnr_retry=3)
        await b.event(ctx, "psn_set", 0, psn=10)
        await b.event(ctx, "sent", 0, psn=14, packets=5)
        await b.event(ctx, "ack", 0, syndrome=0x23, psn=10)             # RNR wait, held
        assert b.model.held(0)
        out = await b.event(ctx, "ack", 0, syndrome=0x60, psn=12)       # 10, 11 acknowledged
        assert out.sched == "REWIND" and not b.model.held(0)
        await b.idle(ctx, 80)

    run_script(1, 1, script)


def test_ack_ends_an_rnr_wait():
    """An ACK that makes progress during an RNR wait restarts the retransmit timer (or stops it
    when nothing is outstanding): the QP is released."""
    async def script(ctx, b):
        await b.event(ctx, "ctx_set", 0, state="RTS", timeout=3, retry_cnt=3, rnr_retry=3)
        await b.event(ctx, "psn_set", 0, psn=10)
        await b.event(ctx, "sent", 0, psn=14, packets=5)
        await b.event(ctx, "ack", 0, syndrome=0x23, psn=10)
        await b.event(ctx, "ack", 0, syndrome=0x1F, psn=14)             # everything
        assert not b.model.held(0) and b.model.deadline(0) is None
        await b.idle(ctx, 60)

    run_script(1, 1, script)


def test_sequence_nak_after_an_rnr_rewind():
    """The rewind at the end of an RNR wait is the last rewind: a sequence NAK of the PSN of an
    earlier one is not its repeat and rewinds again."""
    async def script(ctx, b):
        await b.event(ctx, "ctx_set", 0, state="RTS", timeout=3, retry_cnt=3, rnr_retry=3)
        await b.event(ctx, "psn_set", 0, psn=10)
        await b.event(ctx, "sent", 0, psn=14, packets=5)
        assert (await b.event(ctx, "ack", 0, syndrome=0x60, psn=10)).sched == "REWIND"
        await b.event(ctx, "ack", 0, syndrome=0x21, psn=10)             # RNR wait, 10 ticks
        while b.model.held(0):
            await b.idle(ctx)
        out = await b.event(ctx, "ack", 0, syndrome=0x60, psn=10)
        assert out.sched == "REWIND" and b.model.retries(0) == 2
        await b.idle(ctx, 5)

    run_script(1, 1, script)


def test_priorities_and_alternation():
    """psn_set, then ctx_set, then an expired timer, then ack and sent in turn."""
    n = 2
    dut = RetryEngine(n, clk_hz=CLK_HZ[1])
    order = []

    async def tb(ctx):
        def offer(port, payload):
            ctx.set(port.payload, payload)
            ctx.set(port.valid, 1)

        offer(dut.psn_set, {"qp": 0, "psn": 100})
        offer(dut.ctx_set, {"qp": 1, "context": {"state": QpState.RTS, "timeout": 1}})
        # (QPs chosen so that no event follows one of its QP: see the next test)
        offer(dut.ack, {"qp": 0, "syndrome": 0x1F, "psn": 5})
        offer(dut.sent, {"qp": 1, "psn": 100, "packets": 1})
        ports = ("psn_set", "ctx_set", "ack", "sent")
        for _ in range(8):
            *_, r0, r1, r2, r3 = await ctx.tick().sample(*(getattr(dut, p).ready for p in ports))
            taken = [p for p, r in zip(ports, (r0, r1, r2, r3)) if r]
            order.append(taken)
            for p in taken:
                if p in ("psn_set", "ctx_set"):
                    ctx.set(getattr(dut, p).valid, 0)
        ctx.set(dut.ack.valid, 0)
        ctx.set(dut.sent.valid, 0)

    run_sim(dut, testbenches=[tb])
    assert order == [["psn_set"], ["ctx_set"], ["ack"], ["sent"], ["ack"], ["sent"], ["ack"],
                     ["sent"]]


def test_events_of_one_qp_wait_a_cycle():
    """An event of the QP whose state is being read (taken in the cycle before) waits one
    cycle; an event of another QP fills the gap."""
    dut = RetryEngine(3, clk_hz=CLK_HZ[1])
    order = []
    ports = ("psn_set", "ctx_set", "ack", "sent")

    async def tb(ctx):
        async def step():
            *_, r0, r1, r2, r3 = await ctx.tick().sample(*(getattr(dut, p).ready for p in ports))
            taken = [p for p, r in zip(ports, (r0, r1, r2, r3)) if r]
            order.append(taken)
            return taken

        ctx.set(dut.ctx_set.payload, {"qp": 2, "context": {"state": QpState.RTS}})
        ctx.set(dut.ctx_set.valid, 1)
        await step()
        ctx.set(dut.ctx_set.valid, 0)
        ctx.set(dut.psn_set.payload, {"qp": 2, "psn": 7})
        ctx.set(dut.psn_set.valid, 1)
        while "psn_set" not in await step():
            pass
        ctx.set(dut.psn_set.valid, 0)
        # ack and sent of QP 1 both waiting, then a sent of QP 0 too
        ctx.set(dut.ack.payload, {"qp": 1, "syndrome": 0x1F, "psn": 6})
        ctx.set(dut.sent.payload, {"qp": 1, "psn": 7, "packets": 1})
        ctx.set(dut.ack.valid, 1)
        ctx.set(dut.sent.valid, 1)
        for _ in range(4):
            await step()
        ctx.set(dut.sent.payload, {"qp": 0, "psn": 7, "packets": 1})
        for _ in range(4):
            await step()
        ctx.set(dut.ack.valid, 0)
        ctx.set(dut.sent.valid, 0)

    run_sim(dut, testbenches=[tb])
    assert order == [["ctx_set"], [], ["psn_set"],
                     ["ack"], [], ["sent"], [],
                     ["ack"], ["sent"], ["ack"], ["sent"]]


def test_parameters_are_validated():
    raises(ValueError, r"num_qps must be 1\.\.256, not 0", lambda: RetryEngine(0))
    raises(ValueError, r"num_qps must be 1\.\.256, not 257", lambda: RetryEngine(257))
    raises(TypeError, "num_qps must be an integer", lambda: RetryEngine(2.0))
    raises(TypeError, "num_qps must be an integer", lambda: RetryEngine(True))
    raises(ValueError, "clk_hz must be a positive frequency", lambda: RetryEngine(2, clk_hz=0))
    raises(ValueError, "clk_hz must be a positive frequency", lambda: RetryEngine(2, clk_hz="1"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        assert RetryEngine(1, clk_hz=322_265_625).tick_cycles == 330
        assert RetryEngine(1, clk_hz=1e6).tick_cycles == 1
        gc.collect()
