"""cocotb testbenches of the RoCE endpoint (EndpointTop) against the host NIC model in strict mode:
every opcode and length around every path MTU on QPs interleaved, PSN wrap-around,
multi-megabyte messages, the traffic generator, the streaming front end, refused work requests,
and back-to-back packets at line rate. Random idle cycles on the inputs and random backpressure
from the MAC unless a test measures line rate. The NIC model behaves like a ConnectX whose
figures are drawn from the seed (coalesced, late ACKs, credit codes), and it also sends
duplicate and ghost ACKs, runts and oversize frames (:func:`rocegen.sim.testing.roce_env.peer_behaviour`;
``ROCE_PEER=ideal`` for the kind peer); the testbenches check that the endpoint's counters account
for all of it."""

import json
import os
import random

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiRam, AxiStreamBus, AxiStreamFrame, AxiStreamSource

from rocegen.gateware.lib.records import pack
from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, ROCE_STATS, STATS
from rocegen.gateware.roce.frontend.stream_in import STREAM_META
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, CplStatus, QpState, WrOpcode
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.models.cm.cm import ACK_ACK, ACK_NAK, REQ_CLOSE_QP, REQ_OPEN_QP, pmtu_code
from rocegen.sim.models.cm.cm import request as cm_request
from rocegen.sim.models.cm.cm import traffic as cm_traffic
from rocegen.sim.models.cm.cm import unpack as cm_unpack
from rocegen.sim.models.rnic import Rnic, WcStatus
from rocegen.sim.testing.cocotb_helpers import read_qp_stats, read_stats
from rocegen.sim.testing.fuzz import roce_datagram
from rocegen.sim.testing.roce_env import (
    AETH_SENT,
    MacModel,
    RecordCollector,
    RecordDriver,
    open_qp,
    peer_behaviour,
    qpn,
    start_clock,
    wait_low,
    wait_until,
    write_onchip,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip
from rocegen.wire.cm import CM_PORT, REPLY_PORT
from rocegen.wire.pattern import generator_address, pattern

PARAMS = json.loads(os.environ["ROCEGEN_PARAMS"])
W = PARAMS["width"]
B = W // 8
MEMORY = PARAMS.get("memory", "onchip")
NUM_QPS = PARAMS.get("num_qps", 8)
SEED = int(os.environ.get("SEED", "11"))
#: the host NIC model: a ConnectX's behaviour drawn from the seed, with faults (or "ideal")
PEER = os.environ.get("ROCE_PEER", "connectx")
#: host-side QPN of endpoint QP k
HOST_QPN = 0x40
REMOTE_BASE = 0x7F00_0000_0000
OPCODES = [WrOpcode.WRITE, WrOpcode.WRITE_IMM, WrOpcode.SEND, WrOpcode.SEND_IMM]   # (not READ)
IMM_OPS = (WrOpcode.WRITE_IMM, WrOpcode.SEND_IMM)
SEND_OPS = (WrOpcode.SEND, WrOpcode.SEND_IMM)


class Testbench:
    """One endpoint with the NIC model behind its MAC, QPs opened on both sides."""

    def __init__(self, dut, *, backpressure=0.3, idle=0.2, line_gbps=None, seed=SEED):
        self.dut = dut
        self.rng = random.Random(seed * 1000 + W)
        self.nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=peer_behaviour(
            self.rng.getrandbits(32), PEER))
        self.backpressure = backpressure
        self.idle = idle
        self.line_gbps = line_gbps
        self.qps = {}

    async def start(self):
        dut = self.dut
        await start_clock(dut, W)
        self.mac = MacModel(dut, W, self.nic, line_gbps=self.line_gbps,
                            backpressure=self.backpressure, seed=self.rng.getrandbits(32),
                            pcap=None)
        self.watch_host()
        self.ctl = RecordDriver(dut, "qpctl", CONTEXT_WRITE)
        self.psn = RecordDriver(dut, "qppsn", PSN_WRITE)
        self.wr = RecordDriver(dut, "wr", WORK_REQUEST, idle=self.idle, seed=self.rng.getrandbits(32))
        self.gen = RecordDriver(dut, "gen", GEN_CONFIG)
        self.cpl = RecordCollector(dut, "cpl", COMPLETION, backpressure=self.backpressure, width=W,
                                   seed=self.rng.getrandbits(32))
        dut.s_msg_axis_tvalid.value = 0
        dut.stats_addr.value = 0
        if MEMORY == "onchip":
            dut.memw_valid.value = 0
        else:
            self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                              size=PARAMS["mem_bytes"])
        await ClockCycles(dut.clk, 2)

    def watch_host(self):
        """Count in :attr:`damaged_to_roce` the host's frames that reach UDP port 4791 damaged:
        the NIC model's runts that still hold a UDP header (port 4791 takes datagrams
        cut-through, so they arrive marked ``error`` and RoCE drops them as short or bad)."""
        self.damaged_to_roce = 0

        def tap(frame):
            got = roce_datagram(frame, FPGA_MAC, FPGA_IP)
            if got is not None and got.damaged:
                self.damaged_to_roce += 1
        self.mac.taps.append(tap)

    async def open(self, k, *, pmtu, psn, mr_bytes=1 << 20, ack_every_log2=4, state=QpState.RTS):
        host = HOST_QPN + k
        self.nic.create_qp(host, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=psn,
                           pmtu=pmtu)
        base = REMOTE_BASE + (k << 32)
        rkey = 0x1000 + k
        self.nic.register_mr(base, mr_bytes, rkey)
        await open_qp(self.ctl, self.psn, k, peer_ip=parse_ip(HOST_IP), peer_qpn=host, rkey=rkey,
                      base_va=base, pmtu=pmtu, psn=psn, udp_sport=0xC000 + k,
                      ack_every_log2=ack_every_log2, state=state)
        self.qps[k] = dict(host=host, base=base, pmtu=pmtu, mr_bytes=mr_bytes)

    async def write_local(self, addr, data):
        """Put ``data`` in local memory at byte address ``addr`` (a multiple of W/8)."""
        assert addr % B == 0
        if MEMORY != "onchip":
            self.ram.write(addr, data)
            return
        await write_onchip(self.dut, W, PARAMS.get("mem_bytes", 256 * 1024), addr, data)

    async def post(self, wr_id, k, opcode, local_addr, length, remote_offset=0, imm=0):
        await self.wr.send({"wr_id": wr_id, "qp": k, "opcode": opcode, "local_addr": local_addr,
                            "length": length, "remote_offset": remote_offset, "imm": imm})

    def frames_checked(self, **at_least):
        """Log how many frames out of the endpoint the independent frame check rebuilt
        (:mod:`rocegen.sim.testing.framecheck`); fail if fewer than ``at_least`` of a kind (one frame
        in all by default)."""
        fc = self.mac.framecheck
        self.dut._log.info("frame check: %s", fc.summary())
        for kind, n in ({"frames": 1} | at_least).items():
            assert fc.counts[kind] >= n, f"{fc.counts[kind]} {kind} frames checked, not {n}"

    def remote_at(self, addr, length):
        return self.nic.read_mem(addr, length)

    def remote(self, k, offset, length):
        return self.nic.read_mem(self.qps[k]["base"] + offset, length)


