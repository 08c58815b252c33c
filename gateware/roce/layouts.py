"""Metadata layouts of the RoCEv2 requester (sideband records, not wire headers: those are in
:mod:`rocegen.gateware.headers`)."""

from amaranth.lib import data, enum

from rocegen.gateware.headers import CM

__all__ = ["WrOpcode", "WORK_REQUEST", "QP_SEGMENT", "PACKET_DESC", "QpState", "QPN_BASE",
           "QP_CONTEXT", "WrSource", "CplStatus", "WR_TAGGED", "COMPLETION", "POST", "ACK_EVENT",
           "MAX_QPS", "CM_DATAGRAM", "CM_REPLY", "CM_RECORD_WRITE",
           "CM_CHECKS", "CM_RUN", "STREAM_FINISHED", "RING_COMMIT"]

#: Largest QP table (QP indices are 8 bits wide everywhere).
MAX_QPS = 256


class WrOpcode(enum.Enum, shape=2):
    WRITE = 0
    WRITE_IMM = 1
    SEND = 2
    SEND_IMM = 3


#: A work request, as the user's logic (or the traffic generator) posts it.
WORK_REQUEST = data.StructLayout({
    "wr_id": 32,
    "qp": 8,                  # QP index (QPN - 256)
    "opcode": WrOpcode,
    "local_addr": 32,         # payload address in local memory
    "length": 31,             # message length in bytes, 0 .. 2^31-1
    "remote_offset": 64,      # WRITE: added to the QP's base virtual address
    "imm": 32,
})

class WrSource(enum.Enum, shape=2):
    """Who posted a work request; completions go back to the same place."""
    USER = 0          # the user's work-request port (payload from local memory)
    STREAM = 1        # the streaming front end (payload in its ring in local memory)
    GENERATOR = 2     # the traffic generator (payload is the test pattern, not memory)


class CplStatus(enum.Enum, shape=4):
    """Status of a completion."""
    OK = 0              # every packet of the message was acknowledged
    BAD_QP = 1          # QP index outside the QP table
    QP_NOT_READY = 2    # the QP was not ready to send (RTS) when the request came to be sent
    LOCAL_ALIGN = 3     # local address not a multiple of the memory word (W/8 bytes)
    LOCAL_LENGTH = 4    # local buffer [local_addr, local_addr + length) outside local memory
    FLUSHED = 5         # the QP went to the error state (or was closed) before it completed
    RETRY_EXCEEDED = 6  # timeouts / sequence-error rewinds ran out of retries (retry_cnt)
    RNR_RETRY_EXCEEDED = 7  # RNR NAKs ran out of retries (rnr_retry)
    REMOTE_INVALID = 8  # the responder answered NAK invalid request
    REMOTE_ACCESS = 9   # the responder answered NAK remote access error
    REMOTE_OP = 10      # the responder answered NAK remote operational error


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


class QpState(enum.Enum, shape=3):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 4


#: First QP number; QP index k has QPN ``QPN_BASE + k``.
QPN_BASE = 256

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
