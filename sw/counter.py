"""The contended counter of ``rocegen-host atomic`` (:meth:`rocegen.host.agent.Agent.atomic`):
several QPs issue RDMA atomics on one 8-byte target of the FPGA's memory at once, and the
values they get back prove that the FPGA executed each exactly once, one after the other.

* ``FETCH_ADD``: each of N QPs adds 1, M times. The target ends at ``initial + N*M``, and the
  N*M original values returned are N*M distinct consecutive numbers from ``initial``: no add
  was lost, none executed twice, none saw another's half-done write.
* ``COMPARE_SWAP``: each QP spins on ``compare k, swap k + 1`` until M of its swaps took: it
  starts from the value the host READ, and a swap that did not take returns the value it found,
  from which the QP tries again. The swaps that took (their ``compare`` came back) are as many
  as the target rose, and no two took on one value.

Values are 64-bit, modulo 2^64 (a target near 2^64 wraps). Each QP keeps up to ``depth``
atomics outstanding: a COMPARE_SWAP QP guesses the values after its last guess, so that
without contention every swap takes.

:class:`CounterQp` is one QP's part of a run (what it posts, what came back);
:func:`counter_problems` judges a target's figures. Plain Python: no NIC here, the agent posts
and polls.
"""

from dataclasses import dataclass, field

from rocegen.wire.atomic_runs import MASK
from rocegen.wire.atomics import ATOMIC_BYTES

__all__ = ["CounterQp", "counter_problems", "MASK", "ahead"]

def ahead(a, b):
    """Whether 64-bit value ``a`` is past ``b`` (by less than 2^63, modulo 2^64)."""
    return 0 < (a - b) & MASK < 1 << 63


@dataclass
class CounterQp:
    """One QP's part of a contended-counter run: ``count`` atomics (FETCH_ADD) or successful
    swaps (COMPARE_SWAP) on ``target`` (FPGA address, R_Key ``rkey``), up to ``depth``
    outstanding, their original values landing in the ``depth`` 8-byte slots from ``slots``
    (host memory); ``guess``: the value the next COMPARE_SWAP compares with."""
    qpn: int
    fpga_qpn: int
    op: str
    count: int
    target: int
    rkey: int
    slots: int
    depth: int
    guess: int = 0
    posted: int = 0
    outstanding: list = field(default_factory=list)     # (wr_id, compare) in posting order
    values: list = field(default_factory=list)          # original values returned, in order
    won: list = field(default_factory=list)             # COMPARE_SWAP: compare values that took
    errors: list = field(default_factory=list)
    failed: bool = False

    def slot(self, wr_id):
        return self.slots + (wr_id % self.depth) * ATOMIC_BYTES

    def wants(self):
        """Whether another atomic may be posted now."""
        if self.failed or len(self.outstanding) >= self.depth:
            return False
        if self.op == "FETCH_ADD":
            return self.posted < self.count
        return len(self.won) + len(self.outstanding) < self.count

    def next_post(self):
        """The next atomic's ``(wr_id, swap_add, compare)``, noted as outstanding."""
        k = self.posted
        self.posted += 1
        if self.op == "FETCH_ADD":
            self.outstanding.append((k, None))
            return k, 1, None
        compare = self.guess
        self.guess = (self.guess + 1) & MASK
        self.outstanding.append((k, compare))
        return k, (compare + 1) & MASK, compare

    def completed(self, wr_id, status, value, keep=5):
        """Take the completion of ``wr_id`` (the oldest outstanding: a QP's completions come in
        order) with ``status`` and the original ``value`` (None on an error)."""
        k, compare = self.outstanding.pop(0) if self.outstanding else (None, None)
        if wr_id != k or status != "SUCCESS":
            why = f"completion of atomic {wr_id}, expected {k}" if wr_id != k else \
                f"atomic {wr_id}: {status}"
            if len(self.errors) < keep:
                self.errors.append(why)
            self.failed = True
            return
        self.values.append(value)
        if self.op == "FETCH_ADD":
            return
        if value == compare:
            self.won.append(compare)
        elif ahead(compare, value):     # our guesses ran past the target: back to what it holds
            self.guess = value
        elif ahead(value, self.guess):  # the others took it further: go on from there
            self.guess = value

    @property
    def done(self):
        """Atomics completed with their value (FETCH_ADD) or swaps that took (COMPARE_SWAP)."""
        return len(self.values) if self.op == "FETCH_ADD" else len(self.won)


def counter_problems(op, initial, final, parts):
    """What is wrong with a target's run (``parts``: its :class:`CounterQp`, ``initial`` and
    ``final`` the values READ before and after), as sentences; none when every check holds. Also
    returns the figures: ``(problems, figures)``."""
    n = sum(p.count for p in parts)
    rise = (final - initial) & MASK
    problems = []
    if op == "FETCH_ADD":
        values = [v for p in parts for v in p.values]
        offsets = sorted((v - initial) & MASK for v in values)
        figures = {"ops": len(values), "distinct": len(set(values)),
                   "consecutive": offsets == list(range(n))}
        if len(values) != n:
            problems.append(f"{len(values)} of {n} FETCH_ADDs completed")
        if figures["distinct"] != len(values):
            problems.append(f"{len(values) - figures['distinct']} values returned more than "
                            f"once: an add executed twice or lost")
        if not figures["consecutive"] and len(values) == n == figures["distinct"]:
            problems.append(f"the values returned are not {n} consecutive numbers from "
                            f"{initial:#x}")
    else:
        won = [w for p in parts for w in p.won]
        offsets = sorted((w - initial) & MASK for w in won)
        attempts = sum(len(p.values) for p in parts)
        figures = {"ops": attempts, "successes": len(won), "distinct": len(set(won)),
                   "consecutive": offsets == list(range(len(won)))}
        if len(won) != n:
            problems.append(f"{len(won)} of {n} COMPARE_SWAPs took")
        if figures["distinct"] != len(won):
            problems.append(f"{len(won) - figures['distinct']} values were swapped twice: two "
                            f"COMPARE_SWAPs found the same value")
        if rise != len(won):
            problems.append(f"the target rose by {rise}, but {len(won)} swaps took")
        elif not figures["consecutive"] and figures["distinct"] == len(won):
            problems.append(f"the swaps that took did not find {initial:#x} .. "
                            f"{(initial + len(won) - 1) & MASK:#x}")
    if rise != n:
        problems.append(f"the target went from {initial:#x} to {final:#x}, not to "
                        f"{(initial + n) & MASK:#x} ({n} increments)")
    return problems, {**figures, "expected": (initial + n) & MASK}
