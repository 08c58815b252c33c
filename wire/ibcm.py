"""The InfiniBand Communication Manager (IB CM) on the wire, as librdmacm speaks it over RoCEv2.

CM messages are management datagrams (MADs): 256 bytes, a 24-byte common header
(:data:`MAD_HDR`) and 232 bytes of class data, sent as UD SEND_ONLY packets (BTH opcode
:data:`rocegen.wire.opcodes.OP_UD_SEND_ONLY`, a :data:`rocegen.wire.headers.DETH` with the Q_Key
:data:`QP1_QKEY`) to and from QP1. Every layout here is a :class:`~rocegen.wire.headers.Header`
of the class data, written from the Linux kernel's ``include/rdma/ibta_vol1_c12.h`` (IBTA
volume 1, chapter 12, tables 106-113: byte offsets counted from the end of the MAD header, bit
offsets from the most significant bit of the byte), ``include/rdma/ib_mad.h`` (the MAD header,
ClassPortInfo, the MAD status bits), ``include/rdma/ib_cm.h`` (the reject reasons) and
``drivers/infiniband/core/cma.c`` (librdmacm's ``cma_hdr`` and service IDs; IBTA Annex A11).

Field names are the specification's, in lower case; ``reservedN`` fields are zero on the wire.
The private data fields are integers like every other field: ``int.from_bytes(data, "big")`` of
the bytes, zero-padded on the right to the field's length (:func:`private_data` and
:func:`private_bytes` convert).

A MAD is ``MAD_HDR.pack(...) + <one of REQ, REP, ...>.pack(...)``; :data:`CLASS_PORT_INFO` fills
the first 72 bytes of its MAD's data and zeros the rest (:func:`class_data`).
"""

import enum

from rocegen.wire import headers as H
from rocegen.wire.headers import Header

__all__ = [
    "MAD_LENGTH", "MAD_HDR_LENGTH", "MAD_DATA_LENGTH",
    "BASE_VERSION", "MGMT_CLASS_CM", "CM_CLASS_VERSION",
    "METHOD_GET", "METHOD_SET", "METHOD_SEND", "METHOD_GET_RESP", "METHOD_RESP",
    "STATUS_SUCCESS", "STATUS_BUSY", "STATUS_REDIRECT", "STATUS_BAD_VERSION",
    "STATUS_UNSUPPORTED_METHOD", "STATUS_UNSUPPORTED_METHOD_ATTR", "STATUS_INVALID_ATTR_VALUE",
    "ATTR_CLASS_PORT_INFO", "ATTR_REQ", "ATTR_MRA", "ATTR_REJ", "ATTR_REP", "ATTR_RTU",
    "ATTR_DREQ", "ATTR_DREP", "ATTR_SIDR_REQ", "ATTR_SIDR_REP", "ATTR_LAP", "ATTR_APR",
    "QP1", "QP1_QKEY", "DEFAULT_PKEY", "LID_PERMISSIVE", "UDP_SPORT", "UD_IN", "UD_OUT",
    "MAD_HDR", "REQ", "MRA", "REJ", "REP", "RTU", "DREQ", "DREP", "CLASS_PORT_INFO", "CMA_HDR",
    "GID_IPV4", "REGION", "rep_region", "MESSAGES", "PRIVATE_DATA_LENGTH",
    "RejReason", "MsgResponse", "TRANSPORT_RC", "TRANSPORT_UC",
    "MTU_CODES", "mtu_code", "mtu_bytes",
    "RDMA_PS_TCP", "SERVICE_ID_TCP", "RPING_PORT", "service_id", "service_port",
    "CMA_VERSION", "CMA_IP_VERSION_4", "CMA_IP_VERSION_6", "CMA_PRIVATE_DATA_MAX",
    "cm_timeout_ns", "ipv4_gid", "gid_ipv4",
    "private_data", "private_bytes", "class_data",
]

# ---- the MAD (ib_mad.h)

#: A MAD's length, its common header's and its class data's (``IB_MGMT_MAD_SIZE``,
#: ``IB_MGMT_MAD_HDR``, ``IB_MGMT_MAD_DATA``).
MAD_LENGTH = 256
MAD_HDR_LENGTH = 24
MAD_DATA_LENGTH = 232

#: ``IB_MGMT_BASE_VERSION``; ``IB_MGMT_CLASS_CM``; ``IB_CM_CLASS_VERSION`` (cm_msgs.h).
BASE_VERSION = 1
MGMT_CLASS_CM = 0x07
CM_CLASS_VERSION = 2

