from amaranth.hdl import Module, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.arbiter import PacketArbiter
from rocegen.gateware.lib.mapmeta import MapMeta
from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.lib.trim import Trim
from rocegen.gateware.net.layouts import IP_TX, UDP_TX
from rocegen.wire.headers import IP_PROTO_UDP, UDP

__all__ = ["UdpTx", "UDP_TX_META", "ICRC_BYTES"]

ICRC_BYTES = 4

UDP_TX_META = data.StructLayout({"udp": UDP_TX})
IP_TX_META = data.StructLayout({"ip": IP_TX})


class UdpTx(wiring.Component):
    """UDP transmit: ``n`` ports merged round robin, UDP header insertion, to IPv4.

    Each ``i[k]`` carries UDP payloads with ``meta.udp``
    (:data:`~rocegen.gateware.net.layouts.UDP_TX`). The length in the metadata is trusted for the
    headers (with ``icrc`` set it counts the 4 ICRC bytes the stack appends later, which the
    payload does not carry) and checked against the payload: a payload shorter than announced leaves with
    ``error`` set (the MAC then aborts the frame), a longer one is cut; both pulse
    ``length_mismatch``. The UDP checksum is ``meta.udp.checksum`` as given (0: none, allowed for
    IPv4; a sender whose datagram is known in advance, such as the connection manager, computes it).

    Latency: one cycle, in the input stage of the registered
    :class:`~rocegen.gateware.lib.trim.Trim`: it takes the arbiter's beat with the headers'
    fields (the UDP length with the header's 8 bytes) and the payload's length to check (the UDP
    length less the ICRC's 4 bytes), carry chains beside its lane compares; the packetizer
    behind it is combinational. Backpressure from ``o``; ``i[k].ready`` is the trimmer's
    registered ready gated by the arbiter's registered grant. One beat per cycle sustained,
    packets back to back.
    """

    def __init__(self, width, n):
        check_width(width)
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"number of UDP transmit ports must be at least 1, not {n!r}")
        self.width = width
        self.n = n
        super().__init__({
            "i": In(PacketSignature(width, UDP_TX_META)).array(n),
            "o": Out(PacketSignature(width, IP_TX_META)),
            "length_mismatch": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        arb = m.submodules.arbiter = PacketArbiter(W, UDP_TX_META, self.n)
        for k in range(self.n):
            wiring.connect(m, wiring.flipped(self.i[k]), arb.i[k])
        # the arbiter's beat (its grant is a register) goes into the trimmer's input stage with
        # the IP and UDP headers' fields (the UDP length with the header's 8 bytes) and the
        # payload's length to check (the UDP length less the ICRC the stack appends later):
        # carry chains beside the lane compares. The packetizer takes the trimmer's output.
        hdr_meta = data.StructLayout({"ip": IP_TX, "udp": UDP.layout})

        def headers(m_, src, dst):
            u = src.udp
            udp_length = u.length + UDP.length
            m_.d.comb += [
                dst.ip.dst.eq(u.dst_ip), dst.ip.protocol.eq(IP_PROTO_UDP),
                dst.ip.dscp.eq(u.dscp), dst.ip.ecn.eq(u.ecn),
                dst.ip.length.eq(udp_length), dst.ip.mac_known.eq(0),
                dst.ip.icrc.eq(u.icrc),
                dst.udp.src_port.eq(u.src_port), dst.udp.dst_port.eq(u.dst_port),
                dst.udp.length.eq(udp_length), dst.udp.checksum.eq(u.checksum),
            ]
        mm = m.submodules.headers = MapMeta(W, UDP_TX_META, hdr_meta, headers)
        wiring.connect(m, arb.o, mm.i)
        trim = m.submodules.trim = Trim(W, hdr_meta, registered=True)
        wiring.connect(m, mm.o, trim.i)
        u_arb = arb.o.payload.meta.udp
        m.d.comb += [trim.length.eq(u_arb.length - Mux(u_arb.icrc, ICRC_BYTES, 0)),
                     self.length_mismatch.eq(trim.short | trim.long)]
        pk = m.submodules.packetizer = Packetizer(UDP, W, hdr_meta)
        wiring.connect(m, trim.o, pk.i)
        wiring.connect(m, pk.o, wiring.flipped(self.o))
        return m
