"""The standard RDMA connection manager in the endpoint (sim/cocotb/rdma_cm.py): the host NIC
model as a librdmacm peer connects over QP1, moves data both ways on the QP the endpoint's IB
CM opened, disconnects and connects again, beside the UDP 17185 manager on the same QP pool; a
REQ for a port nobody listens on is refused. On the same build, the gateware services
(sim/cocotb/services.py): two ``rping -c`` clients at once, then one more after a disconnect,
beside the user's traffic; two ``rdma_client``-like clients of the SEND echo; one whose DREQ is
lost, its connection closed by the endpoint once quiet, beside a client that keeps its own; the
FPGA's rping client against the host's ``rping -s`` (sim/cocotb/rping_client.py), its ``-V``
catching a changed byte. The gate runs all
on the responder's build at W = 64 with 4 QPs; the full tier at W = 512."""

import pytest

from rocegen.sim.testing.cocotb_runner import responder_sim_config, run_cocotb
from tests.tiers import full

PORT, RPING_PORT, ECHO_PORT = 7471, 7174, 7475
#: the rping client: the host's rping port (rping's, the same number as the FPGA's own rping
#: server listens on: the side tells them apart), its pings' size and count
CLIENT = {"RPING_CLIENT_PORT": 7174, "RPING_CLIENT_SIZE": 1000, "RPING_CLIENT_COUNT": 4}
#: the services' quiet time in the build: a quarter of it is far more than any client here waits
#: between two requests of a connection (the quiet test's live client waits a quarter)
IDLE_US = 100
ENV = {"RDMA_CM_PORT": PORT, "RPING_PORT": RPING_PORT, "ECHO_PORT": ECHO_PORT, **CLIENT}


def build(width):
    return responder_sim_config(width, num_qps=4, rdma_cm_ports=(PORT, RPING_PORT, ECHO_PORT),
                                rping_port=RPING_PORT, echo_port=ECHO_PORT,
                                rping_client_port=CLIENT["RPING_CLIENT_PORT"],
                                rping_client_size=CLIENT["RPING_CLIENT_SIZE"],
                                rping_client_count=CLIENT["RPING_CLIENT_COUNT"],
                                rdma_cm_time_wait_us=20, service_idle_us=IDLE_US)


@pytest.mark.parametrize("width", [64, full(512)])
def test_connections(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.rdma_cm", "connections",
                      label=f"rdma-cm-{width}", env=ENV) == 1


@pytest.mark.parametrize("width", [64, full(512)])
def test_rping(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.services", "rping",
                      label=f"rping-{width}", env=ENV) == 1


@pytest.mark.parametrize("width", [64, full(512)])
def test_rping_client(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.rping_client", "rping_client",
                      label=f"rping-client-{width}", env=ENV) == 1


@pytest.mark.parametrize("width", [64, full(512)])
def test_send_echo(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.services", "send_echo",
                      label=f"echo-{width}", env=ENV) == 1


@pytest.mark.parametrize("width", [64, full(512)])
def test_quiet_service_connections_are_closed(width):
    assert run_cocotb(build(width), "rocegen.sim.cocotb.services", "quiet",
                      label=f"quiet-{width}", env=ENV) == 1
