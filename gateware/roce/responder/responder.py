"""The RC responder: the host's RDMA WRITEs and SENDs into local memory, answered."""

from amaranth.hdl import Module, Mux, Signal, unsigned
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.layouts import ARP_PEEK, ETH_META
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.frontend.stream_post import DURABLE_WIDTH
from rocegen.gateware.roce.layouts import (
    ATOMIC_RESULT,
    CONTEXT_WRITE,
    PSN_WRITE,
    QP_CONTEXT,
    AtomicOp,
    QpState,
    check_num_qps,
)
from rocegen.gateware.roce.responder.recv_queue import RecvQueue
from rocegen.gateware.roce.responder.resp_ack import RespAck
from rocegen.gateware.roce.responder.resp_ack_frame import RespAckFrame
from rocegen.gateware.roce.responder.resp_cnp import DEFAULT_CNP_INTERVAL, RespCnp
from rocegen.gateware.roce.responder.resp_durable import RespDurable
from rocegen.gateware.roce.responder.resp_engine import SEQ_BITS, TAGGED_COMPLETION, RespEngine
from rocegen.gateware.roce.responder.resp_ingress import RespIngress
from rocegen.gateware.roce.responder.resp_layouts import (
    CNP_CONFIG,
    CNP_DSCP,
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
    RESP_PLACE,
    RESP_QP_CONFIG,
    RESP_READ_PACKET,
    RespVerdict,
)
from rocegen.gateware.roce.responder.resp_place import RespPlace
from rocegen.gateware.roce.responder.resp_read import RespRead
from rocegen.gateware.roce.responder.resp_read_flush import RespReadFlush
from rocegen.gateware.roce.responder.resp_read_order import RespReadOrder
from rocegen.gateware.roce.responder.resp_results import RespResults

__all__ = ["Responder", "RESP_COUNTERS", "ATOMIC_COUNTERS", "default_config", "ACT_DEPTH"]

#: Placement records the queue between the engine and the placement stage holds: the engine
#: decides while the packets before are still being placed.
ACT_DEPTH = 4

#: Pulse outputs with ``atomics``: atomics executed (queued to run: FETCH_ADD, COMPARE_SWAP),
#: duplicates answered again from their results, duplicates dropped for want of a result (or
#: of room in the READ queue). They count within the verdicts' counters too.
ATOMIC_COUNTERS = ("atomic_executed", "atomic_replayed", "atomic_dropped")

#: Pulse outputs: one per :class:`RespVerdict` (in its order), then the ingress's, the
#: transmitter's and the receive queues', then the notification point's (CNPs sent, not made
#: within a QP's interval, dropped while another waited).
RESP_COUNTERS = tuple(v.name.lower() for v in RespVerdict) + (
    "malformed", "overflow", "acks_coalesced", "recv_rejected",
    "cnp_sent", "cnp_suppressed", "cnp_dropped")


def default_config(num_qps, base, length, *, rkey_seed=0x5EED, rnr_timer=1):
    """Every QP's configuration after reset: the region [``base``, ``base + length``) writable
    with an R_Key of its own (``rkey_seed`` and the QP index mixed, the index in the low
    byte), and RNR timer code ``rnr_timer``."""
    out = []
    for k in range(num_qps):
        mix = (rkey_seed * 0x9E3779B1 + (k + 1) * 0x85EBCA77) & 0xFFFFFF
        out.append({"mr": {"rkey": mix << 8 | k, "base": base, "length": length, "write": 1,
                           "read": 1}, "rnr_timer": rnr_timer})
    return out


