"""AMD (Xilinx) VCU118 evaluation board: Virtex UltraScale+ xcvu9p-flga2104-2L-e.

Pin locations are those of the board's public constraint files (the VCU118 user guide UG1224
and its board files list the same nets): system clocks, user LEDs, push buttons, DIP switches,
the USB UART, and both QSFP28 cages (transceiver lanes, reference clocks, module sideband).

Every target can keep its payloads in the board's DDR4 C1 component memory instead of on-chip RAM
(``rocegen build --retransmit-memory ddr4``): the DDR4 memory controller IP (``ddr4``, AXI4 slave
port) on its own 250 MHz reference clock, reached from the core's AXI4 master through an AXI
clock converter (``axi_clock_converter``), with the resets sequenced by
:class:`~rocegen.boards.mem_reset.MemResetControl`.

Two targets use QSFP28 cage 1 (GTY quad 231, X1Y48..X1Y51, 156.25 MHz reference clock):

* ``vcu118``: 100GbE through the integrated CMAC (``cmac_usplus``, CAUI-4 with RS-FEC, AXI-Stream
  user interface, 512 bits at 322.266 MHz), the endpoint at W = 512;
* ``vcu118_25g`` / ``vcu118_10g``: one lane at 25GBASE-R / 10GBASE-R through the 10G/25G
  Ethernet subsystem configured as PCS/PMA only (``xxv_ethernet``, 64-bit XGMII-style MII), with
  rocegen's own XGMII MAC (:mod:`rocegen.gateware.mac`) and the endpoint at W = 64. A QSFP28 to
  4xSFP28 breakout cable (or a QSFP+ / SFP+ adapter at 10G) connects lane 0 to the peer.

The vendor IP and primitives (CMAC, 10G/25G subsystem, DDR4 controller, AXI clock converter,
IBUFDS, BUFG) are instantiated here and only here; the core and the board glue are portable Amaranth.
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource, Subsignal
from amaranth.hdl import Cat, ClockDomain, Const, Instance, IOPort, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.vendor import XilinxPlatform

from rocegen.boards.base import Board, PinMap
from rocegen.boards.common import ResetSync, StatsWatch, StatusLeds, cycles_for, tie_off
from rocegen.boards.core import xgmii_mac
from rocegen.boards.mem_reset import MemResetControl
from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["VCU118Platform", "Vcu118Top", "Vcu118Cmac", "Vcu118Xxv", "CMAC_MODULE",
           "XXV_MODULE", "DDR4_C1", "ddr4_module", "axi_cdc_module", "leds_for"]

#: Module names of the vendor IP instances (``create_ip -module_name``).
CMAC_MODULE = "cmac_usplus_0"
XXV_MODULE = "xxv_ethernet_0"


def ddr4_module(width):
    """Module name of the DDR4 controller IP whose AXI port is ``width`` bits wide."""
    return f"ddr4_c1_axi{width}"


def axi_cdc_module(width):
    """Module name of the AXI clock converter IP for a ``width``-bit AXI port."""
    return f"axi_cdc_c1_axi{width}"


class _Ddr4C1:
    """The VCU118's DDR4 C1 component memory as the board top drives it (UG1224; the Vivado
    board interface ``ddr4_sdram_c1_083``): four MT40A256M16GE-083E (4 Gb, x16) on a 64-bit
    data bus = 2 GiB, DDR4-2400 (memory clock 1200 MHz, 833 ps), reference clock 250 MHz on
    E12/D12. The board wires a fifth device (bits 64..79, for ECC) that this interface leaves
    unused. The controller's AXI port: 31-bit byte addresses, 4-bit IDs, the core's data width;
    its user clock (``c0_ddr4_ui_clk``) is a quarter of the memory clock, 300 MHz."""

    name = "DDR4 C1"
    size_bytes = 1 << 31
    memory_part = "MT40A256M16GE-083E"
    data_width = 64
    time_period_ps = 833
    input_clock_period_ps = 4000
    ui_clock_hz = 1e12 / 833 / 4
    axi_addr_width = 31
    axi_id_width = 4
    #: Smallest payload memory in DDR4: the core's streaming ring (1 MiB) must fit.
    min_bytes = 1 << 20


#: The DDR4 memory of the VCU118 targets.
DDR4_C1 = _Ddr4C1()

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


#: Endpoint counters the LEDs watch, by group.
ERROR_COUNTERS = ("rx_bad_frame", "roce_rx_icrc_bad", "roce_rx_naks", "roce_cpl_error")
ACK_COUNTERS = ("roce_rx_acks",)

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

INIT_CLOCK_HZ = 125e6
#: Cycles of the board clock the MAC's ``sys_reset`` is held after configuration or CPU_RESET.
POWER_ON_CYCLES = 1 << 17


class Vcu118Top(wiring.Component):
    """Top level of the VCU118 targets: the endpoint core behind the MAC on QSFP28 cage 1.

    Parameters
    ----------
    mac_kind : ``"cmac"`` or ``"xxv"``
        100GbE through the CMAC (core at W = 512), or one lane at 25G/10G through the 10G/25G
        subsystem as PCS/PMA with the built-in XGMII MAC (core at W = 64).
    line_rate_gbps : int
        100 with ``"cmac"``; 25 or 10 with ``"xxv"``.
    num_qps, mac, ip, memory, mem_bytes
        The core's parameters (:class:`~rocegen.gateware.roce.endpoint.RoceEndpoint`). With
        ``memory="axi4"`` the payloads are kept in DDR4 C1 (:data:`DDR4_C1`): ``mem_bytes``
        (default and at most 2 GiB, the whole memory) from address 0.
    **endpoint_params
        Further parameters of the endpoint (``pmtu``, ``cm_port``, ``cm_allow_net``,
        ``cm_timeout``, ``wr_depth``, ``window``...); ``clk_hz`` is the core clock.

    Ports (the board's pins)
    ------------------------
    ``clk_125mhz_p/n``: 125 MHz board clock (the MAC's init/DRP clock and the reset logic).
    ``cpu_reset``: the CPU_RESET button, resets everything. ``btn_c``: clears the error LED.
    ``qsfp1_mgt_refclk_0_p/n``: the 156.25 MHz transceiver reference. ``qsfp1_rx_p/n``,
    ``qsfp1_tx_p/n``: 4 lanes (CMAC) or lane 0 (10/25G). ``qsfp1_modsell``, ``qsfp1_resetl``,
    ``qsfp1_lpmode``, ``qsfp1_modprsl``, ``qsfp1_intl``: module sideband. ``led``: see
    :func:`leds_for`. With DDR4 also ``c1_sys_clk_p/n`` (the controller's 250 MHz reference
    clock), ``c1_ddr4_adr``, ``_ba``, ``_bg``, ``_ck_t``, ``_ck_c``, ``_cke``, ``_cs_n``,
    ``_act_n``, ``_odt``, ``_reset_n`` and the bidirectional ``c1_ddr4_dq``, ``_dqs_t``,
    ``_dqs_c``, ``_dm_dbi_n`` (I/O ports, listed in :attr:`io_ports`).

    Clocks and resets: the core and the MAC's user interface run in one domain, the MAC's
    transmit user clock (CMAC ``gt_txusrclk2``, 322.266 MHz, with ``rx_clk`` tied to it so the
    receive side is in the same domain; 10/25G ``tx_mii_clk_0``, 390.625 / 156.25 MHz, with the
    receive FIFO's ``rx_core_clk_0`` tied to it). The MAC's ``sys_reset`` is held for
    :data:`POWER_ON_CYCLES` cycles of the board clock after configuration or CPU_RESET (and the
    QSFP module is held in reset as long); the core's reset is asserted asynchronously by that
    reset or the MAC's user resets and released synchronously to the core clock. Byte order
    on the MAC port: byte 0 of a frame in the low lane of the first beat, on both sides; the
    MAC adds and strips the FCS.

    With DDR4: the controller runs on its reference clock and hands out its user clock
    ``c0_ddr4_ui_clk`` (300 MHz, domain ``ui``); its ``sys_rst`` is the MAC's ``sys_reset``. The
    core's AXI4 master (W bits, byte addresses of ``log2(mem_bytes)`` bits, 1-bit IDs) goes
    through the asynchronous AXI clock converter (zero-extended to 31-bit addresses and 4-bit
    IDs) to the controller's AXI slave port. :class:`~rocegen.boards.mem_reset.MemResetControl`
    resets both AXI sides together (CPU_RESET, the MAC's resets, the controller's
    ``c0_ddr4_ui_clk_sync_rst``, or calibration not complete) and releases the core's reset
    after both.
    """

    def __init__(self, *, mac_kind="cmac", line_rate_gbps=100, num_qps=8,
                 mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip", mem_bytes=None,
                 **endpoint_params):
        if mac_kind not in ("cmac", "xxv"):
            raise ValueError(f"mac_kind must be 'cmac' or 'xxv', not {mac_kind!r}")
        rates = {"cmac": (100,), "xxv": (25, 10)}[mac_kind]
        if line_rate_gbps not in rates:
            raise ValueError(f"line_rate_gbps must be one of {rates} with mac_kind "
                             f"{mac_kind!r}, not {line_rate_gbps!r}")
        self.mac_kind = mac_kind
        self.line_rate_gbps = line_rate_gbps
        self.width = 512 if mac_kind == "cmac" else 64
        self.core_clock_hz = {100: 322.265625e6, 25: 390.625e6, 10: 156.25e6}[line_rate_gbps]
        self.mac = parse_mac(mac)
        self.ip = parse_ip(ip)
        if "clk_hz" in endpoint_params:
            raise ValueError("clk_hz is the board's core clock; it cannot be set")
        if memory == "axi4":
            ddr = DDR4_C1
            if mem_bytes is None:
                mem_bytes = ddr.size_bytes
            elif (not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool)
                  or not ddr.min_bytes <= mem_bytes <= ddr.size_bytes
                  or mem_bytes & (mem_bytes - 1)):
                raise ValueError(f"mem_bytes with DDR4 must be a power of two from "
                                 f"{ddr.min_bytes} (1 MiB) to {ddr.size_bytes} (2 GiB, the size "
                                 f"of {ddr.name}), not {mem_bytes!r}")
        self.memory = memory
        self.endpoint = RoceEndpoint(self.width, num_qps, memory=memory, mem_bytes=mem_bytes,
                                     clk_hz=self.core_clock_hz, **endpoint_params)
        self.has_connection_manager = "qp_open" in self.endpoint.signature.members
        lanes = 4 if mac_kind == "cmac" else 1
        members = {
            "clk_125mhz_p": In(1), "clk_125mhz_n": In(1),
            "cpu_reset": In(1), "btn_c": In(1),
            "qsfp1_mgt_refclk_0_p": In(1), "qsfp1_mgt_refclk_0_n": In(1),
            "qsfp1_rx_p": In(lanes), "qsfp1_rx_n": In(lanes),
            "qsfp1_tx_p": Out(lanes), "qsfp1_tx_n": Out(lanes),
            "qsfp1_modsell": Out(1), "qsfp1_resetl": Out(1), "qsfp1_lpmode": Out(1),
            "qsfp1_modprsl": In(1), "qsfp1_intl": In(1),
            "led": Out(8),
        }
        #: Bidirectional top-level ports (DDR4 data, strobes, masks), by name.
        self.io_ports = {}
        if memory == "axi4":
            members.update({
                "c1_sys_clk_p": In(1), "c1_sys_clk_n": In(1),
                "c1_ddr4_adr": Out(17), "c1_ddr4_ba": Out(2), "c1_ddr4_bg": Out(1),
                "c1_ddr4_ck_t": Out(1), "c1_ddr4_ck_c": Out(1), "c1_ddr4_cke": Out(1),
                "c1_ddr4_cs_n": Out(1), "c1_ddr4_act_n": Out(1), "c1_ddr4_odt": Out(1),
                "c1_ddr4_reset_n": Out(1),
            })
            lanes8 = DDR4_C1.data_width // 8
            for name, width in (("c1_ddr4_dq", DDR4_C1.data_width), ("c1_ddr4_dqs_t", lanes8),
                                ("c1_ddr4_dqs_c", lanes8), ("c1_ddr4_dm_dbi_n", lanes8)):
                port = IOPort(width, name=name)
                self.io_ports[name] = port
                setattr(self, name, port)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()

        # board clock: 125 MHz LVDS -> IBUFDS -> BUFG, domain "init" (reset by CPU_RESET)
        clk125_ibuf = Signal()
        clk125 = Signal()
        m.submodules.clk125_ibufds = Instance("IBUFDS", i_I=self.clk_125mhz_p,
                                              i_IB=self.clk_125mhz_n, o_O=clk125_ibuf)
        m.submodules.clk125_bufg = Instance("BUFG", i_I=clk125_ibuf, o_O=clk125)
        m.domains.init = cd_init = ClockDomain("init")
        m.submodules.rst_sync_init = rs_init = ResetSync("init")
        m.d.comb += [cd_init.clk.eq(clk125), rs_init.arst.eq(self.cpu_reset),
                     cd_init.rst.eq(rs_init.rst)]

        # MAC reset: held after configuration / CPU_RESET; the QSFP module is reset as long
        por = Signal(range(POWER_ON_CYCLES + 1))
        sys_reset = Signal(init=1)
        with m.If(por != POWER_ON_CYCLES):
            m.d.init += por.eq(por + 1)
        m.d.init += sys_reset.eq(por != POWER_ON_CYCLES)
        m.d.comb += [self.qsfp1_modsell.eq(0), self.qsfp1_lpmode.eq(0),
                     self.qsfp1_resetl.eq(~sys_reset)]
        beat = Signal(range(int(INIT_CLOCK_HZ // 2)))
        init_heartbeat = Signal()
        with m.If(beat == int(INIT_CLOCK_HZ // 2) - 1):
            m.d.init += [beat.eq(0), init_heartbeat.eq(~init_heartbeat)]
        with m.Else():
            m.d.init += beat.eq(beat + 1)

        # the MAC, its clock the core's domain "sync"
        ep = m.submodules.endpoint = self.endpoint
        core_clk = Signal()
        usr_rx_reset = Signal()
        usr_tx_reset = Signal()
        link = Signal()
        mac_error = Signal()
        if self.mac_kind == "cmac":
            self._cmac(m, ep, clk125, sys_reset, core_clk, usr_rx_reset, usr_tx_reset, link,
                       mac_error)
        else:
            self._xxv(m, ep, clk125, sys_reset, core_clk, usr_rx_reset, usr_tx_reset, link,
                      mac_error)
        m.domains.sync = cd_sync = ClockDomain("sync")
        m.d.comb += cd_sync.clk.eq(core_clk)
        reset_request = sys_reset | usr_rx_reset | usr_tx_reset | self.cpu_reset
        calib_done = None
        if self.memory == "axi4":
            calib_done = self._ddr4(m, ep, core_clk, sys_reset, reset_request, cd_sync)
        else:
            m.submodules.rst_sync_core = rs_core = ResetSync("sync")
            m.d.comb += [rs_core.arst.eq(reset_request), cd_sync.rst.eq(rs_core.rst)]

        # the core: fixed addresses; ports a board does not use are tied off
        m.d.comb += [ep.local_mac.eq(self.mac), ep.local_ip.eq(self.ip)]
        watch = m.submodules.stats_watch = StatsWatch(
            [[STATS.index(n) for n in ERROR_COUNTERS], [STATS.index(n) for n in ACK_COUNTERS]],
            ep.stats_addr.shape(), len(ep.stats_data))
        m.d.comb += [ep.stats_addr.eq(watch.stats_addr), watch.stats_data.eq(ep.stats_data)]
        used = {"local_mac", "local_ip", "mac_rx", "mac_tx", "stats_addr", "stats_data"}
        if self.has_connection_manager:
            used.add("qp_open")
        if self.memory == "axi4":
            used.add("axi")
        tie_off(m, ep, used)

        # LEDs
        acked = Signal()
        with m.If(watch.changed[1]):
            m.d.sync += acked.eq(1)
        qp_open = ep.qp_open.any() if self.has_connection_manager else acked
        leds = m.submodules.leds = StatusLeds(blink=cycles_for(0.05, self.core_clock_hz),
                                              heartbeat=cycles_for(0.5, self.core_clock_hz))
        m.d.comb += [
            leds.link.eq(link),
            leds.qp_open.eq(qp_open),
            leds.tx.eq(ep.mac_tx.valid & ep.mac_tx.ready),
            leds.rx.eq(ep.mac_rx.valid),
            leds.error.eq(watch.changed[0] | mac_error),
            leds.clear.eq(self.btn_c),
            self.led.eq(Cat(leds.led_link, leds.led_qp, leds.led_traffic, leds.led_error,
                            calib_done if self.memory == "axi4" else init_heartbeat,
                            leds.led_heartbeat, ~self.qsfp1_modprsl, cd_sync.rst)),
        ]
        return m

    def _ddr4(self, m, ep, core_clk, sys_reset, reset_request, cd_sync):
        """DDR4 C1 behind the core's AXI4 port: controller, clock converter, reset sequencing.
        Drives the reset of ``cd_sync``; returns the calibration status (core clock domain)."""
        ddr = DDR4_C1
        ui_clk = Signal()
        ui_clk_sync_rst = Signal()
        calib = Signal()
        m.domains.ui = cd_ui = ClockDomain("ui", reset_less=True)
        m.d.comb += cd_ui.clk.eq(ui_clk)
        ctl = m.submodules.mem_reset = MemResetControl(core_domain="sync", mem_domain="ui")
        m.d.comb += [ctl.arst.eq(reset_request | ui_clk_sync_rst), ctl.calib.eq(calib),
                     cd_sync.rst.eq(ctl.core_rst)]

        # the core's AXI4 master -> slave side of the clock converter (core clock)
        axi = ep.axi
        aw, ar = axi.aw.payload, axi.ar.payload
        core = {}
        for ch, p in (("aw", aw), ("ar", ar)):
            id_ = Signal(ddr.axi_id_width, name=f"cdc_s_{ch}id")
            addr = Signal(ddr.axi_addr_width, name=f"cdc_s_{ch}addr")
            m.d.comb += [id_.eq(p.id), addr.eq(p.addr)]
            chan = getattr(axi, ch)
            core.update({
                f"i_s_axi_{ch}id": id_, f"i_s_axi_{ch}addr": addr, f"i_s_axi_{ch}len": p.len,
                f"i_s_axi_{ch}size": p.size, f"i_s_axi_{ch}burst": p.burst,
                f"i_s_axi_{ch}lock": p.lock, f"i_s_axi_{ch}cache": p.cache,
                f"i_s_axi_{ch}prot": p.prot, f"i_s_axi_{ch}region": Const(0, 4),
                f"i_s_axi_{ch}qos": Const(0, 4), f"i_s_axi_{ch}valid": chan.valid,
                f"o_s_axi_{ch}ready": chan.ready,
            })
        w, b, r = axi.w, axi.b, axi.r
        bid = Signal(ddr.axi_id_width, name="cdc_s_bid")
        rid = Signal(ddr.axi_id_width, name="cdc_s_rid")
        m.d.comb += [b.payload.id.eq(bid), r.payload.id.eq(rid)]
        core.update({
            "i_s_axi_wdata": w.payload.data, "i_s_axi_wstrb": w.payload.strb,
            "i_s_axi_wlast": w.payload.last, "i_s_axi_wvalid": w.valid, "o_s_axi_wready": w.ready,
            "o_s_axi_bid": bid, "o_s_axi_bresp": b.payload.resp, "o_s_axi_bvalid": b.valid,
            "i_s_axi_bready": b.ready,
            "o_s_axi_rid": rid, "o_s_axi_rdata": r.payload.data, "o_s_axi_rresp": r.payload.resp,
            "o_s_axi_rlast": r.payload.last, "o_s_axi_rvalid": r.valid, "i_s_axi_rready": r.ready,
        })

        # master side of the converter -> the controller's AXI slave port (user clock)
        fields = {"addr": ddr.axi_addr_width, "id": ddr.axi_id_width, "len": 8, "size": 3,
                  "burst": 2, "lock": 1, "cache": 4, "prot": 3, "qos": 4}
        to_slave = {f"{ch}{f}": n for ch in ("aw", "ar") for f, n in fields.items()}
        to_slave.update({f"{ch}valid": 1 for ch in ("aw", "ar", "w")})
        to_slave.update({"wdata": self.width, "wstrb": self.width // 8, "wlast": 1, "bready": 1,
                         "rready": 1})
        to_master = {"awready": 1, "arready": 1, "wready": 1, "bid": ddr.axi_id_width,
                     "bresp": 2, "bvalid": 1, "rid": ddr.axi_id_width, "rdata": self.width,
                     "rresp": 2, "rlast": 1, "rvalid": 1}
        bus = {n: Signal(w_, name=f"mem_axi_{n}") for n, w_ in {**to_slave, **to_master}.items()}
        cdc_mem = {f"{'o' if n in to_slave else 'i'}_m_axi_{n}": s for n, s in bus.items()}
        mig_axi = {f"{'i' if n in to_slave else 'o'}_c0_ddr4_s_axi_{n}": s
                   for n, s in bus.items()}

        m.submodules.axi_cdc = Instance(
            axi_cdc_module(self.width),
            i_s_axi_aclk=core_clk, i_s_axi_aresetn=ctl.core_aresetn,
            i_m_axi_aclk=ui_clk, i_m_axi_aresetn=ctl.mem_aresetn,
            **core, **cdc_mem,
        )
        m.submodules.ddr4 = Instance(
            ddr4_module(self.width),
            # reference clock and reset: the controller's own clocking
            i_c0_sys_clk_p=self.c1_sys_clk_p, i_c0_sys_clk_n=self.c1_sys_clk_n,
            i_sys_rst=sys_reset,
            o_c0_ddr4_ui_clk=ui_clk, o_c0_ddr4_ui_clk_sync_rst=ui_clk_sync_rst,
            o_c0_init_calib_complete=calib,
            # the memory
            o_c0_ddr4_adr=self.c1_ddr4_adr, o_c0_ddr4_ba=self.c1_ddr4_ba,
            o_c0_ddr4_bg=self.c1_ddr4_bg, o_c0_ddr4_ck_t=self.c1_ddr4_ck_t,
            o_c0_ddr4_ck_c=self.c1_ddr4_ck_c, o_c0_ddr4_cke=self.c1_ddr4_cke,
            o_c0_ddr4_cs_n=self.c1_ddr4_cs_n, o_c0_ddr4_act_n=self.c1_ddr4_act_n,
            o_c0_ddr4_odt=self.c1_ddr4_odt, o_c0_ddr4_reset_n=self.c1_ddr4_reset_n,
            io_c0_ddr4_dq=self.c1_ddr4_dq, io_c0_ddr4_dqs_t=self.c1_ddr4_dqs_t,
            io_c0_ddr4_dqs_c=self.c1_ddr4_dqs_c, io_c0_ddr4_dm_dbi_n=self.c1_ddr4_dm_dbi_n,
            # AXI4 slave port (user clock)
            i_c0_ddr4_aresetn=ctl.mem_aresetn,
            **mig_axi,
        )
        return ctl.calib_done

    def _cmac(self, m, ep, clk125, sys_reset, core_clk, usr_rx_reset, usr_tx_reset, link,
              mac_error):
        rx_aligned = Signal()
        tx_ovf = Signal()
        tx_unf = Signal()
        m.submodules.cmac = Instance(
            CMAC_MODULE,
            # transceivers: the 4 lanes of QSFP28 cage 1, reference clock, init/DRP clock
            i_gt_rxp_in=self.qsfp1_rx_p, i_gt_rxn_in=self.qsfp1_rx_n,
            o_gt_txp_out=self.qsfp1_tx_p, o_gt_txn_out=self.qsfp1_tx_n,
            i_gt_ref_clk_p=self.qsfp1_mgt_refclk_0_p, i_gt_ref_clk_n=self.qsfp1_mgt_refclk_0_n,
            i_init_clk=clk125, i_sys_reset=sys_reset,
            i_gt_loopback_in=Const(0, 12),
            i_gtwiz_reset_tx_datapath=0, i_gtwiz_reset_rx_datapath=0,
            o_gt_txusrclk2=core_clk,
            # receive: AXI-Stream in the transmit clock domain (rx_clk = gt_txusrclk2)
            i_rx_clk=core_clk, i_core_rx_reset=0, o_usr_rx_reset=usr_rx_reset,
            o_rx_axis_tvalid=ep.mac_rx.valid, o_rx_axis_tdata=ep.mac_rx.payload.data,
            o_rx_axis_tkeep=ep.mac_rx.payload.keep, o_rx_axis_tlast=ep.mac_rx.payload.last,
            o_rx_axis_tuser=ep.mac_rx.payload.error,
            i_ctl_rx_enable=1, i_ctl_rx_force_resync=0, i_ctl_rx_test_pattern=0,
            o_stat_rx_aligned=rx_aligned,
            # transmit: enabled once the receive side is aligned, remote fault until then
            i_core_tx_reset=0, o_usr_tx_reset=usr_tx_reset,
            o_tx_axis_tready=ep.mac_tx.ready, i_tx_axis_tvalid=ep.mac_tx.valid,
            i_tx_axis_tdata=ep.mac_tx.payload.data, i_tx_axis_tkeep=ep.mac_tx.payload.keep,
            i_tx_axis_tlast=ep.mac_tx.payload.last, i_tx_axis_tuser=ep.mac_tx.payload.error,
            i_tx_preamblein=Const(0, 56), o_tx_ovfout=tx_ovf, o_tx_unfout=tx_unf,
            i_ctl_tx_enable=rx_aligned, i_ctl_tx_send_rfi=~rx_aligned, i_ctl_tx_send_lfi=0,
            i_ctl_tx_send_idle=0, i_ctl_tx_test_pattern=0,
            # RS-FEC (clause 91) on both directions, as 100GBASE-SR4/CR4 require
            i_ctl_tx_rsfec_enable=1, i_ctl_rx_rsfec_enable=1,
            i_ctl_rx_rsfec_enable_correction=1, i_ctl_rx_rsfec_enable_indication=1,
            i_ctl_rsfec_ieee_error_indication_mode=0,
            # DRP unused
            i_drp_clk=clk125, i_core_drp_reset=0, i_drp_addr=Const(0, 10),
            i_drp_di=Const(0, 16), i_drp_en=0, i_drp_we=0,
        )
        # the receive side has no backpressure: the core's network stack never stalls mac_rx
        m.d.comb += [link.eq(rx_aligned), mac_error.eq(tx_ovf | tx_unf)]

    def _xxv(self, m, ep, clk125, sys_reset, core_clk, usr_rx_reset, usr_tx_reset, link,
             mac_error):
        rx_status = Signal()
        rx_mii_d = Signal(64)
        rx_mii_c = Signal(8)
        rx, tx = xgmii_mac(m, ep)
        m.submodules.xxv = Instance(
            XXV_MODULE,
            i_gt_rxp_in_0=self.qsfp1_rx_p, i_gt_rxn_in_0=self.qsfp1_rx_n,
            o_gt_txp_out_0=self.qsfp1_tx_p, o_gt_txn_out_0=self.qsfp1_tx_n,
            i_gt_refclk_p=self.qsfp1_mgt_refclk_0_p, i_gt_refclk_n=self.qsfp1_mgt_refclk_0_n,
            i_dclk=clk125, i_sys_reset=sys_reset, i_qpllreset_in_0=0,
            i_gt_loopback_in_0=Const(0, 3),
            i_gtwiz_reset_tx_datapath_0=0, i_gtwiz_reset_rx_datapath_0=0,
            i_txoutclksel_in_0=Const(0b101, 3), i_rxoutclksel_in_0=Const(0b101, 3),
            # transmit clock: the core's clock; the receive FIFO is read in the same domain
            o_tx_mii_clk_0=core_clk, i_rx_core_clk_0=core_clk,
            i_tx_reset_0=sys_reset, i_rx_reset_0=sys_reset,
            o_user_tx_reset_0=usr_tx_reset, o_user_rx_reset_0=usr_rx_reset,
            o_rx_mii_d_0=rx_mii_d, o_rx_mii_c_0=rx_mii_c,
            i_tx_mii_d_0=tx.txd, i_tx_mii_c_0=tx.txc,
            o_stat_rx_status_0=rx_status,
            # no test patterns
            i_ctl_rx_test_pattern_0=0, i_ctl_rx_test_pattern_enable_0=0,
            i_ctl_rx_data_pattern_select_0=0, i_ctl_rx_prbs31_test_pattern_enable_0=0,
            i_ctl_tx_test_pattern_0=0, i_ctl_tx_test_pattern_enable_0=0,
            i_ctl_tx_test_pattern_select_0=0, i_ctl_tx_data_pattern_select_0=0,
            i_ctl_tx_test_pattern_seed_a_0=Const(0, 58), i_ctl_tx_test_pattern_seed_b_0=Const(0, 58),
            i_ctl_tx_prbs31_test_pattern_enable_0=0,
        )
        m.d.comb += [rx.rxd.eq(rx_mii_d), rx.rxc.eq(rx_mii_c), link.eq(rx_status),
                     mac_error.eq(tx.tx_underrun)]


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


def _uses_ddr4(top):
    return getattr(top, "memory", None) == "axi4"


def ddr4_ip_tcl(width):
    """Tcl creating the DDR4 C1 controller and the AXI clock converter for a core of data width
    ``width`` (the AXI data width of both)."""
    ddr, mig, cdc = DDR4_C1, ddr4_module(width), axi_cdc_module(width)
    return f"""
# DDR4 C1 payload memory: memory controller with an AXI4 slave port, 4 x {ddr.memory_part}
# (64-bit data, 2 GiB), DDR4-2400 from the 250 MHz reference clock on E12/D12
create_ip -name ddr4 -vendor xilinx.com -library ip -module_name {mig} -dir $ipdir
set_property -dict [list \\
    CONFIG.C0_CLOCK_BOARD_INTERFACE {{Custom}} \\
    CONFIG.C0_DDR4_BOARD_INTERFACE {{Custom}} \\
    CONFIG.RESET_BOARD_INTERFACE {{Custom}} \\
    CONFIG.System_Clock {{Differential}} \\
    CONFIG.C0.DDR4_InputClockPeriod {{{ddr.input_clock_period_ps}}} \\
    CONFIG.C0.DDR4_TimePeriod {{{ddr.time_period_ps}}} \\
    CONFIG.C0.DDR4_MemoryType {{Components}} \\
    CONFIG.C0.DDR4_MemoryPart {{{ddr.memory_part}}} \\
    CONFIG.C0.DDR4_DataWidth {{{ddr.data_width}}} \\
    CONFIG.C0.DDR4_DataMask {{DM_NO_DBI}} \\
    CONFIG.C0.DDR4_Ecc {{false}} \\
    CONFIG.C0.BANK_GROUP_WIDTH {{1}} \\
    CONFIG.C0.DDR4_AxiSelection {{true}} \\
    CONFIG.C0.DDR4_AxiDataWidth {{{width}}} \\
    CONFIG.C0.DDR4_AxiAddressWidth {{{ddr.axi_addr_width}}} \\
    CONFIG.C0.DDR4_AxiIDWidth {{{ddr.axi_id_width}}} \\
    CONFIG.C0.DDR4_AxiNarrowBurst {{false}} \\
] [get_ips {mig}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {mig}]]]
generate_target all [get_ips {mig}]

# AXI4 clock converter: the core's clock (slave side) -> the controller's user clock (master side)
create_ip -name axi_clock_converter -vendor xilinx.com -library ip -module_name {cdc} -dir $ipdir
set_property -dict [list \\
    CONFIG.PROTOCOL {{AXI4}} \\
    CONFIG.ADDR_WIDTH {{{ddr.axi_addr_width}}} \\
    CONFIG.DATA_WIDTH {{{width}}} \\
    CONFIG.ID_WIDTH {{{ddr.axi_id_width}}} \\
    CONFIG.AWUSER_WIDTH {{0}} \\
    CONFIG.ARUSER_WIDTH {{0}} \\
    CONFIG.WUSER_WIDTH {{0}} \\
    CONFIG.RUSER_WIDTH {{0}} \\
    CONFIG.BUSER_WIDTH {{0}} \\
    CONFIG.ACLK_ASYNC {{1}} \\
    CONFIG.SYNCHRONIZATION_STAGES {{3}} \\
] [get_ips {cdc}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {cdc}]]]
generate_target all [get_ips {cdc}]
"""


def ddr4_notes(top):
    """The DDR4 section of BUILD.md for ``top`` (a :class:`Vcu118Top` with DDR4)."""
    ddr, w = DDR4_C1, top.width
    mem_bytes = top.endpoint.mem_bytes
    used = (f"all {ddr.size_bytes} bytes (2 GiB) of it" if mem_bytes == ddr.size_bytes else
            f"its first {mem_bytes} bytes (addresses 0..{mem_bytes - 1:#x}) of "
            f"{ddr.size_bytes} (2 GiB)")
    addr_bits = len(top.endpoint.axi.aw.payload.addr)
    addr = (f"its {addr_bits}-bit addresses are the controller's" if addr_bits == ddr.axi_addr_width
            else f"its {addr_bits}-bit addresses are zero-extended to {ddr.axi_addr_width} bits")
    ui_mhz = f"{ddr.ui_clock_hz / 1e6:.0f} MHz"
    return f"""\
