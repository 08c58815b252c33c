"""The endpoint's side of PFC: obey the link partner's pause frames, send XOFF/XON for its own
receive buffers."""

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.mac.pause_gate import PauseGate
from rocegen.gateware.mac.pfc_rx import PauseRx
from rocegen.gateware.mac.pfc_tx import PauseTx
from rocegen.gateware.mac.xoff_monitor import XoffMonitor, xoff_thresholds
from rocegen.wire import pfc as P

__all__ = ["PfcPort", "PFC_MODES", "lossless_depth"]

#: Who terminates the pause frames: the MAC (``pause_in`` / ``pause_out`` levels, e.g. the
#: CMAC's pause interface), or this block itself (for a MAC that passes them through).
PFC_MODES = ("mac", "core")


def lossless_depth(width, *, line_gbps, max_frame, clk_hz, cable_ns=100, at_least=1):
    """The smallest power-of-two number of ``width``-bit beats (at least ``at_least``) of a
    receive buffer that :func:`~rocegen.gateware.mac.xoff_monitor.xoff_thresholds` accepts:
    room for the headroom above the XOFF threshold and for one maximum frame below it."""
    depth = 1 << max(0, at_least - 1).bit_length()
    while True:
        try:
            xoff_thresholds(depth * (check_width(width) // 8), width, line_gbps=line_gbps,
                            max_frame=max_frame, clk_hz=clk_hz, cable_ns=cable_ns)
            return depth
        except ValueError:
            depth *= 2
            if depth > 1 << 20:
                raise


class PfcPort(wiring.Component):
    """PFC (802.1Qbb) and PAUSE (802.3x) for one endpoint on one priority.

    Parameters
    ----------
    width : int
        Data width W (64..512).
    clk_hz, line_gbps : number
        The clock and the line rate (a pause quantum is 512 bit times of the line).
    mode : ``"mac"`` or ``"core"``
        ``"mac"``: the MAC decodes the pause frames it receives (``pause_in``, a level per
        priority) and sends pause frames on request (``pause_out``). ``"core"``: this block
        decodes the received frames it watches (``rx_*``) with a
        :class:`~rocegen.gateware.mac.pfc_rx.PauseRx` and merges its own PFC frames into the
        transmit stream with a :class:`~rocegen.gateware.mac.pfc_tx.PauseTx`.
    buffers : dict of str to int
        The receive buffers that ask for XOFF: name -> depth in beats. Each gets an
        :class:`~rocegen.gateware.mac.xoff_monitor.XoffMonitor` with the thresholds of
        :func:`~rocegen.gateware.mac.xoff_monitor.xoff_thresholds` for ``max_frame`` and
        ``cable_ns`` (a ValueError names a buffer too small to keep the headroom; size it with
        :func:`lossless_depth`).
    max_frame : int
        Longest frame the endpoint receives, without FCS.
    cable_ns : number
        One-way delay of the cable to the link partner (for the headroom).
    prio : int
        The priority of the endpoint's traffic after reset (0..7; input ``prio`` at run time).

    Ports
    -----
    i : In(PacketSignature(width)); o : Out(PacketSignature(width))
        The frames to send (without FCS), in and out.
    rx_valid, rx_ready, rx_data, rx_keep, rx_last, rx_error : In, ``"core"`` only
        The received frame stream, watched (never held).
    pause_in : In(8), ``"mac"`` only
        Bit n: the MAC has priority n paused.
    pause_out : Out(8), ``"mac"`` only
        Bit n: ask the MAC to pause the link partner's priority n (XOFF while high, XON when it
        falls).
    levels : In(...) per buffer: ``level_<name>`` : In(range(depth + 1))
        The buffers' fill levels in beats.
    local_mac : In(48)
        Our address (source of our PFC frames, a destination of pause frames we obey).
    prio : In(3); enable : In(1)
        The priority obeyed and named in XOFF, and PFC on (after reset: ``prio``, on). With
        ``enable`` low nothing is held and no XOFF is asked for (an XOFF in force is ended).
    paused : Out(1)
        Our priority is paused (the transmit stream is held at its next frame boundary).
    xoff : Out(1)
        XOFF asked for (some buffer above its threshold).
    rx_pause, rx_bad, tx_pfc : Out(1)
        Pulses: a pause frame obeyed, a malformed MAC control frame, a PFC frame sent (the
        last two ``"core"`` only; 0 with ``"mac"``).

    Behaviour
    ---------
    * Transmit: ``i`` -> :class:`~rocegen.gateware.mac.pause_gate.PauseGate` (no new frame
      while ``paused``; the frame started finishes) -> (``"core"``: ``PauseTx``, whose PFC
      frames go out even while paused) -> ``o``. Latency: the gate's data path is
      combinational, ``PauseTx`` as documented there. Backpressure: ``o.ready`` low holds
      ``i``.
    * Reaction: a pause frame whose last beat is received in cycle t holds the transmit
      stream from t + 3 (``"core"``: ``PauseRx`` 2 cycles, the gate 1) at the next frame
      boundary; with ``"mac"``, ``pause_in`` rising in t holds it from t + 1.
    * XOFF: each buffer's monitor raises its request in the cycle after its level passes its
      XOFF threshold and drops it at its XON threshold; the OR of them is ``xoff``, sent for
      priority ``prio``.
    """

    def __init__(self, width, clk_hz, line_gbps, *, mode, buffers, max_frame, cable_ns=100,
                 prio=3):
        check_width(width)
        if mode not in PFC_MODES:
            raise ValueError(f"mode must be one of {', '.join(PFC_MODES)}, not {mode!r}")
        if isinstance(prio, bool) or not isinstance(prio, int) or not 0 <= prio <= 7:
            raise ValueError(f"prio must be a priority 0..7, not {prio!r}")
        if not isinstance(buffers, dict):
            raise TypeError(f"buffers must be a dict of name to depth in beats, not {buffers!r}")
        self.width, self.mode, self.buffers = width, mode, dict(buffers)
        self._monitors = {}
        for name, depth in self.buffers.items():
            try:
                self._monitors[name] = XoffMonitor.for_link(
                    depth, width, line_gbps=line_gbps, max_frame=max_frame, clk_hz=clk_hz,
                    cable_ns=cable_ns)
            except ValueError as e:
                raise ValueError(f"buffers[{name!r}]: {e}") from None
        self._rx = PauseRx(width, clk_hz, line_gbps) if mode == "core" else None
        self._tx = PauseTx(width, clk_hz, line_gbps) if mode == "core" else None
        members = {
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width)),
            "local_mac": In(48),
            "prio": In(3, init=prio),
            "enable": In(1, init=1),
            "paused": Out(1),
            "xoff": Out(1),
            "rx_pause": Out(1),
            "rx_bad": Out(1),
            "tx_pfc": Out(1),
        }
        if mode == "core":
            members.update({"rx_valid": In(1), "rx_ready": In(1), "rx_data": In(width),
                            "rx_keep": In(width // 8), "rx_last": In(1), "rx_error": In(1)})
        else:
            members.update({"pause_in": In(P.NUM_PRIORITIES),
                            "pause_out": Out(P.NUM_PRIORITIES)})
        members.update({f"level_{name}": In(range(depth + 1))
                        for name, depth in self.buffers.items()})
        super().__init__(members)

    def thresholds(self):
        """``{buffer: (xoff_at, xon_at)}`` after reset, in beats."""
        return {name: (mon.xoff_at.init, mon.xon_at.init)
                for name, mon in self._monitors.items()}

    def elaborate(self, platform):
        m = Module()
        gate = m.submodules.gate = PauseGate(self.width)
        wiring.connect(m, wiring.flipped(self.i), gate.i)
        paused_all = Signal(P.NUM_PRIORITIES)
        xoff = Signal()
        for name, mon in self._monitors.items():
            m.submodules[f"xoff_{name}"] = mon
            m.d.comb += mon.level.eq(getattr(self, f"level_{name}"))
        if self._monitors:
            m.d.comb += xoff.eq(self.enable & Cat(mon.xoff for mon in self._monitors.values())
                                .any())
        xoff_vec = Signal(P.NUM_PRIORITIES)
        m.d.comb += xoff_vec.eq(xoff << self.prio)
        if self.mode == "core":
            rx = m.submodules.pause_rx = self._rx
            tx = m.submodules.pause_tx = self._tx
            m.d.comb += [
                rx.valid.eq(self.rx_valid), rx.ready.eq(self.rx_ready), rx.data.eq(self.rx_data),
                rx.keep.eq(self.rx_keep), rx.last.eq(self.rx_last), rx.error.eq(self.rx_error),
                rx.local_mac.eq(self.local_mac), paused_all.eq(rx.paused),
                self.rx_pause.eq(rx.pause_frame), self.rx_bad.eq(rx.bad_frame),
                tx.xoff.eq(xoff_vec), tx.local_mac.eq(self.local_mac),
                self.tx_pfc.eq(tx.pfc_sent),
            ]
            wiring.connect(m, gate.o, tx.i)
            wiring.connect(m, tx.o, wiring.flipped(self.o))
        else:
            prev = Signal(P.NUM_PRIORITIES)
            m.d.sync += prev.eq(self.pause_in)
            m.d.comb += [paused_all.eq(self.pause_in), self.pause_out.eq(xoff_vec),
                         self.rx_pause.eq((self.pause_in & ~prev).any())]
            wiring.connect(m, gate.o, wiring.flipped(self.o))
        paused = Signal()
        m.d.comb += [paused.eq(self.enable & paused_all.bit_select(self.prio, 1)),
                     gate.pause.eq(paused), self.paused.eq(paused), self.xoff.eq(xoff)]
        return m
