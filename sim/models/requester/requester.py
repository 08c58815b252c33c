"""Reference model of the RC requester's segmentation: for a work request and the state of its
QP, the exact sequence of RoCEv2 packets a correct requester sends (InfiniBand specification,
"Segmentation"), and the Ethernet frames that carry them.

A READ work request is one RDMA READ request packet (no payload, RETH naming the remote buffer,
AckReq) that takes one PSN per path MTU of its length, for the responses it asks for (1 for 0
bytes); :func:`resend` gives the packets sent again from a PSN inside a request (go-back-N).

The segmenter gateware is compared with :func:`segment`; :func:`build_frame` turns its packets
into frames (header table for the RoCE headers, ICRC from :mod:`rocegen.sim.models.icrc`) for
benches that feed the RNIC model directly.
"""

from dataclasses import dataclass

from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.net.checksum import internet_checksum
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import ATOMIC_BYTES, ATOMIC_OPERAND_BYTES
from rocegen.wire.verbs import WrOpcode

__all__ = ["WrOpcode", "SEND_OPCODES", "WorkRequest", "QpSegment", "PacketDesc", "segment",
           "resend", "psn_count", "build_frame", "generator_operands", "PMTUS", "PSN_MOD"]

PMTUS = (256, 512, 1024, 2048, 4096)
PSN_MOD = 1 << 24


#: The work request opcodes that send the message's payload (all but READ).
SEND_OPCODES = tuple(op for op in WrOpcode if op.sends_payload)


@dataclass(frozen=True)
class WorkRequest:
    wr_id: int
    opcode: WrOpcode
    length: int
    local_addr: int = 0
    remote_offset: int = 0       # added to the QP's base virtual address (WRITE, READ)
    imm: int = 0


@dataclass
class QpSegment:
    """What segmentation needs of a QP (the gateware's ``QP_SEGMENT``); ``psn`` advances as
    messages are segmented."""
    dest_qpn: int
    rkey: int
    base_va: int
    psn: int                     # next PSN to send
    pmtu: int = 4096
    pkey: int = 0xFFFF
    ack_every: int = 64          # AckReq also on every N-th packet inside long messages


@dataclass(frozen=True)
class PacketDesc:
    opcode: int
    psn: int
    ack_req: bool
    se: bool
    padcnt: int
    offset: int                  # of the payload within the message
    length: int                  # payload bytes
    reth: tuple | None           # (va, rkey, dma_len)
    imm: int | None
    last: bool
    psns: int = 1                # PSNs the packet takes (a READ request: its responses')
    atomic: tuple | None = None  # an atomic request's target (va, rkey): its AtomicETH's first
                                 # fields, the payload (16 bytes of local memory) its operands


