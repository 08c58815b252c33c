"""Benchmark of the XGMII MAC in the Amaranth simulator (not a test).

Measures, in clock cycles (one 64-bit XGMII word per cycle):

* XgmiiTx sustained throughput for back-to-back frames (input always valid), as frame octets
  (without FCS) per cycle, against the 10GBASE-R limit of 8 octets per cycle less the per-frame
  overhead of preamble/SFD (8), FCS (4) and the 12-octet average inter-frame gap;
* XgmiiTx latency: input beat accepted -> start word / that beat / /T/ on txd;
* XgmiiRx latency: rxd word -> beat on o, for frames starting in lane 0 and lane 4.

Run: ``.venv/bin/python bench/bench_xgmii.py [--frames N]``.
"""

import argparse
import random

from amaranth.sim import Simulator

from rocegen.gateware.mac.xgmii_rx import XgmiiRx
from rocegen.gateware.mac.xgmii_tx import XgmiiTx
from rocegen.sim.models.mac import xgmii as X
from rocegen.sim.models.packets import to_beats


def simulate(dut, testbench, monitor):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.add_process(monitor)
    sim.run()


def tx_run(frames):
    """Sends ``frames`` back to back; returns (txd words per cycle, cycles of accepted beats)."""
    dut = XgmiiTx()
    words, accepted = [], []

    async def tb(ctx):
        for f in frames:
            for d, keep, last in to_beats(f, 64):
                ctx.set(dut.i.payload, {"data": d, "keep": keep, "last": last, "error": 0})
                ctx.set(dut.i.valid, 1)
                await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)
        for _ in range(8):
            await ctx.tick()

    async def monitor(ctx):
        async for _, _, d, c, v, r in ctx.tick().sample(dut.txd, dut.txc, dut.i.valid,
                                                         dut.i.ready):
            if v and r:
                accepted.append(len(words))
            words.append((d, c))

    simulate(dut, tb, monitor)
    return words, accepted


def lane_positions(words, char):
    return [p for p, lane in enumerate(X.unpack_words(words)) if lane == (char, 1)]


def tx_throughput(frame_len, count):
    """frame_len: frame length on the wire *with* FCS."""
    rng = random.Random(frame_len)
    data_len = frame_len - 4
    words, _ = tx_run([rng.randbytes(data_len) for _ in range(count)])
    starts = [p // 8 for p in lane_positions(words, X.START)]
    assert len(starts) == count
    cycles = (starts[-1] - starts[0]) / (count - 1)
    ends = lane_positions(words, X.TERMINATE)
    gaps = [8 * s - t for t, s in zip(ends, starts[1:])]
    ideal = 8 * data_len / (data_len + 4 + 8 + 12)
    return {
        "frame": frame_len, "cycles": cycles, "rate": data_len / cycles, "ideal": ideal,
        "gap": (min(gaps), max(gaps)),
    }


def tx_latency():
    rows = []
    rng = random.Random(1)
    for data_len in (60, 64, 61, 1514):
        frame = rng.randbytes(data_len)
        words, accepted = tx_run([frame])
        start = lane_positions(words, X.START)[0] // 8
        term = lane_positions(words, X.TERMINATE)[0] // 8
        beat = {start + 1 + k - a for k, a in enumerate(accepted)}
        assert len(beat) == 1
        rows.append((data_len, start - accepted[0], beat.pop(), term - accepted[-1]))
    return rows


def rx_latency():
    rows = []
    rng = random.Random(2)
    for start_lane in (0, 4):
        for data_len in (60, 61, 62, 63, 64, 65, 66, 67):
            frame = rng.randbytes(data_len)
            words = X.idle_words(2) + X.encode(frame, start_lane=start_lane) + X.idle_words(8)
            dut = XgmiiRx()
            valid_cycles = []

            async def tb(ctx, dut=dut, words=words):
                for d, c in words:
                    ctx.set(dut.rxd, d)
                    ctx.set(dut.rxc, c)
                    await ctx.tick()

            async def monitor(ctx, dut=dut, out=valid_cycles):
                n = 0
                async for _, _, v in ctx.tick().sample(dut.o.valid):
                    if v:
                        out.append(n)
                    n += 1

            simulate(dut, tb, monitor)
            lanes = X.unpack_words(words)
            s = lanes.index((X.START, 1))
            t = lanes.index((X.TERMINATE, 1))
            octet7 = (s + 8 + 7) // 8
            rows.append((start_lane, data_len + 4, t % 8, valid_cycles[0] - octet7,
                         valid_cycles[-1] - t // 8))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=40, help="frames per throughput run")
    args = ap.parse_args()

    print("XgmiiTx sustained throughput, back-to-back frames (frame octets without FCS per cycle)")
    print(f"{'frame+FCS':>9} {'cycles/frame':>12} {'octets/cycle':>12} {'10GBASE-R max':>13} "
          f"{'efficiency':>10} {'IFG octets':>10}")
    for frame_len in (64, 65, 128, 512, 1500, 1518):
        r = tx_throughput(frame_len, args.frames)
        print(f"{r['frame']:>9} {r['cycles']:>12.2f} {r['rate']:>12.3f} {r['ideal']:>13.3f} "
              f"{100 * r['rate'] / r['ideal']:>9.1f}% {r['gap'][0]:>4}..{r['gap'][1]:<4}")
    print()
    print("XgmiiTx latency (cycles)")
    print(f"{'frame+FCS':>9} {'beat0 -> /S/':>12} {'beat -> txd':>11} {'last beat -> /T/':>16}")
    for data_len, s, b, t in tx_latency():
        print(f"{data_len + 4:>9} {s:>12} {b:>11} {t:>16}")
    print()
    print("XgmiiRx latency (cycles; rxd word -> o.valid with the beat)")
    print(f"{'/S/ lane':>8} {'frame+FCS':>9} {'/T/ lane':>8} {'octet 7 -> 1st beat':>19} "
          f"{'/T/ -> last beat':>16}")
    for lane, n, tl, first, last in rx_latency():
        print(f"{lane:>8} {n:>9} {tl:>8} {first:>19} {last:>16}")


if __name__ == "__main__":
    main()
