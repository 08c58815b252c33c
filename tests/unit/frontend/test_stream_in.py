"""Streaming front end against a Python memory with random write stalls and delayed durability:
each posted work request's memory holds its message (and still does at its completion), the ring
wraps, space is freed only by completions (the input stalls when the ring or the in-flight queue is
full and resumes), too-long and errored messages are dropped and counted, and the input takes one
beat per cycle when nothing is full. Also end to end through the AXI4 writer."""

import gc
import random

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring

from rocegen.gateware.lib.axi import Axi4Signature
from rocegen.gateware.roce.frontend.stream_in import STREAM_META, StreamFrontEnd
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode, WrSource
from rocegen.gateware.roce.memory.axi_writer import AxiWriter
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.verbs import SEND_VERBS

#: The send opcodes (READ is the scheduler's business, not this block's).
SEND_OPS = tuple(WrOpcode[name] for name in SEND_VERBS)

WIDTHS = [64, 512]
NOT_OK = [s.value for s in CplStatus if s != CplStatus.OK]


class Message:
    def __init__(self, data, meta, error=False):
        self.data, self.meta, self.error = bytes(data), meta, error


def rand_meta(rng):
    return {"qp": rng.randrange(256), "opcode": rng.choice(SEND_OPS).value,
            "imm": rng.getrandbits(32), "remote_offset": rng.getrandbits(64)}


def make_messages(rng, width, max_message, count, *, drops=True):
    B = width // 8
    special = [0, 1, B - 1, B, B + 1, max_message - 1, max_message]
    if drops:
        special += [max_message + 1, 3 * max_message + 5]
    msgs = []
    for k in range(count):
        n = special[k] if k < len(special) else rng.randrange(max_message + 1)
        error = drops and k >= len(special) and rng.random() < 0.1
        msgs.append(Message(rng.randbytes(n), rand_meta(rng), error))
    rng.shuffle(msgs)
    return msgs


def beats(msg, width, rng):
    """(data, keep, last) beats of a message, with random bytes outside ``keep``."""
    B = width // 8
    if not msg.data:
        return [(rng.getrandbits(width), 0, 1)]
    out = []
    for off in range(0, len(msg.data), B):
        chunk = msg.data[off:off + B]
        junk = rng.getrandbits(width) >> (8 * len(chunk)) << (8 * len(chunk))
        out.append((int.from_bytes(chunk, "little") | junk, (1 << len(chunk)) - 1,
                    int(off + B >= len(msg.data))))
    return out


class OnChip(Elaboratable):
    """The front end with an on-chip memory's durability: a word is durable when accepted."""

    def __init__(self, fe):
        self.fe = fe

    def elaborate(self, platform):
        m = Module()
        m.submodules.fe = fe = self.fe
        m.d.comb += fe.mem_durable.eq(fe.mem.valid & fe.mem.ready)
        return m