## Payload memory: {ddr.name}

The payloads of the work requests (kept until acknowledged, read again for retransmissions)
are in the board's {ddr.name} component memory: {used}.

* `{ddr4_module(w)}`: the DDR4 SDRAM memory controller (Vivado `ddr4` IP). Components
  {ddr.memory_part} (four x16 devices: 64-bit data with data masks, no ECC; the board's fifth
  device is not used), DDR4-2400 (`C0.DDR4_TimePeriod` 833 ps: 1200 MHz), reference clock
  250 MHz on E12/D12 (`C0.DDR4_InputClockPeriod` 4000 ps), AXI4 slave port of {w} bits with
  {ddr.axi_addr_width}-bit addresses and {ddr.axi_id_width}-bit IDs, user clock `c0_ddr4_ui_clk`
  at {ui_mhz}. Its `sys_rst` is the MAC's reset (configuration, CPU_RESET).
* `{axi_cdc_module(w)}`: AXI4 clock converter (`axi_clock_converter`, asynchronous, 3
  synchronizer stages) from the core's clock to `c0_ddr4_ui_clk`. The core's 1-bit IDs are
  zero-extended to {ddr.axi_id_width} bits; {addr}.
* Resets: both AXI sides (`s_axi_aresetn` in the core's clock; `m_axi_aresetn` and the
  controller's `c0_ddr4_aresetn` in the user clock) are asserted together by CPU_RESET, the
  MAC's resets, `c0_ddr4_ui_clk_sync_rst` or calibration not complete, and each is released 64
  cycles of its own clock after the last of those has gone; the core's reset is released after
  both. The core thus waits for `c0_init_calib_complete`: LED 4 shows calibration, LED 7 the
  core's reset.

The IP settings are explicit: the script creates no project with a board part. In a project
whose board part is the VCU118 (`xilinx.com:vcu118:part0:*`), the same controller comes from
`CONFIG.C0_DDR4_BOARD_INTERFACE {{ddr4_sdram_c1_083}}` and
`CONFIG.C0_CLOCK_BOARD_INTERFACE {{default_250mhz_clk1}}` plus the AXI settings above.

The DDR4 pin locations and I/O standards (SSTL12_DCI address and command, DIFF_SSTL12_DCI
clock, POD12_DCI data and masks, DIFF_POD12_DCI strobes, LVCMOS12 reset) are those of the
public VCU118 constraints of `fpganinja/taxi` (`src/eth/example/VCU118/fpga/syn/ddr4_c1.xdc`,
byte lanes 0..7 of DDR4 C1); a second public VCU118 design places the 64-bit interface on the
same pins. The memory part, speed, data width and AXI address width are those public VCU118
designs give the controller for this interface. Timing: the converter's slave side must meet
the core's clock, the controller and the converter's master side {ui_mhz}.
"""


class _Vcu118Board(Board):
    platform = VCU118Platform
    top_name = "rocegen_vcu118"
    ddr4 = DDR4_C1

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

    def ip_tcl(self, top=None):
        text = self._mac_ip_tcl()
        if _uses_ddr4(top):
            text += ddr4_ip_tcl(top.width)
        return text

    def notes(self, top=None):
        parts = [self._mac_notes()]
        if _uses_ddr4(top):
            parts.append(ddr4_notes(top))
        parts.append(_SOURCES_NOTE)
        return "\n".join(p.strip() + "\n" for p in parts)

    def _lane_pins(self, lanes):
        bits = None if lanes == 4 else tuple(range(lanes))
        return [PinMap(f"qsfp1_{d}_{s}", "qsfp", 0, (d,), side=s, bits=bits)
                for d in ("rx", "tx") for s in ("p", "n")]

    def extra_xdc(self, top):
        ddr4 = "" if not _uses_ddr4(top) else """\
# the board clock and the DDR4 controller's clocks (derived from its reference) are unrelated;
# the core clock and the controller's user clock stay related: between them are only the AXI
# clock converter (timed by its own constraints) and the synchronizers below
set_clock_groups -asynchronous \\
    -group [get_clocks -include_generated_clocks clk_125mhz_p] \\
    -group [get_clocks -include_generated_clocks c1_sys_clk_p]
"""
        return """\
# the board clock and the transceiver clocks (derived from the QSFP reference) are unrelated
set_clock_groups -asynchronous \\
    -group [get_clocks -include_generated_clocks clk_125mhz_p] \\
    -group [get_clocks -include_generated_clocks qsfp1_mgt_refclk_0_p]
""" + ddr4 + """\

# reset synchronizers: their flip-flops are preset asynchronously; the preset is not timed
set_false_path -to [get_pins -of_objects [get_cells -hierarchical -filter \\
    {ASYNC_REG == TRUE && NAME =~ *rst_sync_*}] -filter {REF_PIN_NAME == PRE}]
# level synchronizers (link status, button; with DDR4 also calibration and the memory side's
# AXI reset): the first flip-flop samples an unrelated signal
set_false_path -to [get_pins -of_objects [get_cells -hierarchical -filter \\
    {ASYNC_REG == TRUE && NAME =~ *cdc0_reg*}] -filter {REF_PIN_NAME == D}]

# LEDs, buttons and the QSFP sideband are static or slow: not timed
set_false_path -to [get_ports {led[*] qsfp1_modsell qsfp1_resetl qsfp1_lpmode}]
set_false_path -from [get_ports {cpu_reset btn_c qsfp1_modprsl qsfp1_intl}]
"""

    def top(self, *, num_qps, mac, ip, memory, mem_bytes, **endpoint_params):
        return Vcu118Top(mac_kind=self.mac_kind, line_rate_gbps=self.line_rate_gbps,
                         num_qps=num_qps, mac=mac, ip=ip, memory=memory, mem_bytes=mem_bytes,
                         **endpoint_params)


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

    def _mac_ip_tcl(self):
        return f"""\
create_ip -name cmac_usplus -vendor xilinx.com -library ip -module_name {CMAC_MODULE} -dir $ipdir
set_property -dict [list \\
    CONFIG.CMAC_CAUI4_MODE {{1}} \\
    CONFIG.NUM_LANES {{4x25}} \\
    CONFIG.GT_REF_CLK_FREQ {{156.25}} \\
    CONFIG.GT_DRP_CLK {{125}} \\
    CONFIG.USER_INTERFACE {{AXIS}} \\
    CONFIG.INCLUDE_RS_FEC {{1}} \\
    CONFIG.ENABLE_AXI_INTERFACE {{0}} \\
    CONFIG.INCLUDE_STATISTICS_COUNTERS {{0}} \\
    CONFIG.TX_FLOW_CONTROL {{0}} \\
    CONFIG.RX_FLOW_CONTROL {{0}} \\
    CONFIG.TX_FRAME_CRC_CHECKING {{Enable FCS Insertion}} \\
    CONFIG.RX_FRAME_CRC_CHECKING {{Enable FCS Stripping}} \\
    CONFIG.RX_MAX_PACKET_LEN {{9600}} \\
    CONFIG.CMAC_CORE_SELECT {{CMACE4_X0Y7}} \\
    CONFIG.GT_GROUP_SELECT {{X1Y48~X1Y51}} \\
    CONFIG.LANE1_GT_LOC {{X1Y48}} \\
    CONFIG.LANE2_GT_LOC {{X1Y49}} \\
    CONFIG.LANE3_GT_LOC {{X1Y50}} \\
    CONFIG.LANE4_GT_LOC {{X1Y51}} \\
] [get_ips {CMAC_MODULE}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {CMAC_MODULE}]]]
generate_target all [get_ips {CMAC_MODULE}]
"""

    def _mac_notes(self):
        return f"""\
