"""Per-priority XOFF request levels -> the transmit pause interface of the UltraScale+ CMAC."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["CmacPauseTx", "REQ_HOLD", "check_xon_cycles"]

#: Cycles each bit of ``ctl_tx_pause_req`` must keep its value before it changes (PG203).
REQ_HOLD = 16


def check_xon_cycles(xon_cycles):
    """``xon_cycles`` if it is an integer of at least :data:`REQ_HOLD`, else ValueError."""
    if isinstance(xon_cycles, bool) or not isinstance(xon_cycles, int) or xon_cycles < REQ_HOLD:
        raise ValueError(f"xon_cycles must be an integer of at least {REQ_HOLD}, "
                         f"not {xon_cycles!r}")
    return xon_cycles


class CmacPauseTx(wiring.Component):
    """Drive the CMAC's ``ctl_tx_pause_req`` so that it sends XOFF, refreshes and XON.

    The CMAC sends a priority pause frame when a bit of ``ctl_tx_pause_req`` rises, with that
    priority's ``ctl_tx_pause_quanta``, again whenever its ``ctl_tx_pause_refresh_timer``
    runs out while the bit stays high, and again at once on ``ctl_tx_resend_pause``; a bit
    must keep its value for 16 cycles. So a rise of ``xoff`` raises ``req`` (XOFF); a fall
    keeps ``req`` high for ``xon_cycles`` more cycles with ``zero`` set (the quanta to send
    become 0) and pulses ``resend``, so the next pause frame, at the next frame boundary, is
    an XON; then ``req`` falls. A rise during those cycles clears ``zero`` and pulses
    ``resend`` again (XOFF at once). ``req`` rises only ``REQ_HOLD`` cycles after it fell.

    Parameters
    ----------
    xon_cycles : int
        Cycles the XON request stands (at least :data:`REQ_HOLD`): longer than the longest
        frame the CMAC may be sending plus the pause frame.

    Ports
    -----
    ``xoff`` : In(8)
        Request level per priority (the core's ``pause_tx``).
    ``req`` : Out(8)
        ``ctl_tx_pause_req[7:0]`` (registered).
    ``zero`` : Out(8)
        Bit ``n`` high: ``ctl_tx_pause_quanta<n>`` must be 0 (registered).
    ``resend`` : Out(1)
        ``ctl_tx_resend_pause``: a one-cycle pulse (registered).

    Latency 1 cycle from ``xoff`` (more while a hold runs); no streams.
    """

    def __init__(self, xon_cycles=512):
        self.xon_cycles = check_xon_cycles(xon_cycles)
        super().__init__({"xoff": In(8), "req": Out(8), "zero": Out(8), "resend": Out(1)})

    def elaborate(self, platform):
        m = Module()
        resend = Signal(8)
        for n in range(8):
            timer = Signal(range(self.xon_cycles + 1), name=f"timer{n}")
            req, zero, xoff = self.req[n], self.zero[n], self.xoff[n]
            with m.If(timer != 0):
                m.d.sync += timer.eq(timer - 1)
            with m.If(~req):
                with m.If(xoff & (timer == 0)):
                    m.d.sync += req.eq(1)
            with m.Elif(~zero):
                with m.If(~xoff):
                    m.d.sync += [zero.eq(1), timer.eq(self.xon_cycles - 1)]
                    m.d.comb += resend[n].eq(1)
            with m.Elif(xoff):
                m.d.sync += [zero.eq(0), timer.eq(0)]
                m.d.comb += resend[n].eq(1)
            with m.Elif(timer == 0):
                m.d.sync += [req.eq(0), zero.eq(0), timer.eq(REQ_HOLD - 1)]
        m.d.sync += self.resend.eq(resend.any())
        return m
