"""The responder's acknowledgement sender: ACK, RNR NAK and NAK packets and CNPs, queued, with the
ACKs of a QP coalesced while they wait."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width, keep_mask
from rocegen.gateware.net.layouts import ARP_PEEK
from rocegen.gateware.net.udp_tx import ICRC_BYTES, UDP_TX_META
from rocegen.gateware.roce.responder.resp_ack_frame import ACK_FRAME_IN
from rocegen.gateware.roce.responder.resp_layouts import ACK_PAYLOAD, CNP_PAYLOAD_BYTES, RESP_RESPONSE
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

__all__ = ["RespAck", "is_plain_ack"]


def is_plain_ack(r):
    """A :data:`RESP_RESPONSE` view is an ACK (not a CNP, AETH syndrome bits 6:5 ``00``): the
    only kind of record that may be coalesced."""
    return ~r.cnp & (r.syndrome[5:7] == 0)


class RespAck(wiring.Component):
    """Sends the responses of the RC responder as UDP payloads: ACKNOWLEDGE packets (ACK, RNR
    NAK, NAK) and CNPs, from a small queue in which the ACKs of a QP are coalesced.

    Parameters
    ----------
    width : int
        Data width W of ``o`` (64..512, power of two).
    depth : int
        Records the queue holds (a power of two from 2 to 64; default 8), besides the one
        being sent on ``o``.
    fast : bool
        ACKNOWLEDGE packets may leave whole on ``fast`` (to a
        :class:`~rocegen.gateware.roce.responder.resp_ack_frame.RespAckFrame`, for the network
        stack's ``ip_out``) instead of as UDP payloads on ``o`` (below).

    Ports
    -----
    i : In(stream.Signature(RESP_RESPONSE))
        Responses to send (:data:`~rocegen.gateware.roce.responder.resp_layouts.RESP_RESPONSE`).
        ``ready`` is high while the queue has room, or while the record offered can be merged
        into the newest queued one; it depends on registers and ``i.payload`` only, never on
        ``o.ready``.
    o : Out(PacketSignature(width, UDP_TX_META))
        The packets, for a UDP transmit port of the network stack (without their ICRC, which
        the stack appends: ``meta.udp.icrc`` is 1). An ACKNOWLEDGE (``cnp`` 0) is a BTH (opcode
        0x11, P_Key 0xFFFF, DestQP ``dest_qpn``, PSN ``psn``, every other field 0) and an AETH
        (``syndrome``, ``msn``): 16 bytes, ``meta.udp.length`` 20. A CNP (``cnp`` 1) is a BTH
        (opcode 0x81, BECN 1, P_Key 0xFFFF, DestQP ``dest_qpn``, PSN 0) and 16 zero bytes: 28
        bytes, length 32. ``meta.udp``: ``dst_ip``, ``src_port`` and ``dscp`` from the record,
        ``dst_port`` 4791, ``ecn`` 0, ``checksum`` 0. ``error`` is always 0.
    sent_ack, sent_nak, sent_cnp : Out(1)
        One-cycle pulse when the last beat of an ACK, of an RNR NAK or NAK (syndrome bits 6:5
        not ``00``), or of a CNP is accepted on ``o``.
    coalesced : Out(1)
        One-cycle pulse when an ACK record is taken on ``i`` by replacing the newest queued
        record instead of adding one.
    fast : Out(stream.Signature(ACK_FRAME_IN))
        (``fast`` only) ACKNOWLEDGE records (``ack``) with their next hop's MAC (``mac``, from
        ``peek``), for :class:`~rocegen.gateware.roce.responder.resp_ack_frame.RespAckFrame`.
    peek : Out(ARP_PEEK)
        (``fast`` only) To the network stack's ARP peek: the ``dst_ip`` of the record offered
        on ``i`` in, whether the ARP cache holds its MAC (and the MAC) out, combinationally;
        a record queued keeps the answer it got when it was taken (or merged).
    fast_ok : In(1)
        (``fast`` only) High while a record may take ``fast``: the network stack's ``tx_idle``
        (no packet sent on ``o`` is still on its way to the Ethernet arbiter).

    Behaviour
    ---------
    * Coalescing: an ACK record (``cnp`` 0, syndrome bits 6:5 ``00``) taken while the newest
      queued record is an ACK of the same ``qp`` overwrites it (ACKs are cumulative: the newer
      PSN, MSN and credits win). A record that is loaded into the output register is no longer
      queued: nothing merges into it, nor into one that is loaded in the same cycle. NAKs, RNR
      NAKs and CNPs are never merged, dropped or reordered; an ACK never merges into another
      kind of record or into an ACK of another QP (it is queued behind it). Every other record
      leaves in the order taken.
    * Latency: one cycle. A record taken in cycle t while the queue is empty and ``o`` is free
      (idle, or accepting the last beat of its packet) goes straight into the output register:
      its first beat is offered in cycle t + 1. Otherwise it is queued and loaded in the cycle
      the packet ahead of it ends, so packets leave back to back, one beat per cycle.
    * Byte order: byte 0 of the UDP payload (the BTH opcode) in lane 0 (bits 7:0) of the first
      beat; every beat full but the last, ``keep`` a thermometer code. An ACKNOWLEDGE is 2
      beats at 64 bits and 1 from 128 up; a CNP 4 beats at 64, 2 at 128, 1 at 256 and 512.
    * The fast path (``fast``): the record to load next, while the output register is empty
      (not merely finishing a packet), is offered on ``fast`` instead when it is an
      ACKNOWLEDGE, ARP knew its next hop (``peek``, as the record was taken) and ``fast_ok`` is
      high; taken, it leaves the queue as if loaded (``sent_*`` pulse in that cycle). While
      ``fast.ready`` is low (a frame handed on is still being built or sent) no record is
      loaded at all, so no packet on ``o`` can overtake it; and since ``fast_ok`` is the
      stack's ``tx_idle``, it overtakes no packet sent on ``o`` before it. So every packet
      leaves in the order of its record.
    * Backpressure: ``o.ready`` low holds the beat offered (``o.payload`` and ``o.valid`` come
      from the output register through the lane multiplexer); records queue up until
      ``depth`` are waiting, then ``i.ready`` drops (except for a record that merges). The
      queue is LUT RAM read combinationally at its head.
    """

    def __init__(self, width, depth=8, *, fast=False):
        check_width(width)
        if not isinstance(fast, bool):
            raise TypeError(f"fast must be a bool, not {fast!r}")
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"depth must be an integer number of records, not {depth!r}")
        if not 2 <= depth <= 64 or depth & (depth - 1):
            raise ValueError(f"depth must be a power of two from 2 to 64 records, not {depth}")
        self.width = width
        self.depth = depth
        self.fast_path = fast
        super().__init__({
            "i": In(stream.Signature(RESP_RESPONSE)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
            "sent_ack": Out(1),
            "sent_nak": Out(1),
            "sent_cnp": Out(1),
            "coalesced": Out(1),
            **({"fast": Out(stream.Signature(ACK_FRAME_IN)), "peek": Out(ARP_PEEK),
                "fast_ok": In(1)} if fast else {}),
        })

    def elaborate(self, platform):
        m = Module()
        W, B, D = self.width, self.width // 8, self.depth
        i, o = self.i, self.o
        nb_ack, nb_cnp = -(-ACK_PAYLOAD // B), -(-CNP_PAYLOAD_BYTES // B)

        # the queue: records in LUT RAM; the kind and QP of the newest one in registers
        # (with the fast path each entry keeps what ARP answered for its peer when it was taken)
        entry = data.StructLayout({"r": RESP_RESPONSE, "hit": 1, "mac": 48}) if self.fast_path \
            else RESP_RESPONSE
        mem = m.submodules.mem = Memory(shape=entry, depth=D, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        head = rp.data.r if self.fast_path else rp.data
        rd, wr = Signal(range(D)), Signal(range(D))
        count = Signal(range(D + 1))
        tail_ack, tail_qp = Signal(), Signal(8)
        # the output register: the record being sent, and its beat
        cur, busy, beat = Signal(RESP_RESPONSE), Signal(), Signal(range(nb_cnp))
        last = beat == Mux(cur.cnp, nb_cnp - 1, nb_ack - 1)

        free = ~busy | (o.ready & last)             # the output register is loaded this cycle
        go_fast = Const(0)
        if self.fast_path:
            # (nothing is loaded while a frame handed on is in flight; a record goes fast only
            # while the output register is empty)
            nxt = Signal(RESP_RESPONSE)
            queued = count != 0
            m.d.comb += [nxt.eq(Mux(queued, head, i.payload)), self.peek.ip.eq(i.payload.dst_ip)]
            hit = Mux(queued, rp.data.hit, self.peek.hit)
            f = self.fast
            m.d.comb += [f.valid.eq(~busy & (queued | i.valid) & ~nxt.cnp & hit & self.fast_ok),
                         f.payload.ack.eq(nxt),
                         f.payload.mac.eq(Mux(queued, rp.data.mac, self.peek.mac))]
            go_fast = f.valid & f.ready
            free = free & f.ready
        pop = free & (count != 0)
        bypass = free & (count == 0) & i.valid
        joins = tail_ack & (tail_qp == i.payload.qp) & is_plain_ack(i.payload)
        merge = (count != 0) & joins & ~(pop & (count == 1))
        push = i.valid & i.ready & ~merge & ~bypass
        m.d.comb += [
            i.ready.eq((count != D) | joins),
            rp.addr.eq(rd),
            wp.addr.eq(Mux(merge, wr - 1, wr)),
            *([wp.data.r.eq(i.payload), wp.data.hit.eq(self.peek.hit),
               wp.data.mac.eq(self.peek.mac)] if self.fast_path else [wp.data.eq(i.payload)]),
            wp.en.eq(push | (i.valid & merge)),
            self.coalesced.eq(i.valid & merge),
        ]
        m.d.sync += count.eq(count + push - pop)
        with m.If(push):
            m.d.sync += [wr.eq(wr + 1), tail_ack.eq(is_plain_ack(i.payload)),
                         tail_qp.eq(i.payload.qp)]
        with m.If(pop):
            m.d.sync += rd.eq(rd + 1)
        with m.If(free):
            m.d.sync += [busy.eq((pop | bypass) & ~go_fast), beat.eq(0),
                         cur.eq(Mux(pop, head, i.payload))]
        with m.Elif(o.ready):
            m.d.sync += beat.eq(beat + 1)

        # the packet: BTH, then the AETH (ACKNOWLEDGE) or zeros (CNP)
        bth, aeth = Signal(H.BTH.layout), Signal(H.AETH.layout)
        m.d.comb += [bth.opcode.eq(Mux(cur.cnp, opc.OP_CNP, opc.OP_RC_ACKNOWLEDGE)),
                     bth.pkey.eq(0xFFFF), bth.becn.eq(cur.cnp), bth.dest_qp.eq(cur.dest_qpn)]
        with m.If(~cur.cnp):
            m.d.comb += [bth.psn.eq(cur.psn), aeth.syndrome.eq(cur.syndrome), aeth.msn.eq(cur.msn)]
        lanes = Cat(H.BTH.to_lanes(bth), H.AETH.to_lanes(aeth),
                    Const(0, nb_cnp * W - 8 * (H.BTH.length + H.AETH.length)))
        full = (1 << B) - 1
        keep_last = Mux(cur.cnp, keep_mask(CNP_PAYLOAD_BYTES - (nb_cnp - 1) * B, B),
                        keep_mask(ACK_PAYLOAD - (nb_ack - 1) * B, B))
        p, u = o.payload, o.payload.meta.udp
        m.d.comb += [
            o.valid.eq(busy),
            p.data.eq(lanes.word_select(beat, W) if nb_cnp > 1 else lanes),
            p.keep.eq(Mux(last, keep_last, full)),
            p.last.eq(last),
            u.dst_ip.eq(cur.dst_ip), u.src_port.eq(cur.src_port), u.dst_port.eq(H.UDP_PORT_ROCEV2),
            u.length.eq(Mux(cur.cnp, CNP_PAYLOAD_BYTES, ACK_PAYLOAD) + ICRC_BYTES),
            u.dscp.eq(cur.dscp), u.icrc.eq(1),
        ]
        done = busy & o.ready & last
        m.d.comb += [self.sent_ack.eq(done & is_plain_ack(cur)), self.sent_cnp.eq(done & cur.cnp),
                     self.sent_nak.eq(done & ~cur.cnp & ~is_plain_ack(cur))]
        if self.fast_path:
            fa = self.fast.payload.ack
            with m.If(go_fast):
                m.d.comb += [self.sent_ack.eq(is_plain_ack(fa)), self.sent_nak.eq(~is_plain_ack(fa))]
        return m
