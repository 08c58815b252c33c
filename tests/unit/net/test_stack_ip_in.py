"""The stack's receive tap for IPv4 datagrams (``ip_in``): every IPv4 frame to our MAC address
(or broadcast) hands on ``ip_in`` exactly its Ethernet payload (padding included), in order, with
its Ethernet header in ``meta.eth`` and ``error`` on a damaged one; a beat moves on ``ip_in``
exactly when it moves from the Ethernet receiver into IPv4 receive; and the UDP ports, the
frames the stack answers with and its counters are those of the network model (and of the same
traffic through a stack without ``ip_in``), under random backpressure on ``ip_in`` and the
UDP ports and random idle cycles on ``mac_rx``."""

import gc
import random

import pytest
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from rocegen.gateware.net.stack import STATS, NetStack
from rocegen.sim.models.net.netstack import NetStackModel, normalise
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip, parse_mac
from rocegen.wire.headers import UDP_PORT_ROCEV2
from tests.tiers import full

PORTS = (UDP_PORT_ROCEV2, 17185)
OTHER_MAC, OTHER_IP = "02:00:00:00:00:77", "10.0.0.77"
BROADCAST = "ff:ff:ff:ff:ff:ff"
#: cycles at the start with ``ip_in.ready`` low: the stack's receive side must wait
HOLD = 150
#: the receive FIFO's depth in beats: room for what comes in during the hold and the
#: backpressure after it at every width (a frame it drops would change what every port sees)
RX_FIFO = 512


def udp_frame(rng, dport, *, payload=None, checksum="zero", dst_mac=FPGA_MAC, dst_ip=FPGA_IP):
    """A UDP frame from the host; ``checksum``: "zero", "right" or "wrong"."""
    if payload is None:
        payload = rng.randbytes(rng.choice([12, 40, rng.randrange(1, 300)]))
    pkt = Ether(src=HOST_MAC, dst=dst_mac) / IP(src=HOST_IP, dst=dst_ip, id=rng.getrandbits(16),
                                                flags="DF", ttl=64) / \
        UDP(sport=rng.randrange(0xC000, 0x10000), dport=dport,
            chksum=0 if checksum == "zero" else None) / Raw(payload)
    frame = bytearray(bytes(pkt))
    if checksum == "wrong":
        frame[40] ^= 1 << rng.randrange(8)
    return bytes(frame)


def pad(rng, frame):
    """The frame as the MAC hands it on: padded to 60 bytes (random padding)."""
    return frame + rng.randbytes(max(0, 60 - len(frame)))


def kinds(rng):
    """One frame maker per kind: UDP to both ports (checksums 0, right, wrong; payloads that
    need padding), to a port nobody listens on and to another IPv4 address, ICMP echo
    requests, ARP requests and replies, frames to another MAC, IPv6, IPv4 broadcast frames and
    frames cut short (IPv4 total length beyond the frame)."""
    def cut():
        f = udp_frame(rng, rng.choice(PORTS), payload=rng.randbytes(rng.randrange(40, 200)))
        return f[:rng.randrange(34, len(f) - 1)]

    return [
        lambda: udp_frame(rng, UDP_PORT_ROCEV2, checksum=rng.choice(["zero", "right"])),
        lambda: udp_frame(rng, UDP_PORT_ROCEV2, checksum="wrong"),
        lambda: udp_frame(rng, 17185, checksum=rng.choice(["zero", "right"])),
        lambda: udp_frame(rng, 17185, checksum="wrong"),
        lambda: udp_frame(rng, rng.choice(PORTS), payload=rng.randbytes(rng.randrange(0, 18))),
        lambda: udp_frame(rng, 9999),
        lambda: udp_frame(rng, 17185, dst_ip=OTHER_IP),
        lambda: bytes(Ether(src=HOST_MAC, dst=FPGA_MAC) / IP(src=HOST_IP, dst=FPGA_IP) /
                      ICMP(type=8, id=7, seq=rng.getrandbits(16)) /
                      Raw(rng.randbytes(rng.randrange(0, 120)))),
        lambda: bytes(Ether(src=HOST_MAC, dst=BROADCAST) / ARP(
            op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=rng.choice([FPGA_IP, OTHER_IP]))),
        lambda: bytes(Ether(src=OTHER_MAC, dst=FPGA_MAC) / ARP(
            op=2, hwsrc=OTHER_MAC, psrc=OTHER_IP, hwdst=FPGA_MAC, pdst=FPGA_IP)),
        lambda: udp_frame(rng, rng.choice(PORTS), dst_mac=OTHER_MAC),
        lambda: bytes(Ether(src=HOST_MAC, dst=FPGA_MAC) / IPv6() / UDP(dport=4791) /
                      Raw(rng.randbytes(20))),
        lambda: udp_frame(rng, rng.choice(PORTS), dst_mac=BROADCAST),
        cut,
    ]


