"""The responder's decision (:class:`RespDecide`) against its reference model
(:mod:`rocegen.sim.models.responder`): thousands of random requests, states, regions and receive
queues, drawn so that every verdict and every check is reached many times."""

import collections
import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.resp_decide import RespDecide
from rocegen.sim.models.responder import OPCODES, Kind, RespState, Verdict, decide
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.roce import PSN_MASK

RTR, RTS = 2, 3


def draw(rng):
    """A random (header, context, state, region, RNR code, receive head) biased to the edges."""
    pmtu_log2 = rng.choice([8, 10, 12])
    pmtu = 1 << pmtu_log2
    epsn = rng.choice([0, PSN_MASK, rng.getrandbits(24)])
    psn = (epsn + rng.choice([0] * 12 + [1, 2, -1, -2, 1 << 22, -(1 << 22)])) & PSN_MASK
    op = rng.choice(list(OPCODES) * 3 + [0x0C, 0x0D, 0x13, 0x1F])
    info = OPCODES.get(op, (Kind.SEND, "ONLY", False))
    kind_now = rng.choice([Kind.NONE, Kind.NONE, info[0], Kind.SEND, Kind.WRITE])
    n = rng.choice([pmtu, pmtu, 0, 1, pmtu - 1, pmtu + 1, rng.randrange(pmtu + 1),
                    rng.randrange(8192)])
    padcnt = (-n) & 3 if rng.random() < 0.9 else rng.randrange(4)
    base = rng.choice([0, rng.getrandbits(32) & ~0xFFF])
    length = rng.choice([1 << 32, 1 << 20, rng.randrange(1, 1 << 16)])
    if rng.random() < 0.8:
        va = base + rng.randrange(min(length, 1 << 20))
    else:
        va = rng.choice([base - 1, base + length, rng.getrandbits(64)]) & ((1 << 64) - 1)
    dma_len = rng.choice([0, n, n + pmtu * rng.randrange(1, 4), rng.getrandbits(32),
                          max(0, base + length - va)]) & 0xFFFFFFFF
    rkey = rng.getrandbits(32)
    mr = dict(rkey=rkey, base=base, length=length, write=int(rng.random() < 0.95), read=0)
    h = dict(src_ip=0x0A000002 if rng.random() < 0.95 else 0x0A000003, src_port=0xC000, ecn=0,
             bth=dict(opcode=op, se=0, m=0, padcnt=padcnt, tver=0,
                      pkey=0xFFFF if rng.random() < 0.97 else 0x1234, fecn=0, becn=0, resv6=0,
                      dest_qp=256, ack_req=rng.getrandbits(1), resv7=0, psn=psn),
             reth=dict(va=va, rkey=rkey if rng.random() < 0.9 else rng.getrandbits(32),
                       dma_len=dma_len),
             imm=rng.getrandbits(32), hdr_len=rng.choice([40, 44, 56, 60]), length=n)
    ctx = dict(in_table=int(rng.random() < 0.97),
               state=RTS if rng.random() < 0.9 else rng.choice([0, 1, RTR, 4]),
               peer_ip=0x0A000002, pmtu_log2=pmtu_log2)
    remaining = rng.choice([n, n + 1, n - 1, pmtu, rng.getrandbits(32)]) & 0xFFFFFFFF
    st = RespState(epsn=epsn, msn=rng.getrandbits(24), kind=kind_now,
                   nak_pending=rng.random() < 0.2, error=rng.random() < 0.05,
                   addr=rng.getrandbits(32), remaining=remaining,
                   total=(remaining + rng.randrange(1 << 16)) & 0xFFFFFFFF,
                   wr_id=rng.getrandbits(32))
    if rng.random() < 0.5:
        # a well-formed request in the right place of its message (mostly executed)
        kind, pos, _ = info
        n = {"FIRST": pmtu, "MIDDLE": pmtu, "LAST": rng.randrange(1, pmtu + 1),
             "ONLY": rng.randrange(pmtu + 1)}[pos]
        h["length"], h["bth"]["padcnt"] = n, (-n) & 3
        h["bth"]["psn"] = epsn
        h["reth"]["dma_len"] = n + (pmtu * rng.randrange(1, 4) if pos == "FIRST" else 0)
        h["reth"]["rkey"], h["reth"]["va"] = rkey, base + rng.randrange(1 << 12)
        mr["length"] = max(mr["length"], 1 << 16)
        ctx.update(in_table=1, state=RTS)
        remaining = n + (pmtu * rng.randrange(1, 3) if pos == "MIDDLE" else 0)
        st = st.replace(kind=Kind.NONE if pos in ("FIRST", "ONLY") else kind, error=False,
                        remaining=remaining, total=remaining + rng.randrange(1 << 16))
    rq = None
    if rng.random() < 0.8:
        rq = dict(qp=0, wr_id=rng.getrandbits(32), addr=rng.getrandbits(32),
                  length=rng.choice([n, n - 1, n + 100, 1 << 20]) & 0xFFFFFFFF)
    return h, ctx, st, mr, rng.randrange(32), rq


