"""The responder's engine (:class:`RespEngine`), with the QP table and the receive queues it
reads, cycle by cycle against the reference model of the decision
(:func:`rocegen.sim.models.responder.responder.decide`): a requester-like stream of request headers over
three QPs (messages of WRITEs and SENDs with and without immediate, duplicates, PSNs ahead,
bad R_Keys, foreign QPs and P_Keys, ECN CE marks), random idle cycles on the headers, random
backpressure on every output, and set-ups (``psn_set``) at random cycles, some while a request
of their QP is in the pipeline. Each request's fate is worked out from the cycles the engine
took it and acted on it: void when a set-up of its QP came in between, else the model's
decision on the state its predecessors and the set-ups left. Also the decision rate: a request
every two cycles, three for requests that take a receive buffer on one QP. With ``reads``, RDMA
READ requests among them (of 0 bytes to several PMTUs, duplicates, bad R_Keys), the engine's
READs pushed into a :class:`RespRead` whose responses are taken slowly, so that READ queues
fill: each push against the model's READ, decided on the queue's fullness as the engine read
it."""

import collections
import random

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module
from amaranth.lib import stream, wiring

from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.gateware.roce.responder.recv_queue import RecvQueue
from rocegen.gateware.roce.responder.resp_engine import SEQ_BITS, RespEngine
from rocegen.gateware.roce.responder.resp_layouts import RESP_HEADER, RespVerdict
from rocegen.gateware.roce.responder.resp_precheck import RespPrecheck
from rocegen.gateware.roce.responder.resp_read import RespRead
from rocegen.sim.models.responder.responder import FROM_PEER, RespState, decide, read_packets
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import PSN_MASK
from tests.tiers import full

QPS = 3                          # QPs the traffic uses; the table has one more, left in RESET
TABLE = QPS + 1
PMTU_LOG2 = 8
PMTU = 1 << PMTU_LOG2
PEER_IP = 0x0A000002
REGION = 0x10000
RNR = 5
RQ_DEPTH = 16
RD_DEPTH = 16


def config():
    return [{"mr": {"rkey": 0x500 + k, "base": k * REGION, "length": REGION, "write": 1,
                    "read": int(k != 1)}, "rnr_timer": RNR} for k in range(TABLE)]


def context(k):
    return {"state": QpState.RTS if k < QPS else QpState.RESET, "peer_ip": PEER_IP,
            "peer_qpn": 0x40 + k, "pmtu_log2": PMTU_LOG2, "udp_sport": 0xC000 + k,
            "dscp": 10 + k, "ecn": 2}


class EngineTop(Elaboratable):
    """:class:`RespEngine` with a :class:`QpTable` (contexts through ``qps.ctl``) and a
    :class:`RecvQueue` (buffers through ``rq.post``; its flushed completions on ``rq.flushed``)
    wired as in :class:`~rocegen.gateware.roce.responder.responder.Responder`; the headers in on ``hdr``,
    their facts added by a :class:`RespPrecheck` as the ingress adds them; with ``reads``, a
    :class:`RespRead` (pushes, fullness, set-ups) whose response packets leave on ``rd.o``."""

    def __init__(self, ack_every=0, reads=False):
        self.eng = RespEngine(TABLE, config_init=config(), ack_every=ack_every)
        self.qps = QpTable(TABLE)
        self.rq = RecvQueue(TABLE, RQ_DEPTH)
        self.rd = RespRead(64, TABLE, rd_depth=RD_DEPTH) if reads else None
        self.hdr = stream.Signature(RESP_HEADER).flip().create()

    def elaborate(self, platform):
        m = Module()
        eng, qps, rq = self.eng, self.qps, self.rq
        m.submodules.eng, m.submodules.qps, m.submodules.rq = eng, qps, rq
        pre = m.submodules.pre = RespPrecheck()
        m.d.comb += [pre.h.eq(self.hdr.payload), eng.hdr.payload.h.eq(self.hdr.payload),
                     eng.hdr.payload.f.eq(pre.facts), eng.hdr.valid.eq(self.hdr.valid),
                     self.hdr.ready.eq(eng.hdr.ready)]
        m.d.comb += [qps.rx_qp.eq(eng.ctx_qp), eng.ctx.eq(qps.rx_context),
                     rq.rd_qp.eq(eng.rq_qp), eng.rq_valid.eq(rq.head_valid),
                     eng.rq_head.eq(rq.head)]
        wiring.connect(m, eng.rq_pop, rq.pop)
        wiring.connect(m, eng.rq_flush, rq.flush)
        if self.rd is not None:
            rd = m.submodules.rd = self.rd
            wiring.connect(m, eng.rd_push, rd.push)
            m.d.comb += [rd.full_qp.eq(eng.rd_qp), eng.rd_full.eq(rd.full),
                         rd.flush.valid.eq(eng.psn_set.valid),
                         rd.flush.payload.eq(eng.psn_set.payload.qp)]
        return m


