"""The scheduler's stages, each against a small Python model of what it decides, with random
inputs cycle by cycle: the kept-signal trees (:mod:`~rocegen.gateware.roce.requester.sched_tree`), the
round robin of the select stage (:class:`SchedSelect`), the turn the build stage works out
(:class:`SchedBuild`), the commit decision and output registers of the issue stage
(:class:`SchedIssue`), and the queue pointers and checks of :class:`SchedQueue`."""

import random

import pytest
from amaranth.hdl import Elaboratable, Module, Signal

from rocegen.gateware.roce.layouts import CplStatus, QpState, SchedKind, WrSource
from rocegen.gateware.roce.requester.sched_build import SchedBuild
from rocegen.gateware.roce.requester.sched_issue import SchedIssue
from rocegen.gateware.roce.requester.sched_queue import SchedQueue
from rocegen.gateware.roce.requester.sched_select import SchedSelect
from rocegen.gateware.roce.requester.sched_tree import first_one, mux_tree
from rocegen.sim.testing.harness import run_sim

PSN_MOD = 1 << 24


def onehot(q):
    return 0 if q is None else 1 << q


def bit(v, q):
    return (v >> q) & 1


def rand_event(rng, n, p=0.2):
    """None or (qp, kind) of a retry-engine event (sometimes for a QP outside the table)."""
    if rng.random() >= p:
        return None
    return rng.randrange(n + 1), rng.choice(list(SchedKind))


def set_event(ctx, port, ev):
    ctx.set(port.valid, ev is not None)
    if ev is not None:
        ctx.set(port.payload, {"qp": ev[0], "kind": ev[1]})


def stale_of(ev, q):
    return ev is not None and ev[0] == q and ev[1] != SchedKind.ADVANCE


class _Trees(Elaboratable):
    def __init__(self, count, width):
        self.count, self.width = count, width
        self.valid = Signal(count)
        self.data = [Signal(width, name=f"d{k}") for k in range(count)]
        self.index = Signal(max(1, (count - 1).bit_length()))
        self.any = Signal()
        self.pos = Signal(max(1, (count - 1).bit_length()))
        self.payload = Signal(width)
        self.muxed = Signal()

    def elaborate(self, platform):
        m = Module()
        leaves = [(self.valid[k], self.data[k]) for k in range(self.count)]
        found, pos, payload = first_one(m, leaves)
        m.d.comb += [self.any.eq(found), self.pos.eq(pos), self.payload.eq(payload),
                     self.muxed.eq(mux_tree(m, list(self.valid), self.index, "mt"))]
        return m


@pytest.mark.parametrize("count", [1, 4, 16, 64])
def test_trees(count):
    rng = random.Random(count)
    dut = _Trees(count, 7)

    async def tb(ctx):
        for _ in range(300):
            valid = rng.getrandbits(count) & rng.getrandbits(count) & rng.getrandbits(count)
            data = [rng.getrandbits(7) for _ in range(count)]
            index = rng.randrange(count)
            ctx.set(dut.valid, valid)
            for s, v in zip(dut.data, data):
                ctx.set(s, v)
            ctx.set(dut.index, index)
            assert ctx.get(dut.muxed) == bit(valid, index)
            assert ctx.get(dut.any) == (valid != 0)
            if valid:
                first = next(k for k in range(count) if bit(valid, k))
                assert ctx.get(dut.pos) == first
                assert ctx.get(dut.payload) == data[first]
            await ctx.tick()

    run_sim(dut, testbenches=[tb])


