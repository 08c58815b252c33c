"""Build Amaranth designs into Verilator simulators once per configuration, and run cocotb
test modules against them from pytest.

A *configuration* is a factory (an importable ``"module:callable"`` returning an Amaranth
component) plus its keyword arguments. Its Verilog and Verilator build live in the per-user cache,
``~/.cache/rocegen/sim/<name>-<hash>/`` (:data:`SIM_CACHE`), which every checkout on the machine
shares, and its runs in the checkout's ``build/cocotb/<name>-<hash>/runs/``. The design is not even
elaborated again while no Python source it can import changed (:data:`DESIGN_SOURCES`: the wire
constants, the gateware, the boards and the simulation tops, not the models or the testbenches;
their digest as the process loaded them, :func:`loaded_digest`), the Verilator build is skipped
when the generated Verilog is unchanged (so a checkout at another revision costs one elaboration,
and a compile only if its Verilog differs), and a file lock lets parallel pytest workers and
checkouts share it: one builds while the others wait, the stamps are replaced atomically and only
once the build is complete, and every run executes its own hard link of the simulator taken under
the lock (a later rebuild links a new file and cannot change a binary that runs or is about to
start). A simulator is linked against the cocotb libraries of the virtual environment that built
it: another checkout reuses it while that environment exists with the same cocotb version, and
builds it again otherwise.
Verilator is :func:`rocegen.sim.testing.verilator.verilator_bin_dir`'s, whatever ``PATH`` holds; its
make uses ccache when it is installed. ``WAVES=1`` in the environment builds a tracing variant
and writes an FST/VCD per run.

Only what the cocotb side touches is visible through VPI (:data:`PUBLIC_CONTROL`): cocotb's own
runner builds with ``--public-flat-rw``, which keeps every signal of the design in the model and
made the W = 512 endpoint about six times slower to simulate and to compile.
``ROCEGEN_PUBLIC=all`` in the environment builds with every signal visible again, for a test that
needs to look inside the design.

Each build says what it cost in the build log of :mod:`rocegen.gateware.costlog` (kind
``verilator``, named by its directory): ``compiled`` (elaborated, Verilated and compiled, with
the seconds), ``verilog-unchanged`` (elaborated again, the Verilog was the built one's) or
``reused`` (no source changed: once per process and build).
"""

import fcntl
import hashlib
import importlib
import json
import os
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from rocegen.gateware import costlog
from rocegen.gateware.emit import to_verilog
from rocegen.sim.testing.verilator import cache_root, verilator_on_path

__all__ = ["ROOT", "BUILD", "SIM_CACHE", "SimConfig", "run_cocotb", "waves_requested", "endpoint_sim_config",
           "responder_sim_config", "RESPONDER_MEM_BYTES", "responder_share", "source_digest",
           "loaded_digest",
           "DESIGN_SOURCES", "kept_verilog", "run_scenarios"]

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("ROCEGEN_BUILD", ROOT / "build"))
#: Where the Verilator builds live: ``$ROCEGEN_SIM_CACHE``, else ``sim/`` of the per-user cache
#: (:func:`rocegen.sim.testing.verilator.cache_root`), shared by the checkouts of the machine.
SIM_CACHE = Path(os.environ.get("ROCEGEN_SIM_CACHE") or cache_root() / "sim")


#: Verilator options of every build (part of the build's identity).
BUILD_ARGS = os.environ.get(
    "ROCEGEN_VERILATOR_ARGS", "-Wno-fatal -O3 --x-assign fast --x-initial fast --noassert").split()


#: Verilator control file of every build: only what the cocotb side touches is visible through
#: VPI (the top level's ports and the capture rings of :mod:`rocegen.sim.testing.capture`), instead of
#: every signal of the design as cocotb's runner asks with ``--public-flat-rw``, which keeps
#: Verilator from optimising the model.
PUBLIC_CONTROL = """`verilator_config
public_flat_rw -module "{top}" -port "*"
public_flat_rw -module "*" -var "cap_mem"
"""


def _verilator():
    """cocotb's Verilator runner, building without ``--public-flat-rw`` (see
    :data:`PUBLIC_CONTROL`)."""
    from cocotb_tools.runner import Verilator

    class _Runner(Verilator):
        def _build_command(self):
            cmds = super()._build_command()
            if os.environ.get("ROCEGEN_PUBLIC") != "all":
                cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            return cmds
    return _Runner()


def waves_requested():
    return os.environ.get("WAVES", "0") not in ("", "0")


