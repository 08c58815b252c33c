"""RoCEv2 frames captured from real NICs (tests/vectors/roce-captures.txt, each with its public
source) and from Linux's soft-RoCE talking to the endpoint (tests/vectors/rxe-captures.txt,
``rocegen sim rxe``: ACKs, NAKs, requests of every kind, duplicates, READ responses) through the
receive path (rocegen.gateware.roce.rx, with the READ requester's verdict), each IPv4 datagram as
the Ethernet layer hands it on, with the receive path's address the frame's destination: read
with ``struct`` as the wire spec lays them out, an ACKNOWLEDGE must leave as the event the spec
says (QP, syndrome, PSN, MSN) and a CNP as a CNP of its QP, when the QP is open to that peer; the
same frames to a closed QP, from another peer, to a QP number outside the table, with one bit
flipped or with a wrong UDP checksum are dropped, each counted by its reason, and with a right
one taken as they are; requests and READ responses pass the length and ICRC checks to the
responder's and the READ requester's ingress (``requests``, ``read_responses``), and with one
bit flipped are dropped by the ICRC check. Every frame to another address, or made one the
network stack would not deliver on UDP port 4791 (another port or protocol, a fragment, a bad
IPv4 header checksum, an inconsistent UDP length), is foreign: counted by none, marked ``error``
on ``req``. Random idle cycles and backpressure, at 64 and 512 bits."""

import ipaddress
import random
import struct

import pytest
from amaranth.hdl import Elaboratable, Module

from rocegen.gateware.roce.layouts import QpState
from rocegen.gateware.roce.requester.qp_table import QpTable
from rocegen.gateware.roce.rx import COUNTERS, RoceRx
from rocegen.sim.models.packets import Packet
from rocegen.sim.testing.amaranth_streams import StreamDriver, meta_dict
from rocegen.sim.testing.harness import run_sim
from rocegen.sim.testing.vectors import CAPTURE_VECTORS, RXE_VECTORS, read_vectors
from rocegen.wire import headers as H
from tests.unit.roce.udp_verdicts import UdpVerdicts

NUM_QPS = 32                    # room for the captured DestQPs (QP numbers from 256)
OTHER_PEER = "192.0.2.99"


