"""What every board target has: a description (part, MAC, line rate, clocks), a top level, and
the files of a Vivado build (Verilog, constraints, batch Tcl script, instructions).

A board is a :class:`Board` subclass; the registry in :mod:`rocegen.boards` lists them.
:func:`write_build` turns one into a folder that ``vivado -mode batch -source build.tcl`` builds
into a bitstream.
"""

import abc
import gc
import re
import time
import warnings
from pathlib import Path

from amaranth.hdl import Fragment, UnusedElaboratable

from rocegen.boards.xilinx.jtag_axi import JtagAxiLite
from rocegen.gateware.core import CoreTop
from rocegen.gateware.emit import component_ports, to_verilog
from rocegen.gateware.integration import write_kit
from rocegen.gateware.lib.false_path import design_false_paths
from rocegen.gateware.roce.endpoint.config import MAX_QPS, EndpointConfig
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["Board", "PinMap", "RETRANSMIT_MEMORIES", "write_build", "check_build_params",
           "add_ram_style", "xdc_false_paths"]

#: Where work-request payloads are kept (and read again for a retransmission).
RETRANSMIT_MEMORIES = ("bram", "uram", "ddr4")

#: Local memory size per kind when not given: block RAM is scarce, UltraRAM is not.
DEFAULT_MEM_BYTES = {"bram": 256 * 1024, "uram": 1024 * 1024}



class PinMap:
    """One top-level port placed on the pins of a platform resource.

    ``port``: the top-level port name. ``resource``, ``number``: the platform resource.
    ``path``: subsignal names down to the pins (``()`` for the resource's own pins). ``side``:
    ``"p"`` or ``"n"`` for one side of differential pairs, ``None`` for single-ended pins.
    ``bits``: which of the resource's pins, in order, make up the port (``None``: all of them).
    ``port_bit``: place only this bit of the port (on a one-pin resource), for a port whose
    bits are on separate resources (LEDs).
    """

    def __init__(self, port, resource, number=0, path=(), side=None, bits=None, port_bit=None):
        if side not in (None, "p", "n"):
            raise ValueError(f"side must be None, 'p' or 'n', not {side!r}")
        self.port, self.resource, self.number = port, resource, number
        self.path, self.side, self.bits = tuple(path), side, bits
        self.port_bit = port_bit

    def lookup(self, platform):
        """``(pin names, attrs, clock)`` of this port on ``platform``."""
        res = platform.lookup(self.resource, self.number)
        attrs = dict(res.attrs)
        clock = res.clock
        ios = res.ios
        for name in self.path:
            sub = [io for io in ios if getattr(io, "name", None) == name]
            if not sub:
                raise KeyError(f"resource {self.resource}#{self.number} has no subsignal {name!r}")
            attrs.update(sub[0].attrs)
            clock = sub[0].clock or clock
            ios = sub[0].ios
        io = ios[0]
        if self.side is None:
            if not hasattr(io, "names"):
                raise TypeError(f"port {self.port}: resource pins are differential, give side")
            names = list(io.names)
        else:
            if not hasattr(io, self.side):
                raise TypeError(f"port {self.port}: resource pins are single-ended, no side")
            names = list(getattr(io, self.side).names)
        if self.bits is not None:
            names = [names[i] for i in self.bits]
        return names, attrs, clock


