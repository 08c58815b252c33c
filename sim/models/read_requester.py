"""Reference model of the RDMA READ requester (:class:`~rocegen.gateware.roce.read_track.ReadTrack`
and :class:`~rocegen.gateware.roce.read_place.ReadPlace`), pure Python and independent of the
gateware.

The endpoint pulls data from a peer's memory with RDMA READ (the wire notes' "RDMA READ",
"Requester reliability rules" and "Segmentation"; the IBTA and Linux rxe's ``rxe_comp.c`` /
``rxe_req.c`` where they are silent). Per QP at most its *limit* of READs are outstanding,
oldest first: ``max_rd_atomic`` (1..16) until :meth:`~ReadRequesterModel.set_limit` sets another
(what the peer accepts, from the connection manager), clipped into 1..``max_rd_atomic``; a
flush keeps it. A limit lowered below the READs a QP has leaves them outstanding: the QP is full
until they are down to below it. A READ is its work request's ``wr_id``, the local byte address its
data goes to, the remote VA and R_Key, its length (0..2^31-1 bytes), its first PSN, the path MTU
and the PSNs it spans: ceil(length / PMTU), 1 for length 0. All PSN arithmetic is modulo 2^24
(serial: ``a`` is after ``b`` when ``(a - b) mod 2^24`` is in 1..2^23-1).

Issuing (:meth:`ReadRequesterModel.issue`, what the scheduler sends):

* ``new``: the READ is added behind the QP's others (its request goes out with its first PSN);
  a QP with its limit of READs outstanding (:meth:`~ReadRequesterModel.full`) or an index
  outside the table refuses it: counted ``overflow``, nothing added.
* A reissue (``new`` False, the request sent again from PSN ``psn``): when ``psn`` is after the
  READ's first PSN, the QP remembers ``(first, psn - first)`` as its *restart* (the latest
  request sent from inside a READ); a reissue from the first PSN changes nothing.

The expected PSN ``e`` of a QP is that of the oldest outstanding READ (the *head*) plus the PSNs
of it already received. A response is classified, in this order (one verdict each):

* ``unknown``: the QP has no outstanding READ, or the PSN is after the newest READ's last PSN.
* ``duplicate``: the PSN is before ``e`` (an answer to a request sent twice, a copy).
* ``gap``: the PSN is after ``e`` (the responses from ``e`` were lost): nothing is written; the
  head READ is to be reissued for the rest: PSN ``e``, remote VA and local address advanced by
  ``(e - first) x PMTU``, length reduced by as much (:class:`Reissue`). It travels to the retry
  engine as a NAK PSN sequence error of ``e`` (syndrome 0x60): that acknowledges ``e - 1``,
  rewinds the QP to ``e`` (the scheduler resends from there: the READ from inside, then every
  later request, go-back-N as rxe's ``req_retry``), counts one retry against ``retry_cnt``
  and is ignored when it repeats the NAK of the rewind under way with no progress since.
* at ``e``, ``k = e - first`` the response's index in the head READ, the READ's last index ``n``:
  ``opcode``: FIRST and ONLY only where a request started (``k = 0`` or ``k`` the QP's restart
  index for this READ), MIDDLE and LAST never at ``k = 0``; ONLY and LAST exactly at ``k = n``,
  FIRST and MIDDLE before it. ``nak``: the AETH (FIRST, LAST, ONLY) is not an ACK (syndrome
  bits 7..5 not zero): the QP fails; 0x61 / 0x62 / 0x63 go to the retry engine as they are
  (REMOTE_INVALID / REMOTE_ACCESS / REMOTE_OP completions), any other as 0x63 (rxe's mapping
  of an unexpected NAK code). ``length``: the payload must be exactly PMTU bytes (FIRST,
  MIDDLE) or exactly the rest, ``length - k x PMTU`` (LAST, ONLY).
* ``good``: the payload is written at ``local address + k x PMTU`` (so never outside the READ's
  local range), ``e`` moves on, and an ACK of the PSN goes to the retry engine (syndrome 0x1F,
  the response's MSN): READ responses acknowledge every earlier WRITE/SEND implicitly. The last
  one (``k = n``) completes the READ (``done``): it leaves the table.

Acknowledgements (ACKNOWLEDGE packets, :meth:`ReadRequesterModel.ack`) pass on to the retry
engine unchanged (``ack_pass``) unless the PSN they acknowledge (``p`` for an ACK, ``p - 1``
for a NAK or RNR NAK) is not before ``e``: an acknowledgement never passes a READ whose data did
not all come (rxe's implied NAK). Such an acknowledgement becomes the gap of the head READ
(``ack_gap``: the NAK PSN sequence error of ``e`` and the reissue), as rxe does whatever the
syndrome. A NAK carried by an ACKNOWLEDGE at the READ request's PSN (remote access error for a
bad R_Key, ...) passes: the retry engine fails the QP and the completer completes the READ with
the error.

Completion: the READ's work request is posted to the completer like any other, with the PSN of
its last response as ``last_psn``; it completes OK when the retry engine's acknowledged PSN
covers it, in order with the QP's other work requests. Events (:class:`Outcome`) leave in the
order the inputs came, each once the payload writes of every response before it (its own
included) are done: taken by on-chip memory, acknowledged by AXI4 memory.

:meth:`ReadRequesterModel.flush` forgets a QP's READs (the QP failed or was set up again).
"""

