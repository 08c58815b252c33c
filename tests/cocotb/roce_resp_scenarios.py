"""cocotb testbench of the endpoint's RC responder (``RoceEndpoint(responder=True)``, READs on by
default; the responder builds of :func:`~rocegen.sim.testing.cocotb_runner.responder_sim_config`)
against the host NIC model (:class:`~rocegen.sim.models.rnic.Rnic`, :data:`IDEAL`, strict) as
requester, on :class:`~rocegen.sim.cocotb.roce_resp.RespEnv`: the scenarios of
``tests/test_cocotb_resp_scenarios.py``, one after the other on one simulator.

The cocotb test ``scenarios`` runs the scenarios listed in the JSON file ``RESP_SCENARIOS`` and
writes what each produced to the file ``ROCE_RESULTS`` (JSON, a list in the same order). A
scenario is a dict:

``name``
    For messages.
``pmtu``, ``psn``
    QP 0's path MTU and first PSN (the host's first request PSN: the responder expects it).
``region``, ``rkey``
    ``(base, length)``: QP 0's region, set at run time (``respcfg``) with R_Key ``rkey``.
``rkey_seed``
    Instead of ``rkey``: every QP's region is ``region`` with the R_Key
    :func:`~rocegen.gateware.roce.responder.responder.default_config` gives it with this seed (what a
    build with ``resp_region=region, rkey_seed=rkey_seed`` has after reset); the build's own
    regions are set back after the scenario.
``cm``
    Optional: the OPEN_QP fields (``loc_rkey``, ``loc_vaddr``) of the host; the connection
    manager then opens the QP (OPEN_QP stating the path MTU), a QUERY is sent before the
    OPEN_QP and another once the host's work requests have completed, and a CLOSE_QP ends the
    scenario. Without it, QP 0 is written directly (context and PSN, ``qpctl`` / ``qppsn``).
``fill``
    Optional ``[seed, length]``: local memory from the region's base holds ``length`` bytes
    of ``random.Random(seed).randbytes(length)`` before the host starts (on chip through the
    word-write port ``memw``, AXI4 in the memory model).
``link``, ``timeout``
    Optional: the link loses, duplicates and reorders frames each way during the scenario
    (:class:`~rocegen.sim.models.fabric.link.Link` keywords: ``loss``, ``dup``, ``reorder``;
    no corruption, which the strict host would take for a fault), and the host QPs' retransmit
    timeout code (default the model's).
``poke``
    Optional ``[[addr, data], ...]`` (``data`` base64): bytes of local memory set after
    ``fill``, before the host starts.
``recvs``
    Receive buffers ``[wr_id, addr, length]`` posted on QP 0, after it is opened (before the
    OPEN_QP with ``cm``).
``posts``
    The host's work requests on its QP :data:`HOST_QPN`, in order: dicts of ``op`` (``WRITE``,
    ``WRITE_IMM``, ``SEND``, ``SEND_IMM``, ``READ``), ``wr_id`` and the fields of
    :meth:`Rnic.post_send` (``data`` in base64; ``rkey`` ``"cm"``: the R_Key the OPEN_QP's
    reply names). A post with ``fence`` true is posted only once every work request before it
    has completed (what the fence of IBV_SEND_FENCE gives for the READs and atomics before it:
    without it a responder may execute a WRITE before an earlier atomic or READ has read its
    bytes; the host model has no fence of its own).
``max_rd_atomic``
    The host QP's READs (and atomics) outstanding at most (default 16).
``qps``
    Optional, without ``cm``: host QPs ``HOST_QPN + k`` talking to the endpoint's QPs ``k``
    (``k`` < ``qps``, default 1), each opened with the same path MTU, PSN and region; a post's
    ``qp`` (default 0) names the one it goes on. Atomics (``FETCH_ADD``, ``COMPARE_SWAP``
    with ``swap_add``, ``compare``, ``remote_addr``, ``rkey``) post as the other work requests;
    their completions' ``data`` is the original value (8 bytes, little-endian).
``stats``
    Endpoint counters (:data:`STATS` names) to report (their increase over the scenario).
``image``
    Bytes of local memory to report, from address 0, once the scenario is over (on chip: RDMA
    WRITten to the host by QP :data:`READBACK_QP`; AXI4: from the memory model once every write
    burst is answered).
``rcpl_bp``
    Chance that the receive completions' ``ready`` is low in a cycle (default 0.2; with 0 a
    completion is taken in the cycle it is first offered).

Per scenario the host is a fresh strict :class:`Rnic` whose QP :data:`HOST_QPN` talks to the
endpoint's QP; its requester's packets go to the endpoint one beat a cycle as the host's line
frees (:class:`~rocegen.sim.testing.roce_env.MacModel`), and the MAC takes the endpoint's frames
with ``ready`` low in a cycle with chance 0.1. The scenario ends once the host has no work
request outstanding and every receive buffer posted has completed. An AXI4 memory
(cocotbext-axi's) stalls its address, data and read channels in a cycle with chance 0.2 or 0.3
and holds its write responses back for 20..89 cycles at a time (up to 16 waiting); its read side
holds only the bytes of write bursts whose response the endpoint has taken (:class:`AckedWrites`),
so a READ that read before the writes ahead of it were acknowledged would get the old bytes.

A result holds ``name``; ``cpls``, the host's send completions ``[wr_id, opcode, status, data]``
(``data`` base64, a READ's bytes, else None); ``rcpls``, the receive completions ``[wr_id,
opcode, status, length, has_imm, imm, cycle]`` (``cycle``: the clock edge that took it);
``answers``, the ``[opcode, PSN]`` of every ACK and READ response the endpoint sent (parsed with
scapy); ``stats`` and ``counters`` (the counters' values at the end); ``host`` (the host's
counters); ``most_reads`` (the most READ requests the host had sent and not seen completed);
``cm`` (the connection manager's replies in order, hex); ``image`` (base64); ``cycles``. With
AXI4 memory also ``acked_image`` (the read side's bytes, same range), ``acks`` (every write
burst the scenario's write responses acknowledged: ``[cycle, [[addr, base64], ...]]``, in the
order taken) and ``max_unacked`` (the most bursts accepted and not yet answered at once).
"""

