"""XGMII characters and the Ethernet CRC-32, shared by :class:`~.xgmii_tx.XgmiiTx` and
:class:`~.xgmii_rx.XgmiiRx`.

The 64-bit XGMII used here is single data rate: one 64-bit ``txd``/``rxd`` word and one 8-bit
``txc``/``rxc`` word per clock (156.25 MHz for 10GBASE-R, 390.625 MHz for 25GBASE-R). Lane ``j``
is ``d[8*j : 8*j+8]`` with control flag ``c[j]``; lane 0 goes first on the wire. A lane with
``c[j] == 1`` carries one of the control characters below, a lane with ``c[j] == 0`` a data octet.

CRC
---
:class:`Crc32` builds the parallel CRC-32 of IEEE 802.3 (``amaranth.lib.crc.catalog.CRC32_ETHERNET``)
for 1 to 8 octets per step. ``amaranth.lib.crc.Processor`` only advances by whole ``data_width``
words and keeps its register private, so it cannot process the byte-granular last word of a frame;
:class:`Crc32` instead derives the next-state XOR equations for each octet count from the catalog
algorithm with :meth:`amaranth.lib.crc.Parameters.compute` and takes the check value from
:meth:`amaranth.lib.crc.Parameters.residue`.
"""

from functools import cache

from amaranth.hdl import Cat, Const, Value
from amaranth.lib.crc import Algorithm, catalog

__all__ = [
    "IDLE", "START", "TERMINATE", "ERROR", "PREAMBLE", "SFD", "LANES",
    "IDLE_WORD", "IDLE_CTRL", "START_WORD", "START_CTRL",
    "MIN_FRAME", "MIN_DATA", "FCS_BYTES", "Crc32",
]

#: Idle control character /I/.
IDLE = 0x07
#: Start control character /S/ (replaces the first preamble octet).
START = 0xFB
#: Terminate control character /T/ (first octet after the FCS).
TERMINATE = 0xFD
#: Error control character /E/.
ERROR = 0xFE
#: Preamble octet.
PREAMBLE = 0x55
#: Start frame delimiter.
SFD = 0xD5

#: Octets per 64-bit XGMII word.
LANES = 8
#: Eight idle lanes.
IDLE_WORD = int.from_bytes(bytes([IDLE] * LANES), "little")
IDLE_CTRL = (1 << LANES) - 1
#: The start word: /S/ in lane 0, six preamble octets, the SFD in lane 7.
START_WORD = int.from_bytes(bytes([START] + [PREAMBLE] * 6 + [SFD]), "little")
START_CTRL = 0x01

#: Smallest frame on the wire, FCS included.
MIN_FRAME = 64
#: Smallest frame without its FCS: shorter frames are zero-padded to this length on transmit.
MIN_DATA = 60
#: Length of the frame check sequence.
FCS_BYTES = 4


def _reflect(value, width):
    return int(f"{value:0{width}b}"[::-1], 2)


class Crc32:
    """Parallel IEEE 802.3 CRC-32 over 1..8 octets per step.

    The *state* is the CRC register bit-reflected (the convention of ``zlib.crc32`` before its
    final inversion): it starts at :attr:`INIT`; after all octets of a frame it holds ``s`` and the
    FCS to send is ``~s`` with its least significant octet first on the wire. After a frame *and*
    its correct FCS the state equals :attr:`RESIDUE`.
    """

    ALGORITHM = catalog.CRC32_ETHERNET
    INIT = _reflect(catalog.CRC32_ETHERNET.initial_crc, 32)
    RESIDUE = catalog.CRC32_ETHERNET(8).residue()
    MASK = 0xFFFFFFFF

    @staticmethod
    def _algorithm(initial):
        a = Crc32.ALGORITHM
        assert a.crc_width == 32 and a.reflect_input and a.reflect_output
        return Algorithm(crc_width=32, polynomial=a.polynomial, initial_crc=initial,
                         reflect_input=True, reflect_output=True, xor_output=0)

    @classmethod
    def step_int(cls, state, data, nbytes):
        """Software step: the state after the ``nbytes`` low octets of ``data`` (octet 0 first)."""
        if nbytes == 0:
            return state
        word = data & ((1 << (8 * nbytes)) - 1)
        return cls._algorithm(_reflect(state, 32))(8 * nbytes).compute([word])

    @classmethod
    @cache
    def _equations(cls, nbytes):
        """For each state bit: the state bits and data bits whose XOR gives its next value."""
        state_cols = [cls.step_int(1 << j, 0, nbytes) for j in range(32)]
        data_cols = [cls.step_int(0, 1 << j, nbytes) for j in range(8 * nbytes)]
        return tuple(
            (tuple(j for j in range(32) if (state_cols[j] >> i) & 1),
             tuple(j for j in range(8 * nbytes) if (data_cols[j] >> i) & 1))
            for i in range(32))

    @classmethod
    def step(cls, state, data, nbytes):
        """Gateware step: a 32-bit Value, the state after the ``nbytes`` (a Python int, 0..8) low
        octets of ``data``. Pure XOR trees, no registers."""
        if not isinstance(nbytes, int) or not 0 <= nbytes <= LANES:
            raise ValueError(f"nbytes must be an integer from 0 to {LANES}, not {nbytes!r}")
        state = Value.cast(state)
        data = Value.cast(data)
        if nbytes == 0:
            return state
        bits = []
        for s_taps, d_taps in cls._equations(nbytes):
            terms = [state[j] for j in s_taps] + [data[j] for j in d_taps]
            bits.append(Cat(*terms).xor() if terms else Const(0, 1))
        return Cat(*bits)
