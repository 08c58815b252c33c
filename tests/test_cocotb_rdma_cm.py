"""The standard RDMA connection manager in the endpoint (sim/cocotb/rdma_cm.py): the host NIC
model as a librdmacm peer connects over QP1, moves data both ways on the QP the endpoint's IB
CM opened, disconnects and connects again, beside the UDP 17185 manager on the same QP pool; a
REQ for a port nobody listens on is refused. On the same build, the gateware services
(sim/cocotb/services.py): two ``rping -c`` clients at once, then one more after a disconnect,
beside the user's traffic; two ``rdma_client``-like clients of the SEND echo. The gate runs all
on the responder's build at W = 64 with 4 QPs; the full tier at W = 512."""

import pytest

from rocegen.sim.testing.cocotb_runner import responder_sim_config, run_cocotb
from tests.tiers import full

PORT, RPING_PORT, ECHO_PORT = 7471, 7174, 7475
ENV = {"RDMA_CM_PORT": PORT, "RPING_PORT": RPING_PORT, "ECHO_PORT": ECHO_PORT}


def build(width):
    return responder_sim_config(width, num_qps=4, rdma_cm_ports=(PORT, RPING_PORT, ECHO_PORT),
                                rping_port=RPING_PORT, echo_port=ECHO_PORT,
                                rdma_cm_time_wait_us=20)


@pytest.mark.parametrize("width", [64, full(512)])
def test_connections(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.rdma_cm", "connections",
                      label=f"rdma-cm-{width}", env=ENV) == 1


@pytest.mark.parametrize("width", [64, full(512)])
def test_rping(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.services", "rping",
                      label=f"rping-{width}", env=ENV) == 1


@pytest.mark.parametrize("width", [64, full(512)])
def test_send_echo(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.services", "send_echo",
                      label=f"echo-{width}", env=ENV) == 1
