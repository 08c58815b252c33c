"""The READ requester's reference model (:mod:`rocegen.sim.models.read.read_requester`) on cases worked
out by hand from the wire notes ("RDMA READ", "Requester reliability rules") and rxe: every
verdict, the writes, the events for the retry engine, completions, reissues and the per-QP
limit of outstanding READs."""

import pytest

from rocegen.sim.models.read.read_requester import (
    HOLE_QUEUE,
    AckEvent,
    ReadRequesterModel,
    Reissue,
)

FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10
LOCAL, VA, RKEY = 0x1003, 0x7F00_0000_0105, 0xBEEF
DATA = bytes(range(256)) * 4


def model_with_read(length=1000, first=100, pmtu=256, max_rd=16):
    m = ReadRequesterModel(2, max_rd)
    assert m.issue(1, wr_id=7, local_addr=LOCAL, remote_va=VA, rkey=RKEY, length=length,
                   first=first, pmtu=pmtu)
    return m


def test_good_responses_in_order():
    m = model_with_read()
    out = [m.response(1, FIRST, 100, DATA[:256], msn=3),
           m.response(1, MIDDLE, 101, DATA[256:512]),
           m.response(1, MIDDLE, 102, DATA[512:768]),
           m.response(1, LAST, 103, DATA[768:1000], syndrome=0x05, msn=4)]
    assert [o.verdict for o in out] == ["good"] * 4
    assert [o.writes for o in out] == [((LOCAL + 256 * k, DATA[256 * k:min(1000, 256 * k + 256)]),)
                                       for k in range(4)]
    assert [o.ack for o in out] == [AckEvent(1, 0x1F, 100, 3), AckEvent(1, 0x1F, 101, 0),
                                    AckEvent(1, 0x1F, 102, 0), AckEvent(1, 0x1F, 103, 4)]
    assert [o.done for o in out] == [(), (), (), (7,)]
    assert m.outstanding(1) == () and m.counters["good"] == 4


def test_go_back_n_reissue_and_restart():
    """A response after the head READ that is not the next READ's first: the head READ is asked
    again from the expected PSN, with every later request (go-back-N)."""
    m = model_with_read()
    m.issue(1, wr_id=8, local_addr=0x9000, remote_va=VA + 4000, rkey=RKEY, length=600,
            first=104, pmtu=256)
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "good"
    gap = m.response(1, MIDDLE, 105, DATA[:256])            # in the next READ, not its first
    assert gap.verdict == "gap" and gap.writes == ()
    assert gap.ack == AckEvent(1, 0x60, 101, 0)
    assert gap.gap == Reissue(1, 7, 101, 256, LOCAL + 256, VA + 256, RKEY, 744)
    # an answer to the first request still fits (MIDDLE after the first PSN) ...
    assert m.response(1, MIDDLE, 101, DATA[256:512]).verdict == "good"
    # ... a FIRST where no request started does not, until the reissue from there is sent
    assert m.response(1, FIRST, 102, DATA[512:768]).verdict == "opcode"
    m.issue(1, wr_id=7, local_addr=LOCAL, length=1000, first=100, pmtu=256, new=False, psn=102)
    assert m.response(1, FIRST, 102, DATA[512:768]).verdict == "good"
    last = m.response(1, LAST, 103, DATA[768:1000])
    assert (last.verdict, last.done) == ("good", (7,))
    # a reissue from the last PSN makes an ONLY response right there
    m.issue(1, wr_id=8, local_addr=0, length=600, first=104, pmtu=256, new=False, psn=106)
    assert m.response(1, FIRST, 104, DATA[:256]).verdict == "good"
    assert m.response(1, MIDDLE, 105, DATA[:256]).verdict == "good"
    assert m.response(1, ONLY, 106, DATA[:88]).done == (8,)


