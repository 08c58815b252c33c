"""Reference model of the connection manager, and the datagram functions host tools and tests use.

The connection manager takes 64-byte datagrams on UDP port 17185 (:data:`CM_PORT`) and answers
from port 0x8765 (:data:`REPLY_PORT`); the byte layout is the ``CM`` header of
:mod:`rocegen.wire.headers`, and the behaviour is described in
:mod:`rocegen.gateware.roce.cm.cm`. :class:`ConnectionManagerModel` does, request by request, what
the gateware does: it returns the reply (with its UDP checksum), the QP table writes, the traffic
generator run and the counters that pulse, so a test can compare the two exactly.

The datagram functions (:func:`pack`, :func:`unpack`, :func:`request`, :func:`traffic`,
:func:`pmtu_code`, :func:`retry_byte`, :func:`read_depths`, :func:`with_read_depths`) and
codes are :mod:`rocegen.wire.cm`'s, named here too so that a test holds the model and the wire
format under one name.
"""

import struct
from dataclasses import dataclass, field

from rocegen.sim.models.net.checksum import udp_checksum
from rocegen.sim.models.read.read_requester import MAX_RD_ATOMIC
from rocegen.wire.addr import in_net, parse_net
from rocegen.wire.cm import (
    ACK_ACK,
    ACK_ERROR,
    ACK_NAK,
    ACK_NO_QP,
    ATOMIC_CAPS,
    CM_PORT,
    COUNTERS,
    DATAGRAM_BYTES,
    PMTU_BYTES,
    QPN_BASE,
    QUERY_REPLY,
    READ_DEPTH_MAX,
    REGION_REQUESTS,
    REPLY_PORT,
    REQ_CLOSE_QP,
    REQ_ERROR,
    REQ_MODIFY_QP_RTS,
    REQ_NULL,
    REQ_OPEN_QP,
    REQ_QUERY,
    REQ_SEND_QP_INFO,
    TX_ATOMIC,
    UDP_SPORT_BASE,
    pack,
    pmtu_code,
    query_counts,
    read_depths,
    region,
    request,
    retry_byte,
    traffic,
    unpack,
    with_read_depths,
)
from rocegen.wire.headers import CM
from rocegen.wire.verbs import QpState, WrOpcode

__all__ = [
    "CM_PORT", "REPLY_PORT", "DATAGRAM_BYTES", "COUNTERS", "UDP_SPORT_BASE",
    "REQ_NULL", "REQ_OPEN_QP", "REQ_SEND_QP_INFO", "REQ_MODIFY_QP_RTS", "REQ_CLOSE_QP",
    "REQ_QUERY", "REQ_ERROR", "ACK_ACK", "ACK_NO_QP", "ACK_NAK", "ACK_ERROR", "PMTU_BYTES",
    "pack", "unpack", "request", "traffic", "pmtu_code", "retry_byte", "region", "query_counts",
    "read_depths", "with_read_depths", "READ_DEPTH_MAX", "parse_net", "in_net",
    "legal_transition", "CmReply", "CmResult", "ConnectionManagerModel",
]

#: State transitions a request may make: RESET -> INIT -> RTR -> RTS, RTS -> RTS (no change, as
#: a verbs modify allows), any state -> ERROR, any state -> RESET (close). Opening a free QP goes
#: from RESET to RTS in one step.
_LEGAL = {(QpState.RESET, QpState.INIT), (QpState.INIT, QpState.RTR), (QpState.RTR, QpState.RTS),
          (QpState.RTS, QpState.RTS)}


def legal_transition(old, new):
    """Whether a request may move a QP from state ``old`` to ``new``."""
    old, new = QpState(old), QpState(new)
    return new in (QpState.ERROR, QpState.RESET) or (old, new) in _LEGAL


@dataclass
class CmReply:
    """A reply datagram: where it goes, its 64 bytes and the UDP checksum it must carry."""
    dst_ip: int
    dst_port: int
    payload: bytes
    checksum: int

    @property
    def fields(self):
        return unpack(self.payload)


