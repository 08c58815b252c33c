"""Traffic generator: work-request fields, spacing in cycles, remote offsets modulo the window,
completion counting, benchmark cycle count and refusal of a new run while one is active."""

import random

import pytest
from amaranth.back import rtlil

from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG, TrafficGen
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode, WrSource
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.pattern import generator_address
from rocegen.wire.verbs import SEND_VERBS

#: The send opcodes (READ is the scheduler's business, not this block's).
SEND_OPS = tuple(WrOpcode[name] for name in SEND_VERBS)

NOT_OK = [s.value for s in CplStatus if s != CplStatus.OK]


def config(count, length, spacing=0, window=0, qp=5, opcode=WrOpcode.WRITE, imm=0x12345678):
    return {"qp": qp, "opcode": opcode.value, "length": length, "count": count,
            "spacing": spacing, "imm": imm, "window": window}


def expected_offset(s, cfg):
    return (s * cfg["length"]) % cfg["window"] if cfg["window"] else 0


def run_generator(configs, *, backpressure=0.0, max_delay=20, foreign=0.1, seed=0):
    """Offer ``configs`` one after another (each offered from the cycle the previous one was taken)
    and answer every work request in order after a random delay; returns per-run records."""
    rng = random.Random(seed)
    dut = TrafficGen()
    runs = []

    async def bench(ctx):
        queue = list(configs)
        run = None
        cpl_due = []            # (cycle, wr_id, status), in posting order
        cycle = 0
        while True:
            offering = bool(queue)
            if offering:
                ctx.set(dut.start.payload, queue[0])
            ctx.set(dut.start.valid, offering)
            wr_ready = not (backpressure and rng.random() < backpressure)
            ctx.set(dut.wr.ready, wr_ready)
            cpl = None
            if cpl_due and cpl_due[0][0] <= cycle:
                cpl = cpl_due.pop(0)
                ctx.set(dut.cpl.payload, {"wr_id": cpl[1], "qp": 0, "status": cpl[2],
                                          "src": WrSource.GENERATOR.value})
                ctx.set(dut.cpl.valid, 1)
            elif foreign and rng.random() < foreign:
                # a completion meant for someone else: ignored
                ctx.set(dut.cpl.payload, {"wr_id": 0, "qp": 0, "status": 0,
                                          "src": rng.choice([WrSource.USER, WrSource.STREAM]).value})
                ctx.set(dut.cpl.valid, 1)
            else:
                ctx.set(dut.cpl.valid, 0)
            (_, _, s_ready, busy, done, w_valid, w_pay, c_ready, *status) = await ctx.tick().sample(
                dut.start.ready, dut.busy, dut.done, dut.wr.valid, dut.wr.payload, dut.cpl.ready,
                dut.posted, dut.completed_ok, dut.completed_err, dut.cycles)
            assert c_ready, "completions must always be accepted"
            assert not (busy and s_ready), f"cycle {cycle}: start accepted while busy"
            if run is not None:
                if done:
                    run["done"].append(cycle)
                if w_valid and wr_ready:
                    s = len(run["wr"])
                    run["wr"].append((cycle, w_pay))
                    status = 0 if rng.random() < 0.8 else rng.choice(NOT_OK)
                    run["status"].append(status)
                    due = cycle + 1 + rng.randrange(max_delay + 1)
                    if cpl_due:
                        due = max(due, cpl_due[-1][0] + 1)
                    cpl_due.append((due, s, status))
                if cpl is not None:
                    run["cpl"].append(cycle)
                if run["busy_end"] is None and not busy and run["started"] < cycle:
                    run["busy_end"] = cycle
                    run["posted"], run["ok"], run["err"], run["cycles"] = status
            if offering and s_ready:
                run = {"cfg": queue.pop(0), "started": cycle, "wr": [], "status": [], "cpl": [],
                       "done": [], "busy_end": None}
                runs.append(run)
            cycle += 1
            if not queue and run is not None and run["busy_end"] is not None:
                break

    run_sim(dut, testbenches=[bench], deadline_cycles=200_000)
    return runs


