import pytest

from rocegen.gateware.lib.gate import PacketGate
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamDriver
from rocegen.sim.testing.harness import SimulationHang, run_sim


def test_a_stuck_design_fails_instead_of_hanging():
    dut = PacketGate(64)              # no verdict ever arrives, so the input is never taken
    drv = StreamDriver(dut.i, 64)

    async def tb(ctx):
        await drv.send(ctx, [Packet(b"stuck")])

    with pytest.raises(SimulationHang):
        run_sim(dut, testbenches=[tb], deadline_cycles=200)


def test_driver_gaps_between_packets_only():
    dut = PacketGate(64)
    drv = StreamDriver(dut.i, 64, idle=0.9, gaps="between", seed=3)
    valid = []

    async def verdicts(ctx):
        ctx.set(dut.verdict.payload, 1)
        ctx.set(dut.verdict.valid, 1)
        ctx.set(dut.o.ready, 1)

    async def watch(ctx):
        async for _, _, v, last in ctx.tick().sample(dut.o.valid, dut.o.payload.last):
            valid.append((v, last))

    async def tb(ctx):
        await verdicts(ctx)
        await drv.send(ctx, [Packet(bytes(40)) for _ in range(5)])

    run_sim(dut, testbenches=[tb], processes=[watch])
    # inside a packet (after a non-last beat) valid never drops
    for (v0, l0), (v1, _) in zip(valid, valid[1:]):
        if v0 and not l0:
            assert v1
    with pytest.raises(ValueError, match="gaps"):
        StreamDriver(dut.i, 64, gaps="sometimes")


def test_shared_designs_are_made_once_per_set_of_arguments():
    from amaranth.lib.fifo import SyncFIFOBuffered

    from rocegen.sim.testing.harness import shared
    a = shared(SyncFIFOBuffered, width=8, depth=4)
    assert shared(SyncFIFOBuffered, width=8, depth=4) is a
    assert shared(SyncFIFOBuffered, width=8, depth=8) is not a
    with pytest.raises(TypeError, match="compare by value"):
        shared(SyncFIFOBuffered, width=8, depth=[4, bytearray(2)])
    for fifo in (a, shared(SyncFIFOBuffered, width=8, depth=8)):
        run_sim(fifo)                               # (each is used)


def test_a_shared_design_runs_again_from_its_initial_state():
    """The second run of a shared design starts at time 0 with every signal and memory at its
    initial value, and the first run's processes are gone: also after a run that failed."""
    from amaranth.lib.fifo import SyncFIFOBuffered

    from rocegen.sim.testing.harness import shared
    fifo = shared(SyncFIFOBuffered, width=8, depth=5)
    ticks = [0]

    async def counter(ctx):
        async for _ in ctx.tick():
            ticks[0] += 1

    async def fill(ctx):
        ctx.set(fifo.w_en, 1)
        for v in (7, 8, 9):
            ctx.set(fifo.w_data, v)
            await ctx.tick()
        ctx.set(fifo.w_en, 0)
        await ctx.tick().repeat(3)
        assert ctx.get(fifo.level) == 3

    run_sim(fifo, testbenches=[fill], processes=[counter])
    first = ticks[0]
    assert first >= 6

    async def stuck(ctx):
        ctx.set(fifo.w_data, 1)
        ctx.set(fifo.w_en, 1)
        await ctx.tick().until(fifo.level == 9)     # never: the FIFO holds 5

    with pytest.raises(SimulationHang):
        run_sim(fifo, testbenches=[stuck], deadline_cycles=50)

    seen = []

    async def check(ctx):
        seen.append((ctx.get(fifo.level), ctx.get(fifo.r_rdy), ctx.get(fifo.w_en)))
        await ctx.tick().repeat(20)
        seen.append(ctx.get(fifo.level))
        ctx.set(fifo.w_data, 42)
        ctx.set(fifo.w_en, 1)
        await ctx.tick()
        ctx.set(fifo.w_en, 0)
        ctx.set(fifo.r_en, 1)
        await ctx.tick().until(fifo.r_rdy)
        seen.append(ctx.get(fifo.r_data))

    run_sim(fifo, testbenches=[check])
    assert seen == [(0, 0, 0), 0, 42]
    assert ticks[0] == first                      # the first run's process ran no more
