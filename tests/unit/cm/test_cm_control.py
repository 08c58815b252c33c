"""Connection manager control: random request sequences (those of the whole connection
manager's test) against the model, with the records' answers taken from the model's state, the
QP table writes stalled at random and the reply sender busy for random times."""

import random
from collections import Counter

import pytest

from rocegen.gateware.roce.cm.cm_control import CONTROL_COUNTERS, CmControl
from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.sim.models.cm import cm as M
from rocegen.sim.testing.amaranth_streams import meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.headers import CM
from tests.unit.cm.test_cm import INSIDE, LOCAL_IP, NET, OUTSIDE, Scenario, Sink, ip


class Recorder(Scenario):
    """Scenario that notes, for every datagram, what the connection manager's records answer
    before the model takes it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, frames=False, **kwargs)
        self.inputs = []

    def send(self, payload, src, *, dst=LOCAL_IP, sport=0x4322, dport=M.CM_PORT, error=False):
        m = self.model
        ok = len(payload) == 64 and not error
        req = CM.unpack(payload) if ok else CM.unpack(bytes(64))
        k = (req["rem_qpn"] - QPN_BASE) & ((1 << (m.num_qps - 1).bit_length()) - 1)
        free = m.free()
        known = k < m.num_qps
        self.inputs.append({
            "datagram": {"req": req, "src_ip": ip(src), "dst_ip": ip(dst), "src_port": sport,
                         "dst_port": dport, "length_ok": int(ok)},
            "lookup": {
                "is_open": int(QPN_BASE <= req["rem_qpn"] < QPN_BASE + m.num_qps and m.in_use[k]),
                "owner_ok": int(known and m.owner[k] == ip(src)),
                "state": m.state(k) if known else 0,
                "context": m.context[k] if known else m.reset_context(),
                "any_free": int(bool(free)), "free_idx": free[0] if free else 0}})
        return super().send(payload, src, dst=dst, sport=sport, dport=dport, error=error)


def simulate(num_qps, inputs, *, allow_net, seed, gen_busy):
    rng = random.Random(seed)
    dut = CmControl(num_qps, allow_net=allow_net)
    sinks = {name: Sink(getattr(dut, name), backpressure=0.3, seed=seed + k)
             for k, name in enumerate(("qp_ctl", "qp_psn"))}
    out = {"pulses": [], "records": [], "replies": [], "runs": []}

    async def tb(ctx):
        ctx.set(dut.local_ip, ip(LOCAL_IP))
        ctx.set(dut.gen_busy, gen_busy)
        busy = 0
        for n, x in enumerate(inputs):
            while rng.random() < 0.3:
                await ctx.tick()
            for name, value in x["lookup"].items():
                ctx.set(getattr(dut.lookup, name), value)
            ctx.set(dut.i.payload, x["datagram"])
            ctx.set(dut.i.valid, 1)
            pulses, records, replies, runs = Counter(), [], [], []
            while True:
                await ctx.tick()
                busy = max(0, busy - 1)
                ctx.set(dut.reply_busy, busy > 0)
                for name in CONTROL_COUNTERS:
                    pulses[name] += ctx.get(getattr(dut, name))
                if ctx.get(dut.record.valid):
                    records.append(meta_dict(ctx.get(dut.record.payload)))
                if ctx.get(dut.run.valid):
                    runs.append(meta_dict(ctx.get(dut.run.payload)))
                if ctx.get(dut.reply.valid):
                    replies.append(meta_dict(ctx.get(dut.reply.payload)))
                    busy = rng.randrange(1, 40)
                    ctx.set(dut.reply_busy, 1)
                if ctx.get(dut.i.ready):
                    assert not busy and not ctx.get(dut.qp_ctl.valid) and \
                        not ctx.get(dut.qp_psn.valid), n
                    break
            ctx.set(dut.i.valid, 0)
            out["pulses"].append(pulses)
            out["records"].append(records)
            out["replies"].append(replies)
            out["runs"].append(runs)
        for _ in range(10):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[s.run for s in sinks.values()])
    return out, {name: s.items for name, s in sinks.items()}


@pytest.mark.parametrize("num_qps,allow_net,steps,gen_busy", [
    (4, NET, 250, 0), (3, None, 150, 0), (1, NET, 200, 0), (2, NET, 120, 1)])
def test_random_requests_match_the_model(num_qps, allow_net, steps, gen_busy):
    """``gen_busy`` held high: every run the model starts is refused and counted instead."""
    model = M.ConnectionManagerModel(num_qps, local_ip=ip(LOCAL_IP), allow_net=allow_net)
    sc = Recorder(model, random.Random(num_qps), INSIDE + OUTSIDE if allow_net else INSIDE)
    for _ in range(steps):
        sc.step()
    sc.cleanup()
    out, streams = simulate(num_qps, sc.inputs, allow_net=allow_net, seed=num_qps,
                            gen_busy=gen_busy)
    for n, (x, r) in enumerate(zip(sc.inputs, sc.results)):
        dropped = {"drop_gen"} if gen_busy and r.gen is not None else set()
        assert +out["pulses"][n] == Counter(r.pulses - {"replies"} | dropped), n
        if r.gen is None or gen_busy:
            assert out["runs"][n] == [], n
        else:
            assert out["runs"][n] == [{"qp": r.gen["qp"], "req": x["datagram"]["req"]}], n
        src = x["datagram"]["src_ip"]
        if r.reply is None:
            assert out["replies"][n] == [], n
        else:
            assert out["replies"][n] == [{"fields": r.reply.fields, "src_ip": ip(LOCAL_IP),
                                          "dst_ip": r.reply.dst_ip,
                                          "dst_port": r.reply.dst_port}], n
        if r.context is None:
            assert out["records"][n] == [], n
        else:
            k, context = r.context
            opened = r.psn is not None
            closing = x["datagram"]["req"]["req_type"] == M.REQ_CLOSE_QP
            assert out["records"][n] == [{"qp": k, "owner": src, "context": context,
                                          "take": int(opened), "release": int(closing)}], n
    assert streams["qp_ctl"] == [{"qp": k, "context": c} for k, c in
                                 (r.context for r in sc.results if r.context is not None)]
    assert streams["qp_psn"] == [{"qp": k, "psn": p} for k, p in
                                 (r.psn for r in sc.results if r.psn is not None)]
    assert sum(r.gen is not None for r in sc.results) > 0


def test_parameters_are_checked():
    raises(ValueError, "1..256", lambda: CmControl(0))
    raises(ValueError, "port", lambda: CmControl(4, port=0))
    raises(ValueError, "host bits", lambda: CmControl(4, allow_net=("10.1.0.1", 16)))
    raises(ValueError, "default_pmtu", lambda: CmControl(4, default_pmtu=100))
    raises(TypeError, "reads must be a bool", lambda: CmControl(4, reads=None))
    raises(ValueError, "max_rd_atomic must be 1..16", lambda: CmControl(4, max_rd_atomic=0))
    raises(ValueError, "rd_depth must be 0", lambda: CmControl(4, reads=True, rd_depth=8))
