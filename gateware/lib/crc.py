"""The CRC-32 of IEEE 802.3 as GF(2) equations: the Ethernet FCS and the RoCEv2 ICRC.

:class:`Crc32` derives, from the catalog algorithm ``amaranth.lib.crc.catalog.CRC32_ETHERNET``,
the XOR equations of one step over any number of octets, and of advancing or rewinding the CRC
state over zero octets. ``amaranth.lib.crc.Processor`` only advances by whole ``data_width``
words and keeps its register private, so it can neither process the byte-granular last word of
a frame nor be pipelined; :class:`Crc32` gives the equations themselves (:meth:`Crc32.equations`,
:meth:`Crc32.zeros_equations`) for blocks that build their own XOR trees and pipelines, and
combinational steps (:meth:`Crc32.step`, :meth:`Crc32.zeros`) for the simple cases.

Users: the XGMII MAC (:mod:`rocegen.gateware.mac.xgmii`, 1..8 octets per step) and the ICRC
blocks (:mod:`rocegen.gateware.roce.icrc`, a whole beat per step, up to 64 octets).
"""

from functools import cache

from amaranth.hdl import Cat, Const, Value
from amaranth.lib.crc import Algorithm, catalog

__all__ = ["Crc32", "reflect"]


def reflect(value, width):
    """``value`` with its ``width`` low bits in reverse order."""
    return int(f"{value:0{width}b}"[::-1], 2)


def _check_count(nbytes, *, negative=False):
    if not isinstance(nbytes, int) or isinstance(nbytes, bool):
        raise TypeError(f"octet count must be an integer, not {nbytes!r}")
    if nbytes < 0 and not negative:
        raise ValueError(f"octet count must not be negative, not {nbytes}")


def _xor(terms):
    return Cat(*terms).xor() if terms else Const(0, 1)


class Crc32:
    """Parallel IEEE 802.3 CRC-32 (reflected polynomial 0xEDB88320) over any number of octets.

    The *state* is the CRC register bit-reflected (the convention of ``zlib.crc32`` before its
    final inversion): it starts at :attr:`INIT`; after all octets of a message it holds ``s`` and
    the CRC to send is ``~s`` with its least significant octet first on the wire. After a message
    *and* its correct CRC the state equals :attr:`RESIDUE`. Octet ``k`` of a data word is its bits
    ``8k .. 8k+7`` (lane order); octet 0 is processed first.

    The step over ``n`` octets is affine: ``next = A**n . state  XOR  D_n . data`` where ``A`` is
    the 32x32 matrix of one zero octet. ``A`` is invertible, so the state can also be *rewound*
    over zero octets (``A**-k``): the state before ``k`` trailing zero octets follows from the
    state after them. The ICRC blocks use that to end a packet on any byte of a wide beat.
    """

    ALGORITHM = catalog.CRC32_ETHERNET
    INIT = reflect(catalog.CRC32_ETHERNET.initial_crc, 32)
    RESIDUE = catalog.CRC32_ETHERNET(8).residue()
    #: The polynomial in the reflected (state) convention: 0xEDB88320.
    POLY = reflect(catalog.CRC32_ETHERNET.polynomial, 32)
    MASK = 0xFFFFFFFF

    @staticmethod
    def _algorithm(initial):
        a = Crc32.ALGORITHM
        assert a.crc_width == 32 and a.reflect_input and a.reflect_output
        return Algorithm(crc_width=32, polynomial=a.polynomial, initial_crc=initial,
                         reflect_input=True, reflect_output=True, xor_output=0)

    # ---- software ----

    @classmethod
    def step_int(cls, state, data, nbytes):
        """Software step: the state after the ``nbytes`` low octets of ``data`` (octet 0 first)."""
        _check_count(nbytes)
        if nbytes == 0:
            return state
        word = data & ((1 << (8 * nbytes)) - 1)
        return cls._algorithm(reflect(state, 32))(8 * nbytes).compute([word])

    @classmethod
    def zeros_int(cls, state, nbytes):
        """Software: the state after ``nbytes`` zero octets, or, for a negative ``nbytes``, the
        state that ``-nbytes`` zero octets would take to ``state``."""
        _check_count(nbytes, negative=True)
        if nbytes >= 0:
            return cls.step_int(state, 0, nbytes)
        # one zero bit forward is s' = (s >> 1) ^ (POLY if s & 1); POLY has bit 31 set and
        # s >> 1 has not, so bit 31 of s' tells which branch was taken
        for _ in range(-8 * nbytes):
            if state >> 31:
                state = (((state ^ cls.POLY) << 1) | 1) & cls.MASK
            else:
                state = (state << 1) & cls.MASK
        return state

    # ---- equations ----

    @classmethod
    def equations(cls, nbytes):
        """For each of the 32 state bits after a step over ``nbytes`` octets: the tuple of state
        bits and the tuple of data bits (``0 .. 8*nbytes-1``) whose XOR gives it."""
        _check_count(nbytes)
        return cls._equations(nbytes)

    @classmethod
    @cache
    def _equations(cls, nbytes):
        state_cols = [cls.step_int(1 << j, 0, nbytes) for j in range(32)]
        data_cols = [cls.step_int(0, 1 << j, nbytes) for j in range(8 * nbytes)]
        return tuple(
            (tuple(j for j in range(32) if (state_cols[j] >> i) & 1),
             tuple(j for j in range(8 * nbytes) if (data_cols[j] >> i) & 1))
            for i in range(32))

    @classmethod
    def zeros_equations(cls, nbytes):
        """For each of the 32 state bits after ``nbytes`` zero octets (rewound over ``-nbytes``
        zero octets when negative): the tuple of previous state bits whose XOR gives it."""
        _check_count(nbytes, negative=True)
        return cls._zeros_equations(nbytes)

    @classmethod
    @cache
    def _zeros_equations(cls, nbytes):
        cols = [cls.zeros_int(1 << j, nbytes) for j in range(32)]
        return tuple(tuple(j for j in range(32) if (cols[j] >> i) & 1) for i in range(32))

    # ---- gateware ----

    @classmethod
    def step(cls, state, data, nbytes):
        """Gateware step: a 32-bit Value, the state after the ``nbytes`` (a Python int) low octets
        of ``data``. Pure XOR trees, no registers."""
        _check_count(nbytes)
        state = Value.cast(state)
        data = Value.cast(data)
        if nbytes == 0:
            return state
        return Cat(*(_xor([state[j] for j in s_taps] + [data[j] for j in d_taps])
                     for s_taps, d_taps in cls.equations(nbytes)))

    @classmethod
    def zeros(cls, state, nbytes):
        """Gateware: ``state`` advanced over ``nbytes`` zero octets (rewound when negative)."""
        state = Value.cast(state)
        return Cat(*(_xor([state[j] for j in taps]) for taps in cls.zeros_equations(nbytes)))
