"""The endpoint's congestion management, whole, in Verilator (tests/cocotb/roce_congestion.py), QP 0
sending RDMA WRITEs to the host NIC model as fast as the endpoint lets it:

* DCQCN's reaction point (``RoceEndpoint(dcqcn=True)``): the data packets are ECN-capable with
  the QP's DSCP; a CNP from the host cuts the QP's rate on the wire to what the reference model
  of the DCQCN law says; with the bypass CNPs change nothing; the traffic-class port changes the
  VLAN priority of the frames sent at run time;
* PFC (``RoceEndpoint(pfc=...)``): a PFC frame for the endpoint's priority (``"core"``: decoded
  by the endpoint itself) or the MAC's pause level (``"mac"``) stops it from starting frames for
  the pause time, after which it sends again; the frame on the wire when the pause comes is
  finished; a pause of another priority changes nothing; a receive path that keeps up asks for
  no XOFF;
* the responder's notification point: the host's requests all arrive marked CE; the endpoint's
  CNPs, one per QP per interval (set at run time), leave the MAC port with DSCP 48 and are
  taken by the strict NIC model (BECN, PadCnt, 16 zero bytes checked) as CNPs of its QP; the
  statistics count them.

Rates on the wire are counted here, independently of the gateware: every frame out of the MAC
port as its length plus FCS (4), preamble and SFD (8) and the inter-frame gap (12); the frames
are parsed with scapy. Times are clock cycles of the simulation. Pause frames are built with
``rocegen.wire.pfc``; the pause time in cycles is worked out here from the quantum (512 bit
times of the line).

Builds (:data:`BUILDS`): the PFC mode is chosen when the endpoint is generated (``"core"``
holds the pause frames' decoder and sender, ``"mac"`` takes the MAC's pause levels instead), so
the two modes take two builds. DCQCN, the VLAN tag the priority rides in and PFC ``"core"``
share one; PFC ``"mac"`` has the other. The gate runs both at W = 64, the full tier both again
at W = 512. Every scenario of a build runs in one cocotb run, one after the other on one
simulator (QP 0 opened afresh, a fresh host, the reaction point's configuration and the traffic
class written at run time), and each failure names its scenario. The responder's CNPs run on
the responder build the other benches share (:func:`responder_sim_config`), its interval set at
run time."""

import gc
import json
import math
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from rocegen.gateware.roce.cc.dcqcn_layouts import dcqcn_config
from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint, default_clk_hz, default_line_gbps
from rocegen.sim.models.cc.dcqcn import DcqcnParams, DcqcnRp
from rocegen.sim.models.responder.responder import CNP_DSCP
from rocegen.sim.testing.cocotb_runner import (
    endpoint_sim_config,
    responder_sim_config,
    run_cocotb,
    run_scenarios,
)
from rocegen.sim.testing.congestion import SLOW
from rocegen.sim.testing.scenarios import HOST_MAC
from rocegen.wire import pfc as P
from rocegen.wire.addr import parse_mac

#: Local memory of the congestion builds (on chip), half of it the streaming ring.
MEM = 1 << 16
#: The VLAN of the DCQCN build, and the traffic class after reset: DSCP 26, ECT(0), priority 1.
VLAN = 5
TC = {"dscp": 26, "ecn": 0b10, "pcp": 1}


def build_params(width, pfc):
    """The endpoint test top's parameters of a congestion build: PFC ``pfc``; with ``"core"``
    also DCQCN (its timers and byte counter far beyond a scenario: after a CNP the rate stays
    where it was cut) and VLAN :data:`VLAN`."""
    params = dict(width=width, num_qps=2, mem_bytes=MEM, ring_bytes=MEM // 2, dscp=TC["dscp"],
                  pcp=TC["pcp"], pfc=pfc)
    if pfc == "core":
        params.update(dcqcn=True, dcqcn_params=SLOW, vlan=VLAN)
    return params


BUILDS = {f"{name}-{width}": build_params(width, pfc) for width in (64, 512)
          for name, pfc in (("dcqcn-core", "core"), ("pfc-mac", "mac"))}


def model_params(width, **physical):
    return DcqcnParams.from_physical(default_clk_hz(width), default_line_gbps(width), **physical)


def cc_cfg(width, bypass=False):
    """The reaction point's configuration of a scenario: :data:`SLOW`, with or without the
    bypass (JSON for the bench)."""
    return dcqcn_config(default_clk_hz(width), default_line_gbps(width), bypass=bypass, **SLOW)


def quanta_for(width, cycles):
    """Quanta of about ``cycles`` cycles, and their exact length in cycles (rounded up)."""
    per = 512 / (default_line_gbps(width) * 1e9) * default_clk_hz(width)
    q = round(cycles / per)
    return q, math.ceil(q * per)


