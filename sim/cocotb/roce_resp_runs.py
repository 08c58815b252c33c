"""The runs of the endpoint's RC responder build, on :class:`~rocegen.sim.cocotb.roce_resp.RespEnv`:
the cocotb test ``runs`` runs those listed in ``ROCE_RUNS`` (JSON) and writes their figures to
the file ``ROCE_RESULTS`` (the benchmark suite's responder batches, ``rocegen bench``, and
``rocegen sim demo --peer-op``); :func:`~rocegen.sim.cocotb.roce_resp.data_run` and
:func:`~rocegen.sim.cocotb.roce_resp.fuzz_run` do the data and fuzz runs, :func:`read_run` the
READ runs, :func:`atomic_run` the atomics' runs and
:func:`~rocegen.sim.cocotb.roce_roundtrip.roundtrip_run` the round trips. A run is a dict:


``kind``
    ``responder`` (goodput and message rate), ``resp_latency``, ``bidir``, ``resp_fuzz``,
    ``read`` (RDMA READ both ways, below), ``atomic`` (the host's RDMA atomics, below),
    ``gen_atomic`` (the endpoint's) or ``roundtrip`` (:mod:`rocegen.sim.cocotb.roce_roundtrip`).
``qps``, ``pmtu``, ``bytes``, ``size``, ``opcode``
    QPs used, their path MTU, bytes per QP in messages of ``size`` bytes, the host's opcode
    (``WRITE``, ``WRITE_IMM``, ``SEND``, ``SEND_IMM``). WRITEs land one after the other in the
    QP's share of the responder's region, SENDs in receive buffers posted there; what does not
    fit goes in further rounds, each checked before the next.
``line_gbps``
    The line rate of both directions (0: the MAC takes a beat every cycle and the host sends
    a beat every cycle).
``loss``, ``dup``, ``reorder``, ``corrupt``, ``seed``, ``rtt_us``, ``timeout``
    The link (:func:`~rocegen.sim.testing.roce_env.link_pair`) and the retransmit timeout code
    of both requesters (:func:`~rocegen.sim.testing.roce_env.timeout_code`).
``frames``
    ``resp_fuzz``: hostile frames sent.

A result adds ``goodput_gbps`` (payload over the time from the first request's start on the
host's line to the first beat of the endpoint's last ACK, or to the end of the last request's
line time if that is later: see :func:`~rocegen.sim.cocotb.roce_resp.round_figures`),
``line_cycles`` (that time),
``messages``, ``packets``, ``checked_bytes`` (bytes read back and compared), ``host_frames``,
``retransmitted`` (requests the host sent again), ``rnr_naks`` and ``seq_naks`` (the NAKs it
received: a request the responder's ingress had no room for is dropped, and resent after the
sequence NAK of the next one), the link counters,
``sim_cycles``, ``wall_seconds`` and the frame check's figures; ``resp_latency``:
``latency_cycles`` (last beat of a request in to first beat of its ACK out); ``bidir``:
``tx_goodput_gbps`` (the generator's WRITEs to the host over their time on the line, from the
first one's start to the last one's end: the frames before the read-back, which follows once
the generator's last WRITE is acknowledged), ``tx_frames``, ``tx_acks`` (the responder's ACKs
that shared the line with them) and ``rx_goodput_gbps``; ``resp_fuzz``: the counters and their predictions.

READ runs (``"kind": "read"``, the benchmark suite's batch ``read``): the host NIC model READs
the endpoint's region (the endpoint's RC responder answers), and the endpoint READs the host's
memory (its READ requester: work requests with opcode READ on ``wr``,
remote address = the QP's base address + ``remote_offset``), on one QP, through the MAC model at
the run's line rate, over the run's link (round trip, loss).

Atomic runs without ``test`` (``"kind": "atomic"``, ``rocegen sim demo --peer-op
FETCH_ADD|COMPARE_SWAP``, a build with ``atomics``): the contended counter. The host NIC model
opens ``qps`` QPs, each with the responder's whole region, READs the 8-byte counter (the
region's last word), then every QP at once keeps up to ``outstanding`` (default
:data:`HOST_RD_ATOMIC`) atomics in flight on it: ``count`` FETCH_ADDs of 1 each (``opcode``
FETCH_ADD), or a COMPARE_SWAP spin (compare k, swap k + 1, guessing on from its last value,
tried again from the value found) until ``count`` swaps each took; then it READs the counter
again. Checked: every atomic completes OK, the counter rose by ``qps * count``, the values
returned (FETCH_ADD) or the values the swaps that took found (COMPARE_SWAP) are ``qps * count``
distinct consecutive numbers from the first READ. A result adds ``ops`` (atomics executed),
``successes`` (swaps that took), ``initial``, ``final``, ``distinct``, ``line_cycles`` (from the
start of the first atomic on the host's line to the end of the endpoint's last
ATOMIC_ACKNOWLEDGE on its own), ``ops_per_s`` (``ops`` over that time at the build's clock),
``atomic_acks`` (ATOMIC_ACKNOWLEDGE frames sent, resent answers to duplicates included), the
link counters and ``timeout``.

Atomic runs of the endpoint (``"kind": "gen_atomic"``, ``rocegen sim demo --op FETCH_ADD|
COMPARE_SWAP``, a build with atomics): the endpoint's traffic generator works on one 8-byte
counter of the host's memory (the first word of QP 0's; every QP's context points there, and the
host's QPs and region take atomics). One run per QP, one after the other (the generator's runs
as the connection manager starts them: ``count`` messages of 8 bytes, window 0, ``imm`` 1 for
FETCH_ADD and 0 for COMPARE_SWAP): ``count`` FETCH_ADDs of 1 each (the counter zeroed first, QP
``i``'s run takes it from ``i * count`` to ``(i + 1) * count``), or a COMPARE_SWAP chain each
(message ``s`` swaps in ``s + 1`` where it finds ``s``; the counter zeroed before each run,
which counts it up to ``count``). After each run: the generator counted ``count`` completions OK
and none in error, the counter holds what the model of the run
(:func:`rocegen.wire.atomic_runs.generator_run`) says, and the original values of its last (up
to) 64 messages, read back from the endpoint's memory (slots ``(s mod 64) * 64``,
little-endian), are the model's. A result adds ``ops``, ``initial`` (0), ``final``,
``expected``, ``originals_checked`` (originals read back and compared), ``distinct`` (distinct
values among them), ``counter`` (the host address), ``gen_cycles`` (the generator's cycles from
each run's first work request to its last completion, summed), ``ops_per_s`` (``ops`` over that
time at the build's clock), ``atomic_acks`` (ATOMIC_ACKNOWLEDGEs the host sent, answers to
duplicates included), ``host_executed`` (atomics the host executed: each once),
``host_duplicates`` (duplicates it answered from its results: the endpoint asked again for
atomics whose answers were lost), ``counters`` (the increase of the endpoint's counters of
:data:`RUN_COUNTERS` and ``rd_*`` over the run, the read-backs included: ``rd_hole``,
``rd_reissues`` tell its READ requester's own requests again), ``packets`` (atomic request
frames the endpoint sent, resent ones included), the link counters and ``timeout``. On a faulty
link a duplicate the host cannot answer from its results (one not the same request as the atomic
it executed at that PSN) fails the run.

A run's ``test``:

``responder``
    The host posts ``bytes // size`` READs of ``size`` bytes of the endpoint's region (filled
    before by the host's own WRITEs, the testbench's shadow knowing every byte), its requester
    keeping :data:`HOST_RD_ATOMIC` in flight. Goodput: payload over the READ responses' time on
    the endpoint's line, from the first one's start to the last one's end (``line_cycles``).
``requester``, ``loss``
    The endpoint READs ``bytes`` in READs of ``size`` from the host's memory (random bytes), at
    most ``outstanding`` work requests posted and not completed (the next one is posted when
    one completes), in rounds of the QP's share of the region (each round read back through the
    endpoint's RDMA WRITEs and compared with the host's bytes). Goodput: payload over the READ
    responses' time on the host's line (first response's start to last one's end, per round:
    ``line_cycles``), and to completion (``elapsed_us``: from the first work request of a round
    to its last completion, per round). ``loss`` runs have a lossy link each way.
``latency``
    ``count`` single READs of ``size`` bytes by the host: the cycles from the last beat of the
    request into the endpoint to the first beat of its first response out (``latency_cycles``).

A result adds ``messages``, ``packets`` (response packets), ``checked_bytes``, ``goodput_gbps``,
``line_cycles``, ``response_frames`` (READ response frames sent, resent ones included),
``read_requests`` (READ request frames sent: more than ``messages`` when READs were reissued),
the link counters and ``timeout``; ``requester`` and ``loss`` runs also ``counters``, the
increase of the endpoint's counters of :data:`RUN_COUNTERS` and ``rd_*`` over their READs. A
``loss`` run whose QP fails (a READ completing with an error, RETRY_EXCEEDED when its retries
ran out) ends there with ``failed`` (the status, the work request, the READs completed before
it) and no goodput; on a perfect link that fails the run.

Atomic runs (``"kind": "atomic"``, the benchmark suite's batches ``atomic`` and ``atomic-w64``;
a build with ``atomics``): the host NIC model's requester sends RDMA atomics (``opcode``
``FETCH_ADD`` or ``COMPARE_SWAP``) to the endpoint's region, which its responder executes, on
``qps`` QPs, through the MAC model at the run's line rate, on a perfect link. The targets are
8-byte words in the last 4 KiB of the region (:data:`ATOMIC_AREA`), set through the on-chip
memory's word-write port before the run. A run's ``test``:

``rate``
    ``count`` atomics on each of ``qps`` QPs, the host's requester keeping ``outstanding``
    (at most :data:`HOST_RD_ATOMIC`, its ``max_rd_atomic``) of each QP's in flight, posted
    round robin over the QPs. FETCH_ADD: every QP adds 1 to one counter they share (from a
    random start); COMPARE_SWAP: QP k swaps its own word from v to v + 1, v = its start, start
    + 1, ... (each finds its compare value: every one writes). Checks: every atomic completes
    OK with the right opcode; the FETCH_ADDs returned exactly the values start .. start + n - 1,
    each once, increasing on each QP (its PSN order); each QP's COMPARE_SWAPs returned start,
    start + 1, ... in order; the targets read back (the endpoint's own RDMA WRITE) hold start
    + n (FETCH_ADD) and each QP's start + ``count`` (COMPARE_SWAP); one ATOMIC_ACKNOWLEDGE per
    atomic and one request frame per atomic (nothing sent twice). Rate: the atomics over the
    ATOMIC_ACKNOWLEDGEs' time on the endpoint's line: the answers after the first over the
    time from the first one's start to the last one's start (``line_cycles``; an answer is
    shorter than a request, so the last one's own line time is not counted); ``elapsed_cycles``:
    from the first request's start on the host's line to the end of the last answer.
``latency``
    ``count`` single atomics on an endpoint idle for :data:`IDLE_CYCLES` cycles, each on the
    next 8-byte lane of a word:
    the cycles from the last beat of the request into the endpoint to the first beat of its
    ATOMIC_ACKNOWLEDGE out (``latency_cycles``); each returned value and the word after it
    are checked (the latter after the samples).
``read_latency``
    The READ runs' ``latency`` (single READs of ``size`` bytes, measured the same way) in the
    same build, for comparison, after the region is filled and :data:`IDLE_CYCLES` cycles.

A result adds ``messages`` (atomics), ``answers`` (ATOMIC_ACKNOWLEDGEs sent), ``requests``
(atomic request frames the host sent), ``checked_atomics`` (atomics whose returned value was
checked), ``final_checked`` (the targets read back as predicted), ``line_cycles``,
``elapsed_cycles``, ``mops`` (millions of atomics per second at the build's clock), and the
latency runs ``latency_cycles``.
"""

