"""Payload placement of the responder (:class:`RespPlace`): random datagrams and placement records
(any alignment, pads, empty payloads, write 0, datagrams shorter than their payload) with idle
cycles on both inputs and backpressure on the memory port, against a byte-image model; every word
write has exactly the intended byte enables, words come once each in increasing order, ``done``
pulses once per packet after its last write; one beat per cycle back to back."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.responder.resp_layouts import RESP_PLACE
from rocegen.gateware.roce.responder.resp_place import RespPlace
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamDriver, send_records
from rocegen.sim.testing.harness import raises, run_sim

AW = 10                 # memory word-address bits of the tests: 2^10 words


def make_cases(rng, width, count):
    """(packet, record) pairs: headers of 40..60 bytes (and the extremes 0 and 127), payloads
    of 0..300 bytes at random addresses, some with a pad after the payload, some with write 0,
    some datagrams cut short of their payload (or of their headers)."""
    B = width // 8
    cases = []
    for n in range(count):
        skip = rng.choice([0, 127]) if n % 25 == 3 else rng.randint(40, 60)
        length = rng.choice([0, 1, B - 1, B, B + 1]) if rng.random() < 0.2 else rng.randint(0, 300)
        size = skip + length
        r = rng.random()
        if r < 0.25:
            size += rng.choice([1, 2, 3, rng.randint(1, 2 * B)])         # pad after the payload
        elif r < 0.3:
            size = rng.randrange(size) if size else 0                    # malformed: too short
        top = B << AW
        addr = rng.choice([rng.getrandbits(32),
                           rng.randrange(top) + (rng.getrandbits(32 - AW - 3) * top
                                                 if top < 1 << 32 else 0),
                           (rng.getrandbits(32) // top) * top + top - rng.randint(1, 2 * B)])
        record = {"write": int(rng.random() >= 0.1), "addr": addr % (1 << 32), "skip": skip,
                  "length": length}
        cases.append((Packet(rng.randbytes(size)), record))
    return cases


def expected_writes(pkt, rec, width, addr_width=AW):
    """The word writes of one packet: ``(word address, be, {lane: byte})`` in order."""
    B = width // 8
    if not rec["write"]:
        return []
    words = []
    payload = pkt.data[rec["skip"]:rec["skip"] + rec["length"]]
    for k, byte in enumerate(payload):
        a = rec["addr"] + k
        word = (a // B) % (1 << addr_width)
        if not words or words[-1][0] != word:
            words.append((word, 0, {}))
        w, be, lanes = words[-1]
        lanes[a % B] = byte
        words[-1] = (w, be | 1 << (a % B), lanes)
    return words


def model_image(cases, width, addr_width=AW):
    B = width // 8
    mem = bytearray(B << addr_width)
    for pkt, rec in cases:
        if rec["write"]:
            for k, byte in enumerate(pkt.data[rec["skip"]:rec["skip"] + rec["length"]]):
                mem[(rec["addr"] + k) % len(mem)] = byte
    return mem


class MemPort:
    """Takes the word writes with random backpressure, checks the stream rule (an offered write
    stays until taken), and records writes and ``done`` pulses with their cycles."""

    def __init__(self, dut, *, backpressure=0.0, seed=0):
        self.dut = dut
        self.backpressure = backpressure
        self.rng = random.Random(seed)
        self.writes = []            # (cycle, addr, data, be)
        self.dones = []             # cycles
        self.cycle = 0

    async def run(self, ctx):
        o = self.dut.o
        held = None
        while True:
            ready = not (self.backpressure and self.rng.random() < self.backpressure)
            ctx.set(o.ready, ready)
            _, _, valid, payload, done = await ctx.tick().sample(o.valid, o.payload, self.dut.done)
            self.cycle += 1
            value = (int(payload.addr), int(payload.data), int(payload.be))
            if held is not None:
                assert valid and value == held, "an offered write changed before it was taken"
            held = value if valid and not ready else None
            if valid and ready:
                self.writes.append((self.cycle, *value))
            if done:
                self.dones.append(self.cycle)


def run_cases(width, cases, *, idle=0.0, act_idle=0.0, backpressure=0.0, seed=0,
              addr_width=AW):
    dut = RespPlace(width, addr_width)
    port = MemPort(dut, backpressure=backpressure, seed=seed + 1)
    driver = StreamDriver(dut.i, width, idle=idle, seed=seed + 2)
    rng = random.Random(seed + 3)

    async def beats(ctx):
        await driver.send(ctx, [pkt for pkt, _ in cases])
        while len(port.dones) < len(cases):
            await ctx.tick()
        await ctx.tick().repeat(5)

    async def records(ctx):
        await send_records(ctx, dut.act, [rec for _, rec in cases], rng, act_idle)

    run_sim(dut, testbenches=[beats, records], processes=[port.run], deadline_cycles=200_000)
    return port


def check(port, cases, width, addr_width=AW):
    """Each packet's writes (those taken before its ``done``) are exactly the expected ones, and
    the memory image matches the model (for a small memory)."""
    B = width // 8
    assert len(port.dones) == len(cases), "done must pulse once per packet"
    assert all(b > a for a, b in zip(port.dones, port.dones[1:]))
    mem = {}
    start = 0
    writes = list(port.writes)
    for n, ((pkt, rec), done) in enumerate(zip(cases, port.dones)):
        got = [w for w in writes if start <= w[0] < done]
        start = done
        want = expected_writes(pkt, rec, width, addr_width)
        assert [(a, be) for _, a, _, be in got] == [(a, be) for a, be, _ in want], \
            f"packet {n} ({len(pkt.data)} bytes, {rec}): word writes/byte enables differ"
        for (_, a, data, be), (_, _, lanes) in zip(got, want):
            word = data.to_bytes(B, "little")
            assert {k: word[k] for k in lanes} == lanes, f"packet {n}: data of word {a:#x}"
            for k in range(B):
                if be >> k & 1:
                    mem[a * B + k] = word[k]
    assert all(w[0] < port.dones[-1] for w in writes), "a write after the last done"
    if addr_width <= 16:
        image = bytearray(B << addr_width)
        for a, byte in mem.items():
            image[a] = byte
        assert image == model_image(cases, width, addr_width)


@pytest.mark.parametrize("width, idle, backpressure, seed", [
    (64, 0.0, 0.0, 1), (64, 0.3, 0.3, 2), (64, 0.2, 0.7, 3),
    (128, 0.3, 0.3, 4),
    (512, 0.0, 0.0, 5), (512, 0.3, 0.3, 6), (512, 0.2, 0.7, 7),
])
def test_against_model(width, idle, backpressure, seed):
    rng = random.Random(seed)
    cases = make_cases(rng, width, 120 if width == 64 else 200)
    port = run_cases(width, cases, idle=idle, act_idle=idle, backpressure=backpressure, seed=seed)
    check(port, cases, width)


@pytest.mark.parametrize("width", [64, 512])
def test_every_alignment(width):
    """Every shift (addr - skip) mod W/8 and every first-lane and last-lane offset of a short
    payload, back to back and without stalls."""
    B = width // 8
    rng = random.Random(width)
    cases = []
    for a in range(B):
        for skip in (40, 41, 40 + B // 2 - 1):
            length = rng.choice([1, 2, B - 1, B, B + 1, 3 * B - 2])
            pkt = Packet(rng.randbytes(skip + length + rng.randint(0, 3)))
            cases.append((pkt, {"write": 1, "addr": 4096 + a, "skip": skip, "length": length}))
    port = run_cases(width, cases)
    check(port, cases, width)


def test_small_address_space_wraps():
    """Word addresses wrap modulo 2^addr_width, also inside one payload."""
    rng = random.Random(9)
    cases = [(Packet(rng.randbytes(50 + 40)), {"write": 1, "addr": (1 << 32) - 13 + k,
                                               "skip": 50, "length": 40}) for k in range(8)]
    cases += make_cases(rng, 64, 20)
    port = run_cases(64, cases, idle=0.2, backpressure=0.3, addr_width=2)
    check(port, cases, 64, addr_width=2)


@pytest.mark.parametrize("width", [64, 512])
def test_full_address_space(width):
    """32-bit word addresses (wider than a byte address once the lane bits are added): payloads
    below their header length in the address space (addr - skip < 0) and crossing 2^32 bytes."""
    rng = random.Random(width + 1)
    cases = []
    for addr in (0, 1, 7, 39, 63, (1 << 32) - 1, (1 << 32) - 100, rng.getrandbits(32)):
        length = rng.randint(1, 200)
        cases.append((Packet(rng.randbytes(60 + length)),
                      {"write": 1, "addr": addr, "skip": 60, "length": length}))
    port = run_cases(width, cases, idle=0.2, backpressure=0.3, seed=width, addr_width=32)
    check(port, cases, width, addr_width=32)


@pytest.mark.parametrize("width, shift", [(64, 0), (64, 3), (512, 0), (512, 17)])
def test_throughput(width, shift):
    """N back-to-back packets of k full beats each, without idle cycles or backpressure: one
    beat per cycle, plus one cycle per packet when the payload's tail spills into one more
    word; each word is offered in the cycle after its beat is taken."""
    B = width // 8
    N, k, skip = 20, 6, 40
    rng = random.Random(shift)
    cases = [(Packet(rng.randbytes(k * B)),
              {"write": 1, "addr": 64 * B * n + skip + shift, "skip": skip, "length": k * B - skip})
             for n in range(N)]
    dut = RespPlace(width, AW)
    port = MemPort(dut)
    driver = StreamDriver(dut.i, width)
    taken = []

    async def beats(ctx):
        await driver.send(ctx, [pkt for pkt, _ in cases])
        while len(port.dones) < N:
            await ctx.tick()

    async def records(ctx):
        await send_records(ctx, dut.act, [rec for _, rec in cases])

    async def watch(ctx):
        cycle = 0
        async for _, _, v, r in ctx.tick().sample(dut.i.valid, dut.i.ready):
            cycle += 1
            if v and r:
                taken.append(cycle)

    run_sim(dut, testbenches=[beats, records], processes=[port.run, watch], deadline_cycles=10_000)
    check(port, cases, width)
    extra = 1 if shift else 0              # the spilled tail word of each packet
    assert len(taken) == N * k
    assert taken[-1] - taken[0] == N * k - 1 + (N - 1) * extra
    # latency: a word is offered in the cycle after its beat is taken (the first payload byte is
    # in beat skip // (W/8)), a spilled tail word in the cycle after that
    assert port.writes[0][0] == taken[skip // B] + 1
    lasts = taken[k - 1::k]
    assert {c - 1 for c, *_ in port.writes} <= set(taken) | {t + 1 for t in lasts}
    assert len(port.writes) == N * (k - skip // B + extra)
    assert port.dones[-1] <= taken[0] + N * (k + extra) + 2


def test_record_before_and_after_beats():
    """The record may come long before the packet's beats or long after them (the beats wait)."""
    rng = random.Random(11)
    cases = make_cases(rng, 64, 10)
    dut = RespPlace(64, AW)
    port = MemPort(dut)
    driver = StreamDriver(dut.i, 64)

    async def beats(ctx):
        for n, (pkt, _) in enumerate(cases):
            if n % 2:
                await ctx.tick().repeat(30)
            await driver.send(ctx, [pkt])
        while len(port.dones) < len(cases):
            await ctx.tick()

    async def records(ctx):
        for n, (_, rec) in enumerate(cases):
            if not n % 2:
                await ctx.tick().repeat(40)
            await send_records(ctx, dut.act, [rec])

    run_sim(dut, testbenches=[beats, records], processes=[port.run], deadline_cycles=20_000)
    check(port, cases, 64)


