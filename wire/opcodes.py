"""The opcode catalogue: one row per BTH opcode of the reliable connection (RC) transport and the
CNP, as the project's wire notes (InfiniBand volume 1, Annex A17) define them, and the unreliable
datagram (UD) SEND opcodes that carry the communication manager's MADs to and from QP1.

Each :class:`Row` says what the opcode is -- its verb, its position in a message, whether it is a
request, a response or a notification -- which extension headers follow its BTH (in wire order,
as :class:`~rocegen.wire.headers.Header` objects of the one header table, so their lengths come
from there) and whether a payload may follow them. Everything else that knows about opcodes --
the gateware's predicates and ``Case`` tables, the models, the frame check, the fuzzer, the host
and the CLI -- asks this module, through the queries below, rather than writing codes down.

Supported rows
--------------
``Row.supported`` says whether the endpoint handles the opcode: every row of :data:`ROWS`. The
UD rows (:data:`UD_ROWS`) are not supported: the endpoint's RC datapath drops them; the
communication manager on QP1 takes them, apart from the datapath. They are in :data:`BY_CODE`
(so :func:`row`, :func:`name` and the ``has_*`` facts know them) but not in :data:`ROWS`, which
the queries below (:func:`codes`, :func:`opcode`, :data:`REQUESTS`...) and the datapath's
tables read. The atomics (0x12
ATOMIC_ACKNOWLEDGE, 0x13 COMPARE_SWAP, 0x14 FETCH_ADD) need an endpoint built with them (the
generator's ``atomics``); without it an atomic request is refused (NAK invalid request, as the
reserved RC codes are) and an ATOMIC_ACKNOWLEDGE dropped as a response nobody asked for.
Queries that describe the wire (:func:`is_request`, :data:`RESPONSES`) take every row; those
that describe what the endpoint does take ``supported=True``.

Adding an opcode means adding its row here (and its constant below) plus its behaviour.

The predicates in :func:`matches` work both on Python integers and on Amaranth values, so the
gateware builds its comparisons from the same rows (nothing here imports Amaranth).
"""

import enum
import functools
import operator
from dataclasses import dataclass

from rocegen.wire import headers as H
from rocegen.wire.verbs import WrOpcode

__all__ = [
    "Verb", "Position", "Role", "Row", "ROWS", "UD_ROWS", "BY_CODE", "TRANSPORT_RC", "TRANSPORT_UD",
    "TRANSPORT_CNP",
    "transport", "row", "name", "names", "codes", "opcode", "verb_opcodes", "message_opcodes",
    "matches", "is_request", "is_response", "has_reth", "has_imm", "has_aeth", "ext_length",
    "REQUESTS", "RESPONSES", "READ_RESPONSES",
    "OP_RC_SEND_FIRST", "OP_RC_SEND_MIDDLE", "OP_RC_SEND_LAST", "OP_RC_SEND_LAST_WITH_IMMEDIATE",
    "OP_RC_SEND_ONLY", "OP_RC_SEND_ONLY_WITH_IMMEDIATE",
    "OP_RC_RDMA_WRITE_FIRST", "OP_RC_RDMA_WRITE_MIDDLE", "OP_RC_RDMA_WRITE_LAST",
    "OP_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "OP_RC_RDMA_WRITE_ONLY",
    "OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "OP_RC_RDMA_READ_REQUEST",
    "OP_RC_RDMA_READ_RESPONSE_FIRST", "OP_RC_RDMA_READ_RESPONSE_MIDDLE",
    "OP_RC_RDMA_READ_RESPONSE_LAST", "OP_RC_RDMA_READ_RESPONSE_ONLY", "OP_RC_ACKNOWLEDGE",
    "OP_RC_ATOMIC_ACKNOWLEDGE", "OP_RC_COMPARE_SWAP", "OP_RC_FETCH_ADD", "OP_CNP",
    "OP_UD_SEND_ONLY", "OP_UD_SEND_ONLY_WITH_IMMEDIATE",
]


class Verb(enum.Enum):
    """What a packet does (one verb may take several opcodes: its positions and immediates)."""
    SEND = "SEND"
    RDMA_WRITE = "RDMA_WRITE"
    RDMA_READ = "RDMA_READ"                     # the READ request
    RDMA_READ_RESPONSE = "RDMA_READ_RESPONSE"
    ACKNOWLEDGE = "ACKNOWLEDGE"
    ATOMIC_ACKNOWLEDGE = "ATOMIC_ACKNOWLEDGE"
    COMPARE_SWAP = "COMPARE_SWAP"
    FETCH_ADD = "FETCH_ADD"
    CNP = "CNP"


