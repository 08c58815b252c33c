import pytest

from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb

TESTS = ["rx_frames_from_xgmii_source", "rx_flags_bad_frames", "tx_frames_to_xgmii_sink",
         "tx_cut_through_underruns", "loopback"]


@pytest.mark.parametrize("testcase", TESTS)
def test_cocotb_xgmii(testcase):
    cfg = SimConfig("xgmii", "rocegen.sim.testing.mac_tops:XgmiiLoopTop", max_frame=1522)
    assert run_cocotb(cfg, "tests.cocotb.xgmii_mac", testcase, label=testcase) == 1
