"""Rates in the FPGA's time: the time records ``rocegen sim serve`` puts before each frame on its
wire (:mod:`rocegen.sim.apps.bridge`), the simulated NIC that keeps them per QP, the host agent that
turns them into rates, and ``rocegen-host recv``, which labels every rate with its clock.
The wall clock of these tests is made to disagree with the simulated cycles, so a rate taken
from the wrong one shows."""

import socket
import threading
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.host import cli
from rocegen.host.agent import Agent, TrafficRun
from rocegen.host.nic import SimNic
from rocegen.sim.apps.bridge import (
    TIME_RECORD,
    FpgaTime,
    FrameReader,
    HostSide,
    encode_frame,
    encode_time,
)
from rocegen.wire.pattern import generator_address, pattern

FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"
CLOCK_HZ = 156_250_000


def roce(dqpn, opcode=0x0A, payload=b"x" * 64):
    """A RoCEv2 frame from the FPGA to the host (0x0A: RDMA WRITE only; 0x11: an ACK)."""
    return bytes(Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP) /
                 UDP(sport=0xC000, dport=4791) / BTH(opcode=opcode, dqpn=dqpn) / Raw(payload))


def test_time_records_are_read_with_their_frame_wherever_the_stream_is_cut():
    frames = [roce(0x40), roce(0x41), roce(0x40, payload=b"y" * 2000)]
    times = [FpgaTime(10, 20, CLOCK_HZ), None, FpgaTime(2**40, 2**40 + 300, 322_265_625)]
    stream = b"".join((encode_time(*t) if t else b"") + encode_frame(f)
                      for f, t in zip(frames, times))
    assert stream[:4] == TIME_RECORD.to_bytes(4, "big")
    for cut in (1, 3, 7, 24, 1000):
        r, got = FrameReader(), []
        for k in range(0, len(stream), cut):
            got += r.feed_stamped(stream[k:k + cut])
        assert got == list(zip(frames, times))
        r, plain = FrameReader(), []
        for k in range(0, len(stream), cut):
            plain += r.feed(stream[k:k + cut])
        assert plain == frames


def test_no_time_records_towards_the_fpga():
    with pytest.raises(ValueError, match="frame length"):
        FrameReader(times=False).feed(encode_time(1, 2, CLOCK_HZ))
    with pytest.raises(ValueError):
        encode_time(5, 4, CLOCK_HZ)         # a frame ends after it starts


def test_serve_side_sends_the_time_before_each_frame_from_the_fpga():
    side = HostSide(fpga_mac=FPGA_MAC, fpga_ip=FPGA_IP, host_mac=HOST_MAC, host_ip=HOST_IP,
                    cm_port=0, wire_port=0, log=lambda text: None)
    try:
        peer = socket.create_connection(("127.0.0.1", side.wire_port))
        for _ in range(100):
            side.poll(0.01)
            if side.peers:
                break
        side.from_fpga(roce(0x40), (100, 140, CLOCK_HZ))
        side.from_fpga(roce(0x41))
        r, got = FrameReader(), []
        peer.settimeout(5)
        while len(got) < 2:
            got += r.feed_stamped(peer.recv(65536))
        assert got == [(roce(0x40), FpgaTime(100, 140, CLOCK_HZ)), (roce(0x41), None)]
        peer.close()
    finally:
        side.close()


