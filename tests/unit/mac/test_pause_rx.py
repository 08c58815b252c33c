"""PauseRx: received PFC and PAUSE frames set per-priority pause levels for exactly their time,
cycle by cycle against :class:`rocegen.sim.models.mac.pause.PauseRxModel`, with idle cycles and
beats held by ``ready`` on the watched stream; malformed and foreign control frames do
nothing and are counted."""

import random

import pytest
from scapy.compat import raw
from scapy.contrib.mac_control import MACControlClassBasedFlowControl, MACControlPause
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import ARP, Dot1Q, Ether

from rocegen.gateware.mac.pfc_rx import PauseRx
from rocegen.sim.models.mac.pause import PauseRxModel
from rocegen.sim.models.packets import to_beats
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import pfc

LOCAL = 0x02_11_22_33_44_55
LOCAL_TEXT = "02:11:22:33:44:55"
PEER = "02:aa:bb:cc:dd:ee"
MCAST = "01:80:c2:00:00:01"
CLK, LINE = 322.265625e6, 100           # one quantum is 33/20 cycles


def scapy_pfc(times, dst=MCAST):
    fields = {f"c{n}_pause_time": q for n, q in times.items()}
    fields.update({f"c{n}_enabled": 1 for n in times})
    return raw(Ether(dst=dst, src=PEER) / MACControlClassBasedFlowControl(**fields))


def scapy_pause(quanta, dst=MCAST):
    return raw(Ether(dst=dst, src=PEER) / MACControlPause(pause_time=quanta))


def pick_time(rng):
    return rng.choice([0, 0, 1, 2, 3, rng.randrange(4, 120), rng.randrange(120, 600)])


def random_frame(rng):
    """``(frame, error)``: data frames, pause frames to us and to others, malformed ones."""
    kind = rng.randrange(12)
    if kind == 0:
        return raw(Ether(dst=LOCAL_TEXT, src=PEER) / IP(dst="10.0.0.2") / UDP(dport=4791)
                   / bytes(rng.randrange(0, 300))), False
    if kind == 1:
        return raw(Ether(dst="ff:ff:ff:ff:ff:ff", src=PEER) / ARP(pdst="10.0.0.2")), False
    if kind in (2, 3):
        prios = rng.sample(range(8), rng.randrange(1, 9))
        return scapy_pfc({p: pick_time(rng) for p in prios}), False
    if kind == 4:                       # built by rocegen.wire.pfc, to our unicast address
        prios = rng.sample(range(8), rng.randrange(0, 9))
        return pfc.pfc_frame(PEER, {p: pick_time(rng) for p in prios}, dst=LOCAL), False
    if kind == 5:
        return scapy_pause(pick_time(rng), dst=rng.choice([MCAST, LOCAL_TEXT])), False
    if kind == 6:                       # to neither address: ignored
        return rng.choice([scapy_pfc({3: 50}, dst="02:00:00:00:00:09"),
                           scapy_pause(40, dst="ff:ff:ff:ff:ff:ff")]), False
    if kind == 7:                       # cut short: an Ethernet header up to a field short
        full = rng.choice([scapy_pfc({rng.randrange(8): 77}), scapy_pause(77)])
        cut = rng.randrange(14, 34 if full[15] == 0x01 and full[14] == 0x01 else 18)
        return full[:cut], False
    if kind == 8:                       # another MAC control opcode
        frame = bytearray(scapy_pfc({2: 99}))
        frame[14:16] = rng.choice([0x0002, 0x0100, 0x0102, 0x0000, 0xFFFF]).to_bytes(2, "big")
        return bytes(frame), False
    if kind == 9:                       # a damaged pause frame (bad FCS): no effect
        return scapy_pfc({rng.randrange(8): 300}), True
    if kind == 10:                      # a tagged 0x8808 frame is not MAC control
        return raw(Ether(dst=MCAST, src=PEER) / Dot1Q(vlan=5, type=0x8808)
                   / bytes.fromhex("0101ffff") / bytes(40)), False
    return bytes(rng.randrange(0, 14)), False       # too short for an Ethernet header


