"""The receive path without store-and-forward where nothing needs it: the receive FIFO passes
frames before their FCS verdict, and a cut-through UDP port takes its datagrams before their
last beat is in; a damaged one reaches the port marked ``error`` on its last beat, and so does
one whose checksum is wrong (the last beat of one with a checksum waits for the verdict).
Datagrams for the other ports are still stored and verified; with every port cut-through there
is no store, and a datagram for no port is counted as the store would have counted it.
Everything against the reference model (``NetStackModel(cut_ports=...)``), under random idle
cycles and backpressure."""

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.gateware.net.stack import STATS, NetStack
from rocegen.gateware.net.udp_rx import UdpRx
from rocegen.sim.models.net.netstack import NetStackModel
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import (
    HandshakeMonitor,
    OfferMonitor,
    StreamCollector,
    StreamDriver,
)
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.stack_drivers import udp_echo
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import IPV4

WIDTHS = [64, 512]
ECHO, CUT = 7, 4791


def datagram(payload, *, checksum, dport=CUT, total_extra=0, length_extra=0):
    """A host's datagram to the endpoint; ``checksum``: 0, "good" or "bad"; ``total_extra``:
    bytes the IPv4 total length claims beyond the frame (a truncated packet); ``length_extra``:
    bytes the UDP length claims beyond the datagram."""
    udp = UDP(sport=49152, dport=dport, chksum=0 if checksum == 0 else None)
    if length_extra:
        udp.len = 8 + len(payload) + length_extra
    pkt = IP(src=HOST_IP, dst=FPGA_IP, flags="DF") / udp / Raw(payload)
    raw = bytearray(bytes(pkt))
    if checksum == "bad":
        raw[26] ^= 0x01                   # UDP checksum (IPv4 header 20 + 6), not 0 after it
        assert raw[26:28] != b"\0\0"
    if total_extra:
        ip = IP(bytes(raw))
        ip.len += total_extra
        del ip.chksum
        raw = bytearray(bytes(ip))[:len(raw)]
    return _frame(raw)


def _frame(ip):
    return bytes(Ether(src=HOST_MAC, dst=FPGA_MAC, type=0x0800) / Raw(bytes(ip))).ljust(60, b"\0")


def runt():
    """An IPv4 packet of protocol UDP with 4 bytes of payload: shorter than a UDP header."""
    return _frame(IP(src=HOST_IP, dst=FPGA_IP, proto=17) / Raw(b"\x12\x34\x56\x78"))


def mix(rng, B):
    """(frame, fcs_ok) of every kind, in random order."""
    sizes = [0, 1, B - 8, B, 3 * B + 5, 200, 700]
    out = []
    for n in sizes:
        p = rng.randbytes(n)
        out += [(datagram(p, checksum=0), True), (datagram(p, checksum=0), False),
                (datagram(p, checksum="good"), True), (datagram(p, checksum="bad"), True),
                (datagram(p, checksum="good"), False),
                # stored ones (the echo's port) between them: damaged, a wrong checksum
                (datagram(p, checksum="good", dport=ECHO), False),
                (datagram(p, checksum="bad", dport=ECHO), True)]
    out += [(datagram(rng.randbytes(40), checksum=0, total_extra=30), True),
            (datagram(rng.randbytes(40), checksum="good", total_extra=30), True),
            (datagram(rng.randbytes(40), checksum=0, dport=ECHO), False),
            (datagram(rng.randbytes(40), checksum=0, length_extra=4), True),
            (runt(), True), (runt(), False)]
    # for no port: clean, damaged, a wrong checksum, a wrong length, both
    for dport in (999, 5000):
        p = rng.randbytes(3 * B)
        out += [(datagram(p, checksum=0, dport=dport), True),
                (datagram(p, checksum="good", dport=dport), False),
                (datagram(p, checksum="bad", dport=dport), True),
                (datagram(p, checksum=0, dport=dport, length_extra=4), True),
                (datagram(p, checksum="bad", dport=dport, length_extra=4), True)]
    rng.shuffle(out)
    return out


