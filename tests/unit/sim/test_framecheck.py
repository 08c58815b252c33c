"""The independent frame check (rocegen.sim.testing.framecheck): frames written here byte by byte from the
wire spec (struct and zlib, not the project's header table or ICRC model) pass it; a wrong ICRC,
a wrong field, and every kind of padding error fail it with a message that names the fault; a
connection-manager reply is compared with the request it answers."""

import struct
import zlib

import pytest

from rocegen.sim.testing.framecheck import FrameChecker, FrameCheckError, cm_decode, cm_encode
from rocegen.sim.testing.vectors import CAPTURE_VECTORS, read_vectors

HOST_MAC, FPGA_MAC = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
HOST_IP, FPGA_IP = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])


def ip_checksum(hdr):
    s = sum(struct.unpack(f">{len(hdr) // 2}H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(payload_len, *, tos=0x02, ident=0x1234, ttl=64, src=FPGA_IP, dst=HOST_IP, flags=0x4000,
         total=None):
    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, tos, total or 20 + payload_len, ident, flags, ttl, 17,
                      0, src, dst)
    return hdr[:10] + struct.pack(">H", ip_checksum(hdr)) + hdr[12:]


def icrc(ip_udp_bth_rest):
    """The spec's ICRC: 8 x 0xFF, then IP / UDP / BTH ... with TOS, TTL, IP checksum, UDP
    checksum and BTH byte 4 set to ones; CRC-32, least significant byte first."""
    b = bytearray(ip_udp_bth_rest)
    b[1] = 0xFF
    b[8] = 0xFF
    b[10:12] = b"\xff\xff"
    b[26:28] = b"\xff\xff"
    b[28 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(b)).to_bytes(4, "little")


def bth(opcode, *, se=0, m=0, pad=0, tver=0, pkey=0xFFFF, byte4=0, qpn=0x11, ackreq=0, resv7=0,
        psn=5):
    return struct.pack(">BBHB3sB3s", opcode, se << 7 | m << 6 | pad << 4 | tver, pkey, byte4,
                       qpn.to_bytes(3, "big"), ackreq << 7 | resv7, psn.to_bytes(3, "big"))


def roce(transport, *, sport=0xC001, vlan=None, udp_len=None, ip_total=None, bad_icrc=False,
         ttl=64):
    """An Ethernet frame carrying ``transport`` (BTH, extension headers, payload, pad) and its
    ICRC."""
    n = 8 + len(transport) + 4
    ip = ipv4(n, total=ip_total, ttl=ttl)
    udp = struct.pack(">HHHH", sport, 4791, udp_len or n, 0)
    crc = icrc(ipv4(n, ttl=ttl) + struct.pack(">HHHH", sport, 4791, n, 0) + transport)
    if bad_icrc:
        crc = bytes([crc[0] ^ 0x01]) + crc[1:]
    eth = HOST_MAC + FPGA_MAC + (b"\x81\x00" + struct.pack(">H", vlan) if vlan is not None else b"")
    return eth + b"\x08\x00" + ip + udp + transport + crc


def reth(va=0x1000_0000_0040, rkey=0x1234, dlen=300):
    return struct.pack(">QII", va, rkey, dlen)


def atomic_eth(va=0x1000_0000_0048, rkey=0x1234, swap_add=1, compare=0):
    return struct.pack(">QIQQ", va, rkey, swap_add, compare)


def good_frames():
    return {
        "write first": roce(bth(0x06, psn=1) + reth() + bytes(range(256))),
        "write middle": roce(bth(0x07, psn=2) + bytes(256)),
        "write last, pad 2": roce(bth(0x08, pad=2, ackreq=1) + b"\x01\x02" + b"\0\0"),
        "write only imm": roce(bth(0x0B, se=1, pad=3, ackreq=1) + reth(dlen=1)
                               + b"\xde\xad\xbe\xef" + b"\x55\0\0\0"),
        "send last imm": roce(bth(0x03, se=1, ackreq=1) + b"\x00\x00\x01\x00" + bytes(8)),
        "send only, no payload": roce(bth(0x04, ackreq=1, m=1)),
        "read request": roce(bth(0x0C) + reth(dlen=4096)),
        "ack": roce(bth(0x11) + b"\x1f\x00\x00\x03"),
        "cnp": roce(bth(0x81, byte4=0x40) + bytes(16)),
        "vlan": roce(bth(0x0A, ackreq=1) + reth(dlen=8) + bytes(8), vlan=(3 << 13) | 100),
        "compare swap": roce(bth(0x13, ackreq=1) + atomic_eth(swap_add=7, compare=6)),
        "fetch add": roce(bth(0x14, ackreq=1) + atomic_eth()),
        "atomic ack": roce(bth(0x12) + b"\x1f\x00\x00\x04" + struct.pack(">Q", 2**64 - 2)),
    }


