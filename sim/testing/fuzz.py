"""Ethernet frames for fuzzing the RoCEv2 endpoint's receive path, and a model of what its
receive path makes of any frame.

Every frame is ``bytes`` without FCS. Frame builders:

* :func:`valid_ack`: a correct ACKNOWLEDGE (good ICRC, IPv4 header checksum, lengths);
  :func:`valid_cnp`: a correct CNP.
* :func:`mutations` / :func:`mutate`: damaged and altered copies of such a frame (:data:`MUTATIONS`
  names every kind: truncations, bit flips anywhere, wrong UDP port, DestQP, source and
  destination address, P_Key, opcode, bad ICRC, trailing bytes, IPv4 options and fragments,
  802.1Q / 802.1ad tags, bad checksums and lengths...).
* :func:`scapy_fuzz`: ``scapy.packet.fuzz`` applied to some of the Ethernet, IPv4, UDP, BTH and
  AETH layers of an ACKNOWLEDGE, the BTH and AETH either as scapy layers (the ICRC is then
  computed over the fuzzed headers) or as raw bytes carrying the ICRC of the frame before
  fuzzing.
* :func:`random_frame`: random bytes of random lengths, alone or behind correct Ethernet (and
  IPv4 / UDP port 4791) headers.
* :func:`fuzz_frames`: a deterministic mix of all of them (``random.Random(seed)``; scapy's own
  random values are drawn from Python's global generator, which is seeded from it and restored).
* For the responder: :func:`valid_request`, a correct RC request (SEND, RDMA WRITE, any opcode
  with the extension headers the responder expects of it), and :func:`request_fuzz_frames`,
  hostile requests (see "Requests" below).

Model of the receive path, written from the gateware's documented checks (network stack:
:mod:`rocegen.gateware.net`, RoCE: :class:`~rocegen.gateware.roce.rx.RoceRx`):

* :func:`roce_datagram`: the IPv4 and UDP headers and UDP payload of a frame the stack hands to
  UDP port 4791 (a :class:`Datagram`), or None. The frame must be to our MAC address or
  broadcast, carry EtherType IPv4 (untagged; with ``vlan``, one 802.1Q tag of that VLAN ID), an
  IPv4 header of version 4 and IHL 5 with a correct header checksum, a total length of 20 to
  ``mtu`` bytes, no fragment bits (MF clear, offset 0), our IPv4 address as destination and
  protocol UDP; then a UDP length equal to the IPv4 total length less 20 (at least 8) and
  destination port 4791. Ethernet padding after the IPv4 total length is ignored, as are the
  IPv4 TOS, TTL, identification, DF and reserved flag bits. Port 4791 takes its datagrams
  cut-through: one whose frame ends before its IPv4 total length (at least its UDP header
  there) still arrives, *damaged* (marked ``error``), and so does one whose UDP checksum is
  neither 0 nor one that verifies.
* :func:`roce_verdict`: which of the RoCE receive counters (:data:`VERDICT_COUNTERS`) such a
  datagram increments (exactly one), in the order the endpoint checks: length, ICRC (a damaged
  datagram fails it), opcode (ACKNOWLEDGE and CNP taken), P_Key, DestQP in the QP table, QP
  state, IPv4 source.
* :func:`count_roce_candidates`: how many frames reach UDP port 4791 processing; the endpoint's
  ``roce_rx_packets`` counter and the sum of its verdict counters must both equal it.
* :func:`request_verdict`: what the responder (``RoceEndpoint(responder=True)``) makes of a
  request (the ``requests`` verdict above): dropped by its ingress as malformed (shorter than
  the extension headers of its opcode, payload and pad not a whole number of 4-byte words, or
  PadCnt more than they hold), dropped by its decision before any state is looked at (DestQP
  not in the table, QP neither RTR nor RTS, IPv4 source not the QP's peer, P_Key), or decided
  on the QP's state (``decided``: executed, duplicate, NAKed or dropped in the error state).

The safety rule of :func:`fuzz_frames`
--------------------------------------
The frames are meant to be sent to an endpoint whose QPs ``qpns`` are open with peer
``peer_ip`` without disturbing them: no frame may be taken as an acknowledgement of anything.
So no frame returned carries an ACKNOWLEDGE that the RoCE checks would let through, however
the frame is read. :func:`could_acknowledge` is the test: the frame is read as Ethernet
followed by any number of 802.1Q / 802.1ad tags, then an IPv4 header of version 4 and IHL 5
(the only kind the stack passes on) with UDP, BTH and AETH behind it; the Ethernet addresses,
the IPv4 header checksum, destination address and fragment bits, the UDP ports, length and
checksum are all *ignored*, and the datagram is taken to end either at its IPv4 total length or
at the end of the frame. For every such reading, a datagram long enough for a BTH and ICRC
whose ICRC is correct has an opcode other than ACKNOWLEDGE (0x11), or a P_Key whose low 15 bits
are not all ones, or a DestQP not in ``qpns``, or an IPv4 source other than ``peer_ip``. A
generated frame that breaks the rule (a bit flip in a field the ICRC does not cover, a
mutation that happened to name a live QP...) has its ICRC damaged, and is replaced if that is
not enough. CNPs for live QPs from the peer are allowed (they acknowledge nothing). No frame
has the connection manager's UDP port as destination (at the offset of an IPv4 header without
options, whatever else the frame holds), since a datagram there can open and close QPs.

Requests
--------
:func:`request_fuzz_frames` makes hostile requests for an endpoint with its responder while
the QPs ``good_qpns`` carry real traffic with peer ``peer_ip``: requests with every field
fuzzed (opcode among all 32 RC codes, PSN at and around the ``victim``'s expected PSN, payload
length and PadCnt, R_Key, virtual address and DMA length, AckReq, immediate) to the victim QP,
a QP open with the same peer that may be put in the error state and whose region may be
written; well-formed requests to ``closed_qpns`` (in the table, not open) and to QP numbers
beyond the table; requests to the good QPs from another IPv4 source or with another P_Key;
every mutation of :data:`MUTATIONS` applied to such requests (truncations, bit flips, bad
ICRCs...); and the acknowledgement fuzz of :func:`fuzz_frames`. The safety rule extends to
requests: no frame may be read (as :func:`could_acknowledge` reads it) as a datagram with a
correct ICRC, a request opcode, a valid P_Key, a good QP as DestQP and ``peer_ip`` as source
(:func:`could_request`), nor as an acknowledgement of a good QP or the victim.
"""

import random
from contextlib import contextmanager
from typing import NamedTuple

from rocegen.gateware.roce.endpoint.endpoint import IP_MTU
from rocegen.gateware.roce.layouts import MAX_QPS, QPN_BASE
from rocegen.gateware.roce.rx import ACK_MIN, BTH_MIN, CNP_MIN, COUNTERS
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.net.checksum import (
    data_sum,
    internet_checksum,
    pseudo_header_sum,
    udp_checksum,
)
from rocegen.sim.testing.scenarios import HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.cm import CM_PORT

