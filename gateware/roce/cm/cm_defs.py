"""Constants and parameter checks shared by the connection manager's blocks
(:mod:`rocegen.gateware.roce.cm.cm` describes the protocol)."""

from rocegen.gateware.roce.read.read_layouts import check_max_rd
from rocegen.gateware.roce.responder.resp_read_queue import check_rd_depth
from rocegen.wire.addr import parse_net
from rocegen.wire.cm import (
    ACK_ACK,
    ACK_NAK,
    ACK_NO_QP,
    CM_PORT,
    COUNTERS,
    REPLY_PORT,
    REQ_CLOSE_QP,
    REQ_ERROR,
    REQ_MODIFY_QP_RTS,
    REQ_NULL,
    REQ_OPEN_QP,
    REQ_QUERY,
    REQ_SEND_QP_INFO,
    UDP_SPORT_BASE,
)
from rocegen.wire.roce import PMTUS

__all__ = ["CM_PORT", "REPLY_PORT", "UDP_SPORT_BASE", "COUNTERS", "PMTU_LOG2",
           "REQ_NULL", "REQ_OPEN_QP", "REQ_SEND_QP_INFO", "REQ_MODIFY_QP_RTS", "REQ_CLOSE_QP",
           "REQ_QUERY", "REQ_ERROR", "ACK_ACK", "ACK_NO_QP", "ACK_NAK", "int_param", "parse_net",
           "read_params"]

# (the wire's codes and ports, the source ports of the QPs and the counters are rocegen.wire.cm's;
# named here for the blocks)

#: Path MTU in bytes -> its log2 (the QP context's ``pmtu_log2``).
PMTU_LOG2 = {p: p.bit_length() - 1 for p in PMTUS}


def int_param(name, value, lo, hi):
    """``value`` if it is an integer from ``lo`` to ``hi``, else TypeError / ValueError naming
    the parameter."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be {lo}..{hi}, not {value}")
    return value


def read_params(reads, max_rd_atomic, rd_depth):
    """The READ parameters of the connection manager, checked (``TypeError`` / ``ValueError``
    naming the parameter): ``reads`` a bool, ``max_rd_atomic`` 1..16, ``rd_depth`` 0 (no READ
    responder) or a READ queue depth of the responder (a power of two from 16 to 1024)."""
    if not isinstance(reads, bool):
        raise TypeError(f"reads must be a bool, not {reads!r}")
    check_max_rd(max_rd_atomic)
    if isinstance(rd_depth, bool) or not isinstance(rd_depth, int):
        raise TypeError(f"rd_depth must be an integer number of READs, not {rd_depth!r}")
    if rd_depth != 0:
        try:
            check_rd_depth(rd_depth)
        except ValueError:
            raise ValueError(f"rd_depth must be 0 (no READ responder) or a power of two from 16 "
                             f"to 1024 READs, not {rd_depth}") from None
    return reads, max_rd_atomic, rd_depth
