"""``rocegen sim replay`` (sim/apps/replay.py, sim/cocotb/replay.py): a capture of a few hand-made frames
and 1000 receive-fuzz frames replayed into the endpoint (Verilator, 512 bits); every counter it
reports must be the sum of what the models say of each frame."""

import argparse
import collections
import json
import random

import pytest
from scapy.layers.l2 import ARP, Ether
from scapy.utils import wrpcap

from rocegen.gateware.roce.endpoint.endpoint import STATS
from rocegen.sim.apps.replay import add_parser, run
from rocegen.sim.models.net.netstack import NetStackModel
from rocegen.sim.testing import fuzz
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC

PEER_QPN, PSN = 0x51, 1000
OPEN = {256: HOST_IP, 257: HOST_IP}          # --qps 2
NUM_QPS = 8                                 # the shared build's QP table


def parse(argv):
    p = argparse.ArgumentParser()
    add_parser(p.add_subparsers(dest="sim_command"))
    return p.parse_args(["replay", *argv])


def hand_frames():
    """Frames with known verdicts, and the RoCE and stack counters they must increment."""
    ack = dict(our_mac=FPGA_MAC, our_ip=FPGA_IP, peer_ip=HOST_IP)
    rng = random.Random(1)
    good = [fuzz.valid_ack(**ack, qpn=256, psn=PSN - 1, identification=k + 1) for k in range(3)]
    frames = good + [
        fuzz.mutate(good[0], rng, "icrc"),
        fuzz.valid_ack(**ack, qpn=0x1234, psn=PSN - 1),                    # no such QP
        fuzz.valid_ack(**ack, qpn=258, psn=PSN - 1),                       # QP not open
        fuzz.mutate(good[1], rng, "shrink"),                               # short
        fuzz.valid_ack(**dict(ack, peer_ip="10.0.0.9"), qpn=257, psn=PSN - 1),
        fuzz.valid_cnp(**ack, qpn=257),
        bytes(Ether(src=HOST_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
            op=1, hwsrc=HOST_MAC, psrc=HOST_IP, pdst=FPGA_IP)).ljust(60, b"\0"),
    ]
    roce = {"roce_rx_acks": 3, "roce_rx_icrc_bad": 1, "roce_rx_drop_qp": 1,
            "roce_rx_drop_state": 1, "roce_rx_drop_short": 1, "roce_rx_drop_peer": 1,
            "roce_rx_cnp": 1}
    stack = {"arp_rx_request": 1, "arp_tx_reply": 1}
    return frames, collections.Counter(roce), collections.Counter(stack)


def model_counts(frames):
    """RoCE verdicts, stack counters (but rx_frames / tx_frames) and frames sent, by the
    models."""
    roce, stack, out = collections.Counter(), collections.Counter(), 0
    stack_model = NetStackModel(FPGA_MAC, FPGA_IP, echo_port=4791, udp_ports=(),
                                cut_ports=(4791,))
    for f in frames:
        v = fuzz.roce_verdict(f, our_mac=FPGA_MAC, our_ip=FPGA_IP, peers=OPEN, num_qps=NUM_QPS)
        answers, counters = stack_model.handle_all(f)
        if v is None:                       # (port 4791 is the model's echo port)
            stack.update(counters)
            out += len(answers)
        else:
            roce[v] += 1
            if fuzz.roce_datagram(f, FPGA_MAC, FPGA_IP).damaged:
                stack.update(counters)      # (ip_truncated: the IPv4 layer counts it too)
    return roce, stack, out


def test_replay(tmp_path, capsys):
    hand, hand_roce, hand_stack = hand_frames()
    assert model_counts(hand)[:2] == (hand_roce, hand_stack)
    qpns = sorted(OPEN)
    fuzzed = fuzz.fuzz_frames(1000, 21, our_mac=FPGA_MAC, our_ip=FPGA_IP, peer_ip=HOST_IP,
                              qpns=qpns, psn_range=range(PSN - 10, PSN))
    frames = hand + fuzzed
    pcap = tmp_path / "in.pcap"
    wrpcap(str(pcap), frames, linktype=1)
    args = parse(["--pcap", str(pcap), "--qps", "2", "--peer-ip", HOST_IP, "--peer-qpn",
                  str(PEER_QPN), "--psn", str(PSN), "-o", str(tmp_path / "out")])
    assert run(args) == 0
    r = json.loads((tmp_path / "out" / "replay_w512.json").read_text())
    assert json.loads(capsys.readouterr().out) == r

    roce, stack, out = model_counts(frames)
    candidates = fuzz.count_roce_candidates(frames, FPGA_MAC, FPGA_IP)
    assert r["frames_in"] == len(frames) and r["frames_skipped_empty"] == 0
    assert r["roce_candidates"] == candidates == sum(roce.values())
    assert r["endpoint"] == {"width": 512, "num_qps": NUM_QPS, "mac": FPGA_MAC, "ip": FPGA_IP,
                             "qps": 2, "peer_ip": HOST_IP, "peer_qpn": PEER_QPN, "psn": PSN}
    want = {name: roce[name] for name in fuzz.VERDICT_COUNTERS}
    want["roce_rx_packets"] = candidates
    assert set(want) <= set(r["roce_rx"])
    got = {k: v for k, v in r["roce_rx"].items() if k in want or v}
    assert got == want
    assert r["stack"] == {**{k: v for k, v in stack.items() if v}, "rx_frames": len(frames),
                          "tx_frames": out}
    assert r["frames_out"] == out and r["frames_out_by_kind"]["arp"] >= 1
    assert r["completions"] == []
    # the endpoint's other counters: only the three stale ACKs (ACKs of nothing outstanding)
    stale = {"roce_stale_acks": 3} if "roce_stale_acks" in STATS else {}
    assert r["counters"] == stale


def test_bad_parameters(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        run(parse(["--pcap", str(tmp_path / "missing.pcap")]))
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture file at all")
    with pytest.raises(ValueError, match="not a pcap or pcapng file"):
        run(parse(["--pcap", str(junk)]))
    with pytest.raises(ValueError, match="not a file"):
        run(parse(["--pcap", str(tmp_path)]))
    ok = tmp_path / "ok.pcap"
    wrpcap(str(ok), [Ether()])
    for argv, msg in ((["--qps", "0"], "--qps"), (["--psn", str(1 << 24)], "--psn"),
                      (["--peer-ip", "10.0.0"], "--peer-ip"), (["--width", "96"], "width")):
        with pytest.raises(ValueError, match=msg):
            run(parse(["--pcap", str(ok), *argv]))
