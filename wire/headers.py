"""The one header table: every protocol header in wire order, big-endian.

A :class:`Header` is declared once as an ordered list of ``(name, bits)`` fields exactly as they
appear on the wire (first field first, each field most-significant bit first, network byte
order). From that single declaration come

* :attr:`Header.layout`, an :class:`amaranth.lib.data.StructLayout` whose fields hold the *values*
  (for example ``ipv4.total_length`` is a 16-bit number, ``eth.dst`` the 48-bit MAC address with
  the first byte on the wire as its most significant byte);
* :meth:`Header.to_lanes` and :meth:`Header.from_lanes`, which convert between such a view and
  the ``8 * length`` bit vector holding the header bytes in stream lane order (byte 0 in bits
  7:0, as on AXI-Stream). Gateware never slices header bits by hand: it calls these;
* :meth:`Header.pack` and :meth:`Header.unpack`, the same conversion for Python ``bytes`` and
  ``dict``, used by the reference models, the tests and the host agent.

The Python side needs nothing but Python; the gateware side (:attr:`Header.layout`,
:meth:`Header.to_lanes`, :meth:`Header.from_lanes`, :meth:`Header.const`) imports Amaranth when it
is first used, so the host agent runs where Amaranth is not installed.
"""

import functools

__all__ = [
    "Header", "ETH", "VLAN", "ETH_VLAN", "ARP", "IPV4", "ICMP", "UDP",
    "ETHERTYPE_IPV4", "ETHERTYPE_ARP", "ETHERTYPE_VLAN",
    "IP_PROTO_ICMP", "IP_PROTO_UDP",
    "IPV6", "ETHERTYPE_IPV6",
    "BTH", "RETH", "AETH", "IMMDT", "ATOMIC_ETH", "ATOMIC_TARGET", "ATOMIC_ACK_ETH", "CNP_PAYLOAD",
    "DETH", "UDP_PORT_ROCEV2", "joined",
]


class Header:
    """A protocol header: ordered ``(name, bits)`` fields, big-endian, in wire order.

    Parameters
    ----------
    name : str
        Identifier used as a field name when the header is carried as packet metadata.
    fields : list of (str, int)
        Field names and widths in bits, in the order they appear on the wire. The widths must add
        up to a whole number of bytes.
    """

    def __init__(self, name, fields):
        if not name.isidentifier():
            raise ValueError(f"header name must be an identifier, not {name!r}")
        seen = set()
        offsets = {}
        pos = 0
        for fname, bits in fields:
            if not isinstance(fname, str) or not fname.isidentifier():
                raise ValueError(f"{name}: field name must be an identifier, not {fname!r}")
            if fname in seen:
                raise ValueError(f"{name}: field {fname!r} declared twice")
            if not isinstance(bits, int) or bits <= 0:
                raise ValueError(f"{name}.{fname}: width must be a positive integer, not {bits!r}")
            seen.add(fname)
            offsets[fname] = (pos, bits)
            pos += bits
        if pos % 8:
            raise ValueError(f"{name}: fields add up to {pos} bits, not a whole number of bytes")
        self.name = name
        self.fields = list(fields)
        self.length = pos // 8
        self._offsets = offsets

    @functools.cached_property
    def layout(self):
        """The :class:`amaranth.lib.data.StructLayout` of the field values (first field first)."""
        from amaranth.lib import data
        return data.StructLayout({fname: bits for fname, bits in self.fields})

    def __repr__(self):
        return f"Header({self.name!r}, {self.length} bytes)"

    def offset(self, field):
        """Byte offset and width in bits of ``field`` (offset of its first bit, rounded down)."""
        pos, bits = self._offsets[field]
        return pos // 8, bits

    # ---- bit-position bookkeeping shared by the gateware and Python conversions ----

    def _chunks(self):
        """Yield ``(lane_bit, field, field_bit, count)`` runs: ``count`` bits of ``field`` starting
        at bit ``field_bit`` (LSB = 0) sit at bits ``lane_bit ...`` of the lane vector."""
        for fname, bits in self.fields:
            pos, _ = self._offsets[fname]
            # walk the field from its least significant bit (last on the wire) upwards
            fbit = 0
            while fbit < bits:
                wire = pos + bits - 1 - fbit            # wire position, 0 = MSB of byte 0
                byte, bit_in_byte = wire // 8, 7 - wire % 8
                count = min(8 - bit_in_byte, bits - fbit)
                yield byte * 8 + bit_in_byte, fname, fbit, count
                fbit += count

    # ---- gateware ----

    def to_lanes(self, view):
        """Header value (a view of :attr:`layout`) -> ``8 * length`` bits in lane order."""
        from amaranth.hdl import Cat, Value
        parts = sorted(self._chunks())
        pieces = []
        for _, fname, fbit, count in parts:
            pieces.append(Value.cast(getattr(view, fname))[fbit:fbit + count])
        return Cat(*pieces)

    def from_lanes(self, lanes):
        """``8 * length`` bits in lane order -> a view of :attr:`layout`."""
        from amaranth.hdl import Cat, Value
        from amaranth.lib import data
        lanes = Value.cast(lanes)
        if len(lanes) < 8 * self.length:
            raise ValueError(f"{self.name}: need {8 * self.length} bits of lanes, got {len(lanes)}")
        per_field = {fname: [] for fname, _ in self.fields}
        for lane_bit, fname, fbit, count in self._chunks():
            per_field[fname].append((fbit, lanes[lane_bit:lane_bit + count]))
        value = Cat(*(Cat(*(v for _, v in sorted(per_field[fname], key=lambda p: p[0])))
                      for fname, _ in self.fields))
        return data.View(self.layout, value)

    def const(self, **values):
        """A constant of :attr:`layout` (missing fields are zero)."""
        self._check_names(values)
        return self.layout.const(values)

    # ---- Python ----

    def _check_names(self, values):
        unknown = set(values) - set(self._offsets)
        if unknown:
            raise KeyError(f"{self.name}: no field(s) {sorted(unknown)}")

    def pack(self, **values):
        """Field values -> ``bytes`` of :attr:`length` (missing fields are zero)."""
        self._check_names(values)
        acc = 0
        for fname, bits in self.fields:
            v = int(values.get(fname, 0))
            if v < 0 or v >> bits:
                raise ValueError(f"{self.name}.{fname}: {v} does not fit in {bits} bits")
            acc = (acc << bits) | v
        return acc.to_bytes(self.length, "big")

    def unpack(self, raw):
        """``bytes`` (at least :attr:`length`) -> ``dict`` of field values."""
        if len(raw) < self.length:
            raise ValueError(f"{self.name}: need {self.length} bytes, got {len(raw)}")
        acc = int.from_bytes(bytes(raw[:self.length]), "big")
        out = {}
        shift = self.length * 8
        for fname, bits in self.fields:
            shift -= bits
            out[fname] = (acc >> shift) & ((1 << bits) - 1)
        return out

    def lanes_value(self, **values):
        """Field values -> the integer that :meth:`to_lanes` would produce (byte 0 lowest)."""
        return int.from_bytes(self.pack(**values), "little")


