"""The responder's requests counted once the memory has acknowledged every payload word they
wrote (AXI4: its write responses)."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.frontend.stream_post import DURABLE_WIDTH
from rocegen.gateware.roce.responder.resp_engine import SEQ_BITS

__all__ = ["RespDurable", "WORD_BITS"]

#: Bits of the counts of payload words taken and acknowledged (compared within 2^(WORD_BITS-1)).
WORD_BITS = 24

#: A queued group of requests: the count of words taken at the end of its newest request, and
#: that request's number.
_ENTRY = data.StructLayout({"end": WORD_BITS, "seq": SEQ_BITS})


class RespDurable(wiring.Component):
    """Counts the responder's requests whose payload is durable: every word the request (and
    every request before it) wrote has been acknowledged by the memory.

    Parameters
    ----------
    depth : int
        Requests whose words are not all acknowledged yet, counting only those that wrote a
        word after their predecessor (4..1024); more hold new requests back (``hold``).

    Ports
    -----
    start : In(1)
        A request's placement began (its placement record was taken); never in a cycle
        ``hold`` is high.
    written : In(1)
        A payload word was taken by the memory in this cycle.
    done : In(1)
        A request's payload words have all been taken (one pulse per request, in the order
        they started, after the cycle its last word was taken:
        :class:`~rocegen.gateware.roce.responder.resp_place.RespPlace` ``done``).
    durable : In(DURABLE_WIDTH)
        Payload words the memory acknowledged in this cycle, in the order it took them.
    count : Out(SEQ_BITS)
        Requests (counted from reset, modulo 2^:data:`~rocegen.gateware.roce.responder.resp_engine.SEQ_BITS`,
        as the engine numbers them) whose words, and those of every earlier request, are all
        acknowledged. Registered.
    hold : Out(1)
        No request may start: the queue could not take one more group.

    Behaviour
    ---------
    A request whose ``done`` comes when more words have been taken than at the previous
    queued request's end is queued (a group) with that count (its end) and its number; one
    that wrote nothing more joins the group queued before it, as its words are those. The
    oldest group leaves the queue once the count of acknowledged words reaches its end, one
    group per cycle. ``count`` (registered) is the number before the oldest group; once that
    group's words are acknowledged, its first request's number, or every request done when it
    is the only group; every request done when the queue is empty. Latency: a request that
    wrote words is counted two cycles after ``durable`` acknowledged its last word (or after
    its ``done``, if later) when the groups before it have left by then (groups acknowledged
    in the same cycle leave one a cycle); one that wrote none, with its group's first request
    when that group is the only one queued, else one cycle later. ``hold`` is high when the
    queued groups and the requests started and not done fill ``depth`` (so a ``done`` always
    finds room); it comes from registers only, no path from any input.
    """

    def __init__(self, depth=32):
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"depth must be an integer, not {depth!r}")
        if not 4 <= depth <= 1024:
            raise ValueError(f"depth must be from 4 to 1024 requests, not {depth}")
        self.depth = depth
        super().__init__({
            "start": In(1),
            "written": In(1),
            "done": In(1),
            "durable": In(DURABLE_WIDTH),
            "count": Out(SEQ_BITS),
            "hold": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        q = m.submodules.queue = SyncFIFO(width=_ENTRY.size, depth=self.depth)
        taken = Signal(WORD_BITS)           # words taken, ever
        acked = Signal(WORD_BITS)           # words acknowledged, ever
        last_end = Signal(WORD_BITS)        # the end of the newest queued group
        seq = Signal(SEQ_BITS)              # requests done
        busy = Signal(range(self.depth + 1))    # requests started and not done
        m.d.sync += [taken.eq(taken + self.written), acked.eq(acked + self.durable),
                     seq.eq(seq + self.done), busy.eq(busy + self.start - self.done)]

        # a request that wrote words queues a group (room is kept for it by `hold`)
        push = self.done & (taken != last_end)
        entry = _ENTRY(q.w_data)
        m.d.comb += [q.w_en.eq(push), entry.end.eq(taken), entry.seq.eq(seq + 1)]
        with m.If(push):
            m.d.sync += last_end.eq(taken)
        m.d.comb += self.hold.eq(q.level + busy >= self.depth)

        # the oldest group leaves once its words are acknowledged
        head = _ENTRY(q.r_data)
        head_acked = ~(acked - head.end)[WORD_BITS - 1]
        m.d.comb += q.r_en.eq(head_acked)
        # (the requests before the oldest group; with its first once acknowledged, and with
        # every request done once the only group left is acknowledged)
        m.d.sync += self.count.eq(Mux(q.r_rdy & ~(head_acked & (q.level == 1)),
                                      head.seq - ~head_acked, seq))
        return m
