"""Output-queued Ethernet switch for incast simulations: ECN marking, tail drop and PFC, event
driven, time in nanoseconds, deterministic from one seed.

Frames are ``bytes`` without the FCS, as everywhere in rocegen. The caller gives each frame to
:meth:`Switch.receive` at the time its last bit arrives on an ingress port (store and forward)
and takes what the switch sends with :meth:`Switch.due` (:class:`Departure` records: the egress
port, the frame, when its first and last bit leave); :meth:`Switch.next_due` says when the next
thing happens inside the switch. Calls come with non-decreasing times; everything the switch
does at or before a time happens before a frame arriving at that time. Nothing depends on
wall-clock time. The caller paces the ingress (a port receives whatever it is given) and models
cables (:func:`run` joins a switch to :class:`PacedSender` sources over cables of a fixed delay).

Ports. Every port has a line rate (Gb/s, that is bits per ns) and both directions. A frame of
``n`` bytes takes its egress line for ``max(n, 60) + 24`` bytes (FCS 4, preamble and SFD 8,
inter-frame gap 12); back-to-back frames leave at exactly the line rate. Routing is ``route``: a
mapping from destination MAC to egress port, or a function ``route(frame, ingress)`` returning
the egress port or ``None`` (dropped, counted ``no_route``).

Priority: the PCP of the outer VLAN tag (``classify="pcp"``; untagged frames get
``default_priority``) or the IP DSCP through ``dscp_map`` (``classify="dscp"``; a mapping or a
sequence of 64; by default DSCP >> 3, so DSCP 26 is priority 3 and DSCP 48 priority 6; non-IP
frames and unmapped DSCPs get ``default_priority``).

Egress: one queue per priority on each egress port, strict priority between them (7 first);
within a queue, one FIFO per ingress port, served deficit round robin with ``quantum`` bytes per
turn, so busy ingress ports share the egress by bytes. MAC control frames the switch sends go
before any queued frame. The depth of a queue is the bytes of its frames not yet fully sent
(the one on the line included); a frame's buffer is freed when its last bit has left.

Buffer and tail drop: ``buffer`` bytes shared by every queue of every port, and optionally
``queue_limit`` bytes per egress queue. A frame of a lossy priority that does not fit is dropped
(``drops`` of its egress port and priority).

ECN: when a frame of a priority in ``ecn_priorities`` is queued, with ``d`` bytes already in its
egress queue, it is marked with probability 0 for ``d <= kmin``, ``pmax * (d - kmin) /
(kmax - kmin)`` for ``kmin < d <= kmax`` and 1 for ``d > kmax`` (RED as DCQCN and DCTCP
configure it, marking at enqueue). Marking sets the ECN field of an ECT packet (01 or 10) to CE
(11): IPv4 with its header checksum updated incrementally (RFC 1624, so a bad checksum stays
bad), IPv6 in its traffic class. The RoCEv2 ICRC masks these fields and stays valid. Not-ECT
and already-CE packets are never changed. Each data frame routed draws exactly one value from
the switch's ``random.Random(seed)``, marked or not.

PFC (IEEE 802.1Qbb), on the priorities in ``pfc`` (lossless; the others are lossy). The
frames of a lossless priority arriving on an ingress port (a *priority group*) are counted
against that group: while it is not in XOFF and the shared buffer has room they take shared
buffer; otherwise they take the group's ``headroom`` (its own reserve beyond ``buffer``), and
are dropped only when that is full too (``headroom_drops``: a headroom too small for the cable).
Bytes leaving a group come off its headroom first, then off the shared buffer. When the group's
bytes pass ``xoff`` (more than ``xoff``), or a frame has to take headroom, the switch sends a
PFC frame out of that port pausing the priority for ``pause_quanta`` (XOFF), again every half
of that time while it lasts; when they are ``xon`` or fewer and none is left in its headroom
(so that the headroom can take a whole round trip again) it sends one with time 0 (XON).
The PFC frames come out of :meth:`Switch.due` on that port like any frame
(``kind="control"``). :func:`pfc_headroom` gives the headroom a cable needs.
A PFC frame received on a port pauses, from its arrival, that port's egress queues of the
enabled lossless priorities for its time in quanta at the port's rate (0 resumes them at once);
a frame on the line is finished first. An 802.3x PAUSE pauses every queue of the port when
``link_pause`` is set (a link uses PFC or PAUSE, never both). Malformed MAC control frames and
other opcodes are dropped (``ctrl_bad``), and so are pause frames not addressed to
01:80:C2:00:00:01 or the switch's ``mac`` or pausing nothing the switch obeys
(``ctrl_ignored``). MAC control frames are never forwarded.

Counters (:attr:`Switch.counters`; ``[port]`` or ``[port][priority]`` lists, :meth:`Switch.total`
adds them up): ``rx_frames``, ``rx_bytes`` (every frame received), ``tx_frames``, ``tx_bytes``
(data frames sent), ``tx_control`` (MAC control frames sent), ``busy_ns`` (time the egress line
was busy), ``drops``, ``headroom_drops`` (of the ingress port), ``ect`` (ECT frames queued),
``marks``, ``xoff_sent`` (refreshes included), ``xon_sent``, ``pfc_rx``, ``pause_rx``,
``max_depth`` (of each egress queue), ``max_usage`` (of each ingress priority group), and the
single numbers ``no_route``, ``malformed`` (shorter than an Ethernet header), ``oversize``
(longer than ``max_frame``), ``ctrl_bad``, ``ctrl_ignored``, ``max_buffer`` (shared buffer).
:attr:`Switch.pfc_log` lists ``(time, port, priority, "xoff" | "refresh" | "xon", bytes of the
group)``. With ``sample_ns``, :attr:`Switch.samples` holds ``(time, depths)`` every ``sample_ns``
from 0, ``depths[port][priority]`` the queue depths after everything before that time.
"""

