"""Receive queues of the responder: buffers posted by user logic, per QP."""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RecvOpcode,
    RecvStatus,
)

__all__ = ["RecvQueue", "RQ_ENTRY"]

#: What a queue slot holds (the QP is the queue's).
RQ_ENTRY = data.StructLayout({"wr_id": 32, "addr": 32, "length": 32})


class RecvQueue(wiring.Component):
    """A queue of ``depth`` receive buffers per QP, in one block of memory.

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
        One cycle after ``rd_qp``: that QP's first buffer, and whether it has one (a buffer
        posted in the cycle of the read is seen by the next read only).
    pop : In(stream.Signature(8, always_ready=True))
        Remove the first buffer of a QP (one that has one).
    flush : In(stream.Signature(8))
        Remove every buffer of a QP, each completing on ``flushed`` with status FLUSHED.
        ``ready`` is high when no flush is under way; ``pop`` and ``post`` go on meanwhile (a
        buffer posted to the flushed QP during its flush may be flushed too).
    flushed : Out(stream.Signature(RECV_COMPLETION))
        The completions of flushed buffers (opcode SEND, length 0), in posting order.
    rejected : Out(1)

    Behaviour
    ---------
    Slot memory (``num_qps * depth`` entries of 96 bits) with a registered read; head and tail
    pointers per QP in distributed memory (combinational reads). One post, one pop and one
    flush step per cycle. Backpressure: ``post.ready`` from the tail and head pointers of the
    named QP (combinational from ``post.payload.qp``); ``flushed.ready`` low holds the flush.
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
            "flush": In(stream.Signature(unsigned(8))),
            "flushed": Out(stream.Signature(RECV_COMPLETION)),
            "rejected": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, P = self.num_qps, self._ptr_bits
        slot_bits = P - 1
        slots = m.submodules.slots = Memory(shape=RQ_ENTRY, depth=n * self.depth, init=[])
        heads = m.submodules.heads = Memory(shape=P, depth=n, init=[])
        tails = m.submodules.tails = Memory(shape=P, depth=n, init=[])

        def slot(qp, ptr):
            return Cat(ptr[:slot_bits], qp[:max(1, (n - 1).bit_length())]) if slot_bits else qp

        # ---- post: write the slot at the tail, move the tail
        p = self.post.payload
        t_post, h_post = tails.read_port(domain="comb"), heads.read_port(domain="comb")
        sw, tw = slots.write_port(), tails.write_port()
        in_table = p.qp < n
        full = (t_post.data - h_post.data)[:P] == self.depth
        m.d.comb += [
            t_post.addr.eq(p.qp), h_post.addr.eq(p.qp),
            self.post.ready.eq(~in_table | ~full),
            sw.addr.eq(slot(p.qp, t_post.data)),
            sw.data.eq(Cat(p.wr_id, p.addr, p.length)),
            sw.en.eq(self.post.valid & in_table & ~full),
            tw.addr.eq(p.qp), tw.data.eq(t_post.data + 1), tw.en.eq(sw.en),
            self.rejected.eq(self.post.valid & ~in_table),
        ]

        # ---- the first buffer of rd_qp
        h_rd, t_rd = heads.read_port(domain="comb"), tails.read_port(domain="comb")
        s_rd = slots.read_port()
        qp_r = Signal(8)
        m.d.sync += [qp_r.eq(self.rd_qp), self.head_valid.eq(h_rd.data != t_rd.data)]
        entry = RQ_ENTRY(s_rd.data)
        m.d.comb += [
            h_rd.addr.eq(self.rd_qp), t_rd.addr.eq(self.rd_qp),
            s_rd.addr.eq(slot(self.rd_qp, h_rd.data)),
            self.head.qp.eq(qp_r), self.head.wr_id.eq(entry.wr_id),
            self.head.addr.eq(entry.addr), self.head.length.eq(entry.length),
        ]

        # ---- pop and flush move the head (a flush step waits for a pop of the same cycle)
        h_pop = heads.read_port(domain="comb")
        hw = heads.write_port()
        flushing = Signal()
        f_qp = Signal(8)
        h_f, t_f = heads.read_port(domain="comb"), tails.read_port(domain="comb")
        s_f = slots.read_port()
        f_valid = Signal()           # a slot read for the flush, offered on `flushed`
        f_entry = RQ_ENTRY(s_f.data)
        fo = self.flushed
        m.d.comb += [
            h_pop.addr.eq(self.pop.payload), h_f.addr.eq(f_qp), t_f.addr.eq(f_qp),
            s_f.addr.eq(slot(f_qp, h_f.data)),
            self.flush.ready.eq(~flushing),
            fo.valid.eq(f_valid),
            fo.payload.qp.eq(f_qp), fo.payload.wr_id.eq(f_entry.wr_id),
            fo.payload.opcode.eq(RecvOpcode.SEND), fo.payload.status.eq(RecvStatus.FLUSHED),
        ]
        step = flushing & ~f_valid & (h_f.data != t_f.data) & \
            ~(self.pop.valid & (self.pop.payload == f_qp))
        m.d.comb += s_f.en.eq(step)          # (the slot read stays while it is offered)
        with m.If(self.pop.valid):
            m.d.comb += [hw.addr.eq(self.pop.payload), hw.data.eq(h_pop.data + 1),
                         hw.en.eq(self.pop.payload < n)]
        with m.Elif(step):
            m.d.comb += [hw.addr.eq(f_qp), hw.data.eq(h_f.data + 1), hw.en.eq(1)]
        with m.If(step & ~self.pop.valid):
            m.d.sync += f_valid.eq(1)
        with m.If(fo.valid & fo.ready):
            m.d.sync += f_valid.eq(0)
        with m.If(self.flush.valid & ~flushing):
            m.d.sync += [flushing.eq(self.flush.payload < n), f_qp.eq(self.flush.payload)]
        with m.Elif(flushing & ~f_valid & (h_f.data == t_f.data)):
            m.d.sync += flushing.eq(0)
        return m
