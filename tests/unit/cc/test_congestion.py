"""The reaction point (DCQCN engine and rate limiter joined): packets are charged by their wire
bytes, counted here from the Ethernet, IPv4, UDP and RoCE header sizes of the standards; a
scheduler that starts a packet whenever ``allowed`` says so gets the rate of the reference
model of the DCQCN law, before and after a CNP; a CNP takes a fixed number of cycles to hold
its QP; the bypass lets everything through."""

import random

import pytest

from rocegen.gateware.roce.cc.congestion import ReactionPoint, wire_bytes
from rocegen.gateware.roce.cc.dcqcn import PIPE
from rocegen.gateware.roce.cc.dcqcn_layouts import DCQCN_CONFIG, dcqcn_config
from rocegen.gateware.roce.cc.dcqcn_select import WINDOW
from rocegen.sim.models.cc.dcqcn import DcqcnParams, DcqcnRp
from rocegen.sim.testing.harness import run_sim

CLK = 322_265_625
SLOW = {"timer_us": 2000.0, "alpha_us": 2000.0, "byte_count": 1 << 31}


def test_wire_bytes_count_every_header_and_the_gap():
    # preamble+SFD 8, Ethernet 14, IPv4 20, UDP 8, BTH 12, ICRC 4, FCS 4, gap 12 = 82
    assert wire_bytes(4096) == 4096 + 82
    assert wire_bytes(1021, 3, reth=True) == 1024 + 82 + 16
    assert wire_bytes(0, reth=True, imm=True, vlan=True) == 82 + 16 + 4 + 4


def run(width, num_qps, cycles, *, cnp_at=None, cfg=None, seed=0, greedy=True, clk=CLK,
        line=100):
    """A greedy scheduler on the reaction point: every cycle, the first allowed QP after the
    last one starts a packet (random length and headers; none if not ``greedy``). Returns the
    wire bytes per QP in the halves before and after ``cnp_at`` (a CNP for QP 0), and the
    cycles at which QP 0's ``allowed`` bit fell after the CNP."""
    rng = random.Random(seed)
    dut = ReactionPoint(num_qps, width, clk_hz=clk, line_gbps=line,
                        config=cfg or dcqcn_config(clk, line, **SLOW))
    out = {"bytes": [[0] * num_qps, [0] * num_qps], "fell": None}

    async def tb(ctx):
        last = num_qps - 1
        for t in range(cycles):
            allowed = ctx.get(dut.allowed)
            if out["fell"] is None and cnp_at is not None and t > cnp_at and \
                    not allowed & 1:
                out["fell"] = t - cnp_at
            ctx.set(dut.cnp.valid, t == cnp_at)
            ctx.set(dut.desc.valid, 0)
            for k in range(1, num_qps + 1 if greedy else 1):
                q = (last + k) % num_qps
                if allowed >> q & 1:
                    n = rng.randrange(0, 4097)
                    reth, imm = rng.random() < 0.3, rng.random() < 0.2
                    pad = -n % 4
                    ctx.set(dut.desc.payload, {"qp": q, "length": n, "padcnt": pad,
                                               "has_reth": reth, "has_imm": imm})
                    ctx.set(dut.desc.valid, 1)
                    half = cnp_at is not None and t >= cnp_at
                    out["bytes"][half][q] += n + pad + 82 + 16 * reth + 4 * imm
                    last = q
                    break
            await ctx.tick()
        ctx.set(dut.desc.valid, 0)

    run_sim(dut, testbenches=[tb])
    return out


@pytest.mark.parametrize("width, num_qps, clk, line", [(512, 3, CLK, 100),
                                                      (64, 5, 156_250_000, 10)])
def test_greedy_qps_get_their_model_rate_before_and_after_a_cnp(width, num_qps, clk, line):
    half = 30_000
    out = run(width, num_qps, 2 * half, cnp_at=half, seed=width, clk=clk, line=line)
    p = DcqcnParams(**dcqcn_config(clk, line, **SLOW))
    rp = DcqcnRp(p)
    line = rp.rc / (1 << 20)
    rp.cnp(0)
    cut = rp.rc / (1 << 20)
    slack = 4096 + 200 + 8192           # a packet, a refill, the burst allowance
    before, after = out["bytes"]
    for q in range(num_qps):
        assert abs(before[q] - line * half) <= slack, (q, before[q], line * half)
    assert abs(after[0] - cut * half) <= slack, (after[0], cut * half)
    for q in range(1, num_qps):
        assert abs(after[q] - line * half) <= slack


@pytest.mark.parametrize("num_qps", [1, 8])
def test_a_cnp_holds_its_qp_9_to_14_cycles_later(num_qps):
    # the engine chooses the CNP 2 cycles after it is taken, or up to WINDOW cycles later while
    # an earlier operation on the QP (a visit of its timers) is in the pipeline; the update
    # takes PIPE cycles more, and the limiter holds the QP a cycle after the new rate
    fell = [run(512, num_qps, 240, cnp_at=200 + k, greedy=False)["fell"] for k in range(12)]
    assert min(fell) == 2 + PIPE + 1
    assert max(fell) == 2 + PIPE + 1 + WINDOW


def test_the_bypass_lets_every_packet_through():
    cfg = dcqcn_config(CLK, 100, bypass=True, **SLOW)
    DCQCN_CONFIG.const(cfg)         # a valid configuration
    out = run(512, 2, 4000, cnp_at=1000, cfg=cfg, seed=3)
    # a packet every cycle, shared by the two QPs: far beyond the line
    total = sum(out["bytes"][0]) + sum(out["bytes"][1])
    assert total > 4000 * 1000
    assert out["fell"] is None
