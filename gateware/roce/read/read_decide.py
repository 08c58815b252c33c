"""The READ requester's decision on a READ response or an acknowledgement, from its QP's table
entries."""

from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import AtomicOp
from rocegen.gateware.roce.read.read_layouts import (
    NAK_PSN_SEQ,
    NAK_REM_OP,
    OP_ATOMIC_ACK,
    OP_READ_FIRST,
    OP_READ_LAST,
    OP_READ_MIDDLE,
    OP_READ_ONLY,
    READ_EVENT,
    READ_HOLE,
    READ_HOLES,
    READ_INPUT,
    READ_NAK_STATUS,
    READ_VIEW,
    SYN_ACK,
    ReadVerdict,
)
from rocegen.gateware.roce.responder.resp_layouts import RESP_PLACE

__all__ = ["ReadDecide"]


def _offset(m, pmtu_log2, idx):
    """``idx`` path MTUs in bytes, and the path MTU (8..12, anything else taken as 256 bytes)."""
    offset, pmtu = Signal(31), Signal(13)
    with m.Switch(pmtu_log2):
        for log2 in range(9, 13):
            with m.Case(log2):
                m.d.comb += [offset.eq(idx << log2), pmtu.eq(1 << log2)]
        with m.Default():
            m.d.comb += [offset.eq(idx << 8), pmtu.eq(256)]
    return offset, pmtu


def _check(m, h, ent, idx, start):
    """A response's place at index ``idx`` of READ ``ent`` (``start``: a request started at
    ``idx``, besides 0): whether its opcode and its length fit, whether it is the READ's last,
    and the byte offset of its payload in the READ."""
    last = Signal()
    m.d.comb += last.eq(idx == ent.last_idx)
    start = (idx == 0) | start
    op = h.opcode
    # (an atomic's one answer is its ATOMIC_ACKNOWLEDGE; a READ's are READ responses)
    op_ok = Mux(ent.atomic != AtomicOp.NONE, (op == OP_ATOMIC_ACK) & last & start,
                ((op == OP_READ_ONLY) & last & start) | ((op == OP_READ_FIRST) & ~last & start) |
                ((op == OP_READ_MIDDLE) & ~last & (idx != 0)) |
                ((op == OP_READ_LAST) & last & (idx != 0)))
    offset, pmtu = _offset(m, ent.pmtu_log2, idx)
    len_ok = h.length == Mux(last, ent.length - offset, pmtu)
    return op_ok, len_ok, last, offset


