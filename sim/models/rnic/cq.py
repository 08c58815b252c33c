"""The completion queues of the RNIC model: completions of receive WQEs and of send work
requests, polled oldest first."""

import enum
from typing import NamedTuple

__all__ = ["WcOpcode", "WcStatus", "Completion", "CompletionQueue"]


class WcOpcode(enum.StrEnum):
    RECV = "RECV"                                   # a SEND (with or without immediate)
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"       # an RDMA WRITE with immediate
    SEND = "SEND"                                   # requester: a SEND (with or without imm.)
    RDMA_WRITE = "RDMA_WRITE"                       # requester: a WRITE (with or without imm.)
    RDMA_READ = "RDMA_READ"                         # requester: a READ
    COMP_SWAP = "COMP_SWAP"                         # requester: a COMPARE_SWAP
    FETCH_ADD = "FETCH_ADD"                         # requester: a FETCH_ADD


class WcStatus(enum.StrEnum):
    SUCCESS = "SUCCESS"
    LOC_LEN_ERR = "LOC_LEN_ERR"              # SEND longer than the receive buffer
    REM_INV_REQ_ERR = "REM_INV_REQ_ERR"      # a SEND in progress ended by an invalid request
    WR_FLUSH_ERR = "WR_FLUSH_ERR"            # flushed: the QP went to the error state
    # requester (send completions)
    REM_ACCESS_ERR = "REM_ACCESS_ERR"        # NAK remote access error
    REM_OP_ERR = "REM_OP_ERR"                # NAK remote operational error
    RETRY_EXC_ERR = "RETRY_EXC_ERR"          # retry_cnt timeouts / sequence NAKs w/o progress
    RNR_RETRY_EXC_ERR = "RNR_RETRY_EXC_ERR"  # rnr_retry RNR NAKs without progress


class Completion(NamedTuple):
    """A receive completion: ``wr_id, opcode, byte_len, imm, status`` (+ ``qpn`` and, for a
    SEND, the received bytes in ``data``; ``imm`` is None without immediate data). A send
    completion (:attr:`Rnic.send_cq`) has opcode SEND, RDMA_WRITE or RDMA_READ, the message
    length as ``byte_len``, ``imm`` None, and no ``data`` but for a successful READ (the bytes
    read)."""
    wr_id: int
    opcode: WcOpcode
    byte_len: int
    imm: int | None
    status: WcStatus
    qpn: int = 0
    data: bytes | None = None


class CompletionQueue(list):
    """The :class:`Completion` entries not polled yet, oldest first (a list)."""

    def poll(self, max_entries=None):
        """Remove and return the oldest entries (all of them by default)."""
        n = len(self) if max_entries is None else min(max_entries, len(self))
        out = self[:n]
        del self[:n]
        return out
