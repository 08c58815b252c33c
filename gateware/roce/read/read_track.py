"""The RDMA READ requester's table of outstanding READs, per QP."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import INDEX_BITS, check_num_qps
from rocegen.gateware.roce.read.read_layouts import (
    MAX_RD_ATOMIC,
    READ_ENTRY,
    READ_HOLE,
    READ_HOLES,
    READ_ISSUE,
    READ_LIMIT,
    ReadLookupSignature,
    check_max_rd,
)

__all__ = ["ReadTrack", "last_index"]


def last_index(m, length, pmtu_log2):
    """The index of a READ's last PSN (PSNs it spans - 1) for ``length`` bytes at path MTU
    2^``pmtu_log2`` (8..12, anything else taken as 256 bytes, as the segmenter does)."""
    idx = Signal(INDEX_BITS)
    lm1 = Signal(31)
    m.d.comb += lm1.eq(length - 1)
    with m.Switch(pmtu_log2):
        for log2 in range(9, 13):
            with m.Case(log2):
                m.d.comb += idx.eq(Mux(length == 0, 0, lm1 >> log2))
        with m.Default():
            m.d.comb += idx.eq(Mux(length == 0, 0, lm1 >> 8))
    return idx


class ReadTrack(wiring.Component):
    """Per-QP table of the READs a QP has outstanding, oldest first: added when issued, looked
    up by the placement of each response, advanced and retired by it.

    :mod:`rocegen.sim.models.read.read_requester` is the reference model (its ``issue``, ``view``,
    ``advance``, ``flush`` and ``set_limit``).

    Parameters
    ----------
    num_qps : int
        QPs (1..256), QP index ``0 .. num_qps - 1``.
    max_rd_atomic : int
        READs a QP may have outstanding at most (1..16). Each QP has a power-of-two number of
        slots (at least ``max_rd_atomic``) in one entry memory of :data:`READ_ENTRY` (213 bits).

    Ports
    -----
    limit : In(stream.Signature(READ_LIMIT, always_ready=True))
        QP ``qp``'s limit from now on: the READs it may have outstanding, ``limit`` clipped
        into 1..``max_rd_atomic`` (0 counts as 1, more than ``max_rd_atomic`` as
        ``max_rd_atomic``); a QP outside the table: ignored. Every QP's limit is
        ``max_rd_atomic`` as configured (a memory's initial contents, as the table's other
        memories not cleared by a reset of the domain); a flush keeps it. A limit lowered below
        the READs a QP has leaves them outstanding (the QP is full until fewer remain).
    issue : In(stream.Signature(READ_ISSUE, always_ready=True))
        READ requests sent. ``new``: the READ is added behind the QP's others, unless the QP
        already has its limit of READs (or is outside the table): then it is discarded and
        ``overflow`` pulses. A reissue (``new`` 0) from a PSN after the READ's first records
        ``(first, psn - first)`` as the QP's restart; one from the first PSN changes nothing.
    lookup : In(ReadLookupSignature())
        ``valid``/``qp`` in cycle t (never in two cycles in a row); in cycle t+1, ``view``: the
        QP's state at the start of cycle t, after a ``flush`` of it taken in cycle t (``has``
        0 for a QP outside the table or without a READ). ``rs`` (``rs2``) is the restart index
        when the restart recorded is of the head READ (the second READ), else 0. With a hole
        open (``open``), the view has the hole and the front READ as the second (``has2`` 0
        when the front is past the newest READ), and ``fdist``, the READs before the front;
        without one, the second READ is the one after the head. In cycle t+1 the user says what
        the response did: ``advance`` (``cnt`` + 1), ``retire`` (the head READ leaves, ``cnt``
        back to 0), ``close`` (the ``fdist`` READs before the front leave, the front READ is
        the head with the front's count, the hole is gone) or ``hole_we`` (the hole is
        ``hole``, open; its front READ ``fstep`` after the front before, or after the head when
        none was open), applied at the end of that cycle.
    flush : In(stream.Signature(8))
        A QP forgets its READs (it failed, or was set up again): ready in every cycle but those
        in which a lookup's ``advance``/``retire`` is applied (the cycle after a lookup).
    full : Out(num_qps)
        Bit ``q``: QP ``q`` has its limit of READs or more (registered: an add counts from the
        next cycle, a retire, flush or limit as well).
    overflow : Out(1)
        Pulses for a new READ discarded.
    busy : Out(num_qps)
        Bit ``q``: QP ``q`` has a READ outstanding (registered, as ``full``).

    Behaviour
    ---------
    Order within a cycle: a flush, then the lookup, then the limit, then the issue (an issue of
    cycle t is in the view of a lookup from cycle t+1; the ``advance``/``retire`` and the
    limit of cycle t count for an issue of cycle t). Storage: the entries in a
    synchronous-read memory (block RAM) read at the looked-up QP's head; per QP the head
    pointer and ``cnt``, the tail pointer and the newest READ's last PSN, the restart, the hole
    and its front pointer, in
    distributed RAM (each written from one side only), with copies of the two pointers (for
    the issue, the flush, a retire's and a limit's count) and the limits; the ``full``,
    restart-valid and hole-open bits in registers; the second entry through a second read
    port of the entry memory. Latency: the view one cycle after the lookup.
    Throughput: one issue per cycle, one lookup every other cycle, flushes in between.
    """

    def __init__(self, num_qps, max_rd_atomic=MAX_RD_ATOMIC):
        check_num_qps(num_qps)
        check_max_rd(max_rd_atomic)
        self.num_qps = num_qps
        self.max_rd_atomic = max_rd_atomic
        #: Slots per QP: a power of two, at least ``max_rd_atomic``.
        self.slots = 1 << (max_rd_atomic - 1).bit_length()
        super().__init__({
            "limit": In(stream.Signature(READ_LIMIT, always_ready=True)),
            "issue": In(stream.Signature(READ_ISSUE, always_ready=True)),
            "lookup": In(ReadLookupSignature()),
            "flush": In(stream.Signature(8)),
            "full": Out(num_qps),
            "overflow": Out(1),
            "busy": Out(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n, lg = self.num_qps, (self.slots - 1).bit_length()
        pw, qw = lg + 1, max(1, (n - 1).bit_length())
        head_l = data.StructLayout({"ptr": pw, "cnt": INDEX_BITS})
        tail_l = data.StructLayout({"ptr": pw, "last": 24})
        rs_l = data.StructLayout({"first": 24, "idx": INDEX_BITS})
        ents = m.submodules.entries = Memory(shape=READ_ENTRY, depth=n * self.slots, init=[])
        heads = m.submodules.heads = Memory(shape=head_l, depth=n, init=[])
        tails = m.submodules.tails = Memory(shape=tail_l, depth=n, init=[])
        # copies of the pointers alone, for the reads that need no more
        hptrs = m.submodules.head_ptrs = Memory(shape=pw, depth=n, init=[])
        tptrs = m.submodules.tail_ptrs = Memory(shape=pw, depth=n, init=[])
        rsm = m.submodules.restarts = Memory(shape=rs_l, depth=n, init=[])
        qb = (READ_HOLES - 1).bit_length()
        hole_l = data.StructLayout({"hole": READ_HOLE, "fptr": pw, "qrd": qb, "qn": qb + 1})
        queue_l = data.StructLayout({"ptr": pw, "idx": INDEX_BITS, "psn": 24})
        holes = m.submodules.holes = Memory(shape=hole_l, depth=n, init=[])
        queue = m.submodules.hole_queue = Memory(shape=queue_l, depth=n * READ_HOLES, init=[])
        ent_w, ent_r = ents.write_port(), ents.read_port()
        ent_r2, ent_r3 = ents.read_port(), ents.read_port()
        ho_w, ho_lk = holes.write_port(), holes.read_port(domain="comb")
        qu_w, qu_lk = queue.write_port(), queue.read_port(domain="comb")
        hd_w, tl_w, rs_w = heads.write_port(), tails.write_port(), rsm.write_port()
        hp_w, tp_w = hptrs.write_port(), tptrs.write_port()
        hd_lk, tl_lk = heads.read_port(domain="comb"), tails.read_port(domain="comb")
        hp_is, tp_is, tp_fl = (hptrs.read_port(domain="comb"), tptrs.read_port(domain="comb"),
                               tptrs.read_port(domain="comb"))
        rs_lk = rsm.read_port(domain="comb")
        m.d.comb += [hp_w.addr.eq(hd_w.addr), hp_w.en.eq(hd_w.en), hp_w.data.eq(hd_w.data.ptr),
                     tp_w.addr.eq(tl_w.addr), tp_w.en.eq(tl_w.en), tp_w.data.eq(tl_w.data.ptr)]
        rs_valid, opened = Signal(n), Signal(n)

        def slot(qp, ptr):
            return Cat(ptr[:lg], qp[:qw]) if lg else qp[:qw]

        def onehot(qp):
            return Cat(*(qp == k for k in range(n)))

        # ---- flush (taken in cycles without an update)
        fl = self.flush
        l1_valid = Signal()
        fq = fl.payload
        fl_take = fl.valid & fl.ready & (fq < n)
        m.d.comb += [fl.ready.eq(~l1_valid), tp_fl.addr.eq(fq[:qw])]
        fl_vec = Mux(fl_take, onehot(fq), 0)

        p = SimpleNamespace(
            ent_r=ent_r, ent_r2=ent_r2, ent_r3=ent_r3, ho_lk=ho_lk, ho_w=ho_w, qu_lk=qu_lk,
            qu_w=qu_w, hd_lk=hd_lk, hd_w=hd_w, tl_lk=tl_lk, rs_lk=rs_lk, tp_fl=tp_fl,
            hole_l=hole_l, queue_l=queue_l, rs_l=rs_l, rs_valid=rs_valid, opened=opened,
            slot=slot, onehot=onehot, l1_valid=l1_valid, fl_take=fl_take, fq=fq, fl_vec=fl_vec,
            pw=pw, qw=qw, qb=qb)
        self._lookup(m, p)
        retire, close, nret = self._update(m, p)
        l1_qp, l1_head = p.l1_qp, p.l1_head

        # ---- issue: add a new READ at the tail, or record a restart
        iss, iv = self.issue.payload, self.issue.valid
        iq = iss.qp
        m.d.comb += [hp_is.addr.eq(iq[:qw]), tp_is.addr.eq(iq[:qw])]
        count = Signal(pw)                      # READs of the QP after the flush and update
        m.d.comb += count.eq(Mux(fl_take & (fq == iq), 0, tp_is.data - hp_is.data -
                                 Mux(l1_qp == iq, nret, 0)))
        add = Signal()
        room = self._limits(m, fl_take, fq, retire | close, nret, l1_qp, l1_head, iq, count, add)
        m.d.comb += [add.eq(iv & iss.new & (iq < n) & room),
                     self.overflow.eq(iv & iss.new & ~add)]
        m.d.comb += [
            ent_w.addr.eq(slot(iq, tp_is.data)), ent_w.en.eq(add),
            ent_w.data.wr_id.eq(iss.wr_id), ent_w.data.local_addr.eq(iss.local_addr),
            ent_w.data.length.eq(iss.length), ent_w.data.first.eq(iss.first),
            ent_w.data.last_idx.eq(last_index(m, iss.length, iss.pmtu_log2)),
            ent_w.data.pmtu_log2.eq(iss.pmtu_log2), ent_w.data.va.eq(iss.va),
            ent_w.data.atomic.eq(iss.atomic), ent_w.data.gen.eq(iss.gen),
            tl_w.addr.eq(iq[:qw]), tl_w.en.eq(add), tl_w.data.ptr.eq(tp_is.data + 1),
            tl_w.data.last.eq(iss.first + ent_w.data.last_idx),
        ]
        restart = iv & ~iss.new & (iq < n) & (iss.psn != iss.first)
        m.d.comb += [rs_w.addr.eq(iq[:qw]), rs_w.en.eq(restart), rs_w.data.first.eq(iss.first),
                     rs_w.data.idx.eq(iss.psn - iss.first)]
        m.d.sync += rs_valid.eq((rs_valid & ~fl_vec) | Mux(restart, onehot(iq), 0))
        return m

    def _lookup(self, m, p):
        """The lookup: the QP's state read in cycle t; its head entry, the second (the front
        READ with holes open, else the one after the head) and the third (after the front) from
        block RAM in t+1, as the view. Leaves the registered state in ``p``."""
        n, qw, pw, lk = self.num_qps, p.qw, p.pw, self.lookup
        fl_take, fq, slot = p.fl_take, p.fq, p.slot
        hd_lk, tl_lk, rs_lk, ho_lk, qu_lk = p.hd_lk, p.tl_lk, p.rs_lk, p.ho_lk, p.qu_lk
        ent_r, ent_r2, ent_r3 = p.ent_r, p.ent_r2, p.ent_r3
        rs_valid, opened, l1_valid = p.rs_valid, p.opened, p.l1_valid
        rs_l, hole_l, queue_l = p.rs_l, p.hole_l, p.queue_l
        lq = lk.qp
        l1_qp, l1_head, l1_cnt = Signal(8), Signal(pw), Signal(INDEX_BITS)
        l1_has, l1_last, l1_rs, l1_rsv = Signal(), Signal(24), Signal(rs_l), Signal()
        l1_open, l1_hole, l1_has2, l1_has3 = Signal(), Signal(hole_l), Signal(), Signal()
        l1_nxt = Signal(queue_l)
        gone = fl_take & (fq == lq)             # flushed in the cycle of its lookup
        is_open = opened.bit_select(lq[:qw], 1)
        hl, tl = ho_lk.data, tl_lk.data.ptr
        ptr2 = Signal(pw)
        m.d.comb += [hd_lk.addr.eq(lq[:qw]), tl_lk.addr.eq(lq[:qw]), rs_lk.addr.eq(lq[:qw]),
                     ho_lk.addr.eq(lq[:qw]), qu_lk.addr.eq(Cat(hl.qrd, lq[:qw])),
                     ptr2.eq(Mux(is_open, hl.fptr, hd_lk.data.ptr + 1)),
                     ent_r.addr.eq(slot(lq, hd_lk.data.ptr)), ent_r2.addr.eq(slot(lq, ptr2)),
                     ent_r3.addr.eq(slot(lq, hl.fptr + 1))]
        live = (lq < n) & ~gone
        has = live & (tl != hd_lk.data.ptr)
        m.d.sync += [
            l1_valid.eq(lk.valid), l1_qp.eq(lq), l1_head.eq(hd_lk.data.ptr),
            l1_cnt.eq(hd_lk.data.cnt), l1_last.eq(tl_lk.data.last), l1_rs.eq(rs_lk.data),
            l1_has.eq(has), l1_rsv.eq(rs_valid.bit_select(lq[:qw], 1) & ~gone),
            l1_open.eq(live & is_open), l1_hole.eq(hl), l1_nxt.eq(qu_lk.data),
            l1_has2.eq(has & (ptr2 != tl)),
            l1_has3.eq(has & is_open & (hl.fptr != tl) & (hl.fptr + 1 != tl)),
        ]
        v, e, e2 = lk.view, ent_r.data, ent_r2.data
        m.d.comb += [v.has.eq(l1_has), v.entry.eq(e), v.cnt.eq(l1_cnt), v.tail_last.eq(l1_last),
                     v.rs.eq(Mux(l1_rsv & (l1_rs.first == e.first), l1_rs.idx, 0)),
                     v.open.eq(l1_open), v.hole.eq(l1_hole.hole), v.has2.eq(l1_has2),
                     v.entry2.eq(e2), v.rs2.eq(Mux(l1_rsv & (l1_rs.first == e2.first), l1_rs.idx, 0)),
                     v.fdist.eq(Mux(l1_open, (l1_hole.fptr - l1_head)[:pw], 0)),
                     v.has3.eq(l1_has3), v.entry3.eq(ent_r3.data),
                     v.qn.eq(Mux(l1_open, l1_hole.qn, 0)), v.nxt.idx.eq(l1_nxt.idx),
                     v.nxt.psn.eq(l1_nxt.psn), v.nxt.dist.eq((l1_nxt.ptr - l1_head)[:pw])]

        p.l1_qp, p.l1_head, p.l1_cnt, p.l1_has = l1_qp, l1_head, l1_cnt, l1_has
        p.l1_open, p.l1_hole, p.l1_nxt = l1_open, l1_hole, l1_nxt

    def _update(self, m, p):
        """The update of the head and the holes in t+1 (or a flush). Returns the retire, the
        close and the READs leaving the QP's table in this cycle."""
        lk, pw, qw, qb, onehot = self.lookup, p.pw, p.qw, p.qb, p.onehot
        hd_w, ho_w, qu_w = p.hd_w, p.ho_w, p.qu_w
        l1_valid, l1_qp, l1_head, l1_cnt, l1_has = p.l1_valid, p.l1_qp, p.l1_head, p.l1_cnt, p.l1_has
        l1_open, l1_hole, l1_nxt = p.l1_open, p.l1_hole, p.l1_nxt
        fl_take, fq, fl_vec, tp_fl, opened = p.fl_take, p.fq, p.fl_vec, p.tp_fl, p.opened
        act = l1_valid & l1_has
        retire = act & lk.retire
        close = act & l1_open & lk.close
        queued = l1_hole.qn != 0                # a hole waits: it is the current one next
        nret = Signal(pw)                       # READs leaving the QP's table
        m.d.comb += nret.eq(Mux(close, Mux(queued, l1_nxt.ptr, l1_hole.fptr) - l1_head, retire))
        with m.If(close):
            m.d.comb += [hd_w.addr.eq(l1_qp[:qw]), hd_w.en.eq(1),
                         hd_w.data.ptr.eq(Mux(queued, l1_nxt.ptr, l1_hole.fptr)),
                         hd_w.data.cnt.eq(Mux(queued, l1_nxt.idx, l1_hole.hole.fcnt))]
        with m.Elif(act & (lk.advance | lk.retire)):
            m.d.comb += [hd_w.addr.eq(l1_qp[:qw]), hd_w.en.eq(1),
                         hd_w.data.ptr.eq(l1_head + retire),
                         hd_w.data.cnt.eq(Mux(retire, 0, l1_cnt + 1))]
        with m.Elif(fl_take):
            m.d.comb += [hd_w.addr.eq(fq[:qw]), hd_w.en.eq(1), hd_w.data.ptr.eq(tp_fl.data)]
        hole_we = act & lk.hole_we
        pop, push = close & queued, act & lk.push
        qn = Mux(l1_open, l1_hole.qn, 0)
        m.d.comb += [
            ho_w.addr.eq(l1_qp[:qw]), ho_w.en.eq(hole_we), ho_w.data.hole.eq(lk.hole),
            ho_w.data.fptr.eq(Mux(l1_open, l1_hole.fptr, l1_head) + lk.fstep),
            ho_w.data.qrd.eq(l1_hole.qrd + pop), ho_w.data.qn.eq(qn + push - pop),
            qu_w.addr.eq(Cat((l1_hole.qrd + qn)[:qb], l1_qp[:qw])), qu_w.en.eq(push),
            qu_w.data.ptr.eq(l1_hole.fptr), qu_w.data.idx.eq(l1_hole.hole.fcnt),
            qu_w.data.psn.eq(lk.push_psn),
        ]
        m.d.sync += opened.eq((opened & ~fl_vec & ~Mux(close, onehot(l1_qp), 0)) |
                              Mux(hole_we, onehot(l1_qp), 0))

        return retire, close, nret

    def _limits(self, m, fl_take, fq, retire, nret, l1_qp, l1_head, iq, count, add):
        """The per-QP limits and the ``full`` bits. Returns whether the QP ``iq`` has room for
        a new READ (``count``: its READs after this cycle's flush and retire); ``retire``: READs
        of QP ``l1_qp`` leave in this cycle, ``nret`` of them; ``add``: it is added. Every QP an
        event of the cycle touches (flush or retire, limit, add) gets its
        ``full`` bit anew from its count and limit after all of them."""
        n, mx = self.num_qps, self.max_rd_atomic
        qw = max(1, (n - 1).bit_length())
        pw = len(count)
        lims = m.submodules.limits = Memory(shape=range(mx + 1), depth=n, init=[mx] * n)
        lm_w = lims.write_port()
        lm_is, lm_hd = lims.read_port(domain="comb"), lims.read_port(domain="comb")
        tp_rt = m.submodules.tail_ptrs.read_port(domain="comb")
        hp_lm = m.submodules.head_ptrs.read_port(domain="comb")
        tp_lm = m.submodules.tail_ptrs.read_port(domain="comb")

        li = self.limit
        lq, lv = li.payload.qp, li.payload.limit
        lim_take = li.valid & (lq < n)
        new_lim = Signal(range(mx + 1))
        # a flush and a retire never fall in one cycle (a flush waits while an update is due):
        # one event of QP hq
        hq = Signal(8)
        m.d.comb += [hq.eq(Mux(fl_take, fq, l1_qp)),
                     new_lim.eq(Mux(lv == 0, 1, Mux(lv > mx, mx, lv))),
                     lm_w.addr.eq(lq[:qw]), lm_w.en.eq(lim_take), lm_w.data.eq(new_lim),
                     lm_is.addr.eq(iq[:qw]), lm_hd.addr.eq(hq[:qw]), tp_rt.addr.eq(l1_qp[:qw]),
                     hp_lm.addr.eq(lq[:qw]), tp_lm.addr.eq(lq[:qw])]

        def limit_after(q, stored):
            return Mux(lim_take & (lq == q), new_lim, stored)

        def count_after(q, base):
            """READs of QP ``q`` after the cycle (``base``: at its start)."""
            c = Signal(pw)
            m.d.comb += c.eq(Mux(fl_take & (fq == q), 0, base - Mux(l1_qp == q, nret, 0)) +
                             (add & (iq == q)))
            return c

        base_rt, base_lm = Signal(pw), Signal(pw)
        m.d.comb += [base_rt.eq(tp_rt.data - l1_head), base_lm.eq(tp_lm.data - hp_lm.data)]
        iq_limit = limit_after(iq, lm_is.data)
        full = Signal(n)
        m.d.comb += self.full.eq(full)
        hit, sets = 0, 0
        for valid, q, nf in (
                (fl_take | retire, hq, count_after(hq, base_rt) >= limit_after(hq, lm_hd.data)),
                (lim_take, lq, count_after(lq, base_lm) >= new_lim),
                (add, iq, count + 1 >= iq_limit)):
            vec = Mux(valid, Cat(*(q == k for k in range(n))), 0)
            hit, sets = hit | vec, sets | Mux(nf, vec, 0)
        m.d.sync += full.eq((full & ~hit) | sets)
        # a QP is busy from the add of a READ to the retire or flush that leaves it none
        busy = Signal(n)
        m.d.comb += self.busy.eq(busy)
        ev = fl_take | retire
        hq_vec = Mux(ev, Cat(*(hq == k for k in range(n))), 0)
        left = count_after(hq, base_rt)
        m.d.sync += busy.eq((busy & ~hq_vec) | Mux(left != 0, hq_vec, 0) |
                            Mux(add, Cat(*(iq == k for k in range(n))), 0))
        return count < iq_limit
