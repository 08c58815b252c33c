"""Reference model of the RC responder's decision
(:class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide`),
and of its notification point's rule (:class:`NotificationPoint`, for
:class:`~rocegen.gateware.roce.responder.resp_cnp.RespCnp`), pure Python and independent of the gateware.

One request packet at a time: its parsed headers, what the QP table says of its QP, the QP's
responder state, its memory region and the head of its receive queue go in; the verdict, the
QP's new state, what to do with the payload, the response to send and the receive completion
come out. The rules are those of ``shared/spec/roce-wire.md`` ("Responder rules", "Responder
side"), in this order:

1. Drops (no answer, state unchanged): DestQP not in the table; QP neither RTR nor RTS; IPv4
   source not the QP's peer; P_Key low 15 bits not all ones; the QP's responder in the error
   state.
2. PSN: ahead of ePSN: one NAK PSN sequence error carrying ePSN, then silence (``nak_pending``)
   until ePSN arrives; behind: a duplicate, not executed, answered with an ACK of ePSN - 1.
3. At ePSN: opcode supported (RC SEND and WRITE, with or without immediate), else NAK invalid
   request; opcode sequence (FIRST/ONLY only with no message open, MIDDLE/LAST only of the open
   message's kind), else NAK invalid request.
4. Receive queue: a SEND FIRST/ONLY and a WRITE LAST/ONLY with immediate need a posted receive
   buffer, else RNR NAK (0x20 | the QP's RNR timer code) with the packet's PSN and silence until
   it comes again.
5. Length: FIRST and MIDDLE exactly the PMTU without pad, LAST 1..PMTU, ONLY 0..PMTU, PadCnt
   as the payload needs; else NAK invalid request.
6. WRITE: on FIRST/ONLY with a DMA length > 0, the R_Key must be the QP's region's, the region
   writable and [VA, VA + length) inside it, else NAK remote access error. A LAST/ONLY must
   carry exactly the bytes left of the DMA length, a FIRST/MIDDLE fewer, else NAK invalid
   request. SEND: the bytes must fit the receive buffer, else NAK invalid request and the
   receive completes with a length error.
7. Executed: ePSN + 1; MSN + 1 at a message's end; the payload placed; an ACK (syndrome 0x1F,
   no credit limit) of this PSN when AckReq is set, or when it is the ``ack_every``-th request
   executed since the QP's last answer (``ack_every`` 0: on AckReq only); a receive completion
   at the end of a SEND and of a WRITE with immediate.

RDMA READ requests (``shared/spec/roce-wire.md`` "RDMA READ"; IBTA and Linux rxe where it is
silent) go through steps 1 and 2, then:

3. At ePSN: no message may be open (else NAK invalid request, as any request out of sequence);
   the request carries no payload and no pad, a DMA length of at most 2^31 bytes, and its QP a
   PMTU of 256..4096 bytes (else NAK invalid request); the QP's READ queue has room (it holds
   ``rd_depth`` READs, at least the 16 a ConnectX requester keeps outstanding; a READ that finds
   it full is NAK invalid request, IBTA's class B "too many RDMA READ or atomic requests", the
   NAK rxe sends when it has no READ resources); with a DMA length > 0, the R_Key is the QP's
   region's, the region readable and [VA, VA + length) inside it (else NAK remote access error
   with the request's PSN). Executed: ePSN + max(1, ceil(length / PMTU)), MSN + 1 (IBTA C9-148:
   a READ counts as a message when it is taken), no ACK (its responses are the answer, they
   restart ``unacked``), and the READ is queued (:attr:`Decision.read`), its responses carrying
   the new MSN.
4. Behind ePSN (a duplicate): executed again from its own PSN, VA and length, with the QP's
   MSN, when it passes the checks of step 3 but the opcode sequence (a requester resends a
   READ whose responses it missed); else dropped silently (a duplicate neither NAKs nor moves
   the QP to the error state). Neither answers with an ACK; the state is left as it was (a
   replayed READ restarts ``unacked``).

RDMA atomics (COMPARE_SWAP 0x13, FETCH_ADD 0x14; IBTA 9.4.5, Linux rxe where it is silent), with
``atomics`` (else they are refused as any opcode the responder does not execute: NAK invalid
request), take a place in the READ queue, where they keep their order with the QP's READs, and
count against its ``rd_depth`` (IBTA's responder resources are shared by READs and atomics).
They go through steps 1 and 2, then:

3. At ePSN: no message open (else NAK invalid request); no payload and no pad, room in the READ
   queue (else NAK invalid request); the R_Key the region's, the region readable and writable,
   [VA, VA + 8) inside it (else NAK remote access error); VA a multiple of 8 (else NAK invalid
   request: rxe checks the alignment after the region). Executed: ePSN + 1, MSN + 1, no ACK (its
   ATOMIC_ACKNOWLEDGE is the answer), the atomic queued (:attr:`Decision.read` with ``op``
   ``"FETCH_ADD"`` or ``"COMPARE_SWAP"`` and its operands), its answer carrying the new MSN.
4. Behind ePSN: never executed again. When the QP's results still hold the original value of
   that PSN (``result``) and the queue has room, the answer is queued again with it (``op``
   ``"REPLAY"``, the QP's MSN); otherwise dropped silently (the original's answer may still be
   on its way; rxe drops a duplicate atomic it has no result for).

:func:`read_responses` is the model of the response generator: the packets of a queued READ.
:func:`answer_order` is the order rule of the answers of a QP: ACKs, NAKs and READ responses
leave in the order of the requests they answer (PSN order); of consecutive ACKs of a QP, with
no other answer between them, only the last need leave (they are cumulative). A READ's
responses acknowledge every request before it, as an ACK of the PSN before the READ would, so
an ACK of a later request sent ahead of them would acknowledge the READ before its data.

Every answer (ACK, NAK, RNR NAK, the ACK of a duplicate) is cumulative: it restarts the QP's
count of requests executed unanswered (``unacked``), as a ConnectX's ``ack_every`` does.

A NAK invalid request or remote access error puts the QP's responder in the error state; a SEND
it ends completes with a status, and the QP's receive queue is flushed (``flush``).
"""

