"""DCQCN's reaction point (:class:`DcqcnEngine`) against the reference model
(:class:`rocegen.sim.models.cc.dcqcn.DcqcnTable`), event by event: random CNPs (bursts of one QP,
floods that overflow the queue), random traffic on the byte counters, configurations changed at
run time (bypass on and off among them). Every update (the cycle, the QP, RC, RT, alpha, the
counts and the events) is the model's, and so are the drops, the rate writes and the rates read
at the end; two clocks and lines (322 MHz with 100G, 156.25 MHz with 10G) and 5 or 256 QPs.
Then the latency of a CNP, the units and defaults, and parameter errors."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.cc.dcqcn import DcqcnEngine
from rocegen.gateware.roce.cc.dcqcn_layouts import check_dcqcn_config, dcqcn_config
from rocegen.sim.models.cc.dcqcn import ALPHA_ONE, DcqcnParams, DcqcnTable, rate_units
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from tests.tiers import full

CLOCKS = {"100g": (322_265_625, 100), "10g": (156_250_000, 10)}


def random_params(clk_hz, line_gbps, rng, num_qps):
    """Short periods and a small byte counter, so that every kind of event happens often."""
    line = rate_units(line_gbps * 1e9, clk_hz)
    visit = max(num_qps, 5)
    return DcqcnParams(
        bypass=0, g_log2=rng.choice([2, 4, 8]), alpha_init=rng.choice([ALPHA_ONE, 40000]),
        alpha_period=visit * rng.randint(3, 8), rate_period=visit * rng.randint(2, 5),
        byte_count=rng.choice([3000, 9000, 20000]), fast_steps=rng.choice([0, 2, 5]),
        r_ai=line // rng.choice([50, 200]), r_hai=line // rng.choice([20, 100]),
        min_rate=line // rng.choice([10, 1000]), line_rate=line)


def classify(records, params_at):
    """Counts of the kinds of increase in the model's records (``params_at(cycle)``: the
    parameters of that update)."""
    kinds = {"fast": 0, "additive": 0, "hyper": 0}
    for cyc, _, r in records:
        if r["events"]["timer"] or r["events"]["byte"]:
            f = params_at(cyc).fast_steps
            lo, hi = sorted((r["t_stage"], r["b_stage"]))
            kinds["fast" if hi <= f else "hyper" if lo > f else "additive"] += 1
    return kinds


def run(num_qps, clock, *, cycles, seed, p_cnp=0.02, p_flood=0.002, p_sent=0.5, changes=3,
        active=None):
    rng = random.Random(seed)
    clk_hz, gbps = CLOCKS[clock]
    p0 = random_params(clk_hz, gbps, rng, num_qps)
    active = active or list(range(num_qps))
    outside = [q for q in (num_qps, 255) if num_qps <= q < 256]
    # configurations at run time: new parameters, and bypass on for a while then off
    cfgs = {}
    for _ in range(changes):
        c = rng.randrange(cycles // 8, cycles - 100)
        cfgs[c] = random_params(clk_hz, gbps, rng, num_qps)
    c = rng.randrange(cycles // 4, cycles // 2)
    cfgs[c] = DcqcnParams(**{**p0.as_dict(), "bypass": 1})
    cfgs[c + rng.randint(1, 8) * num_qps] = p0
    dut = DcqcnEngine(num_qps, config=p0.as_dict(), fifo_depth=4)
    model = DcqcnTable(num_qps, p0, fifo_depth=4)
    got, drops, in_force = [], [], [(0, p0)]

    tail = 40 + num_qps + 1
    reads = []                      # (cycle, QP, RC read)

    async def tb(ctx):
        burst, flood, flood_qp = [], 0, 0
        for t in range(cycles + tail):
            live = t < cycles
            cnp = None
            if live and flood:
                flood -= 1
                cnp = flood_qp
            elif live and (burst or rng.random() < p_cnp):
                if not burst and rng.random() < 0.3:
                    burst = [rng.choice(active)] * rng.randint(2, 4)
                cnp = burst.pop() if burst else rng.choice(active + outside)
            if live and not flood and rng.random() < p_flood:
                flood, flood_qp = rng.randint(6, 12), rng.choice(active)
            sent = None
            if live and rng.random() < p_sent:
                sent = (rng.choice(active + [255]), rng.choice([64, 1024, 4096, 65535]))
            cfg = cfgs.get(t) if live else None
            ctx.set(dut.cnp.valid, cnp is not None)
            ctx.set(dut.cnp.payload.qp, cnp or 0)
            ctx.set(dut.sent.valid, sent is not None)
            ctx.set(dut.sent.payload, {"qp": sent[0], "bytes": sent[1]} if sent else
                    {"qp": 0, "bytes": 0})
            ctx.set(dut.cfg.valid, cfg is not None)
            if cfg is not None:
                ctx.set(dut.cfg.payload, cfg.as_dict())
                in_force.append((t + DcqcnTable.CFG_GAP, cfg))
            rd = (t - cycles) % num_qps     # the read port: every QP's RC, in the tail
            ctx.set(dut.rd_qp, rd)
            model.step(t, cnp=cnp, sent=sent, cfg=cfg)
            _, _, uv, up, rv, rp, dr, rate = await ctx.tick().sample(
                dut.update.valid, dut.update.payload, dut.rate_w.valid, dut.rate_w.payload,
                dut.cnp_dropped, dut.rd_rate)
            assert uv or not rv, t
            if uv:
                u = meta_dict(up)
                e = u["events"]
                assert rv == bool(e["cnp"] or e["timer"] or e["byte"] or e["init"]), t
                if rv:
                    assert meta_dict(rp) == {"qp": u["qp"], "rate": u["rc"]}, t
                q = u.pop("qp")
                got.append((t, q, u))
            if dr:
                drops.append(t)
            if t > cycles:
                reads.append((t, (rd - 1) % num_qps, rate))

    run_sim(dut, testbenches=[tb], deadline_cycles=cycles + tail + 100)
    want = [u for u in model.updates if u[0] < cycles + tail]
    for k, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"update {k}: block {g}, model {w}"
    assert len(got) == len(want), (len(got), len(want))
    assert drops == [t + 1 for t in model.dropped]
    for t, q, rate in reads:        # RC as written up to the cycle before (the read's address)
        rc = [r["rc"] for c, x, r in want if x == q and c <= t - 1]
        assert rate == (rc[-1] if rc else p0.line_rate), f"cycle {t}: QP {q} read {rate}"
    assert len({q for _, q, _ in reads}) == num_qps

    def params_at(cyc):
        return max((x for x in in_force if x[0] <= cyc - DcqcnTable.PIPE),
                   key=lambda x: x[0])[1]
    counts = {k: sum(1 for _, _, r in got if r["events"][k]) for k in
              ("cnp", "alpha", "timer", "byte", "init")}
    counts.update(classify(got, params_at))
    counts["dropped"] = len(drops)
    counts["rc_changes"] = sum(1 for a, b in zip(got, got[1:]) if a[2]["rc"] != b[2]["rc"])
    return counts


@pytest.mark.parametrize("num_qps, clock, cycles, seed", [
    (5, "100g", 12000, 1), full(5, "10g", 12000, 2), full(256, "100g", 16000, 3),
    (256, "10g", 16000, 4)])
def test_against_model(num_qps, clock, cycles, seed):
    active = None if num_qps < 8 else [0, 1, 2, 100, 254, 255]
    n = run(num_qps, clock, cycles=cycles, seed=seed, active=active,
            p_cnp=0.01 if num_qps < 8 else 0.004)
    assert n["cnp"] > 30 and n["alpha"] > 30 and n["timer"] > 30 and n["byte"] > 10, n
    assert n["init"] >= num_qps and n["dropped"] > 0, n
    assert n["fast"] > 10 and n["additive"] > 5 and n["rc_changes"] > 100, n


def test_hyper_increase_and_many_configurations():
    """Few CNPs, a byte counter that fills quickly: the counts pass F and hyper steps happen;
    eight configurations at run time."""
    n = run(3, "100g", cycles=15000, seed=11, p_cnp=0.001, p_flood=0, p_sent=0.9, changes=8)
    assert n["hyper"] > 10 and n["additive"] > 5 and n["cnp"] > 5, n


def test_cnp_latency():
    """A CNP taken in cycle t for an idle QP: its update in t + 8 (queue 2, pipeline 6), RC
    halved with alpha = 1 and RT the old RC. (8 QPs, visited in turn from cycle 0: the CNP of
    QP 5 taken in cycle 10 is chosen in 12, QP 5 was last chosen in cycle 5.)"""
    cfg = dcqcn_config(322_265_625, 100)
    dut = DcqcnEngine(8, config=cfg)
    line = cfg["line_rate"]
    seen = []

    async def tb(ctx):
        await ctx.tick().repeat(10)
        ctx.set(dut.cnp.payload.qp, 5)
        ctx.set(dut.cnp.valid, 1)
        for t in range(12):
            _, _, v, p = await ctx.tick().sample(dut.update.valid, dut.update.payload)
            ctx.set(dut.cnp.valid, 0)
            if v:
                seen.append((t, meta_dict(p)))

    run_sim(dut, testbenches=[tb], deadline_cycles=100)
    a1 = ALPHA_ONE - ALPHA_ONE // 256 + ALPHA_ONE // 256
    assert seen == [(8, {"qp": 5, "rc": line - line // 2, "rt": line, "alpha": a1,
                         "t_stage": 0, "b_stage": 0,
                         "events": {"cnp": 1, "alpha": 0, "timer": 0, "byte": 0, "init": 0}})]


def test_units_and_defaults():
    # 100 Gb/s at 322.265625 MHz: 12.5e9 / 322.265625e6 = 38.7878... bytes per cycle, Q7.20
    assert dcqcn_config(322_265_625, 100)["line_rate"] == round(38.78787878787879 * 2**20)
    assert dcqcn_config(156_250_000, 10)["line_rate"] == 8 << 20
    c = dcqcn_config(322_265_625, 100)
    assert c["alpha_period"] == c["rate_period"] == 17725      # 55 us
    assert c["g_log2"] == 8 and c["fast_steps"] == 5 and c["byte_count"] == 10 * 2**20
    assert c["alpha_init"] == 65536 and c["bypass"] == 0
    assert c["r_ai"] == round(40e6 / 8 / 322_265_625 * 2**20)
    assert c["min_rate"] == round(100e6 / 8 / 322_265_625 * 2**20)
    m = DcqcnParams.from_physical(322_265_625, 100)
    assert m.as_dict() == c
    dut = DcqcnEngine(8)
    Fragment.get(dut, None)
    assert dut.config == c


def test_parameter_errors():
    good = dcqcn_config(322_265_625, 100)
    raises(ValueError, "num_qps", lambda: DcqcnEngine(0))
    raises(TypeError, "num_qps", lambda: DcqcnEngine(2.0))
    raises(ValueError, r"config\['g_log2'\] must be 0..16, not 17",
           lambda: DcqcnEngine(4, config={**good, "g_log2": 17}))
    raises(ValueError, r"config\['alpha_period'\] must be 1..16777215, not 0",
           lambda: DcqcnEngine(4, config={**good, "alpha_period": 0}))
    raises(TypeError, r"config\['r_ai'\] must be an integer",
           lambda: DcqcnEngine(4, config={**good, "r_ai": 1.5}))
    raises(ValueError, "min_rate.*must not exceed",
           lambda: DcqcnEngine(4, config={**good, "min_rate": good["line_rate"] + 1}))
    raises(ValueError, "missing line_rate",
           lambda: check_dcqcn_config({k: v for k, v in good.items() if k != "line_rate"}))
    raises(ValueError, "fifo_depth must be an integer 2..64",
           lambda: DcqcnEngine(4, fifo_depth=1))
    raises(TypeError, "unknown DCQCN parameter", lambda: dcqcn_config(322e6, 100, k_us=3))
    raises(ValueError, "line_gbps must be a positive number", lambda: dcqcn_config(322e6, 0))
    raises(ValueError, r"the converted parameters\['line_rate'\]",
           lambda: dcqcn_config(1e6, 100))           # 12,500 bytes per cycle: too fast
    with pytest.raises(ValueError, match="g_log2 must be an integer 0..16"):
        DcqcnParams(**{**good, "g_log2": 20})
