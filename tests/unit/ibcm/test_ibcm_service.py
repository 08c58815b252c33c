"""QP1 with the IB CM's passive side behind it, whole (``IbCmService``): the story of
test_ibcm_passive (one of everything the passive side does) sent as RoCEv2 datagrams among
datagrams that are not the CM's; every packet out is the reference model's answer put in a UD
SEND_ONLY from QP1 (``sim.models.ibcm.qp1.egress``), the PSNs counting; the counters are the
models'; W = 64 and 512, idle cycles in, backpressure out and on the QP pool."""

import random

import pytest

from rocegen.gateware.roce.ibcm.ibcm_service import COUNTERS, IbCmService
from rocegen.sim.models.ibcm import QpPool
from rocegen.sim.models.ibcm.qp1 import egress, ingress
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.ibcm_mads import FPGA, req
from rocegen.wire import headers as H
from rocegen.wire import ibcm as I
from rocegen.wire import opcodes as opc
from tests.unit.ibcm.chain import counter_process, pool_process
from tests.unit.ibcm.test_ibcm_passive import (
    BLOCK_QPNS,
    CLK_HZ,
    FIRST_CID,
    GUID,
    PORT,
    PORT2,
    PSN_SEED,
    REGION,
    RESP_TIME,
    RNR,
    model_counts,
    story,
)


def datagram(src_ip, payload, *, opcode=opc.OP_UD_SEND_ONLY, dest_qp=I.QP1, qkey=I.QP1_QKEY):
    """``payload`` from QP1 of ``src_ip`` to ``dest_qp`` of ours, as RoCE's ICRC check hands
    datagrams on (IPv4 header first, no ICRC)."""
    body = H.BTH.pack(opcode=opcode, pkey=I.DEFAULT_PKEY, dest_qp=dest_qp) + \
        H.DETH.pack(qkey=qkey, src_qp=I.QP1) + payload
    udp = H.UDP.pack(src_port=I.UDP_SPORT, dst_port=H.UDP_PORT_ROCEV2,
                     length=H.UDP.length + len(body) + 4)
    ip = H.IPV4.pack(version=4, ihl=5, total_length=H.IPV4.length + len(udp) + len(body) + 4,
                     ttl=64, protocol=H.IP_PROTO_UDP, src=src_ip, dst=FPGA)
    return ip + udp + body


def datagrams(sc, rng):
    """The story's MADs, each as a datagram, with others among them that the ingress drops
    (a wrong Q_Key) or does not look at (to another QP, another opcode)."""
    out = []
    for ip, mad in sc.inputs:
        if rng.random() < 0.3:
            out.append(Packet(rng.choice([
                datagram(ip, mad, qkey=0x1234), datagram(ip, mad, dest_qp=0x200),
                datagram(ip, mad, opcode=opc.OP_RC_SEND_ONLY)])))
        out.append(Packet(datagram(ip, mad)))
    return out


