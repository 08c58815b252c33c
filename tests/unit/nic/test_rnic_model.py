"""The host RNIC model (:mod:`rocegen.sim.models.rnic`) driven with the frames a correct RC
requester sends -- built here with scapy, independently of the model -- and with every kind of
error the responder rules cover. Answers are dissected with scapy and their ICRC recomputed by
scapy, so neither side of a check relies on the model's own code."""

import random
import re
import struct

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP, IPOption_NOP
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import checksum

from rocegen.sim.models.icrc import icrc as _icrc
from rocegen.sim.models.rnic import IDEAL, Access, Behaviour, Rnic
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.sim.testing.vectors import ICRC_VECTORS
from tests.tiers import full

VECTORS = ICRC_VECTORS
PMTUS = (256, 512, 1024, 2048, 4096)
QPN, PEER_QPN = 0x11, 0x100           # the host's QP, the FPGA's QP
EPSN = 0x1000
VA, MRLEN, RKEY = 0x7F00_0000_1000, 64 * 1024, 0xC0FFEE
FILL = 0xA5


# ---------------------------------------------------------------- a correct requester (scapy)

class Requester:
    """Builds the frames an RC requester sends (spec "Segmentation (requester)")."""

    def __init__(self, *, qpn=PEER_QPN, dqpn=QPN, psn=EPSN, pmtu=1024, sport=0xC123,
                 ack_every=64, src_ip=FPGA_IP, src_mac=FPGA_MAC):
        self.qpn, self.dqpn, self.psn, self.pmtu = qpn, dqpn, psn, pmtu
        self.sport, self.ack_every, self.src_ip, self.src_mac = sport, ack_every, src_ip, src_mac
        self.ip_id = 0x100

    def packet(self, opcode, payload=b"", *, reth=None, imm=None, ackreq=False, se=False,
               psn=None, padcnt=None, pad=None, eth=None, ip=None, udp=None, **bth):
        if psn is None:
            psn, self.psn = self.psn, (self.psn + 1) & 0xFFFFFF
        ext = b""
        if reth is not None:
            ext += struct.pack(">QII", *reth)
        if imm is not None:
            ext += struct.pack(">I", imm)
        if padcnt is None:
            padcnt = (-len(payload)) & 3
        if pad is None:
            pad = bytes(padcnt)
        self.ip_id += 1
        pkt = (Ether(**{"src": self.src_mac, "dst": HOST_MAC, **(eth or {})})
               / IP(**{"src": self.src_ip, "dst": HOST_IP, "flags": "DF", "ttl": 64, "tos": 2,
                       "id": self.ip_id, **(ip or {})})
               / UDP(**{"sport": self.sport, "dport": 4791, "chksum": 0, **(udp or {})})
               / BTH(**{"opcode": opcode, "solicited": int(se), "padcount": padcnt,
                        "dqpn": self.dqpn, "ackreq": int(ackreq), "psn": psn, **bth})
               / Raw(ext + bytes(payload) + pad))
        return bytes(pkt)

    def _chunks(self, data):
        return [data[o:o + self.pmtu] for o in range(0, len(data), self.pmtu)] or [b""]

    def write(self, va, rkey, data, *, imm=None):
        chunks = self._chunks(data)
        out = []
        for i, c in enumerate(chunks):
            first, last = i == 0, i == len(chunks) - 1
            if first and last:
                op = 0x0B if imm is not None else 0x0A
            elif first:
                op = 0x06
            elif last:
                op = 0x09 if imm is not None else 0x08
            else:
                op = 0x07
            out.append(self.packet(op, c, reth=(va, rkey, len(data)) if first else None,
                                   imm=imm if last else None,
                                   ackreq=last or (i + 1) % self.ack_every == 0,
                                   se=last and imm is not None))
        return out

    def send(self, data, *, imm=None):
        chunks = self._chunks(data)
        out = []
        for i, c in enumerate(chunks):
            first, last = i == 0, i == len(chunks) - 1
            if first and last:
                op = 0x05 if imm is not None else 0x04
            elif first:
                op = 0x00
            elif last:
                op = 0x03 if imm is not None else 0x02
            else:
                op = 0x01
            out.append(self.packet(op, c, imm=imm if last else None,
                                   ackreq=last or (i + 1) % self.ack_every == 0, se=last))
        return out


def feed(rnic, frames):
    out = []
    for f in frames:
        out += rnic.receive(f)
    return out


def answers(frames, *, vlan=None, migreq=1):
    """(dqpn, psn, syndrome, msn) of ACK/NAK frames, after checking every header field."""
    out = []
    for f in frames:
        p = Ether(f)
        assert (p.dst, p.src) == (FPGA_MAC, HOST_MAC)
        if vlan is not None:
            assert p[Dot1Q].vlan == vlan
        ip = p[IP]
        assert (ip.src, ip.dst, ip.ttl, ip.proto, ip.ihl) == (HOST_IP, FPGA_IP, 64, 17, 5)
        assert ip.flags.DF and not ip.flags.MF and ip.frag == 0 and ip.id != 0
        assert checksum(bytes(ip)[:20]) == 0
        assert ip.len == 20 + 8 + 12 + 4 + 4
        assert p[UDP].dport == 4791 and p[UDP].chksum == 0 and 0xC000 <= p[UDP].sport <= 0xFFFF
        b = p[BTH]
        assert (b.opcode, b.version, b.pkey, b.padcount, b.ackreq, b.fecn, b.becn) == \
            (0x11, 0, 0xFFFF, 0, 0, 0, 0)
        assert (b.solicited, b.migreq, b.resv6, b.resv7) == (0, migreq, 0, 0)
        q = p.copy()
        q[BTH].icrc = None
        assert bytes(q) == f, "ICRC of the answer differs from scapy's"
        out.append((b.dqpn, b.psn, p[AETH].syndrome, p[AETH].msn))
    return out


def make(pmtu=1024, *, strict=True, epsn=EPSN, behaviour=IDEAL, **kw):
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=behaviour, strict=strict, **kw)
    rnic.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=epsn, pmtu=pmtu)
    rnic.register_mr(VA, MRLEN, RKEY, fill=FILL)
    return rnic, Requester(pmtu=pmtu, psn=epsn)


def memory_after(writes, length=MRLEN):
    mem = bytearray([FILL]) * length
    for off, data in writes:
        mem[off:off + len(data)] = data
    return bytes(mem)


def data_of(n, seed=0):
    return random.Random(seed * 7919 + n).randbytes(n)


# ---------------------------------------------------------------- ICRC helper vs the vectors

def vector_frames():
    recs, name = [], None
    for line in VECTORS.read_text().splitlines():
        if line.startswith("name:"):
            name = line[5:].strip()
        elif line.startswith("hex:"):
            recs.append((name, bytes.fromhex(line[4:].strip())))
    return recs


def ip_datagram(frame):
    off = 12
    while frame[off:off + 2] == b"\x81\x00":
        off += 4
    etype = int.from_bytes(frame[off:off + 2], "big")
    dg = frame[off + 2:]
    if etype == 0x0800:
        return dg[:int.from_bytes(dg[2:4], "big")]
    assert etype == 0x86DD
    return dg[:40 + int.from_bytes(dg[4:6], "big")]


def test_icrc_matches_every_vector():
    recs = vector_frames()
    assert len(recs) == VECTORS.read_text().count("\nname:") >= 18
    kinds = set()
    for name, frame in recs:
        dg = ip_datagram(frame)
        assert _icrc(dg[:-4]) == dg[-4:], name
        kinds.add((dg[0] >> 4, frame[12:14] == b"\x81\x00"))
    assert kinds == {(4, False), (6, False), (4, True)}


@pytest.mark.parametrize("version", [4, 6])
def test_icrc_masks_exactly_the_variant_fields(version):
    dg = next(ip_datagram(f) for _, f in vector_frames() if ip_datagram(f)[0] >> 4 == version)
    body, ref = dg[:-4], dg[-4:]
    udp = 20 if version == 4 else 40
    masked = [1, 8, 10, 11] if version == 4 else [0, 1, 2, 3, 7]
    masked += [udp + 6, udp + 7, udp + 12]
    for i in range(len(body)):
        b = bytearray(body)
        b[i] ^= 0x01 if i == 0 else 0x5A       # keep the version nibble
        assert (_icrc(bytes(b)) == ref) == (i in masked), i


