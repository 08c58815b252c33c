"""Packet FIFO: a block-RAM queue of packet stream beats that can drop whole packets."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, empty_meta, keep_count, keep_mask

__all__ = ["PacketFifo", "OVERFLOW_MODES", "fifo_depth"]

OVERFLOW_MODES = ("drop", "wait")


class PacketFifo(wiring.Component):
    """Queue of up to ``depth`` beats of a packet stream, store-and-forward or cut-through.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    depth : int
        Beats of storage, a power of two >= 2. Beats held in the output stage count against it,
        so the FIFO never holds more than ``depth`` beats.
    meta : StructLayout or None
        Metadata of the packets, stored once per packet (not per beat).
    store_and_forward : bool
        ``True``: a packet becomes visible at the output only once its last beat is written, so
        a packet can be taken back. ``False``: every beat is visible as soon as it is written
        (cut-through); it then needs ``drop_errors=False`` (an errored packet leaves with
        ``error`` set on its last beat). With ``overflow="wait"`` it is an ordinary beat FIFO
        with backpressure; with ``overflow="drop"`` see below for how a packet that meets a full
        FIFO is cut short.
    drop_errors : bool
        Store-and-forward packets only. ``True``: a packet whose last beat has ``error`` set is
        discarded (``drop_error`` pulses); ``False``: it is stored and leaves with ``error`` set.
    overflow : ``"drop"`` or ``"wait"``
        ``"drop"``: ``i.ready`` is always 1 (for a source that cannot be stalled, such as a
        MAC). A store-and-forward packet that does not fit in the free space is dropped whole
        and ``drop_overflow`` pulses once for it. A cut-through packet starts only with room
        for two beats (or one, for a one-beat packet) and the metadata, else it is dropped
        whole; once started, a beat that would leave no room for the packet's end is written
        as its last beat with ``error`` set (the packet is *truncated*: its beats may already
        have left, so the consumer must drop a packet marked ``error``), ``drop_overflow``
        pulses and the rest of the input packet is discarded. ``"wait"``: ``i.ready`` is low
        while the FIFO is full (or, with metadata, while ``meta_depth`` packets are queued); a
        store-and-forward packet of more than ``depth`` beats can never fit, so once it has
        filled the whole memory it is dropped and counted in ``drop_overflow`` instead of
        deadlocking.
    cut_input : bool
        Store-and-forward only (``store_and_forward=True``). ``True`` adds the input ``cut``,
        sampled with the first beat of each packet: a packet with ``cut`` set passes as in
        cut-through (visible beat by beat, kept whatever its ``error``, truncated on overflow
        in ``"drop"`` mode), the others are stored and forwarded. Packets of both kinds leave
        in arrival order.
    bypass : bool
        Cut-through only (``store_and_forward=False``). ``True``: while the FIFO is empty
        (and not discarding the rest of a truncated packet), a beat on ``i`` is offered on
        ``o`` in the cycle it comes (latency 0); if ``o`` does not take it there, it stays on
        ``o`` from the read port (which is transparent to the write port for this) and the
        beats after it are queued as usual, except that a beat written while the read side
        waits for it is read in the same cycle (latency 1 instead of 2, until the FIFO is
        empty again).
        Every beat is written to the memory either way, so the level, the overflow rules and
        the order are those without the bypass. A bypassed beat's ``keep`` is the input's as
        it came (the memory holds a byte count, so only a beat read back from it has its
        ``keep`` rebuilt): the source must give thermometer codes, as a MAC does. A packet's
        first beat passed beside the FIFO carries the input's metadata; every other beat its
        packet's entry of the metadata queue (unbuffered with the bypass, so that an entry is
        read in the cycle after it is written).
    ram_style : None, ``"block"`` or ``"distributed"``
        The ``ram_style`` attribute of the beats' memory, for synthesis (``None``: none, the
        tool chooses by size; ``"block"`` suits a shallow queue of wide beats where LUTs are
        scarcer than block RAM).
    meta_depth : int or None
        Packets the metadata queue holds (1..``depth``; default ``depth``, which never limits
        the FIFO since every queued packet has at least one beat stored). A smaller queue saves
        memory when packets are long; when it is full a completing packet is dropped as an
        overflow (``"drop"``) or the input waits (``"wait"``). Unused when ``meta`` is empty.

    Ports
    -----
    i : In(PacketSignature(width, meta))
    o : Out(PacketSignature(width, meta))
    cut : In(1)
        Only with ``cut_input``: the packet whose first beat is on ``i`` passes cut-through.
    drop_error : Out(1)
        One-cycle pulse per packet discarded because of its ``error`` flag, registered: it comes
        in the cycle after the packet's last beat is accepted.
    drop_overflow : Out(1)
        One-cycle pulse per packet dropped for lack of room, registered: it comes in the cycle
        after the beat at which the FIFO found no room is accepted.
    level : Out(range(depth + 1))
        Beats stored: those of complete packets not yet sent on ``o`` (including the one in the
        output register) plus those of the packet being written.
    empty : Out(1)
        ``level`` is 0: no beat is stored, being written or offered on ``o``. A register.

    Behaviour
    ---------
    * Throughput: one beat per cycle in and one out in the same cycle; packets leave back to back
      without idle beats whenever their beats are available. (In ``"wait"`` mode a FIFO that was
      full accepts again in the cycle after a beat leaves.)
    * Latency: two cycles. The first beat of a packet is offered on ``o`` two cycles after its
      last beat (store-and-forward) or itself (cut-through) is accepted, if the output was idle;
      with ``bypass``, zero cycles for a beat that finds the FIFO empty and one for a beat
      the read side waits for.
      A cut-through packet behind a stored one waits for that one's last beat.
    * Backpressure: ``i.ready`` is 1 (``"drop"``) or depends on registers only (``"wait"``:
      "full" and, store-and-forward, "full of one unfinished packet" are registers worked out
      from the pointers' next values, so ``i.ready`` is one or two LUTs from registers), never
      on ``o.ready``. ``o.payload`` comes straight from the block
      RAM read port (through the keep decoder) and ``o.ready`` drives the read enable
      combinationally, as with
      :class:`amaranth.lib.fifo.SyncFIFOBuffered`; put a
      :class:`~rocegen.gateware.lib.buffer.RegisterSlice` behind it to register both.
    * Order and contents: packets leave in arrival order with data, byte count, ``last`` and
      ``error`` as they came. ``keep`` is stored as a byte count (the stream guarantees a
      thermometer code) and rebuilt as a thermometer code, so a malformed ``keep`` cannot leak
      a non-thermometer code. Metadata is sampled on the last beat (store-and-forward) or the
      first beat (cut-through) and held over the whole output packet. A truncated packet leaves
      with the beats written before its cut (every one full) and ``error`` on the last.
    * Byte order: beats are stored and replayed whole, lanes untouched (byte 0 in lane 0).
    * Malformed input never hangs the FIFO: a packet that never ends is dropped once it fills
      the memory (store-and-forward) or is truncated (cut-through, ``"drop"``), ``error`` on
      beats other than the last is carried but does not drop the packet.

    Implementation: beats live in an :class:`amaranth.lib.memory.Memory` with a write port and a
    synchronous read port; the pointers are our own, not :mod:`amaranth.lib.fifo`, because
    dropping a packet rewinds the write pointer to the last committed packet end, and because a
    slot is freed only when its beat leaves ``o`` (so the level is exact). The metadata queue is
    an :class:`amaranth.lib.fifo.SyncFIFOBuffered` (with the bypass an unbuffered
    :class:`amaranth.lib.fifo.SyncFIFO`, read in the cycle after an entry is written) written
    when a packet is committed (store-and-forward) or started (cut-through) and read when its
    last beat leaves.
    """

    def __init__(self, width, depth, meta=None, *, store_and_forward=True, drop_errors=True,
                 overflow="drop", meta_depth=None, ram_style=None, cut_input=False,
                 bypass=False):
        check_width(width)
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"depth must be an integer number of beats, not {depth!r}")
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two of at least 2 beats, not {depth}")
        if not isinstance(store_and_forward, bool):
            raise TypeError(f"store_and_forward must be a bool, not {store_and_forward!r}")
        if not isinstance(drop_errors, bool):
            raise TypeError(f"drop_errors must be a bool, not {drop_errors!r}")
        if overflow not in OVERFLOW_MODES:
            raise ValueError(f"overflow must be one of {', '.join(map(repr, OVERFLOW_MODES))}, "
                             f"not {overflow!r}")
        if not isinstance(cut_input, bool):
            raise TypeError(f"cut_input must be a bool, not {cut_input!r}")
        if cut_input and not store_and_forward:
            raise ValueError("cut_input chooses cut-through per packet in a store-and-forward FIFO; "
                             "a cut-through FIFO (store_and_forward=False) passes every packet so")
        if not store_and_forward and drop_errors:
            raise ValueError("a cut-through FIFO (store_and_forward=False) cannot take back the "
                             "beats of an errored packet; it needs drop_errors=False")
        if meta_depth is None:
            meta_depth = depth
        if not isinstance(meta_depth, int) or isinstance(meta_depth, bool):
            raise TypeError(f"meta_depth must be an integer number of packets, not {meta_depth!r}")
        if not 1 <= meta_depth <= depth:
            raise ValueError(f"meta_depth must be from 1 to depth ({depth}) packets, "
                             f"not {meta_depth}")
        if ram_style not in (None, "block", "distributed"):
            raise ValueError(f"ram_style must be None, 'block' or 'distributed', not {ram_style!r}")
        if not isinstance(bypass, bool):
            raise TypeError(f"bypass must be a bool, not {bypass!r}")
        if bypass and store_and_forward:
            raise ValueError("bypass passes beats as they come, so it needs a cut-through FIFO "
                             "(store_and_forward=False)")
        meta = empty_meta() if meta is None else meta
        if not isinstance(meta, data.Layout):
            raise TypeError(f"meta must be a data.Layout or None, not {meta!r}")
        self.width = width
        self.depth = depth
        self.meta = meta
        self.store_and_forward = store_and_forward
        self.drop_errors = drop_errors
        self.overflow = overflow
        self.meta_depth = meta_depth
        self.ram_style = ram_style
        self.cut_input = cut_input
        self.bypass = bypass
        ports = {
            "i": In(PacketSignature(width, meta)),
            "o": Out(PacketSignature(width, meta)),
            "drop_error": Out(1),
            "drop_overflow": Out(1),
            "level": Out(range(depth + 1)),
            "empty": Out(1, init=1),
        }
        if cut_input:
            ports["cut"] = In(1)
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        W, B, depth = self.width, self.width // 8, self.depth
        AW = depth.bit_length() - 1        # address bits; pointers carry one more (wrap) bit

        beat = data.StructLayout({
            "data": W,
            "count": range(B + 1),
            "last": 1,
            "error": 1,
        })
        m.submodules.mem = mem = Memory(shape=beat, depth=depth, init=[], attrs=(
            {"ram_style": self.ram_style} if self.ram_style else {}))
        wp = mem.write_port()
        # with the bypass, a beat offered as it came and not taken is read in the cycle it is
        # written, so the read port must see the write
        rp = mem.read_port(domain="sync", transparent_for=(wp,) if self.bypass else ())

        wr_ptr = Signal(AW + 1)             # next slot to write (speculative in S&F)
        fetch = Signal(AW + 1)              # next slot to read into the read port
        rd_ptr = Signal(AW + 1)             # oldest slot whose beat has not left ``o``
        # the pointer the read side may read up to: committed packet by packet (store and
        # forward, and cut-through with "drop", whose truncation needs the machinery), or the
        # write pointer itself (a plain cut-through FIFO)
        committed = self.store_and_forward or self.overflow == "drop"
        wr_commit = Signal(AW + 1) if committed else wr_ptr

        level = Signal(AW + 1)
        m.d.comb += [
            level.eq(wr_ptr - rd_ptr),
            self.level.eq(level),
        ]
        # the pointers' next values; ``full`` (level == depth = 2**AW) is a register worked out
        # from them, so it always equals ``level[AW]`` and ``i.ready`` needs no subtraction;
        # ``spare`` (at least two free slots) likewise, for truncating cut-through packets
        wr_next = Signal(AW + 1)
        rd_next = Signal(AW + 1)
        full_next = Signal()
        full = Signal()
        spare = Signal(init=1)           # at least two slots free (depth >= 2)
        m.d.comb += [wr_next.eq(wr_ptr), rd_next.eq(rd_ptr),
                     full_next.eq((wr_next - rd_next)[AW])]
        m.d.sync += [wr_ptr.eq(wr_next), rd_ptr.eq(rd_next), full.eq(full_next),
                     spare.eq((wr_next - rd_next)[:AW + 1] < depth - 1),
                     self.empty.eq(wr_next == rd_next)]
        ptrs = dict(fetch=fetch, rd_next=rd_next, rd_ptr=rd_ptr, wr_commit=wr_commit,
                    dropping=Const(0, 1),
                    wr_next=wr_next, wr_ptr=wr_ptr, full=full, full_next=full_next, spare=spare)
        self._elaborate_write(m, AW, B, ptrs, rp, wp, committed)
        return m

    def _meta_queue(self, m, gone):
        """The metadata queue: (room for one more packet, entry ready, push, pop, head entry).
        ``gone``: a one-beat packet passes beside the FIFO whole in this cycle (its entry is
        neither pushed nor popped)."""
        i, o, depth = self.i, self.o, self.depth
        if not self.meta.size:
            return Const(1, 1), Const(1, 1), Signal(), Signal(), None
        push, pop = Signal(), Signal()
        if self.bypass:
            # (with the bypass, an entry written in cycle t must be readable in t + 1: the
            # packet's first beat, offered as it came and not taken, is offered from the read
            # port then. The unbuffered queue reads its LUT RAM combinationally.)
            m.submodules.meta_fifo = mf = SyncFIFO(width=self.meta.size,
                                                   depth=self.meta_depth + 1)
        else:
            m.submodules.meta_fifo = mf = SyncFIFOBuffered(width=self.meta.size,
                                                           depth=self.meta_depth + 1)
        m.d.comb += [mf.w_en.eq(push & ~gone), mf.r_en.eq(pop & ~gone)]
        meta_ok = Signal()              # room for one more packet's metadata
        # ``level`` of the queue counts every queued entry exactly; one spare entry keeps its
        # memory from ever being full when we write (w_rdy stays high). (With the bypass, the
        # packet leaving ``o`` may hold an entry with none of its beats stored, but only while
        # the FIFO is empty: still at most ``depth`` entries.)
        if self.meta_depth >= depth:
            # every queued packet has a beat stored (its last, until it leaves), so the
            # queue holds fewer than ``depth`` entries whenever the memory is not full: the
            # write side needs no look at its level (``full`` says it all)
            m.d.comb += meta_ok.eq(1)
        else:
            m.d.comb += meta_ok.eq(mf.level < self.meta_depth)
        m.d.comb += [
            mf.w_data.eq(i.payload.meta.as_value()),
            o.payload.meta.as_value().eq(mf.r_data),
        ]
        return meta_ok, mf.r_rdy, push, pop, mf.r_data

    def _elaborate_write(self, m, AW, B, ptrs, rp, wp, committed):
        """The commit pointer, the metadata queue, the write side (committed per packet in
        store-and-forward, per beat for cut-through packets) and the read side."""
        i = self.i
        wr_ptr, wr_next, wr_commit = ptrs["wr_ptr"], ptrs["wr_next"], ptrs["wr_commit"]
        full = ptrs["full"]
        if committed:
            commit_next = Signal(AW + 1)
            m.d.comb += commit_next.eq(wr_commit)
            m.d.sync += wr_commit.eq(commit_next)
        # a one-beat packet passes beside the FIFO whole (only with the bypass)
        gone = Signal() if self.bypass else Const(0, 1)
        meta_ok, meta_rdy, meta_push, meta_pop, meta_head = self._meta_queue(m, gone)

        # a beat cut short on overflow is written as the packet's last, marked ``error``
        force_end = Signal()
        m.d.comb += [
            wp.addr.eq(wr_ptr[:AW]),
            wp.data.data.eq(i.payload.data),
            wp.data.count.eq(keep_count(i.payload.keep)),
            wp.data.last.eq(i.payload.last | force_end),
            wp.data.error.eq(i.payload.error | force_end),
        ]
        accept = Signal()
        m.d.comb += accept.eq(i.valid & i.ready)
        first = Signal(init=1)              # the next beat starts a packet
        with m.If(accept):
            m.d.sync += first.eq(i.payload.last)
        ptrs.update(first=first, gone=gone, meta_head=meta_head)

        if committed:
            self._committed_write(m, ptrs, wp, meta_ok, meta_push, commit_next, accept, first,
                                  force_end)
        else:
            m.d.comb += i.ready.eq(~full & (~first | meta_ok))
            with m.If(accept):
                m.d.comb += [wp.en.eq(1), meta_push.eq(first), wr_next.eq(wr_ptr + 1)]
        self._elaborate_read(m, ptrs, rp, wp, B, meta_rdy, meta_pop)

    def _committed_write(self, m, ptrs, wp, meta_ok, meta_push, commit_next, accept, first,
                         force_end):
        """The write side of a FIFO that commits what the read side may take: whole packets
        (store-and-forward) or every beat (cut-through packets, which are cut short on
        overflow in "drop" mode)."""
        i = self.i
        wr_ptr, wr_next, wr_commit = ptrs["wr_ptr"], ptrs["wr_next"], ptrs["wr_commit"]
        full, spare = ptrs["full"], ptrs["spare"]
        last = i.payload.last
        # is the packet on ``i`` cut-through: sampled with its first beat
        if self.cut_input:
            cut_reg = Signal()
            with m.If(accept & first):
                m.d.sync += cut_reg.eq(self.cut)
            cut = Signal()
            m.d.comb += cut.eq(Mux(first, self.cut, cut_reg))
        else:
            cut = Const(int(not self.store_and_forward), 1)

        dropping = ptrs["dropping"] = Signal()   # discarding the rest of a dropped packet
        if self.overflow == "drop":
            m.d.comb += i.ready.eq(1)
        else:
            # full of a single unfinished packet: it can never fit, take it to drop it (a
            # register worked out from the next pointers, like ``full``)
            hopeless = Signal()
            m.d.sync += hopeless.eq(ptrs["full_next"] & (ptrs["rd_next"] == commit_next))
            m.d.comb += i.ready.eq(dropping | (~full & meta_ok) | hopeless)

        drop_error = Signal()
        drop_overflow = Signal()
        err_drop = (last & i.payload.error & ~cut) if self.drop_errors else Const(0)
        m.d.sync += [self.drop_error.eq(drop_error), self.drop_overflow.eq(drop_overflow)]
        # a beat is written when it is taken, not part of a dropped packet and has room; in
        # "wait" mode room (with ``meta_ok``) is what makes ``ready`` high, so the write
        # decision is made without ``ready`` (and its ``hopeless`` term). A cut-through packet
        # in "drop" mode starts only with room for its end (two beats, or one for a one-beat
        # packet) and, once started, always has a free slot: a beat that would leave none is
        # written as the packet's end (``force_end``)
        if self.overflow == "wait":
            room = ~full & meta_ok
        else:
            sf_room = ~full & (~last | meta_ok)
            cut_room = Mux(first, (spare | last & ~full) & meta_ok, 1)
            room = Mux(cut, cut_room, sf_room)
            m.d.comb += force_end.eq(cut & ~first & ~last & ~spare)
        write = Signal()
        m.d.comb += write.eq(i.valid & ~dropping & ~err_drop & room)
        with m.If(write):
            m.d.comb += [wp.en.eq(1), wr_next.eq(wr_ptr + 1)]
            with m.If(cut):
                m.d.comb += [commit_next.eq(wr_ptr + 1), meta_push.eq(first)]
            with m.Elif(last):
                m.d.comb += [commit_next.eq(wr_ptr + 1), meta_push.eq(1)]
            with m.If(force_end):
                m.d.comb += drop_overflow.eq(1)
                m.d.sync += dropping.eq(1)
        with m.Elif(accept):
            with m.If(dropping):
                with m.If(last):
                    m.d.sync += dropping.eq(0)
            with m.Elif(err_drop):
                m.d.comb += [wr_next.eq(wr_commit), drop_error.eq(1)]
            with m.Else():
                # full, or (the last beat) no room for the metadata
                m.d.comb += [wr_next.eq(wr_commit), drop_overflow.eq(1)]
                with m.If(~last):
                    m.d.sync += dropping.eq(1)

    def _elaborate_read(self, m, ptrs, rp, wp, B, meta_rdy, meta_pop):
        """The read side: the read port's output register is the output stage (or, with the
        bypass and an empty FIFO, the input itself)."""
        o = self.o
        fetch, wr_commit = ptrs["fetch"], ptrs["wr_commit"]
        AW = len(fetch) - 1
        # ``rv`` says the read port's output register holds a beat
        rv = Signal()
        take = Signal()
        load = Signal()
        avail = Signal()
        m.d.comb += [
            take.eq(o.valid & o.ready),
            load.eq(~rv | take),
            avail.eq(fetch != wr_commit),
            rp.addr.eq(fetch[:AW]),
            meta_pop.eq(take & rp.data.last),
        ]

        def from_memory(fresh):
            # the read port's register is the output; ``fresh``: the beat being written is
            # also the next one to read (read in its cycle through the transparent port)
            m.d.comb += [
                o.valid.eq(rv & meta_rdy),
                rp.en.eq(load & (avail | fresh)),
                o.payload.data.eq(rp.data.data),
                o.payload.keep.eq(keep_mask(rp.data.count, B)),
                o.payload.last.eq(rp.data.last),
                o.payload.error.eq(rp.data.error),
            ]
            with m.If(load):
                m.d.sync += rv.eq(avail | fresh)
                with m.If(avail | fresh):
                    m.d.sync += fetch.eq(fetch + 1)

        if not self.bypass:
            from_memory(Const(0, 1))
        else:
            # empty (nothing stored, being written or offered) and not discarding a packet's
            # rest: the beat being written this cycle is offered as it comes. ``fetch`` then
            # equals the write pointer, so the beat's slot is the one the read port addresses.
            with m.If(self.empty & ~ptrs["dropping"]):
                m.d.comb += [o.valid.eq(wp.en), o.payload.data.eq(self.i.payload.data),
                             o.payload.keep.eq(self.i.payload.keep),
                             o.payload.last.eq(wp.data.last), o.payload.error.eq(wp.data.error)]
                if ptrs["meta_head"] is not None:
                    # a packet's first beat: its metadata as they come (its entry is pushed
                    # now); a later beat's: its packet's entry, at the queue's head since the
                    # cycle after its first beat
                    first = ptrs["first"]
                    m.d.comb += [
                        o.payload.meta.eq(Mux(first, self.i.payload.meta.as_value(),
                                              ptrs["meta_head"])),
                        ptrs["gone"].eq(first & wp.en & o.ready & wp.data.last),
                        meta_pop.eq(take & wp.data.last),
                    ]
                # not taken: the read port loads it (through the transparent port), so it
                # stays on ``o``; taken: its slot is skipped
                m.d.comb += rp.en.eq(wp.en & ~o.ready)
                with m.If(wp.en):
                    m.d.sync += [fetch.eq(fetch + 1), rv.eq(~o.ready)]
            with m.Else():
                # the queue behind a held beat follows one cycle behind its input, not two
                from_memory(wp.en & (fetch == ptrs["wr_ptr"]))
        with m.If(take):
            m.d.comb += ptrs["rd_next"].eq(ptrs["rd_ptr"] + 1)


def fifo_depth(max_bytes, width, *, packets=1):
    """Smallest power-of-two depth (at least 2 beats) that holds ``packets`` packets of up to
    ``max_bytes`` bytes each on a ``width``-bit stream."""
    if max_bytes < 0 or packets < 1:
        raise ValueError(f"cannot size a FIFO for {packets} packets of {max_bytes} bytes")
    beats = packets * max(1, -(-max_bytes // (width // 8)))
    return max(2, 1 << (beats - 1).bit_length())
