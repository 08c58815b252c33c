"""Two write sources through :class:`MemWriteMerge` into a tagged :class:`AxiWriter` and an AXI4
memory with random stalls and response latency: the first source has priority, every word lands,
no burst mixes the sources, and each source's durable count follows the write responses of its
own bursts, cycle by cycle."""

import gc
import random

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module
from amaranth.lib import wiring

from rocegen.gateware.roce.axi_writer import AxiWriter, tagged_write_layout
from rocegen.gateware.roce.mem_merge import MemWriteMerge
from rocegen.sim.models.axi_write_mem import AxiWriteMemory
from rocegen.sim.testing.amaranth_streams import send_records
from rocegen.sim.testing.harness import raises, run_sim


class MergeTop(Elaboratable):
    """The merge feeding a writer built with ``tags=2``, as the payload memory joins them."""

    def __init__(self, width, addr_width, **writer_args):
        self.writer = AxiWriter(width, addr_width=addr_width, tags=2, **writer_args)
        self.merge = MemWriteMerge(width, self.writer.mem_addr_width)

    def elaborate(self, platform):
        m = Module()
        m.submodules.merge, m.submodules.writer = self.merge, self.writer
        w, mg = self.writer, self.merge
        wiring.connect(m, mg.o, w.i)
        m.d.comb += [mg.durable.eq(w.durable), mg.durable_tag.eq(w.durable_tag)]
        return m


def chunked_writes(rng, width, words):
    """Word addresses 0..words-1 cut into runs of random length, each run given to source a or
    b at random (runs of the two sources touch: their words are consecutive across the cut);
    each source writes its runs in order. Returns (writes of a, writes of b, owner per word)."""
    B = width // 8
    owner, out = {}, ([], [])
    addr = 0
    while addr < words:
        n = min(words - addr, rng.choice([1, 2, 3, rng.randrange(4, 40), rng.randrange(40, 200)]))
        src = rng.randrange(2)
        for k in range(addr, addr + n):
            be = (1 << B) - 1 if rng.random() < 0.8 else rng.getrandbits(B)
            out[src].append({"addr": k, "data": rng.getrandbits(width), "be": be})
            owner[k] = src
        addr += n
    # each source visits its runs in a shuffled order of runs, words in a run in order
    for src in (0, 1):
        runs, cur = [], []
        for w in out[src]:
            if cur and w["addr"] != cur[-1]["addr"] + 1:
                runs.append(cur)
                cur = []
            cur.append(w)
        if cur:
            runs.append(cur)
        rng.shuffle(runs)
        out[src][:] = [w for run in runs for w in run]
    return out[0], out[1], owner


def run_merge(width, *, words, idle, stalls, b_latency, seed, max_burst=16):
    rng = random.Random(seed)
    B = width // 8
    a_writes, b_writes, owner = chunked_writes(rng, width, words)
    top = MergeTop(width, 32, max_burst=max_burst)
    mg, wr = top.merge, top.writer
    mem = AxiWriteMemory(width, words * B, aw=wr.aw, w=wr.w, b=wr.b, b_latency=b_latency,
                         aw_stall=stalls, w_stall=stalls, seed=seed + 1)
    seen = {"durable": [], "met": 0, "done": [False, False], "taken": [0, 0]}

    async def watch(ctx):
        cycle = 0
        async for _, _, av, ar, bv, br, ad, bd in ctx.tick().sample(
                mg.a.valid, mg.a.ready, mg.b.valid, mg.b.ready, mg.a_durable, mg.b_durable):
            assert not (ad and bd), "one response counts for one source"
            if ad or bd:
                seen["durable"].append((cycle, 0 if ad else 1, ad or bd))
            if av and bv:
                assert not br, "b went beside a"
                seen["met"] += 1
            seen["taken"][0] += av and ar
            seen["taken"][1] += bv and br
            cycle += 1

    def source(k, port, writes):
        async def tb(ctx):
            await send_records(ctx, port, writes, rng, idle[k])
            seen["done"][k] = True
        return tb

    async def bench(ctx):
        while not all(seen["done"]) or \
                sum(n for _, _, n in seen["durable"]) < len(a_writes) + len(b_writes):
            await ctx.tick()
        await ctx.tick().repeat(10)

    run_sim(top, testbenches=[bench, source(0, mg.a, a_writes), source(1, mg.b, b_writes)],
            processes=[mem.run, watch], deadline_cycles=200_000)
    return a_writes, b_writes, owner, mem, seen


