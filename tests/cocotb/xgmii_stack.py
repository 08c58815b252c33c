"""cocotb testbench of the 10G/25G endpoint (rocegen.gateware.xgmii_top.XgmiiStackTop): the host
conversation of tests/cocotb/stack.py -- a scapy host ARPs, pings and exchanges UDP datagrams
with the endpoint, mixed with malformed frames -- but on the 64-bit XGMII, through cocotbext-eth's
XgmiiSource (deficit idle count on, so frames start in lane 0 and lane 4, at the minimum gap) and
XgmiiSink. Responses and counters are checked against the reference model.

The host also sends frames that its MAC would never send: requests that the endpoint would answer
were they intact, but with a corrupted FCS (inverted, one octet changed, or a data bit flipped
after the FCS was computed) or sent unpadded below 64 octets (runts). The MAC flags them, the
stack drops them: no response, counted in the stack's ``rx_bad_frame`` (the model's verdict for a
frame the MAC rejects, ``fcs_ok=False``), again by the layer that drops the frame it passed on
marked damaged, and by kind in the MAC counters (``mac_rx_fcs_errors``, ``mac_rx_runts``).

Every wait on the design is bounded in simulated time. ``PCAP=<file>`` writes both directions of
the conversation to a pcap file (frames without FCS, simulated-time stamps).
"""

import os
import random
import struct
import zlib

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.eth import XgmiiFrame, XgmiiSink, XgmiiSource
from scapy.layers.inet import ICMP, IP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from rocegen.gateware.xgmii_top import MAC_COUNTERS
from rocegen.sim.models.net.netstack import NetStackModel
from rocegen.sim.testing.cocotb_helpers import compare_responses, read_stats
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC, host_frames

CLOCK_NS = 6.4                   # 156.25 MHz: 10GBASE-R
IDLE_WORD = 0x0707070707070707
#: A response not on the line within this much simulated time will never come.
RESPONSE_TIMEOUT_US = 100


def padded(frame):
    return bytes(frame) + bytes(max(60 - len(frame), 0))


def fcs(frame):
    return struct.pack("<L", zlib.crc32(frame))


