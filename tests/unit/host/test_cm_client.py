"""The host's connection-manager client against the connection manager's reference model behind
a real UDP socket (and against silence), and the host command's errors."""

import json
import socket
import socketserver
import subprocess
import sys
import threading
import time

import pytest

from rocegen.host.agent import Agent, request, serve
from rocegen.host.cli import main
from rocegen.host.cm_client import CmClient, CmError
from rocegen.host.nic import NicError, SimNic, open_nic
from rocegen.sim.models.cm import cm as M
from rocegen.wire.addr import parse_ip

FPGA_IP, HOST_IP = "10.0.0.2", "10.0.0.1"


class ModelFpga:
    """The connection manager's model answering on a loopback UDP port; ``drop_replies``: the
    first N replies are lost (the requests still take effect); ``delay_first``: the first reply
    leaves that many seconds late; ``silent`` set: requests are not even received."""

    def __init__(self, num_qps=2, drop_replies=0, allow_net=None, delay_first=0.0, **params):
        self.model = M.ConnectionManagerModel(num_qps, local_ip=parse_ip(FPGA_IP),
                                              allow_net=allow_net, **params)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.drop = drop_replies
        self.delay_first = delay_first
        self.requests = []
        self.silent = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                data, (addr, sport) = self.sock.recvfrom(4096)
            except OSError:
                return
            if self.silent:
                continue
            self.requests.append(data)
            res = self.model.receive(data, src_ip=parse_ip(HOST_IP), src_port=sport)
            if res.reply is None:
                continue
            if self.drop:
                self.drop -= 1
                continue
            args = (res.reply.payload, ("127.0.0.1", res.reply.dst_port))
            if self.delay_first:
                threading.Timer(self.delay_first, self.sock.sendto, args).start()
                self.delay_first = 0.0
            else:
                self.sock.sendto(*args)

    def close(self):
        self.sock.close()


class MemNic:
    """A host NIC of memory alone: QPs, regions and receive buffers that do nothing."""

    local_ip = HOST_IP

    def __init__(self):
        self.next = 1

    def create_qp(self, depth):
        self.next += 1
        return self.next

    def register(self, length):
        return 0x1000 * self.next, 7

    def connect_qp(self, *args, **kw):
        pass

    def destroy_qp(self, qpn):
        pass

    def post_recv(self, *args):
        pass

    def poll(self, max_entries=64, timeout=0.0):
        time.sleep(timeout)
        return []

    def fill(self, addr, length, value=0):
        pass

    def read(self, addr, length):
        return bytes(length)

    def counters(self):
        return {}

    def fpga_time(self, qpn):
        return None

    def fpga_time_reset(self, qpn):
        pass


def serving(agent, sock, **kw):
    """The agent's control socket served from a thread (returned) once ``sock`` exists."""
    server = threading.Thread(target=serve, args=(agent, sock), kwargs=kw, daemon=True)
    server.start()
    for _ in range(500):
        if sock.exists():
            break
        time.sleep(0.01)
    return server


@pytest.fixture
def fpga():
    f = ModelFpga()
    yield f
    f.close()


def client(fpga, **kw):
    return CmClient("127.0.0.1", fpga.port, timeout=kw.pop("timeout", 0.3), **kw)


def test_open_close_and_refusals(fpga):
    cm = client(fpga)
    ip = parse_ip(HOST_IP)
    a = cm.open_qp(qpn=0x11, psn=0x100, rkey=5, vaddr=0x1000, ip=ip, pmtu=1024, timeout=3,
                   retry_cnt=2, rnr_retry=7)
    b = cm.open_qp(qpn=0x12, psn=0x200, rkey=6, vaddr=0x2000, ip=ip)
    assert a == (256, 0x100) and b == (257, 0x200)
    ctx = fpga.model.context[0]
    assert (ctx["pmtu_log2"], ctx["timeout"], ctx["retry_cnt"]) == (10, 3, 2)
    with pytest.raises(CmError) as e:
        cm.open_qp(qpn=0x13, psn=0x300, rkey=7, vaddr=0x3000, ip=ip)
    assert e.value.kind == "no_qp" and "NO_QP" in str(e.value)
    cm.close_qp(qpn=0x11, psn=0x100, fpga_qpn=256)
    with pytest.raises(CmError) as e:
        cm.close_qp(qpn=0x11, psn=0x100, fpga_qpn=256)
    assert e.value.kind == "nak"
    # every request named our socket as the place for replies
    assert {M.unpack(r)["listening_port"] for r in fpga.requests} == {cm.listen_port}
    cm.close()


