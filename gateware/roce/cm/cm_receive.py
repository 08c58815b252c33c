"""The connection manager's receiver: one 64-byte datagram taken and held."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import UDP_RX_META
from rocegen.gateware.roce.layouts import CM_DATAGRAM
from rocegen.wire.headers import CM

__all__ = ["CmReceiver"]


class CmReceiver(wiring.Component):
    """Takes one UDP datagram at a time and holds it, with what the network stack parsed about
    it, until the request it carries has been dealt with.

    Parameters
    ----------
    width : int
        Data width W of ``i`` (64..512).

    Ports
    -----
    i : In(PacketSignature(width, UDP_RX_META))
        Datagrams (the UDP payload) as the network stack delivers them, byte 0 in lane 0 of the
        first beat.
    o : Out(stream.Signature(CM_DATAGRAM))
        The datagram taken last: ``req`` its first 64 bytes by field of the ``CM`` header (its
        last 64 bytes when it is longer; only meaningful when ``length_ok``), ``src_ip`` /
        ``dst_ip`` from ``meta.ipv4``, ``src_port`` / ``dst_port`` from ``meta.udp`` (sampled
        with the last beat), ``length_ok``: exactly 64 bytes (every lane of the last beat kept)
        and no ``error``.

    Behaviour
    ---------
    Latency: if the last beat of a datagram moves in cycle t, ``o.valid`` is high from cycle
    t + 1. Backpressure: ``o`` is held, and ``i.ready`` low, until ``o.ready`` (the datagram is
    done with); ``i.ready`` is high again in the cycle after. ``i.ready`` and ``o.valid`` come
    from one register; ``o.payload`` from registers.
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(PacketSignature(width, UDP_RX_META)),
            "o": Out(stream.Signature(CM_DATAGRAM)),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        NB = 8 * CM.length // W             # beats of a 64-byte datagram
        buf = Signal(8 * CM.length)         # the last NB beats, the latest in the top lanes
        beats = Signal(range(NB + 2))       # beats taken so far (saturating past NB)
        held = self.o.payload
        length_ok = Signal()
        src_ip, dst_ip = Signal(32), Signal(32)
        sport, dport = Signal(16), Signal(16)
        m.d.comb += [held.req.eq(CM.from_lanes(buf)), held.length_ok.eq(length_ok),
                     held.src_ip.eq(src_ip), held.dst_ip.eq(dst_ip),
                     held.src_port.eq(sport), held.dst_port.eq(dport)]

        recv = Signal(init=1)               # waiting for a datagram: i.ready from a register
        m.d.comb += [self.i.ready.eq(recv), self.o.valid.eq(~recv)]
        p = self.i.payload
        with m.If(self.i.valid & recv):
            m.d.sync += buf.eq(Cat(buf[W:], p.data))
            with m.If(beats != NB + 1):
                m.d.sync += beats.eq(beats + 1)
            with m.If(p.last):
                m.d.sync += [
                    beats.eq(0),
                    length_ok.eq((beats == NB - 1) & (p.keep == (1 << (W // 8)) - 1) & ~p.error),
                    src_ip.eq(p.meta.ipv4.src), dst_ip.eq(p.meta.ipv4.dst),
                    sport.eq(p.meta.udp.src_port), dport.eq(p.meta.udp.dst_port),
                    recv.eq(0),
                ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += recv.eq(1)
        return m
