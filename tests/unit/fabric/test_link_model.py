
"""The faulty-link model (:mod:`rocegen.sim.models.fabric.link`): determinism from the seed, fault rates
within statistical bounds, order kept unless frames are reordered, reordering bounded by the
window, one flipped bit past the Ethernet header, exact delays, exact fault scripts, and
clear errors for bad parameters."""

import logging
import math
import random
from types import SimpleNamespace

import pytest

from rocegen.sim.models.fabric.link import COUNTERS, Delivery, Link

SIGMAS = 5.0


def tagged(seq, length=64):
    """A frame that says which one it is: its number in bytes 0..3, then filler."""
    return seq.to_bytes(4, "big") + bytes((seq + k) & 0xFF for k in range(length - 4))


def seq_of(frame):
    return int.from_bytes(frame[:4], "big")


def run(link, n, *, every=1, tail=None, length=64):
    """Send ``n`` tagged frames, one every ``every`` cycles, polling the link every cycle until
    it is empty; returns ``[(cycle, Delivery)]``."""
    out = []
    t = 0
    sent = 0
    limit = n * every + (tail if tail is not None else 10_000)
    while t < limit and (sent < n or link.in_flight):
        if sent < n and t % every == 0:
            link.send(tagged(sent, length), t)
            sent += 1
        out += [(t, d) for d in link.deliveries(t)]
        t += 1
    assert not link.in_flight, "frames stuck in the link"
    return out


def within(count, n, p):
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return mean - SIGMAS * sd <= count <= mean + SIGMAS * sd


def test_same_seed_same_faults_other_seed_other_faults():
    params = dict(loss=0.1, dup=0.1, reorder=0.1, corrupt=0.1, delay=3, jitter=2)
    a = run(Link(**params, seed=7), 2000)
    b = run(Link(**params, seed=7), 2000)
    c = run(Link(**params, seed=8), 2000)
    assert a == b
    assert a != c


def test_decisions_do_not_move_when_another_fault_is_turned_on():
    """Every frame draws the same values, so the lost frames stay the same with dup on."""
    def lost(**extra):
        link = Link(loss=0.2, seed=3, **extra)
        run(link, 1000)
        return [seq for _, seq, what in link.log if what == "dropped"]
    assert lost() == lost(dup=0.3) == lost(corrupt=0.5, delay=4)


def test_uses_its_own_generator_only():
    random.seed(1)
    before = random.random()
    random.seed(1)
    run(Link(loss=0.5, dup=0.5, reorder=0.5, corrupt=0.5, jitter=3, seed=1), 200)
    assert random.random() == before


@pytest.mark.parametrize("fault, p", [("loss", 0.1), ("dup", 0.05), ("corrupt", 0.08),
                                      ("loss", 0.5), ("dup", 0.9)])
def test_rates_within_statistical_bounds(fault, p):
    n = 20_000
    link = Link(**{fault: p}, seed=11)
    out = run(link, n)
    name = {"loss": "dropped", "dup": "duplicated", "corrupt": "corrupted"}[fault]
    assert within(link.counters[name], n, p), (link.counters, n * p)
    c = link.counters
    assert c["sent"] == n and c["delivered"] == n - c["dropped"] + c["duplicated"] == len(out)


def test_reorder_rate_and_all_combined():
    n = 20_000
    link = Link(loss=0.05, dup=0.05, reorder=0.1, corrupt=0.05, delay=5, seed=12)
    out = run(link, n, every=2)
    held = sum(1 for _, _, what in link.log if what == "held")
    assert within(held, n - link.counters["dropped"], 0.1), held
    assert within(link.counters["dropped"], n, 0.05)
    assert link.counters["delivered"] == len(out)
    assert link.counters["reordered"] <= held


