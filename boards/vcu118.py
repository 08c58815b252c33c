"""AMD (Xilinx) VCU118 evaluation board: Virtex UltraScale+ xcvu9p-flga2104-2L-e.

Pin locations are those of the board's public constraint files (the VCU118 user guide UG1224
and its board files list the same nets): system clocks, user LEDs, push buttons, DIP switches,
the USB UART, and both QSFP28 cages (transceiver lanes, reference clocks, module sideband).

Every target can keep its payloads in the board's DDR4 C1 component memory instead of on-chip RAM
(``rocegen build --retransmit-memory ddr4``): the DDR4 memory controller IP (``ddr4``, AXI4 slave
port) on its own 250 MHz reference clock, reached from the core's AXI4 master through an AXI
clock converter (``axi_clock_converter``), with the resets sequenced by
:class:`~rocegen.gateware.shell.mem_reset.MemResetControl`.

Two targets use QSFP28 cage 1 (GTY quad 231, X1Y48..X1Y51, 156.25 MHz reference clock):

* ``vcu118``: 100GbE through the integrated CMAC (``cmac_usplus``, CAUI-4 with RS-FEC, AXI-Stream
  user interface, 512 bits at 322.266 MHz), the endpoint at W = 512;
* ``vcu118_25g`` / ``vcu118_10g``: one lane at 25GBASE-R / 10GBASE-R through the 10G/25G
  Ethernet subsystem configured as PCS/PMA only (``xxv_ethernet``, 64-bit XGMII-style MII), with
  rocegen's own XGMII MAC (:mod:`rocegen.gateware.mac`) and the endpoint at W = 64. A QSFP28 to
  4xSFP28 breakout cable (or a QSFP+ / SFP+ adapter at 10G) connects lane 0 to the peer.

This file is the board's pins, the MAC's placement and what its LEDs show; the composition of
the parts is the one every card shares (:mod:`rocegen.boards.card`).
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource, Subsignal
from amaranth.vendor import XilinxPlatform

from rocegen.boards.base import PinMap
from rocegen.boards.card import CardBoard, CardTop
from rocegen.boards.xilinx import (
    CMAC_MODULE,
    XXV_MODULE,
    CmacPlacement,
    Ddr4Memory,
    XxvPlacement,
    axi_cdc_module,
    ddr4_module,
)

__all__ = ["VCU118Platform", "Vcu118Top", "Vcu118Cmac", "Vcu118Xxv", "CMAC_MODULE",
           "XXV_MODULE", "DDR4_C1", "CMAC_PLACEMENT", "XXV_PLACEMENT", "ddr4_module",
           "axi_cdc_module", "leds_for"]

#: The VCU118's DDR4 C1 component memory (UG1224; the Vivado board interface
#: ``ddr4_sdram_c1_083``): four MT40A256M16GE-083E (4 Gb, x16) on a 64-bit data bus = 2 GiB,
#: DDR4-2400 (memory clock 1200 MHz, 833 ps), reference clock 250 MHz on E12/D12. The board
#: wires a fifth device (bits 64..79, for ECC) that this interface leaves unused. The
#: controller's AXI port: 31-bit byte addresses, 4-bit IDs, the core's data width; its user
#: clock (``c0_ddr4_ui_clk``) is a quarter of the memory clock, 300 MHz. The smallest payload
#: memory in DDR4 is 1 MiB: the core's streaming ring must fit.
DDR4_C1 = Ddr4Memory(
    name="DDR4 C1", label="c1", size_bytes=1 << 31, min_bytes=1 << 20,
    memory_part="MT40A256M16GE-083E", data_width=64, time_period_ps=833,
    input_clock_period_ps=4000, axi_addr_width=31, axi_id_width=4,
    summary="4 x MT40A256M16GE-083E\n# (64-bit data, 2 GiB), DDR4-2400 from the 250 MHz reference "
            "clock on E12/D12",
    devices="four x16 devices: 64-bit data with data masks, no ECC; the board's fifth\n"
            "  device is not used",
    ref_clock="250 MHz on E12/D12",
    board_interfaces="""\
