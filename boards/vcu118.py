"""AMD (Xilinx) VCU118 evaluation board: Virtex UltraScale+ xcvu9p-flga2104-2L-e.

Pin locations are those of the board's public constraint files (the VCU118 user guide UG1224
and its board files list the same nets): system clocks, user LEDs, push buttons, DIP switches,
the USB UART, and both QSFP28 cages (transceiver lanes, reference clocks, module sideband).

Two targets use QSFP28 cage 1 (GTY quad 231, X1Y48..X1Y51, 156.25 MHz reference clock):

* ``vcu118``: 100GbE through the integrated CMAC (``cmac_usplus``, CAUI-4 with RS-FEC, AXI-Stream
  user interface, 512 bits at 322.266 MHz), the endpoint at W = 512;
* ``vcu118_25g`` / ``vcu118_10g``: one lane at 25GBASE-R / 10GBASE-R through the 10G/25G
  Ethernet subsystem configured as PCS/PMA only (``xxv_ethernet``, 64-bit XGMII-style MII), with
  rocegen's own XGMII MAC (:mod:`rocegen.gateware.mac`) and the endpoint at W = 64. A QSFP28 to
  4xSFP28 breakout cable (or a QSFP+ / SFP+ adapter at 10G) connects lane 0 to the peer.

The vendor IP and primitives (CMAC, 10G/25G subsystem, IBUFDS, BUFG) are instantiated here and
only here; the core and the board glue are portable Amaranth.
"""

from amaranth.build import Attrs, Clock, DiffPairs, Pins, Resource, Subsignal
from amaranth.hdl import Cat, ClockDomain, Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.vendor import XilinxPlatform

from rocegen.gateware.roce.endpoint import STATS, RoceEndpoint
from rocegen.gateware.top import parse_ip, parse_mac

from .base import Board, PinMap
from .common import ResetSync, StatsWatch, StatusLeds, cycles_for, tie_off
from .core import xgmii_mac

__all__ = ["VCU118Platform", "Vcu118Top", "Vcu118Cmac", "Vcu118Xxv", "CMAC_MODULE",
           "XXV_MODULE"]

#: Module names of the vendor IP instances (``create_ip -module_name``).
CMAC_MODULE = "cmac_usplus_0"
XXV_MODULE = "xxv_ethernet_0"