import heapq
import itertools
import math
import random
from collections import deque
from typing import NamedTuple

from rocegen.sim.models.net.checksum import be_words, ones_complement_sum
from rocegen.wire import headers as H
from rocegen.wire import pfc as P

__all__ = ["Switch", "Departure", "PacedSender", "run", "wire_bytes", "line_ns", "pfc_headroom",
           "FCS_LEN", "PREAMBLE_IFG", "LINE_OVERHEAD", "NUM_PRIORITIES",
           "ECN_NOT_ECT", "ECN_ECT1", "ECN_ECT0", "ECN_CE"]

FCS_LEN = 4
#: preamble and start-of-frame delimiter 8, inter-frame gap 12
PREAMBLE_IFG = 8 + 12
#: line bytes of a frame beyond its bytes without FCS
LINE_OVERHEAD = P.LINE_OVERHEAD
NUM_PRIORITIES = P.NUM_PRIORITIES
ECN_NOT_ECT, ECN_ECT1, ECN_ECT0, ECN_CE = 0, 1, 2, 3
_VLAN_TPIDS = (H.ETHERTYPE_VLAN, 0x88A8)
_TX_END, _RESUME, _REFRESH = range(3)


#: Bytes of line time of a frame of ``length`` bytes without FCS (padded to 60): the wire
#: layer's :func:`rocegen.wire.pfc.line_bytes`.
wire_bytes = P.line_bytes


def line_ns(length, rate_gbps):
    """Nanoseconds a frame of ``length`` bytes (without FCS) takes on a line of ``rate_gbps``."""
    return wire_bytes(length) * 8 / rate_gbps


#: Headroom in bytes that a priority group needs so that no frame is lost after its XOFF (the
#: wire layer's :func:`rocegen.wire.pfc.headroom_bytes`, which the gateware's thresholds use
#: too): the frames arriving while the XOFF waits for the frame on the egress line, goes out,
#: crosses the cable, the sender reacts (``response_ns``) and finishes the frame it started;
#: plus one frame partly received when the XOFF was decided.
pfc_headroom = P.headroom_bytes


class Departure(NamedTuple):
    """A frame leaving an egress port: its first bit at ``start``, its last at ``end`` (ns).
    ``kind`` is ``"data"`` (forwarded from ``ingress`` in ``priority``) or ``"control"`` (a PFC
    frame of the switch; ``priority`` and ``ingress`` None). ``marked``: the switch set CE."""
    port: int
    frame: bytes
    start: float
    end: float
    priority: int | None
    ingress: int | None
    kind: str
    marked: bool


# ---- parameter checks ----

