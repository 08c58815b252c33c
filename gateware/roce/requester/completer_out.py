from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import COMPLETION

__all__ = ["CplOutput", "OUT_DEPTH"]

#: Completions buffered in front of ``cpl``.
OUT_DEPTH = 4


class CplOutput(wiring.Component):
    """The completion tracker's output: the scan's completions and those of work requests that
    name no QP (kept in a queue of their own) into one output FIFO.

    Parameters
    ----------
    bad_depth : int
        Entries of the queue of bad-QP completions (a power of two, 1..1024).

    Ports
    -----
    scan : In(stream.Signature(COMPLETION, always_ready=True))
        The scan's completions. The scan must offer one only when ``room`` allowed it: when it
        examined the entry (in the cycle before, ``scan_busy`` high now).
    scan_busy : In(1)
        The scan examines an entry in this cycle (its completion, if any, is on ``scan``).
    bad : In(stream.Signature(COMPLETION))
        Completions of work requests that name no QP, into their queue (``ready``: the queue has
        room).
    cpl : Out(stream.Signature(COMPLETION))
        Every completion, from an :data:`OUT_DEPTH`-entry FIFO; ``payload`` is stable while
        ``valid`` waits for ``ready``.
    room : Out(1)
        The output FIFO can take one more completion after those in flight (the scan's in this
        cycle, a bad-QP completion moving): the scan may examine an entry.
    bad_waiting : Out(1)
        A bad-QP completion waits in its queue.
    bad_full : Out(1)
        The bad-QP queue has no room (a register, always equal to ``~bad.ready``).
    pending : Out(1)
        A completion waits in either FIFO.

    Behaviour: a bad-QP completion moves to the output FIFO in a cycle without a scan result
    (``scan_busy`` low) when the FIFO has room; the scan's completions go first. A completion
    offered in cycle t is on ``cpl`` from cycle t + 1 (a bad-QP one from t + 2 at the earliest).
    """

    def __init__(self, bad_depth):
        if not isinstance(bad_depth, int) or isinstance(bad_depth, bool):
            raise TypeError(f"bad_depth must be an integer, not {bad_depth!r}")
        if not 1 <= bad_depth <= 1024 or bad_depth & (bad_depth - 1):
            raise ValueError(f"bad_depth must be a power of two from 1 to 1024, not {bad_depth}")
        self.bad_depth = bad_depth
        super().__init__({
            "scan": In(stream.Signature(COMPLETION, always_ready=True)),
            "scan_busy": In(1),
            "bad": In(stream.Signature(COMPLETION)),
            "cpl": Out(stream.Signature(COMPLETION)),
            "room": Out(1),
            "bad_waiting": Out(1),
            "bad_full": Out(1),
            "pending": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        outq = m.submodules.outq = SyncFIFO(width=COMPLETION.size, depth=OUT_DEPTH)
        badq = m.submodules.badq = SyncFIFO(width=COMPLETION.size, depth=self.bad_depth)
        m.d.comb += [
            self.cpl.valid.eq(outq.r_rdy),
            self.cpl.payload.eq(outq.r_data),
            outq.r_en.eq(self.cpl.ready),
            badq.w_data.eq(self.bad.payload),
            badq.w_en.eq(self.bad.valid),
            self.bad.ready.eq(badq.w_rdy),
        ]
        # bad-QP completions move to the output FIFO in cycles without a scan result
        bad_xfer = Signal()
        m.d.comb += [
            bad_xfer.eq(badq.r_rdy & ~self.scan_busy & outq.w_rdy),
            badq.r_en.eq(bad_xfer),
            outq.w_en.eq(self.scan.valid | bad_xfer),
            outq.w_data.eq(Mux(self.scan.valid, self.scan.payload.as_value(), badq.r_data)),
            self.room.eq(outq.level + self.scan_busy + bad_xfer < OUT_DEPTH),
            self.bad_waiting.eq(badq.r_rdy),
            self.pending.eq(outq.r_rdy | badq.r_rdy),
        ]
        # the bad-QP queue's "full" as a register, from its next level (always equal to
        # ~badq.w_rdy; the scheduler's hold on bad requests then starts at a flip-flop)
        bad_full = Signal()
        bad_level_next = (badq.level + (badq.w_en & badq.w_rdy) - (badq.r_en & badq.r_rdy))
        m.d.sync += bad_full.eq(bad_level_next == self.bad_depth)
        m.d.comb += self.bad_full.eq(bad_full)
        return m
