"""The output-queued switch model (:mod:`rocegen.sim.models.fabric.switch`): ECN marking statistics
between Kmin and Kmax, none below and all above, valid checksums and ICRC after marking, tail
drop, PFC XOFF/XON at the thresholds and in a 2-into-1 incast, obeying received pause frames,
egress at exactly the line rate, byte-fair round robin between ingress ports, classification,
samples, determinism and clear errors. Expected values come from the parameters and the
standard's arithmetic, frames are built and checked with scapy."""

import math
import random

import pytest
from scapy.compat import raw
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from rocegen.sim.models import icrc
from rocegen.sim.models.fabric.switch import PacedSender, Switch, pfc_headroom, run
from rocegen.wire import pfc

SIGMAS = 5.0
NIC = "02:00:00:00:00:10"
SWITCH_MAC = "02:00:00:00:00:fe"
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


def host(n):
    return f"02:00:00:00:00:{n:02x}"


def roce(src=1, *, ecn=ECT0, dscp=26, payload=64, pcp=None, version=4, psn=0, **ip_fields):
    """A valid RoCEv2 WRITE MIDDLE frame (ICRC included) from host ``src`` to the NIC."""
    l2 = Ether(dst=NIC, src=host(src))
    if pcp is not None:
        l2 = l2 / Dot1Q(prio=pcp, vlan=5)
    if version == 4:
        l3 = IP(src=f"10.0.0.{src}", dst="10.0.0.100", tos=dscp << 2 | ecn, flags="DF",
                **ip_fields)
    else:
        l3 = IPv6(src=f"fd00::{src}", dst="fd00::100", tc=dscp << 2 | ecn, **ip_fields)
    return raw(l2 / l3 / UDP(sport=0xC000 + src, dport=4791, chksum=0)
               / BTH(opcode=0x07, pkey=0xFFFF, dqpn=0x11, psn=psn) / Raw(bytes(payload)))


def udp(src=1, *, length=1000, pcp=3, seq=0, dscp=26):
    """A UDP frame of exactly ``length`` bytes, tagged with ``pcp`` (None: untagged), whose
    last 4 bytes are ``seq``."""
    l2 = Ether(dst=NIC, src=host(src))
    if pcp is not None:
        l2 = l2 / Dot1Q(prio=pcp, vlan=5)
    head = raw(l2 / IP(src=f"10.0.0.{src}", dst="10.0.0.100", tos=dscp << 2) / UDP(chksum=0))
    frame = raw(l2 / IP(src=f"10.0.0.{src}", dst="10.0.0.100", tos=dscp << 2)
                / UDP(sport=1000 + src, dport=2000, chksum=0)
                / Raw(bytes(length - len(head))))
    assert len(frame) == length
    return frame[:-4] + seq.to_bytes(4, "big")


def seq_of(frame):
    return int.from_bytes(frame[-4:], "big")


def line_ns(length, rate=100):
    """A frame's line time from the Ethernet numbers: padded to 60, FCS 4, preamble and SFD 8,
    inter-frame gap 12."""
    return (max(length, 60) + 4 + 8 + 12) * 8 / rate


def switch(ports=(100, 100), **kw):
    kw.setdefault("route", {NIC: len(ports) - 1})
    kw.setdefault("mac", SWITCH_MAC)
    return Switch(list(ports), **kw)


def drain(sw, until=1e9):
    """Every departure until the switch is idle (or ``until``)."""
    out = []
    while sw.next_due() is not None and sw.next_due() <= until:
        out += sw.due(sw.next_due())
    return out


def hold_egress(sw, port, now=0, quanta=pfc.MAX_QUANTA):
    """Pause every priority of an egress port with an 802.3x PAUSE (``link_pause`` switches)."""
    sw.receive(port, pfc.pause_frame(NIC, quanta), now)


# ---- ECN marking ----

def probe_marks(*, kmin, kmax, pmax, n, payload=64, seed=0):
    """``n`` ECT frames queued behind each other on a held egress; ``(depths seen, marked)``."""
    frame = roce(payload=payload)
    sw = switch(buffer=10**8, kmin=kmin, kmax=kmax, pmax=pmax, link_pause=True, seed=seed)
    hold_egress(sw, 1)
    for k in range(n):
        sw.receive(0, frame, 1 + k)
    sw.receive(1, pfc.pause_frame(NIC, 0), n + 1)
    out = drain(sw)
    assert len(out) == n
    marked = [Ether(d.frame)[IP].tos & 3 == CE for d in out]
    assert marked == [d.marked for d in out]
    assert sum(marked) == sw.total("marks") == sw.counters["marks"][1][0]
    return [k * len(frame) for k in range(n)], marked


