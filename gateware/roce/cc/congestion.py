"""The requester's congestion control: DCQCN's reaction point and the rate limiter, joined."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.stream import check_width
from rocegen.gateware.roce.cc.dcqcn import DcqcnEngine
from rocegen.gateware.roce.cc.dcqcn_layouts import CNP_QP, DCQCN_CONFIG, RATE_BITS, dcqcn_config
from rocegen.gateware.roce.cc.rate_limiter import RateLimiter
from rocegen.gateware.roce.layouts import PACKET_DESC, check_num_qps
from rocegen.wire import headers as H

__all__ = ["ReactionPoint", "WIRE_OVERHEAD", "wire_bytes"]

#: Bytes a RoCEv2 packet takes on the wire besides its payload, padding and extension headers:
#: preamble and SFD 8, Ethernet header 14, IPv4 20, UDP 8, BTH 12, ICRC 4, FCS 4, gap 12.
WIRE_OVERHEAD = 8 + H.ETH.length + H.IPV4.length + H.UDP.length + H.BTH.length + 4 + 4 + 12
#: The 802.1Q tag.
VLAN_TAG = H.ETH_VLAN.length - H.ETH.length


def wire_bytes(length, padcnt=0, *, reth=False, imm=False, vlan=False):
    """Bytes a packet of ``length`` payload bytes takes on the wire (the count the rate limiter
    and the byte counter of DCQCN use)."""
    return (length + padcnt + WIRE_OVERHEAD + (H.RETH.length if reth else 0)
            + (H.IMMDT.length if imm else 0) + (VLAN_TAG if vlan else 0))


class ReactionPoint(wiring.Component):
    """DCQCN's reaction point for the requester: a
    :class:`~rocegen.gateware.roce.cc.dcqcn.DcqcnEngine` (each QP's rate by the DCQCN law, from
    its CNPs, timers and bytes sent) driving a
    :class:`~rocegen.gateware.roce.cc.rate_limiter.RateLimiter` (a token bucket per QP) that holds
    back the scheduler's QPs.

    Parameters
    ----------
    num_qps : int
        QPs (1..256).
    width : int
        Data width W of the transmit path (64..512).
    clk_hz : int or float
        The clock (for the defaults of the DCQCN parameters).
    line_gbps : int or float
        The line rate: every QP's highest rate, in wire bytes (preamble, gap and FCS counted).
    config : dict or None
        The DCQCN configuration after reset
        (:data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG` fields, integers); default
        :func:`~rocegen.gateware.roce.cc.dcqcn_layouts.dcqcn_config` of ``clk_hz`` and
        ``line_gbps`` (the DCQCN paper's parameters, not bypassed).
    vlan : bool
        Frames carry an 802.1Q tag (4 more bytes each).

    Ports
    -----
    desc : In(stream.Signature(PACKET_DESC, always_ready=True))
        Every packet the scheduler sends, as it leaves it (valid for one cycle per packet): its
        QP and wire bytes (:func:`wire_bytes`) are charged to the QP's tokens and byte counter.
    cnp : In(stream.Signature(CNP_QP, always_ready=True))
        A CNP received for a QP (its index in the QP table).
    cfg : In(stream.Signature(DCQCN_CONFIG, always_ready=True))
        A new configuration, every parameter at once (``bypass``: every QP at line rate, CNPs
        ignored); in force a few cycles later (:data:`~rocegen.gateware.roce.cc.dcqcn.CFG_GAP`).
    allowed : Out(num_qps)
        Bit q: QP q may start a packet now (the scheduler holds the others). From registers.
    rd_qp : In(range(num_qps)); rd_rate : Out(RATE_BITS)
        A QP's current rate (bytes per cycle, Q7.20), one cycle after the address.
    bypass : Out(1)
        The configuration in force bypasses DCQCN.
    cnp_dropped : Out(1)
        A CNP was dropped: too many waiting (a pulse).

    Behaviour
    ---------
    * Latency: a CNP taken in cycle t clears the QP's ``allowed`` bit in t + 9 .. t + 14: the
      engine chooses it in t + 2 (up to :data:`~rocegen.gateware.roce.cc.dcqcn_select.WINDOW`
      cycles later while an earlier operation on the QP is in its pipeline), updates the rate
      :data:`~rocegen.gateware.roce.cc.dcqcn.PIPE` cycles later, and the limiter holds the QP
      from the cycle after; until the next refill at the new rate (at most P cycles later,
      P = ``num_qps`` rounded up to a power of two). A packet started while the bit was still
      high is charged, so the long-run rate is exact.
    * ``desc`` is registered once (its byte count), then reaches the engine and the limiter
      as in their descriptions.
    * Backpressure: none; every input is always taken.
    """

    def __init__(self, num_qps, width, *, clk_hz=322_265_625, line_gbps=100, config=None,
                 vlan=False):
        check_num_qps(num_qps)
        check_width(width)
        if config is None:
            config = dcqcn_config(clk_hz, line_gbps)
        if not isinstance(vlan, bool):
            raise TypeError(f"vlan must be a bool, not {vlan!r}")
        self.num_qps, self.width, self.vlan = num_qps, width, vlan
        self._engine = DcqcnEngine(num_qps, clk_hz, line_gbps, config=config)
        top = width // 8 << 20
        if self._engine.config["line_rate"] > top:
            raise ValueError(f"line_gbps {line_gbps} is more than a {width}-bit path moves at "
                             f"{clk_hz} Hz")
        self._limiter = RateLimiter(num_qps, width, init_rate=self._engine.config["line_rate"])
        self.config = self._engine.config
        super().__init__({
            "desc": In(stream.Signature(PACKET_DESC, always_ready=True)),
            "cnp": In(stream.Signature(CNP_QP, always_ready=True)),
            "cfg": In(stream.Signature(DCQCN_CONFIG, always_ready=True)),
            "allowed": Out(num_qps),
            "rd_qp": In(range(num_qps)),
            "rd_rate": Out(RATE_BITS),
            "bypass": Out(1),
            "cnp_dropped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        eng = m.submodules.engine = self._engine
        lim = m.submodules.limiter = self._limiter
        d = self.desc.payload
        fixed = WIRE_OVERHEAD + (VLAN_TAG if self.vlan else 0)
        sent_v, sent_q, sent_n = Signal(), Signal(8), Signal(16)
        m.d.sync += [sent_v.eq(self.desc.valid), sent_q.eq(d.qp),
                     sent_n.eq(d.length + d.padcnt + fixed + Mux(d.has_reth, H.RETH.length, 0)
                               + Mux(d.has_imm, H.IMMDT.length, 0))]
        for sink in (eng.sent, lim.sent):
            m.d.comb += [sink.valid.eq(sent_v), sink.payload.qp.eq(sent_q),
                         sink.payload.bytes.eq(sent_n)]
        wiring.connect(m, wiring.flipped(self.cnp), eng.cnp)
        wiring.connect(m, wiring.flipped(self.cfg), eng.cfg)
        wiring.connect(m, eng.rate_w, lim.rate)
        m.d.comb += [lim.bypass.eq(eng.bypass), self.bypass.eq(eng.bypass),
                     self.allowed.eq(lim.allowed), self.cnp_dropped.eq(eng.cnp_dropped),
                     eng.rd_qp.eq(self.rd_qp), self.rd_rate.eq(eng.rd_rate)]
        return m
