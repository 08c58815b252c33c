"""Payload reader: turns packet descriptors into payload packets read from a local memory with a
registered read port (or generated, for the traffic generator's test pattern)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.memport import MemReadSignature, check_addr_width
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.roce.layouts import PACKET_DESC, WrSource

__all__ = ["PayloadReader", "pattern_beat", "payload_words", "PATTERN_ADDR_BITS"]

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
    * Latency: four cycles. A descriptor offered on ``desc`` in cycle t (with the reader idle
      and the output queue not full) is taken at the end of cycle t into the reader's own
      register, its first word is read in cycle t+1 and its first beat offered on ``o`` in
      cycle t+4. ``desc`` is taken when the reader holds no descriptor or in the cycle the held
      descriptor's last word is read.
    * Backpressure: a read is issued only when the eight-beat output queue (a cut-through
      :class:`~rocegen.gateware.lib.fifo.PacketFifo`, the descriptor kept once per packet, the
      beats in block RAM from W = 256 on) has room for its data, counting the read in flight,
      so ``o.ready`` is never needed to take a word coming back from memory and nothing is
      lost or repeated. The room is a register worked out a cycle ahead (a beat leaving the
      queue makes room a cycle later). ``desc.ready`` and ``mem.en`` depend only on
      registers: the descriptor's word count, last-word flag and addresses are worked out
      when it is taken. ``o`` is the queue's output: ``o.payload`` comes from its memory's
      read port, ``o.ready`` drives its read enable.
    """

    #: Beats the output queue holds (reads in flight included).
    QUEUE_DEPTH = 8

    def __init__(self, width, addr_width):
        check_width(width)
        check_addr_width(addr_width)
        self.width = width
        self.addr_width = addr_width
        super().__init__({
            "desc": In(stream.Signature(PACKET_DESC)),
            "mem": Out(MemReadSignature(width, addr_width)),
            "o": Out(PacketSignature(width, PACKET_DESC)),
        })

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        desc, mem, o = self.desc, self.mem, self.o
        d = desc.payload

        depth = self.QUEUE_DEPTH
        # the output queue: a cut-through packet FIFO, which keeps the descriptor once per packet
        # (not beside every beat) and the beats in block RAM from W = 256 on (a few beats of W
        # bits would take W/14 * 8 LUTs of distributed RAM)
        m.submodules.queue = q = PacketFifo(W, depth, PACKET_DESC, store_and_forward=False,
                                            drop_errors=False, overflow="wait",
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
        m.d.comb += [
            issue.eq(h_valid & room),
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
        with m.Elif(issue):
            m.d.sync += [
                h_valid.eq(~last),
                idx.eq(idx + 1), last.eq(idx + 1 == h_words),
                cur.eq(cur + B),
            ]
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
        m.d.comb += [
            q.i.valid.eq(inflight),
            q.i.payload.data.eq(Mux(s_mem, mem.data, pattern_beat(s_addr, W))),
            q.i.payload.keep.eq(keep_mask(s_count, B)),
            q.i.payload.last.eq(s_last),
            q.i.payload.error.eq(0),
            q.i.payload.meta.eq(s_meta),
        ]

        # --- output --------------------------------------------------------------------------
        wiring.connect(m, q.o, wiring.flipped(o))
        return m
