"""The UltraScale+ integrated 100G Ethernet MAC (``cmac_usplus``) as a component, with the Tcl that
creates the IP and the BUILD.md section that describes it."""

from amaranth.hdl import Const, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature

__all__ = ["CMAC_MODULE", "CmacPlacement", "Cmac"]

#: Module name of the CMAC IP (``create_ip -module_name``).
CMAC_MODULE = "cmac_usplus_0"


class CmacPlacement:
    """Where a board's CMAC sits and how it is clocked.

    Parameters
    ----------
    core_site : str
        The CMAC site (``CMAC_CORE_SELECT``), e.g. ``"CMACE4_X0Y7"``.
    gt_lanes : sequence of 4 str
        The GTY channels of lanes 1..4 (``LANE<n>_GT_LOC``), consecutive in one quad, e.g.
        ``("X1Y48", "X1Y49", "X1Y50", "X1Y51")``.
    ref_clk_mhz : float
        Frequency of the transceiver reference clock (``GT_REF_CLK_FREQ``): 156.25 or
        161.1328125.
    drp_clk_mhz : float
        Frequency of ``init_clk``, which is also the DRP clock (``GT_DRP_CLK``).
    where : str
        The port in words, for BUILD.md (``"QSFP28 cage 1"``).
    """

    REF_CLOCKS = (156.25, 161.1328125)

    def __init__(self, core_site, gt_lanes, *, ref_clk_mhz, drp_clk_mhz, where):
        gt_lanes = tuple(gt_lanes)
        if len(gt_lanes) != 4:
            raise ValueError(f"gt_lanes must name 4 GT channels, not {len(gt_lanes)}")
        if ref_clk_mhz not in self.REF_CLOCKS:
            raise ValueError(f"ref_clk_mhz must be one of {self.REF_CLOCKS}, not {ref_clk_mhz!r}")
        if not isinstance(drp_clk_mhz, (int, float)) or not 10 <= drp_clk_mhz <= 250:
            raise ValueError(f"drp_clk_mhz must be 10..250, not {drp_clk_mhz!r}")
        self.core_site, self.gt_lanes = core_site, gt_lanes
        self.ref_clk_mhz, self.drp_clk_mhz, self.where = ref_clk_mhz, drp_clk_mhz, where

    @property
    def gt_group(self):
        return f"{self.gt_lanes[0]}~{self.gt_lanes[-1]}"


