"""Sideband records of the RC responder: the FPGA as the target of RDMA WRITE and SEND (wire
headers are in :mod:`rocegen.wire.headers`, the requester's records in
:mod:`rocegen.gateware.roce.layouts`)."""

from amaranth.lib import data, enum

from rocegen.gateware.roce.layouts import ATOMIC_WORK, PACKET_DESC
from rocegen.wire import headers as H

__all__ = ["RespVerdict", "RespKind", "RESP_HEADER", "RESP_PLACE", "RESP_RESPONSE", "RESP_STATE", "MR_ENTRY",
           "RESP_QP_CONFIG", "RESP_CONFIG_WRITE", "RECV_POST", "RecvOpcode", "RecvStatus", "RECV_COMPLETION",
           "REQ_HDR_MAX", "REQ_HDR_MIN", "ACK_PAYLOAD", "CNP_PAYLOAD_BYTES", "LENGTH_BITS",
           "UNACKED_BITS", "CNP_MARK", "CNP_CONFIG", "CNP_INTERVAL_BITS", "CNP_DSCP",
           "RESP_READ", "RESP_READ_JOB", "READ_ROUTE", "READ_MAX", "READ_PROGRESS", "READ_TURN",
           "READ_RETURN", "READ_MEM", "RESP_READ_PACKET", "ATOMIC_OPERANDS", "REQ_HDR_ATOMIC"]

#: Bytes from the start of a request's IPv4 header to its payload: IPv4 20, UDP 8, BTH 12, at
#: most RETH 16 and ImmDt 4.
REQ_HDR_MIN = H.IPV4.length + H.UDP.length + H.BTH.length
REQ_HDR_MAX = REQ_HDR_MIN + H.RETH.length + H.IMMDT.length
#: ... and to an atomic request's end (AtomicETH 28, no payload).
REQ_HDR_ATOMIC = REQ_HDR_MIN + H.ATOMIC_ETH.length
#: UDP payload of an ACKNOWLEDGE before its ICRC (BTH and AETH) and of a CNP (BTH, 16 zero bytes).
ACK_PAYLOAD = H.BTH.length + H.AETH.length
CNP_PAYLOAD_BYTES = H.BTH.length + H.CNP_PAYLOAD.length
#: Bits of a packet's payload length (a datagram within the IP MTU of 4160 bytes).
LENGTH_BITS = 13
#: Bits of a QP's count of packets executed since its last answer (``ack_every`` is below
#: 2^UNACKED_BITS).
UNACKED_BITS = 8
#: Bits of the shortest time between two CNPs of a QP, in cycles.
CNP_INTERVAL_BITS = 24
#: DSCP of the CNPs: 48, as ConnectX sends them (``shared/spec/roce-wire.md``).
CNP_DSCP = 48


class RespVerdict(enum.Enum, shape=4):
    """What became of a request (the values of :class:`rocegen.sim.models.responder.responder.Verdict`)."""
    EXECUTED = 0
    DUPLICATE = 1       # behind ePSN: not executed, ACK of ePSN - 1
    SEQ_NAK = 2         # ahead of ePSN: NAK sequence error sent
    SEQ_DROP = 3        # ahead of ePSN, that NAK already sent
    RNR = 4             # no receive buffer: RNR NAK sent
    INVALID = 5         # NAK invalid request sent, the QP's responder to the error state
    ACCESS = 6          # NAK remote access error sent, the QP's responder to the error state
    DROP_QP = 7         # DestQP not in the table
    DROP_STATE = 8      # the QP is neither RTR nor RTS
    DROP_PEER = 9       # IPv4 source not the QP's peer
    DROP_PKEY = 10      # P_Key other than the default
    DROP_ERROR = 11     # the QP's responder is in the error state


class RespKind(enum.Enum, shape=2):
    """The message a QP's responder has in progress."""
    NONE = 0
    SEND = 1
    WRITE = 2


#: An atomic request's operands, as numbers (big-endian on the wire, in its AtomicETH).
ATOMIC_OPERANDS = data.StructLayout({"swap_add": 64, "compare": 64})