def joined(name, *headers):
    """One :class:`Header` named ``name`` made of ``headers`` back to back, in that order: field
    ``f`` of header ``h`` is field ``{h.name}_{f}`` of it (for a block that takes or puts several
    headers at once)."""
    if not headers or not all(isinstance(h, Header) for h in headers):
        raise TypeError(f"joined needs one or more Headers, not {headers!r}")
    return Header(name, [(f"{h.name}_{f}", bits) for h in headers for f, bits in h.fields])


ETHERTYPE_IPV4 = 0x0800
ETHERTYPE_ARP = 0x0806
ETHERTYPE_VLAN = 0x8100
IP_PROTO_ICMP = 1
IP_PROTO_UDP = 17

ETH = Header("eth", [("dst", 48), ("src", 48), ("ethertype", 16)])

VLAN = Header("vlan", [("pcp", 3), ("dei", 1), ("vid", 12), ("ethertype", 16)])

ETH_VLAN = Header("eth", [("dst", 48), ("src", 48), ("tpid", 16),
                          ("pcp", 3), ("dei", 1), ("vid", 12), ("ethertype", 16)])

ARP = Header("arp", [("htype", 16), ("ptype", 16), ("hlen", 8), ("plen", 8), ("oper", 16),
                     ("sha", 48), ("spa", 32), ("tha", 48), ("tpa", 32)])

IPV4 = Header("ipv4", [("version", 4), ("ihl", 4), ("dscp", 6), ("ecn", 2),
                       ("total_length", 16), ("identification", 16),
                       ("reserved", 1), ("df", 1), ("mf", 1), ("frag_offset", 13),
                       ("ttl", 8), ("protocol", 8), ("checksum", 16),
                       ("src", 32), ("dst", 32)])

ICMP = Header("icmp", [("type", 8), ("code", 8), ("checksum", 16),
                       ("identifier", 16), ("sequence", 16)])

UDP = Header("udp", [("src_port", 16), ("dst_port", 16), ("length", 16), ("checksum", 16)])


# ---- IPv6 and RoCEv2 (InfiniBand Annex A17) ----

ETHERTYPE_IPV6 = 0x86DD

