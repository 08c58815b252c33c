"""RespReadAlign: READ response payloads read as whole words, shifted to start at lane 0; every
other packet unchanged. Random idle cycles and backpressure, W = 64 and 512."""

import random

import pytest

from rocegen.gateware.roce.layouts import PACKET_DESC, WrSource
from rocegen.gateware.roce.responder.resp_read_align import RespReadAlign
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, meta_dict
from rocegen.sim.testing.harness import run_sim

MEM = 1 << 14


def desc(**fields):
    base = meta_dict(PACKET_DESC.const({}))
    base.update(fields)
    return base


def cases(width, rng, n):
    """(input packet, expected output packet) pairs: READ responses at any address and length
    (0 and 1 byte, the ends of beats), as the payload reader gives them for the descriptor the
    endpoint makes (local address rounded down, length grown by the offset, the address in
    ``va``), and other sources' packets."""
    B = width // 8
    mem = rng.randbytes(MEM)
    out = []
    lengths = [0, 1, B - 1, B, B + 1, 2 * B - 1, 3 * B, 256, 1024 + 3]
    for k in range(n):
        addr = rng.randrange(MEM - 2048)
        length = lengths[k] if k < len(lengths) else rng.randrange(0, 600)
        src = WrSource.RESPONDER if k % 4 != 3 else rng.choice([WrSource.USER, WrSource.STREAM])
        tag = {"qp": rng.randrange(8), "psn": rng.randrange(1 << 24), "last": k & 1,
               "opcode": 0x10, "wr_id": k, "src": src.value}
        if src == WrSource.RESPONDER:
            off = addr % B if length else 0
            start = addr - addr % B
            d_in = desc(local_addr=start, length=length + off, va=addr, **tag)
            pkt_in = Packet(mem[start:start + length + off], d_in)
            d_out = dict(d_in, length=length, local_addr=addr) if off else d_in
            out.append((pkt_in, Packet(mem[addr:addr + length], d_out)))
        else:
            addr -= addr % B
            d = desc(local_addr=addr, length=length, va=rng.randrange(1 << 64), **tag)
            out.append((Packet(mem[addr:addr + length], d), Packet(mem[addr:addr + length], d)))
    return out


@pytest.mark.parametrize("width, seed", [(64, 1), (512, 2), (512, 3)])
def test_realigns_read_responses(width, seed):
    rng = random.Random(seed)
    dut = RespReadAlign(width)
    pairs = cases(width, rng, 60)
    drv = StreamDriver(dut.i, width, idle=0.3, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=seed + 10)

    async def tb(ctx):
        await drv.send(ctx, [p for p, _ in pairs])
        await ctx.tick().repeat(50)

    run_sim(dut, testbenches=[tb], processes=[col.run], deadline_cycles=100_000)
    assert len(col.packets) == len(pairs)
    for k, (got, (_, want)) in enumerate(zip(col.packets, pairs)):
        assert got.meta == want.meta, k
        assert got.data == want.data, (k, want.meta["va"], want.meta["length"])


def test_full_rate_and_one_cycle_more_when_shifted():
    """Back to back without backpressure: an aligned packet passes a beat a cycle; a shifted
    one costs one cycle (its first beat held) or two (the trailing beat)."""
    width, B = 64, 8
    rng = random.Random(5)
    mem = rng.randbytes(MEM)
    dut = RespReadAlign(width)
    r = WrSource.RESPONDER.value
    pkts = [Packet(mem[0:64], desc(length=64, src=0)),                       # 8 beats
            Packet(mem[0:64], desc(length=64, va=3, src=r)),                 # 61 bytes: 8 -> 8
            Packet(mem[0:16], desc(length=16, va=1, src=r))]                 # 15 bytes: 2 -> 2
    drv = StreamDriver(dut.i, width)
    col = StreamCollector(dut.o, width)

    async def tb(ctx):
        await drv.send(ctx, pkts)
        await ctx.tick().repeat(20)

    run_sim(dut, testbenches=[tb], processes=[col.run])
    spans = col.spans
    assert spans[0][1] - spans[0][0] == 7
    assert spans[1][0] == spans[0][1] + 2            # the first beat held
    assert spans[1][1] - spans[1][0] == 7            # the trailing beat follows at once
    assert col.packets[1].data == mem[3:64]
    assert col.packets[2].data == mem[1:16]
    assert [len(p.data) for p in col.packets] == [8 * B, 61, 15]
