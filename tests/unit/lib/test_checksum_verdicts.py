"""ChecksumVerdicts: every packet's verdict on ``done``, and the selected ones' on the
``verdict`` stream, in packet order under random idle, backpressure and a random consumer,
against the checksum model (``rocegen.sim.models.net.checksum``)."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, UnusedElaboratable
from amaranth.lib import data

from rocegen.gateware.lib.checksum_verdicts import ChecksumVerdicts
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.sim.models.net import checksum as model
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim

META = data.StructLayout({"seed": 16, "skip": 1, "select": 1})


def packets_for(width, rng, n=80):
    """Packets of 0..3 beats and one-beat runs, half of them with a seed that makes the sum
    right, some with ``skip``, some selected."""
    B = width // 8
    out = []
    for k in range(n):
        size = rng.randrange(1, B + 1) if k % 3 else rng.randrange(0, 3 * B + 1)
        raw = rng.randbytes(size)
        seed = rng.getrandbits(16)
        if rng.random() < 0.5:
            seed = ~model.data_sum(raw, 0) & 0xFFFF        # the sum comes to 0xFFFF
        out.append(Packet(raw, {"seed": seed, "skip": int(rng.random() < 0.2),
                                "select": int(rng.random() < 0.7)}))
    return out


def good(p):
    return p.meta["skip"] == 1 or model.data_sum(p.data, p.meta["seed"]) == 0xFFFF


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("pace", [(0.0, 0.0, 1.0), (0.3, 0.3, 0.4)],
                         ids=["back-to-back", "random"])
def test_verdicts_in_order(width, pace):
    idle, backpressure, take = pace
    rng = random.Random(width + int(10 * take))
    packets = packets_for(width, rng)
    m = Module()
    s = PacketSignature(width, META).create(path=("s",))
    m.submodules.cv = cv = ChecksumVerdicts(width, META, depth=len(packets))
    m.d.comb += [*cv.observe(s), cv.seed.eq(s.payload.meta.seed),
                 cv.skip.eq(s.payload.meta.skip), cv.select.eq(s.payload.meta.select)]
    drv = StreamDriver(s, width, idle=idle, seed=width)
    col = StreamCollector(s, width, backpressure=backpressure, seed=width + 1)
    done, taken, valids = [], [], []

    async def consumer(ctx):
        r = random.Random(3)
        while True:
            ready = r.random() < take
            ctx.set(cv.verdict.ready, ready)
            _, _, v, payload, nxt, d, g, sel = await ctx.tick().sample(
                cv.verdict.valid, cv.verdict.payload, cv.valid_next, cv.done, cv.good,
                cv.selected)
            valids.append((v, nxt))
            if v and ready:
                taken.append(payload)
            if d:
                done.append((g, sel))

    async def tb(ctx):
        await drv.send(ctx, packets)
        while len(col.packets) < len(packets):
            await ctx.tick()
        await ctx.tick().repeat(cv.latency + 4 * len(packets))

    run_sim(m, testbenches=[tb], processes=[col.run, consumer], deadline_cycles=40_000)
    assert done == [(int(good(p)), p.meta["select"]) for p in packets]
    wanted = [int(good(p)) for p in packets if p.meta["select"] and not p.meta["skip"]]
    assert 0 in wanted and 1 in wanted
    assert taken == wanted
    # ``valid_next`` is the next cycle's ``valid``
    assert all(nxt == v for (_, nxt), (v, _) in zip(valids, valids[1:]))


def test_parameters_are_checked():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="queue depth must be a positive integer"):
            ChecksumVerdicts(64, depth=0)
        with pytest.raises(ValueError, match="width must be one of"):
            ChecksumVerdicts(48, depth=4)
        gc.collect()
