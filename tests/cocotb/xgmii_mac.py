"""cocotb testbench of the XGMII MAC (rocegen.sim.testing.mac_tops.XgmiiLoopTop) against cocotbext-eth's
XgmiiSource / XgmiiSink and cocotbext-axi's AXI-Stream source and sink.

* receive: frames sent by XgmiiSource (deficit idle count on and off, starts forced into lane 4,
  ordered sets between frames) arrive on m_axis without FCS; damaged frames arrive flagged
  (tuser) and are counted;
* transmit: frames sent on s_axis with random pauses leave on xgmii_txd/txc and XgmiiSink
  receives them with a good FCS; tuser=1 frames end with /E/; in cut-through mode pauses make
  the MAC underrun, which the sink sees as errored frames;
* loopback: xgmii_txd/txc copied to xgmii_rxd/rxc, s_axis frames come back on m_axis.

Nothing here measures speed. The m_axis sink never pauses: the receiver has no backpressure.
"""

import json
import os
import random
import struct
import zlib

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from cocotbext.eth import XgmiiFrame, XgmiiSink, XgmiiSource
from cocotbext.eth.constants import ETH_PREAMBLE, XgmiiCtrl
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
MAX_FRAME = PARAMS.get("max_frame", 1522)
COUNTERS = ("rx_frames", "rx_fcs_errors", "rx_runts", "rx_too_long", "rx_bad_codes",
            "rx_bad_preambles", "tx_frames", "tx_underruns")


def make_rng(offset):
    return random.Random(int(os.environ.get("SEED", "1")) * 1000 + offset)


def real_frame(length, rng):
    """A frame of ``length`` octets without FCS; Ether/IP/UDP when it fits."""
    if length >= 42:
        pkt = (Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
               / IP(src="10.0.0.1", dst="10.0.0.2", id=rng.getrandbits(16))
               / UDP(sport=rng.randrange(1024, 65536), dport=4791)
               / Raw(rng.randbytes(length - 42)))
        data = bytes(pkt)
    elif length >= 14:
        data = bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=0x88B5)
                     / Raw(rng.randbytes(length - 14)))
    else:
        data = rng.randbytes(length)
    assert len(data) == length
    return data


def padded(frame):
    return frame + bytes(max(60 - len(frame), 0))


def pause_pattern(rng, p):
    while True:
        yield int(rng.random() < p)


def last_tuser(frame):
    t = frame.tuser
    return t[-1] if isinstance(t, list) else (t or 0)


class Testbench:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 6.4, unit="ns").start())
        dut.rst.value = 1
        dut.tx_cut_through.value = 0
        dut.xgmii_rxd.value = 0x0707070707070707
        dut.xgmii_rxc.value = 0xFF
        dut.s_axis_tvalid.value = 0
        dut.m_axis_tready.value = 1
        self.axis_src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.axis_sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        self.axis_src.log.setLevel("WARNING")
        self.axis_sink.log.setLevel("WARNING")

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 4)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    def counters(self):
        return {name: int(getattr(self.dut, name).value) for name in COUNTERS}

    async def recv_axis(self, n):
        out = []
        for _ in range(n):
            f = await self.axis_sink.recv()
            out.append((bytes(f.tdata), last_tuser(f)))
        return out


@cocotb.test(timeout_time=500, timeout_unit="us")
async def rx_frames_from_xgmii_source(dut):
    """Frames from XgmiiSource with DIC on, off and lane-4 starts forced, with sequence ordered
    sets between some of them, all arrive intact on m_axis."""
    tb = Testbench(dut)
    src = XgmiiSource(dut.xgmii_rxd, dut.xgmii_rxc, dut.clk, dut.rst)
    await tb.reset()
    rng = make_rng(1)
    lanes_seen = {}
    total = 0
    for mode in ("dic", "no_dic", "lane4", "ordered_sets"):
        src.enable_dic = mode != "no_dic"
        src.force_offset_start = mode == "lane4"
        lengths = list(range(14, 100)) + [rng.randrange(100, 1519) for _ in range(8)]
        if mode != "dic":
            lengths = lengths[::3]
        frames = [real_frame(n, rng) for n in lengths]
        starts = []
        for k, f in enumerate(frames):
            if mode == "ordered_sets" and k % 4 == 0:
                src.set_seq_os(0x000001)        # local fault between frames
                await ClockCycles(dut.clk, 3)
                src.set_seq_os(None)
            await src.send(XgmiiFrame.from_payload(
                f, tx_complete=lambda fr, starts=starts: starts.append(fr.start_lane)))
        got = await tb.recv_axis(len(frames))
        await src.wait()
        lanes_seen[mode] = set(starts)
        for (data, tuser), f in zip(got, frames):
            assert tuser == 0, f"frame of {len(f)} octets flagged ({mode})"
            assert data == padded(f), f"frame of {len(f)} octets damaged ({mode})"
        total += len(frames)
    assert lanes_seen["dic"] == {0, 4}
    assert lanes_seen["lane4"] == {4}
    await ClockCycles(dut.clk, 10)
    assert tb.axis_sink.empty()
    c = tb.counters()
    assert c["rx_frames"] == total
    assert all(c[k] == 0 for k in ("rx_fcs_errors", "rx_runts", "rx_too_long", "rx_bad_codes",
                                   "rx_bad_preambles"))


