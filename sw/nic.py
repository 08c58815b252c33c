"""The RDMA NIC behind the host agent: a real one through pyverbs (:class:`VerbsNic`), or the
simulated one (:class:`SimNic`): the project's RNIC model on a simulated Ethernet wire, as
``rocegen sim serve`` offers it.

Both offer what the agent needs of an RC QP, as the responder of the FPGA's traffic (its WRITEs
and SENDs, and its RDMA READs of the host's memory) and as the requester of the host's own
WRITEs, SENDs, READs and atomics into / from the FPGA:

``local_ip``
    the IPv4 address RoCE packets reach us at (goes in OPEN_QP's ``loc_ip``).
``create_qp(recv_depth)``
    a QP in RESET; returns its number.
``register(length)``
    a memory region with local write, remote write and remote read access, and remote atomic
    access when the NIC offers atomics: ``(addr, rkey)``.
``atomic_cap()``
    the NIC's atomics: ``"HCA"`` (atomic against the atomics of this NIC, what a ConnectX and
    rxe state), ``"GLOB"`` (against every writer of the memory too), or None (no atomics: a
    host QP cannot issue them, and its memory does not take the peer's).
``read_limits()``
    ``(rd_atomic, rd_depth)``: the most RDMA READs a QP of this NIC can have outstanding
    towards its peer, and the most it accepts from its peer at once (what the host states in
    OPEN_QP, :func:`rocegen.wire.cm.with_read_depths`).
``connect_qp(qpn, fpga_qpn, fpga_ip, epsn, pmtu, *, rd_atomic, rd_depth, timeout, retry_cnt, rnr_retry)``
    to RTR then RTS, expecting PSN ``epsn`` first from the FPGA's QP ``fpga_qpn`` and sending
    from PSN ``epsn`` too (the connection manager sets both directions of the FPGA's QP to the
    same PSN); ``rd_atomic`` READs and atomics of ours outstanding at most (``max_rd_atomic``),
    ``rd_depth`` of the FPGA's accepted at once (``max_dest_rd_atomic``); the QP takes the
    FPGA's RDMA WRITEs and READs, and its atomics when the NIC offers them (``atomic_cap()``;
    remote atomic access: the place for an FPGA that issues atomics); ``timeout`` (the local ACK timeout
    code 0..31, 4.096 us x 2^code, 0 = infinite), ``retry_cnt`` and ``rnr_retry`` (0..7, 7 = RNR
    retries forever) of our requester, None: the NIC's own (:data:`VERBS_TIMEOUT`, 7, 7 on an
    RDMA device; :data:`SIM_TIMEOUT`, 7, 7 on the simulated NIC).
``post_recv(qpn, wr_id, addr, length)``
    a receive buffer inside the region.
``poll(max_entries)``
    receive completions as :class:`Cpl`.
``post_send(qpn, wr_id, op, addr, length, *, remote_addr=0, rkey=0, imm=None, swap_add=None, compare=None)``
    a send work request (``op``: ``WRITE``, ``WRITE_IMM``, ``SEND``, ``SEND_IMM``: the message is
    the ``length`` bytes at ``addr`` of a region, read when the NIC sends them; ``READ``: the
    ``length`` bytes at ``remote_addr`` of the peer land at ``addr``, in place once the READ
    has completed; an atomic of :data:`~rocegen.wire.atomics.ATOMIC_VERBS`, ``length`` 8:
    ``FETCH_ADD`` adds ``swap_add`` to the 8 bytes at ``remote_addr`` of the peer,
    ``COMPARE_SWAP`` writes ``swap_add`` there when they equal ``compare``; the original
    value lands at ``addr`` in this host's byte order (:attr:`result_order`) once the atomic
    has completed).
``result_order``
    the byte order of an atomic's original value in local memory: the host CPU's (rxe and the
    verbs providers store it so), ``"little"`` on the simulated NIC (the NIC model's).
``poll_send(max_entries, timeout)``
    send completions as :class:`SendCpl`, in order per QP.
``read(addr, length)`` / ``fill(addr, length, value)`` / ``write(addr, data)``
    the region's memory.
``destroy_qp(qpn)``, ``counters()``, ``close()``.
``cm_connect(fpga_ip, port, *, recv_depth, rd_atomic, rd_depth, peer_retry_cnt, ...)``
    a QP connected through the InfiniBand CM as librdmacm's ``rdma_connect`` does it (a REQ to
    QP1 of ``fpga_ip`` for TCP port ``port``, service ID ``0x0106 << 16 | port``; the REP
    answered with an RTU), instead of :meth:`create_qp` and :meth:`connect_qp`: a
    :class:`CmConn` with the QP, the PSNs, the path MTU and READ depths the CM settled and the
    FPGA's memory region from the REP's private data (:func:`rocegen.wire.ibcm.rep_region`).
    ``rd_atomic`` / ``rd_depth`` are the initiator depth and responder resources asked for,
    ``peer_retry_cnt`` / ``peer_rnr_retry`` the retry counts the REQ states for the FPGA's QP
    (None: 7), ``timeout`` / ``retry_cnt`` / ``rnr_retry`` the host QP's own as in
    :meth:`connect_qp`.
``cm_disconnect(qpn)``
    ``rdma_disconnect`` (a DREQ) of a QP :meth:`cm_connect` made, and the QP gone with it.
``fpga_time(qpn)`` / ``fpga_time_reset(qpn)``
    the FPGA's own time of the data frames (and atomics) that reached the QP since the reset: a
    dict with the core-clock cycles of the first frame's first beat and of the last frame's
    last beat on the FPGA's MAC port, the clock in Hz and the number of frames; None when the
    NIC cannot know it (a real NIC, whose frames carry no time: rates are then measured on the
    wall clock).

Errors a user can meet are :class:`NicError` with a sentence that says what to do.
"""

import random
import socket
import sys
import threading
import time
import types
from typing import NamedTuple

from rocegen.wire.addr import format_ip
from rocegen.wire.atomics import ATOMIC_BYTES, ATOMIC_VERBS
from rocegen.wire.headers import ARP, ETH, ETHERTYPE_ARP, IPV4, UDP_PORT_ROCEV2
from rocegen.wire.ibcm import RejReason, mtu_bytes, rep_region
from rocegen.wire.roce import SIMULATED_PEER_TIMEOUT
from rocegen.wire.simwire import (
    FPGA_IP,
    HOST_IP,
    HOST_MAC,
    WIRE_PORT,
    FrameReader,
    encode_frame,
    udp_dst_port,
)
from rocegen.wire.verbs import VERBS

__all__ = ["Cpl", "SendCpl", "CmConn", "NicError", "SimNic", "PacketNic", "VerbsNic", "open_nic",
           "SIM_WIRE", "SIM_TIMEOUT", "VERBS_TIMEOUT", "SIM_PEER_TIMEOUT", "SIM_CM_QPNS"]