@pytest.mark.parametrize("width, swap8", [(64, False), (64, True), (512, True)])
def test_tags_come_out_with_their_packets_words(width, swap8):
    """``tag``: every word write carries the tag its packet's record came with (the READ
    requester marks an atomic's original so); with ``swap8`` too, a packet whose record asked
    for it has each written word reversed per 8-byte lane, the others as they are."""
    rng = random.Random(width + swap8)
    cases = make_cases(rng, width, 80)
    tags = [rng.getrandbits(1) for _ in cases]
    swaps = [rng.getrandbits(1) if swap8 else 0 for _ in cases]
    dut = RespPlace(width, AW, swap8=swap8, tag=True)
    driver = StreamDriver(dut.i, width, idle=0.3, seed=5)
    writes, dones = [], []

    async def port(ctx):
        cycle = 0
        while True:
            ctx.set(dut.o.ready, rng.random() >= 0.3)
            _, _, valid, ready, payload, tag, done = await ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload, dut.o_tag, dut.done)
            cycle += 1
            if valid and ready:
                writes.append((cycle, int(payload.addr), int(payload.data), int(payload.be),
                               int(tag)))
            if done:
                dones.append(cycle)

    async def beats(ctx):
        await driver.send(ctx, [pkt for pkt, _ in cases])
        while len(dones) < len(cases):
            await ctx.tick()

    async def records(ctx):
        for (_, rec), tag, swap in zip(cases, tags, swaps):
            ctx.set(dut.tag, tag)
            if swap8:
                ctx.set(dut.swap, swap)
            await send_records(ctx, dut.act, [rec])

    run_sim(dut, testbenches=[beats, records], processes=[port], deadline_cycles=200_000)
    B, start = width // 8, 0
    for n, ((pkt, rec), done) in enumerate(zip(cases, dones)):
        got = [w for w in writes if start <= w[0] < done]
        start = done
        want = expected_writes(pkt, rec, width)
        assert [(a, be, t) for _, a, _, be, t in got] == [(a, be, tags[n]) for a, be, _ in want]
        for (_, a, data, _, _), (_, _, lanes) in zip(got, want):
            word = data.to_bytes(B, "little")
            if swaps[n]:
                word = b"".join(word[i:i + 8][::-1] for i in range(0, B, 8))
            assert {k: word[k] for k in lanes} == lanes, f"packet {n}: data of word {a:#x}"
    assert any(tags) and not all(tags)


