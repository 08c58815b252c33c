"""The receive-fuzz frame generator (sim/testing/fuzz.py): its frames parsed with scapy, the safety rule
checked on 20000 of them with an ICRC computed here from the wire rules, and its model of the
network stack's delivery to UDP port 4791 compared with the stack's reference model."""

import collections
import random
import zlib

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import checksum

from rocegen.gateware.roce.endpoint.endpoint import IP_MTU
from rocegen.sim.models.net.netstack import NetStackModel
from rocegen.sim.testing import fuzz
from rocegen.sim.testing.scenarios import FPGA_IP, FPGA_MAC, HOST_IP, HOST_MAC

LIVE = (256, 257, 259)          # open QPs (QP numbers), all with HOST_IP as peer
PEERS = {q: HOST_IP for q in LIVE}
NUM_QPS = 8
ADDR = dict(our_mac=FPGA_MAC, our_ip=FPGA_IP, peer_ip=HOST_IP)
ADDR_OURS = dict(our_mac=FPGA_MAC, our_ip=FPGA_IP)


def icrc_ok(dg):
    """The ICRC at the end of the IPv4 datagram ``dg`` (20-byte header) is right: CRC-32 over
    8 bytes of 0xFF and the datagram with TOS, TTL, header checksum, UDP checksum and BTH byte 4
    set to ones, least significant byte first."""
    covered = bytearray(dg[:-4])
    for k in (1, 8, 10, 11, 26, 27, 32):
        if k < len(covered):
            covered[k] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(covered)).to_bytes(4, "little") == dg[-4:]


def acceptable_ack(frame):
    """What the safety rule forbids, read with scapy: an IPv4 (version 4, IHL 5) datagram from
    the peer, behind any tags, whose ICRC is right when the datagram ends at its total length or
    at the end of the frame, with an ACKNOWLEDGE to a live QP with a valid P_Key."""
    if len(frame) < 14:
        return False
    p = Ether(frame)
    if IP not in p:
        return False
    ip = p[IP]
    raw = ip.original
    if ip.version != 4 or ip.ihl != 5 or ip.src != HOST_IP or len(raw) < 44:
        return False
    bth = BTH(raw[28:40] + bytes(4))
    if bth.opcode != 0x11 or bth.pkey & 0x7FFF != 0x7FFF or bth.dqpn not in LIVE:
        return False
    return any(44 <= end <= len(raw) and icrc_ok(raw[:end]) for end in (ip.len, len(raw)))


@pytest.fixture(scope="module")
def frames():
    return fuzz.fuzz_frames(20000, 7, **ADDR, qpns=LIVE, psn_range=range(0xFFFFF0, 0x1000010))


def test_valid_ack():
    f = fuzz.valid_ack(**ADDR, qpn=257, psn=0x123456, msn=77, syndrome=0x61)
    p = Ether(f)
    assert p.dst == FPGA_MAC and p.src == HOST_MAC
    assert p[IP].src == HOST_IP and p[IP].dst == FPGA_IP and p[IP].flags == "DF"
    assert p[IP].len == len(f) - 14 == 48
    assert checksum(f[14:34]) == 0
    assert p[UDP].dport == 4791 and p[UDP].len == 28 and p[UDP].chksum == 0
    assert (p[BTH].opcode, p[BTH].dqpn, p[BTH].psn, p[BTH].pkey) == (0x11, 257, 0x123456, 0xFFFF)
    assert (p[AETH].syndrome, p[AETH].msn) == (0x61, 77)
    assert icrc_ok(f[14:])
    assert fuzz.roce_verdict(f, **ADDR_OURS, peers=PEERS, num_qps=NUM_QPS) == "roce_rx_acks"
    assert fuzz.could_acknowledge(f, peer_ip=HOST_IP, qpns=LIVE)
    assert acceptable_ack(f)

def test_read_response_verdicts():
    """READ responses: handed on by an endpoint with the READ requester (after the length and
    ICRC checks), dropped for their opcode by one without."""
    from rocegen.sim.models import icrc
    ack = fuzz.valid_ack(**ADDR, qpn=257, psn=0x123456, msn=77, syndrome=0)
    for opcode in (0x0D, 0x0F, 0x10, 0x0E):
        f = bytearray(ack)
        f[14 + 28] = opcode
        f = icrc.append(bytes(f[:-4]))
        assert fuzz.roce_verdict(f, **ADDR_OURS, peers=PEERS, num_qps=NUM_QPS,
                                 reads=True) == "roce_rx_read_responses"
        assert fuzz.roce_verdict(f, **ADDR_OURS, peers=PEERS, num_qps=NUM_QPS) == \
            "roce_rx_drop_opcode"
        bad = f[:-1] + bytes([f[-1] ^ 1])
        assert fuzz.roce_verdict(bad, **ADDR_OURS, peers=PEERS, num_qps=NUM_QPS,
                                 reads=True) == "roce_rx_icrc_bad"


