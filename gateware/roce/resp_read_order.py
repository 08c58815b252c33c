"""The order of a QP's answers: its ACKs and NAKs, and its READ responses, in PSN order."""

from amaranth.hdl import Array, Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.resp_layouts import RESP_READ_PACKET, RESP_RESPONSE
from rocegen.gateware.roce.resp_read_gen import RD_FIRST, RD_ONLY
from rocegen.gateware.roce.resp_read_queue import check_rd_depth

__all__ = ["RespReadOrder"]


class RespReadOrder(wiring.Component):
    """Keeps each QP's answers (ACKs, NAKs) and READ responses in the order of the requests they
    answer, which is their PSN order, although they leave by different paths: the answers
    through the answer queue (:class:`~rocegen.gateware.roce.resp_ack.RespAck`), the READ
    responses through the payload reader and the packet builder.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    rd_depth : int
        READs each QP can have queued (:func:`~rocegen.gateware.roce.resp_read_queue.check_rd_depth`):
        sizes the per-QP counts.

    Ports
    -----
    push : In(stream.Signature(8, always_ready=True))
        A READ of this QP queued (the engine's ``rd_push``, its QP).
    sent : In(stream.Signature(8, always_ready=True))
        The last response of a READ of this QP has been taken by the transmitter (past the
        point where the READ responses and the answers merge).
    flush : In(stream.Signature(8, always_ready=True))
        A QP set up again: its count of READs in flight restarts from 0.
    ans_i, ans_o : In/Out(stream.Signature(RESP_RESPONSE))
        The engine's answers in, to the answer queue out (combinational).
    rd_i, rd_o : In/Out(stream.Signature(RESP_READ_PACKET))
        The READ response packets in, to the transmit side out (combinational).
    idle : In(1)
        The answer queue holds no record, and sends none.
    written : In(1)
        The payload of every request up to the newest READ pushed is in memory.

    Behaviour
    ---------
    The rule (two holds):

    * An answer of a QP waits while that QP has READs in flight: pushed, their last response
      not yet ``sent`` (a count per QP). The answers behind it wait too (the engine's output
      is one stream); the READ responses go on, so the wait ends.
    * The first response of a READ (FIRST or ONLY) waits until ``idle``: every answer of its
      QP from before the READ has left (the engine hands on a request's actions before the
      next request acts, so those answers are in the answer queue by the time the READ is
      pushed). While it waits, no new answer enters the answer queue, so the wait is bounded
      by the answers already queued. It also waits for ``written``, so that a READ reads what
      the WRITEs before it wrote.

    Both together keep the PSN order of each QP: answers before a READ leave before its
    responses, answers after it leave after its last response. A set-up (``flush``) clears the
    QP's count (its queued READs are dropped); a response of the old QP still on its way then
    counts nothing (the counts never go below 0).
    Latency: none (combinational gates); the counts change in the cycle after the events.
    """

    def __init__(self, num_qps, rd_depth=16):
        check_num_qps(num_qps)
        check_rd_depth(rd_depth)
        self.num_qps, self.rd_depth = num_qps, rd_depth
        pulse = stream.Signature(unsigned(8), always_ready=True)
        super().__init__({
            "push": In(pulse), "sent": In(pulse), "flush": In(pulse),
            "ans_i": In(stream.Signature(RESP_RESPONSE)),
            "ans_o": Out(stream.Signature(RESP_RESPONSE)),
            "rd_i": In(stream.Signature(RESP_READ_PACKET)),
            "rd_o": Out(stream.Signature(RESP_READ_PACKET)),
            "idle": In(1), "written": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        # READs in flight per QP: those queued (rd_depth at most) and those whose packets are
        # on their way (the generator's queue, the reader's, the builder: far fewer than 4 *
        # rd_depth)
        bits = (4 * self.rd_depth).bit_length()
        count = Array(Signal(bits, name=f"in_flight{k}") for k in range(n))

        def qi(v):
            return v[:max(1, (n - 1).bit_length())] if n > 1 else 0

        for k in range(n):
            up = self.push.valid & (self.push.payload == k)
            down = self.sent.valid & (self.sent.payload == k) & (count[k] != 0)
            with m.If(self.flush.valid & (self.flush.payload == k)):
                m.d.sync += count[k].eq(0)
            with m.Elif(up & ~down):
                m.d.sync += count[k].eq(count[k] + 1)
            with m.Elif(down & ~up):
                m.d.sync += count[k].eq(count[k] - 1)

        # READ responses: a READ's first waits for the answer queue to be empty
        d = self.rd_i.payload.desc
        first = (d.opcode == RD_FIRST) | (d.opcode == RD_ONLY)
        rd_go = ~first | (self.idle & self.written)
        m.d.comb += [self.rd_o.payload.eq(self.rd_i.payload),
                     self.rd_o.valid.eq(self.rd_i.valid & rd_go),
                     self.rd_i.ready.eq(self.rd_o.ready & rd_go)]
        # answers: wait while their QP has READs in flight, or a READ's first response waits
        a = self.ans_i.payload
        busy = (a.qp < n) & (count[qi(a.qp)] != 0)
        ans_go = ~busy & ~(self.rd_i.valid & first & ~self.idle)
        m.d.comb += [self.ans_o.payload.eq(a),
                     self.ans_o.valid.eq(self.ans_i.valid & ans_go),
                     self.ans_i.ready.eq(self.ans_o.ready & ans_go)]
        return m
