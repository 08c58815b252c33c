from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.layouts import check_num_qps

__all__ = ["CplPick"]


def _lowest(vec):
    """One-hot of the lowest set bit of ``vec`` (zero when ``vec`` is zero)."""
    n = len(vec)
    return (vec & (~vec + 1))[:n]


def _encode(onehot, width):
    """Index of the set bit of a one-hot vector (OR trees)."""
    bits = []
    for b in range(width):
        terms = [onehot[k] for k in range(len(onehot)) if (k >> b) & 1]
        bits.append(Cat(*terms).any() if terms else Const(0, 1))
    return Cat(*bits)


class CplPick(wiring.Component):
    """Round-robin choice of one QP among the eligible ones, for the completion tracker's scan.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).

    Ports
    -----
    eligible : In(num_qps)
        Bit ``q``: QP ``q`` may be picked.
    enable : In(1)
        A pick may be made in this cycle.
    pick : Out(1)
        A QP is picked: ``enable`` and a QP eligible.
    chosen : Out(num_qps)
        One-hot of the QP chosen (whether or not ``enable`` is high; zero when none is eligible).
    index : Out(max(1, ceil(log2(num_qps))))
        Its index.

    Behaviour: the first eligible QP after the one picked last (in QP order), else the first
    eligible QP of all; combinational from ``eligible`` and one register of ``num_qps`` bits
    (the QPs after the last pick), updated at the clock edge of a cycle with ``pick``.
    """

    def __init__(self, num_qps):
        check_num_qps(num_qps)
        self.num_qps = num_qps
        super().__init__({
            "eligible": In(num_qps),
            "enable": In(1),
            "pick": Out(1),
            "chosen": Out(num_qps),
            "index": Out(max(1, (num_qps - 1).bit_length())),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.num_qps
        rr_mask = Signal(n)             # QPs after the one picked last
        eligible = self.eligible
        low = Signal(2 * n)
        m.d.comb += [
            low.eq(_lowest(Cat(eligible & rr_mask, eligible))),
            self.chosen.eq(low[:n] | low[n:]),
            self.index.eq(_encode(self.chosen, len(self.index))),
            self.pick.eq(eligible.any() & self.enable),
        ]
        with m.If(self.pick):
            m.d.sync += rr_mask.eq(~(self.chosen | (self.chosen - 1)[:n]))
        return m
