"""The user's work-request and receive ports shared with a gateware service: requests merged,
completions sent back by the QP they belong to."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, check_num_qps
from rocegen.gateware.roce.responder.resp_layouts import RECV_COMPLETION, RECV_POST

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
        Their completions, the same way.

    Behaviour
    ---------
    Requests: a round-robin merge (:class:`~rocegen.gateware.lib.stream_arbiter.StreamArbiter`),
    latency 0, one request a cycle. Completions: latency 0, each to one side by ``served``
    of its QP in that cycle (a QP outside the table: the user's), ``ready`` that side's. The
    user keeps to its own QPs: a request the user posts on a served QP completes to the
    service, and the other way round.
    """

    def __init__(self, num_qps):
        self.num_qps = check_num_qps(num_qps)
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
        for name, post, _ in PORTS:
            arb = m.submodules[f"{name}_arbiter"] = StreamArbiter(post, 2)
            wiring.connect(m, wiring.flipped(getattr(self, f"user_{name}")), arb.i[0])
            wiring.connect(m, wiring.flipped(getattr(self, f"svc_{name}")), arb.i[1])
            wiring.connect(m, arb.o, wiring.flipped(getattr(self, name)))
            cpl = "cpl" if name == "wr" else "recv_cpl"
            i, user, svc = (getattr(self, f"{p}{cpl}") for p in ("", "user_", "svc_"))
            qp = i.payload.qp
            ours = (qp < self.num_qps) & self.served.bit_select(qp, 1)
            m.d.comb += [user.payload.eq(i.payload), svc.payload.eq(i.payload),
                         user.valid.eq(i.valid & ~ours), svc.valid.eq(i.valid & ours),
                         i.ready.eq(ours & svc.ready | ~ours & user.ready)]
        return m
