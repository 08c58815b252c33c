"""cocotb testbenches of the RoCE endpoint's reliability: a faulty link
(:class:`~rocegen.sim.models.fabric.link.Link`) between the endpoint's MAC and the host NIC model
drops, duplicates, reorders, delays and corrupts frames in both directions; the endpoint must
deliver every message exactly once and in order, complete every work request OK, and fail QPs
cleanly (right status, other QPs unaffected, QP reusable) on RNR storms, remote access errors
and dead links. A receive fuzz testbench throws random and mutated frames at the receive path while
real traffic runs. The NIC model behaves like a ConnectX drawn from the seed (coalesced,
late ACKs, credit codes) and also sends duplicate and ghost ACKs, runts and oversize frames
(:func:`~rocegen.sim.testing.roce_env.peer_behaviour`)."""

import cocotb
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiRam, AxiStreamFrame

from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, ROCE_STATS, STATS
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.layouts import COMPLETION, WORK_REQUEST, CplStatus, WrOpcode
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import WcStatus
from rocegen.sim.testing.cocotb_helpers import read_qp_stats, read_stats
from rocegen.sim.testing.roce_env import (
    AETH_SENT,
    MacModel,
    RecordCollector,
    RecordDriver,
    open_qp,
    qpn,
    start_clock,
    wait_cycles,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP
from rocegen.wire.addr import parse_ip
from rocegen.wire.headers import BTH, ETH, IPV4, UDP, UDP_PORT_ROCEV2
from tests.cocotb.roce import (
    HOST_QPN,
    IMM_OPS,
    MEMORY,
    OPCODES,
    PARAMS,
    REMOTE_BASE,
    SEED,
    SEND_OPS,
    B,
    Testbench,
    W,
)

#: Retransmit timeout code of the QPs: about 5000 cycles at the board clock (16.4 us at 512
#: bits, 32.8 us at 64), longer than any packet waits in the transmit path.
TIMEOUT = 2 if W > 64 else 3
#: Cycles a testbench may take at most (a hang fails the testbench).
MAX_CYCLES = 6_000_000


def is_roce(frame):
    """The frame is a RoCEv2 packet (IPv4, UDP port 4791; runts from the NIC model are not)."""
    if len(frame) < ETH.length + IPV4.length + UDP.length + BTH.length:
        return False
    eth = ETH.unpack(frame[:ETH.length])
    if eth["ethertype"] != 0x0800:
        return False
    ip = IPV4.unpack(frame[ETH.length:ETH.length + IPV4.length])
    if ip["protocol"] != 17:
        return False
    at = ETH.length + IPV4.length
    return UDP.unpack(frame[at:at + UDP.length])["dst_port"] == UDP_PORT_ROCEV2


def bth_of(frame):
    at = ETH.length + IPV4.length + UDP.length
    return BTH.unpack(frame[at:at + BTH.length])


class FaultyTestbench(Testbench):
    """:class:`tests.cocotb.roce.Testbench` with a faulty link each way."""

    def __init__(self, dut, *, to_nic=None, from_nic=None, **kwargs):
        super().__init__(dut, **kwargs)
        seed = self.rng.getrandbits(32)
        self.to_nic = to_nic or Link(seed=seed, name="to NIC")
        self.from_nic = from_nic or Link(seed=seed + 1, name="from NIC")
        self.cursor = {}

    async def start(self):
        dut = self.dut
        await start_clock(dut, W)
        self.mac = MacModel(dut, W, self.nic, line_gbps=self.line_gbps,
                            backpressure=self.backpressure, seed=self.rng.getrandbits(32),
                            to_nic=self.to_nic, from_nic=self.from_nic)
        self.watch_host()
        self.ctl = RecordDriver(dut, "qpctl", CONTEXT_WRITE)
        self.psn = RecordDriver(dut, "qppsn", PSN_WRITE)
        self.wr = RecordDriver(dut, "wr", WORK_REQUEST, idle=self.idle,
                               seed=self.rng.getrandbits(32))
        self.gen = RecordDriver(dut, "gen", GEN_CONFIG)
        self.cpl = RecordCollector(dut, "cpl", COMPLETION, backpressure=self.backpressure,
                                   seed=self.rng.getrandbits(32), width=W)
        dut.s_msg_axis_tvalid.value = 0
        dut.stats_addr.value = 0
        dut.qp_stats_qp.value = 0
        dut.qp_stats_sel.value = 0
        if MEMORY == "onchip":
            dut.memw_valid.value = 0
        else:
            self.ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                              size=PARAMS["mem_bytes"])
        await ClockCycles(dut.clk, 2)

    async def open(self, k, *, pmtu, psn, mr_bytes=1 << 20, ack_every_log2=2, timeout=TIMEOUT,
                   retry_cnt=7, rnr_retry=7, min_rnr_timer=1):
        host = HOST_QPN + k
        if host in self.nic.qps:
            self.nic.destroy_qp(host)
        self.nic.create_qp(host, peer_qpn=qpn(k), peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=psn,
                           pmtu=pmtu, min_rnr_timer=min_rnr_timer)
        base = REMOTE_BASE + (k << 32)
        rkey = 0x1000 + k
        if not any(mr.addr == base for mr in self.nic.mrs):
            self.nic.register_mr(base, mr_bytes, rkey)
        await open_qp(self.ctl, self.psn, k, peer_ip=parse_ip(HOST_IP), peer_qpn=host, rkey=rkey,
                      base_va=base, pmtu=pmtu, psn=psn, udp_sport=0xC000 + k,
                      ack_every_log2=ack_every_log2, timeout=timeout, retry_cnt=retry_cnt,
                      rnr_retry=rnr_retry)
        self.qps[k] = dict(host=host, base=base, pmtu=pmtu, mr_bytes=mr_bytes)
        self.cursor.setdefault(k, 0)

    def jobs(self, k, n, local, *, max_len=None, ops=OPCODES, first_id=0):
        """``n`` random work requests on QP ``k`` into fresh remote memory; receive buffers are
        posted for those that need one. Returns the jobs and their expectations."""
        rng = self.rng
        pmtu = self.qps[k]["pmtu"]
        max_len = max_len or 3 * pmtu + 7
        out = []
        for j in range(n):
            op = rng.choice(ops)
            length = rng.choice([0, 1, B, pmtu, pmtu + 1, rng.randrange(0, max_len + 1)])
            local_addr = rng.randrange(0, (len(local) - length) // B + 1) * B
            roff = self.cursor[k]
            self.cursor[k] += length + rng.randrange(0, 8)
            wr_id = first_id + j
            data = local[local_addr:local_addr + length]
            if op != WrOpcode.WRITE:
                self.nic.post_recv(self.qps[k]["host"], max(length, 1), wr_id)
            out.append(dict(wr_id=wr_id, k=k, op=op, local_addr=local_addr, length=length,
                            roff=roff, imm=rng.getrandbits(32), data=data))
        return out

    async def post_jobs(self, jobs):
        for j in jobs:
            await self.post(j["wr_id"], j["k"], j["op"], j["local_addr"], j["length"], j["roff"],
                            j["imm"])

    def check_delivery(self, jobs, cpls, recvs):
        """Every job completed OK exactly once in order per QP; remote memory holds every
        WRITE's data; every SEND and immediate arrived once, in order, intact."""
        bad = [c for c in cpls if c["status"] != CplStatus.OK.value]
        assert not bad, f"completions with errors: {bad[:5]}"
        want, got = {}, {}
        for j in jobs:
            want.setdefault(j["k"], []).append(j["wr_id"])
        for c in cpls:
            got.setdefault(c["qp"], []).append(c["wr_id"])
        assert got == want, "completions missing, repeated or out of order"
        for j in jobs:
            if j["op"] in (WrOpcode.WRITE, WrOpcode.WRITE_IMM):
                assert self.remote(j["k"], j["roff"], j["length"]) == j["data"], \
                    f"QP {j['k']} wr {j['wr_id']}: remote memory differs"
        by_host = {}
        for c in recvs:
            by_host.setdefault(c.qpn, []).append(c)
        for k in {j["k"] for j in jobs}:
            exp = [j for j in jobs if j["k"] == k and j["op"] != WrOpcode.WRITE]
            have = by_host.get(self.qps[k]["host"], [])
            assert len(have) == len(exp), f"QP {k}: {len(have)} receives, expected {len(exp)}"
            for c, j in zip(have, exp):
                assert c.status == WcStatus.SUCCESS, f"QP {k}: receive {c}"
                assert c.wr_id == j["wr_id"], f"QP {k}: receives out of order"
                assert c.imm == (j["imm"] if j["op"] in IMM_OPS else None), f"QP {k}: immediate"
                if j["op"] in SEND_OPS:
                    assert c.byte_len == j["length"] and c.data[:j["length"]] == j["data"]

    async def run_jobs(self, jobs):
        """Post ``jobs`` (interleaved over their QPs) and wait for their completions; returns
        the completions and the NIC's receive completions."""
        first = len(self.cpl.items)
        order = interleave_jobs(self.rng, jobs)
        cocotb.start_soon(self.post_jobs(order))
        await self.cpl.wait_for(first + len(jobs), max_cycles=MAX_CYCLES)
        await wait_cycles(W, 200)
        cpls = self.cpl.items[first:]
        assert len(cpls) == len(jobs), f"{len(cpls) - len(jobs)} completions too many"
        return cpls, self.nic.poll_cq()


def interleave_jobs(rng, jobs):
    queues = {}
    for j in jobs:
        queues.setdefault(j["k"], []).append(j)
    out = []
    while queues:
        k = rng.choice(sorted(queues))
        out.append(queues[k].pop(0))
        if not queues[k]:
            del queues[k]
    return out


PMTUS = (256, 1024, 4096, 512)


@cocotb.test()
async def lossy_link(dut):
    """Four QPs through a link that loses 0.1 %, 1 % and 5 % of the frames each way (with
    bursts in the 1 % phase), duplicates, reorders and corrupts some, and for a while loses
    every acknowledgement: all data arrives exactly once and in order, every work request
    completes OK."""
    b = FaultyTestbench(dut, backpressure=0.1, idle=0.1)
    await b.start()
    local = b.rng.randbytes(32 * 1024)
    await b.write_local(0, local)
    for k, pmtu in enumerate(PMTUS):
        await b.open(k, pmtu=pmtu, psn=b.rng.choice([(1 << 24) - 5, b.rng.getrandbits(24)]),
                     mr_bytes=8 << 20)
    phases = [
        dict(loss=0.001, dup=0.01, reorder=0.01, corrupt=0.005, burst=None),
        dict(loss=0.01, dup=0.01, reorder=0.02, corrupt=0.005, burst=(0.003, 6)),
        dict(loss=0.05, dup=0.02, reorder=0.02, corrupt=0.01, burst=None),
    ]
    per_qp = 60 if W > 64 else 40
    first_id = 0
    for n, phase in enumerate(phases):
        for link in (b.to_nic, b.from_nic):
            for name, value in phase.items():
                setattr(link, name, value)
        if n == 1:
            # every acknowledgement lost for a while
            now = b.mac.cycle
            b.from_nic.drop_matching(is_roce, start=now + 2000, end=now + 12000)
        jobs = []
        for k in range(len(PMTUS)):
            jobs += b.jobs(k, per_qp, local, first_id=first_id)
            first_id += per_qp
        cpls, recvs = await b.run_jobs(jobs)
        b.check_delivery(jobs, cpls, recvs)
        dut._log.info(f"phase {n}: links {b.to_nic.counters} / {b.from_nic.counters}")
    stats = await read_stats(dut, STATS)
    roce = {k: v for k, v in stats.items() if k in ROCE_STATS and v}
    dut._log.info(f"counters: {roce}")
    assert b.to_nic.counters["dropped"] > 0 and b.from_nic.counters["dropped"] > 0
    assert b.to_nic.counters["corrupted"] > 0 or b.from_nic.counters["corrupted"] > 0
    assert stats["roce_rewinds"] > 0 and stats["roce_qp_errors"] == 0
    assert stats["roce_cpl_error"] == 0
    resent = 0
    for k in range(len(PMTUS)):
        s = await read_qp_stats(dut, k, QP_COUNTERS)
        resent += s["resent"]
        assert s["packets"] >= s["resent"]
    assert resent > 0
    assert resent == b.mac.retransmitted, "per-QP resent counters disagree with the wire"
    b.frames_checked(roce=1)


@cocotb.test()
async def errors_and_recovery(dut):
    """RNR storms (recovered with rnr_retry 7, fatal with a small rnr_retry), a WRITE outside
    the remote region, and a dead link exhausting the retries: each QP fails with the right
    status, its later requests complete FLUSHED, other QPs' traffic completes OK meanwhile, and
    a failed QP works again once it is set up anew."""
    b = FaultyTestbench(dut, backpressure=0.1, idle=0.1)
    await b.start()
    local = b.rng.randbytes(16 * 1024)
    await b.write_local(0, local)
    for k in range(4):
        await b.open(k, pmtu=1024, psn=b.rng.getrandbits(24), mr_bytes=4 << 20,
                     retry_cnt=2, rnr_retry=7 if k == 0 else 2)
    sends = [WrOpcode.SEND, WrOpcode.SEND_IMM]

    # QP 0: an RNR storm it rides out; QP 3: ordinary traffic meanwhile
    b.nic.rnr_for(6, qpn=b.qps[0]["host"])
    jobs = b.jobs(0, 10, local, ops=sends, first_id=0) + b.jobs(3, 20, local, first_id=100)
    cpls, recvs = await b.run_jobs(jobs)
    b.check_delivery(jobs, cpls, recvs)
    stats = await read_qp_stats(dut, 0, QP_COUNTERS)
    assert stats["rnr_naks"] >= 6

    # QP 1: more RNR NAKs than rnr_retry allows; QP 2: a WRITE past its region
    b.nic.rnr_for(1000, qpn=b.qps[1]["host"])
    rnr_jobs = b.jobs(1, 5, local, ops=sends, first_id=200)
    ok_jobs = b.jobs(3, 20, local, first_id=300)
    bad = dict(wr_id=400, k=2, op=WrOpcode.WRITE, local_addr=0, length=2048,
               roff=b.qps[2]["mr_bytes"] - 1024, imm=0, data=b"")
    after_bad = b.jobs(2, 4, local, ops=[WrOpcode.WRITE], first_id=401)
    first = len(b.cpl.items)
    for j in interleave_jobs(b.rng, rnr_jobs + ok_jobs + [bad] + after_bad):
        await b.post(j["wr_id"], j["k"], j["op"], j["local_addr"], j["length"], j["roff"],
                     j["imm"])
    total = len(rnr_jobs) + len(ok_jobs) + 1 + len(after_bad)
    await b.cpl.wait_for(first + total, max_cycles=MAX_CYCLES)
    await wait_cycles(W, 200)
    cpls = b.cpl.items[first:]
    assert len(cpls) == total
    by_qp = {}
    for c in cpls:
        by_qp.setdefault(c["qp"], []).append((c["wr_id"], CplStatus(c["status"])))
    assert by_qp[1] == [(rnr_jobs[0]["wr_id"], CplStatus.RNR_RETRY_EXCEEDED)] + \
        [(j["wr_id"], CplStatus.FLUSHED) for j in rnr_jobs[1:]]
    assert by_qp[2] == [(400, CplStatus.REMOTE_ACCESS)] + \
        [(j["wr_id"], CplStatus.FLUSHED) for j in after_bad]
    assert by_qp[3] == [(j["wr_id"], CplStatus.OK) for j in ok_jobs]
    b.check_delivery(ok_jobs, [c for c in cpls if c["qp"] == 3], b.nic.poll_cq())

    # QP 3: the link to its peer dies: retries run out
    dead = b.qps[3]["host"]
    b.to_nic.drop_matching(lambda f: is_roce(f) and bth_of(f)["dest_qp"] == dead)
    dead_jobs = b.jobs(3, 3, local, ops=[WrOpcode.WRITE], first_id=500)
    live_jobs = b.jobs(0, 10, local, ops=[WrOpcode.WRITE], first_id=600)
    first = len(b.cpl.items)
    for j in dead_jobs + live_jobs:
        await b.post(j["wr_id"], j["k"], j["op"], j["local_addr"], j["length"], j["roff"],
                     j["imm"])
    await b.cpl.wait_for(first + len(dead_jobs) + len(live_jobs), max_cycles=MAX_CYCLES)
    cpls = b.cpl.items[first:]
    got3 = [(c["wr_id"], CplStatus(c["status"])) for c in cpls if c["qp"] == 3]
    assert got3 == [(dead_jobs[0]["wr_id"], CplStatus.RETRY_EXCEEDED)] + \
        [(j["wr_id"], CplStatus.FLUSHED) for j in dead_jobs[1:]]
    b.check_delivery(live_jobs, [c for c in cpls if c["qp"] == 0], b.nic.poll_cq())
    stats = await read_stats(dut, STATS)
    assert stats["roce_qp_errors"] == 3
    assert stats["roce_timeouts"] >= 3

    # every failed QP is set up again and works
    b.to_nic.clear_scripts()
    for k in (1, 2, 3):
        await b.open(k, pmtu=1024, psn=b.rng.getrandbits(24), mr_bytes=4 << 20)
    jobs = []
    for k in (1, 2, 3):
        jobs += b.jobs(k, 8, local, first_id=700 + 10 * k)
    cpls, recvs = await b.run_jobs(jobs)
    b.check_delivery(jobs, cpls, recvs)
    b.frames_checked(roce=1)


@cocotb.test()
async def receive_fuzz(dut):
    """Tens of thousands of random and mutated frames on the receive port while two QPs carry
    real traffic: the traffic completes intact, and every datagram for UDP port 4791 gets
    exactly one receive verdict."""
    from rocegen.sim.testing.fuzz import VERDICT_COUNTERS, count_roce_candidates, fuzz_frames

    b = FaultyTestbench(dut, backpressure=0.05, idle=0.05)
    await b.start()
    local = b.rng.randbytes(16 * 1024)
    await b.write_local(0, local)
    for k in range(2):
        await b.open(k, pmtu=1024, psn=b.rng.getrandbits(24), mr_bytes=8 << 20)
    n_fuzz = int(PARAMS.get("fuzz_frames", 20000))
    frames = fuzz_frames(n_fuzz, SEED, our_mac=FPGA_MAC, our_ip=FPGA_IP, peer_ip=HOST_IP,
                         qpns=[qpn(k) for k in range(2)], psn_range=(0, 1 << 24))
    n_qps = len(dut.qp_open.value)
    rx_names = ("rx_drop_state", "rx_drop_peer", "cnps")
    per_qp0 = [await read_qp_stats(dut, k, QP_COUNTERS, rx_names) for k in range(n_qps)]
    stats0 = await read_stats(dut, STATS)

    async def throw():
        for k, frame in enumerate(frames):
            b.mac.source.send_nowait(AxiStreamFrame(frame, tuser=0))
            if k % 8 == 7:
                await ClockCycles(dut.clk, 1)
                while b.mac.source.count() > 64:
                    await wait_cycles(W, 16)
    host = []                       # the NIC model's frames: ACKs, and its runts and oversize
    b.mac.taps.append(host.append)
    thrower = cocotb.start_soon(throw())
    jobs = b.jobs(0, 120, local, first_id=0) + b.jobs(1, 120, local, first_id=1000)
    cpls, recvs = await b.run_jobs(jobs)
    await thrower
    for _ in range(100_000):
        if not b.mac.source.count():
            break
        await wait_cycles(W, 64)
    else:
        raise AssertionError(f"{b.mac.source.count()} fuzz frames still queued: the receive port "
                             "stopped taking frames")
    await wait_cycles(W, 2000)
    b.check_delivery(jobs, cpls, recvs)
    stats = await read_stats(dut, STATS)
    d = {k: stats[k] - stats0[k] for k in STATS}
    verdicts = sum(d[k] for k in VERDICT_COUNTERS)
    assert verdicts == d["roce_rx_packets"], "a datagram without exactly one verdict"
    # the NIC model's ACKs all reach port 4791, and so do its runts that hold a UDP header
    # (port 4791 takes datagrams cut-through: they arrive damaged and are dropped as short)
    real_acks = sum(b.nic.counters[k] for k in AETH_SENT)
    expected = count_roce_candidates(frames, FPGA_MAC, FPGA_IP)
    from_host = count_roce_candidates(host, FPGA_MAC, FPGA_IP)
    assert from_host >= real_acks, f"{from_host} of the host's frames on port 4791, {real_acks} ACKs"
    assert d["roce_rx_packets"] == expected + from_host, \
        f"{d['roce_rx_packets']} datagrams on port 4791, expected {expected} + {from_host}; " \
        f"counters {({k: v for k, v in d.items() if v})}"
    assert stats["roce_qp_errors"] == 0
    per_qp = [await read_qp_stats(dut, k, QP_COUNTERS, rx_names) for k in range(n_qps)]
    for name, total in zip(rx_names, ("roce_rx_drop_state", "roce_rx_drop_peer", "roce_rx_cnp")):
        by_qp = [per_qp[k][name] - per_qp0[k][name] for k in range(n_qps)]
        assert sum(by_qp) == d[total], f"per-QP {name} {by_qp} do not add up to {total} {d[total]}"
    assert d["roce_rx_drop_peer"] > 0 and d["roce_rx_drop_state"] > 0, "the fuzz missed a check"
    dut._log.info(f"fuzz: {n_fuzz} frames, {expected} to port 4791; counters "
                  f"{ {k: v for k, v in d.items() if v and k.startswith('roce_rx')} }")
    b.frames_checked(roce=1)