@pytest.mark.parametrize("p_start, length", [(0.01, 5), (0.05, 1), (0.002, 40)])
def test_bursts_lose_runs_of_the_burst_length(p_start, length):
    n = 40_000
    link = Link(burst=(p_start, length), seed=5)
    out = run(link, n)
    got = {seq_of(d.frame) for _, d in out}
    lost = [s for s in range(n) if s not in got]
    runs, start = [], None
    for i, s in enumerate(lost):
        if start is None:
            start = s
        if i + 1 == len(lost) or lost[i + 1] != s + 1:
            runs.append(s - start + 1)
            start = None
    # bursts start only between bursts, so every run of losses is whole bursts (the last one
    # may be cut by the end of the test)
    assert all(r % length == 0 for r in runs[:-1]), runs[:20]
    # a burst starts with probability p_start per frame outside a burst
    assert within(len(lost) // length, n - len(lost), p_start), (len(lost), n)
    # frames between bursts: geometric, fraction lost p*L / (1 - p + p*L)
    frac = p_start * length / (1 - p_start + p_start * length)
    assert abs(len(lost) / n - frac) < 0.25 * frac


def test_order_kept_without_reorder():
    link = Link(loss=0.2, dup=0.3, corrupt=0.2, delay=4, jitter=9, dup_delay=3, seed=2)
    out = run(link, 5000)
    originals = [d.seq for _, d in out if not d.copy]
    assert originals == sorted(originals)
    assert link.counters["reordered"] == 0
    due = {d.seq: t for t, d in out if not d.copy}
    for t, d in out:
        assert d.seq == seq_of(d.frame) or d.corrupted
        if d.copy:
            assert 1 <= t - due[d.seq] <= 3, (t, due[d.seq])


@pytest.mark.parametrize("window", [1, 3, 8])
def test_reorder_only_within_the_window(window):
    n = 4000
    link = Link(reorder=0.3, reorder_window=window, delay=5, seed=window)
    out = run(link, n, every=1 + window % 2)
    order = [d.seq for _, d in out]
    assert sorted(order) == list(range(n)), "a frame lost or delivered twice"
    overtaken = {}
    for i, s in enumerate(order):
        overtaken[s] = sum(1 for later in order[:i] if later > s)
    assert max(overtaken.values()) <= window
    assert max(overtaken.values()) == window      # the window is used in full
    assert link.counters["reordered"] == sum(1 for v in overtaken.values() if v)
    assert link.counters["reordered"] > n * 0.3 * 0.5


def test_reorder_counts_copies_and_held_frames_as_overtakers():
    """Every frame held, some twice: later frames released from the hold and copies of later
    frames count as overtakers, so the bound holds for the original of every frame."""
    link = Link(reorder=1.0, reorder_window=2, dup=0.5, seed=4)
    out = run(link, 300)
    order = [d for _, d in out]
    for i, d in enumerate(order):
        if not d.copy:
            assert sum(1 for e in order[:i] if e.seq > d.seq) <= 2


def test_held_frame_is_released_after_the_hold_time():
    link = Link(reorder=1.0, reorder_window=4, reorder_hold=50, delay=3, seed=0)
    link.send(tagged(0), 10)
    times = [t for t in range(10, 200) for _ in link.due(t)]
    assert times == [10 + 3 + 50]
    assert link.counters["reordered"] == 0          # nothing overtook it


def test_corrupt_flips_exactly_one_bit_past_the_ethernet_header():
    rng = random.Random(9)
    link = Link(corrupt=1.0, seed=9)
    sent = {}
    for t in range(3000):
        frame = rng.randbytes(rng.randrange(15, 300))
        sent[t] = frame
        link.send(frame, t)
    positions = set()
    for d in link.deliveries(3000):
        orig = sent[d.seq]
        assert d.corrupted and len(d.frame) == len(orig)
        diff = int.from_bytes(d.frame, "big") ^ int.from_bytes(orig, "big")
        assert bin(diff).count("1") == 1
        byte = len(orig) - 1 - (diff.bit_length() - 1) // 8
        assert byte >= 14
        positions.add(byte)
    assert link.counters["corrupted"] == 3000
    assert min(positions) == 14 and max(positions) >= 280      # the whole range is used


def test_corrupt_respects_the_predicate_offset_and_short_frames():
    link = Link(corrupt=1.0, corrupt_from=20, corruptible=lambda f: f[0] == 1, seed=1)
    link.send(bytes([1]) + bytes(40), 0)
    link.send(bytes([2]) + bytes(40), 0)
    link.send(bytes([1]) + bytes(19), 0)          # nothing past byte 20
    got = link.deliveries(0)
    assert [d.corrupted for d in got] == [True, False, False]
    assert got[0].frame[:20] == bytes([1]) + bytes(19) and any(got[0].frame[20:])
    assert got[1].frame == bytes([2]) + bytes(40) and got[2].frame == bytes([1]) + bytes(19)


@pytest.mark.parametrize("delay", [0, 1, 7, 1000])
def test_delay_is_exact(delay):
    link = Link(delay=delay)
    sent = sorted(random.Random(delay).sample(range(3000), 300))
    pending = list(sent)
    arrivals = {}
    for t in range(4100):
        if pending and pending[0] == t:
            link.send(tagged(len(sent) - len(pending)), t)
            pending.pop(0)
        for f in link.due(t):
            arrivals[seq_of(f)] = t
    assert [arrivals[k] for k in range(300)] == [t + delay for t in sent]


def test_jitter_stays_in_range_and_keeps_order():
    link = Link(delay=10, jitter=5, seed=3)
    out = run(link, 3000, every=3)
    spread = set()
    for t, d in out:
        assert 10 <= t - d.sent <= 15 + 5          # a frame may wait for the one before it
        spread.add(t - d.sent)
    assert [d.seq for _, d in out] == list(range(3000))
    assert {10, 15} <= spread


def test_due_returns_everything_due_at_once():
    link = Link(delay=5)
    for t in range(10):
        link.send(tagged(t), t)
    assert [seq_of(f) for f in link.due(100)] == list(range(10))
    assert link.due(101) == []


def test_drop_next():
    link = Link()
    link.send(tagged(0), 0)
    link.drop_next(3)
    for s in range(1, 8):
        link.send(tagged(s), s)
    assert [seq_of(f) for f in link.due(8)] == [0, 4, 5, 6, 7]
    assert link.counters["dropped"] == 3
    assert [e for _, _, e in link.log] == ["scripted drop"] * 3


def test_drop_between_is_a_half_open_window():
    link = Link(delay=2)
    out = run(link, 100)
    assert len(out) == 100
    link = Link(delay=2)
    link.drop_between(10, 20)
    link.drop_between(50, 51)
    got = {seq_of(d.frame) for _, d in run(link, 100)}
    assert got == set(range(100)) - set(range(10, 20)) - {50}


def test_drop_matching_with_window_and_count():
    acks = lambda f: seq_of(f) % 3 == 0            # noqa: E731
    link = Link()
    link.drop_matching(acks, start=30, end=90)
    got = {seq_of(d.frame) for _, d in run(link, 120)}
    assert set(range(120)) - got == {s for s in range(30, 90) if s % 3 == 0}
    link = Link()
    link.drop_matching(acks, count=4)
    link.drop_matching(lambda f: seq_of(f) == 100)
    got = {seq_of(d.frame) for _, d in run(link, 120)}
    assert set(range(120)) - got == {0, 3, 6, 9, 100}
    link = Link()
    link.drop_matching(acks)
    link.clear_scripts()
    assert len(run(link, 50)) == 50


def test_scripts_and_random_loss_together_count_once():
    link = Link(loss=0.5, seed=6)
    link.drop_next(100)
    run(link, 100)
    assert link.counters["dropped"] == 100


def test_delivery_fields():
    link = Link(dup=1.0, dup_delay=1, delay=2)
    link.send(b"x" * 20, 5)
    assert link.deliveries(7) == [Delivery(b"x" * 20, 0, 5, False, False)]
    assert link.deliveries(8) == [Delivery(b"x" * 20, 0, 5, False, True)]
    assert set(link.counters) == set(COUNTERS)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"loss": 1.5}, ValueError, "loss must be a probability in [0, 1], not 1.5"),
    ({"dup": -0.1}, ValueError, "dup must be a probability in [0, 1]"),
    ({"reorder": "0.1"}, TypeError, "reorder must be a probability"),
    ({"corrupt": True}, TypeError, "corrupt must be a probability"),
    ({"loss": float("nan")}, ValueError, "loss must be a probability"),
    ({"delay": -1}, ValueError, "delay must be at least 0, not -1"),
    ({"delay": 2.5}, TypeError, "delay must be an integer number of cycles"),
    ({"jitter": -3}, ValueError, "jitter must be at least 0"),
    ({"reorder_window": 0}, ValueError, "reorder_window must be at least 1"),
    ({"reorder_hold": 0}, ValueError, "reorder_hold must be at least 1"),
    ({"dup_delay": 0}, ValueError, "dup_delay must be at least 1"),
    ({"burst": 0.1}, TypeError, "burst must be None or a pair"),
    ({"burst": (2, 3)}, ValueError, "burst p_start must be a probability in [0, 1]"),
    ({"burst": (0.1, 0)}, ValueError, "burst length must be at least 1"),
    ({"corruptible": 3}, TypeError, "corruptible must be a function"),
    ({"seed": "x"}, TypeError, "seed must be an integer"),
    ({"name": 5}, TypeError, "name must be a string"),
])
def test_invalid_parameters(kwargs, error, message):
    with pytest.raises(error) as e:
        Link(**kwargs)
    assert message in str(e.value)


