"""Atomics in the host RNIC model: A's requester issues COMPARE_SWAP and FETCH_ADD, B's atomic
responder executes them (:mod:`rocegen.sim.models.rnic.atomic_responder`), back to back through
the faulty links of :mod:`tests.unit.nic.test_rnic_requester`. The frames are read here with
struct at the wire notes' offsets; the expected values come from the tests' own arithmetic.

The contended counter: N QPs each FETCH_ADD 1 to one address M times, over links that lose,
duplicate and reorder; the final value is N*M and the N*M values returned are all different
(a duplicate is answered from the results kept, not executed again). The same with
COMPARE_SWAP loops, each QP retrying with the value it got back until its swap takes."""

import struct

import pytest

from rocegen.sim.models.icrc import icrc
from rocegen.sim.models.rnic import Access, Rnic, WcOpcode, WcStatus
from tests.unit.nic.test_rnic_requester import (
    A_IP,
    A_MAC,
    B_IP,
    B_MAC,
    PSN0,
    QA,
    QB,
    RKEY,
    VA,
    Bench,
)

CS, FA, ACK_ATOMIC = 0x13, 0x14, 0x12
ATOMIC_QP = Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
ATOMIC_MR = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
RES = 0x5000_0000                       # A's region for the results


def atomic_pair(qps=1, *, mr_access=ATOMIC_MR, qp_access=ATOMIC_QP, max_rd_atomic=16,
                max_dest_rd_atomic=16, timeout=8, strict=True):
    a = Rnic(A_MAC, A_IP, strict=strict)
    b = Rnic(B_MAC, B_IP, strict=strict)
    for k in range(qps):
        a.create_qp(QA + k, peer_qpn=QB + k, peer_ip=B_IP, peer_mac=B_MAC, epsn=0,
                    sq_psn=PSN0 + 1000 * k, pmtu=1024, max_rd_atomic=max_rd_atomic,
                    timeout=timeout)
        b.create_qp(QB + k, peer_qpn=QA + k, peer_ip=A_IP, peer_mac=A_MAC,
                    epsn=PSN0 + 1000 * k, pmtu=1024, access=qp_access,
                    max_dest_rd_atomic=max_dest_rd_atomic)
    b.register_mr(VA, 4096, RKEY, mr_access)
    a.register_mr(RES, 1 << 20, 0x77, Access.LOCAL_WRITE)
    return a, b


def le(v):
    return v.to_bytes(8, "little")


def test_fetch_add_and_compare_swap_on_the_wire_and_in_memory():
    a, b = atomic_pair()
    b.write_mem(VA + 16, le(0x0102030405060708))
    a.post_send(QA, "FETCH_ADD", remote_addr=VA + 16, rkey=RKEY, swap_add=0x100, wr_id=1,
                local_addr=RES)
    a.post_send(QA, "COMPARE_SWAP", remote_addr=VA + 16, rkey=RKEY, swap_add=0xAB,
                compare=0x0102030405060808, wr_id=2)                    # equal: swapped
    a.post_send(QA, "COMPARE_SWAP", remote_addr=VA + 16, rkey=RKEY, swap_add=0xCD,
                compare=0x1, wr_id=3)                                   # not equal: kept
    reqs = a.next_frames()
    assert len(reqs) == 3
    for k, (f, op) in enumerate(zip(reqs, (FA, CS, CS))):
        bth = f[42:54]
        assert bth[0] == op and bth[1] & 0x30 == 0                      # PadCnt 0
        assert bth[8] & 0x80 and int.from_bytes(bth[9:12], "big") == PSN0 + k  # AckReq
        va, rkey, swap_add, compare = struct.unpack(">QIQQ", f[54:82])
        assert (va, rkey) == (VA + 16, RKEY)
        assert len(f) == 82 + 4                                        # no payload, the ICRC
    assert struct.unpack(">QIQQ", reqs[1][54:82])[2:] == (0xAB, 0x0102030405060808)
    answers = [x for f in reqs for x in b.receive(f)]
    assert [f[42] for f in answers] == [ACK_ATOMIC] * 3
    origs = [struct.unpack(">Q", f[58:66])[0] for f in answers]        # after BTH + AETH
    assert origs == [0x0102030405060708, 0x0102030405060808, 0xAB]
    assert [int.from_bytes(f[51:54], "big") for f in answers] == [PSN0, PSN0 + 1, PSN0 + 2]
    assert b.read_mem(VA + 16, 8) == le(0xAB)
    for f in answers:
        a.receive(f)
    wcs = a.poll_send_cq()
    assert [(w.wr_id, w.opcode, w.status, w.data) for w in wcs] == [
        (1, WcOpcode.FETCH_ADD, WcStatus.SUCCESS, le(0x0102030405060708)),
        (2, WcOpcode.COMP_SWAP, WcStatus.SUCCESS, le(0x0102030405060808)),
        (3, WcOpcode.COMP_SWAP, WcStatus.SUCCESS, le(0xAB))]
    assert a.read_mem(RES, 8) == le(0x0102030405060708)                # the result landed
    assert b.counters["atomic_rx"] == 3 and a.counters["req_atomic_rx"] == 3