import dataclasses
import enum
from dataclasses import dataclass

from rocegen.wire import opcodes as opc
from rocegen.wire.atomics import ATOMIC_BYTES
from rocegen.wire.roce import NAK_INV_REQ, NAK_PSN_SEQ, NAK_REM_ACCESS, PSN_MASK, SYN_ACK, SYN_RNR
from rocegen.wire.verbs import QpState

__all__ = ["Verdict", "Kind", "RespState", "Decision", "decide", "OPCODES", "psn_delta",
           "NotificationPoint", "CNP_DSCP", "FROM_PEER", "READ_MAX", "read_packets", "read_fault",
           "read_responses", "memory_read", "answer_order", "check_answer_order",
           "RD_FIRST", "RD_MIDDLE", "RD_LAST", "RD_ONLY", "ATOMIC_OPS", "atomic_fault"]


class Verdict(enum.IntEnum):
    """What became of a request (the gateware's ``RespVerdict`` has the same values)."""
    EXECUTED = 0
    DUPLICATE = 1
    SEQ_NAK = 2         # ahead of ePSN: NAK sent
    SEQ_DROP = 3        # ahead of ePSN, NAK already sent
    RNR = 4
    INVALID = 5         # NAK invalid request, QP to error
    ACCESS = 6          # NAK remote access error, QP to error
    DROP_QP = 7
    DROP_STATE = 8
    DROP_PEER = 9
    DROP_PKEY = 10
    DROP_ERROR = 11


class Kind(enum.IntEnum):
    NONE = 0
    SEND = 1
    WRITE = 2


class RecvStatus(enum.IntEnum):
    OK = 0
    LENGTH = 1
    INVALID = 2
    FLUSHED = 3


