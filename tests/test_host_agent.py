"""The host agent (``rocegen-host``) against the simulated FPGA (``rocegen sim serve``) over the
socket bridge, as separate processes exactly as on a bench: open, traffic, check, close, reopen;
the host's WRITEs and SENDs into the FPGA with its pattern sink's verdict; the host's READs of the
FPGA and the FPGA's READs of the host; the host's atomics (the contended counter) and the FPGA's
on the host's memory; a QP the FPGA NAKs into the error state while another keeps working; more
QPs than exist; a host outside the allow-list; malformed datagrams; a host that vanishes in the
middle of a transfer.

One simulated FPGA (W = 64, 4 QPs, the responder with atomics, hosts allowed from 10.0.0.0/24) serves every
test of this file; they run in order in one worker (``xdist_group``) and each leaves no QP open.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from rocegen.host.agent import request
from rocegen.host.cm_client import CmClient, CmError
from rocegen.sim.apps.bridge import FrameReader, encode_frame
from rocegen.sim.models.cm import cm as M
from rocegen.sim.models.rnic import Rnic
from rocegen.wire.addr import parse_ip
from rocegen.wire.pattern import pattern

pytestmark = pytest.mark.xdist_group("serve")

NUM_QPS = 4
FPGA_IP, HOST_IP = "10.0.0.2", "10.0.0.1"
#: seconds a connection-manager request waits for its reply before it is sent again. The
#: simulated FPGA answers within milliseconds, but a CI machine busy with other simulations can
#: hold it up for longer than a real FPGA's 0.5 s, and a retried OPEN_QP takes a second QP when
#: both copies arrive (the client closes it again only when its reply comes soon enough).
CM_WAIT = 10.0


def _wait_for(predicate, what, tries=600, step=0.1):
    """Poll ``predicate`` up to ``tries`` times (a bound on polls, not a speed requirement)."""
    for _ in range(tries):
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture(scope="module")
def fpga(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    status = d / "status.json"
    log = open(d / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocegen.cli", "sim", "serve", "--width", "64",
         "--qps", str(NUM_QPS), "--allow-net", "10.0.0.0/24", "--tunnel-port", "0",
         "--wire-port", "0", "--status", str(status), "--pcap", str(d / "serve.pcap")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def ready():
        if proc.poll() is not None:
            raise AssertionError(f"rocegen sim serve exited: {(d / 'serve.log').read_text()[-3000:]}")
        return status.exists() and json.loads(status.read_text())
    st = _wait_for(ready, "rocegen sim serve ready", tries=6000)
    st["dir"], st["status_path"], st["proc"] = d, status, proc
    yield st
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, (d / "serve.log").read_text()[-3000:]
    final = json.loads(status.read_text())
    assert final["state"] == "stopped"
    log.close()


@pytest.fixture(autouse=True)
def no_agent_left(tmp_path):
    """Whatever a test did, no agent of it outlives it."""
    yield
    sock = tmp_path / "agent" / "agent.sock"
    if sock.exists():
        try:
            request(sock, {"cmd": "shutdown"}, timeout=30)
        except (ConnectionError, OSError):
            pass


def stats(fpga):
    """The FPGA's counters from the status file, read after this call."""
    first = json.loads(fpga["status_path"].read_text()).get("cycles", 0)

    def newer():
        st = json.loads(fpga["status_path"].read_text())
        return st["stats"] if (st.get("stats_at") or 0) > first else None
    return _wait_for(newer, "fresh counters from the simulated FPGA")


