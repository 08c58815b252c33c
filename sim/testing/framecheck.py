"""An independent check of every frame the endpoint sends: rebuilt by scapy and compared byte for
byte, and connection-manager replies checked against an encoding written here with ``struct``.

Nothing here uses the project's own header table, ICRC model or connection-manager model: the
layouts come from the shared wire and connection-manager specifications, the RoCE layers from
``scapy.contrib.roce`` (BTH, AETH, the CNP's padding; BTH computes the ICRC in its
``post_build``) plus RETH, ImmDt, AtomicETH and AtomicAckETH written below as scapy layers
(``scapy.contrib.roce`` has none), and every length, checksum and ICRC is computed again by
scapy.

:class:`FrameChecker` is used in two places of a testbench's frame path:

* :meth:`FrameChecker.check` for every frame the endpoint sends. The frame is dissected by scapy,
  the computed fields are dropped (IPv4 total length and header checksum, UDP length and
  checksum unless it is 0, the ICRC), the extension headers are rebuilt as scapy layers from
  the dissected fields, and scapy builds the frame again from what is left. The result must be
  the frame, byte for byte; a difference raises :class:`FrameCheckError` with the first
  differing byte and a field-by-field list of what differs. Beyond the bytes, RoCE frames must
  follow the spec's fixed rules (IPv4 version 4, IHL 5, DF, protocol 17, TTL not 0, UDP source
  port 0xC000..0xFFFF, TVer 0, reserved bits 0, P_Key 0xFFFF, the extension headers of their
  opcode, PadCnt zero bytes of pad making the payload a multiple of 4, no pad on a packet that
  is not the last of a message, no payload on ACKNOWLEDGE, CNP, the atomics and their
  acknowledgement), and Ethernet padding may
  only fill a short frame to 60 bytes, with zeros.
* :meth:`FrameChecker.request` for every frame sent to the endpoint: connection-manager requests
  (UDP to port 17185, 64 bytes) are remembered, so that each reply (from UDP port 0x8765) can be
  compared with the reply the specification asks for, encoded here with ``struct``: byte 0 with
  ``info_valid``, the request's ``req_type``, ``ack_valid``, a known ``ack_type``; ``loc_*`` the
  endpoint's values (``loc_ip`` its IPv4 source, ``loc_qpn`` from 256 on an OPEN_QP ACK and the
  QP named by the request otherwise, ``loc_psn`` the host's PSN on OPEN_QP, R_Key and address
  zero: the endpoint offers no memory region); ``rem_*`` echo the request's ``loc_*``;
  ``listening_port`` echoed and the reply sent to it (to the request's source port when 0); the
  extension bytes (1, 5, 25, 29) and the test-traffic bytes 51..63 zero, as the original tools
  expect (but the atomics' capability, byte 51 bits 6-5 of an ACK of OPEN_QP, SEND_QP_INFO
  or MODIFY_QP_RTS: 1 or 2); a UDP checksum that is not 0.

:attr:`FrameChecker.counts` counts the frames checked by kind (``roce``, ``cm_reply``, ``udp``,
``arp``, ``icmp``, ``other``) and ``frames`` in all; :meth:`FrameChecker.summary` says it in one
line. Scapy needs about 3 ms a frame on the project's machines (:attr:`FrameChecker.seconds`);
the testbenches run the checker in a worker process beside the simulator
(:mod:`rocegen.sim.testing.framecheck_pool`) so that this time is not spent inside it.
"""

import struct
import time
from collections import Counter

from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.fields import ByteField, IntField, X3BytesField, XIntField, XLongField
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Padding, Raw

from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

__all__ = ["FrameCheckError", "FrameChecker", "RETH", "ImmDt", "AtomicETH", "AtomicAckETH", "DETH",
           "roce_layers", "CM_PORT",
           "CM_REPLY_PORT", "cm_decode", "cm_encode"]

ROCE_PORT = 4791
CM_PORT = 17185
CM_REPLY_PORT = 0x8765
MIN_FRAME = 60                  # Ethernet minimum without the FCS
#: the communication manager's datagrams (IBTA Vol. 1, chapters 13 and 16): UD SEND_ONLY to and
#: from QP1, the well-known Q_Key, a 256-byte MAD of base version 1
OP_UD_SEND_ONLY = opc.OP_UD_SEND_ONLY
QP1_QKEY = 0x80010000
MAD_BYTES = 256
CM_FRAME = 14 + 20 + 8 + 64     # a connection-manager request: Ethernet, IPv4, UDP, datagram


