"""The responder's count of requests whose payload the memory has acknowledged
(:class:`RespDurable`): driven as the placement stage drives it (requests of 0..n words, the next
one starting as soon as the previous one's last word is taken, never while ``hold`` is high),
with a memory that acknowledges the words in order, in random batches after random latencies.
The count never gets ahead of what is acknowledged, catches up, and has the stated latency."""

import gc
import random

import pytest

from rocegen.gateware.roce.responder.resp_durable import RespDurable
from rocegen.sim.testing.harness import raises, run_sim


def run_durable(depth, requests, *, idle, ack_latency, batch, seed):
    """Drive ``requests`` (word counts) through a RespDurable of ``depth``; returns the
    per-cycle samples (count, truth) and whether ``hold`` was ever seen high."""
    rng = random.Random(seed)
    dut = RespDurable(depth)
    ends = []                   # words taken at each request's end
    done_at = []                # cycle of each request's done pulse
    trace = {"count": [], "hold": 0, "durable": [], "end": False}

    async def driver(ctx):
        pending = []            # cycles of the coming done pulses, increasing
        written = []            # cycle each word was taken
        cur = None              # words left of the request being placed
        taken = 0
        todo = list(requests)
        acked = 0
        cycle = 0
        while todo or cur is not None or pending or acked < taken:
            hold = ctx.get(dut.hold)
            trace["hold"] |= hold
            done = bool(pending) and pending[0] == cycle
            if done:
                pending.pop(0)
                done_at.append(cycle)
            w = 0
            if cur and rng.random() >= idle:
                w, cur, taken = 1, cur - 1, taken + 1
                written.append(cycle)
                if cur == 0:
                    cur = None
                    pending.append(max(cycle + 1, pending[-1] + 1 if pending else 0))
                    ends.append(taken)
            start = 0
            if cur is None and todo and not hold and rng.random() >= idle:
                start, cur = 1, todo.pop(0)
                if cur == 0:    # nothing to write: its done two cycles later
                    cur = None
                    pending.append(max(cycle + 2, pending[-1] + 1 if pending else 0))
                    ends.append(taken)
            # the memory acknowledges words taken ack_latency cycles ago, in batches
            ready = sum(1 for c in written[acked:] if c + ack_latency <= cycle)
            d = min(ready, rng.randint(1, batch)) if ready and rng.random() < 0.5 else 0
            acked += d
            trace["durable"].append(d)
            ctx.set(dut.start, start)
            ctx.set(dut.written, w)
            ctx.set(dut.done, done)
            ctx.set(dut.durable, d)
            await ctx.tick()
            cycle += 1
        for _ in range(2 * depth + 10):
            ctx.set(dut.start, 0)
            ctx.set(dut.written, 0)
            ctx.set(dut.done, 0)
            ctx.set(dut.durable, 0)
            trace["durable"].append(0)
            await ctx.tick()
        trace["end"] = True

    async def watch(ctx):
        async for _, _, count in ctx.tick().sample(dut.count):
            trace["count"].append(count)

    run_sim(dut, testbenches=[driver], processes=[watch], deadline_cycles=500_000)
    # the truth in cycle t: requests done before t whose words were acknowledged before t
    acked_before = [0]
    for d in trace["durable"]:
        acked_before.append(acked_before[-1] + d)
    truth, n = [], 0
    for t in range(len(trace["count"])):
        acked = acked_before[min(t, len(acked_before) - 1)]
        while n < len(ends) and done_at[n] < t and ends[n] <= acked:
            n += 1
        truth.append(n)
    return trace, truth


@pytest.mark.parametrize("depth, idle, ack_latency, batch", [
    (4, 0.3, 40, 6),        # the queue fills: hold
    (32, 0.2, 12, 30),
    (8, 0.0, 3, 2),
])
def test_count_follows_acknowledgements(depth, idle, ack_latency, batch):
    rng = random.Random(depth)
    requests = [rng.choice([0, 0, 1, 1, 2, 3, rng.randrange(4, 40)]) for _ in range(400)]
    trace, truth = run_durable(depth, requests, idle=idle, ack_latency=ack_latency, batch=batch,
                               seed=depth + 1)
    counts = trace["count"]
    for t, (c, n) in enumerate(zip(counts, truth)):
        assert c <= n, f"cycle {t}: {c} requests counted, only {n} acknowledged"
    assert counts[-1] == len(requests)
    if depth == 4:
        assert trace["hold"]


def test_latency():
    # each word acknowledged alone 10 cycles after it is taken: a request that wrote words is
    # counted two cycles after the acknowledgement of its last word; one that wrote none, in
    # its predecessor's group, one cycle later than that while another group is queued
    requests = [1, 0, 1, 1, 0, 0, 2]
    trace, truth = run_durable(32, requests, idle=0.0, ack_latency=10, batch=1, seed=0)
    counts = trace["count"]

    def reaching(values, n):
        return next(t for t, v in enumerate(values) if v >= n)

    # truth(t) counts the inputs of the cycles before t: with the latency stated, the count
    # follows it one cycle later
    lags = [reaching(counts, n) - reaching(truth, n) for n in range(1, len(requests) + 1)]
    assert lags == [1 if words else 2 for words in requests]
    assert all(c <= n for c, n in zip(counts, truth))


def test_parameters():
    raises(ValueError, "depth must be from 4 to 1024 requests, not 3", lambda: RespDurable(3))
    raises(TypeError, "depth must be an integer", lambda: RespDurable(8.0))
    gc.collect()
