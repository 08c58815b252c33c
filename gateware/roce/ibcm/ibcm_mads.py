"""The IB CM's passive side at the MAD level: MADs in, the answers out."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import PacketSignature
from rocegen.gateware.roce.ibcm.ibcm_layouts import (
    CM_EVENT,
    CONNECT,
    IBCM_RX_META,
    IBCM_TX_META,
    QP_GRANT,
    QP_SET,
)
from rocegen.gateware.roce.ibcm.ibcm_passive import IbCmPassive
from rocegen.gateware.roce.ibcm.ibcm_receive import IbCmReceiver
from rocegen.gateware.roce.ibcm.ibcm_reply import IbCmReply
from rocegen.wire import ibcm as I

__all__ = ["IbCmMads", "cm_ports", "connect_cm_ports"]


def cm_ports(region_port=False):
    """The passive side's ports that a block holding it passes on: our IPv4 address, the
    region our REPs advertise (with ``region_port``: read per QP, ``region_qp`` out), the QP
    pool's handshakes, the QPs' set-ups and closes, the QPs packets arrive on, the QPs whose
    connections are to be closed, the connections to ask for and how each went."""
    return {
        **({"region_qp": Out(24)} if region_port else {}),
        "local_ip": In(32), "region": In(I.REGION.layout),
        "qp_req": Out(stream.Signature(0)), "qp_grant": In(stream.Signature(QP_GRANT)),
        "qp_free": Out(stream.Signature(24)),
        "qp_set": Out(stream.Signature(QP_SET)),
        "data_seen": In(stream.Signature(24, always_ready=True)),
        "disconnect": In(stream.Signature(24)),
        "connect": In(stream.Signature(CONNECT)),
        "connected": Out(stream.Signature(CM_EVENT)),
    }


def connect_cm_ports(m, inner, outer):
    """The :func:`cm_ports` of ``inner`` (a block inside ``outer``) joined to ``outer``'s
    (``region_qp`` when both have it)."""
    wiring.connect(m, inner.qp_req, wiring.flipped(outer.qp_req))
    wiring.connect(m, wiring.flipped(outer.qp_grant), inner.qp_grant)
    wiring.connect(m, inner.qp_free, wiring.flipped(outer.qp_free))
    wiring.connect(m, inner.qp_set, wiring.flipped(outer.qp_set))
    wiring.connect(m, wiring.flipped(outer.data_seen), inner.data_seen)
    wiring.connect(m, wiring.flipped(outer.disconnect), inner.disconnect)
    wiring.connect(m, wiring.flipped(outer.connect), inner.connect)
    wiring.connect(m, inner.connected, wiring.flipped(outer.connected))
    m.d.comb += [inner.local_ip.eq(outer.local_ip), inner.region.eq(outer.region)]
    if hasattr(inner, "region_qp") and hasattr(outer, "region_qp"):
        m.d.comb += outer.region_qp.eq(inner.region_qp)


class IbCmMads(wiring.Component):
    """:class:`~rocegen.gateware.roce.ibcm.ibcm_receive.IbCmReceiver`,
    :class:`~rocegen.gateware.roce.ibcm.ibcm_passive.IbCmPassive` (:attr:`cm`, whose counter
    strobes are read there) and :class:`~rocegen.gateware.roce.ibcm.ibcm_reply.IbCmReply` in a
    row.

    Parameters
    ----------
    width : int
        Data width W in bits (64..512, power of two).
    ca_guid, rnr_retry_count, region_port :
        The reply builder's (our CA GUID; the RNR retry count of our REPs; REPs whose region
        is read per QP).
    cm_response_timeout, max_cm_retries, local_ack_timeout, retry_count :
        The reply builder's and the passive side's: what our REQs state and how long and
        how often they wait for the REP (our ClassPortInfo's response time too).
    ports, clk_hz, and any other keyword :
        The passive side's.

    Ports
    -----
    i : In(PacketSignature(width, IBCM_RX_META))
        MADs with their senders (the receiver's ``i``).
    o : Out(PacketSignature(width, IBCM_TX_META))
        The answers (the reply builder's ``o``).
    connect, connected :
        The passive side's: connections the FPGA asks for, and how each went.
    local_ip, region, qp_req, qp_grant, qp_free, qp_set, data_seen, disconnect :
        The passive side's; with ``region_port``, ``region`` is the reply builder's (the
        region of QP ``region_qp``, one cycle after it).

    Behaviour
    ---------
    The blocks' own: a MAD is held by the receiver while the passive side decides; the reply
    builder reads an echoed MAD from the receiver's memory (``mad``). Latency and
    backpressure: see each block.
    """

    def __init__(self, width, *, ca_guid=0, rnr_retry_count=7, cm_response_timeout=20,
                 region_port=False, max_cm_retries=15, local_ack_timeout=14, retry_count=7,
                 **passive):
        self.width = width
        self.rx = IbCmReceiver(width)
        ours = {"cm_response_timeout": cm_response_timeout, "max_cm_retries": max_cm_retries,
                "local_ack_timeout": local_ack_timeout, "retry_count": retry_count}
        self.cm = IbCmPassive(**passive, **ours)
        self.reply = IbCmReply(width, ca_guid=ca_guid, rnr_retry_count=rnr_retry_count,
                               region_port=region_port, **ours)
        self.region_port = region_port
        super().__init__({
            "i": In(PacketSignature(width, IBCM_RX_META)),
            "o": Out(PacketSignature(width, IBCM_TX_META)),
            **cm_ports(region_port),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.rx, m.submodules.cm, m.submodules.reply = self.rx, self.cm, self.reply
        wiring.connect(m, wiring.flipped(self.i), self.rx.i)
        wiring.connect(m, self.rx.o, self.cm.i)
        wiring.connect(m, self.cm.o, self.reply.i)
        wiring.connect(m, self.reply.mad, self.rx.mad)
        wiring.connect(m, self.reply.o, wiring.flipped(self.o))
        connect_cm_ports(m, self.cm, self)
        m.d.comb += self.reply.local_ip.eq(self.local_ip)
        if self.region_port:
            m.d.comb += [self.cm.region.eq(0), self.reply.region.eq(self.region),
                         self.region_qp.eq(self.reply.region_qp)]
        return m
