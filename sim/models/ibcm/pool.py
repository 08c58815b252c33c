"""The pool of QP numbers the endpoint's connection managers share.

The endpoint has one set of QPs and two ways to open one: the out-of-band connection manager on
UDP port 17185 and the InfiniBand CM on QP1. Each takes a QP with :meth:`QpPool.allocate` and
gives it back with :meth:`QpPool.free`; neither keeps a table of its own. Any object with those
two methods (``allocate() -> qpn or None``, ``free(qpn)``) may stand in for a :class:`QpPool`.
"""

__all__ = ["QpPool"]

#: QP numbers are 24 bits; 0 and 1 are the special QPs (subnet management, general services).
_QPN_MIN, _QPN_END = 2, 1 << 24


class QpPool:
    """The QP numbers ``qpns`` (distinct integers 2..2^24-1), all free at first.

    :meth:`allocate` hands out the lowest free number, or None when none is free; :meth:`free`
    takes one back and raises ``ValueError`` for a number that is not out (never handed out, or
    freed already), so a double free shows at once.
    """

    def __init__(self, qpns):
        qpns = list(qpns)
        if not qpns:
            raise ValueError("a QP pool needs at least one QP number")
        for q in qpns:
            if not isinstance(q, int) or not _QPN_MIN <= q < _QPN_END:
                raise ValueError(f"QP numbers must be integers {_QPN_MIN}..{_QPN_END - 1}, "
                                 f"not {q!r}")
        if len(set(qpns)) != len(qpns):
            raise ValueError("QP numbers must be distinct")
        self._all = frozenset(qpns)
        self._free = set(qpns)

    @property
    def capacity(self):
        """How many QP numbers the pool has."""
        return len(self._all)

    @property
    def free_count(self):
        """How many are free."""
        return len(self._free)

    @property
    def allocated(self):
        """The numbers handed out and not freed yet."""
        return self._all - self._free

    def allocate(self):
        """The lowest free QP number, now out; None when none is free."""
        if not self._free:
            return None
        q = min(self._free)
        self._free.remove(q)
        return q

    def free(self, qpn):
        """Give ``qpn`` back (``ValueError`` if it is not out)."""
        if qpn not in self._all:
            raise ValueError(f"QP {qpn!r} is not one of the pool's")
        if qpn in self._free:
            raise ValueError(f"QP {qpn} is free already")
        self._free.add(qpn)
