"""The CM reference model (:mod:`rocegen.sim.models.ibcm`): an active and a passive node talking
through their MADs, with losses, duplicates, retransmissions, timeouts, time-wait and rejects;
malformed MADs; the QP pool never leaks. Reject reasons are checked against the numbers of
``enum ib_cm_rej_reason`` (include/rdma/ib_cm.h), MAD statuses against ``ib_mad.h``'s."""

import random

import pytest

from rocegen.sim.models.ibcm import IbCm, QpPool, Region, State
from rocegen.wire import ibcm as I
from tests.unit.ibcm.link import Link, parse

HOST, FPGA = 0x0A000001, 0x0A000002
PORT = 7174
REGION = Region(addr=0x1000, rkey=0x1234, length=1 << 20)
#: 4.096 us x 2^t for the CM response timeouts used here (ibcm's formula, IBTA 12.7.25)
T10, T12 = 4096 << 10, 4096 << 12


def nodes(*, host_kw=None, fpga_kw=None, host_qps=4, fpga_qps=4, drop=None):
    host_pool = QpPool(range(0x100, 0x100 + host_qps))
    fpga_pool = QpPool(range(0x200, 0x200 + fpga_qps))
    host = IbCm(pool=host_pool, local_ip=HOST, ca_guid=0x1111, seed=1,
                **{"cm_response_timeout": 10, "max_cm_retries": 3, **(host_kw or {})})
    fpga = IbCm(pool=fpga_pool, local_ip=FPGA, ca_guid=0x2222, ports=[PORT], region=REGION,
                seed=2, **{"cm_response_timeout": 12, **(fpga_kw or {})})
    return host, fpga, Link({HOST: host, FPGA: fpga}, drop)


def connect(host, link, now=0, **kw):
    cid, out = host.connect(now, dst_ip=FPGA, port=kw.pop("port", PORT), **kw)
    link.post(HOST, out)
    link.run(now)
    return cid


def only(cm):
    (conn,) = cm.connections.values()
    return conn


def full(*pools):
    return all(p.free_count == p.capacity for p in pools)


def test_connect_transfer_parameters_and_disconnect():
    host, fpga, link = nodes(host_kw=dict(responder_resources=4, initiator_depth=2),
                             fpga_kw=dict(responder_resources=1, initiator_depth=8))
    cid = connect(host, link, private_data=b"hello")
    assert [n for _, _, n, _ in link.log] == ["REQ", "REP", "RTU"]
    a, p = host.connections[cid], only(fpga)
    assert a.state is p.state is State.ESTABLISHED
    assert (a.peer_qpn, a.peer_psn, p.peer_qpn, p.peer_psn) == (p.qpn, p.psn, a.qpn, a.psn)
    assert a.remote_comm_id == p.local_comm_id and p.remote_comm_id == a.local_comm_id
    assert a.peer_region == REGION and p.private_data[:5] == b"hello"
    # the passive side serves min(its 1, the REQ's initiator depth 2) READs and sends
    # min(its 8, the REQ's responder resources 4); the active side takes the REP's numbers
    assert (p.responder_resources, p.initiator_depth) == (1, 4)
    assert (a.responder_resources, a.initiator_depth) == (4, 1)
    # the REQ as librdmacm sends it: service ID 0x0000000001060000 | port, RC, cma_hdr
    _, hdr, req = parse(link.sent("REQ")[0])
    assert (hdr["mgmt_class"], hdr["class_version"], hdr["method"]) == (0x07, 2, 0x03)
    assert req["service_id"] == 0x0000000001061C06 and req["transport_service_type"] == 0
    cma = I.CMA_HDR.unpack(I.private_bytes(I.REQ, req))
    assert (cma["cma_version"], cma["ip_version"], cma["src_addr"], cma["dst_addr"]) == \
        (0, 4, HOST, FPGA)
    assert I.gid_ipv4(req["primary_local_gid"]) == HOST
    # REP and RTU carry the REQ's transaction ID (cm.c keeps it for the exchange)
    assert {parse(m)[1]["transaction_id"] for *_, m in link.log} == {hdr["transaction_id"]}

    link.post(HOST, host.disconnect(100, cid))
    link.run(100)
    assert [n for _, _, n, _ in link.log][3:] == ["DREQ", "DREP"]
    assert a.state is p.state is State.TIMEWAIT
    assert not full(host.pool, fpga.pool)
    link.poll(100 + host.time_wait_ns)
    assert not host.connections and not fpga.connections and full(host.pool, fpga.pool)
    assert [e[0] for e in host.events] == ["established", "disconnected", "timewait_exit"]
    assert [e[0] for e in fpga.events] == ["established", "disconnected", "timewait_exit"]