def host(fpga, tmp_path, *args, check=True):
    """Run ``rocegen-host`` with the state directory of this test; returns the process result."""
    cmd = [sys.executable, "-m", "rocegen.host.cli", "--state-dir", str(tmp_path / "agent"),
           *args]
    if args[0] == "connect":
        cmd += ["--sim", "--device", f"sim:127.0.0.1:{fpga['wire_port']}",
                "--cm-port", str(fpga["cm_port"]), "--reply-timeout", str(CM_WAIT)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check:
        assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def recv_ok(fpga, tmp_path):
    r = host(fpga, tmp_path, "recv", "--json")
    reply = json.loads(r.stdout)
    assert reply["ok"], reply
    for row in reply["result"]:
        assert row["ok"] and row["verified"] == row["count"] and row["bad"] == 0, row
        # the rate in the FPGA's time: the simulated cycles of the run's frames at the W = 64
        # core clock; no goodput exceeds the simulated MAC's 10 Gb/s line
        assert row["fpga_clock_mhz"] == 156.25 and row["fpga_cycles"] > 0, row
        assert row["fpga_gbps"] == pytest.approx(
            row["bytes"] * 8 / (row["fpga_cycles"] / 156.25e6) / 1e9), row
        assert 0 < row["fpga_gbps"] < 10, row
    return reply["result"]


def test_open_traffic_check_close_reopen(fpga, tmp_path):
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--pmtu", "1024",
                             "--window", "65536", "--json").stdout)
    assert [q["fpga_qpn"] for q in opened] == [256, 257]
    # WRITEs that fit the window: every message checked in place; one that wraps it twice
    host(fpga, tmp_path, "traffic", "--op", "WRITE", "--count", "12", "--size", "5000")
    rows = recv_ok(fpga, tmp_path)
    assert [r["fpga_qpn"] for r in rows] == [256, 257]
    host(fpga, tmp_path, "traffic", "--qp", "257", "--op", "WRITE", "--count", "40",
         "--size", "4096")
    recv_ok(fpga, tmp_path)
    # SENDs with immediate (every byte and immediate checked), WRITEs with immediate
    host(fpga, tmp_path, "traffic", "--op", "SEND_IMM", "--count", "6", "--size", "3000")
    recv_ok(fpga, tmp_path)
    host(fpga, tmp_path, "traffic", "--qp", "256", "--op", "WRITE_IMM", "--count", "5",
         "--size", "1500")
    recv_ok(fpga, tmp_path)
    host(fpga, tmp_path, "traffic", "--qp", "256", "--op", "SEND", "--count", "3", "--size", "1")
    recv_ok(fpga, tmp_path)
    # the table names the clock of every rate
    host(fpga, tmp_path, "traffic", "--qp", "257", "--op", "WRITE", "--count", "8", "--size",
         "4096")
    table = host(fpga, tmp_path, "recv", "--no-progress").stdout
    assert "Gb/s (FPGA time, 156.25 MHz core clock)" in table and "Gb/s (wall clock)" in table
    st = json.loads(host(fpga, tmp_path, "status", "--json").stdout)
    q = {x["fpga_qpn"]: x for x in st["qps"]}
    assert q[256]["messages"] == 6 + 5 + 3 and q[257]["messages"] == 6
    for bad in ("drop", "nak", "seq"):
        assert not [k for k in st["nic_counters"] if k.startswith(bad)], st["nic_counters"]
    # close one, then both; reopening gets the lowest numbers back
    host(fpga, tmp_path, "close", "--qp", "256")
    again = json.loads(host(fpga, tmp_path, "connect", "--json").stdout)
    assert [q["fpga_qpn"] for q in again] == [256]
    closed = json.loads(host(fpga, tmp_path, "close", "--json").stdout)
    assert sorted(c["fpga_qpn"] for c in closed) == [256, 257]
    assert all(c["error"] is None for c in closed)
    # the agent went away with its last QP
    _wait_for(lambda: not (tmp_path / "agent" / "agent.sock").exists(), "the agent exits")
    again = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--json").stdout)
    assert [q["fpga_qpn"] for q in again] == [256, 257]
    # stop closes them with the FPGA before it returns (the next test opens every QP)
    r = host(fpga, tmp_path, "stop")
    assert r.stdout.count("closed QP") == 2


def host_run(fpga, tmp_path, *args, ok=True):
    """``rocegen-host write`` / ``send`` with ``--json``: its result (exit status 0 when
    ``ok``, else 1)."""
    r = host(fpga, tmp_path, *args, "--json", check=False)
    assert r.returncode == (0 if ok else 1), f"{args}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)