def check_run(run, *, exact_spacing):
    cfg = run["cfg"]
    n = cfg["count"]
    assert len(run["wr"]) == n
    for s, (_, p) in enumerate(run["wr"]):
        w = p.wr
        assert p.src == WrSource.GENERATOR
        assert w.wr_id == s
        assert w.local_addr == generator_address(s)
        assert w.remote_offset == expected_offset(s, cfg), f"message {s}"
        assert (w.qp, w.opcode.value, w.length, w.imm) == (cfg["qp"], cfg["opcode"], cfg["length"],
                                                            cfg["imm"])
    cycles = [c for c, _ in run["wr"]]
    if exact_spacing and n:
        # the first work request: 2 cycles after the start, 33 when a remainder is computed
        reduce = 0 < cfg["window"] <= cfg["length"]
        assert cycles[0] - run["started"] == (33 if reduce else 2)
    gap = max(cfg["spacing"], 1)
    for a, b in zip(cycles, cycles[1:]):
        assert b - a >= gap
        if exact_spacing:
            assert b - a == gap
    assert run["posted"] == n
    assert run["ok"] == sum(1 for s in run["status"] if s == 0)
    assert run["err"] == n - run["ok"]
    assert len(run["cpl"]) == n
    assert len(run["done"]) == 1
    assert run["busy_end"] == run["done"][0] + 1
    if n:
        assert run["cycles"] == run["cpl"][-1] - cycles[0]
        assert run["done"][0] >= run["cpl"][-1]
    else:
        assert run["cycles"] == 0


CASES = {
    "back_to_back": [config(24, 1000, spacing=0, window=4096)],
    "spaced": [config(12, 5000, spacing=7, window=4096, opcode=WrOpcode.SEND_IMM)],
    "no_window": [config(10, 64, spacing=3, window=0, opcode=WrOpcode.WRITE_IMM)],
    "window_equals_length": [config(6, 4096, spacing=1, window=4096)],
    "huge_length": [config(8, (1 << 31) - 1, window=(1 << 32) - 1),
                    config(8, (1 << 31) - 1, window=1000003),
                    config(5, 12345, window=1)],
    "empty_run": [config(0, 100, window=100), config(3, 100, spacing=2, window=250, opcode=WrOpcode.SEND)],
}


@pytest.mark.parametrize("name", CASES)
def test_sequences_without_backpressure(name):
    runs = run_generator(CASES[name], backpressure=0.0, seed=len(name))
    assert len(runs) == len(CASES[name])
    for run in runs:
        check_run(run, exact_spacing=True)


@pytest.mark.parametrize("seed", range(3))
def test_random_runs_with_backpressure(seed):
    rng = random.Random(100 + seed)
    configs = []
    for _ in range(4):
        length = rng.choice([0, 1, 63, 4096, rng.randrange(1 << 31)])
        window = rng.choice([0, 1, length, length + 1, rng.randrange(1 << 32), rng.randrange(1, 5000)])
        configs.append(config(rng.randrange(1, 16), length, spacing=rng.choice([0, 1, 2, 9]),
                              window=window, qp=rng.randrange(256),
                              opcode=rng.choice(SEND_OPS), imm=rng.getrandbits(32)))
    runs = run_generator(configs, backpressure=0.4, max_delay=40, seed=seed)
    assert len(runs) == len(configs)
    for run in runs:
        check_run(run, exact_spacing=False)


def test_spacing_is_measured_from_acceptance():
    # with a stalled wr port the next request still waits the whole spacing after acceptance
    runs = run_generator([config(10, 256, spacing=5, window=1024)], backpressure=0.5, seed=7)
    cycles = [c for c, _ in runs[0]["wr"]]
    assert any(b - a > 5 for a, b in zip(cycles, cycles[1:]))
    check_run(runs[0], exact_spacing=False)


def test_config_layout_and_ports():
    assert set(GEN_CONFIG.members) == {"qp", "opcode", "length", "count", "spacing", "imm", "window"}
    assert GEN_CONFIG.size == 8 + 3 + 31 + 32 * 4           # (the opcode: 3 bits)
    dut = TrafficGen()
    assert dut.cycles.shape().width == 48
    assert dut.start.payload.shape() == GEN_CONFIG
    assert "cycles" in rtlil.convert(dut)
