"""The RC responder: the host's RDMA WRITEs and SENDs into local memory, answered."""

from amaranth.hdl import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.layouts import PSN_WRITE, QP_CONTEXT, check_num_qps
from rocegen.gateware.roce.recv_queue import RecvQueue
from rocegen.gateware.roce.resp_ack import RespAck
from rocegen.gateware.roce.resp_engine import SEQ_BITS, TAGGED_COMPLETION, RespEngine
from rocegen.gateware.roce.resp_ingress import RespIngress
from rocegen.gateware.roce.resp_layouts import (
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
    RESP_QP_CONFIG,
    RespVerdict,
)
from rocegen.gateware.roce.resp_place import RespPlace

__all__ = ["Responder", "RESP_COUNTERS", "default_config"]

#: Pulse outputs: one per :class:`RespVerdict` (in its order), then the ingress's, the
#: transmitter's and the receive queues'.
RESP_COUNTERS = tuple(v.name.lower() for v in RespVerdict) + (
    "malformed", "overflow", "acks_coalesced", "recv_rejected")


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
    memory, ACKs and NAKs out, receive buffers in and their completions out.

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
    recv : In(stream.Signature(RECV_POST))
        Receive buffers posted by user logic (held while the QP's queue is full).
    cpl : Out(stream.Signature(RECV_COMPLETION))
        Receive completions: a SEND (with the bytes received and any immediate), a WRITE with
        immediate (the DMA length and the immediate), or a buffer ended by an error or flushed.
        A completion leaves only once every payload write of its request has been accepted by
        ``mem``.
    mem : Out(MemWriteSignature(width, addr_width))
        Payload writes, byte-enabled, in order.
    tx : Out(PacketSignature(width, UDP_TX_META))
        ACKNOWLEDGE packets for the UDP transmit port (the stack appends the ICRC).
    The pulses of :data:`RESP_COUNTERS`.

    Behaviour
    ---------
    :class:`~rocegen.gateware.roce.resp_ingress.RespIngress` keeps the well-formed requests whole
    until their ICRC is known; :class:`~rocegen.gateware.roce.resp_engine.RespEngine` decides each
    (:class:`~rocegen.gateware.roce.resp_decide.RespDecide`); :class:`RespPlace` writes the
    payload; :class:`RespAck` sends the answers, merging queued ACKs of a QP;
    :class:`RecvQueue` holds the receive buffers. Byte order: the payload's first byte at its
    address, lane = address modulo W/8. Backpressure: ``mem``, ``tx`` and ``cpl`` may hold
    their producers; requests then wait in the ingress FIFO, and those that find it full are
    dropped and counted (``overflow``), never stalling the receive path.
    """

    def __init__(self, width, num_qps, addr_width, *, rq_depth=16, config_init=None,
                 cpl_depth=32):
        check_width(width)
        check_num_qps(num_qps)
        self.width, self.num_qps = width, num_qps
        self._ingress = RespIngress(width)
        self._engine = RespEngine(num_qps, config_init=config_init)
        self._place = RespPlace(width, addr_width)
        self._ack = RespAck(width)
        self._rq = RecvQueue(num_qps, rq_depth)
        self.cpl_depth = cpl_depth
        super().__init__({
            "i": In(PacketSignature(width)),
            "ctx_qp": Out(range(num_qps)), "ctx": In(QP_CONTEXT),
            "psn_set": In(stream.Signature(PSN_WRITE, always_ready=True)),
            "cfg_w": In(stream.Signature(RESP_CONFIG_WRITE, always_ready=True)),
            "cfg_qp": In(range(num_qps)), "cfg": Out(RESP_QP_CONFIG),
            "recv": In(stream.Signature(RECV_POST)),
            "cpl": Out(stream.Signature(RECV_COMPLETION)),
            "mem": Out(MemWriteSignature(width, addr_width)),
            "tx": Out(PacketSignature(width, UDP_TX_META)),
            **{name: Out(1) for name in RESP_COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        ing = m.submodules.ingress = self._ingress
        eng = m.submodules.engine = self._engine
        place = m.submodules.place = self._place
        ack = m.submodules.ack = self._ack
        rq = m.submodules.recv_queue = self._rq

        # requests: ingress -> engine (headers) and placement (beats)
        wiring.connect(m, wiring.flipped(self.i), ing.i)
        f = ing.o
        m.d.comb += [
            place.i.valid.eq(f.valid), f.ready.eq(place.i.ready),
            place.i.payload.data.eq(f.payload.data), place.i.payload.keep.eq(f.payload.keep),
            place.i.payload.last.eq(f.payload.last),
            eng.head_valid.eq(f.valid), eng.head.eq(f.payload.meta),
            eng.head_done.eq(f.valid & f.ready & f.payload.last),
            self.ctx_qp.eq(eng.ctx_qp), eng.ctx.eq(self.ctx),
            eng.cfg_qp.eq(self.cfg_qp), self.cfg.eq(eng.cfg),
        ]
        wiring.connect(m, eng.act, place.act)
        wiring.connect(m, place.o, wiring.flipped(self.mem))
        wiring.connect(m, wiring.flipped(self.psn_set), eng.psn_set)
        wiring.connect(m, wiring.flipped(self.cfg_w), eng.cfg_w)
        wiring.connect(m, eng.resp, ack.i)
        wiring.connect(m, ack.o, wiring.flipped(self.tx))

        # receive queues
        wiring.connect(m, wiring.flipped(self.recv), rq.post)
        m.d.comb += [rq.rd_qp.eq(eng.rq_qp), eng.rq_valid.eq(rq.head_valid),
                     eng.rq_head.eq(rq.head)]
        wiring.connect(m, eng.rq_pop, rq.pop)
        wiring.connect(m, eng.rq_flush, rq.flush)

        # completions wait for their request's payload to be written (the flushed ones follow
        # the request that flushed them)
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
        placed = Signal(SEQ_BITS)
        with m.If(place.done):
            m.d.sync += placed.eq(placed + 1)
        head = TAGGED_COMPLETION(cq.r_data)
        written = ~(placed - head.seq)[SEQ_BITS - 1]
        m.d.comb += [self.cpl.valid.eq(cq.r_rdy & written), self.cpl.payload.eq(head.cpl),
                     cq.r_en.eq(self.cpl.ready & written)]

        # counters
        for v in RespVerdict:
            m.d.comb += getattr(self, v.name.lower()).eq(eng.decided & (eng.verdict == v))
        m.d.comb += [self.malformed.eq(ing.malformed), self.overflow.eq(ing.overflow),
                     self.acks_coalesced.eq(ack.coalesced), self.recv_rejected.eq(rq.rejected)]
        return m
