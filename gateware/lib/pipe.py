"""Forward registers: break the forward (valid and payload) paths of a stream for the cost of
flip-flops alone."""

from amaranth.hdl import Module
from amaranth.lib import wiring

from rocegen.gateware.lib.buffer import stream_stage_members
from rocegen.gateware.lib.stream import check_width, packet_layout

__all__ = ["StreamForwardRegister", "ForwardRegister"]


class StreamForwardRegister(wiring.Component):
    """One register stage between two :mod:`amaranth.lib.stream` streams of any payload shape.

    Parameters
    ----------
    shape : shape-castable
        Payload shape of both streams (a plain shape or a :mod:`amaranth.lib.data` layout).

    Behaviour
    ---------
    * ``o.valid`` and ``o.payload`` are flip-flops (no combinational path from ``i`` to ``o``);
      the payload register has an enable and no multiplexer in front of it, so the stage costs
      flip-flops and no LUT per bit.
    * ``i.ready`` is ``o.ready | ~o.valid``: combinational from ``o.ready`` (one LUT level added
      to the ready path). Use :class:`~rocegen.gateware.lib.buffer.StreamRegisterSlice` where the
      ready path must be broken too.
    * Latency: one cycle. Throughput: one beat per cycle sustained while ``o.ready`` stays high.
    * Payloads pass unchanged and in order (lanes untouched, so byte order is kept); nothing is
      dropped or duplicated.
    """

    def __init__(self, shape):
        self.shape = shape
        super().__init__(stream_stage_members(shape))

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        m.d.comb += i.ready.eq(o.ready | ~o.valid)
        with m.If(i.ready):
            m.d.sync += [o.valid.eq(i.valid), o.payload.eq(i.payload)]
        return m


class ForwardRegister(StreamForwardRegister):
    """Forward register of a packet stream ``width`` bits wide with ``meta`` sideband.

    A :class:`StreamForwardRegister` whose payload is
    :func:`~rocegen.gateware.lib.stream.packet_layout`: ``i`` and ``o`` are
    :func:`~rocegen.gateware.lib.stream.PacketSignature` streams. All beats (data, keep, last, error,
    meta) pass unchanged; latency one cycle, one beat per cycle sustained, ``o`` registered,
    ``i.ready`` combinational from ``o.ready``.
    """

    def __init__(self, width, meta=None):
        check_width(width)
        self.width = width
        self.meta = meta
        super().__init__(packet_layout(width, meta))
