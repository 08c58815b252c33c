"""The closed-loop incast model (:mod:`rocegen.sim.models.fabric.incast`) and ``rocegen sim incast``:
tail drop without DCQCN and PFC, no loss with PFC (long cables too), DCQCN cutting the senders'
rates after CNPs with the queue bounded, the rate limiter holding a sender to its rate, the
notification point's interval, staggered starts, Jain's index against hand-computed values,
frames checked with scapy, the command line's JSON and plot, the bench batch's report.
Expected values come from line-rate arithmetic and the parameters."""

import json
import math

import pytest
from scapy.compat import raw
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocegen.cli.main import main
from rocegen.sim.models import icrc
from rocegen.sim.models.cc.dcqcn import DcqcnParams
from rocegen.sim.models.fabric.incast import (
    CLK_HZ,
    HOST_QPN,
    SENDER_QPN,
    IncastConfig,
    _Frames,
    cnp_frame,
    data_frame,
    jain_index,
    simulate,
)

#: a 4096-byte WRITE MIDDLE: Ethernet 14, IPv4 20, UDP 8, BTH 12, payload, ICRC 4
FRAME = 14 + 20 + 8 + 12 + 4096 + 4
#: its time on a 100G line: FCS, preamble, SFD and gap make 24 bytes more
FRAME_NS = (FRAME + 24) * 8 / 100


def frames_started(start_ns, until_ns):
    """Back-to-back frames at line rate starting in [start, until]."""
    return math.floor((until_ns - start_ns) / FRAME_NS) + 1