class Cmac(wiring.Component):
    """The CMAC in CAUI-4 mode (4 x 25.78125 Gb/s) with RS-FEC and the 512-bit AXI-Stream user
    interface, FCS inserted on transmit and checked and stripped on receive.

    Parameters
    ----------
    placement : :class:`CmacPlacement`
        The board's CMAC site, transceivers and clocks (only the Tcl and the notes use it).

    Ports
    -----
    ``gt_ref_clk_p/n`` : In(1)
        Transceiver reference clock pins. ``gt_rx_p/n`` : In(4), ``gt_tx_p/n`` : Out(4): the
        four lanes.
    ``init_clk`` : In(1)
        Free-running clock of :attr:`CmacPlacement.drp_clk_mhz` (init and DRP clock).
    ``sys_reset`` : In(1)
        Reset of the whole MAC (asynchronous, active high).
    ``clk`` : Out(1)
        ``gt_txusrclk2`` (322.266 MHz): the user interface's clock, on both sides (``rx_clk`` is
        tied to it).
    ``usr_rx_reset``, ``usr_tx_reset`` : Out(1)
        The MAC's user-side resets (in ``clk``).
    ``link`` : Out(1)
        ``stat_rx_aligned``: the receive side is aligned. Transmission is enabled once it is;
        until then the MAC sends remote fault.
    ``error`` : Out(1)
        Transmit overflow or underflow (``tx_ovfout | tx_unfout``), one cycle each.
    ``rx`` : Out(PacketSignature(512))
        Received frames without FCS, byte 0 in the low lane of the first beat, ``error`` = bad
        frame (``rx_axis_tuser``). No backpressure: ``rx.ready`` is ignored.
    ``tx`` : In(PacketSignature(512))
        Frames to send, without FCS; ``error`` aborts the frame (``tx_axis_tuser``). The MAC
        must not be starved inside a frame.
    """

    def __init__(self, placement):
        if not isinstance(placement, CmacPlacement):
            raise TypeError(f"placement must be a CmacPlacement, not {placement!r}")
        self.placement = placement
        super().__init__({
            "gt_ref_clk_p": In(1), "gt_ref_clk_n": In(1),
            "gt_rx_p": In(4), "gt_rx_n": In(4), "gt_tx_p": Out(4), "gt_tx_n": Out(4),
            "init_clk": In(1), "sys_reset": In(1),
            "clk": Out(1), "usr_rx_reset": Out(1), "usr_tx_reset": Out(1),
            "link": Out(1), "error": Out(1),
            "rx": Out(PacketSignature(512)), "tx": In(PacketSignature(512)),
        })

    def elaborate(self, platform):
        m = Module()
        rx_aligned = self.link
        tx_ovf = Signal()
        tx_unf = Signal()
        m.submodules.cmac = Instance(
            CMAC_MODULE,
            # transceivers: the 4 lanes, reference clock, init/DRP clock
            i_gt_rxp_in=self.gt_rx_p, i_gt_rxn_in=self.gt_rx_n,
            o_gt_txp_out=self.gt_tx_p, o_gt_txn_out=self.gt_tx_n,
            i_gt_ref_clk_p=self.gt_ref_clk_p, i_gt_ref_clk_n=self.gt_ref_clk_n,
            i_init_clk=self.init_clk, i_sys_reset=self.sys_reset,
            i_gt_loopback_in=Const(0, 12),
            i_gtwiz_reset_tx_datapath=0, i_gtwiz_reset_rx_datapath=0,
            o_gt_txusrclk2=self.clk,
            # receive: AXI-Stream in the transmit clock domain (rx_clk = gt_txusrclk2)
            i_rx_clk=self.clk, i_core_rx_reset=0, o_usr_rx_reset=self.usr_rx_reset,
            o_rx_axis_tvalid=self.rx.valid, o_rx_axis_tdata=self.rx.payload.data,
            o_rx_axis_tkeep=self.rx.payload.keep, o_rx_axis_tlast=self.rx.payload.last,
            o_rx_axis_tuser=self.rx.payload.error,
            i_ctl_rx_enable=1, i_ctl_rx_force_resync=0, i_ctl_rx_test_pattern=0,
            o_stat_rx_aligned=rx_aligned,
            # transmit: enabled once the receive side is aligned, remote fault until then
            i_core_tx_reset=0, o_usr_tx_reset=self.usr_tx_reset,
            o_tx_axis_tready=self.tx.ready, i_tx_axis_tvalid=self.tx.valid,
            i_tx_axis_tdata=self.tx.payload.data, i_tx_axis_tkeep=self.tx.payload.keep,
            i_tx_axis_tlast=self.tx.payload.last, i_tx_axis_tuser=self.tx.payload.error,
            i_tx_preamblein=Const(0, 56), o_tx_ovfout=tx_ovf, o_tx_unfout=tx_unf,
            i_ctl_tx_enable=rx_aligned, i_ctl_tx_send_rfi=~rx_aligned, i_ctl_tx_send_lfi=0,
            i_ctl_tx_send_idle=0, i_ctl_tx_test_pattern=0,
            # RS-FEC (clause 91) on both directions, as 100GBASE-SR4/CR4 require
            i_ctl_tx_rsfec_enable=1, i_ctl_rx_rsfec_enable=1,
            i_ctl_rx_rsfec_enable_correction=1, i_ctl_rx_rsfec_enable_indication=1,
            i_ctl_rsfec_ieee_error_indication_mode=0,
            # DRP unused
            i_drp_clk=self.init_clk, i_core_drp_reset=0, i_drp_addr=Const(0, 10),
            i_drp_di=Const(0, 16), i_drp_en=0, i_drp_we=0,
        )
        m.d.comb += self.error.eq(tx_ovf | tx_unf)
        return m

    def ip_tcl(self):
        """Tcl that creates and generates the IP (in ``$ipdir``)."""
        p = self.placement
        lanes = "".join(f"    CONFIG.LANE{i + 1}_GT_LOC {{{loc}}} \\\n"
                        for i, loc in enumerate(p.gt_lanes))
        return f"""\
create_ip -name cmac_usplus -vendor xilinx.com -library ip -module_name {CMAC_MODULE} -dir $ipdir
set_property -dict [list \\
    CONFIG.CMAC_CAUI4_MODE {{1}} \\
    CONFIG.NUM_LANES {{4x25}} \\
    CONFIG.GT_REF_CLK_FREQ {{{p.ref_clk_mhz:.10g}}} \\
    CONFIG.GT_DRP_CLK {{{p.drp_clk_mhz:.10g}}} \\
    CONFIG.USER_INTERFACE {{AXIS}} \\
    CONFIG.INCLUDE_RS_FEC {{1}} \\
    CONFIG.ENABLE_AXI_INTERFACE {{0}} \\
    CONFIG.INCLUDE_STATISTICS_COUNTERS {{0}} \\
    CONFIG.TX_FLOW_CONTROL {{0}} \\
    CONFIG.RX_FLOW_CONTROL {{0}} \\
    CONFIG.TX_FRAME_CRC_CHECKING {{Enable FCS Insertion}} \\
    CONFIG.RX_FRAME_CRC_CHECKING {{Enable FCS Stripping}} \\
    CONFIG.RX_MAX_PACKET_LEN {{9600}} \\
    CONFIG.CMAC_CORE_SELECT {{{p.core_site}}} \\
    CONFIG.GT_GROUP_SELECT {{{p.gt_group}}} \\
{lanes}] [get_ips {CMAC_MODULE}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {CMAC_MODULE}]]]
generate_target all [get_ips {CMAC_MODULE}]
"""

    def notes(self):
        """The MAC section of BUILD.md."""
        p = self.placement
        return f"""\
## The MAC

`{CMAC_MODULE}` is the UltraScale+ integrated 100G Ethernet core in CAUI-4 mode (4 x 25.78125
Gb/s on GTY {p.gt_lanes[0]}..{p.gt_lanes[-1]}, {p.where}, CMAC site {p.core_site}), RS-FEC on, AXI-Stream user
interface without the AXI4-Lite register interface (the `ctl_*` inputs are driven by the top
level), FCS inserted on transmit and checked and stripped on receive (`rx_axis_tuser` marks a
bad frame). The core runs on `gt_txusrclk2` (322.266 MHz); `rx_clk` is tied to it so the
receive interface is in the same clock domain. 512 bits x 322.266 MHz = 165 Gb/s: the core can
fill the line. The peer must run 100GBASE-SR4/CR4 with RS-FEC (clause 91) and no
auto-negotiation.

Timing: the core at W = 512 must meet 322 MHz; read `post_route_timing_summary.rpt`.
"""