#: What each mutation of a good ACK to a live QP becomes: a RoCE verdict, or None (dropped by
#: the network stack), or a set of possible outcomes (a wrong UDP checksum reaches RoCE marked
#: damaged and fails its ICRC check).
EXPECT = {
    "udp_port": None, "dst_ip": None, "dst_mac": None, "ip_options": None, "fragment": None,
    "vlan": None, "ethertype": None, "ip_checksum": None, "ip_version": None, "ihl": None,
    "ip_length": None, "protocol": None, "udp_length": None,
    "dest_qp": {"roce_rx_drop_qp", "roce_rx_drop_state"}, "src_ip": "roce_rx_drop_peer",
    "pkey": "roce_rx_drop_pkey",
    "opcode": {"roce_rx_drop_opcode", "roce_rx_drop_short", "roce_rx_requests"},
    "cnp": {"roce_rx_cnp", "roce_rx_drop_short"}, "icrc": "roce_rx_icrc_bad",
    "grow": "roce_rx_icrc_bad", "shrink": "roce_rx_drop_short", "broadcast": "roce_rx_acks",
    "trailing": "roce_rx_acks", "masked": "roce_rx_acks", "bth_fields": "roce_rx_acks",
    "udp_checksum": {"roce_rx_icrc_bad", "roce_rx_acks"},
    "truncate": {None, "roce_rx_drop_short"}, "flip": {None, "roce_rx_icrc_bad", "roce_rx_acks"},
    "flips": {None, "roce_rx_icrc_bad", "roce_rx_acks"},
    "flip_field": {None, "roce_rx_icrc_bad", "roce_rx_acks"},
}


def test_every_mutation():
    assert set(EXPECT) == set(fuzz.MUTATIONS)
    rng = random.Random(3)
    seen = collections.defaultdict(set)
    for n in range(60):
        base = fuzz.valid_ack(**ADDR, qpn=LIVE[n % 3], psn=rng.getrandbits(24),
                              msn=rng.getrandbits(24), identification=n + 1)
        got = fuzz.mutations(base, rng, live_qpns=LIVE, peer_ip=HOST_IP)
        assert len(got) == len(fuzz.MUTATIONS)
        for kind, f in zip(fuzz.MUTATIONS, got):
            assert f != base, kind
            v = fuzz.roce_verdict(f, **ADDR_OURS, peers=PEERS, num_qps=NUM_QPS)
            want = EXPECT[kind]
            assert v in want if isinstance(want, set) else v == want, (kind, v, f.hex())
            seen[kind].add(v)
    # the random choices reach every outcome listed
    for kind in ("dest_qp", "opcode", "cnp", "udp_checksum", "truncate"):
        assert seen[kind] == EXPECT[kind], kind
    with pytest.raises(ValueError, match="unknown mutation"):
        fuzz.mutate(base, rng, "bogus")
    with pytest.raises(ValueError, match="not an untagged IPv4 RoCEv2 frame"):
        fuzz.mutate(base[:30], rng, "flip")


def test_deterministic():
    state = random.getstate()
    a = fuzz.fuzz_frames(300, 11, **ADDR, qpns=LIVE, psn_range=range(100))
    assert random.getstate() == state           # scapy's use of the global generator undone
    random.seed(99)
    assert fuzz.fuzz_frames(300, 11, **ADDR, qpns=LIVE, psn_range=range(100)) == a
    assert fuzz.fuzz_frames(300, 12, **ADDR, qpns=LIVE, psn_range=range(100)) != a
    assert len(a) == 300 and all(a)


def test_safety_rule(frames):
    """No frame may be taken as an ACKNOWLEDGE by a live QP, whatever the stack checks."""
    assert len(frames) == 20000
    bad = [f.hex() for f in frames if acceptable_ack(f)]
    assert not bad, bad[:3]
    assert not any(fuzz.could_acknowledge(f, peer_ip=HOST_IP, qpns=LIVE) for f in frames)
    # nor goes to the connection manager
    for f in frames:
        p = Ether(f) if len(f) >= 14 else None
        assert not (p and UDP in p and p[UDP].dport == 17185)


def test_the_rule_is_tested():
    """The scapy check above finds what it must: good ACKs to live QPs, however disguised."""
    rng = random.Random(5)
    base = fuzz.valid_ack(**ADDR, qpn=259, psn=9)
    assert acceptable_ack(base)
    for kind in ("broadcast", "trailing", "masked", "bth_fields", "vlan", "fragment", "dst_ip",
                 "dst_mac"):
        assert acceptable_ack(fuzz.mutate(base, rng, kind)), kind
    assert not acceptable_ack(fuzz.mutate(base, rng, "icrc"))
    assert not acceptable_ack(fuzz.valid_ack(**ADDR, qpn=258, psn=9))
    assert not acceptable_ack(fuzz.valid_ack(**ADDR, qpn=259, psn=9, pkey=0x7FFE))


