"""Connection manager context builder: the context of every kind of request against the one the
connection-manager model writes, with random requests, contexts and defaults."""

import random

import pytest
from amaranth.hdl import Shape

from rocegen.gateware.roce.cm.cm_context import CmContext
from rocegen.gateware.roce.layouts import QP_CONTEXT, QPN_BASE, QpState
from rocegen.sim.models.cm import cm as M
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.headers import CM

NUM_QPS = 8
LOCAL_IP = 0x0A010064


def random_request(rng, kind):
    f = CM.unpack(bytes(rng.getrandbits(8) for _ in range(CM.length)))
    f.update(info_valid=1, req_type=kind, ack_valid=0, pmtu_code=rng.randrange(6),
             timeout_code=rng.choice([0, rng.randrange(32)]), retry_set=rng.randrange(2))
    return f


def random_context(rng, state):
    ctx = {name: rng.getrandbits(Shape.cast(f.shape).width) for name, f in QP_CONTEXT}
    ctx.update(state=state.value, pmtu_log2=rng.randrange(8, 13))
    return ctx


def expected(params, kind, req, current, free_idx):
    """The context the model writes for this request: OPEN_QP with ``free_idx`` the lowest free
    QP, the others on the QP named by ``rem_qpn``, open, owned by the sender, with context
    ``current``."""
    model = M.ConnectionManagerModel(NUM_QPS, local_ip=LOCAL_IP, **params)
    src = req["loc_ip"]
    if kind == M.REQ_OPEN_QP:
        for k in range(free_idx):           # the QPs below free_idx are taken
            model.in_use[k], model.owner[k] = True, src
    else:
        k = req["rem_qpn"] - QPN_BASE
        model.in_use[k], model.owner[k], model.context[k] = True, src, dict(current)
    res = model.receive(M.pack(**req), src_ip=src)
    assert res.context is not None, res.pulses
    return res.context[1]


@pytest.mark.parametrize("seed", [1, 2])
def test_contexts_match_the_model(seed):
    rng = random.Random(seed)
    params = {"default_pmtu": rng.choice([256, 512, 1024, 2048, 4096]),
              "default_timeout": rng.randrange(32), "default_retry": rng.randrange(8),
              "default_rnr_retry": rng.randrange(8), "ack_every_log2": rng.randrange(8)}
    dut = CmContext(**params)
    cases = 0

    async def tb(ctx):
        nonlocal cases
        for _ in range(150):
            kind = rng.choice([M.REQ_OPEN_QP, M.REQ_SEND_QP_INFO, M.REQ_MODIFY_QP_RTS,
                               M.REQ_CLOSE_QP, M.REQ_NULL, 5, 6, M.REQ_ERROR])
            req = random_request(rng, kind)
            free_idx = rng.randrange(NUM_QPS)
            req["rem_qpn"] = QPN_BASE + rng.randrange(NUM_QPS)
            state = QpState.RTR if kind == M.REQ_MODIFY_QP_RTS else rng.choice(list(QpState))
            current = random_context(rng, state)
            ctx.set(dut.req, req)
            ctx.set(dut.current, current)
            ctx.set(dut.free_idx, free_idx)
            got = meta_dict(ctx.get(dut.context))
            if kind in (M.REQ_OPEN_QP, M.REQ_SEND_QP_INFO, M.REQ_MODIFY_QP_RTS, M.REQ_CLOSE_QP):
                want = expected(params, kind, req, current, free_idx)
                assert got == want, (kind, req)
                cases += 1
            else:
                assert got == current, kind     # codes that write nothing keep the context
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert cases > 50


def test_parameters_are_checked():
    raises(ValueError, "default_pmtu", lambda: CmContext(default_pmtu=1500))
    raises(TypeError, "default_pmtu", lambda: CmContext(default_pmtu=True))
    raises(ValueError, "default_timeout", lambda: CmContext(default_timeout=32))
    raises(ValueError, "default_retry", lambda: CmContext(default_retry=8))
    raises(ValueError, "ack_every_log2", lambda: CmContext(ack_every_log2=8))
