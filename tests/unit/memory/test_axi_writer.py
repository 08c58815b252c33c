"""AXI4 write master: bursts of consecutive words (never crossing 4 KiB, at most max_burst beats),
data and strobes written right, write responses counted as durable words in order, under random
AW/W/B stalls and response latency."""

import gc
import random

import pytest

from rocegen.gateware.lib.axi import BURST_INCR
from rocegen.gateware.roce.memory.axi_writer import AxiWriter
from rocegen.sim.testing.harness import run_sim


class AxiWriteSlave:
    """A write-only AXI4 slave over a sparse byte memory. ``aw_stall``/``w_stall``: chance that
    ``awready``/``wready`` is low in a cycle; ``b_latency``: (min, max) cycles from a burst's last
    W beat to its response; ``w_after_aw``: W beats are taken only for bursts whose AW was taken.
    Checks the master's side of the protocol and records every burst and every response."""

    def __init__(self, dut, width, *, max_burst, aw_stall=0.0, w_stall=0.0, b_latency=(1, 1),
                 w_after_aw=False, error_every=0, seed=0):
        self.dut, self.lanes = dut, width // 8
        self.max_burst = max_burst
        self.aw_stall, self.w_stall, self.b_latency = aw_stall, w_stall, b_latency
        self.w_after_aw = w_after_aw
        self.error_every = error_every
        self.rng = random.Random(seed)
        self.mem = {}
        self.bursts = []            # (addr, beats)
        self.responses = []         # (cycle, beats, resp)

    async def run(self, ctx):
        dut, lanes = self.dut, self.lanes
        aws = []                    # accepted bursts: [addr, beats]
        beats = []                  # accepted W beats not yet matched to a burst
        pending_b = []              # [due cycle, beats, resp]
        written = 0                 # W beats consumed by bursts
        aw_held = None
        cycle = 0
        while True:
            aw_ready = not (self.aw_stall and self.rng.random() < self.aw_stall)
            w_ready = not (self.w_stall and self.rng.random() < self.w_stall)
            if self.w_after_aw:
                w_ready = w_ready and written + len(beats) < sum(b for _, b in self.bursts)
            ctx.set(dut.aw.ready, aw_ready)
            ctx.set(dut.w.ready, w_ready)
            b = pending_b[0] if pending_b and pending_b[0][0] <= cycle else None
            ctx.set(dut.b.valid, b is not None)
            if b is not None:
                ctx.set(dut.b.payload, {"id": 0, "resp": b[2]})
            _, _, aw_v, aw_p, w_v, w_p, b_ready = await ctx.tick().sample(
                dut.aw.valid, dut.aw.payload, dut.w.valid, dut.w.payload, dut.b.ready)
            if aw_v:
                value = aw_p.as_value().value
                assert aw_held is None or aw_held == value, "AW payload changed while waiting"
                aw_held = value
                if aw_ready:
                    addr, n = int(aw_p.addr), int(aw_p.len) + 1
                    assert int(aw_p.burst) == BURST_INCR and int(aw_p.size) == lanes.bit_length() - 1
                    assert int(aw_p.id) == 0
                    assert addr % lanes == 0
                    assert n <= self.max_burst, f"burst of {n} beats"
                    assert addr // 4096 == (addr + n * lanes - 1) // 4096, \
                        f"burst at {addr:#x} of {n} beats crosses 4 KiB"
                    self.bursts.append((addr, n))
                    aws.append([addr, n])
                    aw_held = None
            else:
                assert aw_held is None, "AW valid dropped before its handshake"
            if w_v and w_ready:
                beats.append((int(w_p.data), int(w_p.strb), int(w_p.last)))
            # match W beats to bursts in order
            while aws and len(beats) >= aws[0][1]:
                addr, n = aws.pop(0)
                for k in range(n):
                    data, strb, last = beats.pop(0)
                    assert last == (k == n - 1), f"WLAST on beat {k} of a {n}-beat burst"
                    word = data.to_bytes(lanes, "little")
                    for j in range(lanes):
                        if strb >> j & 1:
                            self.mem[addr + k * lanes + j] = word[j]
                written += n
                resp = 2 if self.error_every and len(self.responses) % self.error_every == 1 else 0
                due = cycle + self.rng.randint(*self.b_latency)
                if pending_b:
                    due = max(due, pending_b[-1][0])
                pending_b.append([due, n, resp])
            if b is not None:
                assert b_ready, "bready must stay high"
                pending_b.pop(0)
                self.responses.append((cycle, b[1], b[2]))
            cycle += 1


def make_writes(rng, width, count):
    """Word writes in runs of consecutive addresses (crossing 4 KiB pages), some jumps back over
    earlier words, random partial strobes."""
    lanes = width // 8
    words_per_page = 4096 // lanes
    writes = []
    addr = rng.randrange(4 * words_per_page)
    while len(writes) < count:
        run = rng.choice([1, 2, rng.randrange(1, 40), rng.randrange(40, 300)])
        if rng.random() < 0.3:
            addr = words_per_page * rng.randrange(1, 8) - rng.randrange(0, 4)     # near a page end
        elif rng.random() < 0.5:
            addr = rng.randrange(8 * words_per_page)
        for _ in range(run):
            be = (1 << lanes) - 1 if rng.random() < 0.8 else rng.getrandbits(lanes)
            writes.append((addr, rng.getrandbits(width), be))
            addr += 1
    return writes[:count]


