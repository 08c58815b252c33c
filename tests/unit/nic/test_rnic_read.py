"""RDMA READ in the host RNIC model (:mod:`rocegen.sim.models.rnic`, its requester in
:mod:`rocegen.sim.models.rnic.requester`): one model (A) READs from another (B), back to back,
by hand (untimed) or through two faulty links (:mod:`rocegen.sim.models.fabric.link`) with an event
loop that paces each side's line at 100 Gb/s. Expected frames, PSNs, data and completions come
from the data the tests choose; frames are dissected with scapy and the header tables, not with
the model."""

import math
import random

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import checksum

from rocegen.sim.models.fabric.link import Link
from rocegen.sim.models.rnic import IDEAL, Access, Behaviour, Rnic, WcOpcode, WcStatus
from rocegen.wire import headers as H

A_MAC, A_IP = "02:00:00:00:00:0a", "10.0.0.10"
B_MAC, B_IP = "02:00:00:00:00:0b", "10.0.0.11"
QA, QB = 0x21, 0x42                     # A's QP, B's QP
PSN0 = 0x12345
RVA, RLEN, RKEY = 0x7F00_0000_0000, 256 * 1024, 0xBEEF      # B's region (A reads it)
LVA, LLEN, LKEY = 0x5500_0000, 256 * 1024, 0x1234          # A's region (READs land there)
REMOTE = random.Random(5).randbytes(RLEN)
LOCAL = random.Random(6).randbytes(LLEN)
RW = Access.REMOTE_WRITE | Access.REMOTE_READ
MEM = Access.LOCAL_WRITE | RW
READ_REQ, FIRST, MIDDLE, LAST, ONLY, ACK = 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11
TIMEOUT_NS = {code: 4096 << code for code in range(1, 20)}    # 4.096 us x 2^code


def pair(pmtu, *, sq_psn=PSN0, a_kw=None, b_kw=None, behaviour=IDEAL, a_behaviour=IDEAL,
         strict=True):
    """A (requester) and B (responder) with one connected QP each, READ enabled; B's region
    holds REMOTE, A's LOCAL (both readable and writable from the wire)."""
    a = Rnic(A_MAC, A_IP, strict=strict, behaviour=a_behaviour)
    b = Rnic(B_MAC, B_IP, strict=strict, behaviour=behaviour)
    a.create_qp(QA, peer_qpn=QB, peer_ip=B_IP, peer_mac=B_MAC, epsn=sq_psn, sq_psn=sq_psn,
                pmtu=pmtu, access=RW, **(a_kw or {}))
    b.create_qp(QB, peer_qpn=QA, peer_ip=A_IP, peer_mac=A_MAC, epsn=sq_psn, sq_psn=sq_psn,
                pmtu=pmtu, access=RW, **(b_kw or {}))
    b.register_mr(RVA, RLEN, RKEY, MEM)
    b.write_mem(RVA, REMOTE)
    a.register_mr(LVA, LLEN, LKEY, MEM)
    a.write_mem(LVA, LOCAL)
    return a, b


