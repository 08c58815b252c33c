"""QP1's send path: the CM's MADs put into UD SEND_ONLY packets from QP1."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.net.udp_tx import ICRC_BYTES, UDP_TX_META
from rocegen.gateware.roce.ibcm.ibcm_layouts import IBCM_TX_META
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc

__all__ = ["Qp1Egress"]

_INNER = data.StructLayout({I.UD_OUT.name: I.UD_OUT.layout, "udp": UDP_TX_META.members["udp"]})


class Qp1Egress(wiring.Component):
    """Puts each MAD from the CM (:class:`~rocegen.gateware.roce.ibcm.ibcm_reply.IbCmReply`'s
    ``o``) behind a BTH and a DETH, for the network stack's RoCEv2 port.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).

    Ports
    -----
    i : In(PacketSignature(width, IBCM_TX_META))
        MADs (any whole number of bytes; the CM's are 256), byte 0 in lane 0 of the first beat;
        ``meta``: where each goes.
    o : Out(PacketSignature(width, UDP_TX_META))
        The UDP payloads without their ICRC (the stack appends it: ``meta.udp.icrc`` 1): the
        headers :data:`rocegen.wire.ibcm.UD_OUT` -- BTH opcode UD SEND_ONLY, ``pkey`` and
        ``dst_qp`` of ``meta``, PSN one more than the last packet's (0 first), no AckReq, no
        pad (a MAD is a whole number of words); DETH Q_Key
        :data:`~rocegen.wire.ibcm.QP1_QKEY`, source QP 1 -- then the MAD. ``meta.udp``: to
        ``dst_ip``, from :data:`~rocegen.wire.ibcm.UDP_SPORT` to 4791, ``length`` the payload's
        with the ICRC (for a MAD of 256 bytes, 280), DSCP and ECN 0, checksum 0.
    sent : Out(1)
        Pulses with the first beat of each packet out.

    Behaviour
    ---------
    A :class:`~rocegen.gateware.lib.packetizer.Packetizer` of ``UD_OUT``: zero cycles of
    latency (combinational from ``i`` to ``o``), one beat per cycle, ``i.ready`` from
    ``o.ready`` when a payload beat goes out (header beats are made while ``i`` waits).
    ``meta.udp.length`` counts a MAD of 256 bytes: the CM sends no other size.
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(PacketSignature(width, IBCM_TX_META)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
            "sent": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        pk = m.submodules.packetizer = Packetizer(I.UD_OUT, self.width, _INNER)
        psn = Signal(24)
        src, dst = self.i.payload, pk.i.payload
        ud, udp = dst.meta.ud, dst.meta.udp
        m.d.comb += [
            pk.i.valid.eq(self.i.valid), self.i.ready.eq(pk.i.ready),
            dst.data.eq(src.data), dst.keep.eq(src.keep), dst.last.eq(src.last),
            dst.error.eq(src.error),
            ud.bth_opcode.eq(opc.OP_UD_SEND_ONLY), ud.bth_pkey.eq(src.meta.pkey),
            ud.bth_dest_qp.eq(src.meta.dst_qp), ud.bth_psn.eq(psn),
            ud.deth_qkey.eq(I.QP1_QKEY), ud.deth_src_qp.eq(I.QP1),
            udp.dst_ip.eq(src.meta.dst_ip), udp.src_port.eq(I.UDP_SPORT),
            udp.dst_port.eq(H.UDP_PORT_ROCEV2),
            udp.length.eq(I.UD_OUT.length + I.MAD_LENGTH + ICRC_BYTES), udp.icrc.eq(1),
        ]
        wiring.connect(m, pk.o, wiring.flipped(self.o))
        moved = self.o.valid & self.o.ready
        m.d.comb += self.sent.eq(moved & first_beat(m, self.o))
        with m.If(moved & self.o.payload.last):     # (the header is read over several beats)
            m.d.sync += psn.eq(psn + 1)
        return m
