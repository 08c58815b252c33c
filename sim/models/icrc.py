"""Reference model of the RoCEv2 invariant CRC (ICRC), written from the wire spec
(InfiniBand Annex A17, RoCEv2) independently of the gateware.

The ICRC is ``zlib.crc32`` (reflected polynomial 0xEDB88320, init and final XOR 0xFFFFFFFF) of::

    8 x 0xFF | IP header | UDP header | BTH | extension headers | payload | pad

where, in the copy that is summed (never in the packet), these bits are set to one:

* IPv4: the TOS byte (DSCP and ECN), the TTL and the header checksum;
* IPv6: the traffic class, the flow label and the hop limit;
* the UDP checksum;
* BTH byte 4 (FECN, BECN, 6 reserved bits).

The 32-bit result goes on the wire least significant byte first. It is the last 4 bytes of the
IP datagram, whose end is given by the IP length fields, not by the frame length (the MAC pads
short frames after it).

Byte offsets of the masked fields here are the spec's, counted from the IP header (IPv4 options
move the UDP header: the IHL says where it is).
"""

import zlib

__all__ = ["PREFIX", "ICRC_LEN", "mask", "icrc", "ip_offset", "datagram_length", "datagram",
           "check", "append"]

#: The 8 bytes of 0xFF that stand for the InfiniBand local route header.
PREFIX = b"\xff" * 8
ICRC_LEN = 4
_VLAN_TPIDS = (0x8100, 0x88A8)
_UDP_LEN = 8
_BTH_LEN = 12


def _ip_header_length(ip_packet):
    if not ip_packet:
        raise ValueError("empty IP packet")
    version = ip_packet[0] >> 4
    if version == 4:
        return 4 * (ip_packet[0] & 0x0F)
    if version == 6:
        return 40
    raise ValueError(f"IP version {version} is neither 4 nor 6")


def mask(ip_packet):
    """The copy of ``ip_packet`` (bytes from the IP header on) that the ICRC covers, with the
    variant fields set to ones. Fields beyond the end of a short packet are left out."""
    out = bytearray(ip_packet)
    hl = _ip_header_length(out)
    if out[0] >> 4 == 4:
        ones = {1: 0xFF, 8: 0xFF, 10: 0xFF, 11: 0xFF}              # TOS, TTL, checksum
    else:
        ones = {0: 0x0F, 1: 0xFF, 2: 0xFF, 3: 0xFF, 7: 0xFF}      # class, flow label, hop limit
    ones[hl + 6] = ones[hl + 7] = 0xFF                              # UDP checksum
    ones[hl + _UDP_LEN + 4] = 0xFF                                  # BTH byte 4
    for pos, bits in ones.items():
        if pos < len(out):
            out[pos] |= bits
    return bytes(out)


def icrc(ip_packet):
    """The 4 ICRC bytes, in wire order, of the IP datagram ``ip_packet`` without its ICRC."""
    return zlib.crc32(PREFIX + mask(ip_packet)).to_bytes(ICRC_LEN, "little")


def ip_offset(frame):
    """Offset of the IP header in an Ethernet frame (after any 802.1Q / 802.1ad tags)."""
    off = 12
    while True:
        if len(frame) < off + 2:
            raise ValueError("frame ends inside the Ethernet header")
        ethertype = int.from_bytes(frame[off:off + 2], "big")
        off += 2
        if ethertype not in _VLAN_TPIDS:
            break
        off += 2
    if ethertype not in (0x0800, 0x86DD):
        raise ValueError(f"EtherType {ethertype:#06x} is not IPv4 or IPv6")
    return off


def datagram_length(ip_packet):
    """Length of the IP datagram (header included) from its length field."""
    if len(ip_packet) < 6:
        raise ValueError("IP header truncated")
    if ip_packet[0] >> 4 == 4:
        return int.from_bytes(ip_packet[2:4], "big")
    return 40 + int.from_bytes(ip_packet[4:6], "big")


def datagram(frame):
    """The IP datagram of an Ethernet frame, cut at the IP length (MAC padding removed)."""
    off = ip_offset(frame)
    length = datagram_length(frame[off:])
    if off + length > len(frame):
        raise ValueError(f"IP length {length} runs past the end of the frame")
    return bytes(frame[off:off + length])


def check(frame):
    """``True`` if the Ethernet frame (no FCS; MAC padding allowed) carries a correct ICRC."""
    try:
        dg = datagram(frame)
        hl = _ip_header_length(dg)
    except ValueError:
        return False
    if len(dg) < hl + _UDP_LEN + _BTH_LEN + ICRC_LEN:
        return False
    return icrc(dg[:-ICRC_LEN]) == dg[-ICRC_LEN:]


def append(frame_without_icrc):
    """The Ethernet frame with its ICRC appended. Its IP (and UDP) length fields must already
    count the ICRC, and it must not carry MAC padding (that goes after the ICRC)."""
    frame = bytes(frame_without_icrc)
    off = ip_offset(frame)
    length = datagram_length(frame[off:])
    if length != len(frame) - off + ICRC_LEN:
        raise ValueError(f"IP length {length} does not match {len(frame) - off} bytes of datagram "
                         f"plus the {ICRC_LEN}-byte ICRC")
    return frame + icrc(frame[off:])
