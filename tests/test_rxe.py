"""``rocegen sim rxe`` in the gate: the endpoint (Verilator, W = 64) against Linux's own RDMA
stack, soft-RoCE ``rdma_rxe`` in a QEMU guest, with the host agent on real pyverbs. One short
co-simulation: the FPGA WRITEs with immediate data, SENDs into rxe memory and READs it, the host
WRITEs, SENDs with immediate data into the FPGA and READs it back, the FPGA's traffic generator
FETCH_ADDs on a counter in rxe's memory (``rocegen-host atomic --direction fpga-to-host``), then
rxe's FETCH_ADDs and COMPARE_SWAPs on a counter in the FPGA's memory (``rocegen-host atomic``);
then, through the FPGA's standard RDMA connection manager (the IB CM over QP1, built with
``--rdma-cm-port``), librdmacm's own ``cmtime`` connects to the FPGA and disconnects, stock
``rping -c -C 10 -S 4096 -V`` pings the FPGA's rping server, librdmacm's ``rdma_client``
example gets its message back from the FPGA's SEND echo, and the host agent connects
through librdmacm (``connect --rdma-cm``), WRITEs into the region the
FPGA's REP stated and READs it back. The IB CM's own proofs: while the agent's QP of UDP 17185
is open, ``rping`` through the IB CM takes the pool's other QP and both carry checked traffic
(``cm:mixed``); rping's host vanishes (the link cut both ways under a busy connection): the
FPGA's QP runs out of retries, its IB CM sends its DREQ and sends it again as often as Linux's
REQ allows, unanswered, waits out the time-wait and gives the QP back, and rping connects
again (``cm:vanish``); rping's one DREQ is lost (rping destroys its id at once, so Linux does
not send it again), and the FPGA closes the connection left open once it was quiet, its DREQ
answered by Linux, the QP given back (``cm:quiet``); the FPGA connects a second time in the
run, as rping's client, to
stock ``rping -s`` in the guest (``cm:rping_server``: ten pings, each printed by rping as
rping's own client makes it, each compared by the FPGA); cmtime
takes every QP of the FPGA at once, twice, each QP free again after each round
(``cm:loop``), no QP held after it. A tenth of the RoCEv2 frames (the CM's MADs too) is lost
each way (none while ``cm:quiet`` drops rping's DREQ). Every byte is checked (by the host agent
against the test pattern, by the FPGA's pattern sink), every atomic's original value by the
agent (the counter rose by the atomics' number, each value came back once), every frame the FPGA
sent passed the independent frame check, and Wireshark's dissector (when tshark is here) decodes
every frame of the capture, rxe's and the FPGA's.

Needs root, ``/dev/net/tun``, QEMU, debootstrap and cpio (``make setup`` installs them as root
and builds the guest, ``make rxe-guest``): skipped elsewhere with what is missing; a failure in
CI (``CI=true``), which runs as root."""

import json
import os
import subprocess
import sys

import pytest

from rocegen.sim.apps.interop import check_pcap, tshark_path
from rocegen.sim.apps.rxe import classify_pcap
from rocegen.sim.apps.rxe_guest import missing_tools

pytestmark = pytest.mark.xdist_group("rxe")

COUNT, SIZE = 2, 2500
STEPS = ("connect", "fpga:WRITE_IMM", "fpga:SEND", "fpga:READ", "fpga:FETCH_ADD", "host:WRITE",
         "host:SEND_IMM", "host:READ", "host:FETCH_ADD", "host:COMPARE_SWAP", "cm:mixed", "stop",
         "cm:cmtime", "cm:rping", "cm:rdma_client", "cm:rdma_server", "cm:vanish",
         "cm:quiet", "cm:rping_server", "cm:loop", "cm:connect", "host:WRITE", "host:READ", "stop")
