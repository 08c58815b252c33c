"""The responder's acknowledgements built whole: IPv4, UDP, BTH, AETH and ICRC in two register
stages, for the network stack's ``ip_out`` port (past UDP and IPv4 transmit and the ICRC
stage)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
from rocegen.gateware.lib.crc import Crc32
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.net.layouts import ETH_META
from rocegen.gateware.roce.icrc import ICRC_BYTES, ICRC_SEED, icrc_mask
from rocegen.gateware.roce.responder.resp_layouts import RESP_RESPONSE
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

__all__ = ["RespAckFrame", "ACK_FRAME_IN", "ACK_DATAGRAM", "ACK_DATAGRAM_BYTES", "ack_icrc_terms"]

#: An ACKNOWLEDGE's IP datagram before its ICRC: the four headers as one.
ACK_DATAGRAM = H.joined("ack", H.IPV4, H.UDP, H.BTH, H.AETH)
#: ... and its length with the ICRC (48 bytes).
ACK_DATAGRAM_BYTES = ACK_DATAGRAM.length + ICRC_BYTES

#: What :class:`RespAckFrame` takes: the response (an ACKNOWLEDGE) and its next hop's MAC.
ACK_FRAME_IN = data.StructLayout({"ack": RESP_RESPONSE, "mac": 48})

#: The datagram's fields that vary from one ACKNOWLEDGE to the next and that the ICRC covers
#: (the TOS, TTL and both checksums are masked out of it).
_ICRC_FIELDS = ("ipv4_identification", "ipv4_src", "ipv4_dst", "udp_src_port", "bth_dest_qp",
                "bth_psn", "aeth_syndrome", "aeth_msn")


def _fixed(ttl):
    """The datagram's fields that are the same in every ACKNOWLEDGE."""
    udp_length = H.UDP.length + H.BTH.length + H.AETH.length + ICRC_BYTES
    return dict(ipv4_version=4, ipv4_ihl=5, ipv4_total_length=H.IPV4.length + udp_length,
                ipv4_df=1, ipv4_ttl=ttl, ipv4_protocol=H.IP_PROTO_UDP,
                udp_dst_port=H.UDP_PORT_ROCEV2, udp_length=udp_length,
                bth_opcode=opc.OP_RC_ACKNOWLEDGE, bth_pkey=0xFFFF)


def _icrc_int(lanes):
    """The ICRC (its 4 bytes in lane order) of the datagram whose bytes are ``lanes`` (an
    integer, byte 0 lowest)."""
    masked = lanes | int.from_bytes(icrc_mask(4), "little")
    return ~Crc32.step_int(ICRC_SEED, masked, ACK_DATAGRAM.length) & Crc32.MASK


def ack_icrc_terms(ttl=64):
    """The ICRC of an ACKNOWLEDGE as an affine function of its varying fields: ``(base,
    terms)``, where the ICRC (lane order, byte 0 lowest) is ``base`` XOR the ``terms[(field,
    bit)]`` of every set ``bit`` of each field of :data:`_ICRC_FIELDS`. (The CRC of a fixed
    length is affine in its data bits, and those fields lie outside the masked ones.)"""
    fixed = _fixed(ttl)
    base = _icrc_int(ACK_DATAGRAM.lanes_value(**fixed))
    terms = {}
    for name in _ICRC_FIELDS:
        bits = dict(ACK_DATAGRAM.fields)[name]
        for b in range(bits):
            one = ACK_DATAGRAM.lanes_value(**fixed, **{name: 1 << b})
            terms[(name, b)] = _icrc_int(one) ^ base
    return base, terms


