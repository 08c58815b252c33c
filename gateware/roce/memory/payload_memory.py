from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import Axi4Signature
from rocegen.gateware.lib.memport import MemWriteSignature
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.roce.frontend.stream_in import DURABLE_WIDTH
from rocegen.gateware.roce.layouts import ATOMIC_RESULT, ATOMIC_WORK, PACKET_DESC
from rocegen.gateware.roce.memory.axi_reader import AxiPayloadReader
from rocegen.gateware.roce.memory.axi_writer import AxiWriter
from rocegen.gateware.roce.memory.mem_merge import MemWriteMerge
from rocegen.gateware.roce.memory.payload_ram import PayloadRam
from rocegen.gateware.roce.memory.payload_reader import PayloadReader, check_atomics

__all__ = ["PayloadMemory", "MEMORIES"]

#: Where payloads may live.
MEMORIES = ("onchip", "axi4")


class PayloadMemory(wiring.Component):
    """The endpoint's payload memory and its reader: an on-chip buffer
    (:class:`~rocegen.gateware.roce.memory.payload_ram.PayloadRam` read by a
    :class:`~rocegen.gateware.roce.memory.payload_reader.PayloadReader`), or an external memory through
    an AXI4 master (:class:`~rocegen.gateware.roce.memory.axi_reader.AxiPayloadReader` for reads,
    :class:`~rocegen.gateware.roce.memory.axi_writer.AxiWriter` for writes; with the responder, its
    writes, the READ requester's and the front end's share the writer through a
    :class:`~rocegen.gateware.roce.memory.mem_merge.MemWriteMerge`).

    Parameters
    ----------
    width : int
        Data width W (64..512).
    memory : ``"onchip"`` or ``"axi4"``
        Which memory.
    mem_bytes : int
        The on-chip buffer's size, or the size of the AXI4 address space used (a power of two
        from 16 words to 2^32 bytes); the AXI4 address is at least 12 bits wide.
    responder : bool
        With a second write source, the responder's (``resp_w``).
    reads : bool
        With a third write source, the READ requester's (``read_w``: the payload of READ
        responses); only with ``responder``.
    atomics : None, ``"little"`` or ``"big"``
        None (default): no atomics. Else the reader executes the responder's atomics in the
        memory, the 64-bit value in this byte order (see
        :class:`~rocegen.gateware.roce.memory.payload_reader.PayloadReader` on chip,
        :class:`~rocegen.gateware.roce.memory.axi_reader.AxiPayloadReader` on AXI4); with
        ``responder`` only.

    Ports
    -----
    desc : In(stream.Signature(PACKET_DESC))
        Packets to read (the scheduler's descriptors).
    o : Out(PacketSignature(width, PACKET_DESC))
        Their payloads, each packet with its descriptor, as the reader gives them.
    wr : In(MemWriteSignature(width, word_addr_bits))
        Word writes of the streaming front end.
    durable : Out(DURABLE_WIDTH)
        Words of ``wr`` that are in memory, readable by a later ``desc`` (on-chip: 1 in the
        cycle a write is taken; AXI4: the writer's count of acknowledged words).
    mem_w : In(MemWriteSignature(width, word_addr_bits)), on-chip only
        The user's word writes into the buffer; the front end's, the responder's and the READ
        requester's have priority (``mem_w.ready`` is low in a cycle ``wr.valid``,
        ``resp_w.valid`` or ``read_w.valid`` is high).
    resp_w : In(MemWriteSignature(width, word_addr_bits)), with ``responder`` only
        The responder's payload writes (byte-enabled); the front end's have priority
        (``resp_w.ready`` is low in a cycle ``wr.valid`` is high).
    resp_durable : Out(DURABLE_WIDTH), AXI4 with ``responder`` only
        Words of ``resp_w`` acknowledged by the memory in this cycle, in the order taken
        (:class:`~rocegen.gateware.roce.responder.responder.Responder` ``mem_durable``); ``durable`` then
        counts the words of ``wr`` only.
    read_w : In(MemWriteSignature(width, word_addr_bits)), with ``reads`` only
        The READ requester's payload writes (byte-enabled,
        :class:`~rocegen.gateware.roce.read.read_place.ReadPlace` ``o``); the front end's and the
        responder's have priority (``read_w.ready`` is low in a cycle ``wr.valid`` or
        ``resp_w.valid`` is high).
    read_durable : Out(DURABLE_WIDTH), AXI4 with ``reads`` only
        Words of ``read_w`` acknowledged by the memory in this cycle, in the order taken
        (:class:`~rocegen.gateware.roce.read.read_place.ReadPlace` ``mem_durable``).
    axi : Out(Axi4Signature(max(addr_bits, 12), width)), AXI4 only
        The memory.
    atomic : In(ATOMIC_WORK), with ``atomics`` only
        The sideband of ``desc``: the atomic a descriptor answers (``op`` NONE for every other
        descriptor), sampled with it (the reader's ``atomic``).
    atomic_done : Out(stream.Signature(ATOMIC_RESULT, always_ready=True)), with ``atomics`` only
        One record per atomic executed and per REPLAY, in descriptor order (the reader's
        ``done``): on chip two cycles after the atomic's word is read (a cycle after its
        packet's beat is first offered on ``o``, when the reader's queue was empty); on AXI4
        the cycle after its word came back on R.

    Behaviour, latency and backpressure: those of the reader and writer; this block only
    selects them and joins the write sources (combinationally: on chip, into the buffer's one
    write port; on AXI4, ``wr``, ``resp_w`` and ``read_w`` into the writer, built with one tag
    per source (``tags=2``, or 3 with ``reads``) so that a burst holds one source's words and
    each write response counts for its source). Priority: ``wr``, ``resp_w``, ``read_w``, then
    (on chip) ``mem_w``. One write per cycle from any source, as the buffer or the writer takes
    them; a later source waits while an earlier one offers a write.

    With ``atomics``, the reader's write backs (its ``aw``) come first on the buffer's write
    port, always taken in the cycle they are offered; in a cycle the reader's ``lock`` is high
    (an atomic's word read, or back from the buffer, its write back still to come) no other
    source is taken (their ``ready`` low), so no write falls between an atomic's read and its
    write back. Each atomic holds the other sources back for three cycles (two for a
    COMPARE_SWAP that does not match); ``durable`` counts only what is taken, as before.

    On AXI4 with ``atomics`` the write backs (the reader's ``aw``) are the writer's last source,
    with a tag of their own (``tags`` one more, the writer's ``rmw_tag``): each is a burst of
    its own, sent at once, and its write response counts for none of ``durable``,
    ``resp_durable``, ``read_durable``. While the reader's ``lock`` is high the other sources'
    words do not reach the merge (their ``ready`` low), and the writer's ``quiet`` tells the
    reader when every word taken has been answered: an atomic's read waits for every earlier
    write's response, and its write back's response comes before any later read or other
    write is issued. Each atomic holds the other sources back for about two AXI round trips
    (see :class:`~rocegen.gateware.roce.memory.axi_reader.AxiPayloadReader`).
    """

    def __init__(self, width, memory, mem_bytes, *, responder=False, reads=False, atomics=None):
        check_width(width)
        if memory not in MEMORIES:
            raise ValueError(f"memory must be one of {', '.join(MEMORIES)}, not {memory!r}")
        if not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool) or \
                mem_bytes & (mem_bytes - 1) or not width // 8 * 16 <= mem_bytes <= 1 << 32:
            raise ValueError(f"mem_bytes must be a power of two from {width // 8 * 16} to 2^32, "
                             f"not {mem_bytes!r}")
        if reads and not responder:
            raise ValueError("reads needs responder=True (the READ requester's writes are the "
                             "third source)")
        check_atomics(atomics)
        if atomics is not None and not responder:
            raise ValueError("atomics needs responder=True (the atomics are the responder's)")
        self.width = width
        self.memory = memory
        self.mem_bytes = mem_bytes
        self.responder = bool(responder)
        self.reads = bool(reads)
        self.atomics = atomics
        members = {"desc": In(stream.Signature(PACKET_DESC)),
                   "o": Out(PacketSignature(width, PACKET_DESC)),
                   "durable": Out(DURABLE_WIDTH)}
        if memory == "onchip":
            self._ram = PayloadRam(width, mem_bytes)
            self._reader = PayloadReader(width, self._ram.addr_width, atomics=atomics)
            #: Bits of a word address.
            self.word_addr_bits = self._ram.addr_width
            members["mem_w"] = In(MemWriteSignature(width, self.word_addr_bits))
            if responder:
                members["resp_w"] = In(MemWriteSignature(width, self.word_addr_bits))
            if reads:
                members["read_w"] = In(MemWriteSignature(width, self.word_addr_bits))
        else:
            axi_bits = max((mem_bytes - 1).bit_length(), 12)
            tags = 3 if reads else 2 if responder else 1
            if atomics is None:
                self._reader = AxiPayloadReader(width, addr_width=axi_bits)
                self._writer = AxiWriter(width, addr_width=axi_bits, tags=tags)
            else:
                # the atomics' write backs: the writer's last source, a tag of their own
                self._reader = AxiPayloadReader(width, addr_width=axi_bits, atomics=atomics)
                self._writer = AxiWriter(width, addr_width=axi_bits, tags=tags + 1,
                                         rmw_tag=tags)
            self.word_addr_bits = self._writer.mem_addr_width
            members["axi"] = Out(Axi4Signature(axi_bits, width))
            if responder:
                members["resp_w"] = In(MemWriteSignature(width, self.word_addr_bits))
                members["resp_durable"] = Out(DURABLE_WIDTH)
            if reads:
                members["read_w"] = In(MemWriteSignature(width, self.word_addr_bits))
                members["read_durable"] = Out(DURABLE_WIDTH)
        members["wr"] = In(MemWriteSignature(width, self.word_addr_bits))
        if atomics is not None:
            members["atomic"] = In(ATOMIC_WORK)
            members["atomic_done"] = Out(stream.Signature(ATOMIC_RESULT, always_ready=True))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        reader = m.submodules.reader = self._reader
        wiring.connect(m, wiring.flipped(self.desc), reader.desc)
        wiring.connect(m, reader.o, wiring.flipped(self.o))
        if self.memory == "onchip":
            ram = m.submodules.ram = self._ram
            wiring.connect(m, reader.mem, ram.rd)
            # the buffer's write port: the atomics' write backs first (nothing else while an
            # atomic is between its read and its write back), then the streaming front end,
            # then the responder, then the READ requester, then the user
            def take(w):
                m.d.comb += [ram.wr.payload.eq(w.payload), ram.wr.valid.eq(w.valid),
                             w.ready.eq(ram.wr.ready)]
            fw = self.wr
            if self.atomics is not None:
                m.d.comb += reader.atomic.eq(self.atomic)
                wiring.connect(m, reader.done, wiring.flipped(self.atomic_done))
                with m.If(reader.aw.valid):
                    take(reader.aw)
                with m.Elif(reader.lock):
                    pass                            # every source's ready low
                with m.Elif(fw.valid):
                    take(fw)
            else:
                with m.If(fw.valid):
                    take(fw)
            if self.responder:
                with m.Elif(self.resp_w.valid):
                    take(self.resp_w)
            if self.reads:
                with m.Elif(self.read_w.valid):
                    take(self.read_w)
            with m.Else():
                take(self.mem_w)
            m.d.comb += self.durable.eq(fw.valid & fw.ready)
        else:
            writer = m.submodules.writer = self._writer
            axi = wiring.flipped(self.axi)
            if self.responder:
                merge = m.submodules.merge = MemWriteMerge(self.width, self.word_addr_bits,
                                                           sources=self._writer.tags)
                if self.atomics is None:
                    wiring.connect(m, wiring.flipped(self.wr), merge.a)
                    wiring.connect(m, wiring.flipped(self.resp_w), merge.b)
                else:
                    self._atomic_sources(m, reader, writer, merge)
                wiring.connect(m, merge.o, writer.i)
                m.d.comb += [merge.durable.eq(writer.durable),
                             merge.durable_tag.eq(writer.durable_tag),
                             self.durable.eq(merge.a_durable),
                             self.resp_durable.eq(merge.b_durable)]
                if self.reads:
                    if self.atomics is None:
                        wiring.connect(m, wiring.flipped(self.read_w), merge.c)
                    m.d.comb += self.read_durable.eq(merge.c_durable)
            else:
                wiring.connect(m, wiring.flipped(self.wr), writer.i)
                m.d.comb += self.durable.eq(writer.durable)
            wiring.connect(m, writer.aw, axi.aw)
            wiring.connect(m, writer.w, axi.w)
            wiring.connect(m, axi.b, writer.b)
            wiring.connect(m, reader.ar, axi.ar)
            wiring.connect(m, axi.r, reader.r)
        return m

    def _atomic_sources(self, m, reader, writer, merge):
        """AXI4 with atomics: the sources into the merge, the atomics' write backs last (the
        writer's ``rmw_tag``); while an atomic holds ``lock``, no other source's word reaches the
        merge (its ``valid`` hidden, its ``ready`` low), so the write backs have it alone."""
        sources = [self.wr, self.resp_w] + ([self.read_w] if self.reads else [])
        lock = reader.lock
        for k, port in enumerate(sources):
            source = merge.source(k)
            m.d.comb += [source.valid.eq(port.valid & ~lock), source.payload.eq(port.payload),
                         port.ready.eq(source.ready & ~lock)]
        wiring.connect(m, reader.aw, merge.source(len(sources)))
        m.d.comb += [reader.atomic.eq(self.atomic), reader.quiet.eq(writer.quiet)]
        wiring.connect(m, reader.done, wiring.flipped(self.atomic_done))
