"""The responder (:class:`Responder`) against the NIC model's strict responder: a host NIC model
sends WRITEs and SENDs (with and without immediate) over two QPs through a link that loses,
duplicates, reorders and corrupts frames; every frame the reference responder takes goes into
the gateware as well. The gateware's answers are the reference's (ACKs may be merged when
queued), its memory holds the same bytes, and its receive completions are the same, each
leaving only after its data is in memory. At 64 and 512 bits, with backpressure."""

import random

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.l2 import Ether

from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.responder.resp_layouts import RecvStatus
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Access, Rnic, WcStatus
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, meta_dict, write_word
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.roce_tops import ResponderTop
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip
from tests.tiers import full

QPS = 2
HOST_QPN = 0x11
REGION = 0x4000                 # each QP's region: [k * REGION, (k + 1) * REGION)
RQ_BASE, RQ_LEN = 0x8000, 0x38000
MEM = 0x40000
RNR_CODE = 3
RQ_DEPTH = 8
STATUS = {WcStatus.SUCCESS: RecvStatus.OK, WcStatus.LOC_LEN_ERR: RecvStatus.LENGTH,
          WcStatus.REM_INV_REQ_ERR: RecvStatus.INVALID, WcStatus.WR_FLUSH_ERR: RecvStatus.FLUSHED}


def rkey(k):
    return 0x1000 + 0x100 * k + 0x37


def config():
    return [{"mr": {"rkey": rkey(k), "base": k * REGION, "length": REGION, "write": 1, "read": 0},
             "rnr_timer": RNR_CODE} for k in range(QPS)]