#: Default address of ``rocegen sim serve``'s wire.
SIM_WIRE = ("127.0.0.1", WIRE_PORT)
#: RDMA READs a QP of the simulated NIC keeps outstanding at most, and accepts at once (a
#: ConnectX's 16).
SIM_RD_DEPTH = 16
#: Retransmit timeout code of the simulated NIC's requester: 4.096 us x 2^18 = 1.07 s of this
#: machine's time, long against the simulation's pace (its round trips take milliseconds).
SIM_TIMEOUT = 18
#: Local ACK timeout code of a host QP on an RDMA device unless ``connect --host-timeout`` says
#: otherwise: 4.096 us x 2^14 = 67 ms (retry count and RNR retry count: 7 and 7).
VERBS_TIMEOUT = 14
#: The host QP's local ACK timeout code that suits a simulated FPGA (``rocegen sim serve``):
#: :data:`rocegen.wire.roce.SIMULATED_PEER_TIMEOUT`; ``connect --host-timeout 20`` against it.
SIM_PEER_TIMEOUT = SIMULATED_PEER_TIMEOUT
#: Packets the simulated NIC's requester may have outstanding per QP.
SIM_WINDOW = 64
#: Seconds between looks at the simulated requester's timers.
SIM_TICK = 0.05


#: The QP numbers of the simulated NIC's connections through the InfiniBand CM (its
#: :meth:`SimNic.create_qp` counts up from 0x100..0x10FF, far below them).
SIM_CM_QPNS = range(0x10000, 0x10400)


class NicError(Exception):
    """The NIC could not be opened or used."""


class CmConn(NamedTuple):
    """A QP connected through the InfiniBand CM (:meth:`SimNic.cm_connect`,
    :meth:`VerbsNic.cm_connect`): our QP and the first PSN it sends, the FPGA's QP and the first
    PSN it sends, the path MTU in bytes, the READs of ours outstanding at most
    (``max_rd_atomic``, the REP's responder resources) and the FPGA's we accept at once
    (``max_dest_rd_atomic``, the REP's initiator depth), and the FPGA's memory region of the
    REP's private data (``region_*``; all zero: none)."""
    qpn: int
    psn: int
    fpga_qpn: int
    fpga_psn: int
    pmtu: int
    rd_atomic: int
    rd_depth: int
    region_addr: int
    region_rkey: int
    region_length: int


class Cpl(NamedTuple):
    """A receive completion. ``kind``: ``"send"`` (a SEND, with or without immediate) or
    ``"write_imm"`` (an RDMA WRITE with immediate); ``imm`` None without immediate data;
    ``status`` ``"SUCCESS"`` or the failure."""
    qpn: int
    wr_id: int
    kind: str
    byte_len: int
    imm: int | None
    status: str


class SendCpl(NamedTuple):
    """A send completion: ``status`` ``"SUCCESS"`` or the failure."""
    qpn: int
    wr_id: int
    status: str


def _check_send(op, length, imm, swap_add=None, compare=None):
    if op in ATOMIC_VERBS:
        if length != ATOMIC_BYTES or imm is not None:
            raise NicError(f"{op} works on {ATOMIC_BYTES} bytes and takes no immediate data")
        for name, v in (("swap_add", swap_add), ("compare", compare)):
            if (v is not None or name == "swap_add" or op == "COMPARE_SWAP") and \
                    (not isinstance(v, int) or not 0 <= v < 1 << 64):
                raise NicError(f"{op}: {name} must be a 64-bit number, not {v!r}")
        if op == "FETCH_ADD" and compare is not None:
            raise NicError("FETCH_ADD has no compare operand")
        return
    if op not in VERBS:
        raise NicError(f"send opcode must be one of {', '.join(VERBS + ATOMIC_VERBS)}, not {op!r}")
    if swap_add is not None or compare is not None:
        raise NicError(f"{op} has no atomic operands")
    if op.endswith("_IMM") != (imm is not None):
        raise NicError(f"{op} {'needs' if op.endswith('_IMM') else 'takes no'} immediate data")
    if length < 0:
        raise NicError(f"message length must be >= 0, not {length}")


#: BTH opcodes of the RC requests whose FPGA time counts: those that carry data (SEND and RDMA
#: WRITE, every part) and the atomics (COMPARE_SWAP 0x13, FETCH_ADD 0x14), which the FPGA's
#: generator issues like them.
_DATA_OPCODES = (*range(0x00, 0x0C), 0x13, 0x14)


def _data_dest_qp(frame):
    """The destination QP of a RoCEv2 RC SEND / WRITE packet or atomic (untagged IPv4 without
    options), else None."""
    if len(frame) < 14 + 20 + 8 + 12 or frame[12:14] != b"\x08\x00" or frame[14] != 0x45 or \
            frame[23] != 17 or int.from_bytes(frame[36:38], "big") != 4791:
        return None
    bth = frame[42:54]
    return int.from_bytes(bth[5:8], "big") if bth[0] in _DATA_OPCODES else None


#: The addresses ``rocegen sim serve`` gives the simulated FPGA and its host by default
#: (:mod:`rocegen.wire.simwire`).
SIM_FPGA_IP = FPGA_IP
SIM_HOST_MAC, SIM_HOST_IP = HOST_MAC, HOST_IP


def _sim_access():
    from rocegen.sim.models.rnic import Access
    return Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC


def _sim_rnic(mac, ip, strict):
    """The NIC model of :class:`SimNic` and :class:`PacketNic`: a ConnectX's behaviour,
    answering at once (its time is this machine's clock, which only its requester's timers
    use)."""
    from rocegen.sim.models.rnic import Behaviour, Rnic
    return Rnic(mac, ip, strict=strict, behaviour=Behaviour(response_ns=(0.0, 0.0),
                                                            ack_timer_ns=0.0))


def _cm_conn(conn, qpn):
    """The :class:`CmConn` of a CM model's established connection whose NIC QP is ``qpn``."""
    region = conn.peer_region
    return CmConn(qpn, conn.psn, conn.peer_qpn, conn.peer_psn, mtu_bytes(conn.path_mtu),
                  conn.initiator_depth, conn.responder_resources, region.addr, region.rkey,
                  region.length)