class Board(abc.ABC):
    """A board target. Subclasses set the description attributes and implement :meth:`top`,
    :meth:`ip_tcl` and the board's part of the constraints.

    Attributes
    ----------
    name : str
        Registry name (``rocegen build --board NAME``).
    title : str
        One line: the board and the port used.
    platform : type
        The board's Amaranth platform (a vendor platform subclass holding its resources).
    mac : str
        The MAC used, as shown by ``rocegen boards``.
    line_rate_gbps : float
        Ethernet line rate.
    width : int
        Data path width W of the core on this board (fixed by the MAC).
    core_clock_hz : float
        The clock the MAC hands the core (the core runs in that one clock domain).
    clocks : list of ``(name, Hz, what)``
        The board clocks the design uses.
    top_name : str
        Default Verilog module name of the top level.
    pins : list of :class:`PinMap`
        Placement of the top-level ports every build has (:meth:`pins_for` adds those of a
        build's options).
    ddr4 : object or None
        The DDR4 memory the board top can keep payloads in (``--retransmit-memory ddr4``), with
        the attributes ``name``, ``size_bytes`` and ``min_bytes``; ``None`` when the board has
        none.
    """

    name = title = mac = top_name = None
    platform = None
    line_rate_gbps = width = core_clock_hz = None
    clocks = ()
    pins = ()
    ddr4 = None

    # -- to be provided by a board -------------------------------------------------------------

    @abc.abstractmethod
    def top(self, *, num_qps, mac, ip, memory, mem_bytes, axil=True, **endpoint_params):
        """The board's top-level component around the core (``endpoint_params``: further
        :class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` parameters; ``axil``: the core's
        AXI4-Lite register block with a JTAG-to-AXI master). The component has the attributes
        ``endpoint``, ``mac``, ``ip`` (integers), ``axil``, ``width`` and ``core_clock_hz``."""

    @abc.abstractmethod
    def ip_tcl(self, top=None):
        """Tcl that creates and generates the vendor IP of ``top`` (in ``$ipdir``); without
        ``top``, that of the board's MAC."""

    def extra_xdc(self, top):
        """Board-specific constraints after the pins and clocks."""
        return ""

    def pins_for(self, top):
        """Placement of every top-level port of ``top``."""
        return self.pins

    def clocks_for(self, top):
        """The board clocks ``top`` uses (as :attr:`clocks`)."""
        return self.clocks

    def leds(self, top=None):
        """``(LED index, meaning)`` pairs for the instructions."""
        return ()

    def notes(self, top=None):
        """Board-specific paragraphs of BUILD.md (Markdown)."""
        return ""

    # -- shared ---------------------------------------------------------------------------------

    @property
    def part(self):
        return self.platform()._part

    def summary(self):
        """One row of ``rocegen boards``."""
        clocks = ", ".join(f"{n} {hz / 1e6:g} MHz" for n, hz, _ in self.clocks)
        return {"board": self.name, "mac": self.mac, "line": f"{self.line_rate_gbps:g}G",
                "width": self.width, "core clock": f"{self.core_clock_hz / 1e6:.3f} MHz",
                "part": self.part, "clocks": clocks}

    def xdc(self, top, top_name=None, *, design=None):
        """The constraints file: pins and I/O standards from the platform, clocks, the board's
        own constraints, then the timing exceptions the synchronizers of the design carry
        (:func:`~rocegen.gateware.lib.false_path.design_false_paths`). ``design``: ``top``
        elaborated (:meth:`amaranth.hdl.Fragment.get`; elaborated here when not given)."""
        if design is None:
            design = Fragment.get(top, None)
        plat = self.platform()
        lines = [f"# rocegen: constraints of the {self.title}",
                 f"# part {self.part}; top level {top_name or self.top_name}", "",
                 "set_property CFGBVS GND [current_design]",
                 "set_property CONFIG_VOLTAGE 1.8 [current_design]",
                 "set_property BITSTREAM.GENERAL.COMPRESS true [current_design]", "",
                 "# pins"]
        clocks = []
        for pm in self.pins_for(top):
            names, attrs, clock = pm.lookup(plat)
            width = len(getattr(top, pm.port))
            if pm.port_bit is not None:
                if len(names) != 1 or not 0 <= pm.port_bit < width:
                    raise ValueError(f"bit {pm.port_bit} of port {pm.port} ({width} bits) "
                                     f"cannot go on {len(names)} pins")
                refs = [f"{pm.port}[{pm.port_bit}]" if width > 1 else pm.port]
            elif width != len(names):
                raise ValueError(f"port {pm.port} is {width} bits wide but placed on "
                                 f"{len(names)} pins")
            else:
                refs = [pm.port if width == 1 else f"{pm.port}[{i}]" for i in range(width)]
            for ref, pin in zip(refs, names):
                props = " ".join([f"PACKAGE_PIN {pin}"] + [f"{k} {v}" for k, v in attrs.items()])
                lines.append(f"set_property -dict {{{props}}} [get_ports {{{ref}}}]")
            if clock is not None and pm.side != "n":
                clocks.append((pm.port, clock.frequency))
        lines += ["", "# clocks"]
        for port, hz in clocks:
            lines.append(f"create_clock -period {1e9 / hz:.3f} -name {port} [get_ports {port}]")
        lines += ["", self.extra_xdc(top).strip(), ""]
        lines += xdc_false_paths(design_false_paths(design))
        return "\n".join(lines)

    def tcl(self, *, top_name, verilog, xdc, report_prefix="post_route", top=None):
        """The Vivado batch script: in-memory project for the part, the vendor IP of ``top``
        (:meth:`ip_tcl`), synthesis, implementation, reports and the bitstream."""
        return f"""\
# rocegen: Vivado batch build of the {self.title}
#   vivado -mode batch -source build.tcl
# Runs in the folder holding this script; everything it makes goes to ./vivado.

set here [file dirname [file normalize [info script]]]
cd $here
set part {self.part}
set top {top_name}
set outdir [file join $here vivado]
set ipdir [file join $outdir ip]
file mkdir $outdir
file mkdir $ipdir

create_project -in_memory -part $part
set_property target_language Verilog [current_project]
set_property default_lib work [current_project]

# vendor IP (generated here, synthesized together with the design)
{self.ip_tcl(top).strip()}

# the design
read_verilog [file join $here {verilog}]
read_xdc [file join $here {xdc}]

synth_design -top $top -part $part
write_checkpoint -force [file join $outdir post_synth.dcp]
report_utilization -file [file join $outdir post_synth_utilization.rpt]
report_timing_summary -file [file join $outdir post_synth_timing_summary.rpt]

opt_design
place_design
phys_opt_design
route_design
write_checkpoint -force [file join $outdir {report_prefix}.dcp]

report_timing_summary -max_paths 20 -file [file join $outdir {report_prefix}_timing_summary.rpt]
report_utilization -file [file join $outdir {report_prefix}_utilization.rpt]
report_utilization -hierarchical -file [file join $outdir {report_prefix}_utilization_hier.rpt]
report_clock_interaction -file [file join $outdir {report_prefix}_clock_interaction.rpt]
report_drc -file [file join $outdir {report_prefix}_drc.rpt]

set wns [get_property SLACK [get_timing_paths -max_paths 1 -nworst 1 -setup]]
set whs [get_property SLACK [get_timing_paths -max_paths 1 -nworst 1 -hold]]
puts "rocegen: worst setup slack $wns ns, worst hold slack $whs ns"
if {{$wns < 0 || $whs < 0}} {{
    puts "rocegen: WARNING: timing is not met; see [file join $outdir {report_prefix}_timing_summary.rpt]"
}}

write_bitstream -force [file join $outdir $top.bit]
puts "rocegen: wrote [file join $outdir $top.bit]"
"""