class Responder(wiring.Component):
    """The RC responder of the endpoint: request datagrams in; payload writes into local
    memory, ACKs and NAKs out, receive buffers in and their completions out; with ``reads``,
    RDMA READ requests queued and their response packets out (descriptors and memory reads for
    the endpoint's payload reader and packet builder), else READs refused (NAK invalid request).

    Parameters
    ----------
    width : int
        Data width W (64..512).
    num_qps : int
        QPs (1..256, numbered from 256), the requester's.
    addr_width : int
        Word-address bits of the local memory written.
    rq_depth : int
        Receive buffers each QP can have posted (power of two, 1..1024).
    config_init : list of dict or None
        Each QP's region and RNR timer code after reset (:func:`default_config`; default: no
        region, RNR code 0).
    cpl_depth : int
        Completions that can wait for their data to be written.
    acked_writes : bool
        The memory acknowledges payload writes after it takes them (AXI4: the write response):
        with it, the port ``mem_durable`` counts the words acknowledged, and completions wait
        for them (:class:`~rocegen.gateware.roce.responder.resp_durable.RespDurable`). Without it (on-chip
        memory), a word is written when ``mem`` takes it.
    ack_every : int
        An ACK of every ``ack_every``-th request a QP executes without an answer, besides those
        with AckReq (0..255; 0, the default: on AckReq only;
        :class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide`).
    ingress_beats : int or None
        Beats of the ingress's store-and-forward FIFO (a power of two; default two datagrams
        of 4160 bytes); its fill level is output ``ingress_level`` (for PFC's XOFF).
    reads : bool
        With the READ path (:class:`~rocegen.gateware.roce.responder.resp_read.RespRead` and
        :class:`~rocegen.gateware.roce.responder.resp_read_order.RespReadOrder`; default False).
    rd_depth : int
        READs each QP can have queued, with ``reads`` (a power of two, 16..1024; default 16).
    atomics : bool
        With ``reads``: the RDMA atomics (COMPARE_SWAP, FETCH_ADD) executed, in the READ queues
        beside the READs, their results kept for duplicates
        (:class:`~rocegen.gateware.roce.responder.resp_results.RespResults`); the payload reader
        executes them (port ``atomic_done``). Default False: refused, NAK invalid request.
    flush_port : bool
        With port ``rq_flush``: receive queues flushed from outside (default False).
    ack_frames : bool
        ACKNOWLEDGE packets leave whole, while the network stack's transmit path is idle and
        ARP knows the peer, on ``ack_frame`` (for the stack's ``ip_out``) instead of on ``tx``
        (:class:`~rocegen.gateware.roce.responder.resp_ack_frame.RespAckFrame`; default False).
    cnp_interval, cnp_dscp : int
        The notification point (:class:`~rocegen.gateware.roce.responder.resp_cnp.RespCnp`): cycles
        between two CNPs of a QP after reset (0: a CNP for every request marked CE; default
        4 us at 322.27 MHz) and their DSCP (default 48).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram, IPv4 header first, ICRC checked and removed (``error`` when bad),
        as :class:`~rocegen.gateware.roce.rx.RoceRx` hands them on: always ready.
    ctx_qp, ctx : Out(range(num_qps)), In(QP_CONTEXT)
        A read port of the QP table (context one cycle after the QP).
    psn_set : In(stream.Signature(PSN_WRITE, always_ready=True))
        QPs set up: the first PSN the peer sends is the responder's ePSN.
    cfg_w : In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True))
    cfg_qp, cfg : In(range(num_qps)), Out(RESP_QP_CONFIG)
        The configuration table's writes and a read port (one cycle after the QP).
    cfg2_qp, cfg2 : In(range(num_qps)), Out(RESP_QP_CONFIG)
        Another read port (for the IB CM's REPs).
    recv : In(stream.Signature(RECV_POST))
        Receive buffers posted by user logic (held while the QP's queue is full).
    rq_flush : In(stream.Signature(8)), with ``flush_port`` only
        A QP whose receive buffers are to be flushed (its connection closed: each completes
        FLUSHED on ``cpl``, as after a fatal error); taken in a cycle the engine asks for no
        flush of its own.
    cpl : Out(stream.Signature(RECV_COMPLETION))
        Receive completions: a SEND (with the bytes received and any immediate), a WRITE with
        immediate (the DMA length and the immediate), or a buffer ended by an error or flushed.
        A completion leaves only once every payload write of its request, and of every
        request before it, is in memory: taken by ``mem`` (on chip), or acknowledged on
        ``mem_durable`` (``acked_writes``).
    mem : Out(MemWriteSignature(width, addr_width))
        Payload writes, byte-enabled, in order.
    mem_durable : In(DURABLE_WIDTH), with ``acked_writes`` only
        Words of ``mem`` the memory acknowledged in this cycle, in the order ``mem`` gave
        them (:class:`~rocegen.gateware.roce.memory.payload_memory.PayloadMemory` ``resp_durable``).
    tx : Out(PacketSignature(width, UDP_TX_META))
        ACKNOWLEDGE packets and CNPs for the UDP transmit port (the stack appends the ICRC).
    cnp_cfg : In(stream.Signature(CNP_CONFIG, always_ready=True))
        The CNP interval at run time.
    ack_frame : Out(PacketSignature(width, ETH_META)), with ``ack_frames`` only
        ACKNOWLEDGE packets as whole IPv4 datagrams with their ICRC, ``meta.eth`` the Ethernet
        header, for the network stack's ``ip_out``.
    peek : Out(ARP_PEEK), with ``ack_frames`` only
        To the network stack's ``arp_peek``.
    tx_idle : In(1), with ``ack_frames`` only
        The network stack's ``tx_idle``: an ACKNOWLEDGE goes on ``ack_frame`` only while it is
        high, so it never overtakes a packet sent on ``tx`` before it.
    local_mac, local_ip : In(48), In(32), with ``ack_frames`` only
        Our addresses, the sources of the frames on ``ack_frame``.
    rd : Out(stream.Signature(RESP_READ_PACKET)), with ``reads`` only
        The READ response packets (:class:`~rocegen.gateware.roce.responder.resp_read_gen.RespReadGen`),
        each a descriptor for the packet builder (``src`` RESPONDER) and its memory read.
    rd_sent : In(stream.Signature(8, always_ready=True)), with ``reads`` only
        The last response packet of a READ of this QP was taken by the transmitter, past the
        point where ``rd`` and ``tx`` merge: the QP's answers after the READ may go.
    atomic_done : In(stream.Signature(ATOMIC_RESULT, always_ready=True)), with ``atomics`` only
        Each atomic the payload reader executed (its QP, PSN and original value), for the
        answers to its duplicates.
    ctx_set : In(stream.Signature(CONTEXT_WRITE, always_ready=True)), with ``reads`` only
        The QP table's context writes: one with a state other than RTR and RTS (the QP closed)
        flushes the QP's READ queue.
    The pulses of :data:`RESP_COUNTERS` (and with ``atomics`` of :data:`ATOMIC_COUNTERS`).

    Behaviour
    ---------
    :class:`~rocegen.gateware.roce.responder.resp_ingress.RespIngress` keeps the well-formed requests whole
    until their ICRC is known and hands on their headers ahead of their beats;
    :class:`~rocegen.gateware.roce.responder.resp_engine.RespEngine` decides each, one every two cycles
    (:class:`~rocegen.gateware.roce.responder.resp_check.RespCheck`,
    :class:`~rocegen.gateware.roce.responder.resp_decide.RespDecide`), while the payload of those before
    is still being written; :class:`RespPlace` writes the payload, its records waiting for
    their packets in a queue of :data:`ACT_DEPTH`; :class:`RespAck` sends the answers,
    merging queued ACKs of a QP, and the CNPs :class:`RespCnp` slips in between them for
    requests marked ECN CE;
    :class:`RecvQueue` holds the receive buffers; with ``acked_writes``, :class:`RespDurable`
    counts the requests whose payload the memory has acknowledged, for the completions (a
    completion then leaves at the earliest two cycles after ``mem_durable`` counts its
    request's last word; while the count's queue is full the next placement record waits).
    With ``reads``, each QP's answers on ``tx`` and its READ responses on ``rd`` keep the PSN
    order of their requests (:class:`~rocegen.gateware.roce.responder.resp_read_order.RespReadOrder`):
    an answer behind its QP's READs is parked, one per QP, and the engine goes on; a QP's READ
    queue is flushed when it is set up again, when a fatal NAK puts it in error (its READs
    before the NAK that have not started are never answered) and when it is closed
    (:class:`~rocegen.gateware.roce.responder.resp_read_flush.RespReadFlush`).
    Byte order: the payload's first byte at its address, lane = address modulo W/8.
    Backpressure: ``mem``, ``tx`` and ``cpl`` may hold their producers; requests then wait in
    the ingress FIFO, and those that find it or its queue of records full are dropped and
    counted (``overflow``), never stalling the receive path.
    """

    def __init__(self, width, num_qps, addr_width, *, rq_depth=16, config_init=None,
                 cpl_depth=32, ack_every=0, cnp_interval=DEFAULT_CNP_INTERVAL,
                 cnp_dscp=CNP_DSCP, acked_writes=False, ingress_beats=None, reads=False,
                 rd_depth=16, atomics=False, flush_port=False, ack_frames=False):
        check_width(width)
        check_num_qps(num_qps)
        self.width, self.num_qps = width, num_qps
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        if atomics and not reads:
            raise ValueError("atomics needs reads=True (atomics share the READ queues)")
        self.atomics = atomics
        if not isinstance(flush_port, bool):
            raise TypeError(f"flush_port must be a bool, not {flush_port!r}")
        self.flush_port = flush_port
        self._ingress = RespIngress(width, ingress_beats, atomics=atomics)
        #: Beats of the ingress FIFO (its fill level is ``ingress_level``).
        self.ingress_beats = self._ingress.depth
        self._engine = RespEngine(num_qps, config_init=config_init, ack_every=ack_every)
        self._cnp = RespCnp(num_qps, interval=cnp_interval, dscp=cnp_dscp)
        self._place = RespPlace(width, addr_width)
        if not isinstance(ack_frames, bool):
            raise TypeError(f"ack_frames must be a bool, not {ack_frames!r}")
        self.ack_frames = ack_frames
        self._ack = RespAck(width, fast=ack_frames)
        self._frame = RespAckFrame(width) if ack_frames else None
        self._rq = RecvQueue(num_qps, rq_depth)
        self.cpl_depth = cpl_depth
        self.acked_writes = bool(acked_writes)
        self._durable = RespDurable() if acked_writes else None
        if not isinstance(reads, bool):
            raise TypeError(f"reads must be a bool, not {reads!r}")
        self.reads, self.rd_depth = reads, rd_depth
        self._read = RespRead(width, num_qps, rd_depth=rd_depth, atomics=atomics) if reads else None
        self._results = RespResults(num_qps, rd_depth) if atomics else None
        self._order = RespReadOrder(num_qps, rd_depth) if reads else None
        self._flush = RespReadFlush(num_qps) if reads else None
        super().__init__({
            "i": In(PacketSignature(width)),
            "ctx_qp": Out(range(num_qps)), "ctx": In(QP_CONTEXT),
            "psn_set": In(stream.Signature(PSN_WRITE, always_ready=True)),
            "cfg_w": In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True)),
            "cfg_qp": In(range(num_qps)), "cfg": Out(RESP_QP_CONFIG),
            "cfg2_qp": In(range(num_qps)), "cfg2": Out(RESP_QP_CONFIG),
            "recv": In(stream.Signature(RECV_POST)),
            **({"rq_flush": In(stream.Signature(8))} if flush_port else {}),
            "cpl": Out(stream.Signature(RECV_COMPLETION)),
            "mem": Out(MemWriteSignature(width, addr_width)),
            **({"mem_durable": In(DURABLE_WIDTH)} if acked_writes else {}),
            "tx": Out(PacketSignature(width, UDP_TX_META)),
            "cnp_cfg": In(stream.Signature(CNP_CONFIG, always_ready=True)),
            **({"ack_frame": Out(PacketSignature(width, ETH_META)), "peek": Out(ARP_PEEK),
                "tx_idle": In(1), "local_mac": In(48), "local_ip": In(32)}
               if ack_frames else {}),
            **({"rd": Out(stream.Signature(RESP_READ_PACKET)),
                "rd_sent": In(stream.Signature(unsigned(8), always_ready=True)),
                "ctx_set": In(stream.Signature(CONTEXT_WRITE, always_ready=True))}
               if reads else {}),
            **({"atomic_done": In(stream.Signature(ATOMIC_RESULT, always_ready=True)),
                **{name: Out(1) for name in ATOMIC_COUNTERS}} if atomics else {}),
            "ingress_level": Out(range(self.ingress_beats + 1)),
            **{name: Out(1) for name in RESP_COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        ing = m.submodules.ingress = self._ingress
        eng = m.submodules.engine = self._engine
        place = m.submodules.place = self._place
        ack = m.submodules.ack = self._ack
        rq = m.submodules.recv_queue = self._rq

        # requests: ingress -> engine (headers) and placement (beats); the engine's placement
        # records wait in a queue for their packets' turn
        wiring.connect(m, wiring.flipped(self.i), ing.i)
        m.d.comb += self.ingress_level.eq(ing.level)
        wiring.connect(m, ing.o, place.i)
        wiring.connect(m, ing.hdr, eng.hdr)
        m.d.comb += [
            self.ctx_qp.eq(eng.ctx_qp), eng.ctx.eq(self.ctx),
            eng.cfg_qp.eq(self.cfg_qp), self.cfg.eq(eng.cfg),
            eng.cfg2_qp.eq(self.cfg2_qp), self.cfg2.eq(eng.cfg2),
        ]
        # (a record that finds the queue empty goes straight on if the placement stage takes it)
        acts = m.submodules.act_queue = fifo.SyncFIFO(width=RESP_PLACE.size, depth=ACT_DEPTH)
        rec = stream.Signature(RESP_PLACE).create()
        m.d.comb += [
            rec.valid.eq(acts.r_rdy | eng.act.valid),
            rec.payload.eq(Mux(acts.r_rdy, acts.r_data, eng.act.payload)),
            acts.r_en.eq(rec.ready),
            acts.w_data.eq(eng.act.payload),
            acts.w_en.eq(eng.act.valid & (acts.r_rdy | ~rec.ready)),
            eng.act.ready.eq(acts.w_rdy | (~acts.r_rdy & rec.ready)),
        ]
        self._connect_placement(m, rec, place)
        wiring.connect(m, place.o, wiring.flipped(self.mem))
        wiring.connect(m, wiring.flipped(self.psn_set), eng.psn_set)
        wiring.connect(m, wiring.flipped(self.cfg_w), eng.cfg_w)
        # answers and CNPs: the notification point slips its CNPs in between the answers
        cnp = m.submodules.cnp = self._cnp
        if self._read is None:
            # (no READ queue: every READ finds it full, NAK invalid request; a duplicate READ
            # is dropped)
            m.d.comb += eng.rd_full.eq(1)
            wiring.connect(m, eng.resp, cnp.i)
        wiring.connect(m, eng.ce, cnp.ce)
        wiring.connect(m, wiring.flipped(self.cnp_cfg), cnp.cfg)
        wiring.connect(m, cnp.o, ack.i)
        wiring.connect(m, ack.o, wiring.flipped(self.tx))
        if self._frame is not None:
            frame = m.submodules.ack_frame = self._frame
            wiring.connect(m, ack.fast, frame.i)
            wiring.connect(m, frame.o, wiring.flipped(self.ack_frame))
            wiring.connect(m, ack.peek, wiring.flipped(self.peek))
            m.d.comb += [ack.fast_ok.eq(self.tx_idle), frame.local_mac.eq(self.local_mac),
                         frame.local_ip.eq(self.local_ip)]

        # receive queues
        wiring.connect(m, wiring.flipped(self.recv), rq.post)
        m.d.comb += [rq.rd_qp.eq(eng.rq_qp), eng.rq_valid.eq(rq.head_valid),
                     eng.rq_head.eq(rq.head)]
        wiring.connect(m, eng.rq_pop, rq.pop)
        if self.flush_port:
            # (the engine's flushes first: an outside one waits for a cycle without)
            ext = self.rq_flush
            m.d.comb += [rq.flush.valid.eq(eng.rq_flush.valid | ext.valid),
                         rq.flush.payload.eq(Mux(eng.rq_flush.valid, eng.rq_flush.payload,
                                                 ext.payload)),
                         ext.ready.eq(~eng.rq_flush.valid)]
        else:
            wiring.connect(m, eng.rq_flush, rq.flush)

        # completions wait for their request's payload to be written: taken by the on-chip
        # buffer, or acknowledged by the memory (`acked_writes`) (the flushed ones follow the
        # request that flushed them)
        cq = m.submodules.cpl_queue = fifo.SyncFIFOBuffered(width=TAGGED_COMPLETION.size,
                                                             depth=self.cpl_depth)
        tagged = Signal(TAGGED_COMPLETION)
        m.d.comb += [
            cq.w_en.eq(eng.cpl.valid | rq.flushed.valid), cq.w_data.eq(tagged),
            eng.cpl.ready.eq(cq.w_rdy), rq.flushed.ready.eq(cq.w_rdy & ~eng.cpl.valid),
        ]
        with m.If(eng.cpl.valid):
            m.d.comb += tagged.eq(eng.cpl.payload)
        with m.Else():
            m.d.comb += [tagged.cpl.eq(rq.flushed.payload), tagged.seq.eq(eng.seq)]
        if self._durable is None:
            placed = Signal(SEQ_BITS)
            with m.If(place.done):
                m.d.sync += placed.eq(placed + 1)
        else:
            placed = self._durable.count
        head = TAGGED_COMPLETION(cq.r_data)
        written = ~(placed - head.seq)[SEQ_BITS - 1]
        m.d.comb += [self.cpl.valid.eq(cq.r_rdy & written), self.cpl.payload.eq(head.cpl),
                     cq.r_en.eq(self.cpl.ready & written)]
        if self._read is not None:
            self._connect_reads(m, eng, cnp, ack, placed)
        if self._results is not None:
            res = m.submodules.results = self._results
            wiring.connect(m, wiring.flipped(self.atomic_done), res.put)
            m.d.comb += [res.qp.eq(eng.rd_qp), res.psn.eq(eng.res_psn),
                         eng.res_hit.eq(res.hit), eng.res_orig.eq(res.orig)]
            push, op = eng.rd_push.valid, eng.rd_push.payload.atomic.op
            m.d.comb += [
                self.atomic_executed.eq(push & ((op == AtomicOp.FETCH_ADD) |
                                                (op == AtomicOp.COMPARE_SWAP))),
                self.atomic_replayed.eq(push & (op == AtomicOp.REPLAY)),
                self.atomic_dropped.eq(eng.decided & eng.atomic & ~push &
                                       (eng.verdict == RespVerdict.DUPLICATE)),
            ]

        # counters
        for v in RespVerdict:
            m.d.comb += getattr(self, v.name.lower()).eq(eng.decided & (eng.verdict == v))
        m.d.comb += [self.malformed.eq(ing.malformed), self.overflow.eq(ing.overflow),
                     self.acks_coalesced.eq(ack.coalesced), self.recv_rejected.eq(rq.rejected),
                     self.cnp_sent.eq(ack.sent_cnp), self.cnp_suppressed.eq(cnp.suppressed),
                     self.cnp_dropped.eq(cnp.dropped)]
        return m

    def _connect_reads(self, m, eng, cnp, ack, placed):
        """The READ path: the engine's READs into the queues (set-ups, fatal NAKs and closes
        flush them), their response packets out through the order keeper, which also stands
        between the engine's answers and the notification point."""
        rd = m.submodules.read = self._read
        order = m.submodules.read_order = self._order
        fl = m.submodules.read_flush = self._flush
        wiring.connect(m, eng.rd_push, rd.push)
        state = self.ctx_set.payload.context.state
        m.d.comb += [rd.full_qp.eq(eng.rd_qp), eng.rd_full.eq(rd.full),
                     fl.setup.valid.eq(self.psn_set.valid),
                     fl.setup.payload.eq(self.psn_set.payload.qp),
                     fl.error.valid.eq(eng.rq_flush.valid),
                     fl.error.payload.eq(eng.rq_flush.payload),
                     fl.close.valid.eq(self.ctx_set.valid & (state != QpState.RTR) &
                                       (state != QpState.RTS)),
                     fl.close.payload.eq(self.ctx_set.payload.qp),
                     rd.flush.valid.eq(fl.o.valid), rd.flush.payload.eq(fl.o.payload),
                     order.flush.valid.eq(fl.o.valid), order.flush.payload.eq(fl.o.payload),
                     order.drop.valid.eq(self.psn_set.valid),
                     order.drop.payload.eq(self.psn_set.payload.qp),
                     order.done.valid.eq(rd.done.valid), order.done.payload.eq(rd.done.payload),
                     rd.level_qp.eq(order.level_qp), order.level.eq(rd.level),
                     rd.hold.eq(order.hold)]
        wiring.connect(m, wiring.flipped(self.rd_sent), order.sent)
        wiring.connect(m, rd.o, order.rd_i)
        wiring.connect(m, order.rd_o, wiring.flipped(self.rd))
        wiring.connect(m, eng.resp, order.ans_i)
        wiring.connect(m, order.ans_o, cnp.i)
        # records in the answer queue (merged ones leave as they are taken) until their
        # packet's last beat is taken
        held = Signal(8)
        came = ack.i.valid & ack.i.ready & ~ack.coalesced
        went = ack.o.valid & ack.o.ready & ack.o.payload.last
        if self._frame is not None:
            # (a frame built whole: once its last beat is in the Ethernet arbiter)
            fo = self._frame.o
            went = went | (fo.valid & fo.ready & fo.payload.last)
        m.d.sync += held.eq(held + came - went)
        # (an answer taking its place in this cycle is of a request after every READ pushed)
        m.d.comb += order.idle.eq(held == 0)
        # the sequence number of the request before the newest READ (the engine's, in the
        # cycle after the push, is the READ's): its responses read memory once every request
        # before it is placed (not the READ itself, which writes nothing)
        pushed, before = Signal(), Signal(SEQ_BITS)
        m.d.sync += pushed.eq(eng.rd_push.valid)
        with m.If(pushed):
            m.d.sync += before.eq(eng.seq - 1)
        m.d.comb += order.written.eq(~(placed - before)[SEQ_BITS - 1])

    def _connect_placement(self, m, act, place):
        """The placement records (``act``) to the placement stage; with ``acked_writes``, through
        :class:`RespDurable`, which counts the requests whose payload the memory has
        acknowledged and holds new records back while its queue is full."""
        if self._durable is None:
            m.d.comb += [place.act.payload.eq(act.payload), place.act.valid.eq(act.valid),
                         act.ready.eq(place.act.ready)]
            return
        dur = m.submodules.durable = self._durable
        go = ~dur.hold
        m.d.comb += [
            place.act.payload.eq(act.payload),
            place.act.valid.eq(act.valid & go), act.ready.eq(place.act.ready & go),
            dur.start.eq(place.act.valid & place.act.ready),
            dur.written.eq(place.o.valid & place.o.ready), dur.done.eq(place.done),
            dur.durable.eq(self.mem_durable),
        ]
