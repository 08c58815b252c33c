"""Traffic scenarios shared by the Amaranth-simulator tests and the cocotb testbenches."""

import struct

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import checksum

from rocegen.sim.models import icrc
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.simwire import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC

__all__ = ["FPGA_MAC", "FPGA_IP", "HOST_MAC", "HOST_IP", "host_frames", "host_requests",
           "garbage_frames", "cnp_frame"]



def cnp_frame(dest_qp, vlan=None):
    """A CNP from the host to the endpoint's QP ``dest_qp``, tagged with VLAN ``vlan`` if given
    (scapy for Ethernet, IPv4 and UDP; the header table for the BTH; a valid ICRC)."""
    bth = H.BTH.pack(opcode=opc.OP_CNP, becn=1, pkey=0xFFFF, dest_qp=dest_qp, psn=0)
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    frame = eth / IP(src=HOST_IP, dst=FPGA_IP, tos=48 << 2, flags="DF") / \
        UDP(sport=0xC000, dport=H.UDP_PORT_ROCEV2, chksum=0) / (bth + bytes(16) + bytes(4))
    return icrc.append(bytes(frame)[:-4])


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
    # a ping whose header's first half (version to protocol) sums to 0xFFFF, so that its right
    # checksum makes the second half 0xFFFF too (0xFFFF + 0xFFFF folds to 0xFFFF), and the same
    # ping with two wrong checksums
    edge = _halves_ffff(eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(seq=9) / Raw(b"halves"))
    right = edge[IP].chksum
    raw.append(bytes(edge))
    for wrong in (right ^ 1, 0xFFFF - right):
        bad = edge.copy()
        bad[IP].chksum = wrong
        raw.append(bytes(bad))
    # truncations of a good datagram: IP says more than the frame holds
    good = bytes(eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7) / Raw(bytes(100)))
    raw += [good[:n] for n in (10, 20, 40, 80)]
    first, rest = raw[0], raw[1:]
    rng.shuffle(rest)
    return [first] + rest


def _halves_ffff(pkt):
    """``pkt`` (scapy, Ethernet / IP / ...) with its IPv4 identification chosen so that the one's
    complement sum of the header's first five 16-bit words is 0xFFFF, parsed again from its
    bytes (its checksum computed, right)."""
    pkt = pkt.copy()
    pkt[IP].id = 0
    base = checksum(bytes(pkt[IP])[:10]) ^ 0xFFFF      # the sum of those words, id 0
    pkt[IP].id = 0xFFFF - base
    del pkt[IP].chksum
    pkt = Ether(bytes(pkt))
    assert checksum(bytes(pkt[IP])[:10]) == 0          # (scapy's checksum is the complement)
    return pkt


