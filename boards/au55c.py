"""AMD (Xilinx) Alveo U55C data-center card: Virtex UltraScale+ HBM xcu55c-fsvh2892-2L-e.

One target, ``au55c``: 100GbE on QSFP28 cage 0 (GTY quad 130, X0Y28..X0Y31) through the
integrated CMAC (site CMACE4_X0Y3), the endpoint at W = 512 with its payloads in on-chip RAM
(the card's memory is HBM, which rocegen does not drive). The transceiver reference is
MGTREFCLK0 of quad 130 from the card's SI5394 (OUT0) at 161.1328125 MHz; the MAC's init and DRP
clock is the 100 MHz board clock on BK43/BK44. The card has no button or switch the FPGA reads
and its QSFP module pins belong to the card's management controller: the design resets itself
after configuration, and its error LED stays lit until the card is configured again. The HBM
over-temperature output ``hbm_cattrip`` is held low, as a design without HBM must.

Pin locations, I/O standards, the GT channels and the CMAC site are those of Corundum's Alveo
U55C/U55N design (``corundum/corundum``: ``fpga/mqnic/Alveo/fpga_25g/fpga_au55.xdc`` for the
pins, ``fpga/mqnic/Alveo/fpga_100g/placement_au55n.xdc`` for the CMAC site of QSFP0, and
``fpga/mqnic/Alveo/fpga_100g/rtl/fpga_au55.v``, which ties ``hbm_cattrip`` low).
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource, Subsignal
from amaranth.vendor import XilinxPlatform

from rocegen.boards.base import PinMap
from rocegen.boards.card import CardBoard, CardTop
from rocegen.boards.xilinx import CmacPlacement

__all__ = ["AU55CPlatform", "Au55cTop", "Au55cCmac", "CMAC_PLACEMENT", "LEDS"]

_LVCMOS18 = Attrs(IOSTANDARD="LVCMOS18")
BOARD_CLOCK_HZ = 100e6

#: QSFP28 cage 0: quad 130, MGTREFCLK0 from the SI5394 at 161.1328125 MHz; DRP clock 100 MHz.
CMAC_PLACEMENT = CmacPlacement("CMACE4_X0Y3", ("X0Y28", "X0Y29", "X0Y30", "X0Y31"),
                               ref_clk_mhz=161.1328125, drp_clk_mhz=100, where="QSFP28 cage 0")

#: What the three LEDs of QSFP28 cage 0 show.
LEDS = (
    (0, "traffic (activity LED): blinks when frames are sent or received"),
    (1, "link up (green status LED): CMAC RX aligned"),
    (2, "error (yellow status LED; sticky until the card is configured again): bad frame, bad "
        "ICRC, NAK, completion in error, MAC transmit underflow/overflow"),
)


class AU55CPlatform(XilinxPlatform):
    """The U55C's pins used here: the 100 MHz board clock ``clk100`` (LVDS), the three LEDs of
    QSFP28 cage 0 (``led`` 0..2: activity, green and yellow status), the HBM over-temperature
    output ``hbm_cattrip`` and QSFP28 cage 0 (``qsfp`` 0: ``refclk`` = MGTREFCLK0 of quad 130,
    4 lanes)."""

    device, package, speed = "xcu55c", "fsvh2892", "2L-e"
    default_clk = "clk100"
    resources = [
        Resource("clk100", 0, DiffPairs("BK43", "BK44", dir="i"), Clock(BOARD_CLOCK_HZ),
                 Attrs(IOSTANDARD="LVDS")),
        *[Resource("led", i, Pins(pin, dir="o"), Attrs(IOSTANDARD="LVCMOS18", SLEW="SLOW",
                                                       DRIVE="8"))
          for i, pin in enumerate("BL13 BK11 BJ11".split())],
        Resource("hbm_cattrip", 0, Pins("BE45", dir="o"), _LVCMOS18),
        Resource("qsfp", 0,
                 Subsignal("refclk", DiffPairs("AD42", "AD43", dir="i"), Clock(161.1328125e6)),
                 Subsignal("rx", DiffPairs("AD51 AC53 AC49 AB51", "AD52 AC54 AC50 AB52", dir="i")),
                 Subsignal("tx", DiffPairs("AD46 AC44 AB46 AA48", "AD47 AC45 AB47 AA49", dir="o"))),
    ]
    connectors = []


class Au55cTop(CardTop):
    """Top level of the ``au55c`` target: the endpoint at W = 512 behind the CMAC on QSFP28
    cage 0, payloads on chip (:class:`~rocegen.boards.card.CardTop`).

    Ports (the card's pins): ``clk_100mhz_p/n`` (the MAC's init/DRP clock, the reset logic);
    ``qsfp0_mgt_refclk_0_p/n``; ``qsfp0_rx_p/n``, ``qsfp0_tx_p/n`` (4 lanes); ``hbm_cattrip``
    (held low); ``led`` (:data:`LEDS`).
    """

    clock, clock_hz, clock_submodule = "clk_100mhz", BOARD_CLOCK_HZ, "clk100"
    qsfp, refclk = "qsfp0", "qsfp0_mgt_refclk_0"
    sideband = False
    constant_outputs = {"hbm_cattrip": (1, 0)}
    leds = ("traffic", "link", "error")
    placements = {"cmac": CMAC_PLACEMENT}


class Au55cCmac(CardBoard):
    """Alveo U55C, QSFP28 cage 0 at 100GbE through the integrated CMAC."""

    name = "au55c"
    title = "Alveo U55C, QSFP28 cage 0, 100GbE (CMAC)"
    platform = AU55CPlatform
    top_name = "rocegen_au55c"
    top_class = Au55cTop
    mac = "CMAC (cmac_usplus, CAUI-4, RS-FEC)"
    line_rate_gbps = 100
    width = 512
    core_clock_hz = 322.265625e6
    clocks = (
        ("clk_100mhz", BOARD_CLOCK_HZ, "board clock (SI5394): CMAC init and DRP clock, resets"),
        ("qsfp0_mgt_refclk_0", 161.1328125e6, "transceiver reference of GTY quad 130 (SI5394)"),
        ("gt_txusrclk2", 322.265625e6, "CMAC user clock (generated): the core's clock"),
    )
    pins = [
        PinMap("clk_100mhz_p", "clk100", 0, side="p"), PinMap("clk_100mhz_n", "clk100", 0, side="n"),
        PinMap("qsfp0_mgt_refclk_0_p", "qsfp", 0, ("refclk",), side="p"),
        PinMap("qsfp0_mgt_refclk_0_n", "qsfp", 0, ("refclk",), side="n"),
        *[PinMap(f"qsfp0_{d}_{s}", "qsfp", 0, (d,), side=s) for d in ("rx", "tx") for s in "pn"],
        PinMap("hbm_cattrip", "hbm_cattrip"),
        *[PinMap("led", "led", i, port_bit=i) for i in range(3)],
    ]
    led_meanings = LEDS
    sources_note = """\
## What was checked, what to check

The pin locations, the GT channels and the CMAC site come from Corundum's public Alveo U55C/U55N
design (`fpga/mqnic/Alveo/fpga_25g/fpga_au55.xdc`, `fpga/mqnic/Alveo/fpga_100g/placement_au55n.xdc`);
compare them with the U55C board files of your Vivado before programming a card. The SI5394 must
give its power-up frequencies (161.1328125 MHz to the QSFP28 reference, 100 MHz to the board
clock). The design was checked with Verilator against port-compatible stubs of the CMAC; it has
not been through Vivado here. The card's management controller (CMS) is not instantiated: QSFP
module access over I2C is left to it.
"""
