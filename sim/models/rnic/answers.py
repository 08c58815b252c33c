"""The answers of the RNIC model in time: each leaves a response delay (drawn from the
behaviour's ``response_ns``) after what it answers, in order; duplicated ACKs follow later, out of
order. Times are nanoseconds given by the caller; without them nothing waits."""

import heapq

__all__ = ["Answers"]


class Answers:
    """The answers waiting, and the model's time (:attr:`now`: that of the frame being handled,
    None when the caller gives no time)."""

    def __init__(self, behaviour, rng):
        self.behaviour = behaviour
        self.rng = rng
        self.now = None
        self.queue = []                 # (due, order, frame)
        self.order = 0
        self.last_due = 0.0
        #: second copies of duplicated ACKs, to be scheduled after the answers just made
        self.copies = []

    def advance(self, now):
        if self.now is not None and now < self.now:
            raise ValueError(f"time {now} ns is before {self.now} ns, already seen")
        self.now = now

    def ready_time(self, at):
        """When an answer made at ``at`` may leave: a response delay later, not before the
        answer made before it."""
        lo, hi = self.behaviour.response_ns
        when = max(at + (self.rng.uniform(lo, hi) if hi else 0.0), self.last_due)
        self.last_due = when
        return when

    def schedule(self, frame, at):
        heapq.heappush(self.queue, (self.ready_time(at), self.order, frame))
        self.order += 1

    def schedule_copies(self):
        """The second copies of duplicated ACKs: after their original, by up to two response
        delays, outside the answers' order (later answers may overtake them)."""
        lo, hi = self.behaviour.response_ns
        for f in self.copies:
            when = self.last_due + 1.0 + self.rng.uniform(0, lo + hi)
            heapq.heappush(self.queue, (when, self.order, f))
            self.order += 1
        self.copies.clear()

    def pop_due(self, now):
        """The answers due by ``now``, in order."""
        out = []
        while self.queue and self.queue[0][0] <= now:
            out.append(heapq.heappop(self.queue)[2])
        return out

    def head(self):
        """The time of the next answer waiting, or None."""
        return self.queue[0][0] if self.queue else None

    def __len__(self):
        return len(self.queue)
