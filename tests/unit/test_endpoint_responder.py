"""The endpoint with its responder (``RoceEndpoint(responder=True)``), whole, in the Amaranth
simulator: the host NIC model WRITEs and SENDs into it through the MAC port and learns its MAC
address by ARP; its messages complete, the payload reaches the on-chip buffer's write port at
the right addresses, the receive completions come out and the counters count them."""

import random

import pytest

from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.responder import default_config
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Rnic, WcStatus
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac

MEM = 1 << 16


@pytest.mark.parametrize("width, pmtu", [(64, 256), (512, 1024)])
def test_host_writes_and_sends_into_the_endpoint(width, pmtu):
    rng = random.Random(width)
    ep = RoceEndpoint(width, 2, mem_bytes=MEM, responder=True, pmtu=pmtu)
    base, length = ep.config["resp_region"]
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    psn = 0xFFFFF0
    host.create_qp(0x21, peer_qpn=QPN_BASE, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                   pmtu=pmtu, sq_psn=psn)
    rkey = default_config(2, base, length)[0]["mr"]["rkey"]
    writes = [(base + 0x2000 * k + rng.randrange(64), rng.randbytes(n))
              for k, n in enumerate((1, 100, 3 * pmtu + 7))]
    for va, data in writes:
        host.post_send(0x21, "WRITE", data=data, remote_addr=va, rkey=rkey)
    sends = [rng.randbytes(n) for n in (0, 64, 2 * pmtu)]
    for k, data in enumerate(sends):
        host.post_send(0x21, "SEND_IMM", data=data, imm=0x1000 + k)
    rbuf = MEM // 2 + 0x100
    image = bytearray(MEM)
    B = width // 8
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    cpls = []
    stats = {}

    async def memory(ctx):
        w = ep._resp.mem
        async for _, _, valid, ready, p in ctx.tick().sample(w.valid, w.ready, w.payload):
            if valid and ready:
                for lane in range(B):
                    if p.be >> lane & 1:
                        image[p.addr * B + lane] = p.data >> 8 * lane & 0xFF

    async def completions(ctx):
        ctx.set(ep.recv_cpl.ready, 1)
        async for _, _, valid, c in ctx.tick().sample(ep.recv_cpl.valid, ep.recv_cpl.payload):
            if valid:
                cpls.append(meta_dict(c))

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
        for k in range(len(sends)):
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
            if not host.send_outstanding() and len(cpls) == len(sends):
                break
        for name in ("resp_executed", "roce_rx_requests", "resp_duplicate"):
            ctx.set(ep.stats_addr, STATS.index(name))
            await ctx.tick().repeat(3)
            stats[name] = ctx.get(ep.stats_data)

    run_sim(ep, testbenches=[tb], processes=[memory, completions, col.run],
            deadline_cycles=400_000)
    done = host.poll_send_cq()
    assert [c.status for c in done] == [WcStatus.SUCCESS] * (len(writes) + len(sends))
    for va, data in writes:
        assert image[va:va + len(data)] == data, (hex(va), image[va - 8:va + 16].hex(), data[:16].hex())
    assert [(c["wr_id"], c["status"], c["length"], c["has_imm"], c["imm"]) for c in cpls] == \
        [(50 + k, 0, len(d), 1, 0x1000 + k) for k, d in enumerate(sends)]
    for k, data in enumerate(sends):
        assert image[rbuf + 0x1000 * k:rbuf + 0x1000 * k + len(data)] == data
    packets = sum(max(1, -(-len(d) // pmtu)) for _, d in writes) + \
        sum(max(1, -(-len(d) // pmtu)) for d in sends)
    assert stats == {"resp_executed": packets, "roce_rx_requests": packets,
                     "resp_duplicate": 0}
