"""The QP control merge (:class:`QpControl`): the user's and the connection manager's writes
(and with ``ibcm`` the IB CM's), with idle cycles on all and backpressure on all four outputs,
reach the QP table and the retry engine complete, in the same merged order (each source's own
order kept, the sources interleaved), the table first; a write for a QP whose old work is
draining (closed or in error, with work requests not completed) waits until that work has
drained, whichever writer it comes from, while writes for other QPs pass."""

import random
from collections import Counter

import pytest
from amaranth.hdl import Fragment, Shape

from rocegen.gateware.roce.layouts import PSN_SET, QpState
from rocegen.gateware.roce.requester.qp_control import QpControl
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE
from rocegen.sim.testing.harness import raises, run_sim


def source(port, values, rng, idle):
    async def run(ctx):
        for v in values:
            while rng.random() < idle:
                ctx.set(port.valid, 0)
                await ctx.tick()
            ctx.set(port.payload.as_value(), v)
            ctx.set(port.valid, 1)
            await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)
    return run


def sink(port, got, rng, backpressure, beside=None, also=None):
    """Takes ``port``'s writes (``(cycle, payload)`` into ``got``); with ``beside``, the value
    of that signal with each into ``also``."""
    async def run(ctx):
        cycle = 0
        extra = [] if beside is None else [beside]
        while True:
            ready = rng.random() >= backpressure
            ctx.set(port.ready, ready)
            _, _, valid, payload, *x = await ctx.tick().sample(
                port.valid, port.payload.as_value(), *extra)
            cycle += 1
            if valid and ready:
                got.append((cycle, payload))
                if also is not None:
                    also.append(x[0])
    return run


@pytest.mark.parametrize("seed, backpressure, ibcm", [(1, 0.0, False), (2, 0.3, False),
                                                     (3, 0.7, False), (4, 0.0, True),
                                                     (5, 0.5, True)])
def test_both_outputs_get_every_write_in_one_order(seed, backpressure, ibcm):
    """Every writer's writes (tagged with the writer's number in their top two bits) reach the
    table and the engine, the same merged order on both, each writer's own order kept, the
    writers interleaved (round robin), the engine never before the table; with ``ibcm``, the
    table's ``table_epsn`` is the IB CM's ``epsn`` with its writes, the PSN with the others'."""
    rng = random.Random(seed)
    dut = QpControl(256, ibcm=ibcm)
    writers = dut.writers
    n = 150
    writes = {f"{who}_{kind}": [k << (Shape.cast(layout).width - 2) |
                                rng.getrandbits(Shape.cast(layout).width - 2) for _ in range(n)]
              for k, who in enumerate(writers) for kind, layout in (("ctl", CONTEXT_WRITE),
                                                                    ("psn", PSN_WRITE))}
    epsns = {}
    if ibcm:        # (the IB CM's PSN writes state the PSN their responder expects too)
        epsns = {v: rng.getrandbits(24) for v in writes["ibcm_psn"]}
    got = {f"{to}_{kind}": [] for to in ("table", "engine") for kind in ("ctl", "psn")}
    srcs = [source(getattr(dut, name), [v | epsns.get(v, 0) << 32 if name == "ibcm_psn" else v
                                        for v in values], random.Random(rng.random()), 0.4)
            for name, values in writes.items()]
    table_epsn = []
    sinks = [sink(getattr(dut, name), values, random.Random(rng.random()), backpressure,
                  **({"beside": dut.table_epsn, "also": table_epsn}
                     if ibcm and name == "table_psn" else {}))
             for name, values in got.items()]
    total = len(writers) * n

    async def tb(ctx):
        while min(len(v) for v in got.values()) < total:
            await ctx.tick()
        await ctx.tick().repeat(10)

    run_sim(dut, testbenches=[tb], processes=srcs + sinks, deadline_cycles=80_000)
    for kind, layout in (("ctl", CONTEXT_WRITE), ("psn", PSN_WRITE)):
        top = Shape.cast(layout).width - 2
        table, engine = got[f"table_{kind}"], got[f"engine_{kind}"]
        assert len(table) == len(engine) == total
        assert [v for _, v in table] == [v for _, v in engine]
        for k, who in enumerate(writers):
            assert [v for _, v in table if v >> top == k] == writes[f"{who}_{kind}"]
        # the engine gets each write at least a cycle after the table did
        assert all(e > t for (t, _), (e, _) in zip(table, engine))
        # the sources were interleaved, not one after the other
        switches = Counter((a >> top, b >> top) for (_, a), (_, b) in zip(table, table[1:])
                           if a >> top != b >> top)
        assert len(switches) == len(writers) * (len(writers) - 1)
        assert sum(switches.values()) > 20 * (len(writers) - 1)
    if ibcm:
        assert table_epsn == [epsns.get(v, v >> 8 & 0xFFFFFF) for _, v in got["table_psn"]]