# ---------------------------------------------------------------- the vectors, executed

def test_vector_write_and_send_frames_execute():
    recs = [f for _, f in vector_frames()]
    rnic = Rnic("02:00:00:00:00:02", "10.0.0.2", behaviour=IDEAL, strict=True)
    rnic.create_qp(0x11, peer_qpn=0x22, peer_ip="10.0.0.1", epsn=0x64, pmtu=1024)
    rnic.register_mr(0x1000, 4096, 0xABCD, fill=0)
    out = feed(rnic, recs[0:3])             # WRITE FIRST/MIDDLE/LAST, 2500 bytes to 0x1000
    pattern = bytes(range(256)) * 4
    assert rnic.read_mem(0x1000, 4096) == (pattern * 2 + pattern[:452]).ljust(4096, b"\0")
    (ack,) = out
    p = Ether(ack)
    assert (p[BTH].dqpn, p[BTH].psn, p[AETH].syndrome, p[AETH].msn) == (0x22, 0x66, 0x1F, 1)
    assert (p.dst, p[IP].dst) == ("02:00:00:00:00:01", "10.0.0.1")

    rnic = Rnic("02:00:00:00:00:02", "10.0.0.2", behaviour=IDEAL, strict=True)
    rnic.create_qp(0x11, peer_qpn=0x22, peer_ip="10.0.0.1", epsn=0xC8, pmtu=1024)
    rnic.post_recv(0x11, 4096, wr_id=5)
    out = feed(rnic, recs[6:9])             # SEND FIRST/MIDDLE/LAST, 2049 bytes
    assert rnic.cq == [(5, "RECV", 2049, None, "SUCCESS", 0x11, pattern * 2 + b"\0")]
    assert Ether(out[0])[AETH].msn == 1
    # the next vector is a SEND_LAST_WITH_IMMEDIATE without its FIRST: invalid request
    rnic.strict = False
    (nak,) = rnic.receive(recs[9])
    assert (Ether(nak)[BTH].psn, Ether(nak)[AETH].syndrome) == (0xCB, 0x61)


# ---------------------------------------------------------------- ARP

def test_arp_request_answered_and_learned():
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True)
    req = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP,
                                                            pdst=HOST_IP)
    (reply,) = rnic.receive(bytes(req))
    p = Ether(reply)
    assert len(reply) == 60 and (p.dst, p.src, p.type) == (FPGA_MAC, HOST_MAC, 0x0806)
    assert (p[ARP].op, p[ARP].hwsrc, p[ARP].psrc, p[ARP].hwdst, p[ARP].pdst) == \
        (2, HOST_MAC, HOST_IP, FPGA_MAC, FPGA_IP)
    assert rnic.arp_cache == {FPGA_IP: FPGA_MAC}
    other = Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(op=1, hwsrc=FPGA_MAC,
                                                              psrc=FPGA_IP, pdst="10.0.0.77")
    assert rnic.receive(bytes(other)) == []
    assert rnic.counters["arp_rx_request"] == 2 and rnic.counters["arp_tx_reply"] == 1
    q = Ether(rnic.arp_request(FPGA_IP))
    assert (q.dst, q[ARP].op, q[ARP].pdst, q[ARP].psrc) == ("ff:ff:ff:ff:ff:ff", 1, FPGA_IP,
                                                             HOST_IP)


# ---------------------------------------------------------------- RDMA WRITE

