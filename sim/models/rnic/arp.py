"""ARP in the RNIC model: it answers requests for its IP, learns the senders (and the replies to
its own requests) in its cache, and makes the requests it broadcasts."""

import struct

from rocegen.sim.models.rnic.frames import ip_str, mac_str

__all__ = ["Arp"]

BROADCAST_MAC = "ff:ff:ff:ff:ff:ff"


class Arp:
    """The ARP part of ``nic`` (:class:`~rocegen.sim.models.rnic.Rnic`): :attr:`cache` maps IP
    to MAC."""

    def __init__(self, nic):
        self.nic = nic
        #: IP -> MAC learned from ARP
        self.cache = {}

    def request(self, ip):
        """The ARP request the NIC broadcasts to resolve ``ip`` (the reply fills the cache)."""
        return self.nic.frames.arp(1, BROADCAST_MAC, "00:00:00:00:00:00", ip)

    def receive(self, body):
        """Take an ARP message (after the Ethernet header); return the reply to send, if any."""
        nic = self.nic
        if len(body) < 28:
            return nic._drop("arp_drop_bad", f"ARP message of {len(body)} bytes")
        htype, ptype, hlen, plen, oper = struct.unpack(">HHBBH", body[:8])
        if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4) or oper not in (1, 2):
            return nic._drop("arp_drop_bad", f"ARP htype {htype} ptype {ptype:#x} hlen {hlen} "
                             f"plen {plen} oper {oper}")
        sha, spa, tpa = mac_str(body[8:14]), ip_str(body[14:18]), ip_str(body[24:28])
        for_us = tpa == nic.ip
        if spa in self.cache or for_us:
            self.cache[spa] = sha
        if oper == 2:
            nic.counters["arp_rx_reply"] += 1
            return []
        nic.counters["arp_rx_request"] += 1
        if not for_us:
            return []
        nic.counters["arp_tx_reply"] += 1
        return [nic.frames.arp(2, sha, sha, spa)]
