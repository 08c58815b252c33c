"""The IB CM's QPs (:class:`IbCmQps`) against a cycle-by-cycle Python model of its docstring:
random ``qp_set`` / ``qp_free`` / ``qp_req`` offered at once and in any order (so that the
precedence shows), backpressure on ``qp_grant``, ``qp_ctl``, ``qp_psn`` and ``rd_limit``, the
other manager's QPs (``others``) changing, ``pool_idle`` randomly low. Every cycle the model
says which handshakes happen, what each output offers and which QPs are ``held``; the pool is
checked to be full and empty, and the parameters to be validated."""

import random

import pytest
from amaranth.hdl import Fragment

from rocegen.gateware.roce.ibcm.ibcm_qps import IbCmQps
from rocegen.gateware.roce.layouts import QP_CONTEXT, QPN_BASE, QpState
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from tests.tiers import full

#: The outputs of writes, and the model's names for them.
WRITES = {"ctl": "qp_ctl", "psn": "qp_psn", "lim": "rd_limit", "svc0": ("service", 0),
          "svc1": ("service", 1), "svc2": ("service", 2), "flush": "rq_flush"}

#: The services' ports in the runs with them, and another port.
SERVICE_PORTS, OTHER_PORT = (7174, 7471), 7175


def port_of(dut, name):
    """The block's output ``name`` of :data:`WRITES`, or None when it has none."""
    if isinstance(name, tuple):
        ports = getattr(dut, name[0], None)
        return ports[name[1]] if ports is not None and name[1] < len(ports) else None
    return getattr(dut, name, None)


def zero_context(state):
    """A context all zero in ``state``."""
    ctx = {name: 0 for name, _ in QP_CONTEXT}
    ctx["state"] = state.value
    return ctx


