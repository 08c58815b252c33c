"""Several sources of word writes into one tagged AXI4 writer, with the durable words told
apart."""

from functools import reduce
from operator import and_, or_

from amaranth.hdl import Cat, Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature, check_addr_width
from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.frontend.stream_post import DURABLE_WIDTH
from rocegen.gateware.roce.memory.axi_writer import tagged_write_layout

__all__ = ["MemWriteMerge", "SOURCE_NAMES"]

#: The names of the source ports, in priority order (``sources`` of them are used).
SOURCE_NAMES = "abcdefghijklmnop"


class MemWriteMerge(wiring.Component):
    """The word writes of several sources merged into the input of an
    :class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter` built with ``tags=sources``, and the
    writer's count of durable words split back by source.

    Parameters
    ----------
    width : int
        Data width W (64..512).
    addr_width : int
        Word-address bits (1..32), the writer's ``mem_addr_width``.
    sources : int
        Write sources (2..16; default 2), named ``a``, ``b``, ``c``, ... in priority order.

    Ports
    -----
    a, b, ... : In(MemWriteSignature(width, addr_width))
        The sources' word writes (``sources`` ports, ``a`` first); an earlier one has priority.
    o : Out(stream.Signature(tagged_write_layout(width, addr_width, sources)))
        The writes, each tagged with its source (0: ``a``, 1: ``b``, ...), to the writer's ``i``.
    durable, durable_tag : In(DURABLE_WIDTH), In(range(sources))
        The writer's ``durable`` and ``durable_tag``: words acknowledged by the memory in this
        cycle, all of one source.
    a_durable, b_durable, ... : Out(DURABLE_WIDTH)
        Words of ``a`` / of ``b`` / ... acknowledged in this cycle, in the order each source's
        words were taken (the writer acknowledges every word in the order it took it).

    Behaviour: combinational, no state. ``o`` offers the write of the first source (in the
    order ``a``, ``b``, ...) whose ``valid`` is high; a source's ``ready`` is ``o.ready`` in a
    cycle no earlier source's ``valid`` is high (a steady stream on ``a`` holds the others
    back). One write per cycle, as the writer takes them; latency 0. Byte order and addresses
    pass unchanged.
    """

    def __init__(self, width, addr_width, *, sources=2):
        check_width(width)
        check_addr_width(addr_width)
        if not isinstance(sources, int) or isinstance(sources, bool):
            raise TypeError(f"sources must be an integer, not {sources!r}")
        if not 2 <= sources <= len(SOURCE_NAMES):
            raise ValueError(f"sources must be from 2 to {len(SOURCE_NAMES)}, not {sources}")
        self.width, self.addr_width, self.sources = width, addr_width, sources
        #: The source port names, in priority order.
        self.names = tuple(SOURCE_NAMES[:sources])
        super().__init__({
            **{n: In(MemWriteSignature(width, addr_width)) for n in self.names},
            "o": Out(stream.Signature(tagged_write_layout(width, addr_width, sources))),
            "durable": In(DURABLE_WIDTH),
            "durable_tag": In(range(sources)),
            **{f"{n}_durable": Out(DURABLE_WIDTH) for n in self.names},
        })

    def source(self, k):
        """The ``k``-th source port (0: ``a``)."""
        return getattr(self, self.names[k])

    def source_durable(self, k):
        """The ``k``-th source's durable count (0: ``a_durable``)."""
        return getattr(self, f"{self.names[k]}_durable")

    def elaborate(self, platform):
        m = Module()
        n, o = self.sources, self.o
        src = [self.source(k) for k in range(n)]
        # first[k]: no source before k offers a write (k >= 1)
        first = [None] + [reduce(and_, (~s.valid for s in src[:k])) for k in range(1, n)]
        for f in ("addr", "data", "be"):
            sel = getattr(src[-1].payload, f)
            for s in reversed(src[:-1]):
                sel = Mux(s.valid, getattr(s.payload, f), sel)
            m.d.comb += getattr(o.payload, f).eq(sel)
        # tag bit j: the chosen source's index has bit j set
        chosen = [s.valid & first[k] if 0 < k < n - 1 else s.valid if k == 0 else first[k]
                  for k, s in enumerate(src)]
        tag_bits = [reduce(or_, (chosen[k] for k in range(n) if k >> j & 1))
                    for j in range((n - 1).bit_length())]
        m.d.comb += [
            o.valid.eq(reduce(or_, (s.valid for s in src))),
            o.payload.tag.eq(tag_bits[0] if n == 2 else Cat(*tag_bits)),
            src[0].ready.eq(o.ready),
            *(s.ready.eq(o.ready & first[k]) for k, s in enumerate(src) if k),
        ]
        if n == 2:
            m.d.comb += [self.a_durable.eq(Mux(self.durable_tag, 0, self.durable)),
                         self.b_durable.eq(Mux(self.durable_tag, self.durable, 0))]
        else:
            m.d.comb += [self.source_durable(k).eq(Mux(self.durable_tag == k, self.durable, 0))
                         for k in range(n)]
        return m