class FrameCheckError(AssertionError):
    """A frame the endpoint sent is not what scapy (or the connection-manager spec) makes of
    it."""


class RETH(Packet):
    """RDMA extended transport header (16 bytes): virtual address, R_Key, DMA length."""
    name = "RETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), IntField("dlen", 0)]

    def extract_padding(self, s):
        return b"", s


class ImmDt(Packet):
    """Immediate data extended transport header (4 bytes)."""
    name = "ImmDt"
    fields_desc = [XIntField("imm", 0)]

    def extract_padding(self, s):
        return b"", s


class DETH(Packet):
    """Datagram extended transport header (8 bytes): Q_Key, reserved, source QP."""
    name = "DETH"
    fields_desc = [XIntField("qkey", 0), ByteField("resv", 0), X3BytesField("src_qp", 0)]

    def extract_padding(self, s):
        return b"", s


class AtomicETH(Packet):
    """Atomic extended transport header (28 bytes) of COMPARE_SWAP and FETCH_ADD: virtual
    address, R_Key, swap (or add) data, compare data."""
    name = "AtomicETH"
    fields_desc = [XLongField("va", 0), XIntField("rkey", 0), XLongField("swap_add", 0),
                   XLongField("compare", 0)]

    def extract_padding(self, s):
        return b"", s


class AtomicAckETH(Packet):
    """Atomic acknowledge extended transport header (8 bytes): the original remote data."""
    name = "AtomicAckETH"
    fields_desc = [XLongField("orig", 0)]

    def extract_padding(self, s):
        return b"", s


# The RC opcodes of the spec (the rows of the opcode catalogue, its headers mapped to this
# module's own scapy layers, their lengths written here): extension headers in order, and
# whether the packet is the last of its message (only those may carry pad). UC uses 0x20 + the
# SEND/WRITE codes.
_LAYER = {H.RETH: RETH, H.IMMDT: ImmDt, H.AETH: AETH, H.ATOMIC_ETH: AtomicETH,
          H.ATOMIC_ACK_ETH: AtomicAckETH}
_SIZE = {RETH: 16, ImmDt: 4, AETH: 4, AtomicETH: 28, AtomicAckETH: 8, DETH: 8}
_RC = {r.code: (tuple(_LAYER[h] for h in r.headers),
                r.position in (opc.Position.LAST, opc.Position.ONLY))
       for r in opc.ROWS if opc.transport(r.code) == opc.TRANSPORT_RC}
#: the opcodes that carry no payload (ACKNOWLEDGE, the atomics and their acknowledgement)
_NO_PAYLOAD = frozenset(r.code for r in opc.ROWS if not r.payload)
_UC = 0b001 << 5
OPCODES = {**_RC, **{_UC | op: v for op, v in _RC.items()
                     if opc.row(op).verb in (opc.Verb.SEND, opc.Verb.RDMA_WRITE)},
           OP_UD_SEND_ONLY: ((DETH,), True)}
OP_ACKNOWLEDGE = opc.OP_RC_ACKNOWLEDGE
OP_CNP = opc.OP_CNP


def _mad_rules(bth, deth, payload):
    """What the endpoint's IB CM datagrams must be: from QP1 with the well-known Q_Key, a
    256-byte MAD of base version 1 and the CM's class (7, class version 2, or the version of a
    request answered as one of a bad version), no pad."""
    problems = []
    # (a Get or Set of an unknown class version is answered with the request's header: its
    # class version, method GetResp, status bad version)
    bad_version_answer = payload[3:6] == bytes([0x81, 0x00, 0x04])
    if (deth.qkey, deth.src_qp, deth.resv) != (QP1_QKEY, 1, 0):
        problems.append(f"DETH Q_Key {deth.qkey:#x}, source QP {deth.src_qp}, reserved "
                        f"{deth.resv}: a CM datagram is from QP1 with Q_Key {QP1_QKEY:#x}")
    if len(payload) != MAD_BYTES or bth.padcount:
        problems.append(f"a UD SEND_ONLY of the endpoint carries a {MAD_BYTES}-byte MAD without "
                        f"pad, not {len(payload)} bytes with PadCnt {bth.padcount}")
    elif payload[:2] != bytes([1, 7]) or (payload[2] != 2 and not bad_version_answer):
        problems.append(f"MAD base version, class, class version {payload[:3].hex()}: the CM's "
                        f"are 01 07 02 (another class version only in a GetResp with the status "
                        f"bad version, 0x0004)")
    return problems


