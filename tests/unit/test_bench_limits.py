"""The theoretical limits of the benchmark suite (sim/apps/bench_suite.py) against the wire spec's
line-rate figures and hand-counted frames."""

import pytest

from rocegen.sim.apps.bench_suite import (
    MODEL_BATCHES,
    ideal_beats,
    limit_gbps,
    packet_frames,
    rate_limit_mmsgs,
    suite_runs,
    wire_bytes,
)


def test_large_messages_approach_the_spec_table():
    # the spec's line-rate table counts no RETH: SEND of many full packets
    assert limit_gbps(4096 * 1000, 4096, opcode="SEND") == pytest.approx(98.04, abs=0.005)
    assert limit_gbps(1024 * 1000, 1024, opcode="SEND") == pytest.approx(92.59, abs=0.005)
    # a WRITE pays the RETH once per message
    assert limit_gbps(1 << 20, 4096) < limit_gbps(1 << 20, 4096, opcode="SEND")


def test_frames_per_opcode():
    # 64 B: Eth 14 + IPv4 20 + UDP 8 + BTH 12 + payload 64 + ICRC 4 = 122, + RETH 16, + ImmDt 4
    assert packet_frames(64, 4096, "WRITE") == [138]
    assert packet_frames(64, 4096, "WRITE_IMM") == [142]
    assert packet_frames(64, 4096, "SEND") == [122]
    assert packet_frames(64, 4096, "SEND_IMM") == [126]
    # RETH on the first packet only, ImmDt on the last only, payload padded to 4
    assert packet_frames(2049, 1024, "WRITE_IMM") == [1098, 1082, 66]
    assert packet_frames(1, 4096, "SEND") == [62]             # 1 byte padded to 4
    assert wire_bytes(64, 4096) == 138 + 24
    assert limit_gbps(64, 4096) == pytest.approx(100 * 64 / 162)
    assert rate_limit_mmsgs(64, 4096) == pytest.approx(100e3 / 8 / 162)
    assert ideal_beats(64, 4096) == 3 and ideal_beats(4096, 1024, "SEND") == 4 * 17
    with pytest.raises(ValueError):
        packet_frames(64, 4096, "READ")


def test_runs_are_whole_messages():
    for quick in (True, False):
        for _name, runs in suite_runs(quick):
            for r in runs:
                if r.get("size"):
                    assert r["bytes"] % r["size"] == 0 and r["bytes"] >= r["size"], r
    # the quick mode is one simulator process per build: the endpoint, and the endpoint with
    # the responder; besides them only the incast's model, which needs no simulator
    names = [name for name, _ in suite_runs(True)]
    assert [n for n in names if n not in MODEL_BATCHES] == ["quick", "quick-responder"]
    assert [n for n in names if n in MODEL_BATCHES] == ["quick-incast"]
