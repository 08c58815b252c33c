"""How a gateware service takes its events: one at a time, a QP's opening or closing first,
then a work request's completion, then a receive completion."""

from amaranth.hdl import Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import COMPLETION, QP_SERVICE, WORK_REQUEST, CplStatus
from rocegen.gateware.roce.responder.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RecvOpcode,
    RecvStatus,
)
from rocegen.gateware.roce.services.service_layouts import SERVICE_EVENT, EvKind

__all__ = ["take_event", "service_members"]


def service_members():
    """The ports every service has: ``opened`` (its QPs opened and closed), ``recv`` /
    ``recv_cpl`` (its receive buffers and their completions), ``wr`` / ``cpl`` (its work
    requests and theirs)."""
    return {
        "opened": In(stream.Signature(QP_SERVICE)),
        "recv": Out(stream.Signature(RECV_POST)),
        "recv_cpl": In(stream.Signature(RECV_COMPLETION)),
        "wr": Out(stream.Signature(WORK_REQUEST)),
        "cpl": In(stream.Signature(COMPLETION)),
    }


def take_event(m, service, ev, reads):
    """Takes the first event ``service`` is offered (its ports ``opened``, ``cpl``,
    ``recv_cpl``, in that order) into the register ``ev`` (:data:`SERVICE_EVENT`) and sets the
    addresses of the read ports ``reads`` to its QP (their data is the QP's in the next cycle).
    Returns whether one of a QP in the table (``service.num_qps``) was taken; one outside is
    taken and dropped. ``ready`` of an input depends on the ``valid`` of those before it."""
    o, c, r = service.opened, service.cpl, service.recv_cpl
    new = Signal(SERVICE_EVENT)
    with m.If(o.valid):
        m.d.comb += [o.ready.eq(1), new.qp.eq(o.payload.qp), new.kind.eq(EvKind.CLOSE)]
        with m.If(o.payload.open):
            m.d.comb += new.kind.eq(EvKind.OPEN)
    with m.Elif(c.valid):
        m.d.comb += [c.ready.eq(1), new.kind.eq(EvKind.CPL), new.qp.eq(c.payload.qp),
                     new.wr_id.eq(c.payload.wr_id),
                     new.ok.eq(c.payload.status == CplStatus.OK),
                     new.flushed.eq(c.payload.status == CplStatus.FLUSHED)]
    with m.Elif(r.valid):
        m.d.comb += [r.ready.eq(1), new.kind.eq(EvKind.RECV), new.qp.eq(r.payload.qp),
                     new.wr_id.eq(r.payload.wr_id),
                     new.ok.eq(r.payload.status == RecvStatus.OK),
                     new.flushed.eq(r.payload.status == RecvStatus.FLUSHED),
                     new.length.eq(r.payload.length),
                     new.is_send.eq(r.payload.opcode == RecvOpcode.SEND)]
    m.d.comb += [port.addr.eq(new.qp) for port in reads]
    m.d.sync += ev.eq(new)
    return (o.valid | c.valid | r.valid) & (new.qp < service.num_qps)