class Traffic:
    """Request headers as a requester's QPs send them, going back to the PSN of every NAK and
    RNR NAK (:meth:`nak`), with faults: foreign packets, duplicates, PSNs ahead and, with
    ``fatal``, bad R_Keys and MIDDLEs of no message. :meth:`reset` starts a QP's messages
    afresh at its next PSN (as after a set-up)."""

    def __init__(self, rng, fatal=True, reads=0.0):
        self.rng, self.fatal, self.reads = rng, fatal, reads
        self.psn = [rng.choice([0, PSN_MASK - 2, rng.getrandbits(24)]) for _ in range(QPS)]
        self.msg = [None] * QPS         # (kind, packets left, bytes left, ImmDt) of a message
        self.sent = [{} for _ in range(QPS)]        # PSN -> header, the newest 64
        self.replay = [[] for _ in range(QPS)]

    def reset(self, k):
        self.msg[k], self.sent[k], self.replay[k] = None, {}, []
        return self.psn[k]

    def nak(self, k, psn):
        """Send again from ``psn`` on (go-back-N)."""
        if 0 <= k < QPS and psn in self.sent[k]:
            out, q = [], psn
            while q != self.psn[k] and q in self.sent[k]:
                out.append(self.sent[k][q])
                q = (q + span(self.sent[k][q])) & PSN_MASK
            self.replay[k] = out

    def header(self, k, opcode, n, *, reth=None, imm=None, psn=None, src_ip=PEER_IP,
               pkey=0xFFFF):
        rng = self.rng
        va, rkey, dma_len = reth or (0, 0, 0)
        return {"src_ip": src_ip, "src_port": 0xC100,
                "ecn": 3 if rng.random() < 0.1 else rng.choice([0, 1, 2]),
                "bth": {"opcode": opcode, "se": 0, "m": 0, "padcnt": -n & 3, "tver": 0,
                        "pkey": pkey, "fecn": 0, "becn": 0, "resv6": 0,
                        "dest_qp": QPN_BASE + k, "ack_req": rng.getrandbits(1), "resv7": 0,
                        "psn": self.psn[k] if psn is None else psn},
                "reth": {"va": va, "rkey": rkey, "dma_len": dma_len}, "imm": imm or 0,
                "hdr_len": 40 + 16 * (reth is not None) + 4 * (imm is not None), "length": n}

    def next(self):
        rng = self.rng
        k = rng.randrange(QPS)
        r = rng.random()
        if r < 0.03:                    # not for a QP of the peer's
            return rng.choice([
                lambda: self.header(rng.choice([QPS, 40]), opc.OP_RC_SEND_ONLY, 8, psn=0),
                lambda: self.header(k, opc.OP_RC_SEND_ONLY, 8, src_ip=PEER_IP + 1),
                lambda: self.header(k, opc.OP_RC_SEND_ONLY, 8, pkey=0x7FFE)])()
        if r < 0.05 and self.sent[k]:   # a duplicate
            return rng.choice(list(self.sent[k].values()))
        if r < 0.06:                    # ahead of ePSN
            return self.header(k, opc.OP_RC_SEND_ONLY, 4, psn=(self.psn[k] + 2) & PSN_MASK)
        if self.replay[k]:
            return self.replay[k].pop(0)
        if self.msg[k] is None and r < self.reads and (self.fatal or k != 1):
            # a READ: of 0 bytes to several PMTUs, from the QP's region (QP 1 may not be read),
            # some with a bad R_Key
            size = rng.choice([0, 1, PMTU, PMTU + 1, 5 * PMTU - 3])
            va = k * REGION + rng.randrange(REGION - size + 1)
            rkey = 0x999 if self.fatal and rng.random() < 0.05 else 0x500 + k
            h = self.header(k, opc.OP_RC_RDMA_READ_REQUEST, 0, reth=(va, rkey, size))
        elif self.fatal and r < 0.07:     # a MIDDLE of no message, or a bad R_Key
            h = rng.choice([
                lambda: self.header(k, opc.OP_RC_SEND_MIDDLE, PMTU),
                lambda: self.header(k, opc.OP_RC_RDMA_WRITE_ONLY, 8,
                                    reth=(k * REGION, 0x999, 8))])()
        elif self.msg[k] is None:
            send, imm = rng.random() < 0.4, int(rng.random() < 0.3)
            size = rng.choice([0, 4, 61, PMTU, PMTU + 8, 3 * PMTU - 4])
            if send:
                size = min(size, 2 * PMTU)
            packets = max(1, -(-size // PMTU))
            n = size if packets == 1 else PMTU
            with_imm = rng.getrandbits(32) if imm and packets == 1 else None
            if send:
                op = opc.OP_RC_SEND_ONLY + imm if packets == 1 else opc.OP_RC_SEND_FIRST
                h = self.header(k, op, n, imm=with_imm)
            else:
                op = (opc.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE if imm else
                      opc.OP_RC_RDMA_WRITE_ONLY) if packets == 1 else opc.OP_RC_RDMA_WRITE_FIRST
                va = k * REGION + rng.randrange(REGION - size + 1)
                h = self.header(k, op, n, reth=(va, 0x500 + k, size), imm=with_imm)
            if packets > 1:
                self.msg[k] = ("SEND" if send else "WRITE", packets - 1, size - n, imm)
        else:
            kind, left, size, imm = self.msg[k]
            base = opc.OP_RC_SEND_FIRST if kind == "SEND" else opc.OP_RC_RDMA_WRITE_FIRST
            if left > 1:
                h = self.header(k, base + 1, PMTU)
                self.msg[k] = (kind, left - 1, size - PMTU, imm)
            else:
                h = self.header(k, base + 2 + imm, size,
                                imm=rng.getrandbits(32) if imm else None)
                self.msg[k] = None
        self.sent[k][self.psn[k]] = h
        for q in range(span(h)):
            self.sent[k].pop((self.psn[k] - 64 + q) & PSN_MASK, None)
        self.psn[k] = (self.psn[k] + span(h)) & PSN_MASK
        return h


def span(h):
    """PSNs a request takes: a READ's responses, else 1."""
    if h["bth"]["opcode"] == opc.OP_RC_RDMA_READ_REQUEST:
        return read_packets(h["reth"]["dma_len"], PMTU_LOG2)
    return 1


def qctx(k):
    c = context(k) if k < TABLE else {}
    return {"in_table": int(k < TABLE), "state": int(c["state"].value) if c else 0,
            "peer_ip": PEER_IP, "pmtu_log2": PMTU_LOG2}


def record_taker(port, rng, backpressure, log):
    """A process taking records from ``port`` (``ready`` low with chance ``backpressure``),
    logging (cycle, payload) to ``log`` (cycles counted from 0 at the first tick)."""
    async def run(ctx):
        cycle = 0
        while True:
            ready = not (backpressure and rng.random() < backpressure)
            ctx.set(port.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(port.valid, port.payload)
            if valid and ready:
                log.append((cycle, meta_dict(payload)))
            cycle += 1
    return run


@pytest.mark.parametrize("seed, idle, backpressure, setups, ack_every, reads", [
    full(1, 0.0, 0.0, 0.0, 0, None), (2, 0.3, 0.3, 0.0, 0, None), full(3, 0.2, 0.4, 0.02, 0, None),
    (4, 0.0, 0.0, 0.05, 2, None), full(5, 0.5, 0.6, 0.03, 0, None),
    full(6, 0.0, 0.0, 0.0, 0, 0.3), (7, 0.3, 0.3, 0.01, 3, 1.0), (8, 0.1, 0.2, 0.05, 0, 0.9)])
def test_engine_against_model(seed, idle, backpressure, setups, ack_every, reads):
    """``reads``: READs in the traffic (a quarter of the requests; half with ``reads`` 1.0),
    their responses taken with this backpressure (1.0: never, the queues fill up)."""
    rng = random.Random(seed)
    top = EngineTop(ack_every, reads=reads is not None)
    eng = top.eng
    traffic = Traffic(rng, fatal=bool(setups),
                      reads=0.0 if reads is None else 0.5 if reads == 1.0 else 0.25)
    log = {"take": [], "act": [], "setup": [], "pop": [], "ce": [], "post": [], "full": [],
           "push": [], "blocked": []}
    acts, resps, cpls, flushes, flushed = [], [], [], [], []
    takers = [record_taker(port, random.Random(seed * 10 + j), backpressure, out)
              for j, (port, out) in enumerate([(eng.act, acts), (eng.resp, resps),
                                                (eng.cpl, cpls), (top.rq.flushed, flushed)])]
    if reads is not None:
        takers.append(record_taker(top.rd.o, random.Random(seed), reads, []))

    async def watch(ctx):
        c = 0
        async for _, _, *vals in ctx.tick().sample(
                top.hdr.valid, top.hdr.ready, top.hdr.payload, eng.decided, eng.verdict,
                eng.psn_set.valid, eng.psn_set.payload, eng.rq_pop.valid, eng.rq_pop.payload,
                eng.ce.valid, eng.ce.payload, eng.rq_flush.valid, eng.rq_flush.ready,
                eng.rq_flush.payload, eng.resp.valid, eng.resp.ready, eng.resp.payload,
                eng.rd_full, eng.rd_push.valid, eng.rd_push.payload, top.rq.flushing):
            (hv, hr, hp, dv, verdict, pv, pp, popv, popq, cev, cep, fv, fr, fp,
             rv, rr, rp, full, puv, pup, flushing) = vals
            log["full"].append(full)
            # (the QPs whose receive queue a read in this cycle finds held by a flush)
            log["blocked"].append(flushing | (1 << fp if fv and fp < TABLE else 0))
            if puv:
                log["push"].append((c, meta_dict(pup)))
            if hv and hr:
                log["take"].append((c, meta_dict(hp)))
            if dv:
                log["act"].append((c, int(verdict.value)))
            if pv:      # (a set-up takes effect in the cycle after it comes)
                log["setup"].append((c + 1, pp.qp, pp.psn))
            if popv:
                log["pop"].append((c, int(popq)))
            if cev:
                log["ce"].append((c, meta_dict(cep)))
            if fv and fr:
                flushes.append((c, int(fp)))
            if rv and rr and rp.syndrome & 0x60:        # the requester goes back
                traffic.nak(rp.qp, rp.psn)
            c += 1

    async def post(ctx):
        """Receive buffers, posted at random to the QPs (never to a full queue)."""
        c, wr_id, want = 0, 0, None
        async for _, _, ready in ctx.tick().sample(top.rq.post.ready):
            if want is not None and ready:
                log["post"].append((c, want))
                wr_id += 1
            want = None
            if rng.random() < 0.3:
                short = traffic.fatal and rng.random() < 0.1      # too short: a fatal NAK
                want = {"qp": rng.randrange(TABLE), "wr_id": wr_id,
                        "addr": 0x80000 + 0x400 * wr_id, "length": 100 if short else 2 * PMTU}
                ctx.set(top.rq.post.payload, want)
            ctx.set(top.rq.post.valid, want is not None)
            c += 1

    async def tb(ctx):
        for k in range(TABLE):
            ctx.set(top.qps.ctl.payload, {"qp": k, "context": context(k)})
            ctx.set(top.qps.ctl.valid, 1)
            await ctx.tick()
        ctx.set(top.qps.ctl.valid, 0)
        for k in range(QPS):
            ctx.set(eng.psn_set.payload, {"qp": k, "psn": traffic.reset(k)})
            ctx.set(eng.psn_set.valid, 1)
            await ctx.tick()
        ctx.set(eng.psn_set.valid, 0)
        sent = 0
        while sent < 700:
            if setups and rng.random() < setups:
                k = rng.randrange(QPS)
                ctx.set(eng.psn_set.payload, {"qp": k, "psn": traffic.reset(k)})
                ctx.set(eng.psn_set.valid, 1)
                await ctx.tick()
                ctx.set(eng.psn_set.valid, 0)
                continue
            if idle and rng.random() < idle:
                ctx.set(top.hdr.valid, 0)
                await ctx.tick()
                continue
            ctx.set(top.hdr.payload, traffic.next())
            ctx.set(top.hdr.valid, 1)
            await ctx.tick().until(top.hdr.ready)
            ctx.set(top.hdr.valid, 0)
            sent += 1
        await ctx.tick().repeat(100)

    run_sim(top, testbenches=[tb], processes=[watch, post, *takers], deadline_cycles=None)
    verdicts = check_against_model(log, acts, resps, cpls, flushes, flushed, ack_every)
    # the traffic is sound: many executed (with fatal NAKs, most of the rest are the requests
    # of QPs in the error state, dropped until their next set-up)
    assert verdicts.count(0) > 150, collections.Counter(verdicts)
    if setups:
        assert any(voids(log)), "no request was voided"
    if reads is not None:
        pushed = [p for _, p in log["push"]]
        assert len(pushed) > 30, len(pushed)
        assert any(p["read"]["length"] == 0 for p in pushed)
        if reads == 1.0:
            # (READ queues filled up: a READ refused, NAK invalid request)
            assert sum(log["full"]) > 0 and verdicts.count(5) > 0


def voids(log):
    """Per request: a set-up of its QP came from the cycle it was taken to the one it acted."""
    return [any(q == h["bth"]["dest_qp"] - QPN_BASE and t <= c <= a
                for c, q, _ in log["setup"])
            for (t, h), (a, _) in zip(log["take"], log["act"])]


def check_against_model(log, acts, resps, cpls, flushes, flushed, ack_every):
    """Each request's fate against the model; returns the verdicts."""
    takes, decided = log["take"], log["act"]
    assert len(takes) == len(decided) == len(acts) > 600
    state = {}
    setups, posts = list(log["setup"]), list(log["post"])
    rqs = {k: [] for k in range(TABLE)}             # the model's receive queues
    void = voids(log)
    pops, marks = list(log["pop"]), list(log["ce"])
    si = pi = fi = 0

    def taken_in(out, k):
        """The records of ``out`` handed on between request k's action and the next one's."""
        lo = decided[k][0]
        hi = decided[k + 1][0] if k + 1 < len(decided) else 1 << 60
        return [(c, p) for c, p in out if lo < c <= hi]

    def handed_on(out, k, qp, want):
        """Request k's record on ``out``, if ``want``: handed on unless a set-up of its QP
        came first (after its action); never after one."""
        lo = decided[k][0]
        hi = decided[k + 1][0] if k + 1 < len(decided) else 1 << 60
        got = [(c, p) for c, p in out if lo < c <= hi]
        if not want:
            return got == []
        if got:
            return len(got) == 1 and not any(q == qp and lo < c <= got[0][0]
                                             for c, q, _ in setups)
        return any(q == qp and lo < c <= hi for c, q, _ in setups)

    for k, ((t, h), (a, verdict)) in enumerate(zip(takes, decided)):
        # what happened before the request's reads: set-ups, posts, flushed buffers
        while si < len(setups) and setups[si][0] < t:
            _, q, psn = setups[si]
            state[q] = RespState(epsn=psn)
            si += 1
        while pi < len(posts) and posts[pi][0] < t:
            rqs[posts[pi][1]["qp"]].append(posts[pi][1])
            pi += 1
        while fi < len(flushed) and flushed[fi][0] < t:
            f = flushed[fi][1]
            assert rqs[f["qp"]] and rqs[f["qp"]][0]["wr_id"] == f["wr_id"], f"flushed {f}"
            rqs[f["qp"]].pop(0)
            fi += 1
        qp = h["bth"]["dest_qp"] - QPN_BASE
        where = f"request {k} (taken {t}, acted {a}) {h}"
        act = acts[k][1]
        assert act["skip"] == h["hdr_len"] and act["length"] == h["length"], where
        if void[k]:
            assert act["write"] == 0 and not taken_in(resps, k) and not taken_in(cpls, k), where
            assert not taken_in(flushes, k), where
            assert not [p for c, p in pops if c == a], where
            assert not [p for c, p in log["push"] if c == a], where
            continue
        st = state.get(qp, RespState())
        # (a QP whose receive queue is flushed has no buffer to take)
        held = 0 <= qp < TABLE and log["blocked"][t] >> qp & 1
        rq = rqs[qp][0] if 0 <= qp < TABLE and rqs[qp] and not held else None
        cfg = config()[qp] if 0 <= qp < TABLE else config()[0]
        # (the READ queue's fullness as CHECK read it, in the cycle after the take)
        rd_full = bool(log["full"][t + 1]) if log["full"] else False
        want = decide(h, qctx(qp), st, cfg["mr"], cfg["rnr_timer"], rq, ack_every,
                      rd_full=rd_full)
        assert verdict == want.verdict, where + f": model {want}"
        if 0 <= qp < TABLE:
            state[qp] = want.state
        # (a record taken after a set-up of its QP writes nothing)
        cut = any(q == qp and a < c <= acts[k][0] for c, q, _ in setups)
        if want.place["write"] and not cut:
            assert act == want.place, where
        else:
            assert act["write"] == 0, where
        assert [p for c, p in pops if c == a] == ([qp] if want.rq_pop else []), where
        c = context(qp) if 0 <= qp < TABLE else {}
        assert [p for cyc, p in log["push"] if cyc == a] == (
            [{"qp": qp, "read": want.read,
              "route": {"dest_qpn": c["peer_qpn"], "dst_ip": PEER_IP,
                        "src_port": c["udp_sport"], "dscp": c["dscp"], "ecn": 2},
              "atomic": {"op": 0, "swap_add": 0, "compare": 0}}]
            if want.read else []), where
        if want.rq_pop:
            rqs[qp].pop(0)
        c = context(qp) if 0 <= qp < TABLE else {}
        assert handed_on(resps, k, qp, want.response), where
        for _, g in taken_in(resps, k):
            assert g == {"qp": qp, "cnp": 0, **want.response, "dest_qpn": c["peer_qpn"],
                         "dst_ip": PEER_IP, "src_port": c["udp_sport"], "dscp": c["dscp"]}, where
        assert handed_on(cpls, k, qp, want.completion), where
        for _, g in taken_in(cpls, k):
            w = want.completion
            assert g["seq"] == (k + 1) % (1 << SEQ_BITS), where
            g = g["cpl"]
            assert (g["qp"], g["wr_id"], g["opcode"], g["status"], g["length"],
                    g["has_imm"]) == (qp, w["wr_id"], {"SEND": 0, "WRITE_IMM": 1}[w["opcode"]],
                                      int(w["status"]), w["length"] & 0xFFFFFFFF,
                                      int(w["imm"] is not None)), where
            if w["imm"] is not None:
                assert g["imm"] == w["imm"], where
        assert handed_on(flushes, k, qp, want.flush), where
        assert [g for _, g in taken_in(flushes, k)] in ([], [qp]), where
        got = [p for c, p in marks if c == a + 1]
        if h["ecn"] == 3 and want.verdict in FROM_PEER:
            c = context(qp)
            assert got == [{"qp": qp, "dest_qpn": c["peer_qpn"], "dst_ip": PEER_IP,
                            "src_port": c["udp_sport"]}], where
        else:
            assert got == [], where
    assert all(f["status"] == 3 for _, f in flushed)
    return [v for _, v in decided]


def rate(headers, *, cycles=400):
    """The cycles between decisions when ``headers`` (repeated, PSNs counting up) are offered
    back to back and every output is always ready."""
    top = EngineTop()
    eng = top.eng
    decided = []

    async def watch(ctx):
        cycle = 0
        async for _, _, d in ctx.tick().sample(eng.decided):
            cycle += 1
            if d:
                decided.append(cycle)

    async def tb(ctx):
        for k in range(TABLE):
            ctx.set(top.qps.ctl.payload, {"qp": k, "context": context(k)})
            ctx.set(top.qps.ctl.valid, 1)
            await ctx.tick()
        ctx.set(top.qps.ctl.valid, 0)
        for port in (eng.act, eng.resp, eng.cpl, top.rq.flushed):
            ctx.set(port.ready, 1)
        psn = [0] * QPS
        j = 0
        while len(decided) < 60:
            h = headers[j % len(headers)]
            k = h["bth"]["dest_qp"] - QPN_BASE
            h["bth"]["psn"] = psn[k]
            psn[k] += 1
            ctx.set(top.hdr.payload, h)
            ctx.set(top.hdr.valid, 1)
            await ctx.tick().until(top.hdr.ready)
            j += 1

    async def post(ctx):
        j = 0
        ctx.set(top.rq.post.valid, 1)
        ctx.set(top.rq.post.payload, {"qp": 0, "wr_id": 0, "addr": 0, "length": 64})
        async for _, _, ready in ctx.tick().sample(top.rq.post.ready):
            j += ready
            ctx.set(top.rq.post.payload, {"qp": j % 2, "wr_id": j, "addr": 0, "length": 64})

    run_sim(top, testbenches=[tb], processes=[watch, post], deadline_cycles=cycles)
    return {b - a for a, b in zip(decided[10:], decided[11:])}


def test_decision_rate():
    t = Traffic(random.Random(0))
    write = [t.header(0, opc.OP_RC_RDMA_WRITE_ONLY, 64, reth=(0, 0x500, 64))]
    send = [t.header(0, opc.OP_RC_SEND_ONLY, 0)]
    send2 = [t.header(0, opc.OP_RC_SEND_ONLY, 0), t.header(1, opc.OP_RC_SEND_ONLY, 0)]
    assert rate(write) == {2}           # WRITEs of one QP: every other cycle
    assert rate(send) == {3}            # each takes the buffer the next one reads
    assert rate(send2) == {2}           # of two QPs, alternately


@pytest.mark.parametrize("offset, answers", [
    (-2, [(499, 0), (500, 1)]),         # set up before: a duplicate of the new connection
    (-1, [(500, 1)]), (0, [(500, 1)]), (1, [(500, 1)]),    # taken .. acting: void
    (2, [(500, 1)]),                    # its ACK waiting in the output register: withdrawn
    (3, [(100, 1), (500, 1)])])         # after its ACK left
def test_setup_in_flight(offset, answers):
    """A QP set up again (ePSN 500) on ``psn_set`` ``offset`` cycles after a WRITE of its old
    connection (PSN 100, AckReq) is taken (it takes effect a cycle later), then a WRITE of the
    new one (PSN 500): the old request is answered only if the set-up took effect before it
    was taken or after its ACK left; the new one always executes (the old one's state never
    overwrites the set-up). ACKs as (PSN, MSN)."""
    top = EngineTop()
    eng = top.eng
    t = Traffic(random.Random(0))
    old, new = (t.header(0, opc.OP_RC_RDMA_WRITE_ONLY, 8, reth=(0, 0x500, 8), psn=p)
                for p in (100, 500))
    for h in (old, new):
        h["bth"]["ack_req"], h["ecn"] = 1, 0
    got, verdicts = [], []

    async def answers_out(ctx):
        async for _, _, v, p, d, verdict in ctx.tick().sample(
                eng.resp.valid, eng.resp.payload, eng.decided, eng.verdict):
            if v:
                got.append((p.psn, p.msn))
            if d:
                verdicts.append(verdict)

    async def tb(ctx):
        for port in (eng.act, eng.resp, eng.cpl):
            ctx.set(port.ready, 1)
        ctx.set(top.qps.ctl.payload, {"qp": 0, "context": context(0)})
        ctx.set(top.qps.ctl.valid, 1)
        await ctx.tick()
        ctx.set(top.qps.ctl.valid, 0)
        ctx.set(eng.psn_set.payload, {"qp": 0, "psn": 100})
        ctx.set(eng.psn_set.valid, 1)
        await ctx.tick()
        ctx.set(eng.psn_set.valid, 0)
        await ctx.tick().repeat(3)
        ctx.set(eng.psn_set.payload, {"qp": 0, "psn": 500})
        for cycle in range(-2, 8):
            ctx.set(top.hdr.valid, cycle == 0)
            ctx.set(top.hdr.payload, old)
            ctx.set(eng.psn_set.valid, cycle == offset)
            if cycle == 0:
                assert ctx.get(top.hdr.ready)
            await ctx.tick()
        ctx.set(eng.psn_set.valid, 0)
        ctx.set(top.hdr.payload, new)
        ctx.set(top.hdr.valid, 1)
        await ctx.tick().until(top.hdr.ready)
        ctx.set(top.hdr.valid, 0)
        await ctx.tick().repeat(10)

    run_sim(top, testbenches=[tb], processes=[answers_out])
    assert got == answers
    assert len(verdicts) == 2 and verdicts[1] == RespVerdict.EXECUTED


def test_elaborates():
    Fragment.get(RespEngine(1), None)
    Fragment.get(RespEngine(256, ack_every=16), None)