@pytest.mark.parametrize("pmtu", PMTUS)
@pytest.mark.parametrize("size", ["0", "1", "pmtu", "pmtu+1", "3pmtu+2"])
def test_write_sizes(pmtu, size):
    n = {"0": 0, "1": 1, "pmtu": pmtu, "pmtu+1": pmtu + 1, "3pmtu+2": 3 * pmtu + 2}[size]
    rnic, req = make(pmtu)
    data = data_of(n, pmtu)
    frames = req.write(VA + 7, RKEY, data)
    assert len(frames) == max(1, -(-n // pmtu))
    out = feed(rnic, frames)
    assert rnic.read_mem(VA, MRLEN) == memory_after([(7, data)])
    last = (EPSN + len(frames) - 1) & 0xFFFFFF
    assert answers(out) == [(PEER_QPN, last, 0x1F, 1)]
    assert rnic.expected_psn(QPN) == EPSN + len(frames)
    assert rnic.cq == []
    c = rnic.counters
    assert (c["executed"], c["write_msgs"], c["write_bytes"], c["ack_tx"]) == \
        (len(frames), 1, n, 1)


@pytest.mark.parametrize("pmtu", [p if p in (1024, 4096) else full(p) for p in PMTUS])
def test_write_several_megabytes(pmtu):
    n = 2 * 1024 * 1024 + 3
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True)
    rnic.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=EPSN, pmtu=pmtu)
    rnic.register_mr(VA, n + 64, RKEY, fill=FILL)
    req = Requester(pmtu=pmtu, ack_every=64)
    data = data_of(n, 99)
    frames = req.write(VA + 32, RKEY, data)
    npk = -(-n // pmtu)
    assert len(frames) == npk
    out = feed(rnic, frames)
    assert rnic.read_mem(VA, n + 64) == bytes([FILL]) * 32 + data + bytes([FILL]) * 32
    want = [(PEER_QPN, EPSN + i, 0x1F, 0) for i in range(63, npk - 1, 64)]
    want.append((PEER_QPN, EPSN + npk - 1, 0x1F, 1))
    assert answers(out) == want
    assert rnic.expected_psn(QPN) == EPSN + npk


def test_msn_counts_messages_and_psn_continues():
    rnic, req = make(256)
    sizes = [0, 1, 256, 257, 1000]
    out, writes, off = [], [], 0
    for k, n in enumerate(sizes):
        d = data_of(n, k)
        out += feed(rnic, req.write(VA + off, RKEY, d))
        writes.append((off, d))
        off += n + 3
    assert rnic.read_mem(VA, MRLEN) == memory_after(writes)
    npk = [1, 1, 1, 2, 4]
    psns = [EPSN + sum(npk[:k + 1]) - 1 for k in range(5)]
    assert answers(out) == [(PEER_QPN, p, 0x1F, k + 1) for k, p in enumerate(psns)]
    assert rnic.msn(QPN) == 5


def test_pad_bytes_are_not_written():
    rnic, req = make(256)
    frames = req.write(VA, RKEY, b"ABCDEFGHIJKLM")     # 13 bytes: PadCnt 3
    assert Ether(frames[0])[BTH].padcount == 3
    feed(rnic, frames)
    assert rnic.read_mem(VA, 16) == b"ABCDEFGHIJKLM" + bytes([FILL]) * 3


# ---------------------------------------------------------------- SEND / WRITE with immediate

@pytest.mark.parametrize("pmtu", [256, 4096])
@pytest.mark.parametrize("size", ["0", "1", "pmtu", "pmtu+1", "3pmtu+5"])
@pytest.mark.parametrize("imm", [None, 0xDEADBEEF])
def test_send(pmtu, size, imm):
    n = {"0": 0, "1": 1, "pmtu": pmtu, "pmtu+1": pmtu + 1, "3pmtu+5": 3 * pmtu + 5}[size]
    rnic, req = make(pmtu)
    rnic.post_recv(QPN, n, wr_id=41)            # exactly the message size
    rnic.post_recv(QPN, 10000, wr_id=42)
    data = data_of(n, 3)
    frames = req.send(data, imm=imm)
    out = feed(rnic, frames)
    assert rnic.poll_cq() == [(41, "RECV", n, imm, "SUCCESS", QPN, data)]
    assert answers(out) == [(PEER_QPN, EPSN + len(frames) - 1, 0x1F, 1)]
    assert [w.wr_id for w in rnic.qps[QPN].rq] == [42]
    assert rnic.read_mem(VA, MRLEN) == memory_after([])
    out = feed(rnic, req.send(data[:5]))
    assert rnic.poll_cq() == [(42, "RECV", min(n, 5), None, "SUCCESS", QPN, data[:5])]
    assert answers(out)[0][3] == 2


def test_send_into_registered_memory():
    rnic, req = make(256)
    rnic.post_recv(QPN, 600, wr_id=1, addr=VA + 100)
    data = data_of(555, 4)
    feed(rnic, req.send(data, imm=7))
    assert rnic.cq == [(1, "RECV", 555, 7, "SUCCESS", QPN, data)]
    assert rnic.read_mem(VA, MRLEN) == memory_after([(100, data)])
    with pytest.raises(ValueError):
        rnic.post_recv(QPN, 10, wr_id=2, addr=VA + MRLEN - 5)


@pytest.mark.parametrize("n", [0, 5, 2 * 512 + 1])
def test_write_with_immediate_consumes_a_wqe(n):
    rnic, req = make(512)
    rnic.post_recv(QPN, 0, wr_id=9)
    data = data_of(n, 5)
    frames = req.write(VA + 64, RKEY, data, imm=0x01020304)
    out = feed(rnic, frames)
    assert rnic.cq == [(9, "RECV_RDMA_WITH_IMM", n, 0x01020304, "SUCCESS", QPN, None)]
    assert rnic.read_mem(VA, MRLEN) == memory_after([(64, data)])
    assert answers(out) == [(PEER_QPN, EPSN + len(frames) - 1, 0x1F, 1)]
    assert not rnic.qps[QPN].rq


def test_completions_follow_the_posting_order():
    rnic, req = make(256)
    for k in range(3):
        rnic.post_recv(QPN, 1000, wr_id=100 + k)
    feed(rnic, req.send(b"one"))
    feed(rnic, req.write(VA, RKEY, b"two", imm=2))
    feed(rnic, req.send(b"three" * 100, imm=3))
    assert [(c.wr_id, c.opcode, c.byte_len, c.imm) for c in rnic.cq] == [
        (100, "RECV", 3, None), (101, "RECV_RDMA_WITH_IMM", 3, 2), (102, "RECV", 500, 3)]


# ---------------------------------------------------------------- PSN wrap, interleaved QPs

def test_psn_wraps_at_2_24():
    start = (1 << 24) - 3
    rnic, req = make(256, epsn=start)
    req.ack_every = 2
    data = data_of(6 * 256 - 100, 6)
    frames = req.write(VA, RKEY, data)
    assert [Ether(f)[BTH].psn for f in frames] == [0xFFFFFD, 0xFFFFFE, 0xFFFFFF, 0, 1, 2]
    out = feed(rnic, frames)
    assert answers(out) == [(PEER_QPN, 0xFFFFFE, 0x1F, 0), (PEER_QPN, 0, 0x1F, 0),
                            (PEER_QPN, 2, 0x1F, 1)]
    assert rnic.expected_psn(QPN) == 3
    assert rnic.read_mem(VA, MRLEN) == memory_after([(0, data)])
    # 0xFFFFFF is behind ePSN 3 across the wrap: a duplicate, ACKed with ePSN - 1
    rnic.write_mem(VA, bytes(len(data)))
    assert answers(rnic.receive(frames[2])) == [(PEER_QPN, 2, 0x1F, 1)]
    assert rnic.read_mem(VA, len(data)) == bytes(len(data))
    # PSN 4 is ahead of 3: sequence NAK carrying 3
    (nak,) = rnic.receive(req.packet(0x0A, b"x", reth=(VA, RKEY, 1), ackreq=True, psn=4))
    assert answers([nak]) == [(PEER_QPN, 3, 0x60, 1)]


def test_interleaved_qps():
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True)
    rnic.create_qp(0x20, peer_qpn=0x300, peer_ip=FPGA_IP, epsn=5, pmtu=256)
    rnic.create_qp(0x21, peer_qpn=0x301, peer_ip=FPGA_IP, epsn=0xFFFFFE, pmtu=1024)
    rnic.register_mr(0x10000, 8192, 0x111, fill=FILL)
    rnic.register_mr(0x20000, 8192, 0x222, fill=FILL)
    rnic.post_recv(0x21, 4096, wr_id=77)
    a = Requester(qpn=0x300, dqpn=0x20, psn=5, pmtu=256, sport=0xC001)
    b = Requester(qpn=0x301, dqpn=0x21, psn=0xFFFFFE, pmtu=1024, sport=0xC002)
    da, db, dc = data_of(1000, 1), data_of(3000, 2), data_of(2100, 3)
    fa = a.write(0x10000 + 3, 0x111, da)
    fb = b.send(db, imm=0xAB) + b.write(0x20000, 0x222, dc)
    out = []
    for k in range(max(len(fa), len(fb))):
        for fs in (fa, fb):
            if k < len(fs):
                out += rnic.receive(fs[k])
    got = answers(out)
    assert sorted(got) == sorted([(0x300, 5 + len(fa) - 1, 0x1F, 1),
                                  (0x301, 0, 0x1F, 1), (0x301, 3, 0x1F, 2)])
    assert rnic.read_mem(0x10000 + 3, 1000) == da and rnic.read_mem(0x20000, 2100) == dc
    assert rnic.read_mem(0x10000, 3) == bytes([FILL]) * 3
    assert rnic.cq == [(77, "RECV", 3000, 0xAB, "SUCCESS", 0x21, db)]
    assert (rnic.expected_psn(0x20), rnic.expected_psn(0x21)) == (5 + len(fa), 4)
    assert (rnic.msn(0x20), rnic.msn(0x21)) == (1, 2)


# ---------------------------------------------------------------- loss, duplicates, RNR

def test_gap_one_nak_then_silence_until_epsn():
    rnic, req = make(256)
    data = data_of(5 * 256, 8)
    frames = req.write(VA, RKEY, data)
    assert rnic.receive(frames[0]) == []
    out = [rnic.receive(f) for f in frames[2:]]          # frame 1 lost
    assert answers(out[0]) == [(PEER_QPN, EPSN + 1, 0x60, 0)]
    assert out[1:] == [[], []]
    assert rnic.counters["nak_seq_tx"] == 1 and rnic.counters["seq_drop"] == 2
    assert rnic.expected_psn(QPN) == EPSN + 1
    assert rnic.read_mem(VA, MRLEN) == memory_after([(0, data[:256])])
    # go-back-N from the NAKed PSN (MIDDLE opcode, no RETH)
    out = feed(rnic, frames[1:])
    assert answers(out) == [(PEER_QPN, EPSN + 4, 0x1F, 1)]
    assert rnic.read_mem(VA, MRLEN) == memory_after([(0, data)])
    # a new gap is NAKed again
    f2 = req.write(VA, RKEY, b"z" * 600)
    assert answers(rnic.receive(f2[1])) == [(PEER_QPN, EPSN + 5, 0x60, 1)]
    assert rnic.receive(f2[2]) == []
    assert rnic.counters["nak_seq_tx"] == 2


def test_duplicates_are_acked_with_epsn_minus_1_and_not_executed():
    rnic, req = make(256)
    rnic.post_recv(QPN, 1000, wr_id=1)
    rnic.post_recv(QPN, 1000, wr_id=2)
    w = req.write(VA, RKEY, data_of(700, 9))
    s = req.send(b"hello")
    feed(rnic, w + s)
    assert len(rnic.poll_cq()) == 1
    rnic.write_mem(VA, bytes(700))
    epsn = rnic.expected_psn(QPN)
    out = feed(rnic, w + s)          # the first two WRITE packets have no AckReq: ACKed anyway
    assert answers(out) == [(PEER_QPN, epsn - 1, 0x1F, 2)] * 4
    assert rnic.read_mem(VA, 700) == bytes(700)
    assert rnic.cq == [] and [x.wr_id for x in rnic.qps[QPN].rq] == [2]
    assert rnic.expected_psn(QPN) == epsn and rnic.msn(QPN) == 2
    assert rnic.counters["duplicate"] == 4


def test_rnr_nak_without_receive_wqe():
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True)
    rnic.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=EPSN, pmtu=256,
                   min_rnr_timer=14)
    req = Requester(pmtu=256)
    m1, m2 = req.send(data_of(600, 1)), req.send(b"second")
    out = feed(rnic, m1 + m2)
    # RNR NAK for the FIRST; the rest of the window is dropped without another NAK
    assert answers(out) == [(PEER_QPN, EPSN, 0x20 | 14, 0)]
    assert rnic.expected_psn(QPN) == EPSN and rnic.cq == []
    assert rnic.counters["rnr_nak_tx"] == 1 and rnic.counters["seq_drop"] == 3
    rnic.post_recv(QPN, 1000, wr_id=1)
    rnic.post_recv(QPN, 1000, wr_id=2)
    out = feed(rnic, m1 + m2)
    assert answers(out) == [(PEER_QPN, EPSN + 2, 0x1F, 1), (PEER_QPN, EPSN + 3, 0x1F, 2)]
    assert [(c.wr_id, c.data) for c in rnic.cq] == [(1, data_of(600, 1)), (2, b"second")]


