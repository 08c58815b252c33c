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
from amaranth.hdl import Cat, ClockDomain, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.vendor import XilinxPlatform

from rocegen.boards.base import Board, PinMap
from rocegen.boards.common import ResetSync, StatusLeds, core_control, cycles_for, tie_off
from rocegen.boards.xilinx import ClockInput, Cmac, CmacPlacement, JtagAxiLite, connect_axil
from rocegen.boards.xilinx.cmac import connect_pause, has_pause_ports
from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["AU250Platform", "Au250Top", "Au250Cmac", "CMAC_PLACEMENT", "LEDS"]

_LVCMOS12 = Attrs(IOSTANDARD="LVCMOS12")

#: QSFP28 cage 0: quad 231, MGTREFCLK1 from the SI5335 at 161.1328125 MHz; DRP clock: the SI570.
CMAC_PLACEMENT = CmacPlacement("CMACE4_X0Y8", ("X1Y44", "X1Y45", "X1Y46", "X1Y47"),
                               ref_clk_mhz=161.1328125, drp_clk_mhz=156.25,
                               where="QSFP28 cage 0")
USER_CLOCK_HZ = 156.25e6
#: Cycles of the user clock the MAC's ``sys_reset`` is held after configuration or DIP switch 0.
POWER_ON_CYCLES = 1 << 17
ERROR_COUNTERS = ("rx_bad_frame", "roce_rx_icrc_bad", "roce_rx_naks", "roce_cpl_error")

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


