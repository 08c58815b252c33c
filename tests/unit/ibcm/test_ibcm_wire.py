"""The CM's wire tables (:mod:`rocegen.wire.ibcm`, the DETH) against the Linux kernel's
declarations: every field's place is checked bit for bit against the (byte, bit, width) that
``include/rdma/ibta_vol1_c12.h`` gives it (IBA_FIELD*_LOC macros of ``include/rdma/iba.h``: a
field starts at bit ``bit`` counted from the most significant bit of byte ``byte`` of the class
data, after the 24-byte MAD header), and the other layouts against their C structs."""

import pytest

from rocegen.wire import headers as H
from rocegen.wire import ibcm as I

# ---- the kernel's notation


def _bloc(byte, bit, width):
    """IBA_FIELD_BLOC / IBA_FIELD8_LOC (bit 0) / IBA_FIELD16_LOC / IBA_FIELD32_LOC /
    IBA_FIELD64_LOC / IBA_FIELD_MLOC: every one places ``width`` bits starting ``bit`` bits after
    the most significant bit of byte ``byte`` (the 16/32-bit forms mask ``GENMASK(15 or 31 -
    (byte % 2 or 4) * 8, ...)`` of the aligned word, the same bits)."""
    return byte * 8 + bit, width


#: Each message's fields as ibta_vol1_c12.h declares them: our field name -> (byte, bit, width).
KERNEL = {
    # Table 106 REQ Message Contents
    I.REQ: {
        "local_comm_id": _bloc(0, 0, 32), "service_id": _bloc(8, 0, 64),
        "local_ca_guid": _bloc(16, 0, 64), "local_qkey": _bloc(28, 0, 32),
        "local_qpn": _bloc(32, 0, 24), "responder_resources": _bloc(35, 0, 8),
        "local_eecn": _bloc(36, 0, 24), "initiator_depth": _bloc(39, 0, 8),
        "remote_eecn": _bloc(40, 0, 24), "remote_cm_response_timeout": _bloc(43, 0, 5),
        "transport_service_type": _bloc(43, 5, 2), "end_to_end_flow_control": _bloc(43, 7, 1),
        "starting_psn": _bloc(44, 0, 24), "local_cm_response_timeout": _bloc(47, 0, 5),
        "retry_count": _bloc(47, 5, 3), "partition_key": _bloc(48, 0, 16),
        "path_mtu": _bloc(50, 0, 4), "rdc_exists": _bloc(50, 4, 1),
        "rnr_retry_count": _bloc(50, 5, 3), "max_cm_retries": _bloc(51, 0, 4),
        "srq": _bloc(51, 4, 1), "extended_transport_type": _bloc(51, 5, 3),
        "primary_local_lid": _bloc(52, 0, 16), "primary_remote_lid": _bloc(54, 0, 16),
        "primary_local_gid": _bloc(56, 0, 128), "primary_remote_gid": _bloc(72, 0, 128),
        "primary_flow_label": _bloc(88, 0, 20), "primary_packet_rate": _bloc(91, 2, 6),
        "primary_traffic_class": _bloc(92, 0, 8), "primary_hop_limit": _bloc(93, 0, 8),
        "primary_sl": _bloc(94, 0, 4), "primary_subnet_local": _bloc(94, 4, 1),
        "primary_local_ack_timeout": _bloc(95, 0, 5),
        "alternate_local_lid": _bloc(96, 0, 16), "alternate_remote_lid": _bloc(98, 0, 16),
        "alternate_local_gid": _bloc(100, 0, 128), "alternate_remote_gid": _bloc(116, 0, 128),
        "alternate_flow_label": _bloc(132, 0, 20), "alternate_packet_rate": _bloc(135, 2, 6),
        "alternate_traffic_class": _bloc(136, 0, 8), "alternate_hop_limit": _bloc(137, 0, 8),
        "alternate_sl": _bloc(138, 0, 4), "alternate_subnet_local": _bloc(138, 4, 1),
        "alternate_local_ack_timeout": _bloc(139, 0, 5),
        "private_data": _bloc(140, 0, 736),
    },
    # Table 107 MRA Message Contents
    I.MRA: {
        "local_comm_id": _bloc(0, 0, 32), "remote_comm_id": _bloc(4, 0, 32),
        "message_mraed": _bloc(8, 0, 2), "service_timeout": _bloc(9, 0, 5),
        "private_data": _bloc(10, 0, 1776),
    },
    # Table 108 REJ Message Contents
    I.REJ: {
        "local_comm_id": _bloc(0, 0, 32), "remote_comm_id": _bloc(4, 0, 32),
        "message_rejected": _bloc(8, 0, 2), "reject_info_length": _bloc(9, 0, 7),
        "reason": _bloc(10, 0, 16), "ari": _bloc(12, 0, 576), "private_data": _bloc(84, 0, 1184),
    },
    # Table 110 REP Message Contents
    I.REP: {
        "local_comm_id": _bloc(0, 0, 32), "remote_comm_id": _bloc(4, 0, 32),
        "local_qkey": _bloc(8, 0, 32), "local_qpn": _bloc(12, 0, 24),
        "local_eecn": _bloc(16, 0, 24), "starting_psn": _bloc(20, 0, 24),
        "responder_resources": _bloc(24, 0, 8), "initiator_depth": _bloc(25, 0, 8),
        "target_ack_delay": _bloc(26, 0, 5), "failover_accepted": _bloc(26, 5, 2),
        "end_to_end_flow_control": _bloc(26, 7, 1), "rnr_retry_count": _bloc(27, 0, 3),
        "srq": _bloc(27, 3, 1), "local_ca_guid": _bloc(28, 0, 64),
        "private_data": _bloc(36, 0, 1568),
    },
    # Table 111 RTU Message Contents
    I.RTU: {"local_comm_id": _bloc(0, 0, 32), "remote_comm_id": _bloc(4, 0, 32),
            "private_data": _bloc(8, 0, 1792)},
    # Table 112 DREQ Message Contents
    I.DREQ: {"local_comm_id": _bloc(0, 0, 32), "remote_comm_id": _bloc(4, 0, 32),
             "remote_qpn": _bloc(8, 0, 24), "private_data": _bloc(12, 0, 1760)},
    # Table 113 DREP Message Contents
    I.DREP: {"local_comm_id": _bloc(0, 0, 32), "remote_comm_id": _bloc(4, 0, 32),
             "private_data": _bloc(8, 0, 1792)},
}

