"""The RoCEv2 receive path: ACKNOWLEDGE frames of the host NIC model (and CNPs, other opcodes,
damaged, truncated and random datagrams; READ responses, with and without ``reads``) as IPv4
datagrams the way the Ethernet layer hands them on (headers in place, padded to the Ethernet
minimum, damaged frames marked), mixed with datagrams that are not RoCEv2 traffic for us (another
destination, another protocol or port, a bad IPv4 header checksum, IPv4 options, fragments,
longer than the MTU, an inconsistent UDP length, shorter than both headers) and with RoCEv2
datagrams that carry a UDP checksum, right or wrong; with a QP table providing the lookup and the
contexts. Every RoCEv2 datagram must pulse exactly its verdict's counter and every foreign one
none (and leave on ``req`` marked ``error``), and the good ACKs must leave as events, in order.
The verdicts are the test's own reference classifier's (:func:`classify`)."""

import itertools
import random
from types import SimpleNamespace

import pytest
from amaranth.hdl import Elaboratable, Module

from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.gateware.roce.rx import ACK_MIN, COUNTERS, RoceRx, Verdict
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.net.checksum import internet_checksum, udp_checksum
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import Rnic
from rocegen.sim.testing.amaranth_streams import StreamDriver, meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip, parse_mac
from tests.tiers import full
from tests.unit.roce.udp_verdicts import UdpVerdicts

OTHER_IP = "10.0.0.77"          # a host that is the peer of no QP but QP 3
NUM_QPS = 5
# QP index -> (state, peer)
QPS = {0: (QpState.RTS, HOST_IP), 1: (QpState.RTR, HOST_IP), 2: (QpState.INIT, HOST_IP),
       3: (QpState.RTS, OTHER_IP), 4: (QpState.ERROR, HOST_IP)}
READ_OPS = (0x0D, 0x0E, 0x0F, 0x10)            # READ response FIRST, MIDDLE, LAST, ONLY
#: what the Ethernet layer hands on with each datagram (not read by the receive path)
META = {"eth": H.ETH.unpack(H.ETH.pack(dst=parse_mac(FPGA_MAC), src=parse_mac(HOST_MAC),
                                       ethertype=H.ETHERTYPE_IPV4))}
#: the shortest IPv4 datagram a (60-byte) Ethernet frame carries: shorter ones are padded
ETH_MIN = 46
#: the ways :func:`foreign` makes a datagram that is not RoCEv2 traffic for us
FOREIGN_KINDS = ("dst", "protocol", "port", "ip_checksum", "ihl", "version", "fragment", "mtu",
                 "udp_length", "tiny")


def counter(verdict):
    """The pulse output of a verdict: one per verdict in order, PENDING (10) left out; None for
    FOREIGN, which pulses none."""
    if verdict == Verdict.FOREIGN:
        return None
    return COUNTERS[verdict.value - (verdict.value > 10)]


