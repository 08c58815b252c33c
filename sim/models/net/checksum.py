"""Reference model of the Internet checksum (RFC 1071).

The *sum* is the 16-bit one's complement sum of the data as big-endian words (byte 0 is the
high byte of word 0, an odd final byte is padded with a zero low byte), with end-around carry:
0 only when every word is zero, otherwise 1 .. 0xFFFF. The *checksum* put in a header is its
complement. This is what :mod:`rocegen.gateware.lib.checksum` computes in gateware.
"""

import struct

__all__ = ["ones_complement_sum", "be_words", "data_sum", "internet_checksum", "checksum",
           "pseudo_header_sum", "udp_checksum"]


def ones_complement_sum(values, width=16):
    """One's complement sum (end-around carry) of integers of at most ``width`` bits."""
    top = (1 << width) - 1
    total = 0
    for n, v in enumerate(values):
        v = int(v)
        if not 0 <= v <= top:
            raise ValueError(f"value {n} ({v}) does not fit in {width} bits")
        total += v
    while total > top:
        total = (total & top) + (total >> width)
    return total


def be_words(data):
    """``bytes`` -> list of 16-bit big-endian words, an odd final byte padded with zero."""
    data = bytes(data)
    if len(data) % 2:
        data += b"\0"
    return list(struct.unpack(f">{len(data) // 2}H", data))


def data_sum(data, seed=0):
    """One's complement sum of ``seed`` and the bytes of ``data`` (what
    :class:`~rocegen.gateware.lib.checksum.PacketChecksum` reports for a packet)."""
    return ones_complement_sum(be_words(data) + [seed])


def internet_checksum(data, seed=0):
    """The checksum field value: the complement of :func:`data_sum`."""
    return ~data_sum(data, seed) & 0xFFFF


def checksum(data):
    """:func:`internet_checksum` of ``data`` (bytes, no seed), computed fast: what a model that
    builds or checks every frame of a simulation uses. 0 for data whose checksum field is
    right."""
    data = bytes(data)
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def pseudo_header_sum(src, dst, protocol, length):
    """Sum of the IPv4 pseudo-header (RFC 768): addresses as 32-bit integers, the protocol
    number and the UDP length."""
    raw = struct.pack(">IIBBH", src, dst, 0, protocol, length)
    return ones_complement_sum(be_words(raw))


def udp_checksum(src, dst, udp):
    """UDP checksum over the pseudo-header and the UDP header + payload ``udp`` (its checksum
    field zero); a computed 0 is sent as 0xFFFF (RFC 768)."""
    udp = bytes(udp)
    c = internet_checksum(udp, pseudo_header_sum(src, dst, 17, len(udp)))
    return c or 0xFFFF