#: The other layouts from their C structs: ib_mad_hdr (ib_mad.h), ib_class_port_info (ib_mad.h;
#: resp_time_value is the low 5 bits of the byte after reserved[3]), cma_hdr (cma.c), the DETH
#: (IBTA 9.3.3: Q_Key 4 bytes, reserved 1, source QP 3).
STRUCTS = {
    I.MAD_HDR: {
        "base_version": _bloc(0, 0, 8), "mgmt_class": _bloc(1, 0, 8),
        "class_version": _bloc(2, 0, 8), "method": _bloc(3, 0, 8), "status": _bloc(4, 0, 16),
        "class_specific": _bloc(6, 0, 16), "transaction_id": _bloc(8, 0, 64),
        "attribute_id": _bloc(16, 0, 16), "attribute_modifier": _bloc(20, 0, 32),
    },
    I.CLASS_PORT_INFO: {
        "base_version": _bloc(0, 0, 8), "class_version": _bloc(1, 0, 8),
        "capability_mask": _bloc(2, 0, 16), "resp_time_value": _bloc(7, 3, 5),
        "redirect_gid": _bloc(8, 0, 128), "redirect_lid": _bloc(28, 0, 16),
        "redirect_pkey": _bloc(30, 0, 16), "redirect_qp": _bloc(33, 0, 24),
        "redirect_qkey": _bloc(36, 0, 32), "trap_gid": _bloc(40, 0, 128),
        "trap_lid": _bloc(60, 0, 16), "trap_pkey": _bloc(62, 0, 16),
        "trap_qp": _bloc(65, 0, 24), "trap_qkey": _bloc(68, 0, 32),
    },
    I.CMA_HDR: {"cma_version": _bloc(0, 0, 8), "ip_version": _bloc(1, 0, 4),
                "src_port": _bloc(2, 0, 16), "src_addr": _bloc(4, 0, 128),
                "dst_addr": _bloc(20, 0, 128)},
    H.DETH: {"qkey": _bloc(0, 0, 32), "src_qp": _bloc(5, 0, 24)},
}

#: The lengths the sources give: MAD 256 = header 24 + data 232 (IB_MGMT_MAD_*); each message
#: fills the 232 bytes (CM_STRUCT's total_len); ClassPortInfo 72 bytes; cma_hdr 36; DETH 8.
LENGTHS = {I.MAD_HDR: 24, **{h: 232 for h in KERNEL}, I.CLASS_PORT_INFO: 72, I.CMA_HDR: 36,
           H.DETH: 8, I.GID_IPV4: 16}
