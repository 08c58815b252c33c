"""The FPGA's atomics on the host's memory, as the host agent checks them: ``rocegen-host
traffic --op FETCH_ADD|COMPARE_SWAP`` and ``rocegen-host atomic --direction fpga-to-host``, on
the simulated NIC (:class:`rocegen.host.nic.SimNic`, the NIC model on a wire) against an FPGA
played by a second NIC model whose requester plays the traffic generator (message ``s`` of a
run on target ``(8 s) mod window`` of the QP's memory, operands as the gateware makes them, the
original value of message ``s`` written to its memory at ``(s mod 64) * 64``), and a
connection manager in memory (OPEN_QP, SEND_QP_INFO, test traffic); no simulator. Every run is
checked against the plain-Python model of the run, the checks fail where they must (an FPGA
without atomics, an atomic executed twice, originals in the other byte order) and say why;
the model itself against the obvious loop; the connection-manager client's SEND_QP_INFO and
atomic datagram against the connection manager's reference model."""

import json
import queue
import random
import socket
import threading
import time

import pytest

from rocegen.host import cli
from rocegen.host.agent import NO_GEN_ATOMICS, Agent, AgentError
from rocegen.host.cm_client import CmClient
from rocegen.host.nic import SimNic
from rocegen.sim.models.rnic import Access, Behaviour, Rnic
from rocegen.wire.addr import parse_ip
from rocegen.wire.atomic_runs import MASK, ORIGINAL_SLOTS, generator_run, original_slot
from rocegen.wire.cm import traffic
from rocegen.wire.simwire import FrameReader, encode_frame
from rocegen.wire.verbs import QpState, WrOpcode
from tests.unit.host.test_cm_client import ModelFpga, serving

FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"
#: the FPGA's region of every QP (its local memory from 0, where the originals land)
RKEY, LENGTH = 0x5EED01, 0x10000


