from types import SimpleNamespace

from amaranth.hdl import Module
from amaranth.lib import wiring

from rocegen.gateware.roce.endpoint.config import (
    RD_HOLE_WAIT,
    EndpointConfig,
    default_clk_hz,
    default_line_gbps,
)
from rocegen.gateware.roce.endpoint.endpoint_qp_stats import QP_COUNTERS
from rocegen.gateware.roce.endpoint.endpoint_stats import ROCE_STATS, STATS
from rocegen.gateware.roce.features.congestion import CongestionFeature
from rocegen.gateware.roce.features.connection import ConnectionFeature
from rocegen.gateware.roce.features.ibcm import IbCmFeature
from rocegen.gateware.roce.features.memory import MemoryFeature
from rocegen.gateware.roce.features.network import NetworkFeature
from rocegen.gateware.roce.features.pfc import IP_MTU, PMTU_MAX, PfcFeature
from rocegen.gateware.roce.features.read_requester import ReadRequesterFeature
from rocegen.gateware.roce.features.requester import RequesterFeature
from rocegen.gateware.roce.features.responder import ResponderFeature
from rocegen.gateware.roce.features.services import ServicesFeature
from rocegen.gateware.roce.features.statistics import StatisticsFeature
from rocegen.gateware.roce.memory.payload_memory import MEMORIES

__all__ = ["RoceEndpoint", "PORT_ORDER", "EndpointConfig", "ROCE_STATS", "STATS", "MEMORIES", "PMTU_MAX",
           "IP_MTU", "QP_COUNTERS", "RD_HOLE_WAIT", "default_clk_hz", "default_line_gbps"]

#: The order of the endpoint's ports (that of the Verilog core's ports and of the integration
#: kit's tables); the ports of a feature not listed here follow, in the order of the features.
PORT_ORDER = (
    "local_mac", "local_ip", "mac_rx", "mac_tx", "wr", "cpl", "wr_room", "qp_ctl", "qp_psn",
    "gen", "gen_busy", "gen_posted", "gen_ok", "gen_err", "gen_cycles", "qp_open", "service_qps",
    "rdma_cm_connect", "rdma_cm_event", "rdma_cm_disconnect", "msg",
    "qp_stats_qp", "qp_stats_sel", "qp_stats_data", "stats_addr", "stats_data", "tc_cfg",
    "pfc_cfg", "pause_rx", "pause_tx", "cc_cfg", "cc_qp", "cc_rate", "qp_info_qp",
    "qp_info_context", "qp_info_psn", "recv", "recv_cpl", "resp_cfg", "resp_cnp_cfg",
    "rd_wait_cfg", "mem_w", "axi",
)