class Au250Top(wiring.Component):
    """Top level of the ``au250`` target: the endpoint at W = 512 behind the CMAC on QSFP28
    cage 0.

    Parameters: ``num_qps``, ``mac``, ``ip``, ``mem_bytes``, ``axil`` (the register block
    behind the JTAG-to-AXI Master IP, default on) and ``**endpoint_params`` as
    :class:`~rocegen.boards.vcu118.Vcu118Top` (on-chip payload memory only).

    Ports (the card's pins): ``clk_user_p/n`` (156.25 MHz: the MAC's init/DRP clock, resets);
    ``sw``: DIP switches 0 (reset while on) and 1 (clears the error LED); ``qsfp0_mgt_refclk_1_p/n``;
    ``qsfp0_rx_p/n``, ``qsfp0_tx_p/n`` (4 lanes); ``qsfp0_modsell``, ``_resetl``, ``_lpmode``,
    ``_modprsl``, ``_intl``; ``qsfp0_refclk_reset`` (held low: the SI5335 runs) and ``qsfp0_fs``
    (0b10: 161.1328125 MHz); ``led`` (:data:`LEDS`).

    Clocks and resets as on the VCU118: the core runs on the CMAC's ``gt_txusrclk2``; the MAC's
    ``sys_reset`` (and the QSFP module's reset) is held :data:`POWER_ON_CYCLES` user-clock cycles
    after configuration or DIP switch 0; the core's reset follows it and the MAC's user resets.
    """

    width = 512
    core_clock_hz = 322.265625e6
    memory = "onchip"

    def __init__(self, *, num_qps=8, mac="02:00:00:00:00:01", ip="10.0.0.2", mem_bytes=None,
                 axil=True, **endpoint_params):
        if "clk_hz" in endpoint_params:
            raise ValueError("clk_hz is the board's core clock; it cannot be set")
        self.mac, self.ip = parse_mac(mac), parse_ip(ip)
        self.axil = bool(axil)
        self.endpoint = RoceEndpoint(512, num_qps, mem_bytes=mem_bytes,
                                     clk_hz=self.core_clock_hz, qp_info=self.axil,
                                     **endpoint_params)
        self.has_connection_manager = "qp_open" in self.endpoint.signature.members
        self.mac_ip = Cmac(CMAC_PLACEMENT, pfc=has_pause_ports(self.endpoint))
        self.jtag_axi = JtagAxiLite() if self.axil else None
        self.io_ports = {}
        super().__init__({
            "clk_user_p": In(1), "clk_user_n": In(1), "sw": In(2),
            "qsfp0_mgt_refclk_1_p": In(1), "qsfp0_mgt_refclk_1_n": In(1),
            "qsfp0_rx_p": In(4), "qsfp0_rx_n": In(4), "qsfp0_tx_p": Out(4), "qsfp0_tx_n": Out(4),
            "qsfp0_modsell": Out(1), "qsfp0_resetl": Out(1), "qsfp0_lpmode": Out(1),
            "qsfp0_modprsl": In(1), "qsfp0_intl": In(1),
            "qsfp0_refclk_reset": Out(1), "qsfp0_fs": Out(2), "led": Out(3),
        })

    def elaborate(self, platform):
        m = Module()
        clk = m.submodules.clk_user = ClockInput()
        m.d.comb += [clk.p.eq(self.clk_user_p), clk.n.eq(self.clk_user_n)]
        m.domains.init = cd_init = ClockDomain("init")
        m.submodules.rst_sync_init = rs_init = ResetSync("init")
        m.d.comb += [cd_init.clk.eq(clk.clk), rs_init.arst.eq(self.sw[0]), cd_init.rst.eq(rs_init.rst)]
        por = Signal(range(POWER_ON_CYCLES + 1))
        sys_reset = Signal(init=1)
        with m.If(por != POWER_ON_CYCLES):
            m.d.init += por.eq(por + 1)
        m.d.init += sys_reset.eq(por != POWER_ON_CYCLES)
        m.d.comb += [self.qsfp0_modsell.eq(0), self.qsfp0_lpmode.eq(0),
                     self.qsfp0_resetl.eq(~sys_reset), self.qsfp0_refclk_reset.eq(0),
                     self.qsfp0_fs.eq(0b10)]

        ep = m.submodules.endpoint = self.endpoint
        mac = m.submodules.cmac = self.mac_ip
        m.d.comb += [
            mac.gt_ref_clk_p.eq(self.qsfp0_mgt_refclk_1_p),
            mac.gt_ref_clk_n.eq(self.qsfp0_mgt_refclk_1_n),
            mac.gt_rx_p.eq(self.qsfp0_rx_p), mac.gt_rx_n.eq(self.qsfp0_rx_n),
            self.qsfp0_tx_p.eq(mac.gt_tx_p), self.qsfp0_tx_n.eq(mac.gt_tx_n),
            mac.init_clk.eq(clk.clk), mac.sys_reset.eq(sys_reset),
        ]
        wiring.connect(m, mac.rx, ep.mac_rx)
        wiring.connect(m, ep.mac_tx, mac.tx)
        m.domains.sync = cd_sync = ClockDomain("sync")
        m.submodules.rst_sync_core = rs_core = ResetSync("sync")
        m.d.comb += [cd_sync.clk.eq(mac.clk), cd_sync.rst.eq(rs_core.rst),
                     rs_core.arst.eq(sys_reset | mac.usr_rx_reset | mac.usr_tx_reset | self.sw[0])]

        watch, regs, used = core_control(m, ep, mac=self.mac, ip=self.ip, axil=self.axil,
                                         watch_groups=[[STATS.index(n) for n in ERROR_COUNTERS]])
        if regs is not None:
            jtag = m.submodules.jtag_axi = self.jtag_axi
            connect_axil(m, jtag, regs)
            m.d.comb += jtag.rst.eq(cd_sync.rst)
        used |= {"mac_rx", "mac_tx", "qp_open"}
        if connect_pause(m, mac, ep):
            used |= {"pause_rx", "pause_tx"}
        tie_off(m, ep, used & set(ep.signature.members))
        leds = m.submodules.leds = StatusLeds(blink=cycles_for(0.05, self.core_clock_hz),
                                              heartbeat=cycles_for(0.5, self.core_clock_hz))
        m.d.comb += [
            leds.link.eq(mac.link), leds.qp_open.eq(ep.qp_open.any()),
            leds.tx.eq(ep.mac_tx.valid & ep.mac_tx.ready), leds.rx.eq(ep.mac_rx.valid),
            leds.error.eq(watch.changed[0] | mac.error), leds.clear.eq(self.sw[1]),
            self.led.eq(Cat(leds.led_link, leds.led_qp, leds.led_error)),
        ]
        return m


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