def test_marking_probability_rises_linearly_between_kmin_and_kmax():
    kmin, kmax, pmax = 20_000, 420_000, 0.5
    depths, marked = probe_marks(kmin=kmin, kmax=kmax, pmax=pmax, n=4000)
    assert depths[-1] > kmax + 50_000

    def p(d):
        return 0.0 if d <= kmin else 1.0 if d > kmax else pmax * (d - kmin) / (kmax - kmin)

    assert not any(m for d, m in zip(depths, marked) if d <= kmin)
    assert all(m for d, m in zip(depths, marked) if d > kmax)
    # four bins across (kmin, kmax]: each a sum of Bernoulli trials of known probabilities
    middle = [(d, m) for d, m in zip(depths, marked) if kmin < d <= kmax]
    assert len(middle) > 3000
    quarter = len(middle) // 4
    for b in range(4):
        part = middle[b * quarter:(b + 1) * quarter]
        mean = sum(p(d) for d, _ in part)
        sd = math.sqrt(sum(p(d) * (1 - p(d)) for d, _ in part))
        count = sum(m for _, m in part)
        assert abs(count - mean) <= SIGMAS * sd, (b, count, mean, sd)


def test_marking_is_deterministic_from_the_seed():
    a = probe_marks(kmin=0, kmax=100_000, pmax=0.3, n=600, seed=5)[1]
    assert a == probe_marks(kmin=0, kmax=100_000, pmax=0.3, n=600, seed=5)[1]
    assert a != probe_marks(kmin=0, kmax=100_000, pmax=0.3, n=600, seed=6)[1]


@pytest.mark.parametrize("ecn", [NOT_ECT, CE])
def test_not_ect_and_ce_frames_are_never_changed(ecn):
    frame = roce(ecn=ecn)
    sw = switch(buffer=10**7, kmin=0, kmax=0, pmax=1.0, link_pause=True)
    hold_egress(sw, 1)
    for k in range(50):
        sw.receive(0, frame, 1 + k)
    sw.receive(1, pfc.pause_frame(NIC, 0), 100)
    out = drain(sw)
    assert [d.frame for d in out] == [frame] * 50
    assert not any(d.marked for d in out)
    assert sw.total("marks") == sw.total("ect") == 0


def test_marking_disabled_or_other_priority():
    for kw in (dict(ecn=False), dict(ecn_priorities=(3,))):
        sw = switch(buffer=10**7, kmin=0, kmax=0, pmax=1.0, link_pause=True, **kw)
        hold_egress(sw, 1)
        frame = roce()                                   # untagged: priority 0 by PCP
        for k in range(20):
            sw.receive(0, frame, 1 + k)
        sw.receive(1, pfc.pause_frame(NIC, 0), 100)
        assert [d.frame for d in drain(sw)] == [frame] * 20
        assert sw.total("ect") == 20 and sw.total("marks") == 0


def checked(frame):
    """scapy parses the frame, its IPv4 checksum is what scapy computes, the ICRC holds."""
    pkt = Ether(frame)
    if IP in pkt:
        fresh = pkt[IP].copy()
        fresh.chksum = None
        assert pkt[IP].chksum == IP(raw(fresh)).chksum
    assert icrc.check(frame)
    bth = pkt[BTH].copy()
    bth.icrc = None                                      # scapy recomputes it from the packet
    assert raw(pkt) == frame
    return pkt


def test_marked_frames_keep_valid_checksum_and_icrc():
    rng = random.Random(3)
    cases = []
    for _ in range(60):
        cases.append(roce(ecn=rng.choice([ECT0, ECT1]), dscp=rng.randrange(64),
                          payload=4 * rng.randrange(0, 100), id=rng.randrange(1, 0x10000),
                          ttl=rng.randrange(1, 256), pcp=rng.choice([None, 0])))
    cases.append(roce(options=b"\x01\x01\x01\x00"))                   # IHL 6
    cases += [roce(version=6, ecn=ECT0, hlim=rng.randrange(256), fl=rng.getrandbits(20))
              for _ in range(10)]
    sw = switch(buffer=10**7, kmin=0, kmax=0, pmax=1.0, link_pause=True)
    hold_egress(sw, 1)
    sw.receive(0, roce(ecn=NOT_ECT), 1)                 # so that every case sees depth > 0
    for k, frame in enumerate(cases):
        checked(frame)
        sw.receive(0, frame, 2 + k)
    sw.receive(1, pfc.pause_frame(NIC, 0), 1000)
    out = drain(sw)[1:]
    assert len(out) == len(cases) == sw.total("marks")
    for before, d in zip(cases, out):
        assert d.marked
        pkt = checked(d.frame)
        old = Ether(before)
        if IP in pkt:
            assert pkt[IP].tos == old[IP].tos | CE
            changed = {k for k in range(len(before)) if before[k] != d.frame[k]}
            ip_off = 18 if Dot1Q in old else 14
            assert changed <= {ip_off + 1, ip_off + 10, ip_off + 11}
        else:
            assert pkt[IPv6].tc == old[IPv6].tc | CE
        assert len(d.frame) == len(before)


