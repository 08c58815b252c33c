"""The 10G/25G Ethernet subsystem (``xxv_ethernet``) as PCS/PMA only, with rocegen's own XGMII MAC
in front of it, as a component; with the Tcl that creates the IP and the BUILD.md section that
describes it."""

from amaranth.hdl import Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature
from rocegen.gateware.mac.xgmii_rx import XgmiiRx
from rocegen.gateware.mac.xgmii_tx import XgmiiTx

__all__ = ["XXV_MODULE", "XxvPlacement", "XxvMac"]

#: Module name of the 10G/25G subsystem IP (``create_ip -module_name``).
XXV_MODULE = "xxv_ethernet_0"

#: The XGMII clock (the core's clock) at each line rate, in Hz.
MII_CLOCK_HZ = {25: 390.625e6, 10: 156.25e6}


class XxvPlacement:
    """Where a board's 10G/25G lane sits and how it is clocked.

    Parameters
    ----------
    quad : str
        The GT quad (``GT_GROUP_SELECT``), e.g. ``"Quad_X1Y12"``.
    gt_lane : str
        The GTY channel (``LANE1_GT_LOC``), e.g. ``"X1Y48"``.
    ref_clk_mhz, drp_clk_mhz : float
        Transceiver reference clock and ``dclk`` (DRP clock) frequencies.
    where : str
        The port in words, for BUILD.md (``"lane 0 of QSFP28 cage 1"``).
    """

    def __init__(self, quad, gt_lane, *, ref_clk_mhz, drp_clk_mhz, where):
        self.quad, self.gt_lane = quad, gt_lane
        self.ref_clk_mhz, self.drp_clk_mhz, self.where = ref_clk_mhz, drp_clk_mhz, where