The IP settings are explicit: the script creates no project with a board part. In a project
whose board part is the VCU118 (`xilinx.com:vcu118:part0:*`), the same controller comes from
`CONFIG.C0_DDR4_BOARD_INTERFACE {ddr4_sdram_c1_083}` and
`CONFIG.C0_CLOCK_BOARD_INTERFACE {default_250mhz_clk1}` plus the AXI settings above.""",
    pin_source="""\
The DDR4 pin locations and I/O standards (SSTL12_DCI address and command, DIFF_SSTL12_DCI
clock, POD12_DCI data and masks, DIFF_POD12_DCI strobes, LVCMOS12 reset) are those of the
public VCU118 constraints of `fpganinja/taxi` (`src/eth/example/VCU118/fpga/syn/ddr4_c1.xdc`,
byte lanes 0..7 of DDR4 C1); a second public VCU118 design places the 64-bit interface on the
same pins. The memory part, speed, data width and AXI address width are those public VCU118
designs give the controller for this interface.""")

#: QSFP28 cage 1: GTY quad 231 (X1Y48..X1Y51), MGTREFCLK0 at 156.25 MHz; the MAC's DRP clock is
#: the 125 MHz board clock.
CMAC_PLACEMENT = CmacPlacement("CMACE4_X0Y7", ("X1Y48", "X1Y49", "X1Y50", "X1Y51"),
                               ref_clk_mhz=156.25, drp_clk_mhz=125, where="QSFP28 cage 1")
XXV_PLACEMENT = XxvPlacement("Quad_X1Y12", "X1Y48", ref_clk_mhz=156.25, drp_clk_mhz=125,
                             where="lane 0 of QSFP28 cage 1")

_LVCMOS12 = Attrs(IOSTANDARD="LVCMOS12")
_LVCMOS18 = Attrs(IOSTANDARD="LVCMOS18")
_LED = Attrs(IOSTANDARD="LVCMOS12", SLEW="SLOW", DRIVE="8")


def _ddr4(number, *, a, ba, bg, ck, cke, cs_n, act_n, odt, reset_n, dq, dqs_p, dqs_n, dm):
    sstl = Attrs(IOSTANDARD="SSTL12_DCI")
    pod = Attrs(IOSTANDARD="POD12_DCI")
    return Resource(
        "ddr4", number,
        Subsignal("a", Pins(a, dir="o"), sstl),
        Subsignal("ba", Pins(ba, dir="o"), sstl),
        Subsignal("bg", Pins(bg, dir="o"), sstl),
        Subsignal("clk", DiffPairs(*ck, dir="o"), Attrs(IOSTANDARD="DIFF_SSTL12_DCI")),
        Subsignal("cke", Pins(cke, dir="o"), sstl),
        Subsignal("cs_n", Pins(cs_n, dir="o"), sstl),
        Subsignal("act_n", Pins(act_n, dir="o"), sstl),
        Subsignal("odt", Pins(odt, dir="o"), sstl),
        Subsignal("reset_n", Pins(reset_n, dir="o"), Attrs(IOSTANDARD="LVCMOS12")),
        Subsignal("dq", Pins(dq, dir="io"), pod),
        Subsignal("dqs", DiffPairs(dqs_p, dqs_n, dir="io"), Attrs(IOSTANDARD="DIFF_POD12_DCI")),
        Subsignal("dm_dbi_n", Pins(dm, dir="io"), pod),
    )


def _qsfp(number, *, refclk, rx_p, rx_n, tx_p, tx_n, modsell, resetl, modprsl, intl, lpmode):
    out = Attrs(IOSTANDARD="LVCMOS18", SLEW="SLOW", DRIVE="8")
    inp = Attrs(IOSTANDARD="LVCMOS18", PULLUP="TRUE")
    return Resource(
        "qsfp", number,
        Subsignal("refclk", DiffPairs(*refclk, dir="i"), Clock(156.25e6)),
        Subsignal("rx", DiffPairs(rx_p, rx_n, dir="i")),
        Subsignal("tx", DiffPairs(tx_p, tx_n, dir="o")),
        Subsignal("modsell", Pins(modsell, dir="o"), out),
        Subsignal("resetl", Pins(resetl, dir="o"), out),
        Subsignal("modprsl", Pins(modprsl, dir="i"), inp),
        Subsignal("intl", Pins(intl, dir="i"), inp),
        Subsignal("lpmode", Pins(lpmode, dir="o"), out),
    )


class VCU118Platform(XilinxPlatform):
    """The VCU118's pins and clocks as an Amaranth platform (Vivado toolchain).

    ``qsfp`` 0 and 1 are the board's QSFP28 cages 1 and 2: ``refclk`` (MGTREFCLK0 of GTY quads
    231 / 232, 156.25 MHz from the board's programmable oscillators at their power-up
    frequency), ``rx``/``tx`` (4 lanes each), and the module sideband. ``clk300`` is the 300 MHz
    system clock, ``clk250`` the two 250 MHz memory reference clocks (0: E12/D12, that of DDR4
    C1; 1: AW26/AW27, that of DDR4 C2), ``clk125`` the 125 MHz clock. ``ddr4`` 0 is the 64-bit
    data interface of DDR4 C1 (address/command, clock, data, strobes, data masks; the fifth
    device's byte lanes, parity, alert and test pins are left out). ``cpu_reset`` is the
    CPU_RESET push button (active high); ``button_*`` the five direction buttons (active high).
    """

    device = "xcvu9p"
    package = "flga2104"
    speed = "2L-e"
    default_clk = "clk125"
    resources = [
        Resource("clk300", 0, DiffPairs("G31", "F31", dir="i"), Clock(300e6),
                 Attrs(IOSTANDARD="DIFF_SSTL12")),
        Resource("clk250", 0, DiffPairs("E12", "D12", dir="i"), Clock(250e6),
                 Attrs(IOSTANDARD="DIFF_SSTL12")),
        Resource("clk250", 1, DiffPairs("AW26", "AW27", dir="i"), Clock(250e6),
                 Attrs(IOSTANDARD="DIFF_SSTL12")),
        Resource("clk125", 0, DiffPairs("AY24", "AY23", dir="i"), Clock(125e6),
                 Attrs(IOSTANDARD="LVDS")),
        Resource("cpu_reset", 0, Pins("L19", dir="i"), _LVCMOS12),
        *[Resource("led", i, Pins(pin, dir="o"), _LED)
          for i, pin in enumerate("AT32 AV34 AY30 BB32 BF32 AU37 AV36 BA37".split())],
        Resource("button_n", 0, Pins("BB24", dir="i"), _LVCMOS18),
        Resource("button_w", 0, Pins("BF22", dir="i"), _LVCMOS18),
        Resource("button_s", 0, Pins("BE22", dir="i"), _LVCMOS18),
        Resource("button_e", 0, Pins("BE23", dir="i"), _LVCMOS18),
        Resource("button_c", 0, Pins("BD23", dir="i"), _LVCMOS18),
        *[Resource("switch", i, Pins(pin, dir="i"), _LVCMOS12)
          for i, pin in enumerate("B17 G16 J16 D21".split())],
        Resource("uart", 0, Subsignal("tx", Pins("BB21", dir="o")),
                 Subsignal("rx", Pins("AW25", dir="i")), _LVCMOS18),
        _qsfp(0, refclk=("W9", "W8"), rx_p="Y2 W4 V2 U4", rx_n="Y1 W3 V1 U3",
              tx_p="V7 T7 P7 M7", tx_n="V6 T6 P6 M6", modsell="AM21", resetl="BA22",
              modprsl="AL21", intl="AP21", lpmode="AN21"),
        _qsfp(1, refclk=("R9", "R8"), rx_p="T2 R4 P2 M2", rx_n="T1 R3 P1 M1",
              tx_p="L5 K7 J5 H7", tx_n="L4 K6 J4 H6", modsell="AN23", resetl="AY22",
              modprsl="AN24", intl="AT21", lpmode="AT24"),
        _ddr4(0, a="D14 B15 B16 C14 C15 A13 A14 A15 A16 B12 C12 B13 C13 D15 H14 H15 F15",
              ba="G15 G13", bg="H13", ck=("F14", "E14"), cke="A10", cs_n="F13", act_n="E13",
              odt="C8", reset_n="N20",
              dq="F11 E11 F10 F9 H12 G12 E9 D9 R19 P19 M18 M17 N19 N18 N17 M16 "
                 "L16 K16 L18 K18 J17 H17 H19 H18 F19 F18 E19 E18 G20 F20 E17 D16 "
                 "D17 C17 C19 C18 D20 D19 C20 B20 N23 M23 R21 P21 R22 P22 T23 R23 "
                 "K24 J24 M21 L21 K21 J21 K22 J22 H23 H22 E23 E22 F21 E21 F24 F23",
              dqs_p="D11 P17 K19 F16 A19 N22 M20 H24", dqs_n="D10 P16 J19 E16 A18 M22 L20 G23",
              dm="G11 R18 K17 G18 B18 P20 L23 G22"),
    ]
    connectors = []


#: What the eight user LEDs show.
LEDS = (
    (0, "link up (CMAC: RX aligned; 10/25G: PCS RX status)"),
    (1, "a QP is open (connection manager) / a peer has acknowledged packets (without one)"),
    (2, "traffic: blinks when frames are sent or received"),
    (3, "error (sticky; the centre button clears it): bad frame, bad ICRC, NAK, completion in "
        "error, MAC transmit underflow/overflow"),
    (4, "heartbeat of the 125 MHz board clock (the FPGA is configured)"),
    (5, "heartbeat of the MAC clock the core runs on (the transceivers are up)"),
    (6, "a QSFP28 module is present in cage 1"),
    (7, "the core is held in reset (CPU_RESET, the MAC's resets; with DDR4 payload memory also "
        "until the memory is calibrated and its AXI path is out of reset)"),
)

#: LED 4 in builds with DDR4 payload memory (instead of the board clock's heartbeat).
DDR4_CALIB_LED = (4, "DDR4 C1 calibrated (the memory controller's c0_init_calib_complete)")


def leds_for(memory):
    """The meaning of the eight LEDs with the core's ``memory`` (``"onchip"`` or ``"axi4"``,
    that is DDR4 C1)."""
    if memory == "axi4":
        return tuple(DDR4_CALIB_LED if i == DDR4_CALIB_LED[0] else (i, what) for i, what in LEDS)
    return LEDS



class Vcu118Top(CardTop):
    """Top level of the VCU118 targets: the endpoint core behind the MAC on QSFP28 cage 1
    (:class:`~rocegen.boards.card.CardTop`: ``mac_kind`` ``"cmac"`` at 100G, ``"xxv"`` at
    25G/10G; ``memory="axi4"`` keeps the payloads in DDR4 C1, :data:`DDR4_C1`).

    Ports (the board's pins): ``clk_125mhz_p/n`` (the MAC's init/DRP clock, the reset logic);
    ``cpu_reset`` (the CPU_RESET button: resets everything); ``btn_c`` (clears the error LED);
    ``qsfp1_mgt_refclk_0_p/n`` (156.25 MHz); ``qsfp1_rx_p/n``, ``qsfp1_tx_p/n`` (4 lanes, or
    lane 0 at 10/25G); the module sideband ``qsfp1_modsell``, ``_resetl``, ``_lpmode``,
    ``_modprsl``, ``_intl``; ``led`` (:func:`leds_for`); with DDR4 ``c1_sys_clk_p/n`` and the
    ``c1_ddr4_*`` memory pins.
    """

    clock, clock_hz, clock_submodule = "clk_125mhz", 125e6, "clk125"
    qsfp, refclk = "qsfp1", "qsfp1_mgt_refclk_0"
    buttons = {"cpu_reset": 1, "btn_c": 1}
    reset_button, clear_button = "cpu_reset", "btn_c"
    leds = ("link", "qp", "traffic", "error", "init_heartbeat", "heartbeat", "module_present",
            "core_reset")
    watch_acks = True
    placements = {"cmac": CMAC_PLACEMENT, "xxv": XXV_PLACEMENT}
    ddr4 = DDR4_C1


_COMMON_PINS = [
    PinMap("clk_125mhz_p", "clk125", 0, side="p"),
    PinMap("clk_125mhz_n", "clk125", 0, side="n"),
    PinMap("cpu_reset", "cpu_reset"),
    PinMap("btn_c", "button_c"),
    PinMap("qsfp1_mgt_refclk_0_p", "qsfp", 0, ("refclk",), side="p"),
    PinMap("qsfp1_mgt_refclk_0_n", "qsfp", 0, ("refclk",), side="n"),
    PinMap("qsfp1_modsell", "qsfp", 0, ("modsell",)),
    PinMap("qsfp1_resetl", "qsfp", 0, ("resetl",)),
    PinMap("qsfp1_lpmode", "qsfp", 0, ("lpmode",)),
    PinMap("qsfp1_modprsl", "qsfp", 0, ("modprsl",)),
    PinMap("qsfp1_intl", "qsfp", 0, ("intl",)),
    *[PinMap("led", "led", i, port_bit=i) for i in range(8)],
]


#: Placement of the DDR4 C1 ports (builds with DDR4 payload memory).
_DDR4_PINS = [
    PinMap("c1_sys_clk_p", "clk250", 0, side="p"),
    PinMap("c1_sys_clk_n", "clk250", 0, side="n"),
    PinMap("c1_ddr4_adr", "ddr4", 0, ("a",)),
    PinMap("c1_ddr4_ba", "ddr4", 0, ("ba",)),
    PinMap("c1_ddr4_bg", "ddr4", 0, ("bg",)),
    PinMap("c1_ddr4_ck_t", "ddr4", 0, ("clk",), side="p"),
    PinMap("c1_ddr4_ck_c", "ddr4", 0, ("clk",), side="n"),
    PinMap("c1_ddr4_cke", "ddr4", 0, ("cke",)),
    PinMap("c1_ddr4_cs_n", "ddr4", 0, ("cs_n",)),
    PinMap("c1_ddr4_act_n", "ddr4", 0, ("act_n",)),
    PinMap("c1_ddr4_odt", "ddr4", 0, ("odt",)),
    PinMap("c1_ddr4_reset_n", "ddr4", 0, ("reset_n",)),
    PinMap("c1_ddr4_dq", "ddr4", 0, ("dq",)),
    PinMap("c1_ddr4_dqs_t", "ddr4", 0, ("dqs",), side="p"),
    PinMap("c1_ddr4_dqs_c", "ddr4", 0, ("dqs",), side="n"),
    PinMap("c1_ddr4_dm_dbi_n", "ddr4", 0, ("dm_dbi_n",)),
]


_SOURCES_NOTE = """\
## What was checked, what to check

