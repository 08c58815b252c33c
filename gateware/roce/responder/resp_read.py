"""The responder's RDMA READ path: the READs it accepted, queued per QP, turned into response
packets (a descriptor and a memory read each)."""

from amaranth.hdl import Module, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.responder.resp_layouts import RESP_READ_JOB, RESP_READ_PACKET
from rocegen.gateware.roce.responder.resp_read_gen import RespReadGen
from rocegen.gateware.roce.responder.resp_read_queue import RespReadQueue, check_rd_depth

__all__ = ["RespRead"]


class RespRead(wiring.Component):
    """The READ path of the responder: :class:`RespReadQueue` (``rd_depth`` READs per QP)
    feeding :class:`RespReadGen` (the response packets), round robin over the QPs, ``burst``
    packets a turn.

    Parameters
    ----------
    width : int
        Data width W (64..512): the memory words the reads count in.
    num_qps : int
        QPs (1..256).
    rd_depth : int
        READs each QP can have queued (a power of two, 16..1024; default 16, the most a
        ConnectX requester keeps outstanding): the depth a connection may advertise as its
        ``max_dest_rd_atomic``.
    burst, out_depth : int
        Packets per turn and packets of the output queue (:class:`RespReadGen`).
    atomics : bool
        Atomics share the queues and make their ATOMIC_ACKNOWLEDGEs (default False).

    Ports
    -----
    push, full_qp, full, flush, level_qp, level, hold
        Those of :class:`RespReadQueue`: the engine's READs
        (:class:`~rocegen.gateware.roce.responder.resp_engine.RespEngine` ``rd_push``), its read of a
        QP's queue being full (``rd_qp``, ``rd_full``), the QPs whose queues are flushed (set
        up again, put in error, closed), the READs a QP has queued, the QPs that get no turn
        (:class:`~rocegen.gateware.roce.responder.resp_read_order.RespReadOrder`).
    done : Out(stream.Signature(8, always_ready=True))
        The last response of a READ of this QP made (in the cycle it goes into the generator's
        output queue: the READ has left the queue, and its packets will all come out on ``o``).
    o : Out(stream.Signature(RESP_READ_PACKET))
        The response packets (:class:`RespReadGen`): the responses of each READ in PSN order,
        the READs of a QP in the order pushed; the QPs' turns interleaved.

    Behaviour
    ---------
    A READ pushed into empty queues in cycle t has its first packet offered in cycle t + 3.
    A turn of ``burst`` packets takes ``burst + 1`` cycles (a descriptor every 1.25 cycles at
    the default 4), far ahead of the packets' payload (a 4096-byte payload is 64 words at
    W = 512), so the generator runs ahead of the reads by whatever its consumer queues.
    """

    def __init__(self, width, num_qps, *, rd_depth=16, burst=4, out_depth=4, atomics=False):
        check_num_qps(num_qps)
        check_rd_depth(rd_depth)
        self.width, self.num_qps, self.rd_depth = width, num_qps, rd_depth
        self._queue = RespReadQueue(num_qps, rd_depth, atomics=atomics)
        self._gen = RespReadGen(width, burst=burst, out_depth=out_depth)
        super().__init__({
            "push": In(stream.Signature(RESP_READ_JOB, always_ready=True)),
            "full_qp": In(range(num_qps)), "full": Out(1),
            "flush": In(stream.Signature(unsigned(8), always_ready=True)),
            "o": Out(stream.Signature(RESP_READ_PACKET)),
            "level_qp": In(range(num_qps)), "level": Out(range(rd_depth + 1)),
            "hold": In(num_qps),
            "done": Out(stream.Signature(unsigned(8), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        q = m.submodules.queue = self._queue
        g = m.submodules.gen = self._gen
        wiring.connect(m, wiring.flipped(self.push), q.push)
        wiring.connect(m, wiring.flipped(self.flush), q.flush)
        m.d.comb += [q.full_qp.eq(self.full_qp), self.full.eq(q.full), g.cancel.eq(q.cancel),
                     q.level_qp.eq(self.level_qp), self.level.eq(q.level), q.hold.eq(self.hold),
                     self.done.valid.eq(g.ret.valid & g.ret.payload.done),
                     self.done.payload.eq(g.ret.payload.qp)]
        wiring.connect(m, q.turn, g.turn)
        wiring.connect(m, g.ret, q.ret)
        wiring.connect(m, g.o, wiring.flipped(self.o))
        return m