class XxvMac(wiring.Component):
    """One lane at 25GBASE-R or 10GBASE-R: the 10G/25G subsystem configured as PCS/PMA with the
    64-bit MII and the receive user FIFO, and rocegen's XGMII MAC
    (:class:`~rocegen.gateware.mac.xgmii_rx.XgmiiRx` / :class:`~rocegen.gateware.mac.xgmii_tx.XgmiiTx`,
    preamble, FCS, inter-frame gap) in the ``tx_mii_clk_0`` domain, which is domain ``sync`` of
    this component: the caller drives that domain's clock from :attr:`clk`.

    Parameters
    ----------
    line_rate_gbps : 25 or 10
    placement : :class:`XxvPlacement`
        Only the Tcl and the notes use it.
    max_frame : int
        Longest frame the receive MAC accepts (bytes, FCS included).

    Ports
    -----
    ``gt_ref_clk_p/n`` : In(1); ``gt_rx_p/n`` : In(1); ``gt_tx_p/n`` : Out(1)
        Reference clock and the lane.
    ``dclk`` : In(1)
        Free-running DRP clock. ``sys_reset`` : In(1): reset of the subsystem (also its
        ``tx_reset_0`` / ``rx_reset_0``).
    ``clk`` : Out(1)
        ``tx_mii_clk_0`` (390.625 MHz at 25G, 156.25 MHz at 10G); the receive FIFO is read with
        it (``rx_core_clk_0``).
    ``usr_rx_reset``, ``usr_tx_reset`` : Out(1)
        The subsystem's user-side resets. ``link`` : Out(1): ``stat_rx_status_0`` (PCS locked).
        ``error`` : Out(1): the transmit MAC ran out of data inside a frame.
    ``rx`` : Out(PacketSignature(64))
        Received frames without FCS (``error``: bad FCS or framing); no backpressure.
    ``tx`` : In(PacketSignature(64))
        Frames to send, without FCS, each offered whole (the MAC must not be starved).
    """

    def __init__(self, line_rate_gbps, placement, *, max_frame):
        if line_rate_gbps not in MII_CLOCK_HZ:
            raise ValueError(f"line_rate_gbps must be 25 or 10, not {line_rate_gbps!r}")
        if not isinstance(placement, XxvPlacement):
            raise TypeError(f"placement must be an XxvPlacement, not {placement!r}")
        self.line_rate_gbps = line_rate_gbps
        self.placement = placement
        self.max_frame = max_frame
        self.clock_hz = MII_CLOCK_HZ[line_rate_gbps]
        super().__init__({
            "gt_ref_clk_p": In(1), "gt_ref_clk_n": In(1),
            "gt_rx_p": In(1), "gt_rx_n": In(1), "gt_tx_p": Out(1), "gt_tx_n": Out(1),
            "dclk": In(1), "sys_reset": In(1),
            "clk": Out(1), "usr_rx_reset": Out(1), "usr_tx_reset": Out(1),
            "link": Out(1), "error": Out(1),
            "rx": Out(PacketSignature(64)), "tx": In(PacketSignature(64)),
        })

    def elaborate(self, platform):
        m = Module()
        rx_mii_d = Signal(64)
        rx_mii_c = Signal(8)
        # the MAC: no receive backpressure, and the stack behind it sends each frame whole
        rx = m.submodules.mac_rx = XgmiiRx(max_frame=self.max_frame)
        tx = m.submodules.mac_tx = XgmiiTx()
        m.d.comb += [self.rx.payload.eq(rx.o.payload), self.rx.valid.eq(rx.o.valid)]
        wiring.connect(m, wiring.flipped(self.tx), tx.i)
        m.submodules.xxv = Instance(
            XXV_MODULE,
            i_gt_rxp_in_0=self.gt_rx_p, i_gt_rxn_in_0=self.gt_rx_n,
            o_gt_txp_out_0=self.gt_tx_p, o_gt_txn_out_0=self.gt_tx_n,
            i_gt_refclk_p=self.gt_ref_clk_p, i_gt_refclk_n=self.gt_ref_clk_n,
            i_dclk=self.dclk, i_sys_reset=self.sys_reset, i_qpllreset_in_0=0,
            i_gt_loopback_in_0=Const(0, 3),
            i_gtwiz_reset_tx_datapath_0=0, i_gtwiz_reset_rx_datapath_0=0,
            i_txoutclksel_in_0=Const(0b101, 3), i_rxoutclksel_in_0=Const(0b101, 3),
            # transmit clock: the core's clock; the receive FIFO is read in the same domain
            o_tx_mii_clk_0=self.clk, i_rx_core_clk_0=self.clk,
            i_tx_reset_0=self.sys_reset, i_rx_reset_0=self.sys_reset,
            o_user_tx_reset_0=self.usr_tx_reset, o_user_rx_reset_0=self.usr_rx_reset,
            o_rx_mii_d_0=rx_mii_d, o_rx_mii_c_0=rx_mii_c,
            i_tx_mii_d_0=tx.txd, i_tx_mii_c_0=tx.txc,
            o_stat_rx_status_0=self.link,
            # no test patterns
            i_ctl_rx_test_pattern_0=0, i_ctl_rx_test_pattern_enable_0=0,
            i_ctl_rx_data_pattern_select_0=0, i_ctl_rx_prbs31_test_pattern_enable_0=0,
            i_ctl_tx_test_pattern_0=0, i_ctl_tx_test_pattern_enable_0=0,
            i_ctl_tx_test_pattern_select_0=0, i_ctl_tx_data_pattern_select_0=0,
            i_ctl_tx_test_pattern_seed_a_0=Const(0, 58), i_ctl_tx_test_pattern_seed_b_0=Const(0, 58),
            i_ctl_tx_prbs31_test_pattern_enable_0=0,
        )
        m.d.comb += [rx.rxd.eq(rx_mii_d), rx.rxc.eq(rx_mii_c), self.error.eq(tx.tx_underrun)]
        return m

    def ip_tcl(self):
        """Tcl that creates and generates the IP (in ``$ipdir``)."""
        p = self.placement
        return f"""\
create_ip -name xxv_ethernet -vendor xilinx.com -library ip -module_name {XXV_MODULE} -dir $ipdir
set_property -dict [list \\
    CONFIG.CORE {{Ethernet PCS/PMA 64-bit}} \\
    CONFIG.DATA_PATH_INTERFACE {{MII}} \\
    CONFIG.BASE_R_KR {{BASE-R}} \\
    CONFIG.LINE_RATE {{{self.line_rate_gbps}}} \\
    CONFIG.NUM_OF_CORES {{1}} \\
    CONFIG.GT_TYPE {{GTY}} \\
    CONFIG.GT_REF_CLK_FREQ {{{p.ref_clk_mhz:.10g}}} \\
    CONFIG.GT_DRP_CLK {{{p.drp_clk_mhz:.10g}}} \\
    CONFIG.INCLUDE_USER_FIFO {{1}} \\
    CONFIG.GT_GROUP_SELECT {{{p.quad}}} \\
    CONFIG.LANE1_GT_LOC {{{p.gt_lane}}} \\
] [get_ips {XXV_MODULE}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {XXV_MODULE}]]]
generate_target all [get_ips {XXV_MODULE}]
"""

    def notes(self):
        """The MAC section of BUILD.md."""
        rate, p = self.line_rate_gbps, self.placement
        clock = self.clock_hz / 1e6
        timing = ("the W = 64 core must meet 390.625 MHz at 25G, which is more than the "
                  "portable core is designed for: expect negative slack, and use the 10G target "
                  "(156.25 MHz) if timing fails." if rate == 25 else
                  "the W = 64 core at 156.25 MHz has ample margin.")
        return f"""\
## The MAC

`{XXV_MODULE}` is the 10G/25G Ethernet subsystem configured as PCS/PMA only
({rate}GBASE-R, 64-bit MII at {clock:.3f} MHz, GTY {p.gt_lane} = {p.where}, user FIFO
included so that the receive MII is read with the transmit clock). rocegen's own XGMII MAC
(preamble, FCS, inter-frame gap) sits between it and the core at W = 64, in the
`tx_mii_clk_0` domain. Connect lane 0 to the peer with a QSFP28 to 4 x SFP28 breakout cable
(10G: a QSFP+ to SFP+ adapter or breakout); the peer runs {rate}GBASE-R without FEC and without
auto-negotiation.

Timing: {timing}
"""