def roce_layers(opcode, rest):
    """The extension headers of ``opcode`` dissected from ``rest`` (the bytes after the BTH,
    without the ICRC) as scapy layers, followed by the payload as ``Raw`` (none when empty):
    ``(layers, payload)``. ``ValueError`` when ``rest`` is too short for the headers."""
    if opcode == OP_CNP:
        if len(rest) != 16:
            raise ValueError(f"a CNP carries 16 bytes after the BTH, not {len(rest)}")
        return [CNPPadding(rest)], b""
    if opcode not in OPCODES:
        raise ValueError(f"opcode {opcode:#04x} is not an RC/UC opcode of the spec")
    layers = []
    for cls in OPCODES[opcode][0]:
        size = _SIZE[cls]
        if len(rest) < size:
            raise ValueError(f"opcode {opcode:#04x}: {len(rest)} bytes left for {cls.__name__}")
        layers.append(cls(rest[:size]))
        rest = rest[size:]
    return layers, rest


# ------------------------------------------------------------------ connection-manager datagrams

#: the 64-byte datagram of the connection-manager spec, field by field (big-endian)
_CM = struct.Struct(">BB3sB3sIQIB3sB3sIQIHBIII")
_CM_FIELDS = ("flags", "byte1", "loc_qpn", "byte5", "loc_psn", "loc_rkey", "loc_vaddr", "loc_ip",
              "byte25", "rem_qpn", "byte29", "rem_psn", "rem_rkey", "rem_vaddr", "rem_ip",
              "listening_port", "byte51", "dma_length", "n_transfers", "frequency")
assert _CM.size == 64
REQ_OPEN_QP = 1
ACK_TYPES = {1: "ACK", 2: "NO_QP", 3: "NAK", 7: "ERROR"}
REQ_TYPES = {0: "NULL", 1: "OPEN_QP", 2: "SEND_QP_INFO", 3: "MODIFY_QP_RTS", 4: "CLOSE_QP",
             7: "ERROR"}


def cm_decode(raw):
    """A 64-byte datagram -> dict of its fields (24-bit fields as integers; byte 0 split into
    ``info_valid``, ``req_type``, ``ack_valid``, ``ack_type``)."""
    if len(raw) != 64:
        raise ValueError(f"a connection-manager datagram is 64 bytes, not {len(raw)}")
    d = dict(zip(_CM_FIELDS, _CM.unpack(raw)))
    for k in ("loc_qpn", "loc_psn", "rem_qpn", "rem_psn"):
        d[k] = int.from_bytes(d[k], "big")
    f = d.pop("flags")
    d.update(info_valid=f & 1, req_type=(f >> 1) & 7, ack_valid=(f >> 4) & 1, ack_type=f >> 5)
    return d


def cm_encode(d):
    """The inverse of :func:`cm_decode`."""
    d = dict(d)
    d["flags"] = (d.pop("info_valid") | d.pop("req_type") << 1 | d.pop("ack_valid") << 4
                  | d.pop("ack_type") << 5)
    for k in ("loc_qpn", "loc_psn", "rem_qpn", "rem_psn"):
        d[k] = d[k].to_bytes(3, "big")
    return _CM.pack(*(d[k] for k in _CM_FIELDS))


def _ip_int(text):
    return int.from_bytes(bytes(int(x) for x in text.split(".")), "big")


# ------------------------------------------------------------------------------------ the checker

def _hexdump(frame, at, span=16):
    lo = max(0, at - span)
    return frame[lo:at + span].hex(" ")


