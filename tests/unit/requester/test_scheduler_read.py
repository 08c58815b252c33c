"""Scheduler built with RDMA READ requests (``reads``) against the segmentation model: READs of
every size around the path MTU, at every path MTU, mixed with WRITEs and SENDs on several QPs
(descriptors, posts, next PSNs, ``sent`` records and ``rd_issue`` records, exact), READs resumed
inside after a REWIND, and the refusals (UNSUPPORTED, LOCAL_LENGTH, alignment), with random idle
input and random backpressure at two widths."""

import random
from dataclasses import dataclass

import pytest
from amaranth.hdl import Array, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    FREED,
    PACKET_DESC,
    POST,
    SCHED_EVENT,
    SENT,
    WR_TAGGED,
    CplStatus,
    QpState,
    SchedKind,
    WrSource,
)
from rocegen.gateware.roce.read.read_layouts import READ_ISSUE
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE, QpTable
from rocegen.gateware.roce.requester.scheduler import Scheduler
from rocegen.sim.models.requester import requester as model
from rocegen.sim.models.requester.requester import PMTUS, PSN_MOD, WorkRequest, WrOpcode
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from tests.unit.requester.test_scheduler import DEADLINE, Qp, expected_desc, got_desc, random_qp


class ReadTop(wiring.Component):
    """A scheduler reading and advancing a QP table, with its READ port, ``sent`` output and
    retry-engine inputs brought out. ``acked_w`` sets a QP's acknowledged PSN (the scheduler reads
    it combinationally); ``psn_seen`` shows each PSN write the QP table takes from the
    scheduler. With ``auto_free`` each request's slot is freed in the cycle after its post leaves;
    else through ``freed``. The window is as large as it can be."""

    def __init__(self, num_qps, width, mem_bytes, depth, *, reads=True, auto_free=True):
        self.num_qps, self.reads, self.auto_free = num_qps, reads, auto_free
        self.sched = Scheduler(num_qps, width, mem_bytes, depth, window=(1 << 23) - 1,
                               reads=reads)
        self.table = QpTable(num_qps)
        members = {
            "wr": In(stream.Signature(WR_TAGGED)),
            "desc": Out(stream.Signature(PACKET_DESC)),
            "post": Out(stream.Signature(POST)),
            "sent": Out(stream.Signature(SENT)),
            "psn_seen": Out(stream.Signature(PSN_WRITE, always_ready=True)),
            "full": In(num_qps),
            "ctl": In(stream.Signature(CONTEXT_WRITE)),
            "ctl_psn": In(stream.Signature(PSN_WRITE)),
            "ev": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "acked_w": In(stream.Signature(PSN_WRITE, always_ready=True)),
            "freed": In(stream.Signature(FREED, always_ready=True)),
        }
        if reads:
            members["rd_issue"] = Out(stream.Signature(READ_ISSUE, always_ready=True))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        s = m.submodules.sched = self.sched
        t = m.submodules.table = self.table
        for name in ("desc", "post", "sent") + (("rd_issue",) if self.reads else ()):
            wiring.connect(m, getattr(s, name), wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.wr), s.wr)
        wiring.connect(m, s.psn_w, t.psn_w)
        wiring.connect(m, wiring.flipped(self.ctl), t.ctl)
        wiring.connect(m, wiring.flipped(self.ctl_psn), t.ctl_psn)
        wiring.connect(m, wiring.flipped(self.ev), s.sched)
        acked = Array(Signal(24, name=f"acked{q}") for q in range(self.num_qps))
        with m.If(self.acked_w.valid):
            m.d.sync += acked[self.acked_w.payload.qp].eq(self.acked_w.payload.psn)
        m.d.comb += [t.rd_qp.eq(s.rd_qp), s.rd_context.eq(t.rd_context),
                     s.rd_psn.eq(t.rd_psn), s.full.eq(self.full),
                     s.acked_psn.eq(acked[s.acked_qp]),
                     self.psn_seen.valid.eq(s.psn_w.valid & s.psn_w.ready),
                     self.psn_seen.payload.eq(s.psn_w.payload)]
        if self.auto_free:
            m.d.sync += [s.freed.valid.eq(s.post.valid & s.post.ready &
                                          (s.post.payload.qp < self.num_qps)),
                         s.freed.payload.eq(s.post.payload.qp)]
        else:
            wiring.connect(m, wiring.flipped(self.freed), s.freed)
        return m


