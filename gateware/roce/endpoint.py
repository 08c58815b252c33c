from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.arbiter import PacketArbiter
from rocegen.gateware.lib.buffer import StreamRegisterSlice
from rocegen.gateware.lib.pipe import ForwardRegister, StreamForwardRegister
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.lib.stream_arbiter import StreamArbiter
from rocegen.gateware.mac.pfc import PFC_MODES, PfcPort, lossless_depth
from rocegen.gateware.net.stack import MAX_L2_HEADER, NetStack
from rocegen.gateware.roce.builder import RocePacketBuilder
from rocegen.gateware.roce.cm import CM_PORT, ConnectionManager
from rocegen.gateware.roce.cm import COUNTERS as CM_COUNTERS
from rocegen.gateware.roce.completer import Completer
from rocegen.gateware.roce.congestion import ReactionPoint
from rocegen.gateware.roce.cpl_dispatch import CplDispatch
from rocegen.gateware.roce.dcqcn_layouts import DCQCN_CONFIG, RATE_BITS, dcqcn_config
from rocegen.gateware.roce.endpoint_qp_stats import QP_COUNTERS, EndpointQpStats
from rocegen.gateware.roce.endpoint_stats import PULSE_COUNTERS, ROCE_STATS, STATS, EndpointStats
from rocegen.gateware.roce.layouts import (
    COMPLETION,
    ECN_ECT0,
    PACKET_DESC,
    PFC_CONFIG,
    QP_CONTEXT,
    TRAFFIC_CONFIG,
    WORK_REQUEST,
    CplStatus,
    WrSource,
    check_num_qps,
)
from rocegen.gateware.roce.pattern_sink import PatternSink
from rocegen.gateware.roce.payload_memory import MEMORIES, PayloadMemory
from rocegen.gateware.roce.qp_control import QpControl
from rocegen.gateware.roce.qp_table import CONTEXT_WRITE, PSN_WRITE, QpTable
from rocegen.gateware.roce.read_flush import ReadFlush
from rocegen.gateware.roce.read_hole_timer import ReadHoleTimer
from rocegen.gateware.roce.read_ingress import READ_INGRESS_COUNTERS, ReadIngress
from rocegen.gateware.roce.read_layouts import (
    MAX_RD_ATOMIC,
    READ_COUNTERS,
    READ_WAIT_CONFIG,
    check_max_rd,
)
from rocegen.gateware.roce.read_place import ReadPlace
from rocegen.gateware.roce.read_resend import ReadResend
from rocegen.gateware.roce.read_track import ReadTrack
from rocegen.gateware.roce.resp_cnp import cnp_interval_cycles
from rocegen.gateware.roce.resp_layouts import (
    CNP_CONFIG,
    CNP_INTERVAL_BITS,
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
    UNACKED_BITS,
)
from rocegen.gateware.roce.resp_read_align import RespReadAlign, reader_descriptor
from rocegen.gateware.roce.responder import RESP_COUNTERS, Responder, default_config
from rocegen.gateware.roce.retry import RetryEngine
from rocegen.gateware.roce.rx import RoceRx
from rocegen.gateware.roce.scheduler import Scheduler
from rocegen.gateware.roce.stream_in import STREAM_META, StreamFrontEnd
from rocegen.gateware.roce.traffic_gen import GEN_CONFIG, TrafficGen
from rocegen.gateware.roce.wr_merge import WrMerge
from rocegen.wire.headers import UDP_PORT_ROCEV2
from rocegen.wire.opcodes import OP_RC_ACKNOWLEDGE

__all__ = ["RoceEndpoint", "ROCE_STATS", "STATS", "MEMORIES", "PMTU_MAX", "QP_COUNTERS",
           "RD_HOLE_WAIT", "default_clk_hz"]

#: Largest path MTU; the stack's IP MTU is sized for it.
PMTU_MAX = 4096
#: IPv4 packet of a full-PMTU RoCEv2 packet with every extension header: IPv4 20, UDP 8, BTH 12,
#: RETH 16, ImmDt 4, ICRC 4.
IP_MTU = PMTU_MAX + 64
#: Default hole wait of the READ requester, in microseconds (``rd_hole_wait``).
RD_HOLE_WAIT = 32


def default_clk_hz(width):
    """The clock a W-bit endpoint runs at on the boards: the CMAC's 322.266 MHz from 128 bits
    up, the 10G XGMII clock (156.25 MHz) at 64 bits."""
    return 156_250_000 if width == 64 else 322_265_625


def default_line_gbps(width):
    """The line a W-bit endpoint drives on the boards: 10 Gb/s XGMII at 64 bits, else the
    CMAC's 100 Gb/s."""
    return 10 if width == 64 else 100