def _field_diff(sent, expected):
    """Field-by-field differences of two frames as scapy dissects them."""
    out = []
    a, b = Ether(sent), Ether(expected)
    while a and b and not isinstance(a, (Raw, Padding)):
        if type(a) is not type(b):
            out.append(f"layer {a.name} sent where scapy builds {b.name}")
            break
        for f in a.fields_desc:
            va, vb = a.getfieldval(f.name), b.getfieldval(f.name)
            if va != vb:
                fmt = (lambda v: hex(v)) if isinstance(va, int) and isinstance(vb, int) else repr
                out.append(f"{a.name}.{f.name}: sent {fmt(va)}, expected {fmt(vb)}")
        a, b = a.payload, b.payload
    if len(sent) != len(expected):
        out.append(f"length: sent {len(sent)} bytes, expected {len(expected)}")
    return out


class FrameChecker:
    """See the module documentation. ``name`` prefixes the error messages and the summary.
    ``region_acks``: the endpoint is built with the responder, whose connection manager states a
    QP's memory region in an ACK of OPEN_QP, SEND_QP_INFO or MODIFY_QP_RTS (``loc_rkey``,
    ``loc_vaddr``, ``dma_length``: the endpoint's to choose) and the READ depths in bytes 56-57
    of an ACK of OPEN_QP or SEND_QP_INFO (bytes 58-59 stay zero)."""

    def __init__(self, name="endpoint", *, region_acks=False):
        self.name = name
        self.region_acks = region_acks
        self.counts = Counter()
        #: wall-clock seconds spent in :meth:`check` (scapy takes a few milliseconds a frame)
        self.seconds = 0.0
        self._requests = []             # (host ip, udp source port, decoded request)

    # -------------------------------------------------------------------------------- requests
    def request(self, frame):
        """Note a frame sent to the endpoint (connection-manager requests are remembered).
        Any frame may come here, runts and garbage included: what scapy cannot take apart is
        not a request. Only frames of a request's length (Ethernet, IPv4 without options, UDP
        and 64 bytes; 4 more with an 802.1Q tag) are dissected."""
        frame = bytes(frame)
        if len(frame) not in (CM_FRAME, CM_FRAME + 4):
            return
        try:
            p = Ether(frame)
        except Exception:                   # noqa: BLE001 (anything scapy trips on)
            return
        if IP in p and UDP in p and p[UDP].dport == CM_PORT and p[IP].frag == 0:
            raw = bytes(p[UDP].payload)
            if len(raw) == 64:
                req = cm_decode(raw)
                if req["info_valid"] and not req["ack_valid"]:
                    self._requests.append((p[IP].src, p[UDP].sport, req))
                    del self._requests[:-256]

    # ------------------------------------------------------------------------------------ frames
    def check(self, frame):
        """Check one frame the endpoint sent; returns its kind. Raises
        :class:`FrameCheckError`."""
        frame = bytes(frame)
        t0 = time.perf_counter()
        try:
            kind, expected, problems = self._rebuild(frame)
        except FrameCheckError:
            raise
        except Exception as e:              # scapy could not take the frame apart
            self._fail(frame, [f"scapy cannot dissect it: {type(e).__name__}: {e}"])
        if expected != frame:
            at = next((k for k, (x, y) in enumerate(zip(frame, expected)) if x != y),
                      min(len(frame), len(expected)))
            problems = [f"differs from scapy's rebuild at byte {at}: sent "
                        f"[{_hexdump(frame, at)}], scapy [{_hexdump(expected, at)}]",
                        *_field_diff(frame, expected), *problems]
        if problems:
            self._fail(frame, problems)
        self.seconds += time.perf_counter() - t0
        self.counts["frames"] += 1
        self.counts[kind] += 1
        return kind

    def summary(self):
        """One line: the frames checked, by kind."""
        kinds = ", ".join(f"{self.counts[k]} {k}" for k in sorted(self.counts) if k != "frames")
        return (f"{self.name}: {self.counts['frames']} frames rebuilt by scapy and identical"
                + (f" ({kinds})" if kinds else ""))

    def _fail(self, frame, problems):
        raise FrameCheckError(f"{self.name}: frame {self.counts['frames'] + 1} "
                              f"({len(frame)} bytes) fails the independent check:\n  "
                              + "\n  ".join(problems) + f"\n  frame: {frame.hex()}")

    def _rebuild(self, frame):
        p = Ether(frame)
        problems = []
        # Ethernet padding: only up to the minimum frame size, zeros only
        pad = p.getlayer(Padding)
        pad_bytes = b""
        if pad is not None:
            pad_bytes = bytes(pad.load)
            pad.underlayer.remove_payload()
        body = len(frame) - len(pad_bytes)
        if pad_bytes:
            if any(pad_bytes):
                problems.append(f"Ethernet padding is not zero: {pad_bytes.hex()}")
            if len(frame) != MIN_FRAME:
                what = f"IPv4 total length {p[IP].len}" if IP in p else "the frame's contents"
                problems.append(f"{len(pad_bytes)} bytes follow {what} (frame of {body} bytes): "
                                f"padding may only fill a frame to {MIN_FRAME} bytes")
        if IP in p:
            ip = p[IP]
            del ip.len, ip.chksum
            if UDP in p:
                udp = p[UDP]
                kept_zero = udp.chksum == 0
                del udp.len
                if not kept_zero:
                    del udp.chksum
                if BTH in p:
                    kind = "roce"
                    problems += self._roce(p)
                elif udp.sport == CM_REPLY_PORT:
                    kind = "cm_reply"
                    problems += self._cm_reply(p, kept_zero)
                else:
                    kind = "udp"
            elif ICMP in p:
                kind = "icmp"
                del p[ICMP].chksum
            else:
                kind = "other"
        elif ARP in p:
            kind = "arp"
        else:
            kind = "other"
        expected = bytes(p)
        if pad_bytes and len(expected) < MIN_FRAME:
            expected += bytes(min(len(pad_bytes), MIN_FRAME - len(expected)))
        return kind, expected, problems

    # ------------------------------------------------------------------------------ RoCE frames
    def _roce(self, p):
        problems = []
        ip, udp, bth = p[IP], p[UDP], p[BTH]
        want = {"IPv4 version": (ip.version, 4), "IPv4 IHL": (ip.ihl, 5),
                "IPv4 DF": (int(ip.flags.DF), 1), "IPv4 fragment offset": (ip.frag, 0),
                "IPv4 MF": (int(ip.flags.MF), 0), "IPv4 protocol": (ip.proto, 17),
                "BTH TVer": (bth.version, 0), "BTH reserved (byte 4)": (bth.resv6, 0),
                "BTH reserved (byte 8)": (bth.resv7, 0), "BTH P_Key": (bth.pkey, 0xFFFF)}
        problems += [f"{what} is {got:#x}, the spec says {ok:#x}"
                     for what, (got, ok) in want.items() if got != ok]
        if ip.ttl == 0:
            problems.append("IPv4 TTL is 0")
        if udp.dport != ROCE_PORT or not 0xC000 <= udp.sport <= 0xFFFF:
            problems.append(f"UDP ports {udp.sport} -> {udp.dport}: a RoCEv2 requester sends "
                            f"from 0xC000..0xFFFF to {ROCE_PORT}")
        if bth.fecn or (bth.becn and bth.opcode != OP_CNP):
            problems.append("FECN/BECN set on a packet the endpoint originates")
        # the bytes after the BTH, without the ICRC, as scapy dissected them
        rest = bytes(bth.payload)
        try:
            layers, payload = roce_layers(bth.opcode, rest)
        except ValueError as e:
            return problems + [str(e)]
        pc = bth.padcount
        if bth.opcode == OP_UD_SEND_ONLY:
            problems += _mad_rules(bth, layers[0], payload)
        is_last = bth.opcode == OP_CNP or OPCODES[bth.opcode][1]
        if bth.opcode in _NO_PAYLOAD and (payload or pc):
            problems.append(f"{len(payload)} payload bytes and PadCnt {pc} on "
                            f"{'a CNP' if bth.opcode == OP_CNP else opc.name(bth.opcode)}")
        if len(payload) % 4:
            problems.append(f"payload and pad are {len(payload)} bytes, not a multiple of 4")
        if pc and not is_last:
            problems.append(f"PadCnt {pc} on opcode {bth.opcode:#04x}, which is not the last "
                            f"packet of a message")
        if pc > len(payload):
            problems.append(f"PadCnt {pc} but only {len(payload)} bytes after the headers")
        elif pc and any(payload[-pc:]):
            problems.append(f"pad bytes are not zero: {payload[-pc:].hex()}")
        # rebuild: BTH without its ICRC (scapy computes it), the extension layers, the payload
        bth.remove_payload()
        for layer in [*layers, *([Raw(payload)] if payload else [])]:
            bth.add_payload(layer)          # in place, at the end of the chain
        del bth.icrc
        return problems

    # --------------------------------------------------------------- connection-manager replies
    # (the 64-byte datagrams of UDP port 17185; the IB CM's MADs are RoCE frames, above)
    def _cm_reply(self, p, checksum_zero):
        ip, udp = p[IP], p[UDP]
        raw = bytes(udp.payload)
        if len(raw) != 64:
            return [f"a connection-manager reply is 64 bytes, not {len(raw)}"]
        problems = []
        if checksum_zero:
            problems.append("connection-manager reply without a UDP checksum")
        got = cm_decode(raw)
        if not (got["info_valid"] and got["ack_valid"]) or got["ack_type"] not in ACK_TYPES:
            problems.append(f"byte 0 is {raw[0]:#04x}: a reply has info_valid and ack_valid "
                            f"set and ack_type one of {sorted(ACK_TYPES)}")
        cands = [(sport, req) for src, sport, req in self._requests
                 if src == ip.dst and req["req_type"] == got["req_type"]]
        if not cands:
            return problems + [f"a {REQ_TYPES.get(got['req_type'], got['req_type'])} reply to "
                               f"{ip.dst} answers no request seen"]
        best = None
        for n, (sport, req) in enumerate(cands):
            exp = self._cm_expected(req, got, ip.src)
            port = req["listening_port"] or sport
            diffs = [f"{k}: sent {got[k]:#x}, spec {exp[k]:#x}" for k in exp if got[k] != exp[k]]
            if udp.dport != port:
                diffs.append(f"sent to UDP port {udp.dport}, not {port}")
            if best is None or len(diffs) < len(best[1]):
                best = (n, diffs, exp)
            if not diffs:
                break
        n, diffs, exp = best
        if diffs:
            return problems + ["connection-manager reply differs from the spec's encoding "
                               f"[{cm_encode(exp).hex()}]:", *diffs]
        self._requests.remove(next(r for r in self._requests if r[2] is cands[n][1]))
        return problems

    def _cm_expected(self, req, got, our_ip):
        """The reply the spec asks for to ``req``. Where the spec leaves a value to the
        endpoint (the ACK type, its QPN on a granted OPEN_QP) it is taken from ``got``."""
        if req["req_type"] == REQ_OPEN_QP:
            granted = got["ack_type"] == 1
            # a granted OPEN_QP names a QP from 256 up (what is sent, when it is one); refused: 0
            loc_qpn = (got["loc_qpn"] if got["loc_qpn"] >= 256 else 256) if granted else 0
            ours = dict(loc_qpn=loc_qpn, loc_psn=req["loc_psn"], loc_rkey=0, loc_vaddr=0)
        else:                           # the request named our QP in rem_*: echoed as ours
            ours = {f"loc_{k}": req[f"rem_{k}"] for k in ("qpn", "psn", "rkey", "vaddr")}
        return dict(
            info_valid=1, req_type=req["req_type"], ack_valid=1, ack_type=got["ack_type"],
            byte1=0, byte5=0, byte25=0, byte29=0, **ours, loc_ip=_ip_int(our_ip),
            rem_qpn=req["loc_qpn"], rem_psn=req["loc_psn"], rem_rkey=req["loc_rkey"],
            rem_vaddr=req["loc_vaddr"], rem_ip=req["loc_ip"],
            listening_port=req["listening_port"],
            # (an extension: an ACK that names a region may state the responder's atomics in
            # bits 6-5, 1 little-endian or 2 big-endian; nothing else of the byte)
            byte51=got["byte51"] if got["ack_type"] == 1 and req["req_type"] in (1, 2, 3)
            and got["byte51"] in (0x20, 0x40) else 0,
            dma_length=0, n_transfers=0, frequency=0) | self._cm_region(req, got)

    def _cm_region(self, req, got):
        """With ``region_acks``: the fields of an ACK that states the QP's region (and the READ
        depths), as sent."""
        if not self.region_acks or got["ack_type"] != 1 or req["req_type"] not in (1, 2, 3):
            return {}
        out = {k: got[k] for k in ("loc_rkey", "loc_vaddr", "dma_length")}
        if req["req_type"] in (1, 2):
            out["n_transfers"] = got["n_transfers"] & 0xFFFF_0000
        return out
