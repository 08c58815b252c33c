"""The benchmark suite of the RoCE endpoint behind ``rocegen bench`` and ``make bench``.

Cycle-accurate runs in Verilator of the endpoint (:class:`~rocegen.sim.testing.roce_tops.EndpointTop`,
W = 512, 8 QPs, on-chip memory: the build of
:func:`rocegen.sim.testing.cocotb_runner.endpoint_sim_config` the tests use) against the host NIC model,
through the cocotb testbench :mod:`rocegen.sim.cocotb.roce_demo`, at the board clock (322.266 MHz):

* **Goodput vs message size** for WRITE, WRITE with immediate and SEND, at PMTU 1024 and 4096,
  on one QP (traffic generator) and on 8 QPs (work requests from local memory, round robin; the
  messages of 8 QPs are at most the 256 KiB of on-chip memory), with the MAC throttled to
  100 Gb/s as the CMAC takes frames (against the limit of :func:`limit_gbps`) and unthrottled
  (the MAC takes a beat every cycle: beats used against the ideal minimum of
  :func:`ideal_beats`).
* **Message rate** of 1..256-byte WRITEs in millions of messages per second, one QP and 8 QPs,
  throttled (against :func:`rate_limit_mmsgs`) and unthrottled.
* **Latency**: a work request to its first beat on the MAC, the last beat of an acknowledgement
  to its completion (single messages on an idle endpoint), and a connection-manager OPEN_QP
  request's last beat into the MAC receive port to its reply's first beat out (batch
  ``latency``; ``latency-w64`` and ``latency-axi4`` the 64-byte WRITE and the connection manager
  again at W = 64 and with AXI4 memory, for the latency goals, and one QP's 64-byte WRITE rate:
  at W = 64 on its 10 Gb/s line at 156.25 MHz, with AXI4 from that memory through the user
  port, :data:`LATENCY_RATE_LINES`).
* **Loss**: one QP of 4 KiB WRITEs at 0, 0.1 % and 1 % random loss each way with a 2 us and a
  20 us round trip (goodput up to the last completion), and the recovery after one lost packet.
* **Resources**: read from the last Yosys report of ``python -m bench.bench_synth``
  (``build/bench/synth.json``, with the revision it came from); none is run here.
* **Simulation speed**: simulated cycles per wall-clock second of every batch of runs. Every
  frame out of the endpoint is still rebuilt by scapy and compared
  (:mod:`rocegen.sim.testing.framecheck`); on a machine with two or more cores the suite runs
  that check in a worker process beside the simulator (``ROCEGEN_FRAMECHECK=pool``, unless the
  environment already chooses), and each batch records the frames checked, the check's own
  seconds and the seconds the simulator waited for it.
* **Responder** (batch ``responder``; ``responder-axi4`` too when the endpoint's responder
  can place payloads into AXI4 memory): the host NIC model's requester WRITEs and SENDs into
  the endpoint built with its RC responder (:func:`~rocegen.sim.testing.cocotb_runner.responder_sim_config`,
  W = 512, 2 MiB of on-chip memory; the cocotb testbench :mod:`rocegen.sim.cocotb.roce_resp`): one QP's
  goodput at PMTU 1024 and 4096, 64 B .. 1 MiB, the host's line paced at 100 Gb/s (against
  :func:`limit_gbps`: the host's requests have the wire format of the endpoint's), payload over
  the time from the first request's start on the line to the endpoint's last ACK, or to the
  end of the last request's line time if that is later (runs of 1024
  messages or 1 MiB, :data:`RESP_RUN_MESSAGES`, so that the one ACK latency after the last
  request weighs under 1 %); the message rate of 64 B WRITEs; the cycles from a request's last beat
  in to its ACK's first beat out; and both directions at once on one QP (the traffic generator
  WRITEs to the host while the host WRITEs in; each direction's goodput over its own frames'
  time on its line, which the other direction's ACKs share). Every byte is read back through
  the endpoint's own RDMA WRITEs and compared.
* **READ** (batch ``read``; in ``quick-responder`` with ``--quick``; the build of the
  responder's batch, :mod:`rocegen.sim.cocotb.roce_resp_runs` through the cocotb testbench
  :mod:`rocegen.sim.cocotb.roce_resp`), rows ``"kind": "read"`` with ``test``: ``responder``, the
  host NIC model READs the endpoint's region (16 READs outstanding), 64 B .. 1 MiB at PMTU
  1024 and 4096, goodput over the READ responses' time on the endpoint's 100G line against
  the limit of READ responses (:func:`limit_gbps` with opcode ``READ``: AETH on FIRST, LAST and
  ONLY); ``requester``, the endpoint READs 64 KiB at a time from the host's memory with 1, 4
  and 16 work requests outstanding over a 2 us and a 20 us round trip (goodput over the
  responses' time on the host's line, each round of 1 MiB read back and compared; also the
  bound ``outstanding`` x size / round trip, :func:`read_bound_gbps`); ``loss``, the same at
  2 us and 1 % random loss each way: 16 READs of 4 KiB outstanding (64 KiB in flight, as the
  goodput batch's loss runs have their 4 KiB WRITEs), 16 and 4 of 64 KiB, and 16 of 64 KiB at
  0.1 % (16 MiB), the QP's retransmit timeout covering the responses of every READ outstanding
  (:func:`read_timeout`); ``latency``, the cycles from a host READ request's last beat in to
  its first response beat out.
* **Atomics** (batches ``atomic``, the responder's build at W = 512 with its lines at 100 Gb/s,
  and ``atomic-w64``, the same build at W = 64 at 156.25 MHz with its lines at 10 Gb/s, the
  line of the 10G XGMII; a few runs in ``quick-responder`` with ``--quick``;
  :mod:`rocegen.sim.cocotb.roce_resp_runs`, rows ``"kind": "atomic"``): the host NIC model's
  FETCH_ADDs and COMPARE_SWAPs executed by the endpoint's responder (``atomics="little"``),
  16 outstanding per QP, on one QP and on 8: atomics per second over their answers' time on
  the endpoint's line against the line's limit (:func:`atomic_limit_mops`, the request frames')
  and the atomic unit's (one atomic every :data:`ATOMIC_UNIT_CYCLES` cycles), also with both
  ends taking a beat every cycle; each run checks every value returned (the counter's values
  each once) and the words read back. Latency: the cycles from an atomic request's last beat in
  to its ATOMIC_ACKNOWLEDGE's first beat out, beside the READ latency measured the same way in
  the same build (8 and 64 bytes). Batch ``atomic-axi4``: the same runs on the build with AXI4
  memory (cocotbext-axi's RAM), where each atomic holds the memory for a read and a write
  round trip.
* **Round trips** (batches ``roundtrip``, the responder's build at W = 512 with its lines at
  100 Gb/s, ``roundtrip-axi4``, the same with AXI4 memory, and ``roundtrip-w64``, at W = 64
  with 10 Gb/s lines; a sample of each at 64 bytes in ``quick-responder`` with ``--quick``;
  :mod:`rocegen.sim.cocotb.roce_roundtrip`, rows ``"kind": "roundtrip"``): round trips with
  no software in them, on an idle endpoint: the endpoint's SEND, echoed by the host NIC model
  as soon as it has it whole, to the echo's receive completion (a ping-pong as ``ib_send_lat``
  makes one), and the host's RDMA WRITE to the end of its ACK, split into the endpoint's and
  the line's parts, and the host's RDMA READ to the end of its last response.
* **Responder fuzz** (only when named: ``rocegen bench --only resp_fuzz``): 100,000 hostile
  frames during responder traffic (:func:`rocegen.sim.cocotb.roce_resp.fuzz_run`): data intact, no
  write outside a region, every datagram's verdict and every drop counted as predicted.
* **Incast** (batch ``incast``; ``quick-incast`` in ``--quick``): not the endpoint in
  Verilator but the Python model of a closed-loop incast (:mod:`rocegen.sim.models.fabric.incast`,
  :mod:`rocegen.sim.apps.incast`), 4 senders with the gateware's DCQCN reaction point into one
  100G switch port, DCQCN on and off, PFC on and off: utilization, fairness, queue, drops,
  pauses, CNPs. Run in the suite's process; its batches are listed under ``model_batches``.
* **Soak** (only when asked for by name: ``rocegen bench --only soak``, ``make soak``): more
  than a million RoCE data packets on 8 QPs over a link that loses 1 % of the frames each way,
  duplicates and reorders, WRITE, SEND and WRITE with immediate in turn; every byte is compared
  in the host's memory, the host must have executed every packet exactly once and every work
  request must complete OK. Figures: packets, frames sent, retransmissions, simulated and wall
  time.

Runs are grouped in batches, one simulator process each. The results (git revision, date,
parameters of every run and every figure) go to a JSON file (``bench/results.json`` by default);
a full run also regenerates the suite's section of ``docs/performance.md``, its plots under
``docs/img/`` and the headline table of ``README.md`` (:mod:`rocegen.sim.apps.bench_report`).
``--quick`` runs a few points of each kind in one process (a smoke test of ``make test``).
"""

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from rocegen.sim.apps import incast
from rocegen.sim.testing.cocotb_runner import BUILD, ROOT
from rocegen.wire.headers import ATOMIC_ACK_ETH, ATOMIC_ETH
from rocegen.wire.verbs import VERBS

