"""The frames the RNIC model sends, built from the header table (:mod:`rocegen.wire.headers`):
Ethernet (802.1Q-tagged on a VLAN), ARP, IPv4 (DF, the model's TTL, identification counting from
1), UDP, and RoCEv2 (BTH, the extension headers and payload given, ICRC), padded to the 60-byte
minimum."""

import functools

from rocegen.sim.models.icrc import icrc
from rocegen.sim.models.net.checksum import checksum, udp_checksum
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import ETH_MIN_FRAME, PSN_MASK

__all__ = ["FrameBuilder", "mac_str", "ip_str", "ip_bytes", "pad"]


def mac_str(raw):
    return ":".join(f"{b:02x}" for b in bytes(raw))


def ip_str(raw):
    return ".".join(str(b) for b in bytes(raw))


def ip_bytes(ip):
    return bytes(int(x) for x in ip.split("."))


def _mac_int(mac):
    return int(mac.replace(":", ""), 16)


@functools.lru_cache(maxsize=256)
def _ip_int(ip):
    return int.from_bytes(ip_bytes(ip), "big")


def pad(frame):
    return bytes(frame).ljust(ETH_MIN_FRAME, b"\0")


class FrameBuilder:
    """Builds the frames of the NIC at ``mac``/``ip`` (``vlan``/``pcp``: the 802.1Q tag of every
    frame, none when ``vlan`` is None; ``ttl`` and ``migreq``: the IPv4 TTL and the BTH MigReq
    bit). ``arp_cache`` (IP -> MAC) is where a RoCEv2 frame's destination MAC is looked up when
    its QP has no ``peer_mac``."""

    def __init__(self, mac, ip, *, vlan, pcp, ttl, migreq, arp_cache):
        self.mac = mac.lower()
        self.ip = ip
        self.mac_bytes = bytes.fromhex(self.mac.replace(":", ""))
        self.ip_bytes = ip_bytes(ip)
        self.vlan, self.pcp, self.ttl, self.migreq = vlan, pcp, ttl, migreq
        self.arp_cache = arp_cache
        #: IPv4 identification of the latest frame built
        self.ip_id = 0
        self._l2_cache = {}

    def next_id(self):
        self.ip_id = self.ip_id % 0xFFFF + 1
        return self.ip_id

    def l2(self, dst, ethertype):
        """The Ethernet header (with the 802.1Q tag on a VLAN) to MAC ``dst``."""
        key = (dst, ethertype)
        hdr = self._l2_cache.get(key)
        if hdr is None:
            if self.vlan is None:
                hdr = H.ETH.pack(dst=_mac_int(dst), src=_mac_int(self.mac), ethertype=ethertype)
            else:
                hdr = H.ETH_VLAN.pack(dst=_mac_int(dst), src=_mac_int(self.mac),
                                      tpid=H.ETHERTYPE_VLAN, pcp=self.pcp, dei=0, vid=self.vlan,
                                      ethertype=ethertype)
            hdr = self._l2_cache[key] = hdr
        return hdr

    def arp(self, oper, dst, tha, tpa):
        """An ARP message (``oper`` 1 request, 2 reply) to MAC ``dst`` about ``tha``/``tpa``."""
        return pad(self.l2(dst, H.ETHERTYPE_ARP) + H.ARP.pack(
            htype=1, ptype=H.ETHERTYPE_IPV4, hlen=6, plen=4, oper=oper, sha=_mac_int(self.mac),
            spa=_ip_int(self.ip), tha=_mac_int(tha), tpa=_ip_int(tpa)))

    def _ipv4(self, dst_ip, length, tos=0):
        ip = dict(version=4, ihl=5, dscp=tos >> 2, ecn=tos & 3, total_length=length,
                  identification=self.next_id(), df=1, ttl=self.ttl, protocol=H.IP_PROTO_UDP,
                  src=_ip_int(self.ip), dst=_ip_int(dst_ip))
        return H.IPV4.pack(**ip, checksum=checksum(H.IPV4.pack(**ip)))

    def udp(self, dst_mac, dst_ip, sport, dport, payload):
        """A UDP datagram with a valid UDP checksum."""
        n = H.UDP.length + len(payload)
        udp = H.UDP.pack(src_port=sport, dst_port=dport, length=n) + bytes(payload)
        ck = udp_checksum(_ip_int(self.ip), _ip_int(dst_ip), udp)
        udp = H.UDP.pack(src_port=sport, dst_port=dport, length=n, checksum=ck) + bytes(payload)
        return pad(self.l2(dst_mac, H.ETHERTYPE_IPV4) + self._ipv4(dst_ip, H.IPV4.length + n)
                   + udp)

    def roce(self, qp, src_mac, opcode, psn, body, *, se=0, ackreq=0, padcnt=0):
        """A RoCEv2 frame of ``qp``: BTH (``opcode``, ``psn``...), then ``body`` (extension
        headers, payload and pad), then the ICRC; UDP checksum 0, IPv4 TOS the QP's. The
        destination MAC is ``peer_mac``, else the ARP cache, else ``src_mac`` (the frame
        answered)."""
        dst = qp.peer_mac or self.arp_cache.get(qp.peer_ip) or src_mac
        if dst is None:
            raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
        n = H.IPV4.length + H.UDP.length + H.BTH.length + len(body) + 4
        dgram = (self._ipv4(qp.peer_ip, n, qp.tos)
                 + H.UDP.pack(src_port=qp.udp_sport, dst_port=H.UDP_PORT_ROCEV2,
                              length=n - H.IPV4.length)
                 + H.BTH.pack(opcode=opcode, se=se, m=self.migreq, padcnt=padcnt, pkey=qp.pkey,
                              dest_qp=qp.peer_qpn, ack_req=ackreq, psn=psn & PSN_MASK)
                 + body)
        return pad(self.l2(dst, H.ETHERTYPE_IPV4) + dgram + icrc(dgram))

    def ack(self, qp, syndrome, psn, src_mac, msn):
        """An ACKNOWLEDGE frame (:meth:`roce`) with AETH ``syndrome`` and ``msn``."""
        return self.roce(qp, src_mac, opc.OP_RC_ACKNOWLEDGE, psn,
                         H.AETH.pack(syndrome=syndrome, msn=msn))

    def oversize(self, frame, ip_len):
        """``frame`` (an ACK or a READ response) with its UDP datagram grown (zeros before the
        ICRC) to an IP length of ``ip_len``, lengths, IP checksum and ICRC right."""
        l2 = H.ETH.length if self.vlan is None else H.ETH_VLAN.length
        ip_len0 = H.IPV4.unpack(frame[l2:])["total_length"]
        dgram = frame[l2:l2 + ip_len0 - 4]
        grow = ip_len - len(dgram) - 4
        body = dgram[H.IPV4.length + H.UDP.length:] + bytes(max(grow, 0))
        ip = H.IPV4.unpack(dgram)
        ip_hdr = H.IPV4.pack(**{**ip, "total_length": ip_len, "checksum": 0})
        ip_hdr = H.IPV4.pack(**{**ip, "total_length": ip_len, "checksum": checksum(ip_hdr)})
        udp = H.UDP.unpack(dgram[H.IPV4.length:])
        udp_hdr = H.UDP.pack(**{**udp, "length": ip_len - H.IPV4.length})
        dgram = ip_hdr + udp_hdr + body
        return frame[:l2] + dgram + icrc(dgram)
