"""IB CM reply builder: random records of every kind against the MADs the reference model
builds (its own REJ builder, with our CA GUID as the ARI as in its REJ TIMEOUT or without ARI,
its REQ, DREQ, DREP and RTU builders, its GetResp to a Get of ClassPortInfo, its echo of a Get or Set it
does not support, a REP packed as the model packs it), with idle cycles and backpressure; its
latency, an echo taken with its last beat."""

import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_layouts import ReplyKind
from rocegen.gateware.roce.ibcm.ibcm_reply import IbCmReply
from rocegen.sim.models.ibcm import IbCm, QpPool
from rocegen.sim.models.ibcm.cm import Connection, Role, State
from rocegen.sim.testing.amaranth_streams import StreamCollector, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.ibcm_mads import mad
from rocegen.wire import ibcm as I

GUID, RNR, RESP_TIME = 0x0002C9030012AB34, 5, 17
#: our address, and what our REQs state besides
LOCAL_IP, CM_RETRIES, ACK_TIMEOUT, RETRY = 0x0A00_0002, 9, 13, 6


def model():
    return IbCm(pool=QpPool([2]), local_ip=LOCAL_IP, ca_guid=GUID, rnr_retry_count=RNR,
                cm_response_timeout=RESP_TIME, max_cm_retries=CM_RETRIES,
                local_ack_timeout=ACK_TIMEOUT, retry_count=RETRY)


def echoed(rng):
    """A Get or Set the model echoes (unsupported, or of a class version it has not), random
    but its MAD header's class, base version and method, and the model's echo of it."""
    get = rng.random() < 0.5
    attr = rng.randrange(I.ATTR_CLASS_PORT_INFO + 1, 1 << 16)     # (not ClassPortInfo)
    request = mad(attr, rng.getrandbits(64),
                  bytes(rng.getrandbits(8) for _ in range(I.MAD_DATA_LENGTH)),
                  method=I.METHOD_GET if get else I.METHOD_SET,
                  version=rng.choice([I.CM_CLASS_VERSION, 1, 3]), status=rng.getrandbits(16),
                  class_specific=rng.getrandbits(16), reserved=rng.getrandbits(16),
                  attribute_modifier=rng.getrandbits(32))
    (out,) = model().receive(0, request, src_ip=1)
    return request, out.mad


def random_record(rng, kind):
    r = {"kind": kind, "dst_ip": rng.getrandbits(32), "dst_qp": rng.getrandbits(24),
         "pkey": rng.getrandbits(16), "transaction_id": rng.getrandbits(64),
         "local_comm_id": rng.getrandbits(32), "remote_comm_id": rng.getrandbits(32),
         "local_qpn": rng.getrandbits(24), "starting_psn": rng.getrandbits(24),
         "responder_resources": rng.getrandbits(8), "initiator_depth": rng.getrandbits(8),
         "region": {"addr": rng.getrandbits(64), "rkey": rng.getrandbits(32),
                    "length": rng.getrandbits(32)},
         "message": rng.randrange(3), "reason": rng.choice(list(I.RejReason)).value,
         "ari_guid": 0, "class_specific": 0, "hdr_reserved": 0, "attribute_modifier": 0,
         "status": 0, "remote_qpn": rng.getrandbits(24), "port": rng.getrandbits(16),
         "path_mtu": rng.choice(list(I.MTU_CODES)), "src_port": rng.getrandbits(16)}
    if kind is ReplyKind.REQ:
        r["pkey"] = I.DEFAULT_PKEY
    if kind is ReplyKind.REJ:
        r["ari_guid"] = rng.randrange(2)
    if kind is ReplyKind.ECHO:
        r["request"], r["echo"] = echoed(rng)
        r["status"] = I.MAD_HDR.unpack(r["echo"])["status"]
    if kind is ReplyKind.CLASS_PORT_INFO:
        r |= {"class_specific": rng.getrandbits(16), "hdr_reserved": rng.getrandbits(16),
              "attribute_modifier": rng.getrandbits(32)}
    return r


