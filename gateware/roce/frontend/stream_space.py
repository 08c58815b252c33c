"""The streaming front end's ring accounting: space held by stored messages until completed."""

from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import COMPLETION, CplStatus, WrSource

__all__ = ["RingSpace"]


def _check(name, value, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not 1 <= value <= hi:
        raise ValueError(f"{name} must be from 1 to {hi}, not {value}")


class RingSpace(wiring.Component):
    """Counts the ring words and messages held by stored messages, and gives them back, in
    posting order, as their completions come.

    Parameters
    ----------
    ring_words : int
        Words of the ring (1..2^32).
    max_inflight : int
        Messages that may be held (1..4096); the queue of their sizes has two spare entries.

    Ports
    -----
    add : In(stream.Signature(range(ring_words + 1), always_ready=True))
        A stored message holds this many words (its own and any skipped tail before it).
    cpl : In(stream.Signature(COMPLETION))
        Always ready. A completion with ``src == STREAM`` counts in ``completed_ok`` /
        ``completed_err`` and gives back the words of the oldest message held, whatever its
        status (none when no message was added two cycles before or earlier); others are
        ignored.
    used : Out(range(ring_words + 1))
        Words held (a register): an ``add`` in cycle t counts from t + 1, a completion in cycle
        t is given back from t + 1.
    inflight : Out(range(max_inflight + 1))
        Messages held, counted as ``used``.
    completed_ok, completed_err : Out(32)
        Completion counters.

    Behaviour: no backpressure; the sender must not hold more than ``max_inflight + 2``
    messages (a size beyond that is lost).
    """

    def __init__(self, ring_words, max_inflight):
        _check("ring_words", ring_words, 1 << 32)
        _check("max_inflight", max_inflight, 4096)
        self.ring_words, self.max_inflight = ring_words, max_inflight
        super().__init__({
            "add": In(stream.Signature(range(ring_words + 1), always_ready=True)),
            "cpl": In(stream.Signature(COMPLETION)),
            "used": Out(range(ring_words + 1)),
            "inflight": Out(range(max_inflight + 1)),
            "completed_ok": Out(32),
            "completed_err": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        R = self.ring_words
        m.submodules.frees = frees = SyncFIFOBuffered(width=max(1, R.bit_length()),
                                                      depth=self.max_inflight + 2)
        m.d.comb += [frees.w_data.eq(self.add.payload), frees.w_en.eq(self.add.valid)]
        c = self.cpl.payload
        got = self.cpl.valid & (c.src == WrSource.STREAM)
        rel_v = got & frees.r_rdy
        m.d.comb += [self.cpl.ready.eq(1), frees.r_en.eq(got)]
        with m.If(got & (c.status == CplStatus.OK)):
            m.d.sync += self.completed_ok.eq(self.completed_ok + 1)
        with m.Elif(got):
            m.d.sync += self.completed_err.eq(self.completed_err + 1)
        m.d.sync += [
            self.used.eq(self.used + Mux(self.add.valid, self.add.payload, 0) -
                         Mux(rel_v, frees.r_data, 0)),
            self.inflight.eq(self.inflight + self.add.valid - rel_v),
        ]
        return m
