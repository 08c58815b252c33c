import gc
import random

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from rocegen.gateware.roce.layouts import WrSource
from rocegen.gateware.roce.memory.payload_ram import PayloadRam
from rocegen.gateware.roce.memory.payload_reader import PayloadReader
from rocegen.sim.testing.amaranth_streams import OfferMonitor, StreamCollector, send_records
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.payload import edge_lengths, expected_packet, random_desc
from rocegen.wire.pattern import generator_address

WIDTHS = [64, 128, 256, 512]





def random_descs(rng, width, lengths, *, gen_rate=0.4):
    B = width // 8
    descs = []
    for n in lengths:
        generator = rng.random() < gen_rate
        if generator and rng.random() < 0.5:
            addr = generator_address(rng.getrandbits(8)) + B * rng.randrange(1 << 12)
        else:
            addr = rng.getrandbits(32) & ~(B - 1)
        descs.append(random_desc(rng, addr, n, generator))
    return descs



def read_words(desc, width, addr_width):
    """Word addresses the reader must read for ``desc``, in order."""
    B = width // 8
    if desc["src"] == WrSource.GENERATOR or desc["length"] == 0:
        return []
    first = desc["local_addr"] // B
    return [(first + k) % (1 << addr_width) for k in range(-(-desc["length"] // B))]


class ReaderRun:
    """Descriptors into a PayloadReader whose memory is a Python array answering one cycle after
    ``en`` (and random data in every other cycle, so nothing may rely on the port holding)."""

    def __init__(self, width, descs, *, addr_width=None, idle=0.0, backpressure=0.0, seed=0):
        B = width // 8
        addr_width = addr_width or 16 - (B.bit_length() - 1)       # 64 KiB
        rng = random.Random(seed)
        self.memory = rng.randbytes(B << addr_width)
        dut = PayloadReader(width, addr_width)
        self.col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
        self.offers = OfferMonitor(dut.o)
        self.reads = []
        self.desc_cycles = []
        mem_rng = random.Random(seed + 2)

        async def memory(ctx):
            async for _, _, en, addr in ctx.tick().sample(dut.mem.en, dut.mem.addr):
                if en:
                    self.reads.append(addr)
                    word = self.memory[addr * B:(addr + 1) * B]
                    ctx.set(dut.mem.data, int.from_bytes(word, "little"))
                else:
                    ctx.set(dut.mem.data, mem_rng.getrandbits(width))

        async def tb(ctx):
            await send_records(ctx, dut.desc, descs, rng, idle)
            while len(self.col.packets) < len(descs):
                await ctx.tick()
            await ctx.tick().repeat(10)

        run_sim(dut, testbenches=[tb], processes=[memory, self.col.run, self.offers.run],
                deadline_cycles=200_000)
        self.out = self.col.packets


@pytest.mark.parametrize("width", WIDTHS)
def test_matches_model(width):
    rng = random.Random(width)
    B = width // 8
    lengths = edge_lengths(width) * 2 + [rng.randrange(0, 700) for _ in range(20)]
    lengths += [rng.randrange(0, 4 * B) for _ in range(10)]
    rng.shuffle(lengths)
    descs = random_descs(rng, width, lengths)
    run = ReaderRun(width, descs, idle=0.3, backpressure=0.3, seed=width)
    expected = [expected_packet(d, run.memory) for d in descs]
    assert len(run.out) == len(expected)
    for n, (got, exp) in enumerate(zip(run.out, expected)):
        assert got == exp, f"packet {n} ({descs[n]['length']} bytes, {descs[n]['src']})"
    # every word read once, in order, and nothing else
    aw = 16 - (B.bit_length() - 1)
    assert run.reads == [a for d in descs for a in read_words(d, width, aw)]
    assert any(d["src"] == WrSource.GENERATOR and d["length"] > B for d in descs)
    # a beat offered and not taken stays offered, and a packet never pauses inside while the
    # output takes beats (a steady source for the transmit path), before and after stalls
    assert run.offers.held > 20
    assert run.col.starved == 0


@pytest.mark.parametrize("width", [64, 512])
def test_address_wraps_in_memory(width):
    """A small memory: word addresses wrap at its end."""
    B = width // 8
    rng = random.Random(7)
    descs = [random_desc(rng, (60 - k) * B, n, False) for k, n in enumerate([10 * B, 3 * B + 1])]
    run = ReaderRun(width, descs, addr_width=6, backpressure=0.2, seed=3)
    assert run.out == [expected_packet(d, run.memory) for d in descs]
    assert run.reads == [a for d in descs for a in read_words(d, width, 6)]


@pytest.mark.parametrize("width", [64, 512])
def test_throughput(width):
    """Descriptors always offered, ``o`` always ready: one beat per cycle, no idle beat between
    packets, first beat two cycles after the first descriptor is taken."""
    B = width // 8
    rng = random.Random(width + 1)
    lengths = [rng.choice([0, 1, B, B + 1, 3 * B, rng.randrange(1, 300)]) for _ in range(60)]
    descs = random_descs(rng, width, lengths, gen_rate=0.5)
    run = ReaderRun(width, descs, seed=5)
    assert run.out == [expected_packet(d, run.memory) for d in descs]
    beats = sum(max(1, -(-n // B)) for n in lengths)
    cycles = run.col.beat_cycles
    assert len(cycles) == beats
    assert cycles[-1] - cycles[0] == beats - 1, "idle beats on the output"
    # the descriptor taken at the edge of cycle 0 (counting from 0), its word read in cycle 1
    # and back in cycle 2, offered beside the empty queue in that cycle, taken at its edge
    assert cycles[0] == 3


class RamAndReader(Elaboratable):
    def __init__(self, width, size):
        self.ram = PayloadRam(width, size)
        self.reader = PayloadReader(width, self.ram.addr_width)

    def elaborate(self, platform):
        m = Module()
        m.submodules.ram = self.ram
        m.submodules.reader = self.reader
        wiring.connect(m, self.reader.mem, self.ram.rd)
        return m


@pytest.mark.parametrize("width", [64, 512])
def test_with_payload_ram(width):
    """The reader on a PayloadRam written through its write port."""
    B = width // 8
    size = 64 * B
    rng = random.Random(width + 2)
    image = rng.randbytes(size)
    dut = RamAndReader(width, size)
    descs = [random_desc(rng, B * rng.randrange(64), rng.choice([0, 1, B, 5 * B - 3, 20 * B]),
                         rng.random() < 0.3) for _ in range(12)]
    col = StreamCollector(dut.reader.o, width, backpressure=0.3, seed=9)
    wr = dut.ram.wr

    async def tb(ctx):
        for k in range(size // B):
            ctx.set(wr.payload, {"addr": k, "data": int.from_bytes(image[k * B:(k + 1) * B],
                                                                   "little"), "be": (1 << B) - 1})
            ctx.set(wr.valid, 1)
            await ctx.tick()
        ctx.set(wr.valid, 0)
        await send_records(ctx, dut.reader.desc, descs, rng, 0.2)
        while len(col.packets) < len(descs):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run], deadline_cycles=20_000)
    assert col.packets == [expected_packet(d, image) for d in descs]


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters():
    with pytest.raises(ValueError, match="width must be one of"):
        PayloadReader(96, 10)
    with pytest.raises(TypeError, match="addr_width must be an integer"):
        PayloadReader(64, 10.0)
    with pytest.raises(ValueError, match="addr_width must be 1..32"):
        PayloadReader(64, 0)
    with pytest.raises(ValueError, match="addr_width must be 1..32"):
        PayloadReader(64, 33)
    gc.collect()        # the half-built components warn when collected: inside this test
