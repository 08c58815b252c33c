"""``rocegen build`` end to end: the board tops it writes pass ``verilator --lint-only`` with
port-compatible stubs of the vendor IP (boards/stubs/), every input of the vendor IP is driven,
and the glue written for the board (the top module and its parts: MAC, memory, clock buffers)
lints without width warnings.

Uses the project's Verilator (:func:`rocegen.sim.testing.verilator.verilator_bin_dir`: ``make setup``
finds or builds it), whatever ``PATH`` holds.

The build folders and the lint logs are kept in the per-user cache (``~/.cache/rocegen/boards/``)
as the simulator builds are (:mod:`rocegen.sim.testing.cocotb_runner`): a folder is written again
only when a Python source it comes from (``wire/``, ``gateware/``, ``boards/``, ``cli/``,
``tools/``) changed, and a lint
log is taken again only when the Verilog, the stubs or the Verilator changed. Every assertion
runs on every run, on the kept files; the build log of :mod:`rocegen.gateware.costlog` says which
folders and lint logs were made and which were kept (kind ``board``).
"""

import collections
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rocegen.boards.vcu118 import CMAC_MODULE, XXV_MODULE, axi_cdc_module, ddr4_module
from rocegen.boards.xilinx import JTAG_AXI_MODULE
from rocegen.cli import main
from rocegen.gateware import costlog
from rocegen.sim.testing.cocotb_runner import source_digest
from rocegen.sim.testing.verilator import VerilatorNotFound, cache_root, verilator_bin_dir

STUBS = Path(__file__).resolve().parent.parent / "boards" / "stubs"
#: Where the build folders and lint logs are kept between runs.
CACHE = cache_root() / "boards"
#: The sources a build folder comes from.
SOURCES = tuple(f"{folder}/**/*.py" for folder in ("wire", "gateware", "boards", "cli", "tools"))

BUILDS = {
    # name: (command-line arguments, top module, board, vendor IP modules with their instance)
    "vcu118": (["--board", "vcu118", "--qps", "2", "--ip", "192.168.7.2",
                "--mac", "02:0a:0b:0c:0d:0e"], "rocegen_vcu118", "vcu118",
               {CMAC_MODULE: "cmac", JTAG_AXI_MODULE: "jtag_axi"}),
    # without the register block: the addresses are constants, no JTAG-to-AXI master
    "vcu118_10g": (["--board", "vcu118_10g", "--qps", "3", "--retransmit-memory", "uram",
                    "--mem-bytes", "65536", "--name", "top10g", "--no-axil", "--ip",
                    "192.168.7.2", "--mac", "02:0a:0b:0c:0d:0e"], "top10g", "vcu118_10g",
                   {XXV_MODULE: "xxv"}),
    "au250": (["--board", "au250", "--qps", "4"], "rocegen_au250", "au250",
              {CMAC_MODULE: "cmac", JTAG_AXI_MODULE: "jtag_axi"}),
    "au55c": (["--board", "au55c", "--qps", "2"], "rocegen_au55c", "au55c",
              {CMAC_MODULE: "cmac", JTAG_AXI_MODULE: "jtag_axi"}),
    # payloads in DDR4 C1: the whole of it at 100G, 64 MiB at 25G, 1 MiB at 10G
    "vcu118_ddr4": (["--board", "vcu118", "--qps", "2", "--retransmit-memory", "ddr4"],
                    "rocegen_vcu118", "vcu118",
                    {CMAC_MODULE: "cmac", ddr4_module(512): "ddr4",
                     axi_cdc_module(512): "axi_cdc", JTAG_AXI_MODULE: "jtag_axi"}),
    "vcu118_25g_ddr4": (["--board", "vcu118_25g", "--qps", "2", "--retransmit-memory", "ddr4",
                         "--mem-bytes", str(1 << 26)], "rocegen_vcu118", "vcu118_25g",
                        {XXV_MODULE: "xxv", ddr4_module(64): "ddr4", axi_cdc_module(64): "axi_cdc",
                         JTAG_AXI_MODULE: "jtag_axi"}),
    "vcu118_10g_ddr4": (["--board", "vcu118_10g", "--qps", "1", "--retransmit-memory", "ddr4",
                         "--mem-bytes", str(1 << 20), "--name", "t10"], "t10", "vcu118_10g",
                        {XXV_MODULE: "xxv", ddr4_module(64): "ddr4", axi_cdc_module(64): "axi_cdc",
                         JTAG_AXI_MODULE: "jtag_axi"}),
}

