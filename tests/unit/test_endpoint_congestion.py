"""The endpoint with DCQCN's reaction point (``RoceEndpoint(dcqcn=True)``), whole, in the
Amaranth simulator: a QP sends WRITEs to the host NIC model as fast as the rate limiter lets it;
its data packets are ECN-capable with the configured DSCP; a CNP from the host cuts the QP's
rate on the wire to what the reference model of the DCQCN law says; with the bypass CNPs change
nothing; the traffic-class port changes the VLAN priority of the frames sent.

Rates on the wire are counted independently of the gateware: every frame of ``mac_tx`` as its
length plus FCS (4), preamble and SFD (8) and the inter-frame gap (12)."""

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether

from rocegen.gateware.roce.dcqcn_layouts import dcqcn_config
from rocegen.gateware.roce.endpoint import default_clk_hz, default_line_gbps
from rocegen.sim.models.dcqcn import DcqcnParams, DcqcnRp
from rocegen.sim.testing.congestion import SLOW, run_endpoint, wire_rate


def model_params(width, **physical):
    return DcqcnParams.from_physical(default_clk_hz(width), default_line_gbps(width), **physical)


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.full)])
def test_a_cnp_cuts_the_rate_on_the_wire_by_the_model(width):
    # (windows of some 140 frames or more before the CNP, 70 after: one frame more or less
    # in a window is within 1.5 %)
    warm, window = (4000, 6000) if width == 64 else (3000, 3000)
    cnp_at = warm + window
    frames, rates, marks = run_endpoint(width, steps=cnp_at + 1500 + window, cnp_at=cnp_at,
                                        pmtu=256 if width == 64 else 1024)
    p = model_params(width, **SLOW)
    rp = DcqcnRp(p)
    rc0 = rp.rc
    rp.cnp(0)
    rc1 = rp.rc
    assert rc1 == rc0 - (rc0 >> 1)                   # alpha 1: halved
    # the data packets: ECN-capable, DSCP 26
    data = [IP(f[14:]) for _, f in frames if IP(f[14:]).haslayer(UDP)]
    assert data and all(ip.tos == 26 << 2 | 0b10 for ip in data)
    # the rate read back, before and after
    t_cnp = marks["cnp"]
    assert {r for c, r in rates if c < t_cnp} == {rc0}
    assert {r for c, r in rates if c > t_cnp + 200} == {rc1}
    line = rc0 / (1 << 20)
    before = wire_rate(frames, warm, warm + window)
    after = wire_rate(frames, t_cnp + 1500, t_cnp + 1500 + window)
    assert before == pytest.approx(line, rel=0.03)
    assert after == pytest.approx(rc1 / (1 << 20), rel=0.03)


def test_the_bypass_ignores_cnps_and_the_priority_changes_at_run_time():
    width = 64
    cfg = dcqcn_config(default_clk_hz(width), default_line_gbps(width), bypass=True, **SLOW)
    steps = 10_500
    frames, rates, marks = run_endpoint(width, steps=steps, cnp_at=4000, cc_cfg=cfg, vlan=5,
                                        tc_cfg_at=(9000, {"dscp": 26, "ecn": 2, "pcp": 6}))
    line = cfg["line_rate"] / (1 << 20)
    # no limiter: as fast as the path goes (beyond the line: this test has no MAC), the same
    # after the CNP as before
    before, after = wire_rate(frames, 1500, 4000), wire_rate(frames, 5500, 9000)
    assert before > line * 1.03
    assert after == pytest.approx(before, rel=0.03)
    assert {r for c, r in rates if c > 100} == {cfg["line_rate"]}
    tagged = [(c, Ether(f)) for c, f in frames]
    assert all(e.haslayer(Dot1Q) and e[Dot1Q].vlan == 5 for _, e in tagged)
    t = marks["tc"]
    assert {e[Dot1Q].prio for c, e in tagged if c < t} == {1}
    late = {e[Dot1Q].prio for c, e in tagged if c > t + 200}
    assert late == {6}