FIRST, MIDDLE, LAST, ONLY = (p.value for p in opc.Position)
_KIND = {opc.Verb.SEND: Kind.SEND, opc.Verb.RDMA_WRITE: Kind.WRITE}
#: opcode -> (kind, position, ImmDt) of the SEND and WRITE opcodes the responder executes
OPCODES = {r.code: (_KIND[r.verb], r.position.value, r.has_imm)
           for r in opc.ROWS if r.verb in _KIND and r.supported}

QP_STATE_RTR, QP_STATE_RTS = QpState.RTR.value, QpState.RTS.value     # of the QP table

#: Largest DMA length of a READ (IBTA: messages of at most 2^31 bytes).
READ_MAX = 1 << 31
#: The PMTU codes (log2 of the bytes) a READ's responses may use.
READ_PMTU_LOG2 = range(8, 13)
#: READ response opcodes.
RD_FIRST, RD_MIDDLE, RD_LAST, RD_ONLY = opc.verb_opcodes(opc.Verb.RDMA_READ_RESPONSE)


def psn_delta(a, b):
    """``a - b`` as a signed 24-bit number."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d & 0x800000 else d


@dataclass(frozen=True)
class RespState:
    """A QP's responder state (the fields of ``RESP_STATE``)."""
    epsn: int = 0
    msn: int = 0
    kind: Kind = Kind.NONE
    nak_pending: bool = False
    error: bool = False
    addr: int = 0
    remaining: int = 0
    total: int = 0
    wr_id: int = 0
    unacked: int = 0            # requests executed since the last answer

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclass
class Decision:
    verdict: Verdict
    state: RespState
    place: dict                 # write, addr, skip, length
    response: dict | None       # syndrome, psn, msn
    completion: dict | None     # wr_id, opcode ("SEND" / "WRITE_IMM"), status, length, imm or None
    rq_pop: bool = False
    flush: bool = False
    #: INVALID because the packet's bytes do not fit the message (the last check of step 6),
    #: not an earlier check
    length_fault: bool = False
    #: A READ to queue (executed or replayed): ``psn`` (of its first response), ``va`` (local
    #: byte address), ``length``, ``msn`` (the AETH MSN of its responses), ``pmtu_log2``; an
    #: atomic's also ``op`` (``"FETCH_ADD"``, ``"COMPARE_SWAP"`` or ``"REPLAY"``), ``swap_add``
    #: and ``compare`` (a REPLAY's ``swap_add``: the original value)
    read: dict | None = None


def _segmentation_ok(pos, n, padcnt, pmtu):
    if pos in (FIRST, MIDDLE):
        if padcnt or n != pmtu:
            return False
    elif pos == LAST:
        if n == 0 or n > pmtu:
            return False
    elif n > pmtu:
        return False
    return padcnt == (-n) & 3


def read_packets(length, pmtu_log2):
    """PSNs (response packets) a READ of ``length`` bytes takes: ceil(length / PMTU), 1 for 0."""
    return max(1, -(-length >> pmtu_log2))


def read_fault(h, ctx, mr, rd_full):
    """What stops a READ request with headers ``h`` (the READ checks of :func:`decide` but the
    opcode sequence): None, ``"invalid"`` or ``"access"``."""
    bth, reth = h["bth"], h["reth"]
    va, dlen = reth["va"], reth["dma_len"]
    if h["length"] or bth["padcnt"] or dlen > READ_MAX or \
            ctx["pmtu_log2"] not in READ_PMTU_LOG2 or rd_full:
        return "invalid"
    if dlen and not (reth["rkey"] == mr["rkey"] and mr["read"] and
                     mr["base"] <= va and va + dlen <= mr["base"] + mr["length"]):
        return "access"
    return None


#: The atomic request opcodes, and the name of each one's operation.
ATOMIC_OPS = {opc.OP_RC_FETCH_ADD: "FETCH_ADD", opc.OP_RC_COMPARE_SWAP: "COMPARE_SWAP"}


