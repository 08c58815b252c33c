import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, Mux, Signal, UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.lib.demux import PacketDemux
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim

META = data.StructLayout({"dest": 2, "drop": 1, "seq": 16})


def build(width, n):
    """The demux, with ``select``/``drop`` driven from the metadata on the first beat of each
    packet only and from a free-running junk counter on the others, so that the test fails if
    the demux looks at them after the first beat."""
    m = Module()
    m.submodules.dut = dut = PacketDemux(width, META, n)
    first = Signal(init=1)
    junk = Signal(8, init=0x5A)
    m.d.sync += junk.eq(junk * 5 + 3)
    with m.If(dut.i.valid & dut.i.ready):
        m.d.sync += first.eq(dut.i.payload.last)
    m.d.comb += [
        dut.select.eq(Mux(first, dut.i.payload.meta.dest, junk)),
        dut.drop.eq(Mux(first, dut.i.payload.meta.drop, junk[7])),
    ]
    return m, dut


def expected_route(pkt, n):
    """Output index of a packet, or None when it is dropped."""
    sel_bits = max(1, (n - 1).bit_length()) if n > 1 else 0
    dest = pkt.meta["dest"] & ((1 << sel_bits) - 1)
    if pkt.meta["drop"] or dest >= n:
        return None
    return dest


def make_packets(width, n, rng, *, dests=None, count=40):
    B = width // 8
    lengths = list(range(0, 2 * B + 2)) + [rng.randrange(0, 5 * B) for _ in range(count)]
    rng.shuffle(lengths)
    dests = list(range(4)) if dests is None else dests
    return [Packet(rng.randbytes(length),
                   {"dest": rng.choice(dests), "drop": int(rng.random() < 0.2), "seq": s},
                   error=rng.random() < 0.2)
            for s, length in enumerate(lengths)]


def run_demux(width, n, packets, *, idle, backpressure, seed):
    m, dut = build(width, n)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    bp = backpressure if isinstance(backpressure, list) else [backpressure] * n
    cols = [StreamCollector(dut.o[k], width, backpressure=bp[k], seed=seed + 1 + k)
            for k in range(n)]
    routes = [expected_route(p, n) for p in packets]
    want = sum(r is not None for r in routes)
    dropped, stalls = [], []
    sent = [0]                         # input packets consumed
    B = width // 8
    deadline = 20 * sum(max(1, -(-len(p.data) // B)) for p in packets) + 200

    async def monitor(ctx):
        index = 0                      # input packet the current input beat belongs to
        async for _, _, v, r, last, pulse in ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload.last, dut.dropped):
            if pulse:
                dropped.append(index)
            if v and not r:
                stalls.append(index)
            if v and r and last:
                index += 1
                sent[0] = index

    async def send(ctx):
        await drv.send(ctx, packets)

    async def watchdog(ctx):
        # a separate testbench, so that a stuck input fails the test instead of hanging it
        for _ in range(deadline):
            if sum(len(c.packets) for c in cols) >= want and sent[0] == len(packets):
                break
            await ctx.tick()
        else:
            raise AssertionError(f"{sent[0]} of {len(packets)} packets sent, "
                                 f"{sum(len(c.packets) for c in cols)} of {want} received "
                                 f"after {deadline} cycles")
        for _ in range(5):
            await ctx.tick()

    run_sim(m, testbenches=[send, watchdog], processes=[c.run for c in cols] + [monitor])
    expected = [[p for p, r in zip(packets, routes, strict=True) if r == k] for k in range(n)]
    return cols, expected, dropped, stalls, [s for s, r in enumerate(routes) if r is None]


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_routes_every_packet_whole(width, n):
    """Random idle input, random backpressure on every output: each output gets exactly its
    packets (intact, in order, errors kept), dropped ones (``drop`` or ``select >= n``) go
    nowhere and pulse ``dropped`` once each."""
    rng = random.Random(width * 3 + n)
    packets = make_packets(width, n, rng)
    cols, expected, dropped, _, want_dropped = run_demux(width, n, packets, idle=0.3,
                                                         backpressure=0.4, seed=n)
    for k in range(n):
        assert cols[k].packets == expected[k], f"output {k}"
    assert dropped == want_dropped


@pytest.mark.parametrize("width", [64, 512])
def test_backpressure_only_from_selected_output(width):
    """An output that is never ready does not hold up packets for the other outputs or drops."""
    n = 3
    rng = random.Random(width)
    packets = make_packets(width, n, rng, dests=[0, 1])
    cols, expected, dropped, _, want_dropped = run_demux(width, n, packets, idle=0.2,
                                                         backpressure=[0.3, 0.3, 1.0], seed=9)
    assert expected[2] == []
    for k in range(n):
        assert cols[k].packets == expected[k], f"output {k}"
    assert dropped == want_dropped


@pytest.mark.parametrize("width", [64, 512])
def test_full_rate_and_drops_never_stall(width):
    """With ready outputs the input is never held off (dropped packets included), and a
    dropped packet is consumed even while every output is held off."""
    n = 2
    rng = random.Random(width + 1)
    packets = make_packets(width, n, rng)
    cols, expected, dropped, stalls, want_dropped = run_demux(width, n, packets, idle=0.0,
                                                              backpressure=0.0, seed=4)
    assert stalls == []
    for k in range(n):
        assert cols[k].packets == expected[k]
    assert dropped == want_dropped
    drops = [Packet(rng.randbytes(length), {"dest": 0, "drop": 1, "seq": s})
             for s, length in enumerate(range(0, 3 * (width // 8)))]
    cols, expected, dropped, stalls, _ = run_demux(width, n, drops, idle=0.0,
                                                   backpressure=[1.0, 1.0], seed=5)
    assert stalls == []
    assert dropped == list(range(len(drops)))
    assert [c.packets for c in cols] == [[], []]


def test_single_output():
    n = 1
    rng = random.Random(2)
    packets = make_packets(64, n, rng, dests=[0])
    cols, expected, dropped, _, want_dropped = run_demux(64, n, packets, idle=0.3,
                                                         backpressure=0.3, seed=1)
    assert cols[0].packets == expected[0]
    assert dropped == want_dropped


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="at least 1, not 0"):
            PacketDemux(64, META, 0)
        with pytest.raises(TypeError, match="integer number of ports"):
            PacketDemux(64, META, "2")
        with pytest.raises(ValueError, match="width must be one of"):
            PacketDemux(32, META, 2)
        gc.collect()
