"""The core with its AXI4-Lite control and status slave (``CoreTop(axil=True)``), driven by
cocotbext-axi's AxiLiteMaster, its MAC port wired to the host NIC model: identity and
configuration registers, address registers, bad accesses, the QP table read back after the
host opened a QP, counters compared with what the NIC model saw, reads during traffic that
change nothing, and malformed work requests refused with a completion."""

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

from rocegen.gateware.lib.records import pack, unpack
from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, CplStatus, WrOpcode
from rocegen.sim.models.cm.cm import ACK_ACK, REQ_OPEN_QP, pmtu_code
from rocegen.sim.models.cm.cm import request as cm_request
from rocegen.sim.models.cm.cm import unpack as cm_unpack
from rocegen.sim.models.rnic import Rnic
from rocegen.wire.pattern import generator_address, pattern

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
W = PARAMS["width"]
NUM_QPS = PARAMS["num_qps"]
# addresses as the register map documents them (docs/registers.md), written out here
ID, VERSION, WIDTH, NUM_QPS_REG = 0x000, 0x004, 0x008, 0x00C
MAC_HI, MAC_LO, IP, CM_PORT_REG = 0x040, 0x044, 0x048, 0x060
BAD_WRITES, BAD_READS, GEN_POSTED = 0x080, 0x084, 0x094
QP_OPEN, COUNTER, QP_COUNTER, QP_BLOCK = 0x0C0, 0x1000, 0x4000, 0x8000
# counter indices: the network stack's (31) first, then the RoCE layers'
TX_FRAMES, ROCE_TX_PACKETS, ROCE_RX_ACKS, ROCE_WR_POSTED, CM_RX_REQUESTS = 30, 42, 39, 43, 57
FPGA_MAC = 0x02_00_00_00_00_01
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"
NEW_IP = "10.0.0.9"


def ip_int(text):
    return int.from_bytes(bytes(int(p) for p in text.split(".")), "big")


class Testbench:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, 4, unit="ns").start())
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst)
        for log in (self.axil.write_if.log, self.axil.read_if.log, self.source.log,
                    self.sink.log):
            log.setLevel("WARNING")
        self.nic = Rnic(HOST_MAC, HOST_IP, strict=True, udp_ports=(50001,))
        self.frames = []            # (cycle, frame) of every frame out of the core
        self.cycle = 0
        self.cpls = []
        for name in ("wr_valid", "gen_valid", "qp_ctl_valid", "qp_psn_valid", "s_msg_axis_tvalid",
                     "mem_w_valid"):
            getattr(dut, name).value = 0
        dut.cpl_ready.value = 1

    async def start(self):
        dut = self.dut
        dut.rst.value = 1
        await ClockCycles(dut.clk, 10)
        dut.rst.value = 0
        cocotb.start_soon(self._count())
        cocotb.start_soon(self._mac())
        cocotb.start_soon(self._cpl())

    async def _count(self):
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1

    async def _mac(self):
        while True:
            frame = await self.sink.recv()
            raw = bytes(frame.tdata)
            self.frames.append((self.cycle, raw))
            for out in self.nic.receive(raw):
                self.source.send_nowait(AxiStreamFrame(out, tuser=0))

    async def _cpl(self):
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            if int(dut.cpl_valid.value):
                self.cpls.append(unpack(COMPLETION, int(dut.cpl_data.value)))

    async def read(self, addr):
        r = await self.axil.read(addr, 4)
        assert r.resp == AxiResp.OKAY, f"read of {addr:#x} answered {r.resp}"
        return int.from_bytes(r.data, "little")

    async def write(self, addr, value):
        r = await self.axil.write(addr, value.to_bytes(4, "little"))
        return r.resp

    async def send_record(self, prefix, layout, fields):
        dut = self.dut
        getattr(dut, f"{prefix}_data").value = pack(layout, fields)
        getattr(dut, f"{prefix}_valid").value = 1
        while True:
            await RisingEdge(dut.clk)
            if int(getattr(dut, f"{prefix}_ready").value):
                break
        getattr(dut, f"{prefix}_valid").value = 0

    async def wait_for(self, predicate, what, max_cycles=200_000):
        end = self.cycle + max_cycles
        while not predicate():
            assert self.cycle < end, what
            await ClockCycles(self.dut.clk, 16)


