"""The SEND echo (:class:`SendEcho`) against its reference model
(``rocegen.sim.models.services.echo``, written from librdmacm's rdma_server/rdma_client):
random events, mostly the one each QP's service waits for (so that services run long), some
not (completions in error, of other requests, of QPs outside the table, closes, RDMA WRITEs with
immediate), offered with random idle cycles, the outputs taken with backpressure. Every receive
buffer and echo the block posts is the model's, in order, and its counter strobes add up to the
model's counters. The docstring's latency, and the parameters' checks."""

import random
from collections import deque

import pytest

from rocegen.gateware.roce.responder.resp_layouts import RecvOpcode
from rocegen.gateware.roce.services.send_echo import COUNTERS, SendEcho
from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.echo import EchoKind, EchoMemory, EchoPhase, EchoServer
from rocegen.sim.models.services.rping import RecvPost, WorkRequest
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.verbs import CplStatus, WrOpcode
from tests.tiers import full


def events(rng, model, n, count):
    """``count`` events for the model's QPs (and a few outside the table), in a queue."""
    out = []
    hot = rng.sample(range(n), min(3, n))
    phases = {}             # (the phase each hot QP will be in: the model runs as they go)
    for _ in range(count):
        qp = rng.choice(hot) if rng.random() < 0.95 else rng.randrange(256)
        ph = phases.get(qp, EchoPhase.OFF)
        good = qp < n and rng.random() < 0.85
        if good and ph == EchoPhase.OFF:
            out.append(("open", qp))
            phases[qp] = EchoPhase.RECV
        elif good and ph == EchoPhase.RECV:
            out.append(("recv", qp, EchoKind.RECV, RecvStatus.OK, rng.randrange(0, 200), True))
            phases[qp] = EchoPhase.ECHO
        elif good:
            out.append(("cpl", qp, EchoKind.ECHO, CplStatus.OK))
            phases[qp] = EchoPhase.RECV
        else:
            what = rng.choice(["close", "recv", "cpl", "open"])
            wr_id = rng.choice([0, 1, 2, rng.randrange(1 << 32)])
            if what in ("open", "close"):
                out.append((what, qp))
            elif what == "recv":
                out.append(("recv", qp, wr_id, rng.choice(list(RecvStatus)),
                            rng.randrange(0, 1 << 12), rng.random() < 0.7))
            else:
                out.append(("cpl", qp, wr_id, rng.choice(list(CplStatus))))
            phases.pop(qp, None)    # (the model may have ended it: stay in step loosely)
            if what == "open" and qp < n:
                phases[qp] = EchoPhase.RECV
    return deque(out)


def model_step(model, e):
    if e[0] == "open":
        return model.opened(e[1])
    if e[0] == "close":
        return model.closed(e[1])
    if e[0] == "recv":
        _, qp, wr_id, status, length, is_send = e
        return model.recv_completion(qp, wr_id, status, length, is_send=is_send)
    _, qp, wr_id, status = e
    return model.completion(qp, wr_id, status)


