"""Flat top-level ports for record streams (work requests, completions, QP control...).

A record stream (an :class:`amaranth.lib.stream.Signature` of a ``StructLayout``) appears at a
top level as ``<prefix>_data`` (the record's bits, field offsets as in the layout, first field in
the low bits), ``<prefix>_valid`` and ``<prefix>_ready``, so that Verilog instantiating the core
and cocotb testbenches see plain vectors. :func:`pack` / :func:`unpack` convert between a ``dict``
and those bits on the Python side.
"""

from amaranth.hdl import Shape, Value
from amaranth.lib import data
from amaranth.lib.wiring import In, Out

__all__ = ["record_members", "connect_record", "pack", "unpack"]


def record_members(prefix, layout, *, sink):
    """Members ``<prefix>_data/_valid/_ready``; ``sink=True`` for a stream into the design."""
    d_in, d_out = (In, Out) if sink else (Out, In)
    size = Shape.cast(layout).width         # (a layout, or a plain shape such as a QP index)
    return {f"{prefix}_data": d_in(size), f"{prefix}_valid": d_in(1), f"{prefix}_ready": d_out(1)}


def connect_record(m, top, prefix, stream, *, sink):
    """Tie the ``<prefix>_*`` members of ``top`` to ``stream``."""
    d, v, r = (getattr(top, f"{prefix}_{n}") for n in ("data", "valid", "ready"))
    if sink:
        m.d.comb += [Value.cast(stream.payload).eq(d), stream.valid.eq(v), r.eq(stream.ready)]
    else:
        m.d.comb += [d.eq(Value.cast(stream.payload)), v.eq(stream.valid), stream.ready.eq(r)]


def pack(layout, fields):
    """The bits of a record of ``layout`` with ``fields`` (a dict, nested for sub-layouts;
    enumeration fields take members or integers)."""
    return data.Layout.cast(layout).const(fields).as_value().value


def unpack(layout, raw):
    """The fields of the record of ``layout`` whose bits are ``raw``, as a nested dict of
    integers."""
    def walk(value):
        if isinstance(value, data.Const):
            return {name: walk(value[name]) for name in value.shape().members}
        return int(getattr(value, "value", value))
    return walk(data.Layout.cast(layout).from_bits(raw))
