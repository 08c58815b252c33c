"""The responder's decision, :class:`RespPrecheck` (the headers' facts), :class:`RespCheck` (the
verdict) and :class:`RespDecide` (the actions of the verdict) chained as the engine chains them
a cycle apart each, against their reference model
(:mod:`rocegen.sim.models.responder.responder`): thousands of random requests, states, regions and receive
queues, drawn so that every verdict and every check is reached many times, with and without
ACKs by count (``ack_every``); RDMA READ requests among them (good, bad R_Keys, out of their
region, read access denied, zero length, payload or pad, PMTUs a READ cannot use, duplicates,
the READ queue full)."""

import collections
import random

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module

from rocegen.gateware.roce.responder.resp_check import RespCheck, psn_place
from rocegen.gateware.roce.responder.resp_decide import RespDecide
from rocegen.gateware.roce.responder.resp_precheck import RespPrecheck
from rocegen.sim.models.responder.responder import (
    FROM_PEER,
    OPCODES,
    READ_MAX,
    Kind,
    RespState,
    Verdict,
    decide,
)
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.roce import PSN_MASK
from tests.tiers import full

RTR, RTS = 2, 3


READ = 0x0C


def draw(rng, ack_every=0):
    """A random (header, context, state, region, RNR code, receive head, READ queue full)
    biased to the edges; the QP's count of requests unanswered below ``ack_every`` (0 without
    it)."""
    pmtu_log2 = rng.choice([8, 10, 12] * 8 + [7])
    pmtu = 1 << pmtu_log2
    epsn = rng.choice([0, PSN_MASK, rng.getrandbits(24)])
    psn = (epsn + rng.choice([0] * 12 + [1, 2, -1, -2, 1 << 22, -(1 << 22)])) & PSN_MASK
    op = rng.choice(list(OPCODES) * 3 + [READ] * 12 + [0x0D, 0x13, 0x1F])
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
    mr = dict(rkey=rkey, base=base, length=length, write=int(rng.random() < 0.95),
              read=int(rng.random() < 0.9))
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
                   wr_id=rng.getrandbits(32),
                   unacked=rng.choice([0, ack_every - 1, rng.randrange(ack_every)])
                   if ack_every else 0)
    if op == READ and rng.random() < 0.7:
        # a READ mostly good: at ePSN or a duplicate, no payload, inside its region
        h["length"] = n = 0 if rng.random() < 0.9 else rng.choice([4, 1])
        h["bth"]["padcnt"] = 0 if rng.random() < 0.95 else 3
        h["bth"]["psn"] = (epsn - rng.choice([0, 0, 0, 1, 5])) & PSN_MASK
        mr["length"] = max(mr["length"], 1 << 17)
        dma_len = rng.choice([0, 1, pmtu - 1, pmtu, pmtu + 1, 1 << 16, rng.randrange(1 << 17),
                              READ_MAX, READ_MAX + 1])
        va = base + rng.randrange(1 << 16) if rng.random() < 0.9 else base + mr["length"] - 1
        h["reth"] = dict(va=va, rkey=rkey if rng.random() < 0.9 else rkey ^ 1, dma_len=dma_len)
        if rng.random() < 0.3:
            mr["length"] = 1 << 32
        ctx.update(in_table=1, state=RTS)
        st = st.replace(kind=Kind.NONE if rng.random() < 0.9 else st.kind, error=False)
    elif rng.random() < 0.5:
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
    return h, ctx, st, mr, rng.randrange(32), rq, rng.random() < 0.1


class Chain(Elaboratable):
    """:class:`RespPrecheck`'s facts and :func:`psn_place` into :class:`RespCheck` and, with
    ``decide``, :class:`RespCheck`'s verdict into :class:`RespDecide`, combinationally, with one
    header input (``pre.h``) for all."""

    def __init__(self, ack_every=0, *, decide=True, atomics=False):
        self.pre, self.check = RespPrecheck(atomics=atomics), RespCheck()
        self.decide = RespDecide(ack_every=ack_every) if decide else None

    def elaborate(self, platform):
        m = Module()
        pre, chk, dec = self.pre, self.check, self.decide
        m.submodules.pre, m.submodules.check = pre, chk
        ahead, behind = psn_place(m, pre.h.bth.psn, chk.st.epsn)
        m.d.comb += [chk.h.eq(pre.h), chk.f.eq(pre.facts), chk.ahead.eq(ahead),
                     chk.behind.eq(behind)]
        if dec is not None:
            m.submodules.decide = dec
            m.d.comb += [dec.h.eq(pre.h), dec.f.eq(pre.facts),
                         dec.verdict.eq(chk.verdict), dec.length_fault.eq(chk.length_fault),
                         dec.rd_ok.eq(chk.rd_ok), dec.pmtu_log2.eq(chk.ctx.pmtu_log2)]
        return m


