"""The host agent: holds the host's QPs and memory for as long as they are open, and answers the
``rocegen-host`` commands over a Unix socket.

A QP lives in the process that created it (as with verbs), so ``rocegen-host connect`` starts
this agent in the background; later commands (``status``, ``traffic``, ``recv``, ``write``,
``send``, ``read``, ``atomic``, ``close``) talk to it through ``STATE_DIR/agent.sock`` with one
JSON request per connection and JSON lines in answer (``recv`` sends progress lines, then its
result). The agent exits when its last QP is closed, on ``shutdown``, or on SIGTERM/SIGINT.

QPs are opened with OPEN_QP over the connection manager's UDP port, or through the InfiniBand
CM (``connect --rdma-cm``, :meth:`Agent.open` with ``rdma_cm``): the NIC connects as
librdmacm's ``rdma_connect`` does, the FPGA's REP names its memory region in its private data,
and closing is ``rdma_disconnect``. Such a QP takes the host's own WRITEs, READs, SENDs and
atomics (the connection manager's QUERY still gives the FPGA's verdict), but not the FPGA's
traffic generator, which works on the host memory OPEN_QP names (a REQ names none).

Memory: each QP has one region of ``2 * window + recv_depth * recv_size`` bytes: the first
``window`` bytes (a power of two) are where the FPGA's WRITEs go and what its READs read (a
message may run up to ``window`` bytes past it), then the receive buffers for SENDs and WRITEs
with immediate.

Checking a run of the FPGA's traffic generator (message ``s`` carries the test pattern of local
address ``(s mod 64) << 26``, :mod:`rocegen.wire.pattern`; its WRITE goes to remote offset
``(s * size) mod window``; immediate data is the FPGA's QP number):

* SEND / SEND with immediate: every receive completion is checked as it comes (length, data,
  immediate);
* WRITE with immediate: every completion is checked (length, immediate), then the memory;
* WRITE: there is no completion on the host, so the memory is watched: message ``s`` counts once
  its bytes are in place (while the run fits in the window), or the run counts as done once the
  whole window holds what the last messages leave there (a run longer than the window).
* READ (an FPGA with the READ requester and the pattern sink): message ``s`` READs ``size``
  bytes at offset ``(s * size) mod window`` of the host's memory into the FPGA's local memory at
  that same offset, so the agent first fills those bytes with the test pattern of the local
  addresses they land at (the pattern of address ``offset``); the FPGA's pattern sink checks
  every byte a READ response writes, and the run is checked over the connection manager's
  QUERY: done once the sink has counted the run's ``count * size`` bytes, good when it found
  none wrong (message ``s`` counts as checked once ``(s + 1) * size`` bytes are). The window of
  a READ run is at most the FPGA's region (the largest power of two in its length): the local
  addresses must be inside its memory.
* FETCH_ADD / COMPARE_SWAP (an FPGA built with ``--atomics``; size 8): message ``s`` is an atomic
  on the 8 bytes at offset ``8 s mod (8 * targets)`` of the QP's memory (:data:`rocegen.wire.cm.
  TX_ATOMIC`: a FETCH_ADD adds 1, the COMPARE_SWAP of message ``s`` swaps in ``s + 1`` where it
  finds ``s``). The agent zeroes the targets before the run's datagram goes and watches them:
  the run is done when each holds what the plain-Python model of the run says
  (:func:`rocegen.wire.atomic_runs.generator_run`), wrong when one went past it, and given up when
  none changed for its stall time (an FPGA built without atomics refuses each request: nothing
  changes, and the error says so; an FPGA without the READ requester, which states no READ
  depths in OPEN_QP, is refused at once).

The host's own WRITEs and SENDs into the FPGA (:meth:`Agent.write`, :meth:`Agent.send`; an FPGA
with the RC responder): the OPEN_QP reply named each QP's region on the FPGA (R_Key, base,
length). Message ``k`` of a WRITE run goes to FPGA address ``base + (k mod n) * size`` (``n``
messages fit in the region) and carries the test pattern of that address; every SEND carries the
pattern of the FPGA address its receive buffer starts at (``at``: default the region's base,
where ``rocegen sim serve`` posts its buffers). The messages are staged in the first ``window``
bytes of the QP's memory, one slot each while it is outstanding (a run is refused while a
traffic run uses them). The FPGA's pattern sink checks every byte written against the pattern of
its address: the connection manager's QUERY before the run and after its last completion (asked
again until the counters have taken every byte, or a few times) gives the bytes checked and the
bytes wrong of the run: the FPGA's own byte-exact verdict. A READ run (:meth:`Agent.read`) reads
the same addresses a WRITE run of the same size writes (message ``k`` from ``base + (k mod n) *
size``) into the staging slots, and the agent checks every byte against the test pattern of the
FPGA address it came from (what the host's WRITEs, or the FPGA itself, left there).

READ depths: the host states its own in OPEN_QP (the NIC's :meth:`read_limits`), and its QP keeps
at most as many READs outstanding as the FPGA's ACK says it accepts (``rd_depth``; 0, an FPGA
that does not state it: 1), and accepts as many as it stated.

Atomics (:meth:`Agent.atomic`, an FPGA built with ``--atomics``): the contended counter of
:mod:`rocegen.host.counter` on one 8-byte target in the FPGA's region, every selected QP at
once, READ before and after; the atomics count against the QP's READ limit on the wire. The
host's QPs and regions also take atomics (remote atomic access, when the NIC offers them), and
:meth:`Agent.fpga_atomics` (``atomic --direction fpga-to-host``) has the FPGA's traffic
generator run them on one counter in the host's memory from every selected QP in turn (the other
QPs pointed at it with SEND_QP_INFO), then READs the originals of the last run back from the
FPGA's memory. The connection manager's format has no byte that says whether the FPGA executes
atomics: an FPGA built without them answers the host's first with NAK invalid request, and the
QP goes to the error state; it refuses its generator's, which change nothing in the host's
memory.

Rates (:meth:`TrafficRun.summary`): ``seconds``/``gbps``/``mmsgs`` are measured on the wall
clock, from sending the run's datagram to its last message checked. When the NIC knows the
FPGA's own time (the simulated NIC: the simulation's frames carry their core-clock cycles,
:mod:`rocegen.wire.simwire`), ``fpga_*`` give the same in the FPGA's time: ``fpga_cycles`` from
the first beat of the run's first data frame on the FPGA's MAC port to the last beat of its last
one, at ``fpga_clock_mhz``. In simulation only those are the FPGA's rates: the wall clock then
measures how fast this machine simulates.
"""

import argparse
import json
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from rocegen.host.cm_client import CmClient, CmError
from rocegen.host.counter import CounterQp, counter_problems
from rocegen.host.nic import NicError, SendCpl, open_nic
from rocegen.wire.addr import parse_ip
from rocegen.wire.atomic_runs import MASK, ORIGINAL_SLOTS, generator_run, original_slot
from rocegen.wire.atomics import ATOMIC_BYTES, ATOMIC_VERBS, BYTE_ORDERS
from rocegen.wire.pattern import generator_address, pattern
from rocegen.wire.verbs import VERBS

__all__ = ["Agent", "TrafficRun", "HostQp", "main", "request", "AgentError", "fpga_rates",
           "close_all"]

#: The first errors of a run that are kept to report.
KEEP_ERRORS = 5
#: Messages of a host run a QP has outstanding at most.
SEND_DEPTH = 32
#: QUERYs after a host run's last completion while the pattern sink has not counted every byte
#: (a payload may still be on its way into memory when its ACK left).
VERDICT_TRIES = 6
#: Seconds between QUERYs while the FPGA's READ run goes on (the first; doubled up to 0.5).
READ_POLL = 0.05
#: Atomics a QP of an atomic run keeps outstanding at most (a ConnectX's max_rd_atomic).
ATOMIC_DEPTH = 16
#: ``wr_id`` of the READs of an atomic run's target (its atomics count from 0).
TARGET_READ = 1 << 40
#: Seconds an atomic run of the FPGA may leave the host's targets unchanged before it is given
#: up (:meth:`Agent.traffic`).
ATOMIC_STALL = 30.0
#: The likely cause of an atomic run that changed nothing in the host's memory.
NO_GEN_ATOMICS = ("an FPGA built without --atomics refuses each of its generator's atomics, "
                  "and the run completes in error there; the connection manager's format does "
                  "not say whether an FPGA has them")
#: The directions of ``rocegen-host atomic``: the host's atomics on the FPGA's memory, or the
#: FPGA's (its traffic generator's) on the host's.
DIRECTIONS = ("host-to-fpga", "fpga-to-host")
#: A send completion's status for a NAK invalid request: the simulated NIC's, and pyverbs'
#: (``IBV_WC_REM_INV_REQ_ERR``).
INVALID_REQUEST = ("REM_INV_REQ_ERR", "status 9")


