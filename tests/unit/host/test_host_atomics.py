"""``rocegen-host atomic``: the host agent's contended counter on the simulated NIC
(:class:`rocegen.host.nic.SimNic`, the NIC model on a wire) against an FPGA played by a second
NIC model (its atomic responder executes the atomics, in the byte order asked) and a
connection manager in memory; no simulator. Every QP at once FETCH_ADDs or spins on
COMPARE_SWAPs on one target; the checks hold, fail where they must (a target big-endian read
as little, an FPGA without atomics) and say why. On the verbs path (a fake pyverbs) the work
requests, the regions' and QPs' remote atomic access; :func:`counter_problems` on figures made
wrong on purpose."""

import json
import socket
import threading

import pytest

from rocegen.host import cli
from rocegen.host.agent import Agent, AgentError
from rocegen.host.counter import CounterQp, counter_problems
from rocegen.host.nic import NicError, SimNic, VerbsNic
from rocegen.sim.models.rnic import Access, Behaviour, Rnic
from rocegen.wire.atomics import ATOMIC_VERBS
from rocegen.wire.opcodes import ROWS
from rocegen.wire.simwire import FrameReader, encode_frame
from tests.unit.host.test_cm_client import serving

FPGA_MAC, FPGA_IP = "02:00:00:00:00:01", "10.0.0.2"
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"
#: the FPGA's region (every QP's, one R_Key) and the default target: its last 8-byte word
BASE, LENGTH, RKEY = 0x10000, 0x8000, 0x5EED01
LAST = BASE + LENGTH - 8


class AtomicFpga:
    """An FPGA made of the NIC model (answering at once) behind a wire, and its connection
    manager: OPEN_QP makes a QP of the model (taking atomics when ``atomics``), whose region
    holds 64-bit values in ``byteorder``."""

    fpga = ("127.0.0.1", 17185)

    def __init__(self, *, byteorder="little", atomics=True):
        self.rnic = Rnic(FPGA_MAC, FPGA_IP, strict=atomics,
                         behaviour=Behaviour(response_ns=(0.0, 0.0), ack_timer_ns=0.0))
        self.rnic.atomics.byteorder = byteorder
        self.rnic.register_mr(BASE, LENGTH, RKEY, Access.LOCAL_WRITE | Access.REMOTE_WRITE |
                              Access.REMOTE_READ | Access.REMOTE_ATOMIC)
        self.access = Access.REMOTE_WRITE | Access.REMOTE_READ
        if atomics:
            self.access |= Access.REMOTE_ATOMIC
        self.lock = threading.Lock()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.nic = SimNic(("127.0.0.1", self.server.getsockname()[1]), mac=HOST_MAC, ip=HOST_IP)

    def _run(self):
        conn, _ = self.server.accept()
        reader = FrameReader(times=False)
        while True:
            try:
                data = conn.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            with self.lock:
                out = [a for f in reader.feed(data) for a in self.rnic.receive(f)]
                out += self.rnic.next_frames()
            conn.sendall(b"".join(encode_frame(f) for f in out))

    # the connection manager
    def open(self, *, qpn, psn, pmtu, read_depths, **kw):
        k = len(self.rnic.qps)
        with self.lock:
            self.rnic.create_qp(256 + k, peer_qpn=qpn, peer_ip=HOST_IP, peer_mac=HOST_MAC,
                                epsn=psn, pmtu=pmtu, access=self.access)
        return {"fpga_qpn": 256 + k, "fpga_psn": psn, "rkey": RKEY, "base": BASE,
                "length": LENGTH, "rd_atomic": 16, "rd_depth": 16}

    def close_qp(self, **kw):
        pass

    def value(self, addr=LAST):
        with self.lock:
            return int.from_bytes(self.rnic.read_mem(addr, 8), self.rnic.atomics.byteorder)

    def poke(self, value, addr=LAST):
        with self.lock:
            self.rnic.write_mem(addr, value.to_bytes(8, self.rnic.atomics.byteorder))

    def close(self):
        self.nic.close()
        self.server.close()


