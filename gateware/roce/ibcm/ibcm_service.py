"""The IB CM's passive side on QP1, whole: RoCEv2 datagrams in, the CM's UD packets out."""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature
from rocegen.gateware.net.udp_tx import UDP_TX_META
from rocegen.gateware.roce.ibcm import ibcm_passive, qp1_ingress
from rocegen.gateware.roce.ibcm.ibcm_mads import IbCmMads, cm_ports, connect_cm_ports
from rocegen.gateware.roce.ibcm.qp1_egress import Qp1Egress
from rocegen.gateware.roce.ibcm.qp1_ingress import Qp1Ingress

__all__ = ["IbCmService", "COUNTERS"]

#: The service's counter strobes: the ingress's, prefixed ``qp1_``, then the passive side's.
COUNTERS = (*(f"qp1_{c}" for c in qp1_ingress.COUNTERS), *ibcm_passive.COUNTERS)


class IbCmService(wiring.Component):
    """QP1 with the passive side of the IB CM behind it, as librdmacm's ``rdma_listen`` peer
    sees it: :class:`~rocegen.gateware.roce.ibcm.qp1_ingress.Qp1Ingress`,
    :class:`~rocegen.gateware.roce.ibcm.ibcm_mads.IbCmMads` (:attr:`core`: the receiver, the
    passive side and the reply builder) and
    :class:`~rocegen.gateware.roce.ibcm.qp1_egress.Qp1Egress` in a row.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    queue : int
        MADs the ingress queue holds (:class:`Qp1Ingress`'s ``queue``).
    ports, clk_hz, ca_guid, and any other keyword :
        :class:`~rocegen.gateware.roce.ibcm.ibcm_mads.IbCmMads`'s (the reply builder's and the
        passive side's: the listened TCP ports, the clock frequency, our CA GUID, the table's
        size, the QPs, the READ depths, the IDs and PSNs, the time-wait).

    Ports
    -----
    i : In(PacketSignature(width))
        Every RoCEv2 datagram from RoCE's ICRC check (IPv4 header first, ICRC removed, ``error``
        when it was bad). Always ready.
    o : Out(PacketSignature(width, UDP_TX_META))
        The CM's MADs as UD SEND_ONLY packets from QP1, for the stack's RoCEv2 port (the stack
        appends the ICRC).
    local_ip, region, qp_req, qp_grant, qp_free, qp_set, data_seen :
        The passive side's: our IPv4 address, the region our REPs advertise, the QP pool's
        handshakes, the QPs' set-ups and closes, the QPs packets arrive on.
    region_qp : Out(24), with ``region_port``
        The QP whose region ``region`` brings one cycle after (:class:`IbCmMads`').
    <name> : Out(1), for each name of :data:`COUNTERS`
        The blocks' counter strobes.

    Behaviour
    ---------
    The blocks' own, in a row: a MAD is queued by the ingress, held by the receiver while the
    passive side decides, and answered (REP, REJ, DREP, GetResp...) through the reply builder
    and the egress. Latency from a REQ's last beat to its REP's first beat, with the QP pool
    answering at once and ``o`` ready: ``connections`` + 2048 / W + 8 cycles: the ingress's
    two, the MAD's move into the receiver (2048 / W - 1), the receiver's one, the passive
    side's decision (``connections`` + 2) and its three handshakes (``qp_req``, ``qp_grant``,
    the reply), the reply builder's one; the egress adds none (see each block; measured by
    ``bench/bench_rdma_cm.py``).
    Backpressure: ``o.ready`` holds the reply, then the passive side, then the receiver; the
    ingress queue takes the MADs meanwhile and drops what does not fit (counted).
    """

    def __init__(self, width, *, queue=2, **cm):
        self.width = width
        self.ingress = Qp1Ingress(width, queue=queue)
        self.core = IbCmMads(width, **cm)
        self.egress = Qp1Egress(width)
        super().__init__({
            "i": In(PacketSignature(width)),
            "o": Out(PacketSignature(width, UDP_TX_META)),
            **cm_ports(self.core.region_port),
            **{name: Out(1) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        core = m.submodules.core = self.core
        m.submodules.ingress, m.submodules.egress = self.ingress, self.egress
        wiring.connect(m, wiring.flipped(self.i), self.ingress.i)
        wiring.connect(m, self.ingress.o, core.i)
        wiring.connect(m, core.o, self.egress.i)
        wiring.connect(m, self.egress.o, wiring.flipped(self.o))
        connect_cm_ports(m, core, self)
        for c in qp1_ingress.COUNTERS:
            m.d.comb += getattr(self, f"qp1_{c}").eq(getattr(self.ingress, c))
        for c in ibcm_passive.COUNTERS:
            m.d.comb += getattr(self, c).eq(getattr(core.cm, c))
        return m
