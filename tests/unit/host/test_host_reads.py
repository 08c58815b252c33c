"""The host agent's RDMA READs, both ways, against an FPGA made of a fake NIC and a fake
connection manager (in memory, no simulator): the READ depths stated in OPEN_QP and taken from
its reply, the host's READs of the FPGA's region checked byte for byte against the test pattern
of their FPGA addresses, and the FPGA's READ runs of the host's memory (filled with the pattern
of the local addresses the bytes land at) judged by the pattern sink's counters over QUERY."""

import threading
import time

import pytest

from rocegen.host.agent import Agent, AgentError
from rocegen.host.cm_client import CmClient
from rocegen.host.nic import SendCpl
from rocegen.sim.models.cm import cm as M
from rocegen.wire.pattern import pattern

FPGA_IP, HOST_IP = "10.0.0.2", "10.0.0.1"
#: the FPGA's region of every QP: base, length (not a power of two: a READ run's window is the
#: largest power of two in it)
BASE, LENGTH = 0x2000, 0x5000


class FakeFpga:
    """The FPGA's memory (its region holds the test pattern of its addresses) and pattern sink,
    seen by the fake NIC and the fake connection manager."""

    def __init__(self, rd_depth, rd_atomic=16):
        self.rd_depth, self.rd_atomic = rd_depth, rd_atomic
        self.mem = bytearray(pattern(0, BASE + LENGTH))
        self.checked = self.wrong = 0
        self.lock = threading.Lock()
        self.opened, self.runs = [], []


class FakeNic:
    """A host NIC whose READs read the fake FPGA's memory; its send completions in order."""

    local_ip = HOST_IP

    def __init__(self, fpga):
        self.fpga = fpga
        self.mem = bytearray()
        self.done = []
        self.connected = []
        self.rkeys = []
        self.lock = threading.Lock()

    def read_limits(self):
        return 16, 16

    def create_qp(self, recv_depth):
        return 0x123

    def register(self, length):
        self.mem = bytearray(length)
        return 0, 0x55

    def connect_qp(self, qpn, fpga_qpn, fpga_ip, epsn, pmtu, **depths):
        self.connected.append(depths)

    def post_recv(self, *args):
        pass

    def poll(self, max_entries=64, timeout=0.0):
        time.sleep(timeout)
        return []

    def post_send(self, qpn, wr_id, op, addr, length, *, remote_addr=0, rkey=0, imm=None):
        assert op == "READ"
        self.rkeys.append(rkey)
        with self.lock:
            if rkey != 0xAB00:          # not the region's: NAK remote access error
                self.done.append(SendCpl(qpn, wr_id, "REM_ACCESS_ERR"))
                return
            self.mem[addr:addr + length] = self.fpga.mem[remote_addr:remote_addr + length]
            self.done.append(SendCpl(qpn, wr_id, "SUCCESS"))

    def poll_send(self, max_entries=64, timeout=0.0):
        with self.lock:
            out, self.done = self.done[:max_entries], self.done[max_entries:]
        return out

    def read(self, addr, length):
        with self.lock:
            return bytes(self.mem[addr:addr + length])

    def write(self, addr, data):
        with self.lock:
            self.mem[addr:addr + len(data)] = data

    def fill(self, addr, length, value=0):
        self.write(addr, bytes([value]) * length)

    def fpga_time(self, qpn):
        return None

    def fpga_time_reset(self, qpn):
        pass

    def destroy_qp(self, qpn):
        pass

    def counters(self):
        return {}