#: Builds left to make test-full: DDR4 on the 10G board (1 MiB). The gate has DDR4 at W = 64 in
#: ``vcu118_25g_ddr4`` and the 10G board's glue (its XXV MAC) in ``vcu118_10g``.
FULL = {"vcu118_10g_ddr4"}


def names():
    return [pytest.param(n, marks=pytest.mark.full) if n in FULL else n for n in sorted(BUILDS)]


#: The integration kit of the core inside the top (``<top>_core_*``), and with the register
#: block its register map.
KIT = ("_core_pkg.sv", "_core_ports.md", "_core_inst.sv")
KIT_REGS = ("_core_registers.md", "_core_regs.h", "_core_regs.py")


def verilator():
    try:
        return str(verilator_bin_dir() / "verilator")
    except VerilatorNotFound as e:
        pytest.fail(str(e), pytrace=False)


#: Every test of this file uses the build folders: they run in one worker (``xdist_group``), so
#: that each folder is written once.
pytestmark = pytest.mark.xdist_group("board_builds")


def _digest(*parts):
    h = hashlib.sha1()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()


class _Builds(dict):
    """The build folders of :data:`BUILDS`, each written on first use unless the kept one is
    still the sources': ``name -> (folder, top module, board, vendor IP modules)``. A folder is
    written beside its place and renamed into it, with its stamp (``.sources``) last, so an
    interrupted build is never taken for a finished one."""

    def __missing__(self, name):
        args, top, board, ips = BUILDS[name]
        home = CACHE / f"{name}-{_digest(*args)[:10]}"
        folder, stamp = home / "out", home / ".sources"
        sources = source_digest(SOURCES)
        t0 = time.monotonic()
        if stamp.exists() and stamp.read_text() == sources and folder.is_dir():
            how = "reused"
        else:
            stamp.unlink(missing_ok=True)
            fresh = home / f"out.{os.getpid()}"
            shutil.rmtree(fresh, ignore_errors=True)
            assert main(["build", *args, "-o", str(fresh)]) == 0
            shutil.rmtree(folder, ignore_errors=True)
            fresh.rename(folder)
            stamp.write_text(sources)
            how = "built"
        costlog.record("board", name, how, time.monotonic() - t0, what="build folder")
        self[name] = (folder, top, board, ips)
        return self[name]


def lint_log(name, folder, top):
    """``verilator --lint-only`` of a build folder's top with the vendor IP stubs: its exit
    code and output, kept beside the folder and taken again when the Verilog, the stubs or the
    Verilator changed."""
    exe = verilator()
    stubs = sorted(STUBS.glob("*.v"))
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    key = _digest(version, top, (folder / f"{top}.v").read_bytes(),
                  *(p.name + p.read_text() for p in stubs))
    kept = folder.parent / "lint.json"
    t0 = time.monotonic()
    if kept.exists() and (got := json.loads(kept.read_text()))["key"] == key:
        costlog.record("board", name, "reused", time.monotonic() - t0, what="lint")
        return got["returncode"], got["log"]
    res = subprocess.run(
        [exe, "--lint-only", "-Wno-fatal", "--top-module", top, str(folder / f"{top}.v"),
         *map(str, stubs)], capture_output=True, text=True, cwd=folder)
    got = {"key": key, "returncode": res.returncode, "log": res.stdout + res.stderr}
    tmp = kept.with_name(f"lint.json.{os.getpid()}")
    tmp.write_text(json.dumps(got))
    os.replace(tmp, kept)
    costlog.record("board", name, "linted", time.monotonic() - t0, what="lint")
    return got["returncode"], got["log"]


