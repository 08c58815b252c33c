"""Payload reader with an AXI4 read master: packet descriptors in, payload packets out, the payload
read from memory behind AXI4 (DDR, HBM, a host bridge) or generated (test pattern)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import BURST_INCR, Axi4Signature
from rocegen.gateware.lib.memport import MemWriteSignature
from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.roce.layouts import ATOMIC_RESULT, ATOMIC_WORK, PACKET_DESC, AtomicOp
from rocegen.gateware.roce.memory.atomic_alu import AtomicAlu, lanes_reversed
from rocegen.gateware.roce.memory.payload_reader import (
    PATTERN_ADDR_BITS,
    check_atomics,
    from_memory,
    last_count,
    pattern_beat,
    payload_words,
)
from rocegen.wire.atomics import ATOMIC_BYTES

__all__ = ["AxiPayloadReader"]

#: AxCACHE of the read bursts: normal, non-cacheable, bufferable memory.
ARCACHE = 0b0011

# The steps of an atomic in the burst generator (``a_state``): none; waiting for the data queue's
# room and for every earlier read beat (unlocked); locked, waiting for ``quiet``, then its AR;
# its word to come on R; its result out (``done``, the write back offered); the write back
# offered again; its write response to come (``quiet`` again).
_A_NONE, _A_PREP, _A_LOCK, _A_READ, _A_EXEC, _A_WRITE, _A_WAIT = range(7)


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
    atomics : None, ``"little"`` or ``"big"``
        None (default): no atomics, none of their ports. Else the reader executes the
        responder's atomics (COMPARE_SWAP, FETCH_ADD) on the words it reads for them, the
        64-bit value in memory in this byte order, as
        :class:`~rocegen.gateware.roce.memory.payload_reader.PayloadReader` does on chip (see
        "Atomics" below).

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
    atomic : In(ATOMIC_WORK), with ``atomics`` only
        A sideband of ``desc``: sampled in the cycle a descriptor is taken and kept with it
        (in the descriptor queue beside it). ``op`` is NONE for every descriptor but an
        atomic's answer.
    aw : Out(MemWriteSignature(width, mem_addr_width)), with ``atomics`` only
        The atomics' write backs, to the AXI4 writer of the same memory (built with a tag of
        their own: :class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter` ``rmw_tag``):
        the word address of the word read (``mem_addr_width`` = min(32, ``addr_width`` -
        log2(W/8)) bits), the new value in the target's 8 bytes (``be`` those 8 bytes only; the
        other lanes hold copies of it, not enabled). None for a COMPARE_SWAP that does not match,
        nor for a word read with an error response. Held (valid and payload) until ``aw.ready``.
    lock : Out(1), with ``atomics`` only
        High while no other writer may have a word taken by the writer: from the first cycle
        an atomic's AR may be issued (step 2 below) to the cycle its write back's response is
        seen on ``quiet`` (with no write back: the cycle after its word came back).
        Combinational from registers.
    quiet : In(1), with ``atomics`` only
        The writer has no write outstanding: every word it took before this cycle has had its
        write response (:class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter` ``quiet``).
    done : Out(stream.Signature(ATOMIC_RESULT, always_ready=True)), with ``atomics`` only
        One record per atomic executed and per REPLAY, in descriptor order: ``qp`` and ``psn``
        of the descriptor, ``orig`` the target's value before the atomic as a number (a
        REPLAY's: its ``swap_add``).

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

    Atomics (with ``atomics``)
    --------------------------
    AXI4 orders neither the read channels against the write channels nor a write against a
    later read, so an atomic has the memory to itself between its read and its write back's
    response. Its descriptor (``src`` RESPONDER, opcode ATOMIC_ACKNOWLEDGE: ``local_addr`` the
    word, ``length`` the target's byte offset in it plus 8, ``va`` the target, a multiple of 8;
    only the first word of a longer one is executed on) reaches the burst generator as any
    memory descriptor; there, for a FETCH_ADD or COMPARE_SWAP:

    1. It waits, unlocked, for room for one word in the data queue and for every beat
       requested before it to be back on R.
    2. ``lock`` rises (a register): no other writer's word is taken from this cycle on. When
       ``quiet`` is high (in this cycle at the earliest) every write taken before has been
       answered and none can come any more: its one-beat AR is issued.
    3. Its word is the next R beat: into the data queue (each 8-byte lane's bytes reversed when
       ``atomics`` is ``"little"``, so that the target's lane holds the original value
       big-endian, as the AtomicAckETH carries it; as read when ``"big"``) and into an
       :class:`~rocegen.gateware.roce.memory.atomic_alu.AtomicAlu`.
    4. The cycle after, ``done`` reports it and the write back is offered on ``aw`` (held until
       taken); it waits until ``quiet`` says the write back was answered. A COMPARE_SWAP that
       does not match, or a word that came with an error response (the packet carries
       ``error``), writes nothing and ends here.
    5. ``lock`` drops; the next descriptor may enter the generator in that cycle, so no AR
       after the atomic's is issued before its write back is answered: a READ behind it sees
       its result, one before it does not.

    Atomics are serialised, each about two AXI round trips: with ``L_r`` cycles from an AR
    handshake to its R beat and ``L_w`` from the write back taken on ``aw`` to ``quiet`` seen
    high again (through the writer: its three cycles to AW and W, the memory's write
    response, one more cycle), back-to-back atomics issue their ARs ``L_r + L_w + 4`` cycles
    apart (``L_r + 3`` after a COMPARE_SWAP that did not match), and ``lock`` holds the other
    writers for ``L_r + L_w + 3`` of those cycles (``L_r + 2``), plus any wait for earlier
    writes' responses in step 2. Descriptors without atomics are not slowed but wait behind an
    atomic in the burst generator.

    REPLAY (a duplicate's answer): no AR; every beat holds ``swap_add`` as 8 big-endian bytes
    in every lane; it waits for the burst generator to be free (as a memory descriptor does)
    and ``done`` reports it (``orig`` = ``swap_add``) in the cycle after it is taken, so the
    results stay in descriptor order. ``lock`` and ``aw`` stay low. A 0-byte or GENERATOR
    descriptor with a FETCH_ADD or COMPARE_SWAP executes nothing. Descriptors with ``op`` NONE:
    the behaviour above, unchanged.
    """

    def __init__(self, width, addr_width=32, id_width=1, max_burst=64, outstanding_beats=256, *,
                 desc_depth=32, atomics=None):
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
        check_atomics(atomics)
        self.width = width
        self.addr_width = addr_width
        self.id_width = id_width
        self.max_burst = max_burst
        self.outstanding_beats = outstanding_beats
        self.desc_depth = desc_depth
        self.atomics = atomics
        #: Longest burst actually issued.
        self.burst_beats = min(max_burst, 4096 // (width // 8))
        #: Bits of a word address (``aw``'s, as an :class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter`
        #: of the same ``addr_width`` takes them).
        self.mem_addr_width = min(32, addr_width - ((width // 8).bit_length() - 1))
        axi = Axi4Signature(addr_width, width, id_width)
        members = {
            "desc": wiring.In(stream.Signature(PACKET_DESC)),
            "o": Out(PacketSignature(width, PACKET_DESC)),
            "ar": axi.members["ar"],
            "r": axi.members["r"],
            "read_error": Out(1),
        }
        if atomics is not None:
            members.update({
                "atomic": In(ATOMIC_WORK),
                "aw": Out(MemWriteSignature(width, self.mem_addr_width)),
                "lock": Out(1),
                "quiet": In(1),
                "done": Out(stream.Signature(ATOMIC_RESULT, always_ready=True)),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        C = self.outstanding_beats
        desc, ar, r = self.desc, self.ar, self.r
        d = desc.payload
        atomics = self.atomics is not None

        # (with atomics, each descriptor with whether it is a REPLAY's and the value replayed)
        extra = 1 + 8 * ATOMIC_BYTES if atomics else 0
        m.submodules.descq = dq = SyncFIFOBuffered(width=PACKET_DESC.size + extra,
                                                   depth=self.desc_depth)
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
        page_cap = Mux(to4k < self.burst_beats, to4k, self.burst_beats)
        ar_ok = busy & (credit >= blen)
        if atomics:
            # the atomic in the generator, if any (see ``_A_*``)
            a_state = Signal(range(_A_WAIT + 1))
            a_lock = Signal()
            m.d.comb += a_lock.eq(a_state == _A_LOCK)
            # the atomic's AR: one beat, once every write taken is answered; no other AR while
            # an atomic is in the generator
            page_cap = Mux(a_lock, 1, page_cap)
            ar_ok = Mux(a_lock, self.quiet, ar_ok & (a_state == _A_NONE))
        m.d.comb += [
            to4k.eq((4096 // B) - baddr[lb:12]),
            cap.eq(page_cap),
            final.eq(bleft <= cap),
            blen.eq(Mux(final, bleft, cap)),
            ar.valid.eq(ar_ok),
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
        dq_data = d.as_value()
        if atomics:
            op = self.atomic.op
            replay = op == AtomicOp.REPLAY
            rmw = (op == AtomicOp.FETCH_ADD) | (op == AtomicOp.COMPARE_SWAP)
            finish = Signal()                       # the atomic in the generator is done
            # a REPLAY reads nothing, but waits for the generator (its ``done`` in order)
            needs_mem = needs_mem & ~replay
            needs_gen = needs_mem | replay
            gen_free = (gen_free & (a_state == _A_NONE)) | (finish & ~busy)
            dq_data = Cat(dq_data, replay, self.atomic.swap_add)
        else:
            needs_gen = needs_mem
        accept = Signal()
        m.d.comb += [
            desc.ready.eq(dq.w_rdy & (~needs_gen | gen_free)),
            accept.eq(desc.valid & desc.ready),
            dq.w_en.eq(accept),
            dq.w_data.eq(dq_data),
        ]
        if atomics:
            rd_out = Signal(range(C + 1))           # beats requested on AR, not yet back on R
            m.d.sync += rd_out.eq(rd_out + Mux(ar_fire, blen, 0) - r.valid)
            self._atomics(m, a_state, finish, ar_fire, baddr, credit, rd_out,
                          accept & ((needs_mem & rmw) | replay), accept & replay)
        with m.If(accept & needs_mem):
            m.d.sync += [
                busy.eq(1),
                baddr.eq(Cat(Const(0, lb), d.local_addr[lb:])),
                bleft.eq(payload_words(d.length, W) + 1),
            ]
            if atomics:
                with m.If(rmw):
                    m.d.sync += a_state.eq(_A_PREP)

        # --- read data -----------------------------------------------------------------------------
        r_data = r.payload.data
        if self.atomics == "little":
            # (an atomic's word with each 8-byte lane reversed: the target's lane holds the
            # original value big-endian, as the AtomicAckETH carries it)
            r_data = Mux(a_state == _A_READ, lanes_reversed(r_data), r_data)
        m.d.comb += [
            r.ready.eq(1),
            wq.w_en.eq(r.valid),
            wq.w_data.eq(Cat(r_data, r.payload.resp != 0)),
        ]

        pop = self._output(m, dq, wq, word)
        m.d.sync += credit.eq(credit - Mux(ar_fire, blen, 0) + pop)
        return m

    def _output(self, m, dq, wq, word):
        """The head descriptor's packet on ``o`` from the two queues; returns ``pop``, a data
        word taken from the data queue in this cycle."""
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        o = self.o
        atomics = self.atomics is not None
        max_words = 8192 // B
        # --- output --------------------------------------------------------------------------------
        head = PACKET_DESC(dq.r_data[:PACKET_DESC.size] if atomics else dq.r_data)
        rw = word(wq.r_data)
        h_mem = from_memory(head)
        idx = Signal(range(max_words + 1))           # beats of the head packet already sent
        cur = Signal(PATTERN_ADDR_BITS)              # byte address of beat ``idx`` once idx > 0
        err = Signal()                               # an errored word in the head packet so far
        addr = Signal(PATTERN_ADDR_BITS)
        last = Signal()
        fire = Signal()
        pop = Signal()
        if atomics:
            h_replay = dq.r_data[PACKET_DESC.size]
            h_value = dq.r_data[PACKET_DESC.size + 1:]
            h_mem = h_mem & ~h_replay
            # a REPLAY's beats: its value as 8 big-endian bytes in every lane
            beat = Mux(h_replay, lanes_reversed(h_value).replicate(W // (8 * ATOMIC_BYTES)),
                       Mux(h_mem, rw.data, pattern_beat(addr, W)))
        else:
            beat = Mux(h_mem, rw.data, pattern_beat(addr, W))
        m.d.comb += [
            addr.eq(Mux(idx == 0, Cat(Const(0, lb), head.local_addr[lb:]), cur)),
            last.eq(idx == payload_words(head.length, W)),
            o.valid.eq(dq.r_rdy & (~h_mem | wq.r_rdy)),
            o.payload.data.eq(beat),
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

        return pop

    def _atomics(self, m, a_state, finish, ar_fire, baddr, credit, rd_out, take, take_replay):
        """The atomic's steps in the burst generator (``a_state``, ``finish``), its AtomicAlu,
        ``aw``, ``lock`` and ``done``. ``take``: an atomic to execute or a REPLAY is accepted
        (its work and descriptor kept); ``take_replay``: a REPLAY is."""
        W, B = self.width, self.width // 8
        lb = B.bit_length() - 1
        r, aw, done, quiet = self.r, self.aw, self.done, self.quiet
        d = self.desc.payload
        m.submodules.alu = alu = AtomicAlu(W, byteorder=self.atomics)

        # the atomic (or REPLAY) last accepted: its work, target lane, QP and PSN
        g_atom = Signal(ATOMIC_WORK)
        g_lane = Signal(range(max(2, W // (8 * ATOMIC_BYTES))))
        g_qp = Signal.like(d.qp)
        g_psn = Signal.like(d.psn)
        with m.If(take):
            m.d.sync += [g_atom.eq(self.atomic), g_lane.eq(d.va[3:lb]), g_qp.eq(d.qp),
                         g_psn.eq(d.psn)]
        rp_done = Signal()                          # a REPLAY accepted in the previous cycle
        m.d.sync += rp_done.eq(take_replay)

        a_addr = Signal(self.mem_addr_width)        # the atomic's word address
        a_err = Signal()                            # its word came with an error response
        with m.If(ar_fire):
            m.d.sync += a_addr.eq(baddr[lb:])
        a = alu.i.payload
        res = alu.o.payload
        write_back = Signal()
        m.d.comb += [
            alu.i.valid.eq((a_state == _A_READ) & r.valid),
            a.word.eq(r.payload.data), a.lane.eq(g_lane),
            a.fetch_add.eq(g_atom.op == AtomicOp.FETCH_ADD),
            a.swap_add.eq(g_atom.swap_add), a.compare.eq(g_atom.compare),
            # (no write back of a word read with an error: its value is not known)
            write_back.eq((a_state == _A_EXEC) & res.write & ~a_err),
            aw.valid.eq(write_back | (a_state == _A_WRITE)),
            aw.payload.addr.eq(a_addr), aw.payload.data.eq(res.data), aw.payload.be.eq(res.be),
            # (the result held until the write back is taken)
            alu.o.ready.eq(~aw.valid | aw.ready),
            done.valid.eq((a_state == _A_EXEC) | rp_done),
            done.payload.qp.eq(g_qp), done.payload.psn.eq(g_psn),
            done.payload.orig.eq(Mux(rp_done, g_atom.swap_add, res.orig)),
            finish.eq(((a_state == _A_EXEC) & ~write_back) | ((a_state == _A_WAIT) & quiet)),
            self.lock.eq(a_state >= _A_LOCK),
        ]
        with m.Switch(a_state):
            with m.Case(_A_PREP):
                # (unlocked: the data queue's room and the earlier read beats do not depend on
                # the other writers)
                with m.If((credit != 0) & (rd_out == 0)):
                    m.d.sync += a_state.eq(_A_LOCK)
            with m.Case(_A_LOCK):
                with m.If(ar_fire):
                    m.d.sync += a_state.eq(_A_READ)
            with m.Case(_A_READ):
                # (every earlier beat is in: the next one is the atomic's word)
                with m.If(r.valid):
                    m.d.sync += [a_state.eq(_A_EXEC), a_err.eq(r.payload.resp != 0)]
            with m.Case(_A_EXEC, _A_WRITE):
                with m.If(~aw.valid):
                    m.d.sync += a_state.eq(_A_NONE)
                with m.Elif(aw.ready):
                    m.d.sync += a_state.eq(_A_WAIT)
                with m.Else():
                    m.d.sync += a_state.eq(_A_WRITE)
            with m.Case(_A_WAIT):
                with m.If(quiet):
                    m.d.sync += a_state.eq(_A_NONE)