class AgentError(Exception):
    """A command the agent cannot carry out; ``kind`` names the cause for callers."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


@dataclass
class TrafficRun:
    op: str
    size: int
    count: int
    spacing: int
    window: int
    t_start: float | None         # when its datagram was sent (None: queued behind another run)
    received: int = 0           # completions taken (SEND*, WRITE_IMM)
    verified: int = 0           # messages checked good
    errors: list = field(default_factory=list)
    bad: int = 0
    t_done: float | None = None
    image: tuple | None = None      # expected window contents of a run longer than the window
    fpga: dict | None = None        # the NIC's fpga_time() when the run was done
    checked: int | None = None      # READ: bytes the FPGA's pattern sink checked in the run
    wrong: int | None = None        # READ: bytes it found wrong
    atomic: dict | None = None      # FETCH_ADD / COMPARE_SWAP: the targets and their model

    @property
    def done(self):
        return self.t_done is not None

    def summary(self, now=None, fpga=None):
        """The run's figures; ``fpga``: the NIC's :meth:`fpga_time` of the QP now (used while
        the run goes on; a done run keeps the one it had when it was done)."""
        end = self.t_done or now or time.monotonic()
        secs = max(end - self.t_start, 1e-9) if self.t_start is not None else 1e-9
        good = self.verified * self.size
        return {"op": self.op, "size": self.size, "count": self.count, "spacing": self.spacing,
                "queued": self.t_start is None,
                "window": self.window, "received": self.received, "verified": self.verified,
                "bad": self.bad, "errors": self.errors, "done": self.done,
                "ok": self.done and not self.bad and self.verified == self.count,
                "seconds": secs, "bytes": good, "gbps": good * 8 / secs / 1e9,
                "mmsgs": self.verified / secs / 1e6, "checked": self.checked,
                "wrong": self.wrong,
                **({"targets": self.atomic["used"], "targets_right": self.atomic["right"],
                    "targets_moved": self.atomic["moved"], "target_addr": self.atomic["base"]}
                   if self.atomic else {}),
                **fpga_rates(self.fpga if self.done else fpga, good, self.verified)}


def fpga_rates(fpga, good_bytes, messages):
    """``fpga_cycles``, ``fpga_clock_mhz``, ``fpga_seconds``, ``fpga_gbps``, ``fpga_mmsgs`` of
    ``good_bytes`` in ``messages`` over the FPGA time ``fpga`` (a NIC's :meth:`fpga_time`:
    from the first cycle of the first frame to the last cycle of the last, both counted); all
    None without one."""
    if not fpga:
        return dict.fromkeys(("fpga_cycles", "fpga_clock_mhz", "fpga_seconds", "fpga_gbps",
                              "fpga_mmsgs"))
    cycles = fpga["last_cycle"] - fpga["first_cycle"] + 1
    secs = cycles / fpga["clock_hz"]
    return {"fpga_cycles": cycles, "fpga_clock_mhz": fpga["clock_hz"] / 1e6, "fpga_seconds": secs,
            "fpga_gbps": good_bytes * 8 / secs / 1e9, "fpga_mmsgs": messages / secs / 1e6}


@dataclass
class HostQp:
    qpn: int
    psn: int
    fpga_qpn: int
    pmtu: int
    addr: int
    rkey: int
    window: int
    recv_addr: int
    recv_size: int
    recv_depth: int
    state: str = "RTS"
    run: TrafficRun | None = None
    messages: int = 0
    bytes: int = 0
    fpga_region: tuple = (0, 0, 0)      # (rkey, base, length) on the FPGA; zeros: none
    sending: bool = False               # a host run (write / send / read) is going
    sent: int = 0                       # messages of host runs completed
    sent_bytes: int = 0
    rd_atomic: int = 1                  # READs of ours outstanding at most (max_rd_atomic)
    rd_depth: int = 1                   # READs of the FPGA accepted at once (max_dest_rd_atomic)
    fpga_reads: tuple = (0, 0)          # the READ depths the FPGA stated; zeros: none (no READs)
    atomics: str | None = None          # the host NIC's atomics (atomic_cap); the QP takes the
    #                                     FPGA's atomics on its memory when not None
    cm: str = "udp"                     # what opened it: "udp" (OPEN_QP to the connection
    #                                     manager) or "rdma_cm" (the InfiniBand CM, a REQ to QP1)
    cm_port: int | None = None          # rdma_cm: the TCP port connected to

    def info(self):
        return {"qpn": self.qpn, "psn": self.psn, "fpga_qpn": self.fpga_qpn, "pmtu": self.pmtu,
                "addr": self.addr, "rkey": self.rkey, "window": self.window,
                "recv_size": self.recv_size, "recv_depth": self.recv_depth, "state": self.state,
                "messages": self.messages, "bytes": self.bytes,
                "fpga_region": list(self.fpga_region), "sent": self.sent,
                "sent_bytes": self.sent_bytes, "rd_atomic": self.rd_atomic,
                "rd_depth": self.rd_depth, "fpga_reads": list(self.fpga_reads),
                "atomics": self.atomics, "cm": self.cm, "cm_port": self.cm_port,
                "run": self.run.summary() if self.run else None}


def _log2(n):
    return n.bit_length() - 1


def _inverted(data):
    """``data`` with every bit flipped."""
    return (int.from_bytes(data, "big") ^ ((1 << 8 * len(data)) - 1)).to_bytes(len(data), "big")


class Agent:
    """The QPs of one host NIC towards one FPGA. ``nic``: a :mod:`rocegen.host.nic` backend;
    ``cm``: a :class:`~rocegen.host.cm_client.CmClient`; ``fpga_ip``: the FPGA's RoCE address
    (its connection manager may be reached elsewhere, for example through a tunnel)."""

    def __init__(self, nic, cm, fpga_ip, *, window=4 << 20, recv_depth=64, recv_size=65536):
        if window < 4096 or window & (window - 1) or window > 1 << 31:
            raise ValueError(f"window must be a power of two 4 KiB..2 GiB, not {window}")
        if recv_depth < 1 or recv_size < 1:
            raise ValueError("recv_depth and recv_size must be >= 1")
        self.nic, self.cm, self.fpga_ip = nic, cm, fpga_ip
        self.window, self.recv_depth, self.recv_size = window, recv_depth, recv_size
        self.qps = {}                       # fpga_qpn -> HostQp
        self._by_host = {}                  # host qpn -> HostQp
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self._queue = deque()               # QPs whose run waits for the generator
        self._in_flight = []                # the run last sent to the generator
        self.fatal = None
        # (a NIC that does not state its READ limits is set up as before they existed: one READ
        # each way)
        self._read_limits = nic.read_limits() if hasattr(nic, "read_limits") else None
        self._poller = threading.Thread(target=self._poll_loop, name="cq", daemon=True)
        self._poller.start()

    # ------------------------------------------------------------------ QPs

    def open(self, n=1, *, pmtu=None, timeout=None, retry_cnt=None, rnr_retry=None,
             host_timeout=None, host_retry_cnt=None, host_rnr_retry=None, rdma_cm=None):
        """Open ``n`` QPs with the FPGA; returns their :meth:`HostQp.info`. All or nothing: when
        the FPGA refuses one (NO_QP, NAK, REJ) or does not answer, the QPs this call opened are
        closed again and :class:`AgentError` says how many had been opened. ``pmtu`` is always
        sent (default 4096; both ends must agree on it); ``timeout``/``retry_cnt``/``rnr_retry``
        only when given (else the FPGA's defaults). ``host_timeout`` (local ACK timeout code
        0..31, 0 = infinite), ``host_retry_cnt``, ``host_rnr_retry`` (0..7) are our QPs' own, the
        NIC's defaults when None (:meth:`connect_qp` of :mod:`rocegen.host.nic`).

        ``rdma_cm``: a TCP port; each QP is then connected through the InfiniBand CM as
        librdmacm's ``rdma_connect`` does (the NIC's ``cm_connect``, service ID ``0x0106 << 16
        | port``), not with OPEN_QP: the FPGA's region comes from the REP's private data, the
        path MTU and the FPGA QP's local ACK timeout are the CM's (``pmtu`` and ``timeout`` are
        refused), ``retry_cnt``/``rnr_retry`` go in the REQ (default 7)."""
        if n < 1:
            raise AgentError("usage", f"the number of QPs to open must be >= 1, not {n}")
        self._check_cm_choice(rdma_cm, pmtu, timeout, retry_cnt, rnr_retry)
        host = {}
        for key, value, what, top in (("timeout", host_timeout, "timeout code", 31),
                                      ("retry_cnt", host_retry_cnt, "retry count", 7),
                                      ("rnr_retry", host_rnr_retry, "RNR retry count", 7)):
            if value is not None:
                if not isinstance(value, int) or not 0 <= value <= top:
                    raise AgentError("usage", f"the host QP's {what} must be 0..{top}, "
                                     f"not {value}")
                host[key] = value
        opened = []
        try:
            for _ in range(n):
                opened.append(
                    self._open_one(4096 if pmtu is None else pmtu, timeout, retry_cnt, rnr_retry,
                                   host) if rdma_cm is None else
                    self._open_cm_one(rdma_cm, retry_cnt, rnr_retry, host))
        except AgentError as e:
            for info in opened:
                self.close(info["fpga_qpn"])
            more = f" ({len(opened)} of {n} had been opened, and are closed again)" if opened else ""
            raise AgentError(e.kind, f"{e}{more}") from None
        return opened

    def _open_one(self, pmtu, timeout, retry_cnt, rnr_retry, host):
        qpn = self.nic.create_qp(self.recv_depth)
        size = 2 * self.window + self.recv_depth * self.recv_size
        addr, rkey = self.nic.register(size)
        psn = int.from_bytes(os.urandom(3), "big")
        own_atomic, own_depth = self._read_limits or (1, 1)
        try:
            opened = self.cm.open(
                qpn=qpn, psn=psn, rkey=rkey, vaddr=addr, ip=parse_ip(self.nic.local_ip),
                pmtu=pmtu, timeout=timeout, retry_cnt=retry_cnt, rnr_retry=rnr_retry,
                read_depths=(own_atomic, own_depth) if self._read_limits else None)
        except CmError as e:
            self.nic.destroy_qp(qpn)
            raise AgentError(e.kind, str(e)) from None
        except ValueError as e:
            self.nic.destroy_qp(qpn)
            raise AgentError("usage", str(e)) from None
        fpga_qpn, fpga_psn = opened["fpga_qpn"], opened["fpga_psn"]
        qp = HostQp(qpn, psn, fpga_qpn, pmtu, addr, rkey, self.window,
                    addr + 2 * self.window, self.recv_size, self.recv_depth,
                    fpga_region=(opened["rkey"], opened["base"], opened["length"]),
                    rd_atomic=min(own_atomic, opened.get("rd_depth") or 1), rd_depth=own_depth,
                    fpga_reads=(opened.get("rd_atomic", 0), opened.get("rd_depth", 0)),
                    atomics=self._atomic_cap())
        depths = {"rd_atomic": qp.rd_atomic, "rd_depth": qp.rd_depth} if self._read_limits else {}
        self.nic.connect_qp(qpn, fpga_qpn, self.fpga_ip, fpga_psn, qp.pmtu, **depths, **host)
        return self._keep(qp)

    def _keep(self, qp):
        """Post the receive buffers of a connected QP and hold it; its :meth:`HostQp.info`."""
        for k in range(self.recv_depth):
            self.nic.post_recv(qp.qpn, k, qp.recv_addr + k * self.recv_size, self.recv_size)
        with self.lock:
            self.qps[qp.fpga_qpn] = qp
            self._by_host[qp.qpn] = qp
        return qp.info()

    def _check_cm_choice(self, rdma_cm, pmtu, timeout, retry_cnt, rnr_retry):
        """Refuse what the RDMA CM cannot carry, and a port that is not one."""
        if rdma_cm is None:
            return
        if not isinstance(rdma_cm, int) or isinstance(rdma_cm, bool) or \
                not 0 <= rdma_cm <= 0xFFFF:
            raise AgentError("usage", f"the RDMA CM port must be 0..65535, not {rdma_cm!r}")
        for name, value, why in (("pmtu", pmtu, "the path MTU is the route's, which the REQ "
                                  "states"),
                                 ("timeout", timeout, "the FPGA QP's local ACK timeout is the "
                                  "one the REQ states, librdmacm's")):
            if value is not None:
                raise AgentError("usage", f"{name} applies to QPs opened with OPEN_QP: over the "
                                 f"RDMA CM {why}")
        for name, value in (("retry count", retry_cnt), ("RNR retry count", rnr_retry)):
            if value is not None and (not isinstance(value, int) or not 0 <= value <= 7):
                raise AgentError("usage", f"the FPGA QP's {name} must be 0..7, not {value}")
        if not hasattr(self.nic, "cm_connect"):
            raise AgentError("usage", f"the NIC {type(self.nic).__name__} cannot connect "
                             f"through the RDMA CM")

    def _open_cm_one(self, port, retry_cnt, rnr_retry, host):
        """One QP connected through the InfiniBand CM to ``port`` (:meth:`open`)."""
        size = 2 * self.window + self.recv_depth * self.recv_size
        addr, rkey = self.nic.register(size)
        own_atomic, own_depth = self._read_limits or (1, 1)
        try:
            c = self.nic.cm_connect(self.fpga_ip, port, recv_depth=self.recv_depth,
                                    rd_atomic=own_atomic, rd_depth=own_depth,
                                    peer_retry_cnt=retry_cnt, peer_rnr_retry=rnr_retry, **host)
        except NicError as e:
            raise AgentError("rdma_cm", str(e)) from None
        # (the REP's initiator depth and responder resources are the READ depths the FPGA
        # states: those it issues, those it takes)
        return self._keep(HostQp(
            c.qpn, c.psn, c.fpga_qpn, c.pmtu, addr, rkey, self.window, addr + 2 * self.window,
            self.recv_size, self.recv_depth,
            fpga_region=(c.region_rkey, c.region_addr, c.region_length),
            rd_atomic=c.rd_atomic, rd_depth=c.rd_depth, fpga_reads=(c.rd_depth, c.rd_atomic),
            atomics=self._atomic_cap(), cm="rdma_cm", cm_port=port))

    def _atomic_cap(self):
        """The host NIC's atomics (its ``atomic_cap()``; a NIC that does not say has none)."""
        return self.nic.atomic_cap() if hasattr(self.nic, "atomic_cap") else None

    def _select(self, fpga_qpn):
        with self.lock:
            if fpga_qpn is None:
                if not self.qps:
                    raise AgentError("no_qp", "no QP is open (rocegen-host connect)")
                return list(self.qps.values())
            if fpga_qpn not in self.qps:
                raise AgentError("unknown", f"no open QP with the FPGA's QP {fpga_qpn} (open: "
                                 f"{', '.join(map(str, self.qps)) or 'none'})")
            return [self.qps[fpga_qpn]]

    def close(self, fpga_qpn=None):
        """Close each selected QP with the FPGA the way it was opened, CLOSE_QP then ours
        destroyed, or ``rdma_disconnect`` (the NIC's ``cm_disconnect``: a DREQ, the QP gone
        with it). Returns the FPGA QPNs closed; a refusal (for example an FPGA that no longer
        knows the QP, or no DREP) still destroys ours and is reported in the result."""
        out = []
        for qp in self._select(fpga_qpn):
            err = None
            try:
                if qp.cm == "rdma_cm":
                    self.nic.cm_disconnect(qp.qpn)
                else:
                    self.cm.close_qp(qpn=qp.qpn, psn=qp.psn, fpga_qpn=qp.fpga_qpn)
            except (CmError, NicError) as e:
                err = str(e)
            with self.lock:
                self.qps.pop(qp.fpga_qpn, None)
                self._by_host.pop(qp.qpn, None)
            if qp.cm != "rdma_cm":
                self.nic.destroy_qp(qp.qpn)
            out.append({"fpga_qpn": qp.fpga_qpn, "qpn": qp.qpn, "cm": qp.cm, "error": err})
        return out

    # ------------------------------------------------------------------ traffic

    def traffic(self, fpga_qpn=None, *, op="WRITE", size=None, count=16, spacing=0, targets=1,
                stall=ATOMIC_STALL):
        """Start the FPGA's traffic generator on the selected QPs and remember the run to check.
        ``size`` default: 64 KiB, 8 for the atomics (``op`` FETCH_ADD or COMPARE_SWAP, whose
        size must be 8). An atomic run works on ``targets`` 8-byte targets (a power of two, at
        most the window's) from the start of the QP's memory, zeroed first, message ``s`` on
        target ``s mod targets``; it is done when every target holds what
        :func:`~rocegen.wire.atomic_runs.generator_run` says the run leaves, and fails when they
        have not changed for ``stall`` seconds."""
        if op not in VERBS + ATOMIC_VERBS:
            raise AgentError("usage", f"op must be one of {', '.join(VERBS + ATOMIC_VERBS)}, "
                             f"not {op!r}")
        if op in ATOMIC_VERBS:
            return self._atomic_traffic(fpga_qpn, op, size, count, spacing, targets, stall)
        size = 65536 if size is None else size
        if not 1 <= size <= self.window:
            raise AgentError("usage", f"size must be 1..{self.window} bytes (the window), not {size}")
        if op.startswith("SEND") and size > self.recv_size:
            raise AgentError("usage", f"SEND size {size} is larger than the receive buffers "
                             f"({self.recv_size} bytes; see --recv-size)")
        if not 0 <= count < 1 << 32 or not 0 <= spacing < 1 << 32:
            raise AgentError("usage", "count and spacing must be 0 .. 2^32-1")
        runs = []
        for qp in self._select(fpga_qpn):
            self._generator_reaches(qp)
            window = self._read_window(qp, size) if op == "READ" else self.window
            if qp.state != "RTS":
                raise AgentError("state", f"QP {qp.fpga_qpn} is in {qp.state}")
            if qp.run is not None and not qp.run.done:
                raise AgentError("busy", f"QP {qp.fpga_qpn} still has a run going "
                                 f"({qp.run.verified} of {qp.run.count} checked)")
            if qp.sending:
                raise AgentError("busy", f"QP {qp.fpga_qpn} is sending into the FPGA")
            if op.startswith("WRITE"):
                self.nic.fill(qp.addr, min(2 * self.window, count * size + size), 0)
            elif op == "READ":
                # what the run reads: offsets 0 .. window + size, each byte the pattern of the
                # FPGA's local address it lands at (the same offset)
                span = min(window + size, count * size)
                self.nic.write(qp.addr, pattern(0, span))
            run = TrafficRun(op, size, count, spacing, window, None)
            with self.lock:
                qp.run = run
                self._queue.append(qp)
                self._dispatch()
            runs.append({"fpga_qpn": qp.fpga_qpn, **run.summary()})
        return runs

    def _atomic_traffic(self, fpga_qpn, op, size, count, spacing, targets, stall):
        """:meth:`traffic` of FETCH_ADD / COMPARE_SWAP runs."""
        if size not in (None, ATOMIC_BYTES):
            raise AgentError("usage", f"an atomic run's size must be {ATOMIC_BYTES} (each message "
                             f"is one atomic on 8 bytes), not {size}")
        top = self.window // ATOMIC_BYTES
        if not isinstance(targets, int) or not 1 <= targets <= top or targets & (targets - 1):
            raise AgentError("usage", f"targets must be a power of two 1..{top} (8-byte targets "
                             f"in the window of {self.window} bytes), not {targets}")
        if not 0 <= count < 1 << 32 or not 0 <= spacing < 1 << 32:
            raise AgentError("usage", "count and spacing must be 0 .. 2^32-1")
        if not stall > 0:
            raise AgentError("usage", f"stall must be > 0 seconds, not {stall}")
        self._host_takes_atomics()
        qps = self._select(fpga_qpn)
        runs = []
        with self.lock:
            for qp in qps:
                self._gen_atomics_ready(qp)
            for qp in qps:
                run = self._gen_atomic_run(qp, op, count, spacing, targets, stall)
                qp.run = run
                self._queue.append(qp)
                self._dispatch()
                runs.append({"fpga_qpn": qp.fpga_qpn, **run.summary()})
        return runs

    def _host_takes_atomics(self):
        if self._atomic_cap() is None:
            raise AgentError("no_atomics", "this host's RDMA device offers no atomics "
                             "(atomic_caps IBV_ATOMIC_NONE): its memory does not take the "
                             "FPGA's")

    @staticmethod
    def _generator_reaches(qp):
        """Refuse a run of the FPGA's traffic generator on a QP the RDMA CM opened: the FPGA
        knows the host memory of a QP from OPEN_QP, and a REQ names none."""
        if qp.cm == "rdma_cm":
            raise AgentError("rdma_cm", f"QP {qp.fpga_qpn} was opened through the RDMA CM, "
                             f"whose REQ tells the FPGA no host memory: its traffic generator "
                             f"(traffic, atomic --direction fpga-to-host) runs on QPs opened "
                             f"with OPEN_QP (connect without --rdma-cm)")

    def _gen_atomics_ready(self, qp):
        """Whether the FPGA's generator may run atomics on ``qp`` now (lock held)."""
        self._generator_reaches(qp)
        if not any(qp.fpga_reads):
            raise AgentError("no_atomics", f"the FPGA stated no READ depths when QP "
                             f"{qp.fpga_qpn} was opened: it is built without the READ "
                             f"requester, so without atomics (they are answered as READs are)")
        if qp.state != "RTS":
            raise AgentError("state", f"QP {qp.fpga_qpn} is in {qp.state}")
        if qp.sending or (qp.run is not None and not qp.run.done):
            raise AgentError("busy", f"QP {qp.fpga_qpn} has a run going")

    def _gen_atomic_run(self, qp, op, count, spacing, targets, stall, *, base=None,
                        initial=None, zero=True):
        """The :class:`TrafficRun` of an atomic run on ``qp``: its targets at host address
        ``base`` (default: the QP's memory), from ``initial`` (default 0: ``zero`` them before
        the datagram goes)."""
        final, originals = generator_run(op, count, targets, initial)
        used = len(final)
        run = TrafficRun(op, ATOMIC_BYTES, count, spacing, targets * ATOMIC_BYTES, None)
        run.atomic = {"base": qp.addr if base is None else base, "used": used,
                      "initial": [0] * used if initial is None else list(initial),
                      "final": final, "originals": originals, "zero": zero, "stall": stall,
                      "moved_at": None, "seen": None, "values": None, "right": 0,
                      "moved": False}
        return run

    def _read_window(self, qp, size):
        """The window of a READ run on ``qp``: this agent's, or less, the largest power of two
        in the FPGA's region (whose length bounds its local memory)."""
        length = qp.fpga_region[2]
        if not length:
            raise AgentError("no_region", f"the FPGA offers no memory region on QP {qp.fpga_qpn} "
                             f"(an FPGA built without the responder has no READ requester and no "
                             f"pattern sink)")
        if not any(qp.fpga_reads):
            raise AgentError("no_reads", f"the FPGA stated no READ depths when QP {qp.fpga_qpn} "
                             f"was opened: it is built without the READ requester")
        window = min(self.window, 1 << _log2(length))
        if size > window:
            raise AgentError("usage", f"READ size {size} is larger than the window of the run "
                             f"({window} bytes: the FPGA's region of QP {qp.fpga_qpn} is {length} "
                             f"bytes)")
        return window

    def _dispatch(self):
        """Send the next queued run's test-traffic datagram once every run sent before is done.

        The FPGA has one traffic generator, which takes one run at a time and holds at most one
        more (a third datagram arriving then is dropped and counted): sending a run only after
        the previous one is complete here keeps at most the generator's last acknowledgements
        and this run in flight, so none is lost. Called with the lock held."""
        while self._queue and all(r.done for r in self._in_flight):
            qp = self._queue.popleft()
            run = qp.run
            if qp.fpga_qpn not in self.qps or run is None or run.t_start is not None:
                continue
            self.nic.fpga_time_reset(qp.qpn)        # frames of this run only, from here
            run.t_start = time.monotonic()
            self._in_flight = [run]
            if run.count == 0:
                run.t_done = run.t_start
            if run.op == "READ":
                threading.Thread(target=self._read_run, args=(qp, run), name="read-run",
                                 daemon=True).start()
                continue
            if run.atomic is not None:
                a = run.atomic
                if a["zero"]:
                    self.nic.fill(a["base"], a["used"] * ATOMIC_BYTES, 0)
                a["moved_at"] = run.t_start
                self.cm.traffic(qp.fpga_qpn, ATOMIC_BYTES, run.count, run.spacing, write=False,
                                window_log2=_log2(run.window), atomic=run.op)
                continue
            self.cm.traffic(qp.fpga_qpn, run.size, run.count, run.spacing,
                            write=run.op.startswith("WRITE"), imm=run.op.endswith("IMM"),
                            window_log2=_log2(run.window))

    def _read_run(self, qp, run, stall=30.0):
        """The FPGA's READ run: QUERY, its datagram, then QUERYs until the pattern sink has
        counted the run's bytes (or nothing moved for ``stall`` seconds)."""
        try:
            before = self.cm.query()
        except CmError as e:
            with self.lock:
                self._error(run, f"no verdict: the FPGA does not answer QUERY ({e})")
                self._finish(qp, run)
            return
        with self.lock:
            run.t_start = time.monotonic()
            run.checked = run.wrong = 0
        self.cm.traffic(qp.fpga_qpn, run.size, run.count, run.spacing, write=False,
                        window_log2=_log2(run.window), read=True)
        want, pause, last_move, last = run.count * run.size, READ_POLL, time.monotonic(), None
        while not run.done and not self.stopping.is_set():
            try:
                now = self.cm.query()
            except CmError as e:
                now, why = None, str(e)
            with self.lock:
                if now is None:
                    self._error(run, f"QUERY failed during the run: {why}")
                    self._finish(qp, run)
                    return
                checked, wrong = now[0] - before[0], now[1] - before[1]
                if (checked, wrong) != last:
                    last, last_move = (checked, wrong), time.monotonic()
                run.checked, run.wrong = checked, wrong
                run.received = run.verified = min(run.count, checked // run.size) \
                    if run.size else run.count
                if wrong:
                    run.bad = 1
                    run.errors[:] = [f"the FPGA's pattern sink found {wrong} of {checked} bytes "
                                     f"wrong"]
                if checked >= want:
                    if checked > want:
                        run.errors.append(f"the sink counted {checked - want} bytes more than "
                                          f"the run's (other traffic into the FPGA)")
                    self._finish(qp, run)
                    return
                if time.monotonic() - last_move > stall:
                    self._error(run, f"the FPGA's pattern sink counted {checked} of {want} bytes, "
                                f"then nothing for {stall:g} s")
                    self._finish(qp, run)
                    return
            time.sleep(pause)
            pause = min(2 * pause, 0.5)

    def progress(self, fpga_qpn=None):
        with self.lock:
            now = time.monotonic()
            return [{"fpga_qpn": qp.fpga_qpn, "state": qp.state,
                     **(qp.run.summary(now, self.nic.fpga_time(qp.qpn)) if qp.run
                        else {"done": True, "ok": None})}
                    for qp in self._select(fpga_qpn)]

    def status(self):
        with self.lock:
            return {"fpga_ip": self.fpga_ip, "cm": list(self.cm.fpga), "local_ip": self.nic.local_ip,
                    "nic": type(self.nic).__name__, "nic_counters": self.nic.counters(),
                    "fatal": self.fatal, "pid": os.getpid(),
                    "qps": [qp.info() for qp in self.qps.values()]}

    # ------------------------------------------------------------------ into the FPGA

    def write(self, fpga_qpn=None, *, size=65536, count=64, imm=False, stall=30.0, rkey=None):
        """RDMA WRITE (with immediate data, the message number, when ``imm``) ``count`` messages
        of ``size`` bytes into the FPGA's region of each selected QP, each the test pattern of
        the FPGA addresses it goes to, then ask the FPGA's verdict (:meth:`_host_run`).
        ``rkey``: for fault testing, the R_Key the WRITEs carry instead of the region's (another
        makes the FPGA NAK them with a remote access error and put its QP in the error
        state)."""
        return self._host_run("WRITE_IMM" if imm else "WRITE", fpga_qpn, size, count, None,
                              stall, rkey)

    def send(self, fpga_qpn=None, *, size=4096, count=64, imm=False, at=None, stall=30.0):
        """SEND (with immediate data, the message number, when ``imm``) ``count`` messages of
        ``size`` bytes on each selected QP, each the test pattern of FPGA address ``at``, where
        the FPGA's receive buffers start (default: the QP's region base, where ``rocegen sim
        serve`` posts them), then ask the FPGA's verdict (:meth:`_host_run`)."""
        return self._host_run("SEND_IMM" if imm else "SEND", fpga_qpn, size, count, at, stall)

    def read(self, fpga_qpn=None, *, size=65536, count=64, stall=30.0, rkey=None):
        """RDMA READ ``count`` messages of ``size`` bytes from the FPGA's region of each
        selected QP, from the addresses a :meth:`write` of the same size writes, and check every
        byte against the test pattern of the FPGA address it came from (:meth:`_host_run`;
        ``checked`` / ``wrong`` are this host's count). ``rkey`` as for :meth:`write`."""
        return self._host_run("READ", fpga_qpn, size, count, None, stall, rkey)

    def _host_run(self, op, fpga_qpn, size, count, at, stall, rkey=None):
        """The messages on each selected QP in turn, then the verdict: a dict with ``op``,
        ``size``, ``count``, ``qps`` (per QP: ``fpga_qpn``, ``messages`` completed OK,
        ``errors``, ``first_addr``), ``bytes`` sent OK, ``seconds`` and ``gbps`` (wall clock,
        from the first message posted to the last completion), ``checked`` / ``wrong`` (what the
        FPGA's pattern sink counted during the run; None when the FPGA does not answer QUERY)
        and ``ok``: every message completed, and the FPGA checked every byte and found none
        wrong (no verdict: the completions alone)."""
        if not 1 <= size <= self.window:
            raise AgentError("usage", f"size must be 1..{self.window} bytes (the window the "
                             f"messages are staged in), not {size}")
        if not 0 <= count < 1 << 31:
            raise AgentError("usage", f"count must be 0 .. 2^31-1, not {count}")
        if at is not None and not 0 <= at < 1 << 64:
            raise AgentError("usage", f"the FPGA address must be a 64-bit number, not {at}")
        if rkey is not None and not 0 <= rkey < 1 << 32:
            raise AgentError("usage", f"the R_Key must be a 32-bit number, not {rkey}")
        qps = self._select(fpga_qpn)
        with self.lock:
            for qp in qps:
                _, base, length = qp.fpga_region
                if not length:
                    raise AgentError("no_region", f"the FPGA offers no memory region on QP "
                                     f"{qp.fpga_qpn} (an FPGA built without the responder)")
                if (op.startswith(("WRITE", "READ")) or at is None) and size > length:
                    raise AgentError("usage", f"size {size} is larger than the FPGA's region "
                                     f"of QP {qp.fpga_qpn} ({length} bytes)")
                if qp.state != "RTS":
                    raise AgentError("state", f"QP {qp.fpga_qpn} is in {qp.state}")
                if qp.sending or (qp.run is not None and not qp.run.done):
                    raise AgentError("busy", f"QP {qp.fpga_qpn} has a run going")
            for qp in qps:
                qp.sending = True
        try:
            before = self._query() if op != "READ" else None
            t0 = time.monotonic()
            rows = [self._post_messages(qp, op, size, count, at, stall, rkey) for qp in qps]
            seconds = max(time.monotonic() - t0, 1e-9)
            sent = sum(r["messages"] for r in rows) * size
            checked = wrong = None
            if op == "READ":
                checked = sum(r["checked"] for r in rows)
                wrong = sum(r["wrong"] for r in rows)
            if before is not None:
                after = before
                for k in range(VERDICT_TRIES):
                    after = self._query()
                    if after is None or after[0] - before[0] >= sent:
                        break
                    time.sleep(0.05 * 2 ** k)
                if after is not None:
                    checked, wrong = after[0] - before[0], after[1] - before[1]
        finally:
            with self.lock:
                for qp in qps:
                    qp.sending = False
        complete = all(r["messages"] == count and not r["errors"] for r in rows)
        ok = complete and (checked is None or (wrong == 0 and checked >= sent))
        return {"op": op, "size": size, "count": count, "qps": rows, "bytes": sent,
                "seconds": seconds, "gbps": sent * 8 / seconds / 1e9, "checked": checked,
                "wrong": wrong, "ok": ok}

    # ------------------------------------------------------------------ atomics

    def atomic(self, fpga_qpn=None, *, op="FETCH_ADD", count=64, offset=None, depth=None,
               byte_order="little", stall=30.0, direction="host-to-fpga"):
        """The contended counter (:mod:`rocegen.host.counter`). ``direction`` ``"fpga-to-host"``:
        the FPGA's atomics on the host's memory, :meth:`fpga_atomics` (``offset`` and ``depth``
        do not apply). Else the host's on the FPGA's: on every selected QP at once,
        ``count`` FETCH_ADDs of 1 (``op`` ``"FETCH_ADD"``) or COMPARE_SWAP loops until ``count``
        swaps took (``"COMPARE_SWAP"``) on the 8 bytes at ``offset`` of the QP's FPGA region
        (default: its last 8-byte word), up to ``depth`` outstanding per QP. The target is READ
        before and after (its 64-bit value in ``byte_order``, the FPGA's ``--atomics``); QPs
        whose regions put the offset at the same FPGA address share one counter. Returns
        ``op``, ``count``, ``depth``, ``qps`` (per QP: ``fpga_qpn``, ``target``, ``done`` (adds
        completed or swaps that took), ``attempts``, ``errors``), ``targets`` (per target:
        ``addr``, ``fpga_qpns``, ``initial``, ``final``, ``expected``, ``ops``, ``distinct``,
        ``consecutive``, ``successes`` for COMPARE_SWAP, ``problems``), ``ops`` (atomics
        executed), ``seconds`` and ``ops_per_s`` (wall clock, the atomics only) and ``ok``."""
        if direction not in DIRECTIONS:
            raise AgentError("usage", f"direction must be one of {', '.join(DIRECTIONS)}, not "
                             f"{direction!r}")
        if op not in ATOMIC_VERBS:
            raise AgentError("usage", f"op must be one of {', '.join(ATOMIC_VERBS)}, not {op!r}")
        if not 1 <= count < 1 << 31:
            raise AgentError("usage", f"count must be 1 .. 2^31-1, not {count}")
        if direction == "fpga-to-host":
            for name, value, why in (("offset", offset, "the FPGA's atomics work on the host's "
                                      "first word of the first QP's memory"),
                                     ("depth", depth, "the FPGA keeps as many outstanding as "
                                      "its QP's READ limit")):
                if value is not None:
                    raise AgentError("usage", f"{name} applies to the host's atomics "
                                     f"(host-to-fpga), not to the FPGA's: {why}")
            return self.fpga_atomics(fpga_qpn, op=op, count=count, byte_order=byte_order,
                                     stall=stall)
        depth = ATOMIC_DEPTH if depth is None else depth
        if not 1 <= depth <= ATOMIC_DEPTH:
            raise AgentError("usage", f"depth must be 1..{ATOMIC_DEPTH}, not {depth}")
        if byte_order not in BYTE_ORDERS:
            raise AgentError("usage", f"byte order must be one of {', '.join(BYTE_ORDERS)}, "
                             f"not {byte_order!r}")
        if self._atomic_cap() is None:
            raise AgentError("no_atomics", "this host's RDMA device offers no atomics "
                             "(atomic_caps IBV_ATOMIC_NONE)")
        qps = self._select(fpga_qpn)
        with self.lock:
            parts = [self._counter_part(qp, op, count, offset, depth) for qp in qps]
            for qp in qps:
                qp.sending = True
        try:
            return self._atomic_run(qps, parts, op, count, depth, byte_order, stall)
        finally:
            with self.lock:
                for qp in qps:
                    qp.sending = False

    def fpga_atomics(self, fpga_qpn=None, *, op="FETCH_ADD", count=64, byte_order="little",
                     stall=ATOMIC_STALL):
        """The contended counter the other way: the FPGA's traffic generator works on one
        8-byte counter of the host's memory (the first word of the first selected QP's), from
        every selected QP in turn, one run each (the FPGA has one generator: runs go one after
        the other). The other QPs are pointed at that counter first (SEND_QP_INFO with the first
        QP's R_Key and address) and back at their own memory afterwards.

        * ``FETCH_ADD``: the counter is zeroed, then each QP's run adds 1 ``count`` times: run
          ``i`` takes it from ``i * count`` to ``(i + 1) * count``; after N QPs it holds
          ``N * count``.
        * ``COMPARE_SWAP``: a chain per QP: the counter is zeroed before each run, whose message
          ``s`` swaps in ``s + 1`` where it finds ``s``: each run counts it up to ``count``.

        Each run is done when the counter holds what the model of the run says
        (:func:`~rocegen.wire.atomic_runs.generator_run`; given up when it has not changed for
        ``stall`` seconds, and the next run is not started then). Then, where the FPGA's region of
        a QP holds its local addresses ``0 .. 64 * 64`` (its memory, where the originals land),
        the host RDMA-READs the original values of the last run's last 64 messages
        (:func:`~rocegen.wire.atomic_runs.original_slot`; in ``byte_order``, the FPGA's
        ``--atomics``) and checks them: each as the model says, all distinct. Returns
        ``direction``, ``op``, ``count``, ``byte_order``, ``runs`` (per QP in order: ``fpga_qpn``,
        ``initial``, ``expected``, ``final``, ``ok``, ``errors``, the rates of
        :meth:`TrafficRun.summary`), ``counter`` (``addr``, ``fpga_qpns``, ``final``,
        ``expected``, ``problems``), ``originals`` (``fpga_qpn``, ``fpga_addr``, ``slots``,
        ``values``, ``expected``, ``distinct``, ``problems``; or ``skipped``: why not READ),
        ``ops`` (atomics seen executed), ``seconds`` and ``ops_per_s`` (wall clock, the runs
        only), ``fpga_cycles`` / ``fpga_ops_per_s`` (the FPGA's time, when the NIC knows it; else
        None) and ``ok``."""
        if op not in ATOMIC_VERBS:
            raise AgentError("usage", f"op must be one of {', '.join(ATOMIC_VERBS)}, not {op!r}")
        if not 1 <= count < 1 << 31:
            raise AgentError("usage", f"count must be 1 .. 2^31-1, not {count}")
        if byte_order not in BYTE_ORDERS:
            raise AgentError("usage", f"byte order must be one of {', '.join(BYTE_ORDERS)}, "
                             f"not {byte_order!r}")
        if not stall > 0:
            raise AgentError("usage", f"stall must be > 0 seconds, not {stall}")
        self._host_takes_atomics()
        qps = self._select(fpga_qpn)
        with self.lock:
            for qp in qps:
                self._gen_atomics_ready(qp)
            for qp in qps:
                qp.sending = True
        try:
            return self._fpga_counter(qps, op, count, byte_order, stall)
        finally:
            with self.lock:
                for qp in qps:
                    qp.sending = False

    def _fpga_counter(self, qps, op, count, order, stall):
        home = qps[0]
        counter = home.addr
        pointed, runs, problems = [], [], []
        try:
            for qp in qps[1:]:
                self._point(qp, home.rkey, counter)
                pointed.append(qp)
            for i, qp in enumerate(qps):
                first = i * count & MASK if op == "FETCH_ADD" else 0
                run = self._gen_atomic_run(qp, op, count, 0, 1, stall, base=counter,
                                           initial=[first], zero=op == "COMPARE_SWAP" or i == 0)
                with self.lock:
                    qp.run = run
                    self._queue.append(qp)
                    self._dispatch()
                while not run.done:
                    if self.stopping.is_set() or self.fatal:
                        with self.lock:
                            self._error(run, self.fatal or "the agent is stopping")
                            self._finish(qp, run)
                        break
                    time.sleep(0.02)
                runs.append((qp, run))
                if run.bad:
                    left = [q.fpga_qpn for q in qps[i + 1:]]
                    if left:
                        problems.append(f"the runs of QP{'s' * (len(left) > 1)} "
                                        f"{', '.join(map(str, left))} were not started: the run "
                                        f"of QP {qp.fpga_qpn} failed")
                    break
        finally:
            for qp in pointed:
                try:
                    self._point(qp, qp.rkey, qp.addr)
                except AgentError as e:
                    problems.append(f"QP {qp.fpga_qpn} could not be pointed back at its own "
                                    f"memory: {e}")
        return self._fpga_counter_result(qps, op, count, order, stall, counter, runs, problems)

    def _fpga_counter_result(self, qps, op, count, order, stall, counter, runs, problems):
        rows = []
        for qp, run in runs:
            a = run.atomic
            final = a["values"][0] if a["values"] else None
            rows.append({"fpga_qpn": qp.fpga_qpn, "initial": a["initial"][0],
                         "expected": a["final"][0], "final": final,
                         "ok": run.done and not run.bad, "errors": list(run.errors),
                         **{k: v for k, v in run.summary().items()
                            if k in ("seconds", "verified", "fpga_cycles", "fpga_clock_mhz",
                                     "fpga_seconds", "fpga_mmsgs")}})
        expected = len(qps) * count & MASK if op == "FETCH_ADD" else count
        final = rows[-1]["final"] if rows else None
        if final != expected and not problems:
            problems.append(f"the counter holds {final if final is None else hex(final)}, not "
                            f"{expected:#x}")
        originals = {"skipped": "no run completed"}
        if runs and all(r["ok"] for r in rows):
            qp, run = runs[-1]
            originals = self._read_originals(qps, qp, run, order, stall)
        seconds = max(sum(r["seconds"] for r in rows), 1e-9)
        ops = sum(r["verified"] for r in rows)
        cycles = [r["fpga_cycles"] for r in rows]
        fpga = None not in cycles and bool(cycles)
        fpga_s = sum(r["fpga_seconds"] for r in rows) if fpga else None
        return {"direction": "fpga-to-host", "op": op, "count": count, "byte_order": order,
                "runs": rows,
                "counter": {"addr": counter, "fpga_qpns": [q.fpga_qpn for q in qps],
                            "final": final, "expected": expected, "problems": problems},
                "originals": originals, "ops": ops, "seconds": seconds,
                "ops_per_s": ops / seconds, "fpga_cycles": sum(cycles) if fpga else None,
                "fpga_clock_mhz": rows[0]["fpga_clock_mhz"] if fpga else None,
                "fpga_ops_per_s": ops / fpga_s if fpga and fpga_s else None,
                "ok": len(rows) == len(qps) and all(r["ok"] for r in rows) and not problems
                and not originals.get("problems")}

    def _point(self, qp, rkey, vaddr):
        """SEND_QP_INFO: the FPGA's QP ``qp`` works on the host's memory at ``vaddr`` (R_Key
        ``rkey``) from now."""
        try:
            self.cm.send_qp_info(qpn=qp.qpn, psn=qp.psn, fpga_qpn=qp.fpga_qpn, rkey=rkey,
                                 vaddr=vaddr, ip=parse_ip(self.nic.local_ip),
                                 read_depths=self._read_limits)
        except CmError as e:
            raise AgentError(e.kind, f"SEND_QP_INFO of QP {qp.fpga_qpn}: {e}") from None

    def _read_originals(self, qps, last, run, order, stall):
        """RDMA READ the original values of the last run's last messages from the FPGA's
        memory (through a QP whose region holds them) and check them against the model."""
        n = min(run.count, ORIGINAL_SLOTS)
        span = original_slot(n - 1) + ATOMIC_BYTES
        by = [q for q in [last, *qps] if q.state == "RTS" and q.fpga_region[2] and
              q.fpga_region[1] == 0 and q.fpga_region[2] >= span]
        if not by:
            return {"skipped": f"no QP's FPGA region holds the FPGA's local addresses 0 .. "
                    f"{span:#x} (where the originals land)"}
        qp = by[0]
        rkey = qp.fpga_region[0]
        data = self._rdma_read(qp, 0, rkey, qp.addr + self.window, span, stall,
                               "the originals")
        messages = range(run.count - n, run.count)
        want = [run.atomic["originals"][s] for s in messages]

        def values(o):
            return [int.from_bytes(data[original_slot(s):original_slot(s) + ATOMIC_BYTES], o)
                    for s in messages]
        got = values(order)
        problems = []
        wrong = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
        if wrong:
            i = wrong[0]
            problems.append(f"{len(wrong)} of {n} differ from the model: message {messages[i]}'s "
                            f"(FPGA address {original_slot(messages[i]):#x}) is {got[i]:#x}, "
                            f"not {want[i]:#x}")
        if len(set(got)) != n:
            problems.append(f"{n - len(set(got))} values appear more than once")
        other = next(o for o in BYTE_ORDERS if o != order)
        if problems and values(other) == want:
            problems.append(f"read {other}-endian, they are as the model says: the FPGA stores "
                            f"them {other}-endian (--byte-order {other})")
        return {"fpga_qpn": qp.fpga_qpn, "fpga_addr": 0, "slots": n, "first": messages[0],
                "values": got, "expected": want, "distinct": len(set(got)),
                "problems": problems}

    def _rdma_read(self, qp, remote, rkey, local, length, stall, what):
        """RDMA READ ``length`` bytes at FPGA address ``remote`` into ``local`` on ``qp`` and
        wait for it: the bytes. The QP goes to ERROR when it fails."""
        self.nic.post_send(qp.qpn, TARGET_READ, "READ", local, length, remote_addr=remote,
                           rkey=rkey)
        end = time.monotonic() + stall
        while True:
            got = [c for c in self.nic.poll_send(64, timeout=0.05) if c.qpn == qp.qpn]
            if got:
                break
            if time.monotonic() > end:
                qp.state = "ERROR"
                raise AgentError("stalled", f"QP {qp.fpga_qpn}: no completion of the READ of "
                                 f"{what} for {stall:g} s")
        if got[0].wr_id != TARGET_READ or got[0].status != "SUCCESS":
            qp.state = "ERROR"
            raise AgentError("failed", f"QP {qp.fpga_qpn}: the READ of {what} at FPGA address "
                             f"{remote:#x} failed ({got[0].status})")
        return self.nic.read(local, length)

    def _counter_part(self, qp, op, count, offset, depth):
        """QP ``qp``'s :class:`CounterQp` (checked: region, target, state; lock held)."""
        rkey, base, length = qp.fpga_region
        if not length:
            raise AgentError("no_region", f"the FPGA offers no memory region on QP "
                             f"{qp.fpga_qpn} (an FPGA built without the responder)")
        at = ((base + length) // ATOMIC_BYTES - 1) * ATOMIC_BYTES - base if offset is None \
            else offset
        if not 0 <= at <= length - ATOMIC_BYTES:
            raise AgentError("usage", f"offset {at:#x} is not inside the FPGA's region of QP "
                             f"{qp.fpga_qpn} ({length:#x} bytes)")
        if (base + at) % ATOMIC_BYTES:
            raise AgentError("usage", f"the target {base + at:#x} (offset {at:#x} in the region "
                             f"of QP {qp.fpga_qpn}) is not a multiple of {ATOMIC_BYTES}")
        if qp.state != "RTS":
            raise AgentError("state", f"QP {qp.fpga_qpn} is in {qp.state}")
        if qp.sending or (qp.run is not None and not qp.run.done):
            raise AgentError("busy", f"QP {qp.fpga_qpn} has a run going")
        return CounterQp(qp.qpn, qp.fpga_qpn, op, count, base + at, rkey, qp.addr, depth)

    def _atomic_run(self, qps, parts, op, count, depth, order, stall):
        groups = {}
        for qp, part in zip(qps, parts):
            groups.setdefault(part.target, []).append((qp, part))
        before = {t: self._read_target(*g[0], stall) for t, g in groups.items()}
        for t, group in groups.items():
            for _, part in group:
                part.guess = int.from_bytes(before[t], order)
        t0 = time.monotonic()
        try:
            self._run_counter(qps, parts, stall)
        except NicError as e:
            for qp, part in zip(qps, parts):
                if part.outstanding:
                    part.errors.append(str(e))
                    part.failed = True
                    qp.state = "ERROR"
        seconds = max(time.monotonic() - t0, 1e-9)
        targets = [self._judge(op, t, group, before[t], order, stall)
                   for t, group in groups.items()]
        ops = sum(len(p.values) for p in parts)
        return {"op": op, "count": count, "depth": depth, "byte_order": order,
                "qps": [{"fpga_qpn": p.fpga_qpn, "target": p.target, "done": p.done,
                         "attempts": len(p.values), "errors": p.errors} for p in parts],
                "targets": targets, "ops": ops, "seconds": seconds, "ops_per_s": ops / seconds,
                "ok": all(not p.errors for p in parts) and
                all(not t["problems"] for t in targets)}

    def _judge(self, op, target, group, before, order, stall):
        """A target's row of the result: READ again (on a QP still working), then checked."""
        row = {"addr": target, "fpga_qpns": [p.fpga_qpn for _, p in group],
               "initial": int.from_bytes(before, order), "final": None}
        live = [(qp, p) for qp, p in group if qp.state == "RTS"]
        if not live:
            return {**row, "problems": ["no QP left to READ the target with"]}
        try:
            after = self._read_target(*live[0], stall)
        except AgentError as e:
            return {**row, "problems": [str(e)]}
        row["final"] = int.from_bytes(after, order)
        parts = [p for _, p in group]
        problems, figures = counter_problems(op, row["initial"], row["final"], parts)
        other = next(o for o in BYTE_ORDERS if o != order)
        if problems and not counter_problems(op, int.from_bytes(before, other),
                                             int.from_bytes(after, other), parts)[0]:
            problems.append(f"read {other}-endian, the target's values pass every check: the "
                            f"FPGA stores it {other}-endian (--byte-order {other})")
        return {**row, **figures, "problems": problems}

    def _read_target(self, qp, part, stall):
        """RDMA READ the 8 bytes of ``part``'s target on ``qp``: the bytes."""
        return self._rdma_read(qp, part.target, part.rkey,
                               part.slots + part.depth * ATOMIC_BYTES, ATOMIC_BYTES, stall,
                               "the target")

    def _run_counter(self, qps, parts, stall):
        """Post every part's atomics, up to its depth outstanding, until all completed (or
        failed); ``NicError`` when nothing completed for ``stall`` seconds."""
        by_qpn = {p.qpn: (qp, p) for qp, p in zip(qps, parts)}
        order = getattr(self.nic, "result_order", sys.byteorder)
        last_move = time.monotonic()

        def fill(qp, part):
            while part.wants():
                k, swap_add, compare = part.next_post()
                try:
                    self.nic.post_send(part.qpn, k, part.op, part.slot(k), ATOMIC_BYTES,
                                       remote_addr=part.target, rkey=part.rkey,
                                       swap_add=swap_add, compare=compare)
                except NicError as e:
                    part.outstanding.pop()
                    part.errors.append(str(e))
                    part.failed = True
                    qp.state = "ERROR"
        for qp, part in zip(qps, parts):
            fill(qp, part)
        while any(p.outstanding for p in parts):
            got = self.nic.poll_send(64, timeout=0.05)
            now = time.monotonic()
            if got:
                last_move = now
            elif now - last_move > stall:
                raise NicError(f"no completion for {stall:g} s")
            for c in got:
                if c.qpn not in by_qpn:
                    continue
                qp, part = by_qpn[c.qpn]
                value = int.from_bytes(self.nic.read(part.slot(c.wr_id), ATOMIC_BYTES), order) \
                    if c.status == "SUCCESS" else None
                part.completed(c.wr_id, c.status, value, KEEP_ERRORS)
                if part.failed:
                    qp.state = "ERROR"
                    if c.status in INVALID_REQUEST and \
                            part.errors[-1:] == [f"atomic {c.wr_id}: {c.status}"]:
                        part.errors[-1] += (" (NAK invalid request: an FPGA built without "
                                            "--atomics refuses atomics)")
                fill(qp, part)

    def _query(self):
        """The FPGA's pattern sink counters ``(checked, wrong)``, or None without a sink."""
        try:
            return self.cm.query()
        except CmError as e:
            if e.kind == "timeout":
                return None
            raise AgentError(e.kind, str(e)) from None

    def _post_messages(self, qp, op, size, count, at, stall, rkey=None):
        """Post the ``count`` messages of ``op`` on ``qp``, at most :data:`SEND_DEPTH` (and the
        staging slots) outstanding, with the R_Key of the FPGA's region unless ``rkey`` names
        another; wait for every completion."""
        region_rkey, base, length = qp.fpga_region
        rkey = region_rkey if rkey is None else rkey
        fits = max(1, length // size)
        slots = min(SEND_DEPTH, max(1, self.window // size))
        outstanding = deque()
        row = {"fpga_qpn": qp.fpga_qpn, "messages": 0, "errors": [],
               "first_addr": base if at is None else at, "checked": 0, "wrong": 0}
        last_move = time.monotonic()

        def check_read(k):
            """The bytes READ by message ``k``, against the pattern of their FPGA address."""
            src = base + (k % fits) * size
            got = self.nic.read(qp.addr + (k % slots) * size, size)
            want = pattern(src, size)
            row["checked"] += size
            if got != want:
                bad = sum(a != b for a, b in zip(got, want))
                row["wrong"] += bad
                if len(row["errors"]) < KEEP_ERRORS:
                    first = next(i for i in range(size) if got[i] != want[i])
                    row["errors"].append(f"message {k}: {bad} of {size} bytes read differ from "
                                         f"the test pattern of FPGA address {src:#x}, the first "
                                         f"at {src + first:#x}")

        def take(cpl: SendCpl):
            k = outstanding.popleft()
            if cpl.wr_id != k:
                row["errors"].append(f"completion of message {cpl.wr_id}, expected {k}")
            elif cpl.status != "SUCCESS":
                if len(row["errors"]) < KEEP_ERRORS:
                    row["errors"].append(f"message {k}: {cpl.status}")
                qp.state = "ERROR"
            else:
                row["messages"] += 1
                qp.sent += 1
                qp.sent_bytes += size
                if op == "READ":
                    check_read(k)

        def wait_one():
            nonlocal last_move
            while True:
                got = self.nic.poll_send(64, timeout=0.05)
                for c in got:
                    if outstanding:
                        take(c)
                if got:
                    last_move = time.monotonic()
                    return
                if time.monotonic() - last_move > stall:
                    raise NicError(f"no completion for {stall:g} s")

        try:
            for k in range(count):
                if qp.state != "RTS":
                    break
                while len(outstanding) >= slots:
                    wait_one()
                if op.startswith(("WRITE", "READ")):
                    dest = base + (k % fits) * size
                else:
                    dest = base if at is None else at
                local = qp.addr + (k % slots) * size
                if op == "READ":            # no byte of the slot may look read already
                    self.nic.write(local, _inverted(pattern(dest, size)))
                else:
                    self.nic.write(local, pattern(dest, size))
                self.nic.post_send(qp.qpn, k, op, local, size, remote_addr=dest, rkey=rkey,
                                   imm=k & 0xFFFF_FFFF if op.endswith("IMM") else None)
                outstanding.append(k)
            while outstanding:
                wait_one()
        except NicError as e:
            row["errors"].append(str(e))
            qp.state = "ERROR"
        return row

    # ------------------------------------------------------------------ checking

    def _error(self, run, text):
        run.bad += 1
        if len(run.errors) < KEEP_ERRORS:
            run.errors.append(text)

    def _poll_loop(self):
        last_mem = 0.0
        while not self.stopping.is_set():
            try:
                cpls = self.nic.poll(64, timeout=0.01)
            except NicError as e:
                self.fatal = str(e)
                time.sleep(0.05)
                continue
            with self.lock:
                for c in cpls:
                    self._completion(c)
                self._dispatch()
                now = time.monotonic()
                if now - last_mem >= 0.05:
                    last_mem = now
                    for qp in self.qps.values():
                        if qp.run and not qp.run.done:
                            self._check_memory(qp, qp.run)

    def _completion(self, c):
        qp = self._by_host.get(c.qpn)
        if qp is None:
            return
        if c.status != "SUCCESS":
            qp.state = "ERROR"
            if qp.run and not qp.run.done:
                self._error(qp.run, f"completion {c.wr_id}: {c.status}")
                self._finish(qp, qp.run)
            return
        qp.messages += 1
        qp.bytes += c.byte_len
        run = qp.run
        buf = qp.recv_addr + c.wr_id * qp.recv_size
        if run is None or run.done or not run.op.startswith(("SEND", "WRITE_IMM")) or \
                (c.kind == "send") != run.op.startswith("SEND"):
            if run is not None and not run.done:
                self._error(run, f"unexpected {c.kind} completion of {c.byte_len} bytes")
        else:
            s = run.received
            run.received += 1
            problems = []
            if c.byte_len != run.size:
                problems.append(f"{c.byte_len} bytes, not {run.size}")
            want_imm = qp.fpga_qpn if run.op.endswith("IMM") else None
            if c.imm != want_imm:
                problems.append(f"immediate {c.imm}, not {want_imm}")
            if c.kind == "send" and not problems and \
                    self.nic.read(buf, run.size) != pattern(generator_address(s), run.size):
                problems.append("data differ from the generator's pattern")
            if problems:
                self._error(run, f"message {s}: {'; '.join(problems)}")
            elif c.kind == "send":
                run.verified += 1
            if run.received == run.count and run.op.startswith("SEND"):
                self._finish(qp, run)
        self.nic.post_recv(qp.qpn, c.wr_id, buf, qp.recv_size)

    def _check_memory(self, qp, run):
        if run.atomic is not None and run.t_start is not None:
            self._check_atomic(qp, run)
            return
        if not run.op.startswith("WRITE"):
            return
        if run.op == "WRITE_IMM" and run.received < run.count:
            return
        wraps = run.count * run.size > run.window
        if not wraps:
            while run.verified < run.count:
                s = run.verified
                if self.nic.read(qp.addr + s * run.size, run.size) != \
                        pattern(generator_address(s), run.size):
                    break
                run.verified += 1
            done = run.verified == run.count
        else:
            done = self._image_matches(qp, run)
            if done:
                run.verified = run.count
        if done:
            self._finish(qp, run)
        elif run.op == "WRITE_IMM":          # every completion came, so the data must be there
            self._error(run, "memory does not hold the messages the completions announced")
            self._finish(qp, run)

    def _check_atomic(self, qp, run):
        """An atomic run's targets against the model: done when each holds what the run
        leaves; failed when one went past it, or when none changed for the run's stall time."""
        a = run.atomic
        data = self.nic.read(a["base"], a["used"] * ATOMIC_BYTES)
        now = time.monotonic()
        if data != a["seen"]:
            order = self._host_order()
            a["seen"], a["moved_at"] = data, now
            a["values"] = values = [int.from_bytes(data[i:i + ATOMIC_BYTES], order)
                                    for i in range(0, len(data), ATOMIC_BYTES)]
            seen = right = 0
            for t, (v, first, last) in enumerate(zip(values, a["initial"], a["final"])):
                got, want = (v - first) & MASK, (last - first) & MASK
                if got > want:
                    self._error(run, f"target {t} (host address {a['base'] + 8 * t:#x}) holds "
                                f"{v:#x}, past the {last:#x} the run leaves (from {first:#x}): "
                                f"an atomic executed twice, or another writer")
                    self._finish(qp, run)
                    return
                seen += got
                right += v == last
            a["right"], a["moved"] = right, values != a["initial"]
            run.received = run.verified = run.count if right == a["used"] else seen
            if right == a["used"]:
                self._finish(qp, run)
        elif now - a["moved_at"] > a["stall"]:
            self._error(run, self._atomic_stall(run))
            self._finish(qp, run)

    def _atomic_stall(self, run):
        """Why an atomic run is given up: its targets against the model, and the likely cause
        when nothing reached them."""
        a = run.atomic
        values = a["values"]
        wrong = [t for t, (v, last) in enumerate(zip(values, a["final"])) if v != last]
        t = wrong[0]
        text = (f"the host's targets did not change for {a['stall']:g} s: {a['right']} of "
                f"{a['used']} hold what the run leaves; target {t} (host address "
                f"{a['base'] + 8 * t:#x}) holds {values[t]:#x}, the run leaves "
                f"{a['final'][t]:#x}")
        if values == a["initial"]:
            text += f" (nothing reached them: {NO_GEN_ATOMICS})"
        return text

    def _host_order(self):
        """The byte order of a 64-bit value in the host's memory as its CPU reads it (the order
        the NIC executes the FPGA's atomics in, and stores the host's originals in)."""
        return getattr(self.nic, "result_order", sys.byteorder)

    def _finish(self, qp, run):
        """The run is done: its end on the wall clock and in the FPGA's time."""
        run.fpga = self.nic.fpga_time(qp.qpn)
        run.t_done = time.monotonic()

    def _image_matches(self, qp, run):
        """Whether the window holds what the run's last messages leave in it (compared where those
        messages wrote; they cover the whole window)."""
        if run.image is None:
            n = run.window // run.size + 2
            image = bytearray(run.window + run.size)
            mask = bytearray(len(image))
            for s in range(max(0, run.count - n), run.count):
                off = (s * run.size) % run.window
                image[off:off + run.size] = pattern(generator_address(s), run.size)
                mask[off:off + run.size] = b"\1" * run.size
            spans, i = [], 0
            while i < len(mask):
                if mask[i]:
                    j = mask.find(b"\0", i)
                    j = len(mask) if j < 0 else j
                    spans.append((i, j))
                else:
                    j = mask.find(b"\1", i)
                    j = len(mask) if j < 0 else j
                i = j
            run.image = (bytes(image), spans)
        image, spans = run.image
        memory = self.nic.read(qp.addr, len(image))
        return all(memory[a:b] == image[a:b] for a, b in spans)

    def shutdown(self, timeout=30.0):
        """Stop the completion-queue poller and wait for it (at most ``timeout`` seconds; it
        stops between two polls): once this returns, the agent no longer polls the NIC, which may
        then be closed (:func:`close_all`)."""
        self.stopping.set()
        if self._poller is not threading.current_thread():
            self._poller.join(timeout)
        if self._poller.is_alive():
            print(f"rocegen-host-agent: the CQ poller did not stop within {timeout:g} s",
                  file=sys.stderr)


def close_all(agent, cm, nic):
    """The agent's way out, in this order: its poller stopped (:meth:`Agent.shutdown`; ``agent``
    None: none was made), the connection manager's socket closed, then the NIC (the poller must
    not poll a destroyed completion queue)."""
    if agent is not None:
        agent.shutdown()
    if cm is not None:
        cm.close()
    nic.close()


# ---------------------------------------------------------------------- control socket

def request(sock_path, req, *, on_line=None, timeout=None):
    """Send one request to the agent at ``sock_path``; return its last JSON line (``on_line``
    sees the earlier ones). Raises ``ConnectionError`` when no agent listens there."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(str(sock_path))
    except (FileNotFoundError, ConnectionRefusedError) as e:
        s.close()
        raise ConnectionError(f"no host agent at {sock_path}") from e
    with s, s.makefile("rwb") as f:
        f.write(json.dumps(req).encode() + b"\n")
        f.flush()
        last = None
        for line in f:
            if last is not None and on_line:
                on_line(last)
            last = json.loads(line)
        if last is None:
            raise ConnectionError("the host agent closed the connection without an answer")
        return last


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        agent = self.server.agent
        try:
            req = json.loads(self.rfile.readline())
            if not isinstance(req, dict) or not isinstance(req.get("cmd"), str):
                raise ValueError("a request is a JSON object with a \"cmd\" string")
            cmd = req.pop("cmd")
            if cmd == "recv":
                self._recv(agent, **req)
                return
            commands = {"open": agent.open, "close": agent.close, "traffic": agent.traffic,
                        "write": agent.write, "send": agent.send, "read": agent.read,
                        "atomic": agent.atomic,
                        "status": agent.status, "progress": agent.progress,
                        "shutdown": lambda: agent.close() if agent.qps else []}
            if cmd not in commands:
                self._send({"ok": False, "kind": "usage", "error": f"unknown command {cmd!r}"})
                return
            result = commands[cmd](**req)
            self._send({"ok": True, "result": result})
            if cmd == "shutdown" or (cmd == "close" and not agent.qps and not self.server.keep):
                self.server.stop()
        except AgentError as e:
            self._send({"ok": False, "kind": e.kind, "error": str(e)})
        except (TypeError, ValueError, NicError) as e:
            self._send({"ok": False, "kind": "usage", "error": str(e)})

    def _send(self, obj):
        self.wfile.write(json.dumps(obj).encode() + b"\n")
        self.wfile.flush()

    def _recv(self, agent, fpga_qpn=None, stall=30.0, interval=0.2):
        """Progress lines until every selected run is done, or nothing moved for ``stall`` s."""
        last_key, last_move = None, time.monotonic()
        while True:
            rows = agent.progress(fpga_qpn)
            key = tuple((r.get("received"), r.get("verified")) for r in rows)
            now = time.monotonic()
            if key != last_key:
                last_key, last_move = key, now
            if all(r["done"] for r in rows):
                self._send({"ok": True, "result": rows})
                return
            if agent.fatal or now - last_move > stall:
                why = agent.fatal or f"no progress for {stall:g} s"
                if any(r.get("op") in ATOMIC_VERBS and not r["done"] and
                       not r["queued"] and not r["targets_moved"] for r in rows):
                    why += f" (an atomic run changed none of its targets: {NO_GEN_ATOMICS})"
                self._send({"ok": False, "kind": "stalled", "error": why, "result": rows})
                return
            self._send({"progress": rows})
            time.sleep(interval)


class _Server(socketserver.ThreadingUnixStreamServer):
    """Binds to a temporary name beside the path and renames it there once listening, so a
    client that sees the path never meets a socket that refuses it."""
    daemon_threads = True

    def server_bind(self):
        self.final_path = self.server_address
        self.server_address = f"{self.final_path}.{os.getpid()}.tmp"
        if os.path.exists(self.server_address):
            os.unlink(self.server_address)
        super().server_bind()

    def server_activate(self):
        super().server_activate()
        os.rename(self.server_address, self.final_path)
        self.server_address = self.final_path

    def stop(self):
        threading.Thread(target=self.shutdown, daemon=True).start()


def serve(agent, sock_path, *, keep=False):
    """Answer requests on ``sock_path`` until stopped; then close the QPs left."""
    sock_path = str(sock_path)
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    server = _Server(sock_path, _Handler)
    server.agent, server.keep = agent, keep
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda *_: server.stop())
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        if os.path.exists(sock_path):
            os.unlink(sock_path)
        if agent.qps:
            try:
                agent.close()
            except (AgentError, CmError, OSError):
                pass
        agent.shutdown()


def main(argv=None):
    """``python -m rocegen.host.agent --config JSON``: open the NIC and the first QPs, print one
    JSON line (``{"ok": true, "result": [...]}`` or the error), then serve requests."""
    p = argparse.ArgumentParser(prog="rocegen-host-agent")
    p.add_argument("--config", required=True)
    args = p.parse_args(argv)
    c = json.loads(args.config)
    out = sys.stdout

    def answer(reply):
        # flushed at once: whatever happens next, the command that started us reads it
        out.write(json.dumps(reply) + "\n")
        out.flush()

    try:
        nic = open_nic(c["device"], ip=c.get("local_ip"), mac=c.get("local_mac"),
                       port=c.get("port", 1), gid_index=c.get("gid_index"))
    except NicError as e:
        answer({"ok": False, "kind": "nic", "error": str(e)})
        return 1
    cm = agent = None
    try:
        cm = CmClient(c["cm_host"], c["cm_port"], listen_port=c.get("listen_port", 0),
                      timeout=c.get("reply_timeout", 0.5), retries=c.get("retries", 4))
        agent = Agent(nic, cm, c["fpga_ip"], window=c["window"], recv_depth=c["recv_depth"],
                      recv_size=c["recv_size"])
        opened = agent.open(c["qps"], pmtu=c.get("pmtu"), timeout=c.get("timeout"),
                            retry_cnt=c.get("retry_cnt"), rnr_retry=c.get("rnr_retry"),
                            host_timeout=c.get("host_timeout"),
                            host_retry_cnt=c.get("host_retry_cnt"),
                            host_rnr_retry=c.get("host_rnr_retry"), rdma_cm=c.get("rdma_cm"))
    except (AgentError, CmError, NicError, ValueError) as e:
        kind = getattr(e, "kind", "nic" if isinstance(e, NicError) else "usage")
        answer({"ok": False, "kind": kind, "error": str(e)})
        close_all(agent, cm, nic)
        return 1
    answer({"ok": True, "result": opened, "pid": os.getpid()})
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    serve(agent, c["socket"], keep=c.get("keep", False))
    close_all(agent, cm, nic)
    return 0


if __name__ == "__main__":
    sys.exit(main())