import json
import os
import time
from collections import Counter

import cocotb

from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.sim.cocotb.roce_demo import framecheck_wait
from rocegen.sim.cocotb.roce_resp import (
    HOST_BASE,
    HOST_BYTES,
    HOST_QPN,
    MAX_CYCLES,
    MEMORY,
    PARAMS,
    READBACK,
    REGION,
    RespEnv,
    W,
    data_run,
    fuzz_run,
    plan_messages,
    rkey_of,
    roce_opcode,
    send_round,
    share,
)
from rocegen.sim.cocotb.roce_roundtrip import roundtrip_run
from rocegen.sim.models.rnic import Access, WcOpcode, WcStatus
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.roce_env import (
    board_clock_mhz,
    link_pair,
    now_cycle,
    open_qp,
    qpn,
    timeout_code,
    wait_cycles,
    wait_low,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP
from rocegen.wire.addr import parse_ip
from rocegen.wire.atomic_runs import ORIGINAL_SLOTS, generator_run, original_slot
from rocegen.wire.opcodes import (
    OP_RC_ATOMIC_ACKNOWLEDGE,
    OP_RC_COMPARE_SWAP,
    OP_RC_FETCH_ADD,
    OP_RC_RDMA_READ_REQUEST,
    OP_RC_RDMA_READ_RESPONSE_FIRST,
    OP_RC_RDMA_READ_RESPONSE_ONLY,
)

#: the host's READs outstanding (its requester) and READs queued (its responder)
HOST_RD_ATOMIC = 16
RESPONSES = range(OP_RC_RDMA_READ_RESPONSE_FIRST, OP_RC_RDMA_READ_RESPONSE_ONLY + 1)
#: the host's memory the endpoint READs: below the read-back's part
SOURCE_BYTES = READBACK
#: the endpoint's counters a requester run reports (their increase over its READs, the
#: read-backs left out): the retry engine's, and the READ requester's (``rd_*``)
RUN_COUNTERS = ("roce_timeouts", "roce_rewinds", "roce_rx_read_responses")
#: the byte order of the atomics' values in the build's memory (None: a build without atomics)
ATOMICS = PARAMS.get("atomics")
#: the atomic runs' targets: 8-byte words from here (the last 4 KiB of the responder's region)
ATOMIC_AREA = REGION[0] + REGION[1] - 4096
#: what the completions of the atomics say, by the NIC model's name of the operation
ATOMIC_WC = {"FETCH_ADD": WcOpcode.FETCH_ADD, "COMPARE_SWAP": WcOpcode.COMP_SWAP}
W_BYTES = W // 8
M64 = (1 << 64) - 1
#: cycles an endpoint is left idle before each latency sample (the requests before it all placed
#: and answered)
IDLE_CYCLES = 2000


@cocotb.test()
async def runs(dut):
    """The runs of ``ROCE_RUNS``; results to ``ROCE_RESULTS`` (see the module documentation)."""
    plan = json.loads(os.environ["ROCE_RUNS"])
    pcap = PcapWriter(os.environ["PCAP"]) if os.environ.get("PCAP") else None
    env = RespEnv(dut, peer=os.environ.get("ROCE_PEER", "connectx"), pcap=pcap)
    await env.start()
    results = []
    for n, run in enumerate(plan):
        await env.mac.drained()
        run_cycle, run_wall = now_cycle(W), time.perf_counter()
        fc = (Counter(env.mac.framecheck.counts), len(env.mac.frames), env.mac.framecheck.seconds,
              framecheck_wait(env.mac))
        env.mac.bytes_per_cycle = (run["line_gbps"] * 1e9 / 8 / (board_clock_mhz(W) * 1e6)
                                   if run.get("line_gbps") else None)
        if run["kind"] == "resp_fuzz":
            env.mac.to_nic = env.mac.from_nic = None
            out = await fuzz_run(dut, run, env)
        else:
            env.mac.to_nic, env.mac.from_nic = link_pair(run, board_clock_mhz(W))
            if run["kind"] == "read":
                out = await read_run(env, run, n)
            elif run["kind"] == "atomic":
                out = await atomic_run(env, run, n)
            elif run["kind"] == "gen_atomic":
                out = await gen_atomic_run(env, run, n)
            elif run["kind"] == "roundtrip":
                out = await roundtrip_run(env, run, n)
            else:
                out = await data_run(env, run, n)
        new = {k: v - fc[0][k] for k, v in env.mac.framecheck.counts.items() if v - fc[0][k]}
        assert new.get("frames", 0) == len(env.mac.frames) - fc[1], "frames not checked"
        results.append({**run, **out, "width": W, "clock_mhz": board_clock_mhz(W),
                        "memory": MEMORY, "framecheck": new,
                        "framecheck_seconds": round(env.mac.framecheck.seconds - fc[2], 3),
                        "framecheck_wait_seconds": round(framecheck_wait(env.mac) - fc[3], 3),
                        "sim_cycles": now_cycle(W) - run_cycle,
                        "wall_seconds": time.perf_counter() - run_wall})
    if pcap:
        pcap.close()
    with open(os.environ["ROCE_RESULTS"], "w") as f:
        json.dump(results, f, indent=1)


def _host_qp(env, k, *, pmtu, psn, timeout, outstanding, readable):
    """The host's QP of QP k made anew, answering READs and atomics and keeping
    ``outstanding`` of its own in flight at most (its ``max_rd_atomic``), and its memory region
    (registered once per testbench; with ``readable`` the peer may READ it too)."""
    nic, hq = env.nic, HOST_QPN + k
    if hq in nic.qps:
        nic.destroy_qp(hq)
    nic.create_qp(hq, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=psn, pmtu=pmtu,
                  timeout=timeout or 8, access=Access.REMOTE_WRITE | Access.REMOTE_READ,
                  max_rd_atomic=outstanding, max_dest_rd_atomic=HOST_RD_ATOMIC)
    read = Access.REMOTE_READ if readable else Access(0)
    mr = next((m for m in nic.mrs if m.rkey == 0x3000 + k), None)
    if mr is None:
        nic.register_mr(HOST_BASE + (k << 36), HOST_BYTES, 0x3000 + k,
                        Access.LOCAL_WRITE | Access.REMOTE_WRITE | read)
    else:
        mr.access |= read


async def open_for_reads(env, k, *, pmtu, psn, timeout):
    """Open QP k on both sides (see :meth:`RespEnv.open`), the host's QP answering READs and
    keeping :data:`HOST_RD_ATOMIC` of its own outstanding, its memory region readable."""
    _host_qp(env, k, pmtu=pmtu, psn=psn, timeout=timeout, outstanding=HOST_RD_ATOMIC,
             readable=True)
    await env.open(k, pmtu=pmtu, psn=psn, region=share(k, 1), timeout=timeout, host=False)


async def fill_region(env, k):
    """Have the host WRITE random bytes over QP k's share of the region (once per testbench: the
    shadow follows every later write)."""
    if getattr(env, "read_filled", False):
        return
    base, length = share(k, 1)
    part = 64 * 1024
    msgs = plan_messages(env, k, ["WRITE"] * (length // part), [part] * (length // part),
                         (base, length))
    await send_round(env, msgs)
    env.read_filled = True


def _frames_since(env, mark, opcodes):
    """``(index, (first, last, frame))`` of the endpoint's frames since ``mark`` whose BTH
    opcode is in ``opcodes``."""
    return [(i, f) for i, f in enumerate(env.mac.frames[mark:], mark)
            if roce_opcode(f[2]) in opcodes]


async def read_run(env, run, n):
    """One READ run (see the module documentation); returns its figures."""
    test = run["test"]
    timeout = timeout_code(run)
    env.mac.clear_sent()
    if run.get("hole_wait_us") is not None:
        # (the READ requester's timer for the run's round trip: 4 steps)
        cycles = run["hole_wait_us"] * board_clock_mhz(W)
        await env.rdwait.send({"step": -(-round(cycles) // 4)})
    await open_for_reads(env, 0, pmtu=run["pmtu"], psn=env.rng.getrandbits(24), timeout=timeout)
    if test in ("responder", "latency"):
        await fill_region(env, 0)
        out = await (host_reads(env, run, n) if test == "responder" else latency(env, run, n))
    elif test in ("requester", "loss"):
        out = await endpoint_reads(env, run, n)
    else:
        raise ValueError(f"run {n}: unknown READ test {test!r}")
    out.update(timeout=timeout,
               link_to_nic=dict(env.mac.to_nic.counters) if env.mac.to_nic else None,
               link_from_nic=dict(env.mac.from_nic.counters) if env.mac.from_nic else None)
    problems = env.host_problems(faulty=bool(run.get("loss")))
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    return out


def _post_host_reads(env, k, reads):
    """Post ``reads`` (``(region address, host offset, length)``) at the host on QP k; returns
    the index of the first of their completions in the host's send queue."""
    first = len(env.nic.send_cq)
    for i, (addr, off, length) in enumerate(reads):
        env.nic.post_send(HOST_QPN + k, "READ", length=length, remote_addr=addr,
                          rkey=rkey_of(k), local_addr=HOST_BASE + (k << 36) + off, wr_id=i)
    env.mac.poke()
    return first


async def _host_reads_done(env, k, first, reads, n):
    """Wait for the host's READs on QP k, check their completions and the bytes they brought
    (against the shadow); returns the bytes compared."""
    await env.settle(lambda: not env.nic.send_outstanding(),
                     lambda: f"run {n}: {env.nic.send_outstanding()} host READs outstanding; "
                     f"the host logged {env.nic.log[-3:]}")
    done = env.nic.send_cq[first:]
    assert len(done) == len(reads), f"run {n}: {len(done)} completions for {len(reads)} READs"
    bad = [c for c in done if c.status != WcStatus.SUCCESS or c.opcode != WcOpcode.RDMA_READ]
    assert not bad, f"run {n}: host READs failed: {bad[:3]}"
    checked = 0
    for addr, off, length in reads:
        got = env.nic.read_mem(HOST_BASE + (k << 36) + off, length)
        want = bytes(env.shadow[addr:addr + length])
        if got != want:
            at = next(i for i in range(length) if got[i] != want[i])
            raise AssertionError(f"run {n}: a READ of {length} bytes at {addr:#x} brought "
                                 f"{got[at:at + 16].hex()} at +{at:#x}, the region holds "
                                 f"{want[at:at + 16].hex()}")
        checked += length
    return checked


async def host_reads(env, run, n):
    """A ``responder`` run: the host READs the region; goodput over the responses' line time."""
    size, count = run["size"], run["bytes"] // run["size"]
    base, length = share(0, 1)
    span = length // size * size
    if not span or count * size > SOURCE_BYTES:
        raise ValueError(f"run {n}: {count} READs of {size} bytes do not fit the region's "
                         f"{length} bytes or the host's {SOURCE_BYTES}")
    reads = [(base + i * size % span, i * size, size) for i in range(count)]
    mark = len(env.mac.frames)
    first = _post_host_reads(env, 0, reads)
    checked = await _host_reads_done(env, 0, first, reads, n)
    resp = _frames_since(env, mark, RESPONSES)
    line = env.mac.line
    cycles = line[resp[-1][0]][1] - line[resp[0][0]][0] if resp else 0
    period = 1 / board_clock_mhz(W)
    return {"messages": count, "packets": count * max(1, -(-size // run["pmtu"])),
            "response_frames": len(resp), "checked_bytes": checked, "line_cycles": cycles,
            "goodput_gbps": count * size * 8 / (cycles * period * 1e3) if cycles else 0.0,
            "read_requests": count}


async def latency(env, run, n):
    """A ``latency`` run: single host READs on an idle endpoint."""
    size, lat, checked = run["size"], [], 0
    base = share(0, 1)[0]
    for i in range(run.get("count", 8)):
        mark = len(env.mac.frames)
        reads = [(base + i * 4096, i * 4096, size)]
        first = _post_host_reads(env, 0, reads)
        checked += await _host_reads_done(env, 0, first, reads, n)
        await wait_cycles(W, 200)
        resp = _frames_since(env, mark, RESPONSES)
        # (the READ request is the last frame into the endpoint: the host sends nothing after it)
        last_in = int(env.dut.rx_last_cycle.value) + env.offset
        lat.append(resp[0][1][0] - last_in)
    return {"latency_cycles": lat, "checked_bytes": checked, "messages": len(lat)}


async def endpoint_reads(env, run, n):
    """A ``requester`` or ``loss`` run: the endpoint READs the host's memory."""
    size, outstanding = run["size"], run["outstanding"]
    count = run["bytes"] // size
    base, length = share(0, 1)
    per_round = length // size
    if not per_round or size > SOURCE_BYTES:
        raise ValueError(f"run {n}: READs of {size} bytes do not fit the region's {length} bytes")
    k, nic = 0, env.nic
    source = env.rng.randbytes(SOURCE_BYTES)
    nic.write_mem(HOST_BASE + (k << 36), source)
    spots = SOURCE_BYTES // size
    period = 1 / board_clock_mhz(W)
    line_cycles = elapsed = checked = requests = responses = 0
    done_reads = 0
    counted = [name for name in STATS if name in RUN_COUNTERS or name.startswith("rd_")]
    counters = dict.fromkeys(counted, 0)
    failed = None
    while done_reads < count:
        batch = min(per_round, count - done_reads)
        wrs = [{"wr_id": 0x10000 + done_reads + j, "qp": k, "opcode": WrOpcode.READ,
                "local_addr": base + j * size, "length": size,
                "remote_offset": (done_reads + j) % spots * size, "imm": 0}
               for j in range(batch)]
        mark_frames, mark_host = len(env.mac.frames), len(env.mac.requests)
        stats0 = await read_stats(env.dut, STATS)
        first = len(env.cpl.items)
        t0 = now_cycle(W)
        posted = completed = 0
        while completed < batch:
            while posted < batch and posted - completed < outstanding:
                await env.wr.send(wrs[posted])
                posted += 1
            await env.cpl.wait_for(first + completed + 1, max_cycles=MAX_CYCLES)
            completed = len(env.cpl.items) - first
            bad = [c for c in env.cpl.items[first:] if c["status"] != CplStatus.OK.value]
            if bad:
                # the QP failed: its other work requests are flushed; the run ends here
                await env.cpl.wait_for(first + posted, max_cycles=MAX_CYCLES)
                stats = await read_stats(env.dut, STATS)
                for name in counted:
                    counters[name] += stats[name] - stats0[name]
                failed = {"status": CplStatus(bad[0]["status"]).name,
                          "wr_id": bad[0]["wr_id"], "reads_done": done_reads + next(
                              i for i, c in enumerate(env.cpl.items[first:]) if c is bad[0])}
                assert run.get("loss"), (f"run {n}: READ work requests failed on a perfect "
                                         f"link: {bad[:3]}; endpoint counters {counters}")
                break
        if failed:
            break
        cpls = env.cpl.items[first:first + batch]
        got = [c["wr_id"] for c in cpls]
        want = [w["wr_id"] for w in wrs]
        assert got == want, f"run {n}: completions {got[:4]} ..., expected {want[:4]} ..."
        elapsed += env.cpl.cycles[first + batch - 1] - t0
        stats = await read_stats(env.dut, STATS)
        for name in counted:
            counters[name] += stats[name] - stats0[name]
        host = env.mac.requests[mark_host:]
        line_cycles += host[-1][1] - host[0][0] if host else 0
        responses += len(host)
        requests += len(_frames_since(env, mark_frames, (OP_RC_RDMA_READ_REQUEST,)))
        saved = env.mac.bytes_per_cycle
        env.mac.bytes_per_cycle = None      # the read-back at the MAC's pace
        got = await env.readback(k, base, batch * size)
        env.mac.bytes_per_cycle = saved
        for j, w in enumerate(wrs):
            off = w["remote_offset"]
            if got[j * size:(j + 1) * size] != source[off:off + size]:
                at = next(i for i in range(size) if got[j * size + i] != source[off + i])
                raise AssertionError(f"run {n}: READ {w['wr_id']:#x} of host offset {off:#x} "
                                     f"placed {got[j * size + at:j * size + at + 16].hex()} at "
                                     f"+{at:#x}, the host holds "
                                     f"{source[off + at:off + at + 16].hex()}")
        checked += batch * size
        done_reads += batch
    if failed:
        # (no figure of a run that did not finish: what failed, and the counters)
        return {"messages": count, "packets": count * max(1, -(-size // run["pmtu"])),
                "response_frames": responses, "read_requests": requests,
                "checked_bytes": checked, "line_cycles": 0, "elapsed_us": 0.0,
                "goodput_gbps": 0.0, "goodput_to_completion_gbps": 0.0, "failed": failed,
                "counters": {k: v for k, v in counters.items() if v}}
    payload = count * size
    return {"messages": count, "packets": count * max(1, -(-size // run["pmtu"])),
            "response_frames": responses, "read_requests": requests, "checked_bytes": checked,
            "line_cycles": line_cycles, "elapsed_us": elapsed * period,
            "counters": {k: v for k, v in counters.items() if v},
            "goodput_gbps": payload * 8 / (line_cycles * period * 1e3) if line_cycles else 0.0,
            "goodput_to_completion_gbps": payload * 8 / (elapsed * period * 1e3)
            if elapsed else 0.0}


# --------------------------------------------------------------------------------- atomics

async def open_for_atomics(env, k, *, pmtu, psn, timeout, outstanding=HOST_RD_ATOMIC):
    """Open QP k on both sides (see :meth:`RespEnv.open`) with the whole responder region (every
    QP's, so that QPs can share a target), the host's QP keeping ``outstanding`` atomics in
    flight at most (its ``max_rd_atomic``)."""
    _host_qp(env, k, pmtu=pmtu, psn=psn, timeout=timeout, outstanding=outstanding,
             readable=False)
    await env.open(k, pmtu=pmtu, psn=psn, region=REGION, timeout=timeout, host=False)


async def set_words(env, values):
    """Local memory's 8-byte words at ``addr`` := ``value`` (in the build's byte order,
    :data:`ATOMICS`) for ``values`` ``{addr: value}``, through the on-chip memory's word-write
    port or into the AXI4 RAM (whole beats, the others' bytes as the shadow has them); the
    shadow learns them."""
    for addr, value in values.items():
        env.shadow[addr:addr + 8] = value.to_bytes(8, ATOMICS)
    for a in sorted({a - a % W_BYTES for a in values}):
        await env.store(a, W_BYTES)



def _value(data):
    """An atomic's original value from its completion's data (little-endian, as on a host)."""
    return int.from_bytes(data, "little")


async def atomic_run(env, run, n):
    """One atomic run (see the module documentation); returns its figures."""
    if ATOMICS is None:
        raise ValueError(f"run {n}: the build has no atomics (atomics=None)")
    test = run.get("test", "counter")
    if test == "counter":
        return await atomic_counter(env, run, n)
    timeout = timeout_code(run)
    env.mac.clear_sent()
    log = len(env.nic.log)      # (what the host logged during earlier runs is theirs)
    qps = run.get("qps", 1)
    outstanding = run.get("outstanding", HOST_RD_ATOMIC)
    if not 1 <= outstanding <= HOST_RD_ATOMIC:
        raise ValueError(f"run {n}: outstanding must be 1..{HOST_RD_ATOMIC}, not {outstanding}")
    for k in range(qps):
        await open_for_atomics(env, k, pmtu=run["pmtu"], psn=env.rng.getrandbits(24),
                               timeout=timeout, outstanding=outstanding)
    if test == "rate":
        out = await atomic_rate(env, run, n)
    elif test == "latency":
        out = await atomic_latency(env, run, n)
    elif test == "read_latency":
        await fill_region(env, 0)
        await env.mac.drained()
        await wait_cycles(W, IDLE_CYCLES)       # (the fill's last payload placed)
        out = await latency(env, run, n)
    else:
        raise ValueError(f"run {n}: unknown atomic test {test!r}")
    out["timeout"] = timeout
    problems = env.nic.log[log:]
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    return out


def _post_atomic(env, k, op, addr, *, swap_add, compare=0, wr_id=0):
    env.nic.post_send(HOST_QPN + k, op, remote_addr=addr, rkey=rkey_of(k), swap_add=swap_add,
                      compare=compare if op == "COMPARE_SWAP" else None, wr_id=wr_id)


async def _atomics_done(env, first, count, op, n):
    """Wait until the host has no work request outstanding; check that the ``count``
    completions from ``first`` are OK and of ``op``; returns them."""
    await env.settle(lambda: not env.nic.send_outstanding(),
                     lambda: f"run {n}: {env.nic.send_outstanding()} host atomics outstanding; "
                     f"the host logged {env.nic.log[-3:]}")
    done = env.nic.send_cq[first:]
    assert len(done) == count, f"run {n}: {len(done)} completions for {count} atomics"
    bad = [c for c in done if c.status != WcStatus.SUCCESS or c.opcode != ATOMIC_WC[op]]
    assert not bad, f"run {n}: host atomics failed: {bad[:3]}"
    return done


async def _check_words(env, want, n):
    """Read the words ``want`` (``{addr: value}``) back through the endpoint's RDMA WRITE (QP
    0) and compare; the shadow learns them. Returns the number of words checked."""
    lo, hi = min(want), max(want) + 8
    got = await env.readback(0, lo, hi - lo)
    for addr, value in sorted(want.items()):
        have = int.from_bytes(got[addr - lo:addr - lo + 8], ATOMICS)
        assert have == value, (f"run {n}: the word at {addr:#x} holds {have:#018x} after the "
                               f"atomics, expected {value:#018x}")
        env.shadow[addr:addr + 8] = value.to_bytes(8, ATOMICS)
    return len(want)


async def atomic_rate(env, run, n):
    """A ``rate`` run: ``count`` atomics per QP on ``qps`` QPs (see the module documentation)."""
    op, qps, count = run["opcode"], run.get("qps", 1), run["count"]
    rng = env.rng
    total = qps * count
    if op == "FETCH_ADD":
        targets = {k: ATOMIC_AREA for k in range(qps)}
        start = {ATOMIC_AREA: rng.getrandbits(64)}
    else:
        targets = {k: ATOMIC_AREA + 8 * k for k in range(qps)}
        start = {targets[k]: rng.getrandbits(64) for k in range(qps)}
    await set_words(env, start)
    await env.mac.drained()
    mark_frames, mark_req = len(env.mac.frames), len(env.mac.requests)
    first = len(env.nic.send_cq)
    posted = {k: [] for k in range(qps)}         # wr_ids in posting order, per QP
    for i in range(count):
        for k in range(qps):
            wr_id = i * qps + k
            if op == "FETCH_ADD":
                _post_atomic(env, k, op, targets[k], swap_add=1, wr_id=wr_id)
            else:
                v = (start[targets[k]] + i) & M64
                _post_atomic(env, k, op, targets[k], swap_add=(v + 1) & M64, compare=v,
                             wr_id=wr_id)
            posted[k].append(wr_id)
    env.mac.poke()
    done = await _atomics_done(env, first, total, op, n)
    got = {c.wr_id: _value(c.data) for c in done}
    assert len(got) == total, f"run {n}: completions with the same wr_id"
    if op == "FETCH_ADD":
        s0 = start[ATOMIC_AREA]
        fetched = sorted((v - s0) & M64 for v in got.values())
        assert fetched == list(range(total)), (f"run {n}: the FETCH_ADDs returned "
                                               f"{fetched[:8]} ... (from the start value), "
                                               f"not 0 .. {total - 1} each once")
        for k in range(qps):
            mine = [(got[w] - s0) & M64 for w in posted[k]]
            assert mine == sorted(mine), f"run {n}: QP {k}'s FETCH_ADDs out of PSN order"
        want = {ATOMIC_AREA: (s0 + total) & M64}
    else:
        for k in range(qps):
            s0 = start[targets[k]]
            mine = [(got[w] - s0) & M64 for w in posted[k]]
            assert mine == list(range(count)), (f"run {n}: QP {k}'s COMPARE_SWAPs returned "
                                                f"{mine[:8]} ... (from its start value)")
        want = {targets[k]: (start[targets[k]] + count) & M64 for k in range(qps)}
    answers = _frames_since(env, mark_frames, (OP_RC_ATOMIC_ACKNOWLEDGE,))
    requests = env.mac.requests[mark_req:]
    assert len(answers) == total, f"run {n}: {len(answers)} ATOMIC_ACKNOWLEDGEs for {total}"
    assert len(requests) == total, f"run {n}: the host sent {len(requests)} requests for {total}"
    line = env.mac.line
    # (answers after the first over the time between the starts: an ATOMIC_ACKNOWLEDGE is
    # shorter than a request, so counting the last one's own line time would credit the run
    # with more than the line carries)
    cycles = line[answers[-1][0]][0] - line[answers[0][0]][0]
    elapsed = line[answers[-1][0]][1] - requests[0][0]
    final = await _check_words(env, want, n)
    clock = board_clock_mhz(W)
    return {"messages": total, "answers": len(answers), "requests": len(requests),
            "checked_atomics": total, "final_checked": final, "line_cycles": cycles,
            "elapsed_cycles": elapsed, "mops": (total - 1) * clock / cycles,
            "mops_elapsed": total * clock / elapsed}


async def atomic_latency(env, run, n):
    """A ``latency`` run: single atomics on an idle endpoint, one lane after the other."""
    op, count = run["opcode"], run.get("count", 8)
    rng = env.rng
    lanes = max(1, W_BYTES // 8)
    words = {ATOMIC_AREA + 8 * (i % lanes): rng.getrandbits(64) for i in range(min(count, lanes))}
    await set_words(env, words)
    lat, mark_req = [], len(env.mac.requests)
    for i in range(count):
        addr = ATOMIC_AREA + 8 * (i % lanes)
        now = words[addr]
        await env.mac.drained()
        await wait_cycles(W, IDLE_CYCLES)
        mark = len(env.mac.frames)
        first = len(env.nic.send_cq)
        if op == "FETCH_ADD":
            add = rng.getrandbits(64)
            _post_atomic(env, 0, op, addr, swap_add=add, wr_id=i)
            new = (now + add) & M64
        else:
            new = rng.getrandbits(64)
            _post_atomic(env, 0, op, addr, swap_add=new, compare=now, wr_id=i)
        env.mac.poke()
        done = await _atomics_done(env, first, 1, op, n)
        assert _value(done[0].data) == now, (f"run {n}: atomic {i} returned "
                                             f"{_value(done[0].data):#x}, the word held {now:#x}")
        words[addr] = new
        answers = _frames_since(env, mark, (OP_RC_ATOMIC_ACKNOWLEDGE,))
        assert len(answers) == 1, f"run {n}: {len(answers)} ATOMIC_ACKNOWLEDGEs for one atomic"
        # (the request is the last frame into the endpoint: the host sends nothing after it)
        last_in = int(env.dut.rx_last_cycle.value) + env.offset
        lat.append(answers[0][1][0] - last_in)
    requests = len(env.mac.requests) - mark_req
    final = await _check_words(env, words, n)
    return {"latency_cycles": lat, "messages": count, "answers": len(lat), "requests": requests,
            "checked_atomics": count, "final_checked": final}


#: what the host NIC model logs of its atomics' recovery on a faulty link: an answer to a
#: duplicate (its atomic was acknowledged already), an answer after a gap (the atomics from the
#: gap reissued), and the answers after that gap while the reissue is under way
ATOMIC_RECOVERY = ("req_atomic_stale", "req_read_retry", "req_read_stale")


def _past(a, b):
    """Whether 64-bit ``a`` is past ``b`` (by less than 2^63, modulo 2^64)."""
    return 0 < (a - b) & M64 < 1 << 63


async def _read_counter(env, k, addr, n):
    """The 8 bytes at ``addr`` of the endpoint's memory, READ by the host on QP k: their value
    (little-endian, as the build's atomics store it)."""
    first = len(env.nic.send_cq)
    env.nic.post_send(HOST_QPN + k, "READ", length=8, remote_addr=addr, rkey=rkey_of(k),
                      wr_id=1 << 40)
    env.mac.poke()
    await env.settle(lambda: len(env.nic.send_cq) > first,
                     lambda: f"run {n}: the READ of the counter did not complete")
    (c,) = env.nic.send_cq[first:]
    assert c.status == WcStatus.SUCCESS, f"run {n}: the READ of the counter: {c.status}; " \
        f"the host logged {env.nic.log[-6:]}"
    del env.nic.send_cq[first:]
    return int.from_bytes(c.data, "little")


def _post_atomics(env, q, op, count, depth):
    """Post QP ``q``'s next atomics (``q``: its state in :func:`atomic_counter`), up to ``depth``
    outstanding."""
    while len(q["out"]) < depth and (q["posted"] < count if op == "FETCH_ADD"
                                     else len(q["won"]) + len(q["out"]) < count):
        wr = q["posted"]
        q["posted"] += 1
        if op == "FETCH_ADD":
            env.nic.post_send(HOST_QPN + q["k"], op, remote_addr=q["addr"], rkey=rkey_of(q["k"]),
                              swap_add=1, wr_id=wr)
            q["out"][wr] = None
        else:
            guess = q["guess"]
            q["guess"] = (guess + 1) & M64
            env.nic.post_send(HOST_QPN + q["k"], op, remote_addr=q["addr"], rkey=rkey_of(q["k"]),
                              swap_add=(guess + 1) & M64, compare=guess, wr_id=wr)
            q["out"][wr] = guess


async def atomic_counter(env, run, n):
    """An atomic run without ``test``: the contended counter (see the module documentation);
    returns its figures."""
    op, qps, count = run["opcode"], run["qps"], run["count"]
    depth = run.get("outstanding", HOST_RD_ATOMIC)
    timeout = timeout_code(run)
    env.mac.clear_sent()
    base, length = REGION
    addr = base + length - 8
    # the set-up on a perfect link (a lost ARP would hold the endpoint's answers back for its
    # ARP retry time, longer than the host's retries), the counter's rise over the run's
    links = env.mac.to_nic, env.mac.from_nic
    env.mac.to_nic = env.mac.from_nic = None
    for k in range(qps):
        await env.open(k, pmtu=run["pmtu"], psn=env.rng.getrandbits(24), region=REGION,
                       timeout=timeout)
    initial = await _read_counter(env, 0, addr, n)
    env.mac.to_nic, env.mac.from_nic = links
    mark_frames, mark_host = len(env.mac.frames), len(env.mac.requests)
    state = [{"k": k, "addr": addr, "posted": 0, "out": {}, "values": [], "won": [],
              "guess": initial} for k in range(qps)]
    for q in state:
        _post_atomics(env, q, op, count, depth)
    env.mac.poke()
    while any(q["out"] for q in state):
        await env.settle(lambda: len(env.nic.send_cq) > 0,
                         lambda: f"run {n}: {sum(len(q['out']) for q in state)} atomics "
                         f"outstanding; the host logged {env.nic.log[-3:]}")
        for c in env.nic.poll_send_cq():
            q = state[c.qpn - HOST_QPN]
            assert c.status == WcStatus.SUCCESS, f"run {n}: atomic {c.wr_id} on QP {q['k']}: " \
                f"{c.status}"
            compare = q["out"].pop(c.wr_id)
            value = int.from_bytes(c.data, "little")
            q["values"].append(value)
            if op == "COMPARE_SWAP":
                if value == compare:
                    q["won"].append(compare)
                elif _past(compare, value) or _past(value, q["guess"]):
                    q["guess"] = value      # the guesses ran past it, or the others did
            _post_atomics(env, q, op, count, depth)
        env.mac.poke()
    host = env.mac.requests[mark_host:]
    acks = _frames_since(env, mark_frames, (OP_RC_ATOMIC_ACKNOWLEDGE,))
    final = await _read_counter(env, 0, addr, n)
    cycles = env.mac.line[acks[-1][0]][1] - host[0][0] if acks and host else 0
    total = qps * count
    got = [v for q in state for v in (q["values"] if op == "FETCH_ADD" else q["won"])]
    offsets = sorted((v - initial) & M64 for v in got)
    assert (final - initial) & M64 == total, \
        f"run {n}: the counter went from {initial:#x} to {final:#x}, not up by {total}"
    assert offsets == list(range(total)), \
        f"run {n}: the values {'returned' if op == 'FETCH_ADD' else 'swapped'} are not " \
        f"{total} distinct consecutive numbers from {initial:#x}: {sorted(got)[:8]} ..."
    env.shadow[addr:addr + 8] = final.to_bytes(8, "little")
    faulty = any(run.get(f) for f in ("loss", "dup", "reorder", "corrupt"))
    problems = [e for e in env.host_problems(faulty=faulty)
                if not (faulty and e.split(":", 1)[0] in ATOMIC_RECOVERY)]
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    ops = sum(len(q["values"]) for q in state)
    secs = cycles / (board_clock_mhz(W) * 1e6)
    return {"messages": ops, "ops": ops, "successes": len(got) if op == "COMPARE_SWAP" else ops,
            "initial": initial, "final": final, "distinct": len(set(got)), "counter": addr,
            "line_cycles": cycles, "ops_per_s": ops / secs if secs else 0.0,
            "atomic_acks": len(acks), "packets": len(host), "checked_bytes": 8 * len(got),
            "timeout": timeout,
            "link_to_nic": dict(env.mac.to_nic.counters) if env.mac.to_nic else None,
            "link_from_nic": dict(env.mac.from_nic.counters) if env.mac.from_nic else None}


#: the generator's ``imm`` of an atomic run, as the connection manager starts it: a FETCH_ADD run
#: adds 1, a COMPARE_SWAP run's message s swaps in s + 1 where it finds s
#: (:class:`~rocegen.gateware.roce.cm.cm_traffic.CmTraffic`)
GEN_IMM = {"FETCH_ADD": 1, "COMPARE_SWAP": 0}


async def open_for_gen_atomics(env, k, *, pmtu, psn, timeout):
    """QP k on both sides, the endpoint's context pointing at QP 0's host memory (R_Key 0x3000,
    base :data:`HOST_BASE`), the host's QP and that region taking atomics."""
    nic, hq = env.nic, HOST_QPN + k
    if hq in nic.qps:
        nic.destroy_qp(hq)
    nic.create_qp(hq, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=psn, pmtu=pmtu,
                  timeout=timeout or 8, access=Access.REMOTE_WRITE | Access.REMOTE_READ |
                  Access.REMOTE_ATOMIC, max_rd_atomic=HOST_RD_ATOMIC,
                  max_dest_rd_atomic=HOST_RD_ATOMIC)
    mr = next((m for m in nic.mrs if m.rkey == 0x3000), None)
    if mr is None:
        nic.register_mr(HOST_BASE, HOST_BYTES, 0x3000, Access.LOCAL_WRITE | Access.REMOTE_WRITE |
                        Access.REMOTE_READ | Access.REMOTE_ATOMIC)
    else:
        mr.access |= Access.REMOTE_READ | Access.REMOTE_ATOMIC
    await env.set_region(k, *REGION)
    await open_qp(env.ctl, env.psn, k, peer_ip=parse_ip(HOST_IP), peer_qpn=hq, rkey=0x3000,
                  base_va=HOST_BASE, pmtu=pmtu, psn=psn, udp_sport=0xC200 + k, timeout=timeout)
    env.qps[k] = {"pmtu": pmtu, "region": REGION}


async def gen_atomic_run(env, run, n):
    """A ``gen_atomic`` run (see the module documentation); returns its figures."""
    op, qps, count = run["opcode"], run["qps"], run["count"]
    dut, nic = env.dut, env.nic
    timeout = timeout_code(run)
    env.mac.clear_sent()
    for k in range(qps):
        await open_for_gen_atomics(env, k, pmtu=run["pmtu"], psn=env.rng.getrandbits(24),
                                   timeout=timeout)
    # the endpoint learns the host's MAC (ARP) on a perfect link: one word read back
    links = env.mac.to_nic, env.mac.from_nic
    env.mac.to_nic = env.mac.from_nic = None
    await env.readback(0, 0, 8)
    env.mac.to_nic, env.mac.from_nic = links
    counter = HOST_BASE
    nic.write_mem(counter, bytes(8))
    c0, mark = dict(nic.counters), len(env.mac.frames)
    counted = [name for name in STATS if name in RUN_COUNTERS or name.startswith("rd_")]
    stats0 = await read_stats(dut, STATS)
    cycles, seen, final = 0, [], None
    for i in range(qps):
        first = i * count & M64 if op == "FETCH_ADD" else 0
        if op == "COMPARE_SWAP":
            nic.write_mem(counter, bytes(8))
        await env.gen.send({"qp": i, "opcode": WrOpcode[op], "length": 8, "count": count,
                            "spacing": 0, "imm": GEN_IMM[op], "window": 0})
        await wait_cycles(W, 4)
        await wait_low(dut, dut.gen_busy, W, max_cycles=MAX_CYCLES,
                       what=f"run {n}: the traffic generator's {op} run on QP {i}")
        ok, err = int(dut.gen_ok.value), int(dut.gen_err.value)
        assert (ok, err) == (count, 0), \
            f"run {n}: QP {i}'s run completed {ok} atomics OK and {err} in error, of {count}"
        cycles += int(dut.gen_cycles.value)
        (want,), originals = generator_run(op, count, 1, [first])
        final = int.from_bytes(nic.read_mem(counter, 8), "little")
        assert final == want, f"run {n}: after QP {i}'s run the host's counter holds " \
            f"{final:#x}, the model {want:#x}"
        slots = min(count, ORIGINAL_SLOTS)
        saved = env.mac.bytes_per_cycle
        env.mac.bytes_per_cycle = None      # the read-back at the MAC's pace
        mem = await env.readback(0, 0, original_slot(slots - 1) + 8)
        env.mac.bytes_per_cycle = saved
        for s in range(count - slots, count):
            at = original_slot(s)
            value = int.from_bytes(mem[at:at + 8], "little")
            assert value == originals[s], f"run {n}: QP {i}'s message {s} found " \
                f"{value:#x} (its original, at local {at:#x}), the model says {originals[s]:#x}"
            env.shadow[at:at + 8] = mem[at:at + 8]
            seen.append(value)
    assert env.dut.gen_err.value == 0
    frames = _frames_since(env, mark, (OP_RC_FETCH_ADD, OP_RC_COMPARE_SWAP))
    stats = await read_stats(dut, STATS)
    faulty = any(run.get(f) for f in ("loss", "dup", "reorder", "corrupt"))
    problems = env.host_problems(faulty=faulty)
    assert not problems, f"run {n}: the host logged {problems[:3]}"
    ops = qps * count
    secs = cycles / (board_clock_mhz(W) * 1e6)
    return {"messages": ops, "ops": ops, "initial": 0, "final": final,
            "expected": ops & M64 if op == "FETCH_ADD" else count,
            "originals_checked": len(seen), "distinct": len(set(seen)), "counter": counter,
            "gen_cycles": cycles, "ops_per_s": ops / secs if secs else 0.0,
            "atomic_acks": nic.counters["atomic_ack_tx"] - c0["atomic_ack_tx"],
            "host_executed": nic.counters["atomic_rx"] - c0["atomic_rx"],
            "host_duplicates": nic.counters["atomic_dup"] - c0["atomic_dup"],
            "packets": len(frames),
            "counters": {k: stats[k] - stats0[k] for k in counted if stats[k] - stats0[k]},
            "checked_bytes": 8 * (len(seen) + qps), "timeout": timeout,
            "link_to_nic": dict(env.mac.to_nic.counters) if env.mac.to_nic else None,
            "link_from_nic": dict(env.mac.from_nic.counters) if env.mac.from_nic else None}
