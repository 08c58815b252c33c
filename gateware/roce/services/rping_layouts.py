"""Records of the rping server (:class:`~rocegen.gateware.roce.services.rping_server.RpingServer`):
what it keeps per QP (its ports' layouts are the QP table's ``RKEY_WRITE`` and every service's
own, ``service_events``). ``rocegen.sim.models.services.rping`` states
the rules."""

from amaranth.lib import data, enum

__all__ = ["ADV_BYTES", "Phase", "WrKind", "RPING_QP"]

#: ``sizeof(struct rping_rdma_info)``: buf (u64), rkey (u32), size (u32), big-endian.
ADV_BYTES = 16

class Phase(enum.Enum, shape=3):
    """Where a QP's service is (the model's ``Phase``)."""
    OFF = 0         # not opened, closed, or ended
    READ_ADV = 1    # waiting for RDMA_READ_ADV
    READING = 2     # its READ outstanding
    WRITE_ADV = 3   # waiting for RDMA_WRITE_ADV
    WRITING = 4     # its WRITE outstanding


class WrKind(enum.Enum, shape=3):
    """The work request ID of each request the server posts (the model's ``WrKind``)."""
    RECV = 0
    READ = 1
    GO = 2
    WRITE = 3
    ABORT = 4


#: A QP's service: its phase, whether a go-ahead SEND is outstanding, the ping's length.
RPING_QP = data.StructLayout({"phase": Phase, "go_out": 1, "length": 31})
