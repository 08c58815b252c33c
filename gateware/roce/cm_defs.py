"""Constants and parameter checks shared by the connection manager's blocks
(:mod:`rocegen.gateware.roce.cm` describes the protocol)."""

import ipaddress

__all__ = ["CM_PORT", "REPLY_PORT", "UDP_SPORT_BASE", "COUNTERS", "PMTU_LOG2",
           "REQ_NULL", "REQ_OPEN_QP", "REQ_SEND_QP_INFO", "REQ_MODIFY_QP_RTS", "REQ_CLOSE_QP",
           "REQ_ERROR", "ACK_ACK", "ACK_NO_QP", "ACK_NAK", "int_param", "parse_net"]

#: UDP port the connection manager listens on.
CM_PORT = 17185
#: UDP source port of its replies.
REPLY_PORT = 0x8765
#: QP ``k`` sends from UDP source port ``UDP_SPORT_BASE | k``.
UDP_SPORT_BASE = 0xC000
#: Counter pulses, in port order.
COUNTERS = ("rx_requests", "replies", "drop_length", "drop_unknown", "drop_ip", "nak_illegal",
            "nak_owner", "nak_not_allowed", "no_qp", "drop_gen")

REQ_NULL, REQ_OPEN_QP, REQ_SEND_QP_INFO, REQ_MODIFY_QP_RTS, REQ_CLOSE_QP, REQ_ERROR = 0, 1, 2, 3, 4, 7
ACK_ACK, ACK_NO_QP, ACK_NAK = 1, 2, 3

#: Path MTU in bytes -> its log2 (the QP context's ``pmtu_log2``).
PMTU_LOG2 = {256: 8, 512: 9, 1024: 10, 2048: 11, 4096: 12}


def int_param(name, value, lo, hi):
    """``value`` if it is an integer from ``lo`` to ``hi``, else TypeError / ValueError naming
    the parameter."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be {lo}..{hi}, not {value}")
    return value


def parse_net(allow_net):
    """``None`` or ``(ip, prefix_len)`` -> ``None`` or ``(network, mask)`` as 32-bit integers.

    ``ip`` is an integer or a dotted string; its host bits must be zero."""
    if allow_net is None:
        return None
    if not isinstance(allow_net, tuple) or len(allow_net) != 2:
        raise TypeError(f"allow_net must be None or an (ip, prefix_len) tuple, not {allow_net!r}")
    ip, prefix = allow_net
    if not isinstance(prefix, int) or isinstance(prefix, bool) or not 0 <= prefix <= 32:
        raise ValueError(f"allow_net prefix length must be 0..32, not {prefix!r}")
    if isinstance(ip, bool) or not isinstance(ip, (int, str)):
        raise TypeError(f"allow_net address must be an integer or a dotted string, not {ip!r}")
    try:
        net = ipaddress.IPv4Network((ip, prefix), strict=True)
    except ValueError as e:
        raise ValueError(f"allow_net {allow_net!r} is not an IPv4 network: {e}") from None
    return int(net.network_address), int(net.netmask)
