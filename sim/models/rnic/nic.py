"""The host RNIC model composed: :class:`Rnic` holds the parts (memory, completion queues, ARP,
frame builder, receive path, responder, READ responder, atomic responder, requester, the answers
in time), offers the verbs-like calls and the frames in and out, and keeps the counters and the
log that every part writes to. The model as a whole is described in :mod:`rocegen.sim.models.rnic`."""

import random

from rocegen.sim.models.rnic import requester
from rocegen.sim.models.rnic.answers import Answers
from rocegen.sim.models.rnic.arp import Arp
from rocegen.sim.models.rnic.atomic_responder import AtomicResponder
from rocegen.sim.models.rnic.behaviour import Behaviour
from rocegen.sim.models.rnic.counters import COUNTERS, STRICT_CHECKS
from rocegen.sim.models.rnic.cq import Completion, CompletionQueue, WcOpcode, WcStatus
from rocegen.sim.models.rnic.frames import FrameBuilder
from rocegen.sim.models.rnic.ingress import Ingress
from rocegen.sim.models.rnic.memory import Access, Memory
from rocegen.sim.models.rnic.qp import QueuePair, RecvWqe
from rocegen.sim.models.rnic.read_responder import ReadResponder
from rocegen.sim.models.rnic.requester import DEFAULT_RD_ATOMIC, DEFAULT_TIMEOUT, DEFAULT_WINDOW, SendQueue
from rocegen.sim.models.rnic.responder import Responder
from rocegen.wire.roce import PMTUS, PSN_MASK

__all__ = ["Rnic"]


