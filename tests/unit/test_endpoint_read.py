"""RDMA READ against the endpoint (``RoceEndpoint(responder=True)``), whole, in the Amaranth
simulator: the host NIC model READs the endpoint's region through the MAC port (ONLY and
multi-packet responses, zero length, unaligned addresses, 16 READs outstanding), mixed with its
WRITEs and SENDs on the same QP; every READ completes with the bytes of the region (written
first through ``mem_w``, or by the host's own WRITEs before the READ), the answers of the QP
leave in PSN order, bad R_Keys and addresses outside the region end in NAK remote access error,
and the counters count the READs."""

import random

import pytest
from scapy.layers.inet import IP, UDP

from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.responder import default_config
from rocegen.sim.models.axi_ram import AxiRam
from rocegen.sim.models.axi_write_mem import AxiWriteMemory
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Access, Rnic, WcOpcode, WcStatus
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, mem_write_watcher
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac

MEM = 1 << 16
#: Bytes of the region the test fills before the host reads it.
FILLED = 0x4000
HOST_QPN = 0x21
#: ACKNOWLEDGE and READ response opcodes (the answers of a QP).
ANSWERS = {0x0D, 0x0E, 0x0F, 0x10, 0x11}


def answers(frames):
    """The (opcode, PSN) of each answer the endpoint sent, in order (parsed with scapy)."""
    out = []
    for f in frames:
        ip = IP(bytes(f)[14:])
        if UDP not in ip or ip[UDP].dport != 4791:
            continue
        bth = bytes(ip[UDP].payload)
        if bth[0] in ANSWERS:
            out.append((bth[0], int.from_bytes(bth[9:12], "big")))
    return out


