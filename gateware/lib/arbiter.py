from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width

__all__ = ["PacketArbiter", "check_count"]


def check_count(n, *, what="n"):
    """Validate a number of ports, raising a precise error."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"{what} must be an integer number of ports, not {n!r}")
    if n < 1:
        raise ValueError(f"{what} must be at least 1, not {n}")
    return n


class PacketArbiter(wiring.Component):
    """Round-robin merge of ``n`` packet streams into one, a whole packet at a time.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata of all the streams (the same on every input and on the output).
    n : int
        Number of inputs (at least 1; with 1 the arbiter is a plain pass-through).

    Ports
    -----
    i : ``In(PacketSignature(width, meta)).array(n)``
        The inputs, ``i[0]`` .. ``i[n-1]``: a list member, so each element is an ordinary packet
        stream interface and composes with ``wiring.connect(m, source.o, arb.i[k])``.
    o : ``Out(PacketSignature(width, meta))``
        The merged stream.

    Behaviour
    ---------
    * Packet granularity: once the first beat of a packet is offered on ``o``, the arbiter stays
      with that input until the packet's last beat has moved. Packets are never interleaved and
      leave unchanged (data, keep, error and meta are those of the input).
    * Round robin: the grant is a register naming one input. When the last beat of a packet
      moves, it passes to the first input with ``valid`` high in the order ``g+1, .., n-1, 0,
      .., g`` (``g`` the input that sent the packet), so it stays with ``g`` when no other input
      has a packet waiting. When the granted input offers nothing between packets while another
      does, the grant moves to the first such input in that order in the next cycle. With every
      input always holding a packet, they take one packet each in turn; an input waiting for a
      grant sees at most ``n - 1`` packets of other inputs start before its own.
    * Latency: zero cycles. ``o.valid`` and ``o.payload`` are a multiplexer of the inputs, and
      ``i[k].ready`` is ``o.ready`` for the granted input (0 for the others). The grant is a
      register, so no ``ready`` depends on any ``valid`` (no combinational round trip through
      the arbiter). Packets of the granted input follow each other with no idle cycle, as do
      packets of inputs that take turns while busy (the next grant is decided with the last
      beat); a packet offered on an input other than the granted one while the granted one is
      idle waits one cycle for the grant. Put a register slice behind ``o`` where the path
      must be broken.
    * Stability: the grant changes only after a packet's last beat has moved or while the
      granted input offers nothing, so an offer is never withdrawn or changed while ``o.ready``
      is low (AXI-Stream rule), provided the inputs keep to that rule too.
    """

    def __init__(self, width, meta=None, n=2):
        check_width(width)
        check_count(n)
        self.width = width
        self.meta = meta
        self.n = n
        super().__init__({
            "i": In(PacketSignature(width, meta)).array(n),
            "o": Out(PacketSignature(width, meta)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.n
        o = self.o

        grant = Signal(range(n))            # input served now (register)
        in_packet = Signal()                # a packet's first beat has moved, not yet its last

        req = Signal(n)
        req_hi = Signal(n)      # signals, so that indexing them bit by bit stays linear in size
        m.d.comb += [req.eq(Cat(*(self.i[k].valid for k in range(n)))),
                     req_hi.eq(Cat(*(self.i[k].valid & (grant < k) for k in range(n))))]
        pick = Signal(range(n))
        # lowest requesting input above grant, else the lowest requesting input at all, else
        # grant itself (later assignments win, so walk from the highest index down)
        m.d.comb += pick.eq(grant)
        for k in reversed(range(n)):
            with m.If(req[k]):
                m.d.comb += pick.eq(k)
        for k in reversed(range(n)):
            with m.If(req_hi[k]):
                m.d.comb += pick.eq(k)

        with m.Switch(grant):
            for k in range(n):
                with m.Case(k):
                    m.d.comb += [
                        o.valid.eq(self.i[k].valid),
                        o.payload.eq(self.i[k].payload),
                        self.i[k].ready.eq(o.ready),
                    ]

        with m.If(o.valid & o.ready):
            m.d.sync += in_packet.eq(~o.payload.last)
            with m.If(o.payload.last):
                m.d.sync += grant.eq(pick)
        with m.Elif(~o.valid & ~in_packet):
            m.d.sync += grant.eq(pick)
        return m
