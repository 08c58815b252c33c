"""The streaming front end's poster: a stored message's work request, once its words are durable."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import STREAM_FINISHED, WR_TAGGED, WrSource

__all__ = ["StreamPoster", "DURABLE_WIDTH"]

#: Width of ``mem_durable``: up to 256 words may become durable in one cycle (one AXI4 burst).
DURABLE_WIDTH = 9


class StreamPoster(wiring.Component):
    """Queues the work requests of stored messages and posts each once the memory says its last
    word is durable.

    Parameters
    ----------
    max_inflight : int
        Messages that may be queued (1..4096); the queue has two spare entries.

    Ports
    -----
    i : In(stream.Signature(STREAM_FINISHED, always_ready=True))
        A stored message: its work request ``wr`` and ``end``, the count of words written to
        memory once its last word was (counted modulo 2^32 from the first word ever written).
        Always taken: the sender must not have more than ``max_inflight + 2`` messages queued
        (a message beyond that is lost).
    mem_durable : In(DURABLE_WIDTH)
        Words that became durable in this cycle, in the order they were written.
    wr : Out(stream.Signature(WR_TAGGED))
        The queued work requests in order, ``src = STREAM``: the oldest is offered once the
        count of durable words has reached its ``end`` (within 2^31), and held until taken.

    Behaviour: a message taken in cycle t is offered from cycle t + 2 when its words are durable
    by then, else from the cycle after its last word becomes durable (the count is registered).
    One work request per cycle at most.
    """

    def __init__(self, max_inflight):
        if not isinstance(max_inflight, int) or isinstance(max_inflight, bool):
            raise TypeError(f"max_inflight must be an integer, not {max_inflight!r}")
        if not 1 <= max_inflight <= 4096:
            raise ValueError(f"max_inflight must be from 1 to 4096 messages, not {max_inflight}")
        self.max_inflight = max_inflight
        super().__init__({
            "i": In(stream.Signature(STREAM_FINISHED, always_ready=True)),
            "mem_durable": In(DURABLE_WIDTH),
            "wr": Out(stream.Signature(WR_TAGGED)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.pending = pend = SyncFIFOBuffered(width=STREAM_FINISHED.size,
                                                       depth=self.max_inflight + 2)
        m.d.comb += [pend.w_data.eq(self.i.payload), pend.w_en.eq(self.i.valid)]
        durable = Signal(32)                # words durable, ever
        m.d.sync += durable.eq(durable + self.mem_durable)
        head = data.View(STREAM_FINISHED, pend.r_data)
        lag = Signal(32)
        m.d.comb += lag.eq(durable - head.end)
        ready_to_post = pend.r_rdy & ~lag[31]
        m.d.comb += [
            self.wr.valid.eq(ready_to_post),
            self.wr.payload.wr.eq(head.wr),
            self.wr.payload.src.eq(WrSource.STREAM),
            pend.r_en.eq(ready_to_post & self.wr.ready),
        ]
        return m
