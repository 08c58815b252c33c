"""Test-only top levels of the RoCEv2 blocks with AXI-Stream port names, for the cocotb testbenches."""

from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from rocegen.gateware.lib.axi import axi4_members, connect_axi4
from rocegen.gateware.lib.axis import axis_members, connect_axis
from rocegen.gateware.lib.records import connect_record, record_members
from rocegen.gateware.roce.cc.dcqcn_layouts import DCQCN_CONFIG, RATE_BITS
from rocegen.gateware.roce.endpoint.endpoint import QP_COUNTERS, STATS, RoceEndpoint
from rocegen.gateware.roce.frontend.stream_in import STREAM_META
from rocegen.gateware.roce.frontend.traffic_gen import GEN_CONFIG
from rocegen.gateware.roce.ibcm.ibcm_layouts import CM_EVENT, CONNECT
from rocegen.gateware.roce.icrc import IcrcCheck, IcrcInsert
from rocegen.gateware.roce.layouts import COMPLETION, TRAFFIC_CONFIG, WORK_REQUEST
from rocegen.gateware.roce.read.read_layouts import READ_WAIT_CONFIG
from rocegen.gateware.roce.requester.qp_table import CONTEXT_WRITE, PSN_WRITE, QpTable
from rocegen.gateware.roce.responder.resp_layouts import (
    CNP_CONFIG,
    RECV_COMPLETION,
    RECV_POST,
    RESP_CONFIG_WRITE,
)
from rocegen.gateware.roce.responder.responder import Responder
from rocegen.sim.testing.capture import StreamCapture
from rocegen.wire.addr import parse_ip, parse_mac

__all__ = ["IcrcTop", "EndpointTop", "MAC_CAPTURE", "capture_depth", "LINE_OVERHEAD"]

#: Line overhead of a frame beyond its bytes without FCS: FCS, preamble + SFD, inter-frame gap.
LINE_OVERHEAD = 4 + 8 + 12
#: Entries of the ring of the responder's receive completions (``rcpl_cap``)
RCPL_CAPTURE = 256
#: Largest frame the MAC capture is sized for (bytes without FCS): a 9 KB jumbo frame
MAX_FRAME = 10240