#: Private data bytes (the MLOC widths of ibta_vol1_c12.h / 8).
PRIVATE = {I.REQ: 92, I.REP: 196, I.REJ: 148, I.RTU: 224, I.DREQ: 220, I.DREP: 224, I.MRA: 222}


def _ones_at(start, width, length):
    """``length`` bytes with ones exactly at wire bits ``start .. start + width - 1``."""
    return (((1 << width) - 1) << (8 * length - start - width)).to_bytes(length, "big")


@pytest.mark.parametrize("header, fields", [*KERNEL.items(), *STRUCTS.items()],
                         ids=lambda v: getattr(v, "name", ""))
def test_fields_sit_where_the_kernel_puts_them(header, fields):
    for name, (start, width) in fields.items():
        raw = header.pack(**{name: (1 << width) - 1})
        assert raw == _ones_at(start, width, header.length), name
        assert header.unpack(_ones_at(start, width, header.length))[name] == (1 << width) - 1


@pytest.mark.parametrize("header", list(LENGTHS), ids=lambda h: h.name)
def test_lengths(header):
    assert header.length == LENGTHS[header]
    assert I.MAD_LENGTH == I.MAD_HDR.length + I.MAD_DATA_LENGTH == 256


def test_private_data_lengths():
    for header, n in PRIVATE.items():
        assert header.offset("private_data") == (header.length - n, 8 * n)
    assert I.PRIVATE_DATA_LENGTH == {I.ATTR_REQ: 92, I.ATTR_REP: 196, I.ATTR_REJ: 148,
                                     I.ATTR_RTU: 224, I.ATTR_DREQ: 220, I.ATTR_DREP: 224,
                                     I.ATTR_MRA: 222}


def test_only_reserved_fields_are_unchecked():
    """Every field the kernel does not declare is a reserved one (so none is left out above)."""
    for header, fields in [*KERNEL.items(), *STRUCTS.items()]:
        other = {n for n, _ in header.fields} - set(fields)
        allowed = ("reserved", "redirect_t", "redirect_s", "redirect_f", "trap_t", "trap_s",
                   "trap_f", "trap_hl", "capability_mask2")
        assert all(n.split("_", 1)[-1].startswith("reserved") or n.startswith(allowed)
                   for n in other), (header.name, sorted(other))


def test_a_req_round_trip_and_bytes():
    """A REQ with its MAD header: fields back from unpack, and a few bytes read at the offsets
    of ibta_vol1_c12.h (+ 24 for the MAD header)."""
    fields = dict(local_comm_id=0x11223344, service_id=I.service_id(7174),
                  local_ca_guid=0x0102030405060708, local_qpn=0xABCDEF, responder_resources=4,
                  initiator_depth=3, remote_cm_response_timeout=20, transport_service_type=0,
                  end_to_end_flow_control=1, starting_psn=0x123456,
                  local_cm_response_timeout=18, retry_count=7, partition_key=0xFFFF,
                  path_mtu=5, rnr_retry_count=6, max_cm_retries=15,
                  primary_local_gid=I.ipv4_gid(0x0A000001), primary_hop_limit=64,
                  primary_local_ack_timeout=14,
                  private_data=I.private_data(I.REQ, b"\x00\x40" + bytes(90)))
    mad = I.MAD_HDR.pack(base_version=1, mgmt_class=0x07, class_version=2, method=0x03,
                         transaction_id=0x55, attribute_id=0x0010) + I.REQ.pack(**fields)
    assert len(mad) == 256
    back = I.REQ.unpack(mad[24:])
    assert {k: back[k] for k in fields} == fields
    assert mad[24 + 8:24 + 16] == bytes.fromhex("0000000001061c06")     # service ID, port 7174
    assert mad[24 + 32:24 + 36] == bytes.fromhex("abcdef04")             # QPN, resp. resources
    assert mad[24 + 43] == 20 << 3 | 0 << 1 | 1                          # timeouts, RC, flow ctl
    assert mad[24 + 50] == 5 << 4 | 0 << 3 | 6                           # MTU, RDC, RNR retry
    assert mad[24 + 56:24 + 72] == bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    assert mad[24 + 141] == 0x40                                         # cma_hdr.ip_version