def test_jain_index_hand_computed():
    assert jain_index([7, 7, 7, 7]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([1, 2, 3, 4]) == pytest.approx(100 / 120)       # 10^2 / (4 x 30)
    assert jain_index([10, 20]) == pytest.approx(900 / 1000)          # 30^2 / (2 x 500)
    assert jain_index([0, 0]) == 1.0
    for bad in ([], [1, -1], [float("nan")]):
        with pytest.raises(ValueError):
            jain_index(bad)


def test_frames_with_scapy():
    f = data_frame(2, 0x123456, 4096)
    assert len(f) == FRAME and icrc.check(f)
    p = Ether(f)
    assert p[IP].tos == 26 << 2 | 0b10 and p[IP].src == "10.0.0.3" and p[UDP].dport == 4791
    assert p[BTH].opcode == 0x07 and p[BTH].dqpn == HOST_QPN + 2 and p[BTH].psn == 0x123456
    assert raw(p) == f
    fast = _Frames(2, 4096)
    for psn in (0, 1, 0xFFFFFF, 1 << 24 | 5):
        assert fast(psn) == data_frame(2, psn, 4096)
    c = cnp_frame(3)
    assert icrc.check(c)
    q = Ether(c)
    assert q.dst == "02:00:00:00:00:04" and q[IP].tos == 48 << 2 and q[IP].dst == "10.0.0.4"
    assert q[BTH].opcode == 0x81 and q[BTH].becn == 1 and q[BTH].dqpn == SENDER_QPN + 3
    assert q[BTH].psn == 0 and bytes(q[BTH].payload)[:16] == bytes(16)


def test_no_dcqcn_no_pfc_drops():
    r = simulate(senders=4, us=100, dcqcn=False, pfc=False, buffer=100_000, series=False)
    # every sender at line rate the whole time
    assert r["sent_frames"] == [frames_started(0, 100_000)] * 4
    assert r["drops"] > 0 and r["xoff_sent"] == 0
    assert r["max_buffer_bytes"] <= 100_000
    assert r["utilization_converged"] > 0.99
    # what is neither delivered nor dropped is in the buffer, on a cable or on a line
    left = sum(r["sent_frames"]) - sum(r["delivered_frames"]) - r["drops"]
    assert 0 <= left <= 100_000 // FRAME + 3 * 4 + 2


def test_pfc_no_drops_and_pauses():
    for cable in (100, 1000):
        r = simulate(senders=4, us=150, dcqcn=False, pfc=True, buffer=200_000, xoff=30_000,
                     cable_ns=cable, series=False)
        assert r["drops"] == 0 and r["headroom_drops"] == 0, cable
        assert r["xoff_sent"] > 0 and r["xon_sent"] > 0
        # four senders share one line: each is paused three quarters of the time
        assert all(n > 0 for n in r["pfc_rx"]) and abs(r["paused_fraction"] - 0.75) < 0.05
        assert all(n < frames_started(0, 150_000) for n in r["sent_frames"])
        assert r["utilization_converged"] > 0.99
        assert r["jain_fairness"] > 0.99
        # nothing lost: what is not delivered is in the buffer or on its way
        left = sum(r["sent_frames"]) - sum(r["delivered_frames"])
        assert 0 <= left * FRAME <= 4 * (30_000 + 6 * FRAME) + 200_000


def test_dcqcn_cuts_rates_queue_bounded():
    interval = 4_000
    r = simulate(senders=4, us=300, dcqcn=True, pfc=False, buffer=4 << 20, sample_us=10,
                 cnp_interval_ns=interval)
    assert r["ce_marks"] > 0 and r["cnps_sent"] > 0
    # the notification point's interval: at most one CNP per QP per interval
    assert all(1 <= n <= 300_000 // interval + 1 for n in r["cnps_per_flow"])
    # every CNP sent before the last microseconds reached its sender
    assert all(c - 1 <= rx <= c for c, rx in zip(r["cnps_per_flow"], r["cnp_rx"]))
    s = r["series"]
    for k in range(4):
        rc = s["dcqcn_rate_gbps"][k]
        assert rc[0] == pytest.approx(100, rel=1e-6)          # at the line rate first
        assert rc[-1] < 50                                    # cut (alpha 1: halved per CNP)
        delivered = s["rate_gbps"][k]
        assert sum(delivered[-10:]) / 10 < 25                 # the last 100 us
    # the queue built by the first round trips drains once the rates are cut
    assert r["drops"] == 0 and r["max_queue_bytes"] < 4 << 20
    assert s["queue_bytes"][-1] < 200_000
    assert max(s["queue_max_bytes"]) == r["max_queue_bytes"]


def test_limiter_holds_sender_to_rate():
    # the reaction point's line rate at 25 Gb/s: RC starts there and no increase passes it
    params = DcqcnParams.from_physical(CLK_HZ, 25)
    r = simulate(senders=1, us=400, settle_us=200, dcqcn=True, pfc=False, params=params,
                 series=False)
    assert r["ce_marks"] == 0                      # one frame never reaches Kmin
    # over 200 us, within one frame (the rate in Q7.20 bytes per cycle is 25 Gb/s within 1e-6)
    assert abs(r["throughput_gbps"][0] - 25) <= (FRAME + 24) * 8 / 200_000 + 1e-4


def test_staggered_start():
    r = simulate(senders=2, us=100, stagger_us=50, dcqcn=False, pfc=False, buffer=4 << 20,
                 series=False)
    assert r["sent_frames"] == [frames_started(0, 100_000), frames_started(50_000, 100_000)]
    assert r["drops"] == 0


def test_deterministic():
    a = simulate(senders=3, us=200, pfc=False, seed=5)
    b = simulate(senders=3, us=200, pfc=False, seed=5)
    assert a == b


def test_config_errors():
    for kw, word in (({"senders": 0}, "senders"), ({"pmtu": 1000}, "pmtu"),
                     ({"us": 100, "settle_us": 100}, "settle_us"), ({"pmax": 2}, "pmax"),
                     ({"kmin": 10, "kmax": 5}, "kmax"), ({"us": 0}, "us")):
        with pytest.raises(ValueError, match=word):
            IncastConfig(**kw)
    with pytest.raises(TypeError, match="dcqcn"):
        IncastConfig(dcqcn="yes")


def test_cli_json_and_plot(tmp_path, capsys):
    out = tmp_path / "incast.json"
    assert main(["sim", "incast", "--senders", "3", "--us", "200", "--sample-us", "20",
                 "--no-pfc", "--json", str(out), "--plot", str(tmp_path / "img")]) == 0
    r = json.loads(out.read_text())
    assert 0 < r["utilization"] <= 1 and 0 < r["jain_fairness"] <= 1
    for key in ("utilization_converged", "throughput_gbps", "drops", "xoff_sent", "xon_sent",
                "paused_us", "ce_marks", "cnps_sent", "max_queue_bytes"):
        assert key in r, key
    p = r["parameters"]
    assert p["senders"] == 3 and p["us"] == 200 and not p["pfc"] and p["dcqcn"]
    s = r["series"]
    assert len(s["t_us"]) == 10 and len(s["rate_gbps"]) == 3 and len(s["queue_bytes"]) == 10
    assert (tmp_path / "img" / "incast.png").stat().st_size > 0
    # the bench's form: 40 us windows (two samples averaged), every sample of the first 60 us
    from rocegen.sim.apps import incast
    d = incast.downsample(r, 40, start_us=60)
    assert d["series"]["t_us"] == [40, 80, 120, 160, 200] and d["series_step_us"] == 40
    assert d["series"]["rate_gbps"][1][0] == pytest.approx(sum(s["rate_gbps"][1][:2]) / 2,
                                                           abs=1e-4)
    assert d["series"]["queue_max_bytes"][2] == max(s["queue_max_bytes"][4:6])
    assert d["series_start"]["t_us"] == [20, 40, 60]
    assert incast.plot(d, tmp_path / "two.png").stat().st_size > 0
    assert "utilization" in capsys.readouterr().out
    assert main(["sim", "incast", "--senders", "0"]) == 2
    assert "--senders" in capsys.readouterr().err


def test_bench_batch_and_report(tmp_path):
    from rocegen.sim.apps import bench_report, incast
    runs = [{**run, "us": 200, "settle_us": 100} for run in incast.bench_runs()]
    assert {(x["dcqcn"], x["pfc"]) for x in runs} == {(True, True), (True, False),
                                                      (False, True), (False, False)}
    batch, rows = incast.run_bench(runs, log=lambda s: None)
    assert batch["runs"] == 4 and all(x["kind"] == "incast" for x in rows)
    assert [("series" in x) for x in rows] == [True, False, False, True]     # the plotted ones
    results = {"incast": [{**x, "batch": "incast"} for x in rows],
               "model_batches": [{"name": "incast", **batch, "revision": "0" * 40,
                                  "date": "today"}]}
    text = "\n".join(bench_report._incast_markdown(results))
    assert "### Incast" in text and "img/incast_dcqcn_pfc.png" in text
    assert text.count("| on | on |") == 1 and text.count("| off | off |") == 1
    written = bench_report._incast_plots(results, tmp_path)
    assert sorted(p.name for p in written) == ["incast_dcqcn_pfc.png", "incast_no_cc.png"]
