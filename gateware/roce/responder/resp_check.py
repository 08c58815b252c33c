"""The RC responder's checks of one request: its verdict."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import QP_CONTEXT, QpState
from rocegen.gateware.roce.responder.resp_layouts import (
    MR_ENTRY,
    RECV_POST,
    RESP_HEADER,
    RESP_STATE,
    RespKind,
    RespVerdict,
)
from rocegen.gateware.roce.responder.resp_precheck import RESP_FACTS, kind_of

__all__ = ["RespCheck", "psn_place"]


def psn_place(m, psn, epsn):
    """Signals ``(ahead, behind)``: the 24-bit ``psn`` against ``epsn`` (ahead: 1 .. 2^23 - 1
    past it; behind: 2^23 or more, modulo 2^24, i.e. before it)."""
    delta = Signal(24)
    m.d.comb += delta.eq(psn - epsn)
    return (delta != 0) & ~delta[23], delta[23]


class RespCheck(wiring.Component):
    """The verdict on one request: the checks of :mod:`rocegen.sim.models.responder.responder` (its
    reference model, which lists them in order), first failing check first.

    Ports
    -----
    h, f : In(RESP_HEADER), In(RESP_FACTS)
        The request's headers and their facts
        (:class:`~rocegen.gateware.roce.responder.resp_precheck.RespPrecheck`).
    in_table, ctx : In(1), In(QP_CONTEXT)
        DestQP names a QP of the table; that QP's context (``state``, ``peer_ip``,
        ``pmtu_log2`` are used).
    st : In(RESP_STATE)
        The QP's responder state (``epsn`` not used).
    ahead, behind : In(1), In(1)
        The request's PSN against the QP's ePSN (:func:`psn_place`), worked out by the caller
        (so that it may take them from another source than ``st``).
    mr : In(MR_ENTRY)
        The QP's memory region.
    rq_valid, rq_head : In(1), In(RECV_POST)
        The QP has a receive buffer posted; the first one (``length`` is used).
    rd_full : In(1)
        The QP's READ queue is full.
    res_hit : In(1)
        The QP's atomic results hold one for the request's PSN (a duplicate atomic is answered
        with it).
    verdict : Out(RespVerdict)
    length_fault : Out(1)
        With ``verdict`` INVALID: the request failed the last check, its bytes against the
        message's (a SEND's buffer, a WRITE's DMA length), not an earlier one (opcode,
        sequence, segmentation): a SEND's receive completes with a length error.
    from_peer : Out(1)
        The request comes from its QP's peer: DestQP in the table, the QP RTR or RTS, the
        IPv4 source its peer's, the default P_Key (every verdict but the first four drops).
    rd_ok : Out(1)
        A READ request passes the checks of a READ but the opcode sequence: no payload, a DMA
        length of at most 2^31, a PMTU code 8..12, room in the READ queue, the region (with a
        DMA length > 0: the R_Key, read access, the range). With ``verdict`` DUPLICATE it is
        executed again; an EXECUTED READ has it. An atomic: room in the READ queue and
        ``res_hit`` (a duplicate is answered from its result, never executed again).

    Behaviour
    ---------
    Combinational (latency 0, no state, no handshakes): the caller registers the verdict;
    :class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide` makes the actions of it.
    """

    def __init__(self):
        super().__init__({
            "h": In(RESP_HEADER), "f": In(RESP_FACTS), "in_table": In(1), "ctx": In(QP_CONTEXT),
            "st": In(RESP_STATE), "ahead": In(1), "behind": In(1), "mr": In(MR_ENTRY),
            "rq_valid": In(1), "rq_head": In(RECV_POST), "rd_full": In(1), "res_hit": In(1),
            "verdict": Out(RespVerdict), "length_fault": Out(1), "from_peer": Out(1),
            "rd_ok": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        h, f, st, ctx, mr = self.h, self.f, self.st, self.ctx, self.mr
        reth, n, v = h.reth, h.length, self.verdict
        start, end = f.first | f.only, f.last | f.only

        # ---- the opcode's place in the QP's message, the packet's length for the QP's PMTU
        seq_bad = Mux(st.kind == RespKind.NONE, f.middle | f.last,
                      start | f.read | f.atomic | (kind_of(f) != st.kind.as_value()))
        seg_ok = f.seg_ok.bit_select(ctx.pmtu_log2, 1)
        # (a READ: no payload, a length and PMTU its responses can have, room in its queue)
        rd_bad = f.read_len_bad | (ctx.pmtu_log2 < 8) | (ctx.pmtu_log2 > 12) | self.rd_full
        # (an atomic: no payload, room in the READ queue; its region read and write)
        at_bad = f.read_len_bad | self.rd_full
        # ---- a WRITE's or READ's region; the bytes the message has left, as this packet
        # finds them
        region_end = Signal(34)
        m.d.comb += region_end.eq(mr.base + mr.length)
        access_ok = f.dma_zero | (
            (reth.rkey == mr.rkey) & Mux(f.read, mr.read, Mux(f.atomic, mr.read & mr.write,
                                                              mr.write)) &
            (reth.va >= mr.base) & (f.va_end <= region_end))
        m.d.comb += self.rd_ok.eq(Mux(f.atomic, ~self.rd_full & self.res_hit,
                                      ~rd_bad & access_ok))
        rem = st.remaining
        len_bad = ~f.read & ~f.atomic & Mux(start & f.send, n > self.rq_head.length,
                                Mux(start, f.write_len_bad,
                                    Mux(f.write, Mux(end, n != rem, n >= rem), n > rem)))

        state_ok = (ctx.state == QpState.RTR) | (ctx.state == QpState.RTS)
        peer_ip_ok = h.src_ip == ctx.peer_ip
        m.d.comb += self.from_peer.eq(self.in_table & state_ok & peer_ip_ok & f.pkey_ok)

        with m.If(~self.in_table):
            m.d.comb += v.eq(RespVerdict.DROP_QP)
        with m.Elif(~state_ok):
            m.d.comb += v.eq(RespVerdict.DROP_STATE)
        with m.Elif(~peer_ip_ok):
            m.d.comb += v.eq(RespVerdict.DROP_PEER)
        with m.Elif(~f.pkey_ok):
            m.d.comb += v.eq(RespVerdict.DROP_PKEY)
        with m.Elif(st.error):
            m.d.comb += v.eq(RespVerdict.DROP_ERROR)
        with m.Elif(self.ahead):                                    # ahead of ePSN
            m.d.comb += v.eq(Mux(st.nak_pending, RespVerdict.SEQ_DROP, RespVerdict.SEQ_NAK))
        with m.Elif(self.behind):                                   # behind: a duplicate
            m.d.comb += v.eq(RespVerdict.DUPLICATE)
        with m.Elif((~f.send & ~f.write & ~f.read & ~f.atomic) | seq_bad):
            m.d.comb += v.eq(RespVerdict.INVALID)
        with m.Elif(f.needs_rq & ~self.rq_valid):
            m.d.comb += v.eq(RespVerdict.RNR)
        with m.Elif(Mux(f.read, rd_bad, Mux(f.atomic, at_bad, ~seg_ok))):
            m.d.comb += v.eq(RespVerdict.INVALID)
        with m.Elif(((f.write & start) | f.read | f.atomic) & ~access_ok):
            m.d.comb += v.eq(RespVerdict.ACCESS)
        with m.Elif(f.atomic & f.unaligned):                       # (after the region, as rxe)
            m.d.comb += v.eq(RespVerdict.INVALID)
        with m.Elif(len_bad):
            m.d.comb += [v.eq(RespVerdict.INVALID), self.length_fault.eq(1)]
        with m.Else():
            m.d.comb += v.eq(RespVerdict.EXECUTED)
        return m
