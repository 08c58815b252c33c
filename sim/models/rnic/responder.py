"""The RC responder of the RNIC model: the requests of a QP in PSN order (sequence NAKs, duplicates,
RNR), the execution of SENDs and RDMA WRITEs into the receive WQEs and the memory, the class C
errors that NAK and take the QP to the error state, and the ACKs (coalesced, cumulative, with the
credit code and the faults the behaviour injects). RDMA READ requests go to
:mod:`~rocegen.sim.models.rnic.read_responder`, atomics (on a QP with REMOTE_ATOMIC access) to
:mod:`~rocegen.sim.models.rnic.atomic_responder`."""

import struct

from rocegen.sim.models.rnic.behaviour import credit_code
from rocegen.sim.models.rnic.cq import WcOpcode, WcStatus
from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.rnic.opcodes import (
    ATOMIC_OPCODES,
    FIRST,
    LAST,
    MIDDLE,
    ONLY,
    Op,
    _segmentation_error,
)
from rocegen.sim.models.rnic.qp import psn_diff
from rocegen.wire.roce import (
    ETH_MIN_FRAME,
    NAK_INV_REQ,
    NAK_PSN_SEQ,
    NAK_REM_ACCESS,
    NAK_REM_OP,
    PSN_MASK,
    SYN_ACK,
    SYN_RNR,
)

__all__ = ["Responder"]

MIN_FRAME = ETH_MIN_FRAME


class _Fatal(Exception):
    """A class C responder error: NAK ``syndrome``, then the QP goes to the error state."""

    def __init__(self, syndrome, counter, message, status=None):
        super().__init__(message)
        self.syndrome, self.counter, self.message, self.status = syndrome, counter, message, status


