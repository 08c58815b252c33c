"""Closed-loop incast: RoCEv2 senders with DCQCN through the switch model into one port, with
the receiver's CNPs and the switch's PFC closing the loops. Event driven, time in nanoseconds,
deterministic from one seed; nothing depends on wall-clock time.

The network: ``senders`` FPGA endpoints, each on its own line of ``line_gbps`` into a port of
the :class:`~rocegen.sim.models.fabric.switch.Switch` (ports ``0 .. senders - 1``), and a host NIC
behind port ``senders`` of the same rate; every cable delays ``cable_ns`` each way.

Senders. Each has one RC QP that always has data: RDMA WRITE MIDDLE packets of ``pmtu`` bytes
(``pmtu + 58``-byte frames: Ethernet, IPv4 with DSCP 26 and ECT(0), UDP, BTH, payload, a valid
ICRC), one after the other on its line. Its pacing is the gateware's reaction point
(``docs/dcqcn-design.md``):

* the rate law of one QP, :class:`~rocegen.sim.models.cc.dcqcn.DcqcnRp`, with ``params``
  (default ``DcqcnParams.from_physical(clk_hz, line_gbps)``, the DCQCN paper's values), its
  time the cycles of a ``clk_hz`` clock from 0. It is driven event by event, not cycle by
  cycle: a CNP at the cycle it arrives, a visit (``tick``) at each deadline of its alpha and
  rate timers, and one :data:`VISIT_CYCLES` after a packet whose bytes complete the byte
  counter (and again that much later while an event is still due: one increase per visit);
  every packet's line bytes (frame + 24: FCS, preamble, gap; the scheduler's "payload + 82")
  are counted with ``sent``;
* the rate limiter's token bucket (:class:`~rocegen.sim.models.cc.dcqcn.RateLimiterModel`'s
  semantics, in continuous time): tokens (bytes) grow at the current rate RC up to ``burst``;
  a packet may start while the tokens are not negative and takes its line bytes off (a
  deficit bucket: every byte counted, the long-run rate exact); a new rate drops the tokens
  saved at the old one (a debt is kept);
* a new RC (a CNP's cut or an increase) is in force at the limiter ``rate_latency_cycles``
  after its cause (default 11 cycles, the measured CNP-to-limiter figure of
  ``bench/bench_dcqcn.py``; the increases take the same path).

With ``dcqcn=False`` every sender sends at its line rate and ignores CNPs. A sender obeys the
PFC frames the switch sends it as :class:`~rocegen.sim.models.fabric.switch.PacedSender` does: from
``pfc_response_ns`` after one arrives no packet starts for its pause time (0: resume), the
packet on the line is finished.

Switch: DSCP classification (26 is priority 3, the CNPs' 48 priority 6), one shared
``buffer``, ECN marking of priority 3 with ``kmin`` / ``kmax`` / ``pmax`` (RED at enqueue; the
DCQCN paper's 5 KB / 200 KB / 1 % by default). With ``pfc``, priority 3 is lossless: XOFF
above ``xoff`` bytes of an ingress port's priority group, XON at ``xon`` (default
``xoff // 2``), headroom :func:`~rocegen.sim.models.fabric.switch.pfc_headroom` of the cable and the
senders' response; without, frames that find no room are dropped.

Host: a notification point per sender's QP (:class:`~rocegen.sim.models.responder.responder.
NotificationPoint`): a frame arriving marked CE makes a CNP to its sender's QP unless that QP
had one less than ``cnp_interval_ns`` before (default the gateware's: 4 us in whole cycles of
322.27 MHz, :func:`~rocegen.wire.roce.cnp_interval_cycles`, 1290 cycles, 4.003 us). The CNP
is a real frame (BTH opcode 0x81, BECN, 16 zero bytes, ICRC; DSCP 48, not ECN-capable) sent on
the host's line as soon as it is decided, through the switch to the sender.

Figures (:func:`simulate` returns a dict, every value JSON-ready; flows are numbered as the
senders): ``utilization`` (the egress line's busy time over the run, 0..1) and
``utilization_converged`` (over the converged part, from ``settle_us``, default half the run);
``throughput_gbps`` (each flow's line bytes delivered to the host in the converged part, so
that they add up to the utilization), ``jain_fairness`` (:func:`jain_index` of those),
``goodput_gbps`` (payload); ``drops`` and ``headroom_drops``, ``xoff_sent`` (refreshes
included) and ``xon_sent``, ``paused_us`` (per sender, under a pause) and ``paused_fraction``,
``ce_marks``, ``cnps_sent`` (and per flow, and ``cnps_suppressed`` by the interval),
``max_queue_bytes`` and ``max_queue_converged_bytes`` (the egress queue of the data priority),
``max_buffer_bytes``, frames sent and delivered, ``final_rate_gbps`` and ``min_rate_gbps`` (each
sender's RC at the end and its lowest); and ``series`` (unless
``series=False``): ``t_us`` (the end of each ``sample_us`` window), per flow ``rate_gbps``
(delivered in the window) and ``dcqcn_rate_gbps`` (the RC in force at the limiter at ``t_us``),
``queue_bytes`` (the queue's depth at ``t_us``) and ``queue_max_bytes`` (its deepest in the
window). ``parameters`` holds the configuration, the DCQCN parameters included.
"""

