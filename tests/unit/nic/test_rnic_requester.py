"""The requester side of the host RNIC model (:mod:`rocegen.sim.models.rnic.requester`): one
model (A, the requester host) WRITEs and SENDs into another (B, the responder side), back to
back through two faulty links (:mod:`rocegen.sim.models.fabric.link`), with an event loop that paces
A's frames at 100 Gb/s. Expectations come from the data the tests choose; A's frames are also
dissected with scapy, independently of the model."""

import math
import random
import struct

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import checksum

from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import IDEAL, Behaviour, Rnic, WcOpcode, WcStatus
from rocegen.wire.roce import RNR_DELAY_US
from rocegen.wire.verbs import SEND_VERBS

A_MAC, A_IP = "02:00:00:00:00:0a", "10.0.0.10"
B_MAC, B_IP = "02:00:00:00:00:0b", "10.0.0.11"
QA, QB = 0x21, 0x42                     # A's QP, B's QP
QA2, QB2 = 0x22, 0x43
PSN0 = 0x12345
VA, MRLEN, RKEY = 0x7F00_0000_0000, 512 * 1024, 0xBEEF
FILL = 0xA5
OPS = SEND_VERBS
ONE_PACKET_OPS = {"WRITE": 0x0A, "WRITE_IMM": 0x0B, "SEND": 0x04, "SEND_IMM": 0x05}
FIRST_MIDDLE_LAST = {"WRITE": (0x06, 0x07, 0x08), "WRITE_IMM": (0x06, 0x07, 0x09),
                     "SEND": (0x00, 0x01, 0x02), "SEND_IMM": (0x00, 0x01, 0x03)}


def sizes(pmtu):
    return [0, 1, pmtu - 1, pmtu, pmtu + 1, 3 * pmtu + 5, 64 * 1024]


def data_of(n, seed):
    return random.Random(seed * 1_000_003 + n).randbytes(n)


def pair(pmtu, *, sq_psn=PSN0, a_kw=None, b_kw=None, behaviour=None, strict=True, qps=1,
         a_behaviour=IDEAL):
    """A (requester) and B (responder, ConnectX-like by default) with ``qps`` connected QPs."""
    a = Rnic(A_MAC, A_IP, strict=strict, behaviour=a_behaviour)
    b = Rnic(B_MAC, B_IP, strict=strict, behaviour=behaviour or Behaviour(seed=7))
    for qa, qb in [(QA, QB), (QA2, QB2)][:qps]:
        a.create_qp(qa, peer_qpn=qb, peer_ip=B_IP, peer_mac=B_MAC, epsn=0, sq_psn=sq_psn,
                    pmtu=pmtu, **(a_kw or {}))
        b.create_qp(qb, peer_qpn=qa, peer_ip=A_IP, peer_mac=A_MAC, epsn=sq_psn, pmtu=pmtu,
                    **(b_kw or {}))
    b.register_mr(VA, MRLEN, RKEY, fill=FILL)
    return a, b


class Bench:
    """A -> link ``ab`` -> B, B -> link ``ba`` -> A; time in ns (= link cycles). A's frames
    leave one at a time, each when the previous one is on the line at ``gbps``."""

    def __init__(self, a, b, *, gbps=100, **faults):
        self.a, self.b = a, b
        self.ab = Link(seed=faults.pop("seed", 1), name="A->B", **faults)
        self.ba = Link(seed=self.ab.seed + 1000, name="B->A", **faults)
        self.gbps = gbps
        self.t = 0
        self.line_free = 0
        self.sent = []                  # (time, frame) of every frame of A's requester
        self.events = []                # (time, callable) run once when their time comes

    def _deliver(self, link, nic, back):
        for d in link.deliveries(self.t):
            strict = nic.strict
            nic.strict = strict and not d.corrupted     # a real NIC drops it on its ICRC
            try:
                for f in nic.receive(d.frame, self.t):
                    back.send(f, self.t)
            finally:
                nic.strict = strict

    def step(self):
        self.events.sort(key=lambda e: e[0])
        while self.events and self.events[0][0] <= self.t:
            self.events.pop(0)[1]()
        self._deliver(self.ab, self.b, self.ba)
        for f in self.b.due(self.t):
            self.ba.send(f, self.t)
        self._deliver(self.ba, self.a, self.ab)
        for f in self.a.due(self.t):
            self.ab.send(f, self.t)
        while self.line_free <= self.t:
            out = self.a.next_frames(self.t, 1)
            if not out:
                break
            self.ab.send(out[0], self.t)
            self.sent.append((self.t, out[0]))
            self.line_free = self.t + math.ceil((len(out[0]) + 24) * 8 / self.gbps)

    def busy(self):
        return (self.a.send_outstanding() or self.ab.in_flight or self.ba.in_flight
                or self.b.pending or self.a.pending or self.events)

    def run(self, *, limit_ns=10**10, max_steps=200_000):
        for _ in range(max_steps):
            self.step()
            if not self.busy():
                return
            times = [self.ab.next_due(), self.ba.next_due(), self.a.next_due(), self.b.next_due()]
            times += [t for t, _ in self.events]
            if self.a.tx_pending():
                times.append(max(self.line_free, self.t + 1))
            nxt = min((t for t in times if t is not None), default=None)
            assert nxt is not None, "nothing left to happen but work is outstanding"
            self.t = max(self.t + 1, math.ceil(nxt))
            assert self.t < limit_ns, f"still busy at {self.t} ns"
        raise AssertionError("too many steps")


