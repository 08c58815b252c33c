"""AXI-Stream port naming for top levels.

Amaranth names the ports of a component after its signature members, so a top level that wants
``s_axis_tdata`` / ``m_axis_tready`` style names (which cocotbext-axi's ``AxiStreamBus`` and
Vivado's interface inference recognise) declares them as flat members with :func:`axis_members`
and ties them to an internal packet stream with :func:`connect_axis`.

``tuser`` (1 bit) carries the packet stream's ``error`` flag, as the Xilinx CMAC does.
"""

from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width

__all__ = ["axis_members", "connect_axis"]


def axis_members(prefix, width, *, sink):
    """Signature members of an AXI-Stream port named ``<prefix>_t*``. ``sink=True`` for a port
    that receives data (``s_axis``), ``False`` for one that sends it (``m_axis``)."""
    check_width(width)
    d_in, d_out = (In, Out) if sink else (Out, In)
    return {
        f"{prefix}_tdata": d_in(width),
        f"{prefix}_tkeep": d_in(width // 8),
        f"{prefix}_tlast": d_in(1),
        f"{prefix}_tuser": d_in(1),
        f"{prefix}_tvalid": d_in(1),
        f"{prefix}_tready": d_out(1),
    }


def connect_axis(m, top, prefix, stream, *, sink):
    """Tie the ``<prefix>_t*`` members of ``top`` to the packet stream ``stream``.

    ``sink=True``: the AXI-Stream port drives ``stream`` (an input to the design);
    ``sink=False``: ``stream`` drives the AXI-Stream port."""
    p = lambda name: getattr(top, f"{prefix}_{name}")  # noqa: E731
    if sink:
        m.d.comb += [
            stream.payload.data.eq(p("tdata")),
            stream.payload.keep.eq(p("tkeep")),
            stream.payload.last.eq(p("tlast")),
            stream.payload.error.eq(p("tuser")),
            stream.valid.eq(p("tvalid")),
            p("tready").eq(stream.ready),
        ]
    else:
        m.d.comb += [
            p("tdata").eq(stream.payload.data),
            p("tkeep").eq(stream.payload.keep),
            p("tlast").eq(stream.payload.last),
            p("tuser").eq(stream.payload.error),
            p("tvalid").eq(stream.valid),
            stream.ready.eq(p("tready")),
        ]