import bisect
import heapq
import itertools
import math
import zlib
from dataclasses import asdict, dataclass, field, fields

from rocegen.sim.models import icrc
from rocegen.sim.models.cc.dcqcn import MOD, RATE_ONE, DcqcnParams, DcqcnRp
from rocegen.sim.models.fabric.switch import (
    ECN_CE,
    ECN_ECT0,
    ECN_NOT_ECT,
    Switch,
    line_ns,
    pfc_headroom,
    wire_bytes,
)
from rocegen.sim.models.net.checksum import internet_checksum
from rocegen.sim.models.responder.responder import CNP_DSCP, NotificationPoint
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire import pfc as P
from rocegen.wire.roce import cnp_interval_cycles

__all__ = ["IncastConfig", "simulate", "jain_index", "CLK_HZ", "DATA_DSCP", "DATA_PRIORITY",
           "CNP_PRIORITY", "VISIT_CYCLES", "MAX_SENDERS", "data_frame", "cnp_frame",
           "sender_mac", "NIC_MAC", "SENDER_QPN", "HOST_QPN"]

#: the CMAC clock of the 100G gateware
CLK_HZ = 322_265_625
#: DSCP of the data packets, and the switch priority it maps to (DSCP >> 3)
DATA_DSCP = 26
DATA_PRIORITY = DATA_DSCP >> 3
CNP_PRIORITY = CNP_DSCP >> 3
#: cycles between two visits of a QP by the DCQCN engine with fewer than 6 QPs
VISIT_CYCLES = 6
NIC_MAC = 0x02_00_00_00_FF_10
NIC_IP = 0x0A_00_FF_64            # 10.0.255.100
SENDER_QPN = 0x100                # sender k's QP is SENDER_QPN + k
HOST_QPN = 0x200                  # the host's QP of flow k is HOST_QPN + k
MAX_SENDERS = 64
_OFF_IP = H.ETH.length
_OFF_BTH = H.ETH.length + H.IPV4.length + H.UDP.length

# event kinds, in the order they happen at equal times (after the switch's own)
_RX, _RATE, _TICK, _ARRIVE, _START = range(5)


def sender_mac(k):
    return 0x02_00_00_00_00_01 + k


def _sender_ip(k):
    return 0x0A_00_00_01 + k


