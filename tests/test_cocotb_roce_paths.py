"""RoCE traffic end to end on the paths beside the default build (Verilator, W = 64):
``rocegen sim demo`` through the endpoint's own XGMII MAC with cocotbext-eth on the line, and
with 802.1Q VLAN tags both ways (also ``rocegen sim serve --vlan`` with the host agent); and 256
QPs sending at once, sharing the link evenly (the full tier's: a QP count of the matrix, and a
build of its own; the gate shows the strict turns in tests/unit/requester/test_scheduler.py). The demo
bench (:mod:`rocegen.sim.cocotb.roce_demo`) compares every byte in the host NIC model's memory and checks
that every packet was executed exactly once; here its results and its pcap are checked again."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import rdpcap

from rocegen.cli import main
from rocegen.sim.testing.scenarios import FPGA_MAC, HOST_MAC

DEMO = ["--qps", "2", "--bytes", "16384", "--size", "4096", "--pmtu", "1024"]


def _demo(tmp_path, *args):
    assert main(["sim", "demo", *args, "-o", str(tmp_path)]) == 0
    (results,) = tmp_path.glob("roce_*.json")
    (run,) = json.loads(results.read_text())
    (pcap,) = tmp_path.glob("roce_*.pcap")
    return run, [Ether(bytes(p)) for p in rdpcap(str(pcap))]


def _roce(frames, src):
    """RoCEv2 data frames (RC WRITE opcodes 6..11) from ``src`` among ``frames``, decoded by scapy."""
    return [f for f in frames if f.src == src and UDP in f and f[UDP].dport == 4791
            and BTH in f and 6 <= f[BTH].opcode <= 11]


def test_demo_through_the_xgmii_mac(tmp_path, capsys):
    """Every frame of the endpoint crossed its XGMII MAC and the cocotbext-eth sink checked its
    preamble, FCS, padding and gap; the host's answers came in through the MAC's receive side."""
    run, frames = _demo(tmp_path, "--phy", "xgmii", *DEMO)
    assert run["phy"] == "xgmii" and run["checked_bytes"] == 2 * 16384
    data = _roce(frames, FPGA_MAC)
    assert len(data) == run["packets"] == 2 * 16       # no loss: each packet once
    x = run["xgmii"]
    # every frame the endpoint sent in the run (ARP, data) passed the line checks
    assert x["line_frames_checked"] == x["mac_tx_frames"] >= len(data) + 1
    # ARP reply and ACKs: as many frames into the MAC as the NIC model answered
    answers = [f for f in frames if f.src == HOST_MAC]
    assert x["mac_rx_frames"] == len(answers) >= 2
    assert 0 < run["goodput_gbps"] < 10
    assert "XGMII line:" in capsys.readouterr().out


def test_demo_with_vlan_tags(tmp_path):
    """The endpoint built with VLAN 42 tags every frame it sends and the NIC model (which takes
    only VLAN 42) answers tagged: every frame in the pcap, both ways, carries the tag."""
    run, frames = _demo(tmp_path, "--width", "64", "--vlan", "42", *DEMO)
    assert run["vlan"] == 42 and run["checked_bytes"] == 2 * 16384
    assert frames and all(Dot1Q in f and f[Dot1Q].vlan == 42 for f in frames)
    data = _roce(frames, FPGA_MAC)
    assert len(data) == run["packets"] == 2 * 16
    assert all(f[IP].dst == "10.0.0.1" for f in data)
    acks = [f for f in frames if f.src == HOST_MAC and BTH in f and f[BTH].opcode == 0x11]
    assert acks


@pytest.mark.full
def test_256_qps_share_the_link(tmp_path, capsys):
    """256 QPs with 8 KiB each at PMTU 256 (32 packets per QP, 8192 in all) at once: every
    byte arrives, every QP's packets are on the wire, and while all QPs have packets to send
    (after the last one's first packet: posting 256 work requests takes a while) they take
    strict turns, so their shares differ by one packet at most, whatever the window (the
    benchmark bench/bench_fairness.py measures max/min over a longer run)."""
    per_qp, pmtu = 8192, 256
    run, frames = _demo(tmp_path, "--width", "64", "--qps", "256", "--bytes", str(per_qp),
                        "--size", str(per_qp), "--pmtu", str(pmtu))
    packets = 256 * (per_qp // pmtu)
    assert run["checked_bytes"] == 256 * per_qp and run["packets"] == packets
    data = _roce(frames, FPGA_MAC)
    assert len(data) == packets
    assert {f[BTH].dqpn for f in data} == {0x40 + k for k in range(256)}
    f = run["fairness"]
    assert f["min_bytes"] >= per_qp // 2, f              # most of the run has all QPs busy
    assert f["max_bytes"] - f["min_bytes"] <= pmtu, f
    assert "max/min" in capsys.readouterr().out


def test_serve_with_vlan_tags(tmp_path):
    """``rocegen sim serve --vlan 42 --no-responder`` (the build of ``rocegen sim demo --vlan 42``,
    which this test shares) with the host agent on the
    simulated NIC: the connection manager through the tunnel, WRITEs checked in the host's
    memory, and every frame at the FPGA's port tagged with VLAN 42 both ways."""
    status, pcap = tmp_path / "status.json", tmp_path / "serve.pcap"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocegen.cli", "sim", "serve", "--width", "64", "--qps",
         "8", "--vlan", "42", "--no-responder", "--tunnel-port", "0", "--wire-port", "0",
         "--status", str(status), "--pcap", str(pcap)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    agent = [sys.executable, "-m", "rocegen.host.cli", "--state-dir", str(tmp_path / "agent")]

    def host(*args):
        r = subprocess.run([*agent, *args], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{args}: {r.stdout}\n{r.stderr}"
        return r.stdout
    try:
        for _ in range(6000):           # a bound on polls (the first build takes minutes)
            if status.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert proc.poll() is None and status.exists(), (tmp_path / "serve.log").read_text()[-3000:]
        st = json.loads(status.read_text())
        opened = json.loads(host("connect", "--sim", "--device", f"sim:127.0.0.1:{st['wire_port']}",
                                 "--cm-port", str(st["cm_port"]), "--qps", "1", "--pmtu", "1024",
                                 "--json"))
        assert [q["fpga_qpn"] for q in opened] == [256]
        host("traffic", "--op", "WRITE", "--count", "4", "--size", "3000")
        reply = json.loads(host("recv", "--json"))
        assert reply["ok"] and all(r["ok"] and r["verified"] == r["count"] == 4 and r["bad"] == 0
                                   for r in reply["result"]), reply
        host("close")
    finally:
        subprocess.run([*agent, "stop"], capture_output=True, timeout=120)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, (tmp_path / "serve.log").read_text()[-3000:]
        log.close()
    final = json.loads(status.read_text())
    assert final["vlan_drop"] == 0
    frames = [Ether(bytes(p)) for p in rdpcap(str(pcap))]
    assert frames and all(Dot1Q in f and f[Dot1Q].vlan == 42 for f in frames)
    assert len(_roce(frames, FPGA_MAC)) >= 4 * 3         # 3000-byte WRITEs at PMTU 1024
    assert any(f.src == HOST_MAC and BTH in f and f[BTH].opcode == 0x11 for f in frames)
