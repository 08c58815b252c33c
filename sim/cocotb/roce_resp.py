"""cocotb testbenches of the endpoint's RC responder (``RoceEndpoint(responder=True)``, the test top
:class:`~rocegen.sim.testing.roce_tops.EndpointTop`) against the host NIC model's requester
(:class:`~rocegen.sim.models.rnic.Rnic`, strict): the host RDMA-WRITEs and SENDs (with or
without immediate) into the endpoint's memory through the MAC model
(:class:`~rocegen.sim.testing.roce_env.MacModel`, which pumps the requester at the line rate),
optionally over a faulty link.

The endpoint's on-chip memory cannot be read from cocotb: the data is checked by having the
endpoint's requester RDMA-WRITE its memory back into the host's (work requests on ``wr``) and
comparing it there with a shadow of every byte the host wrote (:class:`RespEnv`); receive
completions (``rcpl``) are compared with the SENDs and WRITEs with immediate the host posted,
and every host work request must complete OK at the host.

Tests (each a cocotb test of this module): ``host_into_fpga`` (WRITE, WRITE_IMM, SEND,
SEND_IMM on two QPs over a link that loses, duplicates, reorders and corrupts frames),
``both_directions`` (the traffic generator WRITEs to the host while the host WRITEs into the
endpoint on the same QP), ``responder_fuzz`` (hostile requests during responder traffic, see
:func:`fuzz_run`). The runs of the benchmark suite's responder batches and of ``rocegen sim demo
--peer-op`` are :mod:`rocegen.sim.cocotb.roce_resp_runs`'s, on :class:`RespEnv`, with
:func:`data_run` and :func:`fuzz_run` of this module.
"""

import json
import os
import random
import time
from collections import Counter

import cocotb
from cocotb.triggers import ClockCycles, Event, First, Lock, RisingEdge, Timer
from cocotbext.axi import AxiBus, AxiRam, AxiStreamFrame