from collections import deque
from dataclasses import dataclass

from rocegen.wire import headers as H
from rocegen.wire.roce import NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, NAK_REM_OP, SYN_ACK

__all__ = ["ReadRequesterModel", "Read", "Reissue", "AckEvent", "Outcome", "VERDICTS",
           "PSN_MOD", "PMTUS", "MAX_RD_ATOMIC", "READ_FIRST", "READ_MIDDLE", "READ_LAST",
           "READ_ONLY", "SYN_ACK", "NAK_PSN_SEQ", "NAK_REM_OP", "nak_syndrome"]

PSN_MOD = 1 << 24
_HALF = 1 << 23
PMTUS = (256, 512, 1024, 2048, 4096)
#: Largest ``max_rd_atomic`` (ConnectX offers 16).
MAX_RD_ATOMIC = 16

READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY = (
    H.OP_RC_RDMA_READ_RESPONSE_FIRST, H.OP_RC_RDMA_READ_RESPONSE_MIDDLE,
    H.OP_RC_RDMA_READ_RESPONSE_LAST, H.OP_RC_RDMA_READ_RESPONSE_ONLY)
_OPCODES = (READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY)
_FATAL = (NAK_INV_REQ, NAK_REM_ACCESS, NAK_REM_OP)

#: The verdicts, in the gateware's order (``ReadVerdict``); each is also a counter.
VERDICTS = ("good", "gap", "duplicate", "unknown", "opcode", "length", "nak", "ack_pass",
            "ack_gap")


def _signed(x):
    x %= PSN_MOD
    return x - PSN_MOD if x >= _HALF else x


def nak_syndrome(syndrome):
    """The NAK a READ response's non-ACK AETH ``syndrome`` becomes for the retry engine."""
    return syndrome if syndrome in _FATAL else NAK_REM_OP