def state_dict(st):
    return dict(epsn=st.epsn, msn=st.msn, kind=int(st.kind), nak_pending=int(st.nak_pending),
                error=int(st.error), addr=st.addr, remaining=st.remaining & 0xFFFFFFFF,
                total=st.total & 0xFFFFFFFF, wr_id=st.wr_id)


@pytest.mark.parametrize("seed", [1, 2])
def test_decide_against_model(seed):
    rng = random.Random(seed)
    cases = [draw(rng) for _ in range(2500)]
    dut = RespDecide()
    verdicts = collections.Counter()

    async def tb(ctx):
        for h, qctx, st, mr, rnr, rq in cases:
            ctx.set(dut.h, h)
            ctx.set(dut.in_table, qctx["in_table"])
            ctx.set(dut.ctx, {"state": qctx["state"], "peer_ip": qctx["peer_ip"],
                              "pmtu_log2": qctx["pmtu_log2"]})
            ctx.set(dut.st, state_dict(st))
            ctx.set(dut.mr, mr)
            ctx.set(dut.rnr_timer, rnr)
            ctx.set(dut.rq_valid, rq is not None)
            ctx.set(dut.rq_head, rq or dict(qp=0, wr_id=0, addr=0, length=0))
            want = decide(h, qctx, st, mr, rnr, rq)
            verdicts[want.verdict] += 1
            where = f"case {h} {qctx} {st} {mr} rq={rq}: model {want}"
            assert int(meta_dict(ctx.get(dut.verdict))) == want.verdict, where
            assert meta_dict(ctx.get(dut.new_st)) == state_dict(want.state), where
            place = meta_dict(ctx.get(dut.place))
            assert place["write"] == want.place["write"], where
            if want.place["write"]:
                assert place == want.place, where
            assert ctx.get(dut.resp_valid) == (want.response is not None), where
            if want.response:
                assert meta_dict(ctx.get(dut.resp)) == want.response, where
            assert ctx.get(dut.rq_pop) == want.rq_pop, where
            assert ctx.get(dut.flush) == want.flush, where
            assert ctx.get(dut.cpl_valid) == (want.completion is not None), where
            if want.completion:
                c, w = meta_dict(ctx.get(dut.cpl)), want.completion
                assert (c["wr_id"], c["opcode"], c["status"], c["length"] & 0xFFFFFFFF) == \
                    (w["wr_id"], {"SEND": 0, "WRITE_IMM": 1}[w["opcode"]], int(w["status"]),
                     w["length"] & 0xFFFFFFFF), where
                assert c["has_imm"] == (w["imm"] is not None), where
                if w["imm"] is not None:
                    assert c["imm"] == w["imm"], where

    run_sim(dut, testbenches=[tb], deadline_cycles=None)
    # every verdict reached, the executed ones often
    assert set(verdicts) == set(Verdict), verdicts
    assert verdicts[Verdict.EXECUTED] > 200, verdicts


def test_elaborates():
    Fragment.get(RespDecide(), None)