def test_a_wrong_ipv4_checksum_stays_wrong():
    frame = bytearray(roce())
    frame[24] ^= 0x01                                    # checksum low byte
    sw = switch(buffer=10**7, kmin=0, kmax=0, pmax=1.0, link_pause=True)
    hold_egress(sw, 1)
    sw.receive(0, roce(ecn=NOT_ECT), 1)
    sw.receive(0, bytes(frame), 2)
    sw.receive(1, pfc.pause_frame(NIC, 0), 3)
    pkt = Ether(drain(sw)[1].frame)
    fresh = pkt[IP].copy()
    fresh.chksum = None
    assert pkt[IP].tos & 3 == CE
    assert pkt[IP].chksum != IP(raw(fresh)).chksum


# ---- tail drop ----

def test_tail_drop_at_the_buffer_and_the_queue_limit():
    sw = switch(buffer=10_000, link_pause=True)
    hold_egress(sw, 1)
    for k in range(15):
        sw.receive(0, udp(seq=k, pcp=None), 1 + k)
    assert sw.buffer_used == 10_000 and sw.depth(1, 0) == 10_000
    assert sw.counters["drops"][1][0] == 5 and sw.total("drops") == 5
    sw.receive(1, pfc.pause_frame(NIC, 0), 100)
    out = drain(sw)
    assert [seq_of(d.frame) for d in out] == list(range(10))
    assert sw.buffer_used == 0

    sw = switch(buffer=10**6, queue_limit=3000, link_pause=True)
    hold_egress(sw, 1)
    for k in range(5):
        sw.receive(0, udp(seq=k, pcp=None), 1 + k)
        sw.receive(0, udp(seq=k, pcp=2), 1 + k)
    assert sw.counters["drops"][1][0] == sw.counters["drops"][1][2] == 2
    assert sw.buffer_used == 6000


# ---- PFC ----

def xoff_frame(prio, quanta=pfc.MAX_QUANTA):
    """The PFC frame the switch must send, from scapy."""
    return raw(Ether(dst="01:80:c2:00:00:01", src=SWITCH_MAC)
               / MACControlClassBasedFlowControl(**{f"c{prio}_enabled": 1,
                                                    f"c{prio}_pause_time": quanta}))


def test_xoff_and_xon_at_the_thresholds():
    """Ten 1000-byte frames of priority 3 from port 0 while the NIC holds port 2: the sixth
    takes the group past xoff = 5000, so the XOFF leaves port 0 at its arrival; once the NIC
    lets go at 1000 ns the frames leave every 81.92 ns and the eighth one's end takes the group
    to xon = 2000 bytes: the XON leaves then."""
    sw = switch((100, 100, 100), pfc=(3,), xoff=5000, xon=2000, headroom=20_000,
                pause_quanta=100)
    sw.receive(2, pfc.pfc_frame(NIC, {3: pfc.MAX_QUANTA}), 0)
    for k in range(10):
        sw.receive(0, udp(seq=k), 10 * (k + 1))
    assert sw.usage(0, 3) == 10_000 and sw.in_xoff(0, 3)
    sw.receive(2, pfc.pfc_frame(NIC, {3: 0}), 1000)
    out = drain(sw, until=3000)
    data = [d for d in out if d.kind == "data"]
    control = [d for d in out if d.kind == "control"]
    assert [seq_of(d.frame) for d in data] == list(range(10))
    assert [d.start for d in data] == pytest.approx([1000 + 81.92 * k for k in range(10)])
    xon_at = 1000 + 8 * 81.92
    # XOFF at 60, refreshed every half of 100 quanta (256 ns at 100G) while the group is full
    xoff_times = [60 + 256 * k for k in range(7)]
    assert all(d.port == 0 for d in control)
    assert [d.start for d in control] == pytest.approx(xoff_times + [xon_at])
    assert [d.end - d.start for d in control] == pytest.approx([line_ns(60)] * 8)
    assert [d.frame for d in control] == [xoff_frame(3, 100)] * 7 + [xoff_frame(3, 0)]
    assert [(e[2], e[3], e[4]) for e in sw.pfc_log] == \
        [(3, "xoff", 6000)] + [(3, "refresh", u) for u in (10_000,) * 3 + (9000, 6000, 3000)] \
        + [(3, "xon", 2000)]
    assert sw.counters["xoff_sent"][0][3] == 7 and sw.counters["xon_sent"][0][3] == 1
    assert sw.counters["max_usage"][0][3] == 10_000
    assert sw.total("drops") == sw.total("headroom_drops") == 0


