from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.layouts import (
    FREED,
    POST,
    SCHED_EVENT,
    SLOT_WRITE,
    WR_TAGGED,
    CplStatus,
    SchedKind,
    WrOpcode,
    WrSource,
    check_num_qps,
    check_wr_depth,
)
from rocegen.gateware.roce.requester.sched_tree import kept, mux_tree
from rocegen.wire.atomics import ATOMIC_OPERAND_BYTES

__all__ = ["SchedQueue"]


class SchedQueue(wiring.Component):
    """Per-QP queues of the :class:`~rocegen.gateware.roce.requester.scheduler.Scheduler`: takes work
    requests into its work-request memory, and keeps each QP's queue pointers and flags.

    Parameters
    ----------
    num_qps : int
        QPs, 1..256.
    width : int
        Data width W in bits (a request's ``local_addr`` must be a multiple of W/8).
    mem_bytes : int
        Size of the local memory in bytes.
    depth : int
        Work requests each QP holds, a power of two 1..1024
        (:data:`~rocegen.gateware.roce.layouts.MAX_WR_DEPTH`).
    reads : bool
        READ work requests are taken (else refused with UNSUPPORTED).

    Ports
    -----
    wr : In(stream.Signature(WR_TAGGED))
        Work requests.
    bad : Out(stream.Signature(POST))
        The BAD_QP post of a request naming a QP outside the table (``wr.ready`` is
        ``bad.ready`` for it).
    slot_w : Out(stream.Signature(SLOT_WRITE, always_ready=True))
        A request queued, with the verdict of its address checks, into its slot.
    freed : In(stream.Signature(FREED, always_ready=True))
        A request of this QP completed: ``head`` advances.
    sched : In(stream.Signature(SCHED_EVENT, always_ready=True))
        REWIND: ``cur`` back to ``head``; RESET: ``cur`` to ``hi``; either clears ``started``
        and ``win_block``. ADVANCE clears ``win_block``.
    sel, commit, fin, new, win_shut : In
        The issue stage's turn (one-hot QP ``sel``), committed in this cycle (``commit``): its
        request leaves the sending position (``fin``, ``cur`` advances) or starts (``new``,
        ``hi`` advances); ``win_shut``: the turn found the window full (``win_block`` set).
    cur, hi, tail : Out(data.ArrayLayout(log2(depth) + 1, num_qps))
        The request being sent (or next to send), the first never started, and where the next
        request is queued, per QP, modulo 2 * depth (registers).
    started, win_block : Out(num_qps)
        The request at ``cur`` has sent a packet; the window is closed until an event (registers).
    pushed : Out(num_qps)
        One-hot of the QP whose request is queued in this cycle.
    busy : Out(num_qps)
        The QP has requests not completed (``head != tail``; registers).
    room, room_next : Out(num_qps)
        Bit ``q`` of ``room``: a request for QP ``q`` offered on ``wr`` now is taken. Of
        ``room_next``: one would still be taken in the next cycle if a request of QP ``q`` is
        queued in this cycle (a slot freed in this cycle is not counted). Both from registers
        only.

    Behaviour
    ---------
    A request is refused at once when its QP is outside the table (through ``bad``), else
    queued with UNSUPPORTED when its opcode is not a send opcode (WRITE, WRITE_IMM, SEND,
    SEND_IMM) nor, with ``reads``, READ, else LOCAL_ALIGN when ``local_addr`` is not a multiple
    of W/8 (never for a READ), else LOCAL_LENGTH when ``local_addr + length > mem_bytes`` (not
    for a send of the GENERATOR source, whose payload is a pattern; always for a READ, whose
    data is written there), else OK. With ``atomics``, COMPARE_SWAP and FETCH_ADD are taken:
    LOCAL_ALIGN when ``local_addr`` is not a multiple of W/8, LOCAL_LENGTH when its 16 bytes of
    operands do not fit local memory, whatever ``length`` says. A request for a
    QP with no free slot (``tail - head`` or ``tail - cur`` at ``depth``) waits, holding
    ``wr``: the room is registered from the pointers of the previous cycle, so a freed slot
    counts one cycle later. ``wr.ready`` depends on registers only for a QP inside the table.
    Latency: the pointers move at the clock edge after their cause.
    """

    def __init__(self, num_qps, width, mem_bytes, depth, *, reads=False, atomics=False):
        check_num_qps(num_qps)
        check_width(width)
        if not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool) or \
                mem_bytes & (mem_bytes - 1) or not width // 8 <= mem_bytes <= 1 << 32:
            raise ValueError(f"mem_bytes must be a power of two from {width // 8} to 2^32, "
                             f"not {mem_bytes!r}")
        check_wr_depth(depth)
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        self.num_qps, self.width, self.mem_bytes, self.depth = num_qps, width, mem_bytes, depth
        self.reads = reads
        self.atomics = bool(atomics)
        ptrs = data.ArrayLayout(depth.bit_length(), num_qps)
        super().__init__({
            "wr": In(stream.Signature(WR_TAGGED)),
            "bad": Out(stream.Signature(POST)),
            "slot_w": Out(stream.Signature(SLOT_WRITE, always_ready=True)),
            "freed": In(stream.Signature(FREED, always_ready=True)),
            "sched": In(stream.Signature(SCHED_EVENT, always_ready=True)),
            "sel": In(num_qps), "commit": In(1), "fin": In(1), "new": In(1), "win_shut": In(1),
            "cur": Out(ptrs), "hi": Out(ptrs), "tail": Out(ptrs),
            "started": Out(num_qps), "win_block": Out(num_qps), "pushed": Out(num_qps),
            "room": Out(num_qps), "room_next": Out(num_qps), "busy": Out(num_qps),
        })

    def elaborate(self, platform):
        m = Module()
        n, depth = self.num_qps, self.depth
        dbits = depth.bit_length() - 1
        pw = dbits + 1              # queue pointers count modulo 2 * depth
        qbits = (n - 1).bit_length()

        def ptrs(name):
            return Array(Signal(pw, name=f"{name}{q}") for q in range(n))
        head = ptrs("head")         # oldest request not completed
        cur = ptrs("cur")           # the request being sent, or the next one to send
        hi = ptrs("hi")             # the first request never started
        tail = ptrs("tail")         # where the next request is queued
        started, win_block = self.started, self.win_block
        for q in range(n):
            m.d.comb += [self.cur[q].eq(cur[q]), self.hi[q].eq(hi[q]), self.tail[q].eq(tail[q]),
                         self.busy[q].eq(head[q] != tail[q])]

        t = self.wr.payload
        q_in = t.wr.qp[:qbits] if qbits else Const(0, 1)
        push = Signal(attrs={"keep": 1})    # a request is queued
        push_r = Signal(n)                  # a request was queued
        # room in the queue, from the pointers of the previous cycle: for one more request, and for
        # one more after the one queued in that cycle (room freed in that cycle counts a cycle
        # later)
        room1 = Signal(n)
        room2 = Signal(n)
        room3 = Signal(n)           # (for room_next: two more after the one queued in that cycle)
        for q in range(n):
            used = [(tail[q] - head[q])[:pw], (tail[q] - cur[q])[:pw]]
            m.d.sync += [room1[q].eq((used[0] < depth) & (used[1] < depth)),
                         room2[q].eq((used[0] < depth - 1) & (used[1] < depth - 1)),
                         room3[q].eq((used[0] < depth - 2) & (used[1] < depth - 2))]
        room_q = kept(m, Cat(Mux(push_r[q], room2[q], room1[q]) for q in range(n)), "room_q")
        room = kept(m, mux_tree(m, list(room_q), q_in, "room"), "room")
        m.d.comb += [self.room.eq(room_q),
                     self.room_next.eq(Cat(Mux(push_r[q], room3[q], room2[q]) for q in range(n)))]
        bad = t.wr.qp >= n
        m.d.comb += [
            self.bad.valid.eq(self.wr.valid & bad),
            self.bad.payload.wr_id.eq(t.wr.wr_id),
            self.bad.payload.qp.eq(t.wr.qp),
            self.bad.payload.src.eq(t.src),
            self.bad.payload.status.eq(CplStatus.BAD_QP),
            self.bad.payload.last_psn.eq(0),
            self.wr.ready.eq(Mux(bad, self.bad.ready, room)),
            push.eq(self.wr.valid & ~bad & room),
        ]
        word_bits = (self.width // 8).bit_length() - 1
        w = self.slot_w
        with m.If(t.wr.local_addr[:word_bits] != 0):
            m.d.comb += w.payload.slot.status.eq(CplStatus.LOCAL_ALIGN)
        with m.Elif((t.src != WrSource.GENERATOR) &
                    (t.wr.local_addr + t.wr.length > self.mem_bytes)):
            m.d.comb += w.payload.slot.status.eq(CplStatus.LOCAL_LENGTH)
        # (these override the checks above: codes 4..7 have bit 2 set)
        op = t.wr.opcode.as_value()
        if self.reads:
            with m.If(t.wr.opcode == WrOpcode.READ):
                m.d.comb += w.payload.slot.status.eq(
                    Mux(t.wr.local_addr + t.wr.length > self.mem_bytes,
                        CplStatus.LOCAL_LENGTH, CplStatus.OK))
            if self.atomics:
                # (an atomic's 16 bytes of operands at a word address, as a payload's; its
                # original value over the first 8)
                with m.Elif((t.wr.opcode == WrOpcode.COMPARE_SWAP) |
                            (t.wr.opcode == WrOpcode.FETCH_ADD)):
                    with m.If(t.wr.local_addr[:word_bits] != 0):
                        m.d.comb += w.payload.slot.status.eq(CplStatus.LOCAL_ALIGN)
                    with m.Elif(t.wr.local_addr + ATOMIC_OPERAND_BYTES > self.mem_bytes):
                        m.d.comb += w.payload.slot.status.eq(CplStatus.LOCAL_LENGTH)
                    with m.Else():
                        m.d.comb += w.payload.slot.status.eq(CplStatus.OK)
            with m.Elif(op[2]):
                m.d.comb += w.payload.slot.status.eq(CplStatus.UNSUPPORTED)
        else:
            with m.If(op[2]):
                m.d.comb += w.payload.slot.status.eq(CplStatus.UNSUPPORTED)
        m.d.comb += [
            w.valid.eq(push),
            w.payload.addr.eq(Cat(tail[q_in][:dbits], q_in[:qbits]) if dbits or qbits else 0),
            w.payload.slot.wr.eq(t.wr),
            w.payload.slot.src.eq(t.src),
        ]

        # --- pointers ---------------------------------------------------------------------------
        ev = self.sched
        for q in range(n):
            here = self.sel[q]
            ev_any = ev.valid & (ev.payload.qp == q)
            ev_stale = ev_any & (ev.payload.kind != SchedKind.ADVANCE)
            c_n = Signal(pw, name=f"cur_n{q}")
            h_n = Signal(pw, name=f"hi_n{q}")
            hd_n = Signal(pw, name=f"head_n{q}")
            cur_p1 = kept(m, (cur[q] + 1)[:pw], f"cur_p1_{q}")
            hi_p1 = kept(m, (hi[q] + 1)[:pw], f"hi_p1_{q}")
            m.d.comb += [c_n.eq(Mux(here & self.commit & self.fin, cur_p1, cur[q])),
                         h_n.eq(Mux(here & self.commit & self.new, hi_p1, hi[q])),
                         hd_n.eq(head[q] + (self.freed.valid & (self.freed.payload == q))),
                         self.pushed[q].eq(push & (q_in == q))]
            m.d.sync += [hi[q].eq(h_n), head[q].eq(hd_n), push_r[q].eq(self.pushed[q])]
            with m.If(self.pushed[q]):
                m.d.sync += tail[q].eq(tail[q] + 1)
            with m.If(here & self.commit):
                m.d.sync += started[q].eq(~self.fin)
            # (no turn of the QP is committed in the cycle of its REWIND or RESET)
            with m.If(ev_stale & (ev.payload.kind == SchedKind.REWIND)):
                m.d.sync += [cur[q].eq(hd_n), started[q].eq(0), win_block[q].eq(0)]
            with m.Elif(ev_stale):
                m.d.sync += [cur[q].eq(hi[q]), started[q].eq(0), win_block[q].eq(0)]
            with m.Else():
                m.d.sync += cur[q].eq(c_n)
                with m.If(ev_any):
                    m.d.sync += win_block[q].eq(0)
                with m.Elif(here & self.win_shut):
                    m.d.sync += win_block[q].eq(1)
        return m