class Position(enum.Enum):
    """A packet's place in its message; a verb of one packet (a READ request, an ACKNOWLEDGE,
    an atomic, a CNP) is ONLY."""
    FIRST = "FIRST"
    MIDDLE = "MIDDLE"
    LAST = "LAST"
    ONLY = "ONLY"


class Role(enum.Enum):
    """Who sends a packet: the requester (REQUEST), the responder (RESPONSE), or the receiver of
    congestion-marked packets (NOTIFICATION, the CNP)."""
    REQUEST = "REQUEST"
    RESPONSE = "RESPONSE"
    NOTIFICATION = "NOTIFICATION"


#: The BTH opcode's bits 7:5 (the transport): reliable connection, unreliable datagram,
#: congestion notification.
TRANSPORT_RC = 0b000
TRANSPORT_UD = 0b011
TRANSPORT_CNP = 0b100


def transport(code):
    """The transport bits (7:5) of a BTH opcode (an integer or an Amaranth value)."""
    return code >> 5 if isinstance(code, int) else code[5:8]


@dataclass(frozen=True)
class Row:
    """One BTH opcode: ``code``, its ``name`` in the specification, ``verb``, ``position``,
    ``role``, the extension ``headers`` after the BTH in wire order, whether a ``payload`` may
    follow them, and whether the endpoint ``supported`` it (see the module's notes)."""
    code: int
    name: str
    verb: Verb
    position: Position
    role: Role
    headers: tuple
    payload: bool
    supported: bool = True

    @property
    def is_request(self):
        return self.role is Role.REQUEST

    @property
    def is_response(self):
        return self.role is Role.RESPONSE

    @property
    def has_reth(self):
        return H.RETH in self.headers

    @property
    def has_imm(self):
        return H.IMMDT in self.headers

    @property
    def has_aeth(self):
        return H.AETH in self.headers

    @property
    def has_atomic_eth(self):
        return H.ATOMIC_ETH in self.headers

    @property
    def has_atomic_ack_eth(self):
        return H.ATOMIC_ACK_ETH in self.headers

    @property
    def ext_length(self):
        """Bytes of extension headers between the BTH and the payload."""
        return sum(h.length for h in self.headers)


_S, _W, _R, _RR = Verb.SEND, Verb.RDMA_WRITE, Verb.RDMA_READ, Verb.RDMA_READ_RESPONSE
_F, _M, _L, _O = Position.FIRST, Position.MIDDLE, Position.LAST, Position.ONLY
_REQ, _RSP = Role.REQUEST, Role.RESPONSE

