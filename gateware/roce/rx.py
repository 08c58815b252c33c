from amaranth.hdl import Module, Signal
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.checksum import be_words, ones_complement_sum
from rocegen.gateware.lib.length_cut import LengthCut
from rocegen.gateware.lib.stream import PacketSignature, check_width, leading_lanes
from rocegen.gateware.net.layouts import ETH_META
from rocegen.gateware.roce.icrc import ICRC_BYTES, IcrcCheck
from rocegen.gateware.roce.layouts import ACK_EVENT, QP_CONTEXT, QpState, check_num_qps
from rocegen.gateware.roce.responder.resp_ingress import is_request
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.headers import IP_PROTO_UDP, UDP_PORT_ROCEV2
from rocegen.wire.ibcm import QP1

__all__ = ["RoceRx", "Verdict", "COUNTERS", "ACK_MIN", "CNP_MIN", "BTH_MIN", "READ_AETH_MIN",
           "is_read_response", "has_aeth"]

_IP_UDP = H.IPV4.length + H.UDP.length
#: Shortest UDP payload of any RoCEv2 packet (BTH and ICRC).
BTH_MIN = H.BTH.length + ICRC_BYTES
#: Shortest UDP payload of an ACKNOWLEDGE (BTH, AETH and ICRC).
ACK_MIN = H.BTH.length + H.AETH.length + ICRC_BYTES
#: Shortest UDP payload of a CNP (BTH, 16 reserved bytes and ICRC).
CNP_MIN = H.BTH.length + H.CNP_PAYLOAD.length + ICRC_BYTES
#: Shortest UDP payload of a READ response FIRST, LAST or ONLY (BTH, AETH and ICRC; a MIDDLE
#: needs :data:`BTH_MIN`).
READ_AETH_MIN = ACK_MIN


class Verdict(enum.Enum, shape=4):
    """What became of a datagram, in the order the checks are made."""
    SHORT = 0       # shorter than BTH_MIN, or than ACK_MIN / CNP_MIN for its opcode
    ICRC = 1        # bad ICRC (or damaged on the way in)
    OPCODE = 2      # neither ACKNOWLEDGE nor CNP
    PKEY = 3        # P_Key other than the default (low 15 bits all ones)
    QP = 4          # DestQP is not one of our QPs
    STATE = 5       # the QP is neither RTR nor RTS
    PEER = 6        # IPv4 source is not the QP's peer
    ACK = 7         # an acknowledgement event
    CNP = 8         # a congestion notification for one of our QPs
    REQUEST = 9     # a request (SEND, WRITE, READ, atomic): handed to the responder on ``req``
    PENDING = 10    # (internal: the context checks are still to be made)
    READ_RESPONSE = 11  # (``reads`` only) a READ response: handed to the READ requester on ``req``
    MAD = 12        # (``ibcm`` only) a UD SEND_ONLY to QP1: handed to the IB CM on ``req``
    FOREIGN = 13    # not a datagram the network stack delivers on UDP port 4791: not counted


#: Pulse outputs, one per verdict (in :class:`Verdict` order, PENDING left out).
COUNTERS = ("drop_short", "icrc_bad", "drop_opcode", "drop_pkey", "drop_qp", "drop_state",
            "drop_peer", "acks", "cnp", "requests", "read_responses", "mads")
#: The verdict each pulse output counts.
_COUNTER_VERDICTS = dict(zip(COUNTERS, (v for v in Verdict
                                          if v not in (Verdict.PENDING, Verdict.FOREIGN)),
                             strict=True))


def is_read_response(opcode):
    """The BTH ``opcode`` is an RC RDMA READ response (FIRST, MIDDLE, LAST or ONLY)."""
    return opc.matches(opcode, opc.READ_RESPONSES)


def has_aeth(opcode):
    """A READ response ``opcode`` that carries an AETH (all but MIDDLE)."""
    return opc.matches(opcode, [c for c in opc.READ_RESPONSES if opc.has_aeth(c)])

