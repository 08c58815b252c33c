"""The payload memory with the responder's second write source (``PayloadMemory(...,
responder=True)``) on AXI4: the front end's and the responder's word writes at once, with idle
cycles, into a memory with random stalls and response latency; each source's durable count never
runs ahead of the write responses for its own words and ends at its word count; reads see every
word."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.frontend.stream_in import DURABLE_WIDTH
from rocegen.gateware.roce.memory.payload_memory import PayloadMemory
from rocegen.sim.models.memory.axi_ram import AxiRam
from rocegen.sim.models.memory.axi_write_mem import AxiWriteMemory
from rocegen.sim.testing.amaranth_streams import StreamCollector, send_records
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.payload import expected_packet, random_desc

MEM_BYTES = 1 << 14


def writes_to(rng, width, words):
    B = width // 8
    return [{"addr": a, "data": rng.getrandbits(width),
             "be": (1 << B) - 1 if rng.random() < 0.8 else rng.getrandbits(B)} for a in words]


@pytest.mark.parametrize("width", [64, 512])
def test_front_end_and_responder_share_axi4(width):
    rng = random.Random(width)
    B = width // 8
    words = MEM_BYTES // B
    dut = PayloadMemory(width, "axi4", MEM_BYTES, responder=True)
    # the front end writes the lower half in order, the responder the upper half in runs
    front = writes_to(rng, width, list(range(words // 2)))
    runs = [list(range(a, min(a + 37, words))) for a in range(words // 2, words, 37)]
    rng.shuffle(runs)
    resp = writes_to(rng, width, [a for run in runs for a in run])
    acked = {"front": 0, "resp": 0}

    def on_ack(cycle, burst):
        # every word of a burst is one source's (its address half)
        side = "front" if burst.addr // B < words // 2 else "resp"
        assert (burst.addr // B + burst.beats - 1 < words // 2) == (side == "front"), \
            "a burst mixes the two sources"
        acked[side] += burst.beats

    axi = AxiWriteMemory(width, MEM_BYTES, aw=dut.axi.aw, w=dut.axi.w, b=dut.axi.b,
                         b_latency=(10, 60), aw_stall=0.3, w_stall=0.3, b_stall=0.2, seed=width,
                         on_ack=on_ack)
    reads = AxiRam(width, MEM_BYTES, ar=dut.axi.ar, r=dut.axi.r, mem=axi.mem, latency=7,
                   ar_stall=0.2, r_stall=0.2, seed=3)
    seen = {"front": 0, "resp": 0, "resp_sent": False, "met": 0}

    async def durable(ctx):
        async for _, _, f, r, fv, rv, rr in ctx.tick().sample(
                dut.durable, dut.resp_durable, dut.wr.valid, dut.resp_w.valid, dut.resp_w.ready):
            seen["front"] += f
            seen["resp"] += r
            # (a response taken in cycle c counts in cycle c + 1: `acked` already has it)
            assert seen["front"] <= acked["front"] and seen["resp"] <= acked["resp"]
            if fv and rv:
                assert not rr, "the responder's write went beside the front end's"
                seen["met"] += 1

    async def responder(ctx):
        await send_records(ctx, dut.resp_w, resp, rng, 0.3)
        seen["resp_sent"] = True

    descs = []
    for _ in range(20):
        n = rng.choice([1, B, rng.randrange(1, 700)])
        descs.append(random_desc(rng, B * rng.randrange((MEM_BYTES - n) // B + 1), n, False))
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=7)

    async def tb(ctx):
        await send_records(ctx, dut.wr, front, rng, 0.3)
        while seen["front"] < len(front) or seen["resp"] < len(resp) or not seen["resp_sent"]:
            await ctx.tick()
        await ctx.tick().repeat(5)
        await send_records(ctx, dut.desc, descs, rng, 0.3)
        while len(col.packets) < len(descs):
            await ctx.tick()

    run_sim(dut, testbenches=[tb, responder], processes=[axi.run, reads.run, durable, col.run],
            deadline_cycles=100_000)
    assert (seen["front"], seen["resp"]) == (len(front), len(resp))
    assert seen["met"] > 0
    image = bytearray(MEM_BYTES)
    for w in front + resp:
        data = w["data"].to_bytes(B, "little")
        for i in range(B):
            if w["be"] >> i & 1:
                image[w["addr"] * B + i] = data[i]
    assert axi.mem == image and axi.acked == image
    for got, d in zip(col.packets, descs):
        assert got.data == expected_packet(d, image).data


def test_ports():
    ext = PayloadMemory(128, "axi4", 1 << 20, responder=True)
    assert {"resp_w", "resp_durable", "axi"} <= set(ext.signature.members)
    assert len(ext.resp_durable) == DURABLE_WIDTH
    assert len(ext.resp_w.payload.addr) == ext.word_addr_bits
    on = PayloadMemory(128, "onchip", 1 << 12, responder=True)
    assert "resp_w" in on.signature.members and "resp_durable" not in on.signature.members
    plain = PayloadMemory(128, "axi4", 1 << 20)
    assert "resp_w" not in plain.signature.members
    for dut in (ext, on, plain):
        Fragment.get(dut, None)