def scenario(seed, pmtu, *, messages=24, loss=0.0, dup=0.0, reorder=0.0, corrupt=0.0,
             rq_initial=3, bad=False):
    """The frames the reference responder takes, in order, the receive buffers posted among
    them, and its answers and completions. ``bad``: some WRITEs name a wrong R_Key or range."""
    rng = random.Random(seed)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    ref = Rnic(FPGA_MAC, FPGA_IP, behaviour=IDEAL, strict=not corrupt)
    psns = [rng.choice([0, 0xFFFFF0, rng.getrandbits(24)]) for _ in range(QPS)]
    for k in range(QPS):
        host.create_qp(HOST_QPN + k, peer_qpn=QPN_BASE + k, peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                       epsn=0, pmtu=pmtu,
                       sq_psn=psns[k], timeout=1, retry_cnt=7, rnr_retry=7)
        ref.create_qp(QPN_BASE + k, peer_qpn=HOST_QPN + k, peer_ip=HOST_IP, peer_mac=HOST_MAC,
                      epsn=psns[k],
                      pmtu=pmtu, min_rnr_timer=RNR_CODE)
        ref.register_mr(k * REGION, REGION, rkey(k), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    ref.register_mr(RQ_BASE, RQ_LEN, 0x7777, Access.LOCAL_WRITE)
    events = []
    rq_next = [RQ_BASE + k * RQ_LEN // QPS for k in range(QPS)]
    wr_ids = iter(range(100, 10_000))

    def post(k, length):
        qp = ref.qps[QPN_BASE + k]
        if len(qp.rq) >= RQ_DEPTH or qp.state == "ERR":
            # (the gateware's queue would hold the post back; it keeps the buffers posted to a
            # QP in the error state for its next connection, where verbs flush them at once)
            return
        addr = rq_next[k]
        rq_next[k] += length
        assert rq_next[k] <= RQ_BASE + (k + 1) * RQ_LEN // QPS
        wr_id = next(wr_ids)
        ref.post_recv(QPN_BASE + k, length, wr_id, addr=addr)
        events.append(("post", dict(qp=k, wr_id=wr_id, addr=addr, length=length)))

    for k in range(QPS):
        for _ in range(rq_initial):
            post(k, 3 * pmtu)
    for _ in range(messages):
        k = rng.randrange(QPS)
        op = rng.choice(["WRITE", "WRITE", "WRITE_IMM", "SEND", "SEND_IMM"])
        n = rng.choice([0, 1, 3, pmtu - 1, pmtu, pmtu + 1, 2 * pmtu + 5, rng.randrange(3 * pmtu)])
        if op.startswith("SEND"):
            n = min(n, 3 * pmtu)
        va = k * REGION + rng.randrange(REGION - n + 1)
        key = rkey(k)
        if bad and op == "WRITE" and n and rng.random() < 0.15:
            if rng.random() < 0.5:
                key ^= 0x10000
            else:
                va = (k + 1) * REGION - n + 1
        host.post_send(HOST_QPN + k, op, data=rng.randbytes(n), remote_addr=va, rkey=key,
                       imm=rng.getrandbits(32) if op.endswith("IMM") else None)

    answers, held = [], None
    now = 0

    def deliver(frame):
        if rng.random() < corrupt:
            f = bytearray(frame)
            f[rng.randrange(14, len(f))] ^= 1 << rng.randrange(8)
            frame, good = bytes(f), False
        else:
            good = True
        events.append(("frame", frame, good))
        for a in ref.receive(frame):
            answers.append(a)
            host.receive(a, now)

    for _ in range(100_000):
        if rng.random() < 0.1:
            k = rng.randrange(QPS)
            if rq_next[k] + 3 * pmtu <= RQ_BASE + (k + 1) * RQ_LEN // QPS:
                post(k, 3 * pmtu)
        frames = host.next_frames(now, budget=1)
        if not frames:
            if not host.send_outstanding():
                break
            due = host.next_due()
            now = max(now + 100, due if due is not None else now + 100_000)
            continue
        now += 50
        for f in frames:
            if rng.random() < loss:
                continue
            if rng.random() < reorder and held is None:
                held = f
                continue
            deliver(f)
            if rng.random() < dup:
                deliver(f)
            if held is not None:
                deliver(held)
                held = None
    if held is not None:
        deliver(held)
    assert not host.send_outstanding(), "the host's messages did not all complete"
    return events, answers, ref, psns


async def open_qps(ctx, top, dut, psns, *, pmtu_log2, sport, dscp, host_qpn=HOST_QPN):
    """Set QPs 0..len(psns)-1 of a :class:`ResponderTop` up: RTS, the host's QP ``host_qpn + k``
    as peer, UDP source port ``sport + k``, and the responder's ePSN ``psns[k]``."""
    for k in range(len(psns)):
        ctx.set(top.qps.ctl.payload, {"qp": k, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": host_qpn + k,
            "pmtu_log2": pmtu_log2, "udp_sport": sport + k, "dscp": dscp}})
        ctx.set(top.qps.ctl.valid, 1)
        await ctx.tick()
        ctx.set(top.qps.ctl.valid, 0)
        ctx.set(dut.psn_set.payload, {"qp": k, "psn": psns[k]})
        ctx.set(dut.psn_set.valid, 1)
        await ctx.tick()
        ctx.set(dut.psn_set.valid, 0)


def answer_fields(frame):
    p = Ether(frame)
    return (p[BTH].dqpn, p[BTH].psn, p[AETH].syndrome, p[AETH].msn)


def udp_answer_fields(payload):
    """The fields of an ACKNOWLEDGE as the responder hands it to UDP (its bytes are checked
    against scapy's in the transmitter's own test)."""
    bth, aeth = H.BTH.unpack(payload), H.AETH.unpack(payload[H.BTH.length:])
    assert bth["opcode"] == opc.OP_RC_ACKNOWLEDGE and len(payload) == 16
    return (bth["dest_qp"], bth["psn"], aeth["syndrome"], aeth["msn"])


def run_dut(width, events, pmtu_log2, psns, *, idle=0.0, backpressure=0.0, seed=0,
            deadline=1_000_000):
    top = shared(ResponderTop, width, QPS, MEM, config_init=config(), rq_depth=RQ_DEPTH)
    dut = top.resp
    rng = random.Random(seed)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    tx = StreamCollector(dut.tx, width, backpressure=backpressure, seed=seed + 1)
    image = bytearray(MEM)
    cpls = []
    decided = [0]
    counters = {}

    async def memory(ctx):
        async for _, _, valid, ready, w in ctx.tick().sample(dut.mem.valid, dut.mem.ready,
                                                             dut.mem.payload):
            ctx.set(dut.mem.ready, rng.random() >= backpressure)
            if valid and ready:
                write_word(image, width, w)

    async def completions(ctx):
        async for _, _, valid, ready, c in ctx.tick().sample(dut.cpl.valid, dut.cpl.ready,
                                                             dut.cpl.payload):
            ctx.set(dut.cpl.ready, rng.random() >= backpressure)
            if valid and ready:
                # the data of a completed SEND is in memory when the completion leaves
                cpls.append((meta_dict(c), bytes(image)))

    async def count(ctx):
        names = ("executed", "duplicate", "seq_nak", "seq_drop", "rnr", "invalid", "access",
                 "drop_qp", "drop_state", "drop_peer", "drop_pkey", "drop_error", "malformed",
                 "overflow")
        sigs = [getattr(dut, name) for name in names]
        async for _, _, *vals in ctx.tick().sample(*sigs):
            for name, v in zip(names, vals):
                counters[name] = counters.get(name, 0) + v
            decided[0] += sum(vals[:12])

    async def tb(ctx):
        await open_qps(ctx, top, dut, psns, pmtu_log2=pmtu_log2, sport=0xC100, dscp=0)
        fed = 0
        for ev in events:
            if ev[0] == "post":
                while decided[0] < fed:
                    await ctx.tick()
                ctx.set(dut.recv.payload, ev[1])
                ctx.set(dut.recv.valid, 1)
                await ctx.tick().until(dut.recv.ready)
                ctx.set(dut.recv.valid, 0)
                continue
            _, frame, good = ev
            while decided[0] < fed - 1:          # at most two requests queued
                await ctx.tick()
            dgram = frame[14:14 + int.from_bytes(frame[16:18], "big") - 4]
            await drv.send(ctx, [Packet(dgram, error=not good)])
            fed += good
        while decided[0] < fed:
            await ctx.tick()
        await ctx.tick().repeat(200)

    run_sim(top, testbenches=[tb], processes=[memory, completions, count, tx.run],
            deadline_cycles=deadline)
    return image, cpls, [udp_answer_fields(p.data) for p in tx.packets], counters, tx


def check(width, pmtu, seed, *, idle=0.0, backpressure=0.0, **faults):
    events, answers, ref, psns = scenario(seed, pmtu, **faults)
    image, cpls, got, counters, _ = run_dut(width, events, pmtu.bit_length() - 1, psns,
                                            idle=idle, backpressure=backpressure, seed=seed)
    want = [answer_fields(a) for a in answers]
    # every answer is the reference's; only ACKs may be missing, each merged into a later ACK
    # of its QP with no other answer of that QP between
    j = 0
    for g in got:
        while j < len(want) and want[j] != g:
            w = want[j]
            assert w[2] & 0x60 == 0, f"answer {w} of the reference is missing"
            later = [x for x in want[j + 1:] if x[0] == w[0]]
            assert later and later[0][2] & 0x60 == 0, f"ACK {w} missing, not merged"
            j += 1
        assert j < len(want), f"answer {g} is not the reference's"
        j += 1
    assert j == len(want), f"answers missing at the end: {want[j:]}"
    # memory: the regions and the receive buffers
    for mr in ref.mrs:
        assert image[mr.addr:mr.addr + mr.length] == mr.buf, f"region at {mr.addr:#x}"
    # completions: the reference's, each after its data
    ref_cpls = ref.poll_cq()
    assert [(c["qp"], c["wr_id"], c["status"], c["length"], c["imm"] if c["has_imm"] else None)
            for c, _ in cpls] == \
        [(c.qpn - QPN_BASE, c.wr_id, STATUS[c.status].value, c.byte_len, c.imm) for c in ref_cpls]
    posted = {ev[1]["wr_id"]: ev[1] for ev in events if ev[0] == "post"}
    for (c, mem_then), rc in zip(cpls, ref_cpls):
        if c["opcode"] == 0 and c["status"] == 0:
            addr = posted[c["wr_id"]]["addr"]
            assert mem_then[addr:addr + c["length"]] == rc.data
    return counters, ref


@pytest.mark.parametrize("width, pmtu, seed", [(64, 256, 1), (512, 1024, 2), full(128, 512, 3)])
def test_clean_link(width, pmtu, seed):
    counters, ref = check(width, pmtu, seed)
    assert counters["executed"] > 20 and counters["overflow"] == 0


@pytest.mark.parametrize("width, pmtu, seed, bp", [(64, 256, 4, 0.3), (512, 256, 5, 0.5)])
def test_faulty_link_with_backpressure(width, pmtu, seed, bp):
    counters, ref = check(width, pmtu, seed, idle=0.2, backpressure=bp, loss=0.05, dup=0.05,
                          reorder=0.05, corrupt=0.03, rq_initial=1)
    assert counters["duplicate"] and counters["seq_nak"] and counters["rnr"], counters


@pytest.mark.parametrize("width, seed", [(64, 6), (512, 7)])
def test_bad_writes_end_the_qp(width, seed):
    counters, ref = check(width, 256, seed, bad=True, messages=40)
    assert counters["access"] >= 1, counters


def read_config():
    return [{"mr": {"rkey": rkey(k), "base": k * REGION, "length": REGION, "write": 1, "read": 1},
             "rnr_timer": RNR_CODE} for k in range(QPS)]


def read_frames(seed, pmtu, writes):
    """QP 0's requests: a READ of its whole region and a WRITE behind it (AckReq on its last
    packet); then QP 1's: ``writes`` WRITEs. The frames the host sends, each with its QP; the
    PSNs each QP starts at."""
    rng = random.Random(seed)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    psns = [rng.getrandbits(24) for _ in range(QPS)]
    for k in range(QPS):
        host.create_qp(HOST_QPN + k, peer_qpn=QPN_BASE + k, peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                       epsn=0, pmtu=pmtu, sq_psn=psns[k], timeout=1, retry_cnt=7,
                       access=Access.REMOTE_WRITE | Access.REMOTE_READ, max_rd_atomic=16)
    host.post_send(HOST_QPN, "READ", length=REGION, remote_addr=0, rkey=rkey(0))
    host.post_send(HOST_QPN, "WRITE", data=rng.randbytes(40), remote_addr=64, rkey=rkey(0))
    for _ in range(writes):
        n = rng.choice([0, 8, 100, pmtu])
        host.post_send(HOST_QPN + 1, "WRITE", data=rng.randbytes(n),
                       remote_addr=REGION + rng.randrange(REGION - n + 1), rkey=rkey(1))
    frames = host.next_frames(0, budget=10_000)
    return [(f, Ether(f)[BTH].dqpn - QPN_BASE) for f in frames], psns


@pytest.mark.parametrize("width, seed, idle", [(512, 8, 0.0), (64, 9, 0.3)])
def test_read_drain_stops_no_other_qp(width, seed, idle):
    """QP 0's READ of 16 KiB has its responses held (``rd`` not ready) and the ACK of the WRITE
    behind it waiting: meanwhile QP 1's WRITEs are all decided and answered at the rate they
    come (none dropped, none waiting), and QP 0's ACK leaves only after the READ's last
    response. (Before answers were parked, QP 0's ACK held the engine: QP 1's requests were
    dropped as ``overflow``.)"""
    pmtu, writes = 1024, 40
    frames, psns = read_frames(seed, pmtu, writes)
    assert [qp for _, qp in frames].count(0) == 2
    top = shared(ResponderTop, width, QPS, MEM, config_init=read_config(), reads=True)
    dut = top.resp
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    tx = StreamCollector(dut.tx, width, backpressure=0.2, seed=seed + 1)
    names = ("executed", "duplicate", "seq_nak", "seq_drop", "rnr", "invalid", "access",
             "overflow", "malformed")
    decided, counts = [], dict.fromkeys(names, 0)     # the cycle of each decision
    rd_last, tx_at = [], []                           # cycles: the READ's last response, answers
    fed = []                                          # cycles: each request's last beat in
    held = [True]
    cycle = [0]

    async def watch(ctx):
        rng = random.Random(seed + 2)
        sent = None
        async for _, _, *vals, rv, rr, last, rqp, tv, tr, tl, iv, il in ctx.tick().sample(
                *(getattr(dut, n) for n in names), dut.rd.valid, dut.rd.ready,
                dut.rd.payload.desc.last, dut.rd.payload.desc.qp, dut.tx.valid, dut.tx.ready,
                dut.tx.payload.last, dut.i.valid, dut.i.payload.last):
            cycle[0] += 1
            for name, v in zip(names, vals):
                counts[name] += v
                if v and name != "overflow" and name != "malformed":
                    decided.append(cycle[0])
            if tv and tr and tl:
                tx_at.append(cycle[0])
            if iv and il:
                fed.append(cycle[0])
            # the transmitter takes the READ responses once released; a READ's last one is
            # reported (``rd_sent``) a few cycles later
            ctx.set(dut.rd_sent.valid, 0)
            if sent is not None and cycle[0] >= sent[0]:
                ctx.set(dut.rd_sent.valid, 1)
                ctx.set(dut.rd_sent.payload, sent[1])
                sent = None
            if rv and rr and last:
                rd_last.append(cycle[0])
                sent = (cycle[0] + 5, rqp)
            ctx.set(dut.rd.ready, not held[0] and rng.random() < 0.7)
            ctx.set(dut.mem.ready, 1)
            ctx.set(dut.cpl.ready, 1)

    async def tb(ctx):
        await open_qps(ctx, top, dut, psns, pmtu_log2=pmtu.bit_length() - 1, sport=0xC000,
                       dscp=26)
        for f, _ in frames:
            dgram = f[14:14 + int.from_bytes(f[16:18], "big") - 4]
            await drv.send(ctx, [Packet(dgram)])
        for _ in range(4000):
            if len(decided) + counts["overflow"] >= len(frames):
                break
            await ctx.tick()
        await ctx.tick().repeat(200)
        # QP 1 answered, QP 0 not yet
        answered = {qp: [u for u in map(udp_answer_fields, [p.data for p in tx.packets])
                         if u[0] == HOST_QPN + qp] for qp in range(QPS)}
        assert counts["overflow"] == 0 and len(decided) == len(frames), \
            f"{len(decided)} of {len(frames)} requests decided, {counts['overflow']} dropped"
        assert answered[0] == [] and answered[1], answered
        assert not rd_last
        held[0] = False
        while not rd_last:
            await ctx.tick()
        await ctx.tick().repeat(300)

    run_sim(top, testbenches=[tb], processes=[watch, tx.run], deadline_cycles=200_000)
    assert counts["executed"] == len(frames), counts
    got = [udp_answer_fields(p.data) for p in tx.packets]
    want_last = {k: (psns[k] + sum(1 for _, q in frames if q == k) - 1) & 0xFFFFFF
                 for k in range(QPS)}
    # (the READ's PSNs count as its responses: QP 0's WRITE is after them)
    want_last[0] = (psns[0] + REGION // pmtu) & 0xFFFFFF
    for k in range(QPS):
        acks = [g for g in got if g[0] == HOST_QPN + k]
        assert acks and acks[-1][1] == want_last[k] and acks[-1][2] & 0x60 == 0, (k, acks)
    # QP 0's ACK after the READ's last response (its packet's last beat on ``tx``)
    qp0 = [t for g, t in zip(got, tx_at) if g[0] == HOST_QPN]
    assert len(qp0) == 1 and qp0[0] > rd_last[-1]
    # QP 1's requests decided at the rate they came: each within a few frames' time of its
    # last beat (the queue of placement records and the answer queue's backpressure), while
    # QP 0's READ is held for good
    waits = [d - f for d, f in zip(decided, fed)]
    assert max(waits[2:]) < 100, waits


@pytest.mark.parametrize("width", [64, 512])
def test_receive_queues_flushed_from_outside(width):
    """With ``flush_port``, a QP named on ``rq_flush`` has its posted buffers complete FLUSHED,
    in posting order, and no other QP's; buffers posted after the flush stay (the next
    connection's). Without it, no such port."""
    from rocegen.gateware.roce.responder.responder import Responder
    assert not hasattr(Responder(width, QPS, 10), "rq_flush")
    dut = Responder(width, QPS, 10, rq_depth=RQ_DEPTH, flush_port=True)
    rng = random.Random(width)
    qps = [k % QPS for k in range(QPS * (RQ_DEPTH - 1))]
    rng.shuffle(qps)
    posts = [{"qp": q, "wr_id": k, "addr": 64 * k, "length": 64} for k, q in enumerate(qps)]
    got = []

    async def post(ctx, p):
        ctx.set(dut.recv.payload, p)
        ctx.set(dut.recv.valid, 1)
        await ctx.tick().until(dut.recv.ready)
        ctx.set(dut.recv.valid, 0)

    async def collect(ctx):
        ctx.set(dut.cpl.ready, 1)
        async for _, _, valid, c in ctx.tick().sample(dut.cpl.valid, dut.cpl.payload):
            if valid:
                got.append((c.qp, c.wr_id, c.status))

    async def tb(ctx):
        for p in posts:
            await post(ctx, p)
        ctx.set(dut.rq_flush.payload, 0)
        ctx.set(dut.rq_flush.valid, 1)
        await ctx.tick().until(dut.rq_flush.ready)
        ctx.set(dut.rq_flush.valid, 0)
        await post(ctx, {"qp": 0, "wr_id": 99, "addr": 0, "length": 64})
        await ctx.tick().repeat(200)
        want = [(0, p["wr_id"], RecvStatus.FLUSHED) for p in posts if p["qp"] == 0]
        assert got == want and want

    run_sim(dut, testbenches=[tb], processes=[collect], deadline_cycles=2000)
