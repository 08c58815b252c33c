"""The completion tracker's parts, each against a Python reference model: the acknowledged PSN
per QP (:class:`CplAckState`), the output stage (:class:`CplOutput`) and the round robin of the
scan (:class:`CplPick`), with random traffic and idle cycles."""

import random

import pytest

from rocegen.gateware.roce.layouts import CplStatus
from rocegen.gateware.roce.requester.completer_acks import CplAckState
from rocegen.gateware.roce.requester.completer_out import OUT_DEPTH, CplOutput
from rocegen.gateware.roce.requester.completer_pick import CplPick
from rocegen.sim.models.requester.completer import ahead
from rocegen.sim.testing.harness import raises, run_sim

PSN_MOD = 1 << 24
PULSES = ("acks", "stale_acks", "seq_naks", "rnr_naks", "naks")


class AckModel:
    """The acknowledged PSN of each QP, one cycle at a time: an event offered in cycle t is
    applied in cycle t (its pulses then; its PSN read from t + 1), after a ``forget`` of the
    same cycle."""

    def __init__(self, n):
        self.n = n
        self.acked = [0] * n
        self.has = [False] * n

    def cycle(self, offer, forget_qp):
        """One cycle: returns (pulses, moved QP or None) of the event applied in it."""
        pulses, moved = set(), None
        ev = offer if offer and offer[0] < self.n else None
        if forget_qp is not None:
            self.has[forget_qp] = False
        if ev is not None:
            qp, syn, psn = ev
            cls = syn >> 5
            if cls == 0:
                pulses.add("acks")
                new = psn
            elif syn == 0x60:
                pulses.add("seq_naks")
                new = (psn - 1) % PSN_MOD
            else:
                pulses.add("rnr_naks" if cls == 1 else "naks")
                new = None
            if new is not None and (not self.has[qp] or ahead(new, self.acked[qp])):
                self.acked[qp], self.has[qp], moved = new, True, qp
            elif cls == 0:
                pulses.add("stale_acks")
        return pulses, moved


@pytest.mark.parametrize("num_qps, seed", [(1, 1), (3, 2), (8, 3)])
def test_ack_state_against_model(num_qps, seed):
    rng = random.Random(seed)
    dut = CplAckState(num_qps)
    model = AckModel(num_qps)
    seen = {"moved": 0, "stale_acks": 0, "forget": 0}

    def event():
        qp = rng.randrange(num_qps + (1 if rng.random() < 0.1 else 0))
        base = model.acked[qp] if qp < num_qps else 0
        psn = (base + rng.choice([-3, -1, 0, 0, 1, 1, 2, 5, 1 << 23, (1 << 23) + 1])) % PSN_MOD
        syn = rng.choice([0x00, 0x1F, 0x1F, 0x1F, 0x60, 0x60, 0x21, 0x61, 0x45])
        return qp, syn, psn

    async def tb(ctx):
        for _ in range(1500):
            offer = event() if rng.random() < 0.7 else None
            forget = rng.randrange(num_qps) if rng.random() < 0.08 else None
            post_qp = forget if forget is not None else rng.randrange(num_qps)
            scan_qp = rng.randrange(num_qps)
            ctx.set(dut.ack.valid, offer is not None)
            if offer is not None:
                ctx.set(dut.ack.payload, {"qp": offer[0], "syndrome": offer[1], "psn": offer[2],
                                          "msn": 0})
            ctx.set(dut.forget, forget is not None)
            ctx.set(dut.post_qp, post_qp)
            ctx.set(dut.scan_qp, scan_qp)
            # the reads and the bits before this cycle's changes
            has = sum(1 << q for q in range(num_qps) if model.has[q])
            assert ctx.get(dut.has) == has
            for port, qp in ((dut.post_acked, post_qp), (dut.scan_acked, scan_qp)):
                if model.has[qp]:
                    assert ctx.get(port) == model.acked[qp]
            assert ctx.get(dut.busy) == (offer is not None and offer[0] < num_qps)
            pulses, moved = model.cycle(offer, forget)
            got = {name for name in PULSES if ctx.get(getattr(dut, name))}
            assert got == pulses
            assert ctx.get(dut.moved) == (0 if moved is None else 1 << moved)
            seen["moved"] += moved is not None
            seen["stale_acks"] += "stale_acks" in pulses
            seen["forget"] += forget is not None
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert seen["moved"] > 100 and seen["stale_acks"] > 50 and seen["forget"] > 50


