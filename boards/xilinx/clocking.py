"""Clock input buffering on AMD (Xilinx) FPGAs."""

from amaranth.hdl import Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["ClockInput"]


class ClockInput(wiring.Component):
    """A differential board clock onto a global clock net: ``IBUFDS`` then ``BUFG``.

    Ports
    -----
    ``p``, ``n`` : In(1)
        The clock's pins (top-level ports placed by the constraints).
    ``clk`` : Out(1)
        The buffered clock, no added latency beyond the buffers'.
    """

    def __init__(self):
        super().__init__({"p": In(1), "n": In(1), "clk": Out(1)})

    def elaborate(self, platform):
        m = Module()
        ibuf = Signal()
        m.submodules.ibufds = Instance("IBUFDS", i_I=self.p, i_IB=self.n, o_O=ibuf)
        m.submodules.bufg = Instance("BUFG", i_I=ibuf, o_O=self.clk)
        return m
