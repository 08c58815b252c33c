"""The endpoint as RDMA READ requester (``RoceEndpoint(responder=True)``, READs on by default),
whole, in the Amaranth simulator, against the host NIC model as responder: READs of every shape
(zero length, one byte, ONLY, FIRST/MIDDLE/LAST, unaligned local addresses) mixed with WRITEs
and SENDs on one QP complete in order with the host's bytes in local memory, on chip and AXI4;
no more than ``max_rd_atomic`` READs are ever outstanding (the host refuses more); lost,
truncated, extra and spoiled responses are recovered by reissues or dropped and counted; a NAK
ends the READ with an error completion; nothing lands outside a READ's local target."""

import random

import pytest

from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.gateware.roce.layouts import QPN_BASE, CplStatus, QpState, WrOpcode
from rocegen.sim.models.axi_ram import AxiRam
from rocegen.sim.models.axi_write_mem import AxiWriteMemory
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Access, Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, write_word
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac

MEM = 1 << 16
HOST_QPN = 0x21
RKEY = 0x4321
#: The host's region the endpoint READs and WRITEs (virtual address 0).
HOST_BYTES = 1 << 16
#: Local bytes the READs may land in (the upper half of local memory is the stream ring).
TARGET = (0x2000, 0x6000)
PATTERN = 0x5A
#: The endpoint's first PSN (the PSNs wrap during a run).
PSN = 0xFFFFF8
#: The READ hole wait, in microseconds: long enough for the round trip of this test's link (a
#: few hundred cycles), far shorter than the QP timeouts the tests set (65 us and more), and
#: short to simulate (the generator's default is sized for real links).
HOLE_WAIT = 8


