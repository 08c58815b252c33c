"""Finding the project's Verilator without ``PATH`` (:mod:`rocegen.sim.testing.verilator`), and the
simulator builds (:mod:`rocegen.sim.testing.cocotb_runner`) using it: fake ``verilator`` scripts that
print a version (and, for a build, write a makefile that makes a stand-in simulator), in
directories of their own."""

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from rocegen.sim.testing import cocotb_runner
from rocegen.sim.testing.verilator import (
    MIN_VERSION,
    PIN,
    VerilatorNotFound,
    cache_root,
    verilator_bin_dir,
    verilator_on_path,
)

ROOT = cocotb_runner.ROOT

# A stand-in for Verilator: prints its version; asked to build (-Mdir DIR ... -o NAME), it writes
# DIR/Vtop.mk whose first target makes DIR/NAME (a new file each time, as a linker does) saying
# which build it is ($FAKE_BUILD at make time), or fails when $FAKE_FAIL is set. Like
# Verilator's, the makefile makes verilator.o (cocotb's main) first and includes the make
# dependencies verilator.d of an earlier build: one naming a file gone stops make.
FAKE = r"""#!/bin/sh
if [ "$1" = "--version" ]; then echo "Verilator VERSION 2025-01-01 rev vVERSION"; exit 0; fi
[ -n "$FAKE_FAIL" ] && { echo "fake verilator: failing as asked" >&2; exit 3; }
while [ $# -gt 0 ]; do
    case "$1" in -Mdir) dir=$2; shift;; -o) out=$2; shift;; esac; shift
done
echo "rm -f $out" > "$dir/mk.sh"
echo "printf '#!/bin/sh\\necho build %s\\n' \"\$FAKE_BUILD\" > $out" >> "$dir/mk.sh"
echo "chmod +x $out" >> "$dir/mk.sh"
printf 'all: verilator.o\n\tsh mk.sh\n' > "$dir/Vtop.mk"
printf 'verilator.o:\n\ttouch verilator.o\n-include verilator.d\n' >> "$dir/Vtop.mk"
"""


