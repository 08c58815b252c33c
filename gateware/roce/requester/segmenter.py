import functools
import operator
from typing import NamedTuple

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    INDEX_BITS,
    PACKET_DESC,
    QP_SEGMENT,
    WORK_REQUEST,
    WrOpcode,
)
from rocegen.wire import opcodes as opc
from rocegen.wire import verbs
from rocegen.wire.atomics import ATOMIC_OPERAND_BYTES

__all__ = ["Segmenter", "WR_IN", "INDEX_BITS", "PacketLogic", "describe_packet"]

#: A work request together with the state of its QP when it starts.
WR_IN = data.StructLayout({"wr": WORK_REQUEST, "qp": QP_SEGMENT})


# (FIRST, MIDDLE, LAST, ONLY) BTH opcodes of each work request opcode that sends a message
_OPCODES = {kind: opc.message_opcodes(kind.value) for kind in WrOpcode
            if verbs.WrOpcode(kind.value).sends_payload}


def _any_of(value, kinds):
    """``value`` equals one of ``kinds`` (comparisons or-ed in order)."""
    return functools.reduce(operator.or_, (value == kind for kind in kinds))


class PacketLogic(NamedTuple):
    """Signals built by :func:`describe_packet`."""
    desc: object          # Signal(PACKET_DESC): the packet's descriptor
    last: object          # the packet is the message's last
    last_index: object    # index of the message's last packet (packets - 1)
    length: object        # payload bytes of the packet


def describe_packet(m, wr, index, psn, *, dest_qpn, rkey, base_va, pmtu_log2, ack_every_log2,
                    offset=None, reads=False, atomics=False):
    """Combinational description of packet ``index`` of work request ``wr``.

    ``psn`` is the PSN of that packet; the QP's path MTU (``pmtu_log2`` 8..12, anything else is
    taken as 256 bytes: the QP table's writer validates it), AckReq period and the RETH fields
    come from its state. Adds the logic to ``m`` and returns a :class:`PacketLogic`. The
    descriptor's ``src``, ``peer_ip``, ``udp_sport``, ``dscp`` and ``ecn`` are left 0 for the
    caller to fill. Nothing here holds state: the caller keeps the packet index and the running
    PSN of the message. ``offset``, when given, is the byte offset of the packet in the message
    (``index`` times the path MTU), kept by the caller so that it need not be computed here.

    With ``reads``, a READ work request (:attr:`WrOpcode.READ`) is one RDMA READ request packet
    (``last``, no payload, AckReq, no SE) asking for the message from ``offset`` on: RETH virtual
    address ``base_va + remote_offset + offset``, DMA length ``length - offset``; its PSNs (one
    per path MTU of the whole READ, ``last_index + 1``) are the caller's to account. The RETH
    fields of a packet without RETH are then of its offset too (nobody reads them). Without
    ``reads`` the descriptor of a READ (and of codes 5..7) is meaningless: the caller refuses
    those requests.

    With ``atomics`` (and ``reads``), a COMPARE_SWAP or FETCH_ADD work request is one request
    packet (BTH 0x13 or 0x14, ``last``, AckReq, no SE, ``last_index`` 0): the AtomicETH's
    target (``va`` = ``base_va + remote_offset``, ``rkey``) from the descriptor, its operands
    the 16-byte payload at ``local_addr`` (:data:`~rocegen.wire.atomics.ATOMIC_OPERAND_BYTES`;
    the packet builder puts them in wire order); ``has_reth`` 0, ``padcnt`` 0.
    """
    plog = Signal(range(13))
    with m.Switch(pmtu_log2):
        for log2 in range(8, 13):
            with m.Case(log2):
                m.d.comb += plog.eq(log2)
        with m.Default():
            m.d.comb += plog.eq(8)
    pmtu = Signal(13)
    given_offset = offset
    offset = Signal(31)             # bytes of the message before this packet
    last_index = Signal(INDEX_BITS)
    length_m1 = Signal(31)
    m.d.comb += length_m1.eq(wr.length - 1)
    with m.Switch(plog):
        for log2 in range(8, 13):
            with m.Case(log2):
                m.d.comb += [pmtu.eq(1 << log2),
                             last_index.eq(Mux(wr.length == 0, 0, length_m1 >> log2))]
                if given_offset is None:
                    m.d.comb += offset.eq(index << log2)
    if given_offset is not None:
        m.d.comb += offset.eq(given_offset)
    remaining = Signal(31)
    m.d.comb += remaining.eq(wr.length - offset)
    first = index == 0
    last = Signal()
    m.d.comb += last.eq(remaining <= pmtu)
    length = Signal(13)
    m.d.comb += length.eq(Mux(last, remaining, pmtu))
    if reads:
        is_read = wr.opcode == WrOpcode.READ
        m.d.comb += [last.eq((remaining <= pmtu) | is_read),
                     length.eq(Mux(is_read, 0, Mux(last, remaining, pmtu)))]

    opcode = Signal(8)
    for kind, (op_first, op_middle, op_last, op_only) in _OPCODES.items():
        with m.If(wr.opcode == kind):
            with m.If(first & last):
                m.d.comb += opcode.eq(op_only)
            with m.Elif(first):
                m.d.comb += opcode.eq(op_first)
            with m.Elif(last):
                m.d.comb += opcode.eq(op_last)
            with m.Else():
                m.d.comb += opcode.eq(op_middle)
    if reads:
        with m.If(is_read):
            m.d.comb += opcode.eq(opc.OP_RC_RDMA_READ_REQUEST)
    is_write = _any_of(wr.opcode, (kind for kind, ops in _OPCODES.items() if opc.has_reth(ops[0])))
    has_imm = _any_of(wr.opcode, (kind for kind, ops in _OPCODES.items() if opc.has_imm(ops[3])))
    mask = Signal(8)
    with m.Switch(ack_every_log2):
        for n in range(8):
            with m.Case(n):
                m.d.comb += mask.eq((1 << n) - 1)
    periodic = (index[:8] & mask) == mask

    d = Signal(PACKET_DESC)
    m.d.comb += [
        d.wr_id.eq(wr.wr_id), d.qp.eq(wr.qp), d.dest_qpn.eq(dest_qpn),
        d.opcode.eq(opcode), d.psn.eq(psn),
        d.ack_req.eq(last | periodic), d.se.eq(last & (wr.opcode != WrOpcode.WRITE)),
        d.padcnt.eq(Mux(last, -length[:2], 0)),
        d.local_addr.eq(wr.local_addr + offset),
        d.length.eq(length),
        d.has_reth.eq(first & is_write),
        d.va.eq(base_va + wr.remote_offset), d.rkey.eq(rkey), d.dma_len.eq(wr.length),
        d.has_imm.eq(last & has_imm), d.imm.eq(wr.imm),
        d.last.eq(last),
    ]
    if reads:
        m.d.comb += [
            d.se.eq(last & (wr.opcode != WrOpcode.WRITE) & ~is_read),
            d.has_reth.eq((first & is_write) | is_read),
            d.va.eq(base_va + wr.remote_offset + offset), d.dma_len.eq(remaining),
        ]
    if atomics:
        cas = wr.opcode == WrOpcode.COMPARE_SWAP
        with m.If(cas | (wr.opcode == WrOpcode.FETCH_ADD)):
            m.d.comb += [
                last.eq(1), last_index.eq(0), length.eq(ATOMIC_OPERAND_BYTES),
                opcode.eq(Mux(cas, opc.OP_RC_COMPARE_SWAP, opc.OP_RC_FETCH_ADD)),
                d.ack_req.eq(1), d.se.eq(0), d.padcnt.eq(0), d.has_reth.eq(0), d.has_imm.eq(0),
                d.local_addr.eq(wr.local_addr), d.va.eq(base_va + wr.remote_offset),
                d.dma_len.eq(0),
            ]
    return PacketLogic(d, last, last_index, length)


