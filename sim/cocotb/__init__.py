"""The cocotb sides of the simulation tools, run under Verilator by
:func:`rocegen.sim.testing.cocotb_runner.run_cocotb`: ``rocegen sim serve``, ``rocegen sim
replay``, ``rocegen demo`` and ``rocegen sim demo``, ``rocegen sim ping``, and the runs of the
benchmark suite (``rocegen bench``, ``bench/``). The tests run them too; the testbenches only
the tests use are in ``tests/cocotb/``."""
