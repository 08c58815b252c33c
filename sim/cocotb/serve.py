"""cocotb testbench behind ``rocegen sim serve``: the endpoint in Verilator, its MAC port joined to
the host's sockets by :class:`~rocegen.sim.apps.bridge.HostSide`, running until it is told to stop.

``ROCEGEN_SERVE`` (JSON) configures it: ``listen``, ``cm_port``, ``wire_port`` (0: any free
port), ``host_mac``, ``host_ip``, ``fpga_mac``, ``fpga_ip``, ``fpga_cm_port``, ``line_gbps`` (the
MAC's line rate; 0 takes a beat every cycle), ``status`` (a JSON file the testbench rewrites: first
``{"state": "ready", ...}`` with the ports once the sockets listen, at the end ``"stopped"`` with
the counters), ``pcap`` (optional: every frame both ways), ``parent`` (a process id: the testbench
stops when that process is gone), ``max_cycles`` (optional bound), ``tap`` (optional: a TAP
interface instead of the tunnel), ``roce_to`` (with ``tap``: ``"tap"``, the default, or
``"wire"``, where RoCEv2 frames go), ``vlan`` (the FPGA port's VLAN ID, None for untagged),
``stop_file`` (the testbench stops once this file exists), ``pace_us`` (optional: at most this
many microseconds of simulated time per second of wall time, :class:`~rocegen.sim.apps.bridge.Pace`;
the testbench waits on the sockets for the rest), ``connect_file`` (with the IB CM:
each time this file holds something new, ``PORT`` or ``PORT SEQ`` (SEQ any word, so the same
port can be asked for again), the user logic connects to the host's TCP port,
:func:`connect_to_host`, one connect after the other; the status file's ``fpga_connect`` is
the last one's, with its ``seq``, and ``fpga_connects`` counts them), ``cut_file`` (while this
file exists the link is cut both ways, or only the DREQs to the FPGA dropped:
:class:`~rocegen.sim.apps.cut.Cut`), ``loss`` (optional: ``to_fpga`` and ``from_fpga``, the
probability that a RoCEv2 frame is lost on its way, and ``seed``; each way is a
:class:`~rocegen.sim.models.fabric.link.Link` of its own, other frames are never lost, and
none while the cut drops only DREQs; the status file counts its frames in ``loss``),
``responder`` (with the RC responder: ``regions``, each QP's ``[rkey, base, length]`` as
built, and ``rq_depth``; else None). While
it runs, the status file also holds the endpoint's statistics counters (``stats``), read about
once a second, and the cycle their reading began (``stats_at``, counted like ``cycles``), and
``qp_open``: the QPs the connection managers hold then (bit k: QP k; the UDP 17185 manager's
and the IB CM's, a connection in time-wait included), as an integer.

With the responder, the testbench is the user logic that posts receive buffers
(:func:`keep_receive_buffers`): every QP keeps ``rq_depth`` buffers posted, each the QP's whole
region from its base (so a SEND lands at the region's base), and each receive completion taken
from ``rcpl``, FLUSHED ones included, posts one more on its QP, never on a QP whose queue is full
(counted in the status file: ``recv_completions``, ``recv_errors`` with a status other than OK,
``recv_flushed`` with status FLUSHED). The frame check then expects the responder's
connection-manager replies: ACKs of OPEN_QP, SEND_QP_INFO and MODIFY_QP_RTS name the QP's region
as built (:class:`ServeFrameChecker`).

It stops on SIGTERM or SIGINT, when its parent is gone, or after ``max_cycles``; the test then
passes, so the launcher can tell a clean stop from a failure. Every frame out of the FPGA goes
through the independent frame check (:mod:`rocegen.sim.testing.framecheck`; the connection-manager
requests of the host are noted for it): the first mismatch is logged, stops the testbench and fails
it. The final status holds the frames checked by kind (``framecheck``).

How the clock is spent: the MAC takes frames in the test top itself (the capture ring of
:class:`~rocegen.sim.testing.roce_tops.EndpointTop`, with the CMAC's line-rate budget: frame + 24 bytes
of line time), and the testbench wakes once per frame out of the FPGA. While frames move (one left
the FPGA since the last look, or frames are queued towards it) it looks at the sockets every 64
cycles; when the port is quiet, every 2048 cycles; after about a million quiet cycles with the
traffic generator idle it also waits up to 20 ms for a socket, so an idle server costs little.
Simulated time is the FPGA's: timers (ARP, retransmission) count simulated cycles, whatever the
wall clock does. Each frame from the FPGA goes to the wire with
the cycles of its first and last beat on the MAC port and the core clock (a time record,
:mod:`rocegen.sim.apps.bridge`), so the host can measure in the FPGA's time.
"""