# (256 bits too: UDP receive passes a one-beat datagram on in its cycle from 256 bits, the
# layers in front of it only from 512)
@pytest.mark.parametrize("width", [64, 256, 512])
@pytest.mark.parametrize("every", [False, True], ids=["stored-echo", "no-store"])
def test_cut_through_port_against_model(width, every):
    """The mix through the stack, one cut-through port beside a stored one (the echo's), or
    both ports cut-through (no store)."""
    rng = random.Random(width + 77)
    frames = mix(rng, width // 8)
    cut = (ECHO, CUT) if every else (CUT,)
    model = NetStackModel(FPGA_MAC, FPGA_IP, echo_port=ECHO, udp_ports=(CUT,), cut_ports=cut)
    counts = {"rx_frames": len(frames)}
    for f, ok in frames:
        out, moved = model.handle_all(f, fcs_ok=ok)
        assert out == []
        for name in moved:
            counts[name] = counts.get(name, 0) + 1
    expected = {port: [Packet(p, error=d) for q, p, d in model.delivered if q == port]
                for port in (ECHO, CUT)}
    # the mix exercises every path: delivered clean and marked (for a wrong checksum or
    # damaged), each drop of the stack, and (stored or not) each of the echo's port
    assert sum(not p.error for p in expected[CUT]) >= 14 and sum(p.error for p in
                                                                  expected[CUT]) >= 14
    assert (len(expected[ECHO]) >= 14) == every
    for name, least in (("udp_runt", 1), ("udp_drop_length", 3), ("udp_drop_port", 2),
                        ("ip_truncated", 2)):
        assert counts[name] >= least, name
    assert counts["udp_drop_checksum"] >= 16 and counts["udp_drop_error"] >= 3

    dut = NetStack(width, (ECHO, CUT), arp_retry_cycles=500, cut_through_ports=cut)
    # (without a store the receive FIFO is the only buffer: the frames come more slowly than
    # the ports take them on average, so that it never overflows, which the model would not
    # know; the stats below include ``rx_overflow``)
    idle, backpressure = (0.5, 0.3) if every else (0.2, 0.4)
    drv = StreamDriver(dut.mac_rx, width, idle=idle, seed=width)
    cols = [StreamCollector(dut.udp_rx[k], width, backpressure=backpressure, seed=width + 1 + k)
            for k in range(2)]
    stats = {}

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        await drv.send(ctx, [Packet(f, error=not ok) for f, ok in frames])
        quiet = 0
        while quiet < 300:
            n = sum(len(c.packets) for c in cols)
            await ctx.tick()
            quiet = quiet + 1 if sum(len(c.packets) for c in cols) == n else 0
        for k, name in enumerate(STATS):
            ctx.set(dut.stats_addr, k)
            await ctx.tick().repeat(2)
            stats[name] = ctx.get(dut.stats_data)

    # the echo's port: collected when it is cut-through, echoed when stored
    processes = [cols[1].run, cols[0].run if every else udp_echo(dut)]
    run_sim(dut, testbenches=[tb], processes=processes, deadline_cycles=80_000)
    for k, port in enumerate((ECHO, CUT)):
        got = [Packet(p.data, error=p.error) for p in cols[k].packets]
        assert got == expected[port], port
    assert stats == {name: counts.get(name, 0) for name in STATS}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("every", [False, True], ids=["stored-echo", "no-store"])
def test_a_datagram_leaves_before_its_end(width, every):
    """With no idle and no backpressure, a 1400-byte datagram for the cut-through port starts
    leaving it before its frame's last beat has entered, with checksum 0, a right checksum or a
    wrong one; the last beat of one with a checksum leaves later than with checksum 0 (it waits
    for the verdict), and with a wrong one it is marked ``error``. So with a store for the
    other port and without one."""
    payload = random.Random(1).randbytes(1400)
    firsts, lasts = {}, {}
    cut = (ECHO, CUT) if every else (CUT,)
    for checksum in (0, "good", "bad"):
        dut = NetStack(width, (ECHO, CUT), arp_retry_cycles=500, cut_through_ports=cut)
        drv = StreamDriver(dut.mac_rx, width)
        col = StreamCollector(dut.udp_rx[1], width)
        mon = HandshakeMonitor(dut.mac_rx)

        async def tb(ctx, dut=dut, drv=drv, col=col, checksum=checksum):
            ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
            ctx.set(dut.local_ip, parse_ip(FPGA_IP))
            await drv.send(ctx, [Packet(datagram(payload, checksum=checksum))])
            while not col.packets:
                await ctx.tick()

        run_sim(dut, testbenches=[tb], processes=[col.run, mon.run], deadline_cycles=5_000)
        assert col.packets[0].data == payload
        assert col.packets[0].error == (checksum == "bad")
        firsts[checksum] = col.beat_cycles[0] - mon.cycles[-1]
        lasts[checksum] = col.beat_cycles[-1] - mon.cycles[-1]
    assert max(firsts.values()) < 0, firsts
    assert lasts[0] < lasts["good"] == lasts["bad"], lasts


def _firsts(stream):
    """A process that records the cycle of every packet's first beat moved on ``stream``
    (counted like :class:`HandshakeMonitor` counts), and the list it fills."""
    firsts = []

    async def run(ctx):
        cycle, first = 0, True
        async for _, _, v, r, last in ctx.tick().sample(stream.valid, stream.ready,
                                                          stream.payload.last):
            cycle += 1
            if v and r:
                if first:
                    firsts.append(cycle)
                first = bool(last)
    return run, firsts


@pytest.mark.parametrize("width", WIDTHS)
def test_a_cut_through_datagram_passes_beside_an_empty_store(width):
    """A datagram for the cut-through port that finds the UDP store empty leaves
    ``UdpRx.CUT_LATENCY`` cycles after its first beat came into UDP receive (it passes beside
    the store); one that comes right behind a stored datagram (for the echo's port) waits in
    the store behind it and leaves after it, later. All three arrive whole and in order (the
    lone one with the port ready, the two after it under backpressure at the ports)."""
    rng = random.Random(width + 5)
    lone, stored, behind = rng.randbytes(100), rng.randbytes(700), rng.randbytes(100)
    dut = NetStack(width, (ECHO, CUT), arp_retry_cycles=500, cut_through_ports=(CUT,))
    drv = StreamDriver(dut.mac_rx, width)
    col = StreamCollector(dut.udp_rx[1], width, seed=width)
    probes = dut.probes()
    run_in, ins = _firsts(probes["ip_rx.udp"])
    run_out, outs = _firsts(probes["udp_rx.o1"])
    run_echo, echoed = _firsts(probes["udp_rx.o0"])

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        await drv.send(ctx, [Packet(datagram(lone, checksum="good"))])
        while not col.packets:
            await ctx.tick()
        col.backpressure = 0.3
        await drv.send(ctx, [Packet(datagram(stored, checksum="good", dport=ECHO)),
                             Packet(datagram(behind, checksum=0))])
        while len(col.packets) < 2:
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, run_in, run_out, run_echo,
                                              udp_echo(dut)], deadline_cycles=5_000)
    assert [p.data for p in col.packets] == [lone, behind]
    assert not any(p.error for p in col.packets)
    assert outs[0] - ins[0] == UdpRx.CUT_LATENCY
    assert len(echoed) == 1 and outs[1] > echoed[0]
    assert outs[1] - ins[2] > UdpRx.CUT_LATENCY


