"""Quiet connections: the reference of the gateware's ``IbCmIdle``, a cycle at a time."""

from rocegen.wire.cm import QPN_BASE

__all__ = ["IdleWatch"]


class IdleWatch:
    """The connections of ``num_qps`` QPs on which no request came for a whole ``window`` of
    cycles.

    Time is cut into windows of ``window`` cycles, the first ending in cycle ``window - 1``. A
    QP watched at the start of a window (the end cycle of the window before; at first, none)
    that stays watched through the window and sees no request in it is reported in the cycle
    after the window's end. A request in the end cycle counts for the window it ends.
    """

    def __init__(self, num_qps, window):
        if not 1 <= num_qps <= 256:
            raise ValueError(f"num_qps must be 1..256, not {num_qps}")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"window must be a positive number of cycles, not {window!r}")
        self.num_qps, self.window = num_qps, window
        self.cycle = 0
        self._quiet = 0             # QPs quiet so far in this window
        self._report = 0            # reported in the next cycle

    def step(self, watched, seen=()):
        """One cycle: ``watched`` (bit k: QP k watched in it), ``seen`` (the QP numbers of the
        requests seen in it). Returns the QPs reported in this cycle (bit k: QP k)."""
        out = self._report
        hit = 0
        for qpn in seen:
            if QPN_BASE <= qpn < QPN_BASE + self.num_qps:
                hit |= 1 << (qpn - QPN_BASE)
        still = self._quiet & watched & ~hit
        if self.cycle % self.window == self.window - 1:
            self._quiet, self._report = watched, still
        else:
            self._quiet, self._report = still, 0
        self.cycle += 1
        return out
