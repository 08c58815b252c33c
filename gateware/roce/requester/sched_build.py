from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    PROGRESS,
    QP_CONTEXT,
    SCHED_EVENT,
    SCHED_READ,
    SCHED_TURN,
    SLOT,
    SLOT_PSNS,
    AtomicOp,
    CplStatus,
    QpState,
    SchedKind,
    WrOpcode,
    check_num_qps,
)
from rocegen.gateware.roce.requester.segmenter import INDEX_BITS, describe_packet
from rocegen.wire.atomics import ATOMIC_BYTES

__all__ = ["SchedBuild", "turn_signature"]


def turn_signature(num_qps, addr_bits, reads=False):
    """The scheduler's turn from its build stage to its issue stage: ``valid``, the QP (``q``,
    one-hot ``sel``, zero when ``valid`` is low), the slot address ``addr`` and what the turn
    does (``p``, :data:`~rocegen.gateware.roce.layouts.SCHED_TURN`; with ``reads`` also ``rd``,
    :data:`~rocegen.gateware.roce.layouts.SCHED_READ`), all registered; ``done`` (from the
    issue stage): the stage is empty after this cycle and takes the next turn."""
    members = {
        "valid": Out(1), "q": Out(range(num_qps)), "sel": Out(num_qps),
        "addr": Out(addr_bits), "p": Out(SCHED_TURN), "done": In(1),
    }
    if reads:
        members["rd"] = Out(SCHED_READ)
    return wiring.Signature(members)


