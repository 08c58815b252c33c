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
from rocegen.gateware.net.stack import STATS
from rocegen.sim.models.netstack import NetStackModel, normalise
from rocegen.sim.pcap import PcapWriter
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"


def pauses(rng, p):
    while True:
        yield int(rng.random() < p)


def frame_bytes(f):
    if f.tkeep:
        return bytes(b for b, k in zip(f.tdata, f.tkeep) if k)
    return bytes(f.tdata)


def host_frames(rng):
    """The mix of frames the host sends: good and bad."""
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    frames = [Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP)]
    for n in [0, 1, 7, 8, 56, 63, 64, 65, 200, 1000, 1472]:
        frames.append(eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(id=0x1234, seq=n)
                      / Raw(rng.randbytes(n)))
    for n in list(range(0, 70)) + [500, 1472]:
        frames.append(eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=40000 + n, dport=7)
                      / Raw(rng.randbytes(n)))
    # malformed or not for us
    bad = [
        Ether(src=HOST_MAC, dst="02:00:00:00:00:55") / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7),
        eth / IP(src=HOST_IP, dst="10.0.0.9") / UDP(dport=7) / Raw(b"x"),
        eth / IP(src=HOST_IP, dst=FPGA_IP, chksum=0x1234) / UDP(dport=7) / Raw(b"x"),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7, chksum=0x4321) / Raw(b"hello"),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=999) / Raw(b"nobody"),
        eth / IP(src=HOST_IP, dst=FPGA_IP, flags="MF") / UDP(dport=7) / Raw(b"frag"),
        eth / IP(src=HOST_IP, dst=FPGA_IP, proto=6) / Raw(b"tcp?" * 5),
        eth / IP(src=HOST_IP, dst=FPGA_IP, options=b"\x01\x01\x01\x01") / UDP(dport=7),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(type=13) / Raw(b"ts"),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(chksum=0xBEEF) / Raw(b"badping"),
        Ether(src=HOST_MAC, dst=FPGA_MAC, type=0x86DD) / Raw(bytes(60)),
        eth / ARP(op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP, hwtype=6),
    ]
    frames += bad
    raw = [bytes(f) for f in frames]
    # truncations of a good datagram: IP says more than the frame holds
    good = bytes(eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(dport=7) / Raw(bytes(100)))
    raw += [good[:n] for n in (10, 20, 40, 80)]
    first, rest = raw[0], raw[1:]
    rng.shuffle(rest)
    return [first] + rest


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
        out, counter = model.handle(f)
        expected += out
        counts["rx_frames"] = counts.get("rx_frames", 0) + 1
        if counter:
            counts[counter] = counts.get(counter, 0) + 1
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
                assert p[UDP].len == len(p[UDP])
    for name, n in counts.items():
        dut.stats_addr.value = STATS.index(name)
        await ClockCycles(dut.clk, 2)
        await RisingEdge(dut.clk)
        assert int(dut.stats_data.value) == n, f"counter {name}: {int(dut.stats_data.value)} != {n}"