def test_host_writes_and_sends_into_the_fpga(fpga, tmp_path):
    """The OPEN_QP replies name each QP's region (as sim serve built it); WRITEs and SENDs, with
    and without immediate data, of the test pattern of the FPGA addresses they land at: the
    FPGA's sink checks every byte and finds none wrong; SENDs carrying the pattern of another
    address are found wrong, byte for byte."""
    regions = fpga["responder"]["regions"]
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--pmtu", "1024",
                             "--json").stdout)
    for q in opened:
        assert q["fpga_region"] == regions[q["fpga_qpn"] - 256]
    before = stats(fpga)
    status0 = json.loads(fpga["status_path"].read_text())
    runs = [host_run(fpga, tmp_path, "write", "--count", "6", "--size", "5000"),
            host_run(fpga, tmp_path, "write", "--qp", "257", "--count", "3", "--size", "4096",
                     "--imm"),
            host_run(fpga, tmp_path, "send", "--count", "5", "--size", "3000"),
            host_run(fpga, tmp_path, "send", "--qp", "256", "--count", "20", "--size", "100",
                     "--imm")]
    for r in runs:
        assert r["ok"] and r["checked"] == r["bytes"] == r["size"] * r["count"] * len(r["qps"])
        assert r["wrong"] == 0 and all(q["messages"] == r["count"] for q in r["qps"]), r
    # SENDs said to land at 0x100 (they land at the region's base): only the low byte of every
    # pattern word differs (the words count from 0 and from 64)
    base = regions[0][1]
    wrong = host_run(fpga, tmp_path, "send", "--qp", "256", "--count", "2", "--size", "1000",
                     "--at", hex(base + 0x100), ok=False)
    diff = sum(a != b for a, b in zip(pattern(base, 1000), pattern(base + 0x100, 1000)))
    assert (wrong["checked"], wrong["wrong"]) == (2000, 2 * diff) and not wrong["ok"]
    after = stats(fpga)
    sent = sum(r["bytes"] for r in runs) + 2000
    assert after["sink_bytes_checked"] - before["sink_bytes_checked"] == sent
    assert after["sink_bytes_wrong"] - before["sink_bytes_wrong"] == 2 * diff
    # every SEND and WRITE with immediate completed on the FPGA, its buffer posted again
    sends = 2 * 5 + 20 + 2 + 3
    _wait_for(lambda: json.loads(fpga["status_path"].read_text())["recv_completions"]
              >= status0["recv_completions"] + sends, "the FPGA's receive completions")
    final = json.loads(fpga["status_path"].read_text())
    assert final["recv_errors"] == status0["recv_errors"]
    st = json.loads(host(fpga, tmp_path, "status", "--json").stdout)
    assert {q["fpga_qpn"]: q["sent"] for q in st["qps"]} == {256: 6 + 5 + 20 + 2, 257: 6 + 3 + 5}
    host(fpga, tmp_path, "stop")


def test_host_reads_back_what_it_wrote(fpga, tmp_path):
    """``rocegen-host read``: RDMA READs of the addresses ``write`` wrote, every byte checked by
    the host against the test pattern of its FPGA address; the QPs keep as many READs
    outstanding as the FPGA's OPEN_QP reply says it accepts (1 when it does not say); bytes
    that do not hold the pattern are found, byte for byte."""
    cm = CmClient("127.0.0.1", fpga["cm_port"], timeout=CM_WAIT)
    try:
        probe = cm.open(qpn=0x77, psn=9, rkey=1, vaddr=0, ip=parse_ip(HOST_IP),
                        read_depths=(16, 16))
        cm.close_qp(qpn=0x77, psn=9, fpga_qpn=probe["fpga_qpn"])
    finally:
        cm.close()
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--pmtu", "1024",
                             "--json").stdout)
    for q in opened:
        assert (q["rd_atomic"], q["rd_depth"]) == (min(16, probe["rd_depth"] or 1), 16), q
    host_run(fpga, tmp_path, "write", "--count", "6", "--size", "5000")
    before = stats(fpga)
    runs = [host_run(fpga, tmp_path, "read", "--count", "6", "--size", "5000"),
            host_run(fpga, tmp_path, "read", "--qp", "257", "--count", "30", "--size", "777"),
            host_run(fpga, tmp_path, "read", "--qp", "256", "--count", "1", "--size", "1")]
    for r in runs:
        assert r["ok"] and r["op"] == "READ", r
        assert r["checked"] == r["bytes"] == r["size"] * r["count"] * len(r["qps"]), r
        assert r["wrong"] == 0 and all(q["messages"] == r["count"] for q in r["qps"]), r
    # the responder counted every READ as executed; the pattern sink saw none of them
    after = stats(fpga)
    assert after["resp_executed"] - before["resp_executed"] == 2 * 6 + 30 + 1
    assert after["sink_bytes_checked"] == before["sink_bytes_checked"]
    # a SEND of the pattern of another address at QP 256's region base: READ finds it wrong
    base = fpga["responder"]["regions"][0][1]
    host_run(fpga, tmp_path, "send", "--qp", "256", "--count", "1", "--size", "1000",
             "--at", hex(base + 0x100), ok=False)
    wrong = host_run(fpga, tmp_path, "read", "--qp", "256", "--count", "1", "--size", "5000",
                     ok=False)
    diff = sum(a != b for a, b in zip(pattern(base, 1000), pattern(base + 0x100, 1000)))
    assert (wrong["checked"], wrong["wrong"]) == (5000, diff) and not wrong["ok"], wrong
    assert f"FPGA address {base:#x}" in wrong["qps"][0]["errors"][0]
    # written again, it reads back right
    host_run(fpga, tmp_path, "write", "--qp", "256", "--count", "1", "--size", "5000")
    assert host_run(fpga, tmp_path, "read", "--qp", "256", "--count", "1", "--size", "5000")["ok"]
    st = json.loads(host(fpga, tmp_path, "status", "--json").stdout)
    for bad in ("drop", "nak", "seq", "req_read_bad", "req_read_retry"):
        assert not [k for k in st["nic_counters"] if k.startswith(bad)], st["nic_counters"]
    host(fpga, tmp_path, "stop")


