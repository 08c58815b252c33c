"""The responder's READ response generator: one descriptor and one memory read per response
packet."""

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.layouts import AtomicOp, WrSource
from rocegen.gateware.roce.responder.resp_layouts import (
    READ_PROGRESS,
    READ_RETURN,
    READ_TURN,
    RESP_READ_PACKET,
)
from rocegen.wire import opcodes as opc
from rocegen.wire.roce import SYN_ACK

__all__ = ["RespReadGen", "RD_FIRST", "RD_MIDDLE", "RD_LAST", "RD_ONLY"]

#: READ response opcodes (FIRST, MIDDLE, LAST, ONLY).
RD_FIRST, RD_MIDDLE, RD_LAST, RD_ONLY = opc.verb_opcodes(opc.Verb.RDMA_READ_RESPONSE)


def _positive_int(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be {low}..{high}, not {value}")


class RespReadGen(wiring.Component):
    """Turns of queued READs in
    (:class:`~rocegen.gateware.roce.responder.resp_read_queue.RespReadQueue`); their response packets out,
    each as a descriptor for the packet builder and the memory read of its payload.

    Parameters
    ----------
    width : int
        Data width W of the memory words (64..512, power of two): the reads are in its words.
    burst : int
        Packets a turn makes at most before the READ goes back to its queue (1..64; default 4):
        the QPs' READs share the generator in round robin, ``burst`` packets each.
    out_depth : int
        Packets the output queue holds (2..64; default 4).

    Ports
    -----
    turn : In(stream.Signature(READ_TURN))
        A READ, as far as its responses have gone. Taken when no turn is under way.
    ret : Out(stream.Signature(READ_RETURN, always_ready=True))
        The end of a turn, in the cycle its last packet goes into the output queue (or in the
        cycle ``cancel`` is seen): ``done`` with the READ's last response, else the progress.
    cancel : In(1)
        Stop the turn under way now (its QP was set up again): returned, no more packets.
    o : Out(stream.Signature(RESP_READ_PACKET))
        The packets, in order. ``desc`` (:data:`~rocegen.gateware.roce.layouts.PACKET_DESC`):
        ``opcode`` ONLY (0x10) for a READ of at most the PMTU (0 bytes included), else FIRST
        (0x0D), MIDDLE (0x0E)..., LAST (0x0F); ``psn`` from the READ's; ``has_imm`` and ``imm``
        the AETH on FIRST, LAST and ONLY (syndrome 0x1F, an ACK without credit count, as the
        responder's ACKs; the READ's MSN), in the four bytes an ImmDt takes after the BTH;
        ``length`` the PMTU but on the last, ``padcnt`` what it needs; ``local_addr`` the byte
        address of the payload (any alignment); ``qp``, ``dest_qpn``, ``peer_ip``,
        ``udp_sport``, ``dscp``, ``ecn`` from the turn; ``last`` on the READ's last response;
        ``src`` RESPONDER, ``wr_id``, ``ack_req``, ``se``, ``has_reth``, ``va``, ``rkey``,
        ``dma_len`` 0. ``mem`` (:data:`~rocegen.gateware.roce.responder.resp_layouts.READ_MEM`): the
        word address of ``local_addr``, its byte offset in the word, and the words holding the
        payload (0 without payload).

    Behaviour
    ---------
    * A packet a cycle into the output queue (an ``amaranth.lib.fifo.SyncFIFO``: LUT RAM read
      at its head, an entry offered in the cycle after it is written) while it has room. A
      turn's first packet goes in in the cycle the turn is taken, from ``turn`` itself; the
      next turn is taken in the cycle after the last one ends, so with
      :class:`~rocegen.gateware.roce.responder.resp_read_queue.RespReadQueue` a turn of ``burst`` packets
      takes ``burst + 1`` cycles (a single-packet READ 2).
    * Latency: a turn taken in cycle t has its first packet offered on ``o`` in cycle t + 1;
      a turn whose READ ends (or whose burst is one packet) is returned on ``ret`` in the cycle
      it is taken.
    * Backpressure: ``o.ready`` low fills the output queue, then holds the turn; nothing is
      lost. The packets run ahead of their payload's reads by the output queue and whatever
      queues the consumer has (the payload reader's descriptor queue).
    """

    def __init__(self, width, *, burst=4, out_depth=4):
        check_width(width)
        _positive_int("burst", burst, 1, 64)
        _positive_int("out_depth", out_depth, 2, 64)
        self.width, self.burst, self.out_depth = width, burst, out_depth
        super().__init__({
            "turn": In(stream.Signature(READ_TURN)),
            "ret": Out(stream.Signature(READ_RETURN, always_ready=True)),
            "cancel": In(1),
            "o": Out(stream.Signature(RESP_READ_PACKET)),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.width // 8
        lb = B.bit_length() - 1
        q = m.submodules.queue = fifo.SyncFIFO(width=RESP_READ_PACKET.size, depth=self.out_depth)
        m.d.comb += [self.o.valid.eq(q.r_rdy), self.o.payload.eq(q.r_data),
                     q.r_en.eq(self.o.ready)]

        # the turn under way (``active``: its state in ``t``), or the turn offered while none
        # is: its first packet is made from ``turn`` itself, in the cycle it is taken
        active = Signal()
        t_reg = Signal(READ_TURN)
        pmtu_reg = Signal(13)
        count = Signal(range(self.burst))
        taking = self.turn.valid & ~active
        m.d.comb += self.turn.ready.eq(~active)
        t = Signal(READ_TURN)
        pmtu = Signal(13)
        m.d.comb += [t.eq(Mux(active, t_reg, self.turn.payload)),
                     pmtu.eq(Mux(active, pmtu_reg,
                                 (Const(1, 13) << self.turn.payload.pmtu_log2)[:13]))]
        place = Signal(range(self.burst))       # the packet's place in the turn
        m.d.comb += place.eq(Mux(active, count, 0))

        # the next packet
        p = t.prog
        atomic = t.atomic.op != AtomicOp.NONE       # (one packet, whatever the PMTU)
        last = (p.left <= pmtu) | atomic
        size = Signal(13)
        m.d.comb += size.eq(Mux(last, p.left, pmtu))
        pkt = Signal(RESP_READ_PACKET)
        d, mem = pkt.desc, pkt.mem
        m.d.comb += [
            d.qp.eq(t.qp), d.dest_qpn.eq(t.route.dest_qpn), d.psn.eq(p.psn),
            d.opcode.eq(Mux(atomic, opc.OP_RC_ATOMIC_ACKNOWLEDGE,
                            Mux(p.started, Mux(last, RD_LAST, RD_MIDDLE),
                                Mux(last, RD_ONLY, RD_FIRST)))),
            pkt.atomic.eq(t.atomic),
            d.padcnt.eq(-size), d.local_addr.eq(p.va), d.length.eq(size),
            d.has_imm.eq(~p.started | last), d.imm.eq((SYN_ACK << 24) | t.msn),
            d.last.eq(last), d.src.eq(WrSource.RESPONDER),
            d.peer_ip.eq(t.route.dst_ip), d.udp_sport.eq(t.route.src_port),
            d.dscp.eq(t.route.dscp), d.ecn.eq(t.route.ecn),
            mem.addr.eq(p.va[lb:]), mem.offset.eq(p.va[:lb]),
            mem.words.eq(Mux(size == 0, 0, (p.va[:lb] + size + (B - 1)) >> lb)),
        ]
        nxt = Signal(READ_PROGRESS)
        m.d.comb += [nxt.psn.eq(p.psn + 1), nxt.va.eq(p.va + size), nxt.left.eq(p.left - size),
                     nxt.started.eq(1)]

        # a packet a cycle while the queue has room; the turn ends with the READ's last
        # packet, the turn's last one, or a cancel (``cancel`` names a turn under way: none
        # is while one is being taken)
        emit = (active & ~self.cancel | taking) & q.w_rdy
        ends = emit & (last | (place == self.burst - 1))
        m.d.comb += [q.w_data.eq(pkt), q.w_en.eq(emit),
                     self.ret.valid.eq(ends | (active & self.cancel)),
                     self.ret.payload.qp.eq(t.qp), self.ret.payload.done.eq(emit & last),
                     self.ret.payload.prog.eq(nxt)]
        # a turn taken and not ended goes on from the registers
        with m.If(taking & ~ends):
            m.d.sync += [active.eq(1), t_reg.eq(self.turn.payload), pmtu_reg.eq(pmtu),
                         count.eq(emit)]
            with m.If(emit):
                m.d.sync += t_reg.prog.eq(nxt)
        with m.If(active & emit):
            m.d.sync += [t_reg.prog.eq(nxt), count.eq(count + 1)]
        with m.If(active & self.ret.valid):
            m.d.sync += active.eq(0)
        return m
