"""Ring space of the streaming front end: words and messages held against a Python queue, with
random adds and completions (of every source and status)."""

import random
from collections import deque

import pytest

from rocegen.gateware.roce.frontend.stream_space import RingSpace
from rocegen.gateware.roce.layouts import CplStatus, WrSource
from rocegen.sim.testing.harness import raises, run_sim


@pytest.mark.parametrize("ring_words,max_inflight", [(64, 4), (1000, 16), (8, 1)])
def test_against_a_queue(ring_words, max_inflight):
    rng = random.Random(ring_words)
    dut = RingSpace(ring_words, max_inflight)
    held = deque()                          # (words, cycle added)
    counts = {"ok": 0, "err": 0, "given_back": 0}

    async def tb(ctx):
        used = 0
        for cycle in range(3000):
            add = None
            if len(held) < max_inflight and rng.random() < 0.3:
                add = rng.randrange(min(ring_words - used, 2 * ring_words // 3) + 1)
            cpl = None
            if rng.random() < 0.35:
                src = rng.choice([WrSource.STREAM] * 3 + [WrSource.USER, WrSource.GENERATOR])
                status = rng.choice([CplStatus.OK, CplStatus.OK, CplStatus.FLUSHED,
                                     CplStatus.RETRY_EXCEEDED])
                ripe = held and held[0][1] <= cycle - 2
                if src != WrSource.STREAM or ripe or not held:
                    cpl = {"wr_id": rng.getrandbits(32), "qp": rng.randrange(256),
                           "status": status, "src": src}
            ctx.set(dut.add.valid, add is not None)
            ctx.set(dut.add.payload, add or 0)
            ctx.set(dut.cpl.valid, cpl is not None)
            if cpl:
                ctx.set(dut.cpl.payload, cpl)
            assert ctx.get(dut.cpl.ready)
            await ctx.tick()
            if cpl and cpl["src"] == WrSource.STREAM:
                counts["ok" if cpl["status"] == CplStatus.OK else "err"] += 1
                if held:
                    used -= held.popleft()[0]
                    counts["given_back"] += 1
            if add is not None:
                held.append((add, cycle))
                used += add
            assert ctx.get(dut.used) == used
            assert ctx.get(dut.inflight) == len(held)
            assert ctx.get(dut.completed_ok) == counts["ok"]
            assert ctx.get(dut.completed_err) == counts["err"]

    run_sim(dut, testbenches=[tb])
    assert counts["given_back"] > 100 and counts["err"] > 20


def test_parameters_are_checked():
    raises(ValueError, "max_inflight", lambda: RingSpace(8, 0))
    raises(ValueError, "ring_words", lambda: RingSpace(0, 4))
    raises(TypeError, "ring_words", lambda: RingSpace(8.0, 4))