def test_hole_in_the_head_read():
    """A response after a lost one in the head READ: the rest of that READ is a hole, asked for
    again alone (``send``: the later READs are not); its responses after the gap are dropped
    (the request asks for them again); the next READ's responses are written as they come (the
    front); the request's responses fill the hole, which closes with one ACK of the PSN before
    the front."""
    m = model_with_read()
    m.issue(1, wr_id=8, local_addr=0x9000, remote_va=VA + 4000, rkey=RKEY, length=600,
            first=104, pmtu=256)
    assert m.response(1, FIRST, 100, DATA[:256], msn=3).verdict == "good"
    hole = m.response(1, MIDDLE, 102, DATA[512:768])
    assert (hole.verdict, hole.ack, hole.writes) == ("hole", None, ())
    assert hole.gap == Reissue(1, 7, 101, 256, LOCAL + 256, VA + 256, RKEY, 744, True)
    assert m.expected(1) == 101 and m.front(1) == 104
    assert m.response(1, LAST, 103, DATA[768:1000]).verdict == "gap"   # in the hole
    ahead = m.response(1, FIRST, 104, DATA[:256], msn=6)
    assert (ahead.verdict, ahead.ack, ahead.writes) == ("ahead", None, ((0x9000, DATA[:256]),))
    # 105 lost: the rest of that READ is one more hole, asked for again
    hole2 = m.response(1, LAST, 106, DATA[:88])
    assert (hole2.verdict, hole2.writes) == ("hole", ())
    assert hole2.gap == Reissue(1, 8, 105, 256, 0x9100, VA + 4256, RKEY, 344, True)
    assert m.response(1, MIDDLE, 104, DATA[:256]).verdict == "duplicate"
    assert m.response(1, MIDDLE, 105, DATA[:256]).verdict == "duplicate"   # a later hole
    # the request from 101: FIRST there, then the rest of the READ
    assert m.response(1, MIDDLE, 101, DATA[256:511]).verdict == "length"
    out = [m.response(1, FIRST, 101, DATA[256:512]), m.response(1, MIDDLE, 102, DATA[512:768])]
    assert [(o.verdict, o.ack, o.done) for o in out] == [("good", None, ())] * 2
    fill = m.response(1, LAST, 103, DATA[768:1000])
    # (the next hole is the current one: the ACK of the PSN before it)
    assert (fill.verdict, fill.ack, fill.done) == ("good", AckEvent(1, 0x1F, 104, 6), (7,))
    assert fill.writes == ((LOCAL + 768, DATA[768:1000]),)
    assert m.expected(1) == 105 and m.front(1) == 107
    assert m.response(1, ONLY, 105, DATA[:256]).verdict == "opcode"      # not the last
    assert m.response(1, FIRST, 105, DATA[:256]).verdict == "good"
    last = m.response(1, LAST, 106, DATA[:88])
    assert (last.verdict, last.ack, last.done) == ("good", AckEvent(1, 0x1F, 106, 6), (8,))
    assert m.front(1) is None and m.outstanding(1) == ()
    c = m.counters
    assert (c["good"], c["hole"], c["ahead"], c["opcode"], c["length"]) == (6, 2, 1, 1, 1)


def test_hole_of_a_whole_read():
    """READs of one PSN each: a lost response makes the next READ's the front, written; the
    READs after it are placed as they come, and leave together when the hole is filled."""
    m = ReadRequesterModel(1)
    for n in range(4):
        m.issue(0, wr_id=n, local_addr=0x100 * n, remote_va=0x8000 + 0x100 * n, rkey=RKEY,
                length=0x80, first=10 + n, pmtu=256)
    hole = m.response(0, ONLY, 11, DATA[:0x80])
    assert hole.verdict == "hole" and hole.writes == ((0x100, DATA[:0x80]),)
    assert hole.gap == Reissue(0, 0, 10, 0, 0, 0x8000, RKEY, 0x80, True)
    assert m.response(0, ONLY, 12, DATA[:0x80]).verdict == "ahead"
    assert m.response(0, ONLY, 11, DATA[:0x80]).verdict == "duplicate"    # before the front
    assert m.response(0, ONLY, 13, DATA[:0x7F]).verdict == "length"
    assert m.response(0, ONLY, 13, DATA[:0x80], msn=9).verdict == "ahead"
    fill = m.response(0, ONLY, 10, DATA[:0x80])
    assert (fill.verdict, fill.ack, fill.done) == ("good", AckEvent(0, 0x1F, 13, 9), (0, 1, 2, 3))
    assert m.outstanding(0) == () and not m.full(0)
    # a response of the READ after the next: go-back-N
    for n in range(3):
        m.issue(0, wr_id=n, local_addr=0, length=0x80, first=14 + n, pmtu=256)
    gap = m.response(0, ONLY, 16, DATA[:0x80])
    assert gap.verdict == "gap" and gap.ack == AckEvent(0, 0x60, 14, 0) and not gap.gap.send