def test_invalid_calls():
    link = Link(name="up")
    link.send(b"a" * 20, 5)
    with pytest.raises(ValueError, match="link 'up': cycle 4 is before cycle 5"):
        link.send(b"a" * 20, 4)
    with pytest.raises(ValueError, match="cycle 3 is before"):
        link.due(3)
    with pytest.raises(TypeError, match="a frame is bytes, not str"):
        link.send("frame", 6)
    with pytest.raises(TypeError, match="the cycle must be an integer"):
        link.due(6.0)
    with pytest.raises(ValueError, match="n must be at least 0"):
        link.drop_next(-1)
    with pytest.raises(ValueError, match="end must be at least 10"):
        link.drop_between(10, 5)
    with pytest.raises(TypeError, match="predicate must be a function"):
        link.drop_matching(None)


# ---------------------------------------------------------------- the links in the RoCE bench

HOST_QPN, FPGA_QPN, PSN0, VA, RKEY = 0x40, 0x100, 0xFFFFFE, 0x1_0000_0000, 0x2000


class _Source:
    """Stands for the AXI-Stream source into the endpoint: records what it is given."""

    def __init__(self, *_):
        self.frames = []
        self.log = logging.getLogger("test_link_model.source")

    def send_nowait(self, frame):
        self.frames.append(bytes(frame.tdata))


