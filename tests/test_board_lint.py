"""``rocegen build`` end to end: the board tops it writes pass ``verilator --lint-only`` with
port-compatible stubs of the vendor IP (boards/stubs/), every input of the vendor IP is driven,
and the glue written for the board (the top module itself) lints without width warnings.

Needs Verilator on PATH (``make test`` puts it there).
"""

import collections
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rocegen.boards.vcu118 import CMAC_MODULE, XXV_MODULE
from rocegen.gateware.cli import main

STUBS = Path(__file__).resolve().parent.parent / "boards" / "stubs"

BUILDS = {
    # name: (command-line arguments, top module, vendor IP module)
    "vcu118": (["--board", "vcu118", "--qps", "2", "--ip", "192.168.7.2",
                "--mac", "02:0a:0b:0c:0d:0e"], "rocegen_vcu118", CMAC_MODULE),
    "vcu118_10g": (["--board", "vcu118_10g", "--qps", "3", "--retransmit-memory", "uram",
                    "--mem-bytes", "65536", "--name", "top10g"], "top10g", XXV_MODULE),
}


def verilator():
    exe = shutil.which("verilator")
    if exe is None:
        pytest.fail("verilator is not on PATH: run the tests with `make test` (it builds or finds "
                    "Verilator >= 5.036 and puts it on PATH), or add "
                    "~/.cache/rocegen/verilator-<version>/bin to PATH", pytrace=False)
    return exe


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    verilator()
    out = {}
    for name, (args, top, ip) in BUILDS.items():
        folder = tmp_path_factory.mktemp(name)
        assert main(["build", *args, "-o", str(folder)]) == 0
        out[name] = (folder, top, ip)
    return out


def stub_ports(module):
    text = (STUBS / f"{module}.v").read_text()
    return dict((name, d) for d, name in
                re.findall(r"^\s*(input|output)\s+wire\s+(?:\[\d+:0\]\s+)?(\w+)", text, re.M))


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_build_folder(builds, name):
    folder, top, ip = builds[name]
    files = sorted(p.name for p in folder.iterdir())
    assert files == sorted([f"{top}.v", f"{name}.xdc", "build.tcl", "BUILD.md"])
    tcl = (folder / "build.tcl").read_text()
    assert f"set top {top}\n" in tcl
    assert f"read_verilog [file join $here {top}.v]" in tcl
    assert f"read_xdc [file join $here {name}.xdc]" in tcl
    assert f"-module_name {ip} " in tcl
    readme = (folder / "BUILD.md").read_text()
    assert "vivado -mode batch -source build.tcl" in readme
    assert "| LED | meaning |" in readme and "| 3 | error" in readme
    text = (folder / f"{top}.v").read_text()
    assert re.search(rf"^module {top}\(", text, re.M)
    assert re.search(rf"^\s*{ip} cmac|^\s*{ip} xxv", text, re.M)
    if name == "vcu118":
        assert "| IPv4 address | 192.168.7.2 |" in readme and "| QPs | 2 (QPNs 256..257) |" in readme
        assert "262144 bytes of block RAM" in readme
        assert "ram_style" not in text
        # the addresses are in the core as constants
        assert "local_mac = 48'h020a0b0c0d0e;" in text
        assert re.search(r"local_ip = 32'(d3232237314|hc0a80702);", text)
    else:
        assert "65536 bytes of UltraRAM" in readme
        # the payload memory is marked for UltraRAM and has no (zero) initial contents
        decl = re.search(r'\(\* ram_style = "ultra" \*\)\n\s*reg \[63:0\] mem \[8191:0\];', text)
        assert decl, "payload memory not marked for UltraRAM"
        ram = text[text.index("endpoint.ram ("):]
        ram = ram[:ram.index("endmodule")]
        assert "initial begin" not in ram


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_verilator_lint(builds, name):
    folder, top, ip = builds[name]
    res = subprocess.run(
        [verilator(), "--lint-only", "-Wno-fatal", "--top-module", top, str(folder / f"{top}.v"),
         *sorted(str(p) for p in STUBS.glob("*.v"))],
        capture_output=True, text=True, cwd=folder)
    log = res.stdout + res.stderr
    assert res.returncode == 0 and "%Error" not in log, log[-3000:]
    warnings = re.findall(r"^%Warning-(\w+): [^:]*\.v:(\d+):\d+: (.*)$", log, re.M)
    kinds = collections.Counter(k for k, _, _ in warnings)
    print(f"{name}: {sum(kinds.values())} lint warnings: {dict(kinds)}")
    text = (folder / f"{top}.v").read_text()
    start = text.count("\n", 0, text.index(f"module {top}(")) + 1
    end = text.count("\n", 0, text.index("endmodule", text.index(f"module {top}("))) + 1
    in_top = [(k, int(line), msg) for k, line, msg in warnings if start <= int(line) <= end]
    # the board glue: only unconnected IP outputs and Amaranth's zero-width wires
    assert {k for k, _, _ in in_top} <= {"PINMISSING", "ASCRANGE"}, in_top
    ports = stub_ports(ip)
    missing = [re.search(r"'(\w+)'", msg).group(1) for k, _, msg in in_top if k == "PINMISSING"]
    assert all(ports.get(p) == "output" for p in missing), \
        f"inputs of {ip} left unconnected: {[p for p in missing if ports.get(p) != 'output']}"