def xdc_false_paths(false_paths):
    """Lines of XDC stating ``false_paths``
    (:class:`~rocegen.gateware.lib.false_path.FalsePath`), a comment and one constraint each."""
    lines = []
    if false_paths:
        lines.append("# synchronizers: the timing exceptions each kind in the design carries")
    for fp in false_paths:
        lines += [f"# {fp.why}",
                  "set_false_path -to [get_pins -of_objects [get_cells -hierarchical -filter \\",
                  f"    {{ASYNC_REG == TRUE && NAME =~ {fp.cells}}}] -filter "
                  f"{{REF_PIN_NAME == {fp.pin}}}]"]
    return lines + [""] if lines else lines


def check_build_params(board, *, num_qps, mac, ip, retransmit_memory, width=None,
                       mem_bytes=None, endpoint=None):
    """Validate the parameters of a board build; returns ``(memory, mem_bytes)`` for the core.
    ``endpoint``: further parameters of the core, checked by
    :class:`~rocegen.gateware.roce.endpoint.config.EndpointConfig` with the board's width and the
    memory chosen. Raises :exc:`ValueError` (or :exc:`TypeError`) with a message naming the
    parameter."""
    memory, mem_bytes = _check_board_params(board, num_qps=num_qps, mac=mac, ip=ip,
                                            retransmit_memory=retransmit_memory, width=width,
                                            mem_bytes=mem_bytes)
    EndpointConfig(width=board.width, num_qps=num_qps, memory=memory, mem_bytes=mem_bytes,
                   **(endpoint or {}))
    return memory, mem_bytes


