from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checked_fifo import ChecksumCheckedFifo
from rocegen.gateware.lib.demux import PacketDemux
from rocegen.gateware.lib.fifo import fifo_depth
from rocegen.gateware.lib.pipe import ForwardRegister
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.net.layouts import IP_RX_META, IP_TX
from rocegen.wire.headers import ICMP, IP_PROTO_ICMP, IPV4

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

    The reply is the request's stream with the ICMP header rewritten in place in its first beat
    (type 0, checksum updated; lanes 0..7, byte order of the wire), so nothing is shifted. A
    message shorter than the ICMP header (its first and last beat without lane 7) is dropped as
    not an echo request (``drop_type``).

    Latency: store-and-forward; the store releases the request
    (:class:`~rocegen.gateware.lib.checked_fifo.ChecksumCheckedFifo`, without its output slice),
    its header is rewritten on the way into a :class:`~rocegen.gateware.lib.pipe.ForwardRegister`
    (with the verdict of the echo filter behind it), one cycle. Backpressure: the input is held
    while the store is full; ``o.ready`` reaches the store's read side through the filter and
    the forward register (the stack's IPv4 arbiter behind it has a registered grant).
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
        store = m.submodules.store = ChecksumCheckedFifo(W, self.depth, IP_RX_META,
                                                   output_slice=False)
        wiring.connect(m, wiring.flipped(self.i), store.i)
        m.d.comb += [store.seed.eq(0), store.skip.eq(0),
                     self.drop_checksum.eq(store.drop_checksum),
                     self.drop_error.eq(store.drop_error | store.drop_overflow)]

        # The reply is the request with its ICMP header rewritten in place in the first beat
        # (type 0, the checksum updated; identifier, sequence and data unchanged), so the
        # message is never shifted: no depacketizer or packetizer at W bits.
        src = store.o
        first = first_beat(m, src)
        hlen = ICMP.length
        req = ICMP.from_lanes(src.payload.data[:8 * hlen])
        rep = Signal(ICMP.layout)
        m.d.comb += [
            rep.type.eq(ECHO_REPLY), rep.code.eq(0),
            rep.checksum.eq(echo_reply_checksum(req.checksum)),
            rep.identifier.eq(req.identifier), rep.sequence.eq(req.sequence),
        ]
        # a message shorter than the ICMP header ends in its first beat without lane hlen-1
        runt = src.payload.last & ~src.payload.keep[hlen - 1]
        is_echo = (req.type == ECHO_REQUEST) & (req.code == 0) & ~runt
        # the rewritten beat, the reply's metadata and the filter's verdict end in a forward
        # register, so the filter's choice comes from a register and the store's read data go
        # no further
        inner = data.StructLayout({"ip": IP_TX, "drop": 1})
        fr = m.submodules.register = ForwardRegister(W, inner)
        ip, meta = fr.i.payload.meta.ip, src.payload.meta
        m.d.comb += [
            fr.i.valid.eq(src.valid), src.ready.eq(fr.i.ready),
            fr.i.payload.data.eq(Mux(first, Cat(ICMP.to_lanes(rep), src.payload.data[8 * hlen:]),
                                     src.payload.data)),
            fr.i.payload.keep.eq(src.payload.keep), fr.i.payload.last.eq(src.payload.last),
            fr.i.payload.error.eq(src.payload.error),
            ip.dst.eq(meta.ipv4.src), ip.protocol.eq(IP_PROTO_ICMP),
            ip.dscp.eq(meta.ipv4.dscp), ip.ecn.eq(0),
            ip.length.eq(meta.ipv4.total_length - IPV4.length),
            ip.mac_known.eq(1), ip.mac.eq(meta.eth.src),
            fr.i.payload.meta.drop.eq(~is_echo),      # (read with the first beat only)
        ]
        dm = m.submodules.filter = PacketDemux(W, IP_TX_META, 1)
        fo = fr.o.payload
        m.d.comb += [
            dm.i.valid.eq(fr.o.valid), fr.o.ready.eq(dm.i.ready),
            dm.i.payload.data.eq(fo.data), dm.i.payload.keep.eq(fo.keep),
            dm.i.payload.last.eq(fo.last), dm.i.payload.error.eq(fo.error),
            dm.i.payload.meta.ip.eq(fo.meta.ip),
            # the demux samples these with the first beat
            dm.select.eq(0), dm.drop.eq(fo.meta.drop),
            self.drop_type.eq(dm.dropped),
        ]
        wiring.connect(m, dm.o[0], wiring.flipped(self.o))
        m.d.comb += self.reply.eq(self.o.valid & self.o.ready & self.o.payload.last)
        return m