class QpsModel:
    """:class:`IbCmQps` as its docstring describes it, cycle by cycle. :meth:`cycle` takes the
    inputs of a cycle and returns the outputs the block must show in it."""

    def __init__(self, n, *, ack_every_log2, reads, max_rd_atomic, service_ports=(),
                 service_active=None, max_timeout=0):
        self.n, self.ack_every_log2 = n, ack_every_log2
        self.reads, self.max_rd_atomic = reads, max_rd_atomic
        self.service_ports = tuple(service_ports)
        self.service_active = service_active or (False,) * len(self.service_ports)
        self.max_timeout = max_timeout
        self.held = set()
        # with service_ports: the QPs whose work is service j's
        self.served = [set() for _ in self.service_ports]
        self.serving = set()        # ... and one opened for it in this cycle
        self.mode = "idle"          # idle, set, free, grant
        self.offered = {}           # the writes still offered (name -> payload)
        self.grant = None
        self.seen = {k: 0 for k in ("open", "close", "free", "grant", "none_free", "passed_by",
                                    "precedence", "not_idle", "stalled", "free_waits")}
        if self.service_ports:
            self.seen.update({"served_open": 0, "served_close": 0, "served_free": 0})

    def index(self, qpn):
        return (qpn - QPN_BASE) % (1 << max(1, (self.n - 1).bit_length()))

    def open_writes(self, st, tclass):
        """The writes of an open: context, PSN and (``reads``) the READ limit."""
        k = self.index(st["qpn"])
        ctx = {**zero_context(QpState.RTS), "peer_ip": st["peer_ip"],
               "peer_qpn": st["peer_qpn"], "pmtu_log2": st["path_mtu"] + 7,
               "udp_sport": 0xC000 | k, "dscp": tclass["dscp"], "ecn": tclass["ecn"],
               "ack_every_log2": self.ack_every_log2,
               "timeout": st["ack_timeout"] if not self.max_timeout or
               0 < st["ack_timeout"] <= self.max_timeout else self.max_timeout,
               "retry_cnt": st["retry_count"], "rnr_retry": st["rnr_retry_count"],
               "rkey": st["rkey"], "base_va": st["base"]}
        w = {"ctl": {"qp": k, "context": ctx},
             "psn": {"qp": k, "psn": st["psn"], "epsn": st["epsn"]}}
        if self.reads:
            w["lim"] = {"qp": k, "limit": min(st["initiator_depth"], self.max_rd_atomic)}
        return w

    def decide(self, inp, out):
        """An idle cycle: the first of ``qp_set``, ``qp_free``, ``qp_req`` (with
        ``pool_idle``) offered is taken on."""
        busy = self.held | {k for k in range(self.n) if inp["others"] >> k & 1}
        if inp["set"] is not None:
            st = inp["set"]
            self.seen["precedence"] += inp["free"] is not None or inp["req"]
            self.seen["open" if st["open"] else "close"] += 1
            self.offered = (self.open_writes(st, inp["tclass"]) if st["open"] else
                            {"ctl": {"qp": self.index(st["qpn"]),
                                     "context": zero_context(QpState.ERROR)}})
            self.service(st["qpn"], st["open"], (st.get("port"), st.get("active")), "close")
            self.mode = "set"
        elif inp["free"] is not None:
            self.seen["precedence"] += inp["req"]
            self.offered = {"ctl": {"qp": self.index(inp["free"]),
                                    "context": zero_context(QpState.RESET)}}
            self.service(inp["free"], 0, None, "free")
            self.mode = "free"
        elif inp["req"] and not inp["pool_idle"]:
            self.seen["not_idle"] += 1
        elif inp["req"]:
            out["req_ready"] = 1
            free = [k for k in range(self.n) if k not in busy]
            self.grant = {"ok": int(bool(free)), "qpn": QPN_BASE + free[0] if free else None}
            self.seen["grant" if free else "none_free"] += 1
            self.seen["passed_by"] += bool(free) and any(k in busy for k in range(free[0]))
            if free:
                self.held.add(free[0])
                for served in self.served:
                    served.discard(free[0])
            self.mode = "grant"

    def service(self, qpn, is_open, port, why):
        """With ``service_ports``: an open for one (``port``: the port and side) is told
        (``svcJ``) and the QP served from the next cycle; a close or give-back of a served QP
        is told and its receive queue flushed."""
        k = self.index(qpn)
        for j, p in enumerate(zip(self.service_ports, self.service_active, strict=True)):
            if is_open and port == (p[0], bool(p[1])):
                self.offered.update({f"svc{j}": {"qp": k, "open": 1}, "flush": k})
                self.serving.add((j, k))
                self.seen["served_open"] += 1
            elif not is_open and k in self.served[j]:
                self.offered.update({f"svc{j}": {"qp": k, "open": 0}, "flush": k})
                self.seen[f"served_{why}"] += 1

    def cycle(self, inp):
        """The outputs in a cycle with inputs ``inp`` (the writes' and the grant's ``ready``
        included); the state moves on to the next cycle."""
        out = {"held": sum(1 << k for k in self.held), "req_ready": 0, "free_ready": 0,
               "served": [sum(1 << k for k in s) for s in self.served],
               "set_ready": 0, "grant": None, **{w: None for w in WRITES}}
        if self.mode == "idle":
            self.decide(inp, out)
        elif self.mode == "grant":
            out["grant"] = self.grant
            if inp["grant_ready"]:
                self.mode = "idle"
        elif self.offered:
            # (the service's event only once its flush is taken)
            shown = {w: p for w, p in self.offered.items() if not w.startswith("svc") or
                     "flush" not in self.offered}
            out.update(shown)
            self.seen["stalled"] += any(not inp[f"{w}_ready"] for w in shown)
            self.offered = {w: p for w, p in self.offered.items()
                            if w not in shown or not inp[f"{w}_ready"]}
        elif self.mode == "free" and not inp["pool_idle"]:
            self.seen["free_waits"] += 1    # a QP is given back only with pool_idle
        else:                           # the last write was taken: the request is done
            out[f"{self.mode}_ready"] = 1
            if self.mode == "free":
                self.held.discard(self.index(inp["free"]))
                self.seen["free"] += 1
            self.mode = "idle"
        # (an open's QP is served from the next cycle, whatever ``others`` says)
        others = {k for k in range(self.n) if inp["others"] >> k & 1}
        self.served = [(s - others) | {k for i, k in self.serving if i == j}
                       for j, s in enumerate(self.served)]
        self.serving = set()
        return out


