"""The responder's notification point (:class:`RespCnp`) against the reference model of its rule
(:class:`rocegen.sim.models.responder.responder.NotificationPoint`): random CE marks over several QPs
(bursts of one QP on consecutive cycles among them), random answers to pass through, random
backpressure on the output and interval changes at run time. Every mark's fate (CNP, suppressed,
dropped) is the model's, the answers pass unchanged (held while a CNP is offered), the CNPs are
the model's in order; latency; parameters."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.responder.resp_cnp import DEFAULT_CNP_INTERVAL, RespCnp, cnp_interval_cycles
from rocegen.sim.models.responder.responder import CNP_DSCP, NotificationPoint
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from tests.tiers import full

ZERO_ANSWER = {"qp": 0, "cnp": 0, "syndrome": 0, "psn": 0, "msn": 0, "dest_qpn": 0, "dst_ip": 0,
               "src_port": 0, "dscp": 0}


def random_mark(rng, qp):
    return {"qp": qp, "dest_qpn": rng.getrandbits(24), "dst_ip": rng.getrandbits(32),
            "src_port": rng.getrandbits(16)}


def random_answer(rng, qp):
    return {"qp": qp, "cnp": 0, "syndrome": rng.choice([0x1F, 0x60, 0x61, 0x23]),
            "psn": rng.getrandbits(24), "msn": rng.getrandbits(24),
            "dest_qpn": rng.getrandbits(24), "dst_ip": rng.getrandbits(32),
            "src_port": rng.getrandbits(16), "dscp": rng.getrandbits(6)}


def cnp_record(mark, dscp=CNP_DSCP):
    return {**mark, "cnp": 1, "syndrome": 0, "psn": 0, "msn": 0, "dscp": dscp}


def run(num_qps, qps, interval, *, cycles, p_mark, p_burst, p_answer, backpressure, seed,
        changes=()):
    """Drive the block for ``cycles`` cycles, then drain it; replay the model beside it.
    ``changes``: (cycle, interval) run-time settings. Returns the outcomes counted."""
    rng = random.Random(seed)
    dut = RespCnp(num_qps, interval=interval)
    model = NotificationPoint(interval)
    changes = dict(changes)
    answers_in, out, issued_marks = [], [], []
    outcomes = {"issued": 0, "suppressed": 0, "dropped": 0, "back_to_back": 0}

    async def tb(ctx):
        cur = None                  # the answer offered on i until it is taken
        burst = []                  # QPs still to mark on the next cycles
        prev_mark = None            # the mark taken in the cycle before (decided now)
        for t in range(cycles + 300):
            active = t < cycles
            mark = None
            if active and (burst or rng.random() < p_mark):
                if not burst and rng.random() < p_burst:
                    burst = [rng.choice(qps)] * rng.choice([2, 3])
                mark = random_mark(rng, burst.pop() if burst else rng.choice(qps))
            ctx.set(dut.ce.valid, mark is not None)
            if mark is not None:
                ctx.set(dut.ce.payload, mark)
            new = changes.get(t)
            ctx.set(dut.cfg.valid, new is not None)
            if new is not None:
                ctx.set(dut.cfg.payload, {"interval": new})
            if cur is None and active and rng.random() < p_answer:
                cur = random_answer(rng, rng.choice(qps))
            ctx.set(dut.i.valid, cur is not None)
            ctx.set(dut.i.payload, cur or ZERO_ANSWER)
            ctx.set(dut.o.ready, not (active and rng.random() < backpressure))
            _, _, iv, ir, ov, orr, op, iss, sup, drp = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.ready, dut.o.payload, dut.issued,
                dut.suppressed, dut.dropped)
            o = meta_dict(op) if ov else None
            cnp_out = bool(ov and o["cnp"])
            if cnp_out:
                # the waiting CNP goes first: an answer offered is held
                assert not ir, f"cycle {t}: an answer taken while a CNP is offered"
            elif iv:
                assert ov and o == cur and ir == orr, \
                    f"cycle {t}: the answer offered is not passed on unchanged"
            else:
                assert not ov, t
            if ov and orr:
                out.append(o)
            if iv and ir:
                answers_in.append(cur)
                cur = None
            # the model: the mark taken in the cycle before is decided in this one
            m_qp = prev_mark["qp"] if prev_mark is not None and prev_mark["qp"] < num_qps \
                else None
            got = model.step(t, mark=m_qp, leaves=bool(cnp_out and orr), interval=new)
            pulses = {"issued": iss, "suppressed": sup, "dropped": drp}
            assert pulses == {k: int(got == k) for k in pulses}, \
                f"cycle {t}: mark {prev_mark}: model {got}, block {pulses}"
            if got:
                outcomes[got] += 1
            if got == "issued":
                issued_marks.append(prev_mark)
            if got and mark is not None and mark["qp"] == m_qp:
                outcomes["back_to_back"] += 1
            prev_mark = mark
        assert not model.waiting, "a CNP was left waiting"

    run_sim(dut, testbenches=[tb], deadline_cycles=cycles + 1000)
    assert [r for r in out if not r["cnp"]] == answers_in
    assert [r for r in out if r["cnp"]] == [cnp_record(m) for m in issued_marks]
    return outcomes


@pytest.mark.parametrize("num_qps, qps", [(5, [0, 1, 2, 4, 5, 7]), (256, [0, 1, 17, 200, 255])])
@pytest.mark.parametrize("interval, backpressure, p_answer", [
    (0, 0.3, 0.3), full(20, 0.6, 0.4),
                                                              (150, 0.9, 0.4)])
def test_against_model(num_qps, qps, interval, backpressure, p_answer):
    seed = num_qps + interval + int(10 * backpressure)
    n = run(num_qps, qps, interval, cycles=6000, p_mark=0.25, p_burst=0.2, p_answer=p_answer,
            backpressure=backpressure, seed=seed)
    assert n["issued"] > 50 and n["dropped"] > 5 and n["back_to_back"] > 20, n
    assert bool(n["suppressed"]) == (interval > 0), n


def test_interval_changed_at_run_time():
    """From a long interval to 0 (every mark makes a CNP unless one waits) and to a middle one."""
    n = run(3, [0, 1, 2], 5000, cycles=6000, p_mark=0.15, p_burst=0.1, p_answer=0.2,
            backpressure=0.1, seed=9, changes=[(2000, 0), (4000, 60)])
    assert n["issued"] > 200 and n["suppressed"] > 50, n


def test_latency():
    """A mark taken in cycle t with nothing else going on: its CNP is offered in t + 2, and
    taken at once."""
    dut = RespCnp(4, interval=10)
    seen = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        await ctx.tick().repeat(3)
        mark = {"qp": 3, "dest_qpn": 0x123456, "dst_ip": 0x0A000001, "src_port": 0xC001}
        ctx.set(dut.ce.payload, mark)
        ctx.set(dut.ce.valid, 1)
        for t in range(8):
            _, _, ov, op = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            ctx.set(dut.ce.valid, 0)
            if ov:
                seen.append((t, meta_dict(op)))
        assert seen == [(2, cnp_record(mark))]

    run_sim(dut, testbenches=[tb], deadline_cycles=100)


def test_defaults_and_parameters():
    assert cnp_interval_cycles(322_265_625) == DEFAULT_CNP_INTERVAL == 1290     # 4 us
    assert cnp_interval_cycles(156_250_000) == 625
    dut = RespCnp(8)
    Fragment.get(dut, None)
    assert dut.interval == 1290 and dut.dscp == 48
    raises(ValueError, "num_qps", lambda: RespCnp(0))
    raises(TypeError, "interval must be an integer", lambda: RespCnp(8, interval=1.5))
    raises(ValueError, r"interval must be 0..16777215 cycles, not 16777216",
           lambda: RespCnp(8, interval=1 << 24))
    raises(ValueError, "interval must be", lambda: RespCnp(8, interval=-1))
    for bad in (-1, 64, None):
        raises(ValueError, "dscp must be a DSCP value 0..63", lambda b=bad: RespCnp(8, dscp=b))
