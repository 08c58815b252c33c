"""The stages of :class:`DcqcnEngine` on their own: the selection (:class:`DcqcnSelect`) against
the schedule of :class:`rocegen.sim.models.cc.dcqcn.DcqcnTable` (random CNPs, holds and bypass),
and the law (:class:`DcqcnEvents` then :class:`DcqcnRates`) against
:class:`rocegen.sim.models.cc.dcqcn.DcqcnRp` from random states at the edges of every field
(deadlines around the wrap of the time, counts at F and at saturation, alpha 0 and 1, rates
beyond the clamps), one operation per cycle."""

import random

import pytest
from amaranth.hdl import Elaboratable, Module

from rocegen.gateware.roce.cc.dcqcn_events import DcqcnEvents
from rocegen.gateware.roce.cc.dcqcn_rates import DcqcnRates
from rocegen.gateware.roce.cc.dcqcn_select import WINDOW, DcqcnSelect
from rocegen.sim.models.cc.dcqcn import ALPHA_ONE, DcqcnParams, DcqcnRp, DcqcnTable
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim

RATE_MAX = (1 << 27) - 1
MOD = 1 << 32


def random_params(rng, bypass=0):
    line = rng.choice([RATE_MAX, 40672039, 8 << 20, rng.randint(1, RATE_MAX)])
    return DcqcnParams(
        bypass=bypass, g_log2=rng.randint(0, 16), alpha_init=rng.randint(0, ALPHA_ONE),
        alpha_period=rng.choice([1, 55, (1 << 24) - 1]), rate_period=rng.choice([1, 77, 99999]),
        byte_count=rng.choice([1, 5000, MOD - 1, rng.randrange(1, MOD)]),
        fast_steps=rng.choice([0, 5, 254, 255]), r_ai=rng.choice([0, 1, RATE_MAX, 16269]),
        r_hai=rng.choice([0, 162688, RATE_MAX]), min_rate=rng.randint(0, line),
        line_rate=line)


@pytest.mark.parametrize("num_qps, seed", [(1, 1), (3, 2), (7, 3), (256, 4)])
def test_select_against_schedule(num_qps, seed):
    rng = random.Random(seed)
    dut = DcqcnSelect(num_qps, fifo_depth=3)
    table = DcqcnTable(num_qps, random_params(rng), fifo_depth=3)
    qps = list(range(min(num_qps, 6))) + [255]
    seen = {"cnp": 0, "visit": 0, "dropped": 0, "idle": 0}

    async def tb(ctx):
        prev_drops, prev_op = 0, None
        for t in range(4000):
            cnp = rng.choice(qps) if rng.random() < 0.35 else None
            cfg = random_params(rng, bypass=int(rng.random() < 0.3)) \
                if rng.random() < 0.01 else None
            op = table.step(t, cnp=cnp, cfg=cfg)
            ctx.set(dut.cnp.valid, cnp is not None)
            ctx.set(dut.cnp.payload.qp, cnp or 0)
            ctx.set(dut.hold, table.pending is not None)
            ctx.set(dut.bypass, table.params.bypass)
            _, _, got, dropped = await ctx.tick().sample(dut.op, dut.dropped)
            got = meta_dict(got)          # the operation chosen in the cycle before
            want = {"valid": 0, "cnp": 0, "qp": 0} if prev_op is None else \
                {"valid": 1, "cnp": int(prev_op[0] == "cnp"), "qp": prev_op[1]}
            if not got["valid"]:
                got["qp"] = 0
            assert got == want, f"cycle {t}: block {got}, schedule {want}"
            prev_op = op
            seen[op[0] if op else "idle"] += 1
            drops = len([d for d in table.dropped if d <= t - 1])
            assert dropped == (drops > prev_drops), t
            prev_drops = drops
            seen["dropped"] += dropped

    run_sim(dut, testbenches=[tb], deadline_cycles=5000)
    assert seen["cnp"] > 200 and seen["dropped"] > 10 and seen["idle"] > 50, seen
    assert seen["visit"] > (200 if num_qps > WINDOW else 100), seen


class Law(Elaboratable):
    """The events stage followed by the rates stage, as the engine joins them."""

    def __init__(self):
        self.ev, self.ra = DcqcnEvents(), DcqcnRates()

    def elaborate(self, platform):
        m = Module()
        m.submodules.ev, m.submodules.ra = self.ev, self.ra
        m.d.comb += [self.ra.decided.eq(self.ev.decided), self.ra.cfg.eq(self.ev.cfg)]
        return m


