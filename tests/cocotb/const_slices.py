"""cocotb testbench: constant slices of a signal must read as their constants under Verilator."""

import cocotb
from cocotb.triggers import Timer


@cocotb.test()
async def constant_slices_are_driven(dut):
    dut.c.value = 0x11
    dut.y.value = 0x22
    dut.x.value = 1
    await Timer(1, "ns")
    assert int(dut.o.value) == 0x5A2211
    dut.x.value = 0
    await Timer(1, "ns")
    assert int(dut.o.value) == 0x5A0011