@pytest.fixture
def fpga(request):
    f = AtomicFpga(**getattr(request, "param", {}))
    agent = Agent(f.nic, f, FPGA_IP, window=1 << 16, recv_depth=2, recv_size=4096)
    f.agent = agent
    yield f
    agent.shutdown()
    f.close()


def test_the_atomic_verbs_are_the_catalogues():
    assert sorted(ATOMIC_VERBS) == sorted(r.verb.value for r in ROWS if r.has_atomic_eth)


def test_contended_fetch_add_across_the_wrap(fpga):
    """3 QPs x 40 FETCH_ADDs, 16 outstanding each, on a counter 50 below 2^64: it wraps to
    70, and the 120 values returned are 2^64 - 50 .. 69, each once."""
    opened = fpga.agent.open(3, pmtu=1024)
    assert [q["atomics"] for q in opened] == ["HCA"] * 3
    fpga.poke(2**64 - 50)
    r = fpga.agent.atomic(op="FETCH_ADD", count=40)
    assert r["ok"], r
    (t,) = r["targets"]
    assert (t["addr"], t["fpga_qpns"], t["initial"], t["final"], t["expected"]) == \
        (LAST, [256, 257, 258], 2**64 - 50, 70, 70)
    assert (t["ops"], t["distinct"], t["consecutive"], t["problems"]) == (120, 120, True, [])
    assert [(q["done"], q["attempts"], q["errors"]) for q in r["qps"]] == [(40, 40, [])] * 3
    assert r["ops"] == 120 and fpga.value() == 70
    assert fpga.rnic.counters["atomic_ack_tx"] == 120
    # one QP alone, at an offset of its own, 1 outstanding
    r = fpga.agent.atomic(257, op="FETCH_ADD", count=5, offset=0x100, depth=1)
    assert r["ok"] and [q["fpga_qpn"] for q in r["qps"]] == [257], r
    assert (r["targets"][0]["initial"], r["targets"][0]["final"]) == (0, 5)
    assert fpga.value(BASE + 0x100) == 5


def test_contended_compare_swap(fpga):
    """3 QPs spin on COMPARE_SWAP until 25 swaps each took: 75 in all, one per value."""
    fpga.agent.open(3, pmtu=1024)
    fpga.poke(1000)
    r = fpga.agent.atomic(op="COMPARE_SWAP", count=25)
    assert r["ok"], r
    (t,) = r["targets"]
    assert (t["initial"], t["final"], t["successes"], t["distinct"], t["consecutive"]) == \
        (1000, 1075, 75, 75, True)
    assert all(q["done"] == 25 for q in r["qps"])
    assert r["ops"] == sum(q["attempts"] for q in r["qps"]) >= 75
    assert fpga.value() == 1075


@pytest.mark.parametrize("fpga", [{"byteorder": "big"}], indirect=True)
def test_a_big_endian_target(fpga):
    """Read little-endian, a big-endian counter fails the checks with a hint that names the
    order; ``byte_order="big"`` passes (the swaps start from the value they find, either way)."""
    fpga.agent.open(2, pmtu=1024)
    fpga.poke(7)
    bad = fpga.agent.atomic(op="COMPARE_SWAP", count=4)
    assert not bad["ok"] and fpga.value() == 15, bad
    problems = bad["targets"][0]["problems"]
    assert problems[-1].startswith("read big-endian, the target's values pass every check"), bad
    good = fpga.agent.atomic(op="FETCH_ADD", count=6, byte_order="big")
    assert good["ok"] and (good["targets"][0]["initial"], good["targets"][0]["final"]) == \
        (15, 27), good


@pytest.mark.parametrize("fpga", [{"atomics": False}], indirect=True)
def test_an_fpga_without_atomics(fpga):
    """The FPGA's QP takes no atomics: the first is NAKed invalid request, the QP goes to ERROR
    and the error says why; the agent refuses the QP afterwards."""
    fpga.agent.open(1, pmtu=1024)
    r = fpga.agent.atomic(count=3)
    assert not r["ok"]
    assert r["qps"][0]["errors"][0] == ("atomic 0: REM_INV_REQ_ERR (NAK invalid request: an "
                                        "FPGA built without --atomics refuses atomics)"), r
    assert r["targets"][0]["problems"] == ["no QP left to READ the target with"]
    assert fpga.agent.status()["qps"][0]["state"] == "ERROR"
    with pytest.raises(AgentError, match="is in ERROR"):
        fpga.agent.atomic(count=1)