def frames_for(rng, n):
    """(frame, FCS bad) pairs, padded to 60 bytes: every kind of :func:`kinds` once with a good
    FCS and once with a bad one, and ``n`` more, UDP to our ports most of them, one in 12 with a
    bad FCS; shuffled."""
    makers = kinds(rng)
    out = [(m(), bad) for m in makers for bad in (False, True)]
    weights = [4, 1, 4, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1]
    out += [(rng.choices(makers, weights)[0](), rng.random() < 1 / 12) for _ in range(n)]
    rng.shuffle(out)
    return [(pad(rng, f), bad) for f, bad in out]


def expected_ip_in(frames):
    """The packets ``ip_in`` must carry: the Ethernet payload of every IPv4 frame to our MAC
    address or broadcast (read from the bytes), its Ethernet header as ``meta.eth``."""
    out = []
    for f, bad in frames:
        if f[12:14] == b"\x08\x00" and f[:6] in (bytes.fromhex(FPGA_MAC.replace(":", "")),
                                                 b"\xff" * 6):
            eth = {"dst": int.from_bytes(f[:6], "big"), "src": int.from_bytes(f[6:12], "big"),
                   "ethertype": 0x0800}
            out.append(Packet(f[14:], {"eth": eth}, bad))
    return out


def model_view(frames):
    """The network model's counters (``rx_frames`` and every other), the datagrams it delivers
    on each port (payload, damaged) and the frames it answers with."""
    model = NetStackModel(FPGA_MAC, FPGA_IP, udp_ports=PORTS, cut_ports=(UDP_PORT_ROCEV2,))
    counts = dict.fromkeys(STATS, 0)
    sent = []
    for f, bad in frames:
        out, moved = model.handle_all(f, fcs_ok=not bad)
        counts["rx_frames"] += 1
        sent += out
        for name in moved:
            counts[name] += 1
    counts["tx_frames"] = len(sent)
    delivered = {p: [(d, dmg) for port, d, dmg in model.delivered if port == p] for p in PORTS}
    return counts, delivered, sent


def by_kind(frames):
    """Frames by EtherType and IPv4 protocol, each kind in its order, normalised (the IPv4
    identification and header checksum zeroed)."""
    out = {}
    for f in frames:
        kind = f[12:14] + (f[23:24] if f[12:14] == b"\x08\x00" else b"")
        out.setdefault(kind, []).append(normalise(f))
    return out


def run(width, frames, *, ip_in, seed):
    """The frames into a stack (``ip_in`` or not): ``ip_in`` and the UDP ports collected with
    random backpressure (``ip_in.ready`` low for the first :data:`HOLD` cycles), the MAC taking
    with random backpressure. Returns the stack's view: ip_in packets, UDP port packets, frames
    sent, counters, and what the taps saw."""
    dut = NetStack(width, PORTS, cut_through_ports=(UDP_PORT_ROCEV2,), ip_in=ip_in,
                   rx_fifo_beats=RX_FIFO)
    drv = StreamDriver(dut.mac_rx, width, idle=0.3, seed=seed)
    udp = [StreamCollector(dut.udp_rx[k], width, backpressure=0.3, seed=seed + 1 + k)
           for k in range(len(PORTS))]
    mac = StreamCollector(dut.mac_tx, width, backpressure=0.3, seed=seed + 3)
    tap = StreamCollector(dut.ip_in, width, backpressure=0.3, seed=seed + 4) if ip_in else None
    seen = {"fork": [], "held": 0, "udp_early": 0, "ip_rx_early": 0}
    counts = {}
    processes = [mac.run, *(c.run for c in udp)]

    if ip_in:
        async def tap_ready(ctx):
            # (the collector's own ready after the hold: ``tap.run`` starts then)
            ctx.set(dut.ip_in.ready, 0)
            await ctx.tick().repeat(HOLD)
            await tap.run(ctx)

        async def fork(ctx):
            # a beat moves on ip_in exactly when it moves from the Ethernet receiver into
            # IPv4 receive; nothing reaches IPv4 receive or a UDP port while ip_in holds
            src, ip_rx = dut.probes()["eth_rx.ipv4"], dut._ip_rx.i
            cycle = 0
            async for _, _, *v in ctx.tick().sample(
                    src.valid, src.ready, dut.ip_in.valid, dut.ip_in.ready, ip_rx.valid,
                    ip_rx.ready, *(dut.udp_rx[k].valid for k in range(len(PORTS)))):
                cycle += 1
                moves = (v[0] and v[1], v[2] and v[3], v[4] and v[5])
                if len(set(moves)) != 1:
                    seen["fork"].append((cycle, moves))
                if cycle <= HOLD:
                    seen["held"] += bool(v[0])
                    seen["ip_rx_early"] += moves[2]
                    seen["udp_early"] += sum(v[6:])

        processes += [tap_ready, fork]

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(FPGA_MAC))
        ctx.set(dut.local_ip, parse_ip(FPGA_IP))
        await drv.send(ctx, [Packet(f, error=bad) for f, bad in frames])
        quiet = 0
        while quiet < 800:
            n = (len(mac.packets), *(len(c.packets) for c in udp),
                 len(tap.packets) if tap else 0)
            await ctx.tick()
            same = n == (len(mac.packets), *(len(c.packets) for c in udp),
                         len(tap.packets) if tap else 0)
            quiet = quiet + 1 if same else 0
        for k, name in enumerate(STATS):
            ctx.set(dut.stats_addr, k)
            await ctx.tick()
            await ctx.tick()
            counts[name] = ctx.get(dut.stats_data)

    run_sim(dut, testbenches=[tb], processes=processes, deadline_cycles=200_000)
    return {"ip_in": tap.packets if tap else None, "udp": [c.packets for c in udp],
            "mac": [p.data for p in mac.packets], "counts": counts, "seen": seen}


