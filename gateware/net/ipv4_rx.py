from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
from rocegen.gateware.lib.demux import PacketDemux
from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.lib.trim import Trim
from rocegen.gateware.net.layouts import ETH_META, IP_RX_META
from rocegen.wire.headers import IP_PROTO_ICMP, IP_PROTO_UDP, IPV4

__all__ = ["Ipv4Rx"]


def _dropped(x):
    return ~x.header_ok | x.options | x.fragment | ~x.addr_ok | ~(x.is_icmp | x.is_udp)


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

    Latency: the depacketizer's (see :class:`~rocegen.gateware.lib.depacketizer.Depacketizer`) plus
    one cycle: the header checks and the header checksum summed in two halves are made on the
    depacketizer's header and go with the packet through the input stage of a registered
    :class:`~rocegen.gateware.lib.trim.Trim`; on the trimmer's output the halves are compared
    (their one's complement sum is 0xFFFF when they are each other's complement or both 0xFFFF,
    so no adder lies there) and the routing and the strobes follow from that and registers.
    ``i.ready`` is a register (the trimmer's stage). ``truncated`` pulses when the short
    packet's last beat leaves the trimmer. Backpressure from the selected output; dropped
    packets are consumed at full rate.
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
        # (at 512 bits an Ethernet payload of up to 64 bytes, an ACK's, is one beat: it leaves in
        # its cycle)
        dp = m.submodules.depacketizer = Depacketizer(IPV4, W, ETH_META, pass_short=W >= 512)
        wiring.connect(m, wiring.flipped(self.i), dp.i)
        m.d.comb += self.runt.eq(dp.runt)

        # the header checks and the checksum summed in two halves are made on the
        # depacketizer's header and go with the packet through the trimmer's input stage; the
        # two halves are compared on the trimmer's output (no adder there) and the dispatch
        # decides from that
        pre = data.StructLayout({"header_ok": 1, "options": 1, "fragment": 1, "addr_ok": 1,
                                 "is_icmp": 1, "is_udp": 1, "drop": 1, "sum0": 16, "sum1": 16})
        tmeta = data.StructLayout({**IP_RX_META.members, "pre": pre})
        trim = m.submodules.trim = Trim(W, tmeta, registered=True, bias=IPV4.length)
        dpp, tip = dp.o.payload, trim.i.payload
        ip = dpp.meta.ipv4
        words = be_words(IPV4.to_lanes(ip))
        pv = tip.meta.pre
        m.d.comb += [
            trim.i.valid.eq(dp.o.valid), dp.o.ready.eq(trim.i.ready),
            tip.data.eq(dpp.data), tip.keep.eq(dpp.keep), tip.last.eq(dpp.last),
            tip.error.eq(dpp.error), tip.meta.eth.eq(dpp.meta.eth), tip.meta.ipv4.eq(ip),
            trim.length.eq(ip.total_length),            # (the header's 20 bytes: the bias)
            pv.options.eq(ip.ihl != 5),
            pv.header_ok.eq((ip.version == 4) & (ip.ihl >= 5) &
                            (ip.total_length >= IPV4.length) & (ip.total_length <= self.mtu)),
            pv.fragment.eq(ip.mf | (ip.frag_offset != 0)),
            pv.addr_ok.eq(ip.dst == self.local_ip),
            pv.is_icmp.eq(ip.protocol == IP_PROTO_ICMP),
            pv.is_udp.eq(ip.protocol == IP_PROTO_UDP),
            pv.drop.eq(_dropped(pv)),                   # for every reason but the checksum
            pv.sum0.eq(ones_complement_sum(words[:5])),
            pv.sum1.eq(ones_complement_sum(words[5:])),
        ]

        to = trim.o.payload
        r = to.meta.pre
        # the one's complement sum of the halves is 0xFFFF exactly when they are each other's
        # complement or both 0xFFFF (0xFFFF + 0xFFFF = 0x1FFFE folds to 0xFFFF): compares, no
        # adder. With options the checksum also covers them, which are not kept: it cannot be
        # checked, and the packet is dropped as one with options.
        checksum_ok = (r.sum0 == ~r.sum1) | ((r.sum0 & r.sum1) == 0xFFFF)
        header_ok = Signal()
        drop = Signal()
        m.d.comb += [
            header_ok.eq(r.header_ok & (checksum_ok | r.options)),
            drop.eq(r.drop | ~(checksum_ok | r.options)),
        ]
        dm = m.submodules.demux = PacketDemux(W, IP_RX_META, 2)
        di = dm.i.payload
        m.d.comb += [
            dm.i.valid.eq(trim.o.valid), trim.o.ready.eq(dm.i.ready),
            di.data.eq(to.data), di.keep.eq(to.keep), di.last.eq(to.last),
            di.error.eq(to.error), di.meta.eth.eq(to.meta.eth), di.meta.ipv4.eq(to.meta.ipv4),
            dm.select.eq(r.is_udp), dm.drop.eq(drop),
        ]
        options, fragment, addr_ok, is_icmp, is_udp = (r.options, r.fragment, r.addr_ok,
                                                       r.is_icmp, r.is_udp)
        # (a dropped packet's first beat is always taken: the drop strobes need no ``ready``)
        first = dm.i.valid & first_beat(m, dm.i)
        # a short packet is counted as truncated only if it is not dropped for another reason
        # (metadata, and so the verdict, is constant over the packet; ``short`` pulses as the
        # last beat moves)
        m.d.comb += self.truncated.eq(trim.short & ~drop)
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
