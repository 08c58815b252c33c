import re

import pytest

from rocegen.gateware.cli import main


def test_verilog_axis_top(tmp_path):
    out = tmp_path / "core.v"
    assert not main(["verilog", "--width", "64", "--ip", "192.168.1.9", "-o", str(out)])
    text = out.read_text()
    assert re.search(r"^module rocegen_stack\(", text, re.M)
    for port in ("s_axis_tdata", "s_axis_tkeep", "s_axis_tuser", "m_axis_tready", "stats_addr"):
        assert re.search(rf"\b(input|output) .*\b{port}\b", text), port
    assert "input [63:0] s_axis_tdata" in text


def test_verilog_xgmii_top(tmp_path):
    out = tmp_path / "x.v"
    assert not main(["verilog", "--phy", "xgmii", "-o", str(out)])
    text = out.read_text()
    assert "input [63:0] xgmii_rxd" in text and "output [7:0] xgmii_txc" in text


@pytest.mark.parametrize("args, message", [
    (["--width", "100"], "width must be one of"),
    (["--ip", "10.0.0.300"], "not an IPv4 address"),
    (["--mac", "02:00:00:00:01"], "not a MAC address"),
    (["--phy", "xgmii", "--width", "512"], "width must be 64"),
])
def test_bad_parameters_are_clear_errors(tmp_path, capsys, args, message):
    assert main(["verilog", *args, "-o", str(tmp_path / "x.v")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.v").exists()
