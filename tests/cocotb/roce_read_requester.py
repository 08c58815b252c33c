"""cocotb testbench of the endpoint as RDMA READ requester (``RoceEndpoint(responder=True)``, READs on
by default; the responder builds of :func:`~rocegen.sim.testing.cocotb_runner.responder_sim_config`)
against the host NIC model (:class:`~rocegen.sim.models.rnic.Rnic`, :data:`IDEAL`, not strict) as
responder, on :class:`~rocegen.sim.cocotb.roce_resp.RespEnv`: the scenarios of
``tests/test_cocotb_read_requester.py``, one after the other on one simulator.

The cocotb test ``scenarios`` runs the scenarios listed in ``READ_SCENARIOS`` (JSON) and writes
what each produced to the file ``ROCE_RESULTS`` (JSON, a list in the same order). A scenario is a
dict:

``name``
    For messages.
``wrs``
    The work requests the endpoint posts on QP 0 (or on ``qp``), with ``wr_id`` their index:
    dicts of ``opcode`` (a :class:`WrOpcode` name), ``local_addr`` (negative: from the end of
    local memory), ``remote_offset``, ``length`` and optionally ``qp``; after each, with chance
    0.3, a pause of 1..29 cycles.
``pmtu``, ``timeout``
    QP 0's path MTU and retransmit timeout code (4.096 us x 2^code).
``faults``
    ``[kind, kwargs]`` pairs for :meth:`Rnic.read_fault`, in order.
``drop_requests``
    The numbers (from 0) of the endpoint's READ request frames lost on the way to the host.
``drop_repeats``
    The numbers (from 0) of the endpoint's repeated READ request frames (a PSN not beyond the
    highest one sent before: a hole's request, or a request sent again) lost on the way to the
    host; unlike ``drop_requests``, these numbers do not depend on when a repeat leaves among
    the first requests.
``loss``, ``seed``
    Every frame is lost with probability ``loss``, each way; ``seed`` seeds the host's region,
    the pauses and the links.
``host_rd``
    The host QP's ``max_dest_rd_atomic`` (it NAKs a READ beyond it).
``rd_limit``
    Optional: QP 0's READ limit (the READs it may have outstanding, at most the build's
    ``max_rd_atomic``), set at run time by a connection-manager OPEN_QP that states it as the
    host's READ depth (the QP's context and PSN are then written as in every scenario), and set
    back by a CLOSE_QP after the scenario (the testbench checks the replies; the MAC model's frame
    check leaves them out: :class:`SkipCmReplies`).
``stats``
    Endpoint counters (:data:`STATS` names) to report.
``qps``
    Optional (default 1): endpoint QPs ``k`` < ``qps`` opened, each to host QP
    ``HOST_QPN + k`` on the same host region (a work request's ``qp`` names its QP).
``poke``
    Optional ``[[addr, data], ...]`` (``data`` base64): local bytes set after the pattern
    (e.g. atomics' operands).
``stream``
    Optional ``[[opcode, remote_offset, data], ...]`` (``data`` base64): messages pushed on the
    streaming input for QP 0 after the work requests were posted; the scenario then also waits
    until the host has executed as many atomics as the messages hold.

Per scenario: QP 0 is opened afresh at PSN :data:`PSN` (its PSNs wrap within the scenario), the
host is a fresh :class:`Rnic` whose QP :data:`HOST_QPN` answers QP 0 from its region of
:data:`HOST_REGION` random bytes at virtual address 0 (R_Key :data:`RKEY`), and the local memory
:data:`IMAGE` bytes from address 0 hold :data:`PATTERN`. The READ hole wait is
:data:`HOLE_WAIT` microseconds (``rdwait``), the completions are taken with a chance of 0.2 of
``ready`` low in a cycle; an AXI4 memory (cocotbext-axi's) stalls each of its channels
in a cycle with chance 0.2 or 0.3. Once every work request has completed, the counters are read (their
increase over the scenario), then the host's counters, the host's region and the local memory
image (on chip: RDMA-WRITten by QP :data:`READBACK_QP` to the host; AXI4: from the AXI RAM) are
taken. A result holds ``name``, ``cpls`` (``[wr_id, status]`` in completion order), ``stats``,
``host`` (the host's counters), ``host_region`` and ``image`` (base64), ``cycles`` (from the
QP's opening to the last completion) and ``links`` (the counters of both links).
"""

