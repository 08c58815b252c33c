"""Connection manager reply sender: random replies against scapy's UDP checksum and the CM
byte layout, with backpressure, at several widths; its latency and busy signal."""

import random
import struct
from ipaddress import IPv4Address

import pytest
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from rocegen.gateware.roce.cm.cm_defs import REPLY_PORT
from rocegen.gateware.roce.cm.cm_reply import CmReplySender
from rocegen.sim.models.net.checksum import udp_checksum
from rocegen.sim.testing.amaranth_streams import StreamCollector
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.headers import CM


def random_reply(rng):
    return {"fields": CM.unpack(bytes(rng.getrandbits(8) for _ in range(CM.length))),
            "src_ip": rng.getrandbits(32), "dst_ip": rng.getrandbits(32),
            "dst_port": rng.getrandbits(16)}


def scapy_checksum(r, payload):
    p = IP(src=str(IPv4Address(r["src_ip"])), dst=str(IPv4Address(r["dst_ip"]))) / \
        UDP(sport=REPLY_PORT, dport=r["dst_port"]) / Raw(payload)
    return IP(bytes(p))[UDP].chksum


def run(width, replies, *, backpressure, gap, seed):
    dut = CmReplySender(width)
    rng = random.Random(seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed)
    offered = []                            # cycle each reply was offered (StreamCollector's count)
    sums, busy_ok = [], []

    async def tb(ctx):
        cycle = 0
        for r in replies:
            while ctx.get(dut.busy) or rng.random() < gap:
                await ctx.tick()
                cycle += 1
            ctx.set(dut.i.payload, r)
            ctx.set(dut.i.valid, 1)
            offered.append(cycle + 1)
            await ctx.tick()
            cycle += 1
            ctx.set(dut.i.valid, 0)
            busy_ok.append(ctx.get(dut.busy))
        while len(col.packets) < len(replies):
            await ctx.tick()

    async def monitor(ctx):
        async for _, _, v, r, last, ck, sent in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload.last, dut.o_checksum, dut.sent):
            assert sent == (v and r and last)
            if sent:
                sums.append(ck)

    run_sim(dut, testbenches=[tb], processes=[col.run, monitor])
    assert all(busy_ok)
    return col, offered, sums


@pytest.mark.parametrize("width", [64, 128, 512])
def test_replies_and_checksums(width):
    rng = random.Random(width)
    replies = [random_reply(rng) for _ in range(25)]
    # one whose sum is 0xFFFF, so that its checksum (0) is sent as 0xFFFF: its last word
    # (bytes 62, 63) set to the checksum of the rest
    r = random_reply(rng)
    r["fields"]["frequency"] &= ~0xFFFF

    def udp(r):
        return struct.pack(">HHHH", REPLY_PORT, r["dst_port"], 72, 0) + CM.pack(**r["fields"])

    r["fields"]["frequency"] |= udp_checksum(r["src_ip"], r["dst_ip"], udp(r))
    assert udp_checksum(r["src_ip"], r["dst_ip"], udp(r)) == 0xFFFF
    replies.append(r)
    col, _, sums = run(width, replies, backpressure=0.3, gap=0.3, seed=width + 1)
    assert len(col.packets) == len(replies)
    for n, (r, pkt, ck) in enumerate(zip(replies, col.packets, sums)):
        payload = CM.pack(**r["fields"])
        assert pkt.data == payload and not pkt.error, n
        assert pkt.meta["udp"] == {"dst_ip": r["dst_ip"], "src_port": REPLY_PORT,
                                   "dst_port": r["dst_port"], "length": 64, "dscp": 0, "ecn": 0,
                                   "icrc": 0, "checksum": ck}, n
        assert ck == scapy_checksum(r, payload) != 0, n
    assert sums[-1] == 0xFFFF


@pytest.mark.parametrize("width", [64, 512])
def test_latency(width):
    """Without backpressure: first beat 5 cycles after the reply is taken (the checksum's
    adder tree and its fold); busy until the last beat has left."""
    rng = random.Random(5)
    replies = [random_reply(rng) for _ in range(3)]
    col, offered, _ = run(width, replies, backpressure=0, gap=0, seed=2)
    beats = 512 // width
    for t, (first, last) in zip(offered, col.spans):
        assert (first, last) == (t + 5, t + 5 + beats - 1)
    # the next reply is taken as soon as busy is low: the cycle after the last beat
    assert [b - a for a, b in zip([s[1] for s in col.spans], offered[1:])] == [1, 1]


def test_width_is_checked():
    raises(ValueError, "width", lambda: CmReplySender(32))
