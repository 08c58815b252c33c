from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..stream import check_width
from .layouts import (
    MAX_QPS,
    PACKET_DESC,
    POST,
    QP_CONTEXT,
    WORK_REQUEST,
    WR_TAGGED,
    CplStatus,
    QpState,
    WrSource,
)
from .qp_table import PSN_WRITE
from .segmenter import INDEX_BITS, describe_packet

__all__ = ["Scheduler", "SLOT", "PROGRESS"]

#: One entry of the work-request memory: the request, who posted it and the verdict of the
#: checks made when it was queued (OK, LOCAL_ALIGN or LOCAL_LENGTH).
SLOT = data.StructLayout({"wr": WORK_REQUEST, "src": WrSource, "status": CplStatus})

#: Progress of the message a QP is sending (one entry per QP): index and PSN of its next packet.
PROGRESS = data.StructLayout({"index": INDEX_BITS, "psn": 24})


class Scheduler(wiring.Component):
    """Work-request scheduler of the RC requester: per-QP queues of work requests, round robin
    over the QPs one packet at a time, one packet descriptor per packet.

    Parameters
    ----------
    num_qps : int
        QPs of the QP table, 1..256 (QP index ``k`` is QPN ``256 + k``).
    width : int
        Data width W in bits (64, 128, 256, 512); a request's ``local_addr`` must be a multiple
        of W/8 bytes, the memory word.
    mem_bytes : int
        Size of the local memory in bytes, a power of two from W/8 to 2^32.
    depth : int
        Work requests each QP holds (the one being sent and those waiting), a power of two 1..64.

    Ports
    -----
    wr : In(stream.Signature(WR_TAGGED))
        Work requests and their source.
    rd_qp, rd_context, rd_psn
        Read port of the :class:`~rocegen.gateware.roce.qp_table.QpTable`: context and next PSN
        of QP ``rd_qp`` one cycle after it.
    psn_w : Out(stream.Signature(PSN_WRITE))
        The next PSN of a QP, written when the last descriptor of a message is issued.
    desc : Out(stream.Signature(PACKET_DESC))
        One descriptor per packet (the fields of
        :func:`~rocegen.gateware.roce.segmenter.describe_packet`, plus ``src`` from the request
        and ``peer_ip``, ``udp_sport``, ``dscp``, ``ecn`` and the destination QPN from the QP
        context).
    post : Out(stream.Signature(POST))
        One record per work request, for the completion tracker: status OK with ``last_psn`` (the
        PSN of its last packet) in the cycle its first descriptor is issued, or its error status
        (``last_psn`` 0) when it is refused without sending anything.
    full : In(num_qps)
        Bit ``q``: the completion tracker of QP ``q`` has no room. No work request of QP ``q``
        starts (nor is refused, since a refusal is posted too) while it is high; a message that
        has started goes on. The tracker must take into account every post it has accepted up to
        the previous clock edge (``full`` combinational from its registered occupancy). The
        scheduler itself never has more than one post of a QP that ``full`` does not yet cover:
        it starts no work request of QP ``q`` while a post of QP ``q`` waits in its output.

    Behaviour
    ---------
    * Queueing: a request naming a QP outside the table is refused at once (post BAD_QP; it
      waits for the ``post`` output, which it gets before the QPs' own posts). Any other is
      written into its QP's queue, with its address checks already made: LOCAL_ALIGN when
      ``local_addr`` is not a multiple of W/8, else LOCAL_LENGTH when ``local_addr + length >
      mem_bytes`` (not for the GENERATOR source, whose payload is a pattern). A request for a QP
      whose ``depth`` slots are taken holds ``wr`` (head of line: requests of other QPs behind it
      wait too). ``wr.ready`` depends on registers only for a QP inside the table, and on
      ``post.ready`` for one outside it.
    * Starting a request (when it is at the head of its queue and wins a turn): it is refused
      with its queued error, or with QP_NOT_READY if the QP's state is not RTS at that moment;
      either way it is posted in order with the QP's other requests and sends nothing.
      Otherwise its first PSN is the QP table's next PSN and it is posted with OK.
    * Segmentation: as :class:`~rocegen.gateware.roce.segmenter.Segmenter` (path MTU and AckReq
      period from the QP context, PSNs modulo 2^24 per QP, messages of 0..2^31-1 bytes). When
      the message's last descriptor is issued, the PSN after it goes to the QP table on
      ``psn_w``. A message that has started is sent to its end even if its QP leaves RTS;
      the context (path MTU, keys, addresses) is read again for every packet, so change it only
      while the QP has no message in progress. A PSN written by the control side while a
      message of that QP is in progress is overwritten when the message ends.
    * Round robin: a QP has a turn when its queue is not empty and either its head request has
      started or ``full`` allows it to start. Turns go to the first such QP after the one that
      had the last packet (QP order, wrapping), one packet (or one refusal) per turn: a QP never
      gets two turns in a row while another QP has one; alone, it gets every turn.
    * Latency: a request accepted on ``wr`` in cycle t, for an idle QP whose turn comes at once,
      has its first descriptor (and its post) offered in cycle t+3.
    * Throughput: one descriptor per cycle with ``desc`` ready, from one QP or shared by several.
      Exceptions: a request that starts on the same QP in the cycle after another one started
      there waits one cycle for that post to leave (single-packet messages on one QP alone: one
      every 2 cycles), and a message end waits while a previous PSN write is still held by the
      QP table.
    * Backpressure: ``desc``, ``post`` and ``psn_w`` are registered outputs; a packet (or a
      refusal) is issued only when every output it needs is free or freeing in that cycle.
      ``desc.ready``, ``post.ready``, ``psn_w.ready`` and ``full`` reach the read addresses
      (``rd_qp`` and the internal memories) combinationally.

    Implementation: a two-stage pipeline. Select (S0) picks a QP and reads its head request
    (work-request memory, ``num_qps * depth`` entries of :data:`SLOT`), its progress (progress
    memory, ``num_qps`` entries of :data:`PROGRESS`: packet index and running PSN) and its QP
    table entry. Issue (S1) builds the descriptor with
    :func:`~rocegen.gateware.roce.segmenter.describe_packet` and, when the outputs take it,
    commits it: progress written back (read-transparent to the select stage, so a QP can have
    consecutive turns), queue popped at the message end. When S1 cannot commit, S0 reads the
    same QP again (or nothing if it lost its turn through ``full``), so nothing is lost and the
    order of turns is kept. Per QP in registers: queue head (log2(depth) bits), queue count
    (log2(depth) + 1 bits) and a "message started" flag. A PSN write not yet seen by the QP
    table's read port (held in the output, or accepted in the previous cycle) is forwarded to a
    starting message.
    """

    def __init__(self, num_qps, width, mem_bytes, depth=2):
        if not isinstance(num_qps, int) or isinstance(num_qps, bool):
            raise TypeError(f"num_qps must be an integer, not {num_qps!r}")
        if not 1 <= num_qps <= MAX_QPS:
            raise ValueError(f"num_qps must be 1..{MAX_QPS}, not {num_qps}")
        check_width(width)
        if not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool):
            raise TypeError(f"mem_bytes must be an integer number of bytes, not {mem_bytes!r}")
        if mem_bytes & (mem_bytes - 1) or not width // 8 <= mem_bytes <= 1 << 32:
            raise ValueError(f"mem_bytes must be a power of two from {width // 8} (one memory word) "
                             f"to 2^32, not {mem_bytes}")
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"depth must be an integer number of work requests, not {depth!r}")
        if depth & (depth - 1) or not 1 <= depth <= 64:
            raise ValueError(f"depth must be a power of two from 1 to 64, not {depth}")
        self.num_qps = num_qps
        self.width = width
        self.mem_bytes = mem_bytes
        self.depth = depth
        super().__init__({
            "wr": In(stream.Signature(WR_TAGGED)),
            "rd_qp": Out(range(num_qps)),
            "rd_context": In(QP_CONTEXT),
            "rd_psn": In(24),
            "psn_w": Out(stream.Signature(PSN_WRITE)),
            "desc": Out(stream.Signature(PACKET_DESC)),
            "post": Out(stream.Signature(POST)),
            "full": In(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n, depth = self.num_qps, self.depth
        dbits = depth.bit_length() - 1
        qbits = (n - 1).bit_length()

        wr_mem = m.submodules.wr_mem = Memory(shape=SLOT, depth=n * depth, init=[])
        prog_mem = m.submodules.prog_mem = Memory(shape=PROGRESS, depth=n, init=[])
        wr_w = wr_mem.write_port()
        wr_r = wr_mem.read_port()
        prog_w = prog_mem.write_port()
        prog_r = prog_mem.read_port(transparent_for=(prog_w,))

        count = Array(Signal(range(depth + 1), name=f"count{q}") for q in range(n))
        head = Array(Signal(dbits, name=f"head{q}") for q in range(n))
        started = Signal(n)         # bit q: QP q's head request has sent its first packet

        def next_qp(q):
            return Mux(q == n - 1, 0, q + 1)

        # --- issue stage (S1): the QP read in the previous cycle --------------------------------
        s1_valid = Signal()
        s1_q = Signal(range(n))
        slot = wr_r.data
        ctx = self.rd_context
        is_start = ~started.bit_select(s1_q, 1)

        psn_pend = Signal(PSN_WRITE)    # the psn_w output register
        psn_pend_valid = Signal()
        psn_acc = Signal(PSN_WRITE)     # the PSN write accepted in the previous cycle
        psn_acc_valid = Signal()
        table_psn = Signal(24)
        with m.If(psn_pend_valid & (psn_pend.qp == s1_q)):
            m.d.comb += table_psn.eq(psn_pend.psn)
        with m.Elif(psn_acc_valid & (psn_acc.qp == s1_q)):
            m.d.comb += table_psn.eq(psn_acc.psn)
        with m.Else():
            m.d.comb += table_psn.eq(self.rd_psn)

        index = Signal(INDEX_BITS)
        psn = Signal(24)
        m.d.comb += [index.eq(Mux(is_start, 0, prog_r.data.index)),
                     psn.eq(Mux(is_start, table_psn, prog_r.data.psn))]

        status = Signal(CplStatus)
        with m.If(slot.status != CplStatus.OK):
            m.d.comb += status.eq(slot.status)
        with m.Elif(ctx.state != QpState.RTS):
            m.d.comb += status.eq(CplStatus.QP_NOT_READY)
        refuse = is_start & (status != CplStatus.OK)

        pk = describe_packet(m, slot.wr, index, psn, dest_qpn=ctx.peer_qpn, rkey=ctx.rkey,
                             base_va=ctx.base_va, pmtu_log2=ctx.pmtu_log2,
                             ack_every_log2=ctx.ack_every_log2)
        finishes = Signal()         # the head request leaves its queue with this turn
        m.d.comb += finishes.eq(refuse | pk.last)

        bad = self.wr.payload.wr.qp >= n
        bad_post = self.wr.valid & bad
        desc_free = ~self.desc.valid | self.desc.ready
        post_free = ~self.post.valid | self.post.ready
        post_ok = (post_free & ~bad_post & ~self.full.bit_select(s1_q, 1) &
                   ~(self.post.valid & (self.post.payload.qp == s1_q)))
        psn_free = ~psn_pend_valid | self.psn_w.ready
        commit = Signal()
        m.d.comb += commit.eq(s1_valid &
                              (refuse | desc_free) &
                              (~is_start | post_ok) &
                              (refuse | ~pk.last | psn_free))

        # outputs
        m.d.comb += [self.psn_w.valid.eq(psn_pend_valid), self.psn_w.payload.eq(psn_pend)]
        m.d.sync += [psn_acc_valid.eq(self.psn_w.valid & self.psn_w.ready),
                     psn_acc.eq(psn_pend)]
        with m.If(self.psn_w.ready):
            m.d.sync += psn_pend_valid.eq(0)
        with m.If(self.desc.ready):
            m.d.sync += self.desc.valid.eq(0)
        with m.If(self.post.ready):
            m.d.sync += self.post.valid.eq(0)

        with m.If(commit):
            m.d.sync += started.bit_select(s1_q, 1).eq(~finishes)
            with m.If(~refuse):
                d = self.desc.payload
                m.d.sync += [
                    self.desc.valid.eq(1),
                    d.eq(pk.desc),
                    d.qp.eq(s1_q),
                    d.src.eq(slot.src),
                    d.peer_ip.eq(ctx.peer_ip),
                    d.udp_sport.eq(ctx.udp_sport),
                    d.dscp.eq(ctx.dscp),
                    d.ecn.eq(ctx.ecn),
                ]
            with m.If(is_start):
                m.d.sync += [
                    self.post.valid.eq(1),
                    self.post.payload.wr_id.eq(slot.wr.wr_id),
                    self.post.payload.qp.eq(s1_q),
                    self.post.payload.src.eq(slot.src),
                    self.post.payload.status.eq(status),
                    self.post.payload.last_psn.eq(Mux(refuse, 0, psn + pk.last_index)),
                ]
            with m.If(~finishes):
                m.d.comb += [prog_w.en.eq(1), prog_w.addr.eq(s1_q),
                             prog_w.data.index.eq(index + 1), prog_w.data.psn.eq(psn + 1)]
            with m.If(~refuse & pk.last):
                m.d.sync += [psn_pend_valid.eq(1), psn_pend.qp.eq(s1_q), psn_pend.psn.eq(psn + 1)]

        # --- queueing ---------------------------------------------------------------------------
        t = self.wr.payload
        q_in = t.wr.qp[:qbits]
        in_count = count[q_in]
        push = Signal()
        m.d.comb += [
            self.wr.ready.eq(Mux(bad, post_free, in_count != depth)),
            push.eq(self.wr.valid & ~bad & (in_count != depth)),
        ]
        with m.If(bad_post & post_free):
            m.d.sync += [
                self.post.valid.eq(1),
                self.post.payload.wr_id.eq(t.wr.wr_id),
                self.post.payload.qp.eq(t.wr.qp),
                self.post.payload.src.eq(t.src),
                self.post.payload.status.eq(CplStatus.BAD_QP),
                self.post.payload.last_psn.eq(0),
            ]
        word_bits = (self.width // 8).bit_length() - 1
        in_status = Signal(CplStatus)
        with m.If(t.wr.local_addr[:word_bits] != 0):
            m.d.comb += in_status.eq(CplStatus.LOCAL_ALIGN)
        with m.Elif((t.src != WrSource.GENERATOR) &
                    (t.wr.local_addr + t.wr.length > self.mem_bytes)):
            m.d.comb += in_status.eq(CplStatus.LOCAL_LENGTH)
        tail = Signal(dbits)
        m.d.comb += [
            tail.eq(head[q_in] + in_count),
            wr_w.en.eq(push),
            wr_w.addr.eq(Cat(tail, q_in)),
            wr_w.data.wr.eq(t.wr),
            wr_w.data.src.eq(t.src),
            wr_w.data.status.eq(in_status),
        ]

        pop = commit & finishes
        for q in range(n):
            here_in = push & (q_in == q)
            here_out = pop & (s1_q == q)
            with m.If(here_in & ~here_out):
                m.d.sync += count[q].eq(count[q] + 1)
            with m.Elif(here_out & ~here_in):
                m.d.sync += count[q].eq(count[q] - 1)
            with m.If(here_out):
                m.d.sync += head[q].eq(head[q] + 1)

        # --- select stage (S0) ------------------------------------------------------------------
        # Turns as they will be after S1 commits (only used when it does, or when S1 is empty).
        elig = Signal(n)
        for q in range(n):
            here = s1_valid & (s1_q == q)
            has_work = Mux(here & finishes, count[q] > 1, count[q] != 0)
            going = Mux(here, ~finishes, started[q])
            m.d.comb += elig[q].eq(has_work & (going | ~self.full[q]))
        prio = Signal(range(n))     # one past the QP of the last turn
        start = Signal(range(n))
        m.d.comb += start.eq(Mux(s1_valid, next_qp(s1_q), prio))
        elig_hi = Signal(n)         # eligible QPs at or after start
        m.d.comb += elig_hi.eq(Cat(elig[q] & (start <= q) for q in range(n)))
        pick = Signal(range(n))
        # first eligible QP at or after start, else the first at all (later assignments win)
        for q in reversed(range(n)):
            with m.If(elig[q]):
                m.d.comb += pick.eq(q)
        for q in reversed(range(n)):
            with m.If(elig_hi[q]):
                m.d.comb += pick.eq(q)

        sel_valid = Signal()
        sel = Signal(range(n))
        with m.If(s1_valid & ~commit):
            # S1 waits for an output: read its QP again, unless it lost its turn through `full`
            m.d.comb += [sel.eq(s1_q),
                         sel_valid.eq(started.bit_select(s1_q, 1) | ~self.full.bit_select(s1_q, 1))]
        with m.Else():
            m.d.comb += [sel.eq(pick), sel_valid.eq(elig.any())]
        with m.If(commit):
            m.d.sync += prio.eq(next_qp(s1_q))
        sel_head = Signal(dbits)
        m.d.comb += [
            sel_head.eq(head[sel] + (pop & (sel == s1_q))),
            wr_r.addr.eq(Cat(sel_head, sel)),
            prog_r.addr.eq(sel),
            self.rd_qp.eq(sel),
        ]
        m.d.sync += [s1_valid.eq(sel_valid), s1_q.eq(sel)]
        return m