def expected_memory(writes, lanes):
    mem = {}
    for addr, data, be in writes:
        word = data.to_bytes(lanes, "little")
        for j in range(lanes):
            if be >> j & 1:
                mem[addr * lanes + j] = word[j]
    return mem


def run_writer(width, writes, *, idle=0.0, seed=0, max_burst=64, max_outstanding=16, idle_flush=4,
               addr_width=32, **slave_args):
    rng = random.Random(seed)
    dut = AxiWriter(width, addr_width=addr_width, max_burst=max_burst,
                    max_outstanding=max_outstanding, idle_flush=idle_flush)
    slave = AxiWriteSlave(dut, width, max_burst=max_burst, seed=seed + 1, **slave_args)
    durable = []                # (cycle, words)
    taken = []                  # cycles of input handshakes

    async def feed(ctx):
        for addr, data, be in writes:
            while idle and rng.random() < idle:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.payload, {"addr": addr, "data": data, "be": be})
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def watch(ctx):
        cycle = 0
        async for _, _, d, v, r in ctx.tick().sample(dut.durable, dut.i.valid, dut.i.ready):
            if d:
                durable.append((cycle, d))
            if v and r:
                taken.append(cycle)
            cycle += 1

    async def bench(ctx):
        await feed(ctx)
        while sum(n for _, n in durable) < len(writes):
            await ctx.tick()
        for _ in range(20):
            await ctx.tick()
        assert ctx.get(dut.outstanding) == 0

    run_sim(dut, testbenches=[bench], processes=[slave.run, watch], deadline_cycles=100_000)
    return dut, slave, durable, taken


def check(width, writes, slave, durable, max_burst):
    lanes = width // 8
    assert slave.mem == expected_memory(writes, lanes)
    assert sum(n for _, n in slave.bursts) == len(writes)
    # each response counts its burst's words as durable in the next cycle, in order
    assert [(c + 1, n) for c, n, _ in slave.responses] == durable
    # bursts cover the writes in order, with consecutive addresses
    k = 0
    for addr, n in slave.bursts:
        assert [a * lanes for a, _, _ in writes[k:k + n]] == [addr + j * lanes for j in range(n)]
        k += n


@pytest.mark.parametrize("width", [64, 512])
def test_random_writes_with_stalls(width):
    rng = random.Random(width)
    writes = make_writes(rng, width, 1500 if width == 64 else 1000)
    dut, slave, durable, _ = run_writer(width, writes, idle=0.3, seed=width, aw_stall=0.4,
                                        w_stall=0.4, b_latency=(1, 30), max_burst=16)
    check(width, writes, slave, durable, 16)


@pytest.mark.parametrize("width", [64, 128, 512])
def test_full_rate_long_bursts(width):
    # no idle input, no stalls: one word per cycle in, bursts of max_burst (or up to a page end)
    lanes = width // 8
    writes = [(1000 + k, k * 0x0101010101 + 7, (1 << lanes) - 1) for k in range(700)]
    dut, slave, durable, taken = run_writer(width, writes, b_latency=(5, 5), max_burst=64)
    check(width, writes, slave, durable, 64)
    assert taken == list(range(taken[0], taken[0] + len(writes)))
    words_per_page = 4096 // lanes
    for addr, n in slave.bursts[:-1]:
        end = addr // lanes + n
        assert n == 64 or end % words_per_page == 0, f"short burst of {n} at {addr:#x}"


def test_w_waits_for_aw_slave_and_errors():
    # a slave that takes W only after AW, with write errors reported but words still durable
    rng = random.Random(5)
    writes = make_writes(rng, 64, 800)
    dut, slave, durable, _ = run_writer(64, writes, idle=0.2, seed=3, aw_stall=0.7, w_stall=0.2,
                                        b_latency=(0, 10), w_after_aw=True, error_every=3,
                                        max_outstanding=2, max_burst=8)
    check(64, writes, slave, durable, 8)
    errors = sum(1 for _, _, r in slave.responses if r)
    assert errors > 0


@pytest.mark.parametrize("max_burst,idle_flush", [(1, 1), (256, 1), (3, 7)])
def test_burst_limits(max_burst, idle_flush):
    rng = random.Random(max_burst)
    writes = make_writes(rng, 64, 600)
    dut, slave, durable, _ = run_writer(64, writes, idle=0.1, seed=max_burst, max_burst=max_burst,
                                        idle_flush=idle_flush, w_stall=0.2, b_latency=(1, 8))
    check(64, writes, slave, durable, max_burst)
    if max_burst == 1:
        assert all(n == 1 for _, n in slave.bursts)


