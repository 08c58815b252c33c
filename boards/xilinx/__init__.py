"""AMD (Xilinx) vendor IP and primitives as components: the 100G CMAC, the 10G/25G PCS/PMA with
rocegen's XGMII MAC in front, DDR4 memory behind an AXI clock converter, the JTAG-to-AXI master
of the register block, and clock input buffers.

Each component instantiates its IP (the ``Instance`` and only it) and writes the Tcl that
creates the IP (``ip_tcl()``) and its section of BUILD.md (``notes()``); a board file places the
pins and composes these parts with the core."""

from rocegen.boards.xilinx.clocking import ClockInput
from rocegen.boards.xilinx.cmac import CMAC_MODULE, Cmac, CmacPlacement
from rocegen.boards.xilinx.ddr4 import Ddr4Axi, Ddr4Memory, axi_cdc_module, ddr4_module
from rocegen.boards.xilinx.jtag_axi import JTAG_AXI_MODULE, JtagAxiLite, connect_axil
from rocegen.boards.xilinx.xxv import XXV_MODULE, XxvMac, XxvPlacement

__all__ = ["CMAC_MODULE", "XXV_MODULE", "JTAG_AXI_MODULE", "ClockInput", "Cmac", "CmacPlacement",
           "Ddr4Axi", "JtagAxiLite", "Ddr4Memory", "XxvMac", "XxvPlacement", "axi_cdc_module",
           "connect_axil", "ddr4_module"]
