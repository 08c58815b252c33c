"""The stack's transmit path for complete IPv4 datagrams (``ip_out``): frames that leave as
given, among the UDP ports' frames; ``tx_idle``, high exactly while no packet is inside the
UDP / IPv4 / ICRC transmit path (one that ARP gave up on included); a frame handed while it is
high never overtakes a packet sent earlier; and ``arp_peek``."""

import random

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.gateware.net.stack import NetStack
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.stack_drivers import check_udp_frame, introduce_host
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import UDP_PORT_ROCEV2
from tests.tiers import full

PORTS = (7, UDP_PORT_ROCEV2)
#: UDP source port of the datagrams sent through ``udp_tx``, and of those built whole.
SPORT, IP_OUT_SPORT = 0xC0DE, 0xACC0
#: An address no host answers ARP for.
NOBODY = "10.0.0.99"


def ack_datagram(psn, ident):
    """A RoCEv2 ACKNOWLEDGE as a complete 48-byte IPv4 datagram: headers, checksum, ICRC."""
    bth = bytes(BTH(opcode=0x11, pkey=0xFFFF, dqpn=0x11, psn=psn, icrc=0) /
                AETH(syndrome=0x1F, msn=psn))[:-4]          # (scapy's BTH carries the ICRC)
    ip = bytes(IP(src=FPGA_IP, dst=HOST_IP, ttl=64, flags="DF", id=ident) /
               UDP(sport=IP_OUT_SPORT, dport=UDP_PORT_ROCEV2, chksum=0) / Raw(bth + bytes(4)))
    dg = ip[:-4] + icrc_model.icrc(ip[:-4])
    assert len(dg) == 48
    return dg


def plain_datagram(payload, ident):
    """A plain UDP datagram, whole (IPv4 header with its checksum)."""
    return bytes(IP(src=FPGA_IP, dst=HOST_IP, ttl=64, flags="DF", id=ident) /
                 UDP(sport=IP_OUT_SPORT, dport=PORTS[0], chksum=0) / Raw(payload))


def ip_out_packet(dg):
    return Packet(dg, {"eth": {"dst": parse_mac(HOST_MAC), "src": parse_mac(FPGA_MAC),
                               "ethertype": 0x0800}})


def udp_packet(k, payload, dst=HOST_IP):
    return Packet(payload, {"udp": {
        "dst_ip": parse_ip(dst), "src_port": SPORT, "dst_port": PORTS[k],
        "length": len(payload) + 4 * k, "dscp": 0, "ecn": 0, "icrc": k}})


def ip_out_frame(dg):
    """The frame the stack must send for the datagram ``dg`` handed on ``ip_out``."""
    return (bytes(Ether(dst=HOST_MAC, src=FPGA_MAC, type=0x0800)) + dg).ljust(60, b"\0")




def sport(frame):
    return int.from_bytes(frame[34:36], "big")


class IdleMonitor:
    """Counts the packets inside the stack's transmit path before the Ethernet arbiter on its
    own (in: first beats taken on ``udp_tx[k]`` and from the ICMP responder; out: last beats
    taken from the ICRC stage, and IPv4 transmit's drops) and checks that ``tx_idle`` is high
    in a cycle exactly when that count, over the cycles before, is 0."""

    def __init__(self, dut):
        probes = dut.probes()
        self.dut = dut
        self.ins = [dut.udp_tx[k] for k in range(len(dut.udp_ports))] + [probes["icmp.o"]]
        self.out = probes["icrc_tx.o"]
        self.errors = []
        self.busy = 0           # cycles with tx_idle low
        self.most = 0
        self.drops = 0
        self.count = 0

    async def run(self, ctx):
        sigs = []
        for s in self.ins + [self.out]:
            sigs += [s.valid, s.ready, s.payload.last]
        inside = [False] * len(self.ins)
        cycle = 0
        async for _, _, *v in ctx.tick().sample(*sigs, self.dut._ip_tx.drop_unresolved,
                                                 self.dut.tx_idle):
            cycle += 1
            *beats, drop, idle = v
            if idle != (self.count == 0):
                self.errors.append((cycle, self.count, idle))
            self.busy += not idle
            for j in range(len(self.ins)):
                valid, ready, last = beats[3 * j:3 * j + 3]
                if valid and ready:
                    self.count += not inside[j]
                    inside[j] = not last
            valid, ready, last = beats[-3:]
            self.count -= bool(valid and ready and last)
            self.count -= bool(drop)
            self.drops += bool(drop)
            if self.count < 0:
                self.errors.append((cycle, self.count, "negative"))
            self.most = max(self.most, self.count)


