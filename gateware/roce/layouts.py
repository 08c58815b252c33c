"""Metadata layouts of the RoCEv2 requester (sideband records, not wire headers: those are in
:mod:`rocegen.wire.headers`)."""

from amaranth.hdl import unsigned
from amaranth.lib import data, enum

from rocegen.wire import verbs
from rocegen.wire.cm import QPN_BASE
from rocegen.wire.headers import CM

__all__ = ["check_num_qps", "check_wr_depth", "qp_index", "MAX_WR_DEPTH",
           "WrOpcode", "WORK_REQUEST", "QP_SEGMENT", "PACKET_DESC", "QpState", "QPN_BASE",
           "QP_CONTEXT", "WrSource", "CplStatus", "WR_TAGGED", "COMPLETION", "POST", "ACK_EVENT",
           "MAX_QPS", "CONTEXT_WRITE", "PSN_WRITE", "PSN_SET", "RKEY_WRITE", "QP_SERVICE", "SENT",
           "SchedKind", "SCHED_EVENT", "FREED",
           "TIME_BITS", "RETRY_STATE", "RetryEvKind", "RETRY_EVENT", "RETRY_FLAGS", "RETRY_DECIDED",
           "CM_DATAGRAM", "CM_REPLY", "CM_RECORD_WRITE", "CM_CHECKS", "CM_RUN", "STREAM_FINISHED",
           "RING_COMMIT", "TRAFFIC_CONFIG", "ECN_ECT0", "PFC_CONFIG", "AtomicOp", "ATOMIC_WORK",
           "ATOMIC_RESULT"]

#: Largest QP table (QP indices are 8 bits wide everywhere).
MAX_QPS = 256


def check_num_qps(num_qps):
    """``num_qps`` if it is a QP count the blocks take (an integer 1..:data:`MAX_QPS`); else
    ``TypeError`` (not an integer) or ``ValueError`` (out of range), naming the parameter."""
    if not isinstance(num_qps, int) or isinstance(num_qps, bool):
        raise TypeError(f"num_qps must be an integer, not {num_qps!r}")
    if not 1 <= num_qps <= MAX_QPS:
        raise ValueError(f"num_qps must be 1..{MAX_QPS}, not {num_qps}")
    return num_qps


#: Most work requests a QP of the requester holds (the scheduler's ring and the completion
#: tracker's queue of each QP, both in block RAM).
MAX_WR_DEPTH = 1024


def check_wr_depth(depth, name="depth"):
    """``depth`` if it is a work-request ring size the requester's blocks take (a power of two
    1..:data:`MAX_WR_DEPTH`); else ``TypeError`` (not an integer) or ``ValueError`` (out of
    range), naming the parameter ``name``."""
    if not isinstance(depth, int) or isinstance(depth, bool):
        raise TypeError(f"{name} must be an integer number of work requests, not {depth!r}")
    if depth & (depth - 1) or not 1 <= depth <= MAX_WR_DEPTH:
        raise ValueError(f"{name} must be a power of two from 1 to {MAX_WR_DEPTH}, not {depth}")
    return depth


def qp_index(qpn, num_qps):
    """The index in a table of ``num_qps`` QPs (numbered from :data:`QPN_BASE`) of QP number
    ``qpn`` (a value), as many bits as an index needs (at least one)."""
    return (qpn - QPN_BASE)[:max(1, (num_qps - 1).bit_length())]


def _hardware_enum(py_enum, shape):
    """The Amaranth enum of ``shape`` with the members of ``py_enum`` (a :mod:`rocegen.wire.verbs`
    enum): the same name, member names, values and docstring."""
    namespace = enum.EnumType.__prepare__(py_enum.__name__, (enum.Enum,), shape=shape)
    namespace["__module__"] = __name__
    namespace["__qualname__"] = py_enum.__name__
    namespace["__doc__"] = py_enum.__doc__
    for member in py_enum:
        namespace[member.name] = member.value
    return enum.EnumType(py_enum.__name__, (enum.Enum,), namespace, shape=shape)


#: What a work request does (:class:`rocegen.wire.verbs.WrOpcode`).
WrOpcode = _hardware_enum(verbs.WrOpcode, 3)


