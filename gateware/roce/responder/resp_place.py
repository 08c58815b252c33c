"""Payload placement of the responder: the payload of each request datagram written into local
memory at any byte alignment."""

from amaranth.hdl import Cat, Module, Mux, Shape, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature, check_addr_width
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.roce.memory.atomic_alu import lanes_reversed
from rocegen.gateware.roce.responder.resp_layouts import LENGTH_BITS, RESP_PLACE

__all__ = ["RespPlace"]

#: Largest ``skip`` of a record (its field is 7 bits).
_SKIP_MAX = (1 << Shape.cast(RESP_PLACE["skip"].shape).width) - 1


def _rotl(value, amount, unit):
    """``value`` rotated up by ``amount`` (a Value) units of ``unit`` bits, as a log-depth
    shifter: one 2:1 mux per bit for each bit of ``amount``."""
    n = len(value)
    for k in range(len(amount)):
        sh = unit << k
        value = Mux(amount[k], Cat(value[n - sh:], value[:n - sh]), value)
    return value


def _pick(sel, a, b, unit):
    """Unit ``k`` (``unit`` bits) of ``a`` where ``sel[k]``, else of ``b``."""
    return Cat(*(Mux(sel[k], a[unit * k:unit * (k + 1)], b[unit * k:unit * (k + 1)])
                 for k in range(len(sel))))


def _minus(x, n):
    """``x - n``, saturating at 0."""
    return Mux(x > n, x - n, 0)


