"""The host agent on its real-verbs path (:class:`rocegen.host.nic.VerbsNic`) with a fake pyverbs
(:mod:`tests.fake_pyverbs`, whose objects report any use after they were destroyed): the NIC
closed while its CQ is polled, the agent's error and stop paths closing the NIC only once its
poller has stopped, and the host QP's own retransmit timeout and retry counts (``connect
--host-timeout``, ``--host-retry-cnt``, ``--host-rnr-retry``), on verbs and on the simulated
NIC."""

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
from rocegen.host import cli
from rocegen.host.agent import Agent, AgentError, request
from rocegen.host.cm_client import CmClient
from rocegen.host.nic import SIM_PEER_TIMEOUT, SIM_TIMEOUT, NicError, SimNic, VerbsNic
from tests.fake_pyverbs import LOCAL_IP, SHIM
from tests.unit.host.stubs import refusing_agent
from tests.unit.host.test_cm_client import ModelFpga, serving
from tests.unit.host.test_fpga_time import HOST_MAC, Wire

FPGA_IP = "10.0.0.2"
ROOT = Path(__file__).resolve().parents[3]



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


# ---------------------------------------------------------------------- the host QP's values

def _rts(verbs):
    (rtr,), (rts,) = verbs.rtr, verbs.rts
    assert rtr == rts                   # one QPAttr for both state changes
    return rts["timeout"], rts["retry_cnt"], rts["rnr_retry"]


@pytest.mark.parametrize("given, want", [({}, (14, 7, 7)),
                                         ({"timeout": 20, "retry_cnt": 3, "rnr_retry": 5},
                                          (20, 3, 5)),
                                         ({"timeout": 0, "retry_cnt": 0, "rnr_retry": 0},
                                          (0, 0, 0)),
                                         ({"retry_cnt": 1}, (14, 1, 7))])
def test_verbs_qp_takes_the_host_values(verbs, given, want):
    nic = VerbsNic()
    qpn = nic.create_qp(4)
    nic.connect_qp(qpn, 256, FPGA_IP, 0x123, 1024, **given)
    assert _rts(verbs) == want
    nic.close()


def test_host_values_go_from_the_agent_config_to_the_qp(verbs, tmp_path, capsys):
    """The agent's configuration (what ``connect`` starts it with) to the QP attributes: the
    first QP is connected with the host's values, the second gets NO_QP and the agent stops."""
    fpga = ModelFpga(num_qps=1)
    try:
        rc = agent_mod.main(["--config", json.dumps(_config(
            tmp_path, fpga.port, qps=2, reply_timeout=0.3, host_timeout=SIM_PEER_TIMEOUT,
            host_retry_cnt=2, host_rnr_retry=6))])
    finally:
        fpga.close()
    assert rc == 1 and json.loads(capsys.readouterr().out)["kind"] == "no_qp"
    assert _rts(verbs) == (SIM_PEER_TIMEOUT, 2, 6)
    assert verbs.misuse == []


def test_agent_refuses_host_values_out_of_range():
    agent = Agent(_NoNic(), None, FPGA_IP)
    try:
        for kw, text in (({"host_timeout": 32}, "host QP's timeout code must be 0..31, not 32"),
                         ({"host_retry_cnt": -1}, "host QP's retry count must be 0..7, not -1"),
                         ({"host_rnr_retry": 8}, "host QP's RNR retry count must be 0..7, not 8")):
            with pytest.raises(AgentError, match=text) as e:
                agent.open(1, **kw)
            assert e.value.kind == "usage"
    finally:
        agent.shutdown()


class _NoNic:
    local_ip = "10.0.0.1"

    def poll(self, max_entries=64, timeout=0.0):
        time.sleep(timeout)
        return []


@pytest.mark.parametrize("given, want", [({}, (SIM_TIMEOUT, 7, 7)),
                                         ({"timeout": 0, "retry_cnt": 2, "rnr_retry": 3},
                                          (0, 2, 3))])
def test_simulated_qp_takes_the_host_values(given, want):
    wire = Wire()
    t = threading.Thread(target=wire.accept)
    t.start()
    nic = SimNic(("127.0.0.1", wire.port), mac=HOST_MAC, ip="10.0.0.1")
    t.join()
    try:
        nic.connect_qp(0x123, 256, FPGA_IP, 0x55, 1024, **given)
        sq = nic.rnic.qps[0x123].sq
        assert (sq.timeout, sq.retry_cnt, sq.rnr_retry) == want
    finally:
        nic.close()
        wire.close()


@pytest.mark.parametrize("args, text", [
    (["--host-timeout", "32"], "--host-timeout must be 0..31"),
    (["--host-timeout", "-1"], "--host-timeout must be 0..31"),
    (["--host-retry-cnt", "8"], "--host-retry-cnt must be 0..7"),
    (["--host-rnr-retry", "-1"], "--host-rnr-retry must be 0..7")])
def test_connect_refuses_host_values_out_of_range(tmp_path, capsys, args, text):
    assert cli.main(["--state-dir", str(tmp_path), "connect", "--sim", *args]) == 2
    err = capsys.readouterr().err
    assert text in err and f"not {args[1]}" in err, err
    assert not (tmp_path / "agent.log").exists()        # no agent was started


def test_connect_hands_the_host_values_to_the_agent(tmp_path, monkeypatch, capsys):
    started = refusing_agent(monkeypatch, {"ok": False, "kind": "timeout", "error": "no reply"})
    base = ["--state-dir", str(tmp_path), "connect", "--sim"]
    assert cli.main([*base, "--host-timeout", "20", "--host-retry-cnt", "0",
                     "--host-rnr-retry", "3"]) == 1
    assert cli.main(base) == 1
    assert [(c["host_timeout"], c["host_retry_cnt"], c["host_rnr_retry"]) for c in started] == \
        [(20, 0, 3), (None, None, None)]
    assert "no reply" in capsys.readouterr().err
