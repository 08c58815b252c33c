"""Work-request scheduler with a QP table against the segmentation model: several QPs
interleaved, every opcode, lengths around the path MTU, every path MTU, PSN wrap-around, every
refusal status, QP state changes, completion-tracker room (``full``), fairness and throughput,
with random idle input and random backpressure."""

import dataclasses
import random
from dataclasses import dataclass, field

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    FREED,
    PACKET_DESC,
    POST,
    WR_TAGGED,
    CplStatus,
    QpState,
    WrSource,
)
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE, QpTable
from rocegen.gateware.roce.requester.scheduler import Scheduler
from rocegen.sim.models.requester import requester as model
from rocegen.sim.models.requester.requester import PMTUS, PSN_MOD, WorkRequest, WrOpcode
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.tools.synth import convert_ports
from tests.tiers import full

#: Cycles after which a bench counts as hung (every bench here needs far fewer).
DEADLINE = 50_000


class SchedulerTop(wiring.Component):
    """A scheduler reading and advancing a QP table, as in the requester. Each work request's
    slot is freed in the cycle after its post leaves (as if it completed at once), or, without
    ``free_on_post``, when the bench pulses ``freed``; nothing is ever acknowledged and the
    window is as large as it can be, so it never closes."""

    def __init__(self, num_qps, width, mem_bytes, depth, *, free_on_post=True):
        self.num_qps = num_qps
        self.free_on_post = free_on_post
        self.sched = Scheduler(num_qps, width, mem_bytes, depth, window=(1 << 23) - 1)
        self.table = QpTable(num_qps)
        super().__init__({
            "wr": In(stream.Signature(WR_TAGGED)),
            "desc": Out(stream.Signature(PACKET_DESC)),
            "post": Out(stream.Signature(POST)),
            "full": In(num_qps),
            "ctl": In(stream.Signature(CONTEXT_WRITE)),
            "ctl_psn": In(stream.Signature(PSN_WRITE)),
            "room": Out(num_qps),
            "room_next": Out(num_qps),
            "busy": Out(num_qps),
            **({} if free_on_post else {"freed": In(stream.Signature(FREED, always_ready=True))}),
        })

    def elaborate(self, platform):
        m = Module()
        s = m.submodules.sched = self.sched
        m.d.comb += [self.room.eq(s.room), self.room_next.eq(s.room_next), self.busy.eq(s.busy)]
        t = m.submodules.table = self.table
        wiring.connect(m, wiring.flipped(self.wr), s.wr)
        wiring.connect(m, s.desc, wiring.flipped(self.desc))
        wiring.connect(m, s.post, wiring.flipped(self.post))
        wiring.connect(m, s.psn_w, t.psn_w)
        wiring.connect(m, wiring.flipped(self.ctl), t.ctl)
        wiring.connect(m, wiring.flipped(self.ctl_psn), t.ctl_psn)
        m.d.comb += [t.rd_qp.eq(s.rd_qp), s.rd_context.eq(t.rd_context),
                     s.rd_psn.eq(t.rd_psn), s.full.eq(self.full)]
        m.d.comb += s.sent.ready.eq(1)
        if not self.free_on_post:
            wiring.connect(m, wiring.flipped(self.freed), s.freed)
            return m
        m.d.sync += [s.freed.valid.eq(s.post.valid & s.post.ready &
                                      (s.post.payload.qp < self.num_qps)),
                     s.freed.payload.eq(s.post.payload.qp)]
        return m


