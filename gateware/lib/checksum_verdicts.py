from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import PacketChecksum, tap
from rocegen.gateware.lib.stream import check_width, first_beat, packet_layout

__all__ = ["ChecksumVerdicts"]


class ChecksumVerdicts(wiring.Component):
    """The Internet checksum's verdict on every packet of a stream, observed without touching
    it, and the verdicts of selected packets as a stream.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata layout of the observed stream (ignored, as by
        :class:`~rocegen.gateware.lib.checksum.PacketChecksum`).
    depth : int
        Verdicts the queue behind ``verdict`` holds (at least 1): at least the selected packets
        that can end at the tap before their verdict is taken.

    Ports
    -----
    valid, ready : ``In(1)``; payload : ``In(packet_layout(width, meta))``
        The tap (:meth:`observe`); a beat counts when ``valid`` and ``ready`` are both high.
    seed : ``In(16)``; skip : ``In(1)``; select : ``In(1)``
        Sampled with the first beat of each packet (in the cycle it moves): the sum's initial
        value (a pseudo-header's sum), "nothing to check" (UDP's checksum 0) and whether the
        packet's verdict goes to ``verdict``.
    done : ``Out(1)``; good : ``Out(1)``; selected : ``Out(1)``
        Every packet's verdict: ``done`` is high for one cycle with ``good`` (``skip`` was high,
        or the sum is 0xFFFF) and ``selected`` (the packet's ``select``). Cannot be held off.
    verdict : ``Out(stream.Signature(1))``
        The verdicts (1 = good) of the packets with ``select`` high and ``skip`` low, in packet
        order, each taken once.
    valid_next : ``Out(1)``
        ``verdict.valid`` of the next cycle, given this cycle's ``verdict.ready`` (for a parent
        that keeps a register of its own from it).

    Behaviour
    ---------
    * Latency: :attr:`latency` cycles (``PacketChecksum.latency``: 4 at 64 and 128 bits, 5 at
      256 and 512): if a packet's last beat moves in cycle ``t``, ``done`` is high in cycle
      ``t + latency``, and a selected verdict is offered on ``verdict`` in that cycle (from the
      sum's register through a 16-bit compare). A verdict not taken then is queued (an
      ``amaranth.lib.fifo.SyncFIFO``) and offered from the queue's head from the next cycle;
      while the queue holds verdicts, ``verdict`` offers its head, so that none passes one
      queued before it. ``verdict.valid`` is a register.
    * Throughput: every beat of every packet, one per cycle; the verdicts of single-beat
      packets on consecutive cycles come out on consecutive cycles.
    * Backpressure: none on the tap. ``verdict.ready`` low queues verdicts; a selected verdict
      that finds the queue full is lost, so ``depth`` must cover the parent's worst case.
    """

    def __init__(self, width, meta=None, *, depth):
        check_width(width)
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"verdict queue depth must be a positive integer, not {depth!r}")
        self.width = width
        self.meta = meta
        self.depth = depth
        self._checksum = PacketChecksum(width, meta)
        #: cycles from a packet's last beat at the tap to its verdict
        self.latency = self._checksum.latency
        super().__init__({
            "valid": In(1),
            "ready": In(1),
            "payload": In(packet_layout(width, meta)),
            "seed": In(16),
            "skip": In(1),
            "select": In(1),
            "done": Out(1),
            "good": Out(1),
            "selected": Out(1),
            "verdict": Out(stream.Signature(1)),
            "valid_next": Out(1),
        })

    def observe(self, stream):
        """Statements that make this block observe the packet stream ``stream`` (of any
        metadata): ``m.d.comb += cv.observe(s)``."""
        return tap(self, stream)

    def elaborate(self, platform):
        m = Module()
        cs = m.submodules.checksum = self._checksum
        m.d.comb += [cs.valid.eq(self.valid), cs.ready.eq(self.ready),
                     cs.payload.eq(self.payload), cs.seed.eq(self.seed)]
        # the per-packet flags, sampled with the first beat, travel beside the checksum's
        # pipeline so that they meet the packet's sum ``latency`` cycles after its last beat
        first = first_beat(m, self)
        skip_reg, select_reg = Signal(), Signal()
        with m.If(self.valid & self.ready & first):
            m.d.sync += [skip_reg.eq(self.skip), select_reg.eq(self.select)]
        skip_now, select_now = Signal(), Signal()
        m.d.comb += [skip_now.eq(first & self.skip | ~first & skip_reg),
                     select_now.eq(first & self.select | ~first & select_reg)]
        pipe_skip = Signal(self.latency)
        pipe_select = Signal(self.latency)
        # a selected packet with a sum to check ended ``latency`` cycles ago: its sum is out now
        pipe_want = Signal(self.latency)
        ends = self.valid & self.ready & self.payload.last
        m.d.sync += [pipe_skip.eq(Cat(skip_now, pipe_skip)),
                     pipe_select.eq(Cat(select_now, pipe_select)),
                     pipe_want.eq(Cat(ends & select_now & ~skip_now, pipe_want))]
        good = pipe_skip[-1] | (cs.sum == 0xFFFF)
        m.d.comb += [self.done.eq(cs.done), self.good.eq(good),
                     self.selected.eq(pipe_select[-1])]

        # the selected verdicts: offered in the cycle the sum is known, queued when not taken
        # then; while the queue holds any, its head is offered (so none passes one queued
        # before it). ``verdict.valid`` is a register (``avail``: the queue will not be empty,
        # or a wanted sum comes out, in the next cycle)
        v = self.verdict
        queue = m.submodules.queue = fifo.SyncFIFO(width=1, depth=self.depth)
        direct = pipe_want[-1]
        count = Signal(range(self.depth + 1))
        held = Signal()
        avail = Signal()
        put, take = Signal(), Signal()
        m.d.comb += [
            v.valid.eq(avail),
            v.payload.eq(Mux(held, queue.r_data, good)),
            put.eq(direct & (held | ~v.ready)),
            take.eq(held & v.ready),
            queue.w_en.eq(put), queue.w_data.eq(good), queue.r_en.eq(take),
        ]
        nxt = count + put - take
        m.d.comb += self.valid_next.eq((nxt != 0) | pipe_want[-2])
        m.d.sync += [count.eq(nxt), held.eq(nxt != 0), avail.eq(self.valid_next)]
        return m