class Top(Elaboratable):
    def __init__(self, width):
        self.rx = RoceRx(width, NUM_QPS, reads=True)
        self.table = QpTable(NUM_QPS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx = rx = self.rx
        m.submodules.table = t = self.table
        m.d.comb += [t.lookup_qpn.eq(rx.lookup_qpn), rx.lookup_index.eq(t.lookup_index),
                     rx.lookup_valid.eq(t.lookup_valid), t.rx_qp.eq(rx.rx_qp),
                     rx.rx_context.eq(t.rx_context)]
        return m


def spec_fields(frame):
    """The fields of a captured IPv4 RoCEv2 frame, read with struct from the spec's layout."""
    at = 14
    (ethertype,) = struct.unpack_from(">H", frame, 12)
    if ethertype == 0x8100:
        (ethertype,) = struct.unpack_from(">H", frame, 16)
        at = 18
    assert ethertype == 0x0800, "IPv4 captures only"
    ihl = frame[at] & 0x0F
    total, proto, src, dst = struct.unpack_from(">H5xB2x4s4s", frame, at + 2)
    assert proto == 17
    udp = at + 4 * ihl
    sport, dport, ulen = struct.unpack_from(">HHH", frame, udp)
    assert dport == 4791
    bth = udp + 8
    opcode, _, pkey, qp, a_psn = struct.unpack_from(">BBHII", frame, bth)
    f = {"opcode": opcode, "pkey": pkey, "dest_qp": qp & 0xFFFFFF, "psn": a_psn & 0xFFFFFF,
         "src": str(ipaddress.IPv4Address(src)), "dst": str(ipaddress.IPv4Address(dst)),
         "udp_payload": frame[bth:udp + ulen],
         "ip_end": at + total}
    if opcode == 0x11:
        (aeth,) = struct.unpack_from(">I", frame, bth + 12)
        f.update(syndrome=aeth >> 24, msn=aeth & 0xFFFFFF)
    return f


def ip_rx(frame):
    """A frame -> its IPv4 datagram (from the IPv4 header to the frame's end) and the Ethernet
    metadata, as the Ethernet layer hands them on."""
    at = 18 if frame[12:14] == b"\x81\x00" else 14
    return frame[at:], {"eth": H.ETH.unpack(frame[:12] + frame[at - 2:at])}


def sum16(data):
    """One's complement sum of ``data`` as big-endian 16-bit words (RFC 1071)."""
    data = bytes(data) + bytes(len(data) % 2)
    total = sum(struct.unpack(f">{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def udp_sum(dgram):
    """The one's complement sum of the pseudo-header and the UDP datagram of ``dgram`` (IPv4
    without options): 0xFFFF when its UDP checksum field is right."""
    src_dst = dgram[12:20]
    return sum16(src_dst + struct.pack(">BBH", 0, 17, len(dgram) - 20) + dgram[20:])


def edited(dgram, edits=(), *, udp_checksum=None):
    """``dgram`` (IPv4 without options, then UDP and a RoCEv2 packet) with ``edits``
    (``(offset, bytes)``) made and what covers them made right again from the specs: the IPv4
    header checksum (RFC 791), the ICRC (zlib, as :func:`_with_icrc`) and, when not 0, the UDP
    checksum (RFC 768); ``udp_checksum``: ``"right"`` or ``"wrong"`` to set one."""
    d = bytearray(dgram)
    for at, new in edits:
        d[at:at + len(new)] = new
    d[10:12] = b"\0\0"
    d[10:12] = struct.pack(">H", 0xFFFF ^ sum16(d[:20]))
    d = bytearray(_with_icrc(bytes(d)))
    if udp_checksum or d[26:28] != b"\0\0":
        d[26:28] = b"\0\0"
        right = (0xFFFF ^ udp_sum(d)) or 0xFFFF
        if udp_checksum == "wrong":
            right = right ^ 0x0100 or 0x0200                # (not 0: that is none)
        d[26:28] = struct.pack(">H", right)
    return bytes(d)


def context(state, peer):
    return {"state": state, "peer_ip": int(ipaddress.IPv4Address(peer)), "peer_qpn": 0x11,
            "rkey": 0, "base_va": 0, "pmtu_log2": 10, "udp_sport": 0xC000, "dscp": 0, "ecn": 0,
            "ack_every_log2": 6, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


def udp_verdict(dgram, ours):
    """The network stack's verdict on the UDP checksum of ``dgram`` (cut to its IPv4 total
    length), delivered on UDP port 4791 when ``ours``: None when it gives none (foreign, or
    checksum 0), else whether the checksum is right."""
    (total,) = struct.unpack_from(">H", dgram, 2)
    d = dgram[:total]
    if not ours or d[26:28] == b"\0\0":
        return None
    return udp_sum(d) == 0xFFFF


def run(width, groups, qps, *, seed):
    """Send ``(datagram, meta, ours)`` datagrams, group by group (``(local_ip, datagrams)``:
    the receive path's address set to ``local_ip`` while its group goes through; ``ours``: the
    stack delivers it on UDP port 4791, and gives its UDP checksum's verdict when not 0), with
    the QP table set to ``qps`` (index -> (state, peer)); returns the counts per counter, the ACK
    events, the QPs of the CNPs and the ``error`` flag of each datagram's last beat on
    ``req``."""
    dut = Top(width)
    rx = dut.rx
    drv = StreamDriver(rx.i, width, idle=0.3, seed=seed)
    stack = UdpVerdicts(rx, [udp_verdict(d, ours) for _, g in groups for d, _, ours in g],
                        seed=seed + 1)
    rng = random.Random(seed)
    counts = dict.fromkeys(COUNTERS, 0)
    events, cnps, req = [], [], []

    async def monitor(ctx):
        async for _, _, cnp_qp, valid, last, error, *pulses in ctx.tick().sample(
                rx.cnp_qp, rx.req.valid, rx.req.payload.last, rx.req.payload.error,
                *[getattr(rx, c) for c in COUNTERS]):
            for c, v in zip(COUNTERS, pulses):
                counts[c] += v
            if pulses[COUNTERS.index("cnp")]:
                cnps.append(cnp_qp)
            if valid and last:
                req.append(error)

    async def sink(ctx):
        while True:
            ready = rng.random() >= 0.4
            ctx.set(rx.ack.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(rx.ack.valid, rx.ack.payload)
            if valid and ready:
                events.append(meta_dict(payload))

    async def tb(ctx):
        for k, (state, peer) in qps.items():
            ctx.set(dut.table.ctl.payload, {"qp": k, "context": context(state, peer)})
            ctx.set(dut.table.ctl.valid, 1)
            await ctx.tick()
        ctx.set(dut.table.ctl.valid, 0)
        sent = 0
        for local_ip, datagrams in groups:
            ctx.set(rx.local_ip, int(ipaddress.IPv4Address(local_ip)))
            await drv.send(ctx, [Packet(d, m) for d, m, _ in datagrams])
            sent += len(datagrams)
            for _ in range(200 * len(datagrams) + 200):     # all through before the address
                if len(req) >= sent and len(events) >= counts["acks"]:       # changes
                    break
                await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[monitor, sink, stack.run])
    assert stack.sent == stack.want
    return counts, events, cnps, req


CAPTURES = read_vectors(CAPTURE_VECTORS) + read_vectors(RXE_VECTORS)
READ_RESPONSES = range(0x0D, 0x11)


def test_the_rxe_captures_hold_every_kind():
    """rxe's frames cover what the endpoint must take from a real stack: ACKs, sequence and RNR
    NAKs, READ requests and every READ response, WRITEs and SENDs of every position, with and
    without immediate data, and duplicates."""
    names = {n for n, _ in read_vectors(RXE_VECTORS)}
    want = {"rxe-ack", "rxe-nak-psn-sequence", "rxe-rnr-nak", "rxe-rdma-read-request",
            "rxe-rdma-read-response-first", "rxe-rdma-read-response-middle",
            "rxe-rdma-read-response-last", "rxe-rdma-read-response-only", "rxe-send-first",
            "rxe-send-middle", "rxe-send-last", "rxe-send-only", "rxe-rdma-write-first",
            "rxe-rdma-write-last-with-immediate"}
    assert want <= names, want - names
    assert any(n.startswith("rxe-duplicate-") for n in names)


def test_scapy_parses_the_rxe_captures():
    """scapy's RoCE layer reads rxe's frames with the BTH fields struct reads, and builds them
    again byte for byte."""
    from scapy.contrib.roce import BTH
    from scapy.layers.l2 import Ether
    for name, frame in read_vectors(RXE_VECTORS):
        p = Ether(frame)
        f = spec_fields(frame)
        assert BTH in p, name
        assert (p[BTH].opcode, p[BTH].dqpn, p[BTH].psn) == (f["opcode"], f["dest_qp"], f["psn"])
        assert bytes(p) == frame, name


def test_the_captures_are_what_their_source_says():
    """The captured frames are complete IPv4 RoCEv2 frames (IP total length to the end, the
    spec's ICRC right), so the receive path sees them as the NIC sent them."""
    import zlib
    assert CAPTURES, "no captured frame"
    for name, frame in CAPTURES:
        f = spec_fields(frame)
        at = f["ip_end"] - len(f["udp_payload"]) - 28
        covered = bytearray(frame[at:f["ip_end"] - 4])
        covered[1] = covered[8] = 0xFF                      # TOS, TTL
        covered[10:12] = covered[26:28] = b"\xff\xff"       # IP and UDP checksums
        covered[32] = 0xFF                                  # BTH byte 4
        assert zlib.crc32(b"\xff" * 8 + bytes(covered)).to_bytes(4, "little") == \
            frame[f["ip_end"] - 4:f["ip_end"]], name


#: ways to make a captured datagram one the network stack does not deliver on UDP port 4791
#: (``(offset, bytes)`` edits, the checksums and the ICRC made right again): another UDP
#: destination port, another protocol (ICMP), a fragment (MF), a later fragment, a UDP length
#: one more than the datagram's
FOREIGN = (lambda d: [(22, struct.pack(">H", 17185))],
           lambda d: [(9, bytes([1]))],
           lambda d: [(6, bytes([d[6] | 0x20]))],
           lambda d: [(6, struct.pack(">H", 0x4000 | 185))],
           lambda d: [(24, struct.pack(">H", len(d) - 19))])


@pytest.mark.parametrize("width", [64, 512])
def test_captured_frames_through_the_receive_path(width):
    groups = {}                     # our address -> the datagrams sent while it is
    qps = {}
    addresses = sorted({spec_fields(frame)["dst"] for _, frame in CAPTURES})
    assert len(addresses) > 1, "the captures go to one address: a frame to another is made up"

    def send(local_ip, dgram, meta, expect, event=None):
        """Send ``dgram`` while the receive path's address is ``local_ip``: ``expect`` its
        counter (None: foreign), ``event`` its ACK event or its CNP's QP."""
        groups.setdefault(local_ip, []).append((dgram, meta, expect, event))

    for n, (name, frame) in enumerate(CAPTURES):
        f = spec_fields(frame)
        dgram, meta = ip_rx(frame)
        ours = f["dst"]
        qp = f["dest_qp"] - 256
        assert 0 <= qp < NUM_QPS - 1, f"{name}: DestQP {f['dest_qp']:#x} outside the test's table"
        qps[qp] = (QpState.RTS, f["src"])                   # open to the frame's source
        qps[qp + 1] = (QpState.RESET, f["src"])             # closed
        event = None
        if f["opcode"] == 0x81:
            verdict, event = "cnp", qp
        elif f["opcode"] == 0x11:
            verdict = "acks"
            event = {"qp": qp, "syndrome": f["syndrome"], "psn": f["psn"], "msn": f["msn"]}
        elif f["opcode"] in READ_RESPONSES:
            verdict = "read_responses"
        elif f["opcode"] < 0x0D:
            verdict = "requests"
        else:
            verdict = "drop_opcode"
        # as captured; with a right UDP checksum (the ICRC does not cover it); with a wrong
        # one; foreign: to another of the captures' addresses, made foreign in one of the other
        # ways, its header checksum made wrong (the TTL changed); the long frames (the
        # requests and READ responses with data) one of these each, in turn
        send(ours, dgram, meta, verdict, event)
        others = [a for a in addresses if a != ours]
        variants = [
            (ours, edited(dgram, udp_checksum="right"), verdict, event),
            (ours, edited(dgram, udp_checksum="wrong"), "icrc_bad", None),
            (others[n % len(others)], dgram, None, None),
            (ours, edited(dgram, FOREIGN[n % len(FOREIGN)](dgram)), None, None),
            (ours, dgram[:8] + bytes([dgram[8] ^ 0x40]) + dgram[9:], None, None),
        ]
        for k, (to, variant, expect, ev) in enumerate(variants):
            if len(dgram) < 100 or k == n % len(variants):
                send(to, variant, meta, expect, ev)
        if f["opcode"] not in (0x11, 0x81):
            if f["opcode"] <= 0x10:                         # one bit flipped: ICRC check
                bad = bytearray(dgram)
                bad[28 + len(f["udp_payload"]) // 2] ^= 0x10
                send(ours, bytes(bad), meta, "icrc_bad")
            continue                                        # the other checks come after it
        # the same frame from another peer, to the closed QP, to a QP outside the table (the
        # source and DestQP are under the ICRC, the source under the IPv4 header checksum:
        # computed again)
        send(ours, edited(dgram, [(12, ipaddress.IPv4Address(OTHER_PEER).packed)]), meta,
             "drop_peer")
        send(ours, edited(dgram, [(33, (f["dest_qp"] + 1).to_bytes(3, "big"))]), meta,
             "drop_state")
        send(ours, edited(dgram, [(33, (256 + NUM_QPS).to_bytes(3, "big"))]), meta, "drop_qp")
        for bit in (8 * 28, 8 * len(dgram) - 1, 8 * (28 + min(20, len(dgram) - 30)) + 3):
            bad = bytearray(dgram)                          # ICRC check
            bad[bit // 8] ^= 1 << (bit % 8)
            send(ours, bytes(bad), meta, "icrc_bad")
        # cut inside the BTH: 11 bytes of UDP payload, the lengths saying so (Ethernet's
        # padding after it), or the frame cut short of its total length (padded)
        cut = edited(dgram[:39], [(2, struct.pack(">H", 39)), (24, struct.pack(">H", 19))])
        send(ours, cut + bytes(7), meta, "drop_short")
        send(ours, dgram[:39] + bytes(7), meta, "drop_short")
    sent = [t for group in groups.values() for t in group]
    want = dict.fromkeys(COUNTERS, 0)
    for *_, expect, _ in sent:
        if expect:
            want[expect] += 1
    foreign = sum(expect is None for *_, expect, _ in sent)
    assert foreign >= len(CAPTURES)
    counts, events, cnps, req = run(width, [(a, [(d, m, e is not None) for d, m, e, _ in g])
                                            for a, g in groups.items()], qps, seed=width)
    assert counts == want
    assert events == [e for *_, expect, e in sent if expect == "acks"]
    assert cnps == [e for *_, expect, e in sent if expect == "cnp"]
    # every datagram on req, marked error when foreign or bad, not when it passed the checks
    assert len(req) == len(sent)
    for (dgram, _, expect, _), error in zip(sent, req):
        if expect != "drop_short":
            assert error == (expect in (None, "icrc_bad")), (expect, dgram.hex())


def _with_icrc(dgram):
    """The IPv4 datagram ``dgram`` (IHL 5, from the IPv4 header to the ICRC) with its ICRC
    computed again from the spec (zlib): the CRC-32 of eight 0xFF bytes and the datagram but
    the ICRC, with TOS, TTL, the IPv4 and UDP checksums and BTH byte 4 set to ones."""
    import zlib
    covered = bytearray(dgram[:-4])
    covered[1] = covered[8] = covered[32] = 0xFF
    covered[10:12] = covered[26:28] = b"\xff\xff"
    return bytes(dgram[:-4]) + zlib.crc32(b"\xff" * 8 + bytes(covered)).to_bytes(4, "little")
