"""The queue pairs of the RNIC model: the state of one RC QP (its responder's here, its
requester's in :class:`~rocegen.sim.models.rnic.requester.SendQueue`) and PSN arithmetic."""

from collections import deque
from dataclasses import dataclass, field

from rocegen.sim.models.responder.atomic import AtomicResults
from rocegen.sim.models.rnic.memory import Access, MemoryRegion
from rocegen.sim.models.rnic.requester import DEFAULT_RD_ATOMIC, SendQueue
from rocegen.wire.roce import PSN_MASK

__all__ = ["RecvWqe", "QueuePair", "psn_diff"]


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
    sq: SendQueue | None = None         # the requester side (requester.py)
    # RDMA READ responder: the READs executed lately (for duplicates), and the answers of the QP
    # in the order they leave: _ReadJob (responses still to send) and frames queued behind one
    rd_res: deque = field(default_factory=deque)
    rsp_out: deque = field(default_factory=deque)
    # atomic responder: the results duplicates are answered from (atomic_responder.py)
    atomic_res: AtomicResults | None = None


def psn_diff(a, b):
    """``a - b`` as a signed 24-bit number (PSN comparison modulo 2^24)."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d & 0x800000 else d