#: Methods: Get, Set, Send (every CM message), GetResp; the response bit (a response's method is
#: its request's with this bit set).
METHOD_GET = 0x01
METHOD_SET = 0x02
METHOD_SEND = 0x03
METHOD_GET_RESP = 0x81
METHOD_RESP = 0x80

#: The MAD header's status (``IB_MGMT_MAD_STATUS_*``): bit 0 busy, bit 1 redirect required, bits
#: 4:2 the invalid-field code (1 bad base or class version, 2 method not supported, 3 method and
#: attribute combination not supported, 7 invalid value in the attribute or its modifier).
STATUS_SUCCESS = 0x0000
STATUS_BUSY = 0x0001
STATUS_REDIRECT = 0x0002
STATUS_BAD_VERSION = 0x0004
STATUS_UNSUPPORTED_METHOD = 0x0008
STATUS_UNSUPPORTED_METHOD_ATTR = 0x000C
STATUS_INVALID_ATTR_VALUE = 0x001C

#: Attribute IDs (``IB_MGMT_CLASSPORTINFO_ATTR_ID``; ``CM_*_ATTR_ID`` of cm_msgs.h).
ATTR_CLASS_PORT_INFO = 0x0001
ATTR_REQ = 0x0010
ATTR_MRA = 0x0011
ATTR_REJ = 0x0012
ATTR_REP = 0x0013
ATTR_RTU = 0x0014
ATTR_DREQ = 0x0015
ATTR_DREP = 0x0016
ATTR_SIDR_REQ = 0x0017
ATTR_SIDR_REP = 0x0018
ATTR_LAP = 0x0019
ATTR_APR = 0x001A

#: The management QP, its well-known Q_Key (``IB_QP1_QKEY``) and the default P_Key
#: (``IB_DEFAULT_PKEY_FULL``).
QP1 = 1
QP1_QKEY = 0x80010000
DEFAULT_PKEY = 0xFFFF
#: The UDP source port of the MADs the endpoint sends (RoCEv2 leaves it to the sender; Linux
#: spreads flows over 0xC000..0xFFFF).
UDP_SPORT = 0xC000
#: The headers in front of a MAD in a RoCEv2 datagram as the receive path hands it on (IPv4
#: header first), and those a sender puts in front of a MAD inside the UDP payload: one
#: :class:`~rocegen.wire.headers.Header` each (:func:`~rocegen.wire.headers.joined`; fields
#: ``ipv4_*``, ``udp_*``, ``bth_*``, ``deth_*``).
UD_IN = H.joined("ud", H.IPV4, H.UDP, H.BTH, H.DETH)
UD_OUT = H.joined("ud", H.BTH, H.DETH)
#: The permissive LID: what Linux's CM writes in a REQ's LIDs when the path leaves the subnet
#: (hop limit above 1, as on RoCEv2; ``cm_format_req``).
LID_PERMISSIVE = 0xFFFF

#: The common MAD header (``struct ib_mad_hdr``).
MAD_HDR = Header("mad", [
    ("base_version", 8), ("mgmt_class", 8), ("class_version", 8), ("method", 8),
    ("status", 16), ("class_specific", 16), ("transaction_id", 64),
    ("attribute_id", 16), ("reserved", 16), ("attribute_modifier", 32)])

# ---- the CM messages (ibta_vol1_c12.h, offsets from the end of the MAD header)


def _path(prefix):
    """The fields of a REQ's path (primary at byte 52, alternate at 96): LIDs, GIDs, flow label,
    packet rate, traffic class, hop limit, SL, subnet local, local ACK timeout."""
    return [(f"{prefix}_local_lid", 16), (f"{prefix}_remote_lid", 16),
            (f"{prefix}_local_gid", 128), (f"{prefix}_remote_gid", 128),
            (f"{prefix}_flow_label", 20), (f"{prefix}_reserved0", 6), (f"{prefix}_packet_rate", 6),
            (f"{prefix}_traffic_class", 8), (f"{prefix}_hop_limit", 8),
            (f"{prefix}_sl", 4), (f"{prefix}_subnet_local", 1), (f"{prefix}_reserved1", 3),
            (f"{prefix}_local_ack_timeout", 5), (f"{prefix}_reserved2", 3)]


