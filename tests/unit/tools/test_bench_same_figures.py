"""``bench/bench_same_figures.py``: runs of two results files are matched by their parameters and
every simulated figure is compared; wall-clock seconds are not figures."""

import json

from bench import bench_same_figures as S


def _run(**kw):
    base = {"batch": "latency", "qps": 1, "pmtu": 4096, "size": 64, "opcode": "WRITE",
            "sim_cycles": 5445, "wr_to_wire_cycles": {"min": 32, "max": 397},
            "wall_seconds": 0.07}
    return {**base, **kw}


def test_same_figures_other_seconds(tmp_path, capsys):
    old = {"latency": [_run(), _run(size=1024, sim_cycles=9000)]}
    new = {"latency": [_run(size=1024, sim_cycles=9000, wall_seconds=3.0),
                       _run(wall_seconds=9.9)]}
    (tmp_path / "a.json").write_text(json.dumps(old))
    (tmp_path / "b.json").write_text(json.dumps(new))
    assert S.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert capsys.readouterr().out.strip().endswith(
        "2 runs with the same figures, 0 with other figures, 0 only in "
        f"{tmp_path / 'a.json'}, 0 only in {tmp_path / 'b.json'}")


def test_a_cycle_count_that_moved_is_reported(tmp_path, capsys):
    old = {"latency": [_run()], "goodput": [_run(batch="goodput-8qp", qps=8)]}
    new = {"latency": [_run(wr_to_wire_cycles={"min": 33, "max": 397})],
           "read": [_run(batch="read")]}
    changed, only_old, only_new, same = S.compare(old, new)
    assert same == 0 and len(changed) == 1
    (section, _), diff = changed[0]
    assert section == "latency"
    assert diff == {"wr_to_wire_cycles": ({"min": 32, "max": 397}, {"min": 33, "max": 397})}
    assert [s for s, _ in only_old] == ["goodput"] and [s for s, _ in only_new] == ["read"]
    (tmp_path / "a.json").write_text(json.dumps(old))
    (tmp_path / "b.json").write_text(json.dumps(new))
    assert S.main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--only-common"]) == 1
    out = capsys.readouterr().out
    assert "wr_to_wire_cycles" in out and "only in" not in out
    assert S.compare(old, new, sections=["goodput"])[0] == []
