"""The atomic responder of the RNIC model: COMPARE_SWAP and FETCH_ADD requests checked in rxe's
order, executed on the host memory (64-bit values in the host's byte order, little-endian), and
answered with an ATOMIC_ACKNOWLEDGE that carries the original value; a duplicate is answered from
the QP's store of results and not executed again (:mod:`rocegen.sim.models.responder.atomic`).

Atomics share the QP's ``max_dest_rd_atomic`` responder resources with READs: an atomic is
refused (NAK invalid request) while that many READs have responses still to send. An atomic is
executed when it arrives; its answer keeps PSN order with the READ responses (it queues behind
them)."""

from rocegen.sim.models.responder.atomic import (
    ATOMIC_BYTES,
    AtomicRequest,
    AtomicResults,
    execute,
    misaligned,
)
from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.rnic.responder import _Fatal
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import NAK_INV_REQ, NAK_REM_ACCESS, PSN_MASK

__all__ = ["AtomicResponder"]


class AtomicResponder:
    """The atomic responder of ``nic`` (:class:`~rocegen.sim.models.rnic.Rnic`) on all its QPs;
    ``byteorder`` is the order of the 64-bit values in its memory."""

    def __init__(self, nic, byteorder="little"):
        self.nic = nic
        self.byteorder = byteorder

    @staticmethod
    def results(qp):
        """The results ``qp`` answers duplicates from (as many as its ``max_dest_rd_atomic``)."""
        depth = max(qp.max_dest_rd_atomic, 1)
        if qp.atomic_res is None or qp.atomic_res.depth != depth:
            qp.atomic_res = AtomicResults(depth)
        return qp.atomic_res

    def answer(self, qp, psn, original, src_mac):
        """The ATOMIC_ACKNOWLEDGE of the atomic at ``psn``: AETH (credit, MSN) and the value."""
        nic = self.nic
        nic.counters["atomic_ack_tx"] += 1
        body = (H.AETH.pack(syndrome=nic.responder.credit(qp), msn=qp.msn)
                + H.ATOMIC_ACK_ETH.pack(orig=original))
        return nic.frames.roce(qp, src_mac, opc.OP_RC_ATOMIC_ACKNOWLEDGE, psn, body)

    def atomic(self, qp, psn, opcode, ext, payload, padcnt, where, src_mac):
        """A new atomic request (PSN = ePSN), checked in rxe's order, then executed."""
        nic = self.nic
        if qp.in_msg is not None:
            raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: an "
                         f"{qp.in_msg} message is in progress")
        busy = nic.reads.resources_held(qp)
        if busy >= qp.max_dest_rd_atomic:
            raise _Fatal(NAK_INV_REQ, "err_rd_atomic", f"{busy} READs and atomics queued already "
                         f"(max_dest_rd_atomic {qp.max_dest_rd_atomic})")
        if payload or padcnt:
            raise _Fatal(NAK_INV_REQ, "err_length", f"atomic request with {len(payload)} payload "
                         f"bytes and PadCnt {padcnt}")
        req = AtomicRequest.from_eth(opcode, H.ATOMIC_ETH.unpack(ext))
        if misaligned(req.va):
            raise _Fatal(NAK_INV_REQ, "err_atomic_align", f"atomic at {req.va:#x}, not a multiple "
                         f"of {ATOMIC_BYTES}")
        mr = nic.memory.by_rkey(req.rkey)
        if mr is None:
            raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"R_Key {req.rkey:#x} is not registered")
        if not mr.access & Access.REMOTE_ATOMIC:
            raise _Fatal(NAK_REM_ACCESS, "err_access", f"region of R_Key {req.rkey:#x} has no "
                         "REMOTE_ATOMIC access")
        if not mr.contains(req.va, ATOMIC_BYTES):
            raise _Fatal(NAK_REM_ACCESS, "err_bounds", f"[{req.va:#x}, +{ATOMIC_BYTES}) is "
                         f"outside the region [{mr.addr:#x}, +{mr.length:#x}) of R_Key "
                         f"{req.rkey:#x}")
        original = execute(mr.buf, req.va - mr.addr, req, self.byteorder)
        qp.msn = (qp.msn + 1) & PSN_MASK
        qp.epsn = (qp.epsn + 1) & PSN_MASK
        nic.counters["executed"] += 1
        nic.counters["atomic_rx"] += 1
        nic.responder.cancel_ack(qp)        # its AETH acknowledges what came before
        self.results(qp).put(psn, req, original)
        return [self.answer(qp, psn, original, src_mac)]

    def duplicate(self, qp, psn, opcode, ext, where, src_mac):
        """An atomic behind ePSN: answered with the original value kept for its PSN when that
        result was of the same request; else dropped (it was not executed, or too long ago)."""
        nic = self.nic
        try:
            req = AtomicRequest.from_eth(opcode, H.ATOMIC_ETH.unpack(ext))
        except (ValueError, KeyError) as e:
            return nic._drop("atomic_dup_drop", f"{where}: a duplicate atomic that does not "
                              f"parse ({e})")
        original = self.results(qp).get(psn, req)
        if original is None:
            return nic._drop("atomic_dup_drop", f"{where}: a duplicate atomic of no result kept")
        nic.counters["atomic_dup"] += 1
        return [self.answer(qp, psn, original, src_mac)]
