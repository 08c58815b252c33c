"""The RC opcodes as the host RNIC model reads them: their numbers, how each request opcode is
executed (kind, position in its message, RETH, ImmDt), which carry an AETH, the extension header
bytes of the others, and the segmentation rules of a request packet."""

import enum

__all__ = ["Op", "FIRST", "MIDDLE", "LAST", "ONLY"]


class Op(enum.IntEnum):
    """RC BTH opcodes (and the CNP)."""
    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_LAST_WITH_IMMEDIATE = 0x03
    SEND_ONLY = 0x04
    SEND_ONLY_WITH_IMMEDIATE = 0x05
    RDMA_WRITE_FIRST = 0x06
    RDMA_WRITE_MIDDLE = 0x07
    RDMA_WRITE_LAST = 0x08
    RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RDMA_WRITE_ONLY = 0x0A
    RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RDMA_READ_REQUEST = 0x0C
    RDMA_READ_RESPONSE_FIRST = 0x0D
    RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RDMA_READ_RESPONSE_LAST = 0x0F
    RDMA_READ_RESPONSE_ONLY = 0x10
    ACKNOWLEDGE = 0x11
    ATOMIC_ACKNOWLEDGE = 0x12
    COMPARE_SWAP = 0x13
    FETCH_ADD = 0x14
    CNP = 0x81


# (kind, position, RETH, ImmDt) of the request opcodes the responder executes
FIRST, MIDDLE, LAST, ONLY = "FIRST", "MIDDLE", "LAST", "ONLY"
_REQ = {
    Op.SEND_FIRST: ("SEND", FIRST, False, False),
    Op.SEND_MIDDLE: ("SEND", MIDDLE, False, False),
    Op.SEND_LAST: ("SEND", LAST, False, False),
    Op.SEND_LAST_WITH_IMMEDIATE: ("SEND", LAST, False, True),
    Op.SEND_ONLY: ("SEND", ONLY, False, False),
    Op.SEND_ONLY_WITH_IMMEDIATE: ("SEND", ONLY, False, True),
    Op.RDMA_WRITE_FIRST: ("WRITE", FIRST, True, False),
    Op.RDMA_WRITE_MIDDLE: ("WRITE", MIDDLE, False, False),
    Op.RDMA_WRITE_LAST: ("WRITE", LAST, False, False),
    Op.RDMA_WRITE_LAST_WITH_IMMEDIATE: ("WRITE", LAST, False, True),
    Op.RDMA_WRITE_ONLY: ("WRITE", ONLY, True, False),
    Op.RDMA_WRITE_ONLY_WITH_IMMEDIATE: ("WRITE", ONLY, True, True),
}
# opcodes with an AETH
_AETH_OPS = frozenset({Op.RDMA_READ_RESPONSE_FIRST, Op.RDMA_READ_RESPONSE_LAST,
                       Op.RDMA_READ_RESPONSE_ONLY, Op.ACKNOWLEDGE, Op.ATOMIC_ACKNOWLEDGE})
# extension header bytes of the other RC opcodes (for the packet length check)
_OTHER_HDR = {
    Op.RDMA_READ_REQUEST: 16, Op.RDMA_READ_RESPONSE_FIRST: 4, Op.RDMA_READ_RESPONSE_MIDDLE: 0,
    Op.RDMA_READ_RESPONSE_LAST: 4, Op.RDMA_READ_RESPONSE_ONLY: 4, Op.ACKNOWLEDGE: 4,
    Op.ATOMIC_ACKNOWLEDGE: 12, Op.COMPARE_SWAP: 28, Op.FETCH_ADD: 28,
}
_RESPONSES = range(Op.RDMA_READ_RESPONSE_FIRST, Op.ATOMIC_ACKNOWLEDGE + 1)


def _opname(op):
    try:
        return Op(op).name
    except ValueError:
        return f"opcode {op:#04x}"


def _segmentation_error(kind, pos, n, padcnt, pmtu):
    """Why a request packet with ``n`` payload bytes breaks the PMTU segmentation, or None."""
    if pos in (FIRST, MIDDLE):
        if padcnt:
            return f"PadCnt {padcnt} on a {kind}_{pos} packet (only the last packet has pad)"
        if n != pmtu:
            return f"{kind}_{pos} carries {n} payload bytes, not the PMTU ({pmtu})"
    elif pos == LAST:
        if n == 0 or n > pmtu:
            return f"{kind}_LAST carries {n} payload bytes (must be 1..PMTU={pmtu})"
    elif n > pmtu:
        return f"{kind}_ONLY carries {n} payload bytes, more than the PMTU ({pmtu})"
    if padcnt != (-n) & 3:
        return f"PadCnt {padcnt} but {n} payload bytes need {(-n) & 3}"
    return None