class SimNic:
    """The simulated RDMA NIC: :class:`rocegen.sim.models.rnic.Rnic` on a TCP connection to
    ``rocegen sim serve``'s wire (frames as 4-byte length + bytes). A thread takes the frames the
    FPGA sends and returns the model's answers (ACKs, NAKs, ARP replies) and the requester's
    packets (:meth:`post_send`, sent as its window allows). The model answers as a
    ConnectX NIC would; with ``strict`` it also stops at any protocol violation of the FPGA
    (its log is in :meth:`counters`). It answers the FPGA's RDMA READs of the host's regions
    (the READ responses leave as the FPGA's READs arrive). The wire tells when each frame left
    the FPGA, in its own
    time (:mod:`rocegen.wire.simwire`): :meth:`fpga_time` gives it per QP. The requester's
    timers run on this machine's clock (retransmit timeout :data:`SIM_TIMEOUT` unless
    :meth:`connect_qp` is given one, at most :data:`SIM_WINDOW` packets outstanding).

    :meth:`cm_connect` speaks the InfiniBand CM on the wire instead: from the first call on, the
    model is a librdmacm peer (:class:`rocegen.sim.models.rnic.rdma_cm.CmPeer`, its QPs
    numbered from :data:`SIM_CM_QPNS`): every frame goes through it, the CM's MADs to its CM,
    the rest to the NIC, and its timers (the REQ and DREQ sent again, time-wait) run with the
    requester's."""

    _cm = None              # the CmPeer, once cm_connect has been called
    _cm_events = 0          # its CM's events the waiters have been told of

    def __init__(self, wire=SIM_WIRE, *, mac=None, ip=None, strict=False):
        mac, ip = mac or SIM_HOST_MAC, ip or SIM_HOST_IP
        self._encode = encode_frame
        self.local_ip = ip
        self.rnic = _sim_rnic(mac, ip, strict)
        self._lock = threading.Lock()
        self._cpl = threading.Condition(self._lock)
        self._t0 = time.monotonic_ns()
        self._next_qpn = 0x100 + random.randrange(0x1000)
        self._next_addr = 0x7F00_0000_0000
        self._fpga_time = {}            # qpn -> [first cycle, last cycle, clock Hz, frames]
        self.fatal = None
        try:
            self.sock = socket.create_connection(wire, timeout=5)
        except OSError as e:
            raise NicError(f"no simulated NIC: cannot reach rocegen sim serve's wire at "
                           f"{wire[0]}:{wire[1]} ({e.strerror or e}); start `rocegen sim serve` "
                           f"first") from None
        self.sock.settimeout(SIM_TICK)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = FrameReader()
        self._thread = threading.Thread(target=self._run, name="sim-wire", daemon=True)
        self._thread.start()

    def _now(self):
        """The model's time: nanoseconds of this machine's clock (called with the lock held,
        so that the model sees it never decrease)."""
        return float(time.monotonic_ns() - self._t0)

    def _send_frames(self, frames):
        if frames:
            self.sock.sendall(b"".join(self._encode(f) for f in frames))

    def _pump(self):
        """The requester's packets its windows and timers allow now, the READ responses the
        model owes the FPGA, and what the CM's timers send (with the lock held); waiters on
        completions and on the CM are woken."""
        now = self._now()
        out = self._cm.poll(now) if self._cm is not None else []
        busy = self.rnic.send_outstanding() or self.rnic.tx_pending(now=now)
        out += self.rnic.next_frames(now) if busy else []
        if self.rnic.cq or self.rnic.send_cq or self._cm_moved():
            self._cpl.notify_all()
        return out

    def _cm_moved(self):
        """Whether the CM has had events since the last look (lock held)."""
        if self._cm is None or len(self._cm.cm.events) == self._cm_events:
            return False
        self._cm_events = len(self._cm.cm.events)
        return True

    def _take(self, frame, now):
        """One frame from the wire into the model (lock held): through the CM peer once there
        is one. Returns the frames sent in answer."""
        return (self._cm or self.rnic).receive(frame, now)

    def _run(self):
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                data = None                 # a look at the requester's timers
            except OSError:
                data = b""
            if data == b"":
                with self._lock:
                    self.fatal = self.fatal or "the simulated wire closed (rocegen sim serve stopped)"
                    self._cpl.notify_all()
                return
            try:
                frames = self._reader.feed_stamped(data) if data else []
                out = []
                with self._lock:
                    for f, when in frames:
                        out += self._take(f, self._now())
                        if when is not None:
                            self._note_time(f, when)
                    out += self._pump()
                self._send_frames(out)
            except (ValueError, AssertionError, OSError) as e:
                with self._lock:
                    self.fatal = f"simulated NIC stopped: {e}"
                    self._cpl.notify_all()
                self.sock.close()
                return

    def _resolve(self, ip, timeout=10.0):
        """The FPGA's MAC address for the requester: asked by ARP unless known."""
        end = time.monotonic() + timeout
        with self._cpl:
            while ip not in self.rnic.arp_cache:
                if self.fatal:
                    raise NicError(self.fatal)
                left = end - time.monotonic()
                if left <= 0:
                    raise NicError(f"no ARP reply from {ip}: is the FPGA at that address?")
                request = self.rnic.arp_request(ip)
                self._lock.release()
                try:
                    self._send_frames([request])
                finally:
                    self._lock.acquire()
                self._cpl.wait(min(left, 0.5))

    def _note_time(self, frame, when):
        """Called with the lock held, in the step that applied the frame to the model, so what a
        check of the memory sees and the time it reads agree."""
        qpn = _data_dest_qp(frame)
        if qpn is None:
            return
        t = self._fpga_time.get(qpn)
        if t is None:
            self._fpga_time[qpn] = [when.first_cycle, when.last_cycle, when.clock_hz, 1]
        else:
            t[1], t[2], t[3] = when.last_cycle, when.clock_hz, t[3] + 1

    def fpga_time(self, qpn):
        """The FPGA's time of the data frames to ``qpn`` since :meth:`fpga_time_reset` (see the
        module documentation), or None before the first."""
        with self._lock:
            t = self._fpga_time.get(qpn)
            return None if t is None else {"first_cycle": t[0], "last_cycle": t[1],
                                           "clock_hz": t[2], "frames": t[3]}

    def fpga_time_reset(self, qpn):
        with self._lock:
            self._fpga_time.pop(qpn, None)

    def create_qp(self, recv_depth):
        with self._lock:
            qpn = self._next_qpn
            self._next_qpn += 1
        return qpn

    def register(self, length):
        with self._lock:
            addr = self._next_addr
            self._next_addr += (length + 0xFFFF) & ~0xFFFF
            rkey = random.getrandbits(32)
            self.rnic.register_mr(addr, length, rkey, _sim_access())
        return addr, rkey

    #: the NIC model stores an atomic's original value little-endian, as a host CPU of the x86
    #: or Arm kind reads it
    result_order = "little"

    def read_limits(self):
        return SIM_RD_DEPTH, SIM_RD_DEPTH

    def atomic_cap(self):
        """``"HCA"``: the NIC model executes its peer's atomics, and issues its own, as a
        ConnectX does."""
        return "HCA"

    def connect_qp(self, qpn, fpga_qpn, fpga_ip, epsn, pmtu, *, rd_atomic=1, rd_depth=1,
                   timeout=None, retry_cnt=None, rnr_retry=None):
        from rocegen.sim.models.rnic import Access
        with self._lock:
            self.rnic.create_qp(qpn, peer_qpn=fpga_qpn, peer_ip=fpga_ip, epsn=epsn, pmtu=pmtu,
                                timeout=SIM_TIMEOUT if timeout is None else timeout,
                                retry_cnt=7 if retry_cnt is None else retry_cnt,
                                rnr_retry=7 if rnr_retry is None else rnr_retry,
                                window=SIM_WINDOW,
                                access=Access.REMOTE_WRITE | Access.REMOTE_READ |
                                Access.REMOTE_ATOMIC,
                                max_rd_atomic=rd_atomic, max_dest_rd_atomic=rd_depth)

    def post_recv(self, qpn, wr_id, addr, length):
        with self._lock:
            self.rnic.post_recv(qpn, length, wr_id, addr=addr)

    def post_send(self, qpn, wr_id, op, addr, length, *, remote_addr=0, rkey=0, imm=None,
                  swap_add=None, compare=None):
        _check_send(op, length, imm, swap_add, compare)
        with self._lock:
            peer = self.rnic.qps[qpn].peer_ip
        self._resolve(peer)
        with self._lock:
            if self.fatal:
                raise NicError(self.fatal)
            try:
                if op == "READ":
                    self.rnic.post_send(qpn, op, length=length, remote_addr=remote_addr,
                                        rkey=rkey, local_addr=addr, wr_id=wr_id)
                elif op in ATOMIC_VERBS:
                    self.rnic.post_send(qpn, op, remote_addr=remote_addr, rkey=rkey,
                                        local_addr=addr, wr_id=wr_id, swap_add=swap_add,
                                        compare=compare)
                else:
                    data = self.rnic.read_mem(addr, length)
                    self.rnic.post_send(qpn, op, data=data, remote_addr=remote_addr, rkey=rkey,
                                        imm=imm, wr_id=wr_id)
            except ValueError as e:
                raise NicError(str(e)) from None
            out = self._pump()
        self._send_frames(out)

    def poll_send(self, max_entries=64, timeout=0.0):
        with self._cpl:
            if not self.rnic.send_cq and timeout and not self.fatal:
                self._cpl.wait(timeout)
            got = self.rnic.poll_send_cq(max_entries)
            fatal = self.fatal
        if fatal and not got:
            raise NicError(fatal)
        return [SendCpl(c.qpn, c.wr_id, str(c.status)) for c in got]

    def poll(self, max_entries=64, timeout=0.0):
        with self._cpl:
            if not self.rnic.cq and timeout and not self.fatal:
                self._cpl.wait(timeout)
            got = self.rnic.poll_cq(max_entries)
            fatal = self.fatal
        if fatal and not got:
            raise NicError(fatal)
        return [Cpl(c.qpn, c.wr_id, "send" if c.opcode == "RECV" else "write_imm", c.byte_len,
                    c.imm, str(c.status)) for c in got]

    def read(self, addr, length):
        with self._lock:
            return self.rnic.read_mem(addr, length)

    def fill(self, addr, length, value=0):
        with self._lock:
            self.rnic.write_mem(addr, bytes([value]) * length)

    def write(self, addr, data):
        with self._lock:
            self.rnic.write_mem(addr, data)

    def qp_error(self, qpn):
        with self._lock:
            return self.rnic.qps[qpn].state == "ERR" if qpn in self.rnic.qps else False

    def destroy_qp(self, qpn):
        with self._lock:
            if qpn in self.rnic.qps:
                self.rnic.destroy_qp(qpn)

    def counters(self):
        with self._lock:
            return {k: v for k, v in self.rnic.counters.items() if v}

    # ---- connections through the InfiniBand CM

    def cm_connect(self, fpga_ip, port, *, recv_depth, rd_atomic=1, rd_depth=1,
                   peer_retry_cnt=None, peer_rnr_retry=None, timeout=None, retry_cnt=None,
                   rnr_retry=None):
        """A QP connected to ``fpga_ip`` through the IB CM on the wire (module documentation;
        ``recv_depth`` is taken as :meth:`create_qp` takes it): the FPGA's MAC asked by ARP,
        the REQ sent (again until an answer comes, as the CM's timers say), the REP answered
        with an RTU, which leaves the NIC's QP ready (a window of :data:`SIM_WINDOW` packets, the
        host's timeout and retry counts). Returns a :class:`CmConn`; :class:`NicError` when the
        FPGA refuses (REJ), does not answer, or no QP number is free."""
        from rocegen.sim.models.ibcm.cm import State
        self._resolve(fpga_ip)
        with self._lock:
            peer = self._cm_peer()
            peer.cm.responder_resources, peer.cm.initiator_depth = rd_depth, rd_atomic
            peer.cm.retry_count = 7 if peer_retry_cnt is None else peer_retry_cnt
            peer.cm.rnr_retry_count = 7 if peer_rnr_retry is None else peer_rnr_retry
            peer.qp_options = {"window": SIM_WINDOW,
                               "timeout": SIM_TIMEOUT if timeout is None else timeout,
                               "retry_cnt": 7 if retry_cnt is None else retry_cnt,
                               "rnr_retry": 7 if rnr_retry is None else rnr_retry}
            seen = len(peer.cm.events)
            cid, frames = peer.connect(self._now(), dst_ip=fpga_ip, port=port,
                                       dst_mac=self.rnic.arp_cache[fpga_ip])
        if cid is None:
            raise NicError(f"no QP number free for another connection (the simulated NIC has "
                           f"{len(SIM_CM_QPNS)})")
        self._send_frames(frames)
        conn = self._cm_wait(cid, lambda c: c.state is not State.REQ_SENT)
        with self._lock:
            if conn is None or conn.state is not State.ESTABLISHED:
                raise NicError(self._cm_failure(peer.cm.events[seen:], cid, fpga_ip, port))
            return _cm_conn(conn, peer.qps[cid])

    def cm_disconnect(self, qpn):
        """``rdma_disconnect`` of the connection of ``qpn``: the DREQ sent (again until the DREP
        comes, as the CM's timers say), then time-wait, after which the CM peer destroys the
        QP. :class:`NicError` when the connection was not established any more (the FPGA closed
        it first) or no DREP came (the QP goes all the same)."""
        from rocegen.sim.models.ibcm.cm import State
        with self._lock:
            cid = next((c for c, q in (self._cm.qps if self._cm else {}).items() if q == qpn),
                       None)
            conn = None if cid is None else self._cm.cm.connections.get(cid)
            if conn is None or conn.state is not State.ESTABLISHED:
                raise NicError(f"QP {qpn:#x} has no established connection to disconnect "
                               f"(closed by the FPGA?)")
            seen = len(self._cm.cm.events)
            frames = self._cm.disconnect(self._now(), cid)
        self._send_frames(frames)
        self._cm_wait(cid, lambda c: c.state is State.TIMEWAIT)
        with self._lock:
            if ("dreq_timeout", cid, None) in self._cm.cm.events[seen:]:
                raise NicError(f"no DREP from {format_ip(conn.peer_ip)} for QP {qpn:#x}: the "
                               f"FPGA may still hold its end")

    def _cm_peer(self):
        """The CM peer, made on first use (lock held)."""
        if self._cm is None:
            from rocegen.sim.models.rnic.rdma_cm import CmPeer
            self._cm = CmPeer(self.rnic, qpns=SIM_CM_QPNS, seed=random.getrandbits(32))
        return self._cm

    def _cm_wait(self, cid, done):
        """Wait until the connection ``cid`` is ``done(connection)`` or forgotten by the CM
        (whose timers give up in the end); returns it, or None once forgotten."""
        with self._cpl:
            while True:
                if self.fatal:
                    raise NicError(self.fatal)
                conn = self._cm.cm.connections.get(cid)
                if conn is None or done(conn):
                    return conn
                self._cpl.wait(SIM_TICK)

    @staticmethod
    def _cm_failure(events, cid, fpga_ip, port):
        """What went wrong with the connection ``cid`` to ``fpga_ip``:``port``, from the CM's
        ``events`` since its REQ."""
        for name, which, detail in events:
            if which != cid:
                continue
            if name == "rejected":
                why = {RejReason.INVALID_SERVICE_ID: f": nothing listens on port {port}",
                       RejReason.NO_QP: ": no QP free"}.get(detail, "")
                what = detail.name if isinstance(detail, RejReason) else detail
                return f"the FPGA at {fpga_ip} refused the connection to port {port} (REJ " \
                       f"{what}){why}"
        return f"no answer from the FPGA's CM at {fpga_ip} (QP1) to the REQ for port {port}, " \
               f"after every retry: is it built with the InfiniBand CM?"

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class PacketNic(SimNic):
    """The simulated RDMA NIC on a network interface of this machine instead of the wire: the
    same model, taking the RoCEv2 frames (UDP 4791 to its IP) that reach interface ``iface``
    through a Linux packet socket, and sending its answers there. The host's kernel keeps the
    rest (ARP, ICMP, the connection manager's UDP): this is how a RoCE peer sits on ``rocegen
    sim serve --tap``'s interface (``--device packet:rgtap0`` in its namespace). A UDP socket
    bound to port 4791 at ``ip`` keeps the kernel from answering the RoCEv2 datagrams with ICMP
    port unreachable, as a soft-RoCE device does. Needs CAP_NET_RAW. No FPGA time: the frames
    carry none (:meth:`fpga_time` stays None)."""

    def __init__(self, iface, *, mac=None, ip=None, strict=False):
        mac, ip = mac or SIM_HOST_MAC, ip or SIM_HOST_IP
        self.local_ip = ip
        self.rnic = _sim_rnic(mac, ip, strict)
        self._lock = threading.Lock()
        self._cpl = threading.Condition(self._lock)
        self._t0 = time.monotonic_ns()
        self._next_qpn = 0x100 + random.randrange(0x1000)
        self._next_addr = 0x7F00_0000_0000
        self._fpga_time = {}
        self.fatal = None
        self._ip = int.from_bytes(socket.inet_aton(ip), "big")
        try:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
            self.sock.bind((iface, 0))
            self.sock.settimeout(SIM_TICK)
        except OSError as e:
            raise NicError(f"no packet socket on interface {iface!r} ({e.strerror or e}): it "
                           f"needs CAP_NET_RAW and an existing interface") from None
        self._port = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._port.bind((ip, 4791))
        except OSError as e:
            self.sock.close()
            raise NicError(f"cannot take UDP port 4791 at {ip} ({e.strerror or e}): is {ip} an "
                           f"address of this machine, and no other RoCE device using it?") from None
        self._thread = threading.Thread(target=self._run, name="packet-nic", daemon=True)
        self._thread.start()

    def _roce_to_us(self, frame):
        """True for an untagged IPv4/UDP frame (no IP options) to our IP and UDP port 4791, or
        an ARP reply to our IP (the requester's resolution of the FPGA; the kernel answers the
        requests)."""
        if len(frame) >= ETH.length + ARP.length and \
                ETH.unpack(frame[:ETH.length])["ethertype"] == ETHERTYPE_ARP:
            arp = ARP.unpack(frame[ETH.length:])
            return arp["oper"] == 2 and arp["tpa"] == self._ip
        return (udp_dst_port(frame) == UDP_PORT_ROCEV2
                and IPV4.unpack(frame[ETH.length:])["dst"] == self._ip)

    def _send_frames(self, frames):
        for f in frames:
            self.sock.send(f)

    def _run(self):
        while True:
            try:
                frame, addr = self.sock.recvfrom(65536)
            except TimeoutError:
                frame, addr = None, None    # a look at the requester's timers
            except OSError:
                frame, addr = b"", None
            if frame == b"" and addr is None:
                with self._lock:
                    self.fatal = self.fatal or "the packet socket closed"
                    self._cpl.notify_all()
                return
            if frame is not None and (addr[2] == socket.PACKET_OUTGOING
                                      or not self._roce_to_us(frame)):
                continue
            try:
                with self._lock:
                    out = self._take(frame, self._now()) if frame is not None else []
                    out += self._pump()
                self._send_frames(out)
            except (ValueError, AssertionError, OSError) as e:
                with self._lock:
                    self.fatal = f"simulated NIC stopped: {e}"
                    self._cpl.notify_all()
                self.sock.close()
                return

    def close(self):
        self._port.close()
        try:
            self.sock.close()
        except OSError:
            pass


