"""Small helpers to run Amaranth-simulator benches."""

from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

__all__ = ["run_sim"]


def run_sim(dut, *, testbenches=(), processes=(), vcd=None, deadline_cycles=None):
    """Simulate ``dut`` with a 1-unit clock. ``testbenches`` end the run when all return;
    ``processes`` run in the background. Waveforms are written only when ``vcd`` is a path."""
    top = Module()
    top.domains.sync = ClockDomain()     # present even for purely combinational designs
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-8)
    for tb in testbenches:
        sim.add_testbench(tb)
    for p in processes:
        sim.add_process(p)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()