class Stimulus:
    """The inputs of each cycle, random: requests offered (each held until taken), ``others``,
    ``pool_idle``, ``tclass`` and the outputs' ``ready``."""

    def __init__(self, rng, n, *, backpressure):
        self.rng, self.n, self.bp = rng, n, backpressure
        self.set = self.free = None
        self.req = False
        self.others = 0
        self.tclass = {"dscp": 0, "ecn": 0, "pcp": 0}

    def random_set(self, held):
        rng = self.rng
        k = rng.choice(sorted(held)) if held and rng.random() < 0.8 else rng.randrange(self.n)
        return {"open": int(rng.random() < 0.6), "qpn": QPN_BASE + k,
                "peer_ip": rng.getrandbits(32), "peer_qpn": rng.getrandbits(24),
                "psn": rng.getrandbits(24), "path_mtu": rng.randrange(1, 6),
                "ack_timeout": rng.getrandbits(5), "retry_count": rng.getrandbits(3),
                "rnr_retry_count": rng.getrandbits(3), "responder_resources": rng.getrandbits(8),
                "initiator_depth": rng.choice([0, 1, 4, 16, 17, rng.getrandbits(8)]),
                "port": rng.choice([*SERVICE_PORTS, OTHER_PORT]), "epsn": rng.getrandbits(24),
                "rkey": rng.getrandbits(32) * (rng.random() < 0.5), "base": rng.getrandbits(64),
                "active": rng.getrandbits(1)}

    def random_others(self):
        rng, n = self.rng, self.n
        density = rng.choice([0.0, 0.2, 0.5, 0.9, 1.0])
        return sum(1 << k for k in range(n) if rng.random() < density)

    def next(self, held):
        """This cycle's inputs (``held``: the QPs the model holds)."""
        rng = self.rng
        if self.set is None and rng.random() < 0.08:
            self.set = self.random_set(held)
        if self.free is None and held and rng.random() < 0.1:
            self.free = QPN_BASE + rng.choice(sorted(held))
        if not self.req and rng.random() < 0.25:
            self.req = True
        if rng.random() < 0.05:
            # (as the pool has it: the other manager holds none of this block's QPs)
            self.others = self.random_others() & ~sum(1 << k for k in held)
        if rng.random() < 0.02:
            self.tclass = {"dscp": rng.getrandbits(6), "ecn": rng.getrandbits(2),
                           "pcp": rng.getrandbits(3)}
        inp = {"set": self.set, "free": self.free, "req": self.req, "others": self.others,
               "pool_idle": int(rng.random() >= 0.3), "tclass": self.tclass,
               "grant_ready": int(rng.random() >= self.bp)}
        inp.update({f"{w}_ready": int(rng.random() >= self.bp) for w in WRITES})
        return inp

    def taken(self, out):
        """Drop what the block took in this cycle."""
        if out["set_ready"]:
            self.set = None
        if out["free_ready"]:
            self.free = None
        if out["req_ready"]:
            self.req = False


def drive(ctx, dut, inp):
    """Put the inputs ``inp`` of a cycle on ``dut``."""
    for name, key in (("qp_set", "set"), ("qp_free", "free")):
        port = getattr(dut, name)
        ctx.set(port.valid, inp[key] is not None)
        if inp[key] is not None:
            ctx.set(port.payload, inp[key])
    ctx.set(dut.qp_req.valid, inp["req"])
    ctx.set(dut.others, inp["others"])
    ctx.set(dut.pool_idle, inp["pool_idle"])
    ctx.set(dut.tclass, inp["tclass"])
    ctx.set(dut.qp_grant.ready, inp["grant_ready"])
    for w, name in WRITES.items():
        if port_of(dut, name) is not None:
            ctx.set(port_of(dut, name).ready, inp[f"{w}_ready"])


def observe(ctx, dut):
    """The outputs of ``dut`` in this cycle, as the model states them."""
    def offered(port):
        return meta_dict(ctx.get(port.payload)) if ctx.get(port.valid) else None
    out = {"held": ctx.get(dut.held), "req_ready": ctx.get(dut.qp_req.ready),
           "free_ready": ctx.get(dut.qp_free.ready), "set_ready": ctx.get(dut.qp_set.ready),
           "grant": offered(dut.qp_grant),
           "served": [ctx.get(s) for s in dut.served] if hasattr(dut, "served") else []}
    if out["grant"] is not None and not out["grant"]["ok"]:
        out["grant"]["qpn"] = None          # none free: no QP named

    out.update({w: offered(port_of(dut, name)) if port_of(dut, name) is not None else None
                for w, name in WRITES.items()})
    return out


def run_random(n, cycles, seed, *, reads, max_rd_atomic=16, ack_every_log2=4,
               backpressure=0.4, service_ports=(), service_active=None, max_timeout=0):
    """``cycles`` cycles of random inputs; the block's outputs must be the model's in each.
    Returns the model (what it saw)."""
    dut = IbCmQps(n, reads=reads, max_rd_atomic=max_rd_atomic, ack_every_log2=ack_every_log2,
                  service_ports=service_ports, service_active=service_active,
                  max_timeout=max_timeout)
    model = QpsModel(n, ack_every_log2=ack_every_log2, reads=reads, max_rd_atomic=max_rd_atomic,
                     service_ports=service_ports, service_active=service_active,
                     max_timeout=max_timeout)
    stim = Stimulus(random.Random(seed), n, backpressure=backpressure)

    async def tb(ctx):
        for c in range(cycles):
            inp = stim.next(model.held)
            drive(ctx, dut, inp)
            got = observe(ctx, dut)
            want = model.cycle(inp)
            assert got == want, (c, inp, got, want)
            stim.taken(want)
            await ctx.tick()

    run_sim(dut, testbenches=[tb], deadline_cycles=cycles + 10)
    return model


#: services on both sides: rping's port served as the peer's (the rping server) and as ours
#: (the rping client: connections the FPGA asked for, to the peer's rping port)
BOTH = ((*SERVICE_PORTS, SERVICE_PORTS[0]), (False, False, True))