class RespPlace(wiring.Component):
    """Payload placement: the payload bytes of each request datagram written into a memory of
    words, with byte enables, at any byte alignment.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two): the beat and the memory word.
    addr_width : int
        Word-address bits of the memory (1..32).
    swap8 : bool
        With port ``swap``: a packet whose record came with ``swap`` high has every word it
        writes reversed per 8-byte lane (its 64-bit values turned between the wire's byte
        order and little-endian; the READ requester places an ATOMIC_ACKNOWLEDGE's value so).
        Default False.
    tag : bool
        With ports ``tag`` and ``o_tag``: a bit of each packet's record that comes out with
        each of its word writes (the READ requester marks an ATOMIC_ACKNOWLEDGE's value so, for
        the pattern sink to leave it out). Default False.

    Ports
    -----
    i : In(PacketSignature(width))
        The request datagrams, byte 0 in lane 0 of the first beat. ``error`` is ignored
        (upstream has dropped damaged packets).
    swap : In(1), with ``swap8`` only
        Read with ``act`` (in the cycle a record is taken): reverse the packet's words.
    tag : In(1), with ``tag`` only
        Read with ``act``: the packet's tag.
    act : In(stream.Signature(RESP_PLACE))
        One record per packet of ``i``, in packet order: what to do with the packet's bytes
        ``skip .. skip + length - 1`` (``write``, destination byte address ``addr``).
    o : Out(MemWriteSignature(width, addr_width))
        Word writes: ``addr`` a word address, ``be`` bit k for lane k, the byte at byte address
        ``addr * W/8 + k``.
    o_tag : Out(1), with ``tag`` only
        The tag of the packet the word on ``o`` belongs to (a register, as ``o``).
    done : Out(1)
        One-cycle pulse per packet, in packet order, registered: in the cycle after the
        packet's last word write was accepted on ``o``; when its last beat adds no write (a pad
        beat, ``write`` 0, nothing left of the payload), two cycles after that beat was taken
        (its earlier writes were all accepted by then). Never two packets' pulses in one
        cycle.

    Behaviour
    ---------
    * Placement: with ``write`` 1, packet byte ``skip + k`` (k < ``length``) goes to byte
      address ``addr + k``: word ``(addr + k) // (W/8)`` modulo 2^addr_width (the byte address
      not wrapped at 2^32), lane
      ``(addr + k) mod W/8`` (byte order as on the packet stream, byte 0 of a word in the low
      lane). Every word touched is written once, in increasing address order, ``be`` set exactly
      on the payload bytes it holds (the first and last words may be partial); bytes before
      ``skip`` and after ``skip + length`` (the pad) are never written, nor is anything for
      ``length`` 0 or ``write`` 0 (the packet is consumed). A packet shorter than
      ``skip + length`` has the bytes it holds written and ends at its ``last``.
    * How: each beat is rotated up by ``s = (addr - skip) mod W/8`` lanes; the rotated lanes
      ``s ..`` complete the current word, the lanes ``0 .. s-1`` are kept in a carry register
      for the next word. Per-packet byte counters give each beat's enables (lanes in the
      payload and in ``keep``). A beat whose word would get no byte enabled writes nothing.
    * Latency: one cycle. A beat taken in cycle t has its word offered on ``o`` in cycle t+1;
      the carried bytes of a packet's last beat, when there are any, make one more word,
      offered in cycle t+2 (the input is held in cycle t+1 while it is formed).
    * Throughput: one beat in and one word out per cycle, across packets too: the next
      packet's record is taken in the cycle its predecessor's last beat is (``act.ready``
      depends on it), so its first beat can follow in the next cycle. A packet whose carried
      bytes spill into one more word costs that one cycle. The packet's first beat waits for
      its record (``act`` may come before, with or after the beats start arriving; the record
      is held from the cycle after it is taken). Only the current packet's record is held:
      the next is taken no earlier than the cycle of the current packet's last beat, so a
      source must not make a record wait for its packet's beats to be taken.
    * Backpressure: ``o`` is a register (``o.valid`` and ``o.payload`` come from flip-flops).
      ``i.ready`` is high when a record is held, no carried word is due, and ``o`` is empty
      or ``o.ready`` is high (two gates from ``o.ready``); ``act.ready`` is high when no
      record is held or the packet's last beat is taken in the cycle.
    """

    def __init__(self, width, addr_width, *, swap8=False, tag=False):
        check_width(width)
        check_addr_width(addr_width)
        for name, value in (("swap8", swap8), ("tag", tag)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        self.width = width
        self.addr_width = addr_width
        self.swap8, self.tagged = swap8, tag
        super().__init__({
            "i": In(PacketSignature(width)),
            "act": In(stream.Signature(RESP_PLACE)),
            **({"swap": In(1)} if swap8 else {}),
            **({"tag": In(1), "o_tag": Out(1)} if tag else {}),
            "o": Out(MemWriteSignature(width, addr_width)),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        B, AW = self.width // 8, self.addr_width
        lb = B.bit_length() - 1
        i, act, o, rec = self.i, self.act, self.o, self.act.payload
        # the word written (with ``swap8``, a register the output reverses per 8-byte lane
        # when its packet's record asked for it)
        data = Signal(self.width) if self.swap8 else o.payload.data

        # the record of the packet at the input, worked out when taken
        held = Signal()                     # a record is held
        s = Signal(lb)                      # lanes the beats are rotated up by
        low = Signal(B)                     # lanes 0 .. s-1: from the previous beat
        cur = Signal(B)                     # input lanes 0 .. B-s-1: for the current word
        waddr = Signal(AW)                  # word the current beat's lanes complete
        before = Signal(range(_SKIP_MAX + 1))           # bytes to come before the payload
        until = Signal(range(_SKIP_MAX + (1 << LENGTH_BITS)))  # ... up to its end (0: none)
        # the rotated lanes 0 .. s-1 of the last beat (enables already masked by `low`)
        carry = Signal(self.width)
        carry_be = Signal(B)
        flush = Signal()                    # the carried bytes of a packet's last beat are due
        flush_addr = Signal(AW)
        # the output register holds a word write (o.valid) or a packet end with no write
        # (`bubble`); `end`: the packet ends with it
        bubble, end = Signal(), Signal()

        leave = (o.valid & o.ready) | bubble
        room = ~o.valid | o.ready
        take = Signal()
        m.d.comb += [
            i.ready.eq(held & ~flush & room),
            take.eq(i.valid & i.ready),
            act.ready.eq(~held | (take & i.payload.last)),
        ]
        m.d.sync += self.done.eq(leave & end)

        # the beat: byte enables, rotated lanes, and whether it completes or spills a word
        en = Signal(B)
        m.d.comb += en.eq(i.payload.keep & ~keep_mask(before, B) & keep_mask(until, B))
        rot_data = Signal(self.width)
        rot_en = Signal(B)
        m.d.comb += [rot_data.eq(_rotl(i.payload.data, s, 8)), rot_en.eq(_rotl(en, s, 1))]
        writes = carry_be.any() | (en & cur).any()
        spill = (en & ~cur).any()
        last = i.payload.last

        with m.If(take):
            m.d.sync += [
                o.valid.eq(writes),
                bubble.eq(~writes & last & ~spill),
                end.eq(last & ~spill),
                o.payload.addr.eq(waddr),
                data.eq(_pick(low, carry, rot_data, 8)),
                o.payload.be.eq(carry_be | (rot_en & ~low)),
                carry.eq(rot_data),
                carry_be.eq(rot_en & low),
                flush.eq(last & spill),
                flush_addr.eq(waddr + 1),
                waddr.eq(waddr + 1),
                before.eq(_minus(before, B)),
                until.eq(_minus(until, B)),
                held.eq(~last),
            ]
        with m.Elif(flush & room):
            m.d.sync += [
                o.valid.eq(1), bubble.eq(0), end.eq(1),
                o.payload.addr.eq(flush_addr),
                data.eq(carry),
                o.payload.be.eq(carry_be),
                carry_be.eq(0),
                flush.eq(0),
            ]
        with m.Elif(leave):
            m.d.sync += [o.valid.eq(0), bubble.eq(0)]

        # a new record: the byte offset from packet to memory, split into word and lane
        addr = Signal(max(32, lb + AW))
        shift = Signal(lb + AW)
        m.d.comb += [addr.eq(rec.addr), shift.eq(addr - rec.skip)]
        with m.If(act.valid & act.ready):
            m.d.sync += [
                held.eq(1),
                s.eq(shift[:lb]),
                low.eq(keep_mask(shift[:lb], B)),
                cur.eq(keep_mask(B - shift[:lb], B)),
                waddr.eq(shift[lb:]),
                before.eq(rec.skip),
                until.eq(Mux(rec.write, rec.skip + rec.length, 0)),
            ]
        if self.swap8 or self.tagged:
            # the packet's bits (swap, tag) from its record, with the words it writes
            bits, o_bits, flush_bits = Signal(2), Signal(2), Signal(2)
            with m.If(act.valid & act.ready):
                m.d.sync += bits.eq(Cat(self.swap if self.swap8 else 0,
                                        self.tag if self.tagged else 0))
            with m.If(take):
                m.d.sync += [o_bits.eq(bits), flush_bits.eq(bits)]
            with m.Elif(flush & room):
                m.d.sync += o_bits.eq(flush_bits)
            if self.swap8:
                m.d.comb += o.payload.data.eq(Mux(o_bits[0], lanes_reversed(data), data))
            if self.tagged:
                m.d.comb += self.o_tag.eq(o_bits[1])
        return m
