"""The responder's fuzz frames (rocegen.sim.testing.fuzz): correct requests as scapy rebuilds
them, the model of what the responder makes of a request, and the safety rule of the hostile
mix (nothing a good QP could take, the same frames for the same seed)."""

from collections import Counter

import pytest

from rocegen.sim.testing.framecheck import FrameChecker
from rocegen.sim.testing.fuzz import (
    could_acknowledge,
    could_request,
    request_fuzz_frames,
    request_verdict,
    valid_request,
)
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

ADDR = {"our_mac": FPGA_MAC, "our_ip": FPGA_IP, "peer_ip": HOST_IP}
GOOD, VICTIM, CLOSED = [256, 257], 258, [259, 260]
PEERS = {q: HOST_IP for q in GOOD + [VICTIM]}


@pytest.mark.parametrize("opcode, n", [(opc.OP_RC_RDMA_WRITE_ONLY, 0), (opc.OP_RC_RDMA_WRITE_FIRST, 256),
                                       (opc.OP_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 5),
                                       (opc.OP_RC_SEND_ONLY_WITH_IMMEDIATE, 33),
                                       (opc.OP_RC_SEND_MIDDLE, 1024), (opc.OP_RC_RDMA_WRITE_LAST, 7)])
def test_valid_request_is_what_scapy_builds(opcode, n):
    frame = valid_request(qpn=GOOD[0], psn=0xFFFFFE, opcode=opcode, payload=bytes(range(n % 256)) *
                          (n // 256) + bytes(n % 256), va=0x1000, rkey=0xABCD, imm=0x1234, **ADDR)
    # the independent check dissects and rebuilds it with scapy (lengths, checksum, ICRC)
    assert FrameChecker().check(frame) == "roce"
    assert request_verdict(frame, our_mac=FPGA_MAC, our_ip=FPGA_IP, peers=PEERS,
                           num_qps=8) == "decided"


def test_request_verdicts():
    def verdict(**kw):
        args = {"qpn": GOOD[0], "psn": 1, "opcode": opc.OP_RC_SEND_ONLY, "payload": bytes(8), **ADDR,
                **kw}
        return request_verdict(valid_request(**args), our_mac=FPGA_MAC, our_ip=FPGA_IP,
                               peers=PEERS, num_qps=8)
    assert verdict() == "decided"
    assert verdict(qpn=CLOSED[0]) == "drop_state"
    assert verdict(qpn=256 + 8) == "drop_qp" and verdict(qpn=5) == "drop_qp"
    assert verdict(peer_ip="10.9.9.9") == "drop_peer"
    assert verdict(pkey=0x1234) == "drop_pkey" and verdict(pkey=0x7FFF) == "decided"
    assert verdict(padcnt=3, payload=bytes(2)) == "malformed"        # PadCnt more than held
    assert verdict(padcnt=0, payload=bytes(6)) == "malformed"        # not whole words
    # a WRITE ONLY whose datagram ends inside its RETH
    frame = valid_request(qpn=GOOD[0], psn=1, opcode=opc.OP_RC_RDMA_WRITE_ONLY, **ADDR)
    ip_at = H.ETH.length
    cut = bytearray(frame[:ip_at + 20 + 8 + 12 + 8])
    assert request_verdict(bytes(cut), our_mac=FPGA_MAC, our_ip=FPGA_IP, peers=PEERS,
                           num_qps=8) is None          # its IPv4 length is more than it holds
    assert verdict(opcode=opc.OP_RC_ACKNOWLEDGE) is None


def test_hostile_mix_keeps_the_safety_rule():
    victim = {"qpn": VICTIM, "psn": 77, "rkey": 0x55, "region": (0x8000, 0x4000)}
    kw = dict(good_qpns=GOOD, victim=victim, closed_qpns=CLOSED, num_qps=8, pmtu=1024, **ADDR)
    frames = request_fuzz_frames(3000, 9, **kw)
    assert frames == request_fuzz_frames(3000, 9, **kw) and len(frames) == 3000
    for f in frames:
        assert not could_request(f, peer_ip=HOST_IP, qpns=GOOD)
        assert not could_acknowledge(f, peer_ip=HOST_IP, qpns=GOOD + [VICTIM])
    got = Counter(request_verdict(f, our_mac=FPGA_MAC, our_ip=FPGA_IP, peers=PEERS, num_qps=8)
                  for f in frames)
    # every kind is there, and nothing decided is for a good QP
    assert all(got[v] > 50 for v in ("malformed", "drop_qp", "drop_state", "drop_peer",
                                     "drop_pkey", "decided", None)), got
    decided = [f for f in frames if request_verdict(f, our_mac=FPGA_MAC, our_ip=FPGA_IP,
                                                    peers=PEERS, num_qps=8) == "decided"]
    assert {H.BTH.unpack(f[H.ETH.length + 28:])["dest_qp"] for f in decided} == {VICTIM}


@pytest.mark.parametrize("opcode", [opc.OP_RC_FETCH_ADD, opc.OP_RC_COMPARE_SWAP])
def test_atomic_verdicts_follow_the_build(opcode):
    """A responder built with atomics reads the 28-byte AtomicETH as a header: an atomic that
    ends inside it is malformed there, and a request like any other in a build without them
    (which reads those bytes as payload, and refuses the request)."""
    def verdict(n, atomics, **kw):
        frame = valid_request(qpn=GOOD[0], psn=1, opcode=opcode, payload=bytes(n), **ADDR, **kw)
        return request_verdict(frame, our_mac=FPGA_MAC, our_ip=FPGA_IP, peers=PEERS,
                               num_qps=8, atomics=atomics)
    assert H.ATOMIC_ETH.length == 28
    assert verdict(28, True) == verdict(28, False) == "decided"
    assert verdict(24, True) == "malformed" and verdict(24, False) == "decided"
    assert verdict(0, True) == "malformed" and verdict(0, False) == "decided"
    # not whole words
    assert verdict(30, True, padcnt=0) == verdict(30, False, padcnt=0) == "malformed"
