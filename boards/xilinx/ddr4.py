"""DDR4 payload memory behind the core's AXI4 master: the DDR4 memory controller IP (``ddr4``,
AXI4 slave port), an AXI clock converter (``axi_clock_converter``) from the core's clock to the
controller's user clock, and the reset sequencing of both
(:class:`~rocegen.gateware.shell.mem_reset.MemResetControl`), as one component; with the Tcl that
creates the two IPs and the BUILD.md section that describes them."""

from amaranth.hdl import ClockDomain, ClockSignal, Const, Instance, IOPort, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import Axi4Signature
from rocegen.gateware.shell.mem_reset import MemResetControl

__all__ = ["Ddr4Memory", "Ddr4Axi", "ddr4_module", "axi_cdc_module", "PIN_WIDTHS"]

#: The memory's address, command and clock pins (outputs of :class:`Ddr4Axi`), by name: widths.
PIN_WIDTHS = {"adr": 17, "ba": 2, "bg": 1, "ck_t": 1, "ck_c": 1, "cke": 1, "cs_n": 1, "act_n": 1,
              "odt": 1, "reset_n": 1}


def ddr4_module(width, label="c1"):
    """Module name of the DDR4 controller IP of memory ``label`` whose AXI port is ``width``
    bits wide."""
    return f"ddr4_{label}_axi{width}"


def axi_cdc_module(width, label="c1"):
    """Module name of the AXI clock converter IP in front of memory ``label`` for a
    ``width``-bit AXI port."""
    return f"axi_cdc_{label}_axi{width}"


class Ddr4Memory:
    """A board's DDR4 memory as the controller IP sees it.

    Parameters
    ----------
    name : str
        As the board documentation calls it (``"DDR4 C1"``). ``label``: short form for the IP
        module names (``"c1"``).
    size_bytes : int
        Bytes the controller reaches. ``min_bytes``: smallest payload memory a build may use.
    memory_part, data_width, time_period_ps, input_clock_period_ps : str, int, int, int
        The controller's ``C0.DDR4_MemoryPart``, ``C0.DDR4_DataWidth``, ``C0.DDR4_TimePeriod``
        and ``C0.DDR4_InputClockPeriod`` (components with data masks, no ECC).
    axi_addr_width, axi_id_width : int
        The controller's AXI address and ID widths.
    summary, devices, ref_clock, board_interfaces, pin_source : str
        Text of the Tcl comment (``summary``) and of BUILD.md: the devices used, the reference
        clock's pins, the board part's interface settings, where the pin locations come from.
    """

    def __init__(self, *, name, label, size_bytes, min_bytes, memory_part, data_width,
                 time_period_ps, input_clock_period_ps, axi_addr_width, axi_id_width, summary,
                 devices, ref_clock, board_interfaces, pin_source):
        if size_bytes > 1 << axi_addr_width:
            raise ValueError(f"{size_bytes} bytes do not fit {axi_addr_width}-bit addresses")
        self.name, self.label = name, label
        self.size_bytes, self.min_bytes = size_bytes, min_bytes
        self.memory_part, self.data_width = memory_part, data_width
        self.time_period_ps, self.input_clock_period_ps = time_period_ps, input_clock_period_ps
        self.axi_addr_width, self.axi_id_width = axi_addr_width, axi_id_width
        self.summary, self.devices, self.ref_clock = summary, devices, ref_clock
        self.board_interfaces, self.pin_source = board_interfaces, pin_source

    @property
    def ui_clock_hz(self):
        """The controller's user clock: a quarter of the memory clock."""
        return 1e12 / self.time_period_ps / 4


