"""The endpoint with its responder (``RoceEndpoint(responder=True)``), whole, in the Amaranth
simulator: the host NIC model WRITEs and SENDs into it through the MAC port and learns its MAC
address by ARP; its messages complete, the payload reaches local memory at the right addresses,
the receive completions come out and the counters count them.

Two memories: the on-chip buffer (the responder's write port watched), and AXI4, an
:class:`~rocegen.sim.models.axi_write_mem.AxiWriteMemory` with random stalls and write responses
20..90 cycles after the data, which asserts that no receive completion comes out before the write
responses of its message's data, and of every message sent before it, have been taken."""

import random

import pytest

from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.responder import default_config
from rocegen.sim.models.axi_ram import AxiRam
from rocegen.sim.models.axi_write_mem import AxiWriteMemory
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Rnic, WcStatus
from rocegen.sim.testing.amaranth_streams import (
    StreamCollector,
    StreamDriver,
    mem_write_watcher,
    meta_dict,
)
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac

MEM = 1 << 16


@pytest.mark.parametrize("width, pmtu, memory", [
    (64, 256, "onchip"), pytest.param(512, 1024, "onchip", marks=pytest.mark.full),
    pytest.param(64, 256, "axi4", marks=pytest.mark.full), (512, 1024, "axi4")])
def test_host_writes_and_sends_into_the_endpoint(width, pmtu, memory):
    rng = random.Random(width + len(memory))
    ep = shared(RoceEndpoint, width, 2, memory=memory, mem_bytes=MEM, ring_bytes=MEM // 2,
                responder=True, pmtu=pmtu)
    base, length = ep.config["resp_region"]
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    psn = 0xFFFFF0
    host.create_qp(0x21, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu, sq_psn=psn)
    rkey = default_config(2, base, length)[0]["mr"]["rkey"]
    rbuf = MEM // 2 + 0x100
    # the messages in the order sent: (opcode, address of the data, data, imm)
    msgs = [("WRITE", base + 0x2000 * k + rng.randrange(64), rng.randbytes(n), None)
            for k, n in enumerate((1, 100, 3 * pmtu + 7))]
    msgs.append(("WRITE_IMM", base + 0x6000 + rng.randrange(64), rng.randbytes(2 * pmtu + 5),
                 0xABC))
    msgs += [("SEND_IMM", rbuf + 0x1000 * (k + 1), rng.randbytes(n), 0x1000 + k)
             for k, n in enumerate((0, 64, 2 * pmtu))]
    for op, va, data, imm in msgs:
        if op.startswith("WRITE"):
            host.post_send(0x21, op, data=data, remote_addr=va, rkey=rkey, imm=imm)
        else:
            host.post_send(0x21, op, data=data, imm=imm)
    # the receive buffers, each consumed by the message with a completion in turn
    completing = [k for k, (op, *_) in enumerate(msgs) if op.endswith("_IMM")]
    image = bytearray(MEM)
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    cpls = []
    stats = {}
    processes = []
    if memory == "axi4":
        axi = AxiWriteMemory(width, MEM, aw=ep.axi.aw, w=ep.axi.w, b=ep.axi.b, b_latency=(20, 90),
                             aw_stall=0.3, w_stall=0.3, b_stall=0.2, seed=width)
        image = axi.mem
        reads = AxiRam(width, MEM, ar=ep.axi.ar, r=ep.axi.r, mem=axi.mem)
        processes += [axi.run, reads.run]
    else:
        processes.append(mem_write_watcher(ep._resp.mem, image, width))

    async def completions(ctx):
        ctx.set(ep.recv_cpl.ready, 1)
        async for _, _, valid, c in ctx.tick().sample(ep.recv_cpl.valid, ep.recv_cpl.payload):
            if not valid:
                continue
            cpls.append(meta_dict(c))
            if memory == "axi4":
                # the message's data, and that of every message before it, acknowledged
                wr_id = cpls[-1]["wr_id"]
                for op, va, data, _ in msgs[:completing[wr_id - 50] + 1]:
                    assert axi.acked[va:va + len(data)] == data, \
                        f"completion {wr_id} out before the data of the {op} at {va:#x} " \
                        f"was acknowledged"

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.qp_ctl.payload, {"qp": 0, "context": {
            "state": QpState.RTS, "peer_ip": parse_ip(HOST_IP), "peer_qpn": 0x21,
            "pmtu_log2": pmtu.bit_length() - 1, "udp_sport": 0xC123}})
        ctx.set(ep.qp_ctl.valid, 1)
        await ctx.tick().until(ep.qp_ctl.ready)
        ctx.set(ep.qp_ctl.valid, 0)
        ctx.set(ep.qp_psn.payload, {"qp": 0, "psn": psn})
        ctx.set(ep.qp_psn.valid, 1)
        await ctx.tick().until(ep.qp_psn.ready)
        ctx.set(ep.qp_psn.valid, 0)
        for k in range(len(completing)):
            ctx.set(ep.recv.payload, {"qp": 0, "wr_id": 50 + k, "addr": rbuf + 0x1000 * k,
                                      "length": 2 * pmtu})
            ctx.set(ep.recv.valid, 1)
            await ctx.tick().until(ep.recv.ready)
        ctx.set(ep.recv.valid, 0)
        seen = 0
        for _ in range(400):
            frames = host.next_frames(budget=4)
            while seen < len(col.packets):
                frames += host.receive(col.packets[seen].data)
                seen += 1
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
            else:
                await ctx.tick().repeat(50)
            if not host.send_outstanding() and len(cpls) == len(completing):
                break
        for name in ("resp_executed", "roce_rx_requests", "resp_duplicate"):
            ctx.set(ep.stats_addr, STATS.index(name))
            await ctx.tick().repeat(3)
            stats[name] = ctx.get(ep.stats_data)
        await ctx.tick().repeat(200)

    run_sim(ep, testbenches=[tb], processes=[*processes, completions, col.run],
            deadline_cycles=400_000)
    done = host.poll_send_cq()
    assert [c.status for c in done] == [WcStatus.SUCCESS] * len(msgs)
    for op, va, data, _ in msgs:
        assert image[va:va + len(data)] == data, (op, hex(va), image[va - 8:va + 16].hex(),
                                                  data[:16].hex())
    if memory == "axi4":
        assert axi.acked == axi.mem
        assert axi.max_unacked > 1          # bursts were in flight together
    assert [(c["wr_id"], c["status"], c["length"], c["has_imm"], c["imm"]) for c in cpls] == \
        [(50 + n, 0, len(msgs[k][2]), 1, msgs[k][3]) for n, k in enumerate(completing)]
    packets = sum(max(1, -(-len(data) // pmtu)) for _, _, data, _ in msgs)
    assert stats == {"resp_executed": packets, "roce_rx_requests": packets,
                     "resp_duplicate": 0}
