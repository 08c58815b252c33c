"""Board targets: registry, platform pins, board tops and cores elaborating over a parameter
matrix, constraints and Tcl contents, and the board glue (reset synchronizer, LED logic,
counter watcher) simulated against Python models."""

import random
import re
import warnings

import pytest
from amaranth.hdl import ClockDomain, Fragment, Module, Signal, UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from rocegen.boards import BOARDS, RETRANSMIT_MEMORIES, get_board
from rocegen.boards.base import add_ram_style, check_build_params
from rocegen.boards.vcu118 import (
    CMAC_MODULE,
    DDR4_C1,
    LEDS,
    XXV_MODULE,
    Vcu118Cmac,
    VCU118Platform,
    Vcu118Top,
    axi_cdc_module,
    ddr4_module,
    leds_for,
)
from rocegen.boards.xilinx import JTAG_AXI_MODULE
from rocegen.gateware.core import CoreTop
from rocegen.gateware.lib.level_sync import LevelSync
from rocegen.gateware.lib.reset_sync import ResetSync
from rocegen.gateware.roce.endpoint.endpoint import STATS, RoceEndpoint
from rocegen.gateware.roce.endpoint.regmap import REGISTERS, windows_for
from rocegen.gateware.roce.endpoint.regs import AxiLiteRegs
from rocegen.gateware.shell.control import core_control
from rocegen.gateware.shell.mem_reset import MemResetControl
from rocegen.gateware.shell.stats_watch import StatsWatch
from rocegen.gateware.shell.status_leds import StatusLeds
from rocegen.gateware.shell.stretch import Stretch
from rocegen.sim.testing.harness import run_sim

PART = "xcvu9p-flga2104-2L-e"
#: The VCU118 targets (the Alveo cards have their own tests: test_board_au250.py,
#: test_board_au55c.py).
VCU118 = sorted(n for n in BOARDS if n.startswith("vcu118"))


# -- registry and platform ---------------------------------------------------------------------

def test_registry_describes_every_board():
    assert set(BOARDS) == {"vcu118", "vcu118_25g", "vcu118_10g", "au250", "au55c"}
    for name, board in BOARDS.items():
        assert board.name == name
        assert board.part == (PART if name in VCU118 else {"au250": "xcu250-figd2104-2-e",
                                                           "au55c": "xcu55c-fsvh2892-2L-e"}[name])
        row = board.summary()
        assert set(row) == {"board", "mac", "line", "width", "core clock", "part", "clocks"}
        assert row["line"] == f"{board.line_rate_gbps:g}G"
    assert (BOARDS["vcu118"].width, BOARDS["vcu118"].line_rate_gbps) == (512, 100)
    assert BOARDS["vcu118"].core_clock_hz == pytest.approx(322.265625e6)
    assert (BOARDS["vcu118_25g"].width, BOARDS["vcu118_25g"].core_clock_hz) == (64, 390.625e6)
    assert (BOARDS["vcu118_10g"].width, BOARDS["vcu118_10g"].core_clock_hz) == (64, 156.25e6)
    with pytest.raises(ValueError, match=r"--board: unknown board 'kcu105'.*vcu118"):
        get_board("kcu105")


def test_platform_pins():
    plat = VCU118Platform()
    assert plat._part == PART
    leds = [plat.lookup("led", i).ios[0].names[0] for i in range(8)]
    assert leds == "AT32 AV34 AY30 BB32 BF32 AU37 AV36 BA37".split()
    q = plat.lookup("qsfp", 0)
    sub = {s.name: s for s in q.ios}
    assert sub["refclk"].ios[0].p.names == ["W9"] and sub["refclk"].ios[0].n.names == ["W8"]
    assert sub["refclk"].clock.frequency == 156.25e6
    assert sub["rx"].ios[0].p.names == "Y2 W4 V2 U4".split()
    assert sub["tx"].ios[0].p.names == "V7 T7 P7 M7".split()
    assert plat.lookup("clk125", 0).clock.frequency == 125e6
    assert plat.lookup("clk300", 0).ios[0].p.names == ["G31"]
    # DDR4 C1: its reference clock, and the 64-bit interface
    assert plat.lookup("clk250", 0).ios[0].p.names == ["E12"]
    assert plat.lookup("clk250", 0).clock.frequency == 250e6
    ddr = {s.name: s.ios[0] for s in plat.lookup("ddr4", 0).ios}
    assert [len(ddr[n].names) for n in ("a", "ba", "bg", "cke", "cs_n", "act_n", "odt",
                                        "reset_n", "dq", "dm_dbi_n")] == [17, 2, 1, 1, 1, 1, 1, 1,
                                                                          64, 8]
    assert (ddr["a"].names[0], ddr["a"].names[16], ddr["act_n"].names) == ("D14", "F15", ["E13"])
    assert (ddr["dq"].names[0], ddr["dq"].names[63], ddr["reset_n"].names) == ("F11", "F23",
                                                                                ["N20"])
    assert (ddr["clk"].p.names, ddr["clk"].n.names) == (["F14"], ["E14"])
    assert ddr["dqs"].p.names[0] == "D11" and ddr["dqs"].n.names[7] == "G23"
    assert ddr["dm_dbi_n"].names == "G11 R18 K17 G18 B18 P20 L23 G22".split()
    # no pin is used twice across all resources
    pins = []
    for res in plat.resources.values():
        stack = list(res.ios)
        while stack:
            io = stack.pop()
            if hasattr(io, "ios"):
                stack.extend(io.ios)
            elif hasattr(io, "p"):
                pins += io.p.names + io.n.names
            else:
                pins += io.names
    assert len(pins) == len(set(pins))


# -- elaboration matrix -----------------------------------------------------------------------

@pytest.mark.parametrize("board", VCU118)
@pytest.mark.parametrize("num_qps, memory", [(1, "bram"), (8, "uram"), (256, "bram"),
                                             (2, "ddr4")])
