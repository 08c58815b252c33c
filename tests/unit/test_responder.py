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
from rocegen.gateware.roce.resp_layouts import RecvStatus
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Access, Rnic, WcStatus
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, meta_dict, write_word
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.roce_tops import ResponderTop
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire.addr import parse_ip

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


def answer_fields(frame):
    p = Ether(frame)
    return (p[BTH].dqpn, p[BTH].psn, p[AETH].syndrome, p[AETH].msn)


def udp_answer_fields(payload):
    """The fields of an ACKNOWLEDGE as the responder hands it to UDP (its bytes are checked
    against scapy's in the transmitter's own test)."""
    bth, aeth = H.BTH.unpack(payload), H.AETH.unpack(payload[H.BTH.length:])
    assert bth["opcode"] == H.OP_RC_ACKNOWLEDGE and len(payload) == 16
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
        for k in range(QPS):
            ctx.set(top.qps.ctl.payload, {"qp": k, "context": {
                "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": HOST_QPN + k,
                "pmtu_log2": pmtu_log2, "udp_sport": 0xC100 + k, "dscp": 0}})
            ctx.set(top.qps.ctl.valid, 1)
            await ctx.tick()
            ctx.set(top.qps.ctl.valid, 0)
            ctx.set(dut.psn_set.payload, {"qp": k, "psn": psns[k]})
            ctx.set(dut.psn_set.valid, 1)
            await ctx.tick()
            ctx.set(dut.psn_set.valid, 0)
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


@pytest.mark.parametrize("width, pmtu, seed", [(64, 256, 1), (512, 1024, 2), (128, 512, 3)])
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
