"""PauseTx: PFC frames for rises (XOFF), falls (XON) and refreshes of the request levels, put
between whole frames of the transmit stream; each frame checked against
:class:`rocegen.sim.models.mac.pause.PauseTxModel` and read back with scapy, with random idle
cycles, backpressure and request changes at 64 and 512 bits."""

import random

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.l2 import Ether

from rocegen.gateware.mac.pfc_tx import PauseTx
from rocegen.sim.models.mac.pause import PauseTxModel
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import pfc
from tests.tiers import full

LOCAL = 0x02_11_22_33_44_55
CLK, LINE = 322.265625e6, 100           # one quantum is 33/20 cycles


def bench(width, pkts, xoff_plan, *, quanta=None, idle=0.0, backpressure=0.0, tail=300,
          seed=0):
    """Run the block; returns the collector, the cycles ``pfc_sent`` pulsed, the request level
    of every cycle, and per cycle ``(o.valid, first beat of a frame of i offered)``."""
    dut = PauseTx(width, CLK, LINE)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    rec = {"sent": [], "xoff": [], "o": []}

    async def requests(ctx):
        for level, cycles in xoff_plan:
            ctx.set(dut.xoff, level)
            for _ in range(cycles):
                await ctx.tick()
        ctx.set(dut.xoff, 0)

    async def watch(ctx):
        in_frame = on_pfc = False
        async for s in ctx.tick().sample(dut.pfc_sent, dut.xoff, dut.o.valid, dut.o.ready,
                                          dut.o.payload.last):
            sent, xoff, o_valid, o_ready, last = s[2:]
            cycle = len(rec["xoff"])
            if sent:
                rec["sent"].append(cycle)
                on_pfc = True
            rec["xoff"].append(xoff)
            passing = o_valid and not on_pfc
            rec["o"].append((o_valid, passing and not in_frame))
            if passing:
                in_frame = not (o_ready and last)
            elif on_pfc and o_valid and o_ready and last:
                on_pfc = False

    async def tb(ctx):
        ctx.set(dut.local_mac, LOCAL)
        if quanta is not None:
            ctx.set(dut.quanta, quanta)
        await drv.send(ctx, pkts)
        while len(rec["xoff"]) < sum(n for _, n in xoff_plan):
            await ctx.tick()
        for _ in range(tail):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, requests, watch])
    return col, rec


def random_plan(rng, cycles):
    plan, level = [], 0
    while cycles > 0:
        if rng.random() < 0.7:
            level ^= 1 << rng.randrange(8)
        else:
            level = rng.getrandbits(8)
        n = rng.choice([1, 2, 5, rng.randrange(1, 60), rng.randrange(60, 400)])
        plan.append((level, n))
        cycles -= n
    return plan + [(0, 1)]


