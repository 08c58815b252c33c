"""The RoCEv2 receive path: ACKNOWLEDGE frames of the host NIC model (and CNPs, other opcodes,
damaged, truncated and random datagrams; READ responses, with and without ``reads``) stripped to
the UDP payload as the stack's ``udp_rx`` port delivers them, with a QP table providing the
lookup and the contexts. Every datagram must pulse exactly its verdict's counter, and the good
ACKs must leave as events, in order."""

import random

import pytest
from amaranth.hdl import Elaboratable, Module

from rocegen.gateware.roce.layouts import QPN_BASE, QpState
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.gateware.roce.rx import COUNTERS, RoceRx, Verdict
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.net.checksum import internet_checksum
from rocegen.sim.models.packets import Packet
from rocegen.sim.models.rnic import Rnic
from rocegen.sim.testing.amaranth_streams import StreamDriver, meta_dict
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
from rocegen.wire import headers as H
from rocegen.wire import opcodes as opc
from rocegen.wire.addr import parse_ip, parse_mac
from tests.tiers import full

OTHER_IP = "10.0.0.77"          # a host that is the peer of no QP but QP 3
NUM_QPS = 5
# QP index -> (state, peer)
QPS = {0: (QpState.RTS, HOST_IP), 1: (QpState.RTR, HOST_IP), 2: (QpState.INIT, HOST_IP),
       3: (QpState.RTS, OTHER_IP), 4: (QpState.ERROR, HOST_IP)}
READ_OPS = (0x0D, 0x0E, 0x0F, 0x10)            # READ response FIRST, MIDDLE, LAST, ONLY


def counter(verdict):
    """The pulse output of a verdict: one per verdict in order, PENDING (10) left out."""
    return COUNTERS[verdict.value - (verdict.value > 10)]


