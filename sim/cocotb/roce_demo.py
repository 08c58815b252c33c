"""cocotb testbench behind ``rocegen sim demo`` and the RoCE benchmark: the endpoint writes into the
host NIC model's memory, the data is checked byte for byte, and the figures of every run go to
the JSON file named by ``ROCE_RESULTS``.

``ROCE_RUNS`` (JSON) lists the runs, each a dict:

``qps``, ``pmtu``
    QPs used (0..qps-1) and their path MTU.
``bytes``
    Bytes per QP.
``size``
    Message size (the last message of a QP may be shorter).
``opcode``
    ``WRITE``, ``WRITE_IMM``, ``SEND`` or ``SEND_IMM``.
``source``
    ``generator`` (the built-in traffic generator, one QP, pattern data) or ``memory`` (work
    requests on the user port, payload from local memory filled with random bytes).
``line_gbps``
    MAC throttled to this line rate (0: the MAC takes a beat every cycle).
``latency``
    if true, the run is single work requests posted one at a time on an idle endpoint, and the
    figures are the cycles from the work request's acceptance to its first beat on the MAC
    (``latency_cycles``) and from the last beat of the acknowledgement into the endpoint to the
    completion (``ack_to_cpl_cycles``).

``loss``, ``dup``, ``reorder``, ``corrupt``
    Fault probabilities per frame of the link between the endpoint and the host NIC model, in
    both directions (see :func:`rocegen.sim.testing.roce_env.link_pair`); 0 by default.
``seed``
    Seed of the links' faults (the two directions get ``2 * seed`` and ``2 * seed + 1``).
``rtt_us``
    Round trip of the link in microseconds, half of it as each direction's delay.
``timeout``
    QP retransmit timeout code (4.096 us x 2^timeout, 0 = never); by default 0 on a perfect
    link, at least 4 with any fault (:func:`rocegen.sim.testing.roce_env.timeout_code`).

``cm``
    if a number ``n`` > 0, the run is ``n`` connection-manager exchanges on an idle endpoint
    instead of data: the host sends OPEN_QP (a 64-byte datagram to UDP 17185) and, once it has
    the reply, CLOSE_QP for the QP it got. The figure is, for each OPEN_QP, the cycles from the
    last beat of the request entering ``s_axis`` to the first beat of the reply leaving
    ``m_axis`` (``cm_cycles``); ``pmtu`` is the path MTU the request asks for.

``drop_psns``
    PSN offsets (from the QP's first PSN of the run) of QP 0's data packets that the link to
    the NIC loses once, whatever else it does (for example the run's last packet: a tail loss,
    which only a timeout recovers).

A run's result adds ``resend_gaps`` (for each retransmitted data frame, the cycles from the
first beat of its previous copy to its own), ``retransmitted`` (RoCE data frames the endpoint
sent again), ``roce_frames`` (every RoCE data frame it sent), the counters of both links (``link_to_nic``,
``link_from_nic``; ``None`` without a link), the NIC model's recovery counters (``nic``),
``messages`` (messages in the run, all QPs), ``packets`` (the data packets they make, each of
which the host must have executed exactly once: checked against its counters, with the bytes it
placed), ``checked_bytes`` (bytes of the host's memory and receive buffers compared with what
the endpoint was asked to send), ``sim_cycles`` (clock cycles
the run took, set-up and checks included) and ``wall_seconds`` (the wall-clock time the
simulator took for them), ``framecheck`` (the frames out of the endpoint in the run that
:mod:`rocegen.sim.testing.framecheck` rebuilt with scapy and found identical, by kind),
``framecheck_seconds`` (the seconds that check took: in the worker process beside the simulator,
:mod:`rocegen.sim.testing.framecheck_pool`, when it is used) and
``framecheck_wait_seconds`` (the part of ``wall_seconds`` the simulator waited for the check).
With faults, the NIC model's strict checks still apply to every frame the link did not corrupt;
only the events a lossy link causes (duplicates, PSN sequence NAKs, and drops of the frames the
link corrupted) are allowed in its log.

``ROCE_LOCAL_BYTES``: bytes of local memory filled with random data for ``memory`` runs (default
64 KiB; at most the on-chip memory); no message of such a run may be longer.

``ROCE_PEER``: the host NIC model's behaviour, ``connectx`` (the default: coalesced and delayed
ACKs, credit codes, port MTU, as :func:`~rocegen.sim.testing.roce_env.peer_behaviour` gives for seed
0 without faults) or ``ideal`` (an ACK per AckReq at once).

``fairness`` is the share of the link between the QPs while all of them had packets to send
(:func:`fairness`: max / min payload bytes per QP over that window; None with one QP).

The build's parameters (``ROCEGEN_PARAMS``) choose the MAC side: with ``vlan`` the endpoint
tags its frames 802.1Q and the NIC model takes and sends only frames of that VLAN; with
``phy="xgmii"`` (W = 64) the endpoint sits behind its XGMII MAC and the line side is
cocotbext-eth's XGMII source and sink (:class:`~rocegen.sim.testing.roce_env.XgmiiMacModel`: every
frame's preamble, FCS, padding and gap checked; frame times and goodput are the line's); the
result's ``xgmii`` then holds the frames checked and the MAC's counters, none of its error
counters may be non-zero.

``PCAP``: every frame crossing the MAC port goes to this file, as the NIC model receives it and
as the endpoint receives the answers (after the links).
"""

