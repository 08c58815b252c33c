"""cocotb testbench behind ``rocegen sim replay``: the frames of a capture file into the endpoint's
MAC receive port, then its counters, completions and answers to the JSON file named in the
configuration.

``REPLAY_CONFIG`` (JSON): ``pcap`` (path), ``qps`` (QPs 0..qps-1 are opened, in RTS, before
any frame), ``peer_ip``, ``peer_qpn`` (of QP 0; QP k gets peer_qpn + k), ``psn`` (initial PSN
of every QP), ``results`` (path of the JSON written), optionally ``quiet_cycles`` (default 2000).

Sequence: reset; QPs opened through ``qppsn`` / ``qpctl``; every non-empty frame sent on
``s_axis`` back to back (``tuser`` 0: no FCS error); then the testbench waits until the endpoint is
idle -- no counter has changed and no frame has left for ``quiet_cycles`` cycles -- and reads
every counter of :data:`rocegen.gateware.roce.endpoint.endpoint.STATS`. The MAC is always ready;
``cpl`` too. Nothing else is driven: no work request is posted, so any completion comes from
the frames.

The results (JSON object):

``endpoint``
    width, QP table size, the endpoint's MAC and IPv4 address, and the QP parameters used.
``frames_in``, ``frames_skipped_empty``
    frames sent, and frames of the capture that were empty (not sent).
``roce_candidates``
    frames that should reach RoCEv2 processing (:func:`rocegen.sim.testing.fuzz.count_roce_candidates`):
    ``roce_rx_packets`` and the sum of the verdict counters should both equal it.
``roce_rx``
    every counter whose name starts with ``roce_rx_``, zero or not.
``stack``
    the network stack's counters that are not zero.
``counters``
    the endpoint's other counters that are not zero.
``completions``
    the records seen on ``cpl`` (``wr_id``, ``qp``, ``status`` by name, ``src``).
``frames_out``, ``frames_out_by_kind``
    frames the endpoint sent, and how many of each kind (``arp``, ``icmp``, ``roce``, ``udp``,
    ``other``).
``framecheck``
    the frames out that scapy rebuilt identically, by kind (:mod:`rocegen.sim.testing.framecheck`).
``cycles``
    clock cycles from the first frame to the end of the wait.
"""

import json
import os