def _ipv4(src, dst, dscp, ecn, udp_len):
    f = dict(version=4, ihl=5, dscp=dscp, ecn=ecn, total_length=H.IPV4.length + udp_len, df=1,
             ttl=64, protocol=H.IP_PROTO_UDP, src=src, dst=dst)
    return H.IPV4.pack(**f, checksum=internet_checksum(H.IPV4.pack(**f)))


def _prefix(k, payload):
    """Ethernet, IPv4 and UDP headers of sender ``k``'s data frames (``payload`` bytes)."""
    udp_len = H.UDP.length + H.BTH.length + payload + icrc.ICRC_LEN
    return (H.ETH.pack(dst=NIC_MAC, src=sender_mac(k), ethertype=H.ETHERTYPE_IPV4)
            + _ipv4(_sender_ip(k), NIC_IP, DATA_DSCP, ECN_ECT0, udp_len)
            + H.UDP.pack(src_port=0xC000 + k, dst_port=H.UDP_PORT_ROCEV2, length=udp_len))


def _bth(k, psn):
    return H.BTH.pack(opcode=opc.OP_RC_RDMA_WRITE_MIDDLE, pkey=0xFFFF, dest_qp=HOST_QPN + k,
                      psn=psn & 0xFFFFFF)


def data_frame(k, psn, payload):
    """Sender ``k``'s RDMA WRITE MIDDLE packet ``psn`` with ``payload`` zero bytes (valid IPv4
    checksum and ICRC)."""
    return icrc.append(_prefix(k, payload) + _bth(k, psn) + bytes(payload))


class _Frames:
    """Sender ``k``'s data frames, as :func:`data_frame` makes them, made faster: the headers
    before the BTH are the same in every frame, so their share of the ICRC is computed once and
    each frame's ICRC continues from it over its BTH and payload."""

    def __init__(self, k, payload):
        self.k = k
        self.prefix = _prefix(k, payload)
        self.payload = bytes(payload)
        ip = self.prefix[_OFF_IP:]
        self.head = len(ip)
        self.crc = zlib.crc32(icrc.PREFIX + icrc.mask(ip + _bth(k, 0))[:self.head])

    def __call__(self, psn):
        bth = _bth(self.k, psn)
        masked = icrc.mask(self.prefix[_OFF_IP:] + bth)[self.head:]
        crc = zlib.crc32(self.payload, zlib.crc32(masked, self.crc))
        return self.prefix + bth + self.payload + crc.to_bytes(icrc.ICRC_LEN, "little")


def cnp_frame(k):
    """The host's CNP to sender ``k``'s QP (DSCP 48, not ECN-capable, BECN set)."""
    udp_len = H.UDP.length + H.BTH.length + H.CNP_PAYLOAD.length + icrc.ICRC_LEN
    frame = (H.ETH.pack(dst=sender_mac(k), src=NIC_MAC, ethertype=H.ETHERTYPE_IPV4)
             + _ipv4(NIC_IP, _sender_ip(k), CNP_DSCP, ECN_NOT_ECT, udp_len)
             + H.UDP.pack(src_port=0xC000 + k, dst_port=H.UDP_PORT_ROCEV2, length=udp_len)
             + H.BTH.pack(opcode=opc.OP_CNP, pkey=0xFFFF, becn=1, dest_qp=SENDER_QPN + k)
             + H.CNP_PAYLOAD.pack())
    return icrc.append(frame)