def test_host_atomics_on_the_fpga(fpga, tmp_path):
    """``rocegen-host atomic``: the contended counter against the endpoint (``rocegen sim
    serve`` builds it with atomics, little-endian): 4 QPs at once FETCH_ADD 1 on the region's
    last word 12 times each (the target rises by 48, the values returned are 48 distinct
    consecutive numbers), then spin on COMPARE_SWAPs on another word until 6 swaps each took;
    the responder counted every atomic and the READs of the target as executed, and the pattern
    sink saw none of their writes."""
    _, base, length = fpga["responder"]["regions"][0]
    host(fpga, tmp_path, "connect", "--qps", str(NUM_QPS), "--pmtu", "1024")
    before = stats(fpga)
    add = host_run(fpga, tmp_path, "atomic", "--count", "12")
    cas = host_run(fpga, tmp_path, "atomic", "--op", "COMPARE_SWAP", "--count", "6",
                   "--offset", "0x40")
    for r, addr in ((add, base + length - 8), (cas, base + 0x40)):
        (t,) = r["targets"]
        assert r["ok"] and t["addr"] == addr and t["fpga_qpns"] == [256, 257, 258, 259], r
        assert (t["final"] - t["initial"]) % 2**64 == NUM_QPS * r["count"], t
        assert t["distinct"] == NUM_QPS * r["count"] and t["consecutive"], t
    assert cas["targets"][0]["successes"] == NUM_QPS * 6 <= cas["ops"]
    after = stats(fpga)
    assert after["resp_executed"] - before["resp_executed"] == add["ops"] + cas["ops"] + 4
    assert after["sink_bytes_checked"] == before["sink_bytes_checked"]
    host(fpga, tmp_path, "stop")


def test_fpga_atomics_on_the_host(fpga, tmp_path):
    """The FPGA's traffic generator's atomics on the host's memory (``rocegen sim serve`` builds
    it with atomics): ``traffic --op FETCH_ADD`` over 4 targets and a COMPARE_SWAP chain, each
    checked by ``recv`` against the model of the run; then ``atomic --direction fpga-to-host``,
    the contended counter of 2 QPs (the second pointed at the first's memory with SEND_QP_INFO,
    and back), 70 FETCH_ADDs each: it ends at 140, and the last run's originals READ back from
    the FPGA are 64 distinct values as the model says. The pattern sink leaves the originals
    out (no byte counted wrong), and the host NIC executed every atomic once."""
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--pmtu", "1024",
                             "--json").stdout)
    before = stats(fpga)
    host(fpga, tmp_path, "traffic", "--op", "FETCH_ADD", "--count", "10", "--targets", "4")
    rows = json.loads(host(fpga, tmp_path, "recv", "--json").stdout)["result"]
    for row in rows:
        assert row["ok"] and row["verified"] == 10 and row["targets_right"] == 4, row
        assert row["fpga_cycles"] > 0 and row["fpga_clock_mhz"] == 156.25, row
    host(fpga, tmp_path, "traffic", "--qp", "257", "--op", "COMPARE_SWAP", "--count", "12")
    (row,) = [r for r in json.loads(host(fpga, tmp_path, "recv", "--json").stdout)["result"]
              if r["fpga_qpn"] == 257]
    assert row["ok"] and row["verified"] == 12 and row["targets"] == 1, row
    r = host_run(fpga, tmp_path, "atomic", "--direction", "fpga-to-host", "--count", "70")
    assert r["ok"] and [(q["initial"], q["final"]) for q in r["runs"]] == [(0, 70), (70, 140)]
    assert (r["counter"]["addr"], r["counter"]["final"]) == (opened[0]["addr"], 140), r
    o = r["originals"]
    assert (o["slots"], o["first"], o["distinct"], o["problems"]) == (64, 6, 64, []), o
    assert o["values"] == list(range(76, 140)) and r["fpga_ops_per_s"] > 0, o
    after = stats(fpga)
    assert after["sink_bytes_wrong"] == before["sink_bytes_wrong"]
    assert after["sink_bytes_checked"] == before["sink_bytes_checked"]
    st = json.loads(host(fpga, tmp_path, "status", "--json").stdout)
    n = st["nic_counters"]
    assert n["atomic_rx"] == n["atomic_ack_tx"] == 2 * 10 + 12 + 2 * 70, n
    host(fpga, tmp_path, "stop")


