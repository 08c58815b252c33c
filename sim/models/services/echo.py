"""Reference model of the FPGA's SEND echo: the server librdmacm's ``examples/rdma_client.c``
talks to (its peer ``examples/rdma_server.c``), on every QP the connection manager opens on the
echo's port.

rdma_client's protocol
----------------------
The client (``rdma_client -s ADDR -p PORT``, default port 7471) makes an RC QP (one send and one
receive request, 16 bytes inline), posts a receive of 16 bytes, connects (``rdma_connect``),
SENDs its 16-byte ``send_msg``, waits for the SEND's completion and then for its receive's, and
disconnects. ``rdma_server`` posts a receive of 16 bytes before it accepts, waits for it to
complete and SENDs ``recv_msg`` back: an echo. The client checks only that both complete well.

The FPGA's echo
---------------
:class:`EchoServer` answers every SEND with a SEND of the same bytes, on every QP opened on the
echo's port, with the FPGA's local memory as its buffers: QP ``k`` owns the slice ``[base + k *
bytes_per_qp, base + (k + 1) * bytes_per_qp)`` (:class:`EchoMemory`), the whole slice its one
receive buffer. Per QP, one event at a time:

- a QP opened: post the slice as the receive buffer; wait for a message (``RECV``);
- a receive completion while waiting, status OK, opcode SEND: SEND its ``length`` bytes back
  from the slice (``ECHO``; a SEND of 0 bytes too), a message echoed (``echoes``: a client
  may disconnect as soon as the echo reached it, before its ACK does); wait for the echo's
  completion;
- the echo's completion (OK): post the receive buffer again;
- a QP closed, or a completion with status FLUSHED: the service ends (``ended``, once per
  connection); a completion with another error status ends it too (``bad_status``), as does an
  event the state does not expect (a receive while an echo is outstanding, an RDMA WRITE with
  immediate, a completion of a request not outstanding: ``bad_event``). Events of a QP whose
  service has ended are ignored until it is opened again.

A message longer than the slice completes in error at the responder (NAK invalid request), which
ends the service with ``bad_status``: the slice bounds the longest echo. While an echo is
outstanding the QP has no receive buffer, so a client that SENDs again before the echo meets RNR
NAKs until it is posted (its RNR retry count then decides).
"""

import enum
from dataclasses import dataclass

from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.rping import (
    Actions,
    RecvPost,
    WorkRequest,
    check_qps_and_width,
)
from rocegen.wire.verbs import CplStatus, WrOpcode

__all__ = ["ECHO_PORT", "EchoKind", "EchoPhase", "COUNTERS", "EchoMemory", "EchoServer"]

#: rdma_client's default port.
ECHO_PORT = 7471
#: The echo's counters.
COUNTERS = ("echoes", "ended", "bad_status", "bad_event")


class EchoKind(enum.IntEnum):
    """The work request ID of each request the echo posts."""
    RECV = 0
    ECHO = 1


class EchoPhase(enum.IntEnum):
    """Where a QP's echo is."""
    OFF = 0         # not opened, closed, or ended
    RECV = 1        # waiting for a message
    ECHO = 2        # its echo outstanding


@dataclass(frozen=True)
class EchoMemory:
    """The slices of local memory the echo's QPs own: ``num_qps`` slices of ``bytes_per_qp``
    bytes (a power of two, at least a memory word) from ``base`` (a multiple of the word,
    ``width`` / 8 bytes)."""
    num_qps: int
    base: int
    bytes_per_qp: int
    width: int

    def __post_init__(self):
        check_qps_and_width(self.num_qps, self.width)
        word = self.width // 8
        if self.base < 0 or self.base % word:
            raise ValueError(f"base must be a multiple of {word}, not {self.base}")
        if self.bytes_per_qp < word or self.bytes_per_qp & (self.bytes_per_qp - 1) or \
                self.bytes_per_qp > 1 << 30:
            raise ValueError(f"bytes_per_qp must be a power of two from {word} to 2^30, "
                             f"not {self.bytes_per_qp}")

    def buf_addr(self, qp):
        return self.base + qp * self.bytes_per_qp


class EchoServer:
    """The FPGA's SEND echo (see the module's docstring) over the slices of ``memory``
    (:class:`EchoMemory`). Each event method returns the :class:`Actions` it takes (``rkey``
    never); :attr:`counters` counts them."""

    def __init__(self, memory):
        self.memory = memory
        self.phases = [EchoPhase.OFF] * memory.num_qps
        self.counters = dict.fromkeys(COUNTERS, 0)

    def _recv(self, qp):
        return RecvPost(qp, EchoKind.RECV, self.memory.buf_addr(qp), self.memory.bytes_per_qp)

    def _end(self, qp, count):
        self.phases[qp] = EchoPhase.OFF
        self.counters[count] += 1
        return Actions(count=count)

    def _live(self, qp):
        return 0 <= qp < len(self.phases) and self.phases[qp] != EchoPhase.OFF

    def opened(self, qp):
        """QP ``qp`` was opened (a new connection on the echo's port)."""
        if not 0 <= qp < len(self.phases):
            return Actions()
        self.phases[qp] = EchoPhase.RECV
        return Actions(recv=self._recv(qp))

    def closed(self, qp):
        """QP ``qp``'s connection ended."""
        return self._end(qp, "ended") if self._live(qp) else Actions()

    def recv_completion(self, qp, wr_id, status, length, *, is_send=True):
        """A receive of QP ``qp`` completed: ``status`` (:class:`RecvStatus`), ``length`` bytes;
        ``is_send``: a SEND filled the buffer (not an RDMA WRITE with immediate)."""
        if not self._live(qp):
            return Actions()
        if status != RecvStatus.OK:
            return self._end(qp, "ended" if status == RecvStatus.FLUSHED else "bad_status")
        if wr_id != EchoKind.RECV or not is_send or self.phases[qp] != EchoPhase.RECV:
            return self._end(qp, "bad_event")
        self.phases[qp] = EchoPhase.ECHO
        self.counters["echoes"] += 1
        return Actions(wr=WorkRequest(qp, EchoKind.ECHO, WrOpcode.SEND, self.memory.buf_addr(qp),
                                      length), count="echoes")

    def completion(self, qp, wr_id, status):
        """A work request of QP ``qp`` completed with ``status`` (:class:`CplStatus`)."""
        if not self._live(qp):
            return Actions()
        if status != CplStatus.OK:
            return self._end(qp, "ended" if status == CplStatus.FLUSHED else "bad_status")
        if wr_id != EchoKind.ECHO or self.phases[qp] != EchoPhase.ECHO:
            return self._end(qp, "bad_event")
        self.phases[qp] = EchoPhase.RECV
        return Actions(recv=self._recv(qp))
