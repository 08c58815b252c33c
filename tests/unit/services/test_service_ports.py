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

#: the ``wr_id`` side of the completions the testbench sends (0: the user, 1 + j: service j)
CPL_SIDE = 15


def names(services):
    """(the streams watched each cycle, those the testbench sends, those it takes)."""
    svc = [f"svc_{{}}.{j}" for j in range(services)]
    watched = ["wr", "user_cpl", *(s.format("cpl") for s in svc), "user_recv", "recv",
               "recv_cpl", "user_recv_cpl", *(s.format("recv_cpl") for s in svc)]
    sources = ["user_wr", *(s.format("wr") for s in svc), "cpl", "user_recv",
               *(s.format("recv") for s in svc), "recv_cpl"]
    sinks = ["wr", "user_cpl", *(s.format("cpl") for s in svc), "recv", "user_recv_cpl",
             *(s.format("recv_cpl") for s in svc)]
    return watched, sources, sinks


def port(dut, name):
    """``dut``'s stream ``name`` (``svc_wr.1``: ``dut.svc_wr[1]``)."""
    base, _, j = name.partition(".")
    return getattr(dut, base)[int(j)] if j else getattr(dut, base)


def side_of(name):
    """Who sends on source ``name``: 0 the user, 1 + j service j, CPL_SIDE the completions."""
    if name in ("cpl", "recv_cpl"):
        return CPL_SIDE
    return 1 + int(name.partition(".")[2]) if name.startswith("svc") else 0


def owner_of(served, qp):
    """The service whose QP ``qp`` is in a cycle of ``served`` (a list per service), or None."""
    return next((j for j, s in enumerate(served) if s >> qp & 1), None)


def records(rng, side, count, num_qps):
    """``count`` requests or completions of QPs 0..num_qps (one outside the table, when the
    8-bit field has room), each telling who sent it in ``wr_id``."""
    return [{"qp": rng.randrange(min(num_qps + 1, 256)), "wr_id": side << 16 | k,
             "status": RecvStatus.OK.value if side == CPL_SIDE else 0} for k in range(count)]


def run(num_qps, seed, services, count=80):
    """Random traffic on every port; returns what was sent and every cycle's handshakes."""
    rng = random.Random(seed)
    dut = ServicePorts(num_qps, 4, services)
    watched, sources, sinks = names(services)
    sent = {p: records(rng, side_of(p), count, num_qps) for p in sources}
    for p in sources:
        if p != "recv_cpl":
            for r in sent[p]:
                del r["status"]
    cycles = []

    def sender(name):
        async def send(ctx):
            await send_records(ctx, port(dut, name), sent[name], rng, idle=0.3)
        return send

    async def drive(ctx):
        while True:
            if rng.random() < 0.05:         # (each QP one service's, or none)
                owners = [rng.randrange(services + 1) for _ in range(num_qps)]
                for j, s in enumerate(dut.served):
                    ctx.set(s, sum(1 << k for k, o in enumerate(owners) if o == j + 1))
            for p in sinks:
                ctx.set(port(dut, p).ready, rng.random() >= 0.4)
            await ctx.tick()

    async def watch(ctx):
        ports = [port(dut, p) for p in watched]
        sigs = [s for p in ports for s in (p.valid, p.ready, p.payload)]
        async for _, _, *values in ctx.tick().sample(*dut.served, *sigs):
            served, rest = values[:services], values[services:]
            cycle = {"served": list(served)}
            for k, name in enumerate(watched):
                valid, ready, payload = rest[3 * k:3 * k + 3]
                if valid and ready:
                    cycle[name] = {"qp": payload.qp, "wr_id": payload.wr_id,
                                   **({"status": payload.status.value}
                                      if "recv_cpl" in name else {})}
            cycles.append(cycle)

    async def tb(ctx):
        await ctx.tick().repeat(30 * count)

    run_sim(dut, testbenches=[tb, *(sender(p) for p in sources)], processes=[drive, watch],
            deadline_cycles=60 * count)
    return sent, cycles