#: The Python sources a design (and a board build) can come from, as globs relative to the
#: repository: the wire constants and header tables the gateware imports, the gateware, the boards
#: and the simulation tops with what they import (``tests/unit/sim/test_sim_build.py`` checks
#: that importing every top loads no other source of the repository). The models, the
#: testbenches and the applications are not among them: an edit there cannot change a design.
DESIGN_SOURCES = ("wire/**/*.py", "gateware/**/*.py", "boards/**/*.py", "sim/__init__.py",
                  "sim/testing/__init__.py", "sim/testing/*tops.py", "sim/testing/capture.py")


def design_files(patterns=DESIGN_SOURCES):
    """The files of ``patterns`` (globs relative to the repository), sorted."""
    return sorted({p for pattern in patterns for p in ROOT.glob(pattern) if p.is_file()})


def source_digest(patterns=DESIGN_SOURCES):
    """Digest of every Python source of ``patterns`` and of the Amaranth version: while it is
    unchanged, a configuration's Verilog cannot have changed, so the build is reused without
    elaborating the design again."""
    import amaranth
    h = hashlib.sha1(amaranth.__version__.encode())
    for path in design_files(patterns):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def loaded_digest():
    """:func:`source_digest` as the sources were when this module was imported, once per
    process: what a build or a kept Verilog is stamped with and checked against. A process
    elaborates the sources it loaded, so a source edited while it runs must not be recorded as
    built by it (its design would then pass for the edited one's). A design module first
    imported after such an edit is built under the older digest: the next process elaborates
    it again and finds its Verilog unchanged, which costs an elaboration, never a stale
    simulator."""
    return _LOADED_DIGEST


_LOADED_DIGEST = source_digest()


def _cocotb_libs():
    """The cocotb a simulator built here is linked with (it loads its libraries from that path):
    the virtual environment's, as ``"<libs directory> <version>"``."""
    import cocotb
    from cocotb_tools.config import libs_dir
    return f"{Path(libs_dir).resolve()} {cocotb.__version__}"


def _linked_cocotb_usable(build_dir, here):
    """Whether the simulator in ``build_dir`` can run with this process's cocotb ``here``
    (:func:`_cocotb_libs`): the cocotb it was linked with still exists and is of the same
    version. Another checkout's build passes while that checkout's environment exists; a
    build of an environment since removed does not."""
    record = build_dir / ".cocotb"
    if not record.exists():
        # a build older than the record: usable while the cocotb main its make dependencies
        # name is still there
        deps = build_dir / "verilator.d"
        main = next((w for w in (deps.read_text().split() if deps.exists() else ())
                     if w.endswith("/lib/verilator/verilator.cpp")), None)
        return main is not None and Path(main).is_file()
    libs, _, version = record.read_text().rpartition(" ")
    return version == here.rpartition(" ")[2] and Path(libs).is_dir()


