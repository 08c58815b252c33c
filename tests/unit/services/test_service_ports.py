"""The ports shared by the user and a gateware service (:class:`ServicePorts`), with random idle
cycles, backpressure and ``served`` changing as they go:

* work requests: every request of either side reaches the merged port once, each side's in
  its order; every completion reaches the side ``served`` names for its QP in the cycle it is
  taken, in order;
* receive buffers: a cycle-by-cycle model of the docstring (the user's buffers counted per QP)
  says where each receive completion goes, which of the user's posts are refused (completed
  FLUSHED at once) and which pass, in order, to the merged port."""

import random

import pytest

from rocegen.gateware.roce.responder.resp_layouts import RecvStatus
from rocegen.gateware.roce.services.service_ports import ServicePorts
from rocegen.sim.testing.amaranth_streams import send_records
from rocegen.sim.testing.harness import raises, run_sim

#: the streams watched each cycle (valid, ready, payload)
WATCHED = ("wr", "user_cpl", "svc_cpl", "user_recv", "recv", "recv_cpl", "user_recv_cpl",
           "svc_recv_cpl")
#: the streams the testbench sends, by side (0 user, 1 service, 2 the completions)
SOURCES = ("user_wr", "svc_wr", "cpl", "user_recv", "svc_recv", "recv_cpl")
#: the outputs the testbench takes, with backpressure
SINKS = ("wr", "user_cpl", "svc_cpl", "recv", "user_recv_cpl", "svc_recv_cpl")


def records(rng, side, count, num_qps):
    """``count`` requests or completions of QPs 0..num_qps (one outside the table, when the
    8-bit field has room), each telling who sent it in ``wr_id``."""
    return [{"qp": rng.randrange(min(num_qps + 1, 256)), "wr_id": side << 16 | k,
             "status": RecvStatus.OK.value if side == 2 else 0} for k in range(count)]


def run(num_qps, seed, count=80):
    """Random traffic on every port; returns what was sent and every cycle's handshakes."""
    rng = random.Random(seed)
    dut = ServicePorts(num_qps, 4)
    sent = {p: records(rng, 2 if p in ("cpl", "recv_cpl") else p.startswith("svc"),
                       count, num_qps) for p in SOURCES}
    for r in sent["cpl"]:
        del r["status"]
    for p in ("user_wr", "svc_wr", "user_recv", "svc_recv"):
        for r in sent[p]:
            del r["status"]
    cycles = []

    def sender(port):
        async def send(ctx):
            await send_records(ctx, getattr(dut, port), sent[port], rng, idle=0.3)
        return send

    async def drive(ctx):
        while True:
            if rng.random() < 0.05:
                ctx.set(dut.served, rng.getrandbits(num_qps))
            for p in SINKS:
                ctx.set(getattr(dut, p).ready, rng.random() >= 0.4)
            await ctx.tick()

    async def watch(ctx):
        ports = [getattr(dut, p) for p in WATCHED]
        sigs = [s for port in ports for s in (port.valid, port.ready, port.payload)]
        async for _, _, *values in ctx.tick().sample(dut.served, *sigs):
            served, rest = values[0], values[1:]
            cycle = {"served": served}
            for k, name in enumerate(WATCHED):
                valid, ready, payload = rest[3 * k:3 * k + 3]
                if valid and ready:
                    cycle[name] = {"qp": payload.qp, "wr_id": payload.wr_id,
                                   **({"status": payload.status.value}
                                      if name.endswith("recv_cpl") else {})}
            cycles.append(cycle)

    async def tb(ctx):
        await ctx.tick().repeat(30 * count)

    run_sim(dut, testbenches=[tb, *(sender(p) for p in SOURCES)], processes=[drive, watch],
            deadline_cycles=60 * count)
    return sent, cycles


def check_work_requests(sent, cycles, num_qps):
    merged = [(c["wr"]["qp"], c["wr"]["wr_id"]) for c in cycles if "wr" in c]
    for side, port in ((0, "user_wr"), (1, "svc_wr")):
        assert [r for r in merged if r[1] >> 16 == side] == \
            [(r["qp"], r["wr_id"]) for r in sent[port]]
    taken = []
    for c in cycles:
        for side, port in ((0, "user_cpl"), (1, "svc_cpl")):
            if port in c:
                qp = c[port]["qp"]
                assert (qp < num_qps and c["served"] >> qp & 1) == bool(side), (port, c)
                taken.append((qp, c[port]["wr_id"]))
    assert sorted(taken) == sorted((r["qp"], r["wr_id"]) for r in sent["cpl"])
    for port in ("user_cpl", "svc_cpl"):
        ids = [c[port]["wr_id"] for c in cycles if port in c]
        assert ids == sorted(ids) and ids


def check_receive(sent, cycles, num_qps):
    """The model: ``held[k]`` the user's buffers on QP k; per cycle, a user post on a served
    QP is refused (FLUSHED on ``user_recv_cpl``), others pass to ``recv``; a completion goes to
    the user when its QP is outside the table, not served, or has the user's buffers."""
    held = [0] * num_qps
    seen = {"refused": 0, "passed": 0, "to_user_held": 0, "to_svc": 0}
    posted, completions = [], []
    for c in cycles:
        served = c["served"]
        post = c.get("user_recv")
        refused = post is not None and post["qp"] < num_qps and served >> post["qp"] & 1
        if refused:
            assert c.get("user_recv_cpl") == {**post, "status": RecvStatus.FLUSHED.value}, c
            assert "recv" not in c or c["recv"]["wr_id"] >> 16 == 1, c
            seen["refused"] += 1
        elif post is not None:
            assert c.get("recv") == post, c
            seen["passed"] += 1
        if "recv" in c:
            posted.append(c["recv"]["wr_id"])
        done = c.get("recv_cpl")
        if done is not None:
            k = done["qp"]
            mine = k >= num_qps or not served >> k & 1 or held[k] > 0
            want = "user_recv_cpl" if mine else "svc_recv_cpl"
            assert c.get(want) == done, (want, c)
            completions.append(done["wr_id"])
            if mine and k < num_qps:
                seen["to_user_held"] += bool(served >> k & 1)
                held[k] = max(0, held[k] - 1)
            seen["to_svc"] += not mine
        if post is not None and not refused and post["qp"] < num_qps:
            held[post["qp"]] += 1
    for side, port in ((0, "user_recv"), (1, "svc_recv")):
        ids = [i for i in posted if i >> 16 == side]
        want = [r["wr_id"] for r in sent[port]]
        assert ids == (want if side else ids) and len(ids) <= len(want)
    assert completions == [r["wr_id"] for r in sent["recv_cpl"]]
    return seen


@pytest.mark.parametrize("num_qps, seed", [(1, 1), (5, 2), (256, 3)])
def test_requests_merged_and_completions_routed(num_qps, seed):
    sent, cycles = run(num_qps, seed)
    check_work_requests(sent, cycles, num_qps)
    seen = check_receive(sent, cycles, num_qps)
    assert seen["passed"] and seen["to_svc"] and seen["refused"], seen
    assert seen["to_user_held"] or num_qps == 1, seen


def test_parameters_are_checked():
    raises(ValueError, "1..256", lambda: ServicePorts(0, 4))
    raises(TypeError, "", lambda: ServicePorts(2.0, 4))
    raises(ValueError, "rq_depth", lambda: ServicePorts(2, 0))
    raises(ValueError, "rq_depth", lambda: ServicePorts(2, 2048))