from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, CplStatus, WrOpcode
from rocegen.gateware.roce.read.read_layouts import READ_WAIT_CONFIG
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.gateware.roce.responder.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
    RecvOpcode,
    RecvStatus,
)
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import Rnic, WcStatus
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.roce_env import (
    AETH_SENT,
    MacModel,
    RecordCollector,
    RecordDriver,
    board_clock_mhz,
    cycle_offset,
    is_ipv4,
    l2_length,
    now_cycle,
    open_qp,
    peer_behaviour,
    period_ps,
    qpn,
    roce_data_key,
    start_clock,
    timeout_code,
    wait_cycles,
    wait_low,
    write_onchip,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip
from rocegen.wire.headers import BTH, IPV4, UDP, UDP_PORT_ROCEV2
from rocegen.wire.opcodes import OP_RC_ACKNOWLEDGE
from rocegen.wire.pattern import generator_address, pattern
from rocegen.wire.verbs import SEND_VERBS

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
W = PARAMS["width"]
B = W // 8
MEMORY = PARAMS.get("memory", "onchip")
#: Cycles without an AXI4 write beat and without a frame into the endpoint after which every
#: request it executed has reached the AXI writer and every burst is closed and sent: more than
#: a request's way from its last beat in to its first write beat (the ingress keeps it whole,
#: the writer sends a burst's W beats only once it closes it, after up to 64 words, or 4
#: cycles after the last one), and than any pause of the W channel while words are placed
AXI_QUIET = 256
MEM = PARAMS.get("mem_bytes") or (256 * 1024 if MEMORY == "onchip" else 1 << 32)
NUM_QPS = PARAMS.get("num_qps", 8)
RQ_DEPTH = PARAMS.get("rq_depth", 16)
#: the responder's region after reset (every QP's), as the endpoint's default
REGION = tuple(PARAMS.get("resp_region") or (0, MEM // 2))
SEED = int(os.environ.get("SEED", "11"))
#: host-side QPN of endpoint QP k
HOST_QPN = 0x40
#: host memory the endpoint's requester writes into, per QP (its QP context's base address)
HOST_BASE = 0x20_0000_0000
#: bytes of that memory per QP: the traffic generator's WRITEs below ``READBACK``, the read-back
#: of the endpoint's memory from there
HOST_BYTES = 8 << 20
READBACK = 4 << 20
OPS = SEND_VERBS
#: a host request's verbs opcode, as the NIC model names it, and what the receive completion says
RECV_OPCODE = {"WRITE_IMM": RecvOpcode.WRITE_IMM, "SEND": RecvOpcode.SEND,
               "SEND_IMM": RecvOpcode.SEND}
MAX_CYCLES = 20_000_000


def rkey_of(k):
    """The R_Key the testbenches give QP k's region (through ``respcfg``)."""
    return 0x5100_0000 | (k * 0x10101 & 0xFFFFFF)


def roce_bth(frame):
    """The BTH fields (a dict) of a RoCEv2 frame (untagged or with one 802.1Q tag), else None."""
    at = l2_length(frame) + IPV4.length + UDP.length
    if len(frame) < at + BTH.length or not is_ipv4(frame):
        return None
    if UDP.unpack(frame[at - UDP.length:at])["dst_port"] != UDP_PORT_ROCEV2:
        return None
    return BTH.unpack(frame[at:at + BTH.length])


def roce_opcode(frame):
    """The BTH opcode of a RoCEv2 frame (untagged or with one 802.1Q tag), else None."""
    bth = roce_bth(frame)
    return None if bth is None else bth["opcode"]


class RespEnv:
    """One endpoint with its responder, the NIC model behind its MAC and the testbench's view of the
    endpoint's memory (:attr:`shadow`: what every byte must hold; :attr:`unknown`: byte ranges
    whose contents are not predicted, left out of the comparisons)."""

    def __init__(self, dut, *, seed=SEED, peer="connectx", line_gbps=None, backpressure=0.0,
                 to_nic=None, from_nic=None, pcap=None):
        self.dut = dut
        self.rng = random.Random(seed * 1000 + W)
        self.behaviour = peer_behaviour(0, peer, faults=False)
        self.nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=self.behaviour)
        self.line_gbps = line_gbps
        self.backpressure = backpressure
        self.links = (to_nic, from_nic)
        self.pcap = pcap
        if MEM > 64 << 20:
            raise ValueError(f"the testbench keeps a copy of the endpoint's memory: mem_bytes must "
                             f"be at most 64 MiB, not {MEM}")
        self.shadow = bytearray(MEM)
        self.unknown = []
        self.qps = {}
        #: with AXI4 memory: when set, called at every clock edge with a handshake on the write
        #: channels, as ``write_watch(aw, w, b)`` (each 1 for a handshake at that edge; the
        #: channels' signals as sampled there)
        self.write_watch = None
        self.wr_id = 1 << 20
        self.recv_id = 1 << 20
        self._recv_lock = Lock()

    async def start(self):
        dut = self.dut
        await start_clock(dut, W)
        self.mac = MacModel(dut, W, self.nic, line_gbps=self.line_gbps,
                            backpressure=self.backpressure, seed=self.rng.getrandbits(32),
                            to_nic=self.links[0], from_nic=self.links[1], pcap=self.pcap,
                            cm_regions=True)
        self.ctl = RecordDriver(dut, "qpctl", CONTEXT_WRITE)
        self.psn = RecordDriver(dut, "qppsn", PSN_WRITE)
        self.wr = RecordDriver(dut, "wr", WORK_REQUEST)
        self.gen = RecordDriver(dut, "gen", GEN_CONFIG)
        self.recv = RecordDriver(dut, "recv", RECV_POST)
        self.respcfg = RecordDriver(dut, "respcfg", RESP_CONFIG_WRITE)
        #: the READ requester's timer (``rd_wait_cfg``), in a build with READs
        self.rdwait = RecordDriver(dut, "rdwait", READ_WAIT_CONFIG) \
            if hasattr(dut, "rdwait_valid") else None
        self.cpl = RecordCollector(dut, "cpl", COMPLETION, width=W)
        self.rcpl = RecordCollector(dut, "rcpl", RECV_COMPLETION, width=W,
                                    backpressure=self.backpressure,
                                    seed=self.rng.getrandbits(32))
        dut.s_msg_axis_tvalid.value = 0
        dut.respcnp_valid.value = 0         # (the CNP interval stays the generator's)
        dut.stats_addr.value = 0
        dut.qp_stats_qp.value = 0
        dut.qp_stats_sel.value = 0
        if MEMORY == "onchip":
            dut.memw_valid.value = 0
        else:
            self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=MEM)
            self.axi_writes = {"aw": 0, "b": 0, "quiet": 0}
            cocotb.start_soon(self._count_axi_writes())
        await ClockCycles(dut.clk, 2)
        self.offset = await cycle_offset(dut, W)

    # ---------------------------------------------------------------------------- set-up
    async def open(self, k, *, pmtu, psn, region, timeout=0, host=True):
        """Open QP k on both sides at PSN ``psn`` (both directions), its responder region
        ``region`` (base, length) with R_Key :func:`rkey_of`; the host's QP too unless
        ``host`` is false. ``timeout``: both requesters' retransmit timeout code."""
        hq = HOST_QPN + k
        if host:
            if hq in self.nic.qps:
                self.nic.destroy_qp(hq)
            self.nic.create_qp(hq, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                               epsn=psn, pmtu=pmtu, timeout=timeout or 8)
            if not any(mr.rkey == 0x3000 + k for mr in self.nic.mrs):
                self.nic.register_mr(HOST_BASE + (k << 36), HOST_BYTES, 0x3000 + k)
        await self.set_region(k, *region)
        await open_qp(self.ctl, self.psn, k, peer_ip=parse_ip(HOST_IP), peer_qpn=hq,
                      rkey=0x3000 + k, base_va=HOST_BASE + (k << 36), pmtu=pmtu, psn=psn,
                      udp_sport=0xC200 + k, timeout=timeout)
        self.qps[k] = {"pmtu": pmtu, "region": tuple(region)}

    async def set_region(self, k, base, length, rkey=None):
        await self.respcfg.send({"qp": k, "config": {"mr": {
            "rkey": rkey_of(k) if rkey is None else rkey, "base": base, "length": length,
            "write": 1, "read": 1}, "rnr_timer": 1}})

    async def post_recv(self, k, wr_id, addr, length):
        """Post a receive buffer of QP k (several coroutines may post at once)."""
        async with self._recv_lock:
            await self.recv.send({"qp": k, "wr_id": wr_id, "addr": addr, "length": length})

    def post_send(self, k, op, data, *, addr=0, imm=0):
        """A host work request on QP k (``op`` one of :data:`OPS`): a WRITE lands at local byte
        address ``addr`` (with R_Key :func:`rkey_of`)."""
        kw = {"data": data, "imm": imm if op.endswith("_IMM") else None}
        if op.startswith("WRITE"):
            kw.update(remote_addr=addr, rkey=rkey_of(k))
        return self.nic.post_send(HOST_QPN + k, op, **kw)

    async def _count_axi_writes(self):
        """Count the AXI4 write bursts issued and answered, and the cycles since the last
        write beat (AXI4 memory only); tell :attr:`write_watch` of every handshake."""
        dut, c = self.dut, self.axi_writes
        while True:
            await RisingEdge(dut.clk)
            aw = int(dut.m_axi_awvalid.value) & int(dut.m_axi_awready.value)
            b = int(dut.m_axi_bvalid.value) & int(dut.m_axi_bready.value)
            wvalid = int(dut.m_axi_wvalid.value)
            c["aw"] += aw
            c["b"] += b
            c["quiet"] = 0 if wvalid else c["quiet"] + 1
            if self.write_watch is not None and (aw or b or wvalid):
                self.write_watch(aw, wvalid & int(dut.m_axi_wready.value), b)

    async def axi_drained(self, *, max_cycles=MAX_CYCLES):
        """Wait until every AXI4 write burst the endpoint issued is answered and neither a
        write beat nor a frame into the endpoint has come for :data:`AXI_QUIET` cycles. The
        responder ACKs a request once it is executed; its data reaches the memory through the
        AXI writer afterwards (receive completions wait for the write responses, ACKs do not):
        the writer holds a burst's words, with no W beat, until it closes it, so the W channel
        alone can be quiet while the last request's words are being placed."""
        c, dut = self.axi_writes, self.dut
        deadline = now_cycle(W) + max_cycles

        def rx_quiet():
            return now_cycle(W) - (int(dut.rx_last_cycle.value) + self.offset)
        while c["aw"] != c["b"] or c["quiet"] < AXI_QUIET or rx_quiet() < AXI_QUIET:
            if now_cycle(W) >= deadline:
                raise AssertionError(f"AXI4 writes not drained after {max_cycles} cycles: "
                                     f"{c['aw']} bursts issued, {c['b']} answered")
            await wait_cycles(W, 32)

    async def store(self, addr, length):
        """Put the :attr:`shadow`'s bytes of the whole beats that cover ``[addr, addr +
        length)`` into the endpoint's memory: through the on-chip memory's word-write port, or
        into the AXI4 RAM."""
        lo, hi = addr - addr % B, addr + length + (-(addr + length) % B)
        if MEMORY == "onchip":
            await write_onchip(self.dut, W, MEM, lo, bytes(self.shadow[lo:hi]))
        else:
            self.ram.write(lo, bytes(self.shadow[lo:hi]))

    # ---------------------------------------------------------------------- checks
    async def readback(self, k, addr, length, *, max_cycles=MAX_CYCLES):
        """The endpoint's memory ``[addr, addr + length)`` as its requester RDMA-WRITEs it to the
        host on QP k (``addr`` rounded down to a beat)."""
        a0 = addr - addr % B
        n = length + (addr - a0)
        if MEMORY != "onchip":
            await self.axi_drained(max_cycles=max_cycles)
            return self.ram.read(addr, length)
        self.wr_id += 1
        first = len(self.cpl.items)
        await self.wr.send({"wr_id": self.wr_id, "qp": k, "opcode": WrOpcode.WRITE,
                            "local_addr": a0, "length": n, "remote_offset": READBACK, "imm": 0})
        cpl = (await self.cpl.wait_for(first + 1, max_cycles=max_cycles))[first]
        assert (cpl["wr_id"], cpl["status"]) == (self.wr_id, CplStatus.OK.value), cpl
        got = self.nic.read_mem(HOST_BASE + (k << 36) + READBACK, n)
        return got[addr - a0:]

    async def check_memory(self, k, addr, length, what=""):
        """Read ``[addr, addr + length)`` back on QP k and compare it with the shadow (the
        :attr:`unknown` ranges left out); returns the bytes compared."""
        got = await self.readback(k, addr, length)
        want = bytearray(self.shadow[addr:addr + length])
        got = bytearray(got)
        for lo, hi in self.unknown:
            lo, hi = max(lo, addr), min(hi, addr + length)
            if lo < hi:
                got[lo - addr:hi - addr] = want[lo - addr:hi - addr]
        if got != want:
            at = next(i for i in range(length) if got[i] != want[i])
            raise AssertionError(f"{what}: the endpoint's memory at {addr + at:#x} holds "
                                 f"{bytes(got[at:at + 16]).hex()}, expected "
                                 f"{bytes(want[at:at + 16]).hex()}")
        return length - sum(max(0, min(hi, addr + length) - max(lo, addr))
                            for lo, hi in self.unknown)

    async def settle(self, predicate, what, *, max_cycles=MAX_CYCLES):
        """Wait until ``predicate()``, looking again after every frame of the MAC model and
        every receive completion, and at least every 2000 cycles."""
        deadline = now_cycle(W) + max_cycles
        while not predicate():
            if now_cycle(W) >= deadline:
                raise AssertionError(f"{what() if callable(what) else what} (after "
                                     f"{max_cycles} cycles)")
            self.mac.event.clear()
            self.rcpl.event.clear()
            await First(self.mac.event.wait(), self.rcpl.event.wait(),
                        Timer(2000 * period_ps(W), unit="ps"))

    def host_problems(self, faulty=False):
        """The NIC model's log entries that neither a frame the link corrupted caused nor, with
        ``faulty``, the recovery from a lossy link (duplicates, sequence NAKs, stale ACKs,
        timeouts)."""
        log = list(self.nic.log)
        for entry in self.mac.corrupt_log:
            if entry in log:
                log.remove(entry)
        if faulty:
            log = [e for e in log if e.split(":", 1)[0] not in RECOVERY_EVENTS]
        return log


#: NIC model log entries a lossy link legitimately causes
RECOVERY_EVENTS = ("duplicate", "seq_drop", "nak_seq_tx", "req_ack_stale", "req_timeouts",
                   "req_nak_seq_rx")


async def post_buffers(env, buffers, done):
    """Post the receive buffers ``buffers`` (per QP: a list of (wr_id, addr, length)) in order,
    at most the receive queue's depth outstanding per QP (a completion frees one)."""
    pending = {k: list(v) for k, v in buffers.items() if v}
    posted = Counter()
    first = len(env.rcpl.items)
    while pending:
        freed = Counter(c["qp"] for c in env.rcpl.items[first:] if c["qp"] in buffers)
        progress = False
        for k in list(pending):
            while pending[k] and posted[k] - freed[k] < RQ_DEPTH:
                wid, addr, length = pending[k].pop(0)
                await env.post_recv(k, wid, addr, length)
                posted[k] += 1
                progress = True
            if not pending[k]:
                del pending[k]
        if pending and not progress:
            env.rcpl.event.clear()
            await env.rcpl.event.wait()
    done.set()


def plan_messages(env, k, ops, sizes, slice_, *, data=None):
    """The host's messages on QP k: ``ops`` and ``sizes`` in turn, WRITEs one after the other in
    ``slice_`` (base, length) at a random byte offset each, SEND buffers likewise; returns the
    list of messages that fit (dicts of ``k``, ``op``, ``data``, ``addr``, ``imm``,
    ``recv``)."""
    rng = env.rng
    base, length = slice_
    cursor, out = base, []
    slack = length - sum(sizes)        # for the skews, while it lasts
    for op, n in zip(ops, sizes):
        skew = rng.randrange(0, min(8, max(slack, 0) + 1)) if n else 0
        if cursor + skew + n > base + length:
            break
        slack -= skew
        payload = rng.randbytes(n) if data is None else data(n)
        msg = {"k": k, "op": op, "data": payload, "addr": cursor + skew,
               "imm": rng.getrandbits(32), "recv": None}
        if op != "WRITE":
            env.recv_id += 1
            msg["recv"] = (env.recv_id, cursor + skew if op.startswith("SEND") else base,
                           max(n, 1))
        cursor += skew + n
        out.append(msg)
    return out


async def send_round(env, msgs, *, max_cycles=MAX_CYCLES):
    """Post ``msgs`` (see :func:`plan_messages`) at the host, round robin over their QPs, and
    wait until all completed at the host and their receive completions came; the shadow
    learns their data. Returns ``(first request, first frame)`` indices of the round in the
    MAC model's :attr:`~MacModel.requests` and :attr:`~MacModel.frames`."""
    mac, nic = env.mac, env.nic
    buffers = {}
    for m in msgs:
        if m["recv"]:
            buffers.setdefault(m["k"], []).append(m["recv"])
    first_rcpl, first_cq = len(env.rcpl.items), len(nic.send_cq)
    marks = (len(mac.requests), len(mac.frames))
    posted = Event()
    cocotb.start_soon(post_buffers(env, buffers, posted))
    queues = {}
    for m in msgs:
        queues.setdefault(m["k"], []).append(m)
    while queues:
        for k in list(queues):
            m = queues[k].pop(0)
            env.post_send(k, m["op"], m["data"], addr=m["addr"], imm=m["imm"])
            if not queues[k]:
                del queues[k]
    mac.poke()
    n_recv = sum(len(v) for v in buffers.values())
    round_qps = {m["k"] for m in msgs}

    def recvs():
        return [c for c in env.rcpl.items[first_rcpl:] if c["qp"] in round_qps]
    await env.settle(lambda: not nic.send_outstanding() and len(recvs()) >= n_recv,
                     lambda: f"{nic.send_outstanding()} host work requests outstanding, "
                     f"{len(recvs())} of {n_recv} receive completions; "
                     f"the host logged {env.nic.log[-3:]}", max_cycles=max_cycles)
    await posted.wait()
    done = nic.send_cq[first_cq:]
    assert len(done) == len(msgs), f"{len(done)} host completions for {len(msgs)} requests"
    bad = [c for c in done if c.status != WcStatus.SUCCESS]
    assert not bad, f"host work requests failed: {bad[:3]}"
    got = {}
    for c in recvs():
        got.setdefault(c["qp"], []).append(c)
    assert len(recvs()) == n_recv, "receive completions too many"
    for k in {m["k"] for m in msgs}:
        want = [(m["recv"][0], RECV_OPCODE[m["op"]].value, RecvStatus.OK.value, len(m["data"]),
                 int(m["op"].endswith("_IMM")), m["imm"] if m["op"].endswith("_IMM") else 0)
                for m in msgs if m["k"] == k and m["recv"]]
        have = [(c["wr_id"], c["opcode"], c["status"], c["length"], c["has_imm"],
                 c["imm"] if c["has_imm"] else 0) for c in got.get(k, [])]
        assert have == want, f"QP {k}: receive completions {have[:4]} ..., expected {want[:4]} ..."
    for m in msgs:
        at = m["recv"][1] if m["op"].startswith("SEND") else m["addr"]
        env.shadow[at:at + len(m["data"])] = m["data"]
    return marks


def round_figures(env, marks, payload):
    """Goodput of a round: ``payload`` bytes over the time from its first request's start on
    the host's line to the first beat of the endpoint's last ACK, or to the end of the last
    request's time on the line if that is later.

    (The MAC model hands each frame to the endpoint a beat a cycle from the start of its time on
    the line, faster than a line brings it: a 4 KiB request's last beat is in some 40 cycles
    before its line time ends at W = 512, so an endpoint that answers in fewer would otherwise
    seem to take the requests faster than the line.)"""
    first_req, first_frame = marks
    reqs = env.mac.requests[first_req:]
    acks = [f for f, _, fr in env.mac.frames[first_frame:] if roce_opcode(fr) == OP_RC_ACKNOWLEDGE]
    if not reqs or not acks:
        return {"line_cycles": 0, "host_frames": len(reqs)}
    return {"line_cycles": max(acks[-1], reqs[-1][1]) - reqs[0][0], "host_frames": len(reqs)}


def share(k, qps, region=REGION):
    """QP k's share of ``region`` (base, length) when ``qps`` QPs split it, whole beats."""
    base, length = region
    part = length // qps // B * B
    return base + k * part, part


# --------------------------------------------------------------------------------- tests

@cocotb.test()
async def host_into_fpga(dut):
    """The host WRITEs, WRITEs with immediate and SENDs (with immediate) into the endpoint on
    two QPs (PMTU 256 and 1024) over a link that loses, duplicates, reorders and corrupts
    frames both ways: every host work request completes OK, every receive completion matches
    the host's message, and the endpoint's memory read back holds exactly the data."""
    rng = random.Random(SEED)
    to_nic, from_nic = (Link(loss=0.02, dup=0.02, reorder=0.03, corrupt=0.01, corruptible=is_ipv4,
                             seed=2 * SEED + d, name=name) for d, name in enumerate(("to NIC",
                                                                                      "from NIC")))
    env = RespEnv(dut, to_nic=to_nic, from_nic=from_nic, backpressure=0.1)
    await env.start()
    pmtus = (256, 1024)
    msgs = []
    for k, pmtu in enumerate(pmtus):
        await env.open(k, pmtu=pmtu, psn=rng.choice([(1 << 24) - 3, rng.getrandbits(24)]),
                       region=share(k, 2), timeout=3 if W == 64 else 2)
        ops = [rng.choice(OPS) for _ in range(20)]
        sizes = [rng.choice([0, 1, B, pmtu, pmtu + 1, rng.randrange(0, 3 * pmtu + 8)])
                 for _ in ops]
        msgs += plan_messages(env, k, ops, sizes, share(k, 2))
    await send_round(env, msgs)
    checked = 0
    for k in range(2):
        checked += await env.check_memory(k, *share(k, 2), what=f"QP {k}'s region")
    assert not env.host_problems(faulty=True), env.host_problems(faulty=True)[:5]
    stats = await read_stats(dut, STATS)
    assert stats["resp_executed"] >= sum(max(1, -(-len(m["data"]) // pmtus[m["k"]])) for m in msgs)
    assert to_nic.counters["dropped"] and from_nic.counters["dropped"]
    dut._log.info(f"{len(msgs)} messages, {checked} bytes compared; links {to_nic.counters} / "
                  f"{from_nic.counters}; responder " + ", ".join(
                      f"{k} {v}" for k, v in stats.items() if v and k.startswith("resp_")))
    assert env.mac.framecheck.counts["roce"] > 0


@cocotb.test()
async def both_directions(dut):
    """One QP both ways at once: the traffic generator WRITEs to the host while the host WRITEs
    into the endpoint; both arrive intact."""
    env = RespEnv(dut)
    await env.start()
    pmtu = 1024
    await env.open(0, pmtu=pmtu, psn=0xFFFFF0, region=REGION)
    n, count = 3000, 6
    await env.gen.send({"qp": 0, "opcode": WrOpcode.WRITE, "length": n, "count": count,
                        "spacing": 0, "imm": 0, "window": count * n})
    msgs = plan_messages(env, 0, ["WRITE"] * 8, [5000] * 8, REGION)
    await send_round(env, msgs)
    await wait_low(dut, dut.gen_busy, W, max_cycles=MAX_CYCLES, what="the traffic generator")
    assert int(dut.gen_ok.value) == count and int(dut.gen_err.value) == 0
    for s in range(count):
        got = env.nic.read_mem(HOST_BASE + s * n, n)
        assert got == pattern(generator_address(s), n), f"generator message {s} differs"
    await env.check_memory(0, REGION[0], msgs[-1]["addr"] + 5000 - REGION[0], what="region")
    assert not env.host_problems(), env.nic.log[:5]


@cocotb.test()
async def responder_fuzz(dut):
    """A few thousand hostile frames during responder traffic (:func:`fuzz_run`)."""
    result = await fuzz_run(dut, {"frames": int(PARAMS.get("fuzz_frames", 3000)),
                                  "pmtu": 256 if W == 64 else 1024, "seed": SEED})
    dut._log.info(f"fuzz: {result['frames']} frames; counters {result['counters']}")


# ----------------------------------------------------------------------------- the fuzz run

#: QPs of the fuzz run: two carrying real traffic, the victim, and closed ones above
GOOD, VICTIM = (0, 1), 2
#: fuzz frames per victim set-up (its responder starts afresh at a new PSN)
SEGMENT = 100


async def fuzz_run(dut, run, env=None):
    """Hostile frames (:func:`~rocegen.sim.testing.fuzz.request_fuzz_frames`) on the receive
    port while the host sends WRITEs, SENDs and WRITEs with immediate on two QPs; the victim QP
    (open with the host as peer, its answers lost on the way to the host) is set up again every
    :data:`SEGMENT` frames. Checks: the real traffic completes and its data is intact; the
    endpoint's memory outside the victim's region holds exactly what the host wrote (no write
    outside a region); every datagram has exactly one verdict; the responder's drops and its
    ingress's are exactly the ones :func:`~rocegen.sim.testing.fuzz.request_verdict`
    predicts, and the victim's requests are all decided; a last round of traffic still
    completes (nothing hung)."""
    from rocegen.sim.testing.fuzz import (
        REQUEST_VERDICTS,
        VERDICT_COUNTERS,
        count_roce_candidates,
        request_fuzz_frames,
        request_verdict,
    )
    seed = run.get("seed", SEED)
    pmtu = run.get("pmtu", 1024)
    n_frames = run["frames"]
    victim_host = HOST_QPN + VICTIM
    to_nic = Link(name="to NIC")
    # the victim's answers go to a host QP that does not exist: lost on the way
    to_nic.drop_matching(lambda f: roce_opcode(f) is not None and
                         BTH.unpack(f[l2_length(f) + IPV4.length + UDP.length:])["dest_qp"]
                         == victim_host)
    if env is None:
        env = RespEnv(dut, seed=seed, to_nic=to_nic, line_gbps=run.get("line_gbps") or None)
        await env.start()
    else:
        env.mac.to_nic = to_nic
    rng = env.rng
    quarter = REGION[1] // 4 // B * B
    slices = {k: (REGION[0] + k * quarter, quarter) for k in (*GOOD, VICTIM)}
    for k in GOOD:
        await env.open(k, pmtu=pmtu, psn=rng.getrandbits(24), region=slices[k])
    vpsn = rng.getrandbits(24)
    await env.open(VICTIM, pmtu=pmtu, psn=vpsn, region=slices[VICTIM], host=False)
    env.unknown.append((slices[VICTIM][0], slices[VICTIM][0] + quarter))
    closed = [qpn(k) for k in range(VICTIM + 1, NUM_QPS)]
    peers = {qpn(k): HOST_IP for k in (*GOOD, VICTIM)}
    segments, psns = [], []
    t0 = time.perf_counter()
    for s in range(-(-n_frames // SEGMENT)):
        p = (vpsn + s * 1000) & 0xFFFFFF if s else vpsn
        psns.append(p)
        segments.append(request_fuzz_frames(
            min(SEGMENT, n_frames - s * SEGMENT), seed * 100_003 + s, our_mac=FPGA_MAC,
            our_ip=FPGA_IP, peer_ip=HOST_IP, good_qpns=[qpn(k) for k in GOOD],
            victim={"qpn": qpn(VICTIM), "psn": p, "rkey": rkey_of(VICTIM),
                    "region": slices[VICTIM]},
            closed_qpns=closed, num_qps=NUM_QPS, pmtu=pmtu))
    frames = [f for seg in segments for f in seg]
    dut._log.info(f"{len(frames)} hostile frames made in {time.perf_counter() - t0:.1f} s")
    stats0 = await read_stats(dut, STATS)
    nic0 = dict(env.nic.counters)
    host = []                   # the NIC model's frames (any runts it makes of them included)
    env.mac.taps.append(host.append)
    done = Event()

    async def throw():
        src = env.mac.source
        vbase = slices[VICTIM][0]
        for s, seg in enumerate(segments):
            if s:
                await env.psn.send({"qp": VICTIM, "psn": psns[s]})
            for j in range(2):      # receive buffers for the victim's SENDs (flushed at set-up)
                env.recv_id += 1
                await env.post_recv(VICTIM, env.recv_id, vbase + j * (quarter // 2),
                                    quarter // 2)
            for i in range(0, len(seg), 8):
                cycles = 0
                for f in seg[i:i + 8]:
                    src.send_nowait(AxiStreamFrame(f, tuser=0))
                    cycles += -(-len(f) // B) + 6
                await wait_cycles(W, cycles)
                while src.count() > 16:
                    await wait_cycles(W, 16)
        done.set()
    cocotb.start_soon(throw())
    rounds, good_msgs = 0, []
    while not done.is_set() or rounds == 0:
        msgs = []
        for k in GOOD:
            ops = [rng.choice(OPS) for _ in range(12)]
            sizes = [rng.choice([0, 1, B, pmtu, pmtu + 4, rng.randrange(0, 3 * pmtu)])
                     for _ in ops]
            msgs += plan_messages(env, k, ops, sizes, slices[k])
        await send_round(env, msgs)
        good_msgs += msgs
        rounds += 1
        for k in GOOD:      # the next round overwrites the slice: check it now
            await env.check_memory(k, *slices[k], what=f"QP {k} during the fuzz")
    await done.wait()
    for _ in range(100_000):
        if not env.mac.source.count() and not env.mac.source.active:
            break
        await wait_cycles(W, 64)
    else:
        raise AssertionError("the receive port stopped taking frames")
    await wait_cycles(W, 3000)
    stats = await read_stats(dut, STATS)
    d = {k: stats[k] - stats0[k] for k in STATS}
    nic = {k: env.nic.counters[k] - nic0[k] for k in nic0}
    pred = Counter(request_verdict(f, our_mac=FPGA_MAC, our_ip=FPGA_IP, peers=peers,
                                   num_qps=NUM_QPS, atomics=PARAMS.get("atomics") is not None)
                   for f in frames)
    candidates = count_roce_candidates(frames, FPGA_MAC, FPGA_IP)
    # the host's requests and ACKs reach port 4791, and so do its runts that hold a UDP
    # header (port 4791 takes datagrams cut-through: they arrive damaged, dropped as short)
    host_roce = count_roce_candidates(host, FPGA_MAC, FPGA_IP)
    assert host_roce >= nic["req_tx"] + sum(nic[k] for k in AETH_SENT)
    checks = {
        "datagrams on port 4791": (d["roce_rx_packets"], candidates + host_roce),
        "verdicts": (sum(d[k] for k in VERDICT_COUNTERS), d["roce_rx_packets"]),
        "requests": (d["roce_rx_requests"],
                     sum(v for k, v in pred.items() if k is not None) + nic["req_tx"]),
        "requests decided": (sum(d[f"resp_{v}"] for v in ("executed", "duplicate", "seq_nak",
                                                          "seq_drop", "rnr", "invalid",
                                                          "access", "drop_error")),
                             pred["decided"] + nic["req_tx"]),
        "ingress overflow": (d["resp_overflow"], 0),
        **{REQUEST_VERDICTS[v]: (d[REQUEST_VERDICTS[v]], pred[v])
           for v in REQUEST_VERDICTS if REQUEST_VERDICTS[v]},
    }
    wrong = {k: v for k, v in checks.items() if v[0] != v[1]}
    assert not wrong, f"counters (got, expected) differ: {wrong}"
    reached = {v: d[f"resp_{v}"] for v in ("access", "invalid", "seq_nak", "drop_error",
                                           "duplicate", "rnr")}
    assert all(reached.values()), f"the fuzz missed a verdict of the victim: {reached}"
    assert d["resp_executed"] > nic["req_tx"], "no hostile request executed on the victim"
    assert stats["roce_qp_errors"] == 0
    assert not env.host_problems(), env.nic.log[:5]
    # nothing hung: one more round, then the whole memory outside the victim's region
    msgs = []
    for k in GOOD:
        msgs += plan_messages(env, k, ["WRITE", "SEND_IMM"] * 2, [pmtu + 3, 100] * 2, slices[k])
    await send_round(env, msgs)
    checked = await env.check_memory(GOOD[0], 0, MEM, what="the memory after the fuzz")
    return {"frames": len(frames), "candidates": candidates, "good_messages": len(good_msgs),
            "rounds": rounds, "checked_bytes": checked, "victim_answers_lost": to_nic.counters[
                "dropped"], "counters": {k: v for k, v in d.items() if v},
            "predicted": {str(k): v for k, v in pred.items()}}


# ---------------------------------------------------------------------------------- runs

async def data_run(env, run, n):
    """A ``responder``, ``resp_latency`` or ``bidir`` run (see :mod:`rocegen.sim.cocotb.roce_resp_runs`)."""
    kind = run["kind"]
    qps, pmtu = run.get("qps", 1), run["pmtu"]
    op = run.get("opcode", "WRITE")
    size = run.get("size", 64)
    per_qp = run.get("bytes", size)
    timeout = timeout_code(run)
    env.mac.clear_sent()
    for k in range(qps):
        await env.open(k, pmtu=pmtu, psn=env.rng.getrandbits(24), region=share(k, qps),
                       timeout=timeout)
    retx0, rnr0 = env.nic.counters["req_retx"], env.nic.counters["req_rnr_rx"]
    nak0 = env.nic.counters["req_nak_seq_rx"]
    out = {"timeout": timeout}
    if kind == "resp_latency":
        lat = []
        for _ in range(run.get("count", 8)):
            msgs = plan_messages(env, 0, [op], [size], share(0, 1))
            marks = await send_round(env, msgs)
            await wait_cycles(W, 200)
            acks = [f for f, _, fr in env.mac.frames[marks[1]:]
                    if roce_opcode(fr) == OP_RC_ACKNOWLEDGE]
            last_in = int(env.dut.rx_last_cycle.value) + env.offset
            lat.append(acks[0] - last_in)
        out["latency_cycles"] = lat
        out["checked_bytes"] = await env.check_memory(0, share(0, 1)[0], size + 8,
                                                      what=f"run {n}")
        return out
    gen = gen_end = None
    if kind == "bidir":
        count = max(1, per_qp // size)
        gen = count * size
        first_frame = len(env.mac.frames)
        await env.gen.send({"qp": 0, "opcode": WrOpcode.WRITE, "length": size, "count": count,
                            "spacing": 0, "imm": 0, "window": gen})
    line_cycles, payload, checked, messages, packets, host_frames, rounds = 0, 0, 0, 0, 0, 0, 0
    left = {k: per_qp for k in range(qps)}
    while any(left.values()):
        msgs = []
        for k in range(qps):
            count = -(-left[k] // size) if size else 1
            sizes = [min(size, left[k] - i * size) for i in range(count)]
            msgs += plan_messages(env, k, [op] * count, sizes, share(k, qps))
        if not msgs:
            raise ValueError(f"run {n}: a message of {size} bytes does not fit the region's share "
                             f"of {share(0, qps)[1]} bytes")
        for m in msgs:
            left[m["k"]] -= len(m["data"])
        marks = await send_round(env, msgs)
        rounds += 1
        fig = round_figures(env, marks, sum(len(m["data"]) for m in msgs))
        line_cycles += fig["line_cycles"]
        host_frames += fig["host_frames"]
        payload += sum(len(m["data"]) for m in msgs)
        messages += len(msgs)
        packets += sum(max(1, -(-len(m["data"]) // pmtu)) for m in msgs)
        if kind == "bidir" and gen_end is None:
            await wait_low(env.dut, env.dut.gen_busy, W, max_cycles=MAX_CYCLES,
                           what="the traffic generator")
            # every generator WRITE is acknowledged: its frames end here, the read-back's follow
            gen_end = len(env.mac.frames)
        saved = env.mac.bytes_per_cycle
        env.mac.bytes_per_cycle = None      # the read-back at the MAC's pace
        for k in range(qps):
            ends = [m["addr"] + len(m["data"]) if m["op"].startswith("WRITE")
                    else m["recv"][1] + len(m["data"]) for m in msgs if m["k"] == k]
            base = share(k, qps)[0]
            checked += await env.check_memory(k, base, max(ends) - base, what=f"run {n}")
        env.mac.bytes_per_cycle = saved
    period = 1 / board_clock_mhz(W)
    out.update({"line_cycles": line_cycles, "messages": messages, "packets": packets,
                "rounds": rounds,
                "checked_bytes": checked, "host_frames": host_frames,
                "goodput_gbps": payload * 8 / (line_cycles * period * 1e3) if line_cycles else 0,
                "retransmitted": env.nic.counters["req_retx"] - retx0,
                "rnr_naks": env.nic.counters["req_rnr_rx"] - rnr0,
                "seq_naks": env.nic.counters["req_nak_seq_rx"] - nak0,
                "link_to_nic": dict(env.mac.to_nic.counters) if env.mac.to_nic else None,
                "link_from_nic": dict(env.mac.from_nic.counters) if env.mac.from_nic else None})
    if gen is not None:
        assert int(env.dut.gen_err.value) == 0
        for s in range(gen // size):
            got = env.nic.read_mem(HOST_BASE + s * size, size)
            assert got == pattern(generator_address(s), size), f"run {n}: generator WRITE {s}"
        frames = list(zip(env.mac.line[first_frame:gen_end], env.mac.frames[first_frame:gen_end]))
        line = [t for t, (_, _, fr) in frames if roce_data_key(fr) is not None and
                BTH.unpack(fr[l2_length(fr) + IPV4.length + UDP.length:])["dest_qp"] == HOST_QPN]
        span = line[-1][1] - line[0][0] if line else 0
        acks = [t for t, (_, _, fr) in frames if roce_opcode(fr) == OP_RC_ACKNOWLEDGE]
        out.update({"tx_bytes": gen, "tx_line_cycles": span, "tx_frames": len(line),
                    "tx_acks": sum(1 for t in acks if line and line[0][0] <= t[0] < line[-1][1]),
                    "tx_goodput_gbps": gen * 8 / (span * period * 1e3) if span else 0,
                    "rx_goodput_gbps": out["goodput_gbps"]})
        checked += gen
        out["checked_bytes"] = checked
    # (a request the responder's ingress had no room for is resent after a sequence NAK, on a
    # perfect link too: recovery, counted in ``seq_naks``)
    problems = env.host_problems(faulty=True)
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    return out