class SchedBuild(wiring.Component):
    """Build stage of the :class:`~rocegen.gateware.roce.requester.scheduler.Scheduler`: works a turn out
    from the registered reads of the stage before and registers it for the issue stage.

    Parameters
    ----------
    num_qps : int
        QPs, 1..256.
    addr_bits : int
        Width of a work-request slot address (at least 1).
    window : int
        PSNs a QP may have outstanding (1..2^23-1).
    reads : bool
        READ work requests are sent (RDMA READ requests); else they are refused when queued.

    Ports
    -----
    valid, q, sel, addr : In
        The turn read (``sel`` one-hot of ``q``, zero when ``valid`` is low) and its slot.
    going : In(1)
        The QP's request at ``cur`` has started (the turn goes on with a message).
    new : In(1)
        That request was never started (``cur == hi``).
    slot : In(SLOT), pslot : In(SLOT_PSNS)
        The request and the PSNs it took (when it started before).
    fwd, fpsn : In
        A PSN write of the QP was not yet seen by the QP table: its next PSN is ``fpsn``.
    prog : In(PROGRESS)
        The QP's progress (read in this cycle).
    context : In(QP_CONTEXT), rd_psn : In(24)
        The QP table's entry of ``q`` (read in this cycle).
    acked_psn : In(24)
        The QP's acknowledged PSN (combinational read of the retry engine).
    errored : In(num_qps)
        QPs in the error state.
    sched : In(stream.Signature(SCHED_EVENT, always_ready=True))
        Events of the retry engine: a REWIND or RESET of the QP drops its turn.
    turn : Out(turn_signature(num_qps, addr_bits, reads))
        The turn worked out, registered.

    Behaviour
    ---------
    A turn of a request not started is a refusal (its queued status, FLUSHED if the QP is in
    the error state, QP_NOT_READY if its state is not RTS) or the first packet of the message
    at the QP table's next PSN. A turn of a started request is its next packet (or an abort if
    the QP failed). A turn of a request started before a rewind is a skip (acknowledged,
    refused or failed) or a resume (its progress set to the oldest unacknowledged PSN). The
    packet that fills the window asks for an acknowledgement; one beyond it is ``shut``.
    With ``reads``, a READ is one packet (its turn ends the request) that takes the PSNs of all
    its responses: the QP's next PSN, the post's last PSN and ``rd.sent_psn`` count them; resumed
    from PSN ``p`` inside it, the request asks for the rest from ``p`` on. The window is checked
    on the request's own PSN (its responses' PSNs may reach beyond it).
    Latency: one cycle (``turn`` registered when ``turn.done``). Backpressure: while
    ``turn.done`` is low the registered turn is held (dropped if a REWIND or RESET of its QP
    comes) and the turn at the inputs is lost: the stage before must not offer one.
    """

    def __init__(self, num_qps, addr_bits, window, *, reads=False, atomics=False):
        check_num_qps(num_qps)
        if not isinstance(addr_bits, int) or isinstance(addr_bits, bool) or addr_bits < 1:
            raise ValueError(f"addr_bits must be a positive integer, not {addr_bits!r}")
        if not isinstance(window, int) or isinstance(window, bool) or \
                not 1 <= window < 1 << 23:
            raise ValueError(f"window must be an integer 1..2^23-1, not {window!r}")
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        self.num_qps = num_qps
        self.window = window
        self.reads = reads
        self.atomics = bool(atomics)
        super().__init__({
            "valid": In(1), "q": In(range(num_qps)), "sel": In(num_qps), "addr": In(addr_bits),
            "going": In(1), "new": In(1), "slot": In(SLOT), "pslot": In(SLOT_PSNS),
            "fwd": In(1), "fpsn": In(24), "prog": In(PROGRESS),
            "context": In(QP_CONTEXT), "rd_psn": In(24), "acked_psn": In(24),
            "errored": In(num_qps),
            "sched": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "turn": Out(turn_signature(num_qps, addr_bits, reads)),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        slot, pslot, prog, ctx = self.slot, self.pslot, self.prog, self.context
        acked = self.acked_psn
        ev = self.sched
        ev_any = Signal(n)          # bit q: an event of QP q this cycle
        ev_stale = Signal(n)        # bit q: a REWIND or RESET of QP q this cycle
        for q in range(n):
            m.d.comb += [ev_any[q].eq(ev.valid & (ev.payload.qp == q)),
                         ev_stale[q].eq(ev_any[q] & (ev.payload.kind != SchedKind.ADVANCE))]
        err = (self.errored & self.sel).any()
        is_start = ~self.going
        is_new = self.new

        table_psn = Signal(24)
        m.d.comb += table_psn.eq(Mux(self.fwd, self.fpsn, self.rd_psn))

        # a request started before (a rewind brought the QP back to it): resume from the oldest
        # unacknowledged PSN, or skip it if it is acknowledged (or was refused)
        resume = Signal(24)
        m.d.comb += resume.eq(acked + 1)
        into = Signal(24)
        m.d.comb += into.eq(resume - pslot.first)
        covered = ~pslot.sent | ~(acked - pslot.last)[23]
        into_offset = Signal(31)
        with m.Switch(ctx.pmtu_log2):
            for log2 in range(8, 13):
                with m.Case(log2):
                    m.d.comb += into_offset.eq(into[:INDEX_BITS] << log2)
            with m.Default():
                m.d.comb += into_offset.eq(into[:INDEX_BITS] << 8)

        index = Signal(INDEX_BITS)
        psn = Signal(24)
        offset = Signal(31)
        with m.If(~is_start):
            m.d.comb += [index.eq(prog.index), psn.eq(prog.psn), offset.eq(prog.offset)]
        with m.Else():
            m.d.comb += [index.eq(0), psn.eq(table_psn), offset.eq(0)]

        status = Signal(CplStatus)
        with m.If(slot.status != CplStatus.OK):
            m.d.comb += status.eq(slot.status)
        with m.Elif(err):
            m.d.comb += status.eq(CplStatus.FLUSHED)
        with m.Elif(ctx.state != QpState.RTS):
            m.d.comb += status.eq(CplStatus.QP_NOT_READY)

        pk = describe_packet(m, slot.wr, index, psn, dest_qpn=ctx.peer_qpn, rkey=ctx.rkey,
                             base_va=ctx.base_va, pmtu_log2=ctx.pmtu_log2,
                             ack_every_log2=ctx.ack_every_log2, offset=offset, reads=self.reads,
                             atomics=self.atomics)
        # what this turn does
        new_start = is_start & is_new                       # posts the request
        refuse = new_start & (status != CplStatus.OK)
        rewound = is_start & ~is_new                        # started before a rewind
        skip = rewound & (err | covered)                    # nothing to send
        resume_turn = rewound & ~err & ~covered             # sets up the progress to resume
        abort = ~is_start & err                             # the QP failed mid-message
        packet = ~refuse & ~rewound & ~abort
        win_pos = Signal(24)
        m.d.comb += win_pos.eq(psn - acked)

        o = self.turn
        c = o.p
        with m.If(o.done):
            m.d.sync += [
                o.valid.eq(self.valid & ~(ev_stale & self.sel).any()),
                o.sel.eq(self.sel & ~ev_stale),
                o.q.eq(self.q),
                o.addr.eq(self.addr),
                c.packet.eq(packet),
                c.new.eq(new_start),
                c.refuse.eq(refuse),
                c.fin.eq(refuse | skip | abort | (packet & pk.last)),
                c.shut.eq(packet & (win_pos > self.window) & ~win_pos[23]),
                c.err.eq(err),
                c.ev.eq((ev_any & self.sel).any()),
                c.desc.eq(pk.desc),
                c.desc.ack_req.eq(pk.desc.ack_req | (win_pos == self.window)),
                c.desc.qp.eq(self.q),
                c.desc.src.eq(slot.src),
                c.desc.peer_ip.eq(ctx.peer_ip),
                c.desc.udp_sport.eq(ctx.udp_sport),
                c.desc.dscp.eq(ctx.dscp),
                c.desc.ecn.eq(ctx.ecn),
                c.psn.eq(psn),
                c.post.wr_id.eq(slot.wr.wr_id),
                c.post.qp.eq(self.q),
                c.post.src.eq(slot.src),
                c.post.status.eq(status),
                c.last.eq(pk.last_index),
                c.prog_we.eq((packet & ~pk.last) | resume_turn),
            ]
            with m.If(resume_turn & into[23]):
                m.d.sync += [c.prog.index.eq(0), c.prog.psn.eq(pslot.first), c.prog.offset.eq(0)]
            with m.Elif(resume_turn):
                m.d.sync += [c.prog.index.eq(into), c.prog.psn.eq(resume),
                             c.prog.offset.eq(into_offset)]
            with m.Else():
                m.d.sync += [c.prog.index.eq(index + 1), c.prog.psn.eq(psn + 1),
                             c.prog.offset.eq(offset + pk.length)]
        with m.Elif((ev_stale & o.sel).any()):
            m.d.sync += [o.valid.eq(0), o.sel.eq(0)]
        if self.reads:
            self._read_turn(m, psn, index, pk, is_start)
        return m

    def _read_turn(self, m, psn, index, pk, is_start):
        """The turn's READ facts (``turn.rd``): whether it is a READ's or an atomic's request,
        its last PSN, where its answer lands."""
        slot, pslot, ctx, o = self.slot, self.pslot, self.context, self.turn
        # a READ request's PSN is its index's: its last PSN is last_index - index after it
        # (an atomic is answered as a READ of 8 bytes: its ATOMIC_ACKNOWLEDGE's value)
        atomic = Signal(AtomicOp)
        if self.atomics:
            with m.Switch(slot.wr.opcode):
                with m.Case(WrOpcode.FETCH_ADD):
                    m.d.comb += atomic.eq(AtomicOp.FETCH_ADD)
                with m.Case(WrOpcode.COMPARE_SWAP):
                    m.d.comb += atomic.eq(AtomicOp.COMPARE_SWAP)
        is_read = (slot.wr.opcode == WrOpcode.READ) | (atomic != AtomicOp.NONE)
        read_last = Signal(24)
        m.d.comb += read_last.eq(psn + (pk.last_index - index))
        with m.If(o.done):
            m.d.sync += [
                o.rd.read.eq(is_read), o.rd.atomic.eq(atomic),
                o.rd.sent_psn.eq(Mux(is_read, read_last, psn)),
                o.rd.local_addr.eq(slot.wr.local_addr),
                o.rd.length.eq(Mux(atomic != AtomicOp.NONE, ATOMIC_BYTES, slot.wr.length)),
                o.rd.first.eq(Mux(is_start, psn, pslot.first)),
                o.rd.pmtu_log2.eq(ctx.pmtu_log2),
            ]
