"""Payload reader: turns packet descriptors into payload packets read from a local memory with a
registered read port (or generated, for the traffic generator's test pattern), and executes the
responder's atomics on the words it reads for them."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.memport import MemReadSignature, MemWriteSignature, check_addr_width
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.roce.layouts import ATOMIC_RESULT, ATOMIC_WORK, PACKET_DESC, AtomicOp, WrSource
from rocegen.gateware.roce.memory.atomic_alu import AtomicAlu, lanes_reversed
from rocegen.wire.atomics import ATOMIC_BYTES, BYTE_ORDERS

__all__ = ["PayloadReader", "pattern_beat", "payload_words", "PATTERN_ADDR_BITS", "check_atomics"]

#: Width of the byte addresses the test pattern is generated from: a 32-bit local address plus
#: the offset inside a packet never wraps.
PATTERN_ADDR_BITS = 33


def pattern_beat(addr, width):
    """The beat of the test pattern (see :mod:`rocegen.wire.pattern`) at byte address
    ``addr`` (a Value, a multiple of ``width // 8``): the 32-bit big-endian word at byte address
    4k holds k mod 2^32, byte 0 of the beat in lane 0. Pure wiring: the low bits of each word's
    index are the lane number, the rest come from ``addr``."""
    check_width(width)
    addr = Value.cast(addr)
    lanes = width // 32
    lb = lanes.bit_length() - 1
    high = addr[2 + lb:]
    words = []
    for j in range(lanes):
        k = Cat(Const(j, lb), high)
        k = Cat(k, Const(0, 32))[:32] if len(k) < 32 else k[:32]
        words.append(Cat(k[24:32], k[16:24], k[8:16], k[0:8]))      # big-endian in memory
    return Cat(*words)


def payload_words(length, width):
    """Words (beats) of a packet of ``length`` bytes (a Value) minus one: a 0-byte packet still
    takes one (empty) beat."""
    lb = (width // 8).bit_length() - 1
    length = Value.cast(length)
    return Mux(length == 0, 0, (length - 1) >> lb)


def last_count(length, width):
    """Bytes in the last beat of a packet of ``length`` bytes: ``length`` mod W/8, all W/8 when
    that is 0, and 0 for an empty packet."""
    B = width // 8
    lb = B.bit_length() - 1
    length = Value.cast(length)
    rem = length[:lb]
    return Mux(rem != 0, rem, Mux(length == 0, 0, B))


def check_atomics(atomics):
    """``atomics`` if it is what the payload reader takes for it: None (no atomics) or the byte
    order of the 64-bit value in memory, one of :data:`~rocegen.wire.atomics.BYTE_ORDERS`; else
    ``ValueError`` naming the parameter."""
    if atomics is not None and (not isinstance(atomics, str) or atomics not in BYTE_ORDERS):
        raise ValueError(f"atomics must be None or one of {', '.join(BYTE_ORDERS)} (the byte "
                         f"order of the 64-bit value in memory), not {atomics!r}")
    return atomics


def from_memory(desc):
    """The packet of descriptor ``desc`` has bytes to read from memory."""
    return (desc.src != WrSource.GENERATOR) & (desc.length != 0)


class PayloadReader(wiring.Component):
    """Payload of each packet descriptor, read from a memory with a registered read port.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two): the memory word and the stream beat.
    addr_width : int
        Word-address bits of the memory (1..32).
    atomics : None, ``"little"`` or ``"big"``
        None (default): no atomics, none of their ports. Else the reader executes the
        responder's atomics (COMPARE_SWAP, FETCH_ADD) on the words it reads for them, the
        64-bit value in memory in this byte order (:data:`~rocegen.wire.atomics.BYTE_ORDERS`):
        ``"little"``, what a host CPU of the x86 or Arm kind reads as a counter, or ``"big"``,
        the wire's.

    Ports
    -----
    desc : In(stream.Signature(PACKET_DESC))
        One descriptor per packet. ``local_addr`` is a byte address, a multiple of W/8 (the low
        bits are ignored); ``length`` bytes from there make the payload.
    mem : Out(MemReadSignature(width, addr_width))
        Word reads; the word address is ``local_addr // (W/8) + n`` for the packet's n-th beat,
        modulo 2^addr_width. Each word is read exactly once.
    o : Out(PacketSignature(width, PACKET_DESC))
        One packet per descriptor: ceil(length / (W/8)) beats, every beat full but the last,
        which holds ``length`` mod W/8 bytes (all W/8 if that is 0); a 0-byte descriptor gives
        one beat with ``keep`` 0. ``meta`` is the descriptor; ``error`` is always 0.
    atomic : In(ATOMIC_WORK), with ``atomics`` only
        A sideband of ``desc``: sampled in the cycle a descriptor is taken (``desc.valid &
        desc.ready``) and held with it. ``op`` is NONE for every descriptor but an atomic's
        answer (see below).
    aw : Out(MemWriteSignature(width, addr_width)), with ``atomics`` only
        The atomics' write backs into the memory: the word address of the word read, the new
        value in the target's 8 bytes (``be`` those 8 bytes only; the other lanes of ``data``
        hold copies of it and are not enabled). None for a COMPARE_SWAP that does not match.
        Offered for one cycle, never held: ``aw.ready`` is not looked at and must be high in
        every cycle ``aw.valid`` is (the consumer gives ``aw`` the memory's write port first).
    lock : Out(1), with ``atomics`` only
        High in each cycle in which no other writer may write the memory: the cycle an atomic's
        word is read (the memory is read-first: a write in that cycle would be overwritten by
        the write back) and the next one, the cycle before its write back (which is ``aw``'s).
        Combinational from registers.
    done : Out(stream.Signature(ATOMIC_RESULT, always_ready=True)), with ``atomics`` only
        One record per atomic executed and per REPLAY, in descriptor order: ``qp`` and ``psn``
        of the descriptor, ``orig`` the target's value before the atomic as a number (a
        REPLAY's: its ``swap_add``).

    Behaviour
    ---------
    * Byte order: memory words go out unchanged, byte 0 of a word (lane 0, the low bits) is the
      byte at the word's byte address, so payload byte ``i`` of a packet is local memory byte
      ``local_addr + i``.
    * Descriptors with ``src == WrSource.GENERATOR`` read no memory: beat n of their packet is
      the traffic generator's test pattern at byte address ``local_addr + n*W/8``
      (:func:`pattern_beat`). Neither do 0-byte descriptors.
    * Throughput: one beat per cycle, across descriptors too (no idle beat between packets),
      whenever ``desc`` offers descriptors and ``o`` is ready.
    * Latency: two cycles. A descriptor offered on ``desc`` in cycle t (with the reader idle
      and the output queue empty) is taken at the end of cycle t into the reader's own
      register, its first word is read in cycle t+1 and its first beat offered on ``o`` in
      cycle t+2, beside the queue (its bypass). A beat ``o`` does not take stays offered from
      the queue, and the beats behind it follow one cycle after they come back, until the
      queue is empty again. ``desc`` is taken when the reader holds no descriptor or in the
      cycle the held descriptor's last word is read.
    * Backpressure: a read is issued only when the eight-beat output queue (a cut-through
      :class:`~rocegen.gateware.lib.fifo.PacketFifo` with its bypass, the descriptor kept once
      per packet, the beats in block RAM from W = 256 on) has room for its data, counting the read
      in flight (a beat that passes beside the queue counts as in it for its cycle),
      so ``o.ready`` is never needed to take a word coming back from memory and nothing is
      lost or repeated. The room is a register worked out a cycle ahead (a beat leaving the
      queue makes room a cycle later). ``desc.ready`` and ``mem.en`` depend only on
      registers: the descriptor's word count, last-word flag and addresses are worked out
      when it is taken. ``o`` is the queue's output: ``o.payload`` comes from the word back
      from memory while the queue is empty, else from its memory's read port; ``o.ready``
      drives its read enable. So a packet leaves a beat in every cycle ``o`` takes one, from
      its first beat to its last (the transmit path's steady source).

    Atomics (with ``atomics``)
    --------------------------
    * The descriptor of an atomic's answer (``src`` RESPONDER, opcode ATOMIC_ACKNOWLEDGE, as
      :func:`~rocegen.gateware.roce.responder.resp_read_align.reader_descriptor` makes it) names
      one word: ``local_addr`` the word's byte address, ``length`` the target's byte offset in
      the word plus 8, ``va`` the target's byte address (a multiple of 8), so the target is lane
      ``va[3:log2(W/8)]`` of the word (8 bytes a lane; lane 0 at W = 64). The packet's bytes
      from the target's offset, what
      :class:`~rocegen.gateware.roce.responder.resp_read_align.RespReadAlign` keeps, are the
      original value, big-endian (the AtomicAckETH's order).
    * FETCH_ADD, COMPARE_SWAP: the word is read as any payload word, when the output queue has
      room for it (a 0-byte or GENERATOR descriptor reads nothing and executes nothing; only
      the descriptor's first word is executed on: a well-formed one has no other). Its beat is
      the word as read, with the bytes of every 8-byte lane reversed when ``atomics`` is
      ``"little"`` (so that the target's lane holds the original value big-endian), as read
      when ``"big"``. The word goes to an :class:`~rocegen.gateware.roce.memory.atomic_alu.AtomicAlu`
      the cycle it comes back; the ALU's result, a cycle later, is offered on ``aw`` and
      ``done``.
    * Timing: the word read in cycle t (``mem.en``) -> ``lock`` high in t and t+1; the beat into
      the output queue and the word into the ALU in t+1; the write back on ``aw`` and the
      result on ``done`` in t+2; the beat on ``o`` from t+1 (while the queue is empty: the
      result follows its packet's beat by a cycle). The write back is in memory for reads from
      t+3 on.
    * Atomicity: an atomic's word is not read while an earlier atomic's write back is still to
      come or in that same cycle (a read then would see the value before it), so atomics on
      one word apply each to the previous one's result: one atomic every three cycles (two
      after a COMPARE_SWAP that did not match). No other word is read then either, so that a
      READ right behind an atomic finds its result: an atomic costs the reads after it two
      cycles (one after a COMPARE_SWAP that did not match).
    * REPLAY (a duplicate's answer): no memory read (``mem.en`` stays low); every beat holds
      ``swap_add`` as 8 big-endian bytes in every lane; ``done`` reports it (``orig`` =
      ``swap_add``) two cycles after its beat's issue, as for an executed atomic. ``lock`` and
      ``aw`` stay low.
    * NONE: the behaviour above, unchanged.
    """

    #: Beats the output queue holds (reads in flight included).
    QUEUE_DEPTH = 8

    def __init__(self, width, addr_width, *, atomics=None):
        check_width(width)
        check_addr_width(addr_width)
        check_atomics(atomics)
        self.width = width
        self.addr_width = addr_width
        self.atomics = atomics
        members = {
            "desc": In(stream.Signature(PACKET_DESC)),
            "mem": Out(MemReadSignature(width, addr_width)),
            "o": Out(PacketSignature(width, PACKET_DESC)),
        }
        if atomics is not None:
            members.update({
                "atomic": In(ATOMIC_WORK),
                "aw": Out(MemWriteSignature(width, addr_width)),
                "lock": Out(1),
                "done": Out(stream.Signature(ATOMIC_RESULT, always_ready=True)),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        desc, mem, o = self.desc, self.mem, self.o
        d = desc.payload

        depth = self.QUEUE_DEPTH
        # the output queue: a cut-through packet FIFO, the beats in block RAM from W = 256 on
        # (a few beats of W bits would take W/14 * 8 LUTs of distributed RAM)
        # (with its bypass: while it is empty, a word goes on to ``o`` in the cycle it comes
        # back; the descriptor is kept once per packet, not beside every beat)
        m.submodules.queue = q = PacketFifo(W, depth, PACKET_DESC, store_and_forward=False,
                                            drop_errors=False, overflow="wait", bypass=True,
                                            ram_style="block" if W >= 256 else None)

        # --- hold: the descriptor being read, with what its reads need worked out in advance ----
        # (``desc.ready`` then depends on registers only)
        h_valid = Signal()
        h = Signal(PACKET_DESC)
        h_mem = Signal()                            # the packet's bytes come from memory
        h_words = Signal(range(8192 // B + 1))      # words of the packet minus one
        idx = Signal(range(8192 // B + 1))          # beats of the descriptor already issued
        last = Signal()                             # idx == h_words
        cur = Signal(PATTERN_ADDR_BITS)             # byte address of beat ``idx``
        inflight = Signal()                         # a word was read in the previous cycle
        room = Signal(init=1)                       # the queue has room for one more read
        issue = Signal()
        take = Signal()
        atomics = self.atomics is not None
        if atomics:
            # the held descriptor's atomic: its first word is read, modified and written back
            # (rmw), or its beats are the value it replays; ``report``: its ``done`` is due
            h_atom = Signal(ATOMIC_WORK)
            h_rmw = Signal()
            h_replay = Signal()
            h_report = Signal()
            h_lane = Signal(range(max(2, W // (8 * ATOMIC_BYTES))))
            # an atomic's write back is still to come, or in this cycle: no read now (one
            # would see the value before it)
            busy = Signal()
            m.d.comb += issue.eq(h_valid & room & ~busy)
        else:
            m.d.comb += issue.eq(h_valid & room)
        m.d.comb += [
            take.eq(~h_valid | (issue & last)),
            desc.ready.eq(take),
            mem.addr.eq(cur[lb:]),
            mem.en.eq(issue & h_mem),
        ]
        with m.If(take & desc.valid):
            words = payload_words(d.length, W)
            m.d.sync += [
                h_valid.eq(1), h.eq(d), h_mem.eq(from_memory(d)), h_words.eq(words),
                idx.eq(0), last.eq(words == 0),
                cur.eq(Cat(Const(0, lb), d.local_addr[lb:])),
            ]
            if atomics:
                op = self.atomic.op
                replay = op == AtomicOp.REPLAY
                m.d.sync += [
                    h_atom.eq(self.atomic),
                    h_rmw.eq(((op == AtomicOp.FETCH_ADD) | (op == AtomicOp.COMPARE_SWAP))
                             & from_memory(d)),
                    h_replay.eq(replay), h_report.eq(replay),
                    h_mem.eq(from_memory(d) & ~replay),
                    h_lane.eq(d.va[3:lb]),
                ]
        with m.Elif(issue):
            m.d.sync += [
                h_valid.eq(~last),
                idx.eq(idx + 1), last.eq(idx + 1 == h_words),
                cur.eq(cur + B),
            ]
            if atomics:
                m.d.sync += [h_rmw.eq(0), h_report.eq(0)]
        # room for the read of the next cycle, from this cycle's counts: the words in the queue
        # and in flight plus this cycle's read (a word leaving the queue in this cycle counts a
        # cycle later)
        m.d.sync += room.eq(q.level + inflight + issue < depth)

        # --- the word comes back one cycle later and goes into the queue ----------------------
        s_mem = Signal()
        s_addr = Signal(PATTERN_ADDR_BITS)
        s_count = Signal(range(B + 1))
        s_last = Signal()
        s_meta = Signal(PACKET_DESC)
        m.d.sync += [
            inflight.eq(issue),
            s_mem.eq(h_mem),
            s_addr.eq(cur),
            s_count.eq(Mux(last, last_count(h.length, W), B)),
            s_last.eq(last),
            s_meta.eq(h),
        ]
        beat = Mux(s_mem, mem.data, pattern_beat(s_addr, W))
        if atomics:
            beat = self._atomics(m, h, h_atom, h_rmw, h_replay, h_report, h_lane, issue, busy,
                                 s_mem, s_addr, s_meta)
        m.d.comb += [
            q.i.valid.eq(inflight),
            q.i.payload.data.eq(beat),
            q.i.payload.keep.eq(keep_mask(s_count, B)),
            q.i.payload.last.eq(s_last),
            q.i.payload.error.eq(0),
            q.i.payload.meta.eq(s_meta),
        ]

        # --- output --------------------------------------------------------------------------
        wiring.connect(m, q.o, wiring.flipped(o))
        return m

    def _atomics(self, m, h, h_atom, h_rmw, h_replay, h_report, h_lane, issue, busy,
                 s_mem, s_addr, s_meta):
        """The atomics' stages after the read (t: the read, t+1: the word back, t+2: the write
        back); returns the beat that goes into the output queue in t+1."""
        W = self.width
        mem, aw, done = self.mem, self.aw, self.done
        m.submodules.alu = alu = AtomicAlu(W, byteorder=self.atomics)

        # --- t+1: the word back, into the ALU; the beat ---------------------------------------
        s_atom = Signal(ATOMIC_WORK)
        s_rmw = Signal()                    # the word back is an atomic's
        s_replay = Signal()                 # the beat is a REPLAY's value
        s_report = Signal()                 # with its ``done`` due
        s_lane = Signal.like(h_lane)
        m.d.sync += [
            s_atom.eq(h_atom), s_rmw.eq(issue & h_rmw), s_replay.eq(h_replay),
            s_report.eq(issue & h_report), s_lane.eq(h_lane),
        ]
        a = alu.i.payload
        m.d.comb += [
            alu.i.valid.eq(s_rmw),
            a.word.eq(mem.data), a.lane.eq(s_lane),
            a.fetch_add.eq(s_atom.op == AtomicOp.FETCH_ADD),
            a.swap_add.eq(s_atom.swap_add), a.compare.eq(s_atom.compare),
            alu.o.ready.eq(1),
        ]
        # the original value big-endian at the target's lane: the word's lanes reversed when
        # the memory holds the value little-endian
        word = mem.data
        if self.atomics == "little":
            word = Mux(s_rmw, lanes_reversed(mem.data), mem.data)
        replay = lanes_reversed(s_atom.swap_add).replicate(W // (8 * ATOMIC_BYTES))
        beat = Mux(s_replay, replay, Mux(s_mem, word, pattern_beat(s_addr, W)))

        # --- t+2: the write back and the result -------------------------------------------------
        r_addr = Signal(self.addr_width)
        r_report = Signal()
        r_value = Signal(8 * ATOMIC_BYTES)
        r_qp = Signal.like(s_meta.qp)
        r_psn = Signal.like(s_meta.psn)
        lb = (W // 8).bit_length() - 1
        m.d.sync += [
            r_addr.eq(s_addr[lb:]), r_report.eq(s_report), r_value.eq(s_atom.swap_add),
            r_qp.eq(s_meta.qp), r_psn.eq(s_meta.psn),
        ]
        r = alu.o.payload
        write_back = alu.o.valid & r.write
        m.d.comb += [
            aw.valid.eq(write_back),
            aw.payload.addr.eq(r_addr), aw.payload.data.eq(r.data), aw.payload.be.eq(r.be),
            done.valid.eq(alu.o.valid | r_report),
            done.payload.qp.eq(r_qp), done.payload.psn.eq(r_psn),
            done.payload.orig.eq(Mux(r_report, r_value, r.orig)),
            # no read while the word of an atomic is back (t+1) or written back (t+2)
            busy.eq(s_rmw | write_back),
            self.lock.eq((issue & h_rmw) | s_rmw),
        ]
        return beat