def run(width, pmtu, memory, wrs, *, faults=(), max_rd_atomic=16, host_rd=16, stats_names=(),
        seed=0, drop_requests=(), loss=0.0, timeout=1):
    """The endpoint posts ``wrs`` (dicts of WORK_REQUEST fields but ``qp``) on QP 0 to the
    host; the host's region holds random bytes, local memory starts as :data:`PATTERN`.
    ``faults``: ``(kind, kwargs)`` for :meth:`Rnic.read_fault`; ``drop_requests``: the
    numbers (from 0) of the endpoint's READ request frames lost on the way to the host;
    ``loss``: every frame is lost with this probability, each way; ``timeout``: the QP's
    retransmit timeout code (4.096 us x 2^code). Returns the completions, the
    local memory image, the host, the host's region as it was and the counters
    ``stats_names``."""
    rng = random.Random(seed)
    ep = shared(RoceEndpoint, width, 2, memory=memory, mem_bytes=MEM, ring_bytes=MEM // 2,
                responder=True, pmtu=pmtu, max_rd_atomic=max_rd_atomic,
                rd_hole_wait=HOLE_WAIT)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    host.create_qp(HOST_QPN, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=PSN,
                   pmtu=pmtu, access=Access.REMOTE_WRITE | Access.REMOTE_READ,
                   max_dest_rd_atomic=host_rd)
    mr = host.register_mr(0, HOST_BYTES, RKEY,
                          Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
    mr.buf[:] = rng.randbytes(HOST_BYTES)
    remote = bytes(mr.buf)
    for kind, kw in faults:
        host.read_fault(kind, **kw)
    for k in range(sum(w["opcode"] in (WrOpcode.SEND, WrOpcode.SEND_IMM) for w in wrs)):
        host.post_recv(HOST_QPN, 1 << 16, wr_id=1000 + k)
    image = bytearray([PATTERN]) * MEM
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    cpls, stats = [], {}
    processes = [col.run]
    if memory == "axi4":
        axi = AxiWriteMemory(width, MEM, aw=ep.axi.aw, w=ep.axi.w, b=ep.axi.b, b_latency=(20, 90),
                             aw_stall=0.3, w_stall=0.3, b_stall=0.2, seed=width)
        axi.mem[:] = image
        axi.acked[:] = image
        image = axi.mem
        rd = AxiRam(width, MEM, ar=ep.axi.ar, r=ep.axi.r, mem=axi.acked, latency=20,
                    ar_stall=0.2, r_stall=0.2, seed=width)
        processes += [axi.run, rd.run]
    else:
        # (every write the on-chip memory takes: the READ placement's, and any other)
        async def watch(ctx):
            ports = [ep._rd_place.o, ep._resp.mem, ep.mem_w]
            async for _, _, *v in ctx.tick().sample(*(x for p in ports for x in
                                                      (p.valid, p.ready, p.payload))):
                for k in range(len(ports)):
                    if v[3 * k] and v[3 * k + 1]:
                        write_word(image, width, v[3 * k + 2])
        processes.append(watch)

    ready = [False]                     # the QP is set up
    requests = [0]                      # READ request frames sent
    link = random.Random(seed + 1)

    def lost():
        return loss and link.random() < loss

    async def work_requests(ctx):
        while not ready[0]:
            await ctx.tick()
        for k, w in enumerate(wrs):
            ctx.set(ep.wr.payload, {"qp": 0, "wr_id": k, "imm": 0, **w})
            ctx.set(ep.wr.valid, 1)
            await ctx.tick().until(ep.wr.ready)
            ctx.set(ep.wr.valid, 0)
            if rng.random() < 0.3:
                await ctx.tick().repeat(rng.randrange(1, 30))

    async def completions(ctx):
        async for _, _, valid, ready, c in ctx.tick().sample(ep.cpl.valid, ep.cpl.ready,
                                                            ep.cpl.payload):
            if valid and ready:
                cpls.append((c.wr_id, CplStatus(c.status)))
            ctx.set(ep.cpl.ready, rng.random() < 0.8)

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.qp_ctl.payload, {"qp": 0, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": HOST_QPN,
            "rkey": RKEY, "base_va": 0, "pmtu_log2": pmtu.bit_length() - 1,
            "udp_sport": 0xC123, "ack_every_log2": 3, "timeout": timeout, "retry_cnt": 7}})
        ctx.set(ep.qp_ctl.valid, 1)
        await ctx.tick().until(ep.qp_ctl.ready)
        ctx.set(ep.qp_ctl.valid, 0)
        ctx.set(ep.qp_psn.payload, {"qp": 0, "psn": PSN})
        ctx.set(ep.qp_psn.valid, 1)
        await ctx.tick().until(ep.qp_psn.ready)
        ctx.set(ep.qp_psn.valid, 0)
        ready[0] = True
        seen = 0
        while len(cpls) < len(wrs):
            frames = [f for f in host.next_frames(budget=8) if not lost()]
            while seen < len(col.packets):
                data = col.packets[seen].data
                seen += 1
                if bytes(data)[42] == 0x0C:         # (after Ethernet, IPv4, UDP: the opcode)
                    requests[0] += 1
                    if requests[0] - 1 in drop_requests:
                        continue
                if not lost():
                    frames += host.receive(data)
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
            else:
                await ctx.tick().repeat(20)
        for name in stats_names:
            ctx.set(ep.stats_addr, STATS.index(name))
            await ctx.tick().repeat(3)
            stats[name] = ctx.get(ep.stats_data)
        await ctx.tick().repeat(50)

    run_sim(ep, testbenches=[tb, work_requests], processes=[*processes, completions],
            deadline_cycles=1_500_000)
    return cpls, image, host, remote, stats


def read(local, remote, length):
    return {"opcode": WrOpcode.READ, "local_addr": local, "remote_offset": remote,
            "length": length}


def check_image(image, wrs, cpls, remote):
    """Local memory is what the READs that completed OK put there, in the order they were
    posted (a later READ's target may overlap an earlier one's); every byte outside the
    READs' targets is untouched (the bytes of a READ that failed may hold anything of it)."""
    status = dict(cpls)
    expected = bytearray([PATTERN]) * MEM
    loose = bytearray(MEM)
    for k, w in enumerate(wrs):
        if w["opcode"] != WrOpcode.READ:
            continue
        a, n, r = w["local_addr"], w["length"], w["remote_offset"]
        if status[k] == CplStatus.OK:
            expected[a:a + n] = remote[r:r + n]
            loose[a:a + n] = bytes(n)
        else:
            loose[a:a + n] = b"\1" * n
    for a in range(MEM):
        if not loose[a] and image[a] != expected[a]:
            raise AssertionError(f"local byte {a:#x} is {image[a]:#04x}, not {expected[a]:#04x}")


@pytest.mark.parametrize("width, pmtu, memory", [
    (64, 256, "onchip"), pytest.param(512, 1024, "onchip", marks=pytest.mark.full),
    (512, 1024, "axi4")])
