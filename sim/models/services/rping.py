"""Reference model of an rping server on the endpoint's QPs, and of the rping client it serves.

Written from librdmacm's ``examples/rping.c`` (rdma-core v44.0, what Debian bookworm ships; the
later versions change only how the CM event thread is stopped, not the protocol).

rping's protocol
----------------
The client (``rping -c -a ADDR -p PORT -S size -C count -V``) connects with ``rdma_connect``
(RC; responder resources and initiator depth 1, retry and RNR retry counts 7). Every message
either side SENDs is a ``struct rping_rdma_info`` of :data:`ADV_BYTES` = 16 bytes, all in network
byte order: ``buf`` (u64, a virtual address), ``rkey`` (u32), ``size`` (u32).

Buffers: each side registers ``recv_buf`` (16 bytes, local write), ``send_buf`` (16 bytes) and
``rdma_buf`` (``size`` bytes, remote read and write); the client also ``start_buf`` (``size``
bytes, remote read and write). Each side posts one receive (``recv_buf``, 16 bytes) before it
connects or accepts, and posts it again on every good receive completion (in its completion
handler, before it wakes the main loop): one receive outstanding at a time. The send queue
holds at most 16 requests, every one signalled.

One iteration (a "ping"), the server's side:

1. the client fills ``start_buf`` (:func:`ping_data`) and SENDs ``{start_buf, its R_Key, size}``
   (RDMA_READ_ADV);
2. the server's receive completes: its length must be 16 (else "Received bogus data", an error
   that ends the server); the server takes ``buf``, ``rkey``, ``size``; the receive is posted
   again;
3. the server RDMA READs ``size`` bytes from the client's ``buf`` with ``rkey`` into its own
   ``rdma_buf`` (the server's ``rdma_buf`` is its own ``-S`` size, so a larger advertisement
   fails there locally);
4. on the READ's completion it SENDs its ``send_buf`` (the go-ahead);
5. the client's receive completes (length 16 or "bogus data"): it SENDs
   ``{rdma_buf, its R_Key, size}`` (RDMA_WRITE_ADV);
6. the server's receive completes as in 2; it RDMA WRITEs ``strlen(rdma_buf) + 1`` bytes of its
   ``rdma_buf`` to the client's ``buf`` with ``rkey``;
7. on the WRITE's completion it SENDs the go-ahead again;
8. the client's receive completes; with ``-V`` the client compares all ``size`` bytes of
   ``start_buf`` and ``rdma_buf`` ("data mismatch!" fails it), then starts the next iteration.

The server's SEND payload (``send_buf``) is never formatted on the server side
(``rping_format_send`` is called by the client only): 16 zero bytes; the client looks at the
length of what it receives, never at the bytes. The server does not wait for its SENDs'
completions (they are only logged); it waits for the READ's and the WRITE's. ``-C count``: the
client runs ``count`` iterations (0: forever) and then disconnects; the server runs until it is
disconnected (a DISCONNECTED event ends its loop without an error; ``-P`` serves each connection
in a thread of its own). A completion with an error status ends either side (FLUSHED ones are
ignored: the disconnect ends the loop); so does a receive in the wrong state. rping itself
checks neither the advertised size nor the R_Key.

The client's ``start_buf`` of iteration ``ping``: ``snprintf(buf, size, "rdma-ping-%d: ",
ping)``, then from the end of that text the letters ``start, start + 1, ...`` wrapping from
``z`` (122) to ``A`` (65), ``start`` being ``A`` at iteration 0 and one more each iteration
(wrapping the same way), and the last byte 0. rping accepts ``-S`` from 26 to 65535
(:data:`RPING_MIN_SIZE`, :data:`RPING_MAX_SIZE`; default 64): the text (at most 23 bytes with
its NUL) always fits, so the only NUL is the last byte and ``strlen(rdma_buf) + 1`` is ``size``.

The FPGA's server
-----------------
:class:`RpingServer` serves every QP the connection manager opens on rping's port, as ``rping
-s -P`` does, with the FPGA's local memory in the role of the server's buffers. QP ``k`` owns the
slice ``[base + k * bytes_per_qp, base + (k + 1) * bytes_per_qp)`` (:class:`RpingMemory`): its
receive slot (16 bytes) at the slice's start, its send slot (16 bytes) at ``A``, its ``rdma_buf``
(``max_size`` bytes) at ``2 * A``, ``A`` being ``max(16, W/8)`` (a local address of a SEND or
WRITE is a multiple of the memory word, W/8 bytes). What the server does, per QP, one event at a
time:

- a QP opened: post the receive slot (16 bytes); wait for RDMA_READ_ADV;
- a receive completion while waiting for an advertisement, status OK, opcode SEND, length 16,
  ``1 <= size <= max_size`` (RDMA_WRITE_ADV: also ``size`` at least the ping's length): post
  the receive slot again, write the QP's R_Key (the advertisement's: the QP's context holds the
  peer's R_Key, :class:`RkeyWrite`) and post the READ (``size`` bytes from ``buf`` into
  ``rdma_buf``) or the WRITE (the ping's length, the READ's ``size``, from ``rdma_buf`` to
  ``buf``: that is ``strlen(rdma_buf) + 1`` for every buffer rping's client builds);
- the READ's completion (OK): post the go-ahead SEND, 16 bytes of the send slot (the client
  reads only their length); wait for RDMA_WRITE_ADV;
- the WRITE's completion (OK): post the go-ahead SEND; a ping is done (``pings``); wait for
  RDMA_READ_ADV;
- a go-ahead's completion (OK): nothing more (at most one is outstanding: each QP's completions
  come in the order its requests were posted, and a go-ahead is posted before the next READ or
  WRITE);
- a QP closed, or a completion (receive or work request) with status FLUSHED: the service of
  the QP ends (``ended``, once per connection); so does:

  * a bad advertisement (a receive of a length other than 16, a size 0 or above ``max_size``,
    an RDMA_WRITE_ADV smaller than the ping): ``bad_adv``;
  * a completion with an error status other than FLUSHED: ``bad_status``;
  * an event the state does not expect (a receive while a READ or WRITE is outstanding, a
    receive that is not a SEND, a completion of a request not outstanding): ``bad_event``;

  for a bad advertisement or event the server posts a SEND of 0 bytes (the abort): rping's
  client takes any receive of a length other than 16 as "bogus data" and fails, so it never
  waits for a server that stopped. After an error the QP has failed (nothing is posted). Events
  of a QP whose service has ended are ignored until it is opened again.

Work request IDs name what the request is (:class:`WrKind`); the receive buffer's is
``WrKind.RECV``. Addresses: a READ's or WRITE's ``remote_offset`` is the advertised ``buf`` (the
connection manager opens its QPs with base address 0, so the RETH's virtual address is ``buf``).
"""

