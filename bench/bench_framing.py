"""Throughput and latency of header insertion and removal (Amaranth simulator, cycle counts).

Sends back-to-back packets with no idle cycles and no backpressure and reports beats per cycle
on the busy side (packetizer output, depacketizer input) and the latency of the first beat.
Run: python -m bench.bench_framing
"""

import random

from amaranth.lib import data

from rocegen.gateware.lib.depacketizer import Depacketizer
from rocegen.gateware.lib.packetizer import Packetizer
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.headers import ETH, IPV4, UDP, Header


def measure(kind, header, width, sizes):
    rng = random.Random(1)
    if kind == "packetizer":
        dut = Packetizer(header, width, data.StructLayout({header.name: header.layout}))
        pkts = [Packet(rng.randbytes(n), {header.name: {f: 0 for f, _ in header.fields}})
                for n in sizes]
        busy_stream = dut.o
    else:
        dut = Depacketizer(header, width)
        pkts = [Packet(rng.randbytes(n + header.length)) for n in sizes]
        busy_stream = dut.i
    drv = StreamDriver(dut.i, width)
    col = StreamCollector(dut.o, width)
    moves = []
    in_first = []

    async def watch(ctx):
        cycle = 0
        async for _, _, v, r, iv, ir in ctx.tick().sample(busy_stream.valid, busy_stream.ready,
                                                          dut.i.valid, dut.i.ready):
            cycle += 1
            if v and r:
                moves.append(cycle)
            if iv and ir and not in_first:
                in_first.append(cycle)

    async def tb(ctx):
        await drv.send(ctx, pkts)
        while len(col.packets) < len(pkts):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, watch])
    span = moves[-1] - moves[0] + 1
    return len(moves) / span, col.beat_cycles[0] - in_first[0]


def main():
    rng = random.Random(2)
    sizes = [rng.randrange(1, 1500) for _ in range(200)] + [64] * 50 + [1] * 50
    print(f"{'block':<13}{'header':>8}{'W':>5}{'beats/cycle':>13}{'first-beat latency':>20}")
    for header in (ETH, IPV4, UDP, Header("eth_ip_udp", [("b", 42 * 8)]),
                   Header("eth_ip_udp_bth", [("b", 54 * 8)])):
        for width in (64, 512):
            for kind in ("packetizer", "depacketizer"):
                rate, lat = measure(kind, header, width, sizes)
                print(f"{kind:<13}{header.length:>7}B{width:>5}{rate:>13.3f}{lat:>17} cyc")


if __name__ == "__main__":
    main()
