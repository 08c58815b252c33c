"""Reset synchronizer: a reset asserted at once and released on a clock edge of its domain."""

from amaranth.hdl import ClockDomain, ClockSignal, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.false_path import FalsePath

__all__ = ["ResetSync"]


class ResetSync(wiring.Component):
    """Reset synchronizer: asserts ``rst`` at once when ``arst`` rises (asynchronously, even
    without a clock) and releases it ``stages`` rising edges of the clock of ``domain`` after
    ``arst`` falls, so that the reset of that domain ends synchronously.

    ``rst`` is the output of the last of ``stages`` flip-flops with an asynchronous preset
    (``stage0``, ``stage1``...; ``ASYNC_REG`` set so that the tools place them together and the
    timing constraints find them). It is high out of configuration.

    Timing: the preset is asynchronous and not timed. The class states that in
    :attr:`FALSE_PATHS`, which a build writes into the constraints
    (:func:`~rocegen.gateware.lib.false_path.design_false_paths`); the exception finds the
    flip-flops by the instance's name, so an instance must be a submodule named ``rst_sync_*``.

    Parameters
    ----------
    domain : str
        The clock domain whose clock releases the reset (typically the domain the output resets).
    stages : int
        Flip-flops in the chain, 2 or more.
    """

    #: The timing exception every instance needs: paths to the flip-flops' preset.
    FALSE_PATHS = (FalsePath(
        cells="*rst_sync_*", pin="PRE", register="stage0",
        why="reset synchronizers: their flip-flops are preset asynchronously; the preset is "
            "not timed"),)

    def __init__(self, domain="sync", stages=3):
        if not isinstance(domain, str) or not domain:
            raise TypeError(f"domain must be a clock domain name, not {domain!r}")
        if not isinstance(stages, int) or isinstance(stages, bool) or stages < 2:
            raise ValueError(f"stages must be an integer of at least 2, not {stages!r}")
        self.domain = domain
        self.stages = stages
        super().__init__({"arst": In(1), "rst": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.domains.rst_sync = cd = ClockDomain("rst_sync", async_reset=True, local=True)
        m.d.comb += [cd.clk.eq(ClockSignal(self.domain)), cd.rst.eq(self.arst)]
        chain = [Signal(init=1, name=f"stage{i}", attrs={"ASYNC_REG": "TRUE"})
                 for i in range(self.stages)]
        m.d.rst_sync += chain[0].eq(0)
        for prev, cur in zip(chain, chain[1:]):
            m.d.rst_sync += cur.eq(prev)
        m.d.comb += self.rst.eq(chain[-1])
        return m