#: A work request, as the user's logic (or the traffic generator) posts it.
WORK_REQUEST = data.StructLayout({
    "wr_id": 32,
    "qp": 8,                  # QP index (QPN - 256)
    "opcode": WrOpcode,
    "local_addr": 32,         # payload address in local memory
    "length": 31,             # message length in bytes, 0 .. 2^31-1
    "remote_offset": 64,      # WRITE, READ: added to the QP's base virtual address
    "imm": 32,
})

class WrSource(enum.Enum, shape=2):
    """Who posted a work request; completions go back to the same place."""
    USER = 0          # the user's work-request port (payload from local memory)
    STREAM = 1        # the streaming front end (payload in its ring in local memory)
    GENERATOR = 2     # the traffic generator (payload is the test pattern, not memory)
    RESPONDER = 3     # the responder's RDMA READ responses (no work request, no completion)


#: Status of a completion (:class:`rocegen.wire.verbs.CplStatus`).
CplStatus = _hardware_enum(verbs.CplStatus, 4)


class AtomicOp(enum.Enum, shape=2):
    """What the payload reader does with the memory word of a responder's descriptor: the
    responder's atomics are executed where their word is read, so that the read, the
    arithmetic and the write back are one step against every other write of the memory."""
    NONE = 0            # any packet but an atomic's answer: the memory's bytes as they are
    FETCH_ADD = 1       # the 8 bytes plus ``swap_add`` written back; the original answered
    COMPARE_SWAP = 2    # ``swap_add`` written back when the 8 bytes equal ``compare``
    REPLAY = 3          # a duplicate's answer: ``swap_add`` is the original value, no memory


#: The atomic an ATOMIC_ACKNOWLEDGE descriptor answers, beside the descriptor on its way to the
#: payload reader: the operation and its operands as numbers (the AtomicETH's, big-endian on
#: the wire); a REPLAY's ``swap_add`` is the original value it answers with.
ATOMIC_WORK = data.StructLayout({"op": AtomicOp, "swap_add": 64, "compare": 64})

#: An atomic executed: its QP, its request's PSN and the value its 8 bytes held before (the
#: responder keeps the last ones to answer duplicates with).
ATOMIC_RESULT = data.StructLayout({"qp": 8, "psn": 24, "orig": 64})


#: A work request with the source that posted it (what the scheduler takes).
WR_TAGGED = data.StructLayout({"wr": WORK_REQUEST, "src": WrSource})

#: A completion, like a NIC's completion queue entry.
COMPLETION = data.StructLayout({
    "wr_id": 32,
    "qp": 8,
    "status": CplStatus,
    "src": WrSource,
})

#: A started (or refused) work request, as the scheduler announces it to the completion tracker:
#: it completes once ``last_psn`` is acknowledged, or as soon as it is at the head of its QP's
#: queue when ``status`` is not OK.
POST = data.StructLayout({
    "wr_id": 32,
    "qp": 8,
    "src": WrSource,
    "status": CplStatus,
    "last_psn": 24,
})

#: An acknowledgement received for one of our QPs (after the ICRC and QP checks).
ACK_EVENT = data.StructLayout({
    "qp": 8,
    "syndrome": 8,            # AETH syndrome: 0b000xxxxx ACK, 0b001 RNR NAK, 0b011 NAK
    "psn": 24,
    "msn": 24,
})

#: What segmentation needs of a QP's state, read when its work request starts.
QP_SEGMENT = data.StructLayout({
    "dest_qpn": 24,
    "rkey": 32,
    "base_va": 64,
    "psn": 24,                # next PSN to send
    "pmtu_log2": 4,           # 8 .. 12 (256 .. 4096 bytes)
    "ack_every_log2": 3,      # AckReq also on every 2^n-th packet inside a message
})

#: One packet of a message, as the segmenter describes it to the packet builder.
PACKET_DESC = data.StructLayout({
    "wr_id": 32,
    "qp": 8,
    "dest_qpn": 24,
    "opcode": 8,              # BTH opcode
    "psn": 24,
    "ack_req": 1,
    "se": 1,
    "padcnt": 2,
    "local_addr": 32,         # of this packet's payload
    "length": 13,             # payload bytes, 0 .. 4096
    "has_reth": 1,
    "va": 64,
    "rkey": 32,
    "dma_len": 32,
    "has_imm": 1,
    "imm": 32,
    "last": 1,                # last packet of the message
    "src": WrSource,          # GENERATOR: the payload is the test pattern at local_addr
    "peer_ip": 32,            # from the QP context: where the packet goes
    "udp_sport": 16,
    "dscp": 6,
    "ecn": 2,
})