@pytest.mark.parametrize("num_qps, depth, seed", [(1, 1, 1), (3, 4, 2), (8, 16, 3), (17, 2, 4)])
def test_select_against_model(num_qps, depth, seed):
    """The round robin over registered eligibility, the slot address of the pick and the turn
    handed to the read stage."""
    rng = random.Random(seed)
    n = num_qps
    mod, dbits = 2 * depth, depth.bit_length() - 1
    dut = SchedSelect(n, depth)
    reg = {"avail": [0] * n, "moved": [0] * n, "going": [0] * n, "new": [0] * n, "has": [0] * n}
    r = {"valid": 0, "q": 0, "sel": 0, "addr": 0}
    after = set()               # QPs after the one of the last turn
    seen = {"picks": 0, "wrapped": 0, "gone": 0}

    async def tb(ctx):
        nonlocal r, after
        for _ in range(1500):
            cur = [rng.randrange(mod) for _ in range(n)]
            hi = [(c + rng.choice([0, 0, 1])) % mod for c in cur]
            tail = [(c + rng.choice([0, 1, 1, 2])) % mod for c in cur]
            started, win_block = rng.getrandbits(n), rng.getrandbits(n) & rng.getrandbits(n)
            held, full = rng.getrandbits(n) & rng.getrandbits(n), rng.getrandbits(n)
            pushed = onehot(rng.randrange(n)) if rng.random() < 0.3 else 0
            tq = rng.randrange(n) if rng.random() < 0.6 else None
            fin, new, commit = (rng.random() < 0.5 for _ in range(3))
            bq = rng.randrange(n) if rng.random() < 0.5 else None
            ev = rand_event(rng, n)
            for name, v in (("started", started), ("win_block", win_block), ("held", held),
                            ("full", full), ("pushed", pushed), ("turn_sel", onehot(tq)),
                            ("turn_fin", fin), ("turn_new", new), ("commit", commit),
                            ("b_sel", onehot(bq))):
                ctx.set(getattr(dut, name), v)
            for name, v in (("cur", cur), ("hi", hi), ("tail", tail)):
                ctx.set(getattr(dut, name), v)
            set_event(ctx, dut.sched, ev)
            # the turn registered in the previous cycle
            assert ctx.get(dut.r_valid) == r["valid"]
            assert ctx.get(dut.r_sel) == r["sel"]
            if r["valid"]:
                q = r["q"]
                assert (ctx.get(dut.r_q), ctx.get(dut.r_addr)) == (q, r["addr"])
                gone = reg["moved"][q] or stale_of(ev, q) or not reg["has"][q]
                assert ctx.get(dut.r_gone) == gone
                assert ctx.get(dut.r_going) == reg["going"][q]
                assert ctx.get(dut.r_new) == reg["new"][q]
                seen["gone"] += gone
            else:
                assert not ctx.get(dut.r_gone)
            # the pick of this cycle
            base = [reg["avail"][q] and not bit(r["sel"], q) and q != bq for q in range(n)]
            cands = [q for q in range(n) if base[q]]
            pick = next((q for q in cands if q in after), cands[0] if cands else None)
            cur_s = [(cur[q] + (q == tq and fin)) % mod for q in range(n)]
            if pick is not None:
                addr = (cur_s[pick] % depth) | (pick << dbits)
                assert ctx.get(dut.rd_addr) == addr
                seen["picks"] += 1
                seen["wrapped"] += bool(after) and pick not in after
                r = {"valid": 1, "q": pick, "sel": 1 << pick, "addr": addr}
                after = set(range(pick + 1, n))
            else:
                r = {"valid": 0, "q": r["q"], "sel": 0, "addr": 0}
            for q in range(n):
                hi_s = (hi[q] + (q == tq and new)) % mod
                going_s = (not fin) if q == tq else bit(started, q)
                has_s = cur_s[q] != tail[q]
                kept_turn = q == tq and not commit
                reg["moved"][q] = stale_of(ev, q) or kept_turn
                reg["avail"][q] = ((has_s or bit(pushed, q)) and not bit(held, q) and
                                   not bit(win_block, q) and
                                   (going_s or cur_s[q] != hi_s or not bit(full, q)) and
                                   not stale_of(ev, q) and not kept_turn)
                reg["going"][q], reg["new"][q], reg["has"][q] = going_s, cur_s[q] == hi_s, has_s
            await ctx.tick()

    run_sim(dut, testbenches=[tb])
    assert seen["picks"] > 100 and seen["gone"] > 20
    if n > 1:
        assert seen["wrapped"] > 20