class Top(Elaboratable):
    """The receive path with a QP table beside it."""

    def __init__(self, width, reads=False, mads=False):
        self.rx = RoceRx(width, NUM_QPS, reads=reads, ibcm=mads)
        self.table = QpTable(NUM_QPS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = self.rx
        m.submodules.table = t = self.table
        m.d.comb += [
            t.lookup_qpn.eq(rx.lookup_qpn),
            rx.lookup_index.eq(t.lookup_index),
            rx.lookup_valid.eq(t.lookup_valid),
            t.rx_qp.eq(rx.rx_qp),
            rx.rx_context.eq(t.rx_context),
        ]
        return m


def context(state, peer):
    return {"state": state, "peer_ip": parse_ip(peer), "peer_qpn": 0x11, "rkey": 0, "base_va": 0,
            "pmtu_log2": 10, "udp_sport": 0xC000, "dscp": 0, "ecn": 0, "ack_every_log2": 6,
            "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


def udp_rx(frame):
    """An Ethernet frame -> the UDP payload and metadata the stack's ``udp_rx`` port delivers."""
    frame = bytes(frame)
    ip = H.IPV4.unpack(frame[14:34])
    meta = {"eth": H.ETH.unpack(frame[:14]), "ipv4": ip, "udp": H.UDP.unpack(frame[34:42])}
    return frame[42:14 + ip["total_length"]], meta


def datagram(rng, payload_without_icrc, *, src=HOST_IP, icrc=True):
    """A UDP payload from ``src`` (with its ICRC appended) and consistent metadata."""
    udp_len = H.UDP.length + len(payload_without_icrc) + (icrc_model.ICRC_LEN if icrc else 0)
    fields = dict(version=4, ihl=5, dscp=rng.getrandbits(6), ecn=rng.getrandbits(2),
                  total_length=H.IPV4.length + udp_len, identification=rng.getrandbits(16), df=1,
                  ttl=rng.randrange(1, 256), protocol=17, src=parse_ip(src), dst=parse_ip(FPGA_IP))
    ip = H.IPV4.pack(**fields, checksum=internet_checksum(H.IPV4.pack(**fields)))
    udp = H.UDP.pack(src_port=rng.randrange(0xC000, 0x10000), dst_port=H.UDP_PORT_ROCEV2,
                     length=udp_len, checksum=rng.choice([0, rng.getrandbits(16)]))
    payload = bytes(payload_without_icrc)
    if icrc:
        payload += icrc_model.icrc(ip + udp + payload)
    meta = {"eth": H.ETH.unpack(H.ETH.pack(dst=parse_mac(FPGA_MAC), src=parse_mac(HOST_MAC),
                                            ethertype=H.ETHERTYPE_IPV4)),
            "ipv4": H.IPV4.unpack(ip), "udp": H.UDP.unpack(udp)}
    return payload, meta


def bth(rng, opcode, dest_qp, psn=0, pkey=0xFFFF):
    return H.BTH.pack(opcode=opcode, se=rng.getrandbits(1), m=rng.getrandbits(1),
                      padcnt=rng.getrandbits(2), pkey=pkey, fecn=rng.getrandbits(1),
                      becn=rng.getrandbits(1), resv6=rng.getrandbits(6), dest_qp=dest_qp,
                      ack_req=rng.getrandbits(1), psn=psn)


def classify(payload, meta, error=False, reads=False, mads=False):
    """Reference verdict of a datagram, and its event when it is a good ACK (``reads``: the
    READ responses have a verdict of their own; FIRST, LAST and ONLY need an AETH; ``mads``: so
    have UD SEND_ONLY packets to QP1)."""
    n = len(payload)
    if n < 16:
        return Verdict.SHORT, None
    b = H.BTH.unpack(payload[:12])
    op = b["opcode"]
    if (op == opc.OP_RC_ACKNOWLEDGE and n < 20) or (op == opc.OP_CNP and n < 32):
        return Verdict.SHORT, None
    if reads and op in (0x0D, 0x0F, 0x10) and n < 20:
        return Verdict.SHORT, None
    covered = H.IPV4.pack(**meta["ipv4"]) + H.UDP.pack(**meta["udp"]) + payload[:-4]
    if error or icrc_model.icrc(covered) != payload[-4:]:
        return Verdict.ICRC, None
    if opc.is_request(op):
        return Verdict.REQUEST, None
    if mads and op == opc.OP_UD_SEND_ONLY and b["dest_qp"] == 1:
        return Verdict.MAD, None
    if reads and op in READ_OPS:
        return Verdict.READ_RESPONSE, None
    if op not in (opc.OP_RC_ACKNOWLEDGE, opc.OP_CNP):
        return Verdict.OPCODE, None
    if b["pkey"] & 0x7FFF != 0x7FFF:
        return Verdict.PKEY, None
    qp = b["dest_qp"] - QPN_BASE
    if not 0 <= qp < NUM_QPS:
        return Verdict.QP, None
    state, peer = QPS[qp]
    if state not in (QpState.RTR, QpState.RTS):
        return Verdict.STATE, None
    if meta["ipv4"]["src"] != parse_ip(peer):
        return Verdict.PEER, None
    if op == opc.OP_CNP:
        return Verdict.CNP, qp
    a = H.AETH.unpack(payload[12:16])
    return Verdict.ACK, {"qp": qp, "syndrome": a["syndrome"], "psn": b["psn"], "msn": a["msn"]}


def nics():
    """Host NICs with one QP per case: (nic, qpn) per name."""
    host = Rnic(HOST_MAC, HOST_IP)
    other = Rnic("02:00:00:00:00:77", OTHER_IP)
    cases = {}

    def qp(nic, name, qpn, peer_qpn, **kw):
        nic.create_qp(qpn, peer_qpn=peer_qpn, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                      pmtu=1024, **kw)
        cases[name] = (nic, qpn)

    for k in range(NUM_QPS):
        qp(host, f"qp{k}", 0x40 + k, QPN_BASE + k)          # qp2, qp4: wrong state; qp3: peer
    qp(other, "qp3_other", 0x50, QPN_BASE + 3)              # the right peer of QP 3
    qp(other, "qp0_other", 0x51, QPN_BASE)                  # the wrong peer of QP 0
    qp(host, "pkey_7fff", 0x60, QPN_BASE, pkey=0x7FFF)      # accepted
    qp(host, "pkey_bad", 0x61, QPN_BASE + 1, pkey=0x8001)
    qp(host, "unknown", 0x62, QPN_BASE + NUM_QPS)
    qp(host, "low", 0x63, 0x12)
    return cases


def random_case(rng, cases, reads=False):
    """One datagram: (payload, meta, error flag)."""
    if reads and rng.random() < 0.2:                     # a READ response, some short or bad
        op = rng.choice(READ_OPS)
        body = bth(rng, op, QPN_BASE + rng.randrange(NUM_QPS + 1)) + rng.randbytes(
            rng.choice([rng.randrange(8), rng.randrange(200)]))
        payload, meta = datagram(rng, body, src=rng.choice([HOST_IP, OTHER_IP]))
        if rng.random() < 0.15:
            payload = payload[:-1] + bytes([payload[-1] ^ 0x10])
        return payload, meta, rng.random() < 0.05
    r = rng.random()
    if r < 0.45:                                         # an ACK / NAK of the host NIC model
        name = rng.choice(list(cases))
        nic, qpn = cases[name]
        syndrome = rng.choice([0x1F, 0x00, rng.getrandbits(8), 0x60, 0x61, 0x20 | rng.getrandbits(5)])
        payload, meta = udp_rx(nic.ack_frame(qpn, syndrome, rng.getrandbits(24),
                                             msn=rng.getrandbits(24)))
        return payload, meta, False
    if r < 0.55:                                         # a CNP
        payload, meta = datagram(rng, bth(rng, opc.OP_CNP, QPN_BASE + rng.randrange(NUM_QPS + 1))
                                 + bytes(16), src=rng.choice([HOST_IP, OTHER_IP]))
        return payload, meta, False
    if r < 0.63:                                         # other opcodes, some with payload
        op = rng.choice([0x04, 0x06, 0x0A, 0x00, 0x0C, 0x10, 0x12, 0x64, 0x64, 0x65, 0x24, 0xFF])
        dest = rng.choice([1, 1, 0xFFFF01, QPN_BASE + rng.randrange(NUM_QPS)])
        body = bth(rng, op, dest) + rng.randbytes(rng.randrange(40))
        payload, meta = datagram(rng, body)
        return payload, meta, False
    if r < 0.72:                                         # a damaged ACK
        nic, qpn = cases[f"qp{rng.choice([0, 1])}"]
        payload, meta = udp_rx(nic.ack_frame(qpn, 0x1F, rng.getrandbits(24)))
        if rng.random() < 0.3:
            return payload, meta, True                   # marked damaged upstream
        bad = bytearray(payload)
        pos = rng.randrange(len(bad))
        bad[pos] ^= 1 << rng.randrange(8)
        return bytes(bad), meta, False
    if r < 0.85:                                         # truncated to 0..19 bytes
        nic, qpn = cases[f"qp{rng.choice([0, 1])}"]
        full, _ = udp_rx(nic.ack_frame(qpn, 0x1F, rng.getrandbits(24)))
        n = rng.randrange(20)
        if rng.random() < 0.5:                           # the ICRC of what is left is right
            return (*datagram(rng, full[:max(0, n - 4)], icrc=n >= 4), False)
        return (*datagram(rng, full[:n], icrc=False), False)
    # random garbage, sometimes with a plausible BTH
    n = rng.choice([rng.randrange(20), rng.randrange(80)])
    body = rng.randbytes(n)
    if n >= 12 and rng.random() < 0.5:
        body = bth(rng, rng.choice([0x11, 0x81]), QPN_BASE + rng.randrange(NUM_QPS),
                   pkey=rng.choice([0xFFFF, 0x7FFF, rng.getrandbits(16)])) + body[12:]
        return (*datagram(rng, body[:max(0, n - 4)], src=rng.choice([HOST_IP, OTHER_IP]),
                          icrc=n >= 4), False)
    return (*datagram(rng, body, icrc=False), False)


def run(width, datagrams, *, idle=0.0, backpressure=0.0, seed=0, stall_first=0, reads=False,
        seen=None):
    """Send the datagrams; returns (counts per counter, events, input last-beat cycles, event
    cycles, cycles with ``i`` held). With ``seen`` (a list), the IB CM's verdict too
    (``mads``), and the QPs of ``data_seen`` appended to it."""
    dut = Top(width, reads, mads=seen is not None)
    rx = dut.rx
    drv = StreamDriver(rx.i, width, idle=idle, seed=seed)
    rng = random.Random(seed + 100)
    counts = dict.fromkeys(COUNTERS, 0)
    events, ev_cycles, last_cycles = [], [], []
    held = [0]
    cycle = [0]
    cnp_qps = []

    async def monitor(ctx):
        signals = [getattr(rx, c) for c in COUNTERS]
        async for _, _, *vals in ctx.tick().sample(rx.i.valid, rx.i.ready, rx.i.payload.last,
                                                   rx.cnp_qp, rx.data_seen.valid,
                                                   rx.data_seen.payload, *signals):
            valid, ready, last, cnp_qp, seen_valid, seen_qp, *pulses = vals
            if seen_valid and seen is not None:
                seen.append(seen_qp)
            cycle[0] += 1
            if valid and ready and last:
                last_cycles.append(cycle[0])
            if valid and not ready:
                held[0] += 1
            for c, v in zip(COUNTERS, pulses):
                counts[c] += v
            if pulses[COUNTERS.index("cnp")]:
                cnp_qps.append(cnp_qp)

    async def sink(ctx):
        n = 0
        while True:
            ready = n >= stall_first and not (backpressure and rng.random() < backpressure)
            ctx.set(rx.ack.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(rx.ack.valid, rx.ack.payload)
            n += 1
            if valid and ready:
                events.append(meta_dict(payload))
                ev_cycles.append(n)

    async def tb(ctx):
        for k, (state, peer) in QPS.items():
            ctx.set(dut.table.ctl.payload, {"qp": k, "context": context(state, peer)})
            ctx.set(dut.table.ctl.valid, 1)
            await ctx.tick()
        ctx.set(dut.table.ctl.valid, 0)
        await drv.send(ctx, [Packet(p, meta, err) for p, meta, err in datagrams])
        for _ in range(100 * len(datagrams) + stall_first + 1000):
            if sum(counts.values()) >= len(datagrams) and len(events) >= counts["acks"]:
                break
            await ctx.tick()
        for _ in range(40):
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[monitor, sink])
    return counts, events, last_cycles, ev_cycles, held[0], cnp_qps


@pytest.mark.parametrize("width,count,reads", [(64, 260, False), full(128, 120, False),
                                               full(256, 120, False), (512, 300, False),
                                               (64, 260, True), (512, 300, True)])
def test_random_datagrams(width, count, reads):
    rng = random.Random(width)
    cases = nics()
    datagrams = [random_case(rng, cases, reads) for _ in range(count)]
    want = dict.fromkeys(COUNTERS, 0)
    want_events, want_cnps, want_seen = [], [], []
    for payload, meta, err in datagrams:
        verdict, ev = classify(payload, meta, err, reads, mads=reads)
        want[counter(verdict)] += 1
        if verdict == Verdict.REQUEST:
            want_seen.append(H.BTH.unpack(payload[:12])["dest_qp"])
        if verdict == Verdict.ACK:
            want_events.append(ev)
        elif verdict == Verdict.CNP:
            want_cnps.append(ev)
    # (the builds with READs have the IB CM here too: its verdict, and data_seen, checked)
    reached = COUNTERS if reads else [c for c in COUNTERS if c not in ("read_responses", "mads")]
    assert all(want[c] for c in reached), f"some verdict never reached: {want}"
    seen = [] if reads else None
    counts, events, *_, held, cnp_qps = run(width, datagrams, idle=0.3, backpressure=0.4,
                                            seed=width, reads=reads, seen=seen)
    assert counts == want
    if reads:
        assert seen == want_seen and len(seen) > 5
    assert events == want_events
    assert cnp_qps == want_cnps
    # the verdict of every datagram was reached once, and no more
    assert sum(counts.values()) == len(datagrams)


@pytest.mark.parametrize("width", [64, 512])
def test_each_reason(width):
    """One datagram per drop reason, made on purpose, each with its expected verdict."""
    rng = random.Random(1)
    cases = nics()

    def ack(name, syndrome=0x1F, psn=5, msn=3):
        nic, qpn = cases[name]
        return udp_rx(nic.ack_frame(qpn, syndrome, psn, msn=msn))

    good = [ack("qp0", 0x1F, 0xFFFFFF, 0x123456), ack("qp1", 0x60, 7, 1), ack("qp3_other", 0x21),
            ack("pkey_7fff", 0x00, 9, 9)]
    p, meta = ack("qp0")
    flipped = bytearray(p)
    flipped[-1] ^= 0x80
    tos = dict(meta, ipv4=dict(meta["ipv4"], dscp=meta["ipv4"]["dscp"] ^ 5, ttl=3))
    table = [
        (*good[0], False, Verdict.ACK),
        (*good[1], False, Verdict.ACK),
        (*good[2], False, Verdict.ACK),
        (*good[3], False, Verdict.ACK),
        (p, tos, False, Verdict.ACK),                      # TOS and TTL are not covered
        (bytes(flipped), meta, False, Verdict.ICRC),
        (p, meta, True, Verdict.ICRC),
        (*ack("qp2"), False, Verdict.STATE),
        (*ack("qp4"), False, Verdict.STATE),
        (*ack("qp3"), False, Verdict.PEER),
        (*ack("qp0_other"), False, Verdict.PEER),
        (*ack("pkey_bad"), False, Verdict.PKEY),
        (*ack("unknown"), False, Verdict.QP),
        (*ack("low"), False, Verdict.QP),
        (*datagram(rng, bth(rng, 0x04, QPN_BASE)), False, Verdict.REQUEST),
        (*datagram(rng, bth(rng, 0x10, QPN_BASE)), False, Verdict.OPCODE),
        (*datagram(rng, bth(rng, opc.OP_CNP, QPN_BASE + 1) + bytes(16)), False, Verdict.CNP),
        (*datagram(rng, bth(rng, opc.OP_CNP, QPN_BASE + 1) + bytes(15)), False, Verdict.SHORT),
        (*datagram(rng, bth(rng, opc.OP_RC_ACKNOWLEDGE, QPN_BASE) + bytes(3)), False, Verdict.SHORT),
        (*datagram(rng, bth(rng, 0x04, QPN_BASE)[:11]), False, Verdict.SHORT),
        *((*datagram(rng, p[:n], icrc=False), False, Verdict.SHORT) for n in range(16)),
    ]
    for payload, meta_, err, verdict in table:
        assert classify(payload, meta_, err)[0] == verdict
    counts, events, *_ = run(width, [t[:3] for t in table], idle=0.2, backpressure=0.3, seed=5)
    want = dict.fromkeys(COUNTERS, 0)
    for *_, verdict in table:
        want[counter(verdict)] += 1
    assert counts == want
    assert events == [classify(p_, m_)[1] for p_, m_, _, v in table if v == Verdict.ACK]
    assert events[0] == {"qp": 0, "syndrome": 0x1F, "psn": 0xFFFFFF, "msn": 0x123456}


@pytest.mark.parametrize("width", [64, 512])
def test_read_responses(width):
    """READ responses: with ``reads``, each opcode its own verdict after the length check (a
    whole BTH for MIDDLE, BTH and AETH for the others) and the ICRC check, whatever its QP, P_Key
    or source (the READ requester's ingress checks those); without it, ``drop_opcode`` as any
    other opcode not taken."""
    rng = random.Random(3)
    aeth = H.AETH.pack(syndrome=0x1F, msn=7)
    table = []
    for op in READ_OPS:
        head = bth(rng, op, QPN_BASE) + (aeth if op != 0x0E else b"")
        table += [datagram(rng, head + rng.randbytes(k)) for k in (0, 4, 100)]
        table += [datagram(rng, bth(rng, op, QPN_BASE + NUM_QPS, pkey=0x1234) + aeth,
                           src=OTHER_IP),
                  datagram(rng, bth(rng, op, QPN_BASE + 2) + aeth)]
        p, m = datagram(rng, head + bytes(8))
        table += [(p[:-2] + bytes([p[-2] ^ 1, p[-1]]), m), (p, m, True)]
        table += [datagram(rng, bth(rng, op, QPN_BASE) + aeth[:k]) for k in range(4)]
    table = [t if len(t) == 3 else (*t, False) for t in table]
    for reads in (False, True):
        verdicts = [classify(p, m, e, reads)[0] for p, m, e in table]
        want = dict.fromkeys(COUNTERS, 0)
        for v in verdicts:
            want[counter(v)] += 1
        counts, events, *_ = run(width, table, idle=0.2, backpressure=0.3, seed=6, reads=reads)
        assert counts == want and events == []
        if reads:
            assert want["read_responses"] == 4 * 5 + 4 and want["drop_short"] == 3 * 4
            assert want["icrc_bad"] == 8
        else:
            assert want["drop_opcode"] == 4 * 9 and want["read_responses"] == 0


@pytest.mark.parametrize("width", [64, 128, 256, 512])
def test_latency_and_backpressure(width):
    rng = random.Random(2)
    cases = nics()
    acks = [udp_rx(cases["qp0"][0].ack_frame(cases["qp0"][1], 0x1F, k, msn=k)) for k in range(24)]
    datagrams = [(p, m, False) for p, m in acks]
    counts, events, last_cycles, ev_cycles, held, _ = run(width, datagrams)
    assert [e["psn"] for e in events] == list(range(24))
    lat = {e - s for s, e in zip(last_cycles, ev_cycles)}
    assert lat == {RoceRx(width, NUM_QPS).ack_latency}, lat
    # ack.ready held low for a long time: nothing lost, the input is held, then everything flows
    counts, events, *_, held, _ = run(width, datagrams + [random_case(rng, cases)
                                                          for _ in range(20)],
                                      stall_first=300)
    assert [e["psn"] for e in events[:24]] == list(range(24))
    assert held > 100
    assert sum(counts.values()) == 44


def test_parameters_are_validated():
    raises(ValueError, "width must be one of", lambda: RoceRx(32, 4))
    raises(TypeError, "width must be an integer", lambda: RoceRx(64.0, 4))
    raises(ValueError, r"num_qps must be 1\.\.256, not 0", lambda: RoceRx(64, 0))
    raises(ValueError, r"num_qps must be 1\.\.256, not 300", lambda: RoceRx(64, 300))
    raises(TypeError, "num_qps must be an integer", lambda: RoceRx(64, "4"))
    raises(TypeError, "reads must be a bool", lambda: RoceRx(64, 4, reads="yes"))
    raises(TypeError, "ibcm must be a bool", lambda: RoceRx(64, 4, ibcm=1))