class Bench:
    """Drives a :class:`StreamFrontEnd`: messages in, a memory on ``mem`` (random stalls, words
    durable after a random delay, several per cycle), work requests taken with random stalls and
    completed in order after a random delay. ``hold`` withholds every completion until the input
    has been stalled for that many cycles in a row (then once more, and so on)."""

    def __init__(self, fe, width, messages, *, idle=0.0, mem_stall=0.0, durable_delay=(1, 1),
                 wr_stall=0.0, cpl_delay=(1, 1), hold=None, on_chip=False, seed=0):
        self.fe, self.width, self.messages = fe, width, messages
        self.idle, self.mem_stall, self.durable_delay = idle, mem_stall, durable_delay
        self.wr_stall, self.cpl_delay, self.hold = wr_stall, cpl_delay, hold
        self.on_chip = on_chip
        self.rng = random.Random(seed)
        self.kept = [m for m in messages if not m.error and len(m.data) <= fe.max_message]
        self.written = {}
        self.durable = {}
        self.posted = []            # (cycle, wr payload)
        self.taken = []             # cycles of input handshakes
        self.holds = []             # (cycle, messages posted, ring_used) when held completions went
        self.done_feeding = False
        self.completed = 0
        self.settled = False

    async def feed(self, ctx):
        fe, rng = self.fe, self.rng
        for msg in self.messages:
            for d, keep, last in beats(msg, self.width, rng):
                while self.idle and rng.random() < self.idle:
                    ctx.set(fe.i.valid, 0)
                    await ctx.tick()
                ctx.set(fe.i.payload, {"data": d, "keep": keep, "last": last,
                                       "error": int(msg.error and last), "meta": msg.meta})
                ctx.set(fe.i.valid, 1)
                await ctx.tick().until(fe.i.ready)
        ctx.set(fe.i.valid, 0)
        self.done_feeding = True

    def check_holds(self, msg, addr, what):
        for image, name in ((self.durable, "durable"), (self.written, "written")):
            missing = [k for k in range(len(msg.data)) if addr + k not in image]
            assert not missing, f"{what}: {name} memory lacks bytes {missing[:4]}... at {addr:#x}"
            got = bytes(image[addr + k] for k in range(len(msg.data)))
            assert got == msg.data, f"{what}: {name} memory at {addr:#x} differs from the message"

    async def run(self, ctx):
        fe, rng, B = self.fe, self.rng, self.width // 8
        base_w, ring_w = fe.ring_base // B, fe.ring_words
        dq = []                     # (due, addr, data, be) writes not yet durable
        cq = []                     # (due, wr_id, status) completions in posting order
        completed = 0
        stalled = 0
        holding = self.hold is not None
        cycle = 0
        while True:
            mem_ready = not (self.mem_stall and rng.random() < self.mem_stall)
            ctx.set(fe.mem.ready, mem_ready)
            if not self.on_chip:
                n = 0
                while dq and dq[0][0] <= cycle and n < 5:
                    _, addr, d, be = dq.pop(0)
                    self.apply(self.durable, addr, d, be)
                    n += 1
                ctx.set(fe.mem_durable, n)
            wr_ready = not (self.wr_stall and rng.random() < self.wr_stall)
            ctx.set(fe.wr.ready, wr_ready)
            cpl = None
            if cq and cq[0][0] <= cycle and not holding:
                cpl = cq.pop(0)
                k = cpl[1]
                _, p = self.posted[k]
                self.check_holds(self.kept[k], int(p.wr.local_addr), f"completion of message {k}")
                ctx.set(fe.cpl.payload, {"wr_id": k, "qp": 0, "status": cpl[2],
                                         "src": WrSource.STREAM.value})
                ctx.set(fe.cpl.valid, 1)
            elif rng.random() < 0.05:
                ctx.set(fe.cpl.payload, {"wr_id": 0, "qp": 0, "status": 0,
                                         "src": rng.choice([WrSource.USER, WrSource.GENERATOR]).value})
                ctx.set(fe.cpl.valid, 1)
            else:
                ctx.set(fe.cpl.valid, 0)
            (_, _, m_valid, m_pay, w_valid, w_pay, i_valid, i_ready, used, c_ready) = \
                await ctx.tick().sample(fe.mem.valid, fe.mem.payload, fe.wr.valid, fe.wr.payload,
                                        fe.i.valid, fe.i.ready, fe.ring_used, fe.cpl.ready)
            assert c_ready
            assert used <= ring_w
            if i_valid and i_ready:
                self.taken.append(cycle)
            if m_valid and mem_ready:
                addr = int(m_pay.addr)
                assert base_w <= addr < base_w + ring_w, f"write at word {addr:#x} outside the ring"
                self.apply(self.written, addr, int(m_pay.data), int(m_pay.be))
                if self.on_chip:
                    self.apply(self.durable, addr, int(m_pay.data), int(m_pay.be))
                else:
                    dq.append((cycle + rng.randint(*self.durable_delay), addr, int(m_pay.data),
                               int(m_pay.be)))
            if w_valid and wr_ready:
                k = len(self.posted)
                assert k < len(self.kept), "more work requests than stored messages"
                self.check_post(k, w_pay)
                self.posted.append((cycle, w_pay))
                due = cycle + rng.randint(*self.cpl_delay)
                if cq:
                    due = max(due, cq[-1][0] + 1)
                status = 0 if rng.random() < 0.8 else rng.choice(NOT_OK)
                cq.append((due, k, status))
            if cpl is not None:
                completed += 1
            # withheld completions go once the input has been stuck for a while
            stalled = stalled + 1 if (i_valid and not i_ready) else 0
            if holding and stalled >= self.hold:
                self.holds.append((cycle, len(self.posted), int(used)))
                holding = False
                stalled = 0             # the next hold needs a stall of its own
            elif holding and self.done_feeding:
                holding = False
            elif not holding and self.hold is not None and not cq and not self.done_feeding:
                holding = True
            self.completed = completed
            self.settled = self.done_feeding and completed == len(self.kept) and not dq
            cycle += 1

    def apply(self, image, addr, d, be):
        B = self.width // 8
        word = d.to_bytes(B, "little")
        for j in range(B):
            if be >> j & 1:
                image[addr * B + j] = word[j]

    def check_post(self, k, p):
        fe, B = self.fe, self.width // 8
        msg = self.kept[k]
        w = p.wr
        assert p.src == WrSource.STREAM
        assert int(w.wr_id) == k
        assert int(w.length) == len(msg.data)
        assert (int(w.qp), w.opcode.value, int(w.imm), int(w.remote_offset)) == (
            msg.meta["qp"], msg.meta["opcode"], msg.meta["imm"], msg.meta["remote_offset"])
        addr = int(w.local_addr)
        assert addr % B == 0
        assert fe.ring_base <= addr and addr + len(msg.data) <= fe.ring_base + fe.ring_bytes
        self.check_holds(msg, addr, f"posting of message {k}")

    def finish(self, ctx):
        fe = self.fe
        drops_err = sum(1 for m in self.messages if m.error)
        drops_long = sum(1 for m in self.messages if not m.error and len(m.data) > fe.max_message)
        assert len(self.posted) == len(self.kept)
        assert ctx.get(fe.posted) == len(self.kept)
        assert ctx.get(fe.drop_error) == drops_err
        assert ctx.get(fe.drop_too_long) == drops_long
        assert ctx.get(fe.completed_ok) + ctx.get(fe.completed_err) == len(self.kept)
        assert ctx.get(fe.ring_used) == 0
        assert ctx.get(fe.inflight) == 0


