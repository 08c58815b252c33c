import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


# the gate: each width and each header length once (the other two pairs, builds of their own,
# are the full tier's)
@pytest.mark.parametrize("header_len, width", [
    (14, 64), pytest.param(14, 512, marks=pytest.mark.full),
    pytest.param(42, 64, marks=pytest.mark.full), (42, 512)])
def test_framing_loop(width, header_len):
    cfg = SimConfig("framing", "rocegen.sim.testing.tops:FramingLoopTop", width=width, header_len=header_len)
    assert run_cocotb(cfg, "tests.cocotb.framing_loop", label=f"loop-{width}-{header_len}") == 1