@pytest.mark.parametrize("bad_depth, seed", [(1, 4), (4, 5), (16, 6)])
def test_output_against_model(bad_depth, seed):
    """Scan completions offered only when ``room`` allowed the pick in the cycle before; every
    completion leaves ``cpl`` once, the scan's and the bad ones each in order; ``bad_full`` is
    ``~bad.ready``; a bad completion refused when its queue is full is the only loss."""
    rng = random.Random(seed)
    dut = CplOutput(bad_depth)
    got, scan_sent, bad_sent = [], [], []
    stats = {"bad_refused": 0, "no_room": 0}

    async def tb(ctx):
        picked = False              # the scan picked an entry in the cycle before
        k = 0
        for cycle in range(3000):
            burst = (cycle // 200) % 2      # phases with and without backpressure
            ctx.set(dut.cpl.ready, rng.random() < (0.3 if burst else 0.9))
            scan = picked and rng.random() < 0.8
            ctx.set(dut.scan_busy, picked)
            ctx.set(dut.scan.valid, scan)
            if scan:
                k += 1
                scan_id = k
                ctx.set(dut.scan.payload, {"wr_id": k, "qp": 1, "status": CplStatus.OK, "src": 0})
            bad = rng.random() < (0.6 if burst else 0.2)
            ctx.set(dut.bad.valid, bad)
            if bad:
                k += 1
                bad_id = k
                ctx.set(dut.bad.payload, {"wr_id": k, "qp": 200, "status": CplStatus.BAD_QP,
                                          "src": 1})
            assert ctx.get(dut.bad_full) == (not ctx.get(dut.bad.ready))
            want_pick = rng.random() < 0.7
            may = ctx.get(dut.room) and not (picked and ctx.get(dut.bad_waiting))
            stats["no_room"] += want_pick and not ctx.get(dut.room)
            if scan:
                scan_sent.append(scan_id)
            if bad:
                if ctx.get(dut.bad.ready):
                    bad_sent.append(bad_id)
                else:
                    stats["bad_refused"] += 1
            if ctx.get(dut.cpl.valid) and ctx.get(dut.cpl.ready):
                got.append(ctx.get(dut.cpl.payload.wr_id))
            picked = want_pick and may
            await ctx.tick()
        ctx.set(dut.scan.valid, 0)
        ctx.set(dut.scan_busy, 0)
        ctx.set(dut.bad.valid, 0)
        ctx.set(dut.cpl.ready, 1)
        for _ in range(bad_depth + 2 * OUT_DEPTH + 4):
            if ctx.get(dut.cpl.valid):
                got.append(ctx.get(dut.cpl.payload.wr_id))
            await ctx.tick()
        assert not ctx.get(dut.pending)

    run_sim(dut, testbenches=[tb])
    assert sorted(got) == sorted(scan_sent + bad_sent)
    assert [x for x in got if x in set(scan_sent)] == scan_sent
    assert [x for x in got if x in set(bad_sent)] == bad_sent
    assert stats["no_room"] > 20 and stats["bad_refused"] > 5


@pytest.mark.parametrize("num_qps, seed", [(1, 7), (5, 8), (16, 9)])
def test_pick_against_model(num_qps, seed):
    rng = random.Random(seed)
    dut = CplPick(num_qps)

    async def tb(ctx):
        last = None
        for _ in range(800):
            eligible = rng.getrandbits(num_qps) if rng.random() < 0.8 else 0
            enable = rng.random() < 0.7
            ctx.set(dut.eligible, eligible)
            ctx.set(dut.enable, enable)
            order = list(range(num_qps)) if last is None else \
                [q for q in range(last + 1, num_qps)] + list(range(last + 1))
            first = next((q for q in order if eligible >> q & 1), None)
            assert ctx.get(dut.pick) == (enable and first is not None)
            if first is not None:
                assert ctx.get(dut.chosen) == 1 << first and ctx.get(dut.index) == first
                if enable:
                    last = first
            else:
                assert ctx.get(dut.chosen) == 0
            await ctx.tick()

    run_sim(dut, testbenches=[tb])


def test_parameters_are_validated():
    raises(ValueError, "num_qps must be 1..256", lambda: CplAckState(0))
    raises(TypeError, "num_qps must be an integer", lambda: CplAckState(2.0))
    raises(ValueError, "num_qps must be 1..256", lambda: CplPick(257))
    raises(ValueError, "bad_depth must be a power of two", lambda: CplOutput(3))
    raises(TypeError, "bad_depth must be an integer", lambda: CplOutput(True))