def test_rnr_for_refuses_n_sends_even_with_wqes():
    rnic, req = make(256)
    rnic.create_qp(0x12, peer_qpn=0x101, peer_ip=FPGA_IP, epsn=0, pmtu=256)
    rnic.post_recv(QPN, 100, wr_id=1)
    rnic.post_recv(0x12, 100, wr_id=2)
    rnic.rnr_for(2, QPN)
    (f,) = req.send(b"abc")
    assert answers(rnic.receive(f)) == [(PEER_QPN, EPSN, 0x21, 0)]
    assert answers(rnic.receive(f)) == [(PEER_QPN, EPSN, 0x21, 0)]
    other = Requester(qpn=0x101, dqpn=0x12, psn=0, sport=0xC777)
    assert answers(rnic.receive(other.send(b"q")[0])) == [(0x101, 0, 0x1F, 1)]  # not refused
    assert answers(rnic.receive(f)) == [(PEER_QPN, EPSN, 0x1F, 1)]
    assert [c.wr_id for c in rnic.cq] == [2, 1]
    # the RNIC-wide form applies to whichever QP comes next; writes are not refused
    rnic.post_recv(QPN, 100, wr_id=3)
    rnic.rnr_for(1)
    assert answers(feed(rnic, req.write(VA, RKEY, b"w"))) == [(PEER_QPN, EPSN + 1, 0x1F, 2)]
    (g,) = req.send(b"x")
    assert answers(rnic.receive(g))[0][2] == 0x21
    assert answers(rnic.receive(g))[0][2] == 0x1F


def test_rnr_on_the_last_packet_of_a_write_with_immediate():
    rnic, req = make(256)
    data = data_of(700, 11)
    frames = req.write(VA, RKEY, data, imm=5)
    out = feed(rnic, frames)
    assert answers(out) == [(PEER_QPN, EPSN + 2, 0x21, 0)]
    assert rnic.read_mem(VA, 512) == data[:512] and rnic.expected_psn(QPN) == EPSN + 2
    rnic.post_recv(QPN, 0, wr_id=8)
    assert answers(rnic.receive(frames[2])) == [(PEER_QPN, EPSN + 2, 0x1F, 1)]
    assert rnic.read_mem(VA, MRLEN) == memory_after([(0, data)])
    assert rnic.cq == [(8, "RECV_RDMA_WITH_IMM", 700, 5, "SUCCESS", QPN, None)]


# ---------------------------------------------------------------- fatal NAKs

def assert_dead(rnic, req, nak_count):
    """After a class C NAK: the QP is in error, drops everything silently, flushes receives."""
    assert rnic.qp_state(QPN) == "ERR"
    epsn = rnic.expected_psn(QPN)
    dropped = rnic.counters["drop_qp_error"]
    for f in req.write(VA, RKEY, b"after") + req.send(b"x"):
        assert rnic.receive(f) == []
    assert rnic.counters["drop_qp_error"] == dropped + 2
    assert rnic.expected_psn(QPN) == epsn
    rnic.post_recv(QPN, 10, wr_id=999)
    assert rnic.cq[-1] == (999, "RECV", 0, None, "WR_FLUSH_ERR", QPN, None)
    naks = sum(rnic.counters[k] for k in ("nak_inv_req_tx", "nak_rem_access_tx", "nak_rem_op_tx"))
    assert naks == nak_count


@pytest.mark.parametrize("strict", [False, True])
def test_bad_rkey_remote_access_error(strict):
    rnic, req = make(256, strict=strict)        # legitimate test situation: strict does not raise
    rnic.post_recv(QPN, 10, wr_id=1)
    frames = req.write(VA, RKEY + 1, data_of(300, 1))
    out = feed(rnic, frames)
    assert answers(out) == [(PEER_QPN, EPSN, 0x62, 0)]
    assert rnic.counters["err_rkey"] == 1
    assert rnic.read_mem(VA, MRLEN) == memory_after([])
    assert rnic.cq == [(1, "RECV", 0, None, "WR_FLUSH_ERR", QPN, None)]
    assert_dead(rnic, req, 1)


@pytest.mark.parametrize("case", ["before", "after_end", "straddles", "no_remote_write"])
def test_out_of_region_remote_access_error(case):
    rnic, req = make(256)
    rnic.register_mr(0x100000, 4096, 0x999, access=Access.LOCAL_WRITE)
    va, rkey, n, counter = {
        "before": (VA - 1, RKEY, 10, "err_bounds"),
        "after_end": (VA + MRLEN, RKEY, 1, "err_bounds"),
        "straddles": (VA + MRLEN - 300, RKEY, 301, "err_bounds"),
        "no_remote_write": (0x100000, 0x999, 10, "err_access"),
    }[case]
    out = feed(rnic, req.write(va, rkey, data_of(n, 2)))
    assert answers(out) == [(PEER_QPN, EPSN, 0x62, 0)]
    assert rnic.counters[counter] == 1
    assert rnic.read_mem(VA, MRLEN) == memory_after([])
    assert_dead(rnic, req, 1)


def test_write_that_exactly_fits_the_region_end():
    rnic, req = make(256)
    d = data_of(301, 3)
    assert answers(feed(rnic, req.write(VA + MRLEN - 301, RKEY, d))) == \
        [(PEER_QPN, EPSN + 1, 0x1F, 1)]
    assert rnic.read_mem(VA + MRLEN - 301, 301) == d


def test_zero_length_write_does_not_check_the_rkey():
    rnic, req = make(256)
    assert answers(feed(rnic, req.write(0xDEAD0000, 0xBAD, b""))) == [(PEER_QPN, EPSN, 0x1F, 1)]
    assert rnic.counters["err_rkey"] == 0


SEQ_CASES = {
    # name: (frames before the offending one, the offending one, counter)
    "write_middle_alone": (lambda r: [], lambda r: r.packet(0x07, bytes(256)), "err_opcode_seq"),
    "write_last_alone": (lambda r: [], lambda r: r.packet(0x08, b"abcd", ackreq=True),
                         "err_opcode_seq"),
    "send_last_imm_alone": (lambda r: [], lambda r: r.packet(0x03, b"ab", imm=1, ackreq=True),
                            "err_opcode_seq"),
    "send_middle_in_write": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 1000))],
                             lambda r: r.packet(0x01, bytes(256)), "err_opcode_seq"),
    "write_first_in_send": (lambda r: [r.packet(0x00, bytes(256))],
                            lambda r: r.packet(0x06, bytes(256), reth=(VA, RKEY, 1000)),
                            "err_opcode_seq"),
    "send_only_in_write": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 1000))],
                           lambda r: r.packet(0x04, b"", ackreq=True), "err_opcode_seq"),
    "rdma_read": (lambda r: [], lambda r: r.packet(0x0C, reth=(VA, RKEY, 8), ackreq=True),
                  "err_unsupported"),
    "fetch_add": (lambda r: [], lambda r: r.packet(0x14, bytes(28), padcnt=0), "err_unsupported"),
}


@pytest.mark.parametrize("case", sorted(SEQ_CASES))
@pytest.mark.parametrize("strict", [False, True])
def test_opcode_out_of_sequence_invalid_request(case, strict):
    before, bad, counter = SEQ_CASES[case]
    rnic, req = make(256, strict=strict)
    rnic.post_recv(QPN, 4096, wr_id=1)
    rnic.post_recv(QPN, 4096, wr_id=2)
    assert feed(rnic, before(req)) == []
    frame = bad(req)
    if strict:
        with pytest.raises(AssertionError, match=re.escape(f"[{counter}]")):
            rnic.receive(frame)
        return
    psn = Ether(frame)[BTH].psn
    assert answers(rnic.receive(frame)) == [(PEER_QPN, psn, 0x61, 0)]
    assert rnic.counters[counter] == 1
    # a SEND in progress completes in error, the other WQEs are flushed
    st = [c.status for c in rnic.cq]
    assert st == (["REM_INV_REQ_ERR", "WR_FLUSH_ERR"] if case == "write_first_in_send"
                  else ["WR_FLUSH_ERR"] * 2)
    assert_dead(rnic, req, 1)