class Top(Elaboratable):
    """The receive path with a QP table beside it."""

    def __init__(self, width, reads=False, mads=False, mtu=1500):
        self.rx = RoceRx(width, NUM_QPS, reads=reads, ibcm=mads, mtu=mtu)
        self.table = QpTable(NUM_QPS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = self.rx
        m.submodules.table = t = self.table
        m.d.comb += [
            t.lookup_qpn.eq(rx.lookup_qpn),
            rx.lookup_index.eq(t.lookup_index),
            rx.lookup_valid.eq(t.lookup_valid),
            t.rx_qp.eq(rx.rx_qp),
            rx.rx_context.eq(t.rx_context),
        ]
        return m


def context(state, peer):
    return {"state": state, "peer_ip": parse_ip(peer), "peer_qpn": 0x11, "rkey": 0, "base_va": 0,
            "pmtu_log2": 10, "udp_sport": 0xC000, "dscp": 0, "ecn": 0, "ack_every_log2": 6,
            "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


# ---- datagrams

def ip_of(frame):
    """An Ethernet frame of the host NIC model -> its IPv4 datagram (bytes from the IPv4 header
    on), as the Ethernet layer hands it on."""
    return bytes(frame)[14:]


def ethernet(rng, dgram, zeros=None):
    """``dgram`` as the Ethernet layer hands it on: padded to :data:`ETH_MIN` bytes, with zero
    bytes (``zeros``) or, as some senders pad, with garbage (default: either)."""
    n = ETH_MIN - len(dgram)
    if n <= 0:
        return bytes(dgram)
    if zeros is None:
        zeros = rng.random() < 0.7
    return bytes(dgram) + (bytes(n) if zeros else rng.randbytes(n))


def ipv4(rng, body, *, src=HOST_IP, dst=FPGA_IP, protocol=H.IP_PROTO_UDP, ihl=5, mf=0,
         frag_offset=0, total_length=None, bad_checksum=False):
    """An IPv4 datagram carrying ``body``: random TOS, identification, DF and TTL, the header
    checksum right (or, ``bad_checksum``, wrong), IPv4 options (NOPs and an end) for IHL > 5."""
    options = (b"\x01" * (4 * (ihl - 5) - 1) + b"\x00") if ihl > 5 else b""
    fields = dict(version=4, ihl=ihl, dscp=rng.getrandbits(6), ecn=rng.getrandbits(2),
                  total_length=4 * ihl + len(body) if total_length is None else total_length,
                  identification=rng.getrandbits(16), df=rng.getrandbits(1), mf=mf,
                  frag_offset=frag_offset, ttl=rng.randrange(1, 256), protocol=protocol,
                  src=parse_ip(src), dst=parse_ip(dst))
    head = H.IPV4.pack(**fields) + options
    checksum = internet_checksum(head)
    if bad_checksum:
        checksum ^= 1 << rng.randrange(16)
    return head[:10] + checksum.to_bytes(2, "big") + head[12:] + bytes(body)


def rewrite(dgram, **fields):
    """``dgram`` with IPv4 header fields changed and its header checksum made right again."""
    head = dict(H.IPV4.unpack(dgram[:20]), **fields, checksum=0)
    head = H.IPV4.pack(**head)
    head = head[:10] + internet_checksum(head).to_bytes(2, "big") + head[12:]
    return head + dgram[20:]


def with_udp_checksum(rng, dgram, kind=None):
    """``dgram`` (IPv4 without options, then UDP) with its UDP checksum ``"zero"`` (none),
    ``"good"`` (RFC 768, over the pseudo-header and the UDP datagram, ICRC included: the ICRC
    does not cover the field) or ``"bad"`` (neither 0 nor the right one); default: zero or
    good."""
    kind = kind or rng.choice(("zero", "good"))
    d = bytearray(dgram)
    d[26:28] = bytes(2)
    if kind != "zero":
        right = udp_checksum(int.from_bytes(d[12:16], "big"), int.from_bytes(d[16:20], "big"),
                             d[20:])
        value = right
        while kind == "bad" and value in (0, right):
            value = right ^ rng.randrange(1, 0x10000)
        d[26:28] = value.to_bytes(2, "big")
    return bytes(d)


def datagram(rng, transport, *, icrc=True, dst_port=H.UDP_PORT_ROCEV2, udp_length=None,
             checksum=None, **ip):
    """A RoCEv2 datagram: IPv4 and UDP headers, ``transport`` (BTH on), its ICRC (computed over
    the datagram as it is, whatever its headers say), every field right unless given: ``ip``
    for :func:`ipv4`, ``checksum`` for :func:`with_udp_checksum`."""
    tail = bytes(icrc_model.ICRC_LEN if icrc else 0)
    n = H.UDP.length + len(transport) + len(tail)
    udp = H.UDP.pack(src_port=rng.randrange(0xC000, 0x10000), dst_port=dst_port,
                     length=n if udp_length is None else udp_length)
    d = ipv4(rng, udp + bytes(transport) + tail, **ip)
    if icrc:
        d = d[:-len(tail)] + icrc_model.icrc(d[:-len(tail)])
    if ip.get("ihl", 5) != 5:
        return d
    return with_udp_checksum(rng, d, checksum)


def bth(rng, opcode, dest_qp, psn=0, pkey=0xFFFF):
    return H.BTH.pack(opcode=opcode, se=rng.getrandbits(1), m=rng.getrandbits(1),
                      padcnt=rng.getrandbits(2), pkey=pkey, fecn=rng.getrandbits(1),
                      becn=rng.getrandbits(1), resv6=rng.getrandbits(6), dest_qp=dest_qp,
                      ack_req=rng.getrandbits(1), psn=psn)


# ---- the reference classifier

def ones_sum(data):
    """16-bit one's complement sum (end-around carry) of ``data`` as big-endian words, an odd
    last byte padded with zero: 0xFFFF over a header, or a pseudo-header and UDP datagram, whose
    checksum is right."""
    data = bytes(data) + bytes(len(data) % 2)
    total = sum(int.from_bytes(data[k:k + 2], "big") for k in range(0, len(data), 2))
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def trimmed(dgram):
    """What is left of a frame's datagram after its IPv4 total length, and whether the frame
    was shorter than that length."""
    d = bytes(dgram)
    if len(d) < 4:
        return d, False
    total = int.from_bytes(d[2:4], "big")
    return d[:total], len(d) < total


def error_counts(dgram, width):
    """Whether the ``error`` of a frame (``dgram``, its datagram and whatever followed it) reaches
    the datagram at ``width`` bits: only when the frame's last beat holds the datagram's end (the
    cut does not wait for the FCS verdict of beats after it)."""
    d = bytes(dgram)
    total = int.from_bytes(d[2:4], "big") if len(d) >= 4 else 0
    B = width // 8
    return len(d) <= total or (max(total, 1) - 1) // B == (len(d) - 1) // B


def foreign_to(d, mtu):
    """The reason the network stack would not deliver the (trimmed) datagram ``d`` on UDP port
    4791 of our address, or None: the IPv4 receive layer's checks, then UDP's."""
    if len(d) < H.IPV4.length + H.UDP.length:
        return "shorter than the IPv4 and UDP headers"
    total = int.from_bytes(d[2:4], "big")
    udp_length = int.from_bytes(d[24:26], "big")
    for bad, why in ((d[0] >> 4 != 4, "version"), (d[0] & 0x0F != 5, "IHL"),
                     (ones_sum(d[:20]) != 0xFFFF, "header checksum"),
                     (not 20 <= total <= mtu, "total length"),
                     (int.from_bytes(d[6:8], "big") & 0x3FFF, "fragment"),
                     (d[16:20] != parse_ip(FPGA_IP).to_bytes(4, "big"), "destination"),
                     (d[9] != 17, "protocol"),
                     (int.from_bytes(d[22:24], "big") != 4791, "UDP port"),
                     (udp_length != total - 20, "UDP length")):
        if bad:
            return why
    return None


def udp_verdict(dgram, verdict):
    """The network stack's verdict on the UDP checksum of a frame's datagram of ``verdict``:
    None when it gives none (foreign, or checksum 0), else whether the checksum is right."""
    d, _ = trimmed(dgram)
    if verdict == Verdict.FOREIGN or d[26:28] == b"\0\0":
        return None
    return not udp_checksum_bad(d)


def udp_checksum_bad(d):
    """The UDP checksum of the datagram ``d`` is not 0 and wrong: the one's complement sum of
    the pseudo-header (addresses, protocol 17, UDP length) and the UDP datagram is not 0xFFFF."""
    if d[26:28] == b"\0\0":
        return False
    pseudo = d[12:20] + bytes([0, 17]) + (len(d) - 20).to_bytes(2, "big")
    return ones_sum(pseudo + d[20:]) != 0xFFFF


def classify(dgram, error=False, reads=False, mads=False, mtu=1500, *, width):
    """Reference verdict of a datagram as Ethernet hands it on at ``width`` bits, and its event
    when it is a good ACK (``reads``: the READ responses have a verdict of their own; FIRST, LAST
    and ONLY need an AETH; ``mads``: so have UD SEND_ONLY packets to QP1). The datagram is cut to
    its IPv4 total length (padding off; a frame shorter than it is damaged; the frame's
    ``error`` counts only when its last beat holds the datagram's end) and must be one the stack
    delivers on UDP port 4791 (else FOREIGN); a UDP checksum that is not 0 and wrong is a bad
    ICRC."""
    error = error and error_counts(dgram, width)
    d, cut_short = trimmed(dgram)
    if foreign_to(d, mtu):
        return Verdict.FOREIGN, None
    payload = d[28:]
    n = len(payload)
    if n < 16:
        return Verdict.SHORT, None
    b = H.BTH.unpack(payload[:12])
    op = b["opcode"]
    if (op == opc.OP_RC_ACKNOWLEDGE and n < 20) or (op == opc.OP_CNP and n < 32):
        return Verdict.SHORT, None
    if reads and op in (0x0D, 0x0F, 0x10) and n < 20:
        return Verdict.SHORT, None
    if (error or cut_short or icrc_model.icrc(d[:-4]) != d[-4:] or udp_checksum_bad(d)):
        return Verdict.ICRC, None
    if opc.is_request(op):
        return Verdict.REQUEST, None
    if mads and op == opc.OP_UD_SEND_ONLY and b["dest_qp"] == 1:
        return Verdict.MAD, None
    if reads and op in READ_OPS:
        return Verdict.READ_RESPONSE, None
    if op not in (opc.OP_RC_ACKNOWLEDGE, opc.OP_CNP):
        return Verdict.OPCODE, None
    if b["pkey"] & 0x7FFF != 0x7FFF:
        return Verdict.PKEY, None
    qp = b["dest_qp"] - QPN_BASE
    if not 0 <= qp < NUM_QPS:
        return Verdict.QP, None
    state, peer = QPS[qp]
    if state not in (QpState.RTR, QpState.RTS):
        return Verdict.STATE, None
    if int.from_bytes(d[12:16], "big") != parse_ip(peer):
        return Verdict.PEER, None
    if op == opc.OP_CNP:
        return Verdict.CNP, qp
    a = H.AETH.unpack(payload[12:16])
    return Verdict.ACK, {"qp": qp, "syndrome": a["syndrome"], "psn": b["psn"], "msn": a["msn"]}


# ---- the host NIC model's frames and random ones

def nics():
    """Host NICs with one QP per case: (nic, qpn) per name."""
    host = Rnic(HOST_MAC, HOST_IP)
    other = Rnic("02:00:00:00:00:77", OTHER_IP)
    cases = {}

    def qp(nic, name, qpn, peer_qpn, **kw):
        nic.create_qp(qpn, peer_qpn=peer_qpn, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                      pmtu=1024, **kw)
        cases[name] = (nic, qpn)

    for k in range(NUM_QPS):
        qp(host, f"qp{k}", 0x40 + k, QPN_BASE + k)          # qp2, qp4: wrong state; qp3: peer
    qp(other, "qp3_other", 0x50, QPN_BASE + 3)              # the right peer of QP 3
    qp(other, "qp0_other", 0x51, QPN_BASE)                  # the wrong peer of QP 0
    qp(host, "pkey_7fff", 0x60, QPN_BASE, pkey=0x7FFF)      # accepted
    qp(host, "pkey_bad", 0x61, QPN_BASE + 1, pkey=0x8001)
    qp(host, "unknown", 0x62, QPN_BASE + NUM_QPS)
    qp(host, "low", 0x63, 0x12)
    return cases


def roce_case(rng, cases, reads=False, mtu=1500):
    """One RoCEv2 datagram for us (before Ethernet's padding): (bytes, error flag)."""
    if reads and rng.random() < 0.2:                     # a READ response, some short or bad
        op = rng.choice(READ_OPS)
        body = bth(rng, op, QPN_BASE + rng.randrange(NUM_QPS + 1)) + rng.randbytes(
            rng.choice([rng.randrange(8), rng.randrange(200)]))
        d = datagram(rng, body, src=rng.choice([HOST_IP, OTHER_IP]))
        if rng.random() < 0.15:
            d = d[:-1] + bytes([d[-1] ^ 0x10])
        return d, rng.random() < 0.05
    r = rng.random()
    if r < 0.45:                                         # an ACK / NAK of the host NIC model
        name = rng.choice(list(cases))
        nic, qpn = cases[name]
        syndrome = rng.choice([0x1F, 0x00, rng.getrandbits(8), 0x60, 0x61, 0x20 | rng.getrandbits(5)])
        d = ip_of(nic.ack_frame(qpn, syndrome, rng.getrandbits(24), msn=rng.getrandbits(24)))
        return with_udp_checksum(rng, d), False
    if r < 0.55:                                         # a CNP
        return datagram(rng, bth(rng, opc.OP_CNP, QPN_BASE + rng.randrange(NUM_QPS + 1))
                        + bytes(16), src=rng.choice([HOST_IP, OTHER_IP])), False
    if r < 0.63:                                         # other opcodes, some with payload
        op = rng.choice([0x04, 0x06, 0x0A, 0x00, 0x0C, 0x10, 0x12, 0x64, 0x64, 0x64, 0x65, 0x24,
                         0xFF])
        dest = rng.choice([1, 1, 0xFFFF01, QPN_BASE + rng.randrange(NUM_QPS)])
        return datagram(rng, bth(rng, op, dest) + rng.randbytes(rng.randrange(40))), False
    if r < 0.65:                                         # a SEND_ONLY of the MTU, or just under
        n = mtu - rng.randrange(3) - 20 - 8 - 12 - 4
        return datagram(rng, bth(rng, 0x04, QPN_BASE) + rng.randbytes(n)), False
    if r < 0.74:                                         # a damaged ACK
        nic, qpn = cases[f"qp{rng.choice([0, 1])}"]
        d = with_udp_checksum(rng, ip_of(nic.ack_frame(qpn, 0x1F, rng.getrandbits(24))))
        if rng.random() < 0.3:
            return d, True                               # marked damaged upstream
        bad = bytearray(d)                               # a bit of the UDP payload flipped
        bad[rng.randrange(28, len(bad))] ^= 1 << rng.randrange(8)
        return bytes(bad), False
    if r < 0.86:                                         # truncated to 0..19 bytes
        nic, qpn = cases[f"qp{rng.choice([0, 1])}"]
        whole = ip_of(nic.ack_frame(qpn, 0x1F, rng.getrandbits(24)))[28:]
        n = rng.randrange(20)
        if rng.random() < 0.5:                           # the ICRC of what is left is right
            return datagram(rng, whole[:max(0, n - 4)], icrc=n >= 4), False
        return datagram(rng, whole[:n], icrc=False), False
    # random garbage, sometimes with a plausible BTH
    n = rng.choice([rng.randrange(20), rng.randrange(80)])
    body = rng.randbytes(n)
    if n >= 12 and rng.random() < 0.5:
        body = bth(rng, rng.choice([0x11, 0x81]), QPN_BASE + rng.randrange(NUM_QPS),
                   pkey=rng.choice([0xFFFF, 0x7FFF, rng.getrandbits(16)])) + body[12:]
        return datagram(rng, body[:max(0, n - 4)], src=rng.choice([HOST_IP, OTHER_IP]),
                        icrc=n >= 4), False
    return datagram(rng, body, icrc=False), False


def foreign(rng, kind, mtu=1500):
    """A datagram the network stack does not deliver on UDP port 4791 of our address, for the
    reason ``kind`` (:data:`FOREIGN_KINDS`); but for it, a RoCEv2 datagram of a kind that gets
    a verdict (an ACK, a CNP or a request to an open QP from its peer, its ICRC right)."""
    transport = rng.choice([
        bth(rng, opc.OP_RC_ACKNOWLEDGE, QPN_BASE + rng.choice([0, 1]), rng.getrandbits(24))
        + H.AETH.pack(syndrome=0x1F, msn=rng.getrandbits(24)),
        bth(rng, opc.OP_CNP, QPN_BASE) + bytes(16),
        bth(rng, 0x04, QPN_BASE) + rng.randbytes(rng.randrange(64)),
    ])
    if kind == "dst":
        ours = parse_ip(FPGA_IP)
        dst = rng.choice([OTHER_IP, HOST_IP, "255.255.255.255", "0.0.0.0",
                          ours ^ (1 << rng.randrange(32))])
        return datagram(rng, transport, dst=dst)
    if kind == "protocol":                               # ICMP (an echo request) or another
        if rng.random() < 0.5:
            echo = H.ICMP.pack(type=8, identifier=rng.getrandbits(16), sequence=1)
            echo += rng.randbytes(rng.randrange(40))
            echo = echo[:2] + internet_checksum(echo).to_bytes(2, "big") + echo[4:]
            return ipv4(rng, echo, protocol=H.IP_PROTO_ICMP)
        return datagram(rng, transport, protocol=rng.choice([1, 6, 0, 17 ^ (1 << rng.randrange(8))]))
    if kind == "port":
        port = rng.choice([17185, 4790, 4792, 4791 ^ (1 << rng.randrange(16)), 7])
        return datagram(rng, transport, dst_port=port)
    if kind == "ip_checksum":
        return datagram(rng, transport, bad_checksum=True)
    if kind == "ihl":                                    # options, or a header too short
        if rng.random() < 0.7:
            return datagram(rng, transport, ihl=rng.choice([6, 6, 7, 15]))
        return rewrite(datagram(rng, transport), ihl=rng.randrange(5))
    if kind == "version":
        return rewrite(datagram(rng, transport), version=rng.choice([0, 5, 6, 15]))
    if kind == "fragment":
        frag = rng.choice([dict(mf=1), dict(frag_offset=rng.randrange(1, 1 << 13)),
                           dict(frag_offset=1 << rng.randrange(13)),
                           dict(mf=1, frag_offset=rng.randrange(1, 1 << 13))])
        return datagram(rng, transport, **frag)
    if kind == "mtu":                                    # a SEND_ONLY longer than the MTU
        n = mtu + 1 + rng.randrange(3) - 20 - 8 - 12 - 4
        return datagram(rng, bth(rng, 0x04, QPN_BASE) + rng.randbytes(n))
    if kind == "udp_length":
        right = 8 + len(transport) + 4
        length = right + rng.choice([-1, 1, 2, -2, 20, 100, -right, -right + 7, 0x8000])
        return datagram(rng, transport, udp_length=length)
    assert kind == "tiny"                                # IPv4 total length under 28
    total = rng.choice([rng.randrange(20, 28), rng.randrange(20), 0])
    udp = H.UDP.pack(src_port=0xC000, dst_port=H.UDP_PORT_ROCEV2, length=max(0, total - 20))
    if total >= 20:
        return ipv4(rng, udp[:total - 20])
    return ipv4(rng, b"", total_length=total)            # a header saying it is not whole


def random_case(rng, cases, reads=False, mtu=1500, kinds=None):
    """One IPv4 datagram as the Ethernet layer hands it on: (bytes, error flag, kind), kind one
    of :data:`FOREIGN_KINDS`, ``"truncated"`` (a frame shorter than its total length),
    ``"flipped"`` (a bit of the IPv4 or UDP header flipped), ``"udp_bad"`` (a wrong UDP
    checksum) or ``"roce"``. ``kinds``: an iterator of the foreign kinds to make in turn
    (default: random ones)."""
    r = rng.random()
    if r < 0.16:
        kind = next(kinds) if kinds else rng.choice(FOREIGN_KINDS)
        d, err = foreign(rng, kind, mtu), rng.random() < 0.1
    elif r < 0.21:
        kind = "truncated"
        d, err = roce_case(rng, cases, reads, mtu)
        d = d[:rng.choice([rng.randrange(len(d)), rng.randrange(min(28, len(d) - 1), len(d))])]
    elif r < 0.24:                                       # a bit of the headers flipped
        kind = "flipped"
        d, err = roce_case(rng, cases, reads, mtu)
        bad = bytearray(d)
        bad[rng.randrange(28)] ^= 1 << rng.randrange(8)
        d = bytes(bad)
    else:
        d, err = roce_case(rng, cases, reads, mtu)
        kind = "roce"
        if rng.random() < 0.08:
            kind = "udp_bad"
            d = with_udp_checksum(rng, d, "bad")
    d = ethernet(rng, d)
    if rng.random() < (0.3 if err else 0.03):            # more than padding after it (the
        d += rng.randbytes(rng.randrange(1, 20))         # error of a damaged frame there)
    return d, err, kind


# ---- the simulation

def run(width, datagrams, *, idle=0.0, backpressure=0.0, seed=0, stall_first=0, reads=False,
        seen=None, mtu=1500):
    """Send the datagrams (``(bytes, error flag)``, the receive path's ``local_ip`` ours);
    returns the counts per counter, the events, the input last-beat cycles, the event cycles,
    the cycles with ``i`` held, the QPs of the CNPs and the packets on ``req`` (bytes, ``error``
    of the last beat). With ``seen`` (a list), the IB CM's verdict too (``mads``), and the QPs
    of ``data_seen`` appended to it. The UDP checksums' verdicts come as the stack's would
    (:class:`UdpVerdicts`), for the datagrams :func:`classify` finds ours."""
    dut = Top(width, reads, mads=seen is not None, mtu=mtu)
    rx = dut.rx
    drv = StreamDriver(rx.i, width, idle=idle, seed=seed)
    stack = UdpVerdicts(rx, [udp_verdict(d, classify(d, e, reads, seen is not None, mtu,
                                                     width=width)[0])
                             for d, e in datagrams], seed=seed + 200)
    rng = random.Random(seed + 100)
    r = SimpleNamespace(counts=dict.fromkeys(COUNTERS, 0), events=[], ev_cycles=[],
                        last_cycles=[], held=0, cnp_qps=[], req=[])
    cycle = [0]
    part = bytearray()

    async def monitor(ctx):
        signals = [getattr(rx, c) for c in COUNTERS]
        async for _, _, *vals in ctx.tick().sample(rx.i.valid, rx.i.ready, rx.i.payload.last,
                                                   rx.cnp_qp, rx.data_seen.valid,
                                                   rx.data_seen.payload, rx.req.valid,
                                                   rx.req.payload.data, rx.req.payload.keep,
                                                   rx.req.payload.last, rx.req.payload.error,
                                                   *signals):
            (valid, ready, last, cnp_qp, seen_valid, seen_qp, req_valid, req_data, req_keep,
             req_last, req_error, *pulses) = vals
            if seen_valid and seen is not None:
                seen.append(seen_qp)
            cycle[0] += 1
            if valid and ready and last:
                r.last_cycles.append(cycle[0])
            if valid and not ready:
                r.held += 1
            for c, v in zip(COUNTERS, pulses):
                r.counts[c] += v
            if pulses[COUNTERS.index("cnp")]:
                r.cnp_qps.append(cnp_qp)
            if req_valid:
                part.extend(req_data.to_bytes(width // 8, "little")[:req_keep.bit_count()])
                if req_last:
                    r.req.append((bytes(part), req_error))
                    part.clear()

    async def sink(ctx):
        n = 0
        while True:
            ready = n >= stall_first and not (backpressure and rng.random() < backpressure)
            ctx.set(rx.ack.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(rx.ack.valid, rx.ack.payload)
            n += 1
            if valid and ready:
                r.events.append(meta_dict(payload))
                r.ev_cycles.append(n)

    async def tb(ctx):
        ctx.set(rx.local_ip, parse_ip(FPGA_IP))
        for k, (state, peer) in QPS.items():
            ctx.set(dut.table.ctl.payload, {"qp": k, "context": context(state, peer)})
            ctx.set(dut.table.ctl.valid, 1)
            await ctx.tick()
        ctx.set(dut.table.ctl.valid, 0)
        await drv.send(ctx, [Packet(d, META, err) for d, err in datagrams])
        for _ in range(100 * len(datagrams) + stall_first + 1000):
            if len(r.req) >= len(datagrams) and len(r.events) >= r.counts["acks"]:
                break
            await ctx.tick()
        for _ in range(40):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[monitor, sink, stack.run])
    assert stack.sent == stack.want
    return r


def check(r, datagrams, verdicts):
    """The counts of ``run``'s outcome ``r`` are the verdicts' (a foreign datagram counted by
    none), and every datagram left on ``req`` as its ICRC check leaves it: cut to its total
    length, the ICRC off, ``error`` when foreign or bad."""
    want = dict.fromkeys(COUNTERS, 0)
    for v in verdicts:
        if counter(v):
            want[counter(v)] += 1
    assert r.counts == want
    assert sum(r.counts.values()) == sum(v != Verdict.FOREIGN for v in verdicts)
    assert len(r.req) == len(datagrams)
    for n, ((d, _), v, (out, error)) in enumerate(zip(datagrams, verdicts, r.req)):
        kept, _ = trimmed(d)
        if v == Verdict.FOREIGN:
            assert error, f"datagram {n} is foreign, but not marked error on req: {d.hex()}"
        else:
            assert out == kept[:-4], f"datagram {n} ({v}) on req: {out.hex()}"
            if v != Verdict.SHORT:
                assert error == (v == Verdict.ICRC), f"datagram {n} ({v}): error {error}"


@pytest.mark.parametrize("width,count,reads", [(64, 260, False), full(128, 120, False),
                                               full(256, 120, False), (512, 300, False),
                                               (64, 260, True), (512, 300, True)])
def test_random_datagrams(width, count, reads):
    rng = random.Random(width)
    mtu = 576 if width == 64 or reads else 1500          # (576: datagrams of it short to send)
    cases = nics()
    kinds = itertools.cycle(FOREIGN_KINDS)
    made = [random_case(rng, cases, reads, mtu, kinds) for _ in range(count)]
    datagrams = [(d, err) for d, err, _ in made]
    want_events, want_cnps, want_seen, verdicts = [], [], [], []
    for d, err, kind in made:
        verdict, ev = classify(d, err, reads, mads=reads, mtu=mtu, width=width)
        verdicts.append(verdict)
        # (the generator made what it meant)
        if kind not in ("truncated", "flipped"):
            assert (verdict == Verdict.FOREIGN) == (kind in FOREIGN_KINDS), (kind, d.hex())
        if verdict == Verdict.REQUEST:
            want_seen.append(H.BTH.unpack(d[28:40])["dest_qp"])
        if verdict == Verdict.ACK:
            want_events.append(ev)
        elif verdict == Verdict.CNP:
            want_cnps.append(ev)
    # every verdict reached, foreign datagrams of every kind, wrong UDP checksums alone
    reached = COUNTERS if reads else [c for c in COUNTERS if c not in ("read_responses", "mads")]
    got = {c: sum(counter(v) == c for v in verdicts) for c in COUNTERS}
    assert all(got[c] for c in reached), f"some verdict never reached: {got}"
    assert {k for _, _, k in made} >= set(FOREIGN_KINDS)
    assert sum(v == Verdict.ICRC and k == "udp_bad" and not e
               and icrc_model.icrc(trimmed(d)[0][:-4]) == trimmed(d)[0][-4:]
               for (d, e, k), v in zip(made, verdicts)) >= 2
    seen = [] if reads else None
    r = run(width, datagrams, idle=0.3, backpressure=0.4, seed=width, reads=reads, seen=seen,
            mtu=mtu)
    check(r, datagrams, verdicts)
    if reads:
        assert seen == want_seen and len(seen) > 5
    assert r.events == want_events
    assert r.cnp_qps == want_cnps


def ffff_checksum_ack(rng):
    """An ACK to QP 0 whose right UDP checksum is 0xFFFF (the sum of the rest is 0xFFFF, a
    computed 0, sent as ones: RFC 768); BTH byte 4, not under the ICRC, chosen to make it so."""
    while True:
        d = bytearray(datagram(rng, bth(rng, opc.OP_RC_ACKNOWLEDGE, QPN_BASE, 9)
                               + H.AETH.pack(syndrome=0x1F, msn=4), checksum="zero"))
        d[32] = 0
        pseudo = d[12:20] + bytes([0, 17]) + (len(d) - 20).to_bytes(2, "big")
        need = 0xFFFF - ones_sum(pseudo + d[20:])       # the word BTH byte 4 must add
        if need & 0xFF == 0:
            d[32] = need >> 8
            assert udp_checksum(parse_ip(HOST_IP), parse_ip(FPGA_IP), d[20:]) == 0xFFFF
            d[26:28] = b"\xff\xff"
            return bytes(d)


def halves_ffff(dgram):
    """``dgram`` (its ICRC right) with the identification chosen so that its IPv4 header's
    first half (version to protocol) sums to 0xFFFF, and so does the second (checksum and
    addresses): a right header checksum that a compare of the halves' sums as each other's
    complement would miss."""
    d = rewrite(dgram, identification=0)
    d = rewrite(d, identification=0xFFFF - ones_sum(d[:10]))
    assert ones_sum(d[:10]) == ones_sum(d[10:20]) == 0xFFFF
    return d[:-4] + icrc_model.icrc(d[:-4])


@pytest.mark.parametrize("width", [64, 512])
def test_each_reason(width):
    """One datagram per verdict and per reason to be foreign, made on purpose, each with its
    expected verdict."""
    from scapy.layers.inet import ICMP, IP, UDP
    from scapy.packet import Raw

    rng = random.Random(1)
    cases = nics()
    mtu = 576                       # (the least: a datagram of the MTU is short to send)

    def ack(name, syndrome=0x1F, psn=5, msn=3):
        nic, qpn = cases[name]
        return ip_of(nic.ack_frame(qpn, syndrome, psn, msn=msn))

    def scapy_roce(transport, **udp):
        """A RoCEv2 datagram from us built with scapy, its UDP checksum scapy's."""
        def build(chksum, icrc):
            return bytes(IP(src=HOST_IP, dst=FPGA_IP, flags="DF")
                         / UDP(sport=0xC123, dport=4791, chksum=chksum, **udp)
                         / Raw(transport + icrc))
        # (the ICRC does not cover the UDP checksum, which covers the ICRC)
        return build(None, icrc_model.icrc(build(0, bytes(4))[:-4]))

    good = [ack("qp0", 0x1F, 0xFFFFFF, 0x123456), ack("qp1", 0x60, 7, 1), ack("qp3_other", 0x21),
            ack("pkey_7fff", 0x00, 9, 9)]
    p = ack("qp0")
    flipped = p[:-1] + bytes([p[-1] ^ 0x80])
    tos = rewrite(p, dscp=H.IPV4.unpack(p)["dscp"] ^ 5, ttl=3)
    ack_t = bth(rng, opc.OP_RC_ACKNOWLEDGE, QPN_BASE, 77) + H.AETH.pack(syndrome=0x1F, msn=1)
    cnp_t = bth(rng, opc.OP_CNP, QPN_BASE + 1) + bytes(16)
    req_t = bth(rng, 0x04, QPN_BASE) + bytes(40)
    with_ck = scapy_roce(ack_t)
    assert with_ck[26:28] != b"\0\0"
    short_req = datagram(rng, bth(rng, 0x04, QPN_BASE), checksum="zero")       # 44 bytes
    icmp = bytes(IP(src=HOST_IP, dst=FPGA_IP) / ICMP(id=0x1234, seq=1) / Raw(b"ping"))
    table = [
        (good[0], False, Verdict.ACK),
        (good[1], False, Verdict.ACK),
        (good[2], False, Verdict.ACK),
        (good[3], False, Verdict.ACK),
        (tos, False, Verdict.ACK),                         # TOS and TTL are not covered
        (halves_ffff(good[1]), False, Verdict.ACK),
        (flipped, False, Verdict.ICRC),
        (p, True, Verdict.ICRC),
        (ack("qp2"), False, Verdict.STATE),
        (ack("qp4"), False, Verdict.STATE),
        (ack("qp3"), False, Verdict.PEER),
        (ack("qp0_other"), False, Verdict.PEER),
        (ack("pkey_bad"), False, Verdict.PKEY),
        (ack("unknown"), False, Verdict.QP),
        (ack("low"), False, Verdict.QP),
        (datagram(rng, bth(rng, 0x04, QPN_BASE)), False, Verdict.REQUEST),
        (datagram(rng, bth(rng, 0x10, QPN_BASE)), False, Verdict.OPCODE),
        (datagram(rng, cnp_t), False, Verdict.CNP),
        (datagram(rng, bth(rng, opc.OP_CNP, QPN_BASE + 1) + bytes(15)), False, Verdict.SHORT),
        (datagram(rng, bth(rng, opc.OP_RC_ACKNOWLEDGE, QPN_BASE) + bytes(3)), False, Verdict.SHORT),
        (datagram(rng, bth(rng, 0x04, QPN_BASE)[:11]), False, Verdict.SHORT),
        *((datagram(rng, p[28:28 + n], icrc=False), False, Verdict.SHORT) for n in range(16)),
        # the UDP checksum: right (scapy's, or 0xFFFF for a computed 0), or wrong
        (with_ck, False, Verdict.ACK),
        (scapy_roce(cnp_t), False, Verdict.CNP),
        (scapy_roce(req_t), False, Verdict.REQUEST),
        (ffff_checksum_ack(rng), False, Verdict.ACK),
        (with_udp_checksum(rng, good[1], "good"), False, Verdict.ACK),
        (with_udp_checksum(rng, with_ck, "bad"), False, Verdict.ICRC),
        (with_ck[:26] + bytes([with_ck[26] ^ 0x40, with_ck[27]]) + with_ck[28:], False,
         Verdict.ICRC),
        (with_udp_checksum(rng, datagram(rng, cnp_t), "bad"), False, Verdict.ICRC),
        (with_udp_checksum(rng, datagram(rng, req_t), "bad"), False, Verdict.ICRC),
        (with_ck, True, Verdict.ICRC),
        (with_udp_checksum(rng, datagram(rng, ack_t[:15]), "bad"), False, Verdict.SHORT),
        # Ethernet's padding cut (zeros, or garbage that the ICRC would see)
        (ethernet(rng, short_req, zeros=True), False, Verdict.REQUEST),
        (ethernet(rng, short_req, zeros=False), False, Verdict.REQUEST),
        (ethernet(rng, with_udp_checksum(rng, short_req, "good"), zeros=False), False,
         Verdict.REQUEST),
        (ethernet(rng, datagram(rng, p[28:38], icrc=False), zeros=False), False, Verdict.SHORT),
        (p + rng.randbytes(30), False, Verdict.ACK),       # more than padding after it
        # the frame damaged: its error counts when its last beat holds the datagram's end (the
        # padding in the same beat), not when beats follow it (the ICRC judges the datagram)
        (p + rng.randbytes(30), True, Verdict.ACK),
        (p + rng.randbytes(3), True, Verdict.ICRC if width == 512 else Verdict.ACK),
        (flipped + rng.randbytes(30), True, Verdict.ICRC),
        (ethernet(rng, short_req), True, Verdict.ICRC),
        # an odd length, a UDP checksum and bytes after it (summed as if zero)
        (datagram(rng, bth(rng, 0x04, QPN_BASE) + b"\xab", checksum="good") + b"\xff", False,
         Verdict.REQUEST),
        (datagram(rng, req_t + b"\xab", checksum="good") + b"\xff" * 5, False, Verdict.REQUEST),
        (datagram(rng, req_t + b"\xab", checksum="bad") + bytes(5), False, Verdict.ICRC),
        # frames shorter than their total length: damaged
        (datagram(rng, req_t)[:-1], False, Verdict.ICRC),
        (datagram(rng, req_t)[:50], False, Verdict.ICRC),
        (p[:47], False, Verdict.SHORT),
        (ethernet(rng, p[:40], zeros=True), False, Verdict.SHORT),
        (ethernet(rng, datagram(rng, bth(rng, 0x04, QPN_BASE) + bytes(4))[:44], zeros=True),
         False, Verdict.ICRC),
        # foreign: pulses nothing, whatever its contents
        (datagram(rng, ack_t, dst=OTHER_IP), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, dst=parse_ip(FPGA_IP) ^ 1 << 31), False, Verdict.FOREIGN),
        (ethernet(rng, icmp, zeros=True), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, protocol=H.IP_PROTO_ICMP), False, Verdict.FOREIGN),
        (bytes(IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=0xC000, dport=17185)
               / Raw(ack_t + bytes(4))), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, dst_port=4790), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, bad_checksum=True), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, ihl=6), False, Verdict.FOREIGN),
        (bytes(IP(src=HOST_IP, dst=FPGA_IP, options=b"\x01\x01\x01\x00")
               / UDP(sport=0xC000, dport=4791) / Raw(ack_t + bytes(4))), False, Verdict.FOREIGN),
        (rewrite(datagram(rng, ack_t), ihl=4), False, Verdict.FOREIGN),
        (rewrite(datagram(rng, ack_t), version=6), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, mf=1), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, frag_offset=1), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, frag_offset=0x1000), False, Verdict.FOREIGN),
        (datagram(rng, req_t + bytes(mtu - 84)), False, Verdict.REQUEST),       # the MTU
        (datagram(rng, req_t + bytes(mtu - 83)), False, Verdict.FOREIGN),       # longer
        (datagram(rng, ack_t, udp_length=8 + 16 + 4 + 1), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, udp_length=8 + 16 + 4 - 1), False, Verdict.FOREIGN),
        (datagram(rng, ack_t, udp_length=20 + 8 + 16 + 4), False, Verdict.FOREIGN),
        (ethernet(rng, ipv4(rng, H.UDP.pack(dst_port=4791, length=7)[:7]), zeros=True), False,
         Verdict.FOREIGN),                                 # 27 bytes
        (ethernet(rng, ipv4(rng, b""), zeros=True), False, Verdict.FOREIGN),    # 20 bytes
        (ethernet(rng, ipv4(rng, b"", total_length=19), zeros=True), False, Verdict.FOREIGN),
        (ethernet(rng, ipv4(rng, b"", total_length=0), zeros=True), False, Verdict.FOREIGN),
        (p[:27], False, Verdict.FOREIGN),                  # a frame cut inside the UDP header
        (datagram(rng, ack_t, dst=OTHER_IP), True, Verdict.FOREIGN),
        (with_udp_checksum(rng, datagram(rng, ack_t, dst_port=4792), "bad"), False,
         Verdict.FOREIGN),
    ]
    for n, (d, err, verdict) in enumerate(table):
        assert classify(d, err, mtu=mtu, width=width)[0] == verdict, n
    datagrams = [(d, err) for d, err, _ in table]
    r = run(width, datagrams, idle=0.2, backpressure=0.3, seed=5, mtu=mtu)
    check(r, datagrams, [v for *_, v in table])
    assert r.events == [classify(d, e, width=width)[1] for d, e, v in table
                        if v == Verdict.ACK]
    assert r.events[0] == {"qp": 0, "syndrome": 0x1F, "psn": 0xFFFFFF, "msn": 0x123456}