def test_headroom_takes_frames_after_xoff_and_drops_beyond_it():
    sw = switch((100, 100, 100), pfc=(3,), xoff=3000, xon=0, headroom=2500, buffer=10**6)
    sw.receive(2, pfc.pfc_frame(NIC, {3: pfc.MAX_QUANTA}), 0)
    for k in range(8):
        sw.receive(0, udp(seq=k), 1 + k)
    # 4000 bytes pass xoff (shared), two more fit in the headroom, the last two are dropped
    assert sw.usage(0, 3) == 6000 and sw.buffer_used == 4000
    assert sw.counters["headroom_drops"][0][3] == 2 and sw.total("drops") == 0
    # the shared buffer full: a lossless frame takes headroom and sends XOFF at once
    sw = switch((100, 100, 100), pfc=(3,), xoff=10**6, headroom=5000, buffer=2000)
    sw.receive(2, pfc.pfc_frame(NIC, {3: pfc.MAX_QUANTA}), 0)
    for k in range(3):
        sw.receive(1, udp(src=2, seq=k), 1 + k)
    assert sw.buffer_used == 2000 and sw.usage(1, 3) == 3000 and sw.in_xoff(1, 3)
    assert [e[1:4] for e in sw.pfc_log] == [(1, 3, "xoff")]


def test_pfc_headroom_formula():
    """Round trip of 2 x 100 ns at 12.5 bytes/ns, the XOFF frame (60 + 24) and three frames of
    1000 + 24 bytes."""
    assert pfc_headroom(100, 1000, cable_ns=100) == 2500 + 84 + 3 * 1024
    assert pfc_headroom(25, 1000, cable_ns=100, response_ns=40) == 750 + 84 + 3 * 1024


def incast(pfc_on, frames=400, cable=100):
    senders = {p: PacedSender(lambda k, p=p: udp(src=p + 1, seq=k), priority=3, count=frames)
               for p in (0, 1)}
    kw = dict(pfc=(3,), xoff=20_000, xon=10_000,
              headroom=pfc_headroom(100, 1000, cable_ns=cable)) if pfc_on else {}
    sw = switch((100, 100, 100), buffer=64_000, **kw)
    out = run(sw, senders, cable_ns=cable)
    return sw, senders, [d for _, d in out[2]]


def test_two_into_one_incast_overflows_without_pfc():
    """Two 100G senders into one 100G port: the egress takes one 1000-byte frame per 81.92 ns
    while two arrive, so of 800 frames about 400 leave during the burst, 64 wait in the buffer
    and the rest (336) are lost."""
    sw, _, out = incast(False)
    drops = sw.total("drops")
    assert abs(drops - (800 - 400 - 64)) <= 2
    assert len(out) == 800 - drops
    assert sw.total("xoff_sent") == 0


