import re

import pytest

from rocegen.cli import main


def run(argv):
    """``main``'s exit status, also for errors argparse itself reports (it exits with 2)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_verilog_axis_top(tmp_path):
    out = tmp_path / "core.v"
    assert not main(["verilog", "--core", "stack", "--width", "64", "--ip", "192.168.1.9",
                     "-o", str(out)])
    text = out.read_text()
    assert re.search(r"^module rocegen_stack\(", text, re.M)
    for port in ("s_axis_tdata", "s_axis_tkeep", "s_axis_tuser", "m_axis_tready", "stats_addr"):
        assert re.search(rf"\b(input|output) .*\b{port}\b", text), port
    assert "input [63:0] s_axis_tdata" in text


def test_verilog_xgmii_top(tmp_path):
    out = tmp_path / "x.v"
    assert not main(["verilog", "--core", "stack", "--phy", "xgmii", "-o", str(out)])
    text = out.read_text()
    assert "input [63:0] xgmii_rxd" in text and "output [7:0] xgmii_txc" in text


def _ports(text, module):
    header = re.search(rf"^module {module}\((.*?)\);", text, re.M | re.S)
    assert header, f"module {module} not found"
    decl = {}
    for d, rng, name in re.findall(r"^  (input|output) (\[\d+:0\] )?(\w+);", text, re.M):
        decl.setdefault(name, (d, int(rng[1:].split(":")[0]) + 1 if rng else 1))
    return decl


def test_verilog_endpoint_core(tmp_path, capsys):
    out = tmp_path / "ep.v"
    assert not main(["verilog", "--width", "64", "--qps", "1", "--mem-bytes", "8192",
                     "--ip", "192.168.1.9", "--mac", "02:11:22:33:44:55", "-o", str(out)])
    assert "endpoint core rocegen_endpoint, W=64, 1 QPs, onchip memory of 8192 bytes" in \
        capsys.readouterr().out
    text = out.read_text()
    ports = _ports(text, "rocegen_endpoint")
    expect = {
        "s_axis_tdata": ("input", 64), "s_axis_tkeep": ("input", 8), "s_axis_tuser": ("input", 1),
        "s_axis_tready": ("output", 1), "m_axis_tdata": ("output", 64),
        "m_axis_tready": ("input", 1), "wr_valid": ("input", 1), "wr_ready": ("output", 1),
        "cpl_valid": ("output", 1), "cpl_ready": ("input", 1), "qp_ctl_valid": ("input", 1),
        "qp_psn_ready": ("output", 1), "gen_busy": ("output", 1), "qp_open": ("output", 1),
        "s_msg_axis_tdata": ("input", 64), "stats_data": ("output", 32),
        "mem_w_valid": ("input", 1), "clk": ("input", 1), "rst": ("input", 1),
    }
    for name, want in expect.items():
        assert ports.get(name) == want, (name, ports.get(name))
    for name in ("wr_data", "cpl_data", "qp_ctl_data", "gen_data", "msg_meta", "mem_w_data",
                 "stats_addr"):
        assert name in ports, name
    assert not any(p.startswith("m_axi_") for p in ports)
    # beside it: the port table lists every port of the Verilog with its direction and width,
    # the template connects each one once; no register files without --axil
    table = (tmp_path / "rocegen_endpoint_ports.md").read_text()
    template = (tmp_path / "rocegen_endpoint_inst.sv").read_text()
    assert (tmp_path / "rocegen_endpoint_pkg.sv").exists()
    assert not (tmp_path / "rocegen_endpoint_regs.h").exists()
    header = re.search(r"^module rocegen_endpoint\((.*?)\);", text, re.M | re.S).group(1)
    top = [n.strip() for n in header.split(",")]
    for name in top:
        if name not in ports:       # zero-width (a QP index with one QP)
            ports[name] = (re.search(rf"^  (input|output) \[-1:0\] {name};", text, re.M)[1], 0)
        direction, width = ports[name]
        assert f"| `{name}` | {direction} | {width} |" in table, name
        assert template.count(f".{name}({name if width else ''})") == 1, name
    assert len(re.findall(r"^  \.", template, re.M)) == len(top)


def test_verilog_endpoint_xgmii_axi4(tmp_path):
    out = tmp_path / "x.v"
    assert not main(["verilog", "--phy", "xgmii", "--memory", "axi4", "--qps", "2",
                     "--mem-bytes", str(1 << 20), "--name", "my_core", "-o", str(out)])
    ports = _ports(out.read_text(), "my_core")
    assert ports["xgmii_rxd"] == ("input", 64) and ports["xgmii_txc"] == ("output", 8)
    assert ports["mac_rx_fcs_errors"] == ("output", 32)
    assert ports["m_axi_awaddr"] == ("output", 20) and ports["m_axi_rdata"] == ("input", 64)
    assert ports["qp_open"] == ("output", 2)
    assert "s_axis_tdata" not in ports and "mem_w_valid" not in ports


@pytest.mark.parametrize("args, message", [
    (["--width", "100"], "width must be one of"),
    (["--ip", "10.0.0.300"], "not an IPv4 address"),
    (["--mac", "02:00:00:00:01"], "not a MAC address"),
    (["--phy", "xgmii", "--width", "512"], "width must be 64"),
    (["--core", "stack", "--phy", "xgmii", "--width", "512"], "width must be 64"),
    (["--core", "stack", "--axil"], "--axil applies to --core endpoint only"),
    (["--ip", "1.2.3.4.5"], "--ip: not an IPv4 address"),
    (["--mac", "gg:00:00:00:00:01"], "--mac: not a MAC address"),
    (["--qps", "0"], "--qps must be 1..256, not 0"),
    (["--qps", "257"], "--qps must be 1..256, not 257"),
    (["--memory", "ddr4"], "--memory must be one of onchip, axi4, not 'ddr4'"),
    (["--mem-bytes", "1000"], "--mem-bytes must be a power of two, not 1000"),
    (["--mem-bytes", "64"], "--mem-bytes: mem_bytes must be a power of two from 1024"),
    (["--port", "5"], "--port applies to --core stack only"),
    (["--core", "stack", "--qps", "2"], "--qps applies to --core endpoint only"),
    (["--core", "stack", "--memory", "axi4"], "--memory applies to --core endpoint only"),
    (["--core", "stack", "--port", "70000"], "--port must be a UDP port"),
    (["--name", "9lives"], "--name must be a Verilog identifier"),
    (["--pmtu", "300"], "--pmtu: pmtu must be one of 256, 512, 1024, 2048, 4096"),
    (["--timeout", "32"], "--timeout: cm_timeout must be 0..31, not 32"),
    (["--retry-cnt", "8"], "--retry-cnt: cm_retry must be 0..7, not 8"),
    (["--rnr-retry", "-1"], "--rnr-retry: cm_rnr_retry must be 0..7, not -1"),
    (["--allow-net", "10.0.0.0"], "--allow-net must be A.B.C.D/N, not '10.0.0.0'"),
    (["--allow-net", "10.0.0.0/33"], "--allow-net: cm_allow_net prefix length must be 0..32"),
    (["--allow-net", "10.0.0.1/24"], "has host bits set"),
    (["--window", "0"], "--window: window must be 1..2^23-1 packets, not 0"),
    (["--wr-depth", "3"], "--wr-depth: wr_depth must be a power of two from 1 to 1024, not 3"),
    (["--cm-port", "70000"], "--cm-port: cm_port must be 1..65535, not 70000"),
    (["--cm-port", "4791"], "--cm-port: cm_port must not be 4791, the RoCEv2 port"),
    (["--clk-mhz", "0"], "--clk-mhz must be a clock frequency"),
    (["--core", "stack", "--pmtu", "1024"], "--pmtu applies to --core endpoint only"),
    (["--core", "stack", "--cm-port", "5000"], "--cm-port applies to --core endpoint only"),
    (["--core", "stack", "--responder"], "--responder applies to --core endpoint only"),
    (["--rnr-timer", "3"], "--rnr-timer needs the responder (--responder)"),
    (["--no-responder", "--rq-depth", "4", "--pattern-sink"],
     "--rq-depth, --pattern-sink need the responder (--responder)"),
    (["--responder", "--rnr-timer", "40"],
     "--rnr-timer: rnr_timer must be an RNR timer code 0..31, not 40"),
    (["--responder", "--rq-depth", "3"], "--rq-depth: rq_depth must be a power of two 1..1024, not 3"),
    (["--responder", "--resp-region", "0:0x100000"],
     "--resp-region: resp_region [0x0, +0x100000) is not inside local memory of 0x40000 bytes"),
])
def test_bad_parameters_are_clear_errors(tmp_path, capsys, args, message):
    assert main(["verilog", *args, "-o", str(tmp_path / "x.v")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.v").exists()


@pytest.mark.parametrize("args, message", [
    (["verilog", "--core", "nic", "-o", "{out}"], "argument --core: invalid choice"),
    (["verilog", "--qps", "many", "-o", "{out}"], "argument --qps: invalid int value"),
    (["build", "--board", "vcu118", "--qps", "x", "-o", "{out}"],
     "argument --qps: invalid int value"),
    (["build", "--board", "vcu118"], "the following arguments are required: -o/--output"),
    (["verilog", "--responder", "--resp-region", "64k", "-o", "{out}"],
     "argument --resp-region: a region is BASE:LENGTH in bytes (e.g. 0:0x20000), not '64k'"),
])
def test_argument_errors_exit_2(tmp_path, capsys, args, message):
    assert run([a.format(out=tmp_path / "o") for a in args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, message", [
    (["--board", "kcu105"], "--board: unknown board 'kcu105'; known boards: vcu118, "),
    (["--board", "vcu118", "--retransmit-memory", "ddr4", "--mem-bytes", str(1 << 32)],
     "--mem-bytes with ddr4 must be a power of two from 1048576 (the streaming ring) to "
     "2147483648 (the size of DDR4 C1), not 4294967296"),
    (["--board", "vcu118", "--retransmit-memory", "sram"],
     "--retransmit-memory must be one of bram, uram, ddr4, not 'sram'"),
    (["--board", "vcu118", "--width", "64"],
     "--width 64 does not match the vcu118 board: its MAC (CMAC"),
    (["--board", "vcu118_25g", "--width", "512"], "--width 512 does not match the vcu118_25g"),
    (["--board", "vcu118", "--qps", "0"], "--qps must be 1..256, not 0"),
    (["--board", "vcu118_10g", "--ip", "10.0.0"], "--ip: not an IPv4 address"),
    (["--board", "vcu118_10g", "--mac", "00-11-22-33-44-55"], "--mac: not a MAC address"),
    (["--board", "vcu118_10g", "--name", "a b"], "--name must be a Verilog identifier"),
    (["--board", "vcu118", "--port", "4791"], "--port: cm_port must not be 4791"),
    (["--board", "vcu118", "--pmtu", "100"], "--pmtu: pmtu must be one of"),
    (["--board", "vcu118", "--allow-net", "1.2.3.4/8"], "--allow-net: cm_allow_net"),
])
def test_build_errors(tmp_path, capsys, args, message):
    out = tmp_path / "build"
    assert main(["build", *args, "-o", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_boards_lists_every_board(capsys):
    from rocegen.boards import BOARDS
    assert main(["boards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["board", "mac", "line", "width", "core", "clock", "part",
                                "clocks"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == set(BOARDS)
    assert re.search(r"CMAC.*100G\s+512\s+322\.266 MHz\s+xcvu9p-flga2104-2L-e\s+clk_125mhz 125 MHz",
                     rows["vcu118"])
    assert re.search(r"XGMII MAC.*25G\s+64\s+390\.625 MHz", rows["vcu118_25g"])
    assert re.search(r"XGMII MAC.*10G\s+64\s+156\.250 MHz", rows["vcu118_10g"])
    assert "qsfp1_mgt_refclk_0 156.25 MHz" in rows["vcu118"]


@pytest.mark.parametrize("args, message", [
    (["sim", "serve", "--listen", "10.0.0.5"], "--listen must be a loopback address"),
    (["sim", "serve", "--ip", "10.0.0.1"], "--ip and --host-ip must differ"),
    (["sim", "serve", "--host-ip", "10.0.0.300"], "--host-ip"),
    (["sim", "serve", "--width", "96"], "width"),
    (["sim", "serve", "--wire-port", "70000"], "--wire-port must be a TCP/UDP port"),
    (["sim", "serve", "--max-cycles", "0"], "--max-cycles must be > 0"),
    (["sim", "serve", "--allow-net", "10.0.0.1"], "--allow-net must be A.B.C.D/N"),
    (["sim", "serve", "--roce-to", "wire"], "--roce-to applies to --tap only"),
    (["sim", "serve", "--vlan", "4095"], "--vlan must be a VLAN ID 1..4094, not 4095"),
    (["sim", "serve", "--rnr-timer", "32"],
     "--rnr-timer: rnr_timer must be an RNR timer code 0..31, not 32"),
    (["sim", "serve", "--no-responder", "--resp-region", "0:4096"],
     "--resp-region needs the responder (--responder)"),
    (["sim", "serve", "--pattern-sink", "--no-responder"],
     "--pattern-sink needs the responder (--responder)"),
    (["sim", "serve", "--atomics", "big", "--no-responder"],
     "--atomics needs the responder (--responder)"),
    (["sim", "serve", "--atomics", "little", "--no-reads"], "--atomics needs --reads"),
    (["sim", "demo", "--phy", "xgmii", "--width", "512"],
     "--width must be 64 with --phy xgmii (the XGMII word), not 512"),
    (["sim", "demo", "--phy", "xgmii", "--line-gbps", "100"],
     "--line-gbps does not apply to --phy xgmii"),
    (["sim", "demo", "--vlan", "0"], "--vlan must be a VLAN ID 1..4094, not 0"),
    (["sim", "demo", "--qps", "257"], "--qps must be 1..256, not 257"),
    (["demo", "--qps", "9"], "--qps must be 1..8"),
    (["demo", "--mib", "0"], "--mib must be 1..64"),
    (["demo", "--host-writes", "5000"], "--host-writes must be 0..4096, not 5000"),
])
def test_serve_and_demo_errors(capsys, args, message):
    assert run(args) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("extra, atomics", [([], "little"), (["--atomics", "big"], "big"),
                                            (["--atomics", "off"], None),
                                            (["--no-reads"], None), (["--no-responder"], None)])
def test_serve_executes_atomics_with_its_reads(extra, atomics):
    """``rocegen sim serve``'s endpoint executes atomics (little-endian) whenever it has READs,
    unless ``--atomics off``."""
    import argparse

    from rocegen.sim.apps import serve
    from rocegen.sim.apps.options import endpoint_params, serve_atomics
    p = argparse.ArgumentParser()
    serve.add_parser(p.add_subparsers(dest="c"))
    args = p.parse_args(["serve", *extra])
    assert serve_atomics(args, endpoint_params(args)).get("atomics") == atomics


def test_read_defaults_written_out_are_the_generators():
    """The READ defaults the command line's help, the README and the READ design note write
    out (the help is built without loading the gateware) are the generator's own."""
    import argparse
    from pathlib import Path

    from rocegen.gateware.roce.endpoint.config import params
    from rocegen.gateware.roce.endpoint.endpoint import RD_HOLE_WAIT
    from rocegen.gateware.roce.read.read_layouts import MAX_RD_ATOMIC
    from rocegen.sim.apps.options import add_endpoint_options

    parser = argparse.ArgumentParser()
    add_endpoint_options(parser, "--cm-port", responder=True)
    helps = {a.option_strings[0]: " ".join(a.help.split()) for a in parser._actions if a.help}
    fields = params()
    rd_depth = fields["rd_depth"][0]
    assert (fields["rd_hole_wait"][0], fields["max_rd_atomic"][0]) == (RD_HOLE_WAIT, MAX_RD_ATOMIC)
    assert f"default {RD_HOLE_WAIT}," in helps["--rd-hole-wait"]
    assert f"default {MAX_RD_ATOMIC};" in helps["--max-rd-atomic"]
    assert f"default {rd_depth})" in helps["--rd-depth"]
    root = Path(__file__).resolve().parents[3]
    readme = " ".join((root / "README.md").read_text().split())
    assert f"| `rd_hole_wait` | `{RD_HOLE_WAIT}` |" in readme
    assert f"| `max_rd_atomic` | `{MAX_RD_ATOMIC}` |" in readme
    assert f"| `rd_depth` | `{rd_depth}` |" in readme
    design = " ".join((root / "docs" / "read-requester-design.md").read_text().split())
    assert f"`rd_hole_wait` microseconds (default {RD_HOLE_WAIT};" in design