def test_region_and_query_of_an_fpga_with_the_responder():
    regions = [{"rkey": 0xAB00 + k, "base": 0x1000 * k, "length": 0x800 + k} for k in range(2)]
    fpga = ModelFpga(regions=regions, query=True)
    fpga.model.counts = (123456789012, 7)
    cm = client(fpga)
    ip = parse_ip(HOST_IP)
    try:
        a = cm.open(qpn=0x11, psn=0x100, rkey=5, vaddr=0x1000, ip=ip)
        b = cm.open(qpn=0x12, psn=0x200, rkey=6, vaddr=0x2000, ip=ip)
        assert a == {"fpga_qpn": 256, "fpga_psn": 0x100, "rkey": 0xAB00, "base": 0,
                     "length": 0x800}
        assert (b["rkey"], b["base"], b["length"]) == (0xAB01, 0x1000, 0x801)
        assert cm.query() == (123456789012, 7)
        assert cm.query(qpn=0x11, psn=0x42) == (123456789012, 7)
    finally:
        cm.close()
        fpga.close()


def test_query_without_a_pattern_sink_is_a_timeout(fpga):
    cm = client(fpga, timeout=0.05, retries=1)
    with pytest.raises(CmError) as e:
        cm.query()
    assert e.value.kind == "timeout" and "pattern sink" in str(e.value) and cm.sent == 2
    # an FPGA without the responder names no region
    r = cm.open(qpn=0x11, psn=0x100, rkey=5, vaddr=0x1000, ip=parse_ip(HOST_IP))
    assert (r["rkey"], r["base"], r["length"]) == (0, 0, 0)
    cm.close()


def test_no_answer_is_a_timeout_after_the_retries():
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    cm = CmClient("127.0.0.1", silent.getsockname()[1], timeout=0.05, retries=2)
    with pytest.raises(CmError) as e:
        cm.request(M.REQ_OPEN_QP, loc_qpn=1, loc_psn=2)
    assert e.value.kind == "timeout" and cm.sent == 3
    cm.close()
    silent.close()


def test_a_late_open_reply_is_closed_again():
    fpga = ModelFpga(num_qps=4, delay_first=0.3)     # arrives after the client sent it again
    cm = client(fpga, timeout=0.2)
    qpn, _ = cm.open_qp(qpn=0x21, psn=1, rkey=1, vaddr=0, ip=parse_ip(HOST_IP))
    assert qpn == 257                     # the retry's reply came first
    # the late reply named 256: the client closed it, so only 257 is in use
    assert [fpga.model.in_use[k] for k in range(4)] == [False, True, False, False]
    cm.close()
    fpga.close()


def test_sim_nic_without_a_server_says_what_to_do():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(NicError, match="rocegen sim serve"):
        SimNic(("127.0.0.1", port))
    with pytest.raises(NicError, match="sim:HOST:PORT"):
        open_nic("sim:localhost:x")


def test_a_real_nic_that_is_not_there_is_a_clear_error():
    # this machine has no RDMA device (and maybe no pyverbs): either way a sentence, no traceback
    with pytest.raises(NicError, match="pyverbs|RDMA device"):
        open_nic("mlx5_0")


def _host(*args, state):
    return subprocess.run([sys.executable, "-m", "rocegen.host.cli", "--state-dir", str(state),
                           *args], capture_output=True, text=True, timeout=120)


def test_host_command_errors(tmp_path):
    r = _host("status", state=tmp_path)
    assert r.returncode == 1 and "no host agent is running" in r.stderr
    r = _host("connect", "--qps", "0", state=tmp_path)
    assert r.returncode == 2 and "--qps must be >= 1" in r.stderr
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = _host("connect", "--sim", "--device", f"sim:127.0.0.1:{port}", state=tmp_path)
    assert r.returncode == 1 and "start `rocegen sim serve` first" in r.stderr
    r = _host("connect", "--device", "mlx5_0", "--fpga", FPGA_IP, state=tmp_path)
    assert r.returncode == 1 and ("pyverbs" in r.stderr or "RDMA device" in r.stderr)


class NoNic:
    """A NIC with nothing to do: the agent's control socket needs no NIC work."""
    local_ip = HOST_IP

    def poll(self, max_entries=64, timeout=0.0):
        threading.Event().wait(timeout)
        return []

    def counters(self):
        return {}


