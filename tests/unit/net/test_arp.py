"""ARP block on its own: what it learns, answers and refuses."""

import gc
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable
from amaranth.lib.wiring import In
from scapy.layers.l2 import ARP

from rocegen.gateware.net.arp import Arp
from rocegen.gateware.net.layouts import ARP_PEEK
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.addr import parse_ip, parse_mac

OUR_MAC, OUR_IP = "02:00:00:00:00:01", "10.0.0.2"


def eth_meta(src):
    return {"eth": {"dst": (1 << 48) - 1, "src": parse_mac(src), "ethertype": 0x0806}}


def run(width, arps, probe_ips):
    dut = Arp(width, retry_cycles=100)
    drv = StreamDriver(dut.i, width, idle=0.2, seed=1)
    col = StreamCollector(dut.o, width, backpressure=0.2, seed=2)
    hits, bad = {}, []

    async def count(ctx):
        async for _, _, b in ctx.tick().sample(dut.drop_bad):
            if b:
                bad.append(1)

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(OUR_MAC))
        ctx.set(dut.local_ip, parse_ip(OUR_IP))
        await drv.send(ctx, [Packet(bytes(a), eth_meta(a.hwsrc)) for a in arps])
        for _ in range(40):
            await ctx.tick()
        for ip in probe_ips:
            ctx.set(dut.lookup.ip, parse_ip(ip))
            await ctx.tick()
            hits[ip] = (ctx.get(dut.lookup.hit), ctx.get(dut.lookup.mac))

    run_sim(dut, testbenches=[tb], processes=[col.run, count])
    return col.packets, hits, len(bad)


@pytest.mark.parametrize("width", [64, 512])
def test_probe_is_answered_but_not_learned_and_multicast_senders_are_refused(width):
    arps = [
        # RFC 5227 probe for our address: answered, 0.0.0.0 not learned
        ARP(op=1, hwsrc="02:00:00:00:00:77", psrc="0.0.0.0", pdst=OUR_IP),
        # multicast sender hardware address: refused
        ARP(op=1, hwsrc="01:00:5e:00:00:01", psrc="10.0.0.8", pdst=OUR_IP),
        # someone claiming our own address: answered, never learned
        ARP(op=1, hwsrc="02:00:00:00:00:66", psrc=OUR_IP, pdst=OUR_IP),
        # an ordinary request: answered and learned
        ARP(op=1, hwsrc="02:00:00:00:00:99", psrc="10.0.0.1", pdst=OUR_IP),
    ]
    replies, hits, bad = run(width, arps, ["0.0.0.0", "10.0.0.8", OUR_IP, "10.0.0.1"])
    assert bad == 1
    got = [ARP(p.data[:28]) for p in replies]
    assert [(a.op, a.hwdst, a.pdst) for a in got] == [
        (2, "02:00:00:00:00:77", "0.0.0.0"),
        (2, "02:00:00:00:00:66", OUR_IP),
        (2, "02:00:00:00:00:99", "10.0.0.1")]
    assert all(a.hwsrc == OUR_MAC and a.psrc == OUR_IP for a in got)
    assert [p.meta["eth"]["dst"] for p in replies] == [parse_mac(a.hwdst) for a in got]
    assert hits["0.0.0.0"][0] == 0 and hits["10.0.0.8"][0] == 0 and hits[OUR_IP][0] == 0
    assert hits["10.0.0.1"] == (1, parse_mac("02:00:00:00:00:99"))


@pytest.mark.parametrize("width", [64, 512])
def test_peek_answers_from_the_cache_and_asks_nothing(width):
    """``peek`` answers combinationally from the cache (the entry learned from a request for
    us; a miss for another address), and a miss sends no request."""
    dut = Arp(width, retry_cycles=100, peek=True)
    drv = StreamDriver(dut.i, width, idle=0.2, seed=3)
    col = StreamCollector(dut.o, width, backpressure=0.2, seed=4)
    seen = {}

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(OUR_MAC))
        ctx.set(dut.local_ip, parse_ip(OUR_IP))
        ctx.set(dut.peek.ip, parse_ip("10.0.0.1"))
        # a miss before anything is learned, and in the same cycle as the look-up's answer
        seen["before"] = (ctx.get(dut.peek.hit), ctx.get(dut.peek.mac))
        await drv.send(ctx, [Packet(bytes(ARP(op=1, hwsrc="02:00:00:00:00:99", psrc="10.0.0.1",
                                              pdst=OUR_IP)), eth_meta("02:00:00:00:00:99"))])
        for _ in range(40):
            await ctx.tick()
        for ip in ("10.0.0.1", "10.0.0.5"):
            ctx.set(dut.peek.ip, parse_ip(ip))
            ctx.set(dut.lookup.ip, parse_ip(ip))
            # combinational: the answer is there before the clock edge
            seen[ip] = (ctx.get(dut.peek.hit), ctx.get(dut.peek.mac),
                        ctx.get(dut.lookup.hit), ctx.get(dut.lookup.mac))
            await ctx.tick()
        for _ in range(200):            # no request for the address that missed
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run])
    assert seen["before"][0] == 0
    mac = parse_mac("02:00:00:00:00:99")
    assert seen["10.0.0.1"] == (1, mac, 1, mac)
    assert seen["10.0.0.5"][0] == 0 and seen["10.0.0.5"][2] == 0
    # the reply to the request, and nothing else (the peek's miss asked nothing)
    assert [ARP(p.data[:28]).op for p in col.packets] == [2]


def test_peek_must_be_a_bool():
    with pytest.raises(TypeError, match="peek must be a bool"):
        Arp(64, peek=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        plain, peek = Arp(64), Arp(64, peek=True)
        assert "peek" not in plain.signature.members
        assert peek.signature.members["peek"] == In(ARP_PEEK)
        del plain, peek
        gc.collect()