import enum
import struct
from dataclasses import dataclass, field

from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.wire.verbs import CplStatus, WrOpcode

__all__ = ["ADV_BYTES", "RPING_MIN_SIZE", "RPING_MAX_SIZE", "WrKind", "Phase", "COUNTERS",
           "pack_adv", "unpack_adv", "ping_data", "check_qps_and_width", "check_slices",
           "RpingMemory",
           "RecvPost", "RkeyWrite", "WorkRequest", "Actions", "RpingServer", "MemoryRegion",
           "RpingClient"]

#: ``sizeof(struct rping_rdma_info)``: buf (u64), rkey (u32), size (u32), big-endian.
ADV_BYTES = 16
_ADV = struct.Struct(">QII")
#: rping's ``-S`` range: RPING_MIN_BUFSIZE (sizeof "2147483647" + sizeof "rdma-ping-%d: ")
#: to RPING_BUFSIZE - 1.
RPING_MIN_SIZE = 11 + 15
RPING_MAX_SIZE = 64 * 1024 - 1
#: The longest message a work request carries (its length field is 31 bits).
_MAX_LENGTH = (1 << 31) - 1
_FIRST_LETTER, _LAST_LETTER = 65, 122


class WrKind(enum.IntEnum):
    """The work request ID of each request the server posts."""
    RECV = 0        # the receive slot
    READ = 1
    GO = 2          # the go-ahead SEND
    WRITE = 3
    ABORT = 4       # the 0-byte SEND after a bad advertisement or event


