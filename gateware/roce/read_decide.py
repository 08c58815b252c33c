"""The READ requester's decision on a READ response or an acknowledgement, from its QP's table
entry."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.read_layouts import (
    NAK_PSN_SEQ,
    NAK_REM_OP,
    OP_READ_FIRST,
    OP_READ_LAST,
    OP_READ_MIDDLE,
    OP_READ_ONLY,
    READ_EVENT,
    READ_INPUT,
    READ_NAK_STATUS,
    READ_VIEW,
    SYN_ACK,
    ReadVerdict,
)
from rocegen.gateware.roce.resp_layouts import RESP_PLACE

__all__ = ["ReadDecide"]


class ReadDecide(wiring.Component):
    """Combinational verdict of one READ response or acknowledgement against its QP's outstanding
    READs (the rules of :mod:`rocegen.sim.models.read_requester`).

    Ports
    -----
    inp : In(READ_INPUT)
        A READ response's headers, or (``is_ack``) an acknowledgement in ``h.qp``, ``h.psn``,
        ``h.syndrome``, ``h.msn``.
    view : In(READ_VIEW)
        The QP's table as :class:`~rocegen.gateware.roce.read_track.ReadTrack` shows it.
    verdict : Out(ReadVerdict)
    advance, retire : Out(1)
        For the table: the head READ's expected response came (GOOD), and it was its last.
    place : Out(RESP_PLACE)
        The placement record of a response: ``write`` for GOOD at ``local_addr + k x PMTU``
        (``k`` the response's index in the READ), else the datagram is consumed unwritten.
    has_event, event : Out(1), Out(READ_EVENT)
        The event for the retry engine (``seq`` left 0): the ACK of a GOOD response (syndrome
        0x1F, its PSN and MSN; ``done`` on the READ's last), the NAK PSN sequence error of the
        expected PSN for a gap (``gap``, ``offset`` and ``rest`` of the reissue), the NAK of a
        response whose AETH is not an ACK (0x61..0x63 as they are, any other as 0x63), an
        acknowledgement that passes unchanged. None for the responses dropped.

    Behaviour: no state; PSN comparisons modulo 2^24 (serial); the path MTU of the READ's entry
    (8..12, anything else taken as 256 bytes).
    """

    def __init__(self):
        super().__init__({
            "inp": In(READ_INPUT), "view": In(READ_VIEW),
            "verdict": Out(ReadVerdict), "advance": Out(1), "retire": Out(1),
            "place": Out(RESP_PLACE), "has_event": Out(1), "event": Out(READ_EVENT),
        })

    def elaborate(self, platform):
        m = Module()
        h, v, is_ack = self.inp.h, self.view, self.inp.is_ack
        ent, k = v.entry, v.cnt
        syn_ack = h.syndrome[5:8] == 0
        exp, p, d, room = Signal(24), Signal(24), Signal(24), Signal(24)
        m.d.comb += [exp.eq(ent.first + k), p.eq(Mux(is_ack & ~syn_ack, h.psn - 1, h.psn)),
                     d.eq(p - exp), room.eq(v.tail_last - p)]
        behind, at, after_tail = d[23], d == 0, room[23]

        # the response's place in the head READ: opcode, AETH, length
        last = k == ent.last_idx
        start = (k == 0) | (k == v.rs)
        op = h.opcode
        op_ok = (((op == OP_READ_ONLY) & last & start) | ((op == OP_READ_FIRST) & ~last & start) |
                 ((op == OP_READ_MIDDLE) & ~last & (k != 0)) | ((op == OP_READ_LAST) & last & (k != 0)))
        offset, pmtu = Signal(31), Signal(13)
        with m.Switch(ent.pmtu_log2):
            for log2 in range(9, 13):
                with m.Case(log2):
                    m.d.comb += [offset.eq(k << log2), pmtu.eq(1 << log2)]
            with m.Default():
                m.d.comb += [offset.eq(k << 8), pmtu.eq(256)]
        rest = Signal(31)
        m.d.comb += rest.eq(ent.length - offset)
        len_ok = h.length == Mux(last, rest, pmtu)

        verdict = self.verdict
        with m.If(is_ack):
            m.d.comb += verdict.eq(Mux(~v.has | behind, ReadVerdict.ACK_PASS, ReadVerdict.ACK_GAP))
        with m.Elif(~v.has):
            m.d.comb += verdict.eq(ReadVerdict.UNKNOWN)
        with m.Elif(behind):
            m.d.comb += verdict.eq(ReadVerdict.DUPLICATE)
        with m.Elif(~at):
            m.d.comb += verdict.eq(Mux(after_tail, ReadVerdict.UNKNOWN, ReadVerdict.GAP))
        with m.Elif(~op_ok):
            m.d.comb += verdict.eq(ReadVerdict.OPCODE)
        with m.Elif((op != OP_READ_MIDDLE) & ~syn_ack):
            m.d.comb += verdict.eq(ReadVerdict.NAK)
        with m.Elif(~len_ok):
            m.d.comb += verdict.eq(ReadVerdict.LENGTH)
        with m.Else():
            m.d.comb += verdict.eq(ReadVerdict.GOOD)

        good = verdict == ReadVerdict.GOOD
        gap = (verdict == ReadVerdict.GAP) | (verdict == ReadVerdict.ACK_GAP)
        m.d.comb += [
            self.advance.eq(good), self.retire.eq(good & last),
            self.place.write.eq(good), self.place.addr.eq(ent.local_addr + offset),
            self.place.skip.eq(h.skip), self.place.length.eq(h.length),
        ]
        ev = self.event
        fatal = Signal()
        m.d.comb += fatal.eq(0)
        for syn in READ_NAK_STATUS:
            with m.If(h.syndrome == syn):
                m.d.comb += fatal.eq(1)
        m.d.comb += [
            self.has_event.eq(good | gap | (verdict == ReadVerdict.NAK) |
                              (verdict == ReadVerdict.ACK_PASS)),
            ev.ack.qp.eq(h.qp), ev.ack.msn.eq(h.msn), ev.wr_id.eq(ent.wr_id),
            ev.done.eq(good & last), ev.gap.eq(gap), ev.offset.eq(offset), ev.rest.eq(rest),
        ]
        with m.If(good):
            m.d.comb += [ev.ack.syndrome.eq(SYN_ACK), ev.ack.psn.eq(h.psn)]
        with m.Elif(gap):
            m.d.comb += [ev.ack.syndrome.eq(NAK_PSN_SEQ), ev.ack.psn.eq(exp)]
        with m.Elif(verdict == ReadVerdict.NAK):
            m.d.comb += [ev.ack.syndrome.eq(Mux(fatal, h.syndrome, NAK_REM_OP)),
                         ev.ack.psn.eq(h.psn)]
        with m.Else():
            m.d.comb += [ev.ack.syndrome.eq(h.syndrome), ev.ack.psn.eq(h.psn)]
        return m
