"""The network stack in Amaranth's simulator: a scapy host talks to it; responses and counters
must match the reference model."""

import random

import pytest

from rocegen.gateware.net.stack import STATS, NetStack
from rocegen.sim.models.net.netstack import NetStackModel, normalise
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, host_frames
from rocegen.sim.testing.stack_drivers import udp_echo
from rocegen.wire.addr import parse_ip, parse_mac


def kind(fr):
    return fr[12:14] + (fr[23:24] if fr[12:14] == b"\x08\x00" else b"")


@pytest.mark.parametrize("width", [64, 512])
def test_stack_against_model(width):
    rng = random.Random(width)
    frames = host_frames(rng)
    model = NetStackModel(FPGA_MAC, FPGA_IP, udp_ports=(17185,))
    expected, counts = [], {"rx_frames": len(frames)}
    for f in frames:
        out, moved = model.handle_all(f)
        expected += out
        for name in moved:
            counts[name] = counts.get(name, 0) + 1

    dut = NetStack(width, (7, 17185), arp_retry_cycles=500)
    drv = StreamDriver(dut.mac_rx, width, idle=0.2, seed=1)
    col = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=2)
    got_counts = {}
    gaps = []

    async def no_gap_inside_frames(ctx):
        # the MAC side must never see valid drop inside a frame
        inside = False
        async for _, _, v, r, last in ctx.tick().sample(dut.mac_tx.valid, dut.mac_tx.ready,
                                                         dut.mac_tx.payload.last):
            if inside and not v:
                gaps.append(1)
            if v and r:
                inside = not last

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        await drv.send(ctx, [Packet(f) for f in frames])
        idle = 0
        while idle < 3000 and len(col.packets) <= len(expected):
            n = len(col.packets)
            await ctx.tick()
            idle = idle + 1 if len(col.packets) == n else 0
        for k, name in enumerate(STATS):
            ctx.set(dut.stats_addr, k)
            await ctx.tick()
            await ctx.tick()
            got_counts[name] = ctx.get(dut.stats_data)

    run_sim(dut, testbenches=[tb], processes=[col.run, udp_echo(dut), no_gap_inside_frames])
    assert not gaps, f"valid dropped inside a transmitted frame {len(gaps)} times"
    got = [normalise(p.data) for p in col.packets]
    exp = [normalise(x) for x in expected]
    for k in {kind(x) for x in exp + got}:
        e = [x for x in exp if kind(x) == k]
        g = [x for x in got if kind(x) == k]
        assert g == e, f"kind {k.hex()}: got {len(g)} frames, expected {len(e)}; counters {got_counts}"
    counts["tx_frames"] = len(expected)
    # every counter, including the ones that must stay at zero
    assert got_counts == {name: counts.get(name, 0) for name in STATS}