def _edited_req(host, **changes):
    """A REQ of ``host`` to FPGA with fields changed (``cma=dict``: cma_hdr fields changed)."""
    cid, (out,) = host.connect(0, dst_ip=FPGA, port=PORT)
    hdr = I.MAD_HDR.unpack(out.mad)
    req = I.REQ.unpack(out.mad[I.MAD_HDR_LENGTH:])
    cma_changes = changes.pop("cma", None)
    if cma_changes:
        pdata = I.private_bytes(I.REQ, req)
        cma = {**I.CMA_HDR.unpack(pdata), **cma_changes}
        req["private_data"] = I.private_data(I.REQ, I.CMA_HDR.pack(**cma)
                                             + pdata[I.CMA_HDR.length:])
    req.update(changes)
    return cid, I.MAD_HDR.pack(**hdr) + I.REQ.pack(**req)


# (name, node options, REQ changes, reason number in ib_cm.h)
REJECTS = [
    ("port not listened", {}, dict(service_id=0x0000000001060000 | 9999), 8),
    ("not the TCP port space", {}, dict(service_id=0x0000000001110000 | PORT), 8),
    ("UC transport", {}, dict(transport_service_type=1), 9),
    ("MTU code 6", {}, dict(path_mtu=6), 26),
    ("MTU code 0", {}, dict(path_mtu=0), 26),
    ("READs to a node serving none", dict(responder_resources=0), dict(initiator_depth=1), 27),
    ("cma_hdr version 1", {}, dict(cma=dict(cma_version=1)), 28),
    ("cma_hdr IPv6", {}, dict(cma=dict(ip_version=6)), 28),
    ("cma_hdr another destination", {}, dict(cma=dict(dst_addr=FPGA + 1)), 28),
    ("cma_hdr another source", {}, dict(cma=dict(src_addr=HOST + 1)), 28),
    ("application declines", dict(accept=lambda r: r.private_data[:2] == b"ok"), {}, 28),
    ("no QP left", dict(pool=QpPool([0x300])), {}, 1),
]


@pytest.mark.parametrize("name, fpga_kw, changes, reason", REJECTS, ids=[r[0] for r in REJECTS])
def test_req_rejects(name, fpga_kw, changes, reason):
    host, fpga, link = nodes(fpga_kw={k: v for k, v in fpga_kw.items() if k != "pool"})
    if "pool" in fpga_kw:
        fpga.pool = fpga_kw["pool"]
        assert fpga.pool.allocate() == 0x300          # taken by the other connection manager
    cid, mad = _edited_req(host, **changes)
    link.post(FPGA, fpga.receive(0, mad, src_ip=HOST))
    (rej,) = link.sent("REJ", FPGA)
    _, hdr, f = parse(rej)
    assert f["reason"] == reason and f["message_rejected"] == 0      # REQ rejected
    assert f["remote_comm_id"] == cid and f["local_comm_id"] == 0
    assert hdr["transaction_id"] == I.MAD_HDR.unpack(mad)["transaction_id"]
    assert not fpga.connections and fpga.counters["req_rejected"] == 1
    link.run(0)
    assert host.events == [("rejected", cid, reason)] and not host.connections
    assert full(host.pool) and (full(fpga.pool) or "pool" in fpga_kw)


