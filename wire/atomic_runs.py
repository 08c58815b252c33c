"""What a test-traffic run of RDMA atomics leaves (:data:`rocegen.wire.cm.TX_ATOMIC`), in plain
Python: the model the host agent checks the host's memory against (``rocegen-host traffic --op
FETCH_ADD|COMPARE_SWAP``, ``rocegen-host atomic --direction fpga-to-host``) and the testbenches
check the endpoint's runs with (``rocegen sim demo --op FETCH_ADD``)."""

from rocegen.wire.cm import ATOMIC_SLOT_SHIFT

__all__ = ["generator_run", "original_slot", "ORIGINAL_SLOTS", "MASK"]

#: A 64-bit value's bits (the atomics' values are modulo 2^64).
MASK = (1 << 64) - 1


#: The original values of a traffic generator's atomic run the FPGA keeps: those of its last 64
#: messages, message ``s``'s at local byte :func:`original_slot`\ ``(s)``.
ORIGINAL_SLOTS = 64


def original_slot(s):
    """The FPGA's local byte address where the original value of its generator's atomic ``s``
    lands (:data:`rocegen.wire.cm.ATOMIC_SLOT_SHIFT`)."""
    return (s % ORIGINAL_SLOTS) << ATOMIC_SLOT_SHIFT


def generator_run(op, count, targets=1, initial=None):
    """The FPGA traffic generator's atomic run (:data:`rocegen.wire.cm.TX_ATOMIC`), in plain
    Python: ``count`` messages, message ``s`` on target ``s mod targets`` (8-byte targets, one
    after the other: a run of ``dma_length`` 8 over a window of ``8 * targets`` bytes), which
    start at ``initial`` (a list, one value per target the run touches; default all 0). A
    ``"FETCH_ADD"`` adds 1; the ``"COMPARE_SWAP"`` of message ``s`` swaps in ``s + 1`` where it
    finds ``s``. Returns ``(final, originals)``: the values the run leaves in the
    ``min(targets, count)`` targets it touches, and the original value of each of its last
    :data:`ORIGINAL_SLOTS` messages (a dict by message number), in message order: the order an
    RC QP executes them in."""
    if op not in ("FETCH_ADD", "COMPARE_SWAP"):
        raise ValueError(f"op must be FETCH_ADD or COMPARE_SWAP, not {op!r}")
    if count < 0 or targets < 1:
        raise ValueError("count must be >= 0 and targets >= 1")
    used = min(targets, count)
    values = [0] * used if initial is None else [v & MASK for v in initial]
    if len(values) != used:
        raise ValueError(f"initial must hold {used} values (the targets the run touches)")
    head = max(0, count - ORIGINAL_SLOTS)
    # the messages before the last 64, target by target (each target's messages in order)
    for t in range(min(used, head)):
        n = head // targets + (t < head % targets)
        values[t] = (values[t] + n) & MASK if op == "FETCH_ADD" else \
            _swaps(t, targets, n, values[t])
    originals = {}
    for s in range(head, count):            # the last 64, one by one
        t = s % targets
        originals[s] = v = values[t]
        if op == "FETCH_ADD":
            values[t] = (v + 1) & MASK
        elif v == s:
            values[t] = (s + 1) & MASK
    return values, originals


def _swaps(t, targets, n, v):
    """Target ``t``'s value after its first ``n`` COMPARE_SWAPs (messages ``t``, ``t +
    targets``, ...) from ``v``, in their order: message ``s`` takes where it finds ``s``. A
    message that finds another value changes nothing, so the walk goes straight to the next
    message that can take (the one whose number is the value), if any."""
    j = 0
    while j < n:
        s = t + j * targets
        if v == s:
            if targets == 1:                # every message after it finds its own number
                return (t + n) & MASK
            v, j = (s + 1) & MASK, j + 1
        elif v > s and (v - t) % targets == 0 and (v - t) // targets < n:
            j = (v - t) // targets
        else:
            break
    return v
