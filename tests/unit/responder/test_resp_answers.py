"""The whole :class:`Responder`'s answers beyond its decisions: CNPs for requests that arrive
marked ECN CE (every one with an interval of 0, at the notification point's rate with an
interval, none for requests that are not from a QP's peer, parsed with scapy), and ACKs by
count (``ack_every``) against the NIC model's strict responder with the same setting. The NIC
model's requester sends multi-packet WRITEs over three QPs through a link that duplicates and
loses frames; at 64 and 512 bits. The whole endpoint's CNPs, taken by the strict NIC model:
``tests/test_cocotb_congestion.py``."""

import dataclasses
import random

import pytest
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.l2 import Ether

from rocegen.gateware.roce.layouts import QPN_BASE
from rocegen.sim.models import icrc
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.responder.responder import CNP_DSCP, NotificationPoint
from rocegen.sim.models.rnic import IDEAL, Access, Rnic
from rocegen.sim.testing.amaranth_streams import StreamCollector, StreamDriver
from rocegen.sim.testing.harness import run_sim, shared
from rocegen.sim.testing.roce_tops import ResponderTop
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire.addr import parse_ip
from tests.tiers import full
from tests.unit.responder.test_responder import open_qps

QPS = 3                         # QPs the host uses; the table has one more, left in RESET
HOST_QPN = 0x21
REGION = 0x8000
MEM = QPS * REGION
PMTU = 256
SPORT = 0xC200
VERDICTS = ("executed", "duplicate", "seq_nak", "seq_drop", "rnr", "invalid", "access",
            "drop_qp", "drop_state", "drop_peer", "drop_pkey", "drop_error")


def rkey(k):
    return 0x3300 + k