@cocotb.test(timeout_time=500, timeout_unit="us")
async def rx_flags_bad_frames(dut):
    """Runts, bad FCS, too long, /E/ inside and a bad SFD: flagged with tuser (or, bad SFD,
    dropped) and counted; good frames around them are intact."""
    tb = Testbench(dut)
    src = XgmiiSource(dut.xgmii_rxd, dut.xgmii_rxc, dut.clk, dut.rst)
    await tb.reset()
    rng = make_rng(2)
    good = real_frame(100, rng)
    cases = []
    body = real_frame(30, rng)
    cases.append(("runt", XgmiiFrame.from_payload(body, min_len=0), body))
    bad = bytearray(good + struct.pack("<L", zlib.crc32(good)))
    bad[rng.randrange(len(bad))] ^= 0x20
    cases.append(("fcs", XgmiiFrame.from_raw_payload(bad), bytes(bad[:-4])))
    long_frame = real_frame(MAX_FRAME + 20, rng)
    cases.append(("too_long", XgmiiFrame.from_payload(long_frame),
                  long_frame[:8 * (MAX_FRAME // 8)]))
    raw = bytearray(ETH_PREAMBLE + good + struct.pack("<L", zlib.crc32(good)))
    ctrl = [0] * len(raw)
    raw[50], ctrl[50] = XgmiiCtrl.ERROR, 1
    cases.append(("bad_code", XgmiiFrame(raw, ctrl), bytes(raw[8:50 - 4])))
    raw = bytearray(ETH_PREAMBLE + good + struct.pack("<L", zlib.crc32(good)))
    raw[7] = 0xD4
    cases.append(("bad_preamble", XgmiiFrame(raw), None))
    rng.shuffle(cases)
    for _, frame, _ in cases:
        await src.send(frame)
        await src.send(XgmiiFrame.from_payload(good))
    expected = []
    for kind, _, data in cases:
        if kind != "bad_preamble":
            expected.append((data, 1))
        expected.append((good, 0))
    got = await tb.recv_axis(len(expected))
    assert got == expected
    await src.wait()
    await ClockCycles(dut.clk, 10)
    assert tb.axis_sink.empty()
    c = tb.counters()
    assert c["rx_frames"] == len(expected)
    assert (c["rx_runts"], c["rx_fcs_errors"], c["rx_too_long"], c["rx_bad_codes"],
            c["rx_bad_preambles"]) == (1, 1, 1, 1, 1)


async def send_axis(tb, frames):
    for data, err in frames:
        await tb.axis_src.send(AxiStreamFrame(data, tuser=int(err)))


def check_sunk(rx, data, err):
    """An XgmiiFrame received by XgmiiSink against the frame sent on s_axis."""
    assert rx.start_lane == 0
    if err:
        # frame, inverted FCS, then /E/ where /T/ would be
        assert rx.ctrl is not None and rx.ctrl[-1] == 1 and rx.data[-1] == XgmiiCtrl.ERROR
        assert not any(rx.ctrl[:-1])
        assert bytes(rx.data[8:-5]) == padded(data)
        assert not rx.check_fcs()
    else:
        assert rx.ctrl is None, "control character inside a good frame"
        assert bytes(rx.get_payload()) == padded(data)
        assert rx.check_fcs()


@cocotb.test(timeout_time=500, timeout_unit="us")
async def tx_frames_to_xgmii_sink(dut):
    """Frames on s_axis with random pauses (store-and-forward FIFO) leave on XGMII with a good
    FCS, lane-0 starts and at least 12 octets between them; tuser=1 frames end with /E/."""
    tb = Testbench(dut)
    sink = XgmiiSink(dut.xgmii_txd, dut.xgmii_txc, dut.clk, dut.rst)
    await tb.reset()
    rng = make_rng(3)
    tb.axis_src.set_pause_generator(pause_pattern(rng, 0.3))
    frames = [(real_frame(n, rng), rng.random() < 0.1)
              for n in list(range(1, 90)) + [rng.randrange(90, 1519) for _ in range(10)]]
    await send_axis(tb, frames)
    prev_end = None
    for data, err in frames:
        rx = await sink.recv()
        check_sunk(rx, data, err)
        if prev_end is not None:
            # octets from /T/ (included) to /S/: 0.8 ns each at 6.4 ns per 8-octet word
            gap_octets = round((rx.sim_time_start - prev_end) / 800)
            assert gap_octets >= 12, "inter-frame gap below 12 octets"
        prev_end = rx.sim_time_end
    await ClockCycles(dut.clk, 20)
    assert sink.empty()
    c = tb.counters()
    assert c["tx_frames"] == len(frames)
    assert c["tx_underruns"] == 0


@cocotb.test(timeout_time=500, timeout_unit="us")
async def tx_cut_through_underruns(dut):
    """Cut-through FIFO and a pausing source: frames that starve the MAC are cut with /E/ and
    counted as underruns, the others are intact; with pauses off every frame is intact."""
    tb = Testbench(dut)
    sink = XgmiiSink(dut.xgmii_txd, dut.xgmii_txc, dut.clk, dut.rst)
    dut.tx_cut_through.value = 1
    await tb.reset()
    rng = make_rng(4)
    tb.axis_src.set_pause_generator(pause_pattern(rng, 0.04))
    frames = [real_frame(rng.randrange(60, 250), rng) for _ in range(40)]
    await send_axis(tb, [(f, False) for f in frames])
    cut = 0
    for f in frames:
        rx = await sink.recv()
        assert rx.start_lane == 0
        if rx.ctrl is None:
            assert bytes(rx.get_payload()) == f and rx.check_fcs()
        else:
            # preamble, a prefix of the frame (whole words), then /E/
            cut += 1
            assert rx.ctrl[-1] == 1 and rx.data[-1] == XgmiiCtrl.ERROR
            part = bytes(rx.data[8:-1])
            assert 0 < len(part) < len(f) and len(part) % 8 == 0 and f.startswith(part)
    await tb.axis_src.wait()
    await ClockCycles(dut.clk, 20)
    c = tb.counters()
    assert c["tx_underruns"] == cut
    assert 0 < cut < len(frames)
    assert c["tx_frames"] == len(frames)
    tb.axis_src.set_pause_generator(None)
    frames = [real_frame(rng.randrange(60, 600), rng) for _ in range(10)]
    await send_axis(tb, [(f, False) for f in frames])
    for f in frames:
        rx = await sink.recv()
        check_sunk(rx, f, False)
    assert tb.counters()["tx_underruns"] == cut


@cocotb.test(timeout_time=500, timeout_unit="us")
async def loopback(dut):
    """xgmii_txd/txc wired back to xgmii_rxd/rxc: s_axis frames (paused at random) come back on
    m_axis, padded to 60 octets; tuser=1 frames come back flagged and counted as bad code."""
    tb = Testbench(dut)
    await tb.reset()

    async def wire():
        while True:
            await RisingEdge(dut.clk)
            dut.xgmii_rxd.value = dut.xgmii_txd.value
            dut.xgmii_rxc.value = dut.xgmii_txc.value

    cocotb.start_soon(wire())
    rng = make_rng(5)
    tb.axis_src.set_pause_generator(pause_pattern(rng, 0.3))
    frames = [(real_frame(rng.randrange(14, 1519), rng), rng.random() < 0.2) for _ in range(40)]
    await send_axis(tb, frames)
    got = await tb.recv_axis(len(frames))
    assert got == [(padded(f), int(e)) for f, e in frames]
    await ClockCycles(dut.clk, 20)
    c = tb.counters()
    n_err = sum(e for _, e in frames)
    assert (c["rx_frames"], c["rx_bad_codes"], c["tx_frames"]) == (len(frames), n_err, len(frames))
    assert c["rx_fcs_errors"] == c["rx_runts"] == c["tx_underruns"] == 0