_LVCMOS12 = Attrs(IOSTANDARD="LVCMOS12")
_LVCMOS18 = Attrs(IOSTANDARD="LVCMOS18")
_LED = Attrs(IOSTANDARD="LVCMOS12", SLEW="SLOW", DRIVE="8")


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
    system clock, ``clk250`` the two 250 MHz memory reference clocks, ``clk125`` the 125 MHz
    clock. ``cpu_reset`` is the CPU_RESET push button (active high); ``button_*`` the five
    direction buttons (active high).
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
    (7, "the core is held in reset"),
)

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
        The core's parameters (:class:`~rocegen.gateware.roce.endpoint.RoceEndpoint`).
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
    :data:`LEDS`.

    Clocks and resets: the core and the MAC's user interface run in one domain, the MAC's
    transmit user clock (CMAC ``gt_txusrclk2``, 322.266 MHz, with ``rx_clk`` tied to it so the
    receive side is in the same domain; 10/25G ``tx_mii_clk_0``, 390.625 / 156.25 MHz, with the
    receive FIFO's ``rx_core_clk_0`` tied to it). The MAC's ``sys_reset`` is held for
    :data:`POWER_ON_CYCLES` cycles of the board clock after configuration or CPU_RESET (and the
    QSFP module is held in reset as long); the core's reset is asserted asynchronously by that
    reset or the MAC's user resets and released synchronously to the core clock. Byte order
    on the MAC port: byte 0 of a frame in the low lane of the first beat, on both sides; the
    MAC adds and strips the FCS.
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
        self.endpoint = RoceEndpoint(self.width, num_qps, memory=memory, mem_bytes=mem_bytes,
                                     clk_hz=self.core_clock_hz, **endpoint_params)
        self.has_connection_manager = "qp_open" in self.endpoint.signature.members
        lanes = 4 if mac_kind == "cmac" else 1
        super().__init__({
            "clk_125mhz_p": In(1), "clk_125mhz_n": In(1),
            "cpu_reset": In(1), "btn_c": In(1),
            "qsfp1_mgt_refclk_0_p": In(1), "qsfp1_mgt_refclk_0_n": In(1),
            "qsfp1_rx_p": In(lanes), "qsfp1_rx_n": In(lanes),
            "qsfp1_tx_p": Out(lanes), "qsfp1_tx_n": Out(lanes),
            "qsfp1_modsell": Out(1), "qsfp1_resetl": Out(1), "qsfp1_lpmode": Out(1),
            "qsfp1_modprsl": In(1), "qsfp1_intl": In(1),
            "led": Out(8),
        })

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
        m.submodules.rst_sync_core = rs_core = ResetSync("sync")
        m.d.comb += [cd_sync.clk.eq(core_clk),
                     rs_core.arst.eq(sys_reset | usr_rx_reset | usr_tx_reset | self.cpu_reset),
                     cd_sync.rst.eq(rs_core.rst)]

        # the core: fixed addresses; ports a board does not use are tied off
        m.d.comb += [ep.local_mac.eq(self.mac), ep.local_ip.eq(self.ip)]
        watch = m.submodules.stats_watch = StatsWatch(
            [[STATS.index(n) for n in ERROR_COUNTERS], [STATS.index(n) for n in ACK_COUNTERS]],
            ep.stats_addr.shape(), len(ep.stats_data))
        m.d.comb += [ep.stats_addr.eq(watch.stats_addr), watch.stats_data.eq(ep.stats_data)]
        used = {"local_mac", "local_ip", "mac_rx", "mac_tx", "stats_addr", "stats_data"}
        if self.has_connection_manager:
            used.add("qp_open")
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
                            init_heartbeat, leds.led_heartbeat, ~self.qsfp1_modprsl,
                            cd_sync.rst)),
        ]
        return m

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


class _Vcu118Board(Board):
    platform = VCU118Platform
    top_name = "rocegen_vcu118"

    def leds(self):
        return LEDS

    def _lane_pins(self, lanes):
        bits = None if lanes == 4 else tuple(range(lanes))
        return [PinMap(f"qsfp1_{d}_{s}", "qsfp", 0, (d,), side=s, bits=bits)
                for d in ("rx", "tx") for s in ("p", "n")]

    def extra_xdc(self, top):
        return """\
# the board clock and the transceiver clocks (derived from the QSFP reference) are unrelated
set_clock_groups -asynchronous \\
    -group [get_clocks -include_generated_clocks clk_125mhz_p] \\
    -group [get_clocks -include_generated_clocks qsfp1_mgt_refclk_0_p]

# reset synchronizers: their flip-flops are preset asynchronously; the preset is not timed
set_false_path -to [get_pins -of_objects [get_cells -hierarchical -filter \\
    {ASYNC_REG == TRUE && NAME =~ *rst_sync_*}] -filter {REF_PIN_NAME == PRE}]
# level synchronizers (link status, button): the first flip-flop samples an unrelated signal
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
system clock (G31/F31) and the two 250 MHz memory reference clocks (E12/D12, AW26/AW27); this
design runs its reset logic and the IP's init/DRP clock on the 125 MHz clock (AY24/AY23, LVDS)
instead, whose frequency is the DRP clock frequency set in the IP.
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

    def ip_tcl(self):
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

    def notes(self):
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

{_SOURCES_NOTE}"""


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

    def ip_tcl(self):
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

    def notes(self):
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

{_SOURCES_NOTE}"""