__all__ = ["MUTATIONS", "VERDICT_COUNTERS", "valid_ack", "valid_cnp", "mutate", "mutations", "scapy_fuzz",
           "random_frame", "fuzz_frames", "could_acknowledge", "Datagram", "roce_datagram",
           "roce_verdict",
           "count_roce_candidates", "valid_request", "request_fuzz_frames", "could_request",
           "request_verdict", "REQUEST_VERDICTS"]

#: The endpoint's RoCE receive counters of which exactly one counts each datagram of UDP port
#: 4791, in the order of :data:`rocegen.gateware.roce.rx.COUNTERS` (the verdicts).
VERDICT_COUNTERS = tuple(f"roce_rx_{name}" for name in COUNTERS)

BROADCAST = (1 << 48) - 1
_TPIDS = (0x8100, 0x88A8)
_ICRC = icrc_model.ICRC_LEN
_IP_UDP = H.IPV4.length + H.UDP.length
# byte offsets inside the IPv4 datagram (header without options)
_BTH_AT = _IP_UDP
_AETH_AT = _BTH_AT + H.BTH.length
_DPORT_AT = H.IPV4.length + H.UDP.offset("dst_port")[0]


def _mac(value):
    return value if isinstance(value, int) else parse_mac(value)


def _ip(value):
    return value if isinstance(value, int) else parse_ip(value)


class _Frame:
    """An ACKNOWLEDGE-shaped frame as editable fields; :meth:`build` recomputes whatever was not
    fixed by hand (lengths, IHL, IPv4 header checksum, ICRC, UDP checksum when ``udp_auto``)."""

    def __init__(self, eth, ip, udp, roce, icrc=None, trailer=b""):
        self.eth = dict(eth)
        self.tags = []              # 802.1Q / 802.1ad tags: dicts of tpid, pcp, dei, vid
        self.ip = dict(ip)
        self.options = b""
        self.udp = dict(udp)
        self.roce = bytes(roce)     # BTH, extension headers, payload (no ICRC)
        self.icrc = icrc            # None: computed; else the 4 bytes sent
        self.trailer = bytes(trailer)   # after the IPv4 datagram (Ethernet padding)
        self.ip_length = None       # None: computed
        self.udp_length = None
        self.ihl = None
        self.ip_checksum = None
        self.udp_auto = False       # compute a (non-zero) UDP checksum

    @classmethod
    def parse(cls, frame):
        frame = bytes(frame)
        eth = H.ETH.unpack(frame)
        if eth["ethertype"] != H.ETHERTYPE_IPV4 or len(frame) < H.ETH.length + _IP_UDP + BTH_MIN:
            raise ValueError("not an untagged IPv4 RoCEv2 frame")
        ip = H.IPV4.unpack(frame[H.ETH.length:])
        end = H.ETH.length + ip["total_length"]
        if (ip["version"], ip["ihl"]) != (4, 5) or end > len(frame) or \
                ip["total_length"] < _IP_UDP + BTH_MIN:
            raise ValueError("the IPv4 header must be version 4 without options, its total "
                             "length within the frame")
        udp = H.UDP.unpack(frame[H.ETH.length + H.IPV4.length:])
        body = frame[H.ETH.length + _IP_UDP:end]
        return cls(eth, ip, udp, body[:-_ICRC], body[-_ICRC:], frame[end:])

    def build(self):
        ip = dict(self.ip)
        udp_len = H.UDP.length + len(self.roce) + _ICRC
        ip["total_length"] = (H.IPV4.length + len(self.options) + udp_len
                              if self.ip_length is None else self.ip_length)
        ip["ihl"] = 5 + len(self.options) // 4 if self.ihl is None else self.ihl
        ip["checksum"] = 0
        header = H.IPV4.pack(**ip) + self.options
        ip["checksum"] = (internet_checksum(header) if self.ip_checksum is None
                          else self.ip_checksum)
        header = H.IPV4.pack(**ip) + self.options
        udp = dict(self.udp, length=udp_len if self.udp_length is None else self.udp_length)
        if self.udp_auto:
            udp["checksum"] = 0
        udp_hdr = H.UDP.pack(**udp)
        icrc = self.icrc
        if icrc is None:
            icrc = icrc_model.icrc(header + udp_hdr + self.roce)
        if self.udp_auto:
            udp_hdr = H.UDP.pack(**dict(udp, checksum=udp_checksum(
                ip["src"], ip["dst"], udp_hdr + self.roce + icrc)))
        types = [t["tpid"] for t in self.tags] + [self.eth["ethertype"]]
        l2 = H.ETH.pack(**dict(self.eth, ethertype=types[0])) + b"".join(
            H.VLAN.pack(pcp=t["pcp"], dei=t["dei"], vid=t["vid"], ethertype=types[k + 1])
            for k, t in enumerate(self.tags))
        return l2 + header + udp_hdr + self.roce + icrc + self.trailer

    def bth(self):
        return H.BTH.unpack(self.roce)

    def set_bth(self, **fields):
        self.roce = H.BTH.pack(**dict(self.bth(), **fields)) + self.roce[H.BTH.length:]


def valid_ack(*, our_mac, our_ip, peer_ip, qpn, psn, msn=0, syndrome=0x1F, peer_mac=HOST_MAC,
              udp_sport=0xC000, identification=1, ttl=64, dscp=0, ecn=0, migreq=1, pkey=0xFFFF):
    """A correct ACKNOWLEDGE from ``peer_ip`` to our QP ``qpn`` (QP number, 256 and up)
    acknowledging ``psn`` with AETH ``syndrome`` and ``msn``: IPv4 DF, UDP checksum 0, good ICRC.
    62 bytes (no Ethernet padding needed). Addresses as strings or integers."""
    if not 0 <= qpn < 1 << 24 or not 0 <= psn < 1 << 24:
        raise ValueError(f"QPN and PSN are 24-bit numbers, not {qpn!r} and {psn!r}")
    f = _Frame(
        {"dst": _mac(our_mac), "src": _mac(peer_mac), "ethertype": H.ETHERTYPE_IPV4},
        {"version": 4, "dscp": dscp, "ecn": ecn, "identification": identification, "df": 1,
         "ttl": ttl, "protocol": H.IP_PROTO_UDP, "src": _ip(peer_ip), "dst": _ip(our_ip)},
        {"src_port": udp_sport, "dst_port": H.UDP_PORT_ROCEV2, "checksum": 0},
        H.BTH.pack(opcode=opc.OP_RC_ACKNOWLEDGE, m=migreq, pkey=pkey, dest_qp=qpn, psn=psn)
        + H.AETH.pack(syndrome=syndrome, msn=msn))
    return f.build()