def expected(r):
    """The MAD the model sends for record ``r``."""
    cm, tid = model(), r["transaction_id"]
    local, remote = r["local_comm_id"], r["remote_comm_id"]
    kind = r["kind"]
    if kind is ReplyKind.ECHO:
        return r["echo"]
    if kind is ReplyKind.REJ:
        ari = GUID.to_bytes(8, "big") if r["ari_guid"] else b""
        return cm._rej(tid, local=local, remote=remote, msg=r["message"], reason=r["reason"],
                       ari=ari)
    if kind is ReplyKind.DREP:
        return cm._drep(tid, local, remote)
    if kind is ReplyKind.DREQ:
        return cm._dreq(tid, local, remote, r["remote_qpn"])
    if kind is ReplyKind.REQ:
        conn = Connection(
            local_comm_id=local, role=Role.ACTIVE, state=State.REQ_SENT, peer_ip=r["dst_ip"],
            port=r["port"], qpn=r["local_qpn"], psn=r["starting_psn"], tid=tid,
            path_mtu=r["path_mtu"], responder_resources=r["responder_resources"],
            initiator_depth=r["initiator_depth"], local_ack_timeout=ACK_TIMEOUT,
            retry_count=RETRY, rnr_retry_count=RNR)
        return cm._req(conn, r["src_port"])
    if kind is ReplyKind.RTU:
        return cm._mad(I.ATTR_RTU, tid, I.RTU.pack(local_comm_id=local, remote_comm_id=remote))
    if kind is ReplyKind.CLASS_PORT_INFO:
        get = mad(I.ATTR_CLASS_PORT_INFO, tid, method=I.METHOD_GET,
                  class_specific=r["class_specific"], reserved=r["hdr_reserved"],
                  attribute_modifier=r["attribute_modifier"])
        (out,) = cm.receive(0, get, src_ip=r["dst_ip"])
        return out.mad
    # (the model packs its REP in _on_req; the same fields here)
    return cm._mad(I.ATTR_REP, tid, I.REP.pack(
        local_comm_id=local, remote_comm_id=remote, local_qpn=r["local_qpn"],
        starting_psn=r["starting_psn"], responder_resources=r["responder_resources"],
        initiator_depth=r["initiator_depth"], end_to_end_flow_control=1,
        rnr_retry_count=RNR, local_ca_guid=GUID,
        private_data=I.private_data(I.REP, I.REGION.pack(**r["region"]))))


def run(width, records, *, idle, backpressure, seed, regions=None):
    """The records through the reply builder; with ``regions`` (QP number -> region), its
    ``region_port`` read from them one cycle after ``region_qp``."""
    dut = IbCmReply(width, ca_guid=GUID, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME,
                    region_port=regions is not None, max_cm_retries=CM_RETRIES,
                    local_ack_timeout=ACK_TIMEOUT, retry_count=RETRY)
    rng = random.Random(seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed)
    taken = []
    cycle = [0]

    async def tb(ctx):
        ctx.set(dut.local_ip, LOCAL_IP)
        await send_records(ctx, dut.i, [strip(r) for r in records], rng, idle)
        while len(col.packets) < len(records):
            await ctx.tick()

    async def watch(ctx):
        async for _, _, v, r in ctx.tick().sample(dut.i.valid, dut.i.ready):
            cycle[0] += 1
            if v and r:
                taken.append(cycle[0])

    async def receiver(ctx):
        """The receiver's MAD: that of the ECHO offered, read asynchronously."""
        async for addr, valid, payload in ctx.changed(dut.mad.addr, dut.i.valid, dut.i.payload):
            tid = payload.transaction_id
            if valid and tid in held:
                ctx.set(dut.mad.data, int.from_bytes(held[tid][addr * B:(addr + 1) * B],
                                                     "little"))

    async def region_port(ctx):
        async for _, _, qpn in ctx.tick().sample(dut.region_qp):
            ctx.set(dut.region, regions.get(qpn, {"addr": 0, "rkey": 0, "length": 0}))

    B = width // 8
    held = {r["transaction_id"]: r["request"] for r in records if r["kind"] is ReplyKind.ECHO}
    run_sim(dut, testbenches=[tb], processes=[col.run, watch, receiver] +
            ([region_port] if regions is not None else []))
    return col, taken


