"""RoCEv2 frames captured from real NICs (tests/vectors/roce-captures.txt, each with its public
source) and from Linux's soft-RoCE talking to the endpoint (tests/vectors/rxe-captures.txt,
``rocegen sim rxe``: ACKs, NAKs, requests of every kind, duplicates, READ responses) through the
receive path (rocegen.gateware.roce.rx, with the READ requester's verdict): read with ``struct``
as the wire spec lays them out, an ACKNOWLEDGE must leave as the event the spec says (QP,
syndrome, PSN, MSN) and a CNP as a CNP of its QP, when the QP is open to that peer; the same
frames to a closed QP, from another peer, to a QP number outside the table or with one bit
flipped are dropped, each counted by its reason; requests and READ responses pass the length and
ICRC checks to the responder's and the READ requester's ingress (``requests``,
``read_responses``), and with one bit flipped are dropped by the ICRC check. Random idle cycles
and backpressure, at 64 and 512 bits."""

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
    total, proto, src = struct.unpack_from(">H5xB2x4s", frame, at + 2)
    assert proto == 17
    udp = at + 4 * ihl
    sport, dport, ulen = struct.unpack_from(">HHH", frame, udp)
    assert dport == 4791
    bth = udp + 8
    opcode, _, pkey, qp, a_psn = struct.unpack_from(">BBHII", frame, bth)
    f = {"opcode": opcode, "pkey": pkey, "dest_qp": qp & 0xFFFFFF, "psn": a_psn & 0xFFFFFF,
         "src": str(ipaddress.IPv4Address(src)), "udp_payload": frame[bth:udp + ulen],
         "ip_end": at + total}
    if opcode == 0x11:
        (aeth,) = struct.unpack_from(">I", frame, bth + 12)
        f.update(syndrome=aeth >> 24, msn=aeth & 0xFFFFFF)
    return f


def udp_rx(frame):
    """A frame -> the UDP payload and the parsed headers the stack's ``udp_rx`` port gives."""
    at = 18 if frame[12:14] == b"\x81\x00" else 14
    eth = H.ETH.unpack(frame[:12] + frame[at - 2:at])
    ip = H.IPV4.unpack(frame[at:at + 20])
    udp = H.UDP.unpack(frame[at + 20:at + 28])
    return frame[at + 28:at + ip["total_length"]], {"eth": eth, "ipv4": ip, "udp": udp}


def context(state, peer):
    return {"state": state, "peer_ip": int(ipaddress.IPv4Address(peer)), "peer_qpn": 0x11,
            "rkey": 0, "base_va": 0, "pmtu_log2": 10, "udp_sport": 0xC000, "dscp": 0, "ecn": 0,
            "ack_every_log2": 6, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7}


def run(width, datagrams, qps, *, seed):
    """Send ``(payload, meta)`` datagrams with the QP table set to ``qps`` (index -> (state,
    peer)); returns the counts per counter, the ACK events and the QPs of the CNPs."""
    dut = Top(width)
    rx = dut.rx
    drv = StreamDriver(rx.i, width, idle=0.3, seed=seed)
    rng = random.Random(seed)
    counts = dict.fromkeys(COUNTERS, 0)
    events, cnps = [], []

    async def monitor(ctx):
        async for _, _, cnp_qp, *pulses in ctx.tick().sample(rx.cnp_qp,
                                                             *[getattr(rx, c) for c in COUNTERS]):
            for c, v in zip(COUNTERS, pulses):
                counts[c] += v
            if pulses[COUNTERS.index("cnp")]:
                cnps.append(cnp_qp)

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
        await drv.send(ctx, [Packet(p, m) for p, m in datagrams])
        for _ in range(200 * len(datagrams) + 200):
            if sum(counts.values()) >= len(datagrams) and len(events) >= counts["acks"]:
                break
            await ctx.tick()

    run_sim(dut, testbenches=[tb], processes=[monitor, sink])
    return counts, events, cnps


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


@pytest.mark.parametrize("width", [64, 512])
def test_captured_frames_through_the_receive_path(width):
    want = dict.fromkeys(COUNTERS, 0)
    want_events, want_cnps, datagrams = [], [], []
    qps = {}
    for name, frame in CAPTURES:
        f = spec_fields(frame)
        payload, meta = udp_rx(frame)
        qp = f["dest_qp"] - 256
        assert 0 <= qp < NUM_QPS - 1, f"{name}: DestQP {f['dest_qp']:#x} outside the test's table"
        qps[qp] = (QpState.RTS, f["src"])                   # open to the frame's source
        qps[qp + 1] = (QpState.RESET, f["src"])             # closed
        if f["opcode"] == 0x81:
            want["cnp"] += 1
            want_cnps.append(qp)
        elif f["opcode"] == 0x11:
            want["acks"] += 1
            want_events.append({"qp": qp, "syndrome": f["syndrome"], "psn": f["psn"],
                                "msn": f["msn"]})
        elif f["opcode"] in READ_RESPONSES:
            want["read_responses"] += 1
        elif f["opcode"] < 0x0D:
            want["requests"] += 1
        else:
            want["drop_opcode"] += 1
        datagrams.append((payload, meta))
        if f["opcode"] not in (0x11, 0x81):
            if f["opcode"] <= 0x10:                         # one bit flipped: ICRC check
                bad = bytearray(payload)
                bad[len(payload) // 2] ^= 0x10
                datagrams.append((bytes(bad), meta))
                want["icrc_bad"] += 1
            continue                                        # the other checks come after it
        # the same frame from another peer, to the closed QP, to a QP outside the table
        other = dict(meta, ipv4=dict(meta["ipv4"], src=int(ipaddress.IPv4Address(OTHER_PEER))))
        datagrams.append((_with_icrc(payload, other), other))  # the source is under the ICRC
        want["drop_peer"] += 1
        to = bytearray(payload)
        to[5:8] = (f["dest_qp"] + 1).to_bytes(3, "big")     # DestQP is under the ICRC:
        datagrams.append((_with_icrc(to, meta), meta))      # computed again per the spec
        want["drop_state"] += 1
        to[5:8] = (256 + NUM_QPS).to_bytes(3, "big")
        datagrams.append((_with_icrc(to, meta), meta))
        want["drop_qp"] += 1
        for bit in (0, 8 * len(payload) - 1, 8 * min(20, len(payload) - 2) + 3):  # ICRC check
            bad = bytearray(payload)
            bad[bit // 8] ^= 1 << (bit % 8)
            datagrams.append((bytes(bad), meta))
            want["icrc_bad"] += 1
        datagrams.append((payload[:11], meta))              # cut inside the BTH
        want["drop_short"] += 1
    counts, events, cnps = run(width, datagrams, qps, seed=width)
    assert counts == want
    assert events == want_events
    assert cnps == want_cnps


def _with_icrc(transport, meta):
    """``transport`` (BTH ... ICRC) with its ICRC computed again from the spec (zlib), for the
    headers in ``meta``."""
    import zlib
    ip = bytearray(H.IPV4.pack(**meta["ipv4"]))
    udp = bytearray(H.UDP.pack(**meta["udp"]))
    ip[1] = ip[8] = 0xFF
    ip[10:12] = b"\xff\xff"
    udp[6:8] = b"\xff\xff"
    body = bytearray(transport[:-4])
    body[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + bytes(ip) + bytes(udp) + bytes(body))
    return bytes(transport[:-4]) + crc.to_bytes(4, "little")