def test_codes_from_the_headers():
    """ib_cm.h's reject reasons and cm_msgs.h's message codes, written down here from them."""
    assert (I.RejReason.NO_QP, I.RejReason.TIMEOUT, I.RejReason.INVALID_COMM_ID,
            I.RejReason.INVALID_SERVICE_ID, I.RejReason.INVALID_TRANSPORT_TYPE,
            I.RejReason.STALE_CONN, I.RejReason.INVALID_MTU,
            I.RejReason.INSUFFICIENT_RESP_RESOURCES, I.RejReason.CONSUMER_DEFINED,
            I.RejReason.INVALID_CLASS_VERSION) == (1, 4, 6, 8, 9, 10, 26, 27, 28, 31)
    assert len(I.RejReason) == 34 and 34 not in set(I.RejReason)
    assert (I.MsgResponse.REQ, I.MsgResponse.REP, I.MsgResponse.OTHER) == (0, 1, 2)
    assert [I.ATTR_CLASS_PORT_INFO, I.ATTR_REQ, I.ATTR_MRA, I.ATTR_REJ, I.ATTR_REP, I.ATTR_RTU,
            I.ATTR_DREQ, I.ATTR_DREP, I.ATTR_SIDR_REQ, I.ATTR_SIDR_REP, I.ATTR_LAP,
            I.ATTR_APR] == [1, *range(0x10, 0x1B)]
    assert (I.STATUS_BAD_VERSION, I.STATUS_UNSUPPORTED_METHOD,
            I.STATUS_UNSUPPORTED_METHOD_ATTR, I.STATUS_INVALID_ATTR_VALUE) == (4, 8, 0xC, 0x1C)
    assert (I.METHOD_GET, I.METHOD_SET, I.METHOD_SEND, I.METHOD_GET_RESP) == (1, 2, 3, 0x81)
    assert (I.QP1_QKEY, I.MGMT_CLASS_CM, I.CM_CLASS_VERSION) == (0x80010000, 7, 2)


def test_mtu_service_id_time_and_gid():
    assert [I.mtu_code(b) for b in (256, 512, 1024, 2048, 4096)] == [1, 2, 3, 4, 5]
    assert I.mtu_bytes(3) == 1024
    for bad in (0, 6, 128, 8192):
        with pytest.raises(ValueError, match="MTU"):
            I.mtu_code(bad) if bad > 6 else I.mtu_bytes(bad)
    assert I.service_id(7174) == 0x0000000001061C06
    assert I.service_port(0x0000000001061C06) == 7174
    assert I.service_port(0x0000000001111C06) is None      # the UDP port space (0x0111)
    for bad in (-1, 1 << 16, "7174"):
        with pytest.raises(ValueError, match="port"):
            I.service_id(bad)
    assert I.cm_timeout_ns(0) == 4096 and I.cm_timeout_ns(20) == 4096 * 2 ** 20
    for bad in (-1, 32, 1.5):
        with pytest.raises(ValueError, match="0..31"):
            I.cm_timeout_ns(bad)
    gid = I.ipv4_gid(0xC0A80102)
    assert gid.to_bytes(16, "big") == bytes(10) + b"\xff\xff\xc0\xa8\x01\x02"
    assert I.gid_ipv4(gid) == 0xC0A80102 and I.gid_ipv4(gid | 1 << 100) is None
    with pytest.raises(ValueError, match="32-bit"):
        I.ipv4_gid(1 << 32)


def test_private_and_class_data():
    assert I.private_bytes(I.REP, I.REP.unpack(I.REP.pack(
        private_data=I.private_data(I.REP, b"abc"))))[:4] == b"abc\0"
    with pytest.raises(ValueError, match="more than 92"):
        I.private_data(I.REQ, bytes(93))
    assert len(I.class_data(b"x")) == 232
    with pytest.raises(ValueError, match="more than 232"):
        I.class_data(bytes(233))


def test_the_region_of_a_rep():
    region = I.REGION.pack(addr=0x1_0000_2000, rkey=0xABCD, length=65536)
    rep = I.private_bytes(I.REP, I.REP.unpack(I.REP.pack(
        private_data=I.private_data(I.REP, region))))
    assert len(rep) == 196
    assert I.rep_region(rep) == {"addr": 0x1_0000_2000, "rkey": 0xABCD, "length": 65536}
    assert I.rep_region(region) == I.rep_region(rep)            # the region alone will do
    assert I.rep_region(bytes(196)) == {"addr": 0, "rkey": 0, "length": 0}     # none
    for bad, text in ((region[:15], "15 bytes of private data, shorter than a region's 16"),
                      (region + b"\x01", "after the region is not zero"),
                      (I.REGION.pack(addr=(1 << 64) - 8, rkey=1, length=16), "runs past the end"),
                      (I.REGION.pack(addr=0, rkey=5, length=0), "a region of 0 bytes")):
        with pytest.raises(ValueError, match=text):
            I.rep_region(bad)