def _import_pyverbs():
    try:
        import pyverbs  # noqa: F401
    except ImportError:
        for path in ("/usr/lib/python3/dist-packages", "/usr/local/lib/python3/dist-packages"):
            if path not in sys.path:
                sys.path.append(path)
        try:
            import pyverbs  # noqa: F401
        except ImportError:
            raise NicError("pyverbs is not installed: install rdma-core's Python bindings "
                           "(Debian/Ubuntu: apt install python3-pyverbs), or use --sim with "
                           "`rocegen sim serve`") from None


def _rep_region(data):
    """The region of a REP's private data (:func:`rocegen.wire.ibcm.rep_region`), or
    :class:`NicError` saying why there is none."""
    try:
        return rep_region(data)
    except ValueError as err:
        raise NicError(f"the REP does not carry a memory region of a rocegen FPGA in its "
                       f"private data: {err}") from None


#: The librdmacm events :class:`VerbsNic` names (``enum rdma_cm_event_type``).
_CM_EVENTS = ("ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
              "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED")


def _rdmacm_enums():
    """librdmacm's constants as pyverbs names them, in a namespace: ``RDMA_PS_TCP`` and the
    events of :data:`_CM_EVENTS` (``ADDR_RESOLVED``...). pyverbs has them in
    ``pyverbs.librdmacm_enums`` (``pyverbs.cm_enums`` before rdma-core 50), each a name of the
    module or a member of its enum class (``rdma_port_space``, ``rdma_cm_event_type``)."""
    try:
        import pyverbs.librdmacm_enums as m
    except ImportError:
        import pyverbs.cm_enums as m

    def value(name, group):
        v = getattr(m, name, None)
        return int(getattr(getattr(m, group), name) if v is None else v)

    return types.SimpleNamespace(
        RDMA_PS_TCP=value("RDMA_PS_TCP", "rdma_port_space"),
        **{n: value(f"RDMA_CM_EVENT_{n}", "rdma_cm_event_type") for n in _CM_EVENTS})


