"""Two or three write sources through :class:`MemWriteMerge` into a tagged :class:`AxiWriter`
and an AXI4 memory with random stalls and response latency: an earlier source has priority, every
word lands, no burst mixes the sources, and each source's durable count follows the write
responses of its own bursts, cycle by cycle, in the order its words were taken."""

import gc
import random

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module
from amaranth.lib import wiring

from rocegen.gateware.roce.memory.axi_writer import AxiWriter, tagged_write_layout
from rocegen.gateware.roce.memory.mem_merge import MemWriteMerge
from rocegen.sim.models.memory.axi_write_mem import AxiWriteMemory
from rocegen.sim.testing.amaranth_streams import send_records
from rocegen.sim.testing.harness import raises, run_sim


class MergeTop(Elaboratable):
    """The merge feeding a writer built with one tag per source, as the payload memory joins
    them."""

    def __init__(self, width, addr_width, sources=2, **writer_args):
        self.writer = AxiWriter(width, addr_width=addr_width, tags=sources, **writer_args)
        self.merge = MemWriteMerge(width, self.writer.mem_addr_width, sources=sources)

    def elaborate(self, platform):
        m = Module()
        m.submodules.merge, m.submodules.writer = self.merge, self.writer
        w, mg = self.writer, self.merge
        wiring.connect(m, mg.o, w.i)
        m.d.comb += [mg.durable.eq(w.durable), mg.durable_tag.eq(w.durable_tag)]
        return m


def chunked_writes(rng, width, words, sources=2):
    """Word addresses 0..words-1 cut into runs of random length, each run given to one of the
    ``sources`` at random (runs of different sources touch: their words are consecutive across
    the cut); each source writes its runs in a shuffled order, the words of a run in order.
    Returns (the writes of each source, owner per word address)."""
    B = width // 8
    owner, out = {}, tuple([] for _ in range(sources))
    addr = 0
    while addr < words:
        n = min(words - addr, rng.choice([1, 2, 3, rng.randrange(4, 40), rng.randrange(40, 200)]))
        src = rng.randrange(sources)
        for k in range(addr, addr + n):
            be = (1 << B) - 1 if rng.random() < 0.8 else rng.getrandbits(B)
            out[src].append({"addr": k, "data": rng.getrandbits(width), "be": be})
            owner[k] = src
        addr += n
    # each source visits its runs in a shuffled order of runs, words in a run in order
    for src in range(sources):
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
    return out, owner


def run_merge(width, *, words, idle, stalls, b_latency, seed, max_burst=16, sources=2):
    rng = random.Random(seed)
    B = width // 8
    writes, owner = chunked_writes(rng, width, words, sources)
    top = MergeTop(width, 32, sources, max_burst=max_burst)
    mg, wr = top.merge, top.writer
    mem = AxiWriteMemory(width, words * B, aw=wr.aw, w=wr.w, b=wr.b, b_latency=b_latency,
                         aw_stall=stalls, w_stall=stalls, seed=seed + 1)
    seen = {"durable": [], "met": 0, "all_met": 0, "done": [False] * sources,
            "taken": [[] for _ in range(sources)]}
    ports = [mg.source(k) for k in range(sources)]

    async def watch(ctx):
        cycle = 0
        async for _, _, *values in ctx.tick().sample(
                *(p.valid for p in ports), *(p.ready for p in ports), *(p.payload for p in ports),
                *(mg.source_durable(k) for k in range(sources))):
            valid, ready, payload, durable = (values[k * sources:(k + 1) * sources]
                                              for k in range(4))
            counted = [(k, n) for k, n in enumerate(durable) if n]
            assert len(counted) <= 1, "one response counts for one source"
            if counted:
                seen["durable"].append((cycle, *counted[0]))
            for k in range(sources):
                if valid[k] and any(ready[k + 1:]):
                    raise AssertionError(f"a later source went beside source {k}")
                if valid[k] and ready[k]:
                    seen["taken"][k].append(int(payload[k].addr))
            seen["met"] += sum(map(bool, valid)) > 1
            seen["all_met"] += all(valid)
            cycle += 1

    def source(k, port, writes):
        async def tb(ctx):
            await send_records(ctx, port, writes, rng, idle[k])
            seen["done"][k] = True
        return tb

    async def bench(ctx):
        while not all(seen["done"]) or \
                sum(n for _, _, n in seen["durable"]) < sum(map(len, writes)):
            await ctx.tick()
        await ctx.tick().repeat(10)

    run_sim(top, testbenches=[bench, *(source(k, ports[k], writes[k]) for k in range(sources))],
            processes=[mem.run, watch], deadline_cycles=200_000)
    return writes, owner, mem, seen


