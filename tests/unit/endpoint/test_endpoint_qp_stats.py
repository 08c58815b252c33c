"""The endpoint's per-QP counters (:class:`EndpointQpStats`) against a counting model: random
receive-path events on random QPs, reads of every counter (the retry engine's answered by a model
behind ``retry_qp`` / ``retry_sel``) at random times."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.endpoint.endpoint_qp_stats import (
    QP_COUNTERS,
    RX_QP_COUNTERS,
    EndpointQpStats,
)
from rocegen.gateware.roce.requester.retry import QP_COUNTERS as RETRY_QP_COUNTERS
from rocegen.sim.testing.harness import raises, run_sim

EVENTS = ("drop_state", "drop_peer", "cnp")        # in RX_QP_COUNTERS order


def retry_value(qp, sel):
    return (qp * 7919 + sel * 104729 + 12345) % (1 << 32)


@pytest.mark.parametrize("num_qps, seed", [(1, 1), (5, 2), pytest.param(256, 3, marks=pytest.mark.full)])
def test_counts_and_reads_against_model(num_qps, seed):
    rng = random.Random(seed)
    dut = EndpointQpStats(num_qps)
    n_retry = len(RETRY_QP_COUNTERS)
    counts = [[0] * len(RX_QP_COUNTERS) for _ in range(num_qps)]
    checked = {"retry": 0, "rx": 0, "nonzero": 0}
    hot = rng.sample(range(num_qps), min(num_qps, 3))      # most events on a few QPs

    async def retry_port(ctx):
        async for _, _, qp, sel in ctx.tick().sample(dut.retry_qp, dut.retry_sel):
            ctx.set(dut.retry_data, retry_value(qp, sel))

    async def tb(ctx):
        history = [[row[:] for row in counts]] * 2     # counts as of each cycle's end, from -2
        for cycle in range(1500):
            qp = rng.choice(hot) if rng.random() < 0.8 else rng.randrange(num_qps)
            bits = [rng.random() < 0.4 for _ in EVENTS]
            ctx.set(dut.qp, qp)
            for name, bit in zip(EVENTS, bits):
                ctx.set(getattr(dut, name), bit)
                counts[qp][EVENTS.index(name)] += bit
            history.append([row[:] for row in counts])
            rd_qp = rng.choice(hot) if rng.random() < 0.7 else rng.randrange(num_qps)
            sel = rng.randrange(len(QP_COUNTERS))
            ctx.set(dut.rd_qp, rd_qp)
            ctx.set(dut.rd_sel, sel)
            await ctx.tick()
            got = ctx.get(dut.rd_data)
            if sel < n_retry:
                assert got == retry_value(rd_qp, sel), (cycle, QP_COUNTERS[sel])
                checked["retry"] += 1
            else:
                expect = history[cycle][rd_qp][sel - n_retry]
                assert got == expect, (cycle, rd_qp, QP_COUNTERS[sel])
                checked["rx"] += 1
                checked["nonzero"] += expect > 0
        assert min(checked.values()) > 100

    run_sim(dut, testbenches=[tb], processes=[retry_port])


def test_signature_and_parameters():
    assert QP_COUNTERS[:len(RETRY_QP_COUNTERS)] == RETRY_QP_COUNTERS
    assert QP_COUNTERS[len(RETRY_QP_COUNTERS):] == RX_QP_COUNTERS
    dut = EndpointQpStats(8)
    assert len(dut.rd_sel) == (len(QP_COUNTERS) - 1).bit_length()
    assert len(dut.retry_sel) == (len(RETRY_QP_COUNTERS) - 1).bit_length()
    Fragment.get(dut, None)
    raises(ValueError, "num_qps must be 1..256, not 0", lambda: EndpointQpStats(0))
