"""Every cocotb testbench module of the project, run under Verilator by
:func:`rocegen.sim.testing.cocotb_runner.run_cocotb` (from pytest, ``rocegen sim ...`` or the
benchmark suite)."""
