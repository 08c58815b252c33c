"""Reference model of the Ethernet/ARP/IPv4/ICMP/UDP endpoint (:class:`NetStack` with the
UDP echo service of :class:`StackTop`), written with scapy and independent of the gateware.

``handle(frame)`` returns the frames the endpoint must send in answer and the name of the
statistics counter the frame must increment (besides ``rx_frames``); ``handle_all(frame)``
returns the frames and *every* counter the frame increments (a truncated ping, for example,
counts ``ip_truncated`` and then ``icmp_drop_error``).

Headers are read from the raw bytes (not by scapy dissection), so any byte string, however
malformed, is a valid input. Responses are built with scapy.

Options that follow the gateware's parameters: ``vlan``/``pcp`` (802.1Q: only frames tagged
with that VLAN ID are taken, responses are tagged with it and priority ``pcp``),
``arp_entries`` (ARP cache size, replaced round robin as in the gateware; ``None``: unbounded)
and ``cut_ports`` (the UDP ports that take their datagrams cut-through: one whose checksum is
wrong reaches the port marked damaged and counts ``udp_drop_checksum``).

A frame the MAC marks bad (``fcs_ok=False``) is counted in ``rx_bad_frame`` and then goes
through the layers as the gateware passes it on (cut-through, marked damaged): each layer's
header checks still drop and count it, and the layer that would act on it drops it and counts
it as damaged (``arp_drop_bad``, ``icmp_drop_error``, ``udp_drop_error``). A damaged datagram
for a cut-through port reaches that port marked damaged (no stack counter: its consumer drops
it). A damaged frame changes no state (the ARP cache) and is never
answered.
"""

import struct

from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import checksum

__all__ = ["NetStackModel", "normalise", "mac_str"]

BROADCAST = "ff:ff:ff:ff:ff:ff"
MIN_FRAME = 60


def _checksum_ok_ip(raw_ip):
    return checksum(raw_ip[:20]) == 0


def mac_str(raw):
    """Six bytes -> ``"aa:bb:cc:dd:ee:ff"``."""
    return ":".join(f"{b:02x}" for b in bytes(raw))


def _ip_str(raw):
    return ".".join(str(b) for b in bytes(raw))


def _pad(frame):
    return bytes(frame).ljust(MIN_FRAME, b"\0")


