"""IB CM reply builder: random records of every kind against the MADs the reference model
builds (its own REJ builder, with our CA GUID as the ARI as in its REJ TIMEOUT or without ARI,
its DREP and RTU builders, its GetResp to a Get of ClassPortInfo, a REP packed as the model
packs it), with idle cycles and backpressure; its latency."""

import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_layouts import ReplyKind
from rocegen.gateware.roce.ibcm.ibcm_reply import IbCmReply
from rocegen.sim.models.ibcm import IbCm, QpPool
from rocegen.sim.testing.amaranth_streams import StreamCollector, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import ibcm as I
from tests.unit.ibcm.mads import mad

GUID, RNR, RESP_TIME = 0x0002C9030012AB34, 5, 17


def model():
    return IbCm(pool=QpPool([2]), local_ip=1, ca_guid=GUID, rnr_retry_count=RNR,
                cm_response_timeout=RESP_TIME)


def random_record(rng, kind):
    r = {"kind": kind, "dst_ip": rng.getrandbits(32), "dst_qp": rng.getrandbits(24),
         "pkey": rng.getrandbits(16), "transaction_id": rng.getrandbits(64),
         "local_comm_id": rng.getrandbits(32), "remote_comm_id": rng.getrandbits(32),
         "local_qpn": rng.getrandbits(24), "starting_psn": rng.getrandbits(24),
         "responder_resources": rng.getrandbits(8), "initiator_depth": rng.getrandbits(8),
         "region": {"addr": rng.getrandbits(64), "rkey": rng.getrandbits(32),
                    "length": rng.getrandbits(32)},
         "message": rng.randrange(3), "reason": rng.choice(list(I.RejReason)).value,
         "ari_guid": 0, "class_specific": 0, "hdr_reserved": 0, "attribute_modifier": 0}
    if kind is ReplyKind.REJ:
        r["ari_guid"] = rng.randrange(2)
    if kind is ReplyKind.CLASS_PORT_INFO:
        r |= {"class_specific": rng.getrandbits(16), "hdr_reserved": rng.getrandbits(16),
              "attribute_modifier": rng.getrandbits(32)}
    return r


def expected(r):
    """The MAD the model sends for record ``r``."""
    cm, tid = model(), r["transaction_id"]
    local, remote = r["local_comm_id"], r["remote_comm_id"]
    kind = r["kind"]
    if kind is ReplyKind.REJ:
        ari = GUID.to_bytes(8, "big") if r["ari_guid"] else b""
        return cm._rej(tid, local=local, remote=remote, msg=r["message"], reason=r["reason"],
                       ari=ari)
    if kind is ReplyKind.DREP:
        return cm._drep(tid, local, remote)
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


def run(width, records, *, idle, backpressure, seed):
    dut = IbCmReply(width, ca_guid=GUID, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME)
    rng = random.Random(seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed)
    taken = []
    cycle = [0]

    async def tb(ctx):
        await send_records(ctx, dut.i, records, rng, idle)
        while len(col.packets) < len(records):
            await ctx.tick()

    async def watch(ctx):
        async for _, _, v, r in ctx.tick().sample(dut.i.valid, dut.i.ready):
            cycle[0] += 1
            if v and r:
                taken.append(cycle[0])

    run_sim(dut, testbenches=[tb], processes=[col.run, watch])
    return col, taken


@pytest.mark.parametrize("width", [64, 512])
def test_replies_are_the_models(width):
    rng = random.Random(width)
    records = [random_record(rng, k) for k in ReplyKind for _ in range(4)]
    rng.shuffle(records)
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


def test_parameters_are_checked():
    raises(ValueError, "width", lambda: IbCmReply(32))
    raises(ValueError, "ca_guid", lambda: IbCmReply(64, ca_guid=1 << 64))
    raises(ValueError, "rnr_retry_count", lambda: IbCmReply(64, rnr_retry_count=8))
    raises(ValueError, "cm_response_timeout", lambda: IbCmReply(64, cm_response_timeout=32))