@dataclass(frozen=True)
class Wr:
    """A work request as posted; ``op`` overrides the opcode's code (5..7: none of the model's)."""
    qp: int
    req: WorkRequest
    src: WrSource = WrSource.USER
    op: int | None = None

    def payload(self):
        """The record (with the request's own opcode: :meth:`Bench.feed` sets ``op``)."""
        r = self.req
        return {"wr": {"wr_id": r.wr_id, "qp": self.qp, "opcode": r.opcode.value,
                       "local_addr": r.local_addr, "length": r.length,
                       "remote_offset": r.remote_offset, "imm": r.imm},
                "src": self.src}


def status_of(wr, qp, *, reads, width, mem_bytes):
    """What the scheduler must make of ``wr`` (the rules, stated here on their own)."""
    op = wr.req.opcode.value if wr.op is None else wr.op
    end = wr.req.local_addr + wr.req.length
    if op > 4 or (op == 4 and not reads):
        return CplStatus.UNSUPPORTED
    if op == 4:                                     # READ: any alignment, always in memory
        if end > mem_bytes:
            return CplStatus.LOCAL_LENGTH
    elif wr.req.local_addr % (width // 8):
        return CplStatus.LOCAL_ALIGN
    elif wr.src != WrSource.GENERATOR and end > mem_bytes:
        return CplStatus.LOCAL_LENGTH
    if qp.state != QpState.RTS:
        return CplStatus.QP_NOT_READY
    return CplStatus.OK


def seg_state(qp, psn=None):
    return model.QpSegment(dest_qpn=qp.peer_qpn, rkey=qp.rkey, base_va=qp.base_va,
                         psn=qp.psn if psn is None else psn, pmtu=qp.pmtu,
                         ack_every=qp.ack_every)


class Expected:
    """Per QP, in order: posts, descriptors, the PSN each packet's ``sent`` record reports,
    PSN writes and ``rd_issue`` records; and the first PSN each request took."""

    def __init__(self, n):
        self.posts = {q: [] for q in range(n)}
        self.descs = {q: [] for q in range(n)}
        self.sent = {q: [] for q in range(n)}
        self.psn_w = {q: [] for q in range(n)}
        self.issues = {q: [] for q in range(n)}
        self.first = {}                             # wr_id -> first PSN

    def packets(self, wr, qp, packets, first, *, new):
        for p in packets:
            self.descs[wr.qp].append(expected_desc(wr, qp, p))
            self.sent[wr.qp].append((p.psn + p.psns - 1) % PSN_MOD)
            if p.opcode == opc.OP_RC_RDMA_READ_REQUEST:
                self.issues[wr.qp].append({
                    "qp": wr.qp, "new": int(new), "wr_id": wr.req.wr_id,
                    "local_addr": wr.req.local_addr, "length": wr.req.length, "first": first,
                    "psn": p.psn, "pmtu_log2": qp.pmtu.bit_length() - 1, "va": p.reth[0],
                    "atomic": 0, "gen": int(wr.src == WrSource.GENERATOR)})

    def add(self, wr, qps, **checks):
        """Account for a new request; advances the model QP's PSN."""
        qp = qps[wr.qp]
        status = status_of(wr, qp, **checks)
        if status != CplStatus.OK:
            self.posts[wr.qp].append((wr.req.wr_id, wr.src, status, 0))
            return status
        first = qp.psn
        seg = seg_state(qp)
        packets = model.segment(wr.req, seg)
        qp.psn = seg.psn
        self.first[wr.req.wr_id] = first
        self.posts[wr.qp].append((wr.req.wr_id, wr.src, status,
                                  (first + model.psn_count(wr.req, qp.pmtu) - 1) % PSN_MOD))
        self.psn_w[wr.qp].append(qp.psn)
        self.packets(wr, qp, packets, first, new=True)
        return status

    def count(self):
        return sum(map(len, self.descs.values())), sum(map(len, self.posts.values()))


class Bench:
    """Drives a :class:`ReadTop`: feeds requests with random idle cycles and takes every output
    with random backpressure, recording each cycle's events."""

    def __init__(self, dut, seed, *, idle=0.3, bp=0.3):
        self.dut, self.rng, self.idle, self.bp = dut, random.Random(seed), idle, bp
        self.cycle = 0
        self.descs, self.posts, self.sent, self.psn_w, self.issues = [], [], [], [], []
        self.offers = []            # (cycle, qp, psn) of each descriptor when first offered

    async def configure(self, ctx, index, qp):
        ctx.set(self.dut.ctl.payload, {"qp": index, "context": qp.context()})
        ctx.set(self.dut.ctl.valid, 1)
        ctx.set(self.dut.ctl_psn.payload, {"qp": index, "psn": qp.psn})
        ctx.set(self.dut.ctl_psn.valid, 1)
        await ctx.tick()
        ctx.set(self.dut.ctl.valid, 0)
        ctx.set(self.dut.ctl_psn.valid, 0)

    async def feed(self, ctx, wrs):
        for wr in wrs:
            while self.rng.random() < self.idle:
                ctx.set(self.dut.wr.valid, 0)
                await ctx.tick()
            ctx.set(self.dut.wr.payload, wr.payload())
            if wr.op is not None:       # (a code the enumeration does not name)
                ctx.set(self.dut.wr.payload.wr.opcode.as_value(), wr.op)
            ctx.set(self.dut.wr.valid, 1)
            await ctx.tick().until(self.dut.wr.ready)
        ctx.set(self.dut.wr.valid, 0)

    async def set_acked(self, ctx, qp, psn):
        ctx.set(self.dut.acked_w.payload, {"qp": qp, "psn": psn % PSN_MOD})
        ctx.set(self.dut.acked_w.valid, 1)
        await ctx.tick()
        ctx.set(self.dut.acked_w.valid, 0)

    async def rewind(self, ctx, qp):
        ctx.set(self.dut.ev.payload, {"qp": qp, "kind": SchedKind.REWIND})
        ctx.set(self.dut.ev.valid, 1)
        await ctx.tick()
        ctx.set(self.dut.ev.valid, 0)

    async def wait_for(self, ctx, n_descs, n_posts):
        while len(self.descs) < n_descs or len(self.posts) < n_posts:
            await ctx.tick()
        for _ in range(30):         # nothing more may come
            await ctx.tick()

    async def outputs(self, ctx):
        dut, rng = self.dut, self.rng
        reads = dut.reads
        prev_offer = False          # the descriptor output held a beat not taken last cycle
        while True:
            ready = {k: not rng.random() < self.bp for k in ("desc", "post", "sent")}
            for k, r in ready.items():
                ctx.set(getattr(dut, k).ready, r)
            watched = [dut.desc.valid, dut.desc.payload, dut.post.valid, dut.post.payload,
                       dut.sent.valid, dut.sent.payload, dut.psn_seen.valid, dut.psn_seen.payload]
            if reads:
                watched += [dut.rd_issue.valid, dut.rd_issue.payload]
            _, _, dv, dp, pv, pp, sv, sp, wv, wp, *ri = await ctx.tick().sample(*watched)
            self.cycle += 1
            if dv and not prev_offer:
                self.offers.append((self.cycle, dp.qp, dp.psn))
            prev_offer = dv and not ready["desc"]
            if dv and ready["desc"]:
                self.descs.append(got_desc(dp))
            if pv and ready["post"]:
                self.posts.append(meta_dict(pp))
            if sv and ready["sent"]:
                self.sent.append(meta_dict(sp))
            if wv:
                self.psn_w.append(meta_dict(wp))
            if reads and ri[0]:
                self.issues.append((self.cycle, meta_dict(ri[1])))

    def mark(self):
        """How many of each output were recorded so far (a position for :meth:`check`)."""
        return tuple(len(x) for x in (self.descs, self.posts, self.sent, self.psn_w,
                                      self.issues))

    def check(self, exp, n, start=(0,) * 5, end=(None,) * 5):
        """The outputs recorded between the positions ``start`` and ``end`` (from
        :meth:`mark`) are those of ``exp``, per QP."""
        descs, posts, sent, psn_w, issues = (
            x[a:b] for x, a, b in zip((self.descs, self.posts, self.sent, self.psn_w,
                                        self.issues), start, end))
        assert (len(descs), len(posts)) == exp.count()
        for q in range(n):
            got = [d for d in descs if d["qp"] == q]
            assert len(got) == len(exp.descs[q]), f"QP {q}"
            for k, (g, w) in enumerate(zip(got, exp.descs[q])):
                assert g == w, f"QP {q} descriptor {k}:\n got {g}\nwant {w}"
            assert [(p["wr_id"], WrSource(p["src"]), CplStatus(p["status"]), p["last_psn"])
                    for p in posts if p["qp"] == q] == exp.posts[q], f"QP {q} posts"
            assert [w["psn"] for w in psn_w if w["qp"] == q] == exp.psn_w[q], f"QP {q} psn_w"
            assert [r for _, r in issues if r["qp"] == q] == exp.issues[q], f"QP {q} rd_issue"
            # the sent records split the QP's packets in order, each with its newest's PSN
            want = list(exp.sent[q])
            for rec in (r for r in sent if r["qp"] == q):
                assert 1 <= rec["packets"] <= len(want), f"QP {q} sent {rec}"
                group, want = want[:rec["packets"]], want[rec["packets"]:]
                assert rec["psn"] == group[-1], f"QP {q} sent {rec}, expected {group}"
            assert not want, f"QP {q}: packets never reported sent: {want[:5]}"
        # each READ request's record came in the cycle before its descriptor was offered
        offered = {(c, q, p) for c, q, p in self.offers}
        for c, r in issues:
            assert (c + 1, r["qp"], r["psn"]) in offered, f"rd_issue {r} in cycle {c}"


def read_mix(rng, q, qp, mem_bytes, width, count):
    """READs of lengths 0, 1, PMTU, PMTU + 1, many PMTUs and random, some unaligned, some past
    the end of local memory, between WRITEs and SENDs and requests of codes 5..7."""
    pmtu, word = qp.pmtu, width // 8
    reads = [0, 1, pmtu, pmtu + 1, 37 * pmtu + 5, rng.randrange(1, 6 * pmtu)]
    wrs = []
    for k in range(count):
        wr_id = (q << 24) | k
        extra = {"remote_offset": rng.getrandbits(64), "imm": rng.getrandbits(32)}
        src = rng.choice([WrSource.USER, WrSource.STREAM])
        if k % 2 == 0 and reads:
            length = reads.pop(0)
            addr = rng.randrange(0, mem_bytes - length)            # any byte alignment
            wrs.append(Wr(q, WorkRequest(wr_id, WrOpcode.READ, length, local_addr=addr, **extra),
                          src))
        elif k % 7 == 3:
            length = rng.randrange(16, 3 * pmtu)
            addr = mem_bytes - length + rng.randrange(1, 9)          # past the end
            wrs.append(Wr(q, WorkRequest(wr_id, WrOpcode.READ, length, local_addr=addr, **extra),
                          rng.choice(list(WrSource)[:3])))
        elif k % 7 == 5:
            wrs.append(Wr(q, WorkRequest(wr_id, WrOpcode.SEND, 8, **extra), src,
                          op=rng.choice([5, 6, 7])))
        else:
            length = rng.randrange(0, 3 * pmtu)
            addr = rng.randrange(0, (mem_bytes - length) // word) * word
            wrs.append(Wr(q, WorkRequest(wr_id, rng.choice(model.SEND_OPCODES), length,
                                         local_addr=addr, **extra), src))
    return wrs


def shuffle_qps(rng, queues):
    out = []
    while any(queues):
        q = rng.choice([k for k, w in enumerate(queues) if w])
        out.append(queues[q].pop(0))
    return out


@pytest.mark.parametrize("width,mem_log2,depth", [(64, 24, 2), (512, 32, 4)])
def test_reads_mixed_match_model(width, mem_log2, depth):
    """Every path MTU (one per QP), a QP whose PSN wraps, a QP not ready; at 4 GiB of local
    memory also a READ of 2^31-1 bytes in 256-byte PMTUs (2^23 PSNs)."""
    rng = random.Random(width + mem_log2)
    mem_bytes = 1 << mem_log2
    n = len(PMTUS) + 1
    qps = [random_qp(rng, pmtu=PMTUS[q % len(PMTUS)]) for q in range(n)]
    qps[0].psn = PSN_MOD - 3
    qps[n - 1].state = QpState.INIT                 # its READs: QP_NOT_READY
    queues = [read_mix(rng, q, qp, mem_bytes, width, 30) for q, qp in enumerate(qps)]
    if mem_log2 == 32:
        assert qps[0].pmtu == 256
        queues[0].insert(3, Wr(0, WorkRequest(99, WrOpcode.READ, (1 << 31) - 1,
                                              local_addr=(1 << 31) + 1, remote_offset=5)))
    wrs = shuffle_qps(rng, queues)
    exp = Expected(n)
    model_qps = [Qp(**vars(qp)) for qp in qps]
    statuses = [exp.add(w, model_qps, reads=True, width=width, mem_bytes=mem_bytes) for w in wrs]
    assert {CplStatus.OK, CplStatus.UNSUPPORTED, CplStatus.LOCAL_LENGTH,
            CplStatus.QP_NOT_READY} <= set(statuses)
    assert any(w.req.opcode == WrOpcode.READ and w.req.local_addr % (width // 8) and
               s == CplStatus.OK for w, s in zip(wrs, statuses))
    assert sum(map(len, exp.issues.values())) >= 5 * 6
    dut = ReadTop(n, width, mem_bytes, depth)
    bench = Bench(dut, rng.getrandbits(32))

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, wrs)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp, n)
    if mem_log2 == 32:
        post = next(p for p in bench.posts if p["wr_id"] == 99)
        assert post["last_psn"] == (exp.first[99] + (1 << 23) - 1) % PSN_MOD


@pytest.mark.parametrize("width", [64, 256])
def test_read_resumed_after_rewind(width):
    """Nothing completes; REWINDs with the acknowledged PSN inside a WRITE before a READ, inside
    the READ, at the READ's end and at a 0-byte READ: requests wholly acknowledged are skipped,
    the one holding the acknowledged PSN resumes after it (a READ as one request asking for
    the rest: address and length advanced, ``rd_issue`` with ``new`` 0 and the READ's first
    PSN), the later ones are sent again whole; no posts, no PSN writes."""
    rng = random.Random(width)
    mem_bytes = 1 << 20
    qps = [random_qp(rng, pmtu=256), random_qp(rng, pmtu=1024)]
    qps[0].psn = PSN_MOD - 4
    wrs = [Wr(0, WorkRequest(1, WrOpcode.WRITE, 3 * 256, local_addr=0x100,
                             remote_offset=0x10)),
           Wr(0, WorkRequest(2, WrOpcode.READ, 5 * 256 + 7, local_addr=0x2003,
                             remote_offset=0xFFFF_FFFF_FFFF_FF00)),
           Wr(0, WorkRequest(3, WrOpcode.SEND, 2 * 256, local_addr=0x4000)),
           Wr(0, WorkRequest(4, WrOpcode.READ, 0, local_addr=0x5001, remote_offset=9)),
           Wr(0, WorkRequest(5, WrOpcode.WRITE_IMM, 100, local_addr=0x6000, imm=7)),
           Wr(1, WorkRequest(6, WrOpcode.READ, 3 * 1024, local_addr=0x8005)),
           Wr(1, WorkRequest(7, WrOpcode.SEND_IMM, 10, local_addr=0xA000, imm=1))]
    exp = Expected(2)
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in wrs:
        assert exp.add(w, model_qps, reads=True, width=width, mem_bytes=mem_bytes) == \
            CplStatus.OK
    first = exp.first

    def last(w):
        return (first[w.req.wr_id] + model.psn_count(w.req, qps[w.qp].pmtu) - 1) % PSN_MOD

    # (QP, acknowledged PSN): inside request 1 (ahead of the READ), 2 PSNs into the READ, the
    # READ's last PSN, the 0-byte READ's PSN; on QP 1 nothing of its READ, then 1 PSN of it
    rounds = [(0, first[1] + 1), (0, first[2] + 2), (0, last(wrs[1])), (0, first[4]),
              (1, first[6] - 1), (1, first[6] + 1)]
    dut = ReadTop(2, width, mem_bytes, 8, auto_free=False)
    bench = Bench(dut, width + 1, bp=0.4)
    marks = []

    def resent(q, acked):
        out = Expected(2)
        for w in (w for w in wrs if w.qp == q):
            resume = (acked + 1) % PSN_MOD
            if (acked - last(w)) % PSN_MOD < 1 << 23:           # wholly acknowledged
                continue
            start = resume if (resume - first[w.req.wr_id]) % PSN_MOD < 1 << 23 else \
                first[w.req.wr_id]
            seg = seg_state(qps[q])
            out.packets(w, qps[q], model.resend(w.req, seg, first[w.req.wr_id], start),
                        first[w.req.wr_id], new=False)
        return out

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, wrs)
        await bench.wait_for(ctx, *exp.count())
        marks.append(bench.mark())
        for q, acked in rounds:
            want = resent(q, acked)
            await bench.set_acked(ctx, q, acked)
            await bench.rewind(ctx, q)
            await bench.wait_for(ctx, marks[-1][0] + want.count()[0], marks[-1][1])
            marks.append(bench.mark())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp, 2, end=marks[0])                   # the first pass, as new requests
    for (q, acked), start, end in zip(rounds, marks, marks[1:]):
        bench.check(resent(q, acked), 2, start, end)
    # what the rounds are meant to show
    into = [r for _, r in bench.issues if r["wr_id"] == 2 and not r["new"]]
    assert [(r["psn"] - r["first"]) % PSN_MOD for r in into] == [0, 3]
    assert all(r["first"] == first[2] and r["length"] == 5 * 256 + 7 and
               r["local_addr"] == 0x2003 for r in into)
    req = [d for d in bench.descs if d["wr_id"] == 2]
    assert [(d["psn"], d["dma_len"]) for d in req] == [
        (first[2], 5 * 256 + 7), (first[2], 5 * 256 + 7), ((first[2] + 3) % PSN_MOD, 2 * 256 + 7)]
    assert req[2]["va"] == (qps[0].base_va + 0xFFFF_FFFF_FFFF_FF00 + 3 * 256) % (1 << 64)
    assert [r["psn"] for _, r in bench.issues if r["wr_id"] == 6] == \
        [first[6], first[6], (first[6] + 2) % PSN_MOD]


