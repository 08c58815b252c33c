"""The connection manager's 64-byte datagram (UDP port 17185), as existing host tools speak it.

The byte layout is the ``CM`` header of :mod:`rocegen.wire.headers`. :func:`pack` /
:func:`unpack` convert all fields by name; :func:`request` builds a request, :func:`traffic` a
test-traffic datagram; :func:`pmtu_code` and :func:`retry_byte` encode the extension fields.

Additions of an FPGA with the RC responder, in bytes the existing tools send and read as
zero (so those tools work unchanged):

* the memory region a host may write: in an ACK of OPEN_QP, SEND_QP_INFO or MODIFY_QP_RTS,
  ``loc_rkey`` is the QP's R_Key, ``loc_vaddr`` the region's base (the virtual address a
  requester uses is the FPGA's local byte address) and ``dma_length`` (bytes 52-55) the region's
  length in bytes; all zero from an FPGA without the responder (:func:`region`);
* the responder's RDMA atomics: in those ACKs, ``tx_atomic`` (byte 51 bits 6-5) is 1 or 2 when
  the FPGA executes (and issues) atomics, with its memory's 64-bit values little- or
  big-endian (:data:`ATOMIC_CAPS`, :func:`atomic_caps`); 0 otherwise;
* :data:`REQ_QUERY` (``req_type`` 5), which the existing tools never send: the FPGA answers ACK
  with the counters of its pattern sink in bytes 52-63 (:data:`QUERY_REPLY`: bytes checked
  against the test pattern of their local address, and bytes found wrong; 48 bits each, never
  cleared, and stopping short of overflowing, so a host takes the difference of two queries). An FPGA without
  the sink drops it as an unknown request (no reply).

And one of every peer that does RDMA READ, in bytes 56-57 of OPEN_QP and SEND_QP_INFO requests
and of their ACKs (:data:`READ_DEPTHS`, :func:`read_depths`, :func:`with_read_depths`):
``rd_atomic``, the READs the sender may have outstanding towards its peer at once (its
``max_rd_atomic``), and ``rd_depth``, the READs it accepts from its peer at once (its
``max_dest_rd_atomic``). Zero: not stated (the existing tools); an FPGA then allows itself one
READ outstanding on the QP, what any responder accepts.
"""

from rocegen.wire.headers import CM, Header
from rocegen.wire.roce import PMTUS

__all__ = [
    "CM_PORT", "REPLY_PORT", "DATAGRAM_BYTES",
    "REQ_NULL", "REQ_OPEN_QP", "REQ_SEND_QP_INFO", "REQ_MODIFY_QP_RTS", "REQ_CLOSE_QP",
    "REQ_QUERY", "REQ_ERROR", "REGION_REQUESTS",
    "ACK_ACK", "ACK_NO_QP", "ACK_NAK", "ACK_ERROR", "PMTU_BYTES", "QUERY_REPLY", "COUNT_BITS",
    "READ_DEPTHS", "READ_DEPTH_MAX",
    "pack", "unpack", "request", "traffic", "pmtu_code", "retry_byte", "region", "query_counts",
    "read_depths", "with_read_depths", "QPN_BASE", "UDP_SPORT_BASE", "COUNTERS", "TX_ATOMIC",
    "ATOMIC_SLOT_SHIFT", "ATOMIC_CAPS", "atomic_caps",
]

#: UDP port the connection manager listens on.
CM_PORT = 17185
#: UDP source port of its replies.
REPLY_PORT = 0x8765
#: Length of every datagram, request or reply.
DATAGRAM_BYTES = CM.length
#: The QP numbers an FPGA hands out (``loc_qpn`` of its OPEN_QP ACK): QP ``k`` is
#: ``QPN_BASE + k``.
QPN_BASE = 256
#: The FPGA's QP ``k`` sends its RoCEv2 packets from UDP source port ``UDP_SPORT_BASE | k``.
UDP_SPORT_BASE = 0xC000
#: What a connection manager counts of the datagrams it takes and answers (the gateware's counter
#: pulses, in this order, and the reference model's counters).
COUNTERS = ("rx_requests", "replies", "drop_length", "drop_unknown", "drop_ip", "nak_illegal",
            "nak_owner", "nak_not_allowed", "no_qp", "drop_gen")