def test_two_into_one_incast_loses_nothing_with_pfc():
    sw, senders, out = incast(True)
    assert sw.total("drops") == sw.total("headroom_drops") == 0
    assert len(out) == 800
    for port in (0, 1):
        got = [seq_of(d.frame) for d in out if d.ingress == port]
        assert got == list(range(400))
        kinds = [e[3] for e in sw.pfc_log if e[1] == port and e[3] != "refresh"]
        assert kinds and kinds[::2] == ["xoff"] * len(kinds[::2])
        assert kinds[1::2] == ["xon"] * len(kinds[1::2])
        assert all(e[4] > 20_000 for e in sw.pfc_log if e[1] == port and e[3] == "xoff")
        assert all(e[4] <= 10_000 for e in sw.pfc_log if e[1] == port and e[3] == "xon")
        assert sw.counters["max_usage"][port][3] <= 20_000 + pfc_headroom(100, 1000,
                                                                            cable_ns=100)
        assert senders[port].counters["pfc_rx"] == sw.counters["xoff_sent"][port][3] \
            + sw.counters["xon_sent"][port][3]
        assert senders[port].paused_ns > 0
    # the egress never idles: back to back at exactly 100 Gb/s from the first frame to the last
    assert all(b.start == a.end for a, b in zip(out, out[1:]))
    assert [d.end - d.start for d in out] == pytest.approx([line_ns(1000)] * 800, rel=1e-9)
    assert out[-1].end - out[0].start == pytest.approx(800 * line_ns(1000), rel=1e-12)
    assert sw.counters["tx_bytes"][2] == 800 * 1000


def test_pfc_is_lossless_in_random_incasts():
    """2..6 senders of frames of random lengths into one port, buffers from tiny to ample,
    random thresholds, cables and sender response times, the headroom from
    :func:`pfc_headroom`: nothing is lost and every sender's frames arrive in order."""
    rng = random.Random(11)
    for _ in range(12):
        n = rng.randrange(2, 7)
        cable, response = rng.choice([0, 50, 500]), rng.choice([0, 100])
        biggest = 1500
        xoff = rng.randrange(0, 30_000)
        ports = [rng.choice([25, 100])] * (n + 1)
        sw = switch(ports, buffer=rng.choice([3000, 20_000, 10**6]), pfc=(3,), xoff=xoff,
                    xon=rng.randrange(0, xoff + 1), pause_quanta=rng.choice([50, 0xFFFF]),
                    headroom=pfc_headroom(ports[0], biggest, cable_ns=cable,
                                          response_ns=response))
        # frames cut from one per sender (the switch reads no length field), the number last
        full = [udp(src=p + 1, length=biggest) for p in range(n)]
        lengths = [[rng.randrange(60, biggest + 1) for _ in range(60)] for _ in range(n)]

        def frame(k, p, full=full, lengths=lengths):
            return full[p][:lengths[p][k] - 4] + k.to_bytes(4, "big")

        senders = {p: PacedSender(lambda k, p=p: frame(k, p), priority=3, count=60,
                                  response_ns=response, rate_gbps=ports[0], line_gbps=ports[0])
                   for p in range(n)}
        out = run(sw, senders, cable_ns=cable)[n]
        assert sw.total("drops") == sw.total("headroom_drops") == 0
        for p in range(n):
            assert [seq_of(d.frame) for _, d in out if d.ingress == p] == list(range(60))


def test_bench_script_figures():
    from bench.bench_switch import incast as bench_incast
    off = bench_incast(pfc=False, us=5, buffer=20_000)
    on = bench_incast(pfc=True, us=5, buffer=20_000)
    assert off["sent"] == on["sent"] == 4 * int(5000 / line_ns(1082))
    assert off["dropped"] > 0 and off["delivered"] + off["dropped"] == off["sent"]
    assert on["dropped"] == 0 and on["delivered"] == on["sent"] and on["xoff"] > 0
    assert on["utilization"] == pytest.approx(1.0)
    assert on["goodput_gbps"] == pytest.approx(100 * 1082 / (1082 + 24))


def test_received_pfc_pauses_only_its_lossless_priorities():
    """The NIC pauses priority 3 of port 2 for 100 quanta (512 ns): the frame on the line
    finishes, priority 0 keeps going, priority 3 waits until the pause ends; an XON ends the
    second pause early; a PFC for a lossy priority and a PAUSE (PFC in use) are ignored."""
    sw = switch((100, 100, 100), pfc=(3,), xoff=10**6)
    sw.receive(0, udp(seq=0), 0)                         # priority 3, on the line at once
    sw.receive(2, pfc.pfc_frame(NIC, {3: 100, 0: 100}), 10)
    sw.receive(0, udp(seq=1), 20)
    sw.receive(1, udp(src=2, seq=2, pcp=0), 30)
    out = drain(sw)
    assert [seq_of(d.frame) for d in out] == [0, 2, 1]
    assert [d.start for d in out] == pytest.approx([0, line_ns(1000), 10 + 512])
    assert sw.counters["pfc_rx"][2] == 1 and sw.counters["ctrl_ignored"] == 0

    t = 2000
    sw.receive(2, pfc.pfc_frame(NIC, {3: pfc.MAX_QUANTA}), t)
    sw.receive(0, udp(seq=3), t + 1)
    sw.receive(2, pfc.pfc_frame(NIC, {3: 0}), t + 300)
    assert [(seq_of(d.frame), d.start) for d in drain(sw)] == [(3, t + 300)]
    sw.receive(2, pfc.pfc_frame(NIC, {0: pfc.MAX_QUANTA}), t + 1000)
    sw.receive(2, pfc.pause_frame(NIC, pfc.MAX_QUANTA), t + 1000)
    sw.receive(1, udp(src=2, seq=4, pcp=0), t + 1001)
    assert [(seq_of(d.frame), d.start) for d in drain(sw)] == [(4, t + 1001)]
    assert sw.counters["ctrl_ignored"] == 2 and sw.counters["pause_rx"][2] == 1


