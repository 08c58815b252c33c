"""The endpoint's statistics block (:class:`EndpointStats`) against a counting model: random
pulses, moving counters and wide values, reads of the whole address space (the network stack's part answered
by a model memory behind ``net_addr``) at random times."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.net.stack import STATS as NET_STATS
from rocegen.gateware.roce.endpoint.endpoint_stats import (
    MOVED_COUNTERS,
    PULSE_COUNTERS,
    ROCE_STATS,
    STATS,
    WIDE_BITS,
    WIDE_COUNTERS,
    EndpointStats,
)
from rocegen.sim.testing.harness import run_sim


def test_address_space_layout():
    assert STATS[:len(NET_STATS)] == NET_STATS
    assert STATS[len(NET_STATS):] == ROCE_STATS
    assert set(PULSE_COUNTERS) | set(MOVED_COUNTERS) | set(WIDE_COUNTERS) == set(ROCE_STATS)
    assert not set(PULSE_COUNTERS) & set(MOVED_COUNTERS)
    assert not (set(PULSE_COUNTERS) | set(MOVED_COUNTERS)) & set(WIDE_COUNTERS)
    assert len(set(STATS)) == len(STATS)
    dut = EndpointStats()
    assert len(dut.addr) == (len(STATS) - 1).bit_length()
    assert len(dut.net_addr) == (len(NET_STATS) - 1).bit_length()
    assert len(dut.data) == len(dut.net_data) == 32
    Fragment.get(dut, None)     # elaborates


@pytest.mark.parametrize("seed", [1, pytest.param(2, marks=pytest.mark.full)])
def test_counts_and_reads_against_model(seed):
    rng = random.Random(seed)
    dut = EndpointStats()
    n_net = len(NET_STATS)
    net_values = [rng.randrange(1 << 32) for _ in NET_STATS]
    counts = dict.fromkeys(ROCE_STATS, 0)
    # near the wrap; the first cycle counts one move (from reset's 0)
    moved = {name: (1 << 32) - rng.randrange(1, 200) for name in MOVED_COUNTERS}
    counts.update(dict.fromkeys(MOVED_COUNTERS, 1))
    checked = {"net": 0, "roce": 0, "nonzero": 0, "wide": 0, "saturated": 0}

    async def net_port(ctx):
        # the stack's read port: data one cycle after the address
        async for _clk_edge, _rst, addr in ctx.tick().sample(dut.net_addr):
            ctx.set(dut.net_data, net_values[addr] if addr < n_net else 0)

    async def tb(ctx):
        for name, value in moved.items():
            ctx.set(dut.moved[name], value)
        await ctx.tick().repeat(2)
        history = [dict(counts)] * 2        # counts as of each cycle's end, from cycle -2
        for cycle in range(1200):
            pulses = {name: rng.random() < 0.3 for name in PULSE_COUNTERS}
            for name, bit in pulses.items():
                ctx.set(dut.events[name], bit)
            for name in MOVED_COUNTERS:
                if rng.random() < 0.3:
                    moved[name] = (moved[name] + 1) % (1 << 32)
                    counts[name] += 1
                ctx.set(dut.moved[name], moved[name])
            for name, bit in pulses.items():
                counts[name] += bit
            wide = {name: rng.choice([rng.randrange(1 << 32), rng.randrange(1 << WIDE_BITS),
                                      (1 << 32) - 1, 1 << 32]) for name in WIDE_COUNTERS}
            for name, value in wide.items():
                ctx.set(dut.wide[name], value)
            history.append(dict(counts))
            # any address, and one read in ten of a wide counter (two addresses of the space)
            addr = rng.randrange(len(STATS)) if rng.random() < 0.9 else \
                STATS.index(rng.choice(WIDE_COUNTERS))
            ctx.set(dut.addr, addr)
            await ctx.tick()
            got = ctx.get(dut.data)
            if addr < n_net:
                assert got == net_values[addr], STATS[addr]
                checked["net"] += 1
            elif STATS[addr] in WIDE_COUNTERS:
                # a wide value as it is in the cycle of the address, saturated to 32 bits
                value = wide[STATS[addr]]
                assert got == min(value, (1 << 32) - 1), (cycle, STATS[addr], value)
                checked["wide"] += 1
                checked["saturated"] += value >= 1 << 32
            else:
                name = STATS[addr]
                # an event (a pulse, a counter's move) of cycle t is read in t + 2
                expect = history[cycle][name]
                assert got == expect, (cycle, name)
                checked["roce"] += 1
                checked["nonzero"] += expect > 0
        assert min(checked["net"], checked["roce"], checked["nonzero"]) > 100
        assert checked["wide"] > 10 and checked["saturated"] > 3

    run_sim(dut, testbenches=[tb], processes=[net_port])
