"""Round trips without software, on the endpoint's RC responder build
(:class:`~rocegen.sim.cocotb.roce_resp.RespEnv`): the runs of ``"kind": "roundtrip"`` of
:mod:`rocegen.sim.cocotb.roce_resp_runs` (the benchmark suite's batch ``roundtrip``,
``rocegen bench --only roundtrip``, and ``python -m bench.bench_roundtrip``).

A run has ``test``, ``size`` (payload bytes), ``count`` (samples), ``pmtu`` and ``line_gbps``
(both directions' line rate), on QP 0 through the MAC model on a perfect link. Before each
sample the endpoint is left idle for :data:`IDLE_CYCLES` cycles; one sample before them, not
counted, lets the endpoint learn the host's MAC address (its ARP lookup).

``send``
    A SEND ping-pong, as ``ib_send_lat`` runs one between two hosts. The endpoint SENDs
    ``size`` bytes of its memory (a work request on its ``wr`` port); the host NIC model
    SENDs the bytes it received back as soon as it has the SEND whole (the peer's software
    takes no time); the endpoint places them in a receive buffer. Round trip: from the clock
    edge that took the work request to the receive completion of the echo on ``rcpl``. Parts:
    ``tx`` (the work request to the first beat of the SEND on the MAC), ``out`` (from the
    SEND's first beat to the end of its line time, when the host has it whole; the echo is
    posted in the first cycle from there), ``turn`` (from there to the start of the echo on
    the host's line: the rest of that cycle, and the host's ACK of the endpoint's SEND when it
    goes first), ``in`` (the echo's line time) and ``rx`` (the end of the echo's line time to
    its receive completion). Checked: the host received the
    endpoint's bytes, the echo landed in the endpoint's buffer (read back), the endpoint's
    SEND completed OK.
``write``
    The host NIC model RDMA WRITEs ``size`` bytes into the endpoint's region. Round trip: from
    the start of the WRITE on the host's line to the end of the line time of the endpoint's
    ACK, when the host has it whole. Parts: ``in`` (the WRITE's line time), ``resp`` (the end
    of it to the first beat of the ACK out) and ``out`` (from the ACK's first beat to the end
    of its line time). Checked: the host's WRITE completed OK, the bytes read back.
``read``
    The host NIC model RDMA READs ``size`` bytes of the endpoint's region (random bytes put
    there before). Round trip: from the start of the READ request on the host's line to the
    end of the line time of the endpoint's last response. Parts: ``in`` (the request's line
    time), ``resp`` (the end of it to the first beat of the first response) and ``out`` (from
    there to the end of the last response's line time). Checked: the READ completed OK with
    the region's bytes.

A result adds ``rtt_cycles`` (one per sample), ``parts`` (each part's cycles, one per sample,
line times in fractions of a cycle; they add up to the round trip), ``checked_bytes`` and, for
``write`` and ``read``, ``latency_cycles``: the endpoint's own latency as the other latency
figures count it, from the last beat of the request into the endpoint to the first beat of its
answer out (the ACK, the first READ response).
"""

import math

from cocotb.triggers import First, Timer

from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.gateware.roce.responder.resp_layouts import RecvOpcode, RecvStatus
from rocegen.sim.cocotb.roce_resp import (
    HOST_QPN,
    MAX_CYCLES,
    B,
    W,
    plan_messages,
    rkey_of,
    roce_opcode,
    send_round,
    share,
)
from rocegen.sim.models.rnic import WcOpcode, WcStatus
from rocegen.sim.testing.roce_env import (
    now_cycle,
    period_ps,
    timeout_code,
    wait_cycles,
)
from rocegen.wire.opcodes import (
    OP_RC_ACKNOWLEDGE,
    OP_RC_RDMA_READ_RESPONSE_FIRST,
    OP_RC_RDMA_READ_RESPONSE_ONLY,
    OP_RC_SEND_FIRST,
    OP_RC_SEND_ONLY,
)

#: cycles the endpoint is left idle before each sample (everything before it answered and placed)
IDLE_CYCLES = 2000
#: the tests of a round-trip run
TESTS = ("send", "write", "read")
RESPONSES = range(OP_RC_RDMA_READ_RESPONSE_FIRST, OP_RC_RDMA_READ_RESPONSE_ONLY + 1)