LEN_CASES = {
    # name: (frames before, offending frame) -- PMTU 256
    "first_short": (lambda r: [], lambda r: r.packet(0x06, bytes(252), reth=(VA, RKEY, 600))),
    "first_long": (lambda r: [], lambda r: r.packet(0x06, bytes(260), reth=(VA, RKEY, 600))),
    "middle_short": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 600))],
                     lambda r: r.packet(0x07, bytes(8))),
    "first_padcnt": (lambda r: [], lambda r: r.packet(0x06, bytes(253), padcnt=3,
                                                      reth=(VA, RKEY, 600))),
    "last_short_of_dma_len": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 600))],
                              lambda r: r.packet(0x08, bytes(87), ackreq=True)),
    "last_beyond_dma_len": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 300))],
                            lambda r: r.packet(0x08, bytes(48), ackreq=True)),
    "middle_exhausts_dma_len": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 512))],
                                lambda r: r.packet(0x07, bytes(256))),
    "only_longer_than_dma_len": (lambda r: [], lambda r: r.packet(0x0A, bytes(9),
                                                                  reth=(VA, RKEY, 8),
                                                                  ackreq=True)),
    "only_longer_than_pmtu": (lambda r: [], lambda r: r.packet(0x0A, bytes(260),
                                                               reth=(VA, RKEY, 260),
                                                               ackreq=True)),
    "send_last_empty": (lambda r: [r.packet(0x00, bytes(256))],
                        lambda r: r.packet(0x02, b"", ackreq=True)),
    "send_first_short": (lambda r: [], lambda r: r.packet(0x00, bytes(100))),
}


@pytest.mark.parametrize("case", sorted(LEN_CASES))
@pytest.mark.parametrize("strict", [False, True])
def test_length_errors_invalid_request(case, strict):
    before, bad = LEN_CASES[case]
    rnic, req = make(256, strict=strict)
    rnic.post_recv(QPN, 4096, wr_id=1)
    assert feed(rnic, before(req)) == []
    frame = bad(req)
    if strict:
        with pytest.raises(AssertionError, match=re.escape("[err_length]")):
            rnic.receive(frame)
        return
    psn = Ether(frame)[BTH].psn
    assert answers(rnic.receive(frame)) == [(PEER_QPN, psn, 0x61, 0)]
    assert rnic.counters["err_length"] == 1
    assert_dead(rnic, req, 1)


@pytest.mark.parametrize("strict", [False, True])
def test_send_longer_than_the_receive_buffer(strict):
    rnic, req = make(256, strict=strict)     # the test chose the buffer: strict does not raise
    rnic.post_recv(QPN, 300, wr_id=1)
    rnic.post_recv(QPN, 300, wr_id=2)
    data = data_of(700, 12)
    frames = req.send(data)
    out = feed(rnic, frames)
    # FIRST fits (256 of 300), MIDDLE overflows
    assert answers(out) == [(PEER_QPN, EPSN + 1, 0x61, 0)]
    assert rnic.cq == [(1, "RECV", 256, None, "LOC_LEN_ERR", QPN, None),
                       (2, "RECV", 0, None, "WR_FLUSH_ERR", QPN, None)]
    assert rnic.counters["err_recv_len"] == 1
    assert_dead(rnic, req, 1)


def test_send_only_one_byte_too_long():
    rnic, req = make(256, strict=False)
    rnic.post_recv(QPN, 100, wr_id=1)
    assert answers(feed(rnic, req.send(bytes(101)))) == [(PEER_QPN, EPSN, 0x61, 0)]
    assert rnic.cq[0].status == "LOC_LEN_ERR"


# ---------------------------------------------------------------- silent drops

def corrupt_icrc(f):
    return f[:-1] + bytes([f[-1] ^ 1])


DROP_CASES = {
    "bad_icrc": (lambda r: corrupt_icrc(r.packet(0x0A, b"data", reth=(VA, RKEY, 4), ackreq=True,
                                                 psn=EPSN)), "drop_icrc"),
    "wrong_dest_qp": (lambda r: r.packet(0x0A, b"data", reth=(VA, RKEY, 4), ackreq=True,
                                         psn=EPSN, dqpn=QPN + 1), "drop_dest_qp"),
    "wrong_source_ip": (lambda r: r.packet(0x0A, b"data", reth=(VA, RKEY, 4), ackreq=True,
                                           psn=EPSN, ip={"src": "10.0.0.66"}), "drop_src_ip"),
    "wrong_pkey": (lambda r: r.packet(0x0A, b"data", reth=(VA, RKEY, 4), ackreq=True, psn=EPSN,
                                      pkey=0x7FFF), "drop_pkey"),
    "tver_1": (lambda r: r.packet(0x0A, b"data", reth=(VA, RKEY, 4), ackreq=True, psn=EPSN,
                                  version=1), "drop_tver"),
}


@pytest.mark.parametrize("case", sorted(DROP_CASES))
def test_silent_drops(case):
    build, counter = DROP_CASES[case]
    rnic, req = make(256, strict=False)
    bad = build(req)
    assert rnic.receive(bad) == [] and rnic.receive(bad) == []
    assert rnic.counters[counter] == 2 and rnic.counters["executed"] == 0
    assert rnic.expected_psn(QPN) == EPSN
    assert rnic.read_mem(VA, MRLEN) == memory_after([])
    # nothing was disturbed: the good packet with the same PSN executes
    good = req.packet(0x0A, b"data", reth=(VA, RKEY, 4), ackreq=True, psn=EPSN)
    assert answers(rnic.receive(good)) == [(PEER_QPN, EPSN, 0x1F, 1)]
    assert rnic.read_mem(VA, 4) == b"data"
    strict = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True)
    strict.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=EPSN, pmtu=256)
    with pytest.raises(AssertionError, match=re.escape(f"[{counter}]")):
        strict.receive(bad)


# ---------------------------------------------------------------- strict mode

def w4(r, **kw):
    """A correct 4-byte WRITE_ONLY unless ``kw`` changes it."""
    args = {"reth": (VA, RKEY, 4), "ackreq": True}
    args.update(kw)
    return r.packet(0x0A, args.pop("payload", b"data"), **args)


def xor_byte(f, i, v=0xFF):
    return f[:i] + bytes([f[i] ^ v]) + f[i + 1:]


