"""Register access from Vivado's hardware manager: the JTAG-to-AXI Master IP (``jtag_axi``,
AXI4-Lite protocol) as an AXI4-Lite master in the core's clock domain, with the Tcl that creates
it and the BUILD.md section that tells how to read a register through it."""

from amaranth.hdl import ClockSignal, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.endpoint.regmap import ADDR_WIDTH, REGISTERS, windows_for
from rocegen.gateware.roce.endpoint.regs import axil_members

__all__ = ["JTAG_AXI_MODULE", "JtagAxiLite", "master_members", "connect_axil"]

#: Module name of the JTAG-to-AXI Master IP in the build.
JTAG_AXI_MODULE = "jtag_axi_lite"
#: The IP's address width (its ``M_AXI_ADDR_WIDTH``); the register block decodes the low
#: :data:`~rocegen.gateware.roce.endpoint.regmap.ADDR_WIDTH` bits.
IP_ADDR_WIDTH = 32


def master_members(prefix, addr_width=ADDR_WIDTH):
    """Members of an AXI4-Lite master port ``<prefix>_*``: those of
    :func:`~rocegen.gateware.roce.endpoint.regs.axil_members` with every direction flipped."""
    return {name: (Out if m.flow == In else In)(m.shape)
            for name, m in axil_members(prefix, addr_width).items()}


def connect_axil(m, master, slave):
    """Connect the ``m_axil_*`` port of ``master`` to the ``s_axil_*`` port of ``slave``
    (same address width) in module ``m``."""
    for name, member in master.signature.members.items():
        if not name.startswith("m_axil_"):
            continue
        other = getattr(slave, "s_axil_" + name[len("m_axil_"):])
        if member.flow == Out:
            m.d.comb += other.eq(getattr(master, name))
        else:
            m.d.comb += getattr(master, name).eq(other)


class JtagAxiLite(wiring.Component):
    """The JTAG-to-AXI Master IP configured for AXI4-Lite, 32-bit data, as the master of the
    core's register block.

    Ports
    -----
    ``rst`` : In(1)
        Reset of the core's domain ``sync`` (active high; the IP's ``aresetn`` is its inverse).
    ``m_axil_*`` : the AXI4-Lite master, :data:`~rocegen.gateware.roce.endpoint.regmap.ADDR_WIDTH`-bit
        byte addresses (the low bits of the IP's 32-bit addresses; the register block is the
        only slave, so the high bits are not decoded), 32-bit data.

    The IP runs on the clock of domain ``sync`` (``aclk``); Vivado's hardware manager drives it
    over the FPGA's JTAG port through the debug hub it inserts. Transactions are issued one at a
    time from Tcl (``create_hw_axi_txn``, ``run_hw_axi``).
    """

    def __init__(self, addr_width=ADDR_WIDTH):
        if not isinstance(addr_width, int) or not 2 < addr_width <= IP_ADDR_WIDTH:
            raise ValueError(f"addr_width must be 3..{IP_ADDR_WIDTH}, not {addr_width!r}")
        self.addr_width = addr_width
        super().__init__({"rst": In(1), **master_members("m_axil", addr_width)})

    def elaborate(self, platform):
        m = Module()
        awaddr = Signal(IP_ADDR_WIDTH, name="jtag_axi_awaddr")
        araddr = Signal(IP_ADDR_WIDTH, name="jtag_axi_araddr")
        aresetn = Signal(name="jtag_axi_aresetn")
        m.d.comb += [self.m_axil_awaddr.eq(awaddr), self.m_axil_araddr.eq(araddr),
                     aresetn.eq(~self.rst)]
        ports = {}
        for name, member in self.signature.members.items():
            if not name.startswith("m_axil_") or name in ("m_axil_awaddr", "m_axil_araddr"):
                continue
            ip_port = "m_axi_" + name[len("m_axil_"):]
            ports[("o_" if member.flow == Out else "i_") + ip_port] = getattr(self, name)
        m.submodules.jtag_axi = Instance(
            JTAG_AXI_MODULE, i_aclk=ClockSignal("sync"), i_aresetn=aresetn,
            o_m_axi_awaddr=awaddr, o_m_axi_araddr=araddr, **ports)
        return m

    def ip_tcl(self):
        """Tcl creating the IP (in ``$ipdir``)."""
        return f"""
# register access over JTAG: JTAG-to-AXI Master, AXI4-Lite (PROTOCOL 2), 32-bit data
create_ip -name jtag_axi -vendor xilinx.com -library ip -module_name {JTAG_AXI_MODULE} -dir $ipdir
set_property -dict [list \\
    CONFIG.PROTOCOL {{2}} \\
    CONFIG.M_AXI_ADDR_WIDTH {{{IP_ADDR_WIDTH}}} \\
    CONFIG.M_AXI_DATA_WIDTH {{32}} \\
] [get_ips {JTAG_AXI_MODULE}]
set_property generate_synth_checkpoint false [get_files [get_property IP_FILE [get_ips {JTAG_AXI_MODULE}]]]
generate_target all [get_ips {JTAG_AXI_MODULE}]
"""

    @staticmethod
    def notes(config, *, registers_md, c_header, python):
        """The BUILD.md section: how to read the registers from the hardware manager.
        ``config``: the endpoint's configuration (for the addresses of the example);
        ``registers_md``, ``c_header``, ``python``: names of the register map files."""
        offsets = {r.name: r.offset for r in REGISTERS}
        windows = {w.name: w for w, _ in windows_for(config)}
        counter = windows["COUNTER"]
        first = STATS[0].upper()
        return f"""\
## Registers over JTAG

The core's AXI4-Lite control and status registers (map in `{registers_md}`; the same
addresses as C macros in `{c_header}` and as a Python accessor in `{python}`) are reached from
Vivado's hardware manager through the JTAG-to-AXI Master IP (`{JTAG_AXI_MODULE}`, `jtag_axi` in
AXI4-Lite mode, clocked by the core's clock; it answers only while the core's clock runs and the
core is out of reset). The register block decodes the low {ADDR_WIDTH} bits of the IP's 32-bit
addresses. Reads go to the core's read ports only and never change traffic; the status LEDs'
counter watcher pauses while a read uses the statistics port. After programming the board
(with the `.ltx` probes file if Vivado wrote one):

```
open_hw_manager
connect_hw_server
open_hw_target
refresh_hw_device [current_hw_device]
set axi [get_hw_axis hw_axi_1]
# ID at {offsets['ID']:#06x}: reads 0x526f4345 ("RoCE")
create_hw_axi_txn -force rd_id $axi -type read -address {offsets['ID']:08x} -len 1
run_hw_axi rd_id
puts [get_property DATA [get_hw_axi_txns rd_id]]
# counter {first} (the first of the COUNTER window at {counter.base:#06x}, one word per counter)
create_hw_axi_txn -force rd_cnt $axi -type read -address {counter.base:08x} -len 1
run_hw_axi rd_cnt
puts [get_property DATA [get_hw_axi_txns rd_cnt]]
# write IP (our IPv4 address, {offsets['IP']:#06x}): 10.0.0.9
create_hw_axi_txn -force wr_ip $axi -type write -address {offsets['IP']:08x} -len 1 -data 0a000009
run_hw_axi wr_ip
```

`DATA` is the 32-bit word in hexadecimal. A read of an unmapped address answers SLVERR (which
`run_hw_axi` reports) and counts in `REG_BAD_READS`.
"""
