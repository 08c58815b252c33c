"""The host side of ``rocegen sim serve`` without a simulator: wire framing, the tunnel's frames
(checked with scapy), and where each frame from the FPGA goes."""

import socket

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from rocegen.sim.apps.bridge import MAX_FRAME, FrameReader, HostSide, encode_frame, udp_frame

FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"


def test_frame_reader_splits_a_byte_stream_anywhere():
    frames = [bytes(range(14)), b"\xAA" * 60, b"\x55" * 4000]
    stream = b"".join(encode_frame(f) for f in frames)
    for cut in (1, 3, 5, 17, 1000):
        r, got = FrameReader(), []
        for k in range(0, len(stream), cut):
            got += r.feed(stream[k:k + cut])
        assert got == frames


@pytest.mark.parametrize("n", [0, 13, MAX_FRAME + 1])
def test_frame_lengths_are_checked(n):
    with pytest.raises(ValueError, match="14"):
        encode_frame(bytes(n))
    with pytest.raises(ValueError, match="frame length"):
        FrameReader().feed(n.to_bytes(4, "big") + bytes(20))


def test_udp_frame_is_what_scapy_builds():
    f = udp_frame(0x020000000099, 0x020000000001, 0x0A000001, 0x0A000002, 5000, 17185,
                  b"hello", ident=7)
    ref = Ether(src=HOST_MAC, dst=FPGA_MAC) / IP(src=HOST_IP, dst=FPGA_IP, id=7, flags="DF") / \
        UDP(sport=5000, dport=17185) / Raw(b"hello")
    assert f == bytes(ref) + bytes(60 - len(ref))


@pytest.fixture
def side():
    s = HostSide(fpga_mac=FPGA_MAC, fpga_ip=FPGA_IP, host_mac=HOST_MAC, host_ip=HOST_IP,
                 cm_port=0, wire_port=0, log=lambda text: None)
    yield s
    s.close()


def _poll(side, n=1):
    got = []
    for _ in range(200):
        got += side.poll(0.05)
        if len(got) >= n:
            return got
    raise AssertionError(f"{len(got)} of {n} frames")


def test_tunnel_turns_datagrams_into_frames_to_the_fpga(side):
    tool = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tool.bind(("127.0.0.1", 0))
    sport = tool.getsockname()[1]
    tool.sendto(b"\x03" * 64, ("127.0.0.1", side.cm_port))
    (frame,) = _poll(side)
    tool.close()
    p = Ether(frame)
    assert (p.src, p.dst, p[IP].src, p[IP].dst) == (HOST_MAC, FPGA_MAC, HOST_IP, FPGA_IP)
    assert p[UDP].sport == sport and p[UDP].dport == 17185
    assert bytes(p[UDP].payload) == b"\x03" * 64
    chk_ip, chk_udp = p[IP].chksum, p[UDP].chksum
    del p[IP].chksum, p[UDP].chksum
    q = Ether(bytes(p))
    assert (q[IP].chksum, q[UDP].chksum) == (chk_ip, chk_udp)


def test_fpga_replies_reach_the_port_they_name_from_the_fpga_port(side):
    tool = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tool.bind(("127.0.0.1", 0))
    tool.settimeout(5)
    port = tool.getsockname()[1]
    reply = Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP) / \
        UDP(sport=0x8765, dport=port) / Raw(b"R" * 64)
    assert side.from_fpga(bytes(reply)) == []
    data, (addr, sport) = tool.recvfrom(2048)
    tool.close()
    assert data == b"R" * 64 and addr == "127.0.0.1"
    assert sport in (0x8765, side.cm_port)      # the FPGA's port, when free here
    assert side.counters["tunnel_tx"] == 1


def test_arp_for_the_host_is_answered_and_roce_goes_to_the_wire(side):
    ask = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP, pdst=HOST_IP)
    (answer,) = side.from_fpga(bytes(ask))
    a = Ether(answer)
    assert a.dst == FPGA_MAC and a[ARP].op == 2 and a[ARP].hwsrc == HOST_MAC
    assert a[ARP].psrc == HOST_IP and a[ARP].pdst == FPGA_IP
    roce = bytes(Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP) /
                 UDP(sport=0xC000, dport=4791) / BTH(opcode=4, dqpn=0x40) / Raw(b"x" * 8))
    assert side.from_fpga(roce) == []
    assert side.counters["wire_no_peer"] == 1           # nobody on the wire yet
    peers = [socket.create_connection(("127.0.0.1", side.wire_port)) for _ in range(2)]
    for _ in range(100):
        side.poll(0.01)
        if len(side.peers) == 2:
            break
    other_arp = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP, pdst="10.0.0.77")
    side.from_fpga(roce)
    side.from_fpga(bytes(other_arp))
    for p in peers:
        r, got = FrameReader(), []
        p.settimeout(5)
        while len(got) < 2:
            got += r.feed(p.recv(65536))
        assert got == [roce, bytes(other_arp)]
    # frames from a peer go to the FPGA; a peer that breaks the framing is dropped
    peers[0].sendall(encode_frame(roce))
    assert _poll(side) == [roce]
    peers[1].sendall(b"\xff\xff\xff\xff")
    for _ in range(100):
        side.poll(0.01)
        if len(side.peers) == 1:
            break
    assert side.counters["wire_bad_length"] == 1 and len(side.peers) == 1
    for p in peers:
        p.close()


