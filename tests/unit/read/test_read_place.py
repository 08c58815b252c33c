"""The READ requester's receive side (:class:`ReadPlace` with its :class:`ReadTrack`) against the
reference model (:mod:`rocegen.sim.models.read.read_requester`), in rounds of a closed loop.

Each round the bench, standing in for the scheduler and the retry engine, issues READs on three
QPs (new ones up to ``max_rd_atomic``, and for every QP with a READ outstanding the reissue a
gap or a timeout asks for: the head READ from its expected PSN, the later ones whole); a peer
answers every request from its memory with READ responses (IPv4 and UDP from scapy, BTH and
AETH from the header tables), spoiled at random: lost, duplicated, swapped, a wrong opcode, a
payload too short or too long, a PSN far off, one response too many, a NAK in the AETH; and
ACKNOWLEDGEs of PSNs before, inside and after the READs go in between, as do expiries of the
QPs' hole timers. Headers, datagram beats
and acknowledgements come with random idle cycles, memory writes and events leave under random
backpressure, and with ``acked_writes`` the memory acknowledges the words late. After each round
the model takes the inputs in the order the gateware took them; the events for the retry
engine, the READs completed, the reissues, the verdict counters and every byte written must be
the model's; no byte is written outside the local range of a READ, and every event leaves only
once the words of every response up to it are written (taken, or acknowledged). Faults stop
after a while; every READ must then complete with the peer's bytes in its local range, except
those of a QP that a NAK failed."""

import random
from collections import deque

import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.gateware.roce.read.read_layouts import READ_COUNTERS
from rocegen.gateware.roce.read.read_place import ReadPlace
from rocegen.gateware.roce.read.read_track import ReadTrack
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.read.read_requester import PSN_MOD, ReadRequesterModel
from rocegen.sim.testing.amaranth_streams import StreamDriver, meta_dict, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire import headers as H
from tests.tiers import full

FIRST, MIDDLE, LAST, ONLY = 0x0D, 0x0E, 0x0F, 0x10
ATOMIC_ACK = 0x12
QPS = 3
MEM = 1 << 17                       # bytes of local memory the READs land in
REMOTE = random.Random(77).randbytes(1 << 16)
HDR_LEN = H.IPV4.length + H.UDP.length + H.BTH.length
VA_BASE = 0x7F12_3400_0000                  # the peer's virtual address of REMOTE[0]


