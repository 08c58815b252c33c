"""The READ table (:class:`ReadTrack`) against the table of the READ requester's model
(:mod:`rocegen.sim.models.read.read_requester`): random issues (new READs, reissues from inside a
READ or from its first PSN, adds to a full QP or one outside the table), lookups with their
advance/retire, flushes and per-QP limits (raised, lowered below the READs outstanding,
clipped), several in one cycle; every lookup's view, the ``full`` and ``busy`` vectors in every
cycle and every ``overflow`` pulse are compared with the model's. Directed cases of the limit, worked out
by hand."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import UnusedElaboratable

from rocegen.gateware.roce.read.read_track import ReadTrack
from rocegen.sim.models.read.read_requester import PMTUS, PSN_MOD, ReadRequesterModel
from rocegen.sim.testing.harness import raises, run_sim
from tests.tiers import full


def _length(rng, pmtu):
    r = rng.random()
    if r < 0.1:
        return 0
    if r < 0.2:
        return rng.choice([1, pmtu - 1, pmtu, pmtu + 1, 2 * pmtu])
    if r < 0.25:
        return rng.randrange(1 << 31)
    return rng.randint(1, 5 * pmtu)


class Scheduler:
    """Stands in for the scheduler: new READs with consecutive PSNs per QP (sometimes a gap of
    PSNs, as if WRITEs went between), reissues of outstanding READs."""

    def __init__(self, rng, model, num_qps):
        self.rng, self.model = rng, model
        self.num_qps = num_qps
        self.next_psn = [rng.choice([rng.randrange(PSN_MOD), PSN_MOD - 3]) for _ in range(num_qps)]
        self.wr_id = 0

    def issue(self):
        rng, model = self.rng, self.model
        qp = rng.randrange(self.num_qps + (1 if rng.random() < 0.05 else 0))
        if qp < self.num_qps and model.outstanding(qp) and rng.random() < 0.3:
            r = rng.choice(model.outstanding(qp))
            k = rng.choice([0, rng.randrange(r.npsn)])
            return {"qp": qp, "new": 0, "wr_id": r.wr_id, "local_addr": r.local_addr,
                    "length": r.length, "first": r.first, "psn": (r.first + k) % PSN_MOD,
                    "pmtu_log2": r.pmtu.bit_length() - 1, "va": r.remote_va}
        pmtu = rng.choice(PMTUS)
        length = _length(rng, pmtu)
        first = self.next_psn[qp % self.num_qps]
        self.next_psn[qp % self.num_qps] = (first + max(1, -(-length // pmtu)) +
                                            rng.choice([0, 0, 1, 5])) % PSN_MOD
        self.wr_id += 1
        return {"qp": qp, "new": 1, "wr_id": self.wr_id, "local_addr": rng.getrandbits(32),
                "length": length, "first": first, "psn": first,
                "pmtu_log2": pmtu.bit_length() - 1, "va": rng.getrandbits(64)}


def apply_issue(model, rec):
    return model.issue(rec["qp"], wr_id=rec["wr_id"], local_addr=rec["local_addr"],
                       length=rec["length"], first=rec["first"], pmtu=1 << rec["pmtu_log2"],
                       new=bool(rec["new"]), psn=rec["psn"], remote_va=rec["va"])


def check_view(got, want, where):
    if want is None:
        assert not got.has, f"{where}: the table shows a READ the model has not"
        return
    head = want["head"]
    e = got.entry
    assert got.has, f"{where}: no READ shown, the model has {head}"
    assert (int(e.wr_id), int(e.local_addr), int(e.length), int(e.first), int(e.last_idx),
            int(e.pmtu_log2)) == (head.wr_id, head.local_addr, head.length, head.first,
                                  head.npsn - 1, head.pmtu.bit_length() - 1), where
    assert (int(got.cnt), int(got.rs), int(got.tail_last)) == \
        (want["cnt"], want["rs"], want["tail_last"]), where
    assert int(got.open) == (want["hole"] is not None), where
    second = want["second"]
    assert int(got.has2) == (second is not None), f"{where}: second READ"
    if second is not None:
        e2 = got.entry2
        assert (int(e2.wr_id), int(e2.first), int(e2.last_idx), int(e2.local_addr),
                int(e2.va)) == (second.wr_id, second.first, second.npsn - 1, second.local_addr,
                                second.remote_va), where
        assert int(got.rs2) == want["rs2"], where


def random_limit(rng, max_rd):
    """A limit as the connection manager may send it (0 and above ``max_rd`` included)."""
    return rng.choice([0, 1, 1, 2, 2, 3, max_rd, max_rd - 1 or 1, max_rd + 1, 31,
                       rng.randrange(32)])


def run_random(num_qps, max_rd, seed, cycles=4000, *, p_issue=0.5, p_lookup=0.6, p_flush=0.03,
               p_limit=0.0):
    rng = random.Random(seed)
    dut = ReadTrack(num_qps, max_rd)
    model = ReadRequesterModel(num_qps, max_rd)
    sched = Scheduler(rng, model, num_qps)
    stats = {"lookups": 0, "advances": 0, "retires": 0, "overflows": 0, "flushes": 0,
             "restarts": 0, "full_seen": 0, "limits": 0, "lowered": 0}

    async def bench(ctx):
        pending = None                  # (qp, the model's view) of the lookup of the cycle before
        for cycle in range(cycles):
            full = ctx.get(dut.full)
            want = sum(1 << q for q in range(num_qps) if model.full(q))
            assert full == want, f"cycle {cycle}: full {full:#x}, model {want:#x}"
            busy = ctx.get(dut.busy)
            want = sum(1 << q for q in range(num_qps) if model.outstanding(q))
            assert busy == want, f"cycle {cycle}: busy {busy:#x}, model {want:#x}"
            stats["full_seen"] += bool(full)
            ctx.set(dut.lookup.valid, 0)
            ctx.set(dut.lookup.advance, 0)
            ctx.set(dut.lookup.retire, 0)
            ctx.set(dut.flush.valid, 0)
            ctx.set(dut.issue.valid, 0)
            ctx.set(dut.limit.valid, 0)
            if pending is not None:
                qp, want_view = pending
                check_view(ctx.get(dut.lookup.view), want_view, f"cycle {cycle}, QP {qp}")
                assert not ctx.get(dut.flush.ready), "a flush must wait while an update is due"
                if want_view is not None and rng.random() < 0.7:
                    left = model.advance(qp)
                    ctx.set(dut.lookup.advance, 1)
                    ctx.set(dut.lookup.retire, int(left is not None))
                    stats["advances"] += 1
                    stats["retires"] += left is not None
                pending = None
            else:
                if rng.random() < p_flush:
                    qp = rng.randrange(num_qps + 1)
                    ctx.set(dut.flush.payload, qp)
                    ctx.set(dut.flush.valid, 1)
                    assert ctx.get(dut.flush.ready)
                    old = model.view(qp)
                    model.flush(qp)
                    if old is not None and rng.random() < 0.5:
                        # the QP set up again from the same PSN: a new READ with the same
                        # first PSN must not inherit the old one's restart
                        sched.next_psn[qp] = old["head"].first
                    stats["flushes"] += 1
                if rng.random() < p_lookup:
                    qp = rng.randrange(num_qps + (1 if rng.random() < 0.05 else 0))
                    ctx.set(dut.lookup.qp, qp)
                    ctx.set(dut.lookup.valid, 1)
                    pending = (qp, model.view(qp))
                    stats["lookups"] += 1
            if p_limit and rng.random() < p_limit:
                qp = rng.randrange(num_qps + (1 if rng.random() < 0.05 else 0))
                limit = random_limit(rng, max_rd)
                ctx.set(dut.limit.payload, {"qp": qp, "limit": limit})
                ctx.set(dut.limit.valid, 1)
                model.set_limit(qp, limit)
                stats["limits"] += 1
                stats["lowered"] += qp < num_qps and \
                    len(model.outstanding(qp)) > model.limits[qp]
            if rng.random() < p_issue:
                rec = sched.issue()
                ctx.set(dut.issue.payload, rec)
                ctx.set(dut.issue.valid, 1)
                accepted = apply_issue(model, rec)
                assert ctx.get(dut.overflow) == (not accepted), f"cycle {cycle}: overflow"
                stats["overflows"] += not accepted
                stats["restarts"] += not rec["new"] and rec["psn"] != rec["first"]
            await ctx.tick()

    run_sim(dut, testbenches=[bench], deadline_cycles=cycles + 100)
    return stats


@pytest.mark.parametrize("num_qps, max_rd, seed", [
    (3, 16, 1), full(3, 5, 2), full(1, 1, 3), full(5, 3, 4), full(2, 2, 5), (16, 4, 6),
])
def test_against_model(num_qps, max_rd, seed):
    stats = run_random(num_qps, max_rd, seed)
    # every kind of event happened
    assert all(stats[k] > 10 for k in ("lookups", "advances", "retires", "overflows",
                                       "flushes", "restarts", "full_seen")), stats


@pytest.mark.parametrize("num_qps, max_rd, seed", [
    (3, 16, 11), full(2, 4, 12), (5, 3, 13), full(1, 1, 14), full(4, 8, 15),
])
def test_limits_against_model(num_qps, max_rd, seed):
    """Limits set at random (some below the READs a QP has, some clipped), in cycles with
    issues, lookups and flushes of the same QP."""
    stats = run_random(num_qps, max_rd, seed, p_issue=0.7, p_limit=0.05)
    assert all(stats[k] > 10 for k in ("lookups", "retires", "overflows", "flushes",
                                       "full_seen", "limits")), stats
    if max_rd > 1:
        assert stats["lowered"] > 3, stats


def test_busy_lookups():
    """A lookup every other cycle and an issue in every cycle, with few flushes."""
    stats = run_random(2, 8, 7, p_issue=1.0, p_lookup=1.0, p_flush=0.01)
    assert stats["retires"] > 50 and stats["flushes"] > 5, stats


def test_parameters():
    raises(TypeError, "num_qps must be an integer", lambda: ReadTrack("4"))
    raises(ValueError, "num_qps must be 1..256", lambda: ReadTrack(0))
    raises(ValueError, r"max_rd_atomic must be 1..16, not 17", lambda: ReadTrack(4, 17))
    raises(ValueError, r"max_rd_atomic must be 1..16, not 0", lambda: ReadTrack(4, 0))
    raises(TypeError, "max_rd_atomic must be an integer", lambda: ReadTrack(4, 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        slots = ReadTrack(4, 5).slots, ReadTrack(4, 1).slots
        gc.collect()
    assert slots == (8, 1)


def test_limit_directed():
    """By hand, on QP 1 of a table of 8 READs per QP: full at the limit and an overflow past it;
    a limit lowered below the READs outstanding (full until fewer remain), 0 taken as 1, 20 as
    8; a limit and an issue in one cycle (the limit counts); a flush keeps the limit; QP 0
    keeps its 8 throughout."""
    dut = ReadTrack(3, 8)
    psn = [0, 1000, 2000]
    log = []

    async def bench(ctx):
        def idle():
            for name in ("issue", "limit", "flush"):
                ctx.set(getattr(dut, name).valid, 0)
            for name in ("valid", "advance", "retire"):
                ctx.set(getattr(dut.lookup, name), 0)

        async def cycle(*, issue=None, limit=None, retire=None, flush=None):
            """One cycle: a new READ of 0 bytes on QP ``issue``, a limit ``(qp, n)``, a flush;
            ``retire``: the head READ of that QP leaves (its lookup, then the retire).
            Returns the overflow pulse of the issue."""
            idle()
            if retire is not None:
                ctx.set(dut.lookup.qp, retire)
                ctx.set(dut.lookup.valid, 1)
                await ctx.tick()
                idle()
                assert ctx.get(dut.lookup.view.has)
                ctx.set(dut.lookup.advance, 1)
                ctx.set(dut.lookup.retire, 1)
            if issue is not None:
                ctx.set(dut.issue.payload, {"qp": issue, "new": 1, "wr_id": psn[issue],
                                            "length": 0, "first": psn[issue], "psn": psn[issue],
                                            "pmtu_log2": 8})
                ctx.set(dut.issue.valid, 1)
                psn[issue] += 1
            if limit is not None:
                ctx.set(dut.limit.payload, {"qp": limit[0], "limit": limit[1]})
                ctx.set(dut.limit.valid, 1)
            if flush is not None:
                ctx.set(dut.flush.payload, flush)
                ctx.set(dut.flush.valid, 1)
            overflow = ctx.get(dut.overflow)
            await ctx.tick()
            idle()
            return overflow

        def full():
            return ctx.get(dut.full)

        assert full() == 0
        await cycle(limit=(1, 2))
        assert [await cycle(issue=1) for _ in range(3)] == [0, 0, 1]    # the third: overflow
        assert full() == 0b010
        await cycle(limit=(1, 1))                                       # 2 outstanding, limit 1
        assert full() == 0b010
        await cycle(retire=1)                                           # 1 left: still full
        assert full() == 0b010
        assert await cycle(issue=1) == 1
        await cycle(retire=1)                                           # none left
        assert full() == 0
        assert [await cycle(issue=1) for _ in range(2)] == [0, 1]
        await cycle(limit=(1, 0))                                       # 0 counts as 1
        assert full() == 0b010
        await cycle(limit=(1, 20))                                      # 20 as 8
        assert full() == 0
        assert [await cycle(issue=1) for _ in range(8)] == [0] * 7 + [1]
        assert full() == 0b010
        await cycle(limit=(1, 5), retire=1)                             # 7 left, limit 5
        assert full() == 0b010
        await cycle(flush=1)                                            # none left, limit 5
        assert full() == 0
        assert [await cycle(issue=1) for _ in range(6)] == [0] * 5 + [1]
        assert full() == 0b010
        await cycle(flush=1)
        # a limit and an issue in one cycle: the limit counts for the issue
        assert await cycle(issue=1, limit=(1, 1)) == 0
        assert full() == 0b010
        assert await cycle(issue=1, limit=(1, 2)) == 0
        assert full() == 0b010
        assert await cycle(issue=1, limit=(1, 3)) == 0
        assert full() == 0b010
        # a limit, an issue and a retire of the QP in one cycle: 3 - 1 + 1 of limit 4
        await cycle(issue=1, limit=(1, 4), retire=1)
        assert full() == 0
        # QP 0 keeps its 8; a QP outside the table changes nothing
        await cycle(limit=(5, 1))
        assert [await cycle(issue=0) for _ in range(9)] == [0] * 8 + [1]
        assert full() == 0b001                                          # QP 1: 3 of 4
        log.append("done")

    run_sim(dut, testbenches=[bench], deadline_cycles=400)
    assert log == ["done"]