def drive(dut, width, frames, rng, *, idle, hold, tail):
    """A testbench driving the watched stream; returns it with the record of what it saw:
    ``ends`` (frame, error, cycle of its last beat), per-cycle ``paused`` and the pulses."""
    seen = {"ends": [], "paused": [], "pause_frame": [], "bad_frame": [], "ignored_frame": []}
    B = width // 8

    async def tb(ctx):
        ctx.set(dut.local_mac, LOCAL)
        cycle = 0

        async def tick(valid, ready, beat=None):
            nonlocal cycle
            seen["paused"].append(ctx.get(dut.paused))
            for name in ("pause_frame", "bad_frame", "ignored_frame"):
                if ctx.get(getattr(dut, name)):
                    seen[name].append(cycle)
            if beat is None:            # junk on the lanes of a cycle without a beat
                beat = (rng.getrandbits(width), rng.getrandbits(B), rng.getrandbits(1))
            ctx.set(dut.data, beat[0])
            ctx.set(dut.keep, beat[1])
            ctx.set(dut.last, beat[2])
            ctx.set(dut.valid, valid)
            ctx.set(dut.ready, ready)
            await ctx.tick()
            cycle += 1
            return valid and ready

        for frame, error in frames:
            beats = to_beats(frame, width)
            for n, beat in enumerate(beats):
                while rng.random() < idle:
                    await tick(0, rng.random() < 0.5)
                ctx.set(dut.error, int(error and n == len(beats) - 1))
                while not await tick(1, rng.random() >= hold, beat):
                    pass
            seen["ends"].append((frame, error, cycle - 1))
            ctx.set(dut.error, 0)
        for _ in range(tail):
            await tick(0, 1)

    return tb, seen


