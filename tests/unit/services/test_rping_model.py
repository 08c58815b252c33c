"""The rping reference model (:mod:`rocegen.sim.models.services.rping`): the client's bytes and
advertisements as rping.c makes them, the server's decision for each event, and whole
connections (the model server against rping clients through the endpoint's stand-in)."""

import random

import pytest

from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.rping import (
    RPING_MIN_SIZE,
    Actions,
    Phase,
    RecvPost,
    RkeyWrite,
    RpingClient,
    RpingMemory,
    RpingServer,
    WorkRequest,
    WrKind,
    pack_adv,
    ping_data,
    unpack_adv,
)
from rocegen.wire.verbs import CplStatus, WrOpcode
from tests.unit.services.standin import ClientSpec, Endpoint, expected_end, run_model


def test_ping_data_is_what_rpings_snprintf_and_letter_loop_make():
    # "rdma-ping-0: " is 13 bytes; then the letters from 'A', the last byte 0
    assert ping_data(0, 64) == b"rdma-ping-0: " + bytes(range(65, 115)) + b"\0"
    # iteration 1 starts at 'B' and wraps from 'z' to 'A'
    assert ping_data(1, 80) == b"rdma-ping-1: " + bytes(range(66, 123)) + bytes(range(65, 74)) + b"\0"
    # iteration 58 starts at 'A' again (58 letters from 'A' to 'z')
    assert ping_data(58, 20) == b"rdma-ping-58: ABCDE\0"
    # below rping's minimum, snprintf cuts the text and the loop writes nothing
    assert ping_data(0, 5) == b"rdma\0" and ping_data(3, 1) == b"\0"
    # rping's minimum size holds the longest text with its NUL: the only NUL is the last byte
    assert ping_data(2**31 - 1, RPING_MIN_SIZE).index(0) == RPING_MIN_SIZE - 1


def test_the_advertisement_is_big_endian_buf_rkey_size():
    adv = pack_adv(0x0102030405060708, 0x0A0B0C0D, 0x10)
    assert adv == bytes.fromhex("0102030405060708" "0a0b0c0d" "00000010")
    assert unpack_adv(adv) == (0x0102030405060708, 0x0A0B0C0D, 0x10)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_qps": 0}, "num_qps"),
    ({"width": 96}, "width"),
    ({"base": 8}, "base must be a multiple of 16"),
    ({"width": 512, "base": 32}, "base must be a multiple of 64"),
    ({"bytes_per_qp": 96}, "power of two"),
    ({"bytes_per_qp": 32}, "power of two above 32"),
    ({"max_size": 0}, "max_size must be 1..96"),
    ({"max_size": 97}, "max_size must be 1..96"),
])
def test_the_slices_are_checked(kwargs, match):
    args = {"num_qps": 2, "base": 0, "bytes_per_qp": 128, "max_size": 96, "width": 64, **kwargs}
    with pytest.raises(ValueError, match=match):
        RpingMemory(**args)


LAYOUT = RpingMemory(num_qps=4, base=0x400, bytes_per_qp=0x2000, max_size=4096, width=64)


def opened_server(qp=1):
    s = RpingServer(LAYOUT)
    assert s.opened(qp) == Actions(recv=RecvPost(qp, WrKind.RECV, 0x400 + qp * 0x2000, 16))
    return s


def recv(s, qp, buf=0x7F0012345000, rkey=0xCAFE, size=100, length=16, status=RecvStatus.OK):
    return s.recv_completion(qp, WrKind.RECV, status, length, pack_adv(buf, rkey, size))