def test_agent_control_socket_refuses_malformed_requests(tmp_path):
    """The agent answers bad requests with an error and keeps serving (no NIC work involved)."""
    fpga = ModelFpga()
    cm = client(fpga)
    agent = Agent(NoNic(), cm, FPGA_IP)
    sock = tmp_path / "agent.sock"
    server = serving(agent, sock, keep=True)
    s = socket.socket(socket.AF_UNIX)
    s.connect(str(sock))
    s.sendall(b"not json\n")
    assert json.loads(s.makefile().readline())["kind"] == "usage"
    s.close()
    for req in ({"no": "cmd"}, {"cmd": "explode"}, {"cmd": "traffic", "op": "READ"},
                {"cmd": "status", "bogus": 1}, {"cmd": "close"}):
        reply = request(sock, req)
        assert reply["ok"] is False and reply["error"], req
    assert request(sock, {"cmd": "status"})["result"]["qps"] == []
    assert request(sock, {"cmd": "shutdown"})["ok"]
    server.join(timeout=10)
    assert not server.is_alive()
    cm.close()
    fpga.close()


def test_agent_socket_appears_only_once_it_listens(tmp_path, monkeypatch):
    """A client that sees the control socket's path is answered, even when the agent is slow
    between binding and listening: the path is put in place after ``listen``."""
    listen = socketserver.TCPServer.server_activate

    def slow_activate(self):
        time.sleep(0.3)
        listen(self)

    monkeypatch.setattr(socketserver.TCPServer, "server_activate", slow_activate)

    fpga = ModelFpga()
    cm = client(fpga)
    sock = tmp_path / "agent.sock"
    server = serving(Agent(NoNic(), cm, FPGA_IP), sock, keep=True)
    assert sock.exists()
    assert request(sock, {"cmd": "status"})["result"]["qps"] == []
    assert request(sock, {"cmd": "shutdown"})["ok"]
    server.join(timeout=10)
    assert not server.is_alive() and not sock.exists()
    assert not list(tmp_path.glob("*.tmp"))
    cm.close()
    fpga.close()


def test_agent_sends_one_run_at_a_time():
    """The FPGA's generator holds one run besides the one going: the agent sends a run's
    datagram only once the runs sent before are complete here."""
    fpga = ModelFpga(num_qps=2)
    cm = client(fpga)
    agent = Agent(MemNic(), cm, FPGA_IP)
    agent.open(2)
    runs = agent.traffic(op="SEND", size=100, count=3)
    assert [r["queued"] for r in runs] == [False, True]
    time.sleep(0.3)
    traffic = [M.unpack(r) for r in fpga.requests if M.unpack(r)["txmeta_valid"]]
    assert [t["rem_qpn"] for t in traffic] == [256]          # the second waits
    with agent.lock:                                          # the first run completes here
        agent.qps[256].run.t_done = time.monotonic()
    for _ in range(100):
        traffic = [M.unpack(r) for r in fpga.requests if M.unpack(r)["txmeta_valid"]]
        if len(traffic) == 2:
            break
        time.sleep(0.02)
    assert [t["rem_qpn"] for t in traffic] == [256, 257]
    assert agent.progress(257)[0]["queued"] is False
    agent.shutdown()
    cm.close()
    fpga.close()


@pytest.mark.parametrize("answered", [True, False])
def test_stop_says_whether_the_fpga_closed_every_qp(tmp_path, capsys, answered):
    """``rocegen-host stop`` closes the agent's QPs with the FPGA and exits with status 0; when
    the FPGA does not confirm a close (it has gone silent), with status 1 and the reason, since
    that QP may still be open there."""
    fpga = ModelFpga(num_qps=2)
    cm = client(fpga, timeout=0.05, retries=1)
    agent = Agent(MemNic(), cm, FPGA_IP)
    agent.open(2)
    server = serving(agent, tmp_path / "agent.sock")
    fpga.silent = not answered
    assert main(["--state-dir", str(tmp_path), "stop"]) == (0 if answered else 1)
    out = capsys.readouterr().out
    assert out.count("closed QP") == 2 and "host agent stopped" in out
    assert ("the FPGA answered: no reply" in out) is not answered
    server.join(timeout=10)
    assert not server.is_alive() and not agent.qps
    # what the FPGA holds: both QPs free again, or both still open
    assert fpga.model.qp_open == (0 if answered else 0b11)
    cm.close()
    fpga.close()
