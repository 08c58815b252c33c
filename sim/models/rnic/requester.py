"""The RC *requester* of the host RNIC model (:class:`~rocegen.sim.models.rnic.Rnic`): the
host RDMA-WRITEs, SENDs and RDMA-READs towards the FPGA over the same QPs on which the model is
a responder.

One :class:`SendQueue` per QP holds the send work requests and the reliability state; the
functions here post work requests (:func:`post`), make its packets (:func:`frame`, with the same
frame builder as the ACKs) and take the ACKNOWLEDGE frames and READ responses of the QP
(:func:`handle_aeth`, :func:`handle_read_response`). The
:class:`~rocegen.sim.models.rnic.Rnic` owns the clock, the counters and the send completion
queue. The rules are the project's wire notes ("Segmentation
(requester)", "Requester reliability rules", "RNR timer codes"), as a ConnectX / rxe requester
applies them:

* Segmentation at the PMTU: FIRST/MIDDLE carry exactly PMTU bytes, LAST 1..PMTU, a message of
  at most one PMTU (0 bytes included) is one ONLY packet; RETH (remote address, R_Key, DMA
  length = message length) on the FIRST/ONLY packet of a WRITE, ImmDt on LAST/ONLY of the
  WITH_IMMEDIATE opcodes; PadCnt = (-payload) & 3 zero bytes; AckReq on the last packet of every
  message and on every ``ack_req_every``-th packet of a message (counted from its first packet,
  so a resent packet is bit for bit the packet first sent, IP identification and ICRC aside);
  SE on the last packet of a SEND and of a WRITE with immediate; PSN + 1 per packet mod 2^24.
* A window: at most ``window`` packets between the oldest unacknowledged one and the next one
  sent (sent again included).
* PSNs are kept as unbounded integers inside the model ("absolute" PSNs, the first one being the
  QP's ``sq_psn``); a PSN on the wire is the absolute one mod 2^24, and an AETH's PSN is mapped
  back with the signed 24-bit distance to the oldest unacknowledged PSN (exact while fewer than
  2^23 PSNs are outstanding, which the window guarantees).
* ACK of PSN p (any credit code; credits are ignored, as a requester may with a ConnectX peer):
  everything up to p is acknowledged; send work requests complete (SUCCESS) in order once their
  last PSN is acknowledged. An ACK of a PSN before the oldest unacknowledged one (a duplicate, a
  late one) is counted ``req_ack_stale`` and ignored; an AETH whose PSN was never sent is counted
  ``req_ack_ghost`` and ignored (a strict check of the model: a correct responder never does it).
* NAK PSN sequence error with PSN p: everything before p is acknowledged, go-back-N from p (the
  resend may start with a MIDDLE or LAST packet; a resend from a FIRST/ONLY packet carries the
  RETH again). The same NAK again before that PSN was sent again (a duplicate, or a NAK that
  a timeout made useless) is ignored as stale.
* Retransmit timer: armed when a packet is sent with nothing timing, restarted on every
  progress, stopped when everything is acknowledged; after 4.096 us x 2^``timeout`` (code 0:
  never) the requester resends from the oldest unacknowledged packet. Timeouts and sequence
  NAKs count as retries; ``retry_cnt`` (0..7) of them without progress in between are allowed,
  one more fails the QP (``RETRY_EXC_ERR``).
* RNR NAK (0x20 | code) with PSN p: everything before p is acknowledged; nothing is sent for
  ``RNR_DELAY_US[code]`` (the retransmit timer is stopped meanwhile), then the requester resends
  from p. ``rnr_retry`` (0..7, 7 = forever) RNR NAKs without progress are allowed, one more
  fails the QP (``RNR_RETRY_EXC_ERR``). A second RNR NAK of the same PSN before that PSN was
  sent again is a duplicate (stale).
* NAK invalid request / remote access error / remote operational error (0x61..0x63; other NAK
  codes are taken as a remote operational error, as rxe does): everything before the NAKed PSN
  is acknowledged, the work request holding it completes with ``REM_INV_REQ_ERR`` /
  ``REM_ACCESS_ERR`` / ``REM_OP_ERR``, and the QP goes to the error state: every other
  outstanding or queued send work request completes with ``WR_FLUSH_ERR`` (so do the receive
  WQEs: a QP has one state), and later ones at once when posted.

RDMA READ (the project's wire notes, "RDMA READ"; where they are silent, the IBTA and rxe's
``rxe_comp.c``):

* A READ work request (local buffer, remote address, R_Key, length) takes ceil(length / PMTU)
  PSNs (1 for length 0) and is one READ request packet (BTH + RETH, AckReq set); the next PSN
  skips past its PSNs. At most ``max_rd_atomic`` READs are outstanding (sent and not completed)
  per QP: a further one waits, and the work requests posted after it wait behind it (the send
  queue is sent in order). The window counts the PSNs of a READ.
* Its responses are taken in PSN order: the response of PSN ``una`` (the oldest unacknowledged
  PSN) is placed at local offset (PSN - first PSN) x PMTU and acknowledges that PSN; the READ
  completes (opcode RDMA_READ, the bytes read in the completion's ``data``) with its last one.
  A READ response also acknowledges every WRITE/SEND before its READ (implicitly), never an
  earlier READ whose data did not all come.
* A response is checked against the request it answers: opcode (FIRST/ONLY at the PSN of a
  request sent for this READ, MIDDLE/LAST after it; ONLY/LAST on the READ's last PSN), AETH
  syndrome an ACK (any credit code), payload exactly PMTU on FIRST/MIDDLE, exactly the rest on
  LAST/ONLY, PadCnt. A response failing a check, or whose PSN belongs to no READ, is dropped
  and counted ``req_read_bad`` (a strict check); one of a PSN already received (the answer to a
  duplicate, or to a retry) is dropped and counted ``req_read_stale``; one of a PSN never sent
  is ``req_ack_ghost``.
* A response of a PSN after ``una`` (responses lost), or an ACK/NAK whose PSN is past a READ
  whose responses did not all come (rxe's "implied NAK"), starts a retry: go-back-N from
  ``una``, the READ reissued for the rest of its data (PSN ``una``, remote address advanced by
  (una - first PSN) x PMTU, length reduced by as much), then every later request again. It
  counts as a retry (``retry_cnt``) and ``req_read_retry``; until something is acknowledged no
  other gap starts another one (``req_read_stale``: a timeout still does). The retransmit timer
  runs while a READ is outstanding, and its timeout reissues the same way.

Atomics (the wire notes' "Atomics"): a COMPARE_SWAP or FETCH_ADD work request is one request
packet (BTH + AtomicETH, AckReq set, one PSN) and is handled as a one-packet READ: it counts
against ``max_rd_atomic``, no acknowledgement passes it before its ATOMIC_ACKNOWLEDGE came (an
ACK past it is rxe's implied NAK: go-back-N from it, the same PSN and operands again, which the
responder answers from its results), and it completes (opcode COMP_SWAP or FETCH_ADD) when its
ATOMIC_ACKNOWLEDGE is taken, the original value (8 bytes, little-endian) at its ``local_addr``
and in the completion's ``data``.

Time is the model's (nanoseconds, from the ``now`` of the :class:`Rnic` calls). Without time (a
model used without ``now``) there is no retransmit timer and RNR waits end at once.
"""

