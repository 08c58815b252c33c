"""The IB CM's receiver: one MAD taken, its fields kept, its verdict made."""

from amaranth.hdl import Cat, Const, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.roce.ibcm.ibcm_layouts import (
    IBCM_RX_META,
    MAD_RECORD,
    Verdict,
    mad_read_signature,
)
from rocegen.wire import ibcm as I

__all__ = ["IbCmReceiver", "KEPT_BYTES"]

_REQ_PD = I.MAD_HDR_LENGTH + I.REQ.offset("private_data")[0]   # the cma_hdr's first byte
_REP_PD = I.MAD_HDR_LENGTH + I.REP.offset("private_data")[0]   # a REP's region

#: Record field -> (header, byte of the MAD where the header starts, the header's field).
_SOURCES = {
    "local_comm_id": (I.REQ, I.MAD_HDR_LENGTH, "local_comm_id"),
    "remote_comm_id": (I.REP, I.MAD_HDR_LENGTH, "remote_comm_id"),
    **{f: (I.REQ, I.MAD_HDR_LENGTH, f) for f in (
        "service_id", "local_qpn", "responder_resources", "initiator_depth",
        "transport_service_type", "starting_psn", "local_cm_response_timeout", "retry_count",
        "path_mtu", "rnr_retry_count", "max_cm_retries")},
    "local_ack_timeout": (I.REQ, I.MAD_HDR_LENGTH, "primary_local_ack_timeout"),
    "cma_version": (I.CMA_HDR, _REQ_PD, "cma_version"),
    "cma_ip_version": (I.CMA_HDR, _REQ_PD, "ip_version"),
    "cma_src_port": (I.CMA_HDR, _REQ_PD, "src_port"),
    "remote_qpn": (I.DREQ, I.MAD_HDR_LENGTH, "remote_qpn"),
    "message": (I.REJ, I.MAD_HDR_LENGTH, "message_rejected"),
    "reason": (I.REJ, I.MAD_HDR_LENGTH, "reason"),
    "service_timeout": (I.MRA, I.MAD_HDR_LENGTH, "service_timeout"),
    **{f"rep_{f}": (I.REP, I.MAD_HDR_LENGTH, f) for f in (
        "local_qpn", "starting_psn", "responder_resources", "initiator_depth",
        "rnr_retry_count")},
    **{f"rep_{f}": (I.REGION, _REP_PD, f) for f in ("addr", "rkey", "length")},
}


def _bytes_of(header, base, field):
    """The bytes of the MAD that ``field`` of ``header`` (starting at byte ``base``) covers."""
    bits = dict(header.fields)[field]
    raw = header.pack(**{field: (1 << bits) - 1})
    return {base + n for n, b in enumerate(raw) if b}


def _kept_bytes():
    kept = set(range(I.MAD_HDR_LENGTH))
    for header, base, field in _SOURCES.values():
        kept |= _bytes_of(header, base, field)
    for field in ("src_addr", "dst_addr"):
        kept |= _bytes_of(I.CMA_HDR, _REQ_PD, field)
    return frozenset(kept)


#: The bytes of a MAD the receiver keeps (the others are not stored).
KEPT_BYTES = _kept_bytes()