def _check_board_params(board, *, num_qps, mac, ip, retransmit_memory, width, mem_bytes):
    if width is not None and width != board.width:
        raise ValueError(f"--width {width} does not match the {board.name} board: its MAC "
                         f"({board.mac}) takes {board.width}-bit words")
    if not isinstance(num_qps, int) or isinstance(num_qps, bool) or not 1 <= num_qps <= MAX_QPS:
        raise ValueError(f"--qps must be 1..{MAX_QPS}, not {num_qps!r}")
    try:
        parse_ip(ip)
    except ValueError as e:
        raise ValueError(f"--ip: {e}") from None
    try:
        parse_mac(mac)
    except ValueError as e:
        raise ValueError(f"--mac: {e}") from None
    if retransmit_memory not in RETRANSMIT_MEMORIES:
        raise ValueError(f"--retransmit-memory must be one of {', '.join(RETRANSMIT_MEMORIES)}, "
                         f"not {retransmit_memory!r}")
    if retransmit_memory == "ddr4":
        ddr = board.ddr4
        if ddr is None:
            raise ValueError(f"--retransmit-memory ddr4: the {board.name} board has no DDR4 "
                             f"memory rocegen drives; use bram or uram")
        if mem_bytes is None:
            return "axi4", ddr.size_bytes
        if (not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool)
                or not ddr.min_bytes <= mem_bytes <= ddr.size_bytes
                or mem_bytes & (mem_bytes - 1)):
            raise ValueError(f"--mem-bytes with ddr4 must be a power of two from "
                             f"{ddr.min_bytes} (the streaming ring) to {ddr.size_bytes} (the "
                             f"size of {ddr.name}), not {mem_bytes!r}")
        return "axi4", mem_bytes
    if mem_bytes is None:
        mem_bytes = DEFAULT_MEM_BYTES[retransmit_memory]
    return "onchip", mem_bytes


_RAM_MODULE = re.compile(r"^module (\\\S*\.endpoint\.memory\.ram) \(.*?^endmodule", re.M | re.S)
_RAM_DECL = re.compile(r"^(\s*)(reg \[\d+:0\] mem \[\d+:0\];)", re.M)
_RAM_INIT = re.compile(r"^\s*initial begin\n(?:\s*mem\[\d+\] = \d+'h0+;\n)+\s*end\n", re.M)


def add_ram_style(text, style, *, drop_zero_init=False):
    """Mark the endpoint's payload memory in ``text`` (Verilog of a top level holding the
    endpoint as submodule ``endpoint``) with ``(* ram_style = "<style>" *)``, so that Vivado maps
    it to that kind of RAM (``"ultra"``: UltraRAM, ``"block"``: block RAM). With
    ``drop_zero_init``, also remove the memory's all-zero ``initial`` block (UltraRAM cannot be
    initialized; the payload memory's contents after configuration are undefined anyway).
    Raises :exc:`ValueError` when the memory is not found (the core's structure changed)."""
    mod = _RAM_MODULE.search(text)
    if mod is None:
        raise ValueError("payload memory module (*.endpoint.memory.ram) not found in the Verilog")
    body = mod.group(0)
    if len(_RAM_DECL.findall(body)) != 1:
        raise ValueError(f"expected one memory array in {mod.group(1)}")
    body = _RAM_DECL.sub(rf'\1(* ram_style = "{style}" *)\n\1\2', body)
    if drop_zero_init:
        body = _RAM_INIT.sub("", body, count=1)
    return text[:mod.start()] + body + text[mod.end():]