def run(width, packets, sc, *, connections=8, seed=0):
    dut = IbCmService(width, ca_guid=GUID, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME,
                      ports=[PORT, PORT2], connections=connections, first_comm_id=FIRST_CID,
                      psn_seed=PSN_SEED, clk_hz=CLK_HZ, qpns=BLOCK_QPNS, queue=2, **sc.params)
    rng = random.Random(seed)
    pool = QpPool(sc.pool._all)
    drv = StreamDriver(dut.i, width, idle=0.3, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=0.3, seed=seed + 1)
    counts = dict.fromkeys(COUNTERS, 0)

    count = counter_process({name: getattr(dut, name) for name in COUNTERS}, counts)

    async def tb(ctx):
        ctx.set(dut.local_ip, FPGA)
        ctx.set(dut.region, {"addr": REGION.addr, "rkey": REGION.rkey, "length": REGION.length})
        for p in packets:           # (one MAD at a time: the queue never overflows)
            await drv.send(ctx, [p])
            await ctx.tick().repeat(4)
            while ctx.get(dut.ingress.o.valid) or not ctx.get(dut.core.rx.i.ready):
                await ctx.tick()
        await ctx.tick().repeat(2 * connections + 4 * 2048 // width + 60)

    run_sim(dut, testbenches=[tb], processes=[
        col.run, count, pool_process(dut, pool, rng, backpressure=0.3, delay=3)])
    return col.packets, pool, counts


@pytest.mark.parametrize("width", [64, 512])
def test_the_story_through_qp1(width):
    rng = random.Random(width + 1)
    sc = story(rng)
    packets = datagrams(sc, rng)
    got, pool, counts = run(width, packets, sc, seed=width)
    assert len(got) == len(sc.expected)
    for psn, (pkt, (dst_ip, mad)) in enumerate(zip(got, sc.expected)):
        payload, udp = egress(mad, dst_ip=dst_ip, dst_qp=I.QP1, pkey=I.DEFAULT_PKEY, psn=psn)
        assert pkt.data == payload and not pkt.error, psn
        assert pkt.meta["udp"] == {**udp, "dscp": 0, "ecn": 0, "icrc": 1, "checksum": 0}, psn
    assert pool.allocated == sc.pool.allocated
    seen = [ingress(p.data) for p in packets]
    want = {f"qp1_{c}": 0 for c in ("drop_pkey", "drop_error", "drop_overflow")}
    want |= {"qp1_mads": sum(v is not None for v in seen),
             "qp1_drop_qkey": sum(v is not None and v.verdict == "drop_qkey" for v in seen)}
    assert {c: counts[c] for c in want} == want and want["qp1_drop_qkey"] > 0
    assert {c: counts[c] for c in model_counts(sc)} == model_counts(sc)


def burst(width, queue, n, seed):
    """``n`` REQs from ``n`` hosts back to back into a service of ``queue`` MADs (no idle
    cycle in, none of backpressure out, the pool answering at once): the REPs out and the
    counts."""
    rng = random.Random(seed)
    packets = [Packet(datagram(0x0A00_0100 + k, req(rng, src_ip=0x0A00_0100 + k, port=PORT)))
               for k in range(n)]
    dut = IbCmService(width, ca_guid=GUID, rnr_retry_count=RNR, cm_response_timeout=RESP_TIME,
                      ports=[PORT], connections=n, first_comm_id=FIRST_CID, psn_seed=PSN_SEED,
                      clk_hz=CLK_HZ, qpns=BLOCK_QPNS, queue=queue, responder_resources=1,
                      initiator_depth=1)
    pool = QpPool(list(BLOCK_QPNS)[:n])
    drv = StreamDriver(dut.i, width, idle=0.0, seed=seed)
    col = StreamCollector(dut.o, width, backpressure=0.0, seed=seed)
    counts = dict.fromkeys(COUNTERS, 0)

    async def tb(ctx):
        ctx.set(dut.local_ip, FPGA)
        await drv.send(ctx, packets)
        await ctx.tick().repeat(n * (2 * n + 4 * 2048 // width + 60))

    run_sim(dut, testbenches=[tb], processes=[
        col.run, counter_process({name: getattr(dut, name) for name in COUNTERS}, counts),
        pool_process(dut, pool, rng)])
    reps = [p for p in col.packets
            if I.MAD_HDR.unpack(p.data[I.UD_OUT.length:])["attribute_id"] == I.ATTR_REP]
    return reps, counts


@pytest.mark.parametrize("width", [64, 512])
def test_a_burst_of_reqs_waits_in_the_queue(width):
    """Eight REQs at the line's pace: a queue of eight MADs holds those the CM has not taken
    up yet, and each gets its REP; a queue of two loses some (counted), which the hosts' CMs
    would send again."""
    reps, counts = burst(width, 8, 8, seed=width)
    assert len(reps) == 8 and counts["qp1_drop_overflow"] == 0, counts
    assert counts["established"] == 0 and counts["qp1_mads"] == 8
    reps, counts = burst(width, 2, 8, seed=width)
    assert counts["qp1_drop_overflow"] > 0 and len(reps) == 8 - counts["qp1_drop_overflow"]
