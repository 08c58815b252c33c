"""Reference model of the Ethernet/ARP/IPv4/ICMP/UDP endpoint (:class:`NetStack` with the
UDP echo service of :class:`StackTop`), written with scapy and independent of the gateware.

``handle(frame)`` returns the frames the endpoint must send in answer and the name of the
statistics counter the frame must increment (besides ``rx_frames``)."""

import struct

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

__all__ = ["NetStackModel", "normalise"]


def _checksum_ok_ip(raw_ip):
    from scapy.utils import checksum
    return checksum(raw_ip[:20]) == 0


class NetStackModel:
    def __init__(self, mac, ip, *, echo_port=7, udp_ports=(17185,), mtu=1500):
        self.mac = mac
        self.ip = ip
        self.echo_port = echo_port
        self.ports = (echo_port, *udp_ports)
        self.mtu = mtu
        self.arp_cache = {}

    def handle(self, frame, *, fcs_ok=True):
        frame = bytes(frame)
        if not fcs_ok:
            return [], "rx_bad_frame"
        if len(frame) < 14:
            return [], "eth_runt"
        eth = Ether(frame)
        if eth.dst.lower() not in (self.mac, "ff:ff:ff:ff:ff:ff"):
            return [], "eth_drop_addr"
        if eth.type == 0x0806:
            return self._arp(frame[14:])
        if eth.type != 0x0800:
            return [], "eth_drop_ethertype"
        return self._ipv4(eth.src, frame[14:])

    def _arp(self, body):
        if len(body) < 28:
            return [], "arp_drop_bad"
        htype, ptype, hlen, plen, op = struct.unpack(">HHBBH", body[:8])
        if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4) or op not in (1, 2):
            return [], "arp_drop_bad"
        a = ARP(body[:28])
        if a.pdst == self.ip:
            self.arp_cache[a.psrc] = a.hwsrc
        if a.op == 1 and a.pdst == self.ip:
            reply = Ether(dst=a.hwsrc, src=self.mac) / ARP(
                op=2, hwsrc=self.mac, psrc=self.ip, hwdst=a.hwsrc, pdst=a.psrc)
            return [bytes(reply).ljust(60, b"\0")], "arp_rx_request"
        return [], "arp_rx_request" if a.op == 1 else "arp_rx_reply"

    def _ipv4(self, src_mac, body):
        if len(body) < 20:
            return [], "ip_runt"
        ver, ihl = body[0] >> 4, body[0] & 15
        total = int.from_bytes(body[2:4], "big")
        if ver != 4 or ihl < 5 or not _checksum_ok_ip(body) or total < 20 or total > self.mtu:
            return [], "ip_drop_header"
        if ihl != 5:
            return [], "ip_drop_options"
        ip = IP(body[:20])
        if ip.flags.MF or ip.frag:
            return [], "ip_drop_fragment"
        if ip.dst != self.ip:
            return [], "ip_drop_addr"
        if ip.proto not in (1, 17):
            return [], "ip_drop_protocol"
        if total > len(body):
            return [], "ip_truncated"
        payload = body[20:total]
        if ip.proto == 1:
            return self._icmp(src_mac, ip, payload)
        return self._udp(ip, payload)

    def _icmp(self, src_mac, ip, msg):
        from scapy.utils import checksum
        if checksum(msg) != 0:
            return [], "icmp_drop_checksum"
        if len(msg) < 8:
            return [], "icmp_drop_type"
        if msg[0] != 8 or msg[1] != 0:
            return [], "icmp_drop_type"
        req = ICMP(msg)
        reply = Ether(dst=src_mac, src=self.mac) / IP(
            src=self.ip, dst=ip.src, ttl=64, flags="DF", tos=ip.tos & 0xFC) / ICMP(
            type=0, id=req.id, seq=req.seq) / Raw(msg[8:])
        return [bytes(reply).ljust(60, b"\0")], "icmp_echo_reply"

    def _udp(self, ip, dgram):
        from scapy.utils import checksum
        if len(dgram) < 8:
            return [], "udp_runt"
        ck = int.from_bytes(dgram[6:8], "big")
        if ck:
            pseudo = (bytes(map(int, ip.src.split("."))) + bytes(map(int, ip.dst.split(".")))
                      + bytes([0, 17]) + len(dgram).to_bytes(2, "big"))
            if checksum(pseudo + dgram) != 0:
                return [], "udp_drop_checksum"
        u = UDP(dgram[:8])
        if u.len != len(dgram):
            return [], "udp_drop_length"
        if u.dport not in self.ports:
            return [], "udp_drop_port"
        if u.dport != self.echo_port:
            return [], None
        mac = self.arp_cache.get(ip.src)
        if mac is None:
            return [], "arp_tx_request"      # would need ARP first: tests ARP before UDP
        reply = Ether(dst=mac, src=self.mac) / IP(
            src=self.ip, dst=ip.src, ttl=64, flags="DF", tos=ip.tos & 0xFC, proto=17) / UDP(
            sport=u.dport, dport=u.sport, chksum=0) / Raw(dgram[8:])
        return [bytes(reply).ljust(60, b"\0")], None


def normalise(frame):
    """Bytes of ``frame`` with the IPv4 identification and header checksum zeroed (they depend
    on how many packets were sent before); verifies the header checksum first."""
    frame = bytearray(frame)
    if len(frame) >= 34 and frame[12:14] == b"\x08\x00":
        if not _checksum_ok_ip(bytes(frame[14:34])):
            raise AssertionError("IPv4 header checksum of a transmitted frame is wrong")
        frame[18:20] = b"\0\0"
        frame[24:26] = b"\0\0"
    return bytes(frame)
