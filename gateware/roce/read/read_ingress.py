"""The READ requester's ingress: READ response datagrams checked against their QP, parsed and
stored whole before the placement takes them."""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.fifo import fifo_depth
from rocegen.gateware.lib.stream import PacketSignature, check_width, leading_lanes
from rocegen.gateware.roce.ingress_store import ICRC_BYTES, IngressStore, payload_length
from rocegen.gateware.roce.layouts import QP_CONTEXT, QPN_BASE, QpState, check_num_qps
from rocegen.gateware.roce.read.read_layouts import READ_RESP_HEADER
from rocegen.gateware.roce.responder.resp_layouts import LENGTH_BITS
from rocegen.gateware.roce.rx import has_aeth, is_read_response
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

__all__ = ["ReadIngress", "READ_INGRESS_COUNTERS", "READ_HDR_MIN", "READ_HDR_MAX"]

#: Pulse outputs, one per READ response dropped, by reason (in the order the checks are made).
READ_INGRESS_COUNTERS = ("malformed", "drop_pkey", "drop_qp", "drop_state", "drop_peer",
                         "overflow")

#: Bytes before the payload of a READ response MIDDLE (IPv4, UDP, BTH) and of a FIRST, LAST or
#: ONLY (and AETH).
READ_HDR_MIN = H.IPV4.length + H.UDP.length + H.BTH.length
READ_HDR_MAX = READ_HDR_MIN + H.AETH.length
_UDP_AT = 8 * H.IPV4.length
_BTH_AT = 8 * (H.IPV4.length + H.UDP.length)
_AETH_AT = 8 * READ_HDR_MIN