def test_link_pause_holds_every_priority_and_other_control_frames_are_dropped():
    sw = switch(link_pause=True)
    sw.receive(1, pfc.pause_frame(NIC, 10), 0)           # 10 quanta: 51.2 ns
    sw.receive(0, udp(seq=0, pcp=7), 1)
    assert [d.start for d in drain(sw)] == pytest.approx([51.2])
    bad = pfc.pause_frame(NIC, 10)
    sw.receive(1, bad[:14] + b"\x00\x02" + bad[16:], 1000)           # GATE: not a pause
    sw.receive(1, pfc.pause_frame(NIC, 10, dst=NIC), 1000)            # not for the switch
    sw.receive(1, pfc.pause_frame(NIC, 10, dst=SWITCH_MAC), 1100)     # for the switch
    sw.receive(0, udp(seq=1), 1101)
    assert [d.start for d in drain(sw)] == pytest.approx([1151.2])
    assert sw.counters["ctrl_bad"] == 1 and sw.counters["ctrl_ignored"] == 1
    assert sw.counters["pause_rx"][1] == 2 and sw.total("tx_frames") == 2


def test_sender_obeys_pause_after_its_response_time():
    frame = udp(length=1000)
    s = PacedSender(frame, rate_gbps=50, priority=3, response_ns=30, count=20)
    gap = 2 * line_ns(1000)                              # half the line rate
    assert [s.emit()[1] for _ in range(3)] == pytest.approx([0, gap, 2 * gap])
    s.receive(pfc.pfc_frame(NIC, {3: 100}), 2 * gap + 10)
    # a start before 2 gap + 40 still goes; the pause holds until 2 gap + 40 + 512
    assert s.next_start() == pytest.approx(2 * gap + 40 + 512)
    s.receive(pfc.pfc_frame(NIC, {3: 0}), 3 * gap + 50)              # XON before its end
    assert s.next_start() == pytest.approx(3 * gap + 80)
    f, start, end = s.emit()
    assert (f, end - start) == (frame, pytest.approx(line_ns(1000)))
    assert s.paused_ns == pytest.approx(80)
    assert s.next_start() == pytest.approx(start + gap)
    s.receive(pfc.pfc_frame(NIC, {2: 100}), start + 1)   # another priority
    s.receive(b"\x00" * 60, start + 1)
    assert s.counters["rx_other"] == 2 and s.counters["pfc_rx"] == 2
    s.receive(pfc.pause_frame(NIC, 1000), start + gap - 1)            # 5120 ns
    assert s.next_start() == pytest.approx(start + gap)  # before the pause takes effect
    s.emit()
    assert s.next_start() == pytest.approx(start + gap - 1 + 30 + 5120)


def test_sender_pauses_overlapping_its_response_time():
    """XOFF, XON, then an XOFF that arrives before that XON takes effect: the frame held by the
    first pause starts when the XON takes effect, the next one waits for the second pause."""
    quanta_ns = pfc.MAX_QUANTA * 5.12
    s = PacedSender(udp(length=1000), response_ns=100, priority=3, count=10)
    assert s.emit()[1] == 0
    s.receive(pfc.pfc_frame(NIC, {3: pfc.MAX_QUANTA}), 10)           # in force 110 ..
    assert s.emit()[1] == pytest.approx(line_ns(1000))                # starts before 110
    assert s.next_start() == pytest.approx(110 + quanta_ns)
    s.receive(pfc.pfc_frame(NIC, {3: 0}), 500)                        # ends at 600
    s.receive(pfc.pfc_frame(NIC, {3: pfc.MAX_QUANTA}), 550)           # again from 650
    assert s.next_start() == pytest.approx(600)
    assert s.emit()[1] == pytest.approx(600)
    assert s.next_start() == pytest.approx(650 + quanta_ns)
    assert s.paused_ns == pytest.approx(600 - 2 * line_ns(1000))