@pytest.mark.parametrize("width", WIDTHS)
def test_without_a_store_nothing_waits_for_a_dropped_datagram(width):
    """With every port cut-through (no store), a datagram's first beat leaves
    ``UdpRx.NO_STORE_LATENCY`` cycles after it came into UDP receive, also right behind a
    datagram for no port whose checksum is still being verified (that one is dropped without
    waiting for its verdict, and counted once the verdict is in), and behind one with a wrong
    checksum."""
    rng = random.Random(width + 9)
    first, second = rng.randbytes(100), rng.randbytes(100)
    dut = NetStack(width, (ECHO, CUT), arp_retry_cycles=500, cut_through_ports=(ECHO, CUT))
    drv = StreamDriver(dut.mac_rx, width)
    col = StreamCollector(dut.udp_rx[1], width)
    probes = dut.probes()
    run_in, ins = _firsts(probes["ip_rx.udp"])
    run_out, outs = _firsts(probes["udp_rx.o1"])
    stats = {}

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        await drv.send(ctx, [Packet(datagram(first, checksum=0)),
                             Packet(datagram(rng.randbytes(100), checksum="good", dport=999)),
                             Packet(datagram(second, checksum=0)),
                             Packet(datagram(rng.randbytes(100), checksum="bad", dport=999)),
                             Packet(datagram(first, checksum=0))])
        while len(col.packets) < 3:
            await ctx.tick()
        await ctx.tick().repeat(20)
        for k, name in enumerate(STATS):
            ctx.set(dut.stats_addr, k)
            await ctx.tick().repeat(2)
            stats[name] = ctx.get(dut.stats_data)

    run_sim(dut, testbenches=[tb], processes=[col.run, run_in, run_out],
            deadline_cycles=5_000)
    assert [p.data for p in col.packets] == [first, second, first]
    assert not any(p.error for p in col.packets)
    assert len(ins) == 5
    assert [o - i for o, i in zip(outs, ins[0::2], strict=True)] == [UdpRx.NO_STORE_LATENCY] * 3
    assert stats["udp_drop_port"] == 1 and stats["udp_drop_checksum"] == 1



