"""Poster of the streaming front end: work requests in order, each offered only once its last
word is durable (and from then on), with random durability and stalls."""

import random

import pytest

from rocegen.gateware.roce.frontend.stream_post import StreamPoster
from rocegen.gateware.roce.layouts import WrOpcode, WrSource
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.verbs import SEND_VERBS

#: The send opcodes (READ is the scheduler's business, not this block's).
SEND_OPS = tuple(WrOpcode[name] for name in SEND_VERBS)


def random_wr(rng, n):
    return {"wr_id": n, "qp": rng.randrange(256), "opcode": rng.choice(SEND_OPS).value,
            "local_addr": rng.getrandbits(32), "length": rng.getrandbits(31),
            "remote_offset": rng.getrandbits(64), "imm": rng.getrandbits(32)}


@pytest.mark.parametrize("max_inflight", [1, 4, 16])
def test_posts_in_order_once_durable(max_inflight):
    rng = random.Random(max_inflight)
    dut = StreamPoster(max_inflight)
    posted = []

    async def tb(ctx):
        written = durable = 0                   # words, counted from the bench's start
        queued, n = [], 0
        for cycle in range(4000):
            # the memory: words written now and then, made durable in order with a delay
            written += rng.choice([0, 0, 1, 2, 5])
            step = rng.randrange(min(written - durable, 255) + 1) if rng.random() < 0.5 else 0
            ctx.set(dut.mem_durable, step)
            new = None
            if len(queued) < max_inflight and rng.random() < 0.2:
                new = {"wr": random_wr(rng, n), "end": written}
                n += 1
            ctx.set(dut.i.valid, new is not None)
            if new:
                ctx.set(dut.i.payload, new)
            ready = rng.random() < 0.7
            ctx.set(dut.wr.ready, ready)
            valid, payload = ctx.get(dut.wr.valid), ctx.get(dut.wr.payload)
            if valid:
                head_wr, head_end, taken_at = queued[0]
                assert durable >= head_end, "posted before its words were durable"
                assert cycle >= taken_at + 2
                assert meta_dict(payload) == {"wr": head_wr, "src": WrSource.STREAM.value}
            elif queued and queued[0][2] + 2 <= cycle:
                assert durable < queued[0][1], "durable work request not offered"
            await ctx.tick()
            if valid and ready:
                posted.append(queued.pop(0)[0]["wr_id"])
            durable += step
            if new:
                queued.append((new["wr"], written, cycle))
        ctx.set(dut.i.valid, 0)

    run_sim(dut, testbenches=[tb])
    assert posted == list(range(len(posted))) and len(posted) > 300


def test_parameters_are_checked():
    raises(ValueError, "max_inflight", lambda: StreamPoster(0))
    raises(TypeError, "max_inflight", lambda: StreamPoster("4"))