def valid_cnp(*, our_mac, our_ip, peer_ip, qpn, peer_mac=HOST_MAC, udp_sport=0xC000,
              identification=1):
    """A correct congestion notification (CNP) from ``peer_ip`` for our QP ``qpn``: BECN set,
    PSN 0, 16 zero bytes, good ICRC."""
    if not 0 <= qpn < 1 << 24:
        raise ValueError(f"QPN is a 24-bit number, not {qpn!r}")
    f = _Frame.parse(valid_ack(our_mac=our_mac, our_ip=our_ip, peer_ip=peer_ip, qpn=qpn, psn=0,
                               peer_mac=peer_mac, udp_sport=udp_sport,
                               identification=identification))
    f.roce = H.BTH.pack(opcode=opc.OP_CNP, becn=1, pkey=0xFFFF, dest_qp=qpn) + bytes(
        H.CNP_PAYLOAD.length)
    f.icrc = None
    return f.build()


# ---------------------------------------------------------------- mutations

def _flip_bits(data, rng, count, lo=0, hi=None):
    data = bytearray(data)
    hi = len(data) if hi is None else hi
    for pos in rng.sample(range(8 * lo, 8 * hi), min(count, 8 * (hi - lo))):
        data[pos // 8] ^= 1 << (pos % 8)
    return bytes(data)


def _xor_field(frame, at, nbytes, rng):
    """``frame`` with the ``nbytes``-byte field at byte ``at`` changed to another value."""
    value = int.from_bytes(frame[at:at + nbytes], "big") ^ rng.randrange(1, 1 << 8 * nbytes)
    return frame[:at] + value.to_bytes(nbytes, "big") + frame[at + nbytes:]


def _other(rng, draw, avoid):
    while True:
        v = draw()
        if v not in avoid:
            return v


def _m_truncate(f, frame, rng, ctx):
    # cut inside a random header (or the ICRC), or anywhere
    cuts = [H.ETH.length, H.ETH.length + H.IPV4.length, H.ETH.length + _IP_UDP,
            H.ETH.length + _IP_UDP + H.BTH.length, len(frame) - len(f.trailer) - _ICRC,
            len(frame) - len(f.trailer)]
    k = rng.randrange(len(cuts))
    lo = cuts[k - 1] if k else 1
    if rng.random() < 0.3:
        lo, k = 1, len(cuts) - 1
    return frame[:rng.randrange(lo, max(lo + 1, cuts[k]))]


def _m_flip(f, frame, rng, ctx):
    return _flip_bits(frame, rng, 1)


def _m_flips(f, frame, rng, ctx):
    return _flip_bits(frame, rng, rng.randrange(2, 17))


def _m_flip_field(f, frame, rng, ctx):
    e = H.ETH.length
    regions = [(0, e), (e, e + H.IPV4.length), (e + H.IPV4.length, e + _IP_UDP),
               (e + _IP_UDP, e + _IP_UDP + H.BTH.length),
               (e + _IP_UDP + H.BTH.length, len(frame) - len(f.trailer) - _ICRC),
               (len(frame) - len(f.trailer) - _ICRC, len(frame) - len(f.trailer))]
    lo, hi = rng.choice([r for r in regions if r[1] > r[0]])
    return _flip_bits(frame, rng, rng.randrange(1, 4), lo, hi)


def _m_udp_port(f, frame, rng, ctx):
    f.udp["dst_port"] = _other(rng, lambda: rng.choice(
        [rng.getrandbits(16), H.UDP_PORT_ROCEV2 ^ (1 << rng.randrange(16)), 7, 4790, 4792]),
        {H.UDP_PORT_ROCEV2, CM_PORT})
    f.icrc = None
    return f.build()


def _m_dest_qp(f, frame, rng, ctx):
    qpn = f.bth()["dest_qp"]
    f.set_bth(dest_qp=_other(rng, lambda: rng.choice(
        [rng.getrandbits(24), QPN_BASE + rng.randrange(MAX_QPS), QPN_BASE + rng.randrange(16),
         (qpn + rng.randrange(1, 9))
         & 0xFFFFFF, (qpn - rng.randrange(1, 9)) & 0xFFFFFF, rng.randrange(QPN_BASE),
         qpn ^ (1 << rng.randrange(24))]), set(ctx["live_qpns"]) | {qpn}))
    f.icrc = None
    return f.build()


def _m_src_ip(f, frame, rng, ctx):
    f.ip["src"] = _other(rng, lambda: rng.choice(
        [rng.getrandbits(32), f.ip["src"] ^ (1 << rng.randrange(32))]),
        {f.ip["src"], ctx["peer_ip"]})
    f.icrc = None
    return f.build()


def _m_dst_ip(f, frame, rng, ctx):
    f.ip["dst"] = _other(rng, lambda: rng.choice(
        [rng.getrandbits(32), f.ip["dst"] ^ (1 << rng.randrange(32)), 0xFFFFFFFF]),
        {f.ip["dst"]})
    f.icrc = None
    return f.build()


def _m_dst_mac(f, frame, rng, ctx):
    f.eth["dst"] = _other(rng, lambda: rng.choice(
        [rng.getrandbits(48), f.eth["dst"] ^ (1 << rng.randrange(48))]),
        {f.eth["dst"], BROADCAST})
    return f.build()


def _m_broadcast(f, frame, rng, ctx):
    f.eth["dst"] = BROADCAST
    return f.build()


def _m_pkey(f, frame, rng, ctx):
    f.set_bth(pkey=_other(rng, lambda: rng.choice(
        [rng.getrandbits(16), 0xFFFF ^ (1 << rng.randrange(15)), 0, 0x8000]),
        {0x7FFF, 0xFFFF}))
    f.icrc = None
    return f.build()


#: One past the highest RC opcode of the catalogue; the ACKNOWLEDGE code under the UC transport
#: (no opcode: UC has no acknowledgements).
_RC_END = max(r.code for r in opc.ROWS if opc.transport(r.code) == opc.TRANSPORT_RC) + 1
_UC_ACKNOWLEDGE = 0b001 << 5 | opc.OP_RC_ACKNOWLEDGE


def _m_opcode(f, frame, rng, ctx):
    f.set_bth(opcode=_other(rng, lambda: rng.choice(
        [rng.getrandbits(8), rng.randrange(_RC_END), opc.OP_CNP, opc.OP_RC_ATOMIC_ACKNOWLEDGE,
         _UC_ACKNOWLEDGE]), {opc.OP_RC_ACKNOWLEDGE}))
    f.icrc = None
    return f.build()


def _m_cnp(f, frame, rng, ctx):
    f.roce = f.roce[:H.BTH.length] + bytes(H.CNP_PAYLOAD.length)
    f.set_bth(opcode=opc.OP_CNP, becn=1, psn=0, se=0, padcnt=0, ack_req=0)
    if rng.random() < 0.3:          # too short for a CNP
        f.roce = f.roce[:rng.randrange(H.BTH.length, len(f.roce))]
    f.icrc = None
    return f.build()


def _m_icrc(f, frame, rng, ctx):
    f.icrc = (int.from_bytes(f.icrc, "little") ^ rng.randrange(1, 1 << 32)).to_bytes(4, "little")
    return f.build()


def _m_trailing(f, frame, rng, ctx):
    return frame + rng.randbytes(rng.randrange(1, 65))


def _m_grow(f, frame, rng, ctx):
    # the datagram is longer (lengths and checksum follow) but the ICRC is the old one
    f.roce += rng.randbytes(rng.randrange(1, 65))
    return f.build()


def _m_shrink(f, frame, rng, ctx):
    # a shorter datagram with a correct ICRC (short for an ACK or a CNP, or no BTH at all)
    f.roce = f.roce[:rng.randrange(0, len(f.roce))]
    f.icrc = None
    return f.build()


def _m_ip_options(f, frame, rng, ctx):
    n = rng.randrange(1, 11)
    f.options = rng.choice([bytes([1]) * (4 * n), rng.randbytes(4 * n)])
    f.icrc = None if rng.random() < 0.5 else f.icrc
    return f.build()


def _m_fragment(f, frame, rng, ctx):
    kind = rng.randrange(3)
    if kind != 1:
        f.ip["mf"] = 1
    if kind != 0:
        f.ip["frag_offset"] = rng.randrange(1, 1 << 13)
    f.icrc = None
    return f.build()


def _m_vlan(f, frame, rng, ctx):
    for _ in range(rng.randrange(1, 3)):
        f.tags.append({"tpid": rng.choice(_TPIDS), "pcp": rng.getrandbits(3),
                       "dei": rng.getrandbits(1), "vid": rng.getrandbits(12)})
    return f.build()


def _m_ethertype(f, frame, rng, ctx):
    f.eth["ethertype"] = _other(rng, lambda: rng.choice(
        [rng.getrandbits(16), H.ETHERTYPE_IPV6, H.ETHERTYPE_ARP, 0x0801, 0x88CC]),
        {H.ETHERTYPE_IPV4, *_TPIDS})
    return f.build()


def _m_ip_checksum(f, frame, rng, ctx):
    return _xor_field(frame, H.ETH.length + H.IPV4.offset("checksum")[0], 2, rng)


def _m_ip_version(f, frame, rng, ctx):
    f.ip["version"] = _other(rng, lambda: rng.randrange(16), {4})
    return f.build()


def _m_ihl(f, frame, rng, ctx):
    f.ihl = rng.randrange(0, 5) if rng.random() < 0.7 else rng.randrange(6, 16)
    return f.build()


def _m_ip_length(f, frame, rng, ctx):
    length = len(frame) - len(f.trailer) - H.ETH.length
    f.ip_length = rng.choice([
        length + rng.randrange(1, 100),                 # longer than the frame: truncated
        rng.randrange(0, length),                       # shorter: lengths disagree
        rng.randrange(IP_MTU + 1, 1 << 16),             # over the MTU
    ])
    return f.build()


def _m_protocol(f, frame, rng, ctx):
    f.ip["protocol"] = _other(rng, lambda: rng.choice([rng.getrandbits(8), 1, 6, 58]),
                              {H.IP_PROTO_UDP})
    return f.build()


def _m_udp_length(f, frame, rng, ctx):
    good = len(frame) - len(f.trailer) - H.ETH.length - H.IPV4.length
    f.udp_length = _other(rng, lambda: rng.choice(
        [rng.getrandbits(16), good + rng.randrange(-8, 9), rng.randrange(8)]), {good})
    return f.build()


def _m_udp_checksum(f, frame, rng, ctx):
    f.udp_auto = True
    good = f.build()
    if rng.random() < 0.5:          # a correct non-zero checksum: still a good datagram
        return good
    return _xor_field(good, H.ETH.length + H.IPV4.length + H.UDP.offset("checksum")[0], 2, rng)


def _m_masked(f, frame, rng, ctx):
    # fields the ICRC does not cover (TOS, TTL, BTH byte 4) changed, the ICRC left as it was
    f.ip.update(dscp=rng.getrandbits(6), ecn=rng.getrandbits(2), ttl=rng.getrandbits(8))
    f.set_bth(fecn=rng.getrandbits(1), becn=rng.getrandbits(1), resv6=rng.getrandbits(6))
    return f.build()


def _m_bth_fields(f, frame, rng, ctx):
    # TVer, PadCnt, MigReq, SE, reserved bits and PSN changed with a correct ICRC
    f.set_bth(tver=rng.getrandbits(4), padcnt=rng.getrandbits(2), m=rng.getrandbits(1),
              se=rng.getrandbits(1), resv7=rng.getrandbits(7), ack_req=rng.getrandbits(1),
              psn=rng.getrandbits(24))
    f.icrc = None
    return f.build()


#: Mutation kinds of :func:`mutate`, by name.
MUTATIONS = {
    "truncate": _m_truncate, "flip": _m_flip, "flips": _m_flips, "flip_field": _m_flip_field,
    "udp_port": _m_udp_port, "dest_qp": _m_dest_qp, "src_ip": _m_src_ip, "dst_ip": _m_dst_ip,
    "dst_mac": _m_dst_mac, "broadcast": _m_broadcast, "pkey": _m_pkey, "opcode": _m_opcode,
    "cnp": _m_cnp, "icrc": _m_icrc, "trailing": _m_trailing, "grow": _m_grow,
    "shrink": _m_shrink, "ip_options": _m_ip_options, "fragment": _m_fragment,
    "vlan": _m_vlan, "ethertype": _m_ethertype, "ip_checksum": _m_ip_checksum,
    "ip_version": _m_ip_version, "ihl": _m_ihl, "ip_length": _m_ip_length,
    "protocol": _m_protocol, "udp_length": _m_udp_length, "udp_checksum": _m_udp_checksum,
    "masked": _m_masked, "bth_fields": _m_bth_fields,
}


def mutate(frame, rng, kind, *, live_qpns=(), peer_ip=None):
    """One mutation ``kind`` (a key of :data:`MUTATIONS`) of ``frame``, an untagged IPv4
    RoCEv2 frame such as :func:`valid_ack` makes. ``dest_qp`` avoids ``live_qpns`` and
    ``src_ip`` avoids ``peer_ip``; other kinds may leave an acceptable ACKNOWLEDGE (``masked``,
    ``broadcast``, ``trailing``, a correct ``udp_checksum``, ``bth_fields``...):
    :func:`fuzz_frames` applies the safety rule, this function does not."""
    if kind not in MUTATIONS:
        raise ValueError(f"unknown mutation {kind!r}; one of {', '.join(MUTATIONS)}")
    frame = bytes(frame)
    ctx = {"live_qpns": tuple(live_qpns),
           "peer_ip": None if peer_ip is None else _ip(peer_ip)}
    return MUTATIONS[kind](_Frame.parse(frame), frame, rng, ctx)


def mutations(frame, rng, *, live_qpns=(), peer_ip=None):
    """One mutated copy of ``frame`` for each kind of :data:`MUTATIONS`, in that order (see
    :func:`mutate`)."""
    return [mutate(frame, rng, kind, live_qpns=live_qpns, peer_ip=peer_ip) for kind in MUTATIONS]


# ---------------------------------------------------------------- scapy and random frames

@contextmanager
def _scapy_random(rng):
    """scapy's volatile values use Python's global generator: seed it from ``rng``, then put
    its state back."""
    state = random.getstate()
    random.seed(rng.getrandbits(64))
    try:
        yield
    finally:
        random.setstate(state)


def scapy_fuzz(rng, *, our_mac, our_ip, peer_ip, qpn, psn, peer_mac=HOST_MAC, layers=None):
    """An ACKNOWLEDGE to ``qpn`` built with scapy, ``scapy.packet.fuzz`` applied to ``layers``
    (a subset of ``"eth"``, ``"ip"``, ``"udp"``, ``"bth"``, ``"aeth"``; default a random
    non-empty one). With probability 1/2 the BTH and AETH are scapy layers (the ICRC is computed
    over the fuzzed headers); otherwise they are raw bytes ending with the ICRC of the frame
    before fuzzing."""
    from scapy.contrib.roce import AETH, BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw, fuzz
    from scapy.volatile import VolatileValue

    names = ("eth", "ip", "udp", "bth", "aeth")
    if layers is None:
        layers = [n for n in names if rng.random() < 0.4] or [rng.choice(names)]
    unknown = set(layers) - set(names)
    if unknown:
        raise ValueError(f"unknown layer(s) {sorted(unknown)}; of {', '.join(names)}")

    def mac(v):
        return ":".join(f"{b:02x}" for b in _mac(v).to_bytes(6, "big"))

    def ip(v):
        return ".".join(str(b) for b in _ip(v).to_bytes(4, "big"))

    def frozen(p):
        # draw every random value once, so that the ICRC is computed over the bytes sent
        p = fuzz(p)
        for k, v in list(p.default_fields.items()):
            if isinstance(v, VolatileValue):
                p.default_fields[k] = v._fix()
        return p

    with _scapy_random(rng):
        sport = rng.randrange(0xC000, 0x10000)
        parts = {
            "eth": Ether(dst=mac(our_mac), src=mac(peer_mac)),
            "ip": IP(src=ip(peer_ip), dst=ip(our_ip), flags="DF"),
            "udp": UDP(sport=sport, dport=H.UDP_PORT_ROCEV2, chksum=0),
            "bth": BTH(opcode=opc.OP_RC_ACKNOWLEDGE, migreq=1, pkey=0xFFFF, dqpn=qpn, psn=psn),
            "aeth": AETH(syndrome=0x1F, msn=rng.getrandbits(24)),
        }
        scapy_roce = rng.random() < 0.5
        if not scapy_roce:
            plain = valid_ack(our_mac=our_mac, our_ip=our_ip, peer_ip=peer_ip, qpn=qpn, psn=psn,
                              msn=parts["aeth"].msn, peer_mac=peer_mac, udp_sport=sport)
            roce = plain[H.ETH.length + _IP_UDP:]
        for name in layers:
            parts[name] = frozen(parts[name])
        if not scapy_roce:
            raw = bytearray(roce)
            if "bth" in layers:
                bth = parts["bth"].copy()
                bth.icrc = 0            # alone, the layer has no headers to compute it over
                raw[:H.BTH.length] = bytes(bth)[:H.BTH.length]
            if "aeth" in layers:
                raw[H.BTH.length:H.BTH.length + H.AETH.length] = bytes(parts["aeth"])
            pkt = parts["eth"] / parts["ip"] / parts["udp"] / Raw(bytes(raw))
        else:
            pkt = parts["eth"] / parts["ip"] / parts["udp"] / parts["bth"] / parts["aeth"]
        return bytes(pkt)


def random_frame(rng, *, our_mac, our_ip, peer_ip, peer_mac=HOST_MAC):
    """Random bytes: a whole frame of 1 to 200 random bytes, or random bytes behind a correct
    Ethernet header to us (EtherType IPv4), or a random UDP payload of 0 to 80 bytes to port
    4791 behind correct Ethernet, IPv4 and UDP headers."""
    kind = rng.randrange(3)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 201))
    eth = H.ETH.pack(dst=_mac(our_mac), src=_mac(peer_mac), ethertype=H.ETHERTYPE_IPV4)
    if kind == 1:
        return eth + rng.randbytes(rng.randrange(0, 120))
    payload = rng.randbytes(rng.randrange(0, 81))
    ip = dict(version=4, ihl=5, total_length=_IP_UDP + len(payload), identification=1, df=1,
              ttl=64, protocol=H.IP_PROTO_UDP, src=_ip(peer_ip), dst=_ip(our_ip))
    ip = H.IPV4.pack(**ip, checksum=internet_checksum(H.IPV4.pack(**ip)))
    udp = H.UDP.pack(src_port=rng.randrange(0xC000, 0x10000), dst_port=H.UDP_PORT_ROCEV2,
                     length=H.UDP.length + len(payload))
    return eth + ip + udp + payload


