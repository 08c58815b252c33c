"""The RC responder's actions for one request, from its verdict."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import ATOMIC_WORK, AtomicOp
from rocegen.gateware.roce.responder.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RESP_HEADER,
    RESP_PLACE,
    RESP_READ,
    RESP_STATE,
    UNACKED_BITS,
    RecvOpcode,
    RecvStatus,
    RespKind,
    RespVerdict,
)
from rocegen.gateware.roce.responder.resp_precheck import RESP_FACTS, kind_of
from rocegen.wire.roce import NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, SYN_ACK, SYN_RNR

__all__ = ["RespDecide", "ACK_FIELDS"]

#: The AETH and PSN of a response the decision asks for.
ACK_FIELDS = data.StructLayout({"syndrome": 8, "psn": 24, "msn": 24})


class RespDecide(wiring.Component):
    """What the responder does with one request, given the verdict of
    :class:`~rocegen.gateware.roce.responder.resp_check.RespCheck` on it: the rules of
    :mod:`rocegen.sim.models.responder.responder` (its reference model, which lists them in order).

    Parameters
    ----------
    ack_every : int
        Besides those of the requests with AckReq, an ACK of the ``ack_every``-th request a QP
        executes without an answer in between (0 .. 2^8 - 1; 0, the default: on AckReq only).
        Every answer restarts the count (``RESP_STATE.unacked``).

    Ports
    -----
    verdict, length_fault, rd_ok : In(RespVerdict), In(1), In(1)
        The verdict on the request and, with INVALID, whether it failed the length check; with
        DUPLICATE, whether a READ is executed again
        (:class:`~rocegen.gateware.roce.responder.resp_check.RespCheck`, on the same inputs).
    h, f : In(RESP_HEADER), In(RESP_FACTS)
        The request's headers and their facts
        (:class:`~rocegen.gateware.roce.responder.resp_precheck.RespPrecheck`).
    st : In(RESP_STATE)
        The QP's responder state.
    rnr_timer : In(5)
        The QP's RNR timer code.
    pmtu_log2 : In(4)
        The QP's PMTU code (a READ's PSNs: 8 .. 12).
    rq_head : In(RECV_POST)
        The QP's first receive buffer (used when the request takes it).
    res_orig : In(64)
        The original value the QP's atomic results hold for the request's PSN (a duplicate
        atomic's answer).
    new_st : Out(RESP_STATE)
        The QP's state after the request (equal to ``st`` when it is dropped).
    place : Out(RESP_PLACE)
        What to do with the payload (``write`` 0 unless the request is executed and carries
        payload; ``skip`` and ``length`` always the packet's).
    resp_valid, resp : Out(1), Out(ACK_FIELDS)
        An ACKNOWLEDGE to send: ACK (0x1F, no credit limit) of the request's PSN when it is
        executed with AckReq or is the ``ack_every``-th, of ePSN - 1 for a duplicate; NAK
        sequence error with ePSN; RNR NAK or fatal NAK with the request's PSN; with the QP's
        MSN.
    cpl_valid, cpl : Out(1), Out(RECV_COMPLETION)
        A receive completion (``qp`` left 0 for the caller to fill in).
    rq_pop, flush : Out(1), Out(1)
        Take the receive queue's first buffer; flush the QP's receive queue (error state).
    rd_valid, rd : Out(1), Out(RESP_READ)
        A READ to queue: an executed READ request (ePSN + max(1, ceil(length / PMTU)), MSN + 1,
        its responses carrying the new MSN, no ACK) or a duplicate one executed again (from its
        own PSN, with the QP's MSN, no ACK; a duplicate READ not executed again is dropped
        silently). An atomic goes the same way, with ``rd_work`` (else ``op`` NONE):
        executed, ePSN + 1, MSN + 1, its operation and operands; a duplicate one with
        ``rd_ok`` is answered again (``op`` REPLAY, ``swap_add`` the original value
        ``res_orig``, the QP's MSN).
    rd_work : Out(ATOMIC_WORK)
        With ``rd_valid``: the atomic's operation (``op`` NONE for a READ).

    Behaviour
    ---------
    Combinational (latency 0, no state, no handshakes): the caller registers what it needs.
    The verdict selects among values worked out from the headers, the state and the receive
    buffer alone, so that the checks and the actions can be a clock cycle apart.
    """

    def __init__(self, *, ack_every=0):
        if not isinstance(ack_every, int) or isinstance(ack_every, bool) or \
                not 0 <= ack_every < 1 << UNACKED_BITS:
            raise ValueError(f"ack_every must be an integer 0..{(1 << UNACKED_BITS) - 1} "
                             f"(requests), not {ack_every!r}")
        self.ack_every = ack_every
        super().__init__({
            "verdict": In(RespVerdict), "length_fault": In(1), "rd_ok": In(1),
            "h": In(RESP_HEADER), "f": In(RESP_FACTS), "st": In(RESP_STATE),
            "rnr_timer": In(5), "pmtu_log2": In(4),
            "rq_head": In(RECV_POST), "res_orig": In(64),
            "new_st": Out(RESP_STATE), "place": Out(RESP_PLACE),
            "resp_valid": Out(1), "resp": Out(ACK_FIELDS),
            "cpl_valid": Out(1), "cpl": Out(RECV_COMPLETION),
            "rq_pop": Out(1), "flush": Out(1),
            "rd_valid": Out(1), "rd": Out(RESP_READ), "rd_work": Out(ATOMIC_WORK),
        })

    def elaborate(self, platform):
        m = Module()
        h, f, st, v, ns = self.h, self.f, self.st, self.verdict, self.new_st
        bth, reth = h.bth, h.reth
        n, psn = h.length, bth.psn
        send, start, end, imm = f.send, f.first | f.only, f.last | f.only, f.imm

        # the message's address and bytes left, as this packet finds them
        addr = Mux(start, Mux(send, self.rq_head.addr, reth.va[:32]), st.addr)
        remaining = Mux(start, Mux(send, self.rq_head.length, reth.dma_len), st.remaining)
        total = Mux(start, Mux(send, self.rq_head.length, reth.dma_len), st.total)
        wr_id = Mux(send & start, self.rq_head.wr_id, st.wr_id)

        # ---- defaults: dropped, state unchanged, nothing placed or answered
        m.d.comb += [
            ns.eq(st), self.place.skip.eq(h.hdr_len), self.place.length.eq(n),
            self.place.addr.eq(addr), self.resp.msn.eq(st.msn), self.resp.psn.eq(psn),
            self.cpl.wr_id.eq(Mux(send, wr_id, self.rq_head.wr_id)),
            self.cpl.opcode.eq(Mux(send, RecvOpcode.SEND, RecvOpcode.WRITE_IMM)),
            self.cpl.imm.eq(h.imm), self.cpl.has_imm.eq(imm),
            self.cpl.length.eq(Mux(send, total - remaining + n, total)),
        ]

        def fatal(syndrome):
            # (a SEND that was being received, or whose buffer the failing SEND takes,
            # completes with a status: LENGTH when it had too many bytes)
            pop = self.length_fault & send & start
            m.d.comb += [
                ns.error.eq(1), ns.unacked.eq(0), ns.kind.eq(RespKind.NONE),
                ns.nak_pending.eq(0),
                self.resp_valid.eq(1), self.resp.syndrome.eq(syndrome), self.flush.eq(1),
                self.cpl_valid.eq((st.kind == RespKind.SEND) | pop),
                self.cpl.status.eq(Mux(self.length_fault & send, RecvStatus.LENGTH,
                                       RecvStatus.INVALID)),
                self.rq_pop.eq(pop),
                self.cpl.opcode.eq(RecvOpcode.SEND), self.cpl.has_imm.eq(0),
                self.cpl.length.eq(Mux(pop, 0, st.total - st.remaining)),
                self.cpl.wr_id.eq(Mux(pop, self.rq_head.wr_id, st.wr_id)),
            ]

        # ---- a READ: its PSNs less one, max(1, ceil(length / PMTU)) - 1 (PMTU codes 8..12)
        # (READs and atomics both go to the READ queue: ``rq``)
        rd, work, read = self.rd, self.rd_work, f.read | f.atomic
        span = Signal(24)
        dma_m1 = Signal(32)
        m.d.comb += dma_m1.eq(reth.dma_len - 1)
        with m.Switch(self.pmtu_log2):
            for j in range(8, 13):
                with m.Case(j):
                    m.d.comb += span.eq(Mux(f.dma_zero, 0, dma_m1[j:]))
        m.d.comb += [rd.psn.eq(psn), rd.va.eq(reth.va[:32]), rd.length.eq(reth.dma_len),
                     rd.msn.eq(st.msn), rd.pmtu_log2.eq(self.pmtu_log2),
                     work.swap_add.eq(h.atomic.swap_add), work.compare.eq(h.atomic.compare)]
        with m.If(f.atomic):
            m.d.comb += work.op.eq(Mux(f.cas, AtomicOp.COMPARE_SWAP, AtomicOp.FETCH_ADD))
            with m.If(v == RespVerdict.DUPLICATE):
                m.d.comb += [work.op.eq(AtomicOp.REPLAY), work.swap_add.eq(self.res_orig),
                             work.compare.eq(0)]

        # ---- ACKs by count: the QP's requests executed since its last answer, this one included
        every = self.ack_every
        count = Signal(UNACKED_BITS + 1)
        m.d.comb += count.eq(st.unacked + 1)
        counted_ack = (count >= every) if every else 0

        with m.Switch(v):
            with m.Case(RespVerdict.SEQ_NAK):
                m.d.comb += [ns.nak_pending.eq(1), ns.unacked.eq(0), self.resp_valid.eq(1),
                             self.resp.syndrome.eq(NAK_PSN_SEQ), self.resp.psn.eq(st.epsn)]
            with m.Case(RespVerdict.DUPLICATE):
                m.d.comb += [self.resp_valid.eq(~read), self.rd_valid.eq(read & self.rd_ok),
                             ns.unacked.eq(Mux(read & ~self.rd_ok, st.unacked, 0)),
                             self.resp.syndrome.eq(SYN_ACK), self.resp.psn.eq(st.epsn - 1)]
            with m.Case(RespVerdict.RNR):
                m.d.comb += [ns.nak_pending.eq(1), ns.unacked.eq(0), self.resp_valid.eq(1),
                             self.resp.syndrome.eq(SYN_RNR | self.rnr_timer)]
            with m.Case(RespVerdict.INVALID):
                fatal(NAK_INV_REQ)
            with m.Case(RespVerdict.ACCESS):
                fatal(NAK_REM_ACCESS)
            with m.Case(RespVerdict.EXECUTED):
                ack = (bth.ack_req | counted_ack) & ~read
                m.d.comb += [
                    self.place.write.eq(n != 0),
                    ns.nak_pending.eq(0), ns.epsn.eq(st.epsn + 1 + Mux(read, span, 0)),
                    ns.msn.eq(st.msn + (end | read)),
                    ns.kind.eq(Mux(end | read, RespKind.NONE, kind_of(f))), ns.addr.eq(addr + n),
                    ns.remaining.eq(remaining - n), ns.total.eq(total), ns.wr_id.eq(wr_id),
                    self.resp_valid.eq(ack), self.resp.syndrome.eq(SYN_ACK),
                    ns.unacked.eq(Mux(ack | read, 0, count if every else 0)),
                    self.rd_valid.eq(read), rd.msn.eq(st.msn + 1),
                    self.resp.msn.eq(st.msn + end),
                    self.rq_pop.eq(f.needs_rq), self.cpl_valid.eq(end & (send | imm)),
                    self.cpl.status.eq(RecvStatus.OK),
                ]
        return m