class VerbsNic:
    """A real RDMA NIC through pyverbs (rdma-core's Python bindings): device ``device`` (default:
    the first one), port ``port``, GID index ``gid_index`` (default: the first RoCEv2 GID holding
    an IPv4 address). One protection domain, one completion queue for every QP, regions with
    local write, remote write and remote read access (and remote atomic access when the device
    offers atomics, :meth:`atomic_cap`). The host's own WRITEs, SENDs, READs and atomics
    (:meth:`post_send`) share
    the completion queue with the receive completions: :meth:`poll` and :meth:`poll_send` sort
    them (a send work request's ``wr_id`` carries :data:`SEND_TAG`).

    :meth:`close` destroys the verbs objects once a poll under way in another thread has ended;
    every later use of the NIC raises :class:`NicError` (pyverbs would touch freed memory).

    :meth:`cm_connect` connects a QP through librdmacm (pyverbs' ``CMID`` on an event channel of
    its own): the QP is this NIC's (:meth:`create_qp`: its PD and CQ), handed to
    ``rdma_connect`` by number, and moved to RTS with the attributes ``rdma_init_qp_attr``
    gives once the REP is in (an external QP, as rdma-core's tests connect one), then
    ``rdma_establish`` sends the RTU. librdmacm resolves the FPGA's address from this NIC's
    (:attr:`local_ip`), and must route it through this device. pyverbs waits for each CM event
    without letting other threads run (the CQ poller too), for as long as librdmacm takes."""

    _MTU = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}     # enum ibv_mtu
    #: Bit set in the ``wr_id`` of every send work request (an error completion carries no
    #: reliable opcode, so the ``wr_id`` tells send from receive).
    SEND_TAG = 1 << 62
    #: Send work requests a QP can have outstanding.
    SEND_DEPTH = 64
    #: an atomic's original value lands in local memory in the host CPU's byte order
    result_order = sys.byteorder
    _closed = False
    _atomic_cap = False         # not asked yet

    def __init__(self, device=None, *, port=1, gid_index=None, cq_depth=4096):
        _import_pyverbs()
        import pyverbs.enums as e
        from pyverbs.cq import CQ
        from pyverbs.device import Context, get_device_list
        from pyverbs.pd import PD
        from pyverbs.pyverbs_error import PyverbsError
        self.e = e
        self._Error = PyverbsError
        try:
            names = [d.name.decode() if isinstance(d.name, bytes) else d.name
                     for d in get_device_list()]
        except PyverbsError as err:
            raise NicError(f"no RDMA device: {err}") from None
        if not names:
            raise NicError("no RDMA device on this host (ibv_devices lists none); load the NIC's "
                           "driver, or use --sim with `rocegen sim serve`")
        if device is None:
            device = names[0]
        elif device not in names:
            raise NicError(f"no RDMA device {device!r}; this host has {', '.join(names)}")
        try:
            self.ctx = Context(name=device)
            self.pd = PD(self.ctx)
            self.cq = CQ(self.ctx, cq_depth)
        except PyverbsError as err:
            raise NicError(f"cannot open {device}: {err}") from None
        self.device, self.port = device, port
        self.gid_index, self.local_ip = self._find_gid(gid_index)
        self.qps = {}
        self.mrs = []
        self.cmids = {}             # qpn -> (CMID, CMEventChannel) of cm_connect
        self._cq_lock = threading.Lock()
        self._recv_done, self._send_done = [], []

    def _find_gid(self, gid_index):
        indices = [gid_index] if gid_index is not None else range(
            self.ctx.query_port(self.port).gid_tbl_len)
        for k in indices:
            try:
                gid = str(self.ctx.query_gid(self.port, k))
            except self._Error:
                continue
            words = gid.split(":")
            if len(words) == 8 and words[:6] == ["0000"] * 5 + ["ffff"]:
                if gid_index is None and self._gid_type(k) not in (None, "roce v2"):
                    continue
                raw = bytes.fromhex(words[6] + words[7])
                return k, socket.inet_ntoa(raw)
        raise NicError(f"port {self.port} of {self.device} has no RoCEv2 GID with an IPv4 "
                       f"address{'' if gid_index is None else f' at index {gid_index}'}: give "
                       f"the interface an IPv4 address (or pick --gid-index)")

    def _gid_type(self, index):
        """The GID's type as the kernel names it (``"roce v2"``, ``"ib/roce v1"``), or None."""
        path = f"/sys/class/infiniband/{self.device}/ports/{self.port}/gid_attrs/types/{index}"
        try:
            with open(path) as f:
                return f.read().strip().lower()
        except OSError:
            return None

    def _check_open(self):
        if self._closed:
            raise NicError(f"the RDMA device {self.device} is closed (the host agent is "
                           f"stopping)")

    def create_qp(self, recv_depth):
        from pyverbs.qp import QP, QPCap, QPInitAttr
        self._check_open()
        cap = QPCap(max_send_wr=self.SEND_DEPTH, max_recv_wr=recv_depth, max_send_sge=1,
                    max_recv_sge=1)
        try:
            qp = QP(self.pd, QPInitAttr(qp_type=self.e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                        cap=cap))
        except self._Error as err:
            raise NicError(f"cannot create a QP: {err}") from None
        self.qps[qp.qp_num] = qp
        return qp.qp_num

    def _remote_access(self):
        """The remote access of the regions and QPs: write, read, and atomic when the device
        offers atomics."""
        e = self.e
        access = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
        if self.atomic_cap() is not None:
            access |= e.IBV_ACCESS_REMOTE_ATOMIC
        return access

    def atomic_cap(self):
        """The device's ``atomic_caps``: ``"HCA"``, ``"GLOB"``, or None (``IBV_ATOMIC_NONE``, or a
        device that does not say)."""
        if self._atomic_cap is False:
            try:
                cap = self.ctx.query_device().atomic_caps
            except (self._Error, AttributeError):
                cap = None
            e = self.e
            self._atomic_cap = {getattr(e, "IBV_ATOMIC_HCA", 1): "HCA",
                                getattr(e, "IBV_ATOMIC_GLOB", 2): "GLOB"}.get(cap)
        return self._atomic_cap

    def register(self, length):
        from pyverbs.mr import MR
        self._check_open()
        e = self.e
        try:
            mr = MR(self.pd, length, e.IBV_ACCESS_LOCAL_WRITE | self._remote_access())
        except self._Error as err:
            raise NicError(f"cannot register {length} bytes: {err}") from None
        self.mrs.append(mr)
        return mr.buf, mr.rkey

    def _mr(self, addr, length):
        self._check_open()
        for mr in self.mrs:
            if mr.buf <= addr and addr + length <= mr.buf + mr.length:
                return mr
        raise NicError(f"[{addr:#x}, +{length}) is not in a registered region")

    def read_limits(self):
        """The device's ``max_qp_init_rd_atom`` and ``max_qp_rd_atom`` (at most 255, at least
        1)."""
        try:
            attr = self.ctx.query_device()
            init, dest = attr.max_qp_init_rd_atom, attr.max_qp_rd_atom
        except (self._Error, AttributeError):
            init = dest = 1
        return max(1, min(init, 255)), max(1, min(dest, 255))

    def connect_qp(self, qpn, fpga_qpn, fpga_ip, epsn, pmtu, *, rd_atomic=1, rd_depth=1,
                   timeout=None, retry_cnt=None, rnr_retry=None):
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr
        self._check_open()
        e = self.e
        qp = self.qps[qpn]
        attr = QPAttr(qp_state=e.IBV_QPS_INIT, port_num=self.port)
        attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | self._remote_access()
        attr.pkey_index = 0
        ip = socket.inet_aton(fpga_ip).hex()
        gid = GID(f"0000:0000:0000:0000:0000:ffff:{ip[:4]}:{ip[4:]}")
        attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=gid, sgid_index=self.gid_index, hop_limit=64),
                              is_global=1, port_num=self.port)
        attr.path_mtu = self._MTU[pmtu]
        attr.dest_qp_num = fpga_qpn
        attr.rq_psn = epsn
        attr.max_dest_rd_atomic = rd_depth
        attr.min_rnr_timer = 1
        attr.sq_psn = epsn              # the FPGA's responder expects the PSN it was told
        attr.timeout = VERBS_TIMEOUT if timeout is None else timeout
        attr.retry_cnt = 7 if retry_cnt is None else retry_cnt
        attr.rnr_retry = 7 if rnr_retry is None else rnr_retry
        attr.max_rd_atomic = rd_atomic
        try:
            qp.to_rtr(attr)
            qp.to_rts(attr)
        except self._Error as err:
            raise NicError(f"cannot move QP {qpn:#x} to RTR/RTS: {err}") from None

    def post_recv(self, qpn, wr_id, addr, length):
        from pyverbs.wr import SGE, RecvWR
        mr = self._mr(addr, length)
        self.qps[qpn].post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(addr, length, mr.lkey)]))

    def _drain(self, max_entries):
        """Take what the completion queue holds, sorted into receive and send completions."""
        e = self.e
        n, wcs = self.cq.poll(num_entries=max_entries)
        for wc in wcs[:n]:
            status = "SUCCESS" if wc.status == e.IBV_WC_SUCCESS else f"status {wc.status}"
            if wc.wr_id & self.SEND_TAG:
                self._send_done.append(SendCpl(wc.qp_num, wc.wr_id & ~self.SEND_TAG, status))
                continue
            imm = socket.ntohl(wc.imm_data) if wc.wc_flags & e.IBV_WC_WITH_IMM else None
            kind = "write_imm" if wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM else "send"
            self._recv_done.append(Cpl(wc.qp_num, wc.wr_id, kind, wc.byte_len, imm, status))

    def _wait(self, queue, max_entries, timeout):
        end = time.monotonic() + timeout
        while True:
            with self._cq_lock:
                self._check_open()
                self._drain(max_entries)
                if queue or time.monotonic() >= end:
                    out = queue[:max_entries]
                    del queue[:max_entries]
                    return out
            time.sleep(0.0005)

    def poll(self, max_entries=64, timeout=0.0):
        return self._wait(self._recv_done, max_entries, timeout)

    def post_send(self, qpn, wr_id, op, addr, length, *, remote_addr=0, rkey=0, imm=None,
                  swap_add=None, compare=None):
        from pyverbs.wr import SGE, SendWR
        _check_send(op, length, imm, swap_add, compare)
        e = self.e
        opcode = {"WRITE": e.IBV_WR_RDMA_WRITE, "WRITE_IMM": e.IBV_WR_RDMA_WRITE_WITH_IMM,
                  "SEND": e.IBV_WR_SEND, "SEND_IMM": e.IBV_WR_SEND_WITH_IMM,
                  "READ": e.IBV_WR_RDMA_READ, "FETCH_ADD": e.IBV_WR_ATOMIC_FETCH_AND_ADD,
                  "COMPARE_SWAP": e.IBV_WR_ATOMIC_CMP_AND_SWP}[op]
        mr = self._mr(addr, length)
        wr = SendWR(wr_id=wr_id | self.SEND_TAG, opcode=opcode, num_sge=1,
                    sg=[SGE(addr, length, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED,
                    imm_data=socket.htonl(imm) if imm is not None else 0)
        if op.startswith("WRITE") or op == "READ":
            wr.set_wr_rdma(rkey, remote_addr)
        elif op == "FETCH_ADD":         # verbs' compare_add is the value added
            wr.set_wr_atomic(rkey, remote_addr, swap_add, 0)
        elif op == "COMPARE_SWAP":
            wr.set_wr_atomic(rkey, remote_addr, compare, swap_add)
        try:
            self.qps[qpn].post_send(wr)
        except self._Error as err:
            raise NicError(f"cannot post a {op} on QP {qpn:#x}: {err}") from None

    def poll_send(self, max_entries=64, timeout=0.0):
        return self._wait(self._send_done, max_entries, timeout)

    def read(self, addr, length):
        mr = self._mr(addr, length)
        return bytes(mr.read(length, addr - mr.buf))

    def fill(self, addr, length, value=0):
        mr = self._mr(addr, length)
        mr.write(bytes([value]) * length, length, addr - mr.buf)

    def write(self, addr, data):
        data = bytes(data)
        mr = self._mr(addr, len(data))
        mr.write(data, len(data), addr - mr.buf)

    def qp_error(self, qpn):
        self._check_open()
        attr, _ = self.qps[qpn].query(self.e.IBV_QP_STATE)
        return attr.qp_state == self.e.IBV_QPS_ERR

    def destroy_qp(self, qpn):
        qp = self.qps.pop(qpn, None)
        if qp is not None:
            qp.close()

    # ---- connections through librdmacm

    #: Milliseconds librdmacm may take to resolve the FPGA's address, and the route to it.
    CM_RESOLVE_MS = 2000

    def cm_connect(self, fpga_ip, port, *, recv_depth, rd_atomic=1, rd_depth=1,
                   peer_retry_cnt=None, peer_rnr_retry=None, timeout=None, retry_cnt=None,
                   rnr_retry=None):
        """A QP connected to TCP port ``port`` of ``fpga_ip`` through librdmacm (class
        documentation): ``rdma_resolve_addr`` from :attr:`local_ip`, ``rdma_resolve_route``,
        ``rdma_connect`` with the connection parameters (responder resources ``rd_depth``,
        initiator depth ``rd_atomic``, the FPGA's retry counts ``peer_retry_cnt`` and
        ``peer_rnr_retry``, default 7, and the QP's number), the REP's private data read as the
        FPGA's region (:func:`rocegen.wire.ibcm.rep_region`), the QP to INIT (this NIC's remote
        access), RTR and RTS (the host's ``timeout``, ``retry_cnt``, ``rnr_retry`` as in
        :meth:`connect_qp`), ``rdma_establish``. A :class:`CmConn`; on any failure the QP and
        the CM ID are destroyed and :class:`NicError` says why."""
        from pyverbs.cmid import CMID, CMEventChannel
        ce = _rdmacm_enums()
        qpn = self.create_qp(recv_depth)
        where = f"{fpga_ip} port {port}"
        try:
            channel = CMEventChannel()
            self.cmids[qpn] = (CMID(creator=channel, port_space=ce.RDMA_PS_TCP), channel)
            cmid = self.cmids[qpn][0]
            self._cm_route(cmid, channel, ce, fpga_ip, port)
            region = _rep_region(self._cm_request(cmid, channel, ce, qpn, rd_atomic, rd_depth,
                                                  peer_retry_cnt, peer_rnr_retry))
            got = self._cm_ready(qpn, cmid, timeout, retry_cnt, rnr_retry)
            cmid.establish()
        except (self._Error, NicError) as err:
            self._cm_drop(qpn)
            raise NicError(f"RDMA CM connection to {where}: {err}") from None
        return CmConn(qpn, got["psn"], got["fpga_qpn"], got["fpga_psn"], got["pmtu"],
                      got["rd_atomic"], got["rd_depth"], region["addr"], region["rkey"],
                      region["length"])

    def _cm_route(self, cmid, channel, ce, fpga_ip, port):
        """``rdma_resolve_addr`` (from :attr:`local_ip` to TCP port ``port`` of ``fpga_ip``) and
        ``rdma_resolve_route``; :class:`NicError` when librdmacm routes it through another
        device."""
        from pyverbs.cmid import AddrInfo
        ai = AddrInfo(src=self.local_ip, dst=fpga_ip, dst_service=str(port),
                      port_space=ce.RDMA_PS_TCP)
        try:
            cmid.resolve_addr(ai, self.CM_RESOLVE_MS)
        finally:
            ai.close()
        self._cm_event(channel, ce.ADDR_RESOLVED, ce, f"cannot resolve the address from "
                       f"{self.local_ip}")
        device = getattr(cmid, "dev_name", self.device)
        if device != self.device:
            raise NicError(f"librdmacm reaches {fpga_ip} through {device}, not {self.device}: "
                           f"use --device {device}")
        cmid.resolve_route(self.CM_RESOLVE_MS)
        self._cm_event(channel, ce.ROUTE_RESOLVED, ce, "no route")

    def _cm_request(self, cmid, channel, ce, qpn, rd_atomic, rd_depth, retry, rnr):
        """``rdma_connect`` for QP ``qpn``; the REP's private data."""
        from pyverbs.cmid import ConnParam
        cmid.connect(ConnParam(resources=rd_depth, depth=rd_atomic,
                               retry=7 if retry is None else retry,
                               rnr_retry=7 if rnr is None else rnr, qp_num=qpn))
        return self._cm_event(channel, ce.CONNECT_RESPONSE, ce,
                              "the FPGA did not take the connection")

    @staticmethod
    def _cm_event(channel, want, ce, what):
        """The next event of ``channel``, acknowledged: its private data when it is ``want``,
        else :class:`NicError` (``what``, and why)."""
        from pyverbs.cmid import CMEvent
        event = CMEvent(channel)
        kind, name = event.event_type, event.event_str()
        data = event.private_data if kind == want else b""
        event.ack_cm_event()
        if kind != want:
            why = {ce.REJECTED: "refused (REJ): nothing listens on that port, or no QP is free",
                   ce.UNREACHABLE: "no answer to the REQ: is the FPGA built with the InfiniBand "
                                   "CM, and reachable?",
                   ce.CONNECT_ERROR: "the connection failed"}.get(kind, "librdmacm said so")
            raise NicError(f"{what}: {why} ({name})")
        return data

    def _cm_ready(self, qpn, cmid, timeout, retry_cnt, rnr_retry):
        """QP ``qpn`` to INIT, RTR and RTS with the attributes ``rdma_init_qp_attr`` gives (the
        access flags this NIC's, the timeout and retry counts the host's); what the QP took:
        ``psn``, ``fpga_qpn``, ``fpga_psn``, ``pmtu`` (bytes), ``rd_atomic``, ``rd_depth``."""
        e, qp = self.e, self.qps[qpn]
        init, mask = cmid.init_qp_attr(e.IBV_QPS_INIT)
        init.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | self._remote_access()
        qp.modify(init, mask | e.IBV_QP_ACCESS_FLAGS)
        rtr, mask = cmid.init_qp_attr(e.IBV_QPS_RTR)
        qp.modify(rtr, mask)
        rts, mask = cmid.init_qp_attr(e.IBV_QPS_RTS)
        rts.timeout = VERBS_TIMEOUT if timeout is None else timeout
        rts.retry_cnt = 7 if retry_cnt is None else retry_cnt
        rts.rnr_retry = 7 if rnr_retry is None else rnr_retry
        qp.modify(rts, mask | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY)
        return {"psn": rts.sq_psn, "fpga_qpn": rtr.dest_qp_num, "fpga_psn": rtr.rq_psn,
                "pmtu": mtu_bytes(rtr.path_mtu), "rd_atomic": rts.max_rd_atomic,
                "rd_depth": rtr.max_dest_rd_atomic}

    def _cm_drop(self, qpn):
        """Destroy the CM ID, its event channel and the QP of a connection that failed."""
        cmid, channel = self.cmids.pop(qpn, (None, None))
        for obj in (cmid, channel):
            if obj is not None:
                obj.close()
        self.destroy_qp(qpn)

    def cm_disconnect(self, qpn):
        """``rdma_disconnect`` (the DREQ; librdmacm and the kernel's CM see to the DREP and
        time-wait), then the QP, the CM ID and its event channel destroyed. :class:`NicError`
        when the QP has no connection of :meth:`cm_connect`, or the disconnect failed (the
        objects are destroyed all the same)."""
        self._check_open()
        if qpn not in self.cmids:
            raise NicError(f"QP {qpn:#x} was not connected through the RDMA CM")
        try:
            self.cmids[qpn][0].disconnect()
        except self._Error as err:
            raise NicError(f"rdma_disconnect of QP {qpn:#x}: {err}") from None
        finally:
            self._cm_drop(qpn)

    def counters(self):
        return {}

    def fpga_time(self, qpn):
        """None: a real NIC's frames carry no FPGA time (rates are the wall clock's)."""
        return None

    def fpga_time_reset(self, qpn):
        pass

    def close(self):
        """Destroy the CM IDs of :meth:`cm_connect` (the kernel's CM sends the DREQ of a
        connection still up), the QPs, the regions, the CQ, the PD and the device context, once
        no poll of the CQ is under way; from then on every use raises :class:`NicError`. A second close
        does nothing."""
        with self._cq_lock:
            if self._closed:
                return
            self._closed = True
            for cmid, channel in self.cmids.values():
                cmid.close()
                channel.close()
            self.cmids.clear()
            for qp in self.qps.values():
                qp.close()
            self.qps.clear()
            for mr in self.mrs:
                mr.close()
            self.mrs.clear()
            self.cq.close()
            self.pd.close()
            self.ctx.close()


def open_nic(spec, **kw):
    """``"sim"`` or ``"sim:HOST:PORT"``: :class:`SimNic`; ``"packet:IFACE"``: :class:`PacketNic`;
    anything else names a pyverbs device (``None``: the first one)."""
    if spec is not None and spec.startswith("packet:"):
        if not spec[7:]:
            raise NicError("--device packet:IFACE names a network interface")
        return PacketNic(spec[7:], **{k: v for k, v in kw.items() if k in ("mac", "ip", "strict")})
    if spec is not None and (spec == "sim" or spec.startswith("sim:")):
        wire = SIM_WIRE
        if spec.startswith("sim:"):
            host, _, port = spec[4:].rpartition(":")
            if not port.isdigit():
                raise NicError(f"--device sim:HOST:PORT, not {spec!r}")
            wire = (host or "127.0.0.1", int(port))
        return SimNic(wire, **{k: v for k, v in kw.items() if k in ("mac", "ip", "strict")})
    return VerbsNic(spec, **{k: v for k, v in kw.items() if k in ("port", "gid_index")})
