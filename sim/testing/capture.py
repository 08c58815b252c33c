"""Simulation-only capture of a stream into a memory that the cocotb side reads once per frame.

A cocotb coroutine that wakes on every clock edge to take a beat costs tens of microseconds of
Python per cycle, many times what Verilator needs to evaluate the whole endpoint. The
:class:`StreamCapture` takes the beats in the design instead: it decides ``ready`` itself (a
line-rate budget and random backpressure, both set at run time), writes every accepted beat
with its cycle number into a memory, and counts the frames. The cocotb side waits for the frame
counter to change (one wake-up per frame, not per beat), reads the frame's entries through VPI
and hands the capture its new read pointer.

Not part of the core: it exists in the test tops of :mod:`rocegen.sim.testing.roce_tops` only.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["StreamCapture", "CREDIT_FRAC_BITS"]

#: fractional bits of the line-rate budget (bytes per cycle in fixed point)
CREDIT_FRAC_BITS = 16


class StreamCapture(wiring.Component):
    """Take beats of a stream into a ring of ``depth`` entries, each ``{payload, cycle}``.

    Parameters
    ----------
    width : int
        Bits of a beat's payload (everything the consumer needs: data, keep, last, user, or a
        whole record).
    depth : int
        Entries of the ring, a power of two; more than the beats of the longest frame, so the
        reader (who empties the ring at every frame end) never makes it full.
    bytes_width : int
        Bits of ``i_bytes`` (0: no line-rate budget, ``credit_step`` is ignored).
    frame_overhead : int
        Bytes of line time charged per frame on top of its beats' bytes (FCS, preamble and
        inter-frame gap of an Ethernet MAC).
    max_credit : int
        The budget's ceiling in bytes (about two beats).

    Ports
    -----
    i_payload, i_valid, i_ready, i_last, i_bytes : the captured stream; ``i_last`` ends a frame
        (a record stream sets it on every record), ``i_bytes`` are the beat's bytes for the budget.
    count : Out(32)
        Entries written since reset (wraps).
    frames : Out(32)
        Entries with ``i_last`` written since reset: the reader waits for it to change.
    cycle : Out(32)
        Clock edges since the simulation started (not reset by ``rst``); an entry's ``cycle``
        field is the value at its handshake.
    rd : In(32)
        Entries the reader has consumed (it writes the new value after reading them).
    credit_step : In(32)
        Line-rate budget in bytes per cycle times ``2**CREDIT_FRAC_BITS``; 0: no budget.
    bp_threshold : In(16)
        ``ready`` is dropped in a cycle with probability ``bp_threshold / 65536`` (a 32-bit
        xorshift generator); 0: never.
    seed : In(32)
        The generator restarts from ``seed`` whenever ``seed`` changes (0 is taken as 1).
    starved : Out(32)
        Cycles in which ``i_ready`` was high inside a frame (after its first beat, before its
        last) but ``i_valid`` low: a MAC that must send a frame without a pause (the CMAC, the
        XGMII MAC) would have underrun. It must stay 0.

    Behaviour
    ---------
    ``i_ready`` is a register: high when the budget is positive (with a budget), the generator
    lets the cycle pass, and the ring has room (combinational on ``rd``). The budget follows the
    MAC model of :mod:`rocegen.sim.testing.roce_env` cycle by cycle: each accepted beat spends its
    bytes, a last beat also ``frame_overhead``; then ``credit_step`` is added, up to
    ``max_credit``. Latency from handshake to the entry being readable: one cycle.
    """

    def __init__(self, width, depth, *, bytes_width=0, frame_overhead=0, max_credit=0):
        if width < 1:
            raise ValueError(f"width must be a positive number of bits, not {width!r}")
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two >= 2, not {depth!r}")
        self.width = width
        self.depth = depth
        self.bytes_width = bytes_width
        self.frame_overhead = frame_overhead
        self.max_credit = max_credit
        self.mem = Memory(shape=unsigned(width + 32), depth=depth, init=[])
        super().__init__({
            "i_payload": In(width), "i_valid": In(1), "i_ready": Out(1), "i_last": In(1),
            "i_bytes": In(max(bytes_width, 1)),
            "count": Out(32), "frames": Out(32), "cycle": Out(32), "rd": In(32),
            "credit_step": In(32), "bp_threshold": In(16), "seed": In(32),
            "starved": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.cap_mem = mem = self.mem     # the name the build's VPI control file opens
        wp = mem.write_port()
        cycle = Signal(32, reset_less=True)
        m.d.sync += cycle.eq(cycle + 1)
        m.d.comb += self.cycle.eq(cycle)

        take = self.i_valid & self.i_ready
        m.d.comb += [wp.addr.eq(self.count), wp.data.eq(Cat(self.i_payload, cycle)),
                     wp.en.eq(take)]
        inside = Signal()               # a frame has begun and not ended
        with m.If(take):
            m.d.sync += [self.count.eq(self.count + 1), inside.eq(~self.i_last)]
            with m.If(self.i_last):
                m.d.sync += self.frames.eq(self.frames + 1)
        with m.If(inside & self.i_ready & ~self.i_valid):
            m.d.sync += self.starved.eq(self.starved + 1)

        # random backpressure: xorshift32, restarted from `seed` when it changes
        rng = Signal(32, init=1)
        last_seed = Signal(32)
        x1 = rng ^ (rng << 13)[:32]
        x2 = x1 ^ (x1 >> 17)
        x3 = x2 ^ (x2 << 5)[:32]
        m.d.sync += last_seed.eq(self.seed)
        with m.If(self.seed != last_seed):
            m.d.sync += rng.eq(Mux(self.seed == 0, 1, self.seed))
        with m.Else():
            m.d.sync += rng.eq(x3)
        passes = x3[:16] >= self.bp_threshold

        # line-rate budget (fixed point, signed)
        if self.bytes_width:
            F = CREDIT_FRAC_BITS
            credit = Signal(range(-(self.max_credit + self.frame_overhead + (1 << self.bytes_width)) << F,
                                  (self.max_credit + 1) << F))
            spent = Mux(take, (self.i_bytes + Mux(self.i_last, self.frame_overhead, 0)) << F, 0)
            after = credit - spent + self.credit_step
            cap = Const(self.max_credit << F)
            nxt = Mux(after > cap, cap, after)
            m.d.sync += credit.eq(nxt)
            ready_next = Mux(self.credit_step == 0, 1, nxt > 0)
        else:
            ready_next = Const(1)
        ready = Signal()
        m.d.sync += ready.eq(ready_next & passes)
        room = (self.count - self.rd)[:32] < self.depth
        m.d.comb += self.i_ready.eq(ready & room)
        return m