def test_hole_timer():
    """The hole timer of a QP with a hole open asks for the current hole again, from the
    expected PSN (FIRST right there from then on); with READs outstanding and no hole it goes
    back to the expected PSN (go-back-N, unless a poke expired it); with none it does
    nothing."""
    m = model_with_read()
    m.issue(1, wr_id=8, local_addr=0x9000, remote_va=VA + 4000, rkey=RKEY, length=600,
            first=104, pmtu=256)
    t = m.hole_timer(1)
    assert (t.verdict, t.ack, t.writes) == ("stall", AckEvent(1, 0x60, 100, 0), ())
    assert t.gap == Reissue(1, 7, 100, 0, LOCAL, VA, RKEY, 1000, False)
    assert m.hole_timer(1, poked=True).verdict == "idle"
    # (again, with no response since: the go-back-N brought nothing; a request of its own)
    t = m.hole_timer(1, again=True)
    assert (t.verdict, t.ack) == ("stall", None)
    assert t.gap == Reissue(1, 7, 100, 0, LOCAL, VA, RKEY, 1000, True)
    assert m.hole_timer(0).verdict == "idle" and m.hole_timer(5).verdict == "idle"
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "good"
    hole = m.response(1, MIDDLE, 102, DATA[512:768])             # 101 lost: the hole
    assert hole.gap == Reissue(1, 7, 101, 256, LOCAL + 256, VA + 256, RKEY, 744, True)
    # the hole's request brings 101; 102 is lost: only 103 comes, dropped in the hole
    assert m.response(1, FIRST, 101, DATA[256:512]).verdict == "good"
    assert m.response(1, LAST, 103, DATA[768:1000]).verdict == "gap"
    for poked in (False, True):
        t = m.hole_timer(1, poked=poked)
        assert (t.verdict, t.ack, t.writes) == ("reask", None, ())
        assert t.gap == Reissue(1, 7, 102, 512, LOCAL + 512, VA + 512, RKEY, 488, True)
    assert m.expected(1) == 102 and m.front(1) == 104
    # that request starts FIRST at 102 and fills the hole
    assert m.response(1, FIRST, 102, DATA[512:768]).verdict == "good"
    fill = m.response(1, LAST, 103, DATA[768:1000])
    assert (fill.verdict, fill.ack, fill.done) == ("good", AckEvent(1, 0x1F, 103, 0), (7,))
    for n in range(3):
        assert m.response(1, (FIRST, MIDDLE, LAST)[n], 104 + n,
                          DATA[:256] if n < 2 else DATA[:88]).verdict == "good"
    assert m.hole_timer(1).verdict == "idle"
    assert (m.counters["reask"], m.counters["stall"], m.counters["idle"]) == (2, 2, 4)


