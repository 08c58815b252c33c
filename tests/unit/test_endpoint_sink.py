"""The endpoint with its responder and pattern sink, whole, in the Amaranth simulator, as a host
drives it through the MAC port: OPEN_QP over the connection manager names the QP's region
(R_Key, base, length), the host WRITEs and SENDs the test pattern of the FPGA addresses it
writes (one message with bytes changed on purpose), and QUERY answers with the sink's
byte-exact verdict, which the statistics counters repeat."""

import pytest

from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.gateware.roce.responder import default_config
from rocegen.sim.models import cm as M
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import IDEAL, Rnic, WcStatus
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.pattern import pattern

MEM = 1 << 15
PORT = 0x4444           # the host's UDP port for connection-manager replies


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.full)])
def test_region_writes_and_verdict(width):
    pmtu = 256
    ep = shared(RoceEndpoint, width, 2, mem_bytes=MEM, responder=True, pmtu=pmtu,
                resp_region=(0x1000, 0x3000), rkey_seed=0x77)
    mr = default_config(2, 0x1000, 0x3000, rkey_seed=0x77)[0]["mr"]
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, udp_ports=(PORT,))
    psn = 0xFFFFFA
    drv = StreamDriver(ep.mac_rx, width, gaps="between")
    col = StreamCollector(ep.mac_tx, width)
    replies, stats = [], {}
    # WRITEs of the pattern of the FPGA addresses, SEND of the pattern of the receive buffer's
    # address; the last WRITE has 3 bytes changed
    writes = [(0x1000, 1), (0x1003, 300), (0x1400, 3 * pmtu + 5), (0x2ff0, 16)]
    rbuf = 0x3800
    sends = [100]
    bad_lanes = (0, 7, 15)

    def write_data(va, n, last):
        data = bytearray(pattern(va, n))
        if last:
            for k in bad_lanes:
                data[k] ^= 0x5A
        return bytes(data)

    async def exchange(ctx, frames, until):
        """Frames to the FPGA, its frames to the host, until ``until()`` holds."""
        seen = len(col.packets)
        for _ in range(600):
            while seen < len(col.packets):
                frames += host.receive(col.packets[seen].data)
                seen += 1
            frames += host.next_frames(budget=4)
            if frames:
                await drv.send(ctx, [Packet(f) for f in frames])
                frames = []
            else:
                await ctx.tick().repeat(40)
            if until():
                return
        raise AssertionError("no end of the exchange")

    async def cm_request(ctx, payload):
        n = len(host.udp_rx)
        await exchange(ctx, [host.udp_frame(FPGA_IP, PORT, M.CM_PORT, payload,
                                            dst_mac=FPGA_MAC)], lambda: len(host.udp_rx) > n)
        replies.append(host.udp_rx[-1][3])
        return M.unpack(replies[-1])

    async def tb(ctx):
        ctx.set(ep.local_mac, parse_mac(FPGA_MAC))
        ctx.set(ep.local_ip, parse_ip(FPGA_IP))
        ctx.set(ep.recv_cpl.ready, 1)
        ctx.set(ep.recv.payload, {"qp": 0, "wr_id": 9, "addr": rbuf, "length": 0x400})
        ctx.set(ep.recv.valid, 1)
        await ctx.tick().until(ep.recv.ready)
        ctx.set(ep.recv.valid, 0)
        before = await cm_request(ctx, M.request(M.REQ_QUERY, loc_qpn=0x21, loc_psn=1,
                                                 listening_port=PORT))
        opened = await cm_request(ctx, M.request(
            M.REQ_OPEN_QP, loc_qpn=0x21, loc_psn=psn, loc_rkey=0x99, loc_vaddr=0x7000_0000,
            loc_ip=parse_ip(HOST_IP), listening_port=PORT))
        assert opened["ack_type"] == M.ACK_ACK
        host.create_qp(0x21, peer_qpn=opened["loc_qpn"], peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                       epsn=psn, pmtu=pmtu)
        rkey, base, _ = M.region(opened)
        for k, (va, n) in enumerate(writes):
            host.post_send(0x21, "WRITE", data=write_data(va, n, k == len(writes) - 1),
                           remote_addr=va, rkey=rkey)
        for n in sends:
            host.post_send(0x21, "SEND_IMM", data=pattern(rbuf, n), imm=5)
        await exchange(ctx, [], lambda: not host.send_outstanding())
        after = await cm_request(ctx, M.request(M.REQ_QUERY, loc_qpn=0x21, loc_psn=2,
                                                listening_port=PORT))
        assert before["ack_type"] == after["ack_type"] == M.ACK_ACK
        for name in ("sink_bytes_checked", "sink_bytes_wrong"):
            ctx.set(ep.stats_addr, STATS.index(name))
            await ctx.tick().repeat(3)
            stats[name] = ctx.get(ep.stats_data)

    run_sim(ep, testbenches=[tb], processes=[col.run], deadline_cycles=400_000)
    assert [c.status for c in host.poll_send_cq()] == [WcStatus.SUCCESS] * (len(writes) + 1)
    opened = M.unpack(replies[1])
    assert M.region(opened) == (mr["rkey"], 0x1000, 0x3000)
    assert opened["rem_vaddr"] == 0x7000_0000 and opened["rem_rkey"] == 0x99
    total = sum(n for _, n in writes) + sum(sends)
    assert M.query_counts(replies[0]) == (0, 0)
    assert M.query_counts(replies[-1]) == (total, len(bad_lanes))
    assert stats == {"sink_bytes_checked": total, "sink_bytes_wrong": len(bad_lanes)}
