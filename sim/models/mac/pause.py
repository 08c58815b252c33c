"""Reference models of the pause blocks of the endpoint's MAC side, cycle by cycle: what
:class:`~rocegen.gateware.mac.pfc_rx.PauseRx`, :class:`~rocegen.gateware.mac.pause_gate.PauseGate`,
:class:`~rocegen.gateware.mac.pfc_tx.PauseTx` and
:class:`~rocegen.gateware.mac.xoff_monitor.XoffMonitor` must do.

Frames are ``bytes`` without FCS and are read and built with :mod:`rocegen.wire.pfc`. Time is
counted in clock cycles; a pause time of ``T`` quanta lasts ``T * 512 / line_gbps`` ns, which
the models turn into cycles with exact fractions (:func:`pause_cycles`), independently of the
gateware's own arithmetic.
"""

import math
from fractions import Fraction

from rocegen.wire import pfc as P

__all__ = ["pause_cycles", "PauseRxModel", "PauseGateModel", "PauseTxModel", "XoffModel"]

N = P.NUM_PRIORITIES


def _exact(x):
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


def pause_cycles(quanta, clk_hz, line_gbps):
    """Whole cycles of ``clk_hz`` that start while a pause of ``quanta`` (counted from the
    start of the first of them) still runs: ``ceil(quanta_ns / cycle_ns)``."""
    ns = Fraction(quanta * P.QUANTUM_BITS) / _exact(line_gbps)
    return math.ceil(ns * _exact(clk_hz) / 10 ** 9)


class PauseRxModel:
    """What the received frames do to the pause levels.

    :meth:`receive` takes each frame with the cycle its last beat moved; a pause frame that
    acts sets the timers of its priorities from cycle ``end + latency`` on, for
    :func:`pause_cycles` of its time. :meth:`paused` gives the 8-bit level of a cycle.
    ``counters``: ``pause_frame``, ``bad_frame``, ``ignored_frame`` (see
    :class:`~rocegen.gateware.mac.pfc_rx.PauseRx`), each with the cycle it was counted in
    ``pulses`` (one cycle after the frame's end)."""

    def __init__(self, clk_hz, line_gbps, local_mac, *, latency=2):
        self.clk_hz, self.line_gbps, self.latency = clk_hz, line_gbps, latency
        self.local_mac = P.mac_address(local_mac, "local_mac")
        self.counters = {"pause_frame": 0, "bad_frame": 0, "ignored_frame": 0}
        self.pulses = {name: [] for name in self.counters}
        self._events = [[] for _ in range(N)]      # per priority: (from cycle, until cycle)

    def _count(self, name, end):
        self.counters[name] += 1
        self.pulses[name].append(end + 1)

    def receive(self, frame, end, *, error=False):
        frame = bytes(frame)
        if error or not P.is_mac_control(frame):
            return
        try:
            f = P.parse(frame)
        except P.MacControlError:
            self._count("bad_frame", end)
            return
        if f.dst not in (P.PAUSE_DST, self.local_mac):
            self._count("ignored_frame", end)
            return
        self._count("pause_frame", end)
        classes = f.classes if isinstance(f, P.PfcFrame) else dict.fromkeys(range(N), f.time)
        start = end + self.latency
        for prio, quanta in classes.items():
            events = self._events[prio]
            if events and events[-1][0] > start:
                raise ValueError("frames must be given in the order they end")
            events.append((start, start + pause_cycles(quanta, self.clk_hz, self.line_gbps)))

    def paused(self, cycle):
        """The pause levels during ``cycle`` (bit ``n``: priority ``n``)."""
        level = 0
        for prio, events in enumerate(self._events):
            for start, until in reversed(events):
                if start <= cycle:
                    level |= (cycle < until) << prio
                    break
        return level


