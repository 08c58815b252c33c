"""The IB CM: what one MAD record (or a connect or disconnect) makes the CM do, with its
connection table and its timers; the passive side with the active side beside it."""

from fractions import Fraction

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.mac.pause_time import quanta_elapsed
from rocegen.gateware.roce.ibcm.ibcm_active import ActiveDecisions
from rocegen.gateware.roce.ibcm.ibcm_decide import PSN_TAPS, PassiveDecisions, Src, pow2
from rocegen.gateware.roce.ibcm.ibcm_layouts import (
    CM_EVENT,
    CONNECT,
    CONNECTION,
    MAD_RECORD,
    QP_GRANT,
    QP_SET,
    REPLY_RECORD,
    TICK_NS,
    TIME_BITS,
    VERDICT_COUNTERS,
    ConnState,
    ReplyKind,
    int_param,
)
from rocegen.gateware.roce.layouts import MAX_QPS, QPN_BASE
from rocegen.wire import ibcm as I

__all__ = ["IbCmPassive", "PSN_TAPS", "COUNTERS", "MAX_QPNS", "DEFAULT_QPNS",
           "DEFAULT_TIME_WAIT_NS", "tick_cycles"]

#: The passive side's counter strobes: the reference model's counters of the same names (those
#: of the passive side).
COUNTERS = ("rx_mads", "tx_mads", *VERDICT_COUNTERS.values(), "answered_bad_version",
            "answered_unsupported", "class_port_info", "req_rejected", "req_duplicate",
            "req_stale", "rep_unknown", "rtu_unknown", "rtu_duplicate", "mra_unknown",
            "rej_unknown", "dreq_unknown", "dreq_duplicate", "drep_unknown", "established",
            "rejected", "retransmits", "rep_timeouts", "timewait_exits", "disconnects",
            "disconnect_unknown", "dreq_timeouts", "connects", "connect_no_qp", "rep_duplicate",
            "req_timeouts")

#: The most QP numbers ``qpns`` may name (a flip-flop each).
MAX_QPNS = 4096

#: ``qpns`` by default: the endpoint's QP numbers.
DEFAULT_QPNS = range(QPN_BASE, QPN_BASE + MAX_QPS)

#: ``time_wait_ns`` by default: the model's (4.096 us x 2^14, its default local ACK timeout).
DEFAULT_TIME_WAIT_NS = I.cm_timeout_ns(14)


def tick_cycles(clk_hz):
    """Cycles of ``clk_hz`` (Hz; a float is read as the decimal it prints as) in a tick of
    :data:`~rocegen.gateware.roce.ibcm.ibcm_layouts.TICK_NS`, exactly (a ``Fraction``).
    TypeError / ValueError naming ``clk_hz`` for a clock that is not a number, or so slow that
    a tick would be shorter than a cycle."""
    if isinstance(clk_hz, bool) or not isinstance(clk_hz, (int, float)):
        raise TypeError(f"clk_hz must be a number of Hz, not {clk_hz!r}")
    if not 0 < clk_hz < float("inf"):
        raise ValueError(f"clk_hz must be a positive finite number of Hz, not {clk_hz!r}")
    hz = Fraction(repr(clk_hz)) if isinstance(clk_hz, float) else Fraction(clk_hz)
    cycles = hz * TICK_NS / 10 ** 9
    if cycles < 1:
        raise ValueError(f"clk_hz must be at least 244140.625 Hz (a tick of {TICK_NS} ns "
                         f"lasts a cycle or more), not {clk_hz!r}")
    return cycles


def _qpns(qpns):
    if not isinstance(qpns, range):
        raise TypeError(f"qpns must be a range of QP numbers, not {qpns!r}")
    if qpns.step != 1 or not 1 <= len(qpns) <= MAX_QPNS or qpns.start < 2 or \
            qpns.stop > 1 << 24:
        raise ValueError(f"qpns must be a range of 1..{MAX_QPNS} QP numbers from 2 to 2^24-1 "
                         f"with step 1, not {qpns!r}")
    return qpns