@pytest.mark.parametrize("case, status, counter", [
    ("misaligned", WcStatus.REM_INV_REQ_ERR, "err_atomic_align"),
    ("rkey", WcStatus.REM_ACCESS_ERR, "err_rkey"),
    ("bounds", WcStatus.REM_ACCESS_ERR, "err_bounds"),
    ("region", WcStatus.REM_ACCESS_ERR, "err_access"),
    ("qp", WcStatus.REM_INV_REQ_ERR, "err_unsupported"),
])
def test_refused_atomics_nak_and_change_nothing(case, status, counter):
    a, b = atomic_pair(strict=False,
                       mr_access=ATOMIC_MR & ~Access.REMOTE_ATOMIC if case == "region"
                       else ATOMIC_MR,
                       qp_access=ATOMIC_QP & ~Access.REMOTE_ATOMIC if case == "qp" else ATOMIC_QP)
    va = {"misaligned": VA + 4, "bounds": VA + 4096}.get(case, VA)
    a.post_send(QA, "FETCH_ADD", remote_addr=va, rkey=RKEY + (case == "rkey"), swap_add=1)
    Bench(a, b).run()
    assert [w.status for w in a.poll_send_cq()] == [status]
    assert b.counters[counter] == 1 and b.counters["atomic_rx"] == 0
    assert b.read_mem(VA, 4096) == bytes(4096)


def test_a_duplicate_is_answered_from_the_results_and_not_executed_again():
    a, b = atomic_pair(max_dest_rd_atomic=2)
    a.post_send(QA, "FETCH_ADD", remote_addr=VA, rkey=RKEY, swap_add=5)
    (req,) = a.next_frames()
    first = b.receive(req)
    again = b.receive(req)                           # the same request: a duplicate
    assert first[0][42:-4] == again[0][42:-4] and b.read_mem(VA, 8) == le(5)
    assert b.counters["atomic_dup"] == 1 and b.counters["atomic_rx"] == 1
    # the same PSN with other operands is not that request: dropped, not executed
    other = bytearray(req)
    other[70:78] = (9).to_bytes(8, "big")               # swap_add
    other[-4:] = icrc(bytes(other[14:-4]))             # (the changed frame's ICRC)
    assert b.receive(bytes(other)) == [] and b.counters["atomic_dup_drop"] == 1
    a.receive(first[0])
    assert a.receive(again[0]) == [] and a.counters["req_atomic_stale"] == 1
    assert [w.data for w in a.poll_send_cq()] == [le(0)]


def test_at_most_max_rd_atomic_atomics_are_outstanding():
    a, b = atomic_pair(max_rd_atomic=2)
    for k in range(6):
        a.post_send(QA, "FETCH_ADD", remote_addr=VA, rkey=RKEY, swap_add=1, wr_id=k)
    first = a.next_frames(0)
    assert len(first) == 2                              # two out, the others wait
    assert a.send_outstanding(QA) == 6 and not a.next_frames(0)
    bench = Bench(a, b)
    for f in first:
        bench.ab.send(f, 0)
    bench.run()
    assert a.counters["req_tx"] == 6
    assert [w.data for w in a.poll_send_cq()] == [le(k) for k in range(6)]


def counter_bench(n_qps, m, *, cas, seed):
    """N QPs of A each add 1 to the counter at VA of B M times, by FETCH_ADD or by a
    COMPARE_SWAP loop; returns the final value and the values each add saw."""
    a, b = atomic_pair(n_qps, timeout=6)
    bench = Bench(a, b, seed=seed, loss=0.05, dup=0.05, reorder=0.05)
    seen = []
    left = dict.fromkeys(range(n_qps), m)
    guess = dict.fromkeys(range(n_qps), 0)
    wr = iter(range(10**9))

    def post(k):
        if cas:
            a.post_send(QA + k, "COMPARE_SWAP", remote_addr=VA, rkey=RKEY, wr_id=next(wr),
                        compare=guess[k], swap_add=guess[k] + 1)
        else:
            a.post_send(QA + k, "FETCH_ADD", remote_addr=VA, rkey=RKEY, swap_add=1,
                        wr_id=next(wr))

    for k in range(n_qps):
        for _ in range(1 if cas else m):
            post(k)
    while True:
        bench.run()
        wcs = a.poll_send_cq()
        if not wcs:
            break
        for w in wcs:
            assert w.status == WcStatus.SUCCESS, w
            k = w.qpn - QA
            got = int.from_bytes(w.data, "little")
            if not cas:
                seen.append(got)
            elif got == guess[k]:                       # the swap took
                seen.append(got)
                left[k] -= 1
                guess[k] = got + 1
                if left[k]:
                    post(k)
            else:                                       # another QP was first: try from there
                guess[k] = got
                post(k)
    assert not a.send_outstanding()
    return int.from_bytes(b.read_mem(VA, 8), "little"), seen, a, b


@pytest.mark.parametrize("cas", [False, True], ids=["fetch_add", "compare_swap"])
def test_the_contended_counter(cas):
    n, m = 4, 40
    final, seen, a, b = counter_bench(n, m, cas=cas, seed=3)
    assert final == n * m
    assert sorted(seen) == list(range(n * m))           # N*M distinct values
    # the links lost and duplicated: duplicates reached B, and A resent
    assert b.counters["atomic_dup"] > 0 and a.counters["req_retx"] > 0