@pytest.fixture(scope="module")
def builds():
    verilator()
    return _Builds()


def payload_ram(text):
    """The Verilog module of the endpoint's payload memory."""
    mod = re.search(r"^module (\\\S*\.endpoint\.memory\.ram) \(.*?^endmodule", text, re.M | re.S)
    assert mod, "payload memory module not found"
    return mod.group(0)


def module_text(text, name):
    """The Verilog of module ``name`` (plain or escaped identifier)."""
    head = re.escape(name) if re.fullmatch(r"\w+", name) else re.escape("\\" + name) + " "
    mod = re.search(rf"^module {head}\(.*?^endmodule", text, re.M | re.S)
    assert mod, f"module {name} not found"
    return mod.group(0)


def instance_conns(body, instance):
    """``{port: net}`` of the instance called ``instance`` in a module's Verilog."""
    inst = re.search(rf"^\s*\S+\s+{instance} \((.*?)\);", body, re.M | re.S)
    assert inst, f"instance {instance} not found"
    return {p: n.strip() for p, n in re.findall(r"\.(\w+)\(([^)]*)\)", inst.group(1))}


def stub_ports(module):
    text = (STUBS / f"{module}.v").read_text()
    return dict((name, d) for d, name in
                re.findall(r"^\s*(input|output)\s+wire\s+(?:\[\d+:0\]\s+)?(\w+)", text, re.M))


@pytest.mark.parametrize("name", names())
def test_build_folder(builds, name):
    folder, top, board, ips = builds[name]
    files = sorted(p.name for p in folder.iterdir())
    axil = JTAG_AXI_MODULE in ips
    kit = [top + k for k in KIT + (KIT_REGS if axil else ())]
    assert files == sorted([f"{top}.v", f"{board}.xdc", "build.tcl", "BUILD.md", *kit])
    tcl = (folder / "build.tcl").read_text()
    assert f"set top {top}\n" in tcl
    assert f"read_verilog [file join $here {top}.v]" in tcl
    assert f"read_xdc [file join $here {board}.xdc]" in tcl
    readme = (folder / "BUILD.md").read_text()
    assert "vivado -mode batch -source build.tcl" in readme
    kit_build(folder, top, readme, kit, axil)
    assert "| LED | meaning |" in readme and re.search(r"^\| [23] \| error", readme, re.M)
    text = (folder / f"{top}.v").read_text()
    assert re.search(rf"^module {top}\(", text, re.M)
    for ip, instance in ips.items():
        assert f"-module_name {ip} " in tcl, ip
        assert re.search(rf"^\s*{ip} {instance} \(", text, re.M), ip
    if name.endswith("_ddr4"):
        ddr4_build(folder, top, board, readme, text)
    elif name == "au250":
        assert "| QPs | 4 (QPNs 256..259) |" in readme and "CMAC site CMACE4_X0Y8" in readme
        assert "corundum" in readme.lower() and "qsfp0_fs" in (folder / "au250.xdc").read_text()
    elif name == "au55c":
        assert "| QPs | 2 (QPNs 256..257) |" in readme and "CMAC site CMACE4_X0Y3" in readme
        xdc = (folder / "au55c.xdc").read_text()
        assert "corundum" in readme.lower() and "PACKAGE_PIN BE45" in xdc
        assert "hbm_cattrip = 1'h0;" in text or "assign hbm_cattrip = 1'h0;" in text
    elif name == "vcu118":
        assert "| IPv4 address | 192.168.7.2 |" in readme and "| QPs | 2 (QPNs 256..257) |" in readme
        assert "262144 bytes of block RAM" in readme
        # the payload memory is left to Vivado (only the ICRC stages' memories ask for block RAM)
        assert "ram_style" not in payload_ram(text)
        assert set(re.findall(r'ram_style = "(\w+)"', text)) == {"block"}
        # the addresses are registers of the AXI4-Lite block, reset to the build's
        assert "reg [15:0] reg_mac_hi = 16'h020a;" in text
        assert re.search(r"reg \[31:0\] reg_mac_lo = 32'(d185339150|h0b0c0d0e);", text)
        assert re.search(r"reg \[31:0\] local_ip = 32'(d3232237314|hc0a80702);", text)
        assert "local_mac = 48'h" not in text
    else:
        assert "65536 bytes of UltraRAM" in readme
        # without the register block the addresses are in the core as constants
        assert "local_mac = 48'h020a0b0c0d0e;" in text
        assert re.search(r"local_ip = 32'(d3232237314|hc0a80702);", text)
        assert "s_axil" not in text and "jtag_axi" not in tcl
        # the payload memory is marked for UltraRAM and has no (zero) initial contents
        decl = re.search(r'\(\* ram_style = "ultra" \*\)\n\s*reg \[63:0\] mem \[8191:0\];', text)
        assert decl, "payload memory not marked for UltraRAM"
        ram = text[text.index("endpoint.memory.ram ("):]
        ram = ram[:ram.index("endmodule")]
        assert "initial begin" not in ram