#: The catalogue, in code order.
ROWS = (
    Row(0x00, "SEND_FIRST", _S, _F, _REQ, (), True),
    Row(0x01, "SEND_MIDDLE", _S, _M, _REQ, (), True),
    Row(0x02, "SEND_LAST", _S, _L, _REQ, (), True),
    Row(0x03, "SEND_LAST_WITH_IMMEDIATE", _S, _L, _REQ, (H.IMMDT,), True),
    Row(0x04, "SEND_ONLY", _S, _O, _REQ, (), True),
    Row(0x05, "SEND_ONLY_WITH_IMMEDIATE", _S, _O, _REQ, (H.IMMDT,), True),
    Row(0x06, "RDMA_WRITE_FIRST", _W, _F, _REQ, (H.RETH,), True),
    Row(0x07, "RDMA_WRITE_MIDDLE", _W, _M, _REQ, (), True),
    Row(0x08, "RDMA_WRITE_LAST", _W, _L, _REQ, (), True),
    Row(0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", _W, _L, _REQ, (H.IMMDT,), True),
    Row(0x0A, "RDMA_WRITE_ONLY", _W, _O, _REQ, (H.RETH,), True),
    Row(0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", _W, _O, _REQ, (H.RETH, H.IMMDT), True),
    Row(0x0C, "RDMA_READ_REQUEST", _R, _O, _REQ, (H.RETH,), False),
    Row(0x0D, "RDMA_READ_RESPONSE_FIRST", _RR, _F, _RSP, (H.AETH,), True),
    Row(0x0E, "RDMA_READ_RESPONSE_MIDDLE", _RR, _M, _RSP, (), True),
    Row(0x0F, "RDMA_READ_RESPONSE_LAST", _RR, _L, _RSP, (H.AETH,), True),
    Row(0x10, "RDMA_READ_RESPONSE_ONLY", _RR, _O, _RSP, (H.AETH,), True),
    Row(0x11, "ACKNOWLEDGE", Verb.ACKNOWLEDGE, _O, _RSP, (H.AETH,), False),
    Row(0x12, "ATOMIC_ACKNOWLEDGE", Verb.ATOMIC_ACKNOWLEDGE, _O, _RSP,
        (H.AETH, H.ATOMIC_ACK_ETH), False),
    Row(0x13, "COMPARE_SWAP", Verb.COMPARE_SWAP, _O, _REQ, (H.ATOMIC_ETH,), False),
    Row(0x14, "FETCH_ADD", Verb.FETCH_ADD, _O, _REQ, (H.ATOMIC_ETH,), False),
    Row(0x81, "CNP", Verb.CNP, _O, Role.NOTIFICATION, (H.CNP_PAYLOAD,), False),
)

#: The unreliable datagram SENDs (transport 011): a DETH after the BTH, an ImmDt after it on the
#: one with immediate, then the payload (a 256-byte MAD on QP1). A datagram is one packet, so
#: only the ONLY codes exist. Named ``UD_`` + the specification's name, as Wireshark and scapy
#: name them, so that every row's name is unique. Not supported by the datapath (see above).
UD_ROWS = (
    Row(0x64, "UD_SEND_ONLY", _S, _O, _REQ, (H.DETH,), True, supported=False),
    Row(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", _S, _O, _REQ, (H.DETH, H.IMMDT), True,
        supported=False),
)

#: Opcode -> its row (every row: :data:`ROWS` and :data:`UD_ROWS`).
BY_CODE = {r.code: r for r in ROWS + UD_ROWS}
_BY_NAME = {r.name: r for r in ROWS + UD_ROWS}
if len(BY_CODE) != len(ROWS + UD_ROWS) or len(_BY_NAME) != len(ROWS + UD_ROWS):
    raise AssertionError("opcode catalogue: a code or a name appears twice")


def row(code):
    """The :class:`Row` of BTH opcode ``code``, or None for a code the catalogue has not."""
    return BY_CODE.get(code)


def name(code):
    """The specification's name of an opcode, or ``"0xNN"`` for one the catalogue has not."""
    r = BY_CODE.get(code)
    return r.name if r is not None else f"0x{code:02x}"


def names():
    """Opcode -> name, every row of :data:`ROWS` (the RC rows and the CNP)."""
    return {r.code: r.name for r in ROWS}


def codes(**where):
    """The opcodes (ascending) of the rows of :data:`ROWS` (the RC rows and the CNP) whose
    attributes equal ``where``'s values, for example
    ``codes(verb=Verb.SEND)`` or ``codes(has_reth=True, supported=True)``."""
    return tuple(r.code for r in ROWS if all(getattr(r, k) == v for k, v in where.items()))


def opcode(verb, position, *, imm=False):
    """The supported opcode of ``verb`` at ``position`` (``imm``: the one with an ImmDt);
    ``KeyError`` if the catalogue has none, or more than one."""
    found = [r.code for r in ROWS if r.supported and r.verb is verb and r.position is position
             and r.has_imm == imm]
    if len(found) != 1:
        raise KeyError(f"{len(found)} supported opcodes for {verb.name} {position.name}"
                       f"{' with immediate' * imm}")
    return found[0]


def verb_opcodes(verb, *, imm=False):
    """``(FIRST, MIDDLE, LAST, ONLY)`` opcodes of a verb of several packets; with ``imm`` the
    LAST and ONLY are those with an ImmDt."""
    return tuple(opcode(verb, p, imm=imm and p in (Position.LAST, Position.ONLY))
                 for p in Position)


_WR_VERB = {WrOpcode.WRITE: Verb.RDMA_WRITE, WrOpcode.WRITE_IMM: Verb.RDMA_WRITE,
            WrOpcode.SEND: Verb.SEND, WrOpcode.SEND_IMM: Verb.SEND}


def message_opcodes(wr_opcode):
    """``(FIRST, MIDDLE, LAST, ONLY)`` opcodes of the packets of a work request that sends its
    payload (:class:`~rocegen.wire.verbs.WrOpcode` WRITE, WRITE_IMM, SEND, SEND_IMM)."""
    wr_opcode = WrOpcode(wr_opcode)
    if wr_opcode not in _WR_VERB:
        raise ValueError(f"a {wr_opcode.name} work request is not segmented into messages")
    return verb_opcodes(_WR_VERB[wr_opcode], imm=wr_opcode.has_imm)


def matches(value, codes):
    """``value`` (an integer or an Amaranth value of a BTH opcode) is one of ``codes``.

    A run of three or more consecutive codes is one range comparison (``value <= hi`` when it
    starts at 0, else ``(value >= lo) & (value <= hi)``); other codes are compared one by one and
    the comparisons or-ed in ascending order. Raises ``ValueError`` for an empty ``codes``.
    """
    codes = sorted(set(int(c) for c in codes))
    if not codes:
        raise ValueError("matches: no opcodes to match")
    lo, hi = codes[0], codes[-1]
    if len(codes) >= 3 and hi - lo + 1 == len(codes):
        return value <= hi if lo == 0 else (value >= lo) & (value <= hi)
    return functools.reduce(operator.or_, (value == c for c in codes))


#: The request opcodes, the responses and the READ responses (every row, supported or not).
REQUESTS = codes(role=Role.REQUEST)
RESPONSES = codes(role=Role.RESPONSE)
READ_RESPONSES = codes(verb=Verb.RDMA_READ_RESPONSE)


def is_request(code):
    """A BTH opcode (integer) a responder answers: an RC code that is not a response. That is
    a request row (SEND, WRITE, READ, atomic) or a reserved RC code, which it refuses."""
    return transport(code) == TRANSPORT_RC and code not in RESPONSES


def is_response(code):
    """A BTH opcode (integer) of a response: a READ response, ACKNOWLEDGE or ATOMIC
    ACKNOWLEDGE."""
    return code in RESPONSES


def _fact(attr):
    def fact(code):
        r = BY_CODE.get(code)
        return r is not None and getattr(r, attr)
    fact.__name__ = attr
    fact.__doc__ = f"The opcode (integer) is a row of the catalogue and ``{attr}``."
    return fact


has_reth = _fact("has_reth")
has_imm = _fact("has_imm")
has_aeth = _fact("has_aeth")


def ext_length(code):
    """Bytes of extension headers after the BTH of ``code`` (``KeyError`` if not a row)."""
    return BY_CODE[code].ext_length


def _code(name):
    return _BY_NAME[name].code


# The opcodes by name (RC: ``OP_RC_`` and the specification's name).
OP_RC_SEND_FIRST = _code("SEND_FIRST")
OP_RC_SEND_MIDDLE = _code("SEND_MIDDLE")
OP_RC_SEND_LAST = _code("SEND_LAST")
OP_RC_SEND_LAST_WITH_IMMEDIATE = _code("SEND_LAST_WITH_IMMEDIATE")
OP_RC_SEND_ONLY = _code("SEND_ONLY")
OP_RC_SEND_ONLY_WITH_IMMEDIATE = _code("SEND_ONLY_WITH_IMMEDIATE")
OP_RC_RDMA_WRITE_FIRST = _code("RDMA_WRITE_FIRST")
OP_RC_RDMA_WRITE_MIDDLE = _code("RDMA_WRITE_MIDDLE")
OP_RC_RDMA_WRITE_LAST = _code("RDMA_WRITE_LAST")
OP_RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = _code("RDMA_WRITE_LAST_WITH_IMMEDIATE")
OP_RC_RDMA_WRITE_ONLY = _code("RDMA_WRITE_ONLY")
OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = _code("RDMA_WRITE_ONLY_WITH_IMMEDIATE")
OP_RC_RDMA_READ_REQUEST = _code("RDMA_READ_REQUEST")
OP_RC_RDMA_READ_RESPONSE_FIRST = _code("RDMA_READ_RESPONSE_FIRST")
OP_RC_RDMA_READ_RESPONSE_MIDDLE = _code("RDMA_READ_RESPONSE_MIDDLE")
OP_RC_RDMA_READ_RESPONSE_LAST = _code("RDMA_READ_RESPONSE_LAST")
OP_RC_RDMA_READ_RESPONSE_ONLY = _code("RDMA_READ_RESPONSE_ONLY")
OP_RC_ACKNOWLEDGE = _code("ACKNOWLEDGE")
OP_RC_ATOMIC_ACKNOWLEDGE = _code("ATOMIC_ACKNOWLEDGE")
OP_RC_COMPARE_SWAP = _code("COMPARE_SWAP")
OP_RC_FETCH_ADD = _code("FETCH_ADD")
OP_CNP = _code("CNP")
# (UD: ``OP_UD_`` and the specification's name)
OP_UD_SEND_ONLY = _code("UD_SEND_ONLY")
OP_UD_SEND_ONLY_WITH_IMMEDIATE = _code("UD_SEND_ONLY_WITH_IMMEDIATE")
