"""Two sources of word writes into one tagged AXI4 writer, with the durable words told apart."""

from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature, check_addr_width
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.axi_writer import tagged_write_layout
from rocegen.gateware.roce.stream_post import DURABLE_WIDTH

__all__ = ["MemWriteMerge"]


class MemWriteMerge(wiring.Component):
    """The word writes of two sources merged into the input of an
    :class:`~rocegen.gateware.roce.axi_writer.AxiWriter` built with ``tags=2``, and the writer's
    count of durable words split back by source.

    Parameters
    ----------
    width : int
        Data width W (64..512).
    addr_width : int
        Word-address bits (1..32), the writer's ``mem_addr_width``.

    Ports
    -----
    a, b : In(MemWriteSignature(width, addr_width))
        The two sources' word writes; ``a`` has priority.
    o : Out(stream.Signature(tagged_write_layout(width, addr_width, 2)))
        The writes, each tagged with its source (0: ``a``, 1: ``b``), to the writer's ``i``.
    durable, durable_tag : In(DURABLE_WIDTH), In(1)
        The writer's ``durable`` and ``durable_tag``: words acknowledged by the memory in this
        cycle, all of one source.
    a_durable, b_durable : Out(DURABLE_WIDTH)
        Words of ``a`` / of ``b`` acknowledged in this cycle, in the order each source's words
        were taken (the writer acknowledges every word in the order it took it).

    Behaviour: combinational, no state. ``o`` offers ``a``'s write when ``a.valid``, else
    ``b``'s; ``a.ready`` follows ``o.ready``, ``b.ready`` is ``o.ready`` in a cycle ``a.valid``
    is low (a steady stream on ``a`` holds ``b`` back). One write per cycle, as the writer takes
    them; latency 0. Byte order and addresses pass unchanged.
    """

    def __init__(self, width, addr_width):
        check_width(width)
        check_addr_width(addr_width)
        self.width, self.addr_width = width, addr_width
        super().__init__({
            "a": In(MemWriteSignature(width, addr_width)),
            "b": In(MemWriteSignature(width, addr_width)),
            "o": Out(stream.Signature(tagged_write_layout(width, addr_width, 2))),
            "durable": In(DURABLE_WIDTH),
            "durable_tag": In(1),
            "a_durable": Out(DURABLE_WIDTH),
            "b_durable": Out(DURABLE_WIDTH),
        })

    def elaborate(self, platform):
        m = Module()
        a, b, o = self.a, self.b, self.o
        m.d.comb += [
            o.valid.eq(a.valid | b.valid),
            *(getattr(o.payload, f).eq(Mux(a.valid, getattr(a.payload, f), getattr(b.payload, f)))
              for f in ("addr", "data", "be")),
            o.payload.tag.eq(~a.valid),
            a.ready.eq(o.ready),
            b.ready.eq(o.ready & ~a.valid),
            self.a_durable.eq(Mux(self.durable_tag, 0, self.durable)),
            self.b_durable.eq(Mux(self.durable_tag, self.durable, 0)),
        ]
        return m