# ---------------------------------------------------------------- the mix, and the safety rule

def _ipv4_at(frame):
    """Offset of the IPv4 header of ``frame`` after any VLAN tags, or None."""
    off = 12
    while len(frame) >= off + 2 and int.from_bytes(frame[off:off + 2], "big") in _TPIDS:
        off += 4
    if len(frame) < off + 2 or int.from_bytes(frame[off:off + 2], "big") != H.ETHERTYPE_IPV4:
        return None
    return off + 2


def could_acknowledge(frame, *, peer_ip, qpns):
    """True when some reading of ``frame`` (see the safety rule in the module documentation)
    is an ACKNOWLEDGE with a correct ICRC and a valid P_Key, to a QP in ``qpns`` (QP numbers),
    from ``peer_ip``."""
    return _could_pass(frame, peer_ip, qpns, lambda op: op == opc.OP_RC_ACKNOWLEDGE)


def could_request(frame, *, peer_ip, qpns):
    """True when some reading of ``frame`` (as :func:`could_acknowledge` reads it) is a request
    (:func:`~rocegen.wire.opcodes.is_request`) with a correct ICRC and a valid P_Key, to a
    QP in ``qpns``, from ``peer_ip``."""
    return _could_pass(frame, peer_ip, qpns, opc.is_request)


