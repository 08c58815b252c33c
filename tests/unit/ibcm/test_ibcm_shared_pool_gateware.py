"""The FPGA's two connection managers on one QP pool, in gateware: the IB CM's QPs
(:class:`IbCmQps`) and the UDP 17185 manager (:class:`ConnectionManager`) wired as the endpoint
wires them (``others`` = ``qp_open``, ``pool_idle``, ``reserved`` = ``held``). Random OPEN_QP,
CLOSE_QP and SEND_QP_INFO datagrams into the one while the other takes, opens, closes and
gives back QPs, with idle cycles and backpressure everywhere: no QP is ever held by both, each
grant and each ACK of OPEN_QP names a QP then held by its manager only (the ACK with that QP's
region), a request naming the other's QP is refused, and after everything is given back both
bitmaps are empty and every QP can be taken again by either."""

import random
from collections import Counter

import pytest
from amaranth.hdl import Elaboratable, Module

from rocegen.gateware.roce.cm.cm import ConnectionManager
from rocegen.gateware.roce.ibcm.ibcm_qps import IbCmQps
from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.gateware.roce.responder.resp_layouts import RESP_QP_CONFIG
from rocegen.gateware.roce.responder.responder import default_config
from rocegen.sim.models.cm import cm as M
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim, shared
from tests.tiers import full
from tests.unit.cm.test_cm import INSIDE, LOCAL_IP, Sink, datagram, ip

WIDTH = 64


class Pair(Elaboratable):
    """The two managers of ``num_qps`` QPs, connected as in the endpoint's IB CM feature (with
    a responder: the ACKs of OPEN_QP name the QP's region, from :data:`REGIONS`)."""

    def __init__(self, num_qps):
        self.num_qps = num_qps
        self.cm = ConnectionManager(WIDTH, num_qps, regions=True)
        self.qps = IbCmQps(num_qps)
        self.config = default_config(num_qps, 0x10_0000, 4096)

    async def cfg_port(self, ctx):
        """The responder's configuration table, as the connection manager reads it (each QP
        its own R_Key)."""
        async for _, _, qp in ctx.tick().sample(self.cm.cfg_qp):
            ctx.set(self.cm.cfg, RESP_QP_CONFIG.const(self.config[qp]))

    def elaborate(self, platform):
        m = Module()
        cm, qps = m.submodules.cm, m.submodules.qps = self.cm, self.qps
        m.d.comb += [qps.others.eq(cm.qp_open), qps.pool_idle.eq(cm.pool_idle),
                     cm.reserved.eq(qps.held), qps.tclass.eq(cm.tclass)]
        return m


def lowest(busy, n):
    """The QPN of the lowest QP not in bitmap ``busy``, or None."""
    return next((QPN_BASE + k for k in range(n) if not busy >> k & 1), None)


class Watch:
    """A process checking, every cycle, that no QP is held by both managers, and each grant
    against the bitmaps of the cycle its request was taken in (the lowest QP neither holds);
    it notes both bitmaps at each reply's last beat (``at_reply``)."""

    def __init__(self, dut):
        self.dut = dut
        self.at_reply = []
        self.grants = []            # (ok, qpn) of each grant taken
        self.seen = Counter()

    async def run(self, ctx):
        cm, qps, n = self.dut.cm, self.dut.qps, self.dut.num_qps
        want = None
        async for _, _, qp_open, held, rv, rr, gv, gr, g, ov, o_r, last in ctx.tick().sample(
                cm.qp_open, qps.held, qps.qp_req.valid, qps.qp_req.ready, qps.qp_grant.valid,
                qps.qp_grant.ready, qps.qp_grant.payload, cm.o.valid, cm.o.ready,
                cm.o.payload.last):
            assert not qp_open & held, (qp_open, held)
            self.seen["both_busy"] += bool(qp_open) and bool(held)
            if gv and gr:
                got = (g.ok, g.qpn if g.ok else None)
                assert got == want, (got, want)
                if g.ok:
                    k = g.qpn - QPN_BASE
                    assert held >> k & 1 and not qp_open >> k & 1
                self.grants.append(got)
            if rv and rr:
                q = lowest(held | qp_open, n)
                want = (int(q is not None), q)
                # the QP granted comes after one the other manager holds
                self.seen["passed_by"] += q is not None and bool(
                    qp_open & ((1 << (q - QPN_BASE)) - 1))
            if ov and o_r and last:
                self.at_reply.append((qp_open, held))


