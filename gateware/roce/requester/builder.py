from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.lib.varpacketizer import VarPacketizer
from rocegen.gateware.net.layouts import UDP_TX
from rocegen.gateware.net.udp_tx import ICRC_BYTES, UDP_TX_META
from rocegen.gateware.roce.layouts import PACKET_DESC, WrSource
from rocegen.gateware.roce.memory.atomic_alu import lanes_reversed
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import BYTE_ORDERS

__all__ = ["RocePacketBuilder", "HEADER_LENGTHS", "MAX_HEADER"]

#: Transport headers the builder emits: BTH, BTH+RETH, BTH+ImmDt, BTH+RETH+ImmDt.
HEADER_LENGTHS = (H.BTH.length, H.BTH.length + H.IMMDT.length, H.BTH.length + H.RETH.length,
                  H.BTH.length + H.RETH.length + H.IMMDT.length)
#: ... and an atomic request's (BTH and the AtomicETH's target; its operands follow as payload).
ATOMIC_HEADER = H.BTH.length + H.ATOMIC_TARGET.length
MAX_HEADER = max(HEADER_LENGTHS)

#: The P_Key of the default partition (full membership).
DEFAULT_PKEY = 0xFFFF

_INNER_META = data.StructLayout({
    "hdr": 8 * MAX_HEADER,
    "hdr_len": range(MAX_HEADER + 1),
    "tail_len": 2,
    "udp": UDP_TX,
})


