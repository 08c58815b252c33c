"""The composition every QSFP28 card target shares: a free-running board clock, the MAC on one
QSFP28 cage (the integrated CMAC at 100G, or the 10G/25G PCS/PMA with rocegen's XGMII MAC), the
core, its registers over JTAG, optionally DDR4 payload memory, and the status LEDs.

A board file subclasses :class:`CardTop` with its pins' names, the MAC's placement and what its
LEDs show, and :class:`CardBoard` with its platform, pin map and clocks; everything else is here.
The vendor parts are components of :mod:`rocegen.boards.xilinx`, the portable ones of
:mod:`rocegen.gateware.shell`.
"""

from amaranth.hdl import Cat, ClockDomain, Const, IOPort, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.boards.base import Board
from rocegen.boards.xilinx import ClockInput, Cmac, CmacPlacement, Ddr4Axi, JtagAxiLite, XxvMac, connect_axil
from rocegen.boards.xilinx.cmac import connect_pause, has_pause_ports
from rocegen.boards.xilinx.ddr4 import PIN_WIDTHS
from rocegen.gateware.core import XGMII_MAX_FRAME
from rocegen.gateware.lib.reset_sync import ResetSync
from rocegen.gateware.roce.endpoint.endpoint import STATS, RoceEndpoint
from rocegen.gateware.shell.control import core_control, cycles_for, tie_off
from rocegen.gateware.shell.status_leds import StatusLeds
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["CardTop", "CardBoard", "LED_SOURCES", "ERROR_COUNTERS", "ACK_COUNTERS"]

#: Endpoint counters the error LED watches; those of the QP LED without a connection manager.
ERROR_COUNTERS = ("rx_bad_frame", "roce_rx_icrc_bad", "roce_rx_naks", "roce_cpl_error")
ACK_COUNTERS = ("roce_rx_acks",)

#: What an LED can show (:attr:`CardTop.leds`).
LED_SOURCES = {
    "link": "the MAC's receive side is up (CMAC aligned / PCS status)",
    "qp": "a QP is open (connection manager); without one, a peer has acknowledged packets",
    "traffic": "blinks when frames are sent or received",
    "error": "sticky error: bad frame, bad ICRC, NAK, completion in error, MAC underflow/overflow",
    "heartbeat": "heartbeat of the core clock (the transceivers are up)",
    "init_heartbeat": "heartbeat of the board clock; with DDR4, the memory has calibrated",
    "module_present": "a QSFP28 module is in the cage",
    "core_reset": "the core is held in reset",
}