def test_wide_address():
    writes = [((1 << 40) + k, k, 0xFF) for k in range(100)] + [(5, 1, 0x0F)]
    dut, slave, durable, _ = run_writer(64, writes, addr_width=64, b_latency=(1, 4))
    assert dut.i.payload.addr.shape().width == 32
    # word addresses are 32 bits wide: the top bits above them are dropped
    check(64, [(a & 0xFFFFFFFF, d, b) for a, d, b in writes], slave, durable, 64)


def test_open_burst_flushed_when_input_idle():
    # a lone word becomes durable without any later word pushing it out
    writes = [(77, 0xABCD, 0xFF)]
    dut, slave, durable, _ = run_writer(64, writes, idle_flush=4, b_latency=(1, 1))
    assert slave.bursts == [(77 * 8, 1)]
    assert durable[0][1] == 1


@pytest.mark.parametrize("kwargs,exc", [
    ({"width": 48}, ValueError),
    ({"max_burst": 0}, ValueError),
    ({"max_burst": 257}, ValueError),
    ({"max_outstanding": 0}, ValueError),
    ({"idle_flush": 0}, ValueError),
    ({"addr_width": 8}, ValueError),
    ({"id_width": 0}, ValueError),
    ({"max_burst": 2.0}, TypeError),
])
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameter_validation(kwargs, exc):
    args = {"width": 64, **kwargs}
    with pytest.raises(exc):
        AxiWriter(**args)
    gc.collect()    # the half-built component warns when collected: inside this test


@pytest.mark.parametrize("width", [64, 512])
def test_rmw_tag_and_quiet(width):
    """``rmw_tag``: a word of that tag is a burst of its own, on AXI without waiting for
    ``idle_flush``; ``quiet`` is high exactly in the cycles in which every word taken before
    has had its write response (three tags, random stalls and response latency)."""
    lanes = width // 8
    rng = random.Random(width + 9)
    writes = []
    for addr, data, be in make_writes(rng, width, 600):
        tag = 2 if rng.random() < 0.1 else rng.randrange(2)
        writes.append((addr, data, be, tag))
    dut = AxiWriter(width, max_burst=16, tags=3, rmw_tag=2, idle_flush=16)
    slave = AxiWriteSlave(dut, width, max_burst=16, aw_stall=0.2, w_stall=0.2, b_latency=(1, 20),
                          seed=width)
    log = []                    # per cycle: (taken tag or None, durable, quiet)

    async def feed(ctx):
        for addr, data, be, tag in writes:
            while rng.random() < 0.4:
                ctx.set(dut.i.valid, 0)
                await ctx.tick().repeat(rng.choice([1, 1, 5, 30]))
            ctx.set(dut.i.payload, {"addr": addr, "data": data, "be": be, "tag": tag})
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        while sum(d for _, d, _ in log) < len(writes):
            await ctx.tick()
        await ctx.tick().repeat(3)

    async def watch(ctx):
        async for _, _, v, r, p, d, q in ctx.tick().sample(dut.i.valid, dut.i.ready,
                                                           dut.i.payload, dut.durable, dut.quiet):
            log.append((int(p.tag) if v and r else None, d, q))

    run_sim(dut, testbenches=[feed], processes=[slave.run, watch], deadline_cycles=200_000)
    assert slave.mem == expected_memory([w[:3] for w in writes], lanes)
    taken = answered = 0
    for cycle, (tag, d, q) in enumerate(log):
        answered += d
        assert bool(q) == (taken == answered), f"cycle {cycle}: quiet {q}"
        taken += tag is not None
    # the write backs alone in their bursts; the bursts in the order of the words
    k = 0
    for _, n in slave.bursts:
        tags = {w[3] for w in writes[k:k + n]}
        assert len(tags) == 1 and (2 not in tags or n == 1)
        k += n
    assert any(q for _, _, q in log) and not all(q for _, _, q in log)


def test_rmw_word_goes_at_once():
    """No stalls: a write back's AW and W are offered 3 cycles after the cycle it is taken
    (held one cycle, then the queues' two), where a lone word of another tag waits
    ``idle_flush`` - 1 cycles more; ``quiet`` is high from the cycle after the response."""
    dut = AxiWriter(64, tags=2, rmw_tag=1, idle_flush=8)
    cycles = {}

    async def tb(ctx):
        ctx.set(dut.aw.ready, 1)
        ctx.set(dut.w.ready, 1)
        for tag in (1, 0):
            ctx.set(dut.i.payload, {"addr": 5, "data": 1, "be": 0xFF, "tag": tag})
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            start = 0
            while not ctx.get(dut.aw.valid):
                await ctx.tick()
                start += 1
            assert ctx.get(dut.w.valid) and ctx.get(dut.w.payload.last)
            await ctx.tick()
            ctx.set(dut.b.valid, 1)
            await ctx.tick()
            ctx.set(dut.b.valid, 0)
            after = 0
            while not ctx.get(dut.quiet):
                await ctx.tick()
                after += 1
            cycles[tag] = (start, after)

    run_sim(dut, testbenches=[tb], deadline_cycles=200)
    assert cycles[1] == (2, 0)
    assert cycles[0] == (9, 0)