def damaged_frames(rng):
    """Frames the endpoint would answer if they were intact, each damaged at the MAC level.

    Returns ``[(kind, frame seen by the stack, XgmiiFrame to send)]``, ``kind`` being the MAC
    counter that must count it."""
    eth = Ether(src=HOST_MAC, dst=FPGA_MAC)
    requests = [
        Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
            op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(id=0x4321, seq=1) / Raw(rng.randbytes(40)),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=50000, dport=7) / Raw(rng.randbytes(3)),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=50001, dport=7) / Raw(rng.randbytes(300)),
        eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=50002, dport=7)
        / Raw(rng.randbytes(1472)),
    ]
    out = []
    for k, req in enumerate(requests):
        frame = padded(bytes(req))
        good = frame + fcs(frame)
        how = k % 3
        if how == 0:                                    # FCS inverted
            raw = frame + bytes(b ^ 0xFF for b in fcs(frame))
        elif how == 1:                                  # one FCS octet changed
            raw = bytearray(good)
            raw[len(frame) + rng.randrange(4)] ^= 1 << rng.randrange(8)
        else:                                           # a data bit flipped in transit
            raw = bytearray(good)
            raw[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
        raw = bytes(raw)
        assert raw[-4:] != fcs(raw[:-4])
        out.append(("mac_rx_fcs_errors", raw[:-4], XgmiiFrame.from_raw_payload(raw)))
    # runts: a well-formed ping and UDP echo request sent without padding (46 and 47 octets
    # with their correct FCS)
    for req in (eth / IP(src=HOST_IP, dst=FPGA_IP) / ICMP(id=0x4321, seq=2),
                eth / IP(src=HOST_IP, dst=FPGA_IP) / UDP(sport=50003, dport=7) / Raw(b"r")):
        frame = bytes(req)
        assert len(frame) + 4 < 64
        out.append(("mac_rx_runts", frame, XgmiiFrame.from_payload(frame, min_len=0)))
    return out


def mac_counters(dut):
    return {name: int(getattr(dut, name).value) for name in MAC_COUNTERS}


def nonzero(counters):
    return {k: v for k, v in counters.items() if v}


@cocotb.test()
async def host_conversation(dut):
    rng = random.Random(int(os.environ.get("SEED", "7")))
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    dut.stats_addr.value = 0
    dut.xgmii_rxd.value = IDLE_WORD
    dut.xgmii_rxc.value = 0xFF
    src = XgmiiSource(dut.xgmii_rxd, dut.xgmii_rxc, dut.clk, dut.rst)
    sink = XgmiiSink(dut.xgmii_txd, dut.xgmii_txc, dut.clk, dut.rst)
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)
    assert nonzero(mac_counters(dut)) == {}, "MAC counters not zero after reset"

    pcap = PcapWriter(os.environ["PCAP"]) if os.environ.get("PCAP") else None

    def sent(frame):
        # tx_complete callback of XgmiiSource: the frame has just left the host
        if pcap:
            pcap.write(frame.get_payload(), get_sim_time("ns"))

    # the host's frames as its MAC sends them (padded to 60 octets, good FCS), the damaged
    # ones at random places after the first (the ARP request that lets the endpoint answer)
    sends = [(None, padded(f), XgmiiFrame.from_payload(f)) for f in host_frames(rng)]
    damaged = damaged_frames(rng)
    for item in damaged:
        sends.insert(rng.randrange(1, len(sends) + 1), item)

    model = NetStackModel(FPGA_MAC, FPGA_IP)
    expected = []
    stats = {"rx_frames": len(sends)}
    macs = {"mac_rx_frames": len(sends)}
    seen_lanes = set()
    for mac_kind, frame, xf in sends:
        out, moved = model.handle_all(frame, fcs_ok=mac_kind is None)
        expected += out
        for name in moved:
            stats[name] = stats.get(name, 0) + 1
        if mac_kind:
            macs[mac_kind] = macs.get(mac_kind, 0) + 1
            assert moved[0] == "rx_bad_frame"
        xf.tx_complete = lambda fr: (seen_lanes.add(fr.start_lane), sent(fr))
        await src.send(xf)
    assert stats.get("rx_bad_frame", 0) == len(damaged)

    got = []
    for n in range(len(expected)):
        try:
            rx = await with_timeout(sink.recv(), RESPONSE_TIMEOUT_US, "us")
        except TimeoutError:
            raise AssertionError(
                f"only {n} of {len(expected)} responses came; stack counters: "
                f"{nonzero(await read_stats(dut))}; MAC counters: {nonzero(mac_counters(dut))}"
            ) from None
        assert rx.start_lane == 0, "a transmitted frame did not start in lane 0"
        assert rx.ctrl is None, f"control character inside transmitted frame {n} (/E/?)"
        assert rx.check_fcs(), f"transmitted frame {n} has a bad FCS"
        payload = bytes(rx.get_payload())
        assert len(payload) >= 60, f"transmitted frame {n} is a runt ({len(payload)} octets)"
        got.append(payload)
        if pcap:
            pcap.write(payload, get_sim_time("ns"))
    try:
        await with_timeout(src.wait(), RESPONSE_TIMEOUT_US, "us")
    except TimeoutError:
        raise AssertionError("the XGMII source did not finish sending") from None
    await ClockCycles(dut.clk, 200)
    assert sink.empty(), f"the endpoint sent {sink.count()} frames more than expected"
    if pcap:
        pcap.close()
    assert seen_lanes == {0, 4}, f"frames started only in lanes {seen_lanes}"

    compare_responses(expected, got)

    # every counter of the stack: those the model names and their side effects, plus one
    # transmitted frame per response and one ARP reply per ARP response; nothing else may move
    arp_replies = sum(1 for x in expected if x[12:14] == b"\x08\x06")
    want = dict(stats, tx_frames=len(expected))
    if arp_replies:
        want["arp_tx_reply"] = arp_replies
    have = nonzero(await read_stats(dut))
    assert have == want, f"stack counters differ: got {have}, expected {want}"

    macs["mac_tx_frames"] = len(expected)
    have = nonzero(mac_counters(dut))
    assert have == macs, f"MAC counters differ: got {have}, expected {macs}"