def post_messages(a, b, msgs, *, qa=QA, qb=QB):
    """Post ``msgs`` ((op, data, imm) ...) on A's QP ``qa``, the receive WQEs they need on B's
    ``qb``; returns the expected B memory writes, B receive completions and A send
    completions."""
    writes, recvs, sends = [], [], []
    off = 0 if qa == QA else MRLEN // 2
    for i, (op, data, imm) in enumerate(msgs):
        wr_id = 1000 * qa + i
        if op.startswith("WRITE"):
            a.post_send(qa, op, data=data, remote_addr=VA + off, rkey=RKEY, imm=imm, wr_id=wr_id)
            writes.append((off, data))
            off += len(data) + 3
            sends.append((wr_id, WcOpcode.RDMA_WRITE, len(data), None, WcStatus.SUCCESS, qa, None))
            if imm is not None:
                b.post_recv(qb, 16, wr_id=wr_id)
                recvs.append((wr_id, WcOpcode.RECV_RDMA_WITH_IMM, len(data), imm,
                              WcStatus.SUCCESS, qb, None))
        else:
            a.post_send(qa, op, data=data, imm=imm, wr_id=wr_id)
            b.post_recv(qb, len(data) + 8, wr_id=wr_id)
            sends.append((wr_id, WcOpcode.SEND, len(data), None, WcStatus.SUCCESS, qa, None))
            recvs.append((wr_id, WcOpcode.RECV, len(data), imm, WcStatus.SUCCESS, qb, data))
    return writes, recvs, sends


def expected_memory(writes):
    mem = bytearray([FILL]) * MRLEN
    for off, data in writes:
        mem[off:off + len(data)] = data
    return bytes(mem)


def imm_for(op, i):
    return 0xC0DE0000 + i if op.endswith("_IMM") else None


# ---------------------------------------------------------------- every opcode and size, clean