class ReadIngress(wiring.Component):
    """Every RoCEv2 datagram in; the READ responses that pass their QP's checks out, whole,
    with a record of their headers each, and a record of each acknowledgement that passes the
    same checks, in the order they came (an acknowledgement must not overtake the responses
    before it: it would acknowledge their PSNs before their data is placed, and a READ whose
    responses it passes would look cut short).

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    num_qps : int
        QPs in the QP table (1..256), QP numbers from 256.
    depth : int or None
        Beats of the store-and-forward FIFO (a power of two; default: two datagrams of the
        largest IP packet the endpoint takes, 4160 bytes).
    headers : int
        Responses whose records can wait on ``hdr`` (a power of two from 2 to 256; default 32).
    atomics : bool
        ATOMIC_ACKNOWLEDGE datagrams (0x12) are taken as responses too: BTH and AETH their
        headers, the AtomicAckETH (8 bytes) their payload (default False: dropped).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram from the receive path (:class:`~rocegen.gateware.roce.rx.RoceRx`
        ``req``), IPv4 header first, ICRC removed, ``error`` on the last beat when the ICRC was
        bad. Always ready.
    ctx_qp, ctx : Out(range(num_qps)), In(QP_CONTEXT)
        To a context read port of the QP table (``ctx`` one cycle after ``ctx_qp``, which
        is the DestQP's index while a last beat is taken).
    o : Out(PacketSignature(width))
        The READ responses that pass, whole, the same bytes as taken (``error`` 0).
    hdr : Out(stream.Signature(READ_RESP_HEADER))
        One record per datagram of ``o``, in the same order: QP index, BTH opcode and PSN, AETH
        syndrome and MSN (zero on MIDDLE), payload bytes without the pad (from the UDP length,
        which the network stack checks against the datagram), bytes before the payload
        (:data:`READ_HDR_MIN` or :data:`READ_HDR_MAX`). Independent of ``o``: offered as soon
        as its datagram is whole in the FIFO. Between them, in the order of the datagrams, the
        records of the ACKNOWLEDGE datagrams (opcode 0x11, BTH and AETH whole) that pass the
        same checks: no beats on ``o``, ``length`` and ``skip`` 0; the receive path counts
        those dropped.
    malformed, drop_pkey, drop_qp, drop_state, drop_peer, overflow : Out(1)
        One pulse per READ response with a good ICRC and whole headers that does not pass
        (:data:`READ_INGRESS_COUNTERS`), by the first check it fails, in this order: payload
        and pad not a whole number of 4-byte words, or PadCnt more than they hold; P_Key other
        than the default (low 15 bits all ones); DestQP not one of the table's; QP state
        neither RTR nor RTS; IPv4 source not the context's ``peer_ip``; no room in the FIFO
        for its beats or in the record queue. Not for acknowledgements. Registered: 2 cycles
        after the last beat is taken (``overflow`` 3).
    level : Out(range(depth + 1))
        Beats in the FIFO (for PFC's XOFF).

    Behaviour
    ---------
    * Datagrams with a bad ICRC, other opcodes and READ responses shorter than their headers
      (BTH; and AETH on FIRST, LAST and ONLY) are dropped silently (RoceRx counts them);
      nothing is ever stalled, nothing malformed holds anything.
    * Byte order: lanes untouched (byte 0 of the IPv4 header in lane 0 of the first beat).
    * Latency: two register stages (the headers as they are, with the QP's context read at
      the last beat; then the checks), then an
      :class:`~rocegen.gateware.roce.ingress_store.IngressStore`: a response's record is
      offered on ``hdr`` 3 cycles after its last beat is taken, its first beat on ``o`` 4
      cycles after, when the outputs were idle.
    * Throughput: one beat per cycle in and out; one record per cycle on ``hdr``.
    * Backpressure: ``o.ready`` low holds the FIFO's output, ``hdr.ready`` low the record
      queue; the input is never held (a response that does not fit is dropped and counted).
    """

    def __init__(self, width, num_qps, depth=None, *, headers=32, atomics=False):
        check_width(width)
        check_num_qps(num_qps)
        if not isinstance(atomics, bool):
            raise TypeError(f"atomics must be a bool, not {atomics!r}")
        self.atomics = atomics
        if depth is None:
            depth = fifo_depth(4160, width, packets=2)
        self.width, self.num_qps = width, num_qps
        self._store = IngressStore(width, depth, READ_RESP_HEADER, headers=headers)
        self.depth, self.headers = depth, headers
        super().__init__({
            "i": In(PacketSignature(width)),
            "ctx_qp": Out(range(num_qps)),
            "ctx": In(QP_CONTEXT),
            "o": Out(PacketSignature(width)),
            "hdr": Out(stream.Signature(READ_RESP_HEADER)),
            **{name: Out(1) for name in READ_INGRESS_COUNTERS},
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        store = m.submodules.store = self._store
        wiring.connect(m, store.o, wiring.flipped(self.o))
        wiring.connect(m, store.hdr, wiring.flipped(self.hdr))
        m.d.comb += [self.level.eq(store.level), self.i.ready.eq(1)]

        # ---- stage A: the beat, and at the last one the headers, as they are (the QP's context
        # is read meanwhile)
        beat, take = self.i.payload, self.i.valid
        lanes, _ = leading_lanes(m, beat, take, self.width, READ_HDR_MAX)
        ip = H.IPV4.from_lanes(lanes[:_UDP_AT])
        udp = H.UDP.from_lanes(lanes[_UDP_AT:_BTH_AT])
        bth = H.BTH.from_lanes(lanes[_BTH_AT:_AETH_AT])
        aeth = H.AETH.from_lanes(lanes[_AETH_AT:_AETH_AT + 8 * H.AETH.length])
        a_valid, a_beat = Signal(), Signal.like(beat)
        a_src, a_udp_len = Signal(32), Signal(16)
        a_bth, a_aeth = Signal(H.BTH.layout), Signal(H.AETH.layout)
        m.d.sync += a_valid.eq(take)
        with m.If(take):
            m.d.sync += [a_beat.eq(beat), a_src.eq(ip.src), a_udp_len.eq(udp.length),
                         a_bth.eq(bth), a_aeth.eq(aeth)]
        # (the index of a DestQP outside the table reads any context: it is dropped)
        m.d.comb += self.ctx_qp.eq((bth.dest_qp - QPN_BASE)[:8])

        # ---- stage A -> B: the checks, the record
        op, qpn = a_bth.opcode, a_bth.dest_qp
        is_ack = op == opc.OP_RC_ACKNOWLEDGE
        # (an ATOMIC_ACKNOWLEDGE, with atomics: a response whose AtomicAckETH is its payload)
        atomic_ack = (op == opc.OP_RC_ATOMIC_ACKNOWLEDGE) if self.atomics else 0
        aeth_on = has_aeth(op) | is_ack | atomic_ack
        hdr_len = Mux(aeth_on, READ_HDR_MAX, READ_HDR_MIN)
        length, bad = payload_length(m, a_udp_len, hdr_len, a_bth.padcnt, LENGTH_BITS)
        # (fields beyond a datagram shorter than its headers are don't-cares: it is dropped)
        whole = a_udp_len >= hdr_len - H.IPV4.length + ICRC_BYTES
        end = a_valid & a_beat.last & ~a_beat.error & (is_read_response(op) | atomic_ack | is_ack) & \
            whole
        ctx = self.ctx
        fails = [bad, a_bth.pkey[:15] != 0x7FFF,
                 (qpn < QPN_BASE) | (qpn >= QPN_BASE + self.num_qps),
                 (ctx.state != QpState.RTR) & (ctx.state != QpState.RTS), ctx.peer_ip != a_src]
        # (an acknowledgement's trailing bytes are not looked at, as the receive path does)
        passed = end & ~Cat(*fails[1:]).any() & (is_ack | ~bad)
        # the pulses (registered): the first check each dropped response fails
        first_fail = end & ~is_ack
        for name, fail in zip(READ_INGRESS_COUNTERS[:len(fails)], fails):
            m.d.sync += getattr(self, name).eq(first_fail & fail)
            first_fail = first_fail & ~fail

        b_valid, b_beat, b_pass, b_ack = Signal(), Signal.like(beat), Signal(), Signal()
        b_rec = Signal(READ_RESP_HEADER)
        m.d.sync += [b_valid.eq(a_valid), b_beat.eq(a_beat), b_pass.eq(passed), b_ack.eq(is_ack),
                     b_rec.qp.eq((qpn - QPN_BASE)[:8]), b_rec.opcode.eq(op),
                     b_rec.psn.eq(a_bth.psn), b_rec.syndrome.eq(Mux(aeth_on, a_aeth.syndrome, 0)),
                     b_rec.msn.eq(Mux(aeth_on, a_aeth.msn, 0)), b_rec.length.eq(Mux(is_ack, 0, length)),
                     b_rec.skip.eq(Mux(is_ack, 0, hdr_len))]

        # ---- stage B: the beat into the store, a good response's last beat unmarked
        si = store.i
        m.d.comb += [si.valid.eq(b_valid), si.payload.data.eq(b_beat.data),
                     si.payload.keep.eq(b_beat.keep), si.payload.last.eq(b_beat.last),
                     si.payload.error.eq(b_beat.last & ~b_pass), store.rec.eq(b_rec),
                     store.rec_only.eq(b_ack),
                     store.early.eq(0)]     # (the record is known only with the last beat)
        m.d.sync += self.overflow.eq(b_pass & ~b_ack & store.refused)
        return m