def test_pokes():
    """Losses in a hole's own request that a later response shows expire the hole timer at once
    (``poke``): a response of the request after its lost one (not while original responses of
    the head READ may still come, nor while the timer's request is on its way), and the first
    response of a queued hole's request while the current hole waits; a hole whose responses
    came while the one before it waited expires the timer when it becomes the current one."""
    m = model_with_read()                                        # 100..103
    m.issue(1, wr_id=8, local_addr=0x9000, remote_va=VA + 4000, rkey=RKEY, length=600,
            first=104, pmtu=256)                                 # 104..106
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "good"
    hole = m.response(1, MIDDLE, 102, DATA[512:768])             # 101 lost
    assert (hole.verdict, hole.poke) == ("hole", False)
    # an original after the gap: no poke (the hole's request brings it again)
    assert (m.response(1, LAST, 103, DATA[768:1000]).poke, m.counters["gap"]) == (False, 1)
    assert m.response(1, FIRST, 104, DATA[:256]).verdict == "ahead"
    hole2 = m.response(1, LAST, 106, DATA[:88])                  # 105 lost: queued
    assert (hole2.verdict, hole2.poke) == ("hole", False)
    # the hole's request lost 101: its 102 shows it (the originals are over)
    gap = m.response(1, MIDDLE, 102, DATA[512:768])
    assert (gap.verdict, gap.writes, gap.poke) == ("gap", (), True)
    t = m.hole_timer(1)
    assert t.verdict == "reask" and t.gap.psn == 101
    # the queued hole's request answers first (its PSN 105): no poke while the timer's request
    # is on its way; its responses are dropped
    dup = m.response(1, FIRST, 105, DATA[:256])
    assert (dup.verdict, dup.poke) == ("duplicate", False)
    assert m.response(1, MIDDLE, 102, DATA[512:768]).poke is False
    # the timer's request fills the hole; the queued hole is the current one, and its
    # responses came already: the closing response pokes
    assert m.response(1, FIRST, 101, DATA[256:512]).verdict == "good"
    assert m.response(1, MIDDLE, 102, DATA[512:768]).verdict == "good"
    fill = m.response(1, LAST, 103, DATA[768:1000])
    assert (fill.verdict, fill.ack, fill.poke) == ("good", AckEvent(1, 0x1F, 104, 0), True)
    assert m.hole_timer(1).gap.psn == 105
    # a second READ pair: the current hole waits while a queued hole's first response comes
    m2 = ReadRequesterModel(1)
    for n in range(3):
        m2.issue(0, wr_id=n, local_addr=0x400 * n, remote_va=VA + 0x400 * n, rkey=RKEY,
                 length=0x400, first=10 + 4 * n, pmtu=256)       # 10..13, 14..17, 18..21
    assert m2.response(0, FIRST, 10, DATA[:256]).verdict == "good"
    assert m2.response(0, MIDDLE, 12, DATA[512:768]).verdict == "hole"        # 11
    assert m2.response(0, FIRST, 14, DATA[:256]).verdict == "ahead"
    assert m2.response(0, MIDDLE, 16, DATA[512:768]).verdict == "hole"        # 15, queued
    assert m2.response(0, FIRST, 11, DATA[256:512]).verdict == "good"
    # 12 and 13 of the hole's request lost; the queued hole's request answers: poke
    dup = m2.response(0, FIRST, 15, DATA[256:512])
    assert (dup.verdict, dup.poke) == ("duplicate", True)
    assert m2.response(0, MIDDLE, 16, DATA[512:768]).poke is False


