"""The FPGA's two connection managers on one QP pool: the out-of-band one on UDP port 17185
(:class:`rocegen.sim.models.cm.cm.ConnectionManagerModel` with ``pool``) and the IB CM
(:class:`rocegen.sim.models.ibcm.IbCm`). A random run of OPEN_QP/CLOSE_QP datagrams and of IB CM
connections (with lost MADs, timeouts and disconnections) never gives one QP to both, never
loses one, and ends with the pool full."""

import random

import pytest

from rocegen.sim.models.cm.cm import ConnectionManagerModel
from rocegen.sim.models.ibcm import IbCm, QpPool, State
from rocegen.wire.cm import ACK_ACK, ACK_NO_QP, QPN_BASE, REQ_CLOSE_QP, REQ_OPEN_QP, request
from tests.unit.ibcm.link import Link, parse

HOST, FPGA = 0x0A000001, 0x0A000002
PORT = 7174
NUM_QPS = 5
T = 4096 << 10


def _open(cm17185, host_qpn):
    res = cm17185.receive(request(REQ_OPEN_QP, loc_qpn=host_qpn, loc_psn=1, loc_ip=HOST,
                                  listening_port=0x4322), src_ip=HOST)
    f = res.reply.fields
    return f["loc_qpn"] if f["ack_type"] == ACK_ACK else (None if f["ack_type"] == ACK_NO_QP
                                                           else f["ack_type"])


def _close(cm17185, qpn):
    res = cm17185.receive(request(REQ_CLOSE_QP, rem_qpn=qpn, loc_ip=HOST), src_ip=HOST)
    assert res.reply.fields["ack_type"] == ACK_ACK


def test_both_managers_share_the_pool_without_leaks():
    rng = random.Random(11)
    pool = QpPool(range(QPN_BASE, QPN_BASE + NUM_QPS))
    cm17185 = ConnectionManagerModel(NUM_QPS, local_ip=FPGA, pool=pool)
    fpga = IbCm(pool=pool, local_ip=FPGA, ca_guid=2, ports=[PORT], max_cm_retries=2, seed=5)
    host = IbCm(pool=QpPool(range(0x100, 0x110)), local_ip=HOST, ca_guid=1,
                cm_response_timeout=10, max_cm_retries=2, seed=6)
    link = Link({HOST: host, FPGA: fpga}, drop=lambda s, d, m: rng.random() < 0.1)
    oob = []                               # QPs open through port 17185
    now = 0
    seen = {"oob_full": 0}
    for step in range(2000):
        now += rng.randrange(1, T // 2)
        r = rng.random()
        if r < 0.2:
            qpn = _open(cm17185, 0x1000 + step)
            if qpn is None:
                seen["oob_full"] += 1
            else:
                oob.append(qpn)
        elif r < 0.35 and oob:
            _close(cm17185, oob.pop(rng.randrange(len(oob))))
        elif r < 0.55:
            _, out = host.connect(now, dst_ip=FPGA, port=PORT)
            link.post(HOST, out)
        elif r < 0.7:
            est = [c for c in host.connections.values() if c.state is State.ESTABLISHED]
            if est:
                link.post(HOST, host.disconnect(now, rng.choice(est).local_comm_id))
        link.poll(now)
        ib = {c.qpn for c in fpga.connections.values()}
        assert not ib & set(oob), (ib, oob)
        assert len(ib) + len(oob) + pool.free_count == pool.capacity
        assert set(oob) == {QPN_BASE + k for k, u in enumerate(cm17185.in_use) if u}
        cm17185.check_pool()
    # both met a full pool (a REJ "no QP", 1 in ib_cm.h)
    assert seen["oob_full"] > 0 and any(parse(m)[2]["reason"] == 1
                                        for m in link.sent("REJ", FPGA))
    for qpn in oob:
        _close(cm17185, qpn)
    link.drop = None
    for _ in range(10):
        for node, ip in ((host, HOST), (fpga, FPGA)):
            for c in list(node.connections.values()):
                if c.state is State.ESTABLISHED:
                    link.post(ip, node.disconnect(now, c.local_comm_id))
        now += 64 * T + fpga.time_wait_ns + host.time_wait_ns
        link.poll(now)
    assert not fpga.connections and not host.connections
    assert pool.free_count == pool.capacity and not any(cm17185.in_use)


def test_the_out_of_band_manager_refuses_a_foreign_pool_number():
    pool = QpPool([QPN_BASE + NUM_QPS])                       # outside its QPs
    cm17185 = ConnectionManagerModel(NUM_QPS, local_ip=FPGA, pool=pool)
    with pytest.raises(ValueError, match="handed out QP"):
        _open(cm17185, 5)
    assert pool.free_count == 1
    with pytest.raises(ValueError, match="pool must have"):
        ConnectionManagerModel(NUM_QPS, local_ip=FPGA, pool=[1, 2])
