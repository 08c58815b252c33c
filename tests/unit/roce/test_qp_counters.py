import random

import pytest

from rocegen.gateware.roce.qp_counters import QpCounters
from rocegen.sim.testing.harness import raises, run_sim

NAMES = ("a", "b", "c")


@pytest.mark.parametrize("num_qps,bits,step_bits", [(1, 32, 1), (4, 32, 1), (9, 3, 1), (3, 32, 6),
                                                    (5, 4, 3)])
def test_counts_match_model(num_qps, bits, step_bits):
    """Random events (several counters at once, bursts on one QP, idle cycles) and reads in
    between: every read equals the model's count modulo 2^bits. With ``step_bits`` > 1 each
    counter gains 0 .. 2^step_bits - 1 at a time."""
    rng = random.Random(num_qps * 100 + bits + step_bits)
    dut = QpCounters(num_qps, NAMES, bits=bits, step_bits=step_bits)
    smask = (1 << step_bits) - 1
    model = [[0] * len(NAMES) for _ in range(num_qps)]
    late = None                 # the previous cycle's events, not yet visible

    async def tb(ctx):
        nonlocal late
        for _ in range(1500):
            if rng.random() < 0.6:
                qp = rng.randrange(num_qps) if rng.random() < 0.7 else 0
                inc = rng.getrandbits(len(NAMES) * step_bits)
            else:
                qp, inc = rng.randrange(num_qps), 0
            rq, rs = rng.randrange(num_qps), rng.randrange(len(NAMES))
            ctx.set(dut.qp, qp)
            ctx.set(dut.inc, inc if step_bits == 1 else
                    [(inc >> (k * step_bits)) & smask for k in range(len(NAMES))])
            ctx.set(dut.rd_qp, rq)
            ctx.set(dut.rd_sel, rs)
            expect = model[rq][rs] % (1 << bits)      # before this and the last cycle's events
            await ctx.tick()
            got = ctx.get(dut.rd_data)
            assert got == expect, f"QP {rq} counter {NAMES[rs]}: {got}, model {expect}"
            if late is not None:
                for k in range(len(NAMES)):
                    model[late[0]][k] += (late[1] >> (k * step_bits)) & smask
            late = (qp, inc)

    run_sim(dut, testbenches=[tb])
    assert sum(map(sum, model)) > 1000


BAD = [
    ({"num_qps": 0, "names": NAMES}, ValueError, "num_qps must be 1..256, not 0"),
    ({"num_qps": 257, "names": NAMES}, ValueError, "num_qps must be 1..256, not 257"),
    ({"num_qps": 2.0, "names": NAMES}, TypeError, "num_qps must be an integer, not 2.0"),
    ({"num_qps": 2, "names": ()}, ValueError, "names must be 1..32 distinct non-empty strings"),
    ({"num_qps": 2, "names": ("a", "a")}, ValueError, "names must be 1..32 distinct"),
    ({"num_qps": 2, "names": NAMES, "bits": 0}, ValueError, "bits must be an integer 1..64, not 0"),
    ({"num_qps": 2, "names": NAMES, "bits": 65}, ValueError, "bits must be an integer 1..64"),
    ({"num_qps": 2, "names": NAMES, "step_bits": 0}, ValueError,
     r"step_bits must be an integer 1\.\.\d+, not 0"),
    ({"num_qps": 2, "names": NAMES, "bits": 4, "step_bits": 5}, ValueError,
     "step_bits must be an integer 1..4, not 5"),
]


# (the ids name the case by its index and error alone: tests/full_tier.txt lists some of them)
@pytest.mark.parametrize("kwargs,error,message", BAD,
                         ids=[f"kwargs{k}-{e.__name__}" for k, (_, e, _) in enumerate(BAD)])
def test_bad_parameters(kwargs, error, message):
    raises(error, message, lambda: QpCounters(**kwargs))