class GenFpga:
    """An FPGA whose traffic generator issues RDMA atomics: a NIC model behind a wire (its
    requester posts the generator's atomics, one run after the other) and a connection manager
    in memory. ``atomics`` False: each run is refused (nothing is sent); ``reads`` False: OPEN_QP
    states no READ depths; ``byteorder``: the order of the originals in its memory;
    ``twice``: message number whose atomic is issued twice (an FPGA that executes one twice)."""

    fpga = ("127.0.0.1", 17185)

    def __init__(self, *, atomics=True, reads=True, byteorder="little", base=0, twice=None):
        self.rnic = Rnic(FPGA_MAC, FPGA_IP, strict=True,
                         behaviour=Behaviour(response_ns=(0.0, 0.0), ack_timer_ns=0.0))
        self.rnic.register_mr(base, LENGTH, RKEY, Access.LOCAL_WRITE | Access.REMOTE_WRITE |
                              Access.REMOTE_READ)
        self.atomics, self.reads, self.byteorder, self.base = atomics, reads, byteorder, base
        self.twice = twice
        self.ctx = {}               # FPGA QPN -> the host's memory it works on: (rkey, vaddr)
        self.infos, self.datagrams, self.refused = [], [], []
        self.lock = threading.Lock()
        self.runs = queue.Queue()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.conn = None
        self.connected = threading.Event()
        threading.Thread(target=self._wire, daemon=True).start()
        threading.Thread(target=self._generator, daemon=True).start()
        self.nic = SimNic(("127.0.0.1", self.server.getsockname()[1]), mac=HOST_MAC, ip=HOST_IP)
        # (the wire's end is ours once accepted: frames sent before would be lost)
        assert self.connected.wait(10), "the host NIC did not connect to the FPGA's wire"

    def _send(self, frames):
        if frames and self.conn is not None:
            self.conn.sendall(b"".join(encode_frame(f) for f in frames))

    def _wire(self):
        self.conn, _ = self.server.accept()
        self.connected.set()
        reader = FrameReader(times=False)
        while True:
            try:
                data = self.conn.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                out = [a for f in reader.feed(data) for a in self.rnic.receive(f)]
                self._send(out + self.rnic.next_frames())

    def _generator(self):
        """One run at a time, as the FPGA's single generator."""
        while True:
            k, op, count, window_log2 = self.runs.get()
            if not self.atomics:            # every request refused: nothing on the wire
                self.refused.append(k)
                continue
            rkey, vaddr = self.ctx[k]
            window = 1 << window_log2 if window_log2 else 0
            order = [s for s in range(count) for _ in range(2 if s == self.twice else 1)]
            with self.lock:
                for i, s in enumerate(order):
                    off = (s * 8) % window if window else 0
                    kw = {"swap_add": 1} if op == "FETCH_ADD" else \
                        {"swap_add": (s + 1) & MASK, "compare": s}
                    self.rnic.post_send(k, op, remote_addr=vaddr + off, rkey=rkey, wr_id=i, **kw)
                self._send(self.rnic.next_frames())
            done = 0
            while done < len(order):
                with self.lock:
                    cpls = self.rnic.poll_send_cq()
                    for c in cpls:
                        assert str(c.status) == "SUCCESS", c
                        s = order[c.wr_id]
                        value = int.from_bytes(c.data, "little")
                        self.rnic.write_mem(self.base + original_slot(s),
                                            value.to_bytes(8, self.byteorder))
                done += len(cpls)
                time.sleep(0.002)

    # the connection manager
    def open(self, *, qpn, psn, pmtu, read_depths, rkey, vaddr, **kw):
        k = 256 + len(self.rnic.qps)
        with self.lock:
            self.rnic.create_qp(k, peer_qpn=qpn, peer_ip=HOST_IP, peer_mac=HOST_MAC, epsn=psn,
                                pmtu=pmtu, access=Access.REMOTE_WRITE | Access.REMOTE_READ,
                                max_rd_atomic=min(16, read_depths[1]), max_dest_rd_atomic=16)
            self.ctx[k] = (rkey, vaddr)
        depths = {"rd_atomic": 16, "rd_depth": 16} if self.reads else \
            {"rd_atomic": 0, "rd_depth": 0}
        return {"fpga_qpn": k, "fpga_psn": psn, "rkey": RKEY, "base": self.base,
                "length": LENGTH, **depths}

    def send_qp_info(self, *, qpn, psn, fpga_qpn, rkey, vaddr, ip, read_depths=None):
        self.infos.append((fpga_qpn, rkey, vaddr))
        self.ctx[fpga_qpn] = (rkey, vaddr)

    def traffic(self, fpga_qpn, size, count, spacing=0, *, write=True, imm=False, window_log2=0,
                read=False, atomic=None):
        self.datagrams.append((fpga_qpn, size, count, window_log2, atomic))
        assert atomic in ("FETCH_ADD", "COMPARE_SWAP") and size == 8 and not read
        self.runs.put((fpga_qpn, atomic, count, window_log2))

    def close_qp(self, **kw):
        pass

    def close(self):
        self.nic.close()
        self.server.close()


@pytest.fixture
def fpga(request):
    f = GenFpga(**getattr(request, "param", {}))
    f.agent = Agent(f.nic, f, FPGA_IP, window=1 << 16, recv_depth=2, recv_size=4096)
    yield f
    f.agent.shutdown()
    f.close()


def wait_runs(agent):
    """The runs' rows once every one is done (polled: a bound on polls, not a speed)."""
    for _ in range(3000):
        rows = agent.progress()
        if all(r["done"] for r in rows):
            return rows
        time.sleep(0.01)
    raise AssertionError(f"the runs never finished: {rows}")


def host_values(f, qp, n):
    data = f.nic.read(qp["addr"], 8 * n)
    return [int.from_bytes(data[i:i + 8], "little") for i in range(0, 8 * n, 8)]


def test_the_model_is_the_obvious_loop():
    """:func:`generator_run` (closed forms and jumps for all but the last 64 messages) against
    simulating every message in order, from random starting values."""
    def loop(op, count, targets, initial):
        values = list(initial) if initial else [0] * min(targets, count)
        originals = {}
        for s in range(count):
            t = s % targets
            originals[s] = v = values[t]
            if op == "FETCH_ADD":
                values[t] = (v + 1) & MASK
            elif v == s:
                values[t] = s + 1
        return values, {s: v for s, v in originals.items() if s >= count - ORIGINAL_SLOTS}
    rng = random.Random(7)
    for _ in range(2000):
        op = rng.choice(["FETCH_ADD", "COMPARE_SWAP"])
        count, targets = rng.randrange(300), rng.choice([1, 2, 4, 8, 64, 512])
        n = min(targets, count)
        initial = [rng.choice([0, 1, 2, rng.randrange(300), MASK]) for _ in range(n)] \
            if rng.random() < 0.5 else None
        assert generator_run(op, count, targets, initial) == loop(op, count, targets, initial)
    # one counter: a FETCH_ADD run and a COMPARE_SWAP chain both count it up (no loop of 2^31)
    assert generator_run("FETCH_ADD", 1 << 31)[0] == [1 << 31]
    assert generator_run("COMPARE_SWAP", 1 << 31)[0] == [1 << 31]
    assert generator_run("COMPARE_SWAP", 1 << 31, 4)[0] == [1, 0, 0, 0]
    assert original_slot(65) == 64 and original_slot(63) == 63 * 64