def test_board_tops_elaborate(board, num_qps, memory):
    b = get_board(board)
    mem, mem_bytes = check_build_params(b, num_qps=num_qps, mac="02:00:00:00:00:01",
                                        ip="10.0.0.2", retransmit_memory=memory)
    top = b.top(num_qps=num_qps, mac="02:00:00:00:00:01", ip="10.0.0.2", memory=mem,
                mem_bytes=mem_bytes if num_qps != 256 else 64 * 1024)
    Fragment.get(top, None)
    assert top.endpoint.num_qps == num_qps and top.width == b.width
    assert top.has_connection_manager            # the QP LED follows the connection manager
    assert len(top.qsfp1_tx_p) == (4 if b.width == 512 else 1)
    assert len(top.led) == 8
    if memory == "ddr4":
        # the whole of DDR4 C1 by default, through the core's AXI4 port
        assert (top.memory, top.endpoint.memory) == ("axi4", "axi4")
        assert top.endpoint.mem_bytes == DDR4_C1.size_bytes == 1 << 31
        assert len(top.endpoint.axi.ar.payload.addr) == 31
        assert len(top.endpoint.axi.r.payload.data) == b.width
        assert {n: len(p) for n, p in top.io_ports.items()} == {
            "c1_ddr4_dq": 64, "c1_ddr4_dqs_t": 8, "c1_ddr4_dqs_c": 8, "c1_ddr4_dm_dbi_n": 8}
        assert len(top.c1_ddr4_adr) == 17 and "c1_sys_clk_p" in top.signature.members
    else:
        assert top.memory == "onchip" and top.io_ports == {}
        assert "c1_ddr4_adr" not in top.signature.members


@pytest.mark.parametrize("board", VCU118)
def test_board_tops_take_endpoint_parameters(board):
    """Endpoint parameters reach the core; the retransmit timers count the board's clock."""
    b = get_board(board)
    top = b.top(num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip",
                mem_bytes=1 << 16, window=256, wr_depth=8, pmtu=1024, cm_port=5000)
    ep = top.endpoint
    assert ep.clk_hz == b.core_clock_hz
    assert ep._retry.tick_cycles == round(b.core_clock_hz * 1.024e-6)
    assert ep._sched.window == 256 and ep._sched.depth == 8
    with pytest.raises(ValueError, match="clk_hz is the board's core clock"):
        b.top(num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip",
              mem_bytes=1 << 16, clk_hz=100e6)


@pytest.mark.parametrize("kw", [
    dict(width=64, phy="xgmii"), dict(width=64), dict(width=128, memory="axi4"),
    dict(width=256, num_qps=3), dict(width=512, num_qps=256, mem_bytes=1 << 16),
    dict(width=512, memory="axi4", mem_bytes=1 << 30),
])
def test_core_tops_elaborate(kw):
    core = CoreTop(**{"num_qps": 2, **kw})
    Fragment.get(core, None)
    ports = core.signature.members
    w = kw["width"]
    # every endpoint port is there, flattened
    for name in ("wr_data", "wr_valid", "wr_ready", "cpl_data", "qp_ctl_data", "qp_psn_valid",
                 "gen_ready", "gen_busy", "qp_open", "s_msg_axis_tdata", "msg_meta",
                 "stats_addr", "stats_data"):
        assert name in ports, name
    if kw.get("phy") == "xgmii":
        assert len(core.xgmii_rxd) == 64 and "mac_rx_fcs_errors" in ports
        assert "s_axis_tdata" not in ports
    else:
        assert len(core.s_axis_tdata) == w and len(core.m_axis_tkeep) == w // 8
    if kw.get("memory") == "axi4":
        assert len(core.m_axi_rdata) == w and "mem_w_data" not in ports
    else:
        assert "mem_w_data" in ports and "m_axi_araddr" not in ports
    assert len(core.qp_open) == core.num_qps


@pytest.mark.parametrize("kw, message", [
    (dict(width=512, phy="xgmii"), "width must be 64"),
    (dict(width=64, phy="rgmii"), "phy must be one of"),
    (dict(width=100), "width must be one of"),
    (dict(width=64, num_qps=0), "num_qps must be"),
    (dict(width=64, memory="ddr4"), "memory must be one of"),
    (dict(width=64, ip="1.2.3"), "not an IPv4 address"),
    (dict(width=64, mac="zz:00:00:00:00:00"), "not a MAC address"),
])
def test_core_top_rejects_bad_parameters(kw, message):
    with pytest.raises(ValueError, match=message):
        CoreTop(**kw)


@pytest.mark.parametrize("board, kw, message", [
    ("vcu118", dict(width=64), r"--width 64 does not match the vcu118 board.*512"),
    ("vcu118_10g", dict(width=512), r"--width 512 does not match the vcu118_10g board.*64"),
    ("vcu118", dict(num_qps=0), r"--qps must be 1\.\.256, not 0"),
    ("vcu118", dict(num_qps=257), r"--qps must be 1\.\.256, not 257"),
    ("vcu118", dict(ip="10.0.0.256"), r"--ip: not an IPv4 address"),
    ("vcu118", dict(mac="02:00:00:00:01"), r"--mac: not a MAC address"),
    ("vcu118", dict(retransmit_memory="sram"), r"--retransmit-memory must be one of"),
    ("vcu118", dict(retransmit_memory="ddr4", mem_bytes=1 << 32),
     r"--mem-bytes with ddr4 must be a power of two from 1048576 \(the streaming ring\) to "
     r"2147483648 \(the size of DDR4 C1\), not 4294967296"),
    ("vcu118_10g", dict(retransmit_memory="ddr4", mem_bytes=3 << 20),
     r"--mem-bytes with ddr4 must be a power of two .*not 3145728"),
    ("vcu118_25g", dict(retransmit_memory="ddr4", mem_bytes=1 << 19),
     r"--mem-bytes with ddr4 must be a power of two from 1048576 .*not 524288"),
    ("vcu118", dict(retransmit_memory="ddr4", mem_bytes="1G"),
     r"--mem-bytes with ddr4 must be .*not '1G'"),
])
def test_build_parameters_are_checked(board, kw, message):
    params = {"num_qps": 8, "mac": "02:00:00:00:00:01", "ip": "10.0.0.2",
              "retransmit_memory": "bram", **kw}
    with pytest.raises(ValueError, match=message):
        check_build_params(get_board(board), **params)


def test_ddr4_build_parameters():
    """DDR4: the core's memory is AXI4, as large as DDR4 C1 unless told otherwise."""
    assert RETRANSMIT_MEMORIES == ("bram", "uram", "ddr4")
    common = {"num_qps": 8, "mac": "02:00:00:00:00:01", "ip": "10.0.0.2"}
    for name in VCU118:
        b = get_board(name)
        assert b.ddr4 is DDR4_C1
        assert check_build_params(b, retransmit_memory="ddr4", **common) == ("axi4", 1 << 31)
        for size in (1 << 20, 1 << 31):
            assert check_build_params(b, retransmit_memory="ddr4", mem_bytes=size,
                                      **common) == ("axi4", size)
        assert check_build_params(b, retransmit_memory="bram", **common) == ("onchip", 1 << 18)
    # a board without DDR4 says so
    no_ddr4 = type("NoDdr4", (Vcu118Cmac,), {"name": "plain", "ddr4": None})()
    with pytest.raises(ValueError, match=r"--retransmit-memory ddr4: the plain board has no "
                                         r"DDR4 memory rocegen drives; use bram or uram"):
        check_build_params(no_ddr4, retransmit_memory="ddr4", **common)