def _could_pass(frame, peer_ip, qpns, opcode_ok):
    frame = bytes(frame)
    off = _ipv4_at(frame)
    if off is None or len(frame) < off + _IP_UDP + BTH_MIN:
        return False
    ip = H.IPV4.unpack(frame[off:])
    if (ip["version"], ip["ihl"]) != (4, 5) or ip["src"] != _ip(peer_ip):
        return False
    bth = H.BTH.unpack(frame[off + _BTH_AT:])
    if not opcode_ok(bth["opcode"]) or bth["pkey"] & 0x7FFF != 0x7FFF or \
            bth["dest_qp"] not in set(qpns):
        return False
    for end in {ip["total_length"], len(frame) - off}:
        dg = frame[off:off + end]
        if _IP_UDP + BTH_MIN <= end == len(dg) and \
                icrc_model.icrc(dg[:-_ICRC]) == dg[-_ICRC:]:
            return True
    return False


def _to_cm_port(frame):
    off = _ipv4_at(frame)
    return off is not None and frame[off + _DPORT_AT:off + _DPORT_AT + 2] == \
        CM_PORT.to_bytes(2, "big")


def _psns(psn_range):
    if isinstance(psn_range, range):
        if not psn_range:
            raise ValueError("psn_range is empty")
        return psn_range
    lo, hi = psn_range
    if not 0 <= lo < hi <= 1 << 24:
        raise ValueError(f"psn_range must be (lo, hi) with 0 <= lo < hi <= 2^24, not {psn_range}")
    return range(lo, hi)


