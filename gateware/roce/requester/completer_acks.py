from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import ACK_EVENT, check_num_qps

__all__ = ["CplAckState"]

_NAK_PSN_SEQ = 0x60


class CplAckState(wiring.Component):
    """The completion tracker's acknowledged PSN per QP, moved by the acknowledgements of the QP.

    Parameters
    ----------
    num_qps : int
        QPs (1..256), QP index ``0 .. num_qps - 1``.

    Ports
    -----
    ack : In(stream.Signature(ACK_EVENT, always_ready=True))
        Acknowledgement events (from the retry engine), one per cycle. Events naming a QP
        outside the table are ignored.
    post_qp / post_acked
        Combinational read of QP ``post_qp``'s acknowledged PSN (for a post of that QP).
    forget : In(1)
        QP ``post_qp`` forgets its acknowledged PSN (its connection was set up again): ``has``
        falls at the clock edge, and an event of that QP applied in the same cycle finds no
        acknowledged PSN.
    scan_qp / scan_acked
        Combinational read of QP ``scan_qp``'s acknowledged PSN (for the scan).
    has : Out(num_qps)
        Bit ``q``: QP ``q`` has an acknowledged PSN (a register).
    moved : Out(num_qps)
        One-hot of the QP whose acknowledged PSN moves in this cycle (written at the clock
        edge), zero when none.
    busy : Out(1)
        An event is applied in this cycle.
    acks, stale_acks, seq_naks, rnr_naks, naks : Out(1)
        One-cycle pulses in the cycle an event is applied: an ACK-class event (``stale_acks``
        besides when it does not move the acknowledged PSN), a NAK PSN sequence error, an RNR
        NAK, any other NAK or reserved syndrome.

    Behaviour
    ---------
    An event is applied in the cycle it arrives: its QP's acknowledged PSN is read then
    (written by the event before it at the last clock edge), compared with the event's and
    written at the clock edge. An ACK of PSN p moves the acknowledged PSN to p, a NAK PSN
    sequence error to p - 1, when the QP has none or when that PSN is ahead of it (modulo
    2^24, serial arithmetic); other NAKs move nothing. Latency: an event accepted in cycle t
    pulses and moves in cycle t; ``post_acked``/``scan_acked`` read the new PSN from t + 1,
    ``has`` from t + 1. ``ack`` should come from registers (the retry engine's decided event,
    through a multiplexer): the read, the comparison and the write follow it in one cycle.
    Storage: the PSNs in a distributed RAM with three asynchronous read ports, the ``has``
    bits in registers.
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        q_w = max(1, (num_qps - 1).bit_length())
        super().__init__({
            "ack": In(stream.Signature(ACK_EVENT, always_ready=True)),
            "post_qp": In(q_w),
            "post_acked": Out(24),
            "forget": In(1),
            "scan_qp": In(q_w),
            "scan_acked": Out(24),
            "has": Out(num_qps),
            "moved": Out(num_qps),
            "busy": Out(1),
            "acks": Out(1),
            "stale_acks": Out(1),
            "seq_naks": Out(1),
            "rnr_naks": Out(1),
            "naks": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        q_w = max(1, (n - 1).bit_length())

        acked = m.submodules.acked = Memory(shape=24, depth=n, init=[])
        acked_w = acked.write_port()
        acked_ack = acked.read_port(domain="comb")
        acked_post = acked.read_port(domain="comb")
        acked_scan = acked.read_port(domain="comb")
        m.d.comb += [
            acked_post.addr.eq(self.post_qp), self.post_acked.eq(acked_post.data),
            acked_scan.addr.eq(self.scan_qp), self.scan_acked.eq(acked_scan.data),
        ]
        acked_valid = Signal(n)             # the QP has an acknowledged PSN
        m.d.comb += self.has.eq(acked_valid)

        # the event applied in its arrival cycle, against the QP's acknowledged PSN read then
        a = self.ack.payload
        a_valid = Signal()
        a_acked = Signal(24)                # the QP's acknowledged PSN
        ack_qp = Signal(q_w)
        m.d.comb += [ack_qp.eq(a.qp[:q_w]), acked_ack.addr.eq(ack_qp),
                     a_valid.eq(self.ack.valid & (a.qp < n)), a_acked.eq(acked_ack.data)]
        psn = Signal(24)
        moves = Signal()
        cls = a.syndrome[5:8]
        is_ack = cls == 0b000
        is_seq = a.syndrome == _NAK_PSN_SEQ
        is_rnr = cls == 0b001
        m.d.comb += psn.eq(Mux(is_seq, a.psn - 1, a.psn))
        ack_vec = Signal(n)
        m.d.comb += ack_vec.eq(Cat(*(ack_qp == k for k in range(n))))
        had = acked_valid.bit_select(ack_qp, 1) & ~(self.forget & (self.post_qp == ack_qp))
        # psn - acked for an ACK (psn) and a sequence NAK (psn - 1), side by side
        step = Signal(24)
        step_seq = Signal(24)
        m.d.comb += [step.eq(a.psn - a_acked), step_seq.eq(a.psn + ~a_acked)]
        ahead = Signal()
        ahead_seq = Signal()
        m.d.comb += [ahead.eq((step != 0) & ~step[23]),
                     ahead_seq.eq((step_seq != 0) & ~step_seq[23])]
        m.d.comb += moves.eq(a_valid & ((is_ack & (~had | ahead)) |
                                        (is_seq & (~had | ahead_seq))))
        m.d.comb += [
            acked_w.addr.eq(ack_qp), acked_w.data.eq(psn), acked_w.en.eq(moves),
            self.moved.eq(Mux(moves, ack_vec, 0)),
            self.busy.eq(a_valid),
            self.acks.eq(a_valid & is_ack),
            self.stale_acks.eq(a_valid & is_ack & ~moves),
            self.seq_naks.eq(a_valid & is_seq),
            self.rnr_naks.eq(a_valid & is_rnr),
            self.naks.eq(a_valid & ~is_ack & ~is_seq & ~is_rnr),
        ]
        forget_vec = Mux(self.forget, Cat(*(self.post_qp == k for k in range(n))), 0)
        m.d.sync += acked_valid.eq((acked_valid & ~forget_vec) | self.moved)
        return m
