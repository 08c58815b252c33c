"""The suite's message-rate figures of builds other than the main one (W = 64 on its 10 Gb/s
line, AXI4): each is taken at its own build's clock and width, goes back to its own batch, and
stays out of the main build's table and headline."""

from rocegen.sim.apps import bench_report as R
from rocegen.sim.apps import bench_suite as S


def _rate(batch, width, clock, memory, line, messages, line_cycles, **kw):
    """A raw result of a ``rate`` run as ``roce_demo`` writes it (64 B WRITEs, one QP)."""
    return {"kind": "rate", "batch": batch, "qps": 1, "pmtu": 4096, "bytes": 64 * messages,
            "size": 64, "opcode": "WRITE", "source": "generator", "line_gbps": line,
            "messages": messages, "frames": messages, "checked_bytes": 64 * messages,
            "line_cycles": line_cycles, "beats_span": line_cycles, "beats_ideal": 0,
            "idle_beats": 0, "goodput_gbps": 64 * messages * 8 / (line_cycles / clock) / 1e3,
            "sim_cycles": line_cycles, "wall_seconds": 1.0,
            **({"width": width, "clock_mhz": clock, "memory": memory} if width else {}), **kw}


def test_a_w64_rate_is_taken_at_its_own_clock():
    main = _rate("message-rate", None, S.CLOCK_MHZ, None, 100, 1024, 4277)
    w64 = _rate("latency-w64", 64, 156.25, "onchip", 10, 1024, 20736)
    axi4 = _rate("latency-axi4", 512, S.CLOCK_MHZ, "axi4", 100, 1024, 4300, source="memory")
    fig = S._figures([axi4, w64, main])["message_rate"]
    got = {(r.get("width"), r.get("memory")): r for r in fig}
    # 1024 messages over 20736 cycles of 6.4 ns; over 4277 cycles of 1 / 322.265625 MHz
    assert abs(got[64, "onchip"]["mmsgs"] - 1024 / (20736 * 6.4e-3)) < 1e-9
    assert abs(got[512, "axi4"]["mmsgs"] - 1024 / (4300 / 322.265625)) < 1e-9
    assert abs(got[None, None]["mmsgs"] - 1024 / (4277 / 322.265625)) < 1e-9
    # a 64 B WRITE's frame is 138 bytes: 18 beats of 8 bytes, 3 of 64
    assert got[64, "onchip"]["beats_ideal_formula"] == 18 * 1024
    assert got[512, "axi4"]["beats_ideal_formula"] == 3 * 1024
    # the main build's rows name no build, as before
    assert "width" not in got[None, None] and "memory" not in got[None, None]
    assert [S.batch_of(r, "message_rate") for r in fig] == \
        ["latency-axi4", "latency-w64", "message-rate"]
    # the headline is the main build's even when another build's row comes first
    head = S._headline({"goodput": [], "message_rate": fig, "latency": [], "cm": []})
    assert head["rate_64b"]["mmsgs"] == got[None, None]["mmsgs"]


def test_other_builds_rates_appear_only_in_the_goals():
    main = _rate("message-rate", None, S.CLOCK_MHZ, None, 100, 1024, 4277)
    w64 = _rate("latency-w64", 64, 156.25, "onchip", 10, 1024, 20736)
    fig = S._figures([w64, main])["message_rate"]
    assert R._goal_figures({"message_rate": fig}) == {
        "W = 512": {"rate_64b": 100 * fig[1]["mmsgs"] / fig[1]["limit_mmsgs"],
                    "clock": S.CLOCK_MHZ},
        "W = 64": {"rate_64b": 100 * fig[0]["mmsgs"] / fig[0]["limit_mmsgs"], "clock": 156.25}}
    assert S.main_build(fig) == [fig[1]]


def test_the_w64_and_axi4_latency_batches_measure_a_rate():
    for name, line, source in (("latency-w64", 10, "generator"),
                               ("latency-axi4", S.LINE_GBPS, "memory")):
        rates = [r for r in S.latency_runs(name) if r["kind"] == "rate"]
        assert [(r["qps"], r["size"], r["line_gbps"], r["source"]) for r in rates] == \
            [(1, 64, line, source)]
    assert not [r for r in S.latency_runs("latency") if r["kind"] == "rate"]
