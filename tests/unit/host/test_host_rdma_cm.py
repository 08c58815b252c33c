"""``rocegen-host connect --rdma-cm``: QPs connected through the InfiniBand CM instead of OPEN_QP.

On a real NIC (:class:`rocegen.host.nic.VerbsNic`, here on the fake pyverbs of
:mod:`tests.fake_pyverbs`, whose librdmacm answers as a scripted FPGA): what is asked of
librdmacm (addresses, port, connection parameters), the QP attributes the QP is moved with, the
region of the REP's private data used by the agent's WRITEs, the CM ID destroyed after
``rdma_disconnect``, and clear errors for a REP without a region, a REJ and no answer.

On the simulated NIC (:class:`rocegen.host.nic.SimNic`) end to end on a simulated wire, in
plain Python: the FPGA stands in as a second NIC model behind a passive CM peer listening on the
port; the agent connects (REQ, REP, RTU), WRITEs, READs and SENDs with the region of the REP,
and disconnects (DREQ, DREP). Then the command line's options and ``status``."""

import re
import socket
import threading
import time

import pytest

from rocegen.host import cli
from rocegen.host.agent import Agent, AgentError, request
from rocegen.host.cm_client import CmClient
from rocegen.host.nic import SIM_WINDOW, NicError, SimNic, VerbsNic
from rocegen.sim.models.ibcm import Region, State, unwrap
from rocegen.sim.models.rnic import Behaviour, Rnic
from rocegen.sim.models.rnic.rdma_cm import ACCESS, CmPeer
from rocegen.wire import ibcm as I
from rocegen.wire.pattern import pattern
from rocegen.wire.simwire import FrameReader, encode_frame
from tests.fake_pyverbs import CM_PEER, LOCAL_IP, REP_REGION
from tests.unit.host.stubs import refusing_agent
from tests.unit.host.test_cm_client import serving

FPGA_IP, FPGA_MAC = "10.0.0.2", "02:00:00:00:00:02"
HOST_IP, HOST_MAC = "10.0.0.1", "02:00:00:00:00:01"
PORT = I.RPING_PORT
REGION = Region(0x10000, 0x1234_5678, 1 << 16)
ACCESS_ALL = 1 | 2 | 4 | 8            # the fake's IBV_ACCESS_LOCAL_WRITE .. REMOTE_ATOMIC