def atomic_fault(h, mr, rd_full):
    """What stops an atomic request with headers ``h`` (``h["atomic"]``: ``va``, ``rkey``,
    ``swap_add``, ``compare``): None, ``"invalid"`` or ``"access"``, in the order of the
    checks of step 3 of the atomics (the opcode sequence aside)."""
    a = h["atomic"]
    va = a["va"]
    if h["length"] or h["bth"]["padcnt"] or rd_full:
        return "invalid"
    if not (a["rkey"] == mr["rkey"] and mr["read"] and mr["write"] and
            mr["base"] <= va and va + ATOMIC_BYTES <= mr["base"] + mr["length"]):
        return "access"
    if va % ATOMIC_BYTES:
        return "invalid"
    return None


def decide(h, ctx, st, mr, rnr_timer, rq_head, ack_every=0, rd_full=False, *, atomics=False,
           result=None):
    """The decision for one request.

    ``h``: the headers (``RESP_HEADER`` as a dict: ``src_ip``, ``bth`` {opcode, psn, pkey,
    ack_req, padcnt, ...}, ``reth`` {va, rkey, dma_len}, ``imm``, ``hdr_len``, ``length``).
    ``ctx``: ``in_table``, ``state`` (QpState value), ``peer_ip``, ``pmtu_log2``. ``st``: the
    QP's :class:`RespState`. ``mr``: ``rkey``, ``base``, ``length``, ``write``. ``rnr_timer``:
    the QP's RNR timer code. ``rq_head``: ``wr_id``, ``addr``, ``length`` of the first posted
    receive buffer, or None. ``ack_every``: an ACK after so many requests executed without
    one (0: only on AckReq). ``rd_full``: the QP's READ queue is full. ``mr["read"]``: the
    region may be read. ``atomics``: the responder executes atomics (``h["atomic"]`` holds an
    atomic's AtomicETH); ``result``: the original value the QP's results hold for this PSN, or
    None.
    """
    bth = h["bth"]
    psn, op, n = bth["psn"], bth["opcode"], h["length"]
    nothing = dict(write=0, addr=0, skip=h["hdr_len"], length=n)

    def out(verdict, state=st, response=None, **kw):
        return Decision(verdict, state, kw.pop("place", nothing), response,
                        kw.pop("completion", None), **kw)

    if not ctx["in_table"]:
        return out(Verdict.DROP_QP)
    if ctx["state"] not in (QP_STATE_RTR, QP_STATE_RTS):
        return out(Verdict.DROP_STATE)
    if h["src_ip"] != ctx["peer_ip"]:
        return out(Verdict.DROP_PEER)
    if bth["pkey"] & 0x7FFF != 0x7FFF:
        return out(Verdict.DROP_PKEY)
    if st.error:
        return out(Verdict.DROP_ERROR)

    d = psn_delta(psn, st.epsn)
    if d > 0:
        if st.nak_pending:
            return out(Verdict.SEQ_DROP)
        return out(Verdict.SEQ_NAK, st.replace(nak_pending=True, unacked=0),
                   dict(syndrome=NAK_PSN_SEQ, psn=st.epsn, msn=st.msn))
    read = op == opc.OP_RC_RDMA_READ_REQUEST
    atomic = atomics and op in ATOMIC_OPS
    if d < 0:
        if atomic:
            if result is None or rd_full:
                return out(Verdict.DUPLICATE)
            return out(Verdict.DUPLICATE, st.replace(unacked=0),
                       read=_atomic_job(h, ctx, st.msn, "REPLAY", result))
        if read:
            if read_fault(h, ctx, mr, rd_full):
                return out(Verdict.DUPLICATE)
            return out(Verdict.DUPLICATE, st.replace(unacked=0),
                       read=_read_job(h, ctx, st.msn))
        return out(Verdict.DUPLICATE, st.replace(unacked=0),
                   dict(syndrome=SYN_ACK, psn=(st.epsn - 1) & PSN_MASK, msn=st.msn))

    st = before = st.replace(nak_pending=False)

    def fatal(syndrome, verdict, status=RecvStatus.INVALID, rq_pop=False, length_fault=False):
        # (a SEND that was being received, or whose buffer was just taken, completes with it)
        cpl = None
        if st.kind == Kind.SEND:
            cpl = dict(wr_id=st.wr_id, opcode="SEND", status=status,
                       length=st.total - st.remaining, imm=None)
        # (the rest of the state is that of the packet before: an errored QP uses none of it)
        return out(verdict, before.replace(error=True, kind=Kind.NONE, unacked=0),
                   dict(syndrome=syndrome, psn=psn, msn=st.msn), completion=cpl, rq_pop=rq_pop,
                   flush=True, length_fault=length_fault)

    if atomic:
        if st.kind != Kind.NONE:
            return fatal(NAK_INV_REQ, Verdict.INVALID)
        fault = atomic_fault(h, mr, rd_full)
        if fault:
            return fatal(*((NAK_INV_REQ, Verdict.INVALID) if fault == "invalid" else
                           (NAK_REM_ACCESS, Verdict.ACCESS)))
        msn = (st.msn + 1) & PSN_MASK
        return out(Verdict.EXECUTED, st.replace(epsn=(st.epsn + 1) & PSN_MASK, msn=msn, unacked=0),
                   read=_atomic_job(h, ctx, msn, ATOMIC_OPS[op]))
    if read:
        if st.kind != Kind.NONE:
            return fatal(NAK_INV_REQ, Verdict.INVALID)
        fault = read_fault(h, ctx, mr, rd_full)
        if fault:
            return fatal(*((NAK_INV_REQ, Verdict.INVALID) if fault == "invalid" else
                           (NAK_REM_ACCESS, Verdict.ACCESS)))
        msn = (st.msn + 1) & PSN_MASK
        n_psn = read_packets(h["reth"]["dma_len"], ctx["pmtu_log2"])
        return out(Verdict.EXECUTED, st.replace(epsn=(st.epsn + n_psn) & PSN_MASK, msn=msn,
                                                unacked=0), read=_read_job(h, ctx, msn))
    info = OPCODES.get(op)
    if info is None:
        return fatal(NAK_INV_REQ, Verdict.INVALID)
    kind, pos, imm = info
    if st.kind == Kind.NONE:
        if pos in (MIDDLE, LAST):
            return fatal(NAK_INV_REQ, Verdict.INVALID)
    elif pos in (FIRST, ONLY) or kind != st.kind:
        return fatal(NAK_INV_REQ, Verdict.INVALID)
    needs_rq = (kind == Kind.SEND and pos in (FIRST, ONLY)) or (kind == Kind.WRITE and imm)
    if needs_rq and rq_head is None:
        return out(Verdict.RNR, st.replace(nak_pending=True, unacked=0),
                   dict(syndrome=SYN_RNR | rnr_timer, psn=psn, msn=st.msn))
    if not _segmentation_ok(pos, n, bth["padcnt"], 1 << ctx["pmtu_log2"]):
        return fatal(NAK_INV_REQ, Verdict.INVALID)

    end = pos in (LAST, ONLY)
    completion = None
    rq_pop = False
    if kind == Kind.WRITE:
        if pos in (FIRST, ONLY):
            reth = h["reth"]
            va, dlen = reth["va"], reth["dma_len"]
            if dlen and not (reth["rkey"] == mr["rkey"] and mr["write"] and
                             mr["base"] <= va and va + dlen <= mr["base"] + mr["length"]):
                return fatal(NAK_REM_ACCESS, Verdict.ACCESS)
            st = st.replace(addr=va & 0xFFFFFFFF, remaining=dlen, total=dlen)
        if (end and n != st.remaining) or (not end and n >= st.remaining):
            return fatal(NAK_INV_REQ, Verdict.INVALID, length_fault=True)
        if end and imm:
            rq_pop = True
            completion = dict(wr_id=rq_head["wr_id"], opcode="WRITE_IMM", status=RecvStatus.OK,
                              length=st.total, imm=h["imm"])
    else:
        if pos in (FIRST, ONLY):
            rq_pop = True
            st = st.replace(addr=rq_head["addr"], remaining=rq_head["length"],
                            total=rq_head["length"], wr_id=rq_head["wr_id"], kind=Kind.SEND)
        if n > st.remaining:
            return fatal(NAK_INV_REQ, Verdict.INVALID, RecvStatus.LENGTH, rq_pop,
                         length_fault=True)
        if end:
            completion = dict(wr_id=st.wr_id, opcode="SEND", status=RecvStatus.OK,
                              length=st.total - st.remaining + n, imm=h["imm"] if imm else None)
    place = dict(write=int(n > 0), addr=st.addr, skip=h["hdr_len"], length=n)
    st = st.replace(addr=(st.addr + n) & 0xFFFFFFFF, remaining=st.remaining - n,
                    kind=Kind.NONE if end else kind, epsn=(st.epsn + 1) & PSN_MASK,
                    msn=(st.msn + end) & PSN_MASK)
    unacked = st.unacked + 1 if ack_every else 0
    response = None
    if bth["ack_req"] or (ack_every and unacked >= ack_every):
        response, unacked = dict(syndrome=SYN_ACK, psn=psn, msn=st.msn), 0
    st = st.replace(unacked=unacked)
    return out(Verdict.EXECUTED, st, response, place=place, completion=completion, rq_pop=rq_pop)


