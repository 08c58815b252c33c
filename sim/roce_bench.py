"""cocotb side of the RoCE endpoint benches: the endpoint's MAC port wired to the host NIC model
(:class:`~rocegen.sim.models.rnic.Rnic`), record-stream drivers for work requests, QP control
and the traffic generator, and a completion collector.

The MAC model takes frames from ``m_axis`` one beat per cycle when ``tready`` is high. ``tready``
follows, cycle by cycle:

* an optional line-rate budget: a Xilinx CMAC at 100 Gb/s takes a frame of ``n`` bytes in the time
  of ``n + 24`` bytes on the line (FCS 4, preamble and SFD 8, inter-frame gap 12); the budget
  grows by ``line_gbps / 8 / clock`` bytes per cycle and is charged per beat;
* optional random backpressure (probability per cycle).

Every frame goes to the NIC model in strict mode; its answers (ARP replies, ACKs) go back
through ``s_axis``. Frame times are recorded in cycles, for goodput figures.
"""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rocegen.gateware.memport import mem_write_layout
from rocegen.gateware.records import pack, unpack
from rocegen.gateware.roce.layouts import COMPLETION, QPN_BASE, WORK_REQUEST, QpState
from rocegen.gateware.roce.qp_table import CONTEXT_WRITE, PSN_WRITE

__all__ = ["board_clock_mhz", "period_ps", "now_cycle", "MacModel", "RecordDriver", "RecordCollector",
           "start_clock", "open_qp", "qpn", "write_onchip"]

#: Line overhead of a frame beyond its bytes without FCS: FCS, preamble + SFD, inter-frame gap.
LINE_OVERHEAD = 4 + 8 + 12


def board_clock_mhz(width):
    """The clock a W-bit datapath runs at on the boards: the CMAC's 322.266 MHz at 512 bits,
    the 10G XGMII clock (156.25 MHz) at 64 bits, in proportion otherwise."""
    return {512: 322.265625, 256: 322.265625, 128: 322.265625, 64: 156.25}[width]


def period_ps(width):
    """The simulator's clock period: the board clock's, rounded to an even number of
    picoseconds (figures use :func:`board_clock_mhz` itself)."""
    return 2 * round(1e6 / board_clock_mhz(width) / 2)


def now_cycle(width):
    """The number of the clock edge the simulation is at (the same in every coroutine)."""
    return get_sim_time("ps") // period_ps(width)