class RespAckFrame(wiring.Component):
    """Builds an ACKNOWLEDGE (ACK, NAK, RNR NAK) as a whole IPv4 datagram with its ICRC, for the
    network stack's ``ip_out`` port, so that it goes to the Ethernet arbiter past UDP transmit,
    IPv4 transmit and the ICRC stage.

    Parameters
    ----------
    width : int
        Data width W of ``o`` (64..512, power of two).
    ttl : int
        IPv4 time to live (1..255; 64, as the network stack's IPv4 transmit sends).

    Ports
    -----
    i : In(stream.Signature(ACK_FRAME_IN))
        The response to send (``ack``, :data:`~rocegen.gateware.roce.responder.resp_layouts.RESP_RESPONSE`,
        ``cnp`` must be 0) and the MAC of its next hop (``mac``). ``ready`` is a register: high
        while no frame is being built or sent.
    local_mac, local_ip : In(48), In(32)
        Our addresses (the Ethernet source and the IPv4 source).
    o : Out(PacketSignature(width, ETH_META))
        The datagram, 48 bytes: IPv4 (version 4, IHL 5, DSCP ``ack.dscp``, ECN 0, total length
        48, an identification counting from 1 and never 0, DF, TTL ``ttl``, protocol UDP, its
        checksum, source ``local_ip``, destination ``ack.dst_ip``), UDP (source port
        ``ack.src_port``, destination 4791, length 28, checksum 0), BTH (opcode 0x11, P_Key
        0xFFFF, DestQP ``ack.dest_qpn``, PSN ``ack.psn``, every other field 0), AETH
        (``ack.syndrome``, ``ack.msn``) and the ICRC; ``meta.eth``: destination ``mac``, source
        ``local_mac``, EtherType IPv4. ``error`` is always 0.

    Behaviour
    ---------
    * Latency: a response taken in cycle t is registered (stage 1), the datagram with its IPv4
      checksum and ICRC is registered in t + 1 (stage 2), and its first beat is offered in
      t + 2.
    * The ICRC is the datagram's affine function of its varying fields
      (:func:`ack_icrc_terms`): a constant XOR, per ICRC bit, a tree of the field bits that
      reach it (176 field bits, at most 3 LUT levels), instead of a CRC over the bytes. The IPv4
      checksum is a one's complement sum of the header's words: those of the fixed fields, the
      source and the identification summed in stage 1 (from registers), the TOS and the
      destination added in stage 2.
    * Byte order: byte 0 of the IPv4 header in lane 0 (bits 7:0) of the first beat; the ICRC
      least significant byte first in the last 4 bytes; every beat full but the last (``keep``
      a thermometer code). 6 beats at 64 bits, 3 at 128, 2 at 256, 1 at 512.
    * Backpressure: ``o.ready`` low holds the beat offered; ``i.ready`` stays low until the
      frame's last beat is taken. The beats of a frame are offered back to back (a steady
      source, as the stack's cut-through transmit path needs).
    """

    def __init__(self, width, *, ttl=64):
        check_width(width)
        if not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= 255:
            raise ValueError(f"TTL must be an integer from 1 to 255, not {ttl!r}")
        self.width = width
        self.ttl = ttl
        #: Beats of a frame.
        self.beats = -(-ACK_DATAGRAM_BYTES // (width // 8))
        super().__init__({
            "i": In(stream.Signature(ACK_FRAME_IN)),
            "local_mac": In(48),
            "local_ip": In(32),
            "o": Out(PacketSignature(width, ETH_META)),
        })

    def elaborate(self, platform):
        m = Module()
        W, B, nb = self.width, self.width // 8, self.beats

        # stage 1: the response, its next hop and its identification, and the IPv4 checksum's
        # sum of the header's words but the TOS and destination (from registers: the fixed
        # fields, the source address, the identification)
        s1_valid, s1 = Signal(), Signal(ACK_FRAME_IN)
        ident = Signal(16, init=1)
        busy = Signal()
        take = self.i.valid & self.i.ready
        m.d.comb += self.i.ready.eq(~busy)
        m.d.sync += s1_valid.eq(take)
        fixed = _fixed(self.ttl)
        pre = Signal(H.IPV4.layout)
        for name, value in fixed.items():
            if name.startswith("ipv4_"):
                m.d.comb += getattr(pre, name[len("ipv4_"):]).eq(value)
        m.d.comb += [pre.identification.eq(ident), pre.src.eq(self.local_ip)]
        s1_id, s1_sum, s1_src = Signal(16), Signal(16), Signal(32)
        with m.If(take):
            m.d.sync += [busy.eq(1), s1.eq(self.i.payload), s1_id.eq(ident), s1_src.eq(self.local_ip),
                         s1_sum.eq(ones_complement_sum(be_words(H.IPV4.to_lanes(pre)))),
                         ident.eq(Mux(ident == 0xFFFF, 1, ident + 1))]      # (1..65535)

        # stage 2: the datagram, its checksum and its ICRC
        a = s1.ack
        dg = Signal(ACK_DATAGRAM.layout)
        for name, value in fixed.items():
            m.d.comb += getattr(dg, name).eq(value)
        varying = {"ipv4_dscp": a.dscp, "ipv4_identification": s1_id, "ipv4_src": s1_src,
                   "ipv4_dst": a.dst_ip, "udp_src_port": a.src_port, "bth_dest_qp": a.dest_qpn,
                   "bth_psn": a.psn, "aeth_syndrome": a.syndrome, "aeth_msn": a.msn}
        for name, value in varying.items():
            m.d.comb += getattr(dg, name).eq(value)
        # (the TOS is the low byte of the header's first word, ECN 0)
        m.d.comb += dg.ipv4_checksum.eq(~ones_complement_sum(
            [s1_sum, a.dscp << 2, a.dst_ip[16:], a.dst_ip[:16]]))
        base, terms = ack_icrc_terms(self.ttl)
        icrc = []
        for k in range(8 * ICRC_BYTES):
            ins = [getattr(dg, name)[b] for (name, b), col in terms.items() if col >> k & 1]
            icrc.append(Cat(*ins).xor() ^ (base >> k & 1) if ins else Const(base >> k & 1, 1))
        frame = Signal(8 * B * nb)
        eth = Signal(H.ETH.layout)
        with m.If(s1_valid):
            m.d.sync += [frame.eq(Cat(ACK_DATAGRAM.to_lanes(dg), *icrc)),
                         eth.dst.eq(s1.mac), eth.src.eq(self.local_mac),
                         eth.ethertype.eq(H.ETHERTYPE_IPV4)]

        # the beats
        offered, beat = Signal(), Signal(range(max(nb, 2)))
        last = beat == nb - 1
        m.d.sync += offered.eq(offered | s1_valid)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(last):
                m.d.sync += [offered.eq(0), busy.eq(0), beat.eq(0)]
        p = self.o.payload
        m.d.comb += [
            self.o.valid.eq(offered),
            p.data.eq(frame.word_select(beat, W) if nb > 1 else frame),
            p.keep.eq(Mux(last, keep_mask(ACK_DATAGRAM_BYTES - (nb - 1) * B, B), (1 << B) - 1)),
            p.last.eq(last),
            p.meta.eth.eq(eth),
        ]
        return m