def test_fetch_add_and_compare_swap_runs(fpga):
    """``traffic``: a FETCH_ADD run over 16 targets on each of 2 QPs (one after the other),
    then COMPARE_SWAP chains on one target and on four; every target ends as the model says
    (a chain on one counter counts it up to the run's count; on four only message 0 takes)."""
    opened = fpga.agent.open(2, pmtu=1024)
    runs = fpga.agent.traffic(op="FETCH_ADD", count=40, targets=16)
    assert [(r["op"], r["size"], r["window"], r["targets"]) for r in runs] == \
        [("FETCH_ADD", 8, 128, 16)] * 2
    rows = wait_runs(fpga.agent)
    for r in rows:
        assert r["ok"] and r["verified"] == 40 and r["targets_right"] == 16, r
    for q in opened:
        assert host_values(fpga, q, 16) == [3] * 8 + [2] * 8
    assert [d[3:] for d in fpga.datagrams] == [(7, "FETCH_ADD")] * 2
    fpga.agent.traffic(257, op="COMPARE_SWAP", count=50)
    (r,) = [x for x in wait_runs(fpga.agent) if x["fpga_qpn"] == 257]
    assert r["ok"] and r["targets"] == 1 and host_values(fpga, opened[1], 2) == [50, 3], r
    fpga.agent.traffic(256, op="COMPARE_SWAP", count=9, targets=4, size=8)
    (r,) = [x for x in wait_runs(fpga.agent) if x["fpga_qpn"] == 256]
    assert r["ok"] and r["verified"] == 9 and host_values(fpga, opened[0], 5) == [1, 0, 0, 0, 3]


def test_atomic_runs_usage(fpga):
    fpga.agent.open(1, pmtu=1024)
    for kw, text in (({"size": 16}, "an atomic run's size must be 8"),
                     ({"size": 65536}, "an atomic run's size must be 8"),
                     ({"targets": 3}, "targets must be a power of two 1..8192"),
                     ({"targets": 1 << 14}, "targets must be a power of two 1..8192"),
                     ({"stall": 0}, "stall must be > 0")):
        with pytest.raises(AgentError, match=text) as e:
            fpga.agent.traffic(op="FETCH_ADD", count=4, **kw)
        assert e.value.kind == "usage"
    for kw, text in (({"offset": 8}, "offset applies to the host's atomics"),
                     ({"depth": 4}, "depth applies to the host's atomics"),
                     ({"direction": "sideways"}, "direction must be one of host-to-fpga, "
                      "fpga-to-host")):
        with pytest.raises(AgentError, match=text):
            fpga.agent.atomic(**{"direction": "fpga-to-host", **kw})
    assert fpga.datagrams == []


@pytest.mark.parametrize("fpga", [{"reads": False}], indirect=True)
def test_an_fpga_without_reads_is_refused_at_once(fpga):
    fpga.agent.open(1, pmtu=1024)
    for call in (lambda: fpga.agent.traffic(op="FETCH_ADD", count=4),
                 lambda: fpga.agent.atomic(direction="fpga-to-host", count=4)):
        with pytest.raises(AgentError, match="stated no READ depths .* without the READ "
                           "requester, so without atomics") as e:
            call()
        assert e.value.kind == "no_atomics"
    assert fpga.datagrams == []