def check_frame(frame):
    """A PFC frame as the standard lays it out, read by scapy: its enabled priorities and
    times."""
    assert len(frame) == 60 and frame[44:] == bytes(16)
    eth = Ether(frame)
    body = eth.payload.payload
    assert (eth.dst, eth.src, eth.type) == ("01:80:c2:00:00:01", "02:11:22:33:44:55", 0x8808)
    assert isinstance(body, MACControlClassBasedFlowControl)
    enable = sum(getattr(body, f"c{n}_enabled") << n for n in range(8))
    return enable, {n: getattr(body, f"c{n}_pause_time") for n in range(8) if enable >> n & 1}


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("idle, backpressure", [full(0.0, 0.0), (0.3, 0.4)])
def test_against_model(width, idle, backpressure):
    rng = random.Random(width + int(10 * backpressure))
    pkts = [Packet(rng.randbytes(rng.choice([60, 64, rng.randrange(14, 1500)])))
            for _ in range(120)]
    quanta = 60                         # refreshes after 15 to 30 quanta: 25 to 50 cycles
    col, rec = bench(width, pkts, random_plan(rng, 12000), quanta=quanta, idle=idle,
                     backpressure=backpressure, seed=7)
    data = [p.data for p in col.packets if not pfc.is_mac_control(p.data)]
    assert data == [p.data for p in pkts]
    frames = [p.data for p in col.packets if pfc.is_mac_control(p.data)]
    assert len(frames) == len(rec["sent"]) > 100
    model = PauseTxModel(CLK, LINE, LOCAL, quanta=quanta, slack=3)
    decisions = {cycle - 1: frame for cycle, frame in zip(rec["sent"], frames)}
    kinds = {"xoff": 0, "xon": 0}
    for cycle, (_, data_start) in enumerate(rec["o"]):
        xoff = rec["xoff"][cycle]
        if cycle in decisions:
            enable, times = check_frame(decisions[cycle])
            assert decisions[cycle] == model.decide(cycle, xoff, enable)
            for t in times.values():
                kinds["xoff" if t else "xon"] += 1
        elif data_start:            # a frame of i starts only when nothing is surely due
            assert model.due(cycle, xoff)[0] == 0, f"cycle {cycle}"
    assert model.told == [0] * 8 and min(kinds.values()) > 50
    quiet = [c for c in rec["sent"] if c > len(rec["xoff"]) - 200]
    assert not quiet


@pytest.mark.parametrize("width", [64, 512])
def test_refresh_interval(width):
    """Priority 3 held in XOFF with 200-quanta pauses: refresh ticks every 50 quanta (82.5
    cycles at 33/20 cycles per quantum); the first refresh 50 to 100 quanta after the XOFF,
    then one every 100 quanta, 165 cycles (a cycle either way: ticks land on whole cycles)."""
    col, rec = bench(width, [], [(0, 10), (1 << 3, 2000), (0, 10)], quanta=200, tail=50)
    frames = [p.data for p in col.packets]
    times = [check_frame(f)[1] for f in frames]
    assert times[0] == {3: 200} and times[-1] == {3: 0}
    assert all(t == {3: 200} for t in times[1:-1]) and len(times) >= 2 + 11
    gaps = [b - a for a, b in zip(rec["sent"], rec["sent"][1:-1])]
    assert 82 <= gaps[0] <= 168 and all(164 <= g <= 166 for g in gaps[1:]), gaps
    assert rec["sent"][0] == 10 + 1                     # decided in cycle 10, offered in 11


def test_pfc_waits_for_frame_boundary_and_goes_first():
    """An XOFF asked for while a long frame is on its way comes right after it, before the
    frame that waits at the input."""
    width = 64
    pkts = [Packet(bytes(range(256)) * 2), Packet(b"\x55" * 100)]
    col, rec = bench(width, pkts, [(0, 5), (0x81, 400)], quanta=0x1234, tail=100)
    assert [p.data[:2] for p in col.packets] == [b"\x00\x01", bytes.fromhex("0180"),
                                                 b"\x55\x55", bytes.fromhex("0180")]
    first, pfc_span = col.spans[0], col.spans[1]
    assert pfc_span[0] == first[1] + 2 and pfc_span[1] == pfc_span[0] + 7     # 8 beats
    assert check_frame(col.packets[1].data)[1] == {0: 0x1234, 7: 0x1234}
    # 802.1Qbb by hand: addresses, EtherType, opcode, enable vector (reserved octet, then
    # bit n for priority n), eight times priority 0 first, zeros to 60 bytes
    assert col.packets[1].data.hex() == (
        "0180c2000001" "021122334455" "8808" "0101" "0081" "1234" + "0000" * 6 + "1234"
        + "00" * 26)
    assert check_frame(col.packets[3].data)[1] == {0: 0, 7: 0}


def test_parameters_are_checked():
    raises(ValueError, "width must be one of", lambda: PauseTx(48, CLK, LINE))
    raises(ValueError, "clk_hz must be a positive", lambda: PauseTx(64, -CLK, LINE))
    raises(TypeError, "line_gbps must be a number", lambda: PauseTx(64, CLK, None))
