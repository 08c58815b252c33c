from amaranth.hdl import Module
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..buffer import RegisterSlice
from ..checked_fifo import ChecksumCheckedFifo
from ..demux import PacketDemux
from ..depacketizer import Depacketizer
from ..fifo import fifo_depth
from ..headers import ICMP, IP_PROTO_ICMP, IPV4
from ..mapmeta import MapMeta
from ..packetizer import Packetizer
from ..stream import PacketSignature, check_width, first_beat
from .layouts import IP_RX_META, IP_TX

__all__ = ["IcmpEcho"]

IP_TX_META = data.StructLayout({"ip": IP_TX})
ECHO_REQUEST, ECHO_REPLY = 8, 0


def echo_reply_checksum(request_checksum):
    """Checksum of the reply from the request's, type 8 -> 0 (RFC 1624 eq. 3:
    HC' = ~(~HC + ~m + m') with m = 0x0800, m' = 0)."""
    s = (~request_checksum)[:16] + 0xF7FF
    s = s[:16] + s[16]
    s = (s[:16] + s[16])[:16]
    return (~s)[:16]


class IcmpEcho(wiring.Component):
    """ICMP echo responder (ping) for payloads up to the MTU.

    ``i`` carries ICMP messages (IPv4 payloads, ``meta.eth``/``meta.ipv4`` of the request). A
    message is stored whole and its checksum verified (``drop_checksum``); echo requests (type 8,
    code 0) are answered with the same identifier, sequence number and data, others pulse
    ``drop_type``. The reply leaves on ``o`` with ``meta.ip`` addressed to the requester's IP
    and MAC (no ARP lookup) and the incrementally updated checksum.

    Latency: store-and-forward; the reply starts a few cycles after the request's last beat
    (one of them in a :class:`~rocegen.gateware.buffer.RegisterSlice` behind the depacketizer).
    Backpressure: the input is held while the store is full.
    """

    def __init__(self, width, *, mtu=1500):
        check_width(width)
        self.width = width
        self.mtu = mtu
        self.depth = fifo_depth(mtu - IPV4.length, width)
        super().__init__({
            "i": In(PacketSignature(width, IP_RX_META)),
            "o": Out(PacketSignature(width, IP_TX_META)),
            "reply": Out(1),
            "drop_type": Out(1),
            "drop_checksum": Out(1),
            "drop_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        store = m.submodules.store = ChecksumCheckedFifo(W, self.depth, IP_RX_META)
        wiring.connect(m, wiring.flipped(self.i), store.i)
        m.d.comb += [store.seed.eq(0), store.skip.eq(0),
                     self.drop_checksum.eq(store.drop_checksum),
                     self.drop_error.eq(store.drop_error | store.drop_overflow)]

        dp = m.submodules.depacketizer = Depacketizer(ICMP, W, IP_RX_META)
        wiring.connect(m, store.o, dp.i)
        # a register slice behind the depacketizer, so that the echo filter's ``ready`` does not
        # reach the depacketizer and the store's read side
        # (with the type check made before it, on the depacketizer's registered header)
        inner = data.StructLayout({**dp.meta_out.members, "is_echo": 1})
        sl = m.submodules.slice = RegisterSlice(W, inner)
        req = dp.o.payload.meta.icmp
        m.d.comb += [
            sl.i.valid.eq(dp.o.valid), dp.o.ready.eq(sl.i.ready),
            sl.i.payload.data.eq(dp.o.payload.data), sl.i.payload.keep.eq(dp.o.payload.keep),
            sl.i.payload.last.eq(dp.o.payload.last), sl.i.payload.error.eq(dp.o.payload.error),
            sl.i.payload.meta.eth.eq(dp.o.payload.meta.eth),
            sl.i.payload.meta.ipv4.eq(dp.o.payload.meta.ipv4),
            sl.i.payload.meta.icmp.eq(req),
            sl.i.payload.meta.is_echo.eq((req.type == ECHO_REQUEST) & (req.code == 0)),
        ]
        dm = m.submodules.filter = PacketDemux(W, dp.meta_out, 1)
        so = sl.o.payload
        m.d.comb += [
            dm.i.valid.eq(sl.o.valid), sl.o.ready.eq(dm.i.ready),
            dm.i.payload.data.eq(so.data), dm.i.payload.keep.eq(so.keep),
            dm.i.payload.last.eq(so.last), dm.i.payload.error.eq(so.error),
            dm.i.payload.meta.eth.eq(so.meta.eth), dm.i.payload.meta.ipv4.eq(so.meta.ipv4),
            dm.i.payload.meta.icmp.eq(so.meta.icmp),
        ]
        is_echo = so.meta.is_echo
        m.d.comb += [dm.select.eq(0), dm.drop.eq(~is_echo),
                     self.drop_type.eq((dm.i.valid & first_beat(m, dm.i) & ~is_echo)
                                       | dp.runt)]

        reply_meta = data.StructLayout({"ip": IP_TX, "icmp": ICMP.layout})

        def reply(m_, src, dst):
            m_.d.comb += [
                dst.ip.dst.eq(src.ipv4.src), dst.ip.protocol.eq(IP_PROTO_ICMP),
                dst.ip.dscp.eq(src.ipv4.dscp), dst.ip.ecn.eq(0),
                dst.ip.length.eq(src.ipv4.total_length - IPV4.length),
                dst.ip.mac_known.eq(1), dst.ip.mac.eq(src.eth.src),
                dst.icmp.type.eq(ECHO_REPLY), dst.icmp.code.eq(0),
                dst.icmp.checksum.eq(echo_reply_checksum(src.icmp.checksum)),
                dst.icmp.identifier.eq(src.icmp.identifier),
                dst.icmp.sequence.eq(src.icmp.sequence),
            ]
        mm = m.submodules.reply = MapMeta(W, dp.meta_out, reply_meta, reply)
        wiring.connect(m, dm.o[0], mm.i)
        pk = m.submodules.packetizer = Packetizer(ICMP, W, reply_meta)
        wiring.connect(m, mm.o, pk.i)
        wiring.connect(m, pk.o, wiring.flipped(self.o))
        m.d.comb += self.reply.eq(pk.o.valid & pk.o.ready & pk.o.payload.last)
        return m
