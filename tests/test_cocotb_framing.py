import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("header_len", [14, 42])
def test_framing_loop(width, header_len):
    cfg = SimConfig("framing", "rocegen.sim.testing.tops:FramingLoopTop", width=width, header_len=header_len)
    assert run_cocotb(cfg, "rocegen.sim.tb.framing_loop", label=f"loop-{width}-{header_len}") == 1