import base64
import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rocegen.gateware.lib.records import pack
from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.frontend.stream_in import STREAM_META
from rocegen.gateware.roce.layouts import WrOpcode
from rocegen.sim.cocotb.roce_resp import MEM, MEMORY, RespEnv, W, roce_bth, share
from rocegen.sim.models.cm.cm import (
    ACK_ACK,
    CM_PORT,
    REPLY_PORT,
    REQ_CLOSE_QP,
    REQ_OPEN_QP,
    pmtu_code,
    request,
    unpack,
    with_read_depths,
)
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import IDEAL, Access, Rnic
from rocegen.sim.testing.cocotb_helpers import pauses
from rocegen.sim.testing.roce_env import (
    board_clock_mhz,
    now_cycle,
    open_qp,
    qpn,
    wait_cycles,
    wait_until,
    write_onchip,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip
from rocegen.wire.opcodes import OP_RC_RDMA_READ_REQUEST

#: The host's QP that answers QP 0, and the R_Key of its region.
HOST_QPN = 0x21
RKEY = 0x4321
#: The host's region the endpoint READs and WRITEs (virtual address 0).
HOST_REGION = 1 << 16
#: Local bytes from address 0 set to :data:`PATTERN` before a scenario and taken after it.
IMAGE = 1 << 16
PATTERN = 0x5A
#: QP 0's first PSN in every scenario (the PSNs wrap during it).
PSN = 0xFFFFF8
#: The READ hole wait, in microseconds (see ``tests/test_cocotb_read_requester.py``).
HOLE_WAIT = 8
#: The QP whose RDMA WRITE reads the on-chip memory back (opened after each scenario: QP 1 must
#: stay closed during the scenarios, which post on it).
READBACK_QP = 7
#: The connection manager's replies come to this host port.
CM_REPLY_PORT = 50001
MAX_CYCLES = 3_000_000


async def read_counters(dut, names):
    """The counters ``names`` (:data:`STATS`), by name."""
    values = {}
    for name in names:
        dut.stats_addr.value = STATS.index(name)
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        values[name] = int(dut.stats_data.value)
    return values


class SkipCmReplies:
    """The MAC model's frame check, but for the connection manager's replies, which it leaves
    out: the check encodes the replies of an endpoint without the responder (no memory region,
    no READ depths), and a responder build's ACK names its QP's region and READ depths. The
    testbench checks the replies it asks for itself (:func:`cm_exchange`)."""

    def __init__(self, inner):
        self.inner = inner
        self.skipped = 0

    def check(self, frame):
        if frame[12:14] == b"\x08\x00" and frame[23] == 17 and \
                frame[34:36] == REPLY_PORT.to_bytes(2, "big"):
            self.skipped += 1
            return None
        return self.inner.check(frame)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def cm_exchange(env, payload, what):
    """Send a connection-manager datagram from the host; returns the reply's fields."""
    nic = env.nic
    n = len(nic.udp_rx)
    env.mac.to_endpoint(nic.udp_frame(FPGA_IP, 50000, CM_PORT, payload, dst_mac=FPGA_MAC))
    deadline = now_cycle(W) + 50_000
    while len(nic.udp_rx) <= n:
        if now_cycle(W) >= deadline:
            raise AssertionError(f"no reply from the connection manager to {what}")
        await wait_cycles(W, 50)
    reply = unpack(nic.udp_rx[n][3])
    assert reply["ack_valid"] == 1 and reply["ack_type"] == ACK_ACK, f"{what}: {reply}"
    return reply


async def fill_pattern(env, image):
    """Local memory ``[0, IMAGE)`` := :data:`PATTERN`; ``image``: what it holds (as the last
    scenario's read-back took it), None if unknown. On chip, through the word-write port, only
    the words that differ from the pattern when ``image`` is known (a cycle a word)."""
    fill = bytes([PATTERN]) * IMAGE
    if MEMORY != "onchip":
        env.ram.write(0, fill)
        return
    if image is None:
        await write_onchip(env.dut, W, MEM, 0, fill)
        return
    B = W // 8
    wrong = [a for a in range(0, IMAGE, B) if image[a:a + B] != fill[a:a + B]]
    while wrong:
        end = 1
        while end < len(wrong) and wrong[end] == wrong[end - 1] + B:
            end += 1
        await write_onchip(env.dut, W, MEM, wrong[0], fill[:end * B])
        wrong = wrong[end:]


async def scenario(env, sc, n):
    dut = env.dut
    name = sc.get("name", str(n))
    pmtu = sc["pmtu"]
    seed = sc.get("seed", 0)
    rng = random.Random(seed)
    await env.mac.drained()
    # a fresh host, its region random bytes
    nic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, udp_ports=(CM_REPLY_PORT,))
    env.nic = env.mac.nic = nic
    qps = sc.get("qps", 1)
    for k in range(qps):
        nic.create_qp(HOST_QPN + k, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                      epsn=PSN, pmtu=pmtu,
                      access=Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC,
                      max_dest_rd_atomic=sc.get("host_rd", 16))
    mr = nic.register_mr(0, HOST_REGION, RKEY, Access.LOCAL_WRITE | Access.REMOTE_WRITE |
                         Access.REMOTE_READ | Access.REMOTE_ATOMIC)
    mr.buf[:] = rng.randbytes(HOST_REGION)
    for kind, kw in sc.get("faults", ()):
        nic.read_fault(kind, **kw)
    wrs = [dict(w) for w in sc["wrs"]]
    for w in wrs:
        w["opcode"] = WrOpcode[w["opcode"]]
        if w["local_addr"] < 0:
            w["local_addr"] += MEM
    for k in range(sum(w["opcode"] in (WrOpcode.SEND, WrOpcode.SEND_IMM) for w in wrs)):
        nic.post_recv(HOST_QPN, 1 << 16, wr_id=1000 + k)
    # the links: random loss each way, and the READ request frames to lose
    loss = sc.get("loss", 0.0)
    to_nic = Link(loss=loss, seed=2 * seed + 1, name="to NIC")
    from_nic = Link(loss=loss, seed=2 * seed + 2, name="from NIC")
    drop = set(sc.get("drop_requests", ()))
    drop_repeats = set(sc.get("drop_repeats", ()))
    requests = {"all": 0, "repeats": 0, "highest": None}

    def lost_request(frame):
        bth = roce_bth(frame)
        if bth is None or bth["opcode"] != OP_RC_RDMA_READ_REQUEST:
            return False
        n, high = requests["all"], requests["highest"]
        requests["all"] += 1
        if high is None or 0 < (bth["psn"] - high) % (1 << 24) < 1 << 23:
            requests["highest"] = bth["psn"]
            return n in drop
        requests["repeats"] += 1
        return n in drop or requests["repeats"] - 1 in drop_repeats
    to_nic.drop_matching(lost_request)
    env.mac.to_nic, env.mac.from_nic = to_nic, from_nic
    await fill_pattern(env, getattr(env, "image", None))
    for addr, data in sc.get("poke", ()):
        data = base64.b64decode(data)
        if MEMORY == "onchip":
            await write_onchip(dut, W, MEM, addr, data)
        else:
            env.ram.write(addr, data)
        env.image = None            # (the pattern's copy no longer holds)
    if sc.get("rd_limit"):
        reply = await cm_exchange(env, with_read_depths(request(
            REQ_OPEN_QP, loc_qpn=HOST_QPN, loc_psn=PSN, loc_rkey=RKEY, loc_vaddr=0,
            loc_ip=parse_ip(HOST_IP), listening_port=CM_REPLY_PORT, pmtu_code=pmtu_code(pmtu)),
            0, sc["rd_limit"]), f"{name}: OPEN_QP")
        assert reply["loc_qpn"] == qpn(0), f"{name}: the connection manager opened {reply}"
    names = sc.get("stats", ())
    before = await read_counters(dut, names)
    for k in range(qps):
        await open_qp(env.ctl, env.psn, k, peer_ip=parse_ip(HOST_IP), peer_qpn=HOST_QPN + k,
                      rkey=RKEY, base_va=0, pmtu=pmtu, psn=PSN, udp_sport=0xC123 + k,
                      ack_every_log2=3, timeout=sc.get("timeout", 1), retry_cnt=7)
    env.mac.clear_sent()
    start = now_cycle(W)
    first = len(env.cpl.items)
    for k, w in enumerate(wrs):
        await env.wr.send({"qp": 0, "wr_id": k, "imm": 0, **w})     # (``qp`` in w wins)
        if rng.random() < 0.3:
            await ClockCycles(dut.clk, rng.randrange(1, 30))
    stream = sc.get("stream", ())
    if stream:
        await push_stream(env, stream)
    await env.cpl.wait_for(first + len(wrs), max_cycles=MAX_CYCLES)
    atomics = sum(op in ("FETCH_ADD", "COMPARE_SWAP") for op, _, _ in stream)
    await wait_until(env.mac, lambda: nic.counters["atomic_rx"] >= atomics,
                     max_cycles=MAX_CYCLES,
                     what=lambda: f"{name}: the host executed {nic.counters['atomic_rx']} of "
                     f"the {atomics} streamed atomics")
    cycles = now_cycle(W) - start
    after = await read_counters(dut, names)
    bits = len(dut.stats_data)
    stats = {k: (after[k] - before[k]) % (1 << bits) for k in names}
    cpls = [[c["wr_id"], c["status"]] for c in env.cpl.items[first:]]
    await ClockCycles(dut.clk, 50)
    host = dict(nic.counters)
    region = bytes(mr.buf)
    links = {"to_nic": dict(to_nic.counters), "from_nic": dict(from_nic.counters)}
    if sc.get("rd_limit"):
        await cm_exchange(env, request(REQ_CLOSE_QP, rem_qpn=qpn(0),
                                       listening_port=CM_REPLY_PORT), f"{name}: CLOSE_QP")
    for k in range(1, qps):         # (the other QPs closed again)
        await env.ctl.send({"qp": k, "context": {"state": 0}})
    # the local memory image: the links are perfect from here
    await env.mac.drained()
    env.mac.to_nic = env.mac.from_nic = None
    if MEMORY == "onchip":
        await env.open(READBACK_QP, pmtu=4096 if W == 512 else 1024, psn=0x123456,
                       region=share(0, 1), timeout=0)
    image = env.image = bytes(await env.readback(READBACK_QP, 0, IMAGE))
    if MEMORY == "onchip":      # (closed again: the scenarios expect QPs 1.. closed)
        await env.ctl.send({"qp": READBACK_QP, "context": {"state": 0}})
    return {"name": name, "cpls": cpls, "stats": stats, "host": host, "cycles": cycles,
            "links": links,
            "host_region": base64.b64encode(region).decode(),
            "image": base64.b64encode(image).decode()}