def apply_case(ctx, top, case):
    """The inputs of a case (:func:`draw`) on a :class:`Chain`."""
    h, qctx, st, mr, rnr, rq, rd_full = case
    chk, dec = top.check, top.decide
    rq_head = rq or dict(qp=0, wr_id=0, addr=0, length=0)
    ctx.set(top.pre.h, h)
    ctx.set(chk.in_table, qctx["in_table"])
    ctx.set(chk.ctx, {"state": qctx["state"], "peer_ip": qctx["peer_ip"],
                      "pmtu_log2": qctx["pmtu_log2"]})
    ctx.set(chk.st, state_dict(st))
    ctx.set(chk.mr, mr)
    ctx.set(chk.rq_valid, rq is not None)
    ctx.set(chk.rq_head, rq_head)
    ctx.set(chk.rd_full, rd_full)
    if dec is not None:
        ctx.set(dec.st, state_dict(st))
        ctx.set(dec.rnr_timer, rnr)
        ctx.set(dec.rq_head, rq_head)


def state_dict(st):
    return dict(epsn=st.epsn, msn=st.msn, kind=int(st.kind), nak_pending=int(st.nak_pending),
                error=int(st.error), addr=st.addr, remaining=st.remaining & 0xFFFFFFFF,
                total=st.total & 0xFFFFFFFF, wr_id=st.wr_id, unacked=st.unacked)


@pytest.mark.parametrize("seed, ack_every", [(1, 0), full(2, 0), full(3, 1), (4, 3), (5, 255)])
def test_decide_against_model(seed, ack_every):
    rng = random.Random(seed)
    cases = [draw(rng, ack_every) for _ in range(2500)]
    top = Chain(ack_every)
    chk, dut = top.check, top.decide
    verdicts = collections.Counter()
    acks = collections.Counter()        # executed requests ACKed: (AckReq, by count)
    reads = collections.Counter()       # READs: (verdict, queued, zero length)

    async def tb(ctx):
        for case in cases:
            h, qctx, st, mr, rnr, rq, rd_full = case
            apply_case(ctx, top, case)
            want = decide(h, qctx, st, mr, rnr, rq, ack_every, rd_full=rd_full)
            verdicts[want.verdict] += 1
            if h["bth"]["opcode"] == READ:
                reads[(want.verdict, want.read is not None,
                       h["reth"]["dma_len"] == 0)] += 1
            if want.verdict == Verdict.EXECUTED and want.response:
                acks[(h["bth"]["ack_req"], st.unacked + 1 >= ack_every > 0)] += 1
            where = f"case {h} {qctx} {st} {mr} rq={rq}: model {want}"
            assert int(meta_dict(ctx.get(chk.verdict))) == want.verdict, where
            assert meta_dict(ctx.get(dut.new_st)) == state_dict(want.state), where
            place = meta_dict(ctx.get(dut.place))
            assert place["write"] == want.place["write"], where
            if want.place["write"]:
                assert place == want.place, where
            assert ctx.get(dut.resp_valid) == (want.response is not None), where
            assert ctx.get(chk.from_peer) == (want.verdict in FROM_PEER), where
            if want.response:
                assert meta_dict(ctx.get(dut.resp)) == want.response, where
            assert ctx.get(dut.rd_valid) == (want.read is not None), where
            if want.read:
                assert meta_dict(ctx.get(dut.rd)) == want.read, where
                assert meta_dict(ctx.get(dut.rd_work))["op"] == 0, where
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

    run_sim(top, testbenches=[tb], deadline_cycles=None)
    # every verdict reached, the executed ones often
    assert set(verdicts) == set(Verdict), verdicts
    assert verdicts[Verdict.EXECUTED] > 200, verdicts
    # ACKs without AckReq only by count, and then some
    assert bool(acks[(0, True)]) == (ack_every > 0) and not acks[(0, False)], acks
    # READs executed (of zero length too), replayed, dropped as duplicates, refused
    for key in [(Verdict.EXECUTED, True, False), (Verdict.EXECUTED, True, True),
                (Verdict.DUPLICATE, True, False), (Verdict.DUPLICATE, False, False),
                (Verdict.ACCESS, False, False), (Verdict.INVALID, False, False)]:
        assert reads[key] > 5, (key, reads)


ATOMIC_CODES = (0x13, 0x14)