def check_ip_in(width, seed, n, *, contrast):
    rng = random.Random(seed)
    frames = frames_for(rng, n)
    want = expected_ip_in(frames)
    model_counts, model_delivered, model_sent = model_view(frames)
    tapped = run(width, frames, ip_in=True, seed=seed)

    # ip_in: every IPv4 frame to us, its Ethernet payload whole (padding included), in order
    got = tapped["ip_in"]
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert (g.data, g.meta, g.error) == (w.data, w.meta, w.error), k
    assert any(w.error for w in want) and any(len(w.data) == 46 for w in want)
    assert any(w.meta["eth"]["dst"] == parse_mac(BROADCAST) for w in want)
    # the fork: beats move on both sides together; the hold held the receive side
    seen = tapped["seen"]
    assert not seen["fork"], seen["fork"][:5]
    assert seen["held"] > 0 and seen["ip_rx_early"] == 0 and seen["udp_early"] == 0
    # the rest of the stack as the network model has it: ports, answers and every counter
    assert tapped["counts"] == model_counts
    for k, port in enumerate(PORTS):
        assert [(p.data, p.error) for p in tapped["udp"][k]] == model_delivered[port]
    assert by_kind(tapped["mac"]) == by_kind(model_sent)
    if contrast:
        # ... and exactly as through a stack without ip_in (metadata and order included)
        plain = run(width, frames, ip_in=False, seed=seed)
        assert tapped["counts"] == plain["counts"]
        assert tapped["mac"] == plain["mac"]
        for k in range(len(PORTS)):
            assert ([(p.data, p.meta, p.error) for p in tapped["udp"][k]] ==
                    [(p.data, p.meta, p.error) for p in plain["udp"][k]])
    assert tapped["counts"]["rx_overflow"] == 0
    assert all(model_delivered[p] for p in PORTS) and model_counts["icmp_echo_reply"] > 0
    assert model_counts["eth_drop_addr"] > 0 and model_counts["ip_truncated"] > 0
    assert any(dmg for _, dmg in model_delivered[UDP_PORT_ROCEV2])


@pytest.mark.parametrize("width, seed, n, contrast", [
    (64, 1, 12, False), full(64, 2, 150, True), (512, 3, 12, False),
    full(512, 4, 150, True)])
def test_ip_in_taps_every_ipv4_frame_to_us(width, seed, n, contrast):
    """A mix of frames with random backpressure on ``ip_in`` and the UDP ports: ``ip_in``
    carries the Ethernet payload of exactly the IPv4 frames to us, and the rest of the stack
    does what the network model says (``contrast``: and exactly what a stack without ``ip_in``
    does with the same traffic)."""
    check_ip_in(width, seed, n, contrast=contrast)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_ip_in_is_a_bool_and_adds_nothing_when_off():
    for bad in (1, 0, "yes", None):
        with pytest.raises(TypeError, match="ip_in must be a bool"):
            NetStack(64, PORTS, ip_in=bad)
    plain, tapped = NetStack(64, PORTS), NetStack(64, PORTS, ip_in=True)
    assert "ip_in" not in plain.signature.members and not hasattr(plain, "ip_in")
    assert "ip_in" in tapped.signature.members and hasattr(tapped, "ip_in")
    assert "ip_in" in tapped.probes() and "ip_in" not in plain.probes()
    assert set(tapped.signature.members) - set(plain.signature.members) == {"ip_in"}
    del plain, tapped
    gc.collect()            # (never elaborated: their warnings here, where they are ignored)