class Phase(enum.IntEnum):
    """Where a QP's service is."""
    OFF = 0         # not opened, closed, or ended
    READ_ADV = 1    # waiting for RDMA_READ_ADV
    READING = 2     # its READ outstanding
    WRITE_ADV = 3   # waiting for RDMA_WRITE_ADV
    WRITING = 4     # its WRITE outstanding


#: The server's counters: pings done, and why services ended.
COUNTERS = ("pings", "ended", "bad_adv", "bad_status", "bad_event")


def pack_adv(buf, rkey, size):
    """The 16 bytes of ``struct rping_rdma_info``."""
    return _ADV.pack(buf, rkey, size)


def unpack_adv(data):
    """``(buf, rkey, size)`` of 16 bytes."""
    return _ADV.unpack(bytes(data))


def ping_data(ping, size):
    """The client's ``start_buf`` of iteration ``ping`` (``size`` >= 1 bytes), byte for byte as
    rping's ``snprintf`` and letter loop make it (for sizes below rping's minimum too: the text
    then cut by ``snprintf``)."""
    text = f"rdma-ping-{ping}: ".encode()
    buf = bytearray(size)
    kept = min(len(text), size - 1)
    buf[:kept] = text[:kept]
    c = _FIRST_LETTER + ping % (_LAST_LETTER - _FIRST_LETTER + 1)
    for i in range(len(text), size):
        buf[i] = c
        c = _FIRST_LETTER if c == _LAST_LETTER else c + 1
    buf[size - 1] = 0
    return bytes(buf)


def check_qps_and_width(num_qps, width):
    """The checks every service's memory layout makes of the endpoint's QPs and word."""
    if not 1 <= num_qps <= 256:
        raise ValueError(f"num_qps must be 1..256, not {num_qps}")
    if width not in (64, 128, 256, 512):
        raise ValueError(f"width must be 64, 128, 256 or 512, not {width}")


