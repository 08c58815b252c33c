"""The status LEDs every board shows."""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.level_sync import LevelSync
from rocegen.gateware.shell.stretch import Stretch

__all__ = ["StatusLeds"]


class StatusLeds(wiring.Component):
    """The four status LEDs every board shows, plus a heartbeat of the core clock.

    Inputs (``link``, ``clear`` may be asynchronous: they are synchronized inside; the others
    are synchronous to ``sync``):

    ``link``
        The MAC's receive side is up (CMAC aligned / PCS block lock).
    ``qp_open``
        At least one QP is open.
    ``tx``, ``rx``
        A beat moved on the MAC transmit / receive port (one-cycle pulses).
    ``error``
        Something went wrong (one-cycle pulse): a bad frame, a bad ICRC, a NAK, a completion in
        error, a MAC underrun.
    ``clear``
        Clears the sticky error LED (a push button).

    Outputs: ``led_link``, ``led_qp``, ``led_traffic`` (each beat lights it for ``blink``
    cycles), ``led_error`` (sticky from the first error until ``clear`` or reset), and
    ``led_heartbeat``, which toggles every ``heartbeat`` cycles (it blinks while the core clock
    runs, so a dark core with a lit link LED means the core is held in reset).
    """

    def __init__(self, *, blink, heartbeat):
        for name, v in (("blink", blink), ("heartbeat", heartbeat)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive number of cycles, not {v!r}")
        self.blink = blink
        self.heartbeat = heartbeat
        super().__init__({
            "link": In(1), "qp_open": In(1), "tx": In(1), "rx": In(1), "error": In(1),
            "clear": In(1),
            "led_link": Out(1), "led_qp": Out(1), "led_traffic": Out(1), "led_error": Out(1),
            "led_heartbeat": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.link_sync = link_sync = LevelSync()
        m.submodules.clear_sync = clear_sync = LevelSync()
        m.d.comb += [link_sync.i.eq(self.link), clear_sync.i.eq(self.clear)]
        link, clear = link_sync.o, clear_sync.o
        m.submodules.traffic = traffic = Stretch(self.blink)
        m.d.comb += traffic.i.eq(self.tx | self.rx)
        err = Signal()
        with m.If(self.error):
            m.d.sync += err.eq(1)
        with m.Elif(clear):
            m.d.sync += err.eq(0)
        beat = Signal(range(self.heartbeat))
        toggle = Signal()
        with m.If(beat == self.heartbeat - 1):
            m.d.sync += [beat.eq(0), toggle.eq(~toggle)]
        with m.Else():
            m.d.sync += beat.eq(beat + 1)
        m.d.comb += [
            self.led_link.eq(link),
            self.led_qp.eq(self.qp_open),
            self.led_traffic.eq(traffic.o),
            self.led_error.eq(err),
            self.led_heartbeat.eq(toggle),
        ]
        return m