import enum
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from rocegen.sim.models.responder.atomic import ATOMIC_BYTES
from rocegen.sim.models.rnic.memory import Access
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import (
    NAK_INV_REQ,
    NAK_PSN_SEQ,
    NAK_REM_ACCESS,
    NAK_REM_OP,
    PSN_MASK,
    RNR_DELAY_US,
    timeout_ns,
)
from rocegen.wire.verbs import VERBS, WrOpcode

__all__ = ["SendOp", "SendWr", "SendQueue", "MAX_MSG", "DEFAULT_WINDOW", "DEFAULT_TIMEOUT",
           "DEFAULT_RD_ATOMIC", "ATOMIC_VERBS", "post", "frame", "handle_atomic_ack"]

#: Largest message a send work request may carry (2^31, a ConnectX's max_msg_sz).
MAX_MSG = 1 << 31
#: Default window of outstanding packets (see :meth:`Rnic.create_qp`).
DEFAULT_WINDOW = 1024
#: Default retransmit timeout code: 4.096 us x 2^8 = 1.05 ms (short for simulations).
DEFAULT_TIMEOUT = 8
#: Default READs outstanding per QP (max_rd_atomic) and queued by the responder
#: (max_dest_rd_atomic): a ConnectX's 16.
DEFAULT_RD_ATOMIC = 16

#: RDMA READ request and response opcodes (the catalogue's)
OP_READ_REQUEST = opc.OP_RC_RDMA_READ_REQUEST
READ_RESPONSES = opc.verb_opcodes(opc.Verb.RDMA_READ_RESPONSE)
OP_READ_FIRST, OP_READ_MIDDLE, OP_READ_LAST, OP_READ_ONLY = READ_RESPONSES

#: The atomic work requests (``IBV_WR_ATOMIC_CMP_AND_SWP``, ``IBV_WR_ATOMIC_FETCH_AND_ADD``):
#: the catalogue's verbs of the opcodes with an AtomicETH, by opcode.
ATOMIC_VERBS = {r.verb.value: r.code for r in opc.ROWS if r.has_atomic_eth}
#: The send work request opcodes (``IBV_WR_*``): the verbs' names, then the atomics'.
SendOp = enum.StrEnum("SendOp", [(v, v) for v in (*VERBS, *ATOMIC_VERBS)], module=__name__)

