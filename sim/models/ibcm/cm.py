"""Reference model of one node's InfiniBand Communication Manager (IB CM on QP1), as librdmacm
speaks it over RoCEv2: the passive side (``rdma_listen``/``rdma_accept``) and the active side
(``rdma_connect``/``rdma_disconnect``) of RC connections.

Written from IBTA volume 1 chapter 12 as the Linux kernel implements it
(``drivers/infiniband/core/cm.c``, ``cma.c``); the layouts and codes are
:mod:`rocegen.wire.ibcm`'s. The model takes and returns whole 256-byte MADs (wrap them in frames
with :mod:`rocegen.sim.models.ibcm.frames`); it keeps no clock and starts no thread: every call
takes the time ``now`` in **nanoseconds** (an integer that never goes backwards), and
:meth:`IbCm.poll` runs the timers that are due (retransmissions, their give-ups, time-wait).

Behaviour
---------
MADs that are not the CM's, or malformed, are dropped with a counter (:data:`COUNTERS`) or, for
a Get or Set, answered as the kernel's MAD layer answers an unmatched one: a GetResp echoing the
request with the status "unsupported method/attribute combination" (or "bad version" for a CM
class version other than 2). A Get of ClassPortInfo gets its GetResp.

Passive side, a REQ: refused with a REJ when its service ID is not a listened port
(``INVALID_SERVICE_ID``), its transport is not RC (``INVALID_TRANSPORT_TYPE``), its path MTU is
not an IB MTU code (``INVALID_MTU``), it wants to send RDMA READs to a node that serves none
(``INSUFFICIENT_RESP_RESOURCES``), its peer's QP still has a live (not time-wait) connection
with us (``STALE_CONN``), its ``cma_hdr`` is not version 0 / IPv4 / the REQ's source and our address, or
the ``accept`` hook declines (``CONSUMER_DEFINED``, what rdma_cm sends when it cannot take a
REQ), or the QP pool is empty (``NO_QP``). Otherwise it takes a QP from the pool and answers a
REP: our QPN and starting PSN, responder resources ``min(ours, the REQ's initiator depth)``,
initiator depth ``min(ours, the REQ's responder resources)``, and as private data our memory
region (:data:`rocegen.wire.ibcm.REGION`: address, R_Key, length; zeros without a region). The
REP is sent again, unchanged, on a duplicate REQ and when the peer's CM response time (the
REQ's local CM response timeout) passes without an RTU, up to the REQ's max CM retries; then
the node sends REJ ``TIMEOUT`` and frees the QP. An RTU, or :meth:`IbCm.data_seen` (the first
packet on the QP), establishes the connection.

Active side: :meth:`IbCm.connect` takes a QP and sends a REQ (with librdmacm's ``cma_hdr``),
sent again every CM response time (``cm_response_timeout``) up to ``max_cm_retries``; an MRA
moves the deadline to its service timeout; a REP establishes the connection with an RTU (a
duplicate REP gets the RTU again); a REJ, or the last retry's timeout (then REJ ``TIMEOUT``),
frees the QP.

Disconnection: :meth:`IbCm.disconnect` sends a DREQ, sent again like a REQ; a DREP, a crossing
DREQ or the give-up leads to time-wait. A DREQ received is answered with a DREP (again for a
duplicate, and for an unknown connection too, as Linux does) and leads to time-wait. After
``time_wait_ns`` the QP goes back to the pool and the connection is forgotten; a message naming
a forgotten or unknown communication ID is dropped and counted (a REP gets a REJ
``INVALID_COMM_ID``; a REQ that repeats one in time-wait gets a REJ ``STALE_CONN``).

Every path that took a QP gives it back exactly once (:meth:`IbCm.check` asserts it).
"""

import enum
import random
from dataclasses import dataclass, field
from typing import NamedTuple

from rocegen.wire import ibcm as I

__all__ = ["State", "Role", "Outgoing", "Region", "ConnectRequest", "Connection", "IbCm",
           "COUNTERS"]


class State(enum.Enum):
    """A connection's state (IBTA's names)."""
    REQ_SENT = "REQ_SENT"              # active: REQ out, waiting for a REP (or an MRA came)
    REP_SENT = "REP_SENT"              # passive: REP out, waiting for the RTU
    ESTABLISHED = "ESTABLISHED"
    DREQ_SENT = "DREQ_SENT"
    TIMEWAIT = "TIMEWAIT"


class Role(enum.Enum):
    ACTIVE = "active"
    PASSIVE = "passive"


class Outgoing(NamedTuple):
    """A MAD to send: to ``dst_ip`` (QP1 there), 256 bytes."""
    dst_ip: int
    mad: bytes


@dataclass(frozen=True)
class Region:
    """The memory region a REP advertises: base address, R_Key, length in bytes."""
    addr: int
    rkey: int
    length: int

    def __post_init__(self):
        for name, bits in (("addr", 64), ("rkey", 32), ("length", 32)):
            v = getattr(self, name)
            if not isinstance(v, int) or not 0 <= v < 1 << bits:
                raise ValueError(f"region {name} must be a {bits}-bit integer, not {v!r}")