def check_work_requests(sent, cycles, num_qps, services):
    merged = [(c["wr"]["qp"], c["wr"]["wr_id"]) for c in cycles if "wr" in c]
    for name in ("user_wr", *(f"svc_wr.{j}" for j in range(services))):
        assert [r for r in merged if r[1] >> 16 == side_of(name)] == \
            [(r["qp"], r["wr_id"]) for r in sent[name]]
    taken = []
    outs = {"user_cpl": None, **{f"svc_cpl.{j}": j for j in range(services)}}
    for c in cycles:
        for name, j in outs.items():
            if name in c:
                qp = c[name]["qp"]
                assert (owner_of(c["served"], qp) if qp < num_qps else None) == j, (name, c)
                taken.append((qp, c[name]["wr_id"]))
    assert sorted(taken) == sorted((r["qp"], r["wr_id"]) for r in sent["cpl"])
    for name in outs:
        ids = [c[name]["wr_id"] for c in cycles if name in c]
        assert ids == sorted(ids) and ids


def check_receive(sent, cycles, num_qps, services):
    """The model: ``held[k]`` the user's buffers on QP k; per cycle, a user post on a served
    QP is refused (FLUSHED on ``user_recv_cpl``), others pass to ``recv``; a completion goes to
    the user when its QP is outside the table, not served, or has the user's buffers."""
    held = [0] * num_qps
    seen = {"refused": 0, "passed": 0, "to_user_held": 0, "to_svc": 0}
    posted, completions = [], []
    for c in cycles:
        served = c["served"]
        post = c.get("user_recv")
        refused = post is not None and post["qp"] < num_qps and \
            owner_of(served, post["qp"]) is not None
        if refused:
            assert c.get("user_recv_cpl") == {**post, "status": RecvStatus.FLUSHED.value}, c
            assert "recv" not in c or c["recv"]["wr_id"] >> 16 != 0, c
            seen["refused"] += 1
        elif post is not None:
            assert c.get("recv") == post, c
            seen["passed"] += 1
        if "recv" in c:
            posted.append(c["recv"]["wr_id"])
        done = c.get("recv_cpl")
        if done is not None:
            k = done["qp"]
            owner = owner_of(served, k) if k < num_qps else None
            mine = owner is None or held[k] > 0
            want = "user_recv_cpl" if mine else f"svc_recv_cpl.{owner}"
            assert c.get(want) == done, (want, c)
            completions.append(done["wr_id"])
            if mine and k < num_qps:
                seen["to_user_held"] += owner is not None
                held[k] = max(0, held[k] - 1)
            seen["to_svc"] += not mine
        if post is not None and not refused and post["qp"] < num_qps:
            held[post["qp"]] += 1
    for name in ("user_recv", *(f"svc_recv.{j}" for j in range(services))):
        ids = [i for i in posted if i >> 16 == side_of(name)]
        want = [r["wr_id"] for r in sent[name]]
        assert ids == (want if side_of(name) else ids) and len(ids) <= len(want)
    assert completions == [r["wr_id"] for r in sent["recv_cpl"]]
    return seen


@pytest.mark.parametrize("num_qps, seed, services", [(1, 1, 1), (5, 2, 2), (256, 3, 2),
                                                     (4, 4, 4)])
def test_requests_merged_and_completions_routed(num_qps, seed, services):
    sent, cycles = run(num_qps, seed, services)
    check_work_requests(sent, cycles, num_qps, services)
    seen = check_receive(sent, cycles, num_qps, services)
    assert seen["passed"] and seen["to_svc"] and seen["refused"], seen
    assert seen["to_user_held"] or num_qps == 1, seen


def test_parameters_are_checked():
    raises(ValueError, "1..256", lambda: ServicePorts(0, 4))
    raises(TypeError, "num_qps must be an integer", lambda: ServicePorts(2.0, 4))
    raises(ValueError, "rq_depth", lambda: ServicePorts(2, 0))
    raises(ValueError, "rq_depth", lambda: ServicePorts(2, 2048))
    raises(ValueError, "services", lambda: ServicePorts(2, 4, 0))
    raises(ValueError, "services", lambda: ServicePorts(2, 4, 5))
