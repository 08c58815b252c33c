"""The RDMA READ requester's table of outstanding READs, per QP."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import INDEX_BITS, check_num_qps
from rocegen.gateware.roce.read_layouts import (
    MAX_RD_ATOMIC,
    READ_ENTRY,
    READ_ISSUE,
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

    :mod:`rocegen.sim.models.read_requester` is the reference model (its ``issue``, ``view``,
    ``advance`` and ``flush``).

    Parameters
    ----------
    num_qps : int
        QPs (1..256), QP index ``0 .. num_qps - 1``.
    max_rd_atomic : int
        READs a QP may have outstanding (1..16). Each QP has a power-of-two number of slots
        (at least ``max_rd_atomic``) in one entry memory of :data:`READ_ENTRY` (146 bits).

    Ports
    -----
    issue : In(stream.Signature(READ_ISSUE, always_ready=True))
        READ requests sent. ``new``: the READ is added behind the QP's others, unless the QP
        already has ``max_rd_atomic`` (or is outside the table): then it is discarded and
        ``overflow`` pulses. A reissue (``new`` 0) from a PSN after the READ's first records
        ``(first, psn - first)`` as the QP's restart; one from the first PSN changes nothing.
    lookup : In(ReadLookupSignature())
        ``valid``/``qp`` in cycle t (never in two cycles in a row); in cycle t+1, ``view``: the
        QP's state at the start of cycle t, after a ``flush`` of it taken in cycle t (``has``
        0 for a QP outside the table or without a READ). ``rs`` is the restart index when the
        restart recorded is of the head READ (its ``first``), else 0. In cycle t+1 the user
        says what the response did: ``advance`` (``cnt`` + 1) or ``retire`` (the head READ
        leaves, ``cnt`` back to 0), applied at the end of that cycle.
    flush : In(stream.Signature(8))
        A QP forgets its READs (it failed, or was set up again): ready in every cycle but those
        in which a lookup's ``advance``/``retire`` is applied (the cycle after a lookup).
    full : Out(num_qps)
        Bit ``q``: QP ``q`` has ``max_rd_atomic`` READs (registered: an add counts from the
        next cycle, a retire or flush as well).
    overflow : Out(1)
        Pulses for a new READ discarded.

    Behaviour
    ---------
    Order within a cycle: a flush, then the lookup, then the issue (an issue of cycle t is in
    the view of a lookup from cycle t+1; the ``advance``/``retire`` of cycle t counts for an
    issue of cycle t). Storage: the entries in a synchronous-read memory (block RAM) read at the
    looked-up QP's head; per QP the head pointer and ``cnt``, the tail pointer and the newest
    READ's last PSN, the restart, in distributed RAM (each written from one side only), the
    ``full`` and restart-valid bits in registers. Latency: the view one cycle after the lookup.
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
            "issue": In(stream.Signature(READ_ISSUE, always_ready=True)),
            "lookup": In(ReadLookupSignature()),
            "flush": In(stream.Signature(8)),
            "full": Out(num_qps),
            "overflow": Out(1),
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
        rsm = m.submodules.restarts = Memory(shape=rs_l, depth=n, init=[])
        ent_w, ent_r = ents.write_port(), ents.read_port()
        hd_w, tl_w, rs_w = heads.write_port(), tails.write_port(), rsm.write_port()
        hd_lk, hd_is = heads.read_port(domain="comb"), heads.read_port(domain="comb")
        tl_lk, tl_is, tl_fl = (tails.read_port(domain="comb") for _ in range(3))
        rs_lk = rsm.read_port(domain="comb")
        rs_valid, full = Signal(n), Signal(n)

        def slot(qp, ptr):
            return Cat(ptr[:lg], qp[:qw]) if lg else qp[:qw]

        def onehot(qp):
            return Cat(*(qp == k for k in range(n)))

        # ---- flush (taken in cycles without an update)
        lk, fl = self.lookup, self.flush
        l1_valid = Signal()
        fq = fl.payload
        fl_take = fl.valid & fl.ready & (fq < n)
        m.d.comb += [fl.ready.eq(~l1_valid), tl_fl.addr.eq(fq[:qw])]
        fl_vec = Mux(fl_take, onehot(fq), 0)

        # ---- lookup: the QP's state read in cycle t, its head entry from block RAM in t+1
        lq = lk.qp
        l1_qp, l1_head, l1_cnt = Signal(8), Signal(pw), Signal(INDEX_BITS)
        l1_has, l1_last, l1_rs, l1_rsv = Signal(), Signal(24), Signal(rs_l), Signal()
        gone = fl_take & (fq == lq)             # flushed in the cycle of its lookup
        m.d.comb += [hd_lk.addr.eq(lq[:qw]), tl_lk.addr.eq(lq[:qw]), rs_lk.addr.eq(lq[:qw]),
                     ent_r.addr.eq(slot(lq, hd_lk.data.ptr))]
        m.d.sync += [
            l1_valid.eq(lk.valid), l1_qp.eq(lq), l1_head.eq(hd_lk.data.ptr),
            l1_cnt.eq(hd_lk.data.cnt), l1_last.eq(tl_lk.data.last), l1_rs.eq(rs_lk.data),
            l1_has.eq((lq < n) & (tl_lk.data.ptr != hd_lk.data.ptr) & ~gone),
            l1_rsv.eq(rs_valid.bit_select(lq[:qw], 1) & ~gone),
        ]
        v, e = lk.view, ent_r.data
        m.d.comb += [v.has.eq(l1_has), v.entry.eq(e), v.cnt.eq(l1_cnt), v.tail_last.eq(l1_last),
                     v.rs.eq(Mux(l1_rsv & (l1_rs.first == e.first), l1_rs.idx, 0))]

        # ---- the update of the head (t+1), or a flush
        act = l1_valid & l1_has
        retire = act & lk.retire
        with m.If(act & (lk.advance | lk.retire)):
            m.d.comb += [hd_w.addr.eq(l1_qp[:qw]), hd_w.en.eq(1),
                         hd_w.data.ptr.eq(l1_head + retire),
                         hd_w.data.cnt.eq(Mux(retire, 0, l1_cnt + 1))]
        with m.Elif(fl_take):
            m.d.comb += [hd_w.addr.eq(fq[:qw]), hd_w.en.eq(1), hd_w.data.ptr.eq(tl_fl.data.ptr)]
        retire_vec = Mux(retire, onehot(l1_qp), 0)

        # ---- issue: add a new READ at the tail, or record a restart
        iss, iv = self.issue.payload, self.issue.valid
        iq = iss.qp
        m.d.comb += [hd_is.addr.eq(iq[:qw]), tl_is.addr.eq(iq[:qw])]
        count = Signal(pw)                      # READs of the QP after the flush and update
        m.d.comb += count.eq(Mux(fl_take & (fq == iq), 0, tl_is.data.ptr - hd_is.data.ptr -
                                 (retire & (l1_qp == iq))))
        add = Signal()
        m.d.comb += [add.eq(iv & iss.new & (iq < n) & (count < self.max_rd_atomic)),
                     self.overflow.eq(iv & iss.new & ~add)]
        m.d.comb += [
            ent_w.addr.eq(slot(iq, tl_is.data.ptr)), ent_w.en.eq(add),
            ent_w.data.wr_id.eq(iss.wr_id), ent_w.data.local_addr.eq(iss.local_addr),
            ent_w.data.length.eq(iss.length), ent_w.data.first.eq(iss.first),
            ent_w.data.last_idx.eq(last_index(m, iss.length, iss.pmtu_log2)),
            ent_w.data.pmtu_log2.eq(iss.pmtu_log2),
            tl_w.addr.eq(iq[:qw]), tl_w.en.eq(add), tl_w.data.ptr.eq(tl_is.data.ptr + 1),
            tl_w.data.last.eq(iss.first + ent_w.data.last_idx),
        ]
        fill_vec = Mux(add & (count + 1 == self.max_rd_atomic), onehot(iq), 0)
        restart = iv & ~iss.new & (iq < n) & (iss.psn != iss.first)
        m.d.comb += [rs_w.addr.eq(iq[:qw]), rs_w.en.eq(restart), rs_w.data.first.eq(iss.first),
                     rs_w.data.idx.eq(iss.psn - iss.first)]
        m.d.sync += [
            full.eq((full & ~retire_vec & ~fl_vec) | fill_vec),
            rs_valid.eq((rs_valid & ~fl_vec) | Mux(restart, onehot(iq), 0)),
        ]
        m.d.comb += self.full.eq(full)
        return m
