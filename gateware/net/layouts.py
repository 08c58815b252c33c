"""Metadata layouts of the network stack's internal streams (sideband, not wire headers: the
wire headers are in :mod:`rocegen.wire.headers`)."""

from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.wire.headers import ETH, IPV4, UDP

__all__ = ["IP_TX", "UDP_TX", "ETH_META", "IP_OUT_META", "IP_RX_META", "UDP_RX_META",
           "ARP_LOOKUP", "ARP_PEEK", "ARP_REPLY"]

#: A packet handed to the IPv4 transmitter: its payload is the IP payload.
IP_TX = data.StructLayout({
    "dst": 32,            # destination IPv4 address
    "protocol": 8,
    "dscp": 6,
    "ecn": 2,
    "length": 16,         # IP payload length in bytes
    "mac_known": 1,       # 1: send to `mac` without asking ARP (replies to a known sender)
    "mac": 48,
    "icrc": 1,            # 1: a RoCEv2 packet; the stack appends its ICRC (counted in length)
})

#: A datagram handed to a UDP transmit port: its payload is the UDP payload.
UDP_TX = data.StructLayout({
    "dst_ip": 32,
    "src_port": 16,
    "dst_port": 16,
    "length": 16,         # UDP payload length in bytes (with icrc: including the 4 ICRC bytes)
    "dscp": 6,
    "ecn": 2,
    "icrc": 1,            # 1: a RoCEv2 packet; the payload comes without its ICRC, which the
                          # stack appends after the IPv4 header is final
    "checksum": 16,       # UDP checksum as sent (0: none, as RoCEv2 and IPv4 allow); a sender
                          # that knows its whole datagram computes it
})

ETH_META = data.StructLayout({"eth": ETH.layout})
#: What the IPv4 transmitter hands on: the Ethernet header to build, and whether an ICRC is due.
IP_OUT_META = data.StructLayout({"eth": ETH.layout, "icrc": 1})
IP_RX_META = data.StructLayout({"eth": ETH.layout, "ipv4": IPV4.layout})
UDP_RX_META = data.StructLayout({"eth": ETH.layout, "ipv4": IPV4.layout, "udp": UDP.layout})


#: The next-hop lookup the IPv4 transmitter makes of ARP (seen from the transmitter):
#: ``ip`` -> ``hit`` / ``mac`` combinationally (the packet entering the decision stage);
#: ``wait_ip`` -> ``wait_hit`` / ``wait_mac`` one cycle later (the packet waiting for its next
#: hop); ``resolve`` held high for a miss of ``wait_ip`` makes ARP ask, ``failed`` pulses when it
#: gives up.
ARP_LOOKUP = wiring.Signature({
    "ip": Out(32),
    "hit": In(1),
    "mac": In(48),
    "wait_ip": Out(32),
    "wait_hit": In(1),
    "wait_mac": In(48),
    "resolve": Out(1),
    "failed": In(1),
})

#: A look at the ARP cache (seen from the asker): ``ip`` -> ``hit`` / ``mac`` combinationally,
#: from the cache's current contents; no resolution is started on a miss.
ARP_PEEK = wiring.Signature({
    "ip": Out(32),
    "hit": In(1),
    "mac": In(48),
})

#: An ARP reply to send: to the hardware and protocol address of the host that asked.
ARP_REPLY = data.StructLayout({"mac": 48, "ip": 32})