class Top(Elaboratable):
    """A :class:`ReadTrack` and a :class:`ReadPlace` joined by the lookup port."""

    def __init__(self, width, max_rd, acked_writes, atomics=None):
        self.track = ReadTrack(QPS, max_rd)
        self.place = ReadPlace(width, (MEM // (width // 8)).bit_length() - 1,
                               acked_writes=acked_writes, atomics=atomics)

    def elaborate(self, platform):
        m = Module()
        m.submodules.track, m.submodules.place = self.track, self.place
        wiring.connect(m, self.place.lookup, self.track.lookup)
        return m


# ---- the peer

def datagram(qp, opcode, psn, payload, syndrome, msn):
    """A READ response datagram as the receive path hands it on (IPv4 first, ICRC removed) and
    its header record."""
    aeth = opcode != MIDDLE
    padcnt = (-len(payload)) & 3
    roce = H.BTH.pack(opcode=opcode, m=1, padcnt=padcnt, pkey=0xFFFF, dest_qp=QPN_BASE + qp,
                      psn=psn)
    if aeth:
        roce += H.AETH.pack(syndrome=syndrome, msn=msn)
    roce += payload + bytes(padcnt)
    pkt = (IP(src="10.0.0.2", dst="10.0.0.1", flags="DF", ttl=64, len=HDR_LEN - 12 + len(roce) + 4)
           / UDP(sport=0xC123, dport=H.UDP_PORT_ROCEV2, len=8 + len(roce) + 4, chksum=0)
           / Raw(roce))
    hdr = {"qp": qp, "opcode": opcode, "psn": psn, "syndrome": syndrome if aeth else 0,
           "msn": msn if aeth else 0, "length": len(payload),
           "skip": HDR_LEN + (H.AETH.length if aeth else 0)}
    return bytes(pkt), hdr


def answer(req, rng):
    """The responses to a READ request ``req`` (its READ, and the PSN it was sent from); an
    atomic's: one ATOMIC_ACKNOWLEDGE, its payload the 8 bytes at its target (as the AtomicAckETH
    carries the original value)."""
    r, psn = req["read"], req["psn"]
    if r["atomic"]:
        return [{"qp": r["qp"], "op": ATOMIC_ACK, "psn": r["first"],
                 "payload": REMOTE[r["va"]:r["va"] + 8],
                 "syn": rng.choice([0x1F, 0x1F, rng.randrange(0x1F)]),
                 "msn": rng.randrange(1 << 24)}]
    k0 = (psn - r["first"]) % PSN_MOD
    npsn = max(1, -(-r["length"] // r["pmtu"]))
    out = []
    for k in range(k0, npsn):
        off = k * r["pmtu"]
        n = min(r["pmtu"], r["length"] - off) if r["length"] else 0
        op = (ONLY if k == npsn - 1 else FIRST) if k == k0 else (LAST if k == npsn - 1 else MIDDLE)
        out.append({"qp": r["qp"], "op": op, "psn": (r["first"] + k) % PSN_MOD,
                    "payload": REMOTE[r["va"] + off:r["va"] + off + n],
                    "syn": rng.choice([0x1F, 0x1F, rng.randrange(0x1F)]),
                    "msn": rng.randrange(1 << 24)})
    return out


def spoil(resps, rng, p, atomics=False):
    """The peer's faults, each with chance ``p`` (a wrong opcode may be ATOMIC_ACKNOWLEDGE with
    ``atomics``: the receive path passes it on only then)."""
    opcodes = (FIRST, MIDDLE, LAST, ONLY) + ((ATOMIC_ACK,) if atomics else ())
    out = []
    for n, x in enumerate(resps):
        r = rng.random() / p if p else 99
        x = dict(x)
        if r < 1:
            continue                                                    # lost
        if r < 2:
            out.append(dict(x))                                         # duplicated
        elif r < 3:
            x["op"] = rng.choice([o for o in opcodes if o != x["op"]])
        elif r < 4:
            x["payload"] = x["payload"][:-rng.randint(1, 3)] if x["payload"] else b"\x01"
        elif r < 5:
            x["payload"] = x["payload"] + rng.randbytes(rng.randint(1, 5))
        elif r < 6:
            x["psn"] = (x["psn"] + rng.choice([1000, -1000, 1 << 22])) % PSN_MOD
        elif r < 6.5 and x["op"] != MIDDLE:
            x["syn"] = rng.choice([0x62, 0x61, 0x63, 0x20, 0x60, 0x7F])
        elif r < 7.5 and x["op"] in (LAST, ONLY, ATOMIC_ACK):
            out.append(x)                                               # one too many
            x = dict(x, psn=(x["psn"] + 1) % PSN_MOD, op=rng.choice([MIDDLE, LAST, ONLY]),
                     forged=True)
        elif r < 8.5 and n + 1 < len(resps):
            out.append(dict(resps[n + 1]))                              # swapped
        out.append(x)
    return out


# ---- the bench's view of the outputs

class Monitor:
    """Takes memory writes and events with random backpressure, acknowledges words late
    (``acked_writes``), and records, cycle by cycle, the inputs taken and everything that
    leaves."""

    def __init__(self, place, rng, *, backpressure, acked_writes):
        self.p, self.rng = place, rng
        self.backpressure, self.acked_writes = backpressure, acked_writes
        self.cycle = 0
        self.taken = []                 # ("hdr" | "ack" | "timer", index within the round)
        self.counts = {"hdr": 0, "ack": 0, "timer": 0}
        self.touches = []               # (QP, poke) of each ``touch``
        self.writes = []                # (addr, data, be)
        self.words = 0                  # words taken (on chip) or acknowledged (AXI4)
        self.events = []                # (ack event, words written before it left)
        self.done = []
        self.done_with_event = 0        # done pulses in the cycle an event left
        self.reissue = []
        self.pulses = dict.fromkeys(READ_COUNTERS, 0)
        self._unacked = 0

    async def run(self, ctx):
        p, rng = self.p, self.rng
        names = READ_COUNTERS
        while True:
            o_ready = rng.random() >= self.backpressure
            ack_ready = rng.random() >= self.backpressure
            ctx.set(p.o.ready, o_ready)
            ctx.set(p.ack.ready, ack_ready)
            durable = 0
            if self.acked_writes and self._unacked and rng.random() < 0.15:
                durable = min(self._unacked, rng.randint(1, 40))
                ctx.set(p.mem_durable, durable)
            elif self.acked_writes:
                ctx.set(p.mem_durable, 0)
            (_, _, ov, op, av, ap, dv, dp, rv, rp, hv, hr, kv, kr, tv, tr, uv, up,
             *pulses) = await ctx.tick().sample(
                p.o.valid, p.o.payload, p.ack.valid, p.ack.payload, p.done.valid, p.done.payload,
                p.reissue.valid, p.reissue.payload, p.hdr.valid, p.hdr.ready, p.ack_in.valid,
                p.ack_in.ready, p.timer.valid, p.timer.ready, p.touch.valid, p.touch.payload,
                *(getattr(p, name) for name in names))
            self.cycle += 1
            before = self.words
            if av and ack_ready:
                self.events.append((meta_dict(ap), before))
            if dv:
                # (the pulses of an event that completes several READs come in the cycles
                # before it leaves; the last one, or the only one, as it leaves)
                self.done.append(meta_dict(dp))
                self.done_with_event += av and ack_ready
            if rv:
                # (the reissue of a hole leaves without an acknowledgement)
                assert (av and ack_ready) != bool(rp.send), \
                    "a go-back-N reissue pulses only as its event leaves"
                r = meta_dict(rp)
                # (no generator's atomics here: their bit stays clear)
                assert r.pop("gen") == 0
                r.pop("local_addr")
                self.reissue.append(r)
            if ov and o_ready:
                self.writes.append((int(op.addr), int(op.data), int(op.be)))
                if self.acked_writes:
                    self._unacked += 1
                else:
                    self.words += 1
            if self.acked_writes:
                self._unacked -= durable
                self.words += durable
            if hv and hr:
                self.taken.append(("hdr", self.counts["hdr"]))
                self.counts["hdr"] += 1
            if kv and kr:
                assert not (hv and hr), "one input per cycle"
                self.taken.append(("ack", self.counts["ack"]))
                self.counts["ack"] += 1
            if tv and tr:
                assert not (hv and hr) and not (kv and kr), "one input per cycle"
                self.taken.append(("timer", self.counts["timer"]))
                self.counts["timer"] += 1
            if uv:
                self.touches.append((int(up.qp), int(up.poke)))
            for name, v in zip(names, pulses):
                self.pulses[name] += v


def words_of(addr, n, B):
    return (addr + n - 1) // B - addr // B + 1 if n else 0


def run_loop(width, *, seed, acked_writes=False, max_rd=4, rounds=10, clean=8, p_fault=0.06,
             idle=0.2, backpressure=0.2, atomics=None):
    """The closed loop (module documentation); with ``atomics`` (the local byte order) a
    quarter of the new requests are atomics (FETCH_ADD or COMPARE_SWAP: 8 bytes, one PSN, at a
    word address), answered by ATOMIC_ACKNOWLEDGEs, spoiled as the READ responses are."""
    rng = random.Random(seed)
    B = width // 8
    top = Top(width, max_rd, acked_writes, atomics)
    track, place = top.track, top.place
    model = ReadRequesterModel(QPS, max_rd, atomics or "little")
    mon = Monitor(place, random.Random(seed + 1), backpressure=backpressure,
                  acked_writes=acked_writes)
    beats = StreamDriver(place.i, width, idle=idle, seed=seed + 2)
    state = {"round": -1, "pkts": [], "hdrs": [], "acks": [], "timers": [], "over": False}
    next_psn = [rng.randrange(PSN_MOD) for _ in range(QPS)]
    next_psn[0] = PSN_MOD - 5                       # wraps around soon
    reads = {}                                       # wr_id -> READ
    ranges = []                                      # local ranges of every READ
    local = [0]
    image = {}                                       # byte address -> byte, as written
    seen = {v: 0 for v in READ_COUNTERS} | {"poke": 0}
    outcome = {"fail": set()}
    sends = []                                       # the reissues the placement sends itself
    t_rng = random.Random(seed + 6)                  # the hole timers' expiries
    forged = set()                                   # (QP, PSN) of the responses too many

    def new_read(qp):
        pmtu = rng.choice([256, 256, 512])
        length = rng.choice([0, 1, pmtu - 1, pmtu, pmtu + 1, rng.randint(1, 3 * pmtu + 7)])
        atomic = rng.choice([1, 2]) if atomics and rng.random() < 0.25 else 0
        if atomic:
            length = 8
        if local[0] + length + (2 * B if atomic else 0) + 64 > MEM:
            return None
        addr = local[0] + rng.randrange(64)
        if atomic:
            addr += -addr % B                   # (a word address, as the requester's are)
        local[0] = addr + length
        first = next_psn[qp]
        next_psn[qp] = (first + max(1, -(-length // pmtu)) + rng.choice([0, 0, 1, 3])) % PSN_MOD
        va = rng.randrange(len(REMOTE) - length)
        r = {"qp": qp, "wr_id": len(reads) + 1, "local": addr, "length": length,
             "first": first, "pmtu": pmtu, "va": va - va % 8 if atomic else va,
             "state": "out", "atomic": atomic}
        reads[r["wr_id"]] = r
        ranges.append((addr, addr + length))
        return r

    def issue_rec(r, new, psn):
        return {"qp": r["qp"], "new": int(new), "wr_id": r["wr_id"], "local_addr": r["local"],
                "length": r["length"], "first": r["first"], "psn": psn,
                "pmtu_log2": r["pmtu"].bit_length() - 1, "va": VA_BASE + r["va"],
                "atomic": r["atomic"]}

    async def drive_beats(ctx):
        seen_round = -1
        while not state["over"]:
            if state["round"] > seen_round:
                seen_round = state["round"]
                await beats.send(ctx, state["pkts"])
            else:
                await ctx.tick()

    def record_driver(port, key, rng_seed, p_idle):
        """A testbench sending each round's records ``state[key]`` on ``port``."""
        async def drive(ctx):
            seen_round, r = -1, random.Random(rng_seed)
            while not state["over"]:
                if state["round"] > seen_round:
                    seen_round = state["round"]
                    await send_records(ctx, port, state[key], r, p_idle)
                else:
                    await ctx.tick()
        return drive

    drive_hdrs = record_driver(place.hdr, "hdrs", seed + 3, idle)
    drive_acks = record_driver(place.ack_in, "acks", seed + 4, 0.9)
    drive_timers = record_driver(place.timer, "timers", seed + 5, 0.95)

    async def wait(ctx, get, target):
        while get() != target:
            await ctx.tick()

    async def orchestrate(ctx):
        for rnd in range(rounds + clean):
            p = p_fault if rnd < rounds else 0.0
            # flushes: the QPs a NAK failed
            for qp in sorted(outcome["fail"]):
                for r in reads.values():
                    if r["qp"] == qp and r["state"] == "out":
                        r["state"] = "failed"
                ctx.set(track.flush.payload, qp)
                ctx.set(track.flush.valid, 1)
                await ctx.tick().until(track.flush.ready)
                ctx.set(track.flush.valid, 0)
                model.flush(qp)
            outcome["fail"] = set()
            # the requests the placement sent itself (a hole's reissue: the rest of the head
            # READ, answered without telling the table); for the other QPs, most of the time
            # for these too, reissues (go-back-N from the expected PSN: a gap or a timeout);
            # then new READs
            requests, selective = [], set()
            for g in sends:
                r = reads[g.wr_id]
                if r["state"] == "out" and rng.random() < 0.8:
                    assert g.remote_va == VA_BASE + r["va"] + g.offset
                    selective.add(r["qp"])
                    requests.append((None, {"read": r, "psn": g.psn}))
            for qp in range(QPS):
                outs = [r for r in reads.values() if r["qp"] == qp and r["state"] == "out"]
                for n, r in enumerate(outs if qp not in selective or rng.random() < 0.2 else ()):
                    psn = model.expected(qp) if n == 0 else r["first"]
                    requests.append((issue_rec(r, False, psn), {"read": r, "psn": psn}))
                for _ in range(max_rd - len(outs)):
                    if rng.random() < 0.7 and (r := new_read(qp)) is not None:
                        requests.append((issue_rec(r, True, r["first"]),
                                         {"read": r, "psn": r["first"]}))
            for rec, _ in requests:
                if rec is None:
                    continue
                ctx.set(track.issue.payload, rec)
                ctx.set(track.issue.valid, 1)
                assert not ctx.get(track.overflow)
                assert model.issue(rec["qp"], wr_id=rec["wr_id"], local_addr=rec["local_addr"],
                                   length=rec["length"], first=rec["first"],
                                   pmtu=1 << rec["pmtu_log2"], new=bool(rec["new"]),
                                   psn=rec["psn"], remote_va=rec["va"], atomic=rec["atomic"])
                await ctx.tick()
            ctx.set(track.issue.valid, 0)
            # the peer's answers, the QPs interleaved, and acknowledgements among them
            per_qp = [deque() for _ in range(QPS)]
            for _, req in requests:
                per_qp[req["read"]["qp"]].extend(spoil(answer(req, rng), rng, p, bool(atomics)))
            resps = []
            while any(per_qp):
                resps.append(rng.choice([q for q in per_qp if q]).popleft())
            forged.update((x["qp"], x["psn"]) for x in resps if x.get("forged"))
            acks = []
            for _ in range(rng.randint(0, 6) if p else 0):
                qp = rng.randrange(QPS)
                outs = model.outstanding(qp)
                base = outs[0].first if outs else next_psn[qp]
                acks.append({"qp": qp, "psn": (base + rng.randint(-3, 4)) % PSN_MOD,
                             "syndrome": rng.choice([0x1F, 0x03, 0x60, 0x21, 0x62]),
                             "msn": rng.randrange(1 << 24)})
            # (a hole timer's expiry: of any QP, a hole open or not)
            timers = [{"qp": t_rng.randrange(QPS), "poke": int(t_rng.random() < 0.3),
                       "again": int(t_rng.random() < 0.3)}
                      for _ in range(t_rng.choice([0, 0, 1, 2]))]
            built = [datagram(x["qp"], x["op"], x["psn"], x["payload"], x["syn"], x["msn"])
                     for x in resps]
            mon.taken, mon.counts = [], {"hdr": 0, "ack": 0, "timer": 0}
            n_touch = len(mon.touches)
            n_events, n_done, n_reissue = len(mon.events), len(mon.done), len(mon.reissue)
            n_with = mon.done_with_event
            n_writes = len(mon.writes)
            state.update(pkts=[Packet(d) for d, _ in built], hdrs=[h for _, h in built],
                         acks=acks, timers=timers, round=rnd)
            await wait(ctx, lambda: (mon.counts["hdr"], mon.counts["ack"], mon.counts["timer"]),
                       (len(built), len(acks), len(timers)))
            # the model, in the order the inputs were taken
            outs = []
            for kind, k in mon.taken:
                if kind == "hdr":
                    x = resps[k]
                    outs.append(model.response(x["qp"], x["op"], x["psn"], x["payload"],
                                               x["syn"], 0 if x["op"] == MIDDLE else x["msn"]))
                elif kind == "ack":
                    a = acks[k]
                    outs.append(model.ack(a["qp"], a["syndrome"], a["psn"], a["msn"]))
                else:
                    t = timers[k]
                    outs.append(model.hole_timer(t["qp"], bool(t["poke"]), bool(t["again"])))
            want_events = [o for o in outs if o.ack is not None]
            await wait(ctx, lambda: len(mon.events), n_events + len(want_events))
            # (responses placed after a hole have no event, a hole's reissue no acknowledgement:
            # wait for their words and for the reissues too)
            await wait(ctx, lambda: len(mon.reissue), n_reissue + sum(1 for o in outs if o.gap))
            await wait(ctx, lambda: len(mon.writes),
                       n_writes + sum(words_of(a, len(d), B) for o in outs for a, d in o.writes))
            await ctx.tick().repeat(40)
            # (each response and each expiry restarts its QP's hole timer, in the order taken,
            # or expires it at once: the model's poke)
            assert mon.touches[n_touch:] == [
                (resps[k]["qp"] if kind == "hdr" else timers[k]["qp"], int(o.poke))
                for (kind, k), o in zip(mon.taken, outs) if kind != "ack"], \
                f"round {rnd}: touches"
            got = mon.events[n_events:]
            assert [e for e, _ in got] == [
                {"qp": o.ack.qp, "syndrome": o.ack.syndrome, "psn": o.ack.psn, "msn": o.ack.msn}
                for o in want_events], f"round {rnd}: events for the retry engine"
            assert [d["qp"] for d in mon.done[n_done:]] == \
                [reads[w]["qp"] for o in outs for w in o.done], f"round {rnd}: READs done"
            assert mon.done_with_event - n_with == sum(1 for o in outs if o.done)
            assert mon.reissue[n_reissue:] == [
                {"qp": o.gap.qp, "wr_id": o.gap.wr_id, "psn": o.gap.psn,
                 "offset": o.gap.offset, "length": o.gap.length, "va": o.gap.remote_va,
                 "send": int(o.gap.send), "atomic": o.gap.atomic}
                for o in outs if o.gap is not None], f"round {rnd}: reissues"
            sends[:] = [o.gap for o in outs if o.gap is not None and o.gap.send]
            assert mon.pulses == {k: model.counters[k] for k in READ_COUNTERS}, \
                f"round {rnd}: verdicts"
            # every event left once the words of the responses up to it were written
            need, words = [], 0
            for o in outs:
                for addr, data in o.writes:
                    words += words_of(addr, len(data), B)
                if o.ack is not None:
                    need.append(words)
            assert all(w >= n for (_, w), n in zip(got, need)), \
                f"round {rnd}: an event left before the payload before it was written"
            # the bytes written: exactly the model's, inside the READs' local ranges
            want_bytes = {}
            for o in outs:
                for addr, data in o.writes:
                    want_bytes.update({addr + i: b for i, b in enumerate(data)})
            got_bytes = {}
            for addr, data, be in mon.writes[n_writes:]:
                word = data.to_bytes(B, "little")
                for i in range(B):
                    if be >> i & 1:
                        assert addr * B + i not in got_bytes, "a byte written twice"
                        got_bytes[addr * B + i] = word[i]
            assert got_bytes == want_bytes, f"round {rnd}: bytes written"
            assert all(any(lo <= a < hi for lo, hi in ranges) for a in got_bytes)
            image.update(got_bytes)
            assert ctx.get(track.busy) == sum(1 << q for q in range(QPS) if model.outstanding(q))
            for o in outs:
                seen[o.verdict] += 1
                seen["poke"] += o.poke
                for w in o.done:
                    reads[w]["state"] = "done"
                if o.verdict == "nak":
                    outcome["fail"].add(o.ack.qp)
        state["over"] = True

    run_sim(top, testbenches=[orchestrate, drive_beats, drive_hdrs, drive_acks, drive_timers],
            processes=[mon.run], deadline_cycles=3_000_000)
    assert mon.pulses == {k: model.counters[k] for k in READ_COUNTERS}
    for r in reads.values():
        assert r["state"] in ("done", "failed"), f"READ {r['wr_id']} never completed"
        # (a response too many whose PSN, opcode and length fit the next READ is that READ's
        # response to any requester: those READs are written, but not with the peer's bytes)
        npsn = max(1, -(-r["length"] // r["pmtu"]))
        if any((r["qp"], (r["first"] + k) % PSN_MOD) in forged for k in range(npsn)):
            continue
        if r["state"] == "done":
            assert all(r["local"] + i in image for i in range(r["length"]))
            got = bytes(image[r["local"] + i] for i in range(r["length"]))
            want = REMOTE[r["va"]:r["va"] + r["length"]]
            if r["atomic"] and atomics == "little":
                want = want[::-1]               # (the original value as a host CPU stores it)
            assert got == want, f"READ {r['wr_id']}: data"
    return seen, reads


@pytest.mark.parametrize("width, seed, acked_writes", [
    (64, 1, False), full(512, 2, False), full(64, 3, True), (512, 4, True), full(128, 5, False),
])
def test_closed_loop(width, seed, acked_writes):
    seen, reads = run_loop(width, seed=seed, acked_writes=acked_writes)
    # every verdict came up, and most READs completed
    assert all(seen[v] > 0 for v in READ_COUNTERS), seen
    done = sum(r["state"] == "done" for r in reads.values())
    assert done > 40 and done > 0.7 * len(reads), (done, len(reads))


@pytest.mark.parametrize("width, seed, atomics", [(64, 21, "little"), (256, 22, "big")])
def test_closed_loop_with_atomics(width, seed, atomics):
    """Atomics among the READs: their ATOMIC_ACKNOWLEDGEs placed (the original value in the
    memory's byte order), spoiled and recovered as READ responses are, a READ response for an
    atomic and an ATOMIC_ACKNOWLEDGE for a READ refused (``opcode``), all as the model says."""
    seen, reads = run_loop(width, seed=seed, atomics=atomics)
    assert all(seen[v] > 0 for v in READ_COUNTERS), seen
    atomic = [r for r in reads.values() if r["atomic"]]
    assert len(atomic) > 20 and sum(r["state"] == "done" for r in atomic) > 0.6 * len(atomic)


def test_sixteen_outstanding():
    """Sixteen READs per QP and more faults: several holes open at once on a QP."""
    seen, reads = run_loop(128, seed=13, max_rd=16, rounds=8, clean=8, p_fault=0.2)
    assert seen["hole"] > 5 and seen["ahead"] > 3 and seen["ack_hold"] > 0, seen
    assert seen["reask"] > 0 and seen["poke"] > 0, seen
    assert sum(r["state"] == "done" for r in reads.values()) > 200


def test_max_rd_atomic_one():
    """One READ at a time per QP: the next one waits for the last response of the one before."""
    seen, reads = run_loop(64, seed=9, max_rd=1, rounds=6, clean=6, idle=0.0, backpressure=0.0)
    assert seen["good"] > 20


def test_parameters():
    raises(ValueError, "width must be one of", lambda: ReadPlace(96, 10))
    raises(ValueError, "addr_width must be 1..32", lambda: ReadPlace(64, 33))
    raises(ValueError, "events must be from 4 to 1024, not 2", lambda: ReadPlace(64, 10, events=2))
    raises(TypeError, "act_depth must be an integer", lambda: ReadPlace(64, 10, act_depth=None))


def run_directed(width, reads, resps, *, idle=0.0, backpressure=0.0, seed=0):
    """Issue ``reads`` (new READs), then send ``resps`` (``(qp, opcode, psn, payload)``, AETH an
    ACK); returns the monitor once every event has left, and the cycles the beats were taken."""
    top = Top(width, 16, False)
    track, place = top.track, top.place
    mon = Monitor(place, random.Random(seed), backpressure=backpressure, acked_writes=False)
    beats = StreamDriver(place.i, width, idle=idle, seed=seed + 1)
    built = [datagram(qp, op, psn, payload, 0x1F, 0) for qp, op, psn, payload in resps]
    taken, sent = [], []

    async def issue(ctx):
        for r in reads:
            ctx.set(track.issue.payload, {"new": 1, "psn": r["first"], **r})
            ctx.set(track.issue.valid, 1)
            await ctx.tick()
        ctx.set(track.issue.valid, 0)
        await send_records(ctx, place.hdr, [h for _, h in built], random.Random(seed), idle)
        while mon.counts["hdr"] < len(built) or not sent:
            await ctx.tick()
        await ctx.tick().repeat(100)

    async def send(ctx):
        await ctx.tick().repeat(len(reads) + 1)
        await beats.send(ctx, [Packet(d) for d, _ in built])
        sent.append(True)

    async def watch(ctx):
        cycle = 0
        async for _, _, v, r in ctx.tick().sample(place.i.valid, place.i.ready):
            cycle += 1
            if v and r:
                taken.append(cycle)

    run_sim(top, testbenches=[issue, send], processes=[mon.run, watch], deadline_cycles=100_000)
    return mon, taken


@pytest.mark.parametrize("width", [64, 512])
def test_bad_responses(width):
    """One READ of 1000 bytes in 256-byte packets (PSNs 100..103) into local bytes 0x1003..: the
    bad responses are dropped and counted, the good ones written at their place (one after a
    lost response opens a hole: the rest of the READ is asked for again from the missing PSN,
    alone, and that request's responses fill it), the READ done once; nothing is written
    outside its 1000 bytes."""
    B = width // 8
    LOC, VA = 0x1003, 0x2001
    data = REMOTE[VA:VA + 1000]
    read = {"qp": 1, "wr_id": 7, "local_addr": LOC, "length": 1000, "first": 100, "pmtu_log2": 8,
            "va": VA_BASE + VA}
    resps = [
        (1, MIDDLE, 100, data[:256]),           # opcode: not at the first PSN
        (1, FIRST, 100, data[:255]),            # length: too short
        (1, FIRST, 104, data[:256]),            # unknown: after the READ's last PSN
        (0, ONLY, 100, b""),                    # unknown: QP 0 has no READ
        (1, FIRST, 100, data[:256]),            # good
        (1, FIRST, 100, data[:256]),            # duplicate
        (1, LAST, 102, data[512:768]),          # hole: 101 is missing, asked for again
        (1, MIDDLE, 102, data[512:768]),        # gap: in the hole (asked for again)
        (1, MIDDLE, 101, data[256:512] + b"x"),  # length: too long
        (1, ONLY, 101, data[256:512]),          # opcode: 101 is not the READ's last
        (1, FIRST, 101, data[256:512]),         # good: the request from 101 starts FIRST
        (1, MIDDLE, 102, data[512:768]),        # good
        (1, LAST, 103, data[768:]),             # good: the hole is filled, the READ is done
        (1, LAST, 103, data[768:]),             # unknown (one too many: no READ left)
        (1, ONLY, 104, data[:10]),              # unknown (one too many)
    ]
    mon, _ = run_directed(width, [read], resps, idle=0.3, backpressure=0.3, seed=width)
    assert mon.pulses == {"good": 4, "gap": 1, "duplicate": 1, "unknown": 4, "opcode": 2,
                          "length": 2, "nak": 0, "ack_pass": 0, "ack_gap": 0, "hole": 1,
                          "ahead": 0, "ack_hold": 0, "reask": 0, "idle": 0, "stall": 0}
    assert [(e["syndrome"], e["psn"]) for e, _ in mon.events] == [(0x1F, 100), (0x1F, 103)]
    assert mon.done == [{"qp": 1}]
    assert mon.reissue == [{"qp": 1, "wr_id": 7, "psn": 101, "offset": 256, "length": 744,
                            "va": VA_BASE + VA + 256, "send": 1, "atomic": 0}]
    written = {}
    for addr, word, be in mon.writes:
        for i in range(B):
            if be >> i & 1:
                written[addr * B + i] = word.to_bytes(B, "little")[i]
    assert sorted(written) == list(range(LOC, LOC + 1000))
    assert bytes(written[LOC + i] for i in range(1000)) == data


def test_throughput():
    """A 64 KiB READ in 4096-byte responses at 512 bits, no idle cycles, no backpressure: the
    beats are taken one per cycle, but for one cycle per response where its payload's tail
    spills into one more word, and a few at the start."""
    LOC, N = 0x40, 16
    read = {"qp": 2, "wr_id": 1, "local_addr": LOC, "length": N * 4096, "first": 0,
            "pmtu_log2": 12}
    resps = [(2, FIRST if k == 0 else LAST if k == N - 1 else MIDDLE, k,
              REMOTE[k * 4096:(k + 1) * 4096]) for k in range(N)]
    mon, taken = run_directed(512, [read], resps)
    beats = sum(-(-(HDR_LEN + (4 if k in (0, N - 1) else 0) + 4096) // 64) for k in range(N))
    assert len(taken) == beats and mon.done == [{"qp": 2}]
    assert taken[-1] - taken[0] + 1 <= beats + N + 4, (taken[-1] - taken[0] + 1, beats)


def test_hole_queue_full():
    """Eleven READs of two responses, the first response of ten of them lost: nine holes (the
    current one and a full queue), the tenth loss after the front with no room (go-back-N from
    the front once the holes are filled); the holes' requests answered in order. Verdicts,
    events, reissues and bytes written are the model's."""
    B = 8
    reads = [{"qp": 1, "wr_id": n, "local_addr": 0x400 * n + 3, "length": 300, "first": 2 * n,
              "pmtu_log2": 8, "va": VA_BASE + 0x200 * n} for n in range(11)]

    def resp(n, k, op):
        return (1, op, 2 * n + k, REMOTE[0x200 * n + 256 * k:0x200 * n + min(300, 256 * k + 256)])
    resps = [resp(n, 1, LAST) for n in range(10)] + [resp(9, 0, FIRST), resp(9, 1, LAST)]
    resps += [x for n in range(9) for x in (resp(n, 0, FIRST), resp(n, 1, LAST))]
    model = ReadRequesterModel(QPS, 16)
    for r in reads:
        model.issue(1, wr_id=r["wr_id"], local_addr=r["local_addr"], length=r["length"],
                    first=r["first"], pmtu=256, remote_va=r["va"])
    outs = [model.response(qp, op, psn, data, 0x1F, 0) for qp, op, psn, data in resps]
    assert [o.verdict for o in outs[:12]] == ["hole"] * 9 + ["gap", "ahead", "ahead"]
    mon, _ = run_directed(64, reads, resps, idle=0.2, backpressure=0.2, seed=3)
    assert mon.pulses == {k: model.counters[k] for k in READ_COUNTERS}
    assert [e for e, _ in mon.events] == [
        {"qp": o.ack.qp, "syndrome": o.ack.syndrome, "psn": o.ack.psn, "msn": o.ack.msn}
        for o in outs if o.ack is not None]
    assert mon.events[-1][0]["syndrome"] == 0x60 and mon.events[-1][0]["psn"] == 20
    assert mon.reissue == [
        {"qp": 1, "wr_id": o.gap.wr_id, "psn": o.gap.psn, "offset": o.gap.offset,
         "length": o.gap.length, "va": o.gap.remote_va, "send": int(o.gap.send), "atomic": 0}
        for o in outs if o.gap is not None]
    assert len(mon.done) == sum(len(o.done) for o in outs) == 10
    written = {}
    for addr, word, be in mon.writes:
        for i in range(B):
            if be >> i & 1:
                written[addr * B + i] = word.to_bytes(B, "little")[i]
    want = {a + i: b for o in outs for a, d in o.writes for i, b in enumerate(d)}
    assert written == want
