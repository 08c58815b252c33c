"""The traffic generator's test pattern: the byte string at local address ``a`` is a sequence of
32-bit big-endian words, the word at address ``4k`` holding ``k mod 2^32``. The generator puts
message number ``s`` at local address ``(s mod 64) << 26``, so every message of up to 64 MiB
in a run of 64 is distinct, and a payload read at any word-aligned offset is known without
memory."""

__all__ = ["pattern", "generator_address", "GENERATOR_SLOT_SHIFT"]

GENERATOR_SLOT_SHIFT = 26


def pattern(addr, length):
    """``length`` bytes of the test pattern from local byte address ``addr``."""
    if addr < 0 or length < 0:
        raise ValueError(f"address and length must be >= 0, not {addr}, {length}")
    first = addr >> 2
    words = -(-(addr + length) // 4) - first
    raw = b"".join(((first + k) & 0xFFFFFFFF).to_bytes(4, "big") for k in range(words))
    skip = addr & 3
    return raw[skip:skip + length]


def generator_address(seq):
    """Local address of the traffic generator's message number ``seq``."""
    return (seq % 64) << GENERATOR_SLOT_SHIFT
