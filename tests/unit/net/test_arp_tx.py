"""ARP transmitter: random replies and requests, checked by scapy, under backpressure at
several widths; a reply goes before a request offered with it."""

import random

import pytest
from scapy.layers.l2 import ARP

from rocegen.gateware.net.arp_tx import ArpTransmitter
from rocegen.sim.testing.amaranth_streams import StreamCollector
from rocegen.sim.testing.harness import raises, run_sim

MAC, IP = 0x020000000001, 0x0A000002


def mac_str(v):
    return ":".join(f"{b:02x}" for b in v.to_bytes(6, "big"))


def ip_str(v):
    return ".".join(str(b) for b in v.to_bytes(4, "big"))


@pytest.mark.parametrize("width", [64, 256, 512])
def test_replies_and_requests(width):
    rng = random.Random(width)
    dut = ArpTransmitter(width)
    col = StreamCollector(dut.o, width, backpressure=0.4, seed=width)
    sent = []                                   # ("reply", mac, ip) / ("request", ip), in order

    async def tb(ctx):
        ctx.set(dut.local_mac, MAC)
        ctx.set(dut.local_ip, IP)
        reply = request = None
        for _ in range(300):
            # new ones only when nothing waits (an offer is held until taken); both at once
            # now and then: the reply goes first
            if reply is None and request is None:
                if rng.random() < 0.6:
                    reply = (rng.getrandbits(48) & ~(1 << 40), rng.getrandbits(32))
                if rng.random() < 0.6:
                    request = rng.getrandbits(32)
            ctx.set(dut.reply.valid, reply is not None)
            if reply:
                ctx.set(dut.reply.payload, {"mac": reply[0], "ip": reply[1]})
            ctx.set(dut.request.valid, request is not None)
            if request is not None:
                ctx.set(dut.request.payload, request)
            took_reply = reply is not None and ctx.get(dut.reply.ready)
            took_request = request is not None and ctx.get(dut.request.ready)
            await ctx.tick()
            assert not (took_reply and took_request)
            if took_request:
                assert reply is None, "a request went before a waiting reply"
                sent.append(("request", request))
                request = None
            if took_reply:
                sent.append(("reply",) + reply)
                reply = None
        ctx.set(dut.reply.valid, 0)
        ctx.set(dut.request.valid, 0)
        while len(col.packets) < len(sent):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run])
    assert len(col.packets) == len(sent) > 40
    for pkt, s in zip(col.packets, sent):
        a = ARP(pkt.data)
        assert len(pkt.data) == 28 and not pkt.error
        assert (a.hwtype, a.ptype, a.hwlen, a.plen) == (1, 0x0800, 6, 4)
        assert (a.hwsrc, a.psrc) == (mac_str(MAC), ip_str(IP))
        assert pkt.meta["eth"]["src"] == MAC and pkt.meta["eth"]["ethertype"] == 0x0806
        if s[0] == "reply":
            assert (a.op, a.hwdst, a.pdst) == (2, mac_str(s[1]), ip_str(s[2]))
            assert pkt.meta["eth"]["dst"] == s[1]
        else:
            assert (a.op, a.hwdst, a.pdst) == (1, "00:00:00:00:00:00", ip_str(s[1]))
            assert pkt.meta["eth"]["dst"] == (1 << 48) - 1


def test_width_is_checked():
    raises(ValueError, "width", lambda: ArpTransmitter(32))