def test_atomic_usage_is_checked(fpga):
    fpga.agent.open(1, pmtu=1024)
    for kw, text in (({"op": "SWAP"}, "op must be one of FETCH_ADD, COMPARE_SWAP"),
                     ({"count": 0}, "count must be 1"),
                     ({"depth": 17}, "depth must be 1..16"),
                     ({"byte_order": "middle"}, "byte order must be one of little, big"),
                     ({"offset": 4}, f"the target {BASE + 4:#x} .* is not a multiple of 8"),
                     ({"offset": LENGTH - 4}, "is not inside the FPGA's region"),
                     ({"offset": -8}, "is not inside the FPGA's region")):
        with pytest.raises(AgentError, match=text) as e:
            fpga.agent.atomic(**kw)
        assert e.value.kind == "usage"
    with pytest.raises(AgentError, match="no open QP with the FPGA's QP 300"):
        fpga.agent.atomic(300)


def test_the_command_line(fpga, tmp_path, capsys):
    """``rocegen-host atomic`` through the agent's socket: the text, ``--json``, the exit
    status."""
    fpga.agent.open(2, pmtu=1024)
    server = serving(fpga.agent, tmp_path / "agent.sock", keep=True)
    base = ["--state-dir", str(tmp_path), "atomic"]
    assert cli.main([*base, "--count", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"QP 256: 8 of 8 FETCH_ADDs of 1 completed on FPGA address {LAST:#x}"
    assert out[2] == (f"target {LAST:#x} (2 QPs): 0x0 -> 0x10 (expected 0x10: 2 x 8 "
                      f"increments); 16 values returned, 16 distinct, consecutive from the "
                      f"initial value")
    assert out[-1] == "every check holds"
    assert cli.main([*base, "--op", "COMPARE_SWAP", "--count", "3", "--qp", "257",
                     "--offset", "0x40", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ok"] and r["targets"][0]["successes"] == 3 and r["targets"][0]["addr"] == \
        BASE + 0x40
    fpga.poke(5, BASE + 0x40)
    assert cli.main([*base, "--offset", "0x44"]) == 2          # not 8-aligned: usage
    assert "is not a multiple of 8" in capsys.readouterr().err
    fpga.agent.shutdown()
    server.join(timeout=0)


def test_counter_problems_find_what_is_wrong():
    def part(op, count, values, won=()):
        p = CounterQp(1, 256, op, count, LAST, RKEY, 0, 16)
        p.values, p.won = list(values), list(won)
        return p
    assert counter_problems("FETCH_ADD", 10, 14, [part("FETCH_ADD", 2, [10, 12]),
                                                  part("FETCH_ADD", 2, [11, 13])]) == \
        ([], {"ops": 4, "distinct": 4, "consecutive": True, "expected": 14})
    # an add executed twice (a value returned twice, the target one too far)
    problems, _ = counter_problems("FETCH_ADD", 0, 5, [part("FETCH_ADD", 2, [0, 1]),
                                                       part("FETCH_ADD", 2, [1, 3])])
    assert problems == ["1 values returned more than once: an add executed twice or lost",
                        "the target went from 0x0 to 0x5, not to 0x4 (4 increments)"]
    # an add lost: a gap, and one short
    problems, f = counter_problems("FETCH_ADD", 0, 3, [part("FETCH_ADD", 3, [0, 2, 3])])
    assert not f["consecutive"] and problems[0].startswith("the values returned are not 3")
    # two swaps took on one value
    problems, f = counter_problems("COMPARE_SWAP", 0, 2, [part("COMPARE_SWAP", 1, [0], [0]),
                                                          part("COMPARE_SWAP", 1, [0], [0])])
    assert problems == ["1 values were swapped twice: two COMPARE_SWAPs found the same value"]
    assert f["successes"] == 2 and f["distinct"] == 1


def test_compare_swap_guesses_follow_the_target():
    """A QP's guesses: on from its last, past the others' swaps, back when they ran ahead."""
    p = CounterQp(1, 256, "COMPARE_SWAP", 10, LAST, RKEY, 0, 4, guess=5)
    assert [p.next_post()[2] for _ in range(3)] == [5, 6, 7]
    p.completed(0, "SUCCESS", 5)            # took
    p.completed(1, "SUCCESS", 9)            # others took it to 9
    assert p.won == [5] and p.guess == 9
    p.completed(2, "SUCCESS", 9)            # (7: behind the target, the guess stays)
    assert p.guess == 9 and p.next_post() == (3, 10, 9)
    p.completed(3, "SUCCESS", 2)            # far behind what it guessed: back to the target
    assert p.guess == 2
    p.completed(4, "WR_FLUSH_ERR", None)
    assert p.failed and p.errors == ["completion of atomic 4, expected None"]


# ---------------------------------------------------------------------- pyverbs



def test_verbs_atomics(verbs):
    """pyverbs: IBV_WR_ATOMIC_FETCH_AND_ADD / IBV_WR_ATOMIC_CMP_AND_SWP with set_wr_atomic(rkey,
    remote_addr, compare_add, swap) and one 8-byte SGE; regions and QPs with remote atomic
    access (IBV_ACCESS_REMOTE_ATOMIC, 8)."""
    nic = VerbsNic()
    try:
        assert nic.atomic_cap() == "HCA" and nic.result_order in ("little", "big")
        qpn = nic.create_qp(4)
        addr, _ = nic.register(4096)
        nic.connect_qp(qpn, 256, FPGA_IP, 0x123, 1024, rd_atomic=16, rd_depth=16)
        assert verbs.mr_access == [1 | 2 | 4 | 8]
        assert verbs.rtr[0]["qp_access_flags"] == 1 | 2 | 4 | 8
        assert verbs.rtr[0]["max_rd_atomic"] == 16
        nic.post_send(qpn, 1, "FETCH_ADD", addr + 8, 8, remote_addr=0x2000, rkey=0xAB,
                      swap_add=3)
        nic.post_send(qpn, 2, "COMPARE_SWAP", addr + 16, 8, remote_addr=0x2008, rkey=0xAB,
                      swap_add=0x11, compare=0x10)
        fa, cs = nic.qps[qpn].posted
        assert (fa.opcode, fa.atomic, fa.rdma, fa.wr_id) == (6, (0xAB, 0x2000, 3, 0), None,
                                                            1 | VerbsNic.SEND_TAG)
        assert (cs.opcode, cs.atomic) == (5, (0xAB, 0x2008, 0x10, 0x11))
        assert [(g.addr, g.length) for g in fa.sg + cs.sg] == [(addr + 8, 8), (addr + 16, 8)]
        for op, kw, text in (("FETCH_ADD", {"swap_add": 1, "compare": 2}, "no compare"),
                             ("COMPARE_SWAP", {"swap_add": 1}, "compare must be a 64-bit"),
                             ("FETCH_ADD", {"swap_add": 1 << 64}, "swap_add must be a 64-bit"),
                             ("WRITE", {"swap_add": 1}, "no atomic operands")):
            with pytest.raises(NicError, match=text):
                nic.post_send(qpn, 3, op, addr, 8, **kw)
        with pytest.raises(NicError, match="works on 8 bytes"):
            nic.post_send(qpn, 3, "FETCH_ADD", addr, 16, swap_add=1)
    finally:
        nic.close()
    assert verbs.misuse == []


def test_verbs_without_atomics(verbs):
    """A device with IBV_ATOMIC_NONE: no remote atomic access, and the agent refuses atomics."""
    verbs.atomic_caps = 0
    nic = VerbsNic()
    try:
        assert nic.atomic_cap() is None
        nic.register(4096)
        assert verbs.mr_access == [1 | 2 | 4]
        agent = Agent(nic, None, FPGA_IP)
        try:
            with pytest.raises(AgentError, match="offers no atomics") as e:
                agent.atomic()
            assert e.value.kind == "no_atomics"
        finally:
            agent.shutdown()
    finally:
        nic.close()
