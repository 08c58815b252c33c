"""The on-chip payload memory with atomics (``PayloadMemory(..., responder=True,
atomics=...)``): while the reader executes FETCH_ADDs, COMPARE_SWAPs and REPLAYs (among ordinary
descriptors), the other sources (the front end's ``wr``, the responder's ``resp_w``, the READ
requester's ``read_w``, the user's ``mem_w``) keep writing random words, the atomics' targets
among them. Checked, cycle by cycle: no other write is taken in a cycle ``lock`` is high or the
write back is; the memory read back at the end, every packet and every ``atomic_done`` equal a
Python replay of the writes in the cycle order they were taken, each atomic executed by the
reference model (``sim/models/responder/atomic.py``) at its read cycle. The parameters that
refuse atomics."""

import gc
import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.layouts import PACKET_DESC, AtomicOp
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.responder import atomic as model
from rocegen.sim.testing.amaranth_streams import StreamCollector, meta_dict, send_records, write_word
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.payload import random_desc
from tests.unit.memory.test_payload_reader_atomics import (
    OPS,
    Item,
    atomic_desc,
    lanes_reversed,
    no_atomic,
    reads_of,
    send_items,
)

WORDS = 32


def workload(rng, width, count, hot, pool, byteorder):
    """``count`` descriptors: atomics on the ``hot`` words (runs of one to four, random lanes),
    REPLAYs and ordinary reads around the hot words. A COMPARE_SWAP compares with a value of
    ``pool`` (what the other sources write), so that some match."""
    B = width // 8
    items = []
    while len(items) < count:
        r = rng.random()
        if r < 0.3:
            n = rng.choice([1, 8, B, B + 1, rng.randrange(1, 3 * B)])
            word = (rng.choice(hot) - rng.randrange(2)) % WORDS
            items.append(Item(random_desc(rng, word * B, n, False), no_atomic(rng)))
        elif r < 0.4:
            value = rng.getrandbits(64)
            items.append(Item(atomic_desc(rng, width, rng.randrange(WORDS), rng.randrange(B // 8)),
                              {"op": AtomicOp.REPLAY, "swap_add": value, "compare": 0},
                              orig=value))
        else:
            word, lane = rng.choice(hot), rng.randrange(B // 8)
            for _ in range(rng.randint(1, 4)):
                if rng.random() < 0.4:
                    lane = rng.randrange(B // 8)
                opcode = rng.choice(list(OPS))
                swap_add = rng.getrandbits(64) if rng.random() < 0.5 else rng.randrange(4)
                compare = int.from_bytes(rng.choice(pool), byteorder)
                request = model.AtomicRequest(opcode, word * B + 8 * lane, 0, swap_add, compare)
                items.append(Item(atomic_desc(rng, width, word, lane),
                                  {"op": OPS[opcode], "swap_add": swap_add, "compare": compare},
                                  request))
    return items


def source_writes(rng, width, count, hot, pool):
    """``count`` word writes, half of them to the hot words, their 8-byte lanes from ``pool``
    (or random), all bytes enabled, one lane's or random ones."""
    B = width // 8
    out = []
    for _ in range(count):
        addr = rng.choice(hot) if rng.random() < 0.5 else rng.randrange(WORDS)
        data = b"".join(rng.choice(pool) if rng.random() < 0.7 else rng.randbytes(8)
                        for _ in range(B // 8))
        be = rng.choice([(1 << B) - 1, 0xFF << 8 * rng.randrange(B // 8), rng.getrandbits(B)])
        out.append({"addr": addr, "data": int.from_bytes(data, "little"), "be": be})
    return out


@pytest.mark.parametrize("width, byteorder, reads", [(64, "little", True), (512, "big", False),
                                                     (128, "little", False)])
def test_atomic_against_other_writers(width, byteorder, reads):
    rng = random.Random(width + reads)
    B = width // 8
    dut = PayloadMemory(width, "onchip", WORDS * B, responder=True, reads=reads,
                        atomics=byteorder)
    hot = rng.sample(range(WORDS), 2)
    pool = [rng.randbytes(8) for _ in range(3)]
    items = workload(rng, width, 150, hot, pool, byteorder)
    # at the end, the whole memory read back
    readback = Item(random_desc(rng, 0, WORDS * B, False), no_atomic(rng))
    ports = [dut.wr, dut.resp_w] + ([dut.read_w] if reads else []) + [dut.mem_w]
    writes = [source_writes(rng, width, 120, hot, pool) for _ in ports]
    reader = dut._reader
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=width)
    log = []                                # per cycle: (read word or None, lock, aw, taken)
    done = []
    finished = [False] * len(ports)

    async def monitor(ctx):
        n = len(ports)
        async for _, _, en, addr, lock, awv, awr, awp, dv, dp, *p in ctx.tick().sample(
                reader.mem.en, reader.mem.addr, reader.lock, reader.aw.valid, reader.aw.ready,
                reader.aw.payload, dut.atomic_done.valid, dut.atomic_done.payload,
                *(q.valid for q in ports), *(q.ready for q in ports),
                *(q.payload for q in ports)):
            valid, ready, payload = p[:n], p[n:2 * n], p[2 * n:]
            assert awr or not awv, "the write back was not taken"
            taken = [(k, payload[k]) for k in range(n) if valid[k] and ready[k]]
            assert len(taken) + awv <= 1, "two writes in one cycle"
            if lock or awv:
                assert not any(ready), "a source was ready while locked or beside a write back"
            for k in range(n):
                if valid[k] and any(ready[k + 1:]):
                    raise AssertionError(f"a later source went beside source {k}")
            log.append((addr if en else None, bool(lock), (int(awp.addr), int(awp.be))
                        if awv else None, taken))
            if dv:
                done.append((int(dp.qp), int(dp.psn), int(dp.orig)))

    def writer(k):
        async def tb(ctx):
            await send_records(ctx, ports[k], writes[k], random.Random(k), 0.3 + 0.1 * k)
            finished[k] = True
        return tb

    async def tb(ctx):
        await send_items(ctx, dut, items, rng, 0.3)
        while len(col.packets) < len(items) or not all(finished):
            await ctx.tick()
        await ctx.tick().repeat(3)
        await send_items(ctx, dut, [readback], rng, 0.0)
        while len(col.packets) < len(items) + 1:
            await ctx.tick()

    run_sim(dut, testbenches=[tb, *(writer(k) for k in range(len(ports)))],
            processes=[col.run, monitor], deadline_cycles=100_000)

    # the replay, cycle by cycle: the reads of the cycle (an atomic executed on the memory as
    # the cycle begins), then the writes the cycle took
    everything = items + [readback]
    expected_reads = [(a, k) for k, it in enumerate(everything)
                      for a in reads_of(it, width, WORDS)]
    memory = bytearray(WORDS * B)
    seen = {k: b"" for k in range(len(everything))}
    recent = {}                 # word -> (cycle of an atomic's read, the word before it)
    lock, aw = set(), []
    reads = iter(expected_reads)
    n_taken = 0
    for cycle, (addr, _, _, taken) in enumerate(log):
        if addr is not None:
            a, k = next(reads)
            assert addr == a, f"cycle {cycle}: read word {addr}, not {a}"
            item = everything[k]
            word = bytes(memory[a * B:(a + 1) * B])
            if item.rmw:
                off = item.request.va % B
                item.orig = model.execute(memory, a * B + off, item.request, byteorder)
                item.writes = item.op == AtomicOp.FETCH_ADD or \
                    item.orig == item.request.compare
                recent[a] = (cycle, word)
                lock |= {cycle, cycle + 1}
                if item.writes:
                    aw.append((cycle + 2, a, 0xFF << off))
                seen[k] += lanes_reversed(word) if byteorder == "little" else word
            else:
                # (a word read while an atomic on it is between its read and its write back
                # is the word before the atomic: the memory is read-first)
                t, before = recent.get(a, (None, None))
                seen[k] += before if t is not None and cycle - t <= 2 else word
        for _, w in taken:
            write_word(memory, width, w)
            n_taken += 1
    assert next(reads, None) is None
    assert n_taken == sum(map(len, writes))
    assert {c for c, (_, locked, _, _) in enumerate(log) if locked} == lock
    assert [(c, *x[2]) for c, x in enumerate(log) if x[2] is not None] == aw

    assert len(col.packets) == len(everything)
    for k, (got, item) in enumerate(zip(col.packets, everything)):
        d = item.desc
        meta = meta_dict(PACKET_DESC.const(d))
        if item.op == AtomicOp.REPLAY:
            exp = Packet((item.orig.to_bytes(8, "big") * (B // 8))[:d["length"]], meta)
        else:
            exp = Packet(seen[k][:d["length"]], meta)
        assert got == exp, f"packet {k} ({item.op.name}, {d['length']} bytes)"
    assert col.packets[-1].data == bytes(memory), "the memory read back"
    assert done == [(it.desc["qp"], it.desc["psn"], it.orig) for it in items
                    if it.rmw or it.op == AtomicOp.REPLAY]
    # what the run had: the atomics' words written by the others between atomics, both
    # COMPARE_SWAP outcomes, sources held by the lock
    cs = [it for it in items if it.op == AtomicOp.COMPARE_SWAP]
    assert 0 < sum(it.writes for it in cs) < len(cs)
    hot_writes = sum(1 for _, _, _, taken in log for _, w in taken if int(w.addr) in hot)
    assert hot_writes > 50
    held = sum(1 for _, locked, _, taken in log if locked and not taken)
    assert held > 0 and any(it.op == AtomicOp.REPLAY for it in items)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_ports_and_parameters():
    on = PayloadMemory(64, "onchip", 1 << 12, responder=True, atomics="little")
    assert {"atomic", "atomic_done"} <= set(on.signature.members)
    assert on._reader.atomics == "little"
    assert len(on.atomic_done.payload.orig) == 64
    plain = PayloadMemory(64, "onchip", 1 << 12, responder=True)
    assert not {"atomic", "atomic_done"} & set(plain.signature.members)
    for dut in (on, plain):
        Fragment.get(dut, None)
    raises(ValueError, "atomics needs responder=True",
           lambda: PayloadMemory(64, "onchip", 1 << 12, atomics="big"))
    raises(ValueError, "atomics must be None or one of little, big",
           lambda: PayloadMemory(64, "onchip", 1 << 12, responder=True, atomics="network"))
    gc.collect()
