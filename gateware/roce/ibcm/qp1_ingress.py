"""QP1's receive path: the MADs among the RoCEv2 datagrams, checked and queued for the CM."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.fifo import PacketFifo
from rocegen.gateware.lib.stream import PacketSignature, check_width, first_beat
from rocegen.gateware.roce.ibcm.ibcm_layouts import IBCM_RX_META, int_param
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc

__all__ = ["Qp1Ingress", "COUNTERS"]

#: The ingress's counter strobes (see :class:`Qp1Ingress`).
COUNTERS = ("mads", "drop_qkey", "drop_pkey", "drop_error", "drop_overflow")


class Qp1Ingress(wiring.Component):
    """Picks the MADs for QP1 out of every RoCEv2 datagram, checks their Q_Key and P_Key, and
    queues them for the CM's receiver
    (:class:`~rocegen.gateware.roce.ibcm.ibcm_receive.IbCmReceiver`).

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    queue : int
        MADs the queue holds at once (1..16, default 2): a burst of MADs longer than that, while
        the CM answers the first, loses the last ones (the CM's peer sends them again).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram from the ICRC check (RoceRx's ``req``): IPv4 header first, ICRC
        removed, ``error`` on the last beat when the ICRC was bad. Always ready.
    o : Out(PacketSignature(width, IBCM_RX_META))
        The MADs: the UD payload after the IPv4, UDP, BTH and DETH headers
        (:data:`rocegen.wire.ibcm.UD_IN`, 48 bytes), byte 0 in lane 0 of the first beat, ``error``
        low; ``meta``: the IPv4 source, the DETH's source QP and the BTH's P_Key.
    mads, drop_qkey, drop_pkey, drop_error, drop_overflow : Out(1)
        Counter strobes, one cycle each. ``mads`` for each datagram to QP1 (BTH opcode UD
        SEND_ONLY, DestQP 1; the others are not looked at), in the cycle its first beat
        passes; then at most one of: ``drop_qkey`` (a Q_Key other than
        :data:`~rocegen.wire.ibcm.QP1_QKEY`) or ``drop_pkey`` (a P_Key whose low 15 bits are
        not all ones), in the same cycle; ``drop_error`` (a bad ICRC) or ``drop_overflow`` (no
        room in the queue), registered, a cycle after its last beat. A datagram to QP1 that
        none of these drops leaves on ``o``.

    Behaviour
    ---------
    The headers are removed by a :class:`~rocegen.gateware.lib.depacketizer.Depacketizer` of
    :data:`~rocegen.wire.ibcm.UD_IN` (a datagram shorter than them is no MAD and is dropped
    there, uncounted: RoceRx has given it its verdict); its fields go with every beat, so the
    checks need no state. The MADs wait in a store-and-forward
    :class:`~rocegen.gateware.lib.fifo.PacketFifo` of ``mads`` MADs (rounded up to a power of
    two of beats), which drops one with ``error`` and one that does not fit (a datagram longer
    than the queue never fits). The MAD's length is the receiver's to judge.
    Latency: a MAD's first beat is offered on ``o`` two cycles after its last beat enters
    (the FIFO's; the depacketizer's path is combinational), or with its own last beat's delay
    when the header is not a whole number of beats. Backpressure: ``o.ready`` only holds the
    queue; the input is never held.
    """

    def __init__(self, width, *, queue=2):
        check_width(width)
        self.width = width
        self.queue = int_param("queue", queue, 1, 16)
        beats = self.queue * -(-I.MAD_LENGTH // (width // 8))
        self.depth = 1 << max(1, (beats - 1).bit_length())
        super().__init__({
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width, IBCM_RX_META)),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        dp = m.submodules.depacketizer = Depacketizer(I.UD_IN, W)
        wiring.connect(m, wiring.flipped(self.i), dp.i)
        q = m.submodules.queue = PacketFifo(W, self.depth, IBCM_RX_META, store_and_forward=True,
                                            drop_errors=True, overflow="drop")
        wiring.connect(m, q.o, wiring.flipped(self.o))

        beat = dp.o.payload
        ud = beat.meta.ud
        for_qp1 = (ud.bth_opcode == opc.OP_UD_SEND_ONLY) & (ud.bth_dest_qp == I.QP1)
        qkey_ok = ud.deth_qkey == I.QP1_QKEY
        pkey_ok = ud.bth_pkey[:15] == 0x7FFF
        take = for_qp1 & qkey_ok & pkey_ok
        m.d.comb += [
            dp.o.ready.eq(1),                   # (the queue drops what does not fit)
            q.i.valid.eq(dp.o.valid & take),
            q.i.payload.data.eq(beat.data), q.i.payload.keep.eq(beat.keep),
            q.i.payload.last.eq(beat.last), q.i.payload.error.eq(beat.error),
            q.i.payload.meta.src_ip.eq(ud.ipv4_src),
            q.i.payload.meta.src_qp.eq(ud.deth_src_qp),
            q.i.payload.meta.pkey.eq(ud.bth_pkey),
        ]
        first = dp.o.valid & first_beat(m, dp.o) & for_qp1
        m.d.comb += [
            self.mads.eq(first),
            self.drop_qkey.eq(first & ~qkey_ok),
            self.drop_pkey.eq(first & qkey_ok & ~pkey_ok),
            self.drop_error.eq(q.drop_error),
            self.drop_overflow.eq(q.drop_overflow),
        ]
        return m