# ---- egress ----

def test_egress_back_to_back_at_the_line_rate():
    """A burst of frames of many lengths (short ones take the line time of 60 bytes) leaves a
    25G port back to back: each takes (max(n, 60) + 24) x 8 / 25 ns, the next starts when it
    ends."""
    rng = random.Random(9)
    lengths = [rng.choice([42, 59, 60, 61, 64, 1000, 1500, 4200, 9000]) for _ in range(200)]
    sw = switch((100, 25), buffer=10**7)
    for k, n in enumerate(lengths):
        sw.receive(0, udp(length=max(n, 50), pcp=None, seq=k) if n >= 50 else
                   udp(length=50, pcp=None, seq=k)[:n], 0)
    out = drain(sw)
    assert len(out) == 200
    assert out[0].start == 0
    assert all(b.start == a.end for a, b in zip(out, out[1:]))
    assert [d.end - d.start for d in out] == pytest.approx([line_ns(n, 25) for n in lengths],
                                                           rel=1e-9)
    assert out[-1].end == pytest.approx(sum(line_ns(n, 25) for n in lengths), rel=1e-12)
    assert sw.counters["tx_bytes"][1] == sum(lengths)
    assert sw.counters["busy_ns"][1] == pytest.approx(out[-1].end, rel=1e-12)


@pytest.mark.parametrize("sizes", [(1000, 1000, 1000), (300, 1000, 1500)])
def test_round_robin_is_fair_between_ingress_ports(sizes):
    """Three ingress ports with 200 frames each queued at once: while all three have frames
    waiting their bytes out differ by at most a quantum plus a frame; each keeps its order."""
    quantum = 1500
    sw = switch((100, 100, 100, 100), buffer=10**7, quantum=quantum)
    for k in range(200):
        for port, n in enumerate(sizes):
            sw.receive(port, udp(src=port + 1, length=n, seq=k), 0)
    out = drain(sw)
    sent = [0, 0, 0]
    left = [200, 200, 200]
    for d in out:
        sent[d.ingress] += len(d.frame)
        left[d.ingress] -= 1
        if min(left) == 0:
            break
        assert max(sent) - min(sent) <= quantum + max(sizes)
    for port in range(3):
        assert [seq_of(d.frame) for d in out if d.ingress == port] == list(range(200))


def test_strict_priority_between_queues():
    sw = switch(buffer=10**6)
    for k, prio in enumerate([1, 1, 5, 0, 7, 5]):
        sw.receive(0, udp(seq=k, pcp=prio), 0)
    assert [seq_of(d.frame) for d in drain(sw)] == [0, 4, 2, 5, 1, 3]


# ---- classification, counters, samples ----

def test_priority_from_pcp_or_dscp():
    frames = [roce(dscp=26), roce(dscp=48), roce(dscp=0, pcp=5), roce(dscp=10, version=6),
              udp(pcp=None)[:12] + b"\x08\x06" + bytes(46)]                   # ARP: not IP
    expected = {"pcp": [0, 0, 5, 0, 0], "dscp": [3, 6, 0, 1, 0]}
    for classify, prios in expected.items():
        sw = switch(classify=classify, buffer=10**6)
        for k, f in enumerate(frames):
            sw.receive(0, f, k * 1000)
        assert [d.priority for d in drain(sw)] == prios
    sw = switch(classify="dscp", dscp_map={26: 4}, default_priority=2)
    for k, f in enumerate(frames[:2]):
        sw.receive(0, f, k * 1000)
    assert [d.priority for d in drain(sw)] == [4, 2]


def test_queue_depth_samples_and_counters():
    """Five 1000-byte frames at time 0 into a 100G port: the depth is 5000 until the first
    leaves at 81.92, then one frame less every 81.92 ns; samples every 50 ns."""
    sw = switch(buffer=10**6, sample_ns=50)
    for k in range(5):
        sw.receive(0, udp(seq=k, pcp=2), 0)
    drain(sw)
    sw.due(600)
    series = sw.depth_series(1, 2)
    assert [t for t, _ in series] == [50 * k for k in range(13)]
    # the sample at 0 is taken before the frames arrived at 0
    expected = [0] + [5000 - 1000 * math.floor(t / line_ns(1000)) if t < 5 * line_ns(1000)
                      else 0 for t in range(50, 650, 50)]
    assert [d for _, d in series] == [max(0, e) for e in expected]
    c = sw.counters
    assert c["rx_frames"][0] == 5 and c["rx_bytes"][0] == 5000
    assert c["tx_frames"][1] == 5 and c["tx_bytes"][1] == 5000
    assert c["max_depth"][1][2] == 5000 and c["max_buffer"] == 5000
    assert sw.buffer_used == 0 and sw.depth(1, 2) == 0