async def open_qp(b, ip):
    host_qpn, host_psn, rkey, base = 0x77, 0xABCDE, 0x4242, 0x5000_0000
    b.nic.register_mr(base, 1 << 20, rkey)
    n = len(b.nic.udp_rx)
    frame = b.nic.udp_frame(ip, 50000, 17185, cm_request(
        REQ_OPEN_QP, loc_qpn=host_qpn, loc_psn=host_psn, loc_rkey=rkey, loc_vaddr=base,
        loc_ip=ip_int(HOST_IP), listening_port=50001, pmtu_code=pmtu_code(1024)),
        dst_mac="02:00:00:00:00:01")
    b.source.send_nowait(AxiStreamFrame(frame, tuser=0))
    await b.wait_for(lambda: len(b.nic.udp_rx) > n, "no reply from the connection manager")
    reply = cm_unpack(b.nic.udp_rx[n][3])
    assert reply["ack_type"] == ACK_ACK
    b.nic.create_qp(host_qpn, peer_qpn=reply["loc_qpn"], peer_ip=ip,
                    peer_mac="02:00:00:00:00:01", epsn=reply["loc_psn"], pmtu=1024)
    return host_qpn, rkey, base, reply


async def gen_run(b, count, length):
    start = b.cycle
    await b.send_record("gen", GEN_CONFIG, {"qp": 0, "opcode": WrOpcode.WRITE, "length": length,
                                            "count": count, "spacing": 0, "imm": 0, "window": 0})
    await ClockCycles(b.dut.clk, 4)
    await b.wait_for(lambda: not int(b.dut.gen_busy.value), "the generator run never ended")
    assert await b.read(GEN_POSTED) == count          # of this run
    return start


@cocotb.test()
async def registers(dut):
    b = Testbench(dut)
    await b.start()
    # the values after reset the port table promises
    for name in ("m_axis_tvalid", "cpl_valid", "qp_open", "gen_busy", "gen_posted",
                 "s_axil_rvalid", "s_axil_bvalid"):
        assert int(getattr(dut, name).value) == 0, name
    # identity and configuration
    assert await b.read(ID) == int.from_bytes(b"RoCE", "big")
    assert await b.read(VERSION) == 1
    assert await b.read(WIDTH) == W and await b.read(NUM_QPS_REG) == NUM_QPS
    assert await b.read(CM_PORT_REG) == 17185
    assert (await b.read(MAC_HI)) << 32 | await b.read(MAC_LO) == FPGA_MAC
    assert await b.read(IP) == ip_int("10.0.0.2")

    # bad accesses: refused with SLVERR and counted, nothing changed
    assert await b.write(ID, 0x1234) == AxiResp.SLVERR
    assert await b.write(0x100, 1) == AxiResp.SLVERR            # congestion-control window
    assert await b.write(COUNTER, 5) == AxiResp.SLVERR
    assert await b.read(ID) == int.from_bytes(b"RoCE", "big")
    assert await b.read(BAD_WRITES) == 3
    for addr in (0x3000, 0x100, QP_BLOCK + 0x40 * NUM_QPS, QP_COUNTER + 0x40 * NUM_QPS,
                 COUNTER + 4 * len(STATS), QP_BLOCK + 0x3C):
        r = await b.axil.read(addr, 4)
        assert r.resp == AxiResp.SLVERR and r.data == bytes(4), hex(addr)
    assert await b.read(BAD_READS) == 6

    # a new IPv4 address through its register, byte strobes honoured
    assert await b.write(IP, ip_int(NEW_IP)) == AxiResp.OKAY
    await b.axil.write(IP + 3, b"\x0a")                          # byte 3 again: unchanged value
    assert await b.read(IP) == ip_int(NEW_IP)

    # the host opens QP 0 at the new address; the QP table read back
    host_qpn, rkey, base, reply = await open_qp(b, NEW_IP)
    assert await b.read(QP_OPEN) == 1
    q = [await b.read(QP_BLOCK + 4 * k) for k in range(9)]
    assert q[0] == 3                                            # RTS
    assert q[1] == ip_int(HOST_IP) and q[2] == host_qpn and q[3] == rkey
    assert q[4] | q[5] << 32 == base
    assert q[6] == reply["loc_psn"]                             # nothing sent yet
    assert q[8] & 0xF == 10                                     # PMTU 1024
    assert await b.read(COUNTER + 4 * CM_RX_REQUESTS) == 1

    # warm up (ARP), then one run with reads throughout and one without: same timing
    await gen_run(b, 2, 3000)
    n0 = len(b.frames)
    reading = True
    reads = []

    async def hammer():
        k = 0
        while reading:
            addr = (COUNTER + 4 * (k % 67), QP_BLOCK + 4 * (k % 9), QP_COUNTER + 4 * (k % 12),
                    GEN_POSTED)[k % 4]
            reads.append(await b.read(addr))
            k += 1
    task = cocotb.start_soon(hammer())
    start_a = await gen_run(b, 6, 5000)
    reading = False
    await task
    frames_a = [(c - start_a, len(f)) for c, f in b.frames[n0:]]
    cycles_a = int(dut.gen_cycles.value)
    assert len(reads) > 50
    n1 = len(b.frames)
    start_b = await gen_run(b, 6, 5000)
    frames_b = [(c - start_b, len(f)) for c, f in b.frames[n1:]]
    assert int(dut.gen_cycles.value) == cycles_a
    assert frames_a == frames_b, "the reads changed the traffic"
    # every message goes to the QP's base: the last one (number 5 of its run) is there
    assert b.nic.read_mem(base, 5000) == pattern(generator_address(5), 5000)

    # counters against what the NIC model saw
    data_frames = sum(1 for _, f in b.frames if len(f) > 100 and f[12:14] == b"\x08\x00"
                      and f[23] == 17 and int.from_bytes(f[36:38], "big") == 4791)
    assert data_frames == 2 * 3 + 12 * 5
    assert await b.read(COUNTER + 4 * ROCE_TX_PACKETS) == data_frames
    assert await b.read(COUNTER + 4 * TX_FRAMES) == len(b.frames)
    assert await b.read(COUNTER + 4 * ROCE_RX_ACKS) == b.nic.counters["ack_tx"]
    assert await b.read(QP_COUNTER + 0) == data_frames             # QP 0: packets
    assert await b.read(QP_COUNTER + 8) == b.nic.counters["ack_tx"]  # QP 0: acks
    q = [await b.read(QP_BLOCK + 4 * k) for k in range(9)]
    assert q[6] == (reply["loc_psn"] + data_frames) % (1 << 24)     # next PSN
    assert not b.nic.log


