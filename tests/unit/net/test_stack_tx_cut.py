"""The stack's transmit path, through its store-and-forward FIFO or cut-through without one
(``tx_cut_through``): the same frames either way (the reference model's, ICRC appended on the
RoCEv2 port), no idle cycle inside a frame to the MAC under random MAC backpressure as long as
the sources are steady, and a frame's first beat at the MAC before its last beat has come in
only with cut-through."""

import random

import pytest
from scapy.layers.l2 import ARP, Ether

from rocegen.gateware.net.stack import NetStack
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.stack_drivers import check_udp_frame, introduce_host
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import UDP_PORT_ROCEV2

PORTS = (7, UDP_PORT_ROCEV2)
SPORT = 0xC0DE
#: The stack's MTU per width: long enough frames to outlast its latency by far at either.
MTU = {64: 1500, 512: 9000}
#: Beats a datagram needs to outlast the stack's latency: with cut-through its frame's first
#: beat is at the MAC before its last beat has come in.
LONG = 32


def _datagrams(rng, n, width):
    """``n`` (port index, payload) pairs: plain UDP on port 7 from 1 byte, RoCEv2 on 4791 (the
    stack appends the ICRC; a BTH and a padded payload: a multiple of 4 from 12 bytes), to a
    full MTU's worth (:data:`MTU`)."""
    out = []
    for _ in range(n):
        k = rng.randrange(2)
        top, least = MTU[width] - 28 - 4 * k, 1 + 11 * k
        size = rng.choice([least, 7, 8, 63, 64, 65, rng.randrange(least, top + 1), top])
        size = max(least, size & ~3) if k else size
        out.append((k, rng.randbytes(size)))
    return out


def _by_port(col, datagrams):
    """(frame, span, payload) per datagram. Frames of one port leave in order; a plain one may
    overtake a RoCEv2 one in the ICRC stage, so each frame is matched by its UDP port."""
    got = {k: [(p, span) for p, span in zip(col.packets[1:], col.spans[1:], strict=True)
               if int.from_bytes(p.data[36:38], "big") == port]
           for k, port in enumerate(PORTS)}
    assert sum(map(len, got.values())) == len(datagrams) == len(col.packets) - 1
    want = {k: [p for j, p in datagrams if j == k] for k in got}
    return [(pkt, span, payload) for k in got
            for (pkt, span), payload in zip(got[k], want[k], strict=True)]


def _run(width, cut, datagrams, *, gaps, seed, one_by_one=False):
    """The stack's frames for ``datagrams`` (after an ARP request that teaches it the host's
    MAC), the MAC collector, and the cycles each datagram's last beat went into ``udp_tx``.
    ``one_by_one``: each datagram offered once the frame before has left (the stack idle)."""
    dut = NetStack(width, PORTS, mtu=MTU[width], tx_cut_through=cut)
    rx = StreamDriver(dut.mac_rx, width)
    drivers = [StreamDriver(dut.udp_tx[k], width, idle=0.3, seed=seed + k, gaps=gaps)
               for k in range(len(PORTS))]
    monitors = [HandshakeMonitor(dut.udp_tx[k]) for k in range(len(PORTS))]
    col = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=seed + 9)

    async def tb(ctx):
        await introduce_host(ctx, dut, rx, col)
        for n, (k, payload) in enumerate(datagrams):
            while one_by_one and len(col.packets) < 1 + n:
                await ctx.tick()
            await drivers[k].send(ctx, [Packet(payload, {"udp": {
                "dst_ip": parse_ip(HOST_IP), "src_port": SPORT, "dst_port": PORTS[k],
                "length": len(payload) + 4 * k, "dscp": 0, "ecn": 0, "icrc": k}})])
        while len(col.packets) < 1 + len(datagrams):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run] + [m.run for m in monitors])
    return col, monitors