@dataclass
class Qp:
    """A QP's context as the test writes it into the QP table."""
    state: QpState
    pmtu: int
    psn: int
    ack_every: int = 4
    peer_ip: int = 0x0A000002
    peer_qpn: int = 0x000123
    rkey: int = 0x1234
    base_va: int = 0x1000_0000
    udp_sport: int = 0xC000
    dscp: int = 0
    ecn: int = 0

    def context(self):
        return {"state": self.state, "peer_ip": self.peer_ip, "peer_qpn": self.peer_qpn,
                "rkey": self.rkey, "base_va": self.base_va,
                "pmtu_log2": self.pmtu.bit_length() - 1, "udp_sport": self.udp_sport,
                "dscp": self.dscp, "ecn": self.ecn,
                "ack_every_log2": self.ack_every.bit_length() - 1,
                "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


def random_qp(rng, state=QpState.RTS, pmtu=None):
    return Qp(state=state, pmtu=pmtu or rng.choice(PMTUS),
              psn=rng.choice([0, PSN_MOD - 3, rng.getrandbits(24)]),
              ack_every=1 << rng.randrange(0, 5), peer_ip=rng.getrandbits(32),
              peer_qpn=rng.getrandbits(24), rkey=rng.getrandbits(32), base_va=rng.getrandbits(64),
              udp_sport=0xC000 | rng.getrandbits(14), dscp=rng.getrandbits(6),
              ecn=rng.getrandbits(2))


@dataclass(frozen=True)
class Wr:
    """A work request as posted: the model's request plus its QP index and source."""
    qp: int
    req: WorkRequest
    src: WrSource = WrSource.USER

    def payload(self):
        r = self.req
        return {"wr": {"wr_id": r.wr_id, "qp": self.qp, "opcode": r.opcode.value,
                       "local_addr": r.local_addr, "length": r.length,
                       "remote_offset": r.remote_offset, "imm": r.imm},
                "src": self.src}


def address_status(wr, width, mem_bytes):
    """The refusal a request earns from its addresses alone (None: none)."""
    if wr.req.local_addr % (width // 8):
        return CplStatus.LOCAL_ALIGN
    if wr.src != WrSource.GENERATOR and wr.req.local_addr + wr.req.length > mem_bytes:
        return CplStatus.LOCAL_LENGTH
    return None


@dataclass
class Expected:
    """Per QP, the posts and descriptors the scheduler must produce, in order."""
    posts: dict = field(default_factory=dict)       # qp -> [(wr_id, src, status, last_psn)]
    descs: dict = field(default_factory=dict)       # qp -> [dict of descriptor fields]
    bad: list = field(default_factory=list)         # [(wr_id, qp, src)] refused with BAD_QP

    def add(self, wr, qps, width, mem_bytes):
        """Account for ``wr`` given the QPs' current (model) state; advances their PSNs."""
        if wr.qp >= len(qps):
            self.bad.append((wr.req.wr_id, wr.qp, wr.src))
            return
        qp = qps[wr.qp]
        status = address_status(wr, width, mem_bytes)
        if status is None and qp.state != QpState.RTS:
            status = CplStatus.QP_NOT_READY
        posts = self.posts.setdefault(wr.qp, [])
        if status is not None:
            posts.append((wr.req.wr_id, wr.src, status, 0))
            return
        seg = model.QpSegment(dest_qpn=qp.peer_qpn, rkey=qp.rkey, base_va=qp.base_va, psn=qp.psn,
                            pmtu=qp.pmtu, ack_every=qp.ack_every)
        packets = segment_of(wr, seg)
        qp.psn = seg.psn
        posts.append((wr.req.wr_id, wr.src, CplStatus.OK, packets[-1].psn))
        self.descs.setdefault(wr.qp, []).extend(
            expected_desc(wr, qp, p) for p in packets)

    def count(self):
        return (sum(map(len, self.descs.values())),
                sum(map(len, self.posts.values())) + len(self.bad))


def segment_of(wr, seg):
    return model.segment(wr.req, seg)


def expected_desc(wr, qp, p):
    d = {"wr_id": wr.req.wr_id, "qp": wr.qp, "dest_qpn": qp.peer_qpn, "opcode": p.opcode,
         "psn": p.psn, "ack_req": int(p.ack_req), "se": int(p.se), "padcnt": p.padcnt,
         "local_addr": (wr.req.local_addr + p.offset) % (1 << 32), "length": p.length,
         "has_reth": int(p.reth is not None), "has_imm": int(p.imm is not None),
         "last": int(p.last), "src": wr.src.value, "peer_ip": qp.peer_ip,
         "udp_sport": qp.udp_sport, "dscp": qp.dscp, "ecn": qp.ecn}
    if p.reth is not None:
        d["va"], d["rkey"], d["dma_len"] = p.reth
    if p.imm is not None:
        d["imm"] = p.imm
    return d


def got_desc(payload):
    d = meta_dict(payload)
    if not d["has_reth"]:
        del d["va"], d["rkey"], d["dma_len"]
    if not d["has_imm"]:
        del d["imm"]
    return d


class Bench:
    """Drives a :class:`SchedulerTop`: configures QPs, feeds work requests with random idle
    cycles, takes descriptors and posts with random backpressure, and plays the completion
    tracker: each QP has room for ``room`` posts, freed at random, and ``full`` follows its
    occupancy as a registered tracker would."""

    def __init__(self, dut, seed, *, idle=0.3, desc_bp=0.3, post_bp=0.3, room=2, release=0.2):
        self.dut = dut
        self.n = dut.sched.num_qps
        self.rng = random.Random(seed)
        self.idle, self.desc_bp, self.post_bp = idle, desc_bp, post_bp
        self.room, self.release = room, release
        self.descs = []            # (cycle, dict)
        self.posts = []            # (cycle, dict)
        self.occupancy = [0] * self.n
        self.overflow = []
        self.hold_full = set()     # QPs the bench keeps `full` on for
        self.noise = 0.0           # chance per cycle of a control-side PSN write (see psn_noise)
        self.cycle = 0
        self.noise_cycles = 0

    async def configure(self, ctx, index, qp, *, psn=True):
        ctx.set(self.dut.ctl.payload, {"qp": index, "context": qp.context()})
        ctx.set(self.dut.ctl.valid, 1)
        if psn:
            ctx.set(self.dut.ctl_psn.payload, {"qp": index, "psn": qp.psn})
            ctx.set(self.dut.ctl_psn.valid, 1)
        await ctx.tick()
        ctx.set(self.dut.ctl.valid, 0)
        ctx.set(self.dut.ctl_psn.valid, 0)

    async def feed(self, ctx, wrs, idle=None):
        idle = self.idle if idle is None else idle
        for wr in wrs:
            while idle and self.rng.random() < idle:
                ctx.set(self.dut.wr.valid, 0)
                await ctx.tick()
            ctx.set(self.dut.wr.payload, wr.payload())
            ctx.set(self.dut.wr.valid, 1)
            await ctx.tick().until(self.dut.wr.ready)
        ctx.set(self.dut.wr.valid, 0)

    async def wait_for(self, ctx, n_descs, n_posts):
        while len(self.descs) < n_descs or len(self.posts) < n_posts:
            await ctx.tick()
        for _ in range(20):       # nothing more may come
            await ctx.tick()

    async def psn_noise(self, ctx):
        """Control-side PSN writes to a QP outside the table: they change nothing but hold the
        scheduler's PSN writes off (``psn_w.ready`` low) in their cycles."""
        while True:
            if not self.noise:              # leaves the port to the configuration meanwhile
                await ctx.tick()
                continue
            on = self.rng.random() < self.noise
            ctx.set(self.dut.ctl_psn.payload, {"qp": self.n, "psn": 0})
            ctx.set(self.dut.ctl_psn.valid, on)
            await ctx.tick()
            if on:
                self.noise_cycles += 1

    async def outputs(self, ctx):
        dut, rng = self.dut, self.rng
        while True:
            d_ready = not (self.desc_bp and rng.random() < self.desc_bp)
            p_ready = not (self.post_bp and rng.random() < self.post_bp)
            ctx.set(dut.desc.ready, d_ready)
            ctx.set(dut.post.ready, p_ready)
            _, _, dv, dp, pv, pp = await ctx.tick().sample(dut.desc.valid, dut.desc.payload,
                                                           dut.post.valid, dut.post.payload)
            self.cycle += 1
            if dv and d_ready:
                self.descs.append((self.cycle, got_desc(dp)))
            if pv and p_ready:
                post = meta_dict(pp)
                self.posts.append((self.cycle, post))
                q = post["qp"]
                if q < self.n:
                    self.occupancy[q] += 1
                    if self.occupancy[q] > self.room:
                        self.overflow.append((self.cycle, q))
            for q in range(self.n):
                if self.occupancy[q] and rng.random() < self.release:
                    self.occupancy[q] -= 1
            ctx.set(dut.full, sum(1 << q for q in range(self.n)
                                  if self.occupancy[q] >= self.room or q in self.hold_full))

    def check(self, exp):
        assert not self.overflow, f"posts beyond the tracker's room: {self.overflow[:5]}"
        n_descs, n_posts = exp.count()
        assert len(self.descs) == n_descs
        assert len(self.posts) == n_posts
        for q in range(self.n):
            got = [d for _, d in self.descs if d["qp"] == q]
            want = exp.descs.get(q, [])
            assert len(got) == len(want), f"QP {q}: {len(got)} descriptors, expected {len(want)}"
            for k, (g, w) in enumerate(zip(got, want)):
                assert g == w, f"QP {q} descriptor {k}:\n got {g}\nwant {w}"
            got_posts = [(p["wr_id"], WrSource(p["src"]), CplStatus(p["status"]), p["last_psn"])
                         for _, p in self.posts if p["qp"] == q]
            assert got_posts == exp.posts.get(q, []), f"QP {q} posts"
        got_bad = [(p["wr_id"], p["qp"], WrSource(p["src"])) for _, p in self.posts
                   if p["qp"] >= self.n]
        assert all(p["status"] == CplStatus.BAD_QP.value for _, p in self.posts
                   if p["qp"] >= self.n)
        assert got_bad == exp.bad


def room_monitor(dut, stats):
    """Checks the scheduler's ``room`` / ``room_next`` against what ``wr`` does: a request of a
    QP in the table is taken exactly when ``room`` has its bit; after a request of QP q is
    taken while ``room_next`` has q's bit, ``room`` has it in the next cycle."""
    n = dut.num_qps

    async def run(ctx):
        promised = None
        async for _, _, valid, ready, qp, room, room_next in ctx.tick().sample(
                dut.wr.valid, dut.wr.ready, dut.wr.payload.wr.qp, dut.room, dut.room_next):
            if promised is not None:
                assert room >> promised & 1, f"room_next promised QP {promised} room, none came"
                stats["kept"] += 1
            promised = None
            if valid and qp < n:
                assert ready == (room >> qp & 1), f"wr.ready {ready}, room of QP {qp} {room:b}"
                stats["full"] += not ready
                if ready and room_next >> qp & 1:
                    promised = qp
    return run


def lengths_for(rng, pmtu):
    return [0, 1, pmtu - 1, pmtu, pmtu + 1, 2 * pmtu, 3 * pmtu + 7, rng.randrange(1, 4 * pmtu)]


def random_wrs(rng, qps, width, mem_bytes, *, per_qp, errors=0.15, bad=0.03):
    """Work requests of every opcode for every QP, lengths around each QP's path MTU, with some
    refusals mixed in, shuffled across QPs (order kept per QP)."""
    word = width // 8
    queues = []
    for q, qp in enumerate(qps):
        lengths = lengths_for(rng, qp.pmtu)
        lengths += [rng.randrange(0, 3 * qp.pmtu) for _ in range(max(0, per_qp - len(lengths)))]
        rng.shuffle(lengths)
        wrs = []
        for k, length in enumerate(lengths[:per_qp]):
            src = rng.choice([WrSource.USER, WrSource.STREAM, WrSource.GENERATOR])
            addr = rng.randrange(0, max(1, (mem_bytes - length) // word)) * word
            roll = rng.random()
            if errors and k in (1, 2):                  # at least one of each address error
                roll = errors / 4 if k == 1 else errors * 3 / 4
                if k == 2:
                    src, length = WrSource.USER, max(length, word + 1)
            if roll < errors / 2:                       # misaligned
                addr += rng.randrange(1, word)
            elif roll < errors:                         # past the end of local memory
                addr = (mem_bytes - length) // word * word + word * rng.randrange(1, 64)
                addr = min(addr, (1 << 32) - word)
            req = WorkRequest(wr_id=(q << 24) | k, opcode=WrOpcode(k % 4 if k < 4 else
                                                                    rng.randrange(4)),
                              length=length, local_addr=addr % (1 << 32),
                              remote_offset=rng.getrandbits(48), imm=rng.getrandbits(32))
            wrs.append(Wr(q, req, src))
        queues.append(wrs)
    out = []
    while any(queues):
        q = rng.choice([k for k, w in enumerate(queues) if w])
        out.append(queues[q].pop(0))
        if rng.random() < bad:
            out.append(Wr(rng.randrange(len(qps), 256),
                          WorkRequest(wr_id=rng.getrandbits(32), opcode=WrOpcode.SEND, length=8),
                          rng.choice(list(WrSource))))
    return out


@pytest.mark.parametrize("width,num_qps,depth,mem_log2,per_qp", [
    (64, 4, 2, 16, 150), (512, 3, 1, 20, 150), full(512, 4, 4, 32, 150), full(128, 2, 2, 18, 150),
    full(256, 1, 2, 16, 150), full(64, 16, 2, 20, 40), full(512, 13, 8, 24, 40)])
def test_matches_model(width, num_qps, depth, mem_log2, per_qp):
    rng = random.Random(width * 1000 + num_qps * 10 + depth)
    mem_bytes = 1 << mem_log2
    dut = SchedulerTop(num_qps, width, mem_bytes, depth)
    qps = [random_qp(rng, pmtu=PMTUS[(q + num_qps + depth) % len(PMTUS)]) for q in range(num_qps)]
    if num_qps >= 3:
        qps[1].state = QpState.INIT                 # every request of QP 1: QP_NOT_READY
    qps[0].psn = PSN_MOD - 2                        # PSN wraps inside QP 0's first messages
    wrs = random_wrs(rng, qps, width, mem_bytes, per_qp=per_qp)
    bench = Bench(dut, rng.getrandbits(32))
    room = {"kept": 0, "full": 0}
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for wr in wrs:
        exp.add(wr, model_qps, width, mem_bytes)
    statuses = {s for p in exp.posts.values() for *_, s, _ in p}
    assert CplStatus.OK in statuses and CplStatus.LOCAL_ALIGN in statuses
    assert CplStatus.LOCAL_LENGTH in statuses

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        bench.noise = 0.3
        await bench.feed(ctx, wrs)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs, bench.psn_noise,
                                              room_monitor(dut, room)],
            deadline_cycles=DEADLINE)
    bench.check(exp)
    assert bench.noise_cycles
    assert room["full"] > 10 and (room["kept"] > 10 or depth <= 2), room


def test_every_refusal():
    """Each status on its own, with the boundaries of the address checks."""
    width, mem_bytes = 512, 1 << 16
    rng = random.Random(7)
    dut = SchedulerTop(2, width, mem_bytes, 2)
    qps = [random_qp(rng, pmtu=1024), random_qp(rng, state=QpState.RTR, pmtu=256)]

    def wr(qp, k, addr, length, src=WrSource.USER):
        return Wr(qp, WorkRequest(wr_id=k, opcode=WrOpcode.WRITE, length=length,
                                  local_addr=addr), src)
    wrs = [
        wr(0, 1, 0, 100),
        wr(0, 2, 8, 100),                               # LOCAL_ALIGN (W/8 = 64)
        wr(0, 3, 32, 0),                                # LOCAL_ALIGN, even when empty
        wr(0, 4, mem_bytes - 64, 64),                   # ends at the memory's end: OK
        wr(0, 5, mem_bytes - 64, 65),                   # LOCAL_LENGTH
        wr(0, 6, mem_bytes, 0),                         # OK: empty, at the end
        wr(0, 7, mem_bytes, 1),                         # LOCAL_LENGTH
        wr(0, 8, 1 << 31, 5000, WrSource.GENERATOR),    # pattern: no length check
        wr(0, 9, 4, 8, WrSource.GENERATOR),             # but aligned all the same
        wr(2, 10, 0, 8),                                # BAD_QP
        wr(255, 11, 0, 8, WrSource.STREAM),             # BAD_QP
        wr(1, 12, 0, 8),                                # QP_NOT_READY (RTR)
        wr(1, 13, 8, 8),                                # LOCAL_ALIGN before the QP state
        wr(0, 14, 64, 3000),
    ]
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in wrs:
        exp.add(w, model_qps, width, mem_bytes)
    assert [s for *_, s, _ in exp.posts[0]] == [
        CplStatus.OK, CplStatus.LOCAL_ALIGN, CplStatus.LOCAL_ALIGN, CplStatus.OK,
        CplStatus.LOCAL_LENGTH, CplStatus.OK, CplStatus.LOCAL_LENGTH, CplStatus.OK,
        CplStatus.LOCAL_ALIGN, CplStatus.OK]
    assert [s for *_, s, _ in exp.posts[1]] == [CplStatus.QP_NOT_READY, CplStatus.LOCAL_ALIGN]
    bench = Bench(dut, 3)

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, wrs)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp)