@pytest.mark.parametrize("n, reads, max_rd, ack, cycles, service, max_timeout", [
    (1, False, 16, 0, 3000, SERVICE_PORTS[:1], 14),
    (5, True, 4, 4, 4000, BOTH, 14),
    (256, True, 16, 7, 1500, (), 10),
    full(5, False, 16, 2, 20000, SERVICE_PORTS[:1], 31),
    full(256, True, 1, 5, 8000, SERVICE_PORTS, 0),
])
def test_random_requests_match_the_model(n, reads, max_rd, ack, cycles, service, max_timeout):
    """Grants (the lowest QP neither manager holds, only with ``pool_idle``; none free: ``ok``
    low), opens (context, PSN, READ limit), closes (ERROR), frees (RESET, the QP free again,
    only with ``pool_idle``),
    the precedence ``qp_set`` > ``qp_free`` > ``qp_req``, ``ready`` only once the writes are
    taken, and ``held`` as the model has them, cycle by cycle; the run covers each case. A
    service's QPs are those opened for its port on its side."""
    ports, active = service if service is BOTH else (service, None)
    model = run_random(n, cycles, seed=n + cycles, reads=reads, max_rd_atomic=max_rd,
                       ack_every_log2=ack, service_ports=ports, service_active=active,
                       max_timeout=max_timeout)
    seen = model.seen
    assert all(v > 0 for k, v in seen.items() if n > 1 or k != "passed_by"), seen
    assert seen["grant"] >= (n if n < 256 else 20), seen


def test_the_whole_pool_is_granted_and_given_back():
    """With ``others`` zero, 256 requests get QPs 0..255 in order, the next none; each
    freed QP is granted again; at the end nothing is held."""
    n = 256
    dut = IbCmQps(n)

    async def handshake(ctx, port, payload=None):
        if payload is not None:
            ctx.set(port.payload, payload)
        ctx.set(port.valid, 1)
        await ctx.tick().until(port.ready)
        ctx.set(port.valid, 0)

    async def grant(ctx):
        await handshake(ctx, dut.qp_req)
        (g,) = await ctx.tick().sample(dut.qp_grant.payload).until(dut.qp_grant.valid)
        return (g.ok, g.qpn)

    async def tb(ctx):
        ctx.set(dut.pool_idle, 1)
        for p in (dut.qp_grant, dut.qp_ctl, dut.qp_psn):
            ctx.set(p.ready, 1)
        assert [await grant(ctx) for _ in range(n)] == [(1, QPN_BASE + k) for k in range(n)]
        assert ctx.get(dut.held) == (1 << n) - 1
        assert (await grant(ctx))[0] == 0
        for k in (200, 3, 255):
            await handshake(ctx, dut.qp_free, QPN_BASE + k)
            assert await grant(ctx) == (1, QPN_BASE + k)
        for k in range(n):
            await handshake(ctx, dut.qp_free, QPN_BASE + k)
        await ctx.tick()
        assert ctx.get(dut.held) == 0

    run_sim(dut, testbenches=[tb], deadline_cycles=20_000)


def test_parameters_are_validated():
    raises(ValueError, "num_qps", lambda: IbCmQps(0))
    raises(ValueError, "num_qps", lambda: IbCmQps(257))
    raises(TypeError, "num_qps", lambda: IbCmQps(4.0))
    raises(ValueError, "ack_every_log2", lambda: IbCmQps(4, ack_every_log2=8))
    raises(TypeError, "ack_every_log2", lambda: IbCmQps(4, ack_every_log2=True))
    raises(TypeError, "reads", lambda: IbCmQps(4, reads=1))
    raises(ValueError, "max_timeout", lambda: IbCmQps(4, max_timeout=32))
    raises(ValueError, "distinct", lambda: IbCmQps(4, service_ports=(1, 1)))
    raises(ValueError, "distinct", lambda: IbCmQps(4, service_ports=(1, 1),
                                                   service_active=(True, True)))
    raises(ValueError, "service_active must be 2 bools",
           lambda: IbCmQps(4, service_ports=(1, 2), service_active=(True,)))
    raises(ValueError, "each service port", lambda: IbCmQps(4, service_ports=(70000,)))
    raises(ValueError, "max_rd_atomic", lambda: IbCmQps(4, reads=True, max_rd_atomic=0))
    raises(ValueError, "max_rd_atomic", lambda: IbCmQps(4, reads=True, max_rd_atomic=17))
    plain, reading = IbCmQps(4), IbCmQps(4, reads=True)
    assert not hasattr(plain, "rd_limit") and hasattr(reading, "rd_limit")
    Fragment.get(plain, None)
    Fragment.get(reading, None)
