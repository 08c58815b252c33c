"""The host agent on its real-verbs path (:class:`rocegen.host.nic.VerbsNic`) with a fake pyverbs
(:mod:`tests.fake_pyverbs`, whose objects report any use after they were destroyed): the NIC
closed while its CQ is polled, and the agent's error and stop paths closing the NIC only once
its poller has stopped."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocegen.host import agent as agent_mod
from rocegen.host.agent import Agent, request
from rocegen.host.cm_client import CmClient
from rocegen.host.nic import NicError, VerbsNic
from tests.fake_pyverbs import LOCAL_IP, SHIM, modules
from tests.unit.test_cm_client import ModelFpga, serving

FPGA_IP = "10.0.0.2"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def verbs(monkeypatch):
    """The fake pyverbs in ``sys.modules``; its record of what was done (:class:`Verbs`)."""
    mods = modules()
    for name, module in mods.items():
        monkeypatch.setitem(sys.modules, name, module)
    return mods["pyverbs"].state


@pytest.fixture
def silent_cm():
    """A connection manager that takes every request and never answers: its UDP port."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    yield s.getsockname()[1]
    s.close()


def _pollers():
    return {t for t in threading.enumerate() if t.name == "cq"}


def _config(tmp_path, cm_port, **kw):
    return {"device": "fake0", "fpga_ip": FPGA_IP, "cm_host": "127.0.0.1", "cm_port": cm_port,
            "listen_port": 0, "local_ip": None, "port": 1, "gid_index": None, "qps": 1,
            "window": 4096, "recv_depth": 4, "recv_size": 4096, "reply_timeout": 0.05,
            "retries": 1, "socket": str(tmp_path / "agent.sock"), "keep": False, "pmtu": 1024,
            "timeout": None, "retry_cnt": None, "rnr_retry": None, **kw}


# ---------------------------------------------------------------------- closing

def test_close_waits_for_a_poll_and_later_polls_fail_cleanly(verbs):
    """VerbsNic.close while another thread polls the CQ: the poll under way ends first, and every
    later one raises NicError, touching no destroyed object."""
    nic = VerbsNic()
    assert nic.local_ip == LOCAL_IP
    nic.create_qp(4)
    addr, _ = nic.register(4096)
    outcome = []

    def poller():
        try:
            while True:
                nic.poll(64, timeout=0.01)
        except Exception as e:          # whatever it was, the test looks at it
            outcome.append(e)

    t = threading.Thread(target=poller, daemon=True)
    t.start()
    while not verbs.polls:
        time.sleep(0.001)
    nic.close()
    t.join(timeout=5)
    assert not t.is_alive()
    assert verbs.misuse == []
    assert len(outcome) == 1 and isinstance(outcome[0], NicError), outcome
    assert "closed" in str(outcome[0])
    assert verbs.closed == ["QP", "MR", "CQ", "PD", "context"]
    for later in (lambda: nic.poll(1), lambda: nic.poll_send(1), lambda: nic.read(addr, 4),
                  lambda: nic.write(addr, b"x"), lambda: nic.create_qp(4)):
        with pytest.raises(NicError, match="closed"):
            later()
    nic.close()                         # a second close does nothing
    assert verbs.misuse == [] and len(verbs.closed) == 5


def test_no_answer_at_connect_stops_the_poller_before_closing_the_nic(verbs, silent_cm,
                                                                      tmp_path, capsys):
    """The agent's connection manager gets no answer: the agent states the error, stops and
    joins its CQ poller, and only then closes the NIC; nothing polls the destroyed CQ."""
    before = _pollers()
    rc = agent_mod.main(["--config", json.dumps(_config(tmp_path, silent_cm))])
    time.sleep(0.1)                     # a poller still running would meet the closed CQ now
    assert rc == 1
    reply = json.loads(capsys.readouterr().out)
    assert reply["ok"] is False and reply["kind"] == "timeout", reply
    assert f"no reply from the FPGA at 127.0.0.1:{silent_cm} after 2 tries" in reply["error"]
    assert verbs.misuse == []
    assert "context" in verbs.closed            # the NIC was closed
    assert not {t for t in _pollers() - before if t.is_alive()}


def test_connect_without_an_answer_says_so(silent_cm, tmp_path):
    """``rocegen-host connect`` against a connection manager that never answers, with the agent
    on (fake) verbs in its own process, where a use of a destroyed CQ is a SIGSEGV: the error
    line, exit status 1, no crash."""
    shim = tmp_path / "shim" / "pyverbs"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(SHIM)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path / "shim"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("PYTHONUNBUFFERED", None)   # the agent's stdout as a user's shell leaves it
    r = subprocess.run(
        [sys.executable, "-m", "rocegen.host.cli", "--state-dir", str(tmp_path / "state"),
         "connect", "--device", "fake0", "--fpga", FPGA_IP, "--cm-host", "127.0.0.1",
         "--cm-port", str(silent_cm), "--reply-timeout", "0.05", "--retries", "1"],
        capture_output=True, text=True, env=env, timeout=120)
    log = (tmp_path / "state" / "agent.log").read_text()
    assert "fake pyverbs" not in log, log       # no verbs object used after it was destroyed
    assert r.returncode == 1, (r.stderr, log)
    assert "exited at start" not in r.stderr, log
    assert f"no reply from the FPGA at 127.0.0.1:{silent_cm} after 2 tries" in r.stderr, log
    assert not (tmp_path / "state" / "agent.sock").exists()


def test_stop_closes_the_nic_after_the_poller(verbs, tmp_path):
    """The agent's other way out: ``shutdown`` over its socket, then the NIC closed as the
    agent's main does; the poller had stopped."""
    fpga = ModelFpga(num_qps=1)
    cm = CmClient("127.0.0.1", fpga.port, timeout=0.3)
    nic = VerbsNic()
    before = _pollers()
    agent = Agent(nic, cm, FPGA_IP, window=4096, recv_depth=4, recv_size=4096)
    try:
        (opened,) = agent.open(1, pmtu=1024)
        assert opened["fpga_qpn"] == 256
        server = serving(agent, tmp_path / "agent.sock")
        assert request(tmp_path / "agent.sock", {"cmd": "shutdown"})["ok"]
        server.join(timeout=10)
        assert not server.is_alive()
        assert not {t for t in _pollers() - before if t.is_alive()}
        cm.close()                      # as the agent's main does once serve returns
        nic.close()
        time.sleep(0.05)
        assert verbs.misuse == [] and "context" in verbs.closed
    finally:
        agent.shutdown()
        fpga.close()
