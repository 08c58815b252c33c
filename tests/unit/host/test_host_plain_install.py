"""``rocegen-host --sim`` needs nothing but Python: with Amaranth, cocotb and scapy made
unimportable (as after a plain ``pip install rocegen``, which declares no dependencies), the host
agent opens a QP with a simulated FPGA through the simulated NIC, reports it and closes it.

The simulated FPGA is a stand-in in this process: a TCP wire that takes the simulated NIC's
connection (as ``rocegen sim serve``'s does) and the connection manager's reference model
answering on a UDP port. The blocker is a ``sitecustomize`` module on ``PYTHONPATH``, so that it
holds in the command and in the agent it starts in the background."""

import shutil
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from rocegen.sim.models.cm import cm as M
from rocegen.wire.addr import parse_ip
from rocegen.wire.simwire import FPGA_IP, HOST_IP, FrameReader

BLOCKED = ("amaranth", "cocotb", "scapy")

_BLOCKER = textwrap.dedent(f"""
    import importlib.abc, sys

    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BLOCKED!r}:
                raise ImportError(f"{{name}} is not installed here")
            return None

    sys.meta_path.insert(0, _Block())
""")


class FakeFpga:
    """The simulated FPGA's side: the wire (its frames are read and dropped) and the connection
    manager (the reference model, its replies sent back to the requester's port)."""

    def __init__(self):
        self.wire = socket.create_server(("127.0.0.1", 0))
        self.wire_port = self.wire.getsockname()[1]
        self.cm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.cm.bind(("127.0.0.1", 0))
        self.cm.settimeout(0.2)
        self.cm_port = self.cm.getsockname()[1]
        self.model = M.ConnectionManagerModel(2, local_ip=parse_ip(FPGA_IP))
        self.requests = []
        self.frames = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve_wire, daemon=True),
                         threading.Thread(target=self._serve_cm, daemon=True)]
        for t in self._threads:
            t.start()

    def _serve_wire(self):
        self.wire.settimeout(0.2)
        conns, reader = [], FrameReader(times=False)
        while not self._stop.is_set():
            try:
                conn, _ = self.wire.accept()
                conn.settimeout(0.05)
                conns.append(conn)
            except TimeoutError:
                pass
            for conn in conns:
                try:
                    self.frames += len(reader.feed(conn.recv(65536)))
                except TimeoutError:
                    pass
        for conn in conns:
            conn.close()

    def _serve_cm(self):
        while not self._stop.is_set():
            try:
                data, addr = self.cm.recvfrom(2048)
            except TimeoutError:
                continue
            self.requests.append(M.unpack(data)["req_type"])
            # (in the simulated world the datagram comes from the host's address)
            res = self.model.receive(data, src_ip=parse_ip(HOST_IP), src_port=addr[1])
            if res.reply is not None:
                self.cm.sendto(res.reply.payload, ("127.0.0.1", res.reply.dst_port))

    def close(self):
        self._stop.set()
        for t in self._threads:
            t.join()
        self.wire.close()
        self.cm.close()


@pytest.fixture
def plain_env(tmp_path):
    """An environment whose Pythons cannot import Amaranth, cocotb or scapy."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_BLOCKER)
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)}


def _host_command():
    script = Path(sys.executable).parent / "rocegen-host"
    if script.exists():
        return [str(script)]
    found = shutil.which("rocegen-host")
    return [found] if found else [sys.executable, "-m", "rocegen.host.cli"]


def test_the_blocker_hides_what_a_plain_install_lacks(plain_env):
    """(So that the test below can fail.)"""
    for name in BLOCKED:
        r = subprocess.run([sys.executable, "-c", f"import {name}"], env=plain_env,
                           capture_output=True, text=True)
        assert r.returncode != 0 and f"{name} is not installed here" in r.stderr, name
    r = subprocess.run([sys.executable, "-c", "import rocegen.sim.testing.scenarios"],
                       env=plain_env, capture_output=True, text=True)
    assert r.returncode != 0 and "scapy is not installed here" in r.stderr


def test_rocegen_host_sim_runs_on_a_plain_install(plain_env, tmp_path):
    fpga = FakeFpga()
    state = tmp_path / "state"
    host = [*_host_command(), "--state-dir", str(state)]

    def run(*args):
        return subprocess.run([*host, *args], env=plain_env, capture_output=True, text=True,
                              timeout=60)

    try:
        r = run("connect", "--sim", "--device", f"sim:127.0.0.1:{fpga.wire_port}",
                "--cm-port", str(fpga.cm_port), "--json")
        assert r.returncode == 0, r.stdout + r.stderr + (state / "agent.log").read_text()
        assert M.REQ_OPEN_QP in fpga.requests
        r = run("status")
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"FPGA {FPGA_IP}" in r.stdout and f"at {HOST_IP}" in r.stdout, r.stdout
        r = run("stop")
        assert r.returncode == 0, r.stdout + r.stderr
        assert M.REQ_CLOSE_QP in fpga.requests
        log = (state / "agent.log").read_text()
        assert "not installed here" not in log, log
    finally:
        run("stop")
        fpga.close()
