"""Test-only top levels of the payload readers with flat AXI4 / AXI-Stream port names, for the
cocotb testbenches."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import Axi4Signature, axi4_members, connect_axi4
from rocegen.gateware.lib.axis import axis_members, connect_axis
from rocegen.gateware.roce.layouts import PACKET_DESC
from rocegen.gateware.roce.memory.axi_reader import AxiPayloadReader

__all__ = ["AxiReaderTop"]


class AxiReaderTop(wiring.Component):
    """An :class:`AxiPayloadReader` on an AXI4 master port ``m_axi_*`` (the write channels tied
    off: ``awvalid``/``wvalid`` 0, ``bready`` 1).

    * ``s_desc_data`` / ``s_desc_valid`` / ``s_desc_ready``: the descriptor stream, ``data`` the
      bits of a :data:`PACKET_DESC` (its ``as_value()``);
    * ``m_axis_*``: the payload packets (``tuser`` = ``error``), with ``m_meta`` the bits of the
      packet's descriptor beside every beat;
    * ``read_errors``: packets that left with ``error`` set (wraps at 2^16).
    """

    def __init__(self, width, addr_width=32, id_width=1, max_burst=64, outstanding_beats=256,
                 desc_depth=32):
        self.width = width
        self.addr_width = addr_width
        self.id_width = id_width
        self.params = dict(addr_width=addr_width, id_width=id_width, max_burst=max_burst,
                           outstanding_beats=outstanding_beats, desc_depth=desc_depth)
        super().__init__({
            "s_desc_data": In(PACKET_DESC.size),
            "s_desc_valid": In(1),
            "s_desc_ready": Out(1),
            **axis_members("m_axis", width, sink=False),
            "m_meta": Out(PACKET_DESC.size),
            **axi4_members("m_axi", addr_width, width, id_width),
            "read_errors": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        rd = m.submodules.reader = AxiPayloadReader(self.width, **self.params)
        bus = Axi4Signature(self.addr_width, self.width, self.id_width).create()
        m.d.comb += [
            rd.desc.payload.eq(self.s_desc_data),
            rd.desc.valid.eq(self.s_desc_valid),
            self.s_desc_ready.eq(rd.desc.ready),
            self.m_meta.eq(rd.o.payload.meta.as_value()),
            bus.ar.payload.eq(rd.ar.payload),
            bus.ar.valid.eq(rd.ar.valid),
            rd.ar.ready.eq(bus.ar.ready),
            rd.r.payload.eq(bus.r.payload),
            rd.r.valid.eq(bus.r.valid),
            bus.r.ready.eq(rd.r.ready),
            bus.aw.valid.eq(0),
            bus.w.valid.eq(0),
            bus.b.ready.eq(1),
        ]
        connect_axi4(m, self, "m_axi", bus)
        connect_axis(m, self, "m_axis", rd.o, sink=False)
        with m.If(rd.read_error):
            m.d.sync += self.read_errors.eq(self.read_errors + 1)
        return m
