import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


@pytest.mark.parametrize("width", [64, 512])
def test_stack_host_conversation(width):
    cfg = SimConfig("stack", "rocegen.gateware.top:StackTop", width=width)
    assert run_cocotb(cfg, "tests.cocotb.stack", label=f"stack-{width}") == 1
