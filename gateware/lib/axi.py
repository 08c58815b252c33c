"""AXI4 memory-mapped ports: one signature shared by every AXI4 master of rocegen, and the flat
``<prefix>_awaddr`` style names top levels use (which cocotbext-axi's ``AxiBus.from_prefix`` and
Vivado's interface inference recognise).

Each channel is an :class:`amaranth.lib.stream.Signature` (``valid``/``ready`` handshake as on
AXI). Fields are those of AXI4 that a memory needs; QoS, region and user signals are not used.
Addresses are byte addresses; ``size`` is log2 of the bytes per beat; ``len`` is beats - 1.
"""

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width

__all__ = ["Axi4Signature", "axi4_members", "connect_axi4", "BURST_INCR"]

#: ``burst`` code of an incrementing burst.
BURST_INCR = 1


def _check(addr_width, data_width, id_width):
    if not isinstance(addr_width, int) or not 12 <= addr_width <= 64:
        raise ValueError(f"AXI4 address width must be 12..64 bits, not {addr_width!r}")
    check_width(data_width, what="AXI4 data width")
    if not isinstance(id_width, int) or not 1 <= id_width <= 16:
        raise ValueError(f"AXI4 ID width must be 1..16 bits, not {id_width!r}")


def _layouts(addr_width, data_width, id_width):
    a = data.StructLayout({"id": id_width, "addr": addr_width, "len": 8, "size": 3, "burst": 2,
                           "lock": 1, "cache": 4, "prot": 3})
    return {
        "aw": a,
        "w": data.StructLayout({"data": data_width, "strb": data_width // 8, "last": 1}),
        "b": data.StructLayout({"id": id_width, "resp": 2}),
        "ar": a,
        "r": data.StructLayout({"id": id_width, "data": data_width, "resp": 2, "last": 1}),
    }


class Axi4Signature(wiring.Signature):
    """An AXI4 port seen from the master: ``aw``, ``w``, ``ar`` out, ``b``, ``r`` in."""

    def __init__(self, addr_width, data_width, id_width=1):
        _check(addr_width, data_width, id_width)
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        lay = _layouts(addr_width, data_width, id_width)
        super().__init__({
            "aw": Out(stream.Signature(lay["aw"])),
            "w": Out(stream.Signature(lay["w"])),
            "b": In(stream.Signature(lay["b"])),
            "ar": Out(stream.Signature(lay["ar"])),
            "r": In(stream.Signature(lay["r"])),
        })


def axi4_members(prefix, addr_width, data_width, id_width=1):
    """Flat signature members of an AXI4 master port named ``<prefix>_<channel><field>``
    (``m_axi_awaddr``, ``m_axi_rready``...)."""
    _check(addr_width, data_width, id_width)
    members = {}
    for ch, lay in _layouts(addr_width, data_width, id_width).items():
        to_slave = ch in ("aw", "w", "ar")
        d_fwd, d_back = (Out, In) if to_slave else (In, Out)
        for name, field in lay.members.items():
            members[f"{prefix}_{ch}{name}"] = d_fwd(field)
        members[f"{prefix}_{ch}valid"] = d_fwd(1)
        members[f"{prefix}_{ch}ready"] = d_back(1)
    return members


def connect_axi4(m, top, prefix, bus):
    """Tie the flat ``<prefix>_*`` members of ``top`` to ``bus``, an AXI4 master port (an
    :class:`Axi4Signature` interface driven by the design)."""
    for ch in ("aw", "w", "b", "ar", "r"):
        chan = getattr(bus, ch)
        to_slave = ch in ("aw", "w", "ar")
        for name in chan.payload.shape().members:
            flat = getattr(top, f"{prefix}_{ch}{name}")
            field = getattr(chan.payload, name)
            m.d.comb += flat.eq(field) if to_slave else field.eq(flat)
        valid, ready = getattr(top, f"{prefix}_{ch}valid"), getattr(top, f"{prefix}_{ch}ready")
        if to_slave:
            m.d.comb += [valid.eq(chan.valid), chan.ready.eq(ready)]
        else:
            m.d.comb += [chan.valid.eq(valid), ready.eq(chan.ready)]
