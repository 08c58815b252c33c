"""Reference model of the RDMA READ requester (:class:`~rocegen.gateware.roce.read.read_track.ReadTrack`
and :class:`~rocegen.gateware.roce.read.read_place.ReadPlace`), pure Python and independent of the
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

An RDMA atomic (COMPARE_SWAP, FETCH_ADD) is a READ of 8 bytes with one PSN (``atomic`` its
operation): it counts against the limit, keeps PSN order with the READs and is recovered as
they are; its one answer is an ATOMIC_ACKNOWLEDGE (0x12) whose payload, the AtomicAckETH, is the
original value big-endian, written to its local address in the model's byte order
(``atomics``, reversed for ``"little"``). A READ response for an atomic, or an
ATOMIC_ACKNOWLEDGE for a READ, is an ``opcode`` verdict.

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
* the checks of a response at index ``k`` of its READ (``k = e - first`` at ``e``), the READ's
  last index ``n``: ``opcode``: FIRST and ONLY only where a request started (``k = 0`` or ``k``
  the QP's restart index for this READ), MIDDLE and LAST never at ``k = 0``; ONLY and LAST
  exactly at ``k = n``, FIRST and MIDDLE before it. ``nak``: the AETH (FIRST, LAST, ONLY) is
  not an ACK (syndrome bits 7..5 not zero): the QP fails; 0x61 / 0x62 / 0x63 go to the retry
  engine as they are (REMOTE_INVALID / REMOTE_ACCESS / REMOTE_OP completions), any other as
  0x63 (rxe's mapping of an unexpected NAK code). ``length``: the payload must be exactly PMTU
  bytes (FIRST, MIDDLE) or exactly the rest, ``length - k x PMTU`` (LAST, ONLY).
* ``good`` (at ``e``, no hole open): the payload is written at ``local address + k x PMTU`` (so
  never outside the READ's local range; the same for every response written), ``e`` moves on,
  and an ACK of the PSN goes to the retry engine (syndrome 0x1F, the response's MSN): READ
  responses acknowledge every earlier WRITE/SEND implicitly. The last one (``k = n``)
  completes the READ (``done``): it leaves the table.
* after ``e`` (the responses from ``e`` were lost), with no hole open:

  * in the head READ, or the first PSN of the READ after it (``k = 0`` of that READ, checked
    as below and written there): ``hole``. The rest of the head READ, from ``e``, is a *hole*:
    it is asked for again by one READ request that the requester sends itself (:class:`Reissue`
    with ``send``: PSN ``e``, remote VA and local address advanced by ``(e - first) x PMTU``,
    length reduced by as much) -- the responder executes it as a duplicate READ inside the
    original -- and no later request is sent again. Responses of the head READ after the gap
    are not written (that request brings them again). The responses of the READs after it are
    placed as they come: the *front* is the next one expected there (from the READ after the
    head, first PSN, or after the response just written). No event goes to the retry engine.
  * else: ``gap``: go-back-N. Nothing is written; the head READ is to be reissued for the rest
    (the same :class:`Reissue`, ``send`` False); it travels to the retry engine as a NAK PSN
    sequence error of ``e`` (syndrome 0x60): that acknowledges ``e - 1``, rewinds the QP to
    ``e`` (the scheduler resends from there: the READ from inside, then every later request,
    as rxe's ``req_retry``), counts one retry against ``retry_cnt`` and is ignored when it
    repeats the NAK of the rewind under way with no progress since.

* with holes open: a response in the head READ (the *current* hole) at ``e`` is checked as
  below (FIRST and ONLY also where the hole's request starts) and, right, ``good``: written,
  ``e`` moves on, no event; when it is the head READ's last the hole *closes*. With a later hole
  queued, the READs before that hole's READ leave (``done``, in order), ``e`` becomes that
  hole's PSN (its READ is the head, its request's start the index), and the event acknowledges
  the PSN before it. Without one, every READ before the front leaves, ``e`` becomes the front
  ``r``, and the event is the ACK of ``r - 1`` with the MSN of the latest response with an AETH
  placed after the holes, or, when responses after the front were lost, the NAK PSN sequence
  error of ``r`` (go-back-N from there). One in the head READ after ``e``: ``gap``, dropped
  (the hole's request lost a response; the retry engine's timer asks again). After the head
  READ: before the front ``duplicate``; at the front checked as below and, right, ``ahead``:
  written, the front moves on. After the front, in the front READ or the first PSN of the READ
  after it (checked and written there), while fewer than :data:`HOLE_QUEUE` holes wait:
  ``hole``: the rest of the front READ from ``r`` is one more hole, queued, and asked for again
  by a request of its own; the front moves to the READ after it. Else ``gap``: dropped, and
  the responses after the front are *lost* (the last hole closes with go-back-N from the
  front).

Acknowledgements (ACKNOWLEDGE packets, :meth:`ReadRequesterModel.ack`) pass on to the retry
engine unchanged (``ack_pass``) unless the PSN they acknowledge (``p`` for an ACK, ``p - 1``
for a NAK or RNR NAK) is not before ``e``: an acknowledgement never passes a READ whose data did
not all come (rxe's implied NAK). Such an acknowledgement becomes the gap of the head READ
(``ack_gap``: the NAK PSN sequence error of ``e`` and the reissue), as rxe does whatever the
syndrome; with a hole open it is dropped (``ack_hold``: the hole's close acknowledges what it
covered), and one whose PSN is at or after the front marks the responses after the front lost.
A NAK carried by an ACKNOWLEDGE at the READ request's PSN (remote access error for a bad R_Key,
...) passes: the retry engine fails the QP and the completer completes the READ with the
error.

The hole timer (:meth:`ReadRequesterModel.hole_timer`) expires for a QP with READs outstanding
that has received no response for the hole wait. With holes open (the hole's request, or a
response of it, was lost: nothing else would ask again before the retry engine's timeout) it
asks for the current hole again: ``reask``,
the rest of the head READ from ``e`` by a request of its own (:class:`Reissue` with ``send``;
that request starts at ``e``, so FIRST and ONLY are right there), no event for the retry
engine. The responses of the holes queued then came (or will come, before this request's)
while the current hole waited, and were dropped: each of them, once it is the current hole,
expires the timer at once (``poke`` on the response that closes the hole before it). Without a
READ outstanding (they completed meanwhile), or expired by a poke with no hole open, ``idle``:
nothing. With READs outstanding and no
hole open (a request lost at the end of a burst, or the peer's NAK of a lost request lost: no
later response or request shows it) ``stall``: the gap of the head READ (the NAK PSN sequence
error of ``e`` and the reissue, go-back-N), as ``ack_gap``; the retry engine ignores it when it
repeats the NAK of the rewind under way with no progress since. So a ``stall`` again, with no
response since the timer's last expiry (that go-back-N brought nothing: its NAK was ignored, or
its request was lost), asks for the rest of the head READ from ``e`` by a request of its own
(``send``), with no event for the retry engine.

Some outcomes expire the QP's hole timer at once (``poke``), where a response shows a loss in
a hole's request that nothing else would ask for again: a response in the current hole after
``e`` once no original response of the head READ can come any more (the hole did not open
inside the head READ, or a response after the head READ came since), and the first response of
the oldest queued hole's request (its PSN) while the current hole waits; neither after the
current hole was asked for again by the timer with no progress since (its request is on its
way, behind those responses).

Completion: the READ's work request is posted to the completer like any other, with the PSN of
its last response as ``last_psn``; it completes OK when the retry engine's acknowledged PSN
covers it, in order with the QP's other work requests. Events (:class:`Outcome`) leave in the
order the inputs came, each once the payload writes of every response before it (its own
included) are done: taken by on-chip memory, acknowledged by AXI4 memory.

:meth:`ReadRequesterModel.flush` forgets a QP's READs (the QP failed or was set up again).
"""

