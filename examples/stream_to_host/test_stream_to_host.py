"""cocotb test of the example design (stream_to_host.sv) against the host NIC model.

It uses only what the generated files describe: the port table (MAC port, data-source
handshake), the register accessor ``rocegen_endpoint_regs.py`` (status through AXI4-Lite), and
the connection manager's datagram format, through which the host opens a QP as a host agent
would. The host registers a memory region, opens QP 0, the design streams ``MSG_COUNT``
messages of ``MSG_BYTES`` bytes into it; the test checks every byte of the host's memory, the
counters read through AXI4-Lite, and reports the goodput on the MAC.
"""

import importlib.util
import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import (
    AxiLiteBus,
    AxiLiteMaster,
    AxiResp,
    AxiStreamBus,
    AxiStreamFrame,
    AxiStreamSink,
    AxiStreamSource,
)

from rocegen.sim.models.cm.cm import ACK_ACK, REQ_OPEN_QP, pmtu_code
from rocegen.sim.models.cm.cm import request as cm_request
from rocegen.sim.models.cm.cm import unpack as cm_unpack
from rocegen.sim.models.rnic import Rnic

W = int(os.environ["EXAMPLE_WIDTH"])
MSG_BYTES = int(os.environ["MSG_BYTES"])
MSG_COUNT = int(os.environ["MSG_COUNT"])
CLOCK_MHZ = float(os.environ["CLOCK_MHZ"])
PMTU = int(os.environ.get("PMTU", "4096"))
FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"
BASE, RKEY, HOST_QPN = 0x7000_0000, 0x1234, 0x42


