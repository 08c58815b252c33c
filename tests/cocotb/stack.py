"""cocotb testbench of the network stack (StackTop): a scapy host ARPs, pings and exchanges UDP
datagrams with the endpoint, mixed with malformed frames; responses and counters are checked
against the reference model. Random idle cycles on input, random backpressure on output."""

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from rocegen.gateware.net.stack import STATS
from rocegen.sim.models.net.netstack import NetStackModel
from rocegen.sim.testing.cocotb_helpers import compare_responses, frame_bytes, pauses, read_stats
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, host_frames

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
@cocotb.test()
async def host_conversation(dut):
    width = PARAMS["width"]
    rng = random.Random(int(os.environ.get("SEED", "7")) + width)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    src.log.setLevel("WARNING")
    sink.log.setLevel("WARNING")
    src.set_pause_generator(pauses(rng, 0.3))
    sink.set_pause_generator(pauses(rng, 0.3))
    dut.stats_addr.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)

    pcap = PcapWriter(os.environ["PCAP"]) if os.environ.get("PCAP") else None
    model = NetStackModel(FPGA_MAC, FPGA_IP)
    expected, counts = [], {}
    frames = host_frames(rng)
    for f in frames:
        out, moved = model.handle_all(f)
        expected += out
        for name in ["rx_frames", *moved]:
            counts[name] = counts.get(name, 0) + 1
        if pcap:
            pcap.write(f, cocotb.utils.get_sim_time("ns"))
        await src.send(AxiStreamFrame(f, tuser=0))
    got = []
    for n in range(len(expected)):
        try:
            # a response not out within 100 us of simulated time will never come
            fr = await with_timeout(sink.recv(), 100, "us")
        except TimeoutError:
            raise AssertionError(f"only {n} of {len(expected)} responses came; counters: "
                                 f"{ {k: v for k, v in (await read_stats(dut)).items() if v} }") from None
        assert not fr.tuser, "a transmitted frame was marked for abort"
        got.append(frame_bytes(fr))
        if pcap:
            pcap.write(got[-1], cocotb.utils.get_sim_time("ns"))
    await ClockCycles(dut.clk, 200)
    assert sink.empty(), "the endpoint sent more frames than expected"
    if pcap:
        pcap.close()
    compare_responses(expected, got)
    counts["tx_frames"] = len(expected)
    want = {name: counts.get(name, 0) for name in STATS}   # zeros included
    have = await read_stats(dut)
    assert have == want, f"counters differ: got {have}, expected {want}"
