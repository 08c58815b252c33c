"""The READ requester's reference model (:mod:`rocegen.sim.models.read_requester`) on cases worked
out by hand from the wire notes ("RDMA READ", "Requester reliability rules") and rxe: every
verdict, the writes, the events for the retry engine, completions, reissues and the per-QP
limit of outstanding READs."""

import pytest

from rocegen.sim.models.read_requester import (
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
    assert [o.done for o in out] == [None, None, None, 7]
    assert m.outstanding(1) == () and m.counters["good"] == 4


def test_gap_reissue_and_restart():
    m = model_with_read()
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "good"
    gap = m.response(1, MIDDLE, 102, DATA[512:768])
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
    assert (last.verdict, last.done) == ("good", 7)
    # a reissue from the last PSN makes an ONLY response right there
    m.issue(1, wr_id=8, local_addr=0, length=600, first=104, pmtu=256)
    m.issue(1, wr_id=8, local_addr=0, length=600, first=104, pmtu=256, new=False, psn=106)
    assert m.response(1, FIRST, 104, DATA[:256]).verdict == "good"
    assert m.response(1, MIDDLE, 105, DATA[:256]).verdict == "good"
    assert m.response(1, ONLY, 106, DATA[:88]).done == 8


def test_drops():
    m = model_with_read()
    assert m.response(0, ONLY, 100, b"").verdict == "unknown"            # no READ on QP 0
    assert m.response(1, MIDDLE, 100, DATA[:256]).verdict == "opcode"
    assert m.response(1, ONLY, 100, DATA[:256]).verdict == "opcode"
    assert m.response(1, LAST, 100, DATA[:256]).verdict == "opcode"
    assert m.response(1, FIRST, 100, DATA[:255]).verdict == "length"
    assert m.response(1, FIRST, 104, DATA[:256]).verdict == "unknown"    # after the last PSN
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "good"
    assert m.response(1, FIRST, 100, DATA[:256]).verdict == "duplicate"
    assert m.response(1, LAST, 101, DATA[:256]).verdict == "opcode"      # not the last PSN
    assert m.response(1, MIDDLE, 101, DATA[:257]).verdict == "length"
    assert m.response(1, MIDDLE, 101, DATA[:256]).verdict == "good"
    assert m.response(1, MIDDLE, 102, DATA[:256]).verdict == "good"
    assert m.response(1, MIDDLE, 103, DATA[:232]).verdict == "opcode"    # the last PSN
    assert m.response(1, LAST, 103, DATA[:233]).verdict == "length"      # too long
    assert m.response(1, LAST, 103, DATA[:232]).done == 7
    assert m.response(1, MIDDLE, 104, DATA[:256]).verdict == "unknown"   # one too many
    c = m.counters
    assert (c["unknown"], c["opcode"], c["length"], c["duplicate"], c["good"]) == (3, 5, 3, 1, 4)


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
    assert (zero.verdict, zero.writes, zero.done) == ("good", (), 1)
    assert m.response(0, FIRST, (1 << 24) - 1, DATA[:512]).verdict == "good"
    assert m.response(0, MIDDLE, 0, DATA[:512]).writes == ((9 + 512, DATA[:512]),)
    assert m.response(0, LAST, 1, DATA[:76]).done == 2


def test_parameters():
    with pytest.raises(ValueError, match="max_rd_atomic must be 1..16"):
        ReadRequesterModel(1, 17)
    with pytest.raises(ValueError, match="path MTU"):
        ReadRequesterModel(1).issue(0, wr_id=1, local_addr=0, length=1, first=0, pmtu=300)