def test_verdict_mix(frames):
    """The frames reach every RoCE verdict but an accepted ACK (and READ responses and MADs
    handed on, which an endpoint without the READ requester and the IB CM never does), and many
    stack drop reasons."""
    verdicts = collections.Counter(
        fuzz.roce_verdict(f, **ADDR_OURS, peers=PEERS, num_qps=NUM_QPS) for f in frames)
    never = ("roce_rx_acks", "roce_rx_read_responses", "roce_rx_mads")
    assert [verdicts[name] for name in never] == [0, 0, 0]
    for name in fuzz.VERDICT_COUNTERS:
        if name not in never:
            assert verdicts[name] >= 20, (name, verdicts)
    candidates = fuzz.count_roce_candidates(frames, FPGA_MAC, FPGA_IP)
    assert candidates == sum(v for k, v in verdicts.items() if k is not None)
    assert 0.3 * len(frames) < candidates < 0.7 * len(frames)


def stack_model():
    """The network stack's reference model with RoCEv2's port as its only UDP port, taken
    cut-through as the endpoint does (it is the model's echo port: a datagram delivered there
    whole is answered, or needs ARP first; a damaged one is handed on)."""
    return NetStackModel(FPGA_MAC, FPGA_IP, echo_port=4791, udp_ports=(), mtu=IP_MTU,
                         cut_ports=(4791,))


def delivered(model, frame):
    model.delivered.clear()
    _, counters = model.handle_all(frame)
    return counters in ([], ["arp_tx_request"]) or bool(model.delivered)


def test_candidates_match_the_stack_model(frames):
    model = stack_model()
    reasons = collections.Counter()
    for n, f in enumerate(frames):
        mine = fuzz.roce_datagram(f, FPGA_MAC, FPGA_IP) is not None
        assert mine == delivered(model, f), (n, f.hex())
        reasons.update(model.handle_all(f)[1])
    for name in ("eth_runt", "eth_drop_addr", "eth_drop_ethertype", "ip_runt", "ip_drop_header",
                 "ip_drop_options", "ip_drop_fragment", "ip_drop_addr", "ip_drop_protocol",
                 "ip_truncated", "udp_drop_checksum", "udp_drop_length", "udp_drop_port",
                 "udp_runt"):
        assert reasons[name] >= 5, (name, reasons)


def test_candidate_rules():
    """Hand-made frames at the edges of the stack's checks."""
    ok = fuzz.valid_ack(**ADDR, qpn=256, psn=1)
    cases = [
        (ok, True),
        (ok + bytes(30), True),                                         # Ethernet padding
        (bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / Ether(ok)[IP]), True),  # broadcast
        (bytes(Ether(dst="02:00:00:00:00:02") / Ether(ok)[IP]), False),
        (ok[:-1], True),                            # truncated: arrives damaged (cut-through)
        (ok[:14 + 27], False),                                          # no whole UDP header
    ]
    p = Ether(ok)
    p[UDP].chksum = None
    cases.append((bytes(p)[:-1], True))       # truncated, with a checksum: arrives damaged
    p = Ether(ok)
    p[UDP].chksum = None                                               # a correct checksum
    cases.append((bytes(p), True))
    p = Ether(ok)
    p[UDP].chksum = 0x1234
    cases.append((bytes(p), True))                                  # arrives marked damaged
    p = Ether(ok)
    p[IP].flags = "evil+DF"                                             # reserved bit ignored
    p[IP].chksum = None
    cases.append((bytes(p), True))
    p = Ether(ok)
    p[IP].ttl = 0
    cases.append((bytes(p), False))                                     # stale header checksum
    for frame, want in cases:
        assert (fuzz.roce_datagram(frame, FPGA_MAC, FPGA_IP) is not None) == want, frame.hex()
        assert delivered(stack_model(), frame) == want, frame.hex()
    assert fuzz.count_roce_candidates([c for c, _ in cases], FPGA_MAC, FPGA_IP) == \
        sum(w for _, w in cases)


def test_scapy_fuzz_and_random_frames():
    rng = random.Random(8)
    for layers in (["eth"], ["ip"], ["udp"], ["bth"], ["aeth"], ["ip", "bth", "aeth"]):
        for _ in range(20):
            f = fuzz.scapy_fuzz(rng, **ADDR, qpn=256, psn=5, layers=layers)
            assert Ether(f).dst == FPGA_MAC
    with pytest.raises(ValueError, match="unknown layer"):
        fuzz.scapy_fuzz(rng, **ADDR, qpn=256, psn=5, layers=["tcp"])
    lengths = {len(fuzz.random_frame(rng, **ADDR)) for _ in range(200)}
    assert min(lengths) >= 1 and max(lengths) > 100 and len(lengths) > 50


def test_parameter_errors():
    with pytest.raises(ValueError, match="psn_range"):
        fuzz.fuzz_frames(1, 0, **ADDR, qpns=LIVE, psn_range=(5, 5))
    with pytest.raises(ValueError, match="qpns"):
        fuzz.fuzz_frames(1, 0, **ADDR, qpns=[], psn_range=(0, 5))
    with pytest.raises(ValueError, match="n must be"):
        fuzz.fuzz_frames(-1, 0, **ADDR, qpns=LIVE, psn_range=(0, 5))
    with pytest.raises(ValueError, match="24-bit"):
        fuzz.valid_ack(**ADDR, qpn=1 << 24, psn=0)