def test_duplicate_req_gets_the_same_rep():
    host, fpga, link = nodes(drop=lambda s, d, m: s == FPGA)     # the REPs are lost
    connect(host, link)
    (req,) = link.sent("REQ")
    link.post(FPGA, fpga.receive(5, req, src_ip=HOST))
    reps = link.sent("REP")
    assert len(reps) == 2 and reps[0] == reps[1]
    assert len(fpga.connections) == 1 and fpga.pool.free_count == fpga.pool.capacity - 1
    assert fpga.counters["req_duplicate"] == 1


def test_lost_rep_is_sent_again_after_the_peers_response_time():
    lost = []

    def drop(s, d, m):
        if parse(m)[0] == "REP" and not lost:
            lost.append(m)
            return True
        return False

    host, fpga, link = nodes(drop=drop)
    cid = connect(host, link)
    assert host.connections[cid].state is State.REQ_SENT
    # the REQ stated T10 as the host's response time: the FPGA's timer, alone
    for t in (T10 - 1, T10):
        link.post(FPGA, fpga.poll(t))
        link.run(t)
        assert len(link.sent("REP")) == 1 + (t == T10)
    assert link.sent("REP")[0] == link.sent("REP")[1]
    assert host.connections[cid].state is State.ESTABLISHED is only(fpga).state
    assert fpga.counters["retransmits"] == 1 and host.counters["retransmits"] == 0


def test_rep_gives_up_after_max_cm_retries():
    """The REP goes out 1 + the REQ's max CM retries (3) times, then a REJ "timeout" (4) with
    the CA GUID as ARI, and the QP is free again; a duplicate REQ meanwhile gets the REP too."""
    host, fpga, link = nodes(drop=lambda s, d, m: True)
    connect(host, link)
    (req,) = link.sent("REQ")
    link.post(FPGA, fpga.receive(0, req, src_ip=HOST))
    times = []
    while fpga.connections:
        t = fpga.next_deadline()
        times.append(t)
        link.post(FPGA, fpga.poll(t))
        if len(times) == 2:
            link.post(FPGA, fpga.receive(t, req, src_ip=HOST))
    assert times == [T10, 2 * T10, 3 * T10, 4 * T10]       # the host's response time, T10
    reps = link.sent("REP")
    assert len(reps) == 1 + 3 + 1 and len(set(reps)) == 1
    (rej,) = [parse(m)[2] for m in link.sent("REJ", FPGA)]
    assert rej["reason"] == 4 and rej["message_rejected"] == 2 and rej["reject_info_length"] == 8
    assert rej["ari"] >> (72 * 8 - 64) == 0x2222
    assert fpga.counters["rep_timeouts"] == 1 and fpga.events[-1][0] == "rep_timeout"
    assert full(fpga.pool)


def test_req_retransmits_then_gives_up():
    host, fpga, link = nodes(drop=lambda s, d, m: True)
    cid = connect(host, link)
    times = []
    for k in range(1, 6):
        link.poll(k * T10)
        times += [k * T10] * (len(link.sent("REQ")) - 1 - len(times))
    # the REQ at 0, again at T10, 2 T10, 3 T10 (max CM retries 3), the REJ at 4 T10
    assert times == [T10, 2 * T10, 3 * T10]
    assert len(set(link.sent("REQ"))) == 1
    assert [parse(m)[2]["reason"] for m in link.sent("REJ", HOST)] == [4]
    assert host.events == [("req_timeout", cid, None)] and full(host.pool)