def test_qp_state_changes():
    """A QP taken out of RTS through the QP table's control port refuses its requests with
    QP_NOT_READY; back in RTS with a new PSN it sends again from that PSN. Changes made while
    requests flow split them into sent and refused ones, in order, with consistent PSNs."""
    width, mem_bytes = 64, 1 << 20
    rng = random.Random(11)
    dut = SchedulerTop(2, width, mem_bytes, 2)
    qps = [random_qp(rng, pmtu=256), random_qp(rng, pmtu=512)]
    bench = Bench(dut, 5)
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]

    def batch(per_qp):
        return random_wrs(rng, model_qps, width, mem_bytes, per_qp=per_qp, errors=0, bad=0)

    phases = [batch(4), batch(4), batch(4)]
    dynamic = [w for w in batch(16) if w.qp == 1]
    got = {}

    def sent_in_turn(posts, first_psn):
        """The descriptors of the requests of ``dynamic`` posted OK, PSNs chained."""
        qp = Qp(**vars(model_qps[1]))
        qp.psn = first_psn
        want = []
        for w, p in zip(dynamic, posts):
            if p["status"] == CplStatus.OK.value:
                seg = model.QpSegment(dest_qpn=qp.peer_qpn, rkey=qp.rkey, base_va=qp.base_va,
                                    psn=qp.psn, pmtu=qp.pmtu, ack_every=qp.ack_every)
                packets = segment_of(w, seg)
                qp.psn = seg.psn
                assert p["last_psn"] == packets[-1].psn
                want += [expected_desc(w, qp, k) for k in packets]
        return want

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        # 1: both QPs in RTS
        for w in phases[0]:
            exp.add(w, model_qps, width, mem_bytes)
        await bench.feed(ctx, phases[0])
        await bench.wait_for(ctx, *exp.count())
        # 2: QP 1 in ERROR: all its requests refused, QP 0 unaffected
        model_qps[1].state = QpState.ERROR
        await bench.configure(ctx, 1, model_qps[1], psn=False)
        for w in phases[1]:
            exp.add(w, model_qps, width, mem_bytes)
        await bench.feed(ctx, phases[1])
        await bench.wait_for(ctx, *exp.count())
        # 3: QP 1 back in RTS with a new PSN
        model_qps[1].state = QpState.RTS
        model_qps[1].psn = PSN_MOD - 1
        await bench.configure(ctx, 1, model_qps[1])
        for w in phases[2]:
            exp.add(w, model_qps, width, mem_bytes)
        await bench.feed(ctx, phases[2])
        await bench.wait_for(ctx, *exp.count())
        bench.check(exp)
        got["start"] = len(bench.posts), len(bench.descs)

        # 4: QP 1 goes in and out of RTS (to RTR) at random cycles while its requests flow
        pending, rts, toggles, wait = list(dynamic), True, 0, rng.randrange(5, 30)
        while pending or toggles < 10:
            if wait == 0 and toggles < 10:
                rts = not rts
                model_qps[1].state = QpState.RTS if rts else QpState.RTR
                ctx.set(dut.ctl.payload, {"qp": 1, "context": model_qps[1].context()})
                ctx.set(dut.ctl.valid, 1)
                toggles += 1
                wait = rng.randrange(5, 30)
            else:
                ctx.set(dut.ctl.valid, 0)
                wait = max(0, wait - 1)
            ctx.set(dut.wr.valid, bool(pending))
            if pending:
                ctx.set(dut.wr.payload, pending[0].payload())
            _, _, valid, ready = await ctx.tick().sample(dut.wr.valid, dut.wr.ready)
            if valid and ready:
                pending.pop(0)
        ctx.set(dut.wr.valid, 0)
        ctx.set(dut.ctl.valid, 0)
        while len(bench.posts) < got["start"][0] + len(dynamic):
            await ctx.tick()
        posts = [p for _, p in bench.posts[got["start"][0]:]]
        got["want"] = sent_in_turn(posts, model_qps[1].psn)
        await bench.wait_for(ctx, got["start"][1] + len(got["want"]), len(bench.posts))

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    posts = [p for _, p in bench.posts[got["start"][0]:]]
    assert [p["wr_id"] for p in posts] == [w.req.wr_id for w in dynamic]
    assert {CplStatus(p["status"]) for p in posts} == {CplStatus.OK, CplStatus.QP_NOT_READY}
    assert all(p["qp"] == 1 for p in posts)
    assert [d for _, d in bench.descs[got["start"][1]:]] == got["want"]


