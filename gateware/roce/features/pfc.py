"""PFC (802.1Qbb; 802.3x PAUSE too) between the endpoint's stack and the MAC."""

from amaranth.hdl import Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.mac.pfc import PfcPort, lossless_depth
from rocegen.gateware.net.stack import MAX_L2_HEADER
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.layouts import PFC_CONFIG

__all__ = ["PfcFeature", "PMTU_MAX", "IP_MTU", "pfc_rx_fifo_beats", "pfc_ingress_beats"]

#: Largest path MTU; the stack's IP MTU is sized for it.
PMTU_MAX = 4096
#: IPv4 packet of a full-PMTU RoCEv2 packet with every extension header: IPv4 20, UDP 8, BTH 12,
#: RETH 16, ImmDt 4, ICRC 4.
IP_MTU = PMTU_MAX + 64
#: Largest frame the endpoint takes.
MAX_FRAME = IP_MTU + MAX_L2_HEADER


def _lossless(cfg, **kw):
    return lossless_depth(cfg.width, line_gbps=cfg.line_gbps, max_frame=MAX_FRAME,
                          clk_hz=cfg.clk_hz, cable_ns=cfg.pfc_cable_ns, **kw)


def pfc_rx_fifo_beats(cfg):
    """The stack's receive FIFO: ``rx_fifo_beats``, with ``pfc`` made large enough for the
    headroom."""
    if cfg.pfc is None:
        return cfg.rx_fifo_beats
    return _lossless(cfg, at_least=cfg.rx_fifo_beats or 1)


def pfc_ingress_beats(cfg):
    """The responder's ingress FIFO with ``pfc`` (None: the responder's own)."""
    return _lossless(cfg) if cfg.pfc is not None and cfg.responder else None


class PfcFeature(Feature):
    """PFC on priority ``pfc_prio`` (:class:`~rocegen.gateware.mac.pfc.PfcPort`).

    Parameters
    ----------
    cfg : EndpointConfig
        ``pfc`` (``"mac"`` or ``"core"``), ``pfc_prio``, ``pfc_cable_ns``, ``line_gbps``,
        ``clk_hz``.
    buffers : dict
        The receive buffers XOFF watches, name -> depth in beats (``"rx"``: the stack's,
        ``"resp"``: the responder's ingress).

    Ports
    -----
    ``pfc_cfg`` (priority and enable, :data:`~rocegen.gateware.roce.layouts.PFC_CONFIG`,
    always taken); with ``pfc="mac"``: ``pause_rx`` (In(8)) and ``pause_tx`` (Out(8)).

    Behaviour
    ---------
    The stack's transmit stream passes the pause gate (the endpoint starts no frame while the
    link partner pauses its priority); XOFF/XON follow the receive buffers' levels. ``"core"``:
    the endpoint decodes and sends the pause frames; ``"mac"``: the MAC does.
    """

    def __init__(self, cfg, buffers):
        super().__init__(cfg)
        self.port = PfcPort(cfg.width, cfg.clk_hz, cfg.line_gbps, mode=cfg.pfc, buffers=buffers,
                            max_frame=MAX_FRAME, cable_ns=cfg.pfc_cable_ns, prio=cfg.pfc_prio)

    def members(self):
        members = {"pfc_cfg": In(stream.Signature(PFC_CONFIG))}
        if self.cfg.pfc == "mac":
            members.update({"pause_rx": In(8), "pause_tx": Out(8)})
        return members

    def connect(self, m, ep):
        """PFC between the stack and the MAC: the transmit stream through the pause gate (and,
        ``"core"``, the pause frames' decoder and sender), the receive FIFO's level for XOFF,
        the run-time priority and enable (``pfc_cfg``)."""
        st = ep.features.network.stack
        pfc = m.submodules.pfc = self.port
        wiring.connect(m, st.mac_tx, pfc.i)
        wiring.connect(m, pfc.o, wiring.flipped(ep.mac_tx))
        cfg = Signal(PFC_CONFIG, init={"enable": 1, "prio": pfc.prio.init})
        with m.If(ep.pfc_cfg.valid):
            m.d.sync += cfg.eq(ep.pfc_cfg.payload)
        m.d.comb += [ep.pfc_cfg.ready.eq(1), pfc.prio.eq(cfg.prio), pfc.enable.eq(cfg.enable),
                     pfc.local_mac.eq(ep.local_mac), pfc.level_rx.eq(st.rx_level)]
        if ep.features.responder is not None:
            m.d.comb += pfc.level_resp.eq(ep.features.responder.resp.ingress_level)
        if pfc.mode == "core":
            rx = ep.mac_rx
            m.d.comb += [pfc.rx_valid.eq(rx.valid), pfc.rx_ready.eq(rx.ready),
                         pfc.rx_data.eq(rx.payload.data), pfc.rx_keep.eq(rx.payload.keep),
                         pfc.rx_last.eq(rx.payload.last), pfc.rx_error.eq(rx.payload.error)]
        else:
            m.d.comb += [pfc.pause_in.eq(ep.pause_rx), ep.pause_tx.eq(pfc.pause_out)]
