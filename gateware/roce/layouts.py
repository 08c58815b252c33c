"""Metadata layouts of the RoCEv2 requester (sideband records, not wire headers: those are in
:mod:`rocegen.gateware.headers`)."""

from amaranth.lib import data, enum

__all__ = ["WrOpcode", "WORK_REQUEST", "QP_SEGMENT", "PACKET_DESC", "QpState", "QPN_BASE",
           "QP_CONTEXT"]


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
