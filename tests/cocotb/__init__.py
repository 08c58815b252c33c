"""The cocotb testbenches only the tests use, run under Verilator by
:func:`rocegen.sim.testing.cocotb_runner.run_cocotb` (as ``tests.cocotb.<name>``, the
repository's root on the simulator's ``PYTHONPATH``) from the ``tests/test_cocotb_*.py``. Those
of the simulation tools are in :mod:`rocegen.sim.cocotb`."""