@pytest.fixture
def silent_cm():
    """A connection-manager client whose FPGA never answers (QUERY gives no verdict)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    cm = CmClient("127.0.0.1", s.getsockname()[1], timeout=0.05, retries=0)
    yield cm
    cm.close()
    s.close()


def _calls(verbs):
    return [call for call, _ in verbs.cm]


def _details(verbs, call):
    return [d for c, d in verbs.cm if c == call]


# ---------------------------------------------------------------------- a real NIC (fake pyverbs)

def test_verbs_asks_librdmacm_for_the_connection(verbs):
    nic = VerbsNic()
    c = nic.cm_connect(FPGA_IP, PORT, recv_depth=4, rd_atomic=16, rd_depth=12,
                       peer_retry_cnt=5, peer_rnr_retry=3, timeout=20, retry_cnt=2, rnr_retry=1)
    assert _calls(verbs) == ["create_id", "resolve_addr", "ack", "resolve_route", "ack",
                             "connect", "ack", "init_qp_attr", "init_qp_attr", "init_qp_attr",
                             "establish"]
    assert _details(verbs, "create_id") == [{"port_space": 0x0106, "channel": True}]
    assert _details(verbs, "resolve_addr") == [{"src": LOCAL_IP, "dst": FPGA_IP,
                                                "dst_service": str(PORT), "port_space": 0x0106,
                                                "timeout_ms": VerbsNic.CM_RESOLVE_MS}]
    assert [d["event"] for d in _details(verbs, "ack")] == [
        "RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ROUTE_RESOLVED",
        "RDMA_CM_EVENT_CONNECT_RESPONSE"]
    (param,) = _details(verbs, "connect")
    assert param == {"responder_resources": 12, "initiator_depth": 16, "flow_control": 0,
                     "retry_count": 5, "rnr_retry_count": 3, "srq": 0, "qp_num": c.qpn}
    init, rtr, rts = verbs.modify
    assert [m["qpn"] for m in verbs.modify] == [c.qpn] * 3
    assert init["qp_access_flags"] == ACCESS_ALL and init["mask"] & 8     # IBV_QP_ACCESS_FLAGS
    assert (rtr["dest_qp_num"], rtr["rq_psn"], rtr["path_mtu"]) == (CM_PEER["qpn"],
                                                                      CM_PEER["psn"], 3)
    assert (rts["timeout"], rts["retry_cnt"], rts["rnr_retry"]) == (20, 2, 1)
    assert rts["mask"] & (512 | 1024 | 2048) == 512 | 1024 | 2048
    assert c == (c.qpn, CM_PEER["sq_psn"], CM_PEER["qpn"], CM_PEER["psn"], 1024,
                 CM_PEER["responder_resources"], CM_PEER["initiator_depth"], *REP_REGION)
    nic.close()
    assert _calls(verbs)[-2:] == ["destroy_id", "destroy_channel"] and verbs.misuse == []


def test_verbs_host_qp_defaults_and_the_retry_counts_asked(verbs):
    nic = VerbsNic()
    nic.cm_connect(FPGA_IP, 9000, recv_depth=4)
    (param,) = _details(verbs, "connect")
    assert (param["retry_count"], param["rnr_retry_count"]) == (7, 7)
    assert _details(verbs, "resolve_addr")[0]["dst_service"] == "9000"
    rts = verbs.modify[-1]
    assert (rts["timeout"], rts["retry_cnt"], rts["rnr_retry"]) == (14, 7, 7)   # VERBS_TIMEOUT
    nic.close()


def test_agent_on_verbs_uses_the_region_of_the_rep_and_disconnects(verbs, silent_cm):
    nic = VerbsNic()
    agent = Agent(nic, silent_cm, FPGA_IP, window=4096, recv_depth=4, recv_size=4096)
    try:
        opened = agent.open(2, rdma_cm=PORT)
        addr, rkey, length = REP_REGION
        assert [(q["cm"], q["cm_port"], q["fpga_region"]) for q in opened] == \
            [("rdma_cm", PORT, [rkey, addr, length])] * 2
        assert [(q["fpga_qpn"], q["psn"], q["pmtu"]) for q in opened] == \
            [(CM_PEER["qpn"] + k, CM_PEER["sq_psn"], 1024) for k in range(2)]
        assert opened[0]["fpga_reads"] == [CM_PEER["initiator_depth"],
                                           CM_PEER["responder_resources"]]
        agent.write(size=512, count=1, stall=0.2)   # no completion comes from the fake
        for q in opened:
            sends = [wr for wr in nic.qps[q["qpn"]].posted if hasattr(wr, "rdma")]
            assert [wr.rdma for wr in sends] == [(rkey, addr)]
        closed = agent.close()
        assert [(c["cm"], c["error"]) for c in closed] == [("rdma_cm", None)] * 2
        assert _calls(verbs)[-6:] == ["disconnect", "destroy_id", "destroy_channel"] * 2
        assert nic.qps == {} and nic.cmids == {}
    finally:
        agent.shutdown()
        nic.close()
    assert verbs.misuse == []


@pytest.mark.parametrize("data, text", [
    (b"\x01" * 8, "8 bytes of private data, shorter than a region's 16"),
    (bytes(range(196)), "the private data after the region is not zero"),
    (I.REGION.pack(addr=0, rkey=7, length=0), "a region of 0 bytes")])
def test_verbs_rep_without_a_region_is_a_clear_error(verbs, data, text):
    verbs.cm_peer["private_data"] = data
    nic = VerbsNic()
    with pytest.raises(NicError, match=text) as e:
        nic.cm_connect(FPGA_IP, PORT, recv_depth=4)
    assert f"connection to {FPGA_IP} port {PORT}: the REP does not carry a memory region of a " \
        f"rocegen FPGA in its private data: " in str(e.value)
    assert "establish" not in _calls(verbs)
    assert _calls(verbs)[-2:] == ["destroy_id", "destroy_channel"]
    assert nic.qps == {} and nic.cmids == {} and verbs.closed.count("QP") == 1
    nic.close()
    assert verbs.misuse == []


@pytest.mark.parametrize("script, text", [
    ({"answer": "REJ"}, "refused (REJ): nothing listens on that port, or no QP is free "
                        "(RDMA_CM_EVENT_REJECTED)"),
    ({"answer": "none"}, "no answer to the REQ"),
    ({"resolves": False}, f"cannot resolve the address from {LOCAL_IP}"),
    ({"device": "mlx5_1"}, "reaches 10.0.0.2 through mlx5_1, not fake0: use --device mlx5_1")])
def test_verbs_refusals_say_why(verbs, silent_cm, script, text):
    verbs.cm_peer.update(script)
    nic = VerbsNic()
    agent = Agent(nic, silent_cm, FPGA_IP, window=4096, recv_depth=4, recv_size=4096)
    try:
        with pytest.raises(AgentError, match=re.escape(text)) as e:
            agent.open(1, rdma_cm=PORT)
        assert e.value.kind == "rdma_cm" and f"{FPGA_IP} port {PORT}" in str(e.value)
        assert agent.qps == {} and nic.qps == {} and nic.cmids == {}
    finally:
        agent.shutdown()
        nic.close()
    assert verbs.misuse == []


def test_agent_refuses_what_the_rdma_cm_does_not_carry(verbs, silent_cm):
    nic = VerbsNic()
    agent = Agent(nic, silent_cm, FPGA_IP, window=4096, recv_depth=4, recv_size=4096)
    try:
        for kw, text in (({"pmtu": 1024}, "pmtu applies to QPs opened with OPEN_QP"),
                         ({"timeout": 12}, "timeout applies to QPs opened with OPEN_QP"),
                         ({"retry_cnt": 8}, "retry count must be 0..7, not 8"),
                         ({"rdma_cm": 1 << 16}, "port must be 0..65535")):
            with pytest.raises(AgentError, match=text) as e:
                agent.open(1, **{"rdma_cm": PORT, **kw})
            assert e.value.kind == "usage"
        assert verbs.cm == []
        (q,) = agent.open(1, rdma_cm=PORT)
        for run in (lambda: agent.traffic(op="WRITE", count=1, size=64),
                    lambda: agent.traffic(op="FETCH_ADD", count=1),
                    lambda: agent.fpga_atomics(count=1)):
            with pytest.raises(AgentError, match="opened through the RDMA CM, whose REQ tells "
                               "the FPGA no host memory") as e:
                run()
            assert e.value.kind == "rdma_cm"
        agent.close()
    finally:
        agent.shutdown()
        nic.close()


# ---------------------------------------------------------------------- the simulated NIC

class WireFpga:
    """The FPGA's stand-in at the far end of a simulated wire (a TCP socket carrying frames as
    ``rocegen sim serve``'s does): a NIC model with :data:`REGION` registered, behind a passive
    CM peer listening on :data:`PORT`, driven by a thread on this machine's clock. :attr:`mads`
    lists the CM messages seen, ``(sender, attribute name)``, in order."""

    NAMES = {I.ATTR_REQ: "REQ", I.ATTR_REP: "REP", I.ATTR_RTU: "RTU", I.ATTR_REJ: "REJ",
             I.ATTR_DREQ: "DREQ", I.ATTR_DREP: "DREP", I.ATTR_MRA: "MRA"}

    def __init__(self):
        self.rnic = Rnic(FPGA_MAC, FPGA_IP, behaviour=Behaviour(response_ns=(0.0, 0.0),
                                                                ack_timer_ns=0.0))
        self.rnic.register_mr(REGION.addr, REGION.length, REGION.rkey, ACCESS)
        self.peer = CmPeer(self.rnic, qpns=[0x21, 0x22], ports=(PORT,), region=REGION, seed=5)
        self.lock = threading.Lock()
        self.mads = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.t0 = time.monotonic_ns()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _note(self, sender, frames):
        for f in frames:
            try:
                mad = unwrap(f).mad
            except ValueError:
                continue
            self.mads.append((sender, self.NAMES[I.MAD_HDR.unpack(mad)["attribute_id"]]))

    def _step(self, conn, reader):
        try:
            data = conn.recv(1 << 20)
        except TimeoutError:
            data = None
        if data == b"":
            return False
        with self.lock:
            now = time.monotonic_ns() - self.t0
            frames = reader.feed(data) if data else []
            self._note("host", frames)
            out = [g for f in frames for g in self.peer.receive(f, now)]
            out += self.peer.poll(now) + self.rnic.due(now) + self.rnic.next_frames(now)
            self._note("fpga", out)
        conn.sendall(b"".join(encode_frame(f) for f in out))
        return True

    def _run(self):
        conn, _ = self.server.accept()
        conn.settimeout(0.01)
        reader = FrameReader(times=False)
        with conn:
            while not self.stop.is_set() and self._step(conn, reader):
                pass

    def close(self):
        self.stop.set()
        self.server.close()
        self.thread.join(timeout=10)


def _until(predicate):
    """Poll (a bounded number of times, not a speed requirement) until ``predicate()``."""
    for _ in range(2000):
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("never happened")


@pytest.fixture
def sim(silent_cm):
    fpga = WireFpga()
    nic = SimNic(("127.0.0.1", fpga.port), mac=HOST_MAC, ip=HOST_IP)
    agent = Agent(nic, silent_cm, FPGA_IP, window=4096, recv_depth=4, recv_size=4096)
    yield fpga, nic, agent
    agent.shutdown()
    nic.close()
    fpga.close()


def test_sim_connects_moves_data_and_disconnects_over_the_ib_cm(sim, tmp_path, capsys):
    fpga, nic, agent = sim
    (q,) = agent.open(1, rdma_cm=PORT, host_timeout=16)
    (conn,) = fpga.peer.cm.connections.values()
    _until(lambda: conn.state is State.ESTABLISHED)         # the RTU on its way
    with fpga.lock:
        assert conn.qpn == q["fpga_qpn"]
        assert (conn.peer_qpn, conn.peer_psn) == (q["qpn"], q["psn"])
        assert fpga.mads == [("host", "REQ"), ("fpga", "REP"), ("host", "RTU")]
    assert (q["cm"], q["cm_port"]) == ("rdma_cm", PORT)
    assert q["fpga_region"] == [REGION.rkey, REGION.addr, REGION.length]
    sq = nic.rnic.qps[q["qpn"]].sq
    assert (sq.window, sq.timeout) == (SIM_WINDOW, 16)
    # the host's WRITEs land in the FPGA's memory where the region says, and READ back
    w = agent.write(size=300, count=5)
    assert [(r["messages"], r["errors"]) for r in w["qps"]] == [(5, [])]
    with fpga.lock:
        assert fpga.rnic.read_mem(REGION.addr, 1500) == pattern(REGION.addr, 1500)
    r = agent.read(size=300, count=5)
    assert (r["checked"], r["wrong"], r["ok"]) == (1500, 0, True)
    # a SEND into a buffer the FPGA posted
    with fpga.lock:
        fpga.rnic.post_recv(conn.qpn, 4096, 77, addr=REGION.addr + 8192)
    s = agent.send(size=100, count=1, at=REGION.addr + 8192)
    assert s["qps"][0]["messages"] == 1
    with fpga.lock:
        (wc,) = fpga.rnic.poll_cq()
        assert (wc.wr_id, wc.byte_len, str(wc.status)) == (77, 100, "SUCCESS")
        assert fpga.rnic.read_mem(REGION.addr + 8192, 100) == pattern(REGION.addr + 8192, 100)
    # status says which CM opened the QP
    server = serving(agent, tmp_path / "agent.sock", keep=True)
    assert cli.main(["--state-dir", str(tmp_path), "status"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.lstrip().startswith(str(
        q["fpga_qpn"]))]
    assert line and line[0].endswith(f"RDMA CM:{PORT}")
    # rdma_disconnect: DREQ, DREP, and the QP gone once time-wait is over
    assert agent.close() == [{"fpga_qpn": q["fpga_qpn"], "qpn": q["qpn"], "cm": "rdma_cm",
                              "error": None}]
    with fpga.lock:
        assert fpga.mads[-2:] == [("host", "DREQ"), ("fpga", "DREP")]
        assert ("disconnected", conn.local_comm_id, None) in fpga.peer.cm.events
    _until(lambda: q["qpn"] not in nic.rnic.qps)
    assert request(tmp_path / "agent.sock", {"cmd": "shutdown"}) == {"ok": True, "result": []}
    server.join(timeout=10)
    assert not server.is_alive()


def test_sim_refusals_leave_nothing_open(sim):
    fpga, nic, agent = sim
    with pytest.raises(AgentError, match=f"refused the connection to port {PORT + 1} \\(REJ "
                       f"INVALID_SERVICE_ID\\): nothing listens on port {PORT + 1}"):
        agent.open(1, rdma_cm=PORT + 1)
    with pytest.raises(AgentError, match="REJ NO_QP") as e:
        agent.open(3, rdma_cm=PORT)                 # the FPGA has two QPs
    assert "2 of 3 had been opened, and are closed again" in str(e.value)
    assert agent.qps == {}
    with fpga.lock:
        assert [m for _, m in fpga.mads].count("DREQ") == 2
    _until(lambda: len(nic.rnic.qps) == 0)


# ---------------------------------------------------------------------- the command line

def test_connect_help_names_the_rdma_cm(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["connect", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--rdma-cm " in text and "--rdma-cm-port PORT" in text
    assert f"(default {PORT}, rping's)" in text and "0x0106 << 16 | port" in text


@pytest.mark.parametrize("args, text", [
    (["--rdma-cm-port", "7000"], "--rdma-cm-port applies to --rdma-cm"),
    (["--rdma-cm", "--rdma-cm-port", "65536"], "--rdma-cm-port must be 0..65535, not 65536"),
    (["--rdma-cm", "--pmtu", "1024"], "argument --pmtu: not allowed with --rdma-cm"),
    (["--rdma-cm", "--timeout", "14"], "argument --timeout: not allowed with --rdma-cm")])
def test_connect_refuses_options_the_rdma_cm_does_not_take(tmp_path, capsys, args, text):
    with pytest.raises(SystemExit) as e:
        cli.main(["--state-dir", str(tmp_path), "connect", "--sim", *args])
    assert e.value.code == 2
    assert text in capsys.readouterr().err
    assert not (tmp_path / "agent.log").exists()        # no agent was started


def test_connect_hands_the_rdma_cm_port_to_the_agent(tmp_path, monkeypatch, capsys):
    started = refusing_agent(monkeypatch, {"ok": False, "kind": "rdma_cm", "error": "refused (REJ)"})
    base = ["--state-dir", str(tmp_path), "connect", "--sim"]
    assert cli.main([*base, "--rdma-cm"]) == 1
    assert cli.main([*base, "--rdma-cm", "--rdma-cm-port", "9000", "--retry-cnt", "3"]) == 1
    assert cli.main([*base, "--pmtu", "1024"]) == 1
    assert [(c["rdma_cm"], c["pmtu"], c["retry_cnt"]) for c in started] == \
        [(PORT, None, None), (9000, None, 3), (None, 1024, None)]
    assert "refused (REJ)" in capsys.readouterr().err


def test_the_qp_table_says_which_cm_opened_each_qp(capsys):
    row = {"qpn": 0x123, "psn": 0x55, "pmtu": 4096, "state": "RTS", "messages": 0, "bytes": 0,
           "fpga_region": [0, 0, 0]}
    cli._print_qps([{**row, "fpga_qpn": 256, "cm": "udp", "cm_port": None},
                    {**row, "fpga_qpn": 33, "cm": "rdma_cm", "cm_port": 9000}])
    head, udp, rdma = capsys.readouterr().out.splitlines()
    assert head.endswith("  CM") and udp.endswith("  UDP") and rdma.endswith("  RDMA CM:9000")