class Result:
    """What the bench reports of a scenario: ``frames`` (``(cycle of the last beat, frame)``),
    ``starts`` (the cycle of each frame's first beat), ``rates`` (``(cycle, rate)`` at the
    start and at every change), ``marks``."""

    def __init__(self, raw):
        self.frames = [(last, bytes.fromhex(f)) for _, last, f in raw["frames"]]
        self.starts = [first for first, _, _ in raw["frames"]]
        self.rates = [tuple(r) for r in raw["rates"]]
        self.marks = raw["marks"]

    def rates_over(self, lo, hi):
        """The rates in force in some cycle of ``[lo, hi]``."""
        out = set()
        for k, (c, r) in enumerate(self.rates):
            nxt = self.rates[k + 1][0] if k + 1 < len(self.rates) else math.inf
            if nxt > c and c <= hi and nxt > lo:
                out.add(r)
        return out

    def wire_rate(self, start, end):
        """Wire bytes per cycle of the frames whose last beat is in [start, end)."""
        return sum(P.line_bytes(len(f)) for c, f in self.frames if start <= c < end) / \
            (end - start)


# ------------------------------------------------------------------------------ scenarios
# Each returns (scenario for the bench, check of its Result).

def cnp_cuts_the_rate(width):
    """A CNP cuts the rate on the wire by the model; the data packets are ECN-capable, DSCP 26.
    (Windows of some 140 frames or more before the CNP, 70 after: one frame more or less in a
    window is within 1.5 %.)"""
    warm, window = (4000, 6000) if width == 64 else (3000, 3000)
    cnp_at = warm + window
    cycles = cnp_at + 1500 + window
    rp = DcqcnRp(model_params(width, **SLOW))
    rc0 = rp.rc
    rp.cnp(0)
    rc1 = rp.rc

    def check(r):
        assert rc1 == rc0 - (rc0 >> 1)                   # alpha 1: halved
        # the data packets: ECN-capable, DSCP 26
        data = [Ether(f)[IP] for _, f in r.frames if Ether(f).haslayer(UDP)]
        assert data and all(ip.tos == 26 << 2 | 0b10 for ip in data)
        # the rate read back, before and after
        t_cnp = r.marks["cnp"]
        assert r.rates_over(0, t_cnp - 1) == {rc0}
        assert r.rates_over(t_cnp + 201, cycles) == {rc1}
        line = rc0 / (1 << 20)
        before = r.wire_rate(warm, warm + window)
        after = r.wire_rate(t_cnp + 1500, t_cnp + 1500 + window)
        assert before == pytest.approx(line, rel=0.03)
        assert after == pytest.approx(rc1 / (1 << 20), rel=0.03)
    return dict(cycles=cycles, cnp_at=cnp_at, pmtu=256 if width == 64 else 1024,
                cc_cfg=cc_cfg(width), tc_cfg=TC), check


def bypass_ignores_cnps_and_priority_changes(width):
    """With the bypass CNPs change nothing; the priority of the frames changes at run time."""
    cfg = cc_cfg(width, bypass=True)
    cycles = 10_500

    def check(r):
        line = cfg["line_rate"] / (1 << 20)
        # no limiter: as fast as the path goes (beyond the line: the MAC takes a beat every
        # cycle), the same after the CNP as before
        before, after = r.wire_rate(1500, 4000), r.wire_rate(5500, 9000)
        assert before > line * 1.03
        assert after == pytest.approx(before, rel=0.03)
        assert r.rates_over(101, cycles) == {cfg["line_rate"]}
        tagged = [(c, Ether(f)) for c, f in r.frames]
        assert all(e.haslayer(Dot1Q) and e[Dot1Q].vlan == VLAN for _, e in tagged)
        t = r.marks["tc"]
        assert {e[Dot1Q].prio for c, e in tagged if c < t} == {1}
        late = {e[Dot1Q].prio for c, e in tagged if c > t + 200}
        assert late == {6}
    return dict(cycles=cycles, cnp_at=4000, cc_cfg=cfg, tc_cfg=TC,
                tc_at=(9000, {"dscp": 26, "ecn": 2, "pcp": 6})), check


def core_pfc_holds_the_transmitter(width):
    """A PFC frame for priority 3 (ours; and 5, not ours, for ever) holds the transmitter for
    the pause time."""
    q, pause = quanta_for(width, 800)
    at = 2500
    frame = P.pfc_frame(parse_mac(HOST_MAC), {3: q, 5: P.MAX_QUANTA})

    def check(r):
        t = r.marks["frame_in"]
        starts = r.starts
        # (PauseRx 2 cycles, the gate 1, and one more)
        assert not [s for s in starts if t + 4 < s <= t + pause]
        after = [s for s in starts if s > t + pause]
        assert after and after[0] <= t + pause + 200
        before = [s for s in starts if t - 1500 < s <= t]
        assert len(before) > 3                  # it was sending when the pause came
        # no pause frame of its own: the receive FIFO never filled
        assert not [f for _, f in r.frames if P.is_mac_control(f)]
    # (the reaction point bypassed: the original property is PFC's alone)
    return dict(cycles=at + pause + 500, frame_at=(at, frame.hex()),
                pmtu=256 if width == 64 else 1024, cc_cfg=cc_cfg(width, bypass=True),
                tc_cfg=TC), check