class IbCmPassive(ActiveDecisions, PassiveDecisions, wiring.Component):
    """The passive side of the IB CM (``rdma_listen``/``rdma_accept`` as librdmacm's peer sees
    them): decides, for one MAD record at a time, the reply and what changes in the connection
    table, and runs the table's timers, as the reference model
    ``rocegen.sim.models.ibcm.IbCm`` does.

    Parameters
    ----------
    ports : iterable of int
        The TCP ports listened on (0..65535; service IDs ``0x0000000001060000 | port``).
    clk_hz : int or float
        The clock's frequency in Hz (a float is read as the decimal it prints as): at least
        244140.625, so that a tick of 4.096 us lasts a cycle or more.
    connections : int
        Entries of the connection table (1..256): connections in REP_SENT, ESTABLISHED or
        time-wait at once. Make it at least the QPs the pool may give this CM.
    qpns : range
        The QP numbers the pool may give this CM (1..:data:`MAX_QPNS` of them, step 1;
        default the endpoint's, 256..511): a flip-flop each notes a packet on it
        (``data_seen``). A connection on a QP outside is established by its RTU only.
    responder_resources, initiator_depth : int
        The RDMA READs we serve at once and may have outstanding at once (0..255).
    first_comm_id : int
        Our first communication ID (1..2^32-1); the next ones count up (0xFFFFFFFF wraps to 1).
    psn_seed : int
        The first starting PSN (1..2^24-1); each next one is the last shifted right by one,
        XORed with :data:`PSN_TAPS` when the bit shifted out is 1 (a maximal-length LFSR: the
        PSNs repeat after 2^24 - 1 connections).
    psn_from_req : bool
        Our starting PSN is the REQ's own instead (``psn_seed`` unused): for an endpoint whose
        QPs count one PSN for both directions, as the model's ``psn="req"``.
    max_mtu : int
        The largest path MTU in bytes our QPs take (256..4096, an IB MTU): ``qp_set``'s
        ``path_mtu`` is the smaller of the REQ's and this.
    time_wait_ns : int
        How long a connection stays in time-wait (0..4096 x 2^31 ns), rounded up to ticks;
        default the model's, 4.096 us x 2^14 (its default local ACK timeout).
    first_tid : int
        The transaction ID of our first REQ or DREQ (0..2^64-1); the next ones count up.
    cm_response_timeout, max_cm_retries : int
        Our REQs' wait for the REP (2^t ticks, t 0..31) and how often they are sent again
        (0..15).
    local_ack_timeout, retry_count : int
        The ACK timeout (0..31) and retry count (0..7) of the QPs of connections we asked
        for (our REQs state them).
    max_peer_response_timeout : int
        The longest wait for the peer's answer to our REQ, REP or DREQ (0..31; default 31:
        none cut): the CM response timeout a REQ states (the peer's REQ, or ours:
        ``cm_response_timeout``, which our REQs still state), when longer, is cut to this for
        our timers (Linux's REQs state 20, 4.3 s, sent again 15 times: a minute before the
        QP of a host that vanished is free again).

    Ports
    -----
    i : In(stream.Signature(MAD_RECORD))
        The MAD to act on (:class:`~rocegen.gateware.roce.ibcm.ibcm_receive.IbCmReceiver`'s
        ``o``); read while it is held, taken (``i.ready``) when its reply has gone (an echo's
        when its last beat has: the reply builder reads the receiver's MAD until then).
    local_ip : In(32)
        Our IPv4 address (the REQ's ``cma_hdr`` must name it).
    region : In(I.REGION.layout)
        The memory region our REPs advertise.
    data_seen : In(stream.Signature(24, always_ready=True))
        The QP number of each packet the receive path takes on a QP (the model's
        ``data_seen``): the first on a connection that waits for its RTU establishes it.
    connect : In(stream.Signature(CONNECT))
        A connection to ask for (librdmacm's ``rdma_connect``): taken up as a record is (the
        three take turns), taken (``ready``) when its REQ has gone (or no QP was free).
    connected : Out(stream.Signature(CM_EVENT))
        How each connection asked for went: established when its REP came (the QP), or
        refused (the REJ's reason), or no REP came (``TIMEOUT``), or no QP or table entry was
        free (``NO_QP``). A register held until ``ready``; meanwhile the CM takes nothing new
        up (records, disconnects, connects, timer actions wait).
    disconnect : In(stream.Signature(24))
        A QP number whose connection to close (the user's, or a QP that failed:
        :class:`~rocegen.gateware.roce.ibcm.ibcm_closer.IbCmCloser`); taken up as a record
        is (the two take turns), taken (``ready``) when its DREQ has gone.
    qp_req : Out(stream.Signature(0))
        A QP is wanted from the pool, answered on ``qp_grant``.
    qp_grant : In(stream.Signature(QP_GRANT))
        The pool's answer: ``ok`` and the QP number, or none free.
    qp_free : Out(stream.Signature(24))
        A QP given back to the pool: a REJ of a connection that had its REP, a REJ
        ``TIMEOUT`` sent, the end of a time-wait.
    qp_set : Out(stream.Signature(QP_SET))
        A connection's QP to be set up (``open``: when a REQ takes it, beside its REP) or put
        in the error state (when the connection enters time-wait); see :data:`QP_SET`. A
        record is not taken (``i.ready``) before its ``qp_set`` is; an action sets up none.
    o : Out(stream.Signature(REPLY_RECORD))
        A MAD to send: the reply, to the MAD's sender (``src_ip``, ``src_qp``, ``pkey``), or a
        timer's REP or REJ ``TIMEOUT``, to the REQ's sender (its address, QP1, the REQ's
        P_Key); for :class:`~rocegen.gateware.roce.ibcm.ibcm_reply.IbCmReply`.
    <name> : Out(1), for each name of :data:`COUNTERS`
        High for one cycle when the model would count that counter: ``rx_mads`` when a record
        is taken, ``tx_mads`` when a MAD leaves, the others at the decision (for
        ``retransmits``, ``rep_timeouts``, ``timewait_exits`` and an ``established`` by a
        packet: at the entry's action).

    Behaviour
    ---------
    A Get of ClassPortInfo (class version 2) gets its GetResp (the request's header echoed);
    another Get or Set is echoed (``ECHO``: the reply builder sends the MAD the receiver holds
    as a GetResp) with the status ``BAD_VERSION`` when its class version is not 2, else
    ``UNSUPPORTED_METHOD_ATTR``, as Linux's MAD layer answers one it has no agent for.
    A REQ is matched against the table by its sender and communication ID: a duplicate of one
    in REP_SENT gets the same REP again (its REQ's transaction ID; ``region`` as it is then),
    of one in time-wait a REJ
    ``STALE_CONN``, of an established one nothing. Else it is checked, in the model's order:
    service ID a listened port (``INVALID_SERVICE_ID``), transport RC
    (``INVALID_TRANSPORT_TYPE``), path MTU an IB MTU code (``INVALID_MTU``), no RDMA READs asked
    of us when ``responder_resources`` is 0 (``INSUFFICIENT_RESP_RESOURCES``), no live
    connection with the sender's QP (``STALE_CONN``), ``cma_hdr`` version 0, IPv4, the sender's
    address and ``local_ip`` (``CONSUMER_DEFINED``); then a free table entry and a QP from the
    pool (``NO_QP`` without either). A REQ taken gets a REP: our communication ID, the QP, our
    starting PSN, responder resources ``min(ours, its initiator depth)``, initiator depth
    ``min(ours, its responder resources)``, ``region``. An RTU moves its connection from
    REP_SENT to ESTABLISHED. A DREQ of a connection (by our ID, its sender, its ID and our QPN)
    moves it to time-wait and gets a DREP, again when it is in time-wait; a DREQ of no
    connection gets a DREP with its IDs swapped (as Linux answers). A REJ of a connection not in
    time-wait (by our ID, or by its sender's ID when it names none of ours) frees a REP_SENT
    one and its QP, moves an established one to time-wait. A REP gets a REJ
    ``INVALID_COMM_ID`` (this side makes no REQ). An MRA of our REP makes it wait longer (below).
    MRAs, DREPs, RTUs and REJs of no connection, MADs with another verdict: nothing.
    A disconnect of the QP of an established connection moves it to DREQ_SENT: its DREQ
    (our IDs, the peer's QPN, our next transaction ID) to the peer's QP1, the QP put in the
    error state (``qp_set``); a disconnect of any other QP (none of ours, not established,
    already closing) is counted (``disconnect_unknown``) and does nothing. In DREQ_SENT a DREP,
    the peer's DREQ (answered by a DREP) or a REJ moves the connection to time-wait.

    Timers. Their resolution is a tick of 4.096 us (``TICK_NS``, the CM's unit: a CM time
    value t is 2^t ticks), counted from the clock by a fractional prescaler: after k cycles
    exactly ``floor(k / c)`` ticks have passed (``c`` cycles a tick, :func:`tick_cycles`), so a
    tick comes at most a cycle after its time, never before. A MAD's timer counts from
    ``t0``, the tick in which the passive side took the MAD up: a wait of d ticks is due at
    tick ``t0 + d + 1``, between d and d + 1 ticks (and a cycle) after the MAD came (the
    model's time), never before. A REQ taken arms its REP's timer: d = 2^t, t its local CM
    response timeout (at most ``max_peer_response_timeout``); when due, the REP is sent again
    (as for a duplicate REQ), due again 2^t ticks after the last due tick, at most its max CM
    retries times; due after those, REJ ``TIMEOUT`` (message OTHER, our CA GUID as ARI), the
    QP given back and the entry freed (the model forgets the connection). An MRA of the REP
    sets it due its service timeout's 2^t ticks from the MRA's ``t0`` (the retries stay). A
    DREQ or REJ that moves a connection to time-wait arms its end, d = ``time_wait_ns`` rounded
    up to ticks (so up to a tick more than the model waits): then the entry is freed and its
    QP given back. A DREQ taken up arms its timer as a REP's, d = 2^t (t as for the REP: the
    REQ's, at most ``max_peer_response_timeout``; ours for a connection we asked for): sent
    again as often as the REQ's max CM retries; due after those, the connection enters
    time-wait (``dreq_timeouts``), its end counted from the DREQ's last due tick.

    The scan. While no record waits, the table is read one entry per cycle round and round,
    each entry checked the cycle after: one due (its timer, or a packet on its QP below) is
    read again and acted on (a record may have changed it). A record is taken up first; its
    matching reads every entry and notes a due one too (the first from the background scan's
    place on, else the first), acted on after the record. So an entry is acted on at most
    N + 3 cycles (N: ``connections``) after it is due while nothing else is going on; the
    records (at most one between two actions) and the actions of other due entries (each at
    most once before it: the scan goes round) take their cycles first, their handshakes'
    waits included. The timers' worst-case lateness, from the model's time to the action: a
    tick (two for a time-wait whose length is not a whole number of ticks), a cycle, N + 3
    cycles and that work. A message that comes less than that after a timer is due may be
    handled before it (the model, on time, acts on the timer first).

    Packets (``data_seen``): a QP number of ``qpns`` sets the QP's flip-flop; a REQ taking the
    QP clears it. An entry in REP_SENT whose QP's flip-flop is set is due: established
    (``established`` counted) when the scan comes to it. A record that names it before finds
    it established, counted then (an RTU counts ``rtu_duplicate`` too: the model counted the
    establishment at the packet).

    The active side. A connect takes a free table entry and a QP from the pool (else
    ``connected`` says ``NO_QP``: nothing is sent) and sends the REQ (our next communication
    ID, starting PSN from the LFSR, transaction ID; our READ depths, ``max_mtu``, the port's
    service ID, ``src_port`` and the addresses in its ``cma_hdr``): REQ_SENT, its timer armed
    as a REP's (2^``cm_response_timeout`` ticks, at most 2^``max_peer_response_timeout``,
    ``max_cm_retries`` times again, then REJ
    ``TIMEOUT``, the QP given back, ``connected`` says ``TIMEOUT``; an MRA of the REQ makes it
    wait its service timeout). The REP of a connection in REQ_SENT opens the QP (``qp_set``:
    the REP's QPN, the REP's PSN to send from and our REQ's to expect (each message states the
    PSN its sender expects, as Linux's CM reads them), the REP's RNR retry count,
    the READ depths negotiated, the region its private data states as ``rkey`` and ``base``)
    and is answered with the RTU: established, ``connected`` says so. A REP again gets the RTU
    again; a REJ of a connection in REQ_SENT frees it and its QP (``connected``: the reason).
    A REQ never names a connection we asked for; an RTU of one is unknown.

    Not here, where the model differs: the ``accept`` hook (every REQ that passes the checks
    is taken). Communication IDs are not checked against those in use (they would repeat
    after 2^32 connections).

    Latency: a MAD record is matched against the whole table, one entry per cycle: if it is
    offered in cycle t while the passive side is idle (else when the action under way is
    done), the decision is made in cycle t + ``connections`` + 2; then each handshake it needs
    (``qp_req``, ``qp_grant``, ``qp_free``, ``o``, in that order) is offered in the cycle after
    the previous one and waits for its peer, and ``i.ready`` is high in the cycle after the
    last (t + ``connections`` + 3 when there is none; t + ``connections`` + 4 for a reply taken
    at once). An action: the entry read again in the cycle after it is found (or after
    ``i.ready``), acted on the cycle after; its handshakes (``o``, then ``qp_free``) follow as
    a record's. The table is one memory of ``connections`` entries (:data:`CONNECTION`, 308
    bits) with one read and one write port; the time is a 33-bit tick counter.
    """

    def __init__(self, *, ports, clk_hz, connections=16, qpns=DEFAULT_QPNS,
                 responder_resources=1, initiator_depth=1, first_comm_id=1, psn_seed=1,
                 time_wait_ns=DEFAULT_TIME_WAIT_NS, psn_from_req=False, max_mtu=4096,
                 first_tid=1, cm_response_timeout=20, max_cm_retries=15, local_ack_timeout=14,
                 retry_count=7, max_peer_response_timeout=31):
        ports = list(ports)
        for p in ports:
            int_param("each port", p, 0, 0xFFFF)
        self.ports = sorted(set(ports))
        self.tick = tick_cycles(clk_hz)
        self.clk_hz = clk_hz
        self.connections = int_param("connections", connections, 1, 256)
        self.qpns = _qpns(qpns)
        self.responder_resources = int_param("responder_resources", responder_resources, 0, 255)
        self.initiator_depth = int_param("initiator_depth", initiator_depth, 0, 255)
        self.first_comm_id = int_param("first_comm_id", first_comm_id, 1, (1 << 32) - 1)
        self.psn_seed = int_param("psn_seed", psn_seed, 1, (1 << 24) - 1)
        self.first_tid = int_param("first_tid", first_tid, 0, (1 << 64) - 1)
        self.cm_response_timeout = int_param("cm_response_timeout", cm_response_timeout, 0, 31)
        self.max_cm_retries = int_param("max_cm_retries", max_cm_retries, 0, 15)
        self.local_ack_timeout = int_param("local_ack_timeout", local_ack_timeout, 0, 31)
        self.retry_count = int_param("retry_count", retry_count, 0, 7)
        self.max_peer_response_timeout = int_param(
            "max_peer_response_timeout", max_peer_response_timeout, 0, 31)
        self.time_wait_ns = int_param("time_wait_ns", time_wait_ns, 0, TICK_NS << 31)
        self.time_wait_ticks = -(-self.time_wait_ns // TICK_NS)
        if not isinstance(psn_from_req, bool):
            raise TypeError(f"psn_from_req must be a bool, not {psn_from_req!r}")
        self.psn_from_req = psn_from_req
        if max_mtu not in I.MTU_CODES.values():
            raise ValueError(f"max_mtu must be one of {sorted(I.MTU_CODES.values())} bytes, "
                             f"not {max_mtu!r}")
        self.max_mtu = max_mtu
        super().__init__({
            "i": In(stream.Signature(MAD_RECORD)),
            "local_ip": In(32),
            "region": In(I.REGION.layout),
            "data_seen": In(stream.Signature(24, always_ready=True)),
            "disconnect": In(stream.Signature(24)),
            "connect": In(stream.Signature(CONNECT)),
            "connected": Out(stream.Signature(CM_EVENT)),
            "qp_req": Out(stream.Signature(0)),
            "qp_grant": In(stream.Signature(QP_GRANT)),
            "qp_free": Out(stream.Signature(24)),
            "qp_set": Out(stream.Signature(QP_SET)),
            "o": Out(stream.Signature(REPLY_RECORD)),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        N = self.connections
        m.submodules.table = table = Memory(shape=CONNECTION, depth=N, init=[])
        rd, wr = table.read_port(domain="sync"), table.write_port()
        s = _State(N, self.first_comm_id, self.psn_seed, len(self.qpns), self.first_tid)
        rec = self.i.payload
        m.d.comb += [self.o.payload.eq(s.out), self.qp_set.valid.eq(s.set_valid),
                     self.qp_set.payload.eq(s.set)]
        with m.If(self.qp_set.ready):
            m.d.sync += s.set_valid.eq(0)
        with m.If(self.connected.ready):
            m.d.sync += self.connected.valid.eq(0)
        now = self._clock(m)
        self._packets(m, s, rd.data)
        self._due(m, s, rd.data, now)

        with m.FSM():
            with m.State("IDLE"):
                self._idle(m, s, rd, now)
            with m.State("SCAN"):
                self._scan(m, s, rd, rec)
                with m.If(s.idx == N):
                    m.next = "DECIDE"
            with m.State("DECIDE"):
                self._decide(m, s, wr, rec)
            with m.State("QP_REQ"):
                m.d.comb += self.qp_req.valid.eq(1)
                with m.If(self.qp_req.ready):
                    m.next = "QP_WAIT"
            with m.State("QP_WAIT"):
                m.d.comb += self.qp_grant.ready.eq(1)
                with m.If(self.qp_grant.valid):
                    m.next = "SEND"
                    with m.If(s.src == Src.CONNECT):
                        self._take_connect(m, s, wr, self.qp_grant.payload)
                    with m.Else():
                        self._take(m, s, wr, rec, self.qp_grant.payload)
            with m.State("TREAD"):
                m.d.comb += rd.addr.eq(s.act_idx)
                m.next = "TACT"
            with m.State("TACT"):
                self._act(m, s, wr, rd.data, now)
            self._handshakes(m, s)
        return m

    def _handshakes(self, m, s):
        """The states that wait for a peer: the QP given back, the MAD sent, the record taken;
        then back to the scan, or a due entry its matching noted."""
        with m.State("FREE"):
            m.d.comb += [self.qp_free.valid.eq(1), self.qp_free.payload.eq(s.hit_e.qpn)]
            with m.If(self.qp_free.ready):
                m.d.sync += s.then_free.eq(0)
                with m.If(s.timer):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "DONE"
        with m.State("SEND"):
            m.d.comb += self.o.valid.eq(1)
            with m.If(self.o.ready):
                self._count(m, "tx_mads")
                with m.If(s.then_free):
                    m.next = "FREE"
                with m.Elif(s.timer):
                    m.next = "IDLE"
                with m.Else():
                    m.next = "DONE"
        with m.State("DONE"):
            with m.If(~s.set_valid | self.qp_set.ready):
                m.d.comb += [self.i.ready.eq(s.src == Src.RECORD),
                             self.disconnect.ready.eq(s.src == Src.DISCONNECT),
                             self.connect.ready.eq(s.src == Src.CONNECT)]
                with m.If(s.src == Src.RECORD):
                    self._count(m, "rx_mads")
                with m.If(s.note):
                    m.d.sync += s.act_idx.eq(Mux(s.note_hi, s.note_hi_idx, s.note_idx))
                    m.next = "TREAD"
                with m.Else():
                    m.next = "IDLE"

    # ---- time, packets, due entries

    def _clock(self, m):
        """The time in ticks (wrapping): ``floor(k / c)`` ticks in k cycles."""
        now = Signal(TIME_BITS)
        step = quanta_elapsed(m, self.tick.numerator, self.tick.denominator, name="tick")
        m.d.sync += now.eq(now + step)
        return now

    def _qp_bit(self, qpn):
        """``(index, in range)``: the flip-flop of QP ``qpn`` among those of ``qpns``."""
        Q = self.qpns
        bits = max(1, (len(Q) - 1).bit_length())
        return (qpn - Q.start)[:bits], (qpn >= Q.start) & (qpn < Q.stop)

    def _packets(self, m, s, e):
        """``data_seen``: a flip-flop per QP of ``qpns`` set by a packet on it (a REQ taking
        the QP clears it, :meth:`_take`); ``s.seen_e``: that of entry ``e``'s QP."""
        idx, ok = self._qp_bit(self.data_seen.payload)
        with m.If(self.data_seen.valid & ok):
            m.d.sync += s.seen.bit_select(idx, 1).eq(1)
        e_idx, e_ok = self._qp_bit(e.qpn)
        m.d.comb += s.seen_e.eq(e_ok & s.seen.bit_select(e_idx, 1))

    def _due(self, m, s, e, now):
        """Of entry ``e`` (the read port's data): ``s.expired``, its timer is due;
        ``s.promote``, it waits for an RTU and a packet came on its QP; ``s.due``, either
        applies to its state (a timer: in REP_SENT, DREQ_SENT and TIMEWAIT)."""
        late = Signal(TIME_BITS)
        rep_sent = e.state == ConnState.REP_SENT
        waits = (e.state == ConnState.TIMEWAIT) | (e.state == ConnState.DREQ_SENT) | \
            (e.state == ConnState.REQ_SENT)
        m.d.comb += [late.eq(now - e.deadline), s.expired.eq(~late[-1]),
                     s.promote.eq(rep_sent & s.seen_e),
                     s.due.eq((rep_sent & (s.expired | s.seen_e)) | (waits & s.expired))]

    def _idle(self, m, s, rd, now):
        """Waiting for a record or a disconnect; meanwhile the background scan: entry ``bg``
        read, checked the cycle after (``bg_ev``), a due one acted on (once a QP set-up
        before it is taken). A record or a disconnect goes first (the entry read in that cycle
        is read again after it)."""
        m.d.comb += rd.addr.eq(s.bg)
        m.d.sync += s.bg_ev.eq(0)
        # records, disconnects and connects take turns: the first waiting after the last taken
        valid = Cat(self.i.valid, self.disconnect.valid, self.connect.valid)
        pick = Signal(Src)
        for off in (3, 2, 1):       # (the last assignment wins: the first after ``s.src``)
            for cur in Src:
                cand = (cur.value + off) % 3
                with m.If((s.src == cur) & valid[cand]):
                    m.d.comb += pick.eq(cand)
        with m.If(self.connected.valid):
            pass                    # (an event waits to be taken: nothing new until then)
        with m.Elif(valid.any()):
            m.d.sync += [s.idx.eq(0), s.ev.eq(0), s.hit.eq(0), s.stale.eq(0), s.free_ok.eq(0),
                         s.note.eq(0), s.note_hi.eq(0), s.t0.eq(now), s.timer.eq(0),
                         s.then_free.eq(0), s.src.eq(pick)]
            m.next = "SCAN"
        with m.Elif(s.bg_ev & s.due & ~s.set_valid):
            m.d.sync += s.act_idx.eq(s.bg_prev)
            m.next = "TREAD"
        with m.Else():
            m.d.sync += [s.bg_prev.eq(s.bg), s.bg.eq(self._after(s.bg)), s.bg_ev.eq(1)]

    def _after(self, idx):
        """The table entry after ``idx``, round."""
        return Mux(idx == self.connections - 1, 0, idx + 1)

    def _at(self, s, ticks):
        """The tick a wait of ``ticks`` from the record's ``t0`` is due at."""
        return (s.t0 + ticks + 1)[:TIME_BITS]

    def _act(self, m, s, wr, e, now):
        """Entry ``act_idx`` (``e``, read again) if still due: established by a packet; its
        REP sent again; REJ ``TIMEOUT``, freed, its QP given back; its DREQ sent again; its
        time-wait begun when no DREP came; the end of its time-wait, freed, its QP given back.
        The background scan goes on after it."""
        rep_sent = e.state == ConnState.REP_SENT
        dreq_sent = e.state == ConnState.DREQ_SENT
        m.d.comb += [wr.addr.eq(s.act_idx), wr.data.eq(e)]
        m.d.sync += [s.bg.eq(self._after(s.act_idx)), s.hit_e.eq(e), s.timer.eq(1)]
        m.next = "IDLE"
        to = (e.peer_ip, I.QP1, e.pkey)
        with m.If(s.promote):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.ESTABLISHED)]
            self._count(m, "established")
        req_sent = e.state == ConnState.REQ_SENT
        with m.Elif((rep_sent | req_sent) & s.expired & (e.retries != 0)):
            m.d.comb += [wr.en.eq(1), wr.data.retries.eq(e.retries - 1),
                         wr.data.deadline.eq(e.deadline + pow2(e.timeout))]
            with m.If(req_sent):
                m.d.sync += self._req_out(s, e)
            with m.Else():
                m.d.sync += self._rep(s, to, e)
            self._count(m, "retransmits")
            m.next = "SEND"
        with m.Elif((rep_sent | req_sent) & s.expired):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.FREE)]
            m.d.sync += self._reply(s, to, ReplyKind.REJ, e.local_comm_id, e.remote_comm_id,
                                    tid=e.tid, reason=I.RejReason.TIMEOUT,
                                    message=I.MsgResponse.OTHER, ari_guid=1)
            m.d.sync += s.then_free.eq(1)
            with m.If(req_sent):
                self._count(m, "req_timeouts")
                self._event(m, e, I.RejReason.TIMEOUT)
            with m.Else():
                self._count(m, "rep_timeouts")
            m.next = "SEND"
        with m.Elif(dreq_sent & s.expired & (e.retries != 0)):
            m.d.comb += [wr.en.eq(1), wr.data.retries.eq(e.retries - 1),
                         wr.data.deadline.eq(e.deadline + pow2(e.timeout))]
            m.d.sync += self._dreq(s, e, e.tid)
            self._count(m, "retransmits")
            m.next = "SEND"
        with m.Elif(dreq_sent & s.expired):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.TIMEWAIT),
                         wr.data.deadline.eq(e.deadline + self.time_wait_ticks)]
            self._count(m, "dreq_timeouts")
        with m.Elif((e.state == ConnState.TIMEWAIT) & s.expired):
            m.d.comb += [wr.en.eq(1), wr.data.state.eq(ConnState.FREE)]
            self._count(m, "timewait_exits")
            m.next = "FREE"

    # ---- matching

    def _scan(self, m, s, rd, rec):
        """One table entry read per cycle (``idx``), compared the cycle after (``ev``): the
        first entry the message names (a disconnect: by its QP; as a packet on its QP left
        it), whether the sender's QP has a live connection, the first free entry, the due
        entries."""
        N = self.connections
        m.d.comb += rd.addr.eq(s.idx)
        m.d.sync += [s.idx.eq(s.idx + 1), s.ev.eq(s.idx < N), s.ev_idx.eq(s.idx)]
        e = rd.data
        live = e.state != ConnState.FREE
        attr = rec.hdr.attribute_id
        by_id = e.local_comm_id == rec.remote_comm_id
        by_peer = (e.peer_ip == rec.src_ip) & (e.remote_comm_id == rec.local_comm_id)
        use_peer = (attr == I.ATTR_REQ) | ((attr == I.ATTR_REJ) & (rec.remote_comm_id == 0))
        # (a REQ names only the connections the peer asked for; a connect names none)
        by_peer &= ~(e.active & (attr == I.ATTR_REQ))
        named = Mux(s.src == Src.DISCONNECT, e.qpn == self.disconnect.payload,
                    Mux(s.src == Src.CONNECT, 0, Mux(use_peer, by_peer, by_id)))
        with m.If(s.ev):
            with m.If(live & named & ~s.hit):
                m.d.sync += [s.hit.eq(1), s.hit_idx.eq(s.ev_idx), s.hit_e.eq(e),
                             s.hit_promote.eq(s.promote)]
                with m.If(s.promote):
                    m.d.sync += s.hit_e.state.eq(ConnState.ESTABLISHED)
            with m.If(live & (e.state != ConnState.TIMEWAIT) & (e.peer_ip == rec.src_ip)
                      & (e.peer_qpn == rec.local_qpn) & ~e.active):
                m.d.sync += s.stale.eq(1)
            with m.If(~live & ~s.free_ok):
                m.d.sync += [s.free_ok.eq(1), s.free_idx.eq(s.ev_idx)]
            with m.If(s.due & ~s.note):
                m.d.sync += [s.note.eq(1), s.note_idx.eq(s.ev_idx)]
            with m.If(s.due & ~s.note_hi & (s.ev_idx >= s.bg)):
                m.d.sync += [s.note_hi.eq(1), s.note_hi_idx.eq(s.ev_idx)]