def test_losses_after_the_front_and_in_the_hole():
    """A response lost after the front: the hole closes with the NAK PSN sequence error of the
    front (go-back-N from there); a response of the hole's request after a loss in it is
    dropped (the retry engine's timer asks again); acknowledgements are held while a hole is
    open, and one at or after the front counts as a loss after it."""
    m = ReadRequesterModel(1)
    for n in range(3):
        m.issue(0, wr_id=n, local_addr=0x1000 * n, remote_va=0x8000, rkey=RKEY, length=1024,
                first=10 + 4 * n, pmtu=256)
    for psn in (10, 11):
        assert m.response(0, FIRST if psn == 10 else MIDDLE, psn, DATA[:256]).verdict == "good"
    assert m.response(0, LAST, 13, DATA[:256]).verdict == "hole"        # 12 lost
    assert m.front(0) == 14
    assert m.response(0, MIDDLE, 16, DATA[:256]).verdict == "hole"      # 14, 15 lost
    assert m.front(0) == 18
    assert m.response(0, MIDDLE, 15, DATA[:256]).verdict == "duplicate"  # a later hole
    assert m.ack(0, 0x1F, 11).verdict == "ack_pass"                     # before the holes
    held = m.ack(0, 0x1F, 12)
    assert (held.verdict, held.ack) == ("ack_hold", None)
    assert m.ack(0, 0x1F, 19).verdict == "ack_hold"                     # after the front: lost
    assert m.response(0, FIRST, 12, DATA[:256]).verdict == "good"       # asked again
    fill = m.response(0, LAST, 13, DATA[:256])
    assert (fill.verdict, fill.ack, fill.done) == ("good", AckEvent(0, 0x1F, 13, 0), (0,))
    assert (m.expected(0), m.front(0)) == (14, 18)
    for psn, op in ((14, FIRST), (15, MIDDLE), (16, MIDDLE)):
        assert m.response(0, op, psn, DATA[:256]).verdict == "good"
    fill = m.response(0, LAST, 17, DATA[:256])
    assert (fill.verdict, fill.ack, fill.done) == ("good", AckEvent(0, 0x60, 18, 0), (1,))
    assert m.expected(0) == 18 and m.front(0) is None

    m = ReadRequesterModel(1)
    for n in range(2):
        m.issue(0, wr_id=n, local_addr=0x1000 * n, remote_va=0x8000, rkey=RKEY, length=1024,
                first=10 + 4 * n, pmtu=256)
    assert m.response(0, LAST, 13, DATA[:256]).verdict == "hole"        # 10..12 lost
    assert m.response(0, MIDDLE, 19, DATA[:256]).verdict == "unknown"
    assert m.response(0, MIDDLE, 16, DATA[:256]).verdict == "hole"      # 14, 15 lost
    assert m.response(0, MIDDLE, 12, DATA[:256]).verdict == "gap"       # 10 lost again

    # the queue of holes: a lost response in each of the READs after the first
    m = ReadRequesterModel(1, 16)
    for n in range(HOLE_QUEUE + 3):
        m.issue(0, wr_id=n, local_addr=0x1000 * n, remote_va=0x8000, rkey=RKEY, length=512,
                first=2 * n, pmtu=256)
    outs = [m.response(0, LAST, 2 * n + 1, DATA[:256]) for n in range(HOLE_QUEUE + 2)]
    assert [o.verdict for o in outs] == ["hole"] * (HOLE_QUEUE + 1) + ["gap"]
    assert [o.gap.psn for o in outs[:-1]] == [2 * n for n in range(HOLE_QUEUE + 1)]
    # (the last response lost: the front stays at that READ; after it, nothing has room)
    assert m.response(0, FIRST, 2 * HOLE_QUEUE + 4, DATA[:256]).verdict == "gap"
    assert m.response(0, FIRST, 2 * HOLE_QUEUE + 2, DATA[:256]).verdict == "ahead"
    assert m.response(0, LAST, 2 * HOLE_QUEUE + 3, DATA[:256]).verdict == "ahead"
    for n in range(HOLE_QUEUE + 1):
        assert m.response(0, FIRST, 2 * n, DATA[:256]).verdict == "good"
        fill = m.response(0, LAST, 2 * n + 1, DATA[:256])
        if n < HOLE_QUEUE:
            assert (fill.ack, fill.done) == (AckEvent(0, 0x1F, 2 * n + 1, 0), (n,))
    # the last hole closes on the front: go-back-N from it (responses after it were lost)
    assert (fill.ack, fill.done) == (AckEvent(0, 0x60, 2 * HOLE_QUEUE + 4, 0),
                                     (HOLE_QUEUE, HOLE_QUEUE + 1))


@pytest.mark.parametrize("syndrome, forwarded", [(0x62, 0x62), (0x61, 0x61), (0x63, 0x63),
                                                 (0x60, 0x63), (0x21, 0x63), (0x64, 0x63)])
def test_nak_in_a_response(syndrome, forwarded):
    m = model_with_read()
    out = m.response(1, FIRST, 100, DATA[:256], syndrome=syndrome, msn=9)
    assert (out.verdict, out.writes, out.ack) == ("nak", (), AckEvent(1, forwarded, 100, 9))


