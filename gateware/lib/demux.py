from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.arbiter import check_count
from rocegen.gateware.lib.stream import PacketSignature, check_width

__all__ = ["PacketDemux"]


class PacketDemux(wiring.Component):
    """Route each packet of one stream to one of ``n`` outputs, or drop it.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata of the streams (the same on the input and every output).
    n : int
        Number of outputs (at least 1).

    Ports
    -----
    i : ``In(PacketSignature(width, meta))``
        The input.
    o : ``Out(PacketSignature(width, meta)).array(n)``
        The outputs ``o[0]`` .. ``o[n-1]`` (a list member; each element is an ordinary packet
        stream interface for ``wiring.connect``).
    select : ``In(range(n))``
        Output for the packet, driven combinationally by the parent (normally from
        ``i.payload.meta``). A value ``>= n`` (possible when ``n`` is not a power of two) drops
        the packet.
    drop : ``In(1)``
        Discard the packet instead of routing it.
    dropped : ``Out(1)``
        High for one cycle, in the cycle the first beat of a dropped packet is consumed.

    Behaviour
    ---------
    * ``select`` and ``drop`` are sampled with the *first* beat of each packet (in the cycle it
      is offered, and registered when it moves) and the choice holds for the rest of the
      packet, whatever the ports do later.
    * Latency: zero cycles. ``i.payload`` fans out to every ``o[k].payload``; only the selected
      output sees ``o[k].valid``; ``i.ready`` is that output's ``ready`` (combinational), so
      backpressure comes from the selected output only.
    * A dropped packet is consumed at one beat per cycle (``i.ready`` high) and never stalls.
    * Full throughput: back-to-back packets to any mix of outputs move one beat per cycle.
    """

    def __init__(self, width, meta=None, n=2):
        check_width(width)
        check_count(n)
        self.width = width
        self.meta = meta
        self.n = n
        super().__init__({
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)).array(n),
            "select": In(range(n)),
            "drop": In(1),
            "dropped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n
        i = self.i

        in_packet = Signal()               # a packet's first beat has moved, not yet its last
        sel_r = Signal(range(n))
        drop_r = Signal()

        drop_now = self.drop
        if (1 << len(self.select)) > n:
            drop_now = drop_now | (self.select >= n)
        sel = Signal(range(n))
        drp = Signal()
        m.d.comb += [
            sel.eq(Mux(in_packet, sel_r, self.select)),
            drp.eq(Mux(in_packet, drop_r, drop_now)),
        ]

        for k in range(n):
            m.d.comb += self.o[k].payload.eq(i.payload)

        with m.If(drp):
            m.d.comb += i.ready.eq(1)
        with m.Else():
            with m.Switch(sel):
                for k in range(n):
                    with m.Case(k):
                        m.d.comb += [
                            self.o[k].valid.eq(i.valid),
                            i.ready.eq(self.o[k].ready),
                        ]

        with m.If(i.valid & i.ready):
            m.d.sync += [in_packet.eq(~i.payload.last), sel_r.eq(sel), drop_r.eq(drp)]
            with m.If(~in_packet & drp):
                m.d.comb += self.dropped.eq(1)
        return m
