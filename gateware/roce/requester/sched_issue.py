from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    PACKET_DESC,
    POST,
    PROGRESS_WRITE,
    PSN_WRITE,
    SCHED_EVENT,
    SENT,
    SLOT_PSNS_WRITE,
    SchedKind,
    WrSource,
    check_num_qps,
)
from rocegen.gateware.roce.read.read_layouts import READ_ISSUE
from rocegen.gateware.roce.requester.sched_build import turn_signature
from rocegen.gateware.roce.requester.sched_tree import kept, mux_tree

__all__ = ["SchedIssue"]


class SchedIssue(wiring.Component):
    """Issue stage of the :class:`~rocegen.gateware.roce.requester.scheduler.Scheduler`: commits the turn
    its build stage worked out when the outputs take it, and holds the scheduler's output
    registers.

    Parameters
    ----------
    num_qps : int
        QPs, 1..256.
    addr_bits : int
        Width of a work-request slot address, 1..14.
    reads : bool
        The turns carry READ requests (``turn.rd``) and ``rd_issue`` exists.

    Ports
    -----
    turn : In(turn_signature(num_qps, addr_bits, reads))
        The turn (``turn.done``: the stage is empty after this cycle).
    held, full, errored : In(num_qps)
        As the scheduler's ports of these names.
    sched : In(stream.Signature(SCHED_EVENT, always_ready=True))
        A REWIND or RESET of the turn's QP keeps it from committing; one of the QP of the
        ``sent`` output stops the merging of its next packet into that record.
    bad : In(stream.Signature(POST))
        The BAD_QP post of a request for a QP outside the table: taken one cycle after it is
        first offered at the earliest, when ``post`` is free; while it is offered (from the
        second cycle) the turn posts nothing.
    desc, post, psn_w, sent : Out(stream.Signature(...))
        The scheduler's outputs, registered.
    commit : Out(1)
        The turn commits in this cycle.
    win_shut : Out(1)
        The turn is given up because its packet is outside the window (not because its QP is
        held or had an event): the QP waits for an ADVANCE.
    psn_slot : Out(stream.Signature(SLOT_PSNS_WRITE, always_ready=True))
        The PSNs a request took, written when it starts (or is refused).
    progress : Out(stream.Signature(PROGRESS_WRITE, always_ready=True))
        The QP's progress, written when the turn commits.
    rd_issue : Out(stream.Signature(READ_ISSUE, always_ready=True))
        With ``reads`` only: a READ request committed, in the cycle of the commit (``valid`` is
        ``commit`` and the turn's registered READ flag; the payload is registered).

    Behaviour
    ---------
    The turn is dropped (``turn.done``, no commit) when its QP is held, its packet is outside the
    window, its QP failed since it was worked out (it is worked out again) or, for a start,
    ``full`` is high for its QP. It commits when no REWIND or RESET of its QP comes in the cycle
    and every output it needs is free or freeing: ``desc`` and ``sent`` for a packet (or a
    ``sent`` record of the same QP still waiting, into which it is merged, up to 63 packets),
    ``post`` for a start (not holding a post of the same QP, not while a BAD_QP post is
    offered) and ``psn_w`` for a start that is not refused. Otherwise it waits, and
    ``turn.done`` stays low. Latency: the outputs are registered, one cycle after the commit.
    ``desc.ready``, ``post.ready``, ``psn_w.ready``, ``sent.ready``, ``full``, ``held``,
    ``errored`` and ``sched`` reach ``commit`` combinationally. With ``reads``, the ``sent``
    record of a READ request has the READ's last PSN (``turn.rd.sent_psn``) and counts one
    packet.
    """

    def __init__(self, num_qps, addr_bits, *, reads=False):
        check_num_qps(num_qps)
        if not isinstance(addr_bits, int) or isinstance(addr_bits, bool) or \
                not 1 <= addr_bits <= 14:
            raise ValueError(f"addr_bits must be an integer 1..14, not {addr_bits!r}")
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        self.num_qps = num_qps
        self.reads = reads
        members = {
            "turn": In(turn_signature(num_qps, addr_bits, reads)),
            "held": In(num_qps), "full": In(num_qps), "errored": In(num_qps),
            "sched": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "bad": In(stream.Signature(POST)),
            "desc": Out(stream.Signature(PACKET_DESC)),
            "post": Out(stream.Signature(POST)),
            "psn_w": Out(stream.Signature(PSN_WRITE)),
            "sent": Out(stream.Signature(SENT)),
            "commit": Out(1), "win_shut": Out(1),
            "psn_slot": Out(stream.Signature(SLOT_PSNS_WRITE, always_ready=True)),
            "progress": Out(stream.Signature(PROGRESS_WRITE, always_ready=True)),
        }
        if reads:
            members["rd_issue"] = Out(stream.Signature(READ_ISSUE, always_ready=True))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        t = self.turn
        c = t.p
        ev = self.sched
        commit = self.commit

        # (the terms are kept apart so that synthesis maps them as a shallow tree)
        def at_c(bits, name):       # bits[t.q] (when t.valid)
            return kept(m, mux_tree(m, list(bits), t.q, name), name)
        held_c = at_c(self.held, "held_c")
        full_c = at_c(self.full, "full_c")
        err_c = at_c(self.errored, "err_c")
        drop = t.valid & (held_c | (c.packet & c.shut))     # the turn is given up
        err_new = t.valid & err_c & ~c.err                  # worked out again
        lost = t.valid & c.new & full_c                     # lost its turn through `full`

        # a request for a QP outside the table was offered in the previous cycle: the issue stage
        # posts nothing, the request's BAD_QP post may take the output
        bad_r = Signal()
        m.d.sync += bad_r.eq(self.bad.valid)
        desc_free = ~self.desc.valid | self.desc.ready
        post_free = ~self.post.valid | self.post.ready
        m.d.comb += self.bad.ready.eq(post_free & bad_r)
        post_sel = Signal(n)        # one-hot QP of the post output (0: BAD_QP)
        sent_sel = Signal(n)        # one-hot QP of the sent output
        post_same = at_c(post_sel, "post_same")
        post_ok = (post_free & ~bad_r & ~full_c & ~(self.post.valid & post_same))
        psn_free = ~self.psn_w.valid | self.psn_w.ready
        sent_free = ~self.sent.valid | self.sent.ready
        # the QP of the sent output has had no REWIND or RESET since its last packet there: its
        # next packet has the next PSN
        sent_cont = Signal()
        sent_same = at_c(sent_sel, "sent_same")
        sent_merge = kept(m, self.sent.valid & ~self.sent.ready & sent_same &
                          (self.sent.payload.packets != 63) & sent_cont, "sent_merge")
        # a REWIND or RESET of the QP: the turn is not taken (the event moves the pointers)
        stale = ev.valid & (ev.payload.kind != SchedKind.ADVANCE)
        ev_c = kept(m, stale & (ev.payload.qp == t.q), "ev_c")
        outs_ok = kept(m, (~c.packet | (desc_free & (sent_free | sent_merge))) &
                       (~c.new | post_ok) & (~c.new | c.refuse | psn_free), "outs_ok")
        may = kept(m, t.valid & ~drop & ~err_new & ~ev_c, "may")
        m.d.comb += [
            commit.eq(kept(m, may & outs_ok, "commit")),
            t.done.eq(~t.valid | commit | drop | err_new | lost),
            self.win_shut.eq(c.packet & c.shut & ~held_c & ~c.ev),
        ]

        # outputs
        for out in (self.psn_w, self.desc, self.post, self.sent):
            with m.If(out.ready):
                m.d.sync += out.valid.eq(0)
        with m.If(commit):
            with m.If(c.packet):
                m.d.sync += [self.desc.valid.eq(1), self.desc.payload.eq(c.desc),
                             self.sent.payload.psn.eq(c.psn), sent_cont.eq(1)]
                with m.If(sent_merge):
                    m.d.sync += self.sent.payload.packets.eq(self.sent.payload.packets + 1)
                with m.Else():
                    m.d.sync += [self.sent.valid.eq(1), self.sent.payload.qp.eq(t.q),
                                 self.sent.payload.packets.eq(1), sent_sel.eq(t.sel)]
            with m.If(c.new):
                last_psn = Signal(24)
                m.d.comb += last_psn.eq(c.psn + c.last)
                m.d.sync += [self.post.valid.eq(1), self.post.payload.eq(c.post),
                             self.post.payload.last_psn.eq(Mux(c.refuse, 0, last_psn)),
                             post_sel.eq(t.sel)]
                ps = self.psn_slot
                m.d.comb += [ps.valid.eq(1), ps.payload.addr.eq(t.addr),
                             ps.payload.psns.first.eq(c.psn), ps.payload.psns.last.eq(last_psn),
                             ps.payload.psns.sent.eq(~c.refuse)]
                with m.If(~c.refuse):
                    m.d.sync += [self.psn_w.valid.eq(1), self.psn_w.payload.qp.eq(t.q),
                                 self.psn_w.payload.psn.eq(last_psn + 1)]
            m.d.comb += [self.progress.valid.eq(c.prog_we), self.progress.payload.qp.eq(t.q),
                         self.progress.payload.progress.eq(c.prog)]
        with m.If(self.bad.valid & self.bad.ready):
            m.d.sync += [self.post.valid.eq(1), self.post.payload.eq(self.bad.payload),
                         post_sel.eq(0)]

        for q in range(n):
            with m.If(stale & (ev.payload.qp == q) & sent_sel[q]):
                m.d.sync += sent_cont.eq(0)

        if self.reads:
            rd, ri = t.rd, self.rd_issue
            with m.If(commit & c.packet):     # (overrides the packet's PSN above)
                m.d.sync += self.sent.payload.psn.eq(rd.sent_psn)
            m.d.comb += [
                ri.valid.eq(commit & c.packet & rd.read),
                ri.payload.qp.eq(t.q), ri.payload.new.eq(c.new),
                ri.payload.wr_id.eq(c.post.wr_id), ri.payload.local_addr.eq(rd.local_addr),
                ri.payload.length.eq(rd.length), ri.payload.first.eq(rd.first),
                ri.payload.psn.eq(c.psn), ri.payload.pmtu_log2.eq(rd.pmtu_log2),
                ri.payload.va.eq(c.desc.va), ri.payload.atomic.eq(rd.atomic),
                ri.payload.gen.eq(c.desc.src == WrSource.GENERATOR),
            ]
        return m
