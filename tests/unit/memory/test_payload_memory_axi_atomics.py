"""The AXI4 payload memory with atomics (``PayloadMemory(..., memory="axi4", responder=True,
atomics=...)``): while the reader executes FETCH_ADDs, COMPARE_SWAPs and REPLAYs among ordinary
descriptors, the other sources (the front end's ``wr``, the responder's ``resp_w``, the READ
requester's ``read_w``) keep writing random words, the atomics' targets among them, into an AXI4
memory with random stalls on every channel that holds its write responses back, and whose read
side holds only the bytes acknowledged. Checked: the memory at the end, every atomic's original
value (in ``atomic_done``, in its packet and in its write back) equal a Python replay of the
words in the order the writer took them, each atomic executed by the reference model
(``sim/models/responder/atomic.py``) at its read; no other source's word taken while ``lock`` is
high; each atomic's AR only with every word taken before answered and every earlier read beat
back, and no AR after it until its write back is answered; every packet the bytes the memory
answered; each source's durable count its own words only; the parameters."""

import gc
import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.layouts import PACKET_DESC, AtomicOp
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.models.memory.axi_write_mem import AxiWriteMemory
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.responder import atomic as model
from rocegen.sim.testing.amaranth_streams import StreamCollector, meta_dict, send_records, write_word
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.payload import random_desc
from tests.unit.memory.test_payload_memory_atomics import WORDS, workload
from tests.unit.memory.test_payload_reader_atomics import (
    OPS,
    Item,
    atomic_desc,
    lanes_reversed,
    no_atomic,
    reads_of,
    send_items,
)

MEM_BYTES = 1 << 12