STRICT_CASES = {
    # name: (builder -> frames (only the last one is bad), counter, message fragment,
    #        what happens to the bad frame without strict: "drop", "exec" or "nak")
    "bad_icrc": (lambda r: [corrupt_icrc(w4(r))], "drop_icrc", "ICRC"),
    "ip_checksum": (lambda r: [xor_byte(w4(r), 14 + 10)], "ip_drop_checksum",
                    "header checksum"),
    "udp_checksum": (lambda r: [w4(r, udp={"chksum": 0x1234})], "udp_drop_checksum",
                     "UDP checksum 0x1234"),
    "udp_length": (lambda r: [w4(r, udp={"len": 8 + 12 + 16 + 4 + 4 - 4})], "udp_drop_length",
                   "UDP length"),
    "ip_length_beyond_frame": (lambda r: [w4(r, ip={"len": 200})], "ip_drop_length",
                               "total length 200"),
    "trailing_bytes": (lambda r: [w4(r) + bytes(8)], "warn_ip_trailing", "after the IPv4"),
    "udp_port": (lambda r: [w4(r, udp={"dport": 4792})], "udp_drop_port", "port 4792"),
    "ip_options": (lambda r: [w4(r, ip={"options": [IPOption_NOP()] * 4})], "ip_drop_options",
                   "IHL 6"),
    "fragment": (lambda r: [w4(r, ip={"flags": "MF"})], "ip_drop_fragment", "fragment"),
    "wrong_dst_ip": (lambda r: [w4(r, ip={"dst": "10.0.0.3"})], "ip_drop_addr", "10.0.0.3"),
    "wrong_dst_mac": (lambda r: [w4(r, eth={"dst": "02:00:00:00:00:55"})], "eth_drop_addr",
                      "02:00:00:00:00:55"),
    "ipv6": (lambda r: [bytes(Ether(src=FPGA_MAC, dst=HOST_MAC, type=0x86DD) / Raw(bytes(60)))],
             "eth_drop_ethertype", "0x86dd"),
    "broadcast_mac": (lambda r: [w4(r, eth={"dst": "ff:ff:ff:ff:ff:ff"})], "warn_eth_bcast",
                      "broadcast"),
    "tver": (lambda r: [w4(r, version=1)], "drop_tver", "TVer 1"),
    "pkey": (lambda r: [w4(r, pkey=0x8001)], "drop_pkey", "P_Key 0x8001"),
    "dest_qp": (lambda r: [w4(r, dqpn=0x999)], "drop_dest_qp", "QP 0x999"),
    "source_ip": (lambda r: [w4(r, ip={"src": "10.0.0.66"})], "drop_src_ip", "10.0.0.66"),
    "uc_opcode": (lambda r: [r.packet(0x2A, b"data", reth=(VA, RKEY, 4), ackreq=True)],
                  "drop_transport", "not an RC opcode"),
    "response_opcode": (lambda r: [r.packet(0x11, bytes(4))], "drop_response",
                        "response opcode"),
    "too_short": (lambda r: [bytes(Ether(src=FPGA_MAC, dst=HOST_MAC)
                                   / IP(src=FPGA_IP, dst=HOST_IP, flags="DF", id=5)
                                   / UDP(sport=0xC123, dport=4791, chksum=0) / Raw(bytes(12)))],
                  "drop_short", "BTH + ICRC need 16"),
    "headers_cut": (lambda r: [r.packet(0x0A, b"", ackreq=True)], "drop_malformed",
                    "headers alone need 28"),
    "padcnt_not_multiple_of_4": (lambda r: [w4(r, payload=b"abcde", padcnt=0, reth=(VA, RKEY, 5))],
                                 "drop_malformed", "not a multiple of 4"),
    "padcnt_too_big": (lambda r: [w4(r, padcnt=3, pad=b"")], "warn_pad_nonzero",
                       "pad bytes 617461"),
    "pad_nonzero": (lambda r: [w4(r, payload=b"abc", reth=(VA, RKEY, 3), pad=b"\x07")],
                    "warn_pad_nonzero", "pad bytes 07"),
    "padcnt_on_first": (lambda r: [r.packet(0x06, bytes(253), padcnt=3, reth=(VA, RKEY, 600))],
                        "err_length", "PadCnt 3 on a WRITE_FIRST"),
    "first_not_pmtu": (lambda r: [r.packet(0x06, bytes(128), reth=(VA, RKEY, 600))],
                       "err_length", "not the PMTU (256)"),
    "reserved_bits": (lambda r: [w4(r, resv7=1)], "warn_bth_reserved", "reserved"),
    "fecn": (lambda r: [w4(r, fecn=1)], "warn_bth_reserved", "FECN 1"),
    "sport_range": (lambda r: [w4(r, udp={"sport": 0x1234})], "warn_udp_sport", "0x1234"),
    "sport_changed": (lambda r: [w4(r), w4(r, udp={"sport": 0xC124})], "warn_udp_sport",
                      "changed"),
    "no_df": (lambda r: [w4(r, ip={"flags": 0})], "warn_ip_df", "DF"),
    "ip_id_0": (lambda r: [w4(r, ip={"id": 0})], "warn_ip_id", "identification"),
    "ttl_0": (lambda r: [w4(r, ip={"ttl": 0})], "warn_ip_ttl", "TTL"),
    "no_ackreq_on_last": (lambda r: [w4(r, ackreq=False)], "warn_ackreq", "AckReq"),
    "opcode_sequence": (lambda r: [r.packet(0x07, bytes(256))], "err_opcode_seq",
                        "out of sequence"),
    "dma_length": (lambda r: [r.packet(0x06, bytes(256), reth=(VA, RKEY, 300)),
                              r.packet(0x08, bytes(48), ackreq=True)], "err_length",
                   "48 payload bytes end a WRITE with 44"),
    "unsupported": (lambda r: [r.packet(0x0C, reth=(VA, RKEY, 8), ackreq=True)],
                    "err_unsupported", "not supported"),
    "bad_cnp": (lambda r: [r.packet(0x81, bytes(16), psn=0, padcnt=0)], "warn_cnp", "CNP"),
}
NONSTRICT = {  # what the bad frame does without strict (default: silently dropped)
    "exec": {"trailing_bytes", "broadcast_mac", "reserved_bits", "fecn", "sport_range",
             "sport_changed", "no_df", "ip_id_0", "ttl_0", "no_ackreq_on_last", "pad_nonzero"},
    "nak": {"padcnt_on_first", "first_not_pmtu", "opcode_sequence", "dma_length", "unsupported",
            "padcnt_too_big"},
    "ignored": {"bad_cnp"},
}


@pytest.mark.parametrize("case", sorted(STRICT_CASES))
def test_strict_mode_raises_on_malformed_frames(case):
    build, counter, fragment = STRICT_CASES[case]
    rnic, req = make(256, strict=True)
    frames = build(req)
    feed(rnic, frames[:-1])
    with pytest.raises(AssertionError, match=re.escape(fragment)) as exc:
        rnic.receive(frames[-1])
    assert f"[{counter}]" in str(exc.value)

    rnic, req = make(256, strict=False)
    out = feed(rnic, build(req))
    assert rnic.counters[counter] == 1
    nonstrict = next((k for k, v in NONSTRICT.items() if case in v), "drop")
    n_ok = len(frames) - 1
    if nonstrict == "exec":
        assert rnic.counters["executed"] == n_ok + 1
        acked = n_ok if case == "no_ackreq_on_last" else n_ok + 1
        assert [a[2] for a in answers(out)] == [0x1F] * acked
    elif nonstrict == "nak":
        assert [a[2] for a in answers(out)] == [0x61]
        assert rnic.qp_state(QPN) == "ERR"
    else:
        assert rnic.counters["executed"] == n_ok and out == []
        assert rnic.qp_state(QPN) == "RTR"


def test_strict_mode_accepts_a_minimum_size_frame_padded_by_the_mac():
    rnic, req = make(256, strict=True)
    rnic.post_recv(QPN, 0, wr_id=1)
    (f,) = req.send(b"")
    assert len(f) == 58
    assert answers(rnic.receive(f + bytes(2))) == [(PEER_QPN, EPSN, 0x1F, 1)]
    assert rnic.cq[0].byte_len == 0


def test_valid_nonzero_udp_checksum_is_accepted():
    rnic, req = make(256, strict=True)
    f = w4(req, udp={"chksum": None})
    assert Ether(f)[UDP].chksum != 0
    assert answers(rnic.receive(f)) == [(PEER_QPN, EPSN, 0x1F, 1)]


# ---------------------------------------------------------------- options

def test_ack_coalescing():
    rnic, req = make(256, ack_coalesce=3)
    out = []
    for k in range(7):
        out += feed(rnic, req.write(VA + 8 * k, RKEY, b"%08d" % k))
    assert answers(out) == [(PEER_QPN, EPSN + 2, 0x1F, 3), (PEER_QPN, EPSN + 5, 0x1F, 6)]
    assert rnic.counters["ack_coalesced"] == 5
    # the requester times out and resends the last one: a duplicate is ACKed at once
    (dup,) = rnic.receive(req.packet(0x0A, b"%08d" % 6, reth=(VA + 48, RKEY, 8), ackreq=True,
                                     psn=EPSN + 6))
    assert answers([dup]) == [(PEER_QPN, EPSN + 6, 0x1F, 7)]
    assert rnic.read_mem(VA, 56) == b"".join(b"%08d" % k for k in range(7))