def test_fpga_reads_the_host(fpga, tmp_path):
    """``rocegen-host traffic --op READ``: the FPGA's traffic generator READs the host's
    memory, which the agent filled with the test pattern of the FPGA's local addresses the
    bytes land at; its pattern sink checks every byte, and ``recv`` reports that verdict: the
    run's bytes all checked, none wrong, on runs within the window and wrapping it."""
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--pmtu", "1024",
                             "--json").stdout)
    length = fpga["responder"]["regions"][0][2]
    window = 1 << (length.bit_length() - 1)        # the largest power of two in the region
    before = stats(fpga)
    host(fpga, tmp_path, "traffic", "--op", "READ", "--count", "8", "--size", "4096")
    first = recv_read(fpga, tmp_path, 8 * 4096)
    assert [r["fpga_qpn"] for r in first] == [q["fpga_qpn"] for q in opened]
    wraps = window // 3000 + 5
    host(fpga, tmp_path, "traffic", "--qp", "257", "--op", "READ", "--count", str(wraps),
         "--size", "3000")
    (row,) = recv_read(fpga, tmp_path, wraps * 3000, "--qp", "257")
    assert row["window"] == window, row
    after = stats(fpga)
    assert after["sink_bytes_checked"] - before["sink_bytes_checked"] == \
        2 * 8 * 4096 + wraps * 3000
    assert after["sink_bytes_wrong"] == before["sink_bytes_wrong"]
    table = host(fpga, tmp_path, "recv", "--no-progress").stdout
    assert "FPGA verdict of the READs: " + f"{wraps * 3000} bytes checked, 0 wrong" in table
    host(fpga, tmp_path, "stop")


def fresh_status(fpga):
    """The status file as the simulated FPGA writes it after this call (its counters and the
    endpoint's statistics read after it)."""
    first = json.loads(fpga["status_path"].read_text()).get("cycles", 0)

    def newer():
        st = json.loads(fpga["status_path"].read_text())
        return st if (st.get("stats_at") or 0) > first else None
    return _wait_for(newer, "a fresh status from the simulated FPGA")