def strip(r):
    """A record as the reply builder takes it (without the test's MADs)."""
    return {k: v for k, v in r.items() if k not in ("request", "echo")}


@pytest.mark.parametrize("width", [64, 512])
def test_replies_are_the_models(width):
    rng = random.Random(width)
    records = [random_record(rng, k) for k in ReplyKind for _ in range(6)]
    rng.shuffle(records)
    assert {r["status"] for r in records if r["kind"] is ReplyKind.ECHO} == \
        {I.STATUS_BAD_VERSION, I.STATUS_UNSUPPORTED_METHOD_ATTR}
    assert {r["ari_guid"] for r in records if r["kind"] is ReplyKind.REJ} == {0, 1}
    col, _ = run(width, records, idle=0.3, backpressure=0.3, seed=width + 1)
    assert len(col.packets) == len(records)
    for n, (r, pkt) in enumerate(zip(records, col.packets)):
        assert pkt.data == expected(r), (n, r["kind"])
        assert not pkt.error
        assert pkt.meta == {"dst_ip": r["dst_ip"], "dst_qp": r["dst_qp"], "pkey": r["pkey"]}


@pytest.mark.parametrize("width", [64, 512])
def test_latency(width):
    """First beat the cycle after the record is taken, one beat per cycle, the next record
    taken the cycle after the last beat."""
    rng = random.Random(2)
    records = [random_record(rng, ReplyKind.REP) for _ in range(3)]
    col, taken = run(width, records, idle=0, backpressure=0, seed=1)
    beats = 2048 // width
    for t, (first, last) in zip(taken, col.spans):
        assert (first, last) == (t + 1, t + beats)
    assert [b - a for a, b in zip([s[1] for s in col.spans], taken[1:])] == [1, 1]


@pytest.mark.parametrize("width", [64, 512])
def test_echo_is_taken_with_its_last_beat(width):
    """An echo: first beat the cycle after it is offered, taken in the cycle of its last beat;
    the next record's first beat two cycles after."""
    rng = random.Random(4)
    records = [random_record(rng, k) for k in (ReplyKind.ECHO, ReplyKind.ECHO, ReplyKind.REP)]
    col, taken = run(width, records, idle=0, backpressure=0, seed=1)
    beats = 2048 // width
    assert [p.data for p in col.packets] == [expected(r) for r in records]
    assert [last for _, last in col.spans[:2]] == taken[:2]
    assert [last - first for first, last in col.spans] == [beats - 1] * 3
    assert [b[0] - a for a, b in zip(taken, col.spans[1:])] == [2, 2]


@pytest.mark.parametrize("width", [64, 512])
def test_regions_read_per_qp(width):
    """With ``region_port``, a REP carries the region read for its QP, whatever its record's."""
    rng = random.Random(8)
    records = [random_record(rng, k) for k in list(ReplyKind) * 3]
    regions = {}
    for r in records:
        regions[r["local_qpn"]] = {"addr": rng.getrandbits(64), "rkey": rng.getrandbits(32),
                                   "length": rng.getrandbits(32)}
    col, _ = run(width, records, idle=0.3, backpressure=0.3, seed=3, regions=regions)
    for r, pkt in zip(records, col.packets):
        if r["kind"] is ReplyKind.REP:
            assert r["region"] != regions[r["local_qpn"]]
            r["region"] = regions[r["local_qpn"]]
        assert pkt.data == expected(r), r["kind"]


def test_parameters_are_checked():
    raises(ValueError, "width", lambda: IbCmReply(32))
    raises(ValueError, "ca_guid", lambda: IbCmReply(64, ca_guid=1 << 64))
    raises(ValueError, "rnr_retry_count", lambda: IbCmReply(64, rnr_retry_count=8))
    raises(ValueError, "cm_response_timeout", lambda: IbCmReply(64, cm_response_timeout=32))
    raises(TypeError, "region_port", lambda: IbCmReply(64, region_port=1))
