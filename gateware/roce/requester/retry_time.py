from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from rocegen.gateware.roce.layouts import TIME_BITS

__all__ = ["RetryTimeBase"]


class RetryTimeBase(wiring.Component):
    """The retry engine's time base: a count of ticks, each ``tick_cycles`` clock cycles long.

    Parameters
    ----------
    tick_cycles : int
        Clock cycles per tick (at least 1).

    Ports
    -----
    now : Out(TIME_BITS)
        Ticks since reset (wrapping at 2^36), a register.
    now1 : Out(TIME_BITS)
        ``now + 1``, a register.
    now_next : Out(TIME_BITS)
        The ``now`` of the next cycle, a register.

    Behaviour: ``now`` is 0 for the first ``tick_cycles`` cycles after reset, then 1, and so on;
    all three are registers, so that comparisons with them start at flip-flops.
    """

    def __init__(self, tick_cycles):
        if not isinstance(tick_cycles, int) or isinstance(tick_cycles, bool) or tick_cycles < 1:
            raise ValueError(f"tick_cycles must be a positive integer, not {tick_cycles!r}")
        self.tick_cycles = tick_cycles
        super().__init__({
            "now": Out(TIME_BITS),
            "now1": Out(TIME_BITS, init=1),
            "now_next": Out(TIME_BITS, init=1 if tick_cycles == 1 else 0),
        })

    def elaborate(self, platform):
        m = Module()
        tc = self.tick_cycles
        now, now1, now_next = self.now, self.now1, self.now_next
        if tc > 1:
            div = Signal(range(tc))
            with m.If(div == tc - 1):
                m.d.sync += [div.eq(0), now.eq(now1), now1.eq(now1 + 1)]
            with m.Else():
                m.d.sync += div.eq(div + 1)
            with m.If(div == tc - 2):
                m.d.sync += now_next.eq(now_next + 1)
        else:
            m.d.sync += [now.eq(now1), now1.eq(now1 + 1), now_next.eq(now_next + 1)]
        return m
