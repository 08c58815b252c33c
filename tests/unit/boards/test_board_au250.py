"""The Alveo U250 target and the vendor-IP parts it is composed of (boards/xilinx/)."""

import re

import pytest
from amaranth.hdl import Fragment, Instance, IOPort
from amaranth.lib.wiring import Out

from rocegen.boards import get_board
from rocegen.boards.au250 import AU250Platform, Au250Top
from rocegen.boards.base import check_build_params
from rocegen.boards.vcu118 import DDR4_C1
from rocegen.boards.xilinx import (
    CMAC_MODULE,
    JTAG_AXI_MODULE,
    Cmac,
    CmacPlacement,
    Ddr4Axi,
    XxvMac,
    XxvPlacement,
)

# Expected pins, from the public Alveo U250 constraints of corundum/corundum
# (fpga/mqnic/AU250/fpga_100g/fpga.xdc), typed here independently of the platform.
QSFP0 = {"refclk": ("K11", "K10"), "rx_p": "N4 M2 L4 K2", "rx_n": "N3 M1 L3 K1",
         "tx_p": "N9 M7 L9 K7", "tx_n": "N8 M6 L8 K6"}
SIDEBAND = {"qsfp0_modsell": "BE16", "qsfp0_resetl": "BE17", "qsfp0_modprsl": "BE20",
            "qsfp0_intl": "BE21", "qsfp0_lpmode": "BD18", "qsfp0_refclk_reset": "AT22",
            "qsfp0_fs[0]": "AT20", "qsfp0_fs[1]": "AU22"}
LED_PINS = ["BC21", "BB21", "BA20"]


def _top(num_qps=2, **kw):
    return get_board("au250").top(num_qps=num_qps, mac="02:00:00:00:00:01", ip="10.0.0.2",
                                  memory="onchip", mem_bytes=1 << 16, **kw)


@pytest.fixture(scope="module")
def top():
    return _top()


def test_registry_and_part():
    b = get_board("au250")
    assert (b.width, b.line_rate_gbps, b.part) == (512, 100, "xcu250-figd2104-2-e")
    assert b.summary()["board"] == "au250" and b.ddr4 is None
    with pytest.raises(ValueError, match="--retransmit-memory ddr4: the au250 board has no DDR4"):
        check_build_params(b, num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2",
                           retransmit_memory="ddr4")
    with pytest.raises(ValueError, match="keeps payloads on chip"):
        b.top(num_qps=1, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="axi4", mem_bytes=1 << 20)
    with pytest.raises(ValueError, match="clk_hz is the board's core clock"):
        Au250Top(num_qps=1, clk_hz=1e8)


def test_platform_pins():
    plat = AU250Platform()
    sub = {s.name: s for s in plat.lookup("qsfp", 0).ios}
    ref = sub["refclk"].ios[0]
    assert (ref.p.names[0], ref.n.names[0]) == QSFP0["refclk"]
    assert sub["refclk"].clock.frequency == 161.1328125e6
    assert sub["rx"].ios[0].p.names == QSFP0["rx_p"].split()
    assert sub["rx"].ios[0].n.names == QSFP0["rx_n"].split()
    assert sub["tx"].ios[0].p.names == QSFP0["tx_p"].split()
    assert sub["tx"].ios[0].n.names == QSFP0["tx_n"].split()
    assert [plat.lookup("led", i).ios[0].names[0] for i in range(3)] == LED_PINS
    clk = plat.lookup("clk_user", 0)
    assert (clk.ios[0].p.names, clk.ios[0].n.names, clk.clock.frequency) == (["AU19"], ["AV19"],
                                                                            156.25e6)


@pytest.mark.parametrize("num_qps", [1, 256])
def test_top_elaborates(num_qps):
    top = _top(num_qps)
    Fragment.get(top, None)
    assert top.endpoint.num_qps == num_qps and top.endpoint.clk_hz == 322.265625e6
    assert (len(top.qsfp0_tx_p), len(top.led), len(top.qsfp0_fs)) == (4, 3, 2)


_DESIGNS = {}


def _design(top):
    """``top`` elaborated, once (a design elaborates once), for every test that looks at it."""
    if id(top) not in _DESIGNS:
        _DESIGNS[id(top)] = (top, Fragment.get(top, None))
    return _DESIGNS[id(top)][1]


def _instances(top):
    found = {}

    def walk(frag):
        if isinstance(frag, Instance):
            found.setdefault(frag.type, []).append(frag)
        for sub, _, _ in getattr(frag, "subfragments", []):
            walk(sub)
    walk(_design(top))
    return found


