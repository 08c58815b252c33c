"""One direction of a faulty Ethernet link, cycle-driven and deterministic: frames go in with
:meth:`Link.send` and come out with :meth:`Link.due`, possibly late, lost, twice, out of order or
with one bit flipped.

Everything random comes from one ``random.Random(seed)`` owned by the link, and every frame
draws the same number of values from it whatever happens to the frame, so with the same seed a
link makes the same decision about frame ``n`` for every fault whose probability is unchanged
(turning ``dup`` on does not move which frames are lost). Nothing depends on wall-clock time:
the cycle numbers are the caller's.

Faults, decided for each frame in this order when it is sent:

* **loss**: lost with probability ``loss``; ``burst=(p_start, length)`` adds Gilbert-style bursts:
  outside a burst, a burst starts with probability ``p_start`` and loses that frame and the
  ``length - 1`` frames sent after it. Scripts (:meth:`Link.drop_next`,
  :meth:`Link.drop_between`, :meth:`Link.drop_matching`) lose chosen frames exactly.
* **corrupt**: with probability ``corrupt`` one bit, chosen uniformly among the bits from byte
  ``corrupt_from`` (14: after the Ethernet header, so the frame still reaches its protocol's
  receiver, whose checksum or ICRC must reject it) to the end, is flipped. The length never
  changes. ``corruptible(frame)`` may restrict this to some frames (such as IPv4 ones: a flipped
  bit of an ARP message is caught by nothing but the Ethernet FCS, which a frame corrupted
  beyond it does not have).
* **dup**: with probability ``dup`` the frame is delivered twice, the copy 1..``dup_delay``
  cycles after the original. The copy is never held back.
* **reorder**: with probability ``reorder`` the frame is held back when it falls due, and
  delivered right after ``k`` frames sent after it have been delivered, ``k`` uniform in
  1..``reorder_window``; or ``reorder_hold`` cycles after it fell due if fewer came by then.
  So no frame is ever overtaken by more than ``reorder_window`` later frames.

Timing: a frame sent at cycle ``t`` falls due at ``t + delay + j``, ``j`` uniform in
0..``jitter``, but never before the frame sent before it: the link is a FIFO (jitter delays,
it does not reorder; only ``reorder`` does). ``due(now)`` returns the frames due at or before
``now`` in delivery order (:meth:`Link.deliveries`: the same as :class:`Delivery` records, which
say whether a frame was corrupted or is a copy). Calls must come with non-decreasing cycle
numbers.

:attr:`Link.counters` counts ``sent``, ``delivered`` (copies included), ``dropped``,
``duplicated``, ``reordered`` (frames delivered after at least one later frame),
``corrupted``; :attr:`Link.log` lists every fault as ``(cycle, seq, event)``.
"""

import heapq
import random
from typing import NamedTuple

__all__ = ["Link", "Delivery", "COUNTERS"]

COUNTERS = ("sent", "delivered", "dropped", "duplicated", "reordered", "corrupted")

# the values every frame draws, in this order
_U_LOSS, _U_BURST, _U_CORRUPT, _U_CORRUPT_BIT, _U_DUP, _U_DUP_DELAY, _U_REORDER, _U_DEPTH, \
    _U_JITTER = range(9)
_DRAWS = 9


class Delivery(NamedTuple):
    """A frame leaving the link."""
    frame: bytes
    seq: int            # number of the frame in send order, from 0
    sent: int           # cycle it was sent
    corrupted: bool     # a bit of it was flipped
    copy: bool          # the second copy of a duplicated frame


class _Entry:
    __slots__ = ("frame", "seq", "sent", "corrupted", "copy", "hold", "left", "deadline",
                 "overtaken")

    def __init__(self, frame, seq, sent, corrupted, copy, hold):
        self.frame, self.seq, self.sent = frame, seq, sent
        self.corrupted, self.copy, self.hold = corrupted, copy, hold
        self.left = self.deadline = None
        self.overtaken = 0


class _Script:
    __slots__ = ("predicate", "start", "end", "left")

    def __init__(self, predicate, start, end, left):
        self.predicate, self.start, self.end, self.left = predicate, start, end, left

    def takes(self, frame, now):
        if self.left == 0 or now < self.start or (self.end is not None and now >= self.end):
            return False
        if self.predicate is not None and not self.predicate(frame):
            return False
        if self.left is not None:
            self.left -= 1
        return True