@pytest.fixture
def bench(monkeypatch):
    """A MacModel without a simulator: its frame plumbing driven by hand, cycle by cycle."""
    from rocegen.sim.models.rnic import IDEAL, Rnic
    from rocegen.sim.testing import roce_env
    from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
    monkeypatch.setattr(roce_env, "AxiStreamSource", _Source)
    monkeypatch.setattr(roce_env, "AxiStreamBus", type("Bus", (), {"from_prefix": staticmethod(
        lambda dut, prefix: None)}))
    monkeypatch.setattr(roce_env.cocotb, "start_soon", lambda coro: coro.close())

    def make(behaviour=IDEAL, **links):
        nic = Rnic(HOST_MAC, HOST_IP, strict=True, behaviour=behaviour)
        nic.create_qp(HOST_QPN, peer_qpn=FPGA_QPN, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=PSN0,
                      pmtu=256)
        nic.register_mr(VA, 1 << 16, RKEY)
        return roce_env.MacModel(SimpleNamespace(clk=None, rst=None), 64, nic, **links)
    return make


def _frames(count, psn=PSN0, length=256):
    """``count`` one-packet RDMA WRITEs of ``length`` bytes from PSN ``psn``, as the endpoint
    sends them."""
    from rocegen.sim.models.requester.requester import QpSegment, WorkRequest, WrOpcode, build_frame, segment
    from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC

    def addr(text, sep, base):
        return int.from_bytes(bytes(int(x, base) for x in text.split(sep)), "big")
    qp = QpSegment(dest_qpn=HOST_QPN, rkey=RKEY, base_va=VA, psn=psn, pmtu=256)
    out = []
    for k in range(count):
        (pkt,) = segment(WorkRequest(k, WrOpcode.WRITE, length, remote_offset=k * length), qp)
        out.append(build_frame(pkt, bytes([k]) * length, qp, src_mac=addr(FPGA_MAC, ":", 16),
                               dst_mac=addr(HOST_MAC, ":", 16), src_ip=addr(FPGA_IP, ".", 10),
                               dst_ip=addr(HOST_IP, ".", 10), udp_sport=0xC000))
    return out


def _step(mac, cycle, frame=None):
    """One cycle of the MAC loop: the endpoint's frame (if any) ends, then the links."""
    mac.cycle = cycle
    if frame is not None:
        mac.frames.append((cycle, cycle, frame))
        mac._from_endpoint(frame)
    mac._poll_links()