import base64
import json
import os
import random
from collections import deque

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi.sparse_memory import SparseMemory
from scapy.layers.inet import IP, UDP

from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.responder.responder import default_config
from rocegen.sim.cocotb.roce_resp import MEM, MEMORY, NUM_QPS, PARAMS, REGION, B, RespEnv, W, share
from rocegen.sim.models.cm.cm import (
    CM_PORT,
    REQ_CLOSE_QP,
    REQ_OPEN_QP,
    REQ_QUERY,
    pmtu_code,
    request,
    unpack,
)
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import IDEAL, Access, Rnic, WcOpcode
from rocegen.sim.testing.cocotb_helpers import pauses, read_settled_stats, read_stats
from rocegen.sim.testing.roce_env import now_cycle, open_qp, qpn, wait_cycles, write_onchip
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip
from rocegen.wire.opcodes import OP_RC_RDMA_READ_REQUEST
from tests.cocotb.roce_read_requester import SkipCmReplies

#: The host's QP that talks to the endpoint's QP.
HOST_QPN = 0x21
#: The host's UDP port for the connection manager's replies.
CM_REPLY_PORT = 0x4444
#: BTH opcodes of the answers of a QP: READ responses (FIRST, MIDDLE, LAST, ONLY), ACKNOWLEDGE,
#: ATOMIC_ACKNOWLEDGE.
ANSWERS = {0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12}
#: The QP whose RDMA WRITE reads the on-chip memory back (opened after a scenario, closed again).
READBACK_QP = 7
MAX_CYCLES = 2_000_000
#: Seed of the lossy links' draws (``link``).
SEED_LINK = 1234


def answers(frames):
    """The ``[opcode, PSN]`` of each ACK and READ response among ``frames``, in order (parsed
    with scapy)."""
    out = []
    for f in frames:
        ip = IP(f[14:])
        if UDP not in ip or ip[UDP].dport != 4791:
            continue
        bth = bytes(ip[UDP].payload)
        if bth[0] in ANSWERS:
            out.append([bth[0], int.from_bytes(bth[9:12], "big")])
    return out


def b64(data):
    return None if data is None else base64.b64encode(bytes(data)).decode()