@pytest.mark.parametrize("width, idle, stalls, b_latency, sources", [
    (64, (0.3, 0.3), 0.3, (1, 40), 2),
    (512, (0.5, 0.1), 0.2, (20, 60), 2),
    (128, (0.0, 0.0), 0.0, (30, 30), 2),
    (64, (0.3, 0.2, 0.1), 0.3, (1, 40), 3),
    (512, (0.1, 0.4, 0.2), 0.2, (20, 60), 3),
    (64, (0.0, 0.0, 0.0), 0.0, (30, 30), 3),
])
def test_sources_share_the_writer(width, idle, stalls, b_latency, sources):
    B = width // 8
    words = 1200 if width == 64 else 700
    writes, owner, mem, seen = run_merge(width, words=words, idle=idle, stalls=stalls,
                                         b_latency=b_latency, seed=width + sources,
                                         sources=sources)
    # every word of every source in memory (each word has one writer)
    image = bytearray(words * B)
    for w in (w for ws in writes for w in ws):
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
    # each source's words were taken as sent, and its durable counts follow that order: the
    # n words counted next are the n it gave next, the words of the burst answered
    assert seen["taken"] == [[w["addr"] for w in ws] for ws in writes]
    done = [0] * sources
    for (_, src, n), (_, burst) in zip(seen["durable"], mem.responses):
        assert seen["taken"][src][done[src]:done[src] + n] == \
            list(range(burst.addr // B, burst.addr // B + n))
        done[src] += n
    assert done == [len(ws) for ws in writes]
    assert seen["met"] > 0
    if not any(idle):
        assert seen["all_met"] > 0


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
    assert set(mg.signature.members) == {"a", "b", "o", "durable", "durable_tag", "a_durable",
                                         "b_durable"}
    three = MemWriteMerge(64, 20, sources=3)
    assert three.o.payload.shape() == tagged_write_layout(64, 20, 3)
    assert {"c", "c_durable"} <= set(three.signature.members) and len(three.durable_tag) == 2
    assert three.source(2) is three.c and three.source_durable(2) is three.c_durable
    w = AxiWriter(64, tags=2)
    assert len(w.durable_tag) == 1 and "tag" in w.i.payload.shape().members
    plain = AxiWriter(64)
    assert "durable_tag" not in plain.signature.members
    for dut in (mg, three, w, plain):
        Fragment.get(dut, None)
    raises(ValueError, "tags must be from 1 to 16, not 17", lambda: AxiWriter(64, tags=17))
    raises(TypeError, "tags must be an integer", lambda: AxiWriter(64, tags="2"))
    raises(ValueError, "addr_width must be 1..32 bits, not 33", lambda: MemWriteMerge(64, 33))
    raises(ValueError, "width", lambda: MemWriteMerge(48, 10))
    raises(ValueError, "sources must be from 2 to 16, not 1", lambda: MemWriteMerge(64, 10, sources=1))
    raises(ValueError, "sources must be from 2 to 16, not 17",
           lambda: MemWriteMerge(64, 10, sources=17))
    raises(TypeError, "sources must be an integer", lambda: MemWriteMerge(64, 10, sources=True))
    gc.collect()
