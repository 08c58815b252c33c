"""The theoretical limits of the benchmark suite (sim/apps/bench_suite.py) against the wire spec's
line-rate figures and hand-counted frames."""

import pytest

from rocegen.sim.apps.bench_suite import (
    ATOMIC_BATCHES,
    MODEL_BATCHES,
    RESPONDER_BATCHES,
    atomic_frames,
    atomic_limit_mops,
    atomic_offered_mops,
    ideal_beats,
    limit_gbps,
    packet_frames,
    rate_limit_mmsgs,
    read_bound_gbps,
    read_runs,
    read_timeout,
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
        packet_frames(64, 4096, "COMPARE_SWAP")


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


def test_read_response_frames():
    # a READ's bytes travel in its responses: Eth 14 + IPv4 20 + UDP 8 + BTH 12 + payload + pad
    # + ICRC 4, and an AETH (4) on FIRST, LAST and ONLY, none on MIDDLE
    assert packet_frames(64, 4096, "READ") == [14 + 20 + 8 + 12 + 4 + 64 + 4]          # ONLY
    assert packet_frames(10000, 4096, "READ") == [4158, 4154, 1870]    # FIRST, MIDDLE, LAST
    assert packet_frames(8192, 4096, "READ") == [4158, 4158]           # FIRST, LAST
    assert packet_frames(1, 1024, "READ") == [66]                      # 1 byte padded to 4
    assert packet_frames(0, 1024, "READ") == [62]                      # ONLY with no payload
    # on the line: + FCS 4 + preamble/SFD/IFG 20
    assert wire_bytes(4096, 4096, "READ") == 4158 + 24
    assert limit_gbps(4096, 4096, opcode="READ") == pytest.approx(100 * 4096 / 4182)
    assert limit_gbps(4096, 4096, opcode="READ") == pytest.approx(97.944, abs=0.0005)
    assert limit_gbps(64 * 1024, 4096, opcode="READ") == pytest.approx(
        100 * 65536 / (2 * 4182 + 14 * 4178))
    # many full packets: the MIDDLEs' rate, the spec table's 98.04 at PMTU 4096
    assert limit_gbps(4096 * 1000, 4096, opcode="READ") == pytest.approx(98.04, abs=0.005)
    assert rate_limit_mmsgs(64, 4096, opcode="READ") == pytest.approx(100e3 / 8 / 150)
    assert ideal_beats(4096, 4096, "READ") == 65                      # 4158 bytes in 64 B beats


def test_read_bound():
    # outstanding x size per round trip, at most the line's limit of the responses
    assert read_bound_gbps(1, 65536, 20) == pytest.approx(65536 * 8 / 20e3)      # 26.2 Gb/s
    assert read_bound_gbps(4, 65536, 20) == pytest.approx(100 * 65536 / (2 * 4182 + 14 * 4178))
    assert read_bound_gbps(1, 65536, 2) == pytest.approx(limit_gbps(65536, 4096, opcode="READ"))
    assert read_bound_gbps(16, 65536, 0) == limit_gbps(65536, 4096, opcode="READ")


def test_read_timeout():
    # 4 x (2 us + 16 x 64 KiB at 100 Gb/s = 83.9 us) = 343.5 us: 4.096 us x 2^7 = 524 us
    assert read_timeout(16, 65536, 2) == 7
    # 4 x (2 + 5.24) = 29 us: the least code, 4 (65.5 us)
    assert read_timeout(16, 4096, 2) == 4
    # 4 x (20 + 4 x 5.24) = 163.9 us: 2^6 x 4.096 = 262 us
    assert read_timeout(4, 65536, 20) == 6


def test_read_runs():
    full = dict(suite_runs(False))["read"]
    reads = [r for r in full if r["kind"] == "read"]
    assert reads and all(r["opcode"] == "READ" for r in reads)
    # the goals' points are there: the responder at PMTU 4096 from 4 KiB messages, the
    # requester's 1, 4 and 16 outstanding 64 KiB READs at 2 and 20 us, 1 % loss, the latency
    assert {(r["pmtu"], r["size"]) for r in reads if r["test"] == "responder"} >= {
        (4096, 4096), (4096, 65536), (4096, 1 << 20)}
    assert {(r["outstanding"], r["rtt_us"], r["size"]) for r in reads
            if r["test"] == "requester"} == {(o, t, 65536) for o in (1, 4, 16) for t in (2, 20)}
    assert {(r["outstanding"], r["rtt_us"], r["loss"]) for r in reads
            if r["test"] == "loss"} >= {(16, 2, 0.01)}
    assert [r["test"] for r in reads].count("latency") == 1
    # the quick suite's few points ride in the responder's process (its build)
    quick = dict(suite_runs(True))["quick-responder"]
    assert {r["test"] for r in quick if r["kind"] == "read"} >= {"responder", "latency"}
    # without the endpoint's own READs: only the responder's points
    assert {r["test"] for r in read_runs(requester=False) if r["kind"] == "read"} == {
        "responder", "latency"}


def test_atomic_frames():
    # request: Eth 14 + IPv4 20 + UDP 8 + BTH 12 + AtomicETH 28 + ICRC 4; answer: ... + AETH 4
    # + AtomicAckETH 8 + ICRC 4
    assert atomic_frames() == (86, 70)
    # the line carries the longer frames' rate: 86 + 24 bytes of line time each
    assert atomic_limit_mops(100) == pytest.approx(100e3 / 8 / 110)          # 113.6 M/s
    assert atomic_limit_mops(10) == pytest.approx(10e3 / 8 / 110)
    # a beat a cycle: 2 beats at W = 512, 11 at W = 64
    assert atomic_offered_mops(512, 322.265625) == pytest.approx(322.265625 / 2)
    assert atomic_offered_mops(64, 156.25) == pytest.approx(156.25 / 11)


def test_atomic_runs():
    batches = dict(suite_runs(False))
    assert set(ATOMIC_BATCHES) <= set(batches) and set(ATOMIC_BATCHES) <= set(RESPONDER_BATCHES)
    for name, (_width, line) in ATOMIC_BATCHES.items():
        runs = [r for r in batches[name] if r["kind"] == "atomic"]
        rate = {(r["opcode"], r["qps"], r["line_gbps"]) for r in runs if r["test"] == "rate"}
        # one QP and 8 at the batch's line, 8 with a beat a cycle, both operations
        assert rate == {(op, q, ln) for op in ("FETCH_ADD", "COMPARE_SWAP")
                        for q, ln in ((1, line), (8, line), (8, 0))}, name
        assert all(r["outstanding"] == 16 for r in runs)
        assert {r["opcode"] for r in runs if r["test"] == "latency"} == {"FETCH_ADD",
                                                                       "COMPARE_SWAP"}
        assert {r["size"] for r in runs if r["test"] == "read_latency"} == {8, 64}
    assert (ATOMIC_BATCHES["atomic"], ATOMIC_BATCHES["atomic-w64"]) == ((512, 100), (64, 10))
    # the quick suite: a rate run and a latency run in the responder's process
    quick = dict(suite_runs(True))["quick-responder"]
    assert {r["test"] for r in quick if r["kind"] == "atomic"} == {"rate", "latency"}
