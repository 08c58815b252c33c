"""The ARP transmitter: replies and requests as ARP payloads for the Ethernet transmitter."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import ARP_REPLY, ETH_META
from rocegen.wire.headers import ARP, ETH, ETHERTYPE_ARP, ETHERTYPE_IPV4

__all__ = ["ArpTransmitter", "BROADCAST", "OPER_REQUEST", "OPER_REPLY"]

BROADCAST = (1 << 48) - 1
OPER_REQUEST, OPER_REPLY = 1, 2


class ArpTransmitter(wiring.Component):
    """Sends ARP replies and requests for IPv4 over Ethernet from ``local_mac`` / ``local_ip``.

    Parameters
    ----------
    width : int
        Data width W of ``o`` (64..512).

    Ports
    -----
    reply : In(stream.Signature(ARP_REPLY))
        A reply to send to ``mac`` / ``ip`` (Ethernet destination ``mac``).
    request : In(stream.Signature(32))
        A request for the MAC of this IPv4 address (Ethernet broadcast, target MAC 0).
    local_mac, local_ip : In(48), In(32)
        Our addresses (sender fields and Ethernet source).
    o : Out(PacketSignature(width, ETH_META))
        28-byte ARP payloads (htype 1, ptype 0x0800, hlen 6, plen 4) with ``meta.eth`` set;
        the Ethernet transmitter pads them.

    Behaviour: a reply goes before a request offered in the same cycle; each is taken when the
    packetizer takes its header (a :class:`~rocegen.gateware.lib.packetizer.Packetizer` of the ARP
    header with an empty payload), so ``o`` may stall for any time.
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({
            "reply": In(stream.Signature(ARP_REPLY)),
            "request": In(stream.Signature(32)),
            "local_mac": In(48),
            "local_ip": In(32),
            "o": Out(PacketSignature(width, ETH_META)),
        })

    def elaborate(self, platform):
        m = Module()
        tx_meta = data.StructLayout({"eth": ETH.layout, "arp": ARP.layout})
        tx = m.submodules.tx = Packetizer(ARP, self.width, tx_meta)
        wiring.connect(m, tx.o, wiring.flipped(self.o))
        pm = tx.i.payload.meta
        m.d.comb += [
            tx.i.payload.keep.eq(0),           # empty payload: the packet is the ARP header
            tx.i.payload.last.eq(1),
            pm.eth.src.eq(self.local_mac),
            pm.eth.ethertype.eq(ETHERTYPE_ARP),
            pm.arp.htype.eq(1), pm.arp.ptype.eq(ETHERTYPE_IPV4),
            pm.arp.hlen.eq(6), pm.arp.plen.eq(4),
            pm.arp.sha.eq(self.local_mac), pm.arp.spa.eq(self.local_ip),
        ]
        rep, req = self.reply, self.request
        with m.If(rep.valid):
            m.d.comb += [
                tx.i.valid.eq(1), rep.ready.eq(tx.i.ready),
                pm.eth.dst.eq(rep.payload.mac),
                pm.arp.oper.eq(OPER_REPLY), pm.arp.tha.eq(rep.payload.mac),
                pm.arp.tpa.eq(rep.payload.ip),
            ]
        with m.Elif(req.valid):
            m.d.comb += [
                tx.i.valid.eq(1), req.ready.eq(tx.i.ready),
                pm.eth.dst.eq(BROADCAST),
                pm.arp.oper.eq(OPER_REQUEST), pm.arp.tha.eq(0), pm.arp.tpa.eq(req.payload),
            ]
        return m