class RoceEndpoint(wiring.Component):
    """The RoCEv2 requester endpoint: network stack, QP table, work-request scheduler, payload
    memory and reader, packet builder, ACK receive path and completion tracker, with the
    traffic generator and the streaming front end as extra work-request sources.

    Parameters
    ----------
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
        yet acknowledged (a power of two, 1..64; the completion tracker has as many).
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
        The connection manager (:class:`~rocegen.gateware.roce.cm.ConnectionManager`): its UDP
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
        With DCQCN's reaction point (:class:`~rocegen.gateware.roce.congestion.ReactionPoint`):
        each QP's rate is cut by the CNPs it receives and recovers by the DCQCN law, through a
        rate limiter in front of the scheduler; its parameters at run time through ``cc_cfg``
        (with a bypass: line rate, CNPs ignored). Default False.
    dcqcn_params : dict or None
        The reaction point's parameters after reset, in physical units (the keys of
        :data:`~rocegen.gateware.roce.dcqcn_layouts.DCQCN_DEFAULTS`, e.g. ``timer_us``,
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
        With the RC responder (:class:`~rocegen.gateware.roce.responder.Responder`): the peers
        WRITE and SEND into local memory, on chip or AXI4 (a receive completion leaves once
        the payload of its request is written: with AXI4, once its write responses came back).
    resp_region, rkey_seed, rnr_timer, rq_depth
        The responder: the region of local memory every QP may be written in after reset
        (``(base, length)`` in bytes; default the lower half of local memory), the seed
        of the QPs' R_Keys (:func:`~rocegen.gateware.roce.responder.default_config`), the RNR
        timer code of its RNR NAKs and the receive buffers each QP can have posted.
        With the responder, the connection manager's ACKs name each QP's region (its R_Key,
        base and length: :class:`~rocegen.gateware.roce.cm.ConnectionManager` ``regions``).
    reads, rd_depth, max_rd_atomic, rd_hole_wait
        With the responder: RDMA READ both ways (default: with the responder).

        As responder, the peers READ the QPs' regions (their read right,
        :func:`~rocegen.gateware.roce.responder.default_config` gives it); the response packets
        take turns with the requester's packets at the payload reader, per packet, and bypass
        the scheduler, the completion tracker and the retry engine; a response whose payload
        does not start at a word boundary is realigned
        (:class:`~rocegen.gateware.roce.resp_read_align.RespReadAlign`). ``rd_depth``: the READs
        each QP can have queued (a power of two, 16..1024; default 16).

        As requester, a work request with ``opcode`` READ reads ``length`` bytes at the QP's
        peer base address + ``remote_offset`` (with the peer's R_Key of the QP context) into
        local memory at ``local_addr`` (any byte address): one READ request packet taking a PSN
        per response; the responses (:class:`~rocegen.gateware.roce.read_ingress.ReadIngress`)
        are checked against the QP's outstanding READs
        (:class:`~rocegen.gateware.roce.read_track.ReadTrack`) and written into local memory
        (:class:`~rocegen.gateware.roce.read_place.ReadPlace`; the front end's and the
        responder's writes go first); the READ completes in order with the QP's other work
        requests once its data is in memory. Every acknowledgement passes through the same
        placement, so a READ response acknowledges the WRITEs and SENDs before it and an
        acknowledgement never overtakes a response's data. A gap in the responses (or a timeout)
        reissues a READ for the rest through the retry engine's rewind, within ``retry_cnt``; a
        NAK fails the QP. A lost response is asked for again selectively: the rest of its READ
        by a READ request of its own (:class:`~rocegen.gateware.roce.read_resend.ReadResend`),
        and a QP with READs outstanding that has had no response for ``rd_hole_wait``
        microseconds (default 32; 0: never; at run time through ``rd_wait_cfg``) asks again
        (:class:`~rocegen.gateware.roce.read_hole_timer.ReadHoleTimer`): for its current hole,
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
        With the responder: a :class:`~rocegen.gateware.roce.pattern_sink.PatternSink` checks
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
    runs (:data:`~rocegen.gateware.roce.traffic_gen.GEN_CONFIG`) with ``gen_busy``,
    ``gen_posted``, ``gen_ok``, ``gen_err``, ``gen_cycles``. ``msg``: the streaming front end's
    input (messages, ``meta`` = :data:`~rocegen.gateware.roce.stream_in.STREAM_META`). ``mem_w``
    (on-chip memory only): word writes into the payload buffer. ``axi`` (AXI4 memory only).
    ``stats_addr`` / ``stats_data``: every counter of :data:`STATS`, one cycle after the address.
    ``qp_stats_qp`` / ``qp_stats_sel`` / ``qp_stats_data``: the per-QP counters of
    :data:`QP_COUNTERS` (packets, resent packets, ACKs, NAKs by kind, timeouts...), one cycle
    after the address. With ``qp_info=True``: ``qp_info_qp`` -> ``qp_info_context`` /
    ``qp_info_psn`` (next PSN to send), the QP table read back one cycle after the address
    through a read port of its own. With ``responder=True``: ``recv`` (receive buffers,
    :data:`~rocegen.gateware.roce.resp_layouts.RECV_POST`), ``recv_cpl`` (their completions,
    :data:`~rocegen.gateware.roce.resp_layouts.RECV_COMPLETION`), ``resp_cfg`` (each QP's
    region and RNR timer code, :data:`~rocegen.gateware.roce.resp_layouts.RESP_CONFIG_WRITE`,
    always taken), ``resp_cnp_cfg`` (the CNP interval,
    :data:`~rocegen.gateware.roce.resp_layouts.CNP_CONFIG`, always taken); with ``reads``,
    ``rd_wait_cfg`` (the READ timer's step in cycles, a wait of 4 steps,
    :data:`~rocegen.gateware.roce.read_layouts.READ_WAIT_CONFIG`, always taken). ``tc_cfg``: the
    traffic class (:data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG`: DSCP and ECN of the
    QPs opened from then on, the VLAN priority of every frame from the next one), always taken.
    With ``dcqcn=True``: ``cc_cfg`` (every DCQCN parameter and the bypass,
    :data:`~rocegen.gateware.roce.dcqcn_layouts.DCQCN_CONFIG`, in force a few cycles later,
    always taken), ``cc_qp`` -> ``cc_rate`` (a QP's current rate in bytes per cycle, Q7.20, one
    cycle after the address). With ``pfc``: ``pfc_cfg`` (priority and enable,
    :data:`~rocegen.gateware.roce.layouts.PFC_CONFIG`, always taken); with ``pfc="mac"``:
    ``pause_rx`` (In(8): bit n high while the MAC has priority n paused) and ``pause_tx``
    (Out(8): bit n asks the MAC to send XOFF for priority n, XON when it falls).

    Latency and throughput: see the blocks; the transmit path moves one beat per cycle with no
    idle beat between packets, so one QP fills the MAC port. The parts joined here besides the
    protocol blocks: :class:`~rocegen.gateware.roce.qp_control.QpControl` (QP table writes),
    :class:`~rocegen.gateware.roce.wr_merge.WrMerge` (work-request sources),
    :class:`~rocegen.gateware.roce.payload_memory.PayloadMemory` (the memory and its reader),
    :class:`~rocegen.gateware.roce.cpl_dispatch.CplDispatch` (completions by source),
    :class:`~rocegen.gateware.roce.endpoint_stats.EndpointStats` and
    :class:`~rocegen.gateware.roce.endpoint_qp_stats.EndpointQpStats` (the counters).
    """

    def __init__(self, width=512, num_qps=8, *, memory="onchip", mem_bytes=None, wr_depth=64,
                 window=1024, clk_hz=None, ring_base=None, ring_bytes=None, max_message=None,
                 max_inflight=64, cm_port=CM_PORT, cm_allow_net=None, pmtu=4096, cm_timeout=14,
                 cm_retry=7, cm_rnr_retry=7, vlan=None, pcp=0, arp_entries=4,
                 arp_retry_cycles=100_000, arp_retries=3, qp_info=False, responder=False,
                 resp_region=None, rkey_seed=0x5EED, rnr_timer=1, rq_depth=16,
                 pattern_sink=None, resp_ack_every=0, cnp_interval=None, dscp=0, ecn=True,
                 dcqcn=False, dcqcn_params=None, line_gbps=None, pfc=None, pfc_prio=3,
                 pfc_cable_ns=100, rx_fifo_beats=None, reads=None, rd_depth=16,
                 max_rd_atomic=MAX_RD_ATOMIC, rd_hole_wait=RD_HOLE_WAIT):
        check_width(width)
        check_num_qps(num_qps)
        if memory not in MEMORIES:
            raise ValueError(f"memory must be one of {', '.join(MEMORIES)}, not {memory!r}")
        if mem_bytes is None:
            mem_bytes = 256 * 1024 if memory == "onchip" else 1 << 32
        if not isinstance(mem_bytes, int) or mem_bytes & (mem_bytes - 1) or \
                not width // 8 * 16 <= mem_bytes <= 1 << 32:
            raise ValueError(f"mem_bytes must be a power of two from {width // 8 * 16} to 2^32, "
                             f"not {mem_bytes!r}")
        if ring_bytes is None:
            ring_bytes = mem_bytes // 2 if memory == "onchip" else 1 << 20
        if ring_base is None:
            ring_base = mem_bytes - ring_bytes
        if max_message is None:
            max_message = min(ring_bytes // 4, 64 * 1024)
        if not 0 <= ring_base or ring_base + ring_bytes > mem_bytes:
            raise ValueError(f"the ring [{ring_base:#x}, +{ring_bytes:#x}) is not inside local "
                             f"memory of {mem_bytes:#x} bytes")
        self.width = width
        self.num_qps = num_qps
        self.memory = memory
        self.mem_bytes = mem_bytes
        self.addr_bits = (mem_bytes - 1).bit_length()
        if cm_port == UDP_PORT_ROCEV2:
            raise ValueError(f"cm_port must not be {UDP_PORT_ROCEV2}, the RoCEv2 port")
        if pattern_sink is None:
            pattern_sink = bool(responder)
        if not isinstance(pattern_sink, bool):
            raise TypeError(f"pattern_sink must be a bool or None, not {pattern_sink!r}")
        if pattern_sink and not responder:
            raise ValueError("pattern_sink checks the responder's writes: it needs "
                             "responder=True")
        if reads is None:
            reads = bool(responder)
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool or None, not {reads!r}")
        if reads and not responder:
            raise ValueError("reads are answered by the responder, and their responses placed "
                             "by its memory path: they need responder=True")
        self.reads = reads
        check_max_rd(max_rd_atomic)
        self._cm = ConnectionManager(width, num_qps, allow_net=cm_allow_net, default_pmtu=pmtu,
                                     default_timeout=cm_timeout, default_retry=cm_retry,
                                     default_rnr_retry=cm_rnr_retry, port=cm_port,
                                     regions=bool(responder), query=pattern_sink,
                                     **({"reads": True, "max_rd_atomic": max_rd_atomic,
                                         "rd_depth": rd_depth} if reads else {}))
        if clk_hz is None:
            clk_hz = default_clk_hz(width)
        if line_gbps is None:
            line_gbps = default_line_gbps(width)
        if pfc is not None and pfc not in PFC_MODES:
            raise ValueError(f"pfc must be None or one of {', '.join(PFC_MODES)}, not {pfc!r}")
        max_frame = IP_MTU + MAX_L2_HEADER
        if pfc is not None:
            rx_fifo_beats = lossless_depth(width, line_gbps=line_gbps, max_frame=max_frame,
                                           clk_hz=clk_hz, cable_ns=pfc_cable_ns,
                                           at_least=rx_fifo_beats or 1)
        self._stack = NetStack(width, (UDP_PORT_ROCEV2, cm_port), mtu=IP_MTU, vlan=vlan, pcp=pcp,
                               arp_entries=arp_entries, arp_retry_cycles=arp_retry_cycles,
                               arp_retries=arp_retries, rx_fifo_beats=rx_fifo_beats)
        ingress_beats = None
        if pfc is not None and responder:
            ingress_beats = lossless_depth(width, line_gbps=line_gbps, max_frame=max_frame,
                                           clk_hz=clk_hz, cable_ns=pfc_cable_ns)
        self._qps = QpTable(num_qps, info_port=qp_info, resp_port=responder,
                            **({"read_port": True, "resend_port": True} if reads else {}))
        self.clk_hz = clk_hz
        self._sched = Scheduler(num_qps, width, mem_bytes, depth=wr_depth, window=window,
                                reads=reads)
        self._completer = Completer(num_qps, depth=wr_depth)
        self._retry = RetryEngine(num_qps, clk_hz)
        self._builder = RocePacketBuilder(width)
        self._rx = RoceRx(width, num_qps, reads=reads)
        self._gen = TrafficGen(reads=reads)
        self._wr_merge = WrMerge(num_qps)
        self._mem = PayloadMemory(width, memory, mem_bytes, responder=responder, reads=reads)
        self.word_addr_bits = self._mem.word_addr_bits
        if reads:
            self._rd_track = ReadTrack(num_qps, max_rd_atomic)
            self._rd_place = ReadPlace(width, self.word_addr_bits, acked_writes=memory == "axi4")
            self._rd_ingress = ReadIngress(width, num_qps)
            self._rd_resend = ReadResend(num_qps, depth=16)
            if not isinstance(rd_hole_wait, (int, float)) or isinstance(rd_hole_wait, bool) or \
                    rd_hole_wait < 0:
                raise ValueError(f"rd_hole_wait must be a non-negative number of microseconds, "
                                 f"not {rd_hole_wait!r}")
            wait = round(rd_hole_wait * 1e-6 * clk_hz)
            try:
                self._rd_timer = ReadHoleTimer(num_qps, wait)
            except ValueError as exc:
                raise ValueError(f"rd_hole_wait of {rd_hole_wait} us is {wait} cycles at "
                                 f"{clk_hz / 1e6:g} MHz: {exc}") from None
        self.responder = bool(responder)
        if resp_region is None:
            resp_region = (0, mem_bytes // 2)
        base, length = resp_region
        if not 0 <= base < base + length <= mem_bytes:
            raise ValueError(f"resp_region [{base:#x}, +{length:#x}) is not inside local memory "
                             f"of {mem_bytes:#x} bytes")
        if not isinstance(rnr_timer, int) or not 0 <= rnr_timer <= 31:
            raise ValueError(f"rnr_timer must be an RNR timer code 0..31, not {rnr_timer!r}")
        if cnp_interval is None:
            cnp_interval = cnp_interval_cycles(clk_hz)
        if not isinstance(cnp_interval, int) or not 0 <= cnp_interval < 1 << CNP_INTERVAL_BITS:
            raise ValueError(f"cnp_interval must be 0..{(1 << CNP_INTERVAL_BITS) - 1} cycles, "
                             f"not {cnp_interval!r}")
        if not isinstance(resp_ack_every, int) or not 0 <= resp_ack_every < 1 << UNACKED_BITS:
            raise ValueError(f"resp_ack_every must be 0..{(1 << UNACKED_BITS) - 1} requests, "
                             f"not {resp_ack_every!r}")
        self._resp = None
        if responder:
            self._resp = Responder(width, num_qps, self.word_addr_bits, rq_depth=rq_depth,
                                   ack_every=resp_ack_every, cnp_interval=cnp_interval,
                                   config_init=default_config(num_qps, base, length,
                                                              rkey_seed=rkey_seed,
                                                              rnr_timer=rnr_timer),
                                   acked_writes=memory == "axi4", ingress_beats=ingress_beats,
                                   reads=reads, rd_depth=rd_depth)
        self._pfc = None
        if pfc is not None:
            buffers = {"rx": self._stack.rx_fifo_beats}
            if responder:
                buffers["resp"] = self._resp.ingress_beats
            self._pfc = PfcPort(width, clk_hz, line_gbps, mode=pfc, buffers=buffers,
                                max_frame=max_frame, cable_ns=pfc_cable_ns, prio=pfc_prio)
        self._sink = PatternSink(width, self.word_addr_bits) if pattern_sink else None
        self._front = StreamFrontEnd(width, ring_base=ring_base, ring_bytes=ring_bytes,
                                     max_message=max_message, max_inflight=max_inflight,
                                     addr_width=self.word_addr_bits)
        self._stats = EndpointStats()
        if not isinstance(dscp, int) or isinstance(dscp, bool) or not 0 <= dscp <= 63:
            raise ValueError(f"dscp must be a DSCP value 0..63, not {dscp!r}")
        for name, value in (("ecn", ecn), ("dcqcn", dcqcn)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        self.tc_init = {"dscp": dscp, "ecn": ECN_ECT0 if ecn else 0, "pcp": pcp}
        self._rp = None
        if dcqcn:
            params = dict(dcqcn_params or {})
            bypass = params.pop("bypass", False)
            self._rp = ReactionPoint(num_qps, width, clk_hz=clk_hz, line_gbps=line_gbps,
                                     config=dcqcn_config(clk_hz, line_gbps, bypass=bypass,
                                                         **params),
                                     vlan=vlan is not None)
        elif dcqcn_params is not None:
            raise ValueError("dcqcn_params needs dcqcn=True")
        #: The configuration as built (for status registers and generated documentation).
        self.config = {
            "width": width, "num_qps": num_qps, "memory": memory, "mem_bytes": mem_bytes,
            "wr_depth": wr_depth, "window": window, "clk_hz": int(clk_hz),
            "ring_base": ring_base, "ring_bytes": ring_bytes, "max_message": max_message,
            "max_inflight": max_inflight, "cm_port": cm_port, "cm_allow_net": self._cm.net,
            "pmtu": pmtu, "cm_timeout": cm_timeout, "cm_retry": cm_retry,
            "cm_rnr_retry": cm_rnr_retry, "responder": self.responder,
            **({"resp_region": (base, length), "rkey_seed": rkey_seed, "rnr_timer": rnr_timer,
                "rq_depth": rq_depth, "pattern_sink": pattern_sink,
                "resp_ack_every": resp_ack_every, "cnp_interval": cnp_interval,
                "reads": reads,
                **({"rd_depth": rd_depth, "max_rd_atomic": max_rd_atomic,
                    "rd_hole_wait": rd_hole_wait} if reads else {})}
               if responder else {}),
            "dscp": dscp, "ecn": bool(ecn), "pcp": pcp, "dcqcn": bool(dcqcn),
            "dcqcn_params": dict(dcqcn_params or {}), "line_gbps": line_gbps, "pfc": pfc,
            **({"pfc_prio": pfc_prio, "pfc_cable_ns": pfc_cable_ns,
                "rx_fifo_beats": self._stack.rx_fifo_beats,
                "pfc_thresholds": self._pfc.thresholds()} if pfc else {}),
        }
        members = {
            "local_mac": In(48),
            "local_ip": In(32),
            "mac_rx": In(PacketSignature(width)),
            "mac_tx": Out(PacketSignature(width)),
            "wr": In(stream.Signature(WORK_REQUEST)),
            "cpl": Out(stream.Signature(COMPLETION)),
            "wr_room": Out(num_qps),
            "qp_ctl": In(stream.Signature(CONTEXT_WRITE)),
            "qp_psn": In(stream.Signature(PSN_WRITE)),
            "gen": In(stream.Signature(GEN_CONFIG)),
            "gen_busy": Out(1),
            "gen_posted": Out(32),
            "gen_ok": Out(32),
            "gen_err": Out(32),
            "gen_cycles": Out(32),
            "qp_open": Out(num_qps),
            "msg": In(PacketSignature(width, STREAM_META)),
            "qp_stats_qp": In(range(num_qps)),
            "qp_stats_sel": In(range(len(QP_COUNTERS))),
            "qp_stats_data": Out(32),
            "stats_addr": In(range(len(STATS))),
            "stats_data": Out(32),
            "tc_cfg": In(stream.Signature(TRAFFIC_CONFIG)),
        }
        if pfc is not None:
            members["pfc_cfg"] = In(stream.Signature(PFC_CONFIG))
        if pfc == "mac":
            members.update({"pause_rx": In(8), "pause_tx": Out(8)})
        if dcqcn:
            members.update({"cc_cfg": In(stream.Signature(DCQCN_CONFIG)),
                            "cc_qp": In(range(num_qps)), "cc_rate": Out(RATE_BITS)})
        if qp_info:
            members.update({"qp_info_qp": In(range(num_qps)), "qp_info_context": Out(QP_CONTEXT),
                            "qp_info_psn": Out(24)})
        if responder:
            members.update({"recv": In(stream.Signature(RECV_POST)),
                            "recv_cpl": Out(stream.Signature(RECV_COMPLETION)),
                            "resp_cfg": In(stream.Signature(RESP_CONFIG_WRITE)),
                            "resp_cnp_cfg": In(stream.Signature(CNP_CONFIG))})
            if reads:
                members["rd_wait_cfg"] = In(stream.Signature(READ_WAIT_CONFIG))
        members["mem_w" if memory == "onchip" else "axi"] = \
            self._mem.signature.members["mem_w" if memory == "onchip" else "axi"]
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        st = m.submodules.stack = self._stack
        qps = m.submodules.qp_table = self._qps
        sched = m.submodules.scheduler = self._sched
        comp = m.submodules.completer = self._completer
        builder = m.submodules.builder = self._builder
        rx = m.submodules.rx = self._rx
        gen = m.submodules.traffic_gen = self._gen
        front = m.submodules.stream_in = self._front
        mem = m.submodules.memory = self._mem
        retry = m.submodules.retry = self._retry

        # network stack: MAC, addresses, RoCEv2 on its one UDP port
        m.d.comb += [st.local_mac.eq(self.local_mac), st.local_ip.eq(self.local_ip)]
        wiring.connect(m, wiring.flipped(self.mac_rx), st.mac_rx)
        if self._pfc is None:
            wiring.connect(m, st.mac_tx, wiring.flipped(self.mac_tx))
        else:
            self._connect_pfc(m)

        # QP table: control writes from outside, reads by the scheduler and the receive path
        cm = m.submodules.cm = self._cm
        # (to the table and the retry engine, the table's write enable from registers only)
        ctl = m.submodules.qp_control = QpControl(self.num_qps)
        m.d.comb += [ctl.errored.eq(retry.errored), ctl.busy.eq(sched.busy)]
        wiring.connect(m, wiring.flipped(self.qp_ctl), ctl.user_ctl)
        wiring.connect(m, wiring.flipped(self.qp_psn), ctl.user_psn)
        wiring.connect(m, cm.qp_ctl, ctl.cm_ctl)
        wiring.connect(m, cm.qp_psn, ctl.cm_psn)
        wiring.connect(m, ctl.table_ctl, qps.ctl)
        wiring.connect(m, ctl.table_psn, qps.ctl_psn)
        wiring.connect(m, ctl.engine_ctl, retry.ctx_set)
        wiring.connect(m, ctl.engine_psn, retry.psn_set)
        m.d.comb += [cm.local_ip.eq(self.local_ip), self.qp_open.eq(cm.qp_open)]
        wiring.connect(m, st.udp_rx[1], cm.i)
        wiring.connect(m, cm.o, st.udp_tx[1])
        m.d.comb += [
            qps.rd_qp.eq(sched.rd_qp),
            sched.rd_context.eq(qps.rd_context),
            sched.rd_psn.eq(qps.rd_psn),
            qps.lookup_qpn.eq(rx.lookup_qpn),
            rx.lookup_index.eq(qps.lookup_index),
            rx.lookup_valid.eq(qps.lookup_valid),
            qps.rx_qp.eq(rx.rx_qp),
            rx.rx_context.eq(qps.rx_context),
        ]
        wiring.connect(m, sched.psn_w, qps.psn_w)
        if self._qps.info_port:
            m.d.comb += [qps.info_qp.eq(self.qp_info_qp), self.qp_info_context.eq(qps.info_context),
                         self.qp_info_psn.eq(qps.info_psn)]

        # work-request sources: the user's port, the streaming front end, the generator
        # (behind a register slice: no combinational round trip through the scheduler)
        wrm = m.submodules.wr_merge = self._wr_merge
        wiring.connect(m, wiring.flipped(self.wr), wrm.user)
        wiring.connect(m, front.wr, wrm.front)
        wiring.connect(m, gen.wr, wrm.gen)
        wiring.connect(m, wrm.o, sched.wr)
        m.d.comb += [wrm.bad_full.eq(comp.bad_full), wrm.room.eq(sched.room),
                     wrm.room_next.eq(sched.room_next), self.wr_room.eq(sched.room)]
        gen_arb = m.submodules.gen_arbiter = StreamArbiter(GEN_CONFIG, 2)
        wiring.connect(m, wiring.flipped(self.gen), gen_arb.i[0])
        wiring.connect(m, cm.gen, gen_arb.i[1])
        wiring.connect(m, gen_arb.o, gen.start)
        m.d.comb += [self.gen_busy.eq(gen.busy), self.gen_posted.eq(gen.posted),
                     self.gen_ok.eq(gen.completed_ok), self.gen_err.eq(gen.completed_err),
                     self.gen_cycles.eq(gen.cycles)]
        wiring.connect(m, wiring.flipped(self.msg), front.i)

        # transmit: scheduler -> payload reader -> packet builder -> UDP port 4791
        if not self.reads:
            wiring.connect(m, sched.desc, mem.desc)
        # a forward register between the payload reader and the builder: the reader's output
        # queue and the builder's header and lane logic are mapped apart
        rd_reg = m.submodules.rd_reg = StreamForwardRegister(mem.o.payload.shape())
        if not self.reads:
            wiring.connect(m, rd_reg.o, builder.i)
        # a forward register between the builder and UDP transmit: the reader's queue and the
        # builder's lane logic end in it, before UDP transmit's arbiter and slice
        tx_reg = m.submodules.tx_reg = ForwardRegister(self.width, builder.o.payload.meta.shape())
        wiring.connect(m, builder.o, tx_reg.i)
        if self.reads:
            self._connect_read_responses(m, rd_reg, tx_reg)
        if self._resp is None:
            wiring.connect(m, tx_reg.o, st.udp_tx[0])
        else:
            # the responder's ACKs share UDP port 4791 with the requests, a packet each in turn
            tx_arb = m.submodules.tx_arbiter = PacketArbiter(self.width,
                                                             tx_reg.o.payload.meta.shape(), 2)
            wiring.connect(m, tx_reg.o, tx_arb.i[0])
            wiring.connect(m, self._resp.tx, tx_arb.i[1])
            wiring.connect(m, tx_arb.o, st.udp_tx[0])

        # receive: UDP port 4791 -> ICRC and ACK checks -> completion tracker
        wiring.connect(m, st.udp_rx[0], rx.i)
        # (the retry engine's inputs behind register slices: its arbitration between them, and
        # the per-QP spacing of its events, does not reach the receive pipeline's enables nor the
        # scheduler's issue decision)
        ack_slice = m.submodules.ack_slice = StreamRegisterSlice(rx.ack.payload.shape())
        if not self.reads:
            wiring.connect(m, rx.ack, ack_slice.i)
        wiring.connect(m, ack_slice.o, retry.ack)
        wiring.connect(m, sched.post, comp.post)
        if not self.reads:
            m.d.comb += sched.full.eq(comp.full)

        # reliability: acknowledgements, rewinds, timers and errors (always-ready pulses)
        sent_slice = m.submodules.sent_slice = StreamRegisterSlice(sched.sent.payload.shape())
        wiring.connect(m, sched.sent, sent_slice.i)
        wiring.connect(m, sent_slice.o, retry.sent)
        wiring.connect(m, retry.cpl_ack, comp.ack)
        wiring.connect(m, retry.sched, sched.sched)
        wiring.connect(m, comp.freed, sched.freed)
        m.d.comb += [
            retry.acked_qp.eq(sched.acked_qp), sched.acked_psn.eq(retry.acked_psn),
            retry.err_qp.eq(comp.err_qp), comp.err_status.eq(retry.err_status),
            sched.errored.eq(retry.errored), comp.errored.eq(retry.errored),
            sched.held.eq(retry.held if self._rp is None else retry.held | ~self._rp.allowed),
            cm.errored.eq(retry.errored),
        ]

        # completions back to whoever posted the work request
        c = comp.cpl
        dispatch = m.submodules.cpl_dispatch = CplDispatch()
        wiring.connect(m, c, dispatch.i)
        wiring.connect(m, dispatch.user, wiring.flipped(self.cpl))
        wiring.connect(m, dispatch.front, front.cpl)
        wiring.connect(m, dispatch.gen, gen.cpl)

        # payload memory: on-chip, with the user's and the front end's writes, or AXI4
        wiring.connect(m, front.mem, mem.wr)
        m.d.comb += front.mem_durable.eq(mem.durable)
        if not self.reads:
            wiring.connect(m, mem.o, rd_reg.i)
        ext = "mem_w" if self.memory == "onchip" else "axi"
        wiring.connect(m, wiring.flipped(getattr(self, ext)), getattr(mem, ext))

        self._connect_traffic_class(m)
        if self._resp is not None:
            self._connect_responder(m, ctl)
        if self.reads:
            self._connect_read_requester(m, ack_slice)
        self._connect_statistics(m)
        return m

    def _connect_read_requester(self, m, ack_slice):
        """The READ requester's receive side: READ responses from the receive path into their
        ingress (headers checked against the QP table), placed into local memory against the
        table of outstanding READs (which the scheduler fills as it sends READ requests and
        which forgets a QP that fails or is set up again); every acknowledgement of the
        receive path passes through the placement on its way to the retry engine, taken from
        the ingress in its order with the responses."""
        rx, qps, mem, sched = self._rx, self._qps, self._mem, self._sched
        track = m.submodules.read_track = self._rd_track
        place = m.submodules.read_place = self._rd_place
        ing = m.submodules.read_ingress = self._rd_ingress
        flush = m.submodules.read_flush = ReadFlush(self.num_qps)
        # (the receive path's datagrams reach the responder and this ingress alike; both are
        # always ready)
        m.d.comb += [ing.i.valid.eq(rx.req.valid), ing.i.payload.eq(rx.req.payload),
                     qps.rdr_qp.eq(ing.ctx_qp), ing.ctx.eq(qps.rdr_context)]
        wiring.connect(m, ing.o, place.i)
        # (the acknowledgements come from the ingress too, in their order with the responses:
        # its records are offered one at a time, to the placement's header or acknowledgement
        # input by kind; the receive path's own events are only counted)
        h = ing.hdr.payload
        ack = h.opcode == OP_RC_ACKNOWLEDGE
        m.d.comb += [
            place.hdr.valid.eq(ing.hdr.valid & ~ack), place.hdr.payload.eq(h),
            place.ack_in.valid.eq(ing.hdr.valid & ack),
            place.ack_in.payload.qp.eq(h.qp), place.ack_in.payload.syndrome.eq(h.syndrome),
            place.ack_in.payload.psn.eq(h.psn), place.ack_in.payload.msn.eq(h.msn),
            ing.hdr.ready.eq(Mux(ack, place.ack_in.ready, place.hdr.ready)),
            rx.ack.ready.eq(1),
        ]
        wiring.connect(m, place.ack, ack_slice.i)
        # (a selective reissue: the placement goes on past a lost response and the rest of
        # its READ is asked for again by a request of its own, not by a rewind of the QP)
        resend = m.submodules.read_resend = self._rd_resend
        wiring.connect(m, place.reissue, resend.i)
        # (a QP with READs outstanding that hears nothing for the hole wait asks again; the
        # wait at run time through rd_wait_cfg)
        timer = m.submodules.read_hole_timer = self._rd_timer
        m.d.comb += [timer.busy.eq(track.busy), timer.cfg.valid.eq(self.rd_wait_cfg.valid),
                     timer.cfg.payload.eq(self.rd_wait_cfg.payload),
                     self.rd_wait_cfg.ready.eq(1)]
        wiring.connect(m, place.touch, timer.touch)
        wiring.connect(m, timer.expire, place.timer)
        m.d.comb += [qps.rsd_qp.eq(resend.ctx_qp), resend.ctx.eq(qps.rsd_context)]
        wiring.connect(m, place.lookup, track.lookup)
        wiring.connect(m, sched.rd_issue, track.issue)
        # (a QP with as many READs outstanding as its limit starts no work request; it still
        # resends after a rewind, which is how its READs get answered)
        m.d.comb += sched.full.eq(self._completer.full | track.full)
        wiring.connect(m, self._cm.rd_limit, track.limit)
        m.d.comb += [flush.errored.eq(self._retry.errored),
                     flush.sched.valid.eq(self._retry.sched.valid),
                     flush.sched.payload.eq(self._retry.sched.payload)]
        wiring.connect(m, flush.o, track.flush)
        wiring.connect(m, place.o, mem.read_w)
        if self._rd_place.acked_writes:
            m.d.comb += place.mem_durable.eq(mem.read_durable)

    def _connect_pfc(self, m):
        """PFC between the stack and the MAC: the transmit stream through the pause gate (and,
        ``"core"``, the pause frames' decoder and sender), the receive FIFO's level for XOFF,
        the run-time priority and enable (``pfc_cfg``)."""
        st = self._stack
        pfc = m.submodules.pfc = self._pfc
        wiring.connect(m, st.mac_tx, pfc.i)
        wiring.connect(m, pfc.o, wiring.flipped(self.mac_tx))
        cfg = Signal(PFC_CONFIG, init={"enable": 1, "prio": pfc.prio.init})
        with m.If(self.pfc_cfg.valid):
            m.d.sync += cfg.eq(self.pfc_cfg.payload)
        m.d.comb += [self.pfc_cfg.ready.eq(1), pfc.prio.eq(cfg.prio), pfc.enable.eq(cfg.enable),
                     pfc.local_mac.eq(self.local_mac), pfc.level_rx.eq(st.rx_level)]
        if self._resp is not None:
            m.d.comb += pfc.level_resp.eq(self._resp.ingress_level)
        if pfc.mode == "core":
            rx = self.mac_rx
            m.d.comb += [pfc.rx_valid.eq(rx.valid), pfc.rx_ready.eq(rx.ready),
                         pfc.rx_data.eq(rx.payload.data), pfc.rx_keep.eq(rx.payload.keep),
                         pfc.rx_last.eq(rx.payload.last), pfc.rx_error.eq(rx.payload.error)]
        else:
            m.d.comb += [pfc.pause_in.eq(self.pause_rx), self.pause_tx.eq(pfc.pause_out)]

    def _connect_traffic_class(self, m):
        """The traffic class register (``tc_cfg``), and the reaction point: the packets the
        scheduler sends and the CNPs received in, the QPs it holds back out."""
        tc = Signal(TRAFFIC_CONFIG, init=self.tc_init)
        with m.If(self.tc_cfg.valid):
            m.d.sync += tc.eq(self.tc_cfg.payload)
        m.d.comb += [self.tc_cfg.ready.eq(1), self._cm.tclass.eq(tc),
                     self._stack.pcp.eq(tc.pcp)]
        sched, rx = self._sched, self._rx
        if self._rp is None:
            return
        rp = m.submodules.reaction_point = self._rp
        m.d.comb += [
            rp.desc.valid.eq(sched.desc.valid & sched.desc.ready),
            rp.desc.payload.eq(sched.desc.payload),
            rp.cnp.valid.eq(rx.cnp), rp.cnp.payload.qp.eq(rx.cnp_qp),
            rp.cfg.valid.eq(self.cc_cfg.valid), rp.cfg.payload.eq(self.cc_cfg.payload),
            self.cc_cfg.ready.eq(1),
            rp.rd_qp.eq(self.cc_qp), self.cc_rate.eq(rp.rd_rate),
        ]

    def _connect_read_responses(self, m, rd_reg, tx_reg):
        """The responder's READ responses on the transmit path: their descriptors take turns
        with the scheduler's (and the READ requester's own READ requests) at the payload reader
        (per packet), their payloads realigned before the builder; each packet's tag (a READ's
        last response, its QP) follows it from the builder's input to the transmitter's
        arbiter, where ``rd_sent`` reports it."""
        mem, builder, resp = self._mem, self._builder, self._resp
        arb = m.submodules.desc_arbiter = StreamArbiter(PACKET_DESC, 3 if self.reads else 2)
        wiring.connect(m, self._sched.desc, arb.i[0])
        m.d.comb += [arb.i[1].valid.eq(resp.rd.valid), resp.rd.ready.eq(arb.i[1].ready),
                     arb.i[1].payload.eq(reader_descriptor(m, resp.rd.payload.desc, self.width))]
        if self.reads:
            wiring.connect(m, self._rd_resend.o, arb.i[2])
        wiring.connect(m, arb.o, mem.desc)
        align = m.submodules.read_align = RespReadAlign(self.width)
        wiring.connect(m, mem.o, align.i)
        wiring.connect(m, align.o, rd_reg.i)
        # (a tag a packet, from its first beat into the builder to its last into the arbiter)
        tags = m.submodules.tx_tags = fifo.SyncFIFO(width=9, depth=4)
        bi, first = builder.i, Signal(init=1)
        with m.If(bi.valid & bi.ready):
            m.d.sync += first.eq(bi.payload.last)
        room = ~first | tags.w_rdy
        d = bi.payload.meta
        m.d.comb += [bi.payload.eq(rd_reg.o.payload), bi.valid.eq(rd_reg.o.valid & room),
                     rd_reg.o.ready.eq(bi.ready & room),
                     tags.w_en.eq(bi.valid & bi.ready & first),
                     tags.w_data.eq(Cat(d.qp, (d.src == WrSource.RESPONDER) & d.last))]
        t = tx_reg.o
        m.d.comb += [tags.r_en.eq(t.valid & t.ready & t.payload.last),
                     resp.rd_sent.valid.eq(tags.r_en & tags.r_data[8]),
                     resp.rd_sent.payload.eq(tags.r_data[:8])]

    def _connect_responder(self, m, ctl):
        """The responder: requests from the receive path, the QP table's context, the set-ups
        of the QP control, payload writes into local memory (and, with AXI4, the count of
        those acknowledged), the user's ports."""
        resp = m.submodules.responder = self._resp
        qps, rx, mem = self._qps, self._rx, self._mem
        wiring.connect(m, rx.req, resp.i)
        m.d.comb += [
            qps.resp_qp.eq(resp.ctx_qp), resp.ctx.eq(qps.resp_context),
            # (the QP table takes every PSN write: the responder sees the same ones)
            resp.psn_set.valid.eq(ctl.table_psn.valid & ctl.table_psn.ready),
            resp.psn_set.payload.eq(ctl.table_psn.payload),
            *([resp.ctx_set.valid.eq(ctl.table_ctl.valid & ctl.table_ctl.ready),
               resp.ctx_set.payload.eq(ctl.table_ctl.payload)] if self.reads else []),
            resp.cfg_w.valid.eq(self.resp_cfg.valid), resp.cfg_w.payload.eq(self.resp_cfg.payload),
            self.resp_cfg.ready.eq(1),
            resp.cnp_cfg.valid.eq(self.resp_cnp_cfg.valid),
            resp.cnp_cfg.payload.eq(self.resp_cnp_cfg.payload), self.resp_cnp_cfg.ready.eq(1),
        ]
        wiring.connect(m, resp.mem, mem.resp_w)
        if self._resp.acked_writes:
            m.d.comb += resp.mem_durable.eq(mem.resp_durable)
        wiring.connect(m, wiring.flipped(self.recv), resp.recv)
        wiring.connect(m, resp.cpl, wiring.flipped(self.recv_cpl))
        # the connection manager names each QP's region; the pattern sink watches the payload
        # writes the memory takes, and answers QUERY through it
        cm = self._cm
        m.d.comb += [resp.cfg_qp.eq(cm.cfg_qp), cm.cfg.eq(resp.cfg)]
        if self._sink is not None:
            sink = m.submodules.pattern_sink = self._sink
            m.d.comb += [sink.i.valid.eq(resp.mem.valid & resp.mem.ready),
                         sink.i.payload.eq(resp.mem.payload), cm.counts.eq(sink.counts)]
            if self.reads:
                # (and the READ responses' payload: the memory takes one write a cycle)
                rw = self._rd_place.o
                with m.If(rw.valid & rw.ready):
                    m.d.comb += [sink.i.valid.eq(1), sink.i.payload.eq(rw.payload)]

    def _connect_statistics(self, m):
        """The counters: the stack's and the RoCE layers' in one address space
        (``stats_addr``), the per-QP ones in another (``qp_stats_qp`` / ``qp_stats_sel``)."""
        st, rx, retry, cm = self._stack, self._rx, self._retry, self._cm
        stats = m.submodules.roce_stats = self._stats
        ev = stats.events
        c, tx, wr = self._completer.cpl, self._builder.o, self._sched.wr
        tx_packet = tx.valid & tx.ready & tx.payload.last
        if self.reads:
            # (the requester's packets: the responder's READ responses not counted)
            bi = self._builder.i
            tx_packet = bi.valid & bi.ready & bi.payload.last & \
                (bi.payload.meta.src != WrSource.RESPONDER)
        events = {
            "roce_rx_packets": rx.i.valid & rx.i.ready & rx.i.payload.last,
            "roce_rx_naks": retry.seq_naks | retry.rnr_naks | retry.error_naks,
            "roce_tx_packets": tx_packet,
            "roce_wr_posted": wr.valid & wr.ready,
            "roce_cpl_ok": c.valid & c.ready & (c.payload.status == CplStatus.OK),
            "roce_cpl_error": c.valid & c.ready & (c.payload.status != CplStatus.OK),
            "roce_qp_ctl_rejected": self._qps.rejected, "roce_ignored_acks": retry.ignored,
        }
        for prefix, block, names in (
                ("roce_rx_", rx, ("icrc_bad", "drop_short", "drop_opcode", "drop_qp", "drop_state",
                                  "drop_peer", "drop_pkey", "acks", "cnp")),
                ("roce_", retry, ("stale_acks", "seq_naks", "rnr_naks", "error_naks", "timeouts",
                                  "rewinds", "qp_errors")),
                ("cm_", cm, CM_COUNTERS)):
            events.update({prefix + name: getattr(block, name) for name in names})
        events["roce_rx_requests"] = rx.requests
        for name in RESP_COUNTERS:
            events[f"resp_{name}"] = getattr(self._resp, name) if self._resp else Const(0, 1)
        for name in READ_COUNTERS:
            events[f"rd_{name}"] = getattr(self._rd_place, name) if self.reads else Const(0, 1)
        for name in READ_INGRESS_COUNTERS:
            events[f"rd_{name}"] = getattr(self._rd_ingress, name) if self.reads else Const(0, 1)
        events.update({
            "roce_rx_read_responses": rx.read_responses if self.reads else Const(0, 1),
            "rd_table_overflow": self._rd_track.overflow if self.reads else Const(0, 1),
            "rd_done": self._rd_place.done.valid if self.reads else Const(0, 1),
            "rd_reissues": self._rd_place.reissue.valid if self.reads else Const(0, 1),
            "rd_resend_dropped": self._rd_resend.dropped if self.reads else Const(0, 1),
            "rd_resend_stale": self._rd_resend.stale if self.reads else Const(0, 1),
        })
        rp, pfc = self._rp, self._pfc
        events.update({
            "cc_cnp_dropped": rp.cnp_dropped if rp else Const(0, 1),
            "pfc_rx_pause": pfc.rx_pause if pfc else Const(0, 1),
            "pfc_rx_bad": pfc.rx_bad if pfc else Const(0, 1),
            "pfc_tx_frames": pfc.tx_pfc if pfc else Const(0, 1),
        })
        assert set(events) == set(PULSE_COUNTERS), "a statistics event is missing or unknown"
        for name, value in events.items():
            assert len(value) == 1, f"statistics event {name} is not a one-bit pulse"
            m.d.comb += ev[name].eq(value)
        m.d.comb += [
            stats.moved.stream_drop_too_long.eq(self._front.drop_too_long),
            stats.moved.stream_drop_error.eq(self._front.drop_error),
            stats.wide.sink_bytes_checked.eq(self._sink.counts.checked if self._sink else 0),
            stats.wide.sink_bytes_wrong.eq(self._sink.counts.wrong if self._sink else 0),
            stats.addr.eq(self.stats_addr), self.stats_data.eq(stats.data),
            st.stats_addr.eq(stats.net_addr), stats.net_data.eq(st.stats_data),
        ]

        # per-QP counters: the retry engine's, then the receive path's
        qst = m.submodules.qp_stats = EndpointQpStats(self.num_qps)
        m.d.comb += [
            qst.qp.eq(rx.cnp_qp), qst.drop_state.eq(rx.drop_state),
            qst.drop_peer.eq(rx.drop_peer), qst.cnp.eq(rx.cnp),
            qst.rd_qp.eq(self.qp_stats_qp), qst.rd_sel.eq(self.qp_stats_sel),
            self.qp_stats_data.eq(qst.rd_data), retry.qp_stats_qp.eq(qst.retry_qp),
            retry.qp_stats_sel.eq(qst.retry_sel), qst.retry_data.eq(retry.qp_stats_data),
        ]
