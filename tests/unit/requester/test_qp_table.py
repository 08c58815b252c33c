import random

import pytest

from rocegen.gateware.roce.layouts import QpState
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.sim.testing.harness import run_sim


def context(rng, state):
    return {"state": state, "peer_ip": rng.getrandbits(32), "peer_qpn": rng.getrandbits(24),
            "rkey": rng.getrandbits(32), "base_va": rng.getrandbits(64), "pmtu_log2": 12,
            "udp_sport": 0xC000 | rng.getrandbits(14), "dscp": 26, "ecn": 2,
            "ack_every_log2": 6, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


@pytest.mark.parametrize("num_qps", [1, 5, 64])
def test_contexts_and_psns(num_qps):
    rng = random.Random(num_qps)
    dut = QpTable(num_qps)
    model_ctx = {k: None for k in range(num_qps)}
    model_psn = dict.fromkeys(range(num_qps), 0)
    rejected = []

    async def read(ctx, k):
        ctx.set(dut.rd_qp, k)
        await ctx.tick()
        return ctx.get(dut.rd_context), ctx.get(dut.rd_psn)

    async def tb(ctx):
        for k in range(num_qps):            # after reset: RESET, PSN 0
            c, p = await read(ctx, k)
            assert c.state == QpState.RESET and p == 0
        for _ in range(3 * num_qps + 5):
            k = rng.randrange(num_qps + 2)  # sometimes outside the table
            c = context(rng, rng.choice(list(QpState)))
            psn_ctl, psn_tx = rng.getrandbits(24), rng.getrandbits(24)
            do_ctl, do_tx = rng.random() < 0.5, rng.random() < 0.5
            ctx.set(dut.ctl.payload, {"qp": k, "context": c})
            ctx.set(dut.ctl.valid, 1)
            ctx.set(dut.ctl_psn.payload, {"qp": k, "psn": psn_ctl})
            ctx.set(dut.ctl_psn.valid, do_ctl)
            ctx.set(dut.psn_w.payload, {"qp": k, "psn": psn_tx})
            ctx.set(dut.psn_w.valid, do_tx)
            _, _, rej, tx_ready = await ctx.tick().sample(dut.rejected, dut.psn_w.ready)
            rejected.append(bool(rej))
            assert tx_ready == (not do_ctl)              # the control side wins
            ctx.set(dut.ctl.valid, 0)
            ctx.set(dut.ctl_psn.valid, 0)
            ctx.set(dut.psn_w.valid, 0)
            assert bool(rej) == (k >= num_qps)
            if k < num_qps:
                model_ctx[k] = c
                if do_ctl:
                    model_psn[k] = psn_ctl
                elif do_tx:
                    model_psn[k] = psn_tx
        for k in range(num_qps):
            c, p = await read(ctx, k)
            if model_ctx[k] is not None:
                assert {f: (c[f].value if f == "state" else c[f]) for f in model_ctx[k]} == \
                    {f: (v.value if f == "state" else v) for f, v in model_ctx[k].items()}
            assert p == model_psn[k]
        for qpn in (0, 255, 256, 256 + num_qps - 1, 256 + num_qps, 0xFFFFFF):
            ctx.set(dut.lookup_qpn, qpn)
            await ctx.tick()
            valid = 256 <= qpn < 256 + num_qps
            assert ctx.get(dut.lookup_valid) == valid
            if valid:
                assert ctx.get(dut.lookup_index) == qpn - 256

    run_sim(dut, testbenches=[tb])
    assert any(rejected) and not all(rejected)


def test_parameters_are_validated():
    with pytest.raises(ValueError, match="1..256"):
        QpTable(0)
    with pytest.raises(ValueError, match="1..256"):
        QpTable(257)
    with pytest.raises(TypeError):
        QpTable(2.5)
    assert QpTable(4).qpn(3) == 259
    with pytest.raises(IndexError):
        QpTable(4).qpn(4)


def test_read_port():
    """With ``read_port``, ``rdr_qp`` -> ``rdr_context`` one cycle later (with
    ``resend_port``, ``rsd_qp`` -> ``rsd_context``), independent of the other context ports
    read in the same cycle; without them, no such ports."""
    rng = random.Random(3)
    num_qps = 6
    dut = QpTable(num_qps, info_port=True, resp_port=True, read_port=True, resend_port=True)
    assert not hasattr(QpTable(num_qps), "rdr_qp")
    assert not hasattr(QpTable(num_qps, read_port=True), "rsd_qp")
    contexts = [context(rng, rng.choice(list(QpState))) for _ in range(num_qps)]

    def same(got, want):
        return {f: (got[f].value if f == "state" else got[f]) for f in want} == \
            {f: (v.value if f == "state" else v) for f, v in want.items()}

    async def tb(ctx):
        for k, c in enumerate(contexts):
            ctx.set(dut.ctl.payload, {"qp": k, "context": c})
            ctx.set(dut.ctl.valid, 1)
            await ctx.tick()
        ctx.set(dut.ctl.valid, 0)
        ports = [(dut.rd_qp, dut.rd_context), (dut.rx_qp, dut.rx_context),
                 (dut.info_qp, dut.info_context), (dut.resp_qp, dut.resp_context),
                 (dut.rdr_qp, dut.rdr_context), (dut.rsd_qp, dut.rsd_context)]
        for _ in range(20):
            qps = [rng.randrange(num_qps) for _ in ports]
            before = ctx.get(dut.rdr_context), ctx.get(dut.rsd_context)
            for (addr, _), k in zip(ports, qps):
                ctx.set(addr, k)
            # (not combinational)
            assert (ctx.get(dut.rdr_context), ctx.get(dut.rsd_context)) == before
            await ctx.tick()
            for (_, data), k in zip(ports, qps):
                assert same(ctx.get(data), contexts[k])

    run_sim(dut, testbenches=[tb])


@pytest.mark.parametrize("num_qps", [1, 6])
def test_rkey_port(num_qps):
    """With ``rkey_port``, ``rkey_w`` writes a QP's R_Key alone: ``rd_context``,
    ``rsd_context`` and ``info_context`` read it from the next cycle, the rest of the context
    as ``ctl`` wrote it; ``ctl`` wins in a cycle both write (``rkey_w.ready`` low); a QP outside
    the table is rejected. Checked against a dictionary of the writes, in random order."""
    rng = random.Random(num_qps)
    dut = QpTable(num_qps, info_port=True, resend_port=True, rkey_port=True)
    assert not hasattr(QpTable(num_qps), "rkey_w")
    model = {}
    rejected = []

    def same(got, want):
        return {f: (got[f].value if f == "state" else got[f]) for f in want} == \
            {f: (v.value if f == "state" else v) for f, v in want.items()}

    async def tb(ctx):
        for step in range(40 * num_qps):
            k, j = rng.randrange(num_qps), rng.randrange(num_qps + 1)
            do_ctl = step < num_qps or rng.random() < 0.3
            c = context(rng, rng.choice(list(QpState)))
            if step < num_qps:
                k = step
            rkey = rng.getrandbits(32)
            ctx.set(dut.ctl.payload, {"qp": k, "context": c})
            ctx.set(dut.ctl.valid, do_ctl)
            ctx.set(dut.rkey_w.payload, {"qp": j, "rkey": rkey})
            ctx.set(dut.rkey_w.valid, 1)
            _, _, ready, rej = await ctx.tick().sample(dut.rkey_w.ready, dut.rejected)
            assert ready == (not do_ctl)
            if do_ctl:
                model[k] = c
            elif j < num_qps:
                model[j] = {**model[j], "rkey": rkey}
            rejected.append(bool(rej))
            assert bool(rej) == (not do_ctl and j >= num_qps)
            ctx.set(dut.ctl.valid, 0)
            ctx.set(dut.rkey_w.valid, 0)
            q = [rng.randrange(num_qps) for _ in range(3)]
            for port, k in zip((dut.rd_qp, dut.rsd_qp, dut.info_qp), q):
                ctx.set(port, k)
            await ctx.tick()
            for data, k in zip((dut.rd_context, dut.rsd_context, dut.info_context), q):
                assert k not in model or same(ctx.get(data), model[k])

    run_sim(dut, testbenches=[tb])
    assert any(rejected)
