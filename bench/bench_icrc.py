"""Throughput, latency and generation time of the ICRC blocks.

* Beats per cycle (Amaranth simulator, cycle counts) with back-to-back frames of random sizes,
  no idle input and no backpressure, on the input and the output of each block, against the
  bound set by the extra beat an ICRC needs when it does not fit in a frame's last beat.
* Latency: cycles from a frame's last input beat to its last output beat, measured, beside the
  ``latency`` attribute the blocks declare.
* Verilog generation time and size per width (:func:`rocegen.gateware.emit.to_verilog`).
* The estimated LUT depth of every pipeline stage (``logic_levels``).
* Size and depth (``--synth``): Yosys figures of each block at 64 and 512 bits, mapped for area
  and for 8 LUT levels (as ``bench_synth`` maps the cores).

Run: python -m bench.bench_icrc [--frames N] [--synth]
"""

import argparse
import random
import time
import warnings

from amaranth.hdl import UnusedElaboratable

from bench.bench_synth import LEVEL_GOAL
from rocegen.gateware.emit import to_verilog
from rocegen.gateware.roce.icrc import IcrcCheck, IcrcInsert
from rocegen.sim.models import icrc as model
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.tools.synth import synthesize


def frames(rng, count):
    """Random frames of 54..1496 bytes without ICRC (58..1500 with it: a BTH-only RoCEv2 frame
    to an Ethernet MTU), any alignment; random bytes after an IPv4 version/IHL byte."""
    out = []
    for _ in range(count):
        f = bytearray(rng.randbytes(rng.randrange(54, 1497)))
        f[14] = 0x45
        out.append(bytes(f))
    return out


def measure(cls, width, data):
    dut = cls(width)
    if cls is IcrcCheck:
        data = [f + model.icrc(f[14:]) for f in data]
    drv = StreamDriver(dut.i, width)
    col = StreamCollector(dut.o, width)
    trace = []

    async def watch(ctx):
        async for _, _, *sig in ctx.tick().sample(dut.i.valid, dut.i.ready, dut.i.payload.last,
                                                   dut.o.valid, dut.o.ready, dut.o.payload.last):
            trace.append(tuple(int(s) for s in sig))

    async def tb(ctx):
        await drv.send(ctx, [Packet(f) for f in data])
        while len(col.packets) < len(data):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[col.run, watch])
    ins = [t for t, s in enumerate(trace) if s[0] and s[1]]
    outs = [t for t, s in enumerate(trace) if s[3] and s[4]]
    in_last = [t for t, s in enumerate(trace) if s[0] and s[1] and s[2]]
    out_last = [t for t, s in enumerate(trace) if s[3] and s[4] and s[5]]
    lat = [o - i for i, o in zip(in_last, out_last)]
    B = width // 8
    extra = sum((len(f) % B or B) > B - 4 for f in data) if cls is IcrcInsert else 0
    in_beats = sum(-(-len(f) // B) for f in data)
    return {
        "in": len(ins) / (ins[-1] - ins[0] + 1),
        "out": len(outs) / (outs[-1] - outs[0] + 1),
        "bound": in_beats / (in_beats + extra),
        "lat": (min(lat), max(lat)),
        "declared": dut.latency,
    }


def synth_figures():
    """Yosys (``synth_xilinx``, UltraScale+) figures of each block at 64 and 512 bits, mapped for
    area and for :data:`LEVEL_GOAL` LUT levels."""
    print(f"{'block':<11}{'W':>5}{'mapped for':>12}{'LUTs':>8}{'FF':>8}{'RAMB18':>8}"
          f"{'RAMB36':>8}{'LUT levels':>12}")
    for cls in (IcrcInsert, IcrcCheck):
        for width in (64, 512):
            for depth in (None, LEVEL_GOAL):
                r = synthesize(cls(width), top="top", depth_target=depth, cache=True,
                               workdir=f"build/synth/icrc_{cls.__name__}_{width}_{depth or 'area'}")
                how = f"{depth} levels" if depth else "area"
                print(f"{cls.__name__:<11}{width:>5}{how:>12}{r['lut_total']:>8,}{r['ff']:>8,}"
                      f"{r['bram18']:>8}{r['bram36']:>8}{r['lut_levels']:>12}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--synth", action="store_true", help="also synthesize the blocks (Yosys)")
    args = ap.parse_args()
    rng = random.Random(1)
    data = frames(rng, args.frames)

    print(f"back-to-back frames of {min(map(len, data))}..{max(map(len, data))} bytes, "
          f"{len(data)} frames, no idle, no backpressure")
    print(f"{'block':<11}{'W':>5}{'in beats/cyc':>14}{'out beats/cyc':>15}{'bound':>8}"
          f"{'latency (measured)':>20}{'declared':>10}")
    for cls in (IcrcInsert, IcrcCheck):
        for width in (64, 512):
            r = measure(cls, width, data)
            lo, hi = r["lat"]
            print(f"{cls.__name__:<11}{width:>5}{r['in']:>14.3f}{r['out']:>15.3f}{r['bound']:>8.3f}"
                  f"{f'{lo}..{hi} cyc':>20}{r['declared']:>10}")

    print()
    print(f"{'block':<11}{'W':>5}{'Verilog gen':>13}{'size':>10}{'stages':>8}{'queue':>7}")
    for cls in (IcrcInsert, IcrcCheck):
        for width in (64, 128, 256, 512):
            t = time.perf_counter()
            dut = cls(width)
            text = to_verilog(dut, name="top")
            dt = time.perf_counter() - t
            print(f"{cls.__name__:<11}{width:>5}{dt:>11.2f} s{len(text) / 1e3:>8.0f} kB"
                  f"{dut.stages:>8}{dut.queue_depth:>7}")

    print()
    print("estimated depth in 6-input LUTs per pipeline stage at 512 bits:")
    warnings.simplefilter("ignore", UnusedElaboratable)     # built only to read the figures
    for cls in (IcrcInsert, IcrcCheck):
        levels = cls(512).logic_levels
        print(f"  {cls.__name__}: " + ", ".join(f"{k} {v}" for k, v in levels.items()))
    if args.synth:
        print()
        synth_figures()


if __name__ == "__main__":
    main()
