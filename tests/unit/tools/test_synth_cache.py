"""The result cache of :func:`rocegen.tools.synth.synthesize` (``cache=True``) and the build log
it writes, with a stand-in for Yosys: no process is started; the stand-in writes a small mapped
netlist (two flip-flops and a LUT between them) and a log, and counts its runs. The designs are
tiny Amaranth components, converted to RTLIL for real."""

import json

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.tools import synth
from rocegen.tools.synth import synth_cache_dir, synth_cache_key, synthesize, to_rtlil

VERSION = "Yosys 0.70 (git sha1 28ba3cb92, Release, stand-in)"

NETLIST = {"modules": {"top": {
    "ports": {"clk": {"direction": "input", "bits": [2]},
              "a": {"direction": "input", "bits": [3]},
              "o": {"direction": "output", "bits": [6]}},
    "cells": {
        "r": {"type": "FDRE", "port_directions": {"C": "input", "CE": "input", "R": "input",
                                                  "D": "input", "Q": "output"},
              "connections": {"C": [2], "CE": ["1"], "R": ["0"], "D": [3], "Q": [4]}},
        "l": {"type": "LUT1", "port_directions": {"I0": "input", "O": "output"},
              "connections": {"I0": [4], "O": [5]}},
        "q": {"type": "FDRE", "port_directions": {"C": "input", "CE": "input", "R": "input",
                                                  "D": "input", "Q": "output"},
              "connections": {"C": [2], "CE": ["1"], "R": ["0"], "D": [5], "Q": [6]}},
    },
    "netnames": {"r": {"hide_name": 0, "bits": [4]}, "o": {"hide_name": 0, "bits": [6]}},
}}}


class StandIn:
    """Stands for the Yosys process of :func:`rocegen.tools.synth._run`."""

    def __init__(self):
        self.runs, self.version = 0, VERSION

    def __call__(self, cmd, args, *, cwd, log=None):
        if args == ["-V"]:
            return self.version + "\n"
        self.runs += 1
        (cwd / "netlist.json").write_text(json.dumps(NETLIST))
        (cwd / "synth.log").write_text(f"\n {self.version}\n\n-- Executing script file --\n")
        return ""


@pytest.fixture
def yosys(tmp_path, monkeypatch):
    """The stand-in, with the result cache and the build log in ``tmp_path``."""
    stand_in = StandIn()
    monkeypatch.setattr(synth, "_run", stand_in)
    monkeypatch.setenv("ROCEGEN_SYNTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROCEGEN_COST_LOG", str(tmp_path / "builds.jsonl"))
    synth._version.cache_clear()
    yield stand_in
    synth._version.cache_clear()


