"""The RoCE endpoint in Verilator against the host NIC model (tests/cocotb/roce.py): on-chip
memory at 64 and 512 bits, and an AXI4 memory (cocotbext-axi AxiRam) at 512 bits.

The gate runs every test on chip at W = 64; at W = 512 the ones whose property depends on the
width or the memory: every opcode and length (the beat alignment), line rate (100G), and on
AXI4 the streaming input (its ring written over AXI4). The rest at W = 512 (on chip and AXI4)
are the full tier's (:data:`FULL`)."""

import pytest

from rocegen.sim.testing.cocotb_runner import endpoint_sim_config, run_cocotb

CONFIGS = {
    "onchip-64": dict(width=64, num_qps=8),
    "onchip-512": dict(width=512, num_qps=8),
    "axi4-512": dict(width=512, num_qps=8, memory="axi4", mem_bytes=1 << 24),
}
TESTS = ["every_opcode_length_and_pmtu", "generator_multi_megabyte", "stream_front_end",
         "refused_requests", "back_to_back_at_line_rate", "connection_manager", "hostile_peer"]
#: (config, test) left to make test-full: repetitions at W = 512 of what W = 64 shows
FULL = {("onchip-512", t) for t in ("generator_multi_megabyte", "stream_front_end",
                                    "refused_requests", "connection_manager", "hostile_peer")}
FULL |= {("axi4-512", t) for t in ("generator_multi_megabyte", "refused_requests",
                                   "connection_manager", "hostile_peer")}


@pytest.mark.parametrize("config, test", [
    pytest.param(c, t, id=f"{c}-{t}", marks=[pytest.mark.full] if (c, t) in FULL else [])
    for c in sorted(CONFIGS) for t in TESTS])
def test_endpoint(config, test):
    cfg = endpoint_sim_config(**CONFIGS[config])
    assert run_cocotb(cfg, "tests.cocotb.roce", test, label=f"{config}-{test}") == 1
