from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import RegisterSlice
from rocegen.gateware.lib.demux import PacketDemux
from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.mapmeta import MapMeta
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.net.layouts import ETH_META
from rocegen.wire.headers import ETH, ETH_VLAN, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_VLAN

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
    it; see :class:`~rocegen.gateware.lib.depacketizer.Depacketizer`) plus one cycle: the address and
    EtherType checks go with the frame through a
    :class:`~rocegen.gateware.lib.buffer.RegisterSlice`, so the dispatch depends on registers only
    and the outputs' ``ready`` does not reach back past it.
    Backpressure from the selected output only; dropped frames are consumed at full rate.
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
        # (at 512 bits a frame of up to 64 bytes, an ACK, is one beat: it leaves in its cycle)
        dp = m.submodules.depacketizer = Depacketizer(header, W, pass_short=W >= 512)
        wiring.connect(m, wiring.flipped(self.i), dp.i)
        m.d.comb += self.runt.eq(dp.runt)

        hdr = dp.o.payload.meta.eth
        vlan_ok = 1
        if self.vlan is not None:
            vlan_ok = (hdr.tpid == ETHERTYPE_VLAN) & (hdr.vid == self.vlan)

        # the checks travel with the packet through a register slice, so the dispatch's
        # routing and ready depend on registers only
        verdict = data.StructLayout({"for_us": 1, "known": 1, "is_ip": 1})
        inner = data.StructLayout({**dp.meta_out.members, "verdict": verdict})
        fr = m.submodules.register = RegisterSlice(W, inner)
        is_arp = hdr.ethertype == ETHERTYPE_ARP
        is_ip = hdr.ethertype == ETHERTYPE_IPV4
        src, fi = dp.o.payload, fr.i.payload
        m.d.comb += [
            fr.i.valid.eq(dp.o.valid), dp.o.ready.eq(fr.i.ready),
            fi.data.eq(src.data), fi.keep.eq(src.keep), fi.last.eq(src.last),
            fi.error.eq(src.error), fi.meta.eth.eq(src.meta.eth),
            fi.meta.verdict.for_us.eq((hdr.dst == self.local_mac) | (hdr.dst == BROADCAST)),
            fi.meta.verdict.known.eq(vlan_ok & (is_arp | is_ip)),
            fi.meta.verdict.is_ip.eq(is_ip),
        ]
        dm = m.submodules.demux = PacketDemux(W, dp.meta_out, 2)
        fo = fr.o.payload
        m.d.comb += [
            dm.i.valid.eq(fr.o.valid), fr.o.ready.eq(dm.i.ready),
            dm.i.payload.data.eq(fo.data), dm.i.payload.keep.eq(fo.keep),
            dm.i.payload.last.eq(fo.last), dm.i.payload.error.eq(fo.error),
            dm.i.payload.meta.eth.eq(fo.meta.eth),
        ]
        v = fo.meta.verdict
        for_us, known = v.for_us, v.known
        m.d.comb += [dm.select.eq(v.is_ip), dm.drop.eq(~for_us | ~known)]
        # (a dropped packet's first beat is always taken: the strobes need no ``ready``)
        first = dm.i.valid & first_beat(m, dm.i)
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