def load_accessor():
    spec = importlib.util.spec_from_file_location("core_regs", os.environ["REGS_PY"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class AxilBus:
    """The accessor's bus on cocotbext-axi's AXI4-Lite master: every access must answer OKAY."""

    def __init__(self, master):
        self.master = master

    async def read(self, offset):
        r = await self.master.read(offset, 4)
        assert r.resp == AxiResp.OKAY, f"read of {offset:#x}: {r.resp}"
        return int.from_bytes(r.data, "little")

    async def write(self, offset, value):
        r = await self.master.write(offset, value.to_bytes(4, "little"))
        assert r.resp == AxiResp.OKAY, f"write of {offset:#x}: {r.resp}"


def ip_int(text):
    return int.from_bytes(bytes(int(p) for p in text.split(".")), "big")


@cocotb.test()
async def stream_into_host_memory(dut):
    period_ps = 2 * round(1e6 / CLOCK_MHZ / 2)    # figures are in cycles of CLOCK_MHZ
    cocotb.start_soon(Clock(dut.clk, period_ps, unit="ps").start())
    for name in ("start", "msg_count", "msg_bytes"):
        getattr(dut, name).value = 0
    regs = load_accessor().Registers(AxilBus(AxiLiteMaster(
        AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)))
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    for log in (regs.bus.master.write_if.log, regs.bus.master.read_if.log, source.log, sink.log):
        log.setLevel("WARNING")
    nic = Rnic(HOST_MAC, HOST_IP, strict=True, udp_ports=(50001,))
    nic.register_mr(BASE, MSG_BYTES * MSG_COUNT, RKEY)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 10)
    dut.rst.value = 0

    cycle = 0
    frames = []                                 # (first beat cycle, last beat cycle, bytes)

    async def count():
        nonlocal cycle
        while True:
            await RisingEdge(dut.clk)
            cycle += 1

    async def beats():
        """The cycle of each frame's first beat (frames leave in order)."""
        inside = False
        while True:
            await RisingEdge(dut.clk)
            if dut.m_axis_tvalid.value and dut.m_axis_tready.value:
                if not inside:
                    starts.append(cycle)
                inside = not dut.m_axis_tlast.value

    async def mac():
        while True:
            frame = bytes((await sink.recv()).tdata)
            frames.append((starts.pop(0), cycle, frame))
            for out in nic.receive(frame):
                source.send_nowait(AxiStreamFrame(out, tuser=0))

    starts = []
    cocotb.start_soon(count())
    cocotb.start_soon(beats())
    cocotb.start_soon(mac())

    assert await regs.read("ID") == int.from_bytes(b"RoCE", "big")
    assert await regs.read("WIDTH") == W
    assert MSG_BYTES <= await regs.read("MAX_MESSAGE")

    # the host opens a QP through the connection manager (UDP 17185, 64-byte datagrams)
    frame = nic.udp_frame(FPGA_IP, 50000, await regs.read("CM_PORT"), cm_request(
        REQ_OPEN_QP, loc_qpn=HOST_QPN, loc_psn=0x10000, loc_rkey=RKEY, loc_vaddr=BASE,
        loc_ip=ip_int(HOST_IP), listening_port=50001, pmtu_code=pmtu_code(PMTU)),
        dst_mac=FPGA_MAC)
    source.send_nowait(AxiStreamFrame(frame, tuser=0))
    while not nic.udp_rx:
        await ClockCycles(dut.clk, 100)
    reply = cm_unpack(nic.udp_rx[0][3])
    assert reply["ack_type"] == ACK_ACK and reply["loc_qpn"] == 256
    nic.create_qp(HOST_QPN, peer_qpn=256, peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                  epsn=reply["loc_psn"], pmtu=PMTU)
    assert await regs.qp_open() == {0}
    qp = await regs.qp(0)
    assert qp["state_name"] == "RTS" and qp["peer_qpn"] == HOST_QPN and qp["rkey"] == RKEY
    assert qp["base_va"] == BASE and qp["pmtu_log2"] == PMTU.bit_length() - 1

    # the design streams its messages; status through AXI4-Lite while it runs
    dut.msg_bytes.value = MSG_BYTES
    dut.msg_count.value = MSG_COUNT
    dut.start.value = 1
    first_frame = len(frames)
    polls = 0
    while await regs.counter("roce_cpl_ok") < MSG_COUNT:
        polls += 1
        assert polls < 100_000, "the messages never completed"
        await ClockCycles(dut.clk, 200)
    assert int(dut.done.value) == 1 and int(dut.sent.value) == MSG_COUNT

    for k in range(MSG_COUNT):
        want = bytes((k + n) % 256 for n in range(MSG_BYTES))
        got = nic.read_mem(BASE + k * MSG_BYTES, MSG_BYTES)
        assert got == want, f"message {k} differs in the host's memory"
    counters = await regs.counters()
    data = [f for f in frames[first_frame:] if len(f[2]) > 100]
    assert counters["roce_tx_packets"] == len(data) == MSG_COUNT * -(-MSG_BYTES // PMTU)
    assert counters["roce_cpl_error"] == 0 and counters["stream_drop_too_long"] == 0
    assert counters["roce_rx_acks"] == nic.counters["ack_tx"]
    assert (await regs.qp(0))["psn"] == (reply["loc_psn"] + len(data)) % (1 << 24)
    assert not nic.log

    cycles = data[-1][1] + 1 - data[0][0]
    gbps = MSG_BYTES * MSG_COUNT * 8 / (cycles / CLOCK_MHZ * 1e-6) / 1e9
    result = {"width": W, "clock_mhz": CLOCK_MHZ, "msg_bytes": MSG_BYTES, "messages": MSG_COUNT,
              "pmtu": PMTU, "data_frames": len(data), "cycles": cycles, "goodput_gbps": gbps,
              "bytes_per_cycle": MSG_BYTES * MSG_COUNT / cycles}
    dut._log.info("goodput %.2f Gb/s (%d bytes in %d cycles at %.3f MHz)", gbps,
                  MSG_BYTES * MSG_COUNT, cycles, CLOCK_MHZ)
    if os.environ.get("EXAMPLE_RESULTS"):
        with open(os.environ["EXAMPLE_RESULTS"], "w") as f:
            json.dump(result, f, indent=1)
