"""Reference model of the host RNIC (the ConnectX NIC the FPGA talks to) playing the RoCEv2 RC
*responder*: the FPGA is the requester and RDMA-WRITEs and SENDs into the host memory this model
exposes, and RDMA-READs from it; and, on the same QPs, the RC *requester*
(:mod:`rocegen.sim.models.rnic_requester`): the host RDMA-WRITEs, SENDs and RDMA-READs towards the
FPGA (:meth:`Rnic.post_send`, frames paced out by :meth:`Rnic.next_frames`, send completions in
:attr:`Rnic.send_cq`). Written with scapy and independent of the gateware.

Everything is Ethernet frames without FCS: :meth:`Rnic.receive` takes one frame from the wire and
returns the frames the RNIC sends in answer (ARP replies, ACK/NAK), so the model can sit on any
simulated MAC port. Nothing depends on wall-clock time: the model is a pure function of the
frames it is given and of the calls made on it (``post_recv``, ``rnr_for``...).

What it models (the InfiniBand RC responder rules as a ConnectX NIC applies them):

* ARP: answers requests for its IP, learns the senders (and replies to ``arp_request``).
* QPs (:meth:`Rnic.create_qp`), memory regions backed by bytearrays (:meth:`Rnic.register_mr`),
  a receive queue per QP (:meth:`Rnic.post_recv`) and one completion queue (:attr:`Rnic.cq`).
* The RC responder on UDP 4791: ePSN with 24-bit modular comparison, in-order execution of
  RDMA WRITE FIRST/MIDDLE/LAST/ONLY (+ WITH_IMMEDIATE) and SEND FIRST/MIDDLE/LAST/ONLY
  (+ WITH_IMMEDIATE), MSN counting, ACK on AckReq (optionally only every ``ack_coalesce``-th),
  one PSN-sequence-error NAK per gap then silence, duplicates re-ACKed with ePSN - 1 and not
  executed, RNR NAK, remote access error, invalid request, silent drops -- every event counted
  in :attr:`Rnic.counters`; RDMA READ on QPs created with REMOTE_READ access (see below).

How the NIC answers is :class:`Behaviour` (``behaviour=``), every field of which defaults to
what a ConnectX shows; :data:`IDEAL` is the kinder peer of earlier versions of this model (one
ACK per AckReq at once, credit code 0x1F, no port MTU). With a ConnectX-like behaviour:

* the AETH of every ACK carries the credit code of the receive WQEs posted on the QP (IBTA
  9.7.5.1.2, :func:`credit_code`); ``credits="none"`` sends 0x1F, ``"random"`` any code
  0x00..0x1F drawn from the seed;
* ACKs are coalesced and cumulative: an ACK (of the latest PSN executed, ePSN - 1) leaves after
  every ``ack_every`` packets executed, and at the latest ``ack_timer_ns`` after the first
  AckReq packet it covers; a NAK or a duplicate's ACK (cumulative too) replaces the pending one;
* every answer leaves after a delay drawn in ``response_ns`` (answers stay in order);
* frames shorter than ``min_frame`` (60) bytes before the FCS are dropped and counted as a MAC
  does (``eth_drop_runt``), and so are frames whose IP packet is larger than the port ``mtu``
  (``eth_drop_mtu``); an RDMA WRITE whose RETH DMA length is over ``max_msg`` (2^31) is NAKed
  invalid request.

Time exists only for a caller that gives it: ``receive(frame, now=...)`` (nanoseconds) queues
the answers, which :meth:`Rnic.due` returns when their time comes (:meth:`Rnic.next_due` says
when); without ``now`` every answer is returned at once and only ``ack_every`` coalesces.
The requester's packets and the READ responses are not answers: a testbench takes them with
:meth:`Rnic.next_frames` (``now``, ``budget``) whenever its link can carry more (one frame at a
time at line rate, say), :meth:`Rnic.tx_pending` says how many the windows let go now, and
:meth:`Rnic.next_due` also covers the requester's timers (a retransmit timeout, the end of an
RNR wait), after which :meth:`Rnic.next_frames` has frames again.
Faults a ConnectX does not make but that a requester must survive can be injected, each with a
probability per ACK sent (off by default): a second copy of the ACK later (``dup_ack``), an ACK
of a PSN the requester never sent (``ghost_ack``: 2^22..2^23 - 1 ahead of ePSN), a runt (the
ACK cut to 1..59 bytes, ``runt``) and an oversize frame (the ACK's UDP datagram grown to an IP
length drawn in ``oversize_len``, checksums valid, ``oversize``). Each is counted
(``ack_dup_tx``, ``ack_ghost_tx``, ``runt_tx``, ``oversize_tx``); ``ack_tx`` counts the ACKs
proper only. ``runt``, ``oversize`` and ``dup_ack`` also apply to every READ response packet (the
copies follow it; a second copy counts ``read_dup_tx``), and :meth:`Rnic.read_fault` spoils
chosen READ responses (dropped, too few or too many packets, a wrong opcode, length, PSN or AETH
syndrome: :data:`READ_FAULTS`, counted ``read_fault_tx``). Loss, duplication, reordering and
corruption on the wire are the links' (:mod:`rocegen.sim.models.link`), for READ responses as for
every frame.

``strict=True`` turns every *malformed* frame or *protocol violation by the requester* into an
``AssertionError`` with a precise message (a testbench fails on it). Conditions a correct
requester can legitimately meet -- lost packets (PSN gaps), duplicates after a retransmission,
RNR, a bad R_Key or an out-of-region address chosen by the test, a SEND longer than the buffer
the test posted, packets arriving at a QP already in the error state -- never raise: they are
handled as a ConnectX does and counted. See :data:`STRICT_CHECKS` for the list of what raises.

Decisions where the spec is silent (and which follow rxe / the IBTA as noted):

* Errors NAKed with invalid request / remote access error / remote operational error are
  IBTA "class C": after sending the NAK the responder QP goes to the error state; later packets
  to it are dropped silently (``drop_qp_error``), its posted receive WQEs complete with
  ``WR_FLUSH_ERR``, and a receive WQE being filled by a SEND completes with an error status.
  The QP must be destroyed and created again (as with verbs).
* A SEND longer than the posted receive buffer: NAK *invalid request* (0x61) and completion
  ``LOC_LEN_ERR`` on the responder. This is what ConnectX (requester sees
  ``IBV_WC_REM_INV_REQ_ERR``, receiver ``IBV_WC_LOC_LEN_ERR``) and rxe (``RESPST_ERR_LENGTH``)
  do; *remote operational error* is reserved for malformed receive WQEs, which the model
  cannot have.
* Length errors (FIRST/MIDDLE payload != PMTU, LAST payload 0 or > PMTU, ONLY > PMTU, PadCnt on
  a FIRST/MIDDLE packet, WRITE total != RETH DMA length) are NAK invalid request (rxe, IBTA).
* Zero-length RDMA WRITE: the R_Key and address are not checked (IBTA; rxe and ConnectX agree).
* Check order for a packet with PSN == ePSN (rxe's): opcode sequence / unsupported opcode,
  then receive-WQE availability (RNR), then length, then R_Key/access/bounds, then execute.
* An RNR NAK arms the same "one NAK then silence" state as a PSN-sequence NAK: packets ahead of
  the refused PSN that were already in flight are dropped silently until the requester resends
  the refused PSN, so a sequence NAK cannot cut the requester's RNR wait short.
* Duplicates are ACKed (PSN = ePSN - 1) whatever their AckReq bit and ``ack_coalesce``.
* RDMA READ (the wire notes' "RDMA READ"; IBTA and rxe's ``rxe_resp.c`` where they are silent)
  is answered on a QP whose ``access`` (the verbs ``qp_access_flags``, :meth:`Rnic.create_qp`)
  holds REMOTE_READ; without it (the default) a READ is an unsupported opcode (NAK invalid
  request), as rxe's ``check_op_valid`` has it. Checks in rxe's order: opcode sequence (no SEND
  or WRITE in progress), then at most ``max_dest_rd_atomic`` (default 16) READs queued whose
  responses are not all sent (one more: NAK invalid request, ``err_rd_atomic``), then length (no
  payload; DMA length at most ``max_msg``), then -- for a length above 0 -- R_Key, REMOTE_READ
  access of the region and [VA, VA + length) inside it, else NAK remote access error (0x62)
  with the request's PSN (all class C: the QP goes to the error state). A READ takes
  ceil(length / PMTU) PSNs (1 for 0 bytes): ePSN moves past them, MSN + 1, a pending ACK is
  dropped (the responses acknowledge). The bytes are read when the request executes.
* READ responses: PSNs from the request's; ONLY when length <= PMTU, else FIRST, MIDDLE...,
  LAST; AETH (the ACK syndrome with the credit code of every ACK, the MSN counting the READ)
  on FIRST/LAST/ONLY; PMTU bytes per packet but the last, PadCnt and zero pad. They leave
  through :meth:`Rnic.next_frames` (the line's pace), a response delay after the request
  (``response_ns``, in order with the answers before them), one packet per turn of the QP, and
  every later answer of that QP (ACK, NAK) waits behind them: a QP answers in PSN order.
* A duplicate READ (PSN behind ePSN) is executed again from its own PSN, with the VA and length
  it carries, if one of the last ``max_dest_rd_atomic`` READs holds that PSN and the request
  reads a part of what that READ read with its R_Key (rxe); else it is dropped
  (``read_dup_drop``). Its responses read the memory again.
* Atomics are not supported: NAK invalid request. Response opcodes (READ responses,
  ACKNOWLEDGE, to a QP whose requester has sent nothing yet; ATOMIC_ACKNOWLEDGE always) are
  dropped (``drop_response``); the ACKNOWLEDGEs and READ responses of a QP that has sent
  requests go to its requester. CNPs are counted (``cnp_rx``) and otherwise ignored.
* A QP has one state: a class C error of its responder flushes its send work requests too, and
  a failure of its requester (fatal NAK, retries exhausted) flushes its receive WQEs.
* IPv4 only (the ICRC helper also handles IPv6). UDP datagrams to other ports listed in
  ``udp_ports`` are collected in :attr:`Rnic.udp_rx` (for the out-of-band connection manager).
* Outgoing frames: IPv4 DF, TTL 64, identification counting from 1, UDP checksum 0, UDP source
  port per QP in 0xC000..0xFFFF (hashed from the QP numbers unless given), BTH MigReq 1 (what
  ConnectX sends; ``migreq=0`` for rxe), destination MAC from ``peer_mac``, else the ARP cache,
  else the source MAC of the frame being answered.

The ICRC comes from the project's ICRC reference, :mod:`rocegen.sim.models.icrc` (checked
against independently computed vectors).
"""

import dataclasses
import enum
import heapq
import random
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.utils import checksum

from rocegen.sim.models import rnic_requester as _req
from rocegen.sim.models.icrc import icrc as _icrc
from rocegen.sim.models.rnic_requester import (
    DEFAULT_RD_ATOMIC,
    DEFAULT_TIMEOUT,
    DEFAULT_WINDOW,
    MAX_MSG,
    READ_RESPONSES,
    SendOp,
    SendQueue,
)
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

__all__ = [
    "Rnic", "QueuePair", "MemoryRegion", "RecvWqe", "Completion", "Access", "WcOpcode", "WcStatus",
    "Op", "SendOp", "SendQueue", "psn_diff", "Behaviour", "IDEAL", "credit_code", "CREDITS", "COUNTERS",
    "STRICT_CHECKS", "ROCE_PORT", "PMTUS", "READ_FAULTS",
    "SYN_ACK", "SYN_RNR", "NAK_PSN_SEQ", "NAK_INV_REQ", "NAK_REM_ACCESS", "NAK_REM_OP",
]

