"""AMD (Xilinx) Alveo U250 data-center card: Virtex UltraScale+ xcu250-figd2104-2-e.

One target, ``au250``: 100GbE on QSFP28 cage 0 (GTY quad 231, X1Y44..X1Y47) through the
integrated CMAC (:class:`~rocegen.boards.xilinx.cmac.Cmac`, CMAC site CMACE4_X0Y8), the
endpoint at W = 512 with its payloads in on-chip RAM. The transceiver reference is
MGTREFCLK1 of quad 231 from the card's SI5335 at 161.1328125 MHz (frequency select
``qsfp0_fs`` = 0b10); the MAC's init and DRP clock is the SI570 user clock at its power-up
156.25 MHz. The card has no push button: DIP switch 0 resets the design, DIP switch 1 clears the
error LED.

Pin locations, I/O standards, the GT channels and the CMAC site are those of Corundum's Alveo
U250 design (``corundum/corundum``: ``fpga/mqnic/AU250/fpga_100g/fpga.xdc`` and
``ip/cmac_usplus_0.tcl``), which name the card's schematic nets; its part is the one that design
builds for.
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource, Subsignal
from amaranth.vendor import XilinxPlatform

from rocegen.boards.base import PinMap
from rocegen.boards.card import CardBoard, CardTop
from rocegen.boards.xilinx import CmacPlacement

__all__ = ["AU250Platform", "Au250Top", "Au250Cmac", "CMAC_PLACEMENT", "LEDS"]

_LVCMOS12 = Attrs(IOSTANDARD="LVCMOS12")

#: QSFP28 cage 0: quad 231, MGTREFCLK1 from the SI5335 at 161.1328125 MHz; DRP clock: the SI570.
CMAC_PLACEMENT = CmacPlacement("CMACE4_X0Y8", ("X1Y44", "X1Y45", "X1Y46", "X1Y47"),
                               ref_clk_mhz=161.1328125, drp_clk_mhz=156.25,
                               where="QSFP28 cage 0")
USER_CLOCK_HZ = 156.25e6

#: What the three user LEDs show.
LEDS = (
    (0, "link up (CMAC RX aligned)"),
    (1, "a QP is open (connection manager)"),
    (2, "error (sticky; DIP switch 1 clears it): bad frame, bad ICRC, NAK, completion in error, "
        "MAC transmit underflow/overflow"),
)


class AU250Platform(XilinxPlatform):
    """The U250's pins used here: the SI570 user clock (``clk_user``, LVDS), three LEDs, four
    DIP switches and QSFP28 cage 0 (``qsfp`` 0: ``refclk`` = MGTREFCLK1 of quad 231, 4 lanes,
    module sideband, and the SI5335's ``refclk_reset`` and frequency select ``fs``)."""

    device, package, speed = "xcu250", "figd2104", "2-e"
    default_clk = "clk_user"
    resources = [
        Resource("clk_user", 0, DiffPairs("AU19", "AV19", dir="i"), Clock(USER_CLOCK_HZ),
                 Attrs(IOSTANDARD="LVDS")),
        *[Resource("led", i, Pins(pin, dir="o"), Attrs(IOSTANDARD="LVCMOS12", SLEW="SLOW",
                                                       DRIVE="8"))
          for i, pin in enumerate("BC21 BB21 BA20".split())],
        *[Resource("switch", i, Pins(pin, dir="i"), _LVCMOS12)
          for i, pin in enumerate("AN22 AM19 AL19 AP20".split())],
        Resource("qsfp", 0,
                 Subsignal("refclk", DiffPairs("K11", "K10", dir="i"), Clock(161.1328125e6)),
                 Subsignal("rx", DiffPairs("N4 M2 L4 K2", "N3 M1 L3 K1", dir="i")),
                 Subsignal("tx", DiffPairs("N9 M7 L9 K7", "N8 M6 L8 K6", dir="o")),
                 Subsignal("modsell", Pins("BE16", dir="o"), _LVCMOS12),
                 Subsignal("resetl", Pins("BE17", dir="o"), _LVCMOS12),
                 Subsignal("modprsl", Pins("BE20", dir="i"), _LVCMOS12),
                 Subsignal("intl", Pins("BE21", dir="i"), _LVCMOS12),
                 Subsignal("lpmode", Pins("BD18", dir="o"), _LVCMOS12),
                 Subsignal("refclk_reset", Pins("AT22", dir="o"), _LVCMOS12),
                 Subsignal("fs", Pins("AT20 AU22", dir="o"), _LVCMOS12)),
    ]
    connectors = []


class Au250Top(CardTop):
    """Top level of the ``au250`` target: the endpoint at W = 512 behind the CMAC on QSFP28
    cage 0, payloads on chip (:class:`~rocegen.boards.card.CardTop`).

    Ports (the card's pins): ``clk_user_p/n`` (156.25 MHz: the MAC's init/DRP clock, resets);
    ``sw``: DIP switches 0 (reset while on) and 1 (clears the error LED);
    ``qsfp0_mgt_refclk_1_p/n``; ``qsfp0_rx_p/n``, ``qsfp0_tx_p/n`` (4 lanes); ``qsfp0_modsell``,
    ``_resetl``, ``_lpmode``, ``_modprsl``, ``_intl``; ``qsfp0_refclk_reset`` (held low: the
    SI5335 runs) and ``qsfp0_fs`` (0b10: 161.1328125 MHz); ``led`` (:data:`LEDS`).
    """

    clock, clock_hz, clock_submodule = "clk_user", USER_CLOCK_HZ, "clk_user"
    qsfp, refclk = "qsfp0", "qsfp0_mgt_refclk_1"
    buttons = {"sw": 2}
    reset_button, clear_button = ("sw", 0), ("sw", 1)
    constant_outputs = {"qsfp0_refclk_reset": (1, 0), "qsfp0_fs": (2, 0b10)}
    leds = ("link", "qp", "error")
    placements = {"cmac": CMAC_PLACEMENT}


_PINS = [
    PinMap("clk_user_p", "clk_user", 0, side="p"), PinMap("clk_user_n", "clk_user", 0, side="n"),
    *[PinMap("sw", "switch", i, port_bit=i) for i in range(2)],
    PinMap("qsfp0_mgt_refclk_1_p", "qsfp", 0, ("refclk",), side="p"),
    PinMap("qsfp0_mgt_refclk_1_n", "qsfp", 0, ("refclk",), side="n"),
    *[PinMap(f"qsfp0_{d}_{s}", "qsfp", 0, (d,), side=s) for d in ("rx", "tx") for s in "pn"],
    *[PinMap(f"qsfp0_{n}", "qsfp", 0, (n,))
      for n in ("modsell", "resetl", "lpmode", "modprsl", "intl", "refclk_reset", "fs")],
    *[PinMap("led", "led", i, port_bit=i) for i in range(3)],
]


class Au250Cmac(CardBoard):
    """Alveo U250, QSFP28 cage 0 at 100GbE through the integrated CMAC."""

    name = "au250"
    title = "Alveo U250, QSFP28 cage 0, 100GbE (CMAC)"
    platform = AU250Platform
    top_name = "rocegen_au250"
    top_class = Au250Top
    mac = "CMAC (cmac_usplus, CAUI-4, RS-FEC)"
    line_rate_gbps = 100
    width = 512
    core_clock_hz = 322.265625e6
    clocks = (
        ("clk_user", USER_CLOCK_HZ, "SI570 user clock: CMAC init and DRP clock, resets"),
        ("qsfp0_mgt_refclk_1", 161.1328125e6, "transceiver reference of GTY quad 231 (SI5335)"),
        ("gt_txusrclk2", 322.265625e6, "CMAC user clock (generated): the core's clock"),
    )
    pins = _PINS
    led_meanings = LEDS
    sources_note = """\
## What was checked, what to check

The pin locations, the GT channels and the CMAC site come from Corundum's public Alveo U250
design (`fpga/mqnic/AU250/fpga_100g`); compare them with the U250 board files of your Vivado
before programming a card. The SI570 must be at its power-up 156.25 MHz (the IP's DRP clock
setting). The design was checked with Verilator against port-compatible stubs of the CMAC; it
has not been through Vivado here. The card's management controller (CMS) is not instantiated:
QSFP module access over I2C is left to it.
"""