class IbCmReceiver(wiring.Component):
    """Takes one MAD at a time, keeps the bytes the CM acts on and holds its record until the
    CM has dealt with it.

    Parameters
    ----------
    width : int
        Data width W of ``i`` (64..512).

    Ports
    -----
    i : In(PacketSignature(width, IBCM_RX_META))
        MADs: the UD payload after the BTH and the DETH, byte 0 in lane 0 of the first beat;
        ``meta``: the sender (taken with the last beat).
    o : Out(stream.Signature(MAD_RECORD))
        The MAD taken last: its fields (big-endian on the wire, values here; see
        :data:`MAD_RECORD`) and its :class:`Verdict`, made in the model's order: length (exactly
        256 bytes, every lane of the last beat kept, no ``error``), base version 1, class 7, not
        a response, Get or Set (``GET_SET``), Send, class version 2, one of the seven messages
        (``OK``). The fields are meaningful when the verdict is ``OK`` or ``GET_SET`` (those of
        the MAD's own message).
    mad : In(mad_read_signature(width))
        The MAD taken last, beat ``addr`` on ``data`` in the same cycle, as it came (the
        reply builder echoes a Get or Set from it); meaningful while ``o`` holds it and the
        verdict is not ``LENGTH``.

    Behaviour
    ---------
    Cost: the record's fields come from :data:`KEPT_BYTES` (the header, the fields of the
    record, the REQ's ``cma_hdr`` and the REP's region: 103 bytes), each in a byte register
    written when its beat passes; the whole MAD is also written, a beat a word, to a memory
    of 2048 / W words of W bits read asynchronously (``mad``: 2048 bits, distributed RAM). Latency: if
    the last beat of a MAD moves in cycle t, ``o.valid`` is high from cycle t + 1 (verdict and
    fields combinational from the registers). Backpressure: ``o`` is held, and ``i.ready`` low,
    until ``o.ready``; ``i.ready`` is high again in the cycle after. A MAD longer than 256
    bytes is taken whole and its verdict is ``LENGTH``.
    """

    def __init__(self, width):
        check_width(width)
        self.width = width
        super().__init__({
            "i": In(PacketSignature(width, IBCM_RX_META)),
            "o": Out(stream.Signature(MAD_RECORD)),
            "mad": In(mad_read_signature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        length_ok = Signal()
        lanes = self._capture(m, length_ok)
        self._record(m, lanes, length_ok)
        return m

    def _capture(self, m, length_ok):
        """The handshake and the kept bytes; returns the MAD's 256 bytes in lane order (the
        bytes not kept are zero)."""
        B = self.width // 8
        NB = I.MAD_LENGTH // B
        regs = {b: Signal(8, name=f"byte{b}") for b in sorted(KEPT_BYTES)}
        beat = Signal(range(NB + 1))        # beats taken so far (NB: more than a MAD)
        recv = Signal(init=1)               # waiting for a MAD: i.ready from a register
        meta = Signal(IBCM_RX_META)
        m.d.comb += [self.i.ready.eq(recv), self.o.valid.eq(~recv)]
        p = self.i.payload
        m.submodules.mad = mad = Memory(shape=self.width, depth=NB, init=[])
        wr, rd = mad.write_port(), mad.read_port(domain="comb")
        m.d.comb += [wr.addr.eq(beat), wr.data.eq(p.data),
                     wr.en.eq(self.i.valid & recv & (beat != NB)),
                     rd.addr.eq(self.mad.addr), self.mad.data.eq(rd.data)]
        with m.If(self.i.valid & recv):
            for k in range(NB):
                here = [b for b in regs if b // B == k]
                if here:
                    with m.If(beat == k):
                        m.d.sync += [regs[b].eq(p.data[8 * (b % B):8 * (b % B) + 8])
                                     for b in here]
            with m.If(beat != NB):
                m.d.sync += beat.eq(beat + 1)
            with m.If(p.last):
                full = p.keep == (1 << B) - 1
                m.d.sync += [beat.eq(0), recv.eq(0), meta.eq(p.meta),
                             length_ok.eq((beat == NB - 1) & full & ~p.error)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += recv.eq(1)
        r = self.o.payload
        m.d.comb += [r.src_ip.eq(meta.src_ip), r.src_qp.eq(meta.src_qp), r.pkey.eq(meta.pkey)]
        lanes = Signal(8 * I.MAD_LENGTH)
        m.d.comb += lanes.eq(Cat(*(regs.get(b, Const(0, 8)) for b in range(I.MAD_LENGTH))))
        return lanes

    @staticmethod
    def _view(m, header, base, lanes):
        """``header`` read from the MAD's bytes from ``base`` on, in a signal of its layout."""
        view = Signal(header.layout, name=f"{header.name}_at_{base}")
        m.d.comb += view.eq(header.from_lanes(lanes[8 * base:8 * (base + header.length)]))
        return view

    def _record(self, m, lanes, length_ok):
        """The record's fields from the kept bytes, and the verdict."""
        r = self.o.payload
        hdr = self._view(m, I.MAD_HDR, 0, lanes)
        m.d.comb += r.hdr.eq(hdr)
        views = {}
        for name, (header, base, field) in _SOURCES.items():
            key = (header.name, base)
            if key not in views:
                views[key] = self._view(m, header, base, lanes)
            m.d.comb += getattr(r, name).eq(getattr(views[key], field))
        cma = self._view(m, I.CMA_HDR, _REQ_PD, lanes)
        src, dst = cma.src_addr, cma.dst_addr
        m.d.comb += [r.cma_src_ip.eq(src[:32]), r.cma_dst_ip.eq(dst[:32]),
                     r.cma_high_zero.eq((src[32:] == 0) & (dst[32:] == 0))]

        known = Cat(*(hdr.attribute_id == a for a in I.MESSAGES)).any()
        with m.If(~length_ok):
            m.d.comb += r.verdict.eq(Verdict.LENGTH)
        with m.Elif(hdr.base_version != I.BASE_VERSION):
            m.d.comb += r.verdict.eq(Verdict.BASE_VERSION)
        with m.Elif(hdr.mgmt_class != I.MGMT_CLASS_CM):
            m.d.comb += r.verdict.eq(Verdict.CLASS)
        with m.Elif((hdr.method & I.METHOD_RESP) != 0):
            m.d.comb += r.verdict.eq(Verdict.RESPONSE)
        with m.Elif((hdr.method == I.METHOD_GET) | (hdr.method == I.METHOD_SET)):
            m.d.comb += r.verdict.eq(Verdict.GET_SET)
        with m.Elif(hdr.method != I.METHOD_SEND):
            m.d.comb += r.verdict.eq(Verdict.METHOD)
        with m.Elif(hdr.class_version != I.CM_CLASS_VERSION):
            m.d.comb += r.verdict.eq(Verdict.CLASS_VERSION)
        with m.Elif(~known):
            m.d.comb += r.verdict.eq(Verdict.ATTRIBUTE)
        with m.Else():
            m.d.comb += r.verdict.eq(Verdict.OK)
