"""cocotb testbench behind ``rocegen sim ping``: a scapy host on the endpoint's Ethernet port ARPs
for it, pings it and exchanges UDP datagrams with its echo service. Every frame crossing the
port goes to a pcap file; a readable account goes to the file named by ``DEMO_REPORT``."""

import json
import os

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from rocegen.gateware.net.stack import STATS
from rocegen.sim.testing.cocotb_helpers import frame_bytes
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
CLOCK_NS = {64: 6.4, 128: 3.2, 256: 3.2, 512: 3.104}      # 156.25 MHz XGMII, 322 MHz CMAC


@cocotb.test()
async def demo(dut):
    width = PARAMS["width"]
    period = CLOCK_NS[width]
    cocotb.start_soon(Clock(dut.clk, period, unit="ns").start())
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
    src.log.setLevel("WARNING")
    sink.log.setLevel("WARNING")
    dut.stats_addr.value = 0
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    pcap = PcapWriter(os.environ["PCAP"])
    lines = []

    def say(text):
        lines.append(text)

    async def exchange(pkt, what):
        raw = bytes(pkt)
        t0 = get_sim_time("ns")
        pcap.write(raw, t0)
        await src.send(AxiStreamFrame(raw, tuser=0))
        got = await with_timeout(sink.recv(), 200, "us")
        t1 = get_sim_time("ns")
        reply = frame_bytes(got)
        pcap.write(reply, t1)
        say(f"{t0:10.1f} ns  host -> fpga  {what}")
        say(f"{t1:10.1f} ns  fpga -> host  {Ether(reply).summary()}  "
            f"(request start to reply end: {(t1 - t0) / period:.0f} cycles)")
        return Ether(reply)

    say(f"rocegen endpoint, {width}-bit datapath at {1000 / period:.2f} MHz, "
        f"MAC {FPGA_MAC}, IP {FPGA_IP}; host {HOST_MAC} {HOST_IP}")
    r = await exchange(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP), f"ARP who-has {FPGA_IP}")
    assert r[ARP].op == 2 and r[ARP].hwsrc == FPGA_MAC, "no ARP reply"
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    for seq, size in enumerate((56, 1000, 1472)):
        payload = bytes((seq + i) & 0xFF for i in range(size))
        r = await exchange(eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(id=0x4242, seq=seq)
                           / Raw(payload), f"ping seq {seq}, {size} bytes")
        assert r[ICMP].type == 0 and bytes(r[Raw].load)[:size] == payload, "bad echo reply"
    for n, text in enumerate((b"hello fpga", b"x" * 300, b"")):
        r = await exchange(eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=5000 + n, dport=7)
                           / Raw(text), f"UDP {len(text)} bytes to port 7")
        assert r[UDP].dport == 5000 + n and bytes(r[UDP].payload)[:len(text)] == text
    await ClockCycles(dut.clk, 20)
    counters = {}
    for k, name in enumerate(STATS):
        dut.stats_addr.value = k
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        if int(dut.stats_data.value):
            counters[name] = int(dut.stats_data.value)
    say("counters: " + ", ".join(f"{k}={v}" for k, v in counters.items()))
    pcap.close()
    with open(os.environ["DEMO_REPORT"], "w") as f:
        f.write("\n".join(lines) + "\n")
