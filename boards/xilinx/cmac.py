"""The UltraScale+ integrated 100G Ethernet MAC (``cmac_usplus``) as a component, with the Tcl that
creates the IP and the BUILD.md section that describes it."""

import textwrap

from amaranth.hdl import Cat, Const, Instance, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.boards.xilinx.cmac_pause import CmacPauseTx, check_xon_cycles
from rocegen.gateware.lib.stream import PacketSignature

__all__ = ["CMAC_MODULE", "CmacPlacement", "Cmac", "has_pause_ports", "connect_pause"]

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


def has_pause_ports(core):
    """Whether ``core`` (the endpoint or the core top) has the per-priority pause ports
    ``pause_rx`` (In(8): the MAC's pause levels) and ``pause_tx`` (Out(8): XOFF requests)."""
    members = core.signature.members
    return "pause_rx" in members and "pause_tx" in members


def connect_pause(m, mac, core):
    """Join the pause ports of :class:`Cmac` ``mac`` and ``core`` in module ``m`` when the core
    has them (:func:`has_pause_ports`); returns whether it did. The MAC must have been made
    with ``pfc=True`` for them to do anything."""
    if not has_pause_ports(core):
        return False
    m.d.comb += [core.pause_rx.eq(mac.pause_rx), mac.pause_tx.eq(core.pause_tx)]
    return True