import json
import os
import signal
import time
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles, FallingEdge, First, RisingEdge, Timer, ValueChange
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rocegen.gateware.lib.records import unpack
from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
from rocegen.gateware.roce.layouts import WORK_REQUEST, WrOpcode
from rocegen.gateware.roce.responder.resp_layouts import RECV_COMPLETION, RECV_POST, RecvStatus
from rocegen.sim.apps.bridge import HostSide, Pace
from rocegen.sim.apps.cut import Cut
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.framecheck import FrameChecker, FrameCheckError
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.roce_env import (
    CREDIT_ONE,
    MacFrames,
    RecordCollector,
    RecordDriver,
    board_clock_mhz,
    cycle_offset,
    now_cycle,
    period_ps,
    start_clock,
)
from rocegen.wire.addr import parse_ip
from rocegen.wire.cm import (
    READ_DEPTH_MAX,
    READ_DEPTHS,
    REGION_REQUESTS,
    REQ_OPEN_QP,
    REQ_QUERY,
    REQ_SEND_QP_INFO,
)
from rocegen.wire.headers import CM, UDP_PORT_ROCEV2
from rocegen.wire.simwire import udp_dst_port

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
CONF = json.loads(os.environ["ROCEGEN_SERVE"])
W = PARAMS["width"]
QUIET_STEP = 2048               # cycles run at once while the port is quiet
BUSY_STEP = 64                  # cycles between looks at the sockets while frames move
DEEP_IDLE = 1 << 20             # quiet cycles before the testbench also waits on the sockets
CONNECT_TRIES = 120             # refusals before the FPGA's connect gives up
STATUS_EVERY = 1.0              # seconds between status file updates


class ServeFrameChecker(FrameChecker):
    """The independent frame check, with the connection-manager replies of an endpoint with the
    responder: an ACK of OPEN_QP, SEND_QP_INFO or MODIFY_QP_RTS names the QP's region
    (``regions``: each QP's ``(rkey, base, length)`` as built) in ``loc_rkey``, ``loc_vaddr``
    and ``dma_length``; an ACK of QUERY carries the pattern sink's counters in bytes 52-63 (any
    value); with RDMA READ (``reads``: the endpoint's ``max_rd_atomic`` and ``rd_depth``), an ACK
    of OPEN_QP or SEND_QP_INFO states the QP's READ limit (the least of ``max_rd_atomic`` and the
    depth the request states, 1 when it states none) and the endpoint's READ queue
    (``rd_depth``, at most 255) in bytes 56-57. Every other field as the spec's encoding has
    it."""

    def __init__(self, name, regions, reads=None):
        super().__init__(name)
        self.regions = regions
        self.reads = reads

    def _cm_expected(self, req, got, our_ip):
        exp = super()._cm_expected(req, got, our_ip)
        if got["ack_type"] != 1:
            return exp
        if req["req_type"] in REGION_REQUESTS and 0 <= exp["loc_qpn"] - 256 < len(self.regions):
            rkey, base, length = self.regions[exp["loc_qpn"] - 256]
            exp.update(loc_rkey=rkey, loc_vaddr=base, dma_length=min(length, (1 << 32) - 1))
        elif req["req_type"] == REQ_QUERY:
            exp.update({k: got[k] for k in ("dma_length", "n_transfers", "frequency")})
        if self.reads and req["req_type"] in (REQ_OPEN_QP, REQ_SEND_QP_INFO):
            names = {name for name, _ in CM.fields}
            asked = READ_DEPTHS.unpack(CM.pack(**{k: v for k, v in req.items()
                                                  if k in names}))["rd_depth"]
            limit = min(self.reads["max_rd_atomic"], asked) if asked else 1
            depths = READ_DEPTHS.unpack(CM.pack(**{k: v for k, v in exp.items()
                                                   if k in names}))
            depths.update(rd_atomic=limit,
                          rd_depth=min(self.reads["rd_depth"], READ_DEPTH_MAX))
            exp.update({k: v for k, v in CM.unpack(READ_DEPTHS.pack(**depths)).items()
                        if k in ("n_transfers",)})
        return exp


