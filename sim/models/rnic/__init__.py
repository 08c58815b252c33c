"""Reference model of the host RNIC (the ConnectX NIC the FPGA talks to) playing the RoCEv2 RC
*responder*: the FPGA is the requester and RDMA-WRITEs and SENDs into the host memory this model
exposes, and RDMA-READs from it; and, on the same QPs, the RC *requester*
(:mod:`rocegen.sim.models.rnic.requester`): the host RDMA-WRITEs, SENDs and RDMA-READs towards the
FPGA (:meth:`Rnic.post_send`, frames paced out by :meth:`Rnic.next_frames`, send completions in
:attr:`Rnic.send_cq`). Plain Python (the header table of :mod:`rocegen.wire.headers` builds and
reads every frame), independent of the gateware.

Everything is Ethernet frames without FCS: :meth:`Rnic.receive` takes one frame from the wire and
returns the frames the RNIC sends in answer (ARP replies, ACK/NAK), so the model can sit on any
simulated MAC port. Nothing depends on wall-clock time: the model is a pure function of the
frames it is given and of the calls made on it (``post_recv``, ``rnr_for``...).

What it models (the InfiniBand RC responder rules as a ConnectX NIC applies them):

* ARP: answers requests for its IP, learns the senders (and replies to ``arp_request``).
* QPs (:meth:`Rnic.create_qp`), memory regions backed by bytearrays (:meth:`Rnic.register_mr`),
  a receive queue per QP (:meth:`Rnic.post_recv`) and one completion queue (:attr:`Rnic.cq`).
* The RC responder on UDP 4791: ePSN with 24-bit modular comparison, in-order execution of
  RDMA WRITE FIRST/MIDDLE/LAST/ONLY (+ WITH_IMMEDIATE) and SEND FIRST/MIDDLE/LAST/ONLY
  (+ WITH_IMMEDIATE), MSN counting, ACK on AckReq (optionally only every ``ack_coalesce``-th),
  one PSN-sequence-error NAK per gap then silence, duplicates re-ACKed with ePSN - 1 and not
  executed, RNR NAK, remote access error, invalid request, silent drops -- every event counted
  in :attr:`Rnic.counters`; RDMA READ on QPs created with REMOTE_READ access (see below).

How the NIC answers is :class:`Behaviour` (``behaviour=``), every field of which defaults to
what a ConnectX shows; :data:`IDEAL` is the kinder peer of earlier versions of this model (one
ACK per AckReq at once, credit code 0x1F, no port MTU). With a ConnectX-like behaviour:

* the AETH of every ACK carries the credit code of the receive WQEs posted on the QP (IBTA
  9.7.5.1.2, :func:`credit_code`); ``credits="none"`` sends 0x1F, ``"random"`` any code
  0x00..0x1F drawn from the seed;
* ACKs are coalesced and cumulative: an ACK (of the latest PSN executed, ePSN - 1) leaves after
  every ``ack_every`` packets executed, and at the latest ``ack_timer_ns`` after the first
  AckReq packet it covers; a NAK or a duplicate's ACK (cumulative too) replaces the pending one;
* every answer leaves after a delay drawn in ``response_ns`` (answers stay in order);
* frames shorter than ``min_frame`` (60) bytes before the FCS are dropped and counted as a MAC
  does (``eth_drop_runt``), and so are frames whose IP packet is larger than the port ``mtu``
  (``eth_drop_mtu``); an RDMA WRITE whose RETH DMA length is over ``max_msg`` (2^31) is NAKed
  invalid request.

Time exists only for a caller that gives it: ``receive(frame, now=...)`` (nanoseconds) queues
the answers, which :meth:`Rnic.due` returns when their time comes (:meth:`Rnic.next_due` says
when); without ``now`` every answer is returned at once and only ``ack_every`` coalesces.
The requester's packets and the READ responses are not answers: a testbench takes them with
:meth:`Rnic.next_frames` (``now``, ``budget``) whenever its link can carry more (one frame at a
time at line rate, say), :meth:`Rnic.tx_pending` says how many the windows let go now, and
:meth:`Rnic.next_due` also covers the requester's timers (a retransmit timeout, the end of an
RNR wait), after which :meth:`Rnic.next_frames` has frames again.
Faults a ConnectX does not make but that a requester must survive can be injected, each with a
probability per ACK sent (off by default): a second copy of the ACK later (``dup_ack``), an ACK
of a PSN the requester never sent (``ghost_ack``: 2^22..2^23 - 1 ahead of ePSN), a runt (the
ACK cut to 1..59 bytes, ``runt``) and an oversize frame (the ACK's UDP datagram grown to an IP
length drawn in ``oversize_len``, checksums valid, ``oversize``). Each is counted
(``ack_dup_tx``, ``ack_ghost_tx``, ``runt_tx``, ``oversize_tx``); ``ack_tx`` counts the ACKs
proper only. ``runt``, ``oversize`` and ``dup_ack`` also apply to every READ response packet (the
copies follow it; a second copy counts ``read_dup_tx``), and :meth:`Rnic.read_fault` spoils
chosen READ responses (dropped, too few or too many packets, a wrong opcode, length, PSN or AETH
syndrome: :data:`READ_FAULTS`, counted ``read_fault_tx``). Loss, duplication, reordering and
corruption on the wire are the links' (:mod:`rocegen.sim.models.fabric.link`), for READ responses as for
every frame.

``strict=True`` turns every *malformed* frame or *protocol violation by the requester* into an
``AssertionError`` with a precise message (a testbench fails on it). Conditions a correct
requester can legitimately meet -- lost packets (PSN gaps), duplicates after a retransmission,
RNR, a bad R_Key or an out-of-region address chosen by the test, a SEND longer than the buffer
the test posted, packets arriving at a QP already in the error state -- never raise: they are
handled as a ConnectX does and counted. See :data:`STRICT_CHECKS` for the list of what raises.

Decisions where the spec is silent (and which follow rxe / the IBTA as noted):

* Errors NAKed with invalid request / remote access error / remote operational error are
  IBTA "class C": after sending the NAK the responder QP goes to the error state; later packets
  to it are dropped silently (``drop_qp_error``), its posted receive WQEs complete with
  ``WR_FLUSH_ERR``, and a receive WQE being filled by a SEND completes with an error status.
  The QP must be destroyed and created again (as with verbs).
* A SEND longer than the posted receive buffer: NAK *invalid request* (0x61) and completion
  ``LOC_LEN_ERR`` on the responder. This is what ConnectX (requester sees
  ``IBV_WC_REM_INV_REQ_ERR``, receiver ``IBV_WC_LOC_LEN_ERR``) and rxe (``RESPST_ERR_LENGTH``)
  do; *remote operational error* is reserved for malformed receive WQEs, which the model
  cannot have.
* Length errors (FIRST/MIDDLE payload != PMTU, LAST payload 0 or > PMTU, ONLY > PMTU, PadCnt on
  a FIRST/MIDDLE packet, WRITE total != RETH DMA length) are NAK invalid request (rxe, IBTA).
* Zero-length RDMA WRITE: the R_Key and address are not checked (IBTA; rxe and ConnectX agree).
* Check order for a packet with PSN == ePSN (rxe's): opcode sequence / unsupported opcode,
  then receive-WQE availability (RNR), then length, then R_Key/access/bounds, then execute.
* An RNR NAK arms the same "one NAK then silence" state as a PSN-sequence NAK: packets ahead of
  the refused PSN that were already in flight are dropped silently until the requester resends
  the refused PSN, so a sequence NAK cannot cut the requester's RNR wait short.
* Duplicates are ACKed (PSN = ePSN - 1) whatever their AckReq bit and ``ack_coalesce``.
* RDMA READ (the wire notes' "RDMA READ"; IBTA and rxe's ``rxe_resp.c`` where they are silent)
  is answered on a QP whose ``access`` (the verbs ``qp_access_flags``, :meth:`Rnic.create_qp`)
  holds REMOTE_READ; without it (the default) a READ is an unsupported opcode (NAK invalid
  request), as rxe's ``check_op_valid`` has it. Checks in rxe's order: opcode sequence (no SEND
  or WRITE in progress), then at most ``max_dest_rd_atomic`` (default 16) READs queued whose
  responses are not all sent (one more: NAK invalid request, ``err_rd_atomic``), then length (no
  payload; DMA length at most ``max_msg``), then -- for a length above 0 -- R_Key, REMOTE_READ
  access of the region and [VA, VA + length) inside it, else NAK remote access error (0x62)
  with the request's PSN (all class C: the QP goes to the error state). A READ takes
  ceil(length / PMTU) PSNs (1 for 0 bytes): ePSN moves past them, MSN + 1, a pending ACK is
  dropped (the responses acknowledge). The bytes are read when the request executes.
* READ responses: PSNs from the request's; ONLY when length <= PMTU, else FIRST, MIDDLE...,
  LAST; AETH (the ACK syndrome with the credit code of every ACK, the MSN counting the READ)
  on FIRST/LAST/ONLY; PMTU bytes per packet but the last, PadCnt and zero pad. They leave
  through :meth:`Rnic.next_frames` (the line's pace), a response delay after the request
  (``response_ns``, in order with the answers before them), one packet per turn of the QP, and
  every later answer of that QP (ACK, NAK) waits behind them: a QP answers in PSN order.
* A duplicate READ (PSN behind ePSN) is executed again from its own PSN, with the VA and length
  it carries, if one of the last ``max_dest_rd_atomic`` READs holds that PSN and the request
  reads a part of what that READ read with its R_Key (rxe); else it is dropped
  (``read_dup_drop``). Its responses read the memory again. As rxe, the READ kept then starts
  at the duplicate's VA (its length kept): a later duplicate that starts before it is dropped.
* Atomics (COMPARE_SWAP, FETCH_ADD; :mod:`~rocegen.sim.models.rnic.atomic_responder`) are
  executed on a QP whose ``access`` holds REMOTE_ATOMIC (else an unsupported opcode: NAK
  invalid request), in rxe's order: opcode sequence, ``max_dest_rd_atomic`` (shared with the
  READs), no payload, an 8-byte aligned VA (else NAK invalid request, ``err_atomic_align``),
  then R_Key, REMOTE_ATOMIC access of the region and the 8 bytes inside it (else NAK remote
  access error). The 64-bit value is little-endian in memory, as on a host. The answer,
  ATOMIC_ACKNOWLEDGE with the original value, queues behind the QP's READ responses. A
  duplicate is answered from the results of the QP's last ``max_dest_rd_atomic`` atomics and
  not executed again; one of no result kept is dropped (``atomic_dup_drop``).
* Response opcodes (READ responses, ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE) to a QP whose requester
  has sent nothing yet are dropped (``drop_response``); those of a QP that has sent requests go
  to its requester (atomics: :func:`~rocegen.sim.models.rnic.requester.handle_atomic_ack`).
  CNPs are counted (``cnp_rx``) and otherwise ignored.
* A QP has one state: a class C error of its responder flushes its send work requests too, and
  a failure of its requester (fatal NAK, retries exhausted) flushes its receive WQEs.
* IPv4 only (the ICRC helper also handles IPv6). UDP datagrams to other ports listed in
  ``udp_ports`` are collected in :attr:`Rnic.udp_rx` (for the out-of-band connection manager).
* Outgoing frames: IPv4 DF, TTL 64, identification counting from 1, UDP checksum 0, UDP source
  port per QP in 0xC000..0xFFFF (hashed from the QP numbers unless given), BTH MigReq 1 (what
  ConnectX sends; ``migreq=0`` for rxe), destination MAC from ``peer_mac``, else the ARP cache,
  else the source MAC of the frame being answered.

The ICRC comes from the project's ICRC reference, :mod:`rocegen.sim.models.icrc` (checked
against independently computed vectors).

The parts, one role each, composed by :class:`Rnic` (:mod:`.nic`): the opcodes as the model reads
them (:mod:`.opcodes`), its behaviour (:mod:`.behaviour`), counters (:mod:`.counters`), memory
(:mod:`.memory`), completion queues (:mod:`.cq`), QP state (:mod:`.qp`), ARP (:mod:`.arp`), the
frames it sends (:mod:`.frames`), the checks of the frames it takes (:mod:`.ingress`), the
responder (:mod:`.responder`), the READ responder (:mod:`.read_responder`), the requester
(:mod:`.requester`) and the answers in time (:mod:`.answers`).
"""

