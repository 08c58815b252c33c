"""Connection manager traffic port: the generator runs of random test-traffic requests against
the model's, held under backpressure; requests arriving while a run is held are dropped."""

import random

from rocegen.gateware.roce.cm.cm_traffic import CmTraffic
from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.sim.models.cm import cm as M
from rocegen.sim.testing.harness import run_sim
from rocegen.wire.headers import CM
from tests.unit.cm.test_cm import Sink

HOST = 0x0A01000B


def runs(rng, n):
    """``n`` accepted test-traffic requests: (the CM_RUN payload, the model's generator run)."""
    model = M.ConnectionManagerModel(4, local_ip=0x0A010064)
    for _ in range(4):
        model.receive(M.request(M.REQ_OPEN_QP, loc_ip=HOST), src_ip=HOST)
    out = []
    while len(out) < n:
        k = rng.randrange(4)
        raw = M.traffic(QPN_BASE + k, rng.choice([0, 1, 4096, rng.getrandbits(31)]),
                        rng.getrandbits(32), rng.getrandbits(32), write=rng.random() < 0.5,
                        imm=rng.random() < 0.5, window_log2=rng.choice([0, 1, 31, rng.randrange(32)]),
                        read=rng.random() < 0.3, loc_ip=HOST)
        # READ, the atomics and the code of none (3) too (byte 51 bits 6-5)
        raw = raw[:51] + bytes([raw[51] | rng.choice([0, 0, 1, 2, 3]) << 5]) + raw[52:]
        res = model.receive(raw, src_ip=HOST)
        assert res.gen is not None, res.pulses
        out.append(({"qp": k, "req": CM.unpack(raw)}, res.gen))
    return out


def test_runs_match_the_model():
    rng = random.Random(1)
    cases = runs(rng, 60)
    dut = CmTraffic()
    sink = Sink(dut.gen, backpressure=0.6, seed=2)
    expected = []

    async def tb(ctx):
        for payload, gen in cases:
            for _ in range(rng.randrange(3)):
                await ctx.tick()
            busy = ctx.get(dut.gen.valid)
            if not busy:
                expected.append(gen)
            ctx.set(dut.i.payload, payload)
            ctx.set(dut.i.valid, 1)
            await ctx.tick()
            ctx.set(dut.i.valid, 0)
        while ctx.get(dut.gen.valid):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[sink.run])
    assert sink.items == expected
    assert 10 < len(expected) < len(cases)          # some dropped while a run was held
    assert {g["opcode"] for g in expected} == set(range(7))     # every work-request code