# opcode: (FIRST, MIDDLE, LAST, ONLY)
_OPCODES = {op: opc.message_opcodes(WrOpcode[op.value]) for op in SendOp
            if op.value in VERBS and WrOpcode[op.value].sends_payload}

# completion statuses of the fatal NAKs (other NAK codes: remote operational error, as rxe)
_NAK_STATUS = {NAK_INV_REQ: "REM_INV_REQ_ERR", NAK_REM_ACCESS: "REM_ACCESS_ERR",
               NAK_REM_OP: "REM_OP_ERR"}


def send_op(opcode):
    """``opcode`` as a :class:`SendOp`: a SendOp, its name (``"WRITE"``...), or any enum member
    of that name (such as :class:`rocegen.sim.models.requester.requester.WrOpcode`)."""
    name = opcode.name if isinstance(opcode, enum.Enum) and not isinstance(opcode, SendOp) \
        else opcode
    try:
        return SendOp(name)
    except ValueError:
        raise ValueError(f"send opcode must be one of {[o.value for o in SendOp]}, not "
                         f"{opcode!r}") from None


def _signed24(d):
    d &= PSN_MASK
    return d - (1 << 24) if d & 0x800000 else d


@dataclass(eq=False)
class SendWr:
    """A send work request and the absolute PSNs of its packets (of a READ: the PSNs of its
    responses, its request having the first one)."""
    wr_id: int
    op: SendOp
    data: bytes
    remote_addr: int
    rkey: int
    imm: int | None
    first: int              # absolute PSN of its first packet
    npkts: int
    read_len: int = 0       # READ: bytes to read; atomic: 8 (the original value)
    local_addr: int | None = None   # READ, atomic: where they go (None: ``buf``)
    buf: bytearray | None = None
    starts: set = field(default_factory=set)    # READ: PSNs of the requests sent for it
    issued: bool = False    # READ, atomic: its request was sent (it counts against max_rd_atomic)
    swap_add: int = 0       # atomic: the swap (COMPARE_SWAP) or add (FETCH_ADD) operand
    compare: int = 0        # atomic: COMPARE_SWAP's compare operand

    @property
    def last(self):
        return self.first + self.npkts - 1

    @property
    def is_write(self):
        return self.op in (SendOp.WRITE, SendOp.WRITE_IMM)

    @property
    def is_read(self):
        return self.op == SendOp.READ

    @property
    def is_atomic(self):
        return self.op in ATOMIC_VERBS

    @property
    def responded(self):
        """A READ or an atomic: its answer carries data, it holds one of ``max_rd_atomic``,
        and no acknowledgement passes it before that answer came."""
        return self.op == SendOp.READ or self.op in ATOMIC_VERBS

    @property
    def length(self):
        """The message length (of a READ: the bytes it reads; of an atomic: 8)."""
        return self.read_len if self.responded else len(self.data)


