"""Records and sideband layouts of the IB CM blocks (the MADs' own layouts are
:mod:`rocegen.wire.ibcm`'s)."""

from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_defs import int_param
from rocegen.wire import ibcm as I

__all__ = ["IBCM_RX_META", "IBCM_TX_META", "Verdict", "VERDICT_COUNTERS", "MAD_RECORD",
           "ReplyKind", "REPLY_RECORD", "QP_GRANT", "ConnState", "CONNECTION", "TIME_BITS",
           "TICK_NS", "QP_SET", "CONNECT", "CM_EVENT", "mad_read_signature", "int_param"]


#: What the UD receive path tells about a MAD it delivers to QP1: the sender's IPv4 address, its
#: QP (the DETH's source QP, 1 for a CM) and the BTH's P_Key (answers go back with it). The
#: Q_Key (:data:`rocegen.wire.ibcm.QP1_QKEY`) is checked before, by the UD receive path.
IBCM_RX_META = data.StructLayout({"src_ip": 32, "src_qp": 24, "pkey": 16})

#: Where an answer goes: the IPv4 address, the QP (its DETH carries QP1 and
#: :data:`~rocegen.wire.ibcm.QP1_QKEY`) and the P_Key of its BTH.
IBCM_TX_META = data.StructLayout({"dst_ip": 32, "dst_qp": 24, "pkey": 16})


class Verdict(enum.Enum, shape=4):
    """What the receiver makes of a MAD, in the order the model checks
    (``rocegen.sim.models.ibcm.IbCm.receive``): the first that applies."""
    OK = 0              # a Send of REQ, MRA, REJ, REP, RTU, DREQ or DREP, class version 2
    GET_SET = 1         # a Get or a Set (of any class version and attribute)
    LENGTH = 2          # not 256 bytes, or ``error`` set
    BASE_VERSION = 3    # base version not 1
    CLASS = 4           # management class not the CM's (7)
    RESPONSE = 5        # a response (method bit 7 set)
    METHOD = 6          # a method other than Get, Set, Send
    CLASS_VERSION = 7   # a Send with a class version other than 2
    ATTRIBUTE = 8       # a Send of an attribute that is none of the seven messages


#: The model's counter of each verdict that drops the MAD.
VERDICT_COUNTERS = {v: "drop_" + v.name.lower() for v in Verdict
                    if v not in (Verdict.OK, Verdict.GET_SET)}

#: The fields of one MAD the CM acts on. ``hdr``: the whole MAD header. ``local_comm_id``: every
#: message's; ``remote_comm_id``: every message's but the REQ's (there: its reserved word). From a
#: REQ: ``service_id`` .. ``max_cm_retries`` by the REQ's names, ``local_ack_timeout`` (the
#: primary path's), and from its private data's ``cma_hdr``: ``cma_version``, ``cma_ip_version``,
#: ``cma_src_port``, the low 32 bits of its two addresses (``cma_src_ip``, ``cma_dst_ip``) and
#: ``cma_high_zero``: their other 96 bits are all zero (IPv4). From a DREQ: ``remote_qpn``. From
#: a REJ or an MRA: ``message`` (rejected / MRAed), from a REJ ``reason``, from an MRA
#: ``service_timeout``. From a REP: ``rep_local_qpn``, ``rep_starting_psn``,
#: ``rep_responder_resources``, ``rep_initiator_depth``, ``rep_rnr_retry_count`` and its private
#: data's first 16 bytes as a :data:`~rocegen.wire.ibcm.REGION` (``rep_addr``, ``rep_rkey``,
#: ``rep_length``: the region a listener of ours states, when it does). Fields of other
#: messages than the MAD's hold its bytes at their offsets.
MAD_RECORD = data.StructLayout({
    "verdict": Verdict,
    "src_ip": 32, "src_qp": 24, "pkey": 16,
    "hdr": I.MAD_HDR.layout,
    "local_comm_id": 32, "remote_comm_id": 32,
    "service_id": 64, "local_qpn": 24, "responder_resources": 8, "initiator_depth": 8,
    "transport_service_type": 2, "starting_psn": 24, "local_cm_response_timeout": 5,
    "retry_count": 3, "path_mtu": 4, "rnr_retry_count": 3, "max_cm_retries": 4,
    "local_ack_timeout": 5,
    "cma_version": 8, "cma_ip_version": 4, "cma_src_port": 16, "cma_src_ip": 32,
    "cma_dst_ip": 32, "cma_high_zero": 1,
    "remote_qpn": 24,
    "message": 2, "reason": 16, "service_timeout": 5,
    "rep_local_qpn": 24, "rep_starting_psn": 24, "rep_responder_resources": 8,
    "rep_initiator_depth": 8, "rep_rnr_retry_count": 3,
    "rep_addr": 64, "rep_rkey": 32, "rep_length": 32,
})


