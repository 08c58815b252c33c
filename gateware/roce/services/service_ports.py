"""The user's work-request and receive ports shared with a gateware service: requests merged,
completions sent back by the QP they belong to."""

from amaranth.hdl import Array, Cat, Module, Mux, Signal
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
    ``recv_cpl``) shared by the user's logic and the gateware services (the rping server, the
    SEND echo), each of which posts on the QPs a connection manager opened for it
    (``served``).

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256): the bits of each ``served``.
    rq_depth : int
        Receive buffers a QP can have posted (the responder's, 1..1024): the most the user can
        have outstanding on one.
    services : int
        Services (1..4): service ``j``'s ports are ``svc_*[j]``.

    Ports
    -----
    served : In(num_qps).array(services)
        Bit k of ``served[j]``: QP k's completions are service ``j``'s (a QP is at most one
        service's).
    user_wr, svc_wr[j] : In(stream.Signature(WORK_REQUEST))
        The user's and the services' work requests ...
    wr : Out(stream.Signature(WORK_REQUEST))
        ... merged, for the requester.
    cpl : In(stream.Signature(COMPLETION))
        The requester's completions of ``wr`` ...
    user_cpl, svc_cpl[j] : Out(stream.Signature(COMPLETION))
        ... each to the service whose QP it is, else to the user.
    user_recv, svc_recv[j], recv : In, In, Out(stream.Signature(RECV_POST))
        Receive buffers, the same way.
    recv_cpl : In(stream.Signature(RECV_COMPLETION))
    user_recv_cpl, svc_recv_cpl[j] : Out(stream.Signature(RECV_COMPLETION))
        Their completions: those of the user's buffers to the user, the others to the service
        whose QP it is.

    Behaviour
    ---------
    Requests: a round-robin merge (:class:`~rocegen.gateware.lib.stream_arbiter.StreamArbiter`),
    latency 0, one request a cycle. Work-request completions: latency 0, each to the service
    whose QP it is in that cycle, else (a QP outside the table too) to the user; ``ready`` that
    side's. The user keeps its work requests to its own QPs.

    Receive buffers: the user's may wait on a QP for its next connection (the responder keeps
    them), and a connection manager may then open that QP for a service. So the block counts
    the user's buffers outstanding on each QP (posted, less completed), and a receive
    completion goes to the user while its QP is no service's or the user still has buffers on
    it; else to the service (a QP's buffers complete in the order posted, and the opener
    flushes the user's buffers before the service posts its own). A buffer the user posts on
    a service's QP is refused: it completes at once on ``user_recv_cpl``, FLUSHED, as on a QP
    in error (ahead of the responder's completions, one a cycle; ``user_recv.ready`` then
    follows ``user_recv_cpl.ready``).
    """

    def __init__(self, num_qps, rq_depth, services=1):
        self.num_qps = check_num_qps(num_qps)
        if not isinstance(rq_depth, int) or isinstance(rq_depth, bool) or \
                not 1 <= rq_depth <= 1024:
            raise ValueError(f"rq_depth must be an integer 1..1024, not {rq_depth!r}")
        if not isinstance(services, int) or isinstance(services, bool) or \
                not 1 <= services <= 4:
            raise ValueError(f"services must be an integer 1..4, not {services!r}")
        self.rq_depth, self.services = rq_depth, services
        members = {"served": In(num_qps).array(services)}
        for name, post, done in PORTS:
            cpl = "cpl" if name == "wr" else "recv_cpl"
            members.update({
                f"user_{name}": In(stream.Signature(post)),
                f"svc_{name}": In(stream.Signature(post)).array(services),
                name: Out(stream.Signature(post)),
                cpl: In(stream.Signature(done)),
                f"user_{cpl}": Out(stream.Signature(done)),
                f"svc_{cpl}": Out(stream.Signature(done)).array(services),
            })
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        arbs = {}
        for name, post, _ in PORTS:
            arb = arbs[name] = m.submodules[f"{name}_arbiter"] = \
                StreamArbiter(post, 1 + self.services)
            for j, svc in enumerate(getattr(self, f"svc_{name}")):
                wiring.connect(m, wiring.flipped(svc), arb.i[1 + j])
            wiring.connect(m, arb.o, wiring.flipped(getattr(self, name)))
        wiring.connect(m, wiring.flipped(self.user_wr), arbs["wr"].i[0])
        c = self.cpl
        owner = self._owner(m, c.payload.qp)
        self._split(m, c, self.user_cpl, self.svc_cpl, owner, ~owner.any())
        self._receive(m, arbs["recv"].i[0])
        return m

    def _owner(self, m, qp):
        """Bit j: QP ``qp`` is service j's."""
        owner = Signal(self.services)
        m.d.comb += owner.eq(Cat((qp < self.num_qps) & s.bit_select(qp, 1) for s in self.served))
        return owner

    @staticmethod
    def _split(m, i, user, svcs, owner, mine, hold=0):
        """``i`` to ``user`` when ``mine``, else to the service of ``owner`` (``hold``: the
        user's side is taken by something else in this cycle)."""
        m.d.comb += [user.valid.eq(i.valid & mine & ~hold), user.payload.eq(i.payload),
                     i.ready.eq(mine & user.ready & ~hold)]
        for j, svc in enumerate(svcs):
            ours = ~mine & owner[j]
            m.d.comb += [svc.valid.eq(i.valid & ours), svc.payload.eq(i.payload)]
            with m.If(ours):
                m.d.comb += i.ready.eq(svc.ready)

    def _receive(self, m, arb_in):
        """The user's receive buffers: counted per QP, refused on the services' QPs; the
        receive completions split by the counts."""
        n = self.num_qps
        held = Array(Signal(range(self.rq_depth + 1), name=f"held_{k}") for k in range(n))
        post, cpl, user = self.user_recv, self.recv_cpl, self.user_recv_cpl
        p, c = post.payload, cpl.payload
        refuse = post.valid & self._owner(m, p.qp).any()
        # a refused post completes FLUSHED at once, ahead of the responder's completions
        m.d.comb += [arb_in.payload.eq(p), arb_in.valid.eq(post.valid & ~refuse),
                     post.ready.eq(Mux(refuse, user.ready, arb_in.ready))]
        owner = self._owner(m, c.qp)
        mine = ~owner.any() | (held[c.qp[:8]] != 0)
        self._split(m, cpl, user, self.svc_recv_cpl, owner, mine, hold=refuse)
        with m.If(refuse):
            m.d.comb += [user.valid.eq(1), user.payload.eq(0), user.payload.qp.eq(p.qp),
                         user.payload.wr_id.eq(p.wr_id), user.payload.opcode.eq(RecvOpcode.SEND),
                         user.payload.status.eq(RecvStatus.FLUSHED)]
        up = arb_in.valid & arb_in.ready
        down = cpl.valid & cpl.ready & mine & (c.qp < n)
        for k in range(n):
            inc = up & (p.qp == k)
            dec = down & (c.qp == k)
            with m.If(inc & ~dec):
                m.d.sync += held[k].eq(held[k] + 1)
            with m.Elif(dec & ~inc & (held[k] != 0)):   # (never below 0)
                m.d.sync += held[k].eq(held[k] - 1)