#: The IPv4 ECN code point ECT(0): ECN-capable transport (a switch marks CE rather than drop).
ECN_ECT0 = 0b10

#: The traffic class of the endpoint's packets (a run-time setting): ``dscp`` and ``ecn`` (the
#: IPv4 ECN code point of data packets, :data:`ECN_ECT0` or 0) go into the context of every QP
#: the connection manager opens; ``pcp`` is the 802.1Q priority of every frame sent with a VLAN
#: tag.
TRAFFIC_CONFIG = data.StructLayout({"dscp": 6, "ecn": 2, "pcp": 3})

#: PFC's run-time setting: on or off, and the priority of the endpoint's traffic (the one whose
#: pause frames hold its transmitter and that its XOFF names).
PFC_CONFIG = data.StructLayout({"enable": 1, "prio": 3})


#: The state of a QP (:class:`rocegen.wire.verbs.QpState`).
QpState = _hardware_enum(verbs.QpState, 3)



#: A QP's context in the QP table (everything but its next PSN, which has its own port).
QP_CONTEXT = data.StructLayout({
    "state": QpState,
    "peer_ip": 32,
    "peer_qpn": 24,
    "rkey": 32,
    "base_va": 64,
    "pmtu_log2": 4,           # 8 .. 12
    "udp_sport": 16,
    "dscp": 6,
    "ecn": 2,
    "ack_every_log2": 3,
    "timeout": 5,             # 4.096 us x 2^timeout, 0 = never
    "retry_cnt": 3,
    "rnr_retry": 3,           # 7 = forever
})


#: A write of a QP's context into the QP table (and to the retry engine).
CONTEXT_WRITE = data.StructLayout({"qp": 8, "context": QP_CONTEXT})

#: A write of a QP's next PSN: from the control side (a connection set up) into the QP table and
#: the retry engine, and from the scheduler into the QP table (a message started).
PSN_WRITE = data.StructLayout({"qp": 8, "psn": 24})

#: A PSN write that sets, beside the QP's next PSN, the PSN its responder expects (``epsn``):
#: the IB CM's, whose connections the FPGA asked for expect the peer's own starting PSN (the
#: others expect the one they send from).
PSN_SET = data.StructLayout({"qp": 8, "psn": 24, "epsn": 24})

#: A write of a QP's R_Key alone (the context's ``rkey``: the one the QP's READs and WRITEs name
#: in their RETHs from then on), by a service that learns its peer's buffers as it goes.
RKEY_WRITE = data.StructLayout({"qp": 8, "rkey": 32})

#: A QP a connection manager opened for a gateware service (``open`` set: a new connection, the
#: service starts) or closed (``open`` clear: its connection ended, the service ends): ``qp`` the
#: QP index (QPN - 256).
QP_SERVICE = data.StructLayout({"qp": 8, "open": 1})

#: What the scheduler reports to the retry engine of the packets it issues: the QP, the PSN of
#: the newest packet and how many packets this record stands for, with consecutive PSNs ending
#: at ``psn`` (the scheduler merges the records of one QP while the engine is busy).
SENT = data.StructLayout({"qp": 8, "psn": 24, "packets": 6})


class SchedKind(enum.Enum, shape=2):
    """What the retry engine tells the scheduler about a QP."""
    ADVANCE = 0     # the acknowledged PSN moved: the QP's window may have opened
    REWIND = 1      # resend from the oldest unacknowledged packet
    RESET = 2       # the connection was set up again: forget the old one's requests


#: An event of the retry engine for the scheduler (a one-cycle pulse: the stream is always
#: ready).
SCHED_EVENT = data.StructLayout({"qp": 8, "kind": SchedKind})

#: The QP of a work request that left the completion tracker's queue: its scheduler slot is
#: free (a one-cycle pulse: the stream is always ready).
FREED = unsigned(8)


#: Bits of the retry engine's time base (ticks of 1.024 us): the longest timeout (4.096 us x
#: 2^31 = 2^33 ticks) is less than half its range, so deadlines compare in serial arithmetic.
TIME_BITS = 36

