"""The payload memory with the READ requester's third write source (``PayloadMemory(...,
responder=True, reads=True)``), on chip and on AXI4: the front end's, the responder's and the READ
requester's word writes (and on chip the user's) all at once with random idle cycles, AXI4 stalls
and response latency. Priority is ``wr``, ``resp_w``, ``read_w``, ``mem_w``; every word lands
exactly once with its byte enables; each source's durable count follows the write responses of
its own bursts, in the order its words were taken; reads see every word."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.frontend.stream_in import DURABLE_WIDTH
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.models.memory.axi_write_mem import AxiWriteMemory
from rocegen.sim.testing.amaranth_streams import StreamCollector, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.payload import expected_packet, random_desc
from tests.unit.memory.test_mem_merge import chunked_writes

MEM_BYTES = 1 << 15


def key(w):
    """A word write as a sortable tuple."""
    return w["addr"], w["data"], w["be"]


def apply(image, width, writes):
    B = width // 8
    for w in writes:
        data = w["data"].to_bytes(B, "little")
        for i in range(B):
            if w["be"] >> i & 1:
                image[w["addr"] * B + i] = data[i]


def read_descs(rng, width, count):
    B = width // 8
    descs = []
    for _ in range(count):
        n = rng.choice([1, B - 1, B, B + 1, rng.randrange(1, 900)])
        descs.append(random_desc(rng, B * rng.randrange((MEM_BYTES - n) // B + 1), n, False))
    return descs


def watch_ports(ports, seen, extra=()):
    """A process that checks the priority of ``ports`` (earlier first: a port's ``ready`` is low
    in any cycle an earlier port's ``valid`` is high) and records, per port, the writes taken;
    ``extra`` signals are sampled too and handed to ``seen["check"](cycle, taken, values)``."""
    n = len(ports)

    async def watch(ctx):
        cycle = 0
        async for _, _, *values in ctx.tick().sample(
                *(p.valid for p in ports), *(p.ready for p in ports), *(p.payload for p in ports),
                *extra):
            valid, ready, payload = (values[k * n:(k + 1) * n] for k in range(3))
            taken = []
            for k in range(n):
                if valid[k] and any(ready[k + 1:]):
                    raise AssertionError(f"cycle {cycle}: a later source went beside source {k}")
                if valid[k] and ready[k]:
                    w = {"addr": int(payload[k].addr), "data": int(payload[k].data),
                         "be": int(payload[k].be)}
                    seen["taken"][k].append(w)
                    taken.append((k, w))
            seen["met"] += sum(map(bool, valid)) > 1
            seen["all_met"] += all(valid)
            seen["check"](cycle, taken, values[3 * n:])
            cycle += 1
    return watch


def source(port, writes, rng, idle, seen, k):
    async def tb(ctx):
        await send_records(ctx, port, writes, rng, idle)
        seen["done"][k] = True
    return tb


@pytest.mark.parametrize("width, idle, stalls", [
    (64, (0.3, 0.3, 0.3), 0.3),
    (512, (0.5, 0.2, 0.1), 0.2),
    (64, (0.0, 0.0, 0.0), 0.0),
])
def test_three_sources_on_axi4(width, idle, stalls):
    rng = random.Random(width + int(10 * stalls))
    B = width // 8
    words = MEM_BYTES // B
    dut = PayloadMemory(width, "axi4", MEM_BYTES, responder=True, reads=True)
    writes, owner = chunked_writes(rng, width, words, 3)
    ports = [dut.wr, dut.resp_w, dut.read_w]
    axi = AxiWriteMemory(width, MEM_BYTES, aw=dut.axi.aw, w=dut.axi.w, b=dut.axi.b,
                         b_latency=(5, 60), aw_stall=stalls, w_stall=stalls, b_stall=stalls / 2,
                         seed=width)
    before = rng.randbytes(MEM_BYTES)        # what the memory holds before: kept where be is 0
    axi.mem[:] = before
    axi.acked[:] = before
    reads = AxiRam(width, MEM_BYTES, ar=dut.axi.ar, r=dut.axi.r, mem=axi.mem, latency=7,
                   ar_stall=0.2, r_stall=0.2, seed=3)
    seen = {"taken": [[], [], []], "met": 0, "all_met": 0, "done": [False] * 3, "durable": [],
            "beats": []}

    def check(cycle, taken, values):
        durable = values[:3]
        counted = [(k, n) for k, n in enumerate(durable) if n]
        assert len(counted) <= 1, "one write response counts for one source"
        if counted:
            seen["durable"].append((cycle, *counted[0]))
        wv, wr_, wp = values[3:]
        if wv and wr_:
            seen["beats"].append((int(wp.data), int(wp.strb)))

    seen["check"] = check
    watch = watch_ports(ports, seen, extra=(dut.durable, dut.resp_durable, dut.read_durable,
                                            dut.axi.w.valid, dut.axi.w.ready, dut.axi.w.payload))
    descs = read_descs(rng, width, 16)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=7)

    async def tb(ctx):
        while not all(seen["done"]) or \
                sum(n for _, _, n in seen["durable"]) < sum(map(len, writes)):
            await ctx.tick()
        await ctx.tick().repeat(10)
        await send_records(ctx, dut.desc, descs, rng, 0.3)
        while len(col.packets) < len(descs):
            await ctx.tick()

    run_sim(dut, testbenches=[tb, *(source(ports[k], writes[k], rng, idle[k], seen, k)
                                    for k in range(3))],
            processes=[axi.run, reads.run, col.run, watch], deadline_cycles=200_000)
    # each source's writes taken once each, in the order sent
    assert seen["taken"] == [list(ws) for ws in writes]
    # every word lands exactly once, with its byte enables: the W beats, placed by their bursts
    landed, beats = [], iter(seen["beats"])
    for burst in axi.write_bursts:
        for k in range(burst.beats):
            data, strb = next(beats)
            landed.append({"addr": burst.addr // B + k, "data": data, "be": strb})
    assert next(beats, None) is None
    assert sorted(landed, key=key) == sorted((w for ws in writes for w in ws), key=key)
    for burst in axi.write_bursts:
        assert len({owner[burst.addr // B + k] for k in range(burst.beats)}) == 1, \
            f"the burst at {burst.addr:#x} mixes sources"
    image = bytearray(before)
    for ws in writes:
        apply(image, width, ws)
    assert axi.mem == image and axi.acked == image
    # durable: each response counts its burst's words for the burst's source in the next
    # cycle, and those are the next words that source gave
    assert seen["durable"] == [(c + 1, owner[b.addr // B], b.beats) for c, b in axi.responses]
    done = [0, 0, 0]
    for _, src, n in seen["durable"]:
        first = writes[src][done[src]]["addr"]
        assert [w["addr"] for w in writes[src][done[src]:done[src] + n]] == \
            list(range(first, first + n)), f"source {src}: words counted out of order"
        done[src] += n
    assert done == [len(ws) for ws in writes]
    assert seen["met"] > 0
    if not any(idle):
        assert seen["all_met"] > 0
    for n, (got, d) in enumerate(zip(col.packets, descs)):
        assert got.data == expected_packet(d, image).data, f"packet {n}"


@pytest.mark.parametrize("width, idle", [
    (64, (0.3, 0.3, 0.3, 0.3)),
    (512, (0.6, 0.3, 0.2, 0.1)),
    (64, (0.0, 0.0, 0.0, 0.0)),
])
def test_four_sources_on_chip(width, idle):
    rng = random.Random(width + 1)
    B = width // 8
    words = MEM_BYTES // B
    dut = PayloadMemory(width, "onchip", MEM_BYTES, responder=True, reads=True)
    writes, owner = chunked_writes(rng, width, words, 4)
    ports = [dut.wr, dut.resp_w, dut.read_w, dut.mem_w]
    ram_wr = dut._ram.wr
    seen = {"taken": [[], [], [], []], "met": 0, "all_met": 0, "done": [False] * 4,
            "durable": 0, "landed": []}

    def check(cycle, taken, values):
        durable, rv, rr, rp = values
        # the buffer's write port takes exactly the one write a source gave this cycle
        assert len(taken) == (1 if rv and rr else 0), f"cycle {cycle}: {taken}"
        if taken:
            k, w = taken[0]
            assert w == {"addr": int(rp.addr), "data": int(rp.data), "be": int(rp.be)}
            seen["landed"].append(w)
        assert durable == (bool(taken) and taken[0][0] == 0), f"cycle {cycle}: durable"
        seen["durable"] += durable

    seen["check"] = check
    watch = watch_ports(ports, seen, extra=(dut.durable, ram_wr.valid, ram_wr.ready,
                                            ram_wr.payload))
    descs = read_descs(rng, width, 16)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=7)

    async def tb(ctx):
        while not all(seen["done"]):
            await ctx.tick()
        await ctx.tick().repeat(3)
        await send_records(ctx, dut.desc, descs, rng, 0.3)
        while len(col.packets) < len(descs):
            await ctx.tick()

    run_sim(dut, testbenches=[tb, *(source(ports[k], writes[k], rng, idle[k], seen, k)
                                    for k in range(4))],
            processes=[col.run, watch], deadline_cycles=200_000)
    assert seen["taken"] == [list(ws) for ws in writes]
    assert sorted(seen["landed"], key=key) == sorted((w for ws in writes for w in ws), key=key)
    assert seen["durable"] == len(writes[0])
    assert seen["met"] > 0
    if not any(idle):
        assert seen["all_met"] > 0
    image = bytearray(MEM_BYTES)
    for ws in writes:
        apply(image, width, ws)
    for n, (got, d) in enumerate(zip(col.packets, descs)):
        assert got.data == expected_packet(d, image).data, f"packet {n}"


def test_ports_and_parameters():
    ext = PayloadMemory(128, "axi4", 1 << 20, responder=True, reads=True)
    assert {"wr", "resp_w", "read_w", "durable", "resp_durable", "read_durable", "axi"} <= \
        set(ext.signature.members)
    assert len(ext.read_durable) == DURABLE_WIDTH
    assert ext.read_w.payload.shape() == ext.wr.payload.shape()
    assert len(ext.read_w.payload.addr) == ext.word_addr_bits
    assert ext._writer.tags == 3
    on = PayloadMemory(128, "onchip", 1 << 12, responder=True, reads=True)
    assert {"wr", "resp_w", "read_w", "mem_w"} <= set(on.signature.members)
    assert "read_durable" not in on.signature.members
    for memory in ("onchip", "axi4"):
        plain = PayloadMemory(128, memory, 1 << 12, responder=True)
        assert not {"read_w", "read_durable"} & set(plain.signature.members)
        Fragment.get(plain, None)
    two = PayloadMemory(128, "axi4", 1 << 12, responder=True)
    assert two._writer.tags == 2
    for dut in (ext, on, two):
        Fragment.get(dut, None)
    for memory in ("onchip", "axi4"):
        raises(ValueError, "reads needs responder=True",
               lambda m=memory: PayloadMemory(64, m, 1 << 12, reads=True))
