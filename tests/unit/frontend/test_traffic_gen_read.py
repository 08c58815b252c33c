"""Traffic generator READ runs (``reads=True``): each message READs at its remote offset into
the same local address; other opcodes keep the generator's pattern slots, and without
``reads`` a READ run's requests look like any other run's (the scheduler refuses them)."""

import random

import pytest

from rocegen.gateware.roce.frontend.traffic_gen import TrafficGen
from rocegen.gateware.roce.layouts import WrOpcode, WrSource
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.pattern import generator_address


def _run(dut, cfg, seed):
    rng = random.Random(seed)
    got = []

    async def bench(ctx):
        ctx.set(dut.start.payload, cfg)
        ctx.set(dut.start.valid, 1)
        await ctx.tick().until(dut.start.ready)
        ctx.set(dut.start.valid, 0)
        pending = []
        while len(got) < cfg["count"] or pending:
            ready = rng.random() < 0.7
            ctx.set(dut.wr.ready, ready)
            if pending and rng.random() < 0.5:
                ctx.set(dut.cpl.payload, {"wr_id": pending.pop(0), "qp": 0, "status": 0,
                                          "src": WrSource.GENERATOR.value})
                ctx.set(dut.cpl.valid, 1)
            else:
                ctx.set(dut.cpl.valid, 0)
            _, _, valid, pay = await ctx.tick().sample(dut.wr.valid, dut.wr.payload)
            if valid and ready:
                got.append(pay.wr)
                pending.append(pay.wr.wr_id)
        ctx.set(dut.cpl.valid, 0)

    run_sim(dut, testbenches=[bench])
    return got


@pytest.mark.parametrize("opcode,reads", [(WrOpcode.READ, True), (WrOpcode.WRITE, True),
                                          (WrOpcode.READ, False)])
@pytest.mark.parametrize("length,window", [(4096, 1 << 16), (1000, 3000), (64, 0)])
def test_read_runs(opcode, reads, length, window):
    count = 40
    cfg = {"qp": 3, "opcode": opcode.value, "length": length, "count": count, "spacing": 0,
           "imm": 0, "window": window}
    got = _run(TrafficGen(reads=reads), cfg, seed=length + window)
    assert len(got) == count
    for s, w in enumerate(got):
        offset = (s * length) % window if window else 0
        assert w.opcode == opcode and w.length == length and w.remote_offset == offset
        if opcode == WrOpcode.READ and reads:
            assert w.local_addr == offset
        else:
            assert w.local_addr == generator_address(s)


@pytest.mark.parametrize("opcode", [WrOpcode.FETCH_ADD, WrOpcode.COMPARE_SWAP])
@pytest.mark.parametrize("atomics", [True, False])
def test_atomic_runs(opcode, atomics):
    """An atomic run (``atomics=True``) steps through the 8-byte targets of its window; message
    s's original value lands in local slot s mod 64 (64 bytes each); built without atomics its
    requests are as any other run's (the scheduler refuses them)."""
    count = 150
    cfg = {"qp": 1, "opcode": opcode.value, "length": 8, "count": count, "spacing": 0,
           "imm": 5, "window": 64}
    got = _run(TrafficGen(reads=True, atomics=atomics), cfg, seed=opcode.value)
    assert [w.wr_id for w in got] == list(range(count))
    for s, w in enumerate(got):
        assert w.opcode == opcode and w.imm == 5 and w.remote_offset == (s * 8) % 64
        assert w.local_addr == ((s % 64) * 64 if atomics else generator_address(s))


def test_parameters():
    raises(TypeError, "reads", lambda: TrafficGen(reads=1))
    raises(TypeError, "atomics", lambda: TrafficGen(reads=True, atomics=1))
    raises(ValueError, "atomics needs reads", lambda: TrafficGen(atomics=True))