class Segmenter(wiring.Component):
    """Segmentation of RC work requests into packet descriptors.

    ``i`` carries a work request and its QP's state (:data:`WR_IN`); ``o`` carries one
    :data:`~rocegen.gateware.roce.layouts.PACKET_DESC` per packet of the message: FIRST, MIDDLE
    and LAST packets of exactly one path MTU but the last, or one ONLY packet for a message that
    fits (including a 0-byte one); RETH (virtual address = base + offset, R_Key, message length)
    on FIRST/ONLY of a WRITE; ImmDt on LAST/ONLY of a *_WITH_IMMEDIATE; PadCnt on the last
    packet; SE on the last packet of a SEND and of a WRITE with immediate; AckReq on the last
    packet and on every 2^``ack_every_log2``-th packet; PSNs consecutive modulo 2^24 from the
    QP's next PSN.

    When a message's last descriptor leaves, ``done`` pulses with ``next_psn`` (for the QP
    table) and the work request is taken from ``i``.

    With ``reads`` (default off), a READ work request is one RDMA READ request descriptor
    (:func:`describe_packet`) and ``next_psn`` skips every PSN of its responses; without it a
    READ's descriptor is meaningless (the scheduler refuses READs when built without them).
    With ``atomics`` too, a COMPARE_SWAP or FETCH_ADD is one atomic request descriptor.

    The packet logic itself is :func:`describe_packet`, stateless; this component adds the
    packet index and running PSN of one message in registers. The multi-QP
    :class:`~rocegen.gateware.roce.requester.scheduler.Scheduler` uses the same function with that progress
    kept per QP in RAM.

    Throughput: one descriptor per cycle. Latency: 0 (combinational from ``i`` to ``o``).
    Backpressure: ``i`` is held until the message's last descriptor is taken by ``o``.
    """

    def __init__(self, *, reads=False, atomics=False):
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        if atomics and not reads:
            raise ValueError("atomics needs reads=True (an atomic is answered as a READ)")
        self.reads, self.atomics = reads, atomics
        super().__init__({
            "i": In(stream.Signature(WR_IN)),
            "o": Out(stream.Signature(PACKET_DESC)),
            "done": Out(1),
            "next_psn": Out(24),
        })

    def elaborate(self, platform):
        m = Module()
        i, o = self.i, self.o
        wr, qp = i.payload.wr, i.payload.qp

        index = Signal(INDEX_BITS)  # packet index within the message
        psn_reg = Signal(24)
        psn = Mux(index == 0, qp.psn, psn_reg)
        pk = describe_packet(m, wr, index, psn, dest_qpn=qp.dest_qpn, rkey=qp.rkey,
                             base_va=qp.base_va, pmtu_log2=qp.pmtu_log2,
                             ack_every_log2=qp.ack_every_log2, reads=self.reads,
                             atomics=self.atomics)
        m.d.comb += [
            o.payload.eq(pk.desc),
            o.valid.eq(i.valid),
            i.ready.eq(o.ready & pk.last),
        ]
        with m.If(o.valid & o.ready):
            with m.If(pk.last):
                m.d.sync += index.eq(0)
                m.d.comb += [self.done.eq(1), self.next_psn.eq(psn + 1)]
                if self.reads:      # (index is the last index but for a READ, at 0)
                    m.d.comb += self.next_psn.eq(psn + (pk.last_index - index) + 1)
            with m.Else():
                m.d.sync += [index.eq(index + 1), psn_reg.eq(psn + 1)]
        return m
