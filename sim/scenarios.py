"""Traffic scenarios shared by the Amaranth-simulator tests and the cocotb benches."""

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

__all__ = ["FPGA_MAC", "FPGA_IP", "HOST_MAC", "HOST_IP", "host_frames"]

FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"



def host_frames(rng):
    """The mix of frames the host sends: good and bad."""
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    frames = [Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP)]
    for n in [0, 1, 7, 8, 56, 63, 64, 65, 200, 1000, 1472]:
        frames.append(eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(id=0x1234, seq=n)
                      / Raw(rng.randbytes(n)))
    for n in list(range(0, 70)) + [500, 1472]:
        frames.append(eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=40000 + n, dport=7)
                      / Raw(rng.randbytes(n)))
    # malformed or not for us
    bad = [
        Ether(src=HOST_MAC, dst="02:00:00:00:00:55") / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7),
        eth / IP(src=HOST_IP, dst="10.0.0.9") / UDP(dport=7) / Raw(b"x"),
        eth / IP(src=HOST_IP, dst=FPGA_IP, chksum=0x1234) / UDP(dport=7) / Raw(b"x"),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7, chksum=0x4321) / Raw(b"hello"),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=999) / Raw(b"nobody"),
        eth / IP(src=HOST_IP, dst=FPGA_IP, flags="MF") / UDP(dport=7) / Raw(b"frag"),
        eth / IP(src=HOST_IP, dst=FPGA_IP, proto=6) / Raw(b"tcp?" * 5),
        eth / IP(src=HOST_IP, dst=FPGA_IP, options=b"\x01\x01\x01\x01") / UDP(dport=7),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(type=13) / Raw(b"ts"),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(chksum=0xBEEF) / Raw(b"badping"),
        Ether(src=HOST_MAC, dst=FPGA_MAC, type=0x86DD) / Raw(bytes(60)),
        eth / ARP(op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP, hwtype=6),
    ]
    frames += bad
    raw = [bytes(f) for f in frames]
    # truncations of a good datagram: IP says more than the frame holds
    good = bytes(eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7) / Raw(bytes(100)))
    raw += [good[:n] for n in (10, 20, 40, 80)]
    first, rest = raw[0], raw[1:]
    rng.shuffle(rest)
    return [first] + rest