def test_bench_without_links_answers_in_the_same_cycle(bench):
    """Without links an answer goes to the endpoint in the cycle it is made when the host's
    line is free; answers made while it is busy follow one after the other (without a line
    rate, a frame's beats take one cycle each: an ACK of 62 bytes 8 cycles at 64 bits)."""
    from rocegen.sim.testing.roce_env import roce_data_key
    mac = bench()
    frames = _frames(3)
    _step(mac, 10, frames[0])
    assert len(mac.source.frames) == 1 and roce_data_key(mac.source.frames[0]) is None  # an ACK
    _step(mac, 11, frames[1])
    _step(mac, 12, frames[1])          # sent again: a retransmission, ACKed as a duplicate
    assert (mac.roce_frames, mac.retransmitted, mac.retransmissions) == (3, 1, [2])
    assert mac.nic.counters["executed"] == 2 and mac.nic.counters["duplicate"] == 1
    assert len(mac.source.frames) == 1 and mac.in_flight == 2     # waiting for the line
    sent = {}
    for cycle in range(13, 40):
        _step(mac, cycle)
        sent.setdefault(len(mac.source.frames), cycle)
    assert sent[2] == 18 and sent[3] == 26 and mac.in_flight == 0
    mac.clear_sent()
    _step(mac, 40, frames[0])
    assert mac.retransmitted == 1


