"""Reference model of the completion tracker (:class:`~rocegen.gateware.roce.requester.completer.Completer`),
pure Python and independent of the gateware.

The requester announces every work request it starts (or refuses) with a *post*: its ``wr_id``,
QP index, source, status and the PSN of its last packet. Acknowledgements arrive per QP. A work
request completes, strictly in posting order per QP:

* with its own status as soon as it is at the head of its QP's queue, when that status is not OK;
* with status OK once an acknowledgement covers its last PSN.

Acknowledgement rules (AETH syndrome, bits 7..5 the class):

* ACK (class 0b000) with PSN ``p``: every PSN up to and including ``p`` is acknowledged
  (24-bit serial arithmetic: ``L`` is covered when ``(p - L) mod 2^24 < 2^23``). The QP's
  acknowledged PSN only moves forward: an ACK that does not advance it (a duplicate, or an older
  one that arrives late) is *stale* and changes nothing.
* NAK PSN sequence error (0x60) with PSN ``p``: ``p - 1`` is acknowledged as by an ACK (never
  counted as stale).
* RNR NAK (class 0b001), other NAKs and reserved syndromes: counted, no effect.
* Until the first acknowledgement of a QP, nothing is acknowledged.
* An OK post whose last PSN the acknowledged PSN already covers cannot belong to the running
  connection (its packets have not been sent): the QP was set up again with new PSNs, so the
  acknowledged PSN is forgotten (the next ACK sets it, whatever its value).

A post names a QP outside the table (``qp >= num_qps``): it completes at once with BAD_QP.
Events are applied in the order they are given. The gateware applies an acknowledgement in the
cycle after it arrives, after the post of that cycle; a caller comparing the two gives the model
each acknowledgement after the next cycle's post.
"""

from collections import deque
from dataclasses import dataclass

__all__ = ["CompleterModel", "Entry", "PSN_MOD", "covers", "ahead",
           "STATUS_OK", "STATUS_BAD_QP", "SYN_CLASS_ACK", "SYN_CLASS_RNR", "SYN_NAK_PSN_SEQ",
           "COUNTERS"]

PSN_MOD = 1 << 24
_HALF = 1 << 23

STATUS_OK = 0
STATUS_BAD_QP = 1

SYN_CLASS_ACK = 0b000
SYN_CLASS_RNR = 0b001
SYN_NAK_PSN_SEQ = 0x60

#: Events counted per acknowledgement (the gateware's pulse outputs of the same names).
COUNTERS = ("acks", "stale_acks", "seq_naks", "rnr_naks", "naks")


def covers(acked, psn):
    """An acknowledgement of ``acked`` covers ``psn``."""
    return (acked - psn) % PSN_MOD < _HALF


def ahead(new, old):
    """``new`` is strictly after ``old`` in 24-bit serial arithmetic."""
    return 0 < (new - old) % PSN_MOD < _HALF


@dataclass(frozen=True)
class Entry:
    wr_id: int
    qp: int
    src: int
    status: int
    last_psn: int


class CompleterModel:
    """Per-QP queues of ``depth`` entries for ``num_qps`` QPs.

    :meth:`post` and :meth:`ack` apply one event; completions accumulate in :attr:`completions`
    (global order of the model: only the order within one QP is meaningful) as ``(wr_id, qp,
    status, src)`` tuples."""

    def __init__(self, num_qps, depth=16):
        if num_qps < 1:
            raise ValueError("num_qps must be at least 1")
        if depth < 1:
            raise ValueError("depth must be at least 1")
        self.num_qps = num_qps
        self.depth = depth
        self.queues = [deque() for _ in range(num_qps)]
        self.acked = [None] * num_qps          # acknowledged PSN, None before the first ACK
        self.completions = []
        self.counters = dict.fromkeys(COUNTERS, 0)
        #: times an acknowledged PSN was forgotten because of a post it already covered
        self.forgets = 0

    def full(self, qp):
        return len(self.queues[qp]) >= self.depth

    def pending(self, qp):
        return len(self.queues[qp])

    def post(self, wr_id, qp, src, status, last_psn):
        if qp >= self.num_qps:
            self.completions.append((wr_id, qp, STATUS_BAD_QP, src))
            return
        if self.full(qp):
            raise AssertionError(f"post to the full queue of QP {qp}")
        last_psn %= PSN_MOD
        acked = self.acked[qp]
        if status == STATUS_OK and acked is not None and covers(acked, last_psn):
            self.acked[qp] = None
            self.forgets += 1
        self.queues[qp].append(Entry(wr_id, qp, src, status, last_psn))
        self._drain(qp)

    def ack(self, qp, syndrome, psn):
        """Apply an acknowledgement event; returns the name of the counter it increments."""
        if qp >= self.num_qps:
            raise ValueError(f"acknowledgement for QP {qp} outside the table")
        cls = syndrome >> 5
        if cls == SYN_CLASS_ACK:
            counter = "acks"
            psn %= PSN_MOD
        elif syndrome == SYN_NAK_PSN_SEQ:
            counter = "seq_naks"
            psn = (psn - 1) % PSN_MOD
        elif cls == SYN_CLASS_RNR:
            counter = "rnr_naks"
            psn = None
        else:
            counter = "naks"
            psn = None
        self.counters[counter] += 1
        if psn is not None:
            acked = self.acked[qp]
            if acked is None or ahead(psn, acked):
                self.acked[qp] = psn
                self._drain(qp)
            elif counter == "acks":
                self.counters["stale_acks"] += 1
        return counter

    def _drain(self, qp):
        q = self.queues[qp]
        while q:
            e = q[0]
            if e.status == STATUS_OK:
                acked = self.acked[qp]
                if acked is None or not covers(acked, e.last_psn):
                    break
            q.popleft()
            self.completions.append((e.wr_id, e.qp, e.status, e.src))

    def per_qp(self, qp):
        return [c for c in self.completions if c[1] == qp]
