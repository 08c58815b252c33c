"""Reference model of the InfiniBand Communication Manager on QP1 (:mod:`.cm`), the QP pool it
shares with the out-of-band connection manager (:mod:`.pool`), and CM MADs in RoCEv2 frames
(:mod:`.frames`)."""

from rocegen.sim.models.ibcm.cm import (
    COUNTERS,
    Connection,
    ConnectRequest,
    IbCm,
    Outgoing,
    Region,
    Role,
    State,
)
from rocegen.sim.models.ibcm.frames import CmFrame, unwrap, wrap
from rocegen.sim.models.ibcm.pool import QpPool

__all__ = ["COUNTERS", "Connection", "ConnectRequest", "IbCm", "Outgoing", "Region", "Role",
           "State", "CmFrame", "unwrap", "wrap", "QpPool"]