class Reg(wiring.Component):
    """A registered copy of its input, ``width`` bits wide."""

    def __init__(self, width=1):
        super().__init__({"a": In(width), "o": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.o.eq(self.a)
        return m


def run(tmp_path, design=None, name="w", **kw):
    return synthesize(design or Reg(), top="top", workdir=tmp_path / name, yosys=["yosys"],
                      cache=True, **kw)


def log_lines(tmp_path):
    return [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]


def entries(tmp_path):
    return sorted((tmp_path / "cache").glob("*.json"))


def test_the_same_design_is_taken_from_the_cache(tmp_path, yosys):
    first = run(tmp_path, name="first")
    assert yosys.runs == 1 and first["cached"] is False
    assert (first["lut"], first["ff"], first["lut_levels"]) == (1, 2, 1)
    assert [p.name for p in entries(tmp_path)] == [f"{first['cache_key']}.json"]

    second = run(tmp_path, name="second")
    assert yosys.runs == 1                          # Yosys did not run again
    assert second["cached"] is True and second["cache_key"] == first["cache_key"]
    figures = {k: v for k, v in first.items() if k not in ("cached", "convert_seconds")}
    assert {k: second[k] for k in figures} == figures       # histograms with integer keys too
    # path ends: r.D and the output port at depth 0, q.D behind the LUT at 1
    assert second["lut_levels_histogram"] == {0: 2, 1: 1} == first["lut_levels_histogram"]
    # no netlist or log of another run is left to pass for this one's
    assert not (tmp_path / "second" / "netlist.json").exists()
    assert not (tmp_path / "second" / "synth.log").exists()
    assert (tmp_path / "second" / "design.il").exists()
    log = log_lines(tmp_path)
    assert [(e["kind"], e["name"], e["source"]) for e in log] == [
        ("yosys", "first", "synthesized"), ("yosys", "second", "cache")]
    assert log[1]["synth_seconds"] == first["synth_seconds"] and log[1]["lut_total"] == 1


def test_a_changed_design_is_synthesized_again(tmp_path, yosys):
    run(tmp_path, Reg(1))
    changed = run(tmp_path, Reg(2))                 # other RTLIL
    assert yosys.runs == 2 and changed["cached"] is False
    assert len(entries(tmp_path)) == 2
    assert run(tmp_path, Reg(2))["cached"] and yosys.runs == 2


def test_a_changed_script_is_synthesized_again(tmp_path, yosys):
    base = run(tmp_path)
    for kw in ({"depth_target": 4}, {"family": "xcu"}, {"keep_hierarchy": True}, {"worst": 3}):
        r = run(tmp_path, **kw)
        assert r["cached"] is False and r["cache_key"] != base["cache_key"], kw
    assert yosys.runs == 5
    assert run(tmp_path, depth_target=4)["cached"] and yosys.runs == 5


def test_another_yosys_version_is_synthesized_again(tmp_path, yosys):
    run(tmp_path)
    synth._version.cache_clear()
    yosys.version = "Yosys 0.71 (git sha1 0123456789, Release, stand-in)"
    assert run(tmp_path)["cached"] is False and yosys.runs == 2


@pytest.mark.parametrize("damage", ["not json", "truncated", "other key", "no figures",
                                    "bad histogram"])
def test_a_damaged_entry_is_ignored_and_replaced(tmp_path, yosys, damage):
    key = run(tmp_path)["cache_key"]
    path = tmp_path / "cache" / f"{key}.json"
    good = path.read_text()
    entry = json.loads(good)
    if damage == "not json":
        path.write_bytes(b"\x00\xff garbage")
    elif damage == "truncated":
        path.write_text(good[:len(good) // 2])
    elif damage == "other key":
        path.write_text(json.dumps({**entry, "key": "0" * 64}))
    elif damage == "no figures":
        path.write_text(json.dumps({**entry, "result": {"lut": 1}}))
    else:
        entry["result"]["lut_levels_histogram"] = {"deep": 1}
        path.write_text(json.dumps(entry))
    r = run(tmp_path)
    assert r["cached"] is False and yosys.runs == 2
    assert json.loads(path.read_text())["key"] == key       # replaced by a good entry
    assert run(tmp_path)["cached"] and yosys.runs == 2


def test_without_the_cache_yosys_always_runs(tmp_path, yosys, monkeypatch):
    r = synthesize(Reg(), top="top", workdir=tmp_path / "w", yosys=["yosys"])
    r = synthesize(Reg(), top="top", workdir=tmp_path / "w", yosys=["yosys"])
    assert yosys.runs == 2 and r["cached"] is False and r["cache_key"] is None
    assert not (tmp_path / "cache").exists()
    monkeypatch.setenv("ROCEGEN_SYNTH_CACHE", "")           # turned off
    assert synth_cache_dir() is None
    assert run(tmp_path)["cached"] is False and run(tmp_path)["cached"] is False
    assert yosys.runs == 4


def test_the_design_text_is_the_same_in_every_clone(tmp_path, yosys):
    """The RTLIL names the source files relative to the checkout: the key of a design does not
    depend on where the clone is."""
    text = to_rtlil(Reg(), "top")
    assert str(synth._ROOT) not in text
    assert '\\src "tests/unit/tools/test_synth_cache.py:' in text
    r = run(tmp_path)
    assert (tmp_path / "w" / "design.il").read_text() == text
    assert r["cache_key"] == synth_cache_key(text, VERSION, r["script"],
                                             json.dumps({"lut_lib": "", "worst": 10}))


def test_cache_dir_and_key():
    assert synth_cache_dir({"HOME": "/h"}) == synth_cache_dir({"HOME": "/h", "XDG_CACHE_HOME": ""})
    assert str(synth_cache_dir({"HOME": "/h"})) == "/h/.cache/rocegen/synth"
    assert str(synth_cache_dir({"XDG_CACHE_HOME": "/x"})) == "/x/rocegen/synth"
    assert str(synth_cache_dir({"ROCEGEN_CACHE": "/r", "HOME": "/h"})) == "/r/synth"
    assert str(synth_cache_dir({"ROCEGEN_SYNTH_CACHE": "/s", "ROCEGEN_CACHE": "/r"})) == "/s"
    key = synth_cache_key("design", "Yosys 0.70", "script")
    assert len(key) == 64 and key == synth_cache_key("design", "Yosys 0.70", "script")
    # the parts are kept apart: moving text from one to the next gives another key
    assert key != synth_cache_key("desig", "nYosys 0.70", "script")
    assert key != synth_cache_key("design", "Yosys 0.70", "script", "options")