@pytest.mark.parametrize("num_qps, window, seed", [(1, 1, 5), (4, 16, 6), (8, 1000, 7)])
def test_build_against_model(num_qps, window, seed):
    """What a turn does (packet, start, refusal, skip, resume, abort), its PSN, its completion
    status, the window and the progress written back."""
    rng = random.Random(seed)
    n = num_qps
    dut = SchedBuild(n, 5, window)
    seen = {k: 0 for k in ("packet", "refuse", "skip", "resume", "abort", "shut", "last")}

    def expect(i, ev):
        """The registered turn for inputs ``i``."""
        q, mtu = i["q"], 1 << i["pmtu"]
        err = i["valid"] and bit(i["errored"], q)
        start = not i["going"]
        psn = i["prog_psn"] if not start else (i["fpsn"] if i["fwd"] else i["rd_psn"])
        index = i["index"] if not start else 0
        offset = index * mtu
        status = (i["status"] if i["status"] != CplStatus.OK else CplStatus.FLUSHED if err
                  else CplStatus.QP_NOT_READY if i["state"] != QpState.RTS else CplStatus.OK)
        refuse = start and i["new"] and status != CplStatus.OK
        rewound = start and not i["new"]
        covered = not i["sent"] or (i["acked"] - i["last"]) % PSN_MOD < 1 << 23
        skip, resume = rewound and (err or covered), rewound and not err and not covered
        abort = not start and err
        packet = not refuse and not rewound and not abort
        last_index = max(1, -(-i["length"] // mtu)) - 1
        is_last = index == last_index
        win_pos = (psn - i["acked"]) % PSN_MOD
        if resume:
            into = (i["acked"] + 1 - i["first"]) % PSN_MOD
            prog = (0, i["first"], 0) if into >> 23 else \
                (into, (i["acked"] + 1) % PSN_MOD, (into << i["pmtu"]) % (1 << 31))
        else:
            prog = (index + 1, (psn + 1) % PSN_MOD, offset + min(mtu, i["length"] - offset))
        for k, v in (("packet", packet), ("refuse", refuse), ("skip", skip),
                     ("resume", resume), ("abort", abort), ("last", packet and is_last)):
            seen[k] += bool(v)
        shut = packet and window < win_pos < 1 << 23
        seen["shut"] += shut
        return {
            "valid": i["valid"] and not stale_of(ev, q), "q": q,
            "sel": onehot(q) if i["valid"] and not stale_of(ev, q) else 0, "addr": i["addr"],
            "packet": packet, "new": start and i["new"], "refuse": refuse,
            "fin": refuse or skip or abort or (packet and is_last), "shut": shut,
            "err": err, "ev": i["valid"] and ev is not None and ev[0] == q, "psn": psn,
            "status": status, "prog_we": (packet and not is_last) or resume,
            "prog": prog if (packet and not is_last) or resume else None,
            "ack_forced": packet and win_pos == window,
        }

    async def tb(ctx):
        held = None
        for _ in range(2000):
            pmtu = rng.randrange(8, 13)
            mtu = 1 << pmtu
            length = rng.choice([0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, rng.randrange(20000)])
            acked = rng.randrange(PSN_MOD)
            near = (acked + rng.choice([-2, 0, 1, window - 1, window, window + 1,
                                        rng.randrange(PSN_MOD)])) % PSN_MOD
            first = (acked + rng.choice([-5, -1, 0, 1, 2, 3])) % PSN_MOD
            q = rng.randrange(n)
            i = {
                "valid": rng.random() < 0.8, "q": q, "addr": rng.randrange(32),
                "going": rng.random() < 0.5, "new": rng.random() < 0.6,
                "status": rng.choice([CplStatus.OK] * 6 + [CplStatus.LOCAL_ALIGN,
                                                           CplStatus.LOCAL_LENGTH]),
                "length": length, "pmtu": pmtu,
                "state": rng.choice([QpState.RTS] * 5 + [QpState.INIT, QpState.ERROR]),
                "first": first, "last": (first + rng.randrange(4)) % PSN_MOD,
                "sent": rng.random() < 0.8, "fwd": rng.random() < 0.3, "fpsn": near,
                "rd_psn": near, "prog_psn": near, "acked": acked,
                "index": rng.randrange(max(1, -(-length // mtu))),
                "errored": rng.getrandbits(n) & rng.getrandbits(n),
            }
            ev = rand_event(rng, n)
            done = rng.random() < 0.8
            ctx.set(dut.valid, i["valid"])
            ctx.set(dut.q, q)
            ctx.set(dut.sel, onehot(q) if i["valid"] else 0)
            ctx.set(dut.addr, i["addr"])
            ctx.set(dut.going, i["going"])
            ctx.set(dut.new, i["new"])
            ctx.set(dut.slot, {"wr": {"wr_id": 1000 + q, "qp": q, "length": length,
                                      "local_addr": 0x40}, "src": WrSource.USER,
                               "status": i["status"]})
            ctx.set(dut.pslot, {"first": first, "last": i["last"], "sent": i["sent"]})
            ctx.set(dut.fwd, i["fwd"])
            ctx.set(dut.fpsn, i["fpsn"])
            ctx.set(dut.prog, {"index": i["index"], "psn": i["prog_psn"],
                               "offset": i["index"] * mtu})
            ctx.set(dut.context, {"state": i["state"], "pmtu_log2": pmtu, "peer_qpn": 77,
                                  "ack_every_log2": 7})
            ctx.set(dut.rd_psn, i["rd_psn"])
            ctx.set(dut.acked_psn, acked)
            ctx.set(dut.errored, i["errored"])
            set_event(ctx, dut.sched, ev)
            ctx.set(dut.turn.done, done)
            if done:
                held = expect(i, ev)
            elif held is not None and held["valid"] and stale_of(ev, held["q"]):
                held = {**held, "valid": False, "sel": 0}
            await ctx.tick()
            if held is None:            # nothing registered since the reset
                assert not ctx.get(dut.turn.valid)
                continue
            t, p = dut.turn, dut.turn.p
            assert ctx.get(t.valid) == held["valid"]
            assert ctx.get(t.sel) == held["sel"]
            assert (ctx.get(t.q), ctx.get(t.addr)) == (held["q"], held["addr"])
            for k in ("packet", "new", "refuse", "fin", "shut", "err", "ev", "psn",
                      "prog_we"):
                assert ctx.get(getattr(p, k)) == held[k], k
            assert ctx.get(p.post.status) == held["status"]
            assert ctx.get(p.post.wr_id) == 1000 + held["q"]
            assert ctx.get(p.desc.psn) == held["psn"]
            if held["prog"] is not None:
                got = ctx.get(p.prog)
                assert (got.index, got.psn, got.offset) == held["prog"]
            if held["ack_forced"]:
                assert ctx.get(p.desc.ack_req)

    run_sim(dut, testbenches=[tb])
    assert all(v > 10 for v in seen.values()), seen


@pytest.mark.parametrize("num_qps, depth, width, seed", [(1, 1, 64, 8), (3, 4, 512, 9),
                                                        (8, 16, 128, 10)])
def test_queue_against_model(num_qps, depth, width, seed):
    """Queueing with the address checks, BAD_QP for a QP outside the table, room (registered,
    a slot freed counting a cycle later) and the pointers' moves on turns and events."""
    rng = random.Random(seed)
    n, mem_bytes = num_qps, 1 << 16
    mod, dbits = 2 * depth, depth.bit_length() - 1
    dut = SchedQueue(n, width, mem_bytes, depth)
    head, cur, hi, tail = ([0] * n for _ in range(4))
    started, win_block = [0] * n, [0] * n
    room_r = [[0, 0] for _ in range(n)]     # room for 1 and 2 more, from the cycle before
    push_r = [0] * n
    seen = {"full": 0, "bad": 0, "align": 0, "length": 0, "queued": 0, "rewind": 0}

    async def tb(ctx):
        for cycle in range(3000):
            phase = (cycle // 300) % 2      # phases that fill the queues and drain them
            qp = rng.randrange(n + 1) if rng.random() < 0.1 else rng.randrange(n)
            addr = rng.choice([0, width // 8, 3, mem_bytes - 64, rng.randrange(mem_bytes)])
            addr -= addr % (width // 8) if rng.random() < 0.8 else 0
            length = rng.choice([0, 64, 200, mem_bytes])
            src = rng.choice(list(WrSource))
            wr_valid = rng.random() < (0.8 if phase == 0 else 0.3)
            bad_ready = rng.random() < 0.5
            fq = rng.randrange(n) if rng.random() < (0.2 if phase == 0 else 0.5) else None
            if fq is not None and head[fq] == cur[fq]:
                fq = None                   # nothing completed that was not sent
            tq = rng.randrange(n) if rng.random() < 0.7 else None
            fin, new, commit, shut = (rng.random() < 0.5 for _ in range(4))
            if tq is not None and cur[tq] == tail[tq]:
                tq = None
            ev = rand_event(rng, n, 0.05)
            ctx.set(dut.wr.valid, wr_valid)
            ctx.set(dut.wr.payload, {"wr": {"wr_id": cycle, "qp": qp, "local_addr": addr,
                                            "length": length}, "src": src})
            ctx.set(dut.bad.ready, bad_ready)
            ctx.set(dut.freed.valid, fq is not None)
            ctx.set(dut.freed.payload, fq or 0)
            set_event(ctx, dut.sched, ev)
            for name, v in (("sel", onehot(tq)), ("commit", commit), ("fin", fin),
                            ("new", new), ("win_shut", shut)):
                ctx.set(getattr(dut, name), v)
            # this cycle's decisions
            bad = qp >= n
            room = not bad and room_r[qp][1 if push_r[qp] else 0]
            push = wr_valid and room
            assert ctx.get(dut.bad.valid) == (wr_valid and bad)
            assert ctx.get(dut.wr.ready) == (bad_ready if bad else room)
            assert ctx.get(dut.slot_w.valid) == push
            assert ctx.get(dut.pushed) == (onehot(qp) if push else 0)
            if wr_valid and bad:
                got = ctx.get(dut.bad.payload)
                assert (got.wr_id, got.qp, got.status, got.last_psn) == \
                    (cycle, qp, CplStatus.BAD_QP, 0)
                seen["bad"] += 1
            if push:
                status = (CplStatus.LOCAL_ALIGN if addr % (width // 8) else
                          CplStatus.LOCAL_LENGTH if src != WrSource.GENERATOR and
                          addr + length > mem_bytes else CplStatus.OK)
                got = ctx.get(dut.slot_w.payload)
                assert got.addr == (tail[qp] % depth) | (qp << dbits)
                assert (got.slot.status, got.slot.wr.wr_id) == (status, cycle)
                seen["queued"] += 1
                seen["align"] += status == CplStatus.LOCAL_ALIGN
                seen["length"] += status == CplStatus.LOCAL_LENGTH
            seen["full"] += wr_valid and not bad and not room
            # the registers after this cycle
            for q in range(n):
                used = ((tail[q] - head[q]) % mod, (tail[q] - cur[q]) % mod)
                room_r[q] = [max(used) < depth, max(used) < depth - 1]
                push_r[q] = push and qp == q
            for q in range(n):
                here = q == tq
                hd_n = (head[q] + (fq == q)) % mod
                c_n = (cur[q] + 1) % mod if here and commit and fin else cur[q]
                h_n = (hi[q] + 1) % mod if here and commit and new else hi[q]
                if here and commit:
                    started[q] = not fin
                if stale_of(ev, q):
                    cur[q] = hd_n if ev[1] == SchedKind.REWIND else hi[q]
                    started[q], win_block[q] = 0, 0
                    seen["rewind"] += 1
                else:
                    cur[q] = c_n
                    if ev is not None and ev[0] == q:
                        win_block[q] = 0
                    elif here and shut:
                        win_block[q] = 1
                hi[q], head[q] = h_n, hd_n
                tail[q] = (tail[q] + (push and qp == q)) % mod
            await ctx.tick()
            for name, v in (("cur", cur), ("hi", hi), ("tail", tail)):
                assert [ctx.get(getattr(dut, name))[q] for q in range(n)] == v, name
            assert ctx.get(dut.started) == sum(int(b) << q for q, b in enumerate(started))
            assert ctx.get(dut.win_block) == sum(b << q for q, b in enumerate(win_block))

    run_sim(dut, testbenches=[tb])
    assert all(v > 10 for v in seen.values()), seen


@pytest.mark.parametrize("num_qps, seed", [(1, 11), (4, 12), (9, 13)])
def test_issue_against_model(num_qps, seed):
    """When a turn commits, is given up or waits, what it writes into the output registers
    (with the merging of ``sent`` records and the BAD_QP post), and the memory writes."""
    rng = random.Random(seed)
    n = num_qps
    dut = SchedIssue(n, 6)
    o = {"desc": None, "post": None, "psn_w": None, "sent": None}
    post_sel, sent_sel, sent_cont, bad_r = 0, 0, False, False
    seen = {"commit": 0, "drop": 0, "wait": 0, "merge": 0, "bad": 0, "lost": 0, "err_new": 0}

    async def tb(ctx):
        nonlocal post_sel, sent_sel, sent_cont, bad_r
        for cycle in range(4000):
            phase = (cycle // 250) % 2      # phases with and without backpressure
            q = rng.randrange(n)
            valid = rng.random() < 0.8
            p = {k: rng.random() < pr for k, pr in (("packet", 0.7), ("new", 0.4),
                                                     ("refuse", 0.2), ("shut", 0.1),
                                                     ("err", 0.1), ("ev", 0.1),
                                                     ("prog_we", 0.5))}
            psn, last = rng.randrange(PSN_MOD), rng.randrange(4)
            held = onehot(q) if rng.random() < 0.05 else 0
            full = onehot(q) if rng.random() < 0.1 else 0
            errored = onehot(q) if rng.random() < 0.05 else 0
            ev = rand_event(rng, n, 0.05)
            bad = rng.random() < 0.1
            ready = {k: rng.random() < (0.9 if phase else 0.3) for k in o}
            ctx.set(dut.turn.valid, valid)
            ctx.set(dut.turn.q, q)
            ctx.set(dut.turn.sel, onehot(q) if valid else 0)
            ctx.set(dut.turn.addr, cycle % 64)
            ctx.set(dut.turn.p, {**p, "psn": psn, "last": last, "desc": {"psn": psn, "qp": q},
                                 "post": {"wr_id": cycle, "qp": q},
                                 "prog": {"psn": cycle}})
            ctx.set(dut.held, held)
            ctx.set(dut.full, full)
            ctx.set(dut.errored, errored)
            set_event(ctx, dut.sched, ev)
            ctx.set(dut.bad.valid, bad)
            ctx.set(dut.bad.payload, {"wr_id": cycle, "qp": n, "status": CplStatus.BAD_QP})
            for k in o:
                ctx.set(getattr(dut, k).ready, ready[k])
            # the decision
            free = {k: o[k] is None or ready[k] for k in o}
            drop = valid and (bit(held, q) or (p["packet"] and p["shut"]))
            err_new = valid and bit(errored, q) and not p["err"]
            lost = valid and p["new"] and bit(full, q)
            post_ok = (free["post"] and not bad_r and not bit(full, q) and
                       not (o["post"] is not None and bit(post_sel, q)))
            merge = (o["sent"] is not None and not ready["sent"] and bit(sent_sel, q) and
                     o["sent"][2] != 63 and sent_cont)
            outs_ok = ((not p["packet"] or (free["desc"] and (free["sent"] or merge))) and
                       (not p["new"] or post_ok) and
                       (not p["new"] or p["refuse"] or free["psn_w"]))
            commit = valid and not drop and not err_new and not stale_of(ev, q) and outs_ok
            assert ctx.get(dut.commit) == commit
            assert ctx.get(dut.turn.done) == (not valid or commit or drop or err_new or lost)
            assert ctx.get(dut.win_shut) == (p["packet"] and p["shut"] and not bit(held, q) and
                                             not p["ev"])
            bad_ready = free["post"] and bad_r
            assert ctx.get(dut.bad.ready) == bad_ready
            last_psn = (psn + last) % PSN_MOD
            assert ctx.get(dut.psn_slot.valid) == (commit and p["new"])
            if commit and p["new"]:
                got = ctx.get(dut.psn_slot.payload)
                assert (got.addr, got.psns.first, got.psns.last, got.psns.sent) == \
                    (cycle % 64, psn, last_psn, not p["refuse"])
            assert ctx.get(dut.progress.valid) == (commit and p["prog_we"])
            if commit and p["prog_we"]:
                got = ctx.get(dut.progress.payload)
                assert (got.qp, got.progress.psn) == (q, cycle)
            seen["commit"] += commit
            seen["drop"] += valid and drop
            seen["wait"] += valid and not ctx.get(dut.turn.done)
            seen["merge"] += commit and p["packet"] and merge
            seen["bad"] += bad and bad_ready
            seen["lost"] += lost and not commit and not drop
            seen["err_new"] += err_new
            # the registers after this cycle
            for k in o:
                if ready[k]:
                    o[k] = None
            cont, sent_sel_before = sent_cont, sent_sel
            if commit and p["packet"]:
                o["desc"] = psn
                cont = True
                if merge:
                    o["sent"] = (q, psn, o["sent"][2] + 1)
                else:
                    o["sent"], sent_sel = (q, psn, 1), onehot(q)
            if commit and p["new"]:
                o["post"] = (cycle, 0 if p["refuse"] else last_psn, q)
                post_sel = onehot(q)
                if not p["refuse"]:
                    o["psn_w"] = (q, (last_psn + 1) % PSN_MOD)
            if bad and bad_ready:
                o["post"], post_sel = (cycle, 0, n), 0
            if ev is not None and ev[0] < n and stale_of(ev, ev[0]) and bit(sent_sel_before, ev[0]):
                cont = False
            sent_cont, bad_r = cont, bad
            await ctx.tick()
            assert ctx.get(dut.desc.valid) == (o["desc"] is not None)
            if o["desc"] is not None:
                assert ctx.get(dut.desc.payload.psn) == o["desc"]
            assert ctx.get(dut.post.valid) == (o["post"] is not None)
            if o["post"] is not None:
                got = ctx.get(dut.post.payload)
                assert (got.wr_id, got.last_psn, got.qp) == o["post"]
            assert ctx.get(dut.psn_w.valid) == (o["psn_w"] is not None)
            if o["psn_w"] is not None:
                got = ctx.get(dut.psn_w.payload)
                assert (got.qp, got.psn) == o["psn_w"]
            assert ctx.get(dut.sent.valid) == (o["sent"] is not None)
            if o["sent"] is not None:
                got = ctx.get(dut.sent.payload)
                assert (got.qp, got.psn, got.packets) == o["sent"]

    run_sim(dut, testbenches=[tb])
    assert all(v > 10 for v in seen.values()), seen


def test_parameters_are_validated():
    for bad in (lambda: SchedSelect(0, 4), lambda: SchedSelect(2, 3), lambda: SchedSelect(2, 2048),
                lambda: SchedBuild(257, 4, 16), lambda: SchedBuild(2, 0, 16),
                lambda: SchedBuild(2, 4, 0), lambda: SchedBuild(2, 4, 1 << 23),
                lambda: SchedIssue(2, 15),
                lambda: SchedQueue(2, 64, 3 << 16, 4), lambda: SchedQueue(2, 64, 1 << 16, 0)):
        with pytest.raises(ValueError):
            bad()
    for bad in (lambda: SchedIssue(True, 4), lambda: SchedSelect(2.0, 4),
                lambda: SchedBuild("2", 4, 16), lambda: SchedQueue(None, 64, 1 << 16, 4)):
        with pytest.raises(TypeError, match="num_qps must be an integer"):
            bad()
    with pytest.raises(ValueError, match="width"):
        SchedQueue(2, 32, 1 << 16, 4)