class AckedWrites:
    """The AXI4 memory as the endpoint may rely on it: follows the write channels (called by
    :attr:`RespEnv.write_watch` at every handshake), pairs the W beats with their bursts in
    address order and, when a burst's write response is taken, writes its bytes (the lanes its
    strobes enable) into :attr:`mem` (the memory model's read side) and logs them with that
    clock edge in :attr:`log`. Checks that every burst is INCR of the full word size."""

    def __init__(self, dut, mem):
        self.dut = dut
        self.mem = mem
        self.filling = deque()      # bursts whose W beats are still to come, in AW order
        self.unanswered = []        # bursts without their write response, in AW order
        self.beats = deque()        # W beats taken before their burst's address
        #: ``(cycle, [(addr, bytes), ...])`` per write response taken
        self.log = []
        self.max_unacked = 0

    def __call__(self, aw, w, b):
        dut = self.dut
        if aw:
            size, burst = int(dut.m_axi_awsize.value), int(dut.m_axi_awburst.value)
            assert 1 << size == B and burst == 1, f"AXI4 write burst of size {size}, type {burst}"
            x = {"id": int(dut.m_axi_awid.value), "addr": int(dut.m_axi_awaddr.value) // B * B,
                 "beats": int(dut.m_axi_awlen.value) + 1, "taken": 0, "writes": []}
            self.filling.append(x)
            self.unanswered.append(x)
            self.max_unacked = max(self.max_unacked, len(self.unanswered))
        if w:
            self.beats.append((int(dut.m_axi_wdata.value), int(dut.m_axi_wstrb.value)))
        while self.beats and self.filling:
            data, strb = self.beats.popleft()
            x = self.filling[0]
            word = data.to_bytes(B, "little")
            base = x["addr"] + B * x["taken"]
            lane = 0
            while lane < B:         # each run of enabled lanes as one write
                if strb >> lane & 1:
                    end = lane
                    while end < B and strb >> end & 1:
                        end += 1
                    x["writes"].append((base + lane, word[lane:end]))
                    lane = end
                else:
                    lane += 1
            x["taken"] += 1
            if x["taken"] == x["beats"]:
                self.filling.popleft()
        if b:
            bid = int(dut.m_axi_bid.value)
            x = next((x for x in self.unanswered if x["id"] == bid), None)
            assert x is not None and x["taken"] == x["beats"], \
                f"a write response (ID {bid}) before its burst's last beat"
            self.unanswered.remove(x)
            for addr, data in x["writes"]:
                self.mem.write(addr, data)
            self.log.append((now_cycle(W), x["writes"]))


async def fill(env, base, data):
    """Local memory ``[base, base + len(data))`` := ``data`` (both sides of an AXI4 memory)."""
    if MEMORY == "onchip":
        await write_onchip(env.dut, W, MEM, base, data)
    else:
        env.ram.write(base, data)
        env.acked.mem.write(base, data)


async def set_regions(env, base, length, rkey_seed):
    """Every QP's region and R_Key as a build with ``resp_region=(base, length)`` and
    ``rkey_seed`` has them after reset."""
    for k, cfg in enumerate(default_config(NUM_QPS, base, length, rkey_seed=rkey_seed)):
        await env.respcfg.send({"qp": k, "config": cfg})


async def cm_request(env, payload, replies, what):
    """A connection-manager datagram from the host's port :data:`CM_REPLY_PORT`; the reply (64
    bytes) is appended to ``replies`` and returned unpacked."""
    nic = env.nic
    n = len(nic.udp_rx)
    env.mac.to_endpoint(nic.udp_frame(FPGA_IP, CM_REPLY_PORT, CM_PORT, payload, dst_mac=FPGA_MAC))
    await env.settle(lambda: len(nic.udp_rx) > n, f"no reply from the connection manager to {what}",
                     max_cycles=50_000)
    replies.append(bytes(nic.udp_rx[n][3]))
    return unpack(replies[-1])


async def readback(env, length):
    """Local memory ``[0, length)`` as it is now (see ``image`` in the module documentation)."""
    if MEMORY == "onchip":
        await env.open(READBACK_QP, pmtu=4096 if W == 512 else 1024, psn=0x123456,
                       region=share(0, 1), timeout=0)
    image = bytes(await env.readback(READBACK_QP, 0, length))
    if MEMORY == "onchip":      # (closed again)
        await env.ctl.send({"qp": READBACK_QP, "context": {"state": 0}})
    return image


