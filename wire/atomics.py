"""Wire facts of the RDMA atomics (IBTA volume 1, 9.4.5): the size and alignment of their target
and the byte orders a 64-bit value can have in memory. The operands and the original value are
big-endian on the wire (AtomicETH, AtomicAckETH: :mod:`rocegen.wire.headers`), whatever the
memory's order."""

__all__ = ["ATOMIC_BYTES", "BYTE_ORDERS", "ATOMIC_OPERAND_BYTES", "ATOMIC_VERBS"]

#: Bytes an atomic reads and writes, and the alignment of its address.
ATOMIC_BYTES = 8
#: The byte orders of the 64-bit value in memory: ``"little"`` (what a host CPU of the x86 or Arm
#: kind reads as a counter) or ``"big"`` (the wire's).
BYTE_ORDERS = ("little", "big")

#: Bytes of an atomic work request's operands in the requester's local memory: ``swap_add``
#: (the value swapped in, or added), then ``compare``, each 8 bytes in the memory's byte order;
#: the original value the answer brings replaces the first 8.
ATOMIC_OPERAND_BYTES = 2 * ATOMIC_BYTES
#: The atomic verbs a requester posts (the names the host agent, the NIC model and the CLI use):
#: FETCH_ADD adds its operand to the target; COMPARE_SWAP writes its swap operand there when the
#: target equals its compare operand. Both complete with the target's original value.
ATOMIC_VERBS = ("FETCH_ADD", "COMPARE_SWAP")