@pytest.mark.parametrize("fpga", [{"atomics": False}], indirect=True)
def test_an_fpga_without_atomics_changes_nothing(fpga):
    """The connection manager does not say whether the FPGA has atomics: the run is sent, and
    given up when the targets have not changed for the stall time, with the likely cause."""
    fpga.agent.open(1, pmtu=1024)
    fpga.agent.traffic(op="FETCH_ADD", count=4, stall=0.3)
    (r,) = wait_runs(fpga.agent)
    assert not r["ok"] and r["bad"] == 1 and r["verified"] == 0 and fpga.refused == [256], r
    assert r["errors"] == ["the host's targets did not change for 0.3 s: 0 of 1 hold what the "
                           "run leaves; target 0 (host address "
                           f"{r['target_addr']:#x}) holds 0x0, the run leaves 0x4 (nothing "
                           f"reached them: {NO_GEN_ATOMICS})"]
    res = fpga.agent.atomic(direction="fpga-to-host", count=4, stall=0.3)
    assert not res["ok"] and res["runs"][0]["errors"][0].endswith(f"{NO_GEN_ATOMICS})"), res
    assert res["originals"] == {"skipped": "no run completed"}


@pytest.mark.parametrize("fpga", [{"twice": 3}], indirect=True)
def test_an_atomic_executed_twice_is_found(fpga):
    fpga.agent.open(1, pmtu=1024)
    fpga.agent.traffic(op="FETCH_ADD", count=6)
    (r,) = wait_runs(fpga.agent)
    assert not r["ok"] and "past the 0x6 the run leaves (from 0x0): an atomic executed twice" \
        in r["errors"][0], r


def test_the_contended_counter_of_the_fpga(fpga):
    """``atomic --direction fpga-to-host``: 3 QPs' runs of 20 FETCH_ADDs, one after the other on
    the first QP's first word (the others pointed at it, and back after): it ends at 60; the
    originals of the last run (40..59) READ back from the FPGA's memory, distinct, as the
    model says; then COMPARE_SWAP chains of 70 (past the 64 slots: messages 6..69 kept)."""
    opened = fpga.agent.open(3, pmtu=1024)
    own = dict(fpga.ctx)
    home = opened[0]
    r = fpga.agent.atomic(direction="fpga-to-host", count=20)
    assert r["ok"], r
    assert [(q["fpga_qpn"], q["initial"], q["final"], q["expected"], q["ok"]) for q in r["runs"]] \
        == [(256, 0, 20, 20, True), (257, 20, 40, 40, True), (258, 40, 60, 60, True)]
    c = r["counter"]
    assert (c["addr"], c["final"], c["expected"], c["problems"]) == (home["addr"], 60, 60, [])
    o = r["originals"]
    assert (o["fpga_qpn"], o["slots"], o["first"], o["distinct"], o["problems"]) == \
        (258, 20, 0, 20, [])
    assert o["values"] == o["expected"] == list(range(40, 60))
    assert r["ops"] == 60 and r["fpga_cycles"] is None
    # pointed at the counter, then back
    assert fpga.infos == [(257, home["rkey"], home["addr"]), (258, home["rkey"], home["addr"]),
                          (257, *own[257]), (258, *own[258])]
    assert fpga.ctx == own
    cas = fpga.agent.atomic(direction="fpga-to-host", op="COMPARE_SWAP", count=70)
    assert cas["ok"] and [q["final"] for q in cas["runs"]] == [70] * 3, cas
    o = cas["originals"]
    assert (o["slots"], o["first"], o["values"]) == (64, 6, list(range(6, 70)))
    assert fpga.agent.status()["qps"][1]["run"]["ok"]


@pytest.mark.parametrize("fpga", [{"byteorder": "big"}], indirect=True)
def test_originals_in_the_other_byte_order(fpga):
    fpga.agent.open(1, pmtu=1024)
    bad = fpga.agent.atomic(direction="fpga-to-host", count=5)
    problems = bad["originals"]["problems"]
    assert not bad["ok"] and problems[0].startswith("4 of 5 differ from the model: message 1"), bad
    assert problems[-1] == ("read big-endian, they are as the model says: the FPGA stores them "
                            "big-endian (--byte-order big)")
    assert fpga.agent.atomic(direction="fpga-to-host", count=5, byte_order="big")["ok"]


@pytest.mark.parametrize("fpga", [{"base": 0x8000}], indirect=True)
def test_originals_outside_the_region_are_not_read(fpga):
    fpga.agent.open(1, pmtu=1024)
    r = fpga.agent.atomic(direction="fpga-to-host", count=3)
    assert r["ok"] and r["originals"] == {
        "skipped": "no QP's FPGA region holds the FPGA's local addresses 0 .. 0x88 (where the "
                   "originals land)"}, r