def test_qp_error_leaves_the_other_qps_working(fpga, tmp_path):
    """A WRITE with a wrong R_Key (``write --rkey``) on QP A: the FPGA NAKs it (remote access
    error), puts A's responder in the error state and flushes A's receive queue, exactly the
    ``rq_depth`` buffers it had (the bench's user logic posts one again for each, kept for A's
    next connection, and the flush does not chase them); the counters then stay where they are
    while the FPGA idles. Meanwhile QP B's WRITEs, SENDs and READs complete with every byte
    right, each request executed. Closed and opened again, A works again: WRITEs and SENDs
    into the buffers its flush left it."""
    depth = fpga["responder"]["rq_depth"]
    regions = fpga["responder"]["regions"]
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", "2", "--pmtu", "1024",
                             "--json").stdout)
    a, b = (q["fpga_qpn"] for q in opened)
    assert (a, b) == (256, 257)
    rkey = regions[a - 256][0]
    wrong = rkey ^ 0x8000_0000
    assert wrong not in [r[0] for r in regions]
    st0 = fresh_status(fpga)
    before = st0["stats"]

    bad = host_run(fpga, tmp_path, "write", "--qp", str(a), "--count", "1", "--size", "1000",
                   "--rkey", hex(wrong), ok=False)
    assert bad["qps"][0]["messages"] == 0 and not bad["ok"], bad
    assert "REM_ACCESS_ERR" in bad["qps"][0]["errors"][0], bad
    agent = json.loads(host(fpga, tmp_path, "status", "--json").stdout)
    assert {q["fpga_qpn"]: q["state"] for q in agent["qps"]} == {a: "ERROR", b: "RTS"}
    flushed = _wait_for(lambda: (s := fresh_status(fpga))["recv_flushed"]
                        >= st0["recv_flushed"] + depth and s, "QP A's receive queue flushed")

    # QP B, while A is in error: WRITEs (the FPGA's sink checks every byte), SENDs into its
    # receive buffers (the same), READs of what the WRITEs wrote (this host checks every byte)
    runs = [host_run(fpga, tmp_path, "write", "--qp", str(b), "--count", "4", "--size", "3000"),
            host_run(fpga, tmp_path, "send", "--qp", str(b), "--count", "4", "--size", "1000"),
            host_run(fpga, tmp_path, "read", "--qp", str(b), "--count", "4", "--size", "3000")]
    for r in runs:
        assert r["ok"] and r["checked"] == r["bytes"] == r["size"] * r["count"], r
        assert r["wrong"] == 0 and r["qps"][0]["messages"] == r["count"], r
    _wait_for(lambda: fresh_status(fpga)["recv_completions"]
              >= flushed["recv_completions"] + 4, "QP B's SENDs completed on the FPGA")

    # idle: the counters stay put over three fresh readings (about a second apart)
    idle = [fresh_status(fpga) for _ in range(3)]
    assert idle[0]["cycles"] < idle[1]["cycles"] < idle[2]["cycles"]
    for st in idle:
        assert st["recv_flushed"] - st0["recv_flushed"] == depth, st
        assert st["recv_errors"] - st0["recv_errors"] == depth, st
        assert st["recv_completions"] - st0["recv_completions"] == depth + 4, st
        assert {k: v for k, v in st["stats"].items() if k.startswith("resp_")} == \
            {k: v for k, v in idle[0]["stats"].items() if k.startswith("resp_")}, st
    after = idle[-1]["stats"]
    assert after["resp_access"] - before["resp_access"] == 1
    # B's requests, each executed: 4 WRITEs of 3 packets at PMTU 1024, 4 SENDs, 4 READs
    assert after["resp_executed"] - before["resp_executed"] == 4 * 3 + 4 + 4
    assert after["resp_drop_error"] == before["resp_drop_error"]

    # A closed and opened again gets its number back, and works
    closed = json.loads(host(fpga, tmp_path, "close", "--qp", str(a), "--json").stdout)
    assert [(c["fpga_qpn"], c["error"]) for c in closed] == [(a, None)]
    again = json.loads(host(fpga, tmp_path, "connect", "--pmtu", "1024", "--json").stdout)
    assert [q["fpga_qpn"] for q in again] == [a]
    runs = [host_run(fpga, tmp_path, "write", "--qp", str(a), "--count", "4", "--size", "3000"),
            host_run(fpga, tmp_path, "send", "--qp", str(a), "--count", str(depth + 4),
                     "--size", "1000", "--imm"),
            host_run(fpga, tmp_path, "read", "--qp", str(a), "--count", "4", "--size", "3000")]
    for r in runs:
        assert r["ok"] and r["checked"] == r["bytes"] == r["size"] * r["count"], r
        assert r["wrong"] == 0 and r["qps"][0]["messages"] == r["count"], r
    end = _wait_for(lambda: (s := fresh_status(fpga))["recv_completions"]
                    >= idle[-1]["recv_completions"] + depth + 4 and s,
                    "QP A's SENDs completed on the FPGA")
    assert end["recv_errors"] == idle[-1]["recv_errors"]
    agent = json.loads(host(fpga, tmp_path, "status", "--json").stdout)
    assert {q["fpga_qpn"]: q["state"] for q in agent["qps"]} == {a: "RTS", b: "RTS"}
    host(fpga, tmp_path, "stop")


def recv_read(fpga, tmp_path, run_bytes, *args):
    """``recv --json`` (and ``args``) after READ runs: each run's verdict, ``run_bytes``
    checked, none wrong."""
    reply = json.loads(host(fpga, tmp_path, "recv", "--json", *args).stdout)
    assert reply["ok"], reply
    for row in reply["result"]:
        assert row["ok"] and row["op"] == "READ" and row["bad"] == 0, row
        assert (row["checked"], row["wrong"]) == (run_bytes, 0), row
        assert row["verified"] == row["count"], row
    return reply["result"]


def test_query_counts_only_grow(fpga):
    """QUERY from a plain socket: an ACK with the sink's counters, which equal the statistics
    counters' view of them; a host outside the allow-list is refused."""
    cm = CmClient("127.0.0.1", fpga["cm_port"], timeout=CM_WAIT)
    try:
        first = cm.query(qpn=0x33, psn=0x1234)
        second = cm.query()
    finally:
        cm.close()
    assert second[0] >= first[0] and second[1] >= first[1]
    now = stats(fpga)
    assert (now["sink_bytes_checked"], now["sink_bytes_wrong"]) == second
    outsider = Neighbour(fpga, "10.0.1.8", mac="02:00:00:00:07:08", port=40001)
    try:
        outsider.send_cm(M.request(M.REQ_QUERY, loc_qpn=0x56, loc_psn=2,
                                   listening_port=outsider.port))
        _, _, _, payload = outsider.reply()
    finally:
        outsider.close()
    reply = M.unpack(payload)
    assert reply["ack_type"] == M.ACK_NAK and M.query_counts(payload) == (0, 0)


