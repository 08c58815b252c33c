"""XOFF from a receive buffer's fill level, with hysteresis, and the thresholds that keep a
lossless link lossless."""

import math
from fractions import Fraction

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.wire import pfc as P
from rocegen.wire.roce import ETH_MIN_FRAME

__all__ = ["XoffMonitor", "xoff_thresholds", "headroom_beats", "PIPELINE_CYCLES"]

#: Default allowance for our own MAC, PHY and pipeline in both directions (cycles).
PIPELINE_CYCLES = 256


def headroom_beats(headroom, width, max_frame):
    """Beats of a ``width``-bit buffer that frames of at most ``max_frame`` bytes (without
    FCS) filling ``headroom`` bytes of line time can take at most: frames of every length from
    60 bytes are considered, each taking ``ceil(length / (W/8))`` beats for ``length + 24``
    bytes of line time; plus one beat for a frame cut by the window's end."""
    B = check_width(width) // 8
    if isinstance(max_frame, bool) or not isinstance(max_frame, int) or max_frame < ETH_MIN_FRAME:
        raise ValueError(f"max_frame must be an integer of at least {ETH_MIN_FRAME} bytes, "
                         f"not {max_frame!r}")
    worst = max(Fraction(-(-n // B), P.line_bytes(n)) for n in range(ETH_MIN_FRAME, max_frame + 1))
    return math.ceil(headroom * worst) + 1


def xoff_thresholds(depth_bytes, width, *, line_gbps, max_frame, clk_hz, cable_ns=100,
                    response_quanta=None, pipeline_cycles=PIPELINE_CYCLES):
    """Default ``(xoff_at, xon_at)`` in beats for a receive buffer of ``depth_bytes`` bytes
    (``width``-bit beats), so that nothing is lost after XOFF.

    What can still arrive once the level passes ``xoff_at`` is
    :func:`rocegen.wire.pfc.headroom_bytes` (the same arithmetic as the switch model's
    ``pfc_headroom``): our XOFF waiting behind one ``max_frame`` and its own 60 bytes, the
    cable both ways (``cable_ns``), the peer's reaction (``response_quanta`` pause quanta,
    default :data:`rocegen.wire.pfc.RESPONSE_QUANTA` of ``line_gbps``) and our pipeline
    (``pipeline_cycles`` of ``clk_hz``), the peer's frame in flight and one frame partly
    received. That, in beats (:func:`headroom_beats`), is kept free above ``xoff_at``;
    ``xon_at`` is half of ``xoff_at``. Raises ValueError when the buffer cannot hold the
    headroom and one maximum frame more."""
    for name, value in (("depth_bytes", depth_bytes), ("max_frame", max_frame),
                        ("pipeline_cycles", pipeline_cycles)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
    if response_quanta is None:
        if line_gbps not in P.RESPONSE_QUANTA:
            raise ValueError(f"response_quanta: no default for {line_gbps} Gb/s (known: "
                             f"{', '.join(map(str, P.RESPONSE_QUANTA))}); give it")
        response_quanta = P.RESPONSE_QUANTA[line_gbps]
    if isinstance(clk_hz, bool) or not isinstance(clk_hz, (int, float)) or not clk_hz > 0:
        raise ValueError(f"clk_hz must be a positive frequency, not {clk_hz!r}")
    response_ns = P.quanta_ns(response_quanta, line_gbps) + pipeline_cycles * 1e9 / clk_hz
    headroom = P.headroom_bytes(line_gbps, max_frame, cable_ns=cable_ns, response_ns=response_ns)
    B = check_width(width) // 8
    depth = depth_bytes // B
    xoff_at = depth - headroom_beats(headroom, width, max_frame)
    if xoff_at < -(-max_frame // B):
        raise ValueError(f"depth_bytes: a buffer of {depth} beats ({depth_bytes} bytes) cannot "
                         f"keep {headroom} bytes of line time ({depth - xoff_at} beats) free "
                         f"above one {max_frame}-byte frame")
    return xoff_at, xoff_at // 2


class XoffMonitor(wiring.Component):
    """``xoff`` high while a buffer is too full, with hysteresis.

    Parameters
    ----------
    depth : int
        Beats the buffer holds (``level`` goes from 0 to ``depth``).
    xoff_at, xon_at : int
        Reset values of the thresholds (0..``depth``; ``xon_at < xoff_at``), e.g. from
        :func:`xoff_thresholds` (:meth:`for_link` does that).

    Ports
    -----
    ``level`` : In(range(depth + 1))
        The buffer's fill level in beats.
    ``xoff_at``, ``xon_at`` : In(range(depth + 1))
        The thresholds, settable at run time; their reset values are the parameters.
    ``xoff`` : Out(1)
        Registered: rises in the cycle after one with ``level > xoff_at`` and falls in the
        cycle after one with ``level <= xon_at``; rising wins when both hold (thresholds set
        the wrong way round). Latency 1 cycle, no stream, no backpressure.
    """

    def __init__(self, depth, *, xoff_at, xon_at):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive number of beats, not {depth!r}")
        for name, value in (("xoff_at", xoff_at), ("xon_at", xon_at)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= depth:
                raise ValueError(f"{name} must be an integer in 0..{depth}, not {value!r}")
        if xon_at >= xoff_at:
            raise ValueError(f"xon_at ({xon_at}) must be below xoff_at ({xoff_at})")
        self.depth = depth
        super().__init__({
            "level": In(range(depth + 1)),
            "xoff_at": In(range(depth + 1), init=xoff_at),
            "xon_at": In(range(depth + 1), init=xon_at),
            "xoff": Out(1),
        })

    @classmethod
    def for_link(cls, depth, width, **kwargs):
        """A monitor of a ``depth``-beat buffer of ``width``-bit beats with the thresholds of
        :func:`xoff_thresholds` (``kwargs``: its keyword arguments)."""
        xoff_at, xon_at = xoff_thresholds(depth * (check_width(width) // 8), width, **kwargs)
        return cls(depth, xoff_at=xoff_at, xon_at=xon_at)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.level > self.xoff_at):
            m.d.sync += self.xoff.eq(1)
        with m.Elif(self.level <= self.xon_at):
            m.d.sync += self.xoff.eq(0)
        return m
