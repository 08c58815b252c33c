"""The responder's READ queues: the RDMA READs it has accepted, per QP, handed to the response
generator in turns."""

from amaranth.hdl import Array, Cat, Const, Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import ATOMIC_WORK, check_num_qps
from rocegen.gateware.roce.requester.sched_tree import first_one
from rocegen.gateware.roce.responder.resp_layouts import (
    READ_PROGRESS,
    READ_RETURN,
    READ_ROUTE,
    READ_TURN,
    RESP_READ,
    RESP_READ_JOB,
)

__all__ = ["RespReadQueue", "check_rd_depth"]


def check_rd_depth(rd_depth):
    """``rd_depth`` if it is a READ queue depth the blocks take (a power of two from 16 to
    1024: at least the 16 READs a ConnectX requester keeps outstanding); else ``TypeError`` or
    ``ValueError``, naming the parameter."""
    if not isinstance(rd_depth, int) or isinstance(rd_depth, bool):
        raise TypeError(f"rd_depth must be an integer number of READs, not {rd_depth!r}")
    if not 16 <= rd_depth <= 1024 or rd_depth & (rd_depth - 1):
        raise ValueError(f"rd_depth must be a power of two from 16 to 1024 READs, not {rd_depth}")
    return rd_depth


class RespReadQueue(wiring.Component):
    """A queue of ``rd_depth`` READs per QP, in one memory; the oldest READ of each QP that has
    one is handed out in turns, round robin over the QPs.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    rd_depth : int
        READs each QP can have queued (:func:`check_rd_depth`; default 16).
    atomics : bool
        Atomics share the queues (``push.atomic``, ``turn.atomic``: their operation and
        operands in a memory of their own beside the READs'); default False (``turn.atomic``
        0, nothing stored).

    Ports
    -----
    push : In(stream.Signature(RESP_READ_JOB, always_ready=True))
        A READ to queue (its QP's queue must have room: :attr:`full` says; a push naming a QP
        outside the table, or a full queue, is ignored). Where the QP's responses go
        (``route``) is kept per QP, the newest push's.
    full_qp, full : In(range(num_qps)), Out(1)
        One cycle after ``full_qp``: that QP's queue holds ``rd_depth`` READs (a push in the
        cycle of the read is seen by the next read).
    flush : In(stream.Signature(8, always_ready=True))
        A QP set up again: its READs are dropped, those pushed in the cycle the flush comes
        included (it takes effect in the next cycle). A turn of the QP being offered is
        withdrawn; one taken is cancelled (``cancel``).
    turn : Out(stream.Signature(READ_TURN))
        The oldest READ of a QP, as far as its responses have gone (``prog``: from the start
        after it is queued), with the AETH MSN of its responses, its PMTU code and its QP's
        route. One turn at a time: the next is picked once the last one is returned.
    ret : In(stream.Signature(READ_RETURN, always_ready=True))
        The end of the turn taken: ``done``, the READ leaves the queue; else its progress is
        kept for its QP's next turn.
    cancel : Out(1)
        High from the cycle after a flush of the QP of the turn taken until that turn is
        returned (the return then changes nothing).
    level_qp, level : In(range(num_qps)), Out(range(rd_depth + 1))
        The READs queued for ``level_qp`` (pushed, their last response not yet made:
        combinational, from the pointers).
    hold : In(num_qps)
        Bit k: QP k gets no turn (it is not picked; a turn already picked goes on).

    Behaviour
    ---------
    * Storage: the READs in a memory of ``num_qps * rd_depth`` entries (116 bits; block RAM,
      one write port for ``push``, one registered read port for the turns; with ``atomics``
      their operations beside them, 130 bits); the routes and
      the progress of each QP's oldest READ in memories of ``num_qps`` entries; the head and
      tail pointers of each QP, and whether its oldest READ starts afresh, in registers.
    * Turns: a QP with READs queued is picked in round robin (the first after the last one
      picked, found by a tree of 4-input nodes), its memories read (one cycle), the turn
      offered from the next cycle until taken, then returned (in the cycle it is taken, or
      later): the next pick is in the cycle after the return (a turn every two cycles at
      best).
    * Latency: a READ pushed into empty queues in cycle t is offered in cycle t + 2.
    * Flush timing: a flush that comes in cycle t has emptied the QP's queue by cycle t + 2,
      and from t + 2 on the generator makes no packet of the READs it dropped (a turn of the
      QP taken up to cycle t may still make packets in cycle t + 1, then it is cancelled).
    """

    def __init__(self, num_qps, rd_depth=16, *, atomics=False):
        check_num_qps(num_qps)
        check_rd_depth(rd_depth)
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        self.num_qps, self.rd_depth, self.atomics = num_qps, rd_depth, atomics
        super().__init__({
            "push": In(stream.Signature(RESP_READ_JOB, always_ready=True)),
            "full_qp": In(range(num_qps)), "full": Out(1),
            "flush": In(stream.Signature(unsigned(8), always_ready=True)),
            "turn": Out(stream.Signature(READ_TURN)),
            "ret": In(stream.Signature(READ_RETURN, always_ready=True)),
            "cancel": Out(1),
            "level_qp": In(range(num_qps)), "level": Out(range(rd_depth + 1)),
            "hold": In(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n, D = self.num_qps, self.rd_depth
        P = D.bit_length()                       # pointer bits: one more than a slot index
        qb = max(1, (n - 1).bit_length())
        jobs = m.submodules.jobs = Memory(shape=RESP_READ, depth=n * D, init=[])
        routes = m.submodules.routes = Memory(shape=READ_ROUTE, depth=n, init=[])
        progs = m.submodules.progress = Memory(shape=READ_PROGRESS, depth=n, init=[])
        j_w, j_r = jobs.write_port(), jobs.read_port()
        r_w, r_r = routes.write_port(), routes.read_port()
        p_w, p_r = progs.write_port(), progs.read_port()
        head = Array(Signal(P, name=f"head{k}") for k in range(n))
        tail = Array(Signal(P, name=f"tail{k}") for k in range(n))
        fresh = Signal(n, init=(1 << n) - 1)     # the oldest READ starts afresh

        def slot(qp, ptr):
            return Cat(ptr[:P - 1], qp[:qb])

        # ---- push: at the tail; the route kept per QP
        pu = self.push.payload
        pq = pu.qp[:qb] if n > 1 else 0
        count_pu = (tail[pq] - head[pq])[:P]
        push = self.push.valid & (pu.qp < n) & (count_pu != D)
        m.d.comb += [j_w.addr.eq(slot(pu.qp, tail[pq])), j_w.data.eq(pu.read), j_w.en.eq(push),
                     r_w.addr.eq(pu.qp), r_w.data.eq(pu.route), r_w.en.eq(push)]
        with m.If(push):
            m.d.sync += tail[pq].eq(tail[pq] + 1)
        fq = self.full_qp[:qb] if n > 1 else 0
        m.d.sync += self.full.eq((tail[fq] - head[fq])[:P] == D)
        lq = self.level_qp[:qb] if n > 1 else 0
        m.d.comb += self.level.eq((tail[lq] - head[lq])[:P])

        # ---- flush: in the cycle after it comes
        fl_v, fl_q = Signal(), Signal(8)
        m.d.sync += [fl_v.eq(self.flush.valid & (self.flush.payload < n)),
                     fl_q.eq(self.flush.payload)]

        # ---- turns: pick (memories read), offer, out until returned
        pending = Signal(n)
        m.d.comb += pending.eq(Cat(*(head[k] != tail[k] for k in range(n))) & ~self.hold)
        picking, offering, out = Signal(init=1), Signal(), Signal()
        q = Signal(8)
        qi = q[:qb] if n > 1 else 0
        hit = fl_v & (fl_q == q)                 # the flush names the QP of the turn
        # the first QP with READs after the last one picked (``above``: the QPs after it), else
        # the first: a tree of 4-input nodes over both
        above = Signal(n, init=((1 << n) - 1) & ~1)
        leaves = [(pending[k] & above[k], Const(k, qb)) for k in range(n)] + \
            [(pending[k], Const(k, qb)) for k in range(n)]
        size = 1
        while size < len(leaves):
            size *= 4
        leaves += [(Const(0), Const(0, qb))] * (size - len(leaves))
        found, _, pick = first_one(m, leaves, "rd_pick")
        go = picking & found & ~fl_v             # (a flush first: it may empty the QP picked)
        pi = pick if n > 1 else 0
        m.d.comb += [j_r.addr.eq(slot(pick, head[pi])), r_r.addr.eq(pick), p_r.addr.eq(pick),
                     j_r.en.eq(go), r_r.en.eq(go), p_r.en.eq(go)]
        with m.If(go):
            m.d.sync += [q.eq(pick), picking.eq(0), offering.eq(1),
                         above.eq(Cat(*(pick < k for k in range(n))))]

        job, t = RESP_READ(j_r.data), self.turn.payload
        if self.atomics:
            works = m.submodules.works = Memory(shape=ATOMIC_WORK, depth=n * D, init=[])
            a_w, a_r = works.write_port(), works.read_port()
            m.d.comb += [a_w.addr.eq(j_w.addr), a_w.data.eq(pu.atomic), a_w.en.eq(push),
                         a_r.addr.eq(j_r.addr), a_r.en.eq(go), t.atomic.eq(a_r.data)]
        with m.If(fresh.bit_select(qi, 1)):
            m.d.comb += [t.prog.psn.eq(job.psn), t.prog.va.eq(job.va),
                         t.prog.left.eq(job.length), t.prog.started.eq(0)]
        with m.Else():
            m.d.comb += t.prog.eq(p_r.data)
        m.d.comb += [t.qp.eq(q), t.msn.eq(job.msn), t.pmtu_log2.eq(job.pmtu_log2),
                     t.route.eq(r_r.data), self.turn.valid.eq(offering & ~hit)]
        taken = self.turn.valid & self.turn.ready
        with m.If(offering & hit):
            m.d.sync += [offering.eq(0), picking.eq(1)]
        with m.Elif(taken):
            m.d.sync += [offering.eq(0), out.eq(1)]

        # ---- the return: the READ leaves, or its progress is kept (unless cancelled)
        # (returned in the cycle it is taken, or later: ``out``)
        cancelled = Signal()
        m.d.comb += self.cancel.eq(cancelled)
        with m.If(out & hit):
            m.d.sync += cancelled.eq(1)
        r = self.ret.payload
        rq = r.qp[:qb] if n > 1 else 0
        returned = self.ret.valid & (out | taken)
        keep = returned & ~cancelled & ~hit
        m.d.comb += [p_w.addr.eq(r.qp), p_w.data.eq(r.prog), p_w.en.eq(keep & ~r.done)]
        with m.If(returned):
            m.d.sync += [out.eq(0), picking.eq(1), cancelled.eq(0)]
        with m.If(keep):
            m.d.sync += fresh.bit_select(rq, 1).eq(r.done)
            with m.If(r.done):
                m.d.sync += head[rq].eq(head[rq] + 1)
        # (a flush last: it wins over a return of its QP in the same cycle)
        flq = fl_q[:qb] if n > 1 else 0
        with m.If(fl_v):
            m.d.sync += [head[flq].eq(tail[flq]), fresh.bit_select(flq, 1).eq(1)]
        return m