async def keep_receive_buffers(dut, resp, counters):
    """User logic of the responder: every QP keeps ``resp["rq_depth"]`` receive buffers posted,
    each the QP's whole region from its base (so a SEND lands at the region's base).

    Every completion taken from ``rcpl`` says that its buffer has left the QP's queue, whatever
    its status (OK, an error, or FLUSHED), and one buffer is posted again on its QP for it. So a
    QP that a NAK put in the error state gets a buffer for each one its flush completes: the
    flush ends at the tail the QP had when it was asked for, and the buffers posted after that
    are kept for the QP's next connection, which finds ``rq_depth`` buffers as a fresh QP does.
    The testbench counts each QP's buffers (posted, less completed) and posts to a QP only while it
    has fewer than ``rq_depth``, one post per QP in turn: the queue it posts to is never full,
    and a post to a full queue would hold the single post port (``recv``) for every QP. With
    the rping server (``service_qps``), its QPs get none (the endpoint would refuse them).

    ``counters``: ``recv_completions``, ``recv_errors`` (a status other than OK, FLUSHED
    included) and ``recv_flushed`` (FLUSHED)."""
    recv = RecordDriver(dut, "recv", RECV_POST)
    rcpl = RecordCollector(dut, "rcpl", RECV_COMPLETION, width=W)
    depth, regions = resp["rq_depth"], resp["regions"]
    held = [0] * len(regions)       # buffers posted on each QP and not yet completed
    wr_id = 0

    def take():
        for c in rcpl.items:
            held[c["qp"]] -= 1
            counters["recv_completions"] += 1
            counters["recv_errors"] += c["status"] != RecvStatus.OK.value
            counters["recv_flushed"] += c["status"] == RecvStatus.FLUSHED.value
        rcpl.items.clear()
        rcpl.cycles.clear()

    served = getattr(dut, "service_qps", None)
    while True:
        take()
        theirs = int(served.value) if served is not None else 0
        short = [k for k in range(len(regions)) if held[k] < depth and not theirs >> k & 1]
        if not short:
            rcpl.event.clear()
            if theirs:      # (a QP the server gives back gets buffers again)
                await First(rcpl.event.wait(), Timer(10_000 * period_ps(W), unit="ps"))
            else:
                await rcpl.event.wait()
            continue
        for k in short:             # a post each, then the completions that came meanwhile
            _, base, length = regions[k]
            await recv.send({"qp": k, "wr_id": wr_id, "addr": base,
                             "length": min(length, 0xFFFF_FFFF)})
            held[k] += 1
            wr_id = (wr_id + 1) & 0xFFFF_FFFF


def _connect_asked(path, connects):
    """``(port, seq)`` when the connect file ``path`` holds something it did not hold at the
    last look (``connects["last"]``), else None."""
    if not path or not os.path.exists(path):
        return None
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    if not text or text == connects["last"]:
        return None
    connects["last"] = text
    port, _, seq = text.partition(" ")
    return int(port), seq.strip() or None


