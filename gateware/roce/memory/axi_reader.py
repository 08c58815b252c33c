"""Payload reader with an AXI4 read master: packet descriptors in, payload packets out, the payload
read from memory behind AXI4 (DDR, HBM, a host bridge) or generated (test pattern)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import Out

from rocegen.gateware.lib.axi import BURST_INCR, Axi4Signature
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.roce.layouts import PACKET_DESC
from rocegen.gateware.roce.memory.payload_reader import (
    PATTERN_ADDR_BITS,
    from_memory,
    last_count,
    pattern_beat,
    payload_words,
)

__all__ = ["AxiPayloadReader"]

#: AxCACHE of the read bursts: normal, non-cacheable, bufferable memory.
ARCACHE = 0b0011


def _power_of_two(name, value, low, high=None):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < low or (high is not None and value > high) or value & (value - 1):
        bounds = f"{low}..{high}" if high is not None else f"at least {low}"
        raise ValueError(f"{name} must be a power of two, {bounds}, not {value}")


class AxiPayloadReader(wiring.Component):
    """Payload of each packet descriptor, read over AXI4 (or generated).

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two): the AXI4 data bus and the stream beat.
    addr_width : int
        AXI4 address bits (12..64). ``local_addr`` (32 bits) is zero-extended or truncated to it.
    id_width : int
        AXI4 ID bits (1..16). Every burst uses ID 0, so data comes back in request order.
    max_burst : int
        Most beats of one burst, a power of two 1..256. Bursts are also cut at 4 KiB boundaries,
        so at most 4096*8/W beats long.
    outstanding_beats : int
        Words of the read-data queue, a power of two >= ``max_burst``: the most beats requested
        on AR and not yet sent on ``o``.
    desc_depth : int
        Descriptors queued between ``desc`` and ``o`` (a power of two >= 2): packets between the
        one being requested on AR and the one leaving on ``o``.

    Ports
    -----
    desc : In(stream.Signature(PACKET_DESC))
        One descriptor per packet; ``local_addr`` is a byte address, a multiple of W/8 (the low
        bits are ignored); ``length`` bytes from there make the payload.
    o : Out(PacketSignature(width, PACKET_DESC))
        One packet per descriptor: ceil(length / (W/8)) beats, every beat full but the last,
        which holds ``length`` mod W/8 bytes (all W/8 if that is 0); a 0-byte descriptor gives
        one beat with ``keep`` 0. ``meta`` is the descriptor. ``error`` is set on the last beat
        of a packet if any of its beats came with RRESP other than OKAY.
    ar : Out(stream.Signature(AR layout of :class:`~rocegen.gateware.lib.axi.Axi4Signature`))
    r : In(stream.Signature(R layout of :class:`~rocegen.gateware.lib.axi.Axi4Signature`))
        The read channels of the AXI4 master (the write channels are someone else's, or tied
        off). ``rready`` is always 1.
    read_error : Out(1)
        Registered one-cycle pulse per packet that left with ``error`` set, in the cycle after
        its last beat.

    Behaviour
    ---------
    * Bursts: INCR, size log2(W/8), ``min(max_burst, beats to the next 4 KiB boundary, beats
      left)`` beats each, consecutive bursts of a descriptor back to back on AR; one descriptor
      per cycle at most enters the burst generator. Descriptors with ``src ==
      WrSource.GENERATOR`` read no memory: beat n of their packet is the test pattern at byte
      address ``local_addr + n*W/8`` (:func:`~rocegen.gateware.roce.memory.payload_reader.pattern_beat`).
      Neither do 0-byte descriptors. Packets leave in descriptor order whatever their source.
    * Credits: a burst is requested only when the data queue has room for all its beats
      (counting every beat requested and not yet sent on ``o``), so ``rready`` stays high, R
      never waits for ``o`` and a stalled ``o`` cannot deadlock the bus. Once ``arvalid`` is
      high it stays high with the same payload until ``arready``.
    * Throughput: one beat per cycle on ``o`` while the memory keeps up: with a read latency of
      L cycles (AR handshake to first R beat, R then streaming) a full-rate stream needs
      ``outstanding_beats >= L + burst + 3``, ``burst`` being the longest burst
      (``min(max_burst, 4096*8/W)``): a burst is requested only once its whole length fits.
      (Defaults: full rate up to L = 189.) Packets of one beat still go at one per cycle (one
      burst per cycle) while ``desc_depth`` covers the latency; generated packets go at one
      beat per cycle regardless.
    * Latency: a memory descriptor accepted on ``desc`` in cycle t has its first burst on AR
      from cycle t+1; a beat arriving on R in cycle u is offered on ``o`` from cycle u+2. A
      generated packet's first beat is offered two cycles after its descriptor is accepted
      (when it reaches the head of the descriptor queue).
    * Backpressure: ``desc.ready`` is high when the descriptor queue has room and, for a
      memory descriptor, the burst generator is free (idle, or sending the current descriptor's
      last burst in this cycle). ``o.valid`` and ``o.payload`` come from the two queues'
      output registers through a multiplexer (data: memory word or pattern; ``keep``; ``error``);
      ``o.ready`` drives the queues' read enables. Put a
      :class:`~rocegen.gateware.lib.buffer.RegisterSlice` behind ``o`` to register everything.
    * Byte order: memory words go out unchanged (byte 0 of an AXI word in lane 0), so payload
      byte ``i`` is the byte at address ``local_addr + i``.
    """

    def __init__(self, width, addr_width=32, id_width=1, max_burst=64, outstanding_beats=256, *,
                 desc_depth=32):
        check_width(width)
        for name, value in (("addr_width", addr_width), ("id_width", id_width)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer number of bits, not {value!r}")
        if not 12 <= addr_width <= 64:
            raise ValueError(f"addr_width must be 12..64 bits, not {addr_width}")
        if not 1 <= id_width <= 16:
            raise ValueError(f"id_width must be 1..16 bits, not {id_width}")
        _power_of_two("max_burst", max_burst, 1, 256)
        _power_of_two("outstanding_beats", outstanding_beats, 1)
        if outstanding_beats < max_burst:
            raise ValueError(f"outstanding_beats ({outstanding_beats}) must be at least max_burst "
                             f"({max_burst}): a whole burst must fit in the data queue")
        _power_of_two("desc_depth", desc_depth, 2)
        self.width = width
        self.addr_width = addr_width
        self.id_width = id_width
        self.max_burst = max_burst
        self.outstanding_beats = outstanding_beats
        self.desc_depth = desc_depth
        #: Longest burst actually issued.
        self.burst_beats = min(max_burst, 4096 // (width // 8))
        axi = Axi4Signature(addr_width, width, id_width)
        super().__init__({
            "desc": wiring.In(stream.Signature(PACKET_DESC)),
            "o": Out(PacketSignature(width, PACKET_DESC)),
            "ar": axi.members["ar"],
            "r": axi.members["r"],
            "read_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        C = self.outstanding_beats
        desc, o, ar, r = self.desc, self.o, self.ar, self.r
        d = desc.payload

        m.submodules.descq = dq = SyncFIFOBuffered(width=PACKET_DESC.size, depth=self.desc_depth)
        word = data.StructLayout({"data": W, "err": 1})
        # one entry more than credits: the inner memory then holds ``C`` words (a power of two)
        m.submodules.dataq = wq = SyncFIFOBuffered(width=word.size, depth=C + 1)

        # --- burst generator -----------------------------------------------------------------------
        max_words = 8192 // B                       # ``length`` is 13 bits wide
        busy = Signal()
        baddr = Signal(self.addr_width)             # byte address of the next burst
        bleft = Signal(range(max_words + 1))        # words of the descriptor not yet requested
        credit = Signal(range(C + 1), init=C)       # free words in the data queue
        to4k = Signal(range(4096 // B + 1))
        cap = Signal(range(self.burst_beats + 1))
        blen = Signal(range(max(self.burst_beats, 1) + 1))
        final = Signal()
        m.d.comb += [
            to4k.eq((4096 // B) - baddr[lb:12]),
            cap.eq(Mux(to4k < self.burst_beats, to4k, self.burst_beats)),
            final.eq(bleft <= cap),
            blen.eq(Mux(final, bleft, cap)),
            ar.valid.eq(busy & (credit >= blen)),
            ar.payload.id.eq(0),
            ar.payload.addr.eq(baddr),
            ar.payload.len.eq(blen - 1),
            ar.payload.size.eq(lb),
            ar.payload.burst.eq(BURST_INCR),
            ar.payload.lock.eq(0),
            ar.payload.cache.eq(ARCACHE),
            ar.payload.prot.eq(0),
        ]
        ar_fire = Signal()
        m.d.comb += ar_fire.eq(ar.valid & ar.ready)
        with m.If(ar_fire):
            m.d.sync += [
                baddr.eq(baddr + (blen << lb)),
                bleft.eq(bleft - blen),
                busy.eq(~final),
            ]

        # --- descriptor intake ---------------------------------------------------------------------
        needs_mem = from_memory(d)
        gen_free = ~busy | (ar_fire & final)
        accept = Signal()
        m.d.comb += [
            desc.ready.eq(dq.w_rdy & (~needs_mem | gen_free)),
            accept.eq(desc.valid & desc.ready),
            dq.w_en.eq(accept),
            dq.w_data.eq(d.as_value()),
        ]
        with m.If(accept & needs_mem):
            m.d.sync += [
                busy.eq(1),
                baddr.eq(Cat(Const(0, lb), d.local_addr[lb:])),
                bleft.eq(payload_words(d.length, W) + 1),
            ]

        # --- read data -----------------------------------------------------------------------------
        m.d.comb += [
            r.ready.eq(1),
            wq.w_en.eq(r.valid),
            wq.w_data.eq(Cat(r.payload.data, r.payload.resp != 0)),
        ]

        # --- output --------------------------------------------------------------------------------
        head = PACKET_DESC(dq.r_data)
        rw = word(wq.r_data)
        h_mem = from_memory(head)
        idx = Signal(range(max_words + 1))           # beats of the head packet already sent
        cur = Signal(PATTERN_ADDR_BITS)              # byte address of beat ``idx`` once idx > 0
        err = Signal()                               # an errored word in the head packet so far
        addr = Signal(PATTERN_ADDR_BITS)
        last = Signal()
        fire = Signal()
        pop = Signal()
        m.d.comb += [
            addr.eq(Mux(idx == 0, Cat(Const(0, lb), head.local_addr[lb:]), cur)),
            last.eq(idx == payload_words(head.length, W)),
            o.valid.eq(dq.r_rdy & (~h_mem | wq.r_rdy)),
            o.payload.data.eq(Mux(h_mem, rw.data, pattern_beat(addr, W))),
            o.payload.keep.eq(keep_mask(Mux(last, last_count(head.length, W), B), B)),
            o.payload.last.eq(last),
            o.payload.error.eq(last & h_mem & (err | rw.err)),
            o.payload.meta.eq(head),
            fire.eq(o.valid & o.ready),
            pop.eq(fire & h_mem),
            wq.r_en.eq(pop),
            dq.r_en.eq(fire & last),
        ]
        with m.If(fire):
            m.d.sync += [
                idx.eq(Mux(last, 0, idx + 1)),
                cur.eq(addr + B),
                err.eq(~last & (err | (h_mem & rw.err))),
            ]
        m.d.sync += self.read_error.eq(fire & o.payload.error)

        m.d.sync += credit.eq(credit - Mux(ar_fire, blen, 0) + pop)
        return m
