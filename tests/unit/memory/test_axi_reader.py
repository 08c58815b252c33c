import gc
import random

import pytest
from amaranth.hdl import Module

from rocegen.gateware.lib.axi import BURST_INCR, Axi4Signature
from rocegen.gateware.roce.layouts import WrSource
from rocegen.gateware.roce.memory.axi_reader import AxiPayloadReader
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.testing.amaranth_streams import StreamCollector, send_records
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.payload import edge_lengths, expected_packet, random_desc

MEM_SIZE = 1 << 16






def mem_descs(rng, width, lengths, *, gen_rate=0.4):
    """Descriptors of the given lengths, in memory (anywhere in the 64 KiB, so many cross 4 KiB
    boundaries) or generated."""
    B = width // 8
    descs = []
    for n in lengths:
        if rng.random() < gen_rate:
            descs.append(random_desc(rng, rng.getrandbits(32) & ~(B - 1), n, True))
        else:
            addr = B * rng.randrange((MEM_SIZE - n) // B + 1)
            descs.append(random_desc(rng, addr, n, False))
    return descs


def mem_beats(descs, width):
    B = width // 8
    return sum(-(-d["length"] // B) for d in descs if d["src"] != WrSource.GENERATOR)


class AxiRun:
    """Descriptors into an AxiPayloadReader on an :class:`AxiRam` holding random bytes."""

    def __init__(self, width, descs, *, latency, r_stall=0.0, ar_stall=0.0, idle=0.0,
                 backpressure=0.0, error_ranges=(), seed=0, **params):
        rng = random.Random(seed)
        dut = self.dut = AxiPayloadReader(width, **params)
        self.ram = AxiRam(width, MEM_SIZE, ar=dut.ar, r=dut.r, latency=latency, r_stall=r_stall,
                          ar_stall=ar_stall, error_ranges=error_ranges, seed=seed + 1,
                          mem=bytearray(rng.randbytes(MEM_SIZE)))
        self.memory = bytes(self.ram.mem)
        self.col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 2)
        self.read_errors = 0

        async def monitor(ctx):
            async for _, _, pulse in ctx.tick().sample(dut.read_error):
                self.read_errors += pulse

        async def tb(ctx):
            await send_records(ctx, dut.desc, descs, rng, idle)
            while len(self.col.packets) < len(descs):
                await ctx.tick()
            await ctx.tick().repeat(20)

        # generous: every beat and every burst's latency paid alone, slowed by stalls
        B = width // 8
        beats = sum(max(1, -(-d["length"] // B)) for d in descs)
        deadline = 5000 + 5 * (beats + latency * (beats // min(dut.burst_beats, 8) + len(descs)))
        run_sim(dut, testbenches=[tb], processes=[self.ram.run, self.col.run, monitor],
                deadline_cycles=deadline)
        self.out = self.col.packets


def check(run, descs, width):
    assert len(run.out) == len(descs)
    for n, (got, d) in enumerate(zip(run.out, descs)):
        exp = expected_packet(d, run.memory)
        assert got.meta == exp.meta, f"packet {n}: descriptor"
        assert got.data == exp.data, f"packet {n}: {d['length']} bytes at {d['local_addr']:#x}"
        assert not got.error, f"packet {n}: error"
    bursts = run.ram.bursts
    assert sum(b.beats for b in bursts) == run.ram.beats_read == mem_beats(descs, width)
    assert all(b.beats <= run.dut.burst_beats for b in bursts)
    assert run.read_errors == 0


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("latency", [1, 50, 200])
def test_matches_model(width, latency):
    """Random descriptors, idle cycles on ``desc``, backpressure on ``o``, AR and R stalls."""
    B = width // 8
    rng = random.Random(width * 1000 + latency)
    lengths = edge_lengths(width) + [rng.randrange(0, 1500) for _ in range(8)]
    lengths += [rng.randrange(0, 3 * B) for _ in range(10)]
    rng.shuffle(lengths)
    descs = mem_descs(rng, width, lengths)
    run = AxiRun(width, descs, latency=latency, r_stall=0.3, ar_stall=0.3, idle=0.3,
                 backpressure=0.3, seed=latency, max_burst=16, outstanding_beats=64)
    check(run, descs, width)
    # the bursts went out back to back, several waiting on the slave at once
    assert latency == 1 or run.ram.max_in_flight >= 3
    assert run.ram.max_beats_in_flight <= 64


@pytest.mark.parametrize("width", [64, 512])
def test_4k_boundaries(width):
    """Descriptors around 4 KiB boundaries: bursts split exactly at them (the slave model
    rejects a crossing burst), and at ``max_burst``."""
    B = width // 8
    rng = random.Random(width + 4)
    cases = [(4096 - B, 2 * B), (4096 - 3 * B, 4096), (8192 - 5 * B, 7 * B + 1), (4096, 4096),
             (3 * 4096 - B, 1), (3 * 4096 - B, B + 1), (5 * 4096 + 17 * B, 4096)]
    descs = [random_desc(rng, a, n, False) for a, n in cases]
    run = AxiRun(width, descs, latency=3, r_stall=0.2, backpressure=0.2, seed=11, max_burst=32,
                 outstanding_beats=128)
    check(run, descs, width)
    cap = min(32, 4096 // B)
    expected = []
    for a, n in cases:
        end = a + n
        while a < end:
            beats = min(cap, (4096 - a % 4096) // B, -(-(end - a) // B))
            expected.append((a, beats))
            a += beats * B
    assert [(b.addr, b.beats) for b in run.ram.bursts] == expected


@pytest.mark.parametrize("width", [64, 512])
def test_throughput(width):
    """Read latency 100 cycles, ``o`` always ready, descriptors always offered: one beat per
    cycle after the first one (>= 99 %), generated packets mixed in."""
    B = width // 8
    rng = random.Random(width + 5)
    n = 6000 // (4096 // B)                  # about 6000 beats
    descs = mem_descs(rng, width, [4096] * n + [rng.randrange(1, 4097) for _ in range(4)],
                      gen_rate=0.15)
    run = AxiRun(width, descs, latency=100, seed=12, max_burst=64, outstanding_beats=256)
    check(run, descs, width)
    cycles = run.col.beat_cycles
    beats = len(cycles)
    assert beats >= 5000
    rate = beats / (cycles[-1] - cycles[0] + 1)
    assert rate >= 0.99, f"{rate:.4f} beats per cycle"
    if descs[0]["src"] != WrSource.GENERATOR:
        # AR in cycle 1, R from cycle 101, on ``o`` in cycle 103 (taken at the edge ending it)
        assert cycles[0] == 104


@pytest.mark.parametrize("width", [64, 512])
def test_throughput_short_packets(width):
    """One-beat packets from memory back to back: one burst and one descriptor per cycle."""
    B = width // 8
    rng = random.Random(width + 8)
    descs = mem_descs(rng, width, [rng.randrange(1, B + 1) for _ in range(400)], gen_rate=0.1)
    run = AxiRun(width, descs, latency=8, seed=15)
    check(run, descs, width)
    cycles = run.col.beat_cycles
    assert cycles[-1] - cycles[0] + 1 == len(cycles) == len(descs)


@pytest.mark.parametrize("width", [64, 512])
def test_read_errors(width):
    """Beats answered with SLVERR: exactly the packets that read them leave with ``error`` on
    their last beat (only there), counted in ``read_error``; everything else is intact."""
    B = width // 8
    rng = random.Random(width + 6)
    bad = [(0x2000, 0x2000 + B), (0x5000 + 3 * B, 0x5000 + 4 * B)]
    descs = [random_desc(rng, 0x2000 - 2 * B, 5 * B, False),      # error in the middle
             random_desc(rng, 0x1000, 3 * B, False),
             random_desc(rng, 0x2000, 1, False),                   # error on the only beat
             random_desc(rng, 0x2000, 0, False),                   # reads nothing
             random_desc(rng, 0x2000, 3 * B, True),                # generated: no memory
             random_desc(rng, 0x5000, 4 * B, False),               # error on the last beat
             random_desc(rng, 0x5000, 3 * B, False)]
    descs += mem_descs(rng, width, [rng.randrange(0, 600) for _ in range(10)])
    erred = [d["src"] != WrSource.GENERATOR and any(
        s < d["local_addr"] + d["length"] and d["local_addr"] < e for s, e in bad) for d in descs]
    assert erred[:7] == [True, False, True, False, False, True, False]
    run = AxiRun(width, descs, latency=20, r_stall=0.2, backpressure=0.3, error_ranges=bad,
                 seed=13, max_burst=4, outstanding_beats=16)
    assert [p.error for p in run.out] == erred
    assert run.read_errors == sum(erred)
    for n, (got, d) in enumerate(zip(run.out, descs)):
        if not erred[n]:
            assert got == expected_packet(d, run.memory), f"packet {n}"


@pytest.mark.parametrize("width", [64, 512])
def test_small_queue_many_bursts(width):
    """``outstanding_beats == max_burst``: never more beats requested than the data queue holds,
    still correct under stalls."""
    rng = random.Random(width + 7)
    descs = mem_descs(rng, width, [rng.randrange(0, 700) for _ in range(12)], gen_rate=0.2)
    run = AxiRun(width, descs, latency=7, r_stall=0.4, backpressure=0.5, idle=0.2, seed=14,
                 max_burst=8, outstanding_beats=8, desc_depth=2)
    check(run, descs, width)
    assert run.ram.max_beats_in_flight == 8


def test_axi_ram_model_writes():
    """The slave model's write channels: bursts written with strobes read back."""
    width, B = 128, 16
    bus = Axi4Signature(16, width).create()
    ram = AxiRam.on_bus(bus, width, 1 << 14, latency=4, ar_stall=0.3, r_stall=0.3, seed=3)
    rng = random.Random(3)
    image = bytearray(1 << 14)
    bursts = [(B * rng.randrange(200), rng.randrange(1, 9)) for _ in range(20)]
    bursts = [(a, min(n, (4096 - a % 4096) // B)) for a, n in bursts]
    got = []

    async def tb(ctx):
        ctx.set(bus.b.ready, 1)
        ctx.set(bus.r.ready, 1)
        for addr, beats in bursts:
            a = {"addr": addr, "len": beats - 1, "size": 4, "burst": BURST_INCR}
            ctx.set(bus.aw.payload, a)
            ctx.set(bus.aw.valid, 1)
            await ctx.tick().until(bus.aw.ready)
            ctx.set(bus.aw.valid, 0)
            for k in range(beats):
                data, strb = rng.randbytes(B), rng.getrandbits(B)
                for i in range(B):
                    if strb >> i & 1:
                        image[addr + k * B + i] = data[i]
                ctx.set(bus.w.payload, {"data": int.from_bytes(data, "little"), "strb": strb,
                                        "last": k == beats - 1})
                ctx.set(bus.w.valid, 1)
                await ctx.tick().until(bus.w.ready)
            ctx.set(bus.w.valid, 0)
            await ctx.tick().until(bus.b.valid)
        for addr, beats in bursts:
            ctx.set(bus.ar.payload, {"addr": addr, "len": beats - 1, "size": 4,
                                     "burst": BURST_INCR})
            ctx.set(bus.ar.valid, 1)
            await ctx.tick().until(bus.ar.ready)
            ctx.set(bus.ar.valid, 0)
            for _ in range(beats):
                (r,) = await ctx.tick().sample(bus.r.payload).until(bus.r.valid)
                got.append(int(r.data).to_bytes(B, "little"))

    run_sim(Module(), testbenches=[tb], processes=[ram.run], deadline_cycles=20_000)
    want = [bytes(image[a + k * B:a + (k + 1) * B]) for a, n in bursts for k in range(n)]
    assert got == want
    assert ram.mem == image and len(ram.write_bursts) == len(bursts)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters():
    with pytest.raises(ValueError, match="width must be one of"):
        AxiPayloadReader(32)
    with pytest.raises(TypeError, match="addr_width must be an integer"):
        AxiPayloadReader(64, addr_width="32")
    with pytest.raises(ValueError, match="addr_width must be 12..64"):
        AxiPayloadReader(64, addr_width=11)
    with pytest.raises(ValueError, match="id_width must be 1..16"):
        AxiPayloadReader(64, id_width=0)
    with pytest.raises(ValueError, match=r"max_burst must be a power of two, 1..256, not 512"):
        AxiPayloadReader(64, max_burst=512)
    with pytest.raises(ValueError, match="max_burst must be a power of two"):
        AxiPayloadReader(64, max_burst=48)
    with pytest.raises(TypeError, match="max_burst must be an integer"):
        AxiPayloadReader(64, max_burst=True)
    with pytest.raises(ValueError, match="outstanding_beats must be a power of two"):
        AxiPayloadReader(64, outstanding_beats=100)
    with pytest.raises(ValueError, match=r"outstanding_beats \(32\) must be at least max_burst"):
        AxiPayloadReader(64, max_burst=64, outstanding_beats=32)
    with pytest.raises(ValueError, match="desc_depth must be a power of two"):
        AxiPayloadReader(64, desc_depth=1)
    assert AxiPayloadReader(512, max_burst=256).burst_beats == 64
    assert AxiPayloadReader(64, max_burst=256).burst_beats == 256
    gc.collect()
