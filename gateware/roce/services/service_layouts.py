"""Records every gateware service (the rping server, the SEND echo) holds: the events it takes
one at a time."""

from amaranth.lib import data, enum

__all__ = ["EvKind", "SERVICE_EVENT"]


class EvKind(enum.Enum, shape=2):
    """The kind of an event the server takes."""
    OPEN = 0
    CLOSE = 1
    RECV = 2        # a receive completion
    CPL = 3         # a work request's completion


#: An event as the server holds it while it decides: the QP, the work request ID, the status
#: (``ok``; ``flushed``: FLUSHED), a receive's length and whether a SEND filled its buffer.
SERVICE_EVENT = data.StructLayout({
    "kind": EvKind, "qp": 8, "wr_id": 32, "ok": 1, "flushed": 1, "length": 32, "is_send": 1,
})