def test_mra_moves_the_req_deadline():
    host, fpga, link = nodes(drop=lambda s, d, m: d == FPGA)
    cid = connect(host, link)
    mra = I.MAD_HDR.pack(base_version=1, mgmt_class=7, class_version=2, method=3,
                         attribute_id=0x0011) + I.MRA.pack(
        remote_comm_id=cid, local_comm_id=0, message_mraed=0, service_timeout=14)
    assert host.receive(5, mra, src_ip=FPGA) == []
    assert host.poll(T10) == []                                  # the REQ's deadline moved
    assert host.poll(5 + (4096 << 14) - 1) == []
    (again,) = host.poll(5 + (4096 << 14))
    assert parse(again.mad)[0] == "REQ" and host.connections[cid].mra_seen
    t = 6 + (4096 << 14)
    assert host.receive(t, mra, src_ip=FPGA + 1) == [] and host.counters["mra_unknown"] == 1


def test_first_packet_establishes_without_rtu():
    host, fpga, link = nodes(drop=lambda s, d, m: parse(m)[0] == "RTU")
    connect(host, link)
    p = only(fpga)
    assert p.state is State.REP_SENT
    assert not fpga.data_seen(1, p.qpn + 1)
    assert fpga.data_seen(1, p.qpn) and p.state is State.ESTABLISHED
    link.poll(10 * T12)
    assert len(link.sent("REP")) == 1                # no REP after that


def test_dreq_crossing_retransmit_and_timeout():
    host, fpga, link = nodes()
    cid = connect(host, link)
    p = only(fpga)
    # both sides disconnect at once: each answers the other's DREQ, both end in time-wait
    link.post(HOST, host.disconnect(10, cid))
    link.post(FPGA, fpga.disconnect(10, p.local_comm_id))
    link.run(10)
    assert len(link.sent("DREP")) == 2 and host.connections[cid].state is State.TIMEWAIT
    assert p.state is State.TIMEWAIT
    link.poll(10 + host.time_wait_ns)
    assert full(host.pool, fpga.pool)

    # a DREQ whose DREPs are all lost: sent 1 + 3 times, then time-wait all the same
    host, fpga, link = nodes(drop=lambda s, d, m: parse(m)[0] == "DREP")
    cid = connect(host, link)
    link.post(HOST, host.disconnect(0, cid))
    for k in range(1, 5):
        link.poll(k * T10)
    assert len(link.sent("DREQ", HOST)) == 4 and host.counters["dreq_timeouts"] == 1
    assert host.connections[cid].state is State.TIMEWAIT
    # the FPGA answered each (the repeats as duplicates, in time-wait)
    assert fpga.counters["dreq_duplicate"] == 3
    link.poll(10 * T10 + host.time_wait_ns)
    assert full(host.pool, fpga.pool)


def test_destroy_after_disconnect_sends_the_dreq_once():
    """``rdma_destroy_id`` right after ``rdma_disconnect`` (rping, rdma_client): the DREQ is not
    sent again. Lost, it leaves the passive side's connection established; the passive side's
    own DREQ later meets the host in time-wait (answered) or after it (answered as unknown)."""
    host, fpga, link = nodes(drop=lambda s, d, m: parse(m)[0] == "DREQ" and s == HOST)
    cid = connect(host, link)
    p = only(fpga)
    link.post(HOST, host.disconnect(10, cid))
    assert host.destroy(11, cid) == []
    link.run(11)
    for k in range(1, 5):
        link.poll(k * T10)
    assert len(link.sent("DREQ", HOST)) == 1 and host.counters["retransmits"] == 0
    assert host.connections[cid].state is State.TIMEWAIT and p.state is State.ESTABLISHED
    link.post(FPGA, fpga.disconnect(5 * T10, p.local_comm_id))
    link.run(5 * T10)
    assert host.counters["dreq_duplicate"] == 1 and p.state is State.TIMEWAIT
    link.poll(5 * T10 + max(host.time_wait_ns, fpga.time_wait_ns))
    assert full(host.pool, fpga.pool)
    # destroyed while established: its one DREQ, then time-wait; any other state is refused
    host, fpga, link = nodes()
    cid = connect(host, link)
    link.post(HOST, host.destroy(10, cid))
    link.run(10)
    assert len(link.sent("DREQ", HOST)) == 1 and only(fpga).state is State.TIMEWAIT
    assert host.connections[cid].state is State.TIMEWAIT
    with pytest.raises(ValueError, match="neither established nor disconnecting"):
        host.destroy(11, cid)


