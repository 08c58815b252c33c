"""The responder's acknowledgements built whole (:class:`RespAckFrame`): random ACKs, NAKs and RNR
NAKs with idle cycles and backpressure at several widths, each frame against the one scapy
builds (its IPv4 checksum and ICRC computed by scapy) and checked by the ICRC model; the
identification's count; the latency; the parameter checks."""

import random

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocegen.gateware.roce.responder.resp_ack_frame import ACK_DATAGRAM_BYTES, RespAckFrame
from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.testing.amaranth_streams import HandshakeMonitor, StreamCollector, send_records
from rocegen.sim.testing.harness import raises, run_sim
from rocegen.wire.addr import format_ip, format_mac, parse_ip, parse_mac

LOCAL_MAC = "02:00:00:00:00:01"
LOCAL_IP = "192.168.1.10"


def random_ack(rng):
    kind = rng.choice(["ack", "nak", "rnr"])
    syndrome = {"ack": rng.getrandbits(5), "nak": 0x60 | rng.randrange(5),
                "rnr": 0x20 | rng.getrandbits(5)}[kind]
    ack = {"qp": rng.getrandbits(8), "cnp": 0, "syndrome": syndrome, "psn": rng.getrandbits(24),
           "msn": rng.getrandbits(24), "dest_qpn": rng.getrandbits(24),
           "dst_ip": rng.getrandbits(32), "src_port": rng.getrandbits(16),
           "dscp": rng.getrandbits(6)}
    return {"ack": ack, "mac": rng.getrandbits(48) & ~(1 << 40)}


def expected_frame(rec, ident, ttl=64):
    """The Ethernet frame scapy builds for the record (IPv4 checksum and ICRC by scapy)."""
    a = rec["ack"]
    p = (Ether(dst=format_mac(rec["mac"]), src=LOCAL_MAC) /
         IP(tos=a["dscp"] << 2, id=ident, flags="DF", ttl=ttl, src=LOCAL_IP,
            dst=format_ip(a["dst_ip"])) /
         UDP(sport=a["src_port"], dport=4791, chksum=0) /
         BTH(opcode=0x11, pkey=0xFFFF, dqpn=a["dest_qpn"], psn=a["psn"]) /
         AETH(syndrome=a["syndrome"], msn=a["msn"]))
    return bytes(p)


def run(width, records, *, backpressure=0.0, idle=0.0, seed=1, ttl=64):
    dut = RespAckFrame(width, ttl=ttl)
    rng = random.Random(seed)
    col = StreamCollector(dut.o, width, backpressure=backpressure, seed=seed)
    taken = HandshakeMonitor(dut.i)

    async def tb(ctx):
        ctx.set(dut.local_mac, parse_mac(LOCAL_MAC))
        ctx.set(dut.local_ip, parse_ip(LOCAL_IP))
        await send_records(ctx, dut.i, records, rng, idle)
        while len(col.packets) < len(records):
            await ctx.tick()
        await ctx.tick().repeat(10)         # nothing more comes out

    run_sim(dut, testbenches=[tb], processes=[col.run, taken.run], deadline_cycles=100_000)
    assert len(col.packets) == len(records)
    return dut, col, taken.cycles


def frame_of(pkt):
    eth = pkt.meta["eth"]
    return (eth["dst"].to_bytes(6, "big") + eth["src"].to_bytes(6, "big") +
            eth["ethertype"].to_bytes(2, "big") + pkt.data)


@pytest.mark.parametrize("width", [64, 128, 512])
@pytest.mark.parametrize("backpressure, idle", [(0.0, 0.0), (0.3, 0.3), (0.8, 0.1)])
def test_frames_match_scapy(width, backpressure, idle):
    rng = random.Random(width * 7 + int(10 * backpressure))
    records = [random_ack(rng) for _ in range(30)]
    _, col, _ = run(width, records, backpressure=backpressure, idle=idle, seed=width)
    for n, (rec, pkt) in enumerate(zip(records, col.packets)):
        assert len(pkt.data) == ACK_DATAGRAM_BYTES and not pkt.error, n
        frame = frame_of(pkt)
        assert frame == expected_frame(rec, ident=n + 1), (n, frame.hex())
        assert icrc_model.check(frame), n
        parsed = Ether(frame)
        assert parsed[IP].id == n + 1 and parsed[AETH].msn == rec["ack"]["msn"], n


def test_ttl_parameter():
    rng = random.Random(5)
    records = [random_ack(rng) for _ in range(3)]
    _, col, _ = run(64, records, ttl=17)
    for n, (rec, pkt) in enumerate(zip(records, col.packets)):
        frame = frame_of(pkt)
        assert frame == expected_frame(rec, ident=n + 1, ttl=17) and icrc_model.check(frame), n


@pytest.mark.parametrize("width", [64, 512])
def test_latency_and_pace(width):
    """A record taken in cycle t has its first beat offered in t + 2; frames follow one another
    with a cycle between the last beat and the next take, beats back to back."""
    rng = random.Random(9)
    records = [random_ack(rng) for _ in range(4)]
    dut, col, taken = run(width, records)
    nb = dut.beats
    assert nb == -(-ACK_DATAGRAM_BYTES // (width // 8))
    for t, (first, last) in zip(taken, col.spans):
        assert first == t + 2 and last == first + nb - 1, (taken, col.spans)
    for (_, last), t in zip(col.spans, taken[1:]):
        assert t == last + 1, (taken, col.spans)
    assert col.starved == 0


def test_parameters_are_checked():
    raises(ValueError, "width must be one of", lambda: RespAckFrame(100))
    raises(ValueError, "TTL must be an integer from 1 to 255", lambda: RespAckFrame(64, ttl=0))
    raises(ValueError, "TTL must be an integer from 1 to 255", lambda: RespAckFrame(64, ttl=True))