def test_vlan_tagged_frames():
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=False, vlan=100, pcp=3)
    rnic.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=EPSN, pmtu=256)
    rnic.register_mr(VA, MRLEN, RKEY)
    req = Requester(pmtu=256)
    f = w4(req)
    tagged = f[:12] + struct.pack(">HH", 0x8100, (3 << 13) | 100) + f[12:]
    assert rnic.receive(f) == [] and rnic.counters["eth_drop_vlan"] == 1
    (ack,) = rnic.receive(tagged)
    assert answers([ack], vlan=100) == [(PEER_QPN, EPSN, 0x1F, 1)]
    assert Ether(ack)[Dot1Q].prio == 3
    # a minimum frame padded to 60 bytes before the tag went in (64 bytes) is fine even in
    # strict mode; 4 more bytes of padding are not
    rnic.strict = True
    rnic.post_recv(QPN, 0, wr_id=1)
    (f,) = req.send(b"")
    tagged = f[:12] + struct.pack(">HH", 0x8100, 100) + f[12:] + bytes(2)
    assert len(tagged) == 64
    assert answers(rnic.receive(tagged), vlan=100) == [(PEER_QPN, EPSN + 1, 0x1F, 2)]
    with pytest.raises(AssertionError, match=re.escape("[warn_ip_trailing]")):
        rnic.receive(tagged + bytes(4))


def test_migreq_option():
    """ACKs carry MigReq 1 like ConnectX by default (checked by ``answers``), 0 like rxe on demand."""
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True, migreq=0)
    rnic.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=EPSN, pmtu=256)
    rnic.register_mr(VA, MRLEN, RKEY)
    assert answers(rnic.receive(w4(Requester(pmtu=256))), migreq=0) == [(PEER_QPN, EPSN, 0x1F, 1)]


def test_other_udp_ports_are_collected_and_udp_frames_built():
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, strict=True, udp_ports=(0x8765 + 1,))
    dg = Ether(src=FPGA_MAC, dst=HOST_MAC) / IP(src=FPGA_IP, dst=HOST_IP, flags="DF", id=7) \
        / UDP(sport=0x8765, dport=0x8766) / Raw(bytes(range(64)))
    assert rnic.receive(bytes(dg)) == []
    assert rnic.udp_rx == [(FPGA_IP, 0x8765, 0x8766, bytes(range(64)))]
    with pytest.raises(ValueError):
        rnic.udp_frame(FPGA_IP, 0x8766, 17185, b"x")
    rnic.receive(bytes(Ether(src=FPGA_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(
        op=1, hwsrc=FPGA_MAC, psrc=FPGA_IP, pdst=HOST_IP)))
    p = Ether(rnic.udp_frame(FPGA_IP, 0x8766, 17185, bytes(64)))
    assert (p.dst, p[IP].dst, p[UDP].dport, bytes(p[UDP].payload)) == (FPGA_MAC, FPGA_IP, 17185,
                                                                        bytes(64))
    assert checksum(bytes(p[IP])[:20]) == 0


def test_cnp_is_counted():
    rnic, req = make(256)
    f = req.packet(0x81, bytes(16), psn=0, padcnt=0, becn=1)
    assert rnic.receive(f) == []
    assert rnic.counters["cnp_rx"] == 1 and rnic.qps[QPN].cnp_rx == 1
    assert rnic.expected_psn(QPN) == EPSN


def test_model_is_deterministic():
    def run():
        rnic, req = make(512, strict=False)
        rnic.post_recv(QPN, 5000, wr_id=1)
        frames = req.write(VA, RKEY, data_of(3000, 1)) + req.send(data_of(2000, 2), imm=4)
        frames = frames[:2] + frames[3:] + frames[2:]          # a loss and a go-back-N
        return feed(rnic, frames), rnic.counters, rnic.cq
    assert run() == run()


def test_deregistering_the_region_during_a_write():
    rnic, req = make(256, strict=False)
    frames = req.write(VA, RKEY, data_of(600, 1))
    rnic.receive(frames[0])
    rnic.deregister_mr(RKEY)
    assert answers(rnic.receive(frames[1])) == [(PEER_QPN, EPSN + 1, 0x62, 0)]
    assert rnic.qp_state(QPN) == "ERR"


def test_injected_ack_frames():
    rnic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    rnic.create_qp(QPN, peer_qpn=PEER_QPN, peer_ip=FPGA_IP, epsn=EPSN, pmtu=256)
    with pytest.raises(ValueError):
        rnic.ack_frame(QPN, 0x63, 5)
    rnic.qps[QPN].peer_mac = FPGA_MAC
    f = rnic.ack_frame(QPN, 0x63, 0xFFFFFF, msn=9)
    assert answers([f]) == [(PEER_QPN, 0xFFFFFF, 0x63, 9)]
    assert rnic.counters["tx_frames"] == 0 and rnic.expected_psn(QPN) == EPSN


@pytest.mark.parametrize("vlan", [None, 42])
def test_acks_are_the_bytes_scapy_builds(vlan):
    """The NIC model's ACK frames (a scapy-built template with the varying fields set through the
    header table, checksums and ICRC computed again) equal scapy's own build of the same ACK,
    whatever the PSN, syndrome, MSN, IP id, TOS and QP."""
    rng = random.Random(vlan or 7)
    nic = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL, vlan=vlan, pcp=3)
    for k in range(40):
        qpn = 0x40 + k % 3
        if qpn not in nic.qps:
            nic.create_qp(qpn, peer_qpn=0x100 + k, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                          pmtu=1024, dscp=rng.randrange(64), ecn=rng.randrange(4),
                          pkey=rng.choice([0xFFFF, 0x8001]))
        qp = nic.qps[qpn]
        syndrome, psn, msn = rng.randrange(256), rng.getrandbits(24), rng.getrandbits(24)
        got = nic.ack_frame(qpn, syndrome, psn, msn=msn)
        l2 = Ether(dst=FPGA_MAC, src=HOST_MAC)
        if vlan is not None:
            l2 = l2 / Dot1Q(vlan=vlan, prio=3, dei=0)
        want = bytes(l2 / IP(src=HOST_IP, dst=FPGA_IP, ttl=nic.ttl, flags="DF", tos=qp.tos,
                             id=nic._ip_id, proto=17)
                     / UDP(sport=qp.udp_sport, dport=4791, chksum=0)
                     / BTH(opcode=0x11, migreq=nic.migreq, pkey=qp.pkey, dqpn=qp.peer_qpn, psn=psn)
                     / AETH(syndrome=syndrome, msn=msn)).ljust(60, b"\0")
        assert got == want, f"ACK {k} differs from scapy's"


# ---------------------------------------------------------------- a ConnectX's behaviour

def cx(**changes):
    """A ConnectX's behaviour with no delays unless asked for (each test sets what it checks)."""
    return Behaviour(**{"ack_timer_ns": 0.0, "response_ns": (0.0, 0.0), "ack_every": None,
                        **changes})


def test_default_behaviour_is_a_connectx():
    b = Rnic(HOST_MAC, HOST_IP).behaviour
    assert (b.credits, b.min_frame, b.mtu, b.max_msg) == ("rq", 60, 4200, 1 << 31)
    assert b.ack_every and b.ack_timer_ns > 0 and 0 < b.response_ns[0] <= b.response_ns[1]
    assert (b.dup_ack, b.ghost_ack, b.runt, b.oversize) == (0, 0, 0, 0)
    for bad in (dict(credits="some"), dict(ack_every=0), dict(response_ns=(5, 1)),
                dict(min_frame=61), dict(mtu=10), dict(ghost_ack=1.5), dict(ack_timer_ns=-1)):
        with pytest.raises(ValueError):
            Behaviour(**bad)


@pytest.mark.parametrize("wqes,code", [(0, 0), (1, 1), (4, 4), (5, 4), (6, 5), (7, 5), (8, 6),
                                       (47, 10), (48, 11), (1000, 19), (1024, 20),
                                       (32767, 29), (32768, 30), (10 ** 6, 30)])
def test_credit_codes_of_the_receive_queue(wqes, code):
    """IBTA 9.7.5.1.2: code n advertises at least 0, 1, 2, 3, 4, 6, 8, 12, ... 32768 WQEs."""
    rnic, req = make(256, behaviour=cx())
    for k in range(min(wqes, 2000)):
        rnic.post_recv(QPN, 64, wr_id=k)
    if wqes > 2000:
        rnic.qps[QPN].rq.extend([rnic.qps[QPN].rq[0]] * (wqes - 2000))
    assert answers(rnic.receive(wr4(req))) == [(PEER_QPN, EPSN, code, 1)]


def test_credit_code_modes():
    rnic, req = make(256, behaviour=cx(credits="none"))
    rnic.post_recv(QPN, 64, wr_id=1)
    assert answers(rnic.receive(wr4(req))) == [(PEER_QPN, EPSN, 0x1F, 1)]
    rnic, req = make(256, behaviour=cx(credits="random", seed=3))
    codes = {a[2] for k in range(400) for a in answers(rnic.receive(wr4(req)))}
    assert codes == set(range(0x20))