class Wire:
    """A stand-in for ``rocegen sim serve``'s wire: one connection, frames written by the test."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conn = None

    def accept(self):
        self.conn, _ = self.server.accept()

    def send(self, frame, time=None):
        self.conn.sendall((encode_time(*time) if time else b"") + encode_frame(frame))

    def close(self):
        if self.conn:
            self.conn.close()
        self.server.close()


@pytest.fixture
def wire_nic():
    wire = Wire()
    t = threading.Thread(target=wire.accept)
    t.start()
    nic = SimNic(("127.0.0.1", wire.port), mac=HOST_MAC, ip=HOST_IP)
    t.join()
    yield wire, nic
    nic.close()
    wire.close()


def _until(predicate):
    """Poll (a bounded number of times, not a speed requirement) until ``predicate()``."""
    for _ in range(1000):
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("never happened")


def test_sim_nic_keeps_the_fpga_time_of_each_qps_data_frames(wire_nic):
    wire, nic = wire_nic
    assert nic.fpga_time(0x40) is None
    wire.send(roce(0x40), (1000, 1010, CLOCK_HZ))
    wire.send(roce(0x41), (1011, 1020, CLOCK_HZ))              # another QP
    wire.send(roce(0x40, opcode=0x11), (1021, 1022, CLOCK_HZ))  # not data (an ACK's opcode)
    wire.send(roce(0x40))                                      # no time record
    wire.send(roce(0x40, opcode=0x06), (1500, 1600, CLOCK_HZ))  # WRITE first
    _until(lambda: nic.rnic.counters["rx_frames"] == 5)
    assert nic.fpga_time(0x40) == {"first_cycle": 1000, "last_cycle": 1600, "clock_hz": CLOCK_HZ,
                                   "frames": 2}
    assert nic.fpga_time(0x41)["frames"] == 1
    nic.fpga_time_reset(0x40)
    assert nic.fpga_time(0x40) is None
    wire.send(roce(0x40, opcode=0x04), (2000, 2005, CLOCK_HZ))  # SEND only
    _until(lambda: nic.fpga_time(0x40) is not None)
    assert nic.fpga_time(0x40) == {"first_cycle": 2000, "last_cycle": 2005, "clock_hz": CLOCK_HZ,
                                   "frames": 1}


def test_run_rates_in_fpga_time_come_from_the_cycles():
    # 10 messages of 4 KiB checked in 100 s of wall clock; 1000 cycles at 156.25 MHz (6.4 us)
    run = TrafficRun("WRITE", 4096, 10, 0, 1 << 20, t_start=100.0, verified=10, t_done=200.0,
                     fpga={"first_cycle": 5000, "last_cycle": 5999, "clock_hz": CLOCK_HZ})
    s = run.summary()
    assert s["gbps"] == pytest.approx(40960 * 8 / 100 / 1e9)            # the wall clock
    assert s["fpga_cycles"] == 1000 and s["fpga_clock_mhz"] == 156.25
    assert s["fpga_seconds"] == pytest.approx(6.4e-6)
    assert s["fpga_gbps"] == pytest.approx(51.2)
    assert s["fpga_mmsgs"] == pytest.approx(10 / 6.4e-6 / 1e6)
    # a done run keeps the FPGA time it had when it was done
    later = {"first_cycle": 5000, "last_cycle": 99999, "clock_hz": CLOCK_HZ}
    assert run.summary(fpga=later)["fpga_gbps"] == pytest.approx(51.2)
    # one still going takes the NIC's of now; without one (a real NIC) there is none
    run.t_done = None
    assert run.summary(now=150.0, fpga=later)["fpga_cycles"] == 95000
    assert run.summary(now=150.0)["fpga_gbps"] is None


class FakeNic:
    """A NIC whose memory the test writes as the FPGA would, with an FPGA time it sets."""

    local_ip = HOST_IP

    def __init__(self):
        self.mem = {}
        self.time = {}
        self.resets = []
        self.lock = threading.Lock()

    def create_qp(self, recv_depth):
        return 0x123

    def register(self, length):
        self.mem = bytearray(length)
        return 0, 0x55

    def connect_qp(self, *args):
        pass

    def post_recv(self, *args):
        pass

    def poll(self, max_entries=64, timeout=0.0):
        time.sleep(timeout)
        return []

    def read(self, addr, length):
        with self.lock:
            return bytes(self.mem[addr:addr + length])

    def fill(self, addr, length, value=0):
        with self.lock:
            self.mem[addr:addr + length] = bytes([value]) * length

    def fpga_write(self, s, size, first, last):
        """Message ``s`` of the generator arrives, its frames at cycles ``first``..``last``."""
        with self.lock:
            self.mem[s * size:(s + 1) * size] = pattern(generator_address(s), size)
            t = self.time.setdefault(0x123, {"first_cycle": first, "clock_hz": CLOCK_HZ})
            t["last_cycle"] = last

    def fpga_time(self, qpn):
        with self.lock:
            return dict(self.time[qpn]) if qpn in self.time else None

    def fpga_time_reset(self, qpn):
        self.resets.append(qpn)
        with self.lock:
            self.time.pop(qpn, None)

    def destroy_qp(self, qpn):
        pass

    def counters(self):
        return {}


class FakeCm:
    fpga = ("127.0.0.1", 17185)

    def __init__(self):
        self.traffic_sent = []

    def open(self, **kw):
        return {"fpga_qpn": 256, "fpga_psn": 0x1000, "rkey": 0, "base": 0, "length": 0}

    def traffic(self, *args, **kw):
        self.traffic_sent.append(args)

    def close_qp(self, **kw):
        pass


def test_agent_measures_a_run_between_its_frames_in_fpga_time():
    nic, cm = FakeNic(), FakeCm()
    agent = Agent(nic, cm, FPGA_IP, window=1 << 16, recv_depth=1, recv_size=4096)
    try:
        agent.open(1)
        nic.time[0x123] = {"first_cycle": 1, "last_cycle": 2, "clock_hz": 1}    # an older run
        agent.traffic(op="WRITE", size=4096, count=2)
        assert nic.resets == [0x123] and nic.fpga_time(0x123) is None and cm.traffic_sent
        nic.fpga_write(0, 4096, 10_000, 10_300)
        nic.fpga_write(1, 4096, 10_301, 10_599)
        _until(lambda: agent.progress()[0]["done"])
        (row,) = agent.progress()
        assert row["ok"] and row["fpga_cycles"] == 600
        assert row["fpga_gbps"] == pytest.approx(8192 * 8 / (600 / CLOCK_HZ) / 1e9)
        nic.fpga_write(1, 4096, 10_301, 50_000)        # later frames do not change a done run
        assert agent.progress()[0]["fpga_cycles"] == 600
    finally:
        agent.shutdown()


def _row(**kw):
    row = {"fpga_qpn": 256, "op": "WRITE", "size": 4096, "count": 10, "verified": 10, "bad": 0,
           "errors": [], "done": True, "ok": True, "seconds": 100.0, "gbps": 0.0003,
           "mmsgs": 1e-7, "fpga_cycles": None, "fpga_clock_mhz": None, "fpga_seconds": None,
           "fpga_gbps": None, "fpga_mmsgs": None}
    return {**row, **kw}


SIM = {"fpga_cycles": 1000, "fpga_clock_mhz": 322.265625, "fpga_seconds": 1000 / 322.265625e6,
       "fpga_gbps": 105.6, "fpga_mmsgs": 3.2}


def test_recv_labels_every_rate_with_its_clock(monkeypatch, capsys, tmp_path):
    replies = [{"ok": True, "result": [_row(**SIM)]}, {"ok": True, "result": [_row()]}]
    monkeypatch.setattr(cli, "request", lambda *a, **kw: replies.pop(0))
    assert cli.main(["--state-dir", str(tmp_path), "recv", "--no-progress"]) == 0
    sim = capsys.readouterr().out
    assert "FPGA Gb/s" in sim and "wall Gb/s" in sim
    assert "Gb/s (FPGA time, 322.27 MHz core clock)" in sim and "Gb/s (wall clock)" in sim
    line = sim.splitlines()[1].split()
    assert line[6:10] == ["1000", "3.1", "105.600", "3200.00"] and line[11] == "0.000"
    assert cli.main(["--state-dir", str(tmp_path), "recv", "--no-progress"]) == 0
    real = capsys.readouterr().out      # a real NIC: the wall clock only, and said so
    assert "FPGA" not in real.replace("FPGA QP", "") and "Gb/s (wall clock)" in real


def test_progress_bar_says_its_clock():
    assert cli._bar([_row(verified=5, **SIM)]).endswith(
        "105.600 Gb/s   3200.00 kmsg/s (FPGA time, 322.27 MHz core clock)")
    assert cli._bar([_row(verified=5)]).endswith("0.000 Gb/s      0.00 kmsg/s (wall clock)")