from rocegen.sim.models.rnic.behaviour import CREDITS, IDEAL, Behaviour, credit_code
from rocegen.sim.models.rnic.counters import COUNTERS, STRICT_CHECKS
from rocegen.sim.models.rnic.cq import Completion, WcOpcode, WcStatus
from rocegen.sim.models.rnic.memory import Access, MemoryRegion
from rocegen.sim.models.rnic.nic import Rnic
from rocegen.sim.models.rnic.opcodes import Op
from rocegen.sim.models.rnic.qp import QueuePair, RecvWqe, psn_diff
from rocegen.sim.models.rnic.read_responder import READ_FAULTS
from rocegen.sim.models.rnic.requester import SendOp, SendQueue
from rocegen.wire.headers import UDP_PORT_ROCEV2 as ROCE_PORT
from rocegen.wire.roce import (
    NAK_INV_REQ,
    NAK_PSN_SEQ,
    NAK_REM_ACCESS,
    NAK_REM_OP,
    PMTUS,
    SYN_ACK,
    SYN_RNR,
)

__all__ = [
    "Rnic", "QueuePair", "MemoryRegion", "RecvWqe", "Completion", "Access", "WcOpcode", "WcStatus",
    "Op", "SendOp", "SendQueue", "psn_diff", "Behaviour", "IDEAL", "credit_code", "CREDITS", "COUNTERS",
    "STRICT_CHECKS", "ROCE_PORT", "PMTUS", "READ_FAULTS",
    "SYN_ACK", "SYN_RNR", "NAK_PSN_SEQ", "NAK_INV_REQ", "NAK_REM_ACCESS", "NAK_REM_OP",
]
