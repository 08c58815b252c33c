"""The streaming front end's ring placement: where the next message goes, and whether it fits."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import RING_COMMIT

__all__ = ["RingPlacer"]


class RingPlacer(wiring.Component):
    """Places messages one after another in a ring of words, a message never wrapping, and
    says whether the next one fits.

    Parameters
    ----------
    ring_words : int
        Words of the ring (at least ``message_words``, below 2^32).
    message_words : int
        Words reserved for a message (1..``ring_words``).
    max_inflight : int
        Messages that may be held (1..4096).

    Ports
    -----
    commit : In(stream.Signature(RING_COMMIT, always_ready=True))
        A message is stored: it ends at word ``pos + write`` (a word offset in the ring), where
        the next message goes unless it does not fit before the ring end.
    used, inflight : In(range(ring_words + 1)), In(range(max_inflight + 1))
        Words and messages held, a commit counted from the cycle after the next one (as
        :class:`~rocegen.gateware.roce.frontend.stream_space.RingSpace` counts them).
    start, skip : Out(range(ring_words)), Out(range(ring_words + 1))
        Where a message beginning in this cycle goes: its word offset, and the words skipped
        before the ring end to put it there (``start`` 0 when fewer than ``message_words``
        words are left after the previous end; an empty ring restarts at 0: when ``used`` was 0
        two cycles before and no commit came since).
    room : Out(1)
        A message beginning in this cycle fits: ``used + skip <= ring_words - message_words``
        and ``inflight < max_inflight`` exactly when no commit came in the two cycles before
        (all are counted then); else only with a margin for the two that may not be (at most
        ``ring_words - 6 * message_words + 3`` words and ``max_inflight - 3`` messages held).

    Behaviour: every output is a register, worked out one cycle ahead (the two ends a commit may
    have are placed beforehand, ``write`` picks one). No backpressure.
    """

    def __init__(self, ring_words, message_words, max_inflight):
        for name, value in (("ring_words", ring_words), ("message_words", message_words),
                            ("max_inflight", max_inflight)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if not 1 <= message_words <= ring_words < 1 << 32:
            raise ValueError(f"need 1 <= message_words ({message_words}) <= ring_words "
                             f"({ring_words}) < 2^32")
        if not 1 <= max_inflight <= 4096:
            raise ValueError(f"max_inflight must be from 1 to 4096 messages, not {max_inflight}")
        self.ring_words, self.message_words, self.max_inflight = ring_words, message_words, max_inflight
        super().__init__({
            "commit": In(stream.Signature(RING_COMMIT, always_ready=True)),
            "used": In(range(ring_words + 1)),
            "inflight": In(range(max_inflight + 1)),
            "start": Out(range(ring_words)),
            "skip": Out(range(ring_words + 1)),
            "room": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        R, M, N = self.ring_words, self.message_words, self.max_inflight
        used, nfl = self.used, self.inflight
        commit, c = self.commit.valid, self.commit.payload
        wp = Signal(range(R + 1))           # where the next message goes (word offset in the ring)
        empty = Signal()                    # the ring holds nothing (for the restart rule)
        add_v = Signal()                    # a commit of the previous cycle, not yet in used/nfl
        m.d.sync += add_v.eq(commit)
        pos = Signal(range(R + 1))
        m.d.comb += pos.eq(c.pos)
        with m.If(commit):
            m.d.sync += wp.eq(pos + c.write)

        def place(x):
            """(start, skip) of a message placed from word offset ``x``."""
            wrap = x > R - M
            return Mux(wrap, 0, x), Mux(wrap, R - x, 0)

        # the next placement: after a commit from its end (both ends it may have are worked out
        # beforehand, the write bit picks one), else from the write pointer, or the ring start
        # when the ring is empty
        s0, k0 = place(pos)
        s1, k1 = place(pos + 1)
        sw, kw = place(Mux(empty, 0, wp))
        with m.If(commit):
            m.d.sync += [self.start.eq(Mux(c.write, s1, s0)), self.skip.eq(Mux(c.write, k1, k0))]
        with m.Else():
            m.d.sync += [self.start.eq(sw), self.skip.eq(kw)]
        # used and nfl take commits a cycle late; the room of the next cycle is exact when no
        # commit is missing from them, else granted only with a margin for the two that may be
        # (each holds at most 2M - 1 words)
        settled = ~commit & ~add_v
        m.d.sync += empty.eq((used == 0) & settled)
        exact = settled & (used + self.skip <= R - M) & (nfl < N)
        fast = Const(0, 1)
        if R - 6 * M + 3 >= 0 and N >= 3:
            fast = (used <= R - 6 * M + 3) & (nfl <= N - 3)
        m.d.sync += self.room.eq(exact | fast)
        return m