import cocotb
from cocotb.triggers import ClockCycles, ValueChange
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rocegen.gateware.net.stack import STATS as NET_STATS
from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.layouts import COMPLETION, CplStatus, WrSource
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.apps.replay import read_frames
from rocegen.sim.testing.cocotb_helpers import read_stats
from rocegen.sim.testing.framecheck import FrameChecker
from rocegen.sim.testing.fuzz import count_roce_candidates
from rocegen.sim.testing.roce_env import (
    MacFrames,
    RecordCollector,
    RecordDriver,
    now_cycle,
    open_qp,
    start_clock,
    wait_cycles,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC
from rocegen.wire import headers as H
from rocegen.wire.addr import parse_ip

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
W = PARAMS["width"]
#: Gives up when the counters still move after this many waits (a frame loop).
MAX_WAITS = 1000


class FrameSink:
    """Takes every frame the endpoint sends (the test top's MAC capture, always ready), once per
    frame; each goes through the independent frame check (:mod:`rocegen.sim.testing.framecheck`), which
    fails the testbench on a mismatch."""

    def __init__(self, dut):
        self.dut = dut
        self.frames = []
        self.check = FrameChecker("sim replay")
        self.beats = 0
        cocotb.start_soon(self._run())

    async def _run(self):
        dut = self.dut
        dut.mac_credit_step.value = 0
        dut.mac_bp_threshold.value = 0
        mac = MacFrames(dut, W)
        while True:
            await ValueChange(dut.mac_frames)
            for _, _, frame, _ in mac.take():
                self.check.check(frame)
                self.frames.append(frame)
            self.beats = mac.beats


def frame_kind(frame):
    """``arp``, ``icmp``, ``roce`` (UDP port 4791), ``udp`` or ``other``."""
    if len(frame) < H.ETH.length:
        return "other"
    eth = H.ETH.unpack(frame)
    if eth["ethertype"] == H.ETHERTYPE_ARP:
        return "arp"
    end = H.ETH.length + H.IPV4.length
    if eth["ethertype"] != H.ETHERTYPE_IPV4 or len(frame) < end:
        return "other"
    ip = H.IPV4.unpack(frame[H.ETH.length:])
    if ip["protocol"] == H.IP_PROTO_ICMP:
        return "icmp"
    if ip["protocol"] != H.IP_PROTO_UDP or len(frame) < end + H.UDP.length:
        return "other"
    return "roce" if H.UDP.unpack(frame[end:])["dst_port"] == H.UDP_PORT_ROCEV2 else "udp"


def _name(enum, value):
    try:
        return enum(value).name
    except ValueError:
        return value


async def settle(dut, sink, quiet):
    """Wait until no counter has changed and no beat has left for ``quiet`` cycles; return
    the counters."""
    before = None
    for _ in range(MAX_WAITS):
        await wait_cycles(W, quiet)
        stats = await read_stats(dut, STATS)
        now = (stats, sink.beats)
        if now == before:
            return stats
        before = now
    raise AssertionError(f"the endpoint's counters still change after {MAX_WAITS} waits of "
                         f"{quiet} cycles")


@cocotb.test()
async def replay(dut):
    cfg = json.loads(os.environ["REPLAY_CONFIG"])
    frames = read_frames(cfg["pcap"])
    mac, ip = PARAMS.get("mac", FPGA_MAC), PARAMS.get("ip", FPGA_IP)
    await start_clock(dut, W)
    for port in ("wr_valid", "gen_valid", "s_msg_axis_tvalid", "memw_valid"):
        if hasattr(dut, port):
            getattr(dut, port).value = 0
    dut.stats_addr.value = 0
    sink = FrameSink(dut)
    cpl = RecordCollector(dut, "cpl", COMPLETION, width=W)
    ctl = RecordDriver(dut, "qpctl", CONTEXT_WRITE)
    psn_ctl = RecordDriver(dut, "qppsn", PSN_WRITE)
    for k in range(cfg["qps"]):
        await open_qp(ctl, psn_ctl, k, peer_ip=parse_ip(cfg["peer_ip"]),
                      peer_qpn=cfg["peer_qpn"] + k, rkey=0, base_va=0, pmtu=4096, psn=cfg["psn"],
                      udp_sport=0xC000 + k, ack_every_log2=4)
    await ClockCycles(dut.clk, 10)
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    source.log.setLevel("WARNING")
    start = now_cycle(W)
    sent = [f for f in frames if f]
    for f in sent:
        source.send_nowait(AxiStreamFrame(f, tuser=0))
    await source.wait()
    stats = await settle(dut, sink, cfg.get("quiet_cycles", 2000))
    kinds = {}
    for f in sink.frames:
        kinds[frame_kind(f)] = kinds.get(frame_kind(f), 0) + 1
    results = {
        "endpoint": {"width": W, "num_qps": PARAMS["num_qps"], "mac": mac, "ip": ip,
                     "qps": cfg["qps"], "peer_ip": cfg["peer_ip"], "peer_qpn": cfg["peer_qpn"],
                     "psn": cfg["psn"]},
        "frames_in": len(sent),
        "frames_skipped_empty": len(frames) - len(sent),
        "roce_candidates": count_roce_candidates(sent, mac, ip),
        "roce_rx": {k: v for k, v in stats.items() if k.startswith("roce_rx_")},
        "stack": {k: v for k, v in stats.items() if k in NET_STATS and v},
        "counters": {k: v for k, v in stats.items()
                     if k not in NET_STATS and not k.startswith("roce_rx_") and v},
        "completions": [dict(c, status=_name(CplStatus, c["status"]),
                             src=_name(WrSource, c["src"])) for c in cpl.items],
        "frames_out": len(sink.frames),
        "frames_out_by_kind": dict(sorted(kinds.items())),
        "framecheck": dict(sink.check.counts),
        "cycles": now_cycle(W) - start,
    }
    with open(cfg["results"], "w") as f:
        json.dump(results, f, indent=1)