class ReadDecide(wiring.Component):
    """Combinational verdict of one READ response or acknowledgement against its QP's outstanding
    READs (the rules of :mod:`rocegen.sim.models.read.read_requester`).

    Ports
    -----
    inp : In(READ_INPUT)
        A READ response's headers, or (``is_ack``) an acknowledgement in ``h.qp``, ``h.psn``,
        ``h.syndrome``, ``h.msn``, or (``is_timer``) the expiry of QP ``h.qp``'s hole timer
        (``poked``: by a poke).
    view : In(READ_VIEW)
        The QP's table as :class:`~rocegen.gateware.roce.read.read_track.ReadTrack` shows it.
    verdict : Out(ReadVerdict)
    advance, retire, close, hole_we, hole, fstep : Out(...)
        For the table (:class:`~rocegen.gateware.roce.read.read_layouts.ReadLookupSignature`): the
        head READ's expected response came (GOOD; ``retire``: its last, with no hole open), the
        hole is filled (``close``), the hole opens or changes (HOLE, AHEAD, responses lost
        after its front).
    place : Out(RESP_PLACE)
        The placement record of a response: ``write`` for GOOD, AHEAD and a HOLE at the next
        READ's first PSN, at ``local_addr + k x PMTU`` of its READ (``k``: the response's index
        in it), else the datagram is consumed unwritten.
    poke : Out(1)
        The QP's hole timer is to expire at once: a response in the current hole after the
        expected PSN once no original response of the head READ can come (``fresh`` clear),
        the first response of the oldest queued hole's request (its PSN, a DUPLICATE), neither
        while ``asked``; or the response that closes the current hole makes a ``redo`` hole
        the current one.
    has_event, event : Out(1), Out(READ_EVENT)
        The event (``seq`` left 0): the ACK of a GOOD response with no hole open (syndrome
        0x1F, its PSN and MSN; ``ndone`` 1 on the READ's last); for the response that fills a
        hole, the ACK of the PSN before the front (or, responses after the front lost, the NAK
        PSN sequence error of the front) with the hole's MSN and ``ndone`` the READs before
        the front; the NAK PSN sequence error of the expected PSN for a go-back-N gap and a
        STALL (``gap``: ``offset``, ``rest``, ``va`` of the reissue of the head READ); for
        HOLE, REASK and a STALL ``again`` the reissue alone (``quiet``, ``gap``, ``send``;
        REASK and STALL: the head READ's rest from the expected PSN); the NAK of a response
        whose AETH is not an ACK (0x61..0x63 as they are, any other as 0x63); an acknowledgement that passes
        unchanged. None for the others.

    Behaviour: no state; PSN comparisons modulo 2^24 (serial); the path MTU of each READ's entry
    (8..12, anything else taken as 256 bytes).
    """

    def __init__(self):
        super().__init__({
            "inp": In(READ_INPUT), "view": In(READ_VIEW),
            "verdict": Out(ReadVerdict), "advance": Out(1), "retire": Out(1), "close": Out(1),
            "hole_we": Out(1), "hole": Out(READ_HOLE), "fstep": Out(2), "push": Out(1),
            "push_psn": Out(24),
            "place": Out(RESP_PLACE), "has_event": Out(1), "event": Out(READ_EVENT),
            "poke": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        h, v, is_ack = self.inp.h, self.view, self.inp.is_ack
        ent, e2, hole, k = v.entry, v.entry2, v.hole, v.cnt
        s = SimpleNamespace()
        s.syn_ack = h.syndrome[5:8] == 0
        exp, p, r, s.r_any = Signal(24), Signal(24), Signal(24), Signal(24)
        m.d.comb += [exp.eq(ent.first + k), p.eq(Mux(is_ack & ~s.syn_ack, h.psn - 1, h.psn)),
                     r.eq(e2.first + hole.fcnt), s.r_any.eq(Mux(v.has2, r, v.tail_last + 1))]
        s.exp = exp
        s.behind, s.at = (p - exp)[23], p == exp
        s.after_tail = (v.tail_last - p)[23]
        s.in_head = ~(ent.first + ent.last_idx - h.psn)[23]
        s.in_front = ~(e2.first + e2.last_idx - h.psn)[23]
        s.r = r
        s.to_front = Signal(24)
        m.d.comb += s.to_front.eq(h.psn - r)
        # the places a response may take: in the head READ at the expected PSN (A), in the
        # second READ (B: its first PSN, or the front), the first of the third (C)
        s.kb = Signal.like(k)
        m.d.comb += s.kb.eq(Mux(v.open, hole.fcnt, 0))
        s.a = _check(m, h, ent, k, (k == v.rs) | (v.open & (k == hole.hs)))
        s.b = _check(m, h, e2, s.kb, s.kb == v.rs2)
        s.c = _check(m, h, v.entry3, 0, 0)
        s.use_b, s.use_c = Signal(), Signal()
        self._verdict(m, s)
        self._update(m, s)
        self._outputs(m, s)
        return m

    def _verdict(self, m, s):
        """The verdict; ``s.use_b``: the response's place is in the second READ."""
        h, v, verdict = self.inp.h, self.view, self.verdict
        target = Signal(ReadVerdict)            # the verdict of a right response there
        checked = Signal()                      # the response's place is known: check it
        with m.If(self.inp.is_timer):
            m.d.comb += verdict.eq(Mux(v.open, ReadVerdict.REASK,
                                       Mux(v.has & ~self.inp.poked, ReadVerdict.STALL,
                                           ReadVerdict.IDLE)))
        with m.Elif(self.inp.is_ack):
            with m.If(~v.has | s.behind):
                m.d.comb += verdict.eq(ReadVerdict.ACK_PASS)
            with m.Else():
                m.d.comb += verdict.eq(Mux(v.open, ReadVerdict.ACK_HOLD, ReadVerdict.ACK_GAP))
        with m.Elif(~v.has):
            m.d.comb += verdict.eq(ReadVerdict.UNKNOWN)
        with m.Elif(s.behind):
            m.d.comb += verdict.eq(ReadVerdict.DUPLICATE)
        with m.Elif(s.after_tail):
            m.d.comb += verdict.eq(ReadVerdict.UNKNOWN)
        with m.Elif(v.open):
            with m.If(s.in_head):
                m.d.comb += [checked.eq(s.at), target.eq(ReadVerdict.GOOD),
                             verdict.eq(ReadVerdict.GAP)]
            with m.Elif(~v.has2 | s.to_front[23]):
                m.d.comb += verdict.eq(ReadVerdict.DUPLICATE)
            with m.Elif(s.to_front == 0):
                m.d.comb += [checked.eq(1), s.use_b.eq(1), target.eq(ReadVerdict.AHEAD)]
            with m.Elif(v.qn == READ_HOLES):
                m.d.comb += verdict.eq(ReadVerdict.GAP)
            with m.Elif(s.in_front):
                m.d.comb += verdict.eq(ReadVerdict.HOLE)
            with m.Elif(v.has3 & (h.psn == v.entry3.first)):
                m.d.comb += [checked.eq(1), s.use_c.eq(1), target.eq(ReadVerdict.HOLE)]
            with m.Else():
                m.d.comb += verdict.eq(ReadVerdict.GAP)
        with m.Elif(s.at):
            m.d.comb += [checked.eq(1), target.eq(ReadVerdict.GOOD)]
        with m.Elif(s.in_head):
            m.d.comb += verdict.eq(ReadVerdict.HOLE)
        with m.Elif(v.has2 & (h.psn == v.entry2.first)):
            m.d.comb += [checked.eq(1), s.use_b.eq(1), target.eq(ReadVerdict.HOLE)]
        with m.Else():
            m.d.comb += verdict.eq(ReadVerdict.GAP)
        op_ok = Mux(s.use_c, s.c[0], Mux(s.use_b, s.b[0], s.a[0]))
        len_ok = Mux(s.use_c, s.c[1], Mux(s.use_b, s.b[1], s.a[1]))
        with m.If(checked):
            with m.If(~op_ok):
                m.d.comb += verdict.eq(ReadVerdict.OPCODE)
            with m.Elif((h.opcode != OP_READ_MIDDLE) & ~s.syn_ack):
                m.d.comb += verdict.eq(ReadVerdict.NAK)
            with m.Elif(~len_ok):
                m.d.comb += verdict.eq(ReadVerdict.LENGTH)
            with m.Else():
                m.d.comb += verdict.eq(target)

    def _update(self, m, s):
        """What the verdict does to the table: the head, the holes and the front."""
        h, v, verdict, hole, new = self.inp.h, self.view, self.verdict, self.view.hole, self.hole
        a_last, b_last, c_last = s.a[2], s.b[2], s.c[2]
        good = verdict == ReadVerdict.GOOD
        lost = v.open & ((verdict == ReadVerdict.GAP) & ~s.in_head |
                         (verdict == ReadVerdict.ACK_HOLD) & ~(h.psn - s.r_any)[23])
        s.closing = good & v.open & a_last
        m.d.comb += self.poke.eq(
            ~hole.asked & (
                (verdict == ReadVerdict.GAP) & v.open & s.in_head & ~hole.fresh |
                (verdict == ReadVerdict.DUPLICATE) & v.open & (v.qn != 0) &
                (h.psn == v.nxt.psn)) |
            s.closing & (v.qn != 0) & (hole.redo != 0))
        m.d.comb += [
            self.advance.eq(good & ~s.closing),
            self.retire.eq(good & ~v.open & a_last),
            self.close.eq(s.closing),
            new.eq(hole),
        ]
        with m.Switch(verdict):
            with m.Case(ReadVerdict.HOLE):
                with m.If(v.open):
                    # one more hole: the rest of the front READ; the front: the READ after it,
                    # after the response when it is that READ's first
                    m.d.comb += [
                        self.hole_we.eq(1), self.push.eq(1), self.push_psn.eq(s.r),
                        new.msn.eq(Mux(s.use_c, h.msn, hole.msn)), new.fresh.eq(0),
                        new.fcnt.eq(s.use_c & ~c_last),
                        self.fstep.eq(Mux(s.use_c, 1 + c_last, 1)),
                    ]
                with m.Else():
                    # the first hole: the rest of the head READ; the front as above
                    m.d.comb += [
                        self.hole_we.eq(1), new.fresh.eq(~s.use_b), new.asked.eq(0),
                        new.redo.eq(0),
                        new.hs.eq(v.cnt), new.lost.eq(0), new.msn.eq(Mux(s.use_b, h.msn, 0)),
                        new.fcnt.eq(s.use_b & ~b_last),
                        self.fstep.eq(Mux(s.use_b, 1 + b_last, 1)),
                    ]
            with m.Case(ReadVerdict.AHEAD):
                m.d.comb += [
                    self.hole_we.eq(1),
                    new.fcnt.eq(Mux(b_last, 0, s.kb + 1)), self.fstep.eq(b_last), new.fresh.eq(0),
                    new.msn.eq(Mux(h.opcode == OP_READ_MIDDLE, hole.msn, h.msn)),
                ]
            with m.Case(ReadVerdict.REASK):
                # the current hole asked for again: that request starts at the expected PSN;
                # the responses of every hole queued now come before it
                m.d.comb += [self.hole_we.eq(1), new.hs.eq(v.cnt), new.asked.eq(1),
                             new.redo.eq(v.qn)]
            with m.Case(ReadVerdict.GOOD):
                # progress in the current hole; on its close, the next hole queued is the
                # current one: its request starts there
                pop = s.closing & (v.qn != 0)
                m.d.comb += [
                    self.hole_we.eq(pop | (v.open & ~s.closing & (hole.asked | hole.fresh))),
                    new.hs.eq(Mux(pop, v.nxt.idx, hole.hs)), new.asked.eq(0), new.fresh.eq(0),
                    new.redo.eq(Mux(pop & (hole.redo != 0), hole.redo - 1, hole.redo)),
                ]
            with m.Default():
                m.d.comb += [self.hole_we.eq(lost), new.lost.eq(1)]

    def _outputs(self, m, s):
        """The placement record and the event."""
        h, v, verdict, ev = self.inp.h, self.view, self.verdict, self.event
        ent, e2, hole = v.entry, v.entry2, v.hole
        good = verdict == ReadVerdict.GOOD
        hole_v = verdict == ReadVerdict.HOLE
        reask = verdict == ReadVerdict.REASK
        stall = verdict == ReadVerdict.STALL
        # (a request the requester sends itself; a STALL again: the go-back-N before did not
        # bring the head READ's response, its NAK ignored as a repeat or its request lost)
        own = hole_v | reask | stall & self.inp.again
        gap = (verdict == ReadVerdict.GAP) & ~v.open | (verdict == ReadVerdict.ACK_GAP) | \
            stall & ~self.inp.again
        queued = v.qn != 0
        m.d.comb += [
            self.place.write.eq(good | (hole_v & (s.use_b | s.use_c)) |
                                (verdict == ReadVerdict.AHEAD)),
            self.place.addr.eq(Mux(s.use_c, v.entry3.local_addr,
                                   Mux(s.use_b, e2.local_addr + s.b[3],
                                       ent.local_addr + s.a[3]))),
            self.place.skip.eq(h.skip), self.place.length.eq(h.length),
        ]
        # the reissue: the rest of the head READ from the expected PSN (go-back-N, the first
        # hole) or of the front READ from the front (a later hole)
        at_front = hole_v & v.open
        r_ent = Signal.like(ent)
        m.d.comb += r_ent.eq(Mux(at_front, e2, ent))
        offset, _ = _offset(m, r_ent.pmtu_log2, Mux(at_front, hole.fcnt, v.cnt))
        fatal = Signal()
        for syn in READ_NAK_STATUS:
            with m.If(h.syndrome == syn):
                m.d.comb += fatal.eq(1)
        m.d.comb += [
            self.has_event.eq((good & (~v.open | s.closing)) | gap | own |
                              (verdict == ReadVerdict.NAK) | (verdict == ReadVerdict.ACK_PASS)),
            ev.ack.qp.eq(h.qp), ev.ack.msn.eq(h.msn), ev.wr_id.eq(r_ent.wr_id),
            ev.quiet.eq(own), ev.gap.eq(gap | own), ev.send.eq(own),
            ev.offset.eq(offset), ev.rest.eq(r_ent.length - offset), ev.va.eq(r_ent.va + offset),
            ev.atomic.eq(r_ent.atomic), ev.local_addr.eq(r_ent.local_addr), ev.gen.eq(r_ent.gen),
            ev.ndone.eq(Mux(s.closing, Mux(queued, v.nxt.dist, v.fdist),
                            good & ~v.open & s.a[2])),
        ]
        with m.If(s.closing):
            with m.If(queued):
                m.d.comb += [ev.ack.syndrome.eq(SYN_ACK), ev.ack.psn.eq(v.nxt.psn - 1)]
            with m.Else():
                m.d.comb += [ev.ack.syndrome.eq(Mux(hole.lost, NAK_PSN_SEQ, SYN_ACK)),
                             ev.ack.psn.eq(Mux(hole.lost, s.r_any, s.r_any - 1))]
            m.d.comb += ev.ack.msn.eq(hole.msn)
        with m.Elif(good):
            m.d.comb += [ev.ack.syndrome.eq(SYN_ACK), ev.ack.psn.eq(h.psn)]
        with m.Elif(gap | own):
            m.d.comb += [ev.ack.syndrome.eq(NAK_PSN_SEQ), ev.ack.psn.eq(Mux(at_front, s.r, s.exp))]
        with m.Elif(verdict == ReadVerdict.NAK):
            m.d.comb += [ev.ack.syndrome.eq(Mux(fatal, h.syndrome, NAK_REM_OP)),
                         ev.ack.psn.eq(h.psn)]
        with m.Else():
            m.d.comb += [ev.ack.syndrome.eq(h.syndrome), ev.ack.psn.eq(h.psn)]
