"""The built-in traffic generator: posts numbered work requests whose payload is the test pattern."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import COMPLETION, WR_TAGGED, CplStatus, WrOpcode, WrSource
from rocegen.wire.cm import ATOMIC_SLOT_SHIFT

__all__ = ["TrafficGen", "GEN_CONFIG", "GENERATOR_SLOT_SHIFT"]

#: Local address of message ``s`` is ``(s mod 64) << GENERATOR_SLOT_SHIFT`` (the payload reader
#: makes the test pattern from that address; see :mod:`rocegen.wire.pattern`).
GENERATOR_SLOT_SHIFT = 26

#: One run of the generator.
GEN_CONFIG = data.StructLayout({
    "qp": 8,                  # QP index every message goes to
    "opcode": WrOpcode,
    "length": 31,             # bytes per message
    "count": 32,              # messages in the run (0: the run ends at once)
    "spacing": 32,            # cycles from one accepted work request to the next (0, 1: back to back)
    "imm": 32,                # immediate data of *_IMM messages
    "window": 32,             # remote bytes the messages cycle through (0: all at offset 0)
})


class TrafficGen(wiring.Component):
    """Traffic generator: a source of work requests for benchmarks and bring-up without user logic.

    A run is started by one beat on ``start`` (:data:`GEN_CONFIG`). ``start.ready`` is high only
    while the generator is idle: a configuration offered during a run waits until the run ends.

    Work requests
        Message ``s`` (``s = 0 .. count-1``) leaves on ``wr`` with ``wr_id = s``, ``src =
        GENERATOR``, the run's ``qp``, ``opcode``, ``length`` and ``imm``, ``local_addr = (s mod
        64) << 26`` (the test pattern is made from that address by the payload reader, no memory
        is read) and ``remote_offset = (s * length) mod window`` (0 for every message when
        ``window`` is 0). The offset is accumulated, never multiplied: ``length mod window`` is
        found once at the start of a run by a 31-step shift-and-subtract (skipped when ``length <
        window``), then each message adds it and subtracts ``window`` once if the sum reaches it,
        so any ``length`` / ``window`` pair (also ``window < length``) gives the exact remainder.

    Spacing
        The first work request is offered as soon as the run is set up: 2 cycles after ``start``
        is taken, or 33 cycles after it when ``length >= window > 0``. Each later one is offered
        ``spacing`` cycles after the previous one was taken by ``wr`` (``spacing`` 0 or 1: one per
        cycle). A stalled ``wr`` port delays the request further; the delay is not made up later,
        so ``spacing`` is a minimum distance between the starts of two messages, exact when ``wr``
        never stalls.

    Completions
        ``cpl`` is always ready. A completion with ``src == GENERATOR`` counts in
        ``completed_ok`` (status OK) or ``completed_err`` (any other status); completions from
        other sources, and any arriving while idle, are ignored. The run ends once ``count``
        messages are posted and ``count`` completions are counted: ``done`` pulses in its last
        cycle and ``busy`` is low from the next one, when ``start`` is ready again. A run whose
        requests never complete never ends.

    Status
        ``posted``, ``completed_ok`` and ``completed_err`` count the current (or last) run and are
        cleared when a run starts; ``cycles`` is the number of clock cycles from the cycle the
        first work request is taken to the cycle the last completion arrives (0 for a run of 0
        messages), for throughput measurements: ``count * length / (cycles * clock period)``.
        ``run_imm`` (``atomics`` only): the current (or last) run's ``imm``, from which the
        READ requester makes a reissued atomic's operands again.

    Atomic runs (``atomics=True`` only; without it such a run's requests are refused as
    above): message ``s`` of a FETCH_ADD or COMPARE_SWAP run is an atomic on the 8 bytes at
    ``remote_offset`` (a run of ``length`` 8 steps through the targets of its ``window``); its
    operands are not read from memory but made by the packet builder from ``imm`` and ``wr_id``
    (:class:`~rocegen.gateware.roce.requester.builder.RoceBuilder`: a FETCH_ADD adds ``imm``, a
    COMPARE_SWAP swaps ``imm + s + 1`` for ``imm + s``), and its original value lands in local
    memory at ``local_addr = (s mod 64) << 6`` (:data:`rocegen.wire.cm.ATOMIC_SLOT_SHIFT`: 64
    slots of 64 bytes, each aligned to any data width, the last 64 originals kept).

    READ runs (``reads=True`` only; without it a READ run's requests are refused by the
    scheduler like any other opcode it was not built for): message ``s`` READs ``length``
    bytes at ``remote_offset`` into local memory at ``local_addr = remote_offset``, the same
    offset of the local address space (the run's ``window`` then bounds the local bytes
    written too; a request past the end of local memory completes with LOCAL_LENGTH).

    Latency: the first work request is offered 2 cycles after ``start`` is taken (33 when a
    remainder must be computed): the configuration is registered, then what the run needs from
    it (counts, the remainder) is set up from that copy. Work requests come from registers (no
    combinational path from ``wr.ready`` to ``wr.valid`` or ``wr.payload``; ``wr.valid`` is a
    register of its own), and the message rate is unchanged: one per ``max(spacing, 1)`` cycles.
    """

    def __init__(self, *, reads=False, atomics=False):
        for name, value in (("reads", reads), ("atomics", atomics)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        if atomics and not reads:
            raise ValueError("atomics needs reads=True (an atomic is answered as a READ)")
        self.reads, self.atomics = reads, atomics
        super().__init__({
            "start": In(stream.Signature(GEN_CONFIG)),
            "wr": Out(stream.Signature(WR_TAGGED)),
            "cpl": In(stream.Signature(COMPLETION)),
            "busy": Out(1),
            "done": Out(1),
            "posted": Out(32),
            "completed_ok": Out(32),
            "completed_err": Out(32),
            "cycles": Out(48),
            **({"run_imm": Out(32)} if atomics else {}),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = Signal(GEN_CONFIG)
        step = Signal(32)           # length mod window (0 when window is 0)
        rem = Signal(33)            # partial remainder of the shift-and-subtract
        bit = Signal(range(31))     # length bit the next reduction step brings down
        offset = Signal(32)         # remote offset of the next message (< window, or 0)
        gap = Signal(32)            # cycles until the next work request may be offered
        timing = Signal()
        # down-counters with flags for 0 and 1, kept in registers (no wide compare on the way
        # from a handshake to the next state)
        todo = Signal(32)           # work requests still to post
        todo0, todo1 = Signal(), Signal()
        left = Signal(32)           # completions still to count
        left0, left1 = Signal(), Signal()
        return self._elaborate_fsm(m, bit, cfg, gap, left, left0, left1, offset, rem, step, timing, todo,
                                   todo0, todo1)

    def _elaborate_fsm(self, m, bit, cfg, gap, left, left0, left1, offset, rem, step, timing, todo, todo0,
                       todo1):
        """The request's fields and the run state machine: a run's configuration taken, its work
        requests posted, its completions counted."""
        back_to_back = Signal()     # spacing 0 or 1
        wrap_step = Signal(34)      # step - window: the next offset is offset + step, or
                                    # offset + wrap_step (window less) when that is >= 0
        offer = Signal()            # wr.valid, a register

        m.d.comb += self.cpl.ready.eq(1)
        # the request's fields, from registers only (``wr.valid`` says when they count): the
        # merge behind reads ``qp`` to decide ``wr.ready``
        w = self.wr.payload.wr
        m.d.comb += [
            self.wr.payload.src.eq(WrSource.GENERATOR),
            w.wr_id.eq(self.posted),
            w.qp.eq(cfg.qp),
            w.opcode.eq(cfg.opcode),
            w.local_addr.eq(Cat(Const(0, GENERATOR_SLOT_SHIFT), self.posted[:6])),
            w.length.eq(cfg.length),
            w.remote_offset.eq(offset),
            w.imm.eq(cfg.imm),
        ]
        if self.atomics:
            m.d.comb += self.run_imm.eq(cfg.imm)
        if self.reads:
            with m.If(cfg.opcode == WrOpcode.READ):
                m.d.comb += w.local_addr.eq(offset)
        if self.atomics:
            with m.If((cfg.opcode == WrOpcode.FETCH_ADD) | (cfg.opcode == WrOpcode.COMPARE_SWAP)):
                m.d.comb += w.local_addr.eq(Cat(Const(0, ATOMIC_SLOT_SHIFT), self.posted[:6]))

        with m.FSM():
            with m.State("IDLE"):
                c = self.start.payload
                m.d.comb += self.start.ready.eq(1)
                with m.If(self.start.valid):
                    m.d.sync += [
                        cfg.eq(c), offset.eq(0), gap.eq(0), timing.eq(0),
                        self.posted.eq(0), self.completed_ok.eq(0), self.completed_err.eq(0),
                        self.cycles.eq(0), rem.eq(0), bit.eq(30),
                    ]
                    m.next = "SETUP"

            with m.State("SETUP"):
                # what the run needs from its configuration, from the registered copy
                m.d.comb += self.busy.eq(1)
                c = cfg
                m.d.sync += [
                    todo.eq(c.count), todo0.eq(c.count == 0), todo1.eq(c.count == 1),
                    left.eq(c.count), left0.eq(c.count == 0), left1.eq(c.count == 1),
                    back_to_back.eq(c.spacing <= 1),
                ]
                with m.If(c.window == 0):
                    m.d.sync += [step.eq(0), wrap_step.eq(0), offer.eq(c.count != 0)]
                    m.next = "RUN"
                with m.Elif(c.length < c.window):
                    m.d.sync += [step.eq(c.length), wrap_step.eq(c.length - c.window),
                                 offer.eq(c.count != 0)]
                    m.next = "RUN"
                with m.Else():
                    m.next = "REDUCE"

            with m.State("REDUCE"):
                # restoring remainder: rem < window < 2^32, so (rem << 1) | bit fits in 33 bits
                m.d.comb += self.busy.eq(1)
                t = Signal(33)
                d = Signal(34)
                r_next = Signal(33)
                m.d.comb += [
                    t.eq(Cat(cfg.length.bit_select(bit, 1), rem[:32])),
                    d.eq(t - cfg.window),
                    r_next.eq(Mux(d[33], t, d[:33])),
                ]
                m.d.sync += [rem.eq(r_next), bit.eq(bit - 1)]
                with m.If(bit == 0):
                    m.d.sync += [step.eq(r_next[:32]), wrap_step.eq(r_next - cfg.window),
                                 offer.eq(~todo0)]
                    m.next = "RUN"

            with m.State("RUN"):
                m.d.comb += [self.busy.eq(1), self.wr.valid.eq(offer)]
                gap_low = Signal()          # gap <= 1: the gap ends in the next cycle
                m.d.comb += gap_low.eq(gap[1:] == 0)
                with m.If(gap != 0):
                    m.d.sync += gap.eq(gap - 1)
                with m.If(offer & self.wr.ready):
                    nxt = Signal(33)
                    wrapped = Signal(34)
                    m.d.comb += [nxt.eq(offset + step), wrapped.eq(offset + wrap_step)]
                    m.d.sync += [
                        self.posted.eq(self.posted + 1),
                        todo.eq(todo - 1), todo0.eq(todo1), todo1.eq(todo == 2),
                        gap.eq(Mux(cfg.spacing == 0, 0, cfg.spacing - 1)),
                        offset.eq(Mux(wrapped[33], nxt, wrapped)),
                        offer.eq(~todo1 & back_to_back),
                    ]
                    with m.If(self.posted == 0):
                        m.d.sync += timing.eq(1)
                with m.Elif(~offer):
                    m.d.sync += offer.eq(~todo0 & gap_low)

                with m.If(timing):
                    m.d.sync += self.cycles.eq(self.cycles + 1)
                cp = self.cpl.payload
                with m.If(self.cpl.valid & (cp.src == WrSource.GENERATOR) & ~left0):
                    m.d.sync += [left.eq(left - 1), left0.eq(left1), left1.eq(left == 2)]
                    with m.If(cp.status == CplStatus.OK):
                        m.d.sync += self.completed_ok.eq(self.completed_ok + 1)
                    with m.Else():
                        m.d.sync += self.completed_err.eq(self.completed_err + 1)
                    with m.If(left1):
                        m.d.sync += timing.eq(0)

                with m.If(left0 & todo0):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m
