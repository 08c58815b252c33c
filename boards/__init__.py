"""Board targets: vendor-specific top levels around the portable core, and their Vivado builds.

``BOARDS`` maps each target's name to its :class:`~rocegen.boards.base.Board`;
``rocegen boards`` lists them and ``rocegen build --board NAME`` writes a build folder for one.
Vendor IP and primitives (MACs, DDR4 memory controller, AXI clock converter, clock buffers)
appear only in this package; a board file holds its pins, the placement of its MAC and what its
LEDs show, and the composition every card shares is :mod:`rocegen.boards.card`. The portable
core and the portable part of the shell around it are in :mod:`rocegen.gateware`.
"""

from rocegen.boards.au55c import Au55cCmac
from rocegen.boards.au250 import Au250Cmac
from rocegen.boards.base import RETRANSMIT_MEMORIES, Board, write_build
from rocegen.boards.vcu118 import Vcu118Cmac, Vcu118Xxv

__all__ = ["BOARDS", "Board", "RETRANSMIT_MEMORIES", "get_board", "write_build"]

#: Every board target, by name.
BOARDS = {b.name: b for b in (Vcu118Cmac(), Vcu118Xxv(25), Vcu118Xxv(10), Au250Cmac(),
                               Au55cCmac())}


def get_board(name):
    """The board target called ``name``; :exc:`ValueError` naming the known ones otherwise."""
    try:
        return BOARDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"--board: unknown board {name!r}; known boards: "
                         f"{', '.join(BOARDS)}") from None