@pytest.mark.parametrize("width, idle, stalls, b_latency", [
    (64, (0.3, 0.3), 0.3, (1, 40)),
    (512, (0.5, 0.1), 0.2, (20, 60)),
    (128, (0.0, 0.0), 0.0, (30, 30)),
])
def test_two_sources_share_the_writer(width, idle, stalls, b_latency):
    B = width // 8
    words = 1200 if width == 64 else 700
    a_writes, b_writes, owner, mem, seen = run_merge(width, words=words, idle=idle, stalls=stalls,
                                                     b_latency=b_latency, seed=width)
    # every word of both sources in memory (each word has one writer)
    image = bytearray(words * B)
    for w in a_writes + b_writes:
        word = w["data"].to_bytes(B, "little")
        for j in range(B):
            if w["be"] >> j & 1:
                image[w["addr"] * B + j] = word[j]
    assert mem.mem == image
    assert mem.acked == image
    # bursts never mix the sources
    for burst in mem.write_bursts:
        srcs = {owner[burst.addr // B + k] for k in range(burst.beats)}
        assert len(srcs) == 1, f"burst at {burst.addr:#x} of {burst.beats} beats mixes sources"
    # each response counts its burst's words for the burst's source, in the next cycle
    expect = [(c + 1, owner[burst.addr // B], burst.beats) for c, burst in mem.responses]
    assert seen["durable"] == expect
    assert seen["taken"] == [len(a_writes), len(b_writes)]
    if idle == (0.0, 0.0):
        assert seen["met"] > 0


def test_line_rate_through_merge():
    # both sources always offering, no stalls: a word enters the writer every cycle; b waits
    # while a offers
    width = 256
    rng = random.Random(3)
    top = MergeTop(width, 32, max_burst=64)
    mg, wr = top.merge, top.writer
    mem = AxiWriteMemory(width, 1 << 16, aw=wr.aw, w=wr.w, b=wr.b, b_latency=(50, 50))
    a = [{"addr": k, "data": rng.getrandbits(width), "be": 0xFFFFFFFF} for k in range(300)]
    b = [{"addr": 1000 + k, "data": rng.getrandbits(width), "be": 0xFFFFFFFF} for k in range(300)]
    taken = []

    async def watch(ctx):
        cycle = 0
        async for _, _, v, r, tag in ctx.tick().sample(mg.o.valid, mg.o.ready, mg.o.payload.tag):
            if v and r:
                taken.append((cycle, int(tag)))
            cycle += 1

    async def src_a(ctx):
        await send_records(ctx, mg.a, a)

    async def src_b(ctx):
        await send_records(ctx, mg.b, b)
        await ctx.tick().repeat(200)

    run_sim(top, testbenches=[src_a, src_b], processes=[mem.run, watch], deadline_cycles=20_000)
    cycles = [c for c, _ in taken]
    assert cycles == list(range(cycles[0], cycles[0] + 600))
    assert [t for _, t in taken] == [0] * 300 + [1] * 300
    assert len(mem.responses) == len(mem.write_bursts)


def test_ports_and_parameters():
    mg = MemWriteMerge(64, 20)
    assert mg.o.payload.shape() == tagged_write_layout(64, 20, 2)
    w = AxiWriter(64, tags=2)
    assert len(w.durable_tag) == 1 and "tag" in w.i.payload.shape().members
    plain = AxiWriter(64)
    assert "durable_tag" not in plain.signature.members
    for dut in (mg, w, plain):
        Fragment.get(dut, None)
    raises(ValueError, "tags must be from 1 to 16, not 17", lambda: AxiWriter(64, tags=17))
    raises(TypeError, "tags must be an integer", lambda: AxiWriter(64, tags="2"))
    raises(ValueError, "addr_width must be 1..32 bits, not 33", lambda: MemWriteMerge(64, 33))
    raises(ValueError, "width", lambda: MemWriteMerge(48, 10))
    gc.collect()