class ReplyKind(enum.Enum, shape=3):
    """The MAD a reply record asks for."""
    REP = 0
    REJ = 1
    RTU = 2
    DREP = 3
    CLASS_PORT_INFO = 4     # the GetResp of a Get of ClassPortInfo
    ECHO = 5                # the MAD the receiver holds, as a GetResp with a status
    DREQ = 6
    REQ = 7


#: A MAD to send. ``dst_*``: :data:`IBCM_TX_META`. ``transaction_id`` and, for a GetResp, the
#: request's ``class_specific``, ``hdr_reserved`` and ``attribute_modifier`` (echoed); for an
#: ``ECHO``, ``status`` (the rest is the MAD the receiver holds). The
#: message: ``local_comm_id``, ``remote_comm_id``; REP: ``local_qpn``, ``starting_psn``,
#: ``responder_resources``, ``initiator_depth``, ``region`` (its private data); REJ:
#: ``message`` (rejected), ``reason`` and ``ari_guid``: its additional reject information our
#: CA GUID (8 bytes, as a REJ ``TIMEOUT`` carries it), else none; DREQ: ``remote_qpn`` (the
#: peer's QP); REQ: ``local_comm_id``, ``local_qpn``, ``starting_psn``, ``responder_resources``,
#: ``initiator_depth``, ``port`` (the TCP port connected to), ``path_mtu`` (an IB MTU code) and
#: ``src_port`` (ours, in its ``cma_hdr``).
REPLY_RECORD = data.StructLayout({
    "kind": ReplyKind,
    "dst_ip": 32, "dst_qp": 24, "pkey": 16,
    "transaction_id": 64, "class_specific": 16, "hdr_reserved": 16, "attribute_modifier": 32,
    "local_comm_id": 32, "remote_comm_id": 32,
    "local_qpn": 24, "starting_psn": 24, "responder_resources": 8, "initiator_depth": 8,
    "region": I.REGION.layout,
    "message": 2, "reason": 16, "ari_guid": 1, "status": 16, "remote_qpn": 24,
    "port": 16, "path_mtu": 4, "src_port": 16,
})


