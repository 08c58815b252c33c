"""The AXI4 payload reader's atomics (``AxiPayloadReader(..., atomics=...)``) against the
reference model (``sim/models/responder/atomic.py``): random mixes of ordinary descriptors,
FETCH_ADDs, COMPARE_SWAPs (half of them matching) and REPLAYs, runs of atomics on one word, at 64
and 512 bits, both byte orders, random idle cycles on ``desc``, backpressure on ``o``, AR and R
stalls and read latency. Behind ``aw`` a write side that holds ``aw.ready`` low at random and
lands each write back a random number of cycles later (``quiet`` low meanwhile), and another
writer's words (to words nothing reads, only while ``lock`` is low) count for ``quiet`` too; the
read side reads only what has landed. Everything the descriptors see must be as the model in
descriptor order says: each packet (a READ behind an atomic sees its result, one before it does
not), each ``done``, the final memory; and the protocol: the atomic's one-beat AR only with
``lock`` high, ``quiet`` and every earlier read beat in, no AR between it and its write back's
landing, ``aw`` held until taken. The cycles an atomic takes as a function of the latencies;
the parameters."""

import gc
import random

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.layouts import PACKET_DESC, AtomicOp, WrSource
from rocegen.gateware.roce.memory.axi_reader import AxiPayloadReader
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.responder import atomic as model
from rocegen.sim.testing.amaranth_streams import StreamCollector, meta_dict, write_word
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.payload import expected_packet, random_desc
from tests.unit.memory.test_payload_reader_atomics import (
    EDGES,
    OPS,
    Item,
    Workload,
    atomic_desc,
    lanes_reversed,
    no_atomic,
    send_items,
)

#: Bytes behind the words the workload uses (descriptors near the end run into them).
PAD = 8192
#: The opcodes of FETCH_ADD and COMPARE_SWAP.
OPS_FA = next(k for k, v in OPS.items() if v == AtomicOp.FETCH_ADD)
OPS_CS = next(k for k, v in OPS.items() if v == AtomicOp.COMPARE_SWAP)


