"""Reference model of :class:`rocegen.gateware.lib.fifo.PacketFifo`: which packets come out, and
which are dropped, given the packets that go in."""

from dataclasses import dataclass, field

from rocegen.sim.models.packets import Packet, to_beats

__all__ = ["FifoOutcome", "beat_count", "packet_fifo", "check_fifo_invariants"]


@dataclass
class FifoOutcome:
    out: list = field(default_factory=list)   # packets leaving ``o``, in order
    drop_error: int = 0                        # pulses of ``drop_error``
    drop_overflow: int = 0                     # pulses of ``drop_overflow``
    level: int = 0                             # beats held once all input is in (stalled output)


def beat_count(pkt, width):
    """Beats ``pkt`` takes on a ``width``-bit packet stream (an empty packet takes one)."""
    return len(to_beats(pkt.data, width))


def _passed(pkt, drop_errors):
    return Packet(pkt.data, dict(pkt.meta), pkt.error and not drop_errors)


def packet_fifo(packets, width, depth, *, store_and_forward=True, drop_errors=True,
                overflow="drop", meta_depth=None, cut=None):
    """Outcome of sending ``packets`` through a ``PacketFifo`` of ``depth`` beats.

    ``meta_depth`` is the size of the FIFO's metadata queue, ``None`` when the FIFO has no
    metadata (no limit on the number of packets). ``cut`` (with ``store_and_forward``, for a
    FIFO with ``cut_input``): one bool per packet, the packets that pass cut-through; without
    ``store_and_forward`` every packet does.

    * ``overflow="wait"`` and cut-through: the outcome does not depend on timing. A packet is
      dropped as an overflow when it can never fit: more than ``depth`` beats, or (errored and
      ``drop_errors``) more than ``depth`` beats before its last.
    * ``overflow="drop"``: the outcome assumes the output is stalled (``o.ready`` low) until every
      input beat has been accepted, so no beat leaves while packets arrive. Packets are then
      kept greedily in arrival order while they fit in the ``depth`` beats (and ``meta_depth``
      packets) left by those kept before; ``level`` is the number of beats held at the end.

    Decision order for one store-and-forward packet, as in the hardware: an errored packet
    (``drop_errors``) is dropped as an error if the beats before its last fit (its last beat
    needs no room), else as an overflow; any other packet is kept if all its beats fit and the
    metadata queue has room, else dropped as an overflow. A cut-through packet is never dropped
    for its error; in drop mode it starts if the metadata queue has room and two beats are free
    (one for a one-beat packet), else it is dropped whole as an overflow; one that does not fit
    whole is truncated to the free beats (each full), marked ``error`` and counted as an
    overflow.
    """
    res = FifoOutcome()
    if overflow not in ("drop", "wait"):
        raise ValueError(f"unknown overflow mode {overflow!r}")
    if cut is None:
        cut = [not store_and_forward] * len(packets)
    elif not store_and_forward:
        raise ValueError("cut names the cut-through packets of a store-and-forward FIFO")
    if len(cut) != len(packets):
        raise ValueError(f"cut has {len(cut)} entries for {len(packets)} packets")
    B = width // 8
    used = 0          # beats held (drop mode: nothing leaves during the input phase)
    kept = 0          # packets held
    for pkt, through in zip(packets, cut):
        n = beat_count(pkt, width)
        room = depth - used if overflow == "drop" else depth
        pkt_room = (meta_depth is None or overflow == "wait" or kept < meta_depth)
        if through:
            if overflow == "wait":
                res.out.append(Packet(pkt.data, dict(pkt.meta), pkt.error))
            elif not pkt_room or room < min(n, 2):
                res.drop_overflow += 1
            else:
                if n <= room:
                    res.out.append(Packet(pkt.data, dict(pkt.meta), pkt.error))
                else:
                    res.out.append(Packet(pkt.data[:room * B], dict(pkt.meta), True))
                    res.drop_overflow += 1
                used += min(n, room)
                kept += 1
        elif drop_errors and pkt.error:
            if n - 1 <= room:
                res.drop_error += 1
            else:
                res.drop_overflow += 1
        elif n <= room and pkt_room:
            res.out.append(_passed(pkt, drop_errors))
            if overflow == "drop":
                used += n
                kept += 1
        else:
            res.drop_overflow += 1
    res.level = used if overflow == "drop" else sum(beat_count(p, width) for p in res.out)
    return res


def _key(p):
    return (bytes(p.data), repr(p.meta), bool(p.error))


def check_fifo_invariants(sent, got, drop_error, drop_overflow, *, drop_errors=True):
    """Checks that hold whatever the timing: every packet out is an exact packet in, in order
    (``got`` is a subsequence of ``sent``); no errored packet leaves when ``drop_errors``; each
    packet in either leaves or is counted once as a drop. Raises ``AssertionError``."""
    it = iter(enumerate(sent))
    for n, g in enumerate(got):
        for _, s in it:
            if _key(g) == _key(_passed(s, drop_errors)) and not (drop_errors and s.error):
                break
        else:
            raise AssertionError(f"output packet {n} ({len(g.data)} bytes, meta {g.meta}) is not "
                                 f"an input packet in order")
    if drop_errors and any(g.error for g in got):
        raise AssertionError("an errored packet left the FIFO although drop_errors is set")
    if len(got) + drop_error + drop_overflow != len(sent):
        raise AssertionError(f"{len(sent)} packets in, but {len(got)} out + {drop_error} error "
                             f"drops + {drop_overflow} overflow drops")
    n_err = sum(bool(p.error) for p in sent) if drop_errors else 0
    if drop_error > n_err:
        raise AssertionError(f"{drop_error} error drops for {n_err} errored packets")