def fuzz_frames(n, seed, *, our_mac, our_ip, peer_ip, qpns, psn_range, peer_mac=HOST_MAC):
    """``n`` frames for the endpoint at ``our_mac`` / ``our_ip`` whose QPs ``qpns`` (QP numbers)
    are open with peer ``peer_ip``, made from ACKNOWLEDGEs to those QPs acknowledging PSNs in
    ``psn_range`` (a ``range`` or ``(lo, hi)``, modulo 2^24): about 65 % mutations (every kind of
    :data:`MUTATIONS`, one or two at a time), 20 % :func:`scapy_fuzz`, 15 %
    :func:`random_frame`. The same arguments always give the same frames. Every frame obeys
    the safety rule of the module documentation."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, not {n!r}")
    qpns = tuple(qpns)
    if not qpns or not all(isinstance(q, int) and 0 <= q < 1 << 24 for q in qpns):
        raise ValueError(f"qpns must be a non-empty list of 24-bit QP numbers, not {qpns!r}")
    psns = _psns(psn_range)
    rng = random.Random(seed)
    kinds = list(MUTATIONS)
    addr = {"our_mac": our_mac, "our_ip": our_ip, "peer_ip": peer_ip, "peer_mac": peer_mac}
    out = []
    while len(out) < n:
        qpn = rng.choice(qpns)
        psn = rng.choice(psns) & 0xFFFFFF
        r = rng.random()
        if r < 0.65:
            frame = valid_ack(qpn=qpn, psn=psn, msn=rng.getrandbits(24), syndrome=rng.choice(
                [0x1F, rng.randrange(0x20), 0x20 | rng.randrange(32), 0x60 | rng.randrange(5),
                 rng.getrandbits(8)]), udp_sport=rng.randrange(0xC000, 0x10000),
                identification=rng.getrandbits(16), **addr)
            for _ in range(1 + (rng.random() < 0.2)):
                try:
                    frame = mutate(frame, rng, rng.choice(kinds), live_qpns=qpns,
                                   peer_ip=peer_ip)
                except ValueError:      # the first mutation left no frame to mutate again
                    break
        elif r < 0.85:
            frame = scapy_fuzz(rng, qpn=qpn, psn=psn, **addr)
        else:
            frame = random_frame(rng, **addr)
        if not frame or _to_cm_port(frame):
            continue
        if could_acknowledge(frame, peer_ip=peer_ip, qpns=qpns):
            frame = _damage_icrc(frame, rng)
            if could_acknowledge(frame, peer_ip=peer_ip, qpns=qpns):
                continue
        out.append(frame)
    return out


def _damage_icrc(frame, rng):
    """``frame`` with a bit of the ICRC of each reading flipped."""
    frame = bytearray(frame)
    off = _ipv4_at(frame)
    length = int.from_bytes(frame[off + 2:off + 4], "big")
    bit = 1 << rng.randrange(8)
    frame[-1] ^= bit
    if off + length < len(frame):
        frame[off + length - 1] ^= bit
    return bytes(frame)


# ---------------------------------------------------------------- the receive path's model

class Datagram(NamedTuple):
    """What the network stack hands to UDP port 4791 (:func:`roce_datagram`)."""
    #: the IPv4 header's fields
    ip: dict
    #: the UDP header's fields
    udp: dict
    #: the UDP payload as it arrives (a damaged one: what the frame holds of it)
    payload: bytes
    #: the frame ends before the IPv4 total length, or the UDP checksum is wrong: port 4791
    #: takes datagrams cut-through, so such a datagram arrives marked ``error`` and RoCE drops
    #: it
    damaged: bool


def roce_datagram(frame, our_mac, our_ip, *, vlan=None, mtu=IP_MTU):
    """The :class:`Datagram` of a frame the network stack delivers to UDP port 4791, or None
    (the rules are in the module documentation). ``vlan`` and ``mtu`` are the stack's
    parameters (the endpoint's defaults: untagged,
    :data:`~rocegen.gateware.roce.endpoint.endpoint.IP_MTU`)."""
    frame = bytes(frame)
    hlen = H.ETH.length if vlan is None else H.ETH_VLAN.length
    if len(frame) < hlen:
        return None
    if vlan is None:
        eth = H.ETH.unpack(frame)
        if eth["ethertype"] != H.ETHERTYPE_IPV4:
            return None
    else:
        eth = H.ETH_VLAN.unpack(frame)
        if (eth["tpid"], eth["vid"], eth["ethertype"]) != (H.ETHERTYPE_VLAN, vlan,
                                                           H.ETHERTYPE_IPV4):
            return None
    if eth["dst"] not in (_mac(our_mac), BROADCAST):
        return None
    body = frame[hlen:]
    if len(body) < H.IPV4.length:
        return None
    ip = H.IPV4.unpack(body)
    total = ip["total_length"]
    if (ip["version"], ip["ihl"]) != (4, 5) or data_sum(body[:H.IPV4.length]) != 0xFFFF or \
            not H.IPV4.length <= total <= mtu or ip["mf"] or ip["frag_offset"] or \
            ip["dst"] != _ip(our_ip) or ip["protocol"] != H.IP_PROTO_UDP:
        return None
    damaged = total > len(body)
    dgram = body[H.IPV4.length:total]
    if len(dgram) < H.UDP.length:
        return None
    udp = H.UDP.unpack(dgram)
    if udp["length"] != total - H.IPV4.length or udp["dst_port"] != H.UDP_PORT_ROCEV2:
        return None
    wrong = udp["checksum"] != 0 and data_sum(dgram, _pseudo_sum(ip, len(dgram))) != 0xFFFF
    return Datagram(ip, udp, dgram[H.UDP.length:], damaged or wrong)


def _pseudo_sum(ip, length):
    return pseudo_header_sum(ip["src"], ip["dst"], H.IP_PROTO_UDP, length)


def roce_verdict(frame, *, our_mac, our_ip, peers, num_qps, vlan=None, mtu=IP_MTU,
                 reads=False):
    """The RoCE receive counter (one of :data:`VERDICT_COUNTERS`) that ``frame`` increments, or
    None when it does not reach UDP port 4791. ``peers`` maps the QP number of every QP in the
    RTR or RTS state to its peer's IPv4 address; ``num_qps`` is the size of the QP table (QP
    numbers 256 .. 256 + num_qps - 1); ``reads``: the endpoint has the READ requester (READ
    responses are handed on to it, not dropped for their opcode)."""
    got = roce_datagram(frame, our_mac, our_ip, vlan=vlan, mtu=mtu)
    if got is None:
        return None
    return "roce_rx_" + _verdict(got, {q: _ip(p) for q, p in peers.items()}, num_qps, reads)


def _verdict(got, peers, num_qps, reads=False):
    ip, payload = got.ip, got.payload
    n = len(payload)
    if n < BTH_MIN:
        return "drop_short"
    bth = H.BTH.unpack(payload)
    op = bth["opcode"]
    read_resp = reads and op in opc.READ_RESPONSES
    aeth = opc.has_aeth(op) and (op == opc.OP_RC_ACKNOWLEDGE or read_resp)
    if (aeth and n < ACK_MIN) or (op == opc.OP_CNP and n < CNP_MIN):
        return "drop_short"
    if got.damaged:
        return "icrc_bad"
    covered = H.IPV4.pack(**ip) + H.UDP.pack(**got.udp) + payload[:-_ICRC]
    if icrc_model.icrc(covered) != payload[-_ICRC:]:
        return "icrc_bad"
    if opc.is_request(op):
        return "requests"
    if read_resp:
        return "read_responses"
    if op not in (opc.OP_RC_ACKNOWLEDGE, opc.OP_CNP):
        return "drop_opcode"
    if bth["pkey"] & 0x7FFF != 0x7FFF:
        return "drop_pkey"
    if not QPN_BASE <= bth["dest_qp"] < QPN_BASE + num_qps:
        return "drop_qp"
    if bth["dest_qp"] not in peers:
        return "drop_state"
    if ip["src"] != peers[bth["dest_qp"]]:
        return "drop_peer"
    return "acks" if op == opc.OP_RC_ACKNOWLEDGE else "cnp"


def count_roce_candidates(frames, our_mac, our_ip, *, vlan=None, mtu=IP_MTU):
    """How many of ``frames`` the network stack delivers to UDP port 4791 (see
    :func:`roce_datagram`): each must be counted once by ``roce_rx_packets`` and by exactly one
    of :data:`VERDICT_COUNTERS`."""
    return sum(roce_datagram(f, our_mac, our_ip, vlan=vlan, mtu=mtu) is not None
               for f in frames)


# ---------------------------------------------------------------- requests (the responder)

def _ext_length(opcode, atomics=False):
    """Bytes of the extension headers the responder expects after the BTH of ``opcode``: a RETH
    on WRITE FIRST / ONLY (with immediate too) and READ, an ImmDt on the *_WITH_IMMEDIATE and,
    in a responder built with ``atomics``, an AtomicETH on FETCH_ADD and COMPARE_SWAP (without
    them it reads an atomic's as payload, and refuses the request)."""
    row = opc.BY_CODE.get(opcode)
    return (H.RETH.length * opc.has_reth(opcode) + H.IMMDT.length * opc.has_imm(opcode)
            + (H.ATOMIC_ETH.length if atomics and row is not None and row.has_atomic_eth else 0))


def valid_request(*, our_mac, our_ip, peer_ip, qpn, psn, opcode, payload=b"", va=0, rkey=0,
                  dma_len=None, imm=0, ack_req=1, peer_mac=HOST_MAC, udp_sport=0xC000,
                  identification=1, pkey=0xFFFF, padcnt=None):
    """A correct RC request from ``peer_ip`` to our QP ``qpn`` with PSN ``psn``: BTH ``opcode``
    (any RC code), the extension headers the responder expects of it (RETH ``va``, ``rkey``,
    ``dma_len``, default the payload's length; ImmDt ``imm``), ``payload`` and its pad to 4
    bytes (``padcnt`` given: that PadCnt and as many zero bytes), IPv4 DF, UDP checksum 0, a
    good ICRC, padded to 60 bytes."""
    if opcode not in range(1 << 8) or opc.transport(opcode) != opc.TRANSPORT_RC:
        raise ValueError(f"opcode must be an RC code 0x00..0x1f, not {opcode!r}")
    payload = bytes(payload)
    pad = -len(payload) % 4 if padcnt is None else padcnt
    ext = _ext_length(opcode)
    body = b""
    if ext >= H.RETH.length:
        body += H.RETH.pack(va=va, rkey=rkey, dma_len=len(payload) if dma_len is None
                            else dma_len)
    if ext % H.RETH.length:
        body += H.IMMDT.pack(imm=imm)
    f = _Frame.parse(valid_ack(our_mac=our_mac, our_ip=our_ip, peer_ip=peer_ip, qpn=qpn,
                               psn=psn, peer_mac=peer_mac, udp_sport=udp_sport,
                               identification=identification))
    f.roce = H.BTH.pack(opcode=opcode, m=1, padcnt=pad, pkey=pkey, dest_qp=qpn,
                        ack_req=ack_req, psn=psn & 0xFFFFFF) + body + payload + bytes(pad)
    f.icrc = None
    frame = f.build()
    return frame + bytes(max(0, 60 - len(frame)))


def _plausible_request(rng, qpn, psn, pmtu, rkey, region, addr):
    """A single-packet SEND or WRITE (with or without immediate) to ``qpn`` at PSN ``psn``
    that the QP executes unless something before it went wrong: a payload of up to a PMTU,
    R_Key ``rkey``, inside ``region``."""
    op = rng.choice([opc.OP_RC_SEND_ONLY, opc.OP_RC_SEND_ONLY_WITH_IMMEDIATE, opc.OP_RC_RDMA_WRITE_ONLY,
                     opc.OP_RC_RDMA_WRITE_ONLY, opc.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE])
    n = rng.randrange(0, min(pmtu, 256) + 1)
    base, length = region
    return valid_request(qpn=qpn, psn=psn & 0xFFFFFF, opcode=op, payload=rng.randbytes(n),
                         va=base + rng.randrange(0, length - n + 1), rkey=rkey,
                         imm=rng.getrandbits(32), ack_req=rng.getrandbits(1),
                         udp_sport=rng.randrange(0xC000, 0x10000),
                         identification=rng.getrandbits(16), **addr)


#: How many BTH opcodes the RC transport has (its bits 4:0); one past the highest SEND or RDMA
#: WRITE opcode (they are the codes from 0 up).
_RC_CODES = 1 << 5
_SEND_WRITE_END = max(opc.codes(verb=opc.Verb.SEND, supported=True)
                      + opc.codes(verb=opc.Verb.RDMA_WRITE, supported=True)) + 1


def _hostile_request(rng, qpn, psn, pmtu, rkey, region, addr):
    """A request to ``qpn`` with every field drawn: any RC opcode (mostly SEND and WRITE), a
    PSN at or near ``psn``, a payload length around the PMTU, a PadCnt, R_Key ``rkey`` or
    another, an address inside ``region`` (base, length), across its end or anywhere."""
    op = rng.choice([rng.randrange(_RC_CODES), rng.randrange(_SEND_WRITE_END),
                     rng.randrange(_SEND_WRITE_END),
                     opc.OP_RC_SEND_ONLY, opc.OP_RC_RDMA_WRITE_ONLY, opc.OP_RC_RDMA_WRITE_FIRST])
    psn = (psn + rng.choice([0, 0, 0, 1, 2, -1, -2, rng.randrange(-64, 64),
                             rng.getrandbits(24)])) & 0xFFFFFF
    n = rng.choice([0, 1, 4, pmtu, pmtu - 4, pmtu + 4, rng.randrange(0, 2 * pmtu),
                    rng.randrange(0, 65)])
    n = min(n, 4096 + 16)
    base, length = region
    va = rng.choice([base + rng.randrange(0, max(1, length)),
                     base + length - rng.randrange(0, 2 * pmtu + 1), base, rng.getrandbits(64),
                     rng.getrandbits(32)])
    dma = rng.choice([n, n + rng.randrange(1, 3 * pmtu), rng.getrandbits(32), 0,
                      base + length - va if base + length > va else n])
    return valid_request(
        qpn=qpn, psn=psn, opcode=op, payload=rng.randbytes(n), va=va & ((1 << 64) - 1),
        rkey=rkey if rng.random() < 0.6 else rng.getrandbits(32), dma_len=dma & 0xFFFFFFFF,
        imm=rng.getrandbits(32), ack_req=rng.getrandbits(1),
        padcnt=rng.randrange(4) if rng.random() < 0.15 else None,
        udp_sport=rng.randrange(0xC000, 0x10000), identification=rng.getrandbits(16), **addr)


def request_fuzz_frames(n, seed, *, our_mac, our_ip, peer_ip, good_qpns, victim, closed_qpns,
                        num_qps, pmtu, peer_mac=HOST_MAC):
    """``n`` hostile frames for an endpoint with its responder (see "Requests" in the module
    documentation). ``victim``: dict of the victim QP's ``qpn``, expected ``psn``, ``rkey`` and
    ``region`` (base, length); ``closed_qpns``: QPs of the table that are not open;
    ``num_qps``: the table's size. About 30 % requests to the victim (half of them
    single-packet SENDs and WRITEs at the PSNs that follow ``psn``, which it executes until
    the other half, every field fuzzed, puts it in the error state), 15 % well-formed
    requests to closed QPs and QP numbers beyond the table, 10 % requests to the good QPs from
    another source or with another P_Key, 30 % mutated requests and 15 % acknowledgement fuzz.
    The same arguments always give the same frames."""
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, not {n!r}")
    good = tuple(good_qpns)
    if not good or victim["qpn"] in good:
        raise ValueError("good_qpns must be a non-empty list without the victim's QP")
    live = good + (victim["qpn"],)
    rng = random.Random(seed)
    addr = {"our_mac": our_mac, "our_ip": our_ip, "peer_ip": peer_ip, "peer_mac": peer_mac}
    beyond = [QPN_BASE + num_qps + rng.randrange(MAX_QPS), rng.randrange(QPN_BASE),
              rng.getrandbits(24)]
    acks = iter(fuzz_frames(n // 6 + 1, rng.getrandbits(32), qpns=live,
                            psn_range=(0, 1 << 24), **addr))
    out = []
    vnext = victim["psn"]
    while len(out) < n:
        r = rng.random()
        vq, vpsn = victim["qpn"], victim["psn"]
        if r < 0.15:
            frame = _plausible_request(rng, vq, vnext, pmtu, victim["rkey"], victim["region"],
                                       addr)
            vnext += 1
        elif r < 0.30:
            frame = _hostile_request(rng, vq, vnext if rng.random() < 0.5 else vpsn, pmtu,
                                     victim["rkey"], victim["region"], addr)
        elif r < 0.45:
            qpn = rng.choice(list(closed_qpns) + beyond) if closed_qpns else rng.choice(beyond)
            frame = _hostile_request(rng, qpn, rng.getrandbits(24), pmtu, rng.getrandbits(32),
                                     victim["region"], addr)
        elif r < 0.55:
            f = _Frame.parse(_hostile_request(rng, rng.choice(good), rng.getrandbits(24), pmtu,
                                              rng.getrandbits(32), victim["region"], addr))
            if rng.random() < 0.5:
                f.ip["src"] = _other(rng, lambda: rng.getrandbits(32), {_ip(peer_ip)})
            else:
                f.set_bth(pkey=_other(rng, lambda: rng.getrandbits(16), {0x7FFF, 0xFFFF}))
            f.icrc = None
            frame = f.build()
        elif r < 0.85:
            qpn = rng.choice(live + tuple(closed_qpns))
            frame = _hostile_request(rng, qpn, vpsn if qpn == vq else rng.getrandbits(24), pmtu,
                                     victim["rkey"], victim["region"], addr)
            try:
                frame = mutate(frame[:_frame_end(frame)], rng, rng.choice(list(MUTATIONS)),
                               live_qpns=live, peer_ip=peer_ip)
            except ValueError:
                continue
        else:
            frame = next(acks, None)
            if frame is None:
                continue
        if not frame or _to_cm_port(frame):
            continue
        for _ in range(2):
            if could_request(frame, peer_ip=peer_ip, qpns=good) or \
                    could_acknowledge(frame, peer_ip=peer_ip, qpns=live):
                frame = _damage_icrc(frame, rng)
            else:
                out.append(frame)
                break
    return out


def _frame_end(frame):
    """The length of an untagged IPv4 frame without its Ethernet padding."""
    return H.ETH.length + int.from_bytes(frame[H.ETH.length + 2:H.ETH.length + 4], "big")


#: What :func:`request_verdict` says of a request, and the endpoint counters it names.
REQUEST_VERDICTS = {"malformed": "resp_malformed", "drop_qp": "resp_drop_qp",
                    "drop_state": "resp_drop_state", "drop_peer": "resp_drop_peer",
                    "drop_pkey": "resp_drop_pkey", "decided": None}


def request_verdict(frame, *, our_mac, our_ip, peers, num_qps, vlan=None, mtu=IP_MTU,
                    atomics=False):
    """What the responder makes of ``frame`` (a key of :data:`REQUEST_VERDICTS`), or None when
    it is not a request reaching it (:func:`roce_verdict` is not ``roce_rx_requests``).
    ``peers`` and ``num_qps`` as for :func:`roce_verdict`; ``atomics``: the responder was built
    with atomics (an atomic's AtomicETH is a header, its absence makes the request malformed)."""
    peers = {q: _ip(p) for q, p in peers.items()}
    got = roce_datagram(frame, our_mac, our_ip, vlan=vlan, mtu=mtu)
    if got is None:
        return None
    if _verdict(got, peers, num_qps) != "requests":
        return None
    ip, payload = got.ip, got.payload
    bth = H.BTH.unpack(payload)
    body = len(payload) - H.BTH.length - _ext_length(bth["opcode"], atomics) - _ICRC
    if body < 0 or body % 4 or bth["padcnt"] > body:
        return "malformed"
    qpn = bth["dest_qp"]
    if not QPN_BASE <= qpn < QPN_BASE + num_qps:
        return "drop_qp"
    if qpn not in peers:
        return "drop_state"
    if ip["src"] != peers[qpn]:
        return "drop_peer"
    if bth["pkey"] & 0x7FFF != 0x7FFF:
        return "drop_pkey"
    return "decided"
