import random

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import data, wiring

from rocegen.gateware.lib.arbiter import PacketArbiter
from rocegen.gateware.lib.stream import PacketSignature
from rocegen.sim.models.lib.arbiter import check_bounded_wait, check_merge, round_robin
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver, meta_dict
from rocegen.sim.testing.harness import raises, run_sim

META = data.StructLayout({"src": 4, "seq": 16})


def make_queues(width, n, rng, extra=10):
    """Per-input packet lists: every length from 0 to 2*B+1 (so every length modulo the beat
    width, empty packets and one-beat packets) spread over the inputs, plus random ones;
    about a fifth of them errored."""
    B = width // 8
    lengths = list(range(0, 2 * B + 2)) + [rng.randrange(0, 5 * B) for _ in range(extra * n)]
    rng.shuffle(lengths)
    queues = [[] for _ in range(n)]
    for length in lengths:
        k = rng.randrange(n)
        queues[k].append(Packet(rng.randbytes(length), {"src": k, "seq": len(queues[k])},
                                error=rng.random() < 0.2))
    return queues


def run_arbiter(width, n, queues, *, idle, backpressure, seed):
    dut = PacketArbiter(width, META, n)
    drivers = [StreamDriver(dut.i[k], width, idle=idle, seed=seed * 10 + k) for k in range(n)]
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed)
    total = sum(len(q) for q in queues)
    waits, starts, unstable = {}, [], []

    async def monitor(ctx):
        cycle = 0
        in_pkt = [False] * n
        out_in_pkt = False
        offer = None                   # (valid & ~ready) beat of the previous cycle
        sigs = [(s.valid, s.ready, s.payload) for s in dut.i]
        flat = [x for t in sigs for x in t]
        async for _, _, *vals in ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload, *flat):
            cycle += 1
            ov, orr, op = vals[:3]
            for k in range(n):
                v, r, p = vals[3 + 3 * k: 6 + 3 * k]
                if v:
                    key = (k, meta_dict(p.meta)["seq"])
                    if not in_pkt[k] and key not in waits:
                        waits[key] = cycle
                    if r:
                        in_pkt[k] = not p.last
            beat = (int(op.data), int(op.keep), int(op.last), int(op.error), meta_dict(op.meta))
            if offer is not None and (not ov or beat != offer):
                unstable.append((cycle, offer, beat if ov else None))
            offer = beat if ov and not orr else None
            if ov and orr:
                if not out_in_pkt:
                    meta = meta_dict(op.meta)
                    starts.append((cycle, meta["src"], meta["seq"]))
                out_in_pkt = not op.last

    def sender(k):
        async def tb(ctx):
            await drivers[k].send(ctx, queues[k])
        return tb

    beats = sum(max(1, -(-len(p.data) // (width // 8))) for q in queues for p in q)
    deadline = 20 * beats + 200       # far beyond what idle and backpressure can cost

    async def wait_all(ctx):
        for _ in range(deadline):
            if len(col.packets) >= total:
                break
            await ctx.tick()
        else:
            raise AssertionError(f"only {len(col.packets)} of {total} packets after {deadline} cycles")
        for _ in range(3):
            await ctx.tick()

    run_sim(dut, testbenches=[sender(k) for k in range(n)] + [wait_all],
            processes=[col.run, monitor])
    return col, waits, starts, unstable


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_random_traffic_keeps_packets_whole_and_fair(width, n):
    rng = random.Random(width + n)
    queues = make_queues(width, n, rng, extra=30)
    col, waits, starts, unstable = run_arbiter(width, n, queues, idle=0.4, backpressure=0.3,
                                               seed=n)
    # every packet intact (data, error, meta constant over its beats), each input's order kept
    check_merge(queues, col.packets, lambda p: p.meta["src"])
    # round robin under any traffic: an offered packet waits for at most n - 1 others
    check_bounded_wait(n, waits, starts)
    # an offer is never withdrawn or changed before it is taken
    assert unstable == []


@pytest.mark.parametrize("width", [64, 512])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_preloaded_inputs_take_turns(width, n):
    """With every input holding packets from the start (no idle) the order is exactly one
    packet per input in turn, whatever the output backpressure; inputs that run dry are
    skipped."""
    rng = random.Random(7 * width + n)
    queues = make_queues(width, n, rng, extra=6)
    queues[0] = queues[0][:3]          # one input runs dry early
    col, _, _, _ = run_arbiter(width, n, queues, idle=0.0, backpressure=0.4, seed=n + 1)
    got = [(p.meta["src"], p) for p in col.packets]
    assert got == round_robin(queues)


@pytest.mark.parametrize("width", [64, 512])
def test_no_idle_cycle_between_packets(width):
    """All inputs loaded and the output always ready: a beat moves on every cycle until the
    end, including across switches between inputs and runs of single-beat packets."""
    rng = random.Random(width)
    n = 3
    B = width // 8
    queues = [[Packet(rng.randbytes(rng.choice([0, 1, B, B + 1, 3 * B - 1])),
                      {"src": k, "seq": s}) for s in range(12)] for k in range(n)]
    col, _, _, _ = run_arbiter(width, n, queues, idle=0.0, backpressure=0.0, seed=3)
    assert [(p.meta["src"], p) for p in col.packets] == round_robin(queues)
    cycles = col.beat_cycles
    total = sum(max(1, -(-len(p.data) // B)) for q in queues for p in q)
    assert len(cycles) == total
    assert cycles == list(range(cycles[0], cycles[0] + total))


def test_single_input_is_a_pass_through():
    width = 64
    rng = random.Random(1)
    queues = [[Packet(rng.randbytes(length), {"src": 0, "seq": s}, error=s % 3 == 0)
               for s, length in enumerate(range(0, 20))]]
    col, _, _, _ = run_arbiter(width, 1, queues, idle=0.3, backpressure=0.3, seed=5)
    assert col.packets == queues[0]


def test_inputs_compose_with_connect():
    class Source(wiring.Component):
        def __init__(self):
            super().__init__({"o": wiring.Out(PacketSignature(64, META))})

        def elaborate(self, platform):
            return Module()

    m = Module()
    m.submodules.arb = arb = PacketArbiter(64, META, 2)
    m.submodules.src = src = Source()
    wiring.connect(m, src.o, arb.i[1])
    assert len(arb.i) == 2
    Fragment.get(m, None)


def test_parameters_are_checked():
    raises(ValueError, "at least 1, not 0", lambda: PacketArbiter(64, META, 0))
    raises(TypeError, "integer number of ports", lambda: PacketArbiter(64, META, 2.0))
    raises(ValueError, "width must be one of", lambda: PacketArbiter(96, META, 2))


def test_model_checks_reject_bad_orders():
    a = [Packet(b"a0", {"src": 0, "seq": 0}), Packet(b"a1", {"src": 0, "seq": 1})]
    b = [Packet(b"b0", {"src": 1, "seq": 0})]
    src = lambda p: p.meta["src"]  # noqa: E731
    check_merge([a, b], [a[0], b[0], a[1]], src)
    with pytest.raises(AssertionError, match="expected packet 0 of input 0"):
        check_merge([a, b], [a[1], a[0], b[0]], src)
    with pytest.raises(AssertionError, match="missing"):
        check_merge([a, b], [a[0], b[0]], src)
    with pytest.raises(AssertionError, match="sent only"):
        check_merge([a, b], [a[0], b[0], a[1], b[0]], src)
    # input 1 offered from cycle 1 on: it may wait for input 0's packet in progress, but not
    # for the next one too (n = 2)
    waits = {(0, 0): 1, (0, 1): 2, (1, 0): 1}
    check_bounded_wait(2, waits, [(1, 0, 0), (3, 1, 0), (4, 0, 1)])
    with pytest.raises(AssertionError, match="waited for 2 packets"):
        check_bounded_wait(2, waits, [(1, 0, 0), (3, 0, 1), (4, 1, 0)])
    assert [k for k, _ in round_robin([[1, 2, 3], [], [4]], start=0)] == [0, 2, 0, 0]
