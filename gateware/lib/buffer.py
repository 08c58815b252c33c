"""Register slices: break the combinational paths of a stream at full throughput."""

from amaranth.hdl import Module, Mux, Shape, ShapeCastable, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width, packet_layout

__all__ = ["StreamRegisterSlice", "RegisterSlice", "stream_stage_members"]


def stream_stage_members(shape):
    """The ports of a one-stream pipeline stage (``i`` in, ``o`` out, both of ``shape``), after
    checking that ``shape`` is shape-castable."""
    if not isinstance(shape, ShapeCastable):
        try:
            Shape.cast(shape)
        except TypeError as exc:
            raise TypeError(f"shape must be a shape-castable object, not {shape!r}") from exc
    return {"i": In(stream.Signature(shape)), "o": Out(stream.Signature(shape))}


class StreamRegisterSlice(wiring.Component):
    """Two-entry skid buffer between two :mod:`amaranth.lib.stream` streams of any payload shape.

    Parameters
    ----------
    shape : shape-castable
        Payload shape of both streams (a plain shape or a :mod:`amaranth.lib.data` layout).

    Behaviour
    ---------
    * Every output is a register: ``o.valid`` and ``o.payload`` are flip-flops and ``i.ready`` is
      the "skid entry empty" flip-flop. There is no combinational path from ``o.ready`` to
      ``i.ready`` nor from ``i`` to ``o``.
    * Latency: one cycle (a beat accepted on ``i`` in cycle t is offered on ``o`` in cycle t+1
      when the slice was empty or its output beat left in cycle t).
    * Throughput: one beat per cycle sustained while ``o.ready`` stays high. When ``o`` is stalled
      the beat that was already in flight (``i.ready`` was high) lands in the skid entry and
      ``i.ready`` drops in the next cycle; the skid entry drains first when ``o`` resumes.
    * Payloads pass unchanged and in order (lanes untouched, so byte order is kept); nothing is
      dropped or duplicated.

    With ``bypass`` (keyword, default ``False``) the slice breaks only the ``ready`` path: a beat
    that finds it empty is offered on ``o`` in the cycle it comes (latency 0; ``o.valid`` and
    ``o.payload`` are then the input's, through one multiplexer), and is stored only if ``o``
    does not take it. ``i.ready`` is still a flip-flop (the second entry empty), so nothing
    from ``o.ready`` reaches ``i.ready``; the two entries keep one beat per cycle sustained
    after a stall, and the stored beats leave before the input's. For a consumer whose own
    input is a register (an event register, an arbiter's choice registered), where a slice in
    front would only add a cycle.
    """

    def __init__(self, shape, *, bypass=False):
        if not isinstance(bypass, bool):
            raise TypeError(f"bypass must be a bool, not {bypass!r}")
        self.shape = shape
        self.bypass = bypass
        super().__init__(stream_stage_members(shape))

    def elaborate(self, platform):
        m = Module()
        if self.bypass:
            return self._elaborate_bypass(m)
        i, o = self.i, self.o

        skid = Signal(self.shape)
        skid_empty = Signal(init=1)
        m.d.comb += i.ready.eq(skid_empty)
        # the beat next in line: the skid entry's, else the input's. Both registers load it (the
        # skid entry only while empty, when it is the input's), so that one multiplexer per bit
        # feeds both, with whatever logic drives ``i.payload`` merged into it
        nxt = Signal(self.shape)
        m.d.comb += nxt.eq(Mux(skid_empty, Value.cast(i.payload), Value.cast(skid)))

        with m.If(~o.valid | o.ready):
            # the output register is free (empty, or its beat leaves in this cycle)
            m.d.sync += [o.payload.eq(nxt), o.valid.eq(~skid_empty | i.valid),
                         skid_empty.eq(1)]
        with m.Elif(i.valid & skid_empty):
            # output stalled: the beat that was in flight goes to the skid entry
            m.d.sync += [skid.eq(nxt), skid_empty.eq(0)]
        return m

    def _elaborate_bypass(self, m):
        """Two entries, ``head`` (offered on ``o``) and ``behind``; an empty head offers the
        input itself."""
        i, o = self.i, self.o
        head, behind = Signal(self.shape), Signal(self.shape)
        head_valid, behind_valid = Signal(), Signal()
        m.d.comb += [
            i.ready.eq(~behind_valid),
            o.valid.eq(head_valid | i.valid),
            o.payload.eq(Mux(head_valid, Value.cast(head), Value.cast(i.payload))),
        ]
        taken = i.valid & ~behind_valid
        with m.If(~head_valid):
            # (the input is offered; it stays if o does not take it)
            with m.If(taken & ~o.ready):
                m.d.sync += [head.eq(i.payload), head_valid.eq(1)]
        with m.Elif(o.ready):
            # the head leaves: the beat behind it, else the input's, is next
            m.d.sync += [head.eq(Mux(behind_valid, Value.cast(behind), Value.cast(i.payload))),
                         head_valid.eq(behind_valid | taken), behind_valid.eq(0)]
        with m.Elif(taken):
            m.d.sync += [behind.eq(i.payload), behind_valid.eq(1)]
        return m


class RegisterSlice(StreamRegisterSlice):
    """Register slice of a packet stream ``width`` bits wide with ``meta`` sideband.

    A :class:`StreamRegisterSlice` whose payload is
    :func:`~rocegen.gateware.lib.stream.packet_layout`: ``i`` and ``o`` are
    :func:`~rocegen.gateware.lib.stream.PacketSignature` streams. All beats (data, keep, last, error,
    meta) pass unchanged; latency one cycle, one beat per cycle sustained, every output registered
    (with ``bypass``, as :class:`StreamRegisterSlice`'s: latency 0, ``i.ready`` registered).
    """

    def __init__(self, width, meta=None, *, bypass=False):
        check_width(width)
        self.width = width
        self.meta = meta
        super().__init__(packet_layout(width, meta), bypass=bypass)