def simulate(fe, bench, *, top=None, deadline=100_000):
    async def tb(ctx):
        await bench.feed(ctx)
        while not bench.settled:
            await ctx.tick()
        for _ in range(3):
            await ctx.tick()
        bench.finish(ctx)

    run_sim(top or fe, testbenches=[tb], processes=[bench.run], deadline_cycles=deadline)


@pytest.mark.parametrize("width", WIDTHS)
def test_random_traffic_with_stalls_and_wrap(width):
    B = width // 8
    rng = random.Random(width)
    max_message = 9 * B + 5
    fe = StreamFrontEnd(width, ring_base=0x4000 * B // 8, ring_bytes=50 * B, max_message=max_message,
                        max_inflight=16)
    msgs = make_messages(rng, width, max_message, 150)
    bench = Bench(fe, width, msgs, idle=0.2, mem_stall=0.3, durable_delay=(1, 25), wr_stall=0.3,
                  cpl_delay=(1, 40), seed=width)
    simulate(fe, bench)
    starts = [int(p.wr.local_addr) for _, p in bench.posted]
    wraps = sum(1 for a, b in zip(starts, starts[1:]) if b < a)
    assert wraps >= 3, "the ring never wrapped"
    assert any(a == fe.ring_base for a in starts[1:])


@pytest.mark.parametrize("width", WIDTHS)
def test_ring_full_stalls_until_completions(width):
    B = width // 8
    rng = random.Random(width + 1)
    max_message = 4 * B
    fe = StreamFrontEnd(width, ring_base=0, ring_bytes=10 * B, max_message=max_message, max_inflight=64)
    msgs = [Message(rng.randbytes(rng.randrange(B, max_message + 1)), rand_meta(rng)) for _ in range(24)]
    bench = Bench(fe, width, msgs, idle=0.1, durable_delay=(1, 6), cpl_delay=(1, 5), hold=40,
                  seed=width)
    simulate(fe, bench)
    assert len(bench.holds) >= 3
    R, M = fe.ring_words, 4
    for _, _, used in bench.holds:
        assert used > R - 2 * M         # the next message truly could not fit (tail skip < M)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("limit", [1, 3])
def test_inflight_limit_stalls_until_completions(width, limit):
    B = width // 8
    rng = random.Random(width + limit)
    fe = StreamFrontEnd(width, ring_base=64 * B, ring_bytes=256 * B, max_message=2 * B,
                        max_inflight=limit)
    msgs = [Message(rng.randbytes(rng.randrange(0, 2 * B + 1)), rand_meta(rng)) for _ in range(15)]
    bench = Bench(fe, width, msgs, wr_stall=0.2, cpl_delay=(1, 3), hold=30, seed=width)
    simulate(fe, bench)
    assert len(bench.holds) >= 3
    assert all(posted % limit == 0 and posted > 0 for _, posted, _ in bench.holds)


