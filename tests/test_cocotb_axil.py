"""The core's AXI4-Lite control and status slave under Verilator (tests/cocotb/axil_regs.py)."""

import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


@pytest.mark.parametrize("test", ["registers", "malformed_work_requests"])
def test_axil(test):
    cfg = SimConfig("core-axil", "rocegen.gateware.core:CoreTop", width=64, num_qps=4, axil=True)
    assert run_cocotb(cfg, "tests.cocotb.axil_regs", test, label=test) == 1
