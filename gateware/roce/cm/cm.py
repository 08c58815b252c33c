"""The out-of-band connection manager: QP set-up over 64-byte UDP datagrams on port 17185."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import UDP_RX_META
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.cm.cm_control import CONTROL_COUNTERS, CmControl
from rocegen.gateware.roce.cm.cm_defs import (
    CM_PORT,
    COUNTERS,
    PMTU_LOG2,
    UDP_SPORT_BASE,
    int_param,
    parse_net,
    read_params,
)
from rocegen.gateware.roce.cm.cm_receive import CmReceiver
from rocegen.gateware.roce.cm.cm_records import CmRecords
from rocegen.gateware.roce.cm.cm_reply import CmReplySender
from rocegen.gateware.roce.cm.cm_traffic import CmTraffic
from rocegen.gateware.roce.frontend.pattern_sink import PATTERN_COUNTS
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import MAX_QPS, TRAFFIC_CONFIG
from rocegen.gateware.roce.read.read_layouts import MAX_RD_ATOMIC, READ_LIMIT
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.gateware.roce.responder.resp_layouts import RESP_QP_CONFIG
from rocegen.wire.cm import ATOMIC_CAPS

__all__ = ["ConnectionManager", "COUNTERS", "UDP_SPORT_BASE"]


class ConnectionManager(wiring.Component):
    """Connection manager: opens, updates and closes QPs for hosts that ask over UDP, and
    starts the traffic generator for them.

    Datagrams (``CM`` header of :mod:`rocegen.wire.headers`, 64 bytes, big-endian fields):
    byte 0 holds ``info_valid`` (bit 0), ``req_type`` (bits 3:1), ``ack_valid`` (bit 4) and
    ``ack_type`` (bits 7:5); ``loc_*`` describe the sender and ``rem_*`` its peer, so in a
    request ``rem_qpn`` names one of our QPs. Byte 51 flags test traffic, bytes 52..63 describe it.

    Extensions, in bytes the original tools send as zero (zero keeps the original behaviour):

    * byte 1, path MTU code: 0 the default (``default_pmtu``), 1..5 = 256, 512, 1024, 2048, 4096
      bytes; larger codes make the request illegal;
    * byte 5, retransmit timeout code: 0 the default (``default_timeout``), 1..31 the QP's
      timeout (4.096 us x 2^code); larger codes make the request illegal;
    * byte 25, retry counts: bit 7 set means "use bits 2:0 as the retry count and bits 6:4 as the
      RNR retry count (7 = forever)"; bit 7 clear keeps the defaults;
    * byte 29, test traffic only: the remote window, 2^code bytes that message ``s`` cycles
      through at offset ``(s * dma_length) mod 2^code`` (code 1..31), so a host can check every
      message of a run in its memory; 0 writes every message at offset 0 (the original
      behaviour); larger codes make the request illegal. Requests other than test traffic
      ignore it.

    They are read by OPEN_QP (0: the default) and SEND_QP_INFO (0: keep the QP's value). Replies
    always carry zero in these bytes (tools of the original format read them as part of the QPN
    and PSN fields).

    Requests (``info_valid`` = 1), each answered by one reply unless noted:

    * OPEN_QP: allocates the lowest free QP (QPN = 256 + index), records the sender (IPv4 source
      address) as its owner, writes its context (RTS; peer = ``loc_qpn`` / ``loc_rkey`` /
      ``loc_vaddr`` / ``loc_ip``; UDP source port 0xC000 | index; DSCP and ECN from
      ``tclass``;
      ``ack_every_log2``; path MTU, timeout and retry counts from the extension bytes or the
      defaults) and its first PSN (the sender's ``loc_psn``), and replies ACK with ``loc_qpn`` =
      our QPN and ``loc_psn`` = that PSN. No free QP: NO_QP.
    * SEND_QP_INFO: rewrites the peer fields (and extension values) of the QP named by ``rem_qpn``;
      its state and PSN are unchanged (the transmit side owns the PSN once the QP runs: to start
      again from a new PSN, close and reopen).
    * MODIFY_QP_RTS: RTR -> RTS writes the new state; RTS -> RTS is accepted and changes
      nothing (as a verbs modify); from any other state it is illegal.
    * CLOSE_QP: writes an all-zero context (state RESET) and returns the number to the pool.
    * QUERY (code 5, with ``query`` only): the pattern sink's counters (``counts``) in bytes
      52-63 of an ACK (:data:`~rocegen.wire.cm.QUERY_REPLY`); a sender outside ``allow_net``
      gets NAK. It names no QP and changes nothing. Without ``query`` it is an unknown code.
    * NULL and ERROR: nothing, no reply. Any other code: dropped (``drop_unknown``).

    Legal state changes: RESET -> INIT -> RTR -> RTS, RTS -> RTS, anything -> ERROR, anything ->
    RESET (close); OPEN_QP moves a free QP from RESET to RTS in one step (no request of this
    protocol leads to INIT or RTR). A QP whose bit of ``errored`` is set (the retry engine put it
    in the error state: retries exhausted, a remote error NAK) is in ERROR: MODIFY_QP_RTS and
    test traffic on it are refused (``nak_illegal``); SEND_QP_INFO and CLOSE_QP work as usual,
    and the next OPEN_QP of its number leaves ERROR (the PSN write clears it).

    Refusals, all answered NAK and changing nothing: a sender or (OPEN_QP, SEND_QP_INFO) a peer
    ``loc_ip`` outside ``allow_net`` (``nak_not_allowed``, checked first); ``rem_qpn`` not a QP in
    use, an illegal extension code or state change (``nak_illegal``); a sender that is not the
    QP's owner (``nak_owner``).

    Test traffic (``info_valid`` = 0, ``txmeta_valid`` = 1, ``start`` = 1; no reply): one run of
    the traffic generator on the QP named by ``rem_qpn`` (in use, owned by the sender, in RTS,
    ``dma_length`` < 2^31; refusals count as above): ``n_transfers`` messages of ``dma_length``
    bytes ``frequency`` cycles apart, WRITE (``tx_type`` 1) or SEND, with immediate data (the QPN)
    when ``is_imm``, at remote offset 0 or cycling through the window of byte 29. ``start`` = 0:
    nothing.

    Replies leave on ``o`` from UDP port 0x8765 to the sender's IPv4 address and ``listening_port``
    (the request's UDP source port when that is 0), 64 bytes: ``info_valid``, the request's
    ``req_type``, ``ack_valid``, ``ack_type``; ``loc_*`` our side (OPEN_QP: our QPN or 0 when
    refused, the first PSN, R_Key and address 0; other requests echo the request's ``rem_*``),
    ``loc_ip`` = ``local_ip``; ``rem_*`` echo the request's ``loc_*``; ``listening_port`` echoed;
    the rest zero. With ``reads``, an ACK of OPEN_QP or SEND_QP_INFO states the READ depths in
    bytes 56-57 (:data:`~rocegen.wire.cm.READ_DEPTHS`; see below). With ``regions``, an ACK of
    OPEN_QP, SEND_QP_INFO or MODIFY_QP_RTS carries the QP's memory region as the responder's
    configuration table holds it (``cfg_qp`` / ``cfg``): R_Key in ``loc_rkey``, base in
    ``loc_vaddr``, length in ``dma_length`` (bytes 52-55; 2^32 - 1 for a region of 2^32
    bytes), and with ``atomics`` the byte order of the responder's atomics in ``tx_atomic``
    (byte 51 bits 6-5, :data:`~rocegen.wire.cm.ATOMIC_CAPS`). ``o_checksum`` holds the UDP
    checksum of the
    reply (pseudo-header with source ``local_ip``, UDP header, payload; never 0) for the whole
    packet, for the UDP transmitter to put in the header (it is also driven into
    ``meta.udp.checksum`` should that field exist).

    READ depths (``reads``): an OPEN_QP or SEND_QP_INFO request states in byte 57 the READs the
    host accepts from us at once (its ``rd_depth``; 0: not stated, as by the existing tools). An
    ACK of it sets the QP's READ limit, the READs the endpoint's READ requester may have
    outstanding on it: min(``max_rd_atomic``, ``rd_depth``), or 1 when the host did not state
    it (one READ is what every responder accepts; a SEND_QP_INFO sets it anew the same way, as
    it may name another peer). The ACK states ``rd_atomic`` (byte 56) = that limit and
    ``rd_depth`` (byte 57) = min(``rd_depth`` of the generator, 255), our READ responder's queue
    per QP (0: none). The limit leaves on ``rd_limit`` one cycle after the decision; an ACK of
    CLOSE_QP sets the QP's limit back to ``max_rd_atomic`` (the limit of a QP opened through the
    QP table's own port). Other replies, and every reply without ``reads``, carry zero there.

    Malformed datagrams are dropped and counted: damaged (``error``: on the way in, or with a UDP
    checksum that the network stack found wrong as the datagram passed) or not exactly 64 bytes
    (``drop_length``); not for ``local_ip`` and ``port`` (``drop_ip``); ``ack_valid`` set (a
    reply, not a request), an unknown request code, or neither ``info_valid`` nor
    ``txmeta_valid`` (``drop_unknown``).

    Counters pulse for one cycle: ``rx_requests`` once per datagram received (dropped ones
    included), ``replies`` when a reply's last beat leaves, the others once per event. A test
    traffic request arriving while the previous run still waits on ``gen`` is refused
    (``drop_gen``): the connection manager never waits for the generator, which may be busy
    with a long run.

    Latency and throughput: one datagram at a time. If its last beat moves in cycle t, the QP
    table and generator writes are offered (from registers) in cycle t + 3 (``rd_limit`` pulses in
    that cycle), the reply's first beat in t + 7 (the checksum is summed by a tree of adders in
    three stages and folded in a fourth) and, once the reply has left and the QP table writes
    are taken, the next datagram is taken 2 cycles after the reply's last beat: at most one
    request per 7 + 2 * 512/W cycles.
    Backpressure: ``i`` is held while a datagram is processed; ``o``, ``qp_ctl`` and ``qp_psn``
    may stall for any time; ``gen`` may stall without holding anything up. Byte order: as every
    packet stream (byte 0 of the datagram in lane 0 of the first beat).

    Structure: :class:`~rocegen.gateware.roce.cm.cm_receive.CmReceiver` takes a datagram and holds
    it; :class:`~rocegen.gateware.roce.cm.cm_control.CmControl` checks it against the records of
    its QP (:class:`~rocegen.gateware.roce.cm.cm_records.CmRecords`, which it updates), works out
    the new context (:class:`~rocegen.gateware.roce.cm.cm_context.CmContext`), makes the QP table
    writes and hands a reply to :class:`~rocegen.gateware.roce.cm.cm_reply.CmReplySender` and a
    generator run to :class:`~rocegen.gateware.roce.cm.cm_traffic.CmTraffic`.

    Parameters
    ----------
    width : int
        Data width W of ``i`` and ``o`` (64..512).
    num_qps : int
        QPs in the QP table (1..256).
    allow_net : (ip, prefix_len) or None
        Subnet whose hosts may use the connection manager (``ip`` an integer or dotted string,
        host bits zero); None: any host.
    default_pmtu : int
        Path MTU of a QP opened without an MTU code: 256, 512, 1024, 2048 or 4096.
    default_timeout, default_retry, default_rnr_retry : int
        Context defaults: timeout code 0..31 (0 = never), retry counts 0..7.
    ack_every_log2 : int
        AckReq on every 2^n-th packet inside long messages (0..7).
    port : int
        The UDP port served (the network stack must hand this port's datagrams to ``i``).
    regions : bool
        Replies name each QP's memory region: ports ``cfg_qp`` (out) and ``cfg`` (in,
        :data:`~rocegen.gateware.roce.responder.resp_layouts.RESP_QP_CONFIG`), a read port of the
        responder's configuration table answering one cycle after the QP.
    query : bool
        QUERY is answered: port ``counts`` (in,
        :data:`~rocegen.gateware.roce.frontend.pattern_sink.PATTERN_COUNTS`), the pattern sink's.
    reads : bool
        ACKs state the READ depths and set each QP's READ limit: port ``rd_limit`` (out,
        ``stream.Signature(READ_LIMIT, always_ready=True)``,
        :data:`~rocegen.gateware.roce.read.read_layouts.READ_LIMIT`: ``qp``, ``limit``), for the
        READ requester's table (:class:`~rocegen.gateware.roce.read.read_track.ReadTrack` ``limit``).
    max_rd_atomic : int
        The READ requester's most READs outstanding per QP (1..16, default 16); used with
        ``reads`` only, as ``rd_depth``.
    rd_depth : int
        The READ responder's queue per QP (a power of two from 16 to 1024), or 0 (default):
        no READ responder.
    atomics : None, ``"little"`` or ``"big"``
        With ``regions``: the byte order of the atomics the responder executes, stated in the
        ACKs that name a region (None, the default: none stated, 0).

    The traffic class of the QPs an OPEN_QP opens (DSCP, ECN of their data packets) is that of
    input ``tclass`` (:data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG`) in the cycle of
    the decision.

    The QP pool may be shared with another manager (the IB CM's
    :class:`~rocegen.gateware.roce.ibcm.ibcm_qps.IbCmQps`): input ``reserved`` (bit k: QP k is
    the other's) keeps its QPs out of the free QP OPEN_QP takes (a QP reserved in cycle t is
    never taken by a decision after t + 1), and a request naming one of them finds it not in
    use (NAK illegal: neither manager can close or change the other's QPs). Output
    ``pool_idle`` is high in a cycle in which no request is offered nor will be in the next
    (no datagram's last beat moves), none is decided and no QP is being taken: the other may
    take or give back a QP then (its ``reserved`` changing from the next cycle), and the free
    QP of a request's look-up (its region's read included) is the one its decision takes.
    """

    def __init__(self, width, num_qps, *, allow_net=None, default_pmtu=4096, default_timeout=14,
                 default_retry=7, default_rnr_retry=7, ack_every_log2=4, port=CM_PORT,
                 regions=False, query=False, reads=False, max_rd_atomic=MAX_RD_ATOMIC,
                 rd_depth=0, atomics=None):
        check_width(width)
        if atomics not in ATOMIC_CAPS:
            raise ValueError(f"atomics must be None, 'little' or 'big', not {atomics!r}")
        if atomics is not None and not regions:
            raise ValueError("atomics are stated with the regions: atomics needs regions=True")
        self.atomics = atomics
        int_param("num_qps", num_qps, 1, MAX_QPS)
        if isinstance(default_pmtu, bool) or not isinstance(default_pmtu, int):
            raise TypeError(f"default_pmtu must be an integer, not {default_pmtu!r}")
        if default_pmtu not in PMTU_LOG2:
            raise ValueError(f"default_pmtu must be one of {', '.join(map(str, PMTU_LOG2))}, "
                             f"not {default_pmtu}")
        int_param("default_timeout", default_timeout, 0, 31)
        int_param("default_retry", default_retry, 0, 7)
        int_param("default_rnr_retry", default_rnr_retry, 0, 7)
        int_param("ack_every_log2", ack_every_log2, 0, 7)
        int_param("port", port, 1, 0xFFFF)
        for name, value in (("regions", regions), ("query", query)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        self.regions, self.query = regions, query
        self.reads, self.max_rd_atomic, self.rd_depth = read_params(reads, max_rd_atomic,
                                                                    rd_depth)
        self.width = width
        self.num_qps = num_qps
        self.allow_net = allow_net
        self.net = parse_net(allow_net)
        self.default_pmtu = default_pmtu
        self.default_timeout = default_timeout
        self.default_retry = default_retry
        self.default_rnr_retry = default_rnr_retry
        self.ack_every_log2 = ack_every_log2
        self.port = port
        members = {
            "i": In(PacketSignature(width, UDP_RX_META)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
            "o_checksum": Out(16),
            "local_ip": In(32),
            "tclass": In(TRAFFIC_CONFIG),
            "qp_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "qp_psn": Out(stream.Signature(PSN_WRITE)),
            "gen": Out(stream.Signature(GEN_CONFIG)),
            "qp_open": Out(num_qps),
            "errored": In(num_qps),
            "reserved": In(num_qps),
            "pool_idle": Out(1),
        }
        if regions:
            members.update({"cfg_qp": Out(range(num_qps)), "cfg": In(RESP_QP_CONFIG)})
        if query:
            members["counts"] = In(PATTERN_COUNTS)
        if reads:
            members["rd_limit"] = Out(stream.Signature(READ_LIMIT, always_ready=True))
        members.update({name: Out(1) for name in COUNTERS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        rx = m.submodules.receive = CmReceiver(self.width)
        records = m.submodules.records = CmRecords(self.num_qps)
        ctl = m.submodules.control = CmControl(
            self.num_qps, allow_net=self.allow_net, port=self.port,
            default_pmtu=self.default_pmtu, default_timeout=self.default_timeout,
            default_retry=self.default_retry, default_rnr_retry=self.default_rnr_retry,
            ack_every_log2=self.ack_every_log2, regions=self.regions, query=self.query,
            reads=self.reads, max_rd_atomic=self.max_rd_atomic, rd_depth=self.rd_depth,
            atomics=self.atomics)
        tx = m.submodules.reply = CmReplySender(self.width)
        traffic = m.submodules.traffic = CmTraffic()

        wiring.connect(m, wiring.flipped(self.i), rx.i)
        wiring.connect(m, rx.o, ctl.i)
        wiring.connect(m, ctl.lookup, records.lookup)
        wiring.connect(m, ctl.record, records.write)
        wiring.connect(m, ctl.reply, tx.i)
        wiring.connect(m, tx.o, wiring.flipped(self.o))
        wiring.connect(m, ctl.run, traffic.i)
        wiring.connect(m, traffic.gen, wiring.flipped(self.gen))
        for name in ("qp_ctl", "qp_psn"):
            wiring.connect(m, getattr(ctl, name), wiring.flipped(getattr(self, name)))
        m.d.comb += [
            ctl.local_ip.eq(self.local_ip), ctl.tclass.eq(self.tclass), ctl.reply_busy.eq(tx.busy),
            ctl.gen_busy.eq(traffic.gen.valid),
            records.errored.eq(self.errored), self.qp_open.eq(records.qp_open),
            records.reserved.eq(self.reserved),
            # (a datagram ending now is a request offered in the next cycle)
            self.pool_idle.eq(ctl.pool_idle & ~(self.i.valid & self.i.ready & self.i.payload.last)),
            self.o_checksum.eq(tx.o_checksum), self.replies.eq(tx.sent),
        ]
        m.d.comb += [getattr(self, name).eq(getattr(ctl, name)) for name in CONTROL_COUNTERS]
        if self.regions:
            m.d.comb += [self.cfg_qp.eq(ctl.cfg_qp), ctl.cfg.eq(self.cfg)]
        if self.query:
            m.d.comb += ctl.counts.eq(self.counts)
        if self.reads:
            wiring.connect(m, ctl.rd_limit, wiring.flipped(self.rd_limit))
        return m
