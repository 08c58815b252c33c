"""The verbs' vocabulary the endpoint, its models and the host share: what a work request does
(:class:`WrOpcode`), how it completes (:class:`CplStatus`) and the states of a QP
(:class:`QpState`).

These are plain :class:`enum.IntEnum` classes, defined here once. The gateware builds its
Amaranth enums from them (:mod:`rocegen.gateware.roce.layouts`), the models and the host use
them as they are; the integer values are the codes of the endpoint's work-request, completion and
QP-table fields.
"""

import enum

__all__ = ["WrOpcode", "CplStatus", "QpState", "VERBS", "SEND_VERBS"]


class WrOpcode(enum.IntEnum):
    """What a work request does (code 7 of the 3-bit field is refused with
    :attr:`CplStatus.UNSUPPORTED`, as are the codes of a feature the endpoint was built
    without)."""
    WRITE = 0
    WRITE_IMM = 1
    SEND = 2
    SEND_IMM = 3
    READ = 4          # RDMA READ: ``length`` bytes from the peer into ``local_addr``
    COMPARE_SWAP = 5  # atomics: the operands are the 16 bytes at ``local_addr`` (swap or add,
    FETCH_ADD = 6     # then compare), the original value replaces the first 8 of them

    @property
    def sends_payload(self):
        """The message's payload goes out in the request packets (the sends: not READ nor
        the atomics, whose operands travel in their AtomicETH)."""
        return self <= WrOpcode.SEND_IMM

    @property
    def is_atomic(self):
        """COMPARE_SWAP or FETCH_ADD."""
        return self in (WrOpcode.COMPARE_SWAP, WrOpcode.FETCH_ADD)

    @property
    def has_imm(self):
        """The message carries an immediate (ImmDt on its LAST or ONLY packet)."""
        return self in (WrOpcode.WRITE_IMM, WrOpcode.SEND_IMM)


#: The verb names a user picks from (CLI, host agent, benchmarks), in :class:`WrOpcode` order:
#: the messages (the atomics are picked where a tool offers them).
VERBS = tuple(op.name for op in WrOpcode if not op.is_atomic)
#: The verbs whose message goes out as payload (all but READ).
SEND_VERBS = tuple(op.name for op in WrOpcode if op.sends_payload)


class CplStatus(enum.IntEnum):
    """Status of a completion."""
    OK = 0              # every packet of the message was acknowledged
    BAD_QP = 1          # QP index outside the QP table
    QP_NOT_READY = 2    # the QP was not ready to send (RTS) when the request came to be sent
    LOCAL_ALIGN = 3     # local address not a multiple of the memory word (W/8 bytes)
    LOCAL_LENGTH = 4    # local buffer [local_addr, local_addr + length) outside local memory
    FLUSHED = 5         # the QP went to the error state (or was closed) before it completed
    RETRY_EXCEEDED = 6  # timeouts / sequence-error rewinds ran out of retries (retry_cnt)
    RNR_RETRY_EXCEEDED = 7  # RNR NAKs ran out of retries (rnr_retry)
    REMOTE_INVALID = 8  # the responder answered NAK invalid request
    REMOTE_ACCESS = 9   # the responder answered NAK remote access error
    REMOTE_OP = 10      # the responder answered NAK remote operational error
    UNSUPPORTED = 11    # an opcode the endpoint was built without (READ without its requester)


class QpState(enum.IntEnum):
    """The state of a QP in the QP table (the verbs' QP states the endpoint uses)."""
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERROR = 4
