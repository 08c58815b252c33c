"""Constants and parameter checks shared by the connection manager's blocks
(:mod:`rocegen.gateware.roce.cm` describes the protocol)."""

from rocegen.wire.addr import parse_net
from rocegen.wire.cm import (
    ACK_ACK,
    ACK_NAK,
    ACK_NO_QP,
    CM_PORT,
    REPLY_PORT,
    REQ_CLOSE_QP,
    REQ_ERROR,
    REQ_MODIFY_QP_RTS,
    REQ_NULL,
    REQ_OPEN_QP,
    REQ_QUERY,
    REQ_SEND_QP_INFO,
)
from rocegen.wire.roce import PMTUS

__all__ = ["CM_PORT", "REPLY_PORT", "UDP_SPORT_BASE", "COUNTERS", "PMTU_LOG2",
           "REQ_NULL", "REQ_OPEN_QP", "REQ_SEND_QP_INFO", "REQ_MODIFY_QP_RTS", "REQ_CLOSE_QP",
           "REQ_QUERY", "REQ_ERROR", "ACK_ACK", "ACK_NO_QP", "ACK_NAK", "int_param", "parse_net"]

# (the wire's codes and ports are rocegen.wire.cm's; named here for the blocks)
#: QP ``k`` sends from UDP source port ``UDP_SPORT_BASE | k``.
UDP_SPORT_BASE = 0xC000
#: Counter pulses, in port order.
COUNTERS = ("rx_requests", "replies", "drop_length", "drop_unknown", "drop_ip", "nak_illegal",
            "nak_owner", "nak_not_allowed", "no_qp", "drop_gen")

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