def test_stale_and_unknown_ids():
    host, fpga, link = nodes()
    cid = connect(host, link)
    p = only(fpga)
    rtu = link.sent("RTU")[0]
    (req,) = link.sent("REQ")
    # a DREQ for nobody gets its DREP all the same (its IDs swapped)
    dreq = I.MAD_HDR.pack(base_version=1, mgmt_class=7, class_version=2, method=3,
                          transaction_id=77, attribute_id=0x0015) + I.DREQ.pack(
        local_comm_id=0xAAAA, remote_comm_id=0xBBBB, remote_qpn=5)
    (drep,) = fpga.receive(1, dreq, src_ip=HOST)
    _, hdr, f = parse(drep.mad)
    assert (f["local_comm_id"], f["remote_comm_id"], hdr["transaction_id"]) == (0xBBBB, 0xAAAA, 77)
    assert fpga.counters["dreq_unknown"] == 1
    # a duplicate RTU is counted; a REP for an unknown ID gets REJ "invalid comm ID" (6)
    assert fpga.receive(2, rtu, src_ip=HOST) == [] and fpga.counters["rtu_duplicate"] == 1
    rep = I.MAD_HDR.pack(base_version=1, mgmt_class=7, class_version=2, method=3,
                         attribute_id=0x0013) + I.REP.pack(local_comm_id=9, remote_comm_id=0xDEAD)
    (rej,) = host.receive(3, rep, src_ip=FPGA)
    assert parse(rej.mad)[2]["reason"] == 6 and parse(rej.mad)[2]["message_rejected"] == 1
    # disconnect; the REQ again while the FPGA is in time-wait: REJ "stale connection" (10)
    link.post(HOST, host.disconnect(4, cid))
    link.run(4)
    (rej,) = fpga.receive(5, req, src_ip=HOST)
    assert parse(rej.mad)[2]["reason"] == 10 and fpga.counters["req_stale"] == 1
    # after time-wait, the old connection's RTU is unknown
    later = 5 + fpga.time_wait_ns
    link.poll(later)
    assert p.local_comm_id not in fpga.connections
    assert fpga.receive(later, rtu, src_ip=HOST) == [] and fpga.counters["rtu_unknown"] == 1
    # a REQ from a QP the FPGA still holds a live connection with: "stale connection" too
    host2, fpga2, link2 = nodes()
    connect(host2, link2)
    (req2,) = link2.sent("REQ")
    f = I.REQ.unpack(req2[I.MAD_HDR_LENGTH:])
    f["local_comm_id"] += 1
    (rej,) = fpga2.receive(1, req2[:I.MAD_HDR_LENGTH] + I.REQ.pack(**f), src_ip=HOST)
    assert parse(rej.mad)[2]["reason"] == 10 and len(fpga2.connections) == 1


def _mad(**hdr):
    fields = dict(base_version=1, mgmt_class=7, class_version=2, method=1, transaction_id=0x42,
                  attribute_id=0x0001)
    fields.update(hdr)
    return I.MAD_HDR.pack(**fields) + bytes(232)


@pytest.mark.parametrize("mad, counter", [
    (_mad()[:255], "drop_length"),
    (_mad() + b"\0", "drop_length"),
    (_mad(base_version=2), "drop_base_version"),
    (_mad(mgmt_class=0x04), "drop_class"),
    (_mad(method=0x81), "drop_response"),
    (_mad(method=0x05), "drop_method"),
    (_mad(method=3, class_version=1, attribute_id=0x0010), "drop_class_version"),
    (_mad(method=3, attribute_id=0x0017), "drop_attribute"),
    (_mad(method=3, attribute_id=0x0001), "drop_attribute"),
], ids=["short", "long", "base version", "class", "response", "trap", "class version",
        "SIDR_REQ", "Send ClassPortInfo"])