The pin locations come from the VCU118's public constraint files (UG1224 lists the same
nets); compare them with the VCU118 board files of your Vivado before programming a board.
The board's platform description (`rocegen.boards.vcu118.VCU118Platform`) also has the 300 MHz
system clock (G31/F31) and the two 250 MHz memory reference clocks (E12/D12, that of DDR4 C1,
used by builds with DDR4 payload memory; AW26/AW27); this design runs its reset logic and the
MAC IP's init/DRP clock on the 125 MHz clock (AY24/AY23, LVDS), whose frequency is the DRP
clock frequency set in the IP.
The design was checked with Verilator against port-compatible stubs of the vendor IP (the stub
port lists follow the cores' instantiation templates); it has not been through Vivado here.
If Vivado reports a port of the IP instance that does not exist, open the `.veo` template the
IP generates under `vivado/ip/` and compare the names.
"""


def _uses_ddr4(top):
    return getattr(top, "memory", None) == "axi4"


class _Vcu118Board(CardBoard):
    platform = VCU118Platform
    top_name = "rocegen_vcu118"
    top_class = Vcu118Top
    sources_note = _SOURCES_NOTE

    def leds(self, top=None):
        return leds_for("axi4" if _uses_ddr4(top) else "onchip")

    def pins_for(self, top):
        return self.pins + (_DDR4_PINS if _uses_ddr4(top) else [])

    def clocks_for(self, top):
        if not _uses_ddr4(top):
            return self.clocks
        # LED 4 shows the memory's calibration instead of the board clock's heartbeat
        board_clock, *others = self.clocks
        name, hz, what = board_clock
        return ((name, hz, what.replace(", heartbeat", "")), *others,
                ("c1_sys_clk", 250e6, "DDR4 C1 reference clock of the memory controller"),
                ("c0_ddr4_ui_clk", DDR4_C1.ui_clock_hz, "memory controller user clock "
                 "(generated): the controller's AXI port, the clock converter's master side"))

    def _lane_pins(self, lanes):
        bits = None if lanes == 4 else tuple(range(lanes))
        return [PinMap(f"qsfp1_{d}_{s}", "qsfp", 0, (d,), side=s, bits=bits)
                for d in ("rx", "tx") for s in ("p", "n")]


class Vcu118Cmac(_Vcu118Board):
    """VCU118, QSFP28 cage 1 at 100GbE through the integrated CMAC."""

    name = "vcu118"
    mac_kind = "cmac"
    title = "VCU118, QSFP28 cage 1, 100GbE (CMAC)"
    mac = "CMAC (cmac_usplus, CAUI-4, RS-FEC)"
    line_rate_gbps = 100
    width = 512
    core_clock_hz = 322.265625e6
    clocks = (
        ("clk_125mhz", 125e6, "board clock: CMAC init and DRP clock, resets, heartbeat"),
        ("qsfp1_mgt_refclk_0", 156.25e6, "transceiver reference of GTY quad 231"),
        ("gt_txusrclk2", 322.265625e6, "CMAC user clock (generated): the core's clock"),
    )
    pins = property(lambda self: _COMMON_PINS + self._lane_pins(4))


class Vcu118Xxv(_Vcu118Board):
    """VCU118, lane 0 of QSFP28 cage 1 at 25G or 10G: PCS/PMA IP plus rocegen's XGMII MAC."""

    mac_kind = "xxv"
    width = 64
    mac = "rocegen XGMII MAC over xxv_ethernet PCS/PMA"

    def __init__(self, line_rate_gbps):
        self.line_rate_gbps = line_rate_gbps
        self.name = f"vcu118_{line_rate_gbps}g"
        self.title = (f"VCU118, QSFP28 cage 1 lane 0, {line_rate_gbps}GBASE-R (XGMII MAC over "
                      f"the 10G/25G PCS/PMA)")
        self.core_clock_hz = 390.625e6 if line_rate_gbps == 25 else 156.25e6
        self.clocks = (
            ("clk_125mhz", 125e6, "board clock: PCS/PMA DRP clock, resets, heartbeat"),
            ("qsfp1_mgt_refclk_0", 156.25e6, "transceiver reference of GTY quad 231"),
            ("tx_mii_clk_0", self.core_clock_hz, "PCS/PMA XGMII clock (generated): the core's "
                                                 "clock"),
        )

    pins = property(lambda self: _COMMON_PINS + self._lane_pins(1))