def _read_job(h, ctx, msn):
    reth = h["reth"]
    return dict(psn=h["bth"]["psn"], va=reth["va"] & 0xFFFFFFFF, length=reth["dma_len"],
                msn=msn, pmtu_log2=ctx["pmtu_log2"])


def _atomic_job(h, ctx, msn, op, original=None):
    a = h["atomic"]
    return dict(psn=h["bth"]["psn"], va=a["va"] & 0xFFFFFFFF, length=ATOMIC_BYTES, msn=msn,
                pmtu_log2=ctx["pmtu_log2"], op=op,
                swap_add=a["swap_add"] if original is None else original,
                compare=a["compare"] if original is None else 0)


def read_responses(job, syndrome=SYN_ACK):
    """The response packets of a queued READ (``job`` as :attr:`Decision.read`), in order: dicts
    of ``opcode`` (ONLY when the length is at most the PMTU, zero included; else FIRST,
    MIDDLE..., LAST), ``psn`` (from the request's, + 1 each), ``aeth`` ((syndrome, MSN) on
    FIRST, LAST and ONLY: an ACK, as the responder's ACKs are, with the job's MSN; None on
    MIDDLE), ``addr`` (local byte address of the payload), ``length`` (the PMTU but on the
    last) and ``padcnt``. An atomic's answer is one ATOMIC_ACKNOWLEDGE (its AtomicAckETH, the
    original value, is the 8 bytes of ``length`` at ``addr`` as the atomic finds them)."""
    if job.get("op"):
        return [dict(opcode=opc.OP_RC_ATOMIC_ACKNOWLEDGE, psn=job["psn"],
                     aeth=(syndrome, job["msn"]), addr=job["va"], length=ATOMIC_BYTES, padcnt=0)]
    pmtu = 1 << job["pmtu_log2"]
    n = read_packets(job["length"], job["pmtu_log2"])
    out = []
    for k in range(n):
        first, last = k == 0, k == n - 1
        size = job["length"] - k * pmtu if last else pmtu
        op = RD_ONLY if first and last else RD_FIRST if first else RD_LAST if last else RD_MIDDLE
        out.append(dict(opcode=op, psn=(job["psn"] + k) & PSN_MASK,
                        aeth=(syndrome, job["msn"]) if first or last else None,
                        addr=(job["va"] + k * pmtu) & 0xFFFFFFFF, length=size,
                        padcnt=-size & 3))
    return out


