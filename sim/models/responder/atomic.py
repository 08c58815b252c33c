"""Reference model of the RDMA atomic operations (COMPARE_SWAP, FETCH_ADD), from the wire notes
(IBTA volume 1, 9.4.5 and 9.7.5.1.6): what one request does to memory, which requests are refused
before they touch it, and the store of results a responder answers duplicates from.

Plain Python, no simulator: the NIC model executes the atomics of its peer with it, and the
endpoint's tests take it as their scoreboard.

* **Operands:** the AtomicETH's ``swap_add`` and ``compare`` (big-endian on the wire). The target
  is the 8 bytes at ``va``, which must be a multiple of 8 (:data:`ATOMIC_BYTES`).
* **Byte order in memory:** a parameter (``"little"`` or ``"big"``), the order the 64-bit
  value is read and written in. A host CPU of the x86 or Arm kind reads a counter in
  little-endian; the wire operands are big-endian whatever the memory's order.
* **COMPARE_SWAP:** if the value equals ``compare``, ``swap_add`` replaces it. **FETCH_ADD:**
  ``swap_add`` is added to it modulo 2**64. Both answer the value before the operation.
* **Duplicates:** a request whose PSN a responder executed already is not executed again; the
  original value comes from :class:`AtomicResults`, the last results of the QP (as many as its
  ``max_dest_rd_atomic``: IBTA keeps that many, and so does rxe).
"""

from collections import OrderedDict
from dataclasses import dataclass

from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import ATOMIC_BYTES, BYTE_ORDERS

__all__ = ["ATOMIC_BYTES", "BYTE_ORDERS", "AtomicRequest", "AtomicResults", "apply", "execute",
           "misaligned", "load", "store"]

_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class AtomicRequest:
    """One atomic request as its AtomicETH gives it: ``opcode`` (0x13 COMPARE_SWAP or 0x14
    FETCH_ADD), the target ``va`` and ``rkey``, the operands."""
    opcode: int
    va: int
    rkey: int
    swap_add: int
    compare: int = 0

    def __post_init__(self):
        if self.opcode not in (opc.OP_RC_COMPARE_SWAP, opc.OP_RC_FETCH_ADD):
            raise ValueError(f"not an atomic opcode: {opc.name(self.opcode)}")
        for f, bits in (("va", 64), ("rkey", 32), ("swap_add", 64), ("compare", 64)):
            v = getattr(self, f)
            if not isinstance(v, int) or not 0 <= v < 1 << bits:
                raise ValueError(f"{f} must be a {bits}-bit number, not {v!r}")

    @classmethod
    def from_eth(cls, opcode, eth):
        """From the fields of an unpacked AtomicETH (``wire.headers.ATOMIC_ETH.unpack``)."""
        return cls(opcode, eth["va"], eth["rkey"], eth["swap_add"], eth["compare"])


def misaligned(va):
    """``va`` is not a multiple of :data:`ATOMIC_BYTES` (NAK invalid request)."""
    return va % ATOMIC_BYTES != 0


def apply(opcode, old, swap_add, compare=0):
    """The value that replaces ``old`` (64-bit) after the atomic ``opcode``."""
    if opcode == opc.OP_RC_FETCH_ADD:
        return (old + swap_add) & _MASK
    if opcode == opc.OP_RC_COMPARE_SWAP:
        return swap_add if old == compare else old
    raise ValueError(f"not an atomic opcode: {opc.name(opcode)}")


def _order(byteorder):
    if byteorder not in BYTE_ORDERS:
        raise ValueError(f"byte order must be one of {BYTE_ORDERS}, not {byteorder!r}")
    return byteorder


def load(buf, offset, byteorder):
    """The 64-bit value at ``buf[offset:offset + 8]`` in ``byteorder``."""
    return int.from_bytes(buf[offset:offset + ATOMIC_BYTES], _order(byteorder))


def store(buf, offset, value, byteorder):
    """Write the 64-bit ``value`` at ``buf[offset:offset + 8]`` in ``byteorder``."""
    buf[offset:offset + ATOMIC_BYTES] = value.to_bytes(ATOMIC_BYTES, _order(byteorder))


def execute(buf, offset, request, byteorder):
    """Execute ``request`` (:class:`AtomicRequest`) on the 8 bytes of ``buf`` at ``offset``
    (the caller has checked the address, the R_Key and the range); returns the original value."""
    old = load(buf, offset, byteorder)
    store(buf, offset, apply(request.opcode, old, request.swap_add, request.compare), byteorder)
    return old


class AtomicResults:
    """The results of the last ``depth`` atomics a QP executed, by their wire PSN: what a
    duplicate is answered with. A PSN executed again (after the 24-bit PSN space wrapped)
    replaces its older result."""

    def __init__(self, depth):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        self.depth = depth
        self._by_psn = OrderedDict()

    def put(self, psn, request, original):
        """Keep the ``original`` value ``request`` at ``psn`` returned; the oldest result goes
        when more than ``depth`` are kept."""
        self._by_psn.pop(psn, None)
        self._by_psn[psn] = (request, original)
        while len(self._by_psn) > self.depth:
            self._by_psn.popitem(last=False)

    def get(self, psn, request=None):
        """The original value kept for ``psn``, or None when there is none (or, given
        ``request``, when the one kept was not that request: a duplicate must repeat it)."""
        kept = self._by_psn.get(psn)
        if kept is None or (request is not None and kept[0] != request):
            return None
        return kept[1]

    def __len__(self):
        return len(self._by_psn)

    def clear(self):
        self._by_psn.clear()
