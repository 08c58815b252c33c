"""The endpoint with PFC (``RoceEndpoint(pfc=...)``), whole, in the Amaranth simulator, sending
WRITEs to the host NIC model: a PFC frame for the endpoint's priority (``"core"``: decoded by
the endpoint itself) or the MAC's pause level (``"mac"``) stops it from starting frames for the
pause time, after which it sends again; the frame on the wire when the pause comes is finished;
a pause of another priority changes nothing; a receive path that keeps up asks for no XOFF.

Pause frames are built with ``rocegen.wire.pfc``; the pause time in cycles is worked out here
from the quantum (512 bit times of the line)."""

import math

import pytest

from rocegen.gateware.roce.endpoint import default_clk_hz, default_line_gbps
from rocegen.sim.testing.congestion import run_endpoint
from rocegen.sim.testing.scenarios import HOST_MAC
from rocegen.wire import pfc as P
from rocegen.wire.addr import parse_mac


def quanta_for(width, cycles):
    """Quanta of about ``cycles`` cycles, and their exact length in cycles (rounded up)."""
    per = 512 / (default_line_gbps(width) * 1e9) * default_clk_hz(width)
    q = round(cycles / per)
    return q, math.ceil(q * per)


@pytest.mark.parametrize("width", [64, pytest.param(512, marks=pytest.mark.full)])
def test_core_pfc_holds_the_transmitter_for_the_pause_time(width):
    q, pause = quanta_for(width, 800)
    at = 2500
    frame = P.pfc_frame(parse_mac(HOST_MAC), {3: q, 5: P.MAX_QUANTA})
    frames, _, marks = run_endpoint(width, steps=at + pause + 500, frame_at=(at, frame),
                                    pmtu=256 if width == 64 else 1024, dcqcn=False, pfc="core")
    t = marks["frame_in"]
    starts = marks["starts"]
    # (PauseRx 2 cycles, the gate 1, and one more for the monitor's sampling)
    assert not [s for s in starts if t + 4 < s <= t + pause]
    after = [s for s in starts if s > t + pause]
    assert after and after[0] <= t + pause + 200
    before = [s for s in starts if t - 1500 < s <= t]
    assert len(before) > 3                  # it was sending when the pause came
    # no pause frame of its own: the receive FIFO never filled
    assert not [f for _, f in frames if P.is_mac_control(f)]


def test_mac_pfc_follows_the_mac_pause_level():
    width = 512
    on, off = 2500, 3300
    frames, _, marks = run_endpoint(
        width, steps=off + 500, pmtu=1024, dcqcn=False, pfc="mac",
        set_at=[(1000, "pause_rx", 1 << 4), (1800, "pause_rx", 0),
                (on, "pause_rx", 1 << 3), (off, "pause_rx", 0)])
    starts = marks["starts"]
    (t4, *_), (t4_off, *_), (t3, *_), (t3_off, *_) = marks["set"]
    assert [s for s in starts if t4 + 2 < s <= t4_off]      # priority 4: not ours
    assert not [s for s in starts if t3 + 2 < s <= t3_off]
    assert [s for s in starts if t3_off < s <= t3_off + 300]