#: The per-QP state the retry engine keeps.
RETRY_STATE = data.StructLayout({
    "acked": 24,            # last acknowledged PSN (the oldest unacknowledged is acked + 1)
    "sent_max": 24,         # the PSN after the newest packet sent
    "deadline": TIME_BITS,  # when the armed timer fires
    "armed": 1,
    "rnr_wait": 1,          # the timer is an RNR wait (the QP is held)
    "retries": 3,           # timeouts and sequence-error rewinds since the last progress
    "rnr_retries": 3,       # RNR waits since the last progress
    "timeout": 5,           # the QP's timeout code, retry_cnt and rnr_retry (from its context)
    "retry_cnt": 3,
    "rnr_retry": 3,
    "rewind_psn": 24,       # the PSN of the last sequence-error rewind
    "rewind_active": 1,     # ... and no progress since it
    "err_status": CplStatus,
})


class RetryEvKind(enum.Enum, shape=3):
    """The kind of an event in the retry engine's pipeline."""
    PSN = 0
    CTX = 1
    FIRE = 2
    ACK = 3
    SENT = 4


#: An event the retry engine has taken, as its first stage registers it.
RETRY_EVENT = data.StructLayout({
    "kind": RetryEvKind,
    "qp": 8,
    "in_table": 1,          # the QP is inside the table (else the event changes nothing)
    "psn": 24,              # psn_set, ack or sent: the PSN
    "syn": 8,               # ack: the syndrome
    "packets": 6,           # sent: the packets
    "first": 24,            # sent: the PSN of the first packet
    "ctx": data.StructLayout({"state": QpState, "timeout": 5, "retry_cnt": 3, "rnr_retry": 3}),
    "now": TIME_BITS,       # the tick it was taken in, and that tick + 1
    "now1": TIME_BITS,
})

#: What an event does to its QP, as the retry engine's decision stage works it out (one flag
#: each: see :class:`~rocegen.gateware.roce.requester.retry_decide.RetryDecide`).
RETRY_FLAGS = data.StructLayout({name: 1 for name in (
    "psn", "ctx", "sent", "prog", "prog_end", "acks", "stale", "seq", "seq_rew", "rnr",
    "rnr_start", "fatal", "ignored_range", "ignored_seq", "ignored_rnr", "ignored_code",
    "fire_rnr", "fire_stop", "timeouts",
    "fire_rew", "sent_restart", "sent_newer", "fail_flush", "fail_retry", "fail_rnr",
    "timeout_nz")})

#: An event decided: its flags, the QP's state as read and the values the new state is made of.
RETRY_DECIDED = data.StructLayout({
    "qp": 8,
    "in_table": 1,
    "flags": RETRY_FLAGS,
    "st": RETRY_STATE,
    "psn": 24,
    "psn1": 24,             # psn + 1
    "pm1": 24,              # psn - 1
    "ctx": RETRY_EVENT["ctx"].shape,
    "fatal_status": CplStatus,
    "packets": 6,
    "resent": 6,
    "seq_retries": 3,       # retries after a sequence NAK's rewind
    "rnr_retries": 3,       # rnr_retries after an RNR NAK's wait
    "dl_timeout": TIME_BITS,    # now + 1 + the QP's timeout
    "dl_rnr": TIME_BITS,        # now + 1 + the RNR delay of the NAK's code
})


# ---- between the connection manager's blocks ----

#: A connection-manager datagram as received and held: its 64 bytes by field, where it came from
#: and went to, and whether it was exactly 64 undamaged bytes.
CM_DATAGRAM = data.StructLayout({
    "req": CM.layout,
    "src_ip": 32,
    "dst_ip": 32,
    "src_port": 16,
    "dst_port": 16,
    "length_ok": 1,
})

#: A reply to send: its 64 bytes by field, the UDP source address (for the checksum's
#: pseudo-header) and where it goes.
CM_REPLY = data.StructLayout({
    "fields": CM.layout,
    "src_ip": 32,
    "dst_ip": 32,
    "dst_port": 16,
})

#: An update of the connection manager's record of a QP: owner and context, and whether the QP
#: leaves the pool of free numbers (``take``) or returns to it (``release``).
CM_RECORD_WRITE = data.StructLayout({
    "qp": 8,
    "owner": 32,
    "context": QP_CONTEXT,
    "take": 1,
    "release": 1,
})

