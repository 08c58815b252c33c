"""RoCEv2 packets through the stack's UDP transmit port: the stack appends a correct ICRC after
the final IPv4 header, and the host NIC model (strict) accepts the frames and writes the data."""

import random

import pytest

from rocegen.gateware.net.stack import NetStack
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.requester.requester import QpSegment, WorkRequest, WrOpcode, build_frame, segment
from rocegen.sim.models.rnic import Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.stack_drivers import introduce_host
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import UDP_PORT_ROCEV2


@pytest.mark.parametrize("width", [64, 512])
def test_roce_packets_get_their_icrc(width):
    rng = random.Random(width)
    nic = Rnic(HOST_MAC, HOST_IP, strict=True)
    nic.create_qp(0x11, peer_qpn=256, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=5, pmtu=256)
    nic.register_mr(0x2000, 4096, rkey=0x77)
    nic.post_recv(0x11, 1024, wr_id=9)
    nic.post_recv(0x11, 1024, wr_id=10)      # WRITE with immediate consumes one too
    qp = QpSegment(dest_qpn=0x11, rkey=0x77, base_va=0x2000, psn=5, pmtu=256)
    wrs = [WorkRequest(1, WrOpcode.WRITE, 700, remote_offset=0x10),
           WorkRequest(2, WrOpcode.SEND_IMM, 0, imm=0xABCD),
           WorkRequest(3, WrOpcode.WRITE_IMM, 13, remote_offset=0x800, imm=3)]
    pkts = [(p, rng.randbytes(p.length)) for wr in wrs for p in segment(wr, qp)]
    qp.psn = 5
    sport = 0xC0DE
    # the UDP payloads (BTH .. pad, no ICRC) the requester hands to the stack
    datagrams = [build_frame(p, data, qp, src_mac=parse_mac(FPGA_MAC),
                             dst_mac=parse_mac(HOST_MAC), src_ip=parse_ip(FPGA_IP),
                             dst_ip=parse_ip(HOST_IP), udp_sport=sport)[42:-4]
                 for p, data in pkts]

    dut = NetStack(width, (7, UDP_PORT_ROCEV2), mtu=1500)
    rx = StreamDriver(dut.mac_rx, width)
    tx = StreamDriver(dut.udp_tx[1], width, idle=0.3, seed=3)
    col = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=4)

    async def tb(ctx):
        await introduce_host(ctx, dut, rx, col)
        await tx.send(ctx, [Packet(d, {"udp": {
            "dst_ip": parse_ip(HOST_IP), "src_port": sport, "dst_port": UDP_PORT_ROCEV2,
            "length": len(d) + 4, "dscp": 0, "ecn": 0, "icrc": 1}}) for d in datagrams])
        while len(col.packets) < 1 + len(datagrams):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run])
    frames = [p.data for p in col.packets[1:]]
    assert len(frames) == len(datagrams)
    assert not any(p.error for p in col.packets)
    for frame, (pkt, data) in zip(frames, pkts, strict=True):
        assert icrc_model.check(frame), "bad ICRC"
        ip_id = int.from_bytes(frame[18:20], "big")
        want = build_frame(pkt, data, qp, src_mac=parse_mac(FPGA_MAC), dst_mac=parse_mac(HOST_MAC),
                           src_ip=parse_ip(FPGA_IP), dst_ip=parse_ip(HOST_IP), udp_sport=sport,
                           ip_id=ip_id)
        assert frame[:len(want)] == want
        assert not any(frame[len(want):])             # only Ethernet padding after the ICRC
        nic.receive(frame)
    written = b"".join(data for (p, data) in pkts[:3])
    assert nic.read_mem(0x2010, 700) == written
    assert nic.read_mem(0x2800, 13) == pkts[-1][1]
    assert [c.imm for c in nic.poll_cq()] == [0xABCD, 3]