async def check_peer_counters(b):
    """After the NIC model's last answer reached the endpoint (no link in between): every AETH
    frame it sent reached the retry engine; each one acknowledged progress, was a stale repeat
    or was ignored (per-QP ``acks`` + ``ignored``, no NAK here); the ghost ACKs were all
    ignored, and the duplicate copies and ghosts are exactly the stale and ignored ones; every
    runt and oversize frame was dropped and counted by the network stack. Returns the
    endpoint's counters."""
    await b.mac.drained()
    await b.mac.source.wait()
    # the last frames go through the receive path behind an oversize frame, beat by beat
    await ClockCycles(b.dut.clk, 2 * -(-(14 + b.nic.behaviour.oversize_len[1]) // B) + 200)
    stats = await read_stats(b.dut, STATS)
    c = b.nic.counters
    per_qp = [await read_qp_stats(b.dut, k, QP_COUNTERS, ("acks", "ignored")) for k in b.qps]
    summary = {name: c[name] for name in AETH_SENT + ("runt_tx", "oversize_tx", "tx_frames")
               if c[name]}
    b.dut._log.info(f"NIC model sent {summary}; endpoint: " + ", ".join(
        f"{k} {v}" for k, v in stats.items() if v))
    assert stats["roce_rx_acks"] == sum(c[name] for name in AETH_SENT), \
        f"{stats['roce_rx_acks']} acknowledgements taken, the NIC model sent " \
        f"{sum(c[name] for name in AETH_SENT)}"
    assert sum(q["acks"] + q["ignored"] for q in per_qp) == stats["roce_rx_acks"]
    assert stats["roce_ignored_acks"] >= c["ack_ghost_tx"]
    assert stats["roce_stale_acks"] + stats["roce_ignored_acks"] == \
        c["ack_dup_tx"] + c["ack_ghost_tx"]
    assert stats["eth_runt"] + stats["ip_runt"] + stats["ip_truncated"] == c["runt_tx"]
    assert stats["roce_rx_drop_short"] + stats["roce_rx_icrc_bad"] == b.damaged_to_roce
    assert stats["ip_drop_header"] == c["oversize_tx"]
    return stats


def interleave(rng, per_qp):
    """One sequence of everyone's requests, each QP's in its own order."""
    queues = {k: list(v) for k, v in per_qp.items() if v}
    out = []
    while queues:
        k = rng.choice(sorted(queues))
        out.append(queues[k].pop(0))
        if not queues[k]:
            del queues[k]
    return out


def check_completions(cpls, expected_ids):
    """Every completion OK, each QP's in posting order."""
    bad = [c for c in cpls if c["status"] != CplStatus.OK.value]
    assert not bad, f"completions with errors: {bad[:5]}"
    by_qp = {}
    for c in cpls:
        by_qp.setdefault(c["qp"], []).append(c["wr_id"])
    assert by_qp == expected_ids, "completions missing or out of order"


async def post_and_check(b, rng, per_qp, expect_mem, expect_recv):
    """Post the work requests of ``per_qp`` interleaved, then check their completions, the host's
    memory (``expect_mem``: QP, offset, bytes), its receives (``expect_recv``: host QPN -> [(op,
    data, imm)]) and that the NIC model logged no problem; returns the posting order."""
    order = interleave(rng, per_qp)
    for job in order:
        await b.post(*job)
    cpls = await b.cpl.wait_for(len(order), max_cycles=4_000_000)
    check_completions(cpls, {k: [j[0] for j in v] for k, v in per_qp.items()})
    for k, off, data in expect_mem:
        assert b.remote(k, off, len(data)) == data, f"QP {k}: remote memory at {off:#x} differs"
    got = {}
    for c in b.nic.poll_cq():
        got.setdefault(c.qpn, []).append(c)
    for host, exp in expect_recv.items():
        have = got.get(host, [])
        assert len(have) == len(exp), f"host QP {host:#x}: {len(have)} of {len(exp)} receives"
        for c, (op, data, imm) in zip(have, exp):
            assert c.status == WcStatus.SUCCESS and c.imm == (imm if op in IMM_OPS else None)
            if op in SEND_OPS:
                assert c.data[:len(data)] == data and c.byte_len == len(data)
    assert not b.nic.log, f"the NIC model logged problems: {b.nic.log[:5]}"
    return order


@cocotb.test()
async def every_opcode_length_and_pmtu(dut):
    """Five QPs, one per path MTU, interleaved; every opcode at lengths around the MTU (and
    every length 0..PMTU+1 on the 256-byte QP); PSNs wrap on two QPs."""
    b = Testbench(dut)
    await b.start()
    rng = b.rng
    local = rng.randbytes(64 * 1024)
    await b.write_local(0, local)
    pmtus = [256, 512, 1024, 2048, 4096]
    start_psn = {0: (1 << 24) - 3, 1: rng.getrandbits(24), 2: (1 << 24) - 40, 3: 0,
                 4: rng.getrandbits(24)}
    for k, pmtu in enumerate(pmtus):
        await b.open(k, pmtu=pmtu, psn=start_psn[k], mr_bytes=4 << 20)
    per_qp, expect_mem, expect_recv = {}, [], {}
    wr_id = 0
    for k, pmtu in enumerate(pmtus):
        lengths = [0, 1, 2, 3, 4, 5, B - 1, B, B + 1, pmtu - 1, pmtu, pmtu + 1, 2 * pmtu + 5,
                   3 * pmtu]
        jobs = [(op, n) for op in OPCODES for n in lengths]
        if pmtu == 256:
            jobs += [(WrOpcode.WRITE, n) for n in range(1, pmtu + 2)]
        cursor = 0
        per_qp[k] = []
        for op, n in jobs:
            local_addr = rng.randrange(0, (len(local) - n) // B + 1) * B
            imm = rng.getrandbits(32)
            roff = cursor
            cursor += n + rng.randrange(0, 8)       # remote addresses of any alignment
            per_qp[k].append((wr_id, k, op, local_addr, n, roff, imm))
            if op in (WrOpcode.WRITE, WrOpcode.WRITE_IMM):
                expect_mem.append((k, roff, local[local_addr:local_addr + n]))
            if op != WrOpcode.WRITE:
                b.nic.post_recv(HOST_QPN + k, max(n, 1), wr_id)
                expect_recv.setdefault(HOST_QPN + k, []).append(
                    (op, local[local_addr:local_addr + n], imm))
            wr_id += 1
    await post_and_check(b, rng, per_qp, expect_mem, expect_recv)
    await check_peer_counters(b)
    for k in start_psn:
        n_pkts = sum(max(1, -(-j[4] // pmtus[k])) for j in per_qp[k])
        assert b.nic.expected_psn(HOST_QPN + k) == (start_psn[k] + n_pkts) % (1 << 24)
    b.frames_checked(roce=1)


@cocotb.test()
async def generator_multi_megabyte(dut):
    """The traffic generator: WRITEs of 2 MiB + 5 bytes (two at W >= 128, one at W = 64, where
    the simulation is eight times slower per byte), then SENDs with immediate; the host memory
    holds the pattern."""
    b = Testbench(dut)
    await b.start()
    n = (2 << 20) + 5
    count = 2 if W >= 128 else 1
    await b.open(0, pmtu=4096, psn=100, mr_bytes=count * n + 64)
    await b.gen.send({"qp": 0, "opcode": WrOpcode.WRITE, "length": n, "count": count,
                      "spacing": 0, "imm": 0, "window": count * n})
    await wait_gen(dut, count)
    for s in range(count):
        assert b.remote(0, s * n, n) == pattern(generator_address(s), n), f"message {s} differs"
    for s in range(3):
        b.nic.post_recv(HOST_QPN, 1500, 100 + s)
    await b.gen.send({"qp": 0, "opcode": WrOpcode.SEND_IMM, "length": 1000, "count": 3,
                      "spacing": 50, "imm": 0xFACE, "window": 0})
    await wait_gen(dut, 3)
    recv = b.nic.poll_cq()
    assert [c.data[:1000] for c in recv] == [pattern(generator_address(s), 1000) for s in range(3)]
    assert all(c.imm == 0xFACE for c in recv)
    assert not b.nic.log
    b.frames_checked(roce=1)
    await check_peer_counters(b)


async def wait_gen(dut, count, max_cycles=3_000_000):
    await ClockCycles(dut.clk, 4)
    await wait_low(dut, dut.gen_busy, W, max_cycles=max_cycles,
                   what=f"generator ({int(dut.gen_ok.value)} of {count} done)")
    assert int(dut.gen_ok.value) == count and int(dut.gen_err.value) == 0


@cocotb.test()
async def stream_front_end(dut):
    """Messages pushed on the streaming input land in the host's memory; more bytes than the
    ring holds, so its space is reused as acknowledgements free it."""
    b = Testbench(dut)
    await b.start()
    await b.open(0, pmtu=1024, psn=7, mr_bytes=8 << 20)
    src = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_msg_axis"), dut.clk, dut.rst)
    src.log.setLevel("WARNING")
    rng = b.rng
    ring = PARAMS.get("ring_bytes") or (128 * 1024 if MEMORY == "onchip" else 1 << 20)
    msgs, offset = [], 0
    total = 0
    while total < 2 * ring:
        n = rng.choice([1, B, 1000, 4096, 9000, rng.randrange(1, 16384)])
        msgs.append((offset, rng.randbytes(n)))
        offset += n + rng.randrange(0, 4)
        total += n
    for off, data in msgs:
        dut.msg_meta.value = pack(STREAM_META, {"qp": 0, "opcode": WrOpcode.WRITE, "imm": 0,
                                                "remote_offset": off})
        await src.send(AxiStreamFrame(data, tuser=0))
        await src.wait()
    want = (7 + sum(max(1, -(-len(d) // 1024)) for _, d in msgs)) % (1 << 24)
    await wait_until(b.mac, lambda: b.nic.expected_psn(HOST_QPN) == want, max_cycles=2_000_000,
                     what=lambda: f"the host expects PSN {b.nic.expected_psn(HOST_QPN):#x}, "
                     f"not {want:#x}: packets of the streamed messages missing")
    for off, data in msgs:
        assert b.remote(0, off, len(data)) == data, f"message at {off:#x} differs"
    assert not b.nic.log
    b.frames_checked(roce=1)
    await check_peer_counters(b)


@cocotb.test()
async def refused_requests(dut):
    """Requests naming no QP, a QP not ready to send, a misaligned or out-of-memory buffer
    complete with their error status, in order, and the QP still works afterwards."""
    b = Testbench(dut)
    await b.start()
    await b.open(0, pmtu=1024, psn=0)
    await b.open(1, pmtu=1024, psn=0, state=QpState.INIT)
    local = b.rng.randbytes(2048)
    await b.write_local(0, local)
    mem = PARAMS.get("mem_bytes", 256 * 1024)
    await b.post(1, 0, WrOpcode.WRITE, 0, 100)
    await b.post(2, NUM_QPS, WrOpcode.WRITE, 0, 100)            # no such QP
    await b.post(3, 1, WrOpcode.WRITE, 0, 100)                  # QP 1 is not RTS
    await b.post(4, 0, WrOpcode.WRITE, B // 2, 100)             # misaligned
    await b.post(5, 0, WrOpcode.WRITE, mem - B, 2 * B)          # past the end of local memory
    await b.post(6, 0, WrOpcode.WRITE, B, 1500, 4096)
    cpls = await b.cpl.wait_for(6, max_cycles=200_000)
    status = {c["wr_id"]: CplStatus(c["status"]) for c in cpls}
    assert status == {1: CplStatus.OK, 2: CplStatus.BAD_QP, 3: CplStatus.QP_NOT_READY,
                      4: CplStatus.LOCAL_ALIGN, 5: CplStatus.LOCAL_LENGTH, 6: CplStatus.OK}
    assert [c["wr_id"] for c in cpls if c["qp"] == 0] == [1, 4, 5, 6]
    assert b.remote(0, 0, 100) == local[:100]
    assert b.remote(0, 4096, 1500) == local[B:B + 1500]
    assert not b.nic.log
    stats = await check_peer_counters(b)
    assert stats["roce_cpl_ok"] == 2 and stats["roce_cpl_error"] == 4
    assert stats["roce_wr_posted"] == 6
    assert stats["roce_tx_packets"] == 1 + 2            # 100 bytes, 1500 bytes at PMTU 1024
    assert stats["roce_rx_acks"] + b.damaged_to_roce == stats["roce_rx_packets"]
    assert stats["roce_rx_acks"] >= b.nic.counters["ack_tx"] > 0
    for name in ROCE_STATS:         # (the runts that reach RoCE: checked above)
        if ("drop" in name or "bad" in name or "naks" in name) and \
                name not in ("roce_rx_drop_short", "roce_rx_icrc_bad"):
            assert stats[name] == 0, f"{name} = {stats[name]}"
    b.frames_checked(roce=1)


@cocotb.test()
async def connection_manager(dut):
    """A host opens a QP over UDP 17185 with the existing 64-byte format, starts the traffic
    generator with a test-traffic datagram, and closes the QP; the replies carry a correct UDP
    checksum and the data lands in the host's memory. A request whose UDP checksum is wrong
    (it passes UDP receive cut-through, its last beat marked) is dropped and counted, with no
    reply and no QP opened."""
    b = Testbench(dut, backpressure=0.2)
    b.nic = Rnic(HOST_MAC, HOST_IP, strict=True, udp_ports=(50001,), behaviour=b.nic.behaviour)
    await b.start()
    host_qpn, host_psn, rkey, base = 0x77, 0xFFFFF0, 0x4242, 0x5000_0000
    b.nic.register_mr(base, 1 << 16, rkey)

    async def exchange(payload):
        n = len(b.nic.udp_rx)
        frame = b.nic.udp_frame(FPGA_IP, 50000, CM_PORT, payload, dst_mac=FPGA_MAC)
        b.mac.to_endpoint(frame)
        await wait_until(b.mac, lambda: len(b.nic.udp_rx) > n, max_cycles=20_000,
                         what="no reply from the connection manager")
        src_ip, sport, dport, reply = b.nic.udp_rx[n]
        assert (src_ip, sport, dport) == (FPGA_IP, REPLY_PORT, 50001)
        return cm_unpack(reply)

    open_qp = cm_request(REQ_OPEN_QP, loc_qpn=host_qpn, loc_psn=host_psn, loc_rkey=rkey,
                         loc_vaddr=base, loc_ip=parse_ip(HOST_IP), listening_port=50001,
                         pmtu_code=pmtu_code(1024))
    wrong = bytearray(b.nic.udp_frame(FPGA_IP, 50000, CM_PORT, open_qp, dst_mac=FPGA_MAC))
    wrong[14 + 20 + 6] ^= 0x40                  # the UDP checksum (not 0 after it)
    assert wrong[40:42] != b"\0\0"
    counted = ("udp_drop_checksum", "cm_drop_length", "cm_rx_requests")
    before = await read_stats(dut, counted, block=STATS)
    b.mac.to_endpoint(bytes(wrong))
    await ClockCycles(dut.clk, 2_000)
    after = await read_stats(dut, counted, block=STATS)
    assert {k: after[k] - before[k] for k in after} == {
        "udp_drop_checksum": 1, "cm_drop_length": 1, "cm_rx_requests": 1}
    assert not b.nic.udp_rx and int(dut.qp_open.value) == 0
    reply = await exchange(open_qp)
    assert reply["ack_valid"] == 1 and reply["ack_type"] == ACK_ACK
    fpga_qpn = reply["loc_qpn"]
    assert fpga_qpn == qpn(0) and reply["rem_qpn"] == host_qpn
    assert int(dut.qp_open.value) == 1
    b.nic.create_qp(host_qpn, peer_qpn=fpga_qpn, peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                    epsn=reply["loc_psn"], pmtu=1024)
    frame = b.nic.udp_frame(FPGA_IP, 50000, CM_PORT, cm_traffic(fpga_qpn, 5000, 4),
                            dst_mac=FPGA_MAC)
    b.mac.to_endpoint(frame)
    await ClockCycles(dut.clk, 50)
    await wait_gen(dut, 4)
    assert b.remote_at(base, 5000) == pattern(generator_address(3), 5000)
    assert b.nic.expected_psn(host_qpn) == (host_psn + 4 * 5) % (1 << 24)
    reply = await exchange(cm_request(REQ_CLOSE_QP, rem_qpn=fpga_qpn, listening_port=50001))
    assert reply["ack_type"] == ACK_ACK and int(dut.qp_open.value) == 0
    reply = await exchange(cm_request(REQ_CLOSE_QP, rem_qpn=fpga_qpn, listening_port=50001))
    assert reply["ack_type"] == ACK_NAK
    assert not b.nic.log
    b.frames_checked(cm_reply=3)


@cocotb.test()
async def back_to_back_at_line_rate(dut):
    """One QP, MAC always ready: the frames of long WRITEs leave with no idle beat between
    them."""
    b = Testbench(dut, backpressure=0.0, idle=0.0)
    await b.start()
    await b.open(0, pmtu=4096, psn=0, mr_bytes=1 << 20)
    n = 256 * 1024
    await b.gen.send({"qp": 0, "opcode": WrOpcode.WRITE, "length": n, "count": 3, "spacing": 0,
                      "imm": 0, "window": 0})
    await wait_gen(dut, 3)
    roce = [(f, l) for f, l, fr in b.mac.frames if fr[12:14] == b"\x08\x00"]
    assert len(roce) >= 3 * n // 4096
    # after the first frame (ARP and pipeline fill), every frame starts the cycle after the last
    gaps = [roce[i + 1][0] - roce[i][1] - 1 for i in range(1, len(roce) - 1)]
    assert max(gaps) == 0, f"idle beats between frames: {sorted(set(gaps))}"
    b.frames_checked(roce=1)


@cocotb.test()
async def hostile_peer(dut):
    """A ConnectX-like NIC model at its most hostile: every AETH credit code, ACKs coalesced
    after every few packets and by a timer, answers late, and a third of its ACKs followed by a
    duplicate copy, a ghost ACK (of a PSN never sent), a runt or an oversize frame. WRITEs,
    SENDs and WRITEs with immediate on four QPs: every byte lands once, every work request
    completes OK, and the endpoint's counters account for every frame the model sent."""
    b = Testbench(dut)
    seed = b.rng.getrandbits(32)
    b.nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=peer_behaviour(seed | 1).replace(
        credits="random", ack_every=b.rng.randint(2, 8), ack_timer_ns=1500.0,
        dup_ack=0.3, ghost_ack=0.3, runt=0.2, oversize=0.2, seed=seed))
    await b.start()
    rng = b.rng
    local = rng.randbytes(32 * 1024)
    await b.write_local(0, local)
    pmtus = [256, 1024, 4096, 512]
    for k, pmtu in enumerate(pmtus):
        await b.open(k, pmtu=pmtu, psn=rng.getrandbits(24), mr_bytes=1 << 20,
                     ack_every_log2=rng.randrange(0, 5))
    per_qp, expect_mem, expect_recv = {}, [], {}
    wr_id = 0
    for k, pmtu in enumerate(pmtus):
        per_qp[k], cursor = [], 0
        for _ in range(24):
            op = rng.choice(OPCODES)
            n = rng.choice([0, 1, B, pmtu, pmtu + 1, rng.randrange(1, 5 * pmtu)])
            local_addr = rng.randrange(0, (len(local) - n) // B + 1) * B
            imm = rng.getrandbits(32)
            per_qp[k].append((wr_id, k, op, local_addr, n, cursor, imm))
            if op in (WrOpcode.WRITE, WrOpcode.WRITE_IMM):
                expect_mem.append((k, cursor, local[local_addr:local_addr + n]))
            if op != WrOpcode.WRITE:
                b.nic.post_recv(HOST_QPN + k, max(n, 1), wr_id)
                expect_recv.setdefault(HOST_QPN + k, []).append(
                    (op, local[local_addr:local_addr + n], imm))
            cursor += n + rng.randrange(0, 8)
            wr_id += 1
    order = await post_and_check(b, rng, per_qp, expect_mem, expect_recv)
    assert b.mac.retransmitted == 0, "a packet was sent twice"
    packets = sum(max(1, -(-j[4] // pmtus[k])) for k, jobs in per_qp.items() for j in jobs)
    assert (b.nic.counters["executed"], b.nic.counters["duplicate"]) == (packets, 0)
    stats = await check_peer_counters(b)
    c = b.nic.counters
    assert min(c["ack_dup_tx"], c["ack_ghost_tx"], c["runt_tx"], c["oversize_tx"]) > 0, c
    assert stats["roce_cpl_ok"] == len(order) and stats["roce_cpl_error"] == 0
