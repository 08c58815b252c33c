"""The READ requester's own READ requests: the rest of a READ after a lost response, asked for
again without rewinding the QP's later requests."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import (
    PACKET_DESC,
    QP_CONTEXT,
    AtomicOp,
    QpState,
    WrSource,
    check_num_qps,
)
from rocegen.gateware.roce.read.read_layouts import READ_REISSUE
from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import ATOMIC_OPERAND_BYTES

__all__ = ["ReadResend", "check_resend_depth"]


def check_resend_depth(depth):
    """``depth`` if it is a power of two 2..256; else ``TypeError`` (not an integer) or
    ``ValueError``, naming the parameter."""
    if not isinstance(depth, int) or isinstance(depth, bool):
        raise TypeError(f"depth must be an integer, not {depth!r}")
    if not 2 <= depth <= 256 or depth & (depth - 1):
        raise ValueError(f"depth must be a power of two 2..256, not {depth}")
    return depth


class ReadResend(wiring.Component):
    """READ request descriptors for the selective reissues of the READ placement
    (:class:`~rocegen.gateware.roce.read.read_place.ReadPlace` ``reissue`` with ``send`` set): one
    RDMA READ request per record, for the transmit path's descriptor arbiter, built as the
    scheduler builds a READ request (:func:`~rocegen.gateware.roce.requester.segmenter.describe_packet`).

    Parameters
    ----------
    num_qps : int
        QPs in the QP table (1..256).
    depth : int
        Records the queue holds (a power of two 2..256; default 16), besides the one in the
        output register.

    Ports
    -----
    i : In(stream.Signature(READ_REISSUE, always_ready=True))
        Reissues; those with ``send`` 0 (the retry engine's rewind sends them) are ignored.
    ctx_qp, ctx : Out(8), In(QP_CONTEXT)
        To a context read port of the QP table: ``ctx_qp`` is the QP of the record at the head
        of the queue, held while it waits; ``ctx`` its context, from a combinational read or
        one cycle after ``ctx_qp`` (a synchronous read port), either works.
    o : Out(stream.Signature(PACKET_DESC))
        One READ request descriptor per record sent: opcode RDMA READ request, BTH PSN
        ``psn``, AckReq, RETH virtual address ``va``, the context's R_Key, DMA length
        ``length``, no payload (``length`` 0, ``last``), destination QPN ``peer_qpn``,
        ``peer_ip``, ``udp_sport``, ``dscp`` and ``ecn`` from the context, ``wr_id`` and
        ``qp`` from the record, ``src`` USER; every other field 0. Registered. A record of an
        atomic (``atomic``) is its request again: opcode COMPARE_SWAP or FETCH_ADD, the
        AtomicETH's target ``va`` with the context's R_Key, the 16 bytes of operands at
        ``local_addr`` as payload, no RETH; the traffic generator's (``gen``) with ``src``
        GENERATOR and ``imm`` ``gen_imm``, so that the packet builder makes its operands again
        from its ``wr_id`` and ``imm``, as the first time.
    gen_imm : In(32)
        The traffic generator's ``imm`` (its current run's: an atomic of the generator is
        outstanding only while its run goes on).
    dropped : Out(1)
        Pulses (combinationally) for a record with ``send`` set that finds the queue full:
        no request is sent for it.
    stale : Out(1)
        Pulses for a record discarded at the head of the queue because its QP is not in RTS
        (failed, closed or set up again since) or outside the table: no request is sent.

    Behaviour
    ---------
    * Order: records leave in the order they came, whatever their QP.
    * Latency: a record taken in cycle t is at the queue's head in cycle t+1, its context is
      taken as read in cycle t+2 and its descriptor is offered on ``o`` from cycle t+3 when
      ``o`` was free. ``o`` is a register: it does not depend combinationally on the queue's
      memory nor on ``ctx``.
    * Throughput: one record every 2 cycles (the head's context is read before it is used).
    * Backpressure: ``o.valid`` is held, with its payload, until ``o.ready``; the queue holds
      the records meanwhile. The input is never held: a record that does not fit is dropped
      and counted (``dropped``). A stale record leaves without waiting for ``o``.
    * The state checked is the QP table's as of at most two cycles before the record leaves.
    """

    def __init__(self, num_qps, depth=16):
        check_num_qps(num_qps)
        check_resend_depth(depth)
        self.num_qps, self.depth = num_qps, depth
        super().__init__({
            "i": In(stream.Signature(READ_REISSUE, always_ready=True)),
            "ctx_qp": Out(8),
            "ctx": In(QP_CONTEXT),
            "o": Out(stream.Signature(PACKET_DESC)),
            "gen_imm": In(32),
            "dropped": Out(1),
            "stale": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        q = m.submodules.queue = fifo.SyncFIFO(width=READ_REISSUE.size, depth=self.depth)
        i = self.i
        take = i.valid & i.payload.send
        m.d.comb += [q.w_data.eq(i.payload), q.w_en.eq(take),
                     self.dropped.eq(take & ~q.w_rdy)]

        # the head's context: read with the head's QP, usable once the head has stayed a cycle
        head = data.View(READ_REISSUE, q.r_data)
        seen = Signal()
        m.d.sync += seen.eq(q.r_rdy & ~q.r_en)
        m.d.comb += self.ctx_qp.eq(head.qp)
        ctx = self.ctx
        ready = q.r_rdy & seen
        live = (ctx.state == QpState.RTS) & (head.qp < self.num_qps)

        d = Signal(PACKET_DESC)
        m.d.comb += [
            d.wr_id.eq(head.wr_id), d.qp.eq(head.qp), d.dest_qpn.eq(ctx.peer_qpn),
            d.opcode.eq(opc.OP_RC_RDMA_READ_REQUEST), d.psn.eq(head.psn), d.ack_req.eq(1),
            d.has_reth.eq(1), d.va.eq(head.va), d.rkey.eq(ctx.rkey), d.dma_len.eq(head.length),
            d.last.eq(1), d.src.eq(WrSource.USER), d.peer_ip.eq(ctx.peer_ip),
            d.udp_sport.eq(ctx.udp_sport), d.dscp.eq(ctx.dscp), d.ecn.eq(ctx.ecn),
        ]
        # (an atomic asked for again: the request whole, its operands read again from local
        # memory as its payload, the same PSN)
        with m.If(head.atomic != AtomicOp.NONE):
            m.d.comb += [
                d.opcode.eq(Mux(head.atomic == AtomicOp.COMPARE_SWAP, opc.OP_RC_COMPARE_SWAP,
                                opc.OP_RC_FETCH_ADD)),
                d.has_reth.eq(0), d.dma_len.eq(0), d.local_addr.eq(head.local_addr),
                d.length.eq(ATOMIC_OPERAND_BYTES),
            ]
            with m.If(head.gen):
                m.d.comb += [d.src.eq(WrSource.GENERATOR), d.imm.eq(self.gen_imm)]

        o = self.o
        free = ~o.valid | o.ready
        with m.If(o.valid & o.ready):
            m.d.sync += o.valid.eq(0)
        with m.If(ready & ~live):
            m.d.comb += [q.r_en.eq(1), self.stale.eq(1)]
        with m.Elif(ready & free):
            m.d.comb += q.r_en.eq(1)
            m.d.sync += [o.valid.eq(1), o.payload.eq(d)]
        return m