def arp_reply(pad=True):
    frame = (HOST_MAC + FPGA_MAC + b"\x08\x06" + struct.pack(">HHBBH", 1, 0x0800, 6, 4, 2)
             + FPGA_MAC + FPGA_IP + HOST_MAC + HOST_IP)
    return frame + bytes(60 - len(frame)) if pad else frame


def check_fails(frame, *words, checker=None):
    checker = checker or FrameChecker("test")
    with pytest.raises(FrameCheckError) as e:
        checker.check(frame)
    msg = str(e.value)
    for w in words:
        assert w in msg, f"{w!r} not in:\n{msg}"
    assert checker.counts["frames"] == 0 or checker is not None
    return msg


def test_spec_icrc_helper_agrees_with_a_connectx_capture():
    """The test's own ICRC function on a CNP captured from a ConnectX-4 Lx (tests/vectors)."""
    frame = dict(read_vectors(CAPTURE_VECTORS))["cnp-connectx4lx"]
    assert icrc(frame[14:-4]) == frame[-4:]


def test_good_frames_pass_and_are_counted():
    c = FrameChecker("bench")
    frames = good_frames()
    for name, frame in frames.items():
        assert c.check(frame) == "roce", name
    assert c.check(arp_reply()) == "arp"
    assert c.check(arp_reply(pad=False)) == "arp"           # the MAC pads it
    assert c.counts["frames"] == len(frames) + 2
    assert c.counts["roce"] == len(frames)
    assert f"{len(frames) + 2} frames rebuilt by scapy" in c.summary()


def deth(qkey=0x80010000, src_qp=1):
    return struct.pack(">IB3s", qkey, 0, src_qp.to_bytes(3, "big"))


def mad(head=b"\x01\x07\x02\x03", n=256):
    """A MAD: base version, class, class version, method, then zeros (``n`` bytes in all)."""
    return (head + bytes(n))[:n]


def test_cm_datagrams_pass_and_their_rules_hold():
    """The IB CM's UD SEND_ONLY frames from QP1: rebuilt with the DETH; the Q_Key, source QP,
    MAD length and the MAD's first bytes checked."""
    c = FrameChecker("test")
    assert c.check(roce(bth(0x64, qpn=1) + deth() + mad())) == "roce"
    check_fails(roce(bth(0x64, qpn=1) + deth(qkey=0x1234) + mad()), "Q_Key 0x1234")
    check_fails(roce(bth(0x64, qpn=1) + deth(src_qp=2) + mad()), "source QP 2")
    check_fails(roce(bth(0x64, qpn=1) + deth() + mad(n=252)), "256-byte MAD", "not 252")
    check_fails(roce(bth(0x64, qpn=1) + deth() + mad(b"\x01\x04\x01")), "01 07 02")
    check_fails(roce(bth(0x64, qpn=1) + deth() + mad(b"\x01\x07\x03\x03")), "01 07 02")
    # a Get of class version 3 answered: GetResp, status bad version, its version kept
    assert c.check(roce(bth(0x64, qpn=1) + deth() + mad(b"\x01\x07\x03\x81\x00\x04"))) == \
        "roce"
    check_fails(roce(bth(0x64, qpn=1) + deth()[:6]), "bytes left for DETH")


def test_wrong_icrc_fails():
    frame = roce(bth(0x0A, ackreq=1) + reth(dlen=4) + b"abcd", bad_icrc=True)
    check_fails(frame, "BTH.icrc", "differs from scapy's rebuild")
    # every single-bit error of the ICRC-covered part (outside the recomputed fields) as well
    good = good_frames()["write first"]
    for at in (14 + 12, 14 + 20 + 8 + 5, 14 + 20 + 8 + 12 + 3, len(good) - 5, len(good) - 1):
        bad = bytearray(good)
        bad[at] ^= 0x10
        check_fails(bytes(bad), "fails the independent check")


