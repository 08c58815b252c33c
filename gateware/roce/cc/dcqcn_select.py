from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cc.dcqcn_layouts import CNP_QP, DCQCN_OP
from rocegen.gateware.roce.layouts import check_num_qps

__all__ = ["DcqcnSelect", "WINDOW"]

#: Cycles after an operation on a QP is chosen during which no other operation on it is chosen
#: (its state is written back ``WINDOW + 1`` cycles after the choice).
WINDOW = 5


class DcqcnSelect(wiring.Component):
    """Selection stage of :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine`: which QP the
    pipeline works on in this cycle, a CNP or a visit.

    Parameters
    ----------
    num_qps : int
        QPs of the table (1..256).
    fifo_depth : int
        CNPs that may wait (2..64): an :class:`amaranth.lib.fifo.SyncFIFOBuffered` (its head
        in a register).

    Ports
    -----
    cnp : In(stream.Signature(CNP_QP, always_ready=True))
        A CNP for a QP; ignored when the QP is outside the table or ``bypass`` is high.
    bypass : In(1)
        The bypass of the configuration in force.
    hold : In(1)
        Start no operation in this cycle (a configuration waits to be put in force).
    op : Out(DCQCN_OP)
        The operation chosen in the cycle before (a register): ``valid``, ``cnp`` (else a
        visit) and ``qp``; it reads the QP's state in this cycle.
    dropped : Out(1)
        A CNP found the queue full (a pulse in the cycle after it).

    Behaviour
    ---------
    * Queue: a CNP taken in cycle t joins the queue unless the queue's memory holds
      ``fifo_depth`` - 1 CNPs at the start of t (then it is dropped and counted); the oldest
      CNP moves from the memory to the head register in a cycle where the head is empty or
      taken, so a CNP taken in t into an empty queue may be chosen from t + 2.
    * Rule, in each cycle without ``hold``: the oldest queued CNP if its QP had no operation
      chosen in the :data:`WINDOW` cycles before; else a visit of the round robin's QP if that
      QP had none (the round robin then moves to the next QP, wrapping after the last); else
      nothing. So each QP is visited at least once every ``num_qps`` cycles in which no CNP is
      started (once every :data:`WINDOW` + 1 cycles when ``num_qps`` is smaller).
    """

    def __init__(self, num_qps, fifo_depth=8):
        check_num_qps(num_qps)
        if not isinstance(fifo_depth, int) or isinstance(fifo_depth, bool) \
                or not 2 <= fifo_depth <= 64:
            raise ValueError(f"fifo_depth must be an integer 2..64, not {fifo_depth!r}")
        self.num_qps, self.fifo_depth = num_qps, fifo_depth
        super().__init__({
            "cnp": In(stream.Signature(CNP_QP, always_ready=True)),
            "bypass": In(1),
            "hold": In(1),
            "op": Out(DCQCN_OP),
            "dropped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        fifo = m.submodules.fifo = SyncFIFOBuffered(width=8, depth=self.fifo_depth)
        take = self.cnp.valid & (self.cnp.payload.qp < n) & ~self.bypass
        m.d.comb += [fifo.w_en.eq(take), fifo.w_data.eq(self.cnp.payload.qp)]
        m.d.sync += self.dropped.eq(take & ~fifo.w_rdy)

        # the operations chosen in the last WINDOW cycles (the last one is ``op``)
        pick = Signal(DCQCN_OP)
        recent = [self.op] + [Signal(DCQCN_OP, name=f"recent{k}") for k in range(1, WINDOW)]
        m.d.sync += [recent[k].eq(recent[k - 1]) for k in range(1, WINDOW)]
        m.d.sync += self.op.eq(pick)

        def busy(qp):
            hits = [r.valid & (r.qp == qp) for r in recent]
            out = hits[0]
            for h in hits[1:]:
                out = out | h
            return out

        scan = Signal(range(n))
        head = fifo.r_data
        cnp_ok = fifo.r_rdy & ~busy(head)
        scan_ok = ~busy(scan)
        with m.If(~self.hold):
            with m.If(cnp_ok):
                m.d.comb += [pick.valid.eq(1), pick.cnp.eq(1), pick.qp.eq(head),
                             fifo.r_en.eq(1)]
            with m.Elif(scan_ok):
                m.d.comb += [pick.valid.eq(1), pick.qp.eq(scan)]
                m.d.sync += scan.eq(Mux(scan == n - 1, 0, scan + 1))
        return m