class _State:
    """The passive side's registers (and the read entry's comb flags)."""

    def __init__(self, n, first_comm_id, psn_seed, qps, first_tid):
        self.idx = Signal(range(n + 1))          # the entry read now
        self.ev = Signal()                       # an entry read last cycle is compared now
        self.ev_idx = Signal(range(n))
        self.hit = Signal()                      # the entry the message names ...
        self.hit_idx = Signal(range(n))
        self.hit_e = Signal(CONNECTION)          # ... and its contents (or the acted-on entry)
        self.hit_promote = Signal()              # ... which a packet established
        self.stale = Signal()                    # the sender's QP has a live connection
        self.free_ok = Signal()                  # a free entry ...
        self.free_idx = Signal(range(n))         # ... the first
        self.out = Signal(REPLY_RECORD)          # the reply
        self.next_cid = Signal(32, init=first_comm_id)     # our next communication ID
        self.psn = Signal(24, init=psn_seed)               # our next starting PSN
        self.tid = Signal(64, init=first_tid)    # our next REQ's or DREQ's transaction ID
        self.src = Signal(Src)                   # what was taken up: a record, a disconnect...
        # timers
        self.t0 = Signal(TIME_BITS)              # the tick the record was taken up in
        self.bg = Signal(range(n))               # the background scan's entry read now ...
        self.bg_ev = Signal()                    # ... one read last cycle checked now ...
        self.bg_prev = Signal(range(n))          # ... which
        self.note = Signal()                     # the matching's first due entry ...
        self.note_idx = Signal(range(n))
        self.note_hi = Signal()                  # ... and its first from ``bg`` on
        self.note_hi_idx = Signal(range(n))
        self.act_idx = Signal(range(n))          # the entry acted on
        self.timer = Signal()                    # an action under way, not a record
        self.then_free = Signal()                # its QP goes back after its MAD
        self.seen = Signal(qps)                  # a packet came on QP qpns[k]
        self.set_valid = Signal()                # a QP set-up waits on ``qp_set`` ...
        self.set = Signal(QP_SET)                # ... this one
        # the read port's entry: its timer is due, a packet came on its QP in REP_SENT, either
        self.expired, self.promote, self.due = Signal(), Signal(), Signal()
        self.seen_e = Signal()                   # the flip-flop of its QP