from collections import deque
from dataclasses import dataclass, field

from rocegen.wire import opcodes as opc
from rocegen.wire.roce import NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, NAK_REM_OP, SYN_ACK

__all__ = ["ReadRequesterModel", "Read", "Reissue", "AckEvent", "Outcome", "VERDICTS",
           "PSN_MOD", "PMTUS", "MAX_RD_ATOMIC", "HOLE_QUEUE", "READ_FIRST", "READ_MIDDLE", "READ_LAST",
           "READ_ONLY", "SYN_ACK", "NAK_PSN_SEQ", "NAK_REM_OP", "nak_syndrome"]

PSN_MOD = 1 << 24
_HALF = 1 << 23
PMTUS = (256, 512, 1024, 2048, 4096)
#: Largest ``max_rd_atomic`` (ConnectX offers 16).
MAX_RD_ATOMIC = 16
#: Holes a QP keeps after its current one (the gateware's ``READ_HOLES``).
HOLE_QUEUE = 8

READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY = opc.verb_opcodes(opc.Verb.RDMA_READ_RESPONSE)
#: An atomic's answer (its payload the AtomicAckETH: the original value, big-endian).
ATOMIC_ACK = opc.OP_RC_ATOMIC_ACKNOWLEDGE
_OPCODES = (READ_FIRST, READ_MIDDLE, READ_LAST, READ_ONLY, ATOMIC_ACK)
#: What an atomic is (a READ's ``atomic``), as the gateware's ``AtomicOp`` numbers it.
ATOMIC_NONE, ATOMIC_FETCH_ADD, ATOMIC_COMPARE_SWAP = 0, 1, 2
_FATAL = (NAK_INV_REQ, NAK_REM_ACCESS, NAK_REM_OP)