def _check_frames(col, datagrams):
    assert not any(p.error for p in col.packets)
    for pkt, _, payload in _by_port(col, datagrams):
        frame = pkt.data
        k = PORTS.index(int.from_bytes(frame[36:38], "big"))
        check_udp_frame(frame, payload, SPORT, PORTS[k], icrc=bool(k))


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("cut", [False, True], ids=["stored", "cut"])
def test_steady_sources_never_starve_the_mac(width, cut):
    """Sources that pause only between datagrams, the MAC stalling at random: every frame is
    the model's and the MAC never waits inside one, stored in the FIFO or cut-through. Then
    the same datagrams each offered to an idle stack: with cut-through, a long frame starts at
    the MAC before its datagram has all come in; stored, never."""
    datagrams = _datagrams(random.Random(width), 12, width)
    col, _ = _run(width, cut, datagrams, gaps="between", seed=width)
    _check_frames(col, datagrams)
    assert col.starved == 0
    col, monitors = _run(width, cut, datagrams, gaps="between", seed=width, one_by_one=True)
    _check_frames(col, datagrams)
    assert col.starved == 0
    # the cycle each datagram's last beat went in, per port in order
    ends = {k: iter(_last_beats(m.cycles, datagrams, k, width)) for k, m in enumerate(monitors)}
    ends = {id(p): next(ends[k]) for k, p in datagrams}
    early = sum(span[0] < ends[id(payload)] for _, span, payload in _by_port(col, datagrams))
    if cut:
        long = sum(len(p) > LONG * width // 8 for _, p in datagrams)
        assert early >= long > 0
    else:
        assert early == 0


def _last_beats(cycles, datagrams, k, width):
    """The cycles of the last beats of port ``k``'s datagrams among ``cycles`` (every beat
    moved on that port, in order)."""
    B = width // 8
    i = 0
    for j, payload in datagrams:
        if j == k:
            i += max(1, -(-len(payload) // B))
            yield cycles[i - 1]


@pytest.mark.parametrize("width", [64, 512])
def test_a_source_that_pauses_inside_a_frame_starves_the_cut_through_path(width):
    """The condition ``tx_cut_through`` states is needed: a source idle inside its datagrams
    leaves the MAC waiting inside frames (the frames themselves still right); the same source
    through the store-and-forward FIFO never does."""
    datagrams = [(k, p) for k, p in _datagrams(random.Random(width + 1), 12, width)
                 if len(p) > LONG * width // 8]
    for cut in (True, False):
        col, _ = _run(width, cut, datagrams, gaps="anywhere", seed=width + 1)
        _check_frames(col, datagrams)
        assert (col.starved > 0) == cut, (cut, col.starved)


def test_tx_cut_through_is_a_bool():
    with pytest.raises(TypeError, match="tx_cut_through must be a bool"):
        NetStack(64, PORTS, tx_cut_through="yes")


@pytest.mark.parametrize("width", [64, 512])
def test_a_datagram_that_waited_for_arp_leaves_without_a_pause(width):
    """A datagram for a host not yet in the ARP cache waits in IPv4 transmit while ARP asks;
    once the host's reply is in, its frame leaves cut-through with no idle cycle inside (the
    IPv4 header's beats included), and it is the model's frame."""
    dut = NetStack(width, PORTS, mtu=MTU[width], tx_cut_through=True, arp_retry_cycles=2000)
    rx = StreamDriver(dut.mac_rx, width)
    tx = StreamDriver(dut.udp_tx[0], width, gaps="between")
    col = StreamCollector(dut.mac_tx, width)
    reply = bytes(Ether(src=HOST_MAC, dst=FPGA_MAC) / ARP(
        op=2, hwsrc=HOST_MAC, psrc=HOST_IP, hwdst=FPGA_MAC, pdst=FPGA_IP)).ljust(60, b"\0")
    datagrams = [(0, random.Random(width).randbytes(200))]

    async def source(ctx):          # (it waits for ARP: the testbench answers meanwhile)
        await tx.send(ctx, [Packet(datagrams[0][1], {"udp": {
            "dst_ip": parse_ip(HOST_IP), "src_port": SPORT, "dst_port": PORTS[0],
            "length": 200, "dscp": 0, "ecn": 0, "icrc": 0}})])

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        while len(col.packets) < 1:                 # the stack's ARP request
            await ctx.tick()
        await ctx.tick().repeat(50)
        await rx.send(ctx, [Packet(reply)])
        while len(col.packets) < 2:
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, source])
    assert col.packets[0].data[12:14] == b"\x08\x06"        # ARP first
    _check_frames(col, datagrams)
    assert col.starved == 0