# the datagram as it leaves the ICRC check: IPv4 header, UDP header, BTH, AETH
_LANES = _IP_UDP + H.BTH.length + H.AETH.length
_BTH_AT = 8 * _IP_UDP
_AETH_AT = _BTH_AT + 8 * H.BTH.length

#: What the header checks found for a datagram, queued until its ICRC verdict: the verdict
#: (every check but the ICRC's and the UDP checksum's), the BTH DestQP, the event (whose
#: ``qp`` is the QP index), whether a UDP checksum verdict is queued for it and whether the
#: verdict is ACK (so that the event register's enable needs no compare of the verdict).
_RECORD = data.StructLayout({"verdict": Verdict, "dest": 24, "ev": ACK_EVENT, "checked": 1,
                              "ack": 1})


class RoceRx(wiring.Component):
    """RoCEv2 receive: the datagrams of UDP port 4791 picked out of the IPv4 datagrams as the
    Ethernet layer hands them on (headers in place), their ICRC checked, acknowledgements out.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    num_qps : int
        QPs in the QP table (1..256), QP numbers from 256.
    reads : bool
        The endpoint has a READ requester: READ responses get a verdict of their own
        (``read_responses``) instead of ``drop_opcode``.
    ibcm : bool
        The endpoint has the IB CM: UD SEND_ONLY packets to QP1 get a verdict of their own
        (``mads``) instead of ``drop_opcode``.
    mtu : int
        The network stack's IPv4 MTU (576..9000): a longer total length is not delivered.

    Ports
    -----
    i : In(PacketSignature(width, ETH_META))
        Every IPv4 datagram, header first in lane 0, as the Ethernet layer hands it to IPv4
        receive (the network stack's ``ip_in``): Ethernet padding included, ``error`` on the
        last beat of a damaged frame. ``meta`` is not read.
    local_ip : In(32)
        Our IPv4 address, as the network stack's.
    udp_checksum : In(stream.Signature(1, always_ready=True))
        The network stack's verdict (1: good) on each datagram it delivers on UDP port 4791
        with a UDP checksum other than 0, in order: the ``error`` of its last beat there,
        negated. Queued (room for one per datagram inside this block, which is all the stack
        can deliver ahead of it, both taking the datagrams from one fork).
    ack : Out(stream.Signature(ACK_EVENT))
        One event per acknowledgement that passes every check: QP index, AETH syndrome and MSN,
        BTH PSN. A register; ``payload`` is stable while ``valid`` waits for ``ready``.
    lookup_qpn / lookup_index / lookup_valid
        To the QP table's combinational DestQP lookup.
    rx_qp / rx_context
        To the QP table's receive-side context read (``rx_context`` one cycle after ``rx_qp``).
    drop_short, icrc_bad, drop_opcode, drop_pkey, drop_qp, drop_state, drop_peer, acks, cnp,
    requests, read_responses, mads
        Exactly one of these pulses for one cycle per datagram of UDP port 4791
        (:class:`Verdict`; a foreign datagram pulses none), in the order the checks are made:
        length (shorter than :data:`BTH_MIN` bytes, or an ACKNOWLEDGE
        shorter than :data:`ACK_MIN`, or a CNP shorter than :data:`CNP_MIN`, or, with
        ``reads``, a READ response FIRST, LAST or ONLY shorter than :data:`READ_AETH_MIN`), ICRC
        (or the datagram arrived with ``error``, or shorter than its IPv4 total length, or with
        a UDP checksum that is not 0 and wrong), opcode (ACKNOWLEDGE 0x11 and CNP 0x81 are
        taken), P_Key (0xFFFF, or any with the low 15 bits all ones), DestQP in the table, QP
        state RTR or RTS, IPv4 source equal to the context's ``peer_ip``. ``acks`` pulses in the
        cycle the event is loaded into the ``ack`` register.
    cnp_qp : Out(8)
        QP index of the datagram, valid while ``cnp``, ``drop_state`` or ``drop_peer`` pulses
        (the verdicts made after the QP is known).
    req : Out(PacketSignature(width))
        Every datagram as the ICRC check leaves it (IPv4 header first, ICRC removed, ``error``
        on the last beat when it was bad, and on a foreign datagram's, so that every consumer
        drops it as one with a bad ICRC), beat by beat in the cycle it is taken, for the
        responder, whose ingress is always ready (``req.ready`` is not looked at). Requests (BTH
        opcode :func:`~rocegen.gateware.roce.responder.resp_ingress.is_request`) get the ``requests``
        verdict after the length and ICRC checks: the responder makes the others. With
        ``reads``, so do READ responses (:func:`is_read_response`, the ``read_responses``
        verdict): the READ requester's ingress
        (:class:`~rocegen.gateware.roce.read.read_ingress.ReadIngress`) makes the others. Without
        ``reads``, ``read_responses`` is constant 0. With ``ibcm``, so do UD SEND_ONLY
        packets to QP1 (the ``mads`` verdict): the IB CM's QP1 ingress
        (:class:`~rocegen.gateware.roce.ibcm.qp1_ingress.Qp1Ingress`) makes the others. Without
        ``ibcm``, ``mads`` is constant 0.
    data_seen : Out(stream.Signature(24, always_ready=True))
        The BTH DestQP of each datagram with the ``requests`` verdict, in the cycle of the
        verdict: the QPs packets arrive on, for the IB CM (the first on a QP whose REP went
        establishes its connection).

    Behaviour
    ---------
    * Path: each datagram is cut to its IPv4 total length
      (:class:`~rocegen.gateware.lib.length_cut.LengthCut`, combinational; one shorter than it
      is marked ``error``; a frame's FCS verdict on bytes beyond it is not waited for, the ICRC
      covering the datagram) and goes into :class:`~rocegen.gateware.roce.icrc.IcrcCheck`
      (``offset=0``), which checks and strips the ICRC; its headers are still in place, and the ICRC covers
      them. The headers are checked while the ICRC check runs: as a datagram goes into it,
      its first 44 bytes (IPv4, UDP, BTH, AETH) are kept and read through the header table,
      its length is compared with the minimum of each kind, its QP is looked up and its context
      read, and the outcome of every check but the ICRC's waits in a queue of records (LUT
      RAM). When the datagram's last beat leaves the ICRC check, its verdict is its record's,
      or ``icrc_bad`` if the ICRC was bad (after the length check). Every datagram is consumed
      whole, whatever its length or contents: nothing malformed can stop the input. (A QP's
      context is read as its datagram goes into the ICRC check, a few cycles before the
      verdict: the QP state the datagram met when it came in.)
    * Which datagrams are RoCEv2: those the network stack's IPv4 and UDP receive layers
      deliver on UDP port 4791, the same checks made here on the datagram's own headers:
      version 4, IHL 5, the header checksum, a total length of 20 to ``mtu`` bytes, not a
      fragment, destination ``local_ip``, protocol UDP, at least the 28 bytes of both headers,
      destination port 4791 and a UDP length of the total length less 20. Any other datagram
      is foreign: no verdict pulse, and ``error`` on its last beat on ``req``. The stack takes
      the same datagrams apart in parallel and counts its own drops; its port 4791 is read
      only for the UDP checksum's verdicts: a datagram of port 4791 with a UDP checksum other
      than 0 waits at the ICRC check's output for the stack's verdict on it
      (``udp_checksum``), and a wrong one is treated as a bad ICRC. (Both sides make the same
      checks on the same datagrams, so each such datagram here has exactly one verdict there:
      the tests hold the two against each other.) RoCEv2's senders send checksum 0, which
      waits for nothing.
    * Latency: the ``ack`` event is offered 1 cycle after the last beat of the datagram leaves
      the ICRC check, which is ``IcrcCheck.latency - 1`` cycles (3) after the input's last beat:
      :attr:`ack_latency` (4 cycles at 64, 128 and 512 bits, 5 at 256; :meth:`event_latency`)
      for an ACKNOWLEDGE with UDP checksum 0. The verdict pulse comes in the cycle the
      datagram's last beat leaves the ICRC check (for a good ACK, in the cycle its event is
      loaded into the ``ack`` register, one cycle before it is offered). A datagram's record is
      queued 2 cycles after its last beat goes into the ICRC check, before that beat can leave
      it (3 cycles after, at the earliest).
    * Throughput: one beat per cycle, one datagram per cycle at 512 bits (an ACK's 48 bytes
      are one beat).
    * Backpressure: only ``ack.ready`` low holds anything. While an event waits in the ``ack``
      register, the next datagram's last beat waits at the ICRC check's output; then the check's
      queue fills and ``i`` is held. Verdicts resume in order when ``ack.ready`` rises; nothing
      is lost. The record queue never fills: it has room for a record per beat the ICRC check
      can hold (every datagram in it has a beat there) and for those in the header stages.
    """

    def __init__(self, width, num_qps, *, reads=False, ibcm=False, mtu=1500):
        check_width(width)
        check_num_qps(num_qps)
        for name, value in (("reads", reads), ("ibcm", ibcm)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, not {value!r}")
        if not isinstance(mtu, int) or isinstance(mtu, bool) or not 576 <= mtu <= 9000:
            raise ValueError(f"IPv4 MTU must be 576..9000 bytes, not {mtu!r}")
        self.mtu = mtu
        self.width = width
        self.num_qps = num_qps
        self.reads = reads
        self.ibcm = ibcm
        self._icrc = IcrcCheck(width, None, offset=0, ip_version=4)
        # records queued: one per datagram whose last beat is in the ICRC check (at most one per
        # beat it holds: its pipeline and its queue) or in the two header stages, and one spare
        need = self._icrc.stages + self._icrc.queue_depth + 3
        self._records = 1 << (need - 1).bit_length()
        #: Cycles from the last input beat of an ACKNOWLEDGE to its ``ack`` event.
        self.ack_latency = self.event_latency()
        super().__init__({
            "i": In(PacketSignature(width, ETH_META)),
            "local_ip": In(32),
            "udp_checksum": In(stream.Signature(1, always_ready=True)),
            "ack": Out(stream.Signature(ACK_EVENT)),
            "lookup_qpn": Out(24),
            "lookup_index": In(8),
            "lookup_valid": In(1),
            "rx_qp": Out(range(num_qps)),
            "rx_context": In(QP_CONTEXT),
            **{name: Out(1) for name in COUNTERS},
            "cnp_qp": Out(8),
            "req": Out(PacketSignature(width)),
            "data_seen": Out(stream.Signature(24, always_ready=True)),
        })

    def event_latency(self, length=ACK_MIN):
        """Cycles from the last input beat of an ACKNOWLEDGE (a datagram of ``length`` bytes
        of UDP payload, without Ethernet padding and with UDP checksum 0) to its ``ack``
        event, without backpressure: the ICRC check's latency less one (the datagram goes into
        it as it comes), and 1. The same at every length."""
        if not isinstance(length, int) or length < ACK_MIN:
            raise ValueError(f"an ACKNOWLEDGE's UDP payload has at least {ACK_MIN} bytes, "
                             f"not {length!r}")
        return self._icrc.latency

    def elaborate(self, platform):
        m = Module()
        W = self.width

        # ---- cut each datagram to its IPv4 total length (Ethernet padding off), check and
        # strip the ICRC
        cut = m.submodules.cut = LengthCut(W, ETH_META,
                                           field_at=H.IPV4.offset("total_length")[0])
        wiring.connect(m, wiring.flipped(self.i), cut.i)
        icrc = m.submodules.icrc = self._icrc
        m.d.comb += [
            icrc.i.valid.eq(cut.o.valid),
            icrc.i.payload.data.eq(cut.o.payload.data),
            icrc.i.payload.keep.eq(cut.o.payload.keep),
            icrc.i.payload.last.eq(cut.o.payload.last),
            icrc.i.payload.error.eq(cut.o.payload.error),
            cut.o.ready.eq(icrc.i.ready),
        ]
        # ---- the headers are read as the datagram goes into the ICRC check (they are checked
        # while the check runs); the verdict is made when its last beat comes out. The stack's
        # UDP checksum verdicts wait in a queue of their own (one per datagram with a record,
        # at most)
        records = m.submodules.records = SyncFIFO(width=_RECORD.size, depth=self._records)
        checksum = m.submodules.checksum = SyncFIFO(width=1, depth=self._records)
        m.d.comb += [checksum.w_en.eq(self.udp_checksum.valid),
                     checksum.w_data.eq(self.udp_checksum.payload)]
        self._elaborate_headers(m, W, icrc.i, records)
        self._elaborate_verdict(m, icrc.o, records, checksum)
        return m

    def _elaborate_headers(self, m, W, s, records):
        """Stages H -> C -> record: each datagram's first :data:`_LANES` bytes and length
        captured at its last beat into the ICRC check (``s``), the IPv4 and UDP checks (those
        of the network stack's receive layers), the BTH checks and the DestQP lookup, then the
        context checks and the IPv4 header checksum's compare, into the record queue. They
        never stall: the queue holds a record for every datagram inside the ICRC check (see
        ``_records``)."""
        B = W // 8

        def length_at_least(idx, keep, n):
            """The datagram ending with this beat (beat ``idx``) has at least ``n`` bytes."""
            k, lane = divmod(n - 1, B)
            return (idx > k) | ((idx == k) & keep[lane])

        # (the datagram still holds its ICRC here)
        lengths = {"udp": _IP_UDP,
                   "bth": _IP_UDP + H.BTH.length + ICRC_BYTES,
                   "ack": _IP_UDP + H.BTH.length + H.AETH.length + ICRC_BYTES,
                   "cnp": _IP_UDP + H.BTH.length + H.CNP_PAYLOAD.length + ICRC_BYTES}
        top = -(-max(lengths.values()) // B)

        # stage H: a datagram's headers and length flags
        h_valid = Signal()
        h_lanes = Signal(8 * _LANES)
        h_len = {name: Signal(name=f"h_len_{name}") for name in lengths}
        take = s.valid & s.ready
        beat = s.payload
        lanes, idx = leading_lanes(m, beat, take, W, _LANES, count_to=top)
        udp_now = H.UDP.from_lanes(lanes[8 * H.IPV4.length:8 * _IP_UDP])
        h_checked = Signal()
        m.d.sync += h_valid.eq(take & beat.last)
        with m.If(take & beat.last):
            m.d.sync += [
                h_lanes.eq(lanes[:8 * _LANES]),
                h_checked.eq(udp_now.checksum != 0),
                *(h_len[name].eq(length_at_least(idx, beat.keep, n))
                  for name, n in lengths.items()),
            ]
        if self.reads:
            # (the READ response opcodes decoded here, to keep the verdict's logic shallow)
            h_rr, h_aeth = Signal(), Signal()
            op = H.BTH.from_lanes(lanes[_BTH_AT:_BTH_AT + 8 * H.BTH.length]).opcode
            with m.If(take & beat.last):
                m.d.sync += [h_rr.eq(is_read_response(op)), h_aeth.eq(has_aeth(op))]

        # ---- stage H -> C: IPv4 and UDP checks, header checks, DestQP lookup, context read
        ip = H.IPV4.from_lanes(h_lanes[:8 * H.IPV4.length])
        udp = H.UDP.from_lanes(h_lanes[8 * H.IPV4.length:8 * _IP_UDP])
        bth = H.BTH.from_lanes(h_lanes[_BTH_AT:_BTH_AT + 8 * H.BTH.length])
        aeth = H.AETH.from_lanes(h_lanes[_AETH_AT:_AETH_AT + 8 * H.AETH.length])
        # (what the stack's receive layers deliver on port 4791; the header's checksum is
        # compared in the next stage)
        ours = self._ip_udp_checks(ip, udp, h_len["udp"])
        words = be_words(h_lanes[:8 * H.IPV4.length])
        is_ack = bth.opcode == opc.OP_RC_ACKNOWLEDGE
        is_cnp = bth.opcode == opc.OP_CNP
        verdict = Signal(Verdict)
        short = ~h_len["bth"] | (is_ack & ~h_len["ack"]) | (is_cnp & ~h_len["cnp"])
        if self.reads:
            short = short | (h_aeth & ~h_len["ack"])
        with m.If(short):
            m.d.comb += verdict.eq(Verdict.SHORT)
        with m.Elif(is_request(bth.opcode)):
            m.d.comb += verdict.eq(Verdict.REQUEST)
        with m.Elif(self.ibcm & (bth.opcode == opc.OP_UD_SEND_ONLY) & (bth.dest_qp == QP1)):
            m.d.comb += verdict.eq(Verdict.MAD)
        with m.Elif(~is_ack & ~is_cnp):
            m.d.comb += verdict.eq(Verdict.OPCODE)
            if self.reads:
                with m.If(h_rr):
                    m.d.comb += verdict.eq(Verdict.READ_RESPONSE)
        with m.Elif(bth.pkey[:15] != 0x7FFF):
            m.d.comb += verdict.eq(Verdict.PKEY)
        with m.Elif(~self.lookup_valid | (self.lookup_index >= self.num_qps)):
            m.d.comb += verdict.eq(Verdict.QP)
        with m.Else():
            m.d.comb += verdict.eq(Verdict.PENDING)
        m.d.comb += [self.lookup_qpn.eq(bth.dest_qp), self.rx_qp.eq(self.lookup_index)]
        c_valid = Signal()
        c = Signal(_RECORD)
        c_src = Signal(32)
        c_is_ack = Signal()
        c_ours = Signal()
        c_sum0, c_sum1 = Signal(16), Signal(16)
        m.d.sync += [
            c_valid.eq(h_valid),
            c.verdict.eq(verdict),
            c.dest.eq(bth.dest_qp),
            c.checked.eq(h_checked),
            c.ev.qp.eq(self.lookup_index),
            c.ev.syndrome.eq(aeth.syndrome),
            c.ev.psn.eq(bth.psn),
            c.ev.msn.eq(aeth.msn),
            c_src.eq(ip.src),
            c_is_ack.eq(is_ack),
            c_ours.eq(ours),
            c_sum0.eq(ones_complement_sum(words[:5])),
            c_sum1.eq(ones_complement_sum(words[5:])),
        ]

        self._elaborate_context(m, c_valid, c, c_src, c_is_ack, c_ours, c_sum0, c_sum1, records)

    def _elaborate_context(self, m, c_valid, c, c_src, c_is_ack, c_ours, c_sum0, c_sum1,
                           records):
        """Stage C -> record: the IPv4 header checksum (its halves' one's complement sum is
        0xFFFF exactly when they are each other's complement or both 0xFFFF: compares, no
        adder), the foreign datagrams, and the context checks."""
        checksum_ok = (c_sum0 == ~c_sum1) | ((c_sum0 & c_sum1) == 0xFFFF)
        context = self.rx_context
        rec = Signal(_RECORD)
        m.d.comb += rec.eq(c)
        # (a verdict comes from the stack only for a datagram it delivers on port 4791)
        m.d.comb += rec.checked.eq(c.checked & c_ours & checksum_ok)
        with m.If(~c_ours | ~checksum_ok):
            m.d.comb += rec.verdict.eq(Verdict.FOREIGN)
        with m.Elif(c.verdict == Verdict.PENDING):
            with m.If((context.state != QpState.RTR) & (context.state != QpState.RTS)):
                m.d.comb += rec.verdict.eq(Verdict.STATE)
            with m.Elif(context.peer_ip != c_src):
                m.d.comb += rec.verdict.eq(Verdict.PEER)
            with m.Elif(c_is_ack):
                m.d.comb += [rec.verdict.eq(Verdict.ACK), rec.ack.eq(1)]
            with m.Else():
                m.d.comb += rec.verdict.eq(Verdict.CNP)
        m.d.comb += [records.w_en.eq(c_valid), records.w_data.eq(rec)]

    def _ip_udp_checks(self, ip, udp, whole):
        """Whether the stack's IPv4 and UDP receive layers deliver the datagram with the
        headers ``ip`` and ``udp`` (at least their 28 bytes: ``whole``) on port 4791, the
        header checksum aside (compared a stage later)."""
        return ((ip.version == 4) & (ip.ihl == 5) & (ip.total_length >= H.IPV4.length) &
                (ip.total_length <= self.mtu) & ~ip.mf & (ip.frag_offset == 0) &
                (ip.dst == self.local_ip) & (ip.protocol == IP_PROTO_UDP) & whole &
                (udp.dst_port == UDP_PORT_ROCEV2) &
                (udp.length + H.IPV4.length == ip.total_length))

    def _elaborate_verdict(self, m, s, records, checksum):
        """Stage F -> D: the ICRC check's output, each datagram's verdict when its last beat
        leaves (its record's, unless the ICRC or the UDP checksum is bad), the verdict pulses
        and the event register."""
        d_valid = Signal()
        d_ev = Signal(ACK_EVENT)
        stall = Signal()
        m.d.comb += [
            stall.eq(d_valid & ~self.ack.ready),
            self.ack.valid.eq(d_valid),
            self.ack.payload.eq(d_ev),
        ]
        with m.If(self.ack.ready):
            m.d.sync += d_valid.eq(0)

        beat = s.payload
        rec = Signal(_RECORD)
        m.d.comb += rec.eq(records.r_data)
        # a last beat waits for its record (always there in time), for its UDP checksum's
        # verdict when it has one (a cycle or two after the ICRC's) and, while an event waits
        # in the ack register, for it to be taken
        m.d.comb += s.ready.eq(~beat.last | (~stall & records.r_rdy &
                                             (~rec.checked | checksum.r_rdy)))
        take = s.valid & s.ready
        decided = take & beat.last
        foreign = rec.verdict == Verdict.FOREIGN
        bad = Signal()
        m.d.comb += [bad.eq(beat.error | (rec.checked & ~checksum.r_data)),
                     records.r_en.eq(decided), checksum.r_en.eq(decided & rec.checked)]
        m.d.comb += [self.req.valid.eq(take), self.req.payload.data.eq(beat.data),
                     self.req.payload.keep.eq(beat.keep), self.req.payload.last.eq(beat.last),
                     self.req.payload.error.eq(beat.last & (bad | foreign))]
        final = Signal(Verdict)
        with m.If(~foreign & (rec.verdict != Verdict.SHORT) & bad):
            m.d.comb += final.eq(Verdict.ICRC)
        with m.Else():
            m.d.comb += final.eq(rec.verdict)
        for name, v in _COUNTER_VERDICTS.items():
            if (name != "read_responses" or self.reads) and (name != "mads" or self.ibcm):
                m.d.comb += getattr(self, name).eq(decided & (final == v))
        m.d.comb += [self.cnp_qp.eq(rec.ev.qp), self.data_seen.payload.eq(rec.dest),
                     self.data_seen.valid.eq(decided & (final == Verdict.REQUEST))]
        # (``rec.ack``: the record's verdict is ACK, so the final one is unless ``bad``)
        with m.If(decided & rec.ack & ~bad):
            m.d.sync += [d_valid.eq(1), d_ev.eq(rec.ev)]