def kit_build(folder, top, readme, kit, axil):
    """The core's integration kit in the build folder, listed in BUILD.md; with the register
    block, the register map and how to read it over JTAG."""
    for name in kit:
        assert f"| `{name}` |" in readme, name
    pkg = (folder / f"{top}_core_pkg.sv").read_text()
    assert re.search(rf"^package {top}_core_pkg;", pkg, re.M)
    inst = (folder / f"{top}_core_inst.sv").read_text()
    assert re.search(rf"^{top}_core ", inst, re.M)
    assert (".s_axil_araddr(" in inst) == axil
    if axil:
        header = (folder / f"{top}_core_regs.h").read_text()
        offset = re.search(rf"#define {top.upper()}_CORE_ID\s+0x0*([0-9a-fA-F]+)u?\b", header)
        assert offset, header[:400]
        assert "## Registers over JTAG" in readme
        assert f"create_hw_axi_txn -force rd_id $axi -type read -address {int(offset.group(1), 16):08x}" \
            in readme
        assert f"`{top}_core_registers.md`" in readme
    else:
        assert "## Registers over JTAG" not in readme


def ddr4_build(folder, top, board, readme, text):
    """What a build with DDR4 payload memory has beyond the others."""
    mem_bytes = {"vcu118": 1 << 31, "vcu118_25g": 1 << 26, "vcu118_10g": 1 << 20}[board]
    width = 512 if board == "vcu118" else 64
    assert f"| payload memory | {mem_bytes} bytes of DDR4 SDRAM (DDR4 C1" in readme
    assert "## Payload memory: DDR4 C1" in readme and "fpganinja/taxi" in readme
    assert "| 4 | DDR4 C1 calibrated" in readme
    assert "| c0_ddr4_ui_clk | 300.12 MHz |" in readme and "| c1_sys_clk | 250 MHz |" in readme
    assert not re.search(r"module \S*\.endpoint\.memory\.ram ", text)      # no payload memory on chip
    # the endpoint's AXI4 port drives the converter: only the fields the core has not (region,
    # QoS) are constants, and the B/R ready the core holds high by design (it reserves room for
    # every response before it asks)
    cdc = re.search(rf"^\s*{axi_cdc_module(width)} axi_cdc \((.*?)\);", text, re.M | re.S)
    conns = dict(re.findall(r"\.(s_axi_\w+)\(([^)]*)\)", cdc.group(1)))
    constant = {p for p, v in conns.items() if re.fullmatch(r"\d+'[hdb][0-9a-f]+", v.strip())}
    assert constant == {"s_axi_awregion", "s_axi_arregion", "s_axi_awqos", "s_axi_arqos",
                        "s_axi_bready", "s_axi_rready"}, constant
    assert conns["s_axi_awvalid"].strip() == "axi__aw__valid"
    assert conns["s_axi_rvalid"].strip() == "axi__r__valid"
    # in the top module, the endpoint's AXI4 master and the memory's slave port share each net
    body = module_text(text, top)
    ep, mem = instance_conns(body, "endpoint"), instance_conns(body, "ddr4")
    nets = {f"axi__{ch}__{f}" for ch in ("aw", "w", "ar") for f in ("valid", "ready", "payload")}
    nets |= {"axi__b__valid", "axi__r__valid"}
    assert nets <= set(ep.values()) & set(mem.values()), sorted(nets - set(ep.values()))
    assert len(conns) == 2 + 2 * 12 + 5 + 4 + 6
    xdc = (folder / f"{board}.xdc").read_text()
    for port in ("c1_ddr4_adr[16]", "c1_ddr4_dq[63]", "c1_ddr4_dqs_c[7]", "c1_ddr4_dm_dbi_n[0]",
                 "c1_ddr4_reset_n", "c1_sys_clk_n"):
        assert re.search(rf"PACKAGE_PIN \w+ IOSTANDARD \w+\}} \[get_ports \{{{re.escape(port)}\}}\]",
                         xdc), port
    # the top module's DDR4 ports, bidirectional where they must be
    for decl in ("inout [63:0] c1_ddr4_dq;", "inout [7:0] c1_ddr4_dqs_t;",
                 "inout [7:0] c1_ddr4_dm_dbi_n;", "output [16:0] c1_ddr4_adr;",
                 "input c1_sys_clk_p;"):
        assert decl in text, decl


