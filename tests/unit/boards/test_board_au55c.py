"""The Alveo U55C target: pins, the CMAC's placement, the composition it shares with the other
cards, its constraints and Vivado settings."""

import re

import pytest
from amaranth.hdl import Fragment, Instance

from rocegen.boards import get_board
from rocegen.boards.au55c import AU55CPlatform, Au55cTop
from rocegen.boards.base import check_build_params
from rocegen.boards.xilinx import CMAC_MODULE, JTAG_AXI_MODULE

# Expected pins, from the public Alveo U55C/U55N constraints of corundum/corundum
# (fpga/mqnic/Alveo/fpga_25g/fpga_au55.xdc), typed here independently of the platform.
QSFP0 = {"refclk": ("AD42", "AD43"), "rx_p": "AD51 AC53 AC49 AB51", "rx_n": "AD52 AC54 AC50 AB52",
         "tx_p": "AD46 AC44 AB46 AA48", "tx_n": "AD47 AC45 AB47 AA49"}
LED_PINS = ["BL13", "BK11", "BJ11"]             # QSFP0 activity, green and yellow status
CLOCK = ("BK43", "BK44")                        # clk_100mhz_1
CATTRIP = "BE45"


def _top(num_qps=2, **kw):
    return get_board("au55c").top(num_qps=num_qps, mac="02:00:00:00:00:01", ip="10.0.0.2",
                                  memory="onchip", mem_bytes=1 << 16, **kw)


@pytest.fixture(scope="module")
def top():
    return _top()


@pytest.fixture(scope="module")
def design(top):
    return Fragment.get(top, None)


def test_registry_and_part():
    b = get_board("au55c")
    assert (b.width, b.line_rate_gbps, b.part) == (512, 100, "xcu55c-fsvh2892-2L-e")
    assert b.summary()["board"] == "au55c" and b.ddr4 is None
    with pytest.raises(ValueError, match="--retransmit-memory ddr4: the au55c board has no DDR4"):
        check_build_params(b, num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2",
                           retransmit_memory="ddr4")
    assert check_build_params(b, num_qps=2, mac="02:00:00:00:00:01", ip="10.0.0.2",
                              retransmit_memory="uram") == ("onchip", 1 << 20)
    with pytest.raises(ValueError, match="keeps payloads on chip"):
        b.top(num_qps=1, mac="02:00:00:00:00:01", ip="10.0.0.2", memory="axi4", mem_bytes=1 << 20)
    with pytest.raises(ValueError, match="clk_hz is the board's core clock"):
        Au55cTop(num_qps=1, clk_hz=1e8)
    with pytest.raises(ValueError, match="mac_kind must be one of 'cmac'"):
        Au55cTop(mac_kind="xxv", line_rate_gbps=25)


def test_platform_pins():
    plat = AU55CPlatform()
    sub = {s.name: s for s in plat.lookup("qsfp", 0).ios}
    ref = sub["refclk"].ios[0]
    assert (ref.p.names[0], ref.n.names[0]) == QSFP0["refclk"]
    assert sub["refclk"].clock.frequency == 161.1328125e6
    for d in ("rx", "tx"):
        assert sub[d].ios[0].p.names == QSFP0[f"{d}_p"].split()
        assert sub[d].ios[0].n.names == QSFP0[f"{d}_n"].split()
    assert [plat.lookup("led", i).ios[0].names[0] for i in range(3)] == LED_PINS
    clk = plat.lookup("clk100", 0)
    assert (clk.ios[0].p.names[0], clk.ios[0].n.names[0], clk.clock.frequency) == (*CLOCK, 100e6)


def test_top_elaborates(top, design):
    assert top.endpoint.clk_hz == 322.265625e6 and top.memory == "onchip"
    assert (len(top.qsfp0_tx_p), len(top.led)) == (4, 3)
    # no module sideband and no button: the card's management controller has the QSFP pins
    assert not {"qsfp0_modsell", "qsfp0_resetl", "sw", "cpu_reset"} & set(top.signature.members)
    found = {}

    def walk(frag):
        if isinstance(frag, Instance):
            found[frag.type] = frag
        for sub, _, _ in getattr(frag, "subfragments", []):
            walk(sub)
    walk(design)
    assert set(found) == {CMAC_MODULE, "IBUFDS", "BUFG", JTAG_AXI_MODULE}
    cmac = found[CMAC_MODULE].ports
    assert cmac["init_clk"][0] is top.mac_ip.init_clk
    assert cmac["gt_ref_clk_p"][0] is top.mac_ip.gt_ref_clk_p


def test_xdc(top, design):
    xdc = get_board("au55c").xdc(top, design=design)
    placed = re.findall(r"set_property -dict \{PACKAGE_PIN (\S+)([^}]*)\} \[get_ports \{(\S+)\}\]",
                        xdc)
    bits = []
    for name in top.signature.members:
        n = len(getattr(top, name))
        bits += [name] if n == 1 else [f"{name}[{i}]" for i in range(n)]
    assert sorted(p for _, _, p in placed) == sorted(bits)
    byport = {p: (pin, attrs) for pin, attrs, p in placed}
    assert [byport[f"qsfp0_rx_n[{i}]"][0] for i in range(4)] == QSFP0["rx_n"].split()
    assert [byport[f"qsfp0_tx_p[{i}]"][0] for i in range(4)] == QSFP0["tx_p"].split()
    assert [byport[f"led[{i}]"][0] for i in range(3)] == LED_PINS
    assert byport["hbm_cattrip"] == (CATTRIP, " IOSTANDARD LVCMOS18")
    assert byport["clk_100mhz_p"] == (CLOCK[0], " IOSTANDARD LVDS")
    assert "create_clock -period 6.206 -name qsfp0_mgt_refclk_0_p" in xdc
    assert "create_clock -period 10.000 -name clk_100mhz_p" in xdc
    assert "-group [get_clocks -include_generated_clocks clk_100mhz_p]" in xdc
    assert "set_false_path -to [get_ports {led[*] hbm_cattrip}]" in xdc
    assert "set_false_path -from" not in xdc.replace("set_false_path -from [get_ports", "")
    # the synchronizers' exceptions come from the design: the reset and level synchronizers
    assert xdc.count("NAME =~ *rst_sync_*}] -filter {REF_PIN_NAME == PRE}") == 1
    assert xdc.count("NAME =~ *cdc0_reg*}] -filter {REF_PIN_NAME == D}") == 1


def test_tcl_cmac_settings(top):
    b = get_board("au55c")
    tcl = b.tcl(top_name="t", verilog="t.v", xdc="au55c.xdc", top=top)
    assert "set part xcu55c-fsvh2892-2L-e" in tcl
    for setting in ("CMAC_CORE_SELECT {CMACE4_X0Y3}", "GT_GROUP_SELECT {X0Y28~X0Y31}",
                    "LANE1_GT_LOC {X0Y28}", "LANE4_GT_LOC {X0Y31}",
                    "GT_REF_CLK_FREQ {161.1328125}", "GT_DRP_CLK {100}"):
        assert f"CONFIG.{setting} " in tcl, setting
    assert "corundum" in b.notes(top).lower() and "CMACE4_X0Y3" in b.notes(top)
