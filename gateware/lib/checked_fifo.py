from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import RegisterSlice
from rocegen.gateware.lib.checksum_verdicts import ChecksumVerdicts
from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.gate import PacketGate
from rocegen.gateware.lib.pipe import StreamForwardRegister
from rocegen.gateware.lib.stream import (
    PacketSignature,
    check_width,
    empty_meta,
    first_beat,
    packet_layout,
)

__all__ = ["ChecksumCheckedFifo"]


class ChecksumCheckedFifo(wiring.Component):
    """Store-and-forward FIFO that releases only packets whose Internet checksum is right.

    The one's complement sum of each packet (plus ``seed``, e.g. a pseudo-header) is computed
    while the packet comes in (:class:`~rocegen.gateware.lib.checksum.PacketChecksum`, on ``i``);
    a packet is good when the sum is 0xFFFF or when ``skip`` was high with its first beat (UDP's
    "no checksum"). Packets with ``error`` set are discarded by the FIFO; bad checksums are
    discarded at the output (:class:`~rocegen.gateware.lib.gate.PacketGate`) and pulse
    ``drop_checksum``.

    ``seed`` and ``skip`` are driven combinationally by the parent from ``i.payload`` and sampled
    with the first beat of each packet. Packets longer than ``depth`` beats cannot be stored and
    are dropped (``drop_overflow``); the input is held while the FIFO is full.

    With ``cut_input``, a packet whose input ``cut`` is high with its first beat (driven like
    ``seed``) passes cut-through instead: its beats leave as they come, behind the packets
    before it, and a damaged one leaves with ``error`` on its last beat, for the consumer to
    drop (it pulses no ``drop_error``). When the store is empty as its first beat comes out of
    the input register, the packet passes beside the store, from the input register straight
    to the output (the store's two cycles saved); packets that come while it passes are stored
    behind it, so the order holds. A cut-through packet with a sum to check (``skip`` low) is
    not held for it: its verdict (1 = good) is offered on ``cut_verdict``, in packet order, for
    the parent to apply to the packet's last beat after it has left (it is queued until taken;
    the parent takes exactly one per such packet). One with ``skip`` high has none.

    Parameters: ``width`` (W bits), ``depth`` (beats, a power of two of at least 2), ``meta``
    (the packets' metadata layout or None), ``cut_input`` (bool) and ``output_slice``: True
    (default) puts a
    :class:`~rocegen.gateware.lib.buffer.RegisterSlice` at the output, so ``o`` is registered and
    ``o.ready`` ends in it; False leaves ``o`` straight from the gate (the block RAM's read data
    through the keep decoder) and ``o.ready`` driving the read side, for a parent that registers
    the stream itself (with a :class:`~rocegen.gateware.lib.pipe.ForwardRegister`, no LUT per bit,
    when its consumer's ``ready`` is short).

    Latency: the input goes through a :class:`~rocegen.gateware.lib.pipe.StreamForwardRegister`
    (``cut`` with each beat; ``i.ready`` a few LUTs from registers), one cycle; then a packet can
    leave once its last beat is stored and its verdict is known, ``PacketChecksum.latency``
    cycles after its last beat came in at the earliest (the verdict queue adds one more), and
    goes out through the output slice (one cycle more; none without it). A cut-through packet's
    first beat leaves 3 cycles after it enters (4 with the output slice), or 1 (2) when it
    passes beside an empty store; its verdict is offered ``PacketChecksum.latency`` cycles
    after its last beat came in (from the sum's register through a 16-bit compare), or later
    when an earlier one is still queued. Throughput: one beat per cycle in and out.
    """

    def __init__(self, width, depth, meta=None, *, output_slice=True, cut_input=False):
        check_width(width)
        if not isinstance(output_slice, bool):
            raise TypeError(f"output_slice must be a bool, not {output_slice!r}")
        if not isinstance(cut_input, bool):
            raise TypeError(f"cut_input must be a bool, not {cut_input!r}")
        self.output_slice = output_slice
        self.cut_input = cut_input
        self.width = width
        self.depth = depth
        self.meta = meta
        ports = {
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)),
            "seed": In(16),
            "skip": In(1),
            "drop_checksum": Out(1),
            "drop_error": Out(1),
            "drop_overflow": Out(1),
        }
        if cut_input:
            ports["cut"] = In(1)
            ports["cut_verdict"] = Out(stream.Signature(1))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        W = self.width
        # the store's metadata: the packets' own and whether the packet passes cut-through
        # (sampled with a cut packet's first beat, a stored packet's last: it is the packet's
        # ``cut`` either way)
        meta = empty_meta() if self.meta is None else self.meta
        inner = data.StructLayout({"m": meta, "cut": 1})
        store = m.submodules.store = PacketFifo(W, self.depth, inner, store_and_forward=True,
                                                drop_errors=True, overflow="wait",
                                                cut_input=self.cut_input)
        # an input forward register, with ``cut`` beside each beat: the store's write side
        # starts in registers; the store's ``ready`` is worked out from
        # registers (its ``full`` is one), so ``i.ready`` is a few LUTs from registers, and the
        # register costs no LUT per bit
        sl = m.submodules.input = StreamForwardRegister(data.StructLayout({
            "beat": packet_layout(W, self.meta), "cut": 1}))
        src = sl.o.payload.beat
        m.d.comb += [
            sl.i.valid.eq(self.i.valid), self.i.ready.eq(sl.i.ready),
            sl.i.payload.beat.eq(self.i.payload),
            sl.i.payload.cut.eq(self.cut if self.cut_input else 0),
            store.i.payload.data.eq(src.data), store.i.payload.keep.eq(src.keep),
            store.i.payload.last.eq(src.last), store.i.payload.error.eq(src.error),
            store.i.payload.meta.m.eq(src.meta),
        ]
        # ``beside``: the beat in the input register passes beside the store (a cut-through
        # packet that found the store empty at its first beat; the store stays empty while it
        # passes, since every beat goes beside it)
        beside = Signal()
        out_ready = Signal()            # the output stage takes a beat
        if self.cut_input:
            sl_first = Signal(init=1)
            passing = Signal()
            m.d.comb += beside.eq(Mux(sl_first, sl.o.payload.cut & store.empty, passing))
            with m.If(sl.o.valid & sl.o.ready):
                m.d.sync += [sl_first.eq(src.last), passing.eq(beside & ~src.last)]
        m.d.comb += [
            store.i.valid.eq(sl.o.valid & ~beside),
            sl.o.ready.eq(Mux(beside, out_ready, store.i.ready)),
        ]
        m.d.comb += [self.drop_error.eq(store.drop_error),
                     self.drop_overflow.eq(store.drop_overflow)]

        # the store's metadata ``cut``: sampled with a stored packet's first beat into the store
        i = store.i
        first = first_beat(m, i)
        cut_reg = Signal()
        with m.If(i.valid & i.ready & first):
            m.d.sync += cut_reg.eq(sl.o.payload.cut)
        cut_now = Signal()
        m.d.comb += [cut_now.eq(first & sl.o.payload.cut | ~first & cut_reg),
                     i.payload.meta.cut.eq(cut_now)]
        if self.cut_input:
            m.d.comb += store.cut.eq(sl.o.payload.cut)

        verdicts = self._verdicts(m)

        gate = m.submodules.gate = PacketGate(W, self.meta)
        so, gi = store.o.payload, gate.i.payload
        through = so.meta.cut
        m.d.comb += [
            gate.i.valid.eq(store.o.valid), store.o.ready.eq(gate.i.ready),
            gi.data.eq(so.data), gi.keep.eq(so.keep), gi.last.eq(so.last),
            gi.error.eq(so.error), gi.meta.eq(so.meta.m),
            # a cut-through packet passes without a verdict
            gate.verdict.valid.eq(through | verdicts.r_rdy),
            gate.verdict.payload.eq(through | verdicts.r_data),
            verdicts.r_en.eq(gate.verdict.ready & ~through),
            self.drop_checksum.eq(gate.dropped),
        ]
        # an output register slice: the memory's read data (and its keep decoder) end in it,
        # and ``o.ready`` does not reach the read side
        if self.output_slice:
            out = m.submodules.output = RegisterSlice(W, self.meta)
            wiring.connect(m, out.o, wiring.flipped(self.o))
            dst = out.i
        else:
            dst = self.o
        # the gate's packets, or the one passing beside the (then empty) store
        m.d.comb += [
            out_ready.eq(dst.ready),
            gate.o.ready.eq(dst.ready),
            dst.valid.eq(gate.o.valid | beside & sl.o.valid),
            dst.payload.eq(Mux(beside, src, gate.o.payload)),
        ]
        return m

    def _verdicts(self, m):
        """The checksum of every packet as it comes in, and its verdict: the stored packets'
        queue for the gate (returned), the cut-through packets' on ``cut_verdict``."""
        # the sum is taken at the input, in front of the input register: a packet's sum is known
        # ``latency`` cycles after its last beat came in, whichever way the packet goes on.
        # The cut-through packets' verdicts are queued (at most one per packet between the
        # input and the parent's point of use: the store's beats, its input and output
        # registers and a few of the parent's)
        cv = m.submodules.checksum = ChecksumVerdicts(self.width, self.meta,
                                                      depth=self.depth + 8)
        src_in = self.i
        m.d.comb += [*cv.observe(src_in), cv.seed.eq(self.seed), cv.skip.eq(self.skip),
                     cv.select.eq(self.cut if self.cut_input else 0)]
        # in "wait" mode the FIFO drops exactly the stored packets longer than its memory
        beats = Signal(range(self.depth + 2))
        with m.If(src_in.valid & src_in.ready):
            with m.If(src_in.payload.last):
                m.d.sync += beats.eq(0)
            with m.Elif(beats <= self.depth):
                m.d.sync += beats.eq(beats + 1)
        # a stored packet's verdict, for the gate (a cut-through one has none there)
        ends = src_in.valid & src_in.ready & src_in.payload.last
        fits = ends & ~src_in.payload.error & (beats < self.depth)
        pipe_fits = Signal(cv.latency)
        m.d.sync += pipe_fits.eq(Cat(fits, pipe_fits))
        verdicts = m.submodules.verdicts = fifo.SyncFIFOBuffered(width=1, depth=self.depth + 2)
        m.d.comb += [verdicts.w_en.eq(cv.done & pipe_fits[-1] & ~cv.selected),
                     verdicts.w_data.eq(cv.good)]
        if self.cut_input:
            wiring.connect(m, cv.verdict, wiring.flipped(self.cut_verdict))
        else:
            m.d.comb += cv.verdict.ready.eq(1)
        return verdicts