@dataclass(frozen=True)
class ConnectRequest:
    """What the ``accept`` hook of :class:`IbCm` sees of a REQ it may take."""
    src_ip: int
    src_port: int
    port: int
    peer_qpn: int
    private_data: bytes          # the application's, after the cma_hdr


@dataclass
class Connection:
    """One connection as a node holds it. ``local_comm_id`` names it; ``qpn`` is our QP (from
    the pool), ``peer_*`` the other side's; ``psn`` the starting PSN our REQ or REP states,
    ``peer_psn`` the one the peer's states: each message states the PSN its sender expects, so
    the QP expects ``psn`` and sends from ``peer_psn`` (Linux's CM: ``rq_psn`` from our message,
    ``sq_psn`` from the peer's); ``responder_resources`` are the RDMA READs we serve
    at once, ``initiator_depth`` those we may have outstanding; ``path_mtu`` an IB MTU code;
    ``peer_region`` the region the peer's REP advertised (active side); ``private_data`` the
    application's private data of the REQ (ours or the peer's); ``history`` the names of the
    events of this connection, in order."""
    local_comm_id: int
    role: Role
    state: State
    peer_ip: int
    port: int
    qpn: int
    psn: int
    tid: int
    remote_comm_id: int = 0
    peer_qpn: int = 0
    peer_psn: int = 0
    path_mtu: int = 0
    responder_resources: int = 0
    initiator_depth: int = 0
    local_ack_timeout: int = 0
    retry_count: int = 0
    rnr_retry_count: int = 0
    private_data: bytes = b""
    peer_region: Region | None = None
    # the peer's CM response time and how often we send a message again
    peer_timeout_ns: int = 0
    max_retries: int = 0
    # the message waiting for its answer: sent again at ``deadline`` while ``retries_left``
    pending: bytes | None = None
    deadline: int = 0
    retries_left: int = 0
    mra_seen: bool = False
    last_rep: bytes | None = None
    last_reply: bytes | None = None     # the RTU or DREP a duplicate gets again
    dreq_tid: int = 0
    timewait_until: int = 0
    history: list = field(default_factory=list)


#: What a node counts: MADs in and out, every reason a MAD is dropped or refused, the messages
#: sent again, the timers that gave up.
COUNTERS = (
    "rx_mads", "tx_mads",
    "drop_length", "drop_base_version", "drop_class", "drop_response", "drop_method",
    "drop_class_version", "drop_attribute", "answered_bad_version", "answered_unsupported",
    "class_port_info",
    "req_rejected", "req_duplicate", "req_stale", "rep_unknown", "rep_duplicate",
    "rtu_unknown", "rtu_duplicate", "mra_unknown", "rej_unknown", "dreq_unknown",
    "dreq_duplicate", "drep_unknown", "connect_no_qp",
    "retransmits", "req_timeouts", "rep_timeouts", "dreq_timeouts",
    "established", "rejected", "timewait_exits", "disconnects", "disconnect_unknown",
    "connects",
)


def _check_int(name, v, lo, hi):
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ValueError(f"{name} must be an integer {lo}..{hi}, not {v!r}")
    return v


def _cma_addr(ip):
    """An IPv4 address as ``cma_hdr`` holds it (``union cma_ip_addr``: 12 zero bytes, then it)."""
    return ip