async def push_stream(env, stream):
    """The messages ``stream`` (see the module documentation) on the streaming input."""
    dut = env.dut
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_msg_axis"), dut.clk, dut.rst)
    src.log.setLevel("WARNING")
    for op, offset, data in stream:
        dut.msg_meta.value = pack(STREAM_META, {"qp": 0, "opcode": WrOpcode[op], "imm": 0,
                                                "remote_offset": offset})
        await src.send(AxiStreamFrame(base64.b64decode(data), tuser=0))
        await src.wait()


@cocotb.test()
async def scenarios(dut):
    """The scenarios of ``READ_SCENARIOS``; results to ``ROCE_RESULTS``."""
    plan = json.loads(os.environ["READ_SCENARIOS"])
    env = RespEnv(dut)
    await env.start()
    env.mac.framecheck = SkipCmReplies(env.mac.framecheck)
    # the READ hole wait: 4 steps of the READ timer
    await env.rdwait.send({"step": -(-round(HOLE_WAIT * board_clock_mhz(W)) // 4)})
    # (the completions taken with ready low in a cycle with chance 0.2)
    dut.cpl_bp_threshold.value = round(0.2 * 65536)
    if MEMORY != "onchip":      # the AXI4 memory stalls its channels now and then
        rng = random.Random(W)
        for channel, p in ((env.ram.write_if.aw_channel, 0.3), (env.ram.write_if.w_channel, 0.3),
                           (env.ram.write_if.b_channel, 0.2), (env.ram.read_if.ar_channel, 0.2),
                           (env.ram.read_if.r_channel, 0.2)):
            channel.set_pause_generator(pauses(rng, p))
    results = []
    for n, sc in enumerate(plan):
        try:
            out = await scenario(env, sc, n)
        except Exception as e:      # (the failure names its scenario; later ones do not run)
            raise AssertionError(f"scenario {sc.get('name', n)}: {e}") from e
        dut._log.info(f"scenario {out['name']}: {out['cycles']} cycles, stats {out['stats']}")
        results.append(out)
        with open(os.environ["ROCE_RESULTS"], "w") as f:     # (what ran, should one fail)
            json.dump(results, f)