@pytest.mark.parametrize("width", [64, 128, 512])
def test_random_traffic_against_model(width):
    rng = random.Random(width)
    frames = [random_frame(rng) for _ in range(400)]
    dut = PauseRx(width, CLK, LINE)
    tb, seen = drive(dut, width, frames, rng, idle=0.3, hold=0.3, tail=1200)
    run_sim(dut, testbenches=[tb])
    model = PauseRxModel(CLK, LINE, LOCAL)
    for frame, error, end in seen["ends"]:
        model.receive(frame, end, error=error)
    got = seen["paused"]
    want = [model.paused(c) for c in range(len(got))]
    bad = [(c, f"{g:08b}", f"{w:08b}") for c, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not bad, bad[:10]
    for name in ("pause_frame", "bad_frame", "ignored_frame"):
        assert seen[name] == model.pulses[name], name
    # the mix exercised every outcome, and pauses started and ended
    assert min(model.counters.values()) >= 20, model.counters
    assert sum(1 for a, b in zip(got, got[1:]) if a & ~b) > 50


def test_back_to_back_single_beat_frames():
    """At 512 bits a pause frame is one beat; frames in consecutive cycles each act."""
    rng = random.Random(5)
    frames = [(scapy_pfc({n % 8: 10 + n}), False) for n in range(24)]
    frames += [(scapy_pause(0), False), (scapy_pfc({1: 3, 6: 0}), False)]
    dut = PauseRx(512, CLK, LINE)
    tb, seen = drive(dut, 512, frames, rng, idle=0, hold=0, tail=100)
    run_sim(dut, testbenches=[tb])
    ends = [end for _, _, end in seen["ends"]]
    assert ends == list(range(ends[0], ends[0] + len(frames)))
    model = PauseRxModel(CLK, LINE, LOCAL)
    for frame, error, end in seen["ends"]:
        model.receive(frame, end, error=error)
    assert seen["paused"] == [model.paused(c) for c in range(len(seen["paused"]))]
    assert len(seen["pause_frame"]) == len(frames)


@pytest.mark.parametrize("clk_hz, line_gbps, quanta, cycles", [
    # durations worked out by hand: a quantum is 512 bits, 5.12 ns at 100 Gb/s
    (322.265625e6, 100, 1000, 1650),        # 33/20 cycles per quantum
    (322.265625e6, 100, 7, 12),             # 11.55 cycles, the 12th starts inside the pause
    (322.265625e6, 100, 65535, 108133),     # 108132.75
    (390.625e6, 25, 5, 40),                 # 20.48 ns per quantum, 2.56 ns per cycle: 8 each
    (156.25e6, 10, 3, 24),                  # 51.2 ns per quantum, 6.4 ns per cycle
    (50e6, 400, 1000, 64),                  # 1.28 ns per quantum: 15.625 quanta each cycle
    (50e6, 400, 7, 1),
    (100e6, 100, 3, 2),                     # 15.36 ns: cycles at 0 and 10 ns
])
def test_pause_lasts_exactly_its_time(clk_hz, line_gbps, quanta, cycles):
    """One PAUSE frame: ``paused`` rises two cycles after the last beat and stays high
    for ``cycles`` cycles."""
    dut = PauseRx(64, clk_hz, line_gbps)
    rng = random.Random(1)
    tb, seen = drive(dut, 64, [(scapy_pause(quanta), False)], rng, idle=0, hold=0,
                     tail=cycles + 10)
    run_sim(dut, testbenches=[tb])
    end = seen["ends"][0][2]
    level = seen["paused"]
    assert level[end + 1] == 0 and level[end + 2] == 0xFF
    assert [n for n, v in enumerate(level) if v] == list(range(end + 2, end + 2 + cycles))
    assert seen["pause_frame"] == [end + 1]


def test_new_time_replaces_timer_and_xon_resumes():
    """A second XOFF restarts the timer from its own end; an XON ends the pause at once;
    priorities a PFC frame does not enable keep their timers."""
    rng = random.Random(2)
    frames = [(scapy_pfc({2: 100, 5: 100}), False), (scapy_pfc({2: 10}), False),
              (scapy_pfc({5: 0}), False)]
    dut = PauseRx(128, CLK, LINE)
    tb, seen = drive(dut, 128, frames, rng, idle=0.5, hold=0.2, tail=300)
    run_sim(dut, testbenches=[tb])
    (_, _, e1), (_, _, e2), (_, _, e3) = seen["ends"]
    lvl = seen["paused"]
    bit = [[n for n, v in enumerate(lvl) if v >> p & 1] for p in range(8)]
    assert bit[2] == list(range(e1 + 2, e2 + 2 + 17))        # 10 quanta: 16.5 -> 17 cycles
    assert bit[5] == list(range(e1 + 2, e3 + 2))
    assert not any(bit[p] for p in (0, 1, 3, 4, 6, 7))


def test_frame_laid_out_by_hand():
    """PFC from the 802.1Qbb layout written out byte by byte: priority 2 for 5 quanta
    (8.25 cycles: 9), priority 6 enabled with time 0, priority 0's time not enabled."""
    frame = bytes.fromhex("0180c2000001" "02aabbccddee" "8808" "0101" "0044" "0fff" "0000"
                          "0005" "0000" "0000" "0000" "0000" "0000") + bytes(26)
    dut = PauseRx(64, CLK, LINE)
    tb, seen = drive(dut, 64, [(frame, False)], random.Random(3), idle=0, hold=0, tail=20)
    run_sim(dut, testbenches=[tb])
    end = seen["ends"][0][2]
    assert [n for n, v in enumerate(seen["paused"]) if v] == list(range(end + 2, end + 11))
    assert {v for v in seen["paused"]} == {0, 1 << 2}


def test_parameters_are_checked():
    raises(ValueError, "width must be one of", lambda: PauseRx(96, CLK, LINE))
    raises(TypeError, "width must be an integer", lambda: PauseRx("64", CLK, LINE))
    raises(ValueError, "clk_hz must be a positive", lambda: PauseRx(64, 0, LINE))
    raises(ValueError, "line_gbps must be a positive", lambda: PauseRx(64, CLK, -1))
    raises(TypeError, "line_gbps must be a number", lambda: PauseRx(64, CLK, "100"))