def test_more_qps_than_exist(fpga, tmp_path):
    r = host(fpga, tmp_path, "connect", "--qps", str(NUM_QPS + 1), check=False)
    assert r.returncode == 1
    assert "NO_QP" in r.stderr and f"{NUM_QPS} of {NUM_QPS + 1} had been opened" in r.stderr
    assert not (tmp_path / "agent" / "agent.sock").exists()
    # nothing leaked: every QP can be opened again
    opened = json.loads(host(fpga, tmp_path, "connect", "--qps", str(NUM_QPS), "--json").stdout)
    assert sorted(q["fpga_qpn"] for q in opened) == list(range(256, 256 + NUM_QPS))
    r = host(fpga, tmp_path, "connect", check=False)
    assert r.returncode == 1 and "NO_QP" in r.stderr
    host(fpga, tmp_path, "close")


class Neighbour:
    """Another host on the FPGA's segment, on the simulated wire: the NIC model (it answers the
    FPGA's ARP) with scapy-built frames."""

    def __init__(self, fpga, ip, mac="02:00:00:00:07:07", port=40000):
        self.nic = Rnic(mac, ip, udp_ports=(port,))
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", fpga["wire_port"]), timeout=60)
        self.reader = FrameReader()

    def send_cm(self, payload):
        frame = self.nic.udp_frame(FPGA_IP, self.port, M.CM_PORT, payload,
                                   dst_mac="02:00:00:00:00:01")
        self.sock.sendall(encode_frame(frame))

    def reply(self):
        """The next datagram the FPGA sends us (ARP answered on the way)."""
        while not self.nic.udp_rx:
            data = self.sock.recv(1 << 16)
            assert data, "the wire closed"
            for f in self.reader.feed(data):
                for out in self.nic.receive(f):
                    self.sock.sendall(encode_frame(out))
        return self.nic.udp_rx.pop(0)

    def close(self):
        self.sock.close()


def test_host_outside_the_allow_list_is_refused(fpga):
    before = stats(fpga)
    outsider = Neighbour(fpga, "10.0.1.7")
    try:
        outsider.send_cm(M.request(M.REQ_OPEN_QP, loc_qpn=0x55, loc_psn=1, loc_rkey=2,
                                   loc_vaddr=0x1000, loc_ip=parse_ip("10.0.1.7"),
                                   listening_port=outsider.port))
        src_ip, sport, dport, payload = outsider.reply()
    finally:
        outsider.close()
    reply = M.unpack(payload)
    assert (src_ip, sport, dport) == (FPGA_IP, M.REPLY_PORT, 40000)
    assert reply["ack_type"] == M.ACK_NAK and reply["rem_qpn"] == 0x55
    after = stats(fpga)
    assert after["cm_nak_not_allowed"] == before["cm_nak_not_allowed"] + 1
    assert after["cm_replies"] == before["cm_replies"] + 1


def test_malformed_datagrams_are_ignored(fpga):
    before = stats(fpga)
    cm = CmClient("127.0.0.1", fpga["cm_port"], timeout=CM_WAIT, retries=0)
    try:
        junk = [b"", b"x" * 10, M.request(M.REQ_OPEN_QP) + b"\0", b"\xff" * 100,
                M.pack(info_valid=1, req_type=1, ack_valid=1, ack_type=1),     # a reply
                M.request(6, loc_qpn=9),                                       # unknown request
                M.pack(rem_qpn=256)]                                           # no flag at all
        for payload in junk:
            cm.send_raw(payload)
        cm.sock.settimeout(1.0)
        with pytest.raises(TimeoutError):
            cm.sock.recvfrom(2048)
        # the FPGA still answers a good request
        fpga_qpn, _ = cm.open_qp(qpn=0x66, psn=7, rkey=1, vaddr=0, ip=parse_ip(HOST_IP))
        cm.close_qp(qpn=0x66, psn=7, fpga_qpn=fpga_qpn)
    finally:
        cm.close()
    after = stats(fpga)
    assert after["cm_drop_length"] == before["cm_drop_length"] + 4
    assert after["cm_drop_unknown"] == before["cm_drop_unknown"] + 3
    assert after["cm_replies"] == before["cm_replies"] + 2


