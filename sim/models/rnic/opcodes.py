"""The RC opcodes as the host RNIC model reads them: their numbers, how each request opcode is
executed (kind, position in its message, RETH, ImmDt), which carry an AETH, the extension header
bytes of the others, and the segmentation rules of a request packet."""

import enum

from rocegen.wire import opcodes as opc

__all__ = ["Op", "FIRST", "MIDDLE", "LAST", "ONLY", "ATOMIC_OPCODES"]


#: RC BTH opcodes (and the CNP), by their names: every row of :mod:`rocegen.wire.opcodes`.
Op = enum.IntEnum("Op", [(r.name, r.code) for r in opc.ROWS], module=__name__)


# (kind, position, RETH, ImmDt) of the request opcodes the responder executes
FIRST, MIDDLE, LAST, ONLY = (p.value for p in opc.Position)
_KIND = {opc.Verb.SEND: "SEND", opc.Verb.RDMA_WRITE: "WRITE"}
_REQ = {Op(r.code): (_KIND[r.verb], r.position.value, r.has_reth, r.has_imm)
        for r in opc.ROWS if r.verb in _KIND and r.supported}
# opcodes with an AETH
_AETH_OPS = frozenset(Op(c) for c in opc.codes(has_aeth=True))
# extension header bytes of the other RC opcodes (for the packet length check)
_OTHER_HDR = {Op(r.code): r.ext_length for r in opc.ROWS
              if opc.transport(r.code) == opc.TRANSPORT_RC and r.code not in _REQ}
_RESPONSES = frozenset(opc.RESPONSES)
#: the atomic request opcodes (COMPARE_SWAP, FETCH_ADD: an AtomicETH each)
ATOMIC_OPCODES = frozenset(Op(c) for c in opc.codes(has_atomic_eth=True))


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