@pytest.mark.parametrize("width", WIDTHS)
def test_one_beat_per_cycle_when_not_full(width):
    B = width // 8
    rng = random.Random(width + 3)
    max_message = 6 * B
    fe = StreamFrontEnd(width, ring_base=0x10000, ring_bytes=512 * B, max_message=max_message)
    msgs = [Message(rng.randbytes(rng.randrange(0, max_message + 1)), rand_meta(rng))
            for _ in range(60)]
    top = OnChip(fe)
    bench = Bench(fe, width, msgs, cpl_delay=(5, 20), on_chip=True, seed=width)
    simulate(fe, bench, top=top)
    nbeats = sum(max(1, -(-len(m.data) // B)) for m in msgs)
    assert len(bench.taken) == nbeats
    assert bench.taken == list(range(bench.taken[0], bench.taken[0] + nbeats)), "input stalled"


@pytest.mark.parametrize("width", WIDTHS)
def test_drops_give_space_back(width):
    # a ring with room for one message at a time: drops between stored messages must not leak
    B = width // 8
    rng = random.Random(width + 4)
    max_message = 3 * B + 1
    fe = StreamFrontEnd(width, ring_base=B, ring_bytes=4 * B, max_message=max_message, max_inflight=2)
    msgs = []
    for k in range(30):
        kind = k % 3
        if kind == 0:
            msgs.append(Message(rng.randbytes(rng.randrange(max_message + 1)), rand_meta(rng)))
        elif kind == 1:
            msgs.append(Message(rng.randbytes(rng.randrange(max_message + 1, 6 * B)), rand_meta(rng)))
        else:
            msgs.append(Message(rng.randbytes(rng.randrange(0, 3 * B)), rand_meta(rng), error=True))
    bench = Bench(fe, width, msgs, idle=0.1, mem_stall=0.2, durable_delay=(1, 8), cpl_delay=(1, 10),
                  seed=width)
    simulate(fe, bench)
    assert {int(p.wr.local_addr) for _, p in bench.posted} == {fe.ring_base}


class AxiSystem(Elaboratable):
    """Front end -> AXI4 writer -> an AXI4 memory slave."""

    def __init__(self, width, **fe_args):
        self.fe = StreamFrontEnd(width, **fe_args)
        self.writer = AxiWriter(width, addr_width=32, max_burst=8, max_outstanding=4)
        self.bus = Axi4Signature(32, width).create()

    def elaborate(self, platform):
        m = Module()
        m.submodules.fe, m.submodules.writer = self.fe, self.writer
        wiring.connect(m, self.fe.mem, self.writer.i)
        for ch in ("aw", "w", "b"):
            wiring.connect(m, getattr(self.writer, ch), wiring.flipped(getattr(self.bus, ch)))
        m.d.comb += [self.fe.mem_durable.eq(self.writer.durable), self.bus.ar.valid.eq(0),
                     self.bus.r.ready.eq(0)]
        return m


@pytest.mark.parametrize("width", WIDTHS)
def test_end_to_end_through_axi(width):
    B = width // 8
    rng = random.Random(width + 5)
    max_message = 5 * B + 3
    top = AxiSystem(width, ring_base=0x2000, ring_bytes=24 * B, max_message=max_message, max_inflight=8)
    fe = top.fe
    ram = AxiRam.on_bus(top.bus, width, 0x2000 + 24 * B, ar_stall=0.3, seed=width)
    msgs = make_messages(rng, width, max_message, 40)
    bench = Bench(fe, width, msgs, idle=0.2, wr_stall=0.2, cpl_delay=(1, 30), on_chip=True, seed=width)
    # durability comes from the writer: the bench's images follow the AXI memory instead
    bench.durable = _RamImage(ram)
    bench.written = bench.durable

    async def tb(ctx):
        await bench.feed(ctx)
        while len(bench.posted) < len(bench.kept):
            await ctx.tick()
        for _ in range(100):
            await ctx.tick()
        bench.finish(ctx)

    async def run(ctx):
        # the bench does not model memory here: keep mem.ready/mem_durable to the writer
        await _run_without_memory(bench, ctx)

    run_sim(top, testbenches=[tb], processes=[run, ram.run], deadline_cycles=100_000)
    assert ram.write_bursts


class _RamImage(dict):
    """A byte-address view of an AXI memory slave's backing store."""

    def __init__(self, ram):
        super().__init__()
        self.ram = ram

    def __contains__(self, addr):
        return 0 <= addr < len(self.ram.mem)

    def __getitem__(self, addr):
        return self.ram.mem[addr]


async def _run_without_memory(bench, ctx):
    """The work-request and completion side of :meth:`Bench.run` only."""
    fe, rng = bench.fe, bench.rng
    cq = []
    cycle = 0
    while True:
        wr_ready = not (bench.wr_stall and rng.random() < bench.wr_stall)
        ctx.set(fe.wr.ready, wr_ready)
        cpl = None
        if cq and cq[0][0] <= cycle:
            cpl = cq.pop(0)
            _, p = bench.posted[cpl[1]]
            bench.check_holds(bench.kept[cpl[1]], int(p.wr.local_addr), f"completion of {cpl[1]}")
            ctx.set(fe.cpl.payload, {"wr_id": cpl[1], "qp": 0, "status": 0,
                                     "src": WrSource.STREAM.value})
            ctx.set(fe.cpl.valid, 1)
        else:
            ctx.set(fe.cpl.valid, 0)
        _, _, w_valid, w_pay = await ctx.tick().sample(fe.wr.valid, fe.wr.payload)
        if w_valid and wr_ready:
            k = len(bench.posted)
            bench.check_post(k, w_pay)
            bench.posted.append((cycle, w_pay))
            due = max([cycle + rng.randint(*bench.cpl_delay)] + [c + 1 for c, _, _ in cq[-1:]])
            cq.append((due, k, 0))
        cycle += 1


@pytest.mark.parametrize("kwargs,exc", [
    ({"width": 32}, ValueError),
    ({"ring_base": 4}, ValueError),
    ({"ring_base": -8}, ValueError),
    ({"ring_bytes": 100}, ValueError),
    ({"ring_bytes": 0}, ValueError),
    ({"max_message": 0}, ValueError),
    ({"max_message": 4097}, ValueError),
    ({"max_inflight": 0}, ValueError),
    ({"ring_base": (1 << 32) - 4096 + 8}, ValueError),
    ({"addr_width": 8}, ValueError),
    ({"addr_width": 33}, ValueError),
    ({"ring_base": 8.0}, TypeError),
    ({"max_message": None}, TypeError),
])
@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameter_validation(kwargs, exc):
    args = {"width": 64, "ring_base": 0x1000, "ring_bytes": 4096, "max_message": 1024, **kwargs}
    with pytest.raises(exc):
        StreamFrontEnd(**args)
    gc.collect()    # the half-built component warns when collected: inside this test


def test_meta_layout():
    assert set(STREAM_META.members) == {"qp", "opcode", "imm", "remote_offset"}
    fe = StreamFrontEnd(512, 0, 1 << 20, 9000)
    assert fe.mem.payload.addr.shape().width == 26
    assert fe.i.payload.meta.shape() == STREAM_META
    assert "drop_too_long" in rtlil.convert(fe)


@pytest.mark.parametrize("width", WIDTHS)
def test_latency(width):
    """On-chip durability, nothing stalled: a beat taken in cycle t is on ``mem`` in t + 2 and
    a message's work request is offered 4 cycles after its last beat is taken."""
    B = width // 8
    fe = StreamFrontEnd(width, ring_base=0, ring_bytes=64 * B, max_message=4 * B)
    top = OnChip(fe)
    msg = bytes(range(3 * B // 2))

    async def tb(ctx):
        ctx.set(fe.mem.ready, 1)
        ctx.set(fe.wr.ready, 0)
        taken, mem_at, wr_at = [], [], None
        beats_ = beats(Message(msg, {"qp": 1, "opcode": 0, "imm": 0, "remote_offset": 0}),
                       width, random.Random(0))
        k = 0
        for cycle in range(20):
            if k < len(beats_):
                d, keep, last = beats_[k]
                ctx.set(fe.i.payload, {"data": d, "keep": keep, "last": last, "error": 0,
                                       "meta": {"qp": 1, "opcode": 0, "imm": 0,
                                                "remote_offset": 0}})
            ctx.set(fe.i.valid, k < len(beats_))
            _, _, i_valid, i_ready, m_valid, w_valid = await ctx.tick().sample(
                fe.i.valid, fe.i.ready, fe.mem.valid, fe.wr.valid)
            if i_valid and i_ready:
                taken.append(cycle)
                k += 1
            if m_valid:
                mem_at.append(cycle)
            if w_valid and wr_at is None:
                wr_at = cycle
        assert taken == [0, 1]
        assert mem_at == [2, 3]
        assert wr_at == taken[-1] + 4

    run_sim(top, testbenches=[tb])


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("words", [0, 1])
def test_max_message_within_a_word(width, words):
    # a limit of a few bytes: a single beat can carry more than the limit allows
    B = width // 8
    rng = random.Random(width + words)
    max_message = 3 if words == 0 else B - 1
    fe = StreamFrontEnd(width, ring_base=0, ring_bytes=8 * B, max_message=max_message,
                        max_inflight=4)
    msgs = make_messages(rng, width, max_message, 40)
    bench = Bench(fe, width, msgs, idle=0.1, mem_stall=0.2, durable_delay=(1, 5),
                  cpl_delay=(1, 8), seed=width)
    simulate(fe, bench)