@dataclass
class CmResult:
    """What one received datagram does."""
    reply: CmReply | None = None
    context: tuple | None = None       # (qp index, context dict) written to the QP table
    psn: tuple | None = None           # (qp index, psn) written to the QP table
    gen: dict | None = None            # traffic generator run (GEN_CONFIG as a dict)
    rd_limit: tuple | None = None      # (qp index, READ limit) set (with ``reads``)
    pulses: set = field(default_factory=set)


class ConnectionManagerModel:
    """The connection manager as a Python object: feed it datagrams with :meth:`receive`.

    Parameters as for :class:`~rocegen.gateware.roce.cm.cm.ConnectionManager`, plus ``local_ip``
    (the FPGA's address, an integer). ``regions``: each QP's memory region as the responder's
    configuration table holds it (a list of ``{"rkey", "base", "length"}`` dicts, or of
    :func:`~rocegen.gateware.roce.responder.responder.default_config` entries; None: no responder);
    ``query``: QUERY is answered with :attr:`counts` (the pattern sink's ``(checked, wrong)``,
    set by the caller). ``reads``: ACKs of OPEN_QP and SEND_QP_INFO state the READ depths
    (``max_rd_atomic``, ``rd_depth``) and each ACK that sets a QP's READ limit says so in
    :attr:`CmResult.rd_limit`; :attr:`rd_limits` holds every QP's. ``pool``: the QP pool the
    node's connection managers share (an object with ``allocate() -> qpn or None`` and
    ``free(qpn)``, such as :class:`rocegen.sim.models.ibcm.QpPool`, whose numbers are
    ``QPN_BASE .. QPN_BASE + num_qps - 1``): OPEN_QP takes its QP from it (NO_QP when it has
    none) and CLOSE_QP gives it back; None: the QPs are this manager's alone (the lowest free
    one is opened)."""

    def __init__(self, num_qps, *, local_ip, allow_net=None, default_pmtu=4096, default_timeout=14,
                 default_retry=7, default_rnr_retry=7, ack_every_log2=4, port=CM_PORT,
                 regions=None, query=False, reads=False, max_rd_atomic=MAX_RD_ATOMIC, rd_depth=0,
                 dscp=0, ecn=0, atomics=None, pool=None):
        if pool is not None and not (callable(getattr(pool, "allocate", None))
                                     and callable(getattr(pool, "free", None))):
            raise ValueError(f"pool must have allocate() and free(qpn), not {pool!r}")
        self.pool = pool
        if atomics not in ATOMIC_CAPS:
            raise ValueError(f"atomics must be None, 'little' or 'big', not {atomics!r}")
        #: the byte order of the responder's atomics (stated in the ACKs that name a region)
        self.atomics = atomics
        self.num_qps = num_qps
        self.dscp, self.ecn = dscp, ecn     # the traffic class of the QPs opened
        self.local_ip = local_ip
        self.net = parse_net(allow_net)
        self.default_pmtu_log2 = default_pmtu.bit_length() - 1
        self.default_timeout = default_timeout
        self.default_retry = default_retry
        self.default_rnr_retry = default_rnr_retry
        self.ack_every_log2 = ack_every_log2
        self.port = port
        if regions is not None:
            regions = [r.get("mr", r) for r in regions]
            if len(regions) != num_qps:
                raise ValueError(f"regions must name {num_qps} QPs, not {len(regions)}")
        self.regions = regions
        self.query = query
        if not 1 <= max_rd_atomic <= MAX_RD_ATOMIC or rd_depth < 0:
            raise ValueError(f"max_rd_atomic must be 1..{MAX_RD_ATOMIC} and rd_depth at least 0, "
                             f"not {max_rd_atomic}, {rd_depth}")
        self.reads, self.max_rd_atomic, self.rd_depth = reads, max_rd_atomic, rd_depth
        #: each QP's READ limit (what ``rd_limit`` set last; ``max_rd_atomic`` until then)
        self.rd_limits = [max_rd_atomic] * num_qps
        #: the pattern sink's counters a QUERY reply carries: (checked, wrong)
        self.counts = (0, 0)
        self.in_use = [False] * num_qps
        self.owner = [0] * num_qps
        self.context = [self.reset_context() for _ in range(num_qps)]
        #: QPs in the error state of the transmit side (the gateware's ``errored`` input): set
        #: them as the endpoint's retry engine would; OPEN_QP of a number clears its bit
        self.errored = [False] * num_qps

    # ---- state ----

    @staticmethod
    def reset_context():
        return {"state": QpState.RESET.value, "peer_ip": 0, "peer_qpn": 0, "rkey": 0, "base_va": 0,
                "pmtu_log2": 0, "udp_sport": 0, "dscp": 0, "ecn": 0, "ack_every_log2": 0,
                "timeout": 0, "retry_cnt": 0, "rnr_retry": 0}

    def state(self, k):
        """QP ``k``'s state as requests see it: ERROR while its ``errored`` bit is set."""
        return QpState.ERROR.value if self.errored[k] else self.context[k]["state"]

    @property
    def qp_open(self):
        """Bit ``k`` set while QP ``k`` is in use."""
        return sum(1 << k for k, u in enumerate(self.in_use) if u)

    def free(self):
        return [k for k, u in enumerate(self.in_use) if not u]

    def check_pool(self):
        """Consistency of the QP pool: a QP is in use exactly when its context is not RESET."""
        for k in range(self.num_qps):
            state = self.context[k]["state"]
            if self.in_use[k] != (state != QpState.RESET.value):
                raise AssertionError(f"QP {k}: in use {self.in_use[k]} but state {QpState(state)!r}")

    # ---- one datagram ----

    def receive(self, payload, *, src_ip, src_port=0x4322, dst_ip=None, dst_port=None, error=False):
        """Process one datagram (``payload`` = the UDP payload) and return a :class:`CmResult`."""
        dst_ip = self.local_ip if dst_ip is None else dst_ip
        dst_port = self.port if dst_port is None else dst_port
        res = CmResult()
        res.pulses.add("rx_requests")
        payload = bytes(payload)
        if error or len(payload) != DATAGRAM_BYTES:
            res.pulses.add("drop_length")
            return res
        if dst_ip != self.local_ip or dst_port != self.port:
            res.pulses.add("drop_ip")
            return res
        req = CM.unpack(payload)
        if req["ack_valid"]:
            res.pulses.add("drop_unknown")
            return res
        if req["info_valid"]:
            kind = req["req_type"]
            if kind in (REQ_NULL, REQ_ERROR):
                return res
            if kind == REQ_QUERY and self.query:
                ack = ACK_ACK
                if not in_net(self.net, src_ip):
                    res.pulses.add("nak_not_allowed")
                    ack = ACK_NAK
                res.reply = self._reply(req, ack, None, src_ip, src_port)
                res.pulses.add("replies")
                return res
            if kind not in (REQ_OPEN_QP, REQ_SEND_QP_INFO, REQ_MODIFY_QP_RTS, REQ_CLOSE_QP):
                res.pulses.add("drop_unknown")
                return res
            ack, qpn = self._request(kind, req, src_ip, res)
            stated = self._read_limit(kind, ack, qpn, req, payload, res) if self.reads else None
            res.reply = self._reply(req, ack, qpn, src_ip, src_port, stated)
            res.pulses.add("replies")
            return res
        if req["txmeta_valid"]:
            if req["start"]:
                self._traffic(req, src_ip, res)
            return res
        res.pulses.add("drop_unknown")
        return res

    def _allocate(self):
        """The index of the QP OPEN_QP opens (from the pool when there is one), or None."""
        if self.pool is None:
            free = self.free()
            return free[0] if free else None
        qpn = self.pool.allocate()
        if qpn is None:
            return None
        k = qpn - QPN_BASE
        if not 0 <= k < self.num_qps or self.in_use[k]:
            self.pool.free(qpn)
            raise ValueError(f"the pool handed out QP {qpn}, not a free one of "
                             f"{QPN_BASE}..{QPN_BASE + self.num_qps - 1}")
        return k

    def _target(self, req):
        """QP index named by ``rem_qpn`` if it is in use, else None."""
        k = req["rem_qpn"] - QPN_BASE
        return k if 0 <= k < self.num_qps and self.in_use[k] else None

    def _ext_ok(self, req):
        return req["pmtu_code"] <= 5 and req["timeout_code"] <= 31

    def _apply_ext(self, ctx, req):
        if req["pmtu_code"]:
            ctx["pmtu_log2"] = req["pmtu_code"] + 7
        if req["timeout_code"]:
            ctx["timeout"] = req["timeout_code"]
        if req["retry_set"]:
            ctx["retry_cnt"] = req["retry_cnt"]
            ctx["rnr_retry"] = req["rnr_retry"]

    def _set_peer(self, ctx, req):
        ctx.update(peer_ip=req["loc_ip"], peer_qpn=req["loc_qpn"], rkey=req["loc_rkey"],
                   base_va=req["loc_vaddr"])

    def _request(self, kind, req, src_ip, res):
        """Returns (ack_type, our QPN for the reply's loc_qpn or None to echo rem_qpn)."""
        peer_checked = kind in (REQ_OPEN_QP, REQ_SEND_QP_INFO)
        if not in_net(self.net, src_ip) or (peer_checked and not in_net(self.net, req["loc_ip"])):
            res.pulses.add("nak_not_allowed")
            return ACK_NAK, 0 if kind == REQ_OPEN_QP else None
        if kind == REQ_OPEN_QP:
            if not self._ext_ok(req):
                res.pulses.add("nak_illegal")
                return ACK_NAK, 0
            k = self._allocate()
            if k is None:
                res.pulses.add("no_qp")
                return ACK_NO_QP, 0
            ctx = {"state": QpState.RTS.value, "pmtu_log2": self.default_pmtu_log2,
                   "udp_sport": UDP_SPORT_BASE | k, "dscp": self.dscp, "ecn": self.ecn,
                   "ack_every_log2": self.ack_every_log2, "timeout": self.default_timeout,
                   "retry_cnt": self.default_retry, "rnr_retry": self.default_rnr_retry}
            self._set_peer(ctx, req)
            self._apply_ext(ctx, req)
            self.in_use[k] = True
            self.owner[k] = src_ip
            self.errored[k] = False
            self.context[k] = ctx
            res.context = (k, dict(ctx))
            res.psn = (k, req["loc_psn"])
            return ACK_ACK, QPN_BASE + k
        k = self._target(req)
        if k is None:
            res.pulses.add("nak_illegal")
            return ACK_NAK, None
        if self.owner[k] != src_ip:
            res.pulses.add("nak_owner")
            return ACK_NAK, None
        ctx = dict(self.context[k])
        if kind == REQ_SEND_QP_INFO:
            if not self._ext_ok(req):
                res.pulses.add("nak_illegal")
                return ACK_NAK, None
            self._set_peer(ctx, req)
            self._apply_ext(ctx, req)
        elif kind == REQ_MODIFY_QP_RTS:
            if not legal_transition(self.state(k), QpState.RTS):
                res.pulses.add("nak_illegal")
                return ACK_NAK, None
            if ctx["state"] == QpState.RTS.value:
                return ACK_ACK, None           # already there: nothing to write
            ctx["state"] = QpState.RTS.value
        else:                                  # close
            ctx = self.reset_context()
            self.in_use[k] = False
            self.owner[k] = 0
            if self.pool is not None:
                self.pool.free(QPN_BASE + k)
        self.context[k] = ctx
        res.context = (k, dict(ctx))
        return ACK_ACK, None

    def read_limit(self, payload):
        """The READ limit a request sets: min(``max_rd_atomic``, the host's ``rd_depth``), or
        1 when the host does not state it."""
        host = read_depths(payload)[1]
        return min(self.max_rd_atomic, host) if host else 1

    def _read_limit(self, kind, ack, qpn, req, payload, res):
        """An ACK of OPEN_QP or SEND_QP_INFO sets the QP's READ limit; one of CLOSE_QP sets it
        back to ``max_rd_atomic``. Returns the depths the ACK states, ``(rd_atomic,
        rd_depth)``, or None."""
        if ack != ACK_ACK or kind not in (REQ_OPEN_QP, REQ_SEND_QP_INFO, REQ_CLOSE_QP):
            return None
        k = (qpn if kind == REQ_OPEN_QP else req["rem_qpn"]) - QPN_BASE
        limit = self.max_rd_atomic if kind == REQ_CLOSE_QP else self.read_limit(payload)
        self.rd_limits[k] = limit
        res.rd_limit = (k, limit)
        return None if kind == REQ_CLOSE_QP else (limit, min(self.rd_depth, READ_DEPTH_MAX))

    def _traffic(self, req, src_ip, res):
        if not in_net(self.net, src_ip):
            res.pulses.add("nak_not_allowed")
            return
        k = self._target(req)
        if k is None:
            res.pulses.add("nak_illegal")
            return
        if self.owner[k] != src_ip:
            res.pulses.add("nak_owner")
            return
        if self.state(k) != QpState.RTS.value or req["dma_length"] >> 31 or req["window_log2"] > 31:
            res.pulses.add("nak_illegal")
            return
        imm = QPN_BASE + k
        atomics = {code: WrOpcode[name] for name, code in TX_ATOMIC.items()}
        if req["tx_atomic"] in atomics:
            # (TX_ATOMIC: a FETCH_ADD run adds 1, a COMPARE_SWAP run counts from 0)
            opcode = atomics[req["tx_atomic"]].value
            imm = 1 if opcode == WrOpcode.FETCH_ADD else 0
        elif req["tx_read"]:
            opcode = WrOpcode.READ.value
        elif req["tx_type"]:
            opcode = (WrOpcode.WRITE_IMM if req["is_imm"] else WrOpcode.WRITE).value
        else:
            opcode = (WrOpcode.SEND_IMM if req["is_imm"] else WrOpcode.SEND).value
        res.gen = {"qp": k, "opcode": opcode, "length": req["dma_length"],
                   "count": req["n_transfers"], "spacing": req["frequency"], "imm": imm,
                   "window": 1 << req["window_log2"] if req["window_log2"] else 0}

    def _reply(self, req, ack, qpn, src_ip, src_port, stated=None):
        kind = req["req_type"]
        opening = kind == REQ_OPEN_QP
        fields = {
            "info_valid": 1, "req_type": kind, "ack_valid": 1, "ack_type": ack,
            "loc_qpn": qpn if opening else req["rem_qpn"],
            "loc_psn": req["loc_psn"] if opening else req["rem_psn"],
            "loc_rkey": 0 if opening else req["rem_rkey"],
            "loc_vaddr": 0 if opening else req["rem_vaddr"],
            "loc_ip": self.local_ip,
            "rem_qpn": req["loc_qpn"], "rem_psn": req["loc_psn"], "rem_rkey": req["loc_rkey"],
            "rem_vaddr": req["loc_vaddr"], "rem_ip": req["loc_ip"],
            "listening_port": req["listening_port"],
        }
        if self.regions is not None and ack == ACK_ACK and kind in REGION_REQUESTS:
            k = (qpn if opening else req["rem_qpn"]) - QPN_BASE
            mr = self.regions[k]
            fields.update(loc_rkey=mr["rkey"], loc_vaddr=mr["base"],
                          dma_length=min(mr["length"], 0xFFFF_FFFF),
                          tx_atomic=ATOMIC_CAPS[self.atomics])
        payload = pack(**fields)
        if kind == REQ_QUERY and ack == ACK_ACK:
            checked, wrong = self.counts
            payload = payload[:52] + QUERY_REPLY.pack(checked=checked, wrong=wrong)[52:]
        if stated is not None:
            payload = with_read_depths(payload, *stated)
        dport = req["listening_port"] or src_port
        udp = struct.pack(">HHHH", REPLY_PORT, dport, 8 + DATAGRAM_BYTES, 0) + payload
        return CmReply(src_ip, dport, payload, udp_checksum(self.local_ip, src_ip, udp))