#: The verdicts, in the gateware's order (``ReadVerdict``); each is also a counter.
VERDICTS = ("good", "gap", "duplicate", "unknown", "opcode", "length", "nak", "ack_pass",
            "ack_gap", "hole", "ahead", "ack_hold", "reask", "idle", "stall")


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
    atomic: int = ATOMIC_NONE

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
    send: bool = False
    atomic: int = ATOMIC_NONE


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
    it completed, the reissue it asks for and whether it expires the QP's hole timer at once
    (``poke``)."""
    verdict: str
    writes: tuple = ()
    ack: AckEvent | None = None
    done: tuple = ()
    gap: Reissue | None = None
    poke: bool = False


@dataclass
class _Hole:
    """The holes of a QP. The *current* hole is the rest of the head READ from the expected PSN
    ``e`` (its responses are asked for again; ``hs``: the head READ's index where that request
    starts); ``queue``: the later holes, oldest first, each the rest of a later READ ``(read,
    index, PSN)``; responses after the holes are placed up to the *front*: the READ at ``fidx``
    in the QP's queue (its length: every READ after the holes is in) of which ``fcnt`` PSNs
    came. ``lost``: responses after the front were lost as well; ``msn``: the MSN of the latest
    response with an AETH placed after the holes; ``fresh``: original responses of the head READ
    may still come (the first hole opened inside it, and nothing after it came since);
    ``asked``: the current hole was asked for again (the hole timer) with no progress since;
    ``redo``: the queued holes whose responses came while the current one waited."""
    hs: int
    fidx: int
    fcnt: int
    msn: int
    lost: bool = False
    fresh: bool = False
    asked: bool = False
    redo: int = 0
    queue: deque = field(default_factory=deque)


class _Qp:
    def __init__(self):
        self.reads = deque()
        self.cnt = 0                # PSNs of the head READ received
        self.restart = None         # (first, index) of the latest request sent from inside
        self.hole = None            # _Hole, while one is open

    def step_front(self):
        """The front moves to the next READ once every PSN of its READ came."""
        h = self.hole
        if h.fidx < len(self.reads) and h.fcnt == self.reads[h.fidx].npsn:
            h.fidx += 1
            h.fcnt = 0

    def restart_index(self, head):
        if self.restart is not None and self.restart[0] == head.first:
            return self.restart[1]
        return 0


class ReadRequesterModel:
    """The READ requester's rules (module documentation) for ``num_qps`` QPs of at most
    ``max_rd_atomic`` outstanding READs each (each QP's limit: :attr:`limits`)."""

    def __init__(self, num_qps, max_rd_atomic=MAX_RD_ATOMIC, atomics="little"):
        if not isinstance(num_qps, int) or not 1 <= num_qps <= 256:
            raise ValueError(f"num_qps must be 1..256, not {num_qps!r}")
        if atomics not in ("little", "big"):
            raise ValueError(f"atomics must be 'little' or 'big', not {atomics!r}")
        #: the byte order of an atomic's original value in local memory
        self.atomics = atomics
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
        none), the newest READ's last PSN, the hole (None: none open) and the second READ (the
        front READ with a hole open, else the one after the head; None: none) with its restart
        index."""
        if not 0 <= qp < self.num_qps or not self.qps[qp].reads:
            return None
        q = self.qps[qp]
        head = q.reads[0]
        h = q.hole
        second = q.reads[1 if h is None else h.fidx] if (1 if h is None else h.fidx) < \
            len(q.reads) else None
        return {"head": head, "cnt": q.cnt, "rs": q.restart_index(head),
                "tail_last": q.reads[-1].last, "hole": h, "second": second,
                "rs2": q.restart_index(second) if second else 0}

    # ---- the table

    def issue(self, qp, *, wr_id, local_addr, length, first, pmtu, remote_va=0, rkey=0,
              new=True, psn=None, atomic=ATOMIC_NONE):
        """A READ request sent: a new READ (``new``), or a reissue of the READ whose first PSN
        is ``first`` from PSN ``psn``. Returns False when a new READ is refused. ``atomic``
        (FETCH_ADD or COMPARE_SWAP): the request is an atomic, a READ of 8 bytes with one PSN
        whose one answer is an ATOMIC_ACKNOWLEDGE."""
        if pmtu not in PMTUS:
            raise ValueError(f"path MTU must be one of {PMTUS}, not {pmtu}")
        if atomic not in (ATOMIC_NONE, ATOMIC_FETCH_ADD, ATOMIC_COMPARE_SWAP):
            raise ValueError(f"atomic must be 0 (none), 1 or 2, not {atomic!r}")
        if atomic and length != 8:
            raise ValueError(f"an atomic is answered with 8 bytes, not {length}")
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
                                length, first, pmtu, atomic))
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

    @staticmethod
    def _rest(qp, read, k, send):
        """The request for the rest of ``read`` from its index ``k``."""
        off = k * read.pmtu
        return Reissue(qp, read.wr_id, (read.first + k) % PSN_MOD, off,
                       (read.local_addr + off) % (1 << 32), (read.remote_va + off) % (1 << 64),
                       read.rkey, read.length - off, send, read.atomic)

    def _gap(self, qp, send=False):
        q = self.qps[qp]
        reissue = self._rest(qp, q.reads[0], q.cnt, send)
        return reissue.psn, reissue

    def _count(self, outcome):
        self.counters[outcome.verdict] += 1
        return outcome

    def _check(self, q, read, k, opcode, syndrome, payload, *, start=False):
        """The verdict of a response at index ``k`` of ``read``: ``None`` when it is right (an
        opcode where a request started -- ``k`` 0, the restart index, or ``start`` -- or inside,
        an ACK in its AETH, the right length), else ``(verdict, ack event or None)``."""
        last = k == read.npsn - 1
        start = start or k == 0 or k == q.restart_index(read)
        if read.atomic:
            ok = opcode == ATOMIC_ACK and last and start
        else:
            ok = {READ_ONLY: last and start, READ_FIRST: not last and start,
                  READ_MIDDLE: not last and k != 0, READ_LAST: last and k != 0,
                  ATOMIC_ACK: False}[opcode]
        if not ok:
            return "opcode"
        if opcode != READ_MIDDLE and syndrome >> 5:
            return "nak"
        off = k * read.pmtu
        if len(payload) != (read.length - off if last else read.pmtu):
            return "length"
        return None

    def _write(self, read, k, payload):
        off = k * read.pmtu
        if read.atomic and self.atomics == "little":
            payload = payload[::-1]         # (the original value as a host CPU stores it)
        return (((read.local_addr + off) % (1 << 32), payload),) if payload else ()

    def response(self, qp, opcode, psn, payload=b"", syndrome=SYN_ACK, msn=0):
        """A READ response of ``qp`` (``opcode`` 0x0D..0x10, or 0x12 an atomic's answer whose
        ``payload`` is its AtomicAckETH; BTH ``psn``, ``payload`` without the pad, AETH
        ``syndrome`` and ``msn``, ignored on MIDDLE)."""
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
        if _signed(q.reads[-1].last - psn) < 0:
            return self._count(Outcome("unknown"))
        aeth = 0 if opcode == READ_MIDDLE else msn

        def refused(verdict):
            if verdict == "nak":
                return Outcome("nak", ack=AckEvent(qp, nak_syndrome(syndrome), psn, msn))
            return Outcome(verdict)

        if q.hole is not None:
            return self._count(self._in_hole(q, qp, opcode, psn, payload, syndrome, aeth,
                                             refused))
        if d > 0:
            return self._count(self._gap_at(q, qp, opcode, psn, payload, syndrome, aeth,
                                            refused, msn))
        bad = self._check(q, head, q.cnt, opcode, syndrome, payload)
        if bad:
            return self._count(refused(bad))
        k = q.cnt
        left = self.advance(qp)
        return self._count(Outcome("good", self._write(head, k, payload),
                                   AckEvent(qp, SYN_ACK, psn, aeth),
                                   (left.wr_id,) if left else ()))

    def _gap_at(self, q, qp, opcode, psn, payload, syndrome, aeth, refused, msn):
        """A response after the expected PSN ``e`` with no hole open: in the head READ or the
        first of the next READ, the rest of the head READ becomes a hole (selective), else
        go-back-N."""
        head = q.reads[0]
        if _signed(head.last - psn) >= 0:
            written, fcnt, msn = (), 0, 0
        elif len(q.reads) > 1 and psn == q.reads[1].first:
            read = q.reads[1]
            bad = self._check(q, read, 0, opcode, syndrome, payload)
            if bad:
                return refused(bad)
            written, fcnt, msn = self._write(read, 0, payload), 1, aeth
        else:
            e, reissue = self._gap(qp)
            return Outcome("gap", ack=AckEvent(qp, NAK_PSN_SEQ, e, msn), gap=reissue)
        _, reissue = self._gap(qp, send=True)
        q.hole = _Hole(hs=q.cnt, fidx=1, fcnt=fcnt, msn=msn, fresh=not fcnt)
        q.step_front()
        return Outcome("hole", written, gap=reissue)

    def _in_hole(self, q, qp, opcode, psn, payload, syndrome, aeth, refused):
        """A response of a QP with a hole open (``psn`` not before ``e``, not after the newest
        READ)."""
        head, h = q.reads[0], q.hole
        e = (head.first + q.cnt) % PSN_MOD
        if _signed(head.last - psn) >= 0:               # in the current hole
            if psn != e:
                # (a response of the hole's request after a lost one: ask again at once)
                return Outcome("gap", poke=not (h.fresh or h.asked))
            bad = self._check(q, head, q.cnt, opcode, syndrome, payload,
                              start=q.cnt == h.hs)
            if bad:
                return refused(bad)
            k = q.cnt
            writes = self._write(head, k, payload)
            h.fresh = h.asked = False
            if k == head.npsn - 1:
                return Outcome("good", writes, *self._close(q, qp))
            q.cnt += 1
            return Outcome("good", writes)
        # (the first response of the oldest queued hole's request while the current one waits:
        # the current hole's request, or its end, was lost: ask again at once)
        poke = bool(h.queue) and psn == h.queue[0][2] and not h.asked
        if h.fidx == len(q.reads):                      # every READ after the holes is in
            return Outcome("duplicate", poke=poke)
        read = q.reads[h.fidx]
        r = (read.first + h.fcnt) % PSN_MOD
        if _signed(psn - r) < 0:
            return Outcome("duplicate", poke=poke)
        if psn == r:
            bad = self._check(q, read, h.fcnt, opcode, syndrome, payload)
            if bad:
                return refused(bad)
            writes = self._write(read, h.fcnt, payload)
            if opcode != READ_MIDDLE:
                h.msn = aeth
            h.fcnt += 1
            h.fresh = False
            q.step_front()
            return Outcome("ahead", writes)
        # after the front: the rest of the front READ is one more hole, while the queue has room
        nxt = q.reads[h.fidx + 1] if h.fidx + 1 < len(q.reads) else None
        if len(h.queue) == HOLE_QUEUE or not (
                _signed(read.last - psn) >= 0 or (nxt is not None and psn == nxt.first)):
            h.lost = True
            return Outcome("gap")
        written, placed = (), _signed(read.last - psn) < 0
        if placed:                                      # the next READ's first: written
            bad = self._check(q, nxt, 0, opcode, syndrome, payload)
            if bad:
                return refused(bad)
            written = self._write(nxt, 0, payload)
            h.msn = aeth
        reissue = self._rest(qp, read, h.fcnt, True)
        h.queue.append((read, h.fcnt, r))
        h.fresh = False
        h.fidx += 1
        h.fcnt = int(placed)
        q.step_front()
        return Outcome("hole", written, gap=reissue)

    def _close(self, q, qp):
        """The current hole is filled: the READs before the next hole leave, and the expected
        PSN moves to that hole, acknowledging the PSN before it (when its responses came while
        the current one waited, the hole timer expires at once: ``poke``); without one, to the
        front ``r``: the event acknowledges ``r - 1``, or (responses after the front were lost)
        is the NAK PSN sequence error of ``r``. Returns ``(ack, done, None, poke)``."""
        h = q.hole
        if h.queue:
            read, idx, psn = h.queue.popleft()
            left = []
            while q.reads[0] is not read:
                left.append(q.reads.popleft())
            h.fidx -= len(left)
            q.cnt = h.hs = idx
            poke, h.redo = h.redo > 0, max(h.redo - 1, 0)
            return (AckEvent(qp, SYN_ACK, (psn - 1) % PSN_MOD, h.msn),
                    tuple(x.wr_id for x in left), None, poke)
        left = [q.reads.popleft() for _ in range(h.fidx)]
        q.hole = None
        if q.reads:
            q.cnt = h.fcnt
            r = (q.reads[0].first + q.cnt) % PSN_MOD
        else:
            q.cnt = 0
            r = (left[-1].last + 1) % PSN_MOD
        if h.lost:
            ack = AckEvent(qp, NAK_PSN_SEQ, r, h.msn)
        else:
            ack = AckEvent(qp, SYN_ACK, (r - 1) % PSN_MOD, h.msn)
        return ack, tuple(read.wr_id for read in left), None, False

    def hole_timer(self, qp, poked=False, again=False):
        """The hole timer of ``qp`` expired (module documentation); ``poked``: by a poke (only
        a hole is asked for again then); ``again``: with no response since its last expiry."""
        if not 0 <= qp < self.num_qps or not self.qps[qp].reads or \
                poked and self.qps[qp].hole is None:
            return self._count(Outcome("idle"))
        q = self.qps[qp]
        if q.hole is None and again:
            _, reissue = self._gap(qp, send=True)
            return self._count(Outcome("stall", gap=reissue))
        if q.hole is None:
            e, reissue = self._gap(qp)
            return self._count(Outcome("stall", ack=AckEvent(qp, NAK_PSN_SEQ, e, 0), gap=reissue))
        h = q.hole
        h.hs, h.asked, h.redo = q.cnt, True, len(h.queue)
        _, reissue = self._gap(qp, send=True)
        return self._count(Outcome("reask", gap=reissue))

    def front(self, qp):
        """The PSN after the responses placed past ``qp``'s hole (None without a hole): the
        next one expected there, the newest READ's last PSN + 1 when every READ after the
        hole is in."""
        q = self.qps[qp]
        h = q.hole
        if h is None:
            return None
        if h.fidx == len(q.reads):
            return (q.reads[-1].last + 1) % PSN_MOD
        return (q.reads[h.fidx].first + h.fcnt) % PSN_MOD

    def ack(self, qp, syndrome, psn, msn=0):
        """An ACKNOWLEDGE of ``qp`` (AETH ``syndrome`` and ``msn``, BTH ``psn``)."""
        psn %= PSN_MOD
        implied = psn if syndrome >> 5 == 0 else (psn - 1) % PSN_MOD
        if not 0 <= qp < self.num_qps or not self.qps[qp].reads or \
                _signed(implied - self.expected(qp)) < 0:
            return self._count(Outcome("ack_pass", ack=AckEvent(qp, syndrome, psn, msn)))
        q = self.qps[qp]
        if q.hole is not None:
            if _signed(psn - self.front(qp)) >= 0:
                q.hole.lost = True
            return self._count(Outcome("ack_hold"))
        e, reissue = self._gap(qp)
        return self._count(Outcome("ack_gap", ack=AckEvent(qp, NAK_PSN_SEQ, e, msn), gap=reissue))