REQ_NULL = 0
REQ_OPEN_QP = 1
REQ_SEND_QP_INFO = 2
REQ_MODIFY_QP_RTS = 3
REQ_CLOSE_QP = 4
#: Asks for the pattern sink's counters (an FPGA with the responder's pattern sink).
REQ_QUERY = 5
REQ_ERROR = 7

#: Requests whose ACK names the QP's memory region (an FPGA with the responder).
REGION_REQUESTS = (REQ_OPEN_QP, REQ_SEND_QP_INFO, REQ_MODIFY_QP_RTS)

ACK_ACK = 1
ACK_NO_QP = 2
ACK_NAK = 3
ACK_ERROR = 7

#: Path MTU code of byte 1 -> bytes (0 is "the default").
PMTU_BYTES = dict(enumerate(PMTUS, start=1))

#: Bits of each pattern sink counter in a QUERY reply.
COUNT_BITS = 48
#: A QUERY reply: the 52 bytes every reply has (``head``, the ``CM`` fields up to
#: ``listening_port`` and byte 51), then the pattern sink's counters in place of the
#: test-traffic fields: bytes 52-57 ``checked`` (bytes compared with the test pattern of their
#: local address), bytes 58-63 ``wrong`` (bytes that differed), big-endian.
QUERY_REPLY = Header("cm_query", [("head", 8 * 52), ("checked", COUNT_BITS),
                                  ("wrong", COUNT_BITS)])

#: The READ depths of an OPEN_QP or SEND_QP_INFO request or of its ACK, in test-traffic bytes
#: the existing tools leave zero in those datagrams: byte 56 ``rd_atomic`` (READs the sender
#: may have outstanding towards its peer), byte 57 ``rd_depth`` (READs it accepts from its peer
#: at once); 0: not stated.
READ_DEPTHS = Header("cm_reads", [("head", 8 * 56), ("rd_atomic", 8), ("rd_depth", 8),
                                  ("tail", 8 * 6)])
#: Largest depth the bytes hold (a larger one is stated as this).
READ_DEPTH_MAX = 255


def pack(**fields):
    """Field values (names of the ``CM`` header; missing ones are zero) -> 64 ``bytes``."""
    return CM.pack(**fields)


def unpack(raw):
    """64 ``bytes`` -> ``dict`` of every field."""
    if len(raw) != DATAGRAM_BYTES:
        raise ValueError(f"a connection-manager datagram is {DATAGRAM_BYTES} bytes, not {len(raw)}")
    return CM.unpack(raw)


def request(req_type, **fields):
    """A request datagram: ``info_valid`` set, ``req_type`` and the given fields."""
    return pack(info_valid=1, req_type=req_type, **fields)


def traffic(rem_qpn, dma_length, n_transfers, frequency=0, *, write=True, imm=False, start=True,
            window_log2=0, read=False, atomic=None, **fields):
    """A test-traffic datagram for the FPGA QP ``rem_qpn``; ``window_log2`` (byte 29, an
    extension): message ``s`` goes to remote offset ``(s * dma_length) mod 2^window_log2`` (0: all
    at offset 0). ``read`` (byte 51 bit 4, an extension): the messages are RDMA READs of the
    peer's region at those offsets, into the FPGA's local memory at the same offsets (``write``
    and ``imm`` ignored). ``atomic`` (``"FETCH_ADD"`` or ``"COMPARE_SWAP"``, byte 51 bits 6-5,
    an extension, :data:`TX_ATOMIC`): the messages are atomics on the 8 bytes at those offsets
    (``dma_length`` should then be 8), as :data:`TX_ATOMIC` says."""
    if atomic is not None and atomic not in TX_ATOMIC:
        raise ValueError(f"atomic must be None or one of {', '.join(TX_ATOMIC)}, not {atomic!r}")
    return pack(txmeta_valid=1, start=int(start), is_imm=int(imm), tx_type=int(write),
                tx_read=int(read), tx_atomic=TX_ATOMIC.get(atomic, 0), rem_qpn=rem_qpn,
                dma_length=dma_length, n_transfers=n_transfers, frequency=frequency,
                window_log2=window_log2, **fields)