@pytest.mark.parametrize("width", [64, full(512)])
def test_ip_out_frames_leave_as_given_among_udp_frames(width):
    """Complete datagrams on ``ip_out`` (RoCEv2 ACKs with their ICRC, short ones the
    Ethernet transmitter pads, long ones) while both UDP ports send, every source with idle
    cycles and the MAC stalling at random: each frame is its Ethernet header and the datagram
    unchanged (no second ICRC), the UDP ports' frames are the model's with their ICRC, none
    lost, each source's frames in order."""
    rng = random.Random(width)
    datagrams = []
    for n in range(12):
        kind = rng.randrange(3)
        if kind == 0:
            datagrams.append(ack_datagram(100 + n, 0x4000 + n))
        elif kind == 1:
            datagrams.append(plain_datagram(rng.randbytes(rng.randrange(0, 18)), 0x4000 + n))
        else:
            datagrams.append(plain_datagram(rng.randbytes(rng.randrange(18, 700)), 0x4000 + n))
    payloads = [[rng.randbytes(rng.choice([1, 30, 64, rng.randrange(1, 800)]))
                 for _ in range(10)],
                [rng.randbytes(rng.choice([12, 16, 64, rng.randrange(3, 200) * 4]))
                 for _ in range(10)]]

    dut = NetStack(width, PORTS, ip_out=True)
    rx = StreamDriver(dut.mac_rx, width)
    udp = [StreamDriver(dut.udp_tx[k], width, idle=0.3, seed=width + k) for k in range(2)]
    ipo = StreamDriver(dut.ip_out, width, idle=0.3, seed=width + 2)
    col = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=width + 3)
    mon = IdleMonitor(dut)
    known = []
    total = 1 + len(datagrams) + sum(map(len, payloads))

    async def tb(ctx):
        await introduce_host(ctx, dut, rx, col)
        known.append(1)
        while len(col.packets) < total:
            await ctx.tick()
        await ctx.tick().repeat(20)

    def source(driver, packets):
        async def run(ctx):
            while not known:
                await ctx.tick()
            await driver.send(ctx, packets)
        return run

    sources = [source(ipo, [ip_out_packet(dg) for dg in datagrams])] + [
        source(udp[k], [udp_packet(k, p) for p in payloads[k]]) for k in range(2)]
    run_sim(dut, testbenches=[tb, *sources], processes=[col.run, mon.run])
    assert not mon.errors, mon.errors[:5]
    assert mon.busy > 0 and mon.drops == 0 and mon.count == 0
    frames = [p.data for p in col.packets[1:]]
    assert len(frames) == total - 1
    assert not any(p.error for p in col.packets)
    whole = [f for f in frames if sport(f) == IP_OUT_SPORT]
    assert whole == [ip_out_frame(dg) for dg in datagrams]
    for frame, dg in zip(whole, datagrams, strict=True):
        eth = Ether(frame)
        assert bytes(eth[IP])[:len(dg)] == dg
        if len(dg) == 48:
            assert icrc_model.check(frame)
            assert BTH(bytes(eth[UDP].payload)).opcode == 0x11
    for k in range(2):
        mine = [f for f in frames if sport(f) == SPORT and int.from_bytes(f[36:38], "big")
                == PORTS[k]]
        assert len(mine) == len(payloads[k])
        for frame, payload in zip(mine, payloads[k], strict=True):
            check_udp_frame(frame, payload, SPORT, PORTS[k], icrc=bool(k))


@pytest.mark.parametrize("width", [64, full(512)])
def test_tx_idle_counts_the_packets_inside_the_transmit_path(width):
    """``tx_idle`` in every cycle against a count kept beside the stack: UDP packets on both
    ports (some to an address ARP never resolves: IPv4 transmit drops them whole, and the
    count comes back), ICMP echo replies; low while a packet is inside, high again at the end."""
    rng = random.Random(width + 7)
    dut = NetStack(width, PORTS, ip_out=True, arp_retry_cycles=16, arp_retries=1)
    rx = StreamDriver(dut.mac_rx, width, idle=0.2, seed=width)
    udp = [StreamDriver(dut.udp_tx[k], width, idle=0.3, seed=width + k) for k in range(2)]
    col = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=width + 3)
    mon = IdleMonitor(dut)
    sends = [[], []]
    for _ in range(16):
        k = rng.randrange(2)
        dst = NOBODY if rng.random() < 0.25 else HOST_IP
        size = rng.choice([1, 60, rng.randrange(1, 300)])
        # (a RoCEv2 payload: a BTH at least, a multiple of 4 bytes)
        sends[k].append((dst, rng.randbytes(max(12, size & ~3) if k else size)))
    pings = [bytes(Ether(src=HOST_MAC, dst=FPGA_MAC) / IP(src=HOST_IP, dst=FPGA_IP) /
                   ICMP(type=8, id=1, seq=n) / Raw(rng.randbytes(rng.randrange(0, 200))))
             for n in range(4)]
    delivered = sum(d == HOST_IP for s in sends for d, _ in s)
    dropped = sum(d == NOBODY for s in sends for d, _ in s)
    known = []

    def ip_frames():
        return [p for p in col.packets if p.data[12:14] == b"\x08\x00"]

    async def tb(ctx):
        await introduce_host(ctx, dut, rx, col)
        known.append(1)
        await rx.send(ctx, [Packet(f) for f in pings])
        while len(ip_frames()) < delivered + len(pings) or mon.drops < dropped:
            await ctx.tick()
        await ctx.tick().repeat(50)
        assert ctx.get(dut.tx_idle)

    def source(k):
        async def run(ctx):
            while not known:
                await ctx.tick()
            await udp[k].send(ctx, [udp_packet(k, p, dst) for dst, p in sends[k]])
        return run

    run_sim(dut, testbenches=[tb, source(0), source(1)], processes=[col.run, mon.run])
    assert not mon.errors, mon.errors[:5]
    assert mon.drops == dropped > 0
    assert mon.count == 0 and mon.busy > 0 and mon.most >= 2
    assert len(ip_frames()) == delivered + len(pings)
    replies = [p.data for p in ip_frames() if p.data[23] == 1]
    assert len(replies) == len(pings)
    for k in range(2):
        mine = [p.data for p in ip_frames() if p.data[23] == 17
                and int.from_bytes(p.data[36:38], "big") == PORTS[k]]
        want = [p for dst, p in sends[k] if dst == HOST_IP]
        assert len(mine) == len(want)
        for frame, payload in zip(mine, want, strict=True):
            check_udp_frame(frame, payload, SPORT, PORTS[k], icrc=bool(k))


