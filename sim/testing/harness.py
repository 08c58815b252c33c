"""Small helpers to run Amaranth-simulator testbenches.

Building a simulator for a large design (elaborating it and compiling it to Python) takes
seconds: about 8 s for a whole endpoint at 64 bits and 11 s at 512 bits. Benches that simulate
the same design many times take it from :func:`shared`, which keeps one instance per set of
parameters in each process; :func:`run_sim` then keeps its simulator too and, for each run,
resets it to the initial state (every signal and memory, the clock, the time) and replaces the
last run's testbenches and processes with the new ones.

With ``ROCEGEN_SIM_SPEED`` set to a file name, every :func:`run_sim` appends one JSON line to it:
the design's class, the test, the clock cycles simulated and the seconds they took
(``bench/bench_sim_speed.py`` turns them into cycles per second)."""

import gc
import json
import os
import time
import warnings
from collections import OrderedDict

from amaranth.hdl import ClockDomain, Module, UnusedElaboratable
from amaranth.sim import Simulator

__all__ = ["run_sim", "shared", "SimulationHang", "DEFAULT_DEADLINE", "raises"]

#: How many shared designs (and their simulators) a process keeps, the least recently used
#: going first: a whole endpoint's simulator takes 100 to 450 MB.
SHARED_KEEP = 4

_shared = OrderedDict()                 # key -> design, least recently used first
_simulators = {}                        # id(design) -> (design, its simulator)


def _key(value):
    """``value`` as a hashable key: dicts, lists and sets by their contents."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted(_key(v) for v in value)))
    hash(value)
    return value


def shared(cls, *args, **kwargs):
    """``cls(*args, **kwargs)``, made once per process for each set of arguments (compared by
    value; dicts, lists and sets by their contents, anything else must be hashable) and handed
    out again for the same arguments, so that :func:`run_sim` builds its simulator once. A testbench
    that takes a design from here must leave it as it found it (it is the next testbench's design
    too): set signals only in testbenches and processes, add no submodules."""
    try:
        key = (cls, _key(args), _key(kwargs))
    except TypeError:
        raise TypeError(f"shared() needs arguments it can compare by value, not {args!r}, "
                        f"{kwargs!r}") from None
    if key in _shared:
        _shared.move_to_end(key)
        return _shared[key]
    design = _shared[key] = cls(*args, **kwargs)
    while len(_shared) > SHARED_KEEP:
        _, old = _shared.popitem(last=False)
        _simulators.pop(id(old), None)
    return design


def _reuse(sim):
    """Return ``sim`` to the state of a simulator just built, its clock added: drop the last
    run's testbenches and processes (each told it waits on nothing, so the signal wakers it
    left behind unregister at their next call) and reset every signal, memory and the time.
    ``False`` if this Amaranth's simulator is not built as this expects."""
    from amaranth.sim._async import AsyncProcess
    engine = sim._engine
    try:
        processes, testbenches = engine._processes, engine._testbenches
        triggers = engine._active_triggers
    except AttributeError:
        return False
    for p in [p for p in processes if isinstance(p, AsyncProcess)] + testbenches:
        p.waits_on = None
        processes.discard(p)
    testbenches.clear()
    triggers.clear()
    engine._delta_cycles = 0
    sim.reset()
    return True

#: Cycles after which a simulation is declared hung, unless a test asks for more.
DEFAULT_DEADLINE = 2_000_000


class SimulationHang(AssertionError):
    """The design (or the testbench) stopped making progress: the run reached its cycle deadline."""


def run_sim(dut, *, testbenches=(), processes=(), vcd=None, deadline_cycles=DEFAULT_DEADLINE):
    """Simulate ``dut`` with a 10 ns clock. ``testbenches`` end the run when all return;
    ``processes`` run in the background. A design from :func:`shared` is simulated by the
    simulator its first run built, reset. A run still going after ``deadline_cycles`` clock
    cycles fails with :class:`SimulationHang` (``None``: no deadline). Waveforms are written
    only when ``vcd`` is a path, or to ``$WAVES_DIR/<name>.vcd`` when ``WAVES=1``."""
    kept = _simulators.get(id(dut))
    if kept is not None and kept[0] is dut and _reuse(kept[1]):
        sim = kept[1]
    else:
        top = Module()
        top.domains.sync = ClockDomain()     # present even for purely combinational designs
        top.submodules.dut = dut
        sim = Simulator(top)
        sim.add_clock(1e-8)
        if any(d is dut for d in _shared.values()):
            _simulators[id(dut)] = (dut, sim)
    for tb in testbenches:
        sim.add_testbench(tb)
    for p in processes:
        sim.add_process(p)
    speed_log = os.environ.get("ROCEGEN_SIM_SPEED")
    cycles = [0]
    if deadline_cycles is not None or speed_log:
        async def watchdog(ctx):
            while deadline_cycles is None or cycles[0] < deadline_cycles:
                await ctx.tick()
                cycles[0] += 1
            raise SimulationHang(f"no end after {deadline_cycles} cycles: the design or the "
                                 f"testbench is stuck")
        sim.add_process(watchdog)
    if vcd is None and os.environ.get("WAVES", "0") not in ("", "0"):
        wave_dir = os.environ.get("WAVES_DIR", "build/waves")
        os.makedirs(wave_dir, exist_ok=True)
        test = os.environ.get("PYTEST_CURRENT_TEST", type(dut).__name__).split(" ")[0]
        vcd = os.path.join(wave_dir, "".join(c if c.isalnum() else "_" for c in test) + ".vcd")
    t0 = time.perf_counter()
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
    if speed_log:
        line = {"design": type(dut).__name__, "cycles": cycles[0],
                "seconds": round(time.perf_counter() - t0, 3),
                "test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]}
        with open(speed_log, "a") as f:
            f.write(json.dumps(line) + "\n")


def raises(exc, match, make):
    """Assert that ``make()`` raises ``exc`` with a message matching ``match`` (a regular
    expression), without the warning Amaranth gives for a component whose constructor raised
    (it is still an elaboratable that was never used)."""
    import pytest
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(exc, match=match):
            make()
        gc.collect()