class Ddr4Axi(wiring.Component):
    """The memory behind an AXI4 slave port in the core's clock domain (``sync``).

    Parameters
    ----------
    memory : :class:`Ddr4Memory`
    width : int
        AXI data width (the core's W). ``addr_width``: the core's AXI address width
        (zero-extended to the controller's).
    dq, dqs_t, dqs_c, dm_dbi_n : IOPort
        The bidirectional memory pins (top-level I/O ports of ``data_width`` and
        ``data_width // 8`` bits).

    Ports
    -----
    ``sys_clk_p/n`` : In(1)
        The controller's reference clock. ``sys_reset`` : In(1): its ``sys_rst``.
    ``reset_request`` : In(1)
        Resets both AXI sides and the core (asynchronous): CPU_RESET, the MAC's resets...
    ``core_rst`` : Out(1)
        The core's reset (domain ``sync``), released after both AXI sides are out of reset
        and the controller has calibrated. ``calib_done`` : Out(1): calibration, in ``sync``.
    ``axi`` : In(Axi4Signature(addr_width, width, 1))
        The slave port; its 1-bit IDs are zero-extended to the controller's.
    ``adr``, ``ba``, ``bg``, ``ck_t``, ``ck_c``, ``cke``, ``cs_n``, ``act_n``, ``odt``,
    ``reset_n`` : Out
        The memory's address, command and clock pins.

    The controller's user clock ``c0_ddr4_ui_clk`` is domain ``ui`` (reset-less); its
    ``c0_ddr4_ui_clk_sync_rst`` joins ``reset_request``. The converter's slave side runs on the
    clock of ``sync``.
    """

    def __init__(self, memory, width, addr_width, *, dq, dqs_t, dqs_c, dm_dbi_n):
        if not isinstance(memory, Ddr4Memory):
            raise TypeError(f"memory must be a Ddr4Memory, not {memory!r}")
        lanes = memory.data_width // 8
        for name, port, n in (("dq", dq, memory.data_width), ("dqs_t", dqs_t, lanes),
                              ("dqs_c", dqs_c, lanes), ("dm_dbi_n", dm_dbi_n, lanes)):
            if not isinstance(port, IOPort) or len(port) != n:
                raise ValueError(f"{name} must be an IOPort of {n} bits, not {port!r}")
        if addr_width > memory.axi_addr_width:
            raise ValueError(f"addr_width {addr_width} exceeds the controller's "
                             f"{memory.axi_addr_width}")
        self.memory, self.width = memory, width
        self.dq, self.dqs_t, self.dqs_c, self.dm_dbi_n = dq, dqs_t, dqs_c, dm_dbi_n
        super().__init__({
            "sys_clk_p": In(1), "sys_clk_n": In(1), "sys_reset": In(1),
            "reset_request": In(1), "core_rst": Out(1), "calib_done": Out(1),
            "axi": In(Axi4Signature(addr_width, width, 1)),
            **{name: Out(width) for name, width in PIN_WIDTHS.items()},
        })

    def elaborate(self, platform):
        m = Module()
        ddr = self.memory
        ui_clk = Signal()
        ui_clk_sync_rst = Signal()
        calib = Signal()
        m.domains.ui = cd_ui = ClockDomain("ui", reset_less=True)
        m.d.comb += cd_ui.clk.eq(ui_clk)
        ctl = m.submodules.mem_reset = MemResetControl(core_domain="sync", mem_domain="ui")
        m.d.comb += [ctl.arst.eq(self.reset_request | ui_clk_sync_rst), ctl.calib.eq(calib),
                     self.core_rst.eq(ctl.core_rst), self.calib_done.eq(ctl.calib_done)]

        # the core's AXI4 master -> slave side of the clock converter (core clock)
        axi = self.axi
        core = {}
        for ch in ("aw", "ar"):
            chan = getattr(axi, ch)
            p = chan.payload
            id_ = Signal(ddr.axi_id_width, name=f"cdc_s_{ch}id")
            addr = Signal(ddr.axi_addr_width, name=f"cdc_s_{ch}addr")
            m.d.comb += [id_.eq(p.id), addr.eq(p.addr)]
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
            axi_cdc_module(self.width, ddr.label),
            i_s_axi_aclk=ClockSignal("sync"), i_s_axi_aresetn=ctl.core_aresetn,
            i_m_axi_aclk=ui_clk, i_m_axi_aresetn=ctl.mem_aresetn,
            **core, **cdc_mem,
        )
        m.submodules.ddr4 = Instance(
            ddr4_module(self.width, ddr.label),
            # reference clock and reset: the controller's own clocking
            i_c0_sys_clk_p=self.sys_clk_p, i_c0_sys_clk_n=self.sys_clk_n,
            i_sys_rst=self.sys_reset,
            o_c0_ddr4_ui_clk=ui_clk, o_c0_ddr4_ui_clk_sync_rst=ui_clk_sync_rst,
            o_c0_init_calib_complete=calib,
            # the memory
            o_c0_ddr4_adr=self.adr, o_c0_ddr4_ba=self.ba, o_c0_ddr4_bg=self.bg,
            o_c0_ddr4_ck_t=self.ck_t, o_c0_ddr4_ck_c=self.ck_c, o_c0_ddr4_cke=self.cke,
            o_c0_ddr4_cs_n=self.cs_n, o_c0_ddr4_act_n=self.act_n, o_c0_ddr4_odt=self.odt,
            o_c0_ddr4_reset_n=self.reset_n,
            io_c0_ddr4_dq=self.dq, io_c0_ddr4_dqs_t=self.dqs_t,
            io_c0_ddr4_dqs_c=self.dqs_c, io_c0_ddr4_dm_dbi_n=self.dm_dbi_n,
            # AXI4 slave port (user clock)
            i_c0_ddr4_aresetn=ctl.mem_aresetn,
            **mig_axi,
        )
        return m

    def ip_tcl(self):
        """Tcl creating the controller and the clock converter (in ``$ipdir``)."""
        ddr, width = self.memory, self.width
        mig, cdc = ddr4_module(width, ddr.label), axi_cdc_module(width, ddr.label)
        return f"""
# {ddr.name} payload memory: memory controller with an AXI4 slave port, {ddr.summary}
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

    def notes(self, mem_bytes):
        """The DDR4 section of BUILD.md for a core using ``mem_bytes`` of the memory."""
        ddr, w = self.memory, self.width
        size = _size(ddr.size_bytes)
        used = (f"all {ddr.size_bytes} bytes ({size}) of it" if mem_bytes == ddr.size_bytes else
                f"its first {mem_bytes} bytes (addresses 0..{mem_bytes - 1:#x}) of "
                f"{ddr.size_bytes} ({size})")
        addr_bits = len(self.axi.aw.payload.addr)
        addr = (f"its {addr_bits}-bit addresses are the controller's"
                if addr_bits == ddr.axi_addr_width
                else f"its {addr_bits}-bit addresses are zero-extended to {ddr.axi_addr_width} bits")
        ui_mhz = f"{ddr.ui_clock_hz / 1e6:.0f} MHz"
        mhz = round(1e6 / ddr.time_period_ps)
        tp, ip = ddr.time_period_ps, ddr.input_clock_period_ps
        return f"""\
