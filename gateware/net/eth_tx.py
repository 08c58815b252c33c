from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.mapmeta import MapMeta
from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.gateware.lib.pad import Pad
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import ETH_META
from rocegen.wire.headers import ETH, ETH_VLAN, ETHERTYPE_VLAN

__all__ = ["EthTx"]

MIN_FRAME = 60   # bytes before the FCS


class EthTx(wiring.Component):
    """Ethernet II transmit: header insertion from ``meta.eth`` and padding to 60 bytes.

    ``o`` carries frames without FCS (the MAC appends it). ``meta.eth.src`` is sent as given (the
    stack fills in its own address). With ``vlan`` set, an 802.1Q tag with that VLAN ID and
    the priority of input ``pcp`` (3 bits, ``pcp`` after reset when not driven; a change takes
    effect with the next frame's header) is inserted.

    Latency 0 (combinational through the packetizer and padder). Backpressure: ``i.ready``
    follows ``o.ready``, low while header or padding beats leave. Throughput: one output beat
    per cycle.
    """

    def __init__(self, width, *, vlan=None, pcp=0):
        check_width(width)
        if vlan is not None and (not isinstance(vlan, int) or not 1 <= vlan <= 4094):
            raise ValueError(f"VLAN ID must be 1..4094, not {vlan!r}")
        if not isinstance(pcp, int) or not 0 <= pcp <= 7:
            raise ValueError(f"VLAN priority (PCP) must be 0..7, not {pcp!r}")
        self.width = width
        self.vlan = vlan
        super().__init__({
            "i": In(PacketSignature(width, ETH_META)),
            "o": Out(PacketSignature(width)),
            "pcp": In(3, init=pcp),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        if self.vlan is None:
            pk = m.submodules.packetizer = Packetizer(ETH, W, ETH_META)
            wiring.connect(m, wiring.flipped(self.i), pk.i)
        else:
            tagged = data.StructLayout({"eth": ETH_VLAN.layout})

            def add_tag(m_, src, dst):
                m_.d.comb += [
                    dst.eth.dst.eq(src.eth.dst), dst.eth.src.eq(src.eth.src),
                    dst.eth.tpid.eq(ETHERTYPE_VLAN), dst.eth.pcp.eq(self.pcp),
                    dst.eth.dei.eq(0), dst.eth.vid.eq(self.vlan),
                    dst.eth.ethertype.eq(src.eth.ethertype),
                ]
            tag = m.submodules.tag = MapMeta(W, ETH_META, tagged, add_tag)
            pk = m.submodules.packetizer = Packetizer(ETH_VLAN, W, tagged)
            wiring.connect(m, wiring.flipped(self.i), tag.i)
            wiring.connect(m, tag.o, pk.i)
        pad = m.submodules.pad = Pad(W, MIN_FRAME)
        wiring.connect(m, pk.o, pad.i)
        wiring.connect(m, pad.o, wiring.flipped(self.o))
        return m
