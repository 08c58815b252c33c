"""Records of the rping server (:class:`~rocegen.gateware.roce.services.rping_server.RpingServer`)
and client (:class:`~rocegen.gateware.roce.services.rping_client.RpingClient`): what the server
keeps per QP (its ports' layouts are the QP table's ``RKEY_WRITE`` and every service's
own, ``service_events``). ``rocegen.sim.models.services.rping`` and
``rocegen.sim.models.services.rping_client`` state the rules."""

from amaranth.lib import data, enum

__all__ = ["ADV_BYTES", "Phase", "WrKind", "RPING_QP", "PING_DIGITS", "LETTERS", "ClientPhase",
           "ClientKind", "RPING_TEXT"]

#: ``sizeof(struct rping_rdma_info)``: buf (u64), rkey (u32), size (u32), big-endian.
ADV_BYTES = 16

class Phase(enum.Enum, shape=3):
    """Where a QP's service is (the model's ``Phase``)."""
    OFF = 0         # not opened, closed, or ended
    READ_ADV = 1    # waiting for RDMA_READ_ADV
    READING = 2     # its READ outstanding
    WRITE_ADV = 3   # waiting for RDMA_WRITE_ADV
    WRITING = 4     # its WRITE outstanding


class WrKind(enum.Enum, shape=3):
    """The work request ID of each request the server posts (the model's ``WrKind``)."""
    RECV = 0
    READ = 1
    GO = 2
    WRITE = 3
    ABORT = 4


#: A QP's service: its phase, whether a go-ahead SEND is outstanding, the ping's length.
RPING_QP = data.StructLayout({"phase": Phase, "go_out": 1, "length": 31})


# ---- the client (:class:`~rocegen.gateware.roce.services.rping_client.RpingClient`) ----

#: Decimal digits of a ping's number (``rping -C`` at most 99999).
PING_DIGITS = 5
#: Letters of the ping pattern: ``A`` (65) to ``z`` (122).
LETTERS = 58


class ClientPhase(enum.Enum, shape=2):
    """Where the client's connection is (the model's ``ClientPhase``)."""
    OFF = 0
    READ_ADV = 1    # RDMA_READ_ADV sent: waiting for the go-ahead after the server's READ
    WRITE_ADV = 2   # RDMA_WRITE_ADV sent: the server's WRITE, then its go-ahead


class ClientKind(enum.Enum, shape=2):
    """The work request ID of each request the client posts (the model's ``ClientKind``)."""
    RECV = 0
    READ_ADV = 1
    WRITE_ADV = 2


#: What a ping's text depends on: its number in BCD (``digits[0]`` the units), the number of
#: digits ``nd`` (1..5), and ``start``, the letter index (0 = ``A``) its letters begin with
#: (the ping's number mod 58).
RPING_TEXT = data.StructLayout({
    "digits": data.ArrayLayout(4, PING_DIGITS), "nd": 3, "start": 6,
})
