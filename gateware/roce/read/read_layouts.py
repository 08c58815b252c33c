"""Sideband records of the RDMA READ requester: the endpoint pulls data from a peer's memory
(wire headers are in :mod:`rocegen.wire.headers`, the requester's other records in
:mod:`rocegen.gateware.roce.layouts`). :mod:`rocegen.sim.models.read.read_requester` states the
rules."""

from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import ACK_EVENT, INDEX_BITS, AtomicOp, CplStatus
from rocegen.gateware.roce.responder.resp_engine import SEQ_BITS
from rocegen.gateware.roce.responder.resp_layouts import LENGTH_BITS
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import NAK_PSN_SEQ, NAK_REM_OP, SYN_ACK

__all__ = ["MAX_RD_ATOMIC", "ReadVerdict", "READ_COUNTERS", "READ_ISSUE", "READ_ENTRY",
           "READ_VIEW", "READ_RESP_HEADER", "READ_INPUT", "READ_EVENT", "READ_DONE", "READ_REISSUE",
           "ReadLookupSignature", "READ_NAK_STATUS", "OP_READ_FIRST", "OP_READ_MIDDLE",
           "OP_READ_LAST", "OP_READ_ONLY", "OP_ATOMIC_ACK", "SYN_ACK", "NAK_PSN_SEQ", "NAK_REM_OP",
           "check_max_rd",
           "READ_LIMIT", "READ_HOLE", "READ_HOLES", "READ_NEXT_HOLE", "READ_TOUCH", "READ_EXPIRE",
           "READ_WAIT_CONFIG", "READ_STEP_BITS"]

#: Most READs a QP may have outstanding (``max_rd_atomic``; ConnectX offers 16).
MAX_RD_ATOMIC = 16

#: READ response opcodes (FIRST, MIDDLE, LAST, ONLY; AETH on all but MIDDLE).
OP_READ_FIRST, OP_READ_MIDDLE, OP_READ_LAST, OP_READ_ONLY = opc.verb_opcodes(opc.Verb.RDMA_READ_RESPONSE)
#: An atomic's answer.
OP_ATOMIC_ACK = opc.OP_RC_ATOMIC_ACKNOWLEDGE
# (the AETH syndromes the READ requester hands to the retry engine of its own, from
# rocegen.wire.roce: SYN_ACK for a response written, NAK_PSN_SEQ for a gap, NAK_REM_OP for any
# unexpected NAK code in a READ response's AETH, as in rxe)

#: The completion status of a READ whose place a NAK takes (through the retry engine, which
#: fails the QP with it): every error a READ ends with exists in
#: :class:`~rocegen.gateware.roce.layouts.CplStatus` (a gap's reissues running out of
#: ``retry_cnt``: RETRY_EXCEEDED; a local buffer outside local memory: LOCAL_LENGTH, checked
#: when queued; LOCAL_ALIGN never applies: a READ's local address may have any alignment).
READ_NAK_STATUS = {0x61: CplStatus.REMOTE_INVALID, 0x62: CplStatus.REMOTE_ACCESS,
                   0x63: CplStatus.REMOTE_OP}


def check_max_rd(max_rd_atomic):
    """``max_rd_atomic`` if it is 1..:data:`MAX_RD_ATOMIC`; else ``TypeError`` or
    ``ValueError`` naming the parameter."""
    if not isinstance(max_rd_atomic, int) or isinstance(max_rd_atomic, bool):
        raise TypeError(f"max_rd_atomic must be an integer, not {max_rd_atomic!r}")
    if not 1 <= max_rd_atomic <= MAX_RD_ATOMIC:
        raise ValueError(f"max_rd_atomic must be 1..{MAX_RD_ATOMIC}, not {max_rd_atomic}")
    return max_rd_atomic


class ReadVerdict(enum.Enum, shape=4):
    """What became of a READ response or an acknowledgement (the values of
    :data:`rocegen.sim.models.read.read_requester.VERDICTS`)."""
    GOOD = 0        # at the expected PSN and right: written, acknowledges its PSN
    GAP = 1         # after the expected PSN, not written: the head READ asked again from it with
                    # every later request (go-back-N), or nothing (inside the current hole; or
                    # after the front with no room for a hole: go-back-N from the front later)
    DUPLICATE = 2   # before the expected PSN: dropped
    UNKNOWN = 3     # no outstanding READ of the QP at or after the PSN: dropped
    OPCODE = 4      # wrong opcode for its place in the READ: dropped
    LENGTH = 5      # payload not PMTU (FIRST, MIDDLE) or not the rest (LAST, ONLY): dropped
    NAK = 6         # AETH not an ACK: the QP fails (the NAK goes to the retry engine)
    ACK_PASS = 7    # an acknowledgement that passes no READ with responses missing
    ACK_GAP = 8     # an acknowledgement past the expected PSN of an outstanding READ: a gap
    HOLE = 9        # after the expected (or the front) PSN, in its READ or the first of the next
                    # (written): the rest of that READ is a hole, asked for again alone
    AHEAD = 10      # the next response after a hole (its front): written
    ACK_HOLD = 11   # an acknowledgement past the expected PSN while a hole is open: dropped
                    # (one at or after the front: the responses after the front were lost)
    REASK = 12      # the hole timer expired with a hole open: the current hole asked for again
    IDLE = 13       # the hole timer expired with no READ outstanding (all done meanwhile): nothing
    STALL = 14      # the hole timer expired with READs outstanding and no hole open: a gap at the
                    # expected PSN (go-back-N, as ACK_GAP); again with no response since: the
                    # head READ asked for again from there by a request of its own


