"""cocotb testbench of RDMA READ between the endpoint built with its RC responder (and, with it, its
READ requester: ``RoceEndpoint(responder=True)``, the test top
:class:`~rocegen.sim.testing.roce_tops.EndpointTop`) and the host NIC model (strict), behind
``rocegen sim demo --peer-op READ`` and ``--op READ``. The set-up, the MAC model, the links and
the read-back of the endpoint's memory are those of :mod:`rocegen.sim.cocotb.roce_resp`
(:class:`~rocegen.sim.cocotb.roce_resp.RespEnv`).

The cocotb test ``runs`` takes the runs listed in ``ROCE_RUNS`` (JSON) and writes their figures
to the file ``ROCE_RESULTS``. A run is a dict with ``qps``, ``pmtu``, ``bytes`` (per QP),
``size`` (message size), ``line_gbps`` and the link's ``loss``, ``dup``, ``reorder``,
``corrupt``, ``seed``, ``rtt_us`` (as :mod:`rocegen.sim.cocotb.roce_resp`'s runs), and ``kind``:

``peer_read``
    The host READs the endpoint. Each round, the host first RDMA-WRITEs random bytes into each
    QP's share of the responder's region (one message of ``size`` bytes after the other, each
    at a random small skew: :func:`~rocegen.sim.cocotb.roce_resp.plan_messages`), every WRITE
    completing OK; then it READs every one of those messages back, round robin over the QPs
    (the NIC model keeps 16 READs outstanding per QP, the endpoint takes 16). Checked: every
    READ completes OK with exactly the bytes the endpoint's memory holds there (what the
    WRITEs put). Figures: the READs' payload over the time from the first READ request's start
    on the host's line to the last beat of the endpoint's last READ response.
``read``
    The endpoint READs the host (work requests ``WrOpcode.READ`` on ``wr``). Each round, the
    host's memory of each QP holds random bytes; message ``m`` of QP ``k`` READs ``size`` of
    them at remote offset ``o`` into the endpoint's local memory at ``share base + o`` (plus a
    random small skew: any byte address), round robin over the QPs. Checked: every work
    request completes OK (in order, with its ``wr_id``), and the endpoint's memory, written
    back to the host by its own RDMA WRITEs, holds exactly the bytes read. Figures: the READs'
    payload over the time from the first beat of the endpoint's first READ request to the end
    of the host's last READ response on the line.

Rounds: a run larger than the QPs' shares of the region goes in rounds, each checked before
the next. A result adds ``messages``, ``packets`` (READ response packets), ``rounds``,
``checked_bytes``, ``line_cycles``, ``goodput_gbps``, ``retransmitted`` (requests the host
resent), ``read_retries`` (READs the requester of the side that READs reissued after a loss),
the link counters, ``timeout``, ``sim_cycles``, ``wall_seconds`` and the frame check's figures.
"""

import json
import os
import time
from collections import Counter

import cocotb

from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.sim.cocotb.roce_demo import framecheck_wait
from rocegen.sim.cocotb.roce_resp import (
    HOST_BASE,
    HOST_BYTES,
    HOST_QPN,
    MAX_CYCLES,
    RespEnv,
    W,
    plan_messages,
    rkey_of,
    roce_opcode,
    send_round,
    share,
)
from rocegen.sim.models.rnic import Access, WcOpcode, WcStatus
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.roce_env import board_clock_mhz, link_pair, now_cycle, qpn, timeout_code
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC
from rocegen.wire.opcodes import (
    OP_RC_RDMA_READ_REQUEST,
    OP_RC_RDMA_READ_RESPONSE_FIRST,
    OP_RC_RDMA_READ_RESPONSE_ONLY,
)

KINDS = ("peer_read", "read")
#: BTH opcodes of the READ responses
RESPONSES = range(OP_RC_RDMA_READ_RESPONSE_FIRST, OP_RC_RDMA_READ_RESPONSE_ONLY + 1)