def write_build(board, out_dir, *, num_qps=8, mac="02:00:00:00:00:01", ip="10.0.0.2",
                retransmit_memory="bram", width=None, mem_bytes=None, top_name=None, log=print,
                endpoint=None, axil=True):
    """Write the Vivado build of ``board`` to ``out_dir``: ``<top>.v`` (board top and core),
    ``<board>.xdc``, ``build.tcl``, ``BUILD.md`` and the integration kit of the core inside the
    top (:func:`~rocegen.gateware.integration.write_kit` of the core's configuration, named
    ``<top>_core``: SystemVerilog package, port table, instantiation template and, with
    ``axil``, the register map as Markdown, C header and Python accessor). ``endpoint``:
    further parameters of the core (``pmtu``, ``cm_port``...); ``axil``: the core's AXI4-Lite
    register block behind a JTAG-to-AXI master (default on). Returns the paths written."""
    endpoint = dict(endpoint or {})
    memory, mem_bytes = check_build_params(board, num_qps=num_qps, mac=mac, ip=ip,
                                           retransmit_memory=retransmit_memory, width=width,
                                           mem_bytes=mem_bytes, endpoint=endpoint)
    top_name = top_name or board.top_name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", top_name):
        raise ValueError(f"--name must be a Verilog identifier, not {top_name!r}")
    t0 = time.perf_counter()
    top = board.top(num_qps=num_qps, mac=mac, ip=ip, memory=memory, mem_bytes=mem_bytes,
                    axil=axil, **endpoint)
    design = Fragment.get(top, None)
    text = to_verilog(design, name=top_name, ports=component_ports(top))
    if retransmit_memory == "uram":
        text = add_ram_style(text, "ultra", drop_zero_init=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "verilog": out / f"{top_name}.v",
        "xdc": out / f"{board.name}.xdc",
        "tcl": out / "build.tcl",
        "readme": out / "BUILD.md",
    }
    files["verilog"].write_text(text)
    files["xdc"].write_text(board.xdc(top, top_name, design=design))
    files["tcl"].write_text(board.tcl(top_name=top_name, verilog=files["verilog"].name,
                                      xdc=files["xdc"].name, top=top))
    with warnings.catch_warnings():
        # the core is only described (ports, configuration), never elaborated: Amaranth's
        # warning about that when it goes away does not apply
        warnings.simplefilter("ignore", UnusedElaboratable)
        core = core_of(top, mac=mac, ip=ip, endpoint=endpoint, mem_bytes=mem_bytes)
        kit = write_kit(core, f"{top_name}_core", out)
        del core
        gc.collect()
    files.update({f"kit_{k}": p for k, p in kit.items()})
    params = {"board": board.name, "ip": ip, "mac": mac, "qps": num_qps,
              "retransmit_memory": retransmit_memory, "mem_bytes": mem_bytes,
              "width": board.width, "top": top_name, "axil": axil, **endpoint}
    if axil:
        params["registers"] = "AXI4-Lite, read over JTAG (see \"Registers over JTAG\")"
    files["readme"].write_text(build_md(board, top, params, files))
    log(f"wrote {out}/: {', '.join(p.name for p in files.values())} "
        f"({len(text) / 1e6:.2f} MB of Verilog) in {time.perf_counter() - t0:.1f} s")
    return files


def core_of(top, *, mac, ip, endpoint, mem_bytes):
    """The :class:`~rocegen.gateware.core.CoreTop` with the configuration of the core inside board
    top ``top`` (its width, QPs, memory, clock, register block and endpoint parameters): what
    ``rocegen verilog`` emits for it, described by the build's integration kit."""
    ep = top.endpoint
    return CoreTop(top.width, ep.num_qps, memory=ep.memory, phy="axis", mac=mac, ip=ip,
                   axil=top.axil, mem_bytes=mem_bytes, clk_hz=top.core_clock_hz, **endpoint)


def _net_text(net):
    """``(ip, prefix_len)`` -> ``"ip/prefix_len"`` (``None`` stays)."""
    return None if net is None else f"{net[0]}/{net[1]}"


