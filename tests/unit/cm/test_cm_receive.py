"""Connection manager receiver: every datagram held with its addresses and its length verdict
until released; nothing taken while one is held."""

import random

import pytest

from rocegen.gateware.roce.cm.cm_receive import CmReceiver
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, StreamDriver, meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.headers import CM, ETH, IPV4, UDP


def datagram(rng, length, error=False):
    ipv4 = IPV4.unpack(bytes(IPV4.length)) | {"src": rng.getrandbits(32), "dst": rng.getrandbits(32)}
    udp = UDP.unpack(bytes(UDP.length)) | {"src_port": rng.getrandbits(16),
                                           "dst_port": rng.getrandbits(16)}
    meta = {"eth": ETH.unpack(bytes(ETH.length)), "ipv4": ipv4, "udp": udp}
    return Packet(bytes(rng.getrandbits(8) for _ in range(length)), meta, error)


def run(width, packets, *, idle, hold, seed):
    """Send ``packets``; release each held datagram after a random number of cycles (up to
    ``hold``); returns the datagrams seen and the cycles beats moved on ``i``."""
    dut = CmReceiver(width)
    rng = random.Random(seed)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    taken = HandshakeMonitor(dut.i)
    seen = []

    async def consumer(ctx):
        for _ in packets:
            if not ctx.get(dut.o.valid):
                await ctx.tick().until(dut.o.valid)
            first = meta_dict(ctx.get(dut.o.payload))
            for _ in range(rng.randrange(hold + 1)):
                assert ctx.get(dut.o.valid) and not ctx.get(dut.i.ready)
                assert meta_dict(ctx.get(dut.o.payload)) == first, "held datagram changed"
                await ctx.tick()
            ctx.set(dut.o.ready, 1)
            await ctx.tick()
            ctx.set(dut.o.ready, 0)
            seen.append(first)

    async def tb(ctx):
        await drv.send(ctx, packets)

    run_sim(dut, testbenches=[tb, consumer], processes=[taken.run])
    return seen, taken.cycles


@pytest.mark.parametrize("width", [64, 128, 512])
def test_datagrams_are_held_with_their_verdict(width):
    rng = random.Random(width)
    lengths = [64] * 30 + [0, 1, 8, 63, 65, 100, 127, 128, 129, 200] + \
              [rng.randrange(1, 140) for _ in range(20)]
    rng.shuffle(lengths)
    packets = [datagram(rng, n, error=rng.random() < 0.15) for n in lengths]
    seen, _ = run(width, packets, idle=0.3, hold=4, seed=width + 1)
    assert len(seen) == len(packets)
    for n, (pkt, d) in enumerate(zip(packets, seen)):
        ok = len(pkt.data) == 64 and not pkt.error
        assert d["length_ok"] == ok, n
        assert (d["src_ip"], d["dst_ip"]) == (pkt.meta["ipv4"]["src"], pkt.meta["ipv4"]["dst"]), n
        assert (d["src_port"], d["dst_port"]) == (pkt.meta["udp"]["src_port"],
                                                  pkt.meta["udp"]["dst_port"]), n
        if ok:
            assert d["req"] == CM.unpack(pkt.data), n


@pytest.mark.parametrize("width", [64, 512])
def test_latency_and_release(width):
    """Released at once, the next datagram's first beat moves in the cycle after the release:
    one datagram every 512/W + 2 cycles."""
    rng = random.Random(3)
    packets = [datagram(rng, 64) for _ in range(4)]
    seen, cycles = run(width, packets, idle=0, hold=0, seed=1)
    beats = 512 // width
    assert len(cycles) == 4 * beats
    starts = cycles[::beats]
    assert all(b - a == beats + 2 for a, b in zip(starts, starts[1:]))
    assert all(d["length_ok"] for d in seen)


def test_width_is_checked():
    raises(ValueError, "width", lambda: CmReceiver(32))
