"""Test-only top levels of the RoCEv2 blocks with AXI-Stream port names, for the cocotb benches."""

from amaranth.hdl import Module
from amaranth.lib import wiring

from rocegen.gateware.axis import axis_members, connect_axis
from rocegen.gateware.icrc import IcrcCheck, IcrcInsert

__all__ = ["IcrcTop"]


class IcrcTop(wiring.Component):
    """Three independent ICRC paths (``tuser`` carries the packet stream's ``error`` flag):

    * ``s_tx_axis`` -> :class:`IcrcInsert` -> ``m_tx_axis``: frames without ICRC get one;
    * ``s_rx_axis`` -> :class:`IcrcCheck` -> ``m_rx_axis``: frames lose their ICRC, ``tuser``
      set on the last beat of those whose ICRC is wrong; ``rx_bad`` counts them;
    * ``s_loop_axis`` -> :class:`IcrcInsert` -> :class:`IcrcCheck` -> ``m_loop_axis``: frames
      come back unchanged; ``loop_bad`` counts ICRC failures (none expected).

    All for untagged Ethernet frames (``offset`` 14) carrying IPv4 unless told otherwise.
    """

    def __init__(self, width, offset=14, ip_version=4):
        self.width = width
        self.offset = offset
        self.ip_version = ip_version
        super().__init__({
            **axis_members("s_tx_axis", width, sink=True),
            **axis_members("m_tx_axis", width, sink=False),
            **axis_members("s_rx_axis", width, sink=True),
            **axis_members("m_rx_axis", width, sink=False),
            **axis_members("s_loop_axis", width, sink=True),
            **axis_members("m_loop_axis", width, sink=False),
            "rx_bad": wiring.Out(16),
            "loop_bad": wiring.Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        kw = {"offset": self.offset, "ip_version": self.ip_version}
        tx = m.submodules.tx = IcrcInsert(self.width, **kw)
        rx = m.submodules.rx = IcrcCheck(self.width, **kw)
        loop_tx = m.submodules.loop_tx = IcrcInsert(self.width, **kw)
        loop_rx = m.submodules.loop_rx = IcrcCheck(self.width, **kw)
        connect_axis(m, self, "s_tx_axis", tx.i, sink=True)
        connect_axis(m, self, "m_tx_axis", tx.o, sink=False)
        connect_axis(m, self, "s_rx_axis", rx.i, sink=True)
        connect_axis(m, self, "m_rx_axis", rx.o, sink=False)
        connect_axis(m, self, "s_loop_axis", loop_tx.i, sink=True)
        wiring.connect(m, loop_tx.o, loop_rx.i)
        connect_axis(m, self, "m_loop_axis", loop_rx.o, sink=False)
        with m.If(rx.icrc_bad):
            m.d.sync += self.rx_bad.eq(self.rx_bad + 1)
        with m.If(loop_rx.icrc_bad):
            m.d.sync += self.loop_bad.eq(self.loop_bad + 1)
        return m