def test_fairness_and_rate():
    """Four busy QPs, no backpressure: the QPs take strict turns, one descriptor per cycle while
    all four have packets to send (a QP has one turn in the four-stage pipeline at a time), and
    each request is posted in the cycle its first descriptor is offered."""
    rng = random.Random(3)
    dut = SchedulerTop(4, 64, 1 << 20, 4)       # every request fits in its queue
    qps = [random_qp(rng, pmtu=256) for _ in range(4)]
    wrs = []
    for k in range(4):
        for q in range(4):
            wrs.append(Wr(q, WorkRequest(wr_id=q * 100 + k, opcode=WrOpcode(k % 4),
                                         length=rng.randrange(2, 10) * 256 - k)))
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in wrs:
        exp.add(w, model_qps, 64, 1 << 20)
    bench = Bench(dut, 1, idle=0, desc_bp=0, post_bp=0, room=8, release=1)

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, wrs)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp)
    order = [d["qp"] for _, d in bench.descs]
    # from the first turn of the last QP to start, while all four have packets left, the turns
    # rotate strictly
    remaining = [len(exp.descs[q]) for q in range(4)]
    start = max(order.index(q) for q in range(4))
    for k, q in enumerate(order[:-1]):
        remaining[q] -= 1
        if k >= start and all(remaining):
            assert order[k + 1] == (q + 1) % 4, f"turn {k + 1}: {order[max(0, k - 4):k + 4]}"
    # one descriptor every cycle while all four QPs have packets left
    remaining = [len(exp.descs[q]) for q in range(4)]
    busy = []
    for (c, d) in bench.descs:
        if all(remaining):
            busy.append(c)
        remaining[d["qp"]] -= 1
    assert len(busy) > 40
    assert busy[-1] - busy[0] == len(busy) - 1
    firsts = {(d["qp"], d["wr_id"]): c for c, d in reversed(bench.descs)}
    for c, p in bench.posts:
        assert firsts[(p["qp"], p["wr_id"])] == c