class IbCm:
    """One node's CM. Parameters:

    ``pool``: the QP pool (``allocate() -> qpn or None``, ``free(qpn)``), shared with any other
    connection manager of the node. ``local_ip``: our IPv4 address (integer). ``ca_guid``: our
    CA GUID (64 bits; REQ, REP, the ARI of a REJ ``TIMEOUT``). ``ports``: the TCP ports we
    listen on (service IDs ``0x0000000001060000 | port``); :meth:`listen` adds more.
    ``region``: the :class:`Region` our REPs advertise (None: zeros). ``responder_resources``,
    ``initiator_depth``: the RDMA READs we serve at once and may have outstanding at once (0..255).
    ``max_mtu``: the largest path MTU in bytes we take or ask for. ``cm_response_timeout``: our
    CM response time (0..31, 4.096 us x 2^t), stated in our REQs (both timeouts) and
    ClassPortInfo, and how long we wait for the peer's answer to our REQ. ``max_cm_retries``
    (0..15): how many times our REQ is sent again. ``local_ack_timeout``, ``retry_count``,
    ``rnr_retry_count``: what our REQ states for the QP (and the REP's RNR retry count).
    ``time_wait_ns``: the time-wait (default: the local ACK timeout's 4.096 us x 2^t).
    ``max_peer_response_timeout`` (0..31, default 31: none cut): the longest wait for the
    peer's answer to our REQ, REP or DREQ: the CM response timeout a REQ states (the peer's,
    or ours in our REQ) cut to it when longer, for our timers only (our REQ still states
    ``cm_response_timeout``). ``accept``: a function of a :class:`ConnectRequest`
    returning whether to take it (None: take all). ``seed``: of the starting PSNs,
    communication IDs and transaction IDs. ``first_comm_id`` (1..2^32-1): the first
    communication ID handed out, instead of one drawn from ``seed`` (the next ones count up
    from it as usual). ``psn``: a function of no argument returning each new connection's
    starting PSN (24 bits), instead of drawing it from ``seed``;
    or ``"req"``: a passive connection starts at its REQ's starting PSN (a node whose QPs count
    one PSN for both directions; an active one still draws its own).
    The two make the model's choices those of a node that counts its IDs and draws its PSNs
    from a known sequence (the gateware's). ``first_tid`` (0..2^64-1): the transaction ID of
    our first request (REQ or DREQ), the next ones counting up, instead of one from ``seed``.

    Results: each call returns the :class:`Outgoing` MADs to send; :attr:`events` collects
    ``(name, local_comm_id, detail)`` tuples ("established", "rejected" with the reason,
    "req_timeout", "rep_timeout", "dreq_timeout", "disconnected", "timewait_exit");
    :attr:`counters` counts (:data:`COUNTERS`); :attr:`connections` maps local communication
    IDs to :class:`Connection` objects.
    """

    def __init__(self, *, pool, local_ip, ca_guid, ports=(), region=None,
                 responder_resources=1, initiator_depth=1, max_mtu=4096,
                 cm_response_timeout=20, max_cm_retries=15, local_ack_timeout=14,
                 retry_count=7, rnr_retry_count=7, time_wait_ns=None, accept=None, seed=0,
                 first_comm_id=None, psn=None, first_tid=None, max_peer_response_timeout=31):
        if not callable(getattr(pool, "allocate", None)) or not callable(getattr(pool, "free",
                                                                                   None)):
            raise ValueError(f"pool must have allocate() and free(qpn), not {pool!r}")
        self.pool = pool
        self.local_ip = _check_int("local_ip", local_ip, 0, (1 << 32) - 1)
        self.ca_guid = _check_int("ca_guid", ca_guid, 0, (1 << 64) - 1)
        if region is not None and not isinstance(region, Region):
            raise ValueError(f"region must be a Region or None, not {region!r}")
        self.region = region
        self.responder_resources = _check_int("responder_resources", responder_resources, 0, 255)
        self.initiator_depth = _check_int("initiator_depth", initiator_depth, 0, 255)
        self.max_mtu_code = I.mtu_code(max_mtu)
        self.cm_response_timeout = _check_int("cm_response_timeout", cm_response_timeout, 0, 31)
        self.max_cm_retries = _check_int("max_cm_retries", max_cm_retries, 0, 15)
        self.local_ack_timeout = _check_int("local_ack_timeout", local_ack_timeout, 0, 31)
        self.retry_count = _check_int("retry_count", retry_count, 0, 7)
        self.rnr_retry_count = _check_int("rnr_retry_count", rnr_retry_count, 0, 7)
        self.max_peer_response_timeout = _check_int(
            "max_peer_response_timeout", max_peer_response_timeout, 0, 31)
        if time_wait_ns is None:
            time_wait_ns = I.cm_timeout_ns(local_ack_timeout)
        self.time_wait_ns = _check_int("time_wait_ns", time_wait_ns, 0, 1 << 63)
        if accept is not None and not callable(accept):
            raise ValueError(f"accept must be callable or None, not {accept!r}")
        self.accept = accept
        self._rng = random.Random(seed)
        self._next_comm_id = self._rng.randrange(1, 1 << 31)
        self._next_tid = self._rng.randrange(1 << 32) << 32
        if first_tid is not None:
            self._next_tid = (_check_int("first_tid", first_tid, 0, (1 << 64) - 1) - 1) \
                & ((1 << 64) - 1)
        if first_comm_id is not None:
            self._next_comm_id = _check_int("first_comm_id", first_comm_id, 1, (1 << 32) - 1)
        if psn is not None and psn != "req" and not callable(psn):
            raise ValueError(f"psn must be callable, \"req\" or None, not {psn!r}")
        self._psn_source = psn
        self.ports = set()
        for p in ports:
            self.listen(p)
        self.connections = {}
        self.events = []
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._now = 0

    # ---- configuration

    def listen(self, port):
        """Take REQs for TCP port ``port`` (0..65535) from now on."""
        I.service_id(port)
        self.ports.add(port)

    def unlisten(self, port):
        """Refuse REQs for ``port`` from now on (connections already made stay)."""
        if port not in self.ports:
            raise ValueError(f"not listening on port {port!r}")
        self.ports.discard(port)

    # ---- building MADs

    def _tid(self):
        self._next_tid = (self._next_tid + 1) & ((1 << 64) - 1)
        return self._next_tid

    def _psn(self, req_psn=None):
        if self._psn_source == "req" and req_psn is not None:
            return req_psn
        if self._psn_source is None or self._psn_source == "req":
            return self._rng.randrange(1 << 24)
        return _check_int("psn()", self._psn_source(), 0, (1 << 24) - 1)

    def _comm_id(self):
        while True:
            cid = self._next_comm_id
            self._next_comm_id = self._next_comm_id % 0xFFFFFFFF + 1
            if cid not in self.connections:
                return cid

    @staticmethod
    def _mad(attr, tid, data, method=I.METHOD_SEND, status=I.STATUS_SUCCESS):
        return I.MAD_HDR.pack(base_version=I.BASE_VERSION, mgmt_class=I.MGMT_CLASS_CM,
                              class_version=I.CM_CLASS_VERSION, method=method, status=status,
                              transaction_id=tid, attribute_id=attr) + I.class_data(data)

    def _send(self, out, dst_ip, mad):
        self.counters["tx_mads"] += 1
        out.append(Outgoing(dst_ip, mad))

    def _rej(self, tid, *, local, remote, msg, reason, ari=b""):
        return self._mad(I.ATTR_REJ, tid, I.REJ.pack(
            local_comm_id=local, remote_comm_id=remote, message_rejected=msg, reason=reason,
            reject_info_length=len(ari), ari=int.from_bytes(bytes(ari).ljust(72, b"\0"), "big")))

    def _arm(self, conn, mad, now, timeout_ns, retries):
        conn.pending, conn.deadline, conn.retries_left = mad, now + timeout_ns, retries

    def _event(self, name, conn, detail=None):
        self.events.append((name, conn.local_comm_id, detail))
        conn.history.append(name)

    # ---- the QP's life

    def _forget(self, conn):
        """Free the connection's QP and forget it."""
        del self.connections[conn.local_comm_id]
        self.pool.free(conn.qpn)

    def _timewait(self, conn, now):
        conn.state = State.TIMEWAIT
        conn.pending = None
        conn.timewait_until = now + self.time_wait_ns

    def check(self):
        """Assert that every connection holds its own QP and that no two share one."""
        qpns = [c.qpn for c in self.connections.values()]
        if len(set(qpns)) != len(qpns):
            raise AssertionError(f"two connections share a QP: {sorted(qpns)}")

    # ---- the API

    def connect(self, now, *, dst_ip, port, private_data=b"", path_mtu=None, src_port=None):
        """Open a connection to ``dst_ip`` (integer) port ``port``: take a QP and send the REQ
        (``cma_hdr`` then ``private_data``, at most 56 bytes; ``path_mtu`` in bytes, default
        ``max_mtu``; ``src_port``: our port in the ``cma_hdr``, default an ephemeral one).
        Returns ``(local_comm_id, [Outgoing])``, or ``(None, [])`` when the pool is empty
        (counted as ``connect_no_qp``)."""
        self._advance(now)
        _check_int("dst_ip", dst_ip, 0, (1 << 32) - 1)
        I.service_id(port)
        if src_port is None:
            src_port = self._rng.randrange(32768, 61000)
        _check_int("src_port", src_port, 0, 0xFFFF)
        private_data = bytes(private_data)
        if len(private_data) > I.CMA_PRIVATE_DATA_MAX:
            raise ValueError(f"private data of a connect is at most {I.CMA_PRIVATE_DATA_MAX} "
                             f"bytes, not {len(private_data)}")
        mtu = self.max_mtu_code if path_mtu is None else I.mtu_code(path_mtu)
        qpn = self.pool.allocate()
        if qpn is None:
            self.counters["connect_no_qp"] += 1
            return None, []
        conn = Connection(local_comm_id=self._comm_id(), role=Role.ACTIVE, state=State.REQ_SENT,
                          peer_ip=dst_ip, port=port, qpn=qpn, psn=self._psn(),
                          tid=self._tid(), path_mtu=mtu, local_ack_timeout=self.local_ack_timeout,
                          retry_count=self.retry_count, rnr_retry_count=self.rnr_retry_count,
                          responder_resources=self.responder_resources,
                          initiator_depth=self.initiator_depth, private_data=private_data,
                          peer_timeout_ns=I.cm_timeout_ns(min(
                              self.cm_response_timeout, self.max_peer_response_timeout)),
                          max_retries=self.max_cm_retries)
        self.connections[conn.local_comm_id] = conn
        self.counters["connects"] += 1
        mad = self._req(conn, src_port)
        out = []
        self._send(out, dst_ip, mad)
        self._arm(conn, mad, now, conn.peer_timeout_ns, conn.max_retries)
        return conn.local_comm_id, out

    def _req(self, conn, src_port):
        """The REQ of active connection ``conn`` (``src_port``: ours in its ``cma_hdr``)."""
        cma = I.CMA_HDR.pack(cma_version=I.CMA_VERSION, ip_version=I.CMA_IP_VERSION_4,
                             src_port=src_port,
                             src_addr=_cma_addr(self.local_ip), dst_addr=_cma_addr(conn.peer_ip))
        req = I.REQ.pack(
            local_comm_id=conn.local_comm_id, service_id=I.service_id(conn.port),
            local_ca_guid=self.ca_guid, local_qpn=conn.qpn,
            responder_resources=conn.responder_resources, initiator_depth=conn.initiator_depth,
            remote_cm_response_timeout=self.cm_response_timeout,
            transport_service_type=I.TRANSPORT_RC, end_to_end_flow_control=1,
            starting_psn=conn.psn, local_cm_response_timeout=self.cm_response_timeout,
            retry_count=conn.retry_count, partition_key=I.DEFAULT_PKEY, path_mtu=conn.path_mtu,
            rnr_retry_count=conn.rnr_retry_count, max_cm_retries=self.max_cm_retries,
            primary_local_lid=I.LID_PERMISSIVE, primary_remote_lid=I.LID_PERMISSIVE,
            primary_local_gid=I.ipv4_gid(self.local_ip),
            primary_remote_gid=I.ipv4_gid(conn.peer_ip), primary_hop_limit=64,
            primary_local_ack_timeout=conn.local_ack_timeout,
            private_data=I.private_data(I.REQ, cma + conn.private_data))
        return self._mad(I.ATTR_REQ, conn.tid, req)

    def disconnect(self, now, local_comm_id):
        """Close an established connection: send a DREQ (sent again until a DREP, then
        time-wait). ``ValueError`` for a connection that is not established."""
        self._advance(now)
        conn = self.connections.get(local_comm_id)
        if conn is None or conn.state is not State.ESTABLISHED:
            state = None if conn is None else conn.state.name
            raise ValueError(f"connection {local_comm_id!r} is not established (state {state})")
        self.counters["disconnects"] += 1
        conn.dreq_tid = self._tid()
        mad = self._dreq(conn.dreq_tid, conn.local_comm_id, conn.remote_comm_id, conn.peer_qpn)
        conn.state = State.DREQ_SENT
        out = []
        self._send(out, conn.peer_ip, mad)
        self._arm(conn, mad, now, conn.peer_timeout_ns, conn.max_retries)
        return out

    def destroy(self, now, local_comm_id):
        """Forget a connection being closed, as Linux's ``rdma_destroy_id`` right after
        ``rdma_disconnect`` does (rping and rdma_client): a connection in DREQ_SENT stops
        sending its DREQ again and goes to time-wait; an established one sends its DREQ once and
        goes to time-wait. Returns the MADs to send. ``ValueError`` in any other state."""
        self._advance(now)
        conn = self.connections.get(local_comm_id)
        state = None if conn is None else conn.state
        if state not in (State.ESTABLISHED, State.DREQ_SENT):
            name = None if state is None else state.name
            raise ValueError(f"connection {local_comm_id!r} is neither established nor "
                             f"disconnecting (state {name})")
        out = self.disconnect(now, local_comm_id) if state is State.ESTABLISHED else []
        self._timewait(conn, now)
        return out

    def disconnect_qp(self, now, qpn):
        """:meth:`disconnect` the established connection on our QP ``qpn``; a QP with none
        (not ours, not yet established, already closing) is counted as
        ``disconnect_unknown`` and nothing is sent."""
        self._advance(now)
        for conn in self.connections.values():
            if conn.qpn == qpn and conn.state is State.ESTABLISHED:
                return self.disconnect(now, conn.local_comm_id)
        self.counters["disconnect_unknown"] += 1
        return []

    def data_seen(self, now, qpn):
        """A packet arrived on our QP ``qpn``: a passive connection waiting for its RTU is
        established by it. Returns whether that happened."""
        self._advance(now)
        for conn in self.connections.values():
            if conn.qpn == qpn and conn.role is Role.PASSIVE and conn.state is State.REP_SENT:
                self._establish(conn)
                return True
        return False

    def poll(self, now):
        """Run the timers due at ``now``: send messages again, give up on them, end time-waits.
        Returns the MADs to send."""
        self._advance(now)
        out = []
        for conn in list(self.connections.values()):
            if conn.state is State.TIMEWAIT:
                if now >= conn.timewait_until:
                    self._forget(conn)
                    self.counters["timewait_exits"] += 1
                    self._event("timewait_exit", conn)
                continue
            if conn.pending is None or now < conn.deadline:
                continue
            if conn.retries_left > 0:
                conn.retries_left -= 1
                conn.deadline = now + conn.peer_timeout_ns
                self.counters["retransmits"] += 1
                self._send(out, conn.peer_ip, conn.pending)
                continue
            self._give_up(conn, now, out)
        return out

    def next_deadline(self):
        """The earliest time :meth:`poll` has something to do, or None."""
        times = [c.timewait_until if c.state is State.TIMEWAIT else c.deadline
                 for c in self.connections.values()
                 if c.state is State.TIMEWAIT or c.pending is not None]
        return min(times, default=None)

    def _advance(self, now):
        _check_int("now", now, 0, 1 << 63)
        if now < self._now:
            raise ValueError(f"time went backwards: {now} after {self._now}")
        self._now = now

    def _give_up(self, conn, now, out):
        if conn.state is State.DREQ_SENT:
            self.counters["dreq_timeouts"] += 1
            self._event("dreq_timeout", conn)
            self._timewait(conn, now)
            return
        # REQ_SENT or REP_SENT: REJ "timeout" (its ARI our CA GUID, as cm.c sends it), QP freed
        kind = "req_timeout" if conn.state is State.REQ_SENT else "rep_timeout"
        self.counters[kind + "s"] += 1
        self._send(out, conn.peer_ip, self._rej(
            conn.tid, local=conn.local_comm_id, remote=conn.remote_comm_id,
            msg=I.MsgResponse.OTHER, reason=I.RejReason.TIMEOUT,
            ari=self.ca_guid.to_bytes(8, "big")))
        self._event(kind, conn)
        self._forget(conn)

    def _establish(self, conn):
        conn.state = State.ESTABLISHED
        conn.pending = None
        self.counters["established"] += 1
        self._event("established", conn)

    # ---- receiving

    def receive(self, now, mad, *, src_ip):
        """Take one MAD (the 256 bytes after the DETH) that QP1 received from ``src_ip``.
        Returns the MADs to send."""
        self._advance(now)
        _check_int("src_ip", src_ip, 0, (1 << 32) - 1)
        mad = bytes(mad)
        self.counters["rx_mads"] += 1
        out = []
        if len(mad) != I.MAD_LENGTH:
            self.counters["drop_length"] += 1
            return out
        hdr = I.MAD_HDR.unpack(mad)
        if hdr["base_version"] != I.BASE_VERSION:
            self.counters["drop_base_version"] += 1
            return out
        if hdr["mgmt_class"] != I.MGMT_CLASS_CM:
            self.counters["drop_class"] += 1
            return out
        method = hdr["method"]
        if method & I.METHOD_RESP:
            self.counters["drop_response"] += 1
            return out
        if method in (I.METHOD_GET, I.METHOD_SET):
            self._get_set(hdr, mad, src_ip, out)
            return out
        if method != I.METHOD_SEND:
            self.counters["drop_method"] += 1
            return out
        if hdr["class_version"] != I.CM_CLASS_VERSION:
            self.counters["drop_class_version"] += 1
            return out
        layout = I.MESSAGES.get(hdr["attribute_id"])
        if layout is None:
            self.counters["drop_attribute"] += 1
            return out
        f = layout.unpack(mad[I.MAD_HDR_LENGTH:])
        handler = {I.ATTR_REQ: self._on_req, I.ATTR_REP: self._on_rep, I.ATTR_RTU: self._on_rtu,
                   I.ATTR_MRA: self._on_mra, I.ATTR_REJ: self._on_rej,
                   I.ATTR_DREQ: self._on_dreq, I.ATTR_DREP: self._on_drep}[hdr["attribute_id"]]
        handler(now, hdr, f, src_ip, out)
        return out

    def _get_set(self, hdr, mad, src_ip, out):
        """A Get or Set: ClassPortInfo's GetResp, or the request echoed as a GetResp with the
        status of what is wrong (the kernel's answer to an unmatched Get/Set)."""
        reply = dict(hdr, method=I.METHOD_GET_RESP)
        if hdr["class_version"] != I.CM_CLASS_VERSION:
            self.counters["answered_bad_version"] += 1
            data, reply["status"] = mad[I.MAD_HDR_LENGTH:], I.STATUS_BAD_VERSION
        elif hdr["method"] == I.METHOD_GET and hdr["attribute_id"] == I.ATTR_CLASS_PORT_INFO:
            self.counters["class_port_info"] += 1
            data = I.class_data(I.CLASS_PORT_INFO.pack(
                base_version=I.BASE_VERSION, class_version=I.CM_CLASS_VERSION,
                resp_time_value=self.cm_response_timeout))
            reply["status"] = I.STATUS_SUCCESS
        else:
            self.counters["answered_unsupported"] += 1
            data, reply["status"] = mad[I.MAD_HDR_LENGTH:], I.STATUS_UNSUPPORTED_METHOD_ATTR
        self._send(out, src_ip, I.MAD_HDR.pack(**reply) + data)

    def _by_peer(self, src_ip, remote_comm_id):
        for conn in self.connections.values():
            if conn.peer_ip == src_ip and conn.remote_comm_id == remote_comm_id:
                return conn
        return None

    def _reject_req(self, hdr, f, src_ip, out, reason):
        self.counters["req_rejected"] += 1
        self._send(out, src_ip, self._rej(hdr["transaction_id"], local=0,
                                          remote=f["local_comm_id"], msg=I.MsgResponse.REQ,
                                          reason=reason))

    def _on_req(self, now, hdr, f, src_ip, out):
        dup = self._by_peer(src_ip, f["local_comm_id"])
        if dup is not None and dup.role is Role.PASSIVE:
            if dup.state is State.REP_SENT:
                self.counters["req_duplicate"] += 1
                self._send(out, src_ip, dup.last_rep)
            elif dup.state is State.TIMEWAIT:
                self.counters["req_stale"] += 1
                self._send(out, src_ip, self._rej(
                    hdr["transaction_id"], local=dup.local_comm_id, remote=f["local_comm_id"],
                    msg=I.MsgResponse.REQ, reason=I.RejReason.STALE_CONN))
            else:
                self.counters["req_duplicate"] += 1
            return
        R = I.RejReason
        port = I.service_port(f["service_id"])
        if port is None or port not in self.ports:
            return self._reject_req(hdr, f, src_ip, out, R.INVALID_SERVICE_ID)
        if f["transport_service_type"] != I.TRANSPORT_RC:
            return self._reject_req(hdr, f, src_ip, out, R.INVALID_TRANSPORT_TYPE)
        if f["path_mtu"] not in I.MTU_CODES:
            return self._reject_req(hdr, f, src_ip, out, R.INVALID_MTU)
        if f["initiator_depth"] > 0 and self.responder_resources == 0:
            return self._reject_req(hdr, f, src_ip, out, R.INSUFFICIENT_RESP_RESOURCES)
        # (a connection in time-wait does not count: Linux takes it out of its table of remote
        # QPs when it enters time-wait)
        if any(c.peer_ip == src_ip and c.peer_qpn == f["local_qpn"] and c.role is Role.PASSIVE
               and c.state is not State.TIMEWAIT for c in self.connections.values()):
            return self._reject_req(hdr, f, src_ip, out, R.STALE_CONN)
        pdata = I.private_bytes(I.REQ, f)
        cma = I.CMA_HDR.unpack(pdata)
        if (cma["cma_version"] != I.CMA_VERSION or cma["ip_version"] != I.CMA_IP_VERSION_4
                or cma["src_addr"] != _cma_addr(src_ip)
                or cma["dst_addr"] != _cma_addr(self.local_ip)):
            return self._reject_req(hdr, f, src_ip, out, R.CONSUMER_DEFINED)
        app_data = pdata[I.CMA_HDR.length:]
        if self.accept is not None and not self.accept(ConnectRequest(
                src_ip=src_ip, src_port=cma["src_port"], port=port, peer_qpn=f["local_qpn"],
                private_data=app_data)):
            return self._reject_req(hdr, f, src_ip, out, R.CONSUMER_DEFINED)
        qpn = self.pool.allocate()
        if qpn is None:
            return self._reject_req(hdr, f, src_ip, out, R.NO_QP)
        conn = Connection(
            local_comm_id=self._comm_id(), role=Role.PASSIVE, state=State.REP_SENT,
            peer_ip=src_ip, port=port, qpn=qpn, psn=self._psn(f["starting_psn"]),
            tid=hdr["transaction_id"], remote_comm_id=f["local_comm_id"],
            peer_qpn=f["local_qpn"], peer_psn=f["starting_psn"],
            path_mtu=min(f["path_mtu"], self.max_mtu_code),
            responder_resources=min(self.responder_resources, f["initiator_depth"]),
            initiator_depth=min(self.initiator_depth, f["responder_resources"]),
            local_ack_timeout=f["primary_local_ack_timeout"], retry_count=f["retry_count"],
            rnr_retry_count=f["rnr_retry_count"], private_data=app_data,
            peer_timeout_ns=I.cm_timeout_ns(min(f["local_cm_response_timeout"],
                                                self.max_peer_response_timeout)),
            max_retries=f["max_cm_retries"])
        self.connections[conn.local_comm_id] = conn
        region = self.region or Region(0, 0, 0)
        rep = I.REP.pack(
            local_comm_id=conn.local_comm_id, remote_comm_id=conn.remote_comm_id,
            local_qpn=qpn, starting_psn=conn.psn,
            responder_resources=conn.responder_resources, initiator_depth=conn.initiator_depth,
            end_to_end_flow_control=1, rnr_retry_count=self.rnr_retry_count,
            local_ca_guid=self.ca_guid,
            private_data=I.private_data(I.REP, I.REGION.pack(
                addr=region.addr, rkey=region.rkey, length=region.length)))
        conn.last_rep = self._mad(I.ATTR_REP, conn.tid, rep)
        self._send(out, src_ip, conn.last_rep)
        self._arm(conn, conn.last_rep, now, conn.peer_timeout_ns, conn.max_retries)

    def _mine(self, f, src_ip, states):
        """The connection a message names (its remote comm ID is our local one, its local comm
        ID the peer's, from the peer's address), if in one of ``states``."""
        conn = self.connections.get(f["remote_comm_id"])
        if conn is None or conn.peer_ip != src_ip or conn.state not in states:
            return None
        if conn.remote_comm_id not in (0, f["local_comm_id"]):
            return None
        return conn

    def _on_rep(self, now, hdr, f, src_ip, out):
        conn = self._mine(f, src_ip, (State.REQ_SENT, State.ESTABLISHED))
        if conn is None or conn.role is not Role.ACTIVE:
            self.counters["rep_unknown"] += 1
            self._send(out, src_ip, self._rej(
                hdr["transaction_id"], local=0, remote=f["local_comm_id"],
                msg=I.MsgResponse.REP, reason=I.RejReason.INVALID_COMM_ID))
            return
        if conn.state is State.ESTABLISHED:
            self.counters["rep_duplicate"] += 1
            self._send(out, src_ip, conn.last_reply)
            return
        region = I.REGION.unpack(I.private_bytes(I.REP, f))
        conn.remote_comm_id = f["local_comm_id"]
        conn.peer_qpn, conn.peer_psn = f["local_qpn"], f["starting_psn"]
        conn.rnr_retry_count = f["rnr_retry_count"]     # (the REP's is for our QP, as IBTA has it)
        conn.responder_resources = min(conn.responder_resources, f["initiator_depth"])
        conn.initiator_depth = min(conn.initiator_depth, f["responder_resources"])
        conn.peer_region = Region(region["addr"], region["rkey"], region["length"])
        conn.last_reply = self._mad(I.ATTR_RTU, conn.tid, I.RTU.pack(
            local_comm_id=conn.local_comm_id, remote_comm_id=conn.remote_comm_id))
        self._send(out, src_ip, conn.last_reply)
        self._establish(conn)

    def _on_rtu(self, now, hdr, f, src_ip, out):
        conn = self._mine(f, src_ip, (State.REP_SENT, State.ESTABLISHED))
        if conn is None or conn.role is not Role.PASSIVE:
            self.counters["rtu_unknown"] += 1
        elif conn.state is State.ESTABLISHED:
            self.counters["rtu_duplicate"] += 1
        else:
            self._establish(conn)

    def _on_mra(self, now, hdr, f, src_ip, out):
        want = {I.MsgResponse.REQ: (State.REQ_SENT, Role.ACTIVE),
                I.MsgResponse.REP: (State.REP_SENT, Role.PASSIVE)}.get(f["message_mraed"])
        conn = None if want is None else self._mine(f, src_ip, (want[0],))
        if conn is None or conn.role is not want[1]:
            self.counters["mra_unknown"] += 1
            return
        # the answer comes later: wait the service timeout from now (the retries stay)
        conn.mra_seen = True
        conn.deadline = now + I.cm_timeout_ns(f["service_timeout"])

    def _on_rej(self, now, hdr, f, src_ip, out):
        live = (State.REQ_SENT, State.REP_SENT, State.ESTABLISHED, State.DREQ_SENT)
        conn = self._mine(f, src_ip, live)
        if conn is None and f["remote_comm_id"] == 0:
            # a REJ from a peer that never learnt our ID (its REQ timed out): by its own ID
            conn = self._by_peer(src_ip, f["local_comm_id"])
            conn = conn if conn is not None and conn.state in live else None
        if conn is None:
            self.counters["rej_unknown"] += 1
            return
        self.counters["rejected"] += 1
        try:
            reason = I.RejReason(f["reason"])
        except ValueError:
            reason = f["reason"]
        self._event("rejected", conn, reason)
        if conn.state in (State.REQ_SENT, State.REP_SENT):
            self._forget(conn)
        else:
            self._timewait(conn, now)

    def _dreq(self, tid, local, remote, remote_qpn):
        return self._mad(I.ATTR_DREQ, tid, I.DREQ.pack(local_comm_id=local, remote_comm_id=remote,
                                                       remote_qpn=remote_qpn))

    def _drep(self, tid, local, remote):
        return self._mad(I.ATTR_DREP, tid, I.DREP.pack(local_comm_id=local,
                                                       remote_comm_id=remote))

    def _on_dreq(self, now, hdr, f, src_ip, out):
        conn = self._mine(f, src_ip, (State.ESTABLISHED, State.REP_SENT, State.DREQ_SENT,
                                      State.TIMEWAIT))
        if conn is not None and f["remote_qpn"] != conn.qpn:
            conn = None
        if conn is None:
            # (Linux answers a DREQ it cannot match: the peer may have lost our DREP)
            self.counters["dreq_unknown"] += 1
            self._send(out, src_ip, self._drep(hdr["transaction_id"], f["remote_comm_id"],
                                               f["local_comm_id"]))
            return
        if conn.state is State.TIMEWAIT:
            self.counters["dreq_duplicate"] += 1
        else:
            self._event("disconnected", conn)
            self._timewait(conn, now)
        conn.last_reply = self._drep(hdr["transaction_id"], conn.local_comm_id,
                                     conn.remote_comm_id)
        self._send(out, src_ip, conn.last_reply)

    def _on_drep(self, now, hdr, f, src_ip, out):
        conn = self._mine(f, src_ip, (State.DREQ_SENT,))
        if conn is None:
            self.counters["drep_unknown"] += 1
            return
        self._event("disconnected", conn)
        self._timewait(conn, now)
