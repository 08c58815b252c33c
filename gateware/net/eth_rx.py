from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..demux import PacketDemux
from ..depacketizer import Depacketizer
from ..headers import ETH, ETH_VLAN, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_VLAN
from ..mapmeta import MapMeta
from ..stream import PacketSignature, check_width, first_beat
from .layouts import ETH_META

__all__ = ["EthRx"]

BROADCAST = (1 << 48) - 1


class EthRx(wiring.Component):
    """Ethernet II receive: header removal, address filter and dispatch by EtherType.

    ``i`` carries frames without FCS (the MAC checked and removed it; ``error`` marks a bad one).
    Frames to ``local_mac`` or broadcast with EtherType ARP leave on ``arp``, IPv4 on ``ipv4``,
    both with the Ethernet header in ``meta.eth`` and the payload realigned to lane 0 (padding
    is still there: the IPv4 receiver trims it).

    With ``vlan`` set to a VLAN ID, only frames tagged 802.1Q with that ID are taken (the tag is
    checked and removed); without it, tagged frames are dropped as unknown EtherType.

    Drops (one-cycle strobes): ``runt`` (shorter than the header), ``drop_addr`` (not for us),
    ``drop_ethertype`` (neither ARP nor IPv4, or the wrong VLAN).

    Latency: that of the depacketizer (an output beat leaves with the input beat that completes
    it; see :class:`~rocegen.gateware.depacketizer.Depacketizer`). Backpressure from the selected
    output only; dropped frames are consumed at full rate.
    """

    def __init__(self, width, *, vlan=None):
        check_width(width)
        if vlan is not None and (not isinstance(vlan, int) or not 1 <= vlan <= 4094):
            raise ValueError(f"VLAN ID must be 1..4094, not {vlan!r}")
        self.width = width
        self.vlan = vlan
        super().__init__({
            "local_mac": In(48),
            "i": In(PacketSignature(width)),
            "arp": Out(PacketSignature(width, ETH_META)),
            "ipv4": Out(PacketSignature(width, ETH_META)),
            "runt": Out(1),
            "drop_addr": Out(1),
            "drop_ethertype": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        header = ETH_VLAN if self.vlan is not None else ETH
        dp = m.submodules.depacketizer = Depacketizer(header, W)
        wiring.connect(m, wiring.flipped(self.i), dp.i)
        m.d.comb += self.runt.eq(dp.runt)

        hdr = dp.o.payload.meta.eth
        vlan_ok = 1
        if self.vlan is not None:
            vlan_ok = (hdr.tpid == ETHERTYPE_VLAN) & (hdr.vid == self.vlan)

        dm = m.submodules.demux = PacketDemux(W, dp.meta_out, 2)
        wiring.connect(m, dp.o, dm.i)
        for_us = (hdr.dst == self.local_mac) | (hdr.dst == BROADCAST)
        is_arp = hdr.ethertype == ETHERTYPE_ARP
        is_ip = hdr.ethertype == ETHERTYPE_IPV4
        known = vlan_ok & (is_arp | is_ip)
        m.d.comb += [dm.select.eq(is_ip), dm.drop.eq(~for_us | ~known)]
        first = dm.i.valid & dm.i.ready & first_beat(m, dm.i)
        m.d.comb += [
            self.drop_addr.eq(first & ~for_us),
            self.drop_ethertype.eq(first & for_us & ~known),
        ]
        for k, out in enumerate((self.arp, self.ipv4)):
            mm = MapMeta(W, dp.meta_out, ETH_META, _eth_only)
            m.submodules[f"meta{k}"] = mm
            wiring.connect(m, dm.o[k], mm.i)
            wiring.connect(m, mm.o, wiring.flipped(out))
        return m


def _eth_only(m, src, dst):
    m.d.comb += [dst.eth.dst.eq(src.eth.dst), dst.eth.src.eq(src.eth.src),
                 dst.eth.ethertype.eq(src.eth.ethertype)]