def _int(name, value, minimum, maximum=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        top = "" if maximum is None else f"..{maximum}"
        raise ValueError(f"{name} must be {minimum}{top if top else ' or more'}, not {value}")
    return value


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise TypeError(f"{name} must be a number, not {value!r}")
    return value


def _positive(name, value):
    if not _number(name, value) > 0 or math.isinf(value):
        raise ValueError(f"{name} must be positive and finite, not {value}")
    return value


def _nonneg(name, value):
    if not _number(name, value) >= 0 or math.isinf(value):
        raise ValueError(f"{name} must be non-negative and finite, not {value}")
    return value


def _priorities(name, value):
    try:
        prios = frozenset(value)
    except TypeError:
        raise TypeError(f"{name} must be an iterable of priorities, not {value!r}") from None
    for p in prios:
        _int(f"{name} priority", p, 0, NUM_PRIORITIES - 1)
    return prios


# ---- internal state ----

class _Entry:
    __slots__ = ("frame", "length", "ingress", "prio", "marked")

    def __init__(self, frame, ingress, prio, marked):
        self.frame, self.length, self.ingress = frame, len(frame), ingress
        self.prio, self.marked = prio, marked


class _Queue:
    """One egress priority queue: a FIFO per ingress port, served deficit round robin."""
    __slots__ = ("sub", "ring", "deficit", "fresh", "bytes")

    def __init__(self):
        self.sub = {}           # ingress port -> deque of entries
        self.ring = deque()     # ingress ports with frames waiting, the one served first
        self.deficit = {}
        self.fresh = True       # the first of the ring has not had its quantum for this turn
        self.bytes = 0          # depth: frames waiting and the one on the line

    def push(self, entry):
        fifo = self.sub.setdefault(entry.ingress, deque())
        if not fifo:
            self.ring.append(entry.ingress)
            self.deficit[entry.ingress] = 0
        fifo.append(entry)
        self.bytes += entry.length

    def pop(self, quantum):
        while True:
            port = self.ring[0]
            if self.fresh:
                self.deficit[port] += quantum
                self.fresh = False
            fifo = self.sub[port]
            if fifo[0].length <= self.deficit[port]:
                entry = fifo.popleft()
                self.deficit[port] -= entry.length
                if not fifo:
                    self.ring.popleft()
                    self.deficit[port] = 0
                    self.fresh = True
                return entry
            self.ring.rotate(-1)
            self.fresh = True


class _Egress:
    __slots__ = ("rate", "queues", "ctrl", "busy", "busy_start", "line_free", "period_start",
                 "period_bits", "paused_until")

    def __init__(self, rate):
        self.rate = rate
        self.queues = [_Queue() for _ in range(NUM_PRIORITIES)]
        self.ctrl = deque()
        self.busy = None                # the entry (or control frame) on the line
        self.busy_start = 0
        self.line_free = None           # when the last frame's last bit left
        self.period_start = 0           # start of the current back-to-back run of frames
        self.period_bits = 0            # and its bits so far: ends come from one division
        self.paused_until = [0] * NUM_PRIORITIES


class _Group:
    """An ingress port's frames of one lossless priority."""
    __slots__ = ("shared", "headroom", "xoff", "generation")

    def __init__(self):
        self.shared = self.headroom = 0
        self.xoff = False
        self.generation = 0             # refresh events of an older XOFF are stale


class Switch:
    """An output-queued switch (see the module documentation). All parameters after ``ports``
    are keyword-only.

    Parameters
    ----------
    ports : sequence of numbers
        The line rate of each port in Gb/s.
    route : mapping or callable
        ``{destination MAC: egress port}`` (MACs as integers, ``aa:bb:..`` text or 6 bytes), or
        ``route(frame, ingress) -> egress port or None``.
    buffer : int
        Bytes of the shared buffer.
    queue_limit : int or None
        Most bytes of one egress queue of a lossy priority.
    ecn : bool
        Marking on or off; ``kmin``, ``kmax`` (bytes, ``kmin <= kmax``), ``pmax`` (0..1) and
        ``ecn_priorities`` (default all) as described above.
    pfc : iterable of int
        Lossless priorities (empty: PFC off).
    xoff, xon : int
        Bytes of a priority group above which XOFF and at or below which (its headroom empty)
        XON is sent (``xon <= xoff``; ``xon`` defaults to ``xoff // 2``). ``xoff`` is required
        with PFC.
    headroom : int or None
        Bytes of headroom of each priority group (default :func:`pfc_headroom` of the port's
        rate and ``max_frame`` with no cable).
    pause_quanta : int
        Pause time of the XOFF frames (1..65535).
    link_pause : bool
        Obey 802.3x PAUSE frames (only without PFC).
    classify : str
        ``"pcp"`` or ``"dscp"``, with ``dscp_map`` and ``default_priority``.
    quantum : int
        Bytes per turn of the round robin between ingress ports.
    max_frame : int
        Longest frame accepted, bytes without FCS (9234: an IP MTU of 9216 and a VLAN tag).
    mac : MAC address
        Source of the PFC frames the switch sends.
    sample_ns : number or None
        Period of :attr:`samples`.
    seed : int
        Seed of the marking decisions.
    """

    def __init__(self, ports, *, route, buffer=1 << 20, queue_limit=None, ecn=True, kmin=5_000,
                 kmax=200_000, pmax=0.01, ecn_priorities=None, pfc=(), xoff=None, xon=None,
                 headroom=None, pause_quanta=P.MAX_QUANTA, link_pause=False, classify="pcp",
                 dscp_map=None, default_priority=0, quantum=1500, max_frame=9234,
                 mac=0x02_00_00_00_00_FE, sample_ns=None, seed=0, name=""):
        try:
            rates = [_positive(f"ports[{n}]", r) for n, r in enumerate(ports)]
        except TypeError as e:
            if isinstance(ports, (list, tuple)):
                raise
            raise TypeError(f"ports must be a sequence of line rates in Gb/s, not {ports!r}") \
                from e
        if not rates:
            raise ValueError("ports must name at least one port")
        self.num_ports = len(rates)
        self.rates = rates
        self._route_fn = None
        self._table = None
        if callable(route):
            self._route_fn = route
        elif hasattr(route, "items"):
            self._table = {}
            for mac_, port in route.items():
                self._table[P.mac_address(mac_, "route MAC")] = self._port(port, "route port")
        else:
            raise TypeError(f"route must be a mapping {{MAC: port}} or a function of (frame, "
                            f"ingress), not {route!r}")
        self.buffer = _int("buffer", buffer, 0)
        self.queue_limit = None if queue_limit is None else _int("queue_limit", queue_limit, 0)
        if not isinstance(ecn, bool):
            raise TypeError(f"ecn must be True or False, not {ecn!r}")
        self.ecn = ecn
        self.kmin = _int("kmin", kmin, 0)
        self.kmax = _int("kmax", kmax, kmin)
        if isinstance(pmax, bool) or not isinstance(pmax, (int, float)) or not 0 <= pmax <= 1:
            raise ValueError(f"pmax must be a probability in [0, 1], not {pmax!r}")
        self.pmax = float(pmax)
        self.ecn_priorities = frozenset(range(NUM_PRIORITIES)) if ecn_priorities is None else \
            _priorities("ecn_priorities", ecn_priorities)
        self.pfc = _priorities("pfc", pfc)
        self.max_frame = _int("max_frame", max_frame, H.ETH.length)
        if self.pfc:
            if xoff is None:
                raise ValueError("xoff (bytes of a priority group that trigger XOFF) is required "
                                 "with pfc")
            self.xoff = _int("xoff", xoff, 0)
            self.xon = self.xoff // 2 if xon is None else _int("xon", xon, 0, self.xoff)
            if headroom is None:
                self.headroom = [pfc_headroom(r, self.max_frame) for r in rates]
            else:
                self.headroom = [_int("headroom", headroom, 0)] * len(rates)
        else:
            for pname, value in (("xoff", xoff), ("xon", xon), ("headroom", headroom)):
                if value is not None:
                    raise ValueError(f"{pname} is a PFC setting: give pfc (the lossless "
                                     "priorities) with it")
            self.xoff = self.xon = None
            self.headroom = [0] * len(rates)
        self.pause_quanta = _int("pause_quanta", pause_quanta, 1, P.MAX_QUANTA)
        if not isinstance(link_pause, bool):
            raise TypeError(f"link_pause must be True or False, not {link_pause!r}")
        if link_pause and self.pfc:
            raise ValueError("link_pause and pfc exclude each other (a link uses 802.3x PAUSE "
                             "or PFC, not both)")
        self.link_pause = link_pause
        if classify not in ("pcp", "dscp"):
            raise ValueError(f"classify must be 'pcp' or 'dscp', not {classify!r}")
        self.classify = classify
        self.default_priority = _int("default_priority", default_priority, 0, NUM_PRIORITIES - 1)
        self._dscp = self._dscp_table(dscp_map)
        self.quantum = _int("quantum", quantum, 1)
        self.mac = P.mac_address(mac, "mac")
        self.sample_ns = None if sample_ns is None else _positive("sample_ns", sample_ns)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an integer, not {seed!r}")
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, not {name!r}")
        self.seed, self.name = seed, name

        n = self.num_ports
        self._rng = random.Random(seed)
        self._eg = [_Egress(r) for r in rates]
        self._groups = [[_Group() for _ in range(NUM_PRIORITIES)] for _ in range(n)]
        self._shared = 0
        self._events = []
        self._order = itertools.count()
        self._out = []
        self._now = 0
        self._samples_taken = 0
        self.samples = []
        self.pfc_log = []
        per_port = lambda: [0] * n                                   # noqa: E731
        per_prio = lambda: [[0] * NUM_PRIORITIES for _ in range(n)]  # noqa: E731
        self.counters = {
            "rx_frames": per_port(), "rx_bytes": per_port(),
            "tx_frames": per_port(), "tx_bytes": per_port(), "tx_control": per_port(),
            "busy_ns": per_port(),
            "drops": per_prio(), "headroom_drops": per_prio(), "ect": per_prio(),
            "marks": per_prio(), "xoff_sent": per_prio(), "xon_sent": per_prio(),
            "pfc_rx": per_port(), "pause_rx": per_port(),
            "max_depth": per_prio(), "max_usage": per_prio(),
            "no_route": 0, "malformed": 0, "oversize": 0, "ctrl_bad": 0, "ctrl_ignored": 0,
            "max_buffer": 0,
        }

    def __repr__(self):
        return f"Switch({self.name!r}, {self.num_ports} ports)"

    def _dscp_table(self, dscp_map):
        if dscp_map is None:
            return [d >> 3 for d in range(64)]
        if hasattr(dscp_map, "items"):
            table = [self.default_priority] * 64
            for d, p in dscp_map.items():
                table[_int("dscp_map DSCP", d, 0, 63)] = _int(f"dscp_map[{d}]", p, 0,
                                                             NUM_PRIORITIES - 1)
            return table
        if isinstance(dscp_map, (list, tuple)) and len(dscp_map) == 64:
            return [_int(f"dscp_map[{d}]", p, 0, NUM_PRIORITIES - 1)
                    for d, p in enumerate(dscp_map)]
        raise TypeError(f"dscp_map must be a mapping {{DSCP: priority}} or a sequence of 64 "
                        f"priorities, not {dscp_map!r}")

    def _port(self, port, what="port"):
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < self.num_ports:
            raise ValueError(f"{what} must be a port number 0..{self.num_ports - 1}, not {port!r}")
        return port

    def _time(self, now):
        if isinstance(now, bool) or not isinstance(now, (int, float)) or math.isnan(now):
            raise TypeError(f"switch {self.name!r}: the time must be a number of ns, not {now!r}")
        if now < self._now:
            raise ValueError(f"switch {self.name!r}: time {now} is before time {self._now}, "
                             "already seen")
        return now

    # ---- state the caller may look at ----

    def depth(self, port, prio):
        """Bytes in the egress queue ``prio`` of ``port`` (the frame on the line included)."""
        return self._eg[port].queues[prio].bytes

    def usage(self, port, prio):
        """Bytes buffered from ingress ``port`` in lossless priority ``prio`` (headroom too)."""
        g = self._groups[port][prio]
        return g.shared + g.headroom

    def in_xoff(self, port, prio):
        """Whether the switch holds the sender on ``port`` paused in ``prio``."""
        return self._groups[port][prio].xoff

    def paused_until(self, port, prio):
        """Until when the egress queue ``prio`` of ``port`` is paused by a received PFC."""
        return self._eg[port].paused_until[prio]

    @property
    def buffer_used(self):
        """Bytes of the shared buffer in use."""
        return self._shared

    def total(self, name):
        """The sum of a counter over its ports (and priorities)."""
        value = self.counters[name]
        if isinstance(value, int):
            return value
        return sum(sum(v) if isinstance(v, list) else v for v in value)

    def depth_series(self, port, prio):
        """``[(time, bytes)]`` of one egress queue from :attr:`samples`."""
        return [(t, d[port][prio]) for t, d in self.samples]

    # ---- time ----

    def next_due(self):
        """When the next thing happens in the switch (a frame's last bit leaving, a pause
        ending, an XOFF refresh), ``None`` while nothing is pending."""
        events = self._events
        while events and self._stale(events[0]):
            heapq.heappop(events)
        return events[0][0] if events else None

    def _stale(self, event):
        """A pause end moved by a later pause frame, a refresh of an XOFF that has ended."""
        t, _, kind, port, prio, gen = event
        if kind == _RESUME:
            return self._eg[port].paused_until[prio] != t
        if kind == _REFRESH:
            g = self._groups[port][prio]
            return not g.xoff or g.generation != gen
        return False

    def due(self, now):
        """The frames whose last bit left an egress port at or before ``now`` (ns), as
        :class:`Departure` records in the order they ended."""
        self._run(self._time(now))
        out, self._out = self._out, []
        return out

    def _push(self, t, kind, port, prio=0, gen=0):
        heapq.heappush(self._events, (t, next(self._order), kind, port, prio, gen))

    def _run(self, until):
        events = self._events
        while events and events[0][0] <= until:
            event = heapq.heappop(events)
            if self._stale(event):
                continue
            t, _, kind, port, prio, _ = event
            self._sample(t)
            self._now = t
            if kind == _TX_END:
                self._tx_end(port, t)
            elif kind == _RESUME:
                self._try_start(port, t)
            else:
                self._send_pfc(port, prio, t, xoff=True, refresh=True)
        self._sample(until)
        self._now = until

    def _sample(self, t):
        """Record the samples due at or before ``t`` (before anything happening at ``t``)."""
        if self.sample_ns is None:
            return
        while self._samples_taken * self.sample_ns <= t:
            depths = tuple(tuple(q.bytes for q in eg.queues) for eg in self._eg)
            self.samples.append((self._samples_taken * self.sample_ns, depths))
            self._samples_taken += 1

    # ---- frames in ----

    def receive(self, port, frame, now):
        """Frame ``frame`` (bytes, no FCS) has fully arrived on ingress ``port`` at ``now``."""
        self._port(port)
        if not isinstance(frame, (bytes, bytearray, memoryview)):
            raise TypeError(f"switch {self.name!r}: a frame is bytes, not {type(frame).__name__}")
        t = self._time(now)
        self._run(t)
        frame = bytes(frame)
        c = self.counters
        c["rx_frames"][port] += 1
        c["rx_bytes"][port] += len(frame)
        if len(frame) < H.ETH.length:
            c["malformed"] += 1
            return
        if len(frame) > self.max_frame:
            c["oversize"] += 1
            return
        eth = H.ETH.unpack(frame)
        if eth["ethertype"] == P.ETHERTYPE_MAC_CONTROL:
            self._control(port, frame, eth, t)
            return
        if self._route_fn is not None:
            egress = self._route_fn(frame, port)
            if egress is not None:
                self._port(egress, "the port route() returned")
        else:
            egress = self._table.get(eth["dst"])
        if egress is None:
            c["no_route"] += 1
            return
        prio, ip = self._classify(frame, eth["ethertype"])
        u = self._rng.random()
        if not self._admit(port, prio, egress, len(frame), t):
            return
        queue = self._eg[egress].queues[prio]
        marked = False
        if ip is not None and ip[2] in (ECN_ECT0, ECN_ECT1):
            c["ect"][egress][prio] += 1
            if self.ecn and prio in self.ecn_priorities and u < self._mark_probability(queue.bytes):
                frame = self._mark(frame, ip)
                marked = True
                c["marks"][egress][prio] += 1
        queue.push(_Entry(frame, port, prio, marked))
        mx = c["max_depth"][egress]
        mx[prio] = max(mx[prio], queue.bytes)
        self._try_start(egress, t)

    def _mark_probability(self, depth):
        if depth <= self.kmin:
            return 0.0
        if depth > self.kmax:
            return 1.0
        return self.pmax * (depth - self.kmin) / (self.kmax - self.kmin)

    def _classify(self, frame, ethertype):
        """``(priority, ip)``: ``ip`` is ``(version, offset, ecn)`` of an IP packet, or None."""
        off = H.ETH.length
        pcp = None
        while ethertype in _VLAN_TPIDS and len(frame) >= off + H.VLAN.length:
            tag = H.VLAN.unpack(frame[off:])
            if pcp is None:
                pcp = tag["pcp"]
            ethertype = tag["ethertype"]
            off += H.VLAN.length
        ip = dscp = None
        if ethertype == H.ETHERTYPE_IPV4 and len(frame) >= off + H.IPV4.length:
            hdr = H.IPV4.unpack(frame[off:])
            if hdr["version"] == 4 and hdr["ihl"] >= 5:
                ip, dscp = (4, off, hdr["ecn"]), hdr["dscp"]
        elif ethertype == H.ETHERTYPE_IPV6 and len(frame) >= off + H.IPV6.length:
            hdr = H.IPV6.unpack(frame[off:])
            if hdr["version"] == 6:
                ip, dscp = (6, off, hdr["traffic_class"] & 3), hdr["traffic_class"] >> 2
        if self.classify == "pcp":
            prio = self.default_priority if pcp is None else pcp
        else:
            prio = self.default_priority if dscp is None else self._dscp[dscp]
        return prio, ip

    @staticmethod
    def _mark(frame, ip):
        """The frame with its ECN field set to CE (the IPv4 checksum updated, RFC 1624 eqn. 3)."""
        version, off, _ = ip
        if version == 4:
            raw = frame[off:off + H.IPV4.length]
            hdr = H.IPV4.unpack(raw)
            new = H.IPV4.pack(**dict(hdr, ecn=ECN_CE))
            old_word, new_word = be_words(raw[:2])[0], be_words(new[:2])[0]
            checksum = ~ones_complement_sum([~hdr["checksum"] & 0xFFFF, ~old_word & 0xFFFF,
                                             new_word]) & 0xFFFF
            new = H.IPV4.pack(**dict(hdr, ecn=ECN_CE, checksum=checksum))
            return frame[:off] + new + frame[off + H.IPV4.length:]
        raw = frame[off:off + H.IPV6.length]
        hdr = H.IPV6.unpack(raw)
        new = H.IPV6.pack(**dict(hdr, traffic_class=hdr["traffic_class"] | ECN_CE))
        return frame[:off] + new + frame[off + H.IPV6.length:]

    def _admit(self, port, prio, egress, length, t):
        """Charge a frame to the buffer; False if it is dropped."""
        c = self.counters
        if prio not in self.pfc:
            queue = self._eg[egress].queues[prio]
            if self._shared + length > self.buffer or (
                    self.queue_limit is not None and queue.bytes + length > self.queue_limit):
                c["drops"][egress][prio] += 1
                return False
            self._take_shared(length)
            return True
        g = self._groups[port][prio]
        if not g.xoff and self._shared + length <= self.buffer:
            headroom = False
            self._take_shared(length)
            g.shared += length
        elif g.headroom + length <= self.headroom[port]:
            headroom = True
            g.headroom += length
        else:
            c["headroom_drops"][port][prio] += 1
            return False
        used = g.shared + g.headroom
        mx = c["max_usage"][port]
        mx[prio] = max(mx[prio], used)
        if not g.xoff and (headroom or used > self.xoff):
            self._send_pfc(port, prio, t, xoff=True)
        return True

    def _take_shared(self, length):
        self._shared += length
        self.counters["max_buffer"] = max(self.counters["max_buffer"], self._shared)

    def _release(self, entry, t):
        if entry.prio not in self.pfc:
            self._shared -= entry.length
            return
        g = self._groups[entry.ingress][entry.prio]
        from_headroom = min(entry.length, g.headroom)     # a group's headroom empties first
        g.headroom -= from_headroom
        g.shared -= entry.length - from_headroom
        self._shared -= entry.length - from_headroom
        if g.xoff and g.headroom == 0 and g.shared <= self.xon:
            self._send_pfc(entry.ingress, entry.prio, t, xoff=False)

    # ---- PFC ----

    def _send_pfc(self, port, prio, t, *, xoff, refresh=False):
        g = self._groups[port][prio]
        g.generation += 1
        g.xoff = xoff
        quanta = self.pause_quanta if xoff else 0
        self._eg[port].ctrl.append(P.pfc_frame(self.mac, {prio: quanta}))
        self.counters["xoff_sent" if xoff else "xon_sent"][port][prio] += 1
        self.pfc_log.append((t, port, prio, ("refresh" if refresh else "xoff") if xoff else "xon",
                             g.shared + g.headroom))
        if xoff:
            half = P.quanta_ns(self.pause_quanta, self.rates[port]) / 2
            self._push(t + half, _REFRESH, port, prio, g.generation)
        self._try_start(port, t)

    def _control(self, port, frame, eth, t):
        c = self.counters
        try:
            f = P.parse(frame)
        except P.MacControlError:
            c["ctrl_bad"] += 1
            return
        if eth["dst"] not in (P.PAUSE_DST, self.mac):
            c["ctrl_ignored"] += 1
            return
        if isinstance(f, P.PfcFrame):
            c["pfc_rx"][port] += 1
            classes = {p: q for p, q in f.classes.items() if p in self.pfc}
        else:
            c["pause_rx"][port] += 1
            classes = dict.fromkeys(range(NUM_PRIORITIES), f.time) if self.link_pause else {}
        if not classes:
            c["ctrl_ignored"] += 1
            return
        eg = self._eg[port]
        for prio, quanta in classes.items():
            eg.paused_until[prio] = t + P.quanta_ns(quanta, eg.rate)
            if quanta:
                self._push(eg.paused_until[prio], _RESUME, port, prio)
        self._try_start(port, t)

    # ---- egress ----

    def _try_start(self, port, t):
        eg = self._eg[port]
        if eg.busy is not None:
            return
        if eg.ctrl:
            self._start(port, eg.ctrl.popleft(), t)
            return
        for prio in range(NUM_PRIORITIES - 1, -1, -1):
            queue = eg.queues[prio]
            if queue.ring and eg.paused_until[prio] <= t:
                self._start(port, queue.pop(self.quantum), t)
                return

    def _start(self, port, item, t):
        eg = self._eg[port]
        length = len(item) if isinstance(item, bytes) else item.length
        bits = wire_bytes(length) * 8
        if eg.line_free == t:
            eg.period_bits += bits
        else:
            eg.period_start, eg.period_bits = t, bits
        end = eg.period_start + eg.period_bits / eg.rate
        eg.line_free = end
        eg.busy, eg.busy_start = item, t
        self.counters["busy_ns"][port] += end - t
        self._push(end, _TX_END, port)

    def _tx_end(self, port, t):
        eg = self._eg[port]
        item, eg.busy = eg.busy, None
        c = self.counters
        if isinstance(item, bytes):
            c["tx_control"][port] += 1
            self._out.append(Departure(port, item, eg.busy_start, t, None, None, "control", False))
        else:
            eg.queues[item.prio].bytes -= item.length
            c["tx_frames"][port] += 1
            c["tx_bytes"][port] += item.length
            self._out.append(Departure(port, item.frame, eg.busy_start, t, item.prio,
                                       item.ingress, "data", item.marked))
            self._release(item, t)
        self._try_start(port, t)


class PacedSender:
    """A source of frames at a constant rate on its own line, which obeys the PFC (for its
    ``priority``) and PAUSE frames it receives.

    Frame ``k`` (``frames(k)``, or the same ``frames`` bytes each time) starts when the rate
    allows (start times ``wire_bytes * 8 / rate_gbps`` apart from ``start_ns`` on) and the
    line is free; the line sends it at ``line_gbps``. A pause frame received at ``t`` stops
    frames from starting from ``t + response_ns`` for its time in quanta at ``line_gbps``
    (0: resume at ``t + response_ns``); a frame already started finishes. After a pause the
    rate starts again from its end (no catching up). ``count`` frames (``None``: no end).
    :attr:`counters`: ``frames``, ``bytes``, ``pfc_rx`` (pause frames obeyed), ``rx_other``;
    ``paused_ns``: time frames were held back by pauses.
    """

    def __init__(self, frames, *, rate_gbps=100, line_gbps=100, priority=0, count=None,
                 start_ns=0, response_ns=0, name=""):
        if not callable(frames) and not isinstance(frames, (bytes, bytearray)):
            raise TypeError(f"frames must be bytes or a function of the frame number, "
                            f"not {frames!r}")
        self._frames = frames if callable(frames) else (lambda _k, f=bytes(frames): f)
        self.line = _positive("line_gbps", line_gbps)
        self.rate = _positive("rate_gbps", rate_gbps)
        if self.rate > self.line:
            raise ValueError(f"rate_gbps ({rate_gbps}) must not exceed line_gbps ({line_gbps})")
        self.priority = _int("priority", priority, 0, NUM_PRIORITIES - 1)
        self.count = None if count is None else _int("count", count, 0)
        self.response_ns = _nonneg("response_ns", response_ns)
        self.name = name
        self.counters = {"frames": 0, "bytes": 0, "pfc_rx": 0, "rx_other": 0}
        self.paused_ns = 0
        self._epoch = _nonneg("start_ns", start_ns)     # rate schedule: epoch + bits / rate
        self._bits = 0
        self._line_free = 0
        self._pauses = []                               # [start, end) sorted, disjoint

    def next_start(self):
        """When the next frame starts, ``None`` after the last."""
        if self.count is not None and self.counters["frames"] >= self.count:
            return None
        t = max(self._epoch + self._bits / self.rate, self._line_free)
        while self._pauses and self._pauses[0][1] <= t:  # over before the frame is due
            self._pauses.pop(0)
        for start, end in self._pauses:
            if start <= t < end:
                t = end
        return t

    def emit(self):
        """Send the next frame: ``(frame, start, end)``, its first and last bit's times."""
        t = self.next_start()
        if t is None:
            raise ValueError(f"sender {self.name!r} has sent its {self.count} frames")
        scheduled = max(self._epoch + self._bits / self.rate, self._line_free)
        if t > scheduled:                               # held back by a pause
            self.paused_ns += t - scheduled
            self._epoch, self._bits = t, 0
        frame = bytes(self._frames(self.counters["frames"]))
        bits = wire_bytes(len(frame)) * 8
        self._bits += bits
        end = t + bits / self.line
        self._line_free = end
        self.counters["frames"] += 1
        self.counters["bytes"] += len(frame)
        return frame, t, end

    def receive(self, frame, now):
        """A frame from the switch arrives at ``now``: pause frames act, others are counted."""
        try:
            f = P.parse(frame)
        except P.MacControlError:
            self.counters["rx_other"] += 1
            return
        if isinstance(f, P.PfcFrame):
            if self.priority not in f.classes:
                self.counters["rx_other"] += 1
                return
            quanta = f.classes[self.priority]
        else:
            quanta = f.time
        self.counters["pfc_rx"] += 1
        at = now + self.response_ns
        last = self._pauses[-1] if self._pauses else None
        if quanta:
            end = at + P.quanta_ns(quanta, self.line)
            if last is not None and last[0] <= at < last[1]:
                last[1] = end                           # a new pause time replaces the timer
            else:
                self._pauses.append([at, end])
        elif last is not None and at < last[1]:
            last[1] = max(last[0], at)                  # resume


_PFC_IN, _ARRIVE, _START = range(3)


def run(switch, senders, *, until=None, cable_ns=0):
    """Join :class:`PacedSender` sources to a switch and run them: ``senders`` maps an ingress
    port to its sender; every frame crosses a cable of ``cable_ns`` each way. The frames the
    switch sends to a sender's port reach the sender (its pause frames act); the others are
    returned: ``{port: [(arrival time, Departure)]}`` (every port, data frames to senders'
    ports included). Runs until ``until`` (ns), or with ``until=None`` until every sender has
    sent its ``count`` frames and the switch is empty. At equal times the switch goes first,
    then pause frames reaching senders, frames reaching the switch, senders starting frames."""
    for port, sender in senders.items():
        switch._port(port, "senders port")
        if not isinstance(sender, PacedSender):
            raise TypeError(f"senders[{port}] must be a PacedSender, not {sender!r}")
        if until is None and sender.count is None:
            raise ValueError(f"senders[{port}] has no count: give until")
    _nonneg("cable_ns", cable_ns)
    heap = []
    order = itertools.count()
    generation = dict.fromkeys(senders, 0)
    delivered = {p: [] for p in range(switch.num_ports)}

    def schedule(port):
        generation[port] += 1
        t = senders[port].next_start()
        if t is not None:
            heapq.heappush(heap, (t, _START, next(order), port, generation[port]))

    for port in senders:
        schedule(port)
    while True:
        t_switch = switch.next_due()
        t_event = heap[0][0] if heap else None
        t = min((x for x in (t_switch, t_event) if x is not None), default=None)
        if t is None or (until is not None and t > until):
            break
        if t_switch is not None and t_switch == t:
            for d in switch.due(t):
                if d.port in senders and d.kind == "control":
                    heapq.heappush(heap, (d.end + cable_ns, _PFC_IN, next(order), d.port, d.frame))
                else:
                    delivered[d.port].append((d.end + cable_ns, d))
            continue
        t, kind, _, port, arg = heapq.heappop(heap)
        if kind == _PFC_IN:
            senders[port].receive(arg, t)
            schedule(port)
        elif kind == _ARRIVE:
            switch.receive(port, arg, t)
        elif arg == generation[port]:
            frame, _, end = senders[port].emit()
            heapq.heappush(heap, (end + cable_ns, _ARRIVE, next(order), port, frame))
            schedule(port)
    if until is not None:
        for d in switch.due(until):
            delivered[d.port].append((d.end + cable_ns, d))
    return delivered