async def connect_in_turn(dut, conf, queue, counters, log):
    """The connects asked for (``queue``: ``(port, seq)``), one after the other
    (:func:`connect_to_host`), until none is left."""
    while queue:
        port, seq = queue.pop(0)
        await connect_to_host(dut, conf, port, counters, log, seq=seq)


def _qp_open(dut):
    """The QPs the connection managers hold (``qp_open``), an integer; None without it."""
    sig = getattr(dut, "qp_open", None)
    try:
        return int(sig.value) if sig is not None else None
    except ValueError:          # (X or Z bits)
        return None


async def connect_to_host(dut, conf, port, counters, log, seq=None):
    """User logic of an endpoint with the IB CM: connect to the host's TCP ``port`` (its
    librdmacm listener, e.g. ``rdma_server``) through ``rdma_cm_connect``, until it is
    established (a refusal, e.g. while nobody listens yet, is tried again half a second of wall
    time later, at most :data:`CONNECT_TRIES` times); then SEND 16 bytes on the QP (the local
    memory's first word) and count what comes back on it (:func:`keep_receive_buffers` posts
    its buffers). ``counters["fpga_connect"]``: the port, ``seq`` (the connect file's word
    beside it), the tries, the last event, the QP, the SEND posted."""
    conn = RecordDriver(dut, "cmconn", CONNECT)
    wr = RecordDriver(dut, "wr", WORK_REQUEST)
    state = counters["fpga_connect"] = {"port": port, "seq": seq, "tries": 0, "refused": 0,
                                        "ok": False}
    for attempt in range(CONNECT_TRIES):
        state["tries"] += 1
        await conn.send({"dst_ip": parse_ip(conf["host_ip"]), "port": port,
                         "src_port": 0xC000 + attempt})
        while not int(dut.cmev_valid.value):
            await ValueChange(dut.cmev_valid)
        await FallingEdge(dut.clk)
        ev = unpack(CM_EVENT, int(dut.cmev_data.value))
        await RisingEdge(dut.clk)               # (taken: cmev_ready is high)
        state["event"] = ev
        if ev["ok"]:
            break
        state["refused"] += 1
        until = time.monotonic() + 0.5
        while time.monotonic() < until:
            await ClockCycles(dut.clk, QUIET_STEP)
    else:
        log(f"the FPGA's connection to port {port} was refused {state['refused']} times")
        return
    k = ev["qpn"] - 256
    state.update(ok=True, qp=k)
    log(f"the FPGA connected to the host's port {port} on QP {k}")
    if port == conf.get("rping_client_port"):
        return                  # (the gateware rping client serves this connection)
    await wr.send({"wr_id": 0xC0DE, "qp": k, "opcode": WrOpcode.SEND, "local_addr": 0,
                   "length": 16, "remote_offset": 0, "imm": 0})
    state["sent"] = True


def _write_status(path, status):
    if not path:
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(status, f)
    os.replace(tmp, path)


