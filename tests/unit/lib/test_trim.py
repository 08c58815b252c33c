import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, Mux, Signal, UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.lib.trim import Trim
from rocegen.sim.models.lib.trim import trim
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, delivery_watchdog
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.headers import ETH, ETHERTYPE_IPV4, IPV4

META = data.StructLayout({"length": 16, "seq": 16})


def build(width, offset=0, registered=False, bias=0):
    """Trim with ``length`` = ``meta.length + offset`` on the first beat of each packet and a
    free-running junk value on the others, so that the test fails if Trim looks at it later."""
    m = Module()
    m.submodules.dut = dut = Trim(width, META, registered=registered, bias=bias)
    first = Signal(init=1)
    junk = Signal(16, init=0x1234)
    m.d.sync += junk.eq(junk * 75 + 74)
    with m.If(dut.i.valid & dut.i.ready):
        m.d.sync += first.eq(dut.i.payload.last)
    m.d.comb += dut.length.eq(Mux(first, dut.i.payload.meta.length + offset + bias, junk))
    return m, dut


def run_trim(width, packets, *, idle, backpressure, seed, offset=0, registered=False, bias=0):
    m, dut = build(width, offset, registered, bias)
    drv = StreamDriver(dut.i, width, idle=idle, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
    B = width // 8
    deadline = 20 * sum(max(1, -(-len(p.data) // B)) for p in packets) + 200
    shorts, longs, stalls, lonely, discard_stalls = [], [], [], [], []
    sent = [0]

    async def monitor(ctx):
        index = 0
        out_index = 0                  # output packets completed (short/long name the packet)
        beat = 0                       # beats of the current input packet already consumed
        async for _, _, iv, ir, il, ov, orr, ol, short, long in ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.i.payload.last, dut.o.valid, dut.o.ready,
                dut.o.payload.last, dut.short, dut.long):
            if short:
                shorts.append(out_index)
            if long:
                longs.append(out_index)
            if ov and orr and ol:
                out_index += 1
            if iv and not ir:
                stalls.append(index)
                want = packets[index].meta["length"] + offset
                cut = max(0, -(-want // B) - 1)    # the input beat that reaches the length
                # bytes past the cut must drain freely: right behind the cut beat without the
                # input stage; with it, from the third beat behind it (the stage's two entries
                # may still hold the cut beat and the one after it, waiting for ``o.ready``)
                if beat >= cut + (3 if registered else 1) and not il:
                    discard_stalls.append(index)
            if ov and orr and not (iv and ir):
                lonely.append(index)   # an output beat without an input beat: latency > 0
            if iv and ir:
                beat += 1
            if iv and ir and il:
                index += 1
                sent[0] = index
                beat = 0

    async def send(ctx):
        await drv.send(ctx, packets)

    watchdog = delivery_watchdog(col, len(packets), lambda: sent[0], deadline)
    run_sim(m, testbenches=[send, watchdog], processes=[col.run, monitor])
    assert discard_stalls == []
    return col, shorts, longs, stalls, lonely


def make_packets(width, rng):
    """Every packet length from 0 to 2*B+1 plus longer random ones, each with a wanted length
    equal, shorter (by up to two beats, or 0) and longer (by up to two beats); a fifth errored."""
    B = width // 8
    lengths = list(range(0, 2 * B + 2)) + [rng.randrange(2 * B, 6 * B) for _ in range(10)]
    cases = []
    for n in lengths:
        wants = {n, max(0, n - rng.randint(1, 2 * B)), n + rng.randint(1, 2 * B), 0}
        if rng.random() < 0.05:
            wants.add(0xFFFF)
        cases += [(n, w) for w in sorted(wants)]
    rng.shuffle(cases)
    return [Packet(rng.randbytes(n), {"length": w, "seq": s}, error=rng.random() < 0.2)
            for s, (n, w) in enumerate(cases)]


def check(packets, col, shorts, longs):
    results = [trim(p.data, p.meta["length"], p.error) for p in packets]
    assert len(col.packets) == len(packets)
    for n, (p, r, got) in enumerate(zip(packets, results, col.packets, strict=True)):
        assert got == Packet(r.data, p.meta, r.error), f"packet {n}: {len(p.data)} bytes -> {p.meta}"
    assert shorts == [n for n, r in enumerate(results) if r.short]
    assert longs == [n for n, r in enumerate(results) if r.long]


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("width", [64, 512])
def test_trim_matches_model(width, registered):
    """Random idle input and output backpressure: every packet leaves with exactly ``length``
    bytes, or whole with an error when shorter; ``short``/``long`` pulse once for the right
    packets; without the input stage every output beat moves in the same cycle as an input
    beat."""
    rng = random.Random(width)
    packets = make_packets(width, rng)
    col, shorts, longs, _, lonely = run_trim(width, packets, idle=0.3, backpressure=0.3, seed=1,
                                             registered=registered)
    check(packets, col, shorts, longs)
    if not registered:
        assert lonely == []


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("width", [64, 512])
def test_bias(width, registered):
    """``length`` counting 20 bytes more than wanted (as IPv4's total length counts its header):
    the same packets as without the bias."""
    rng = random.Random(width + 9)
    packets = make_packets(width, rng)
    packets = [p for p in packets if p.meta["length"] + 20 < 1 << 16]
    col, shorts, longs, _, _ = run_trim(width, packets, idle=0.3, backpressure=0.3, seed=4,
                                        registered=registered, bias=20)
    check(packets, col, shorts, longs)


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("width", [64, 512])
def test_full_throughput(width, registered):
    """No idle, output always ready: the input is never held off, cut packets included."""
    rng = random.Random(width + 5)
    packets = make_packets(width, rng)
    col, shorts, longs, stalls, lonely = run_trim(width, packets, idle=0.0, backpressure=0.0,
                                                  seed=2, registered=registered)
    check(packets, col, shorts, longs)
    assert stalls == []
    if not registered:
        assert lonely == []


@pytest.mark.parametrize("registered", [False, True])
@pytest.mark.parametrize("width", [64, 512])
def test_ethernet_padding_removal(width, registered):
    """Minimum-size frames carrying small IPv4 packets: ``length`` = 14 + IPv4 total length
    removes the padding, and a frame flagged bad at its end stays flagged after the cut."""
    rng = random.Random(3)
    packets = []
    for s in range(40):
        body = rng.randbytes(rng.randrange(0, 27))
        ip = IPV4.pack(version=4, ihl=5, total_length=20 + len(body), ttl=64, protocol=17,
                       src=rng.getrandbits(32), dst=rng.getrandbits(32)) + body
        frame = ETH.pack(dst=rng.getrandbits(48), src=rng.getrandbits(48),
                         ethertype=ETHERTYPE_IPV4) + ip
        padded = frame + bytes(max(0, 60 - len(frame)))
        total = IPV4.unpack(ip)["total_length"]
        packets.append(Packet(padded, {"length": total, "seq": s}, error=s % 4 == 1))
    col, shorts, longs, _, _ = run_trim(width, packets, idle=0.2, backpressure=0.2, seed=3,
                                        offset=ETH.length, registered=registered)
    assert shorts == []
    for n, (p, got) in enumerate(zip(packets, col.packets, strict=True)):
        assert got.data == p.data[:ETH.length + p.meta["length"]], f"frame {n}"
        assert got.error == p.error, f"frame {n}"
    assert longs == [n for n, p in enumerate(packets) if len(p.data) > ETH.length + p.meta["length"]]
    assert longs                       # some frames were padded


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="width must be one of"):
            Trim(48, META)
        with pytest.raises(TypeError, match="integer number of bits"):
            Trim("64", META)
        with pytest.raises(TypeError, match="registered must be a bool"):
            Trim(64, META, registered=1)
        for bad in (-1, 1 << 15, 2.0, True):
            with pytest.raises(ValueError, match="bias must be a number of bytes"):
                Trim(64, META, bias=bad)
        gc.collect()