class FakeCm:
    """The connection manager: OPEN_QP's reply states ``rd_depth``; a READ run's datagram makes
    the FPGA read the host's memory (through ``nic``) into its local memory at the same offsets,
    its pattern sink counting every byte; QUERY answers the counters."""

    fpga = ("127.0.0.1", 17185)

    def __init__(self, fpga, nic, spoil=None):
        self.f, self.nic, self.spoil = fpga, nic, spoil

    def open(self, *, read_depths, **kw):
        self.f.opened.append(read_depths)
        return {"fpga_qpn": 256, "fpga_psn": 0x1000, "rkey": 0xAB00, "base": BASE,
                "length": LENGTH, "rd_atomic": self.f.rd_atomic, "rd_depth": self.f.rd_depth}

    def traffic(self, fpga_qpn, size, count, spacing=0, *, write=True, imm=False,
                window_log2=0, read=False):
        self.f.runs.append((fpga_qpn, size, count, window_log2, read, write))
        window = 1 << window_log2
        for s in range(count):
            off = (s * size) % window
            got = bytearray(self.nic.read(off, size))        # the host's region is at 0
            if self.spoil is not None and s == self.spoil:
                got[7] ^= 0x10
            want = pattern(off, size)
            with self.f.lock:
                self.f.checked += size
                self.f.wrong += sum(a != b for a, b in zip(got, want))

    def query(self):
        with self.f.lock:
            return self.f.checked, self.f.wrong

    def close_qp(self, **kw):
        pass


def agent_for(rd_depth=16, spoil=None, rd_atomic=16):
    fpga = FakeFpga(rd_depth, rd_atomic)
    nic = FakeNic(fpga)
    cm = FakeCm(fpga, nic, spoil)
    agent = Agent(nic, cm, FPGA_IP, window=1 << 16, recv_depth=1, recv_size=4096)
    return agent, fpga, nic


@pytest.mark.parametrize("rd_depth, rd_atomic", [(16, 16), (4, 4), (0, 1), (255, 16)])
def test_read_depths_are_stated_and_taken(rd_depth, rd_atomic):
    agent, fpga, nic = agent_for(rd_depth)
    try:
        (q,) = agent.open(1)
    finally:
        agent.shutdown()
    assert fpga.opened == [(16, 16)]
    assert (q["rd_atomic"], q["rd_depth"]) == (rd_atomic, 16)
    assert nic.connected == [{"rd_atomic": rd_atomic, "rd_depth": 16}]


def test_host_reads_check_every_byte():
    agent, fpga, nic = agent_for()
    try:
        agent.open(1)
        # 7 messages of 0x1800 bytes: 3 fit the region, so messages 3.. read 0, 1, 2 again
        r = agent.read(size=0x1800, count=7)
        assert r["ok"] and (r["checked"], r["wrong"]) == (7 * 0x1800, 0), r
        assert r["qps"][0]["first_addr"] == BASE and r["qps"][0]["messages"] == 7
        fpga.mem[BASE + 0x1800 + 5] ^= 0xFF        # message 1's (and 4's) sixth byte
        fpga.mem[BASE + 2 * 0x1800 + 9] ^= 0x01    # message 2's (and 5's)
        bad = agent.read(size=0x1800, count=6)
        assert not bad["ok"] and (bad["checked"], bad["wrong"]) == (6 * 0x1800, 4), bad
        errors = bad["qps"][0]["errors"]
        assert errors[0] == (f"message 1: 1 of {0x1800} bytes read differ from the test pattern "
                             f"of FPGA address {BASE + 0x1800:#x}, the first at "
                             f"{BASE + 0x1800 + 5:#x}")
        assert len(errors) == 4
        with pytest.raises(AgentError, match="larger than the FPGA's region"):
            agent.read(size=LENGTH + 1, count=1)
    finally:
        agent.shutdown()


def test_host_reads_with_another_rkey_fail():
    """``rkey`` (``read --rkey``, for fault testing): the READs carry it instead of the region's
    R_Key; the FPGA's NAK ends the run and puts the QP in ERROR, where it takes no more."""
    agent, fpga, nic = agent_for()
    try:
        agent.open(1)
        with pytest.raises(AgentError, match="32-bit"):
            agent.read(size=100, count=1, rkey=1 << 32)
        bad = agent.read(size=100, count=1, rkey=0xAB01)
        assert not bad["ok"] and bad["qps"][0]["messages"] == 0, bad
        assert bad["qps"][0]["errors"] == ["message 0: REM_ACCESS_ERR"], bad
        assert nic.rkeys == [0xAB01]
        assert [q["state"] for q in agent.status()["qps"]] == ["ERROR"]
        with pytest.raises(AgentError, match="is in ERROR"):
            agent.read(size=100, count=1)
    finally:
        agent.shutdown()


