from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .layouts import ACK_EVENT, COMPLETION, FREED, MAX_QPS, POST, CplStatus, WrSource

__all__ = ["Completer", "QUEUE_ENTRY", "OUT_DEPTH"]

#: What a queue entry keeps of a post (the QP is where it is stored).
QUEUE_ENTRY = data.StructLayout({
    "wr_id": 32,
    "src": WrSource,
    "status": CplStatus,
    "last_psn": 24,
})

#: Completions buffered in front of ``cpl``.
OUT_DEPTH = 4

_HALF = 1 << 23
_NAK_PSN_SEQ = 0x60


def _onehot(index, n):
    """``n`` bits with bit ``index`` set (none when ``index >= n``)."""
    return Cat(*(index == k for k in range(n)))


def _lowest(vec):
    """One-hot of the lowest set bit of ``vec`` (zero when ``vec`` is zero)."""
    n = len(vec)
    return (vec & (~vec + 1))[:n]


def _encode(onehot, width):
    """Index of the set bit of a one-hot vector (OR trees)."""
    bits = []
    for b in range(width):
        terms = [onehot[k] for k in range(len(onehot)) if (k >> b) & 1]
        bits.append(Cat(*terms).any() if terms else Const(0, 1))
    return Cat(*bits)


class Completer(wiring.Component):
    """Completion tracker: per-QP in-order queues of started work requests, completed by the
    acknowledgements of the QP.

    :mod:`rocegen.sim.models.completer` is the reference model; its documentation states the
    completion and acknowledgement rules this block implements.

    Parameters
    ----------
    num_qps : int
        QPs in the table (1..256), QP index ``0 .. num_qps - 1``.
    depth : int
        Entries per QP queue, a power of two (1..1024). The queues share one memory of
        ``num_qps * depth`` entries (:data:`QUEUE_ENTRY`, 62 bits).

    Ports
    -----
    post : In(stream.Signature(POST))
        Always ready. An entry for a QP inside the table is appended to its queue (the poster
        must not post to a queue whose ``full`` bit is high: such a post is discarded and pulses
        ``overflow``). An entry with ``qp >= num_qps`` completes at once with status BAD_QP,
        through a queue of ``depth`` entries of its own (``bad_full`` high when it has no room:
        a bad post then is discarded and pulses ``overflow``).
    ack : In(stream.Signature(ACK_EVENT, always_ready=True))
        Every event is registered in the cycle it arrives, together with the QP's
        acknowledged PSN, and applied in the next cycle, after that cycle's post (so the
        acknowledged PSN read needs no cycle of its own). Events naming a QP outside the table
        are ignored.
    cpl : Out(stream.Signature(COMPLETION))
        Completions, in posting order per QP (QPs interleave in any order). Comes from a
        :data:`OUT_DEPTH`-entry FIFO; ``payload`` is stable while ``valid`` waits for ``ready``.
    full : Out(num_qps)
        Bit ``q``: the queue of QP ``q`` holds ``depth`` entries. A register: it rises in the
        cycle after the post that fills the queue.
    bad_full : Out(1)
        The bad-QP queue has no room (a register).
    busy : Out(1)
        Work is pending: a QP to examine (dirty, with an entry), a completion in flight or
        buffered.
    errored : In(num_qps)
        QPs in the error state (from :class:`~rocegen.gateware.roce.retry.RetryEngine`): every
        OK entry at the head of such a QP's queue that no acknowledgement covers completes at
        once, the first one since ``errored`` rose with ``err_status`` (read through ``err_qp``,
        combinationally), the others with FLUSHED. Entries already covered still complete OK.
    freed : Out(stream.Signature(FREED, always_ready=True))
        The QP of each entry that leaves its queue (a one-cycle pulse: the scheduler frees the
        work request's slot).
    acks, stale_acks, seq_naks, rnr_naks, naks, overflow : Out(1)
        One-cycle pulses, at most one of each per cycle: an ACK-class event (``stale_acks``
        besides when it does not move the QP's acknowledged PSN forward), a NAK PSN sequence
        error, an RNR NAK, any other NAK or reserved syndrome; a discarded post.

    Behaviour
    ---------
    * Scan engine: a dirty bit per QP is set by a post, by an acknowledgement that moves the
      QP's acknowledged PSN and by a completion (the next entry may be due). Each cycle the
      next dirty QP whose queue holds an entry, in round-robin order, is picked (its bit
      cleared) and the entry at the head of its queue read from the memory, with the QP's
      acknowledged PSN; in the following
      cycle the entry completes (it goes to the output FIFO and the head advances) if it is due.
      A QP being examined is not picked again in that cycle; a dirty QP with an empty queue
      stays dirty until a post gives it an entry.
    * Throughput: one completion per cycle over several QPs, one every two cycles for a single
      QP. Picks pause while the output FIFO could not take the completions in flight, so
      ``cpl`` backpressure never loses or stalls anything else: posts and acknowledgements keep
      being taken and the engine resumes when ``cpl`` drains. While bad-QP completions wait,
      the engine gives every other cycle to them.
    * Latency: an acknowledgement accepted in cycle t makes the completion available on ``cpl``
      in cycle t + 4 when the engine is otherwise idle and the output FIFO empty; a post with a
      non-OK status reaching an empty queue, in cycle t + 3; a bad-QP post, in cycle t + 2.
    * Storage: the entries in one synchronous-read memory (block RAM); per QP, the head and
      tail pointers and the acknowledged PSN in small asynchronous-read memories (distributed
      RAM), the dirty, full, "holds an entry" and "has an acknowledged PSN" bits in registers.
    * A QP whose connection is set up again (new PSNs) should have an empty queue; the first OK
      post whose last PSN the acknowledged PSN already covers makes the QP forget it.
    """

    def __init__(self, num_qps, depth=16):
        for name, value in (("num_qps", num_qps), ("depth", depth)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"{name} must be an integer, not {value!r}")
        if not 1 <= num_qps <= MAX_QPS:
            raise ValueError(f"num_qps must be 1..{MAX_QPS}, not {num_qps}")
        if not 1 <= depth <= 1024 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two from 1 to 1024, not {depth}")
        self.num_qps = num_qps
        self.depth = depth
        super().__init__({
            "post": In(stream.Signature(POST)),
            "ack": In(stream.Signature(ACK_EVENT, always_ready=True)),
            "cpl": Out(stream.Signature(COMPLETION)),
            "full": Out(num_qps),
            "bad_full": Out(1),
            "busy": Out(1),
            "acks": Out(1),
            "stale_acks": Out(1),
            "seq_naks": Out(1),
            "rnr_naks": Out(1),
            "naks": Out(1),
            "overflow": Out(1),
            "errored": In(num_qps),
            "err_qp": Out(range(num_qps)),
            "err_status": In(CplStatus),
            "freed": Out(stream.Signature(FREED, always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        d_log2 = (self.depth - 1).bit_length()
        ptr_w = d_log2 + 1                       # head/tail modulo 2 * depth
        q_w = max(1, (n - 1).bit_length())
        addr_w = (n * self.depth - 1).bit_length() if n * self.depth > 1 else 0

        entries = Memory(shape=QUEUE_ENTRY, depth=n * self.depth, init=[])
        heads = Memory(shape=ptr_w, depth=n, init=[])
        tails = Memory(shape=ptr_w, depth=n, init=[])
        acked = Memory(shape=24, depth=n, init=[])          # acknowledged PSN per QP
        m.submodules.entries = entries
        m.submodules.heads = heads
        m.submodules.tails = tails
        m.submodules.acked = acked
        ent_w = entries.write_port()
        ent_r = entries.read_port()                         # synchronous (block RAM)
        head_w = heads.write_port()
        head_pick = heads.read_port(domain="comb")
        head_post = heads.read_port(domain="comb")
        tail_w = tails.write_port()
        tail_pick = tails.read_port(domain="comb")
        tail_post = tails.read_port(domain="comb")
        acked_w = acked.write_port()
        acked_ack = acked.read_port(domain="comb")
        acked_post = acked.read_port(domain="comb")
        acked_scan = acked.read_port(domain="comb")

        acked_valid = Signal(n)         # the QP has an acknowledged PSN
        dirty = Signal(n)
        full = Signal(n)
        nonempty = Signal(n)            # the QP's queue holds an entry
        rr_mask = Signal(n)             # QPs after the one picked last

        def entry_addr(qp, ptr):
            return Cat(ptr[:d_log2], qp[:q_w])[:addr_w]

        outq = m.submodules.outq = SyncFIFO(width=COMPLETION.size, depth=OUT_DEPTH)
        badq = m.submodules.badq = SyncFIFO(width=COMPLETION.size, depth=self.depth)
        m.d.comb += [
            self.cpl.valid.eq(outq.r_rdy),
            self.cpl.payload.eq(outq.r_data),
            outq.r_en.eq(self.cpl.ready),
            self.full.eq(full),
        ]

        # ---- scan, second cycle: complete the head entry if it is due
        s1_valid = Signal()
        s1_qp = Signal(q_w)
        s1_vec = Signal(n)              # one-hot of s1_qp (while s1_valid)
        s1_head = Signal(ptr_w)
        s1_head1 = Signal(ptr_w)        # s1_head + 1
        entry = ent_r.data
        s1_acked = Signal(24)           # the QP's acknowledged PSN, read when it was picked
        since = Signal(24)
        m.d.comb += since.eq(s1_acked - entry.last_psn)
        covered = acked_valid.bit_select(s1_qp, 1) & ~since[23]
        failed = self.errored.bit_select(s1_qp, 1)
        err_used = Signal(n)            # the QP's error status went to a completion already
        s1_done = Signal()
        m.d.comb += s1_done.eq(s1_valid & ((entry.status != CplStatus.OK) | covered | failed))
        s1_status = Signal(CplStatus)
        m.d.comb += self.err_qp.eq(s1_qp)
        with m.If((entry.status != CplStatus.OK) | covered):
            m.d.comb += s1_status.eq(entry.status)
        with m.Elif(err_used.bit_select(s1_qp, 1)):
            m.d.comb += s1_status.eq(CplStatus.FLUSHED)
        with m.Else():
            m.d.comb += s1_status.eq(self.err_status)
        errored_d = Signal(n)
        m.d.sync += errored_d.eq(self.errored)
        first_err = Mux(s1_done & (entry.status == CplStatus.OK) & ~covered, _onehot(s1_qp, n), 0)
        m.d.sync += err_used.eq((err_used | first_err) & self.errored)
        m.d.comb += [self.freed.valid.eq(s1_done), self.freed.payload.eq(s1_qp)]
        s1_cpl = Signal(COMPLETION)
        m.d.comb += [
            s1_cpl.wr_id.eq(entry.wr_id), s1_cpl.qp.eq(s1_qp), s1_cpl.status.eq(s1_status),
            s1_cpl.src.eq(entry.src),
            head_w.addr.eq(s1_qp), head_w.data.eq(s1_head1), head_w.en.eq(s1_done),
        ]
        done_vec = Signal(n)
        m.d.comb += done_vec.eq(Mux(s1_done, s1_vec, 0))
        # the completion empties the queue (unless a post refills it in this cycle)
        m.d.comb += tail_pick.addr.eq(s1_qp)
        emptied = Mux(s1_done & (tail_pick.data == s1_head1), s1_vec, 0)

        # bad-QP completions move to the output FIFO in cycles without a scan result
        bad_xfer = Signal()
        m.d.comb += [
            bad_xfer.eq(badq.r_rdy & ~s1_valid & outq.w_rdy),
            badq.r_en.eq(bad_xfer),
            outq.w_en.eq(s1_done | bad_xfer),
            outq.w_data.eq(Mux(s1_done, s1_cpl.as_value(), badq.r_data)),
        ]

        # the bad-QP queue's "full" as a register, from its next level (always equal to
        # ~badq.w_rdy; the scheduler's hold on bad requests then starts at a flip-flop)
        bad_full = Signal()
        bad_level_next = (badq.level + (badq.w_en & badq.w_rdy) - (badq.r_en & badq.r_rdy))
        m.d.sync += bad_full.eq(bad_level_next == self.depth)
        m.d.comb += self.bad_full.eq(bad_full)

        # ---- scan, first cycle: pick a dirty QP with an entry, read its head entry
        eligible = Signal(n)
        m.d.comb += eligible.eq(dirty & nonempty & ~s1_vec)
        # round robin: the lowest of the QPs after the last one picked, else the lowest of all
        low = Signal(2 * n)
        m.d.comb += low.eq(_lowest(Cat(eligible & rr_mask, eligible)))
        chosen = Signal(n)
        m.d.comb += chosen.eq(low[:n] | low[n:])
        pick_qp = Signal(q_w)
        m.d.comb += pick_qp.eq(_encode(chosen, q_w))
        room = outq.level + s1_valid + bad_xfer < OUT_DEPTH
        pick = Signal()
        m.d.comb += pick.eq(eligible.any() & room & ~(s1_valid & badq.r_rdy))
        m.d.comb += [
            head_pick.addr.eq(pick_qp),
            acked_scan.addr.eq(pick_qp),
            ent_r.addr.eq(entry_addr(pick_qp, head_pick.data)),
            ent_r.en.eq(pick),
        ]
        m.d.sync += [
            s1_valid.eq(pick),
            s1_qp.eq(pick_qp),
            # (an acknowledgement of the QP applied in the pick cycle is not seen here: it marks
            # the QP dirty again, so the QP is examined once more)
            s1_acked.eq(acked_scan.data),
            s1_vec.eq(Mux(pick, chosen, 0)),
            s1_head.eq(head_pick.data),
            s1_head1.eq(head_pick.data + 1),
        ]
        with m.If(pick):
            m.d.sync += rr_mask.eq(~(chosen | (chosen - 1)[:n]))
        picked_vec = Mux(pick, chosen, 0)

        # ---- posts
        p = self.post.payload
        in_table = p.qp < n
        m.d.comb += self.post.ready.eq(1)
        post_qp = Signal(q_w)
        m.d.comb += post_qp.eq(p.qp[:q_w])
        to_queue = Signal()
        m.d.comb += [
            to_queue.eq(self.post.valid & in_table & ~full.bit_select(post_qp, 1)),
            self.overflow.eq(self.post.valid & ~Mux(in_table, ~full.bit_select(post_qp, 1),
                                                   badq.w_rdy)),
        ]
        bad_cpl = Signal(COMPLETION)
        m.d.comb += [
            bad_cpl.wr_id.eq(p.wr_id), bad_cpl.qp.eq(p.qp), bad_cpl.status.eq(CplStatus.BAD_QP),
            bad_cpl.src.eq(p.src),
            badq.w_data.eq(bad_cpl),
            badq.w_en.eq(self.post.valid & ~in_table),
        ]
        m.d.comb += [
            head_post.addr.eq(post_qp),
            tail_post.addr.eq(post_qp),
            acked_post.addr.eq(post_qp),
            ent_w.addr.eq(entry_addr(post_qp, tail_post.data)),
            ent_w.data.wr_id.eq(p.wr_id),
            ent_w.data.src.eq(p.src),
            ent_w.data.status.eq(p.status),
            ent_w.data.last_psn.eq(p.last_psn),
            ent_w.en.eq(to_queue),
            tail_w.addr.eq(post_qp),
            tail_w.data.eq(tail_post.data + 1),
            tail_w.en.eq(to_queue),
        ]
        post_vec = Signal(n)
        m.d.comb += post_vec.eq(Mux(to_queue, _onehot(post_qp, n), 0))
        # entries after this cycle: one more, one less if the scan completes one of this QP
        count = Signal(ptr_w)
        m.d.comb += count.eq(tail_post.data + 1 - head_post.data -
                             (s1_done & (s1_qp == post_qp)))
        fills = Mux(to_queue & (count == self.depth), post_vec, 0)
        # an OK entry already covered: the QP was set up again, forget its acknowledged PSN
        post_since = Signal(24)
        m.d.comb += post_since.eq(acked_post.data - p.last_psn)
        forget = Signal()
        m.d.comb += forget.eq(to_queue & (p.status == CplStatus.OK) &
                              acked_valid.bit_select(post_qp, 1) & ~post_since[23])
        forget_vec = Mux(forget, post_vec, 0)

        # ---- acknowledgements: an event is registered with the QP's acknowledged PSN read in
        # its arrival cycle (the write of the event before it forwarded), and applied in the next
        # cycle, after that cycle's post
        a = Signal(ACK_EVENT)
        a_valid = Signal()
        a_acked = Signal(24)                # the QP's acknowledged PSN as it was read
        ack_qp = Signal(q_w)
        m.d.comb += ack_qp.eq(a.qp[:q_w])
        m.d.comb += acked_ack.addr.eq(self.ack.payload.qp[:q_w])
        psn = Signal(24)
        moves = Signal()
        m.d.sync += [
            a.eq(self.ack.payload),
            a_valid.eq(self.ack.valid & (self.ack.payload.qp < n)),
            a_acked.eq(Mux(moves & (ack_qp == self.ack.payload.qp[:q_w]), psn,
                           acked_ack.data)),
        ]
        valid = a_valid
        cls = a.syndrome[5:8]
        is_ack = cls == 0b000
        is_seq = a.syndrome == _NAK_PSN_SEQ
        is_rnr = cls == 0b001
        m.d.comb += psn.eq(Mux(is_seq, a.psn - 1, a.psn))
        ack_vec = Signal(n)
        m.d.comb += ack_vec.eq(_onehot(ack_qp, n))
        had = acked_valid.bit_select(ack_qp, 1) & ~(forget & (post_qp == ack_qp))
        # psn - acked for an ACK (psn) and a sequence NAK (psn - 1), side by side
        step = Signal(24)
        step_seq = Signal(24)
        m.d.comb += [step.eq(a.psn - a_acked), step_seq.eq(a.psn + ~a_acked)]
        ahead = Signal()
        ahead_seq = Signal()
        m.d.comb += [ahead.eq((step != 0) & ~step[23]), ahead_seq.eq((step_seq != 0) & ~step_seq[23])]
        m.d.comb += moves.eq(valid & ((is_ack & (~had | ahead)) | (is_seq & (~had | ahead_seq))))
        m.d.comb += [
            acked_w.addr.eq(ack_qp), acked_w.data.eq(psn), acked_w.en.eq(moves),
            self.acks.eq(valid & is_ack),
            self.stale_acks.eq(valid & is_ack & ~moves),
            self.seq_naks.eq(valid & is_seq),
            self.rnr_naks.eq(valid & is_rnr),
            self.naks.eq(valid & ~is_ack & ~is_seq & ~is_rnr),
        ]
        moved_vec = Mux(moves, ack_vec, 0)

        # ---- per-QP bits
        m.d.sync += [
            acked_valid.eq((acked_valid & ~forget_vec) | moved_vec),
            dirty.eq((dirty & ~picked_vec) | post_vec | moved_vec | done_vec |
                     (self.errored & ~errored_d)),
            full.eq((full & ~done_vec) | fills),
            nonempty.eq((nonempty & ~emptied) | post_vec),
        ]
        m.d.comb += self.busy.eq((dirty & nonempty).any() | s1_valid | outq.r_rdy | badq.r_rdy |
                                 a_valid)
        return m
