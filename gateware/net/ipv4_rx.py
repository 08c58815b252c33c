from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..checksum import be_words, ones_complement_sum
from ..demux import PacketDemux
from ..depacketizer import Depacketizer
from ..headers import IP_PROTO_ICMP, IP_PROTO_UDP, IPV4
from ..stream import PacketSignature, check_width, first_beat
from ..trim import Trim
from .layouts import ETH_META, IP_RX_META

__all__ = ["Ipv4Rx"]


class Ipv4Rx(wiring.Component):
    """IPv4 receive: header removal, checks, padding removal and dispatch by protocol.

    A packet leaves on ``icmp`` or ``udp`` (payload realigned to lane 0, the IPv4 header in
    ``meta.ipv4`` beside ``meta.eth``) only if: version 4; IHL 5 (options are not supported);
    header checksum correct; total length at least 20 and at most ``mtu``; not a fragment (MF
    clear, offset 0); destination ``local_ip``. The payload is cut to the total length (Ethernet
    padding removed); a frame shorter than its total length leaves with ``error`` set on its last
    beat and pulses ``truncated``.

    Drops (one-cycle strobes, one per packet): ``runt``, ``drop_header`` (version, IHL < 5,
    checksum, total length), ``drop_options`` (IHL > 5, whatever the checksum: it covers the
    options, which are not kept), ``drop_fragment``, ``drop_addr``,
    ``drop_protocol`` (neither ICMP nor UDP).

    Latency: the depacketizer's (see :class:`~rocegen.gateware.depacketizer.Depacketizer`) plus
    the trimmer's. Backpressure from the selected output; dropped packets are consumed at full
    rate.
    """

    def __init__(self, width, *, mtu=1500):
        check_width(width)
        if not isinstance(mtu, int) or not 576 <= mtu <= 9000:
            raise ValueError(f"IPv4 MTU must be 576..9000 bytes, not {mtu!r}")
        self.width = width
        self.mtu = mtu
        super().__init__({
            "local_ip": In(32),
            "i": In(PacketSignature(width, ETH_META)),
            "icmp": Out(PacketSignature(width, IP_RX_META)),
            "udp": Out(PacketSignature(width, IP_RX_META)),
            "runt": Out(1),
            "truncated": Out(1),
            "drop_header": Out(1),
            "drop_options": Out(1),
            "drop_fragment": Out(1),
            "drop_addr": Out(1),
            "drop_protocol": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        dp = m.submodules.depacketizer = Depacketizer(IPV4, W, ETH_META)
        wiring.connect(m, wiring.flipped(self.i), dp.i)
        m.d.comb += self.runt.eq(dp.runt)

        trim = m.submodules.trim = Trim(W, IP_RX_META)
        wiring.connect(m, dp.o, trim.i)
        ip_in = trim.i.payload.meta.ipv4
        m.d.comb += trim.length.eq(ip_in.total_length - IPV4.length)

        dm = m.submodules.demux = PacketDemux(W, IP_RX_META, 2)
        wiring.connect(m, trim.o, dm.i)
        ip = dm.i.payload.meta.ipv4
        checksum_ok = ones_complement_sum(be_words(IPV4.to_lanes(ip))) == 0xFFFF
        options = ip.ihl != 5
        # with options the checksum also covers them, which are not kept: it cannot be checked,
        # and the packet is dropped as one with options
        header_ok = ((ip.version == 4) & (ip.ihl >= 5) & (checksum_ok | options) &
                     (ip.total_length >= IPV4.length) & (ip.total_length <= self.mtu))
        fragment = ip.mf | (ip.frag_offset != 0)
        addr_ok = ip.dst == self.local_ip
        is_icmp = ip.protocol == IP_PROTO_ICMP
        is_udp = ip.protocol == IP_PROTO_UDP
        m.d.comb += [
            dm.select.eq(is_udp),
            dm.drop.eq(~header_ok | options | fragment | ~addr_ok | ~(is_icmp | is_udp)),
        ]
        # a short packet is counted as truncated only if it is not dropped for another reason
        # (metadata, and so the verdict, is constant over the packet)
        m.d.comb += self.truncated.eq(trim.short & ~dm.drop)
        first = dm.i.valid & dm.i.ready & first_beat(m, dm.i)
        m.d.comb += [
            self.drop_header.eq(first & ~header_ok),
            self.drop_options.eq(first & header_ok & options),
            self.drop_fragment.eq(first & header_ok & ~options & fragment),
            self.drop_addr.eq(first & header_ok & ~options & ~fragment & ~addr_ok),
            self.drop_protocol.eq(first & header_ok & ~options & ~fragment & addr_ok &
                                  ~(is_icmp | is_udp)),
        ]
        wiring.connect(m, dm.o[0], wiring.flipped(self.icmp))
        wiring.connect(m, dm.o[1], wiring.flipped(self.udp))
        return m
