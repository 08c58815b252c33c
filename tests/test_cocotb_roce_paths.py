"""RoCE traffic end to end on the paths beside the default build (Verilator, W = 64):
``rocegen sim demo`` through the endpoint's own XGMII MAC with cocotbext-eth on the line, and
with 802.1Q VLAN tags both ways; and 256 QPs sending at once, sharing the link evenly. The demo
bench (:mod:`rocegen.sim.roce_demo`) compares every byte in the host NIC model's memory and checks
that every packet was executed exactly once; here its results and its pcap are checked again."""

import json

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.utils import rdpcap

from rocegen.gateware.cli import main
from rocegen.sim.scenarios import FPGA_MAC, HOST_MAC

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


def test_256_qps_share_the_link(tmp_path, capsys):
    """256 QPs with 32 KiB each at PMTU 256 (128 packets per QP, 32768 in all) at once: every
    byte arrives, and while all QPs have packets to send each gets the same share of the link
    within 1 % (the window cuts a round of the round robin: one packet is 0.8 % of a QP's
    share in it)."""
    run, frames = _demo(tmp_path, "--width", "64", "--qps", "256", "--bytes", "32768",
                        "--size", "32768", "--pmtu", "256")
    assert run["checked_bytes"] == 256 * 32768 and run["packets"] == 256 * 128
    data = _roce(frames, FPGA_MAC)
    assert {f[BTH].dqpn for f in data} == {0x40 + k for k in range(256)}
    f = run["fairness"]
    assert f["min_bytes"] > 0 and f["ratio"] <= 1.01, f
    # the window is most of the run: all 256 QPs were busy until near the end
    assert f["min_bytes"] >= 32768 * 9 // 10, f
    assert "max/min" in capsys.readouterr().out