def random_state(rng, p, time):
    near = [0, 1, -1, 2, MOD // 2 - 1, -MOD // 2, MOD // 2 + 1]
    f = p.fast_steps
    return {
        "rc": rng.choice([0, 1, p.min_rate, p.line_rate, RATE_MAX, rng.randint(0, RATE_MAX)]),
        "rt": rng.choice([0, p.line_rate, RATE_MAX, rng.randint(0, RATE_MAX)]),
        "alpha": rng.choice([0, 1, ALPHA_ONE, ALPHA_ONE - 1, rng.randint(0, ALPHA_ONE)]),
        "t_stage": rng.choice([0, f, max(f - 1, 0), min(f + 1, 255), 254, 255,
                               rng.randint(0, 255)]),
        "b_stage": rng.choice([0, f, min(f + 1, 255), min(f + 2, 255), 255,
                               rng.randint(0, 255)]),
        "alpha_dl": (time + rng.choice(near)) % MOD,
        "rate_dl": (time + rng.choice(near)) % MOD,
        "base": rng.randrange(MOD),
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_law_against_model(seed):
    rng = random.Random(seed)
    dut = Law()
    ev = dut.ev
    results, expect = {}, {}
    batches = []
    for _ in range(40):
        p = random_params(rng, bypass=int(rng.random() < 0.1))
        ops = []
        for _ in range(50):
            time = rng.choice([0, MOD - 1, rng.randrange(MOD)])
            st = random_state(rng, p, time)
            acc = (st["base"] + rng.choice([0, p.byte_count - 1, p.byte_count, p.byte_count + 1,
                                            rng.randrange(MOD)])) % MOD
            ops.append((rng.random() < 0.3, time, st, acc))
        batches.append((p, ops))

    async def tb(ctx):
        cycle = 0
        for bi, (p, ops) in enumerate(batches):
            ctx.set(ev.cfg, p.as_dict())
            sched = [(k, o) for k, o in enumerate(ops)] + [None] * 6
            prev = None
            for item in sched:
                if item is not None:
                    k, (cnp, time, st, acc) = item
                    ctx.set(ev.op, {"valid": 1, "cnp": int(cnp), "qp": k})
                    ctx.set(ev.now, time)
                else:
                    ctx.set(ev.op, {"valid": 0, "cnp": 0, "qp": 0})
                if prev is not None:          # the memories' data, a cycle after the start
                    ctx.set(ev.state, prev[2])
                    ctx.set(ev.acc, prev[3])
                prev = item[1] if item is not None else None
                _, _, w = await ctx.tick().sample(dut.ra.write)
                w = meta_dict(w)
                if w["valid"]:
                    results[(cycle, w["qp"])] = w
                cycle += 1
            # expectations of the batch, in the model
            for k, (cnp, time, st, acc) in enumerate(ops):
                rp = DcqcnRp(p)
                for name, v in st.items():
                    setattr(rp, name, v)
                rp.sent_total = acc
                rec = rp.cnp(time) if cnp else rp.tick(time)
                expect[(bi, k)] = (rec, rp)

    run_sim(dut, testbenches=[tb], deadline_cycles=100000)
    got = sorted(results.items())
    assert len(got) == len(expect) == 40 * 50
    kinds = set()
    for (_, w), (key, (rec, rp)) in zip(got, sorted(expect.items())):
        assert w["qp"] == key[1]
        events = rec["events"] if rec else {k: 0 for k in ("cnp", "alpha", "timer", "byte",
                                                           "init")}
        state = {n: getattr(rp, n) for n in ("rc", "rt", "alpha", "t_stage", "b_stage",
                                              "alpha_dl", "rate_dl", "base")}
        assert (w["events"], w["state"]) == (events, state), f"op {key}"
        kinds |= {k for k, v in events.items() if v}
    assert kinds == {"cnp", "alpha", "timer", "byte", "init"}


def test_select_parameters():
    raises(ValueError, "num_qps", lambda: DcqcnSelect(257))
    raises(ValueError, "fifo_depth must be an integer 2..64, not 65",
           lambda: DcqcnSelect(4, fifo_depth=65))
