"""Pause quanta counted in clock cycles, exactly: the time base shared by
:class:`~rocegen.gateware.mac.pfc_rx.PauseRx` and :class:`~rocegen.gateware.mac.pfc_tx.PauseTx`.

A pause quantum is 512 bit times of the line, ``a / b`` clock cycles (a reduced fraction,
:func:`rocegen.wire.pfc.quantum_cycles`; 33/20 for 100 Gb/s at 322.265625 MHz). Each cycle is
``b / a`` quanta, that is ``q = b // a`` whole quanta and ``r = b % a`` parts of ``a``; a phase
register adds up the parts and carries a whole quantum when they reach ``a``. So after ``k``
cycles exactly ``floor(k * b / a)`` quanta have passed: no rounding, no drift.
"""

from amaranth.hdl import Mux, Signal

from rocegen.wire.pfc import quantum_cycles

__all__ = ["quantum_ratio", "quanta_elapsed"]


def quantum_ratio(clk_hz, line_gbps):
    """``(a, b)``: one pause quantum at ``line_gbps`` lasts ``a / b`` cycles of ``clk_hz``.
    Raises ValueError naming the parameter for a rate or clock that is not a positive number."""
    for name, value in (("clk_hz", clk_hz), ("line_gbps", line_gbps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, not {value!r}")
        if not 0 < value < float("inf"):
            raise ValueError(f"{name} must be a positive finite number, not {value!r}")
    ratio = quantum_cycles(clk_hz, line_gbps)
    return ratio.numerator, ratio.denominator


def quanta_elapsed(m, a, b, *, restart=None, name="quanta"):
    """Quanta that pass in each cycle: returns ``step``, a Signal of ``0 .. b // a + 1``;
    the ``step`` values of ``k`` consecutive cycles add up to ``floor(k * b / a)``, counted
    from reset or from the last cycle ``restart`` (optional, a 1-bit Value) was high, in which
    ``step`` is 0 and the phase returns to zero."""
    q, r = divmod(b, a)
    step = Signal(range(q + 2), name=f"{name}_step")
    stop = 0 if restart is None else restart
    if not r:
        m.d.comb += step.eq(Mux(stop, 0, q))
        return step
    phase = Signal(range(a), name=f"{name}_phase")
    carry = Signal(name=f"{name}_carry")
    m.d.comb += [carry.eq(phase >= a - r), step.eq(Mux(stop, 0, q + carry))]
    with m.If(stop):
        m.d.sync += phase.eq(0)
    with m.Elif(carry):
        m.d.sync += phase.eq(phase - (a - r))
    with m.Else():
        m.d.sync += phase.eq(phase + r)
    return step