def test_top_rejects_bad_mac_kind():
    with pytest.raises(ValueError, match="mac_kind"):
        Vcu118Top(mac_kind="lbus")
    with pytest.raises(ValueError, match="line_rate_gbps"):
        Vcu118Top(mac_kind="cmac", line_rate_gbps=25)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("mem_bytes", [1 << 32, (1 << 20) + 64, 1 << 16, True])
def test_top_rejects_ddr4_sizes_it_cannot_hold(mem_bytes):
    with pytest.raises(ValueError, match=r"mem_bytes with DDR4 must be a power of two from "
                                         r"1048576 \(1 MiB\) to 2147483648 \(2 GiB, the size of "
                                         r"DDR4 C1\)"):
        Vcu118Top(mac_kind="xxv", line_rate_gbps=10, num_qps=1, memory="axi4",
                  mem_bytes=mem_bytes)


def test_leds_with_ddr4():
    """Builds with DDR4 show its calibration on LED 4; the other LEDs keep their meaning."""
    assert leds_for("onchip") == LEDS
    ddr = dict(leds_for("axi4"))
    assert "DDR4 C1 calibrated" in ddr[4] and "c0_init_calib_complete" in ddr[4]
    assert "heartbeat of the 125 MHz" in dict(LEDS)[4]
    assert {i: w for i, w in ddr.items() if i != 4} == {i: w for i, w in LEDS if i != 4}
    assert "until the memory is calibrated" in ddr[7]
    assert [i for i, _ in leds_for("axi4")] == list(range(8))


# -- constraints and Tcl ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tops():
    return {name: b.top(num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip",
                        mem_bytes=64 * 1024) for name, b in BOARDS.items() if name in VCU118}


#: DDR4 payload memory of the tops of :func:`ddr4_tops`: all of it at 100G, 16 MiB at 10/25G.
DDR4_SIZES = {"vcu118": None, "vcu118_25g": 1 << 24, "vcu118_10g": 1 << 24}


@pytest.fixture(scope="module")
def ddr4_tops():
    return {name: b.top(num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="axi4",
                        mem_bytes=DDR4_SIZES[name]) for name, b in BOARDS.items() if name in VCU118}


def _port_bits(top):
    from amaranth.lib.wiring import Out
    bits = {}
    ports = [(name, len(getattr(top, name)), "out" if member.flow == Out else "in")
             for name, member in top.signature.members.items()]
    ports += [(name, len(port), "inout") for name, port in getattr(top, "io_ports", {}).items()]
    for name, width, flow in ports:
        refs = [name] if width == 1 else [f"{name}[{i}]" for i in range(width)]
        for r in refs:
            bits[r] = flow
    return bits


_DESIGNS = {}
_INSTANCES = {}


def _design(top):
    """``top`` elaborated. A design elaborates once, so it is kept for the next test that asks
    about the same top (its instances, its constraints)."""
    if id(top) not in _DESIGNS:
        _DESIGNS[id(top)] = (top, Fragment.get(top, None))
    return _DESIGNS[id(top)][1]


def _instances(top):
    """The instances of ``top``'s design by type (one of each type)."""
    from amaranth.hdl import Instance
    if id(top) in _INSTANCES:
        return _INSTANCES[id(top)]
    found = {}

    def walk(frag):
        if isinstance(frag, Instance):
            assert frag.type not in found or frag.type in ("IBUFDS", "BUFG"), frag.type
            found[frag.type] = frag
        for sub, _, _ in getattr(frag, "subfragments", []):
            walk(sub)
    walk(_design(top))
    _INSTANCES[id(top)] = found
    return found


@pytest.mark.parametrize("board", VCU118)
def test_xdc_places_every_port_once(tops, board):
    b = get_board(board)
    xdc = b.xdc(tops[board], design=_design(tops[board]))
    placed = re.findall(r"set_property -dict \{PACKAGE_PIN (\S+)([^}]*)\} \[get_ports \{(\S+)\}\]",
                        xdc)
    ports = [p for _, _, p in placed]
    assert sorted(ports) == sorted(_port_bits(tops[board])), "every port bit placed exactly once"
    pins = [pin for pin, _, _ in placed]
    assert len(pins) == len(set(pins))
    byport = {p: (pin, attrs) for pin, attrs, p in placed}
    assert byport["clk_125mhz_p"] == ("AY24", " IOSTANDARD LVDS")
    assert byport["qsfp1_mgt_refclk_0_p"][0] == "W9"
    assert byport["led[3]"] == ("BB32", " IOSTANDARD LVCMOS12 SLEW SLOW DRIVE 8")
    lane0 = "qsfp1_rx_p[0]" if b.width == 512 else "qsfp1_rx_p"
    assert byport[lane0][0] == "Y2"
    if b.width == 512:
        assert byport["qsfp1_tx_n[3]"][0] == "M6"
    # clocks: board clock and transceiver reference
    assert "create_clock -period 8.000 -name clk_125mhz_p [get_ports clk_125mhz_p]" in xdc
    assert ("create_clock -period 6.400 -name qsfp1_mgt_refclk_0_p "
            "[get_ports qsfp1_mgt_refclk_0_p]") in xdc
    assert "set_clock_groups -asynchronous" in xdc
    # false paths: LEDs, async inputs, reset synchronizer presets, level synchronizers
    assert "set_false_path -to [get_ports {led[*]" in xdc
    assert "set_false_path -from [get_ports {cpu_reset btn_c" in xdc
    assert "REF_PIN_NAME == PRE" in xdc and "*rst_sync_*" in xdc and "*cdc0_reg*" in xdc
    assert "CONFIG_VOLTAGE 1.8" in xdc


_PLACED = re.compile(r"set_property -dict \{PACKAGE_PIN (\S+)([^}]*)\} \[get_ports \{(\S+)\}\]")