@pytest.mark.parametrize("mtu", [full(576), full(1500), full(9000)])
def test_mtu(mtu):
    """A datagram of the MTU is delivered, one a byte longer is foreign; the UDP checksum is
    checked over the longest."""
    rng = random.Random(mtu)
    n = mtu - 20 - 8 - 12 - 4
    send = bth(rng, 0x04, QPN_BASE)
    table = [
        (datagram(rng, send + rng.randbytes(n), checksum="zero"), Verdict.REQUEST),
        (datagram(rng, send + rng.randbytes(n), checksum="good"), Verdict.REQUEST),
        (datagram(rng, send + rng.randbytes(n), checksum="bad"), Verdict.ICRC),
        (datagram(rng, send + rng.randbytes(n - 1), checksum="good"), Verdict.REQUEST),
        (datagram(rng, send + rng.randbytes(n + 1)), Verdict.FOREIGN),
        (datagram(rng, send + rng.randbytes(n + 1000)), Verdict.FOREIGN),
    ]
    if mtu > 576:
        table.append((datagram(rng, send + rng.randbytes(576 - 44)), Verdict.REQUEST))
    for d, verdict in table:
        assert classify(d, mtu=mtu, width=512)[0] == verdict
    datagrams = [(d, False) for d, _ in table]
    r = run(512, datagrams, idle=0.2, seed=7, mtu=mtu)
    check(r, datagrams, [v for _, v in table])


