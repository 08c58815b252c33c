"""Reference model of the FPGA's rping client: ``rping -c -S size -C count -V`` as the FPGA
plays it against a host's ``rping -s`` (the protocol: :mod:`rocegen.sim.models.services.rping`).

The FPGA connects (its user's logic or a register asks the IB CM to connect to the host's rping
port, ``rping_client_port``); the QP that connection opens is the client's. The client serves
one connection at a time (``rping -c`` is one connection): a second one opened for it while it
runs is disconnected at once (``busy``).

Buffers: QP ``k``'s slice of local memory, ``[base + k * bytes_per_qp, ...)``
(:class:`ClientMemory`), holds the receive slot (16 bytes) at 0, the RDMA_READ_ADV
advertisement at ``A``, the RDMA_WRITE_ADV one at ``2 * A``, ``start_buf`` at ``3 * A`` and
``rdma_buf`` at ``3 * A + S``, ``A`` = max(16, W/8), ``S`` = ``size`` rounded up to ``A``. The
advertisements (``struct rping_rdma_info``: the buffer's address, the QP's R_Key, ``size``,
big-endian) name the buffers by their local byte address (the virtual address a peer's RETH
names) and the R_Key of the QP's region in the responder's table.

What the client does, one event at a time:

- its QP opened: post the receive slot; write both advertisements and ``start_buf`` of ping 0
  (:func:`~rocegen.sim.models.services.rping.ping_data`) into local memory; then SEND the
  RDMA_READ_ADV advertisement (16 bytes; wr_id ``READ_ADV``); phase ``READ_ADV``;
- a receive completion (status OK, a SEND, 16 bytes: the server's go-ahead): post the receive
  slot again; in phase ``READ_ADV`` (the server READ ``start_buf``) SEND the RDMA_WRITE_ADV
  advertisement, phase ``WRITE_ADV``, and the check of ``rdma_buf`` starts afresh; in phase
  ``WRITE_ADV`` (the server WROTE ``rdma_buf``) ``-V``: the server's writes into ``rdma_buf``
  since the RDMA_WRITE_ADV must have been its ``ceil(size / (W/8))`` words in order, each byte
  below ``size`` written and equal to ``start_buf``'s (``pings``); after ``count`` pings the
  client is ``done`` and disconnects, else it fills ``start_buf`` with the next ping and SENDs
  the RDMA_READ_ADV again; a mismatch ends it (``mismatch``, disconnect);
- a receive of another length, of an RDMA WRITE with immediate, or of a work request ID not the
  receive slot's: rping's "Received bogus data" (``bogus``, disconnect);
- a completion with status FLUSHED, or its QP closed: the client ends (``ended``; the host or
  the CM closed the connection); another error status: ``bad_status``, disconnect;
- the advertisements' own completions (OK) change nothing (rping does not wait for them).

The server's writes are seen as the responder makes them (its memory port): a word of
``rdma_buf`` of the client's QP, in phase ``WRITE_ADV``, is checked against the ping's bytes.
"""

import enum
from dataclasses import dataclass, field

from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.rping import (
    ADV_BYTES,
    RPING_MAX_SIZE,
    RPING_MIN_SIZE,
    RecvPost,
    WorkRequest,
    check_slices,
    pack_adv,
    ping_data,
)
from rocegen.wire.verbs import CplStatus, WrOpcode

__all__ = ["ClientKind", "ClientPhase", "COUNTERS", "MAX_COUNT", "ClientMemory", "MemWrite",
           "ClientActions", "RpingClientService"]

#: The client's counters.
COUNTERS = ("pings", "done", "ended", "mismatch", "bogus", "bad_status", "busy")
#: The most pings a connection may run (``rping -C``): five decimal digits.
MAX_COUNT = 99_999


class ClientKind(enum.IntEnum):
    """The work request ID of each request the client posts."""
    RECV = 0        # the receive slot
    READ_ADV = 1    # the SEND of the RDMA_READ_ADV advertisement
    WRITE_ADV = 2   # the SEND of the RDMA_WRITE_ADV advertisement


class ClientPhase(enum.IntEnum):
    OFF = 0         # no connection
    READ_ADV = 1    # RDMA_READ_ADV sent: waiting for the go-ahead after the server's READ
    WRITE_ADV = 2   # RDMA_WRITE_ADV sent: the server's WRITE, then its go-ahead