IPV6 = Header("ipv6", [("version", 4), ("traffic_class", 8), ("flow_label", 20),
                       ("payload_length", 16), ("next_header", 8), ("hop_limit", 8),
                       ("src", 128), ("dst", 128)])

#: UDP destination port of RoCEv2.
UDP_PORT_ROCEV2 = 4791

#: Base Transport Header. ``opcode`` 7:5 is the transport (000 RC, 001 UC, 011 UD, 100 CNP);
#: ``m`` is MigReq, ``padcnt`` the zero bytes after the payload, ``tver`` 0; ``fecn``, ``becn``
#: and ``resv6`` (byte 4) are masked in the ICRC.
BTH = Header("bth", [("opcode", 8), ("se", 1), ("m", 1), ("padcnt", 2), ("tver", 4),
                     ("pkey", 16), ("fecn", 1), ("becn", 1), ("resv6", 6), ("dest_qp", 24),
                     ("ack_req", 1), ("resv7", 7), ("psn", 24)])

#: RDMA Extended Transport Header: remote virtual address, R_Key, length of the whole message.
RETH = Header("reth", [("va", 64), ("rkey", 32), ("dma_len", 32)])

#: ACK Extended Transport Header. ``syndrome`` 6:5: 00 ACK, 01 RNR NAK, 11 NAK; 4:0 a value.
AETH = Header("aeth", [("syndrome", 8), ("msn", 24)])

#: Immediate data, delivered to the receiver's completion.
IMMDT = Header("immdt", [("imm", 32)])

#: The 16 reserved (zero) bytes that follow the BTH of a CNP.
CNP_PAYLOAD = Header("cnp", [("reserved", 128)])

#: Atomic Extended Transport Header of COMPARE_SWAP and FETCH_ADD: remote virtual address,
#: R_Key, the swap (or add) data and the compare data.
ATOMIC_ETH = Header("atomic_eth", [("va", 64), ("rkey", 32), ("swap_add", 64), ("compare", 64)])
#: The AtomicETH's target, its first 12 bytes (the same fields as :data:`ATOMIC_ETH`'s first two):
#: the endpoint's packet builder sends them from the descriptor and the operands after them from
#: local memory, as a payload.
ATOMIC_TARGET = Header("atomic_target", [("va", 64), ("rkey", 32)])

#: Atomic Acknowledge Extended Transport Header: the remote data before the atomic operation.
ATOMIC_ACK_ETH = Header("atomic_ack_eth", [("orig", 64)])

#: Datagram Extended Transport Header of the unreliable datagram (UD) transport: the Q_Key the
#: receiving QP checks and the sending QP's number (QP1, the management QP, sends the
#: communication manager's MADs with the well-known Q_Key
#: :data:`rocegen.wire.ibcm.QP1_QKEY`).
DETH = Header("deth", [("qkey", 32), ("reserved", 8), ("src_qp", 24)])

# The BTH opcodes, the extension headers each carries and what it means are in the opcode
# catalogue, :mod:`rocegen.wire.opcodes`.

#: The 64-byte datagram of the out-of-band connection manager (UDP port 17185; see
#: :mod:`rocegen.gateware.roce.cm.cm`). ``loc_*`` describe the sender, ``rem_*`` its peer. Byte 0
#: holds the request and reply codes; ``pmtu_code`` (byte 1), ``timeout_code`` (byte 5), the
#: retry byte 25 and ``window_log2`` (byte 29: the remote window of test traffic) are zero in the
#: original format; byte 51 flags test traffic (``tx_read``, bit 4, an extension: the test
#: traffic is RDMA READs of the peer's region; ``tx_atomic``, bits 6-5, an extension: it is
#: RDMA atomics on the peer's region, :data:`rocegen.wire.cm.TX_ATOMIC`).
CM = Header("cm", [("ack_type", 3), ("ack_valid", 1), ("req_type", 3), ("info_valid", 1),
                   ("pmtu_code", 8), ("loc_qpn", 24), ("timeout_code", 8), ("loc_psn", 24),
                   ("loc_rkey", 32), ("loc_vaddr", 64), ("loc_ip", 32),
                   ("retry_set", 1), ("rnr_retry", 3), ("resv25", 1), ("retry_cnt", 3),
                   ("rem_qpn", 24), ("window_log2", 8), ("rem_psn", 24), ("rem_rkey", 32),
                   ("rem_vaddr", 64), ("rem_ip", 32), ("listening_port", 16),
                   ("resv51", 1), ("tx_atomic", 2), ("tx_read", 1), ("tx_type", 1), ("is_imm", 1),
                   ("start", 1), ("txmeta_valid", 1),
                   ("dma_length", 32), ("n_transfers", 32), ("frequency", 32)])
