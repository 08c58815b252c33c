"""The endpoint's payload memory (:class:`PayloadMemory`), on-chip and AXI4: word writes from
the front end's port (and, on chip, the user's port at the same time), then descriptors read back
against a byte image of what was written, with idle cycles, backpressure and AXI4 stalls."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.frontend.stream_in import DURABLE_WIDTH
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.testing.amaranth_streams import StreamCollector, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.payload import expected_packet, random_desc

MEM_BYTES = 1 << 13


def word_writes(rng, width, words, count):
    """``count`` writes to word addresses in ``words``: each word once whole, then random ones
    with random byte enables."""
    B = width // 8
    full = (1 << B) - 1
    out = [{"addr": a, "data": rng.getrandbits(width), "be": full} for a in words]
    out += [{"addr": rng.choice(words), "data": rng.getrandbits(width), "be": rng.getrandbits(B)}
            for _ in range(count)]
    return out


def apply(image, width, writes):
    B = width // 8
    for w in writes:
        data = w["data"].to_bytes(B, "little")
        for i in range(B):
            if w["be"] >> i & 1:
                image[w["addr"] * B + i] = data[i]


@pytest.mark.parametrize("width, memory", [(64, "onchip"), (256, "onchip"), (64, "axi4"),
                                           (512, "axi4")])
def test_writes_then_reads(width, memory):
    rng = random.Random(width + len(memory))
    B = width // 8
    words = MEM_BYTES // B
    dut = PayloadMemory(width, memory, MEM_BYTES)
    # the front end writes the lower half, the user (on chip) the upper half
    front = word_writes(rng, width, list(range(words // 2)), words // 2)
    user = word_writes(rng, width, list(range(words // 2, words)), words // 2) \
        if memory == "onchip" else []
    image = bytearray(MEM_BYTES)
    if memory == "axi4":
        user_part = bytearray(rng.randbytes(MEM_BYTES))     # what the slave holds before
        image[:] = user_part
        ram = AxiRam.on_bus(dut.axi, width, MEM_BYTES, latency=7, ar_stall=0.3, r_stall=0.3,
                            seed=5, mem=user_part)
    apply(image, width, front)
    apply(image, width, user)
    descs = []
    for _ in range(30):
        n = rng.choice([0, 1, B - 1, B, B + 1, rng.randrange(1, 600)])
        a = B * rng.randrange((MEM_BYTES - n) // B + 1)      # the reader reads whole words
        descs.append(random_desc(rng, a, n, rng.random() < 0.2))
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=7)
    seen = {"durable": 0, "priority_cycles": 0, "user_done": not user}

    async def durable_and_priority(ctx):
        async for _, _, durable, fv, uv, ur in ctx.tick().sample(
                dut.durable, dut.wr.valid, *((dut.mem_w.valid, dut.mem_w.ready)
                                             if memory == "onchip" else (0, 0))):
            seen["durable"] += durable
            if fv and uv:
                assert not ur, "the user's write went beside the front end's"
                seen["priority_cycles"] += 1

    async def user_writes(ctx):
        await send_records(ctx, dut.mem_w, user, rng, 0.2)
        seen["user_done"] = True

    async def tb(ctx):
        await send_records(ctx, dut.wr, front, rng, 0.2)
        while seen["durable"] < len(front) or not seen["user_done"]:
            await ctx.tick()
        assert seen["durable"] == len(front)
        await send_records(ctx, dut.desc, descs, rng, 0.3)
        while len(col.packets) < len(descs):
            await ctx.tick()

    processes = [col.run, durable_and_priority]
    testbenches = [tb]
    if memory == "onchip":
        testbenches.append(user_writes)
    else:
        processes.append(ram.run)
    run_sim(dut, testbenches=testbenches, processes=processes, deadline_cycles=100_000)
    assert len(col.packets) == len(descs)
    for n, (got, d) in enumerate(zip(col.packets, descs)):
        exp = expected_packet(d, image)
        assert got.meta == exp.meta, f"packet {n}: descriptor"
        assert got.data == exp.data, f"packet {n}: {d['length']} bytes at {d['local_addr']:#x}"
        assert not got.error
    if memory == "onchip":
        assert seen["priority_cycles"] > 0         # the two writers did meet
    else:
        assert ram.mem == image


def test_ports_and_parameters():
    on = PayloadMemory(64, "onchip", MEM_BYTES)
    assert "mem_w" in on.signature.members and "axi" not in on.signature.members
    assert on.word_addr_bits == (MEM_BYTES // 8 - 1).bit_length()
    assert len(on.durable) == DURABLE_WIDTH
    ext = PayloadMemory(128, "axi4", 1 << 32)
    assert "axi" in ext.signature.members and "mem_w" not in ext.signature.members
    assert len(ext.axi.ar.payload.addr) == 32
    small = PayloadMemory(128, "axi4", 1 << 10)
    assert len(small.axi.ar.payload.addr) == 12
    for dut in (on, ext, small):
        Fragment.get(dut, None)
    raises(ValueError, "memory must be one of onchip, axi4, not 'ddr'",
           lambda: PayloadMemory(64, "ddr", MEM_BYTES))
    raises(ValueError, "mem_bytes must be a power of two from 128 to 2\\^32, not 3000",
           lambda: PayloadMemory(64, "onchip", 3000))
    raises(ValueError, "mem_bytes must be a power of two from 128 to 2\\^32, not 64",
           lambda: PayloadMemory(64, "axi4", 64))
