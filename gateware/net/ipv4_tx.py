from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import RegisterSlice
from rocegen.gateware.lib.checksum import ones_complement_sum
from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import ARP_LOOKUP, IP_OUT_META, IP_TX
from rocegen.wire.headers import ETH, ETHERTYPE_IPV4, IPV4

__all__ = ["Ipv4Tx"]

IP_TX_META = data.StructLayout({"ip": IP_TX})


class Ipv4Tx(wiring.Component):
    """IPv4 transmit: next-hop MAC through ARP, header generation with checksum, insertion.

    ``i`` carries IP payloads with ``meta.ip`` (:data:`~rocegen.gateware.net.layouts.IP_TX`);
    ``o`` carries the IP packets with ``meta.eth`` ready for the Ethernet transmitter and
    ``meta.icrc`` passed on (an ICRC is appended after this stage). The header
    has version 4, IHL 5, the given DSCP/ECN, DF set, TTL ``ttl``, a per-packet incrementing
    identification (1..65535, never 0), source ``local_ip`` and a correct checksum.

    The destination MAC is ``meta.ip.mac`` when ``mac_known`` is set (replies to a sender whose
    address came with its request), else the ARP cache's answer; on a miss the packet waits at the
    input while ``lookup.resolve`` asks ARP (port ``lookup``, connected to
    :class:`~rocegen.gateware.net.arp.Arp`), and is dropped whole (``drop_unresolved``) if ARP
    gives up.
    Packets behind it wait (no reordering).

    Latency: one cycle when the MAC is known or cached. Every beat enters a
    :class:`~rocegen.gateware.lib.buffer.RegisterSlice` (so ``i.ready`` is a register) with the
    ARP cache's answer for its destination (``lookup.ip``, looked up on the input's metadata),
    the total length and the header checksum summed but for the identification; the next hop
    is decided after it, on registers: a packet that missed waits there, is looked up again
    every cycle (``lookup.wait_ip``, answered a cycle later, the answer registered) and asks ARP
    to resolve (``lookup.resolve``) from the second cycle after it arrived, so a miss costs two
    cycles more than ARP's answer. Backpressure: from ``o`` through the packetizer and the
    next-hop decision to the slice, whose ``i.ready`` is registered; one beat per cycle
    sustained, packets back to back, and no idle cycle inside a packet whose input has none (a
    packet that waited for ARP included), so a cut-through transmit FIFO behind never starves.
    """

    def __init__(self, width, *, ttl=64):
        check_width(width)
        if not isinstance(ttl, int) or not 1 <= ttl <= 255:
            raise ValueError(f"TTL must be 1..255, not {ttl!r}")
        self.width = width
        self.ttl = ttl
        super().__init__({
            "local_mac": In(48),
            "local_ip": In(32),
            "i": In(PacketSignature(width, IP_TX_META)),
            "o": Out(PacketSignature(width, IP_OUT_META)),
            "lookup": Out(ARP_LOOKUP),
            "drop_unresolved": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width

        # ---- input stage: every beat enters a register slice with the ARP answer for its
        # destination (port ``lookup.ip``, looked up on the input's metadata), the total length
        # and the header sum but for the identification; the next hop is decided on the
        # slice's registers, so the cache's match never reaches a ``ready``
        ip1 = self.i.payload.meta.ip
        # the words of the header but the identification and the checksum; the constant parts
        # of the flags, TTL and total length are summed here, in Python
        src, dst = self.local_ip, ip1.dst
        const = IPV4.length + 0x4000 + (self.ttl << 8)     # total length, DF, TTL
        const = (const & 0xFFFF) + (const >> 16)            # end-around carry
        words = [Cat(ip1.ecn, ip1.dscp, Const(0x45, 8)), Cat(ip1.protocol, Const(0, 8)),
                 src[16:], src[:16], dst[16:], dst[:16], ip1.length,
                 Const(const, 16)]
        st = data.StructLayout({"ip": IP_TX, "total_length": 16, "sum": 16, "hit": 1, "mac": 48})
        sl = m.submodules.lookup = RegisterSlice(W, st)
        sp = sl.i.payload
        m.d.comb += [
            sl.i.valid.eq(self.i.valid), self.i.ready.eq(sl.i.ready),
            sp.data.eq(self.i.payload.data), sp.keep.eq(self.i.payload.keep),
            sp.last.eq(self.i.payload.last), sp.error.eq(self.i.payload.error),
            sp.meta.ip.eq(ip1), sp.meta.total_length.eq(ip1.length + IPV4.length),
            sp.meta.sum.eq(ones_complement_sum(words)),
            self.lookup.ip.eq(ip1.dst),
            sp.meta.hit.eq(self.lookup.hit), sp.meta.mac.eq(self.lookup.mac),
        ]

        i = sl.o
        ip = i.payload.meta.ip
        hdr_meta = data.StructLayout({"eth": ETH.layout, "ipv4": IPV4.layout, "icrc": 1})
        pk = m.submodules.packetizer = Packetizer(IPV4, W, hdr_meta)
        wiring.connect(m, pk.o, wiring.flipped(self.o))

        # ---- next hop ----
        passing = Signal()          # rest of a packet whose MAC is settled
        dropping = Signal()
        mac_reg = Signal(48)
        ident = Signal(16, init=1)      # never 0: RoCEv2 receivers expect a non-zero ID
        # a packet that missed waits here; its address is looked up again every cycle (port
        # ``lookup.wait_ip``, whose answer comes a cycle later and is registered here):
        # ``waited`` (two cycles here already) says the registered answer is this packet's
        waiting = Signal()
        waited = Signal()
        hit_w = Signal()
        mac_w = Signal(48)
        m.d.comb += self.lookup.wait_ip.eq(ip.dst)
        m.d.sync += [waiting.eq(0), waited.eq(0),
                     hit_w.eq(self.lookup.wait_hit), mac_w.eq(self.lookup.wait_mac)]
        hit = i.payload.meta.hit
        mac_now = Mux(ip.mac_known, ip.mac, Mux(hit, i.payload.meta.mac, mac_w))
        settled = ip.mac_known | hit | (waited & hit_w)
        mac = Mux(passing, mac_reg, mac_now)

        forward = Signal()
        with m.If(dropping):
            m.d.comb += i.ready.eq(1)
            with m.If(i.valid & i.payload.last):
                m.d.sync += dropping.eq(0)
        with m.Elif(passing):
            m.d.comb += forward.eq(1)
        with m.Else():
            with m.If(i.valid):
                with m.If(settled):
                    m.d.comb += forward.eq(1)
                    with m.If(pk.i.ready & ~i.payload.last):
                        m.d.sync += [passing.eq(1), mac_reg.eq(mac_now)]
                    with m.If(~pk.i.ready):
                        # (the packetizer is sending the header beats: a packet that waited
                        # stays settled, so the header leaves a beat a cycle)
                        m.d.sync += [waiting.eq(waiting), waited.eq(waited)]
                with m.Else():
                    # ARP is asked once the registered answer for this packet is in
                    m.d.comb += self.lookup.resolve.eq(waited)
                    with m.If(self.lookup.failed):
                        m.d.comb += self.drop_unresolved.eq(1)
                        m.d.comb += i.ready.eq(1)
                        with m.If(~i.payload.last):
                            m.d.sync += dropping.eq(1)
                    with m.Else():
                        m.d.sync += [waiting.eq(1), waited.eq(waiting)]
        with m.If(forward):
            m.d.comb += [
                pk.i.valid.eq(i.valid),
                i.ready.eq(pk.i.ready),
            ]
            with m.If(passing & i.valid & pk.i.ready & i.payload.last):
                m.d.sync += passing.eq(0)
            with m.If(i.valid & pk.i.ready & i.payload.last):
                m.d.sync += ident.eq(Mux(ident == 0xFFFF, 1, ident + 1))

        self._headers(m, i, pk, mac, ident)
        return m

    def _headers(self, m, i, pk, mac, ident):
        """The Ethernet header's fields and the IPv4 header (``ident`` its identification, the
        checksum from the sum worked out a stage earlier) on the packetizer's input, beside
        the beat ``i`` it takes."""
        ip = i.payload.meta.ip
        pm = pk.i.payload.meta
        m.d.comb += [
            pk.i.payload.data.eq(i.payload.data), pk.i.payload.keep.eq(i.payload.keep),
            pk.i.payload.last.eq(i.payload.last), pk.i.payload.error.eq(i.payload.error),
            pm.eth.dst.eq(mac), pm.eth.src.eq(self.local_mac),
            pm.eth.ethertype.eq(ETHERTYPE_IPV4),
            pm.icrc.eq(ip.icrc),
        ]
        hdr = Signal(IPV4.layout)
        m.d.comb += [
            hdr.version.eq(4), hdr.ihl.eq(5), hdr.dscp.eq(ip.dscp), hdr.ecn.eq(ip.ecn),
            hdr.total_length.eq(i.payload.meta.total_length), hdr.identification.eq(ident),
            hdr.df.eq(1), hdr.ttl.eq(self.ttl), hdr.protocol.eq(ip.protocol),
            hdr.src.eq(self.local_ip), hdr.dst.eq(ip.dst),
        ]
        m.d.comb += pm.ipv4.eq(hdr)
        m.d.comb += pm.ipv4.checksum.eq(~ones_complement_sum([i.payload.meta.sum, ident]))
