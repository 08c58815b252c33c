"""The IB CM's QPs in the endpoint: its share of the QP pool and its writes of the QP table."""

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cm.cm_records import first_zero
from rocegen.gateware.roce.ibcm.ibcm_layouts import QP_GRANT, QP_SET, int_param
from rocegen.gateware.roce.layouts import (
    CONTEXT_WRITE,
    PSN_SET,
    QP_SERVICE,
    QPN_BASE,
    TRAFFIC_CONFIG,
    QpState,
    check_num_qps,
    qp_index,
)
from rocegen.gateware.roce.read.read_layouts import READ_LIMIT
from rocegen.wire.cm import UDP_SPORT_BASE

__all__ = ["IbCmQps"]

#: The log2 of the path MTU of IB MTU code c is c + 7 (256 bytes: code 1).
_MTU_LOG2 = 7


class IbCmQps(wiring.Component):
    """The QPs of the IB CM's passive side
    (:class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive`) in the endpoint: grants
    them from the QP pool it shares with the UDP 17185 connection manager, and writes their
    contexts and starting PSNs into the QP table (through
    :class:`~rocegen.gateware.roce.requester.qp_control.QpControl`).

    Parameters
    ----------
    num_qps : int
        QPs of the endpoint (1..256), QP numbers from 256.
    ack_every_log2 : int
        AckReq on every 2^n-th packet inside long messages, as the other manager's QPs
        (0..7).
    reads : bool
        The endpoint has a READ requester: each QP opened gets its READ limit (``rd_limit``).
    max_rd_atomic : int
        With ``reads``: the most READs a QP may have outstanding (1..16).
    max_timeout : int
        The longest ACK timeout code a QP opened gets (0..31; 0: none longer than the REQ's):
        a REQ's longer one (or its 0, never) is cut to this, as the path MTU is.
    service_ports : tuple of int
        The TCP ports (0..65535, distinct) whose connections gateware services serve (the rping
        server, the SEND echo, the rping client), service ``j`` those of ``service_ports[j]``:
        their QPs are told on ``service[j]`` and marked in ``served[j]``. Default none.
    service_active : tuple of bool
        For each of ``service_ports``: True when its connections are those the FPGA asks for
        (to that port of the peer: the rping client), False (default) for those the peers ask
        for (on our port).

    Ports
    -----
    qp_req : In(stream.Signature(0))
        The passive side wants a QP ...
    qp_grant : Out(stream.Signature(QP_GRANT))
        ... answered: ``ok`` and its QP number, or none free.
    qp_free : In(stream.Signature(24))
        A QP (a QP number this block granted) given back: written RESET, then free.
    qp_set : In(stream.Signature(QP_SET))
        A QP to open (RTS) or to put in the error state (:data:`QP_SET`).
    others : In(num_qps)
        Bit k: QP k is held by the other manager (its ``qp_open``).
    pool_idle : In(1)
        The other manager looks up no free QP in this cycle nor the next and takes none: a
        change of ``held`` from the next cycle (a grant, a QP given back) is seen by its next
        look-up, and no look-up sees ``held`` change before its decision.
    held : Out(num_qps)
        Bit k: QP k is this block's (granted, not yet given back). A register.
    live : Out(num_qps)
        Bit k: QP k is open (a ``qp_set`` opened it and none has closed it, nor has it been
        given back). A register, set and cleared as the ``qp_set`` or ``qp_free`` is taken up.
    tclass : In(TRAFFIC_CONFIG)
        DSCP and ECN of the QPs opened.
    qp_ctl : Out(stream.Signature(CONTEXT_WRITE))
        Context writes. Opened: state RTS, the peer's address and QP, the remote region
        ``qp_set`` states (R_Key and base: those a REP stated for a connection we asked for;
        0 for one the peer asked for, whose peer states its buffers in its own way, e.g.
        rping's SEND), path MTU 2^(``path_mtu`` + 7), UDP source port ``0xC000 | k``, DSCP
        and ECN from ``tclass``, ``ack_every_log2``, the ACK timeout (``qp_set``'s, at most
        ``max_timeout``) and its retry counts. Closed: all zero in state ERROR. Given back:
        all zero (RESET).
    qp_psn : Out(stream.Signature(PSN_SET))
        An opened QP's PSNs: the one it sends from (``qp_set``'s ``psn``) and the one its
        responder expects (``epsn``).
    rd_limit : Out(stream.Signature(READ_LIMIT)), with ``reads``
        An opened QP's READ limit: the smaller of its initiator depth and ``max_rd_atomic``.
    service : Out(stream.Signature(QP_SERVICE)).array(len(service_ports))
        Service ``j``'s QPs: one opened for ``service_ports[j]`` (``open`` set), offered with
        its writes once its ``rq_flush`` is taken; one of its QPs closed or given back (``open``
        clear, with its writes; a QP put in error and later given back is told twice).
    rq_flush : Out(stream.Signature(8)), with ``service_ports``
        With each ``service`` event: the QP index, whose receive buffers are to be flushed
        (at an open, those the user left on the QP for its next connection; at a close, the
        service's).
    served : Out(num_qps).array(len(service_ports))
        Bit k of ``served[j]``: QP k's work requests and receive buffers are service ``j``'s
        (its completions go there): set when it is opened for ``service_ports[j]``, cleared
        when this block grants it again or the other manager holds it (``others``). Registers.

    Behaviour
    ---------
    One thing at a time, in this order of precedence: a ``qp_set`` (its writes offered from
    registers the cycle after it is seen, at once; ``qp_set.ready`` in the cycle after the
    last is taken), a ``qp_free`` (its write likewise, ``qp_free.ready`` in the first cycle
    with ``pool_idle`` after it is taken; the QP free from the next cycle), a ``qp_req`` in a
    cycle with ``pool_idle`` (the lowest QP neither manager holds, held from the next cycle,
    offered on ``qp_grant`` from then; ``ok`` low when there is none, ``qpn`` then meaning
    nothing). Backpressure: each handshake waits for its peer; nothing else is done
    meanwhile.
    """

    def __init__(self, num_qps, *, ack_every_log2=4, reads=False, max_rd_atomic=16,
                 max_timeout=0, service_ports=(), service_active=None):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        self.ack_every_log2 = int_param("ack_every_log2", ack_every_log2, 0, 7)
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        self.reads = reads
        self.max_rd_atomic = int_param("max_rd_atomic", max_rd_atomic, 1, 16)
        self.max_timeout = int_param("max_timeout", max_timeout, 0, 31)
        self.service_ports = tuple(service_ports)
        for p in self.service_ports:
            int_param("each service port", p, 0, 0xFFFF)
        self.service_active = tuple(service_active or (False,) * len(self.service_ports))
        if len(self.service_active) != len(self.service_ports) or \
                not all(isinstance(a, bool) for a in self.service_active):
            raise ValueError(f"service_active must be {len(self.service_ports)} bools, not "
                             f"{service_active!r}")
        sides = list(zip(self.service_ports, self.service_active, strict=True))
        if len(set(sides)) != len(sides):
            raise ValueError(f"service_ports must be distinct on each side, not "
                             f"{self.service_ports}")
        members = {
            "qp_req": In(stream.Signature(0)),
            "qp_grant": Out(stream.Signature(QP_GRANT)),
            "qp_free": In(stream.Signature(24)),
            "qp_set": In(stream.Signature(QP_SET)),
            "others": In(num_qps),
            "pool_idle": In(1),
            "held": Out(num_qps),
            "live": Out(num_qps),
            "tclass": In(TRAFFIC_CONFIG),
            "qp_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "qp_psn": Out(stream.Signature(PSN_SET)),
        }
        if reads:
            members["rd_limit"] = Out(stream.Signature(READ_LIMIT))
        if self.service_ports:
            k = len(self.service_ports)
            members.update({"service": Out(stream.Signature(QP_SERVICE)).array(k),
                            "rq_flush": Out(stream.Signature(8)),
                            "served": Out(num_qps).array(k)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        held, live = Signal(n), Signal(n)
        m.d.comb += [self.held.eq(held), self.live.eq(live)]
        found, first = first_zero(held | self.others, n)
        pending = self._writes(m)
        if self.service_ports:
            self._served(m)
        st = self.qp_set.payload

        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.qp_set.valid):
                    self._set_writes(m, st)
                    self._service(m, st.qpn, st.open, st.port, st.active)
                    m.d.sync += live.bit_select(self._index(st.qpn), 1).eq(st.open)
                    m.next = "SET"
                with m.Elif(self.qp_free.valid):
                    m.d.sync += self._context(self.qp_free.payload, QpState.RESET)
                    self._service(m, self.qp_free.payload, C(0, 1), None, None)
                    m.d.sync += live.bit_select(self._index(self.qp_free.payload), 1).eq(0)
                    m.next = "FREE"
                with m.Elif(self.qp_req.valid & self.pool_idle):
                    m.d.comb += self.qp_req.ready.eq(1)
                    m.d.sync += [self.qp_grant.payload.ok.eq(found),
                                 self.qp_grant.payload.qpn.eq(QPN_BASE + first)]
                    with m.If(found):
                        m.d.sync += held.bit_select(first, 1).eq(1)
                        if self.service_ports:
                            m.d.comb += self._unserve.bit_select(first, 1).eq(1)
                    m.next = "GRANT"
            with m.State("GRANT"):
                m.d.comb += self.qp_grant.valid.eq(1)
                with m.If(self.qp_grant.ready):
                    m.next = "IDLE"
            with m.State("SET"):
                with m.If(~pending):
                    m.d.comb += self.qp_set.ready.eq(1)
                    m.next = "IDLE"
            with m.State("FREE"):
                with m.If(~pending & self.pool_idle):
                    m.d.comb += self.qp_free.ready.eq(1)
                    m.d.sync += held.bit_select(self._index(self.qp_free.payload), 1).eq(0)
                    m.next = "IDLE"
        return m

    def _index(self, qpn):
        return qp_index(qpn, self.num_qps)

    def _writes(self, m):
        """The write registers: each offered while its ``valid`` is set, cleared when it is
        taken. Returns a signal high while one is still offered."""
        outs = [self.qp_ctl, self.qp_psn] + ([self.rd_limit] if self.reads else []) + \
            ([self.rq_flush] if self.service_ports else [])
        for o in outs:
            with m.If(o.ready):
                m.d.sync += o.valid.eq(0)
        pending = Signal()
        m.d.comb += pending.eq(Cat(o.valid for o in outs).any())
        if self.service_ports:
            # (the service's event after its QP's flush: an open's receive buffers are then
            # the service's alone)
            self._svc_pend = Signal(len(self.service_ports))
            m.d.comb += pending.eq(Cat(o.valid for o in outs).any() | self._svc_pend.any())
            for j, svc in enumerate(self.service):
                m.d.comb += svc.valid.eq(self._svc_pend[j] & ~self.rq_flush.valid)
                with m.If(svc.valid & svc.ready):
                    m.d.sync += self._svc_pend[j].eq(0)
        return pending

    def _context(self, qpn, state):
        """Assignments: the context write of ``qpn``, all zero in ``state``, offered."""
        c = self.qp_ctl.payload
        return [self.qp_ctl.valid.eq(1), c.qp.eq(self._index(qpn)), c.context.eq(0),
                c.context.state.eq(state)]

    def _set_writes(self, m, st):
        """The writes of ``qp_set`` ``st``: an open's context, PSN and READ limit; a close's
        context in ERROR."""
        c = self.qp_ctl.payload.context
        idx = self._index(st.qpn)
        m.d.sync += self._context(st.qpn, Mux(st.open, QpState.RTS, QpState.ERROR))
        with m.If(st.open):
            m.d.sync += [
                c.peer_ip.eq(st.peer_ip), c.peer_qpn.eq(st.peer_qpn),
                c.pmtu_log2.eq(st.path_mtu + _MTU_LOG2), c.udp_sport.eq(UDP_SPORT_BASE | idx),
                c.dscp.eq(self.tclass.dscp), c.ecn.eq(self.tclass.ecn),
                c.ack_every_log2.eq(self.ack_every_log2), c.timeout.eq(self._timeout(st.ack_timeout)),
                c.retry_cnt.eq(st.retry_count), c.rnr_retry.eq(st.rnr_retry_count),
                c.rkey.eq(st.rkey), c.base_va.eq(st.base),
                self.qp_psn.valid.eq(1), self.qp_psn.payload.qp.eq(idx),
                self.qp_psn.payload.psn.eq(st.psn), self.qp_psn.payload.epsn.eq(st.epsn)]
            if self.reads:
                depth = Mux(st.initiator_depth > self.max_rd_atomic, self.max_rd_atomic,
                            st.initiator_depth)
                m.d.sync += [self.rd_limit.valid.eq(1), self.rd_limit.payload.qp.eq(idx),
                             self.rd_limit.payload.limit.eq(depth)]

    def _timeout(self, code):
        """The ACK timeout of a QP whose REQ asked for ``code``: at most ``max_timeout``."""
        ours = self.max_timeout
        if ours == 0:
            return code
        return Mux((code == 0) | (code > ours), ours, code)

    def _served(self, m):
        """The ``served`` registers: set by :meth:`_service`'s opens (``_serve``), cleared by a
        grant (``_unserve``) and by the other manager's QPs."""
        n = self.num_qps
        self._serve = [Signal(n, name=f"serve_{j}") for j in range(len(self.service_ports))]
        self._unserve = Signal(n)
        for served, serve in zip(self.served, self._serve, strict=True):
            m.d.sync += served.eq((served & ~self._unserve & ~self.others) | serve)

    def _service(self, m, qpn, is_open, port, active):
        """With ``service_ports``: the ``service`` (and ``rq_flush``) offers of an open for a
        service's ``port`` (on its side, ``active``) or of a close or give-back (``is_open``
        low) of a served QP."""
        if not self.service_ports:
            return
        idx = self._index(qpn)
        flush = [self.rq_flush.valid.eq(1), self.rq_flush.payload.eq(idx)]
        for j, (p, side) in enumerate(zip(self.service_ports, self.service_active, strict=True)):
            svc = self.service[j]
            tell = [*flush, self._svc_pend[j].eq(1), svc.payload.qp.eq(idx)]
            with m.If(is_open & (port == p) & (active == side) if port is not None else 0):
                m.d.comb += self._serve[j].bit_select(idx, 1).eq(1)
                m.d.sync += [*tell, svc.payload.open.eq(1)]
            with m.If(~is_open & self.served[j].bit_select(idx, 1)):
                m.d.sync += [*tell, svc.payload.open.eq(0)]
