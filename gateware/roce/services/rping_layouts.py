"""Records of the rping server (:class:`~rocegen.gateware.roce.services.rping_server.RpingServer`):
its ports' own layouts and what it keeps per QP. ``rocegen.sim.models.services.rping`` states
the rules."""

from amaranth.lib import data, enum

from rocegen.gateware.roce.layouts import QP_SERVICE, RKEY_WRITE
from rocegen.gateware.roce.services.service_layouts import SERVICE_EVENT, EvKind

__all__ = ["ADV_BYTES", "OPENED", "RKEY_WRITE", "Phase", "WrKind", "EvKind", "RPING_QP",
           "RPING_EVENT"]

#: ``sizeof(struct rping_rdma_info)``: buf (u64), rkey (u32), size (u32), big-endian.
ADV_BYTES = 16

#: A QP of rping's port opened (``open`` set: a new connection) or closed (its connection
#: ended): ``qp`` the QP index (QPN - 256), as in WORK_REQUEST.
OPENED = QP_SERVICE


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

#: An event as the server holds it (the services' own layout).
RPING_EVENT = SERVICE_EVENT
