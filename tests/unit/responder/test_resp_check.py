"""The responder's checks (:class:`RespCheck`, on the facts of :class:`RespPrecheck`) against
their reference model (:mod:`rocegen.sim.models.responder.responder`): the verdict, whether an INVALID one
comes from the length check, and whether the request is from its QP's peer, on random requests,
states, regions and receive queues drawn to reach every verdict and every check
(``test_resp_decide.draw``); and the facts alone against values worked out in Python, for every
opcode and every PMTU code."""

import collections
import random

import pytest

from rocegen.gateware.roce.responder.resp_precheck import PMTU_CODES, RespPrecheck
from rocegen.sim.models.responder.responder import FROM_PEER, OPCODES, Verdict, decide, read_fault
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import run_sim
from tests.unit.responder.test_resp_decide import Chain, apply_case, draw


@pytest.mark.parametrize("seed", [11, 12])
def test_verdicts_against_model(seed):
    rng = random.Random(seed)
    cases = [draw(rng) for _ in range(2500)]
    top = Chain(decide=False)
    dut = top.check
    seen = collections.Counter()

    async def tb(ctx):
        for case in cases:
            apply_case(ctx, top, case)
            want = decide(*case[:6], rd_full=case[6])
            seen[(want.verdict, want.length_fault)] += 1
            where = f"case {case}: model {want}"
            assert ctx.get(dut.verdict).value == want.verdict, where
            assert ctx.get(dut.length_fault) == want.length_fault, where
            assert ctx.get(dut.from_peer) == (want.verdict in FROM_PEER), where
            h, qctx, _, mr, _, _, rd_full = case
            if h["bth"]["opcode"] == 0x0C:
                ok = read_fault(h, qctx, mr, rd_full) is None
                assert ctx.get(dut.rd_ok) == ok, where
                seen[("rd_ok", ok)] += 1

    run_sim(top, testbenches=[tb], deadline_cycles=None)
    assert {v for v, _ in seen} >= set(Verdict), seen
    assert seen[("rd_ok", True)] > 50 and seen[("rd_ok", False)] > 50, seen
    # INVALID by the length check, and by the checks before it
    assert seen[(Verdict.INVALID, True)] > 20 and seen[(Verdict.INVALID, False)] > 20, seen


def test_facts():
    """Every opcode, lengths around every PMTU, right and wrong PadCnts, RETHs."""
    rng = random.Random(3)
    dut = RespPrecheck()
    cases = []
    for op in list(range(0x00, 0x0D)) + [0x13, 0x1F, 0x64]:
        for _ in range(40):
            j = rng.randrange(PMTU_CODES)
            n = max(0, min(8191, rng.choice([0, 1, 4, (1 << j) - 1, 1 << j, (1 << j) + 4,
                                             rng.randrange(8192)])))
            pad = -n & 3 if rng.random() < 0.8 else rng.randrange(4)
            va, dma = rng.getrandbits(64), rng.choice([0, n, n + 4, max(0, n - 4),
                                                       rng.getrandbits(32)])
            pkey = rng.choice([0xFFFF, 0x7FFF, 0x7FFE, 0x8000])
            cases.append((op, n, pad, va, dma, pkey))

    async def tb(ctx):
        for op, n, pad, va, dma, pkey in cases:
            ctx.set(dut.h, {"bth": {"opcode": op, "padcnt": pad, "pkey": pkey},
                            "reth": {"va": va, "dma_len": dma}, "length": n})
            f = meta_dict(ctx.get(dut.facts))
            kind, pos, imm = OPCODES.get(op, (None, None, False))
            want = {"send": int(kind is not None and kind.name == "SEND"),
                    "write": int(kind is not None and kind.name == "WRITE"),
                    "pkey_ok": int(pkey & 0x7FFF == 0x7FFF), "va_end": va + dma,
                    "dma_zero": int(dma == 0), "read": int(op == 0x0C),
                    "read_len_bad": int(n != 0 or pad != 0 or dma > 1 << 31)}
            assert {k: f[k] for k in want} == want, (op, n, f)
            if kind is None:
                continue
            assert (f["first"], f["middle"], f["last"], f["only"], f["imm"]) == \
                (pos == "FIRST", pos == "MIDDLE", pos == "LAST", pos == "ONLY", imm)
            assert f["needs_rq"] == ((kind.name == "SEND" and pos in ("FIRST", "ONLY")) or
                                     (kind.name == "WRITE" and imm))
            if kind.name == "WRITE" and pos in ("FIRST", "ONLY"):
                assert f["write_len_bad"] == (n != dma if pos == "ONLY" else n >= dma)
            for j in range(PMTU_CODES):
                pmtu = (1 << j) & 0x1FFF
                ok = {"FIRST": not pad and n == pmtu, "MIDDLE": not pad and n == pmtu,
                      "LAST": 0 < n <= pmtu, "ONLY": n <= pmtu}[pos] and pad == -n & 3
                assert f["seg_ok"] >> j & 1 == ok, (op, n, pad, j)

    run_sim(dut, testbenches=[tb], deadline_cycles=None)