## The MAC

`{CMAC_MODULE}` is the UltraScale+ integrated 100G Ethernet core in CAUI-4 mode (4 x 25.78125
Gb/s on GTY X1Y48..X1Y51, QSFP28 cage 1, CMAC site CMACE4_X0Y7), RS-FEC on, AXI-Stream user
interface without the AXI4-Lite register interface (the `ctl_*` inputs are driven by the top
level), FCS inserted on transmit and checked and stripped on receive (`rx_axis_tuser` marks a
bad frame). The core runs on `gt_txusrclk2` (322.266 MHz); `rx_clk` is tied to it so the
receive interface is in the same clock domain. 512 bits x 322.266 MHz = 165 Gb/s: the core can
fill the line. The peer must run 100GBASE-SR4/CR4 with RS-FEC (clause 91) and no
auto-negotiation.

Timing: the core at W = 512 must meet 322 MHz; read `post_route_timing_summary.rpt`.
"""


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

    def _mac_ip_tcl(self):
        return f"""\
create_ip -name xxv_ethernet -vendor xilinx.com -library ip -module_name {XXV_MODULE} -dir $ipdir
set_property -dict [list \\
    CONFIG.CORE {{Ethernet PCS/PMA 64-bit}} \\
    CONFIG.DATA_PATH_INTERFACE {{MII}} \\
    CONFIG.BASE_R_KR {{BASE-R}} \\
    CONFIG.LINE_RATE {{{self.line_rate_gbps}}} \\
    CONFIG.NUM_OF_CORES {{1}} \\
    CONFIG.GT_TYPE {{GTY}} \\
    CONFIG.GT_REF_CLK_FREQ {{156.25}} \\
    CONFIG.GT_DRP_CLK {{125}} \\
    CONFIG.INCLUDE_USER_FIFO {{1}} \\
    CONFIG.GT_GROUP_SELECT {{Quad_X1Y12}} \\
    CONFIG.LANE1_GT_LOC {{X1Y48}} \\
] [get_ips {XXV_MODULE}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {XXV_MODULE}]]]
generate_target all [get_ips {XXV_MODULE}]
"""

    def _mac_notes(self):
        rate = self.line_rate_gbps
        clock = self.core_clock_hz / 1e6
        timing = ("the W = 64 core must meet 390.625 MHz at 25G, which is more than the "
                  "portable core is designed for: expect negative slack, and use the 10G target "
                  "(156.25 MHz) if timing fails." if rate == 25 else
                  "the W = 64 core at 156.25 MHz has ample margin.")
        return f"""\
## The MAC

`{XXV_MODULE}` is the 10G/25G Ethernet subsystem configured as PCS/PMA only
({rate}GBASE-R, 64-bit MII at {clock:.3f} MHz, GTY X1Y48 = lane 0 of QSFP28 cage 1, user FIFO
included so that the receive MII is read with the transmit clock). rocegen's own XGMII MAC
(preamble, FCS, inter-frame gap) sits between it and the core at W = 64, in the
`tx_mii_clk_0` domain. Connect lane 0 to the peer with a QSFP28 to 4 x SFP28 breakout cable
(10G: a QSFP+ to SFP+ adapter or breakout); the peer runs {rate}GBASE-R without FEC and without
auto-negotiation.

Timing: {timing}
"""