@pytest.mark.parametrize("roce", ["tap", "wire"])
def test_with_a_tap_roce_takes_the_tap_unless_told_the_wire(roce):
    """Every frame of the FPGA goes to the TAP, RoCEv2 too, unless ``roce="wire"`` (here the
    TAP is a datagram socket pair: one write, one frame)."""
    s = HostSide(fpga_mac=FPGA_MAC, fpga_ip=FPGA_IP, host_mac=HOST_MAC, host_ip=HOST_IP,
                 cm_port=0, wire_port=0, roce=roce, log=lambda text: None)
    ours, kernel = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.tap = ours.detach()
    kernel.settimeout(5)
    try:
        roce_frame = bytes(Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP) /
                           UDP(sport=0xC000, dport=4791) / BTH(opcode=10, dqpn=0x40) / Raw(b"x" * 8))
        ping = bytes(Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP, proto=1) /
                     Raw(b"\x00" * 16))
        assert s.from_fpga(roce_frame) == [] and s.from_fpga(ping) == []
        got = [kernel.recv(65536)]
        if roce == "tap":
            got.append(kernel.recv(65536))
            assert got == [roce_frame, ping]
            assert s.counters["wire_no_peer"] == 0 and s.counters["tap_tx"] == 2
        else:
            assert got == [ping]
            assert s.counters["wire_no_peer"] == 1 and s.counters["tap_tx"] == 1
    finally:
        s.close()
        kernel.close()


def test_roce_path_is_checked():
    with pytest.raises(ValueError, match="roce must be one of tap, wire, not 'nic'"):
        HostSide(fpga_mac=FPGA_MAC, fpga_ip=FPGA_IP, host_mac=HOST_MAC, host_ip=HOST_IP,
                 cm_port=0, wire_port=0, roce="nic")
    with pytest.raises(ValueError, match="vlan must be a VLAN ID 1..4094, not 4095"):
        HostSide(fpga_mac=FPGA_MAC, fpga_ip=FPGA_IP, host_mac=HOST_MAC, host_ip=HOST_IP,
                 cm_port=0, wire_port=0, vlan=4095)


def test_vlan_the_host_side_is_an_access_port():
    """With ``vlan``, frames from the FPGA must carry that tag and lose it before the host side
    sees them; what goes to the FPGA is tagged (checked with scapy's Dot1Q)."""
    from scapy.layers.l2 import Dot1Q
    s = HostSide(fpga_mac=FPGA_MAC, fpga_ip=FPGA_IP, host_mac=HOST_MAC, host_ip=HOST_IP,
                 cm_port=0, wire_port=0, vlan=42, pcp=5, log=lambda text: None)
    try:
        ask = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
            op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP, pdst=HOST_IP)
        tagged = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / Dot1Q(vlan=42, prio=3) / ARP(
            op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP, pdst=HOST_IP)
        other = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / Dot1Q(vlan=43) / ARP(
            op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP, pdst=HOST_IP)
        assert s.from_fpga(bytes(ask)) == [] and s.from_fpga(bytes(other)) == []
        assert s.counters["vlan_drop"] == 2 and s.counters["arp_answered"] == 0
        (answer,) = s.from_fpga(bytes(tagged))
        a = Ether(answer)
        assert a[Dot1Q].vlan == 42 and a[Dot1Q].prio == 5 and a[Dot1Q].type == 0x0806
        assert a[ARP].op == 2 and a[ARP].hwsrc == HOST_MAC and a[ARP].pdst == FPGA_IP
        # the tunnel's datagrams reach the FPGA tagged
        tool = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tool.sendto(b"\x05" * 64, ("127.0.0.1", s.cm_port))
        (frame,) = _poll(s)
        tool.close()
        p = Ether(frame)
        assert p[Dot1Q].vlan == 42 and p[IP].dst == FPGA_IP and bytes(p[UDP].payload) == b"\x05" * 64
        # the FPGA's tagged replies reach the tool untagged
        tool = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tool.bind(("127.0.0.1", 0))
        tool.settimeout(5)
        reply = Ether(src=FPGA_MAC, dst=HOST_MAC) / Dot1Q(vlan=42) / IP(src=FPGA_IP, dst=HOST_IP) \
            / UDP(sport=0x8765, dport=tool.getsockname()[1]) / Raw(b"R" * 64)
        assert s.from_fpga(bytes(reply)) == []
        assert tool.recv(2048) == b"R" * 64
        tool.close()
    finally:
        s.close()