#: What the connection manager finds out about a request from the datagram alone.
CM_CHECKS = data.StructLayout({
    "ext_ok": 1,              # the extension codes are legal (path MTU 0..5, timeout 0..31)
    "src_allowed": 1,         # the sender is inside allow_net
    "peer_allowed": 1,        # loc_ip is inside allow_net
    "opening": 1,             # an OPEN_QP request...
    "open_ok": 1,             # ... that gets a QP if it passes the other checks
    "addr_bad": 1,            # not addressed to our IPv4 address and port
    "gen_bad": 1,             # test traffic with dma_length >= 2^31 or a window code above 31
})

#: A test-traffic request that starts a traffic generator run on QP ``qp``.
CM_RUN = data.StructLayout({"qp": 8, "req": CM.layout})

# ---- between the streaming front end's blocks ----

#: A message the streaming front end has stored: its work request and the number of words
#: written to memory (counting from the first) once its last word is written.
STREAM_FINISHED = data.StructLayout({"wr": WORK_REQUEST, "end": 32})

#: A message the streaming front end has stored, as its ring placement sees it: the word offset
#: in the ring of its last beat, and whether that beat wrote a word there.
RING_COMMIT = data.StructLayout({"pos": 32, "write": 1})


#: Width of a packet index within a message: a message of 2^31-1 bytes in 256-byte packets has
#: 2^23 of them.
INDEX_BITS = 23

#: One entry of the scheduler's work-request memory: the request, who posted it and the verdict
#: of the checks made when it was queued (OK, LOCAL_ALIGN, LOCAL_LENGTH or UNSUPPORTED).
SLOT = data.StructLayout({"wr": WORK_REQUEST, "src": WrSource, "status": CplStatus})

#: Progress of the message a QP is sending (one entry per QP in the scheduler): index, PSN and
#: byte offset of its next packet.
PROGRESS = data.StructLayout({"index": INDEX_BITS, "psn": 24, "offset": 31})

#: The PSNs a started work request took (one entry per scheduler slot): its first and last PSN,
#: and whether it was sent at all (0: refused).
SLOT_PSNS = data.StructLayout({"first": 24, "last": 24, "sent": 1})

#: A scheduler turn as its build stage works it out for the issue stage: what the turn does
#: (``packet``: sends the packet ``desc`` of PSN ``psn``; ``new``: starts its request and posts
#: ``post``, refused when ``refuse``; ``fin``: the request leaves the sending position;
#: ``shut``: the packet is outside the window), the QP's error state and whether an event of
#: the QP came while it was worked out (``err``, ``ev``), the index of the message's last
#: packet (``last``) and the progress to write back (``prog``, when ``prog_we``).
SCHED_TURN = data.StructLayout({
    "packet": 1, "new": 1, "refuse": 1, "fin": 1, "shut": 1, "err": 1, "ev": 1,
    "desc": PACKET_DESC, "psn": 24, "post": POST, "last": INDEX_BITS,
    "prog_we": 1, "prog": PROGRESS,
})

#: What a scheduler turn adds when the scheduler sends RDMA READ requests: whether the turn's
#: request is a READ (``read``), the PSN its ``sent`` record reports (``sent_psn``: a READ
#: request's last PSN, the packet's PSN otherwise), and for the READ requester's table the
#: request's local address (not advanced by a resume), whole length and first PSN, and the QP's
#: path MTU code; an atomic is one, of 8 bytes, with its operation.
SCHED_READ = data.StructLayout({
    "read": 1, "sent_psn": 24, "local_addr": 32, "length": 31, "first": 24, "pmtu_log2": 4,
    "atomic": AtomicOp,       # an atomic (``read`` set too: it is answered as an 8-byte READ)
})

#: A write into the scheduler's memory of the PSNs a work request took (slot address, a
#: one-cycle pulse: the stream is always ready).
SLOT_PSNS_WRITE = data.StructLayout({"addr": 14, "psns": SLOT_PSNS})

#: A write of a QP's progress in the scheduler (a one-cycle pulse: the stream is always ready).
PROGRESS_WRITE = data.StructLayout({"qp": 8, "progress": PROGRESS})

#: A work request written into the scheduler's queue memory (slot address, a one-cycle pulse:
#: the stream is always ready).
SLOT_WRITE = data.StructLayout({"addr": 14, "slot": SLOT})
