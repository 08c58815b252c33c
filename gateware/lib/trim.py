from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.stream import PacketSignature, check_width, packet_layout

__all__ = ["Trim"]


class Trim(wiring.Component):
    """Cut every packet to exactly ``length`` bytes.

    Used to remove Ethernet padding (``length`` from the IPv4 total length) and to check that a
    packet to transmit has the length its headers claim.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    meta : StructLayout or None
        Metadata of the streams, passed through.
    registered : bool
        ``True``: an input stage (a :class:`~rocegen.gateware.lib.buffer.StreamRegisterSlice`)
        takes each beat with the lanes of it that are within ``length`` already compared, so
        that the cut decision depends on registers only and ``i.ready`` on registers only; one
        cycle of latency more (see Latency below). ``False`` (default): zero latency.
    bias : int
        Bytes ``length`` counts beyond the wanted length (0 to 32767), taken by the lane
        compares' constants, so that a parent whose length field counts a header the stream
        no longer holds (IPv4's total length) needs no subtractor in front of them.

    Ports
    -----
    i : ``In(PacketSignature(width, meta))``
    o : ``Out(PacketSignature(width, meta))``
    length : ``In(16)``
        Wanted length in bytes plus ``bias``, driven combinationally by the parent (normally
        from ``i.payload.meta``); sampled with the first beat of each packet (in the cycle it is
        offered) and held for the rest of the packet. A value below ``bias`` wants 0 bytes.
    short : ``Out(1)``
        High for one cycle, in the cycle the last beat of a packet shorter than ``length`` moves
        on ``o``.
    long : ``Out(1)``
        High for one cycle, in the cycle the beat that reaches ``length`` bytes is consumed (with
        ``registered``: leaves on ``o``), when the packet has bytes beyond it.

    Behaviour
    ---------
    * A packet of ``length`` bytes or more leaves with exactly its first ``length`` bytes: the
      beat in which the count reaches ``length`` becomes the last one, with ``keep`` cut to the
      remaining bytes (``length == 0`` gives an empty packet, one beat with ``keep == 0``); the
      input beats after it are consumed and discarded. ``error`` of the output's last beat is
      the ``error`` of the input's last beat, so a damaged frame stays marked as damaged.
    * A packet shorter than ``length`` passes whole, with ``error`` set on its last beat.
    * Latency: zero cycles (``o`` is combinational from ``i``, ``i.ready`` from ``o.ready``),
      with one exception: when bytes are cut and the beat that reaches ``length`` is not the
      input's last, that beat is taken into a register (when ``o.ready`` is high) while the rest
      of the input packet is discarded (one input beat per cycle, whatever ``o.ready``), and
      leaves in the cycle the input's last beat is consumed, carrying that beat's ``error``.
      Every output beat thus moves in the same cycle as an input beat. With ``registered``,
      each output beat moves one cycle after the input beat it comes from at the earliest;
      the beats after a cut beat are discarded at the input (one per cycle, whatever
      ``o.ready``) while the cut beat waits at the stage's output, which it leaves once its
      packet's last input beat has been consumed. ``i.ready`` depends on registers only and
      ``length`` is compared in the cycle the first beat is accepted; the cut needs no data
      register or multiplexer besides the stage's.
    * Throughput: one input beat per cycle, sustained across back-to-back packets.
    * Timing: the output ``keep`` is ``i.keep`` masked with ``remaining > j`` for each lane
      ``j``, where ``remaining`` is ``length`` minus the bytes already passed (a register
      decremented by W/8 per beat): comparisons with constants, no shifter on the data path.
      ``i.ready`` depends only on ``o.ready``, ``i.payload.last`` and state.
    """

    def __init__(self, width, meta=None, *, registered=False, bias=0):
        check_width(width)
        if not isinstance(registered, bool):
            raise TypeError(f"registered must be a bool, not {registered!r}")
        self.width = width
        self.meta = meta
        self.registered = registered
        if not isinstance(bias, int) or isinstance(bias, bool) or not 0 <= bias < 1 << 15:
            raise ValueError(f"bias must be a number of bytes from 0 to 32767, not {bias!r}")
        self.bias = bias
        super().__init__({
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)),
            "length": In(16),
            "short": Out(1),
            "long": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        i, o = self.i, self.o

        first = Signal(init=1)             # the next input beat is a packet's first
        rem_r = Signal(16)                 # bytes still to pass, for a beat other than the first

        bias = self.bias

        def lanes_of(rem):
            # lanes still within length, and "this beat reaches length" (``rem`` counts the
            # bias too: the compares take it, no subtraction)
            return Cat(*(rem > j + bias for j in range(B))), rem <= B + bias

        rem = Signal(16)                   # bytes still to pass, this beat's included
        m.d.comb += rem.eq(Mux(first, self.length, rem_r))
        if self.registered:
            self._elaborate_registered(m, lanes_of, first, rem_r, rem)
            return m

        hold = Signal()                    # the cut last beat waits in h_* while the rest drains
        h_data = Signal(self.width)
        h_keep = Signal(B)

        lane = Signal(B)                   # lanes still within length
        fits = Signal()                    # this beat reaches length
        m.d.comb += [lane.eq(lanes_of(rem)[0]), fits.eq(lanes_of(rem)[1])]
        keep_out = i.payload.keep & lane
        beyond = (i.payload.keep & ~lane).any()
        cut = Signal()                     # bytes beyond length: this beat ends the output
        m.d.comb += cut.eq(fits & (~i.payload.last | beyond))
        short = Signal()
        m.d.comb += short.eq(i.payload.last & (~fits | (lane & ~i.payload.keep).any()))

        # h_* follow the input until hold is set, so the wide registers do not wait for the
        # cut decision (no enable from the keep logic)
        with m.If(~hold):
            m.d.sync += [h_data.eq(i.payload.data), h_keep.eq(keep_out)]

        m.d.comb += o.payload.meta.eq(i.payload.meta)
        with m.If(hold):
            m.d.comb += [
                o.payload.data.eq(h_data),
                o.payload.keep.eq(h_keep),
                o.payload.last.eq(1),
                o.payload.error.eq(i.payload.error),
            ]
            with m.If(i.payload.last):
                m.d.comb += [o.valid.eq(i.valid), i.ready.eq(o.ready)]
                with m.If(i.valid & o.ready):
                    m.d.sync += [hold.eq(0), first.eq(1)]
            with m.Else():
                m.d.comb += i.ready.eq(1)  # discard
        with m.Else():
            m.d.comb += i.ready.eq(o.ready)
            with m.If(cut & ~i.payload.last):
                # keep the new last beat until the input's last beat brings its error flag
                with m.If(i.valid & o.ready):
                    m.d.sync += [hold.eq(1), first.eq(0)]
                    m.d.comb += self.long.eq(1)
            with m.Else():
                m.d.comb += [
                    o.valid.eq(i.valid),
                    o.payload.data.eq(i.payload.data),
                    o.payload.keep.eq(keep_out),
                    o.payload.last.eq(i.payload.last),
                    o.payload.error.eq(i.payload.error | short),
                ]
                with m.If(i.valid & o.ready):
                    m.d.sync += [first.eq(i.payload.last), rem_r.eq(rem - B)]
                    m.d.comb += [self.long.eq(cut), self.short.eq(short)]
        return m

    def _elaborate_registered(self, m, lanes_of, first, rem_r, rem):
        # The input stage takes every beat up to the one that reaches ``length``, with its lanes
        # within length and whether it is cut compared before the register. The beats after a
        # cut beat that is not its packet's last are discarded at the input; the cut beat waits
        # at the stage's output until the packet's last input beat has been consumed, and
        # leaves as the last beat with that beat's error flag (a two-entry queue of those flags:
        # the stage holds at most two beats). No data register or multiplexer besides the
        # stage's own.
        B = self.width // 8
        i, o = self.i, self.o
        ann = data.StructLayout({"beat": packet_layout(self.width, self.meta), "lane": B,
                                 "fits": 1, "cut_early": 1})
        st = m.submodules.stage = StreamRegisterSlice(ann)
        in_lane, in_fits = lanes_of(rem)
        cut_early = Signal()               # cut, and bytes of the packet follow in later beats
        m.d.comb += cut_early.eq(in_fits & ~i.payload.last)
        drain = Signal()                   # discarding the rest of a cut packet
        m.d.comb += [
            st.i.valid.eq(i.valid & ~drain),
            i.ready.eq(drain | st.i.ready),
            st.i.payload.beat.eq(i.payload),
            st.i.payload.lane.eq(in_lane), st.i.payload.fits.eq(in_fits),
            st.i.payload.cut_early.eq(cut_early),
        ]
        with m.If(i.valid & i.ready):
            m.d.sync += [first.eq(i.payload.last), rem_r.eq(rem - B)]
        with m.If(st.i.valid & st.i.ready & cut_early):
            m.d.sync += drain.eq(1)

        # error flags of the drained packets whose cut beat has not left (oldest in e0)
        count = Signal(range(3))
        e0 = Signal()
        e1 = Signal()
        push = drain & i.valid & i.payload.last
        with m.If(push):
            m.d.sync += drain.eq(0)

        b = st.o.payload
        keep_out = b.beat.keep & b.lane
        beyond = (b.beat.keep & ~b.lane).any()
        short = Signal()
        m.d.comb += short.eq(b.beat.last & (~b.fits | (b.lane & ~b.beat.keep).any()))
        go = Signal()                      # the beat at the stage's output may leave
        m.d.comb += [
            go.eq(~b.cut_early | (count != 0)),
            o.valid.eq(st.o.valid & go),
            st.o.ready.eq(o.ready & go),
            o.payload.data.eq(b.beat.data),
            o.payload.keep.eq(keep_out),
            o.payload.meta.eq(b.beat.meta),
            o.payload.last.eq(b.beat.last | b.cut_early),
            o.payload.error.eq(Mux(b.cut_early, e0, b.beat.error | short)),
        ]
        moves = st.o.valid & st.o.ready
        pop = moves & b.cut_early
        with m.If(moves):
            m.d.comb += [self.long.eq(b.fits & (b.cut_early | beyond)),
                         self.short.eq(short & ~b.cut_early)]
        mid = Signal(range(3))
        m.d.comb += mid.eq(count - pop)
        e0_next = Signal()
        e1_next = Signal()
        m.d.comb += [e0_next.eq(Mux(pop, e1, e0)), e1_next.eq(e1)]
        with m.If(push):
            with m.If(mid == 0):
                m.d.comb += e0_next.eq(i.payload.error)
            with m.Else():
                m.d.comb += e1_next.eq(i.payload.error)
        m.d.sync += [e0.eq(e0_next), e1.eq(e1_next), count.eq(mid + push)]