def pooled_writes(rng, width, count, hot, pool):
    """``count`` word writes, half of them to the hot words, their 8-byte lanes from ``pool``
    (what the COMPARE_SWAPs compare with) and enabled whole (a lane or the word) but now and
    then."""
    B = width // 8
    out = []
    for _ in range(count):
        addr = rng.choice(hot) if rng.random() < 0.5 else rng.randrange(WORDS)
        data = b"".join(rng.choice(pool) for _ in range(B // 8))
        be = rng.choice([(1 << B) - 1, 0xFF << 8 * rng.randrange(B // 8), rng.getrandbits(B)]
                        if rng.random() < 0.2 else [(1 << B) - 1, 0xFF << 8 * rng.randrange(B // 8)])
        out.append({"addr": addr, "data": int.from_bytes(data, "little"), "be": be})
    return out


class Word:
    """A word write as :func:`write_word` takes it."""

    def __init__(self, addr, data, be):
        self.addr, self.data, self.be = addr, data, be


@pytest.mark.parametrize("width, byteorder, reads, count", [
    (64, "little", True, 40), (64, "big", False, 40), (512, "big", True, 30),
    (512, "little", False, 30)])
def test_atomics_against_other_writers(width, byteorder, reads, count):
    rng = random.Random(width + reads + len(byteorder))
    B = width // 8
    dut = PayloadMemory(width, "axi4", MEM_BYTES, responder=True, reads=reads,
                        atomics=byteorder)
    hot = rng.sample(range(WORDS), 2)
    pool = [rng.randbytes(8) for _ in range(2)]
    items = workload(rng, width, count, hot, pool, byteorder)
    for it in items:
        # (COMPARE_SWAPs that often swap in a value of the pool: the next ones may match)
        if it.op == AtomicOp.COMPARE_SWAP and rng.random() < 0.5:
            swap = int.from_bytes(rng.choice(pool), byteorder)
            it.atomic["swap_add"] = swap
            req = it.request
            it.request = model.AtomicRequest(req.opcode, req.va, 0, swap, req.compare)
    readback = Item(random_desc(rng, 0, WORDS * B, False), no_atomic(rng))
    ports = [dut.wr, dut.resp_w] + ([dut.read_w] if reads else [])
    durables = [dut.durable, dut.resp_durable] + ([dut.read_durable] if reads else [])
    n = len(ports)                      # also the write backs' tag
    writes = [pooled_writes(rng, width, 40, hot, pool) for _ in ports]
    axi = AxiWriteMemory(width, MEM_BYTES, aw=dut.axi.aw, w=dut.axi.w, b=dut.axi.b,
                         b_latency=(2, 16), aw_stall=0.3, w_stall=0.3, b_stall=0.2,
                         seed=width)
    initial = bytearray(rng.randbytes(MEM_BYTES))
    for w in hot:                       # the hot words' lanes from the pool
        initial[w * B:(w + 1) * B] = b"".join(rng.choice(pool) for _ in range(B // 8))
    axi.mem[:] = initial
    axi.acked[:] = initial
    ram = AxiRam(width, MEM_BYTES, ar=dut.axi.ar, r=dut.axi.r, mem=axi.acked,
                 latency=rng.choice([2, 6]), ar_stall=0.3, r_stall=0.3, seed=width + 1)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=width)
    wi = dut._writer.i
    taken = []                          # (cycle, tag, addr, data, be): the writer's words
    ars, rs, lock_cycles, done = [], [], [], []
    counted = [0] * n
    offered = []                        # (cycle, the sources' valid)

    async def monitor(ctx):
        cycle = 0
        async for _, _, v, r, p, lock, av, ar_, ap, rv, rp, dv, dp, *rest in ctx.tick().sample(
                wi.valid, wi.ready, wi.payload, dut._reader.lock, dut.axi.ar.valid,
                dut.axi.ar.ready, dut.axi.ar.payload, dut.axi.r.valid, dut.axi.r.payload,
                dut.atomic_done.valid, dut.atomic_done.payload,
                *(q.valid for q in ports), *(q.ready for q in ports), *durables):
            valid, ready, dur = rest[:n], rest[n:2 * n], rest[2 * n:]
            offered.append((cycle, valid))
            if lock:
                lock_cycles.append(cycle)
                assert not any(ready), f"cycle {cycle}: a source ready while locked"
            if v and r:
                taken.append((cycle, int(p.tag), int(p.addr), int(p.data), int(p.be)))
                assert not lock or p.tag == n, f"cycle {cycle}: another word under lock"
            for k in range(n):
                assert not (valid[k] and ready[k]) or taken[-1][1] == k
                counted[k] += dur[k]
            if av and ar_:
                ars.append((cycle, int(ap.addr), int(ap.len) + 1, bool(lock)))
            if rv:
                rs.append((cycle, int(rp.data)))
            if dv:
                done.append((int(dp.qp), int(dp.psn), int(dp.orig)))
            cycle += 1

    def source(k):
        async def tb(ctx):
            await send_records(ctx, ports[k], writes[k], random.Random(k), 0.3 + 0.15 * k)
        return tb

    async def tb(ctx):
        await send_items(ctx, dut, items, rng, 0.3)
        while len(col.packets) < len(items) or sum(counted) < sum(map(len, writes)) or \
                ctx.get(dut._reader.lock):
            await ctx.tick()
        await ctx.tick().repeat(40)
        await send_items(ctx, dut, [readback], rng, 0.0)
        while len(col.packets) < len(items) + 1:
            await ctx.tick()

    run_sim(dut, testbenches=[tb, *(source(k) for k in range(n))],
            processes=[axi.run, ram.run, col.run, monitor], deadline_cycles=100_000)

    # every word taken answered, in order: the cycle each word's response was taken
    answered = []
    for c, burst in axi.responses:
        answered += [c] * burst.beats
    assert len(answered) == len(taken) == sum(map(len, writes)) + \
        sum(1 for t in taken if t[1] == n)
    for k in range(n):
        assert [t[2:] for t in taken if t[1] == k] == \
            [(w["addr"], w["data"], w["be"]) for w in writes[k]], f"source {k}"
        assert counted[k] == len(writes[k]), f"source {k}: durable"

    # the atomics' ARs (one beat, under lock), in descriptor order
    locked = set(lock_cycles)
    everything = items + [readback]
    executed = [it for it in items if it.rmw]
    atomic_ars = [a for a in ars if a[3]]
    assert len(atomic_ars) == len(executed)
    # the replay: the words in the order taken, each atomic at its AR
    image = bytearray(initial)
    pos = 0
    beat_of = {}                        # item index -> the R beat its word came in
    r_index = {a[0]: sum(x[2] for x in ars if x[0] < a[0]) for a in atomic_ars}
    backs = iter(t for t in taken if t[1] == n)
    for (cycle, addr, beats, _), it in zip(atomic_ars, executed):
        assert beats == 1 and addr == it.desc["local_addr"]
        while pos < len(taken) and taken[pos][0] < cycle:
            if taken[pos][1] != n:
                write_word(image, width, Word(*taken[pos][2:]))
            pos += 1
        # every word taken before answered (quiet), every earlier beat back
        assert all(answered[j] < cycle for j in range(pos)), \
            f"cycle {cycle}: the atomic's AR before every write was answered"
        assert sum(1 for c, _ in rs if c < cycle) == r_index[cycle], \
            f"cycle {cycle}: the atomic's AR before the earlier beats came"
        word = bytes(image[addr:addr + B])
        off = it.request.va % B
        it.orig = model.execute(image, addr + off, it.request, byteorder)
        it.writes = it.op == AtomicOp.FETCH_ADD or it.orig == it.request.compare
        r_cycle, data = rs[r_index[cycle]]
        assert data.to_bytes(B, "little") == word, f"cycle {cycle}: the atomic's word"
        beat_of[id(it)] = word
        end = r_cycle
        if it.writes:
            c, tag, waddr, wdata, be = next(backs)
            assert (waddr, be) == (addr // B, 0xFF << off)
            assert wdata.to_bytes(B, "little")[off:off + 8] == image[addr + off:addr + off + 8]
            j = next(j for j, t in enumerate(taken) if t[0] == c)
            assert j == pos, "a word between the atomic's read and its write back"
            pos += 1
            end = answered[j]
        later = [a[0] for a in ars if a[0] > cycle]
        assert not later or later[0] > end, f"cycle {cycle}: an AR before the atomic's end"
        assert all(c in locked for c in range(cycle, end + 1))
    assert next(backs, None) is None
    for t in taken[pos:]:
        if t[1] != n:
            write_word(image, width, Word(*t[2:]))
    assert axi.mem == image and axi.acked == image, "the memory"

    # the results and the packets: the R beats in order (an atomic's lanes reversed when
    # little-endian), a REPLAY's value, the final read back the replay's memory
    assert done == [(it.desc["qp"], it.desc["psn"], it.orig) for it in items
                    if it.rmw or it.op == AtomicOp.REPLAY]
    beats = iter(d.to_bytes(B, "little") for _, d in rs)
    assert len(col.packets) == len(everything)
    for k, (got, it) in enumerate(zip(col.packets, everything)):
        d = it.desc
        meta = meta_dict(PACKET_DESC.const(d))
        if it.op == AtomicOp.REPLAY:
            exp = Packet((it.orig.to_bytes(8, "big") * (B // 8))[:d["length"]], meta)
        else:
            data = b"".join(next(beats) for _ in reads_of(it, width, MEM_BYTES // B))
            if it.rmw:
                assert data[:B] == beat_of[id(it)]
                data = lanes_reversed(data[:B]) + data[B:] if byteorder == "little" else data
            exp = Packet(data[:d["length"]], meta)
        assert got == exp, f"packet {k} ({it.op.name}, {d['length']} bytes)"
    assert col.packets[-1].data == bytes(image[:WORDS * B])
    # what the run had: the hot words written between atomics, both COMPARE_SWAP outcomes,
    # sources held back by the lock
    cs = [it for it in items if it.op == AtomicOp.COMPARE_SWAP]
    assert 0 < sum(it.writes for it in cs) < len(cs)
    assert sum(1 for t in taken if t[1] != n and t[2] in hot) > 20
    assert any(c in locked and any(v) for c, v in offered)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_ports_and_parameters():
    for reads, tags in ((True, 4), (False, 3)):
        ext = PayloadMemory(64, "axi4", 1 << 20, responder=True, reads=reads, atomics="big")
        assert {"atomic", "atomic_done", "axi", "resp_durable"} <= set(ext.signature.members)
        assert ext._reader.atomics == "big" and ext._writer.tags == tags
        assert ext._writer.rmw_tag == tags - 1
        assert len(ext._reader.aw.payload.addr) == ext.word_addr_bits
        Fragment.get(ext, None)
    plain = PayloadMemory(64, "axi4", 1 << 20, responder=True, reads=True)
    assert plain._writer.tags == 3 and plain._writer.rmw_tag is None
    assert not {"atomic", "atomic_done"} & set(plain.signature.members)
    Fragment.get(plain, None)
    raises(ValueError, "atomics needs responder=True",
           lambda: PayloadMemory(64, "axi4", 1 << 12, atomics="big"))
    gc.collect()


@pytest.mark.parametrize("latency, b_latency", [(2, 1), (20, 40)])
def test_cycles_per_atomic(latency, b_latency):
    """FETCH_ADDs back to back, then COMPARE_SWAPs that do not match, nothing else, no stalls:
    with ``latency`` cycles from an AR to its beat and ``b_latency`` from a write burst's data
    to its response, an atomic's AR comes ``latency + b_latency + 7`` cycles after the previous
    one's (the write back's three cycles through the writer, its response, ``quiet`` the cycle
    after, three cycles to the next AR), ``latency + 3`` after a COMPARE_SWAP that did not
    match; the other sources are held for ``latency + b_latency + 6`` (``latency + 2``)."""
    width = 64
    rng = random.Random(latency)
    dut = PayloadMemory(width, "axi4", MEM_BYTES, responder=True, reads=True, atomics="little")
    axi = AxiWriteMemory(width, MEM_BYTES, aw=dut.axi.aw, w=dut.axi.w, b=dut.axi.b,
                         b_latency=(b_latency, b_latency))
    ram = AxiRam(width, MEM_BYTES, ar=dut.axi.ar, r=dut.axi.r, mem=axi.acked, latency=latency)
    items = []
    for k in range(6):
        opcode = next(c for c, op in OPS.items() if op == (AtomicOp.FETCH_ADD if k < 4 else
                                                           AtomicOp.COMPARE_SWAP))
        req = model.AtomicRequest(opcode, 8 * (k % 2), 0, k + 1, 2 ** 64 - 1)
        items.append(Item(atomic_desc(rng, width, k % 2, 0),
                          {"op": OPS[opcode], "swap_add": k + 1, "compare": 2 ** 64 - 1}, req))
    col = StreamCollector(dut.o, width)
    ars, lock = [], []

    async def monitor(ctx):
        cycle = 0
        async for _, _, av, ar_, lk in ctx.tick().sample(dut.axi.ar.valid, dut.axi.ar.ready,
                                                         dut._reader.lock):
            if av and ar_:
                ars.append(cycle)
            lock.append(lk)
            cycle += 1

    async def tb(ctx):
        await send_items(ctx, dut, items, rng, 0.0)
        while len(col.packets) < len(items) or ctx.get(dut._reader.lock):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[axi.run, ram.run, col.run, monitor],
            deadline_cycles=5000)
    assert [b - a for a, b in zip(ars, ars[1:])] == \
        [latency + b_latency + 7] * 4 + [latency + 3]
    spans = [len(run) for run in "".join("1" if x else "0" for x in lock).split("0") if run]
    assert spans == [latency + b_latency + 6] * 4 + [latency + 2] * 2
    assert [int.from_bytes(axi.mem[a:a + 8], "little") for a in (0, 8)] == [1 + 3, 2 + 4]
