"""CM MADs in whole RoCEv2 frames, and back.

A MAD travels from QP1 to QP1 as a UD SEND_ONLY packet: Ethernet, IPv4 (DF, the identification
and TTL given), UDP to port 4791 (checksum 0, as RoCEv2 senders put it), BTH (opcode
:data:`rocegen.wire.opcodes.OP_UD_SEND_ONLY`, P_Key, destination QP 1, the PSN given), DETH
(Q_Key :data:`rocegen.wire.ibcm.QP1_QKEY`, source QP 1), the 256-byte MAD and the ICRC
(:mod:`rocegen.sim.models.icrc`). Every header comes from the header table.
"""

from dataclasses import dataclass

from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.net.checksum import checksum
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import ETH_MIN_FRAME, PSN_MASK

__all__ = ["CmFrame", "wrap", "unwrap", "UDP_SPORT"]

#: UDP source port of the frames :func:`wrap` builds unless told otherwise (the endpoint's).
UDP_SPORT = I.UDP_SPORT
_HEADERS = H.ETH.length + H.IPV4.length + H.UDP.length + H.BTH.length + H.DETH.length
_FRAME_LENGTH = _HEADERS + I.MAD_LENGTH + icrc_model.ICRC_LEN


@dataclass(frozen=True)
class CmFrame:
    """What :func:`unwrap` reads from a frame: addresses, the UDP source port, the BTH's P_Key
    and PSN, the DETH's Q_Key and source QP, and the MAD."""
    src_mac: int
    dst_mac: int
    src_ip: int
    dst_ip: int
    udp_sport: int
    pkey: int
    psn: int
    qkey: int
    src_qp: int
    mad: bytes


def _int(name, v, bits):
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << bits:
        raise ValueError(f"{name} must be a {bits}-bit integer, not {v!r}")
    return v


def wrap(mad, *, src_mac, dst_mac, src_ip, dst_ip, psn=0, udp_sport=UDP_SPORT, ip_id=1, ttl=64,
         pkey=I.DEFAULT_PKEY):
    """The RoCEv2 frame (no FCS) carrying the 256-byte ``mad`` from QP1 of ``src_mac``/
    ``src_ip`` to QP1 of ``dst_mac``/``dst_ip`` (MACs 48-bit and IPv4 addresses 32-bit
    integers)."""
    mad = bytes(mad)
    if len(mad) != I.MAD_LENGTH:
        raise ValueError(f"a MAD is {I.MAD_LENGTH} bytes, not {len(mad)}")
    for name, v, bits in (("src_mac", src_mac, 48), ("dst_mac", dst_mac, 48),
                          ("src_ip", src_ip, 32), ("dst_ip", dst_ip, 32), ("psn", psn, 24),
                          ("udp_sport", udp_sport, 16), ("ip_id", ip_id, 16), ("ttl", ttl, 8),
                          ("pkey", pkey, 16)):
        _int(name, v, bits)
    ip_len = _FRAME_LENGTH - H.ETH.length
    ip = dict(version=4, ihl=5, total_length=ip_len, identification=ip_id, df=1, ttl=ttl,
              protocol=H.IP_PROTO_UDP, src=src_ip, dst=dst_ip)
    dgram = (H.IPV4.pack(**ip, checksum=checksum(H.IPV4.pack(**ip)))
             + H.UDP.pack(src_port=udp_sport, dst_port=H.UDP_PORT_ROCEV2,
                          length=ip_len - H.IPV4.length)
             + H.BTH.pack(opcode=opc.OP_UD_SEND_ONLY, pkey=pkey, dest_qp=I.QP1, psn=psn & PSN_MASK)
             + H.DETH.pack(qkey=I.QP1_QKEY, src_qp=I.QP1)
             + mad)
    frame = H.ETH.pack(dst=dst_mac, src=src_mac, ethertype=H.ETHERTYPE_IPV4) + dgram
    return (frame + icrc_model.icrc(dgram)).ljust(ETH_MIN_FRAME, b"\0")


def unwrap(frame):
    """The :class:`CmFrame` of a frame that carries a MAD to QP1; ``ValueError`` saying what is
    wrong otherwise (not IPv4/UDP 4791, not UD SEND_ONLY to QP1, a bad ICRC, a Q_Key other than
    QP1's, not 256 bytes of MAD)."""
    frame = bytes(frame)
    if len(frame) < _HEADERS:
        raise ValueError(f"frame of {len(frame)} bytes is too short for a CM MAD")
    eth = H.ETH.unpack(frame)
    if eth["ethertype"] != H.ETHERTYPE_IPV4:
        raise ValueError(f"EtherType {eth['ethertype']:#06x} is not IPv4")
    at = H.ETH.length
    ip = H.IPV4.unpack(frame[at:])
    if ip["version"] != 4 or ip["ihl"] != 5 or ip["protocol"] != H.IP_PROTO_UDP:
        raise ValueError("not an IPv4 datagram without options carrying UDP")
    at += H.IPV4.length
    udp = H.UDP.unpack(frame[at:])
    if udp["dst_port"] != H.UDP_PORT_ROCEV2:
        raise ValueError(f"UDP port {udp['dst_port']} is not RoCEv2's")
    if not icrc_model.check(frame):
        raise ValueError("bad ICRC")
    at += H.UDP.length
    bth = H.BTH.unpack(frame[at:])
    if bth["opcode"] != opc.OP_UD_SEND_ONLY or bth["dest_qp"] != I.QP1:
        raise ValueError(f"BTH opcode {opc.name(bth['opcode'])} to QP {bth['dest_qp']} is not "
                         f"a UD SEND_ONLY to QP1")
    at += H.BTH.length
    deth = H.DETH.unpack(frame[at:])
    if deth["qkey"] != I.QP1_QKEY:
        raise ValueError(f"Q_Key {deth['qkey']:#010x} is not QP1's")
    at += H.DETH.length
    mad_len = ip["total_length"] - (at - H.ETH.length) - icrc_model.ICRC_LEN
    if mad_len != I.MAD_LENGTH:
        raise ValueError(f"{mad_len} bytes of MAD, not {I.MAD_LENGTH}")
    return CmFrame(src_mac=eth["src"], dst_mac=eth["dst"], src_ip=ip["src"], dst_ip=ip["dst"],
                   udp_sport=udp["src_port"], pkey=bth["pkey"], psn=bth["psn"], qkey=deth["qkey"],
                   src_qp=deth["src_qp"], mad=frame[at:at + I.MAD_LENGTH])