__all__ = ["limit_gbps", "rate_limit_mmsgs", "wire_bytes", "packet_frames", "ideal_beats",
           "read_bound_gbps", "read_runs", "read_timeout", "atomic_frames", "atomic_limit_mops",
           "atomic_runs", "roundtrip_runs", "latency_runs", "suite_runs", "run_suite",
           "batch_of", "main_build", "resources", "WIDTH", "CLOCK_MHZ", "LINE_GBPS"]

WIDTH = 512
NUM_QPS = 8
CLOCK_MHZ = 322.265625
LINE_GBPS = 100
#: on-chip payload memory of the build: the local buffer of the 8-QP runs
LOCAL_BYTES = 256 * 1024
OPCODES = ("WRITE", "WRITE_IMM", "SEND")
PMTUS = (1024, 4096)

#: per frame on the line beyond the frame's bytes without FCS: FCS 4, preamble + SFD 8, IFG 12
LINE_OVERHEAD = 4 + 8 + 12
#: headers of every RoCEv2 packet before its payload: Ethernet 14, IPv4 20, UDP 8, BTH 12
HEADERS = 14 + 20 + 8 + 12
ICRC = 4
RETH = 16
IMMDT = 4
AETH = 4
MIN_FRAME = 60            # bytes without FCS (64 with it)


