from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.arbiter import PacketArbiter
from rocegen.gateware.lib.demux import PacketDemux
from rocegen.gateware.lib.mapmeta import MapMeta
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import ETH_META, IP_OUT_META
from rocegen.gateware.roce.icrc import IcrcInsert

__all__ = ["IcrcTx"]


class IcrcTx(wiring.Component):
    """Appends the ICRC to the IPv4 packets marked ``meta.icrc`` (RoCEv2), between the IPv4
    transmitter (whose headers the ICRC covers) and the Ethernet transmitter (which pads short
    frames: the pad must come after the ICRC).

    Marked packets go through :class:`~rocegen.gateware.roce.icrc.IcrcInsert` (stream starting at the
    IP header); the others bypass it. The two paths merge round robin, so an unmarked packet may
    overtake a marked one; packets of one kind stay in order. Latency: that of ``IcrcInsert``
    for marked packets, 0 for the others; ``o`` is combinational from the insertion's output
    (its pipeline's last stage while its queue is empty, else the queue) and the input
    (through the merge), for a parent that registers it (the network stack's forward register
    behind its Ethernet arbiter and transmitter). Backpressure from ``o``: ``o.ready`` reaches
    the insertion queue's read side and ``i.ready`` of unmarked packets.
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(PacketSignature(width, IP_OUT_META)),
            "o": Out(PacketSignature(width, ETH_META)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        dm = m.submodules.split = PacketDemux(W, IP_OUT_META, 2)
        wiring.connect(m, wiring.flipped(self.i), dm.i)
        m.d.comb += [dm.select.eq(self.i.payload.meta.icrc), dm.drop.eq(0)]
        ins = m.submodules.insert = IcrcInsert(W, IP_OUT_META, offset=0)
        wiring.connect(m, dm.o[1], ins.i)
        arb = m.submodules.merge = PacketArbiter(W, IP_OUT_META, 2)
        wiring.connect(m, dm.o[0], arb.i[0])
        wiring.connect(m, ins.o, arb.i[1])
        mm = m.submodules.meta = MapMeta(W, IP_OUT_META, ETH_META, _keep_eth)
        wiring.connect(m, arb.o, mm.i)
        wiring.connect(m, mm.o, wiring.flipped(self.o))
        return m


def _keep_eth(m, src, dst):
    m.d.comb += dst.eth.eq(src.eth)