def _size(n):
    """``n`` bytes in the largest binary unit that divides them (``"2 GiB"``)."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _bit(top, ref):
    """The signal of a pin reference: ``"name"`` or ``("name", bit)``; ``None`` is 0."""
    if ref is None:
        return Const(0, 1)
    if isinstance(ref, tuple):
        return getattr(top, ref[0])[ref[1]]
    return getattr(top, ref)


class CardTop(wiring.Component):
    """Top level of a card target: the endpoint core behind the MAC on a QSFP28 cage.

    What a board subclass sets (class attributes):

    ``clock``, ``clock_hz``, ``clock_submodule``
        The free-running differential board clock (ports ``<clock>_p/n``, LVDS): the MAC's init
        and DRP clock, the reset logic. ``clock_submodule`` names its buffer.
    ``qsfp``, ``refclk``
        Port prefix of the cage (``<qsfp>_rx_p``...) and of its transceiver reference clock
        (``<refclk>_p/n``). ``sideband``: the cage's module pins are FPGA pins
        (``<qsfp>_modsell``, ``_resetl``, ``_lpmode`` out; ``_modprsl``, ``_intl`` in).
    ``buttons``
        Input ports of buttons and switches, name -> width. ``reset_button``, ``clear_button``:
        which of their bits resets everything / clears the error LED (``"name"`` or
        ``("name", bit)``; ``None``: the board has none).
    ``constant_outputs``
        Output ports held at a constant, name -> (width, value) (clock selects, alarms).
    ``leds``
        What LED ``i`` shows, one :data:`LED_SOURCES` key each (port ``led``).
    ``watch_acks``
        The counter watcher reads the ACK counter even when the core has a connection manager.
    ``placements``
        MAC kind (``"cmac"`` / ``"xxv"``) -> :class:`~rocegen.boards.xilinx.CmacPlacement` /
        :class:`~rocegen.boards.xilinx.XxvPlacement`. ``ddr4``: the DDR4 memory the payloads may
        go to (:class:`~rocegen.boards.xilinx.Ddr4Memory`; ports ``<label>_sys_clk_p/n``,
        ``<label>_ddr4_*``), or ``None``. ``power_on_cycles``: board-clock cycles the MAC's
        ``sys_reset`` is held after configuration or the reset button.

    Parameters: ``mac_kind`` (``"cmac"``: W = 512; ``"xxv"``: W = 64), ``line_rate_gbps`` (100;
    25 or 10), ``num_qps``, ``mac``, ``ip``, ``memory`` (``"onchip"`` or ``"axi4"``: the DDR4),
    ``mem_bytes``, ``axil`` (the register block behind the JTAG-to-AXI master) and
    ``**endpoint_params`` (:class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint`; ``clk_hz``
    is the MAC's user clock and cannot be set).

    Clocks and resets: the core and the MAC's user interface run in one domain, the MAC's
    transmit user clock (CMAC ``gt_txusrclk2``, 322.266 MHz; 10/25G ``tx_mii_clk_0``). The MAC's
    ``sys_reset`` (and the QSFP module's reset) is held ``power_on_cycles`` after configuration
    or the reset button; the core's reset is asserted asynchronously by it, the MAC's user
    resets or the button, and released synchronously (with DDR4, by
    :class:`~rocegen.boards.xilinx.Ddr4Axi` once the memory path is out of reset too).
    """

    clock = clock_submodule = qsfp = refclk = None
    clock_hz = None
    sideband = True
    buttons = {}
    reset_button = clear_button = None
    constant_outputs = {}
    leds = ()
    watch_acks = False
    placements = {}
    ddr4 = None
    power_on_cycles = 1 << 17

    def __init__(self, *, mac_kind="cmac", line_rate_gbps=100, num_qps=8,
                 mac="02:00:00:00:00:01", ip="10.0.0.2", memory="onchip", mem_bytes=None,
                 axil=True, **endpoint_params):
        if mac_kind not in self.placements:
            raise ValueError(f"mac_kind must be one of {', '.join(map(repr, self.placements))}, "
                             f"not {mac_kind!r}")
        rates = {"cmac": (100,), "xxv": (25, 10)}[mac_kind]
        if line_rate_gbps not in rates:
            raise ValueError(f"line_rate_gbps must be one of {rates} with mac_kind "
                             f"{mac_kind!r}, not {line_rate_gbps!r}")
        if "clk_hz" in endpoint_params:
            raise ValueError("clk_hz is the board's core clock; it cannot be set")
        unknown = [s for s in self.leds if s not in LED_SOURCES]
        if unknown:
            raise ValueError(f"unknown LED sources {unknown}; known: {', '.join(LED_SOURCES)}")
        self.mac_kind, self.line_rate_gbps = mac_kind, line_rate_gbps
        self.width = 512 if mac_kind == "cmac" else 64
        self.core_clock_hz = {100: 322.265625e6, 25: 390.625e6, 10: 156.25e6}[line_rate_gbps]
        self.mac, self.ip = parse_mac(mac), parse_ip(ip)
        ddr = self.ddr4
        if memory == "axi4":
            if ddr is None:
                raise ValueError(f"{type(self).__name__} keeps payloads on chip; it has no DDR4")
            if mem_bytes is None:
                mem_bytes = ddr.size_bytes
            elif (not isinstance(mem_bytes, int) or isinstance(mem_bytes, bool)
                  or not ddr.min_bytes <= mem_bytes <= ddr.size_bytes
                  or mem_bytes & (mem_bytes - 1)):
                raise ValueError(f"mem_bytes with DDR4 must be a power of two from "
                                 f"{ddr.min_bytes} ({_size(ddr.min_bytes)}) to {ddr.size_bytes} "
                                 f"({_size(ddr.size_bytes)}, the size of {ddr.name}), not "
                                 f"{mem_bytes!r}")
        self.memory = memory
        self.axil = bool(axil)
        self.endpoint = RoceEndpoint(self.width, num_qps, memory=memory, mem_bytes=mem_bytes,
                                     clk_hz=self.core_clock_hz, qp_info=self.axil,
                                     **endpoint_params)
        self.has_connection_manager = "qp_open" in self.endpoint.signature.members
        lanes = 4 if mac_kind == "cmac" else 1
        q = self.qsfp
        members = {f"{self.clock}_p": In(1), f"{self.clock}_n": In(1),
                   **{name: In(width) for name, width in self.buttons.items()},
                   f"{self.refclk}_p": In(1), f"{self.refclk}_n": In(1),
                   f"{q}_rx_p": In(lanes), f"{q}_rx_n": In(lanes),
                   f"{q}_tx_p": Out(lanes), f"{q}_tx_n": Out(lanes)}
        if self.sideband:
            members.update({f"{q}_modsell": Out(1), f"{q}_resetl": Out(1), f"{q}_lpmode": Out(1),
                            f"{q}_modprsl": In(1), f"{q}_intl": In(1)})
        members.update({name: Out(width) for name, (width, _) in self.constant_outputs.items()})
        members["led"] = Out(len(self.leds))
        #: Bidirectional top-level ports (DDR4 data, strobes, masks), by name.
        self.io_ports = {}
        if memory == "axi4":
            d = f"{ddr.label}_ddr4"
            members.update({f"{ddr.label}_sys_clk_p": In(1), f"{ddr.label}_sys_clk_n": In(1),
                            **{f"{d}_{n}": Out(w) for n, w in PIN_WIDTHS.items()}})
            lanes8 = ddr.data_width // 8
            for name, width in ((f"{d}_dq", ddr.data_width), (f"{d}_dqs_t", lanes8),
                                (f"{d}_dqs_c", lanes8), (f"{d}_dm_dbi_n", lanes8)):
                port = IOPort(width, name=name)
                self.io_ports[name] = port
                setattr(self, name, port)
        super().__init__(members)
        #: The parts around the core: the MAC, and with DDR4 the memory behind its AXI4 port.
        placement = self.placements[mac_kind]
        if mac_kind == "cmac":
            self.mac_ip = Cmac(placement, pfc=has_pause_ports(self.endpoint))
        else:
            self.mac_ip = XxvMac(line_rate_gbps, placement, max_frame=XGMII_MAX_FRAME)
        #: The master of the register block (with ``axil``): JTAG-to-AXI, for the hardware manager.
        self.jtag_axi = JtagAxiLite() if self.axil else None
        self.ddr4_axi = None
        if memory == "axi4":
            self.ddr4_axi = Ddr4Axi(ddr, self.width, len(self.endpoint.axi.aw.payload.addr),
                                    **{n: self.io_ports[f"{ddr.label}_ddr4_{n}"]
                                       for n in ("dq", "dqs_t", "dqs_c", "dm_dbi_n")})

    def elaborate(self, platform):
        m = Module()
        clk, sys_reset, button, init_heartbeat = self._board_clock(m)
        ep, mac, cd_sync = self._mac_and_core_clock(m, clk, sys_reset, button)
        watch, acked = self._core_control(m, ep, mac, cd_sync)
        self._leds(m, ep, mac, cd_sync, watch, acked, init_heartbeat)
        return m

    def _board_clock(self, m):
        """Board clock -> IBUFDS -> BUFG, domain ``init`` (reset by the reset button); the MAC's
        power-on reset ``sys_reset``, which holds the QSFP module in reset as long; the board
        clock's heartbeat when an LED shows it. Returns ``(clock, sys_reset, button,
        heartbeat)``."""
        q = self.qsfp
        clk = m.submodules[self.clock_submodule] = ClockInput()
        m.d.comb += [clk.p.eq(getattr(self, f"{self.clock}_p")),
                     clk.n.eq(getattr(self, f"{self.clock}_n"))]
        m.domains.init = cd_init = ClockDomain("init")
        m.submodules.rst_sync_init = rs_init = ResetSync("init")
        button = _bit(self, self.reset_button)
        m.d.comb += [cd_init.clk.eq(clk.clk), rs_init.arst.eq(button),
                     cd_init.rst.eq(rs_init.rst)]
        por = Signal(range(self.power_on_cycles + 1))
        sys_reset = Signal(init=1)
        with m.If(por != self.power_on_cycles):
            m.d.init += por.eq(por + 1)
        m.d.init += sys_reset.eq(por != self.power_on_cycles)
        if self.sideband:
            m.d.comb += [getattr(self, f"{q}_modsell").eq(0), getattr(self, f"{q}_lpmode").eq(0),
                         getattr(self, f"{q}_resetl").eq(~sys_reset)]
        m.d.comb += [getattr(self, name).eq(value)
                     for name, (_, value) in self.constant_outputs.items()]
        init_heartbeat = None
        if "init_heartbeat" in self.leds:
            beat = Signal(range(int(self.clock_hz // 2)))
            init_heartbeat = Signal()
            with m.If(beat == int(self.clock_hz // 2) - 1):
                m.d.init += [beat.eq(0), init_heartbeat.eq(~init_heartbeat)]
            with m.Else():
                m.d.init += beat.eq(beat + 1)
        return clk, sys_reset, button, init_heartbeat

    def _mac_and_core_clock(self, m, clk, sys_reset, button):
        """The core and the MAC on the cage, the MAC's clock the core's domain ``sync``, and
        that domain's reset (with DDR4, the memory behind the core's AXI4 port sequences it).
        Returns ``(endpoint, mac, sync domain)``."""
        q = self.qsfp
        ep = m.submodules.endpoint = self.endpoint
        mac = m.submodules[self.mac_kind] = self.mac_ip
        m.d.comb += [
            mac.gt_ref_clk_p.eq(getattr(self, f"{self.refclk}_p")),
            mac.gt_ref_clk_n.eq(getattr(self, f"{self.refclk}_n")),
            mac.gt_rx_p.eq(getattr(self, f"{q}_rx_p")), mac.gt_rx_n.eq(getattr(self, f"{q}_rx_n")),
            getattr(self, f"{q}_tx_p").eq(mac.gt_tx_p), getattr(self, f"{q}_tx_n").eq(mac.gt_tx_n),
            (mac.init_clk if self.mac_kind == "cmac" else mac.dclk).eq(clk.clk),
            mac.sys_reset.eq(sys_reset),
        ]
        # the receive side has no backpressure: the core's network stack never stalls mac_rx
        wiring.connect(m, mac.rx, ep.mac_rx)
        wiring.connect(m, ep.mac_tx, mac.tx)
        m.domains.sync = cd_sync = ClockDomain("sync")
        m.d.comb += cd_sync.clk.eq(mac.clk)
        reset_request = sys_reset | mac.usr_rx_reset | mac.usr_tx_reset
        if self.reset_button is not None:
            reset_request = reset_request | button
        if self.ddr4_axi is not None:
            ddr = m.submodules.ddr4 = self.ddr4_axi
            label = self.ddr4.label
            wiring.connect(m, ep.axi, ddr.axi)
            m.d.comb += [ddr.sys_clk_p.eq(getattr(self, f"{label}_sys_clk_p")),
                         ddr.sys_clk_n.eq(getattr(self, f"{label}_sys_clk_n")),
                         ddr.sys_reset.eq(sys_reset), ddr.reset_request.eq(reset_request),
                         cd_sync.rst.eq(ddr.core_rst)]
            m.d.comb += [getattr(self, f"{label}_ddr4_{n}").eq(getattr(ddr, n))
                         for n in PIN_WIDTHS]
        else:
            m.submodules.rst_sync_core = rs_core = ResetSync("sync")
            m.d.comb += [rs_core.arst.eq(reset_request), cd_sync.rst.eq(rs_core.rst)]
        return ep, mac, cd_sync

    def _core_control(self, m, ep, mac, cd_sync):
        """The core's addresses, the counters the LEDs watch, its registers over JTAG (with
        ``axil``), the pause ports; the ports the board does not use are tied off. Returns the
        counter watcher and, when the ACK counter is watched, the level it sets."""
        acks = "qp" in self.leds and (self.watch_acks or not self.has_connection_manager)
        groups = [[STATS.index(n) for n in ERROR_COUNTERS]]
        if acks:
            groups.append([STATS.index(n) for n in ACK_COUNTERS])
        watch, regs, used = core_control(m, ep, mac=self.mac, ip=self.ip, axil=self.axil,
                                         watch_groups=groups)
        if regs is not None:
            jtag = m.submodules.jtag_axi = self.jtag_axi
            connect_axil(m, jtag, regs)
            m.d.comb += jtag.rst.eq(cd_sync.rst)
        used |= {"mac_rx", "mac_tx"}
        if self.mac_kind == "cmac" and connect_pause(m, mac, ep):
            used |= {"pause_rx", "pause_tx"}
        if self.has_connection_manager:
            used.add("qp_open")
        if self.memory == "axi4":
            used.add("axi")
        tie_off(m, ep, used)
        acked = None
        if acks:
            acked = Signal()
            with m.If(watch.changed[1]):
                m.d.sync += acked.eq(1)
        return watch, acked

    def _leds(self, m, ep, mac, cd_sync, watch, acked, init_heartbeat):
        """The status LEDs and what each LED of the board shows (:attr:`leds`)."""
        if self.has_connection_manager:
            qp_open = ep.qp_open.any()
        else:
            qp_open = acked if acked is not None else Const(0, 1)
        leds = m.submodules.leds = StatusLeds(blink=cycles_for(0.05, self.core_clock_hz),
                                              heartbeat=cycles_for(0.5, self.core_clock_hz))
        source = {
            "link": leds.led_link, "qp": leds.led_qp, "traffic": leds.led_traffic,
            "error": leds.led_error, "heartbeat": leds.led_heartbeat,
            "module_present": ~getattr(self, f"{self.qsfp}_modprsl") if self.sideband else None,
            "core_reset": cd_sync.rst,
            "init_heartbeat": (self.ddr4_axi.calib_done if self.ddr4_axi is not None
                               else init_heartbeat),
        }
        m.d.comb += [
            leds.link.eq(mac.link),
            leds.qp_open.eq(qp_open),
            leds.tx.eq(ep.mac_tx.valid & ep.mac_tx.ready),
            leds.rx.eq(ep.mac_rx.valid),
            leds.error.eq(watch.changed[0] | mac.error),
            leds.clear.eq(_bit(self, self.clear_button)),
            self.led.eq(Cat(source[s] for s in self.leds)),
        ]


class CardBoard(Board):
    """A :class:`~rocegen.boards.base.Board` whose top is a :class:`CardTop` (``top_class``,
    with ``mac_kind``): its vendor IP, notes, LEDs and the constraints of its clocks and slow
    pins follow from the top. A board sets ``led_meanings`` (LED index -> text) and
    ``sources_note`` (BUILD.md: where its pins come from, what to check)."""

    top_class = None
    mac_kind = "cmac"
    led_meanings = ()
    sources_note = ""

    @property
    def ddr4(self):
        return self.top_class.ddr4

    def top(self, *, num_qps, mac, ip, memory, mem_bytes, axil=True, **endpoint_params):
        if memory != "onchip" and self.ddr4 is None:
            raise ValueError(f"the {self.name} board keeps payloads on chip, not in {memory!r}")
        return self.top_class(mac_kind=self.mac_kind, line_rate_gbps=self.line_rate_gbps,
                              num_qps=num_qps, mac=mac, ip=ip, memory=memory,
                              mem_bytes=mem_bytes, axil=axil, **endpoint_params)

    def _mac_ip(self, top=None):
        if top is not None:
            return top.mac_ip
        placement = self.top_class.placements[self.mac_kind]
        if isinstance(placement, CmacPlacement):
            return Cmac(placement)
        return XxvMac(self.line_rate_gbps, placement, max_frame=XGMII_MAX_FRAME)

    def ip_tcl(self, top=None):
        text = self._mac_ip(top).ip_tcl()
        if getattr(top, "ddr4_axi", None) is not None:
            text += top.ddr4_axi.ip_tcl()
        if getattr(top, "jtag_axi", None) is not None:
            text += top.jtag_axi.ip_tcl()
        return text

    def leds(self, top=None):
        return self.led_meanings

    def notes(self, top=None):
        parts = [self._mac_ip(top).notes()]
        if getattr(top, "ddr4_axi", None) is not None:
            parts.append(top.ddr4_axi.notes(top.endpoint.mem_bytes))
        parts.append(self.sources_note)
        return "\n".join(p.strip() + "\n" for p in parts)

    def extra_xdc(self, top):
        cls, uses_ddr4 = self.top_class, getattr(top, "memory", None) == "axi4"
        text = f"""\
# the board clock and the transceiver clocks (derived from the QSFP reference) are unrelated
set_clock_groups -asynchronous \\
    -group [get_clocks -include_generated_clocks {cls.clock}_p] \\
    -group [get_clocks -include_generated_clocks {cls.refclk}_p]
"""
        if uses_ddr4:
            text += f"""\
# the board clock and the DDR4 controller's clocks (derived from its reference) are unrelated;
# the core clock and the controller's user clock stay related: between them are only the AXI
# clock converter (timed by its own constraints) and the synchronizers (their exceptions below)
set_clock_groups -asynchronous \\
    -group [get_clocks -include_generated_clocks {cls.clock}_p] \\
    -group [get_clocks -include_generated_clocks {cls.ddr4.label}_sys_clk_p]
"""
        q = cls.qsfp
        outs = ["led", *([f"{q}_modsell", f"{q}_resetl", f"{q}_lpmode"] if cls.sideband else []),
                *cls.constant_outputs]
        ins = [*cls.buttons, *([f"{q}_modprsl", f"{q}_intl"] if cls.sideband else [])]

        def refs(names):
            return " ".join(f"{n}[*]" if len(getattr(top, n)) > 1 else n for n in names)
        text += "\n# LEDs, buttons, switches and the QSFP sideband are static or slow: not timed\n"
        text += f"set_false_path -to [get_ports {{{refs(outs)}}}]\n"
        if ins:
            text += f"set_false_path -from [get_ports {{{refs(ins)}}}]\n"
        return text