def npkts(n, pmtu):
    return max(1, -(-n // pmtu))


class Frame:
    """A RoCEv2 frame taken apart with scapy (Ethernet, IPv4, UDP, the ICRC) and the header
    tables (BTH, AETH, RETH)."""

    def __init__(self, frame):
        p = Ether(frame)
        ip = p[IP]
        n = 14 + ip.len
        assert len(frame) == max(60, n) and not any(frame[n:])
        assert checksum(bytes(ip)[:20]) == 0 and ip.flags.DF and ip.id != 0
        q = p.copy()
        q[BTH].icrc = None
        assert bytes(q)[:n] == frame[:n], "ICRC differs from scapy's"
        self.src, self.dst, self.ip_src, self.ip_dst = p.src, p.dst, ip.src, ip.dst
        self.sport, self.dport = p[UDP].sport, p[UDP].dport
        roce = bytes(ip)[28:ip.len]
        bth = H.BTH.unpack(roce)
        self.op, self.psn, self.dqpn = bth["opcode"], bth["psn"], bth["dest_qp"]
        self.ackreq, self.padcnt, self.se = bth["ack_req"], bth["padcnt"], bth["se"]
        body = roce[H.BTH.length:-4]
        self.aeth = self.reth = None
        if self.op in (FIRST, LAST, ONLY, ACK):
            self.aeth = H.AETH.unpack(body)
            body = body[H.AETH.length:]
        elif self.op == READ_REQ:
            self.reth = H.RETH.unpack(body)
            body = body[H.RETH.length:]
        self.payload = body[:len(body) - self.padcnt]
        self.pad = body[len(body) - self.padcnt:]

    def response(self):
        """(opcode, PSN, (syndrome, MSN) or None, payload, PadCnt) of a READ response."""
        assert not any(self.pad)
        aeth = None if self.aeth is None else (self.aeth["syndrome"], self.aeth["msn"])
        return self.op, self.psn, aeth, self.payload, self.padcnt


def expected_responses(psn, data, pmtu, msn, syndrome):
    n = npkts(len(data), pmtu)
    out = []
    for k in range(n):
        chunk = data[k * pmtu:(k + 1) * pmtu]
        op = ONLY if n == 1 else FIRST if k == 0 else LAST if k == n - 1 else MIDDLE
        out.append((op, (psn + k) & 0xFFFFFF, None if op == MIDDLE else (syndrome, msn), chunk,
                    (-len(chunk)) & 3))
    return out


def deliver(frames, nic):
    out = []
    for f in frames:
        out += nic.receive(f)
    return out


def is_response(f):
    return FIRST <= Frame(f).op <= ONLY


def with_reth(request, *, psn, va, rkey, length):
    """READ request frame ``request`` with another PSN and RETH (ICRC computed by scapy)."""
    p = Ether(request)
    p[BTH].psn = psn
    p[BTH].icrc = None
    p[BTH].remove_payload()
    return bytes(p / H.RETH.pack(va=va, rkey=rkey, dma_len=length))


class Bench:
    """A -> link ``ab`` -> B, B -> link ``ba`` -> A; time in ns. Each NIC's line carries the
    frames of its ``next_frames`` (requests and READ responses) one at a time at ``gbps``; its
    answers (ACKs) go on the link when due."""

    def __init__(self, a, b, *, gbps=100, **faults):
        self.nics = (a, b)
        self.ab = Link(seed=faults.pop("seed", 1), name="A->B", **faults)
        self.ba = Link(seed=self.ab.seed + 1000, name="B->A", **faults)
        self.gbps = gbps
        self.t = 0
        self.line_free = [0, 0]
        self.sent = ([], [])            # (time, frame) from next_frames, per side
        self.events = []                # (time, callable)

    def _deliver(self, link, nic, back):
        for d in link.deliveries(self.t):
            strict = nic.strict
            nic.strict = strict and not d.corrupted
            try:
                for f in nic.receive(d.frame, self.t):
                    back.send(f, self.t)
            finally:
                nic.strict = strict

    def step(self):
        a, b = self.nics
        self.events.sort(key=lambda e: e[0])
        while self.events and self.events[0][0] <= self.t:
            self.events.pop(0)[1]()
        self._deliver(self.ab, b, self.ba)
        for f in b.due(self.t):
            self.ba.send(f, self.t)
        self._deliver(self.ba, a, self.ab)
        for f in a.due(self.t):
            self.ab.send(f, self.t)
        for side, (nic, link) in enumerate(((a, self.ab), (b, self.ba))):
            while self.line_free[side] <= self.t:
                out = nic.next_frames(self.t, 1)
                if not out:
                    break
                link.send(out[0], self.t)
                self.sent[side].append((self.t, out[0]))
                self.line_free[side] = self.t + math.ceil((len(out[0]) + 24) * 8 / self.gbps)

    def busy(self):
        a, b = self.nics
        return (a.send_outstanding() or b.send_outstanding() or self.ab.in_flight
                or self.ba.in_flight or a.pending or b.pending or self.events)

    def run(self, *, limit_ns=10**10, max_steps=300_000):
        for _ in range(max_steps):
            self.step()
            if not self.busy():
                return
            times = [self.ab.next_due(), self.ba.next_due()]
            times += [nic.next_due() for nic in self.nics]
            times += [t for t, _ in self.events]
            for side, nic in enumerate(self.nics):
                if nic.tx_pending(now=self.t):
                    times.append(max(self.line_free[side], self.t + 1))
            nxt = min((t for t in times if t is not None), default=None)
            assert nxt is not None, "nothing left to happen but work is outstanding"
            self.t = max(self.t + 1, math.ceil(nxt))
            assert self.t < limit_ns, f"still busy at {self.t} ns"
        raise AssertionError("too many steps")

    def requests(self):
        """A's READ requests on the wire: (time, PSN, VA, R_Key, length)."""
        out = []
        for t, f in self.sent[0]:
            p = Frame(f)
            if p.op == READ_REQ:
                out.append((t, p.psn, p.reth["va"], p.reth["rkey"], p.reth["dma_len"]))
        return out


def read_ok(wr_id, data):
    return (wr_id, WcOpcode.RDMA_READ, len(data), None, WcStatus.SUCCESS, QA, data)


# ---------------------------------------------------------------- sizes, frames, clean

@pytest.mark.parametrize("pmtu", [256, 4096])
def test_every_size_arrives_exactly(pmtu):
    """ONLY and multi-packet READs, 0 bytes included, against a ConnectX-like responder."""
    a, b = pair(pmtu, behaviour=Behaviour(seed=3))
    sizes = [0, 1, 3, pmtu - 1, pmtu, pmtu + 1, 3 * pmtu + 5, 64 * 1024]
    want, vas, loc, rem = [], [], 0, 17
    for i, n in enumerate(sizes):
        a.post_send(QA, "READ", length=n, remote_addr=RVA + rem, rkey=RKEY, local_addr=LVA + loc,
                    wr_id=i)
        want.append((loc, REMOTE[rem:rem + n]))
        vas.append(RVA + rem)
        loc += n + 5
        rem += 3 * n + 1
    bench = Bench(a, b)
    bench.run()
    assert a.poll_send_cq() == [read_ok(i, d) for i, (_, d) in enumerate(want)]
    mem = bytearray(LOCAL)
    for off, d in want:
        mem[off:off + len(d)] = d
    assert a.read_mem(LVA, LLEN) == bytes(mem)
    total = sum(npkts(n, pmtu) for n in sizes)
    assert b.counters["read_rx"] == len(sizes) and b.counters["read_resp_tx"] == total
    assert b.counters["read_bytes"] == a.counters["req_read_bytes"] == sum(sizes)
    assert a.counters["req_read_rx"] == total and a.counters["req_retx"] == 0
    assert b.expected_psn(QB) == PSN0 + total and b.msn(QB) == len(sizes)
    reqs = bench.requests()
    psn = PSN0
    for (_, p, va, rkey, n), size, want_va in zip(reqs, sizes, vas, strict=True):
        assert (p, va, rkey, n) == (psn, want_va, RKEY, size)
        psn += npkts(size, pmtu)
    assert a.counters["req_timeouts"] == a.counters["req_read_retry"] == 0
    assert a.qp_state(QA) == b.qp_state(QB) == "RTR"


def test_request_and_response_frames_dissected():
    pmtu = 256
    a, b = pair(pmtu)
    a.post_send(QA, "WRITE", data=bytes(range(200)) * 2, remote_addr=RVA, rkey=RKEY, wr_id=1)
    reads = [(RVA + 1000, 3 * pmtu + 5), (0, 0), (RVA + 7, pmtu), (RVA + 9, 2)]
    for i, (va, n) in enumerate(reads):
        a.post_send(QA, "READ", length=n, remote_addr=va, rkey=RKEY if n else 0, wr_id=2 + i)
    frames = a.next_frames()
    assert a.next_frames() == [] and len(frames) == 2 + len(reads)
    psn = PSN0 + 2
    for f, (va, n) in zip(frames[2:], reads, strict=True):
        p = Frame(f)
        assert (p.op, p.psn, p.dqpn, p.ackreq, p.se, p.padcnt, p.payload) == \
            (READ_REQ, psn, QB, 1, 0, 0, b"")
        assert p.reth == {"va": va, "rkey": RKEY if n else 0, "dma_len": n}
        psn += npkts(n, pmtu)
    # the WRITE is ACKed at once (nothing queued); the READs' responses leave by next_frames,
    # with the WRITE's data (executed first)
    acks = deliver(frames[:2], b)
    assert [(Frame(f).op, Frame(f).psn) for f in acks] == [(ACK, PSN0 + 1)]
    assert deliver(frames[2:], b) == []
    assert b.counters["read_rx"] == 4 and b.pending == sum(npkts(n, pmtu) for _, n in reads)
    out = b.next_frames()
    assert b.next_frames() == [] and b.pending == 0
    mem = bytearray(REMOTE)
    mem[:400] = bytes(range(200)) * 2
    want, psn = [], PSN0 + 2
    for k, (va, n) in enumerate(reads):
        data = bytes(mem[va - RVA:va - RVA + n]) if n else b""
        want += expected_responses(psn, data, pmtu, 2 + k, 0x1F)
        psn += npkts(n, pmtu)
    got = [Frame(f) for f in out]
    assert [p.response() for p in got] == want
    for p in got:
        assert (p.src, p.dst, p.ip_src, p.ip_dst, p.dqpn) == (B_MAC, A_MAC, B_IP, A_IP, QA)
        assert (p.dport, p.sport, p.ackreq, p.se) == (4791, b.qps[QB].udp_sport, 0, 0)
    for f in acks + out:
        assert a.receive(f) == []
    assert [c.wr_id for c in a.poll_send_cq()] == [1, 2, 3, 4, 5]
    assert a.counters["req_read_rx"] == len(out) and a.counters["req_ack_rx"] == 1


def test_zero_length_read_checks_no_rkey():
    a, b = pair(1024, strict=True)
    a.post_send(QA, "READ", length=0, remote_addr=0xDEAD_0000, rkey=0x999, wr_id=7)
    assert deliver(a.next_frames(), b) == []
    (f,) = b.next_frames()
    assert Frame(f).response() == (ONLY, PSN0, (0x1F, 1), b"", 0)
    a.receive(f)
    assert a.poll_send_cq() == [read_ok(7, b"")]
    assert b.counters["err_rkey"] == 0 and b.expected_psn(QB) == PSN0 + 1


def test_credit_code_and_msn_in_the_aeth_of_a_connectx():
    """The AETH of FIRST/LAST (none on MIDDLE) carries the receive queue's credit code, as
    every ACK of a ConnectX-like responder."""
    a, b = pair(256, behaviour=Behaviour(response_ns=(0.0, 0.0)))
    for i in range(5):
        b.post_recv(QB, 64, wr_id=i)             # 5 WQEs: credit code 4 (IBTA 9.7.5.1.2)
    a.post_send(QA, "READ", length=600, remote_addr=RVA, rkey=RKEY, wr_id=1)
    assert deliver(a.next_frames(), b) == []
    got = [Frame(f).response() for f in b.next_frames()]
    assert got == expected_responses(PSN0, REMOTE[:600], 256, 1, 4)


# ---------------------------------------------------------------- responder errors

@pytest.mark.parametrize("case", ["rkey", "after_end", "before_start", "no_read_access"])
def test_bad_rkey_or_range_is_a_remote_access_error(case):
    a, b = pair(256)
    b.register_mr(0x10_0000, 4096, 0x777, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    va, rkey, n = {"rkey": (RVA, RKEY + 1, 8), "after_end": (RVA + RLEN - 10, RKEY, 11),
                   "before_start": (RVA - 1, RKEY, 4),
                   "no_read_access": (0x10_0000, 0x777, 16)}[case]
    a.post_send(QA, "WRITE", data=b"w" * 300, remote_addr=RVA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "READ", length=n, remote_addr=va, rkey=rkey, wr_id=2)
    a.post_send(QA, "READ", length=8, remote_addr=RVA, rkey=RKEY, wr_id=3)
    frames = a.next_frames()
    answers = deliver(frames, b)
    assert [(Frame(f).op, Frame(f).psn, Frame(f).aeth["syndrome"]) for f in answers] == \
        [(ACK, PSN0 + 1, 0x1F), (ACK, PSN0 + 2, 0x62)]
    counter = {"rkey": "err_rkey", "no_read_access": "err_access"}.get(case, "err_bounds")
    assert b.counters[counter] == b.counters["nak_rem_access_tx"] == 1
    assert b.qp_state(QB) == "ERR" and b.next_frames() == [] and b.counters["read_rx"] == 0
    deliver(answers, a)
    assert [(c.wr_id, c.opcode, c.status) for c in a.poll_send_cq()] == [
        (1, WcOpcode.RDMA_WRITE, WcStatus.SUCCESS), (2, WcOpcode.RDMA_READ, WcStatus.REM_ACCESS_ERR),
        (3, WcOpcode.RDMA_READ, WcStatus.WR_FLUSH_ERR)]
    assert a.qp_state(QA) == "ERR"


def test_read_on_a_qp_without_remote_read_access_is_an_invalid_request():
    a, b = pair(256, strict=False)
    b.destroy_qp(QB)
    b.create_qp(QB, peer_qpn=QA, peer_ip=A_IP, peer_mac=A_MAC, epsn=PSN0, pmtu=256)
    a.post_send(QA, "READ", length=8, remote_addr=RVA, rkey=RKEY, wr_id=1)
    (nak,) = deliver(a.next_frames(), b)
    assert (Frame(nak).psn, Frame(nak).aeth["syndrome"]) == (PSN0, 0x61)
    assert b.counters["err_unsupported"] == 1
    a.receive(nak)
    assert a.poll_send_cq()[0][:5] == (1, WcOpcode.RDMA_READ, 8, None, WcStatus.REM_INV_REQ_ERR)


def test_read_while_a_write_is_in_progress_is_an_invalid_request():
    a, b = pair(256, strict=False)
    a.post_send(QA, "WRITE", data=bytes(600), remote_addr=RVA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "READ", length=8, remote_addr=RVA, rkey=RKEY, wr_id=2)
    w1, _, _, rd = a.next_frames()
    p = Ether(rd)
    p[BTH].psn = PSN0 + 1               # the READ in place of the WRITE's MIDDLE
    p[BTH].icrc = None
    b.receive(w1)
    (nak,) = b.receive(bytes(p))
    assert (Frame(nak).psn, Frame(nak).aeth["syndrome"]) == (PSN0 + 1, 0x61)
    assert b.counters["err_opcode_seq"] == 1


# ---------------------------------------------------------------- outstanding READs

def test_16_outstanding_and_the_17th_waits():
    pmtu = 256
    a, b = pair(pmtu)
    for i in range(17):
        a.post_send(QA, "READ", length=300, remote_addr=RVA + 1000 * i, rkey=RKEY, wr_id=i)
    a.post_send(QA, "WRITE", data=b"after", remote_addr=RVA, rkey=RKEY, wr_id=99)
    first = a.next_frames()
    assert [Frame(f).psn for f in first] == [PSN0 + 2 * i for i in range(16)]
    assert a.tx_pending() == 0 and a.next_frames() == []
    assert deliver(first, b) == [] and b.counters["read_rx"] == 16 and b.qp_state(QB) == "RTR"
    deliver(b.next_frames(budget=1), a)            # half of READ 0: nothing completes
    assert a.poll_send_cq() == [] and a.tx_pending() == 0
    deliver(b.next_frames(budget=1), a)            # READ 0 completes: READ 16 may go
    assert a.poll_send_cq() == [read_ok(0, REMOTE[:300])]
    assert a.tx_pending() == 2
    more = a.next_frames()
    assert [(Frame(f).op, Frame(f).psn) for f in more] == [(READ_REQ, PSN0 + 32), (0x0A, PSN0 + 34)]
    deliver(deliver(more, b), a)                   # (the WRITE's ACK waits behind responses)
    for f in b.next_frames():
        a.receive(f)
    assert a.poll_send_cq() == [read_ok(i, REMOTE[1000 * i:1000 * i + 300]) for i in range(1, 17)] \
        + [(99, WcOpcode.RDMA_WRITE, 5, None, WcStatus.SUCCESS, QA, None)]
    assert b.read_mem(RVA, 5) == b"after"


@pytest.mark.parametrize("depth", [16, 2])
def test_more_reads_than_max_dest_rd_atomic_are_an_invalid_request(depth):
    a, b = pair(256, a_kw={"max_rd_atomic": depth + 1}, b_kw={"max_dest_rd_atomic": depth},
                strict=False)
    for i in range(depth + 1):
        a.post_send(QA, "READ", length=256, remote_addr=RVA + 256 * i, rkey=RKEY, wr_id=i)
    assert deliver(a.next_frames(), b) == []       # the NAK waits behind the responses
    assert b.counters["err_rd_atomic"] == b.counters["nak_inv_req_tx"] == 1
    raw = b.next_frames()
    out = [Frame(f) for f in raw]
    assert [(p.op, p.psn) for p in out] == [(ONLY, PSN0 + i) for i in range(depth)] \
        + [(ACK, PSN0 + depth)]
    assert out[-1].aeth["syndrome"] == 0x61 and b.qp_state(QB) == "ERR"
    deliver(raw, a)
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == \
        [(i, WcStatus.SUCCESS) for i in range(depth)] + [(depth, WcStatus.REM_INV_REQ_ERR)]


def test_the_reads_queued_free_their_places_as_their_responses_leave():
    a, b = pair(256, a_kw={"max_rd_atomic": 4}, b_kw={"max_dest_rd_atomic": 2})
    for i in range(4):
        a.post_send(QA, "READ", length=256, remote_addr=RVA, rkey=RKEY, wr_id=i)
    reqs = a.next_frames()
    assert deliver(reqs[:2], b) == []
    assert len(b.next_frames(budget=1)) == 1          # READ 0 answered: a place is free
    assert deliver(reqs[2:3], b) == [] and b.counters["err_rd_atomic"] == 0
    b.strict = False
    assert deliver(reqs[3:], b) == []               # a third one queued: NAK, behind them
    out = [Frame(f) for f in b.next_frames()]
    assert [(p.op, p.psn) for p in out] == [(ONLY, PSN0 + 1), (ONLY, PSN0 + 2), (ACK, PSN0 + 3)]
    assert out[-1].aeth["syndrome"] == 0x61 and b.counters["err_rd_atomic"] == 1


# ---------------------------------------------------------------- duplicates

def test_duplicate_read_is_executed_again_from_its_own_psn():
    pmtu = 256
    a, b = pair(pmtu, strict=False)
    n = 3 * pmtu + 5
    a.post_send(QA, "READ", length=n, remote_addr=RVA + 64, rkey=RKEY, wr_id=1)
    a.post_send(QA, "WRITE", data=b"x" * 4, remote_addr=RVA + 8192, rkey=RKEY, wr_id=2)
    (req, wr) = a.next_frames()
    deliver([req, wr], b)
    first = [Frame(f).response() for f in b.next_frames()]
    assert first[:4] == expected_responses(PSN0, REMOTE[64:64 + n], pmtu, 1, 0x1F)
    # the memory changes; the same request again is read again, PSNs and MSN unchanged
    b.write_mem(RVA, b"\x5a" * 4096)
    assert b.receive(req) == [] and b.expected_psn(QB) == PSN0 + 5
    again = [Frame(f).response() for f in b.next_frames()]
    assert again == expected_responses(PSN0, b"\x5a" * n, pmtu, 2, 0x1F)
    assert (b.counters["read_dup"], b.counters["duplicate"], b.counters["read_rx"]) == (1, 1, 1)
    # a retry of the rest: from PSN + 2, VA + 2 PMTU, the length reduced, responses FIRST, LAST
    retry = with_reth(req, psn=PSN0 + 2, va=RVA + 64 + 2 * pmtu, rkey=RKEY, length=n - 2 * pmtu)
    assert b.receive(retry) == []
    got = [Frame(f).response() for f in b.next_frames()]
    assert got == [(FIRST, PSN0 + 2, (0x1F, 2), b"\x5a" * pmtu, 0),
                   (LAST, PSN0 + 3, (0x1F, 2), b"\x5a" * 5, 3)]
    # as rxe's duplicate_request: the READ kept now starts where the retry did (its length
    # kept), so the whole READ asked for again from its first PSN is dropped
    assert b.receive(req) == [] and b.next_frames() == []
    # not a part of what the READ read, or another R_Key: dropped
    for va, length, rkey in ((RVA + 63, 8, RKEY), (RVA + 64, n + 1, RKEY), (RVA + 64, 8, 0x1)):
        assert b.receive(with_reth(req, psn=PSN0, va=va, rkey=rkey, length=length)) == []
    # a duplicate READ at a PSN that no READ kept holds (the WRITE's): dropped
    assert b.receive(with_reth(req, psn=PSN0 + 4, va=RVA, rkey=RKEY, length=8)) == []
    assert b.counters["read_dup_drop"] == 5 and b.next_frames() == []
    assert b.qp_state(QB) == "RTR"


# ---------------------------------------------------------------- the responder's line

def test_later_answers_wait_behind_the_read_responses():
    a, b = pair(256)
    a.post_send(QA, "READ", length=700, remote_addr=RVA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "WRITE", data=b"abcd", remote_addr=RVA + 4096, rkey=RKEY, wr_id=2)
    req, wr = a.next_frames()
    assert b.receive(req) == [] and b.receive(wr) == []
    out = b.next_frames()
    assert [(Frame(f).op, Frame(f).psn) for f in out] == \
        [(FIRST, PSN0), (MIDDLE, PSN0 + 1), (LAST, PSN0 + 2), (ACK, PSN0 + 3)]
    deliver(out, a)
    assert [c.wr_id for c in a.poll_send_cq()] == [1, 2]


def test_responses_leave_after_the_response_delay_at_the_line_pace():
    lo, hi = 400.0, 900.0
    a, b = pair(256, behaviour=Behaviour(response_ns=(lo, hi), seed=11))
    a.post_send(QA, "READ", length=1000, remote_addr=RVA, rkey=RKEY, wr_id=1)
    (req,) = a.next_frames(0)
    assert b.receive(req, 100) == [] and b.next_frames(100) == [] and b.tx_pending() == 0
    ready = b.next_due()
    assert 100 + lo <= ready <= 100 + hi and b.pending == 4
    assert b.next_frames(ready - 0.5) == []
    assert b.tx_pending(now=ready) == 4
    assert len(b.next_frames(ready, budget=1)) == 1 and b.tx_pending() == 3
    assert len(b.next_frames(ready + 50)) == 3 and b.pending == 0 and b.next_due() is None


# ---------------------------------------------------------------- lost responses

@pytest.mark.parametrize("how", ["read_fault", "link"])
def test_a_lost_response_reissues_the_rest(how):
    pmtu = 256
    n = 4 * pmtu + 10                    # 5 responses
    a, b = pair(pmtu, behaviour=Behaviour(seed=2), a_kw={"timeout": 14})
    a.post_send(QA, "READ", length=n, remote_addr=RVA + 100, rkey=RKEY, local_addr=LVA, wr_id=1)
    bench = Bench(a, b)
    if how == "read_fault":
        b.read_fault("drop", packet=1)
    else:
        bench.ba.drop_matching(lambda f: Frame(f).psn == PSN0 + 1, count=1)
    bench.run()
    assert a.poll_send_cq() == [read_ok(1, REMOTE[100:100 + n])]
    assert a.read_mem(LVA, n) == REMOTE[100:100 + n]
    # the second request: PSN of the first missing response, VA and length moved by one PMTU
    assert [r[1:] for r in bench.requests()] == [(PSN0, RVA + 100, RKEY, n),
                                                 (PSN0 + 1, RVA + 100 + pmtu, RKEY, n - pmtu)]
    assert a.counters["req_read_retry"] == 1 and a.counters["req_timeouts"] == 0
    assert b.counters["read_dup"] == 1 and b.counters["read_resp_tx"] == (4 if how == "read_fault"
                                                                          else 5) + 4
    assert a.counters["req_read_stale"] >= 1        # the rest of the first answer
    assert a.counters["req_read_rx"] == 5


def test_a_lost_last_response_is_reissued_after_the_timeout():
    pmtu = 256
    n = 3 * pmtu + 1
    a, b = pair(pmtu, behaviour=Behaviour(seed=2), a_kw={"timeout": 5})
    a.post_send(QA, "READ", length=n, remote_addr=RVA + 8, rkey=RKEY, wr_id=1)
    b.read_fault("drop", packet=-1)
    bench = Bench(a, b)
    bench.run()
    assert a.poll_send_cq() == [read_ok(1, REMOTE[8:8 + n])]
    (t0, *first), (t1, *second) = bench.requests()
    assert first == [PSN0, RVA + 8, RKEY, n] and second == [PSN0 + 3, RVA + 8 + 3 * pmtu, RKEY, 1]
    # the timer restarts on each response taken: the reissue comes a timeout after the third
    t_third = max(t for t, f in bench.sent[1] if Frame(f).psn == PSN0 + 2)
    assert t1 - t_third >= TIMEOUT_NS[5] and t1 - t0 < TIMEOUT_NS[5] + 10_000
    assert a.counters["req_timeouts"] == 1 and a.counters["req_read_retry"] == 0


def test_retries_exhausted_complete_the_read_with_an_error():
    a, b = pair(256, behaviour=Behaviour(seed=2), a_kw={"timeout": 5, "retry_cnt": 2})
    a.post_send(QA, "READ", length=600, remote_addr=RVA, rkey=RKEY, local_addr=LVA, wr_id=1)
    a.post_send(QA, "SEND", data=b"later", wr_id=2)
    b.post_recv(QB, 64, wr_id=70)
    bench = Bench(a, b)
    bench.ba.drop_matching(lambda f: True)      # responses and ACKs: nothing comes back
    bench.run()
    assert [(c.wr_id, c.opcode, c.status, c.data) for c in a.poll_send_cq()] == [
        (1, WcOpcode.RDMA_READ, WcStatus.RETRY_EXC_ERR, None),
        (2, WcOpcode.SEND, WcStatus.WR_FLUSH_ERR, None)]
    assert a.counters["req_timeouts"] == 3 and a.counters["req_retry_exc"] == 1
    reqs = bench.requests()
    assert [r[1:] for r in reqs] == [(PSN0, RVA, RKEY, 600)] * 3
    assert [t1 - t0 for (t0, *_), (t1, *_) in zip(reqs, reqs[1:])] == [TIMEOUT_NS[5]] * 2
    assert a.qp_state(QA) == "ERR" and a.read_mem(LVA, 600) == LOCAL[:600]


# ---------------------------------------------------------------- implicit acknowledgement

def test_a_read_response_acknowledges_the_earlier_writes_and_sends():
    pmtu = 256
    a, b = pair(pmtu, behaviour=Behaviour(seed=4), a_kw={"timeout": 10})
    a.post_send(QA, "WRITE", data=b"w" * 700, remote_addr=RVA + 4096, rkey=RKEY, wr_id=1)
    a.post_send(QA, "SEND", data=b"hello", wr_id=2)
    b.post_recv(QB, 64, wr_id=50)
    a.post_send(QA, "READ", length=300, remote_addr=RVA + 4096 + 650, rkey=RKEY, wr_id=3)
    bench = Bench(a, b)
    bench.ba.drop_matching(lambda f: Frame(f).op == ACK)    # no ACK ever reaches A
    bench.run()
    data = (b"w" * 700 + REMOTE[4096 + 700:])[650:950]
    assert a.poll_send_cq() == [
        (1, WcOpcode.RDMA_WRITE, 700, None, WcStatus.SUCCESS, QA, None),
        (2, WcOpcode.SEND, 5, None, WcStatus.SUCCESS, QA, None), read_ok(3, data)]
    assert a.counters["req_ack_rx"] == 0 and a.counters["req_timeouts"] == 0
    assert a.counters["req_read_rx"] == 2 and a.counters["req_retx"] == 0


def test_an_ack_past_an_incomplete_read_reissues_it_and_completions_stay_in_order():
    """The LAST response is lost; the ACK of the WRITE after the READ shows it (rxe's implied
    NAK): the READ is reissued for its last packet, and completes before the WRITE."""
    pmtu = 256
    a, b = pair(pmtu, behaviour=Behaviour(seed=4), a_kw={"timeout": 14})
    a.post_send(QA, "READ", length=4 * pmtu, remote_addr=RVA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "WRITE", data=b"z" * 10, remote_addr=RVA + 8192, rkey=RKEY, wr_id=2)
    bench = Bench(a, b)
    bench.ba.drop_matching(lambda f: Frame(f).op == LAST, count=1)
    bench.run()
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == [(1, WcStatus.SUCCESS),
                                                              (2, WcStatus.SUCCESS)]
    assert [r[1:] for r in bench.requests()] == [(PSN0, RVA, RKEY, 4 * pmtu),
                                                 (PSN0 + 3, RVA + 3 * pmtu, RKEY, pmtu)]
    assert a.counters["req_read_retry"] == 1 and a.counters["req_timeouts"] == 0
    assert b.counters["duplicate"] == 2         # the READ again, then the WRITE again


def test_an_ack_past_an_incomplete_read_by_hand():
    a, b = pair(256, a_kw={"timeout": 0})
    a.post_send(QA, "WRITE", data=b"1" * 10, remote_addr=RVA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "READ", length=512, remote_addr=RVA, rkey=RKEY, wr_id=2)
    a.post_send(QA, "WRITE", data=b"3" * 10, remote_addr=RVA, rkey=RKEY, wr_id=3)
    assert len(a.next_frames()) == 3
    a.receive(b.ack_frame(QB, 0x1F, PSN0 + 3))     # past the READ (PSN0 + 1, + 2)
    assert [c.wr_id for c in a.poll_send_cq()] == [1]
    assert a.counters["req_read_retry"] == 1
    a.receive(b.ack_frame(QB, 0x1F, PSN0 + 3))     # again: the retry is under way
    assert a.counters["req_read_retry"] == 1 and a.counters["req_read_stale"] == 1
    again = [Frame(f) for f in a.next_frames()]
    assert [(p.op, p.psn) for p in again] == [(READ_REQ, PSN0 + 1), (0x0A, PSN0 + 3)]


# ---------------------------------------------------------------- malformed responses

MALFORMED = {
    # (kind, packet, value) of the fault on the first READ's 4 responses -> what A counts; the
    # response dropped leaves a gap that the next response shows (but with "extra": the
    # extra one, taking the second READ's first PSN, is the one dropped)
    "opcode_first_for_middle": (("opcode", 1, FIRST), "req_read_bad"),
    "opcode_only_for_last": (("opcode", 3, ONLY), "req_read_bad"),
    "opcode_middle_for_first": (("opcode", 0, MIDDLE), "req_read_bad"),
    "longer": (("length", 1, 4), "req_read_bad"),
    "shorter": (("length", 2, -1), "req_read_bad"),
    "last_longer": (("length", 3, 8), "req_read_bad"),
    "nak_syndrome": (("syndrome", 0, 0x63), "req_read_bad"),
    "rnr_syndrome": (("syndrome", 3, 0x21), "req_read_bad"),
    "too_few": (("truncate", 0, None), "req_read_bad"),
    "too_many": (("extra", 0, None), "req_read_bad"),
    "psn_ahead": (("psn", 1, 1), "req_read_stale"),
    "psn_behind": (("psn", 2, -1), "req_read_stale"),
    "psn_never_sent": (("psn", 1, 0x1000), "req_ack_ghost"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_responses_are_counted_and_dropped(case):
    pmtu = 256
    n = 3 * pmtu + 6                     # 4 responses: FIRST, MIDDLE, MIDDLE, LAST
    (kind, packet, value), counter = MALFORMED[case]
    a, b = pair(pmtu, behaviour=Behaviour(seed=9), a_kw={"timeout": 14})
    a.post_send(QA, "READ", length=n, remote_addr=RVA + 5, rkey=RKEY, local_addr=LVA, wr_id=1)
    a.post_send(QA, "READ", length=40, remote_addr=RVA + 9000, rkey=RKEY, wr_id=2)
    b.read_fault(kind, packet=packet, value=value, qpn=QB)
    a.strict = False
    bench = Bench(a, b)
    bench.run()
    assert a.poll_send_cq() == [read_ok(1, REMOTE[5:5 + n]), read_ok(2, REMOTE[9000:9040])]
    assert a.read_mem(LVA, n) == REMOTE[5:5 + n]
    assert b.counters["read_fault_tx"] == 1
    assert a.counters[counter] >= 1
    bad = a.counters["req_read_bad"] + a.counters["req_ack_ghost"]
    assert bad == (0 if counter == "req_read_stale" else 1)
    assert a.counters["req_read_retry"] == (case != "too_many")
    assert a.counters["req_timeouts"] == 0 and a.qp_state(QA) == "RTR"


def test_too_many_responses_fail_a_strict_requester():
    """The extra response takes the next READ's first PSN with a LAST opcode: a strict
    requester (as the testbenches run) fails on it."""
    a, b = pair(256)
    a.post_send(QA, "READ", length=300, remote_addr=RVA, rkey=RKEY, wr_id=1)
    a.post_send(QA, "READ", length=300, remote_addr=RVA, rkey=RKEY, wr_id=2)
    b.read_fault("extra")
    deliver(a.next_frames(), b)
    out = b.next_frames()
    assert [(Frame(f).op, Frame(f).psn) for f in out] == [
        (FIRST, PSN0), (LAST, PSN0 + 1), (LAST, PSN0 + 2), (FIRST, PSN0 + 2), (LAST, PSN0 + 3)]
    deliver(out[:2], a)
    with pytest.raises(AssertionError, match=r"\[req_read_bad\]"):
        a.receive(out[2])


def test_read_fault_arguments_are_checked():
    _, b = pair(256)
    with pytest.raises(ValueError, match="must be one of"):
        b.read_fault("swap")
    with pytest.raises(ValueError, match="needs an integer value"):
        b.read_fault("opcode")
    with pytest.raises(ValueError, match="0..255"):
        b.read_fault("syndrome", value=0x100)


def test_post_read_arguments_are_checked():
    a, _ = pair(256)
    with pytest.raises(ValueError, match="needs length"):
        a.post_send(QA, "READ", remote_addr=RVA, rkey=RKEY)
    with pytest.raises(ValueError, match="no data"):
        a.post_send(QA, "READ", data=b"x", remote_addr=RVA, rkey=RKEY)
    with pytest.raises(ValueError, match="LOCAL_WRITE"):
        a.post_send(QA, "READ", length=8, local_addr=LVA + LLEN - 4, remote_addr=RVA, rkey=RKEY)
    with pytest.raises(ValueError, match="only a READ"):
        a.post_send(QA, "WRITE", data=b"x", local_addr=LVA)
    with pytest.raises(ValueError, match="max_rd_atomic"):
        a.create_qp(0x99, peer_qpn=1, peer_ip=B_IP, peer_mac=B_MAC, epsn=0, pmtu=256,
                    max_rd_atomic=0)


# ---------------------------------------------------------------- PSN wrap

def test_a_read_across_the_psn_wrap_with_a_lost_response():
    pmtu = 256
    start = (1 << 24) - 2
    a, b = pair(pmtu, sq_psn=start, behaviour=Behaviour(seed=5), a_kw={"timeout": 14})
    a.post_send(QA, "WRITE", data=b"q" * 10, remote_addr=RVA + 30_000, rkey=RKEY, wr_id=1)
    a.post_send(QA, "READ", length=5 * pmtu, remote_addr=RVA, rkey=RKEY, wr_id=2)
    a.post_send(QA, "SEND", data=b"end", wr_id=3)
    b.post_recv(QB, 16, wr_id=9)
    bench = Bench(a, b)
    bench.ba.drop_matching(lambda f: Frame(f).psn == 1 and is_response(f), count=1)
    bench.run()
    assert [(c.wr_id, c.status) for c in a.poll_send_cq()] == \
        [(1, WcStatus.SUCCESS), (2, WcStatus.SUCCESS), (3, WcStatus.SUCCESS)]
    assert a.send_cq == [] and b.expected_psn(QB) == (start + 1 + 5 + 1) & 0xFFFFFF == 5
    assert [r[1:] for r in bench.requests()] == [(0xFFFFFF, RVA, RKEY, 5 * pmtu),
                                                 (1, RVA + 2 * pmtu, RKEY, 3 * pmtu)]


# ---------------------------------------------------------------- faults, both directions

def test_the_behaviours_faults_on_read_responses_are_survived():
    behaviour = Behaviour(seed=3, dup_ack=0.2, runt=0.2, oversize=0.2)
    a, b = pair(1024, behaviour=behaviour, a_behaviour=Behaviour(), a_kw={"timeout": 10})
    sizes = [1, 5000, 20000, 0, 1024]
    off = 0
    for i, n in enumerate(sizes):
        a.post_send(QA, "READ", length=n, remote_addr=RVA + off, rkey=RKEY, wr_id=i)
        off += n
    a.strict = False
    Bench(a, b).run()
    off, want = 0, []
    for i, n in enumerate(sizes):
        want.append(read_ok(i, REMOTE[off:off + n]))
        off += n
    assert a.poll_send_cq() == want
    assert a.counters["eth_drop_runt"] == b.counters["runt_tx"] > 0
    assert a.counters["eth_drop_mtu"] == b.counters["oversize_tx"] > 0
    assert a.counters["req_read_stale"] >= b.counters["read_dup_tx"] > 0


@pytest.mark.parametrize("seed", [1, 2])
def test_reads_writes_and_sends_both_ways_through_lossy_links(seed):
    """Each side READs from, WRITEs into and SENDs to the other on the same QP pair, through
    links that lose, duplicate and reorder: everything arrives once, in order. In each region
    the READs read [0, 32K), land in [32K, 112K) and the WRITEs land from 128K."""
    pmtu = 512
    rng = random.Random(seed)
    a, b = pair(pmtu, behaviour=Behaviour(seed=seed), a_behaviour=Behaviour(seed=seed + 50),
                a_kw={"timeout": 6, "max_rd_atomic": 4},
                b_kw={"timeout": 6, "max_dest_rd_atomic": 4})
    expect = {}
    for me, peer, qpn, peer_qpn, peer_mem, peer_va, peer_rkey, my_va in (
            (a, b, QA, QB, REMOTE, RVA, RKEY, LVA), (b, a, QB, QA, LOCAL, LVA, LKEY, RVA)):
        sends, recvs, writes = [], [], []
        woff = 128 * 1024
        for k in range(20):
            op = rng.choice(["READ", "READ", "WRITE", "SEND"])
            n = rng.choice([0, 1, pmtu, pmtu + 1, 3 * pmtu + 7, rng.randrange(4000)])
            wr_id = 100 * qpn + k
            if op == "READ":
                src = rng.randrange(32 * 1024 - n)
                me.post_send(qpn, "READ", length=n, remote_addr=peer_va + src, rkey=peer_rkey,
                             local_addr=my_va + 32 * 1024 + 4000 * k, wr_id=wr_id)
                sends.append((wr_id, WcOpcode.RDMA_READ, n, peer_mem[src:src + n]))
            elif op == "WRITE":
                data = rng.randbytes(n)
                me.post_send(qpn, "WRITE", data=data, remote_addr=peer_va + woff,
                             rkey=peer_rkey, wr_id=wr_id)
                writes.append((woff, data))
                woff += n
                sends.append((wr_id, WcOpcode.RDMA_WRITE, n, None))
            else:
                data = rng.randbytes(n)
                me.post_send(qpn, "SEND", data=data, wr_id=wr_id)
                peer.post_recv(peer_qpn, n, wr_id=wr_id)
                sends.append((wr_id, WcOpcode.SEND, n, None))
                recvs.append((wr_id, data))
        expect[qpn] = sends, recvs, writes
    bench = Bench(a, b, loss=0.04, dup=0.02, reorder=0.03, seed=seed)
    bench.run()
    for me, peer, qpn, peer_va in ((a, b, QA, RVA), (b, a, QB, LVA)):
        sends, recvs, writes = expect[qpn]
        got = me.poll_send_cq()
        assert [(c.wr_id, c.opcode, c.byte_len, c.data) for c in got] == sends
        assert all(c.status == WcStatus.SUCCESS for c in got)
        assert [(c.wr_id, c.data) for c in peer.poll_cq()] == recvs
        for off, data in writes:
            assert peer.read_mem(peer_va + off, len(data)) == data
    assert bench.ab.counters["dropped"] + bench.ba.counters["dropped"] > 0
    assert a.counters["req_read_rx"] > 0 and b.counters["req_read_rx"] > 0
    assert a.counters["req_retx"] + b.counters["req_retx"] > 0
    assert a.counters["req_ack_ghost"] == b.counters["req_ack_ghost"] == 0
    assert a.counters["req_read_bad"] == b.counters["req_read_bad"] == 0