def memory_read(addr, length, width):
    """The memory read of a payload of ``length`` bytes at byte address ``addr``, in words of
    ``width`` bits: (word address, byte offset of the payload in the first word, words; 0 words
    for no payload)."""
    b = width // 8
    off = addr % b
    return addr // b, off, -(-(off + length) // b) if length else 0


def answer_order(decisions):
    """The answers of each QP, in the order they must leave (``decisions``: (qp, Decision)
    pairs in the order of the requests): {qp: [answer]}, an answer being ``("ACK", syndrome,
    psn, msn)`` for an ACKNOWLEDGE (ACK, RNR NAK or NAK) or ``("READ", response)`` for each
    packet of :func:`read_responses`."""
    out = {}
    for qp, d in decisions:
        q = out.setdefault(qp, [])
        if d.response is not None:
            r = d.response
            q.append(("ACK", r["syndrome"], r["psn"], r["msn"]))
        if d.read is not None:
            q.extend(("READ", p) for p in read_responses(d.read))
    return out


def _plain_ack(a):
    return a[0] == "ACK" and a[1] & 0x60 == 0


def check_answer_order(want, got):
    """``got``, the answers of one QP as they left, against ``want`` (its list of
    :func:`answer_order`): the same, in the same order, but for plain ACKs left out that a
    later ACKNOWLEDGE of the QP follows (an ACK or NAK acknowledges every request before its
    PSN): merged into the next ACK in the answer queue, or, parked behind the QP's READs,
    replaced by the QP's next answer, ACK or NAK, across the responses of READs queued
    between them. Raises ``AssertionError`` naming the first difference."""
    later = [False] * len(want)                 # an ACKNOWLEDGE follows want[i]
    for i in range(len(want) - 2, -1, -1):
        later[i] = later[i + 1] or want[i + 1][0] == "ACK"
    i = 0
    for j, a in enumerate(got):
        while i < len(want) and want[i] != a and _plain_ack(want[i]) and later[i]:
            i += 1
        assert i < len(want) and want[i] == a, \
            f"answer {j} {a} left out of order: expected {want[i] if i < len(want) else None}"
        i += 1
    while i < len(want) and _plain_ack(want[i]) and later[i]:
        i += 1
    assert i == len(want), f"answers missing from {want[i]} on"