class NetStackModel:
    def __init__(self, mac, ip, *, echo_port=7, udp_ports=(17185,), mtu=1500, vlan=None, pcp=0,
                 arp_entries=None, cut_ports=()):
        self.mac = mac.lower()
        self.ip = ip
        self.echo_port = echo_port
        self.ports = (echo_port, *udp_ports)
        self.cut_ports = tuple(cut_ports)
        #: datagrams handed to a port other than the echo's: (port, UDP payload, damaged)
        self.delivered = []
        self.mtu = mtu
        self.vlan = vlan
        self.pcp = pcp
        self.arp_entries = arp_entries
        #: IP -> MAC of the cached hosts (the cache's current contents)
        self.arp_cache = {}
        self._slots = [None] * arp_entries if arp_entries else None
        self._victim = 0

    # ---- ARP cache ----

    def arp_lookup(self, ip):
        """The MAC the endpoint would send a datagram for ``ip`` to, or None (it must ask)."""
        return self.arp_cache.get(ip)

    def _arp_learn(self, spa, sha, for_us):
        """RFC 826 merge as the gateware does it: refresh an existing entry whatever the target,
        add a new one (evicting round robin) only when we are the target."""
        if spa in self.arp_cache:
            self.arp_cache[spa] = sha
        elif for_us:
            if self._slots is not None:
                old = self._slots[self._victim]
                if old is not None:
                    del self.arp_cache[old]
                self._slots[self._victim] = spa
                self._victim = (self._victim + 1) % len(self._slots)
            self.arp_cache[spa] = sha

    # ---- frames the endpoint sends ----

    def _l2(self, dst):
        eth = Ether(dst=dst, src=self.mac)
        if self.vlan is not None:
            eth = eth / Dot1Q(vlan=self.vlan, prio=self.pcp, dei=0)
        return eth

    def arp_request(self, ip):
        """The ARP request the endpoint broadcasts to resolve ``ip``."""
        return _pad(self._l2(BROADCAST) / ARP(op=1, hwsrc=self.mac, psrc=self.ip,
                                              hwdst="00:00:00:00:00:00", pdst=ip))

    def udp_frame(self, dst_mac, dst_ip, sport, dport, payload, *, dscp=0, ecn=0):
        """A datagram as the endpoint sends it (UDP checksum 0, DF, TTL 64; the IPv4
        identification is 0 here: compare through :func:`normalise`)."""
        return _pad(self._l2(dst_mac) / IP(
            src=self.ip, dst=dst_ip, ttl=64, flags="DF", tos=(dscp << 2) | ecn, proto=17, id=0)
            / UDP(sport=sport, dport=dport, chksum=0) / Raw(bytes(payload)))

    # ---- frames the endpoint receives ----

    def handle(self, frame, *, fcs_ok=True):
        out, counters = self.handle_all(frame, fcs_ok=fcs_ok)
        return out, (counters[0] if counters else None)

    def handle_all(self, frame, *, fcs_ok=True):
        frame = bytes(frame)
        if not fcs_ok:
            out, counters = self._frame(frame, damaged=True)
            assert not out, "a damaged frame was answered"
            return [], ["rx_bad_frame", *counters]
        return self._frame(frame, damaged=False)

    def _frame(self, frame, *, damaged):
        hlen = 14 if self.vlan is None else 18
        if len(frame) < hlen:
            return [], ["eth_runt"]
        dst = mac_str(frame[0:6])
        if dst not in (self.mac, BROADCAST):
            return [], ["eth_drop_addr"]
        if self.vlan is not None:
            tpid, tci = struct.unpack(">HH", frame[12:16])
            if tpid != 0x8100 or (tci & 0xFFF) != self.vlan:
                return [], ["eth_drop_ethertype"]
        etype = int.from_bytes(frame[hlen - 2:hlen], "big")
        body = frame[hlen:]
        if etype == 0x0806:
            return self._arp(body, damaged)
        if etype != 0x0800:
            return [], ["eth_drop_ethertype"]
        return self._ipv4(mac_str(frame[6:12]), body, damaged)

    def _arp(self, body, damaged):
        if len(body) < 28 or damaged:
            return [], ["arp_drop_bad"]
        htype, ptype, hlen, plen, op = struct.unpack(">HHBBH", body[:8])
        if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4) or op not in (1, 2):
            return [], ["arp_drop_bad"]
        sha, spa, tpa = mac_str(body[8:14]), _ip_str(body[14:18]), _ip_str(body[24:28])
        if body[8:14] == bytes(6) or body[8] & 1:
            return [], ["arp_drop_bad"]          # sender hardware address not unicast
        for_us = tpa == self.ip
        if spa not in ("0.0.0.0", "255.255.255.255", self.ip):
            self._arp_learn(spa, sha, for_us)
        if op == 1 and for_us:
            reply = self._l2(sha) / ARP(op=2, hwsrc=self.mac, psrc=self.ip, hwdst=sha, pdst=spa)
            return [_pad(reply)], ["arp_rx_request", "arp_tx_reply"]
        return [], ["arp_rx_request" if op == 1 else "arp_rx_reply"]

    def _ipv4(self, src_mac, body, damaged):
        if len(body) < 20:
            return [], ["ip_runt"]
        ver, ihl = body[0] >> 4, body[0] & 15
        total = int.from_bytes(body[2:4], "big")
        def drop(counter):
            return [], [counter]
        if ver != 4 or ihl < 5 or total < 20 or total > self.mtu:
            return drop("ip_drop_header")
        # the header checksum covers the options: not checked on a packet with options, which
        # is dropped anyway
        if ihl == 5 and not _checksum_ok_ip(body):
            return drop("ip_drop_header")
        if ihl != 5:
            return drop("ip_drop_options")
        ip = IP(body[:20])
        if ip.flags.MF or ip.frag:
            return drop("ip_drop_fragment")
        if ip.dst != self.ip:
            return drop("ip_drop_addr")
        if ip.proto not in (1, 17):
            return drop("ip_drop_protocol")
        if total > len(body):
            # leaves towards ICMP/UDP marked as damaged, which drop it
            if ip.proto == 1:
                return [], ["ip_truncated", "icmp_drop_error"]
            return [], ["ip_truncated", *self._udp(ip, body[20:], True)[1]]
        payload = body[20:total]
        if ip.proto == 1:
            return self._icmp(src_mac, ip, payload, damaged)
        return self._udp(ip, payload, damaged)

    def _icmp(self, src_mac, ip, msg, damaged):
        if damaged:
            return [], ["icmp_drop_error"]
        if checksum(msg) != 0:
            return [], ["icmp_drop_checksum"]
        if len(msg) < 8:
            return [], ["icmp_drop_type"]
        if msg[0] != 8 or msg[1] != 0:
            return [], ["icmp_drop_type"]
        req = ICMP(msg)
        reply = self._l2(src_mac) / IP(
            src=self.ip, dst=ip.src, ttl=64, flags="DF", tos=ip.tos & 0xFC) / ICMP(
            type=0, id=req.id, seq=req.seq) / Raw(msg[8:])
        return [_pad(reply)], ["icmp_echo_reply"]

    def _udp(self, ip, dgram, damaged):
        if len(dgram) < 8:
            return [], ["udp_drop_error" if damaged else "udp_runt"]
        ck = int.from_bytes(dgram[6:8], "big")
        dport = int.from_bytes(dgram[2:4], "big")
        through = dport in self.cut_ports
        if damaged and not through:
            return [], ["udp_drop_error"]
        wrong = False
        if ck:
            pseudo = (bytes(map(int, ip.src.split("."))) + bytes(map(int, ip.dst.split(".")))
                      + bytes([0, 17]) + len(dgram).to_bytes(2, "big"))
            wrong = checksum(pseudo + dgram) != 0
            if wrong and not through:
                return [], ["udp_drop_checksum"]
        sport, dport, ulen = struct.unpack(">HHH", dgram[:6])
        if ulen != ip.len - 20:          # (the IPv4 header's length: a truncated one is longer)
            return [], ["udp_drop_length"]
        if through and wrong:
            # delivered marked, for the port's consumer to drop; counted unless damaged
            self.delivered.append((dport, dgram[8:], True))
            return [], [] if damaged else ["udp_drop_checksum"]
        if dport not in self.ports:
            return [], ["udp_drop_port"]
        if damaged or dport != self.echo_port:
            self.delivered.append((dport, dgram[8:], damaged))
            return [], []
        mac = self.arp_cache.get(ip.src)
        if mac is None:
            return [], ["arp_tx_request"]    # would need ARP first: tests ARP before UDP
        return [self.udp_frame(mac, ip.src, dport, sport, dgram[8:], dscp=ip.tos >> 2)], []


def normalise(frame):
    """Bytes of ``frame`` with the IPv4 identification and header checksum zeroed (they depend
    on how many packets were sent before); verifies the header checksum first. Frames with one
    802.1Q tag are understood."""
    frame = bytearray(frame)
    off = 18 if frame[12:14] == b"\x81\x00" else 14
    if len(frame) >= off + 20 and frame[off - 2:off] == b"\x08\x00":
        if not _checksum_ok_ip(bytes(frame[off:off + 20])):
            raise AssertionError("IPv4 header checksum of a transmitted frame is wrong")
        frame[off + 4:off + 6] = b"\0\0"
        frame[off + 10:off + 12] = b"\0\0"
    return bytes(frame)