def test_route_function():
    sw = switch((100, 100, 100), route=lambda frame, port: 2 - port)
    sw.receive(0, udp(seq=1), 0)
    sw.receive(2, udp(seq=2), 0)
    assert sorted((d.port, seq_of(d.frame)) for d in drain(sw)) == [(0, 2), (2, 1)]
    sw = switch(route=lambda frame, port: None)
    sw.receive(0, udp(), 0)
    assert drain(sw) == [] and sw.counters["no_route"] == 1
    sw = switch(route=lambda frame, port: 7)
    with pytest.raises(ValueError, match="the port route"):
        sw.receive(0, udp(), 0)


def test_malformed_oversize_and_unrouted_frames_are_counted():
    sw = switch(max_frame=1500)
    sw.receive(0, b"\x01" * 13, 0)
    sw.receive(0, udp(length=1501, pcp=None), 1)
    sw.receive(0, bytes(6) + udp(pcp=None)[6:], 2)
    c = sw.counters
    assert (c["malformed"], c["oversize"], c["no_route"]) == (1, 1, 1)
    assert c["rx_frames"][0] == 3 and drain(sw) == []


@pytest.mark.parametrize("kw, exc, match", [
    (dict(ports=[]), ValueError, "at least one port"),
    (dict(ports=[100, 0]), ValueError, r"ports\[1\] must be positive"),
    (dict(ports=5), TypeError, "ports must be a sequence"),
    (dict(route=5), TypeError, "route must be a mapping"),
    (dict(route={NIC: 9}), ValueError, "route port must be a port number 0..1"),
    (dict(route={"zz": 0}), ValueError, "not a MAC address"),
    (dict(kmin=10, kmax=5), ValueError, "kmax must be 10 or more"),
    (dict(pmax=1.5), ValueError, "pmax must be a probability"),
    (dict(pfc=(3,)), ValueError, "xoff .* is required with pfc"),
    (dict(pfc=(8,), xoff=1), ValueError, "pfc priority must be 0..7"),
    (dict(pfc=(3,), xoff=10, xon=11), ValueError, "xon must be 0..10"),
    (dict(xoff=10), ValueError, "xoff is a PFC setting"),
    (dict(pfc=(3,), xoff=10, link_pause=True), ValueError, "exclude each other"),
    (dict(pause_quanta=0), ValueError, "pause_quanta must be 1..65535"),
    (dict(classify="vlan"), ValueError, "classify must be 'pcp' or 'dscp'"),
    (dict(dscp_map={64: 1}), ValueError, "dscp_map DSCP must be 0..63"),
    (dict(dscp_map=[0] * 10), TypeError, "dscp_map must be a mapping"),
    (dict(quantum=0), ValueError, "quantum must be 1 or more"),
    (dict(buffer=1.5), TypeError, "buffer must be an integer"),
    (dict(sample_ns=0), ValueError, "sample_ns must be positive"),
    (dict(seed="x"), TypeError, "seed must be an integer"),
])
def test_bad_parameters(kw, exc, match):
    ports = kw.pop("ports", [100, 100])
    kw.setdefault("route", {NIC: 1})
    with pytest.raises(exc, match=match):
        Switch(ports, **kw)


def test_bad_calls():
    sw = switch()
    with pytest.raises(ValueError, match="port must be a port number 0..1"):
        sw.receive(2, udp(), 0)
    with pytest.raises(TypeError, match="a frame is bytes"):
        sw.receive(0, "frame", 0)
    sw.receive(0, udp(), 10)
    with pytest.raises(ValueError, match="time 5 is before time 10"):
        sw.due(5)
    with pytest.raises(TypeError, match="the time must be a number"):
        sw.due(None)
    with pytest.raises(ValueError, match="has no count"):
        run(sw, {0: PacedSender(udp())})
    with pytest.raises(ValueError, match="rate_gbps .* must not exceed line_gbps"):
        PacedSender(udp(), rate_gbps=200)
    with pytest.raises(TypeError, match="frames must be bytes"):
        PacedSender(5)