async def scenario(env, sc):
    dut = env.dut
    name = sc["name"]
    pmtu, psn = sc["pmtu"], sc["psn"]
    base, length = sc["region"]
    await env.mac.drained()
    nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=IDEAL, udp_ports=(CM_REPLY_PORT,))
    env.nic = env.mac.nic = nic
    # the most READ requests sent and not completed, by the host's count
    reads = {"sent": 0, "most": 0}
    next_frames = nic.next_frames

    def counted(*args, **kwargs):
        frames = next_frames(*args, **kwargs)
        reads["sent"] += sum(f[42] == OP_RC_RDMA_READ_REQUEST for f in map(bytes, frames))
        done = sum(c.opcode == WcOpcode.RDMA_READ for c in nic.send_cq)
        reads["most"] = max(reads["most"], reads["sent"] - done)
        return frames
    nic.next_frames = counted
    dut.rcpl_bp_threshold.value = round(sc.get("rcpl_bp", 0.2) * 65536)
    if sc.get("fill"):
        seed, n = sc["fill"]
        await fill(env, base, random.Random(seed).randbytes(n))
    for addr, data in sc.get("poke", ()):
        await fill(env, addr, base64.b64decode(data))
    qps = sc.get("qps", 1)
    if sc.get("rkey_seed") is not None:
        await set_regions(env, base, length, sc["rkey_seed"])
    else:
        for k in range(qps):
            await env.set_region(k, base, length, rkey=sc["rkey"])
    names = list(sc.get("stats", ()))
    before = await read_stats(dut, names, block=STATS)
    frames0 = len(env.mac.frames)
    acks0 = len(env.acked.log) if env.acked else 0
    if env.acked:
        env.acked.max_unacked = len(env.acked.unanswered)
    replies = []
    rd_atomic = sc.get("max_rd_atomic", 16)
    access = Access.REMOTE_WRITE | Access.REMOTE_READ
    cm = sc.get("cm")
    if cm:
        for wr_id, addr, n in sc["recvs"]:
            await env.post_recv(0, wr_id, addr, n)
        query = request(REQ_QUERY, loc_qpn=HOST_QPN, loc_psn=1, listening_port=CM_REPLY_PORT)
        await cm_request(env, query, replies, f"{name}: QUERY")
        opened = await cm_request(env, request(
            REQ_OPEN_QP, loc_qpn=HOST_QPN, loc_psn=psn, loc_ip=parse_ip(HOST_IP),
            listening_port=CM_REPLY_PORT, pmtu_code=pmtu_code(pmtu), **cm), replies,
            f"{name}: OPEN_QP")
        assert opened["loc_qpn"] == qpn(0), f"{name}: the connection manager opened {opened}"
        nic.create_qp(HOST_QPN, peer_qpn=opened["loc_qpn"], peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                      epsn=psn, pmtu=pmtu, access=access, max_rd_atomic=rd_atomic)
    else:
        for k in range(qps):
            nic.create_qp(HOST_QPN + k, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                          epsn=0, pmtu=pmtu, sq_psn=psn, access=access, max_rd_atomic=rd_atomic,
                          **({"timeout": sc["timeout"]} if "timeout" in sc else {}))
            await open_qp(env.ctl, env.psn, k, peer_ip=parse_ip(HOST_IP), peer_qpn=HOST_QPN + k,
                          rkey=0, base_va=0, pmtu=pmtu, psn=psn, udp_sport=0xC123 + k)
        for wr_id, addr, n in sc["recvs"]:
            await env.post_recv(0, wr_id, addr, n)
    link = sc.get("link")
    if link:
        env.mac.to_nic, env.mac.from_nic = (Link(**link, seed=SEED_LINK + d, name=name)
                                            for d, name in enumerate(("to NIC", "from NIC")))
    env.mac.clear_sent()
    rcpl0 = len(env.rcpl.items)
    for n, p in enumerate(sc["posts"]):
        if p.get("fence") and n:
            env.mac.poke()
            await env.settle(lambda: not nic.send_outstanding(),
                             lambda: f"{name}: {nic.send_outstanding()} host work requests "
                             f"outstanding before a fenced one", max_cycles=MAX_CYCLES)
        kw = {k: v for k, v in p.items() if k not in ("op", "qp", "fence")}
        if kw.get("data") is not None:
            kw["data"] = base64.b64decode(kw["data"])
        if kw.get("rkey") == "cm":
            kw["rkey"] = opened["loc_rkey"]
        nic.post_send(HOST_QPN + p.get("qp", 0), p["op"], **kw)
    env.mac.poke()
    n_recv = len(sc["recvs"])
    await env.settle(lambda: not nic.send_outstanding() and len(env.rcpl.items) - rcpl0 >= n_recv,
                     lambda: f"{name}: {nic.send_outstanding()} host work requests outstanding, "
                     f"{len(env.rcpl.items) - rcpl0} of {n_recv} receive completions; the host "
                     f"logged {nic.log[-3:]}", max_cycles=MAX_CYCLES)
    if link:
        await env.mac.drained()
        links = {"to_nic": dict(env.mac.to_nic.counters),
                 "from_nic": dict(env.mac.from_nic.counters)}
        env.mac.to_nic = env.mac.from_nic = None
    # (a frame the link delivered last may still be on its way through the endpoint)
    after = await read_settled_stats(dut, names, block=STATS)
    bits = len(dut.stats_data)
    stats = {k: (after[k] - before[k]) % (1 << bits) for k in names}
    if cm:
        await cm_request(env, query, replies, f"{name}: second QUERY")
    await ClockCycles(dut.clk, 100)
    out = {"name": name,
           "cpls": [[c.wr_id, c.opcode, c.status, b64(c.data)] for c in nic.poll_send_cq()],
           "rcpls": [[c["wr_id"], c["opcode"], c["status"], c["length"], c["has_imm"], c["imm"],
                      cycle] for c, cycle in zip(env.rcpl.items[rcpl0:], env.rcpl.cycles[rcpl0:])],
           "answers": answers(f for _, _, f in env.mac.frames[frames0:]),
           "stats": stats, "counters": after, "host": dict(nic.counters),
           "most_reads": reads["most"], "cm": [r.hex() for r in replies],
           "links": links if link else None}
    if cm:
        await cm_request(env, request(REQ_CLOSE_QP, rem_qpn=qpn(0), listening_port=CM_REPLY_PORT),
                         [], f"{name}: CLOSE_QP")
    for k in range(1, qps):                     # (the other QPs closed again)
        await env.ctl.send({"qp": k, "context": {"state": 0}})
    if sc.get("rkey_seed") is not None:         # the build's regions back
        await set_regions(env, *REGION, PARAMS.get("rkey_seed", 0x5EED))
    await env.mac.drained()
    image = await readback(env, sc["image"]) if sc.get("image") else b""
    out["image"] = b64(image)
    if env.acked:
        out["acked_image"] = b64(env.acked.mem.read(0, len(image)))
        out["acks"] = [[cycle, [[a, b64(d)] for a, d in writes]]
                       for cycle, writes in env.acked.log[acks0:]]
        out["max_unacked"] = env.acked.max_unacked
    return out