def capture_depth(width):
    """Entries of the MAC capture ring at W bits: twice the beats of the largest frame."""
    beats = 2 * -(-MAX_FRAME // (width // 8))
    return 1 << (beats - 1).bit_length()


def MAC_CAPTURE(width):
    """Fields of a MAC capture entry's payload, in bit order: (name, bits)."""
    return (("data", width), ("keep", width // 8), ("last", 1), ("user", 1))


class IcrcTop(wiring.Component):
    """Three independent ICRC paths (``tuser`` carries the packet stream's ``error`` flag):

    * ``s_tx_axis`` -> :class:`IcrcInsert` -> ``m_tx_axis``: frames without ICRC get one;
    * ``s_rx_axis`` -> :class:`IcrcCheck` -> ``m_rx_axis``: frames lose their ICRC, ``tuser``
      set on the last beat of those whose ICRC is wrong; ``rx_bad`` counts them;
    * ``s_loop_axis`` -> :class:`IcrcInsert` -> :class:`IcrcCheck` -> ``m_loop_axis``: frames
      come back unchanged; ``loop_bad`` counts ICRC failures (none expected).

    All for untagged Ethernet frames (``offset`` 14) carrying IPv4 unless told otherwise.
    """

    def __init__(self, width, offset=14, ip_version=4):
        self.width = width
        self.offset = offset
        self.ip_version = ip_version
        super().__init__({
            **axis_members("s_tx_axis", width, sink=True),
            **axis_members("m_tx_axis", width, sink=False),
            **axis_members("s_rx_axis", width, sink=True),
            **axis_members("m_rx_axis", width, sink=False),
            **axis_members("s_loop_axis", width, sink=True),
            **axis_members("m_loop_axis", width, sink=False),
            "rx_bad": wiring.Out(16),
            "loop_bad": wiring.Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        kw = {"offset": self.offset, "ip_version": self.ip_version}
        tx = m.submodules.tx = IcrcInsert(self.width, **kw)
        rx = m.submodules.rx = IcrcCheck(self.width, **kw)
        loop_tx = m.submodules.loop_tx = IcrcInsert(self.width, **kw)
        loop_rx = m.submodules.loop_rx = IcrcCheck(self.width, **kw)
        connect_axis(m, self, "s_tx_axis", tx.i, sink=True)
        connect_axis(m, self, "m_tx_axis", tx.o, sink=False)
        connect_axis(m, self, "s_rx_axis", rx.i, sink=True)
        connect_axis(m, self, "m_rx_axis", rx.o, sink=False)
        connect_axis(m, self, "s_loop_axis", loop_tx.i, sink=True)
        wiring.connect(m, loop_tx.o, loop_rx.i)
        connect_axis(m, self, "m_loop_axis", loop_rx.o, sink=False)
        with m.If(rx.icrc_bad):
            m.d.sync += self.rx_bad.eq(self.rx_bad + 1)
        with m.If(loop_rx.icrc_bad):
            m.d.sync += self.loop_bad.eq(self.loop_bad + 1)
        return m


class ResponderTop(Elaboratable):
    """The :class:`~rocegen.gateware.roce.responder.responder.Responder` (``resp``, its other ports the
    testbench's) beside the QP table it reads its contexts from (``qps``: write contexts through
    ``qps.ctl``), for the Amaranth simulator. ``mem_bytes``: the local memory written."""

    def __init__(self, width, num_qps, mem_bytes, **params):
        self.resp = Responder(width, num_qps, (mem_bytes // (width // 8) - 1).bit_length(),
                              **params)
        self.qps = QpTable(num_qps)

    def elaborate(self, platform):
        m = Module()
        m.submodules.resp, m.submodules.qps = self.resp, self.qps
        m.d.comb += [self.qps.rx_qp.eq(self.resp.ctx_qp), self.resp.ctx.eq(self.qps.rx_context)]
        return m


class EndpointTop(wiring.Component):
    """:class:`~rocegen.gateware.roce.endpoint.endpoint.RoceEndpoint` with flat port names for the
    cocotb testbenches: the MAC as ``s_axis`` (frames in); record streams as
    ``<name>_data/_valid/_ready`` (``wr``, ``qpctl``, ``qppsn``, ``gen``, and ``memw`` with
    on-chip memory); the streaming front end as ``s_msg_axis`` plus ``msg_meta``; the AXI4
    memory port as ``m_axi_*``; addresses fixed.

    The outputs the testbenches follow at speed end in :class:`~rocegen.sim.testing.capture.StreamCapture`
    rings that the cocotb side reads once per frame (:class:`~rocegen.sim.testing.cocotb_helpers.Capture`):

    * the MAC's frames out, ring ``mac_cap`` (:func:`MAC_CAPTURE` entries), with the CMAC's
      line-rate budget (``mac_credit_step``) and random backpressure (``mac_bp_threshold``,
      ``mac_bp_seed``); ports ``mac_count``, ``mac_frames``, ``mac_rd``, and ``mac_starved``
      (cycles the MAC was ready inside a frame without a beat: an underrun, must stay 0);
    * the completions, ring ``cpl_cap`` (:data:`COMPLETION` entries) with random backpressure
      (``cpl_bp_threshold``, ``cpl_bp_seed``); ports ``cpl_count``, ``cpl_rd``;
    * with ``responder=True``, the responder's receive completions, ring ``rcpl_cap``
      (:data:`~rocegen.gateware.roce.responder.resp_layouts.RECV_COMPLETION` entries, ports
      ``rcpl_count``, ``rcpl_rd``, ``rcpl_bp_threshold``, ``rcpl_bp_seed``); its receive
      buffers, region writes and CNP interval are the record inputs ``recv``, ``respcfg`` and
      ``respcnp`` (with ``reads``, the READ timer's step ``rdwait``).

    Congestion management, when the endpoint has it:

    * with ``dcqcn=True``, the reaction point's configuration as the record input ``cccfg``
      (:data:`~rocegen.gateware.roce.cc.dcqcn_layouts.DCQCN_CONFIG`) and its rate read port
      ``cc_qp`` -> ``cc_rate``;
    * with ``pfc="mac"``, the MAC's pause levels ``pause_rx`` (In(8): bit n high while the
      link partner pauses priority n) and the XOFF requests ``pause_tx`` (Out(8));
    * with either, the traffic class as the record input ``tccfg``
      (:data:`~rocegen.gateware.roce.layouts.TRAFFIC_CONFIG`: DSCP and ECN of the QPs the
      connection manager opens, VLAN priority of the frames).

    ``cycle`` counts clock edges since the simulation started; ``rx_last_cycle`` is its value
    at the last beat of the most recent frame into ``s_axis``, ``rx_frames`` counts them.

    With ``phy="xgmii"`` (``width`` 64 only) the endpoint sits behind the built-in 10G/25G XGMII
    MAC (:func:`~rocegen.gateware.core.xgmii_mac`, as in the core's XGMII build): the MAC side is
    ``xgmii_rxd``/``xgmii_rxc`` in and ``xgmii_txd``/``xgmii_txc`` out (FCS, preamble, padding
    and inter-frame gap on the line) with the MAC's ``mac_*`` counters
    (:data:`~rocegen.gateware.xgmii_top.MAC_COUNTERS`), in place of ``s_axis`` and the ``mac_cap``
    ring; ``rx_last_cycle`` and ``rx_frames`` then follow the frames the MAC hands the endpoint."""

    def __init__(self, width=512, num_qps=8, memory="onchip", mac="02:00:00:00:00:01",
                 ip="10.0.0.2", phy="axis", **params):
        from rocegen.gateware.xgmii_top import MAC_COUNTERS, XGMII_WIDTH
        if phy not in ("axis", "xgmii"):
            raise ValueError(f"phy must be axis or xgmii, not {phy!r}")
        if phy == "xgmii" and width != XGMII_WIDTH:
            raise ValueError(f"the XGMII MAC's data path is 64 bits: width must be "
                             f"{XGMII_WIDTH} with phy='xgmii', not {width!r}")
        self.endpoint = RoceEndpoint(width, num_qps, memory=memory, **params)
        self.width = width
        self.phy = phy
        self.mac = parse_mac(mac)
        self.ip = parse_ip(ip)
        ep = self.endpoint
        if phy == "axis":
            mac_members = {
                **axis_members("s_axis", width, sink=True),
                "mac_count": Out(32), "mac_frames": Out(32), "mac_rd": In(32),
                "mac_starved": Out(32), "mac_credit_step": In(32), "mac_bp_threshold": In(16),
                "mac_bp_seed": In(32),
            }
        else:
            mac_members = {"xgmii_rxd": In(64), "xgmii_rxc": In(8), "xgmii_txd": Out(64),
                           "xgmii_txc": Out(8), **{name: Out(32) for name in MAC_COUNTERS}}
        members = {
            **mac_members,
            "cpl_count": Out(32), "cpl_rd": In(32), "cpl_bp_threshold": In(16),
            "cpl_bp_seed": In(32),
            "cycle": Out(32), "rx_last_cycle": Out(32), "rx_frames": Out(32),
            **record_members("wr", WORK_REQUEST, sink=True),
            **record_members("qpctl", CONTEXT_WRITE, sink=True),
            **record_members("qppsn", PSN_WRITE, sink=True),
            **record_members("gen", GEN_CONFIG, sink=True),
            "gen_busy": Out(1), "gen_posted": Out(32), "gen_ok": Out(32), "gen_err": Out(32),
            "gen_cycles": Out(32),
            "qp_open": Out(num_qps),
            **axis_members("s_msg_axis", width, sink=True),
            "msg_meta": In(data.Layout.cast(STREAM_META).size),
            "stats_addr": In(range(len(STATS))),
            "stats_data": Out(32),
            "qp_stats_qp": In(range(num_qps)),
            "qp_stats_sel": In(range(len(QP_COUNTERS))),
            "qp_stats_data": Out(32),
        }
        if ep.responder:
            members.update({**record_members("recv", RECV_POST, sink=True),
                            "rcpl_count": Out(32), "rcpl_rd": In(32),
                            "rcpl_bp_threshold": In(16), "rcpl_bp_seed": In(32),
                            **record_members("respcfg", RESP_CONFIG_WRITE, sink=True)})
            members.update(record_members("respcnp", CNP_CONFIG, sink=True))
            if ep.reads:
                members.update(record_members("rdwait", READ_WAIT_CONFIG, sink=True))
        dcqcn, pfc = ep.config["dcqcn"], ep.config["pfc"]
        if "service_qps" in ep.signature.members:       # (with the rping server)
            members["service_qps"] = Out(num_qps)
        if "rdma_cm_disconnect" in ep.signature.members:   # (with the IB CM)
            members.update(record_members("cmdis", data.StructLayout({"qp": 8}), sink=True))
            members.update(record_members("cmconn", CONNECT, sink=True))
            members.update(record_members("cmev", CM_EVENT, sink=False))
        if dcqcn:
            members.update({**record_members("cccfg", DCQCN_CONFIG, sink=True),
                            "cc_qp": In(range(num_qps)), "cc_rate": Out(RATE_BITS)})
        if pfc == "mac":
            members.update({"pause_rx": In(8), "pause_tx": Out(8)})
        if dcqcn or pfc:
            members.update(record_members("tccfg", TRAFFIC_CONFIG, sink=True))
        if memory == "onchip":
            members.update(record_members("memw", ep.mem_w.payload.shape(), sink=True))
        else:
            sig = ep.axi.signature
            members.update(axi4_members("m_axi", sig.addr_width, sig.data_width, sig.id_width))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        ep = m.submodules.endpoint = self.endpoint
        m.d.comb += [ep.local_mac.eq(self.mac), ep.local_ip.eq(self.ip)]
        if self.phy == "axis":
            connect_axis(m, self, "s_axis", ep.mac_rx, sink=True)
            B = self.width // 8
            mac = m.submodules.mac_cap = StreamCapture(
                sum(n for _, n in MAC_CAPTURE(self.width)), capture_depth(self.width),
                bytes_width=(B).bit_length(), frame_overhead=LINE_OVERHEAD, max_credit=2 * B)
            tx = ep.mac_tx
            m.d.comb += [
                mac.i_payload.eq(Cat(tx.payload.data, tx.payload.keep, tx.payload.last,
                                     tx.payload.error)),
                mac.i_valid.eq(tx.valid), tx.ready.eq(mac.i_ready),
                mac.i_last.eq(tx.payload.last),
                mac.i_bytes.eq(sum(tx.payload.keep[k] for k in range(B))),
                mac.rd.eq(self.mac_rd), mac.credit_step.eq(self.mac_credit_step),
                mac.bp_threshold.eq(self.mac_bp_threshold), mac.seed.eq(self.mac_bp_seed),
                self.mac_count.eq(mac.count), self.mac_frames.eq(mac.frames),
                self.mac_starved.eq(mac.starved),
            ]
            cycle = mac.cycle
        else:
            from rocegen.gateware.core import xgmii_mac
            rx, tx = xgmii_mac(m, ep, counters=self)
            m.d.comb += [rx.rxd.eq(self.xgmii_rxd), rx.rxc.eq(self.xgmii_rxc),
                         self.xgmii_txd.eq(tx.txd), self.xgmii_txc.eq(tx.txc)]
            cycle = Signal(32, reset_less=True)     # like the capture ring's: rst leaves it
            m.d.sync += cycle.eq(cycle + 1)
        m.d.comb += self.cycle.eq(cycle)
        cpl = m.submodules.cpl_cap = StreamCapture(data.Layout.cast(COMPLETION).size, 64)
        m.d.comb += [
            cpl.i_payload.eq(ep.cpl.payload), cpl.i_valid.eq(ep.cpl.valid),
            ep.cpl.ready.eq(cpl.i_ready), cpl.i_last.eq(1), cpl.rd.eq(self.cpl_rd),
            cpl.bp_threshold.eq(self.cpl_bp_threshold), cpl.seed.eq(self.cpl_bp_seed),
            self.cpl_count.eq(cpl.count),
        ]
        rx_last, rx_frames = Signal(32), Signal(32)
        with m.If(ep.mac_rx.valid & ep.mac_rx.ready & ep.mac_rx.payload.last):
            m.d.sync += [rx_last.eq(cycle), rx_frames.eq(rx_frames + 1)]
        m.d.comb += [self.rx_last_cycle.eq(rx_last), self.rx_frames.eq(rx_frames)]
        connect_record(m, self, "wr", ep.wr, sink=True)
        connect_record(m, self, "qpctl", ep.qp_ctl, sink=True)
        connect_record(m, self, "qppsn", ep.qp_psn, sink=True)
        connect_record(m, self, "gen", ep.gen, sink=True)
        m.d.comb += [self.gen_busy.eq(ep.gen_busy), self.gen_posted.eq(ep.gen_posted),
                     self.gen_ok.eq(ep.gen_ok), self.gen_err.eq(ep.gen_err),
                     self.gen_cycles.eq(ep.gen_cycles), self.qp_open.eq(ep.qp_open)]
        if "service_qps" in ep.signature.members:
            m.d.comb += self.service_qps.eq(ep.service_qps)
        if "rdma_cm_disconnect" in ep.signature.members:
            connect_record(m, self, "cmconn", ep.rdma_cm_connect, sink=True)
            connect_record(m, self, "cmev", ep.rdma_cm_event, sink=False)
            m.d.comb += [ep.rdma_cm_disconnect.valid.eq(self.cmdis_valid),
                         ep.rdma_cm_disconnect.payload.eq(self.cmdis_data),
                         self.cmdis_ready.eq(ep.rdma_cm_disconnect.ready)]
        connect_axis(m, self, "s_msg_axis", ep.msg, sink=True)
        m.d.comb += ep.msg.payload.meta.as_value().eq(self.msg_meta)
        m.d.comb += [ep.stats_addr.eq(self.stats_addr), self.stats_data.eq(ep.stats_data),
                     ep.qp_stats_qp.eq(self.qp_stats_qp), ep.qp_stats_sel.eq(self.qp_stats_sel),
                     self.qp_stats_data.eq(ep.qp_stats_data)]
        if ep.memory == "onchip":
            connect_record(m, self, "memw", ep.mem_w, sink=True)
        else:
            connect_axi4(m, self, "m_axi", ep.axi)
        if ep.responder:
            connect_record(m, self, "recv", ep.recv, sink=True)
            connect_record(m, self, "respcfg", ep.resp_cfg, sink=True)
            connect_record(m, self, "respcnp", ep.resp_cnp_cfg, sink=True)
            if ep.reads:
                connect_record(m, self, "rdwait", ep.rd_wait_cfg, sink=True)
            rc = m.submodules.rcpl_cap = StreamCapture(data.Layout.cast(RECV_COMPLETION).size,
                                                       RCPL_CAPTURE)
            m.d.comb += [
                rc.i_payload.eq(ep.recv_cpl.payload), rc.i_valid.eq(ep.recv_cpl.valid),
                ep.recv_cpl.ready.eq(rc.i_ready), rc.i_last.eq(1), rc.rd.eq(self.rcpl_rd),
                rc.bp_threshold.eq(self.rcpl_bp_threshold), rc.seed.eq(self.rcpl_bp_seed),
                self.rcpl_count.eq(rc.count),
            ]
        dcqcn, pfc = ep.config["dcqcn"], ep.config["pfc"]
        if dcqcn:
            connect_record(m, self, "cccfg", ep.cc_cfg, sink=True)
            m.d.comb += [ep.cc_qp.eq(self.cc_qp), self.cc_rate.eq(ep.cc_rate)]
        if pfc == "mac":
            m.d.comb += [ep.pause_rx.eq(self.pause_rx), self.pause_tx.eq(ep.pause_tx)]
        if dcqcn or pfc:
            connect_record(m, self, "tccfg", ep.tc_cfg, sink=True)
        return m