@pytest.mark.parametrize("fault,frame,words", [
    ("IP total length", lambda: roce(bth(0x07) + bytes(256), ip_total=20 + 8 + 12 + 256),
     ["4 bytes follow IPv4 total length 296", "UDP.len"]),
    ("UDP length", lambda: roce(bth(0x07) + bytes(256), udp_len=8 + 12 + 256 + 8), ["UDP.len"]),
    ("TVer", lambda: roce(bth(0x07, tver=1) + bytes(256)), ["TVer"]),
    ("P_Key", lambda: roce(bth(0x07, pkey=0x7FFF) + bytes(256)), ["P_Key"]),
    ("reserved", lambda: roce(bth(0x07, resv7=1) + bytes(256)), ["reserved (byte 8)"]),
    ("FECN", lambda: roce(bth(0x07, byte4=0x80) + bytes(256)), ["FECN"]),
    ("source port", lambda: roce(bth(0x07) + bytes(256), sport=4791), ["UDP ports"]),
    ("TTL", lambda: roce(bth(0x07) + bytes(256), ttl=0), ["TTL is 0"]),
    ("ACK with payload", lambda: roce(bth(0x11) + b"\x1f\0\0\0" + bytes(4)), ["ACKNOWLEDGE"]),
    ("RETH cut", lambda: roce(bth(0x0A) + reth()[:12]), ["bytes left for RETH"]),
    ("CNP length", lambda: roce(bth(0x81, byte4=0x40) + bytes(12)), ["16 bytes"]),
    ("atomic with payload", lambda: roce(bth(0x14, ackreq=1) + atomic_eth() + bytes(4)),
     ["4 payload bytes", "FETCH_ADD"]),
    ("AtomicETH cut", lambda: roce(bth(0x13) + atomic_eth()[:20]),
     ["bytes left for AtomicETH"]),
    ("AtomicAckETH cut", lambda: roce(bth(0x12) + b"\x1f\0\0\0" + bytes(4)),
     ["bytes left for AtomicAckETH"]),
    ("READ request with payload", lambda: roce(bth(0x0C) + reth(dlen=4) + bytes(4)),
     ["4 payload bytes", "RDMA_READ_REQUEST"]),
])
def test_wrong_field_fails(fault, frame, words):
    check_fails(frame(), *words)


def test_wrong_ip_checksum_fails():
    frame = bytearray(good_frames()["ack"])
    frame[14 + 10] ^= 0x01
    check_fails(bytes(frame), "IP.chksum")


@pytest.mark.parametrize("fault,frame,words", [
    ("pad not zero", lambda: roce(bth(0x08, pad=2) + b"\x01\x02\x03\x00"),
     ["pad bytes are not zero"]),
    ("PadCnt on FIRST", lambda: roce(bth(0x06, pad=1) + reth() + bytes(256)),
     ["not the last packet"]),
    ("payload not a multiple of 4", lambda: roce(bth(0x08, pad=1) + bytes(3 + 4)),
     ["not a multiple of 4"]),
    ("PadCnt beyond the payload", lambda: roce(bth(0x08, pad=3) + bytes(0)), ["PadCnt 3"]),
    ("PadCnt on ACK", lambda: roce(bth(0x11, pad=1) + b"\x1f\0\0\0"), ["PadCnt 1"]),
])
def test_padding_errors_fail(fault, frame, words):
    check_fails(frame(), *words)


def test_ethernet_padding_errors_fail():
    arp = arp_reply()
    check_fails(arp[:-1] + b"\x01", "Ethernet padding is not zero")
    check_fails(arp + bytes(4), "padding may only fill")
    ack = good_frames()["ack"]                  # 66 bytes: no padding allowed
    check_fails(ack + bytes(2), "padding may only fill")


# ------------------------------------------------------------------- connection-manager replies

CM_HOST_PORT = 50000


def udp_frame(src, dst, sport, dport, payload, *, checksum=True, to_fpga=True):
    n = 8 + len(payload)
    ip = ipv4(n, src=src, dst=dst, tos=0)
    csum = 0
    if checksum:
        pseudo = src + dst + struct.pack(">BBH", 0, 17, n)
        udp0 = struct.pack(">HHHH", sport, dport, n, 0) + payload
        csum = ip_checksum(pseudo + udp0 + b"\0" * (len(udp0) % 2)) or 0xFFFF
    macs = FPGA_MAC + HOST_MAC if to_fpga else HOST_MAC + FPGA_MAC
    return macs + b"\x08\x00" + ip + struct.pack(">HHHH", sport, dport, n, csum) + payload