@pytest.mark.parametrize("name", names())
def test_verilator_lint(builds, name):
    folder, top, _, ips = builds[name]
    returncode, log = lint_log(name, folder, top)
    assert returncode == 0 and "%Error" not in log, log[-3000:]
    warnings = re.findall(r"^%Warning-(\w+): [^:]*\.v:(\d+):\d+: (.*)$", log, re.M)
    kinds = collections.Counter(k for k, _, _ in warnings)
    print(f"{name}: {sum(kinds.values())} lint warnings: {dict(kinds)}")
    text = (folder / f"{top}.v").read_text()
    # the board glue: the top module and the parts holding vendor IP or primitives (MAC,
    # memory, clock buffers), not the core
    vendor = "|".join([*map(re.escape, ips), "IBUFDS", "BUFG"])
    glue = [m for m in re.finditer(r"^module (\S+?)\s*\(.*?^endmodule", text, re.M | re.S)
            if m.group(1) == top or re.search(rf"^\s*(?:{vendor}) \w+ \(", m.group(0), re.M)]
    assert len(glue) >= 3, [m.group(1) for m in glue]
    ranges = [(text.count("\n", 0, m.start()) + 1, text.count("\n", 0, m.end()) + 1) for m in glue]
    in_top = [(k, int(line), msg) for k, line, msg in warnings
              if any(a <= int(line) <= b for a, b in ranges)]
    # only unconnected IP outputs and Amaranth's zero-width wires
    assert {k for k, _, _ in in_top} <= {"PINMISSING", "ASCRANGE"}, in_top
    ports = {}
    for ip in ips:
        ports.update(stub_ports(ip))
    missing = [re.search(r"'(\w+)'", msg).group(1) for k, _, msg in in_top if k == "PINMISSING"]
    assert all(ports.get(p) == "output" for p in missing), \
        f"inputs of {list(ips)} left unconnected: {[p for p in missing if ports.get(p) != 'output']}"
