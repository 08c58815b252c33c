"""The endpoint's RC responder in Verilator against the host NIC model's requester
(sim/cocotb/roce_resp.py): the host WRITEs and SENDs (with immediate) into the endpoint over a
lossy, duplicating, reordering and corrupting link, both directions at once on one QP, and a
few thousand hostile frames during responder traffic; the data is read back through the
endpoint's own RDMA WRITEs. One W = 64 build (on-chip memory) for all of them, which
``rocegen sim demo --peer-op`` at W = 64 also runs: its example from the help, as typed."""

import json
import shlex

import pytest

from rocegen.cli import main
from rocegen.sim.testing.cocotb_runner import responder_sim_config, run_cocotb

TESTS = ["host_into_fpga", "both_directions", "responder_fuzz"]


@pytest.mark.parametrize("test", TESTS)
def test_responder(test):
    cfg = responder_sim_config(64)
    assert run_cocotb(cfg, "rocegen.sim.cocotb.roce_resp", test, label=f"onchip-64-{test}") == 1


def test_demo_peer_op(tmp_path, capsys):
    """The help's ``--peer-op`` example at W = 64 (SEND with immediate over a faulty link)."""
    with pytest.raises(SystemExit) as e:
        main(["sim", "demo", "--help"])
    assert e.value.code == 0
    example = next(line.strip() for line in capsys.readouterr().out.splitlines()
                   if line.strip().startswith("rocegen sim demo --peer-op")
                   and "--width 64" in line)
    argv = shlex.split(example)[1:]
    assert main([*argv, "-o", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "the host sends SEND_IMM messages of 1000 bytes" in text
    assert "every host work request completed OK" in text
    r = json.loads((tmp_path / "roce_w64_responder.json").read_text())[0]
    size, per_qp, qps = 1000, 32768, 2
    assert r["opcode"] == "SEND_IMM" and r["messages"] == qps * -(-per_qp // size)
    assert r["checked_bytes"] >= qps * per_qp and r["goodput_gbps"] > 0
    # the link options reach the bench: a faulty link each way, the QPs' timeout set for it
    assert r["link_to_nic"]["sent"] > 0 and r["link_from_nic"]["sent"] > 0 and r["timeout"] == 4
    assert (tmp_path / "roce_w64_responder.pcap").stat().st_size > 0
