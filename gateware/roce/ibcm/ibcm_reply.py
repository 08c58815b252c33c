"""The IB CM's reply builder: a reply record streamed out as its 256-byte MAD."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature, check_width
from rocegen.gateware.roce.ibcm.ibcm_layouts import (
    IBCM_TX_META,
    REPLY_RECORD,
    ReplyKind,
    int_param,
    mad_read_signature,
)
from rocegen.wire import ibcm as I

__all__ = ["IbCmReply"]

#: Reply kind -> the MAD's attribute ID.
_ATTRIBUTE = {ReplyKind.REP: I.ATTR_REP, ReplyKind.REJ: I.ATTR_REJ, ReplyKind.RTU: I.ATTR_RTU,
              ReplyKind.DREP: I.ATTR_DREP, ReplyKind.DREQ: I.ATTR_DREQ, ReplyKind.REQ: I.ATTR_REQ,
              ReplyKind.CLASS_PORT_INFO: I.ATTR_CLASS_PORT_INFO}


class IbCmReply(wiring.Component):
    """Builds the MAD a reply record asks for and sends it.

    Parameters
    ----------
    width : int
        Data width W of ``o`` (64..512).
    ca_guid : int
        Our CA GUID (64 bits), the REP's ``local_ca_guid``.
    rnr_retry_count : int
        The REP's RNR retry count (0..7).
    cm_response_timeout : int
        Our CM response time (0..31), a ClassPortInfo's ``resp_time_value`` and both CM
        response timeouts of our REQs.
    max_cm_retries, local_ack_timeout, retry_count : int
        What our REQs state: how often they are sent again (0..15), the local ACK timeout of
        our QPs (0..31) and their retry count (0..7).
    region_port : bool
        A REP's region is read per QP (ports ``region_qp``, ``region``) instead of taken from
        its record.

    Ports
    -----
    i : In(stream.Signature(REPLY_RECORD))
        A reply to send. A record of another kind than ``ECHO`` is taken at once when nothing
        is being sent (``i.ready`` a register); an ``ECHO`` is read while it is held and taken
        in the cycle its last beat leaves (the MAD it echoes must stay until then).
    mad : Out(mad_read_signature(width))
        The MAD an ``ECHO`` sends, a beat at a time (the receiver's, read asynchronously).
    region_qp : Out(24), with ``region_port``
        The QP number of the record being sent (``local_qpn``; of the record offered, while
        none is), ...
    local_ip : In(32)
        Our IPv4 address (a REQ's GID and ``cma_hdr``).
    region : In(I.REGION.layout), with ``region_port``
        ... its region, one cycle after (a read port of the regions, e.g. the responder's
        configuration table): a REP's private data from the cycle after its record is taken.
    o : Out(PacketSignature(width, IBCM_TX_META))
        The MAD, 256 bytes, byte 0 in lane 0 of the first beat, every lane kept, ``error`` low;
        ``meta``: the record's ``dst_ip``, ``dst_qp``, ``pkey``. An ``ECHO`` below; else its
        header: base version 1,
        class 7, class version 2, status 0, the record's ``transaction_id``,
        ``class_specific``, ``hdr_reserved`` (the header's ``reserved``) and
        ``attribute_modifier``; method GetResp and attribute ClassPortInfo for
        ``CLASS_PORT_INFO``, else Send and the kind's attribute. Its data (every field not
        named zero, as are the bytes after a layout's end):

        * REP: ``local_comm_id``, ``remote_comm_id``, ``local_qpn``, ``starting_psn``,
          ``responder_resources``, ``initiator_depth``, ``end_to_end_flow_control`` 1,
          ``rnr_retry_count``, ``local_ca_guid``; its private data the record's ``region``
          (:data:`rocegen.wire.ibcm.REGION`: address, R_Key, length), then zeros;
        * REJ: ``local_comm_id``, ``remote_comm_id``, ``message_rejected`` (``message``),
          ``reason``; with ``ari_guid``, ``reject_info_length`` 8 and ``ca_guid`` the first 8
          bytes of ``ari``, else no additional information;
        * RTU, DREP: ``local_comm_id``, ``remote_comm_id``;
        * DREQ: ``local_comm_id``, ``remote_comm_id``, ``remote_qpn``;
        * REQ, as Linux's CM sends one for librdmacm over RoCE: ``local_comm_id``, service ID
          ``0x01060000 | port``, ``local_ca_guid``, ``local_qpn``, ``responder_resources``,
          ``initiator_depth``, both CM response timeouts ``cm_response_timeout``, transport
          RC, end-to-end flow control 1, ``starting_psn``, ``retry_count``, the P_Key
          ``pkey``, ``path_mtu``, ``rnr_retry_count``, ``max_cm_retries``; its primary path:
          both LIDs permissive (0xFFFF), GIDs ``::ffff:local_ip`` and ``::ffff:dst_ip``, hop
          limit 64, ``local_ack_timeout``; its private data a ``cma_hdr`` (version 0, IPv4,
          ``src_port``, ``local_ip``, ``dst_ip``), then zeros;
        * CLASS_PORT_INFO: ClassPortInfo with base version 1, class version 2 and
          ``resp_time_value`` ``cm_response_timeout``;
        * ECHO: the MAD read on ``mad`` (header and data), its method GetResp and its status
          the record's ``status`` (a Get or Set answered as Linux's MAD layer answers one it
          has no agent for).

    Behaviour
    ---------
    One MAD at a time: if a record is taken in cycle t, its first beat is offered in cycle
    t + 1 and one beat follows per cycle while ``o.ready`` is high (2048 / W beats); ``i.ready``
    is high again in the cycle after the last beat leaves. An ``ECHO`` offered in cycle t has
    its first beat offered in cycle t + 1 as well, and is taken with its last beat.
    Backpressure: ``o`` may stall for any time. The record is kept in registers; the beats are
    selected from the MAD's lanes, built combinationally from them with the wire layouts (an
    ``ECHO``'s from ``mad``).
    """

    def __init__(self, width, *, ca_guid=0, rnr_retry_count=7, cm_response_timeout=20,
                 region_port=False, max_cm_retries=15, local_ack_timeout=14, retry_count=7):
        check_width(width)
        self.width = width
        self.ca_guid = int_param("ca_guid", ca_guid, 0, (1 << 64) - 1)
        self.rnr_retry_count = int_param("rnr_retry_count", rnr_retry_count, 0, 7)
        self.cm_response_timeout = int_param("cm_response_timeout", cm_response_timeout, 0, 31)
        self.max_cm_retries = int_param("max_cm_retries", max_cm_retries, 0, 15)
        self.local_ack_timeout = int_param("local_ack_timeout", local_ack_timeout, 0, 31)
        self.retry_count = int_param("retry_count", retry_count, 0, 7)
        if not isinstance(region_port, bool):
            raise TypeError(f"region_port must be a bool, not {region_port!r}")
        self.region_port = region_port
        super().__init__({
            "i": In(stream.Signature(REPLY_RECORD)),
            "o": Out(PacketSignature(width, IBCM_TX_META)),
            "mad": Out(mad_read_signature(width)),
            "local_ip": In(32),
            **({"region_qp": Out(24), "region": In(I.REGION.layout)} if region_port else {}),
        })

    def elaborate(self, platform):
        m = Module()
        W = self.width
        NB = 8 * I.MAD_LENGTH // W
        rec = Signal(REPLY_RECORD)
        busy = Signal()
        beat = Signal(range(NB))
        echo = rec.kind == ReplyKind.ECHO
        last = self.o.valid & self.o.ready & (beat == NB - 1)
        m.d.comb += self.i.ready.eq(Mux(busy, echo & last,
                                        self.i.payload.kind != ReplyKind.ECHO))
        with m.If(self.i.valid & ~busy):
            m.d.sync += [rec.eq(self.i.payload), busy.eq(1), beat.eq(0)]
        if self.region_port:
            m.d.comb += self.region_qp.eq(Mux(busy, rec.local_qpn, self.i.payload.local_qpn))

        mad = Signal(8 * I.MAD_LENGTH)
        m.d.comb += mad.eq(Cat(self._header(m, rec), self._data(m, rec)))
        o = self.o.payload
        m.d.comb += [
            self.o.valid.eq(busy),
            self.mad.addr.eq(beat),
            o.data.eq(Mux(echo, self._echo(beat, rec), mad.word_select(beat, W))),
            o.keep.eq((1 << (W // 8)) - 1),
            o.last.eq(beat == NB - 1),
            o.meta.dst_ip.eq(rec.dst_ip), o.meta.dst_qp.eq(rec.dst_qp),
            o.meta.pkey.eq(rec.pkey),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += beat.eq(beat + 1)
            with m.If(beat == NB - 1):
                m.d.sync += busy.eq(0)
        return m

    def _echo(self, beat, rec):
        """Beat ``beat`` of an ``ECHO``: the MAD read on ``mad``, in its first beat the
        method GetResp and the status (bytes 3, 4 and 5) the record's."""
        word = self.mad.data
        status = Cat(rec.status[8:], rec.status[:8])          # big-endian on the wire
        first = Cat(word[:24], Const(I.METHOD_GET_RESP, 8), status, word[48:])
        return Mux(beat == 0, first, word)

    def _header(self, m, rec):
        """The MAD header's lanes."""
        hdr = Signal(I.MAD_HDR.layout)
        cpi = rec.kind == ReplyKind.CLASS_PORT_INFO
        m.d.comb += [hdr.base_version.eq(I.BASE_VERSION), hdr.mgmt_class.eq(I.MGMT_CLASS_CM),
                     hdr.class_version.eq(I.CM_CLASS_VERSION),
                     hdr.method.eq(I.METHOD_SEND),
                     hdr.class_specific.eq(rec.class_specific), hdr.reserved.eq(rec.hdr_reserved),
                     hdr.attribute_modifier.eq(rec.attribute_modifier),
                     hdr.transaction_id.eq(rec.transaction_id)]
        with m.If(cpi):
            m.d.comb += hdr.method.eq(I.METHOD_GET_RESP)
        with m.Switch(rec.kind):
            for kind, attr in _ATTRIBUTE.items():
                with m.Case(kind):
                    m.d.comb += hdr.attribute_id.eq(attr)
        lanes = Signal(8 * I.MAD_HDR_LENGTH)
        m.d.comb += lanes.eq(I.MAD_HDR.to_lanes(hdr))
        return lanes

    def _data(self, m, rec):
        """The class data's lanes (232 bytes), by kind."""
        nbits = 8 * I.MAD_DATA_LENGTH

        def padded(*parts):
            lanes = Cat(*parts)
            return Cat(lanes, Const(0, nbits - len(lanes)))

        rep = Signal(I.REP.layout)
        m.d.comb += [rep.local_comm_id.eq(rec.local_comm_id),
                     rep.remote_comm_id.eq(rec.remote_comm_id), rep.local_qpn.eq(rec.local_qpn),
                     rep.starting_psn.eq(rec.starting_psn),
                     rep.responder_resources.eq(rec.responder_resources),
                     rep.initiator_depth.eq(rec.initiator_depth),
                     rep.end_to_end_flow_control.eq(1),
                     rep.rnr_retry_count.eq(self.rnr_retry_count),
                     rep.local_ca_guid.eq(self.ca_guid)]
        pd = I.REP.offset("private_data")[0]
        region = self.region if self.region_port else rec.region
        rep_lanes = padded(I.REP.to_lanes(rep)[:8 * pd], I.REGION.to_lanes(region))

        rej = Signal(I.REJ.layout)
        m.d.comb += [rej.local_comm_id.eq(rec.local_comm_id),
                     rej.remote_comm_id.eq(rec.remote_comm_id),
                     rej.message_rejected.eq(rec.message), rej.reason.eq(rec.reason)]
        with m.If(rec.ari_guid):
            ari_bits = len(rej.ari)
            m.d.comb += [rej.reject_info_length.eq(8),
                         rej.ari.eq(self.ca_guid << (ari_bits - 64))]
        rtu, drep, dreq = Signal(I.RTU.layout), Signal(I.DREP.layout), Signal(I.DREQ.layout)
        for msg in (rtu, drep, dreq):
            m.d.comb += [msg.local_comm_id.eq(rec.local_comm_id),
                         msg.remote_comm_id.eq(rec.remote_comm_id)]
        m.d.comb += dreq.remote_qpn.eq(rec.remote_qpn)
        req_lanes = self._req(m, rec, padded)
        cpi = Signal(I.CLASS_PORT_INFO.layout)
        m.d.comb += [cpi.base_version.eq(I.BASE_VERSION), cpi.class_version.eq(I.CM_CLASS_VERSION),
                     cpi.resp_time_value.eq(self.cm_response_timeout)]

        data = Signal(nbits)
        with m.Switch(rec.kind):
            with m.Case(ReplyKind.REP):
                m.d.comb += data.eq(rep_lanes)
            with m.Case(ReplyKind.REJ):
                m.d.comb += data.eq(padded(I.REJ.to_lanes(rej)))
            with m.Case(ReplyKind.RTU):
                m.d.comb += data.eq(padded(I.RTU.to_lanes(rtu)))
            with m.Case(ReplyKind.DREP):
                m.d.comb += data.eq(padded(I.DREP.to_lanes(drep)))
            with m.Case(ReplyKind.DREQ):
                m.d.comb += data.eq(padded(I.DREQ.to_lanes(dreq)))
            with m.Case(ReplyKind.REQ):
                m.d.comb += data.eq(req_lanes)
            with m.Case(ReplyKind.CLASS_PORT_INFO):
                m.d.comb += data.eq(padded(I.CLASS_PORT_INFO.to_lanes(cpi)))
        return data

    def _req(self, m, rec, padded):
        """A REQ's class data lanes (see the class's docstring)."""
        req = Signal(I.REQ.layout)
        m.d.comb += [
            req.local_comm_id.eq(rec.local_comm_id),
            req.service_id.eq(I.SERVICE_ID_TCP | rec.port), req.local_ca_guid.eq(self.ca_guid),
            req.local_qpn.eq(rec.local_qpn), req.responder_resources.eq(rec.responder_resources),
            req.initiator_depth.eq(rec.initiator_depth),
            req.remote_cm_response_timeout.eq(self.cm_response_timeout),
            req.transport_service_type.eq(I.TRANSPORT_RC), req.end_to_end_flow_control.eq(1),
            req.starting_psn.eq(rec.starting_psn),
            req.local_cm_response_timeout.eq(self.cm_response_timeout),
            req.retry_count.eq(self.retry_count), req.partition_key.eq(rec.pkey),
            req.path_mtu.eq(rec.path_mtu), req.rnr_retry_count.eq(self.rnr_retry_count),
            req.max_cm_retries.eq(self.max_cm_retries),
            req.primary_local_lid.eq(I.LID_PERMISSIVE), req.primary_remote_lid.eq(I.LID_PERMISSIVE),
            req.primary_local_gid.eq(Cat(self.local_ip, Const(0xFFFF, 16))),
            req.primary_remote_gid.eq(Cat(rec.dst_ip, Const(0xFFFF, 16))),
            req.primary_hop_limit.eq(64), req.primary_local_ack_timeout.eq(self.local_ack_timeout)]
        cma = Signal(I.CMA_HDR.layout)
        m.d.comb += [cma.cma_version.eq(I.CMA_VERSION), cma.ip_version.eq(I.CMA_IP_VERSION_4),
                     cma.src_port.eq(rec.src_port), cma.src_addr.eq(self.local_ip),
                     cma.dst_addr.eq(rec.dst_ip)]
        pd = I.REQ.offset("private_data")[0]
        return padded(I.REQ.to_lanes(req)[:8 * pd], I.CMA_HDR.to_lanes(cma))
