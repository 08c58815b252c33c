"""Wireshark's view of the captures (rocegen.sim.apps.interop): tshark must decode every RoCE frame of
the demo's capture as InfiniBand with no malformed header, and the check must catch a frame on
UDP 4791 that is not RoCE, a truncated header and a bad IPv4 checksum. Needs ``tshark``: skipped
without it on a developer's machine, a failure in CI (``CI=true``), where ``.ci/run`` installs
it (``make tshark``)."""

import json
import os

import pytest
from scapy.contrib.roce import AETH, BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from rocegen.sim.apps.interop import check_pcap, main, tshark_path, write_vector_pcap
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC


@pytest.fixture(scope="module")
def tshark():
    path = tshark_path()
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("tshark is missing in CI (.ci/run installs it with `make tshark`)")
        pytest.skip("tshark is not installed (as root: make tshark)")
    return path


def _roce(bth, payload=b"", sport=0xC001):
    return bytes(Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP, flags="DF")
                 / UDP(sport=sport, dport=4791, chksum=0) / bth / Raw(payload))


def _write(path, frames):
    with PcapWriter(path) as p:
        for k, f in enumerate(frames):
            p.write(f, 1000 * k)
    return path


def test_good_frames_decode_as_infiniband(tshark, tmp_path):
    frames = [
        _roce(BTH(opcode=0x0A, ackreq=1, dqpn=0x11, psn=5), bytes(16) + bytes(range(64))),
        _roce(BTH(opcode=0x11, dqpn=0x100, psn=5) / AETH(syndrome=0x1F, msn=1)),
        _roce(BTH(opcode=0x11, dqpn=0x100, psn=6) / AETH(syndrome=0x60, msn=1)),
        _roce(cnp(0x100)),
    ]
    report, problems = check_pcap(_write(tmp_path / "good.pcap", frames), tshark)
    assert problems == []
    assert report["frames"] == report["roce"] == 4
    assert report["opcodes"] == {0x0A: 1, 0x11: 2, 0x81: 1}


def test_faults_are_found(tshark, tmp_path):
    not_roce = bytes(Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP)
                     / UDP(sport=0xC001, dport=4791) / Raw(b"abcd"))
    good = _roce(BTH(opcode=0x11, dqpn=0x100, psn=5) / AETH(syndrome=0x1F, msn=1))
    bad_checksum = bytearray(good)
    bad_checksum[14 + 10] ^= 0xFF
    cut = good[:14 + 20 + 8 + 6]                  # the capture ends inside the BTH
    report, problems = check_pcap(_write(tmp_path / "bad.pcap",
                                         [not_roce, bytes(bad_checksum), cut]), tshark)
    text = "\n".join(problems)
    assert any(p.startswith("frame 1: ") for p in problems), text
    assert any(p.startswith("frame 2: expert errors") for p in problems), text
    assert any(p.startswith("frame 3: ") for p in problems), text
    assert report["roce"] < 3


def test_real_nic_captures_decode(tshark, tmp_path):
    out = tmp_path / "captures.pcap"
    n = write_vector_pcap(out)
    report, problems = check_pcap(out, tshark)
    assert problems == [] and report["roce"] == n >= 1


def test_demo_capture(tshark, tmp_path, capsys):
    """The RoCE demo at W=64 over a lossy link (data, ACKs, NAKs, resent packets): every frame
    of its capture decoded, every RoCE frame as InfiniBand; the frame check of the same run
    rebuilt every frame the endpoint sent."""
    from rocegen.cli import main as rocegen
    pcap = tmp_path / "demo.pcap"
    assert rocegen(["sim", "demo", "--width", "64", "--qps", "2", "--bytes", "32768",
                    "--size", "4096", "--pmtu", "1024", "--loss", "0.03", "--seed", "3",
                    "-o", str(tmp_path), "--pcap", str(pcap)]) == 0
    result = json.loads((tmp_path / "roce_w64.json").read_text())[0]
    assert result["framecheck"]["roce"] >= 64 and result["retransmitted"] > 0
    report, problems = check_pcap(pcap, tshark)
    assert problems == []
    # the capture holds the endpoint's frames the link delivered and the NIC's answers
    assert report["opcodes"][0x11] > 0
    assert report["roce"] >= result["framecheck"]["roce"] - result["link_to_nic"]["dropped"]
    capsys.readouterr()
    assert main([str(pcap)]) == 0
    assert "0 problems" in capsys.readouterr().out