@pytest.mark.parametrize("width", WIDTHS)
def test_without_a_store_a_flood_with_checksums_is_never_held(width):
    """With every port cut-through (no store), a flood of short datagrams with a checksum, back
    to back on UDP receive's input, passes without the input ever being held: while one's last
    beat waits at the dispatch for its verdict, the ones behind it come in and are summed, so
    the verdicts keep pace. Every datagram arrives in order, those with a wrong checksum among
    them marked ``error`` and counted."""
    rng = random.Random(width + 11)
    dut = UdpRx(width, (ECHO, CUT), cut_ports=(ECHO, CUT))
    cols = [StreamCollector(o, width) for o in dut.o]
    into = OfferMonitor(dut.i)
    sent = []
    for _ in range(48):
        wrong = rng.random() < 0.2
        dport = rng.choice((ECHO, CUT))
        ip = IP(bytes(IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=5000, dport=dport)
                      / Raw(rng.randbytes(rng.choice([1, 16, 24, 40])))))
        udp = bytearray(bytes(ip[UDP]))
        if wrong:
            udp[6] ^= 0x01
        meta = {"eth": {}, "ipv4": IPV4.unpack(bytes(ip)[:IPV4.length])}
        sent.append((dport, Packet(bytes(udp), meta=meta), wrong))
    drops = []

    async def tb(ctx):
        await StreamDriver(dut.i, width).send(ctx, [p for _, p, _ in sent])
        while sum(len(c.packets) for c in cols) < len(sent):
            await ctx.tick()

    async def count(ctx):
        async for _, _, strobe in ctx.tick().sample(dut.drop_checksum):
            drops.append(strobe)

    run_sim(dut, testbenches=[tb], processes=[*(c.run for c in cols), into.run, count],
            deadline_cycles=5_000)
    for k, port in enumerate((ECHO, CUT)):
        want = [(p.data[8:], bad) for q, p, bad in sent if q == port]
        assert [(p.data, p.error) for p in cols[k].packets] == want
    assert sum(drops) == sum(bad for _, _, bad in sent) > 0
    assert into.held == 0
