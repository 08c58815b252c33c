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