def test_bench_gives_the_nic_model_the_time(bench):
    """A NIC model answering 1..2 us late and coalescing ACKs by a 3 us timer: the MAC model
    wakes at the cycle its answer falls due (64 bits: a cycle is 6.4 ns) and not before."""
    from rocegen.sim.models.rnic import Behaviour
    from rocegen.sim.testing.roce_env import period_ps
    mac = bench(Behaviour(response_ns=(1000.0, 2000.0), ack_timer_ns=3000.0, ack_every=None))
    frames = _frames(2)
    _step(mac, 10, frames[0])
    _step(mac, 11, frames[1])
    assert mac.source.frames == [] and mac.in_flight == 1
    # the MAC loop steps only to the cycles the model names: its ACK timer of the first packet
    # (3 us), then the ACK's delay (1..2 us)
    wakes = []
    while not mac.source.frames:
        wakes.append(mac.next_due())
        _step(mac, wakes[-1])
    cycle_ns = period_ps(64) / 1000
    assert wakes[0] == 10 + int(-(-3000 // cycle_ns)) and len(wakes) == 2
    assert 10 + 4000 / cycle_ns <= wakes[1] <= 10 + 5000 / cycle_ns + 1
    (ack,) = mac.source.frames
    assert mac.in_flight == 0 and mac.nic.counters["ack_tx"] == 1
    assert ack[14 + 20 + 8 + 9:14 + 20 + 8 + 12] == (PSN0 + 1).to_bytes(3, "big")


def test_bench_links_delay_both_ways(bench):
    mac = bench(to_nic=Link(delay=5), from_nic=Link(delay=3))
    (frame,) = _frames(1)
    seen = []
    for cycle in range(10, 30):
        _step(mac, cycle, frame if cycle == 10 else None)
        seen.append((cycle, mac.nic.counters["rx_frames"], len(mac.source.frames), mac.in_flight))
    assert [c for c, rx, _, _ in seen if rx][0] == 15
    assert [c for c, _, got, _ in seen if got][0] == 18
    assert seen[-1][1:] == (1, 1, 0)


def test_bench_loss_then_retransmission(bench):
    mac = bench(to_nic=Link(), from_nic=Link())
    mac.to_nic.drop_next(1)
    frames = _frames(3)
    for cycle, frame in enumerate(frames + frames[:1]):       # the first one lost, then resent
        _step(mac, cycle, frame)
    for cycle in range(4, 40):          # the host's answers, one after the other on its line
        _step(mac, cycle)
    nic = mac.nic
    assert nic.counters["nak_seq_tx"] == 1 and nic.counters["seq_drop"] == 1
    assert nic.counters["executed"] == 1 and mac.retransmitted == 1
    assert mac.to_nic.counters["dropped"] == 1 and mac.from_nic.counters["delivered"] == 2


def test_bench_corrupted_frames_do_not_trip_the_strict_nic(bench):
    from rocegen.sim.testing.roce_env import is_ipv4
    mac = bench(to_nic=Link(corrupt=1.0, corruptible=is_ipv4, seed=1), from_nic=None)
    frames = _frames(40)
    for cycle, frame in enumerate(frames):
        _step(mac, cycle, frame)
    nic = mac.nic
    assert nic.strict and nic.counters["executed"] == 0 and not mac.source.frames
    assert len(mac.corrupt_log) == 40 and mac.corrupt_log == nic.log
    causes = {entry.split(":")[0] for entry in mac.corrupt_log}
    assert "drop_icrc" in causes and causes <= {"drop_icrc", "ip_drop_checksum", "ip_drop_header",
                                                "udp_drop_length", "udp_drop_checksum",
                                                "udp_drop_port", "ip_drop_length"}, causes
    with pytest.raises(AssertionError, match="drop_icrc"):      # not excused without the link
        bad = bytearray(frames[0])
        bad[-1] ^= 1
        mac.to_nic = None
        _step(mac, 100, bytes(bad))


def test_bench_rejects_what_is_not_a_link(bench):
    with pytest.raises(TypeError, match="to_nic must be a Link or None"):
        bench(to_nic=0.1)


def test_roce_data_key_and_ipv4():
    from rocegen.sim.models.rnic import Rnic
    from rocegen.sim.testing.roce_env import is_ipv4, roce_data_key
    from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC
    frames = _frames(2, psn=0x123456)
    assert [roce_data_key(f) for f in frames] == [(HOST_QPN, 0x123456), (HOST_QPN, 0x123457)]
    assert is_ipv4(frames[0]) and roce_data_key(frames[0][:50]) is None
    nic = Rnic(HOST_MAC, HOST_IP)
    nic.create_qp(HOST_QPN, peer_qpn=FPGA_QPN, peer_ip=FPGA_IP, peer_mac=FPGA_MAC, epsn=0,
                  pmtu=256)
    ack = nic.ack_frame(HOST_QPN, 0x1F, 5)
    assert is_ipv4(ack) and roce_data_key(ack) is None          # not a data packet
    arp = nic.arp_request(FPGA_IP)
    assert not is_ipv4(arp) and roce_data_key(arp) is None
    udp = nic.udp_frame(FPGA_IP, 0xC000, 4792, bytes(40), dst_mac=FPGA_MAC)
    assert is_ipv4(udp) and roce_data_key(udp) is None


def test_link_pair_and_timeout_code():
    from rocegen.sim.testing.roce_env import link_pair, timeout_code
    assert link_pair({"qps": 1}, 322.265625) == (None, None)
    assert link_pair({"loss": 0.0, "rtt_us": 0}, 100) == (None, None)
    up, down = link_pair({"rtt_us": 2.0}, 100.0)
    assert (up.delay, down.delay, up.loss, up.seed, down.seed) == (100, 100, 0, 0, 1)
    up, down = link_pair({"loss": 0.1, "dup": 0.2, "reorder": 0.3, "corrupt": 0.4, "seed": 7}, 100)
    assert (up.loss, up.dup, up.reorder, up.corrupt, up.delay) == (0.1, 0.2, 0.3, 0.4, 0)
    assert (up.seed, down.seed, up.name, down.name) == (14, 15, "to NIC", "from NIC")
    assert up.corruptible is not None
    with pytest.raises(ValueError, match="loss must be a probability"):
        link_pair({"loss": 2}, 100)
    with pytest.raises(ValueError, match="rtt_us must be a number of microseconds >= 0"):
        link_pair({"rtt_us": -1}, 100)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        link_pair({"dup": 0.1, "seed": -1}, 100)
    assert timeout_code({}) == 0 and timeout_code({"rtt_us": 50}) == 0
    assert timeout_code({"dup": 0.01}) == 4 and timeout_code({"loss": 0.1, "rtt_us": 16}) == 4
    assert timeout_code({"loss": 0.1, "rtt_us": 17}) == 5            # 4 x 17 us > 65.5 us
    assert timeout_code({"loss": 0.1, "timeout": 0}) == 0
    assert timeout_code({"timeout": 9}) == 9
    with pytest.raises(ValueError, match="timeout must be a QP timeout code 0..31"):
        timeout_code({"timeout": 32})
