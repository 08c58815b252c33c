"""Two-flip-flop synchronizer of a slow level into the ``sync`` domain."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.false_path import FalsePath

__all__ = ["LevelSync"]


class LevelSync(wiring.Component):
    """Two-flip-flop synchronizer of a slow level signal ``i`` (from another clock domain or a
    pin) into the ``sync`` domain: ``o`` follows ``i`` 2 to 3 cycles later. The flip-flops are
    named ``cdc0`` / ``cdc1`` and carry ``ASYNC_REG``. Only for levels that stay put for many
    cycles (status, buttons): a multi-bit value or a pulse needs a handshake instead.

    Timing: the paths into ``cdc0`` come from an unrelated clock or a pin and are not timed. The
    class states that in :attr:`FALSE_PATHS`, which a build writes into the constraints
    (:func:`~rocegen.gateware.lib.false_path.design_false_paths`), wherever the instance sits.
    """

    #: The timing exception every instance needs: paths to the first flip-flop's data input.
    FALSE_PATHS = (FalsePath(
        cells="*cdc0_reg*", pin="D", register="cdc0",
        why="level synchronizers: the first flip-flop samples an unrelated signal"),)

    def __init__(self, init=0):
        self.init = init
        super().__init__({"i": In(1), "o": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cdc0 = Signal(init=self.init, name="cdc0", attrs={"ASYNC_REG": "TRUE"})
        cdc1 = Signal(init=self.init, name="cdc1", attrs={"ASYNC_REG": "TRUE"})
        m.d.sync += [cdc0.eq(self.i), cdc1.eq(cdc0)]
        m.d.comb += self.o.eq(cdc1)
        return m
