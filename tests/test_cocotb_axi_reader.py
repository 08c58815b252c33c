import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb


@pytest.mark.parametrize("width", [64, 512])
def test_axi_reader(width):
    cfg = SimConfig("axi_reader", "rocegen.sim.testing.payload_tops:AxiReaderTop", width=width)
    assert run_cocotb(cfg, "tests.cocotb.axi_reader", label=f"axi_reader-{width}") == 3
