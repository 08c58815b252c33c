"""Receive queues of the responder: buffers posted by user logic, per QP."""

from amaranth.hdl import Cat, Const, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.responder.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RecvOpcode,
    RecvStatus,
)

__all__ = ["RecvQueue", "RQ_ENTRY"]

#: What a queue slot holds (the QP is the queue's).
RQ_ENTRY = data.StructLayout({"wr_id": 32, "addr": 32, "length": 32})


class RecvQueue(wiring.Component):
    """A queue of ``depth`` receive buffers per QP, in one block of memory, with bounded flushes
    that run beside the other QPs' posts, reads and pops.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    depth : int
        Buffers each QP can have posted (a power of two, 1..1024).

    Ports
    -----
    post : In(stream.Signature(RECV_POST))
        Buffers posted by user logic. Held (``ready`` low) while the named QP's queue is full; a
        post naming a QP outside the table is taken and dropped, and ``rejected`` pulses.
    rd_qp : In(range(num_qps))
        The QP whose first buffer to read.
    head, head_valid : Out(RECV_POST), Out(1)
        One cycle after ``rd_qp``: that QP's first buffer, and whether it has one that may be
        taken (a buffer posted in the cycle of the read is seen by the next read only). A QP
        whose flush is asked for in the cycle of the read, waits or runs has none: its first
        buffers belong to the flush, and those posted after them wait until it ends.
    pop : In(stream.Signature(8, always_ready=True))
        Remove the first buffer of a QP (one that has one that may be taken).
    flush : In(stream.Signature(8, always_ready=True))
        Remove the buffers a QP has when the flush is asked for (those up to its tail in that
        cycle; a post in the same cycle comes after it), each completing on ``flushed`` with
        status FLUSHED. Buffers posted later are kept (for the QP's next connection). A flush
        asked for a QP whose flush still waits or runs extends it to the QP's tail then.
    flushed : Out(stream.Signature(RECV_COMPLETION))
        The completions of flushed buffers (opcode SEND, length 0), in posting order per QP.
    flushing : Out(num_qps)
        The QPs whose flush waits or runs.
    rejected : Out(1)

    Behaviour
    ---------
    Slot memory (``num_qps * depth`` entries of 96 bits) with a registered read; head and tail
    pointers, and each flush's end, per QP in distributed memory (combinational reads). One post
    and one pop per cycle, whatever the flushes do. The flushes run one QP at a time, the lowest
    waiting first, one buffer every other cycle (a cycle to read the slot, one to offer it)
    unless a pop takes the head pointers' write port in that cycle or ``flushed`` is held; a
    flush of ``k`` buffers asked for in cycle t with no other waiting offers its last completion
    in cycle t + 2k at the earliest, and the QP's buffers may be taken from cycle t + 2k + 2 on.
    Backpressure: ``post.ready`` from the tail and head pointers of the named QP (combinational
    from ``post.payload.qp``); ``flushed.ready`` low holds the flushes, never a post or a pop.
    """

    def __init__(self, num_qps, depth=16):
        check_num_qps(num_qps)
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1 or \
                depth > 1024 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two from 1 to 1024, not {depth!r}")
        self.num_qps, self.depth = num_qps, depth
        self._ptr_bits = depth.bit_length()          # one bit more than a slot index
        super().__init__({
            "post": In(stream.Signature(RECV_POST)),
            "rd_qp": In(range(num_qps)),
            "head": Out(RECV_POST),
            "head_valid": Out(1),
            "pop": In(stream.Signature(unsigned(8), always_ready=True)),
            "flush": In(stream.Signature(unsigned(8), always_ready=True)),
            "flushed": Out(stream.Signature(RECV_COMPLETION)),
            "flushing": Out(num_qps),
            "rejected": Out(1),
        })

    def _slot(self, qp, ptr):
        n, slot_bits = self.num_qps, self._ptr_bits - 1
        return Cat(ptr[:slot_bits], qp[:max(1, (n - 1).bit_length())]) if slot_bits else qp

    def elaborate(self, platform):
        m = Module()
        n, P = self.num_qps, self._ptr_bits
        slots = m.submodules.slots = Memory(shape=RQ_ENTRY, depth=n * self.depth, init=[])
        heads = m.submodules.heads = Memory(shape=P, depth=n, init=[])
        tails = m.submodules.tails = Memory(shape=P, depth=n, init=[])
        ends = m.submodules.ends = Memory(shape=P, depth=n, init=[])
        pend = self.flushing

        # ---- post: write the slot at the tail, move the tail
        p = self.post.payload
        t_post, h_post = tails.read_port(domain="comb"), heads.read_port(domain="comb")
        sw, tw = slots.write_port(), tails.write_port()
        in_table = p.qp < n
        full = (t_post.data - h_post.data)[:P] == self.depth
        m.d.comb += [
            t_post.addr.eq(p.qp), h_post.addr.eq(p.qp),
            self.post.ready.eq(~in_table | ~full),
            sw.addr.eq(self._slot(p.qp, t_post.data)),
            sw.data.eq(Cat(p.wr_id, p.addr, p.length)),
            sw.en.eq(self.post.valid & in_table & ~full),
            tw.addr.eq(p.qp), tw.data.eq(t_post.data + 1), tw.en.eq(sw.en),
            self.rejected.eq(self.post.valid & ~in_table),
        ]

        # ---- a flush asked for: the QP's tail is where it ends
        fr = self.flush
        t_req, ew = tails.read_port(domain="comb"), ends.write_port()
        asked = Signal(n)
        m.d.comb += [t_req.addr.eq(fr.payload), ew.addr.eq(fr.payload), ew.data.eq(t_req.data),
                     ew.en.eq(fr.valid & (fr.payload < n))]
        with m.If(fr.valid & (fr.payload < n)):
            m.d.comb += asked.eq(Const(1, n) << fr.payload[:max(1, (n - 1).bit_length())])

        # ---- the first buffer of rd_qp
        h_rd, t_rd = heads.read_port(domain="comb"), tails.read_port(domain="comb")
        s_rd = slots.read_port()
        qp_r = Signal(8)
        blocked = Signal()
        m.d.comb += blocked.eq((pend | asked).bit_select(self.rd_qp, 1))
        m.d.sync += [qp_r.eq(self.rd_qp),
                     self.head_valid.eq((h_rd.data != t_rd.data) & ~blocked)]
        entry = RQ_ENTRY(s_rd.data)
        m.d.comb += [
            h_rd.addr.eq(self.rd_qp), t_rd.addr.eq(self.rd_qp),
            s_rd.addr.eq(self._slot(self.rd_qp, h_rd.data)),
            self.head.qp.eq(qp_r), self.head.wr_id.eq(entry.wr_id),
            self.head.addr.eq(entry.addr), self.head.length.eq(entry.length),
        ]
        self._flusher(m, slots, heads, ends, asked)
        return m

    def _flusher(self, m, slots, heads, ends, asked):
        """The waiting flushes, one QP at a time: pop and flush steps share the head pointers'
        write port, a pop first."""
        n = self.num_qps
        pend = self.flushing
        h_pop, hw = heads.read_port(domain="comb"), heads.write_port()
        h_f, e_f = heads.read_port(domain="comb"), ends.read_port(domain="comb")
        s_f = slots.read_port()
        active = Signal()            # a QP's flush runs
        f_qp = Signal(range(n))
        f_valid = Signal()           # a slot read for the flush, offered on `flushed`
        f_entry = RQ_ENTRY(s_f.data)
        fo = self.flushed
        m.d.comb += [
            h_pop.addr.eq(self.pop.payload), h_f.addr.eq(f_qp), e_f.addr.eq(f_qp),
            s_f.addr.eq(self._slot(f_qp, h_f.data)),
            fo.valid.eq(f_valid),
            fo.payload.qp.eq(f_qp), fo.payload.wr_id.eq(f_entry.wr_id),
            fo.payload.opcode.eq(RecvOpcode.SEND), fo.payload.status.eq(RecvStatus.FLUSHED),
        ]
        step = active & ~f_valid & (h_f.data != e_f.data) & ~self.pop.valid
        m.d.comb += s_f.en.eq(step)          # (the slot read stays while it is offered)
        with m.If(self.pop.valid):
            m.d.comb += [hw.addr.eq(self.pop.payload), hw.data.eq(h_pop.data + 1),
                         hw.en.eq(self.pop.payload < n)]
        with m.Elif(step):
            m.d.comb += [hw.addr.eq(f_qp), hw.data.eq(h_f.data + 1), hw.en.eq(1)]
        with m.If(step):
            m.d.sync += f_valid.eq(1)
        with m.If(fo.valid & fo.ready):
            m.d.sync += f_valid.eq(0)
        # a flush ends when its QP's head meets its end, unless it is asked for again
        done = Signal(n)
        with m.If(active & ~f_valid & (h_f.data == e_f.data) & ~asked.bit_select(f_qp, 1)):
            m.d.comb += done.eq(Const(1, n) << f_qp)
            m.d.sync += active.eq(0)
        pick = Signal(range(n))
        for q in reversed(range(n)):
            with m.If(pend[q]):
                m.d.comb += pick.eq(q)
        with m.If(~active & pend.any()):
            m.d.sync += [active.eq(1), f_qp.eq(pick)]
        m.d.sync += pend.eq((pend & ~done) | asked)