@dataclass
class SendQueue:
    """Requester state of one QP (read it freely in tests; change it through the :class:`Rnic`).
    PSNs here are absolute (see the module documentation); ``wire(psn)`` gives the wire PSN."""
    sq_psn: int                     # the first PSN sent (24-bit)
    timeout: int
    retry_cnt: int
    rnr_retry: int
    window: int
    ack_req_every: int
    max_rd_atomic: int = DEFAULT_RD_ATOMIC
    wrs: list = field(default_factory=list)     # every WR not yet completed is at [head:]
    firsts: list = field(default_factory=list)  # their first PSNs (for bisect)
    head: int = 0
    cur: int = 0                    # index of the WR holding ``nxt`` (or past the end)
    una: int = 0                    # oldest unacknowledged PSN
    nxt: int = 0                    # next PSN to send (behind ``sent_hi`` after a rewind)
    sent_hi: int = 0                # one past the highest PSN ever sent
    posted: int = 0                 # one past the last PSN of the last WR posted
    deadline: float | None = None   # retransmit timer
    rnr_until: float | None = None  # end of an RNR wait
    rnr_psn: int | None = None      # PSN refused by the last RNR NAK, until it is sent again
    rewound: int | None = None      # PSN of the last go-back-N, until it is sent again
    retries: int = 0                # timeouts + sequence NAKs since the last progress
    rnr_retries: int = 0            # RNR NAKs since the last progress
    reads: deque = field(default_factory=deque)     # READ, atomic WRs not completed, in order
    reads_out: int = 0              # how many of them were sent (against max_rd_atomic)
    read_retry: int | None = None   # PSN of a go-back-N under way (no other gap retries it)

    def __post_init__(self):
        base = self.sq_psn
        self.una = self.nxt = self.sent_hi = self.posted = base

    @staticmethod
    def wire(psn):
        return psn & PSN_MASK

    @property
    def outstanding(self):
        """Send work requests posted and not completed."""
        return len(self.wrs) - self.head

    @property
    def sent_any(self):
        return self.sent_hi != self.sq_psn

    def absolute(self, psn):
        """The absolute PSN of wire PSN ``psn`` (the nearest to the oldest unacknowledged)."""
        return self.una + _signed24(psn - self.una)

    # ---- posting and sending ----

    def post(self, wr_id, op, data, remote_addr, rkey, imm, pmtu, *, read_len=0,
             local_addr=None, swap_add=0, compare=0):
        n = read_len if op == SendOp.READ else len(data)
        npkts = 1 if op in ATOMIC_VERBS else max(1, -(-n // pmtu))
        wr = SendWr(wr_id, op, data, remote_addr, rkey, imm, self.posted, npkts,
                    swap_add=swap_add, compare=compare)
        if wr.responded:
            wr.read_len = ATOMIC_BYTES if wr.is_atomic else read_len
            wr.local_addr = local_addr
            if local_addr is None:
                wr.buf = bytearray(wr.read_len)
            self.reads.append(wr)
        self.wrs.append(wr)
        self.firsts.append(wr.first)
        self.posted += npkts
        return wr

    def ready(self, now, cap=None):
        """Packets that may be sent at ``now`` (window, RNR wait and ``max_rd_atomic``
        allowing; counted up to ``cap``)."""
        if self.rnr_until is not None and now is not None and now < self.rnr_until:
            return 0
        limit = min(self.posted, self.una + self.window)
        if self.nxt >= limit:
            return 0
        if not self.reads or self.reads[-1].last < self.nxt:
            return limit - self.nxt
        count, psn, i, new = 0, self.nxt, self.cur, 0
        while psn < limit and (cap is None or count < cap):
            while self.wrs[i].last < psn:
                i += 1
            wr = self.wrs[i]
            if wr.responded:
                if not wr.issued:
                    if self.reads_out + new >= self.max_rd_atomic:
                        break
                    new += 1
                count += 1
                psn = wr.last + 1
            else:
                end = min(wr.last + 1, limit)
                count += end - psn
                psn = end
        return count

    def seek(self, psn):
        """Send from ``psn`` next (go-back-N, or forward past acknowledged packets)."""
        self.nxt = psn
        self.cur = max(bisect_right(self.firsts, psn, self.head) - 1, self.head)

    def packet(self, pmtu):
        """The fields of the packet of PSN ``nxt``: ``(opcode, se, ackreq, padcnt, body)``, and
        moves on to the next PSN (past the PSNs of a READ)."""
        while self.wrs[self.cur].last < self.nxt:
            self.cur += 1
        wr = self.wrs[self.cur]
        k = self.nxt - wr.first
        if wr.responded:
            if wr.is_atomic:
                opcode = ATOMIC_VERBS[wr.op]
                body = H.ATOMIC_ETH.pack(va=wr.remote_addr, rkey=wr.rkey, swap_add=wr.swap_add,
                                         compare=wr.compare)
            else:
                opcode = OP_READ_REQUEST
                off = k * pmtu
                body = H.RETH.pack(va=(wr.remote_addr + off) & ((1 << 64) - 1), rkey=wr.rkey,
                                   dma_len=wr.read_len - off)
            wr.starts.add(self.nxt)
            if not wr.issued:
                wr.issued = True
                self.reads_out += 1
            if self.rnr_psn == self.nxt:
                self.rnr_psn = None
            if self.rewound == self.nxt:
                self.rewound = None
            self.nxt = wr.last + 1
            return opcode, 0, 1, 0, body
        first, last = k == 0, k == wr.npkts - 1
        payload = wr.data[k * pmtu:(k + 1) * pmtu]
        ops = _OPCODES[wr.op]
        opcode = ops[3] if first and last else ops[0] if first else ops[2] if last else ops[1]
        ext = b""
        if first and wr.is_write:
            ext = H.RETH.pack(va=wr.remote_addr, rkey=wr.rkey, dma_len=len(wr.data))
        if last and wr.imm is not None:
            ext += H.IMMDT.pack(imm=wr.imm)
        padcnt = (-len(payload)) & 3
        ackreq = last or (k + 1) % self.ack_req_every == 0
        se = last and wr.op != SendOp.WRITE
        if self.rnr_psn == self.nxt:
            self.rnr_psn = None
        if self.rewound == self.nxt:
            self.rewound = None
        self.nxt += 1
        return opcode, int(se), int(ackreq), padcnt, ext + payload + bytes(padcnt)

    def sent(self, now):
        """Bookkeeping after the packet of PSN ``nxt - 1`` left; True if it was a resend."""
        resend = self.nxt <= self.sent_hi
        self.sent_hi = max(self.sent_hi, self.nxt)
        if self.deadline is None and self.timeout and now is not None:
            self.deadline = now + timeout_ns(self.timeout)
        return resend

    # ---- acknowledgements ----

    def next_deadline(self):
        times = [t for t in (self.deadline, self.rnr_until) if t is not None]
        return min(times, default=None)

    def progress(self, una, now, complete):
        """Everything before ``una`` is acknowledged: complete the WRs it covers (``complete(wr,
        status)``), restart the retransmit timer."""
        if una <= self.una:
            return False
        self.una = una
        self.retries = self.rnr_retries = 0
        self.rewound = self.read_retry = None
        if self.nxt < una:
            self.seek(una)
        while self.head < len(self.wrs) and self.wrs[self.head].last < una:
            wr = self.wrs[self.head]
            if wr.responded:
                self._read_done(wr)
            complete(wr, "SUCCESS")
            self.head += 1
        if self.cur < self.head:
            self.cur = self.head
        if self.head > 1024 and 2 * self.head > len(self.wrs):
            del self.wrs[:self.head], self.firsts[:self.head]
            self.cur -= self.head
            self.head = 0
        if self.una < self.sent_hi and self.timeout and now is not None \
                and self.rnr_until is None:
            self.deadline = now + timeout_ns(self.timeout)
        else:
            self.deadline = None
        return True

    def _read_done(self, wr):
        self.reads.popleft()
        if wr.issued:
            self.reads_out -= 1

    def read_limit(self, psn):
        """``psn``, or the first unacknowledged PSN before it that belongs to a READ or an
        atomic (an acknowledgement never passes one whose answer did not all come)."""
        if self.reads:
            first = max(self.una, self.reads[0].first)
            if first < psn:
                return first
        return psn

    def wr_at(self, psn):
        """The work request holding absolute PSN ``psn`` (one not completed), or None."""
        i = bisect_right(self.firsts, psn, self.head) - 1
        if i < self.head or self.wrs[i].last < psn:
            return None
        return self.wrs[i]

    def rewind(self, psn):
        """Go back to ``psn`` (after a timeout, a sequence NAK or a READ response gap)."""
        self.seek(psn)
        self.rewound = self.read_retry = psn
        self.deadline = None

    def flush(self, status, complete):
        """The QP failed: the WR holding the oldest unacknowledged PSN completes with
        ``status``, every later one with WR_FLUSH_ERR."""
        first = True
        while self.head < len(self.wrs):
            complete(self.wrs[self.head], status if first else "WR_FLUSH_ERR")
            self.head += 1
            first = False
        self.wrs.clear()
        self.firsts.clear()
        self.reads.clear()
        self.reads_out = 0
        self.read_retry = None
        self.head = self.cur = 0
        self.una = self.nxt = self.sent_hi = self.posted = max(self.posted, self.sent_hi)
        self.deadline = self.rnr_until = None


def handle_aeth(nic, qp, syndrome, psn, now, where):
    """An ACKNOWLEDGE (AETH ``syndrome``, BTH ``psn``) for the requester of ``qp``, received at
    ``now`` by ``nic`` (an :class:`Rnic`: its ``_event`` counts and logs, ``_complete_send``
    completes a WR and ``_qp_error`` fails the QP)."""
    sq = qp.sq
    kind = syndrome >> 5
    if kind == 2:
        nic._event("drop_malformed", f"{where}: AETH syndrome {syndrome:#04x} (reserved kind)")
        return
    counter = ("req_ack_rx", "req_rnr_rx", None, "req_nak_seq_rx" if syndrome == NAK_PSN_SEQ
               else "req_nak_err_rx")[kind]
    nic.counters[counter] += 1
    a = sq.absolute(psn)
    what = f"{where}: AETH {syndrome:#04x}"
    if a >= sq.sent_hi:
        nic._event("req_ack_ghost", f"{what}: PSN never sent (next new PSN "
                   f"{sq.wire(sq.sent_hi):#08x})")
        return
    if a < sq.una or (kind == 1 and sq.rnr_psn == a) or (
            syndrome == NAK_PSN_SEQ and a == sq.una and sq.rewound == a):
        nic._event("req_ack_stale", f"{what}: oldest unacknowledged PSN is "
                   f"{sq.wire(sq.una):#08x}" + (" (a duplicate NAK)" if a >= sq.una else ""))
        return

    def complete(wr, status):
        nic._complete_send(qp, wr, status)

    upto = a + 1 if kind == 0 else a
    limit = sq.read_limit(upto)
    if limit < upto:
        # past a READ whose responses did not all come: they were lost (rxe's implied NAK)
        sq.progress(limit, now, complete)
        read_gap(nic, qp, what)
        return
    if kind == 0:
        sq.progress(a + 1, now, complete)
        return
    sq.progress(a, now, complete)
    if kind == 1:
        if sq.rnr_retry != 7 and sq.rnr_retries >= sq.rnr_retry:
            nic._event("req_rnr_retry_exc", f"{what}: RNR retries ({sq.rnr_retry}) exhausted")
            fail(nic, qp, "RNR_RETRY_EXC_ERR")
            return
        sq.rnr_retries += 1
        sq.seek(a)
        sq.rnr_psn = a
        sq.deadline = None
        sq.rnr_until = None if now is None else now + 1000.0 * RNR_DELAY_US[syndrome & 0x1F]
        nic.log.append(f"req_rnr_rx: {what}: resend from {psn:#08x} after "
                       f"{RNR_DELAY_US[syndrome & 0x1F]} us")
    elif syndrome == NAK_PSN_SEQ:
        if retry(nic, qp, what):
            sq.rewind(a)
            nic.log.append(f"req_nak_seq_rx: {what}: go back to {psn:#08x}")
    else:
        nic.log.append(f"req_nak_err_rx: {what}: the QP fails")
        fail(nic, qp, _NAK_STATUS.get(syndrome, "REM_OP_ERR"))


def read_gap(nic, qp, what):
    """Responses of the READ holding ``una`` are missing: reissue it for the rest (go-back-N
    from ``una``), unless a go-back-N from there is under way already."""
    sq = qp.sq
    if sq.read_retry == sq.una:
        nic._event("req_read_stale", f"{what}: responses missing from PSN "
                   f"{sq.wire(sq.una):#08x}, whose retry is under way")
        return
    if retry(nic, qp, what):
        nic.counters["req_read_retry"] += 1
        nic.log.append(f"req_read_retry: {what}: READ reissued from {sq.wire(sq.una):#08x}")
        sq.rewind(sq.una)


def _response_error(wr, op, a, syndrome, n, padcnt, pmtu):
    """Why READ response ``op`` of absolute PSN ``a`` (AETH ``syndrome`` or None, ``n``
    payload bytes, ``padcnt``) does not answer READ ``wr``, or None."""
    off = (a - wr.first) * pmtu
    rest = wr.read_len - off
    last = a == wr.last
    at_start = a in wr.starts
    name = opc.row(op).position.value
    if op == OP_READ_ONLY and not (last and at_start):
        return (f"READ_RESPONSE_ONLY at offset {off} of a READ of {wr.read_len} bytes"
                + ("" if last else " (not its last PSN)") + ("" if at_start else
                                                              " (no request started there)"))
    if op == OP_READ_FIRST and not (at_start and not last):
        return (f"READ_RESPONSE_FIRST at offset {off} of a READ of {wr.read_len} bytes"
                + (" (its last PSN)" if last else " (no request started there)"))
    if op in (OP_READ_MIDDLE, OP_READ_LAST) and (a == wr.first or last != (op == OP_READ_LAST)):
        return f"READ_RESPONSE_{name} at offset {off} of a READ of {wr.read_len} bytes"
    if syndrome is not None and syndrome >> 5:
        return f"READ_RESPONSE_{name} with AETH syndrome {syndrome:#04x} (not an ACK)"
    want = rest if last else pmtu
    if n != want:
        return f"READ_RESPONSE_{name} carries {n} payload bytes, {want} expected"
    if padcnt != (-n) & 3:
        return f"READ_RESPONSE_{name} has PadCnt {padcnt} for {n} payload bytes"
    return None


def _answer_in_order(nic, qp, a, now, where):
    """A READ response or ATOMIC_ACKNOWLEDGE of absolute PSN ``a`` came: the WRITE/SENDs before
    its request are acknowledged; if answers before it are missing, a retry starts (None);
    else the ``complete(wr, status)`` that acknowledging ``a`` takes."""
    sq = qp.sq

    def complete(w, status):
        nic._complete_send(qp, w, status)

    limit = sq.read_limit(a)
    if limit > sq.una:
        sq.progress(limit, now, complete)          # the WRITE/SENDs before it are done
    if a > sq.una:
        read_gap(nic, qp, f"{where}: PSN {sq.wire(sq.una):#08x} missing")
        return None
    return complete


def handle_read_response(nic, qp, op, ext, payload, padcnt, psn, now, where):
    """A READ response (``op``, AETH in ``ext`` but on MIDDLE, ``payload``) of wire PSN ``psn``
    for the requester of ``qp``, received at ``now`` by ``nic``."""
    sq = qp.sq
    a = sq.absolute(psn)
    if a >= sq.sent_hi:
        nic._event("req_ack_ghost", f"{where}: PSN never sent (next new PSN "
                   f"{sq.wire(sq.sent_hi):#08x})")
        return
    if a < sq.una:
        nic._event("req_read_stale", f"{where}: PSN received already (oldest unacknowledged "
                   f"{sq.wire(sq.una):#08x})")
        return
    wr = sq.wr_at(a)
    if wr is None or not wr.is_read:
        nic._event("req_read_bad", f"{where}: the PSN is not one of a READ")
        return
    syndrome = H.AETH.unpack(ext)["syndrome"] if ext else None
    err = _response_error(wr, op, a, syndrome, len(payload), padcnt, qp.pmtu)
    if err:
        nic._event("req_read_bad", f"{where}: {err}")
        return

    complete = _answer_in_order(nic, qp, a, now, where)
    if complete is None:
        return
    off = (a - wr.first) * qp.pmtu
    if wr.buf is not None:
        wr.buf[off:off + len(payload)] = payload
    elif payload:
        nic.write_mem(wr.local_addr + off, payload)
    nic.counters["req_read_rx"] += 1
    nic.counters["req_read_bytes"] += len(payload)
    sq.progress(a + 1, now, complete)


def retry(nic, qp, what):
    """One more retry (timeout or sequence NAK): False (and the QP failed) if none is left."""
    sq = qp.sq
    if sq.retries >= sq.retry_cnt:
        nic._event("req_retry_exc", f"{what}: retries ({sq.retry_cnt}) exhausted")
        fail(nic, qp, "RETRY_EXC_ERR")
        return False
    sq.retries += 1
    return True


def tick(nic, qp, now):
    """The timers of the requester of ``qp`` at ``now``: the end of an RNR wait, a timeout."""
    sq = qp.sq
    if sq.rnr_until is not None and now >= sq.rnr_until:
        sq.rnr_until = None
    if sq.deadline is not None and now >= sq.deadline:
        sq.deadline = None
        what = f"QP {qp.qpn:#x}: PSN {sq.wire(sq.una):#08x} not acknowledged"
        nic._event("req_timeouts", f"{what} within {timeout_ns(sq.timeout)} ns")
        if retry(nic, qp, what):
            sq.rewind(sq.una)


def fail(nic, qp, status):
    qp.sq.flush(status, lambda wr, st: nic._complete_send(qp, wr, st))
    nic._qp_error(qp)


def post(nic, qp, opcode, *, data, length, remote_addr, rkey, imm, wr_id, local_addr,
         swap_add=None, compare=None):
    """A send work request posted on ``qp`` (:meth:`Rnic.post_send`), checked; the
    :class:`SendWr`."""
    op = SendOp(send_op(opcode))
    if op == SendOp.READ:
        return _post_read(nic, qp, length=length, data=data, imm=imm, remote_addr=remote_addr,
                          rkey=rkey, wr_id=wr_id, local_addr=local_addr)
    if op in ATOMIC_VERBS:
        if data is not None or imm is not None or length not in (None, ATOMIC_BYTES):
            raise ValueError(f"{op} carries no data and no imm: give swap_add (and compare)")
        return _post_atomic(nic, qp, op, remote_addr=remote_addr, rkey=rkey, wr_id=wr_id,
                            local_addr=local_addr, swap_add=swap_add, compare=compare)
    if swap_add is not None or compare is not None:
        raise ValueError(f"{op} has no swap_add or compare (only the atomics have)")
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
    if qp.peer_mac is None and qp.peer_ip not in nic.arp_cache:
        raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
    wr = qp.sq.post(wr_id, op, data, remote_addr, rkey, imm, qp.pmtu)
    if qp.state == "ERR":
        fail(nic, qp, "WR_FLUSH_ERR")
    return wr


def _post_read(nic, qp, *, length, data, imm, remote_addr, rkey, wr_id, local_addr):
    if data is not None or imm is not None:
        raise ValueError("a READ carries no data and no imm: give length (and local_addr)")
    if length is None or not 0 <= length <= MAX_MSG:
        raise ValueError(f"a READ needs length, 0..{MAX_MSG} bytes (not {length!r})")
    if not 0 <= remote_addr < 1 << 64 or not 0 <= rkey <= 0xFFFFFFFF:
        raise ValueError("remote_addr is a 64-bit and rkey a 32-bit number")
    if local_addr is not None and length:
        mr = nic.memory.at(local_addr, length)
        if mr is None or not mr.access & Access.LOCAL_WRITE:
            raise ValueError(f"READ buffer [{local_addr:#x}, +{length}) is not in a region "
                             "with LOCAL_WRITE access")
    if qp.peer_mac is None and qp.peer_ip not in nic.arp_cache:
        raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
    wr = qp.sq.post(wr_id, SendOp.READ, b"", remote_addr, rkey, None, qp.pmtu,
                    read_len=length, local_addr=local_addr)
    if qp.state == "ERR":
        fail(nic, qp, "WR_FLUSH_ERR")
    return wr


def _post_atomic(nic, qp, op, *, remote_addr, rkey, wr_id, local_addr, swap_add, compare):
    """An atomic work request: FETCH_ADD adds ``swap_add``; COMPARE_SWAP writes ``swap_add``
    where the value equals ``compare``. The requester does not check the remote address's
    alignment (the responder refuses a misaligned one, as rxe's does)."""
    if op == SendOp.FETCH_ADD and compare is not None:
        raise ValueError("FETCH_ADD has no compare operand")
    compare = compare or 0
    for name, v, bits in (("swap_add", swap_add, 64), ("compare", compare, 64),
                          ("remote_addr", remote_addr, 64), ("rkey", rkey, 32)):
        if not isinstance(v, int) or not 0 <= v < 1 << bits:
            raise ValueError(f"{op}: {name} must be a {bits}-bit number, not {v!r}")
    if local_addr is not None:
        mr = nic.memory.at(local_addr, ATOMIC_BYTES)
        if mr is None or not mr.access & Access.LOCAL_WRITE:
            raise ValueError(f"{op} result [{local_addr:#x}, +{ATOMIC_BYTES}) is not in a region "
                             "with LOCAL_WRITE access")
    if qp.peer_mac is None and qp.peer_ip not in nic.arp_cache:
        raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
    wr = qp.sq.post(wr_id, op, b"", remote_addr, rkey, None, qp.pmtu, local_addr=local_addr,
                    swap_add=swap_add, compare=compare)
    if qp.state == "ERR":
        fail(nic, qp, "WR_FLUSH_ERR")
    return wr


def handle_atomic_ack(nic, qp, ext, psn, now, where):
    """An ATOMIC_ACKNOWLEDGE (AETH and AtomicAckETH in ``ext``) of wire PSN ``psn`` for the
    requester of ``qp``, received at ``now`` by ``nic``: the original value goes to the atomic's
    result (8 bytes, in the byte order of ``nic.atomics``), and the atomic and what came before
    it are acknowledged. A PSN never sent is ``req_ack_ghost``; one acknowledged already (the
    answer to a duplicate) ``req_atomic_stale``; one that is not an atomic's, or an AETH that is
    not an ACK, ``req_atomic_bad``."""
    sq = qp.sq
    a = sq.absolute(psn)
    if a >= sq.sent_hi:
        nic._event("req_ack_ghost", f"{where}: PSN never sent (next new PSN "
                   f"{sq.wire(sq.sent_hi):#08x})")
        return
    if a < sq.una:
        nic._event("req_atomic_stale", f"{where}: PSN acknowledged already (oldest "
                   f"unacknowledged {sq.wire(sq.una):#08x})")
        return
    wr = sq.wr_at(a)
    syndrome = H.AETH.unpack(ext)["syndrome"]
    if wr is None or not wr.is_atomic or syndrome >> 5:
        why = (f"AETH syndrome {syndrome:#04x} is not an ACK" if syndrome >> 5 else
               "the PSN is not one of an atomic")
        nic._event("req_atomic_bad", f"{where}: {why}")
        return

    complete = _answer_in_order(nic, qp, a, now, where)
    if complete is None:
        return
    original = H.ATOMIC_ACK_ETH.unpack(ext[H.AETH.length:])["orig"]
    value = original.to_bytes(ATOMIC_BYTES, nic.atomics.byteorder)
    if wr.buf is not None:
        wr.buf[:] = value
    else:
        nic.write_mem(wr.local_addr, value)
    nic.counters["req_atomic_rx"] += 1
    sq.progress(a + 1, now, complete)


def frame(nic, qp, now):
    """The requester's next packet on ``qp`` (sent at ``now``), counted."""
    psn = qp.sq.wire(qp.sq.nxt)
    opcode, se, ackreq, padcnt, body = qp.sq.packet(qp.pmtu)
    out = nic.frames.roce(qp, None, opcode, psn, body, se=se, ackreq=ackreq, padcnt=padcnt)
    nic.counters["req_tx"] += 1
    if qp.sq.sent(now):
        nic.counters["req_retx"] += 1
    return out
