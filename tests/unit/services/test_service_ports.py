"""The ports shared by the user and a gateware service (:class:`ServicePorts`): every request of
either side reaches the merged port once, each side's in its order; every completion reaches
the side ``served`` names for its QP in the cycle it is taken, in order. Random idle cycles,
backpressure and ``served`` changing as they go."""

import random

import pytest

from rocegen.gateware.roce.services.service_ports import PORTS, ServicePorts
from rocegen.sim.testing.amaranth_streams import send_records
from rocegen.sim.testing.harness import raises, run_sim


def records(rng, side, count, num_qps):
    """``count`` requests or completions of QPs 0..num_qps (one outside the table, when the
    8-bit field has room), each telling who sent it in ``wr_id``."""
    return [{"qp": rng.randrange(min(num_qps + 1, 256)), "wr_id": side << 16 | k}
            for k in range(count)]


@pytest.mark.parametrize("num_qps, seed", [(1, 1), (5, 2), (256, 3)])
def test_requests_merged_and_completions_routed_by_served(num_qps, seed):
    rng = random.Random(seed)
    dut = ServicePorts(num_qps)
    count = 60
    got = {}            # port -> records taken (with ``served`` of the cycle)
    served = [0]

    def watch(port, bp):
        got[port] = []

        async def run(ctx):
            p = getattr(dut, port)
            async for _, _, valid, ready, payload, srv in ctx.tick().sample(
                    p.valid, p.ready, p.payload, dut.served):
                if valid and ready:
                    got[port].append((payload.qp, payload.wr_id, srv))
                ctx.set(getattr(dut, port).ready, rng.random() >= bp)
        return run

    async def serve(ctx):
        while True:
            if rng.random() < 0.1:
                served[0] = rng.getrandbits(num_qps)
                ctx.set(dut.served, served[0])
            await ctx.tick()

    sent = {}
    testbenches = []

    def sender(port):
        async def send(ctx):
            await send_records(ctx, getattr(dut, port), sent[port], rng, idle=0.3)
        return send
    for name, _, _ in PORTS:
        cpl = "cpl" if name == "wr" else "recv_cpl"
        for side, port in enumerate((f"user_{name}", f"svc_{name}", cpl)):
            sent[port] = records(rng, side, count, num_qps)
            testbenches.append(sender(port))

    async def tb(ctx):
        await ctx.tick().repeat(20 * count)

    processes = [serve] + [watch(p, 0.4) for n, _, _ in PORTS
                           for p in (n, *(f"{s}_{'cpl' if n == 'wr' else 'recv_cpl'}"
                                          for s in ("user", "svc")))]
    run_sim(dut, testbenches=[tb, *testbenches], processes=processes,
            deadline_cycles=40 * count)

    for name, _, _ in PORTS:
        cpl = "cpl" if name == "wr" else "recv_cpl"
        merged = [(qp, wr_id) for qp, wr_id, _ in got[name]]
        for side in (0, 1):
            mine = [r for r in merged if r[1] >> 16 == side]
            assert mine == [(r["qp"], r["wr_id"]) for r in sent[("user_", "svc_")[side] + name]]
        assert len(merged) == 2 * count
        routed = []
        for side, who in ((0, "user_"), (1, "svc_")):
            for qp, wr_id, srv in got[who + cpl]:
                assert (qp < num_qps and srv >> qp & 1) == bool(side), (who, qp, srv)
                routed.append((qp, wr_id))
        assert sorted(routed) == sorted((r["qp"], r["wr_id"]) for r in sent[cpl])
        for who in ("user_", "svc_"):
            ids = [wr_id for _, wr_id, _ in got[who + cpl]]
            assert ids == sorted(ids)
        assert got["user_" + cpl] and got["svc_" + cpl]


def test_parameters_are_checked():
    raises(ValueError, "1..256", lambda: ServicePorts(0))
    raises(TypeError, "", lambda: ServicePorts(2.0))