def test_reads_mixed_with_writes(width, pmtu, memory):
    rng = random.Random(width + pmtu)
    lo, hi = TARGET
    wrs = [read(lo, 0, 0), read(lo + 1, 5, 1), read(lo + 3, 0x100, pmtu),
           read(lo + 0x1005, 0x333, 3 * pmtu + 7), read(lo + 0x2000, 0x1000, 2 * pmtu),
           {"opcode": WrOpcode.WRITE, "local_addr": 0, "remote_offset": 0x8000,
            "length": 2 * pmtu + 5},
           read(lo + 0x3001, 0x8000, 2 * pmtu + 5),     # reads back what the WRITE put there
           {"opcode": WrOpcode.SEND, "local_addr": 0, "remote_offset": 0, "length": 100}]
    for _ in range(14):
        n = rng.randrange(1, 3 * pmtu)
        wrs.append(read(rng.randrange(lo, hi - n), rng.randrange(HOST_BYTES // 2 - n), n))
    cpls, image, host, remote, stats = run(width, pmtu, memory, wrs, seed=width,
                                           stats_names=("rd_done", "rd_good", "rd_gap",
                                                        "rd_reissues", "roce_cpl_ok"))
    assert cpls == [(k, CplStatus.OK) for k in range(len(wrs))]
    # (the READ of the WRITE's bytes: the host's region after the WRITE)
    remote = bytearray(remote)
    n = wrs[5]["length"]
    assert host.mrs[0].buf[0x8000:0x8000 + n] != remote[0x8000:0x8000 + n]
    remote[0x8000:0x8000 + n] = host.mrs[0].buf[0x8000:0x8000 + n]
    check_image(image, wrs, cpls, remote)
    reads = [w for w in wrs if w["opcode"] == WrOpcode.READ]
    assert stats["rd_done"] == len(reads)
    assert stats["rd_good"] == sum(max(1, -(-w["length"] // pmtu)) for w in reads)
    assert stats["rd_gap"] == stats["rd_reissues"] == 0
    assert stats["roce_cpl_ok"] == len(wrs)
    assert host.counters["read_rx"] == len(reads)


@pytest.mark.parametrize("max_rd, host_rd", [pytest.param(16, 16, marks=pytest.mark.full), (4, 4)])
def test_outstanding_reads_bounded(max_rd, host_rd):
    """30 READs posted at once: the host (max_dest_rd_atomic) would NAK one beyond its queue."""
    width, pmtu = 512, 1024
    lo, _ = TARGET
    wrs = [read(lo + 0x400 * k, 0x400 * k, 0x400) for k in range(30)]
    cpls, image, host, remote, _ = run(width, pmtu, "onchip", wrs, max_rd_atomic=max_rd,
                                       host_rd=host_rd)
    assert cpls == [(k, CplStatus.OK) for k in range(30)]
    check_image(image, wrs, cpls, remote)
    assert host.counters["err_rd_atomic"] == 0


@pytest.mark.parametrize("kind, kw, width", [
    ("drop", {"packet": 1}, 64), ("drop", {"packet": 0}, 512), ("drop", {"packet": -1}, 64),
    ("truncate", {}, 512), ("extra", {}, 64), ("opcode", {"packet": 1, "value": 0x10}, 512),
    ("length", {"packet": 0, "value": -4}, 64), ("length", {"packet": -1, "value": 8}, 512),
    ("psn", {"packet": 1, "value": 1}, 64), ("psn", {"packet": 2, "value": -1}, 512)])
def test_spoiled_responses_are_recovered(kind, kw, width):
    """One spoiled READ of three: the bad response (or the one too many) is dropped and
    counted, the rest of the READ is asked for again (or the timeout reissues it), every READ
    completes OK with the host's bytes, nothing lands outside the targets."""
    pmtu = 256
    lo, _ = TARGET
    wrs = [read(lo, 0x10, 4 * pmtu + 3), read(lo + 0x1003, 0x2000, 3 * pmtu),
           read(lo + 0x2001, 0x3000, pmtu + 1)]
    cpls, image, host, remote, stats = run(
        width, pmtu, "onchip", wrs, faults=[(kind, {**kw, "count": 1})],
        stats_names=("rd_gap", "rd_opcode", "rd_length", "rd_duplicate", "rd_unknown",
                     "rd_reissues", "roce_timeouts", "rd_done"))
    assert cpls == [(k, CplStatus.OK) for k in range(3)]
    check_image(image, wrs, cpls, remote)
    assert host.counters["read_fault_tx"] == 1
    assert stats["rd_done"] == 3
    dropped = stats["rd_gap"] + stats["rd_opcode"] + stats["rd_length"] + \
        stats["rd_duplicate"] + stats["rd_unknown"]
    if kind != "drop" or kw["packet"] != -1:
        assert dropped >= 1, stats
    if kind != "extra":                 # (a response too many spoils nothing that was due)
        assert stats["rd_reissues"] + stats["roce_timeouts"] >= 1, stats


@pytest.mark.parametrize("width, packet", [(64, 1), (512, -1)])
def test_lost_response_asked_for_alone(width, packet):
    """A response of the first of 16 READs outstanding lost: the responses of the READs after it
    are placed as they come, the READ with the loss is asked for again from the lost response
    by one request (the host executes it as a duplicate READ), nothing else is sent again (no
    rewind, no timeout: the timeout covers the responses of every READ outstanding, as the
    READ requester needs); every READ completes OK with the host's bytes, each response of the
    host's written once."""
    pmtu = 256
    lo, _ = TARGET
    wrs = [read(lo + 0x400 * k, 0x400 * k, 0x400) for k in range(16)]
    cpls, image, host, remote, stats = run(
        width, pmtu, "onchip", wrs, faults=[("drop", {"packet": packet, "count": 1})], timeout=4,
        stats_names=("rd_hole", "rd_ahead", "rd_gap", "rd_reissues", "roce_rewinds",
                     "roce_timeouts", "rd_done", "rd_good"))
    assert cpls == [(k, CplStatus.OK) for k in range(16)]
    check_image(image, wrs, cpls, remote)
    assert stats["rd_hole"] == stats["rd_reissues"] == 1, stats
    assert stats["roce_rewinds"] == stats["roce_timeouts"] == 0, stats
    assert host.counters["read_dup"] == 1 and host.counters["read_rx"] == 16
    assert stats["rd_ahead"] >= 4 and stats["rd_done"] == 16, stats
    # (a loss of the READ's last response: the next READ's first opens the hole, written)
    last = packet % 4 == 3
    assert stats["rd_good"] + stats["rd_ahead"] + last == 16 * 4, stats
    assert stats["rd_gap"] == (0 if last else 2 - packet % 4), stats


@pytest.mark.parametrize("width, lost", [(64, "response"), (512, "request")])
def test_lost_hole_request_asked_again(width, lost):
    """The hole's own request loses a response (or is lost itself): nothing later gives it
    away, and the retry engine's timer hears nothing of a QP with a hole open; the hole timer
    asks for the hole again after the hole wait, long before the QP's timeout (131 us): every
    READ completes OK, with no rewind and no timeout."""
    pmtu = 256
    lo, _ = TARGET
    wrs = [read(lo + 0x400 * k, 0x400 * k, 0x400) for k in range(16)]
    faults = [("drop", {"packet": 1, "count": 1})]
    if lost == "response":
        # (the next 15 READs the host executes unspoilt, then the hole's request loses its
        # second response)
        faults += [("drop", {"packet": 99, "count": 15}), ("drop", {"packet": 1, "count": 1})]
    cpls, image, host, remote, stats = run(
        width, pmtu, "onchip", wrs, faults=faults, timeout=5,
        drop_requests={16} if lost == "request" else (),
        stats_names=("rd_hole", "rd_reask", "rd_stall", "rd_reissues", "roce_rewinds",
                     "roce_timeouts", "rd_done"))
    assert cpls == [(k, CplStatus.OK) for k in range(16)]
    check_image(image, wrs, cpls, remote)
    assert stats["rd_hole"] == stats["rd_reask"] == 1 and stats["rd_stall"] == 0, stats
    assert stats["roce_rewinds"] == stats["roce_timeouts"] == 0, stats
    assert stats["rd_done"] == 16, stats
    assert host.counters["read_dup"] == (2 if lost == "response" else 1)


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.full)])
def test_last_request_lost(width):
    """The last of 16 READ requests lost: no later request makes the host NAK it and no later
    response shows it; after the hole wait with no response the QP goes back to it (one
    rewind, long before the QP's timeout of 131 us): every READ completes OK."""
    lo, _ = TARGET
    wrs = [read(lo + 0x400 * k, 0x400 * k, 0x400) for k in range(16)]
    cpls, image, host, remote, stats = run(
        width, 256, "onchip", wrs, timeout=5, drop_requests={15},
        stats_names=("rd_stall", "rd_reask", "rd_hole", "roce_rewinds", "roce_timeouts"))
    assert cpls == [(k, CplStatus.OK) for k in range(16)]
    check_image(image, wrs, cpls, remote)
    assert stats["rd_stall"] == stats["roce_rewinds"] == 1, stats
    assert stats["roce_timeouts"] == stats["rd_hole"] == stats["rd_reask"] == 0, stats
    assert host.counters["read_rx"] == 16


def test_lost_requests_resent_with_the_table_full():
    """READ requests lost on the way to the host while 16 READs are outstanding (the QP starts
    no more): the host NAKs the gap, and the QP resends from it although its READ table is
    full; every READ completes."""
    lo, _ = TARGET
    wrs = [read(lo + 0x400 * k, 0x400 * k, 0x400) for k in range(30)]
    cpls, image, host, remote, stats = run(512, 1024, "onchip", wrs, drop_requests={4, 21},
                                           stats_names=("roce_rewinds", "rd_done"))
    assert cpls == [(k, CplStatus.OK) for k in range(30)]
    check_image(image, wrs, cpls, remote)
    assert host.counters["nak_seq_tx"] >= 1 and stats["roce_rewinds"] >= 2
    assert stats["rd_done"] == 30


def test_random_loss():
    """2 % of the frames lost each way, 16 READs outstanding: every READ completes OK with the
    host's bytes."""
    lo, _ = TARGET
    n = 48
    wrs = [read(lo + 0x100 * (k % 32), 0x100 * k, 0x100 + k) for k in range(n)]
    cpls, image, host, remote, stats = run(64, 256, "onchip", wrs, loss=0.02, seed=5,
                                           stats_names=("roce_rewinds",))
    assert cpls == [(k, CplStatus.OK) for k in range(n)]
    check_image(image, wrs, cpls, remote)
    assert stats["roce_rewinds"] >= 1


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.full)])
def test_nak_and_local_errors(width):
    """A READ outside the host's region: NAK remote access error, the READ completes with
    REMOTE_ACCESS and the QP's later work requests with FLUSHED. A READ whose local target
    runs past local memory is refused with LOCAL_LENGTH before anything is sent, one on a QP
    that was never opened with QP_NOT_READY."""
    pmtu = 256
    lo, _ = TARGET
    wrs = [read(lo, 0, 64), read(MEM - 10, 0, 64), {**read(lo + 0x400, 0, 64), "qp": 1},
           read(lo + 0x100, HOST_BYTES - 8, 64), read(lo + 0x200, 0, 64)]
    cpls, image, host, _, stats = run(width, pmtu, "onchip", wrs,
                                      stats_names=("roce_error_naks", "rd_done"))
    assert sorted(cpls) == [(0, CplStatus.OK), (1, CplStatus.LOCAL_LENGTH),
                            (2, CplStatus.QP_NOT_READY), (3, CplStatus.REMOTE_ACCESS),
                            (4, CplStatus.FLUSHED)]
    assert stats == {"roce_error_naks": 1, "rd_done": 1}
    assert all(b == PATTERN for b in image[lo + 0x100:lo + 0x300])
    assert all(b == PATTERN for b in image[lo + 0x400:lo + 0x440])


def test_read_unsupported_without_reads():
    """An endpoint built without READs completes a READ work request with UNSUPPORTED."""
    ep = RoceEndpoint(64, 2, mem_bytes=MEM, ring_bytes=MEM // 2, responder=True, reads=False)
    got = []

    async def tb(ctx):
        ctx.set(ep.cpl.ready, 1)
        ctx.set(ep.wr.payload, {"qp": 0, "wr_id": 9, **read(0x100, 0, 64)})
        ctx.set(ep.wr.valid, 1)
        await ctx.tick().until(ep.wr.ready)
        ctx.set(ep.wr.valid, 0)
        c, = await ctx.tick().sample(ep.cpl.payload).until(ep.cpl.valid)
        got.append((c.wr_id, CplStatus(c.status)))

    run_sim(ep, testbenches=[tb], deadline_cycles=2000)
    assert got == [(9, CplStatus.UNSUPPORTED)]