def fake(directory, version="5.048"):
    """A fake ``verilator`` of ``version`` in ``directory`` (made); returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "verilator"
    exe.write_text(FAKE.replace("VERSION", version))
    exe.chmod(0o755)
    return directory


@pytest.fixture
def env(tmp_path):
    """An environment with no Verilator anywhere: PATH holds only an empty directory and the
    standard one of sh/make, the cache root is empty."""
    (tmp_path / "empty").mkdir()
    return {"PATH": f"{tmp_path / 'empty'}:/usr/bin:/bin", "HOME": str(tmp_path / "home"),
            "ROCEGEN_CACHE": str(tmp_path / "cache")}


def test_nothing_found_says_how_to_get_one(tmp_path, env):
    assert shutil.which("verilator", path=env["PATH"]) is None
    with pytest.raises(VerilatorNotFound) as e:
        verilator_bin_dir(env, prefix=tmp_path / "venv")
    text = str(e.value)
    assert f">= {MIN_VERSION}" in text and "make setup" in text
    assert str(ROOT / "tools" / "verilator.sh") in text and "$ROCEGEN_VERILATOR" in text
    assert str(tmp_path / "venv" / "verilator-bin") in text      # where it looked


def test_order_of_the_lookup(tmp_path, env):
    prefix = tmp_path / "venv"
    prefix.mkdir()
    cached = fake(tmp_path / "cache" / f"verilator-{PIN}" / "bin")
    # 4. the cache of tools/verilator.sh, only once its build is complete
    with pytest.raises(VerilatorNotFound):
        verilator_bin_dir(env, prefix=prefix)
    (cached.parent / ".complete").touch()
    assert verilator_bin_dir(env, prefix=prefix) == cached
    # 3. the directory make setup recorded
    recorded = fake(tmp_path / "recorded")
    (prefix / "verilator-bin").write_text(f"{recorded}\n")
    assert verilator_bin_dir(env, prefix=prefix) == recorded
    # 2. PATH, when new enough: 5.006 (Debian 12's) is passed over
    old = fake(tmp_path / "old", "5.006")
    assert verilator_bin_dir({**env, "PATH": f"{old}:{env['PATH']}"}, prefix=prefix) == recorded
    new = fake(tmp_path / "new", "5.040")
    assert verilator_bin_dir({**env, "PATH": f"{new}:{env['PATH']}"}, prefix=prefix) == new
    # 1. $ROCEGEN_VERILATOR, a directory or the executable, before everything
    given = fake(tmp_path / "given")
    for value in (given, given / "verilator"):
        e = {**env, "PATH": f"{new}:{env['PATH']}", "ROCEGEN_VERILATOR": str(value)}
        assert verilator_bin_dir(e, prefix=prefix) == given


def test_a_recorded_directory_that_is_gone_falls_through_to_the_cache(tmp_path, env):
    prefix = tmp_path / "venv"
    prefix.mkdir()
    (prefix / "verilator-bin").write_text(str(tmp_path / "gone"))
    cached = fake(tmp_path / "cache" / f"verilator-{PIN}" / "bin")
    (cached.parent / ".complete").touch()
    assert verilator_bin_dir(env, prefix=prefix) == cached


def test_the_pinned_cached_version_first_then_the_newest(tmp_path, env):
    dirs = {}
    for v in ("5.040", PIN, "5.100"):
        dirs[v] = fake(tmp_path / "cache" / f"verilator-{v}" / "bin", v)
        (dirs[v].parent / ".complete").touch()
    assert verilator_bin_dir(env, prefix=tmp_path) == dirs[PIN]
    assert verilator_bin_dir({**env, "ROCEGEN_VERILATOR_VERSION": "5.040"},
                             prefix=tmp_path) == dirs["5.040"]
    shutil.rmtree(dirs[PIN].parent)
    assert verilator_bin_dir(env, prefix=tmp_path) == dirs["5.100"]


@pytest.mark.parametrize("what", ["old", "missing"])
def test_a_named_verilator_that_is_no_good_is_an_error(tmp_path, env, what):
    given = fake(tmp_path / "old", "5.006") if what == "old" else tmp_path / "missing"
    recorded = fake(tmp_path / "recorded")
    (tmp_path / "verilator-bin").write_text(str(recorded))
    with pytest.raises(VerilatorNotFound, match=r"\$ROCEGEN_VERILATOR=.*(older than 5\.036|no "
                       r"Verilator).*make setup"):
        verilator_bin_dir({**env, "ROCEGEN_VERILATOR": str(given)}, prefix=tmp_path)


def test_constants_and_cache_are_those_of_tools_verilator_sh(tmp_path):
    script = (ROOT / "tools" / "verilator.sh").read_text()
    assert re.search(r'^MIN="(.*)"$', script, re.M).group(1) == MIN_VERSION
    assert re.search(r'^PIN="\$\{ROCEGEN_VERILATOR_VERSION:-(.*)\}"$', script, re.M).group(1) == PIN
    assert 'CACHE_ROOT="${ROCEGEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rocegen}"' in script
    assert cache_root({"ROCEGEN_CACHE": "/c", "HOME": "/h"}) == cache_root({"ROCEGEN_CACHE": "/c"})
    assert str(cache_root({"XDG_CACHE_HOME": "/x", "HOME": "/h"})) == "/x/rocegen"
    assert str(cache_root({"HOME": "/h"})) == "/h/.cache/rocegen"


def test_on_path_for_the_body_only(tmp_path, monkeypatch):
    d = fake(tmp_path / "given")
    monkeypatch.setenv("ROCEGEN_VERILATOR", str(d))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with verilator_on_path() as got:
        assert got == d and shutil.which("verilator") == str(d / "verilator")
    assert os.environ["PATH"] == "/usr/bin:/bin"


@pytest.fixture
def build_env(tmp_path, monkeypatch):
    """Builds into ``tmp_path/build`` with the fake Verilator named by $ROCEGEN_VERILATOR and
    none on PATH; their build log is ``tmp_path/builds.jsonl``."""
    d = fake(tmp_path / "fake-verilator")
    monkeypatch.setenv("ROCEGEN_VERILATOR", str(d))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ROCEGEN_COST_LOG", str(tmp_path / "builds.jsonl"))
    monkeypatch.setattr(cocotb_runner, "BUILD", tmp_path / "build")
    monkeypatch.setattr(cocotb_runner, "SIM_CACHE", tmp_path / "cache" / "sim")
    return d


def test_a_build_uses_the_found_verilator_without_path(build_env, monkeypatch):
    monkeypatch.setenv("FAKE_BUILD", "one")
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    cfg.build()
    assert (cfg.build_dir / "top").read_text().endswith("echo build one\n")
    assert (cfg.build_dir / ".built").exists() and (cfg.build_dir / ".sources").exists()
    assert os.environ["PATH"] == "/usr/bin:/bin"
    assert not list(cfg.build_dir.glob("*.tmp"))


def test_each_build_says_what_it_cost(build_env, tmp_path):
    """One line in the build log for a compiled build; one for the first reuse in a process, none
    for later ones; one for a build whose sources changed but whose Verilog did not."""
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    cfg.build()
    cfg.simulator_for(tmp_path / "run")
    cfg.build()
    (cfg.build_dir / ".sources").write_text("another source tree")
    cfg.build()
    log = [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]
    assert [(e["kind"], e["name"], e["source"]) for e in log] == [
        ("verilator", cfg.build_dir.name, "compiled"),
        ("verilator", cfg.build_dir.name, "verilog-unchanged")]
    assert all(e["seconds"] >= 0 and e["wait_seconds"] >= 0 for e in log)
    other = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    other.build_dir = tmp_path / "build" / "cocotb" / "copy"
    shutil.copytree(cfg.build_dir, other.build_dir)
    other.build()                                   # built by another process: reused
    other.build()
    log = [json.loads(line) for line in (tmp_path / "builds.jsonl").read_text().splitlines()]
    assert [(e["name"], e["source"]) for e in log[2:]] == [("copy", "reused")]


def test_a_failed_build_leaves_no_stamp(build_env, monkeypatch):
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    cfg.build()
    (cfg.build_dir / ".sources").write_text("another source tree")
    (cfg.build_dir / ".built").write_text("the digest of another design")
    monkeypatch.setenv("FAKE_FAIL", "1")
    with pytest.raises((SystemExit, Exception)):
        cfg.build()
    assert not (cfg.build_dir / ".built").exists()      # never taken for a complete build


def test_a_run_keeps_its_simulator_through_a_rebuild(build_env, monkeypatch, tmp_path):
    monkeypatch.setenv("FAKE_BUILD", "one")
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    sim = cfg.simulator_for(tmp_path / "run")
    assert (sim / "top").read_text().endswith("echo build one\n")
    (cfg.build_dir / ".sources").write_text("another source tree")
    (cfg.build_dir / ".built").write_text("the digest of another design")
    monkeypatch.setenv("FAKE_BUILD", "two")
    cfg.build()
    assert (cfg.build_dir / "top").read_text().endswith("echo build two\n")
    assert (sim / "top").read_text().endswith("echo build one\n")
    assert cfg.simulator_for(tmp_path / "run") == sim
    assert (sim / "top").read_text().endswith("echo build two\n")


def test_a_build_linked_with_a_cocotb_gone_is_built_again(build_env, monkeypatch, tmp_path):
    """A simulator loads the cocotb libraries it was linked with, and its make dependencies name
    that installation's files: a build of another virtual environment is reused while that
    environment exists with the same cocotb version, and built again once it is gone (its stale
    make dependency of cocotb's main removed first) or of another version."""
    monkeypatch.setenv("FAKE_BUILD", "one")
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    cfg.build()
    here = cocotb_runner._cocotb_libs()
    assert (cfg.build_dir / ".cocotb").read_text() == here
    version = here.rpartition(" ")[2]
    other = tmp_path / "other" / ".venv" / "cocotb" / "libs"
    other.mkdir(parents=True)
    monkeypatch.setenv("FAKE_BUILD", "two")
    for record, rebuilt in ((f"{other} {version}", False), (f"{other} 0.0.1", True),
                            (f"{tmp_path}/gone/cocotb/libs {version}", True)):
        (cfg.build_dir / ".cocotb").write_text(record)
        (cfg.build_dir / "verilator.d").write_text("verilator.o: /gone/verilator.cpp\n")
        (cfg.build_dir / "top").write_text("echo build one\n")
        cfg.build()
        assert (cfg.build_dir / "top").read_text().endswith(
            "echo build two\n" if rebuilt else "echo build one\n"), record
        assert (cfg.build_dir / "verilator.d").exists() != rebuilt
        assert (cfg.build_dir / ".cocotb").read_text() == (here if rebuilt else record)
    # a build from before the record: judged by the cocotb main its make dependencies name
    main = tmp_path / "other" / "cocotb" / "share" / "lib" / "verilator" / "verilator.cpp"
    main.parent.mkdir(parents=True)
    main.write_text("")
    for deps, rebuilt in ((main, False), (tmp_path / "gone" / main.relative_to(tmp_path), True)):
        (cfg.build_dir / ".cocotb").unlink(missing_ok=True)
        (cfg.build_dir / "verilator.d").write_text(f"verilator.o: \\\n {deps} \\\n Vtop.h\n")
        (cfg.build_dir / "top").write_text("echo build one\n")
        cfg.build()
        assert (cfg.build_dir / "top").read_text().endswith(
            "echo build two\n" if rebuilt else "echo build one\n"), deps


def test_a_build_interrupted_in_another_checkout_is_built_again(build_env, monkeypatch,
                                                                tmp_path):
    """A build that another checkout started and that was stopped after its make had run: no
    stamp of a complete build, the cocotb record still ours, cocotb's main compiled with make
    dependencies on that checkout's files, since removed. The next build compiles it again."""
    monkeypatch.setenv("FAKE_BUILD", "one")
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    cfg.build()
    here = cocotb_runner._cocotb_libs()
    (cfg.build_dir / ".built").unlink()
    (cfg.build_dir / "verilator.o").write_text("")
    gone = tmp_path / "gone" / "cocotb" / "share" / "lib" / "verilator" / "verilator.cpp"
    (cfg.build_dir / "verilator.d").write_text(f"verilator.o: \\\n {gone}\n")
    monkeypatch.setenv("FAKE_BUILD", "two")
    cfg.build()
    assert (cfg.build_dir / "top").read_text().endswith("echo build two\n")
    assert (cfg.build_dir / ".cocotb").read_text() == here
    assert (cfg.build_dir / ".built").exists()


def test_sources_edited_while_a_process_runs_are_not_recorded_as_built(build_env, monkeypatch,
                                                                       tmp_path):
    """A process elaborates the sources it loaded: a build it checks again after they were
    edited on disk is stamped with their digest as it loaded them, not with the edited one's
    (a later process then elaborates the edited sources instead of taking this build for
    theirs). The same for a kept Verilog."""
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    cfg.build()
    loaded = cocotb_runner.loaded_digest()
    assert (cfg.build_dir / ".sources").read_text() == loaded
    monkeypatch.setattr(cocotb_runner, "source_digest", lambda: "edited on disk")
    (cfg.build_dir / ".sources").write_text("another source tree")
    cfg.build()                                     # elaborated again, Verilog unchanged
    assert (cfg.build_dir / ".sources").read_text() == loaded
    monkeypatch.setattr(cocotb_runner, "SIM_CACHE", tmp_path / "kept")
    spec = "tests.unit.sim.test_sim_build:Tiny"
    assert cocotb_runner.kept_verilog(spec, "tiny", width=3)[1] == "elaborated"
    assert cocotb_runner.kept_verilog(spec, "tiny", width=3)[1] == "kept"
    assert [p.read_text() for p in (tmp_path / "kept").rglob("*.sources")] == [loaded]


def test_no_verilator_is_a_clear_error_of_the_build(tmp_path, monkeypatch):
    monkeypatch.delenv("ROCEGEN_VERILATOR", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("ROCEGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("sys.prefix", str(tmp_path / "venv"))
    monkeypatch.setattr(cocotb_runner, "BUILD", tmp_path / "build")
    monkeypatch.setattr(cocotb_runner, "SIM_CACHE", tmp_path / "cache" / "sim")
    cfg = cocotb_runner.SimConfig("const", "rocegen.sim.testing.tops:ConstSliceTop")
    with pytest.raises(VerilatorNotFound, match="make setup"):
        cfg.build()


@pytest.mark.skipif(shutil.which("flock") is None, reason="no flock(1) on this machine")
def test_tools_verilator_sh_calls_take_turns(tmp_path):
    """A second call of tools/verilator.sh waits while another holds its cache directory's
    lock (the first may be building into it), then goes on."""
    found = fake(tmp_path / "new")
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**os.environ, "PATH": f"{found}:/usr/bin:/bin", "ROCEGEN_CACHE": str(cache)}
    with open(cache / ".verilator.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        call = subprocess.Popen(["bash", str(ROOT / "tools" / "verilator.sh")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "waiting for it" in call.stderr.readline()
        assert call.poll() is None
    out, err = call.communicate()
    assert call.returncode == 0, err
    assert out.strip().splitlines()[-1] == str(found)


def test_the_source_digest_sees_every_file_a_design_comes_from(tmp_path, monkeypatch):
    """A change to any Python source a design can import (the wire constants too) changes the
    digest that lets a build skip elaboration; a file elsewhere (a model, a testbench, the
    documentation) does not."""
    files = ["wire/a.py", "wire/deep/b.py", "gateware/a.py", "gateware/roce/x/c.py",
             "boards/a.py", "sim/__init__.py", "sim/testing/__init__.py", "sim/testing/tops.py",
             "sim/testing/roce_tops.py", "sim/testing/capture.py"]
    elsewhere = ["docs/a.py", "sim/models/a.py", "sim/apps/a.py", "sim/testing/harness.py",
                 "tests/a.py"]
    for name in files + elsewhere:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("X = 1\n")
    monkeypatch.setattr(cocotb_runner, "ROOT", tmp_path)
    assert cocotb_runner.design_files() == sorted(tmp_path / name for name in files)
    first = cocotb_runner.source_digest()
    assert cocotb_runner.source_digest() == first
    for name in elsewhere:
        (tmp_path / name).write_text("X = 2\n")
    assert cocotb_runner.source_digest() == first
    seen = {first}
    for name in files:
        (tmp_path / name).write_text("X = 3\n")
        seen.add(cocotb_runner.source_digest())
    assert len(seen) == 1 + len(files)


def test_every_top_imports_only_design_sources():
    """Importing the simulation tops (and so the gateware they build) in a fresh interpreter
    loads no source of the repository that the digest leaves out: an edit the digest does not
    see cannot change a design."""
    tops = sorted(p.stem for p in (ROOT / "sim" / "testing").glob("*tops.py"))
    assert {"tops", "roce_tops", "payload_tops", "mac_tops"} <= set(tops)
    modules = [f"rocegen.sim.testing.{t}" for t in tops] + [
        "rocegen.gateware.core", "rocegen.gateware.top", "rocegen.gateware.xgmii_top"]
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(getattr(m, '__file__', None) or '' for m in "
            "list(sys.modules.values()))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    root = ROOT.resolve()
    loaded = {Path(f).resolve() for f in json.loads(out.stdout) if f}
    ours = {f for f in loaded if f.is_relative_to(root) and ".venv" not in f.parts}
    assert ours, "the tops were not imported from this repository"
    assert ours <= {p.resolve() for p in cocotb_runner.design_files()}, \
        sorted(str(f.relative_to(root)) for f in ours - set(cocotb_runner.design_files()))


class Tiny(wiring.Component):
    """A design for :func:`test_kept_verilog_while_no_source_changed`."""

    def __init__(self, width):
        super().__init__({"a": wiring.In(width), "y": wiring.Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.y.eq(~self.a)
        return m


def test_kept_verilog_while_no_source_changed(tmp_path, monkeypatch):
    """The demo's Verilog: elaborated once per configuration and sources, then kept."""
    monkeypatch.setattr(cocotb_runner, "SIM_CACHE", tmp_path)
    digest = ["one"]
    monkeypatch.setattr(cocotb_runner, "loaded_digest", lambda: digest[0])
    spec = "tests.unit.sim.test_sim_build:Tiny"
    text, how = cocotb_runner.kept_verilog(spec, "tiny", width=3)
    assert how == "elaborated" and "module tiny" in text and "[2:0] a" in text
    assert cocotb_runner.kept_verilog(spec, "tiny", width=3) == (text, "kept")
    other, how = cocotb_runner.kept_verilog(spec, "tiny", width=5)
    assert how == "elaborated" and "[4:0] a" in other
    digest[0] = "two"                           # a design source changed
    assert cocotb_runner.kept_verilog(spec, "tiny", width=3) == (text, "elaborated")
    assert cocotb_runner.kept_verilog(spec, "tiny", width=3)[1] == "kept"
    assert len(list((tmp_path / "verilog").glob("*.v"))) == 2