#: Pulse outputs, one per :class:`ReadVerdict`.
READ_COUNTERS = tuple(v.name.lower() for v in ReadVerdict)

#: The READs QP ``qp`` may have outstanding from now on (``limit``, 1..``max_rd_atomic``), as the
#: connection manager sets it from what the peer accepts.
READ_LIMIT = data.StructLayout({"qp": 8, "limit": 5})

#: A READ request the scheduler sends: a new READ (``new``: it is added to its QP's table), or
#: a reissue of the READ whose first PSN is ``first`` from PSN ``psn``.
READ_ISSUE = data.StructLayout({
    "qp": 8,
    "new": 1,
    "wr_id": 32,
    "local_addr": 32,          # byte address of the READ's first byte in local memory
    "length": 31,              # bytes, 0 .. 2^31-1
    "first": 24,               # the READ's first PSN
    "psn": 24,                 # the request's PSN (``first`` when new)
    "pmtu_log2": 4,            # 8 .. 12
    "va": 64,                  # the request's remote virtual address (the READ's first byte's
                               # when new)
    "atomic": AtomicOp,        # an atomic (FETCH_ADD, COMPARE_SWAP): one PSN, 8 bytes, answered
                               # by an ATOMIC_ACKNOWLEDGE; NONE for a READ
    "gen": 1,                  # the traffic generator's (its atomics' operands are made, not read)
})

#: An outstanding READ, as the table keeps it.
READ_ENTRY = data.StructLayout({
    "wr_id": 32,
    "local_addr": 32,
    "length": 31,
    "first": 24,
    "last_idx": INDEX_BITS,    # PSNs it spans - 1
    "pmtu_log2": 4,
    "va": 64,                  # remote virtual address of its first byte
    "atomic": AtomicOp,        # an atomic's operation (NONE for a READ)
    "gen": 1,                  # the traffic generator's
})

#: Holes a QP keeps queued after its current one (the model's ``HOLE_QUEUE``).
READ_HOLES = 8

#: A QP's holes: the current one is the rest of the head READ from its expected PSN (asked for
#: again by a request that starts at the head READ's index ``hs``); later ones wait in a queue
#: (the table's); the responses after them are placed up to the *front*, ``fcnt`` PSNs into the
#: front READ (the table keeps which READ that is). ``lost``: responses after the front were
#: lost too; ``msn``: the MSN of the latest response with an AETH placed after the holes;
#: ``fresh``: original responses of the head READ may still come (the first hole opened inside
#: it, nothing after it came since); ``asked``: the hole timer asked for the current hole again,
#: with no progress since; ``redo``: the queued holes whose responses came while the current one
#: waited (each expires the hole timer when it becomes the current one).
READ_HOLE = data.StructLayout({
    "hs": INDEX_BITS,
    "fcnt": INDEX_BITS,
    "lost": 1,
    "msn": 24,
    "fresh": 1,
    "asked": 1,
    "redo": 4,
})

#: The oldest hole queued after the current one: the index in its READ where it starts, its
#: PSN, and how many READs after the head its READ is.
READ_NEXT_HOLE = data.StructLayout({"idx": INDEX_BITS, "psn": 24, "dist": 5})

#: What the table shows of a QP: whether it has an outstanding READ, the oldest one (the head),
#: the PSNs of it received (``cnt``: its expected PSN is ``first + cnt``), the index of the
#: latest request sent from inside it (``rs``, 0: none) and the newest READ's last PSN; whether
#: holes are open (``open``), their state (``hole``), the holes queued (``qn``) and the oldest
#: of them (``nxt``); the *second* READ (``has2``, ``entry2``, ``rs2``): with holes open the
#: front READ (``has2`` 0: every READ after the holes is in), else the READ after the head;
#: ``fdist``: the READs before the front (with holes); the *third* (``has3``, ``entry3``): the
#: READ after the front, with holes open.
READ_VIEW = data.StructLayout({
    "has": 1,
    "entry": READ_ENTRY,
    "cnt": INDEX_BITS,
    "rs": INDEX_BITS,
    "tail_last": 24,
    "open": 1,
    "hole": READ_HOLE,
    "qn": 4,
    "nxt": READ_NEXT_HOLE,
    "has2": 1,
    "entry2": READ_ENTRY,
    "rs2": INDEX_BITS,
    "fdist": 5,
    "has3": 1,
    "entry3": READ_ENTRY,
})

