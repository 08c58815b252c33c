"""The streaming front end: user messages in, stored in a ring of local memory, work requests out."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature
from rocegen.gateware.lib.pipe import StreamForwardRegister
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_count, packet_layout
from rocegen.gateware.roce.frontend.stream_place import RingPlacer
from rocegen.gateware.roce.frontend.stream_post import DURABLE_WIDTH, StreamPoster
from rocegen.gateware.roce.frontend.stream_space import RingSpace
from rocegen.gateware.roce.layouts import COMPLETION, STREAM_FINISHED, WR_TAGGED, WrOpcode

__all__ = ["StreamFrontEnd", "STREAM_META", "DURABLE_WIDTH"]

#: Per-message sideband of the front end's input (constant over a message).
STREAM_META = data.StructLayout({
    "qp": 8,
    "opcode": WrOpcode,
    "imm": 32,
    "remote_offset": 64,
})


def _bits(limit):
    """Bits of an unsigned number from 0 to ``limit``."""
    return max(1, limit.bit_length())


def _check_int(name, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return value


class StreamFrontEnd(wiring.Component):
    """Streaming front end: turns a stream of user messages into work requests whose payload sits
    in a ring buffer of local memory.

    Parameters
    ----------
    width : int
        Data width W of the input stream and of the memory words (64..512).
    ring_base, ring_bytes : int
        The ring is the local byte range ``[ring_base, ring_base + ring_bytes)``; both multiples of
        the word (W/8 bytes), inside the 32-bit local address space.
    max_message : int
        Largest message in bytes (1 .. ``min(ring_bytes, 2^31 - 1)``). A message starts only when
        ``ceil(max_message / (W/8))`` words of the ring are free in one piece.
    max_inflight : int
        Messages that may be stored and not yet completed (1..4096): the depth of the queue of
        finished messages.
    addr_width : int or None
        Word-address width of ``mem``; default ``32 - log2(W/8)`` (the whole 32-bit local space,
        the width :class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter` takes by default). The end
        of the ring must be addressable.

    Ports
    -----
    i : In(PacketSignature(width, STREAM_META))
        User messages: ``last`` ends a message, ``meta`` is sampled on the last beat, bytes outside
        ``keep`` are ignored, ``error`` on the last beat discards the message.
    mem : Out(MemWriteSignature(width, addr_width))
        Word writes of the messages into the ring: beat ``k`` of a message, lanes unchanged, is
        word ``k`` from the message's start (so byte ``n`` of the message is at byte address
        ``local_addr + n``); ``be`` = ``keep`` (a partial last word leaves the rest of its memory
        word untouched; the beat of a 0-byte message writes nothing).
    mem_durable : In(DURABLE_WIDTH)
        Number of words written on ``mem`` that became durable in this cycle, in the order they
        were written (every accepted write counts once, also those of messages dropped later).
        On-chip memory: tie to ``mem.valid & mem.ready``; AXI4 through
        :class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter`: its ``durable`` output.
    wr : Out(stream.Signature(WR_TAGGED))
        One work request per stored message, in message order: ``src = STREAM``, ``wr_id`` = the
        message's number (0, 1, ... counting stored messages only), ``local_addr`` = its byte
        address in the ring, ``length`` in bytes, ``qp``/``opcode``/``imm``/``remote_offset``
        from the meta. A work request is offered only once every word of its message is durable.
    cpl : In(stream.Signature(COMPLETION))
        Always ready. Completions with ``src == STREAM`` free the ring space of the oldest
        posted message, whatever their status, and count in ``completed_ok`` /
        ``completed_err``; those of other sources are ignored.
    posted, completed_ok, completed_err, drop_too_long, drop_error : Out(32)
        Event counters. A message longer than ``max_message`` counts in ``drop_too_long``, one
        with ``error`` on its last beat in ``drop_error`` (only there when both apply).
    ring_used : Out(range(ring_words + 1))
        Words of the ring held by finished messages not yet completed (including the unused
        tails skipped when a message was placed at the ring start); a message finished in cycle
        t counts from cycle t + 2, a completion in cycle t from cycle t + 1.
    inflight : Out(range(max_inflight + 1))
        Finished messages not yet completed (counted as ``ring_used``).

    Ring management
        Messages are stored one after another from the ring start, each on a word boundary; a
        message never wraps: when fewer than ``max_message`` bytes remain before the ring end it
        starts at ``ring_base`` (the skipped tail stays reserved until that message completes; an
        empty ring restarts at ``ring_base``: a message beginning in cycle t does when the ring
        was empty in cycle t - 2 and no message finished since). A message starts only when ``max_message``
        bytes are free there and the queue of finished messages has room, so it can never
        overwrite a message not yet completed. A dropped message (too long or error) gives its
        space back at once: the next message is written over it. Words beyond ``max_message`` of
        a too-long message are not written.

    Atomics
        A message whose ``meta.opcode`` is FETCH_ADD or COMPARE_SWAP (an endpoint built with
        atomics) is its 16 operand bytes, as every atomic's operands sit in local memory
        (``swap_add`` then ``compare``, 8 bytes each in the memory's byte order); its work
        request is posted in message order like the others, so a FETCH_ADD after WRITEs on the
        same QP is a doorbell the peer sees only once their data is there. Its length is not
        checked: a shorter message's operands end in whatever the ring holds after it. The
        original value lands over the message's first 8 bytes in the ring, which is freed at
        its completion: the front end does not report it (post the atomic on the endpoint's
        ``wr`` port when the value is wanted).

    Completion order
        The front end frees ring space in posting order, one message per completion: it assumes
        its completions come back in the order its work requests were posted. That holds when its
        messages go to one QP (completions are in order per QP) or when the completion path
        returns them in posting order; with several QPs and out-of-order completions a message
        could be freed while another one is still being sent.

    Throughput and backpressure
        One beat per cycle on ``i``, with no idle cycle between messages, while ``mem`` is ready
        and the ring and the queue have room. ``i`` enters a register first (with the beat's byte
        count); the first beat of a message waits there until the message fits, every beat waits
        for room in the forward register in front of ``mem``. Whether a message fits is decided from
        registers, one cycle ahead: exactly when no message finished in the two cycles before,
        else only with a margin (at most ``ring_words - 6 * ceil(max_message / (W/8)) + 3`` words
        used and ``max_inflight - 3`` messages in flight). Close to full, a message that begins
        right after another one ended may so wait up to 2 cycles; with more room than the margin
        messages follow each other without a gap. ``i.ready`` depends on registers only (and
        ``i.valid`` of the registered beat) and on ``mem.ready`` through one LUT; ``mem`` is
        the output of a forward register (:class:`~rocegen.gateware.lib.pipe.StreamForwardRegister`):
        no combinational path from ``i`` or from the ring state to ``mem``.

    Structure
        The input register and the one in front of ``mem`` are
        :class:`~rocegen.gateware.lib.pipe.StreamForwardRegister` s; where a message goes and whether
        it fits is worked out by :class:`~rocegen.gateware.roce.frontend.stream_place.RingPlacer`, the
        space held by messages until their completions by
        :class:`~rocegen.gateware.roce.frontend.stream_space.RingSpace`, and a stored message's work
        request waits in :class:`~rocegen.gateware.roce.frontend.stream_post.StreamPoster` until its
        words are durable.

    Latency
        A beat taken on ``i`` in cycle t is offered on ``mem`` in cycle t + 2 at the earliest. A
        message's work request is offered 4 cycles after its last beat is taken, or 1 cycle
        after its last word becomes durable if that is later. A completion frees its space for a
        message beginning 2 cycles later.
    """

    def __init__(self, width, ring_base, ring_bytes, max_message, max_inflight=64, addr_width=None):
        check_width(width)
        B = width // 8
        lg = B.bit_length() - 1
        _check_int("ring_base", ring_base)
        _check_int("ring_bytes", ring_bytes)
        _check_int("max_message", max_message)
        _check_int("max_inflight", max_inflight)
        if ring_base < 0 or ring_base % B:
            raise ValueError(f"ring_base must be a non-negative multiple of the {B}-byte memory word, "
                             f"not {ring_base:#x}")
        if ring_bytes <= 0 or ring_bytes % B:
            raise ValueError(f"ring_bytes must be a positive multiple of the {B}-byte memory word, "
                             f"not {ring_bytes}")
        if ring_base + ring_bytes > 1 << 32:
            raise ValueError(f"the ring [{ring_base:#x}, {ring_base + ring_bytes:#x}) must lie in the "
                             f"32-bit local address space")
        if not 1 <= max_message <= ring_bytes:
            raise ValueError(f"max_message must be from 1 to ring_bytes ({ring_bytes}) bytes, "
                             f"not {max_message}")
        if max_message >= 1 << 31:
            raise ValueError(f"max_message must be below 2^31 bytes (a work request's length), "
                             f"not {max_message}")
        if not 1 <= max_inflight <= 4096:
            raise ValueError(f"max_inflight must be from 1 to 4096 messages, not {max_inflight}")
        if addr_width is None:
            addr_width = 32 - lg
        _check_int("addr_width", addr_width)
        if not 1 <= addr_width <= 32:
            raise ValueError(f"addr_width must be 1..32 bits, not {addr_width}")
        if (ring_base + ring_bytes) // B > 1 << addr_width:
            raise ValueError(f"the ring ends at word {(ring_base + ring_bytes) // B:#x}, beyond the "
                             f"{addr_width}-bit word addresses of the memory port")
        self.width, self.ring_base, self.ring_bytes = width, ring_base, ring_bytes
        self.max_message, self.max_inflight, self.addr_width = max_message, max_inflight, addr_width
        self.ring_words = ring_bytes // B
        super().__init__({
            "i": In(PacketSignature(width, STREAM_META)),
            "mem": Out(MemWriteSignature(width, addr_width)),
            "mem_durable": In(DURABLE_WIDTH),
            "wr": Out(stream.Signature(WR_TAGGED)),
            "cpl": In(stream.Signature(COMPLETION)),
            "posted": Out(32),
            "completed_ok": Out(32),
            "completed_err": Out(32),
            "drop_too_long": Out(32),
            "drop_error": Out(32),
            "ring_used": Out(range(self.ring_words + 1)),
            "inflight": Out(range(max_inflight + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lg = B.bit_length() - 1
        R = self.ring_words
        M = -(-self.max_message // B)          # words reserved for a message
        base = self.ring_base // B
        N = self.max_inflight

        # ---- stored messages: posted once durable, their space held until completed ----
        post = m.submodules.post = StreamPoster(N)
        m.d.comb += post.mem_durable.eq(self.mem_durable)
        wiring.connect(m, post.wr, wiring.flipped(self.wr))
        space = m.submodules.space = RingSpace(R, N)
        wiring.connect(m, wiring.flipped(self.cpl), space.cpl)
        used, nfl = space.used, space.inflight
        m.d.comb += [self.ring_used.eq(used), self.inflight.eq(nfl),
                     self.completed_ok.eq(space.completed_ok),
                     self.completed_err.eq(space.completed_err)]
        # word writes leave through a forward register: no path from here into the memory; its
        # ready (always 1 for the on-chip buffer, a LUT or two from registers for the AXI
        # writer) comes back through one LUT
        m.submodules.mem_slice = ms = StreamForwardRegister(self.mem.payload.shape())
        wiring.connect(m, ms.o, wiring.flipped(self.mem))

        # ---- input register: the beat and its byte count ----
        m.submodules.in_reg = ir = StreamForwardRegister(data.StructLayout({
            "beat": packet_layout(W, STREAM_META), "nbytes": range(B + 1), "nz": 1}))
        i = self.i
        m.d.comb += [ir.i.valid.eq(i.valid), i.ready.eq(ir.i.ready), ir.i.payload.beat.eq(i.payload),
                     ir.i.payload.nbytes.eq(keep_count(i.payload.keep)),
                     ir.i.payload.nz.eq(i.payload.keep != 0)]
        q, q_valid, q_nbytes, q_nz = ir.o.payload.beat, ir.o.valid, ir.o.payload.nbytes, ir.o.payload.nz
        take = ir.o.ready

        # ---- ring state: the message being stored, and where the next one goes ----
        place = m.submodules.place = RingPlacer(R, M, N)
        m.d.comb += [place.used.eq(used), place.inflight.eq(nfl)]
        p_start, p_skip, room = place.start, place.skip, place.room
        in_msg = Signal()                   # a message has begun (its first beat was taken)
        cur_pos = Signal(range(R + 1))      # word offset of the current message's next word
        cur_start = Signal(range(R))        # word offset of the current message
        cur_held = Signal(range(R + 1))     # words it holds so far (skipped tail included)
        cur_bytes = Signal(range(self.max_message + B + 1))
        lbits = _bits(self.max_message + B) + 1
        cur_left = Signal(signed(lbits))    # bytes it may still take (max_message - cur_bytes)
        cur_long = Signal()
        written = Signal(32)                # words accepted by mem, ever

        first = ~in_msg
        allowed = ~first | room
        m.d.comb += take.eq(q_valid & allowed & ms.i.ready)

        left = Signal(signed(lbits + 1))
        m.d.comb += left.eq(Mux(first, self.max_message, cur_left) - q_nbytes)
        too_long = Signal()
        m.d.comb += too_long.eq((~first & cur_long) | left[-1])
        after = Signal(range(self.max_message + 2 * B + 1))
        m.d.comb += after.eq(Mux(first, 0, cur_bytes) + q_nbytes)
        drop = q.last & (q.error | too_long)
        write = Signal()
        m.d.comb += write.eq(q_nz & ~too_long & ~(q.last & q.error))

        pos = Signal(range(R + 1))
        m.d.comb += pos.eq(Mux(first, p_start, cur_pos))
        msg_start = Mux(first, p_start, cur_start)
        end_pos = Signal(range(R + 1))
        m.d.comb += end_pos.eq(pos + write)
        held = Signal(range(R + 1))
        m.d.comb += held.eq(Mux(first, p_skip, cur_held) + write)

        m.d.comb += [
            ms.i.valid.eq(q_valid & allowed & write),
            ms.i.payload.addr.eq(base + pos),
            ms.i.payload.data.eq(q.data),
            ms.i.payload.be.eq(q.keep),
        ]
        with m.If(ms.i.valid & ms.i.ready):
            m.d.sync += written.eq(written + 1)

        commit = Signal()
        m.d.comb += commit.eq(take & q.last & ~drop)
        with m.If(take):
            m.d.sync += [
                in_msg.eq(~q.last), cur_pos.eq(end_pos), cur_start.eq(msg_start),
                cur_held.eq(held), cur_bytes.eq(after), cur_left.eq(left), cur_long.eq(too_long),
            ]
        with m.If(take & q.last & q.error):
            m.d.sync += self.drop_error.eq(self.drop_error + 1)
        with m.Elif(take & q.last & too_long):
            m.d.sync += self.drop_too_long.eq(self.drop_too_long + 1)

        # a finished message: queued in the next cycle
        add_v = Signal()                    # a commit of the previous cycle
        add_held = Signal(range(R + 1))
        entry = Signal(STREAM_FINISHED)
        m.d.sync += [add_v.eq(commit), add_held.eq(held)]
        with m.If(commit):
            m.d.sync += [
                self.posted.eq(self.posted + 1),
                entry.wr.wr_id.eq(self.posted),
                entry.wr.qp.eq(q.meta.qp),
                entry.wr.opcode.eq(q.meta.opcode),
                entry.wr.local_addr.eq(Cat(Const(0, lg), base + msg_start)),
                entry.wr.length.eq(after),
                entry.wr.remote_offset.eq(q.meta.remote_offset),
                entry.wr.imm.eq(q.meta.imm),
                entry.end.eq(written + write),
            ]
        m.d.comb += [post.i.valid.eq(add_v), post.i.payload.eq(entry),
                     space.add.valid.eq(add_v), space.add.payload.eq(add_held),
                     place.commit.valid.eq(commit), place.commit.payload.pos.eq(pos),
                     place.commit.payload.write.eq(write)]
        return m