def b_holds(rng):
    """Pause generator of the write responses: held back 20..89 cycles, then let go for 1..3."""
    while True:
        yield from [1] * rng.randrange(20, 90)
        yield from [0] * rng.randrange(1, 4)


@cocotb.test()
async def scenarios(dut):
    """The scenarios of ``RESP_SCENARIOS``; results to ``ROCE_RESULTS``."""
    with open(os.environ["RESP_SCENARIOS"]) as f:
        plan = json.load(f)
    env = RespEnv(dut, peer="ideal", backpressure=0.1)
    await env.start()
    env.mac.framecheck = SkipCmReplies(env.mac.framecheck)
    env.acked = None
    if MEMORY != "onchip":
        # the read side holds only what the write responses acknowledged
        env.ram.read_if.mem = SparseMemory(MEM)
        env.acked = AckedWrites(dut, env.ram.read_if)
        env.write_watch = env.acked
        rng = random.Random(W)
        for channel, p in ((env.ram.write_if.aw_channel, 0.3), (env.ram.write_if.w_channel, 0.3),
                           (env.ram.read_if.ar_channel, 0.2), (env.ram.read_if.r_channel, 0.2)):
            channel.set_pause_generator(pauses(rng, p))
        env.ram.write_if.b_channel.queue_occupancy_limit = 16
        env.ram.write_if.b_channel.set_pause_generator(b_holds(rng))
    results = []
    for n, sc in enumerate(plan):
        start = now_cycle(W)
        try:
            out = await scenario(env, sc)
        except Exception as e:      # (the failure names its scenario; later ones do not run)
            raise AssertionError(f"scenario {sc.get('name', n)}: {e}") from e
        out["cycles"] = now_cycle(W) - start
        dut._log.info(f"scenario {out['name']}: {out['cycles']} cycles, stats {out['stats']}")
        results.append(out)
        with open(os.environ["ROCE_RESULTS"], "w") as f:     # (what ran, should one fail)
            json.dump(results, f)
    await wait_cycles(W, 10)