@dataclass(frozen=True)
class ClientMemory:
    """The slices of local memory the client's QPs own (see the module): ``num_qps`` slices of
    ``bytes_per_qp`` bytes (a power of two) from ``base`` (a multiple of ``align``), pings of
    ``size`` bytes (rping's 26..65535)."""
    num_qps: int
    base: int
    bytes_per_qp: int
    size: int
    width: int

    def __post_init__(self):
        check_slices(self.num_qps, self.width, self.base)
        if self.bytes_per_qp < 1 or self.bytes_per_qp & (self.bytes_per_qp - 1):
            raise ValueError(f"bytes_per_qp must be a power of two, not {self.bytes_per_qp}")
        if not RPING_MIN_SIZE <= self.size <= RPING_MAX_SIZE:
            raise ValueError(f"size must be {RPING_MIN_SIZE}..{RPING_MAX_SIZE} (rping's -S), "
                             f"not {self.size}")
        if self.slice_bytes > self.bytes_per_qp:
            raise ValueError(f"pings of {self.size} bytes need {self.slice_bytes} bytes a QP, "
                             f"more than bytes_per_qp {self.bytes_per_qp}")

    @property
    def align(self):
        return max(ADV_BYTES, self.width // 8)

    @property
    def word(self):
        return self.width // 8

    @property
    def buf_bytes(self):
        """``size`` rounded up to ``align``."""
        return -(-self.size // self.align) * self.align

    @property
    def slice_bytes(self):
        """The bytes of a slice the client uses."""
        return 3 * self.align + 2 * self.buf_bytes

    @property
    def words(self):
        """The words of memory a ping's buffer spans."""
        return -(-self.size // self.word)

    def recv_addr(self, qp):
        return self.base + qp * self.bytes_per_qp

    def adv_addr(self, qp, kind):
        """The advertisement of ``kind`` (:class:`ClientKind` READ_ADV or WRITE_ADV)."""
        return self.recv_addr(qp) + int(kind) * self.align

    def start_addr(self, qp):
        return self.recv_addr(qp) + 3 * self.align

    def rdma_addr(self, qp):
        return self.start_addr(qp) + self.buf_bytes


@dataclass(frozen=True)
class MemWrite:
    """A word write into local memory: word address, W/8 bytes (lane 0 first), byte enables."""
    word: int
    data: bytes
    be: int


@dataclass(frozen=True)
class ClientActions:
    """What the client does for one event, in this order: post ``recv``, make the ``writes``,
    post ``wr`` (after the writes), ask for the ``disconnect`` of a QP; ``counts``: the
    counters it counts."""
    recv: RecvPost | None = None
    writes: tuple = ()
    wr: WorkRequest | None = None
    disconnect: int | None = None
    counts: tuple = ()


def _words(addr, payload, word):
    """The word writes of ``payload`` at byte ``addr`` (a multiple of ``word``)."""
    out = []
    for k in range(0, len(payload), word):
        chunk = payload[k:k + word]
        out.append(MemWrite((addr + k) // word, chunk + bytes(word - len(chunk)),
                            (1 << len(chunk)) - 1))
    return out


@dataclass
class RpingClientService:
    """The FPGA's rping client (see the module) over ``memory`` (:class:`ClientMemory`), ``count``
    pings a connection (1..:data:`MAX_COUNT`); ``rkeys``: each QP's R_Key in the responder's
    table as built (:meth:`rkey_written` follows later writes)."""
    memory: ClientMemory
    count: int
    rkeys: list
    qp: int | None = None
    phase: ClientPhase = ClientPhase.OFF
    ping: int = 0
    next_word: int = 0
    bad: bool = False
    counters: dict = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))

    def __post_init__(self):
        if not 1 <= self.count <= MAX_COUNT:
            raise ValueError(f"count must be 1..{MAX_COUNT}, not {self.count}")
        if len(self.rkeys) != self.memory.num_qps:
            raise ValueError(f"rkeys must hold {self.memory.num_qps} R_Keys")
        self.rkeys = list(self.rkeys)

    def rkey_written(self, qp, rkey):
        """The responder's table got QP ``qp``'s R_Key ``rkey``."""
        if 0 <= qp < len(self.rkeys):
            self.rkeys[qp] = rkey

    # ---- actions ----

    def _recv(self):
        return RecvPost(self.qp, ClientKind.RECV, self.memory.recv_addr(self.qp), ADV_BYTES)

    def _send(self, kind):
        return WorkRequest(self.qp, kind, WrOpcode.SEND, self.memory.adv_addr(self.qp, kind),
                           ADV_BYTES)

    def _fill(self, adverts):
        """The writes of ``start_buf`` for the current ping, after both advertisements."""
        mem, qp, out = self.memory, self.qp, []
        if adverts:
            rkey = self.rkeys[qp]
            for kind, buf in ((ClientKind.READ_ADV, mem.start_addr(qp)),
                              (ClientKind.WRITE_ADV, mem.rdma_addr(qp))):
                out += _words(mem.adv_addr(qp, kind), pack_adv(buf, rkey, mem.size), mem.word)
        return tuple(out + _words(mem.start_addr(qp), ping_data(self.ping, mem.size), mem.word))

    def _end(self, counter, disconnect=True):
        qp = self.qp
        self.qp, self.phase = None, ClientPhase.OFF
        self.counters[counter] += 1
        return ClientActions(disconnect=qp if disconnect else None, counts=(counter,))

    def _status(self, flushed):
        return self._end("ended", disconnect=False) if flushed else self._end("bad_status")

    # ---- events ----

    def opened(self, qp):
        """QP ``qp`` was opened for the client (its connection to the host's rping port)."""
        if not 0 <= qp < self.memory.num_qps:
            return ClientActions()
        if self.qp is not None:
            self.counters["busy"] += 1
            return ClientActions(disconnect=qp, counts=("busy",))
        self.qp, self.phase, self.ping = qp, ClientPhase.READ_ADV, 0
        return ClientActions(recv=self._recv(), writes=self._fill(True),
                             wr=self._send(ClientKind.READ_ADV))

    def closed(self, qp):
        """QP ``qp``'s connection ended."""
        if qp != self.qp:
            return ClientActions()
        return self._end("ended", disconnect=False)

    def completion(self, qp, wr_id, status):
        """A work request of ``qp`` completed with ``status`` (:class:`CplStatus`)."""
        if qp != self.qp or status == CplStatus.OK:
            return ClientActions()
        return self._status(status == CplStatus.FLUSHED)

    def recv_completion(self, qp, wr_id, status, length, *, is_send=True):
        """A receive of ``qp`` completed: ``status`` (:class:`RecvStatus`), ``length`` bytes;
        ``is_send``: a SEND filled it."""
        if qp != self.qp:
            return ClientActions()
        if status != RecvStatus.OK:
            return self._status(status == RecvStatus.FLUSHED)
        if wr_id != ClientKind.RECV or not is_send or length != ADV_BYTES:
            return self._end("bogus")
        if self.phase == ClientPhase.READ_ADV:
            self.phase, self.next_word, self.bad = ClientPhase.WRITE_ADV, 0, False
            return ClientActions(recv=self._recv(), wr=self._send(ClientKind.WRITE_ADV))
        if self.bad or self.next_word != self.memory.words:
            return self._end("mismatch")
        self.ping += 1
        self.counters["pings"] += 1
        if self.ping == self.count:
            self.counters["done"] += 1
            qp = self.qp
            self.qp, self.phase = None, ClientPhase.OFF
            return ClientActions(disconnect=qp, counts=("pings", "done"))
        self.phase = ClientPhase.READ_ADV
        return ClientActions(recv=self._recv(), writes=self._fill(False),
                             wr=self._send(ClientKind.READ_ADV), counts=("pings",))

    def written(self, word, data, be):
        """The responder wrote ``data`` (W/8 bytes) with byte enables ``be`` at word address
        ``word``: checked when it is a word of the client's ``rdma_buf`` while it waits for the
        server's WRITE."""
        mem = self.memory
        if self.qp is None or self.phase != ClientPhase.WRITE_ADV:
            return
        k = word - mem.rdma_addr(self.qp) // mem.word
        if not 0 <= k < mem.words:
            return
        if k != self.next_word:
            self.bad = True
            return
        want = ping_data(self.ping, mem.size)
        for i in range(mem.word):
            p = k * mem.word + i
            if p < mem.size and (not be >> i & 1 or data[i] != want[p]):
                self.bad = True
        self.next_word += 1