def test_malformed_mads_are_dropped_and_counted(mad, counter):
    host, _, _ = nodes()
    assert host.receive(0, mad, src_ip=FPGA) == []
    assert host.counters[counter] == 1 and host.counters["tx_mads"] == 0


@pytest.mark.parametrize("mad, status", [
    (_mad(attribute_id=0x0010), 0x000C),                # Get of a REQ: method/attr unsupported
    (_mad(method=2), 0x000C),                           # Set of ClassPortInfo
    (_mad(class_version=1), 0x0004),                    # bad class version
])
def test_gets_answered_with_a_status(mad, status):
    host, _, _ = nodes()
    (out,) = host.receive(0, mad, src_ip=FPGA)
    hdr = I.MAD_HDR.unpack(out.mad)
    assert out.dst_ip == FPGA and hdr["method"] == 0x81 and hdr["status"] == status
    assert hdr["transaction_id"] == 0x42 and out.mad[24:] == mad[24:]


def test_class_port_info():
    host, _, _ = nodes()
    (out,) = host.receive(0, _mad(), src_ip=FPGA)
    hdr = I.MAD_HDR.unpack(out.mad)
    assert (hdr["method"], hdr["status"], hdr["attribute_id"], hdr["transaction_id"]) == \
        (0x81, 0, 1, 0x42)
    cpi = I.CLASS_PORT_INFO.unpack(out.mad[24:])
    assert (cpi["base_version"], cpi["class_version"], cpi["resp_time_value"]) == (1, 2, 10)
    assert out.mad[24 + 72:] == bytes(232 - 72)


def test_parameters_are_checked():
    pool = QpPool([2])
    for kw, match in ((dict(local_ip=-1), "local_ip"), (dict(ca_guid=1 << 64), "ca_guid"),
                      (dict(max_mtu=1000), "MTU"), (dict(cm_response_timeout=32), "cm_resp"),
                      (dict(max_cm_retries=16), "max_cm_retries"), (dict(region=(1, 2, 3)),
                                                                    "region"),
                      (dict(accept=5), "accept"), (dict(ports=[70000]), "port"),
                      (dict(pool=object()), "pool")):
        with pytest.raises(ValueError, match=match):
            IbCm(**{"pool": pool, "local_ip": 1, "ca_guid": 1, **kw})
    with pytest.raises(ValueError, match="rkey"):
        Region(0, 1 << 32, 0)
    cm = IbCm(pool=pool, local_ip=1, ca_guid=1)
    with pytest.raises(ValueError, match="56 bytes"):
        cm.connect(0, dst_ip=2, port=1, private_data=bytes(57))
    with pytest.raises(ValueError, match="not established"):
        cm.disconnect(0, 12345)
    cm.poll(10)
    with pytest.raises(ValueError, match="backwards"):
        cm.poll(9)
    with pytest.raises(ValueError, match="not listening"):
        cm.unlisten(5)
    for bad in ([], [1], [2, 2], [1 << 24]):
        with pytest.raises(ValueError, match="QP"):
            QpPool(bad)
    with pytest.raises(ValueError, match="free already"):
        pool.free(2)
    assert pool.allocate() == 2 and pool.allocate() is None
    assert cm.connect(11, dst_ip=2, port=1) == (None, []) and cm.counters["connect_no_qp"] == 1


