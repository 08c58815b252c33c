"""The segmentation model against the rules, and against the RNIC model in strict mode: every
frame it builds is accepted and the responder's memory and completions match."""

import random

import pytest

from rocegen.sim.models.icrc import datagram
from rocegen.sim.models.requester.requester import (
    PMTUS,
    PSN_MOD,
    SEND_OPCODES,
    QpSegment,
    WorkRequest,
    WrOpcode,
    build_frame,
    segment,
)
from rocegen.sim.models.rnic import Rnic
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc

FPGA_MAC, FPGA_IP = 0x020000000001, 0x0A000002
HOST_MAC, HOST_IP = "02:00:00:00:00:99", "10.0.0.1"


def host():
    nic = Rnic(HOST_MAC, HOST_IP, strict=True)
    nic.create_qp(0x11, peer_qpn=256, peer_ip="10.0.0.2", peer_mac="02:00:00:00:00:01",
                  epsn=100, pmtu=1024)
    return nic


@pytest.mark.parametrize("pmtu", PMTUS)
@pytest.mark.parametrize("opcode", SEND_OPCODES)
def test_segmentation_rules(pmtu, opcode):
    for length in (0, 1, pmtu - 1, pmtu, pmtu + 1, 3 * pmtu, 3 * pmtu + 5):
        qp = QpSegment(dest_qpn=0x11, rkey=0x1234, base_va=0x1000, psn=PSN_MOD - 2, pmtu=pmtu,
                     ack_every=2)
        pkts = segment(WorkRequest(1, opcode, length, remote_offset=0x40, imm=0xCAFE), qp)
        assert len(pkts) == max(1, -(-length // pmtu))
        assert [p.psn for p in pkts] == [(PSN_MOD - 2 + k) % PSN_MOD for k in range(len(pkts))]
        assert qp.psn == (PSN_MOD - 2 + len(pkts)) % PSN_MOD
        assert sum(p.length for p in pkts) == length
        assert all(p.length == pmtu for p in pkts[:-1])
        assert [p.last for p in pkts] == [False] * (len(pkts) - 1) + [True]
        assert all(p.padcnt == 0 for p in pkts[:-1]) and pkts[-1].padcnt == (-length) & 3
        write = opcode in (WrOpcode.WRITE, WrOpcode.WRITE_IMM)
        imm = opcode in (WrOpcode.WRITE_IMM, WrOpcode.SEND_IMM)
        assert [p.reth is not None for p in pkts] == [write] + [False] * (len(pkts) - 1)
        if write:
            assert pkts[0].reth == (0x1040, 0x1234, length)
        assert [p.imm for p in pkts] == [None] * (len(pkts) - 1) + [0xCAFE if imm else None]
        assert pkts[-1].ack_req and pkts[-1].se == (opcode != WrOpcode.WRITE)
        assert [p.ack_req for p in pkts[:-1]] == [(k + 1) % 2 == 0 for k in range(len(pkts) - 1)]


def send_all(nic, wrs, qp, rng):
    frames = []
    ip_id = 1
    for wr in wrs:
        for pkt in segment(wr, qp):
            payload = bytes(rng.getrandbits(8) for _ in range(pkt.length))
            frames.append((wr, pkt, payload))
    answers = []
    for _, pkt, payload in frames:
        f = build_frame(pkt, payload, qp, src_mac=FPGA_MAC, dst_mac=0x020000000099,
                        src_ip=FPGA_IP, dst_ip=0x0A000001, udp_sport=0xC123, ip_id=ip_id)
        ip_id += 1
        answers += nic.receive(f)
    return frames, answers


def test_frames_are_accepted_by_the_rnic_model():
    rng = random.Random(1)
    nic = host()
    nic.register_mr(0x10000, 1 << 16, rkey=0xABCD)
    for k in range(3):
        nic.post_recv(0x11, 4096, wr_id=k)
    qp = QpSegment(dest_qpn=0x11, rkey=0xABCD, base_va=0x10000, psn=100, pmtu=1024)
    wrs = [WorkRequest(1, WrOpcode.WRITE, 5000, remote_offset=0x100),
           WorkRequest(2, WrOpcode.WRITE_IMM, 3, remote_offset=0x9000, imm=7),
           WorkRequest(3, WrOpcode.SEND, 2049),
           WorkRequest(4, WrOpcode.SEND_IMM, 0, imm=0xFEED)]
    frames, answers = send_all(nic, wrs, qp, rng)
    written = b"".join(p for w, _, p in frames if w.wr_id == 1)
    assert nic.read_mem(0x10100, 5000) == written
    assert nic.read_mem(0x19000, 3) == b"".join(p for w, _, p in frames if w.wr_id == 2)
    cq = nic.poll_cq()
    assert [c.imm for c in cq if c.imm is not None] == [7, 0xFEED]
    sent = b"".join(p for w, _, p in frames if w.wr_id == 3)
    assert any(c.byte_len == 2049 and c.data == sent for c in cq)
    assert nic.expected_psn(0x11) == (100 + len(frames)) % PSN_MOD
    assert answers, "the responder acknowledged nothing"
    # the last answer acknowledges the last PSN

    last = datagram(answers[-1])
    bth = H.BTH.unpack(last[28:40])
    assert bth["opcode"] == opc.OP_RC_ACKNOWLEDGE and bth["psn"] == (100 + len(frames) - 1)


def test_build_frame_rejects_a_payload_of_the_wrong_length():
    qp = QpSegment(dest_qpn=1, rkey=1, base_va=0, psn=0)
    pkt = segment(WorkRequest(1, WrOpcode.WRITE, 10), qp)[0]
    with pytest.raises(ValueError, match="payload"):
        build_frame(pkt, b"short", qp, src_mac=1, dst_mac=2, src_ip=3, dst_ip=4, udp_sport=0xC000)