def test_host_that_vanishes_mid_transfer(fpga, tmp_path):
    opened = json.loads(host(fpga, tmp_path, "connect", "--timeout", "2", "--retry-cnt", "1",
                             "--json").stdout)
    (qp,) = opened
    before = stats(fpga)
    host(fpga, tmp_path, "traffic", "--op", "WRITE", "--count", "400", "--size", "4096")
    pid = json.loads(host(fpga, tmp_path, "status", "--json").stdout)["pid"]
    _wait_for(lambda: request(tmp_path / "agent" / "agent.sock", {"cmd": "progress"})
              ["result"][0]["verified"] > 2, "the transfer is under way")
    os.kill(pid, signal.SIGKILL)
    # the FPGA's QP runs out of retries and goes to the error state
    after = _wait_for(lambda: (s := stats(fpga))["roce_qp_errors"] > before["roce_qp_errors"]
                      and s, "the FPGA's QP errors out")
    assert after["roce_timeouts"] > before["roce_timeouts"]
    # a new host process opens a QP at once; being the same host, it may close the dead one
    again = json.loads(host(fpga, tmp_path, "connect", "--json").stdout)
    assert again[0]["fpga_qpn"] != qp["fpga_qpn"]
    cm = CmClient("127.0.0.1", fpga["cm_port"], timeout=CM_WAIT)
    try:
        with pytest.raises(CmError) as e:      # an errored QP cannot go back to RTS
            cm.request(M.REQ_MODIFY_QP_RTS, loc_qpn=qp["qpn"], loc_psn=qp["psn"],
                       rem_qpn=qp["fpga_qpn"])
        assert e.value.kind == "nak"
        cm.close_qp(qpn=qp["qpn"], psn=qp["psn"], fpga_qpn=qp["fpga_qpn"])
    finally:
        cm.close()
    host(fpga, tmp_path, "traffic", "--op", "WRITE_IMM", "--count", "4", "--size", "2048")
    recv_ok(fpga, tmp_path)
    host(fpga, tmp_path, "close")


@pytest.mark.parametrize("roce_to", ["tap", "wire"])
def test_tap_in_a_namespace(fpga, tmp_path, roce_to):
    """``--tap``: the FPGA at its own address inside a namespace the command makes and removes;
    an ICMP echo (scapy) reaches it, and the host agent works through the namespace's kernel.
    Its RDMA NIC takes the FPGA's RoCEv2 frames on the TAP itself (``--roce-to tap``, the
    default: the simulated NIC on a packet socket of the interface, beside the kernel's own
    sockets), or on the wire (``--roce-to wire``)."""
    from rocegen.sim.apps.tap import check_tap_support
    why = check_tap_support()
    if why and os.environ.get("CI"):        # CI runs as root with /dev/net/tun: a real failure
        pytest.fail(f"no TAP support in CI: {why}")
    if why:
        pytest.skip(why)
    ns = f"rocegen-test-{os.getpid()}"
    status = tmp_path / "tap.json"
    log = open(tmp_path / "tap.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocegen.cli", "sim", "serve", "--width", "64",
         "--qps", str(NUM_QPS), "--allow-net", "10.0.0.0/24", "--tap", "--netns", ns,
         "--status", str(status), *(["--roce-to", "wire"] if roce_to == "wire" else [])],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    inside = ["ip", "netns", "exec", ns]
    try:
        _wait_for(lambda: status.exists() or proc.poll() is not None, "serve --tap ready",
                  tries=6000)
        assert proc.poll() is None, (tmp_path / "tap.log").read_text()[-3000:]
        ping = ("import sys; from scapy.layers.inet import ICMP, IP; from scapy.sendrecv import sr1; "
                f"r = sr1(IP(dst='{FPGA_IP}') / ICMP(id=7, seq=1) / (b'rocegen' * 8), "
                "timeout=120, "
                "verbose=0); sys.exit(0 if r is not None and r[ICMP].type == 0 and "
                "bytes(r[ICMP].payload) == b'rocegen' * 8 else 1)")
        r = subprocess.run([*inside, sys.executable, "-c", ping], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, f"no echo reply from the FPGA in the namespace: {r.stderr}"
        agent = [*inside, sys.executable, "-m", "rocegen.host.cli", "--state-dir",
                 str(tmp_path / "agent")]
        device = "sim" if roce_to == "wire" else "packet:rgtap0"
        r = subprocess.run([*agent, "connect", "--device", device, "--fpga", FPGA_IP,
                            "--reply-timeout", str(CM_WAIT), "--json"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert [q["fpga_qpn"] for q in json.loads(r.stdout)] == [256]
        for args in (["traffic", "--op", "WRITE", "--count", "8", "--size", "3000"],
                     ["recv", "--no-progress"], ["close"]):
            r = subprocess.run([*agent, *args], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stdout + r.stderr
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, (tmp_path / "tap.log").read_text()[-3000:]
        log.close()
    final = json.loads(status.read_text())
    # 8 WRITEs of 3000 bytes at the default path MTU are at least 8 RoCEv2 frames
    if roce_to == "tap":
        assert final["wire_tx"] == final["wire_no_peer"] == 0
        assert final["tap_tx"] >= 8 + 2, final            # the RoCE frames, a ping, a CM reply
    else:
        assert final["wire_tx"] >= 8, final
    # the namespace is gone with the server
    r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    assert ns not in r.stdout