@cocotb.test()
async def malformed_work_requests(dut):
    """Work requests the core cannot carry out complete with an error status, in order,
    without stalling the port; a zero-length WRITE is legal and completes OK."""
    b = Testbench(dut)
    await b.start()
    host_qpn, rkey, base, reply = await open_qp(b, "10.0.0.2")
    mem = 256 * 1024
    posts = [
        (1, NUM_QPS, 0, 64, CplStatus.BAD_QP),                  # no such QP
        (2, NUM_QPS + 40, 0, 64, CplStatus.BAD_QP),
        (3, 1, 0, 64, CplStatus.QP_NOT_READY),                  # QP 1 never opened
        (4, 0, W // 8 // 2, 64, CplStatus.LOCAL_ALIGN),         # not a word address
        (5, 0, 0, mem + 8, CplStatus.LOCAL_LENGTH),             # longer than local memory
        (6, 0, 0, (1 << 31) - 1, CplStatus.LOCAL_LENGTH),       # the longest length
        (7, 0, mem - W // 8, 2 * W // 8, CplStatus.LOCAL_LENGTH),   # past the end
        (8, 0, 0, 0, CplStatus.OK),                             # zero length: legal
        (9, 0, 0, 100, CplStatus.OK),
    ]
    for wr_id, qp, addr, length, _ in posts:
        await b.send_record("wr", WORK_REQUEST, {
            "wr_id": wr_id, "qp": qp, "opcode": WrOpcode.WRITE, "local_addr": addr,
            "length": length, "remote_offset": 0, "imm": 0})
    await b.wait_for(lambda: len(b.cpls) >= len(posts), "completions missing")
    await ClockCycles(dut.clk, 200)
    assert len(b.cpls) == len(posts)
    got = {c["wr_id"]: CplStatus(c["status"]) for c in b.cpls}
    assert got == {p[0]: p[4] for p in posts}
    assert [c["wr_id"] for c in b.cpls if c["qp"] == 0] == [4, 5, 6, 7, 8, 9]
    assert await b.read(COUNTER + 4 * ROCE_WR_POSTED) == len(posts)
    assert not b.nic.log
