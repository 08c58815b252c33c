"""The responder's notification point: a CNP to the peer of a QP whose requests arrive marked
ECN CE, at most one per QP per interval, merged into the stream of the responder's ACKs."""

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps
from rocegen.gateware.roce.responder.resp_layouts import (
    CNP_CONFIG,
    CNP_DSCP,
    CNP_INTERVAL_BITS,
    CNP_MARK,
    RESP_RESPONSE,
)
from rocegen.wire.roce import CNP_INTERVAL_NS, cnp_interval_cycles

__all__ = ["RespCnp", "cnp_interval_cycles", "CNP_INTERVAL_NS", "DEFAULT_CNP_INTERVAL",
           "TIME_BITS"]

#: Bits of the cycle counter the notification point stamps its CNPs with.
TIME_BITS = 32


#: :data:`CNP_INTERVAL_NS` at the CMAC clock (322.265625 MHz): 1290 cycles.
DEFAULT_CNP_INTERVAL = cnp_interval_cycles(322_265_625)

_ENTRY = data.StructLayout({"sent": 1, "time": TIME_BITS})


class RespCnp(wiring.Component):
    """Notification point of the RC responder (DCQCN's NP): for a request that arrived marked
    ECN CE, a CNP to the QP's peer, unless the QP had one less than ``interval`` cycles before;
    the CNPs merged into the stream of the responder's ACKs and NAKs.

    Parameters
    ----------
    num_qps : int
        QPs (1..256): the depth of the memory of the time of each QP's last CNP.
    interval : int
        Cycles a QP's CNPs are apart at least, after reset (0 .. 2^24 - 1; 0: a CNP for every
        marked request; default :data:`DEFAULT_CNP_INTERVAL`, 4 us at 322.27 MHz).
    dscp : int
        The DSCP of the CNPs (0..63; default 48, as ConnectX sends them).

    Ports
    -----
    ce : In(stream.Signature(CNP_MARK, always_ready=True))
        One transfer per request that arrived marked CE from its QP's peer
        (:data:`~rocegen.gateware.roce.responder.resp_layouts.CNP_MARK`: the QP and where its CNP goes).
        Marks of a QP outside ``num_qps`` are ignored.
    cfg : In(stream.Signature(CNP_CONFIG, always_ready=True))
        A new ``interval``, in force for the marks taken from the next cycle on.
    i : In(stream.Signature(RESP_RESPONSE))
        The responder's answers (ACKs, NAKs).
    o : Out(stream.Signature(RESP_RESPONSE))
        The answers of ``i``, unchanged and in order, and the CNPs between them (``cnp`` 1; ``qp``,
        ``dest_qpn``, ``dst_ip``, ``src_port`` of the mark; ``dscp``; ``syndrome``, ``psn``,
        ``msn`` 0).
    issued, suppressed, dropped : Out(1)
        One-cycle pulses, one per mark taken, in the cycle after it: a CNP was made; none, the
        QP's last one being less than the interval old; none, a CNP made before it still
        waiting to be handed on.

    Behaviour
    ---------
    * Rule: a mark taken in cycle t is decided in cycle t + 1, by the time stamp of the QP's
      last CNP in a memory (read in cycle t, transparent for the write of cycle t, so marks of
      one QP may come back to back): a CNP is made if the QP has had none since reset, or its
      last was made ``interval`` or more cycles before; then the QP's time stamp is the
      current cycle. Time stamps are :data:`TIME_BITS`-bit cycle counts: a QP whose last CNP
      lies a multiple of 2^32 cycles back (13 s at 322 MHz) plus less than ``interval`` may
      miss one CNP.
    * One CNP waits to be handed on; a CNP made while another waits is dropped (``dropped``;
      CNPs are advisory) and the QP's time stamp is left as it was, so its next mark may make
      one. Nothing ever holds ``ce``.
    * Priority: the waiting CNP is offered on ``o`` first; otherwise ``i`` passes through
      combinationally (``i.ready`` is ``o.ready`` while no CNP waits). ``o.payload`` is
      selected by a register (a CNP waits or not), never by ``i.valid``: the answers' path into
      the transmitter's queue stays as short as without the notification point. An answer
      waits for at most one CNP, which waits only while ``o.ready`` is low (the transmitter's
      queue full) and takes one place in it, so the answers of other QPs are delayed by one
      short packet at most and never reordered.
    * Latency: a mark taken in cycle t with nothing waiting and ``i`` idle has its CNP offered
      on ``o`` in cycle t + 2.
    """

    def __init__(self, num_qps, *, interval=DEFAULT_CNP_INTERVAL, dscp=CNP_DSCP):
        check_num_qps(num_qps)
        if not isinstance(interval, int) or isinstance(interval, bool):
            raise TypeError(f"interval must be an integer number of cycles, not {interval!r}")
        if not 0 <= interval < 1 << CNP_INTERVAL_BITS:
            raise ValueError(f"interval must be 0..{(1 << CNP_INTERVAL_BITS) - 1} cycles, not "
                             f"{interval}")
        if not isinstance(dscp, int) or isinstance(dscp, bool) or not 0 <= dscp <= 63:
            raise ValueError(f"dscp must be a DSCP value 0..63, not {dscp!r}")
        self.num_qps, self.interval, self.dscp = num_qps, interval, dscp
        super().__init__({
            "ce": In(stream.Signature(CNP_MARK, always_ready=True)),
            "cfg": In(stream.Signature(CNP_CONFIG, always_ready=True)),
            "i": In(stream.Signature(RESP_RESPONSE)),
            "o": Out(stream.Signature(RESP_RESPONSE)),
            "issued": Out(1),
            "suppressed": Out(1),
            "dropped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        i, o, ce = self.i, self.o, self.ce
        now = Signal(TIME_BITS)
        m.d.sync += now.eq(now + 1)
        interval = Signal(CNP_INTERVAL_BITS, init=self.interval)
        with m.If(self.cfg.valid):
            m.d.sync += interval.eq(self.cfg.payload.interval)

        # each QP's last CNP: read with the mark, written in the cycle it is decided
        mem = m.submodules.last = Memory(shape=_ENTRY, depth=self.num_qps, init=[])
        wp = mem.write_port()
        rp = mem.read_port(transparent_for=(wp,))
        mark, mark_v = Signal(CNP_MARK), Signal()
        m.d.comb += rp.addr.eq(ce.payload.qp)
        m.d.sync += [mark.eq(ce.payload), mark_v.eq(ce.valid & (ce.payload.qp < self.num_qps))]

        # the decision, and the CNP waiting to be handed on
        elapsed = Signal(TIME_BITS)
        m.d.comb += elapsed.eq(now - rp.data.time)
        due = ~rp.data.sent | (elapsed >= interval)
        cnp, waiting = Signal(CNP_MARK), Signal()
        leaves = waiting & o.ready
        issue = mark_v & due & (~waiting | leaves)
        m.d.comb += [
            wp.addr.eq(mark.qp), wp.data.sent.eq(1), wp.data.time.eq(now), wp.en.eq(issue),
            self.issued.eq(issue), self.suppressed.eq(mark_v & ~due),
            self.dropped.eq(mark_v & due & waiting & ~leaves),
        ]
        with m.If(issue):
            m.d.sync += [cnp.eq(mark), waiting.eq(1)]
        with m.Elif(leaves):
            m.d.sync += waiting.eq(0)

        # the waiting CNP first, else the answers
        m.d.comb += [o.valid.eq(i.valid | waiting), i.ready.eq(o.ready & ~waiting)]
        with m.If(~waiting):
            m.d.comb += o.payload.eq(i.payload)
        with m.Else():
            m.d.comb += [o.payload.qp.eq(cnp.qp), o.payload.cnp.eq(1),
                         o.payload.dest_qpn.eq(cnp.dest_qpn), o.payload.dst_ip.eq(cnp.dst_ip),
                         o.payload.src_port.eq(cnp.src_port), o.payload.dscp.eq(self.dscp)]
        return m