@pytest.mark.parametrize("width", [64, 512])
def test_read_responses(width):
    """READ responses: with ``reads``, each opcode its own verdict after the length check (a
    whole BTH for MIDDLE, BTH and AETH for the others) and the ICRC check, whatever its QP, P_Key
    or source (the READ requester's ingress checks those); without it, ``drop_opcode`` as any
    other opcode not taken."""
    rng = random.Random(3)
    aeth = H.AETH.pack(syndrome=0x1F, msn=7)
    table = []
    for op in READ_OPS:
        head = bth(rng, op, QPN_BASE) + (aeth if op != 0x0E else b"")
        table += [datagram(rng, head + rng.randbytes(k)) for k in (0, 4, 100)]
        table += [datagram(rng, bth(rng, op, QPN_BASE + NUM_QPS, pkey=0x1234) + aeth,
                           src=OTHER_IP),
                  datagram(rng, bth(rng, op, QPN_BASE + 2) + aeth)]
        d = datagram(rng, head + bytes(8))
        table += [(d[:-2] + bytes([d[-2] ^ 1, d[-1]]), False), (d, True)]
        table += [datagram(rng, bth(rng, op, QPN_BASE) + aeth[:k]) for k in range(4)]
    table = [t if isinstance(t, tuple) else (ethernet(rng, t), False) for t in table]
    for reads in (False, True):
        verdicts = [classify(d, e, reads, width=width)[0] for d, e in table]
        r = run(width, table, idle=0.2, backpressure=0.3, seed=6, reads=reads)
        check(r, table, verdicts)
        assert r.events == []
        if reads:
            assert r.counts["read_responses"] == 4 * 5 + 4 and r.counts["drop_short"] == 3 * 4
            assert r.counts["icrc_bad"] == 8
        else:
            assert r.counts["drop_opcode"] == 4 * 9 and r.counts["read_responses"] == 0


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_latency_and_backpressure(width):
    rng = random.Random(2)
    cases = nics()
    nic, qpn = cases["qp0"]
    datagrams = [(ip_of(nic.ack_frame(qpn, 0x1F, k, msn=k)), False) for k in range(24)]
    # ACKs longer than the shortest take as long
    for k, extra in enumerate((1, 7, 8, 64, 65, 200), start=24):
        datagrams.append((datagram(rng, bth(rng, opc.OP_RC_ACKNOWLEDGE, QPN_BASE, k)
                                   + H.AETH.pack(syndrome=0, msn=k) + rng.randbytes(extra),
                                   checksum="zero"), False))
    r = run(width, datagrams)
    assert [e["psn"] for e in r.events] == list(range(30))
    lat = {e - s for s, e in zip(r.last_cycles, r.ev_cycles)}
    rx = RoceRx(width, NUM_QPS)
    assert lat == {rx.ack_latency}, lat
    assert {rx.event_latency(len(d) - 28) for d, _ in datagrams} == {rx.ack_latency}
    # ack.ready held low for a long time: nothing lost, the input is held, then everything flows
    more = datagrams[:24] + [random_case(rng, cases)[:2] for _ in range(20)]
    r = run(width, more, stall_first=300)
    assert [e["psn"] for e in r.events[:24]] == list(range(24))
    assert r.held > 100
    check(r, more, [classify(d, e, width=width)[0] for d, e in more])