#: REQ (table 106).
REQ = Header("cm_req", [
    ("local_comm_id", 32), ("reserved0", 32), ("service_id", 64), ("local_ca_guid", 64),
    ("reserved1", 32), ("local_qkey", 32), ("local_qpn", 24), ("responder_resources", 8),
    ("local_eecn", 24), ("initiator_depth", 8), ("remote_eecn", 24),
    ("remote_cm_response_timeout", 5), ("transport_service_type", 2),
    ("end_to_end_flow_control", 1), ("starting_psn", 24), ("local_cm_response_timeout", 5),
    ("retry_count", 3), ("partition_key", 16), ("path_mtu", 4), ("rdc_exists", 1),
    ("rnr_retry_count", 3), ("max_cm_retries", 4), ("srq", 1), ("extended_transport_type", 3),
    *_path("primary"), *_path("alternate"), ("private_data", 92 * 8)])

#: MRA (table 107). ``message_mraed``: :class:`MsgResponse`.
MRA = Header("cm_mra", [
    ("local_comm_id", 32), ("remote_comm_id", 32), ("message_mraed", 2), ("reserved0", 6),
    ("service_timeout", 5), ("reserved1", 3), ("private_data", 222 * 8)])

#: REJ (table 108). ``message_rejected``: :class:`MsgResponse`; ``reason``: :class:`RejReason`;
#: ``ari``: ``reject_info_length`` bytes of additional reject information.
REJ = Header("cm_rej", [
    ("local_comm_id", 32), ("remote_comm_id", 32), ("message_rejected", 2), ("reserved0", 6),
    ("reject_info_length", 7), ("reserved1", 1), ("reason", 16), ("ari", 72 * 8),
    ("private_data", 148 * 8)])

#: REP (table 110).
REP = Header("cm_rep", [
    ("local_comm_id", 32), ("remote_comm_id", 32), ("local_qkey", 32), ("local_qpn", 24),
    ("reserved0", 8), ("local_eecn", 24), ("reserved1", 8), ("starting_psn", 24),
    ("reserved2", 8), ("responder_resources", 8), ("initiator_depth", 8),
    ("target_ack_delay", 5), ("failover_accepted", 2), ("end_to_end_flow_control", 1),
    ("rnr_retry_count", 3), ("srq", 1), ("reserved3", 4), ("local_ca_guid", 64),
    ("private_data", 196 * 8)])

#: RTU (table 111).
RTU = Header("cm_rtu", [("local_comm_id", 32), ("remote_comm_id", 32), ("private_data", 224 * 8)])

#: DREQ (table 112): ``remote_qpn`` is the receiver's QP (the QPN/EECN of the peer).
DREQ = Header("cm_dreq", [
    ("local_comm_id", 32), ("remote_comm_id", 32), ("remote_qpn", 24), ("reserved0", 8),
    ("private_data", 220 * 8)])

#: DREP (table 113).
DREP = Header("cm_drep", [("local_comm_id", 32), ("remote_comm_id", 32), ("private_data", 224 * 8)])

#: Attribute ID -> the message's layout (the seven messages of an RC connection).
MESSAGES = {ATTR_REQ: REQ, ATTR_MRA: MRA, ATTR_REJ: REJ, ATTR_REP: REP, ATTR_RTU: RTU,
            ATTR_DREQ: DREQ, ATTR_DREP: DREP}