#: cm:loop's rounds in the gate (each: cmtime on every QP of the FPGA)
LOOPS = 2
#: the FPGA's QPs (``rocegen sim rxe`` builds at least 2: the agent's one and the IB CM's)
FPGA_QPS = 2
#: the max CM retries of the REQs of Linux's rdma_cm (``CMA_MAX_CM_RETRIES``): the FPGA's DREQ
#: to a host that vanished is sent again as often
LINUX_MAX_CM_RETRIES = 15
#: the TCP port the FPGA's IB CM listens on for the agent and cmtime (rping's, 7174, is the
#: FPGA's rping server's; rdma_client's, 7471, its SEND echo's)
RDMA_CM_PORT = 7470
#: (who checks, steps): the host agent checks what the FPGA WRITEs and SENDs and what it READs
#: back; the FPGA's pattern sink what the host writes and sends and what it READs from the host
HOST_CHECKS = ("fpga:WRITE_IMM", "fpga:SEND", "host:READ")
FPGA_CHECKS = ("fpga:READ", "host:WRITE", "host:SEND_IMM")
#: rxe's atomics on the FPGA's counter, checked by the host agent
ATOMIC_CHECKS = ("host:FETCH_ADD", "host:COMPARE_SWAP")
#: the FPGA's atomics on a counter in rxe's memory, checked by the host agent
FPGA_ATOMIC_CHECKS = ("fpga:FETCH_ADD",)


def _can_run():
    why = missing_tools()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"rocegen sim rxe cannot run in CI: {why}")
        pytest.skip(f"rocegen sim rxe cannot run here: {why}")