ROCE_PORT = 4791
PMTUS = (256, 512, 1024, 2048, 4096)
PSN_MASK = 0xFFFFFF
BROADCAST = b"\xff" * 6
MIN_FRAME = 60

# AETH syndromes
SYN_ACK = 0x1F          # ACK, no credit limit
SYN_RNR = 0x20          # | RNR timer code
NAK_PSN_SEQ = 0x60
NAK_INV_REQ = 0x61
NAK_REM_ACCESS = 0x62
NAK_REM_OP = 0x63


#: IBTA 9.7.5.1.2: AETH credit code n (0..30) advertises at least ``CREDITS[n]`` receive WQEs
CREDITS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
           1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768)


def credit_code(wqes):
    """The AETH credit code advertising ``wqes`` receive WQEs: the largest code whose count
    is not more than ``wqes``."""
    code = 0
    while code + 1 < len(CREDITS) and CREDITS[code + 1] <= wqes:
        code += 1
    return code


@dataclass(frozen=True)
class Behaviour:
    """How the NIC answers (see the module documentation); every default is a ConnectX's.

    ``credits``: ``"rq"`` (the receive WQEs posted), ``"none"`` (0x1F) or ``"random"``.
    ``ack_every``: an ACK after this many packets executed (``None``: only on AckReq).
    ``ack_timer_ns``: the longest a pending ACK of an AckReq packet waits (0: sent at once).
    ``response_ns``: ``(lo, hi)`` delay of every answer, drawn uniformly. ``min_frame``: shortest
    frame taken, bytes before the FCS. ``mtu``: largest IP packet taken (``None``: no limit).
    ``max_msg``: largest RETH DMA length (``None``: no limit). ``dup_ack``, ``ghost_ack``,
    ``runt``, ``oversize``: fault probabilities per ACK sent; ``oversize_len``: ``(lo, hi)``
    IP length of an oversize frame. ``seed``: of the random choices.
    """
    credits: str = "rq"
    ack_every: int | None = 16
    ack_timer_ns: float = 1000.0
    response_ns: tuple = (300.0, 1200.0)
    min_frame: int = 60
    mtu: int | None = 4200
    max_msg: int | None = 1 << 31
    dup_ack: float = 0.0
    ghost_ack: float = 0.0
    runt: float = 0.0
    oversize: float = 0.0
    oversize_len: tuple = (9001, 9600)
    seed: int = 0

    def __post_init__(self):
        if self.credits not in ("rq", "none", "random"):
            raise ValueError(f"credits must be 'rq', 'none' or 'random', not {self.credits!r}")
        if self.ack_every is not None and (not isinstance(self.ack_every, int)
                                           or self.ack_every < 1):
            raise ValueError(f"ack_every must be None or an integer >= 1, not {self.ack_every!r}")
        if not self.ack_timer_ns >= 0:
            raise ValueError(f"ack_timer_ns must be >= 0, not {self.ack_timer_ns!r}")
        for name in ("response_ns", "oversize_len"):
            lo, hi = getattr(self, name)
            if not 0 <= lo <= hi:
                raise ValueError(f"{name} must be a range (lo, hi) with 0 <= lo <= hi, not "
                                 f"{getattr(self, name)!r}")
        if not isinstance(self.min_frame, int) or not 0 <= self.min_frame <= 60:
            raise ValueError(f"min_frame must be 0..60 bytes, not {self.min_frame!r}")
        if self.mtu is not None and not 68 <= self.mtu <= 65535:
            raise ValueError(f"mtu must be None or 68..65535 bytes, not {self.mtu!r}")
        if self.max_msg is not None and not 0 <= self.max_msg <= 0xFFFFFFFF:
            raise ValueError(f"max_msg must be None or 0..2^32-1, not {self.max_msg!r}")
        for name in ("dup_ack", "ghost_ack", "runt", "oversize"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be a probability in [0, 1], not "
                                 f"{getattr(self, name)!r}")

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


#: The kind peer of earlier versions of this model: an ACK (credit code 0x1F) for every AckReq
#: packet, at once; no port MTU, no message size limit, frames down to the Ethernet header.
IDEAL = Behaviour(credits="none", ack_every=None, ack_timer_ns=0.0, response_ns=(0.0, 0.0),
                  min_frame=0, mtu=None, max_msg=None)


#: RC BTH opcodes (and the CNP), by their names: every row of :mod:`rocegen.wire.opcodes`.
Op = enum.IntEnum("Op", [(r.name, r.code) for r in opc.ROWS], module=__name__)


class Access(enum.IntFlag):
    """Memory region access flags (values of ``ibv_access_flags``)."""
    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class WcOpcode(enum.StrEnum):
    RECV = "RECV"                                   # a SEND (with or without immediate)
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"       # an RDMA WRITE with immediate
    SEND = "SEND"                                   # requester: a SEND (with or without imm.)
    RDMA_WRITE = "RDMA_WRITE"                       # requester: a WRITE (with or without imm.)
    RDMA_READ = "RDMA_READ"                         # requester: a READ


class WcStatus(enum.StrEnum):
    SUCCESS = "SUCCESS"
    LOC_LEN_ERR = "LOC_LEN_ERR"              # SEND longer than the receive buffer
    REM_INV_REQ_ERR = "REM_INV_REQ_ERR"      # a SEND in progress ended by an invalid request
    WR_FLUSH_ERR = "WR_FLUSH_ERR"            # flushed: the QP went to the error state
    # requester (send completions)
    REM_ACCESS_ERR = "REM_ACCESS_ERR"        # NAK remote access error
    REM_OP_ERR = "REM_OP_ERR"                # NAK remote operational error
    RETRY_EXC_ERR = "RETRY_EXC_ERR"          # retry_cnt timeouts / sequence NAKs w/o progress
    RNR_RETRY_EXC_ERR = "RNR_RETRY_EXC_ERR"  # rnr_retry RNR NAKs without progress


class Completion(NamedTuple):
    """A receive completion: ``wr_id, opcode, byte_len, imm, status`` (+ ``qpn`` and, for a
    SEND, the received bytes in ``data``; ``imm`` is None without immediate data). A send
    completion (:attr:`Rnic.send_cq`) has opcode SEND, RDMA_WRITE or RDMA_READ, the message
    length as ``byte_len``, ``imm`` None, and no ``data`` but for a successful READ (the bytes
    read)."""
    wr_id: int
    opcode: WcOpcode
    byte_len: int
    imm: int | None
    status: WcStatus
    qpn: int = 0
    data: bytes | None = None


@dataclass(eq=False)
class MemoryRegion:
    addr: int
    length: int
    rkey: int
    access: Access
    buf: bytearray

    def contains(self, addr, length):
        return self.addr <= addr and addr + length <= self.addr + self.length


@dataclass
class RecvWqe:
    wr_id: int
    length: int
    addr: int | None        # None: a private buffer (``buf``); else a local address in an MR
    buf: bytearray | None


@dataclass
class QueuePair:
    """State of one RC QP: the responder's, and the requester's in ``sq`` (read it freely in
    tests; change it through :class:`Rnic`)."""
    qpn: int
    peer_qpn: int
    peer_ip: str
    peer_mac: str | None
    epsn: int
    pmtu: int
    pkey: int
    min_rnr_timer: int
    udp_sport: int
    tos: int
    access: Access = Access.REMOTE_WRITE    # the QP's remote access (``qp_access_flags``)
    max_dest_rd_atomic: int = DEFAULT_RD_ATOMIC
    state: str = "RTR"                  # "RTR" (receiving) or "ERR"
    msn: int = 0
    nak_pending: bool = False           # a sequence or RNR NAK was sent; silence until ePSN
    in_msg: str | None = None           # "SEND" / "WRITE" while a multi-packet message runs
    # RDMA WRITE in progress
    wr_va: int = 0
    wr_len: int = 0
    wr_remaining: int = 0
    wr_mr: MemoryRegion | None = None
    # SEND in progress
    recv: RecvWqe | None = None
    recv_off: int = 0
    rq: deque = field(default_factory=deque)
    rnr_refuse: int = 0
    ackreq_seen: int = 0
    ack_deadline: float | None = None   # a pending coalesced ACK leaves then (timed mode)
    unacked: int = 0                    # packets executed since the last ACK
    ack_dst: str | None = None          # source MAC of the frame that made the pending ACK
    peer_sport: int | None = None       # UDP source port of the requester, once seen
    cnp_rx: int = 0
    sq: SendQueue | None = None         # the requester side (rnic_requester)
    # RDMA READ responder: the READs executed lately (for duplicates), and the answers of the QP
    # in the order they leave: _ReadJob (responses still to send) and frames queued behind one
    rd_res: deque = field(default_factory=deque)
    rsp_out: deque = field(default_factory=deque)


@dataclass(eq=False)
class _ReadRes:
    """A READ executed (an IBTA responder resource): its PSNs and what it may read again."""
    first: int          # wire PSN of its request
    npkts: int
    va: int
    length: int
    rkey: int


@dataclass(eq=False)
class _ReadJob:
    """The responses of one READ (or of a duplicate executed again), sent one at a time."""
    psn: int            # wire PSN of the first response
    data: bytes         # the bytes read (at execution)
    msn: int
    src_mac: str
    ready_at: float | None      # the first response may leave then (None: at once)
    new: bool           # a new READ (it holds a place of max_dest_rd_atomic)
    npkts: int
    end: int            # slots: npkts, one less (truncate) or one more (extra)
    faults: dict = field(default_factory=dict)  # kind -> (packet index, value)
    i: int = 0          # next slot
    extra: deque = field(default_factory=deque)  # fault copies to send before the next slot

    def responses_left(self):
        """Response packets still to send (copies aside)."""
        drop = self.faults.get("drop")
        return self.end - self.i - (drop is not None and self.i <= drop[0] < self.end)

    def left(self):
        """Frames still to send (fault copies not drawn yet aside)."""
        return self.responses_left() + len(self.extra)


