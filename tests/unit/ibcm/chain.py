"""The IB CM's blocks in a row for the tests (receiver, passive side, reply builder:
``IbCmMads``); a process that adds up counter strobes, one that serves the passive side's QP
requests from a :class:`QpPool`, and one that records, cycle by cycle, what the passive side
does."""

from rocegen.gateware.roce.ibcm.ibcm_layouts import QP_SET
from rocegen.gateware.roce.ibcm.ibcm_mads import IbCmMads
from rocegen.gateware.roce.ibcm.ibcm_passive import COUNTERS

#: The blocks in a row, as the tests call them.
Chain = IbCmMads


def counter_process(strobes, counts):
    """A process adding up, in ``counts``, the strobes of ``strobes`` (name -> signal)."""
    names = list(strobes)

    async def run(ctx):
        async for _, _, *values in ctx.tick().sample(*(strobes[n] for n in names)):
            for name, v in zip(names, values):
                counts[name] += v
    return run


def pool_process(dut, pool, rng, *, backpressure=0.0, delay=0, sets=None):
    """A process answering ``dut.qp_req`` on ``dut.qp_grant`` from ``pool`` (after 0..``delay``
    cycles; ``qp_req.ready`` low with chance ``backpressure``), giving ``dut.qp_free``'s QPs
    back to it and taking ``dut.qp_set`` (``ready`` low with chance ``backpressure``; each
    taken appended to ``sets`` as a dict, when given)."""
    async def run(ctx):
        pending, wait = None, 0
        ctx.set(dut.qp_free.ready, 1)
        while True:
            req_ready = pending is None and rng.random() >= backpressure
            giving = pending is not None and wait == 0
            set_ready = rng.random() >= backpressure
            ctx.set(dut.qp_req.ready, req_ready)
            ctx.set(dut.qp_grant.valid, giving)
            ctx.set(dut.qp_set.ready, set_ready)
            if giving:
                ctx.set(dut.qp_grant.payload, pending)
            _, _, req_valid, grant_ready, free_valid, freed, set_valid, qp_set = \
                await ctx.tick().sample(dut.qp_req.valid, dut.qp_grant.ready,
                                        dut.qp_free.valid, dut.qp_free.payload,
                                        dut.qp_set.valid, dut.qp_set.payload)
            if set_valid and set_ready and sets is not None:
                sets.append({f: getattr(qp_set, f) for f in QP_SET.members})
            if giving and grant_ready:
                pending = None
            elif pending is not None:
                wait = max(wait - 1, 0)
            if req_ready and req_valid:
                q = pool.allocate()
                pending = {"ok": int(q is not None), "qpn": q or 0}
                wait = rng.randrange(delay + 1)
            if free_valid:
                pool.free(freed)
    return run


class Watch:
    """A process recording what the passive side of a :class:`Chain` does, by cycle (counted
    from 0, as its tick counter counts): ``offers``, the cycle each record is first offered to
    it; ``closes`` and ``connects``, the cycle each disconnect and connect is; ``sent``, the
    cycles its ``o`` moves; ``frees``, ``(cycle, qpn)`` of ``qp_free``; ``data``,
    ``(cycle, qpn)`` of ``data_seen``; ``strobes``, the cycles of each counter strobe;
    ``busy``, per cycle, whether a record, a disconnect or a connect is offered or a MAD or a
    QP waits to leave (the cycles the background scan does not run, but for its own actions'
    reads); ``cycle``, the cycles seen so far."""

    def __init__(self, dut):
        self.dut = dut
        self.offers, self.sent, self.frees, self.data, self.busy = [], [], [], [], []
        self.closes, self.connects = [], []
        self.strobes = {name: [] for name in COUNTERS}
        self.cycle = 0

    async def run(self, ctx):
        cm = self.dut.cm
        ports = [cm.i.valid, cm.i.ready, cm.o.valid, cm.o.ready, cm.qp_free.valid,
                 cm.qp_free.ready, cm.qp_free.payload, cm.data_seen.valid, cm.data_seen.payload,
                 cm.disconnect.valid, cm.disconnect.ready, cm.connect.valid, cm.connect.ready,
                 *(getattr(cm, name) for name in COUNTERS)]
        held = held_close = held_connect = False
        async for _, _, iv, ir, ov, o_r, fv, fr, fq, dv, dq, cv, cr, nv, nr, *strobes in \
                ctx.tick().sample(*ports):
            c = self.cycle
            if iv and not held:
                self.offers.append(c)
            if cv and not held_close:
                self.closes.append(c)
            if nv and not held_connect:
                self.connects.append(c)
            held, held_close, held_connect = iv and not ir, cv and not cr, nv and not nr
            if ov and o_r:
                self.sent.append(c)
            if fv and fr:
                self.frees.append((c, fq))
            if dv:
                self.data.append((c, dq))
            for name, v in zip(COUNTERS, strobes):
                if v:
                    self.strobes[name].append(c)
            self.busy.append(bool(iv or ov or fv or cv or nv))
            self.cycle += 1

    def counts(self):
        return {name: len(cycles) for name, cycles in self.strobes.items()}