async def roundtrip_run(env, run, n):
    """One round-trip run (see the module documentation); returns its figures."""
    test = run.get("test")
    if test not in TESTS:
        raise ValueError(f"run {n}: a round-trip run's test is one of {TESTS}, not {test!r}")
    size, count = run.get("size", 64), run.get("count", 8)
    if not 1 <= size <= share(0, 1)[1] // 4:
        raise ValueError(f"run {n}: size must be from 1 to {share(0, 1)[1] // 4}, not {size}")
    timeout = timeout_code(run)
    log0 = len(env.nic.log)
    env.mac.clear_sent()
    await env.open(0, pmtu=run.get("pmtu", 4096), psn=env.rng.getrandbits(24),
                   region=share(0, 1), timeout=timeout)
    sample = {"send": _send_sample, "write": _write_sample, "read": _read_sample}[test]
    rtt, parts, checked, latency = [], {}, 0, []
    await sample(env, size, f"run {n}, warm-up")     # (the endpoint learns the host's MAC)
    for i in range(count):
        await wait_cycles(W, IDLE_CYCLES)
        got = await sample(env, size, f"run {n}, sample {i}")
        rtt.append(round(got.pop("rtt"), 3))
        checked += got.pop("checked")
        if "latency" in got:
            latency.append(got.pop("latency"))
        for name, value in got.items():
            parts.setdefault(name, []).append(round(value, 3))
    # (a perfect link: the host logs nothing, neither a drop nor a NAK)
    problems = env.nic.log[log0:]
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    return {"rtt_cycles": rtt, "parts": parts, "checked_bytes": checked, "timeout": timeout,
            **({"latency_cycles": latency} if latency else {})}


async def _fill(env, addr, data):
    """The endpoint's memory ``[addr, addr + len(data))`` := ``data``; the shadow learns it."""
    env.shadow[addr:addr + len(data)] = data
    await env.store(addr, len(data))


async def _send_sample(env, size, what):
    """One SEND ping-pong (see the module documentation)."""
    nic, mac, hq = env.nic, env.mac, HOST_QPN
    base, length = share(0, 1)
    src = base
    dst = base + length // 2
    data = env.rng.randbytes(size)
    await _fill(env, src, data)
    env.recv_id += 1
    host_id, fpga_id = env.recv_id, env.recv_id
    nic.post_recv(hq, size, host_id)
    await env.post_recv(0, fpga_id, dst, size)
    env.wr_id += 1
    cpl0, rcpl0, frames0, reqs0 = len(env.cpl.items), len(env.rcpl.items), len(mac.frames), \
        len(mac.requests)
    t0 = await env.wr.send({"wr_id": env.wr_id, "qp": 0, "opcode": WrOpcode.SEND,
                            "local_addr": src, "length": size, "remote_offset": 0, "imm": 0})
    t0 //= period_ps(W)
    # the host's receive: its echo is posted in the cycle the receive completes
    deadline = now_cycle(W) + MAX_CYCLES
    received = []
    while not received:
        if now_cycle(W) >= deadline:
            raise AssertionError(f"{what}: the host received no SEND; it logged {nic.log[-3:]}")
        mac.event.clear()
        await First(mac.event.wait(), Timer(2000 * period_ps(W), unit="ps"))
        received = nic.poll_cq()
    assert [(c.wr_id, c.opcode, c.status, c.byte_len) for c in received] == \
        [(host_id, WcOpcode.RECV, WcStatus.SUCCESS, size)], f"{what}: host received {received}"
    assert bytes(received[0].data[:size]) == data, f"{what}: the host received other bytes"
    sent = [i for i in range(frames0, len(mac.frames))
            if roce_opcode(mac.frames[i][2]) in (OP_RC_SEND_ONLY, OP_RC_SEND_FIRST)]
    assert sent, f"{what}: no SEND from the endpoint"
    first, out_end = mac.frames[sent[0]][0], mac.line[sent[-1]][1]
    # (the MAC model hands a frame over with its last beat; the host has it at the end of its
    # line time)
    await wait_cycles(W, max(0, math.ceil(out_end) - now_cycle(W)))
    cq0 = len(nic.send_cq)
    mac.post_send(hq, "SEND", data=data)
    await env.settle(lambda: len(env.rcpl.items) > rcpl0 and len(env.cpl.items) > cpl0,
                     f"{what}: no receive completion of the echo", max_cycles=MAX_CYCLES)
    rc = env.rcpl.items[rcpl0]
    assert (rc["wr_id"], rc["opcode"], rc["status"], rc["length"]) == \
        (fpga_id, RecvOpcode.SEND.value, RecvStatus.OK.value, size), f"{what}: {rc}"
    done = env.rcpl.cycles[rcpl0]
    cpl = env.cpl.items[cpl0]
    assert (cpl["wr_id"], cpl["status"]) == (env.wr_id, CplStatus.OK.value), f"{what}: {cpl}"
    echo = mac.requests[reqs0:]
    assert echo, f"{what}: the host's echo never left it"
    echo_start, echo_end = echo[0][0], echo[-1][1]
    await _settled(env, cq0)
    env.shadow[dst:dst + size] = data
    checked = await env.check_memory(0, dst, size, what=what)
    return {"rtt": done - t0, "checked": checked + size, "tx": first - t0, "out": out_end - first,
            "turn": echo_start - out_end, "in": echo_end - echo_start, "rx": done - echo_end}