def test_comm_ids_and_psns_can_be_injected():
    """``first_comm_id`` and ``psn`` replace the seeded draws: IDs count up from the first
    (0xFFFFFFFF wraps to 1), PSNs come from the function; both sides use them."""
    psns = iter([0x123456, 0xABCDEF, 0x000001])
    host, fpga, link = nodes(fpga_kw=dict(first_comm_id=0xFFFFFFFF, psn=lambda: next(psns)))
    for _ in range(2):
        connect(host, link)
    reps = [parse(m)[2] for m in link.sent("REP")]
    assert [(r["local_comm_id"], r["starting_psn"]) for r in reps] == \
        [(0xFFFFFFFF, 0x123456), (1, 0xABCDEF)]
    _, out = fpga.connect(0, dst_ip=HOST, port=1)
    req = parse(out[0].mad)[2]
    assert (req["local_comm_id"], req["starting_psn"]) == (2, 1)
    for kw, match in ((dict(first_comm_id=0), "first_comm_id"), (dict(psn=3), "psn")):
        with pytest.raises(ValueError, match=match):
            IbCm(pool=QpPool([2]), local_ip=1, ca_guid=1, **kw)
    cm = IbCm(pool=QpPool([2]), local_ip=1, ca_guid=1, psn=lambda: 1 << 24)
    with pytest.raises(ValueError, match="psn"):
        cm.connect(0, dst_ip=2, port=1)


def test_pool_never_leaks():
    """A random run: connects (some to ports nobody listens on), disconnects from either side,
    10 % of MADs lost and 5 % delivered twice, the other connection manager of the FPGA taking
    and giving back QPs of the same pool. When the timers have all run out, every QP is back."""
    rng = random.Random(7)

    def drop(s, d, m):
        return rng.random() < 0.10

    host, fpga, link = nodes(drop=drop, host_qps=6, fpga_qps=5,
                             host_kw=dict(max_cm_retries=2), fpga_kw=dict(max_cm_retries=2))
    fpga.listen(PORT + 1)
    other = []                                          # QPs the other connection manager holds
    now, stats = 0, {"established": 0}
    for _ in range(3000):
        now += rng.randrange(1, T10 // 2)
        r = rng.random()
        if r < 0.15:
            port = rng.choice([PORT, PORT + 1, PORT + 2])
            _, out = host.connect(now, dst_ip=FPGA, port=port)
            link.post(HOST, out)
        elif r < 0.25:
            for node, ip in ((host, HOST), (fpga, FPGA)):
                est = [c for c in node.connections.values() if c.state is State.ESTABLISHED]
                if est and rng.random() < 0.5:
                    link.post(ip, node.disconnect(now, rng.choice(est).local_comm_id))
        elif r < 0.30:
            q = fpga.pool.allocate()
            if q is not None:
                other.append(q)
        elif r < 0.35 and other:
            fpga.pool.free(other.pop(rng.randrange(len(other))))
        elif r < 0.40:
            for c in fpga.connections.values():
                if c.state is State.REP_SENT and rng.random() < 0.5:
                    fpga.data_seen(now, c.qpn)
        if rng.random() < 0.05 and link.log:
            s, d, _, m = link.log[-1]
            link.queue.append((s, d, m))                # a duplicate of the latest MAD
        link.poll(now)
        host.check()
        fpga.check()
        held = {c.qpn for c in fpga.connections.values()}
        assert not held & set(other)
        assert fpga.pool.free_count + len(held) + len(other) == fpga.pool.capacity
        assert host.pool.free_count + len(host.connections) == host.pool.capacity
        stats["established"] = host.counters["established"]
    # the end: no new connections; close what is established; let every timer run out
    for other_q in other:
        fpga.pool.free(other_q)
    rng = random.Random(8)
    link.drop = None
    for _ in range(20):
        for node, ip in ((host, HOST), (fpga, FPGA)):
            for c in list(node.connections.values()):
                if c.state is State.ESTABLISHED:
                    link.post(ip, node.disconnect(now, c.local_comm_id))
        link.run(now)
        now += 64 * T12 + host.time_wait_ns + fpga.time_wait_ns
        link.poll(now)
    assert not host.connections and not fpga.connections
    assert full(host.pool, fpga.pool)
    # the run did what it is for
    assert stats["established"] > 50 and host.counters["rejected"] > 10
    assert host.counters["retransmits"] > 10 and fpga.counters["retransmits"] > 10
    assert fpga.counters["rep_timeouts"] + host.counters["req_timeouts"] > 0
