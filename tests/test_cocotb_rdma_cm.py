"""The standard RDMA connection manager in the endpoint (sim/cocotb/rdma_cm.py): the host NIC
model as a librdmacm peer connects over QP1, moves data both ways on the QP the endpoint's IB
CM opened, disconnects and connects again, beside the UDP 17185 manager on the same QP pool; a
REQ for a port nobody listens on is refused. The gate runs it on the responder's build at
W = 64 with 4 QPs; the full tier at W = 512."""

import pytest

from rocegen.sim.testing.cocotb_runner import responder_sim_config, run_cocotb
from tests.tiers import full

PORT = 7471


@pytest.mark.parametrize("width", [64, full(512)])
def test_connections(width):
    cfg = responder_sim_config(width, num_qps=4, rdma_cm_ports=(PORT,),
                               rdma_cm_time_wait_us=20)
    assert run_cocotb(cfg, "rocegen.sim.cocotb.rdma_cm", "connections",
                      label=f"rdma-cm-{width}", env={"RDMA_CM_PORT": PORT}) == 1
