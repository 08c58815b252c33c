"""Small helpers to run Amaranth-simulator benches."""

import gc
import os
import warnings

from amaranth.hdl import ClockDomain, Module, UnusedElaboratable
from amaranth.sim import Simulator

__all__ = ["run_sim", "SimulationHang", "DEFAULT_DEADLINE", "raises"]

#: Cycles after which a simulation is declared hung, unless a test asks for more.
DEFAULT_DEADLINE = 2_000_000


class SimulationHang(AssertionError):
    """The design (or the bench) stopped making progress: the run reached its cycle deadline."""


def run_sim(dut, *, testbenches=(), processes=(), vcd=None, deadline_cycles=DEFAULT_DEADLINE):
    """Simulate ``dut`` with a 10 ns clock. ``testbenches`` end the run when all return;
    ``processes`` run in the background. A run still going after ``deadline_cycles`` clock
    cycles fails with :class:`SimulationHang` (``None``: no deadline). Waveforms are written
    only when ``vcd`` is a path, or to ``$WAVES_DIR/<name>.vcd`` when ``WAVES=1``."""
    top = Module()
    top.domains.sync = ClockDomain()     # present even for purely combinational designs
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-8)
    for tb in testbenches:
        sim.add_testbench(tb)
    for p in processes:
        sim.add_process(p)
    if deadline_cycles is not None:
        async def watchdog(ctx):
            for _ in range(deadline_cycles):
                await ctx.tick()
            raise SimulationHang(f"no end after {deadline_cycles} cycles: the design or the "
                                 f"bench is stuck")
        sim.add_process(watchdog)
    if vcd is None and os.environ.get("WAVES", "0") not in ("", "0"):
        wave_dir = os.environ.get("WAVES_DIR", "build/waves")
        os.makedirs(wave_dir, exist_ok=True)
        test = os.environ.get("PYTEST_CURRENT_TEST", type(dut).__name__).split(" ")[0]
        vcd = os.path.join(wave_dir, "".join(c if c.isalnum() else "_" for c in test) + ".vcd")
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()


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