def _done(agent):
    for _ in range(400):            # a bound on polls, not a speed requirement
        rows = agent.progress()
        if all(r["done"] for r in rows):
            return rows
        time.sleep(0.02)
    raise AssertionError(f"the run never ended: {agent.progress()}")


@pytest.mark.parametrize("count, size", [(5, 3000), (40, 3000), (1, 0x4000)])
def test_fpga_read_run_is_judged_by_the_sink(count, size):
    agent, fpga, nic = agent_for()
    try:
        agent.open(1)
        agent.traffic(op="READ", size=size, count=count)
        (row,) = _done(agent)
    finally:
        agent.shutdown()
    # the window: the largest power of two in the region (0x5000 bytes), within the agent's
    window = 0x4000
    assert fpga.runs == [(256, size, count, 14, True, False)]
    assert row["ok"] and row["window"] == window, row
    assert (row["checked"], row["wrong"]) == (count * size, 0), row
    assert row["verified"] == count and row["bad"] == 0


def test_fpga_read_run_with_wrong_bytes_fails():
    agent, fpga, nic = agent_for(spoil=2)
    try:
        agent.open(1)
        agent.traffic(op="READ", size=3000, count=4)
        (row,) = _done(agent)
    finally:
        agent.shutdown()
    assert not row["ok"] and (row["checked"], row["wrong"]) == (4 * 3000, 1), row
    assert row["errors"] == ["the FPGA's pattern sink found 1 of 12000 bytes wrong"]


def test_fpga_read_run_larger_than_the_window_is_refused():
    agent, fpga, nic = agent_for()
    try:
        agent.open(1)
        with pytest.raises(AgentError, match="READ size 16385 is larger than the window"):
            agent.traffic(op="READ", size=0x4001, count=1)
    finally:
        agent.shutdown()
    assert fpga.runs == []


def test_fpga_read_run_needs_an_fpga_that_reads():
    """An FPGA whose OPEN_QP reply states no READ depths (built without the READ requester)
    gets no READ run; the host still READs it, one READ at a time."""
    agent, fpga, nic = agent_for(rd_depth=0, rd_atomic=0)
    try:
        (q,) = agent.open(1)
        with pytest.raises(AgentError, match="built without the READ requester") as e:
            agent.traffic(op="READ", size=1000, count=1)
        assert e.value.kind == "no_reads"
        assert agent.read(size=1000, count=2)["ok"]
    finally:
        agent.shutdown()
    assert fpga.runs == [] and q["rd_atomic"] == 1 and q["fpga_reads"] == [0, 0]


def test_cm_client_states_and_reads_the_depths():
    """The request's bytes 56-57 hold ours; the reply's give the FPGA's (the connection
    manager's model answering on a loopback socket, with the reply's depths set)."""
    import socket
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    seen = []

    def answer():
        data, addr = sock.recvfrom(4096)
        seen.append(data)
        req = M.unpack(data)
        reply = M.pack(ack_valid=1, req_type=M.REQ_OPEN_QP, ack_type=M.ACK_ACK, loc_qpn=256,
                       rem_qpn=req["loc_qpn"], rem_psn=req["loc_psn"])
        sock.sendto(M.with_read_depths(reply, 8, 12), addr)
    t = threading.Thread(target=answer, daemon=True)
    t.start()
    cm = CmClient("127.0.0.1", sock.getsockname()[1], timeout=2.0, retries=0)
    try:
        r = cm.open(qpn=0x44, psn=5, rkey=1, vaddr=0, ip=1, read_depths=(16, 300))
    finally:
        cm.close()
        t.join(timeout=5)
        sock.close()
    assert M.read_depths(seen[0]) == (16, 255)
    assert (r["fpga_qpn"], r["rd_atomic"], r["rd_depth"]) == (256, 8, 12)