def _report(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    lines = r.stdout.strip().splitlines()
    assert lines, f"rocegen sim rxe printed nothing (status {r.returncode}):\n{r.stderr[-4000:]}"
    return {"rc": r.returncode, "report": json.loads(lines[-1]), "stderr": r.stderr}


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    _can_run()
    out = tmp_path_factory.mktemp("rxe")
    cmd = [sys.executable, "-m", "rocegen.cli", "sim", "rxe", "--width", "64", "--qps", "1",
           "--count", str(COUNT), "--size", str(SIZE), "--steps", ",".join(STEPS),
           "--loss-to-fpga", "0.1", "--loss-from-fpga", "0.1", "--loss-seed", "3",
           "--rdma-cm-port", str(RDMA_CM_PORT), "--cm-loops", str(LOOPS),
           "--output", str(out), "--json"]
    return {**_report(cmd), "out": out}


#: the run's readings shown beside a failing step: the IB CM's counters, the cut, the QPs held,
#: the frames each way, the losses, the FPGA's counters
WHOLE_RUN = ("ibcm", "cut", "qp_open", "frames", "loss", "fpga")


def _shown(step):
    """A step's readings as the failure message: a string, which pytest prints whole (a dict or
    a tuple it cuts to a line)."""
    return "\n" + json.dumps(step, indent=1, default=str)


def test_every_step_passes_with_every_byte_checked(lossy):
    rep = lossy["report"]
    assert [s["step"] for s in rep["steps"]] == list(STEPS), lossy["stderr"][-4000:]
    failed = [s for s in rep["steps"] if not s["ok"]]
    assert not failed and lossy["rc"] == 0 and rep["ok"], \
        "".join(map(_shown, failed)) + _shown({k: rep.get(k) for k in WHOLE_RUN}) + "\n" + \
        lossy["stderr"][-4000:]
    by = {s["step"]: s for s in rep["steps"]}
    for who, steps in (("host", HOST_CHECKS), ("fpga", FPGA_CHECKS)):
        # (host:WRITE and host:READ run twice: on the QP of UDP 17185, then of the IB CM)
        for s in (s for s in rep["steps"] if s["step"] in steps):
            assert (s["checked_by"], s["checked"], s["wrong"], s["messages"]) == \
                (who, COUNT * SIZE, 0, COUNT), _shown(s)
    for step in ATOMIC_CHECKS:
        # one QP: every COMPARE_SWAP takes (the agent guesses from the value it READ)
        s = by[step]
        assert (s["checked_by"], s["checked"], s["wrong"], s["messages"]) == \
            ("host", COUNT, 0, COUNT), _shown(s)
        (t,) = s["atomic"]["targets"]
        assert (t["final"] - t["initial"]) % 2**64 == COUNT and t["distinct"] == COUNT, _shown(s)
        assert t["consecutive"] and t["problems"] == [], _shown(s)
    for step in FPGA_ATOMIC_CHECKS:
        # one QP, one run: the counter in rxe's memory ends at COUNT, and the run's originals,
        # READ back from the FPGA's memory, are the model's (0 .. COUNT - 1), each once
        s = by[step]
        assert (s["checked_by"], s["checked"], s["wrong"], s["messages"]) == \
            ("host", COUNT, 0, COUNT), _shown(s)
        (t,) = s["atomic"]["targets"]
        assert (t["final"], t["expected"], t["originals"], t["distinct"], t["problems"]) == \
            (COUNT, COUNT, COUNT, COUNT, []), _shown(s)


def test_qps_of_both_managers_carry_checked_traffic_at_once(lossy):
    """``cm:mixed``: the agent's QP of UDP 17185 open, rping through the IB CM took the other QP
    of the pool (both seen held at once), the agent's WRITE into the FPGA checked by its
    pattern sink meanwhile, and rping's ten pings, each compared by rping (``-V``), went on."""
    (mx,) = [s for s in lossy["report"]["steps"] if s["step"] == "cm:mixed"]
    assert (mx["checked_by"], mx["checked"], mx["wrong"], mx["messages"]) == \
        ("fpga", COUNT * SIZE, 0, COUNT), _shown(mx)
    m = mx["mixed"]
    assert m["both_seen"] and m["qp_open_both"] == (1 << FPGA_QPS) - 1, _shown(mx)
    assert m["pings"] == 10 and m["fpga_pings"] == 10, _shown(mx)


def test_a_host_that_vanishes_gives_its_qp_back(lossy):
    """``cm:vanish``: the link cut both ways under rping's busy connection. The FPGA's request
    went unanswered until its retries ran out; its IB CM began one disconnect, whose DREQ it
    sent once and again as often as Linux's REQ allows (the capture holds them all: the cut
    drops the FPGA's frames after the capture), none answered; the time-wait ended and every
    QP was free while the link was still cut; then rping connected again, its pings checked."""
    rep = lossy["report"]
    (v,) = [s for s in rep["steps"] if s["step"] == "cm:vanish"]
    x, f = v["vanish"], v["vanish"]["fpga"]
    # (the cut follows the FPGA's count of the second ping; rping's check of that ping may
    # need frames the cut drops, so rping has checked one at least)
    assert v["ok"] and x["busy"] and x["fpga_pings_before_cut"] >= 2, _shown(v)
    assert x["pings_before_cut"] >= 1, _shown(v)
    assert f["roce_timeouts"] >= 1 and f["ibcm_disconnects"] == 1, _shown(v)
    assert f["ibcm_dreq_timeouts"] == 1 and f["ibcm_timewait_exits"] >= 1, _shown(v)
    assert f["ibcm_retransmits"] >= LINUX_MAX_CM_RETRIES and x["qp_open_cut"] == 0, _shown(v)
    assert x["cut"]["cuts"] == 1 and x["cut"]["dropped_from_fpga"] >= 1 + LINUX_MAX_CM_RETRIES
    # the capture holds the DREQs the port sent, those the cut dropped too
    assert rep["frames"]["from_fpga"]["CM DREQ"] >= 1 + LINUX_MAX_CM_RETRIES, rep["frames"]
    assert rep["cut"]["cuts"] == 1 and not rep["cut"]["active"], rep["cut"]
    assert x["again_ok"] and x["again"]["pings"] == 2 and x["again"]["fpga_pings"] == 2, _shown(v)


def test_a_client_whose_dreq_is_lost_gives_its_qp_back(lossy):
    """``cm:quiet``: stock ``rping -C 2`` whose one DREQ the simulation dropped ended well with
    its pings checked; the FPGA closed the connection once quiet (one close for quiet, one DREQ
    of its own, answered: none timed out) and gave the QP back (a time-wait ended, the QPs held
    before the step held again, none other). And every step without the host agent began with
    every QP free (a connection left open by a DREQ the lossy link lost elsewhere is closed in
    the same way)."""
    rep = lossy["report"]
    (q,) = [s for s in rep["steps"] if s["step"] == "cm:quiet"]
    x, f = q["quiet"], q["quiet"]["fpga"]
    assert q["ok"] and x["rping"]["pings"] == 2 and x["rping"]["fpga_pings"] == 2, _shown(q)
    assert x["dreqs_dropped"] == 1 and f["ibcm_idle_closes"] == 1, _shown(q)
    assert f["ibcm_disconnects"] == 1 and f["ibcm_dreq_timeouts"] == 0, _shown(q)
    assert f["ibcm_timewait_exits"] >= 1 and x["qp_open_after"] == x["qp_open_before"], _shown(q)
    assert all(s["free_at_start"] is not False for s in rep["steps"]), \
        [(s["step"], s["free_at_start"]) for s in rep["steps"]]


def test_qps_opened_and_closed_in_a_loop_all_come_back(lossy):
    """``cm:loop``: cmtime on every QP of the FPGA at once, round after round: each round
    ended well, the FPGA counted every connection's time-wait ended, and every QP was free
    after each round and at the step's end."""
    rep = lossy["report"]
    (lo,) = [s for s in rep["steps"] if s["step"] == "cm:loop"]
    x = lo["loop"]
    assert lo["ok"] and x["qps"] == FPGA_QPS and x["free_at_start"], _shown(lo)
    assert [(r["rc"], r["table"], r["free_after"], r["qp_open"]) for r in x["rounds"]] == \
        [(0, True, True, 0)] * LOOPS, _shown(lo)
    # (a lost RTU: the connection reaches its time-wait by the DREQ, never counted established)
    assert x["fpga"]["ibcm_timewait_exits"] == LOOPS * FPGA_QPS, _shown(lo)
    assert 0 < x["fpga"]["ibcm_established"] <= LOOPS * FPGA_QPS, _shown(lo)
    assert x["qp_open"] == 0, _shown(lo)


def test_librdmacm_connects_through_the_fpgas_cm(lossy):
    """cmtime's every step ended (its table whole), the FPGA took its connection and gave the
    QP back (a time-wait ended; counted established unless its RTU was lost, the lossy link's
    right); the agent's connection through librdmacm moved the bytes checked above; the
    CM's MADs went both ways (UD SEND_ONLY to QP1)."""
    rep = lossy["report"]
    (cmtime,) = [s for s in rep["steps"] if s["step"] == "cm:cmtime"]
    assert cmtime["ok"] and set(cmtime["cmtime"]) >= {"connect", "disconnect"}, _shown(cmtime)
    assert cmtime["fpga_timewait_exits"] == 1 and cmtime["fpga_established"] <= 1, _shown(cmtime)
    assert all(rep["frames"][w].get("UD_SEND_ONLY", 0) >= 4 for w in rep["frames"]), rep["frames"]


def test_rping_reaches_the_fpgas_rping_server(lossy):
    """Stock ``rping -c -C 10 -S 4096 -V -v`` against the FPGA's rping server: it ended well,
    printed its ten pings (each compared by rping itself, ``-V``), and the FPGA counted them."""
    (rp,) = [s for s in lossy["report"]["steps"] if s["step"] == "cm:rping"]
    assert rp["ok"] and rp["rping"]["pings"] == 10 and rp["rping"]["fpga_pings"] == 10, _shown(rp)


def test_rdma_client_reaches_the_fpgas_send_echo(lossy):
    """librdmacm's ``rdma_client`` example against the FPGA's SEND echo: its 16 bytes came back
    (it ended ``rdma_client: end 0``), and the FPGA counted the echo."""
    (rc,) = [s for s in lossy["report"]["steps"] if s["step"] == "cm:rdma_client"]
    assert rc["ok"] and rc["rdma_client"]["fpga_echoes"] == 1, _shown(rc)


def test_the_fpga_connects_to_rdma_server(lossy):
    """The FPGA as librdmacm's client: it connects (``rdma_cm_connect``) to the ``rdma_server``
    example listening in the guest (Linux's CM takes its REQ, answers with a REP, gets the
    RTU), SENDs its 16 bytes; rdma_server SENDs 16 back (the FPGA's receive completion) and
    disconnects; it ended ``rdma_server: end 0``. The first of the FPGA's two connects in the
    run (the second: cm:rping_server)."""
    (s,) = [s for s in lossy["report"]["steps"] if s["step"] == "cm:rdma_server"]
    r = s["rdma_server"]
    assert (s["ok"], r["seq"], r["fpga"].get("seq"), r["fpga"].get("ok")) == \
        (True, "1", "1", True), _shown(s)
    assert r["fpga_established"] >= 1, _shown(s)


def test_the_fpgas_rping_client_pings_rping_s(lossy):
    """The FPGA as rping's client: it connects to stock ``rping -s -v`` in the guest (the
    run's second connect of the FPGA, the connect file's new content), runs its ten pings of
    3000 bytes (rping READs each from the FPGA's memory and prints it: each is the ping rping's
    own client makes; it WRITEs it back, the FPGA compares), disconnects, and ``rping -s``
    ends with status 0; the FPGA counted ten pings, one connection done, no mismatch."""
    (s,) = [s for s in lossy["report"]["steps"] if s["step"] == "cm:rping_server"]
    r = s["rping_server"]
    assert s["ok"] and r["seq"] == "2" and r["pings"] == 10 and r["pings_right"], _shown(s)
    assert r["fpga"] == {"pings": 10, "done": 1, "mismatch": 0}, _shown(s)


def test_frames_were_lost_both_ways_and_recovered(lossy):
    """The lossy links lost frames each way, and both peers recovered them: rxe's requester or
    responder saw the FPGA's losses (a NAK, a duplicate, a retry), the FPGA saw rxe's."""
    rep = lossy["report"]
    assert rep["loss"]["to_fpga"]["dropped"] >= 1 and rep["loss"]["from_fpga"]["dropped"] >= 1
    assert rep["why_stopped"] != "frame check failed" and rep["framecheck"]
    frames = classify_pcap(lossy["out"] / "serve.pcap")
    assert frames == {w: type(c)(rep["frames"][w]) for w, c in frames.items()}
    recovery = [k for w in frames for k in frames[w] if k.startswith(("NAK", "RNR", "duplicate"))]
    fpga = rep["fpga"]
    assert recovery or fpga["roce_timeouts"] or fpga["resp_duplicate"], rep


def test_wireshark_decodes_every_frame(lossy):
    tshark = tshark_path()
    if tshark is None:
        pytest.skip("tshark is not installed (as root: make tshark)")
    report, problems = check_pcap(lossy["out"] / "serve.pcap", tshark)
    assert problems == [] and report["roce"] > 0, problems


#: the full tier's loop: rounds of cmtime per cm:loop step, its steps
LONG_LOOPS = 10
LONG_STEPS = ("cm:loop", "cm:rdma_server", "cm:rdma_server", "cm:loop")


@pytest.mark.full
def test_many_connections_in_a_loop_leave_no_qp_taken(tmp_path):
    """The long loop (full tier): twice ``LONG_LOOPS`` rounds of cmtime on every QP of the FPGA,
    with two connects of the FPGA to rdma_server between them: every round ended well, the
    FPGA counted each connection established and each time-wait ended, every QP was free
    after each round, and none is held at the end."""
    _can_run()
    run = _report([sys.executable, "-m", "rocegen.cli", "sim", "rxe", "--width", "64", "--qps",
                   "1", "--steps", ",".join(LONG_STEPS), "--rdma-cm-port", str(RDMA_CM_PORT),
                   "--cm-loops", str(LONG_LOOPS), "--output", str(tmp_path), "--json"])
    rep = run["report"]
    assert [(s["step"], s["ok"]) for s in rep["steps"]] == [(s, True) for s in LONG_STEPS], \
        run["stderr"][-4000:]
    assert rep["ok"] and run["rc"] == 0
    for lo in (s["loop"] for s in rep["steps"] if s["step"] == "cm:loop"):
        assert [(r["rc"], r["free_after"]) for r in lo["rounds"]] == [(0, True)] * LONG_LOOPS
        assert lo["fpga"]["ibcm_established"] == lo["fpga"]["ibcm_timewait_exits"] == \
            LONG_LOOPS * FPGA_QPS, _shown(lo)
    assert [s["rdma_server"]["fpga"]["seq"] for s in rep["steps"]
            if s["step"] == "cm:rdma_server"] == ["1", "2"]
    assert rep["qp_open"] == 0