#: ``tx_atomic`` of a test-traffic datagram (byte 51 bits 6-5; 0: no atomics): message ``s`` of
#: a FETCH_ADD run adds 1 to its target; message ``s`` of a COMPARE_SWAP run swaps in ``s + 1``
#: where it finds ``s`` (so a run on one target that starts at 0 counts it up to ``n_transfers``).
#: The original value of message ``s`` lands in the FPGA's local memory at byte
#: ``(s mod 64) * 64`` (:data:`ATOMIC_SLOT_SHIFT`). Code 3 is read as 0. An endpoint built
#: without atomics refuses each request of such a run (the run completes in error).
TX_ATOMIC = {"FETCH_ADD": 1, "COMPARE_SWAP": 2}
#: ``tx_atomic`` of an ACK of OPEN_QP, SEND_QP_INFO or MODIFY_QP_RTS from an FPGA with the
#: responder (byte 51 bits 6-5, an extension; the existing tools read nothing there): whether
#: it executes RDMA atomics on its regions (and issues them), and the byte order of the 64-bit
#: values in its memory: 0 none (what every other reply and every other FPGA carries), 1
#: little-endian, 2 big-endian (:func:`atomic_caps`).
ATOMIC_CAPS = {None: 0, "little": 1, "big": 2}
#: The original value of the generator's atomic ``s`` lands at local byte ``(s mod 64) <<
#: ATOMIC_SLOT_SHIFT``.
ATOMIC_SLOT_SHIFT = 6


def region(fields):
    """The memory region a reply names (``fields`` as :func:`unpack` gives them): ``(rkey,
    base, length)``; ``(0, 0, 0)`` from an FPGA without the responder."""
    return fields["loc_rkey"], fields["loc_vaddr"], fields["dma_length"]


def atomic_caps(fields):
    """The atomics a reply says the FPGA executes (``fields`` as :func:`unpack` gives them):
    None, or the byte order of its memory, ``"little"`` or ``"big"`` (:data:`ATOMIC_CAPS`)."""
    return {code: order for order, code in ATOMIC_CAPS.items()}.get(fields["tx_atomic"])


def query_counts(raw):
    """The pattern sink's counters in a QUERY reply (64 ``bytes``): ``(checked, wrong)``."""
    if len(raw) != DATAGRAM_BYTES:
        raise ValueError(f"a connection-manager datagram is {DATAGRAM_BYTES} bytes, not {len(raw)}")
    f = QUERY_REPLY.unpack(raw)
    return f["checked"], f["wrong"]


def read_depths(raw):
    """``(rd_atomic, rd_depth)`` of a request or reply (64 ``bytes``); 0 where not stated."""
    if len(raw) != DATAGRAM_BYTES:
        raise ValueError(f"a connection-manager datagram is {DATAGRAM_BYTES} bytes, not {len(raw)}")
    f = READ_DEPTHS.unpack(raw)
    return f["rd_atomic"], f["rd_depth"]


def with_read_depths(raw, rd_atomic, rd_depth):
    """The datagram ``raw`` (64 ``bytes``) stating ``rd_atomic`` and ``rd_depth`` (each 0..,
    stated as at most :data:`READ_DEPTH_MAX`)."""
    if len(raw) != DATAGRAM_BYTES:
        raise ValueError(f"a connection-manager datagram is {DATAGRAM_BYTES} bytes, not {len(raw)}")
    for name, value in (("rd_atomic", rd_atomic), ("rd_depth", rd_depth)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    return raw[:56] + bytes([min(rd_atomic, READ_DEPTH_MAX), min(rd_depth, READ_DEPTH_MAX)]) + \
        raw[58:]


def pmtu_code(pmtu):
    """Byte 1 for a path MTU in bytes (256 .. 4096)."""
    for code, size in PMTU_BYTES.items():
        if size == pmtu:
            return code
    raise ValueError(f"path MTU must be one of {', '.join(map(str, PMTU_BYTES.values()))}, not {pmtu!r}")


def retry_byte(retry_cnt, rnr_retry):
    """The fields of byte 25 that set both retry counts: ``dict(retry_set=1, ...)``."""
    for name, v in (("retry_cnt", retry_cnt), ("rnr_retry", rnr_retry)):
        if not 0 <= v <= 7:
            raise ValueError(f"{name} must be 0..7, not {v!r}")
    return {"retry_set": 1, "retry_cnt": retry_cnt, "rnr_retry": rnr_retry}
