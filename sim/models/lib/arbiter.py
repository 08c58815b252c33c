"""Reference model of :class:`~rocegen.gateware.lib.arbiter.PacketArbiter`.

With random idle cycles the exact order of packets depends on cycle timing, so besides the
order for pre-loaded inputs the model gives the invariants any correct order must meet.
"""

__all__ = ["round_robin", "check_merge", "check_bounded_wait"]


def round_robin(queues, start=0):
    """Output order when every input holds all its packets from the start and keeps a packet
    offered until its queue is empty: one packet per input in turn, beginning with input
    ``start``, skipping empty inputs. ``queues`` is a list of lists; the result is a list of
    ``(input, packet)``."""
    queues = [list(q) for q in queues]
    n = len(queues)
    out = []
    k = start
    while any(queues):
        if queues[k]:
            out.append((k, queues[k].pop(0)))
        k = (k + 1) % n
    return out


def check_merge(queues, merged, source):
    """Check that ``merged`` (the output packets) is exactly an interleaving, whole packet by
    whole packet, of ``queues`` (per-input lists of packets), keeping each input's order.
    ``source(packet)`` tells which input an output packet claims to come from. Raises
    AssertionError naming the first mismatch."""
    pos = [0] * len(queues)
    for n, pkt in enumerate(merged):
        k = source(pkt)
        if not 0 <= k < len(queues):
            raise AssertionError(f"output packet {n}: unknown input {k}")
        if pos[k] >= len(queues[k]):
            raise AssertionError(f"output packet {n}: input {k} sent only {len(queues[k])} packets")
        want = queues[k][pos[k]]
        if pkt != want:
            raise AssertionError(f"output packet {n}: expected packet {pos[k]} of input {k} "
                                 f"{want!r}, got {pkt!r}")
        pos[k] += 1
    missing = [(k, len(q) - p) for k, (q, p) in enumerate(zip(queues, pos, strict=True)) if p < len(q)]
    if missing:
        raise AssertionError(f"packets missing at the output (input, count): {missing}")


def check_bounded_wait(n, waits, starts):
    """Round-robin fairness under any traffic: once an input offers a packet, at most ``n - 1``
    packets of other inputs start before it.

    ``waits`` maps ``(input, index)`` to the cycle the packet's first beat was first offered;
    ``starts`` is the list of ``(cycle, input, index)`` of the cycles the first beats moved on
    the output, in order. Raises AssertionError for the first packet that waited too long."""
    order = sorted(starts)
    for pos, (cycle, k, idx) in enumerate(order):
        offered = waits[(k, idx)]
        if offered > cycle:
            raise AssertionError(f"packet {idx} of input {k} started at {cycle}, "
                                 f"before it was offered at {offered}")
        overtaken = [(c, j, x) for c, j, x in order[:pos] if c >= offered]
        if len(overtaken) > n - 1:
            raise AssertionError(f"packet {idx} of input {k}, offered at cycle {offered}, waited "
                                 f"for {len(overtaken)} packets: {overtaken}")
