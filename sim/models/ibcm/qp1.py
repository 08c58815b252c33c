"""QP1's receive and send paths: MADs out of RoCEv2 datagrams and into them (the reference of
the gateware's ``Qp1Ingress`` and ``Qp1Egress``)."""

from typing import NamedTuple

from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc

__all__ = ["Qp1In", "ingress", "egress"]


class Qp1In(NamedTuple):
    """What QP1's receive path makes of a datagram to QP1."""
    #: ``"queued"`` (handed to the CM), ``"drop_qkey"``, ``"drop_pkey"`` or ``"drop_error"``
    verdict: str
    #: the UD payload after the DETH (``b""`` when dropped)
    mad: bytes
    #: the sender: ``src_ip`` (IPv4 source), ``src_qp`` (the DETH's), ``pkey`` (the BTH's)
    meta: dict


def ingress(datagram, *, error=False):
    """What QP1's receive path makes of ``datagram``, a RoCEv2 datagram as RoCE's ICRC check
    hands it on (IPv4 header first, ICRC removed; ``error``: the ICRC was bad): None when it is
    not for QP1 (shorter than the IPv4, UDP, BTH and DETH headers, or not a UD SEND_ONLY to
    QP1), else a :class:`Qp1In`. The checks, in order: the DETH's Q_Key is QP1's, the P_Key's
    low 15 bits are all ones, the ICRC was good. The MAD's length is not looked at."""
    datagram = bytes(datagram)
    if len(datagram) < I.UD_IN.length:
        return None
    ud = I.UD_IN.unpack(datagram)
    if ud["bth_opcode"] != opc.OP_UD_SEND_ONLY or ud["bth_dest_qp"] != I.QP1:
        return None
    meta = {"src_ip": ud["ipv4_src"], "src_qp": ud["deth_src_qp"], "pkey": ud["bth_pkey"]}
    if ud["deth_qkey"] != I.QP1_QKEY:
        return Qp1In("drop_qkey", b"", meta)
    if ud["bth_pkey"] & 0x7FFF != 0x7FFF:
        return Qp1In("drop_pkey", b"", meta)
    if error:
        return Qp1In("drop_error", b"", meta)
    return Qp1In("queued", datagram[I.UD_IN.length:], meta)


def egress(mad, *, dst_ip, dst_qp, pkey, psn):
    """The UDP payload (without its ICRC) that carries ``mad`` from QP1 to QP ``dst_qp`` of
    ``dst_ip``, and the UDP header fields it is sent with: ``(payload, udp)``. BTH: UD
    SEND_ONLY, ``pkey``, ``psn``, no AckReq; DETH: QP1's Q_Key, source QP 1; UDP from
    :data:`~rocegen.wire.ibcm.UDP_SPORT` to 4791, checksum 0."""
    mad = bytes(mad)
    payload = H.BTH.pack(opcode=opc.OP_UD_SEND_ONLY, pkey=pkey, dest_qp=dst_qp, psn=psn) + \
        H.DETH.pack(qkey=I.QP1_QKEY, src_qp=I.QP1) + mad
    udp = {"dst_ip": dst_ip, "src_port": I.UDP_SPORT, "dst_port": H.UDP_PORT_ROCEV2,
           "length": len(payload) + 4}
    return payload, udp