def run(width, pmtu, memory, posts, *, psn=0xFFFFF0, fill=True, stats_names=()):
    """The host posts ``posts`` (``(opcode, kwargs)``, READ / WRITE / SEND) on one QP to the
    endpoint; returns the host, the endpoint's local memory image, the answers sent, the
    counters ``stats_names`` and the most READ requests the endpoint had received and not yet
    answered in full (by the host's count)."""
    rng = random.Random(width * 7 + pmtu)
    ep = shared(RoceEndpoint, width, 2, memory=memory, mem_bytes=MEM, ring_bytes=MEM // 2,
                responder=True, pmtu=pmtu)
    assert ep.reads and ep.config["rd_depth"] == 16
    base, _ = ep.config["resp_region"]
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    host.create_qp(HOST_QPN, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu, sq_psn=psn, access=Access.REMOTE_WRITE | Access.REMOTE_READ,
                   max_rd_atomic=16)
    B = width // 8
    image = bytearray(MEM)
    if fill:
        image[base:base + FILLED] = rng.randbytes(FILLED)
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    stats = {}
    sent, most = [0], [0]
    processes = []
    if memory == "axi4":
        axi = AxiWriteMemory(width, MEM, aw=ep.axi.aw, w=ep.axi.w, b=ep.axi.b, b_latency=(20, 90),
                             aw_stall=0.3, w_stall=0.3, b_stall=0.2, seed=width)
        axi.mem[:] = image
        axi.acked[:] = image
        image = axi.mem
        # (the reads see only the bytes whose write the memory has acknowledged: a READ that
        # read before the WRITEs ahead of it were acknowledged would return old bytes)
        rd = AxiRam(width, MEM, ar=ep.axi.ar, r=ep.axi.r, mem=axi.acked, latency=20,
                    ar_stall=0.2, r_stall=0.2, seed=width)
        processes += [axi.run, rd.run]
    else:
        processes.append(mem_write_watcher(ep._resp.mem, image, width))

    for op, kw in posts:
        host.post_send(HOST_QPN, op, **kw)

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        if memory == "onchip" and fill:
            ctx.set(ep.mem_w.valid, 1)
            for a in range(base, base + FILLED, B):
                ctx.set(ep.mem_w.payload, {"addr": a // B, "be": (1 << B) - 1,
                                           "data": int.from_bytes(image[a:a + B], "little")})
                await ctx.tick().until(ep.mem_w.ready)
            ctx.set(ep.mem_w.valid, 0)
        ctx.set(ep.qp_ctl.payload, {"qp": 0, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": HOST_QPN,
            "pmtu_log2": pmtu.bit_length() - 1, "udp_sport": 0xC123}})
        ctx.set(ep.qp_ctl.valid, 1)
        await ctx.tick().until(ep.qp_ctl.ready)
        ctx.set(ep.qp_ctl.valid, 0)
        ctx.set(ep.qp_psn.payload, {"qp": 0, "psn": psn})
        ctx.set(ep.qp_psn.valid, 1)
        await ctx.tick().until(ep.qp_psn.ready)
        ctx.set(ep.qp_psn.valid, 0)
        ctx.set(ep.recv.payload, {"qp": 0, "wr_id": 7, "addr": MEM // 2, "length": 4096})
        ctx.set(ep.recv.valid, 1)
        await ctx.tick().until(ep.recv.ready)
        ctx.set(ep.recv.valid, 0)
        seen = 0
        for _ in range(600):
            frames = host.next_frames(budget=32)
            sent[0] += sum(bytes(f)[42] == 0x0C for f in frames)
            done = sum(c.opcode == WcOpcode.RDMA_READ for c in host.send_cq)
            most[0] = max(most[0], sent[0] - done)
            while seen < len(col.packets):
                frames += host.receive(col.packets[seen].data)
                seen += 1
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
            else:
                await ctx.tick().repeat(50)
            if not host.send_outstanding():
                break
        for name in stats_names:
            ctx.set(ep.stats_addr, STATS.index(name))
            await ctx.tick().repeat(3)
            stats[name] = ctx.get(ep.stats_data)
        await ctx.tick().repeat(100)

    run_sim(ep, testbenches=[tb], processes=[*processes, col.run], deadline_cycles=600_000)
    return host, image, answers(p.data for p in col.packets), stats, most[0]


def in_psn_order(got, psn):
    """The answers' PSNs (relative to the first PSN) never go back."""
    rel = [(p - psn) % (1 << 24) for _, p in got]
    assert rel == sorted(rel), f"answers out of PSN order: {got}"


@pytest.mark.parametrize("width, pmtu, memory", [
    (64, 256, "onchip"), pytest.param(512, 1024, "onchip", marks=pytest.mark.full),
    (512, 1024, "axi4")])
def test_host_reads_the_endpoint(width, pmtu, memory):
    rng = random.Random(width)
    psn = 0xFFFFF0
    base = 0
    rkey = default_config(2, base, MEM // 2)[0]["mr"]["rkey"]
    # READs of the filled part: (offset, length)
    reads = [(0, 8), (0x100, 3 * pmtu + 7), (0x333, 0), (0x401, 2 * pmtu + 5),
             (0x1003, pmtu), (0x2007, pmtu + 1), (0x3F00 - 1, 1)]
    reads += [(rng.randrange(FILLED - 600), rng.randrange(1, 600)) for _ in range(13)]
    posts = [("READ", {"length": n, "remote_addr": base + va, "rkey": rkey, "wr_id": k})
             for k, (va, n) in enumerate(reads)]
    # a WRITE (then READ back), a SEND, a READ, mixed on the same QP
    wdata = rng.randbytes(2 * pmtu + 3)
    wva = base + FILLED + 0x105
    posts += [("WRITE", {"data": wdata, "remote_addr": wva, "rkey": rkey, "wr_id": 100}),
              ("READ", {"length": len(wdata), "remote_addr": wva, "rkey": rkey, "wr_id": 101}),
              ("SEND", {"data": rng.randbytes(100), "wr_id": 102}),
              ("READ", {"length": 77, "remote_addr": base + 0x77, "rkey": rkey, "wr_id": 103})]
    host, image, got, stats, most = run(width, pmtu, memory, posts, psn=psn,
                                     stats_names=("resp_executed", "resp_access",
                                                  "roce_tx_packets"))
    done = host.poll_send_cq()
    assert [c.wr_id for c in done] == [kw["wr_id"] for _, kw in posts]
    assert [c.status for c in done] == [WcStatus.SUCCESS] * len(posts)
    for c, (op, kw) in zip(done, posts):
        if op == "READ":
            va = kw["remote_addr"]
            assert c.opcode == WcOpcode.RDMA_READ
            assert c.data == bytes(image[va:va + kw["length"]]), (c.wr_id, hex(va))
    assert done[-3].data == wdata
    in_psn_order(got, psn)
    packets = sum(max(1, -(-kw["length"] // pmtu)) for op, kw in posts if op == "READ")
    assert sum(op != 0x11 for op, _ in got) == packets
    requests = sum(1 if op == "READ" else max(1, -(-len(kw["data"]) // pmtu))
                   for op, kw in posts)
    assert stats == {"resp_executed": requests, "resp_access": 0, "roce_tx_packets": 0}
    assert host.counters["req_read_retry"] == 0
    assert most == 16                   # READs outstanding: the host's max_rd_atomic


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.full)])
def test_bad_reads_are_refused(width):
    pmtu = 256
    rkey = default_config(2, 0, MEM // 2)[0]["mr"]["rkey"]
    posts = [("READ", {"length": 16, "remote_addr": 0x40, "rkey": rkey ^ 0x100, "wr_id": 1})]
    host, _, got, stats, _ = run(width, pmtu, "onchip", posts, fill=False,
                                 stats_names=("resp_access", "resp_executed"))
    assert [(c.wr_id, c.status) for c in host.poll_send_cq()] == \
        [(1, WcStatus.REM_ACCESS_ERR)]
    assert stats == {"resp_access": 1, "resp_executed": 0}
    assert [op for op, _ in got] == [0x11]
    # a READ running past the region's end: the same
    posts = [("READ", {"length": 32, "remote_addr": MEM // 2 - 16, "rkey": rkey, "wr_id": 2})]
    host, _, got, stats, _ = run(width, pmtu, "onchip", posts, fill=False,
                                 stats_names=("resp_access",))
    assert [(c.wr_id, c.status) for c in host.poll_send_cq()] == \
        [(2, WcStatus.REM_ACCESS_ERR)]
    assert stats == {"resp_access": 1}


def test_reads_need_the_responder():
    with pytest.raises(ValueError, match="responder"):
        RoceEndpoint(64, 2, reads=True)
    with pytest.raises(TypeError, match="reads"):
        RoceEndpoint(64, 2, responder=True, reads=1)
    assert not RoceEndpoint(64, 2, responder=True, reads=False).reads
