"""Test-only top levels with AXI-Stream port names, for the cocotb testbenches."""

from amaranth.hdl import Module
from amaranth.lib import data, wiring

from rocegen.gateware.lib.axis import axis_members, connect_axis
from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.wire.headers import Header

__all__ = ["FramingLoopTop", "ConstSliceTop", "framing_header"]


def framing_header(length):
    return Header("h", [("ver", 4), ("flags", 4), ("kind", 8), ("body", 8 * length - 16)])


class FramingLoopTop(wiring.Component):
    """Depacketizer then packetizer of the same header: every frame of at least ``header_len``
    bytes comes back unchanged (the header travels as metadata in between); shorter frames are
    dropped and counted in ``runts``."""

    def __init__(self, width, header_len):
        self.width = width
        self.header = framing_header(header_len)
        super().__init__({
            **axis_members("s_axis", width, sink=True),
            **axis_members("m_axis", width, sink=False),
            "runts": wiring.Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        dp = m.submodules.dp = Depacketizer(self.header, self.width)
        pk = m.submodules.pk = Packetizer(self.header, self.width,
                                          data.StructLayout({"h": self.header.layout}))
        connect_axis(m, self, "s_axis", dp.i, sink=True)
        wiring.connect(m, dp.o, pk.i)
        connect_axis(m, self, "m_axis", pk.o, sink=False)
        with m.If(dp.runt):
            m.d.sync += self.runts.eq(self.runts + 1)
        return m


class ConstSliceTop(wiring.Component):
    """Constant, port-driven and conditional assignments to slices of one output: the pattern
    whose Verilog needed :func:`rocegen.gateware.emit.repair_constant_blocks`."""

    def __init__(self):
        super().__init__({
            "x": wiring.In(1), "y": wiring.In(8), "c": wiring.In(8),
            "o": wiring.Out(data.StructLayout({"a": 8, "b": 8, "d": 8})),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.a.eq(self.c), self.o.d.eq(0x5A)]
        with m.If(self.x):
            m.d.comb += self.o.b.eq(self.y)
        return m