def psn_count(wr, pmtu):
    """PSNs a work request takes: its packets, or a READ's responses (1 for 0 bytes)."""
    return max(1, -(-wr.length // pmtu))


def _read_request(wr, qp, psn, index):
    offset = index * qp.pmtu
    return PacketDesc(
        opcode=opc.OP_RC_RDMA_READ_REQUEST, psn=psn, ack_req=True, se=False, padcnt=0,
        offset=offset, length=0,
        reth=((qp.base_va + wr.remote_offset + offset) % (1 << 64), qp.rkey, wr.length - offset),
        imm=None, last=True, psns=psn_count(wr, qp.pmtu) - index)


def _atomic_request(wr, qp, psn):
    op = opc.OP_RC_COMPARE_SWAP if wr.opcode == WrOpcode.COMPARE_SWAP else opc.OP_RC_FETCH_ADD
    return PacketDesc(opcode=op, psn=psn, ack_req=True, se=False, padcnt=0, offset=0,
                      length=ATOMIC_OPERAND_BYTES, reth=None, imm=None, last=True,
                      atomic=((qp.base_va + wr.remote_offset) % (1 << 64), qp.rkey))


def segment(wr, qp):
    """The packets of ``wr`` on ``qp``; advances ``qp.psn`` past them (past every response PSN
    of a READ). An atomic (COMPARE_SWAP, FETCH_ADD) is one request packet whose payload is its
    16 bytes of operands in local memory (``length`` ignored)."""
    if qp.pmtu not in PMTUS:
        raise ValueError(f"path MTU must be one of {PMTUS}, not {qp.pmtu}")
    if not 0 <= wr.length < 1 << 31:
        raise ValueError(f"message length must be 0..2^31-1, not {wr.length}")
    if WrOpcode(wr.opcode).is_atomic:
        pkt = _atomic_request(wr, qp, qp.psn)
        qp.psn = (qp.psn + 1) % PSN_MOD
        return [pkt]
    if WrOpcode(wr.opcode) == WrOpcode.READ:
        pkt = _read_request(wr, qp, qp.psn, 0)
        qp.psn = (qp.psn + pkt.psns) % PSN_MOD
        return [pkt]
    first_op, middle_op, last_op, only_op = opc.message_opcodes(wr.opcode)
    is_write = opc.has_reth(first_op)
    has_imm = opc.has_imm(only_op)
    solicited = wr.opcode != WrOpcode.WRITE          # SE on SENDs and WRITE_WITH_IMMEDIATE
    count = max(1, -(-wr.length // qp.pmtu))
    reth = ((qp.base_va + wr.remote_offset) % (1 << 64), qp.rkey, wr.length) if is_write else None
    packets = []
    for k in range(count):
        first, last = k == 0, k == count - 1
        offset = k * qp.pmtu
        length = min(qp.pmtu, wr.length - offset) if wr.length else 0
        if first and last:
            op = only_op
        elif first:
            op = first_op
        elif last:
            op = last_op
        else:
            op = middle_op
        packets.append(PacketDesc(
            opcode=op,
            psn=qp.psn,
            ack_req=last or (k + 1) % qp.ack_every == 0,
            se=last and solicited,
            padcnt=(-length) & 3,
            offset=offset,
            length=length,
            reth=reth if first else None,
            imm=wr.imm if (last and has_imm) else None,
            last=last,
        ))
        qp.psn = (qp.psn + 1) % PSN_MOD
    return packets


def resend(wr, qp, first, psn):
    """The packets of ``wr`` (first PSN ``first``) sent again from PSN ``psn`` inside it: the
    tail of its packets from that PSN, or for a READ one request asking for the rest from
    ``psn`` on (RETH address and length advanced by as many path MTUs). ``qp.psn`` is not
    used nor changed."""
    index = (psn - first) % PSN_MOD
    if not 0 <= index < psn_count(wr, qp.pmtu):
        raise ValueError(f"PSN {psn} is not inside the request from PSN {first}")
    if WrOpcode(wr.opcode) == WrOpcode.READ:
        return [_read_request(wr, qp, psn, index)]
    return segment(wr, QpSegment(**{**vars(qp), "psn": first}))[index:]


def generator_operands(opcode, imm, wr_id, atomics="little"):
    """The operands of the traffic generator's atomic ``wr_id`` (its message number) with
    immediate ``imm``, as local memory would hold them (``swap_add`` then ``compare``, 8 bytes
    each in byte order ``atomics``): a FETCH_ADD adds ``imm``; a COMPARE_SWAP swaps
    ``imm + wr_id + 1`` for ``imm + wr_id`` (sums modulo 2^64). The packet builder makes them
    in place of the generator's payload, which is the test pattern."""
    base = (imm + wr_id) % 2**64
    if opcode == opc.OP_RC_COMPARE_SWAP:
        swap_add, compare = (base + 1) % 2**64, base
    elif opcode == opc.OP_RC_FETCH_ADD:
        swap_add, compare = imm, 0
    else:
        raise ValueError(f"opcode {opcode:#04x} is not an atomic request")
    return swap_add.to_bytes(ATOMIC_BYTES, atomics) + compare.to_bytes(ATOMIC_BYTES, atomics)


def build_frame(pkt, payload, qp, *, src_mac, dst_mac, src_ip, dst_ip, udp_sport,
                ip_id=1, dscp=0, ecn=0, migreq=1, atomics="little"):
    """The Ethernet frame (no FCS) of packet ``pkt`` carrying ``payload`` bytes. An atomic
    request's payload is its operands as local memory holds them (``swap_add`` then
    ``compare``, 8 bytes each in byte order ``atomics``): its AtomicETH carries them."""
    payload = bytes(payload)
    if len(payload) != pkt.length:
        raise ValueError(f"payload of {len(payload)} bytes for a {pkt.length}-byte packet")
    roce = H.BTH.pack(opcode=pkt.opcode, se=int(pkt.se), m=migreq, padcnt=pkt.padcnt, tver=0,
                      pkey=qp.pkey, dest_qp=qp.dest_qpn, ack_req=int(pkt.ack_req),
                      psn=pkt.psn)
    if pkt.reth is not None:
        va, rkey, dma_len = pkt.reth
        roce += H.RETH.pack(va=va, rkey=rkey, dma_len=dma_len)
    if pkt.imm is not None:
        roce += H.IMMDT.pack(imm=pkt.imm)
    if pkt.atomic is not None:
        va, rkey = pkt.atomic
        n = ATOMIC_BYTES
        roce += H.ATOMIC_ETH.pack(va=va, rkey=rkey,
                                  swap_add=int.from_bytes(payload[:n], atomics),
                                  compare=int.from_bytes(payload[n:2 * n], atomics))
        payload = b""
    roce += payload + bytes(pkt.padcnt)
    udp_len = H.UDP.length + len(roce) + icrc_model.ICRC_LEN
    udp = H.UDP.pack(src_port=udp_sport, dst_port=H.UDP_PORT_ROCEV2, length=udp_len, checksum=0)
    total = H.IPV4.length + udp_len
    ip = H.IPV4.pack(version=4, ihl=5, dscp=dscp, ecn=ecn, total_length=total,
                     identification=ip_id, df=1, ttl=64, protocol=H.IP_PROTO_UDP,
                     src=src_ip, dst=dst_ip)
    ip = ip[:10] + internet_checksum(ip).to_bytes(2, "big") + ip[12:]
    eth = H.ETH.pack(dst=dst_mac, src=src_mac, ethertype=H.ETHERTYPE_IPV4)
    return icrc_model.append(eth + ip + udp + roce)
