"""The RC responder's decision for one request packet."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import QP_CONTEXT, QpState
from rocegen.gateware.roce.resp_ingress import has_imm
from rocegen.gateware.roce.resp_layouts import (
    MR_ENTRY,
    RECV_COMPLETION,
    RECV_POST,
    RESP_HEADER,
    RESP_PLACE,
    RESP_STATE,
    RecvOpcode,
    RecvStatus,
    RespKind,
    RespVerdict,
)
from rocegen.wire import headers as H
from rocegen.wire.roce import NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, SYN_ACK, SYN_RNR

__all__ = ["RespDecide", "ACK_FIELDS"]

#: The AETH and PSN of a response the decision asks for.
ACK_FIELDS = data.StructLayout({"syndrome": 8, "psn": 24, "msn": 24})


class RespDecide(wiring.Component):
    """What the responder does with one request: the rules of :mod:`rocegen.sim.models.responder`
    (its reference model, which lists them in order).

    Ports
    -----
    h : In(RESP_HEADER)
        The request's headers.
    in_table, ctx : In(1), In(QP_CONTEXT)
        DestQP names a QP of the table; that QP's context (``state``, ``peer_ip``,
        ``pmtu_log2`` are used).
    st : In(RESP_STATE)
        The QP's responder state.
    mr, rnr_timer : In(MR_ENTRY), In(5)
        The QP's memory region and RNR timer code.
    rq_valid, rq_head : In(1), In(RECV_POST)
        The QP has a receive buffer posted; the first one.
    verdict : Out(RespVerdict)
    new_st : Out(RESP_STATE)
        The QP's state after the request (equal to ``st`` when it is dropped).
    place : Out(RESP_PLACE)
        What to do with the payload (``write`` 0 unless the request is executed and carries
        payload; ``skip`` and ``length`` always the packet's).
    resp_valid, resp : Out(1), Out(ACK_FIELDS)
        An ACKNOWLEDGE to send: ACK (0x1F, no credit limit) of the request's PSN when it is
        executed with AckReq, of ePSN - 1 for a duplicate; NAK sequence error with ePSN; RNR NAK
        or fatal NAK with the request's PSN; with the QP's MSN.
    cpl_valid, cpl : Out(1), Out(RECV_COMPLETION)
        A receive completion (``qp`` left 0 for the caller to fill in).
    rq_pop, flush : Out(1), Out(1)
        Take the receive queue's first buffer; flush the QP's receive queue (error state).

    Behaviour
    ---------
    Combinational (latency 0, no state, no handshakes): the caller registers what it needs.
    """

    def __init__(self):
        super().__init__({
            "h": In(RESP_HEADER), "in_table": In(1), "ctx": In(QP_CONTEXT),
            "st": In(RESP_STATE), "mr": In(MR_ENTRY), "rnr_timer": In(5),
            "rq_valid": In(1), "rq_head": In(RECV_POST),
            "verdict": Out(RespVerdict), "new_st": Out(RESP_STATE), "place": Out(RESP_PLACE),
            "resp_valid": Out(1), "resp": Out(ACK_FIELDS),
            "cpl_valid": Out(1), "cpl": Out(RECV_COMPLETION),
            "rq_pop": Out(1), "flush": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        h, st, ctx, mr = self.h, self.st, self.ctx, self.mr
        bth, reth = h.bth, h.reth
        op, n, psn = bth.opcode, h.length, bth.psn
        v, ns = self.verdict, self.new_st

        # ---- the opcode: kind, position, immediate
        send, write = op <= H.OP_RC_SEND_ONLY_WITH_IMMEDIATE, \
            (op >= H.OP_RC_RDMA_WRITE_FIRST) & (op <= H.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
        sub = Mux(send, op, op - H.OP_RC_RDMA_WRITE_FIRST)[:3]     # 0 F, 1 M, 2-3 L, 4-5 O
        first, middle = sub == 0, sub == 1
        last, only = (sub == 2) | (sub == 3), (sub == 4) | (sub == 5)
        imm = has_imm(op)
        end = last | only
        kind = Mux(send, RespKind.SEND.value, RespKind.WRITE.value)

        # ---- the checks
        delta = Signal(24)
        m.d.comb += delta.eq(psn - st.epsn)
        pmtu = Signal(13)
        m.d.comb += pmtu.eq(1 << ctx.pmtu_log2)
        seq_bad = Mux(st.kind == RespKind.NONE, middle | last,
                      first | only | (kind != st.kind.as_value()))
        needs_rq = (send & (first | only)) | (write & imm)
        seg_ok = Mux(first | middle, (bth.padcnt == 0) & (n == pmtu),
                     Mux(last, (n != 0) & (n <= pmtu), n <= pmtu)) & \
            (bth.padcnt == (-n)[:2])
        va_end = Signal(65)
        region_end = Signal(34)
        m.d.comb += [va_end.eq(reth.va + reth.dma_len), region_end.eq(mr.base + mr.length)]
        access_ok = (reth.dma_len == 0) | (
            (reth.rkey == mr.rkey) & mr.write & (reth.va >= mr.base) & (va_end <= region_end))
        # the message's address and bytes left, as this packet finds them
        start = first | only
        addr = Mux(start, Mux(send, self.rq_head.addr, reth.va[:32]), st.addr)
        remaining = Mux(start, Mux(send, self.rq_head.length, reth.dma_len), st.remaining)
        total = Mux(start, Mux(send, self.rq_head.length, reth.dma_len), st.total)
        wr_id = Mux(send & start, self.rq_head.wr_id, st.wr_id)
        len_bad = Mux(write, Mux(end, n != remaining, n >= remaining), n > remaining)

        # ---- defaults: dropped, state unchanged, nothing placed or answered
        m.d.comb += [
            ns.eq(st), self.place.skip.eq(h.hdr_len), self.place.length.eq(n),
            self.place.addr.eq(addr), self.resp.msn.eq(st.msn), self.resp.psn.eq(psn),
            self.cpl.wr_id.eq(Mux(send, wr_id, self.rq_head.wr_id)),
            self.cpl.opcode.eq(Mux(send, RecvOpcode.SEND, RecvOpcode.WRITE_IMM)),
            self.cpl.imm.eq(h.imm), self.cpl.has_imm.eq(imm),
            self.cpl.length.eq(Mux(send, total - remaining + n, total)),
        ]

        def fatal(syndrome, verdict, status=RecvStatus.INVALID, pop=0):
            in_send = (st.kind == RespKind.SEND) | pop
            m.d.comb += [
                v.eq(verdict), ns.error.eq(1), ns.kind.eq(RespKind.NONE), ns.nak_pending.eq(0),
                self.resp_valid.eq(1), self.resp.syndrome.eq(syndrome), self.flush.eq(1),
                self.cpl_valid.eq(in_send), self.cpl.status.eq(status), self.rq_pop.eq(pop),
                self.cpl.opcode.eq(RecvOpcode.SEND), self.cpl.has_imm.eq(0),
                self.cpl.length.eq(Mux(pop, 0, st.total - st.remaining)),
                self.cpl.wr_id.eq(Mux(pop, self.rq_head.wr_id, st.wr_id)),
            ]

        with m.If(~self.in_table):
            m.d.comb += v.eq(RespVerdict.DROP_QP)
        with m.Elif((ctx.state != QpState.RTR) & (ctx.state != QpState.RTS)):
            m.d.comb += v.eq(RespVerdict.DROP_STATE)
        with m.Elif(h.src_ip != ctx.peer_ip):
            m.d.comb += v.eq(RespVerdict.DROP_PEER)
        with m.Elif(bth.pkey[:15] != 0x7FFF):
            m.d.comb += v.eq(RespVerdict.DROP_PKEY)
        with m.Elif(st.error):
            m.d.comb += v.eq(RespVerdict.DROP_ERROR)
        with m.Elif((delta != 0) & ~delta[23]):                     # ahead of ePSN
            with m.If(st.nak_pending):
                m.d.comb += v.eq(RespVerdict.SEQ_DROP)
            with m.Else():
                m.d.comb += [v.eq(RespVerdict.SEQ_NAK), ns.nak_pending.eq(1),
                             self.resp_valid.eq(1), self.resp.syndrome.eq(NAK_PSN_SEQ),
                             self.resp.psn.eq(st.epsn)]
        with m.Elif(delta[23]):                                     # behind: a duplicate
            m.d.comb += [v.eq(RespVerdict.DUPLICATE), self.resp_valid.eq(1),
                         self.resp.syndrome.eq(SYN_ACK), self.resp.psn.eq(st.epsn - 1)]
        with m.Elif(~send & ~write):
            fatal(NAK_INV_REQ, RespVerdict.INVALID)
        with m.Elif(seq_bad):
            fatal(NAK_INV_REQ, RespVerdict.INVALID)
        with m.Elif(needs_rq & ~self.rq_valid):
            m.d.comb += [v.eq(RespVerdict.RNR), ns.nak_pending.eq(1), self.resp_valid.eq(1),
                         self.resp.syndrome.eq(SYN_RNR | self.rnr_timer)]
        with m.Elif(~seg_ok):
            fatal(NAK_INV_REQ, RespVerdict.INVALID)
        with m.Elif(write & start & ~access_ok):
            fatal(NAK_REM_ACCESS, RespVerdict.ACCESS)
        with m.Elif(len_bad):
            fatal(NAK_INV_REQ, RespVerdict.INVALID,
                  Mux(send, RecvStatus.LENGTH, RecvStatus.INVALID), pop=send & start)
        with m.Else():
            m.d.comb += [
                v.eq(RespVerdict.EXECUTED), self.place.write.eq(n != 0),
                ns.nak_pending.eq(0), ns.epsn.eq(st.epsn + 1), ns.msn.eq(st.msn + end),
                ns.kind.eq(Mux(end, RespKind.NONE, kind)), ns.addr.eq(addr + n),
                ns.remaining.eq(remaining - n), ns.total.eq(total), ns.wr_id.eq(wr_id),
                self.resp_valid.eq(bth.ack_req), self.resp.syndrome.eq(SYN_ACK),
                self.resp.msn.eq(st.msn + end),
                self.rq_pop.eq(needs_rq), self.cpl_valid.eq(end & (send | imm)),
                self.cpl.status.eq(RecvStatus.OK),
            ]
        return m