@pytest.mark.parametrize("num_qps,desc_bp", [(4, 0.5), (8, 0.7), (16, 0.9)])
def test_turns_rotate_under_backpressure(num_qps, desc_bp):
    """Busy QPs and outputs that stall at random: a stall never costs a QP its place, the turns
    rotate strictly in QP order while every QP has packets to send (each QP's share of the
    packets is equal to within one)."""
    rng = random.Random(num_qps)
    dut = SchedulerTop(num_qps, 64, 1 << 20, 4)
    qps = [random_qp(rng, pmtu=256) for _ in range(num_qps)]
    wrs = [Wr(q, WorkRequest(wr_id=q * 100 + k, opcode=WrOpcode.WRITE,
                             length=rng.randrange(6, 12) * 256))
           for k in range(3) for q in range(num_qps)]
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in wrs:
        exp.add(w, model_qps, 64, 1 << 20)
    bench = Bench(dut, num_qps, idle=0, desc_bp=desc_bp, post_bp=0, room=8, release=1)

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, wrs)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp)
    order = [d["qp"] for _, d in bench.descs]
    remaining = [len(exp.descs[q]) for q in range(num_qps)]
    start = max(order.index(q) for q in range(num_qps))
    checked = 0
    for k, q in enumerate(order[:-1]):
        remaining[q] -= 1
        if k >= start and all(remaining):
            assert order[k + 1] == (q + 1) % num_qps, \
                f"turn {k + 1}: {order[max(0, k - num_qps):k + num_qps]}"
            checked += 1
    assert checked > 4 * num_qps


