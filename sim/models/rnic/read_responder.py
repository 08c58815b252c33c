"""The RDMA READ responder of the RNIC model: READ requests checked in rxe's order, executed
(the bytes read then), their responses queued per QP and sent one packet per turn through
:meth:`Rnic.next_frames <rocegen.sim.models.rnic.Rnic.next_frames>` with the answers of the QP
behind them, duplicates executed again from the READs kept, and the faults injected into the
responses (:data:`READ_FAULTS`, :meth:`ReadResponder.read_fault`)."""

from collections import deque
from dataclasses import dataclass, field

from rocegen.sim.models.rnic.memory import Access
from rocegen.sim.models.rnic.opcodes import _AETH_OPS, Op
from rocegen.sim.models.rnic.qp import psn_diff
from rocegen.sim.models.rnic.responder import _Fatal
from rocegen.wire import headers as H
from rocegen.wire.roce import ETH_MIN_FRAME, NAK_INV_REQ, NAK_REM_ACCESS, PSN_MASK

__all__ = ["ReadResponder", "READ_FAULTS"]

MIN_FRAME = ETH_MIN_FRAME
#: the READ response faults :meth:`ReadResponder.read_fault` injects
READ_FAULTS = ("drop", "truncate", "extra", "opcode", "length", "psn", "syndrome")


@dataclass(eq=False)
class _ReadRes:
    """A READ executed (an IBTA responder resource): its PSNs and what it may read again."""
    first: int          # wire PSN of its request
    npkts: int
    va: int
    length: int
    rkey: int


@dataclass(eq=False)
class _ReadJob:
    """The responses of one READ (or of a duplicate executed again), sent one at a time."""
    psn: int            # wire PSN of the first response
    data: bytes         # the bytes read (at execution)
    msn: int
    src_mac: str
    ready_at: float | None      # the first response may leave then (None: at once)
    new: bool           # a new READ (it holds a place of max_dest_rd_atomic)
    npkts: int
    end: int            # slots: npkts, one less (truncate) or one more (extra)
    faults: dict = field(default_factory=dict)  # kind -> (packet index, value)
    i: int = 0          # next slot
    extra: deque = field(default_factory=deque)  # fault copies to send before the next slot

    def responses_left(self):
        """Response packets still to send (copies aside)."""
        drop = self.faults.get("drop")
        return self.end - self.i - (drop is not None and self.i <= drop[0] < self.end)

    def left(self):
        """Frames still to send (fault copies not drawn yet aside)."""
        return self.responses_left() + len(self.extra)