@pytest.mark.parametrize("width", [64, 512])
def test_refusals(width):
    """Without ``reads`` a READ is refused with UNSUPPORTED (even unaligned or past the end of
    memory), and codes 5..7 as well, both ways; the send opcodes go on as before around them.
    With ``reads``: a READ past the end of local memory (from any source) gets LOCAL_LENGTH,
    one that ends exactly there or is unaligned is sent."""
    mem_bytes = 1 << 16
    word = width // 8
    rng = random.Random(width + 2)
    for reads in (False, True):
        qps = [random_qp(rng, pmtu=512)]

        def rd(k, addr, length, src=WrSource.USER):
            return Wr(0, WorkRequest(k, WrOpcode.READ, length, local_addr=addr), src)

        def send(k, addr=0, length=100, op=None):
            return Wr(0, WorkRequest(k, WrOpcode.SEND, length, local_addr=addr), op=op)
        wrs = [send(1), rd(2, 0, 600), rd(3, 3, 10), send(4, op=5), send(5, op=6),
               send(6, op=7), rd(7, mem_bytes - 600, 600), rd(8, mem_bytes - 599, 600),
               rd(9, mem_bytes - 599, 600, WrSource.GENERATOR), rd(10, mem_bytes, 0),
               rd(11, mem_bytes, 1, WrSource.STREAM), send(12, word // 2),
               send(13, mem_bytes - 64, 65), send(14, 64, 1000)]
        exp = Expected(1)
        model_qps = [Qp(**vars(qp)) for qp in qps]
        statuses = [exp.add(w, model_qps, reads=reads, width=width, mem_bytes=mem_bytes)
                    for w in wrs]
        U, L, A, OK = (CplStatus.UNSUPPORTED, CplStatus.LOCAL_LENGTH, CplStatus.LOCAL_ALIGN,
                       CplStatus.OK)
        assert statuses == ([OK, U, U, U, U, U, U, U, U, U, U, A, L, OK] if not reads else
                            [OK, OK, OK, U, U, U, OK, L, L, OK, L, A, L, OK])
        dut = ReadTop(1, width, mem_bytes, 2, reads=reads)
        bench = Bench(dut, width + reads)

        async def tb(ctx, qps=qps, wrs=wrs, bench=bench, exp=exp):
            await bench.configure(ctx, 0, qps[0])
            await bench.feed(ctx, wrs)
            await bench.wait_for(ctx, *exp.count())

        run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
        bench.check(exp, 1)
        assert bool(bench.issues) == reads


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_reads_parameter_is_validated():
    with pytest.raises(TypeError, match="reads"):
        Scheduler(2, 64, 1 << 16, reads=1)
    assert "rd_issue" not in Scheduler(2, 64, 1 << 16).signature.members
    assert "rd_issue" in Scheduler(2, 64, 1 << 16, reads=True).signature.members


@pytest.mark.parametrize("pmtu", PMTUS)
def test_model_read_request(pmtu):
    """The model's READ: one request (BTH opcode 0x0C, RETH of the whole READ, no payload,
    AckReq, no SE) that takes one PSN per path MTU (1 for 0 bytes); sent again from a PSN
    inside it, the request for the rest."""
    for length in (0, 1, pmtu - 1, pmtu, pmtu + 1, 5 * pmtu, 5 * pmtu + 3, (1 << 31) - 1):
        qp = model.QpSegment(dest_qpn=0x11, rkey=0xABCD, base_va=(1 << 64) - 0x100,
                           psn=PSN_MOD - 2, pmtu=pmtu)
        wr = WorkRequest(1, WrOpcode.READ, length, local_addr=0x1003, remote_offset=0x40)
        (pkt,) = model.segment(wr, qp)
        spans = max(1, (length + pmtu - 1) // pmtu)
        assert (pkt.opcode, pkt.psn, pkt.ack_req, pkt.se, pkt.padcnt, pkt.length, pkt.imm,
                pkt.last, pkt.psns) == (0x0C, PSN_MOD - 2, True, False, 0, 0, None, True, spans)
        assert pkt.reth == (0x40 - 0x100 + (1 << 64), 0xABCD, length)
        assert qp.psn == (PSN_MOD - 2 + spans) % PSN_MOD
        k = spans - 1
        (again,) = model.resend(wr, qp, PSN_MOD - 2, (PSN_MOD - 2 + k) % PSN_MOD)
        assert (again.psn, again.psns, again.offset) == ((PSN_MOD - 2 + k) % PSN_MOD, 1, k * pmtu)
        assert again.reth == ((0x40 - 0x100 + k * pmtu) % (1 << 64), 0xABCD, length - k * pmtu)
        with pytest.raises(ValueError, match="inside"):
            model.resend(wr, qp, PSN_MOD - 2, (PSN_MOD - 2 + spans) % PSN_MOD)
        frame = model.build_frame(pkt, b"", qp, src_mac=1, dst_mac=2, src_ip=3, dst_ip=4,
                                  udp_sport=5)
        bth = frame[H.ETH.length + H.IPV4.length + H.UDP.length:]
        assert len(bth) == H.BTH.length + H.RETH.length + 4          # + ICRC
        assert bth[0] == opc.OP_RC_RDMA_READ_REQUEST
