"""The endpoint as RDMA READ requester (``RoceEndpoint(responder=True)``, READs on by default),
whole, in Verilator (tests/cocotb/roce_read_requester.py), against the host NIC model as responder:
READs of every shape (zero length, one byte, ONLY, FIRST/MIDDLE/LAST, unaligned local
addresses) mixed with WRITEs and SENDs on one QP complete in order with the host's bytes in
local memory, on chip and AXI4; no more than the QP's READ limit are ever outstanding (the host
refuses more); lost, truncated, extra and spoiled responses are recovered by reissues or
dropped and counted; a NAK ends the READ with an error completion; nothing lands outside a
READ's local target.

Every scenario of a build runs in one cocotb run, one after the other on one simulator (QP 0
opened afresh, a fresh host, local memory refilled): the responder builds the other benches
share (on chip at W = 64 and 512, AXI4 at 512), with the path MTU, the QP's timeout, the READ
hole wait and (``rd_limit``) the QP's READ limit set at run time. Each test checks every
scenario of its build and tier and reports each failure with the scenario's name. What the
Amaranth simulator still proves: ``tests/unit/endpoint/test_endpoint_read_requester.py`` (a build
without READs)."""

import base64
import json
import random

import pytest

from bench.bench_isolation import CONFIGS
from rocegen.gateware.roce.layouts import CplStatus, WrOpcode
from rocegen.sim.testing.cocotb_runner import responder_sim_config, run_scenarios

#: Local bytes the bench takes after each scenario (from address 0): the original test's whole
#: local memory.
IMAGE = 1 << 16
#: The host's region the endpoint READs and WRITEs (virtual address 0).
HOST_BYTES = 1 << 16
#: Local bytes the READs may land in.
TARGET = (0x2000, 0x6000)
PATTERN = 0x5A
#: The READ hole wait the bench sets, in microseconds: long enough for the round trip of the
#: bench's link (a few hundred cycles), far shorter than the QP timeouts the scenarios set
#: (65 us and more), and short to simulate (the generator's default is sized for real links).
HOLE_WAIT = 8


def read(local, remote, length):
    return {"opcode": WrOpcode.READ, "local_addr": local, "remote_offset": remote,
            "length": length}


def kib_reads(count):
    """``count`` READs of 1 KiB, READ k from remote offset k KiB to the target's k-th KiB."""
    lo, _ = TARGET
    return [read(lo + 0x400 * k, 0x400 * k, 0x400) for k in range(count)]


def all_ok(r, wrs):
    """Every work request of ``wrs`` completed OK, in order, and local memory is right."""
    assert r.cpls == [(k, CplStatus.OK) for k in range(len(wrs))]
    check_image(r.image, wrs, r.cpls, r.remote)


def check_image(image, wrs, cpls, remote):
    """Local memory is what the READs that completed OK put there, in the order they were
    posted (a later READ's target may overlap an earlier one's); every byte outside the
    READs' targets is untouched (the bytes of a READ that failed may hold anything of it)."""
    status = dict(cpls)
    expected = bytearray([PATTERN]) * IMAGE
    loose = bytearray(IMAGE)
    for k, w in enumerate(wrs):
        if w["opcode"] != WrOpcode.READ or not 0 <= w["local_addr"] < IMAGE:
            continue
        a, n, r = w["local_addr"], min(w["length"], IMAGE - w["local_addr"]), w["remote_offset"]
        if status[k] == CplStatus.OK:
            expected[a:a + n] = remote[r:r + n]
            loose[a:a + n] = bytes(n)
        else:
            loose[a:a + n] = b"\1" * n
    for a in range(IMAGE):
        if not loose[a] and image[a] != expected[a]:
            raise AssertionError(f"local byte {a:#x} is {image[a]:#04x}, not {expected[a]:#04x}")


