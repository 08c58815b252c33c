"""The payload reader's atomics (``PayloadReader(..., atomics=...)``) against the reference model
(``sim/models/responder/atomic.py``): random mixes of ordinary descriptors, FETCH_ADDs,
COMPARE_SWAPs (half of them matching) and REPLAYs, runs of atomics on one word (one lane or
several), at 64 and 512 bits, both byte orders, random idle cycles on ``desc`` and backpressure
on ``o``. The memory behind the reader is a Python array, read-first, that applies ``aw``. Checked:
each packet's bytes (an atomic's: its word as read, each lane's bytes reversed in a little-endian
memory), the words read, ``done`` against the model applied in descriptor order, the final
memory, and the timing of ``lock``, ``aw`` and ``done`` around each atomic's read; the atomic
throughput; the parameters."""

import gc
import random

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.layouts import PACKET_DESC, AtomicOp, WrSource
from rocegen.gateware.roce.memory.payload_reader import PayloadReader
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.responder import atomic as model
from rocegen.sim.testing.amaranth_streams import StreamCollector, meta_dict, write_word
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.payload import expected_packet, random_desc
from rocegen.wire import opcodes as opc

EDGES = (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)
#: The AtomicOp of a request opcode.
OPS = {opc.OP_RC_FETCH_ADD: AtomicOp.FETCH_ADD, opc.OP_RC_COMPARE_SWAP: AtomicOp.COMPARE_SWAP}


def no_atomic(rng):
    """The sideband of an ordinary descriptor: NONE, with operands to ignore."""
    return {"op": AtomicOp.NONE, "swap_add": rng.getrandbits(64), "compare": rng.getrandbits(64)}


def atomic_desc(rng, width, word, lane):
    """The descriptor of an atomic's answer on lane ``lane`` of word ``word`` (a word index), as
    the responder makes it: one word, ``length`` its offset + 8, ``va`` the target's address."""
    B = width // 8
    d = random_desc(rng, word * B, 8 * lane + 8, False)
    d.update(src=WrSource.RESPONDER, opcode=opc.OP_RC_ATOMIC_ACKNOWLEDGE, va=word * B + 8 * lane)
    return d


class Item:
    """One descriptor with its sideband and what the model says of it: ``request`` (an
    atomic's :class:`~rocegen.sim.models.responder.atomic.AtomicRequest`, its ``va`` the byte
    offset of the target in memory), ``orig`` (the model's answer: an executed atomic's, or a
    REPLAY's value), ``writes`` (an executed atomic changes memory)."""

    def __init__(self, desc, atomic, request=None, orig=None, writes=False):
        self.desc, self.atomic = desc, atomic
        self.request, self.orig, self.writes = request, orig, writes

    @property
    def op(self):
        return self.atomic["op"]

    @property
    def rmw(self):
        return self.op in (AtomicOp.FETCH_ADD, AtomicOp.COMPARE_SWAP)


class Workload:
    """``count`` random descriptors on a memory of ``words`` words holding ``image``, the model
    run over them in descriptor order: ``items`` and the memory after them (``final``).
    Ordinary descriptors often read around the few words the atomics go to; atomics come in
    runs of one to five on one word (random lanes, often the same one); ``fill`` is what
    ordinary descriptors may read (a callable giving a word index)."""

    def __init__(self, rng, width, words, image, count, byteorder, *, hot=3, p_ordinary=0.35,
                 p_replay=0.1, p_generator=0.1):
        B = width // 8
        lanes = B // 8
        mem = bytearray(image)
        hot = [rng.randrange(words) for _ in range(hot)]
        self.items = []
        while len(self.items) < count:
            r = rng.random()
            if r < p_ordinary:
                n = rng.choice([0, 1, 8, B - 1, B, B + 1, 3 * B, rng.randrange(1, 200)])
                word = (rng.choice(hot) - rng.randrange(3)) % words if rng.random() < 0.7 \
                    else rng.randrange(words)
                d = random_desc(rng, word * B, n, rng.random() < p_generator)
                self.items.append(Item(d, no_atomic(rng)))
            elif r < p_ordinary + p_replay:
                lane = rng.randrange(lanes)
                value = rng.choice(EDGES) if rng.random() < 0.3 else rng.getrandbits(64)
                atom = {"op": AtomicOp.REPLAY, "swap_add": value,
                        "compare": rng.getrandbits(64)}
                self.items.append(Item(atomic_desc(rng, width, rng.randrange(words), lane), atom,
                                       orig=value))
            else:
                word = rng.choice(hot)
                lane = rng.randrange(lanes)
                for _ in range(rng.randint(1, 5)):
                    if rng.random() < 0.4:
                        lane = rng.randrange(lanes)
                    off = word * B + 8 * lane
                    value = model.load(mem, off, byteorder)
                    fetch_add = rng.random() < 0.5
                    swap_add = rng.choice(EDGES) if rng.random() < 0.3 else rng.getrandbits(64)
                    compare = value if rng.random() < 0.5 else rng.getrandbits(64)
                    request = model.AtomicRequest(
                        opc.OP_RC_FETCH_ADD if fetch_add else opc.OP_RC_COMPARE_SWAP, off, 0,
                        swap_add, compare)
                    orig = model.execute(mem, off, request, byteorder)
                    atom = {"op": OPS[request.opcode], "swap_add": swap_add,
                            "compare": compare}
                    self.items.append(Item(atomic_desc(rng, width, word, lane), atom, request,
                                           orig, writes=fetch_add or orig == compare))
        self.final = bytes(mem)


