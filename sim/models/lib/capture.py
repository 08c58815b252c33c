"""Reference model of :class:`rocegen.sim.testing.capture.StreamCapture`, cycle by cycle: which cycles
it is ready in (line-rate budget, random backpressure, room in the ring) and what it stores."""

__all__ = ["StreamCaptureModel", "xorshift32"]

MASK32 = 0xFFFF_FFFF


def xorshift32(x):
    """One step of the 32-bit xorshift generator (shifts 13, 17, 5)."""
    x ^= (x << 13) & MASK32
    x ^= x >> 17
    x ^= (x << 5) & MASK32
    return x


class StreamCaptureModel:
    """The capture ring's behaviour. Call :meth:`ready` with the cycle's ``rd`` to learn
    ``i_ready``, then :meth:`step` with the cycle's inputs to advance to the next cycle."""

    def __init__(self, depth, *, frac_bits=16, frame_overhead=0, max_credit=0, budget=False):
        self.depth = depth
        self.frac_bits = frac_bits
        self.frame_overhead = frame_overhead
        self.max_credit = max_credit
        self.budget = budget
        self.credit = 0
        self.ready_reg = 0
        self.rng = 1
        self.last_seed = 0
        self.count = 0
        self.frames = 0
        self.cycle = 0
        #: cycles ready inside a frame without a beat (``starved``)
        self.starved = 0
        self.inside = False
        #: cycles in which a beat was offered and the ring had no room for it
        self.full_stalls = 0
        #: (payload, cycle) of every entry taken, in order
        self.entries = []

    def ready(self, rd):
        room = ((self.count - rd) & MASK32) < self.depth
        return int(self.ready_reg and room)

    def step(self, *, valid, payload, last, nbytes, rd, credit_step, bp_threshold, seed):
        """Advance one clock edge; returns whether a beat was taken at it."""
        take = bool(valid and self.ready(rd))
        if valid and self.ready_reg and not take:
            self.full_stalls += 1
        if self.inside and self.ready(rd) and not valid:
            self.starved = (self.starved + 1) & MASK32
        if take:
            self.inside = not last
            self.entries.append((payload, self.cycle))
            self.count = (self.count + 1) & MASK32
            self.frames = (self.frames + bool(last)) & MASK32
        x3 = xorshift32(self.rng)
        passes = (x3 & 0xFFFF) >= bp_threshold
        if seed != self.last_seed:
            self.rng = seed or 1
        else:
            self.rng = x3
        self.last_seed = seed
        if self.budget:
            one = 1 << self.frac_bits
            spent = (nbytes + (self.frame_overhead if last else 0)) * one if take else 0
            after = min(self.credit - spent + credit_step, self.max_credit * one)
            self.credit = after
            ok = credit_step == 0 or after > 0
        else:
            ok = True
        self.ready_reg = int(ok and passes)
        self.cycle = (self.cycle + 1) & MASK32
        return take