#: The verdicts of the requests that come from their QP's peer (DestQP in the table, the QP RTR
#: or RTS, the peer's IPv4 address, the default P_Key): those whose ECN CE mark asks for a CNP,
#: executed, duplicate, NAKed or dropped later alike (congestion is on the path regardless).
FROM_PEER = frozenset(Verdict) - {Verdict.DROP_QP, Verdict.DROP_STATE, Verdict.DROP_PEER,
                                  Verdict.DROP_PKEY}
#: DSCP of the CNPs, as ConnectX sends them.
CNP_DSCP = 48


class NotificationPoint:
    """The notification point's rule (:class:`~rocegen.gateware.roce.responder.resp_cnp.RespCnp`), cycle
    by cycle: a request marked ECN CE makes a CNP to its QP's peer unless the QP's last CNP was
    made less than ``interval`` cycles before; one CNP waits to be handed on, and a CNP made
    while one waits is dropped (the QP's time left as it was).

    Call :meth:`step` once per cycle in which something happens, cycles in increasing order.
    ``issued`` lists the QPs of the CNPs made, in order.
    """

    def __init__(self, interval):
        self.interval = interval
        self.last = {}              # QP -> cycle of its last CNP
        self.waiting = False
        self.issued = []

    def step(self, t, *, mark=None, leaves=False, interval=None):
        """Cycle ``t``: ``mark``, the QP of a CE mark decided in it (or None); ``leaves``, the
        waiting CNP is handed on in it; ``interval``, a new interval taking effect after it.
        Returns what became of the mark: ``"issued"``, ``"suppressed"``, ``"dropped"`` or
        None."""
        assert not leaves or self.waiting, f"cycle {t}: a CNP handed on with none waiting"
        outcome = None
        if mark is not None:
            last = self.last.get(mark)
            if last is not None and t - last < self.interval:
                outcome = "suppressed"
            elif self.waiting and not leaves:
                outcome = "dropped"
            else:
                outcome = "issued"
                self.last[mark] = t
                self.issued.append(mark)
        if leaves:
            self.waiting = False
        if outcome == "issued":
            self.waiting = True
        if interval is not None:
            self.interval = interval
        return outcome