def ip_checksum(f):
    f[24:26] = b"\0\0"
    s = sum(int.from_bytes(f[14 + i:16 + i], "big") for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    f[24:26] = (~s & 0xFFFF).to_bytes(2, "big")


def mark_ce(frame):
    """The frame as a switch marks it: IPv4 ECN 0b11, the header checksum redone (the ICRC
    does not cover the TOS byte)."""
    f = bytearray(frame)
    f[15] |= 0b11
    ip_checksum(f)
    assert Ether(bytes(f))["IP"].tos & 3 == 3 and icrc.check(bytes(f))
    return bytes(f)


def foreign(frame, rng):
    """A CE-marked copy of a request that is not from a QP's peer: to the QP left in RESET, or
    from another IPv4 source (ICRC redone); the responder drops it and sends no CNP."""
    f = bytearray(mark_ce(frame))
    if rng.random() < 0.5:
        f[14 + 20 + 8 + 5:14 + 20 + 8 + 8] = (QPN_BASE + QPS).to_bytes(3, "big")
        why = "drop_state"
    else:
        f[14 + 15] ^= 0x40                     # the source address's last byte
        ip_checksum(f)
        why = "drop_peer"
    return icrc.append(bytes(f[:-4])), why


def scenario(seed, *, messages=30, dup=0.0, loss=0.0, ce=0.0, foreign_p=0.0, ack_every=None):
    """The frames the reference responder takes (each ``(frame, qp, marked, reference)``; the
    foreign ones only go to the gateware) and the reference's answers."""
    rng = random.Random(seed)
    host = Rnic(HOST_MAC, HOST_IP, behaviour=IDEAL)
    ref = Rnic(FPGA_MAC, FPGA_IP, strict=True,
               behaviour=dataclasses.replace(IDEAL, ack_every=ack_every))
    psns = [rng.getrandbits(24) for _ in range(QPS)]
    for k in range(QPS):
        host.create_qp(HOST_QPN + k, peer_qpn=QPN_BASE + k, peer_ip=FPGA_IP, peer_mac=FPGA_MAC,
                       epsn=0, pmtu=PMTU, sq_psn=psns[k], timeout=1, retry_cnt=7)
        ref.create_qp(QPN_BASE + k, peer_qpn=HOST_QPN + k, peer_ip=HOST_IP, peer_mac=HOST_MAC,
                      epsn=psns[k], pmtu=PMTU)
        ref.register_mr(k * REGION, REGION, rkey(k), Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    for _ in range(messages):
        k = rng.randrange(QPS)
        n = rng.choice([0, 4, PMTU, 3 * PMTU + 1, 7 * PMTU, rng.randrange(8 * PMTU)])
        host.post_send(HOST_QPN + k, "WRITE", data=rng.randbytes(n),
                       remote_addr=k * REGION + rng.randrange(REGION - n + 1), rkey=rkey(k))
    frames, answers = [], []
    now = 0
    for _ in range(100_000):
        out = host.next_frames(now, budget=1)
        if not out:
            if not host.send_outstanding():
                break
            due = host.next_due()
            now = max(now + 100, due if due is not None else now + 100_000)
            continue
        now += 50
        for f in out:
            if rng.random() < loss:
                continue
            for _ in range(2 if rng.random() < dup else 1):
                qp = Ether(f)[BTH].dqpn - QPN_BASE
                marked = rng.random() < ce
                g = mark_ce(f) if marked else f
                frames.append((g, qp, marked, None))
                for a in ref.receive(g):
                    answers.append(a)
                    host.receive(a, now)
                if rng.random() < foreign_p:
                    frames.append((*foreign(f, rng), True, "foreign"))
    assert not host.send_outstanding(), "the host's messages did not all complete"
    return frames, answers, psns


def run_dut(width, frames, psns, *, backpressure=0.0, seed=0, cfg_interval=None, **params):
    """Every frame into the responder (at most two waiting); the answers out, the cycle of each
    decision and the pulses counted. ``backpressure``: on ``mem`` at random, on ``tx`` in
    stretches (held for 1500 cycles, then at random for 300, until every request is decided)."""
    top = shared(ResponderTop, width, QPS + 1, MEM,
                 config_init=[{"mr": {"rkey": rkey(k), "base": k * REGION,
                                      "length": REGION, "write": 1, "read": 0},
                               "rnr_timer": 1} for k in range(QPS + 1)], **params)
    dut = top.resp
    drv = StreamDriver(dut.i, width, idle=0.1, seed=seed)
    tx = StreamCollector(dut.tx, width, backpressure=backpressure, seed=seed + 1)
    names = VERDICTS + ("overflow", "malformed", "cnp_sent", "cnp_suppressed", "cnp_dropped")
    counts = dict.fromkeys(names, 0)
    decisions = []              # (cycle, verdict) of each request decided, in order

    async def count(ctx):
        cycle = 0
        mem_rng = random.Random(seed + 2)
        async for _, _, *vals in ctx.tick().sample(*(getattr(dut, n) for n in names)):
            ctx.set(dut.mem.ready, mem_rng.random() >= backpressure)
            ctx.set(dut.cpl.ready, 1)
            if backpressure and len(decisions) < len(frames):
                tx.backpressure = 1.0 if cycle % 1800 < 1500 else backpressure
            cycle += 1
            for name, v in zip(names, vals):
                counts[name] += v
                if v and name in VERDICTS:
                    decisions.append((cycle, name))

    async def tb(ctx):
        await open_qps(ctx, top, dut, psns[:QPS], pmtu_log2=PMTU.bit_length() - 1, sport=SPORT,
                       dscp=26, host_qpn=HOST_QPN)
        if cfg_interval is not None:
            ctx.set(dut.cnp_cfg.payload, {"interval": cfg_interval})
            ctx.set(dut.cnp_cfg.valid, 1)
            await ctx.tick()
            ctx.set(dut.cnp_cfg.valid, 0)
        for fed, (frame, *_) in enumerate(frames):
            while len(decisions) < fed - 1:
                await ctx.tick()
            await drv.send(ctx, [Packet(icrc.datagram(frame)[:-4])])
        while len(decisions) < len(frames):
            await ctx.tick()
        tx.backpressure = 0.0
        await ctx.tick().repeat(300)

    run_sim(top, testbenches=[tb], processes=[count, tx.run], deadline_cycles=2_000_000)
    assert counts["overflow"] == counts["malformed"] == 0
    assert len(decisions) == len(frames)
    return tx, decisions, counts


def split(tx):
    """The ACKNOWLEDGEs' fields and the CNPs' QP indexes, each checked field by field."""
    acks, cnps = [], []
    for p in tx.packets:
        b = BTH(p.data + bytes(4))
        u = p.meta["udp"]
        assert b.pkey == 0xFFFF and u["dst_ip"] == parse_ip(HOST_IP) and u["dst_port"] == 4791
        if b.opcode == 0x81:
            k = b.dqpn - HOST_QPN
            assert 0 <= k < QPS and len(p.data) == 28 and b.becn == 1 and b.psn == 0
            assert bytes(b[CNPPadding]) == bytes(16)
            assert u["src_port"] == SPORT + k and u["dscp"] == CNP_DSCP and u["length"] == 32
            cnps.append(k)
        else:
            assert b.opcode == 0x11 and len(p.data) == 16 and u["dscp"] == 26
            acks.append((b.dqpn, b.psn, b[AETH].syndrome, b[AETH].msn))
    return acks, cnps


def check_acks(got, answers):
    """Every ACKNOWLEDGE the reference's; only ACKs may be missing, each merged into the next
    answer of its QP, an ACK (or the same ACK as the one before it of its QP, which the match
    below has taken as the one sent)."""
    want = [(Ether(a)[BTH].dqpn, Ether(a)[BTH].psn, Ether(a)[AETH].syndrome, Ether(a)[AETH].msn)
            for a in answers]
    j = 0
    sent = {}                   # QP -> the last answer of it matched
    for g in got:
        while j < len(want) and want[j] != g:
            w = want[j]
            later = [x for x in want[j + 1:] if x[0] == w[0]]
            assert w[2] & 0x60 == 0 and (sent.get(w[0]) == w or
                                         (later and later[0][2] & 0x60 == 0)), f"{w} missing"
            j += 1
        assert j < len(want), f"answer {g} is not the reference's"
        sent[g[0]] = g
        j += 1
    rest = want[j:]
    assert all(w[2] & 0x60 == 0 and sent.get(w[0]) == w for w in rest), \
        f"answers missing at the end: {rest}"


@pytest.mark.parametrize("width, seed, bp", [(64, 1, 0.0), full(512, 2, 0.0), full(64, 3, 0.6),
                                             (512, 4, 0.7)])
def test_cnp_for_every_mark(width, seed, bp):
    """Interval 0 (set at run time over the generator's 4 us): a CNP for every CE-marked
    request from a QP's peer, duplicates and NAKed ones included; none for the foreign ones.
    With backpressure on ``tx`` some may be dropped, and are counted."""
    frames, answers, psns = scenario(seed, dup=0.2, loss=0.05, ce=0.3, foreign_p=0.1)
    tx, decisions, counts = run_dut(width, frames, psns, backpressure=bp, seed=seed,
                                    cfg_interval=0)
    acks, cnps = split(tx)
    check_acks(acks, answers)
    marked = [qp for _, qp, m, why in frames if m and why is None]
    verdicts = [v for _, v in decisions]
    assert sum(m and why is None and v != "executed" for (_, _, m, why), v in
               zip(frames, verdicts)) >= 3, "no marked duplicate or NAKed request"
    assert all(v in ("drop_state", "drop_peer") for (*_, why), v in zip(frames, verdicts)
               if why == "foreign")
    assert counts["cnp_suppressed"] == 0
    assert counts["cnp_sent"] == len(cnps)
    assert len(cnps) + counts["cnp_dropped"] == len(marked) > 20
    if bp == 0.0:
        assert cnps == marked
    else:
        assert counts["cnp_dropped"] > 0        # the case is exercised
        it = iter(marked)                       # the CNPs sent: the marks in order, some left out
        assert all(k in it for k in cnps)


@pytest.mark.parametrize("width, seed, interval", [(64, 5, 150), (512, 6, 400),
                                                   (512, 7, (1 << 24) - 1)])
def test_cnp_rate(width, seed, interval):
    """With an interval: the CNPs are those of the notification point's rule replayed on the
    cycles the requests were decided in (each mark decided two cycles after its request)."""
    frames, answers, psns = scenario(seed, dup=0.05, ce=0.6, foreign_p=0.05)
    tx, decisions, counts = run_dut(width, frames, psns, seed=seed, cnp_interval=interval)
    acks, cnps = split(tx)
    check_acks(acks, answers)
    model = NotificationPoint(interval)
    for (cycle, _), (_, qp, m, why) in zip(decisions, frames):
        if m and why is None:
            model.step(cycle + 2, mark=qp, leaves=model.waiting)
    assert counts["cnp_dropped"] == 0
    assert cnps == model.issued
    assert counts["cnp_suppressed"] == sum(m and why is None for _, _, m, why in frames) - len(cnps)
    assert counts["cnp_suppressed"] > 10
    if interval == (1 << 24) - 1:
        assert sorted(cnps) == sorted({qp for _, qp, m, why in frames if m and why is None})


@pytest.mark.parametrize("width, seed, every", [(64, 8, 1), (512, 9, 3), full(64, 10, 5)])
def test_ack_every(width, seed, every):
    """ACKs by count: the reference's (a ConnectX's ``ack_every``: besides AckReq, an ACK after
    every N requests executed, each answer restarting the count), over a lossy link."""
    frames, answers, psns = scenario(seed, dup=0.05, loss=0.03, ack_every=every)
    tx, decisions, counts = run_dut(width, frames, psns, seed=seed, ack_every=every)
    acks, cnps = split(tx)
    assert not cnps
    # (with ``tx`` always ready no two ACKs of a QP wait together: none is merged)
    assert acks == [(Ether(a)[BTH].dqpn, Ether(a)[BTH].psn, Ether(a)[AETH].syndrome,
                     Ether(a)[AETH].msn) for a in answers]
    # ACKs of requests without AckReq (neither a duplicate's nor a NAK)
    no_req = {(Ether(f)[BTH].dqpn, Ether(f)[BTH].psn) for f, _, _, why in frames
              if not Ether(f)[BTH].ackreq}
    by_count = [a for a in acks if a[2] & 0x60 == 0 and (a[0] - HOST_QPN + QPN_BASE, a[1]) in no_req]
    assert len(by_count) > 3, len(by_count)

