"""The order of a QP's answers: its ACKs and NAKs, and its READ responses, in PSN order."""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.requester.sched_tree import lowest_one
from rocegen.gateware.roce.responder.resp_ack import is_plain_ack
from rocegen.gateware.roce.responder.resp_layouts import RESP_READ_PACKET, RESP_RESPONSE
from rocegen.gateware.roce.responder.resp_read_gen import RD_FIRST, RD_ONLY
from rocegen.gateware.roce.responder.resp_read_queue import check_rd_depth
from rocegen.wire import opcodes as opc

__all__ = ["RespReadOrder"]


class RespReadOrder(wiring.Component):
    """Keeps each QP's answers (ACKs, NAKs) and READ responses in the order of the requests they
    answer, which is their PSN order, although they leave by different paths: the answers
    through the answer queue (:class:`~rocegen.gateware.roce.responder.resp_ack.RespAck`), the READ
    responses through the payload reader and the packet builder. An answer that must wait for
    its QP's READs is parked, one per QP, so that the engine goes on with the other QPs.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    rd_depth : int
        READs each QP can have queued
        (:func:`~rocegen.gateware.roce.responder.resp_read_queue.check_rd_depth`):
        sizes the per-QP counts.

    Ports
    -----
    done : In(stream.Signature(8, always_ready=True))
        The last response of a READ of this QP made
        (:class:`~rocegen.gateware.roce.responder.resp_read.RespRead`
        ``done``): the READ has left its queue.
    sent : In(stream.Signature(8, always_ready=True))
        The last response of a READ of this QP has been taken by the transmitter (past the
        point where the READ responses and the answers merge).
    level_qp, level : Out(8), In(range(rd_depth + 1))
        The READ queues' count of the READs queued for a QP (combinational): the QP of the
        answer on ``ans_i``.
    hold : Out(num_qps)
        Bit k: the READ queues give QP k no turn (its next READ is after its parked answer).
    flush : In(stream.Signature(8, always_ready=True))
        The QP's READ queue is flushed (the pulse :class:`~rocegen.gateware.roce.responder.resp_read.RespRead`
        ``flush`` takes): its queued READs will never be answered.
    drop : In(stream.Signature(8, always_ready=True))
        A QP set up again: its parked answer is withdrawn (as the engine withdraws the answer
        in its output register).
    ans_i, ans_o : In/Out(stream.Signature(RESP_RESPONSE))
        The engine's answers in, to the answer queue out.
    rd_i, rd_o : In/Out(stream.Signature(RESP_READ_PACKET))
        The READ response packets in, to the transmit side out (combinational).
    idle : In(1)
        The answer queue holds no record, and sends none.
    written : In(1)
        The payload of every request before the newest READ pushed is in memory.

    Behaviour
    ---------
    Per QP: ``gone``, its READs whose last response has been made but not yet ``sent`` (never
    cleared: those packets are on their way and all leave); with ``level``, the READs queued,
    the READs in flight. A parking slot per QP: an answer (a LUT RAM of ``num_qps`` records),
    whether it is a plain ACK, and ``queued``, the READs before it still queued (its READs in
    flight are those and ``gone``: while it is parked no READ after it is made).

    * An answer on ``ans_i`` of a QP with no parked answer and no READ in flight goes straight
      to ``ans_o`` (combinational; taken when ``ans_o`` takes it and no parked answer leaves in
      that cycle). Otherwise it is taken at once into its QP's slot (``queued`` from
      ``level``): when the slot is empty, when it holds a plain ACK (the newer answer replaces
      it: an ACK or NAK is cumulative, it acknowledges every request before its PSN, and a
      READ response the requests before its READ; the MSN goes with it), or when the parked
      answer leaves in that cycle. An answer of a QP whose slot holds a NAK waits on
      ``ans_i`` (and the engine with it) until that NAK leaves: until the READs before it have
      sent their last response. A fatal NAK flushes its QP's READs, so that wait is the
      responses already made (at most the generator's, the payload reader's and the builder's
      queues); after a sequence or RNR NAK the QP answers again only once the requester
      resends, and the wait is then up to the QP's READs queued before the NAK (``rd_depth``
      READs of up to 2^31 bytes).
    * ``queued`` counts down with each ``done`` of its QP, ``gone`` with each ``sent``; with
      both at 0 the answer leaves on ``ans_o`` (before any answer of ``ans_i``; the lowest QP
      first). A flush sets ``queued`` to 0, two cycles later (when the queue is empty and its
      turn cancelled): the READs before the answer that were made whole still leave, the
      others never do.
    * While a QP's answer is parked and ``queued`` is 0, the QP gets no turn (``hold``): its
      READs queued then are after the answer, and none of their responses may overtake it.
    * The first response of a READ (FIRST or ONLY) waits until ``idle``: every answer of its
      QP from before the READ has left (the engine hands on a request's actions before the
      next request acts, so those answers are in the answer queue by the time the READ is
      pushed, or parked, and then the READ gets no turn until they leave). While it waits, no
      answer enters the answer queue, so the wait is bounded by the answers already queued. It
      also waits for ``written``, so that a READ reads what the WRITEs before it wrote.

    So each QP keeps its PSN order: answers before a READ leave before its responses, answers
    after it after its last response, and its answers leave in order (a parked plain ACK
    replaced by a later answer is left out). A set-up (``drop``) withdraws the QP's parked
    answer; the responses of its old READs already made still count in ``gone`` (never
    against a READ pushed afterwards).
    Latency: an answer straight through, none; a parked one leaves at the earliest in the
    cycle after the ``sent`` that brings its ``ahead`` to 0 (two cycles after it is parked
    with nothing ahead). Backpressure: ``ans_o.ready`` low parks the answers (one per QP),
    then holds ``ans_i``; ``rd_o.ready`` passes to ``rd_i``.
    """

    def __init__(self, num_qps, rd_depth=16):
        check_num_qps(num_qps)
        check_rd_depth(rd_depth)
        self.num_qps, self.rd_depth = num_qps, rd_depth
        pulse = stream.Signature(unsigned(8), always_ready=True)
        super().__init__({
            "done": In(pulse), "sent": In(pulse), "flush": In(pulse), "drop": In(pulse),
            "level_qp": Out(8), "level": In(range(rd_depth + 1)),
            "hold": Out(num_qps),
            "ans_i": In(stream.Signature(RESP_RESPONSE)),
            "ans_o": Out(stream.Signature(RESP_RESPONSE)),
            "rd_i": In(stream.Signature(RESP_READ_PACKET)),
            "rd_o": Out(stream.Signature(RESP_READ_PACKET)),
            "idle": In(1), "written": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        qb = max(1, (n - 1).bit_length())
        # per QP: its READs made whole and not yet sent (on their way: the generator's queue,
        # the reader's, the builder; far fewer than 4 * rd_depth); of a parked answer, the
        # READs before it still queued
        bits = (4 * self.rd_depth).bit_length()
        gone = Array(Signal(bits, name=f"gone{k}") for k in range(n))
        queued = Array(Signal(range(self.rd_depth + 1), name=f"queued{k}") for k in range(n))
        parked, plain = Signal(n), Signal(n)
        slots = m.submodules.slots = Memory(shape=RESP_RESPONSE, depth=n, init=[])
        s_w, s_r = slots.write_port(), slots.read_port(domain="comb")

        def qi(v):
            return v[:qb] if n > 1 else 0

        def names(port, q):
            return port.valid & (port.payload == q)

        # a flush has taken effect in the READ queue two cycles after it comes
        fl1_v, fl1_q, fl2_v, fl2_q = Signal(), Signal(8), Signal(), Signal(8)
        m.d.sync += [fl1_v.eq(self.flush.valid), fl1_q.eq(self.flush.payload),
                     fl2_v.eq(fl1_v), fl2_q.eq(fl1_q)]

        # READ responses: a READ's first waits for the answer queue to be empty
        d = self.rd_i.payload.desc
        first = (d.opcode == RD_FIRST) | (d.opcode == RD_ONLY) | \
            (d.opcode == opc.OP_RC_ATOMIC_ACKNOWLEDGE)
        rd_go = ~first | (self.idle & self.written)
        rd_wait = self.rd_i.valid & first & ~self.idle
        m.d.comb += [self.rd_o.payload.eq(self.rd_i.payload),
                     self.rd_o.valid.eq(self.rd_i.valid & rd_go),
                     self.rd_i.ready.eq(self.rd_o.ready & rd_go)]

        # parked answers whose READs have all been sent leave first (the lowest QP)
        none_gone = Signal(n)
        m.d.comb += none_gone.eq(Cat(*(gone[q] == 0 for q in range(n))))
        free = Signal(n)
        m.d.comb += free.eq(Cat(*(parked[k] & (queued[k] == 0) for k in range(n))) & none_gone)
        out_any, out_q = lowest_one(m, free, "ans_pick")
        out_go = out_any & ~rd_wait & self.ans_o.ready
        m.d.comb += s_r.addr.eq(out_q)

        # the answer offered: straight on, or parked
        a = self.ans_i.payload
        in_table = a.qp < n
        k = qi(a.qp) if n > 1 else Const(0, 1)
        m.d.comb += self.level_qp.eq(a.qp)
        sv, sack = parked.bit_select(k, 1), plain.bit_select(k, 1)
        straight = ~in_table | (~sv & (self.level == 0) & none_gone.bit_select(k, 1))
        direct = ~out_any & ~rd_wait & straight
        leaving = out_go & (out_q == k)
        room = in_table & (~sv | sack | leaving)
        park = self.ans_i.valid & room & ~(direct & self.ans_o.ready)
        m.d.comb += [
            self.ans_o.valid.eq(~rd_wait & (out_any | (self.ans_i.valid & straight))),
            self.ans_o.payload.eq(Mux(out_any, s_r.data, a)),
            self.ans_i.ready.eq((direct & self.ans_o.ready) | room),
            s_w.addr.eq(a.qp), s_w.data.eq(a), s_w.en.eq(park),
        ]

        # per QP: the READs made whole and not sent; the slot, its READs still queued (a
        # flush leaves none: those made whole still leave, before the answer, the others never)
        for q in range(n):
            made = names(self.done, q)
            sent = names(self.sent, q) & ~none_gone[q]
            with m.If(made != sent):
                m.d.sync += gone[q].eq(gone[q] + Mux(made, 1, -1))
            with m.If(fl2_v & (fl2_q == q)):
                m.d.sync += queued[q].eq(0)
            with m.Elif(made & (queued[q] != 0)):
                m.d.sync += queued[q].eq(queued[q] - 1)
            with m.If(out_go & (out_q == q)):
                m.d.sync += parked[q].eq(0)
            with m.If(park & (k == q)):
                m.d.sync += [parked[q].eq(1), plain[q].eq(is_plain_ack(a)),
                             queued[q].eq(self.level - made)]
            with m.If(names(self.drop, q)):
                m.d.sync += parked[q].eq(0)
            # (its READs after the answer get no turn: every READ before it has been made)
            m.d.comb += self.hold[q].eq(parked[q] & (queued[q] == 0))
        return m