async def _write_sample(env, size, what):
    """One host WRITE to its ACK (see the module documentation)."""
    mac = env.mac
    base, length = share(0, 1)
    msgs = plan_messages(env, 0, ["WRITE"], [size], (base, length // 2))
    marks = await send_round(env, msgs)
    write = mac.requests[marks[0]:]
    acks = [i for i in range(marks[1], len(mac.frames))
            if roce_opcode(mac.frames[i][2]) == OP_RC_ACKNOWLEDGE]
    assert write and acks, f"{what}: {len(write)} WRITE packets, {len(acks)} ACKs"
    start, in_end = write[0][0], write[-1][1]
    ack_first, ack_end = mac.frames[acks[0]][0], mac.line[acks[0]][1]
    # (the WRITE is the last frame into the endpoint: the host sends nothing after it)
    last_in = int(env.dut.rx_last_cycle.value) + env.offset
    checked = await env.check_memory(0, msgs[0]["addr"], size, what=what)
    return {"rtt": ack_end - start, "checked": checked, "in": in_end - start,
            "resp": ack_first - in_end, "out": ack_end - ack_first, "latency": ack_first - last_in}


async def _read_sample(env, size, what):
    """One host READ to its last response (see the module documentation)."""
    nic, mac = env.nic, env.mac
    base, length = share(0, 1)
    addr = base + env.rng.randrange(0, length // 2 - size)
    await _fill(env, addr - addr % B, env.rng.randbytes(size + addr % B))
    frames0, reqs0, cq0 = len(mac.frames), len(mac.requests), len(nic.send_cq)
    env.wr_id += 1
    mac.post_send(HOST_QPN, "READ", length=size, remote_addr=addr, rkey=rkey_of(0),
                  wr_id=env.wr_id)
    await env.settle(lambda: not nic.send_outstanding(),
                     lambda: f"{what}: the host's READ never completed; it logged {nic.log[-3:]}",
                     max_cycles=MAX_CYCLES)
    done = nic.send_cq[cq0:]
    assert [(c.wr_id, c.opcode, c.status) for c in done] == \
        [(env.wr_id, WcOpcode.RDMA_READ, WcStatus.SUCCESS)], f"{what}: the READ completed {done}"
    assert bytes(done[0].data) == bytes(env.shadow[addr:addr + size]), \
        f"{what}: the READ brought other bytes than the region holds"
    request = mac.requests[reqs0:]
    resp = [i for i in range(frames0, len(mac.frames))
            if roce_opcode(mac.frames[i][2]) in RESPONSES]
    assert len(request) == 1 and resp, f"{what}: {len(request)} requests, {len(resp)} responses"
    last_in = int(env.dut.rx_last_cycle.value) + env.offset
    start, in_end = request[0]
    first, end = mac.frames[resp[0]][0], mac.line[resp[-1]][1]
    return {"rtt": end - start, "checked": size, "in": in_end - start, "resp": first - in_end,
            "out": end - first, "latency": first - last_in}


async def _settled(env, cq0):
    """Wait until the host's requester has nothing outstanding (its echo acknowledged, its
    completion the one after ``cq0`` in the host's send queue)."""
    await env.settle(lambda: not env.nic.send_outstanding(),
                     "the host's echo was never acknowledged", max_cycles=MAX_CYCLES)
    done = env.nic.send_cq[cq0:]
    assert [c.status for c in done] == [WcStatus.SUCCESS], f"the host's echo completed {done}"