def test_acknowledgements():
    m = model_with_read()
    assert m.ack(1, 0x1F, 99).ack == AckEvent(1, 0x1F, 99)                  # a WRITE before it
    assert m.ack(1, 0x62, 100).verdict == "ack_pass"                         # NAK of the READ
    assert m.ack(1, 0x60, 100).verdict == "ack_pass"
    passed = m.ack(1, 0x1F, 100, msn=2)                                      # past the READ
    assert (passed.verdict, passed.ack) == ("ack_gap", AckEvent(1, 0x60, 100, 2))
    assert passed.gap == Reissue(1, 7, 100, 0, LOCAL, VA, RKEY, 1000)
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "good"
    assert m.ack(1, 0x20, 102).verdict == "ack_gap"                          # RNR NAK of 102
    assert m.ack(1, 0x20, 101).verdict == "ack_pass"
    assert m.ack(0, 0x1F, 5000).verdict == "ack_pass"                        # no READ there


def test_max_rd_atomic_and_flush():
    m = model_with_read(max_rd=2)
    assert m.issue(1, wr_id=8, local_addr=0, length=0, first=104, pmtu=256)
    assert m.full(1)
    assert not m.issue(1, wr_id=9, local_addr=0, length=0, first=105, pmtu=256)
    assert m.counters["overflow"] == 1
    m.flush(1)
    assert not m.full(1) and m.response(1, FIRST, 100, DATA[:256]).verdict == "unknown"


def test_per_qp_limit():
    """A QP's limit: full at it, an overflow past it; lowered below the READs outstanding (full
    until fewer remain); clipped into 1..max_rd_atomic; kept by a flush; the other QP keeps
    max_rd_atomic."""
    m = ReadRequesterModel(2, 4)
    assert m.limits == [4, 4]

    def add(qp, n):
        return [m.issue(qp, wr_id=0, local_addr=0, length=0, first=200 + k, pmtu=256)
                for k in range(n)]

    m.set_limit(1, 2)
    assert add(1, 3) == [True, True, False] and m.full(1) and m.counters["overflow"] == 1
    m.set_limit(1, 1)
    assert m.full(1)
    m.advance(1)                        # 1 left, limit 1
    assert m.full(1) and add(1, 1) == [False]
    m.advance(1)
    assert not m.full(1) and add(1, 2) == [True, False]
    m.set_limit(1, 0)
    assert m.limits[1] == 1
    m.set_limit(1, 300)
    assert m.limits[1] == 4 and add(1, 4) == [True, True, True, False]
    m.set_limit(1, 3)
    m.flush(1)
    assert m.limits[1] == 3 and not m.full(1)
    m.set_limit(7, 1)                   # outside the table: nothing
    assert m.limits == [4, 3]
    assert add(0, 5) == [True] * 4 + [False]
    with pytest.raises(ValueError, match="READ limit"):
        m.set_limit(0, -1)


def test_zero_length_and_wrap():
    m = ReadRequesterModel(1)
    m.issue(0, wr_id=1, local_addr=5, length=0, first=(1 << 24) - 2, pmtu=512)
    m.issue(0, wr_id=2, local_addr=9, length=1100, first=(1 << 24) - 1, pmtu=512)
    zero = m.response(0, ONLY, (1 << 24) - 2, b"")
    assert (zero.verdict, zero.writes, zero.done) == ("good", (), (1,))
    assert m.response(0, FIRST, (1 << 24) - 1, DATA[:512]).verdict == "good"
    assert m.response(0, MIDDLE, 0, DATA[:512]).writes == ((9 + 512, DATA[:512]),)
    assert m.response(0, LAST, 1, DATA[:76]).done == (2,)


def test_parameters():
    with pytest.raises(ValueError, match="max_rd_atomic must be 1..16"):
        ReadRequesterModel(1, 17)
    with pytest.raises(ValueError, match="path MTU"):
        ReadRequesterModel(1).issue(0, wr_id=1, local_addr=0, length=1, first=0, pmtu=300)