def _write_atomic(path, text):
    """Replace ``path`` by a file holding ``text``: a reader sees the old or the new one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _factory(spec):
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


#: Build directories this process has logged as reused (once each is enough).
_REUSE_RECORDED = set()


class SimConfig:
    """One Verilator build of one design configuration."""

    def __init__(self, name, factory, toplevel="top", **params):
        self.name = name
        self.factory = factory
        self.toplevel = toplevel
        self.params = params
        self.waves = waves_requested()
        key = json.dumps({"f": factory, "p": params, "w": self.waves, "a": BUILD_ARGS,
                          "v": PUBLIC_CONTROL.format(top=toplevel) + os.environ.get("ROCEGEN_PUBLIC", "")},
                         sort_keys=True, default=str)
        self.key = f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
        self.build_dir = SIM_CACHE / self.key
        self.runs_dir = BUILD / "cocotb" / self.key / "runs"

    @contextmanager
    def _locked(self):
        """The build directory's lock, held exclusively for the body."""
        self.build_dir.mkdir(parents=True, exist_ok=True)
        with open(self.build_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def build(self):
        """Build the simulator unless the last build is still the design's; returns self."""
        t0 = time.monotonic()
        with self._locked():
            self._build_and_record(t0)
        return self

    def _build_and_record(self, t0):
        """:meth:`_build`, and its line in the build log (see the module documentation);
        ``t0`` is when the caller started waiting for the lock."""
        t1 = time.monotonic()
        source = self._build()
        if source == "reused" and self.build_dir in _REUSE_RECORDED:
            return
        _REUSE_RECORDED.add(self.build_dir)
        test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
        costlog.record("verilator", self.build_dir.name, source, time.monotonic() - t1,
                       wait_seconds=round(t1 - t0, 3), design=self.factory.rsplit(":", 1)[-1],
                       params=self.params, **({"test": test} if test else {}))

    def _build(self):
        """:meth:`build`, with the lock held; returns how the simulator was obtained:
        ``"reused"``, ``"verilog-unchanged"`` or ``"compiled"``."""
        sources = loaded_digest()
        source_stamp = self.build_dir / ".sources"
        stamp = self.build_dir / ".built"
        libs = _cocotb_libs()
        libs_stamp = self.build_dir / ".cocotb"
        if not _linked_cocotb_usable(self.build_dir, libs):
            # built by another cocotb installation (another checkout's virtual environment) that
            # is gone or of another version: its simulator loads that one's libraries and its
            # make dependencies name that one's files. Link again with this one.
            for name in (self.toplevel, "verilator.o", "verilator.d"):
                (self.build_dir / name).unlink(missing_ok=True)
            stamp.unlink(missing_ok=True)
        if stamp.exists() and source_stamp.exists() and source_stamp.read_text() == sources:
            return "reused"     # no Python source changed since the last build
        design = _factory(self.factory)(**self.params)
        text = to_verilog(design, name=self.toplevel)
        digest = hashlib.sha1(text.encode()).hexdigest()
        if stamp.exists() and stamp.read_text() == digest:
            _write_atomic(source_stamp, sources)
            return "verilog-unchanged"
        # from here the build is not the stamped one until it completes (an interrupted build
        # must not pass for the old one)
        stamp.unlink(missing_ok=True)
        # cocotb's main is compiled again with this cocotb: a build of another checkout that was
        # interrupted after its make had run leaves objects whose dependencies name that
        # checkout's files, which need not exist any more (make would stop at them), under a
        # record that may still name ours
        libs_stamp.unlink(missing_ok=True)
        for name in ("verilator.o", "verilator.d"):
            (self.build_dir / name).unlink(missing_ok=True)
        src = self.build_dir / f"{self.toplevel}.v"
        _write_atomic(src, text)
        control = self.build_dir / "public.vlt"
        _write_atomic(control, PUBLIC_CONTROL.format(top=self.toplevel))
        with verilator_on_path():
            runner = _verilator()
            runner.build(
                sources=[src, control],
                hdl_toplevel=self.toplevel,
                build_dir=self.build_dir,
                build_args=BUILD_ARGS,
                waves=self.waves,
                timescale=("1ns", "1ps"),
                log_file=self.build_dir / "build.log",
            )
        _write_atomic(libs_stamp, libs)
        _write_atomic(stamp, digest)
        _write_atomic(source_stamp, sources)
        return "compiled"

    def simulator_for(self, run_dir):
        """Build if needed, then give the run in ``run_dir`` its own link to the simulator,
        taken under the build lock: ``run_dir / "sim"``, to pass as the runner's
        ``build_dir``."""
        sim_dir = Path(run_dir) / "sim"
        sim_dir.mkdir(parents=True, exist_ok=True)
        exe = sim_dir / self.toplevel
        t0 = time.monotonic()
        with self._locked():
            self._build_and_record(t0)
            exe.unlink(missing_ok=True)
            try:
                os.link(self.build_dir / self.toplevel, exe)
            except OSError:     # no hard links here: a copy
                shutil.copy2(self.build_dir / self.toplevel, exe)
        return sim_dir


def run_cocotb(config, test_module, testcase=None, *, env=None, seed=None, label=None,
               console=False):
    """Run ``test_module`` (importable module name) against ``config``; raise on any failure.
    Returns the number of cocotb tests that passed (callers assert the number they expect, so a
    test that silently stopped being collected is noticed). ``console``: the simulator's output
    goes to this process's standard output instead of the run's ``sim.log``."""
    from cocotb_tools.runner import get_results, get_runner
    label = label or (testcase if isinstance(testcase, str) else test_module.rsplit(".", 1)[-1])
    run_dir = config.runs_dir / label
    run_dir.mkdir(parents=True, exist_ok=True)
    sim_dir = config.simulator_for(run_dir)
    results = run_dir / "results.xml"
    if results.exists():
        results.unlink()
    extra_env = {"ROCEGEN_PARAMS": json.dumps(config.params, default=str),
                 "PYTHONPATH": os.pathsep.join([str(ROOT)] + sys.path)}
    if env:
        extra_env.update({k: str(v) for k, v in env.items()})
    runner = get_runner("verilator")
    try:
        runner.test(
            test_module=test_module,
            hdl_toplevel=config.toplevel,
            hdl_toplevel_lang="verilog",
            build_dir=sim_dir,
            test_dir=run_dir,
            testcase=testcase,
            seed=seed,
            extra_env=extra_env,
            waves=config.waves,
            results_xml=str(results),
            log_file=None if console else run_dir / "sim.log",
        )
    except SystemExit:
        pass        # the runner exits on failures; the results file says what failed
    total, failed = get_results(results)
    if failed or not total:
        log = "" if console else (run_dir / "sim.log").read_text(errors="replace")[-6000:]
        raise AssertionError(f"{failed} of {total} cocotb tests failed in {test_module}:\n{log}")
    return total - failed


def run_scenarios(config, test_module, label, chosen, out, env, result):
    """Run scenarios one after the other in one cocotb run (test ``scenarios`` of
    ``test_module``) and check each: ``chosen`` is ``[(name, scenario, check)]`` in the order the
    testbench runs them (``env`` tells it which), the testbench writes one result per
    scenario, with its ``name``, to ``out`` (``ROCE_RESULTS``), and each ``check`` gets
    ``result(raw, scenario)``. Fails with the failure of every scenario whose check failed, each
    named."""
    assert run_cocotb(config, test_module, "scenarios", label=label,
                      env={"ROCE_RESULTS": out, **env}) == 1
    results = json.loads(Path(out).read_text())
    assert [r["name"] for r in results] == [name for name, _, _ in chosen]
    failures = []
    for (name, scenario, check), raw in zip(chosen, results):
        try:
            check(result(raw, scenario))
        except AssertionError as e:
            failures.append(f"{name}: {e!r}")
    assert not failures, "\n".join(failures)


def kept_verilog(factory, name, **params):
    """The Verilog of the design ``factory(**params)`` (``factory`` a ``"module:callable"``)
    with top module ``name``, kept in ``verilog/`` of :data:`SIM_CACHE` (shared by the
    checkouts of the machine) and taken from there while no Python source of
    :data:`DESIGN_SOURCES` changed (the stamp beside it holds their digest); returns
    ``(text, how)``, ``how`` ``"kept"`` or ``"elaborated"``. The file is replaced atomically, so
    parallel callers of one configuration each read a whole one."""
    key = json.dumps({"f": factory, "p": params, "n": name}, sort_keys=True, default=str)
    base = SIM_CACHE / "verilog" / f"{name}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
    text_path, stamp = base.with_suffix(".v"), base.with_suffix(".sources")
    sources = loaded_digest()
    if stamp.exists() and stamp.read_text() == sources and text_path.exists():
        return text_path.read_text(), "kept"
    text = to_verilog(_factory(factory)(**params), name=name)
    base.parent.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    _write_atomic(text_path, text)
    _write_atomic(stamp, sources)
    return text, "elaborated"


def endpoint_sim_config(width, num_qps=8, **params):
    """The Verilator build of the endpoint test top shared by the demo, the benchmark and the
    tests."""
    return SimConfig("endpoint", "rocegen.sim.testing.roce_tops:EndpointTop", width=width,
                     num_qps=num_qps, **params)


#: On-chip memory of the responder builds, by width: at 512 bits 2 MiB (the responder's region,
#: its lower half, holds a 1 MiB message), else the endpoint's default 256 KiB.
RESPONDER_MEM_BYTES = {512: 2 << 20}
#: Receive buffers each QP of the responder builds can have posted
RESPONDER_RQ_DEPTH = 256


def responder_sim_config(width, num_qps=8, **params):
    """The Verilator build of the endpoint test top with the RC responder (``responder=True``)
    shared by the responder's tests, its benchmark batches and ``rocegen sim demo --peer-op``:
    on-chip memory of :data:`RESPONDER_MEM_BYTES` (the region every QP may be written in after
    reset is its lower half), :data:`RESPONDER_RQ_DEPTH` receive buffers per QP and the atomics
    (values little-endian in memory). ``params`` add to or replace these (``memory="axi4"`` for
    an AXI4 memory)."""
    base = {"responder": True, "rq_depth": RESPONDER_RQ_DEPTH, "atomics": "little"}
    if width in RESPONDER_MEM_BYTES:
        base["mem_bytes"] = RESPONDER_MEM_BYTES[width]
    return endpoint_sim_config(width, num_qps, **{**base, **params})


def responder_share(params, qps):
    """Bytes of the responder's region (after reset: the lower half of the local memory, or
    ``resp_region``) that each of ``qps`` QPs gets in the responder testbenches
    (:func:`rocegen.sim.cocotb.roce_resp.share`), for a build of parameters ``params``."""
    mem = params.get("mem_bytes") or (256 * 1024 if params.get("memory", "onchip") == "onchip"
                                      else 1 << 32)
    region = params.get("resp_region") or (0, mem // 2)
    return region[1] // qps // (params["width"] // 8) * (params["width"] // 8)