class Result:
    """What the bench reports of a scenario: ``cpls`` ((wr_id, CplStatus) in completion
    order), ``image`` (local memory from 0), ``host`` (the host's counters), ``region`` (the
    host's region after the scenario), ``remote`` (before it), ``stats`` (the counters' rise),
    ``links`` (the links' counters, each way)."""

    def __init__(self, raw, seed):
        self.cpls = [(k, CplStatus(s)) for k, s in raw["cpls"]]
        self.image = base64.b64decode(raw["image"])
        self.region = base64.b64decode(raw["host_region"])
        self.remote = random.Random(seed).randbytes(HOST_BYTES)     # as the bench drew it
        self.host = raw["host"]
        self.stats = raw["stats"]
        self.cycles = raw["cycles"]
        self.links = raw["links"]


# ------------------------------------------------------------------------------ scenarios
# Each returns (scenario for the bench, check of its Result); the check holds the original
# test's assertions.

def reads_mixed_with_writes(width, pmtu):
    rng = random.Random(width + pmtu)
    lo, hi = TARGET
    wrs = [read(lo, 0, 0), read(lo + 1, 5, 1), read(lo + 3, 0x100, pmtu),
           read(lo + 0x1005, 0x333, 3 * pmtu + 7), read(lo + 0x2000, 0x1000, 2 * pmtu),
           {"opcode": WrOpcode.WRITE, "local_addr": 0, "remote_offset": 0x8000,
            "length": 2 * pmtu + 5},
           read(lo + 0x3001, 0x8000, 2 * pmtu + 5),     # reads back what the WRITE put there
           {"opcode": WrOpcode.SEND, "local_addr": 0, "remote_offset": 0, "length": 100}]
    for _ in range(14):
        n = rng.randrange(1, 3 * pmtu)
        wrs.append(read(rng.randrange(lo, hi - n), rng.randrange(HOST_BYTES // 2 - n), n))

    def check(r):
        assert r.cpls == [(k, CplStatus.OK) for k in range(len(wrs))]
        # (the READ of the WRITE's bytes: the host's region after the WRITE)
        remote = bytearray(r.remote)
        n = wrs[5]["length"]
        assert r.region[0x8000:0x8000 + n] != remote[0x8000:0x8000 + n]
        remote[0x8000:0x8000 + n] = r.region[0x8000:0x8000 + n]
        check_image(r.image, wrs, r.cpls, remote)
        reads = [w for w in wrs if w["opcode"] == WrOpcode.READ]
        assert r.stats["rd_done"] == len(reads)
        assert r.stats["rd_good"] == sum(max(1, -(-w["length"] // pmtu)) for w in reads)
        assert r.stats["rd_gap"] == r.stats["rd_reissues"] == 0
        assert r.stats["roce_cpl_ok"] == len(wrs)
        assert r.host["read_rx"] == len(reads)
    return dict(wrs=wrs, pmtu=pmtu, seed=width,
                stats=("rd_done", "rd_good", "rd_gap", "rd_reissues", "roce_cpl_ok")), check


def outstanding_reads_bounded(max_rd, host_rd):
    """30 READs posted at once: the host (max_dest_rd_atomic) would NAK one beyond its queue.
    The QP's READ limit ``max_rd`` is set at run time (the build's ``max_rd_atomic`` is 16)."""
    wrs = kib_reads(30)

    def check(r):
        all_ok(r, wrs)
        assert r.host["err_rd_atomic"] == 0
    return dict(wrs=wrs, pmtu=1024, host_rd=host_rd,
                **({"rd_limit": max_rd} if max_rd != 16 else {})), check


def spoiled_responses_are_recovered(kind, kw):
    """One spoiled READ of three: the bad response (or the one too many) is dropped and
    counted, the rest of the READ is asked for again (or the timeout reissues it), every READ
    completes OK with the host's bytes, nothing lands outside the targets."""
    pmtu = 256
    lo, _ = TARGET
    wrs = [read(lo, 0x10, 4 * pmtu + 3), read(lo + 0x1003, 0x2000, 3 * pmtu),
           read(lo + 0x2001, 0x3000, pmtu + 1)]

    def check(r):
        stats = r.stats
        all_ok(r, wrs)
        assert r.host["read_fault_tx"] == 1
        assert stats["rd_done"] == 3
        dropped = stats["rd_gap"] + stats["rd_opcode"] + stats["rd_length"] + \
            stats["rd_duplicate"] + stats["rd_unknown"]
        if kind != "drop" or kw["packet"] != -1:
            assert dropped >= 1, stats
        if kind != "extra":                 # (a response too many spoils nothing that was due)
            assert stats["rd_reissues"] + stats["roce_timeouts"] >= 1, stats
    return dict(wrs=wrs, pmtu=pmtu, faults=[(kind, {**kw, "count": 1})],
                stats=("rd_gap", "rd_opcode", "rd_length", "rd_duplicate", "rd_unknown",
                       "rd_reissues", "roce_timeouts", "rd_done")), check


def lost_response_asked_for_alone(packet):
    """A response of the first of 16 READs outstanding lost: the responses of the READs after it
    are placed as they come, the READ with the loss is asked for again from the lost response
    by one request (the host executes it as a duplicate READ), nothing else is sent again (no
    rewind, no timeout: the timeout covers the responses of every READ outstanding, as the
    READ requester needs); every READ completes OK with the host's bytes, each response of the
    host's written once."""
    wrs = kib_reads(16)

    def check(r):
        stats = r.stats
        all_ok(r, wrs)
        assert stats["rd_hole"] == stats["rd_reissues"] == 1, stats
        assert stats["roce_rewinds"] == stats["roce_timeouts"] == 0, stats
        assert r.host["read_dup"] == 1 and r.host["read_rx"] == 16
        assert stats["rd_ahead"] >= 4 and stats["rd_done"] == 16, stats
        # (a loss of the READ's last response: the next READ's first opens the hole, written)
        last = packet % 4 == 3
        assert stats["rd_good"] + stats["rd_ahead"] + last == 16 * 4, stats
        assert stats["rd_gap"] == (0 if last else 2 - packet % 4), stats
    return dict(wrs=wrs, pmtu=256, faults=[("drop", {"packet": packet, "count": 1})], timeout=4,
                stats=("rd_hole", "rd_ahead", "rd_gap", "rd_reissues", "roce_rewinds",
                       "roce_timeouts", "rd_done", "rd_good")), check


def lost_hole_request_asked_again(lost):
    """The hole's own request loses a response (or is lost itself): nothing later gives it
    away, and the retry engine's timer hears nothing of a QP with a hole open; the hole timer
    asks for the hole again after the hole wait, long before the QP's timeout (131 us): every
    READ completes OK, with no rewind and no timeout."""
    wrs = kib_reads(16)
    faults = [("drop", {"packet": 1, "count": 1})]
    if lost == "response":
        # (the next 15 READs the host executes unspoilt, then the hole's request loses its
        # second response)
        faults += [("drop", {"packet": 99, "count": 15}), ("drop", {"packet": 1, "count": 1})]

    def check(r):
        stats = r.stats
        all_ok(r, wrs)
        assert stats["rd_hole"] == stats["rd_reask"] == 1 and stats["rd_stall"] == 0, stats
        assert stats["roce_rewinds"] == stats["roce_timeouts"] == 0, stats
        assert stats["rd_done"] == 16, stats
        assert r.host["read_dup"] == (2 if lost == "response" else 1)
    return dict(wrs=wrs, pmtu=256, faults=faults, timeout=5,
                drop_repeats=[0] if lost == "request" else [],
                stats=("rd_hole", "rd_reask", "rd_stall", "rd_reissues", "roce_rewinds",
                       "roce_timeouts", "rd_done")), check


def last_request_lost():
    """The last of 16 READ requests lost: no later request makes the host NAK it and no later
    response shows it; after the hole wait with no response the QP goes back to it (one
    rewind, long before the QP's timeout of 131 us): every READ completes OK."""
    wrs = kib_reads(16)

    def check(r):
        stats = r.stats
        all_ok(r, wrs)
        assert stats["rd_stall"] == stats["roce_rewinds"] == 1, stats
        assert stats["roce_timeouts"] == stats["rd_hole"] == stats["rd_reask"] == 0, stats
        assert r.host["read_rx"] == 16
    return dict(wrs=wrs, pmtu=256, timeout=5, drop_requests=[15],
                stats=("rd_stall", "rd_reask", "rd_hole", "roce_rewinds", "roce_timeouts")), check


def lost_requests_resent_with_the_table_full():
    """READ requests lost on the way to the host while 16 READs are outstanding (the QP starts
    no more): the host NAKs the gap, and the QP resends from it although its READ table is
    full; every READ completes."""
    wrs = kib_reads(30)

    def check(r):
        all_ok(r, wrs)
        assert r.host["nak_seq_tx"] >= 1 and r.stats["roce_rewinds"] >= 2
        assert r.stats["rd_done"] == 30
    return dict(wrs=wrs, pmtu=1024, drop_requests=[4, 21],
                stats=("roce_rewinds", "rd_done")), check


def random_loss():
    """2 % of the frames lost each way, 16 READs outstanding: every READ completes OK with the
    host's bytes. (Seed 7: the links lose frames both ways, READ requests among them, which only
    a rewind recovers; with most seeds the few losses of these ~100 frames are responses, which
    the hole requests recover without one.)"""
    lo, _ = TARGET
    n = 48
    wrs = [read(lo + 0x100 * (k % 32), 0x100 * k, 0x100 + k) for k in range(n)]

    def check(r):
        all_ok(r, wrs)
        assert r.links["to_nic"]["dropped"] and r.links["from_nic"]["dropped"], r.links
        assert r.stats["roce_rewinds"] >= 1
    return dict(wrs=wrs, pmtu=256, loss=0.02, seed=7, stats=("roce_rewinds",)), check


def nak_and_local_errors():
    """A READ outside the host's region: NAK remote access error, the READ completes with
    REMOTE_ACCESS and the QP's later work requests with FLUSHED. A READ whose local target
    runs past local memory (negative: from its end) is refused with LOCAL_LENGTH before
    anything is sent, one on a QP that was never opened with QP_NOT_READY."""
    lo, _ = TARGET
    wrs = [read(lo, 0, 64), read(-10, 0, 64), {**read(lo + 0x400, 0, 64), "qp": 1},
           read(lo + 0x100, HOST_BYTES - 8, 64), read(lo + 0x200, 0, 64)]

    def check(r):
        assert sorted(r.cpls) == [(0, CplStatus.OK), (1, CplStatus.LOCAL_LENGTH),
                                  (2, CplStatus.QP_NOT_READY), (3, CplStatus.REMOTE_ACCESS),
                                  (4, CplStatus.FLUSHED)]
        assert r.stats == {"roce_error_naks": 1, "rd_done": 1}
        assert all(b == PATTERN for b in r.image[lo + 0x100:lo + 0x300])
        assert all(b == PATTERN for b in r.image[lo + 0x400:lo + 0x440])
    return dict(wrs=wrs, pmtu=256, stats=("roce_error_naks", "rd_done")), check


#: Local bytes the atomics' operands and results are in (16 bytes each, a word apart).
ATOMIC_LOCAL = 0x8000


def endpoint_atomics(width, *, loss=0.0, seed=0, count=24):
    """The endpoint issues FETCH_ADDs and COMPARE_SWAPs (matching and not, an add that
    carries through 64 bits) into the host's memory, several on one target back to back and
    on neighbouring targets, among READs of the same bytes: every atomic completes OK in order,
    its original value (the host's model executing them in PSN order) is in local memory over
    its first operand, the compare operand untouched, and the host's memory ends as the model
    says. With ``loss``, frames are lost each way: the atomics and their answers that are lost
    are sent again with their PSNs, and the host (which keeps its last results) never executes
    one twice."""
    rng = random.Random(width * 3 + count)
    step = max(16, width // 8)
    remote = bytearray(random.Random(seed).randbytes(HOST_BYTES))     # as the bench draws it
    targets = [0x100, 0x108, 0x200, 0x3F8]
    wrs, pokes, want = [], [], {}
    for k in range(count):
        local = ATOMIC_LOCAL + k * step
        va = rng.choice(targets)
        if k == 2:                  # an add that carries out of the 64 bits: 5 is left
            va = 0x200
            op, add, cmp = "FETCH_ADD", (5 - int.from_bytes(remote[va:va + 8], "little")) % 2**64, 0
        elif rng.random() < 0.5:
            op, add, cmp = "FETCH_ADD", rng.choice([1, rng.getrandbits(64)]), 0
        else:
            now = int.from_bytes(remote[va:va + 8], "little")
            op, add, cmp = "COMPARE_SWAP", rng.getrandbits(64), \
                rng.choice([now, now, rng.getrandbits(64)])
        old = int.from_bytes(remote[va:va + 8], "little")
        new = (old + add) % 2**64 if op == "FETCH_ADD" else (add if old == cmp else old)
        remote[va:va + 8] = new.to_bytes(8, "little")
        want[k] = (local, old, cmp)
        wrs.append({"opcode": WrOpcode[op], "local_addr": local, "remote_offset": va,
                    "length": 8})
        pokes.append([local, base64.b64encode(add.to_bytes(8, "little") +
                                              cmp.to_bytes(8, "little")).decode()])
    # a READ of the targets behind them (answered after the atomics, in PSN order)
    lo, _ = TARGET
    wrs.append(read(lo, 0x100, 0x300))
    n = len(wrs)

    def check(r):
        assert r.cpls == [(k, CplStatus.OK) for k in range(n)]
        for k, (local, old, cmp) in want.items():
            got = int.from_bytes(r.image[local:local + 8], "little")
            assert got == old, f"atomic {k}: original {got:#x}, the host's model {old:#x}"
            assert r.image[local + 8:local + 16] == cmp.to_bytes(8, "little"), k
        assert r.region == bytes(remote)
        assert r.image[lo:lo + 0x300] == bytes(remote[0x100:0x400])
        assert r.host["atomic_rx"] == count          # each executed once by the host
        if loss:
            assert r.links["to_nic"]["dropped"] and r.links["from_nic"]["dropped"], r.links
            assert r.host["atomic_dup"] > 0, r.host     # answered again from its results
    sc = dict(wrs=wrs, pmtu=256, poke=pokes, seed=seed, stats=("roce_rewinds",))
    if loss:
        sc.update(loss=loss)
    return sc, check


def endpoint_contended_counter(width, qps=4, per_qp=24):
    """The contended counter the other way: ``qps`` endpoint QPs, each FETCH_ADD 1 to one
    8-byte counter in the host's memory ``per_qp`` times (their work requests interleaved):
    the counter ends ``qps * per_qp`` above where it was, and the values returned (in local
    memory) are each of the ``qps * per_qp`` before it once."""
    step = max(16, width // 8)
    counter = 0x800
    start = int.from_bytes(random.Random(0).randbytes(HOST_BYTES)[counter:counter + 8], "little")
    wrs, pokes = [], []
    for k in range(qps * per_qp):
        local = ATOMIC_LOCAL + k * step
        wrs.append({"opcode": WrOpcode.FETCH_ADD, "local_addr": local, "remote_offset": counter,
                    "length": 8, "qp": k % qps})
        pokes.append([local, base64.b64encode((1).to_bytes(8, "little") + bytes(8)).decode()])
    n = qps * per_qp

    def check(r):
        assert sorted(r.cpls) == [(k, CplStatus.OK) for k in range(n)]
        got = sorted(int.from_bytes(r.image[w["local_addr"]:w["local_addr"] + 8], "little")
                     for w in wrs)
        assert got == [(start + k) % 2**64 for k in range(n)], got[:8]
        final = int.from_bytes(r.region[counter:counter + 8], "little")
        assert final == (start + n) % 2**64
        assert r.host["atomic_rx"] == n
    return dict(wrs=wrs, pmtu=256, poke=pokes, qps=qps), check


def stream_doorbells(width):
    """The streaming front end's atomics: WRITE messages, each followed on the same QP by a
    16-byte FETCH_ADD message (its operands: add the WRITE's length, compare unused) on a
    counter in the host's memory, the doorbell of data that is there; then a COMPARE_SWAP that
    finds its compare value and one that does not. The host executes every atomic once, after
    the data before it, and its memory ends as a plain model of the messages says."""
    rng = random.Random(width + 5)
    remote = bytearray(random.Random(0).randbytes(HOST_BYTES))     # as the bench draws it
    counter, lock, other = 0x900, 0x908, 0x910

    def word(addr):
        return int.from_bytes(remote[addr:addr + 8], "little")

    def operands(swap_add, compare=0):
        return base64.b64encode(swap_add.to_bytes(8, "little") + compare.to_bytes(8, "little")) \
            .decode()
    stream, offset = [], 0x1000
    for _ in range(4):
        n = rng.choice([1, width // 8, 300, rng.randrange(1, 2000)])
        data = rng.randbytes(n)
        stream.append(["WRITE", offset, base64.b64encode(data).decode()])
        remote[offset:offset + n] = data
        offset += n + rng.randrange(8)
        stream.append(["FETCH_ADD", counter, operands(n)])
        remote[counter:counter + 8] = ((word(counter) + n) % 2**64).to_bytes(8, "little")
    swap = rng.getrandbits(64)
    stream.append(["COMPARE_SWAP", lock, operands(swap, word(lock))])
    remote[lock:lock + 8] = swap.to_bytes(8, "little")
    stream.append(["COMPARE_SWAP", other, operands(rng.getrandbits(64), word(other) ^ 1)])

    def check(r):
        assert r.cpls == []
        assert r.host["atomic_rx"] == 6, r.host
        assert r.region == bytes(remote)
    return dict(wrs=[], pmtu=256, stream=stream), check


def atomic_errors():
    """An atomic whose local operands are not at a word address: LOCAL_ALIGN, nothing sent;
    one on a host target that is not 8-byte aligned: the host answers NAK invalid request, the
    atomic completes REMOTE_INVALID and the QP's later work requests FLUSHED."""
    wrs = [{"opcode": WrOpcode.FETCH_ADD, "local_addr": ATOMIC_LOCAL + 4, "remote_offset": 0,
            "length": 8},
           {"opcode": WrOpcode.FETCH_ADD, "local_addr": ATOMIC_LOCAL, "remote_offset": 0x104,
            "length": 8},
           {"opcode": WrOpcode.COMPARE_SWAP, "local_addr": ATOMIC_LOCAL + 0x40,
            "remote_offset": 0x100, "length": 8}]

    def check(r):
        assert sorted(r.cpls) == [(0, CplStatus.LOCAL_ALIGN), (1, CplStatus.REMOTE_INVALID),
                                  (2, CplStatus.FLUSHED)]
        assert r.region == r.remote
    return dict(wrs=wrs, pmtu=256), check


SPOILED = [("drop", {"packet": 1}, 64), ("drop", {"packet": 0}, 512), ("drop", {"packet": -1}, 64),
           ("truncate", {}, 512), ("extra", {}, 64), ("opcode", {"packet": 1, "value": 0x10}, 512),
           ("length", {"packet": 0, "value": -4}, 64), ("length", {"packet": -1, "value": 8}, 512),
           ("psn", {"packet": 1, "value": 1}, 64), ("psn", {"packet": 2, "value": -1}, 512)]


def plan():
    """Every scenario: (build, full tier, name, (scenario, check))."""
    out = [("onchip-64", False, "reads_mixed_with_writes[64-256-onchip]",
            reads_mixed_with_writes(64, 256)),
           ("onchip-512", True, "reads_mixed_with_writes[512-1024-onchip]",
            reads_mixed_with_writes(512, 1024)),
           ("axi4-512", False, "reads_mixed_with_writes[512-1024-axi4]",
            reads_mixed_with_writes(512, 1024)),
           ("onchip-512", True, "outstanding_reads_bounded[16-16]",
            outstanding_reads_bounded(16, 16))]
    for kind, kw, width in SPOILED:
        out.append((f"onchip-{width}", False,
                    f"spoiled_responses_are_recovered[{kind}-{kw}-{width}]",
                    spoiled_responses_are_recovered(kind, kw)))
    out += [("onchip-64", False, "lost_response_asked_for_alone[64-1]",
             lost_response_asked_for_alone(1)),
            ("onchip-512", False, "lost_response_asked_for_alone[512--1]",
             lost_response_asked_for_alone(-1)),
            ("onchip-64", False, "lost_hole_request_asked_again[64-response]",
             lost_hole_request_asked_again("response")),
            ("onchip-512", False, "lost_hole_request_asked_again[512-request]",
             lost_hole_request_asked_again("request")),
            ("onchip-64", False, "last_request_lost[64]", last_request_lost()),
            ("onchip-512", True, "last_request_lost[512]", last_request_lost()),
            ("onchip-512", False, "lost_requests_resent_with_the_table_full",
             lost_requests_resent_with_the_table_full()),
            ("onchip-64", False, "random_loss", random_loss()),
            ("onchip-64", False, "nak_and_local_errors[64]", nak_and_local_errors()),
            ("onchip-64", False, "endpoint_atomics[64]", endpoint_atomics(64)),
            ("onchip-64", False, "endpoint_atomics_lossy[64]",
             endpoint_atomics(64, loss=0.08, seed=5, count=40)),
            ("onchip-64", False, "endpoint_contended_counter[64]",
             endpoint_contended_counter(64)),
            ("onchip-64", False, "atomic_errors[64]", atomic_errors()),
            ("onchip-64", False, "stream_doorbells[64]", stream_doorbells(64)),
            ("onchip-512", False, "endpoint_atomics[512]", endpoint_atomics(512)),
            ("axi4-512", False, "endpoint_atomics[512-axi4]", endpoint_atomics(512)),
            ("axi4-512", False, "stream_doorbells[512-axi4]", stream_doorbells(512)),
            ("onchip-512", True, "nak_and_local_errors[512]", nak_and_local_errors()),
            # (last of its build: the READ limit it sets is set back after it, all the same)
            ("onchip-512", False, "outstanding_reads_bounded[4-4]",
             outstanding_reads_bounded(4, 4))]
    return out


def for_bench(name, sc):
    """The scenario as the bench takes it (JSON)."""
    wrs = [{**w, "opcode": w["opcode"].name} for w in sc["wrs"]]
    return {"name": name, **sc, "wrs": wrs, "stats": list(sc.get("stats", ()))}


def run_build(build, full, tmp_path):
    """Run the scenarios of ``build`` and tier ``full`` in one cocotb run; check each, and fail
    with every scenario's failure."""
    chosen = [(name, sc, check) for b, f, name, (sc, check) in plan() if b == build and f == full]
    params = dict(CONFIGS[build])
    cfg = responder_sim_config(params.pop("width"), **params)
    tier = "full" if full else "gate"
    run_scenarios(cfg, "tests.cocotb.roce_read_requester", f"read-requester-{build}-{tier}",
                  chosen, tmp_path / "read_requester.json",
                  {"READ_SCENARIOS": json.dumps([for_bench(name, sc) for name, sc, _ in chosen])},
                  lambda raw, sc: Result(raw, sc.get("seed", 0)))


@pytest.mark.parametrize("build", ["onchip-64", "onchip-512", "axi4-512"])
def test_read_requester(build, tmp_path):
    run_build(build, False, tmp_path)


@pytest.mark.full
@pytest.mark.parametrize("build", ["onchip-512"])
def test_read_requester_full(build, tmp_path):
    run_build(build, True, tmp_path)
