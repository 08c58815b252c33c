"""Segmenter against the segmentation model: every opcode (READ when built with ``reads``),
lengths around the path MTU, every path MTU, PSN wrap-around, random idle input and
backpressure."""

import random

import pytest

from rocegen.gateware.roce.requester.segmenter import Segmenter
from rocegen.sim.models.requester.requester import (
    PMTUS,
    SEND_OPCODES,
    QpSegment,
    WorkRequest,
    WrOpcode,
    segment,
)
from rocegen.sim.testing.harness import run_sim
from rocegen.wire import opcodes as opc


def cases(rng, pmtu, opcodes):
    lengths = [0, 1, 3, 4, pmtu - 1, pmtu, pmtu + 1, 2 * pmtu, 3 * pmtu + 7,
               rng.randrange(1, 20 * pmtu)]
    out = []
    for n in lengths:
        wr = WorkRequest(wr_id=rng.getrandbits(32), opcode=rng.choice(opcodes), length=n,
                         local_addr=rng.getrandbits(20), remote_offset=rng.getrandbits(40),
                         imm=rng.getrandbits(32))
        qp = QpSegment(dest_qpn=rng.getrandbits(24), rkey=rng.getrandbits(32),
                     base_va=rng.getrandbits(64), psn=rng.choice([0, (1 << 24) - 3,
                                                                 rng.getrandbits(24)]),
                     pmtu=pmtu, ack_every=1 << rng.randrange(0, 4))
        out.append((wr, qp))
    return out


@pytest.mark.parametrize("reads, atomics", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("pmtu", PMTUS)
def test_segmenter_matches_model(pmtu, reads, atomics):
    rng = random.Random(pmtu + reads)
    dut = Segmenter(reads=reads, atomics=atomics)
    opcodes = [op for op in WrOpcode if atomics or not op.is_atomic]
    work = cases(rng, pmtu, opcodes if reads else SEND_OPCODES)
    if reads:
        work += [(WorkRequest(wr_id=k, opcode=WrOpcode.READ, length=n,
                              local_addr=rng.getrandbits(32), remote_offset=rng.getrandbits(64)),
                  QpSegment(dest_qpn=1, rkey=2, base_va=rng.getrandbits(64),
                          psn=(1 << 24) - 2, pmtu=pmtu))
                 for k, n in enumerate([0, 1, pmtu, pmtu + 1, 7 * pmtu + 3])]
    if atomics:
        work += [(WorkRequest(wr_id=100 + k, opcode=op, length=n, local_addr=64 * k,
                              remote_offset=rng.getrandbits(64) & ~7),
                  QpSegment(dest_qpn=1, rkey=rng.getrandbits(32), base_va=rng.getrandbits(64),
                            psn=(1 << 24) - 1, pmtu=pmtu))
                 for k, (op, n) in enumerate([(WrOpcode.FETCH_ADD, 8), (WrOpcode.COMPARE_SWAP, 0),
                                              (WrOpcode.FETCH_ADD, 5000)])]
    if reads:
        rng.shuffle(work)
    expected = []
    for wr, qp in work:
        model_qp = QpSegment(**vars(qp))
        for p in segment(wr, model_qp):
            expected.append((wr, qp, p))
    got, done = [], []

    async def feed(ctx):
        for wr, qp in work:
            while rng.random() < 0.3:
                ctx.set(dut.i.valid, 0)
                await ctx.tick()
            ctx.set(dut.i.payload, {
                "wr": {"wr_id": wr.wr_id, "qp": 3, "opcode": wr.opcode.value,
                       "local_addr": wr.local_addr, "length": wr.length,
                       "remote_offset": wr.remote_offset, "imm": wr.imm},
                "qp": {"dest_qpn": qp.dest_qpn, "rkey": qp.rkey, "base_va": qp.base_va,
                       "psn": qp.psn, "pmtu_log2": qp.pmtu.bit_length() - 1,
                       "ack_every_log2": qp.ack_every.bit_length() - 1}})
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def collect(ctx):
        while True:
            ready = rng.random() > 0.3
            ctx.set(dut.o.ready, ready)
            _, _, v, p, d, npsn = await ctx.tick().sample(dut.o.valid, dut.o.payload, dut.done,
                                                           dut.next_psn)
            if v and ready:
                got.append(p)
            if d:
                done.append(npsn)

    async def tb(ctx):
        await feed(ctx)
        while len(got) < len(expected):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[collect])
    assert len(got) == len(expected)
    for (wr, qp, e), g in zip(expected, got, strict=True):
        assert g.opcode == e.opcode and g.psn == e.psn and g.length == e.length
        assert (g.ack_req, g.se, g.padcnt, g.last) == (e.ack_req, e.se, e.padcnt, e.last)
        assert g.local_addr == (wr.local_addr + e.offset) & 0xFFFFFFFF
        assert g.has_reth == (e.reth is not None)
        if e.reth:
            assert (g.va, g.rkey, g.dma_len) == e.reth
        assert g.has_imm == (e.imm is not None)
        if e.imm is not None:
            assert g.imm == e.imm
        if e.atomic:
            assert (g.va, g.rkey) == e.atomic
        assert g.wr_id == wr.wr_id and g.dest_qpn == qp.dest_qpn and g.qp == 3
    assert done == [(e.psn + e.psns) % (1 << 24) for _, _, e in expected if e.last]
    if reads:
        assert sum(g.opcode == opc.OP_RC_RDMA_READ_REQUEST for g in got) >= 5
    if atomics:
        assert {opc.OP_RC_COMPARE_SWAP, opc.OP_RC_FETCH_ADD} <= {g.opcode for g in got}


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_reads_is_validated():
    with pytest.raises(TypeError, match="reads"):
        Segmenter(reads=1)