def mad_read_signature(width):
    """A read port of the MAD the receiver holds, as its reader sees it: ``addr`` a beat of a
    ``width``-bit stream (0 .. 2048 / width - 1), ``data`` that beat, in the same cycle."""
    return wiring.Signature({"addr": Out(range(8 * I.MAD_LENGTH // width)), "data": In(width)})

#: The QP pool's answer to a request: ``ok`` and the QP number, or ``ok`` low: none free.
QP_GRANT = data.StructLayout({"ok": 1, "qpn": 24})


#: What the passive side tells of a QP's connection. ``open`` set: a REQ took QP ``qpn``, which
#: is to be made ready to send and receive (IBTA's RTS) with the REQ's sender (``peer_ip``,
#: ``peer_qpn``), starting at PSN ``psn`` (the REQ's, as our REP states it), at path MTU code
#: ``path_mtu`` (the smaller of the REQ's and ours), with the REQ's local ACK timeout
#: (``ack_timeout``) and retry counts, and the READ depths negotiated; ``port`` is the TCP port
#: the REQ's service ID names (what serves the connection). ``open`` clear: the
#: connection of QP ``qpn`` ended (a DREQ or REJ moved it to time-wait): the QP goes to the
#: error state (its work flushed); it is given back on ``qp_free`` at the end of the time-wait.
#: ``psn`` is the PSN the QP sends from, ``epsn`` the one it expects (the same for a connection
#: the peer asked for: one PSN for both directions; for one we asked for, the REP's and our
#: REQ's: each message states the PSN its sender expects);
#: ``rkey`` and ``base``: the peer's region its REP stated (zero for one the peer asked for);
#: ``active``: the connection is one we asked for (``port`` then the peer's port).
QP_SET = data.StructLayout({
    "open": 1, "qpn": 24, "peer_ip": 32, "peer_qpn": 24, "psn": 24, "path_mtu": 4,
    "ack_timeout": 5, "retry_count": 3, "rnr_retry_count": 3,
    "responder_resources": 8, "initiator_depth": 8, "port": 16,
    "epsn": 24, "rkey": 32, "base": 64, "active": 1,
})

#: A connection the FPGA asks for: to TCP port ``port`` of ``dst_ip`` (librdmacm's
#: ``rdma_connect``), ``src_port`` ours in the REQ's ``cma_hdr``.
CONNECT = data.StructLayout({"dst_ip": 32, "port": 16, "src_port": 16})

#: How a connection the FPGA asked for went: ``ok`` and its QP (established: the REP came, the
#: RTU went), or not and why (``reason``: the peer's REJ reason, ``TIMEOUT`` when no REP
#: came, ``NO_QP`` when no QP or table entry was free); ``dst_ip`` and ``port`` as asked.
CM_EVENT = data.StructLayout({"ok": 1, "qpn": 24, "dst_ip": 32, "port": 16, "reason": 16})


class ConnState(enum.Enum, shape=3):
    """A connection table entry's state (IBTA's names; FREE: no connection)."""
    FREE = 0
    REP_SENT = 1
    ESTABLISHED = 2
    TIMEWAIT = 3
    DREQ_SENT = 4
    REQ_SENT = 5


#: Bits of the passive side's time (in ticks of :data:`TICK_NS`): a deadline is at most
#: 2^31 + 1 ticks ahead, so ``now - deadline`` modulo 2^33 tells which comes first.
TIME_BITS = 33

#: The passive side's time unit, in ns: 4.096 us, the CM's (a CM time value t is 2^t ticks).
TICK_NS = 4096

#: One entry of the passive side's connection table: what a duplicate REQ, an RTU, a REJ or a
#: DREQ is matched against, and what the REP sent again holds (``pkey``: the REQ's P_Key). Its
#: timer: ``deadline`` (in ticks, :data:`TIME_BITS` wrapping), in REP_SENT the REP's (sent
#: again ``retries`` more times, each ``2^timeout`` ticks after the last: the REQ's local CM
#: response timeout and max CM retries), in DREQ_SENT our DREQ's (``tid`` its transaction ID,
#: sent again ``retries`` more times, from ``max_retries``: the REQ's max CM retries), in
#: REQ_SENT our REQ's (``active`` set: we asked for the connection, to ``port``, ours
#: ``src_port``), in TIMEWAIT the time-wait's end.
CONNECTION = data.StructLayout({
    "state": ConnState,
    "local_comm_id": 32, "remote_comm_id": 32, "peer_ip": 32, "peer_qpn": 24,
    "qpn": 24, "psn": 24, "responder_resources": 8, "initiator_depth": 8,
    "tid": 64, "pkey": 16,
    "deadline": TIME_BITS, "retries": 4, "timeout": 5, "max_retries": 4,
    "active": 1, "port": 16, "src_port": 16,
})