def jain_index(values):
    """Jain's fairness index of ``values`` (non-negative): ``(sum x)^2 / (n sum x^2)``, 1 when
    all are equal, ``1/n`` when one has everything; 1 when all are zero."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("jain_index needs at least one value")
    if any(not x >= 0 or math.isinf(x) for x in xs):
        raise ValueError(f"jain_index needs non-negative finite values, not {values!r}")
    squares = sum(x * x for x in xs)
    return 1.0 if squares == 0 else sum(xs) ** 2 / (len(xs) * squares)


@dataclass(frozen=True)
class IncastConfig:
    """Every parameter of a run (see the module documentation); checked on construction."""
    senders: int = 4
    us: float = 100_000.0
    dcqcn: bool = True
    pfc: bool = True
    kmin: int = 5_000
    kmax: int = 200_000
    pmax: float = 0.01
    buffer: int = 1 << 20
    xoff: int = 100_000
    xon: int | None = None
    cable_ns: float = 100.0
    pmtu: int = 4096
    seed: int = 1
    stagger_us: float = 0.0
    sample_us: float = 10.0
    settle_us: float | None = None
    line_gbps: float = 100.0
    clk_hz: int = CLK_HZ
    params: DcqcnParams | None = None
    burst: int = 8192
    rate_latency_cycles: int = 11
    cnp_interval_ns: float = cnp_interval_cycles(CLK_HZ) * 1e9 / CLK_HZ
    pfc_response_ns: float = 0.0
    series: bool = field(default=True, compare=False)

    def __post_init__(self):
        def integer(name, lo, hi=None):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an integer, not {v!r}")
            if v < lo or (hi is not None and v > hi):
                raise ValueError(f"{name} must be {lo}..{hi}, not {v}" if hi is not None else
                                 f"{name} must be {lo} or more, not {v}")

        def number(name, positive=True):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"{name} must be a number, not {v!r}")
            if math.isnan(v) or math.isinf(v) or v < 0 or (positive and v == 0):
                raise ValueError(f"{name} must be {'positive' if positive else 'non-negative'} "
                                 f"and finite, not {v}")

        integer("senders", 1, MAX_SENDERS)
        number("us")
        for name in ("dcqcn", "pfc", "series"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, not {getattr(self, name)!r}")
        integer("kmin", 0)
        integer("kmax", self.kmin)
        if isinstance(self.pmax, bool) or not isinstance(self.pmax, (int, float)) \
                or not 0 <= self.pmax <= 1:
            raise ValueError(f"pmax must be a probability in [0, 1], not {self.pmax!r}")
        integer("buffer", 0)
        integer("xoff", 0)
        if self.xon is not None:
            integer("xon", 0, self.xoff)
        number("cable_ns", positive=False)
        if self.pmtu not in (256, 512, 1024, 2048, 4096):
            raise ValueError(f"pmtu must be 256, 512, 1024, 2048 or 4096, not {self.pmtu!r}")
        integer("seed", 0)
        number("stagger_us", positive=False)
        number("sample_us")
        if self.sample_us > self.us:
            raise ValueError(f"sample_us ({self.sample_us}) must not exceed us ({self.us})")
        if self.settle_us is not None:
            number("settle_us", positive=False)
            if self.settle_us >= self.us:
                raise ValueError(f"settle_us ({self.settle_us}) must be less than us ({self.us})")
        number("line_gbps")
        integer("clk_hz", 1)
        if self.params is not None and not isinstance(self.params, DcqcnParams):
            raise TypeError(f"params must be a DcqcnParams, not {self.params!r}")
        integer("burst", 1)
        integer("rate_latency_cycles", 0)
        number("cnp_interval_ns", positive=False)
        number("pfc_response_ns", positive=False)

    @property
    def settle(self):
        """Start of the converged part in us."""
        return self.us / 2 if self.settle_us is None else self.settle_us

    def dcqcn_params(self):
        return self.params or DcqcnParams.from_physical(self.clk_hz, self.line_gbps)

    def as_dict(self):
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "series"}
        d["params"] = asdict(self.dcqcn_params())
        d["settle_us"] = self.settle
        d["xon"] = self.xoff // 2 if self.xon is None else self.xon
        return d


class _Sender:
    """A sender's line, token bucket, reaction point and PFC state."""

    def __init__(self, k, cfg, start_ns, params, cycle_ns):
        self.k = k
        self.frame = _Frames(k, cfg.pmtu)
        self.line = cfg.line_gbps / 8                  # bytes per ns
        self.cycle_ns = cycle_ns
        self.burst = cfg.burst
        self.start_ns = start_ns
        self.psn = 0
        self.line_free = start_ns
        self.tokens, self.tok_t = 0.0, start_ns
        self.rp = DcqcnRp(params, math.ceil(start_ns / cycle_ns)) if cfg.dcqcn else None
        self.rate_units = params.line_rate
        self.rate = self._bytes_per_ns(params.line_rate) if cfg.dcqcn else self.line
        self.rates = [(start_ns, self.rate_units)]      # (time in force, RC) at the limiter
        self.pending_rc = self.rate_units               # the last RC sent to the limiter
        self.pauses = []                                # [start, end) pending, disjoint
        self.pause_log = []                             # every pause interval
        self.gen = 0                                    # of the pending _START event
        self.tick_gen = 0
        self.tick_at = None                             # cycle of the pending visit
        self.frames = self.bytes = self.cnp_rx = self.pfc_rx = self.rx_other = 0
        self.paused_ns = 0.0                            # time frames were held back
        self.held = 0.0

    def _bytes_per_ns(self, units):
        return units / RATE_ONE / self.cycle_ns

    def _tokens_at(self, t):
        return min(self.burst, self.tokens + self.rate * (t - self.tok_t))

    def _scheduled(self):
        t = self.line_free
        if self.tokens < 0:
            t = max(t, self.tok_t - self.tokens / self.rate)
        return t

    def next_start(self, now):
        """When the next packet starts (not before ``now``); :attr:`held` is the part of the
        wait the pauses make."""
        t = base = max(now, self._scheduled())
        while self.pauses and self.pauses[0][1] <= t:
            self.pauses.pop(0)
        for start, end in self.pauses:
            if start <= t < end:
                t = end
        self.held = t - base
        return t

    def emit(self, t):
        """Start the next packet at ``t`` (the time :meth:`next_start` gave): the frame and
        the time its last bit leaves."""
        self.paused_ns += self.held
        frame = self.frame(self.psn)
        self.psn += 1
        n = wire_bytes(len(frame))
        self.tokens = self._tokens_at(t) - n
        self.tok_t = t
        self.line_free = t + n / self.line
        self.frames += 1
        self.bytes += len(frame)
        if self.rp is not None:
            self.rp.sent(n)
        return frame, self.line_free

    def set_rate(self, t, units):
        """A new RC at the limiter from ``t``: the tokens saved at the old rate are dropped."""
        self.tokens = min(self._tokens_at(t), 0.0)
        self.tok_t = t
        self.rate_units = units
        self.rate = self._bytes_per_ns(units)
        self.rates.append((t, units))

    def pause(self, quanta, at):
        """A PFC frame for the data priority takes effect at ``at``."""
        last = self.pauses[-1] if self.pauses else None
        if quanta:
            end = at + P.quanta_ns(quanta, self.line * 8)
            if last is not None and last[0] <= at < last[1]:
                last[1] = end                           # a new pause time replaces the timer
            else:
                entry = [at, end]
                self.pauses.append(entry)
                self.pause_log.append(entry)
        elif last is not None and at < last[1]:
            last[1] = max(last[0], at)                  # XON: resume