class Responder:
    """The responder of ``nic`` (:class:`~rocegen.sim.models.rnic.Rnic`) on all its QPs."""

    def __init__(self, nic):
        self.nic = nic
        #: packets to refuse with an RNR NAK on any QP (:meth:`Rnic.rnr_for`)
        self.rnr_refuse = 0

    def ack(self, qp, syndrome, psn, src_mac):
        """An ACKNOWLEDGE frame of ``qp`` with its MSN."""
        return self.nic.frames.ack(qp, syndrome, psn, src_mac, qp.msn)

    def behind_reads(self, qp, frames):
        """The answers of ``qp``: sent now, or queued behind its READ responses (in order)."""
        if qp.rsp_out and frames:
            qp.rsp_out.extend(frames)
            return []
        return frames

    def request(self, qp, bth, info, ext, payload, padcnt, where, src_mac):
        nic = self.nic
        psn = bth.psn
        d = psn_diff(psn, qp.epsn)
        if d > 0:
            if qp.nak_pending:
                return nic._drop("seq_drop", f"{where}: ahead of ePSN {qp.epsn:#08x}, NAK "
                                  "already sent")
            qp.nak_pending = True
            nic._event("nak_seq_tx", f"{where}: ahead of ePSN {qp.epsn:#08x}")
            self.cancel_ack(qp)
            return [self.ack(qp, NAK_PSN_SEQ, qp.epsn, src_mac)]
        read = bth.opcode == Op.RDMA_READ_REQUEST and qp.access & Access.REMOTE_READ
        atomic = bth.opcode in ATOMIC_OPCODES and qp.access & Access.REMOTE_ATOMIC
        if d < 0:
            nic._event("duplicate", f"{where}: behind ePSN {qp.epsn:#08x}")
            if read:
                try:
                    return nic.reads.duplicate(qp, psn, ext, where, src_mac)
                except _Fatal as e:
                    return self.fatal(qp, psn, e, where, src_mac)
            if atomic:
                return nic.atomics.duplicate(qp, psn, bth.opcode, ext, where, src_mac)
            self.cancel_ack(qp)
            return self.send_ack(qp, src_mac)
        qp.nak_pending = False
        try:
            if read:
                return nic.reads.read(qp, psn, ext, payload, padcnt, where, src_mac)
            if atomic:
                return nic.atomics.atomic(qp, psn, bth.opcode, ext, payload, padcnt, where,
                                          src_mac)
            return self.execute(qp, bth, info, ext, payload, padcnt, where, src_mac)
        except _Fatal as e:
            return self.fatal(qp, psn, e, where, src_mac)

    def cnp(self, qp, bth, pl, where):
        nic = self.nic
        if qp is None:
            return nic._drop("drop_dest_qp", f"{where}: no such QP")
        if not bth.becn or bth.padcnt or len(pl) != 12 + 16 + 4 or any(pl[12:28]):
            nic._event("warn_cnp", f"{where}: a CNP must have BECN set, PadCnt 0 and 16 zero "
                        "bytes")
        nic.counters["cnp_rx"] += 1
        qp.cnp_rx += 1
        return []

    def fatal(self, qp, psn, e, where, src_mac):
        nic = self.nic
        nic._event(e.counter, f"{where}: {e.message}")
        self.cancel_ack(qp)
        name = {NAK_INV_REQ: "nak_inv_req_tx", NAK_REM_ACCESS: "nak_rem_access_tx",
                NAK_REM_OP: "nak_rem_op_tx"}[e.syndrome]
        nic.counters[name] += 1
        frame = self.ack(qp, e.syndrome, psn, src_mac)
        qp.state = "ERR"
        if qp.recv is not None:
            # (only an invalid request can interrupt a SEND: R_Keys belong to WRITEs)
            status = e.status or WcStatus.REM_INV_REQ_ERR
            nic._complete(qp, qp.recv, WcOpcode.RECV, qp.recv_off, None, status)
            qp.recv = None
        nic._qp_error(qp)
        return [frame]

    def execute(self, qp, bth, info, ext, payload, padcnt, where, src_mac):
        nic = self.nic
        if info is None:
            raise _Fatal(NAK_INV_REQ, "err_unsupported", "opcode not supported by this responder")
        kind, pos, has_reth, has_imm = info
        # 1. opcode sequence
        if qp.in_msg is None:
            if pos in (MIDDLE, LAST):
                raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: no "
                             f"{kind} message in progress")
        elif pos in (FIRST, ONLY) or kind != qp.in_msg:
            raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: an "
                         f"{qp.in_msg} message is in progress")
        if kind == "WRITE" and not qp.access & Access.REMOTE_WRITE:
            raise _Fatal(NAK_INV_REQ, "err_unsupported", "RDMA WRITE not supported by this QP "
                         "(its access flags lack REMOTE_WRITE)")
        # 2. receive WQE (RNR)
        if (kind == "SEND" and pos in (FIRST, ONLY)) or (kind == "WRITE" and has_imm):
            refuse = ""
            if qp.rnr_refuse:
                qp.rnr_refuse -= 1
                refuse = "refused by rnr_for"
            elif self.rnr_refuse:
                self.rnr_refuse -= 1
                refuse = "refused by rnr_for"
            elif not qp.rq:
                refuse = "no receive WQE posted"
            if refuse:
                qp.nak_pending = True
                nic._event("rnr_nak_tx", f"{where}: {refuse}")
                self.cancel_ack(qp)
                return [self.ack(qp, SYN_RNR | qp.min_rnr_timer, bth.psn, src_mac)]
        # 3. length
        n = len(payload)
        err = _segmentation_error(kind, pos, n, padcnt, qp.pmtu)
        if err:
            raise _Fatal(NAK_INV_REQ, "err_length", err)
        # 4. R_Key, access, bounds; 5. execute
        imm = struct.unpack_from(">I", ext, 16 * has_reth)[0] if has_imm else None
        end = pos in (LAST, ONLY)
        if kind == "WRITE":
            if has_reth:
                va, rkey, dlen = struct.unpack_from(">QII", ext)
                if nic.behaviour.max_msg is not None and dlen > nic.behaviour.max_msg:
                    raise _Fatal(NAK_INV_REQ, "err_msg_size", f"RETH DMA length {dlen:#x} is "
                                 f"more than the largest message ({nic.behaviour.max_msg:#x})")
                mr = None
                if dlen:
                    mr = nic.memory.by_rkey(rkey)
                    if mr is None:
                        raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"R_Key {rkey:#x} is not "
                                     "registered")
                    if not mr.access & Access.REMOTE_WRITE:
                        raise _Fatal(NAK_REM_ACCESS, "err_access", f"region of R_Key {rkey:#x} "
                                     "has no REMOTE_WRITE access")
                    if not mr.contains(va, dlen):
                        raise _Fatal(NAK_REM_ACCESS, "err_bounds", f"[{va:#x}, +{dlen:#x}) is "
                                     f"outside the region [{mr.addr:#x}, +{mr.length:#x}) of "
                                     f"R_Key {rkey:#x}")
                qp.wr_va, qp.wr_len, qp.wr_remaining, qp.wr_mr = va, dlen, dlen, mr
            elif qp.wr_mr is not None and not nic.memory.holds(qp.wr_mr):
                raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"region of R_Key {qp.wr_mr.rkey:#x} "
                             "deregistered during the WRITE")
            if end and n != qp.wr_remaining:
                raise _Fatal(NAK_INV_REQ, "err_length", f"{n} payload bytes end a WRITE with "
                             f"{qp.wr_remaining} of its DMA length {qp.wr_len} left")
            if not end and n >= qp.wr_remaining:
                raise _Fatal(NAK_INV_REQ, "err_length", f"{n} payload bytes leave nothing of the "
                             f"DMA length {qp.wr_len} for the LAST packet ({qp.wr_remaining} "
                             "left)")
            if n:
                off = qp.wr_va - qp.wr_mr.addr
                qp.wr_mr.buf[off:off + n] = payload
            qp.wr_va += n
            qp.wr_remaining -= n
            nic.counters["write_bytes"] += n
            if end:
                nic.counters["write_msgs"] += 1
                if has_imm:
                    nic._complete(qp, qp.rq.popleft(), WcOpcode.RECV_RDMA_WITH_IMM, qp.wr_len,
                                   imm, WcStatus.SUCCESS)
                qp.wr_mr = None
        else:
            if pos in (FIRST, ONLY):
                qp.recv, qp.recv_off = qp.rq.popleft(), 0
            wqe = qp.recv
            if qp.recv_off + n > wqe.length:
                raise _Fatal(NAK_INV_REQ, "err_recv_len", f"SEND of at least {qp.recv_off + n} "
                             f"bytes into a receive buffer of {wqe.length}",
                             status=WcStatus.LOC_LEN_ERR)
            if wqe.addr is None:
                wqe.buf[qp.recv_off:qp.recv_off + n] = payload
            elif n:
                nic.memory.write(wqe.addr + qp.recv_off, payload)
            qp.recv_off += n
            nic.counters["send_bytes"] += n
            if end:
                nic.counters["send_msgs"] += 1
                data = (bytes(wqe.buf[:qp.recv_off]) if wqe.addr is None
                        else nic.memory.read(wqe.addr, qp.recv_off))
                nic._complete(qp, wqe, WcOpcode.RECV, qp.recv_off, imm, WcStatus.SUCCESS, data)
                qp.recv = None
        qp.in_msg = None if end else kind
        if end:
            qp.msn = (qp.msn + 1) & PSN_MASK
        qp.epsn = (qp.epsn + 1) & PSN_MASK
        nic.counters["executed"] += 1
        qp.unacked += 1
        every = nic.behaviour.ack_every
        if every is not None and qp.unacked >= every:
            # coalesced by count: the ACK carries the latest PSN, whether or not it asked
            qp.ack_deadline = None
            return self.coalesced_ack(qp, src_mac)
        if not bth.ack_req:
            return []
        qp.ackreq_seen += 1
        if qp.ackreq_seen % nic.ack_coalesce:
            nic.counters["ack_coalesced"] += 1
            return []
        timer = nic.behaviour.ack_timer_ns
        if nic.answers.now is None or not timer:
            return self.coalesced_ack(qp, src_mac)
        if qp.ack_deadline is None:
            qp.ack_deadline, qp.ack_dst = nic.answers.now + timer, src_mac
        nic.counters["ack_coalesced"] += 1
        return []

    def cancel_ack(self, qp):
        """A cumulative answer goes out: it carries whatever a pending ACK would have."""
        qp.ack_deadline = None
        qp.unacked = 0

    def coalesced_ack(self, qp, src_mac):
        qp.unacked = 0
        return self.send_ack(qp, src_mac)

    def credit(self, qp):
        nic = self.nic
        mode = nic.behaviour.credits
        if mode == "none":
            return SYN_ACK
        if mode == "random":
            return nic._rng.randrange(0x20)
        return credit_code(len(qp.rq))

    def send_ack(self, qp, src_mac):
        """The ACK of ePSN - 1 (every PSN executed), with the faults the behaviour injects."""
        nic = self.nic
        b, rng = nic.behaviour, nic._rng
        nic.counters["ack_tx"] += 1
        ack = self.ack(qp, self.credit(qp), qp.epsn - 1, src_mac)
        out = [ack]
        if b.ghost_ack and rng.random() < b.ghost_ack:
            nic.counters["ack_ghost_tx"] += 1
            ghost = qp.epsn - 1 + (1 << 22) + rng.randrange(1 << 22)
            out.insert(rng.randrange(2), self.ack(qp, self.credit(qp), ghost, src_mac))
        if b.runt and rng.random() < b.runt:
            nic.counters["runt_tx"] += 1
            out.insert(rng.randrange(len(out) + 1), ack[:rng.randrange(1, MIN_FRAME)])
        if b.oversize and rng.random() < b.oversize:
            nic.counters["oversize_tx"] += 1
            out.insert(rng.randrange(len(out) + 1), nic.frames.oversize(ack, rng.randint(
                *b.oversize_len)))
        if b.dup_ack and rng.random() < b.dup_ack:
            nic.counters["ack_dup_tx"] += 1
            if nic.answers.now is None:
                out.append(ack)
            else:
                nic.answers.copies.append(ack)
        return out
