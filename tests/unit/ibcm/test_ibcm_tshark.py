"""Wireshark judges the CM model's frames: a connection (REQ with librdmacm's cma_hdr, REP, RTU),
its disconnection (DREQ, DREP), a REQ to a port nobody listens on (REJ), a REP that times out
(REJ), a ClassPortInfo Get and its GetResp and an MRA are written to a pcap, and tshark must
name every message and read back the fields the model set. Needs ``tshark``: skipped without it
on a developer's machine, a failure in CI (``CI=true``), as in tests/test_interop.py."""

import os
import shutil
import subprocess

import pytest

from rocegen.sim.models.ibcm import IbCm, Outgoing, QpPool, Region, wrap
from rocegen.sim.testing.pcap import PcapWriter
from rocegen.wire import ibcm as I
from tests.unit.ibcm.link import Link

HOST, FPGA = 0x0A000001, 0x0A000002
MAC = {HOST: 0x02000000000A, FPGA: 0x02000000000B}
PORT = 7174

FIELDS = [
    "_ws.col.Info", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.deth.q_key",
    "infiniband.deth.srcqp", "infiniband.mad.mgmtclass", "infiniband.mad.classversion",
    "infiniband.mad.method", "infiniband.mad.status", "infiniband.mad.attributeid",
    "infiniband.mad.transactionid",
    "infiniband.cm.req", "infiniband.cm.req.serviceid", "infiniband.cm.req.serviceid.dport",
    "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn", "infiniband.cm.req.pppmtu",
    "infiniband.cm.req.transpsvctype", "infiniband.cm.req.responderres",
    "infiniband.cm.req.initdepth", "infiniband.cm.req.prim_localgid_ipv4",
    "infiniband.cm.req.prim_remotegid_ipv4", "infiniband.cm.req.ip_cm.ipv",
    "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
    "infiniband.cm.req.ip_cm.private",
    "infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn",
    "infiniband.cm.rep.startpsn", "infiniband.cm.rep.respres", "infiniband.cm.rep.initdepth",
    "infiniband.cm.rep.localcaguid", "infiniband.cm.rep.private",
    "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
    "infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid",
    "infiniband.cm.rej.msgrej", "infiniband.cm.rej.reason", "infiniband.cm.rej.rejinfolen",
    "infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
    "infiniband.cm.req.remoteqpneecn",
    "infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid",
]


@pytest.fixture(scope="module")
def tshark():
    path = shutil.which("tshark")
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("tshark is missing in CI (.ci/run installs it with `make tshark`)")
        pytest.skip("tshark is not installed (as root: make tshark)")
    return path