class PauseGateModel:
    """The gate's handshakes, one :meth:`step` per cycle: the decision uses ``pause`` of the
    cycle before (a register); a frame whose first beat has been offered goes on to its end."""

    def __init__(self):
        self.pause_r = 0
        self.busy = False

    def step(self, pause, i_valid, i_last, o_ready):
        """Inputs of this cycle -> ``(o_valid, i_ready)``; then the clock edge."""
        allowed = self.busy or not self.pause_r
        o_valid, i_ready = bool(i_valid and allowed), bool(o_ready and allowed)
        if o_valid and o_ready and i_last:
            self.busy = False
        elif o_valid:
            self.busy = True
        self.pause_r = int(bool(pause))
        return o_valid, i_ready


class PauseTxModel:
    """What the PFC frames a transmitter sends must say, given the cycle each one is decided
    and the request levels then.

    The peer has been told a level per priority (``told``). A priority is *due* when its
    request differs from what the peer was told, or when it stays requested and its XOFF needs
    a refresh: not before a quarter of ``quanta`` has passed since its last XOFF, at the
    latest when half has (only with ``quanta >= 4``; ``slack`` quanta more either way, for the
    cycles the ticks take to act). :meth:`decide` checks a frame decided in ``cycle`` against
    that and returns the frame expected: its enabled priorities are those due, each with
    ``quanta`` if requested and 0 if not; between those bounds a refresh may or may not come."""

    def __init__(self, clk_hz, line_gbps, local_mac, *, quanta=P.MAX_QUANTA, slack=1):
        self.local_mac = P.mac_address(local_mac, "local_mac")
        self.quanta = quanta
        self.cpq = Fraction(P.QUANTUM_BITS) / _exact(line_gbps) * _exact(clk_hz) / 10 ** 9
        self.slack = slack
        self.told = [0] * N
        self.xoff_at = [None] * N              # cycle of the last XOFF decided per priority

    def _refresh(self, prio, cycle):
        """``(surely, maybe)``: a refresh of ``prio`` is due in ``cycle``."""
        quarter = self.quanta // 4
        if not (self.told[prio] and quarter):
            return False, False
        elapsed = (cycle - self.xoff_at[prio]) / self.cpq
        return elapsed >= 2 * quarter + self.slack, elapsed >= quarter - self.slack

    def due(self, cycle, xoff):
        """``(surely, maybe)`` bit masks of the priorities due in ``cycle``."""
        sure = maybe = 0
        for prio in range(N):
            req = xoff >> prio & 1
            if req != self.told[prio]:
                sure |= 1 << prio
                maybe |= 1 << prio
            elif req:
                s, may = self._refresh(prio, cycle)
                sure |= s << prio
                maybe |= may << prio
        return sure, maybe

    def decide(self, cycle, xoff, enable):
        """A frame decided in ``cycle`` with request levels ``xoff`` enabled ``enable``: raises
        AssertionError unless that is a right choice; returns the frame's bytes."""
        sure, maybe = self.due(cycle, xoff)
        if enable & ~maybe or sure & ~enable or not enable:
            raise AssertionError(f"cycle {cycle}: frame for priorities {enable:08b}, due "
                                 f"{sure:08b} (maybe {maybe:08b}), requests {xoff:08b}")
        times = {}
        for prio in range(N):
            if enable >> prio & 1:
                req = xoff >> prio & 1
                times[prio] = self.quanta if req else 0
                self.told[prio] = req
                if req:
                    self.xoff_at[prio] = cycle
        return P.pfc_frame(self.local_mac, times)


class XoffModel:
    """The XOFF level with hysteresis, registered: it rises in the cycle after one with
    ``level > xoff_at`` and falls in the cycle after one with ``level <= xon_at`` (rising wins
    when both hold)."""

    def __init__(self):
        self.xoff = 0

    def step(self, level, xoff_at, xon_at):
        """Inputs of this cycle -> the output during this cycle; then the clock edge."""
        out = self.xoff
        if level > xoff_at:
            self.xoff = 1
        elif level <= xon_at:
            self.xoff = 0
        return out
