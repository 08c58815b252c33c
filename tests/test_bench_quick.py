"""``rocegen bench --quick`` (sim/apps/bench_suite.py) runs in Verilator and its figures are sane:
goodputs within their theoretical limits, throttled large WRITEs close to the limit, message
rates consistent with the cycle counts, positive latencies, loss runs that deliver everything,
the responder's rows (the host writing into the endpoint) within the same limits with every
byte read back, the READ rows (the host READing the endpoint, the endpoint READing the host)
within the limit of READ responses and the bound of their outstanding READs, every byte compared,
the atomic rows (the host's atomics executed by the endpoint) within the line's and the atomic
unit's rates with every value returned and the targets checked,
the revision recorded, the resource figures of the synthesis report (which must exist in CI,
where ``CI=true``: ``.ci/run`` synthesizes first). Never a wall-clock time."""

import json
import os
import shutil

from rocegen.cli import main
from rocegen.sim.apps import bench_report
from rocegen.sim.apps.bench_suite import (
    ATOMIC_UNIT_CYCLES,
    CLOCK_MHZ,
    atomic_limit_mops,
    limit_gbps,
    read_bound_gbps,
    suite_runs,
)
from rocegen.sim.testing.cocotb_runner import ROOT

TOL = 1e-6


def test_quick_suite(tmp_path):
    out = tmp_path / "quick.json"
    assert main(["bench", "--quick", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["quick"] and r["revision"] and r["revision"] != "unknown"
    assert not r["failed_batches"]
    plan = dict(suite_runs(True))
    assert len(r["goodput"]) + len(r["message_rate"]) + len(r["latency"]) + len(r["cm"]) + \
        len(r["loss"]) == len(plan["quick"])
    # the responder's rows: all but the warm-up run, the READ, atomic and round-trip runs
    assert len(r["responder"]) == len([x for x in plan["quick-responder"] if x["kind"] not in
                                       ("warmup", "read", "atomic", "roundtrip")])
    trips = [x for x in plan["quick-responder"] if x["kind"] == "roundtrip"]
    assert sorted(g["test"] for g in r["roundtrip"]) == sorted(x["test"] for x in trips) == \
        ["read", "send", "write"]
    for g in r["roundtrip"]:
        # every sample's bytes compared, its parts adding up to it
        assert g["data_checked"] and g["parts_add_up"], g
        c, parts = g["rtt_cycles"], g["parts_cycles"]
        assert len(c["samples"]) == g["count"] and 0 < c["min"] <= c["max"], g
        assert g["rtt_ns"] == round(c["min"] * 1e3 / CLOCK_MHZ, 1), g
        # the endpoint's own parts take time; a round trip is more than its line times
        mine = ("tx", "rx") if g["test"] == "send" else ("resp",)
        assert all(parts[k] > 0 for k in mine), g
        assert c["min"] > parts["in"] + parts["out"], g
        if g["test"] != "send":
            # the endpoint's own latency (last beat in to first beat out) is within its part
            lat = g["latency_cycles"]
            assert len(lat["samples"]) == g["count"] and 0 < lat["min"], g
            assert lat["max"] <= parts["resp"] + parts["in"], g
    assert len(r["read"]) == len([x for x in plan["quick-responder"] if x["kind"] == "read"])
    atomic = [x for x in plan["quick-responder"] if x["kind"] == "atomic"]
    assert len(r["atomic"]) == len(atomic) and {g["test"] for g in r["atomic"]} >= {"rate",
                                                                                  "latency"}
    for g in r["atomic"]:
        # every value returned checked, the targets read back, one answer per atomic
        assert g["data_checked"] and g["checked_atomics"] == g["messages"], g
        assert g["width"] == 512 and g["clock_mhz"] == CLOCK_MHZ, g
        if g["test"] == "latency":
            assert all(isinstance(c, int) and c > 0 for c in g["latency_cycles"]["samples"]), g
            continue
        assert g["messages"] == g["qps"] * g["count"] == g["answers"] == g["requests"], g
        assert g["limit_mops"] == atomic_limit_mops(g["line_gbps"]), g
        assert g["unit_mops"] == CLOCK_MHZ / ATOMIC_UNIT_CYCLES, g
        assert 0 < g["mops"] <= min(g["limit_mops"], g["unit_mops"]) * (1 + TOL), g
        # (answers after the first over the cycles between the first's start and the last's)
        assert abs(g["mops"] - (g["messages"] - 1) * CLOCK_MHZ / g["cycles"]) < 1e-9 * g["mops"]
    for g in r["read"]:
        assert g["kind"] == "read" and g["opcode"] == "READ" and g["data_checked"], g
        if g["test"] == "latency":
            assert all(isinstance(c, int) and c > 0 for c in g["latency_cycles"]["samples"]), g
            continue
        # the limit of READ responses: AETH on FIRST / LAST / ONLY, never a RETH
        frame = 14 + 20 + 8 + 12 + 4 + g["size"] + 4 + 4 + 20       # one ONLY (size <= PMTU)
        if g["size"] <= g["pmtu"]:
            assert abs(g["limit_gbps"] - 100 * g["size"] / frame) < 1e-9, g
        assert g["limit_gbps"] == limit_gbps(g["size"], g["pmtu"], g["line_gbps"], "READ")
        assert g["bound_gbps"] == read_bound_gbps(g["outstanding"], g["size"], g["rtt_us"],
                                                  g["pmtu"], g["line_gbps"])
        assert 0 < g["goodput_gbps"] <= g["limit_gbps"] * (1 + TOL), g
        assert g["response_frames"] >= g["packets"] and g["read_requests"] >= g["messages"], g
        if g["test"] == "responder":
            assert g["response_frames"] == g["packets"] and g["percent_of_limit"] > 95, g
        else:
            # no READ completes sooner than a round trip after its request
            assert 0 < g["goodput_to_completion_gbps"] <= g["bound_gbps"] * (1 + TOL), g
    for g in r["responder"]:
        assert g["kind"] == "responder" and g["data_checked"], g
        if g["test"] == "latency":
            assert all(isinstance(c, int) and c > 0 for c in g["latency_cycles"]["samples"]), g
            continue
        assert g["limit_gbps"] == limit_gbps(g["size"], g["pmtu"], g["line_gbps"], g["opcode"])
        assert 0 < g["goodput_gbps"] <= g["limit_gbps"] * (1 + TOL), g
        assert 0 < g["percent_of_limit"] <= 100 * (1 + TOL), g
        assert 0 < g["mmsgs"] <= g["limit_mmsgs"] * (1 + TOL), g
        assert g["messages"] == g["qps"] * -(-g["bytes"] // g["size"]), g
        # a perfect link: only what the responder's ingress had no room for is sent again
        assert g["retransmitted"] <= g["seq_naks"] * g["packets"], g
        if g["test"] == "bidirectional":
            assert 0 < g["tx_goodput_gbps"] <= g["limit_gbps"] * (1 + TOL), g
            assert g["rx_goodput_gbps"] == g["goodput_gbps"]
            # the generator's frames only (not the read-back after them), at the line's pace
            # but for the responder's ACKs between them
            assert g["tx_frames"] == g["tx_bytes"] // g["size"] * -(-g["size"] // g["pmtu"]), g
            assert g["tx_percent_of_limit"] > 90 and g["percent_of_limit"] > 85, g
    # 256 KiB per run: the ACK latency after the last request weighs 2 %
    big = [g for g in r["responder"] if g["test"] == "goodput" and g["size"] >= 4096]
    assert big and all(g["percent_of_limit"] > 95 for g in big), big
    for g in r["goodput"] + r["message_rate"]:
        assert 0 < g["goodput_gbps"] <= g["limit_gbps"] * (1 + TOL), g
        assert 0 < g["percent_of_limit"] <= 100 * (1 + TOL), g
        if g["line_gbps"]:
            assert g["limit_gbps"] == limit_gbps(g["size"], g["pmtu"], g["line_gbps"], g["opcode"])
        else:
            assert g["beats_span"] >= g["beats_ideal_formula"] == g["beats_ideal"], g
        # message rate = messages over the cycles their frames took
        assert g["mmsgs"] > 0
        assert abs(g["mmsgs"] - g["messages"] * CLOCK_MHZ / g["cycles"]) < 1e-9 * g["mmsgs"]
        assert g["mmsgs"] <= g["limit_mmsgs"] * (1 + TOL)
        assert g["messages"] == g["qps"] * g["bytes"] // g["size"]
        assert g["data_checked"], g       # every byte compared in the host's memory
    big = [g for g in r["goodput"] if g["line_gbps"] and g["opcode"] == "WRITE" and g["qps"] == 1
           and g["size"] >= 4096]
    assert big and all(g["percent_of_limit"] > 97 for g in big), big
    for lat in r["latency"]:
        for key in ("wr_to_wire_cycles", "ack_to_cpl_cycles"):
            assert all(isinstance(c, int) and c > 0 for c in lat[key]["samples"]), lat
        assert lat["wr_to_wire_ns"] > 0 and lat["ack_to_cpl_ns"] > 0
    assert r["cm"] and all(isinstance(c, int) and c > 0 for c in r["cm"][0]["cm_cycles"]["samples"])
    for loss in r["loss"]:
        assert loss["data_checked"] and loss["delivered_bytes"] == loss["bytes"]
        assert loss["nic"]["executed"] >= loss["bytes"] // loss["size"]
        assert 0 < loss["goodput_gbps"] <= loss["limit_gbps"]
        assert loss["lost_to_nic"] + loss["lost_from_nic"] > 0     # the link did lose frames
    h = r["headline"]
    assert {"write_4k", "write_1m", "rate_64b", "wr_to_wire", "ack_to_cpl",
            "cm_request_to_reply"} <= set(h)
    assert r["simulation_speed"]["sim_cycles"] > 0 and r["batches"][0]["cycles_per_second"] > 0
    # every frame out of the endpoint was rebuilt by scapy, in the simulator or beside it
    for b in r["batches"]:
        assert b["framecheck_mode"] in ("pool", "inline"), b
        assert b["frames_checked"] > 0 and b["framecheck_seconds"] > 0, b
        assert 0 <= b["framecheck_wait_seconds"], b
    assert r["parameters"]["peer"] == "connectx"
    res = r["resources"]
    if os.environ.get("CI", "").lower() == "true":
        # CI synthesizes before the tests (.ci/run): the figures must come from that report
        assert res["available"] and res["designs"], res
    else:
        assert res["available"] or "no synthesis report" in res["note"]
    # the report: tables, plots and the README's headline, into a copy of the documents
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "docs" / "performance.md", tmp_path / "docs" / "performance.md")
    written = bench_report.write_docs(r, tmp_path)
    assert {p.name for p in written} >= {"goodput_vs_size.png", "message_rate.png", "loss.png",
                                         "performance.md", "README.md"}
    perf = (tmp_path / "docs" / "performance.md").read_text()
    assert perf.count(bench_report.BEGIN) == 1 and r["revision"][:12] in perf
    assert "### Responder" in perf and "WRITE PMTU 4096" in perf
    assert "### RDMA atomics" in perf and "FETCH_ADD" in perf
    assert "### Round trips" in perf and "SEND ping-pong" in perf
    assert "### Latency goals" in perf
    readme = (tmp_path / "README.md").read_text()
    assert readme.count(bench_report.H_BEGIN) == 1
    # both say which peer the figures were measured against
    assert bench_report.PEER_TEXT["connectx"] in perf and bench_report.PEER_TEXT["connectx"] in readme