class Host:
    """The host side: datagrams to the ConnectionManager one at a time, each reply checked."""

    def __init__(self, dut, rng):
        self.dut, self.rng = dut, rng
        self.drv = StreamDriver(dut.cm.i, WIDTH, idle=0.3, seed=rng.random())
        self.col = StreamCollector(dut.cm.o, WIDTH, backpressure=0.3, seed=rng.random())
        self.open = {}              # QPN -> owner
        self.seen = Counter()

    async def ask(self, ctx, watch, payload, src):
        """Send ``payload`` from ``src``; the reply's fields and the bitmaps at its end."""
        k = len(self.col.packets)
        await self.drv.send(ctx, [datagram(payload, src)[0]])
        while len(self.col.packets) == k:
            await ctx.tick()
        return M.unpack(self.col.packets[k].data), watch.at_reply[k]

    async def open_qp(self, ctx, watch):
        src = self.rng.choice(INSIDE)
        f, (qp_open, held) = await self.ask(ctx, watch, M.request(
            M.REQ_OPEN_QP, loc_qpn=self.rng.getrandbits(24), loc_ip=ip(src)), src)
        if f["ack_type"] == M.ACK_NO_QP:
            assert f["loc_qpn"] == 0        # refused: no QP named
            self.seen["no_qp"] += 1
            return None
        assert f["ack_type"] == M.ACK_ACK and f["loc_qpn"] not in self.open, f
        k = f["loc_qpn"] - QPN_BASE
        assert k >= 0, f                    # our QPN
        assert qp_open >> k & 1 and not held >> k & 1
        assert M.region(f)[0] == self.dut.config[k]["mr"]["rkey"], f   # and its region
        self.open[f["loc_qpn"]] = src
        self.seen["opened"] += 1
        return f["loc_qpn"]

    async def close_qp(self, ctx, watch, qpn):
        src = self.open.pop(qpn)
        f, _ = await self.ask(ctx, watch, M.request(M.REQ_CLOSE_QP, rem_qpn=qpn,
                                                    loc_ip=ip(src)), src)
        assert f["ack_type"] == M.ACK_ACK

    async def name_theirs(self, ctx, watch, qpn):
        """A request naming a QP the other manager holds: refused."""
        kind = self.rng.choice([M.REQ_CLOSE_QP, M.REQ_SEND_QP_INFO, M.REQ_MODIFY_QP_RTS])
        src = self.rng.choice(INSIDE)
        f, _ = await self.ask(ctx, watch, M.request(kind, rem_qpn=qpn, loc_ip=ip(src)), src)
        assert f["ack_type"] == M.ACK_NAK
        self.seen["refused"] += 1


class IbSide:
    """The IB CM's side: QPs asked for, opened or closed (``qp_set``) and given back on
    :class:`IbCmQps`'s ports."""

    def __init__(self, dut, rng):
        self.qps, self.rng = dut.qps, rng
        self.mine = []              # QPNs granted, not given back
        self.seen = Counter()

    async def offer(self, ctx, port, payload=None):
        if payload is not None:
            ctx.set(port.payload, payload)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)

    async def take(self, ctx):
        """A QP asked for: its QPN or None."""
        await self.offer(ctx, self.qps.qp_req)
        while True:
            ready = self.rng.random() < 0.6
            ctx.set(self.qps.qp_grant.ready, ready)
            _, _, valid, g = await ctx.tick().sample(self.qps.qp_grant.valid,
                                                     self.qps.qp_grant.payload)
            if valid and ready:
                ctx.set(self.qps.qp_grant.ready, 0)
                self.seen["granted" if g.ok else "none_free"] += 1
                if g.ok:
                    self.mine.append(g.qpn)
                return g.qpn if g.ok else None

    async def give_back(self, ctx, qpn):
        self.mine.remove(qpn)
        if self.rng.random() < 0.5:
            await self.offer(ctx, self.qps.qp_set, {"open": 0, "qpn": qpn})
        await self.offer(ctx, self.qps.qp_free, qpn)
        self.seen["freed"] += 1

    async def step(self, ctx):
        rng = self.rng
        for _ in range(rng.randrange(12)):
            await ctx.tick()
        r = rng.random()
        if r < 0.45:
            await self.take(ctx)
        elif r < 0.85 and self.mine:
            await self.give_back(ctx, rng.choice(self.mine))
        elif self.mine:
            await self.offer(ctx, self.qps.qp_set, {
                "open": 1, "qpn": rng.choice(self.mine), "peer_ip": rng.getrandbits(32),
                "psn": rng.getrandbits(24), "path_mtu": rng.randrange(1, 6)})


def sinks(dut, rng, backpressure=0.3):
    """Takers, with backpressure, of both managers' QP table writes and the generator's runs."""
    ports = [dut.cm.qp_ctl, dut.cm.qp_psn, dut.cm.gen, dut.qps.qp_ctl, dut.qps.qp_psn]
    return [Sink(p, backpressure=backpressure, seed=rng.random()).run for p in ports]