def packet_frames(size, pmtu, opcode="WRITE"):
    """Frame lengths (bytes without FCS, after padding to the Ethernet minimum) of the packets
    of one message of ``size`` bytes: payload with its pad to 4 bytes, the headers, the RETH on
    the first packet of a WRITE / WRITE_IMM, the ImmDt on the last one of a WRITE_IMM /
    SEND_IMM, the ICRC. ``READ``: the packets of its responses (the payload-carrying direction),
    the AETH on the first and the last (FIRST and LAST; ONLY carries one)."""
    if opcode not in VERBS:
        raise ValueError(f"unknown opcode {opcode!r}")
    packets = max(1, -(-size // pmtu))
    out = []
    for k in range(packets):
        n = min(pmtu, size - k * pmtu)
        frame = HEADERS + n + (-n & 3) + ICRC
        if k == 0 and opcode.startswith("WRITE"):
            frame += RETH
        if k == packets - 1 and opcode.endswith("_IMM"):
            frame += IMMDT
        if opcode == "READ" and (k == 0 or k == packets - 1):
            frame += AETH
        out.append(max(frame, MIN_FRAME))
    return out


def wire_bytes(size, pmtu, opcode="WRITE"):
    """Bytes of line time one message takes (every frame with FCS, preamble, SFD and gap)."""
    return sum(f + LINE_OVERHEAD for f in packet_frames(size, pmtu, opcode))


def limit_gbps(size, pmtu, line_gbps=LINE_GBPS, opcode="WRITE"):
    """Theoretical goodput of back-to-back messages of ``size`` bytes at path MTU ``pmtu`` on a
    line of ``line_gbps``: the line rate times payload / line bytes (the wire spec's line-rate
    section, per opcode)."""
    return line_gbps * size / wire_bytes(size, pmtu, opcode)


def rate_limit_mmsgs(size, pmtu, line_gbps=LINE_GBPS, opcode="WRITE"):
    """Theoretical message rate (millions per second) of back-to-back messages on the line."""
    return line_gbps * 1e3 / 8 / wire_bytes(size, pmtu, opcode)


def read_bound_gbps(outstanding, size, rtt_us, pmtu=4096, line_gbps=LINE_GBPS):
    """The most goodput of READs of ``size`` bytes with ``outstanding`` of them in flight over a
    round trip of ``rtt_us``: ``outstanding`` x ``size`` per round trip, at most the line's
    limit of their responses (no round trip: that limit)."""
    lim = limit_gbps(size, pmtu, line_gbps, "READ")
    if not rtt_us:
        return lim
    return min(lim, outstanding * size * 8 / (rtt_us * 1e3))


def ideal_beats(size, pmtu, opcode="WRITE", width=WIDTH):
    """The fewest beats of the MAC port one message needs (each frame starts a beat)."""
    b = width // 8
    return sum(-(-f // b) for f in packet_frames(size, pmtu, opcode))


def _whole(total, size):
    """``total`` rounded up to whole messages of ``size``."""
    return -(-total // size) * size


KIB, MIB = 1024, 1024 * 1024
SIZES_1QP = [1 << k for k in range(6, 23)] + [100, 1500, 4097, 9000]      # 64 B .. 4 MiB
SIZES_1QP_OTHER = [1 << k for k in range(6, 23, 2)] + [1500]          # 64 B, 256 B .. 4 MiB
SIZES_8QP = [64, 256, 1024, 1500, 4096, 16 * KIB, 64 * KIB, 256 * KIB]
SIZES_RATE = [1 << k for k in range(0, 9)]                                 # 1 .. 256 B
LOSSES = (0.0, 0.001, 0.01)
RTTS = (2, 20)


def _goodput(size, pmtu, opcode, qps, line, quick):
    """A goodput run: one QP, at least 64 KiB and two messages, up to 8 messages or 1 MiB; 8
    QPs, per QP at least 16 KiB and two messages, up to 4 messages or 256 KiB (quick: less)."""
    if qps == 1:
        per_qp = max(2 * size, min(8 * size, MIB // (4 if quick else 1)), 64 * KIB)
        source = "generator"
    else:
        per_qp = max(2 * size, min(4 * size, 256 * KIB), (4 if quick else 16) * KIB)
        source = "memory"
    return {"kind": "goodput", "qps": qps, "pmtu": pmtu, "bytes": _whole(per_qp, size),
            "size": size, "opcode": opcode, "source": source, "line_gbps": line}


def _rate(size, qps, line, quick):
    count = (256 if quick else 1024) if qps == 1 else (32 if quick else 128)
    return {"kind": "rate", "qps": qps, "pmtu": 4096, "bytes": count * size, "size": size,
            "opcode": "WRITE", "source": "generator" if qps == 1 else "memory",
            "line_gbps": line}


def _loss(loss, rtt, total):
    return {"kind": "loss", "qps": 1, "pmtu": 4096, "bytes": total, "size": 4096,
            "opcode": "WRITE", "source": "generator", "line_gbps": LINE_GBPS, "loss": loss,
            "rtt_us": rtt, "seed": 7}


def _latency(size, count):
    return {"kind": "latency", "qps": 1, "pmtu": 4096, "bytes": size * count, "size": size,
            "opcode": "WRITE", "source": "memory", "line_gbps": 0, "latency": True}


#: the soak: data packets at least (its runs are sized to reach it)
SOAK_PACKETS = 1_000_000
SOAK_PMTU = 256
SOAK_SIZE = 16 * KIB


def soak_runs(packets=SOAK_PACKETS):
    """The soak batch: one run per opcode, 8 QPs of 16 KiB messages at PMTU 256, work requests
    from local memory, the MAC at 100G, 1 % loss, 0.5 % duplicates and 0.5 % reordering each way
    over a 2 us round trip; together at least ``packets`` data packets."""
    opcodes = ("WRITE", "SEND", "WRITE_IMM")
    per_run = -(-packets // len(opcodes))
    per_qp = _whole(-(-per_run // NUM_QPS) * SOAK_PMTU, SOAK_SIZE)
    return [{"kind": "soak", "qps": NUM_QPS, "pmtu": SOAK_PMTU, "bytes": per_qp,
             "size": SOAK_SIZE, "opcode": op, "source": "memory", "line_gbps": LINE_GBPS,
             "loss": 0.01, "dup": 0.005, "reorder": 0.005, "rtt_us": 2, "seed": 11 + k}
            for k, op in enumerate(opcodes)]


#: the responder batches: message sizes, and the bytes of a run (whole messages; at least one)
RESP_SIZES = [64, 256, 1024, 4096, 16 * KIB, 64 * KIB, 256 * KIB, MIB]
RESP_OPCODES = ("WRITE", "SEND")
#: hostile frames of the responder's fuzz batch
RESP_FUZZ_FRAMES = 100_000


#: a responder goodput run: this many messages, at most :data:`RESP_RUN_BYTES`, at least one
#: message and 64 KiB (quick: a quarter of each). Its figure counts the time from its first
#: request on the line to the endpoint's last ACK, at most one ACK latency (34 to 140 cycles)
#: more than the requests' line time: 1024 messages or 1 MiB (27,700 cycles at 100 Gb/s) keep that under
#: 1 % (0.5 % from 4 KiB messages up), and the run fits the QP's region (1 MiB), written and
#: read back in one round
RESP_RUN_MESSAGES = 1024
RESP_RUN_BYTES = MIB


def _responder(size, pmtu, opcode, quick, memory="onchip"):
    """A responder goodput run on one QP (see :data:`RESP_RUN_MESSAGES`)."""
    q = 4 if quick else 1
    total = max(size, min(RESP_RUN_MESSAGES // q * size, RESP_RUN_BYTES // q), 64 * KIB // q)
    return {"kind": "responder", "test": "goodput", "qps": 1, "pmtu": pmtu,
            "bytes": _whole(total, size), "size": size, "opcode": opcode,
            "line_gbps": LINE_GBPS, "memory": memory}


def _resp_latency(count, memory="onchip"):
    return {"kind": "resp_latency", "qps": 1, "pmtu": 4096, "size": 64, "bytes": 64,
            "count": count, "opcode": "WRITE", "line_gbps": LINE_GBPS, "memory": memory}


def _bidir(size, total, memory="onchip"):
    return {"kind": "bidir", "qps": 1, "pmtu": 4096, "size": size, "bytes": total,
            "opcode": "WRITE", "line_gbps": LINE_GBPS, "memory": memory}


def _resp_warmup(memory="onchip"):
    # the endpoint resolves the host's address by ARP before its first ACK: not in a figure
    return {**_responder(4096, 4096, "WRITE", True, memory), "bytes": 4096, "kind": "warmup"}


def responder_axi4():
    """Whether the endpoint's responder takes an AXI4 payload memory (``RoceEndpoint(...,
    memory="axi4", responder=True)`` constructs)."""
    import gc
    import warnings

    from amaranth.hdl import UnusedElaboratable

    from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)      # built only to ask
        try:
            RoceEndpoint(WIDTH, NUM_QPS, memory="axi4", mem_bytes=RESP_AXI4_BYTES,
                         responder=True)
        except ValueError:
            return False
        finally:
            gc.collect()
    return True


#: the AXI4 memory of the responder's AXI4 batch (cocotbext-axi's AxiRam)
RESP_AXI4_BYTES = 16 << 20


def responder_runs(quick=False, memory="onchip"):
    """The responder batch's runs (see the module documentation)."""
    if quick:
        return [_resp_warmup(memory), _responder(4096, 4096, "WRITE", True, memory),
                _responder(1024, 1024, "SEND", True, memory),
                {**_responder(64, 4096, "WRITE", True, memory), "bytes": 16 * KIB},
                _resp_latency(4, memory), _bidir(16 * KIB, 256 * KIB, memory)]
    runs = [_resp_warmup(memory)]
    runs += [_responder(s, p, o, False, memory) for o in RESP_OPCODES for p in PMTUS
             for s in RESP_SIZES]
    runs += [_resp_latency(8, memory), _bidir(4096, MIB, memory), _bidir(64 * KIB, MIB, memory)]
    return runs


#: the READ batch: the host's READs (the endpoint's responder answers) of these sizes, the
#: endpoint's READs (its requester) of :data:`READ_SIZE` with these many outstanding over these
#: round trips, and its READs under :data:`READ_LOSS` random loss each way
READ_SIZES = RESP_SIZES
READ_SIZE = 64 * KIB
READ_OUTSTANDING = (1, 4, 16)
READ_LOSS = 0.01
#: bytes of a requester run (whole rounds of the QP's 1 MiB share of the region; quick: one)
READ_RUN_BYTES = 4 * MIB


def read_hole_wait(rtt_us):
    """The READ requester's timer of a run (``hole_wait_us``, set through ``rd_wait_cfg``): twice
    the round trip and 3 us, beyond the silence a QP with READs outstanding meets when nothing
    is lost (a round trip, the host model's answer delay of up to 2 us and a response)."""
    return 2 * rtt_us + 3


def read_run(test, size, pmtu, total, *, outstanding=16, rtt_us=0, loss=0.0, seed=13, **extra):
    """One run of the READ batch (``test``: responder, latency, requester or loss)."""
    return {"kind": "read", "test": test, "qps": 1, "pmtu": pmtu, "bytes": total, "size": size,
            "opcode": "READ", "line_gbps": LINE_GBPS, "outstanding": outstanding,
            "rtt_us": rtt_us, "loss": loss, "seed": seed,
            **({"hole_wait_us": read_hole_wait(rtt_us)} if test in ("requester", "loss") else {}),
            **extra}


def read_timeout(outstanding, size, rtt_us, line_gbps=LINE_GBPS):
    """The QP retransmit timeout code (4.096 us x 2^code) of a READ run under loss: the
    smallest from 4 whose timeout is at least four times the round trip plus the line time of
    the responses of every READ outstanding. A READ is answered after the responses of the
    READs before it, so a shorter timeout fires while those are still arriving (after a lost
    response, none of them is progress) and resends everything again."""
    wait_us = rtt_us + outstanding * size * 8 / (line_gbps * 1e3)
    code = 4
    while 4.096 * (1 << code) < 4 * wait_us:
        code += 1
    return code


def read_runs(quick=False, requester=True):
    """The READ runs (see the module documentation); ``requester``: with the endpoint's own
    READs."""
    q = 4 if quick else 1
    if quick:
        runs = [read_run("responder", 4096, 4096, 256 * KIB),
                read_run("latency", 64, 4096, 64 * 4, count=4)]
        if requester:
            runs += [read_run("requester", READ_SIZE, 4096, MIB, rtt_us=2),
                     read_run("requester", READ_SIZE, 4096, MIB, outstanding=4, rtt_us=20),
                     read_run("loss", 4096, 4096, MIB, rtt_us=2, loss=READ_LOSS,
                           timeout=read_timeout(16, 4096, 2))]
        return runs
    runs = [_resp_warmup()]
    for p in PMTUS:
        for s in READ_SIZES:
            total = max(s, min(RESP_RUN_MESSAGES // q * s, RESP_RUN_BYTES // q), 64 * KIB // q)
            runs.append(read_run("responder", s, p, _whole(total, s)))
    runs.append(read_run("latency", 64, 4096, 64 * 8, count=8))
    if requester:
        runs += [read_run("requester", READ_SIZE, 4096, READ_RUN_BYTES, outstanding=o, rtt_us=t)
                 for t in RTTS for o in READ_OUTSTANDING]
        # the goal's point, then fewer READs outstanding and less loss beside it
        # (16 MiB at the lower loss: some 4 frames lost each way, as the goodput batch's)
        runs += [read_run("loss", s, 4096, READ_RUN_BYTES * (4 if p < READ_LOSS else 1),
                       outstanding=o, rtt_us=2, loss=p, timeout=read_timeout(o, s, 2))
                 for s, o, p in ((4096, 16, READ_LOSS), (READ_SIZE, 16, READ_LOSS),
                                 (READ_SIZE, 4, READ_LOSS), (READ_SIZE, 16, READ_LOSS / 10))]
    return runs


#: the atomics' batches: the width of their build (the responder's, with ``atomics``) and the
#: line rate of both directions (at W = 64 the 10G XGMII's, as ``bench.bench_roce --width 64``)
ATOMIC_BATCHES = {"atomic": (512, LINE_GBPS), "atomic-w64": (64, 10),
                  "atomic-axi4": (512, LINE_GBPS)}
ATOMIC_OPS = ("FETCH_ADD", "COMPARE_SWAP")
#: atomics per QP of a rate run, by the number of QPs (quick: a sixteenth)
ATOMIC_COUNT = {1: 2048, 8: 512}
#: atomics each host QP keeps in flight (its ``max_rd_atomic``; the endpoint's ``rd_depth``)
ATOMIC_OUTSTANDING = 16
#: cycles the payload reader spends on an atomic that writes (read, arithmetic, write back:
#: docs/responder-design.md); a COMPARE_SWAP that does not match takes two
ATOMIC_UNIT_CYCLES = 3


def atomic_frames():
    """Frame lengths (bytes without FCS) of an atomic request (BTH, AtomicETH) and of its
    ATOMIC_ACKNOWLEDGE (BTH, AETH, AtomicAckETH)."""
    return (max(HEADERS + ATOMIC_ETH.length + ICRC, MIN_FRAME),
            max(HEADERS + AETH + ATOMIC_ACK_ETH.length + ICRC, MIN_FRAME))


def atomic_limit_mops(line_gbps=LINE_GBPS):
    """The most atomics per second (millions) a line of ``line_gbps`` carries: its request
    frames' rate (they are longer than the answers)."""
    return line_gbps * 1e3 / 8 / (max(atomic_frames()) + LINE_OVERHEAD)


def atomic_offered_mops(width, clock_mhz):
    """The atomics per second (millions) a host sending a beat every cycle offers: one request
    frame every so many beats."""
    return clock_mhz / -(-max(atomic_frames()) // (width // 8))


def atomic_run(test, opcode, qps=1, *, line_gbps=LINE_GBPS, count=8, size=8, **extra):
    """One run of an atomic batch (``test``: rate, latency or read_latency)."""
    return {"kind": "atomic", "test": test, "qps": qps, "pmtu": 1024, "opcode": opcode,
            "count": count, "outstanding": ATOMIC_OUTSTANDING, "size": size,
            "bytes": size * count * qps, "line_gbps": line_gbps, **extra}


def atomic_runs(width=WIDTH, quick=False):
    """The runs of an atomic batch at ``width`` (see the module documentation); ``quick``: one
    rate run and one latency run, for ``quick-responder`` (W = 512)."""
    line = dict(ATOMIC_BATCHES.values())[width]
    if quick:
        return [atomic_run("rate", "FETCH_ADD", 1, line_gbps=line, count=128),
                atomic_run("latency", "COMPARE_SWAP", line_gbps=line, count=2)]
    warmup = {**_responder(4096, 1024, "WRITE", True), "bytes": 4096, "kind": "warmup",
              "line_gbps": line}
    runs = [warmup]
    runs += [atomic_run("rate", op, q, line_gbps=line, count=ATOMIC_COUNT[q])
             for op in ATOMIC_OPS for q in (1, 8)]
    # both ends taking a beat every cycle: the endpoint's own limit
    runs += [atomic_run("rate", op, 8, line_gbps=0, count=ATOMIC_COUNT[8]) for op in ATOMIC_OPS]
    runs += [atomic_run("latency", op, line_gbps=line) for op in ATOMIC_OPS]
    runs += [atomic_run("read_latency", "READ", line_gbps=line, size=s) for s in (8, 64)]
    return runs


#: the round trips' batches: the width of their build (the responder's), the line rate of both
#: directions and the payload memory
ROUNDTRIP_BATCHES = {"roundtrip": (512, LINE_GBPS, "onchip"),
                     "roundtrip-axi4": (512, LINE_GBPS, "axi4"),
                     "roundtrip-w64": (64, 10, "onchip")}
#: payload sizes of the round trips
ROUNDTRIP_SIZES = (8, 64, 1024, 4096)


#: the tests of a round-trip batch (:mod:`rocegen.sim.cocotb.roce_roundtrip`)
ROUNDTRIP_TESTS = ("send", "write", "read")


def roundtrip_run(test, size, *, line_gbps=LINE_GBPS, count=8):
    """One round-trip run (``test``: one of :data:`ROUNDTRIP_TESTS`)."""
    return {"kind": "roundtrip", "test": test, "qps": 1, "pmtu": 4096, "size": size,
            "bytes": size, "count": count, "line_gbps": line_gbps}


def roundtrip_runs(name=None, quick=False):
    """The runs of round-trip batch ``name``; ``quick``: each test at 64 bytes, two samples
    each, for ``quick-responder`` (W = 512)."""
    if quick:
        return [roundtrip_run(t, 64, count=2) for t in ROUNDTRIP_TESTS]
    line = ROUNDTRIP_BATCHES[name][1]
    return [roundtrip_run(t, s, line_gbps=line) for t in ROUNDTRIP_TESTS
            for s in ROUNDTRIP_SIZES]


#: the latency batches (the endpoint's build): its width and payload memory
LATENCY_BATCHES = {"latency": (512, "onchip"), "latency-w64": (64, "onchip"),
                   "latency-axi4": (512, "axi4")}
#: the AXI4 memory of the endpoint's build in the batches whose name ends in ``axi4`` (the
#: size of ``tests/test_cocotb_roce.py``'s, whose build they share)
ENDPOINT_AXI4_BYTES = 16 << 20


#: the line of each latency batch's message-rate run (the main build's is batch ``message-rate``)
LATENCY_RATE_LINES = {"latency-w64": 10, "latency-axi4": LINE_GBPS}


def latency_runs(name):
    """The runs of latency batch ``name``: single WRITEs of 64 B (and at W = 512 on chip 1 KiB
    and 4 KiB), then the connection manager's OPEN_QP exchanges; in the other builds also one
    QP's 64 B WRITEs back to back at their line's rate (W = 64: 10 Gb/s; AXI4: from the AXI4
    memory through the user port, not the traffic generator's pattern)."""
    sizes = ((64, 8), (1024, 4), (4096, 4)) if name == "latency" else ((64, 8),)
    runs = [_latency(s, n) for s, n in sizes] + [{"kind": "cm", "qps": 1, "pmtu": 4096,
                                                  "bytes": 0, "cm": 8}]
    if name in LATENCY_RATE_LINES:
        rate = _rate(64, 1, LATENCY_RATE_LINES[name], False)
        runs.append({**rate, "source": "memory"} if name.endswith("axi4") else rate)
    return runs


#: the width of each batch whose build is not at :data:`WIDTH`
BATCH_WIDTH = {**{k: v[0] for k, v in ATOMIC_BATCHES.items()},
               **{k: v[0] for k, v in ROUNDTRIP_BATCHES.items()},
               **{k: v[0] for k, v in LATENCY_BATCHES.items()}}


#: batches of Python models (:mod:`rocegen.sim.apps.incast`), run in the suite's own process and
#: listed under ``model_batches``, not ``batches`` (no simulator, no cycles)
MODEL_BATCHES = ("incast", "quick-incast")
#: batches run only when named with ``--only``
ON_REQUEST = ("soak", "resp_fuzz")
#: batches of the responder's build and bench (:mod:`rocegen.sim.cocotb.roce_resp`)
RESPONDER_BATCHES = ("responder", "responder-axi4", "resp_fuzz", "quick-responder", "read",
                     *ATOMIC_BATCHES, *ROUNDTRIP_BATCHES)


def suite_runs(quick=False, on_request=False):
    """The batches of the suite: ``[(name, runs)]``, each batch one simulator process
    (``on_request``: with the batches of :data:`ON_REQUEST`, which a plain run leaves out)."""
    if quick:
        runs = [_goodput(4096, 4096, "WRITE", 1, LINE_GBPS, True),
                _goodput(MIB, 4096, "WRITE", 1, LINE_GBPS, True),
                _goodput(1024, 1024, "WRITE_IMM", 1, LINE_GBPS, True),
                _goodput(4096, 1024, "SEND", 1, LINE_GBPS, True),
                _goodput(4096, 4096, "WRITE", 1, 0, True),
                _goodput(4096, 4096, "WRITE", 8, LINE_GBPS, True),
                _goodput(1500, 1024, "SEND", 8, 0, True),
                _rate(64, 1, LINE_GBPS, True), _rate(1, 1, 0, True), _rate(64, 8, 0, True),
                _latency(64, 4),
                {"kind": "cm", "qps": 1, "pmtu": 4096, "bytes": 0, "cm": 2},
                _loss(0.01, 2, 512 * KIB)]
        return [("quick", runs), ("quick-responder", responder_runs(True) + read_runs(True)
                                  + atomic_runs(quick=True) + roundtrip_runs(quick=True)),
                ("quick-incast", incast.bench_runs(True))]
    batches = [("goodput-1qp-write", [_goodput(s, p, "WRITE", 1, line, False) for p in PMTUS
                                      for line in (LINE_GBPS, 0) for s in SIZES_1QP])]
    # the other opcodes and 8 QPs: fewer sizes, and unthrottled at PMTU 4096 only
    batches.append(("goodput-1qp-imm-send", [
        _goodput(s, p, o, 1, line, False) for o in ("WRITE_IMM", "SEND") for p in PMTUS
        for line in (LINE_GBPS, 0) if line or p == 4096 for s in SIZES_1QP_OTHER]))
    batches.append(("goodput-8qp", [
        _goodput(s, p, o, 8, line, False) for o in OPCODES for p in PMTUS
        for line in (LINE_GBPS, 0) if line or p == 4096 for s in SIZES_8QP]))
    batches.append(("message-rate", [_rate(s, q, line, False) for q in (1, 8)
                                     for line in (LINE_GBPS, 0) for s in SIZES_RATE]))
    batches += [(name, latency_runs(name)) for name in LATENCY_BATCHES]
    # a warm-up run first (the endpoint resolves the host's address by ARP: not to be counted in
    # the first loss point's time); 16 MiB at 0.1 % (some 4 losses each way), 8 MiB otherwise
    loss = [{**_goodput(64 * KIB, 4096, "WRITE", 1, LINE_GBPS, True), "kind": "warmup"}]
    loss += [_loss(p, rtt, (16 if p == 0.001 else 8) * MIB) for rtt in RTTS for p in LOSSES]
    burst = 64
    for where, off in (("middle", burst // 2), ("tail", burst - 1)):
        for code in (4, 6):
            loss.append({"kind": "recovery", "where": where, "qps": 1, "pmtu": 4096,
                         "bytes": burst * 4096, "size": 4096, "opcode": "WRITE",
                         "source": "generator", "line_gbps": LINE_GBPS, "rtt_us": 2,
                         "drop_psns": [off], "timeout": code})
    batches.append(("loss", loss))
    batches.append(("responder", responder_runs()))
    batches.append(("read", read_runs()))
    if responder_axi4():
        batches.append(("responder-axi4", responder_runs(memory="axi4")))
    batches += [(name, atomic_runs(width)) for name, (width, _) in ATOMIC_BATCHES.items()]
    batches += [(name, roundtrip_runs(name)) for name, (_, _, memory) in ROUNDTRIP_BATCHES.items()
                if memory == "onchip" or responder_axi4()]
    batches.append(("incast", incast.bench_runs()))
    if on_request:
        batches.append(("soak", soak_runs()))
        batches.append(("resp_fuzz", [{"kind": "resp_fuzz", "frames": RESP_FUZZ_FRAMES,
                                       "qps": 2, "pmtu": 1024, "line_gbps": LINE_GBPS,
                                       "seed": 5}]))
    return batches


def git_revision():
    """``git rev-parse HEAD``, with ``-dirty`` when the working tree has changes."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unknown"
    return (rev or "unknown") + ("-dirty" if rev and dirty else "")


def _verilator_version():
    """``verilator --version`` of the Verilator the builds use (None when there is none)."""
    from rocegen.sim.testing.verilator import VerilatorNotFound, verilator_bin_dir
    try:
        exe = Path(verilator_bin_dir()) / "verilator"
    except VerilatorNotFound:
        return None
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True).stdout.strip()
    return out or None


def _framecheck_mode():
    """How the suite's simulators check frames: as the environment says, else in a worker
    process when the machine has a core for it beside the one simulator a batch runs."""
    from rocegen.sim.testing.framecheck_pool import usable_cores
    return os.environ.get("ROCEGEN_FRAMECHECK") or ("pool" if usable_cores() >= 2 else "inline")


def run_batch(name, runs, peer="connectx", tag=None):
    """Run the runs ``runs`` of batch ``name`` in one simulator process (its build: the
    responder's for :data:`RESPONDER_BATCHES`, the endpoint's otherwise); the results go to
    ``build/bench/suite-<tag or name>.json``. Returns the batch's figures and the results."""
    from rocegen.sim.testing.cocotb_runner import (
        endpoint_sim_config,
        responder_sim_config,
        run_cocotb,
    )
    from rocegen.sim.testing.roce_env import board_clock_mhz
    width = BATCH_WIDTH.get(name, WIDTH)
    if name in RESPONDER_BATCHES:
        axi4 = {"memory": "axi4", "mem_bytes": RESP_AXI4_BYTES} if name.endswith("axi4") else {}
        cfg = responder_sim_config(width, NUM_QPS, **axi4)
        module, testcase = "rocegen.sim.cocotb.roce_resp_runs", "runs"
    else:
        axi4 = {"memory": "axi4", "mem_bytes": ENDPOINT_AXI4_BYTES} if name.endswith("axi4") \
            else {}
        cfg = endpoint_sim_config(width, NUM_QPS, **axi4)
        module, testcase = "rocegen.sim.cocotb.roce_demo", None
    out = BUILD / "bench" / f"suite-{tag or name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    cfg.build()
    t1 = time.perf_counter()
    run_cocotb(cfg, module, testcase, label=f"bench-suite-{name}",
               env={"ROCE_RUNS": json.dumps(runs), "ROCE_RESULTS": out.resolve(),
                    "ROCE_LOCAL_BYTES": LOCAL_BYTES, "ROCE_PEER": peer,
                    "ROCEGEN_FRAMECHECK": _framecheck_mode()})
    t2 = time.perf_counter()
    results = json.loads(out.read_text())
    cycles = sum(r["sim_cycles"] for r in results)
    inside = sum(r["wall_seconds"] for r in results)
    clock = board_clock_mhz(width)
    batch = {"name": name, "runs": len(results), "build_check_seconds": round(t1 - t0, 2),
             "process_seconds": round(t2 - t1, 2), "sim_cycles": cycles,
             **({"width": width, "clock_mhz": clock} if width != WIDTH else {}),
             "simulated_us": round(cycles / clock, 3),
             "run_seconds": round(inside, 2),
             "cycles_per_second": round(cycles / inside) if inside else None,
             "cycles_per_second_with_startup": round(cycles / (t2 - t1)) if t2 > t1 else None,
             "framecheck_mode": _framecheck_mode(),
             "frames_checked": sum(r.get("framecheck", {}).get("frames", 0) for r in results),
             "framecheck_seconds": round(sum(r.get("framecheck_seconds", 0) for r in results), 2),
             "framecheck_wait_seconds": round(sum(r.get("framecheck_wait_seconds", 0)
                                                  for r in results), 2)}
    return batch, results


def _stats(values):
    values = sorted(values)
    return {"min": values[0], "median": values[len(values) // 2], "max": values[-1],
            "samples": values}


def _ns(cycles, clock=CLOCK_MHZ):
    return round(cycles * 1e3 / clock, 1)


def _build(r, row):
    """Note the build of a run's result ``r`` (width, clock, payload memory) in ``row``;
    returns its clock."""
    clock = r.get("clock_mhz", CLOCK_MHZ)
    row.update(width=r.get("width", WIDTH), clock_mhz=clock, memory=r.get("memory", "onchip"))
    return clock


def _figures(results):
    """Every figure of the suite from the runs' raw results."""
    out = {"goodput": [], "message_rate": [], "latency": [], "cm": [], "loss": [], "recovery": [],
           "soak": [], "responder": [], "resp_fuzz": [], "incast": [], "read": [], "atomic": [],
           "roundtrip": []}
    keep = ("batch", "qps", "pmtu", "bytes", "size", "opcode", "source", "line_gbps", "loss", "rtt_us",
            "seed", "timeout", "drop_psns", "where", "messages", "frames", "sim_cycles",
            "wall_seconds")
    for r in results:
        kind = r["kind"]
        row = {k: r[k] for k in keep if k in r}
        if kind in ("goodput", "rate"):
            # the build's clock and width (the main build's for rows written before runs named
            # their build); only the other builds' rows name theirs
            clock, width = r.get("clock_mhz", CLOCK_MHZ), r.get("width", WIDTH)
            if width != WIDTH or r.get("memory", "onchip") != "onchip":
                _build(r, row)
            period_us = 1 / clock
            line = r["line_gbps"]
            msgs = r["messages"]
            row["goodput_gbps"] = r["goodput_gbps"]
            row["data_checked"] = r["checked_bytes"] == r["bytes"] * r["qps"]
            row["cycles"] = r["line_cycles"]
            row["beats_span"] = r["beats_span"]
            row["beats_ideal"] = r["beats_ideal"]
            row["beats_ideal_formula"] = ideal_beats(r["size"], r["pmtu"], r["opcode"],
                                                     width) * msgs
            row["idle_beats"] = r["idle_beats"]
            per_msg_beats = row["beats_ideal_formula"]
            if line:
                row["limit_gbps"] = limit_gbps(r["size"], r["pmtu"], line, r["opcode"])
                row["percent_of_limit"] = 100 * r["goodput_gbps"] / row["limit_gbps"]
            else:
                # unthrottled: the limit is the datapath's, one beat per cycle with no idle beat
                ideal_cycles = per_msg_beats
                row["limit_gbps"] = (r["bytes"] * r["qps"] * 8 / (ideal_cycles * period_us) / 1e3)
                row["percent_of_limit"] = 100 * row["beats_ideal_formula"] / r["beats_span"]
            row["mmsgs"] = msgs * clock / r["line_cycles"] if r["line_cycles"] else 0.0
            if line:
                row["limit_mmsgs"] = rate_limit_mmsgs(r["size"], r["pmtu"], line, r["opcode"])
            else:
                row["limit_mmsgs"] = msgs * clock / per_msg_beats
            out["goodput" if kind == "goodput" else "message_rate"].append(row)
        elif kind == "latency":
            w, a = _stats(r["latency_cycles"]), _stats(r["ack_to_cpl_cycles"])
            row["wr_to_wire_cycles"] = w
            row["ack_to_cpl_cycles"] = a
            clock = _build(r, row)
            row["wr_to_wire_ns"] = _ns(w["min"], clock)
            row["ack_to_cpl_ns"] = _ns(a["min"], clock)
            row["frame_bytes"] = packet_frames(r["size"], r["pmtu"], r["opcode"])[0]
            out["latency"].append(row)
        elif kind == "cm":
            c = _stats(r["cm_cycles"])
            row["cm_cycles"] = c
            row["cm_ns"] = _ns(c["min"], _build(r, row))
            out["cm"].append(row)
        elif kind in ("loss", "recovery"):
            lim = limit_gbps(r["size"], r["pmtu"], r["line_gbps"], r["opcode"])
            good = r["bytes"] * 8 / (r["elapsed_us"] * 1e3)
            lost = [(link or {}).get("dropped", 0) for link in (r["link_to_nic"], r["link_from_nic"])]
            row.update({"elapsed_us": r["elapsed_us"], "goodput_gbps": good, "limit_gbps": lim,
                        "percent_of_limit": 100 * good / lim, "roce_frames": r["roce_frames"],
                        "retransmitted": r["retransmitted"], "lost_to_nic": lost[0],
                        "lost_from_nic": lost[1], "timeout": r["timeout"],
                        "worst_stall_cycles": max(r["resend_gaps"], default=0),
                        "nic": r["nic"],
                        # the bytes the bench compared in the host's memory, all of the run's
                        "data_checked": r["checked_bytes"] == r["bytes"] * r["qps"],
                        "delivered_bytes": r["checked_bytes"]})
            out[kind].append(row)
        elif kind == "soak":
            lost = [(link or {}).get("dropped", 0) for link in (r["link_to_nic"], r["link_from_nic"])]
            row.update({"packets": r["packets"], "roce_frames": r["roce_frames"],
                        "retransmitted": r["retransmitted"], "lost_to_nic": lost[0],
                        "lost_from_nic": lost[1], "link_to_nic": r["link_to_nic"],
                        "link_from_nic": r["link_from_nic"], "nic": r["nic"],
                        "checked_bytes": r["checked_bytes"],
                        "data_checked": r["checked_bytes"] == r["bytes"] * r["qps"],
                        "elapsed_us": r["elapsed_us"],
                        "goodput_gbps": r["bytes"] * r["qps"] * 8 / (r["elapsed_us"] * 1e3)})
            out["soak"].append(row)
        elif kind in ("responder", "resp_latency", "bidir"):
            out["responder"].append(_responder_row(r, row))
        elif kind == "incast":
            out["incast"].append(r)
        elif kind == "read":
            out["read"].append(_read_row(r, row))
        elif kind == "atomic":
            out["atomic"].append(_atomic_row(r, row))
        elif kind == "roundtrip":
            out["roundtrip"].append(_roundtrip_row(r, row))
        elif kind == "resp_fuzz":
            row.update({k: r[k] for k in ("frames", "candidates", "good_messages", "rounds",
                                          "checked_bytes", "victim_answers_lost", "counters",
                                          "predicted")})
            row["kind"] = "resp_fuzz"
            out["resp_fuzz"].append(row)
    return out


def _responder_row(r, row):
    """A row of the responder's figures (``"kind": "responder"``; ``test`` says which)."""
    row.update(kind="responder", memory=r.get("memory", "onchip"))
    if r["kind"] == "resp_latency":
        lat = _stats(r["latency_cycles"])
        row.update(test="latency", latency_cycles=lat, latency_ns=_ns(lat["min"]),
                   data_checked=r["checked_bytes"] > 0)
        return row
    period_us = 1 / CLOCK_MHZ
    line = r["line_gbps"]
    lim = limit_gbps(r["size"], r["pmtu"], line, r["opcode"])
    row.update(test="goodput" if r["kind"] == "responder" else "bidirectional",
               goodput_gbps=r["goodput_gbps"], limit_gbps=lim,
               percent_of_limit=100 * r["goodput_gbps"] / lim, cycles=r["line_cycles"],
               messages=r["messages"], packets=r["packets"], host_frames=r["host_frames"],
               retransmitted=r["retransmitted"], rnr_naks=r["rnr_naks"],
               seq_naks=r.get("seq_naks", 0),
               mmsgs=r["messages"] / (r["line_cycles"] * period_us) if r["line_cycles"] else 0.0,
               limit_mmsgs=rate_limit_mmsgs(r["size"], r["pmtu"], line, r["opcode"]),
               # (the read-back covers the messages and the gaps between them)
               data_checked=r["checked_bytes"] >= r["bytes"] * r["qps"] + r.get("tx_bytes", 0))
    if r["kind"] == "bidir":
        row.update(tx_goodput_gbps=r["tx_goodput_gbps"], rx_goodput_gbps=r["rx_goodput_gbps"],
                   tx_percent_of_limit=100 * r["tx_goodput_gbps"] / lim,
                   tx_bytes=r["tx_bytes"], tx_cycles=r["tx_line_cycles"],
                   tx_frames=r["tx_frames"], tx_acks=r["tx_acks"])
    return row


def _read_row(r, row):
    """A row of the READ figures (``"kind": "read"``; ``test`` says which)."""
    row.update(kind="read", test=r["test"], outstanding=r["outstanding"], rtt_us=r["rtt_us"],
               loss=r["loss"], messages=r["messages"], checked_bytes=r["checked_bytes"],
               data_checked=r["checked_bytes"] == r["bytes"] * r["qps"])
    if r["test"] == "latency":
        lat = _stats(r["latency_cycles"])
        row.update(latency_cycles=lat, latency_ns=_ns(lat["min"]))
        return row
    line = r["line_gbps"]
    lim = limit_gbps(r["size"], r["pmtu"], line, "READ")
    bound = read_bound_gbps(r["outstanding"], r["size"], r["rtt_us"], r["pmtu"], line)
    row.update(goodput_gbps=r["goodput_gbps"], limit_gbps=lim,
               percent_of_limit=100 * r["goodput_gbps"] / lim, bound_gbps=bound,
               percent_of_bound=100 * r["goodput_gbps"] / bound, cycles=r["line_cycles"],
               packets=r["packets"], response_frames=r["response_frames"],
               read_requests=r["read_requests"],
               mmsgs=r["messages"] * CLOCK_MHZ / r["line_cycles"] if r["line_cycles"] else 0.0,
               limit_mmsgs=rate_limit_mmsgs(r["size"], r["pmtu"], line, "READ"))
    if "elapsed_us" in r:
        c = r.get("counters", {})
        row.update(elapsed_us=r["elapsed_us"],
                   goodput_to_completion_gbps=r["goodput_to_completion_gbps"], counters=c,
                   timeouts=c.get("roce_timeouts", 0), rewinds=c.get("roce_rewinds", 0))
    if r.get("failed"):
        row["failed"] = r["failed"]
    lost = [(link or {}).get("dropped", 0) for link in (r["link_to_nic"], r["link_from_nic"])]
    row.update(lost_to_nic=lost[0], lost_from_nic=lost[1])
    return row


def _atomic_row(r, row):
    """A row of the atomics' figures (``"kind": "atomic"``; ``test`` says which), at the clock
    of the run's build."""
    clock = r["clock_mhz"]
    row.update(kind="atomic", test=r["test"], width=r["width"], clock_mhz=clock,
               memory=r.get("memory", "onchip"), count=r["count"],
               outstanding=r["outstanding"], messages=r["messages"])
    if r["test"] == "read_latency":
        lat = _stats(r["latency_cycles"])
        row.update(latency_cycles=lat, latency_ns=round(lat["min"] * 1e3 / clock, 1),
                   data_checked=r["checked_bytes"] == r["size"] * r["messages"])
        return row
    row.update(answers=r["answers"], requests=r["requests"],
               checked_atomics=r["checked_atomics"], final_checked=r["final_checked"],
               # every value returned checked, the targets read back, nothing sent twice
               data_checked=(r["checked_atomics"] == r["messages"] == r["answers"]
                             == r["requests"] and r["final_checked"] > 0))
    if r["test"] == "latency":
        lat = _stats(r["latency_cycles"])
        row.update(latency_cycles=lat, latency_ns=round(lat["min"] * 1e3 / clock, 1))
        return row
    line = r["line_gbps"]
    # (on AXI4 the memory's round trips set the unit's rate: no figure of its own)
    unit = clock / ATOMIC_UNIT_CYCLES if row["memory"] == "onchip" else None
    limit = atomic_limit_mops(line) if line else atomic_offered_mops(r["width"], clock)
    row.update(mops=r["mops"], mops_elapsed=r["mops_elapsed"], cycles=r["line_cycles"],
               elapsed_cycles=r["elapsed_cycles"], limit_mops=limit, unit_mops=unit,
               percent_of_limit=100 * r["mops"] / limit,
               percent_of_unit=100 * r["mops"] / unit if unit else None)
    return row


def _roundtrip_row(r, row):
    """A row of the round trips' figures (``"kind": "roundtrip"``; ``test`` says which), at
    the clock of the run's build: the round trip's samples, the least in ns and half of it
    (the one-way figure ``ib_send_lat`` and ``ib_write_lat`` print), each part's median."""
    clock = r["clock_mhz"]
    rtt = _stats(r["rtt_cycles"])
    row.update(kind="roundtrip", test=r["test"], width=r["width"], clock_mhz=clock,
               memory=r.get("memory", "onchip"), count=r["count"], rtt_cycles=rtt,
               rtt_ns=round(rtt["min"] * 1e3 / clock, 1),
               half_ns=round(rtt["min"] * 1e3 / clock / 2, 1),
               parts_cycles={k: _stats(v)["median"] for k, v in r["parts"].items()},
               **({"latency_cycles": _stats(r["latency_cycles"])} if r.get("latency_cycles")
                  else {}),
               # the parts add up to each sample's round trip
               parts_add_up=all(abs(sum(p[i] for p in r["parts"].values()) - c) < 1e-2
                                for i, c in enumerate(r["rtt_cycles"])),
               # the bytes of every sample compared (both ways for a SEND)
               data_checked=r["checked_bytes"] == r["size"] * r["count"]
               * (2 if r["test"] == "send" else 1))
    return row


def resources():
    """The endpoint's figures from the last Yosys report of ``bench.bench_synth``, or why
    there are none."""
    path = BUILD / "bench" / "synth.json"
    if not path.exists():
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        return {"available": False, "note": f"no synthesis report ({shown} does not exist); "
                "`make synth` writes one"}
    report = json.loads(path.read_text())
    rows = []
    for d in report.get("designs", []):
        if d.get("kind") != "core":
            continue
        rows.append({k: d.get(k) for k in ("name", "description", "lut_total", "lut", "lut_as_memory",
                                           "ff", "carry", "bram36", "bram18", "uram", "dsp",
                                           "lut_levels", "logic_levels", "revision", "cached")})
    return {"available": bool(rows), "source": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT)
            else str(path), "date": report.get("date"), "yosys": report.get("yosys"),
            "revision": report.get("revision"), "designs": rows,
            **({} if rows else {"note": f"{path} holds no whole-core design"})}


def main_build(rows):
    """The rows of the suite's main build (W = :data:`WIDTH`, on-chip memory; rows that name
    no build are its)."""
    return [r for r in rows if r.get("width", WIDTH) == WIDTH
            and r.get("memory", "onchip") == "onchip"]


def _headline(fig):
    def pick(rows, **want):
        for r in rows:
            if all(r.get(k) == v for k, v in want.items()):
                return r
        return None
    h = {}
    for size, key in ((4096, "write_4k"), (MIB, "write_1m")):
        r = pick(fig["goodput"], qps=1, pmtu=4096, size=size, opcode="WRITE", line_gbps=LINE_GBPS)
        if r:
            h[key] = {"goodput_gbps": r["goodput_gbps"], "limit_gbps": r["limit_gbps"],
                      "percent_of_limit": r["percent_of_limit"]}
    for line, key in ((LINE_GBPS, "rate_64b"), (0, "rate_64b_unthrottled")):
        r = pick(main_build(fig["message_rate"]), qps=1, size=64, line_gbps=line)
        if r:
            h[key] = {"mmsgs": r["mmsgs"], "limit_mmsgs": r["limit_mmsgs"]}
    r = pick(main_build(fig["latency"]), size=64)
    if r:
        h["wr_to_wire"] = {"cycles": r["wr_to_wire_cycles"]["min"], "ns": r["wr_to_wire_ns"]}
        h["ack_to_cpl"] = {"cycles": r["ack_to_cpl_cycles"]["min"], "ns": r["ack_to_cpl_ns"]}
    cm = main_build(fig["cm"])
    if cm:
        c = cm[0]
        h["cm_request_to_reply"] = {"cycles": c["cm_cycles"]["min"], "ns": c["cm_ns"]}
    return h


def batch_of(row, key):
    """The batch of :func:`suite_runs` (full mode) a row of the figure list ``key`` comes from
    (rows of results written before rows named their batch: from the kind of figure)."""
    if row.get("batch"):
        return row["batch"]
    if key in ("loss", "recovery"):
        return "loss"
    if key == "soak":
        return "soak"
    if key == "resp_fuzz":
        return "resp_fuzz"
    if key == "read":
        return "read"
    if key == "roundtrip":
        if row.get("memory") == "axi4":
            return "roundtrip-axi4"
        return "roundtrip-w64" if row.get("width") == 64 else "roundtrip"
    if key == "atomic":
        if row.get("memory") == "axi4":
            return "atomic-axi4"
        return "atomic-w64" if row.get("width") == 64 else "atomic"
    if key == "responder":
        return "responder-axi4" if row.get("memory") == "axi4" else "responder"
    if key in ("latency", "cm"):
        if row.get("memory") == "axi4":
            return "latency-axi4"
        return "latency-w64" if row.get("width") == 64 else "latency"
    if key == "message_rate":
        if row.get("memory") == "axi4":
            return "latency-axi4"
        return "latency-w64" if row.get("width") == 64 else "message-rate"
    if row["qps"] == 8:
        return "goodput-8qp"
    return "goodput-1qp-write" if row["opcode"] == "WRITE" else "goodput-1qp-imm-send"


FIGURES = ("goodput", "message_rate", "latency", "cm", "loss", "recovery", "soak", "responder",
           "resp_fuzz", "incast", "read", "atomic", "roundtrip")


def run_suite(quick=False, log=print, only=None, previous=None, peer="connectx"):
    """Run the suite; returns the results (see the module documentation). ``only``: names of
    the batches to run; the other batches' figures are taken from ``previous`` (the results of
    an earlier run), each batch keeping the revision and date it was measured at. ``peer``:
    the host NIC model's behaviour (:data:`rocegen.sim.testing.roce_env.PEERS`): a ConnectX's
    (coalesced and delayed ACKs, credit codes, port MTU) or the ideal peer (an ACK per AckReq
    at once)."""
    from rocegen.sim.testing.roce_env import PEERS
    if peer not in PEERS:
        raise ValueError(f"peer must be one of {', '.join(PEERS)}, not {peer!r}")
    import amaranth
    started = time.time()
    revision = git_revision()            # the source the runs use (documents may change after)
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started))
    batches, raw, failed = [], [], []
    model_batches = []                   # batches of Python models, run in this process
    plan = suite_runs(quick, on_request=bool(only) and not quick)
    if only:
        unknown = set(only) - {name for name, _ in plan}
        if unknown:
            raise ValueError(f"no batch named {', '.join(sorted(unknown))} (batches: "
                             f"{', '.join(name for name, _ in plan)})")
        plan = [(name, runs) for name, runs in plan if name in only]
    else:
        plan = [(name, runs) for name, runs in plan if name not in ON_REQUEST]
    for name, runs in plan:
        log(f"batch {name}: {len(runs)} runs ...")
        if name in MODEL_BATCHES:
            batch, results = incast.run_bench(runs, log)
            model_batches.append({"name": name, **batch, "revision": revision, "date": date})
            raw += [{**r, "batch": name} for r in results]
            continue
        try:
            batch, results = run_batch(name, runs, peer)
        except AssertionError as e:          # a failed run: keep the other batches' figures
            failed.append({"name": name, "runs": runs, "error": str(e)[-4000:]})
            log(f"  FAILED: {str(e)[-2000:]}")
            continue
        batch.update(revision=revision, date=date, peer=peer)
        batches.append(batch)
        raw += [{**r, "batch": name} for r in results]
        log(f"  {batch['sim_cycles']:,} cycles simulated in {batch['process_seconds']:.0f} s "
            f"({batch['cycles_per_second']:,} cycles/s while running)")
    fig = _figures(raw)
    if only and previous:
        order = [name for name, _ in suite_runs(quick, on_request=True)]
        for b in previous["batches"]:
            b.setdefault("revision", previous["revision"])
            b.setdefault("date", previous["date"])
        batches = sorted([b for b in previous["batches"] if b["name"] not in only] + batches,
                         key=lambda b: order.index(b["name"]))
        for key in FIGURES:
            fig[key] = [r for r in previous.get(key, []) if batch_of(r, key) not in only] + fig[key]
        failed = [f for f in previous.get("failed_batches", []) if f["name"] not in only] + failed
        model_batches = [b for b in previous.get("model_batches", [])
                         if b["name"] not in only] + model_batches
    res = resources()
    if only and previous and not res.get("available") and \
            previous.get("resources", {}).get("available"):
        # (no Yosys report here: the figures the earlier run took from one stay)
        res = previous["resources"]
    # the suite's speed: the batches a plain run makes (not the soak, run on request)
    cycles = sum(b["sim_cycles"] for b in batches if b["name"] not in ON_REQUEST)
    simulated = sum(b["simulated_us"] for b in batches if b["name"] not in ON_REQUEST)
    inside = sum(b["run_seconds"] for b in batches if b["name"] not in ON_REQUEST)
    return {
        "suite": "rocegen bench" + (" --quick" if quick else ""),
        "quick": quick,
        "revision": revision,
        "date": date,
        "revisions": sorted({b.get("revision", revision) for b in batches}),
        "wall_seconds": round(sum(b["process_seconds"] + b["build_check_seconds"] for b in batches)
                              + sum(b["process_seconds"] for b in model_batches), 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "amaranth": amaranth.__version__,
        "verilator": _verilator_version(),
        "parameters": {
            "design": "rocegen.sim.testing.roce_tops:EndpointTop (RoceEndpoint)", "width": WIDTH,
            "num_qps": NUM_QPS, "memory": "onchip", "mem_bytes": LOCAL_BYTES,
            "clock_mhz": CLOCK_MHZ, "line_gbps": LINE_GBPS,
            "line_model": "a frame of n bytes (without FCS) takes the line for n + 24 bytes "
                          "(FCS 4, preamble + SFD 8, inter-frame gap 12)",
            "limit": "line rate x payload / line bytes; per packet: Ethernet 14, IPv4 20, UDP 8, "
                     "BTH 12, payload padded to 4, ICRC 4, FCS 4, preamble + SFD 8, IFG 12; RETH "
                     "16 on a WRITE's first packet, ImmDt 4 on a *_IMM's last; frames at least 64 "
                     "bytes with FCS",
            "host": "rocegen.sim.models.rnic.Rnic, strict: every header, PSN and ICRC checked, "
                    "the data compared after every run",
            "peer": peer,
        },
        "batches": batches,
        "model_batches": model_batches,
        "failed_batches": failed,
        "simulation_speed": {"sim_cycles": cycles, "simulated_us": round(simulated, 3),
                             "run_seconds": round(inside, 1),
                             "cycles_per_second": round(cycles / inside) if inside else None},
        "headline": _headline(fig),
        **fig,
        "resources": res,
    }