def check_slices(num_qps, width, base):
    """:func:`check_qps_and_width`, and ``base`` a multiple of the slices' alignment
    max(16, W/8), which it returns."""
    check_qps_and_width(num_qps, width)
    a = max(ADV_BYTES, width // 8)
    if base < 0 or base % a:
        raise ValueError(f"base must be a multiple of {a}, not {base}")
    return a


@dataclass(frozen=True)
class RpingMemory:
    """The slices of local memory the server's QPs own: ``num_qps`` slices of ``bytes_per_qp``
    bytes (a power of two) from ``base`` (a multiple of ``align``), each the receive slot, the
    send slot and ``rdma_buf`` of at most ``max_size`` bytes; ``align`` = max(16, W/8)."""
    num_qps: int
    base: int
    bytes_per_qp: int
    max_size: int
    width: int

    def __post_init__(self):
        a = check_slices(self.num_qps, self.width, self.base)
        if self.bytes_per_qp <= 2 * a or self.bytes_per_qp & (self.bytes_per_qp - 1):
            raise ValueError(f"bytes_per_qp must be a power of two above {2 * a}, "
                             f"not {self.bytes_per_qp}")
        if not 1 <= self.max_size <= min(self.bytes_per_qp - 2 * a, _MAX_LENGTH):
            raise ValueError(f"max_size must be 1..{self.bytes_per_qp - 2 * a}, "
                             f"not {self.max_size}")

    @property
    def align(self):
        return max(ADV_BYTES, self.width // 8)

    @property
    def end(self):
        """The byte after the last slice."""
        return self.base + self.num_qps * self.bytes_per_qp

    def recv_addr(self, qp):
        return self.base + qp * self.bytes_per_qp

    def send_addr(self, qp):
        return self.recv_addr(qp) + self.align

    def buf_addr(self, qp):
        return self.recv_addr(qp) + 2 * self.align


@dataclass(frozen=True)
class RecvPost:
    """A receive buffer posted (the endpoint's RECV_POST)."""
    qp: int
    wr_id: int
    addr: int
    length: int


@dataclass(frozen=True)
class RkeyWrite:
    """The R_Key the QP's READs and WRITEs name from now on (its context's ``rkey``)."""
    qp: int
    rkey: int


@dataclass(frozen=True)
class WorkRequest:
    """A work request posted (the endpoint's WORK_REQUEST; ``imm`` 0)."""
    qp: int
    wr_id: int
    opcode: WrOpcode
    local_addr: int
    length: int
    remote_offset: int = 0


@dataclass(frozen=True)
class Actions:
    """What the server does for one event, in this order: post ``recv``, write ``rkey``, post
    ``wr`` (each None when not done); ``count``: the counter it counts, if any."""
    recv: RecvPost | None = None
    rkey: RkeyWrite | None = None
    wr: WorkRequest | None = None
    count: str | None = None


@dataclass
class _Qp:
    phase: Phase = Phase.OFF
    go_out: bool = False        # a go-ahead SEND not completed
    length: int = 0             # the ping's length (the READ's size)


class RpingServer:
    """The FPGA's rping server (see the module's docstring) over the slices of ``memory``
    (:class:`RpingMemory`). Each event method returns the :class:`Actions` it takes;
    :attr:`counters` counts them."""

    def __init__(self, memory):
        self.memory = memory
        self.qps = [_Qp() for _ in range(memory.num_qps)]
        self.counters = dict.fromkeys(COUNTERS, 0)

    def _recv_post(self, qp):
        return RecvPost(qp, WrKind.RECV, self.memory.recv_addr(qp), ADV_BYTES)

    def _go(self, qp, kind=WrKind.GO):
        return WorkRequest(qp, kind, WrOpcode.SEND, self.memory.send_addr(qp),
                           ADV_BYTES if kind == WrKind.GO else 0)

    def _end(self, qp, count, abort=False):
        self.qps[qp] = _Qp()
        self.counters[count] += 1
        return Actions(wr=self._go(qp, WrKind.ABORT) if abort else None, count=count)

    def opened(self, qp):
        """QP ``qp`` was opened (a new connection on rping's port)."""
        if not 0 <= qp < len(self.qps):
            return Actions()
        self.qps[qp] = _Qp(Phase.READ_ADV)
        return Actions(recv=self._recv_post(qp))

    def closed(self, qp):
        """QP ``qp``'s connection ended."""
        if not 0 <= qp < len(self.qps) or self.qps[qp].phase == Phase.OFF:
            return Actions()
        return self._end(qp, "ended")

    def recv_completion(self, qp, wr_id, status, length, adv, *, is_send=True):
        """A receive of QP ``qp`` completed: ``status`` (:class:`RecvStatus`), ``length`` bytes,
        ``adv`` the 16 bytes of the receive slot; ``is_send``: a SEND filled the buffer (not an
        RDMA WRITE with immediate)."""
        if not 0 <= qp < len(self.qps) or self.qps[qp].phase == Phase.OFF:
            return Actions()
        s = self.qps[qp]
        if status != RecvStatus.OK:
            return self._end(qp, "ended" if status == RecvStatus.FLUSHED else "bad_status")
        if wr_id != WrKind.RECV or not is_send or s.phase not in (Phase.READ_ADV, Phase.WRITE_ADV):
            return self._end(qp, "bad_event", abort=True)
        buf, rkey, size = unpack_adv(adv)
        writing = s.phase == Phase.WRITE_ADV
        if length != ADV_BYTES or not 1 <= size <= self.memory.max_size or \
                (writing and size < s.length):
            return self._end(qp, "bad_adv", abort=True)
        local = self.memory.buf_addr(qp)
        if writing:
            wr = WorkRequest(qp, WrKind.WRITE, WrOpcode.WRITE, local, s.length, buf)
            s.phase = Phase.WRITING
        else:
            wr = WorkRequest(qp, WrKind.READ, WrOpcode.READ, local, size, buf)
            s.phase, s.length = Phase.READING, size
        return Actions(recv=self._recv_post(qp), rkey=RkeyWrite(qp, rkey), wr=wr)

    def completion(self, qp, wr_id, status):
        """A work request of QP ``qp`` completed with ``status`` (:class:`CplStatus`)."""
        if not 0 <= qp < len(self.qps) or self.qps[qp].phase == Phase.OFF:
            return Actions()
        s = self.qps[qp]
        if status != CplStatus.OK:
            return self._end(qp, "ended" if status == CplStatus.FLUSHED else "bad_status")
        if wr_id == WrKind.GO and s.go_out:
            s.go_out = False
            return Actions()
        done = {WrKind.READ: Phase.READING, WrKind.WRITE: Phase.WRITING}
        if wr_id not in done or s.phase != done[wr_id] or s.go_out:
            return self._end(qp, "bad_event", abort=True)
        s.go_out = True
        if wr_id == WrKind.READ:
            s.phase = Phase.WRITE_ADV
            return Actions(wr=self._go(qp))
        s.phase = Phase.READ_ADV
        self.counters["pings"] += 1
        return Actions(wr=self._go(qp), count="pings")


# ---- the client ----

@dataclass
class MemoryRegion:
    """A registered buffer of the client: its address, R_Key and bytes (remote read and
    write allowed)."""
    addr: int
    rkey: int
    data: bytearray

    def covers(self, addr, rkey, length):
        return rkey == self.rkey and self.addr <= addr and addr + length <= self.addr + len(self.data)


@dataclass
class RpingClient:
    """What ``rping -c -S size -C count [-V]`` does on its connection, step by step:
    :meth:`connected` gives the first SEND (its 16 bytes), :meth:`received` takes each receive
    completion's length and gives the next SEND (or None), :meth:`remote_read` and
    :meth:`remote_write` are the server's READs and WRITEs of its registered buffers (None or
    False for an access its R_Keys do not allow). ``result``: None while it runs, ``"ok"``
    after ``count`` pings, else why it failed (rping's message). Its receive buffer is posted
    again at once after every receive (as rping's completion handler does).

    ``size`` may be any from 1 (rping's command line takes 26..65535); ``adv_size``, when given,
    is the size the client states in its advertisements instead of ``size`` (a client that
    lies, for the server's checks); ``write_adv_size`` likewise in its RDMA_WRITE_ADVs only."""
    size: int
    count: int
    validate: bool = True
    start: MemoryRegion = None
    rdma: MemoryRegion = None
    adv_size: int | None = None
    write_adv_size: int | None = None
    ping: int = 0
    state: str = "READ_ADV"
    result: str | None = None
    log: list = field(default_factory=list)

    def __post_init__(self):
        if self.size < 1:
            raise ValueError(f"size must be at least 1, not {self.size}")
        if self.start is None:
            self.start = MemoryRegion(0x7F00_0000_1000, 0x1234, bytearray(self.size))
        if self.rdma is None:
            self.rdma = MemoryRegion(0x7F00_0010_0000, 0x5678, bytearray(self.size))

    def _adv(self, region, size):
        return pack_adv(region.addr, region.rkey, self.size if size is None else size)

    def connected(self):
        """The SEND that starts an iteration: ``start_buf`` filled, its RDMA_READ_ADV."""
        self.state = "READ_ADV"
        self.start.data[:] = ping_data(self.ping, self.size)
        return self._adv(self.start, self.adv_size)

    def received(self, length):
        """A receive completed with ``length`` bytes: the next SEND, or None."""
        if self.result is not None:
            return None
        if length != ADV_BYTES:
            self.result = f"Received bogus data, size {length}"
            return None
        if self.state == "READ_ADV":
            self.state = "WRITE_ADV"
            size = self.adv_size if self.write_adv_size is None else self.write_adv_size
            return self._adv(self.rdma, size)
        if self.validate and self.start.data != self.rdma.data:
            self.result = "data mismatch!"
            return None
        self.log.append(bytes(self.rdma.data))
        self.ping += 1
        if self.count and self.ping == self.count:
            self.result = "ok"
            return None
        return self.connected()

    def fail(self, why):
        """Something else failed (a completion in error): the client stops."""
        if self.result is None:
            self.result = why

    def _region(self, addr, rkey, length):
        for r in (self.start, self.rdma):
            if r.covers(addr, rkey, length):
                return r
        return None

    def remote_read(self, addr, rkey, length):
        """The bytes an RDMA READ gets, or None (remote access error)."""
        r = self._region(addr, rkey, length)
        if r is None:
            return None
        return bytes(r.data[addr - r.addr:addr - r.addr + length])

    def remote_write(self, addr, rkey, data):
        """An RDMA WRITE of ``data``: False when refused (remote access error)."""
        r = self._region(addr, rkey, len(data))
        if r is None:
            return False
        r.data[addr - r.addr:addr - r.addr + len(data)] = data
        return True