#: A READ response's headers, one per datagram, from the receive path: the QP index (DestQP
#: looked up, state and source checked), the BTH opcode and PSN, the AETH (zero on MIDDLE), the
#: payload bytes (without the pad) and the bytes before the payload.
READ_RESP_HEADER = data.StructLayout({
    "qp": 8,
    "opcode": 8,
    "psn": 24,
    "syndrome": 8,
    "msn": 24,
    "length": LENGTH_BITS,
    "skip": 7,
})

#: Bits of the READ timer's step (:data:`READ_WAIT_CONFIG`).
READ_STEP_BITS = 24

#: The READ timer's step at run time: ``step`` cycles (a QP expires after 4 to 5 steps of
#: silence; 0: never).
READ_WAIT_CONFIG = data.StructLayout({"step": READ_STEP_BITS})

#: A QP's hole timer restarts (a response, or ``expiry``: an expiry of it, was decided), or
#: (``poke``) expires at once.
READ_TOUCH = data.StructLayout({"qp": 8, "poke": 1, "expiry": 1})

#: A QP's hole timer expired: by a poke (``poke``), and (``again``) with no response since its
#: last expiry.
READ_EXPIRE = data.StructLayout({"qp": 8, "poke": 1, "again": 1})

#: What the READ placement's intake takes: a response's headers, an acknowledgement
#: (``is_ack``) or the expiry of a QP's hole timer (``is_timer``, the QP in ``h.qp``;
#: ``poked``: by a poke, not by silence; ``again``: no response since its last expiry).
READ_INPUT = data.StructLayout({"is_ack": 1, "is_timer": 1, "poked": 1, "again": 1,
                                "h": READ_RESP_HEADER})

#: An event waiting for the payload writes before it: the acknowledgement for the retry engine
#: (none when ``quiet``), the READs it completes (``ndone``), whether it asks for a reissue
#: (``gap``: ``offset`` bytes into the head READ, ``rest`` bytes left, from remote address
#: ``va``; ``send``: sent by the requester itself), and the count of responses placed it waits
#: for.
READ_EVENT = data.StructLayout({
    "ack": ACK_EVENT,
    "quiet": 1,
    "ndone": 5,
    "gap": 1,
    "send": 1,
    "wr_id": 32,
    "offset": 31,
    "rest": 31,
    "va": 64,
    "seq": SEQ_BITS,
    "atomic": AtomicOp,        # the READ asked again for is an atomic (sent again whole)
    "local_addr": 32,          # its local address (an atomic's operands)
    "gen": 1,                  # the traffic generator's (an atomic's operands made again)
})

#: A READ of QP ``qp`` whose responses are all written (one record per READ).
READ_DONE = data.StructLayout({"qp": 8})

#: A READ to ask again for the rest of: from PSN ``psn``, ``offset`` bytes into it (remote and
#: local addresses advanced by as much), ``length`` bytes left, from remote virtual address
#: ``va``. ``send``: the READ requester sends this request itself (a selective reissue: the
#: QP's later requests are not sent again); else the retry engine's rewind sends it (with every
#: later request of the QP). An atomic (``atomic``) is sent again whole, its operands read
#: again at ``local_addr``, or with ``gen`` (the traffic generator's) made again from its
#: ``wr_id`` and the generator's ``imm``, as the first time.
READ_REISSUE = data.StructLayout({"qp": 8, "wr_id": 32, "psn": 24, "offset": 31, "length": 31,
                                  "va": 64, "send": 1, "atomic": AtomicOp, "local_addr": 32,
                                  "gen": 1})


class ReadLookupSignature(wiring.Signature):
    """The READ table's lookup port, seen from the user (the placement's decision stage):
    ``valid``/``qp`` in cycle t, ``view`` of that QP in cycle t+1, and in that same cycle what
    the input did to the QP's READs: ``advance`` (the head READ's expected response came),
    ``retire`` (that response was its last: it leaves the table), ``close`` (the current hole
    is filled: the READs before the oldest queued hole leave and its READ is the head, from the
    hole's index; with none queued, the READs before the front leave and the front READ is the
    head with the front's count), ``hole_we`` (the QP's hole state is ``hole`` from now on,
    open, its front ``fstep`` READs after the front before -- the head when none was open),
    ``push`` (the rest of the front READ from the front's count is a hole, queued with PSN
    ``push_psn``)."""

    def __init__(self):
        super().__init__({
            "valid": Out(1),
            "qp": Out(8),
            "view": In(READ_VIEW),
            "advance": Out(1),
            "retire": Out(1),
            "close": Out(1),
            "hole_we": Out(1),
            "hole": Out(READ_HOLE),
            "fstep": Out(2),
            "push": Out(1),
            "push_psn": Out(24),
        })
