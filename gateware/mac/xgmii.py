"""XGMII characters and the Ethernet CRC-32, shared by :class:`~.xgmii_tx.XgmiiTx` and
:class:`~.xgmii_rx.XgmiiRx`.

The 64-bit XGMII used here is single data rate: one 64-bit ``txd``/``rxd`` word and one 8-bit
``txc``/``rxc`` word per clock (156.25 MHz for 10GBASE-R, 390.625 MHz for 25GBASE-R). Lane ``j``
is ``d[8*j : 8*j+8]`` with control flag ``c[j]``; lane 0 goes first on the wire. A lane with
``c[j] == 1`` carries one of the control characters below, a lane with ``c[j] == 0`` a data octet.

CRC
---
The MAC steps the parallel CRC-32 of IEEE 802.3 over 1 to 8 octets per word with
:class:`~rocegen.gateware.lib.crc.Crc32` (re-exported here), which derives the next-state XOR equations
for any octet count from ``amaranth.lib.crc.catalog.CRC32_ETHERNET``.
"""

from rocegen.gateware.lib.crc import Crc32

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