#: A request's headers as the responder's parse stage reads them from the first bytes of the
#: datagram (IPv4, UDP, BTH, and the RETH and ImmDt of its opcode; the ICRC already checked
#: and removed), with the lengths worked out. Carried as the packet's metadata.
RESP_HEADER = data.StructLayout({
    "src_ip": 32,
    "src_port": 16,            # UDP source port of the requester
    "ecn": 2,                  # IPv4 ECN field as received (0b11: congestion experienced)
    "bth": H.BTH.layout,
    "reth": H.RETH.layout,     # zero unless the opcode carries a RETH; an atomic's VA and
                               # R_Key (the AtomicETH's first 12 bytes are laid out as a
                               # RETH's) with a DMA length of 8
    "imm": 32,                 # zero unless the opcode carries an ImmDt
    "atomic": ATOMIC_OPERANDS, # an atomic's operands (zero for every other opcode)
    "hdr_len": 7,              # bytes before the payload: REQ_HDR_MIN + 16 RETH + 4 ImmDt
    "length": LENGTH_BITS,     # payload bytes, without the pad
})

#: What the placement stage does with one packet's payload (one record per packet, in order).
RESP_PLACE = data.StructLayout({
    "write": 1,                # 1: write the payload; 0: consume the packet and write nothing
    "addr": 32,                # local byte address of the first payload byte
    "skip": 7,                 # bytes of the datagram before its payload (RESP_HEADER.hdr_len)
    "length": LENGTH_BITS,     # payload bytes to write (the pad after them is never written)
})

#: A response the responder sends: an ACKNOWLEDGE (ACK, RNR NAK or NAK by its syndrome) or,
#: with ``cnp``, a congestion notification.
RESP_RESPONSE = data.StructLayout({
    "qp": 8,                   # QP index (responses of one QP may be coalesced)
    "cnp": 1,
    "syndrome": 8,             # AETH syndrome (ACKNOWLEDGE only)
    "psn": 24,                 # BTH PSN (ACKNOWLEDGE only; a CNP carries 0)
    "msn": 24,                 # AETH MSN (ACKNOWLEDGE only)
    "dest_qpn": 24,            # the peer's QP number
    "dst_ip": 32,
    "src_port": 16,            # UDP source port: the QP's
    "dscp": 6,
})

#: A QP's responder state (kept in the responder's state memory).
RESP_STATE = data.StructLayout({
    "epsn": 24,                # expected PSN
    "msn": 24,                 # messages completed
    "kind": RespKind,          # message in progress
    "nak_pending": 1,          # a sequence-error or RNR NAK was sent: silence until ePSN
    "error": 1,                # a fatal NAK was sent: requests are dropped until the QP is set
                               # up again
    "addr": 32,                # local byte address of the next payload byte of the message
    "remaining": 32,           # WRITE: bytes of the DMA length still to come; SEND: room left
                               # in the receive buffer
    "total": 32,               # WRITE: the DMA length; SEND: the receive buffer's length
    "wr_id": 32,               # SEND: the receive work request being filled
    "unacked": UNACKED_BITS,   # requests executed since the QP's last answer (0 unless the
                               # responder ACKs every ``ack_every`` requests)
})

#: A request that arrived marked ECN CE (congestion experienced) from its QP's peer: where the
#: QP's CNP goes (the peer's QP number and IPv4 address, the QP's UDP source port).
CNP_MARK = data.StructLayout({
    "qp": 8,
    "dest_qpn": 24,
    "dst_ip": 32,
    "src_port": 16,
})

#: The notification point's run-time setting: the shortest time between two CNPs of a QP.
CNP_CONFIG = data.StructLayout({"interval": CNP_INTERVAL_BITS})

#: Largest DMA length of an RDMA READ (IBTA: messages of at most 2^31 bytes).
READ_MAX = 1 << 31

#: An RDMA READ the responder executes (or a duplicate it executes again): what its responses
#: need of the request.
RESP_READ = data.StructLayout({
    "psn": 24,                 # of the request: the PSN of the first response
    "va": 32,                  # local byte address of the first byte
    "length": 32,              # bytes, 0 .. READ_MAX
    "msn": 24,                 # the AETH MSN of its responses
    "pmtu_log2": 4,            # 8 .. 12: payload bytes of every response but the last
})