@cocotb.test()
async def runs(dut):
    """The runs of ``ROCE_RUNS``; results to ``ROCE_RESULTS``."""
    plan = json.loads(os.environ["ROCE_RUNS"])
    pcap = PcapWriter(os.environ["PCAP"]) if os.environ.get("PCAP") else None
    env = RespEnv(dut, peer=os.environ.get("ROCE_PEER", "connectx"), pcap=pcap)
    await env.start()
    results = []
    for n, run in enumerate(plan):
        if run["kind"] not in KINDS:
            raise ValueError(f"run {n}: kind must be one of {KINDS}, not {run['kind']!r}")
        await env.mac.drained()
        run_cycle, run_wall = now_cycle(W), time.perf_counter()
        fc = (Counter(env.mac.framecheck.counts), len(env.mac.frames), env.mac.framecheck.seconds,
              framecheck_wait(env.mac))
        env.mac.bytes_per_cycle = (run["line_gbps"] * 1e9 / 8 / (board_clock_mhz(W) * 1e6)
                                   if run.get("line_gbps") else None)
        env.mac.to_nic, env.mac.from_nic = link_pair(run, board_clock_mhz(W))
        out = await read_run(env, run, n)
        new = {k: v - fc[0][k] for k, v in env.mac.framecheck.counts.items() if v - fc[0][k]}
        assert new.get("frames", 0) == len(env.mac.frames) - fc[1], "frames not checked"
        results.append({**run, **out, "width": W, "clock_mhz": board_clock_mhz(W),
                        "framecheck": new,
                        "framecheck_seconds": round(env.mac.framecheck.seconds - fc[2], 3),
                        "framecheck_wait_seconds": round(framecheck_wait(env.mac) - fc[3], 3),
                        "sim_cycles": now_cycle(W) - run_cycle,
                        "wall_seconds": time.perf_counter() - run_wall})
    if pcap:
        pcap.close()
    with open(os.environ["ROCE_RESULTS"], "w") as f:
        json.dump(results, f, indent=1)


