"""The receive path of the RNIC model: the checks of a frame's Ethernet, IPv4, UDP and BTH
headers (every drop counted, deviations from the wire conventions warned), then the frame to its
part: ARP, a UDP port collected, a CNP, an ACKNOWLEDGE or READ response to the QP's requester,
a request to the responder."""

import struct
from types import SimpleNamespace

from rocegen.sim.models.icrc import icrc
from rocegen.sim.models.net.checksum import checksum
from rocegen.sim.models.rnic import requester
from rocegen.sim.models.rnic.frames import ip_str, mac_str
from rocegen.sim.models.rnic.opcodes import (
    _OTHER_HDR,
    _REQ,
    _RESPONSES,
    LAST,
    ONLY,
    Op,
    _opname,
    _segmentation_error,
)
from rocegen.sim.models.rnic.requester import READ_RESPONSES
from rocegen.wire import headers as H
from rocegen.wire.roce import ETH_MIN_FRAME

__all__ = ["Ingress"]

MIN_FRAME = ETH_MIN_FRAME
ROCE_PORT = H.UDP_PORT_ROCEV2
BROADCAST = b"\xff" * 6


class Ingress:
    """The receive path of ``nic`` (:class:`~rocegen.sim.models.rnic.Rnic`): :meth:`ethernet`
    takes a frame and returns the frames sent at once in answer."""

    def __init__(self, nic):
        self.nic = nic

    def ethernet(self, frame):
        nic = self.nic
        hlen = 14 if nic.vlan is None else 18
        if len(frame) < max(hlen, nic.behaviour.min_frame):
            return nic._drop("eth_drop_runt", f"frame of {len(frame)} bytes (a runt: the "
                              f"shortest is {max(hlen, nic.behaviour.min_frame)})")
        mtu = nic.behaviour.mtu
        if mtu is not None and len(frame) - hlen > mtu:
            return nic._drop("eth_drop_mtu", f"frame of {len(frame)} bytes: {len(frame) - hlen} "
                              f"after the Ethernet header, more than the port MTU ({mtu})")
        dst = frame[0:6]
        if dst not in (nic.frames.mac_bytes, BROADCAST):
            return nic._drop("eth_drop_addr", f"frame to {mac_str(dst)}, which is neither "
                              f"our MAC ({nic.mac}) nor broadcast")
        if nic.vlan is not None:
            tpid, tci = struct.unpack(">HH", frame[12:16])
            if tpid != 0x8100 or (tci & 0xFFF) != nic.vlan:
                return nic._drop("eth_drop_vlan", f"frame not tagged with VLAN {nic.vlan} "
                                  f"(TPID {tpid:#06x}, TCI {tci:#06x})")
        etype = int.from_bytes(frame[hlen - 2:hlen], "big")
        src_mac = mac_str(frame[6:12])
        body = frame[hlen:]
        if etype == 0x0806:
            return nic.arp.receive(body)
        if etype != 0x0800:
            return nic._drop("eth_drop_ethertype", f"EtherType {etype:#06x} (only ARP and IPv4 "
                              "are expected)")
        if dst == BROADCAST:
            nic._event("warn_eth_bcast", "IPv4 frame sent to the broadcast MAC")
        return self.ipv4(src_mac, body, len(frame) - (hlen - 14))

    def ipv4(self, src_mac, body, frame_len):
        nic = self.nic
        # frame_len does not count an 802.1Q tag: a MAC may pad a frame to 60 bytes before
        # inserting the tag
        if len(body) < 20:
            return nic._drop("ip_drop_header", f"IPv4 header truncated ({len(body)} bytes)")
        version, ihl = body[0] >> 4, body[0] & 15
        if version != 4 or ihl < 5:
            return nic._drop("ip_drop_header", f"IPv4 version {version}, IHL {ihl}")
        if ihl != 5:
            return nic._drop("ip_drop_options", f"IPv4 header with options (IHL {ihl})")
        if checksum(body[:20]) != 0:
            return nic._drop("ip_drop_checksum", "IPv4 header checksum "
                              f"{int.from_bytes(body[10:12], 'big'):#06x} is wrong")
        total = int.from_bytes(body[2:4], "big")
        if total < 20 or total > len(body):
            return nic._drop("ip_drop_length", f"IPv4 total length {total} but {len(body)} "
                              "bytes follow the Ethernet header")
        if total < len(body) and frame_len > MIN_FRAME:
            nic._event("warn_ip_trailing", f"{len(body) - total} bytes after the IPv4 datagram "
                        f"in a frame of {frame_len} bytes (only padding to {MIN_FRAME} is allowed)")
        ident, flags_frag = struct.unpack(">HH", body[4:8])
        if flags_frag & 0x3FFF:
            return nic._drop("ip_drop_fragment", f"IPv4 fragment (flags/offset {flags_frag:#06x})")
        dst_ip, src_ip = ip_str(body[16:20]), ip_str(body[12:16])
        if dst_ip != nic.ip:
            return nic._drop("ip_drop_addr", f"IPv4 datagram to {dst_ip}, not to us ({nic.ip})")
        if body[9] != 17:
            return nic._drop("ip_drop_protocol", f"IPv4 protocol {body[9]} (only UDP expected)")
        if not flags_frag & 0x4000:
            nic._event("warn_ip_df", "IPv4 DF flag not set")
        if ident == 0:
            nic._event("warn_ip_id", "IPv4 identification is 0")
        if body[8] == 0:
            nic._event("warn_ip_ttl", "IPv4 TTL is 0")
        return self.udp(src_mac, src_ip, body[:total])

    def udp(self, src_mac, src_ip, dgram):
        nic = self.nic
        udp = dgram[20:]
        if len(udp) < 8:
            return nic._drop("udp_drop_length", f"UDP header truncated ({len(udp)} bytes)")
        sport, dport, ulen, ck = struct.unpack(">HHHH", udp[:8])
        if ulen != len(udp):
            return nic._drop("udp_drop_length", f"UDP length {ulen} but the IPv4 total length "
                              f"leaves {len(udp)} bytes")
        if ck:
            pseudo = dgram[12:20] + bytes([0, 17]) + len(udp).to_bytes(2, "big")
            if checksum(pseudo + udp) != 0:
                return nic._drop("udp_drop_checksum", f"UDP checksum {ck:#06x} is wrong (0 would "
                                  "be accepted)")
        if dport == ROCE_PORT:
            return self.roce(src_mac, src_ip, sport, dgram)
        if dport in nic.udp_ports:
            nic.counters["udp_rx"] += 1
            nic.udp_rx.append((src_ip, sport, dport, bytes(udp[8:])))
            return []
        return nic._drop("udp_drop_port", f"UDP datagram to port {dport} (RoCEv2 is "
                          f"{ROCE_PORT})")

    def roce(self, src_mac, src_ip, sport, dgram):
        nic = self.nic
        nic.counters["roce_rx"] += 1
        pl = dgram[28:]
        if len(pl) < 16:
            return nic._drop("drop_short", f"RoCEv2 datagram with {len(pl)} bytes after UDP "
                              "(BTH + ICRC need 16)")
        want = icrc(dgram[:-4])
        if want != dgram[-4:]:
            return nic._drop("drop_icrc", f"ICRC {dgram[-4:].hex()} on the wire, "
                              f"{want.hex()} expected")
        bth = SimpleNamespace(**H.BTH.unpack(pl))
        op, psn, dqpn = bth.opcode, bth.psn, bth.dest_qp
        where = f"{_opname(op)} to QP {dqpn:#x} PSN {psn:#08x}"
        if bth.tver != 0:
            return nic._drop("drop_tver", f"{where}: BTH TVer {bth.tver}")
        qp = nic.qps.get(dqpn)
        if op == Op.CNP:
            return nic.responder.cnp(qp, bth, pl, where)
        if op & 0xE0:
            return nic._drop("drop_transport", f"{where}: not an RC opcode")
        if qp is None:
            return nic._drop("drop_dest_qp", f"{where}: no such QP")
        if src_ip != qp.peer_ip:
            return nic._drop("drop_src_ip", f"{where}: from {src_ip}, the QP's peer is "
                              f"{qp.peer_ip}")
        if bth.pkey != qp.pkey:
            return nic._drop("drop_pkey", f"{where}: P_Key {bth.pkey:#06x}, QP has "
                              f"{qp.pkey:#06x}")
        if bth.fecn or bth.becn or bth.resv6 or bth.resv7:
            nic._event("warn_bth_reserved", f"{where}: FECN {bth.fecn}, BECN {bth.becn}, "
                        f"reserved {bth.resv6:#x}/{bth.resv7:#x} (all must be 0)")
        if not 0xC000 <= sport <= 0xFFFF:
            nic._event("warn_udp_sport", f"{where}: UDP source port {sport:#06x} outside "
                        "0xC000..0xFFFF")
        if qp.peer_sport is None:
            qp.peer_sport = sport
        elif sport != qp.peer_sport:
            nic._event("warn_udp_sport", f"{where}: UDP source port {sport:#06x} changed (was "
                        f"{qp.peer_sport:#06x}; it must be constant per QP)")
        if op in _RESPONSES and not qp.sq.sent_any:
            return nic._drop("drop_response", f"{where}: a response opcode sent to a QP "
                              "whose requester has sent no request")
        info = _REQ.get(op)
        if info is None:
            hdr = 12 + _OTHER_HDR.get(op, 0)
        else:
            hdr = 12 + 16 * info[2] + 4 * info[3]
        body = len(pl) - 4 - hdr
        padcnt = bth.padcnt
        if body < 0:
            return nic._drop("drop_malformed", f"{where}: {len(pl) - 4} bytes before the ICRC, "
                              f"the headers alone need {hdr}")
        if body % 4:
            return nic._drop("drop_malformed", f"{where}: payload + pad of {body} bytes is not a "
                              f"multiple of 4 (PadCnt {padcnt})")
        if padcnt > body:
            return nic._drop("drop_malformed", f"{where}: PadCnt {padcnt} but only {body} bytes "
                              "of payload + pad")
        ext = pl[12:hdr]
        payload = pl[hdr:hdr + body - padcnt]
        if any(pl[hdr + body - padcnt:hdr + body]):
            nic._event("warn_pad_nonzero", f"{where}: pad bytes "
                        f"{pl[hdr + body - padcnt:hdr + body].hex()} are not zero")
        if info is not None:
            kind, pos, _, _ = info
            if pos in (LAST, ONLY) and not bth.ack_req:
                nic._event("warn_ackreq", f"{where}: AckReq not set on the last packet of a "
                            "message")
            if nic.strict:
                err = _segmentation_error(kind, pos, len(payload), padcnt, qp.pmtu)
                if err:
                    nic._event("err_length", f"{where}: {err}")
        if qp.state == "ERR":
            return nic._drop("drop_qp_error", f"{where}: QP is in the error state")
        if op == Op.ACKNOWLEDGE:
            requester.handle_aeth(nic, qp, ext[0], psn, nic.answers.now, where)
            return []
        if op == Op.ATOMIC_ACKNOWLEDGE:
            requester.handle_atomic_ack(nic, qp, ext, psn, nic.answers.now, where)
            return []
        if op in READ_RESPONSES:
            requester.handle_read_response(nic, qp, op, ext, payload, padcnt, psn, nic.answers.now,
                                           where)
            return []
        return nic.responder.behind_reads(qp, nic.responder.request(qp, bth, info, ext, payload,
                                                                    padcnt, where, src_mac))