#: Where a QP's READ responses go (from its QP context).
READ_ROUTE = data.StructLayout({
    "dest_qpn": 24,            # the peer's QP number
    "dst_ip": 32,
    "src_port": 16,            # UDP source port: the QP's
    "dscp": 6,
    "ecn": 2,
})

#: A READ handed to the READ queue: its QP, the READ, where its responses go.
#: With ``atomic.op`` other than NONE, an atomic: its answer is one ATOMIC_ACKNOWLEDGE of the 8
#: bytes at ``read.va`` (``read.length`` 8).
RESP_READ_JOB = data.StructLayout({"qp": 8, "read": RESP_READ, "route": READ_ROUTE,
                                   "atomic": ATOMIC_WORK})

#: How far the responses of a QP's oldest queued READ have gone: the PSN, local byte address
#: and bytes of the next response, and whether the first has been made.
READ_PROGRESS = data.StructLayout({"psn": 24, "va": 32, "left": 32, "started": 1})

#: A turn of the READ response generator: a QP's oldest queued READ, as far as it has gone.
READ_TURN = data.StructLayout({
    "qp": 8,
    "prog": READ_PROGRESS,
    "msn": 24,
    "pmtu_log2": 4,
    "route": READ_ROUTE,
    "atomic": ATOMIC_WORK,     # an atomic's operation (``op`` NONE for a READ)
})

#: The end of a turn: the READ done (all its responses made), or how far it has gone.
READ_RETURN = data.StructLayout({"qp": 8, "done": 1, "prog": READ_PROGRESS})

#: The memory read of one response's payload, in words of the data width W: the word address
#: of its first byte, that byte's place in the word, and the words to read (0: no payload).
READ_MEM = data.StructLayout({"addr": 32, "offset": 6, "words": 10})

#: One READ response packet: its descriptor for the packet builder
#: (:data:`~rocegen.gateware.roce.layouts.PACKET_DESC`: the AETH travels as an ImmDt, the same
#: four bytes after the BTH) and the memory read of its payload.
RESP_READ_PACKET = data.StructLayout({"desc": PACKET_DESC, "mem": READ_MEM,
                                      "atomic": ATOMIC_WORK})

#: A QP's memory region: the local bytes [base, base + length) the peer may write (``write``)
#: or read (``read``) with R_Key ``rkey`` (the virtual address a requester uses is the local
#: byte address).
MR_ENTRY = data.StructLayout({
    "rkey": 32,
    "base": 32,
    "length": 33,              # 0 .. 2^32 bytes
    "write": 1,                # remote write allowed
    "read": 1,                 # remote read allowed
})

#: A QP's responder configuration: its memory region and the RNR timer code its RNR NAKs carry.
RESP_QP_CONFIG = data.StructLayout({"mr": MR_ENTRY, "rnr_timer": 5})

#: A write into the responder's configuration table.
RESP_CONFIG_WRITE = data.StructLayout({"qp": 8, "config": RESP_QP_CONFIG})

#: A receive buffer posted by user logic for the SENDs (and WRITEs with immediate) of a QP.
RECV_POST = data.StructLayout({
    "qp": 8,
    "wr_id": 32,
    "addr": 32,                # local byte address
    "length": 32,              # bytes
})


class RecvOpcode(enum.Enum, shape=1):
    SEND = 0                   # a SEND (with or without immediate) filled the buffer
    WRITE_IMM = 1              # an RDMA WRITE with immediate consumed the buffer (no data in it)


class RecvStatus(enum.Enum, shape=2):
    OK = 0
    LENGTH = 1                 # a SEND longer than the buffer (NAK invalid request sent)
    INVALID = 2                # the SEND in progress was ended by an invalid request
    FLUSHED = 3                # the QP went to the error state, or was set up again


#: A receive completion, as user logic takes it.
RECV_COMPLETION = data.StructLayout({
    "qp": 8,
    "wr_id": 32,
    "opcode": RecvOpcode,
    "status": RecvStatus,
    "length": 32,              # bytes received (WRITE_IMM: the DMA length)
    "has_imm": 1,
    "imm": 32,
})