async def open_read_qp(env, k, *, pmtu, psn, region, timeout):
    """QP k on both sides; the host's QP and its memory also answer the endpoint's READs."""
    hq = HOST_QPN + k
    if hq in env.nic.qps:
        env.nic.destroy_qp(hq)
    env.nic.create_qp(hq, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=psn,
                      pmtu=pmtu, timeout=timeout or 8,
                      access=Access.REMOTE_WRITE | Access.REMOTE_READ)
    env.nic.deregister_mr(0x3000 + k)
    env.nic.register_mr(HOST_BASE + (k << 36), HOST_BYTES, 0x3000 + k,
                        Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
    await env.open(k, pmtu=pmtu, psn=psn, region=region, timeout=timeout, host=False)


async def read_run(env, run, n):
    kind, qps, pmtu = run["kind"], run.get("qps", 1), run["pmtu"]
    size = run["size"]
    per_qp = run.get("bytes", size)
    if size < 1 or per_qp < 1:
        raise ValueError(f"run {n}: size and bytes must be >= 1")
    timeout = timeout_code(run)
    env.mac.clear_sent()
    for k in range(qps):
        await open_read_qp(env, k, pmtu=pmtu, psn=env.rng.getrandbits(24), region=share(k, qps),
                           timeout=timeout)
    c0 = Counter(env.nic.counters)
    line_cycles = payload = checked = messages = packets = rounds = 0
    left = {k: per_qp for k in range(qps)}
    while any(left.values()):
        msgs = []
        for k in range(qps):
            count = -(-left[k] // size) if left[k] else 0
            sizes = [min(size, left[k] - i * size) for i in range(count)]
            msgs += plan_messages(env, k, ["WRITE"] * count, sizes, share(k, qps))
        if not msgs:
            raise ValueError(f"run {n}: a message of {size} bytes does not fit the region's share "
                             f"of {share(0, qps)[1]} bytes")
        for m in msgs:
            left[m["k"]] -= len(m["data"])
        order = round_robin(msgs)
        if kind == "peer_read":
            await send_round(env, msgs)         # the bytes the READs then read
            cycles, got = await host_reads(env, order, n)
            checked += got
        else:
            cycles = await endpoint_reads(env, order, {k: share(k, qps)[0] for k in range(qps)}, n)
            for k in range(qps):
                base = share(k, qps)[0]
                end = max(m["addr"] + len(m["data"]) for m in msgs if m["k"] == k)
                checked += await env.check_memory(k, base, end - base, what=f"run {n}")
        rounds += 1
        line_cycles += cycles
        payload += sum(len(m["data"]) for m in msgs)
        messages += len(msgs)
        packets += sum(-(-len(m["data"]) // pmtu) for m in msgs)
    c = Counter(env.nic.counters)
    c.subtract(c0)
    problems = env.host_problems(faulty=True)
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    period = 1 / board_clock_mhz(W)
    return {"timeout": timeout, "line_cycles": line_cycles, "messages": messages,
            "packets": packets, "rounds": rounds, "checked_bytes": checked,
            "goodput_gbps": payload * 8 / (line_cycles * period * 1e3) if line_cycles else 0,
            "retransmitted": c["req_retx"],
            "read_retries": c["req_read_retry"] if kind == "peer_read" else None,
            "host_read_responses": c["read_resp_tx"], "host_reads_executed": c["read_rx"],
            "link_to_nic": dict(env.mac.to_nic.counters) if env.mac.to_nic else None,
            "link_from_nic": dict(env.mac.from_nic.counters) if env.mac.from_nic else None}


def round_robin(msgs):
    """``msgs`` taken one per QP in turn."""
    queues = {}
    for m in msgs:
        queues.setdefault(m["k"], []).append(m)
    out = []
    while queues:
        for k in list(queues):
            out.append(queues[k].pop(0))
            if not queues[k]:
                del queues[k]
    return out


async def host_reads(env, msgs, n):
    """The host READs every message of ``msgs`` back; returns ``(line cycles, bytes
    compared)``."""
    mac, nic = env.mac, env.nic
    first_cq, first_req, first_frame = len(nic.send_cq), len(mac.requests), len(mac.frames)
    ids = []
    for m in msgs:
        env.wr_id += 1
        ids.append(env.wr_id)
        nic.post_send(HOST_QPN + m["k"], "READ", length=len(m["data"]), remote_addr=m["addr"],
                      rkey=rkey_of(m["k"]), wr_id=env.wr_id)
    mac.poke()
    await env.settle(lambda: not nic.send_outstanding(),
                     lambda: f"{nic.send_outstanding()} host READs outstanding; the host logged "
                     f"{nic.log[-3:]}", max_cycles=MAX_CYCLES)
    done = nic.send_cq[first_cq:]
    assert len(done) == len(msgs), f"run {n}: {len(done)} completions for {len(msgs)} READs"
    by_qp = {}
    for c in done:
        by_qp.setdefault(c.qpn, []).append(c)
    compared = 0
    for m, wid in zip(msgs, ids):
        c = by_qp[HOST_QPN + m["k"]].pop(0)         # in the order of posting, per QP
        assert (c.wr_id, c.opcode, c.status) == (wid, WcOpcode.RDMA_READ, WcStatus.SUCCESS), \
            f"run {n}: READ {wid} completed as {c}"
        want = bytes(env.shadow[m["addr"]:m["addr"] + len(m["data"])])
        if c.data != want:
            at = next(i for i in range(len(want)) if c.data[i] != want[i])
            raise AssertionError(f"run {n}: READ of QP {m['k']} at {m['addr']:#x} returned "
                                 f"{c.data[at:at + 16].hex()} at {m['addr'] + at:#x}, the "
                                 f"endpoint's memory holds {want[at:at + 16].hex()}")
        compared += len(want)
    first = mac.requests[first_req][0] if len(mac.requests) > first_req else None
    last = max((l for _, l, fr in mac.frames[first_frame:] if roce_opcode(fr) in RESPONSES),
               default=None)
    return (last + 1 - first if first is not None and last is not None else 0), compared


async def endpoint_reads(env, msgs, bases, n):
    """The endpoint READs every message of ``msgs`` from the host's memory (at the message's
    offset from its QP's share base, ``bases[k]``) into its own; returns the line cycles. The
    testbench's shadow of the endpoint's memory learns the bytes."""
    mac, nic = env.mac, env.nic
    for m in msgs:
        m["remote"] = m["addr"] - bases[m["k"]]
        nic.write_mem(HOST_BASE + (m["k"] << 36) + m["remote"], m["data"])
    first_cpl, first_req, first_frame = len(env.cpl.items), len(mac.requests), len(mac.frames)
    ids = []
    for m in msgs:
        env.wr_id += 1
        ids.append(env.wr_id)
        await env.wr.send({"wr_id": env.wr_id, "qp": m["k"], "opcode": WrOpcode.READ,
                           "local_addr": m["addr"], "length": len(m["data"]),
                           "remote_offset": m["remote"], "imm": 0})
    got = (await env.cpl.wait_for(first_cpl + len(msgs), max_cycles=MAX_CYCLES))[first_cpl:]
    want = {}
    for m, wid in zip(msgs, ids):
        want.setdefault(m["k"], []).append(wid)
    have = {}
    for c in got:
        assert c["status"] == CplStatus.OK.value, \
            f"run {n}: READ {c['wr_id']} of QP {c['qp']} completed with status " \
            f"{CplStatus(c['status']).name}"
        have.setdefault(c["qp"], []).append(c["wr_id"])
    assert have == want, f"run {n}: completions {have}, expected {want} (per QP, in order)"
    for m in msgs:
        env.shadow[m["addr"]:m["addr"] + len(m["data"])] = m["data"]
    reqs = [f for f, _, fr in mac.frames[first_frame:]
            if roce_opcode(fr) == OP_RC_RDMA_READ_REQUEST]
    ends = [e for _, e in mac.requests[first_req:]]
    return int(max(ends) - reqs[0]) if reqs and ends else 0