def test_acks_coalesced_by_count_carry_the_latest_psn():
    """No AckReq inside a long WRITE: an ACK after every 4 packets all the same, then the
    message's last packet is ACKed at once (no timer without the time)."""
    rnic, req = make(256, behaviour=cx(ack_every=4))
    frames = req.write(VA, RKEY, data_of(256 * 10, 1))
    out = [(k, a) for k, f in enumerate(frames) for a in answers(rnic.receive(f))]
    assert out == [(3, (PEER_QPN, EPSN + 3, 0, 0)), (7, (PEER_QPN, EPSN + 7, 0, 0)),
                   (9, (PEER_QPN, EPSN + 9, 0, 1))]
    assert rnic.read_mem(VA, 2560) == data_of(256 * 10, 1)


def test_acks_coalesced_by_time():
    """With the time: AckReq packets wait for the ACK timer, which sends one ACK of the latest
    PSN; nothing is sent before."""
    rnic, req = make(256, behaviour=cx(ack_timer_ns=1000.0))
    for k in range(5):
        assert rnic.receive(wr4(req, off=8 * k), now=100 * k) == []
    assert rnic.next_due() == 1000 and rnic.pending == 1
    assert rnic.due(999) == []
    assert answers(rnic.due(1000)) == [(PEER_QPN, EPSN + 4, 0, 5)]
    assert rnic.next_due() is None and rnic.pending == 0
    assert rnic.counters["ack_tx"] == 1 and rnic.counters["ack_coalesced"] == 5
    with pytest.raises(ValueError, match="before"):
        rnic.due(999)


def test_answers_leave_after_a_delay_in_the_range_and_in_order():
    rnic, req = make(256, behaviour=cx(response_ns=(500.0, 800.0), seed=9))
    rng = random.Random(1)
    t, times, sent = 0.0, [], []

    def drain(until):
        while rnic.next_due() is not None and rnic.next_due() <= until:
            when = rnic.next_due()
            sent.extend((when, a) for a in answers(rnic.due(when)))
    for k in range(50):
        t += rng.uniform(0, 400)
        drain(t)
        assert rnic.receive(wr4(req, off=8 * k), now=t) == []
        times.append(t)
    drain(float("inf"))
    assert [a[1] for _, a in sent] == [EPSN + k for k in range(50)]
    delays = [when - times[k] for k, (when, _) in enumerate(sent)]
    # in order: an answer may wait for the one before it, never leave before 500 ns
    assert min(delays) >= 500 and all(b >= a for (a, _), (b, _) in zip(sent, sent[1:]))
    assert sum(d <= 800 for d in delays) > 10


def test_a_nak_replaces_the_pending_ack():
    rnic, req = make(256, behaviour=cx(ack_timer_ns=1000.0))
    assert rnic.receive(wr4(req), now=0) == []
    req.psn += 1                                                # one packet lost
    assert answers(rnic.receive(wr4(req, off=8), now=10)) == [(PEER_QPN, EPSN + 1, 0x60, 1)]
    assert rnic.next_due() is None


def wr4(req, *, off=0, **kw):
    """A 4-byte RDMA WRITE_ONLY with AckReq into the region."""
    return req.packet(0x0A, b"abcd", reth=(VA + off, RKEY, 4), ackreq=True, **kw)


def test_runts_are_dropped_and_counted():
    rnic, req = make(256, behaviour=cx(), strict=False)
    rnic.post_recv(QPN, 64, wr_id=1)
    (f,) = req.send(b"")
    assert len(f) == 58
    assert rnic.receive(f) == [] and rnic.counters["eth_drop_runt"] == 1
    assert rnic.expected_psn(QPN) == EPSN
    assert answers(rnic.receive(f + bytes(2))) == [(PEER_QPN, EPSN, 0, 1)]
    rnic.strict = True
    with pytest.raises(AssertionError, match=re.escape("[eth_drop_runt]")):
        rnic.receive(f[:59])


def test_frames_over_the_port_mtu_are_dropped_and_counted():
    rnic, req = make(4096, behaviour=cx(), strict=False)
    data = data_of(4096 * 2, 2)
    frames = req.write(VA, RKEY, data)
    assert len(frames[0]) - 14 == 20 + 8 + 12 + 16 + 4096 + 4 <= 4200
    feed(rnic, frames)
    assert rnic.read_mem(VA, len(data)) == data and rnic.counters["eth_drop_mtu"] == 0
    small, req = make(4096, behaviour=cx(mtu=1500), strict=False)
    assert feed(small, req.write(VA, RKEY, data)) == []
    assert small.counters["eth_drop_mtu"] == 2 and small.expected_psn(QPN) == EPSN
    small.strict = True
    with pytest.raises(AssertionError, match=re.escape("[eth_drop_mtu]")):
        small.receive(req.write(VA, RKEY, data_of(1500 - 20 - 8 - 12 - 16 - 4 + 1, 3))[0])


def test_reth_dma_length_over_2_31_is_an_invalid_request():
    rnic, req = make(256, behaviour=cx(), strict=False)
    # 2^31 itself passes the size check (then fails the region's bounds)
    f = req.packet(0x06, data_of(256), reth=(VA, RKEY, 1 << 31))
    assert answers(rnic.receive(f)) == [(PEER_QPN, EPSN, 0x62, 0)]
    rnic, req = make(256, behaviour=cx(), strict=False)
    f = req.packet(0x06, data_of(256), reth=(VA, RKEY, (1 << 31) + 1))
    assert answers(rnic.receive(f)) == [(PEER_QPN, EPSN, 0x61, 0)]
    assert rnic.counters["err_msg_size"] == 1 and rnic.qp_state(QPN) == "ERR"


def test_ghost_and_duplicate_acks():
    rnic, req = make(256, behaviour=cx(ghost_ack=1.0, dup_ack=1.0, seed=4))
    for k in range(20):
        acks = answers(rnic.receive(wr4(req, off=8 * k)))
        want = (PEER_QPN, EPSN + k, 0, k + 1)
        assert len(acks) == 3 and acks.count(want) == 2 and acks[-1] == want
        (ghost,) = [a for a in acks if a != want]
        assert (1 << 22) <= (ghost[1] - (EPSN + k)) % (1 << 24) < (1 << 23)
    c = rnic.counters
    assert (c["ack_tx"], c["ack_ghost_tx"], c["ack_dup_tx"], c["tx_frames"]) == (20, 20, 20, 60)
    # with the time, the copy leaves later than the original
    rnic, req = make(256, behaviour=cx(dup_ack=1.0, response_ns=(100.0, 200.0)))
    rnic.receive(wr4(req), now=0)
    first = rnic.next_due()
    assert answers(rnic.due(first)) == [(PEER_QPN, EPSN, 0, 1)]
    assert rnic.next_due() > first
    assert answers(rnic.due(rnic.next_due())) == [(PEER_QPN, EPSN, 0, 1)]


def test_runt_and_oversize_frames_towards_the_requester():
    rnic, req = make(256, behaviour=cx(runt=1.0, oversize=1.0, oversize_len=(4161, 9000),
                                       seed=5))
    lengths = set()
    for k in range(30):
        out = rnic.receive(wr4(req, off=8 * k))
        runts = [f for f in out if len(f) < 60]
        big = [f for f in out if len(f) > 100]
        acks = [f for f in out if 60 <= len(f) <= 100]
        assert len(runts) == len(big) == len(acks) == 1
        assert acks[0].startswith(runts[0])
        lengths.add(len(runts[0]))
        p = Ether(big[0])
        assert 4161 <= p[IP].len <= 9000 and len(big[0]) == 14 + p[IP].len
        assert checksum(bytes(p[IP])[:20]) == 0 and p[UDP].len == p[IP].len - 20
        assert (p[BTH].opcode, p[BTH].psn) == (0x11, EPSN + k)
        q = p.copy()
        q[BTH].icrc = None
        assert bytes(q) == big[0], "ICRC of the oversize frame differs from scapy's"
    assert min(lengths) < 14 and max(lengths) >= 34
    assert rnic.counters["runt_tx"] == rnic.counters["oversize_tx"] == 30