class Au250Cmac(Board):
    """Alveo U250, QSFP28 cage 0 at 100GbE through the integrated CMAC."""

    name = "au250"
    title = "Alveo U250, QSFP28 cage 0, 100GbE (CMAC)"
    platform = AU250Platform
    top_name = "rocegen_au250"
    mac = "CMAC (cmac_usplus, CAUI-4, RS-FEC)"
    line_rate_gbps = 100
    width = 512
    core_clock_hz = Au250Top.core_clock_hz
    clocks = (
        ("clk_user", USER_CLOCK_HZ, "SI570 user clock: CMAC init and DRP clock, resets"),
        ("qsfp0_mgt_refclk_1", 161.1328125e6, "transceiver reference of GTY quad 231 (SI5335)"),
        ("gt_txusrclk2", 322.265625e6, "CMAC user clock (generated): the core's clock"),
    )
    pins = _PINS

    def top(self, *, num_qps, mac, ip, memory, mem_bytes, axil=True, **endpoint_params):
        if memory != "onchip":
            raise ValueError(f"the {self.name} board keeps payloads on chip, not in {memory!r}")
        return Au250Top(num_qps=num_qps, mac=mac, ip=ip, mem_bytes=mem_bytes, axil=axil,
                        **endpoint_params)

    def ip_tcl(self, top=None):
        text = (top.mac_ip if top is not None else Cmac(CMAC_PLACEMENT)).ip_tcl()
        if getattr(top, "jtag_axi", None) is not None:
            text += top.jtag_axi.ip_tcl()
        return text

    def leds(self, top=None):
        return LEDS

    def notes(self, top=None):
        return (top.mac_ip if top is not None else Cmac(CMAC_PLACEMENT)).notes() + """
## What was checked, what to check

The pin locations, the GT channels and the CMAC site come from Corundum's public Alveo U250
design (`fpga/mqnic/AU250/fpga_100g`); compare them with the U250 board files of your Vivado
before programming a card. The SI570 must be at its power-up 156.25 MHz (the IP's DRP clock
setting). The design was checked with Verilator against port-compatible stubs of the CMAC; it
has not been through Vivado here. The card's management controller (CMS) is not instantiated:
QSFP module access over I2C is left to it.
"""

    def extra_xdc(self, top):
        return """\
# the user clock and the transceiver clocks (derived from the QSFP reference) are unrelated
set_clock_groups -asynchronous \\
    -group [get_clocks -include_generated_clocks clk_user_p] \\
    -group [get_clocks -include_generated_clocks qsfp0_mgt_refclk_1_p]

# reset synchronizers: their flip-flops are preset asynchronously; the preset is not timed
set_false_path -to [get_pins -of_objects [get_cells -hierarchical -filter \\
    {ASYNC_REG == TRUE && NAME =~ *rst_sync_*}] -filter {REF_PIN_NAME == PRE}]
# level synchronizers (switches, link status): the first flip-flop samples an unrelated signal
set_false_path -to [get_pins -of_objects [get_cells -hierarchical -filter \\
    {ASYNC_REG == TRUE && NAME =~ *cdc0_reg*}] -filter {REF_PIN_NAME == D}]

# LEDs, switches and the QSFP sideband are static or slow: not timed
set_false_path -to [get_ports {led[*] qsfp0_modsell qsfp0_resetl qsfp0_lpmode qsfp0_refclk_reset qsfp0_fs[*]}]
set_false_path -from [get_ports {sw[*] qsfp0_modprsl qsfp0_intl}]
"""