def test_one_iteration_step_by_step():
    s, qp = opened_server(), 1
    slice_ = 0x400 + 0x2000
    a = recv(s, qp, buf=0x7F0012345000, rkey=0xCAFE, size=100)
    assert a == Actions(recv=RecvPost(qp, WrKind.RECV, slice_, 16), rkey=RkeyWrite(qp, 0xCAFE),
                        wr=WorkRequest(qp, WrKind.READ, WrOpcode.READ, slice_ + 32, 100,
                                       0x7F0012345000))
    go = WorkRequest(qp, WrKind.GO, WrOpcode.SEND, slice_ + 16, 16)
    assert s.completion(qp, WrKind.READ, CplStatus.OK) == Actions(wr=go)
    a = recv(s, qp, buf=0x7F0099990000, rkey=0xBEEF, size=100)
    assert a.rkey == RkeyWrite(qp, 0xBEEF)
    assert a.wr == WorkRequest(qp, WrKind.WRITE, WrOpcode.WRITE, slice_ + 32, 100, 0x7F0099990000)
    assert s.completion(qp, WrKind.GO, CplStatus.OK) == Actions()
    assert s.completion(qp, WrKind.WRITE, CplStatus.OK) == Actions(wr=go, count="pings")
    assert s.qps[qp].phase == Phase.READ_ADV and s.counters["pings"] == 1
    assert s.closed(qp) == Actions(count="ended") and s.qps[qp].phase == Phase.OFF
    assert s.closed(qp) == Actions() and s.counters["ended"] == 1


ABORT = WorkRequest(1, WrKind.ABORT, WrOpcode.SEND, 0x400 + 0x2000 + 16, 0)


@pytest.mark.parametrize("size, ok", [(0, False), (1, True), (4096, True), (4097, False),
                                      (2**32 - 1, False)])
def test_the_read_advertisements_size_must_fit(size, ok):
    s = opened_server()
    a = recv(s, 1, size=size)
    if ok:
        assert a.wr.opcode == WrOpcode.READ and a.wr.length == size
    else:
        assert a == Actions(wr=ABORT, count="bad_adv") and s.qps[1].phase == Phase.OFF


@pytest.mark.parametrize("size, ok", [(99, False), (100, True), (4096, True), (4097, False)])
def test_the_write_advertisement_must_hold_the_ping(size, ok):
    s = opened_server()
    recv(s, 1, size=100)
    s.completion(1, WrKind.READ, CplStatus.OK)
    a = recv(s, 1, size=size)
    if ok:
        assert a.wr.opcode == WrOpcode.WRITE and a.wr.length == 100
    else:
        assert a == Actions(wr=ABORT, count="bad_adv")


@pytest.mark.parametrize("length", [0, 8, 15, 17])
def test_a_receive_of_another_length_is_bogus(length):
    s = opened_server()
    assert recv(s, 1, length=length) == Actions(wr=ABORT, count="bad_adv")


@pytest.mark.parametrize("status, counter", [(RecvStatus.FLUSHED, "ended"),
                                             (RecvStatus.LENGTH, "bad_status"),
                                             (RecvStatus.INVALID, "bad_status")])
def test_a_receive_in_error_ends_the_service(status, counter):
    s = opened_server()
    assert recv(s, 1, status=status) == Actions(count=counter)
    assert s.qps[1].phase == Phase.OFF and s.counters[counter] == 1


@pytest.mark.parametrize("status, counter", [(CplStatus.FLUSHED, "ended"),
                                             (CplStatus.REMOTE_ACCESS, "bad_status"),
                                             (CplStatus.RETRY_EXCEEDED, "bad_status")])
def test_a_completion_in_error_ends_the_service(status, counter):
    s = opened_server()
    recv(s, 1)
    assert s.completion(1, WrKind.READ, status) == Actions(count=counter)


def test_unexpected_events_end_the_service_with_the_abort():
    cases = []
    s = opened_server()
    cases.append(s.completion(1, WrKind.READ, CplStatus.OK))        # no READ outstanding
    s = opened_server()
    recv(s, 1)
    cases.append(recv(s, 1))                                          # a receive while READING
    s = opened_server()
    cases.append(s.completion(1, WrKind.GO, CplStatus.OK))          # no go-ahead outstanding
    s = opened_server()
    cases.append(s.recv_completion(1, WrKind.RECV, RecvStatus.OK, 16, bytes(16), is_send=False))
    s = opened_server()
    cases.append(s.recv_completion(1, 7, RecvStatus.OK, 16, pack_adv(1, 2, 3)))
    assert cases == [Actions(wr=ABORT, count="bad_event")] * len(cases)


