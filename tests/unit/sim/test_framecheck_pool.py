"""The frame check in a worker process (rocegen.sim.testing.framecheck_pool): frames go through the
pool in order and are checked as the inline checker checks them, a bad frame fails at the next
drain with the inline checker's message, a connection-manager reply is matched with the request
queued before it, and the worker stops when the pool is closed or its input pipe closes."""

import pytest

from rocegen.sim.testing import framecheck_pool
from rocegen.sim.testing.framecheck import FrameChecker, FrameCheckError
from rocegen.sim.testing.framecheck_pool import FrameCheckPool, make_framecheck
from tests.unit.sim.test_framecheck import (
    CM_HOST_PORT,
    FPGA_IP,
    HOST_IP,
    OPEN,
    arp_reply,
    bth,
    cm_request,
    good_frames,
    open_exchange,
    reth,
    roce,
    udp_frame,
)


def bad_icrc_frame():
    return roce(bth(0x0A, ackreq=1) + reth(dlen=4) + b"abcd", bad_icrc=True)


@pytest.fixture
def pool():
    p = FrameCheckPool("pool")
    yield p
    p._stop()                           # without the drain: a test may leave a failure behind
    assert not p.running


def test_pool_counts_what_the_inline_checker_counts(pool):
    inline = FrameChecker("pool")
    frames = list(good_frames().values()) * 40 + [arp_reply()]     # several batches and a rest
    assert len(frames) > 3 * framecheck_pool.BATCH
    for f in frames:
        inline.check(f)
        pool.check(f)
    assert pool.counts == inline.counts
    assert pool.summary() == inline.summary()
    assert pool.seconds > 0


def test_bad_frame_fails_at_drain_with_the_inline_message(pool):
    frames = [*good_frames().values(), bad_icrc_frame(), arp_reply()]
    inline = FrameChecker("pool")
    with pytest.raises(FrameCheckError) as want:
        for f in frames:
            inline.check(f)
    for f in frames:
        pool.check(f)                   # fewer than a batch: nothing sent, nothing raised yet
    with pytest.raises(FrameCheckError) as got:
        pool.drain()
    assert str(got.value) == str(want.value)
    assert "BTH.icrc" in str(got.value) and f"frame {len(good_frames()) + 1} " in str(got.value)
    # the failure stays: the summary and more frames raise it again
    with pytest.raises(FrameCheckError, match="BTH.icrc"):
        pool.summary()
    with pytest.raises(FrameCheckError, match="BTH.icrc"):
        pool.check(arp_reply())


def test_bad_frame_fails_a_later_check_once_the_worker_reported_it(pool):
    pool.check(bad_icrc_frame())
    pool._flush()
    with pool._cond:                    # the worker's answer to that batch
        pool._cond.wait_for(lambda: pool._done == pool._sent)
    with pytest.raises(FrameCheckError, match="BTH.icrc"):
        pool.check(arp_reply())


def test_cm_reply_is_checked_after_the_request_queued_before_it(pool):
    _, reply = open_exchange()
    request = udp_frame(HOST_IP, FPGA_IP, CM_HOST_PORT, 17185, cm_request(1, **OPEN))
    pool.request(request)
    pool.check(reply)
    assert pool.counts["cm_reply"] == 1
    # answered: the same reply again answers no request (the order reaches the worker)
    pool.check(reply)
    with pytest.raises(FrameCheckError, match="answers no request seen"):
        pool.drain()


def test_cm_reply_before_its_request_fails(pool):
    _, reply = open_exchange()
    pool.check(reply)
    pool.request(udp_frame(HOST_IP, FPGA_IP, CM_HOST_PORT, 17185, cm_request(1, **OPEN)))
    with pytest.raises(FrameCheckError, match="answers no request seen"):
        pool.drain()


def test_close_stops_the_worker_and_raises_a_pending_failure():
    p = FrameCheckPool("pool")
    p.check(arp_reply())
    p.close()
    assert not p.running and p._proc.returncode == 0
    p.close()                           # again: nothing
    with pytest.raises(RuntimeError, match="closed"):
        p.check(arp_reply())
    q = FrameCheckPool("pool")
    q.check(bad_icrc_frame())
    with pytest.raises(FrameCheckError, match="BTH.icrc"):
        q.close()
    assert not q.running


def test_worker_exits_when_its_input_pipe_closes():
    p = FrameCheckPool("pool")
    p.check(arp_reply())
    p.drain()
    p._proc.stdin.close()               # as when the simulator process dies
    assert p._proc.wait(timeout=60) == 0
    p._closed = True


def test_a_dead_worker_is_reported(pool):
    pool._proc.kill()
    pool._proc.wait()
    for _ in range(framecheck_pool.BATCH):
        try:
            pool.check(arp_reply())
        except RuntimeError:
            break
    with pytest.raises(RuntimeError, match="worker stopped"):
        pool.drain()


def test_make_framecheck_mode(monkeypatch):
    monkeypatch.setenv("ROCEGEN_FRAMECHECK", "inline")
    assert type(make_framecheck("x")) is FrameChecker
    monkeypatch.setenv("ROCEGEN_FRAMECHECK", "threads")
    with pytest.raises(ValueError, match="auto, pool, inline"):
        make_framecheck("x")
    monkeypatch.setenv("ROCEGEN_FRAMECHECK", "pool")
    p = make_framecheck("x")
    assert isinstance(p, FrameCheckPool)
    p.close()
    monkeypatch.delenv("ROCEGEN_FRAMECHECK")
    for busy, want in ((True, FrameChecker), (False, FrameCheckPool)):
        monkeypatch.setattr(framecheck_pool.os, "getloadavg", lambda busy=busy: (
            5.0 if busy else 0.2, 0, 0))
        monkeypatch.setattr(framecheck_pool.os, "sched_getaffinity", lambda pid: {0, 1})
        c = make_framecheck("x")
        assert type(c) is want
        if want is FrameCheckPool:
            c.close()
