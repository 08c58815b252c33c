import pytest

from rocegen.gateware.xgmii_top import XgmiiStackTop
from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.full)])
def test_xgmii_stack_host_conversation(seed):
    cfg = SimConfig("xgmii_stack", "rocegen.gateware.xgmii_top:XgmiiStackTop")
    assert run_cocotb(cfg, "tests.cocotb.xgmii_stack", env={"SEED": seed}, label=f"seed-{seed}") == 1


@pytest.mark.parametrize("width", [128, 512])
def test_xgmii_stack_width_is_64(width):
    with pytest.raises(ValueError, match=f"width must be 64, not {width}"):
        XgmiiStackTop(width=width)
