from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StatsBlock", "merge_events"]


class StatsBlock(wiring.Component):
    """A bank of event counters with a read port: the statistics block of a design.

    Parameters
    ----------
    names : list of str
        One counter per name, at address ``names.index(name)``.
    counter_width : int
        Bits per counter (8..64); counters saturate at their maximum instead of wrapping.

    Ports
    -----
    ``inc`` : one input bit per counter (``inc[k]`` high in a cycle counts one event).
    ``addr`` / ``data`` : read port, ``data`` is the counter at ``addr`` one cycle later.
    ``clear`` : sets every counter to zero (events of its cycle and of the cycle before are lost).

    Latency: the increments are registered (no combinational path from ``inc`` to a counter):
    an event in cycle t is added at the end of cycle t + 1, so a read addressed in cycle t + 2
    sees it.
    """

    def __init__(self, names, counter_width=32):
        names = list(names)
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"statistics names must be unique, repeated: {dup}")
        if not names:
            raise ValueError("statistics block needs at least one counter")
        if not 8 <= counter_width <= 64:
            raise ValueError(f"counter_width must be 8..64, not {counter_width}")
        self.names = names
        self.counter_width = counter_width
        super().__init__({
            "inc": In(len(names)),
            "addr": In(range(len(names))),
            "data": Out(counter_width),
            "clear": In(1),
        })

    def address(self, name):
        return self.names.index(name)

    def elaborate(self, platform):
        m = Module()
        counters = [Signal(self.counter_width, name=f"count_{n}") for n in self.names]
        inc = Signal.like(self.inc)         # the events of the previous cycle
        m.d.sync += inc.eq(Mux(self.clear, 0, self.inc))
        for k, c in enumerate(counters):
            # the incrementer's carry out is the "at its maximum" test: no separate compare
            nxt = Signal(self.counter_width + 1, name=f"next_{self.names[k]}")
            m.d.comb += nxt.eq(c + 1)
            with m.If(self.clear):
                m.d.sync += c.eq(0)
            with m.Elif(inc[k] & ~nxt[-1]):
                m.d.sync += c.eq(nxt[:-1])
        with m.Switch(self.addr):
            for k, c in enumerate(counters):
                with m.Case(k):
                    m.d.sync += self.data.eq(c)
        return m


def merge_events(m, events, *, backlog):
    """One event strobe for several that may pulse in the same cycle (a counter's ``inc`` counts
    one event a cycle): it pulses once for every pulse of ``events`` (1-bit signals), those that
    come together in the cycles that follow. ``backlog`` is the most pulses that can be owed at
    once (the caller's bound; a pulse owed beyond it would be lost). Adds a register of
    ``range(backlog + 1)`` in module ``m``'s sync domain; the strobe is a LUT from it and the
    events."""
    if not isinstance(backlog, int) or backlog < 1:
        raise ValueError(f"backlog must be a positive integer, not {backlog!r}")
    owed = Signal(range(backlog + 1))
    total = owed
    for e in events:
        total = total + e
    out = Signal()
    m.d.comb += out.eq(total != 0)
    m.d.sync += owed.eq(Mux(total > backlog + 1, backlog, total - out))
    return out
