"""The atomic reference model (:mod:`rocegen.sim.models.responder.atomic`): the arithmetic of
COMPARE_SWAP and FETCH_ADD, the value's byte order in memory, the alignment rule and the store of
results. Expected values are worked out here by hand from the wire notes, not by the model."""

import pytest

from rocegen.sim.models.responder import atomic as A

CS, FA = 0x13, 0x14


def test_fetch_add_wraps_and_compare_swap_swaps_only_on_equal():
    assert A.apply(FA, 5, 3) == 8
    assert A.apply(FA, 0xFFFF_FFFF_FFFF_FFFF, 2) == 1            # modulo 2**64
    assert A.apply(CS, 7, 99, compare=7) == 99
    assert A.apply(CS, 7, 99, compare=8) == 7
    with pytest.raises(ValueError, match="not an atomic opcode"):
        A.apply(0x0C, 1, 1)


@pytest.mark.parametrize("order, stored", [
    ("little", bytes([0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01])),
    ("big", bytes([0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08])),
])
def test_the_value_in_memory_is_in_the_order_asked(order, stored):
    buf = bytearray(b"\xee" * 24)
    buf[8:16] = stored
    req = A.AtomicRequest(FA, va=0x1008, rkey=1, swap_add=0x10)
    assert A.execute(buf, 8, req, order) == 0x0102030405060708
    assert A.load(buf, 8, order) == 0x0102030405060718
    assert buf[:8] == buf[16:] == b"\xee" * 8                    # its neighbours untouched
    with pytest.raises(ValueError, match="byte order"):
        A.load(buf, 0, "middle")


def test_alignment_and_request_fields():
    assert [A.misaligned(va) for va in (0, 8, 0x1000, 4, 7, 0x1001)] == [False] * 3 + [True] * 3
    with pytest.raises(ValueError, match="not an atomic opcode"):
        A.AtomicRequest(0x0A, 0, 0, 0)
    with pytest.raises(ValueError, match="swap_add must be a 64-bit number"):
        A.AtomicRequest(FA, 0, 0, 1 << 64)
    with pytest.raises(ValueError, match="rkey must be a 32-bit number"):
        A.AtomicRequest(CS, 0, -1, 0)
    req = A.AtomicRequest.from_eth(CS, {"va": 8, "rkey": 2, "swap_add": 3, "compare": 4})
    assert (req.va, req.rkey, req.swap_add, req.compare) == (8, 2, 3, 4)


def test_results_keep_the_last_depth_and_answer_only_the_same_request():
    store = A.AtomicResults(2)
    r = [A.AtomicRequest(FA, 8 * k, 1, 1) for k in range(3)]
    store.put(10, r[0], 100)
    store.put(11, r[1], 101)
    assert store.get(10) == 100 and store.get(11, r[1]) == 101
    assert store.get(11, r[0]) is None                  # another request at that PSN
    store.put(12, r[2], 102)                            # the oldest goes
    assert store.get(10) is None and len(store) == 2
    store.put(11, r[0], 7)                              # a PSN again (after a wrap): replaced
    assert store.get(11, r[0]) == 7 and store.get(12) == 102
    with pytest.raises(ValueError, match="depth"):
        A.AtomicResults(0)
