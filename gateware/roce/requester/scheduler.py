from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.layouts import (
    FREED,
    PACKET_DESC,
    POST,
    PROGRESS,
    PSN_WRITE,
    QP_CONTEXT,
    SCHED_EVENT,
    SENT,
    SLOT,
    SLOT_PSNS,
    WR_TAGGED,
    check_num_qps,
    check_wr_depth,
)
from rocegen.gateware.roce.read.read_layouts import READ_ISSUE
from rocegen.gateware.roce.requester.sched_build import SchedBuild
from rocegen.gateware.roce.requester.sched_issue import SchedIssue
from rocegen.gateware.roce.requester.sched_queue import SchedQueue
from rocegen.gateware.roce.requester.sched_select import SchedSelect

__all__ = ["Scheduler", "SLOT", "PROGRESS", "SLOT_PSNS"]


class Scheduler(wiring.Component):
    """Work-request scheduler of the RC requester: per-QP queues of work requests, round robin
    over the QPs one packet at a time, one packet descriptor per packet, and go-back-N resends.

    Parameters
    ----------
    num_qps : int
        QPs of the QP table, 1..256 (QP index ``k`` is QPN ``256 + k``).
    width : int
        Data width W in bits (64, 128, 256, 512); a request's ``local_addr`` must be a multiple
        of W/8 bytes, the memory word (not a READ's).
    mem_bytes : int
        Size of the local memory in bytes, a power of two from W/8 to 2^32.
    depth : int
        Work requests each QP holds, a power of two 1..1024
        (:data:`~rocegen.gateware.roce.layouts.MAX_WR_DEPTH`): from the moment they are queued
        until they complete (waiting, being sent, sent and not yet acknowledged). The requests
        live in block RAM (``num_qps * depth`` slots); only the four ring pointers per QP, of
        log2(depth) + 1 bits each, are registers.
    window : int
        PSNs a QP may have outstanding: a packet whose PSN is more than ``window`` after the
        QP's acknowledged PSN waits (1..2^23-1). A READ request is checked on its own PSN (the
        PSNs of its responses may reach past the window).
    atomics : bool
        With ``reads``: COMPARE_SWAP and FETCH_ADD work requests are sent (one request packet
        each, answered as a READ of 8 bytes: the ATOMIC_ACKNOWLEDGE's original value); else
        refused with UNSUPPORTED.
    reads : bool
        Send RDMA READ requests for READ work requests (``rd_issue`` exists). Without it (the
        default) a READ is refused with UNSUPPORTED when queued.

    Ports
    -----
    wr : In(stream.Signature(WR_TAGGED))
        Work requests and their source.
    rd_qp, rd_context, rd_psn
        Read port of the :class:`~rocegen.gateware.roce.requester.qp_table.QpTable`: context and next PSN
        of QP ``rd_qp`` one cycle after it.
    psn_w : Out(stream.Signature(PSN_WRITE))
        The next PSN of a QP, written when a message starts (the PSN after its last packet).
    desc : Out(stream.Signature(PACKET_DESC))
        One descriptor per packet (the fields of
        :func:`~rocegen.gateware.roce.requester.segmenter.describe_packet`, plus ``src`` from the request
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
    sent : Out(stream.Signature(SENT))
        For the :class:`~rocegen.gateware.roce.requester.retry.RetryEngine`: the QP and PSN of the packets
        issued. While the record waits, the next packets of the same QP (consecutive PSNs) are
        merged into it (newest PSN and a packet count, up to 63); another packet waits for the
        output.
    rd_issue : Out(stream.Signature(READ_ISSUE, always_ready=True))
        With ``reads`` only, for the READ requester's table: a pulse in the cycle the issue stage
        commits a READ request (the cycle before its ``desc`` is offered; not when ``desc`` is
        taken): ``qp``; ``new`` (the READ starts with this request: its post is issued in the
        same commit); ``wr_id``; ``local_addr`` and ``length`` of the whole READ (not advanced
        by a resume); ``first`` (the READ's first PSN); ``psn`` (this request's PSN: ``first``
        when new, the resume PSN inside it after a REWIND); ``pmtu_log2`` (the QP context's
        code, as read for this packet). The payload comes from registers, ``valid`` from the
        issue decision (so ``desc.ready``, ``post.ready``, ... reach it combinationally).
    sched : In(stream.Signature(SCHED_EVENT, always_ready=True))
        REWIND: the QP goes back to its oldest request not completed, and resends
        from its oldest unacknowledged PSN (``acked_psn`` + 1) when that request's turn comes:
        requests wholly acknowledged (or refused) are skipped, one per turn; a message is
        resumed inside with MIDDLE/LAST packets and the address advanced. RESET: the
        connection was set up again: the QP's requests that have started are left to the
        completion tracker and sending goes on with the first one never started. ADVANCE: the
        QP's window may have opened.
    freed : In(stream.Signature(FREED, always_ready=True))
        A request of this QP completed: its slot is free.
    acked_qp / acked_psn
        Combinational read of a QP's acknowledged PSN (from the retry engine); ``acked_qp`` is a
        register (the QP of the build stage) and ``acked_psn`` reaches only that stage's
        registers.
    errored : In(num_qps)
        QPs in the error state: a message in progress stops (no more packets), requests that
        started before are skipped, and every other request is refused with FLUSHED.
    held : In(num_qps)
        QPs that must not send (an RNR wait): they get no turns.
    room, room_next : Out(num_qps)
        Per QP, from registers: a request offered on ``wr`` now is taken (``room``); one would
        still be taken in the next cycle after a request of the QP is queued in this one
        (``room_next``). See
        :class:`~rocegen.gateware.roce.requester.sched_queue.SchedQueue`.
    busy : Out(num_qps)
        QPs with work requests not yet completed (registers).

    Behaviour
    ---------
    * Queueing: a request naming a QP outside the table is refused at once (post BAD_QP; it
      waits for the ``post`` output, at least one cycle, and gets it before the QPs' own
      posts). Any other is
      written into its QP's queue, with its checks already made: UNSUPPORTED when its opcode
      is none of WRITE, WRITE_IMM, SEND, SEND_IMM (nor READ with ``reads``), else LOCAL_ALIGN
      when ``local_addr`` is not a multiple of W/8 (not for a READ), else LOCAL_LENGTH when
      ``local_addr + length > mem_bytes`` (not for a send of the GENERATOR source, whose
      payload is a pattern). A request for a QP
      whose ``depth`` slots are taken holds ``wr`` (a slot freed counts one cycle later); the
      endpoint's :class:`~rocegen.gateware.roce.frontend.wr_merge.WrMerge` offers a request only when its
      QP has room, so a full queue holds no other source. ``wr.ready`` depends on registers only
      for a QP inside the table, and on ``post.ready`` for one outside it.
    * Starting a request (when it is next on its QP and wins a turn): it is refused with its
      queued error, FLUSHED if the QP is in the error state, or QP_NOT_READY if the QP's state
      is not RTS at that moment; either way it is posted in order with the QP's other requests
      and sends nothing. Otherwise its first PSN is the QP table's next PSN, the PSN after its
      last packet is written back on ``psn_w``, and it is posted with OK.
    * Segmentation: as :class:`~rocegen.gateware.roce.requester.segmenter.Segmenter` (path MTU and AckReq
      period from the QP context, PSNs modulo 2^24 per QP, messages of 0..2^31-1 bytes); the
      packet that fills the window also asks for an acknowledgement. A message that has
      started is sent to its end even if its QP leaves RTS (but not if it fails); the context
      (path MTU, keys, addresses) is read again for every packet, so change it only while the
      QP has no message in progress. Resuming a message inside after a REWIND takes a turn of
      its own (it sets the progress up; the packets follow in the QP's next turns).
    * READ (with ``reads``): one packet per READ, in one turn: the RDMA READ request (BTH
      opcode 0x0C, RETH with ``base_va + remote_offset``, the QP's R_Key and the length; no
      payload, AckReq, no SE, ``last``). It takes one PSN per path MTU of its length (1 for
      0 bytes): the next PSN written on ``psn_w`` and the post's ``last_psn`` count them all,
      and its ``sent`` record has its last PSN (one packet; the QP's next packet follows at the
      next PSN). Resumed inside after a REWIND (from ``acked_psn`` + 1 = first PSN + k), the
      request is sent again at that PSN asking for the rest: RETH address and DMA length
      advanced by k path MTUs (``rd_issue`` with ``new`` 0).
    * Round robin: a QP has a turn when it has a request to send, is not held, its window is not
      known to be full, either its next request has started or ``full`` allows it to start, and
      it has no turn in the select, read or build stage (these from the registers of the
      previous cycle). Turns go
      to the first such QP after the one that had the last turn (QP order, wrapping), one packet
      (or one refusal, skip or resume) per turn: a QP never gets two turns in a row while
      another QP has one. A turn that finds the window full is given up (no packet) and the QP
      waits for an ADVANCE; so is a turn of a QP that became held, or whose request was picked
      to start when ``full`` rose, or that failed (it is worked out again), or that has a REWIND
      or RESET in the cycle it would be issued.
    * Latency: a request accepted on ``wr`` in cycle t, for an idle QP whose turn comes at once,
      has its first descriptor (and its post) offered in cycle t+5.
    * Throughput: one descriptor per cycle with ``desc`` ready when three QPs or more have
      packets to send. A QP has one turn at a time in the select, read and build stages (its
      next turn may be selected while the previous one is issued): alone it gets a turn every
      3 cycles (one packet, of any size, or one single-packet message per 3 cycles), two QPs
      share 2 turns per 3 cycles. A start also waits while a previous PSN write is still held
      by the QP table.
    * Backpressure: ``desc``, ``post``, ``psn_w`` and ``sent`` are registered outputs; a packet
      (or a refusal) is issued only when every output it needs is free or freeing in that
      cycle. While the issue stage waits for an output it keeps its turn; the turns behind it
      are dropped and the round robin goes back to the first of them, so they are given again
      in the same order (a stall never costs a QP its place). ``desc.ready``, ``post.ready``, ``psn_w.ready``,
      ``sent.ready``, ``full``, ``held``, ``errored`` and ``sched`` reach the issue stage's
      decision (and through it the pointers) combinationally, ``wr.valid`` and ``wr.payload``
      the queue pointers; the memories' read addresses and ``rd_qp`` come from registers and
      the round robin alone.

    Implementation: a four-stage pipeline. Select (S) picks a QP by round robin over
    eligibility registered in the previous cycle (worked out as if the issue stage commits its
    turn) and reads its request at ``cur`` (work-request memory, ``num_qps * depth`` entries of
    :data:`SLOT`, and the PSNs it took, :data:`SLOT_PSNS`). Read (R) registers those and reads
    the QP's progress (``num_qps`` entries of :data:`PROGRESS`: packet index, running PSN and
    byte offset) and its QP table entry. Build (B) works the turn out with
    :func:`~rocegen.gateware.roce.requester.segmenter.describe_packet` and registers it whole. Issue (I)
    commits it when the outputs take it: progress written back, ``cur`` advanced at the
    message end. So the issue stage's decision never reaches the selection in the same cycle.
    A QP in R or B is not selected. A QP in I may be: S reads its request at ``cur`` as if
    I commits (``cur`` + 1 at the message end), and R drops the new turn when I did not commit
    or when the QP has nothing left to send (a request queued in the cycle of S is not read
    yet; it gets the next turn), so a turn is only built on settled registers. A REWIND or
    RESET of a QP drops its turns in S, R and B. Per QP in
    registers: four queue pointers modulo 2 * depth -- ``head`` (oldest not completed,
    advanced by ``freed``), ``cur``, ``hi`` (first never started) and ``tail`` -- and the
    "started" and "window full" flags. A slot is reused only when both ``head`` and ``cur``
    have left it. A PSN write not yet seen by the QP table's read port (held in the output
    when R reads) is forwarded to a starting message. The round robin, the queue room and the
    issue decision are built as trees of kept signals so that synthesis maps them shallow
    (:mod:`~rocegen.gateware.roce.requester.sched_tree`).

    Components: :class:`~rocegen.gateware.roce.requester.sched_select.SchedSelect` (S and the turn
    registered for R), :class:`~rocegen.gateware.roce.requester.sched_build.SchedBuild` (B),
    :class:`~rocegen.gateware.roce.requester.sched_issue.SchedIssue` (I and the output registers) and
    :class:`~rocegen.gateware.roce.requester.sched_queue.SchedQueue` (queueing, pointers and flags); the
    scheduler holds the three memories, registers R's reads for B and joins the stages.
    """

    def __init__(self, num_qps, width, mem_bytes, depth=16, window=1024, *, reads=False,
                 atomics=False):
        check_num_qps(num_qps)
        check_width(width)
        if not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool):
            raise TypeError(f"mem_bytes must be an integer number of bytes, not {mem_bytes!r}")
        if mem_bytes & (mem_bytes - 1) or not width // 8 <= mem_bytes <= 1 << 32:
            raise ValueError(f"mem_bytes must be a power of two from {width // 8} (one memory word) "
                             f"to 2^32, not {mem_bytes}")
        check_wr_depth(depth)
        if not isinstance(window, int) or isinstance(window, bool):
            raise TypeError(f"window must be an integer number of packets, not {window!r}")
        if not 1 <= window < 1 << 23:
            raise ValueError(f"window must be 1..2^23-1 packets, not {window}")
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        if atomics and not reads:
            raise ValueError("atomics needs reads=True (an atomic is answered as a READ)")
        self.atomics = atomics
        self.num_qps = num_qps
        self.reads = reads
        self.width = width
        self.mem_bytes = mem_bytes
        self.depth = depth
        self.window = window
        members = {
            "wr": In(stream.Signature(WR_TAGGED)),
            "rd_qp": Out(range(num_qps)),
            "rd_context": In(QP_CONTEXT),
            "rd_psn": In(24),
            "psn_w": Out(stream.Signature(PSN_WRITE)),
            "desc": Out(stream.Signature(PACKET_DESC)),
            "post": Out(stream.Signature(POST)),
            "full": In(num_qps),
            "sent": Out(stream.Signature(SENT)),
            "sched": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "freed": In(stream.Signature(FREED, always_ready=True)),
            "acked_qp": Out(range(num_qps)),
            "acked_psn": In(24),
            "errored": In(num_qps),
            "held": In(num_qps),
            "room": Out(num_qps),
            "room_next": Out(num_qps),
            "busy": Out(num_qps),
        }
        if reads:
            members["rd_issue"] = Out(stream.Signature(READ_ISSUE, always_ready=True))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n, depth = self.num_qps, self.depth

        wr_mem = m.submodules.wr_mem = Memory(shape=SLOT, depth=n * depth, init=[])
        psn_mem = m.submodules.psn_mem = Memory(shape=SLOT_PSNS, depth=n * depth, init=[])
        prog_mem = m.submodules.prog_mem = Memory(shape=PROGRESS, depth=n, init=[])
        wr_w = wr_mem.write_port()
        wr_r = wr_mem.read_port()
        ps_w = psn_mem.write_port()
        ps_r = psn_mem.read_port()
        prog_w = prog_mem.write_port()
        prog_r = prog_mem.read_port()

        qu = m.submodules.queue = SchedQueue(n, self.width, self.mem_bytes, depth,
                                             reads=self.reads, atomics=self.atomics)
        m.d.comb += [self.room.eq(qu.room), self.room_next.eq(qu.room_next),
                     self.busy.eq(qu.busy)]
        abits = max(1, (n * depth - 1).bit_length())
        bs = m.submodules.build = SchedBuild(n, abits, self.window, reads=self.reads,
                                                   atomics=self.atomics)
        ct = bs.turn
        iss = m.submodules.issue = SchedIssue(n, abits, reads=self.reads)

        # --- select stage (S): round robin; read stage (R): the memories' data registered -------
        se = m.submodules.select = SchedSelect(n, depth)
        # (the retry engine's events reach every stage)
        for stage in (se, bs, iss, qu):
            wiring.connect(m, wiring.flipped(self.sched), stage.sched)
        # B (build): the QP read, its memories' data registered
        b_valid = Signal()
        b_q = Signal(range(n))
        b_sel = Signal(n)           # one-hot b_q, 0 when b_valid is low
        b_going = Signal()          # started[b_q]
        b_new = Signal()            # cur[b_q] == hi[b_q]
        b_addr = Signal(len(se.r_addr))
        b_slot = Signal(SLOT)
        b_pslot = Signal(SLOT_PSNS)
        b_fwd = Signal()            # the QP table's PSN of b_q was being written: b_fpsn
        b_fpsn = Signal(24)
        m.d.comb += [
            se.cur.eq(qu.cur), se.hi.eq(qu.hi), se.tail.eq(qu.tail), se.started.eq(qu.started),
            se.win_block.eq(qu.win_block), se.pushed.eq(qu.pushed), se.held.eq(self.held),
            se.full.eq(self.full), se.turn_sel.eq(ct.sel), se.turn_fin.eq(ct.p.fin),
            se.turn_new.eq(ct.p.new), se.commit.eq(iss.commit), se.b_sel.eq(b_sel),
            se.stall.eq(b_valid & ~ct.done),
            wr_r.addr.eq(se.rd_addr), ps_r.addr.eq(se.rd_addr),
        ]
        # the progress and the QP table are read from r_q (distributed RAMs, read in this cycle);
        # a PSN write of r_q waiting in the output in this cycle is not seen by the table's read
        r_q = se.r_q
        m.d.comb += [prog_r.addr.eq(r_q), self.rd_qp.eq(r_q)]
        psn_pend = self.psn_w     # the psn_w output register
        m.d.sync += [
            b_fwd.eq(psn_pend.valid & (psn_pend.payload.qp == r_q)),
            b_fpsn.eq(psn_pend.payload.psn),
            b_valid.eq(se.r_valid & ~se.r_gone),
            b_sel.eq(Mux(se.r_gone, 0, se.r_sel)),
            b_q.eq(r_q),
            b_going.eq(se.r_going),
            b_new.eq(se.r_new),
            b_addr.eq(se.r_addr),
            b_slot.eq(wr_r.data),
            b_pslot.eq(ps_r.data),
        ]

        # --- build stage (B): the turn worked out ---------------------------------------------------
        m.d.comb += [
            bs.valid.eq(b_valid), bs.q.eq(b_q), bs.sel.eq(b_sel), bs.addr.eq(b_addr),
            bs.going.eq(b_going), bs.new.eq(b_new), bs.slot.eq(b_slot), bs.pslot.eq(b_pslot),
            bs.fwd.eq(b_fwd), bs.fpsn.eq(b_fpsn), bs.prog.eq(prog_r.data),
            bs.context.eq(self.rd_context), bs.rd_psn.eq(self.rd_psn),
            bs.acked_psn.eq(self.acked_psn), bs.errored.eq(self.errored),
            self.acked_qp.eq(b_q),
        ]

        # --- issue stage (I): commit when the outputs take the turn -------------------------------
        wiring.connect(m, ct, iss.turn)
        for name in ("desc", "post", "psn_w", "sent") + (("rd_issue",) if self.reads else ()):
            wiring.connect(m, getattr(iss, name), wiring.flipped(getattr(self, name)))
        m.d.comb += [iss.held.eq(self.held), iss.full.eq(self.full), iss.errored.eq(self.errored),
                     ps_w.en.eq(iss.psn_slot.valid), ps_w.addr.eq(iss.psn_slot.payload.addr),
                     ps_w.data.eq(iss.psn_slot.payload.psns),
                     prog_w.en.eq(iss.progress.valid), prog_w.addr.eq(iss.progress.payload.qp),
                     prog_w.data.eq(iss.progress.payload.progress)]

        # --- queueing and pointers ----------------------------------------------------------------
        wiring.connect(m, wiring.flipped(self.wr), qu.wr)
        wiring.connect(m, qu.bad, iss.bad)
        wiring.connect(m, wiring.flipped(self.freed), qu.freed)
        m.d.comb += [qu.sel.eq(ct.sel), qu.commit.eq(iss.commit), qu.fin.eq(ct.p.fin),
                     qu.new.eq(ct.p.new), qu.win_shut.eq(iss.win_shut),
                     wr_w.en.eq(qu.slot_w.valid), wr_w.addr.eq(qu.slot_w.payload.addr),
                     wr_w.data.eq(qu.slot_w.payload.slot)]
        return m
