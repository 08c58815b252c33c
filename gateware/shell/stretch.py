"""Pulse stretcher for an LED."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Stretch"]


class Stretch(wiring.Component):
    """Pulse stretcher for an LED: ``o`` is high from the cycle after a cycle with ``i`` high
    until ``cycles`` cycles after the last such cycle, so that single-cycle events stay visible.

    Parameters
    ----------
    cycles : int
        Length of the stretched pulse in cycles of the ``sync`` domain (1 or more).
    """

    def __init__(self, cycles):
        if not isinstance(cycles, int) or isinstance(cycles, bool) or cycles < 1:
            raise ValueError(f"cycles must be a positive integer, not {cycles!r}")
        self.cycles = cycles
        super().__init__({"i": In(1), "o": Out(1)})

    def elaborate(self, platform):
        m = Module()
        left = Signal(range(self.cycles + 1))
        with m.If(self.i):
            m.d.sync += left.eq(self.cycles)
        with m.Elif(left != 0):
            m.d.sync += left.eq(left - 1)
        m.d.comb += self.o.eq(left != 0)
        return m