@cocotb.test()
async def serve(dut):
    for name in ("wr_valid", "qpctl_valid", "qppsn_valid", "gen_valid", "s_msg_axis_tvalid",
                 "cpl_bp_threshold"):
        getattr(dut, name).value = 0        # completions: always taken by the capture ring
    if hasattr(dut, "cmconn_valid"):        # (the IB CM's connects: none until asked for)
        dut.cmconn_valid.value = 0
        dut.cmdis_valid.value = 0
        dut.cmev_ready.value = 1
    dut.stats_addr.value = 0
    dut.mac_bp_threshold.value = 0
    resp = CONF.get("responder")
    if resp:
        dut.respcfg_valid.value = 0
        dut.respcnp_valid.value = 0
    await start_clock(dut, W)

    stop = {"why": None}

    def on_signal(signum, frame):
        stop["why"] = signal.Signals(signum).name

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    parent = CONF.get("parent")
    log_lines = []

    def log(text):
        log_lines.append(text)
        print(f"[serve] {text}", flush=True)

    host = HostSide(fpga_mac=CONF["fpga_mac"], fpga_ip=CONF["fpga_ip"],
                    fpga_cm_port=CONF["fpga_cm_port"], host_mac=CONF["host_mac"],
                    host_ip=CONF["host_ip"], listen=CONF["listen"], cm_port=CONF["cm_port"],
                    wire_port=CONF["wire_port"], tap=CONF.get("tap"),
                    roce=CONF.get("roce_to") or "tap", vlan=CONF.get("vlan"), log=log)
    pcap = PcapWriter(CONF["pcap"]) if CONF.get("pcap") else None
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    source.log.setLevel("WARNING")
    mhz = board_clock_mhz(W)
    clock_hz = round(mhz * 1e6)
    line = CONF.get("line_gbps") or 0
    dut.mac_credit_step.value = max(1, round(line * 1e9 / 8 / (mhz * 1e6) * CREDIT_ONE)) \
        if line else 0
    mac = MacFrames(dut, W)
    offset = await cycle_offset(dut, W)
    status_path = CONF.get("status")
    ready = {"state": "ready", "listen": host.listen, "cm_port": host.cm_port,
             "wire_port": host.wire_port, "fpga_ip": CONF["fpga_ip"], "host_ip": CONF["host_ip"],
             "width": W, "clock_mhz": mhz, "num_qps": PARAMS["num_qps"], "pid": os.getpid(),
             "responder": resp}
    _write_status(status_path, ready)
    front = (f"TAP {CONF['tap']} (host {CONF['host_ip']}; RoCEv2 to the "
             f"{CONF.get('roce_to') or 'tap'})" if CONF.get("tap") else
             f"connection manager tunnel on udp {host.listen}:{host.cm_port}")
    log(f"FPGA {CONF['fpga_ip']} ({W}-bit endpoint, {PARAMS['num_qps']} QPs, {mhz:.3f} MHz); "
        f"{front}, wire on tcp {host.listen}:{host.wire_port}")

    tx = {"frames": 0, "bytes": 0, "rx_frames": 0, "rx_bytes": 0}
    if resp:
        tx.update(recv_completions=0, recv_errors=0, recv_flushed=0)
        cocotb.start_soon(keep_receive_buffers(dut, resp, tx))
    start_cycle = now_cycle(W)
    wall0 = time.monotonic()

    check = ServeFrameChecker("sim serve", resp["regions"], resp.get("reads")) if resp else \
        FrameChecker("sim serve")
    failed = []
    loss = CONF.get("loss") or {}
    links = {way: Link(loss=loss[way], seed=loss.get("seed", 0) * 2 + i, name=way)
             for i, way in enumerate(("to_fpga", "from_fpga")) if loss.get(way)}

    def lost(way, frame):
        """Whether the lossy link of ``way`` loses ``frame`` (RoCEv2 frames only; none while
        the cut drops DREQs, :meth:`~rocegen.sim.apps.cut.Cut.lossless`)."""
        link = links.get(way)
        if link is None or cut.lossless() or udp_dst_port(frame) != UDP_PORT_ROCEV2:
            return False
        now = now_cycle(W)
        link.send(frame, now)
        return not link.due(now)

    cut = Cut(CONF.get("cut_file"))

    def to_fpga(frames):
        for f in frames:
            if cut.to_fpga(f) or lost("to_fpga", f):
                continue
            check.request(f)
            if pcap:
                pcap.write(f, cocotb.utils.get_sim_time("ns"))
            tx["rx_frames"] += 1
            tx["rx_bytes"] += len(f)
            source.send_nowait(AxiStreamFrame(f, tuser=0))

    stats = {"last": {}, "at": None, "task": None}

    async def refresh_stats():      # beside the MAC loop: it only uses the statistics port
        at = now_cycle(W) - start_cycle
        stats["last"] = await read_stats(dut, STATS)
        stats["at"] = at

    connects = {"last": None, "queue": [], "task": None}
    pace = Pace(CONF["pace_us"], mhz) if CONF.get("pace_us") else None
    quiet = 0
    busy = False
    last_status = time.monotonic()
    while stop["why"] is None:
        step = BUSY_STEP if busy or not source.idle() else QUIET_STEP
        before = now_cycle(W)
        await First(ValueChange(dut.mac_frames), Timer(step * period_ps(W), unit="ps"))
        busy = False
        for first, last, frame, aborted in mac.take():
            busy = True
            if aborted:
                log(f"the endpoint aborted a frame of {len(frame)} bytes")
                continue
            tx["frames"] += 1
            tx["bytes"] += len(frame)
            try:
                check.check(frame)
            except FrameCheckError as e:
                log(str(e))
                failed.append(e)
                stop["why"] = "frame check failed"
            if pcap:
                pcap.write(frame, cocotb.utils.get_sim_time("ns"))
            if cut.from_fpga(frame, now_cycle(W) - start_cycle) or lost("from_fpga", frame):
                continue
            to_fpga(host.from_fpga(frame, (first + offset, last + offset, clock_hz)))
        # (with a pace, the host has the wall time the cycles just simulated may take at least)
        hold = pace.wait(now_cycle(W) - before) if pace else 0.0
        if busy or not source.idle():
            quiet = 0
            to_fpga(host.poll(hold))
        else:
            quiet += now_cycle(W) - before
            # (not while the link is cut: the FPGA's timers are what the run waits for then)
            deep = quiet >= DEEP_IDLE and not int(dut.gen_busy.value) and \
                not cut.counters["active"]
            to_fpga(host.poll(max(hold, 0.02 if deep else 0)))
        now = time.monotonic()
        if now - last_status >= STATUS_EVERY:
            last_status = now
            if parent and not _alive(parent):
                stop["why"] = "parent gone"
            if CONF.get("stop_file") and os.path.exists(CONF["stop_file"]):
                stop["why"] = "stopped"
            ask = _connect_asked(CONF.get("connect_file"), connects)
            if ask is not None:
                connects["queue"].append(ask)
                tx["fpga_connects"] = tx.get("fpga_connects", 0) + 1
                if connects["task"] is None or connects["task"].done():
                    connects["task"] = cocotb.start_soon(
                        connect_in_turn(dut, CONF, connects["queue"], tx, log))
            cycles = now_cycle(W) - start_cycle
            cut.look(cycles)
            _write_status(status_path, {**ready, "cycles": cycles, **tx, **host.counters,
                                        "loss": {w: dict(k.counters) for w, k in links.items()},
                                        "cut": dict(cut.counters), "qp_open": _qp_open(dut),
                                        "stats": stats["last"], "stats_at": stats["at"]})
            if stats["task"] is None or stats["task"].done():
                stats["task"] = cocotb.start_soon(refresh_stats())
        if CONF.get("max_cycles") and now_cycle(W) - start_cycle >= CONF["max_cycles"]:
            stop["why"] = "max_cycles"

    cycles = now_cycle(W) - start_cycle
    wall = time.monotonic() - wall0
    if stats["task"] is not None and not stats["task"].done():
        await stats["task"]
    final_stats = await read_stats(dut, STATS)
    host.close()
    if pcap:
        pcap.close()
    final = {**ready, "state": "stopped", "why": stop["why"], "cycles": cycles,
             "sim_us": cycles / mhz, "wall_s": wall, "cycles_per_s": cycles / wall if wall else 0,
             **tx, **host.counters, "stats": final_stats, "framecheck": dict(check.counts),
             "loss": {w: dict(k.counters) for w, k in links.items()},
             "cut": dict(cut.counters), "qp_open": _qp_open(dut)}
    _write_status(status_path, final)
    log(f"stopped ({stop['why']}) after {cycles} cycles ({cycles / mhz:.1f} us simulated) in "
        f"{wall:.1f} s: {tx['frames']} frames from the FPGA, {tx['rx_frames']} to it; "
        f"{check.summary()}")
    if failed:
        raise failed[0]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
