"""The RoCE endpoint's reliability in Verilator (tests/cocotb/roce_faults.py): a faulty link
each way, RNR storms, remote errors, dead links and receive fuzzing, at 64 and 512 bits with
on-chip payload memory and at 512 bits with an AXI4 (DDR4) payload memory (cocotbext-axi
AxiRam). The simulator builds are the ones tests/test_cocotb_roce.py uses.

The gate runs every test on chip at W = 64, and the lossy link (retransmissions read again
from the payload memory) at W = 512 on chip and on AXI4; errors and receive fuzzing at W = 512
are the full tier's (:data:`FULL`; ``rocegen sim replay``, tests/test_cocotb_replay.py, feeds
receive-fuzz frames to the W = 512 endpoint in the gate)."""

import pytest

from rocegen.sim.testing.cocotb_runner import endpoint_sim_config, run_cocotb

CONFIGS = {
    "onchip-64": dict(width=64, num_qps=8),
    "onchip-512": dict(width=512, num_qps=8),
    "axi4-512": dict(width=512, num_qps=8, memory="axi4", mem_bytes=1 << 24),
}
TESTS = ["lossy_link", "errors_and_recovery", "receive_fuzz"]
#: (config, test) left to make test-full
FULL = {(c, t) for c in ("onchip-512", "axi4-512") for t in ("errors_and_recovery", "receive_fuzz")}


@pytest.mark.parametrize("config, test", [
    pytest.param(c, t, id=f"{c}-{t}", marks=[pytest.mark.full] if (c, t) in FULL else [])
    for c in sorted(CONFIGS) for t in TESTS])
def test_endpoint_faults(config, test):
    cfg = endpoint_sim_config(**CONFIGS[config])
    assert run_cocotb(cfg, "tests.cocotb.roce_faults", test, label=f"{config}-{test}") == 1