@pytest.mark.parametrize("width", [64, full(512)])
@pytest.mark.parametrize("wait", [True, full(False, id="at_once")], ids=["tx_idle", "at_once"])
def test_a_frame_handed_while_tx_idle_is_high_follows_earlier_packets(width, wait):
    """A source that sends a datagram through ``udp_tx`` and then its acknowledgement, built
    whole, on ``ip_out`` (the MAC from ``arp_peek``): handed once ``tx_idle`` is high, each
    acknowledgement leaves after the datagram sent before it (datagrams of either port, of
    random sizes, with idle cycles). The contrast: handed as soon as the datagram has gone in
    (a short RoCEv2 one, in the ICRC stage still), every acknowledgement overtakes it."""
    rng = random.Random(width + 11)
    dut = NetStack(width, PORTS, ip_out=True)
    rx = StreamDriver(dut.mac_rx, width)
    col = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=width + 3)
    mon = IdleMonitor(dut)
    if wait:
        sends = [(rng.randrange(2), rng.randbytes(rng.choice([12, 64, rng.randrange(3, 150) * 4])))
                 for _ in range(8)]
    else:
        sends = [(1, rng.randbytes(12)) for _ in range(8)]
    peek = {}

    async def tb(ctx):
        ctx.set(dut.arp_peek.ip, parse_ip(HOST_IP))
        peek["before"] = ctx.get(dut.arp_peek.hit)
        await introduce_host(ctx, dut, rx, col)
        await ctx.tick().repeat(5)
        mac = peek["after"] = ctx.get(dut.arp_peek.mac) if ctx.get(dut.arp_peek.hit) else None
        for n, (k, payload) in enumerate(sends):
            await StreamDriver(dut.udp_tx[k], width, idle=0.3 if wait else 0, seed=n).send(
                ctx, [udp_packet(k, payload)])
            while wait and not ctx.get(dut.tx_idle):
                await ctx.tick()
            await StreamDriver(dut.ip_out, width).send(ctx, [Packet(
                ack_datagram(n, 0x5000 + n), {"eth": {"dst": mac, "src": parse_mac(FPGA_MAC),
                                                       "ethertype": 0x0800}})])
        while len(col.packets) < 1 + 2 * len(sends):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, mon.run])
    assert not mon.errors, mon.errors[:5]
    assert peek == {"before": 0, "after": parse_mac(HOST_MAC)}
    frames = [p.data for p in col.packets[1:]]
    acks = [n for n, f in enumerate(frames) if sport(f) == IP_OUT_SPORT]
    udps = [n for n, f in enumerate(frames) if sport(f) == SPORT]
    assert len(acks) == len(udps) == len(sends)
    # (the datagrams leave in the order sent: one in flight at a time, or all on one port)
    for n, at in enumerate(acks):
        assert frames[at] == ip_out_frame(ack_datagram(n, 0x5000 + n))
    for at, (k, payload) in zip(udps, sends, strict=True):
        check_udp_frame(frames[at], payload, SPORT, PORTS[k], icrc=bool(k))
    overtaken = [ack < udp for ack, udp in zip(acks, udps, strict=True)]
    assert not any(overtaken) if wait else all(overtaken)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_ip_out_is_a_bool_and_adds_nothing_when_off():
    with pytest.raises(TypeError, match="ip_out must be a bool"):
        NetStack(64, PORTS, ip_out="yes")
    plain, fast = NetStack(64, PORTS), NetStack(64, PORTS, ip_out=True)
    added = {"ip_out", "arp_peek", "tx_idle"}
    assert not added & set(plain.signature.members)
    assert added <= set(fast.signature.members)
    assert "ip_out" in fast.probes() and "ip_out" not in plain.probes()
