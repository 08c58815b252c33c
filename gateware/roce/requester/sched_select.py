from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    SCHED_EVENT,
    SchedKind,
    check_num_qps,
    check_wr_depth,
)
from rocegen.gateware.roce.requester.sched_tree import first_one, kept

__all__ = ["SchedSelect"]


class SchedSelect(wiring.Component):
    """Select stage of the :class:`~rocegen.gateware.roce.requester.scheduler.Scheduler`: round robin
    over the QPs with something to send, one turn per cycle, and the slot address to read.

    Parameters
    ----------
    num_qps : int
        QPs, 1..256.
    depth : int
        Work requests each QP holds, a power of two 1..1024
        (:data:`~rocegen.gateware.roce.layouts.MAX_WR_DEPTH`).

    Ports
    -----
    cur, hi, tail : In(data.ArrayLayout(log2(depth) + 1, num_qps))
        The queue pointers (:class:`~rocegen.gateware.roce.requester.sched_queue.SchedQueue`).
    started, win_block, pushed : In(num_qps)
        The queue's flags, and the QP whose request is queued in this cycle.
    held, full : In(num_qps)
        As the scheduler's ports of these names.
    sched : In(stream.Signature(SCHED_EVENT, always_ready=True))
        A REWIND or RESET of a QP drops its turns in this stage and the next.
    turn_sel, turn_fin, turn_new, commit : In
        The issue stage's turn (one-hot QP), whether it ends or starts its request, and whether
        it commits in this cycle.
    b_sel : In(num_qps)
        One-hot QP of the turn in the build stage.
    stall : In(1)
        The issue stage keeps its turn, so the build stage's turn cannot move on and is dropped:
        the turns behind it (this stage's) are dropped too and the round robin goes back to the
        build stage's QP, so the dropped turns are given again in the same order.
    rd_addr : Out(max(1, log2(depth * num_qps)))
        Slot address of the QP selected in this cycle (its request at ``cur``, as if the issue
        stage commits).
    r_valid, r_q, r_sel, r_addr : Out
        The turn selected in the previous cycle (registers; ``r_sel`` one-hot, zero when
        ``r_valid`` is low) and its slot address.
    r_going, r_new, r_gone : Out(1)
        For that turn: its QP's request at ``cur`` has started, was never started, and the turn
        is void (an event of the QP, the issue stage kept its turn, or nothing left to send).

    Behaviour
    ---------
    Eligibility is registered from the registers of the previous cycle, as if the issue stage
    commits its turn: a QP has requests to send (or had one queued), is not held, its window is
    not known to be full, and its next request has started or ``full`` allows it to start. QPs
    with a turn in the read or build stage are left out, and so are those with an event or a
    turn the issue stage kept. The turn goes to the first eligible QP after the QP of the last
    turn (QP order, wrapping), found by a tree of 4-input nodes whose outputs synthesis keeps.
    A stall (``stall``) never costs a QP its place: the round robin restarts at the QP whose
    turn was dropped.
    Latency: the turn is registered (``r_*``) one cycle after its selection; ``rd_addr`` is
    combinational from registers.
    """

    def __init__(self, num_qps, depth):
        check_num_qps(num_qps)
        check_wr_depth(depth)
        self.num_qps, self.depth = num_qps, depth
        ptrs = data.ArrayLayout(depth.bit_length(), num_qps)
        abits = max(1, (num_qps * depth - 1).bit_length())
        super().__init__({
            "cur": In(ptrs), "hi": In(ptrs), "tail": In(ptrs),
            "started": In(num_qps), "win_block": In(num_qps), "pushed": In(num_qps),
            "held": In(num_qps), "full": In(num_qps),
            "sched": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "turn_sel": In(num_qps), "turn_fin": In(1), "turn_new": In(1), "commit": In(1),
            "b_sel": In(num_qps), "stall": In(1),
            "rd_addr": Out(abits),
            "r_valid": Out(1), "r_q": Out(range(num_qps)), "r_sel": Out(num_qps),
            "r_addr": Out(abits), "r_going": Out(1), "r_new": Out(1), "r_gone": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        dbits = self.depth.bit_length() - 1
        pw = dbits + 1
        qbits = (n - 1).bit_length()
        ev = self.sched
        ev_stale = Signal(n)        # bit q: a REWIND or RESET of QP q this cycle
        c_sel, c_fin, c_new, commit = self.turn_sel, self.turn_fin, self.turn_new, self.commit
        moved_r = Signal(n)         # a REWIND or RESET came, or the issue stage kept its turn
        avail_r = Signal(n)         # eligible but for the turns in flight and the round robin
        going_r = Signal(n)         # started (after the issue stage's commit)
        new_r = Signal(n)           # cur == hi (after the issue stage's commit)
        has_r = Signal(n)           # cur != tail (after the issue stage's commit; no queueing)
        cur_after = []              # cur as if the issue stage commits its turn
        for q in range(n):
            m.d.comb += ev_stale[q].eq(ev.valid & (ev.payload.qp == q) &
                                       (ev.payload.kind != SchedKind.ADVANCE))
            fin_q = c_sel[q] & c_fin
            cur_s = Signal(pw, name=f"cur_s{q}")
            cur_after.append(cur_s)
            hi_s = Signal(pw, name=f"hi_s{q}")
            m.d.comb += [cur_s.eq(self.cur[q] + fin_q),
                         hi_s.eq(self.hi[q] + (c_sel[q] & c_new))]
            going_s = Mux(c_sel[q], ~c_fin, self.started[q])
            has_s = kept(m, cur_s != self.tail[q], f"has_s{q}")
            m.d.sync += [
                moved_r[q].eq(ev_stale[q] | (c_sel[q] & ~commit)),
                avail_r[q].eq((has_s | kept(m, self.pushed[q], f"push_q{q}")) &
                              ~self.held[q] & ~self.win_block[q] &
                              (going_s | (cur_s != hi_s) | ~self.full[q]) &
                              ~ev_stale[q] & ~(c_sel[q] & ~commit)),
                going_r[q].eq(going_s),
                new_r[q].eq(cur_s == hi_s),
                has_r[q].eq(has_s),
            ]
        rr_hi = Signal(n)           # bit q: q comes after the QP of the last turn
        # the first eligible QP after the last turn's, else the first at all: the first one of
        # (elig & rr_hi, elig), each half padded so that the whole is a power of 4, found by a
        # tree of 4-input nodes
        total = 4                   # the tree takes 4^k values
        while total < 2 * n:
            total *= 4
        half = total // 2
        # (a QP whose turn is in the issue stage may be selected: its slot is read at cur as if
        # that turn commits, and the read stage drops the new turn if it did not, or if the QP
        # turned out to have nothing left to send)
        base = avail_r & ~self.r_sel & ~self.b_sel
        # each leaf carries the QP's slot, its one-hot and the round-robin mask it leaves
        leaves = []
        for k in range(total):
            q = k % half
            if q >= n:
                leaves.append((Const(0), Const(0, dbits + 2 * n)))
            else:
                e = base[q] & rr_hi[q] if k < half else base[q]
                leaves.append((kept(m, e, f"elig{'_hi' if k < half else ''}{q}"),
                               Cat(cur_after[q][:dbits], Const(1 << q, n),
                                   Const(((1 << n) - 1) & ~((2 << q) - 1), n))))
        found, pos, payload = first_one(m, leaves)
        sel = Signal(range(n))
        m.d.comb += sel.eq(pos[:qbits])
        sel_slot = payload[:dbits]
        grant = payload[dbits:dbits + n]
        sel_mask = payload[dbits + n:]
        m.d.comb += self.rd_addr.eq(Cat(sel_slot, sel[:qbits]) if dbits or qbits else 0)
        # (a REWIND or RESET of the QP in this cycle is caught by moved_r in the next)
        take = found & ~self.stall
        m.d.sync += [self.r_valid.eq(take), self.r_sel.eq(Mux(take, grant, 0)),
                     self.r_q.eq(sel), self.r_addr.eq(self.rd_addr)]
        from_b = Signal(n)          # bit q: q is the build stage's QP or comes after it
        m.d.comb += from_b.eq(~(self.b_sel - 1))
        with m.If(self.stall):
            m.d.sync += rr_hi.eq(from_b)
        with m.Elif(found):
            m.d.sync += rr_hi.eq(sel_mask)
        m.d.comb += [
            self.r_gone.eq(((moved_r | ev_stale | ~has_r) & self.r_sel).any() | self.stall),
            self.r_going.eq(going_r.bit_select(self.r_q, 1)),
            self.r_new.eq(new_r.bit_select(self.r_q, 1)),
        ]
        return m
