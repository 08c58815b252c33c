"""CM MADs in RoCEv2 frames (:mod:`rocegen.sim.models.ibcm.frames`): the frame's bytes against
the wire notes (UDP 4791, BTH opcode 0x64 to QP 1, DETH Q_Key 0x80010000 from QP 1, the ICRC
the ICRC model computes), and every frame :func:`unwrap` refuses."""

import pytest

from rocegen.sim.models import icrc as icrc_model
from rocegen.sim.models.ibcm import unwrap, wrap
from rocegen.wire import headers as H

MAD = bytes(range(256))
A = dict(src_mac=0x020000000001, dst_mac=0x020000000002, src_ip=0x0A000001, dst_ip=0x0A000002)


def test_wrap_and_unwrap():
    f = wrap(MAD, psn=0x123456, udp_sport=0xC123, **A)
    assert len(f) == 14 + 20 + 8 + 12 + 8 + 256 + 4
    assert icrc_model.check(f)
    assert f[12:14] == b"\x08\x00" and f[14 + 9] == 17 and f[36:38] == (4791).to_bytes(2, "big")
    assert f[14 + 6] & 0x40                                              # DF
    bth = f[42:54]
    assert bth[0] == 0x64 and bth[2:4] == b"\xff\xff" and bth[5:8] == b"\0\0\x01"
    assert bth[9:12] == bytes.fromhex("123456")
    assert f[54:62] == bytes.fromhex("80010000" "00" "000001")           # DETH
    assert f[62:62 + 256] == MAD
    c = unwrap(f)
    assert (c.src_mac, c.dst_mac, c.src_ip, c.dst_ip) == tuple(A.values())
    assert (c.udp_sport, c.pkey, c.psn, c.qkey, c.src_qp, c.mad) == \
        (0xC123, 0xFFFF, 0x123456, 0x80010000, 1, MAD)


def _edit(frame, at, value):
    """``frame`` with the bytes at ``at`` replaced and its ICRC made right again."""
    f = bytearray(frame)
    f[at:at + len(value)] = value
    dgram = bytes(f[14:-4])
    return bytes(f[:-4]) + icrc_model.icrc(dgram)


@pytest.mark.parametrize("edit, match", [
    (lambda f: f[:-1] + bytes([f[-1] ^ 1]), "ICRC"),
    (lambda f: _edit(f, 42, b"\x04"), "UD SEND_ONLY to QP1"),            # RC SEND_ONLY
    (lambda f: _edit(f, 47, b"\x00\x00\x02"), "UD SEND_ONLY to QP1"),    # to QP 2
    (lambda f: _edit(f, 54, b"\x00\x00\x00\x01"), "Q_Key"),
    (lambda f: _edit(f, 36, b"\x12\xb8"), "UDP port"),
    (lambda f: f[:12] + b"\x86\xdd" + f[14:], "IPv4"),
    (lambda f: f[:50], "too short"),
])
def test_unwrap_refuses(edit, match):
    with pytest.raises(ValueError, match=match):
        unwrap(edit(wrap(MAD, **A)))


def test_wrap_checks_its_arguments():
    with pytest.raises(ValueError, match="256 bytes"):
        wrap(MAD[:255], **A)
    with pytest.raises(ValueError, match="dst_ip"):
        wrap(MAD, **{**A, "dst_ip": 1 << 32})
    with pytest.raises(ValueError, match="psn"):
        wrap(MAD, psn=1 << 24, **A)
    assert H.DETH.unpack(wrap(MAD, **A)[54:])["src_qp"] == 1