def test_parameters():
    raises(TypeError, r"tag must be a bool, not 1", lambda: RespPlace(64, 8, tag=1))
    raises(ValueError, r"width must be one of 64, 128, 256, 512 bits, not 96", lambda: RespPlace(96, 8))
    raises(TypeError, r"width must be an integer number of bits, not '64'", lambda: RespPlace("64", 8))
    raises(ValueError, r"addr_width must be 1\.\.32 bits, not 0", lambda: RespPlace(64, 0))
    raises(ValueError, r"addr_width must be 1\.\.32 bits, not 33", lambda: RespPlace(64, 33))
    raises(TypeError, r"addr_width must be an integer number of bits, not 8\.0",
           lambda: RespPlace(64, 8.0))
    raises(TypeError, r"addr_width must be an integer number of bits, not True",
           lambda: RespPlace(64, True))


@pytest.mark.parametrize("width, addr_width", [(64, 1), (256, 32), (512, 32)])
def test_signature(width, addr_width):
    dut = RespPlace(width, addr_width)
    assert dut.act.payload.shape() == RESP_PLACE
    assert len(dut.o.payload.addr) == addr_width
    assert len(dut.o.payload.data) == width and len(dut.o.payload.be) == width // 8
    assert len(dut.i.payload.data) == width
    Fragment.get(dut, None)