class WriteSide:
    """The write side of the bench: ``aw.ready`` low with chance ``stall``; a write back taken
    in cycle c lands in ``mem`` in cycle c + ``latency`` (random in the range, in order) and
    ``quiet`` is low from c + 1 until the cycle after it lands. Checks that ``aw`` holds its
    payload until taken and that it comes only with ``lock`` high. ``writes``: (cycle taken,
    cycle landed, addr, be). With ``foreign`` (a chance per cycle) and ``foreign_words`` (word
    addresses nothing reads) another writer's words go in too, only in cycles ``lock`` is
    low, and count for ``quiet`` as well (``foreign_writes``: how many)."""

    def __init__(self, dut, width, mem, *, stall=0.0, latency=(1, 1), foreign=0.0,
                 foreign_words=(), seed=0):
        self.dut, self.width, self.mem = dut, width, mem
        self.stall, self.latency = stall, latency
        self.foreign, self.foreign_words = foreign, list(foreign_words)
        self.rng = random.Random(seed)
        self.writes = []
        self.foreign_writes = 0

    async def run(self, ctx):
        dut = self.dut
        pending = []                    # [due cycle, write, index in writes]
        held = None
        cycle = 0
        ctx.set(dut.quiet, 1)
        while True:
            ready = not (self.stall and self.rng.random() < self.stall)
            ctx.set(dut.aw.ready, ready)
            _, _, v, p, lock = await ctx.tick().sample(dut.aw.valid, dut.aw.payload, dut.lock)
            if v:
                value = p.as_value().value
                assert held is None or held == value, f"cycle {cycle}: aw changed while held"
                held = value
                assert lock, f"cycle {cycle}: a write back without lock"
                if ready:
                    held = None
                    due = cycle + self.rng.randint(*self.latency)
                    if pending:
                        due = max(due, pending[-1][0])
                    pending.append([due, p, len(self.writes)])
                    self.writes.append([cycle, None, int(p.addr), int(p.be)])
            else:
                assert held is None, f"cycle {cycle}: aw valid dropped before taken"
            if not lock and self.foreign and self.rng.random() < self.foreign:
                due = cycle + self.rng.randint(*self.latency)
                if pending:
                    due = max(due, pending[-1][0])
                word = self.rng.choice(self.foreign_words)
                pending.append([due, FakeWrite(word, self.rng.getrandbits(self.width),
                                               (1 << self.width // 8) - 1), None])
                self.foreign_writes += 1
            while pending and pending[0][0] <= cycle:
                _, p, k = pending.pop(0)
                write_word(self.mem, self.width, p)
                if k is not None:
                    self.writes[k][1] = cycle
            ctx.set(dut.quiet, not pending)
            cycle += 1


class FakeWrite:
    """A word write as :func:`write_word` takes it."""

    def __init__(self, addr, data, be):
        self.addr, self.data, self.be = addr, data, be


class AxiAtomicRun:
    """``items`` through an AxiPayloadReader with atomics, on an AxiRam of ``image`` (its read
    side) and a :class:`WriteSide`. Records per cycle the AR handshakes (``ars``: cycle,
    address, beats, lock, quiet), R beats (``rs``: cycle), ``lock`` and ``done``."""

    def __init__(self, width, image, items, byteorder, *, idle=0.0, backpressure=0.0,
                 latency=5, ar_stall=0.0, r_stall=0.0, aw_stall=0.0, w_latency=(1, 1),
                 foreign=0.0, seed=0, **params):
        dut = self.dut = AxiPayloadReader(width, addr_width=16, atomics=byteorder, **params)
        self.ram = AxiRam(width, len(image), ar=dut.ar, r=dut.r, latency=latency,
                          ar_stall=ar_stall, r_stall=r_stall, seed=seed + 1,
                          mem=bytearray(image))
        # (another writer's words at the end of the memory, which nothing reads)
        B = width // 8
        self.write_side = WriteSide(dut, width, self.ram.mem, stall=aw_stall,
                                    latency=w_latency, foreign=foreign,
                                    foreign_words=range(len(image) // B - 16, len(image) // B),
                                    seed=seed + 2)
        self.col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed + 3)
        self.ars, self.rs, self.lock, self.done = [], [], [], []
        rng = random.Random(seed)

        async def monitor(ctx):
            cycle = 0
            async for _, _, av, ar_, ap, rv, rr, lock, quiet, dv, dp in ctx.tick().sample(
                    dut.ar.valid, dut.ar.ready, dut.ar.payload, dut.r.valid, dut.r.ready,
                    dut.lock, dut.quiet, dut.done.valid, dut.done.payload):
                if av and ar_:
                    self.ars.append((cycle, int(ap.addr), int(ap.len) + 1, bool(lock),
                                     bool(quiet)))
                if rv and rr:
                    self.rs.append(cycle)
                self.lock.append(bool(lock))
                if dv:
                    self.done.append((cycle, int(dp.qp), int(dp.psn), int(dp.orig)))
                cycle += 1

        async def tb(ctx):
            await send_items(ctx, dut, items, rng, idle)
            # (an atomic's packet may leave before its write back lands)
            while len(self.col.packets) < len(items) or ctx.get(dut.lock):
                await ctx.tick()
            await ctx.tick().repeat(5)

        run_sim(dut, testbenches=[tb], processes=[self.ram.run, self.write_side.run,
                                                   self.col.run, monitor],
                deadline_cycles=200 * len(items) + 2000)
        self.packets = self.col.packets


def expected(items, image, width, byteorder):
    """Each item's packet and ``done`` (None for none) with the model in descriptor order, and
    the memory after them."""
    B = width // 8
    mem = bytearray(image)
    packets, done = [], []
    for it in items:
        d = it.desc
        meta = meta_dict(PACKET_DESC.const(d))
        if it.op == AtomicOp.REPLAY:
            packets.append(Packet((it.orig.to_bytes(8, "big") * (B // 8))[:d["length"]], meta))
            done.append((d["qp"], d["psn"], it.orig))
        elif it.rmw and d["src"] != WrSource.GENERATOR and d["length"]:
            a = d["local_addr"]
            word = bytes(mem[a:a + B])
            orig = model.execute(mem, it.request.va, it.request, byteorder)
            assert orig == it.orig
            beat = lanes_reversed(word) if byteorder == "little" else word
            packets.append(Packet(beat[:d["length"]], meta))
            done.append((d["qp"], d["psn"], orig))
        else:
            packets.append(expected_packet(d, mem))
    return packets, done, bytes(mem)


def check_protocol(run, items, width):
    """The atomics' AXI order: each atomic's AR (one beat, ``lock`` high) with ``quiet`` and
    every earlier beat back; no AR after it until its write back landed (or, without one,
    until its word came back); ``lock`` from its AR to then."""
    B = width // 8
    rmw = [it for it in items if it.rmw and it.desc["src"] != WrSource.GENERATOR
           and it.desc["length"]]
    locked = [a for a in run.ars if a[3]]
    assert len(locked) == len(rmw), "ARs issued under lock"
    writes = iter(run.write_side.writes)
    for (cycle, addr, beats, _, quiet), it in zip(locked, rmw):
        assert beats == 1 and addr == it.desc["local_addr"] // B * B
        assert quiet, f"cycle {cycle}: the atomic's AR with a write unanswered"
        k = run.ars.index(next(a for a in run.ars if a[0] == cycle))
        earlier = sum(a[2] for a in run.ars[:k])
        assert len([c for c in run.rs if c < cycle]) == earlier, \
            f"cycle {cycle}: the atomic's AR before the earlier beats were back"
        r_cycle = run.rs[earlier]
        if it.writes:
            taken, landed, waddr, be = next(writes)
            assert waddr == addr // B and be == 0xFF << it.request.va % B
            assert taken > r_cycle
            end = landed
        else:
            end = r_cycle
        assert all(run.lock[cycle:end + 1]), f"cycle {cycle}: lock dropped before the end"
        later = [a[0] for a in run.ars if a[0] > cycle]
        assert not later or later[0] > end, f"cycle {cycle}: an AR before the atomic's end"
    assert next(writes, None) is None


def workload(rng, width, byteorder, count):
    B = width // 8
    words = 64
    image = bytearray(rng.randbytes(words * B + PAD))
    for k in range(0, words * B, 64):
        image[k:k + 8] = rng.choice(EDGES).to_bytes(8, byteorder)
    work = Workload(rng, width, words, image[:words * B], count, byteorder)
    # READs of an atomic's word right behind it, now and then
    items = []
    for it in work.items:
        items.append(it)
        if it.rmw and rng.random() < 0.2:
            d = random_desc(rng, it.request.va // B * B, rng.choice([B, 2 * B, 100]), False)
            items.append(Item(d, no_atomic(rng)))
    return image, items


@pytest.mark.parametrize("width, byteorder, idle, backpressure, latency", [
    (64, "little", 0.3, 0.3, 9), (64, "big", 0.1, 0.5, 2), (512, "little", 0.2, 0.3, 17),
    (512, "big", 0.4, 0.1, 1)])
def test_against_model(width, byteorder, idle, backpressure, latency):
    rng = random.Random(width + len(byteorder) + latency)
    image, items = workload(rng, width, byteorder, 70 if width == 64 else 45)
    run = AxiAtomicRun(width, image, items, byteorder, idle=idle, backpressure=backpressure,
                       latency=latency, ar_stall=0.3, r_stall=0.3, aw_stall=0.4,
                       w_latency=(1, 16), foreign=0.15, seed=width + latency, max_burst=8,
                       outstanding_beats=16, desc_depth=8)
    packets, done, final = expected(items, image, width, byteorder)
    assert len(run.packets) == len(items)
    for k, (got, exp) in enumerate(zip(run.packets, packets)):
        assert got == exp, f"packet {k} ({items[k].op.name}, {items[k].desc['length']} bytes)"
    assert [dn[1:] for dn in run.done] == done
    B = width // 8
    assert bytes(run.ram.mem[:-16 * B]) == final[:-16 * B]
    assert run.write_side.foreign_writes >= 5
    check_protocol(run, items, width)
    # the mix had READs of the atomics' words right behind them, both COMPARE_SWAP outcomes
    cs = [it for it in items if it.op == AtomicOp.COMPARE_SWAP]
    assert 0 < sum(it.writes for it in cs) < len(cs)
    assert any(a.rmw and b.op == AtomicOp.NONE and b.desc["src"] != WrSource.GENERATOR
               and b.desc["local_addr"] // B <= a.request.va // B
               < (b.desc["local_addr"] + b.desc["length"] + B - 1) // B
               for a, b in zip(items, items[1:]))


def test_read_error():
    """An atomic whose word comes back with SLVERR writes nothing back; its packet carries the
    error, its ``done`` is still reported (in order), the next atomic goes on."""
    width, B = 64, 8
    rng = random.Random(4)
    image = bytearray(rng.randbytes(4096))
    items = []
    for word in (3, 5, 3):
        req = model.AtomicRequest(OPS_FA, word * B, 0, 7)
        items.append(Item(atomic_desc(rng, width, word, 0),
                          {"op": AtomicOp.FETCH_ADD, "swap_add": 7, "compare": 0}, req))
    items.append(Item({**atomic_desc(rng, width, 3, 0), "src": WrSource.STREAM, "length": 8,
                       "opcode": 0}, no_atomic(rng)))
    dut = AxiPayloadReader(width, addr_width=12, atomics="little")
    ram = AxiRam(width, 4096, ar=dut.ar, r=dut.r, latency=3, mem=bytearray(image),
                 error_ranges=[(5 * B, 6 * B)])
    side = WriteSide(dut, width, ram.mem, latency=(4, 4))
    col = StreamCollector(dut.o, width)
    done = []

    async def watch(ctx):
        async for _, _, v, p in ctx.tick().sample(dut.done.valid, dut.done.payload):
            if v:
                done.append(int(p.orig))

    async def tb(ctx):
        await send_items(ctx, dut, items, rng, 0.0)
        while len(col.packets) < len(items):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[ram.run, side.run, col.run, watch],
            deadline_cycles=2000)
    v = int.from_bytes(image[3 * B:4 * B], "little")
    assert done[0] == v and done[2] == (v + 7) % 2 ** 64 and len(done) == 3
    assert [p.error for p in col.packets] == [False, True, False, False]
    assert [w[2] for w in side.writes] == [3, 3]
    assert ram.mem[3 * B:4 * B] == ((v + 14) % 2 ** 64).to_bytes(8, "little")
    assert ram.mem[5 * B:6 * B] == image[5 * B:6 * B]
    assert col.packets[3].data == ram.mem[3 * B:4 * B]


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("latency, w_latency", [(1, 1), (10, 3), (40, 60)])
def test_cycles_per_atomic(width, latency, w_latency):
    """Atomics back to back (FETCH_ADDs on a few words), no stalls, ``o`` always ready: with a
    read latency ``latency`` (AR handshake to the R beat) and a write side that lands a write
    back ``w_latency`` cycles after it takes it (``quiet`` again in the cycle after), an
    atomic's AR comes ``latency + w_latency + 4`` cycles after the previous one's, and ``lock``
    is high for ``latency + w_latency + 3`` of them (from the AR to the cycle ``quiet`` is seen
    again). A COMPARE_SWAP that does not match writes nothing: ``latency + 3`` cycles, the lock
    ``latency + 2``."""
    B = width // 8
    rng = random.Random(width)
    image = bytearray(rng.randbytes(8 * B))
    items = []
    for k in range(9):
        word, lane = k % 3, rng.randrange(B // 8)
        if k < 6:
            req = model.AtomicRequest(OPS_FA, word * B + 8 * lane, 0, k + 1)
            atom = {"op": AtomicOp.FETCH_ADD, "swap_add": k + 1, "compare": 0}
        else:       # compares that cannot match
            req = model.AtomicRequest(OPS_CS, word * B + 8 * lane, 0, 1, 2 ** 64 - 1 - k)
            atom = {"op": AtomicOp.COMPARE_SWAP, "swap_add": 1, "compare": 2 ** 64 - 1 - k}
        items.append(Item(atomic_desc(rng, width, word, lane), atom, req))
    mem = bytearray(image)
    for it in items:
        it.orig = model.execute(mem, it.request.va, it.request, "little")
        it.writes = it.op == AtomicOp.FETCH_ADD or it.orig == it.request.compare
    assert [it.writes for it in items] == [True] * 6 + [False] * 3
    run = AxiAtomicRun(width, image, items, "little", latency=latency,
                       w_latency=(w_latency, w_latency), seed=1)
    assert bytes(run.ram.mem) == bytes(mem)
    ars = [a[0] for a in run.ars]
    gaps = [b - a for a, b in zip(ars, ars[1:])]
    assert gaps == [latency + w_latency + 4] * 6 + [latency + 3] * 2
    spans, start = [], None
    for c, lock in enumerate(run.lock):
        if lock and start is None:
            start = c
        elif not lock and start is not None:
            spans.append(c - start)
            start = None
    assert spans == [latency + w_latency + 3] * 6 + [latency + 2] * 3
    assert all(run.lock[a] for a in ars)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters():
    raises(ValueError, "atomics must be None or one of little, big",
           lambda: AxiPayloadReader(64, atomics="middle"))
    plain = AxiPayloadReader(64)
    assert not {"atomic", "aw", "lock", "quiet", "done"} & set(plain.signature.members)
    dut = AxiPayloadReader(512, addr_width=40, atomics="big")
    assert {"atomic", "aw", "lock", "quiet", "done"} <= set(dut.signature.members)
    assert len(dut.aw.payload.addr) == 32 == dut.mem_addr_width
    assert len(AxiPayloadReader(64, addr_width=20, atomics="little").aw.payload.addr) == 17
    assert len(dut.aw.payload.be) == 64
    assert Shape.cast(dut.done.payload.shape()).width == 8 + 24 + 64
    for d in (plain, dut):
        Fragment.get(d, None)
    gc.collect()
