"""The rping server in gateware (:class:`RpingServer`) against its reference model
(:mod:`rocegen.sim.models.services.rping`), in closed loop: the endpoint's stand-in
(:mod:`tests.unit.services.standin`) executes what the block posts against rping clients and
hands back the completions, the opened and closed QPs and the responder's memory writes, each
stream with random idle cycles and random backpressure on every output. Every event the block
takes goes to the model too, and every receive buffer, R_Key write and work request the block
offers must be the model's next one, the counters the model's; every client ends as rping's
client ends against this server (``-V``: every ping's bytes checked)."""

import random
from collections import deque
from functools import partial

import pytest

from rocegen.gateware.roce.services.rping_server import COUNTERS, RpingServer
from rocegen.sim.models.responder.responder import RecvStatus
from rocegen.sim.models.services.rping import (
    ADV_BYTES,
    Phase,
    RecvPost,
    RkeyWrite,
    RpingMemory,
    WorkRequest,
    WrKind,
    pack_adv,
)
from rocegen.sim.models.services.rping import RpingServer as ModelServer
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim, shared
from rocegen.wire.verbs import CplStatus, WrOpcode
from tests.tiers import full
from tests.unit.services.standin import ClientSpec, Endpoint, StreamBench, model_event
from tests.unit.services.test_rping_model import check_outcomes


def _recv_post(p):
    return RecvPost(p["qp"], p["wr_id"], p["addr"], p["length"])


def _rkey(p):
    return RkeyWrite(p["qp"], p["rkey"])


def _wr(p):
    assert p["imm"] == 0, p
    return WorkRequest(p["qp"], p["wr_id"], WrOpcode(p["opcode"]), p["local_addr"], p["length"],
                       p["remote_offset"])