def draw_atomic(rng, ack_every=0):
    """A random case (:func:`draw`) made an atomic request, mostly a good one (at ePSN or a
    duplicate, no payload, an aligned target inside a readable and writable region), with the
    QP's result for its PSN or none: the case, the model's headers (``atomic``: the AtomicETH)
    and the result (None or the original value)."""
    h, ctx, st, mr, rnr, rq, rd_full = draw(rng, ack_every)
    op = rng.choice(ATOMIC_CODES)
    base = mr["base"] & ~7
    mr.update(base=base, length=max(mr["length"], 1 << 12), write=int(rng.random() < 0.9),
              read=int(rng.random() < 0.9))
    va = base + 8 * rng.randrange(1 << 9)
    va = rng.choice([va] * 12 + [va + rng.randrange(1, 8), base - 8, base + mr["length"] - 4,
                                 base + mr["length"]]) & ((1 << 64) - 1)
    rkey = mr["rkey"] if rng.random() < 0.9 else mr["rkey"] ^ 0x100
    h["bth"]["opcode"] = op
    h["bth"]["psn"] = (st.epsn - rng.choice([0] * 6 + [1, 3] + [rng.randrange(-2, 3)])) & PSN_MASK
    h["length"] = 0 if rng.random() < 0.93 else rng.choice([4, 8])
    h["bth"]["padcnt"] = 0 if rng.random() < 0.95 else 2
    h["hdr_len"] = 68
    h["imm"] = 0
    operands = dict(swap_add=rng.getrandbits(64), compare=rng.getrandbits(64))
    model_h = dict(h, atomic=dict(va=va, rkey=rkey, **operands))
    gate_h = dict(h, reth=dict(va=va, rkey=rkey, dma_len=8), atomic=operands)
    if rng.random() < 0.8:
        ctx.update(in_table=1, state=RTS)
        st = st.replace(error=False, kind=Kind.NONE if rng.random() < 0.9 else Kind.SEND)
    result = rng.getrandbits(64) if rng.random() < 0.6 else None
    return (gate_h, ctx, st, mr, rnr, rq, rd_full), model_h, result


@pytest.mark.parametrize("seed", [1, full(2)])
def test_decide_atomics_against_model(seed):
    """Atomic requests (and the other requests, atomics refused or not) through the chain with
    atomics, against the model: verdicts, state, the queued job with its operation, operands
    and a duplicate's original value."""
    rng = random.Random(seed)
    cases = []
    for _ in range(2000):
        case = draw(rng)
        if rng.random() < 0.6 or case[0]["bth"]["opcode"] in ATOMIC_CODES:
            cases.append(draw_atomic(rng))
        else:
            cases.append((case, case[0], None))
    top = Chain(atomics=True)
    chk, dut = top.check, top.decide
    seen = collections.Counter()

    async def tb(ctx):
        for case, model_h, result in cases:
            apply_case(ctx, top, case)
            ctx.set(chk.res_hit, result is not None)
            ctx.set(dut.res_orig, result or 0)
            h, qctx, st, mr, rnr, rq, rd_full = case
            want = decide(model_h, qctx, st, mr, rnr, rq, rd_full=rd_full, atomics=True,
                          result=result)
            where = f"case {model_h} {qctx} {st} {mr} rd_full={rd_full} result={result}: {want}"
            atomic = model_h["bth"]["opcode"] in ATOMIC_CODES
            if atomic:
                seen[(want.verdict, want.read["op"] if want.read else None)] += 1
            assert int(meta_dict(ctx.get(chk.verdict))) == want.verdict, where
            assert meta_dict(ctx.get(dut.new_st)) == state_dict(want.state), where
            assert ctx.get(dut.resp_valid) == (want.response is not None), where
            if want.response:
                assert meta_dict(ctx.get(dut.resp)) == want.response, where
            assert ctx.get(dut.rd_valid) == (want.read is not None), where
            if want.read:
                got = meta_dict(ctx.get(dut.rd))
                work = meta_dict(ctx.get(dut.rd_work))
                want_job = dict(want.read)
                op = want_job.pop("op", None)
                operands = (want_job.pop("swap_add", 0), want_job.pop("compare", 0))
                assert got == want_job, where
                assert work["op"] == {None: 0, "FETCH_ADD": 1, "COMPARE_SWAP": 2,
                                      "REPLAY": 3}[op], where
                if op:
                    assert (work["swap_add"], work["compare"]) == operands, where
            assert ctx.get(dut.flush) == want.flush, where

    run_sim(top, testbenches=[tb], deadline_cycles=None)
    for key in [(Verdict.EXECUTED, "FETCH_ADD"), (Verdict.EXECUTED, "COMPARE_SWAP"),
                (Verdict.DUPLICATE, "REPLAY"), (Verdict.DUPLICATE, None),
                (Verdict.ACCESS, None), (Verdict.INVALID, None)]:
        assert seen[key] > 5, (key, seen)