class Cmac(wiring.Component):
    """The CMAC in CAUI-4 mode (4 x 25.78125 Gb/s) with RS-FEC and the 512-bit AXI-Stream user
    interface, FCS inserted on transmit and checked and stripped on receive.

    Parameters
    ----------
    placement : :class:`CmacPlacement`
        The board's CMAC site, transceivers and clocks (only the Tcl and the notes use it).
    pfc : bool
        The MAC terminates and sends pause frames (PFC, IEEE 802.1Qbb, and 802.3x PAUSE) for
        the core (``pause_rx``, ``pause_tx``); off, pause frames pass to ``rx`` like any frame
        and ``pause_rx`` stays 0.
    pause_quanta : int
        Pause time of the XOFFs the MAC sends (1..65535 quanta); it refreshes them every half
        of it.
    xon_cycles : int
        How long a request for XON stands (:class:`~.cmac_pause.CmacPauseTx`).

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
    ``pause_rx`` : Out(8)
        With ``pfc``: bit ``n`` high while the link partner pauses priority ``n``
        (``stat_rx_pause_req``; a PAUSE frame pauses all eight). The MAC only reports it: the
        core must hold its frames of that priority back. Pause frames are taken out of ``rx``.
    ``pause_tx`` : In(8)
        With ``pfc``: request level per priority; the MAC sends XOFF on a rise, refreshes it,
        and XON on a fall, between frames of ``tx`` (:class:`~.cmac_pause.CmacPauseTx`).
    """

    def __init__(self, placement, *, pfc=False, pause_quanta=0xFFFF, xon_cycles=512):
        if not isinstance(placement, CmacPlacement):
            raise TypeError(f"placement must be a CmacPlacement, not {placement!r}")
        if not isinstance(pfc, bool):
            raise TypeError(f"pfc must be True or False, not {pfc!r}")
        if isinstance(pause_quanta, bool) or not isinstance(pause_quanta, int) or \
                not 1 <= pause_quanta <= 0xFFFF:
            raise ValueError(f"pause_quanta must be an integer in 1..65535, not {pause_quanta!r}")
        self.placement = placement
        self.pfc, self.pause_quanta = pfc, pause_quanta
        self.xon_cycles = check_xon_cycles(xon_cycles)
        super().__init__({
            "gt_ref_clk_p": In(1), "gt_ref_clk_n": In(1),
            "gt_rx_p": In(4), "gt_rx_n": In(4), "gt_tx_p": Out(4), "gt_tx_n": Out(4),
            "init_clk": In(1), "sys_reset": In(1),
            "clk": Out(1), "usr_rx_reset": Out(1), "usr_tx_reset": Out(1),
            "link": Out(1), "error": Out(1),
            "rx": Out(PacketSignature(512)), "tx": In(PacketSignature(512)),
            "pause_rx": Out(8), "pause_tx": In(8),
        })

    def _pause_ports(self, m):
        """The flow-control ports of the IP: PFC and PAUSE processing on with ``pfc``, every
        check of the received frames on except the source and unicast addresses."""
        on = int(self.pfc)
        ports = {f"i_ctl_rx_{what}_{kind}": on
                 for what in ("enable", "check_etype", "check_mcast", "check_opcode")
                 for kind in ("gcp", "gpp", "pcp", "ppp")}
        ports.update({f"i_ctl_rx_check_{what}_{kind}": 0
                      for what in ("sa", "ucast") for kind in ("gcp", "gpp", "pcp", "ppp")})
        ports.update(i_ctl_rx_pause_enable=Const(0x1FF * on, 9), i_ctl_rx_pause_ack=Const(0, 9),
                     i_ctl_tx_pause_enable=Const(0xFF * on, 9),
                     i_ctl_tx_pause_quanta8=Const(0, 16), i_ctl_tx_pause_refresh_timer8=Const(0, 16))
        if not self.pfc:
            ports.update(i_ctl_tx_pause_req=Const(0, 9), i_ctl_tx_resend_pause=0)
            ports.update({f"i_ctl_tx_pause_{what}{n}": Const(0, 16)
                          for what in ("quanta", "refresh_timer") for n in range(8)})
            return ports
        rx_req = Signal(9)
        tx = m.submodules.pause_tx = CmacPauseTx(self.xon_cycles)
        m.d.comb += [self.pause_rx.eq(rx_req[:8] | rx_req[8].replicate(8)),
                     tx.xoff.eq(self.pause_tx)]
        q = self.pause_quanta
        ports.update(o_stat_rx_pause_req=rx_req, i_ctl_tx_pause_req=Cat(tx.req, Const(0, 1)),
                     i_ctl_tx_resend_pause=tx.resend)
        for n in range(8):
            ports[f"i_ctl_tx_pause_quanta{n}"] = Mux(tx.zero[n], 0, q)
            ports[f"i_ctl_tx_pause_refresh_timer{n}"] = Const(max(1, q // 2), 16)
        return ports

    def elaborate(self, platform):
        m = Module()
        rx_aligned = self.link
        tx_ovf = Signal()
        tx_unf = Signal()
        m.submodules.cmac = Instance(
            CMAC_MODULE,
            # flow control: pause frames terminated and sent by the MAC (with pfc)
            **self._pause_ports(m),
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
    CONFIG.TX_FLOW_CONTROL {{1}} \\
    CONFIG.RX_FLOW_CONTROL {{1}} \\
    CONFIG.RX_CHECK_ACK {{0}} \\
    CONFIG.RX_FORWARD_CONTROL_FRAMES {{0}} \\
    CONFIG.TX_FRAME_CRC_CHECKING {{Enable FCS Insertion}} \\
    CONFIG.RX_FRAME_CRC_CHECKING {{Enable FCS Stripping}} \\
    CONFIG.RX_MAX_PACKET_LEN {{9600}} \\
    CONFIG.CMAC_CORE_SELECT {{{p.core_site}}} \\
    CONFIG.GT_GROUP_SELECT {{{p.gt_group}}} \\
{lanes}] [get_ips {CMAC_MODULE}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {CMAC_MODULE}]]]
generate_target all [get_ips {CMAC_MODULE}]
"""

    def _flow_notes(self):
        if not self.pfc:
            return textwrap.fill(
                "Flow control is generated but off (`ctl_rx_enable_*`, `ctl_tx_pause_enable` "
                "0): pause frames reach the core as frames.", 96)
        return textwrap.fill(
            f"The MAC terminates PFC (802.1Qbb) and PAUSE frames addressed to 01:80:C2:00:00:01 "
            f"and reports the paused priorities to the core (`stat_rx_pause_req`, no "
            f"acknowledgement); it sends PFC frames for the core's per-priority requests "
            f"(`ctl_tx_pause_req`: XOFF of {self.pause_quanta} quanta, refreshed every "
            f"{max(1, self.pause_quanta // 2)}, XON as quanta 0 with `ctl_tx_resend_pause`), "
            f"from source address 00:00:00:00:00:00 (the IP's default `TX_SA_PPP`).", 96)

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

{self._flow_notes()}

Timing: the core at W = 512 must meet 322 MHz; read `post_route_timing_summary.rpt`.
"""