async def host_run(ctx, host, ib, watch, steps):
    """``steps`` random requests to the ConnectionManager."""
    rng = host.rng
    for _ in range(steps):
        r = rng.random()
        if r < 0.5:
            await host.open_qp(ctx, watch)
        elif r < 0.8 and host.open:
            await host.close_qp(ctx, watch, rng.choice(sorted(host.open)))
        elif ib.mine:
            await host.name_theirs(ctx, watch, rng.choice(ib.mine))


async def everything_again(ctx, dut, host, ib, watch):
    """Both bitmaps empty; then the IB CM takes every QP (in order, then none), gives them
    back; then the ConnectionManager opens every QP (then NO_QP) and closes them."""
    n = dut.num_qps
    assert ctx.get(dut.cm.qp_open) == 0 and ctx.get(dut.qps.held) == 0
    assert [await ib.take(ctx) for _ in range(n + 1)] == \
        [QPN_BASE + k for k in range(n)] + [None]
    for qpn in list(ib.mine):
        await ib.give_back(ctx, qpn)
    assert [await host.open_qp(ctx, watch) for _ in range(n + 1)] == \
        [QPN_BASE + k for k in range(n)] + [None]
    for qpn in sorted(host.open):
        await host.close_qp(ctx, watch, qpn)
    await ctx.tick().repeat(4)
    assert ctx.get(dut.cm.qp_open) == 0 and ctx.get(dut.qps.held) == 0


@pytest.mark.parametrize("num_qps, steps, seed", [(4, 60, 1), (1, 30, 2), full(16, 200, 3)])
def test_the_managers_never_share_a_qp(num_qps, steps, seed):
    """Both managers at once on one pool (see the module's docstring); the run meets QPs held
    by both managers at once, a full pool on each side and refusals of the other's QPs."""
    rng = random.Random(seed)
    dut = Pair(num_qps)
    watch, host, ib = Watch(dut), Host(dut, rng), IbSide(dut, random.Random(rng.random()))
    done = {}

    async def host_tb(ctx):
        ctx.set(dut.cm.local_ip, ip(LOCAL_IP))
        await host_run(ctx, host, ib, watch, steps)
        for qpn in sorted(host.open):
            await host.close_qp(ctx, watch, qpn)
        done["host"] = True
        while "ib" not in done:
            await ctx.tick()
        await ctx.tick().repeat(4)
        await everything_again(ctx, dut, host, ib, watch)

    async def ib_tb(ctx):
        while "host" not in done:
            await ib.step(ctx)
        for qpn in list(ib.mine):
            await ib.give_back(ctx, qpn)
        done["ib"] = True

    run_sim(dut, testbenches=[host_tb, ib_tb], processes=[watch.run, host.col.run, dut.cfg_port] +
            sinks(dut, rng), deadline_cycles=400 * steps + 20_000)
    seen = watch.seen + host.seen + ib.seen
    wanted = ["no_qp", "opened", "refused", "granted", "none_free", "freed"]
    if num_qps > 1:
        wanted += ["both_busy", "passed_by"]
    assert all(seen[k] > 0 for k in wanted), seen


def race(dut, give_back, offset):
    """One OPEN_QP, its datagram sent (8 beats) once the IB CM holds all QPs but one
    (``give_back`` False) or all, against the IB CM taking (``give_back`` False) or giving back
    a QP ``offset`` cycles on: the QPN the OPEN_QP got, or None."""
    rng = random.Random(offset)
    watch, host, ib = Watch(dut), Host(dut, rng), IbSide(dut, rng)
    host.drv.idle = 0
    got = []

    async def host_tb(ctx):
        ctx.set(dut.cm.local_ip, ip(LOCAL_IP))
        while not got:
            await ctx.tick()
        got[0] = await host.open_qp(ctx, watch)

    async def ib_tb(ctx):
        for _ in range(dut.num_qps - (not give_back)):
            await ib.take(ctx)
        got.append("start")                 # the datagram starts now
        for _ in range(offset):
            await ctx.tick()
        if give_back:
            await ib.give_back(ctx, ib.mine[-1])
        else:
            await ib.take(ctx)

    run_sim(dut, testbenches=[host_tb, ib_tb], processes=[watch.run, host.col.run,
            dut.cfg_port] + sinks(dut, rng, backpressure=0), deadline_cycles=2000)
    return got[0]


@pytest.mark.parametrize("give_back", [True, False])
def test_an_open_racing_a_change_of_the_pool(give_back):
    """The pool full but for one QP, or full with one QP about to come back: an OPEN_QP whose
    datagram arrives around the cycle the IB CM takes (``give_back`` False) or gives back
    (True) a QP, at every offset of a range covering the datagram's arrival, is answered
    consistently: an ACK names a QP the ConnectionManager then holds, with that QP's region,
    or NO_QP names none; the two managers never hold one QP."""
    dut = shared(Pair, 2)
    outcomes = Counter(race(dut, give_back, offset) for offset in range(16))
    assert outcomes[None] > 0 and sum(outcomes.values()) > outcomes[None], outcomes