def cm_request(req_type, **kw):
    d = dict(info_valid=1, req_type=req_type, ack_valid=0, ack_type=0, byte1=0, loc_qpn=0,
             byte5=0, loc_psn=0, loc_rkey=0, loc_vaddr=0, loc_ip=0, byte25=0, rem_qpn=0, byte29=0,
             rem_psn=0, rem_rkey=0, rem_vaddr=0, rem_ip=0, listening_port=0, byte51=0,
             dma_length=0, n_transfers=0, frequency=0)
    d.update(kw)
    return cm_encode(d)


def raw_reply(flags, loc_qpn, loc_psn, rem_qpn, rem_psn, rem_rkey, rem_vaddr, port,
              *, ext=b"\0\0\0\0"):
    """A reply written out byte by byte from the spec's table (not through cm_encode)."""
    b = bytearray(64)
    b[0] = flags
    b[1], b[5], b[25], b[29] = ext
    b[2:5] = loc_qpn.to_bytes(3, "big")
    b[6:9] = loc_psn.to_bytes(3, "big")
    b[21:25] = FPGA_IP
    b[26:29] = rem_qpn.to_bytes(3, "big")
    b[30:33] = rem_psn.to_bytes(3, "big")
    b[33:37] = rem_rkey.to_bytes(4, "big")
    b[37:45] = rem_vaddr.to_bytes(8, "big")
    b[45:49] = HOST_IP
    b[49:51] = port.to_bytes(2, "big")
    return bytes(b)


OPEN = dict(loc_qpn=0x000123, loc_psn=0xABCDEF, loc_rkey=0x55AA, loc_vaddr=0x7F00_0000_1000,
            loc_ip=int.from_bytes(HOST_IP, "big"), listening_port=50001, byte1=5, byte5=14)
ACK_OPEN = 1 | 1 << 1 | 1 << 4 | 1 << 5            # info_valid, OPEN_QP, ack_valid, ACK


def open_exchange(reply=None, *, checksum=True, dport=50001):
    c = FrameChecker("cm")
    c.request(udp_frame(HOST_IP, FPGA_IP, CM_HOST_PORT, 17185, cm_request(1, **OPEN)))
    reply = reply or raw_reply(ACK_OPEN, 0x100, 0xABCDEF, 0x123, 0xABCDEF, 0x55AA,
                               0x7F00_0000_1000, 50001)
    frame = udp_frame(FPGA_IP, HOST_IP, 0x8765, dport, reply, checksum=checksum, to_fpga=False)
    return c, frame


def test_cm_reply_with_a_region_passes_only_a_responder_build():
    """An ACK of OPEN_QP stating the QP's region (R_Key, base, length) and the READ depths in
    bytes 56-57: right for a build with the responder (``region_acks``), wrong for one without;
    bytes 58-59 stay zero either way."""
    reply = bytearray(raw_reply(ACK_OPEN, 0x100, 0xABCDEF, 0x123, 0xABCDEF, 0x55AA,
                                0x7F00_0000_1000, 50001))
    reply[9:13] = (0x51010101).to_bytes(4, "big")
    reply[13:21] = (0x8000).to_bytes(8, "big")
    reply[52:56] = (0x8000).to_bytes(4, "big")
    reply[56:58] = b"\x01\x10"
    for regions, ok in ((True, True), (False, False)):
        c, frame = open_exchange(bytes(reply))
        c.region_acks = regions
        if ok:
            assert c.check(frame) == "cm_reply"
        else:
            check_fails(frame, "loc_rkey", "dma_length", checker=c)
    reply[58] = 1
    c, frame = open_exchange(bytes(reply))
    c.region_acks = True
    check_fails(frame, "n_transfers", checker=c)


def test_runts_sent_to_the_endpoint_are_no_requests():
    c, frame = open_exchange()
    good = udp_frame(HOST_IP, FPGA_IP, CM_HOST_PORT, 17185, cm_request(1, **OPEN))
    for k in range(1, 14):
        c.request(good[:k])             # scapy cannot parse these: they are passed over
    assert len(c._requests) == 1


def test_cm_struct_layout_round_trips():
    raw = bytes(range(64))
    assert cm_encode(cm_decode(raw)) == raw
    d = cm_decode(raw_reply(ACK_OPEN, 0x100, 7, 0x123, 7, 1, 2, 50001))
    assert (d["info_valid"], d["req_type"], d["ack_valid"], d["ack_type"]) == (1, 1, 1, 1)
    assert (d["loc_qpn"], d["rem_qpn"], d["listening_port"]) == (0x100, 0x123, 50001)