class Rnic:
    """The host RNIC on one Ethernet port: ARP + the RoCEv2 RC responder on UDP 4791, and the
    RC requester on the same QPs (:meth:`post_send`, :meth:`next_frames`, :attr:`send_cq`).

    ``mac``/``ip``: the NIC's addresses. ``strict``: raise AssertionError on malformed frames,
    requester protocol violations and ACKs of PSNs never sent (:data:`STRICT_CHECKS`).
    ``behaviour``: a
    :class:`Behaviour` (default: a ConnectX's). ``ack_coalesce``: ACK only every N-th AckReq
    packet of a QP. ``vlan``/``pcp``: only frames tagged with that VLAN ID are taken,
    answers are tagged. ``udp_ports``: other UDP ports whose datagrams are collected in
    :attr:`udp_rx`. ``migreq``/``ttl``: header fields of the frames sent.

    The parts, one role each: :attr:`memory` (the regions), :attr:`cq` and :attr:`send_cq` (the
    completion queues), :attr:`arp`, :attr:`frames` (what the NIC sends), :attr:`ingress` (the
    checks of what it takes), :attr:`responder`, :attr:`reads` (the READ responder),
    :attr:`atomics` (the atomic responder, 64-bit values little-endian as on a host), the
    requester (:mod:`~rocegen.sim.models.rnic.requester`, its state in each QP's ``sq``) and
    :attr:`answers` (the answers in time).
    """

    def __init__(self, mac, ip, *, strict=False, behaviour=None, ack_coalesce=1, vlan=None,
                 pcp=0, migreq=1, ttl=64, udp_ports=()):
        if ack_coalesce < 1:
            raise ValueError("ack_coalesce must be >= 1")
        if behaviour is None:
            behaviour = Behaviour()
        if not isinstance(behaviour, Behaviour):
            raise TypeError(f"behaviour must be a Behaviour, not {behaviour!r}")
        self.behaviour = behaviour
        self._rng = random.Random(behaviour.seed)
        self.strict = strict
        self.ack_coalesce = ack_coalesce
        self.udp_ports = tuple(udp_ports)
        self.counters = dict.fromkeys(COUNTERS, 0)
        #: every drop / NAK cause, in order, as a message (for debugging a failing bench)
        self.log = []
        self.qps = {}
        #: receive completions
        self.cq = CompletionQueue()
        #: send completions of the requester (:meth:`post_send`), in order per QP
        self.send_cq = CompletionQueue()
        self._rr = 0                    # round robin of next_frames over the QPs
        #: ``(src_ip, src_port, dst_port, payload)`` of datagrams to ``udp_ports``
        self.udp_rx = []
        self.memory = Memory()
        self.answers = Answers(behaviour, self._rng)
        self.arp = Arp(self)
        self.frames = FrameBuilder(mac, ip, vlan=vlan, pcp=pcp, ttl=ttl, migreq=migreq,
                                   arp_cache=self.arp.cache)
        self.ingress = Ingress(self)
        self.responder = Responder(self)
        self.reads = ReadResponder(self)
        self.atomics = AtomicResponder(self)

    # ------------------------------------------------------------------ addresses and state

    @property
    def mac(self):
        return self.frames.mac

    @property
    def ip(self):
        return self.frames.ip

    @property
    def vlan(self):
        return self.frames.vlan

    @property
    def pcp(self):
        return self.frames.pcp

    @property
    def migreq(self):
        return self.frames.migreq

    @property
    def ttl(self):
        return self.frames.ttl

    @property
    def arp_cache(self):
        """IP -> MAC learned from ARP."""
        return self.arp.cache

    @property
    def mrs(self):
        """The memory regions registered."""
        return self.memory.regions

    @property
    def _ip_id(self):
        """IPv4 identification of the latest frame sent."""
        return self.frames.ip_id

    # ------------------------------------------------------------------ verbs-like setup

    def create_qp(self, qpn, *, peer_qpn, peer_ip, peer_mac=None, epsn, pmtu, pkey=0xFFFF,
                  min_rnr_timer=1, udp_sport=None, dscp=0, ecn=0, sq_psn=None,
                  timeout=DEFAULT_TIMEOUT, retry_cnt=7, rnr_retry=7, window=DEFAULT_WINDOW,
                  ack_req_every=64, access=Access.REMOTE_WRITE,
                  max_rd_atomic=DEFAULT_RD_ATOMIC, max_dest_rd_atomic=DEFAULT_RD_ATOMIC):
        """An RC QP ready to receive (RTR) from ``peer_qpn`` at ``peer_ip``, expecting PSN
        ``epsn`` first, and ready to send (RTS, :meth:`post_send`). ``min_rnr_timer``: the timer
        code sent in RNR NAKs (default 1 = 10 us, short for simulations). ``udp_sport``: source
        port of the ACKs and requests (default: hashed from the QP numbers into
        0xC000..0xFFFF). ``dscp``/``ecn``: IPv4 TOS of the ACKs and requests.

        The requester (:mod:`~rocegen.sim.models.rnic.requester`): ``sq_psn``, the PSN of its
        first packet (default ``epsn``: both directions start from the same PSN);
        ``timeout``, the retransmit timeout code (4.096 us x 2^code, 0 = never; default 8 =
        1.05 ms, short for simulations); ``retry_cnt`` and ``rnr_retry`` (0..7, rnr_retry 7 =
        forever); ``window``, the most packets outstanding (1..2^23 - 1; default 1024, 4 MiB at
        PMTU 4096, longer than any simulated round trip at 100 Gb/s, so that like a ConnectX,
        whose window is its send queue, the requester is not slowed down by ACK latency);
        ``ack_req_every``, AckReq also on every N-th packet of a message (default 64, rxe's).

        RDMA READ: ``access`` (the verbs ``qp_access_flags``) must hold
        :attr:`Access.REMOTE_READ` for the QP to answer READs (default: REMOTE_WRITE only, and a
        READ is NAKed invalid request as an unsupported opcode; a WRITE needs REMOTE_WRITE);
        ``max_dest_rd_atomic`` (0..255, default 16), the READs the responder queues;
        ``max_rd_atomic`` (1..255, default 16), the READs its requester keeps outstanding.

        Atomics: ``access`` must hold :attr:`Access.REMOTE_ATOMIC` for the QP to execute them
        (else NAK invalid request), and the region REMOTE_ATOMIC too (else NAK remote access).
        They count against ``max_dest_rd_atomic`` and ``max_rd_atomic`` with the READs, and the
        responder keeps the results of its last ``max_dest_rd_atomic`` atomics to answer
        duplicates with."""
        if not 2 <= qpn <= PSN_MASK:
            raise ValueError(f"QPN {qpn:#x} out of range (2..0xFFFFFF; 0 and 1 are special)")
        if qpn in self.qps:
            raise ValueError(f"QP {qpn:#x} exists")
        if not 0 <= peer_qpn <= PSN_MASK or not 0 <= epsn <= PSN_MASK:
            raise ValueError("peer_qpn and epsn are 24-bit numbers")
        if pmtu not in PMTUS:
            raise ValueError(f"PMTU {pmtu} is not one of {PMTUS}")
        if not 0 <= min_rnr_timer <= 31:
            raise ValueError("min_rnr_timer is a 5-bit code")
        sq_psn = epsn if sq_psn is None else sq_psn
        if not 0 <= sq_psn <= PSN_MASK:
            raise ValueError("sq_psn is a 24-bit number")
        if not 0 <= timeout <= 31:
            raise ValueError("timeout is a 5-bit code (0: never)")
        if not 0 <= retry_cnt <= 7 or not 0 <= rnr_retry <= 7:
            raise ValueError("retry_cnt and rnr_retry are 0..7")
        if not 1 <= window < 1 << 23:
            raise ValueError("window must be 1..2^23 - 1 packets")
        if ack_req_every < 1:
            raise ValueError("ack_req_every must be >= 1")
        if not 1 <= max_rd_atomic <= 255 or not 0 <= max_dest_rd_atomic <= 255:
            raise ValueError(f"max_rd_atomic must be 1..255 and max_dest_rd_atomic 0..255, not "
                             f"{max_rd_atomic!r} and {max_dest_rd_atomic!r}")
        access = Access(access)
        if udp_sport is None:
            h = (qpn * 0x9E3779B1 ^ peer_qpn * 0x85EBCA6B) & 0xFFFFFFFF
            udp_sport = 0xC000 | ((h ^ (h >> 14) ^ (h >> 28)) & 0x3FFF)
        qp = QueuePair(qpn=qpn, peer_qpn=peer_qpn, peer_ip=peer_ip,
                       peer_mac=peer_mac.lower() if peer_mac else None, epsn=epsn, pmtu=pmtu,
                       pkey=pkey, min_rnr_timer=min_rnr_timer, udp_sport=udp_sport,
                       tos=(dscp << 2) | ecn, access=access,
                       max_dest_rd_atomic=max_dest_rd_atomic)
        qp.sq = SendQueue(sq_psn=sq_psn, timeout=timeout, retry_cnt=retry_cnt,
                          rnr_retry=rnr_retry, window=window, ack_req_every=ack_req_every,
                          max_rd_atomic=max_rd_atomic)
        self.qps[qpn] = qp
        return qp

    def destroy_qp(self, qpn):
        """Remove a QP (its receive WQEs disappear without completions, as ibv_destroy_qp)."""
        del self.qps[qpn]

    def register_mr(self, addr, length, rkey, access=Access.LOCAL_WRITE | Access.REMOTE_WRITE, *,
                    fill=0):
        """A memory region of ``length`` bytes at virtual address ``addr``, every byte ``fill``.
        Regions must not overlap (each has its own backing bytearray) and R_Keys are unique.
        ``access``: :class:`Access` flags; RDMA READs need REMOTE_READ (not in the default),
        the local buffer of a READ posted by the requester LOCAL_WRITE."""
        return self.memory.register(addr, length, rkey, access, fill)

    def deregister_mr(self, rkey):
        self.memory.deregister(rkey)

    def post_recv(self, qpn, buffer_len, wr_id, *, addr=None):
        """Post a receive WQE of ``buffer_len`` bytes: a private buffer (its contents end up in
        the completion's ``data``), or ``addr`` inside a region with LOCAL_WRITE access. On a
        QP in the error state the WQE completes at once with WR_FLUSH_ERR."""
        qp = self.qps[qpn]
        if addr is not None:
            mr = self.memory.at(addr, buffer_len)
            if mr is None or not mr.access & Access.LOCAL_WRITE:
                raise ValueError(f"receive buffer [{addr:#x}, +{buffer_len}) is not in a region "
                                 "with LOCAL_WRITE access")
        wqe = RecvWqe(wr_id, buffer_len, addr, None if addr is not None else bytearray(buffer_len))
        if qp.state == "ERR":
            self._complete(qp, wqe, WcOpcode.RECV, 0, None, WcStatus.WR_FLUSH_ERR)
        else:
            qp.rq.append(wqe)

    def post_send(self, qpn, opcode, *, data=None, length=None, remote_addr=0, rkey=0, imm=None,
                  wr_id=0, local_addr=None, swap_add=None, compare=None):
        """Post a send work request on QP ``qpn``: ``opcode`` a :class:`SendOp` or its name
        (``"WRITE"``, ``"WRITE_IMM"``, ``"SEND"``, ``"SEND_IMM"``, ``"READ"``); the message is
        ``data`` (bytes) or ``length`` zero bytes; ``remote_addr`` and ``rkey`` go in the RETH
        of a WRITE or READ; ``imm`` (32 bits) is required by the _IMM opcodes and refused by the
        others. A READ takes ``length`` bytes at ``remote_addr`` of the peer into host memory
        at ``local_addr`` (inside a region with LOCAL_WRITE access), or into a buffer of its own
        when ``local_addr`` is None; either way its completion carries them in ``data``. An
        atomic (``"FETCH_ADD"``, ``"COMPARE_SWAP"``) works on the 8 bytes at ``remote_addr``
        with ``swap_add`` (and ``compare``); the original value (8 bytes, little-endian as on a
        host) lands at ``local_addr`` or in a buffer of its own, and in the completion's
        ``data`` (opcode FETCH_ADD or COMP_SWAP).
        Its packets leave through :meth:`next_frames`; its completion (opcode SEND, RDMA_WRITE
        or RDMA_READ) comes in :attr:`send_cq`, in the order of posting. On a QP in the error
        state it completes at once with WR_FLUSH_ERR. Returns the
        :class:`~rocegen.sim.models.rnic.requester.SendWr`."""
        return requester.post(self, self.qps[qpn], opcode, data=data, length=length,
                              remote_addr=remote_addr, rkey=rkey, imm=imm, wr_id=wr_id,
                              local_addr=local_addr, swap_add=swap_add, compare=compare)

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
        self.reads.read_fault(kind, packet=packet, value=value, qpn=qpn, count=count)

    def next_frames(self, now=None, budget=None):
        """The frames of the NIC's transmit line that may leave at ``now`` (nanoseconds;
        default: the latest time the model was given), at most ``budget`` of them (``None``:
        every one the windows allow): the requester's packets and the READ responses (with the
        answers of their QP queued behind them), taking one packet of each QP's requester and
        of each QP's READ responses in turn. A testbench calls it whenever its link can take
        frames, e.g. with ``budget=1`` each time the previous frame is on the wire; the
        retransmit timers run from the ``now`` a packet is taken. Timers that ran out by ``now``
        are handled first (:meth:`next_due` says when one will)."""
        if now is None:
            now = self.answers.now
        else:
            self.answers.advance(now)
        self._req_tick(now)
        out = []
        entries = []
        for qp in self.qps.values():
            if qp.rsp_out:
                entries.append((qp, True))
            if qp.state != "ERR":
                entries.append((qp, False))
        if not entries:
            return out
        start, idle = self._rr % len(entries), 0
        i = start
        while idle < len(entries) and (budget is None or len(out) < budget):
            qp, rsp = entries[i]
            i = (i + 1) % len(entries)
            frame = None
            if rsp:
                frame = self.reads.frame(qp, now)
            elif qp.state != "ERR" and qp.sq.ready(now, 1):
                frame = requester.frame(self, qp, now)
            if frame is None:
                idle += 1
                continue
            idle = 0
            out.append(frame)
            self._rr = i
        self.counters["tx_frames"] += len(out)
        return out

    def tx_pending(self, qpn=None, now=None):
        """How many packets :meth:`next_frames` could give at ``now`` (default: the latest time
        given) on QP ``qpn`` or on all: the window and RNR waits allowing, READ responses whose
        delay is over (and the answers behind them), timers not run."""
        now = self.answers.now if now is None else now
        qps = self.qps.values() if qpn is None else [self.qps[qpn]]
        return sum((qp.sq.ready(now) if qp.state != "ERR" else 0) + self.reads.ready(qp, now)
                   for qp in qps)

    def send_outstanding(self, qpn=None):
        """Send work requests posted and not completed yet, on QP ``qpn`` or on all."""
        qps = self.qps.values() if qpn is None else [self.qps[qpn]]
        return sum(qp.sq.outstanding for qp in qps)

    def poll_send_cq(self, max_entries=None):
        """Remove and return the oldest send completions (all of them by default)."""
        return self.send_cq.poll(max_entries)

    def rnr_for(self, n, qpn=None):
        """Refuse (RNR NAK) the next ``n`` packets that would consume a receive WQE (SEND
        FIRST/ONLY, the last packet of an RDMA WRITE with immediate), even with WQEs posted:
        on any QP, or only on ``qpn``. A retry of a refused packet counts as a new one."""
        if qpn is None:
            self.responder.rnr_refuse = n
        else:
            self.qps[qpn].rnr_refuse = n

    # ------------------------------------------------------------------ read-back helpers

    def expected_psn(self, qpn):
        return self.qps[qpn].epsn

    def msn(self, qpn):
        return self.qps[qpn].msn

    def qp_state(self, qpn):
        return self.qps[qpn].state

    def read_mem(self, addr, length):
        return self.memory.read(addr, length)

    def write_mem(self, addr, data):
        self.memory.write(addr, data)

    def poll_cq(self, max_entries=None):
        """Remove and return the oldest completions (all of them by default)."""
        return self.cq.poll(max_entries)

    # ------------------------------------------------------------------ frames the RNIC sends

    def arp_request(self, ip):
        """The ARP request the RNIC broadcasts to resolve ``ip`` (the reply fills arp_cache)."""
        return self.arp.request(ip)

    def udp_frame(self, dst_ip, sport, dport, payload, *, dst_mac=None):
        """A plain UDP datagram from the host (e.g. a connection-manager request), with a valid
        UDP checksum. ``dst_mac`` defaults to the ARP cache entry of ``dst_ip``."""
        dst_mac = dst_mac or self.arp_cache.get(dst_ip)
        if dst_mac is None:
            raise ValueError(f"no MAC known for {dst_ip}: give dst_mac or resolve it by ARP")
        return self.frames.udp(dst_mac, dst_ip, sport, dport, payload)

    def ack_frame(self, qpn, syndrome, psn, *, msn=None):
        """An ACKNOWLEDGE frame from QP ``qpn`` with any AETH ``syndrome``, ``psn`` and ``msn``
        (default: the QP's MSN), for a testbench to inject (e.g. a remote operational error or a
        stale ACK). Changes no responder state and counts nothing."""
        qp = self.qps[qpn]
        dst = qp.peer_mac or self.arp_cache.get(qp.peer_ip)
        if dst is None:
            raise ValueError(f"no MAC known for {qp.peer_ip}: give peer_mac or resolve it by ARP")
        return self.frames.ack(qp, syndrome, psn, dst, qp.msn if msn is None else msn)

    # ------------------------------------------------------------------ frames in, in time

    def receive(self, frame, now=None):
        """Take one Ethernet frame (without FCS); return the frames sent in answer. With
        ``now`` (nanoseconds, never decreasing from call to call) the answers are queued with
        their delays and the frames due by ``now`` are returned (:meth:`due`)."""
        frame = bytes(frame)
        self.counters["rx_frames"] += 1
        if now is None:
            self.answers.now = None
            out = self.ingress.ethernet(frame)
            self.counters["tx_frames"] += len(out)
            return out
        self.answers.advance(now)
        self._req_tick(now)
        for f in self.ingress.ethernet(frame):
            self.answers.schedule(f, now)
        self.answers.schedule_copies()
        return self.due(now)

    def due(self, now):
        """The answers whose time has come by ``now`` (nanoseconds), in order: coalesced ACKs
        whose timer ran out are made first. The requester's timers that ran out by ``now`` are
        handled too (its frames come from :meth:`next_frames`)."""
        self.answers.advance(now)
        self._req_tick(now)
        for qp in self.qps.values():
            if qp.ack_deadline is not None and qp.ack_deadline <= now:
                when = qp.ack_deadline
                qp.ack_deadline = None
                for f in self.responder.behind_reads(qp, self.responder.coalesced_ack(qp, qp.ack_dst)):
                    self.answers.schedule(f, when)
                self.answers.schedule_copies()
        out = self.answers.pop_due(now)
        self.counters["tx_frames"] += len(out)
        return out

    def next_due(self):
        """The earliest time (nanoseconds) at which :meth:`due` has a frame to give or a
        requester timer runs out (a retransmit timeout, the end of an RNR wait: after it
        :meth:`next_frames` has frames again), or ``None``."""
        times = [qp.ack_deadline for qp in self.qps.values() if qp.ack_deadline is not None]
        times += [t for t in (qp.sq.next_deadline() for qp in self.qps.values()
                              if qp.state != "ERR") if t is not None]
        times += [t for t in map(self.reads.ready_at, self.qps.values()) if t is not None]
        if self.answers.head() is not None:
            times.append(self.answers.head())
        return min(times, default=None)

    @property
    def pending(self):
        """Answers queued or ACKs pending (timed mode), READ responses not sent yet and the
        answers queued behind them."""
        return len(self.answers) + sum(qp.ack_deadline is not None for qp in self.qps.values()) \
            + sum(self.reads.left(qp) for qp in self.qps.values() if qp.rsp_out)

    def _req_tick(self, now):
        if now is None:
            return
        for qp in list(self.qps.values()):
            sq = qp.sq
            if (sq.deadline is not None or sq.rnr_until is not None) and qp.state != "ERR":
                requester.tick(self, qp, now)

    # ------------------------------------------------------------------ what the parts share

    def _event(self, counter, message):
        """Count ``counter``; in strict mode raise if it is a strict check."""
        self.counters[counter] += 1
        self.log.append(f"{counter}: {message}")
        if self.strict and counter in STRICT_CHECKS:
            raise AssertionError(f"RNIC {self.ip}: {message} [{counter}]")

    def _drop(self, counter, message):
        self._event(counter, message)
        return []

    def _complete(self, qp, wqe, opcode, byte_len, imm, status, data=None):
        self.cq.append(Completion(wqe.wr_id, opcode, byte_len, imm, status, qp.qpn, data))
        self.counters["completions"] += 1

    def _complete_send(self, qp, wr, status):
        data = None
        if wr.responded:
            opcode = (WcOpcode.RDMA_READ if wr.is_read else WcOpcode.COMP_SWAP
                      if wr.op == "COMPARE_SWAP" else WcOpcode.FETCH_ADD)
            if status == "SUCCESS":
                data = (bytes(wr.buf) if wr.buf is not None
                        else self.memory.read(wr.local_addr, wr.read_len) if wr.read_len else b"")
        else:
            opcode = WcOpcode.RDMA_WRITE if wr.is_write else WcOpcode.SEND
        self.send_cq.append(Completion(wr.wr_id, opcode, wr.length, None, WcStatus(status),
                                       qp.qpn, data))
        self.counters["req_completions"] += 1

    def _qp_error(self, qp):
        """The QP goes to the error state: its receive WQEs (the one being filled included) and
        send work requests complete with WR_FLUSH_ERR."""
        qp.state = "ERR"
        if qp.recv is not None:
            self._complete(qp, qp.recv, WcOpcode.RECV, qp.recv_off, None, WcStatus.WR_FLUSH_ERR)
            qp.recv = None
        while qp.rq:
            self._complete(qp, qp.rq.popleft(), WcOpcode.RECV, 0, None, WcStatus.WR_FLUSH_ERR)
        qp.in_msg = None
        qp.sq.flush("WR_FLUSH_ERR", lambda wr, status: self._complete_send(qp, wr, status))