def _probability(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a probability (a number in [0, 1]), not {value!r}")
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be a probability in [0, 1], not {value}")
    return float(value)


def _integer(name, value, minimum, what="cycles"):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer number of {what}, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def _callable(name, value):
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a function of the frame's bytes, not {value!r}")
    return value


class Link:
    """One direction of a faulty link (see the module documentation).

    All parameters are keyword-only. ``loss``, ``dup``, ``reorder``, ``corrupt``: probabilities
    per frame. ``delay``, ``jitter``: cycles. ``reorder_window``: most later frames that overtake
    a held frame (>= 1). ``reorder_hold``: cycles after which a held frame is delivered anyway
    (>= 1). ``dup_delay``: latest cycle, after the original, of a duplicate's copy (>= 1).
    ``burst``: ``None`` or ``(p_start, length)``. ``corrupt_from``: first byte a corruption may
    touch. ``corruptible``: ``None`` (every frame) or a predicate on the frame's bytes.
    ``seed``: the integer seed of the link's random generator. ``name``: for messages.
    """

    def __init__(self, *, loss=0.0, dup=0.0, reorder=0.0, corrupt=0.0, delay=0, jitter=0,
                 reorder_window=4, reorder_hold=1000, dup_delay=8, burst=None, corrupt_from=14,
                 corruptible=None, seed=0, name=""):
        self.loss = _probability("loss", loss)
        self.dup = _probability("dup", dup)
        self.reorder = _probability("reorder", reorder)
        self.corrupt = _probability("corrupt", corrupt)
        self.delay = _integer("delay", delay, 0)
        self.jitter = _integer("jitter", jitter, 0)
        self.reorder_window = _integer("reorder_window", reorder_window, 1, "frames")
        self.reorder_hold = _integer("reorder_hold", reorder_hold, 1)
        self.dup_delay = _integer("dup_delay", dup_delay, 1)
        self.corrupt_from = _integer("corrupt_from", corrupt_from, 0, "bytes")
        self.corruptible = _callable("corruptible", corruptible)
        if burst is not None:
            if not isinstance(burst, (tuple, list)) or len(burst) != 2:
                raise TypeError(f"burst must be None or a pair (p_start, length), not {burst!r}")
            burst = (_probability("burst p_start", burst[0]),
                     _integer("burst length", burst[1], 1, "frames"))
        self.burst = burst
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an integer, not {seed!r}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, not {name!r}")
        self.seed = seed
        self.name = name
        self.counters = dict.fromkeys(COUNTERS, 0)
        #: ``(cycle, seq, event)`` of every fault: ``"dropped"``, ``"scripted drop"``,
        #: ``"corrupted"``, ``"duplicated"``, ``"held"``, ``"reordered"``
        self.log = []
        self._rng = random.Random(seed)
        self._now = 0
        self._seq = 0
        self._order = 0
        self._last_due = 0
        self._burst_left = 0
        self._heap = []         # (due cycle, order, entry)
        self._held = []         # entries held back, in the order they were held
        self._scripts = []

    def __repr__(self):
        faults = ", ".join(f"{k}={getattr(self, k)}" for k in ("loss", "dup", "reorder", "corrupt",
                                                                "delay", "jitter", "burst")
                           if getattr(self, k))
        return f"Link({self.name!r}{', ' if faults else ''}{faults})"

    # ---- time ----

    def _advance(self, now):
        if isinstance(now, bool) or not isinstance(now, int):
            raise TypeError(f"link {self.name!r}: the cycle must be an integer, not {now!r}")
        if now < self._now:
            raise ValueError(f"link {self.name!r}: cycle {now} is before cycle {self._now}, "
                             "already seen")
        self._now = now

    @property
    def in_flight(self):
        """Frames sent and not yet delivered (held ones included; lost ones are not)."""
        return len(self._heap) + len(self._held)

    # ---- fault scripts ----

    def drop_next(self, n=1):
        """Lose the next ``n`` frames sent."""
        self._scripts.append(_Script(None, 0, None, _integer("n", n, 0, "frames")))

    def drop_between(self, start, end):
        """Lose every frame sent at a cycle in ``[start, end)``."""
        _integer("start", start, 0)
        _integer("end", end, start)
        self._scripts.append(_Script(None, start, end, None))

    def drop_matching(self, predicate, *, start=0, end=None, count=None):
        """Lose the frames for which ``predicate(frame)`` is true that are sent at a cycle in
        ``[start, end)`` (``end=None``: forever), at most ``count`` of them (``None``: all)."""
        if not callable(predicate):
            raise TypeError(f"predicate must be a function of the frame's bytes, not {predicate!r}")
        _integer("start", start, 0)
        if end is not None:
            _integer("end", end, start)
        if count is not None:
            _integer("count", count, 0, "frames")
        self._scripts.append(_Script(predicate, start, end, count))

    def clear_scripts(self):
        """Forget every script (frames already lost stay lost)."""
        self._scripts = []

    # ---- frames ----

    def send(self, frame, now):
        """Frame ``frame`` (bytes) enters the link at cycle ``now``."""
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise TypeError(f"link {self.name!r}: a frame is bytes, not {type(frame).__name__}")
        self._advance(now)
        frame = bytes(frame)
        seq = self._seq
        self._seq += 1
        self.counters["sent"] += 1
        u = [self._rng.random() for _ in range(_DRAWS)]

        # every script sees every frame (a count only runs down on the frames it takes)
        scripted = [s.takes(frame, now) for s in self._scripts]
        lost = False
        if self.burst is not None:
            if self._burst_left:
                self._burst_left -= 1
                lost = True
            elif u[_U_BURST] < self.burst[0]:
                self._burst_left = self.burst[1] - 1
                lost = True
        lost = lost or u[_U_LOSS] < self.loss
        if any(scripted) or lost:
            self.counters["dropped"] += 1
            self.log.append((now, seq, "scripted drop" if any(scripted) else "dropped"))
            return

        corrupted = False
        if u[_U_CORRUPT] < self.corrupt and len(frame) > self.corrupt_from and (
                self.corruptible is None or self.corruptible(frame)):
            bits = 8 * (len(frame) - self.corrupt_from)
            bit = 8 * self.corrupt_from + min(int(u[_U_CORRUPT_BIT] * bits), bits - 1)
            raw = bytearray(frame)
            raw[bit // 8] ^= 1 << (bit % 8)
            frame = bytes(raw)
            corrupted = True
            self.counters["corrupted"] += 1
            self.log.append((now, seq, "corrupted"))

        due = max(now + self.delay + min(int(u[_U_JITTER] * (self.jitter + 1)), self.jitter),
                  self._last_due)
        self._last_due = due
        hold = None
        if u[_U_REORDER] < self.reorder:
            hold = 1 + min(int(u[_U_DEPTH] * self.reorder_window), self.reorder_window - 1)
        self._push(due, _Entry(frame, seq, now, corrupted, False, hold))
        if u[_U_DUP] < self.dup:
            gap = 1 + min(int(u[_U_DUP_DELAY] * self.dup_delay), self.dup_delay - 1)
            self._push(due + gap, _Entry(frame, seq, now, corrupted, True, None))
            self.counters["duplicated"] += 1
            self.log.append((now, seq, "duplicated"))

    def _push(self, due, entry):
        heapq.heappush(self._heap, (due, self._order, entry))
        self._order += 1

    def deliveries(self, now):
        """Like :meth:`due`, with what happened to each frame (:class:`Delivery`)."""
        self._advance(now)
        out = []
        while True:
            due = self._heap[0][0] if self._heap and self._heap[0][0] <= now else None
            held = min(self._held, key=lambda e: e.deadline, default=None)
            if held is not None and held.deadline <= now and (due is None or held.deadline < due):
                self._held.remove(held)
                self._emit(held, out)
                continue
            if due is None:
                return out
            _, _, entry = heapq.heappop(self._heap)
            if entry.hold is not None:
                entry.left = entry.hold
                entry.deadline = due + self.reorder_hold
                self._held.append(entry)
                self.log.append((due, entry.seq, "held"))
            else:
                self._emit(entry, out)

    def next_due(self):
        """The earliest cycle at which :meth:`deliveries` can return a frame (a frame's due
        cycle or a held frame's deadline), ``None`` while the link holds none."""
        times = [h.deadline for h in self._held]
        if self._heap:
            times.append(self._heap[0][0])
        return min(times, default=None)

    def due(self, now):
        """The frames (bytes) leaving the link at or before cycle ``now``, in delivery order."""
        return [d.frame for d in self.deliveries(now)]

    def _emit(self, entry, out):
        out.append(Delivery(entry.frame, entry.seq, entry.sent, entry.corrupted, entry.copy))
        self.counters["delivered"] += 1
        if entry.overtaken:
            self.counters["reordered"] += 1
            self.log.append((self._now, entry.seq, "reordered"))
        released = []
        for h in self._held:
            if entry.seq > h.seq:           # a frame sent after the held one overtakes it
                h.overtaken += 1
                h.left -= 1
                if h.left == 0:
                    released.append(h)
        for h in released:
            self._held.remove(h)
        for h in released:
            self._emit(h, out)

