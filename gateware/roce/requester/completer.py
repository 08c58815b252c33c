from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    ACK_EVENT,
    COMPLETION,
    FREED,
    POST,
    CplStatus,
    WrSource,
    check_num_qps,
    check_wr_depth,
)
from rocegen.gateware.roce.requester.completer_acks import CplAckState
from rocegen.gateware.roce.requester.completer_out import OUT_DEPTH, CplOutput
from rocegen.gateware.roce.requester.completer_pick import CplPick

__all__ = ["Completer", "QUEUE_ENTRY", "OUT_DEPTH", "BAD_DEPTH"]

#: Most entries of the queue of completions of work requests that name no QP.
BAD_DEPTH = 64

#: What a queue entry keeps of a post (the QP is where it is stored).
QUEUE_ENTRY = data.StructLayout({
    "wr_id": 32,
    "src": WrSource,
    "status": CplStatus,
    "last_psn": 24,
})


def _onehot(index, n):
    """``n`` bits with bit ``index`` set (none when ``index >= n``)."""
    return Cat(*(index == k for k in range(n)))


class Completer(wiring.Component):
    """Completion tracker: per-QP in-order queues of started work requests, completed by the
    acknowledgements of the QP.

    :mod:`rocegen.sim.models.requester.completer` is the reference model; its documentation states the
    completion and acknowledgement rules this block implements.

    Parameters
    ----------
    num_qps : int
        QPs in the table (1..256), QP index ``0 .. num_qps - 1``.
    depth : int
        Entries per QP queue, a power of two (1..1024,
        :data:`~rocegen.gateware.roce.layouts.MAX_WR_DEPTH`). The queues share one memory of
        ``num_qps * depth`` entries (:data:`QUEUE_ENTRY`, 62 bits).

    Ports
    -----
    post : In(stream.Signature(POST))
        Always ready. An entry for a QP inside the table is appended to its queue (the poster
        must not post to a queue whose ``full`` bit is high: such a post is discarded and pulses
        ``overflow``). An entry with ``qp >= num_qps`` completes at once with status BAD_QP,
        through a queue of ``min(depth, BAD_DEPTH)`` entries of its own (``bad_full`` high when
        it has no room: a bad post then is discarded and pulses ``overflow``).
    ack : In(stream.Signature(ACK_EVENT, always_ready=True))
        Every event is applied in the cycle it arrives, against the QP's acknowledged PSN read
        then, after that cycle's post (:class:`~rocegen.gateware.roce.requester.completer_acks.CplAckState`;
        ``ack`` from registers). Events naming a QP outside the table are ignored.
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
        QPs in the error state (from :class:`~rocegen.gateware.roce.requester.retry.RetryEngine`): every
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
      in cycle t + 3 when the engine is otherwise idle and the output FIFO empty; a post with a
      non-OK status reaching an empty queue, in cycle t + 3; a bad-QP post, in cycle t + 2.
    * Storage: the entries in one synchronous-read memory (block RAM); per QP, the head and
      tail pointers and the acknowledged PSN in small asynchronous-read memories (distributed
      RAM), the dirty, full, "holds an entry" and "has an acknowledged PSN" bits in registers.
    * A QP whose connection is set up again (new PSNs) should have an empty queue; the first OK
      post whose last PSN the acknowledged PSN already covers makes the QP forget it.
    """

    def __init__(self, num_qps, depth=16):
        check_num_qps(num_qps)
        check_wr_depth(depth)
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

        entries = m.submodules.entries = Memory(shape=QUEUE_ENTRY, depth=n * self.depth, init=[])
        heads = m.submodules.heads = Memory(shape=ptr_w, depth=n, init=[])
        tails = m.submodules.tails = Memory(shape=ptr_w, depth=n, init=[])
        ent_w = entries.write_port()
        ent_r = entries.read_port()                         # synchronous (block RAM)
        head_w = heads.write_port()
        head_pick = heads.read_port(domain="comb")
        head_post = heads.read_port(domain="comb")
        tail_w = tails.write_port()
        tail_pick = tails.read_port(domain="comb")
        tail_post = tails.read_port(domain="comb")
        acks = m.submodules.acks = CplAckState(n)
        out = m.submodules.out = CplOutput(min(self.depth, BAD_DEPTH))

        dirty = Signal(n)
        full = Signal(n)
        nonempty = Signal(n)            # the QP's queue holds an entry

        def entry_addr(qp, ptr):
            return Cat(ptr[:d_log2], qp[:q_w])[:addr_w]

        wiring.connect(m, out.cpl, wiring.flipped(self.cpl))
        wiring.connect(m, wiring.flipped(self.ack), acks.ack)
        m.d.comb += [self.full.eq(full), self.bad_full.eq(out.bad_full)]
        m.d.comb += [getattr(self, name).eq(getattr(acks, name))
                     for name in ("acks", "stale_acks", "seq_naks", "rnr_naks", "naks")]

        # ---- scan, second cycle: complete the head entry if it is due
        s1_valid = Signal()
        s1_qp = Signal(q_w)
        s1_vec = Signal(n)              # one-hot of s1_qp (while s1_valid)
        s1_head1 = Signal(ptr_w)        # the head pointer + 1
        entry = ent_r.data
        s1_acked = Signal(24)           # the QP's acknowledged PSN, read when it was picked
        s1_has = Signal()               # ... and whether it had one then
        since = Signal(24)
        m.d.comb += since.eq(s1_acked - entry.last_psn)
        covered = s1_has & ~since[23]
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
        m.d.comb += [
            out.scan.valid.eq(s1_done), out.scan_busy.eq(s1_valid),
            out.scan.payload.wr_id.eq(entry.wr_id), out.scan.payload.qp.eq(s1_qp),
            out.scan.payload.status.eq(s1_status), out.scan.payload.src.eq(entry.src),
            head_w.addr.eq(s1_qp), head_w.data.eq(s1_head1), head_w.en.eq(s1_done),
        ]
        done_vec = Signal(n)
        m.d.comb += done_vec.eq(Mux(s1_done, s1_vec, 0))
        # the completion empties the queue (unless a post refills it in this cycle)
        m.d.comb += tail_pick.addr.eq(s1_qp)
        emptied = Mux(s1_done & (tail_pick.data == s1_head1), s1_vec, 0)

        # ---- scan, first cycle: pick a dirty QP with an entry, read its head entry
        # round robin: the first of the QPs after the last one picked, else the first of all
        rr = m.submodules.pick = CplPick(n)
        chosen, pick_qp, pick = rr.chosen, rr.index, rr.pick
        m.d.comb += [rr.eligible.eq(dirty & nonempty & ~s1_vec),
                     rr.enable.eq(out.room & ~(s1_valid & out.bad_waiting))]
        m.d.comb += [
            head_pick.addr.eq(pick_qp),
            acks.scan_qp.eq(pick_qp),
            ent_r.addr.eq(entry_addr(pick_qp, head_pick.data)),
            ent_r.en.eq(pick),
        ]
        m.d.sync += [
            s1_valid.eq(pick),
            s1_qp.eq(pick_qp),
            # (the PSN and whether the QP has one, both as they are in the pick cycle: an
            # acknowledgement of the QP applied in that cycle, or a forget, is not seen here; the
            # acknowledgement marks the QP dirty again, so the QP is examined once more)
            s1_acked.eq(acks.scan_acked),
            s1_has.eq(acks.has.bit_select(pick_qp, 1)),
            s1_vec.eq(Mux(pick, chosen, 0)),
            s1_head1.eq(head_pick.data + 1),
        ]
        picked_vec = Mux(pick, chosen, 0)

        return self._elaborate_scan(m, acks, dirty, done_vec, emptied, ent_w, entry_addr, errored_d, full,
                                    head_post, n, nonempty, out, picked_vec, ptr_w, q_w, s1_done, s1_qp,
                                    s1_valid, tail_post, tail_w)

    def _elaborate_scan(self, m, acks, dirty, done_vec, emptied, ent_w, entry_addr, errored_d, full,
                        head_post, n, nonempty, out, picked_vec, ptr_w, q_w, s1_done, s1_qp, s1_valid,
                        tail_post, tail_w):
        """The posts (entries written at the tail), the per-QP bits and the scan's completion out."""
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
                                                   out.bad.ready)),
            out.bad.payload.wr_id.eq(p.wr_id), out.bad.payload.qp.eq(p.qp),
            out.bad.payload.status.eq(CplStatus.BAD_QP), out.bad.payload.src.eq(p.src),
            out.bad.valid.eq(self.post.valid & ~in_table),
        ]
        m.d.comb += [
            head_post.addr.eq(post_qp),
            tail_post.addr.eq(post_qp),
            acks.post_qp.eq(post_qp),
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
        m.d.comb += post_since.eq(acks.post_acked - p.last_psn)
        m.d.comb += acks.forget.eq(to_queue & (p.status == CplStatus.OK) &
                                   acks.has.bit_select(post_qp, 1) & ~post_since[23])

        # ---- per-QP bits
        m.d.sync += [
            dirty.eq((dirty & ~picked_vec) | post_vec | acks.moved | done_vec |
                     (self.errored & ~errored_d)),
            full.eq((full & ~done_vec) | fills),
            nonempty.eq((nonempty & ~emptied) | post_vec),
        ]
        m.d.comb += self.busy.eq((dirty & nonempty).any() | s1_valid | out.pending | acks.busy)
        return m