#: Bytes of private data of each message.
PRIVATE_DATA_LENGTH = {attr: h.offset("private_data")[1] // 8 for attr, h in MESSAGES.items()}

#: ClassPortInfo (IBTA 13.4.8.1; ``struct ib_class_port_info``): 72 bytes at the start of the
#: MAD's data. ``capability_mask2`` and ``resp_time_value`` share a 32-bit word (the kernel's
#: ``reserved[3]`` and ``resp_time_value``, whose low 5 bits hold the value); each
#: ``*_tc_sl_fl`` word is traffic class 8, SL 4, flow label 20.
CLASS_PORT_INFO = Header("class_port_info", [
    ("base_version", 8), ("class_version", 8), ("capability_mask", 16),
    ("capability_mask2", 27), ("resp_time_value", 5),
    ("redirect_gid", 128), ("redirect_tc", 8), ("redirect_sl", 4), ("redirect_fl", 20),
    ("redirect_lid", 16), ("redirect_pkey", 16), ("reserved0", 8), ("redirect_qp", 24),
    ("redirect_qkey", 32),
    ("trap_gid", 128), ("trap_tc", 8), ("trap_sl", 4), ("trap_fl", 20),
    ("trap_lid", 16), ("trap_pkey", 16), ("trap_hl", 8), ("trap_qp", 24), ("trap_qkey", 32)])

# ---- codes


class RejReason(enum.IntEnum):
    """A REJ's reason (``enum ib_cm_rej_reason``, include/rdma/ib_cm.h)."""
    NO_QP = 1
    NO_EEC = 2
    NO_RESOURCES = 3
    TIMEOUT = 4
    UNSUPPORTED = 5
    INVALID_COMM_ID = 6
    INVALID_COMM_INSTANCE = 7
    INVALID_SERVICE_ID = 8
    INVALID_TRANSPORT_TYPE = 9
    STALE_CONN = 10
    RDC_NOT_EXIST = 11
    INVALID_GID = 12
    INVALID_LID = 13
    INVALID_SL = 14
    INVALID_TRAFFIC_CLASS = 15
    INVALID_HOP_LIMIT = 16
    INVALID_PACKET_RATE = 17
    INVALID_ALT_GID = 18
    INVALID_ALT_LID = 19
    INVALID_ALT_SL = 20
    INVALID_ALT_TRAFFIC_CLASS = 21
    INVALID_ALT_HOP_LIMIT = 22
    INVALID_ALT_PACKET_RATE = 23
    PORT_CM_REDIRECT = 24
    PORT_REDIRECT = 25
    INVALID_MTU = 26
    INSUFFICIENT_RESP_RESOURCES = 27
    CONSUMER_DEFINED = 28
    INVALID_RNR_RETRY = 29
    DUPLICATE_LOCAL_COMM_ID = 30
    INVALID_CLASS_VERSION = 31
    INVALID_FLOW_LABEL = 32
    INVALID_ALT_FLOW_LABEL = 33
    VENDOR_OPTION_NOT_SUPPORTED = 35


class MsgResponse(enum.IntEnum):
    """The message a REJ rejects or an MRA acknowledges (``enum cm_msg_response``, cm_msgs.h)."""
    REQ = 0
    REP = 1
    OTHER = 2


#: A REQ's transport service type (``cm_req_set_qp_type``): 0 RC, 1 UC (3: XRC, with the
#: extended transport type).
TRANSPORT_RC = 0
TRANSPORT_UC = 1

#: The IB MTU codes of a REQ's path MTU (``enum ib_mtu``): code -> bytes.
MTU_CODES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_MTU_OF_BYTES = {b: c for c, b in MTU_CODES.items()}


def mtu_code(nbytes):
    """The IB MTU code (1..5) of a path MTU of ``nbytes`` (256, 512, 1024, 2048 or 4096)."""
    if nbytes not in _MTU_OF_BYTES:
        raise ValueError(f"path MTU must be one of {sorted(_MTU_OF_BYTES)} bytes, not {nbytes!r}")
    return _MTU_OF_BYTES[nbytes]


def mtu_bytes(code):
    """The bytes of IB MTU code ``code`` (1..5)."""
    if code not in MTU_CODES:
        raise ValueError(f"IB MTU code must be one of {sorted(MTU_CODES)}, not {code!r}")
    return MTU_CODES[code]


# ---- librdmacm's addressing (cma.c; IBTA Annex A11)

#: The TCP port space (``RDMA_PS_TCP``, include/uapi/rdma/rdma_user_cm.h); a service ID is
#: ``port space << 16 | port`` (``rdma_get_service_id``).
RDMA_PS_TCP = 0x0106
SERVICE_ID_TCP = RDMA_PS_TCP << 16
#: The TCP port ``rping`` (librdmacm/examples/rping.c) listens on and connects to by default.
RPING_PORT = 7174


def service_id(port):
    """The service ID librdmacm connects to (and listens on) for TCP port ``port`` (0..65535)."""
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise ValueError(f"port must be an integer 0..65535, not {port!r}")
    return SERVICE_ID_TCP | port


def service_port(sid):
    """The TCP port of service ID ``sid``, or None when ``sid`` is not of the TCP port space."""
    if not isinstance(sid, int) or not 0 <= sid < 1 << 64:
        raise ValueError(f"service ID must be a 64-bit integer, not {sid!r}")
    return sid & 0xFFFF if sid >> 16 == RDMA_PS_TCP else None


#: ``CMA_VERSION``; the IP versions of ``cma_hdr.ip_version`` (its upper nibble).
CMA_VERSION = 0x00
CMA_IP_VERSION_4 = 4
CMA_IP_VERSION_6 = 6

#: librdmacm's header at the start of a REQ's private data (``struct cma_hdr``): version, IP
#: version (bits 7:4), the active side's port, then its address and the passive side's, each
#: 16 bytes (IPv4: 12 zero bytes, then the address; ``union cma_ip_addr``).
CMA_HDR = Header("cma_hdr", [
    ("cma_version", 8), ("ip_version", 4), ("reserved", 4), ("src_port", 16),
    ("src_addr", 128), ("dst_addr", 128)])

#: The application's private data a librdmacm REQ carries after its :data:`CMA_HDR`.
CMA_PRIVATE_DATA_MAX = 92 - 36

#: A GID holding an IPv4 address (RoCEv2: the IPv4-mapped IPv6 address ``::ffff:a.b.c.d``).
GID_IPV4 = Header("gid_ipv4", [("zero", 80), ("ffff", 16), ("ipv4", 32)])


def ipv4_gid(ip):
    """The GID (a 128-bit integer) of IPv4 address ``ip`` (a 32-bit integer)."""
    if not isinstance(ip, int) or not 0 <= ip < 1 << 32:
        raise ValueError(f"IPv4 address must be a 32-bit integer, not {ip!r}")
    return int.from_bytes(GID_IPV4.pack(ffff=0xFFFF, ipv4=ip), "big")


def gid_ipv4(gid):
    """The IPv4 address (an integer) of an IPv4-mapped GID, or None for another GID."""
    if not isinstance(gid, int) or not 0 <= gid < 1 << 128:
        raise ValueError(f"GID must be a 128-bit integer, not {gid!r}")
    f = GID_IPV4.unpack(gid.to_bytes(16, "big"))
    return f["ipv4"] if f["zero"] == 0 and f["ffff"] == 0xFFFF else None


#: The private data of the REP this project's CM sends (its first 16 bytes, the rest zero): the
#: memory region the peer may access (its base address, R_Key and length in bytes), laid out
#: as rping's advertisement of a buffer.
REGION = Header("cm_region", [("addr", 64), ("rkey", 32), ("length", 32)])


def rep_region(data):
    """The :data:`REGION` (a dict: ``addr``, ``rkey``, ``length``) that ``data``, a REP's private
    data as librdmacm hands it to the active side (all of it, or at least the region), carries.
    ``ValueError`` saying what is wrong when it cannot be this project's: shorter than the
    region, a byte after it that is not zero, a region that runs past the end of the 64-bit
    address space, or an R_Key or address with a length of 0 (no region is all zeros)."""
    data = bytes(data)
    if len(data) < REGION.length:
        raise ValueError(f"{len(data)} bytes of private data, shorter than a region's "
                         f"{REGION.length}")
    if any(data[REGION.length:]):
        raise ValueError(f"the private data after the region is not zero ({data.hex()})")
    region = REGION.unpack(data)
    if region["addr"] + region["length"] > 1 << 64:
        raise ValueError(f"region [{region['addr']:#x}, +{region['length']:#x}) runs past the end "
                         f"of the address space")
    if region["length"] == 0 and (region["addr"] or region["rkey"]):
        raise ValueError(f"a region of 0 bytes with address {region['addr']:#x} and R_Key "
                         f"{region['rkey']:#x} (no region is all zeros)")
    return region

# ---- time


def cm_timeout_ns(t):
    """A 5-bit CM time value (a response timeout, an MRA's service timeout, a ClassPortInfo's
    RespTimeValue) in nanoseconds: 4.096 us x 2^t."""
    if not isinstance(t, int) or not 0 <= t <= 31:
        raise ValueError(f"CM time value must be an integer 0..31, not {t!r}")
    return 4096 << t


# ---- private data and class data as bytes


def private_data(header, data=b""):
    """``data`` (at most the message's private data bytes) as the value of ``header``'s
    ``private_data`` field (zero-padded on the right)."""
    n = header.offset("private_data")[1] // 8
    data = bytes(data)
    if len(data) > n:
        raise ValueError(f"{header.name}: {len(data)} bytes of private data, more than {n}")
    return int.from_bytes(data.ljust(n, b"\0"), "big")


def private_bytes(header, fields):
    """The private data bytes of an unpacked ``header`` message (all of them)."""
    n = header.offset("private_data")[1] // 8
    return fields["private_data"].to_bytes(n, "big")


def class_data(data):
    """``data`` (at most 232 bytes) padded with zeros to a MAD's class data."""
    data = bytes(data)
    if len(data) > MAD_DATA_LENGTH:
        raise ValueError(f"{len(data)} bytes of class data, more than {MAD_DATA_LENGTH}")
    return data.ljust(MAD_DATA_LENGTH, b"\0")