## Payload memory: {ddr.name}

The payloads of the work requests (kept until acknowledged, read again for retransmissions)
are in the board's {ddr.name} component memory: {used}.

* `{ddr4_module(w, ddr.label)}`: the DDR4 SDRAM memory controller (Vivado `ddr4` IP). Components
  {ddr.memory_part} ({ddr.devices}), DDR4-{2 * mhz} (`C0.DDR4_TimePeriod` {tp} ps: {mhz} MHz), reference clock
  {ddr.ref_clock} (`C0.DDR4_InputClockPeriod` {ip} ps), AXI4 slave port of {w} bits with
  {ddr.axi_addr_width}-bit addresses and {ddr.axi_id_width}-bit IDs, user clock `c0_ddr4_ui_clk`
  at {ui_mhz}. Its `sys_rst` is the MAC's reset (configuration, CPU_RESET).
* `{axi_cdc_module(w, ddr.label)}`: AXI4 clock converter (`axi_clock_converter`, asynchronous, 3
  synchronizer stages) from the core's clock to `c0_ddr4_ui_clk`. The core's 1-bit IDs are
  zero-extended to {ddr.axi_id_width} bits; {addr}.
* Resets: both AXI sides (`s_axi_aresetn` in the core's clock; `m_axi_aresetn` and the
  controller's `c0_ddr4_aresetn` in the user clock) are asserted together by CPU_RESET, the
  MAC's resets, `c0_ddr4_ui_clk_sync_rst` or calibration not complete, and each is released 64
  cycles of its own clock after the last of those has gone; the core's reset is released after
  both. The core thus waits for `c0_init_calib_complete`: LED 4 shows calibration, LED 7 the
  core's reset.

{ddr.board_interfaces}

{ddr.pin_source} Timing: the converter's slave side must meet
the core's clock, the controller and the converter's master side {ui_mhz}.
"""


def _size(n):
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"