class _Run:
    def __init__(self, cfg):
        self.cfg = cfg
        n = cfg.senders
        self.until = cfg.us * 1000.0
        self.cycle_ns = 1e9 / cfg.clk_hz
        self.params = cfg.dcqcn_params()
        self.host = n
        frame_len = len(data_frame(0, 0, cfg.pmtu))
        self.frame_len = frame_len
        self.sample_ns = cfg.sample_us * 1000.0
        self.nbins = math.ceil(self.until / self.sample_ns - 1e-9)
        kw = {}
        if cfg.pfc:
            kw = dict(pfc=(DATA_PRIORITY,), xoff=cfg.xoff, xon=cfg.xon,
                      headroom=pfc_headroom(cfg.line_gbps, frame_len, cable_ns=cfg.cable_ns,
                                            response_ns=cfg.pfc_response_ns))
        route = {NIC_MAC: self.host} | {sender_mac(k): k for k in range(n)}
        self.switch = Switch([cfg.line_gbps] * (n + 1), route=route, classify="dscp",
                             buffer=cfg.buffer, ecn=True, kmin=cfg.kmin, kmax=cfg.kmax,
                             pmax=cfg.pmax, ecn_priorities=(DATA_PRIORITY,),
                             sample_ns=self.sample_ns if cfg.series else None, seed=cfg.seed,
                             name="incast", **kw)
        self.senders = [_Sender(k, cfg, k * cfg.stagger_us * 1000.0, self.params, self.cycle_ns)
                        for k in range(n)]
        self.np = NotificationPoint(cfg.cnp_interval_ns)
        self.cnps = [cnp_frame(k) for k in range(n)]
        self.host_line_free = 0.0
        self.cnp_sent = [0] * n
        self.np_marks = {"issued": 0, "suppressed": 0, "dropped": 0}
        self.bins = [[0] * self.nbins for _ in range(n)]   # line bytes delivered per window
        self.settle_ns = cfg.settle * 1000.0
        self.converged = [0] * n                           # line bytes delivered after settle
        self.busy_all = self.busy_settled = 0.0
        self.delivered = [0] * n
        self.marked_rx = 0
        self.max_queue_settled = 0
        self.queue_max = [0] * self.nbins                  # deepest queue in each window
        self.heap = []
        self.order = itertools.count()

    # ---- events ----

    def push(self, t, kind, k, arg=None):
        heapq.heappush(self.heap, (t, kind, next(self.order), k, arg))

    def schedule_start(self, s, now):
        s.gen += 1
        self.push(s.next_start(now), _START, s.k, s.gen)

    def schedule_tick(self, s, now_cycle):
        """The next visit of sender ``s``'s QP that has something to do."""
        rp = s.rp
        p = rp.params

        def ahead(deadline):                        # cycles to a deadline, 0 once it has come
            d = (deadline - now_cycle) % MOD
            return 0 if d >= MOD // 2 else d
        cycle = now_cycle + min(ahead(rp.alpha_dl), ahead(rp.rate_dl))
        if (rp.sent_total - rp.base) % MOD >= p.byte_count:
            cycle = min(cycle, now_cycle + VISIT_CYCLES)
        if cycle == now_cycle:
            cycle += VISIT_CYCLES                        # a deadline that came at this visit
        if s.tick_at == cycle:
            return
        s.tick_gen += 1
        s.tick_at = cycle
        self.push(cycle * self.cycle_ns, _TICK, s.k, (s.tick_gen, cycle))

    def new_rate(self, s, t, rec):
        if rec is not None and rec["rc"] != s.pending_rc:
            s.pending_rc = rec["rc"]
            self.push(t + self.cfg.rate_latency_cycles * self.cycle_ns, _RATE, s.k, rec["rc"])

    def run(self):
        sw = self.switch
        for s in self.senders:
            self.schedule_start(s, s.start_ns)
            if s.rp is not None:
                self.schedule_tick(s, math.ceil(s.start_ns / self.cycle_ns))
        heap = self.heap
        while True:
            t_switch = sw.next_due()
            t_event = heap[0][0] if heap else None
            t = min((x for x in (t_switch, t_event) if x is not None), default=None)
            if t is None or t > self.until:
                break
            if t_switch is not None and t_switch == t:
                for d in sw.due(t):
                    self.departure(d)
                continue
            t, kind, _, k, arg = heapq.heappop(heap)
            s = self.senders[k] if k < len(self.senders) else None
            if kind == _ARRIVE:
                sw.receive(k, arg, t)
                if k != self.host:                      # the queue is deepest after an arrival
                    depth = sw.depth(self.host, DATA_PRIORITY)
                    i = int(t // self.sample_ns)
                    if i < self.nbins and depth > self.queue_max[i]:
                        self.queue_max[i] = depth
                    if t >= self.settle_ns and depth > self.max_queue_settled:
                        self.max_queue_settled = depth
            elif kind == _START:
                if arg == s.gen:
                    frame, end = s.emit(t)
                    self.push(end + self.cfg.cable_ns, _ARRIVE, k, frame)
                    if s.rp is not None and (s.rp.sent_total - s.rp.base) % MOD \
                            >= s.rp.params.byte_count:
                        self.schedule_tick(s, int(t / self.cycle_ns))
                    self.schedule_start(s, t)
            elif kind == _RX:
                self.sender_rx(s, arg, t)
            elif kind == _RATE:
                s.set_rate(t, arg)
                self.schedule_start(s, t)
            elif kind == _TICK:
                gen, cycle = arg
                if gen == s.tick_gen:
                    s.tick_at = None
                    self.new_rate(s, t, s.rp.tick(cycle))
                    self.schedule_tick(s, cycle)
        for d in sw.due(self.until):
            self.departure(d)
        return self.results()

    def departure(self, d):
        arrive = d.end + self.cfg.cable_ns
        if d.port != self.host:
            if arrive <= self.until:
                self.push(arrive, _RX, d.port, d.frame)
            return
        self.busy_all += min(d.end, self.until) - d.start
        self.busy_settled += max(0.0, min(d.end, self.until) - max(d.start, self.settle_ns))
        if arrive >= self.until:
            return
        self.host_rx(d.frame, arrive)

    def host_rx(self, frame, t):
        """A data frame reaches the host NIC at ``t``: delivered, and a CNP if it is marked."""
        ip = H.IPV4.unpack(frame[_OFF_IP:_OFF_IP + H.IPV4.length])
        bth = H.BTH.unpack(frame[_OFF_BTH:_OFF_BTH + H.BTH.length])
        k = bth["dest_qp"] - HOST_QPN
        n = wire_bytes(len(frame))
        self.delivered[k] += 1
        self.bins[k][int(t // self.sample_ns)] += n
        if t >= self.settle_ns:
            self.converged[k] += n
        if ip["ecn"] != ECN_CE:
            return
        self.marked_rx += 1
        outcome = self.np.step(t, mark=k)
        self.np_marks[outcome] += 1
        if outcome != "issued":
            return
        self.np.step(t, leaves=True)                    # the host's line takes it at once
        cnp = self.cnps[k]
        start = max(t, self.host_line_free)
        self.host_line_free = start + line_ns(len(cnp), self.cfg.line_gbps)
        self.cnp_sent[k] += 1
        self.push(self.host_line_free + self.cfg.cable_ns, _ARRIVE, self.host, cnp)

    def sender_rx(self, s, frame, t):
        """A frame from the switch reaches sender ``s``: a PFC frame or a CNP."""
        eth = H.ETH.unpack(frame)
        if eth["ethertype"] == P.ETHERTYPE_MAC_CONTROL:
            f = P.parse(frame)
            quanta = f.classes.get(DATA_PRIORITY) if isinstance(f, P.PfcFrame) else None
            if quanta is None:
                s.rx_other += 1
                return
            s.pfc_rx += 1
            s.pause(quanta, t + self.cfg.pfc_response_ns)
            self.schedule_start(s, t)
            return
        bth = H.BTH.unpack(frame[_OFF_BTH:_OFF_BTH + H.BTH.length])
        if eth["ethertype"] != H.ETHERTYPE_IPV4 or bth["opcode"] != opc.OP_CNP \
                or bth["dest_qp"] != SENDER_QPN + s.k:
            s.rx_other += 1
            return
        s.cnp_rx += 1
        if s.rp is None:
            return
        cycle = int(t / self.cycle_ns)
        self.new_rate(s, t, s.rp.cnp(cycle))
        self.schedule_tick(s, cycle)

    # ---- figures ----

    def results(self):
        cfg, sw, n = self.cfg, self.switch, self.cfg.senders
        until = self.until
        window = until - self.settle_ns
        conv_gbps = [b * 8 / window for b in self.converged]
        paused = []
        for s in self.senders:
            paused.append(sum(max(0.0, min(e, until) - max(a, 0.0)) for a, e in s.pause_log))
        out = {
            "parameters": cfg.as_dict(),
            "frame_bytes": self.frame_len,
            "utilization": self.busy_all / until,
            "utilization_converged": self.busy_settled / window,
            "jain_fairness": jain_index(self.converged),
            "throughput_gbps": conv_gbps,
            "total_gbps": sum(conv_gbps),
            "goodput_gbps": sum(self.converged) * cfg.pmtu / wire_bytes(self.frame_len) * 8
            / window,
            "sent_frames": [s.frames for s in self.senders],
            "delivered_frames": self.delivered,
            "drops": sw.total("drops"),
            "headroom_drops": sw.total("headroom_drops"),
            "xoff_sent": sw.total("xoff_sent"),
            "xon_sent": sw.total("xon_sent"),
            "pfc_rx": [s.pfc_rx for s in self.senders],
            "paused_us": [p / 1000 for p in paused],
            "paused_fraction": sum(paused) / (n * until),
            "held_back_us": [s.paused_ns / 1000 for s in self.senders],
            "ce_marks": sw.total("marks"),
            "marked_rx": self.marked_rx,
            "cnps_sent": sum(self.cnp_sent),
            "cnps_per_flow": self.cnp_sent,
            "cnps_suppressed": self.np_marks["suppressed"],
            "cnp_rx": [s.cnp_rx for s in self.senders],
            "rate_changes": [len(s.rates) - 1 for s in self.senders],
            "max_queue_bytes": sw.counters["max_depth"][self.host][DATA_PRIORITY],
            "max_queue_converged_bytes": self.max_queue_settled,
            "max_buffer_bytes": sw.counters["max_buffer"],
            "final_rate_gbps": [self._gbps(s.rate_units) for s in self.senders],
            "min_rate_gbps": [self._gbps(min(u for _, u in s.rates)) for s in self.senders],
        }
        if cfg.series:
            out["series"] = self.series()
        return out

    def _gbps(self, units):
        return units * 8 / RATE_ONE / self.cycle_ns

    def series(self):
        s_ns = self.sample_ns
        times = [(i + 1) * s_ns for i in range(self.nbins)]
        widths = [min(t, self.until) - i * s_ns for i, t in enumerate(times)]
        rate = [[b * 8 / w for b, w in zip(bins, widths)] for bins in self.bins]
        rc = []
        for s in self.senders:
            ts = [t for t, _ in s.rates]
            rc.append([self._gbps(s.rates[max(0, bisect.bisect_right(ts, t) - 1)][1])
                       for t in times])
        depth = self.switch.depth_series(self.host, DATA_PRIORITY)
        snap = [d for _, d in depth]
        snap += [snap[-1]] * (self.nbins + 1 - len(snap))     # a last window past the end
        return {"t_us": [min(t, self.until) / 1000 for t in times],
                "rate_gbps": rate, "dcqcn_rate_gbps": rc,
                "queue_bytes": snap[1:self.nbins + 1],
                "queue_max_bytes": [max(m, d) for m, d in zip(self.queue_max, snap)]}


def simulate(config=None, **kwargs):
    """Run one incast: an :class:`IncastConfig` or its fields as keyword arguments; returns the
    figures (see the module documentation)."""
    if config is None:
        config = IncastConfig(**kwargs)
    elif kwargs:
        raise TypeError("give an IncastConfig or keyword arguments, not both")
    elif not isinstance(config, IncastConfig):
        raise TypeError(f"config must be an IncastConfig, not {config!r}")
    return _Run(config).run()