def test_parameters_are_validated():
    raises(ValueError, "width must be one of", lambda: RoceRx(32, 4))
    raises(TypeError, "width must be an integer", lambda: RoceRx(64.0, 4))
    raises(ValueError, r"num_qps must be 1\.\.256, not 0", lambda: RoceRx(64, 0))
    raises(ValueError, r"num_qps must be 1\.\.256, not 300", lambda: RoceRx(64, 300))
    raises(TypeError, "num_qps must be an integer", lambda: RoceRx(64, "4"))
    raises(TypeError, "reads must be a bool", lambda: RoceRx(64, 4, reads="yes"))
    raises(TypeError, "ibcm must be a bool", lambda: RoceRx(64, 4, ibcm=1))
    for mtu in (575, 9001, 0, -1500, 1500.0, True, "1500"):
        raises(ValueError, rf"IPv4 MTU must be 576\.\.9000 bytes, not {mtu!r}",
               lambda mtu=mtu: RoceRx(64, 4, mtu=mtu))
    assert {RoceRx(64, 4, mtu=mtu).mtu for mtu in (576, 9000)} == {576, 9000}
    rx = RoceRx(64, 4)
    assert rx.mtu == 1500
    raises(ValueError, rf"at least {ACK_MIN} bytes, not {ACK_MIN - 1}",
           lambda: rx.event_latency(ACK_MIN - 1))