def test_a_qp_out_of_service_ignores_everything_but_its_opening():
    s = RpingServer(LAYOUT)
    assert recv(s, 1) == Actions()
    assert s.completion(1, WrKind.READ, CplStatus.REMOTE_ACCESS) == Actions()
    assert s.closed(1) == Actions() and s.opened(9) == Actions()
    assert s.counters == dict.fromkeys(s.counters, 0)


def test_the_client_fails_on_bogus_data_and_on_a_mismatch():
    c = RpingClient(40, 3)
    adv = c.connected()
    assert unpack_adv(adv) == (c.start.addr, c.start.rkey, 40) and c.start.data == ping_data(0, 40)
    assert unpack_adv(c.received(16)) == (c.rdma.addr, c.rdma.rkey, 40)
    assert c.received(16) is None and c.result == "data mismatch!"
    c = RpingClient(40, 3)
    c.connected()
    assert c.received(0) is None and c.result == "Received bogus data, size 0"


def run(specs_by_qp, layout, seed):
    rng = random.Random(seed)
    ep = Endpoint(layout, specs_by_qp, rng)
    server = RpingServer(layout)
    run_model(server, ep, rng)
    return server, ep


def check_outcomes(server, ep):
    """Every connection ended as rping's client ends against this server; the counters."""
    counts = dict.fromkeys(server.counters, 0)
    for _, spec, client in ep.finished:
        result, counter = expected_end(spec, ep.layout.max_size)
        assert client.result == result, spec
        counts[counter] += 1
        if result == "ok":
            assert client.log == [ping_data(i, spec.size) for i in range(spec.count)]
            counts["pings"] += spec.count
    assert server.counters == counts
    return counts


def test_rping_C10_S4096_V_on_four_qps_at_once():
    specs = {qp: [ClientSpec(4096, 10)] for qp in range(4)}
    server, ep = run(specs, LAYOUT, 1)
    assert check_outcomes(server, ep)["pings"] == 40 and len(ep.finished) == 4


def test_every_size_from_1_to_the_largest():
    layout = RpingMemory(num_qps=8, base=0, bytes_per_qp=8192, max_size=4096, width=512)
    sizes = list(range(1, 4097))
    specs = {qp: [ClientSpec(size, 2) for size in sizes[qp::8]] for qp in range(8)}
    server, ep = run(specs, layout, 2)
    assert check_outcomes(server, ep)["pings"] == 2 * 4096


def test_bad_clients_end_their_service_while_the_others_go_on():
    bad = [ClientSpec(4097, 3), ClientSpec(64, 3, adv_size=0), ClientSpec(64, 3, adv_size=5000),
           ClientSpec(64, 3, write_adv_size=63), ClientSpec(64, 3, rogue="short"),
           ClientSpec(64, 3, rogue="long"), ClientSpec(64, 3, rogue="badkey")]
    specs = {0: bad, 1: [ClientSpec(4096, 10)] * 3, 2: bad[::-1], 3: [ClientSpec(26, 10)] * 3}
    server, ep = run(specs, LAYOUT, 3)
    counts = check_outcomes(server, ep)
    assert counts == {"pings": 60, "ended": 6, "bad_adv": 10, "bad_status": 4, "bad_event": 0}


def test_a_client_that_sends_twice_is_an_unexpected_event():
    specs = {0: [ClientSpec(64, 3, rogue="double")] * 4, 1: [ClientSpec(64, 5)] * 2}
    server, ep = run(specs, LAYOUT, 4)
    assert check_outcomes(server, ep) == {"pings": 10, "ended": 2, "bad_adv": 0, "bad_status": 0,
                                          "bad_event": 4}
