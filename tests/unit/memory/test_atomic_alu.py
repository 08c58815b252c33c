"""The atomic unit's arithmetic against the reference model (``sim/models/responder/atomic.py``):
random COMPARE_SWAPs (half of them matching) and FETCH_ADDs on random words, every lane, both
byte orders, random idle cycles and backpressure; the write back applied to the word gives the
model's memory, ``orig`` the model's answer. Latency one and one atomic per cycle; parameters
checked."""

import gc
import random

import pytest

from rocegen.gateware.roce.memory.atomic_alu import AtomicAlu
from rocegen.sim.models.responder import atomic as model
from rocegen.sim.testing.amaranth_streams import send_records
from rocegen.sim.testing.harness import run_sim
from rocegen.wire import opcodes as opc

EDGES = (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


def _requests(width, n, seed):
    """``n`` random atomics with their words: ``(record, word bytes, lane, AtomicRequest)``."""
    rng = random.Random(seed)
    lanes = width // 64
    out = []
    for _ in range(n):
        word = bytearray(rng.getrandbits(8) for _ in range(width // 8))
        lane = rng.randrange(lanes)
        fetch_add = rng.random() < 0.5
        swap_add = rng.choice(EDGES) if rng.random() < 0.3 else rng.getrandbits(64)
        compare = rng.getrandbits(64)
        out.append((word, lane, fetch_add, swap_add, compare))
    return out


def _expected(width, byteorder, word, lane, fetch_add, swap_add, compare):
    """The model's memory word and answer: the word after the atomic, the original value."""
    mem = bytearray(word)
    request = model.AtomicRequest(opc.OP_RC_FETCH_ADD if fetch_add else opc.OP_RC_COMPARE_SWAP,
                                  8 * lane, 0, swap_add, compare)
    orig = model.execute(mem, 8 * lane, request, byteorder)
    return bytes(mem), orig


def _run(width, byteorder, n, idle, backpressure, seed):
    dut = AtomicAlu(width, byteorder=byteorder)
    reqs = _requests(width, n, seed)
    rng = random.Random(seed + 100)
    # half of the COMPARE_SWAPs compare equal: their compare operand is the value in memory
    for k, (word, lane, fetch_add, swap_add, _) in enumerate(reqs):
        if not fetch_add and k % 2:
            value = model.load(word, 8 * lane, byteorder)
            reqs[k] = (word, lane, fetch_add, swap_add, value)
    records = [{"word": int.from_bytes(w, "little"), "lane": lane, "fetch_add": int(fa),
                "swap_add": sa, "compare": c} for w, lane, fa, sa, c in reqs]
    got = []

    async def collect(ctx):
        while len(got) < n:
            ready = rng.random() >= backpressure
            ctx.set(dut.o.ready, ready)
            if ready and ctx.get(dut.o.valid):
                p = ctx.get(dut.o.payload)
                got.append((int(p.data), int(p.be), int(p.write), int(p.orig)))
            await ctx.tick()

    async def drive(ctx):
        await send_records(ctx, dut.i, records, rng=random.Random(seed + 200), idle=idle)

    run_sim(dut, testbenches=[drive, collect], deadline_cycles=20 * n)
    return reqs, got


@pytest.mark.parametrize("width, byteorder, idle, backpressure", [
    (64, "little", 0.3, 0.3), (512, "big", 0.2, 0.5), (128, "little", 0.0, 0.0),
    (256, "big", 0.5, 0.0)])
def test_against_model(width, byteorder, idle, backpressure):
    reqs, got = _run(width, byteorder, 200, idle, backpressure, seed=width)
    assert len(got) == len(reqs)
    swaps = 0
    for (word, lane, fetch_add, swap_add, compare), (dat, be, write, orig) in zip(reqs, got):
        after, want_orig = _expected(width, byteorder, word, lane, fetch_add, swap_add, compare)
        mem = bytearray(word)
        for b in range(width // 8):
            if be >> b & 1:
                mem[b] = dat >> 8 * b & 0xFF
        assert (bytes(mem), orig) == (after, want_orig)
        assert write == bool(be) and (be == 0 or be == 0xFF << 8 * lane)
        swaps += (not fetch_add) and write
    # both COMPARE_SWAP outcomes were seen
    assert 0 < swaps < sum(1 for r in reqs if not r[2])


def test_one_per_cycle_latency_one():
    """With ``o.ready`` high, an atomic each cycle comes out one cycle later."""
    dut = AtomicAlu(128)
    records = [{"word": k << 64 | k, "lane": k & 1, "fetch_add": 1, "swap_add": 1, "compare": 0}
               for k in range(1, 9)]
    seen = []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        for cycle, r in enumerate(records + [None]):
            if r is not None:
                ctx.set(dut.i.payload, r)
            ctx.set(dut.i.valid, r is not None)
            assert ctx.get(dut.i.ready)
            await ctx.tick()
            if ctx.get(dut.o.valid):
                seen.append((cycle, int(ctx.get(dut.o.payload.orig))))

    run_sim(dut, testbenches=[tb], deadline_cycles=100)
    assert seen == [(k - 1, k) for k in range(1, 9)]


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters():
    with pytest.raises(ValueError, match="width must be one of"):
        AtomicAlu(32)
    with pytest.raises(TypeError, match="width must be an integer"):
        AtomicAlu("64")
    with pytest.raises(ValueError, match="byteorder must be one of little, big, not 'middle'"):
        AtomicAlu(64, byteorder="middle")
    dut = AtomicAlu(512)
    assert dut.i.payload.shape().size == 512 + 3 + 1 + 128
    assert dut.o.payload.shape().size == 512 + 64 + 1 + 64
    del dut
    gc.collect()        # the refused ones, unused, are reported now and ignored
