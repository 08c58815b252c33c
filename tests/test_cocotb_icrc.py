import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


@pytest.mark.parametrize("width", [64, 512])
def test_icrc_paths(width):
    cfg = SimConfig("icrc", "rocegen.sim.testing.roce_tops:IcrcTop", width=width)
    assert run_cocotb(cfg, "tests.cocotb.icrc", label=f"icrc-{width}") == 1
