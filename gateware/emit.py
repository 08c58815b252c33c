"""Verilog output of rocegen designs.

:func:`to_verilog` is Amaranth's Verilog back end plus one repair. Yosys writes a comb process
that assigns a constant to part of a signal as::

    always @*
      sig[7:0] = 8'h05;

Such a block reads no variable, so by the Verilog standard it never runs: simulators (Verilator
warns ALWNEVER) leave those bits at zero while synthesis ties them to the constant. Yosys already
guards its other comb blocks with a read of a per-module dummy register that is initialised at
time zero; the repair gives the constant-only blocks the same guard, so simulation and synthesis
agree. Everything else is left as Yosys wrote it.
"""

import re

from amaranth.back import verilog
from amaranth.hdl import Value, ValueCastable
from amaranth.hdl._ir import PortDirection
from amaranth.lib import wiring

__all__ = ["to_verilog", "repair_constant_blocks", "component_ports"]

_DUMMY_DECL = re.compile(r"^\s*reg (\\\$auto\$verilog_backend\.cc:\d+:dump_module\$\d+)\s*= 0;", re.M)
_CONST_BLOCK = re.compile(
    r"^(?P<ind>[ \t]*)always @\*\n(?P<ind2>[ \t]+)(?P<stmt>[^\n;]+ = \d+'[hdbo][0-9a-fA-F_]+;)\n",
    re.M)


def repair_constant_blocks(text):
    """Guard every constant-only ``always @*`` block so that it runs at time zero."""
    out = []
    # split at module boundaries, keeping each module's text together
    parts = re.split(r"(?m)^(?=module )", text)
    for n, part in enumerate(parts):
        if not _CONST_BLOCK.search(part):
            out.append(part)
            continue
        decl = _DUMMY_DECL.search(part)
        if decl:
            dummy = decl.group(1)
        else:
            dummy = f"\\$rocegen$const_guard${n}"
            header_end = part.index(";\n") + 2            # after the module port list
            part = part[:header_end] + f"  reg {dummy} = 0;\n" + part[header_end:]

        def guard(m, dummy=dummy):
            ind = m.group("ind")
            return (f"{ind}always @* begin\n{ind}  if ({dummy} ) begin end\n"
                    f"{ind}  {m.group('stmt')}\n{ind}end\n")
        out.append(_CONST_BLOCK.sub(guard, part))
    return "".join(out)


def to_verilog(elaboratable, name="top", **kwargs):
    """Verilog text of ``elaboratable`` (see :func:`amaranth.back.verilog.convert`)."""
    kwargs.setdefault("emit_src", False)
    return repair_constant_blocks(verilog.convert(elaboratable, name=name, **kwargs))


def component_ports(component):
    """The ports of ``component`` (a :class:`~amaranth.lib.wiring.Component`) as
    :func:`to_verilog` takes them, named and directed as Amaranth names the ports of a component
    it converts itself: to convert a design elaborated beforehand
    (:meth:`amaranth.hdl.Fragment.get`) into the same Verilog as the component."""
    ports = {}
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        if isinstance(value, Value):
            direction = PortDirection.Input if member.flow == wiring.In else PortDirection.Output
            ports["__".join(map(str, path))] = (value, direction)
    return ports
