from rocegen.gateware.emit import to_verilog
from rocegen.sim.testing.cocotb_runner import SimConfig, run_cocotb
from rocegen.sim.testing.tops import ConstSliceTop


def test_constant_blocks_are_guarded():
    text = to_verilog(ConstSliceTop(), name="t")
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if line.strip() == "always @*":
            # every remaining unguarded block must read something on its right-hand side
            assert not lines[n + 1].rstrip().endswith("'h5a;"), lines[n + 1]
    assert "8'h5a;" in text


def test_constant_slices_under_verilator():
    cfg = SimConfig("const-slices", "rocegen.sim.testing.tops:ConstSliceTop", toplevel="t")
    assert run_cocotb(cfg, "tests.cocotb.const_slices") == 1
