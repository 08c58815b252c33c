"""Word writes to AXI4 write bursts, with a count of the words the memory has acknowledged."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import BURST_INCR, Axi4Signature
from rocegen.gateware.lib.memport import MemWriteSignature, mem_write_layout
from rocegen.gateware.lib.stream import check_width

__all__ = ["AxiWriter", "AXI_CACHE", "tagged_write_layout"]

#: ``awcache`` of every burst: normal, non-cacheable, bufferable (a read that follows the write
#: response still sees the data).
AXI_CACHE = 0b0011


def _payload(sig, channel):
    """Payload layout of one channel of an :class:`Axi4Signature`."""
    return sig.members[channel].signature.members["payload"].shape


def tagged_write_layout(width, addr_width, tags):
    """Payload of a word write with its source: ``addr``, ``data``, ``be`` (as
    :func:`~rocegen.gateware.lib.memport.mem_write_layout`) and ``tag`` (``range(tags)``)."""
    return data.StructLayout({**mem_write_layout(width, addr_width).members, "tag": range(tags)})


def _check_int(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")
    return value


class AxiWriter(wiring.Component):
    """AXI4 write master for a stream of word writes (a
    :func:`~rocegen.gateware.lib.memport.MemWriteSignature` port).

    Parameters
    ----------
    width : int
        Data width W (64..512): one word per AXI beat, ``size = log2(W/8)``.
    addr_width : int
        AXI byte-address width (12..64). The word addresses on ``i`` are
        ``min(32, addr_width - log2(W/8))`` bits wide; AXI address = word address * W/8.
    id_width : int
        AXI ID width (1..16); every burst uses ID 0, so write responses come back in order.
    max_burst : int
        Longest burst in beats (1..256).
    max_outstanding : int
        Bursts issued (or ready to issue) whose write response has not come back (1..256); more
        stall the input.
    idle_flush : int
        Cycles without a word on ``i`` after which the open burst is closed and sent (1..256).
    tags : int
        Write sources told apart (1..16): with more than one, each word on ``i`` carries a
        ``tag``, a burst holds words of one tag only, and ``durable_tag`` says whose words
        ``durable`` counts.
    rmw_tag : int or None
        None (default), or the tag (``0..tags - 1``, with ``tags`` > 1) of a locked
        read-modify-write's write backs (the payload reader's atomics): each word of this tag is
        a burst of its own, closed in the cycle after it is taken (not after ``idle_flush``
        cycles), and the writer has the ``quiet`` port.

    Ports
    -----
    i : In(MemWriteSignature(width, min(32, addr_width - log2(W/8))))
        Word writes ``{addr, data, be}``: ``data`` goes to ``wdata`` lanes unchanged (byte ``i``
        of the word at AXI byte address ``addr * W/8 + i``), ``be`` becomes ``wstrb``. With
        ``tags`` > 1 the payload has a ``tag`` field too (``range(tags)``, after ``be``): the
        word's source.
    aw, w : Out, b : In
        The write channels of :class:`~rocegen.gateware.lib.axi.Axi4Signature` (``addr_width``,
        ``width``, ``id_width``), to be connected to the ``aw``/``w``/``b`` members of an AXI4
        master port (the read channels are someone else's).
    durable : Out(range(max_burst + 1))
        Words whose write response arrived, counted in the cycle after the response (registered);
        words become durable in the order they were taken on ``i``. Connects to
        :class:`~rocegen.gateware.roce.frontend.stream_in.StreamFrontEnd` ``mem_durable``.
    durable_tag : Out(range(tags)), with ``tags`` > 1 only
        The tag of the words ``durable`` counts (one burst, so one tag, per response);
        registered with ``durable``.
    write_errors : Out(32)
        Write responses other than OKAY (their words still count as durable: the memory has
        answered for them).
    outstanding : Out(range(max_outstanding + 1))
        Bursts closed and not yet answered.
    quiet : Out(1), with ``rmw_tag`` only
        No write outstanding: every word taken on ``i`` before this cycle has had its write
        response (none held, none in an open burst, every closed burst answered).
        Combinational from registers; a word taken in this cycle counts from the next one,
        and a response taken in cycle c from cycle c + 1 (with ``durable``).

    Bursts
        Every burst is INCR with ``len + 1`` consecutive words. A burst is closed at the word
        before which the next word's address does not follow, or (``tags`` > 1) whose tag
        differs (a new burst starts there), at ``max_burst`` words, at the last word of a 4 KiB
        page (a burst never crosses a 4 KiB boundary), at a word of ``rmw_tag`` (alone in its
        burst: the burst before it is closed by the tag change), or when no word has come for
        ``idle_flush`` cycles. To know whether a word ends its burst the writer holds it until
        the next word arrives (or one of the other conditions is met). AW of a burst is offered
        once the burst is closed; W beats of a burst are offered once the burst is closed too
        (never before its AW is queued), and ``wvalid`` never waits for ``awready`` nor
        ``awvalid`` for ``wready``. Bursts are queued (``max_outstanding`` deep for AW,
        ``2 * max_burst`` words for W), so many bursts are in flight; ``bready`` is always high.

    Throughput and latency
        One word per cycle on ``i`` while the queues have room. A burst is closed in the cycle its
        last word leaves the holding register: the cycle after that word is taken when the next
        word or a page/length limit (or ``rmw_tag``) decides it, else after ``idle_flush`` cycles
        without input.
        Its AW and its last W beat are offered 2 cycles after it is closed at the earliest (the
        queues' latency); ``durable`` counts its words in the cycle after its write response.
        ``i.ready`` depends on ``i.valid``/``i.payload`` and on registers only, never on the AXI
        ready signals.
    """

    def __init__(self, width, addr_width=32, id_width=1, max_burst=64, max_outstanding=16,
                 idle_flush=4, *, tags=1, rmw_tag=None):
        check_width(width)
        sig = Axi4Signature(addr_width, width, id_width)
        _check_int("max_burst", max_burst, 1, 256)
        _check_int("max_outstanding", max_outstanding, 1, 256)
        _check_int("idle_flush", idle_flush, 1, 256)
        _check_int("tags", tags, 1, 16)
        if rmw_tag is not None:
            if tags == 1:
                raise ValueError("rmw_tag needs tags > 1 (the write backs are a source of their "
                                 "own)")
            _check_int("rmw_tag", rmw_tag, 0, tags - 1)
        B = width // 8
        self.width, self.addr_width, self.id_width = width, addr_width, id_width
        self.max_burst, self.max_outstanding, self.idle_flush = max_burst, max_outstanding, idle_flush
        self.tags = tags
        self.rmw_tag = rmw_tag
        self.mem_addr_width = min(32, addr_width - (B.bit_length() - 1))
        if tags == 1:
            i_sig = MemWriteSignature(width, self.mem_addr_width)
        else:
            i_sig = stream.Signature(tagged_write_layout(width, self.mem_addr_width, tags))
        super().__init__({
            "i": In(i_sig),
            "aw": Out(stream.Signature(_payload(sig, "aw"))),
            "w": Out(stream.Signature(_payload(sig, "w"))),
            "b": In(stream.Signature(_payload(sig, "b"))),
            "durable": Out(range(max_burst + 1)),
            **({"durable_tag": Out(range(tags))} if tags > 1 else {}),
            "write_errors": Out(32),
            "outstanding": Out(range(max_outstanding + 1)),
            **({"quiet": Out(1)} if rmw_tag is not None else {}),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        lg = B.bit_length() - 1
        page_bits = (4096 // B).bit_length() - 1      # word-address bits inside a 4 KiB page
        aw_layout = data.StructLayout({"addr": self.mem_addr_width, "len": 8})
        w_layout = self.w.payload.shape()

        m.submodules.wq = wq = SyncFIFOBuffered(width=w_layout.size, depth=max(4, 2 * self.max_burst))
        m.submodules.awq = awq = SyncFIFOBuffered(width=aw_layout.size, depth=self.max_outstanding)
        # each closed burst's len (and tag), for its write response
        tag_bits = (self.tags - 1).bit_length()
        m.submodules.lens = lens = SyncFIFOBuffered(width=8 + tag_bits,
                                                    depth=self.max_outstanding)

        i = self.i
        hold = Signal(i.payload.shape())
        hold_v = Signal()
        count = Signal(range(self.max_burst))      # words of the open burst already queued on W
        burst_addr = Signal(self.mem_addr_width)
        idle = Signal(range(self.idle_flush))

        follows = Signal()
        next_addr = i.payload.addr == (hold.addr + 1)[:self.mem_addr_width]
        m.d.comb += follows.eq(next_addr if self.tags == 1 else
                               next_addr & (i.payload.tag == hold.tag))
        forced = (count == self.max_burst - 1) | hold.addr[:page_bits].all()
        if self.rmw_tag is not None:
            # (a write back goes at once: the payload reader waits for its response)
            forced = forced | (hold.tag == self.rmw_tag)
        flush = ~i.valid & (idle == self.idle_flush - 1)
        end_here = Signal()
        m.d.comb += end_here.eq(forced | (i.valid & ~follows) | flush)
        room = wq.w_rdy & (~end_here | (awq.w_rdy & lens.w_rdy))
        push = Signal()
        m.d.comb += [
            push.eq(hold_v & (i.valid | flush | forced) & room),
            i.ready.eq(~hold_v | push),
        ]

        beat = Signal(w_layout)
        burst = Signal(aw_layout)
        close = push & end_here
        m.d.comb += [
            beat.data.eq(hold.data), beat.strb.eq(hold.be), beat.last.eq(end_here),
            wq.w_data.eq(beat), wq.w_en.eq(push),
            burst.addr.eq(Mux(count == 0, hold.addr, burst_addr)), burst.len.eq(count),
            awq.w_data.eq(burst), awq.w_en.eq(close),
            lens.w_data.eq(count if self.tags == 1 else count | (hold.tag << 8)),
            lens.w_en.eq(close),
        ]
        with m.If(push):
            with m.If(end_here):
                m.d.sync += count.eq(0)
            with m.Else():
                m.d.sync += count.eq(count + 1)
                with m.If(count == 0):
                    m.d.sync += burst_addr.eq(hold.addr)
        with m.If(i.valid & i.ready):
            m.d.sync += [hold.eq(i.payload), hold_v.eq(1)]
        with m.Elif(push):
            m.d.sync += hold_v.eq(0)
        with m.If(~hold_v | i.valid | push):
            m.d.sync += idle.eq(0)
        with m.Elif(idle != self.idle_flush - 1):
            m.d.sync += idle.eq(idle + 1)

        # AW: one per closed burst
        head = data.View(aw_layout, awq.r_data)
        a = self.aw.payload
        m.d.comb += [
            self.aw.valid.eq(awq.r_rdy),
            awq.r_en.eq(self.aw.ready),
            a.id.eq(0),
            a.addr.eq(Cat(Const(0, lg), head.addr)),
            a.len.eq(head.len),
            a.size.eq(lg),
            a.burst.eq(BURST_INCR),
            a.lock.eq(0),
            a.cache.eq(AXI_CACHE),
            a.prot.eq(0),
        ]

        # W: beats of closed bursts only
        closed = Signal(range(self.max_outstanding + 1))     # closed bursts with W beats left
        w_ok = wq.r_rdy & (closed != 0)
        w_beat = data.View(w_layout, wq.r_data)
        m.d.comb += [
            self.w.valid.eq(w_ok),
            self.w.payload.eq(w_beat),
            wq.r_en.eq(self.w.ready & (closed != 0)),
        ]
        w_done = self.w.valid & self.w.ready & w_beat.last
        m.d.sync += closed.eq(closed + close - w_done)

        # B: in order (one ID), each answers the oldest burst
        m.d.comb += [self.b.ready.eq(1), lens.r_en.eq(self.b.valid)]
        m.d.sync += self.durable.eq(Mux(self.b.valid & lens.r_rdy, lens.r_data[:8] + 1, 0))
        if self.tags > 1:
            m.d.sync += self.durable_tag.eq(lens.r_data[8:])
        with m.If(self.b.valid & (self.b.payload.resp != 0)):
            m.d.sync += self.write_errors.eq(self.write_errors + 1)
        m.d.comb += self.outstanding.eq(lens.level)
        if self.rmw_tag is not None:
            # (an open burst's last word is always held: nothing held, nothing open)
            m.d.comb += self.quiet.eq(~hold_v & (lens.level == 0))
        return m
