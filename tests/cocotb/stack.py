"""cocotb bench of the network stack (StackTop): a scapy host ARPs, pings and exchanges UDP
datagrams with the endpoint, mixed with malformed frames; responses and counters are checked
against the reference model. Random idle cycles on input, random backpressure on output."""

import json
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocegen.gateware.net.stack import STATS
from rocegen.sim.models.netstack import NetStackModel, normalise
from rocegen.sim.pcap import PcapWriter
from rocegen.sim.scenarios import FPGA_IP, FPGA_MAC, host_frames

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
def pauses(rng, p):
    while True:
        yield int(rng.random() < p)


def frame_bytes(f):
    if f.tkeep:
        return bytes(b for b, k in zip(f.tdata, f.tkeep) if k)
    return bytes(f.tdata)


async def read_counters(dut):
    values = {}
    for k, name in enumerate(STATS):
        dut.stats_addr.value = k
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        values[name] = int(dut.stats_data.value)
    return {k: v for k, v in values.items() if v}


@cocotb.test()
async def host_conversation(dut):
    width = PARAMS["width"]
    rng = random.Random(int(os.environ.get("SEED", "7")) + width)
    cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
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
                                 f"{await read_counters(dut)}") from None
        assert not fr.tuser, "a transmitted frame was marked for abort"
        got.append(frame_bytes(fr))
        if pcap:
            pcap.write(got[-1], cocotb.utils.get_sim_time("ns"))
    await ClockCycles(dut.clk, 200)
    assert sink.empty(), "the endpoint sent more frames than expected"
    if pcap:
        pcap.close()
    # ARP replies and IP replies take different paths: compare per kind, order kept within one
    def kind(fr):
        return fr[12:14] + (fr[23:24] if fr[12:14] == b"\x08\x00" else b"")
    exp_n = [normalise(x) for x in expected]
    got_n = [normalise(x) for x in got]
    for k in {kind(x) for x in exp_n + got_n}:
        e = [x for x in exp_n if kind(x) == k]
        g = [x for x in got_n if kind(x) == k]
        assert g == e, f"responses of kind {k.hex()} differ: {len(g)} vs {len(e)} frames"
        # scapy must agree the frames are well formed
        for x in g:
            p = Ether(x)
            if p.haslayer(UDP):
                assert p[UDP].len == p[IP].len - 20 <= len(p[IP])
    counts["tx_frames"] = len(expected)
    for name in STATS:          # every counter, including the ones that must stay at zero
        n = counts.get(name, 0)
        dut.stats_addr.value = STATS.index(name)
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        assert int(dut.stats_data.value) == n, f"counter {name}: {int(dut.stats_data.value)} != {n}"