@pytest.mark.parametrize("width", [64, 512])
def test_throughput_one_qp(width):
    """One QP, no backpressure: the first descriptor 5 cycles after the request, then a long
    message gets a descriptor every 3 cycles (a QP has one turn in the select, read and build
    stages at a time); single-packet messages back to back one every 3 cycles too (4 slots per QP: a slot
    stays taken until its request completes, here in the cycle after its post)."""
    rng = random.Random(width)
    dut = SchedulerTop(2, width, 1 << 24, 4)
    qps = [random_qp(rng, pmtu=256), random_qp(rng, pmtu=4096)]
    long_wr = Wr(1, WorkRequest(wr_id=1, opcode=WrOpcode.WRITE, length=4096 * 150 + 5))
    shorts = [Wr(0, WorkRequest(wr_id=10 + k, opcode=WrOpcode(k % 4), length=k * 8))
              for k in range(40)]
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    bench = Bench(dut, 2, idle=0, desc_bp=0, post_bp=0, room=64, release=1)
    accepted = HandshakeMonitor(dut.wr)
    marks = {}

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        exp.add(long_wr, model_qps, width, 1 << 24)
        await bench.feed(ctx, [long_wr])
        await bench.wait_for(ctx, *exp.count())
        marks["long"] = len(bench.descs)
        for w in shorts:
            exp.add(w, model_qps, width, 1 << 24)
        await bench.feed(ctx, shorts)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs, accepted.run],
            deadline_cycles=DEADLINE)
    bench.check(exp)
    assert bench.descs[0][0] - accepted.cycles[0] == 5          # latency of an idle QP
    long_cycles = [c for c, _ in bench.descs[:marks["long"]]]
    assert len(long_cycles) == 151
    assert long_cycles[-1] - long_cycles[0] == 3 * 150           # 3 cycles per descriptor
    short_cycles = [c for c, _ in bench.descs[marks["long"]:]]
    assert (short_cycles[-1] - short_cycles[0]) / (len(short_cycles) - 1) <= 3


