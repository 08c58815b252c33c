"""Connection manager records: look-ups, record writes and the pool of free QPs against a
Python model, with random writes, look-ups, error bits and QPs reserved by another manager
(never the free QP)."""

import random

import pytest
from amaranth.hdl import Shape

from rocegen.gateware.roce.cm.cm_records import CmRecords
from rocegen.gateware.roce.layouts import QP_CONTEXT, QPN_BASE, QpState
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim


def random_context(rng):
    ctx = {name: rng.getrandbits(Shape.cast(f.shape).width) for name, f in QP_CONTEXT}
    ctx["state"] = rng.choice(list(QpState)).value
    return ctx


class Model:
    def __init__(self, n):
        self.n = n
        self.in_use = [False] * n
        self.owner = [0] * n
        self.context = [None] * n          # None: never written (the memory is not initialised)

    def write(self, qp, owner, context, take, release):
        if qp < self.n:
            self.owner[qp], self.context[qp] = owner, context
            if take:
                self.in_use[qp] = True
            if release:
                self.in_use[qp] = False

    def lookup(self, qpn, src_ip, errored, reserved=0):
        k = (qpn - QPN_BASE) & ((1 << (self.n - 1).bit_length()) - 1)    # the index bits
        free = [i for i in range(self.n) if not self.in_use[i] and not reserved >> i & 1]
        ans = {"is_open": int(QPN_BASE <= qpn < QPN_BASE + self.n and self.in_use[k]),
               "any_free": int(bool(free)), "free_idx": free[0] if free else None}
        if k < self.n and self.context[k] is not None:
            state = QpState.ERROR.value if errored >> k & 1 else self.context[k]["state"]
            ans.update(context=self.context[k], owner_ok=int(self.owner[k] == src_ip), state=state)
        return ans


@pytest.mark.parametrize("num_qps", [1, 3, 8, 256])
def test_against_the_model(num_qps):
    rng = random.Random(num_qps)
    dut = CmRecords(num_qps)
    model = Model(num_qps)
    hosts = [rng.getrandbits(32) for _ in range(3)]
    checked = {"lookups": 0, "open": 0, "full": 0, "skipped": 0}

    async def tb(ctx):
        for _ in range(400 if num_qps < 256 else 1500):
            errored = rng.getrandbits(num_qps)
            ctx.set(dut.errored, errored)
            density = rng.choice([0.0, 0.0, 0.3, 0.7])
            reserved = sum(1 << k for k in range(num_qps) if rng.random() < density)
            ctx.set(dut.reserved, reserved)
            if rng.random() < 0.6:
                w = {"qp": rng.randrange(num_qps), "owner": rng.choice(hosts),
                     "context": random_context(rng), "take": 0, "release": 0}
                w[rng.choice(["take", "take", "release", None])] = 1
                w.pop(None, None)
                ctx.set(dut.write.payload, w)
                ctx.set(dut.write.valid, 1)
                model.write(w["qp"], w["owner"], w["context"], w["take"], w["release"])
                await ctx.tick()
                ctx.set(dut.write.valid, 0)
            qpn = rng.choice([QPN_BASE + rng.randrange(num_qps), QPN_BASE + num_qps,
                              QPN_BASE - 1, rng.getrandbits(24), 0])
            src = rng.choice(hosts)
            ctx.set(dut.lookup.qpn, qpn)
            ctx.set(dut.lookup.src_ip, src)
            await ctx.tick()                # the record answers: one cycle
            want = model.lookup(qpn, src, errored, reserved)
            got = {name: ctx.get(getattr(dut.lookup, name)) for name in
                   ("is_open", "owner_ok", "state", "context")}
            assert got["is_open"] == want["is_open"]
            if "context" in want:
                assert meta_dict(got["context"]) == want["context"]
                assert got["owner_ok"] == want["owner_ok"]
                assert got["state"].value == want["state"]
            await ctx.tick()                # the pool answers: two cycles after a write
            assert ctx.get(dut.lookup.any_free) == want["any_free"]
            if want["any_free"]:
                assert ctx.get(dut.lookup.free_idx) == want["free_idx"]
            assert ctx.get(dut.qp_open) == sum(1 << k for k in range(num_qps) if model.in_use[k])
            checked["lookups"] += 1
            checked["open"] += want["is_open"]
            checked["full"] += not want["any_free"]
            unused = [k for k in range(num_qps) if not model.in_use[k]]
            checked["skipped"] += bool(unused) and reserved >> unused[0] & 1

    run_sim(dut, testbenches=[tb])
    assert checked["open"] > 20                     # the sequence covers open QPs...
    assert checked["skipped"] > 5                   # ... a reserved QP passed over ...
    if num_qps < 256:
        assert checked["full"] > 5                  # ... and a full pool


def test_num_qps_is_checked():
    raises(ValueError, "1..256", lambda: CmRecords(0))
    raises(TypeError, "num_qps", lambda: CmRecords(2.0))