async def start_clock(dut, width):
    cocotb.start_soon(Clock(dut.clk, period_ps(width), unit="ps").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


class MacModel:
    """The MAC and the host NIC on the far side of it (see the module documentation)."""

    def __init__(self, dut, width, nic, *, line_gbps=None, backpressure=0.0, seed=0, pcap=None):
        self.dut = dut
        self.width = width
        self.nic = nic
        self.bytes_per_cycle = None
        if line_gbps:
            self.bytes_per_cycle = line_gbps * 1e9 / 8 / (board_clock_mhz(width) * 1e6)
        self.backpressure = backpressure
        self.rng = random.Random(seed)
        self.pcap = pcap
        self.cycle = 0
        #: (first cycle, last cycle, frame bytes) of every frame the endpoint sent
        self.frames = []
        #: (start, end) of every frame's time on the MAC, in cycles: with a line rate, it starts
        #: when its first beat is taken or when the line is free, whichever is later, and ends
        #: after its line time or after its last beat, whichever is later
        self.line = []
        self.tx_beats = 0
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        cocotb.start_soon(self._run())

    def _answer(self, frame):
        if self.pcap:
            self.pcap.write(frame, cocotb.utils.get_sim_time("ns"))
        for out in self.nic.receive(frame):
            if self.pcap:
                self.pcap.write(out, cocotb.utils.get_sim_time("ns"))
            self.source.send_nowait(AxiStreamFrame(out, tuser=0))

    async def _run(self):
        dut = self.dut
        B = self.width // 8
        tvalid, tready, tdata = dut.m_axis_tvalid, dut.m_axis_tready, dut.m_axis_tdata
        tkeep, tlast, tuser = dut.m_axis_tkeep, dut.m_axis_tlast, dut.m_axis_tuser
        credit = 0.0
        ready = 0
        buf, first = bytearray(), None
        tready.value = 0
        while True:
            await RisingEdge(dut.clk)
            self.cycle = now_cycle(self.width)
            if ready and int(tvalid.value):
                keep = int(tkeep.value)
                n = bin(keep).count("1")
                word = int(tdata.value).to_bytes(B, "little")
                if first is None:
                    first = self.cycle
                buf += word[:n]
                self.tx_beats += 1
                if self.bytes_per_cycle is not None:
                    credit -= n
                if int(tlast.value):
                    if int(tuser.value):
                        raise AssertionError("the endpoint aborted a frame (tuser on tlast)")
                    frame = bytes(buf)
                    if self.bytes_per_cycle is not None:
                        credit -= LINE_OVERHEAD
                    self.frames.append((first, self.cycle, frame))
                    if self.bytes_per_cycle is not None:
                        start = max(first, self.line[-1][1] if self.line else first)
                        end = start + (len(frame) + LINE_OVERHEAD) / self.bytes_per_cycle
                        self.line.append((start, max(end, self.cycle + 1)))
                    else:
                        self.line.append((first, self.cycle + 1))
                    buf, first = bytearray(), None
                    self._answer(frame)
            if self.bytes_per_cycle is not None:
                credit = min(credit + self.bytes_per_cycle, 2 * B)
                ready = credit > 0
            else:
                ready = 1
            if ready and self.backpressure and self.rng.random() < self.backpressure:
                ready = 0
            tready.value = int(ready)


class RecordDriver:
    """Sends records on the flat record-stream input ``<prefix>_data/_valid/_ready``, with an
    optional chance of an idle cycle before each record."""

    def __init__(self, dut, prefix, layout, *, idle=0.0, seed=0):
        self.dut = dut
        self.layout = layout
        self.data = getattr(dut, f"{prefix}_data")
        self.valid = getattr(dut, f"{prefix}_valid")
        self.ready = getattr(dut, f"{prefix}_ready")
        self.idle = idle
        self.rng = random.Random(seed)
        self.valid.value = 0
        self.sent = 0

    async def send(self, fields):
        """Send one record; returns the simulation time (ps) of the clock edge that took it."""
        while self.idle and self.rng.random() < self.idle:
            await RisingEdge(self.dut.clk)
        self.data.value = pack(self.layout, fields)
        self.valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if int(self.ready.value):
                break
        self.valid.value = 0
        self.sent += 1
        return get_sim_time("ps")


class RecordCollector:
    """Collects the records of the flat record-stream output ``<prefix>_*``; ``backpressure``
    is the chance that ``ready`` is low in a cycle."""

    def __init__(self, dut, prefix, layout, *, backpressure=0.0, seed=0):
        self.dut = dut
        self.layout = layout
        self.data = getattr(dut, f"{prefix}_data")
        self.valid = getattr(dut, f"{prefix}_valid")
        self.ready = getattr(dut, f"{prefix}_ready")
        self.backpressure = backpressure
        self.rng = random.Random(seed)
        self.items = []
        self.cycles = []
        cocotb.start_soon(self._run())

    async def _run(self):
        ready = 0
        cycle = 0
        self.ready.value = 0
        while True:
            await RisingEdge(self.dut.clk)
            cycle += 1
            if ready and int(self.valid.value):
                self.items.append(unpack(self.layout, int(self.data.value)))
                self.cycles.append(cycle)
            ready = not (self.backpressure and self.rng.random() < self.backpressure)
            self.ready.value = int(ready)

    async def wait_for(self, n, *, max_cycles):
        """Wait until ``n`` records have come; fail after ``max_cycles`` cycles without them."""
        for _ in range(max_cycles):
            if len(self.items) >= n:
                return self.items[:n]
            await RisingEdge(self.dut.clk)
        raise AssertionError(f"only {len(self.items)} of {n} records after {max_cycles} cycles")


async def open_qp(ctl, psn_ctl, index, *, peer_ip, peer_qpn, rkey, base_va, pmtu, psn,
                  udp_sport=0xC000, ack_every_log2=4, state=QpState.RTS, dscp=0, ecn=0):
    """Write QP ``index`` of the endpoint's QP table through its control ports."""
    await psn_ctl.send({"qp": index, "psn": psn})
    await ctl.send({"qp": index, "context": {
        "state": state, "peer_ip": peer_ip, "peer_qpn": peer_qpn, "rkey": rkey,
        "base_va": base_va, "pmtu_log2": pmtu.bit_length() - 1, "udp_sport": udp_sport,
        "dscp": dscp, "ecn": ecn, "ack_every_log2": ack_every_log2, "timeout": 0,
        "retry_cnt": 7, "rnr_retry": 7}})


async def write_onchip(dut, width, mem_bytes, addr, data):
    """Put ``data`` into the endpoint's on-chip payload memory at byte address ``addr`` (a
    multiple of W/8) through its ``memw`` word-write port."""
    B = width // 8
    if addr % B:
        raise ValueError(f"local address {addr:#x} is not a multiple of {B}")
    layout = mem_write_layout(width, (mem_bytes // B - 1).bit_length())
    data = bytes(data) + bytes(-len(data) % B)
    dut.memw_valid.value = 1
    for k in range(len(data) // B):
        dut.memw_data.value = pack(layout, {"addr": addr // B + k, "data": int.from_bytes(
            data[k * B:(k + 1) * B], "little"), "be": (1 << B) - 1})
        while True:
            await RisingEdge(dut.clk)
            if int(dut.memw_ready.value):
                break
    dut.memw_valid.value = 0


def qpn(index):
    return QPN_BASE + index


LAYOUTS = {"wr": WORK_REQUEST, "cpl": COMPLETION, "qpctl": CONTEXT_WRITE, "qppsn": PSN_WRITE}