def test_atomics_refused_without_the_parameter():
    """Without ``atomics`` an atomic request is an opcode the responder does not execute: NAK
    invalid request, as the model says of it with ``atomics`` False."""
    rng = random.Random(7)
    top = Chain()
    chk = top.check

    async def tb(ctx):
        for _ in range(50):
            case, model_h, result = draw_atomic(rng)
            apply_case(ctx, top, case)
            h, qctx, st, mr, rnr, rq, rd_full = case
            want = decide(model_h, qctx, st, mr, rnr, rq, rd_full=rd_full)
            assert want.read is None
            assert int(meta_dict(ctx.get(chk.verdict))) == want.verdict

    run_sim(top, testbenches=[tb], deadline_cycles=None)


def test_read_by_hand():
    """The reference model's READs against values worked out by hand: PSNs taken, MSN, the
    queued READ, a duplicate executed again from its own PSN, the queue full, zero length."""
    h = dict(src_ip=1, src_port=0, ecn=0, bth=dict(opcode=READ, se=0, m=0, padcnt=0, tver=0,
                                                  pkey=0xFFFF, fecn=0, becn=0, resv6=0,
                                                  dest_qp=256, ack_req=1, resv7=0, psn=10),
             reth=dict(va=0x1234, rkey=7, dma_len=4097), imm=0, hdr_len=56, length=0)
    qctx = dict(in_table=1, state=RTS, peer_ip=1, pmtu_log2=10)
    mr = dict(rkey=7, base=0x1000, length=1 << 20, write=0, read=1)
    d = decide(h, qctx, RespState(epsn=10, msn=3), mr, 0, None)
    assert d.verdict == Verdict.EXECUTED and d.response is None
    assert (d.state.epsn, d.state.msn) == (15, 4)               # ceil(4097 / 1024) = 5 PSNs
    assert d.read == dict(psn=10, va=0x1234, length=4097, msn=4, pmtu_log2=10)
    st = d.state
    h["bth"]["psn"], h["reth"]["va"], h["reth"]["dma_len"] = 12, 0x1234 + 2048, 2049
    d = decide(h, qctx, st, mr, 0, None)                        # the rest, asked again
    assert d.verdict == Verdict.DUPLICATE and d.response is None and d.state == st
    assert d.read == dict(psn=12, va=0x1A34, length=2049, msn=4, pmtu_log2=10)
    assert decide(h, qctx, st, mr, 0, None, rd_full=True).read is None      # dropped
    h["bth"]["psn"], h["reth"]["dma_len"], h["reth"]["rkey"] = 15, 0, 0     # no R_Key check
    d = decide(h, qctx, st, mr, 0, None)
    assert d.verdict == Verdict.EXECUTED and (d.state.epsn, d.state.msn) == (16, 5)
    h["bth"]["psn"] = 16
    d = decide(h, qctx, d.state, mr, 0, None, rd_full=True)
    assert d.verdict == Verdict.INVALID and d.response == dict(syndrome=0x61, psn=16, msn=5)
    assert d.state.error and d.read is None
    h["reth"]["dma_len"] = 1
    d = decide(h, qctx, RespState(epsn=16), dict(mr, read=0), 0, None)
    assert d.verdict == Verdict.ACCESS and d.response["syndrome"] == 0x62


def test_ack_every_by_hand():
    """The reference model with ``ack_every`` 3, against values worked out by hand: of the
    requests executed without AckReq, every third is ACKed; a duplicate's ACK restarts the
    count, and so does an AckReq ACK."""
    h = dict(src_ip=1, src_port=0, ecn=0, bth=dict(opcode=0x0A, se=0, m=0, padcnt=0, tver=0,
                                                  pkey=0xFFFF, fecn=0, becn=0, resv6=0,
                                                  dest_qp=256, ack_req=0, resv7=0, psn=0),
             reth=dict(va=0, rkey=7, dma_len=0), imm=0, hdr_len=44, length=0)
    qctx = dict(in_table=1, state=RTS, peer_ip=1, pmtu_log2=10)
    mr = dict(rkey=7, base=0, length=1 << 20, write=1, read=0)
    st = RespState(epsn=10)
    acked = []
    for psn, ack_req in [(10, 0), (11, 0), (12, 0), (13, 0), (9, 0), (14, 0), (15, 0), (16, 0),
                         (17, 1), (18, 0), (19, 0), (20, 0)]:
        h["bth"].update(psn=psn, ack_req=ack_req)
        d = decide(h, qctx, st, mr, 0, None, ack_every=3)
        st = d.state
        if d.response:
            acked.append(d.response["psn"])
    assert acked == [12, 13, 16, 17, 20]         # the duplicate's ACK: ePSN - 1
    assert st.unacked == 0 and st.epsn == 21


def test_parameters_are_checked():
    for bad in (-1, 256, 1.0, True):
        raises(ValueError, "ack_every must be an integer 0..255", lambda b=bad: RespDecide(ack_every=b))


def test_elaborates():
    Fragment.get(RespDecide(), None)
    Fragment.get(RespCheck(), None)
    Fragment.get(RespPrecheck(), None)