@pytest.mark.parametrize("who, other, ibcm", [("user", "cm", False), ("ibcm", "user", True),
                                             ("cm", "ibcm", True)])
def test_a_new_connection_waits_for_the_old_work(who, other, ibcm):
    """QP 3 has work outstanding: its close (by writer ``who``) passes, then its set-up (PSN,
    then RTS context) waits while the error state has not yet risen (the close is in flight),
    while it is in error with work left, and passes once its work has drained; QP 5's writes
    (by writer ``other``) pass meanwhile."""
    dut = QpControl(8, ibcm=ibcm)
    w_ctl, w_psn = getattr(dut, f"{who}_ctl"), getattr(dut, f"{who}_psn")
    events = []

    def ctx(qp, state):
        return {"qp": qp, "context": {"state": state}}

    async def tb(ctx_):
        c = ctx_
        for port in (dut.table_ctl, dut.table_psn, dut.engine_ctl, dut.engine_psn):
            c.set(port.ready, 1)
        c.set(dut.busy, 1 << 3 | 1 << 5)

        async def write(port, payload, what):
            c.set(port.payload, payload)
            c.set(port.valid, 1)
            await c.tick().until(port.ready)
            c.set(port.valid, 0)
            events.append((what, cycle[0]))
        cycle = [0]

        async def count(c2):
            while True:
                await c2.tick()
                cycle[0] += 1
        await write(w_ctl, ctx(3, QpState.RESET), "close 3")
        # the set-up of QP 3 comes at once: held (closing), also while QP 5's write passes
        c.set(w_psn.payload, {"qp": 3, "psn": 77})
        c.set(w_psn.valid, 1)
        for _ in range(6):
            await c.tick()
            assert not c.get(w_psn.ready)
        await write(getattr(dut, f"{other}_psn"), {"qp": 5, "psn": 9}, "psn 5")
        c.set(dut.errored, 1 << 3)            # the error state rises: still held (busy)
        for _ in range(6):
            await c.tick()
            assert not c.get(w_psn.ready)
        c.set(dut.busy, 1 << 5)               # QP 3's work has drained
        await c.tick().until(w_psn.ready)
        c.set(w_psn.valid, 0)
        c.set(dut.errored, 0)
        await write(w_ctl, ctx(3, QpState.RTS), "open 3")
        # a close of an idle QP holds nothing
        c.set(dut.busy, 1 << 5)
        await write(w_ctl, ctx(2, QpState.ERROR), "close 2")
        await write(w_psn, {"qp": 2, "psn": 1}, "psn 2")

    run_sim(dut, testbenches=[tb], deadline_cycles=1000)
    assert [w for w, _ in events] == ["close 3", "psn 5", "open 3", "close 2", "psn 2"]


@pytest.mark.parametrize("ibcm", [False, True])
def test_signature(ibcm):
    """The writers' ports, the IB CM's only with ``ibcm``."""
    dut = QpControl(4, ibcm=ibcm)
    for kind, layout in (("ctl", CONTEXT_WRITE), ("psn", PSN_WRITE)):
        for name in (f"user_{kind}", f"cm_{kind}", f"table_{kind}", f"engine_{kind}"):
            assert getattr(dut, name).payload.shape() == layout
        assert hasattr(dut, f"ibcm_{kind}") == ibcm
        if ibcm:
            assert getattr(dut, f"ibcm_{kind}").payload.shape() == \
                (PSN_SET if kind == "psn" else layout)
    assert hasattr(dut, "table_epsn") == ibcm
    Fragment.get(dut, None)


def test_parameters_are_validated():
    raises(TypeError, "ibcm", lambda: QpControl(4, ibcm=1))
    raises(ValueError, "num_qps", lambda: QpControl(0))