@pytest.mark.parametrize("pmtu", [256, 4096])
@pytest.mark.parametrize("op", OPS)
def test_every_size_arrives_exactly(pmtu, op):
    a, b = pair(pmtu)
    msgs = [(op, data_of(n, k), imm_for(op, k)) for k, n in enumerate(sizes(pmtu))]
    writes, recvs, sends = post_messages(a, b, msgs)
    bench = Bench(a, b)
    bench.run()
    assert b.read_mem(VA, MRLEN) == expected_memory(writes)
    assert b.poll_cq() == recvs
    assert a.poll_send_cq() == sends
    npkts = sum(max(1, -(-n // pmtu)) for n in sizes(pmtu))
    assert a.counters["req_tx"] == npkts and a.counters["req_retx"] == 0
    assert b.expected_psn(QB) == (PSN0 + npkts) & 0xFFFFFF
    assert b.counters["executed"] == npkts and b.counters["duplicate"] == 0
    assert a.counters["req_ack_rx"] > 0 and a.counters["req_timeouts"] == 0
    assert a.qp_state(QA) == b.qp_state(QB) == "RTR"


def test_frames_dissected_by_scapy():
    """Every header field of A's frames, checked with scapy and struct, not with the model."""
    pmtu = 256
    a, b = pair(pmtu, a_kw={"ack_req_every": 3, "dscp": 26, "ecn": 2})
    msgs = [("WRITE", data_of(3 * pmtu + 5, 1), None), ("WRITE_IMM", data_of(7, 2), 0xABCD0001),
            ("SEND", data_of(0, 3), None), ("SEND_IMM", data_of(2 * pmtu + 2, 4), 0x01020304),
            ("WRITE", b"", None), ("SEND", data_of(8 * pmtu, 5), None)]
    post_messages(a, b, msgs)
    frames = a.next_frames()
    qp = a.qps[QA]
    psn = PSN0
    k = 0
    ip_ids = set()
    for mi, (op, data, imm) in enumerate(msgs):
        chunks = [data[o:o + pmtu] for o in range(0, len(data), pmtu)] or [b""]
        va = VA + sum(len(d) + 3 for o, d, _ in msgs[:mi] if o.startswith("WRITE"))
        for i, chunk in enumerate(chunks):
            f = frames[k]
            k += 1
            first, last = i == 0, i == len(chunks) - 1
            ip_len = int.from_bytes(f[16:18], "big")
            assert len(f) == max(60, 14 + ip_len) and not any(f[14 + ip_len:])
            p = Ether(f[:14 + ip_len])           # (without the MAC's padding to 60 bytes)
            assert (p.src, p.dst, p.type) == (A_MAC, B_MAC, 0x0800)
            ip = p[IP]
            assert (ip.src, ip.dst, ip.ttl, ip.proto, ip.ihl, ip.tos) == \
                (A_IP, B_IP, 64, 17, 5, 26 << 2 | 2)
            assert ip.flags.DF and not ip.flags.MF and ip.frag == 0 and ip.id != 0
            assert checksum(bytes(ip)[:20]) == 0
            ip_ids.add(ip.id)
            u = p[UDP]
            assert (u.sport, u.dport, u.chksum) == (qp.udp_sport, 4791, 0)
            bth = p[BTH]
            if first and last:
                opcode = ONE_PACKET_OPS[op]
            else:
                opcode = FIRST_MIDDLE_LAST[op][0 if first else 2 if last else 1]
            assert bth.opcode == opcode, (mi, i)
            assert (bth.dqpn, bth.psn, bth.pkey, bth.version, bth.migreq) == \
                (QB, psn & 0xFFFFFF, 0xFFFF, 0, 1)
            assert (bth.fecn, bth.becn, bth.resv6, bth.resv7) == (0, 0, 0, 0)
            assert bth.ackreq == int(last or (i + 1) % 3 == 0), (mi, i)
            assert bth.solicited == int(last and op != "WRITE")
            pad = (-len(chunk)) & 3
            assert bth.padcount == pad
            body = bytes(bth.payload)
            if first and op.startswith("WRITE"):
                assert struct.unpack(">QII", body[:16]) == (va, RKEY, len(data))
                body = body[16:]
            if last and imm is not None:
                assert struct.unpack(">I", body[:4]) == (imm,)
                body = body[4:]
            assert body == chunk + bytes(pad)
            assert ip.len == 20 + 8 + 12 + len(bytes(bth.payload)) + 4
            q = p.copy()
            q[BTH].icrc = None
            assert bytes(q) == f[:14 + ip_len], "ICRC differs from scapy's"
            psn += 1
    assert k == len(frames) and len(ip_ids) == len(frames)
    assert a.counters["req_tx"] == len(frames)
    # B takes them all (strict) and A completes everything on B's ACKs
    for f in frames:
        for ack in b.receive(f):
            assert a.receive(ack) == []
    assert [c.status for c in a.poll_send_cq()] == [WcStatus.SUCCESS] * len(msgs)


# ---------------------------------------------------------------- go-back-N, by hand

def test_go_back_n_resends_from_the_nak_psn_with_the_right_opcodes():
    pmtu = 256
    a, b = pair(pmtu, behaviour=IDEAL, a_kw={"timeout": 0})
    data = data_of(5 * pmtu, 9)
    a.post_send(QA, "WRITE", data=data, remote_addr=VA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "SEND_IMM", data=data_of(2 * pmtu, 10), imm=5, wr_id=2)
    b.post_recv(QB, 4096, wr_id=2)
    first = a.next_frames()
    assert [Ether(f)[BTH].opcode for f in first] == [6, 7, 7, 7, 8, 0, 3]
    assert a.next_frames() == []
    # packet 2 is lost: B NAKs PSN0 + 2 after packet 3
    assert b.receive(first[0]) == b.receive(first[1]) == []
    (nak,) = b.receive(first[3])
    assert a.receive(nak) == []
    assert a.counters["req_nak_seq_rx"] == 1 and a.send_outstanding() == 2
    # the same NAK again before the resend (a duplicate) is ignored
    assert a.receive(nak) == []
    assert a.counters["req_ack_stale"] == 1 and a.counters["req_nak_seq_rx"] == 2
    again = a.next_frames()
    assert [(Ether(f)[BTH].opcode, Ether(f)[BTH].psn) for f in again] == \
        [(7, PSN0 + 2), (7, PSN0 + 3), (8, PSN0 + 4), (0, PSN0 + 5), (3, PSN0 + 6)]
    assert a.counters["req_retx"] == 5 and a.next_frames() == []
    # the SEND is lost this time: NAK of its FIRST packet, resent as FIRST
    acks = []
    for f in again[:3] + again[4:]:
        acks += b.receive(f)
    for f in acks:
        a.receive(f)
    assert [c.wr_id for c in a.poll_send_cq()] == [1]
    (f5, f6) = a.next_frames()
    assert [(Ether(f)[BTH].opcode, Ether(f)[BTH].psn) for f in (f5, f6)] == \
        [(0, PSN0 + 5), (3, PSN0 + 6)]
    assert f5[14 + 20 + 8 + 12:][:pmtu] == again[3][14 + 20 + 8 + 12:][:pmtu]
    for f in (f5, f6):
        for ack in b.receive(f):
            a.receive(ack)
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == [(2, WcStatus.SUCCESS)]
    assert b.read_mem(VA, len(data)) == data


def test_a_resend_from_a_write_first_carries_the_reth_again():
    pmtu = 256
    a, b = pair(pmtu, behaviour=IDEAL, a_kw={"timeout": 3})
    data = data_of(2 * pmtu + 1, 11)
    a.post_send(QA, "WRITE", data=data, remote_addr=VA + 64, rkey=RKEY, wr_id=1)
    frames = a.next_frames(0)
    assert a.next_due() == 4096 << 3
    assert a.next_frames(a.next_due() - 1) == []
    again = a.next_frames(a.next_due())
    assert a.counters["req_timeouts"] == 1
    assert [Ether(f)[BTH].opcode for f in again] == [6, 7, 8]
    p = Ether(again[0])
    assert struct.unpack(">QII", bytes(p[BTH].payload)[:16]) == (VA + 64, RKEY, len(data))
    assert [Ether(f)[BTH].psn for f in again] == [Ether(f)[BTH].psn for f in frames]
    assert [f[42:-4] for f in again] == [f[42:-4] for f in frames]   # BTH..pad: the same
    for f in again:
        for ack in b.receive(f, 40000):
            a.receive(ack, 40000)
    assert a.poll_send_cq()[0].status == WcStatus.SUCCESS and a.next_due() is None


def test_stale_and_ghost_acks_are_counted_and_ignored():
    a, b = pair(256, behaviour=IDEAL, a_kw={"timeout": 0}, strict=False)
    a.post_send(QA, "WRITE", data=data_of(600, 1), remote_addr=VA, rkey=RKEY, wr_id=1)
    frames = a.next_frames()
    stale = b.ack_frame(QB, 0x1F, PSN0 - 1)
    ghost = b.ack_frame(QB, 0x1F, PSN0 + 3)
    assert a.receive(stale) == [] and a.receive(ghost) == []
    assert (a.counters["req_ack_stale"], a.counters["req_ack_ghost"]) == (1, 1)
    assert a.send_outstanding() == 1
    a.receive(b.ack_frame(QB, 0x1F, PSN0 + 2))
    assert a.poll_send_cq()[0].status == WcStatus.SUCCESS
    a.receive(b.ack_frame(QB, 0x1F, PSN0 + 2))
    assert a.counters["req_ack_stale"] == 2
    assert len(frames) == 3
    # in strict mode an ACK of a PSN never sent fails the bench
    a.strict = True
    with pytest.raises(AssertionError, match="never sent"):
        a.receive(b.ack_frame(QB, 0x1F, PSN0 + 100))


def test_an_ack_to_a_qp_that_sent_nothing_is_still_dropped_as_a_response():
    a, b = pair(256, behaviour=IDEAL, strict=False)
    assert a.receive(b.ack_frame(QB, 0x1F, PSN0)) == []
    assert a.counters["drop_response"] == 1 and a.counters["req_ack_rx"] == 0


# ---------------------------------------------------------------- faults on the links

@pytest.mark.parametrize("seed", [1, 2, 3])
def test_loss_duplication_reordering_everything_arrives_once(seed):
    pmtu = 256 if seed != 2 else 1024
    rng = random.Random(seed)
    a, b = pair(pmtu, qps=2, a_kw={"timeout": 6})
    expected = []
    for qa, qb in ((QA, QB), (QA2, QB2)):
        msgs = []
        for k in range(24):
            op = rng.choice(OPS)
            n = rng.choice([0, 1, pmtu - 1, pmtu, pmtu + 1, 3 * pmtu + 5, rng.randrange(9000)])
            msgs.append((op, data_of(n, seed * 100 + k + qa), imm_for(op, k)))
        expected.append(post_messages(a, b, msgs, qa=qa, qb=qb))
    bench = Bench(a, b, loss=(0.01, 0.05, 0.03)[seed - 1], dup=0.02, reorder=0.03,
                  corrupt=0.005 if seed == 3 else 0.0, seed=seed)
    a.strict = b.strict = True
    bench.run()
    writes = expected[0][0] + expected[1][0]
    assert b.read_mem(VA, MRLEN) == expected_memory(writes)
    cq, scq = b.poll_cq(), a.poll_send_cq()
    for qa, qb, (_, recvs, sends) in ((QA, QB, expected[0]), (QA2, QB2, expected[1])):
        assert [c for c in cq if c.qpn == qb] == recvs
        assert [c for c in scq if c.qpn == qa] == sends
    assert len(cq) == len(expected[0][1]) + len(expected[1][1])
    assert b.counters["write_msgs"] + b.counters["send_msgs"] == 48
    assert bench.ab.counters["dropped"] > 0 and bench.ab.counters["duplicated"] > 0
    assert a.counters["req_retx"] > 0
    assert a.counters["req_nak_seq_rx"] + a.counters["req_timeouts"] > 0
    assert a.counters["req_ack_ghost"] == 0 and a.counters["req_retry_exc"] == 0
    # both QPs were interleaved on the wire
    qpns = [Ether(f)[BTH].dqpn for _, f in bench.sent[:40]]
    assert QB in qpns and QB2 in qpns


def test_the_responder_models_ack_faults_are_survived():
    """B's injected faults (Behaviour): duplicated ACKs, ACKs of PSNs never sent, runts and
    oversize frames reach A's requester, which counts and ignores them."""
    pmtu = 1024
    behaviour = Behaviour(seed=3, dup_ack=0.3, ghost_ack=0.2, runt=0.2, oversize=0.2)
    a, b = pair(pmtu, behaviour=behaviour, a_kw={"ack_req_every": 2}, a_behaviour=Behaviour())
    msgs = [(op, data_of(n, k), imm_for(op, k)) for k, (op, n) in
            enumerate((op, n) for n in (1, 5000, 20000) for op in OPS)]
    writes, recvs, sends = post_messages(a, b, msgs)
    a.strict = False
    Bench(a, b).run()
    assert b.read_mem(VA, MRLEN) == expected_memory(writes)
    assert b.poll_cq() == recvs and a.poll_send_cq() == sends
    assert a.counters["req_ack_ghost"] == b.counters["ack_ghost_tx"] > 0
    assert a.counters["req_ack_stale"] >= b.counters["ack_dup_tx"] > 0
    assert a.counters["eth_drop_runt"] == b.counters["runt_tx"] > 0
    assert a.counters["eth_drop_mtu"] == b.counters["oversize_tx"] > 0


def test_lost_acks_are_recovered_by_the_timeout():
    a, b = pair(512, a_kw={"timeout": 4})
    writes, _, sends = post_messages(a, b, [("WRITE", data_of(2000, 1), None)])
    bench = Bench(a, b)
    bench.ba.drop_next(100)             # every ACK lost until the first timeout...
    bench.events.append((60_000, bench.ba.clear_scripts))
    bench.run()
    assert a.poll_send_cq() == sends
    assert a.counters["req_timeouts"] >= 1 and a.counters["req_retx"] == 4
    assert b.counters["duplicate"] == 4
    t_first = [t for t, f in bench.sent if Ether(f)[BTH].psn == PSN0]
    assert len(t_first) >= 2 and t_first[1] - t_first[0] >= 4096 << 4


def test_window_limits_the_packets_outstanding():
    a, b = pair(256, a_kw={"window": 8, "timeout": 0}, behaviour=IDEAL)
    a.post_send(QA, "WRITE", data=data_of(20 * 256, 1), remote_addr=VA, rkey=RKEY)
    frames = a.next_frames()
    assert len(frames) == 8 and a.tx_pending() == 0
    for f in frames[:3]:
        for ack in b.receive(f):
            a.receive(ack)
    assert a.tx_pending() == 0                  # no ACK requested yet (every 64)
    a.receive(b.ack_frame(QB, 0x1F, PSN0 + 2))
    assert a.tx_pending() == 3 and len(a.next_frames(budget=2)) == 2 and a.tx_pending() == 1


# ---------------------------------------------------------------- RNR

def test_rnr_wait_then_resend_and_complete():
    a, b = pair(256, b_kw={"min_rnr_timer": 3})         # 30 us
    data = data_of(700, 5)
    a.post_send(QA, "SEND", data=data, wr_id=9)
    bench = Bench(a, b)
    bench.events.append((100_000, lambda: b.post_recv(QB, 1024, wr_id=77)))
    bench.run()
    assert a.poll_send_cq() == [(9, WcOpcode.SEND, 700, None, WcStatus.SUCCESS, QA, None)]
    assert b.poll_cq() == [(77, WcOpcode.RECV, 700, None, WcStatus.SUCCESS, QB, data)]
    assert a.counters["req_rnr_rx"] >= 3 and b.counters["rnr_nak_tx"] == a.counters["req_rnr_rx"]
    starts = [t for t, f in bench.sent if Ether(f)[BTH].psn == PSN0]
    assert len(starts) == a.counters["req_rnr_rx"] + 1
    assert all(t1 - t0 >= RNR_DELAY_US[3] * 1000 for t0, t1 in zip(starts, starts[1:]))
    assert starts[-1] >= 100_000
    assert a.counters["req_timeouts"] == 0


def test_rnr_retries_exhausted_fail_the_qp():
    a, b = pair(256, a_kw={"rnr_retry": 2}, b_kw={"min_rnr_timer": 1})
    a.post_send(QA, "SEND", data=b"abc", wr_id=1)
    a.post_send(QA, "WRITE", data=b"later", remote_addr=VA, rkey=RKEY, wr_id=2)
    Bench(a, b).run()
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == \
        [(1, WcStatus.RNR_RETRY_EXC_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert a.counters["req_rnr_rx"] == 3 and a.counters["req_rnr_retry_exc"] == 1
    assert a.qp_state(QA) == "ERR"


def test_retries_exhausted_fail_the_qp_after_retry_cnt_timeouts():
    a, b = pair(256, a_kw={"retry_cnt": 2, "timeout": 5})
    a.post_recv(QA, 64, wr_id=50)
    a.post_send(QA, "WRITE", data=b"x" * 300, remote_addr=VA, rkey=RKEY, wr_id=1)
    bench = Bench(a, b)
    bench.ab.drop_matching(lambda f: True)
    bench.run()
    assert a.counters["req_timeouts"] == 3 and a.counters["req_retry_exc"] == 1
    assert a.counters["req_tx"] == 6 and a.counters["req_retx"] == 4
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == [(1, WcStatus.RETRY_EXC_ERR)]
    assert [(c.wr_id, c.status) for c in a.poll_cq()] == [(50, WcStatus.WR_FLUSH_ERR)]
    starts = [t for t, f in bench.sent if Ether(f)[BTH].psn == PSN0]
    assert [t1 - t0 for t0, t1 in zip(starts, starts[1:])] == [4096 << 5] * 2


# ---------------------------------------------------------------- fatal NAK

def test_remote_access_error_fails_the_qp_and_flushes():
    a, b = pair(256)
    a.post_send(QA, "WRITE", data=data_of(1000, 1), remote_addr=VA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "WRITE", data=data_of(600, 2), remote_addr=VA, rkey=RKEY + 1, wr_id=2)
    a.post_send(QA, "SEND", data=b"hello", wr_id=3)
    a.post_send(QA, "WRITE", data=b"", remote_addr=0, rkey=0, wr_id=4)
    b.post_recv(QB, 64, wr_id=3)
    Bench(a, b).run()
    assert [(c.wr_id, c.opcode, c.status) for c in a.poll_send_cq()] == [
        (1, WcOpcode.RDMA_WRITE, WcStatus.SUCCESS), (2, WcOpcode.RDMA_WRITE, WcStatus.REM_ACCESS_ERR),
        (3, WcOpcode.SEND, WcStatus.WR_FLUSH_ERR), (4, WcOpcode.RDMA_WRITE, WcStatus.WR_FLUSH_ERR)]
    assert a.counters["req_nak_err_rx"] == 1 and b.counters["nak_rem_access_tx"] == 1
    assert a.qp_state(QA) == "ERR" and b.qp_state(QB) == "ERR"
    assert b.read_mem(VA, 1000) == data_of(1000, 1)
    # later work requests complete at once, flushed, and nothing more is sent
    a.post_send(QA, "SEND", data=b"late", wr_id=5)
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == [(5, WcStatus.WR_FLUSH_ERR)]
    assert a.next_frames() == [] and a.send_outstanding() == 0


@pytest.mark.parametrize("syndrome, status", [(0x61, WcStatus.REM_INV_REQ_ERR),
                                              (0x63, WcStatus.REM_OP_ERR)])
def test_other_fatal_naks(syndrome, status):
    a, b = pair(256, behaviour=IDEAL)
    a.post_send(QA, "SEND", data=b"a" * 300, wr_id=1)
    a.post_send(QA, "SEND", data=b"b", wr_id=2)
    assert len(a.next_frames()) == 3
    a.receive(b.ack_frame(QB, 0x1F, PSN0))        # half of the first message
    assert a.poll_send_cq() == []
    a.receive(b.ack_frame(QB, syndrome, PSN0 + 2))
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == [
        (1, WcStatus.SUCCESS), (2, status)]
    assert a.qp_state(QA) == "ERR"


# ---------------------------------------------------------------- PSN wrap

def psn_of(frame):
    return int.from_bytes(frame[14 + 20 + 8 + 9:][:3], "big")


@pytest.mark.parametrize("loss", [False, True])
def test_psn_wraps_around_2_24(loss):
    pmtu = 256
    start = (1 << 24) - 5
    a, b = pair(pmtu, sq_psn=start)
    msgs = [("WRITE", data_of(3 * pmtu + 5, 1), None), ("SEND_IMM", data_of(2 * pmtu, 2), 7),
            ("WRITE_IMM", data_of(5 * pmtu, 3), 8), ("SEND", data_of(1, 4), None)]
    writes, recvs, sends = post_messages(a, b, msgs)
    bench = Bench(a, b, seed=5)
    if loss:        # the packets just before and after the wrap are lost once each
        bench.ab.drop_matching(lambda f: psn_of(f) in (0xFFFFFE, 0x000001), count=2)
    bench.run()
    assert b.read_mem(VA, MRLEN) == expected_memory(writes)
    assert b.poll_cq() == recvs and a.poll_send_cq() == sends
    assert b.expected_psn(QB) == (start + 4 + 2 + 5 + 1) & 0xFFFFFF == 7
    psns = [Ether(f)[BTH].psn for _, f in bench.sent]
    if not loss:
        assert psns == [(start + k) & 0xFFFFFF for k in range(12)]
    else:
        assert a.counters["req_retx"] > 0 and a.counters["req_nak_seq_rx"] >= 1
        assert psns.count(0xFFFFFE) == psns.count(1) == 2
    assert 0xFFFFFF in psns and 0 in psns