def test_cm_reply_as_the_spec_says_passes():
    c, frame = open_exchange()
    assert c.check(frame) == "cm_reply"
    assert c.counts["cm_reply"] == 1
    # the request was answered: the same reply again answers nothing
    check_fails(frame, "answers no request seen", checker=c)


@pytest.mark.parametrize("fault,kw,words", [
    ("extension byte 1", dict(ext=b"\x05\0\0\0"), ["byte1"]),
    ("extension byte 29", dict(ext=b"\0\0\0\x01"), ["byte29"]),
    ("rem_psn not echoed", dict(rem_psn=0xABCDEE), ["rem_psn"]),
    ("QPN below 256", dict(loc_qpn=0x20), ["loc_qpn"]),
    ("our PSN", dict(loc_psn=0), ["loc_psn"]),
    ("ack_valid clear", dict(flags=ACK_OPEN & ~0x10), ["ack_valid"]),
])
def test_cm_reply_faults_fail(fault, kw, words):
    args = dict(flags=ACK_OPEN, loc_qpn=0x100, loc_psn=0xABCDEF, rem_qpn=0x123, rem_psn=0xABCDEF,
                rem_rkey=0x55AA, rem_vaddr=0x7F00_0000_1000, port=50001)
    ext = kw.pop("ext", b"\0\0\0\0")
    args.update(kw)
    c, frame = open_exchange(raw_reply(**args, ext=ext))
    check_fails(frame, *words, checker=c)


def test_cm_reply_transport_faults_fail():
    c, frame = open_exchange(checksum=False)
    check_fails(frame, "without a UDP checksum", checker=c)
    c, frame = open_exchange(dport=50000)
    check_fails(frame, "not 50001", checker=c)
    c, frame = open_exchange()
    check_fails(frame[:-1], checker=c)          # 63 bytes of datagram in a 64-byte UDP length


# ------------------------------------------------------------------- in the benches' MAC model

class _Source:
    def __init__(self, *_):
        self.frames = []
        self.log = __import__("logging").getLogger("test_framecheck.source")

    def send_nowait(self, frame):
        self.frames.append(bytes(frame.tdata))


def test_mac_model_checks_every_frame_out_and_notes_requests(monkeypatch):
    """The MAC model of the endpoint benches (rocegen.sim.testing.roce_env.MacModel) puts every frame
    out of the endpoint through the check, so a wrong frame fails the bench, and notes the
    host's frames so that connection-manager replies can be matched."""
    from types import SimpleNamespace

    from rocegen.sim.models.rnic import Rnic
    from rocegen.sim.testing import roce_env
    monkeypatch.setenv("ROCEGEN_FRAMECHECK", "inline")      # a failure raises at the frame
    monkeypatch.setattr(roce_env, "AxiStreamSource", _Source)
    monkeypatch.setattr(roce_env, "AxiStreamBus", type("Bus", (), {"from_prefix": staticmethod(
        lambda dut, prefix: None)}))
    monkeypatch.setattr(roce_env.cocotb, "start_soon", lambda coro: coro.close())
    monkeypatch.setattr(roce_env.cocotb.utils, "get_sim_time", lambda unit: 0)
    nic = Rnic("02:00:00:00:00:01", "10.0.0.1", strict=False)
    mac = roce_env.MacModel(SimpleNamespace(clk=None, rst=None), 64, nic)
    mac._frame_done(0, 1, arp_reply())
    assert mac.framecheck.counts["arp"] == 1
    bad = roce(bth(0x0A, ackreq=1) + reth(dlen=4) + b"abcd", bad_icrc=True)
    with pytest.raises(FrameCheckError, match="BTH.icrc"):
        mac._frame_done(2, 3, bad)
    c, reply = open_exchange()
    request = udp_frame(HOST_IP, FPGA_IP, CM_HOST_PORT, 17185, cm_request(1, **OPEN))
    mac.to_endpoint(request)
    assert mac.source.frames == [request]
    mac._frame_done(4, 5, reply)
    assert mac.framecheck.counts["cm_reply"] == 1 and mac.framecheck.counts["frames"] == 2


def test_runts_to_the_endpoint_are_no_requests():
    """A hostile peer's runts (shorter than scapy's layers) are noted as no request."""
    c, reply = open_exchange()
    for n in (1, 6, 13, 20, 40):
        c.request(bytes(range(n)))
    assert c.check(reply) == "cm_reply"