def mac_pfc_follows_the_pause_level(width):
    """The MAC's pause level: priority 4 (not ours) changes nothing, priority 3 holds the
    transmitter while it is high."""
    on, off = 2500, 3300

    def check(r):
        starts = r.starts
        (t4, _), (t4_off, _), (t3, _), (t3_off, _) = r.marks["pause"]
        assert [s for s in starts if t4 + 2 < s <= t4_off]      # priority 4: not ours
        assert not [s for s in starts if t3 + 2 < s <= t3_off]
        assert [s for s in starts if t3_off < s <= t3_off + 300]
    return dict(cycles=off + 500, pmtu=256 if width == 64 else 1024, tc_cfg=TC,
                pause_at=[(1000, 1 << 4), (1800, 0), (on, 1 << 3), (off, 0)]), check


def plan():
    """Every scenario: (build, full tier, name, (scenario, check))."""
    out = []
    for width in (64, 512):
        full = width == 512
        core = f"dcqcn-core-{width}"
        if width == 64:
            out.append((core, full, "bypass_ignores_cnps_and_priority_changes[64]",
                        bypass_ignores_cnps_and_priority_changes(width)))
        out += [(core, full, f"cnp_cuts_the_rate[{width}]", cnp_cuts_the_rate(width)),
                (core, full, f"core_pfc_holds_the_transmitter[{width}]",
                 core_pfc_holds_the_transmitter(width)),
                (f"pfc-mac-{width}", full, f"mac_pfc_follows_the_pause_level[{width}]",
                 mac_pfc_follows_the_pause_level(width))]
    return out


def run_build(build, full, tmp_path):
    """Run the scenarios of ``build`` and tier ``full`` in one cocotb run; check each, and fail
    with every scenario's failure."""
    chosen = [(name, sc, check) for b, f, name, (sc, check) in plan() if b == build and f == full]
    cfg = endpoint_sim_config(**BUILDS[build])
    tier = "full" if full else "gate"
    run_scenarios(cfg, "tests.cocotb.roce_congestion", f"congestion-{build}-{tier}", chosen,
                  tmp_path / "congestion.json",
                  {"CONG_SCENARIOS": json.dumps([{"name": name, **sc} for name, sc, _ in chosen])},
                  lambda raw, sc: Result(raw))


@pytest.mark.parametrize("build", ["dcqcn-core-64", "pfc-mac-64"])
def test_congestion(build, tmp_path):
    run_build(build, False, tmp_path)


@pytest.mark.full
@pytest.mark.parametrize("build", ["dcqcn-core-512", "pfc-mac-512"])
def test_congestion_full(build, tmp_path):
    run_build(build, True, tmp_path)


def built_config(params):
    """The configuration (``RoceEndpoint.config``) of the endpoint of a build's parameters
    (constructed only to ask)."""
    params = dict(params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        try:
            return RoceEndpoint(params.pop("width"), params.pop("num_qps"), **params).config
        finally:
            gc.collect()


def test_responder_cnps_reach_the_nic_model(tmp_path):
    """The host's WRITEs (one every 300 cycles, all marked CE) into the W = 64 responder build;
    the CNP interval set to 2000 cycles at run time (over the generator's 4 us)."""
    interval, writes = 2000, 24
    cfg = responder_sim_config(64)
    built = built_config(cfg.params)
    assert built["cnp_interval"] == 625 and built["resp_ack_every"] == 0
    out = tmp_path / "cnps.json"
    assert run_cocotb(cfg, "tests.cocotb.roce_congestion", "responder_cnps",
                      label="responder-cnps",
                      env={"ROCE_RESULTS": out, "CNP_RUN": json.dumps(
                          {"interval": interval, "writes": writes, "size": 200, "spacing": 300,
                           "pmtu": 256, "psn": 7})}) == 1
    r = json.loads(out.read_text())
    cnp_cycles = []
    for first, _, f in r["frames"]:
        e = Ether(bytes.fromhex(f))
        if BTH in e and e[BTH].opcode == 0x81:
            assert e[IP].tos == CNP_DSCP << 2 and e[BTH].dqpn == r["host_qpn"]
            cnp_cycles.append(first)
    assert not r["outstanding"]
    n, stats = r["host"]["cnp_rx"], r["stats"]
    assert n == r["qp_cnp_rx"] == len(cnp_cycles) == stats["resp_cnp_sent"] >= 3
    # (the first CNP waits for the host's MAC address: ARP; the others leave as they are made)
    # (a WRITE every 300 cycles, all marked: the next CNP soon after the interval)
    assert all(interval <= b - a < interval + 1000
               for a, b in zip(cnp_cycles[1:], cnp_cycles[2:])), cnp_cycles
    assert stats["resp_cnp_suppressed"] + n == writes and stats["resp_cnp_dropped"] == 0