def psn_diff(a, b):
    """``a - b`` as a signed 24-bit number (PSN comparison modulo 2^24)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d & 0x800000 else d


# (kind, position, RETH, ImmDt) of the request opcodes the responder executes
FIRST, MIDDLE, LAST, ONLY = (p.value for p in opc.Position)
_KIND = {opc.Verb.SEND: "SEND", opc.Verb.RDMA_WRITE: "WRITE"}
_REQ = {Op(r.code): (_KIND[r.verb], r.position.value, r.has_reth, r.has_imm)
        for r in opc.ROWS if r.verb in _KIND and r.supported}
#: the READ response faults :meth:`Rnic.read_fault` injects
READ_FAULTS = ("drop", "truncate", "extra", "opcode", "length", "psn", "syndrome")
# opcodes with an AETH
_AETH_OPS = frozenset(Op(c) for c in opc.codes(has_aeth=True))
# extension header bytes of the other RC opcodes (for the packet length check)
_OTHER_HDR = {Op(r.code): r.ext_length for r in opc.ROWS
              if opc.transport(r.code) == opc.TRANSPORT_RC and r.code not in _REQ}
_RESPONSES = frozenset(opc.RESPONSES)

COUNTERS = (
    "rx_frames", "tx_frames",
    # Ethernet / ARP
    "eth_drop_runt", "eth_drop_mtu", "eth_drop_addr", "eth_drop_vlan", "eth_drop_ethertype",
    "arp_rx_request", "arp_rx_reply", "arp_tx_reply", "arp_drop_bad",
    # IPv4 / UDP
    "ip_drop_header", "ip_drop_checksum", "ip_drop_length", "ip_drop_options", "ip_drop_fragment",
    "ip_drop_addr", "ip_drop_protocol", "udp_drop_length", "udp_drop_checksum", "udp_drop_port",
    "udp_rx",
    # RoCEv2 silent drops
    "roce_rx", "drop_short", "drop_icrc", "drop_tver", "drop_transport", "drop_dest_qp",
    "drop_src_ip", "drop_pkey", "drop_malformed", "drop_response", "drop_qp_error", "cnp_rx",
    # responder
    "executed", "duplicate", "seq_drop", "ack_coalesced", "write_msgs", "write_bytes",
    "send_msgs", "send_bytes", "completions",
    "ack_tx", "nak_seq_tx", "rnr_nak_tx", "nak_inv_req_tx", "nak_rem_access_tx", "nak_rem_op_tx",
    "err_opcode_seq", "err_unsupported", "err_length", "err_rkey", "err_access", "err_bounds",
    "err_recv_len", "err_msg_size", "err_rd_atomic",
    # RDMA READ responder: READs executed, duplicates executed again and dropped, response
    # packets and their payload bytes
    "read_rx", "read_dup", "read_dup_drop", "read_resp_tx", "read_bytes",
    # faults injected towards the requester (Behaviour, read_fault)
    "ack_dup_tx", "ack_ghost_tx", "runt_tx", "oversize_tx", "read_dup_tx", "read_fault_tx",
    # requester (rnic_requester): data packets sent (resends included) and resent, AETHs
    # received by kind, stale and never-sent ones, timeouts, retries exhausted, completions
    "req_tx", "req_retx", "req_ack_rx", "req_nak_seq_rx", "req_rnr_rx", "req_nak_err_rx",
    "req_ack_stale", "req_ack_ghost", "req_timeouts", "req_retry_exc", "req_rnr_retry_exc",
    "req_completions",
    # requester READs: responses taken and their bytes, stale and bad ones dropped, reissues
    "req_read_rx", "req_read_bytes", "req_read_stale", "req_read_bad", "req_read_retry",
    # deviations from the wire conventions that a receiver tolerates (strict mode raises)
    "warn_eth_bcast", "warn_ip_trailing", "warn_ip_df", "warn_ip_id", "warn_ip_ttl",
    "warn_udp_sport", "warn_bth_reserved", "warn_pad_nonzero", "warn_ackreq", "warn_cnp",
)

#: Counters whose events raise in strict mode (everything else is a legitimate situation).
STRICT_CHECKS = frozenset({
    "eth_drop_runt", "eth_drop_mtu", "err_msg_size", "eth_drop_addr", "eth_drop_vlan",
    "eth_drop_ethertype", "arp_drop_bad",
    "ip_drop_header", "ip_drop_checksum", "ip_drop_length", "ip_drop_options", "ip_drop_fragment",
    "ip_drop_addr", "ip_drop_protocol", "udp_drop_length", "udp_drop_checksum", "udp_drop_port",
    "drop_short", "drop_icrc", "drop_tver", "drop_transport", "drop_dest_qp", "drop_src_ip",
    "drop_pkey", "drop_malformed", "drop_response", "req_ack_ghost", "req_read_bad",
    "err_opcode_seq", "err_unsupported", "err_length", "err_rd_atomic",
    "warn_eth_bcast", "warn_ip_trailing", "warn_ip_df", "warn_ip_id", "warn_ip_ttl",
    "warn_udp_sport", "warn_bth_reserved", "warn_pad_nonzero", "warn_ackreq", "warn_cnp",
})


def _mac_str(raw):
    return ":".join(f"{b:02x}" for b in bytes(raw))


def _ip_str(raw):
    return ".".join(str(b) for b in bytes(raw))


def _ip_bytes(ip):
    return bytes(int(x) for x in ip.split("."))


def _pad(frame):
    return bytes(frame).ljust(MIN_FRAME, b"\0")


def _opname(op):
    try:
        return Op(op).name
    except ValueError:
        return f"opcode {op:#04x}"


def _segmentation_error(kind, pos, n, padcnt, pmtu):
    """Why a request packet with ``n`` payload bytes breaks the PMTU segmentation, or None."""
    if pos in (FIRST, MIDDLE):
        if padcnt:
            return f"PadCnt {padcnt} on a {kind}_{pos} packet (only the last packet has pad)"
        if n != pmtu:
            return f"{kind}_{pos} carries {n} payload bytes, not the PMTU ({pmtu})"
    elif pos == LAST:
        if n == 0 or n > pmtu:
            return f"{kind}_LAST carries {n} payload bytes (must be 1..PMTU={pmtu})"
    elif n > pmtu:
        return f"{kind}_ONLY carries {n} payload bytes, more than the PMTU ({pmtu})"
    if padcnt != (-n) & 3:
        return f"PadCnt {padcnt} but {n} payload bytes need {(-n) & 3}"
    return None


class _Fatal(Exception):
    """A class C responder error: NAK ``syndrome``, then the QP goes to the error state."""

    def __init__(self, syndrome, counter, message, status=None):
        super().__init__(message)
        self.syndrome, self.counter, self.message, self.status = syndrome, counter, message, status


class Rnic:
    """The host RNIC on one Ethernet port: ARP + the RoCEv2 RC responder on UDP 4791, and the
    RC requester on the same QPs (:meth:`post_send`, :meth:`next_frames`, :attr:`send_cq`).

    ``mac``/``ip``: the NIC's addresses. ``strict``: raise AssertionError on malformed frames,
    requester protocol violations and ACKs of PSNs never sent (:data:`STRICT_CHECKS`).
    ``behaviour``: a
    :class:`Behaviour` (default: a ConnectX's). ``ack_coalesce``: ACK only every N-th AckReq
    packet of a QP. ``vlan``/``pcp``: only frames tagged with that VLAN ID are taken,
    answers are tagged. ``udp_ports``: other UDP ports whose datagrams are collected in
    :attr:`udp_rx`. ``migreq``/``ttl``: header fields of the frames sent.
    """

    def __init__(self, mac, ip, *, strict=False, behaviour=None, ack_coalesce=1, vlan=None,
                 pcp=0, migreq=1, ttl=64, udp_ports=()):
        if ack_coalesce < 1:
            raise ValueError("ack_coalesce must be >= 1")
        if behaviour is None:
            behaviour = Behaviour()
        if not isinstance(behaviour, Behaviour):
            raise TypeError(f"behaviour must be a Behaviour, not {behaviour!r}")
        self.behaviour = behaviour
        self._rng = random.Random(behaviour.seed)
        self._now = None                # the time of the frame being handled (timed mode)
        self._queue = []                # (due, order, frame) of the answers waiting (timed mode)
        self._order = 0
        self._last_due = 0.0
        self._copies = []               # duplicate ACKs to send late (timed mode)
        self.mac = mac.lower()
        self.ip = ip
        self._mac_b = bytes.fromhex(self.mac.replace(":", ""))
        self._ip_b = _ip_bytes(ip)
        self.strict = strict
        self.ack_coalesce = ack_coalesce
        self.vlan = vlan
        self.pcp = pcp
        self.migreq = migreq
        self.ttl = ttl
        self.udp_ports = tuple(udp_ports)
        self.counters = dict.fromkeys(COUNTERS, 0)
        #: every drop / NAK cause, in order, as a message (for debugging a failing bench)
        self.log = []
        self.qps = {}
        self.mrs = []
        self.cq = []
        #: send completions of the requester (:meth:`post_send`), in order per QP
        self.send_cq = []
        self._rr = 0                    # round robin of next_frames over the QPs
        #: IP -> MAC learned from ARP
        self.arp_cache = {}
        #: ``(src_ip, src_port, dst_port, payload)`` of datagrams to ``udp_ports``
        self.udp_rx = []
        self._rnr_refuse = 0
        self._ip_id = 0
        self._ack_templates = {}        # see _ack_frame
        self._read_faults = []          # [qpn or None, kind, packet, value, count] (read_fault)

    # ------------------------------------------------------------------ verbs-like setup

    def create_qp(self, qpn, *, peer_qpn, peer_ip, peer_mac=None, epsn, pmtu, pkey=0xFFFF,
                  min_rnr_timer=1, udp_sport=None, dscp=0, ecn=0, sq_psn=None,
                  timeout=DEFAULT_TIMEOUT, retry_cnt=7, rnr_retry=7, window=DEFAULT_WINDOW,
                  ack_req_every=64, access=Access.REMOTE_WRITE,
                  max_rd_atomic=DEFAULT_RD_ATOMIC, max_dest_rd_atomic=DEFAULT_RD_ATOMIC):
        """An RC QP ready to receive (RTR) from ``peer_qpn`` at ``peer_ip``, expecting PSN
        ``epsn`` first, and ready to send (RTS, :meth:`post_send`). ``min_rnr_timer``: the timer
        code sent in RNR NAKs (default 1 = 10 us, short for simulations). ``udp_sport``: source
        port of the ACKs and requests (default: hashed from the QP numbers into
        0xC000..0xFFFF). ``dscp``/``ecn``: IPv4 TOS of the ACKs and requests.

        The requester (:mod:`rocegen.sim.models.rnic_requester`): ``sq_psn``, the PSN of its
        first packet (default ``epsn``: both directions start from the same PSN);
        ``timeout``, the retransmit timeout code (4.096 us x 2^code, 0 = never; default 8 =
        1.05 ms, short for simulations); ``retry_cnt`` and ``rnr_retry`` (0..7, rnr_retry 7 =
        forever); ``window``, the most packets outstanding (1..2^23 - 1; default 1024, 4 MiB at
        PMTU 4096, longer than any simulated round trip at 100 Gb/s, so that like a ConnectX,
        whose window is its send queue, the requester is not slowed down by ACK latency);
        ``ack_req_every``, AckReq also on every N-th packet of a message (default 64, rxe's).

        RDMA READ: ``access`` (the verbs ``qp_access_flags``) must hold
        :attr:`Access.REMOTE_READ` for the QP to answer READs (default: REMOTE_WRITE only, and a
        READ is NAKed invalid request as an unsupported opcode; a WRITE needs REMOTE_WRITE);
        ``max_dest_rd_atomic`` (0..255, default 16), the READs the responder queues;
        ``max_rd_atomic`` (1..255, default 16), the READs its requester keeps outstanding."""
        if not 2 <= qpn <= PSN_MASK:
            raise ValueError(f"QPN {qpn:#x} out of range (2..0xFFFFFF; 0 and 1 are special)")
        if qpn in self.qps:
            raise ValueError(f"QP {qpn:#x} exists")
        if not 0 <= peer_qpn <= PSN_MASK or not 0 <= epsn <= PSN_MASK:
            raise ValueError("peer_qpn and epsn are 24-bit numbers")
        if pmtu not in PMTUS:
            raise ValueError(f"PMTU {pmtu} is not one of {PMTUS}")
        if not 0 <= min_rnr_timer <= 31:
            raise ValueError("min_rnr_timer is a 5-bit code")
        sq_psn = epsn if sq_psn is None else sq_psn
        if not 0 <= sq_psn <= PSN_MASK:
            raise ValueError("sq_psn is a 24-bit number")
        if not 0 <= timeout <= 31:
            raise ValueError("timeout is a 5-bit code (0: never)")
        if not 0 <= retry_cnt <= 7 or not 0 <= rnr_retry <= 7:
            raise ValueError("retry_cnt and rnr_retry are 0..7")
        if not 1 <= window < 1 << 23:
            raise ValueError("window must be 1..2^23 - 1 packets")
        if ack_req_every < 1:
            raise ValueError("ack_req_every must be >= 1")
        if not 1 <= max_rd_atomic <= 255 or not 0 <= max_dest_rd_atomic <= 255:
            raise ValueError(f"max_rd_atomic must be 1..255 and max_dest_rd_atomic 0..255, not "
                             f"{max_rd_atomic!r} and {max_dest_rd_atomic!r}")
        access = Access(access)
        if udp_sport is None:
            h = (qpn * 0x9E3779B1 ^ peer_qpn * 0x85EBCA6B) & 0xFFFFFFFF
            udp_sport = 0xC000 | ((h ^ (h >> 14) ^ (h >> 28)) & 0x3FFF)
        qp = QueuePair(qpn=qpn, peer_qpn=peer_qpn, peer_ip=peer_ip,
                       peer_mac=peer_mac.lower() if peer_mac else None, epsn=epsn, pmtu=pmtu,
                       pkey=pkey, min_rnr_timer=min_rnr_timer, udp_sport=udp_sport,
                       tos=(dscp << 2) | ecn, access=access,
                       max_dest_rd_atomic=max_dest_rd_atomic)
        qp.sq = SendQueue(sq_psn=sq_psn, timeout=timeout, retry_cnt=retry_cnt,
                          rnr_retry=rnr_retry, window=window, ack_req_every=ack_req_every,
                          max_rd_atomic=max_rd_atomic)
        self.qps[qpn] = qp
        return qp

    def destroy_qp(self, qpn):
        """Remove a QP (its receive WQEs disappear without completions, as ibv_destroy_qp)."""
        del self.qps[qpn]

    def register_mr(self, addr, length, rkey, access=Access.LOCAL_WRITE | Access.REMOTE_WRITE, *,
                    fill=0):
        """A memory region of ``length`` bytes at virtual address ``addr``, every byte ``fill``.
        Regions must not overlap (each has its own backing bytearray) and R_Keys are unique.
        ``access``: :class:`Access` flags; RDMA READs need REMOTE_READ (not in the default),
        the local buffer of a READ posted by the requester LOCAL_WRITE."""
        if length < 0 or addr < 0 or addr + length > 1 << 64:
            raise ValueError("bad address range")
        for mr in self.mrs:
            if mr.rkey == rkey:
                raise ValueError(f"R_Key {rkey:#x} already registered")
            if addr < mr.addr + mr.length and mr.addr < addr + length:
                raise ValueError(f"[{addr:#x}, +{length:#x}) overlaps the region at {mr.addr:#x}")
        mr = MemoryRegion(addr, length, rkey & 0xFFFFFFFF, Access(access),
                          bytearray([fill]) * length)
        self.mrs.append(mr)
        return mr

    def deregister_mr(self, rkey):
        self.mrs = [mr for mr in self.mrs if mr.rkey != rkey]

    def post_recv(self, qpn, buffer_len, wr_id, *, addr=None):
        """Post a receive WQE of ``buffer_len`` bytes: a private buffer (its contents end up in
        the completion's ``data``), or ``addr`` inside a region with LOCAL_WRITE access. On a
        QP in the error state the WQE completes at once with WR_FLUSH_ERR."""
        qp = self.qps[qpn]
        if addr is not None:
            mr = self._mr_at(addr, buffer_len)
            if mr is None or not mr.access & Access.LOCAL_WRITE:
                raise ValueError(f"receive buffer [{addr:#x}, +{buffer_len}) is not in a region "
                                 "with LOCAL_WRITE access")
        wqe = RecvWqe(wr_id, buffer_len, addr, None if addr is not None else bytearray(buffer_len))
        if qp.state == "ERR":
            self._complete(qp, wqe, WcOpcode.RECV, 0, None, WcStatus.WR_FLUSH_ERR)
        else:
            qp.rq.append(wqe)

    def post_send(self, qpn, opcode, *, data=None, length=None, remote_addr=0, rkey=0, imm=None,
                  wr_id=0, local_addr=None):
        """Post a send work request on QP ``qpn``: ``opcode`` a :class:`SendOp` or its name
        (``"WRITE"``, ``"WRITE_IMM"``, ``"SEND"``, ``"SEND_IMM"``, ``"READ"``); the message is
        ``data`` (bytes) or ``length`` zero bytes; ``remote_addr`` and ``rkey`` go in the RETH
        of a WRITE or READ; ``imm`` (32 bits) is required by the _IMM opcodes and refused by the
        others. A READ takes ``length`` bytes at ``remote_addr`` of the peer into host memory
        at ``local_addr`` (inside a region with LOCAL_WRITE access), or into a buffer of its own
        when ``local_addr`` is None; either way its completion carries them in ``data``.
        Its packets leave through :meth:`next_frames`; its completion (opcode SEND, RDMA_WRITE
        or RDMA_READ) comes in :attr:`send_cq`, in the order of posting. On a QP in the error
        state it completes at once with WR_FLUSH_ERR. Returns the
        :class:`~rocegen.sim.models.rnic_requester.SendWr`."""
        qp = self.qps[qpn]
        op = SendOp(_req.send_op(opcode))
        if op == SendOp.READ:
            return self._post_read(qp, length=length, data=data, imm=imm, remote_addr=remote_addr,
                                   rkey=rkey, wr_id=wr_id, local_addr=local_addr)
        if local_addr is not None:
            raise ValueError(f"{op} has no local_addr (only a READ has)")
        if data is None:
            data = bytes(length or 0)
        else:
            data = bytes(data)
            if length is not None and length != len(data):
                raise ValueError(f"length {length} but {len(data)} bytes of data")
        if len(data) > MAX_MSG:
            raise ValueError(f"message of {len(data)} bytes, more than {MAX_MSG}")
        if op in (SendOp.WRITE_IMM, SendOp.SEND_IMM):
            if imm is None or not 0 <= imm <= 0xFFFFFFFF:
                raise ValueError(f"{op} needs imm, a 32-bit number (not {imm!r})")
        elif imm is not None:
            raise ValueError(f"{op} carries no immediate data")
        if not 0 <= remote_addr < 1 << 64 or not 0 <= rkey <= 0xFFFFFFFF:
            raise ValueError("remote_addr is a 64-bit and rkey a 32-bit number")
        if qp.peer_mac is None and qp.peer_ip not in self.arp_cache:
            raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
        wr = qp.sq.post(wr_id, op, data, remote_addr, rkey, imm, qp.pmtu)
        if qp.state == "ERR":
            _req.fail(self, qp, "WR_FLUSH_ERR")
        return wr

    def _post_read(self, qp, *, length, data, imm, remote_addr, rkey, wr_id, local_addr):
        if data is not None or imm is not None:
            raise ValueError("a READ carries no data and no imm: give length (and local_addr)")
        if length is None or not 0 <= length <= MAX_MSG:
            raise ValueError(f"a READ needs length, 0..{MAX_MSG} bytes (not {length!r})")
        if not 0 <= remote_addr < 1 << 64 or not 0 <= rkey <= 0xFFFFFFFF:
            raise ValueError("remote_addr is a 64-bit and rkey a 32-bit number")
        if local_addr is not None and length:
            mr = self._mr_at(local_addr, length)
            if mr is None or not mr.access & Access.LOCAL_WRITE:
                raise ValueError(f"READ buffer [{local_addr:#x}, +{length}) is not in a region "
                                 "with LOCAL_WRITE access")
        if qp.peer_mac is None and qp.peer_ip not in self.arp_cache:
            raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
        wr = qp.sq.post(wr_id, SendOp.READ, b"", remote_addr, rkey, None, qp.pmtu,
                        read_len=length, local_addr=local_addr)
        if qp.state == "ERR":
            _req.fail(self, qp, "WR_FLUSH_ERR")
        return wr

    def read_fault(self, kind, *, packet=0, value=None, qpn=None, count=1):
        """Spoil the responses of the next ``count`` READs the responder executes (new ones and
        duplicates) on QP ``qpn`` (None: on any QP), one fault ``kind`` of :data:`READ_FAULTS`
        each, on response packet number ``packet`` (from 0; negative: from the end, -1 the
        last):

        * ``"drop"``: that packet is not sent (a lost response);
        * ``"truncate"``: too few packets: the one before the last is sent as the LAST (as the
          ONLY if it is the first) and the last is not sent; a one-packet READ sends nothing;
        * ``"extra"``: too many: a copy of the last packet follows it with the next PSN;
        * ``"opcode"``: that packet is sent with BTH opcode ``value`` (with an AETH when that
          opcode has one);
        * ``"length"``: it carries ``value`` payload bytes more (0xEE) or, negative, fewer;
        * ``"psn"``: its PSN is moved by ``value``;
        * ``"syndrome"``: its AETH syndrome is ``value`` (on FIRST/LAST/ONLY).

        Faults queue up in the order given; each applied one counts ``read_fault_tx``."""
        if kind not in READ_FAULTS:
            raise ValueError(f"read fault must be one of {READ_FAULTS}, not {kind!r}")
        if kind in ("opcode", "length", "psn", "syndrome") and not isinstance(value, int):
            raise ValueError(f"read fault {kind!r} needs an integer value, not {value!r}")
        if kind in ("opcode", "syndrome") and not 0 <= value <= 0xFF:
            raise ValueError(f"read fault {kind!r}: value must be 0..255, not {value!r}")
        if not isinstance(packet, int) or count < 1:
            raise ValueError("packet must be an integer and count >= 1")
        self._read_faults.append([qpn, kind, packet, value, count])

    def _take_read_faults(self, qp, npkts):
        """The faults (kind -> (packet index, value)) of the next READ executed on ``qp``."""
        for f in self._read_faults:
            qpn, kind, packet, value, _ = f
            if qpn is not None and qpn != qp.qpn:
                continue
            f[4] -= 1
            if not f[4]:
                self._read_faults.remove(f)
            index = packet + npkts if packet < 0 else packet
            if kind == "truncate":
                index = npkts - 1
            elif kind == "extra":
                index = npkts
            elif not 0 <= index < npkts:
                return {}
            return {kind: (index, value)}
        return {}

    def next_frames(self, now=None, budget=None):
        """The frames of the NIC's transmit line that may leave at ``now`` (nanoseconds;
        default: the latest time the model was given), at most ``budget`` of them (``None``:
        every one the windows allow): the requester's packets and the READ responses (with the
        answers of their QP queued behind them), taking one packet of each QP's requester and
        of each QP's READ responses in turn. A testbench calls it whenever its link can take
        frames, e.g. with ``budget=1`` each time the previous frame is on the wire; the
        retransmit timers run from the ``now`` a packet is taken. Timers that ran out by ``now``
        are handled first (:meth:`next_due` says when one will)."""
        if now is None:
            now = self._now
        else:
            self._advance(now)
        self._req_tick(now)
        out = []
        entries = []
        for qp in self.qps.values():
            if qp.rsp_out:
                entries.append((qp, True))
            if qp.state != "ERR":
                entries.append((qp, False))
        if not entries:
            return out
        start, idle = self._rr % len(entries), 0
        i = start
        while idle < len(entries) and (budget is None or len(out) < budget):
            qp, rsp = entries[i]
            i = (i + 1) % len(entries)
            frame = None
            if rsp:
                frame = self._rsp_frame(qp, now)
            elif qp.state != "ERR" and qp.sq.ready(now, 1):
                frame = self._req_frame(qp, now)
            if frame is None:
                idle += 1
                continue
            idle = 0
            out.append(frame)
            self._rr = i
        self.counters["tx_frames"] += len(out)
        return out

    def tx_pending(self, qpn=None, now=None):
        """How many packets :meth:`next_frames` could give at ``now`` (default: the latest time
        given) on QP ``qpn`` or on all: the window and RNR waits allowing, READ responses whose
        delay is over (and the answers behind them), timers not run."""
        now = self._now if now is None else now
        qps = self.qps.values() if qpn is None else [self.qps[qpn]]
        return sum((qp.sq.ready(now) if qp.state != "ERR" else 0) + self._rsp_ready(qp, now)
                   for qp in qps)

    def send_outstanding(self, qpn=None):
        """Send work requests posted and not completed yet, on QP ``qpn`` or on all."""
        qps = self.qps.values() if qpn is None else [self.qps[qpn]]
        return sum(qp.sq.outstanding for qp in qps)

    def poll_send_cq(self, max_entries=None):
        """Remove and return the oldest send completions (all of them by default)."""
        n = len(self.send_cq) if max_entries is None else min(max_entries, len(self.send_cq))
        out, self.send_cq = self.send_cq[:n], self.send_cq[n:]
        return out

    def rnr_for(self, n, qpn=None):
        """Refuse (RNR NAK) the next ``n`` packets that would consume a receive WQE (SEND
        FIRST/ONLY, the last packet of an RDMA WRITE with immediate), even with WQEs posted:
        on any QP, or only on ``qpn``. A retry of a refused packet counts as a new one."""
        if qpn is None:
            self._rnr_refuse = n
        else:
            self.qps[qpn].rnr_refuse = n

    # ------------------------------------------------------------------ read-back helpers

    def expected_psn(self, qpn):
        return self.qps[qpn].epsn

    def msn(self, qpn):
        return self.qps[qpn].msn

    def qp_state(self, qpn):
        return self.qps[qpn].state

    def read_mem(self, addr, length):
        mr = self._mr_at(addr, length)
        if mr is None:
            raise ValueError(f"[{addr:#x}, +{length}) is not inside one memory region")
        off = addr - mr.addr
        return bytes(mr.buf[off:off + length])

    def write_mem(self, addr, data):
        data = bytes(data)
        mr = self._mr_at(addr, len(data))
        if mr is None:
            raise ValueError(f"[{addr:#x}, +{len(data)}) is not inside one memory region")
        off = addr - mr.addr
        mr.buf[off:off + len(data)] = data

    def poll_cq(self, max_entries=None):
        """Remove and return the oldest completions (all of them by default)."""
        n = len(self.cq) if max_entries is None else min(max_entries, len(self.cq))
        out, self.cq = self.cq[:n], self.cq[n:]
        return out

    # ------------------------------------------------------------------ frames the RNIC sends

    def arp_request(self, ip):
        """The ARP request the RNIC broadcasts to resolve ``ip`` (the reply fills arp_cache)."""
        return _pad(self._l2("ff:ff:ff:ff:ff:ff") / ARP(
            op=1, hwsrc=self.mac, psrc=self.ip, hwdst="00:00:00:00:00:00", pdst=ip))

    def udp_frame(self, dst_ip, sport, dport, payload, *, dst_mac=None):
        """A plain UDP datagram from the host (e.g. a connection-manager request), with a valid
        UDP checksum. ``dst_mac`` defaults to the ARP cache entry of ``dst_ip``."""
        dst_mac = dst_mac or self.arp_cache.get(dst_ip)
        if dst_mac is None:
            raise ValueError(f"no MAC known for {dst_ip}: give dst_mac or resolve it by ARP")
        return _pad(self._l2(dst_mac) / IP(src=self.ip, dst=dst_ip, ttl=self.ttl, flags="DF",
                                          id=self._next_id()) / UDP(sport=sport, dport=dport)
                    / bytes(payload))

    def _l2(self, dst):
        eth = Ether(dst=dst, src=self.mac)
        if self.vlan is not None:
            eth = eth / Dot1Q(vlan=self.vlan, prio=self.pcp, dei=0)
        return eth

    def _next_id(self):
        self._ip_id = self._ip_id % 0xFFFF + 1
        return self._ip_id

    def ack_frame(self, qpn, syndrome, psn, *, msn=None):
        """An ACKNOWLEDGE frame from QP ``qpn`` with any AETH ``syndrome``, ``psn`` and ``msn``
        (default: the QP's MSN), for a testbench to inject (e.g. a remote operational error or a
        stale ACK). Changes no responder state and counts nothing."""
        qp = self.qps[qpn]
        dst = qp.peer_mac or self.arp_cache.get(qp.peer_ip)
        if dst is None:
            raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
        return self._ack_frame(qp, syndrome, psn, dst, msn=msn)

    def _ack_frame(self, qp, syndrome, psn, src_mac, *, msn=None):
        """An ACKNOWLEDGE frame (:meth:`_roce_frame`)."""
        return self._roce_frame(qp, src_mac, Op.ACKNOWLEDGE, psn, H.AETH.pack(
            syndrome=syndrome, msn=qp.msn if msn is None else msn))

    def _req_frame(self, qp, now):
        """The requester's next packet on ``qp`` (:meth:`_roce_frame`), counted."""
        psn = qp.sq.wire(qp.sq.nxt)
        opcode, se, ackreq, padcnt, body = qp.sq.packet(qp.pmtu)
        frame = self._roce_frame(qp, None, opcode, psn, body, se=se, ackreq=ackreq,
                                 padcnt=padcnt)
        self.counters["req_tx"] += 1
        if qp.sq.sent(now):
            self.counters["req_retx"] += 1
        return frame

    def _roce_frame(self, qp, src_mac, opcode, psn, body, *, se=0, ackreq=0, padcnt=0):
        """A RoCEv2 frame of ``qp``: BTH (``opcode``, ``psn``...), then ``body`` (extension
        headers, payload and pad), then the ICRC. scapy builds the first one of each QP and peer
        (an ACK with IP id, PSN, syndrome and MSN zero) as a template; each frame is the template
        with the lengths and BTH fields set through the shared header table, the IP checksum and
        the ICRC computed again: the same bytes as scapy's build (unit tests compare them), in a
        small part of its time. The destination MAC is ``peer_mac``, else the ARP cache, else
        ``src_mac`` (the frame answered)."""
        dst = qp.peer_mac or self.arp_cache.get(qp.peer_ip) or src_mac
        if dst is None:
            raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
        key = (dst, self.mac, self.vlan, self.pcp, self.ip, qp.peer_ip, self.ttl, qp.tos,
               qp.udp_sport, self.migreq, qp.pkey, qp.peer_qpn)
        tmpl = self._ack_templates.get(key)
        if tmpl is None:
            pkt = (self._l2(dst)
                   / IP(src=self.ip, dst=qp.peer_ip, ttl=self.ttl, flags="DF", tos=qp.tos, id=0,
                        proto=17)
                   / UDP(sport=qp.udp_sport, dport=ROCE_PORT, chksum=0)
                   / BTH(opcode=Op.ACKNOWLEDGE, migreq=self.migreq, pkey=qp.pkey,
                         dqpn=qp.peer_qpn, psn=0)
                   / AETH(syndrome=0, msn=0))
            raw = bytes(pkt)
            l2 = len(raw) - H.IPV4.length - H.UDP.length - H.BTH.length - H.AETH.length - 4
            udp_at = l2 + H.IPV4.length
            tmpl = self._ack_templates[key] = (raw[:l2], H.IPV4.unpack(raw[l2:]),
                                               H.UDP.unpack(raw[udp_at:]),
                                               H.BTH.unpack(raw[udp_at + H.UDP.length:]))
        l2, ip, udp, bth = tmpl
        n = H.IPV4.length + H.UDP.length + H.BTH.length + len(body) + 4
        ip = {**ip, "total_length": n, "identification": self._next_id(), "checksum": 0}
        ip_hdr = H.IPV4.pack(**{**ip, "checksum": checksum(H.IPV4.pack(**ip))})
        dgram = (ip_hdr + H.UDP.pack(**{**udp, "length": n - H.IPV4.length})
                 + H.BTH.pack(**{**bth, "opcode": opcode, "se": se, "padcnt": padcnt,
                                 "ack_req": ackreq, "psn": psn & PSN_MASK})
                 + body)
        return _pad(l2 + dgram + _icrc(dgram))

    # ------------------------------------------------------------------ bookkeeping

    def _event(self, counter, message):
        """Count ``counter``; in strict mode raise if it is a strict check."""
        self.counters[counter] += 1
        self.log.append(f"{counter}: {message}")
        if self.strict and counter in STRICT_CHECKS:
            raise AssertionError(f"RNIC {self.ip}: {message} [{counter}]")

    def _drop(self, counter, message):
        self._event(counter, message)
        return []

    def _mr_at(self, addr, length):
        for mr in self.mrs:
            if mr.contains(addr, length):
                return mr
        return None

    def _mr_by_rkey(self, rkey):
        for mr in self.mrs:
            if mr.rkey == rkey:
                return mr
        return None

    def _complete(self, qp, wqe, opcode, byte_len, imm, status, data=None):
        self.cq.append(Completion(wqe.wr_id, opcode, byte_len, imm, status, qp.qpn, data))
        self.counters["completions"] += 1

    def _complete_send(self, qp, wr, status):
        data = None
        if wr.is_read:
            opcode = WcOpcode.RDMA_READ
            if status == "SUCCESS":
                data = (bytes(wr.buf) if wr.buf is not None
                        else self.read_mem(wr.local_addr, wr.read_len) if wr.read_len else b"")
        else:
            opcode = WcOpcode.RDMA_WRITE if wr.is_write else WcOpcode.SEND
        self.send_cq.append(Completion(wr.wr_id, opcode, wr.length, None, WcStatus(status),
                                       qp.qpn, data))
        self.counters["req_completions"] += 1

    def _qp_error(self, qp):
        """The QP goes to the error state: its receive WQEs (the one being filled included) and
        send work requests complete with WR_FLUSH_ERR."""
        qp.state = "ERR"
        if qp.recv is not None:
            self._complete(qp, qp.recv, WcOpcode.RECV, qp.recv_off, None, WcStatus.WR_FLUSH_ERR)
            qp.recv = None
        while qp.rq:
            self._complete(qp, qp.rq.popleft(), WcOpcode.RECV, 0, None, WcStatus.WR_FLUSH_ERR)
        qp.in_msg = None
        qp.sq.flush("WR_FLUSH_ERR", lambda wr, status: self._complete_send(qp, wr, status))

    # ------------------------------------------------------------------ receive path

    def receive(self, frame, now=None):
        """Take one Ethernet frame (without FCS); return the frames sent in answer. With
        ``now`` (nanoseconds, never decreasing from call to call) the answers are queued with
        their delays and the frames due by ``now`` are returned (:meth:`due`)."""
        frame = bytes(frame)
        self.counters["rx_frames"] += 1
        if now is None:
            self._now = None
            out = self._ethernet(frame)
            self.counters["tx_frames"] += len(out)
            return out
        self._advance(now)
        self._req_tick(now)
        for f in self._ethernet(frame):
            self._schedule(f, now)
        self._schedule_copies()
        return self.due(now)

    def due(self, now):
        """The answers whose time has come by ``now`` (nanoseconds), in order: coalesced ACKs
        whose timer ran out are made first. The requester's timers that ran out by ``now`` are
        handled too (its frames come from :meth:`next_frames`)."""
        self._advance(now)
        self._req_tick(now)
        for qp in self.qps.values():
            if qp.ack_deadline is not None and qp.ack_deadline <= now:
                when = qp.ack_deadline
                qp.ack_deadline = None
                for f in self._behind_reads(qp, self._coalesced_ack(qp, qp.ack_dst)):
                    self._schedule(f, when)
                self._schedule_copies()
        out = []
        while self._queue and self._queue[0][0] <= now:
            out.append(heapq.heappop(self._queue)[2])
        self.counters["tx_frames"] += len(out)
        return out

    def next_due(self):
        """The earliest time (nanoseconds) at which :meth:`due` has a frame to give or a
        requester timer runs out (a retransmit timeout, the end of an RNR wait: after it
        :meth:`next_frames` has frames again), or ``None``."""
        times = [qp.ack_deadline for qp in self.qps.values() if qp.ack_deadline is not None]
        times += [t for t in (qp.sq.next_deadline() for qp in self.qps.values()
                              if qp.state != "ERR") if t is not None]
        for qp in self.qps.values():        # READ responses whose delay is not over
            head = next((j for j in qp.rsp_out if not isinstance(j, _ReadJob) or j.left()), None)
            if isinstance(head, _ReadJob) and head.ready_at is not None and (
                    self._now is None or head.ready_at > self._now):
                times.append(head.ready_at)
        if self._queue:
            times.append(self._queue[0][0])
        return min(times, default=None)

    @property
    def pending(self):
        """Answers queued or ACKs pending (timed mode), READ responses not sent yet and the
        answers queued behind them."""
        return len(self._queue) + sum(qp.ack_deadline is not None for qp in self.qps.values()) \
            + sum(self._rsp_left(qp) for qp in self.qps.values() if qp.rsp_out)

    def _req_tick(self, now):
        if now is None:
            return
        for qp in list(self.qps.values()):
            sq = qp.sq
            if (sq.deadline is not None or sq.rnr_until is not None) and qp.state != "ERR":
                _req.tick(self, qp, now)

    def _advance(self, now):
        if self._now is not None and now < self._now:
            raise ValueError(f"time {now} ns is before {self._now} ns, already seen")
        self._now = now

    def _schedule_copies(self):
        """The second copies of duplicated ACKs: after their original, by up to two response
        delays, outside the answers' order (later answers may overtake them)."""
        lo, hi = self.behaviour.response_ns
        for f in self._copies:
            when = self._last_due + 1.0 + self._rng.uniform(0, lo + hi)
            heapq.heappush(self._queue, (when, self._order, f))
            self._order += 1
        self._copies.clear()

    def _schedule(self, frame, at):
        lo, hi = self.behaviour.response_ns
        when = max(at + (self._rng.uniform(lo, hi) if hi else 0.0), self._last_due)
        self._last_due = when
        heapq.heappush(self._queue, (when, self._order, frame))
        self._order += 1

    def _ethernet(self, frame):
        hlen = 14 if self.vlan is None else 18
        if len(frame) < max(hlen, self.behaviour.min_frame):
            return self._drop("eth_drop_runt", f"frame of {len(frame)} bytes (a runt: the "
                              f"shortest is {max(hlen, self.behaviour.min_frame)})")
        mtu = self.behaviour.mtu
        if mtu is not None and len(frame) - hlen > mtu:
            return self._drop("eth_drop_mtu", f"frame of {len(frame)} bytes: {len(frame) - hlen} "
                              f"after the Ethernet header, more than the port MTU ({mtu})")
        dst = frame[0:6]
        if dst not in (self._mac_b, BROADCAST):
            return self._drop("eth_drop_addr", f"frame to {_mac_str(dst)}, which is neither "
                              f"our MAC ({self.mac}) nor broadcast")
        if self.vlan is not None:
            tpid, tci = struct.unpack(">HH", frame[12:16])
            if tpid != 0x8100 or (tci & 0xFFF) != self.vlan:
                return self._drop("eth_drop_vlan", f"frame not tagged with VLAN {self.vlan} "
                                  f"(TPID {tpid:#06x}, TCI {tci:#06x})")
        etype = int.from_bytes(frame[hlen - 2:hlen], "big")
        src_mac = _mac_str(frame[6:12])
        body = frame[hlen:]
        if etype == 0x0806:
            return self._arp(body)
        if etype != 0x0800:
            return self._drop("eth_drop_ethertype", f"EtherType {etype:#06x} (only ARP and IPv4 "
                              "are expected)")
        if dst == BROADCAST:
            self._event("warn_eth_bcast", "IPv4 frame sent to the broadcast MAC")
        return self._ipv4(src_mac, body, len(frame) - (hlen - 14))

    def _arp(self, body):
        if len(body) < 28:
            return self._drop("arp_drop_bad", f"ARP message of {len(body)} bytes")
        htype, ptype, hlen, plen, op = struct.unpack(">HHBBH", body[:8])
        if (htype, ptype, hlen, plen) != (1, 0x0800, 6, 4) or op not in (1, 2):
            return self._drop("arp_drop_bad", f"ARP htype {htype} ptype {ptype:#x} hlen {hlen} "
                              f"plen {plen} op {op}")
        sha, spa, tpa = _mac_str(body[8:14]), _ip_str(body[14:18]), _ip_str(body[24:28])
        for_us = tpa == self.ip
        if spa in self.arp_cache or for_us:
            self.arp_cache[spa] = sha
        if op == 2:
            self.counters["arp_rx_reply"] += 1
            return []
        self.counters["arp_rx_request"] += 1
        if not for_us:
            return []
        self.counters["arp_tx_reply"] += 1
        return [_pad(self._l2(sha) / ARP(op=2, hwsrc=self.mac, psrc=self.ip, hwdst=sha,
                                         pdst=spa))]

    def _ipv4(self, src_mac, body, frame_len):
        # frame_len does not count an 802.1Q tag: a MAC may pad a frame to 60 bytes before
        # inserting the tag
        if len(body) < 20:
            return self._drop("ip_drop_header", f"IPv4 header truncated ({len(body)} bytes)")
        version, ihl = body[0] >> 4, body[0] & 15
        if version != 4 or ihl < 5:
            return self._drop("ip_drop_header", f"IPv4 version {version}, IHL {ihl}")
        if ihl != 5:
            return self._drop("ip_drop_options", f"IPv4 header with options (IHL {ihl})")
        if checksum(body[:20]) != 0:
            return self._drop("ip_drop_checksum", "IPv4 header checksum "
                              f"{int.from_bytes(body[10:12], 'big'):#06x} is wrong")
        total = int.from_bytes(body[2:4], "big")
        if total < 20 or total > len(body):
            return self._drop("ip_drop_length", f"IPv4 total length {total} but {len(body)} "
                              "bytes follow the Ethernet header")
        if total < len(body) and frame_len > MIN_FRAME:
            self._event("warn_ip_trailing", f"{len(body) - total} bytes after the IPv4 datagram "
                        f"in a frame of {frame_len} bytes (only padding to {MIN_FRAME} is allowed)")
        ident, flags_frag = struct.unpack(">HH", body[4:8])
        if flags_frag & 0x3FFF:
            return self._drop("ip_drop_fragment", f"IPv4 fragment (flags/offset {flags_frag:#06x})")
        dst_ip, src_ip = _ip_str(body[16:20]), _ip_str(body[12:16])
        if dst_ip != self.ip:
            return self._drop("ip_drop_addr", f"IPv4 datagram to {dst_ip}, not to us ({self.ip})")
        if body[9] != 17:
            return self._drop("ip_drop_protocol", f"IPv4 protocol {body[9]} (only UDP expected)")
        if not flags_frag & 0x4000:
            self._event("warn_ip_df", "IPv4 DF flag not set")
        if ident == 0:
            self._event("warn_ip_id", "IPv4 identification is 0")
        if body[8] == 0:
            self._event("warn_ip_ttl", "IPv4 TTL is 0")
        return self._udp(src_mac, src_ip, body[:total])

    def _udp(self, src_mac, src_ip, dgram):
        udp = dgram[20:]
        if len(udp) < 8:
            return self._drop("udp_drop_length", f"UDP header truncated ({len(udp)} bytes)")
        sport, dport, ulen, ck = struct.unpack(">HHHH", udp[:8])
        if ulen != len(udp):
            return self._drop("udp_drop_length", f"UDP length {ulen} but the IPv4 total length "
                              f"leaves {len(udp)} bytes")
        if ck:
            pseudo = dgram[12:20] + bytes([0, 17]) + len(udp).to_bytes(2, "big")
            if checksum(pseudo + udp) != 0:
                return self._drop("udp_drop_checksum", f"UDP checksum {ck:#06x} is wrong (0 would "
                                  "be accepted)")
        if dport == ROCE_PORT:
            return self._roce(src_mac, src_ip, sport, dgram)
        if dport in self.udp_ports:
            self.counters["udp_rx"] += 1
            self.udp_rx.append((src_ip, sport, dport, bytes(udp[8:])))
            return []
        return self._drop("udp_drop_port", f"UDP datagram to port {dport} (RoCEv2 is "
                          f"{ROCE_PORT})")

    def _roce(self, src_mac, src_ip, sport, dgram):
        self.counters["roce_rx"] += 1
        pl = dgram[28:]
        if len(pl) < 16:
            return self._drop("drop_short", f"RoCEv2 datagram with {len(pl)} bytes after UDP "
                              "(BTH + ICRC need 16)")
        want = _icrc(dgram[:-4])
        if want != dgram[-4:]:
            return self._drop("drop_icrc", f"ICRC {dgram[-4:].hex()} on the wire, "
                              f"{want.hex()} expected")
        bth = BTH(pl)
        op, psn, dqpn = bth.opcode, bth.psn, bth.dqpn
        where = f"{_opname(op)} to QP {dqpn:#x} PSN {psn:#08x}"
        if bth.version != 0:
            return self._drop("drop_tver", f"{where}: BTH TVer {bth.version}")
        qp = self.qps.get(dqpn)
        if op == Op.CNP:
            return self._cnp(qp, bth, pl, where)
        if op & 0xE0:
            return self._drop("drop_transport", f"{where}: not an RC opcode")
        if qp is None:
            return self._drop("drop_dest_qp", f"{where}: no such QP")
        if src_ip != qp.peer_ip:
            return self._drop("drop_src_ip", f"{where}: from {src_ip}, the QP's peer is "
                              f"{qp.peer_ip}")
        if bth.pkey != qp.pkey:
            return self._drop("drop_pkey", f"{where}: P_Key {bth.pkey:#06x}, QP has "
                              f"{qp.pkey:#06x}")
        if bth.fecn or bth.becn or bth.resv6 or bth.resv7:
            self._event("warn_bth_reserved", f"{where}: FECN {bth.fecn}, BECN {bth.becn}, "
                        f"reserved {bth.resv6:#x}/{bth.resv7:#x} (all must be 0)")
        if not 0xC000 <= sport <= 0xFFFF:
            self._event("warn_udp_sport", f"{where}: UDP source port {sport:#06x} outside "
                        "0xC000..0xFFFF")
        if qp.peer_sport is None:
            qp.peer_sport = sport
        elif sport != qp.peer_sport:
            self._event("warn_udp_sport", f"{where}: UDP source port {sport:#06x} changed (was "
                        f"{qp.peer_sport:#06x}; it must be constant per QP)")
        if op in _RESPONSES and not (op != Op.ATOMIC_ACKNOWLEDGE and qp.sq.sent_any):
            return self._drop("drop_response", f"{where}: a response opcode sent to a QP "
                              "whose requester has sent no request" if not qp.sq.sent_any else
                              f"{where}: atomics are not supported")
        info = _REQ.get(op)
        if info is None:
            hdr = 12 + _OTHER_HDR.get(op, 0)
        else:
            hdr = 12 + 16 * info[2] + 4 * info[3]
        body = len(pl) - 4 - hdr
        padcnt = bth.padcount
        if body < 0:
            return self._drop("drop_malformed", f"{where}: {len(pl) - 4} bytes before the ICRC, "
                              f"the headers alone need {hdr}")
        if body % 4:
            return self._drop("drop_malformed", f"{where}: payload + pad of {body} bytes is not a "
                              f"multiple of 4 (PadCnt {padcnt})")
        if padcnt > body:
            return self._drop("drop_malformed", f"{where}: PadCnt {padcnt} but only {body} bytes "
                              "of payload + pad")
        ext = pl[12:hdr]
        payload = pl[hdr:hdr + body - padcnt]
        if any(pl[hdr + body - padcnt:hdr + body]):
            self._event("warn_pad_nonzero", f"{where}: pad bytes "
                        f"{pl[hdr + body - padcnt:hdr + body].hex()} are not zero")
        if info is not None:
            kind, pos, _, _ = info
            if pos in (LAST, ONLY) and not bth.ackreq:
                self._event("warn_ackreq", f"{where}: AckReq not set on the last packet of a "
                            "message")
            if self.strict:
                err = _segmentation_error(kind, pos, len(payload), padcnt, qp.pmtu)
                if err:
                    self._event("err_length", f"{where}: {err}")
        if qp.state == "ERR":
            return self._drop("drop_qp_error", f"{where}: QP is in the error state")
        if op == Op.ACKNOWLEDGE:
            _req.handle_aeth(self, qp, ext[0], psn, self._now, where)
            return []
        if op in READ_RESPONSES:
            _req.handle_read_response(self, qp, op, ext, payload, padcnt, psn, self._now, where)
            return []
        return self._behind_reads(qp, self._request(qp, bth, info, ext, payload, padcnt, where,
                                                    src_mac))

    def _behind_reads(self, qp, frames):
        """The answers of ``qp``: sent now, or queued behind its READ responses (in order)."""
        if qp.rsp_out and frames:
            qp.rsp_out.extend(frames)
            return []
        return frames

    def _request(self, qp, bth, info, ext, payload, padcnt, where, src_mac):
        psn = bth.psn
        d = psn_diff(psn, qp.epsn)
        if d > 0:
            if qp.nak_pending:
                return self._drop("seq_drop", f"{where}: ahead of ePSN {qp.epsn:#08x}, NAK "
                                  "already sent")
            qp.nak_pending = True
            self._event("nak_seq_tx", f"{where}: ahead of ePSN {qp.epsn:#08x}")
            self._cancel_ack(qp)
            return [self._ack_frame(qp, NAK_PSN_SEQ, qp.epsn, src_mac)]
        read = bth.opcode == Op.RDMA_READ_REQUEST and qp.access & Access.REMOTE_READ
        if d < 0:
            self._event("duplicate", f"{where}: behind ePSN {qp.epsn:#08x}")
            if read:
                try:
                    return self._read_duplicate(qp, psn, ext, where, src_mac)
                except _Fatal as e:
                    return self._fatal(qp, psn, e, where, src_mac)
            self._cancel_ack(qp)
            return self._send_ack(qp, src_mac)
        qp.nak_pending = False
        try:
            if read:
                return self._read(qp, psn, ext, payload, padcnt, where, src_mac)
            return self._execute(qp, bth, info, ext, payload, padcnt, where, src_mac)
        except _Fatal as e:
            return self._fatal(qp, psn, e, where, src_mac)

    # ------------------------------------------------------------------ RDMA READ responder

    def _read_check(self, va, rkey, dlen):
        """The region a READ of ``dlen`` bytes at ``va`` with ``rkey`` may read (None for 0
        bytes: nothing is checked), or _Fatal (remote access error)."""
        if not dlen:
            return None
        mr = self._mr_by_rkey(rkey)
        if mr is None:
            raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"R_Key {rkey:#x} is not registered")
        if not mr.access & Access.REMOTE_READ:
            raise _Fatal(NAK_REM_ACCESS, "err_access", f"region of R_Key {rkey:#x} has no "
                         "REMOTE_READ access")
        if not mr.contains(va, dlen):
            raise _Fatal(NAK_REM_ACCESS, "err_bounds", f"[{va:#x}, +{dlen:#x}) is outside the "
                         f"region [{mr.addr:#x}, +{mr.length:#x}) of R_Key {rkey:#x}")
        return mr

    def _read_job(self, qp, psn, va, dlen, mr, src_mac, new):
        """Queue the responses of a READ of ``dlen`` bytes at ``va`` (in ``mr``) from PSN
        ``psn``: they leave through :meth:`next_frames`, after the response delay."""
        npkts = max(1, -(-dlen // qp.pmtu))
        data = bytes(mr.buf[va - mr.addr:va - mr.addr + dlen]) if dlen else b""
        ready = None
        if self._now is not None:
            lo, hi = self.behaviour.response_ns
            ready = max(self._now + (self._rng.uniform(lo, hi) if hi else 0.0), self._last_due)
            self._last_due = ready
        faults = self._take_read_faults(qp, npkts)
        self.counters["read_fault_tx"] += len(faults)
        end = npkts - ("truncate" in faults) + ("extra" in faults)
        qp.rsp_out.append(_ReadJob(psn=psn, data=data, msn=qp.msn, src_mac=src_mac,
                                   ready_at=ready, new=new, npkts=npkts, end=end, faults=faults))
        return []

    def _read(self, qp, psn, ext, payload, padcnt, where, src_mac):
        """A new READ request (PSN = ePSN), in rxe's order of checks."""
        if qp.in_msg is not None:
            raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: an "
                         f"{qp.in_msg} message is in progress")
        queued = sum(isinstance(j, _ReadJob) and j.new and j.responses_left() > 0
                     for j in qp.rsp_out)
        if queued >= qp.max_dest_rd_atomic:
            raise _Fatal(NAK_INV_REQ, "err_rd_atomic", f"{queued} READs queued already "
                         f"(max_dest_rd_atomic {qp.max_dest_rd_atomic})")
        if payload or padcnt:
            raise _Fatal(NAK_INV_REQ, "err_length", f"READ request with {len(payload)} payload "
                         f"bytes and PadCnt {padcnt}")
        reth = H.RETH.unpack(ext)
        va, rkey, dlen = reth["va"], reth["rkey"], reth["dma_len"]
        if self.behaviour.max_msg is not None and dlen > self.behaviour.max_msg:
            raise _Fatal(NAK_INV_REQ, "err_msg_size", f"RETH DMA length {dlen:#x} is more than "
                         f"the largest message ({self.behaviour.max_msg:#x})")
        mr = self._read_check(va, rkey, dlen)
        npkts = max(1, -(-dlen // qp.pmtu))
        qp.msn = (qp.msn + 1) & PSN_MASK
        qp.epsn = (qp.epsn + npkts) & PSN_MASK
        self.counters["executed"] += 1
        self.counters["read_rx"] += 1
        self._cancel_ack(qp)            # the responses' AETH acknowledge what came before
        qp.rd_res.append(_ReadRes(psn, npkts, va, dlen, rkey))
        while len(qp.rd_res) > max(qp.max_dest_rd_atomic, 1):
            qp.rd_res.popleft()
        return self._read_job(qp, psn, va, dlen, mr, src_mac, True)

    def _read_duplicate(self, qp, psn, ext, where, src_mac):
        """A READ request behind ePSN: executed again from its own PSN when one of the READs
        kept (the last ``max_dest_rd_atomic``) holds that PSN and the request asks for a part
        of what that READ read, with its R_Key (rxe); else dropped."""
        reth = H.RETH.unpack(ext)
        va, rkey, dlen = reth["va"], reth["rkey"], reth["dma_len"]
        res = next((r for r in reversed(qp.rd_res) if 0 <= psn_diff(psn, r.first) < r.npkts),
                   None)
        if res is None:
            return self._drop("read_dup_drop", f"{where}: a duplicate READ of no READ kept")
        if va < res.va or va + dlen > res.va + res.length or rkey != res.rkey:
            return self._drop("read_dup_drop", f"{where}: a duplicate READ of "
                              f"[{va:#x}, +{dlen:#x}) R_Key {rkey:#x}, not inside the READ of "
                              f"[{res.va:#x}, +{res.length:#x}) R_Key {res.rkey:#x} at PSN "
                              f"{res.first:#08x}")
        mr = self._read_check(va, rkey, dlen)
        self.counters["read_dup"] += 1
        return self._read_job(qp, psn, va, dlen, mr, src_mac, False)

    def _rsp_ready(self, qp, now):
        """Frames of ``qp``'s READ responses (and answers behind them) that may leave at
        ``now``."""
        n = 0
        for item in qp.rsp_out:
            if not isinstance(item, _ReadJob):
                n += 1
            elif item.ready_at is None or now is None or item.ready_at <= now:
                n += item.left()
            else:
                break
        return n

    @staticmethod
    def _rsp_left(qp):
        return sum(item.left() if isinstance(item, _ReadJob) else 1 for item in qp.rsp_out)

    def _rsp_frame(self, qp, now):
        """The next frame of ``qp``'s READ responses and the answers behind them, or None."""
        while qp.rsp_out:
            item = qp.rsp_out[0]
            if not isinstance(item, _ReadJob):
                return qp.rsp_out.popleft()
            if item.ready_at is not None and now is not None and item.ready_at > now:
                return None
            frame = item.extra.popleft() if item.extra else None
            if frame is None and item.i < item.end:
                frame = self._read_slot(qp, item)
            if not item.left():
                qp.rsp_out.popleft()        # its last frame: the next item may go now
            if frame is not None:
                return frame
        return None

    def _read_slot(self, qp, job):
        """Response packet ``job.i`` (faults applied), or None if a fault drops it."""
        k = job.i
        job.i += 1
        faults = job.faults
        n = job.npkts
        if "drop" in faults and faults["drop"][0] == k:
            return None
        if k == n:                          # "extra": the last packet again, next PSN
            k = n - 1
        last = k == n - 1
        first = k == 0
        if "truncate" in faults and k == n - 2:
            last = True
        opcode = (Op.RDMA_READ_RESPONSE_ONLY if first and last else
                  Op.RDMA_READ_RESPONSE_FIRST if first else
                  Op.RDMA_READ_RESPONSE_LAST if last else Op.RDMA_READ_RESPONSE_MIDDLE)
        psn = job.psn + job.i - 1
        payload = job.data[k * qp.pmtu:(k + 1) * qp.pmtu]
        syndrome = None
        fault = next(((kind, v) for kind, (i, v) in faults.items() if i == job.i - 1), None)
        if fault is not None:
            kind, value = fault
            if kind == "opcode":
                opcode = value
            elif kind == "length":
                payload = payload + b"\xee" * value if value > 0 else payload[:len(payload) + value]
            elif kind == "psn":
                psn += value
            elif kind == "syndrome":
                syndrome = value
        pad = (-len(payload)) & 3
        ext = b""
        if opcode in _AETH_OPS:
            ext = H.AETH.pack(syndrome=self._credit(qp) if syndrome is None else syndrome,
                              msn=job.msn)
        frame = self._roce_frame(qp, job.src_mac, opcode, psn, ext + payload + bytes(pad),
                                 padcnt=pad)
        if k == job.i - 1:
            self.counters["read_resp_tx"] += 1
            self.counters["read_bytes"] += len(payload)
        self._response_faults(job, frame)
        return frame

    def _response_faults(self, job, frame):
        """The behaviour's random faults on a READ response: a runt and an oversize copy, a
        second copy (all sent right after it)."""
        b, rng = self.behaviour, self._rng
        if b.runt and rng.random() < b.runt:
            self.counters["runt_tx"] += 1
            job.extra.append(frame[:rng.randrange(1, MIN_FRAME)])
        if b.oversize and rng.random() < b.oversize:
            self.counters["oversize_tx"] += 1
            job.extra.append(self._oversize(frame, rng.randint(*b.oversize_len)))
        if b.dup_ack and rng.random() < b.dup_ack:
            self.counters["read_dup_tx"] += 1
            job.extra.append(frame)

    def _cnp(self, qp, bth, pl, where):
        if qp is None:
            return self._drop("drop_dest_qp", f"{where}: no such QP")
        if not bth.becn or bth.padcount or len(pl) != 12 + 16 + 4 or any(pl[12:28]):
            self._event("warn_cnp", f"{where}: a CNP must have BECN set, PadCnt 0 and 16 zero "
                        "bytes")
        self.counters["cnp_rx"] += 1
        qp.cnp_rx += 1
        return []

    def _fatal(self, qp, psn, e, where, src_mac):
        self._event(e.counter, f"{where}: {e.message}")
        self._cancel_ack(qp)
        name = {NAK_INV_REQ: "nak_inv_req_tx", NAK_REM_ACCESS: "nak_rem_access_tx",
                NAK_REM_OP: "nak_rem_op_tx"}[e.syndrome]
        self.counters[name] += 1
        frame = self._ack_frame(qp, e.syndrome, psn, src_mac)
        qp.state = "ERR"
        if qp.recv is not None:
            # (only an invalid request can interrupt a SEND: R_Keys belong to WRITEs)
            status = e.status or WcStatus.REM_INV_REQ_ERR
            self._complete(qp, qp.recv, WcOpcode.RECV, qp.recv_off, None, status)
            qp.recv = None
        self._qp_error(qp)
        return [frame]

    def _execute(self, qp, bth, info, ext, payload, padcnt, where, src_mac):
        if info is None:
            raise _Fatal(NAK_INV_REQ, "err_unsupported", "opcode not supported by this responder")
        kind, pos, has_reth, has_imm = info
        # 1. opcode sequence
        if qp.in_msg is None:
            if pos in (MIDDLE, LAST):
                raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: no "
                             f"{kind} message in progress")
        elif pos in (FIRST, ONLY) or kind != qp.in_msg:
            raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: an "
                         f"{qp.in_msg} message is in progress")
        if kind == "WRITE" and not qp.access & Access.REMOTE_WRITE:
            raise _Fatal(NAK_INV_REQ, "err_unsupported", "RDMA WRITE not supported by this QP "
                         "(its access flags lack REMOTE_WRITE)")
        # 2. receive WQE (RNR)
        if (kind == "SEND" and pos in (FIRST, ONLY)) or (kind == "WRITE" and has_imm):
            refuse = ""
            if qp.rnr_refuse:
                qp.rnr_refuse -= 1
                refuse = "refused by rnr_for"
            elif self._rnr_refuse:
                self._rnr_refuse -= 1
                refuse = "refused by rnr_for"
            elif not qp.rq:
                refuse = "no receive WQE posted"
            if refuse:
                qp.nak_pending = True
                self._event("rnr_nak_tx", f"{where}: {refuse}")
                self._cancel_ack(qp)
                return [self._ack_frame(qp, SYN_RNR | qp.min_rnr_timer, bth.psn, src_mac)]
        # 3. length
        n = len(payload)
        err = _segmentation_error(kind, pos, n, padcnt, qp.pmtu)
        if err:
            raise _Fatal(NAK_INV_REQ, "err_length", err)
        # 4. R_Key, access, bounds; 5. execute
        imm = struct.unpack_from(">I", ext, 16 * has_reth)[0] if has_imm else None
        end = pos in (LAST, ONLY)
        if kind == "WRITE":
            if has_reth:
                va, rkey, dlen = struct.unpack_from(">QII", ext)
                if self.behaviour.max_msg is not None and dlen > self.behaviour.max_msg:
                    raise _Fatal(NAK_INV_REQ, "err_msg_size", f"RETH DMA length {dlen:#x} is "
                                 f"more than the largest message ({self.behaviour.max_msg:#x})")
                mr = None
                if dlen:
                    mr = self._mr_by_rkey(rkey)
                    if mr is None:
                        raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"R_Key {rkey:#x} is not "
                                     "registered")
                    if not mr.access & Access.REMOTE_WRITE:
                        raise _Fatal(NAK_REM_ACCESS, "err_access", f"region of R_Key {rkey:#x} "
                                     "has no REMOTE_WRITE access")
                    if not mr.contains(va, dlen):
                        raise _Fatal(NAK_REM_ACCESS, "err_bounds", f"[{va:#x}, +{dlen:#x}) is "
                                     f"outside the region [{mr.addr:#x}, +{mr.length:#x}) of "
                                     f"R_Key {rkey:#x}")
                qp.wr_va, qp.wr_len, qp.wr_remaining, qp.wr_mr = va, dlen, dlen, mr
            elif qp.wr_mr is not None and not any(m is qp.wr_mr for m in self.mrs):
                raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"region of R_Key {qp.wr_mr.rkey:#x} "
                             "deregistered during the WRITE")
            if end and n != qp.wr_remaining:
                raise _Fatal(NAK_INV_REQ, "err_length", f"{n} payload bytes end a WRITE with "
                             f"{qp.wr_remaining} of its DMA length {qp.wr_len} left")
            if not end and n >= qp.wr_remaining:
                raise _Fatal(NAK_INV_REQ, "err_length", f"{n} payload bytes leave nothing of the "
                             f"DMA length {qp.wr_len} for the LAST packet ({qp.wr_remaining} "
                             "left)")
            if n:
                off = qp.wr_va - qp.wr_mr.addr
                qp.wr_mr.buf[off:off + n] = payload
            qp.wr_va += n
            qp.wr_remaining -= n
            self.counters["write_bytes"] += n
            if end:
                self.counters["write_msgs"] += 1
                if has_imm:
                    self._complete(qp, qp.rq.popleft(), WcOpcode.RECV_RDMA_WITH_IMM, qp.wr_len,
                                   imm, WcStatus.SUCCESS)
                qp.wr_mr = None
        else:
            if pos in (FIRST, ONLY):
                qp.recv, qp.recv_off = qp.rq.popleft(), 0
            wqe = qp.recv
            if qp.recv_off + n > wqe.length:
                raise _Fatal(NAK_INV_REQ, "err_recv_len", f"SEND of at least {qp.recv_off + n} "
                             f"bytes into a receive buffer of {wqe.length}",
                             status=WcStatus.LOC_LEN_ERR)
            if wqe.addr is None:
                wqe.buf[qp.recv_off:qp.recv_off + n] = payload
            elif n:
                self.write_mem(wqe.addr + qp.recv_off, payload)
            qp.recv_off += n
            self.counters["send_bytes"] += n
            if end:
                self.counters["send_msgs"] += 1
                data = (bytes(wqe.buf[:qp.recv_off]) if wqe.addr is None
                        else self.read_mem(wqe.addr, qp.recv_off))
                self._complete(qp, wqe, WcOpcode.RECV, qp.recv_off, imm, WcStatus.SUCCESS, data)
                qp.recv = None
        qp.in_msg = None if end else kind
        if end:
            qp.msn = (qp.msn + 1) & PSN_MASK
        qp.epsn = (qp.epsn + 1) & PSN_MASK
        self.counters["executed"] += 1
        qp.unacked += 1
        every = self.behaviour.ack_every
        if every is not None and qp.unacked >= every:
            # coalesced by count: the ACK carries the latest PSN, whether or not it asked
            qp.ack_deadline = None
            return self._coalesced_ack(qp, src_mac)
        if not bth.ackreq:
            return []
        qp.ackreq_seen += 1
        if qp.ackreq_seen % self.ack_coalesce:
            self.counters["ack_coalesced"] += 1
            return []
        timer = self.behaviour.ack_timer_ns
        if self._now is None or not timer:
            return self._coalesced_ack(qp, src_mac)
        if qp.ack_deadline is None:
            qp.ack_deadline, qp.ack_dst = self._now + timer, src_mac
        self.counters["ack_coalesced"] += 1
        return []

    def _cancel_ack(self, qp):
        """A cumulative answer goes out: it carries whatever a pending ACK would have."""
        qp.ack_deadline = None
        qp.unacked = 0

    def _coalesced_ack(self, qp, src_mac):
        qp.unacked = 0
        return self._send_ack(qp, src_mac)

    def _credit(self, qp):
        mode = self.behaviour.credits
        if mode == "none":
            return SYN_ACK
        if mode == "random":
            return self._rng.randrange(0x20)
        return credit_code(len(qp.rq))

    def _send_ack(self, qp, src_mac):
        """The ACK of ePSN - 1 (every PSN executed), with the faults the behaviour injects."""
        b, rng = self.behaviour, self._rng
        self.counters["ack_tx"] += 1
        ack = self._ack_frame(qp, self._credit(qp), qp.epsn - 1, src_mac)
        out = [ack]
        if b.ghost_ack and rng.random() < b.ghost_ack:
            self.counters["ack_ghost_tx"] += 1
            ghost = qp.epsn - 1 + (1 << 22) + rng.randrange(1 << 22)
            out.insert(rng.randrange(2), self._ack_frame(qp, self._credit(qp), ghost, src_mac))
        if b.runt and rng.random() < b.runt:
            self.counters["runt_tx"] += 1
            out.insert(rng.randrange(len(out) + 1), ack[:rng.randrange(1, MIN_FRAME)])
        if b.oversize and rng.random() < b.oversize:
            self.counters["oversize_tx"] += 1
            out.insert(rng.randrange(len(out) + 1), self._oversize(ack, rng.randint(
                *b.oversize_len)))
        if b.dup_ack and rng.random() < b.dup_ack:
            self.counters["ack_dup_tx"] += 1
            if self._now is None:
                out.append(ack)
            else:
                self._copies.append(ack)
        return out

    def _oversize(self, ack, ip_len):
        """``ack`` (an ACK or a READ response) with its UDP datagram grown (zeros before the
        ICRC) to an IP length of ``ip_len``, lengths, IP checksum and ICRC right."""
        l2 = H.ETH.length if self.vlan is None else H.ETH_VLAN.length
        ip_len0 = H.IPV4.unpack(ack[l2:])["total_length"]
        dgram = ack[l2:l2 + ip_len0 - 4]
        grow = ip_len - len(dgram) - 4
        body = dgram[H.IPV4.length + H.UDP.length:] + bytes(max(grow, 0))
        ip = H.IPV4.unpack(dgram)
        ip_hdr = H.IPV4.pack(**{**ip, "total_length": ip_len, "checksum": 0})
        ip_hdr = H.IPV4.pack(**{**ip, "total_length": ip_len, "checksum": checksum(ip_hdr)})
        udp = H.UDP.unpack(dgram[H.IPV4.length:])
        udp_hdr = H.UDP.pack(**{**udp, "length": ip_len - H.IPV4.length})
        dgram = ip_hdr + udp_hdr + body
        return ack[:l2] + dgram + _icrc(dgram)
