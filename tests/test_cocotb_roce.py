"""The RoCE endpoint in Verilator against the host NIC model (sim/tb/roce.py): on-chip
memory at 64 and 512 bits, and an AXI4 memory (cocotbext-axi AxiRam) at 512 bits."""

import pytest

from rocegen.sim.testing.cocotb_runner import endpoint_sim_config, run_cocotb

CONFIGS = {
    "onchip-64": dict(width=64, num_qps=8),
    "onchip-512": dict(width=512, num_qps=8),
    "axi4-512": dict(width=512, num_qps=8, memory="axi4", mem_bytes=1 << 24),
}
TESTS = ["every_opcode_length_and_pmtu", "generator_multi_megabyte", "stream_front_end",
         "refused_requests", "back_to_back_at_line_rate", "connection_manager", "hostile_peer"]


@pytest.mark.parametrize("test", TESTS)
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_endpoint(config, test):
    cfg = endpoint_sim_config(**CONFIGS[config])
    assert run_cocotb(cfg, "rocegen.sim.tb.roce", test, label=f"{config}-{test}") == 1