def reads_of(item, width, words):
    """Word indices the reader reads for ``item``, in order."""
    B = width // 8
    d = item.desc
    if d["src"] == WrSource.GENERATOR or d["length"] == 0 or item.op == AtomicOp.REPLAY:
        return []
    first = d["local_addr"] // B
    return [(first + k) % words for k in range(-(-d["length"] // B))]


def lanes_reversed(word):
    """The bytes of each 8-byte lane of ``word`` in reverse order."""
    return b"".join(word[k:k + 8][::-1] for k in range(0, len(word), 8))


async def send_items(ctx, dut, items, rng, idle):
    """Each item's descriptor on ``desc`` with its sideband on ``atomic`` (garbage on
    ``atomic`` in idle cycles: it counts only when a descriptor is taken)."""
    for item in items:
        while idle and rng.random() < idle:
            ctx.set(dut.desc.valid, 0)
            ctx.set(dut.atomic, {"op": AtomicOp(rng.randrange(4)),
                                 "swap_add": rng.getrandbits(64), "compare": rng.getrandbits(64)})
            await ctx.tick()
        ctx.set(dut.desc.payload, item.desc)
        ctx.set(dut.atomic, item.atomic)
        ctx.set(dut.desc.valid, 1)
        await ctx.tick().until(dut.desc.ready)
    ctx.set(dut.desc.valid, 0)


class AtomicReaderRun:
    """``items`` through a PayloadReader with atomics on a Python memory of ``words`` words
    holding ``image``: read-first (a read returns the word as it was before the write of the
    same cycle), ``aw`` applied at once (``aw.ready`` always high), random data on ``mem.data``
    after a cycle without ``en``. Records, by cycle: ``reads`` (cycle, word), ``aw``, ``lock``,
    ``done``; ``packets`` the output."""

    def __init__(self, width, words, image, items, byteorder, *, idle=0.0, backpressure=0.0,
                 seed=0):
        B = width // 8
        self.memory = bytearray(image)
        dut = PayloadReader(width, words.bit_length() - 1, atomics=byteorder)
        self.col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 1)
        self.reads, self.aw, self.lock, self.done = [], [], [], []
        rng = random.Random(seed)
        mem_rng = random.Random(seed + 2)

        async def memory(ctx):
            ctx.set(dut.aw.ready, 1)
            cycle = 0
            async for _, _, en, addr, awv, awp, lock, dv, dp in ctx.tick().sample(
                    dut.mem.en, dut.mem.addr, dut.aw.valid, dut.aw.payload, dut.lock,
                    dut.done.valid, dut.done.payload):
                data = mem_rng.getrandbits(width)
                if en:
                    self.reads.append((cycle, addr))
                    data = int.from_bytes(self.memory[addr * B:(addr + 1) * B], "little")
                if awv:
                    self.aw.append((cycle, int(awp.addr), int(awp.be)))
                    write_word(self.memory, width, awp)
                if lock:
                    self.lock.append(cycle)
                if dv:
                    self.done.append((cycle, int(dp.qp), int(dp.psn), int(dp.orig)))
                ctx.set(dut.mem.data, data)
                cycle += 1

        async def tb(ctx):
            await send_items(ctx, dut, items, rng, idle)
            while len(self.col.packets) < len(items):
                await ctx.tick()
            await ctx.tick().repeat(5)

        run_sim(dut, testbenches=[tb], processes=[memory, self.col.run],
                deadline_cycles=40 * len(items) + 1000)
        self.packets = self.col.packets


def check_run(run, items, width, words, image, byteorder):
    """Everything the run must show for ``items`` on a memory that held ``image``."""
    B = width // 8
    expected_reads = [(a, k) for k, it in enumerate(items) for a in reads_of(it, width, words)]
    assert [a for _, a in run.reads] == [a for a, _ in expected_reads], "words read"
    # what each read returned: a word is seen changed by an atomic from the fourth cycle after
    # that atomic's read on (its write back in the third; none for a COMPARE_SWAP that does
    # not match); an atomic's word is read with every earlier atomic's written back
    visible = bytearray(image)
    pending = []                       # (cycle from which visible, word, bytes of the word)
    seen = {k: b"" for k in range(len(items))}
    timing = {"lock": set(), "aw": [], "done": {}}
    last_atomic = None
    for (cycle, a), (_, k) in zip(run.reads, expected_reads):
        for p in [p for p in pending if p[0] <= cycle]:
            visible[p[1] * B:(p[1] + 1) * B] = p[2]
            pending.remove(p)
        word = bytes(visible[a * B:(a + 1) * B])
        item = items[k]
        if item.rmw:
            assert not pending, f"item {k}: read at cycle {cycle} before a write back"
            if last_atomic is not None:
                # no atomic read in the cycles of an earlier one's word back and write back
                gap = 3 if items[last_atomic[1]].writes else 2
                assert cycle - last_atomic[0] >= gap, f"item {k}: atomics overlap"
            last_atomic = (cycle, k)
            after = bytearray(word)
            orig = model.execute(after, item.request.va % B, item.request, byteorder)
            assert orig == item.orig        # (the model in descriptor order agrees)
            assert (bytes(after) != word) <= item.writes
            timing["lock"] |= {cycle, cycle + 1}
            if item.writes:
                pending.append((cycle + 3, a, bytes(after)))
                timing["aw"].append((cycle + 2, a, 0xFF << item.request.va % B))
            timing["done"][k] = cycle + 2
            word = lanes_reversed(word) if byteorder == "little" else word
        seen[k] += word
    for p in pending:
        visible[p[1] * B:(p[1] + 1) * B] = p[2]

    # the packets
    assert len(run.packets) == len(items)
    for k, (got, item) in enumerate(zip(run.packets, items)):
        d = item.desc
        meta = meta_dict(PACKET_DESC.const(d))
        if d["src"] == WrSource.GENERATOR:
            exp = expected_packet(d, b"")
        elif item.op == AtomicOp.REPLAY:
            exp = Packet((item.orig.to_bytes(8, "big") * (B // 8))[:d["length"]], meta)
        else:
            exp = Packet(seen[k][:d["length"]], meta)
        assert got == exp, f"packet {k} ({item.op.name}, {d['length']} bytes)"
        if item.rmw:
            off = item.request.va % B
            assert got.data[off:off + 8] == item.orig.to_bytes(8, "big"), f"packet {k}: orig"
    # the results, in order, and the memory
    expected_done = [(it.desc["qp"], it.desc["psn"], it.orig) for it in items
                     if it.rmw or it.op == AtomicOp.REPLAY]
    assert [dn[1:] for dn in run.done] == expected_done, "done"
    executed = [k for k, it in enumerate(items) if it.rmw or it.op == AtomicOp.REPLAY]
    for (cycle, *_), k in zip(run.done, executed):
        if k in timing["done"]:
            assert cycle == timing["done"][k], f"item {k}: done cycle"
    assert bytes(run.memory) == bytes(visible)
    # the write backs and the lock, cycle by cycle
    assert run.aw == timing["aw"]
    assert set(run.lock) == timing["lock"] and len(run.lock) == len(timing["lock"])


@pytest.mark.parametrize("width, byteorder, idle, backpressure", [
    (64, "little", 0.3, 0.3), (64, "big", 0.1, 0.5), (512, "little", 0.2, 0.3),
    (512, "big", 0.4, 0.1)])
def test_against_model(width, byteorder, idle, backpressure):
    rng = random.Random(width + len(byteorder))
    B = width // 8
    words = 64
    image = bytearray(rng.randbytes(words * B))
    for k in range(0, words * B, 64):               # a few edge values in memory
        image[k:k + 8] = rng.choice(EDGES).to_bytes(8, byteorder)
    work = Workload(rng, width, words, image, 300, byteorder)
    items = work.items
    run = AtomicReaderRun(width, words, image, items, byteorder, idle=idle,
                          backpressure=backpressure, seed=width)
    check_run(run, items, width, words, image, byteorder)
    assert bytes(run.memory) == work.final
    # the mix had what it should: both COMPARE_SWAP outcomes, runs on one word, one lane and
    # several lanes of one word back to back, ordinary reads of the atomics' words
    cs = [it for it in items if it.op == AtomicOp.COMPARE_SWAP]
    assert 0 < sum(it.writes for it in cs) < len(cs)
    pairs = list(zip(items, items[1:]))
    same_word = [(a, b) for a, b in pairs if a.rmw and b.rmw
                 and a.request.va // B == b.request.va // B]
    assert any(a.request.va == b.request.va for a, b in same_word)
    if B > 8:
        assert any(a.request.va != b.request.va for a, b in same_word)
    targets = {it.request.va // B for it in items if it.rmw}
    assert any(it.op == AtomicOp.NONE and set(reads_of(it, width, words)) & targets
               for it in items)
    assert any(it.op == AtomicOp.REPLAY for it in items)


@pytest.mark.parametrize("width", [64, 512])
def test_throughput(width):
    """Descriptors always offered, ``o`` always ready: any read three cycles after the
    previous atomic's (two after a COMPARE_SWAP that did not match: no read sees a word before
    an atomic's write back), else in the next cycle, the beats on ``o`` in the cycle after
    their reads (the word back, beside the empty queue)."""
    rng = random.Random(width + 5)
    B = width // 8
    words = 32
    image = rng.randbytes(words * B)
    work = Workload(rng, width, words, image, 120, "little", p_ordinary=0.3, p_replay=0.0,
                    p_generator=0.0)
    items = [it for it in work.items if it.rmw or it.desc["length"] > 0]
    run = AtomicReaderRun(width, words, image, items, "little", seed=3)
    check_run(run, items, width, words, image, "little")
    # the cycle of each read: the next cycle, or for an atomic, when the earlier one is done
    kinds = [it for it in items for _ in reads_of(it, width, words)]
    cycle, last = run.reads[0][0], None
    for (got, _), it in zip(run.reads, kinds):
        if last is not None:
            cycle = max(cycle, last[0] + (3 if last[1].writes else 2))
        assert got == cycle
        if it.rmw:
            last = (cycle, it)
        cycle += 1
    # (the collector counts a beat taken in cycle c as c + 1)
    assert [c - 1 for c in run.col.beat_cycles] == [c + 1 for c, _ in run.reads]
    gaps = [b[0] - a[0] for a, b in zip(run.reads, run.reads[1:])]
    assert 3 in gaps and 2 in gaps


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters():
    with pytest.raises(ValueError, match="atomics must be None or one of little, big .*, "
                                         "not 'middle'"):
        PayloadReader(64, 10, atomics="middle")
    with pytest.raises(ValueError, match="atomics must be None or one of little, big .*, not 1"):
        PayloadReader(64, 10, atomics=1)
    plain = PayloadReader(64, 10)
    assert not {"atomic", "aw", "lock", "done"} & set(plain.signature.members)
    dut = PayloadReader(512, 12, atomics="big")
    assert {"atomic", "aw", "lock", "done"} <= set(dut.signature.members)
    assert len(dut.aw.payload.addr) == 12 and len(dut.aw.payload.be) == 64
    assert Shape.cast(dut.done.payload.shape()).width == 8 + 24 + 64
    for d in (plain, dut):
        Fragment.get(d, None)
    gc.collect()        # the half-built components warn when collected: inside this test