class RocePacketBuilder(wiring.Component):
    """RoCEv2 packet builder: transport headers and padding around a packet's payload.

    ``i`` carries the payload of one packet (``desc.length`` bytes; a 0-byte payload is one beat
    with ``keep == 0``) with its :data:`~rocegen.gateware.roce.layouts.PACKET_DESC` in ``meta``.
    ``o`` carries the UDP payload of the RoCEv2 packet, without its ICRC (the network stack
    appends it once the IPv4 header is final)::

        BTH | RETH (if has_reth) | ImmDt (if has_imm) | payload | padcnt zero bytes

    BTH: ``opcode``, ``se``, MigReq 1, ``padcnt``, version 0, P_Key 0xFFFF, FECN/BECN 0,
    ``dest_qp`` = ``dest_qpn``, ``ack_req``, ``psn``. RETH: ``va``, ``rkey``, ``dma_len``.
    ImmDt: ``imm``. All fields big-endian as on the wire (header table in
    :mod:`rocegen.wire.headers`).

    ``o.meta.udp`` (:data:`~rocegen.gateware.net.layouts.UDP_TX`): ``dst_ip`` = ``peer_ip``,
    ``src_port`` = ``udp_sport``, ``dst_port`` 4791, ``length`` = headers + ``length`` +
    ``padcnt`` + 4 (the ICRC the stack adds), ``dscp``, ``ecn``, ``icrc`` 1. The payload length
    is taken from the descriptor, not measured; the stack cuts or flags a payload that differs.

    With ``atomics``, an atomic request (``opcode`` COMPARE_SWAP or FETCH_ADD) is
    ``BTH | AtomicETH``: the AtomicETH's ``va`` and R_Key from the descriptor (``va``,
    ``rkey``), its ``swap_add`` and ``compare`` the packet's 16 bytes of payload (the work
    request's operands in local memory, each 8-byte value turned from the memory's byte order
    into the wire's); ``has_reth`` and ``has_imm`` are 0 on it. The traffic generator's atomics
    (``src`` GENERATOR, whose payload is the test pattern) get operands made here instead: a
    FETCH_ADD adds ``imm``; the COMPARE_SWAP with ``wr_id`` s swaps ``imm + s + 1`` for
    ``imm + s`` (64-bit sums).

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    atomics : None or str
        The byte order of atomic operands in memory (``"little"``, ``"big"``); None (the
        default): no atomic requests (their descriptors are built as any other).

    Behaviour
    ---------
    * Byte order: byte 0 of the BTH in lane 0 of the first output beat; payload byte ``k`` at
      output byte ``header length + k`` (header length 12, 16, 28 or 32).
    * Latency: zero cycles (combinational from ``i`` to ``o``, through a
      :class:`~rocegen.gateware.lib.varpacketizer.VarPacketizer` whose payload shifter implements only
      the shifts of the four header lengths).
    * Throughput: one output beat per cycle, ``ceil((header + length + padcnt) / (W/8))`` beats
      per packet, no idle beat between back-to-back packets as long as the input keeps up.
    * Backpressure: ``i.ready`` follows ``o.ready`` combinationally and is low while header beats
      and a packet's final extra beat are emitted.
    * ``error`` of the last input beat is carried to the last output beat.
    """

    def __init__(self, width, *, atomics=None):
        check_width(width)
        if atomics is not None and atomics not in BYTE_ORDERS:
            raise ValueError(f"atomics must be None or one of {', '.join(BYTE_ORDERS)}, "
                             f"not {atomics!r}")
        self.width, self.atomics = width, atomics
        super().__init__({
            "i": In(PacketSignature(width, PACKET_DESC)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        d = i.payload.meta
        atomics = self.atomics is not None
        lengths = HEADER_LENGTHS + ((ATOMIC_HEADER,) if atomics else ())
        vp = m.submodules.packetizer = VarPacketizer(self.width, MAX_HEADER, _INNER_META,
                                                     lengths=lengths)

        bth = Signal(H.BTH.layout)
        reth = Signal(H.RETH.layout)
        immdt = Signal(H.IMMDT.layout)
        m.d.comb += [
            bth.opcode.eq(d.opcode), bth.se.eq(d.se), bth.m.eq(1), bth.padcnt.eq(d.padcnt),
            bth.tver.eq(0), bth.pkey.eq(DEFAULT_PKEY), bth.fecn.eq(0), bth.becn.eq(0),
            bth.resv6.eq(0), bth.dest_qp.eq(d.dest_qpn), bth.ack_req.eq(d.ack_req),
            bth.resv7.eq(0), bth.psn.eq(d.psn),
            reth.va.eq(d.va), reth.rkey.eq(d.rkey), reth.dma_len.eq(d.dma_len),
            immdt.imm.eq(d.imm),
        ]
        bth_lanes = H.BTH.to_lanes(bth)
        reth_lanes = H.RETH.to_lanes(reth)
        imm_lanes = H.IMMDT.to_lanes(immdt)
        ext = Mux(d.has_reth, Cat(reth_lanes, imm_lanes),
                  Cat(imm_lanes, Const(0, 8 * H.RETH.length)))

        hdr_len = Signal(range(MAX_HEADER + 1))
        m.d.comb += hdr_len.eq(H.BTH.length + Mux(d.has_reth, H.RETH.length, 0)
                               + Mux(d.has_imm, H.IMMDT.length, 0))
        data = i.payload.data
        if atomics:
            atomic = (d.opcode == opc.OP_RC_COMPARE_SWAP) | (d.opcode == opc.OP_RC_FETCH_ADD)
            target = Signal(H.ATOMIC_TARGET.layout)
            m.d.comb += [target.va.eq(d.va), target.rkey.eq(d.rkey)]
            ext = Mux(atomic, H.ATOMIC_TARGET.to_lanes(target), ext)
            with m.If(atomic):
                m.d.comb += hdr_len.eq(ATOMIC_HEADER)
            if self.atomics == "little":
                data = Mux(atomic, lanes_reversed(i.payload.data), i.payload.data)
            data = Mux(atomic & (d.src == WrSource.GENERATOR), self._generated(m), data)

        meta = vp.i.payload.meta
        u = meta.udp
        m.d.comb += [
            meta.hdr.eq(Cat(bth_lanes, ext)),
            meta.hdr_len.eq(hdr_len),
            meta.tail_len.eq(d.padcnt),
            u.dst_ip.eq(d.peer_ip),
            u.src_port.eq(d.udp_sport),
            u.dst_port.eq(H.UDP_PORT_ROCEV2),
            u.length.eq(hdr_len + d.length + d.padcnt + ICRC_BYTES),
            u.dscp.eq(d.dscp),
            u.ecn.eq(d.ecn),
            u.icrc.eq(1),
            vp.i.payload.data.eq(data),
            vp.i.payload.keep.eq(i.payload.keep),
            vp.i.payload.last.eq(i.payload.last),
            vp.i.payload.error.eq(i.payload.error),
            vp.i.valid.eq(i.valid),
            i.ready.eq(vp.i.ready),
        ]
        wiring.connect(m, vp.o, wiring.flipped(o))
        return m

    def _generated(self, m):
        """The operands of a traffic generator's atomic in wire order, in the lanes of the
        current payload beat: ``swap_add`` then ``compare``, 8 big-endian bytes each; a
        FETCH_ADD adds ``imm``, the COMPARE_SWAP of ``wr_id`` s swaps ``imm + s + 1`` for
        ``imm + s``."""
        i = self.i
        d = i.payload.meta
        cas = d.opcode == opc.OP_RC_COMPARE_SWAP
        base = Signal(64)
        m.d.comb += base.eq(d.imm + d.wr_id)
        swap_add = Mux(cas, base + 1, d.imm)
        compare = Mux(cas, base, 0)
        be = [lanes_reversed(Value.cast(v)[:64]) for v in (swap_add, compare)]
        if self.width > 64:
            return Cat(*be)
        second = Signal()               # the payload's second beat: the compare
        with m.If(i.valid & i.ready):
            m.d.sync += second.eq(~i.payload.last)
        return Mux(second, be[1], be[0])