def test_cmac_wiring(top):
    inst = _instances(top)
    assert set(inst) == {CMAC_MODULE, "IBUFDS", "BUFG", JTAG_AXI_MODULE}
    # the register block's master: the JTAG-to-AXI IP, AXI4-Lite, its handshakes the part's
    jtag = inst[JTAG_AXI_MODULE][0].ports
    part = top.jtag_axi
    assert jtag["m_axi_arvalid"] == (part.m_axil_arvalid, "o")
    assert jtag["m_axi_rready"] == (part.m_axil_rready, "o")
    assert jtag["m_axi_rdata"] == (part.m_axil_rdata, "i")
    assert len(jtag["m_axi_araddr"][0]) == 32 and len(part.m_axil_araddr) == 16
    assert {"m_axi_awlen", "m_axi_awid", "m_axi_awburst", "m_axi_arlen"}.isdisjoint(jtag)
    cmac = inst[CMAC_MODULE][0].ports
    part = top.mac_ip
    assert cmac["gt_rxp_in"][0] is part.gt_rx_p and cmac["gt_txp_out"] == (part.gt_tx_p, "o")
    assert cmac["init_clk"][0] is part.init_clk and cmac["drp_clk"][0] is part.init_clk
    assert cmac["rx_clk"][0] is cmac["gt_txusrclk2"][0] is part.clk
    assert cmac["rx_axis_tdata"][1] == "o"
    assert repr(cmac["rx_axis_tdata"][0]) == repr(part.rx.payload.data)
    assert cmac["tx_axis_tready"] == (part.tx.ready, "o")
    assert cmac["stat_rx_aligned"] == (part.link, "o")


def test_xdc_places_every_port_once(top):
    xdc = get_board("au250").xdc(top, design=_design(top))
    placed = re.findall(r"set_property -dict \{PACKAGE_PIN (\S+)([^}]*)\} \[get_ports \{(\S+)\}\]",
                        xdc)
    bits = []
    for name in top.signature.members:
        n = len(getattr(top, name))
        bits += [name] if n == 1 else [f"{name}[{i}]" for i in range(n)]
    assert sorted(p for _, _, p in placed) == sorted(bits)
    pins = [pin for pin, _, _ in placed]
    assert len(pins) == len(set(pins))
    byport = {p: pin for pin, _, p in placed}
    for port, pin in SIDEBAND.items():
        assert byport[port] == pin, port
    assert [byport[f"qsfp0_rx_p[{i}]"] for i in range(4)] == QSFP0["rx_p"].split()
    assert [byport[f"qsfp0_tx_n[{i}]"] for i in range(4)] == QSFP0["tx_n"].split()
    assert [byport[f"led[{i}]"] for i in range(3)] == LED_PINS
    assert byport["qsfp0_mgt_refclk_1_p"] == "K11" and byport["sw[1]"] == "AM19"
    assert "create_clock -period 6.206 -name qsfp0_mgt_refclk_1_p" in xdc
    assert "create_clock -period 6.400 -name clk_user_p" in xdc
    assert "set_clock_groups -asynchronous" in xdc and "*rst_sync_*" in xdc


def test_tcl_cmac_settings(top):
    tcl = get_board("au250").tcl(top_name="t", verilog="t.v", xdc="au250.xdc", top=top)
    assert "set part xcu250-figd2104-2-e" in tcl
    for setting in ("CMAC_CORE_SELECT {CMACE4_X0Y8}", "GT_GROUP_SELECT {X1Y44~X1Y47}",
                    "LANE1_GT_LOC {X1Y44}", "LANE4_GT_LOC {X1Y47}",
                    "GT_REF_CLK_FREQ {161.1328125}", "GT_DRP_CLK {156.25}",
                    "INCLUDE_RS_FEC {1}", "USER_INTERFACE {AXIS}"):
        assert f"CONFIG.{setting} " in tcl, setting
    assert "-name ddr4" not in tcl


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_part_parameters_are_checked():
    with pytest.raises(ValueError, match="gt_lanes must name 4"):
        CmacPlacement("CMACE4_X0Y8", ("X1Y44",), ref_clk_mhz=156.25, drp_clk_mhz=125, where="x")
    with pytest.raises(ValueError, match="ref_clk_mhz must be one of"):
        CmacPlacement("CMACE4_X0Y8", ("a", "b", "c", "d"), ref_clk_mhz=100, drp_clk_mhz=125,
                      where="x")
    with pytest.raises(ValueError, match="drp_clk_mhz must be 10..250"):
        CmacPlacement("CMACE4_X0Y8", ("a", "b", "c", "d"), ref_clk_mhz=156.25, drp_clk_mhz=300,
                      where="x")
    with pytest.raises(TypeError, match="placement must be a CmacPlacement"):
        Cmac("CMACE4_X0Y8")
    place = XxvPlacement("Quad_X1Y12", "X1Y48", ref_clk_mhz=156.25, drp_clk_mhz=125, where="x")
    with pytest.raises(ValueError, match="line_rate_gbps must be 25 or 10"):
        XxvMac(40, place, max_frame=1522)
    ports = {n: IOPort(w, name=n) for n, w in (("dq", 64), ("dqs_t", 8), ("dqs_c", 8),
                                               ("dm_dbi_n", 8))}
    with pytest.raises(ValueError, match="dq must be an IOPort of 64 bits"):
        Ddr4Axi(DDR4_C1, 512, 31, **{**ports, "dq": IOPort(72, name="dq")})
    with pytest.raises(ValueError, match="addr_width 32 exceeds the controller's 31"):
        Ddr4Axi(DDR4_C1, 512, 32, **ports)
    ddr = Ddr4Axi(DDR4_C1, 512, 31, **ports)
    assert ddr.signature.members["adr"] == Out(17)
    Fragment.get(ddr, None)          # the valid one elaborates