@pytest.mark.parametrize("width", [64, full(512)])
def test_holds_more_than_64_requests(width):
    """One QP of a scheduler of ``depth`` 128 (more than the 64 a QP once held at most) takes
    and sends 128 requests while none completes, then holds the 129th (``wr.ready`` and
    ``room`` low, the QP busy) until one completes, and takes it one cycle after the slot is
    freed; with random idle input and backpressure on the descriptors and posts."""
    depth = 128
    rng = random.Random(128 + width)
    dut = SchedulerTop(1, width, 1 << 16, depth, free_on_post=False)
    qp = random_qp(rng, pmtu=256)
    wrs = [Wr(0, WorkRequest(wr_id=k, opcode=WrOpcode(k % 4), length=rng.randrange(0, 600),
                             local_addr=rng.randrange(0, 32) * (width // 8)))
           for k in range(depth + 1)]
    exp = Expected()
    model_qps = [Qp(**vars(qp))]
    for w in wrs:
        exp.add(w, model_qps, width, 1 << 16)
    first_descs = sum(d["wr_id"] < depth for d in exp.descs[0])     # those of the first 128
    bench = Bench(dut, width, room=2 * depth, release=0)
    seen = {}

    async def tb(ctx):
        await bench.configure(ctx, 0, qp)
        await bench.feed(ctx, wrs[:depth])
        while len(bench.descs) < first_descs or len(bench.posts) < depth:
            await ctx.tick()
        ctx.set(dut.wr.payload, wrs[depth].payload())
        ctx.set(dut.wr.valid, 1)
        for _ in range(50):                 # nothing completes: the 129th waits
            await ctx.tick()
            assert not ctx.get(dut.wr.ready) and not ctx.get(dut.room)
        seen["busy"] = ctx.get(dut.busy)
        seen["before"] = (len(bench.descs), len(bench.posts))
        ctx.set(dut.freed.payload, 0)       # the oldest completes: its slot is free
        ctx.set(dut.freed.valid, 1)
        await ctx.tick()
        ctx.set(dut.freed.valid, 0)
        assert not ctx.get(dut.wr.ready)    # (a slot freed counts one cycle later)
        await ctx.tick()
        assert ctx.get(dut.wr.ready)
        await ctx.tick()
        ctx.set(dut.wr.valid, 0)
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp)
    assert seen["busy"] == 1
    assert seen["before"] == (first_descs, depth)
    assert exp.count()[0] > first_descs                 # the 129th sent something after


def test_full_holds_starts_only():
    """`full` of a QP stops its next request from starting but not the message in progress;
    other QPs go on meanwhile."""
    rng = random.Random(9)
    dut = SchedulerTop(2, 64, 1 << 20, 2)
    qps = [random_qp(rng, pmtu=256), random_qp(rng, pmtu=256)]
    a = [Wr(0, WorkRequest(wr_id=k, opcode=WrOpcode.SEND, length=256 * 5)) for k in range(2)]
    b = [Wr(1, WorkRequest(wr_id=100 + k, opcode=WrOpcode.SEND, length=256 * 4))
         for k in range(4)]
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in a + b:
        exp.add(w, model_qps, 64, 1 << 20)
    bench = Bench(dut, 4, idle=0, desc_bp=0.2, post_bp=0.2, room=8, release=0)
    seen = {}

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, a[:1])
        while not bench.posts:
            await ctx.tick()
        bench.hold_full.add(0)              # QP 0's tracker is full from now on
        await bench.feed(ctx, a[1:] + b)
        for _ in range(300):                # QP 1 goes on while QP 0 waits
            await ctx.tick()
        seen["posts"] = [p["wr_id"] for _, p in bench.posts]
        seen["descs"] = [d["qp"] for _, d in bench.descs]
        bench.hold_full.clear()
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp)
    assert seen["posts"] == [0, 100, 101, 102, 103]      # QP 0's second request did not start
    assert seen["descs"].count(0) == 5                    # but its first message finished
    assert seen["descs"].count(1) == 16


def test_full_rising_after_selection():
    """A request picked to start whose QP's `full` rises before it can be posted gives its turn
    away (the other QP's long message is not held up) and starts once there is room."""
    rng = random.Random(10)
    dut = SchedulerTop(2, 512, 1 << 20, 2)
    qps = [random_qp(rng, pmtu=256), random_qp(rng, pmtu=256)]
    a = [Wr(0, WorkRequest(wr_id=k, opcode=WrOpcode.SEND, length=8)) for k in range(2)]
    b = [Wr(1, WorkRequest(wr_id=100, opcode=WrOpcode.WRITE, length=256 * 40))]
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in a + b:
        exp.add(w, model_qps, 512, 1 << 20)
    # room for one post per QP, none freed until the end
    bench = Bench(dut, 8, idle=0, desc_bp=0, post_bp=0, room=1, release=0)
    seen = {}

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, a + b)
        for _ in range(200):                # QP 1 alone: a packet every 3 cycles
            await ctx.tick()
        seen["posts"] = [p["wr_id"] for _, p in bench.posts]
        seen["descs"] = [d["wr_id"] for _, d in bench.descs]
        bench.room = 8
        await bench.wait_for(ctx, *exp.count())

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    bench.check(exp)
    assert seen["posts"] == [0, 100]
    assert seen["descs"].count(100) == 40