class RoceEndpoint(wiring.Component):
    """The RoCEv2 requester endpoint: network stack, QP table, work-request scheduler, payload
    memory and reader, packet builder, ACK receive path and completion tracker, with the
    traffic generator and the streaming front end as extra work-request sources.

    Parameters
    ----------
    ``width``, ``num_qps`` and, as keywords, every other field of
    :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig` (which validates them and lists each
    one's range, default and help); the feature blocks
    (:mod:`rocegen.gateware.roce.features`) take the config. In more detail:

    width : int
        Data width W of the MAC port and every stream (64..512).
    num_qps : int
        QPs in the QP table (1..256), numbered from 256.
    memory : ``"onchip"`` or ``"axi4"``
        Where payloads live: an on-chip buffer of ``mem_bytes`` (written through ``mem_w`` and by
        the streaming front end), or an external memory through the AXI4 master ``axi``.
    mem_bytes : int
        Local memory size (power of two); with ``axi4``, the size of the address space used.
    wr_depth : int
        Work requests held per QP until they complete: waiting, being sent and sent but not
        yet acknowledged (a power of two, 1..1024; the completion tracker has as many). Both
        rings are block RAM; one QP sending small messages needs more than its peer's ACK
        delay in messages (about 1.3 us against a ConnectX that coalesces its ACKs).
    window : int
        PSNs a QP may have outstanding (sent, not acknowledged), 1..2^23-1: a QP stalls when
        its window is full, and the packet that fills it asks for an acknowledgement.
    clk_hz : int
        The clock frequency, for the retransmit and RNR timers (default: 322.265625 MHz, or
        156.25 MHz at 64 bits).
    ring_base, ring_bytes, max_message, max_inflight
        The streaming front end's ring in local memory (default: the upper half of an on-chip
        buffer, or the top 1 MiB of an AXI4 space), its longest message and its messages in
        flight.
    cm_port, cm_allow_net, pmtu, cm_timeout, cm_retry, cm_rnr_retry
        The connection manager (:class:`~rocegen.gateware.roce.cm.cm.ConnectionManager`): its UDP
        port, the subnet allowed to open QPs (``(ip, prefix_len)`` or None for any), the path
        MTU, retransmit timeout code and retry counts of QPs opened without the extension bytes.
    vlan, pcp, arp_*
        As for :class:`~rocegen.gateware.net.stack.NetStack` (``pcp``: after reset; at run time
        through ``tc_cfg``).
    dscp, ecn
        The traffic class of the QPs the connection manager opens, after reset (at run time
        through ``tc_cfg``): their packets' DSCP (0..63, default 0), and ``ecn`` True (the
        default) to send their data packets ECN-capable, ECT(0), so that switches mark them
        rather than drop them; False: not ECN-capable. The responder's ACKs are not
        ECN-capable; its CNPs go with DSCP 48.
    dcqcn : bool
        With DCQCN's reaction point (:class:`~rocegen.gateware.roce.cc.congestion.ReactionPoint`):
        each QP's rate is cut by the CNPs it receives and recovers by the DCQCN law, through a
        rate limiter in front of the scheduler; its parameters at run time through ``cc_cfg``
        (with a bypass: line rate, CNPs ignored). Default False.
    dcqcn_params : dict or None
        The reaction point's parameters after reset, in physical units (the keys of
        :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_DEFAULTS`, e.g. ``timer_us``,
        ``ai_mbps``, ``min_mbps``, and ``bypass``); default the DCQCN paper's.
    line_gbps : int or float or None
        The line rate the reaction point's rates count against, in wire bits per second
        (default 100, or 10 at 64 bits), and the rate of PFC's pause quanta.
    pfc : None, ``"mac"`` or ``"core"``
        PFC (802.1Qbb; 802.3x PAUSE too) on priority ``pfc_prio``
        (:class:`~rocegen.gateware.mac.pfc.PfcPort`): the endpoint starts no frame while the
        link partner pauses that priority (the frame on the wire is finished), and asks it
        to pause (XOFF, then XON) when its receive FIFO, or the responder's ingress FIFO,
        passes a threshold that leaves room for what is still in flight (the FIFOs are made
        large enough: :func:`~rocegen.gateware.mac.pfc.lossless_depth`). ``"mac"``: the MAC decodes and
        sends the pause frames (ports ``pause_rx`` / ``pause_tx``; the CMAC does);
        ``"core"``: the endpoint does (for the XGMII MAC). Default None: no PFC.
    pfc_prio, pfc_cable_ns
        The priority after reset (0..7, default 3; at run time through ``pfc_cfg``) and the
        one-way cable delay the headroom allows for (default 100 ns).
    rx_fifo_beats : int or None
        The stack's receive FIFO (:class:`~rocegen.gateware.net.stack.NetStack`; with ``pfc``,
        at least what the headroom needs).
    responder : bool
        With the RC responder (:class:`~rocegen.gateware.roce.responder.responder.Responder`): the peers
        WRITE and SEND into local memory, on chip or AXI4 (a receive completion leaves once
        the payload of its request is written: with AXI4, once its write responses came back).
    resp_region, rkey_seed, rnr_timer, rq_depth
        The responder: the region of local memory every QP may be written in after reset
        (``(base, length)`` in bytes; default the lower half of local memory), the seed
        of the QPs' R_Keys (:func:`~rocegen.gateware.roce.responder.responder.default_config`), the RNR
        timer code of its RNR NAKs and the receive buffers each QP can have posted.
        With the responder, the connection manager's ACKs name each QP's region (its R_Key,
        base and length: :class:`~rocegen.gateware.roce.cm.cm.ConnectionManager` ``regions``).
    reads, rd_depth, max_rd_atomic, rd_hole_wait
        With the responder: RDMA READ both ways (default: with the responder).

        As responder, the peers READ the QPs' regions (their read right,
        :func:`~rocegen.gateware.roce.responder.responder.default_config` gives it); the response packets
        take turns with the requester's packets at the payload reader, per packet, and bypass
        the scheduler, the completion tracker and the retry engine; a response whose payload
        does not start at a word boundary is realigned
        (:class:`~rocegen.gateware.roce.responder.resp_read_align.RespReadAlign`). ``rd_depth``: the READs
        each QP can have queued (a power of two, 16..1024; default 16).

        As requester, a work request with ``opcode`` READ reads ``length`` bytes at the QP's
        peer base address + ``remote_offset`` (with the peer's R_Key of the QP context) into
        local memory at ``local_addr`` (any byte address): one READ request packet taking a PSN
        per response; the responses (:class:`~rocegen.gateware.roce.read.read_ingress.ReadIngress`)
        are checked against the QP's outstanding READs
        (:class:`~rocegen.gateware.roce.read.read_track.ReadTrack`) and written into local memory
        (:class:`~rocegen.gateware.roce.read.read_place.ReadPlace`; the front end's and the
        responder's writes go first); the READ completes in order with the QP's other work
        requests once its data is in memory. Every acknowledgement passes through the same
        placement, so a READ response acknowledges the WRITEs and SENDs before it and an
        acknowledgement never overtakes a response's data. A gap in the responses (or a timeout)
        reissues a READ for the rest through the retry engine's rewind, within ``retry_cnt``; a
        NAK fails the QP. A lost response is asked for again selectively: the rest of its READ
        by a READ request of its own (:class:`~rocegen.gateware.roce.read.read_resend.ReadResend`),
        and a QP with READs outstanding that has had no response for ``rd_hole_wait``
        microseconds (default 32; 0: never; at run time through ``rd_wait_cfg``) asks again
        (:class:`~rocegen.gateware.roce.read.read_hole_timer.ReadHoleTimer`): for its current hole,
        or without one by go-back-N from its oldest missing response. The wait should be
        more than the round trip, the peer's response time and the line time of two
        responses (else a hole is asked for twice, or a READ resent early).
        ``max_rd_atomic``: READs a QP may have outstanding (1..16, default
        16); a QP opened by the connection manager gets at most what its peer states it
        accepts (one if it states nothing). A QP with that many starts no work request until
        one is answered (it still resends after a rewind). Without ``reads`` a READ work
        request completes with UNSUPPORTED.
    resp_ack_every, cnp_interval
        The responder's ACKs by count (an ACK of every N-th request a QP executes without an
        answer, besides AckReq; 0..255, default 0: on AckReq only) and its notification
        point's shortest time between two CNPs of a QP, in cycles (default: 4 us at
        ``clk_hz``; 0: a CNP for every request marked CE; at run time through ``resp_cnp_cfg``).
    pattern_sink : bool or None
        With the responder: a :class:`~rocegen.gateware.roce.frontend.pattern_sink.PatternSink` checks
        every payload byte the responder writes against the test pattern of its local address
        (counters ``sink_bytes_checked`` / ``sink_bytes_wrong``, and the connection manager's
        QUERY). Default (None): on with the responder.

    Ports
    -----
    ``local_mac``, ``local_ip``; ``mac_rx`` / ``mac_tx``: the MAC (frames without FCS; the
    transmit side leaves each frame whole, back to back). ``wr``: work requests
    (:data:`~rocegen.gateware.roce.layouts.WORK_REQUEST`), ``cpl``: their completions;
    ``wr_room`` (bit per QP, from registers): the QP's queue of ``wr_depth`` requests has room.
    A request for a QP without room waits on ``wr`` and holds the user's later requests
    (one stream), never the front end's or the generator's; user logic that serves several
    QPs offers a request only when its bit is high.
    ``qp_ctl`` / ``qp_psn``: QP table writes (contexts, initial PSNs), beside the connection
    manager's (the hosts open QPs over UDP ``cm_port``); ``qp_open``: QPs the connection manager
    has open. ``gen``: traffic generator
    runs (:data:`~rocegen.gateware.roce.frontend.traffic_gen.GEN_CONFIG`) with ``gen_busy``,
    ``gen_posted``, ``gen_ok``, ``gen_err``, ``gen_cycles``. ``msg``: the streaming front end's
    input (messages, ``meta`` = :data:`~rocegen.gateware.roce.frontend.stream_in.STREAM_META`). ``mem_w``
    (on-chip memory only): word writes into the payload buffer. ``axi`` (AXI4 memory only).
    ``stats_addr`` / ``stats_data``: every counter of :data:`STATS`, one cycle after the address.
    ``qp_stats_qp`` / ``qp_stats_sel`` / ``qp_stats_data``: the per-QP counters of
    :data:`QP_COUNTERS` (packets, resent packets, ACKs, NAKs by kind, timeouts...), one cycle
    after the address. With ``qp_info=True``: ``qp_info_qp`` -> ``qp_info_context`` /
    ``qp_info_psn`` (next PSN to send), the QP table read back one cycle after the address
    through a read port of its own. With ``responder=True``: ``recv`` (receive buffers,
    :data:`~rocegen.gateware.roce.responder.resp_layouts.RECV_POST`), ``recv_cpl`` (their completions,
    :data:`~rocegen.gateware.roce.responder.resp_layouts.RECV_COMPLETION`), ``resp_cfg`` (each QP's
    region and RNR timer code, :data:`~rocegen.gateware.roce.responder.resp_layouts.RESP_CONFIG_WRITE`,
    always taken), ``resp_cnp_cfg`` (the CNP interval,
    :data:`~rocegen.gateware.roce.responder.resp_layouts.CNP_CONFIG`, always taken); with ``reads``,
    ``rd_wait_cfg`` (the READ timer's step in cycles, a wait of 4 steps,
    :data:`~rocegen.gateware.roce.read.read_layouts.READ_WAIT_CONFIG`, always taken). ``tc_cfg``: the
    traffic class (:data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG`: DSCP and ECN of the
    QPs opened from then on, the VLAN priority of every frame from the next one), always taken.
    With ``dcqcn=True``: ``cc_cfg`` (every DCQCN parameter and the bypass,
    :data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG`, in force a few cycles later,
    always taken), ``cc_qp`` -> ``cc_rate`` (a QP's current rate in bytes per cycle, Q7.20, one
    cycle after the address). With ``pfc``: ``pfc_cfg`` (priority and enable,
    :data:`~rocegen.gateware.roce.layouts.PFC_CONFIG`, always taken); with ``pfc="mac"``:
    ``pause_rx`` (In(8): bit n high while the MAC has priority n paused) and ``pause_tx``
    (Out(8): bit n asks the MAC to send XOFF for priority n, XON when it falls).

    Behaviour
    ---------
    The endpoint composes its feature blocks and wires them: network
    (:class:`~rocegen.gateware.roce.features.network.NetworkFeature`), connection management
    (:class:`~rocegen.gateware.roce.features.connection.ConnectionFeature`), requester path
    (:class:`~rocegen.gateware.roce.features.requester.RequesterFeature`), memory
    (:class:`~rocegen.gateware.roce.features.memory.MemoryFeature`), congestion control
    (:class:`~rocegen.gateware.roce.features.congestion.CongestionFeature`), and as
    configured PFC (:class:`~rocegen.gateware.roce.features.pfc.PfcFeature`), the responder
    path (:class:`~rocegen.gateware.roce.features.responder.ResponderFeature`) and the READ
    requester (:class:`~rocegen.gateware.roce.features.read_requester.ReadRequesterFeature`),
    with the counters (:class:`~rocegen.gateware.roce.features.statistics.StatisticsFeature`).
    Its ports are the union of theirs.

    Latency and throughput: see the blocks; the transmit path moves one beat per cycle with no
    idle beat between packets, so one QP fills the MAC port. The parts joined here besides the
    protocol blocks: :class:`~rocegen.gateware.roce.requester.qp_control.QpControl` (QP table writes),
    :class:`~rocegen.gateware.roce.frontend.wr_merge.WrMerge` (work-request sources),
    :class:`~rocegen.gateware.roce.memory.payload_memory.PayloadMemory` (the memory and its reader),
    :class:`~rocegen.gateware.roce.frontend.cpl_dispatch.CplDispatch` (completions by source),
    :class:`~rocegen.gateware.roce.endpoint.endpoint_stats.EndpointStats` and
    :class:`~rocegen.gateware.roce.endpoint.endpoint_qp_stats.EndpointQpStats` (the counters).
    """

    def __init__(self, width=512, num_qps=8, **params):
        cfg = self.cfg = EndpointConfig(width=width, num_qps=num_qps, **params)
        self.width, self.num_qps, self.memory = cfg.width, cfg.num_qps, cfg.memory
        self.mem_bytes, self.addr_bits, self.clk_hz = cfg.mem_bytes, cfg.addr_bits, cfg.clk_hz
        self.responder, self.reads = cfg.responder, cfg.reads
        f = self.features = SimpleNamespace()
        f.network = NetworkFeature(cfg)
        f.connection = ConnectionFeature(cfg)
        f.memory = MemoryFeature(cfg)
        self.word_addr_bits = f.memory.mem.word_addr_bits
        f.requester = RequesterFeature(cfg, self.word_addr_bits)
        f.read = ReadRequesterFeature(cfg, self.word_addr_bits) if cfg.reads else None
        f.responder = ResponderFeature(cfg, self.word_addr_bits) if cfg.responder else None
        f.ibcm = IbCmFeature(cfg) if cfg.rdma_cm_ports else None
        f.services = ServicesFeature(cfg, self.word_addr_bits) if cfg.service_ports else None
        f.pfc = None
        if cfg.pfc is not None:
            buffers = {"rx": f.network.stack.rx_fifo_beats}
            if f.responder:
                buffers["resp"] = f.responder.resp.ingress_beats
            f.pfc = PfcFeature(cfg, buffers)
        f.congestion = CongestionFeature(cfg)
        f.statistics = StatisticsFeature(cfg)
        self.tc_init = f.congestion.tc_init
        # (the blocks the benchmarks and tests look at)
        self._stack, self._sched = f.network.stack, f.requester.sched
        self._completer, self._retry = f.requester.completer, f.requester.retry
        self._rx, self._builder, self._rp = f.requester.rx, f.requester.builder, f.congestion.rp
        self._reader = f.memory.mem._reader
        #: The configuration as built (for status registers and generated documentation).
        self.config = self._config_dict()
        members = {}
        for feature in (f.network, f.requester, f.connection, f.statistics, f.congestion, f.pfc,
                        f.responder, f.read, f.ibcm, f.services, f.memory):
            if feature is not None:
                members.update(feature.members())
        order = {name: i for i, name in enumerate(PORT_ORDER)}
        super().__init__(dict(sorted(members.items(),
                                     key=lambda kv: order.get(kv[0], len(order)))))

    def _config_dict(self):
        cfg, f = self.cfg, self.features
        resp = f.responder
        return {
            "width": cfg.width, "num_qps": cfg.num_qps, "memory": cfg.memory,
            "mem_bytes": cfg.mem_bytes, "wr_depth": cfg.wr_depth, "window": cfg.window,
            "clk_hz": int(cfg.clk_hz), "ring_base": cfg.ring_base, "ring_bytes": cfg.ring_bytes,
            "max_message": cfg.max_message, "max_inflight": cfg.max_inflight,
            "cm_port": cfg.cm_port, "cm_allow_net": f.connection.cm.net, "pmtu": cfg.pmtu,
            "cm_timeout": cfg.cm_timeout, "cm_retry": cfg.cm_retry,
            "cm_rnr_retry": cfg.cm_rnr_retry,
            **({"rdma_cm_ports": cfg.rdma_cm_ports,
                "rdma_cm_time_wait_ns": f.ibcm.service.core.cm.time_wait_ns}
               if f.ibcm else {}),
            **({"rping_port": cfg.rping_port, "echo_port": cfg.echo_port,
                "service_region": cfg.service_region} if f.services else {}),
            "responder": cfg.responder,
            **({"resp_region": cfg.resp_region, "rkey_seed": cfg.rkey_seed,
                "rnr_timer": cfg.rnr_timer, "rq_depth": cfg.rq_depth,
                "pattern_sink": cfg.pattern_sink, "resp_ack_every": cfg.resp_ack_every,
                "cnp_interval": resp.cnp_interval, "reads": cfg.reads,
                **({"rd_depth": cfg.rd_depth, "max_rd_atomic": cfg.max_rd_atomic,
                    "rd_hole_wait": cfg.rd_hole_wait} if cfg.reads else {})}
               if resp else {}),
            "dscp": cfg.dscp, "ecn": cfg.ecn, "pcp": cfg.pcp, "dcqcn": cfg.dcqcn,
            "dcqcn_params": dict(cfg.dcqcn_params or {}), "line_gbps": cfg.line_gbps,
            "pfc": cfg.pfc,
            **({"pfc_prio": cfg.pfc_prio, "pfc_cable_ns": cfg.pfc_cable_ns,
                "rx_fifo_beats": f.network.stack.rx_fifo_beats,
                "pfc_thresholds": f.pfc.port.thresholds()} if f.pfc else {}),
        }

    def elaborate(self, platform):
        m = Module()
        f = self.features
        req = f.requester
        m.submodules.stack = f.network.stack
        m.submodules.qp_table = f.connection.qps
        m.submodules.scheduler = req.sched
        m.submodules.completer = req.completer
        m.submodules.builder = req.builder
        m.submodules.rx = req.rx
        m.submodules.traffic_gen = req.gen
        m.submodules.stream_in = req.front
        m.submodules.memory = f.memory.mem
        m.submodules.retry = req.retry

        f.network.connect(m, self)
        f.connection.connect(m, self)
        req.connect_sources(m, self)
        req.connect_transmit(m, self)
        req.connect_receive(m, self)
        f.memory.connect(m, self)
        f.congestion.connect(m, self)
        if f.responder is not None:
            f.responder.connect(m, self)
        if f.read is not None:
            f.read.connect(m, self)
        if f.ibcm is not None:
            f.ibcm.connect(m, self)
        if f.services is not None:
            f.services.connect(m, self)
        f.statistics.connect(m, self)
        return m
