"""Congestion control: the traffic class register and DCQCN's reaction point."""

from amaranth.hdl import Signal
from amaranth.lib import stream
from amaranth.lib.wiring import In, Out

from rocegen.gateware.roce.cc.congestion import ReactionPoint
from rocegen.gateware.roce.cc.dcqcn_layouts import DCQCN_CONFIG, RATE_BITS, dcqcn_config
from rocegen.gateware.roce.features.feature import Feature
from rocegen.gateware.roce.layouts import ECN_ECT0, TRAFFIC_CONFIG

__all__ = ["CongestionFeature"]


class CongestionFeature(Feature):
    """The traffic class of the QPs, and with ``dcqcn`` the reaction point
    (:class:`~rocegen.gateware.roce.cc.congestion.ReactionPoint`).

    Parameters
    ----------
    cfg : EndpointConfig
        ``dscp``, ``ecn``, ``pcp`` (the traffic class after reset), ``dcqcn``,
        ``dcqcn_params``, ``num_qps``, ``width``, ``clk_hz``, ``line_gbps``, ``vlan``.

    Ports
    -----
    ``tc_cfg``: the traffic class (DSCP and ECN of the QPs opened from then on, the VLAN
    priority of every frame from the next one), always taken. With ``dcqcn``: ``cc_cfg`` (every
    DCQCN parameter and the bypass, always taken), ``cc_qp`` -> ``cc_rate`` (a QP's current
    rate, one cycle after the address).

    Behaviour
    ---------
    The traffic class register feeds the connection manager and the stack. The reaction point
    sees every packet the scheduler sends and every CNP received; the QPs it holds back are
    held by the scheduler.
    """

    def __init__(self, cfg):
        super().__init__(cfg)
        self.tc_init = {"dscp": cfg.dscp, "ecn": ECN_ECT0 if cfg.ecn else 0, "pcp": cfg.pcp}
        self.rp = None
        if cfg.dcqcn:
            params = dict(cfg.dcqcn_params or {})
            bypass = params.pop("bypass", False)
            self.rp = ReactionPoint(cfg.num_qps, cfg.width, clk_hz=cfg.clk_hz,
                                    line_gbps=cfg.line_gbps,
                                    config=dcqcn_config(cfg.clk_hz, cfg.line_gbps,
                                                        bypass=bypass, **params),
                                    vlan=cfg.vlan is not None)

    def members(self):
        members = {"tc_cfg": In(stream.Signature(TRAFFIC_CONFIG))}
        if self.cfg.dcqcn:
            members.update({"cc_cfg": In(stream.Signature(DCQCN_CONFIG)),
                            "cc_qp": In(range(self.cfg.num_qps)), "cc_rate": Out(RATE_BITS)})
        return members

    def connect(self, m, ep):
        """The traffic class register (``tc_cfg``), and the reaction point: the packets the
        scheduler sends and the CNPs received in, the QPs it holds back out."""
        f = ep.features
        tc = Signal(TRAFFIC_CONFIG, init=self.tc_init)
        with m.If(ep.tc_cfg.valid):
            m.d.sync += tc.eq(ep.tc_cfg.payload)
        m.d.comb += [ep.tc_cfg.ready.eq(1), f.connection.cm.tclass.eq(tc),
                     f.network.stack.pcp.eq(tc.pcp)]
        sched, rx = f.requester.sched, f.requester.rx
        if self.rp is None:
            return
        rp = m.submodules.reaction_point = self.rp
        m.d.comb += [
            rp.desc.valid.eq(sched.desc.valid & sched.desc.ready),
            rp.desc.payload.eq(sched.desc.payload),
            rp.cnp.valid.eq(rx.cnp), rp.cnp.payload.qp.eq(rx.cnp_qp),
            rp.cfg.valid.eq(ep.cc_cfg.valid), rp.cfg.payload.eq(ep.cc_cfg.payload),
            ep.cc_cfg.ready.eq(1),
            rp.rd_qp.eq(ep.cc_qp), ep.cc_rate.eq(rp.rd_rate),
        ]