def host_requests(rng, n, *, vlan=None, max_payload=150):
    """``n`` well-formed requests from the host (HOST_MAC/HOST_IP): ARP requests, pings and UDP
    echo datagrams (port 7) of random sizes (payloads up to ``max_payload`` bytes) and DSCP/ECN.
    Tagged 802.1Q with ``vlan`` if set (random priority and DEI: the endpoint must ignore them).
    The first is an ARP request, so that the endpoint knows where to send the UDP echo
    replies."""
    def eth(dst=FPGA_MAC):
        e = Ether(src=HOST_MAC, dst=dst)
        if vlan is not None:
            e = e / Dot1Q(vlan=vlan, prio=rng.randrange(8), dei=rng.randrange(2))
        return e
    frames = [eth("ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP)]
    while len(frames) < n:
        tos = rng.randrange(256)
        what = rng.random()
        if what < 0.1:
            frames.append(eth(rng.choice([FPGA_MAC, "ff:ff:ff:ff:ff:ff"])) / ARP(
                op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP))
        elif what < 0.55:
            frames.append(eth() / IP(src=HOST_IP, dst=FPGA_IP, tos=tos, id=rng.randrange(65536))
                          / ICMP(id=rng.randrange(65536), seq=rng.randrange(65536))
                          / Raw(rng.randbytes(rng.choice([0, 1, 7, 8, rng.randrange(max_payload + 1)]))))
        else:
            frames.append(eth() / IP(src=HOST_IP, dst=FPGA_IP, tos=tos)
                          / UDP(sport=rng.randrange(1024, 65536), dport=7,
                                chksum=None if rng.random() < 0.7 else 0)
                          / Raw(rng.randbytes(rng.choice([0, 1, 2, rng.randrange(max_payload + 1)]))))
    return [bytes(f) for f in frames]


def _ipv4_garbage(rng):
    """An IPv4 packet to the endpoint with a correct header checksum and random, often wrong,
    other fields: version, IHL (options), lengths, fragments, protocol, transport headers."""
    proto = rng.choice([1, 1, 17, 17, 17, 6, rng.randrange(256)])
    if proto == 1:
        body = bytearray(bytes(ICMP(type=rng.choice([8, 8, 0, 13, rng.randrange(256)]),
                                    code=rng.choice([0, 0, 1]), id=rng.randrange(65536))
                               / Raw(rng.randbytes(rng.randrange(40)))))
        if rng.random() < 0.3:
            body[2:4] = rng.randbytes(2)
    elif proto == 17:
        # the checksum is right for HOST_IP -> FPGA_IP, none, or random
        body = bytearray(bytes(IP(src=HOST_IP, dst=FPGA_IP) / UDP(
            sport=rng.randrange(65536), dport=rng.choice([7, 7, 17185, 9, 0]),
            chksum=rng.choice([0, None, rng.randrange(65536)]))
            / Raw(rng.randbytes(rng.randrange(40))))[20:])
        if rng.random() < 0.3:
            body[4:6] = rng.randrange(65536).to_bytes(2, "big")   # UDP length
        body = body[:rng.choice([len(body)] * 3 + [rng.randrange(len(body) + 1)])]
    else:
        body = bytearray(rng.randbytes(rng.randrange(40)))
    ihl = rng.choice([5] * 8 + [rng.randrange(16)])
    options = rng.randbytes(4 * (ihl - 5)) if ihl > 5 else b""
    hdr_len = 20 + len(options)
    total = rng.choice([hdr_len + len(body)] * 5 + [hdr_len + len(body) + rng.randrange(1, 30),
                        max(0, hdr_len + len(body) - rng.randrange(1, 30)),
                        rng.randrange(65536)])
    flags = rng.choice([0x4000] * 5 + [0x2000, 0x0000, 0x8000, rng.randrange(65536)])
    hdr = bytearray(struct.pack(
        ">BBHHHBBH4s4s", (rng.choice([4] * 8 + [rng.randrange(16)]) << 4) | ihl,
        rng.randrange(256), total, rng.randrange(65536), flags, rng.randrange(1, 256), proto, 0,
        bytes(map(int, HOST_IP.split("."))),
        bytes(map(int, rng.choice([FPGA_IP] * 6 + ["10.0.0.3"]).split(".")))))
    # with options: the checksum over the whole header (right) or over the first 20 bytes only
    covered = bytes(hdr) + (options if rng.random() < 0.5 else b"")
    hdr[10:12] = checksum(covered).to_bytes(2, "big")
    dst = rng.choice([FPGA_MAC, FPGA_MAC, "ff:ff:ff:ff:ff:ff"])
    return bytes(Ether(src=HOST_MAC, dst=dst, type=0x0800)) + bytes(hdr) + options + bytes(body)


def garbage_frames(rng, n, valid):
    """``n`` damaged or meaningless frames as ``(bytes, fcs_ok)``: random bytes (0..200 of
    them), random bytes behind a header addressed to the endpoint, IPv4 packets with a correct
    header checksum but random other fields, truncations and bit flips of the ``valid`` frames,
    and frames the MAC marks as bad (``fcs_ok`` False)."""
    out = []
    for _ in range(n):
        what = rng.randrange(6)
        ok = True
        if what == 0:
            f = rng.randbytes(rng.randrange(201))
        elif what == 1:
            dst = bytes.fromhex(rng.choice([FPGA_MAC, "ff:ff:ff:ff:ff:ff"]).replace(":", ""))
            etype = rng.choice([0x0800, 0x0806, 0x8100, 0x86DD, 0x0000, rng.randrange(65536)])
            f = (dst + bytes.fromhex(HOST_MAC.replace(":", "")) + etype.to_bytes(2, "big")
                 + rng.randbytes(rng.randrange(187)))[:rng.randrange(201)]
        elif what == 2:
            f = _ipv4_garbage(rng)
        elif what == 3:
            v = rng.choice(valid)
            f = v[:rng.randrange(len(v) + 1)]
        elif what == 4:
            f = bytearray(rng.choice(valid))
            for _ in range(rng.randrange(1, 4)):
                f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
        else:
            f = rng.choice(valid) if rng.random() < 0.7 else rng.randbytes(rng.randrange(201))
            ok = False
        out.append((bytes(f), ok))
    return out
