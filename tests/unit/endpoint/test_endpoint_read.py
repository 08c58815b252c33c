"""RDMA READ as responder needs the responder: the endpoint's parameters, checked at
elaboration. What the READ responder does on the whole endpoint (the host's READs of every shape
mixed with its WRITEs and SENDs, READs right behind WRITEs, bad R_Keys and READs past the
region's end) is proved in Verilator: ``tests/test_cocotb_resp_scenarios.py``."""

import pytest

from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint


def test_reads_need_the_responder():
    with pytest.raises(ValueError, match="responder"):
        RoceEndpoint(64, 2, reads=True)
    with pytest.raises(TypeError, match="reads"):
        RoceEndpoint(64, 2, responder=True, reads=1)
    assert not RoceEndpoint(64, 2, responder=True, reads=False).reads