def run(num_qps, width, seed, count=1500, *, idle=0.3, backpressure=0.3):
    rng = random.Random(seed)
    word = width // 8
    base, per_qp = 4 * word, max(word, 256)
    dut = SendEcho(num_qps, width=width, base=base, bytes_per_qp=per_qp)
    model = EchoServer(EchoMemory(num_qps, base, per_qp, width))
    queue = events(rng, model, num_qps, count)
    expect = {"recv": deque(), "wr": deque()}
    strobes = dict.fromkeys(COUNTERS, 0)
    state = {"taken": 0}

    def payload(e):
        if e[0] in ("open", "close"):
            return "opened", {"qp": e[1], "open": e[0] == "open"}
        if e[0] == "recv":
            _, qp, wr_id, status, length, is_send = e
            return "recv_cpl", {"qp": qp, "wr_id": wr_id, "status": status.value,
                                "length": length,
                                "opcode": (RecvOpcode.SEND if is_send else
                                           RecvOpcode.WRITE_IMM).value}
        _, qp, wr_id, status = e
        return "cpl", {"qp": qp, "wr_id": wr_id, "status": status.value}

    async def drive(ctx):
        while queue:
            if rng.random() < idle:
                await ctx.tick()
                continue
            e = queue[0]
            name, p = payload(e)
            port = getattr(dut, name)
            ctx.set(port.payload, p)
            ctx.set(port.valid, 1)
            while not (await ctx.tick().sample(port.ready))[2]:
                pass
            ctx.set(port.valid, 0)
            queue.popleft()
            state["taken"] += 1
            a = model_step(model, e)
            if a.recv is not None:
                expect["recv"].append(a.recv)
            if a.wr is not None:
                expect["wr"].append(a.wr)
        await ctx.tick().repeat(20)

    def collect(name, convert):
        async def run(ctx):
            port = getattr(dut, name)
            while True:
                ready = rng.random() >= backpressure
                ctx.set(port.ready, ready)
                _, _, valid, p = await ctx.tick().sample(port.valid, port.payload)
                if valid and ready:
                    assert expect[name], f"the block offers {meta_dict(p)}, the model nothing"
                    assert convert(meta_dict(p)) == expect[name].popleft()
        return run

    async def count_strobes(ctx):
        async for _, _, *values in ctx.tick().sample(*(getattr(dut, n) for n in COUNTERS)):
            for name, v in zip(COUNTERS, values, strict=True):
                strobes[name] += v

    run_sim(dut, testbenches=[drive], processes=[
        collect("recv", lambda p: RecvPost(p["qp"], p["wr_id"], p["addr"], p["length"])),
        collect("wr", lambda p: WorkRequest(p["qp"], p["wr_id"], WrOpcode(p["opcode"]),
                                            p["local_addr"], p["length"], p["remote_offset"])),
        count_strobes], deadline_cycles=40 * count)
    assert not any(expect.values()), expect
    assert strobes == model.counters
    return model.counters


@pytest.mark.parametrize("num_qps, width, seed", [(1, 64, 1), (5, 512, 2), (256, 128, 3),
                                                  full(64, 256, 4)])
def test_events_at_random_against_the_model(num_qps, width, seed):
    counts = run(num_qps, width, seed)
    assert all(counts.values()) and counts["echoes"] > 100, counts


def test_the_latency_the_docstring_states():
    """An OPEN taken in cycle t: its receive buffer offered in t + 2, the next event taken
    in t + 3 once the buffer is taken at once; a CLOSE (no output) lets the next event be
    taken at t + 2; the counter's strobe is in the cycle after the decision."""
    dut = SendEcho(4, width=64, base=0, bytes_per_qp=64)

    async def tb(ctx):
        ctx.set(dut.recv.ready, 1)
        ctx.set(dut.opened.payload, {"qp": 2, "open": 1})
        ctx.set(dut.opened.valid, 1)
        t = 0
        while not ctx.get(dut.opened.ready):
            await ctx.tick()
            t += 1
        await ctx.tick()                    # t: taken
        ctx.set(dut.opened.payload, {"qp": 2, "open": 0})
        assert not ctx.get(dut.opened.ready) and not ctx.get(dut.recv.valid)   # t + 1
        await ctx.tick()
        assert ctx.get(dut.recv.valid) and ctx.get(dut.recv.payload.addr) == 128   # t + 2
        assert not ctx.get(dut.opened.ready)
        await ctx.tick()
        assert ctx.get(dut.opened.ready) and not ctx.get(dut.recv.valid)   # t + 3: the close
        await ctx.tick()
        ctx.set(dut.opened.valid, 0)
        assert not ctx.get(dut.ended)                                   # its decision ...
        await ctx.tick()
        assert ctx.get(dut.ended)                                       # ... counted after

    run_sim(dut, testbenches=[tb], deadline_cycles=100)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"num_qps": 0}, ValueError, "num_qps must be 1..256"),
    ({"width": 96}, ValueError, "width must be one of"),
    ({"base": 4}, ValueError, "base must be a multiple of 8 bytes"),
    ({"base": "0"}, TypeError, "base must be an integer"),
    ({"bytes_per_qp": 96}, ValueError, "bytes_per_qp must be a power of two from 8 to 2"),
    ({"bytes_per_qp": 4}, ValueError, "bytes_per_qp must be a power of two from 8 to 2"),
    ({"base": (1 << 32) - 64}, ValueError, "slices end within 2"),
])
def test_the_parameters_are_checked(kwargs, exc, match):
    args = {"num_qps": 4, "width": 64, "base": 0, "bytes_per_qp": 64, **kwargs}
    raises(exc, match, lambda: SendEcho(args.pop("num_qps"), **args))