class ReadResponder:
    """The READ responder of ``nic`` (:class:`~rocegen.sim.models.rnic.Rnic`) on all its QPs."""

    def __init__(self, nic):
        self.nic = nic
        self.faults = []                # [qpn or None, kind, packet, value, count] (read_fault)

    def read_fault(self, kind, *, packet=0, value=None, qpn=None, count=1):
        """Spoil the responses of the next ``count`` READs the responder executes (new ones and
        duplicates) on QP ``qpn`` (None: on any QP), one fault ``kind`` of :data:`READ_FAULTS`
        each, on response packet number ``packet`` (from 0; negative: from the end, -1 the
        last):

        * ``"drop"``: that packet is not sent (a lost response);
        * ``"truncate"``: too few packets: the one before the last is sent as the LAST (as the
          ONLY if it is the first) and the last is not sent; a one-packet READ sends nothing;
        * ``"extra"``: too many: a copy of the last packet follows it with the next PSN;
        * ``"opcode"``: that packet is sent with BTH opcode ``value`` (with an AETH when that
          opcode has one);
        * ``"length"``: it carries ``value`` payload bytes more (0xEE) or, negative, fewer;
        * ``"psn"``: its PSN is moved by ``value``;
        * ``"syndrome"``: its AETH syndrome is ``value`` (on FIRST/LAST/ONLY).

        Faults queue up in the order given; each applied one counts ``read_fault_tx``."""
        if kind not in READ_FAULTS:
            raise ValueError(f"read fault must be one of {READ_FAULTS}, not {kind!r}")
        if kind in ("opcode", "length", "psn", "syndrome") and not isinstance(value, int):
            raise ValueError(f"read fault {kind!r} needs an integer value, not {value!r}")
        if kind in ("opcode", "syndrome") and not 0 <= value <= 0xFF:
            raise ValueError(f"read fault {kind!r}: value must be 0..255, not {value!r}")
        if not isinstance(packet, int) or count < 1:
            raise ValueError("packet must be an integer and count >= 1")
        self.faults.append([qpn, kind, packet, value, count])

    def take_faults(self, qp, npkts):
        """The faults (kind -> (packet index, value)) of the next READ executed on ``qp``."""
        for f in self.faults:
            qpn, kind, packet, value, _ = f
            if qpn is not None and qpn != qp.qpn:
                continue
            f[4] -= 1
            if not f[4]:
                self.faults.remove(f)
            index = packet + npkts if packet < 0 else packet
            if kind == "truncate":
                index = npkts - 1
            elif kind == "extra":
                index = npkts
            elif not 0 <= index < npkts:
                return {}
            return {kind: (index, value)}
        return {}

    def check(self, va, rkey, dlen):
        """The region a READ of ``dlen`` bytes at ``va`` with ``rkey`` may read (None for 0
        bytes: nothing is checked), or _Fatal (remote access error)."""
        nic = self.nic
        if not dlen:
            return None
        mr = nic.memory.by_rkey(rkey)
        if mr is None:
            raise _Fatal(NAK_REM_ACCESS, "err_rkey", f"R_Key {rkey:#x} is not registered")
        if not mr.access & Access.REMOTE_READ:
            raise _Fatal(NAK_REM_ACCESS, "err_access", f"region of R_Key {rkey:#x} has no "
                         "REMOTE_READ access")
        if not mr.contains(va, dlen):
            raise _Fatal(NAK_REM_ACCESS, "err_bounds", f"[{va:#x}, +{dlen:#x}) is outside the "
                         f"region [{mr.addr:#x}, +{mr.length:#x}) of R_Key {rkey:#x}")
        return mr

    @staticmethod
    def resources_held(qp):
        """Responder resources (of ``max_dest_rd_atomic``) ``qp`` holds: its new READs whose
        responses are not all sent (an atomic is answered at once and holds none after)."""
        return sum(isinstance(j, _ReadJob) and j.new and j.responses_left() > 0
                   for j in qp.rsp_out)

    def job(self, qp, psn, va, dlen, mr, src_mac, new):
        """Queue the responses of a READ of ``dlen`` bytes at ``va`` (in ``mr``) from PSN
        ``psn``: they leave through :meth:`Rnic.next_frames`, after the response delay."""
        nic = self.nic
        npkts = max(1, -(-dlen // qp.pmtu))
        data = bytes(mr.buf[va - mr.addr:va - mr.addr + dlen]) if dlen else b""
        now = nic.answers.now
        ready = None if now is None else nic.answers.ready_time(now)
        faults = self.take_faults(qp, npkts)
        nic.counters["read_fault_tx"] += len(faults)
        end = npkts - ("truncate" in faults) + ("extra" in faults)
        qp.rsp_out.append(_ReadJob(psn=psn, data=data, msn=qp.msn, src_mac=src_mac,
                                   ready_at=ready, new=new, npkts=npkts, end=end, faults=faults))
        return []

    def read(self, qp, psn, ext, payload, padcnt, where, src_mac):
        """A new READ request (PSN = ePSN), in rxe's order of checks."""
        nic = self.nic
        if qp.in_msg is not None:
            raise _Fatal(NAK_INV_REQ, "err_opcode_seq", "opcode out of sequence: an "
                         f"{qp.in_msg} message is in progress")
        queued = self.resources_held(qp)
        if queued >= qp.max_dest_rd_atomic:
            raise _Fatal(NAK_INV_REQ, "err_rd_atomic", f"{queued} READs queued already "
                         f"(max_dest_rd_atomic {qp.max_dest_rd_atomic})")
        if payload or padcnt:
            raise _Fatal(NAK_INV_REQ, "err_length", f"READ request with {len(payload)} payload "
                         f"bytes and PadCnt {padcnt}")
        reth = H.RETH.unpack(ext)
        va, rkey, dlen = reth["va"], reth["rkey"], reth["dma_len"]
        if nic.behaviour.max_msg is not None and dlen > nic.behaviour.max_msg:
            raise _Fatal(NAK_INV_REQ, "err_msg_size", f"RETH DMA length {dlen:#x} is more than "
                         f"the largest message ({nic.behaviour.max_msg:#x})")
        mr = self.check(va, rkey, dlen)
        npkts = max(1, -(-dlen // qp.pmtu))
        qp.msn = (qp.msn + 1) & PSN_MASK
        qp.epsn = (qp.epsn + npkts) & PSN_MASK
        nic.counters["executed"] += 1
        nic.counters["read_rx"] += 1
        nic.responder.cancel_ack(qp)            # the responses' AETH acknowledge what came before
        qp.rd_res.append(_ReadRes(psn, npkts, va, dlen, rkey))
        while len(qp.rd_res) > max(qp.max_dest_rd_atomic, 1):
            qp.rd_res.popleft()
        return self.job(qp, psn, va, dlen, mr, src_mac, True)

    def duplicate(self, qp, psn, ext, where, src_mac):
        """A READ request behind ePSN: executed again from its own PSN when one of the READs
        kept (the last ``max_dest_rd_atomic``) holds that PSN and the request asks for a part
        of what that READ read, with its R_Key (rxe); else dropped."""
        nic = self.nic
        reth = H.RETH.unpack(ext)
        va, rkey, dlen = reth["va"], reth["rkey"], reth["dma_len"]
        res = next((r for r in reversed(qp.rd_res) if 0 <= psn_diff(psn, r.first) < r.npkts),
                   None)
        if res is None:
            return nic._drop("read_dup_drop", f"{where}: a duplicate READ of no READ kept")
        if va < res.va or va + dlen > res.va + res.length or rkey != res.rkey:
            return nic._drop("read_dup_drop", f"{where}: a duplicate READ of "
                              f"[{va:#x}, +{dlen:#x}) R_Key {rkey:#x}, not inside the READ of "
                              f"[{res.va:#x}, +{res.length:#x}) R_Key {res.rkey:#x} at PSN "
                              f"{res.first:#08x}")
        mr = self.check(va, rkey, dlen)
        nic.counters["read_dup"] += 1
        # (rxe's duplicate_request: the kept READ now starts where this one does, its length
        # kept: a later duplicate that starts before it is dropped)
        res.va = va
        return self.job(qp, psn, va, dlen, mr, src_mac, False)

    def ready(self, qp, now):
        """Frames of ``qp``'s READ responses (and answers behind them) that may leave at
        ``now``."""
        n = 0
        for item in qp.rsp_out:
            if not isinstance(item, _ReadJob):
                n += 1
            elif item.ready_at is None or now is None or item.ready_at <= now:
                n += item.left()
            else:
                break
        return n


    def ready_at(self, qp):
        """When the READ responses at the head of ``qp``'s answers may leave, if their response
        delay is not over yet; else None."""
        now = self.nic.answers.now
        head = next((j for j in qp.rsp_out if not isinstance(j, _ReadJob) or j.left()), None)
        if isinstance(head, _ReadJob) and head.ready_at is not None and (
                now is None or head.ready_at > now):
            return head.ready_at
        return None

    def left(self, qp):
        """Frames of ``qp``'s READ responses and the answers behind them still to send."""
        return sum(item.left() if isinstance(item, _ReadJob) else 1 for item in qp.rsp_out)

    def frame(self, qp, now):
        """The next frame of ``qp``'s READ responses and the answers behind them, or None."""
        while qp.rsp_out:
            item = qp.rsp_out[0]
            if not isinstance(item, _ReadJob):
                return qp.rsp_out.popleft()
            if item.ready_at is not None and now is not None and item.ready_at > now:
                return None
            frame = item.extra.popleft() if item.extra else None
            if frame is None and item.i < item.end:
                frame = self.slot(qp, item)
            if not item.left():
                qp.rsp_out.popleft()        # its last frame: the next item may go now
            if frame is not None:
                return frame
        return None

    def slot(self, qp, job):
        """Response packet ``job.i`` (faults applied), or None if a fault drops it."""
        nic = self.nic
        k = job.i
        job.i += 1
        faults = job.faults
        n = job.npkts
        if "drop" in faults and faults["drop"][0] == k:
            return None
        if k == n:                          # "extra": the last packet again, next PSN
            k = n - 1
        last = k == n - 1
        first = k == 0
        if "truncate" in faults and k == n - 2:
            last = True
        opcode = (Op.RDMA_READ_RESPONSE_ONLY if first and last else
                  Op.RDMA_READ_RESPONSE_FIRST if first else
                  Op.RDMA_READ_RESPONSE_LAST if last else Op.RDMA_READ_RESPONSE_MIDDLE)
        psn = job.psn + job.i - 1
        payload = job.data[k * qp.pmtu:(k + 1) * qp.pmtu]
        syndrome = None
        fault = next(((kind, v) for kind, (i, v) in faults.items() if i == job.i - 1), None)
        if fault is not None:
            kind, value = fault
            if kind == "opcode":
                opcode = value
            elif kind == "length":
                payload = payload + b"\xee" * value if value > 0 else payload[:len(payload) + value]
            elif kind == "psn":
                psn += value
            elif kind == "syndrome":
                syndrome = value
        pad = (-len(payload)) & 3
        ext = b""
        if opcode in _AETH_OPS:
            ext = H.AETH.pack(syndrome=nic.responder.credit(qp) if syndrome is None else syndrome,
                              msn=job.msn)
        frame = nic.frames.roce(qp, job.src_mac, opcode, psn, ext + payload + bytes(pad),
                                 padcnt=pad)
        if k == job.i - 1:
            nic.counters["read_resp_tx"] += 1
            nic.counters["read_bytes"] += len(payload)
        self.response_faults(job, frame)
        return frame

    def response_faults(self, job, frame):
        """The behaviour's random faults on a READ response: a runt and an oversize copy, a
        second copy (all sent right after it)."""
        nic = self.nic
        b, rng = nic.behaviour, nic._rng
        if b.runt and rng.random() < b.runt:
            nic.counters["runt_tx"] += 1
            job.extra.append(frame[:rng.randrange(1, MIN_FRAME)])
        if b.oversize and rng.random() < b.oversize:
            nic.counters["oversize_tx"] += 1
            job.extra.append(nic.frames.oversize(frame, rng.randint(*b.oversize_len)))
        if b.dup_ack and rng.random() < b.dup_ack:
            nic.counters["read_dup_tx"] += 1
            job.extra.append(frame)