@dataclass(frozen=True)
class Read:
    """An outstanding READ."""
    wr_id: int
    local_addr: int
    remote_va: int
    rkey: int
    length: int
    first: int
    pmtu: int

    @property
    def npsn(self):
        return max(1, -(-self.length // self.pmtu))

    @property
    def last(self):
        return (self.first + self.npsn - 1) % PSN_MOD


@dataclass(frozen=True)
class Reissue:
    """The request that asks again for the rest of a READ: from PSN ``psn`` (``offset`` bytes
    into the READ), ``length`` bytes to ``local_addr`` from ``remote_va``."""
    qp: int
    wr_id: int
    psn: int
    offset: int
    local_addr: int
    remote_va: int
    rkey: int
    length: int


@dataclass(frozen=True)
class AckEvent:
    """An acknowledgement for the retry engine (the gateware's ``ACK_EVENT``)."""
    qp: int
    syndrome: int
    psn: int
    msn: int = 0


@dataclass(frozen=True)
class Outcome:
    """What one response or acknowledgement did: its verdict, the payload written (``(byte
    address, bytes)``, at most one), the event for the retry engine, the ``wr_id`` of the READ
    it completed and the reissue it asks for."""
    verdict: str
    writes: tuple = ()
    ack: AckEvent | None = None
    done: int | None = None
    gap: Reissue | None = None


class _Qp:
    def __init__(self):
        self.reads = deque()
        self.cnt = 0                # PSNs of the head READ received
        self.restart = None         # (first, index) of the latest request sent from inside

    def restart_index(self, head):
        if self.restart is not None and self.restart[0] == head.first:
            return self.restart[1]
        return 0


class ReadRequesterModel:
    """The READ requester's rules (module documentation) for ``num_qps`` QPs of at most
    ``max_rd_atomic`` outstanding READs each (each QP's limit: :attr:`limits`)."""

    def __init__(self, num_qps, max_rd_atomic=MAX_RD_ATOMIC):
        if not isinstance(num_qps, int) or not 1 <= num_qps <= 256:
            raise ValueError(f"num_qps must be 1..256, not {num_qps!r}")
        if not isinstance(max_rd_atomic, int) or not 1 <= max_rd_atomic <= MAX_RD_ATOMIC:
            raise ValueError(f"max_rd_atomic must be 1..{MAX_RD_ATOMIC}, not {max_rd_atomic!r}")
        self.num_qps = num_qps
        self.max_rd_atomic = max_rd_atomic
        self.qps = [_Qp() for _ in range(num_qps)]
        #: READs each QP may have outstanding (1..``max_rd_atomic``; :meth:`set_limit`)
        self.limits = [max_rd_atomic] * num_qps
        self.counters = dict.fromkeys(VERDICTS + ("overflow",), 0)

    # ---- queries

    def full(self, qp):
        """``qp`` has its limit of READs outstanding (or more: its limit was lowered)."""
        return len(self.qps[qp].reads) >= self.limits[qp]

    def outstanding(self, qp):
        return tuple(self.qps[qp].reads)

    def expected(self, qp):
        """The expected PSN of ``qp`` (None without an outstanding READ)."""
        q = self.qps[qp]
        return (q.reads[0].first + q.cnt) % PSN_MOD if q.reads else None

    def view(self, qp):
        """What the gateware's table shows of ``qp`` (``ReadTrack``'s ``view``): None without an
        outstanding READ, else the head READ, the PSNs of it received, its restart index (0:
        none) and the newest READ's last PSN."""
        if not 0 <= qp < self.num_qps or not self.qps[qp].reads:
            return None
        q = self.qps[qp]
        head = q.reads[0]
        return {"head": head, "cnt": q.cnt, "rs": q.restart_index(head),
                "tail_last": q.reads[-1].last}

    # ---- the table

    def issue(self, qp, *, wr_id, local_addr, length, first, pmtu, remote_va=0, rkey=0,
              new=True, psn=None):
        """A READ request sent: a new READ (``new``), or a reissue of the READ whose first PSN
        is ``first`` from PSN ``psn``. Returns False when a new READ is refused."""
        if pmtu not in PMTUS:
            raise ValueError(f"path MTU must be one of {PMTUS}, not {pmtu}")
        if not 0 <= length < 1 << 31:
            raise ValueError(f"READ length must be 0..2^31-1, not {length}")
        if not 0 <= qp < self.num_qps:
            if new:
                self.counters["overflow"] += 1
            return not new
        q = self.qps[qp]
        first %= PSN_MOD
        if new:
            if self.full(qp):
                self.counters["overflow"] += 1
                return False
            q.reads.append(Read(wr_id, local_addr % (1 << 32), remote_va % (1 << 64), rkey,
                                length, first, pmtu))
            return True
        psn = first if psn is None else psn % PSN_MOD
        if psn != first:
            q.restart = (first, (psn - first) % _HALF)
        return True

    def set_limit(self, qp, limit):
        """The READs ``qp`` may have outstanding from now on: ``limit`` clipped into
        1..``max_rd_atomic`` (0 counts as 1). An index outside the table changes nothing."""
        if not isinstance(limit, int) or limit < 0:
            raise ValueError(f"a READ limit is a non-negative integer, not {limit!r}")
        if 0 <= qp < self.num_qps:
            self.limits[qp] = min(max(limit, 1), self.max_rd_atomic)

    def flush(self, qp):
        """Forget every READ of ``qp`` (it failed, or was set up again); its limit stays."""
        if 0 <= qp < self.num_qps:
            self.qps[qp] = _Qp()

    def advance(self, qp):
        """The expected response of ``qp`` came: the head READ moves on, and leaves when it was
        its last. Returns the READ that left, or None."""
        q = self.qps[qp]
        head = q.reads[0]
        if q.cnt == head.npsn - 1:
            q.reads.popleft()
            q.cnt = 0
            return head
        q.cnt += 1
        return None

    # ---- inputs

    def _gap(self, qp):
        q = self.qps[qp]
        head = q.reads[0]
        off = q.cnt * head.pmtu
        e = (head.first + q.cnt) % PSN_MOD
        return e, Reissue(qp, head.wr_id, e, off, (head.local_addr + off) % (1 << 32),
                          (head.remote_va + off) % (1 << 64), head.rkey, head.length - off)

    def _count(self, outcome):
        self.counters[outcome.verdict] += 1
        return outcome

    def response(self, qp, opcode, psn, payload=b"", syndrome=SYN_ACK, msn=0):
        """A READ response of ``qp`` (``opcode`` 0x0D..0x10, BTH ``psn``, ``payload`` without
        the pad, AETH ``syndrome`` and ``msn``, ignored on MIDDLE)."""
        if opcode not in _OPCODES:
            raise ValueError(f"not a READ response opcode: {opcode:#04x}")
        payload = bytes(payload)
        psn %= PSN_MOD
        if not 0 <= qp < self.num_qps or not self.qps[qp].reads:
            return self._count(Outcome("unknown"))
        q = self.qps[qp]
        head = q.reads[0]
        e = (head.first + q.cnt) % PSN_MOD
        d = _signed(psn - e)
        if d < 0:
            return self._count(Outcome("duplicate"))
        if d > 0:
            if _signed(q.reads[-1].last - psn) < 0:
                return self._count(Outcome("unknown"))
            e, reissue = self._gap(qp)
            return self._count(Outcome("gap", ack=AckEvent(qp, NAK_PSN_SEQ, e, msn),
                                       gap=reissue))
        k = q.cnt
        last = k == head.npsn - 1
        start = k == 0 or k == q.restart_index(head)
        ok = {READ_ONLY: last and start, READ_FIRST: not last and start,
              READ_MIDDLE: not last and k != 0, READ_LAST: last and k != 0}[opcode]
        if not ok:
            return self._count(Outcome("opcode"))
        if opcode != READ_MIDDLE and syndrome >> 5:
            return self._count(Outcome("nak", ack=AckEvent(qp, nak_syndrome(syndrome), psn,
                                                           msn)))
        off = k * head.pmtu
        if len(payload) != (head.length - off if last else head.pmtu):
            return self._count(Outcome("length"))
        self.advance(qp)
        writes = (((head.local_addr + off) % (1 << 32), payload),) if payload else ()
        return self._count(Outcome("good", writes, AckEvent(qp, SYN_ACK, psn,
                                                            0 if opcode == READ_MIDDLE else msn),
                                   head.wr_id if last else None))

    def ack(self, qp, syndrome, psn, msn=0):
        """An ACKNOWLEDGE of ``qp`` (AETH ``syndrome`` and ``msn``, BTH ``psn``)."""
        psn %= PSN_MOD
        implied = psn if syndrome >> 5 == 0 else (psn - 1) % PSN_MOD
        if not 0 <= qp < self.num_qps or not self.qps[qp].reads or \
                _signed(implied - self.expected(qp)) < 0:
            return self._count(Outcome("ack_pass", ack=AckEvent(qp, syndrome, psn, msn)))
        e, reissue = self._gap(qp)
        return self._count(Outcome("ack_gap", ack=AckEvent(qp, NAK_PSN_SEQ, e, msn), gap=reissue))
