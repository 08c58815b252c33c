"""The user's work-request and receive ports shared with a gateware service: requests merged,
completions sent back by the QP they belong to."""

from amaranth.hdl import Array, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, check_num_qps
from rocegen.gateware.roce.responder.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RecvOpcode,
    RecvStatus,
)

__all__ = ["ServicePorts"]

#: The merged ports: (name, layout of the requests, layout of their completions).
PORTS = (("wr", WORK_REQUEST, COMPLETION), ("recv", RECV_POST, RECV_COMPLETION))


class ServicePorts(wiring.Component):
    """The endpoint's work-request port (``wr`` / ``cpl``) and receive port (``recv`` /
    ``recv_cpl``) shared by the user's logic and a gateware service (the rping server), which
    posts on the QPs a connection manager opened for it (``served``).

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256): the bits of ``served``.
    rq_depth : int
        Receive buffers a QP can have posted (the responder's, 1..1024): the most the user can
        have outstanding on one.

    Ports
    -----
    served : In(num_qps)
        Bit k: QP k's completions are the service's.
    user_wr, svc_wr : In(stream.Signature(WORK_REQUEST))
        The user's and the service's work requests ...
    wr : Out(stream.Signature(WORK_REQUEST))
        ... merged, for the requester.
    cpl : In(stream.Signature(COMPLETION))
        The requester's completions of ``wr`` ...
    user_cpl, svc_cpl : Out(stream.Signature(COMPLETION))
        ... each to the service when its QP is served, else to the user.
    user_recv, svc_recv, recv : In, In, Out(stream.Signature(RECV_POST))
        Receive buffers, the same way.
    recv_cpl : In(stream.Signature(RECV_COMPLETION))
    user_recv_cpl, svc_recv_cpl : Out(stream.Signature(RECV_COMPLETION))
        Their completions: those of the user's buffers to the user, the others to the service.

    Behaviour
    ---------
    Requests: a round-robin merge (:class:`~rocegen.gateware.lib.stream_arbiter.StreamArbiter`),
    latency 0, one request a cycle. Work-request completions: latency 0, each to the service
    when its QP is ``served`` in that cycle, else (a QP outside the table too) to the user;
    ``ready`` that side's. The user keeps its work requests to its own QPs.

    Receive buffers: the user's may wait on a QP for its next connection (the responder keeps
    them), and a connection manager may then open that QP for the service. So the block counts
    the user's buffers outstanding on each QP (posted, less completed), and a receive
    completion goes to the user while its QP is not served or the user still has buffers on
    it; else to the service (a QP's buffers complete in the order posted, and the opener
    flushes the user's buffers before the service posts its own). A buffer the user posts on
    a served QP is refused: it completes at once on ``user_recv_cpl``, FLUSHED, as on a QP in
    error (ahead of the responder's completions, one a cycle; ``user_recv.ready`` then
    follows ``user_recv_cpl.ready``).
    """

    def __init__(self, num_qps, rq_depth):
        self.num_qps = check_num_qps(num_qps)
        if not isinstance(rq_depth, int) or isinstance(rq_depth, bool) or \
                not 1 <= rq_depth <= 1024:
            raise ValueError(f"rq_depth must be an integer 1..1024, not {rq_depth!r}")
        self.rq_depth = rq_depth
        members = {"served": In(num_qps)}
        for name, post, done in PORTS:
            cpl = "cpl" if name == "wr" else "recv_cpl"
            members.update({
                f"user_{name}": In(stream.Signature(post)),
                f"svc_{name}": In(stream.Signature(post)),
                name: Out(stream.Signature(post)),
                cpl: In(stream.Signature(done)),
                f"user_{cpl}": Out(stream.Signature(done)),
                f"svc_{cpl}": Out(stream.Signature(done)),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        arbs = {}
        for name, post, _ in PORTS:
            arb = arbs[name] = m.submodules[f"{name}_arbiter"] = StreamArbiter(post, 2)
            wiring.connect(m, wiring.flipped(getattr(self, f"svc_{name}")), arb.i[1])
            wiring.connect(m, arb.o, wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.user_wr), arbs["wr"].i[0])
        c = self.cpl
        ours = self._served(c.payload.qp)
        m.d.comb += [self.user_cpl.payload.eq(c.payload), self.svc_cpl.payload.eq(c.payload),
                     self.user_cpl.valid.eq(c.valid & ~ours), self.svc_cpl.valid.eq(c.valid & ours),
                     c.ready.eq(Mux(ours, self.svc_cpl.ready, self.user_cpl.ready))]
        self._receive(m, arbs["recv"].i[0])
        return m

    def _served(self, qp):
        return (qp < self.num_qps) & self.served.bit_select(qp, 1)

    def _receive(self, m, arb_in):
        """The user's receive buffers: counted per QP, refused on served QPs; the receive
        completions split by the counts."""
        n = self.num_qps
        held = Array(Signal(range(self.rq_depth + 1), name=f"held_{k}") for k in range(n))
        post, cpl, user, svc = self.user_recv, self.recv_cpl, self.user_recv_cpl, self.svc_recv_cpl
        p, c = post.payload, cpl.payload
        refuse = post.valid & self._served(p.qp)
        # a refused post completes FLUSHED at once, ahead of the responder's completions
        m.d.comb += [arb_in.payload.eq(p), arb_in.valid.eq(post.valid & ~refuse),
                     post.ready.eq(Mux(refuse, user.ready, arb_in.ready))]
        mine = (c.qp >= n) | ~self.served.bit_select(c.qp, 1) | (held[c.qp[:8]] != 0)
        with m.If(refuse):
            m.d.comb += [user.valid.eq(1), user.payload.qp.eq(p.qp),
                         user.payload.wr_id.eq(p.wr_id), user.payload.opcode.eq(RecvOpcode.SEND),
                         user.payload.status.eq(RecvStatus.FLUSHED)]
        with m.Else():
            m.d.comb += [user.valid.eq(cpl.valid & mine), user.payload.eq(c)]
        m.d.comb += [svc.payload.eq(c), svc.valid.eq(cpl.valid & ~mine),
                     cpl.ready.eq(Mux(mine, user.ready & ~refuse, svc.ready))]
        up = arb_in.valid & arb_in.ready
        down = cpl.valid & cpl.ready & mine & (c.qp < n)
        for k in range(n):
            inc = up & (p.qp == k)
            dec = down & (c.qp == k)
            with m.If(inc & ~dec):
                m.d.sync += held[k].eq(held[k] + 1)
            with m.Elif(dec & ~inc & (held[k] != 0)):   # (never below 0)
                m.d.sync += held[k].eq(held[k] - 1)
