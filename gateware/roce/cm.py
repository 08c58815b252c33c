"""The out-of-band connection manager: QP set-up over 64-byte UDP datagrams on port 17185."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import UDP_RX_META
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.layouts import MAX_QPS, QP_CONTEXT, QPN_BASE, QpState, WrOpcode
from rocegen.gateware.roce.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.gateware.roce.traffic_gen import GEN_CONFIG
from rocegen.wire.addr import parse_net
from rocegen.wire.cm import (
    ACK_ACK,
    ACK_NAK,
    ACK_NO_QP,
    CM_PORT,
    REPLY_PORT,
    REQ_CLOSE_QP,
    REQ_ERROR,
    REQ_MODIFY_QP_RTS,
    REQ_NULL,
    REQ_OPEN_QP,
    REQ_SEND_QP_INFO,
)
from rocegen.wire.headers import CM, IP_PROTO_UDP, UDP

__all__ = ["ConnectionManager", "COUNTERS", "UDP_SPORT_BASE"]

#: QP ``k`` sends from UDP source port ``UDP_SPORT_BASE | k``.
UDP_SPORT_BASE = 0xC000
#: Counter pulses, in port order.
COUNTERS = ("rx_requests", "replies", "drop_length", "drop_unknown", "drop_ip", "nak_illegal",
            "nak_owner", "nak_not_allowed", "no_qp", "drop_gen")


_BYTES = CM.length                  # 64
_BITS = 8 * _BYTES
_PMTU_LOG2 = {256: 8, 512: 9, 1024: 10, 2048: 11, 4096: 12}

#: What the connection manager keeps per QP besides the in-use bit.
_RECORD = data.StructLayout({"owner": 32, "context": QP_CONTEXT})


def _int_param(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be {lo}..{hi}, not {value}")
    return value


def _first_zero(bits, n):
    """Index of the lowest zero among ``bits[0:n]`` by a balanced tree (depth log2 n):
    ``(found, index)``."""
    nodes = [(~bits[k], Const(0, 0)) for k in range(n)]
    while len(nodes) > 1:
        if len(nodes) % 2:
            nodes.append((Const(0, 1), Const(0, len(nodes[0][1]))))
        nodes = [(fa | fb, Mux(fa, Cat(ia, Const(0, 1)), Cat(ib, Const(1, 1))))
                 for (fa, ia), (fb, ib) in zip(nodes[0::2], nodes[1::2])]
    return nodes[0]


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
      ``loc_vaddr`` / ``loc_ip``; UDP source port 0xC000 | index; DSCP and ECN 0;
      ``ack_every_log2``; path MTU, timeout and retry counts from the extension bytes or the
      defaults) and its first PSN (the sender's ``loc_psn``), and replies ACK with ``loc_qpn`` =
      our QPN and ``loc_psn`` = that PSN. No free QP: NO_QP.
    * SEND_QP_INFO: rewrites the peer fields (and extension values) of the QP named by ``rem_qpn``;
      its state and PSN are unchanged (the transmit side owns the PSN once the QP runs: to start
      again from a new PSN, close and reopen).
    * MODIFY_QP_RTS: RTR -> RTS writes the new state; RTS -> RTS is accepted and changes
      nothing (as a verbs modify); from any other state it is illegal.
    * CLOSE_QP: writes an all-zero context (state RESET) and returns the number to the pool.
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
    the rest zero. ``o_checksum`` holds the UDP checksum of the reply (pseudo-header with source
    ``local_ip``, UDP header, payload; never 0) for the whole packet, for the UDP transmitter to
    put in the header (it is also driven into ``meta.udp.checksum`` should that field exist).

    Malformed datagrams are dropped and counted: damaged (``error``) or not exactly 64 bytes
    (``drop_length``); not for ``local_ip`` and ``port`` (``drop_ip``); ``ack_valid`` set (a
    reply, not a request), an unknown request code, or neither ``info_valid`` nor
    ``txmeta_valid`` (``drop_unknown``).

    Counters pulse for one cycle: ``rx_requests`` once per datagram received (dropped ones
    included), ``replies`` when a reply's last beat leaves, the others once per event. A test
    traffic request arriving while the previous run still waits on ``gen`` is refused
    (``drop_gen``): the connection manager never waits for the generator, which may be busy
    with a long run.

    Latency and throughput: one datagram at a time. If its last beat moves in cycle t, the QP
    table and generator writes are offered (from registers) in cycle t + 3, the reply's first beat
    in t + 25 (the checksum is summed two words per cycle) and, once the reply has left and the QP
    table writes are taken, the next datagram is taken 2 cycles after the reply's last beat: at
    most one request per 25 + 2 * 512/W cycles. Backpressure: ``i`` is held while a datagram is
    processed; ``o``, ``qp_ctl`` and ``qp_psn`` may stall for any time; ``gen`` may stall without
    holding anything up. Byte order: as every packet stream (byte 0 of the datagram in lane 0 of
    the first beat).

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
    """

    def __init__(self, width, num_qps, *, allow_net=None, default_pmtu=4096, default_timeout=14,
                 default_retry=7, default_rnr_retry=7, ack_every_log2=4, port=CM_PORT):
        check_width(width)
        _int_param("num_qps", num_qps, 1, MAX_QPS)
        if isinstance(default_pmtu, bool) or not isinstance(default_pmtu, int):
            raise TypeError(f"default_pmtu must be an integer, not {default_pmtu!r}")
        if default_pmtu not in _PMTU_LOG2:
            raise ValueError(f"default_pmtu must be one of {', '.join(map(str, _PMTU_LOG2))}, "
                             f"not {default_pmtu}")
        _int_param("default_timeout", default_timeout, 0, 31)
        _int_param("default_retry", default_retry, 0, 7)
        _int_param("default_rnr_retry", default_rnr_retry, 0, 7)
        _int_param("ack_every_log2", ack_every_log2, 0, 7)
        _int_param("port", port, 1, 0xFFFF)
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
            "qp_ctl": Out(stream.Signature(CONTEXT_WRITE)),
            "qp_psn": Out(stream.Signature(PSN_WRITE)),
            "gen": Out(stream.Signature(GEN_CONFIG)),
            "qp_open": Out(num_qps),
            "errored": In(num_qps),
        }
        members.update({name: Out(1) for name in COUNTERS})
        super().__init__(members)

    def _allowed(self, ip):
        if self.net is None:
            return Const(1, 1)
        net, mask = self.net
        return (ip & mask) == net

    def elaborate(self, platform):
        m = Module()
        W = self.width
        NB = _BITS // W                     # beats of a 64-byte datagram
        n = self.num_qps
        abits = (n - 1).bit_length()

        mem = m.submodules.records = Memory(shape=_RECORD, depth=n, init=[])
        rd = mem.read_port(domain="comb")
        wr = mem.write_port()

        # ---- receive: the datagram and what the stack parsed about it ----
        buf = Signal(_BITS)
        beats = Signal(range(NB + 2))       # beats taken so far (saturating past NB)
        length_ok = Signal()
        src_ip = Signal(32)
        dst_ip = Signal(32)
        sport = Signal(16)
        dport = Signal(16)

        req = CM.from_lanes(buf)
        in_use = Signal(n)                  # bit k: QP k is open
        m.d.comb += self.qp_open.eq(in_use)

        # lowest free QP, registered (the pool changes in the cycle after a request is executed,
        # at least two cycles before the next one looks at it)
        found, first = _first_zero(in_use, n)
        any_free = Signal()
        free_idx = Signal(range(n))
        m.d.sync += [any_free.eq(found), free_idx.eq(first)]

        # the QP named by rem_qpn; its record is read while the request is decoded
        target = Signal(24)
        m.d.comb += target.eq(req.rem_qpn - QPN_BASE)
        idx = Signal(range(n))
        m.d.comb += [idx.eq(target[:abits]), rd.addr.eq(idx)]
        in_range = (req.rem_qpn >= QPN_BASE) & (req.rem_qpn < QPN_BASE + n)
        is_open = Signal()                  # registered in READ (the pool is settled by then)
        m.d.sync += is_open.eq(in_range & in_use.bit_select(idx, 1))
        # owner and context of the QP named by rem_qpn, read and checked in READ
        rec = Signal(_RECORD)
        owner_ok = Signal()
        state = Signal(QpState)             # a QP the retry engine failed reads as ERROR
        m.d.sync += [rec.eq(rd.data), owner_ok.eq(rd.data.owner == src_ip),
                     state.eq(Mux(self.errored.bit_select(idx, 1), QpState.ERROR,
                                  rd.data.context.state))]

        # ---- outputs held in registers ----
        rep = Signal(CM.layout)             # the reply's fields
        rep_ip = Signal(32)
        rep_port = Signal(16)
        lip = Signal(32)                    # local_ip, sampled with the request
        cksum = Signal(16)
        obeat = Signal(range(NB))

        for s in (self.qp_ctl, self.qp_psn, self.gen):
            with m.If(s.ready):
                m.d.sync += s.valid.eq(0)

        # ---- the reply checksum, two words per cycle ----
        lanes = CM.to_lanes(rep)
        hdr_words = [lip[16:], lip[:16], rep_ip[16:], rep_ip[:16], Const(IP_PROTO_UDP, 16),
                     Const(UDP.length + _BYTES, 16), Const(REPLY_PORT, 16), rep_port,
                     Const(UDP.length + _BYTES, 16), Const(0, 16)]
        words = be_words(lanes) + hdr_words          # 32 + 10 = 42 words
        npairs = len(words) // 2
        pairs = Cat(*words)
        scnt = Signal(range(npairs))
        acc = Signal(22)
        psum = Signal(18)                   # the words read in the previous cycle, summed
        sum_first = Signal()                # the first cycle of SUM
        rest = Signal(len(pairs) - 64)      # the pairs after the ones read now

        # ---- decisions (valid in EXEC, when the record read has completed) ----
        info = req.info_valid
        kind = req.req_type
        # what depends on the datagram alone is found in READ and registered for EXEC
        ext_ok = Signal()
        src_allowed = Signal()
        peer_allowed = Signal()
        addr_bad = Signal()
        gen_bad = Signal()
        opening = Signal()                  # an OPEN_QP request...
        open_ok = Signal()                  # ... that gets a QP if it is answered at all
        ext_ok_c = (req.pmtu_code <= 5) & (req.timeout_code <= 31)
        src_allowed_c = self._allowed(src_ip)
        peer_allowed_c = self._allowed(req.loc_ip)
        m.d.sync += [
            ext_ok.eq(ext_ok_c), src_allowed.eq(src_allowed_c), peer_allowed.eq(peer_allowed_c),
            opening.eq(kind == REQ_OPEN_QP),
            open_ok.eq(ext_ok_c & src_allowed_c & peer_allowed_c & any_free),
            addr_bad.eq((dst_ip != self.local_ip) | (dport != self.port)),
            gen_bad.eq(req.dma_length[31] | (req.window_log2 > 31)),
        ]
        # the record and pool writes of a request, applied in the cycle after EXEC
        rec_we = Signal()
        pool_set = Signal()
        pool_clr = Signal()
        pool_idx = Signal(range(n))
        m.d.sync += [rec_we.eq(0), pool_set.eq(0), pool_clr.eq(0)]
        m.d.comb += [wr.en.eq(rec_we), wr.addr.eq(self.qp_ctl.payload.qp),
                     wr.data.owner.eq(src_ip), wr.data.context.eq(self.qp_ctl.payload.context)]
        with m.If(pool_set):
            m.d.sync += in_use.bit_select(pool_idx, 1).eq(1)
        with m.If(pool_clr):
            m.d.sync += in_use.bit_select(pool_idx, 1).eq(0)

        ctx_new = Signal(QP_CONTEXT)        # the context to write

        def with_ext(pmtu_log2, timeout, retry_cnt, rnr_retry):
            """The extension bytes where given, else these values."""
            return [
                ctx_new.pmtu_log2.eq(Mux(req.pmtu_code == 0, pmtu_log2, req.pmtu_code[:4] + 7)),
                ctx_new.timeout.eq(Mux(req.timeout_code == 0, timeout, req.timeout_code[:5])),
                ctx_new.retry_cnt.eq(Mux(req.retry_set, req.retry_cnt, retry_cnt)),
                ctx_new.rnr_retry.eq(Mux(req.retry_set, req.rnr_retry, rnr_retry)),
            ]

        def set_peer():
            return [ctx_new.peer_ip.eq(req.loc_ip), ctx_new.peer_qpn.eq(req.loc_qpn),
                    ctx_new.rkey.eq(req.loc_rkey), ctx_new.base_va.eq(req.loc_vaddr)]

        pulse = {name: Signal(name=f"pulse_{name}") for name in COUNTERS}
        for name in COUNTERS:
            if name != "replies":
                m.d.comb += getattr(self, name).eq(pulse[name])

        # the context a request of this kind writes (used only when the checks pass)
        m.d.comb += ctx_new.eq(rec.context)
        with m.Switch(kind):
            with m.Case(REQ_OPEN_QP):
                m.d.comb += [ctx_new.state.eq(QpState.RTS),
                             ctx_new.udp_sport.eq(UDP_SPORT_BASE | free_idx),
                             ctx_new.dscp.eq(0), ctx_new.ecn.eq(0),
                             ctx_new.ack_every_log2.eq(self.ack_every_log2)]
                m.d.comb += set_peer()
                m.d.comb += with_ext(_PMTU_LOG2[self.default_pmtu], self.default_timeout,
                                     self.default_retry, self.default_rnr_retry)
            with m.Case(REQ_SEND_QP_INFO):
                m.d.comb += set_peer()
                c = rec.context
                m.d.comb += with_ext(c.pmtu_log2, c.timeout, c.retry_cnt, c.rnr_retry)
            with m.Case(REQ_MODIFY_QP_RTS):
                m.d.comb += ctx_new.state.eq(QpState.RTS)
            with m.Case(REQ_CLOSE_QP):
                m.d.comb += ctx_new.eq(0)

        recv = Signal(init=1)               # in RECV: i.ready from a register of its own
        m.d.comb += self.i.ready.eq(recv)
        with m.FSM():
            with m.State("RECV"):
                p = self.i.payload
                with m.If(self.i.valid):
                    m.d.sync += buf.eq(Cat(buf[W:], p.data))
                    with m.If(beats != NB + 1):
                        m.d.sync += beats.eq(beats + 1)
                    with m.If(p.last):
                        m.d.sync += [
                            beats.eq(0),
                            length_ok.eq((beats == NB - 1) & (p.keep == (1 << (W // 8)) - 1) &
                                         ~p.error),
                            src_ip.eq(p.meta.ipv4.src), dst_ip.eq(p.meta.ipv4.dst),
                            sport.eq(p.meta.udp.src_port), dport.eq(p.meta.udp.dst_port),
                            recv.eq(0),
                        ]
                        m.next = "READ"

            with m.State("READ"):
                # the record of rem_qpn is read and checked in this cycle (registered for EXEC)
                m.next = "EXEC"

            with m.State("EXEC"):
                m.d.comb += pulse["rx_requests"].eq(1)
                reply = Signal()
                ack = Signal(3)
                do_ctx = Signal()
                # the writes' values depend on the request kind alone, their valid on the checks
                ctx_qp = Mux(opening, free_idx, idx)
                m.d.sync += [self.qp_ctl.payload.qp.eq(ctx_qp),
                             self.qp_ctl.payload.context.eq(ctx_new), pool_idx.eq(ctx_qp),
                             self.qp_psn.payload.qp.eq(free_idx),
                             self.qp_psn.payload.psn.eq(req.loc_psn)]

                with m.If(~length_ok):
                    m.d.comb += pulse["drop_length"].eq(1)
                with m.Elif(addr_bad):
                    m.d.comb += pulse["drop_ip"].eq(1)
                with m.Elif(req.ack_valid):
                    m.d.comb += pulse["drop_unknown"].eq(1)
                with m.Elif(info):
                    with m.Switch(kind):
                        with m.Case(REQ_NULL, REQ_ERROR):
                            pass
                        with m.Case(REQ_OPEN_QP, REQ_SEND_QP_INFO, REQ_MODIFY_QP_RTS, REQ_CLOSE_QP):
                            m.d.comb += [reply.eq(1), ack.eq(ACK_NAK)]
                            peer_checked = (kind == REQ_OPEN_QP) | (kind == REQ_SEND_QP_INFO)
                            with m.If(~src_allowed | (peer_checked & ~peer_allowed)):
                                m.d.comb += pulse["nak_not_allowed"].eq(1)
                            with m.Elif(kind == REQ_OPEN_QP):
                                with m.If(~ext_ok):
                                    m.d.comb += pulse["nak_illegal"].eq(1)
                                with m.Elif(~any_free):
                                    m.d.comb += [pulse["no_qp"].eq(1), ack.eq(ACK_NO_QP)]
                                with m.Else():
                                    m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                                    m.d.sync += [pool_set.eq(1), self.qp_psn.valid.eq(1)]
                            with m.Elif(~is_open):
                                m.d.comb += pulse["nak_illegal"].eq(1)
                            with m.Elif(~owner_ok):
                                m.d.comb += pulse["nak_owner"].eq(1)
                            with m.Elif(kind == REQ_SEND_QP_INFO):
                                with m.If(~ext_ok):
                                    m.d.comb += pulse["nak_illegal"].eq(1)
                                with m.Else():
                                    m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                            with m.Elif(kind == REQ_MODIFY_QP_RTS):
                                with m.If(state == QpState.RTS):
                                    m.d.comb += ack.eq(ACK_ACK)
                                with m.Elif(state == QpState.RTR):
                                    m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                                with m.Else():
                                    m.d.comb += pulse["nak_illegal"].eq(1)
                            with m.Else():                       # close
                                m.d.comb += [ack.eq(ACK_ACK), do_ctx.eq(1)]
                                m.d.sync += pool_clr.eq(1)
                        with m.Default():
                            m.d.comb += pulse["drop_unknown"].eq(1)
                with m.Elif(req.txmeta_valid):
                    with m.If(~req.start):
                        pass
                    with m.Elif(~src_allowed):
                        m.d.comb += pulse["nak_not_allowed"].eq(1)
                    with m.Elif(~is_open):
                        m.d.comb += pulse["nak_illegal"].eq(1)
                    with m.Elif(~owner_ok):
                        m.d.comb += pulse["nak_owner"].eq(1)
                    with m.Elif((state != QpState.RTS) | gen_bad):
                        m.d.comb += pulse["nak_illegal"].eq(1)
                    with m.Elif(self.gen.valid):
                        m.d.comb += pulse["drop_gen"].eq(1)
                    with m.Else():
                        pass                    # a run starts: below
                with m.Else():
                    m.d.comb += pulse["drop_unknown"].eq(1)

                # a run for the generator: the configuration is written whenever the port is
                # free, its valid by the checks (the same as in the chain above, as one gate)
                with m.If(~self.gen.valid):
                    g = self.gen.payload
                    opcode = Mux(req.tx_type,
                                 Mux(req.is_imm, WrOpcode.WRITE_IMM.value, WrOpcode.WRITE.value),
                                 Mux(req.is_imm, WrOpcode.SEND_IMM.value, WrOpcode.SEND.value))
                    m.d.sync += [g.qp.eq(idx), g.opcode.eq(opcode),
                                 g.length.eq(req.dma_length[:31]), g.count.eq(req.n_transfers),
                                 g.spacing.eq(req.frequency), g.imm.eq(req.rem_qpn),
                                 g.window.eq(Mux(req.window_log2 == 0, 0,
                                                 Const(1, 32) << req.window_log2[:5]))]
                m.d.sync += self.gen.valid.eq(
                    length_ok & ~addr_bad & ~req.ack_valid & ~info & req.txmeta_valid &
                    req.start & src_allowed & is_open & owner_ok & (state == QpState.RTS) &
                    ~gen_bad & ~self.gen.valid | (self.gen.valid & ~self.gen.ready))

                with m.If(do_ctx):
                    m.d.sync += [self.qp_ctl.valid.eq(1), rec_we.eq(1)]

                m.d.sync += [
                    rep.eq(0),
                    rep.info_valid.eq(1), rep.req_type.eq(kind),
                    rep.ack_valid.eq(1), rep.ack_type.eq(ack),
                    rep.loc_qpn.eq(Mux(opening, Mux(open_ok, QPN_BASE + free_idx, 0),
                                       req.rem_qpn)),
                    rep.loc_psn.eq(Mux(opening, req.loc_psn, req.rem_psn)),
                    rep.loc_rkey.eq(Mux(opening, 0, req.rem_rkey)),
                    rep.loc_vaddr.eq(Mux(opening, 0, req.rem_vaddr)),
                    rep.loc_ip.eq(self.local_ip),
                    rep.rem_qpn.eq(req.loc_qpn), rep.rem_psn.eq(req.loc_psn),
                    rep.rem_rkey.eq(req.loc_rkey), rep.rem_vaddr.eq(req.loc_vaddr),
                    rep.rem_ip.eq(req.loc_ip),
                    rep.listening_port.eq(req.listening_port),
                    rep_ip.eq(src_ip),
                    rep_port.eq(Mux(req.listening_port != 0, req.listening_port, sport)),
                    lip.eq(self.local_ip),
                    acc.eq(0), psum.eq(0), scnt.eq(0), obeat.eq(0), sum_first.eq(1),
                ]
                with m.If(reply):
                    m.next = "SUM"
                with m.Else():
                    m.next = "DRAIN"

            with m.State("SUM"):
                # pairs 0 and 1 straight from the registers, the others from a copy shifted down
                # by a pair per cycle (zeros behind them); what is read in one cycle is summed,
                # and accumulated in the next: after npairs cycles the accumulator has it all
                w = [pairs[16 * k:16 * (k + 1)] for k in range(4)]
                m.d.sync += [psum.eq(Mux(sum_first, (w[0] + w[1]) + (w[2] + w[3]),
                                         rest[:16] + rest[16:32])),
                             acc.eq(acc + psum), scnt.eq(scnt + 1), sum_first.eq(0),
                             rest.eq(Mux(sum_first, pairs[64:], rest[32:]))]
                with m.If(scnt == npairs - 1):
                    m.next = "FOLD"

            with m.State("FOLD"):
                total = ones_complement_sum([acc[:16], acc[16:]])
                m.d.sync += cksum.eq(Mux(total == 0xFFFF, 0xFFFF, ~total))
                m.next = "SEND"

            with m.State("SEND"):
                o = self.o.payload
                m.d.comb += [
                    self.o.valid.eq(1),
                    o.data.eq(lanes.word_select(obeat, W) if NB > 1 else lanes),
                    o.keep.eq((1 << (W // 8)) - 1),
                    o.last.eq(obeat == NB - 1),
                    o.meta.udp.dst_ip.eq(rep_ip),
                    o.meta.udp.src_port.eq(REPLY_PORT),
                    o.meta.udp.dst_port.eq(rep_port),
                    o.meta.udp.length.eq(_BYTES),
                    self.o_checksum.eq(cksum),
                ]
                if "checksum" in UDP_TX_META.members["udp"].members:
                    m.d.comb += o.meta.udp.checksum.eq(cksum)
                with m.If(self.o.ready):
                    m.d.sync += obeat.eq(obeat + 1)
                    with m.If(obeat == NB - 1):
                        m.d.comb += self.replies.eq(1)
                        m.next = "DRAIN"

            with m.State("DRAIN"):
                with m.If(~self.qp_ctl.valid & ~self.qp_psn.valid):
                    m.d.sync += recv.eq(1)
                    m.next = "RECV"
        return m
