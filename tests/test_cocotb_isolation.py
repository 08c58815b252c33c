"""An error stays on its QP (sim/cocotb/roce_isolation.py): QP A driven into the error state in
every way, as responder and as requester, while QP B moves data at the line rate; B keeps its
goodput (within 1 % of a run without the error), A's flush ends with the predicted completions,
and A works again once opened again, also when it is set up again at once after a close with
work outstanding. The gate runs every kind on the responder build the other benches share at
W = 64 (on chip); the full tier adds W = 512 and AXI4 memory."""

import json

import pytest

from bench.bench_isolation import CONFIGS
from rocegen.sim.testing.cocotb_runner import responder_sim_config, run_cocotb
from tests.tiers import full


@pytest.mark.parametrize("config", ["onchip-64", full("onchip-512"), full("axi4-64"),
                                    full("axi4-512")])
def test_error_stays_on_its_qp(config, tmp_path):
    params = dict(CONFIGS[config])
    cfg = responder_sim_config(params.pop("width"), **params)
    out = tmp_path / "isolation.json"
    assert run_cocotb(cfg, "rocegen.sim.cocotb.roce_isolation", "isolation",
                      label=f"isolation-{config}", env={"ROCE_RESULTS": out}) == 1
    figures = json.loads(out.read_text())
    assert {f["kind"] for f in figures} == {"rkey", "range", "length", "sequence",
                                            "retry", "rnr", "remote", "close", "full"}
    assert all(f["b_ratio"] >= 0.99 for f in figures), figures


def test_reopen_at_once_waits_for_the_old_work():
    """A QP closed with 40 work requests outstanding and set up again in the next cycles: the
    old requests all complete FLUSHED, the new connection's request OK, and nothing old is sent
    on the new connection (roce_isolation.reopen_at_once, W = 64 on chip)."""
    params = dict(CONFIGS["onchip-64"])
    cfg = responder_sim_config(params.pop("width"), **params)
    assert run_cocotb(cfg, "rocegen.sim.cocotb.roce_isolation", "reopen_at_once",
                      label="reopen-at-once") == 1