def _decode(tshark, pcap):
    cmd = [tshark, "-n", "-r", str(pcap), "-T", "fields", "-E", "separator=/t",
           "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [dict(zip(FIELDS, line.split("\t"))) for line in out.splitlines()]


def _num(v):
    return int(v, 0)


def _scenario():
    """The MADs of the scenario, in order: ``(src_ip, dst_ip, mad)``, and the two nodes."""
    host = IbCm(pool=QpPool(range(0x100, 0x104)), local_ip=HOST, ca_guid=0x1111AAAA, seed=3,
                responder_resources=2, initiator_depth=3, cm_response_timeout=10,
                max_cm_retries=1)
    fpga = IbCm(pool=QpPool(range(0x200, 0x204)), local_ip=FPGA, ca_guid=0x2222BBBB, seed=4,
                ports=[PORT], region=Region(0xABC000, 0x5A5A, 4096), responder_resources=1,
                initiator_depth=1)
    link = Link({HOST: host, FPGA: fpga})
    cid, out = host.connect(0, dst_ip=FPGA, port=PORT, private_data=b"rocegen", path_mtu=1024)
    link.post(HOST, out)
    link.run(0)
    link.post(HOST, host.disconnect(1, cid))
    link.run(1)
    _, out = host.connect(2, dst_ip=FPGA, port=PORT + 1)               # REJ: no such port
    link.post(HOST, out)
    link.run(2)
    # a REP nobody answers: sent twice (max CM retries 1), then REJ "timeout"
    link.drop = lambda s, d, m: s == FPGA or d == FPGA and link.sent("REQ").count(m) > 1
    _, out = host.connect(3, dst_ip=FPGA, port=PORT)
    link.post(HOST, out)
    link.run(3)
    link.drop = lambda s, d, m: True
    for t in (3 + (4096 << 10), 3 + 2 * (4096 << 10)):
        link.post(FPGA, fpga.poll(t))
        link.run(t)
    link.drop = None
    get = I.MAD_HDR.pack(base_version=1, mgmt_class=7, class_version=2, method=1,
                         transaction_id=0xC0FFEE, attribute_id=I.ATTR_CLASS_PORT_INFO) + bytes(232)
    link.post(HOST, [Outgoing(FPGA, get)])
    link.run(10 ** 9)
    mra = I.MAD_HDR.pack(base_version=1, mgmt_class=7, class_version=2, method=3,
                         transaction_id=0xBEEF, attribute_id=I.ATTR_MRA) + I.MRA.pack(
        local_comm_id=0x77, remote_comm_id=0x88, message_mraed=0, service_timeout=16)
    link.post(FPGA, [Outgoing(HOST, mra)])
    return [(s, d, m) for s, d, _, m in link.log], host, fpga, cid


def test_tshark_reads_the_cm_messages(tshark, tmp_path):
    mads, host, fpga, cid = _scenario()
    pcap = tmp_path / "ibcm.pcap"
    with PcapWriter(pcap) as p:
        for k, (s, d, m) in enumerate(mads):
            p.write(wrap(m, src_mac=MAC[s], dst_mac=MAC[d], src_ip=s, dst_ip=d, psn=k), 1000 * k)
    rows = _decode(tshark, pcap)
    names = [r["_ws.col.Info"] for r in rows]
    assert names == ["CM: " + n for n in (
        "ConnectRequest", "ConnectReply", "ReadyToUse", "DisconnectRequest", "DisconnectReply",
        "ConnectRequest", "ConnectReject", "ConnectRequest", "ConnectReply", "ConnectReply",
        "ConnectReject", "ClassPortInfo", "ClassPortInfo", "MsgRcptAck")], names
    for r in rows:             # every one a UD SEND_ONLY to QP1 from QP1, Q_Key 0x80010000
        assert (_num(r["infiniband.bth.opcode"]), _num(r["infiniband.bth.destqp"]),
                _num(r["infiniband.deth.q_key"]), _num(r["infiniband.deth.srcqp"])) == \
            (0x64, 1, 0x80010000, 1)
        assert (_num(r["infiniband.mad.mgmtclass"]), _num(r["infiniband.mad.classversion"])) == \
            (7, 2)
    req, rep, rtu, dreq, drep, _, rej, _, _, _, rej_to, get, resp, mra = rows
    p_cid = _num(rep["infiniband.cm.rep"])
    # (both ends of the first connection are in time-wait still: their records are there)
    a, p = host.connections[cid], fpga.connections[p_cid]
    # REQ
    assert _num(req["infiniband.cm.req"]) == cid
    assert _num(req["infiniband.cm.req.serviceid"]) == 0x0000000001060000 | PORT
    assert _num(req["infiniband.cm.req.serviceid.dport"]) == PORT
    assert _num(req["infiniband.cm.req.localqpn"]) == 0x100                # the host's first QP
    assert _num(req["infiniband.cm.req.pppmtu"]) == 3                      # 1024 bytes
    assert _num(req["infiniband.cm.req.transpsvctype"]) == 0               # RC
    assert (_num(req["infiniband.cm.req.responderres"]),
            _num(req["infiniband.cm.req.initdepth"])) == (2, 3)
    assert (req["infiniband.cm.req.prim_localgid_ipv4"],
            req["infiniband.cm.req.prim_remotegid_ipv4"]) == ("10.0.0.1", "10.0.0.2")
    assert (_num(req["infiniband.cm.req.ip_cm.ipv"]), req["infiniband.cm.req.ip_cm.sip4"],
            req["infiniband.cm.req.ip_cm.dip4"]) == (4, "10.0.0.1", "10.0.0.2")
    assert bytes.fromhex(req["infiniband.cm.req.ip_cm.private"].replace(":", ""))[:7] == \
        b"rocegen"
    assert _num(req["infiniband.cm.req.startpsn"]) == a.psn == p.peer_psn
    # REP: the FPGA's first QP, its PSN, the resources min(1, 3) and min(1, 2), the region
    assert _num(rep["infiniband.cm.rep.remotecommid"]) == cid
    assert _num(rep["infiniband.cm.rep.localqpn"]) == 0x200
    assert (_num(rep["infiniband.cm.rep.respres"]), _num(rep["infiniband.cm.rep.initdepth"])) \
        == (1, 1)
    assert _num(rep["infiniband.cm.rep.localcaguid"]) == 0x2222BBBB
    region = bytes.fromhex(rep["infiniband.cm.rep.private"].replace(":", ""))[:16]
    assert region == (0xABC000).to_bytes(8, "big") + (0x5A5A).to_bytes(4, "big") + \
        (4096).to_bytes(4, "big")
    assert _num(rep["infiniband.cm.rep.startpsn"]) == p.psn == a.peer_psn
    # RTU, DREQ, DREP: the IDs each way
    assert (_num(rtu["infiniband.cm.rtu.localcommid"]),
            _num(rtu["infiniband.cm.rtu.remotecommid"])) == (cid, p_cid)
    assert (_num(dreq["infiniband.cm.dreq.localcommid"]),
            _num(dreq["infiniband.cm.dreq.remotecommid"]),
            _num(dreq["infiniband.cm.req.remoteqpneecn"])) == (cid, p_cid, 0x200)
    assert (_num(drep["infiniband.cm.drsp.localcommid"]),
            _num(drep["infiniband.cm.drsp.remotecommid"])) == (p_cid, cid)
    # REJs: invalid service ID (8) of a REQ (0); timeout (4) of "other" (2) with 8 bytes of ARI
    assert (_num(rej["infiniband.cm.rej.reason"]), _num(rej["infiniband.cm.rej.msgrej"]),
            _num(rej["infiniband.cm.rej.localcommid"])) == (8, 0, 0)
    assert (_num(rej_to["infiniband.cm.rej.reason"]), _num(rej_to["infiniband.cm.rej.msgrej"]),
            _num(rej_to["infiniband.cm.rej.rejinfolen"])) == (4, 2, 8)
    # ClassPortInfo: Get, then GetResp with the same transaction ID; the MRA's header
    assert (_num(get["infiniband.mad.method"]), _num(resp["infiniband.mad.method"]),
            _num(resp["infiniband.mad.status"])) == (1, 0x81, 0)
    assert _num(get["infiniband.mad.transactionid"]) == \
        _num(resp["infiniband.mad.transactionid"]) == 0xC0FFEE
    assert (_num(mra["infiniband.mad.attributeid"]), _num(mra["infiniband.mad.method"])) == \
        (0x11, 3)