def test_longest_message():
    """A message of 2^31-1 bytes in 256-byte packets (2^23 of them): the post's last PSN, and
    the first packets, interleaved with another QP whose requests end at the top of a 4 GiB
    local memory."""
    rng = random.Random(13)
    width, mem_bytes = 512, 1 << 32
    dut = SchedulerTop(2, width, mem_bytes, 2)
    qps = [random_qp(rng, pmtu=256), random_qp(rng, pmtu=4096)]
    qps[0].psn = 5
    huge = Wr(0, WorkRequest(wr_id=1, opcode=WrOpcode.WRITE_IMM, length=(1 << 31) - 1,
                             local_addr=1 << 31, remote_offset=7, imm=9))
    top = [Wr(1, WorkRequest(wr_id=2, opcode=WrOpcode.SEND, length=4096,
                             local_addr=mem_bytes - 4096)),
           Wr(1, WorkRequest(wr_id=3, opcode=WrOpcode.SEND, length=4097,
                             local_addr=mem_bytes - 4096)),
           Wr(1, WorkRequest(wr_id=4, opcode=WrOpcode.WRITE, length=3 * 4096 - 1,
                             local_addr=mem_bytes - 3 * 4096))]
    # its first 40 packets are those of a 41-packet message but for the RETH's DMA length
    head = Wr(0, dataclasses.replace(huge.req, length=41 * 256))
    seg = model.QpSegment(dest_qpn=qps[0].peer_qpn, rkey=qps[0].rkey, base_va=qps[0].base_va,
                        psn=qps[0].psn, pmtu=256, ack_every=qps[0].ack_every)
    want0 = [expected_desc(head, qps[0], p) for p in segment_of(head, seg)[:40]]
    want0[0]["dma_len"] = huge.req.length
    want0 = [{**d, "wr_id": 1} for d in want0]
    exp = Expected()
    model_qps = [Qp(**vars(qp)) for qp in qps]
    for w in top:
        exp.add(w, model_qps, width, mem_bytes)
    bench = Bench(dut, 6, idle=0.2, desc_bp=0.3, post_bp=0.3, room=4, release=0)

    async def tb(ctx):
        for q, qp in enumerate(qps):
            await bench.configure(ctx, q, qp)
        await bench.feed(ctx, [huge] + top)
        while sum(d["qp"] == 0 for _, d in bench.descs) < len(want0) or \
                sum(d["qp"] == 1 for _, d in bench.descs) < len(exp.descs[1]):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[bench.outputs], deadline_cycles=DEADLINE)
    got0 = [d for _, d in bench.descs if d["qp"] == 0][:len(want0)]
    assert got0 == want0
    got1 = [d for _, d in bench.descs if d["qp"] == 1]
    assert got1 == exp.descs[1]
    posts = {p["wr_id"]: p for _, p in bench.posts}
    assert posts[1]["status"] == CplStatus.OK.value
    assert posts[1]["last_psn"] == (5 + (1 << 23) - 1) % PSN_MOD    # 2^23 packets
    assert [posts[k]["status"] for k in (2, 3, 4)] == [CplStatus.OK.value,
                                                       CplStatus.LOCAL_LENGTH.value,
                                                       CplStatus.OK.value]
    assert posts[4]["last_psn"] == exp.posts[1][2][3]


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="1..256"):
        Scheduler(0, 64, 1 << 16)
    with pytest.raises(ValueError, match="1..256"):
        Scheduler(257, 64, 1 << 16)
    with pytest.raises(TypeError, match="num_qps"):
        Scheduler(2.0, 64, 1 << 16)
    with pytest.raises(ValueError, match="width"):
        Scheduler(2, 32, 1 << 16)
    with pytest.raises(TypeError, match="mem_bytes"):
        Scheduler(2, 64, "64k")
    with pytest.raises(ValueError, match="power of two"):
        Scheduler(2, 64, 3 << 16)
    with pytest.raises(ValueError, match="2\\^32"):
        Scheduler(2, 64, 1 << 33)
    with pytest.raises(ValueError, match="from 64"):
        Scheduler(2, 512, 32)
    with pytest.raises(ValueError, match="depth"):
        Scheduler(2, 64, 1 << 16, depth=3)
    with pytest.raises(ValueError, match="depth"):
        Scheduler(2, 64, 1 << 16, depth=0)
    with pytest.raises(TypeError, match="depth"):
        Scheduler(2, 64, 1 << 16, depth=True)


def test_largest_configuration_elaborates():
    s = Scheduler(256, 512, 1 << 32, depth=4)
    assert (s.num_qps, s.width, s.mem_bytes, s.depth) == (256, 512, 1 << 32, 4)
    text = rtlil.convert(s, name="scheduler", ports=convert_ports(s))
    assert "memory width 208 size 1024 \\wr_mem" in text
    assert "memory width 78 size 256 \\prog_mem" in text