import json
import os
import random
import time
from collections import Counter

import cocotb
from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_time

from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, CplStatus, WrOpcode
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.models.cm.cm import ACK_ACK, CM_PORT, REPLY_PORT, REQ_CLOSE_QP, REQ_OPEN_QP, pmtu_code
from rocegen.sim.models.cm.cm import request as cm_request
from rocegen.sim.models.cm.cm import unpack as cm_unpack
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import Rnic
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.roce_env import (
    FAULTS,
    MacModel,
    RecordCollector,
    RecordDriver,
    XgmiiMacModel,
    board_clock_mhz,
    cycle_offset,
    is_ipv4,
    l2_length,
    link_pair,
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
    wait_until,
    write_onchip,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip
from rocegen.wire.headers import BTH, IMMDT, IPV4, RETH, UDP, UDP_PORT_ROCEV2
from rocegen.wire.pattern import generator_address, pattern

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
W = PARAMS["width"]
B = W // 8
HOST_QPN = 0x40
REMOTE_BASE = 0x10_0000_0000
LOCAL_BYTES = int(os.environ.get("ROCE_LOCAL_BYTES", 64 * 1024))
BEHAVIOUR = peer_behaviour(0, os.environ.get("ROCE_PEER", "connectx"), faults=False)
PSN_MOD = 1 << 24
#: bytes of the invariant CRC at the end of a RoCEv2 packet
ICRC_BYTES = 4
#: 802.1Q VLAN ID of the endpoint's frames (the build's ``vlan``), None for untagged
VLAN = PARAMS.get("vlan")
#: NIC model log entries a lossy link legitimately causes (besides drops of corrupted frames)
RECOVERY_EVENTS = ("duplicate", "seq_drop", "nak_seq_tx")
#: NIC model counters reported per run
NIC_COUNTERS = ("duplicate", "seq_drop", "nak_seq_tx", "ack_tx", "executed", "drop_icrc",
                "ip_drop_checksum")
#: UDP ports of the host's connection-manager requests and of its replies
CM_HOST_SPORT, CM_HOST_LISTEN = 50000, 50001


def roce_frame_info(frame):
    """(dest QP, opcode) of a RoCEv2 frame (untagged or with one 802.1Q tag), or None for other
    frames."""
    at = l2_length(frame) + IPV4.length + UDP.length
    if len(frame) < at + BTH.length or not is_ipv4(frame):
        return None
    udp = UDP.unpack(frame[at - UDP.length:at])
    if udp["dst_port"] != UDP_PORT_ROCEV2:
        return None
    bth = BTH.unpack(frame[at:at + BTH.length])
    return bth["dest_qp"], bth["opcode"]


#: Request opcodes (RC SEND / RDMA WRITE) with a RETH, and those with immediate data
_SEND_WRITE = (opc.Verb.SEND, opc.Verb.RDMA_WRITE)
RETH_OPCODES = tuple(r.code for r in opc.ROWS if r.verb in _SEND_WRITE and r.has_reth)
IMM_OPCODES = tuple(r.code for r in opc.ROWS if r.verb in _SEND_WRITE and r.has_imm)


def data_payload(frame):
    """Payload bytes of a RoCEv2 RC SEND / RDMA WRITE packet (from the IP length, the BTH's
    opcode and pad count: the Ethernet padding of short frames is not counted)."""
    l2 = l2_length(frame)
    at = l2 + IPV4.length + UDP.length
    ip = IPV4.unpack(frame[l2:l2 + IPV4.length])
    bth = BTH.unpack(frame[at:at + BTH.length])
    extra = (RETH.length if bth["opcode"] in RETH_OPCODES else 0) + \
        (IMMDT.length if bth["opcode"] in IMM_OPCODES else 0)
    return (ip["total_length"] - IPV4.length - UDP.length - BTH.length - extra - ICRC_BYTES
            - bth["padcnt"])


def fairness(frames, qps):
    """The share of the link between ``qps`` busy QPs: payload bytes of each QP's data frames
    that started while every QP had packets to send -- from the first frame of the QP that
    started last up to (not including) the first frame that is some QP's last -- as
    ``{"window_cycles", "min_bytes", "max_bytes", "ratio"}`` (``ratio`` = max / min), or None
    with one QP, no frames or no such window. ``frames``: ``(first cycle, last cycle, frame)``
    of the run's RoCE frames. The window cuts the round robin's rounds anywhere, so a QP may
    have one packet more than another in it."""
    data = [(f, roce_frame_info(fr)[0] - HOST_QPN, fr) for f, _, fr in frames
            if roce_data_key(fr) is not None]
    if qps < 2 or not data:
        return None
    first, last = {}, {}
    for f, k, _ in data:
        first.setdefault(k, f)
        last[k] = f
    if len(last) < qps:
        return None
    start, end = max(first.values()), min(last.values())
    if end <= start:
        return None
    got = dict.fromkeys(range(qps), 0)
    for f, k, fr in data:
        if start <= f < end:
            got[k] += data_payload(fr)
    lo, hi = min(got.values()), max(got.values())
    return {"window_cycles": end - start, "min_bytes": lo, "max_bytes": hi,
            "ratio": hi / lo if lo else float("inf")}


@cocotb.test()
async def runs(dut):
    runs = json.loads(os.environ["ROCE_RUNS"])
    results = []
    await start_clock(dut, W)
    pcap = PcapWriter(os.environ["PCAP"]) if os.environ.get("PCAP") else None
    nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=BEHAVIOUR, vlan=VLAN)
    xgmii = PARAMS.get("phy") == "xgmii"
    mac = (XgmiiMacModel if xgmii else MacModel)(dut, W, nic, pcap=pcap)
    ctl = RecordDriver(dut, "qpctl", CONTEXT_WRITE)
    psn_ctl = RecordDriver(dut, "qppsn", PSN_WRITE)
    wr = RecordDriver(dut, "wr", WORK_REQUEST)
    gen = RecordDriver(dut, "gen", GEN_CONFIG)
    cpl = RecordCollector(dut, "cpl", COMPLETION, width=W)
    dut.s_msg_axis_tvalid.value = 0
    dut.stats_addr.value = 0
    memory = PARAMS.get("memory", "onchip")
    rng = random.Random(5)
    local = rng.randbytes(LOCAL_BYTES)
    if memory == "onchip":
        await write_onchip(dut, W, PARAMS.get("mem_bytes", 256 * 1024), 0, local)
    else:
        from cocotbext.axi import AxiBus, AxiRam
        ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=PARAMS["mem_bytes"])
        ram.write(0, local)
    psn = {}
    offset = await cycle_offset(dut, W)

    def last_in():
        """The cycle of the last beat of the most recent frame into the endpoint."""
        return int(dut.rx_last_cycle.value) + offset
    for n, run in enumerate(runs):
        await mac.drained()             # the previous run's late copies
        run_cycle, run_wall = now_cycle(W), time.perf_counter()
        checked = (Counter(mac.framecheck.counts), mac.framecheck.seconds, len(mac.frames),
                   framecheck_wait(mac))
        nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=BEHAVIOUR, vlan=VLAN,
                   udp_ports=(CM_HOST_LISTEN,) if run.get("cm") else ())
        mac.nic = nic
        if run.get("cm"):
            mac.to_nic = mac.from_nic = None
            mac.bytes_per_cycle = None
            cm_cycles = await cm_exchanges(dut, mac, nic, last_in, run, n, rng)
            results.append({**run, "width": W, "clock_mhz": board_clock_mhz(W),
                            "memory": memory, "cm_cycles": cm_cycles, "sim_cycles": now_cycle(W) - run_cycle,
                            "wall_seconds": time.perf_counter() - run_wall,
                            **checked_since(mac, checked)})
            continue
        mac.to_nic, mac.from_nic = link_pair(run, board_clock_mhz(W))
        faulty = any(run.get(f) for f in FAULTS) or bool(run.get("drop_psns"))
        timeout = timeout_code(run)
        mac.clear_sent()
        first_roce, first_retx = mac.roce_frames, mac.retransmitted
        first_retx_index = len(mac.retransmissions)
        first_corrupt = len(mac.corrupt_log)
        mac.bytes_per_cycle = (run["line_gbps"] * 1e9 / 8 / (board_clock_mhz(W) * 1e6)
                               if run.get("line_gbps") else None)
        qps = run.get("qps", 1)
        opcode = WrOpcode[run.get("opcode", "WRITE")]
        per_qp = run["bytes"]
        size = min(run.get("size", per_qp), per_qp) or 0
        remote = {}
        for k in range(qps):
            start = psn.get(k, rng.getrandbits(24))
            nic.create_qp(HOST_QPN + k, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                          epsn=start, pmtu=run["pmtu"])
            remote[k] = REMOTE_BASE + (k << 36)
            nic.register_mr(remote[k], max(per_qp, 1) + 64, 0x2000 + k)
            await open_qp(ctl, psn_ctl, k, peer_ip=parse_ip(HOST_IP), peer_qpn=HOST_QPN + k,
                          rkey=0x2000 + k, base_va=remote[k], pmtu=run["pmtu"], psn=start,
                          udp_sport=0xC100 + k, timeout=timeout)
            psn[k] = start
        for off in run.get("drop_psns", ()):
            if mac.to_nic is None:
                mac.to_nic = Link(name="to NIC")
            key = (HOST_QPN, (psn[0] + off) % (1 << 24))
            mac.to_nic.drop_matching(lambda fr, key=key: roce_data_key(fr) == key, count=1)
        first_frame = len(mac.frames)
        first_line = len(mac.line)
        messages = {k: [] for k in range(qps)}          # (remote offset, length, local addr)
        for k in range(qps):
            off = 0
            while True:
                m = min(size, per_qp - off) if size else 0
                messages[k].append(off)
                off += m
                if off >= per_qp:
                    break
        sends = opcode in (WrOpcode.SEND, WrOpcode.SEND_IMM, WrOpcode.WRITE_IMM)
        latency = []
        ack_to_cpl = []
        if run.get("source") == "generator":
            k = 0
            count = len(messages[0])
            if sends:
                for s in range(count):
                    nic.post_recv(HOST_QPN, max(size, 1), s)
            t0 = now_ps()
            await gen.send({"qp": 0, "opcode": opcode, "length": size, "count": count,
                            "spacing": 0, "imm": 0,
                            # each WRITE lands at its own offset, where it is checked
                            "window": count * size if opcode in (WrOpcode.WRITE, WrOpcode.WRITE_IMM)
                            else 0})
            await ClockCycles(dut.clk, 2)
            await wait_low(dut, dut.gen_busy, W, max_cycles=50_000_000,
                           what=f"run {n}: the traffic generator")
            if int(dut.gen_ok.value) != count or int(dut.gen_err.value):
                raise AssertionError(f"run {n}: generator completed {int(dut.gen_ok.value)} of "
                                     f"{count}, {int(dut.gen_err.value)} with errors")
            check = []
            for s in range(count):
                m = min(size, per_qp - s * size) if size else 0
                if opcode in (WrOpcode.WRITE, WrOpcode.WRITE_IMM):
                    check.append((nic.read_mem(remote[0] + s * size, m),
                                  pattern(generator_address(s), m)))
            if sends:
                got = nic.poll_cq()
                assert len(got) == count, f"run {n}: {len(got)} of {count} receives"
                for s, c in enumerate(got):
                    m = min(size, per_qp - s * size) if size else 0
                    if opcode == WrOpcode.WRITE_IMM:
                        # the payload is in the memory (checked above); the receive completes
                        # with the generator's immediate and the message's length
                        assert (c.imm, c.byte_len) == (0, m), \
                            f"run {n}: receive {s} completed with imm {c.imm}, {c.byte_len} bytes"
                    else:
                        check.append((c.data[:m] if c.data is not None else b"",
                                      pattern(generator_address(s), m)))
            elapsed_ps = now_ps() - t0
        else:
            jobs = []
            wr_id = 0
            for k in range(qps):
                for off in messages[k]:
                    m = min(size, per_qp - off) if size else 0
                    la = rng.randrange(0, (LOCAL_BYTES - m) // B + 1) * B if m <= LOCAL_BYTES \
                        else None
                    if la is None:
                        raise ValueError(f"message size {m} larger than the local buffer")
                    jobs.append((k, wr_id, off, m, la))
                    if sends:
                        nic.post_recv(HOST_QPN + k, max(m, 1), wr_id)
                    wr_id += 1
            # round robin over the QPs
            order = {(k, off): i for k in messages for i, off in enumerate(messages[k])}
            jobs.sort(key=lambda j: (order[j[0], j[2]], j[0]))
            base = len(cpl.items)
            t0 = now_ps()
            for i, (k, wid, off, m, la) in enumerate(jobs):
                t = await wr.send({"wr_id": wid, "qp": k, "opcode": opcode, "local_addr": la,
                                   "length": m, "remote_offset": off, "imm": wid})
                if run.get("latency"):
                    before = len(mac.frames)
                    await cpl.wait_for(base + i + 1, max_cycles=1_000_000)
                    first = next(f for f, _, fr in mac.frames[before - 1:] if roce_frame_info(fr)
                                 and f * period_ps(W) >= t)
                    latency.append(int(first - t // period_ps(W)))
                    done = cpl.cycles[-1]
                    ack_to_cpl.append(done - last_in())
            got = (await cpl.wait_for(base + len(jobs), max_cycles=50_000_000))[base:]
            elapsed_ps = now_ps() - t0
            bad = [c for c in got if c["status"] != CplStatus.OK.value]
            assert not bad, f"run {n}: completions with errors {bad[:3]}"
            check = []
            for k, _wid, off, m, la in jobs:
                if opcode in (WrOpcode.WRITE, WrOpcode.WRITE_IMM):
                    check.append((nic.read_mem(remote[k] + off, m), local[la:la + m]))
            if opcode in (WrOpcode.SEND, WrOpcode.SEND_IMM):
                recv = {c.wr_id: c for c in nic.poll_cq()}
                check += [(recv[wid].data[:m], local[la:la + m]) for k, wid, off, m, la in jobs]
        if len(check) != sum(len(m) for m in messages.values()):
            raise AssertionError(f"run {n}: {len(check)} messages compared, "
                                 f"{sum(len(m) for m in messages.values())} sent")
        for got_bytes, want in check:
            assert got_bytes == want, f"run {n}: data differs in the host's memory"
        checked_bytes = sum(len(want) for _, want in check)
        # exactly once: the host executed each packet of each message once (a duplicate or a
        # retransmission it had executed is not executed again) and placed each byte once
        packets = sum(max(1, -(-min(size, per_qp - off) // run["pmtu"])) if size else 1
                      for k in messages for off in messages[k])
        placed = nic.counters["write_bytes"] + nic.counters["send_bytes"]
        if nic.counters["executed"] != packets or placed != per_qp * qps:
            raise AssertionError(f"run {n}: the host executed {nic.counters['executed']} packets "
                                 f"and placed {placed} bytes, for {packets} packets and "
                                 f"{per_qp * qps} bytes sent")
        unexpected = list(nic.log)
        for entry in mac.corrupt_log[first_corrupt:]:
            unexpected.remove(entry)
        if faulty:
            unexpected = [e for e in unexpected if e.split(":", 1)[0] not in RECOVERY_EVENTS]
        assert not unexpected, f"run {n}: the NIC model logged {unexpected[:3]}"
        for k in range(qps):
            psn[k] = nic.expected_psn(HOST_QPN + k)
        # each retransmission's distance from the previous copy of its packet, in one pass
        gaps = []
        retx = set(mac.retransmissions[first_retx_index:])
        last_copy = {}
        for i in range(first_frame, len(mac.frames)):
            key = roce_data_key(mac.frames[i][2])
            if key is None:
                continue
            if i in retx:
                gaps.append(mac.frames[i][0] - mac.frames[last_copy[key]][0])
            last_copy[key] = i
        # figures, from the RoCE frames of this run
        frames = [(f, l, fr) for f, l, fr in mac.frames[first_frame:] if roce_frame_info(fr)]
        line = [t for t, (_, _, fr) in zip(mac.line[first_line:], mac.frames[first_frame:])
                if roce_frame_info(fr)]
        # goodput over the time the frames occupy the MAC: with a line rate, from the first
        # frame's start on the line to the end of the last one's line time (FCS, preamble and
        # gap included); without, from the first beat to the cycle after the last
        line_span = line[-1][1] - line[0][0] if line else 0
        per = {k: {"bytes": per_qp if messages[k] else 0, "packets": 0} for k in range(qps)}
        beats_ideal = 0
        for _f, _l, fr in frames:
            dest, _ = roce_frame_info(fr)
            k = dest - HOST_QPN
            if k in per:
                per[k]["packets"] += 1
            beats_ideal += -(-max(len(fr), 60) // B)
        span = frames[-1][1] - frames[0][0] + 1 if frames else 0
        period = 1e-6 / board_clock_mhz(W)
        total = per_qp * qps
        frame_checks = checked_since(mac, checked)     # waits for the check of every frame
        results.append({
            **run, "width": W, "clock_mhz": board_clock_mhz(W), "memory": memory,
            "frames": len(frames), "beats_span": span, "beats_ideal": beats_ideal,
            "idle_beats": span - sum(-(-len(fr) // B) for _, _, fr in frames) if frames else 0,
            "line_cycles": line_span,
            "goodput_gbps": total * 8 / (line_span * period) / 1e9 if line_span else 0.0,
            "elapsed_us": elapsed_ps / 1e6,
            "per_qp": per,
            "latency_cycles": latency,
            "ack_to_cpl_cycles": ack_to_cpl,
            "timeout": timeout,
            "roce_frames": mac.roce_frames - first_roce,
            "retransmitted": mac.retransmitted - first_retx,
            "resend_gaps": gaps,
            "link_to_nic": dict(mac.to_nic.counters) if mac.to_nic else None,
            "link_from_nic": dict(mac.from_nic.counters) if mac.from_nic else None,
            "nic": {c: nic.counters[c] for c in NIC_COUNTERS},
            "messages": sum(len(m) for m in messages.values()),
            "checked_bytes": checked_bytes,
            "packets": packets,
            "fairness": fairness(frames, qps),
            "vlan": VLAN,
            "phy": "xgmii" if xgmii else "axis",
            "xgmii": xgmii_figures(dut, mac) if xgmii else None,
            "sim_cycles": now_cycle(W) - run_cycle,
            "wall_seconds": time.perf_counter() - run_wall,     # the wait for the check included
            **frame_checks,
        })
    if pcap:
        pcap.close()
    with open(os.environ["ROCE_RESULTS"], "w") as f:
        json.dump(results, f, indent=1)


def checked_since(mac, mark):
    """The frame check's counts and seconds since ``mark`` (counts, seconds), for a run's
    result; a run that sent frames must have had them checked."""
    counts, seconds, frames, wait = mark
    new = {k: v - counts[k] for k, v in mac.framecheck.counts.items() if v - counts[k]}
    sent = len(mac.frames) - frames
    assert new.get("frames", 0) == sent, f"{sent} frames sent, {new.get('frames', 0)} checked"
    return {"framecheck": new, "framecheck_seconds": round(mac.framecheck.seconds - seconds, 3),
            "framecheck_wait_seconds": round(framecheck_wait(mac) - wait, 3)}


def framecheck_wait(mac):
    """Seconds the simulator has waited for the frame check so far: the pool's waits, or all of
    the inline checker's time."""
    fc = mac.framecheck
    return fc.wait_seconds if hasattr(fc, "wait_seconds") else fc.seconds


def xgmii_figures(dut, mac):
    """The XGMII line's figures: frames from the endpoint that passed the line checks of
    :class:`~rocegen.sim.testing.roce_env.XgmiiMacModel`, and the MAC's counters."""
    from rocegen.gateware.xgmii_top import MAC_COUNTERS
    counters = {name: int(getattr(dut, name).value) for name in MAC_COUNTERS}
    bad = {k: v for k, v in counters.items() if v and k not in ("mac_rx_frames", "mac_tx_frames")}
    assert not bad, f"the XGMII MAC counted errors: {bad}"
    assert counters["mac_tx_frames"] == mac.line_frames, \
        f"the MAC sent {counters['mac_tx_frames']} frames, the line carried {mac.line_frames}"
    return {"line_frames_checked": mac.line_frames, **counters}


def now_ps():
    return get_sim_time("ps")


def is_cm_reply(frame):
    """True for a UDP datagram from the connection manager's reply port."""
    at = l2_length(frame) + IPV4.length
    if len(frame) < at + UDP.length or not is_ipv4(frame):
        return False
    return UDP.unpack(frame[at:at + UDP.length])["src_port"] == REPLY_PORT


async def cm_exchanges(dut, mac, nic, last_in, run, n, rng):
    """``run["cm"]`` OPEN_QP / CLOSE_QP exchanges with the connection manager; returns the cycles
    from each OPEN_QP's last beat in to its reply's first beat out."""
    cycles = []

    async def exchange(payload):
        first_out, seen = len(mac.frames), len(nic.udp_rx)
        frame = nic.udp_frame(FPGA_IP, CM_HOST_SPORT, CM_PORT, payload, dst_mac=FPGA_MAC)
        mac.to_endpoint(frame)
        await wait_until(mac, lambda: len(nic.udp_rx) > seen, max_cycles=100_000,
                         what=f"run {n}: no reply from the connection manager")
        src_ip, sport, dport, reply = nic.udp_rx[seen]
        assert (src_ip, sport, dport) == (FPGA_IP, REPLY_PORT, CM_HOST_LISTEN), f"run {n}: reply"
        out = next(f for f, _, fr in mac.frames[first_out:] if is_cm_reply(fr))
        return cm_unpack(reply), out - last_in()

    for _ in range(run["cm"]):
        reply, c = await exchange(cm_request(
            REQ_OPEN_QP, loc_qpn=HOST_QPN, loc_psn=rng.getrandbits(24), loc_rkey=0x2000,
            loc_vaddr=REMOTE_BASE, loc_ip=parse_ip(HOST_IP), listening_port=CM_HOST_LISTEN,
            pmtu_code=pmtu_code(run.get("pmtu", 4096))))
        assert reply["ack_type"] == ACK_ACK, f"run {n}: OPEN_QP refused ({reply['ack_type']})"
        cycles.append(c)
        reply, _ = await exchange(cm_request(REQ_CLOSE_QP, rem_qpn=reply["loc_qpn"],
                                             listening_port=CM_HOST_LISTEN))
        assert reply["ack_type"] == ACK_ACK, f"run {n}: CLOSE_QP refused ({reply['ack_type']})"
        await wait_cycles(W, 20)
    assert not nic.log, f"run {n}: the NIC model logged {nic.log[:3]}"
    return cycles