def test_the_command_line(fpga, tmp_path, capsys):
    """``traffic --op FETCH_ADD`` / ``recv`` and ``atomic --direction fpga-to-host`` through the
    agent's socket: the text, the exit status, the usage errors (exit 2)."""
    opened = fpga.agent.open(2, pmtu=1024)
    server = serving(fpga.agent, tmp_path / "agent.sock", keep=True)
    base = ["--state-dir", str(tmp_path)]
    assert cli.main([*base, "traffic", "--op", "FETCH_ADD", "--count", "8", "--qp", "256"]) == 0
    assert capsys.readouterr().out == (
        f"QP 256: 8 x FETCH_ADD started on 1 8-byte target of the host's memory from "
        f"{opened[0]['addr']:#x}, zeroed (spacing 0 cycles)\n")
    assert cli.main([*base, "recv", "--no-progress"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:6] == ["256", "FETCH_ADD", "8", "8", "8", "0"], table
    assert table[2] == (f"  QP 256: 1 of 1 target in the host's memory from "
                        f"{opened[0]['addr']:#x} holds what the run leaves (+1 per FETCH_ADD)")
    assert cli.main([*base, "atomic", "--direction", "fpga-to-host", "--count", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    addr = opened[0]["addr"]
    assert out[:4] == [
        f"FPGA QP 256: 4 FETCH_ADDs of 1 on host address {addr:#x}: 0x0 -> 0x4 (expected 0x4)",
        f"FPGA QP 257: 4 FETCH_ADDs of 1 on host address {addr:#x}: 0x4 -> 0x8 (expected 0x8)",
        f"counter {addr:#x} (2 FPGA QPs, one run after the other): 0x8 (expected 0x8: 2 x 4 "
        f"FETCH_ADDs)",
        "originals of FPGA QP 257's messages 0..3, READ back from the FPGA's memory at "
        "0x0..0xff (QP 257): 4 distinct, each as the model says"]
    assert out[-1] == "every check holds"
    assert cli.main([*base, "atomic", "--direction", "fpga-to-host", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counter"]["final"] == 128
    for argv, text in ((["atomic", "--direction", "fpga-to-host", "--offset", "8"],
                        "--offset applies to the host's atomics"),
                       (["traffic", "--op", "COMPARE_SWAP", "--size", "16"],
                        "an atomic run's size must be 8"),
                       (["traffic", "--op", "WRITE", "--targets", "2"],
                        "--targets applies to the atomics")):
        assert cli.main([*base, *argv]) == 2
        assert text in capsys.readouterr().err
    fpga.agent.shutdown()
    server.join(timeout=0)


def test_cm_client_points_a_qp_and_starts_atomics():
    """SEND_QP_INFO from the client: the FPGA's QP works on the memory it names (its context's
    R_Key and base), its PSN untouched; the atomic test-traffic datagram starts a generator run
    of the FETCH_ADD / COMPARE_SWAP work-request opcode (the connection manager's model)."""
    f = ModelFpga(num_qps=2)
    cm = CmClient("127.0.0.1", f.port, timeout=0.5)
    try:
        ip = parse_ip(HOST_IP)
        opened = cm.open(qpn=0x11, psn=0x100, rkey=5, vaddr=0x1000, ip=ip, pmtu=1024,
                         read_depths=(16, 16))
        k = opened["fpga_qpn"] - 256
        cm.send_qp_info(qpn=0x11, psn=0x100, fpga_qpn=opened["fpga_qpn"], rkey=9,
                        vaddr=0x2000, ip=ip, read_depths=(16, 16))
        ctx = f.model.context[k]
        assert (ctx["rkey"], ctx["base_va"], ctx["peer_qpn"], ctx["state"]) == \
            (9, 0x2000, 0x11, QpState.RTS.value)
        for op, code in (("FETCH_ADD", WrOpcode.FETCH_ADD), ("COMPARE_SWAP",
                                                              WrOpcode.COMPARE_SWAP)):
            res = f.model.receive(traffic(opened["fpga_qpn"], 8, 5, atomic=op, window_log2=3),
                                  src_ip=ip)
            assert (res.gen["opcode"], res.gen["imm"], res.gen["window"]) == \
                (code.value, 1 if op == "FETCH_ADD" else 0, 8)
        n = len(f.requests)
        cm.traffic(opened["fpga_qpn"], 8, 5, atomic="COMPARE_SWAP")
        for _ in range(500):
            if len(f.requests) > n:
                break
            time.sleep(0.01)
        assert f.requests[-1][51] >> 5 & 3 == 2
    finally:
        cm.close()
        f.close()
