"""The RDMA READ requester's receive side: READ responses checked against the outstanding READs,
their payload written into local memory, and the events for the retry engine."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.memport import MemWriteSignature, check_addr_width
from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.roce.frontend.stream_post import DURABLE_WIDTH
from rocegen.gateware.roce.layouts import ACK_EVENT
from rocegen.gateware.roce.read.read_decide import ReadDecide
from rocegen.gateware.roce.read.read_layouts import (
    OP_ATOMIC_ACK,
    READ_COUNTERS,
    READ_DONE,
    READ_EVENT,
    READ_EXPIRE,
    READ_INPUT,
    READ_REISSUE,
    READ_RESP_HEADER,
    READ_TOUCH,
    ReadLookupSignature,
    ReadVerdict,
)
from rocegen.gateware.roce.responder.resp_durable import RespDurable
from rocegen.gateware.roce.responder.resp_engine import SEQ_BITS
from rocegen.gateware.roce.responder.resp_layouts import RESP_PLACE
from rocegen.gateware.roce.responder.resp_place import RespPlace
from rocegen.wire.atomics import BYTE_ORDERS

__all__ = ["ReadPlace"]


def _check_depth(name, value, lo, hi):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be from {lo} to {hi}, not {value}")
    return value


class ReadPlace(wiring.Component):
    """READ responses (headers and datagram beats) and the endpoint's acknowledgements in; the
    responses' payload written into local memory at any byte alignment; in order, one event per
    response or acknowledgement that the retry engine must see, each once the payload before it
    is written.

    :mod:`rocegen.sim.models.read.read_requester` is the reference model and states the rules; the
    decision is :class:`~rocegen.gateware.roce.read.read_decide.ReadDecide`, against the table of a
    :class:`~rocegen.gateware.roce.read.read_track.ReadTrack` (``lookup``).

    Parameters
    ----------
    width : int
        Data width W (64..512): the beat and the memory word.
    addr_width : int
        Word-address bits of the local memory (1..32).
    acked_writes : bool
        The memory acknowledges writes after taking them (AXI4): the events wait for
        ``mem_durable`` to count the words (through a
        :class:`~rocegen.gateware.roce.responder.resp_durable.RespDurable`); else a word is written when
        ``o`` takes it.
    events : int
        Events that may wait for their writes (4..1024; default 32).
    act_depth : int
        Placement records that may wait for their datagrams (2..64; default 4).
    atomics : None or str
        The byte order of the 64-bit values in local memory when the requester issues atomics
        (an ATOMIC_ACKNOWLEDGE answers one as the ONLY response of an 8-byte READ; its
        AtomicAckETH is placed as the payload, reversed per 8 bytes for ``"little"``); None
        (default) or ``"big"``: placed as it is.

    Ports
    -----
    i : In(PacketSignature(width))
        The READ response datagrams, IPv4 header first (byte 0 in lane 0), ICRC removed, one
        for each record of ``hdr`` and in the same order (``error`` ignored).
    hdr : In(stream.Signature(READ_RESP_HEADER))
        Their headers: QP index, opcode, PSN, AETH (zero on MIDDLE), payload bytes, bytes
        before the payload.
    ack_in : In(stream.Signature(ACK_EVENT))
        The acknowledgements (ACKNOWLEDGE packets) of the receive path.
    timer : In(stream.Signature(READ_EXPIRE))
        QPs whose hole timer expired (``poke``: by a poke; ``again``: with no response since
        the last expiry)
        (:class:`~rocegen.gateware.roce.read.read_hole_timer.ReadHoleTimer` ``expire``): with a hole
        open, the current hole is asked for again (REASK); with READs outstanding and no hole,
        go-back-N from the expected PSN (STALL); else nothing (IDLE).
    touch : Out(stream.Signature(READ_TOUCH, always_ready=True))
        The QP of each response and timer expiry decided, in the cycle it is decided (for the
        hole timer's ``touch``), with ``poke`` when the decision expires the timer at once
        (:class:`~rocegen.gateware.roce.read.read_decide.ReadDecide` ``poke``).
    lookup : Out(ReadLookupSignature())
        To the READ table.
    o : Out(MemWriteSignature(width, addr_width))
        Payload writes: word address, data, byte enables (lane k: byte at ``addr * W/8 + k``),
        the payload's first byte at the byte address its READ and index give it.
    o_atomic : Out(1), with ``atomics`` only
        High with each word on ``o`` that is an atomic's original value (the payload of an
        ATOMIC_ACKNOWLEDGE), not READ data: the pattern sink leaves those out.
    mem_durable : In(DURABLE_WIDTH), with ``acked_writes`` only
        Words of ``o`` acknowledged by the memory in this cycle, in the order taken.
    ack : Out(stream.Signature(ACK_EVENT))
        The events for the retry engine, in the order their inputs were taken.
    done : Out(stream.Signature(READ_DONE, always_ready=True))
        One pulse per READ whose responses are all written: the pulses of the READs an event
        completes come in consecutive cycles, the last in the cycle the event leaves.
    reissue : Out(stream.Signature(READ_REISSUE, always_ready=True))
        A READ to ask again for the rest of: for a go-back-N gap (``send`` 0) in the cycle its
        NAK PSN sequence error leaves on ``ack`` (the request the scheduler sends after the
        retry engine's REWIND); for a hole (``send`` 1: the requester sends it itself) when
        the writes before it are done.
    good, gap, duplicate, ... : Out(1)
        One pulse per input taken, by verdict (:data:`READ_COUNTERS`), in the cycle it is
        decided.

    Behaviour
    ---------
    * Intake: one input every other cycle, a hole timer's expiry first, else a header and an
      acknowledgement in turn when both wait, and only while the placement queue and the event
      queue have room. The QP is looked
      up in the intake cycle; the verdict, the table's update, the placement record and the
      event follow in the next cycle.
    * Placement: :class:`~rocegen.gateware.roce.responder.resp_place.RespPlace`, one placement record
      per response (those not GOOD consume their datagram and write nothing). Byte order: the
      lanes of the datagram rotated to the local address's byte offset.
    * Events: numbered by the responses decided before them (their own included); one leaves
      once the placement has finished that many responses (``acked_writes``: once their words
      are acknowledged), so an acknowledgement never overtakes the payload of a response before
      it: the completer completes a READ only after its data is in memory. An event that
      completes n READs stays n cycles (one ``done`` pulse each); a hole's reissue has no
      acknowledgement and leaves without ``ack``.
    * Backpressure: ``o`` and ``ack`` may hold; the inputs then wait (``hdr`` and ``ack_in``
      are held, ``i`` waits for its placement record). Nothing is dropped here.
    """

    def __init__(self, width, addr_width, *, acked_writes=False, events=32, act_depth=4,
                 atomics=None):
        check_width(width)
        check_addr_width(addr_width)
        if atomics is not None and atomics not in BYTE_ORDERS:
            raise ValueError(f"atomics must be None or one of {', '.join(BYTE_ORDERS)}, "
                             f"not {atomics!r}")
        self.width, self.addr_width, self.atomics = width, addr_width, atomics
        self.acked_writes = bool(acked_writes)
        self.events = _check_depth("events", events, 4, 1024)
        self.act_depth = _check_depth("act_depth", act_depth, 2, 64)
        super().__init__({
            "i": In(PacketSignature(width)),
            "hdr": In(stream.Signature(READ_RESP_HEADER)),
            "ack_in": In(stream.Signature(ACK_EVENT)),
            "timer": In(stream.Signature(READ_EXPIRE)),
            "touch": Out(stream.Signature(READ_TOUCH, always_ready=True)),
            "lookup": Out(ReadLookupSignature()),
            "o": Out(MemWriteSignature(width, addr_width)),
            **({"o_atomic": Out(1)} if atomics is not None else {}),
            **({"mem_durable": In(DURABLE_WIDTH)} if acked_writes else {}),
            "ack": Out(stream.Signature(ACK_EVENT)),
            "done": Out(stream.Signature(READ_DONE, always_ready=True)),
            "reissue": Out(stream.Signature(READ_REISSUE, always_ready=True)),
            **{name: Out(1) for name in READ_COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        dec = m.submodules.decide = ReadDecide()
        swap8, atomics = self.atomics == "little", self.atomics is not None
        place = m.submodules.place = RespPlace(self.width, self.addr_width, swap8=swap8,
                                               tag=atomics)
        acts = m.submodules.acts = SyncFIFO(width=RESP_PLACE.size + atomics,
                                            depth=self.act_depth)
        evq = m.submodules.events = SyncFIFO(width=READ_EVENT.size, depth=self.events)
        lk, hdr, ack_in = self.lookup, self.hdr, self.ack_in

        # ---- intake (cycle t): a header or an acknowledgement, its QP looked up
        l1_valid = Signal()
        l1 = Signal(READ_INPUT)
        turn = Signal()                     # an acknowledgement goes first
        tmr = self.timer
        can = ~l1_valid & acts.w_rdy & evq.w_rdy
        take_tmr = can & tmr.valid
        take_ack = can & ~tmr.valid & ack_in.valid & (turn | ~hdr.valid)
        take_hdr = can & ~tmr.valid & hdr.valid & ~take_ack
        m.d.comb += [tmr.ready.eq(take_tmr), ack_in.ready.eq(take_ack), hdr.ready.eq(take_hdr),
                     lk.valid.eq(take_tmr | take_ack | take_hdr),
                     lk.qp.eq(Mux(take_tmr, tmr.payload.qp,
                                  Mux(take_ack, ack_in.payload.qp, hdr.payload.qp)))]
        m.d.sync += l1_valid.eq(take_tmr | take_ack | take_hdr)
        with m.If(take_tmr):
            m.d.sync += [l1.is_ack.eq(0), l1.is_timer.eq(1), l1.poked.eq(tmr.payload.poke),
                         l1.again.eq(tmr.payload.again),
                         l1.h.eq(0), l1.h.qp.eq(tmr.payload.qp)]
        with m.Elif(take_ack):
            a = ack_in.payload
            m.d.sync += [l1.is_ack.eq(1), l1.is_timer.eq(0), l1.h.eq(0), l1.h.qp.eq(a.qp),
                         l1.h.psn.eq(a.psn),
                         l1.h.syndrome.eq(a.syndrome), l1.h.msn.eq(a.msn), turn.eq(0)]
        with m.Elif(take_hdr):
            m.d.sync += [l1.is_ack.eq(0), l1.is_timer.eq(0), l1.h.eq(hdr.payload), turn.eq(1)]

        # ---- decision (t+1): the table's update, the placement record, the event
        resp = l1_valid & ~l1.is_ack & ~l1.is_timer
        # (a QP's hole timer restarts on each of its responses, and when it expires)
        m.d.comb += [self.touch.valid.eq(l1_valid & ~l1.is_ack),
                     self.touch.payload.qp.eq(l1.h.qp), self.touch.payload.poke.eq(dec.poke),
                     self.touch.payload.expiry.eq(l1.is_timer)]
        decided = Signal(SEQ_BITS)          # responses decided, ever
        m.d.sync += decided.eq(decided + resp)
        ev = Signal(READ_EVENT)
        m.d.comb += [
            dec.inp.eq(l1), dec.view.eq(lk.view),
            lk.advance.eq(l1_valid & dec.advance), lk.retire.eq(l1_valid & dec.retire),
            lk.close.eq(l1_valid & dec.close), lk.hole_we.eq(l1_valid & dec.hole_we),
            lk.hole.eq(dec.hole), lk.fstep.eq(dec.fstep), lk.push.eq(l1_valid & dec.push),
            lk.push_psn.eq(dec.push_psn),
            acts.w_en.eq(resp), acts.w_data.eq(dec.place),
            ev.eq(dec.event), ev.seq.eq(decided + resp),
            evq.w_en.eq(l1_valid & dec.has_event), evq.w_data.eq(ev),
        ]
        for v in ReadVerdict:
            m.d.comb += getattr(self, v.name.lower()).eq(l1_valid & (dec.verdict == v))

        # ---- placement, and the count of responses whose payload is written
        wiring.connect(m, wiring.flipped(self.i), place.i)
        wiring.connect(m, place.o, wiring.flipped(self.o))
        m.d.comb += place.act.payload.eq(acts.r_data[:RESP_PLACE.size])
        if atomics:
            # an ATOMIC_ACKNOWLEDGE's value is marked on its way to memory (and with "little",
            # big-endian on the wire, turned little-endian)
            is_atomic = acts.r_data[RESP_PLACE.size]
            m.d.comb += [acts.w_data[RESP_PLACE.size].eq(l1.h.opcode == OP_ATOMIC_ACK),
                         place.tag.eq(is_atomic), self.o_atomic.eq(place.o_tag)]
            if swap8:
                m.d.comb += place.swap.eq(is_atomic)
        if self.acked_writes:
            dur = m.submodules.durable = RespDurable()
            go = ~dur.hold
            m.d.comb += [
                place.act.valid.eq(acts.r_rdy & go), acts.r_en.eq(place.act.ready & go),
                dur.start.eq(place.act.valid & place.act.ready),
                dur.written.eq(place.o.valid & place.o.ready), dur.done.eq(place.done),
                dur.durable.eq(self.mem_durable),
            ]
            placed = dur.count
        else:
            m.d.comb += [place.act.valid.eq(acts.r_rdy), acts.r_en.eq(place.act.ready)]
            placed = Signal(SEQ_BITS)
            m.d.sync += placed.eq(placed + place.done)

        # ---- events, each once the responses up to its own are written; one that completes
        # READs stays until a ``done`` pulse per READ left (the last with the event)
        head = READ_EVENT(evq.r_data)
        due = evq.r_rdy & ~(placed - head.seq)[SEQ_BITS - 1]
        pulsed = Signal(5)                  # ``done`` pulses of the head event so far
        final = pulsed + 1 >= head.ndone    # the event's last pulse, or it has none
        leave = due & final & (head.quiet | self.ack.ready)
        pulse = due & (head.ndone != 0) & (~final | leave)
        with m.If(leave):
            m.d.sync += pulsed.eq(0)
        with m.Elif(pulse):
            m.d.sync += pulsed.eq(pulsed + 1)
        m.d.comb += [
            self.ack.valid.eq(due & final & ~head.quiet), self.ack.payload.eq(head.ack),
            evq.r_en.eq(leave),
            self.done.valid.eq(pulse), self.done.payload.qp.eq(head.ack.qp),
            self.reissue.valid.eq(leave & head.gap),
            self.reissue.payload.qp.eq(head.ack.qp), self.reissue.payload.wr_id.eq(head.wr_id),
            self.reissue.payload.psn.eq(head.ack.psn),
            self.reissue.payload.offset.eq(head.offset),
            self.reissue.payload.length.eq(head.rest),
            self.reissue.payload.va.eq(head.va), self.reissue.payload.send.eq(head.send),
            self.reissue.payload.atomic.eq(head.atomic),
            self.reissue.payload.local_addr.eq(head.local_addr),
            self.reissue.payload.gen.eq(head.gen),
        ]
        return m