class Bench(StreamBench):
    """The block in the stand-in's place of the model (see the module's docstring)."""

    def __init__(self, dut, layout, scripts, seed, *, idle=0.3, backpressure=0.3, noise=0.05):
        self.dut, self.layout = dut, layout
        self.rng = random.Random(seed)
        self.ep = Endpoint(layout, scripts, self.rng,
                           mem_bytes=(1 << dut.addr_width) * (dut.width // 8))
        self.model = ModelServer(layout)
        self.expect = {"recv": deque(), "rkey": deque(), "wr": deque()}
        self.strobes = dict.fromkeys(COUNTERS, 0)
        self.idle, self.backpressure, self.noise = idle, backpressure, noise
        self.snooped = 0
        self.taken = 0

    def took(self, kind, item):
        """The block took ``item``: the model takes it too; what it does is expected next."""
        qp = item[1] if kind == "event" else item[0] if kind == "cpl" else item["qp"]
        self.ep.took(qp)
        self.taken += 1
        a = model_event(self.model, self.ep, kind, item)
        for name, out in (("recv", a.recv), ("rkey", a.rkey), ("wr", a.wr)):
            if out is not None:
                self.expect[name].append(out)

    def offerable(self, kind, item):
        return kind != "recv" or item["after"] <= self.snooped

    async def snoop(self, ctx):
        """The responder's writes, and the stand-in's own moves, a cycle at a time."""
        w = self.dut.adv_w
        while True:
            ep, r = self.ep, self.rng
            if r.random() < 0.5:
                ep.step()
            if r.random() < self.noise:
                ep.write_elsewhere()
            go = bool(ep.snoops) and r.random() >= self.idle
            if go:
                addr, data, be = ep.snoops[0]
                ctx.set(w.payload, {"addr": addr, "data": int.from_bytes(data, "little"), "be": be})
            ctx.set(w.valid, go)
            await ctx.tick()
            if go:
                ep.snoops.popleft()
                self.snooped += 1

    async def count(self, ctx):
        async for _, _, *values in ctx.tick().sample(*(getattr(self.dut, n) for n in COUNTERS)):
            for name, v in zip(COUNTERS, values, strict=True):
                self.strobes[name] += v

    async def main(self, ctx):
        """Runs until all is done and quiet; fails when nothing moves for a while."""
        quiet = still = 0
        last = None
        while quiet < 40:
            await ctx.tick()
            busy = not self.ep.idle() or any(self.expect.values()) or self.ep.snoops
            quiet = 0 if busy else quiet + 1
            now = (self.taken, sum(map(len, self.expect.values())), len(self.ep.finished))
            still = still + 1 if now == last else 0
            last = now
            assert still < 2000, f"no progress for 2000 cycles: expected {self.expect}"

    def run(self):
        d, ep = self.dut, self.ep
        drives = ((d.opened, "event", ep.events, lambda e: {"qp": e[1], "open": e[0] == "open"}),
                  (d.cpl, "cpl", ep.cpls,
                   lambda c: {"qp": c[0], "wr_id": c[1], "status": c[2].value}),
                  (d.recv_cpl, "recv", ep.recv_cpls,
                   lambda c: {"qp": c["qp"], "wr_id": c["wr_id"], "opcode": c.get("opcode", 0),
                              "status": c["status"].value, "length": c["length"]}))
        collects = ((d.recv, "recv", _recv_post, ep.post_recv), (d.rkey, "rkey", _rkey, ep.write_rkey),
                    (d.wr, "wr", _wr, ep.post_wr))
        run_sim(d, testbenches=[self.main], processes=[
            *(partial(self.drive, port=p, kind=k, queue=q, payload=f) for p, k, q, f in drives),
            *(partial(self.collect, port=p, name=n, convert=lambda v, c=c: c(meta_dict(v)), act=a)
              for p, n, c, a in collects),
            self.snoop, self.count])
        assert self.strobes == self.model.counters
        return self.model.counters


def bench(num_qps, width, base, bytes_per_qp, max_size, scripts, seed, **kwargs):
    layout = RpingMemory(num_qps, base, bytes_per_qp, max_size, width)
    addr_width = max(4, (layout.end + 4 * layout.align - 1).bit_length() - (width // 8).bit_length() + 1)
    dut = shared(RpingServer, num_qps, width=width, addr_width=addr_width, base=base,
                 bytes_per_qp=bytes_per_qp, max_size=max_size)
    return Bench(dut, layout, scripts, seed, **kwargs)


@pytest.mark.parametrize("width", [64, full(512)])
def test_rping_C10_S4096_V_on_several_qps_at_once(width):
    scripts = {qp: [ClientSpec(4096, 10)] for qp in (0, 2, 3, 5)}
    scripts[1] = [ClientSpec(26, 10), ClientSpec(64, 10)]
    b = bench(6, width, 0, 8192, 4096, scripts, seed=width)
    b.run()
    counts = check_outcomes(b.model, b.ep)
    assert counts["pings"] == 60 and counts["ended"] == 6 and b.taken > 6 * 40


@pytest.mark.parametrize("width, base", [(64, 0), (128, 0x530), full(512, 0x1C0)])
def test_every_size_from_1_to_the_largest_and_one_more(width, base):
    a = max(16, width // 8)
    bytes_per_qp = max(128, 4 * a)
    max_size = bytes_per_qp - 2 * a
    sizes = list(range(1, max_size + 2))
    scripts = {qp: [ClientSpec(size, 2) for size in sizes[qp::5]] for qp in range(5)}
    b = bench(5, width, base, bytes_per_qp, max_size, scripts, seed=7 + width)
    b.run()
    counts = check_outcomes(b.model, b.ep)
    assert counts["pings"] == 2 * max_size and counts["bad_adv"] == 1


BAD = [ClientSpec(4097, 3), ClientSpec(64, 3, adv_size=0), ClientSpec(64, 3, adv_size=2**32 - 1),
       ClientSpec(64, 3, write_adv_size=63), ClientSpec(64, 3, rogue="short"),
       ClientSpec(64, 3, rogue="long"), ClientSpec(64, 3, rogue="badkey"),
       ClientSpec(64, 3, rogue="double")]


@pytest.mark.parametrize("width, seed", [(64, 1), (256, 2), full(64, 3), full(512, 4)])
def test_bad_clients_end_their_service_cleanly_while_the_others_go_on(width, seed):
    scripts = {0: BAD, 1: [ClientSpec(4096, 10)] * 2, 2: BAD[::-1], 3: [ClientSpec(26, 10)] * 3}
    b = bench(4, width, 0, 8192, 4096, scripts, seed)
    b.run()
    assert check_outcomes(b.model, b.ep) == {"pings": 50, "ended": 5, "bad_adv": 10, "bad_status": 4,
                                             "bad_event": 2}


def test_the_largest_and_the_smallest_tables():
    scripts = {0: [ClientSpec(40, 3)], 255: [ClientSpec(96, 3), ClientSpec(1, 2)]}
    b = bench(256, 64, 0, 128, 96, scripts, seed=5, idle=0.1, backpressure=0.1)
    b.run()
    assert check_outcomes(b.model, b.ep)["pings"] == 8
    b = bench(1, 512, 0, 256, 128, {0: [ClientSpec(128, 4), BAD[4], ClientSpec(1, 2)]}, seed=6)
    b.ep.events.append(("open", 1))            # a QP outside the table: taken and dropped
    b.run()
    assert check_outcomes(b.model, b.ep) == {"pings": 6, "ended": 2, "bad_adv": 1, "bad_status": 0,
                                             "bad_event": 0}


class FuzzEndpoint(Endpoint):
    """Events at random instead of a conversation: QPs opened and closed, receive completions
    of any status, length, opcode and work request ID over advertisements of sizes around the
    limits (their bytes written into the slot in pieces before), completions of any ID and
    status, in any order (completions out of their order too). What the block offers is only
    checked against the model (and the stand-in's checks of addresses)."""

    def __init__(self, layout, rng, events, *, mem_bytes):
        super().__init__(layout, {}, rng, mem_bytes=mem_bytes)
        self.left = events
        self.hot = rng.sample(range(layout.num_qps), min(3, layout.num_qps))

    def idle(self):
        return not self.left

    def post_recv(self, p):
        assert (p.addr, p.length) == (self.layout.recv_addr(p.qp), ADV_BYTES), p

    def post_wr(self, wr):
        self._check_local(wr)

    def step(self):
        if not self.left:
            return False
        self.left -= 1
        r = self.rng
        qp = r.choice(self.hot) if r.random() < 0.95 else r.randrange(256)
        if qp < self.layout.num_qps and r.random() < 0.8:
            if not self._queued(qp):
                self._expected(qp)
            return True
        what = r.choices(("open", "close", "recv", "cpl"), (8, 3, 45, 44))[0]
        if what in ("open", "close"):
            self.events.append((what, qp))
        elif what == "cpl":
            wr_id = r.choice([0, 1, 2, 3, 4, 1, 2, 3, r.randrange(1 << 32)])
            status = CplStatus.OK if r.random() < 0.85 else r.choice(list(CplStatus))
            self.cpls.append((qp, wr_id, status))
        elif not any(c["qp"] == qp for c in self.recv_cpls):
            self._recv(qp)
        return True

    def _queued(self, qp):
        return any(e[1] == qp for e in self.events) or any(c[0] == qp for c in self.cpls) or \
            any(c["qp"] == qp for c in self.recv_cpls)

    def _expected(self, qp):
        """The event the model's state of ``qp`` waits for (so that the service gets deep)."""
        s = self.model.qps[qp]
        if s.phase == Phase.OFF:
            self.events.append(("open", qp))
        elif s.phase in (Phase.READING, Phase.WRITING):
            kind = WrKind.GO if s.go_out and self.rng.random() < 0.7 else \
                WrKind.READ if s.phase == Phase.READING else WrKind.WRITE
            self.cpls.append((qp, kind, CplStatus.OK))
        elif s.go_out and self.rng.random() < 0.5:
            self.cpls.append((qp, WrKind.GO, CplStatus.OK))
        else:
            self._recv(qp, good=True)

    def _recv(self, qp, good=False):
        r, lay = self.rng, self.layout
        size = r.choice([0, 1, 2, 3, lay.max_size - 1, lay.max_size, lay.max_size + 1,
                         (1 << 32) - 1, r.randrange(1, lay.max_size + 1)])
        if good:
            size = r.choice([self.model.qps[qp].length, lay.max_size, r.randrange(1, lay.max_size)])
        adv = pack_adv(r.randrange(1 << 64), r.randrange(1 << 32), size % (1 << 32))
        if qp < lay.num_qps:
            cut = sorted(r.sample(range(1, ADV_BYTES), 2))
            for lo, hi in ((0, cut[0]), (cut[0], cut[1]), (cut[1], ADV_BYTES)):
                self._write(lay.recv_addr(qp) + lo, adv[lo:hi])
        ok = good or r.random() < 0.85
        status = RecvStatus.OK if ok else r.choice(list(RecvStatus))
        self.recv_cpls.append({
            "qp": qp, "wr_id": 0 if ok else r.randrange(1 << 32), "status": status,
            "length": ADV_BYTES if ok else r.choice([0, 8, 15, 17, 1 << 31]),
            "opcode": 0 if good or r.random() < 0.9 else 1, "after": self.snooped})


@pytest.mark.parametrize("num_qps, width, seed", [(3, 64, 1), (5, 128, 2), (200, 512, 3),
                                                  full(256, 256, 4), full(1, 64, 5)])
def test_events_at_random_against_the_model(num_qps, width, seed):
    a = max(16, width // 8)
    b = bench(num_qps, width, 8 * a, 8 * a, 6 * a, {}, seed, idle=0.2, backpressure=0.2)
    b.ep = FuzzEndpoint(b.layout, b.rng, 3000, mem_bytes=len(b.ep.mem))
    b.ep.model = b.model
    counts = b.run()
    assert b.taken > 1000 and all(counts.values()), counts


def _make(**kwargs):
    args = {"width": 64, "addr_width": 12, "base": 0, "bytes_per_qp": 128, "max_size": 96,
            **kwargs}
    return lambda: RpingServer(args.pop("num_qps", 4), **args)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"num_qps": 0}, ValueError, "num_qps must be 1..256, not 0"),
    ({"num_qps": 2.0}, TypeError, "num_qps must be an integer"),
    ({"width": 96}, ValueError, "width must be one of"),
    ({"addr_width": 0}, ValueError, "addr_width must be 1..32 bits, not 0"),
    ({"base": "0"}, TypeError, "base must be an integer"),
    ({"base": 8}, ValueError, "base must be a multiple of 16 bytes, not 8"),
    ({"width": 512, "base": 16, "bytes_per_qp": 256}, ValueError, "multiple of 64 bytes"),
    ({"bytes_per_qp": 96}, ValueError, "bytes_per_qp must be a power of two above 32, not 96"),
    ({"bytes_per_qp": 32}, ValueError, "power of two above 32, not 32"),
    ({"max_size": 0}, ValueError, "max_size must be 1..96, not 0"),
    ({"max_size": 97}, ValueError, "max_size must be 1..96, not 97"),
    ({"max_size": True}, TypeError, "max_size must be an integer"),
    ({"addr_width": 5}, ValueError, r"end at byte 0x200, outside local memory \(0x100 bytes\)"),
    ({"base": 0x7F80}, ValueError, r"end at byte 0x8180, outside local memory \(0x8000 bytes\)"),
])
def test_the_parameters_are_checked(kwargs, exc, match):
    raises(exc, match, _make(**kwargs))


def test_the_latency_the_docstring_states():
    """An event taken in cycle t: its receive buffer and R_Key write offered in t + 2, its work
    request once the R_Key write is taken, the next event taken the cycle after the last output
    is; without outputs at t + 2; the counter strobe the cycle after the decision."""
    dut = RpingServer(2, width=64, addr_width=12, base=0, bytes_per_qp=128, max_size=96)
    names = ("opened.ready", "recv_cpl.ready", "cpl.ready", "recv.valid", "rkey.valid",
             "wr.valid", "bad_status")
    seen = []

    def port(name):
        obj = dut
        for part in name.split("."):
            obj = getattr(obj, part)
        return obj

    async def tb(ctx):
        for out in (dut.recv, dut.rkey, dut.wr):
            ctx.set(out.ready, 1)
        ctx.set(dut.adv_w.payload, {"addr": 0, "data": int.from_bytes(pack_adv(5, 6, 7)[:8], "little"),
                                    "be": 0xFF})
        ctx.set(dut.adv_w.valid, 1)
        ctx.set(dut.opened.payload, {"qp": 0, "open": 1})
        ctx.set(dut.opened.valid, 1)
        ctx.set(dut.recv_cpl.payload, {"qp": 0, "length": 16})
        ctx.set(dut.recv_cpl.valid, 1)
        ctx.set(dut.cpl.payload, {"qp": 0, "wr_id": 1, "status": CplStatus.REMOTE_ACCESS.value})
        for _ in range(12):
            _, _, *values = await ctx.tick().sample(*(port(n) for n in names))
            seen.append({n for n, v in zip(names, values, strict=True) if v})
            if "opened.ready" in seen[-1]:
                ctx.set(dut.opened.valid, 0)
                ctx.set(dut.adv_w.payload.addr, 1)
                ctx.set(dut.adv_w.payload.data, int.from_bytes(pack_adv(5, 6, 7)[8:], "little"))
            if "recv_cpl.ready" in seen[-1]:
                ctx.set(dut.recv_cpl.valid, 0)
                ctx.set(dut.cpl.valid, 1)               # the READ failed: the service ends
            if "cpl.ready" in seen[-1]:
                ctx.set(dut.cpl.payload.qp, 1)          # (QP 1 is not in service: no output)

    run_sim(dut, testbenches=[tb])
    assert seen == [{"opened.ready"}, set(), {"recv.valid"},
                    {"recv_cpl.ready"}, set(), {"recv.valid", "rkey.valid"}, {"wr.valid"},
                    {"cpl.ready"}, set(), {"cpl.ready", "bad_status"}, set(), {"cpl.ready"}]