@pytest.mark.parametrize("board", VCU118)
def test_xdc_places_every_ddr4_port(ddr4_tops, board):
    """Every bit of every port of a DDR4 build is placed once, with an I/O standard; the DDR4
    ports on the pins of DDR4 C1 and its reference clock."""
    top = ddr4_tops[board]
    xdc = get_board(board).xdc(top, design=_design(top))
    placed = _PLACED.findall(xdc)
    assert sorted(p for _, _, p in placed) == sorted(_port_bits(top))
    pins = [pin for pin, _, _ in placed]
    assert len(pins) == len(set(pins))
    byport = {p: (pin, attrs) for pin, attrs, p in placed}
    ddr = {p: v for p, v in byport.items() if p.startswith(("c1_ddr4_", "c1_sys_clk_"))}
    assert len(ddr) == 17 + 2 + 1 + 2 + 1 + 1 + 1 + 1 + 1 + 64 + 8 + 8 + 8 + 2
    assert all(re.search(r"\bIOSTANDARD \S+", attrs) for _, attrs in ddr.values())
    assert ddr["c1_sys_clk_p"] == ("E12", " IOSTANDARD DIFF_SSTL12")
    assert ddr["c1_sys_clk_n"] == ("D12", " IOSTANDARD DIFF_SSTL12")
    assert ddr["c1_ddr4_adr[0]"] == ("D14", " IOSTANDARD SSTL12_DCI")
    assert ddr["c1_ddr4_adr[16]"] == ("F15", " IOSTANDARD SSTL12_DCI")
    assert ddr["c1_ddr4_ba[1]"][0] == "G13" and ddr["c1_ddr4_bg"][0] == "H13"
    assert ddr["c1_ddr4_ck_t"] == ("F14", " IOSTANDARD DIFF_SSTL12_DCI")
    assert ddr["c1_ddr4_ck_c"] == ("E14", " IOSTANDARD DIFF_SSTL12_DCI")
    assert [ddr[f"c1_ddr4_{n}"][0] for n in ("cke", "cs_n", "act_n", "odt")] == \
        ["A10", "F13", "E13", "C8"]
    assert ddr["c1_ddr4_reset_n"] == ("N20", " IOSTANDARD LVCMOS12")
    assert ddr["c1_ddr4_dq[0]"] == ("F11", " IOSTANDARD POD12_DCI")
    assert ddr["c1_ddr4_dq[63]"] == ("F23", " IOSTANDARD POD12_DCI")
    assert ddr["c1_ddr4_dqs_t[0]"] == ("D11", " IOSTANDARD DIFF_POD12_DCI")
    assert ddr["c1_ddr4_dqs_c[7]"] == ("G23", " IOSTANDARD DIFF_POD12_DCI")
    assert ddr["c1_ddr4_dm_dbi_n[7]"] == ("G22", " IOSTANDARD POD12_DCI")
    # the reference clock, unrelated to the board clock
    assert "create_clock -period 4.000 -name c1_sys_clk_p [get_ports c1_sys_clk_p]" in xdc
    assert re.search(r"set_clock_groups -asynchronous \\\n\s+-group \[get_clocks "
                     r"-include_generated_clocks clk_125mhz_p\] \\\n\s+-group \[get_clocks "
                     r"-include_generated_clocks c1_sys_clk_p\]", xdc)
    # without DDR4, none of it
    onchip = get_board(board).xdc(get_board(board).top(
        num_qps=1, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip", mem_bytes=1 << 16))
    assert "c1_" not in onchip


REQUIRED_TCL = [
    "create_project -in_memory -part $part", f"set part {PART}",
    "generate_target all", "read_verilog", "read_xdc", "synth_design -top $top -part $part",
    "opt_design", "place_design", "route_design", "report_timing_summary",
    "report_utilization", "write_bitstream -force",
]


def test_tcl_cmac_settings():
    tcl = BOARDS["vcu118"].tcl(top_name="rocegen_vcu118", verilog="rocegen_vcu118.v",
                               xdc="vcu118.xdc")
    for cmd in REQUIRED_TCL:
        assert cmd in tcl, cmd
    assert (f"create_ip -name cmac_usplus -vendor xilinx.com -library ip -module_name "
            f"{CMAC_MODULE}") in tcl
    for setting in ("CMAC_CAUI4_MODE {1}", "NUM_LANES {4x25}", "GT_REF_CLK_FREQ {156.25}",
                    "USER_INTERFACE {AXIS}", "INCLUDE_RS_FEC {1}", "GT_GROUP_SELECT {X1Y48~X1Y51}",
                    "CMAC_CORE_SELECT {CMACE4_X0Y7}", "LANE1_GT_LOC {X1Y48}",
                    "LANE4_GT_LOC {X1Y51}", "GT_DRP_CLK {125}",
                    "TX_FRAME_CRC_CHECKING {Enable FCS Insertion}",
                    "RX_FRAME_CRC_CHECKING {Enable FCS Stripping}"):
        assert f"CONFIG.{setting}" in tcl, setting
    assert "read_verilog [file join $here rocegen_vcu118.v]" in tcl
    assert "read_xdc [file join $here vcu118.xdc]" in tcl
    # the order of a build
    order = [tcl.index(c) for c in ("create_project", "create_ip", "generate_target",
                                    "read_verilog", "synth_design", "opt_design", "place_design",
                                    "route_design", "write_bitstream")]
    assert order == sorted(order)


@pytest.mark.parametrize("board, rate", [("vcu118_25g", 25), ("vcu118_10g", 10)])
def test_tcl_xxv_settings(board, rate):
    tcl = BOARDS[board].tcl(top_name="t", verilog="t.v", xdc=f"{board}.xdc")
    for cmd in REQUIRED_TCL:
        assert cmd in tcl, cmd
    assert f"create_ip -name xxv_ethernet -vendor xilinx.com -library ip -module_name {XXV_MODULE}" in tcl
    for setting in ("CORE {Ethernet PCS/PMA 64-bit}", "DATA_PATH_INTERFACE {MII}",
                    "BASE_R_KR {BASE-R}", f"LINE_RATE {{{rate}}}", "GT_REF_CLK_FREQ {156.25}",
                    "GT_GROUP_SELECT {Quad_X1Y12}", "LANE1_GT_LOC {X1Y48}",
                    "INCLUDE_USER_FIFO {1}"):
        assert f"CONFIG.{setting}" in tcl, setting
    assert "cmac_usplus" not in tcl


@pytest.mark.parametrize("board", VCU118)
def test_tcl_ddr4_settings(ddr4_tops, tops, board):
    """DDR4 builds create the controller and the clock converter, configured for the board's
    memory and the core's AXI port; other builds do not."""
    b, top = BOARDS[board], ddr4_tops[board]
    w = b.width
    tcl = b.tcl(top_name="t", verilog="t.v", xdc=f"{board}.xdc", top=top)
    for cmd in REQUIRED_TCL:
        assert cmd in tcl, cmd
    mig, cdc = ddr4_module(w), axi_cdc_module(w)
    assert (mig, cdc) == (f"ddr4_c1_axi{w}", f"axi_cdc_c1_axi{w}")
    create_mig = f"create_ip -name ddr4 -vendor xilinx.com -library ip -module_name {mig} -dir $ipdir"
    create_cdc = (f"create_ip -name axi_clock_converter -vendor xilinx.com -library ip "
                  f"-module_name {cdc} -dir $ipdir")
    mig_tcl = tcl[tcl.index(create_mig):tcl.index(create_cdc)]
    cdc_tcl = tcl[tcl.index(create_cdc):tcl.index("# the design")]
    for setting in ("C0.DDR4_MemoryType {Components}", "C0.DDR4_MemoryPart {MT40A256M16GE-083E}",
                    "C0.DDR4_DataWidth {64}", "C0.DDR4_DataMask {DM_NO_DBI}",
                    "C0.DDR4_Ecc {false}", "C0.DDR4_TimePeriod {833}",
                    "C0.DDR4_InputClockPeriod {4000}", "System_Clock {Differential}",
                    "C0.DDR4_AxiSelection {true}", f"C0.DDR4_AxiDataWidth {{{w}}}",
                    "C0.DDR4_AxiAddressWidth {31}", "C0.DDR4_AxiIDWidth {4}",
                    "C0.DDR4_AxiNarrowBurst {false}", "C0_DDR4_BOARD_INTERFACE {Custom}"):
        assert f"CONFIG.{setting} " in mig_tcl, setting
    assert f"] [get_ips {mig}]" in mig_tcl and f"generate_target all [get_ips {mig}]" in mig_tcl
    for setting in ("PROTOCOL {AXI4}", "ADDR_WIDTH {31}", f"DATA_WIDTH {{{w}}}", "ID_WIDTH {4}",
                    "ACLK_ASYNC {1}", "SYNCHRONIZATION_STAGES {3}", "AWUSER_WIDTH {0}",
                    "BUSER_WIDTH {0}"):
        assert f"CONFIG.{setting} " in cdc_tcl, setting
    assert f"generate_target all [get_ips {cdc}]" in cdc_tcl
    # the MAC's IP first, all IP before the design
    mac_ip = CMAC_MODULE if w == 512 else XXV_MODULE
    order = [tcl.index(c) for c in (f"-module_name {mac_ip}", create_mig, create_cdc,
                                    "read_verilog", "synth_design")]
    assert order == sorted(order)
    # only DDR4 builds have them
    for plain in (b.tcl(top_name="t", verilog="t.v", xdc="x.xdc", top=tops[board]),
                  b.tcl(top_name="t", verilog="t.v", xdc="x.xdc")):
        assert "-name ddr4" not in plain and "axi_clock_converter" not in plain
        assert f"-module_name {mac_ip} " in plain


@pytest.mark.parametrize("board", VCU118)
def test_ddr4_wiring(ddr4_tops, board):
    """The core's AXI4 master reaches the controller through the clock converter; the
    controller drives the DDR4 ports; the resets come from the reset sequencer."""
    top = ddr4_tops[board]
    w = top.width
    inst = _instances(top)
    cdc, mig = inst[axi_cdc_module(w)].ports, inst[ddr4_module(w)].ports
    ddr = top.ddr4_axi
    # core -> converter (slave side): the AXI4 slave port's own channel handshakes, not constants
    for ch in ("aw", "w", "ar"):
        assert cdc[f"s_axi_{ch}valid"] == (getattr(ddr.axi, ch).valid, "i")
        assert cdc[f"s_axi_{ch}ready"] == (getattr(ddr.axi, ch).ready, "o")
    for ch in ("b", "r"):
        assert cdc[f"s_axi_{ch}valid"] == (getattr(ddr.axi, ch).valid, "o")
        assert cdc[f"s_axi_{ch}ready"] == (getattr(ddr.axi, ch).ready, "i")
    assert repr(cdc["s_axi_wdata"][0]) == repr(ddr.axi.w.payload.data)
    assert repr(cdc["s_axi_rdata"][0]) == repr(ddr.axi.r.payload.data)
    assert [len(cdc[f"s_axi_{n}"][0]) for n in ("awaddr", "araddr", "awid", "bid", "wdata")] == \
        [31, 31, 4, 4, w]
    # converter (master side) -> controller: one signal per AXI field, same on both
    shared = {n[len("m_axi_"):] for n in cdc if n.startswith("m_axi_")} - {
        "aclk", "aresetn", "awregion", "arregion"}
    assert len(shared) == 2 * 11 + 5 + 4 + 6                    # aw and ar, w, b, r
    for n in shared:
        sig, d = cdc[f"m_axi_{n}"]
        assert mig[f"c0_ddr4_s_axi_{n}"] == (sig, {"o": "i", "i": "o"}[d]), n
    # clocks and resets
    assert cdc["m_axi_aclk"][0] is mig["c0_ddr4_ui_clk"][0]
    assert cdc["m_axi_aresetn"][0] is mig["c0_ddr4_aresetn"][0]
    assert cdc["m_axi_aresetn"][0].name == "mem_aresetn"
    assert cdc["s_axi_aresetn"][0].name == "core_aresetn"
    assert mig["c0_sys_clk_p"][0] is ddr.sys_clk_p and mig["c0_sys_clk_n"][0] is ddr.sys_clk_n
    # the memory pins
    for name in ("adr", "ba", "bg", "ck_t", "ck_c", "cke", "cs_n", "act_n", "odt", "reset_n"):
        assert mig[f"c0_ddr4_{name}"] == (getattr(ddr, name), "o"), name
    for name in ("dq", "dqs_t", "dqs_c", "dm_dbi_n"):
        assert mig[f"c0_ddr4_{name}"] == (top.io_ports[f"c1_ddr4_{name}"], "io"), name
    # the port is as wide as the endpoint's AXI4 master (the lint test checks the two are joined)
    ep = top.endpoint
    assert (len(ddr.adr), len(ddr.axi.aw.payload.addr)) == (17, len(ep.axi.aw.payload.addr))


def test_instances_match_the_ip_module_names(tops, ddr4_tops):
    # the vendor IP instantiated by the tops is the one the Tcl creates
    cmac, xxv = set(_instances(tops["vcu118"])), set(_instances(tops["vcu118_10g"]))
    assert cmac >= {CMAC_MODULE, "IBUFDS", "BUFG", JTAG_AXI_MODULE} and XXV_MODULE not in cmac
    assert xxv >= {XXV_MODULE, "IBUFDS", "BUFG", JTAG_AXI_MODULE} and CMAC_MODULE not in xxv
    assert not any(t.startswith(("ddr4", "axi_cdc")) for t in cmac | xxv)
    for name, top in ddr4_tops.items():
        found = set(_instances(top))
        mac_ip = CMAC_MODULE if top.width == 512 else XXV_MODULE
        assert found == {mac_ip, "IBUFDS", "BUFG", ddr4_module(top.width),
                         axi_cdc_module(top.width), JTAG_AXI_MODULE}, name


@pytest.mark.parametrize("board", ["vcu118", "vcu118_10g", "au250"])
def test_register_block_on_by_default(board):
    """The board tops have the register block behind the JTAG-to-AXI master unless asked not
    to; its Tcl is in the build's IP Tcl only then."""
    b = get_board(board)
    on = b.top(num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip",
               mem_bytes=64 * 1024)
    off = b.top(num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip",
                mem_bytes=64 * 1024, axil=False)
    assert on.axil and not off.axil
    assert "qp_info_qp" in on.endpoint.signature.members
    assert "qp_info_qp" not in off.endpoint.signature.members
    assert JTAG_AXI_MODULE in _instances(on) and JTAG_AXI_MODULE not in _instances(off)
    tcl = b.ip_tcl(on)
    assert (f"create_ip -name jtag_axi -vendor xilinx.com -library ip -module_name "
            f"{JTAG_AXI_MODULE} -dir $ipdir") in tcl
    assert "CONFIG.PROTOCOL {2}" in tcl and "CONFIG.M_AXI_DATA_WIDTH {32}" in tcl
    assert "jtag_axi" not in b.ip_tcl(off)
    md = _build_md(b, on)
    assert "## Registers over JTAG" in md and "create_hw_axi_txn" in md
    # the example's addresses are those of the register map
    regs = {r.name: r.offset for r in REGISTERS}
    counter = {w.name: w for w, _ in windows_for(on.endpoint.config)}["COUNTER"]
    assert f"-type read -address {regs['ID']:08x} -len 1" in md
    assert f"-type read -address {counter.base:08x} -len 1" in md
    assert f"-type write -address {regs['IP']:08x} -len 1" in md
    assert "## Registers over JTAG" not in _build_md(b, off)


def _build_md(board, top):
    from pathlib import Path

    from rocegen.boards.base import build_md
    name = board.top_name
    files = {"verilog": Path(f"{name}.v"), "xdc": Path(f"{board.name}.xdc"),
             "tcl": Path("build.tcl"), "readme": Path("BUILD.md"),
             "kit_package": Path(f"{name}_core_pkg.sv"), "kit_ports": Path(f"{name}_core_ports.md"),
             "kit_template": Path(f"{name}_core_inst.sv")}
    if top.axil:
        files.update({"kit_registers": Path(f"{name}_core_registers.md"),
                      "kit_c_header": Path(f"{name}_core_regs.h"),
                      "kit_python": Path(f"{name}_core_regs.py")})
    params = {"board": board.name, "ip": "10.0.0.2", "mac": "02:00:00:00:00:01", "qps": 2,
              "retransmit_memory": "bram", "mem_bytes": 65536, "width": board.width,
              "top": name, "axil": top.axil}
    return build_md(board, top, params, files)


def test_ram_style_marks_the_payload_memory():
    text = ("module top(a);\nendmodule\n"
            "module \\top.endpoint.memory.ram (clk);\n  reg [63:0] x;\n  reg [63:0] mem [1023:0];\n"
            "  initial begin\n    mem[0] = 64'h0000000000000000;\n"
            "    mem[1] = 64'h0000000000000000;\n  end\n  always @(posedge clk) x <= mem[0];\n"
            "endmodule\n"
            "module \\top.other (clk);\n  reg [63:0] mem [3:0];\n  initial begin\n"
            "    mem[0] = 64'h0000000000000000;\n  end\nendmodule\n")
    out = add_ram_style(text, "ultra")
    assert '  (* ram_style = "ultra" *)\n  reg [63:0] mem [1023:0];' in out
    assert out.count("ram_style") == 1 and out.count("initial begin") == 2
    out = add_ram_style(text, "ultra", drop_zero_init=True)
    assert out.count("initial begin") == 1 and "mem[1] =" not in out
    assert "module \\top.other" in out and "mem[0] = 64'h0" in out      # other modules intact
    with pytest.raises(ValueError, match="payload memory module"):
        add_ram_style("module top(a);\nendmodule\n", "ultra")


# -- board glue in simulation -----------------------------------------------------------------

def test_stats_watch_reports_changes():
    rng = random.Random(7)
    n_stats = len(STATS)
    groups = [[STATS.index(n) for n in ("rx_bad_frame", "roce_rx_naks", "roce_cpl_error")],
              [STATS.index("roce_rx_acks")], [5]]
    watch = StatsWatch(groups, range(n_stats))
    values = [0] * n_stats          # the counters behind the read port
    flat = [a for g in groups for a in g]
    group_of = {a: i for i, g in enumerate(groups) for a in g}
    cycles = 1500
    events = []          # (cycle, address) of every counter change made by the bench
    seen = []            # (cycle, changed) reported

    async def bench(ctx):
        addr_prev = 0
        for cycle in range(cycles):
            # read port: data of last cycle's address
            ctx.set(watch.stats_data, values[addr_prev])
            addr_prev = ctx.get(watch.stats_addr)
            assert addr_prev in flat
            if rng.random() < 0.05:
                a = rng.choice(flat + [0, 1])        # some changes to unwatched counters
                values[a] = (values[a] + rng.randrange(1, 3)) % (1 << 32)
                events.append((cycle, a))
            await ctx.tick()
            seen.append(ctx.get(watch.changed))
    run_sim(watch, testbenches=[bench])
    # every change of a watched counter is reported for its group, within one scan (+2 cycles)
    n = len(flat)
    reported = [(c, g) for c, v in enumerate(seen) for g in range(len(groups)) if v >> g & 1]
    for cycle, a in events:
        if a not in group_of or cycle > cycles - n - 4:
            continue
        g = group_of[a]
        assert any(cycle <= c <= cycle + n + 3 and gg == g for c, gg in reported), (cycle, a)
    # and nothing is reported without a change of that group shortly before
    for c, g in reported:
        assert any(c - n - 3 <= cycle <= c and group_of.get(a) == g for cycle, a in events), (c, g)


def test_stats_watch_shares_the_read_port_with_the_registers():
    """core_control with the register block: AXI4-Lite reads of counters and the LEDs' watcher
    share the statistics read port. Every read answers the value of the counter it names, and
    the watcher still reports each change of its counters and nothing else (it never compares
    a value read for the register block)."""
    rng = random.Random(11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        config = RoceEndpoint(64, 2).config
    ep = _FakeEndpoint(config)
    m = Module()
    m.submodules.ep = ep
    groups = [[STATS.index(n) for n in ("rx_bad_frame", "roce_rx_naks")],
              [STATS.index("roce_rx_acks")]]
    watch, regs, used = core_control(m, ep, mac=0x020000000001, ip=0x0A000002, axil=True,
                                     watch_groups=groups)
    assert {"stats_addr", "stats_data", "local_mac", "qp_info_qp", "qp_open"} <= used
    flat = [a for g in groups for a in g]
    group_of = {a: i for i, g in enumerate(groups) for a in g}
    others = [a for a in range(len(STATS)) if a not in flat]
    values = [rng.randrange(1 << 32) for _ in STATS]     # unwatched: fixed, distinct values
    for a in flat:
        values[a] = 0
    counter_base = {w.name: w for w, _ in windows_for(config)}["COUNTER"].base
    cycles = 3000
    events, seen, reads = [], [], []

    async def bench(ctx):
        addr_prev = 0
        state, want = "idle", None
        for cycle in range(cycles):
            ctx.set(ep.stats_data, values[addr_prev])
            addr_prev = ctx.get(ep.stats_addr)
            if rng.random() < 0.03:
                a = rng.choice(flat)
                values[a] = (values[a] + 1) % (1 << 32)
                events.append((cycle, a))
            if state == "idle" and rng.random() < 0.3:
                want = rng.choice(others + flat[:1])
                ctx.set(regs.s_axil_araddr, counter_base + 4 * want)
                ctx.set(regs.s_axil_arvalid, 1)
                state = "ar"
            ready = rng.random() < 0.7
            ctx.set(regs.s_axil_rready, ready)
            accepted = state == "ar" and ctx.get(regs.s_axil_arready)
            answered = state == "r" and ready and ctx.get(regs.s_axil_rvalid)
            if answered:
                assert ctx.get(regs.s_axil_rresp) == 0
                if want not in flat:         # a watched counter may change during the read
                    assert ctx.get(regs.s_axil_rdata) == values[want], want
                reads.append(want)
            await ctx.tick()
            seen.append(ctx.get(watch.changed))
            if accepted:
                ctx.set(regs.s_axil_arvalid, 0)
                state = "r"
            elif answered:
                state = "idle"
    run_sim(m, testbenches=[bench])
    assert len(reads) > 100
    # the watcher, paused while the block reads, looks at each counter within a few scans
    slack = 6 * (len(flat) + 8)
    reported = [(c, g) for c, v in enumerate(seen) for g in range(len(groups)) if v >> g & 1]
    for cycle, a in events:
        if cycle < cycles - slack:
            assert any(cycle <= c <= cycle + slack and g == group_of[a] for c, g in reported), \
                (cycle, a)
    for c, g in reported:
        assert any(c - slack <= cycle <= c and group_of[a] == g for cycle, a in events), (c, g)


class _FakeEndpoint(wiring.Component):
    """The ports of an endpoint the register block uses, driven by a test bench."""

    def __init__(self, config):
        self.config = config
        regs = AxiLiteRegs(config, mac=0, ip=0, settings=True)
        regs._MustUse__silence = True
        super().__init__({name: member.flip() if member.is_signature
                          else (In if member.flow == Out else Out)(member.shape)
                          for name, member in regs.signature.members.items()
                          if not name.startswith("s_axil_") and name != "reading"})

    def elaborate(self, platform):
        return Module()


def test_stats_watch_parameters():
    with pytest.raises(ValueError, match="appears twice"):
        StatsWatch([[1, 2], [2]], range(10))
    with pytest.raises(ValueError, match="non-empty"):
        StatsWatch([[]], range(10))
    with pytest.raises(ValueError, match="does not fit"):
        StatsWatch([[40]], range(10))


def test_status_leds():
    blink, heartbeat = 5, 7
    dut = StatusLeds(blink=blink, heartbeat=heartbeat)

    async def bench(ctx):
        # traffic: a one-cycle pulse lights the LED for `blink` cycles
        ctx.set(dut.tx, 1)
        await ctx.tick()
        ctx.set(dut.tx, 0)
        lit = []
        for _ in range(blink + 3):
            lit.append(ctx.get(dut.led_traffic))
            await ctx.tick()
        assert lit == [1] * blink + [0] * 3
        # error: sticky until clear (clear is synchronized: 2..3 cycles)
        ctx.set(dut.error, 1)
        await ctx.tick()
        ctx.set(dut.error, 0)
        for _ in range(20):
            assert ctx.get(dut.led_error) == 1
            await ctx.tick()
        ctx.set(dut.clear, 1)
        for _ in range(4):
            await ctx.tick()
        assert ctx.get(dut.led_error) == 0
        ctx.set(dut.clear, 0)
        # link follows its input through the synchronizer
        ctx.set(dut.link, 1)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.led_link) == 1
        ctx.set(dut.qp_open, 1)
        assert ctx.get(dut.led_qp) == 1
        # heartbeat toggles every `heartbeat` cycles
        flips = []
        last = ctx.get(dut.led_heartbeat)
        for cycle in range(5 * heartbeat):
            await ctx.tick()
            v = ctx.get(dut.led_heartbeat)
            if v != last:
                flips.append(cycle)
            last = v
        assert [b - a for a, b in zip(flips, flips[1:])] == [heartbeat] * (len(flips) - 1)
        assert len(flips) >= 4
    run_sim(dut, testbenches=[bench])


def test_stretch_and_level_sync():
    s = Stretch(3)
    ls = LevelSync()

    async def bench(ctx):
        for v, want in [(1, 0), (0, 1), (0, 1), (0, 1), (0, 0), (1, 0), (1, 1), (0, 1)]:
            assert ctx.get(s.o) == want
            ctx.set(s.i, v)
            await ctx.tick()
    run_sim(s, testbenches=[bench])

    async def bench2(ctx):
        ctx.set(ls.i, 1)
        await ctx.tick()
        assert ctx.get(ls.o) == 0
        await ctx.tick()
        assert ctx.get(ls.o) == 1
    run_sim(ls, testbenches=[bench2])
    with pytest.raises(ValueError):
        Stretch(0)


def test_reset_sync():
    """Asserted at once by arst (no clock edge needed), released `stages` edges after it falls."""
    m = Module()
    m.domains.sync = ClockDomain()
    rs = m.submodules.rs = ResetSync("sync", stages=3)
    arst = Signal()
    m.d.comb += rs.arst.eq(arst)
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def bench(ctx):
        assert ctx.get(rs.rst) == 1                  # out of configuration
        for _ in range(2):
            await ctx.tick()
        assert ctx.get(rs.rst) == 1
        await ctx.tick()
        assert ctx.get(rs.rst) == 0                  # third edge
        await ctx.delay(2e-9)
        ctx.set(arst, 1)
        await ctx.delay(1e-9)
        assert ctx.get(rs.rst) == 1                  # asynchronous assertion
        await ctx.tick()
        ctx.set(arst, 0)
        released = 0
        while ctx.get(rs.rst):
            await ctx.tick()
            released += 1
        assert released == 3
    sim.add_testbench(bench)
    sim.run()
    with pytest.raises(ValueError):
        ResetSync(stages=1)


@pytest.mark.parametrize("core_ns, mem_ns", [(6.4, 3.333), (2.5, 3.333)])
def test_mem_reset_control(core_ns, mem_ns):
    """Both AXI sides are reset together, asynchronously, by a request or by calibration
    missing; each is released hold + 4 of its own cycles after the request has gone; the core
    only after both; the calibration status follows calib whatever the resets."""
    hold = 16
    m = Module()
    m.domains.sync = ClockDomain()
    m.domains.ui = ClockDomain()
    dut = m.submodules.dut = MemResetControl(core_domain="sync", mem_domain="ui", hold=hold)
    sim = Simulator(m)
    sim.add_clock(core_ns * 1e-9, domain="sync")
    sim.add_clock(mem_ns * 1e-9, domain="ui")
    edges = {"sync": 0, "ui": 0}
    trace = {"sync": [], "ui": []}          # outputs after each edge of that clock
    releases = []                           # (sync edges, ui edges) when the request went away

    def sampler(domain):
        async def watch(ctx):
            while True:
                await ctx.tick(domain)
                edges[domain] += 1
                trace[domain].append({
                    "mem_aresetn": ctx.get(dut.mem_aresetn),
                    "core_aresetn": ctx.get(dut.core_aresetn),
                    "core_rst": ctx.get(dut.core_rst), "calib_done": ctx.get(dut.calib_done),
                    "calib": ctx.get(dut.calib)})
        return watch

    def in_reset(ctx):
        return (ctx.get(dut.mem_aresetn), ctx.get(dut.core_aresetn), ctx.get(dut.core_rst)) == \
            (0, 0, 1)

    async def bench(ctx):
        assert in_reset(ctx)                                  # out of configuration
        await ctx.delay(300e-9)
        assert in_reset(ctx)                                  # not calibrated: held
        ctx.set(dut.calib, 1)
        releases.append(dict(edges))
        await ctx.delay(400e-9)
        assert not in_reset(ctx) and ctx.get(dut.core_rst) == 0
        # a request shorter than any clock period: everything in reset at once
        await ctx.delay(0.4e-9)
        ctx.set(dut.arst, 1)
        await ctx.delay(0.3e-9)
        assert in_reset(ctx)
        ctx.set(dut.arst, 0)
        releases.append(dict(edges))
        await ctx.delay(400e-9)
        assert not in_reset(ctx)
        # a long request, then calibration lost while it is on
        ctx.set(dut.arst, 1)
        await ctx.delay(0.2e-9)
        assert in_reset(ctx)
        await ctx.delay(100e-9)
        assert ctx.get(dut.calib_done) == 1                   # still calibrated
        ctx.set(dut.calib, 0)
        await ctx.delay(50e-9)
        ctx.set(dut.arst, 0)
        await ctx.delay(200e-9)
        assert in_reset(ctx) and ctx.get(dut.calib_done) == 0
        ctx.set(dut.calib, 1)
        releases.append(dict(edges))
        await ctx.delay(400e-9)
        assert not in_reset(ctx)
        # calibration lost alone
        ctx.set(dut.calib, 0)
        await ctx.delay(0.2e-9)
        assert in_reset(ctx)
        await ctx.delay(100e-9)
    sim.add_testbench(sampler("sync"), background=True)
    sim.add_testbench(sampler("ui"), background=True)
    sim.add_testbench(bench)
    sim.run()

    assert len(releases) == 3
    for rel in releases:
        # mem side: released at edge hold + 4 after the request went away (its own clock)
        ui = trace["ui"][rel["ui"]:]
        assert [t["mem_aresetn"] for t in ui[:hold + 4]] == [0] * (hold + 3) + [1]
        core = trace["sync"][rel["sync"]:]
        assert [t["core_aresetn"] for t in core[:hold + 4]] == [0] * (hold + 3) + [1]
        # the core: after both, within 4 core cycles of the later
        mem_up_ns = (rel["ui"] + hold + 4) * mem_ns
        later = max(rel["sync"] + hold + 4, int(mem_up_ns // core_ns) + 1)
        first_run = next(i for i, t in enumerate(trace["sync"]) if i >= rel["sync"]
                         and t["core_rst"] == 0)
        assert later <= first_run + 1 <= later + 4, (later, first_run)
    # the core never runs while an AXI side is in reset
    for t in trace["sync"]:
        if t["core_rst"] == 0:
            assert t["core_aresetn"] == 1 and t["mem_aresetn"] == 1
    # calib_done: calib, 2 to 3 core cycles late
    calib = [t["calib"] for t in trace["sync"]]
    done = [t["calib_done"] for t in trace["sync"]]
    for i in range(3, len(done)):
        if calib[i - 3] == calib[i - 2] == calib[i - 1]:
            assert done[i] == calib[i - 2], i


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_mem_reset_control_parameters():
    with pytest.raises(ValueError, match=r"hold must be an integer 16\.\.65536 \(cycles\), not 15"):
        MemResetControl(hold=15)
    with pytest.raises(ValueError, match="core_domain and mem_domain must differ, both are 'ui'"):
        MemResetControl(core_domain="ui", mem_domain="ui")
    with pytest.raises(TypeError, match="mem_domain must be a clock domain name, not ''"):
        MemResetControl(mem_domain="")
    ctl = MemResetControl()
    assert (ctl.core_domain, ctl.mem_domain, ctl.hold) == ("sync", "ui", 64)
    assert set(ctl.signature.members) == {"arst", "calib", "mem_aresetn", "core_aresetn",
                                          "core_rst", "calib_done"}
    Fragment.get(ctl, None)
