"""The IB CM's passive side on QP1, whole: RoCEv2 datagrams in, the CM's UD packets out."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.ibcm import ibcm_passive, qp1_ingress
from rocegen.gateware.roce.ibcm.ibcm_layouts import QP_GRANT
from rocegen.gateware.roce.ibcm.ibcm_passive import IbCmPassive
from rocegen.gateware.roce.ibcm.ibcm_receive import IbCmReceiver
from rocegen.gateware.roce.ibcm.ibcm_reply import IbCmReply
from rocegen.gateware.roce.ibcm.qp1_egress import Qp1Egress
from rocegen.gateware.roce.ibcm.qp1_ingress import Qp1Ingress
from rocegen.wire import ibcm as I

__all__ = ["IbCmService", "COUNTERS"]

#: The service's counter strobes: the ingress's, prefixed ``qp1_``, then the passive side's.
COUNTERS = (*(f"qp1_{c}" for c in qp1_ingress.COUNTERS), *ibcm_passive.COUNTERS)


class IbCmService(wiring.Component):
    """QP1 with the passive side of the IB CM behind it, as librdmacm's ``rdma_listen`` peer
    sees it: :class:`~rocegen.gateware.roce.ibcm.qp1_ingress.Qp1Ingress`,
    :class:`~rocegen.gateware.roce.ibcm.ibcm_receive.IbCmReceiver`,
    :class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive`,
    :class:`~rocegen.gateware.roce.ibcm.ibcm_reply.IbCmReply` and
    :class:`~rocegen.gateware.roce.ibcm.qp1_egress.Qp1Egress` in a row.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    queue : int
        MADs the ingress queue holds (:class:`Qp1Ingress`'s ``queue``).
    ca_guid, rnr_retry_count, cm_response_timeout :
        The reply builder's (our CA GUID; the RNR retry count of our REPs; the response time
        our ClassPortInfo states).
    ports, clk_hz, and any other keyword :
        The passive side's (the listened TCP ports, the clock frequency, the table's size, the
        QPs, the READ depths, the IDs and PSNs, the time-wait).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram from RoCE's ICRC check (IPv4 header first, ICRC removed, ``error``
        when it was bad). Always ready.
    o : Out(PacketSignature(width, UDP_TX_META))
        The CM's MADs as UD SEND_ONLY packets from QP1, for the stack's RoCEv2 port (the stack
        appends the ICRC).
    local_ip, region, qp_req, qp_grant, qp_free, data_seen :
        The passive side's: our IPv4 address, the region our REPs advertise, the QP pool's
        handshakes, the QPs packets arrive on.
    <name> : Out(1), for each name of :data:`COUNTERS`
        The blocks' counter strobes.

    Behaviour
    ---------
    The blocks' own, in a row: a MAD is queued by the ingress, held by the receiver while the
    passive side decides, and answered (REP, REJ, DREP, GetResp...) through the reply builder
    and the egress. Latency from a REQ's last beat to its REP's first beat: the ingress's two
    cycles, the receiver's one, the passive side's ``connections`` + 3 (with the QP pool
    answering at once) and the reply builder's and egress's paths (see each block).
    Backpressure: ``o.ready`` holds the reply, then the passive side, then the receiver; the
    ingress queue takes the MADs meanwhile and drops what does not fit (counted).
    """

    def __init__(self, width, *, queue=2, ca_guid=0, rnr_retry_count=7, cm_response_timeout=20,
                 **passive):
        self.width = width
        self.ingress = Qp1Ingress(width, queue=queue)
        self.rx = IbCmReceiver(width)
        self.cm = IbCmPassive(**passive)
        self.reply = IbCmReply(width, ca_guid=ca_guid, rnr_retry_count=rnr_retry_count,
                               cm_response_timeout=cm_response_timeout)
        self.egress = Qp1Egress(width)
        super().__init__({
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
            "local_ip": In(32), "region": In(I.REGION.layout),
            "qp_req": Out(stream.Signature(0)), "qp_grant": In(stream.Signature(QP_GRANT)),
            "qp_free": Out(stream.Signature(24)),
            "data_seen": In(stream.Signature(24, always_ready=True)),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.ingress, m.submodules.rx = self.ingress, self.rx
        m.submodules.cm, m.submodules.reply = self.cm, self.reply
        m.submodules.egress = self.egress
        wiring.connect(m, wiring.flipped(self.i), self.ingress.i)
        wiring.connect(m, self.ingress.o, self.rx.i)
        wiring.connect(m, self.rx.o, self.cm.i)
        wiring.connect(m, self.cm.o, self.reply.i)
        wiring.connect(m, self.reply.mad, self.rx.mad)
        wiring.connect(m, self.reply.o, self.egress.i)
        wiring.connect(m, self.egress.o, wiring.flipped(self.o))
        wiring.connect(m, self.cm.qp_req, wiring.flipped(self.qp_req))
        wiring.connect(m, wiring.flipped(self.qp_grant), self.cm.qp_grant)
        wiring.connect(m, self.cm.qp_free, wiring.flipped(self.qp_free))
        wiring.connect(m, wiring.flipped(self.data_seen), self.cm.data_seen)
        m.d.comb += [self.cm.local_ip.eq(self.local_ip), self.cm.region.eq(self.region)]
        for c in qp1_ingress.COUNTERS:
            m.d.comb += getattr(self, f"qp1_{c}").eq(getattr(self.ingress, c))
        for c in ibcm_passive.COUNTERS:
            m.d.comb += getattr(self, c).eq(getattr(self.cm, c))
        return m