def build_md(board, top, params, files):
    """The instructions of a build folder."""
    leds = "\n".join(f"| {i} | {what} |" for i, what in board.leds(top))
    clocks = "\n".join(f"| {n} | {hz / 1e6:g} MHz | {what} |"
                       for n, hz, what in board.clocks_for(top))
    has_cm = getattr(top, "has_connection_manager", False)
    if has_cm:
        port = params.get("cm_port", 17185)
        allow = _net_text(params.get("cm_allow_net"))
        who = (f"Only hosts in {allow} may open QPs (others are answered NAK and counted)."
               if allow else "Any host on the link may open QPs: this build puts no subnet "
               "restriction on the connection manager (`--allow-net` sets one).")
        qps = (f"QPs are opened by the host through the connection manager on UDP port {port} "
               f"(any host tool speaking its 64-byte format); the QP LED lights while at least one is "
               f"open. {who}")
    else:
        qps = ("This core has no connection manager: nothing on the board opens QPs, so the "
               "design answers ARP and ping (and counts what it receives) but sends no RDMA "
               "traffic; synthesis then trims the unreachable requester logic. The QP LED "
               "lights once a peer acknowledges a packet.")
    mem = params["retransmit_memory"]
    ddr4_name = board.ddr4.name if board.ddr4 is not None else "DDR4"
    mem_text = {
        "bram": "block RAM",
        "uram": "UltraRAM (the payload memory carries `(* ram_style = \"ultra\" *)`; check "
                "`URAM` in the utilization report)",
        "ddr4": f"DDR4 SDRAM ({ddr4_name}, through the DDR4 memory controller and an AXI "
                f"clock converter; see \"Payload memory: {ddr4_name}\" below)",
    }[mem]
    core_keys = ("board", "ip", "mac", "qps", "retransmit_memory", "mem_bytes", "width", "top",
                 "axil")
    extra = "".join(f"| {k} | {_net_text(v) if k == 'cm_allow_net' else v} |\n"
                    for k, v in params.items() if k not in core_keys)
    return f"""\
# {board.title}

Generated by `rocegen build --board {board.name}`. Build the bitstream with Vivado (the IP
settings in `build.tcl` use the property names of the 2020.2 and later versions of the cores;
Vivado stops with an error naming any property its version does not know):

```
cd {files['tcl'].parent}
vivado -mode batch -source build.tcl
```

Everything goes to `vivado/`: `{params['top']}.bit`, checkpoints, and the reports
(`post_route_timing_summary.rpt`, `post_route_utilization.rpt`, ...). The script prints the
worst setup and hold slack and warns when timing is not met. Program the board with the
Hardware Manager (`open_hw_manager`, `program_hw_devices`).

## Files

| file | what |
|---|---|
| `{files['verilog'].name}` | board top level and the RoCEv2 endpoint core (generated Verilog) |
| `{files['xdc'].name}` | pins, I/O standards, clocks, false paths |
| `build.tcl` | creates the vendor IP, synthesizes, places, routes, writes the bitstream |
{_kit_rows(files)}
{_kit_text(top, params, files)}
## Parameters

| parameter | value |
|---|---|
| board | {board.name} ({board.part}) |
| MAC | {board.mac}, {board.line_rate_gbps:g} Gb/s |
| data path | {board.width} bits at {board.core_clock_hz / 1e6:.3f} MHz |
| IPv4 address | {params['ip']} |
| MAC address | {params['mac']} |
| QPs | {params['qps']} (QPNs {256}..{256 + params['qps'] - 1}) |
| payload memory | {params['mem_bytes']} bytes of {mem_text} |
{extra}
## Clocks

| clock | frequency | use |
|---|---|---|
{clocks}

## LEDs

| LED | meaning |
|---|---|
{leds}

## Bring-up

{qps}

From a host on the same link and subnet: `ping {params['ip']}` must answer (the LED of traffic
blinks). The endpoint's counters (frames, drops, ICRC errors, completions) are in the core's
statistics block; the board top watches a few of them for the LEDs{_read_them(top)}.

{board.notes(top).strip()}
{_registers_text(top, files)}"""


_KIT_WHAT = {
    "kit_package": "SystemVerilog package of the core's record types (work requests, "
                   "completions, QP control...)",
    "kit_ports": "the core's ports: groups, widths, directions, record fields",
    "kit_template": "instantiation template of the core",
    "kit_registers": "register map of the core's AXI4-Lite block (offsets, fields, reset values)",
    "kit_c_header": "the register map as C macros",
    "kit_python": "the register map as a Python accessor (over any read/write bus)",
}


def _kit_rows(files):
    return "\n".join(f"| `{files[k].name}` | {what} |" for k, what in _KIT_WHAT.items()
                     if k in files)


def _kit_text(top, params, files):
    """The paragraph under the file table about the core's integration kit."""
    name = files["kit_package"].name[:-len("_pkg.sv")]
    regs = " --axil" if top.axil else ""
    jtag = " and the JTAG-to-AXI master" if top.axil else ""
    ep = top.endpoint
    return f"""
The `{name}_*` files describe the RoCEv2 endpoint core inside the board top, with this build's
configuration (W = {top.width}, {params['qps']} QPs, the payload memory below, the core clock),
as `rocegen verilog --core endpoint --width {top.width} --qps {params['qps']} --memory
{ep.memory} --mem-bytes {ep.mem_bytes} --clk-mhz {top.core_clock_hz / 1e6}{regs} --name {name}`
(plus this build's endpoint options) writes them beside the core's Verilog: to drive the
core's work-request, completion and QP ports from your own logic, or to read its registers from
software. The port names are those of the standalone core (`{name}_inst.sv`); inside the board
top the same ports are wired to the MAC, the LEDs{jtag}, and the ones the board does not use
are tied off.
"""


def _read_them(top):
    return (", and every one of them can be read over JTAG (\"Registers over JTAG\" below)"
            if top.axil else "")


def _registers_text(top, files):
    if not top.axil:
        return ""
    return "\n" + JtagAxiLite.notes(top.endpoint.config,
                                     registers_md=files["kit_registers"].name,
                                     c_header=files["kit_c_header"].name,
                                     python=files["kit_python"].name)
